"""attention_fusion: attention written with primitive ops becomes one SDPA node.

Each model runs optimised (default level), with the pass switched off by name and with every
pass off (level 0); all must equal onnxruntime (or the reference evaluator where onnxruntime
lacks the kernel). Fusion is asserted through ``graph_nodes()``; near misses must stay unfused
and still be right.
"""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from oracle import ort_outputs, reference_outputs

import onnxjit

_ET = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.float16): TensorProto.FLOAT16,
}


def _model(
    *,
    dtype=np.float32,
    b=2,
    h=3,
    s=7,
    d=8,
    scale="div_after",
    mask=None,
    where=None,
    where_first=False,
    nan_guard=False,
    k_form="transpose",
    softmax_opset=13,
    softmax_axis=-1,
    dyn=False,
    extra_outputs=(),
    scale_value=None,
):
    """One attention block over graph inputs q, k, v (and mask / cond), plus its feeds.

    scale: "div_after" | "mul_after" | "div_q" | "mul_q" | "sqrt_both" (torch) | "none" |
    "input" (Div by a graph input: not a constant) | "after_mask" (Div after the Add).
    mask: None or the shape of an additive float mask. where: None, "keep" (Where(cond, s,
    -inf)) or "swap" (Where(cond, -1e9, s)) with a causal (s, s) condition.
    k_form: "transpose" (Transpose perm [0,1,3,2]), "kt" (K^T is a graph input),
    "bshd" (K is (b, s, h, d) transposed by perm [0,2,3,1]).
    """
    dtype = np.dtype(dtype)
    et = _ET[dtype]
    rng = np.random.default_rng(42)
    S = "s" if dyn else s
    inits, nodes = [], []
    feeds = {
        "q": rng.standard_normal((b, h, s, d)).astype(dtype),
        "v": rng.standard_normal((b, h, s, d)).astype(dtype),
    }
    inputs = [
        helper.make_tensor_value_info("q", et, [b, h, S, d]),
        helper.make_tensor_value_info("v", et, [b, h, S, d]),
    ]
    k = rng.standard_normal((b, h, s, d)).astype(dtype)
    if k_form == "transpose":
        feeds["k"] = k
        inputs.append(helper.make_tensor_value_info("k", et, [b, h, S, d]))
        nodes.append(helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]))
    elif k_form == "kt":
        feeds["kt"] = np.ascontiguousarray(k.transpose(0, 1, 3, 2))
        inputs.append(helper.make_tensor_value_info("kt", et, [b, h, d, S]))
    else:
        feeds["k"] = np.ascontiguousarray(k.transpose(0, 2, 1, 3))
        inputs.append(helper.make_tensor_value_info("k", et, [b, S, h, d]))
        nodes.append(helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 3, 1]))

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    c = scale_value if scale_value is not None else np.sqrt(d)
    q, kt = "q", "kt"
    if scale == "div_q":
        nodes.append(helper.make_node("Div", ["q", const("c", c)], ["qs"]))
        q = "qs"
    elif scale == "mul_q":
        nodes.append(helper.make_node("Mul", [const("c", 1 / c), "q"], ["qs"]))
        q = "qs"
    elif scale == "sqrt_both":
        r = const("r", 1 / np.sqrt(c))
        nodes.append(helper.make_node("Mul", ["q", r], ["qs"]))
        nodes.append(helper.make_node("Mul", ["kt", r], ["kts"]))
        q, kt = "qs", "kts"
    nodes.append(helper.make_node("MatMul", [q, kt], ["s0"]))
    cur = "s0"

    def step(op, *ins):
        nonlocal cur
        out = f"{cur}_{op.lower()}"
        nodes.append(helper.make_node(op, list(ins), [out]))
        cur = out

    if scale == "div_after":
        step("Div", cur, const("c", c))
    elif scale == "mul_after":
        step("Mul", cur, const("c", 1 / c))
    elif scale == "input":
        inputs.append(helper.make_tensor_value_info("c", et, []))
        feeds["c"] = np.asarray(c, dtype=dtype)
        step("Div", cur, "c")

    def add_mask():
        m = np.where(rng.random(mask) < 0.25, -1e4, 0.0).astype(dtype)
        feeds["mask"] = m
        shape = [S if x == s and dyn else x for x in mask]
        inputs.append(helper.make_tensor_value_info("mask", et, shape))
        step("Add", cur, "mask")

    def add_where():
        feeds["cond"] = np.tril(np.ones((s, s), dtype=bool))
        if where == "swap":
            feeds["cond"] = ~feeds["cond"]
        inputs.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, [S, S]))
        if where == "keep":
            step("Where", "cond", cur, const("fill", -np.inf))
        else:
            step("Where", "cond", const("fill", -1e9), cur)

    if where and where_first:
        add_where()
    if mask is not None:
        add_mask()
    if where and not where_first:
        add_where()
    if scale == "after_mask":
        step("Div", cur, const("c", c))
    kw = {} if softmax_axis is None else {"axis": softmax_axis}
    nodes.append(helper.make_node("Softmax", [cur], ["p"], **kw))
    p = "p"
    if nan_guard:
        nodes.append(helper.make_node("IsNaN", ["p"], ["isnan"]))
        nodes.append(helper.make_node("Where", ["isnan", const("zero", 0.0), "p"], ["pg"]))
        p = "pg"
    nodes.append(helper.make_node("MatMul", [p, "v"], ["y"]))
    outputs = [helper.make_tensor_value_info("y", et, [b, h, S, d])]
    shapes = {"kt": [b, h, d, S], "s0": [b, h, S, S], "p": [b, h, S, S], "s0_neg": [b, h, S, S]}
    for name in extra_outputs:
        outputs.append(helper.make_tensor_value_info(name, et, shapes[name]))
        if name == "s0":  # read by a second node too, not only as a graph output
            nodes.append(helper.make_node("Neg", ["s0"], ["s0_neg"]))
            outputs.append(helper.make_tensor_value_info("s0_neg", et, shapes["s0_neg"]))
    graph = helper.make_graph(nodes, "attention", inputs, outputs, initializer=inits)
    opset = 17 if softmax_opset >= 13 else softmax_opset
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model, feeds


# The float16 graphs here check the fused operators' own float16 kernels, which serve CUDA
# sessions; on the CPU the float16_in_float32 pass would compute them in float32 instead.
F16_KERNELS = ["float16_in_float32"]


def _session(model, level=None, disabled=()):
    so = onnxjit.SessionOptions()
    if level is not None:
        so.graph_optimization_level = onnxjit.GraphOptimizationLevel(level)
    return onnxjit.InferenceSession(
        model.SerializeToString(), so, disabled_optimizers=[*disabled, *F16_KERNELS]
    )


def _fused(sess) -> list:
    return [n for n in sess.graph_nodes() if n.op_type == "SDPA"]


def _sdpa_attrs(sess) -> dict:
    """The attributes of the (first) SDPA node, read from the session's optimised graph."""
    # graph_nodes() lists names and members only; the bound graph holds the attributes.
    return next(n.attrs for n in sess._model.graph.nodes if n.op_type == "SDPA")


def _tol(dtype):
    return {np.float64: (1e-10, 1e-12), np.float32: (2e-5, 2e-6), np.float16: (2e-2, 2e-2)}[
        np.dtype(dtype).type
    ]


def _check(model, feeds, *, fused: bool, oracle="ort", dtype=np.float32, n_fused=1):
    """Optimised, pass-off and level-0 runs all equal the oracle; fusion happened or not."""
    want = ort_outputs(model, feeds) if oracle == "ort" else reference_outputs(model, feeds)
    rtol, atol = _tol(dtype)
    on = _session(model)
    assert len(_fused(on)) == (n_fused if fused else 0), [n.op_type for n in on.graph_nodes()]
    for sess in (on, _session(model, disabled=["attention_fusion"]), _session(model, level=0)):
        got = sess.run(None, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    off = _session(model, disabled=["attention_fusion"])
    assert not _fused(off)
    return on


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scale", ["div_after", "mul_after", "div_q", "mul_q", "sqrt_both", "none"])
def test_scale_forms(dtype, scale):
    model, feeds = _model(dtype=dtype, scale=scale, mask=(2, 1, 1, 7))
    on = _check(model, feeds, fused=True, dtype=dtype)
    want = 1.0 if scale == "none" else 1 / np.sqrt(8)
    assert np.isclose(_sdpa_attrs(on)["scale"], want, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "mask", [(2, 1, 1, 7), (1, 1, 7, 7), (7, 7), (2, 3, 7, 7), (7,), (2, 1, 7, 1), (1,)]
)
def test_mask_broadcast_shapes(dtype, mask):
    model, feeds = _model(dtype=dtype, mask=mask)
    _check(model, feeds, fused=True, dtype=dtype)


def test_mask_that_widens_the_scores_takes_the_general_path():
    # Scores (2, 3, 7, 7) plus a (4, 1, 1, 1, 7) mask: rank 5 output, numpy path, still exact.
    model, feeds = _model(mask=(4, 1, 1, 1, 7))
    model.graph.output[0].type.tensor_type.shape.Clear()
    for dim in (4, 2, 3, 7, 8):
        model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = dim
    _check(model, feeds, fused=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("where", ["keep", "swap"])
@pytest.mark.parametrize("where_first", [False, True])
def test_causal_where(dtype, where, where_first):
    model, feeds = _model(dtype=dtype, where=where, mask=(2, 1, 1, 7), where_first=where_first)
    _check(model, feeds, fused=True, dtype=dtype)


def test_fully_masked_rows_and_nan_guard():
    # torch's boolean-mask export: Add of a 0/-inf mask, Softmax, Where(IsNaN(p), 0, p).
    model, feeds = _model(mask=(7, 7), nan_guard=True)
    feeds["mask"][2] = -np.inf  # query 2 may attend nothing: NaN row, zeroed by the guard
    feeds["mask"][4, 3] = -np.inf
    on = _check(model, feeds, fused=True)
    # Transpose, MatMul, Div, Add, Softmax, IsNaN, Where, MatMul
    assert len(_fused(on)[0].members) == 8
    # Without the guard the row is NaN in both (the fused kernel keeps softmax's NaN).
    model, feeds = _model(mask=(7, 7))
    feeds["mask"][2] = -np.inf
    want = ort_outputs(model, feeds)[0]
    got = _session(model).run(None, feeds)[0]
    assert np.isnan(want[:, :, 2]).all() and np.isnan(got[:, :, 2]).all()
    np.testing.assert_allclose(np.delete(got, 2, 2), np.delete(want, 2, 2), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("k_form", ["transpose", "kt", "bshd"])
def test_key_layouts(k_form):
    model, feeds = _model(k_form=k_form, mask=(2, 1, 1, 7))
    on = _check(model, feeds, fused=True)
    attrs = _sdpa_attrs(on)
    # K^T made from a (b, s, h, d) K by perm [0, 2, 3, 1] is read in place as K
    assert attrs["k_transposed"] == (1 if k_form == "kt" else 0)
    assert attrs.get("k_bshd", 0) == (1 if k_form == "bshd" else 0)


def test_transpose_of_k_read_elsewhere_stays():
    model, feeds = _model(extra_outputs=("kt",))
    on = _check(model, feeds, fused=True)
    assert "Transpose" in [n.op_type for n in on.graph_nodes()]


def test_dynamic_sequence_length():
    model, feeds = _model(dyn=True, mask=(2, 1, 1, 7), where="keep")
    on = _check(model, feeds, fused=True)
    for s in (1, 5, 19):
        _, f = _model(s=s, mask=(2, 1, 1, s), where="keep")
        want = ort_outputs(model, f)
        np.testing.assert_allclose(on.run(None, f)[0], want[0], rtol=2e-5, atol=2e-6)


def test_parallel_path():
    # 2 * 4 * 128 * 128 scores = 2**17: the parallel row kernel.
    model, feeds = _model(b=2, h=4, s=128, d=16, mask=(2, 1, 1, 128), where="keep")
    _check(model, feeds, fused=True)


def test_rank3_and_rank2_attention():
    # (heads, s, d) like nn.MultiheadAttention's batch*heads layout, and a single 2-D head.
    rng = np.random.default_rng(3)
    for shape in ((6, 5, 4), (5, 4)):
        n = len(shape)  # noqa: F841
        nodes = [
            helper.make_node(
                "Transpose",
                ["k"],
                ["kt"],
                perm=[*range(len(shape) - 2), len(shape) - 1, len(shape) - 2],
            ),
            helper.make_node("MatMul", ["q", "kt"], ["s"]),
            helper.make_node("Mul", ["s", "c"], ["ss"]),
            helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
            helper.make_node("MatMul", ["p", "v"], ["y"]),
        ]
        vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n in "qkv"]
        graph = helper.make_graph(
            nodes,
            "g",
            vi,
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
            initializer=[numpy_helper.from_array(np.float32(0.5), "c")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in "qkv"}
        _check(model, feeds, fused=True)


@pytest.mark.parametrize("axis", [-1, 3, None])
def test_softmax_11_on_the_last_axis(axis):
    # Softmax-11 coerces to 2-D at `axis`: the same as a last-axis softmax when axis is the
    # last one (-1, or 3 with a known rank 4). Its default axis (1) is not: never fused.
    model, feeds = _model(mask=(2, 1, 1, 7), softmax_opset=11, softmax_axis=axis)
    _check(model, feeds, fused=axis is not None)


@pytest.mark.parametrize(
    "case",
    [
        "softmax_axis",
        "scale_not_constant",
        "scores_used_elsewhere",
        "probs_used_elsewhere",
        "scale_after_mask",
        "non_scalar_scale",
    ],
)
def test_near_misses_are_not_fused(case):
    kw: dict = {"mask": (2, 1, 1, 7)}
    if case == "softmax_axis":
        kw["softmax_axis"] = -2
    elif case == "scale_not_constant":
        kw["scale"] = "input"
    elif case == "scores_used_elsewhere":
        kw["extra_outputs"] = ("s0",)
    elif case == "probs_used_elsewhere":
        kw["extra_outputs"] = ("p",)
    elif case == "scale_after_mask":
        kw["scale"] = "after_mask"
    else:
        kw["scale_value"] = np.linspace(1.0, 3.0, 7)  # a per-key Div: not a scalar
    model, feeds = _model(**kw)
    _check(model, feeds, fused=False)


def test_float16_runs_in_float32():
    model, feeds = _model(dtype=np.float16, mask=(2, 1, 1, 7), where="keep")
    _check(model, feeds, fused=True, dtype=np.float16, oracle="ref")


def test_two_layers_share_a_mask():
    rng = np.random.default_rng(5)
    shape = [1, 2, 6, 4]
    nodes, inits = [], [numpy_helper.from_array(np.float32(2.0), "c")]
    x = "x"
    for i in range(2):
        nodes += [
            helper.make_node("Transpose", [x], [f"t{i}"], perm=[0, 1, 3, 2]),
            helper.make_node("MatMul", [x, f"t{i}"], [f"s{i}"]),
            helper.make_node("Div", [f"s{i}", "c"], [f"d{i}"]),
            helper.make_node("Add", [f"d{i}", "mask"], [f"a{i}"]),
            helper.make_node("Softmax", [f"a{i}"], [f"p{i}"], axis=-1),
            helper.make_node("MatMul", [f"p{i}", x], [f"y{i}"]),
        ]
        x = f"y{i}"
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, 1, 6]),
        ],
        [helper.make_tensor_value_info("y1", TensorProto.FLOAT, shape)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {
        "x": rng.standard_normal(shape).astype(np.float32),
        "mask": np.array([[[[0, 0, -1e4, 0, 0, -1e4]]]], np.float32),
    }
    _check(model, feeds, fused=True, n_fused=2)


def _torch_model(kind: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A torch export (opset 17, TorchScript exporter), folded by onnxruntime's basic level.

    torch computes the scale from Shape(q) at run time (Shape, Slice, Cast, Sqrt, Div, Sqrt);
    with static shapes onnxruntime's constant folding turns it into the constants the pattern
    needs (onnxjit's own shape folding is a separate pass).
    """
    torch = pytest.importorskip("torch")
    import onnxruntime as ort

    torch.manual_seed(0)
    nn = torch.nn
    x = torch.randn(2, 9, 32)
    if kind == "sdpa_causal":

        class M(nn.Module):
            def forward(self, q, k, v):
                return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

        args = tuple(torch.randn(2, 4, 9, 8) for _ in range(3))
        mod = M()
    elif kind == "sdpa_bool_mask":

        class M(nn.Module):
            def forward(self, q, k, v, m):
                return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)

        m = torch.rand(9, 9) > 0.3
        m[3] = False  # a fully masked row: torch's NaN guard
        args = (*(torch.randn(2, 4, 9, 8) for _ in range(3)), m)
        mod = M()
    elif kind == "mha":
        mha = nn.MultiheadAttention(32, 4, batch_first=True).eval()

        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.m = mha

            def forward(self, x):
                return self.m(x, x, x, need_weights=False)[0]

        args, mod = (x,), M()
    else:
        enc = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0).eval()

        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.e = enc

            def forward(self, x):
                return self.e(x, is_causal=False)

        args, mod = (x,), M()
    buf = io.BytesIO()
    # Not under no_grad: in eval mode without autograd torch takes its fused native kernels
    # (_native_multi_head_attention), which the TorchScript exporter cannot export.
    torch.onnx.export(mod, args, buf, opset_version=17, dynamo=False)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        so.optimized_model_filepath = os.path.join(tmp, "m.onnx")
        sess = ort.InferenceSession(buf.getvalue(), so, providers=["CPUExecutionProvider"])
        model = onnx.load(so.optimized_model_filepath)
    feeds = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)}
    return model, feeds


@pytest.mark.parametrize("kind", ["sdpa_causal", "sdpa_bool_mask", "mha", "encoder_layer"])
def test_torch_exports(kind):
    model, feeds = _torch_model(kind)
    _check(model, feeds, fused=True)


def test_scores_added_to_themselves_are_not_a_mask():
    # Add(s, s): the "mask" is a value inside the pattern, so nothing can be fused.
    rng = np.random.default_rng(9)
    shape = [1, 2, 5, 4]
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Add", ["s", "s"], ["s2"]),
        helper.make_node("Softmax", ["s2"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "qkv"]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)]
    model = helper.make_model(
        helper.make_graph(nodes, "g", vi, out), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in "qkv"}
    _check(model, feeds, fused=False)


def _bshd_model(
    *, b=2, h=3, s=7, d=8, k_form="split", dtype=np.float32, read_q=False, dyn=False, kv_heads=None
):
    """Attention over (b, s, h, d) projections as exporters write it: the head split of Q, K
    and V (Transpose perm [0, 2, 1, 3]; K^T by [0, 2, 3, 1] when ``k_form`` is "kt", else the
    split then a swap of the last two axes), a mask, and the merge of the heads after P V.
    ``read_q``: the split Q is also a graph output (its Transpose must stay). ``kv_heads``: K
    and V with that many heads (1: one head shared by every query head, which MatMul
    broadcasts)."""
    dtype = np.dtype(dtype)
    et = _ET[dtype]
    rng = np.random.default_rng(7)
    S = "s" if dyn else s
    hk = h if kv_heads is None else kv_heads
    feeds = {n: rng.standard_normal((b, s, h if n == "q" else hk, d)).astype(dtype) for n in "qkv"}
    feeds["mask"] = np.where(rng.random((b, 1, 1, s)) < 0.25, -1e4, 0.0).astype(dtype)
    inputs = [helper.make_tensor_value_info(n, et, [b, S, h if n == "q" else hk, d]) for n in "qkv"]
    inputs.append(helper.make_tensor_value_info("mask", et, [b, 1, 1, S]))
    c = numpy_helper.from_array(np.asarray(np.sqrt(d), dtype=dtype), "c")
    nodes = [
        helper.make_node("Transpose", ["q"], ["qh"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["v"], ["vh"], perm=[0, 2, 1, 3]),
    ]
    if k_form == "kt":
        nodes.append(helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 3, 1]))
    else:
        nodes.append(helper.make_node("Transpose", ["k"], ["kh"], perm=[0, 2, 1, 3]))
        nodes.append(helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2]))
    nodes += [
        helper.make_node("MatMul", ["qh", "kt"], ["s0"]),
        helper.make_node("Div", ["s0", "c"], ["s1"]),
        helper.make_node("Add", ["s1", "mask"], ["s2"]),
        helper.make_node("Softmax", ["s2"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "vh"], ["yh"]),
        helper.make_node("Transpose", ["yh"], ["y"], perm=[0, 2, 1, 3]),
    ]
    outputs = [helper.make_tensor_value_info("y", et, [b, S, h, d])]
    if read_q:
        outputs.append(helper.make_tensor_value_info("qh", et, [b, h, S, d]))
    graph = helper.make_graph(nodes, "attention_bshd", inputs, outputs, initializer=[c])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, feeds


@pytest.mark.parametrize("k_form", ["split", "kt"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_head_split_and_merge_read_in_place(k_form, dtype):
    model, feeds = _bshd_model(k_form=k_form, dtype=dtype)
    on = _check(model, feeds, fused=True, dtype=dtype)
    assert "Transpose" not in [n.op_type for n in on.graph_nodes()]
    attrs = _sdpa_attrs(on)
    assert [attrs.get(f"{x}_bshd", 0) for x in "qkvy"] == [1, 1, 1, 1]
    assert attrs["k_transposed"] == 0


def test_head_split_read_elsewhere_stays():
    model, feeds = _bshd_model(read_q=True)
    on = _check(model, feeds, fused=True)
    kept = [n for n in on._model.graph.nodes if n.op_type == "Transpose"]
    assert [n.attrs["perm"] for n in kept] == [[0, 2, 1, 3]]
    attrs = _sdpa_attrs(on)
    assert [attrs.get(f"{x}_bshd", 0) for x in "qkvy"] == [0, 1, 1, 1]


def test_head_layouts_parallel_and_dynamic():
    # 2 * 4 * 128 * 128 scores: the pool kernel reading and writing interleaved heads
    model, feeds = _bshd_model(b=2, h=4, s=128, d=16)
    on = _check(model, feeds, fused=True)
    want = ort_outputs(model, feeds)[0]
    for _ in range(2):  # the planning run, then the plan's bound kernel
        np.testing.assert_allclose(on.run(None, feeds)[0], want, rtol=2e-5, atol=2e-6)
    model, feeds = _bshd_model(dyn=True)
    on = _check(model, feeds, fused=True)
    for s in (1, 5, 19):
        _, f = _bshd_model(s=s)
        np.testing.assert_allclose(
            on.run(None, f)[0], ort_outputs(model, f)[0], rtol=2e-5, atol=2e-6
        )


@pytest.mark.parametrize("k_form", ["split", "kt"])
def test_head_layouts_with_one_shared_key_value_head(k_form):
    # K and V of one head in (b, s, 1, d): head strides 0, broadcast over the query heads
    model, feeds = _bshd_model(k_form=k_form, kv_heads=1, h=4)
    on = _check(model, feeds, fused=True)
    assert "Transpose" not in [n.op_type for n in on.graph_nodes()]
    want = ort_outputs(model, feeds)[0]
    np.testing.assert_allclose(on.run(None, feeds)[0], want, rtol=2e-5, atol=2e-6)
