"""LayerNorm / SkipLayerNorm / RMSNorm / Gelu / Softmax pattern fusions (passes/patterns_norm).

Each case builds a small model the way an exporter writes the pattern, runs it with the passes
(default level), with ``graph_optimization_level = 0`` and with the pass switched off by name,
compares all three with the oracle (onnxruntime for float32/float64; onnx's ReferenceEvaluator
for float16, where onnxruntime lacks some primitive kernels), and checks which nodes ran.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from oracle import assert_close, ort_outputs, reference_outputs

import onnxjit
from onnxjit.kernels import _jit

F16, F32, F64 = np.float16, np.float32, np.float64
# float64: the fused GELU uses exact sqrt(2) etc. where the graph holds float32-rounded constants
# (1.4142135), a 6e-8 relative difference the passes accept by design.
TOL = {F16: (2e-2, 2e-2), F32: (1e-4, 1e-5), F64: (1e-6, 1e-7)}


class Builder:
    """Collects nodes and constants of a one-output model (constants in the model's type)."""

    def __init__(self, dtype=F32):
        self.dtype = np.dtype(dtype)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def const(self, value, dtype=None) -> str:
        self._n += 1
        name = f"c{self._n}"
        arr = np.asarray(value, dtype=dtype or self.dtype)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def op(self, op_type: str, *inputs: str, **attrs) -> str:
        self._n += 1
        out = f"v{self._n}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def model(self, inputs, outputs, opset) -> onnx.ModelProto:
        """``inputs``: (name, shape) pairs; ``outputs``: (value, name, shape) triples."""
        et = helper.np_dtype_to_tensor_dtype(self.dtype)
        nodes = list(self.nodes)
        outs = []
        for value, name, shape in outputs:
            nodes.append(helper.make_node("Identity", [value], [name]))
            outs.append(helper.make_tensor_value_info(name, et, shape))
        ins = [helper.make_tensor_value_info(n, et, s) for n, s in inputs]
        g = helper.make_graph(nodes, "g", ins, outs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        return m


# The float16 graphs here check the fused operators' own float16 kernels, which serve CUDA
# sessions; on the CPU the float16_in_float32 pass would compute them in float32 instead.
F16_KERNELS = ["float16_in_float32"]


def run_all(model, feeds, dtype, pass_name, expect_ops, *, absent=(), ref=False):
    """Run optimised / unoptimised / pass-off; compare with the oracle; check the nodes.

    The oracle is onnxruntime, or the reference evaluator for float16 and where ``ref`` (float64
    Erf: onnxruntime has no double Erf kernel)."""
    use_ref = ref or np.dtype(dtype) == F16
    want = reference_outputs(model, feeds) if use_ref else ort_outputs(model, feeds)
    rtol, atol = TOL[dtype]
    sess = onnxjit.InferenceSession(model, disabled_optimizers=F16_KERNELS)
    ops = [n.op_type for n in sess.graph_nodes()]
    for g, w in zip(sess.run(None, feeds), want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert_close(g, w, rtol, atol, "optimised")
    for op in expect_ops:
        assert op in ops, (op, ops)
    for op in absent:
        assert op not in ops, (op, ops)
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = 0
    plain = onnxjit.InferenceSession(model, so)
    for g, w in zip(plain.run(None, feeds), want):
        assert_close(g, w, rtol, atol, "unoptimised")
    off = onnxjit.InferenceSession(model, disabled_optimizers=[pass_name, *F16_KERNELS])
    off_ops = [n.op_type for n in off.graph_nodes()]
    for op in expect_ops:
        if op not in ("Softmax", "LogSoftmax"):
            assert op not in off_ops, (op, off_ops)
    assert pass_name not in off.stats()["passes"]
    for g, w in zip(off.run(None, feeds), want):
        assert_close(g, w, rtol, atol, "pass off")
    return ops


def _feed(shape, dtype, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale + 0.3).astype(dtype)


def _dims(shape, dynamic):
    if not dynamic:
        return list(shape)
    return [f"d{i}" for i in range(len(shape) - 1)] + [shape[-1]]


# --------------------------------------------------------------------------------------------
# LayerNorm


def _reduce_mean(b: Builder, x: str, axes, opset: int) -> str:
    if opset >= 18:
        return b.op("ReduceMean", x, b.const(axes, np.int64), keepdims=1)
    return b.op("ReduceMean", x, axes=list(axes), keepdims=1)


def _inv_sqrt_div(b: Builder, num: str, var: str, eps: float, div: str, eps_first=False) -> str:
    e = b.const(eps)
    ve = b.op("Add", e, var) if eps_first else b.op("Add", var, e)
    if div == "pow":
        return b.op("Mul", num, b.op("Pow", ve, b.const(-0.5)))
    sd = b.op("Sqrt", ve)
    if div == "div":
        return b.op("Div", num, sd)
    if div == "recip":
        return b.op("Mul", b.op("Reciprocal", sd), num)
    return b.op("Mul", num, b.op("Div", b.const(1.0), sd))  # "one_over"


def layernorm(
    b: Builder, x, axes, opset, sq="pow", div="div", gamma=None, beta=None, eps=1e-5
) -> str:
    m = _reduce_mean(b, x, axes, opset)
    d = b.op("Sub", x, m)
    d2 = b.op("Pow", d, b.const(2.0)) if sq == "pow" else b.op("Mul", d, d)
    v = _reduce_mean(b, d2, axes, opset)
    y = _inv_sqrt_div(b, d, v, eps, div, eps_first=sq == "mul")
    if gamma is not None:
        y = b.op("Mul", y, b.const(gamma))
    if beta is not None:
        y = b.op("Add", b.const(beta), y)
    return y


@pytest.mark.parametrize(
    "dtype,opset,sq,div,affine",
    [
        (F32, 17, "pow", "div", "both"),
        (F32, 13, "mul", "recip", "gamma"),
        (F32, 18, "pow", "one_over", "none"),
        (F32, 18, "mul", "pow", "both"),
        (F64, 17, "pow", "div", "both"),
        (F16, 18, "mul", "recip", "both"),
    ],
)
def test_layernorm(dtype, opset, sq, div, affine):
    shape = (2, 5, 24)
    b = Builder(dtype)
    rng = np.random.default_rng(1)
    gamma = rng.standard_normal(24) if affine != "none" else None
    beta = rng.standard_normal(24) if affine == "both" else None
    y = layernorm(b, "x", [-1], opset, sq, div, gamma, beta)
    model = b.model([("x", shape)], [(y, "y", shape)], opset)
    ops = run_all(model, {"x": _feed(shape, dtype)}, dtype, "layernorm_fusion", ["LayerNorm"])
    assert ops == ["LayerNorm", "Identity"] or ops == ["LayerNorm"]


@pytest.mark.parametrize("dynamic", [False, True])
def test_layernorm_two_trailing_axes(dynamic):
    shape = (3, 4, 6)
    b = Builder(F32)
    gamma = np.random.default_rng(2).standard_normal((4, 6))
    y = layernorm(b, "x", [-2, -1], 17, gamma=gamma, beta=np.float32(0.25).reshape(1))
    dims = _dims(shape, dynamic)
    model = b.model([("x", dims)], [(y, "y", dims)], 17)
    run_all(model, {"x": _feed(shape, F32)}, F32, "layernorm_fusion", ["LayerNorm"])


def test_layernorm_positive_axis_with_known_rank():
    shape = (3, 16)
    b = Builder(F32)
    y = layernorm(b, "x", [1], 17)
    model = b.model([("x", shape)], [(y, "y", shape)], 17)
    run_all(model, {"x": _feed(shape, F32)}, F32, "layernorm_fusion", ["LayerNorm"])


def test_layernorm_parallel_rows():
    shape = (_jit.PARALLEL_THRESHOLD // 256 + 9, 256)
    b = Builder(F32)
    g = np.random.default_rng(3).standard_normal(256)
    y = layernorm(b, "x", [-1], 17, gamma=g, beta=g[::-1].copy())
    model = b.model([("x", shape)], [(y, "y", shape)], 17)
    run_all(model, {"x": _feed(shape, F32, scale=5.0)}, F32, "layernorm_fusion", ["LayerNorm"])


def test_layernorm_gamma_broadcasts_beyond_the_row():
    # x's last dim is 1 and gamma's is 4: the Mul broadcasts the row out to 4 values. The fused
    # node must give the same (3, 4) result (its numpy path).
    b = Builder(F32)
    y = layernorm(b, "x", [-1], 17, gamma=np.arange(1, 5), beta=np.ones(4))
    model = b.model([("x", (3, 1))], [(y, "y", (3, 4))], 17)
    run_all(model, {"x": _feed((3, 1), F32)}, F32, "layernorm_fusion", ["LayerNorm"])


@pytest.mark.parametrize(
    "case", ["axis0", "deviation_read_elsewhere", "pow3", "keepdims0", "eps_tensor", "axes_mixed"]
)
def test_layernorm_near_misses_not_fused(case):
    shape = (4, 8)
    b = Builder(F32)
    outputs = []
    axes = [0] if case == "axis0" else [-1]
    if case == "axes_mixed":
        axes = [-1]
    m = (
        b.op("ReduceMean", "x", axes=axes, keepdims=0 if case == "keepdims0" else 1)
        if case != "keepdims0"
        else b.op(
            "Unsqueeze", b.op("ReduceMean", "x", axes=[-1], keepdims=0), b.const([1], np.int64)
        )
    )
    d = b.op("Sub", "x", m)
    if case == "deviation_read_elsewhere":
        outputs.append((d, "d", list(shape)))
    d2 = b.op("Pow", d, b.const(3.0 if case == "pow3" else 2.0))
    v = b.op("ReduceMean", d2, axes=[-2] if case == "axes_mixed" else axes, keepdims=1)
    eps = b.const(np.full((1, 1, 1), 1e-5) if case == "eps_tensor" else 1e-5)
    y = b.op("Div", d, b.op("Sqrt", b.op("Add", v, eps)))
    out_shape = [1, *shape] if case == "eps_tensor" else list(shape)
    model = b.model([("x", shape)], [(y, "y", out_shape), *outputs], 17)
    run_all(model, {"x": _feed(shape, F32)}, F32, "layernorm_fusion", [], absent=["LayerNorm"])


# --------------------------------------------------------------------------------------------
# SkipLayerNorm


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("sum_used", [False, True])
def test_skip_layernorm(dtype, sum_used):
    shape = (2, 7, 32)
    b = Builder(dtype)
    g = np.random.default_rng(4).standard_normal(32)
    s = b.op("Add", "a", "r")
    y = layernorm(b, s, [-1], 17, gamma=g, beta=g * 0.5)
    outs = [(y, "y", list(shape))]
    if sum_used:
        # The residual stream goes on: the sum is read by the next block too.
        outs.append((b.op("Mul", s, b.const(2.0)), "s2", list(shape)))
    model = b.model([("a", shape), ("r", shape)], outs, 17)
    feeds = {"a": _feed(shape, dtype, 1), "r": _feed(shape, dtype, 2)}
    ops = run_all(model, feeds, dtype, "layernorm_fusion", ["SkipLayerNorm"], absent=["Add"])
    assert "LayerNorm" not in ops


def test_skip_layernorm_parallel_and_broadcast_residual():
    shape = (_jit.PARALLEL_THRESHOLD // 128 + 3, 128)
    b = Builder(F32)
    s = b.op("Add", "a", "r")
    y = layernorm(b, s, [-1], 17, gamma=np.ones(128) * 1.5)
    model = b.model([("a", shape), ("r", shape)], [(y, "y", list(shape))], 17)
    feeds = {"a": _feed(shape, F32, 1), "r": _feed(shape, F32, 2)}
    run_all(model, feeds, F32, "layernorm_fusion", ["SkipLayerNorm"])
    # A residual of shape (1, n) broadcasts: the fused node's kernel adds that row to each row.
    model = b.model([("a", shape), ("r", (1, 128))], [(y, "y", list(shape))], 17)
    feeds["r"] = _feed((1, 128), F32, 3)
    run_all(model, feeds, F32, "layernorm_fusion", ["SkipLayerNorm"])


@pytest.mark.parametrize("row_shape", [(64,), (1, 64), (1, 1, 64), ("rows", 64)])
@pytest.mark.parametrize("row_first", [False, True])
@pytest.mark.parametrize("sum_used", [False, True])
@pytest.mark.parametrize("rows", [5, _jit.PARALLEL_THRESHOLD // 64 + 3])
def test_skip_layernorm_with_one_row_added_to_every_row(row_shape, row_first, sum_used, rows):
    """A BERT embedding adds its token-type row to every position before the LayerNorm,
    and a torch export its (S, n) position table to the (1, S, n) embeddings: the fused
    node's kernel adds either itself (either operand order, any leading 1s), at the first
    run (planning) and in the plan's bound kernel of later runs, serial and parallel."""
    shape = (1, rows, 64)
    row_shape = tuple(rows if d == "rows" else d for d in row_shape)
    b = Builder(F32)
    s = b.op("Add", "row", "a") if row_first else b.op("Add", "a", "row")
    y = layernorm(b, s, [-1], 17, gamma=np.linspace(0.5, 1.5, 64), beta=np.linspace(-1, 1, 64))
    outs = [(y, "y", list(shape))]
    if sum_used:
        outs.append((b.op("Mul", s, b.const(2.0)), "s2", list(shape)))
    model = b.model([("a", shape), ("row", row_shape)], outs, 17)
    feeds = {"a": _feed(shape, F32, 1), "row": _feed(row_shape, F32, 2)}
    want = ort_outputs(model, feeds)
    sess = onnxjit.InferenceSession(model)
    assert "SkipLayerNorm" in [n.op_type for n in sess.graph_nodes()]
    rtol, atol = TOL[F32]
    for _ in range(3):
        for g, w in zip(sess.run(None, feeds), want):
            assert g.shape == w.shape
            assert_close(g, w, rtol, atol, "fused")
    steps = sess.stats()["plans"][-1]["steps"]
    assert any(s["op_type"] == "SkipLayerNorm" and not s["generic"] for s in steps)
    # a non-contiguous feed is made contiguous for the same plan: same values
    wide = np.repeat(feeds["a"], 2, axis=2)[:, :, ::2]
    assert not wide.flags.c_contiguous
    for g, w in zip(sess.run(None, {"a": wide, "row": feeds["row"]}), want):
        assert_close(g, w, rtol, atol, "non-contiguous")


def test_skip_not_fused_when_sum_is_read_before_the_norm_ends():
    # The sum is read by a node placed between the pattern's nodes: the fused node (which takes
    # the place of the last member) could not produce it in time, so only LayerNorm fuses.
    shape = (3, 16)
    b = Builder(F32)
    s = b.op("Add", "a", "r")
    m = _reduce_mean(b, s, [-1], 17)
    early = b.op("Neg", s)
    d = b.op("Sub", s, m)
    v = _reduce_mean(b, b.op("Mul", d, d), [-1], 17)
    y = _inv_sqrt_div(b, d, v, 1e-5, "div")
    model = b.model(
        [("a", shape), ("r", shape)], [(y, "y", list(shape)), (early, "e", list(shape))], 17
    )
    feeds = {"a": _feed(shape, F32, 1), "r": _feed(shape, F32, 2)}
    run_all(model, feeds, F32, "layernorm_fusion", ["LayerNorm"], absent=["SkipLayerNorm"])


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("axis", [-1, 2, -2])
@pytest.mark.parametrize("bias, sum_used", [(True, False), (False, True)])
def test_add_then_layernormalization_operator(dtype, axis, bias, sum_used):
    """Add feeding the LayerNormalization operator (opset 17, as torch exports a residual)
    becomes SkipLayerNorm, over one or two trailing axes, with or without bias, with the sum
    also read downstream."""
    shape = (2, 5, 8, 16)
    norm = shape[axis:]
    rng = np.random.default_rng(8)
    b = Builder(dtype)
    s = b.op("Add", "a", "r")
    ln_in = [s, b.const(rng.standard_normal(norm))]
    if bias:
        ln_in.append(b.const(rng.standard_normal(norm)))
    y = b.op("LayerNormalization", *ln_in, axis=axis, epsilon=1e-3)
    outs = [(y, "y", list(shape))]
    if sum_used:
        outs.append((b.op("Mul", s, b.const(2.0)), "s2", list(shape)))
    model = b.model([("a", shape), ("r", shape)], outs, 17)
    feeds = {"a": _feed(shape, dtype, 1), "r": _feed(shape, dtype, 2)}
    run_all(
        model, feeds, dtype, "layernorm_fusion", ["SkipLayerNorm"], absent=["LayerNormalization"]
    )


def test_add_then_layernormalization_not_fused_when_its_statistics_are_read():
    shape = (3, 16)
    b = Builder(F32)
    s = b.op("Add", "a", "r")
    b.nodes.append(
        helper.make_node("LayerNormalization", [s, b.const(np.ones(16))], ["y0", "mean"])
    )
    model = b.model(
        [("a", shape), ("r", shape)], [("y0", "y", list(shape)), ("mean", "m", [3, 1])], 17
    )
    feeds = {"a": _feed(shape, F32, 1), "r": _feed(shape, F32, 2)}
    want = ort_outputs(model, feeds)
    sess = onnxjit.InferenceSession(model)
    assert "SkipLayerNorm" not in [n.op_type for n in sess.graph_nodes()]
    for g, w in zip(sess.run(None, feeds), want):
        assert_close(g, w, 1e-5, 1e-6, "statistics read")


# --------------------------------------------------------------------------------------------
# RMSNorm


@pytest.mark.parametrize(
    "dtype,opset,sq,div,gamma",
    [
        (F32, 17, "pow", "div", True),
        (F32, 18, "mul", "recip", True),
        (F32, 13, "pow", "pow", False),
        (F64, 18, "pow", "div", True),
        (F16, 17, "mul", "div", True),
    ],
)
def test_rmsnorm(dtype, opset, sq, div, gamma):
    shape = (2, 3, 40)
    b = Builder(dtype)
    x2 = b.op("Pow", "x", b.const(2.0)) if sq == "pow" else b.op("Mul", "x", "x")
    ms = _reduce_mean(b, x2, [-1], opset)
    y = _inv_sqrt_div(b, "x", ms, 1e-6, div)
    if gamma:
        y = b.op("Mul", b.const(np.random.default_rng(5).standard_normal(40)), y)
    model = b.model(
        [("x", _dims(shape, opset == 18))], [(y, "y", _dims(shape, opset == 18))], opset
    )
    run_all(model, {"x": _feed(shape, dtype)}, dtype, "layernorm_fusion", ["RMSNorm"])


def test_rmsnorm_parallel_and_near_miss():
    shape = (_jit.PARALLEL_THRESHOLD // 512 + 1, 512)
    b = Builder(F32)
    ms = _reduce_mean(b, b.op("Pow", "x", b.const(2.0)), [-1], 17)
    y = _inv_sqrt_div(b, "x", ms, 1e-6, "div")
    model = b.model([("x", shape)], [(y, "y", list(shape))], 17)
    run_all(model, {"x": _feed(shape, F32)}, F32, "layernorm_fusion", ["RMSNorm"])
    # Near miss: divides a different tensor by the rms of x.
    b = Builder(F32)
    ms = _reduce_mean(b, b.op("Pow", "x", b.const(2.0)), [-1], 17)
    y = _inv_sqrt_div(b, "z", ms, 1e-6, "div")
    shape = (4, 8)
    model = b.model([("x", shape), ("z", shape)], [(y, "y", list(shape))], 17)
    feeds = {"x": _feed(shape, F32), "z": _feed(shape, F32, 7)}
    run_all(model, feeds, F32, "layernorm_fusion", [], absent=["RMSNorm"])


# --------------------------------------------------------------------------------------------
# Gelu


def gelu_erf(b: Builder, x: str, scaling="div", order="x_p_half") -> str:
    if scaling == "div":
        a = b.op("Div", x, b.const(1.4142135))
    else:
        a = b.op("Mul", b.const(0.70710677), x)
    p = b.op("Add", b.op("Erf", a), b.const(1.0))
    return _gelu_product(b, x, p, order)


def _gelu_product(b: Builder, x: str, p: str, order: str) -> str:
    if order == "x_p_half":
        return b.op("Mul", b.op("Mul", x, p), b.const(0.5))
    if order == "half_x_p":
        return b.op("Mul", b.op("Mul", b.const(0.5), x), p)
    if order == "p_half_x":
        return b.op("Mul", x, b.op("Mul", p, b.const(0.5)))
    return b.op("Div", b.op("Mul", p, x), b.const(2.0))  # "x_p_div2"


def gelu_tanh(b: Builder, x: str, cube="pow", order="half_x_p") -> str:
    if cube == "pow":
        c = b.op("Pow", x, b.const(3.0))
    else:
        c = b.op("Mul", x, b.op("Mul", x, x))
    inner = b.op("Add", x, b.op("Mul", c, b.const(0.044715)))
    t = b.op("Tanh", b.op("Mul", b.const(math.sqrt(2 / math.pi)), inner))
    p = b.op("Add", b.const(1.0), t)
    return _gelu_product(b, x, p, order)


@pytest.mark.parametrize(
    "dtype,form,variant,order",
    [
        (F32, "erf", "div", "x_p_half"),
        (F32, "erf", "mul", "half_x_p"),
        (F32, "erf", "div", "p_half_x"),
        (F32, "erf", "mul", "x_p_div2"),
        (F32, "tanh", "pow", "half_x_p"),
        (F32, "tanh", "mul", "x_p_half"),
        (F32, "tanh", "pow", "p_half_x"),
        (F64, "erf", "div", "x_p_half"),
        (F64, "tanh", "mul", "half_x_p"),
        (F16, "erf", "mul", "p_half_x"),
        (F16, "tanh", "pow", "x_p_half"),
    ],
)
def test_gelu(dtype, form, variant, order):
    shape = (3, 5, 16)
    b = Builder(dtype)
    y = gelu_erf(b, "x", variant, order) if form == "erf" else gelu_tanh(b, "x", variant, order)
    model = b.model([("x", _dims(shape, True))], [(y, "y", _dims(shape, True))], 17)
    feeds = {"x": _feed(shape, dtype, scale=2.0)}
    ref = form == "erf" and dtype == F64
    ops = run_all(model, feeds, dtype, "gelu_fusion", ["Gelu"], ref=ref)
    assert ops[0] == "Gelu" and ops.count("Gelu") == 1 and len(ops) <= 2


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("form", ["erf", "tanh"])
def test_bias_gelu(dtype, form):
    shape = (4, 24)
    b = Builder(dtype)
    xb = b.op("Add", "x", b.const(np.random.default_rng(6).standard_normal(24)))
    y = gelu_erf(b, xb) if form == "erf" else gelu_tanh(b, xb)
    model = b.model([("x", shape)], [(y, "y", list(shape))], 17)
    feeds = {"x": _feed(shape, dtype)}
    ref = form == "erf" and dtype == F64
    ops = run_all(model, feeds, dtype, "gelu_fusion", ["Gelu"], absent=["Add"], ref=ref)
    assert ops.count("Gelu") == 1


def test_gelu_parallel_and_scalar_bias():
    shape = (_jit.PARALLEL_THRESHOLD // 64 + 5, 64)
    b = Builder(F32)
    xb = b.op("Add", b.const(np.full(1, 0.25)), "x")  # a 1-element bias broadcasts
    y = gelu_erf(b, xb, "mul", "half_x_p")
    model = b.model([("x", shape)], [(y, "y", list(shape))], 17)
    run_all(model, {"x": _feed(shape, F32, scale=3.0)}, F32, "gelu_fusion", ["Gelu"])


@pytest.mark.parametrize("case", ["wrong_const", "erf_read_elsewhere", "other_operand", "no_half"])
def test_gelu_near_misses_not_fused(case):
    shape = (3, 8)
    b = Builder(F32)
    a = b.op("Div", "x", b.const(1.5 if case == "wrong_const" else 1.4142135))
    e = b.op("Erf", a)
    p = b.op("Add", e, b.const(1.0))
    outs = []
    if case == "erf_read_elsewhere":
        outs.append((e, "e", list(shape)))
    xx = "z" if case == "other_operand" else "x"
    if case == "no_half":
        y = b.op("Mul", xx, p)
    else:
        y = b.op("Mul", b.op("Mul", xx, p), b.const(0.5))
    model = b.model([("x", shape), ("z", shape)], [(y, "y", list(shape)), *outs], 17)
    feeds = {"x": _feed(shape, F32), "z": _feed(shape, F32, 9)}
    run_all(model, feeds, F32, "gelu_fusion", [], absent=["Gelu"])


# --------------------------------------------------------------------------------------------
# Softmax


def _reduce(b: Builder, op: str, x: str, axis: int, opset: int) -> str:
    as_input = opset >= (13 if op == "ReduceSum" else 18)
    if as_input:
        return b.op(op, x, b.const([axis], np.int64), keepdims=1)
    return b.op(op, x, axes=[axis], keepdims=1)


@pytest.mark.parametrize(
    "dtype,opset,axis,with_max",
    [
        (F32, 17, -1, True),
        (F32, 18, 1, True),
        (F32, 12, -1, False),
        (F64, 18, -1, True),
        (F16, 13, -1, True),
    ],
)
def test_softmax_pattern(dtype, opset, axis, with_max):
    shape = (2, 6, 10)
    b = Builder(dtype)
    src = "x"
    if with_max:
        src = b.op("Sub", "x", _reduce(b, "ReduceMax", "x", axis, opset))
    e = b.op("Exp", src)
    y = b.op("Div", e, _reduce(b, "ReduceSum", e, axis, opset))
    model = b.model([("x", shape)], [(y, "y", list(shape))], opset)
    ops = run_all(
        model, {"x": _feed(shape, dtype, scale=3.0)}, dtype, "softmax_fusion", ["Softmax"]
    )
    assert ops[0] == "Softmax" and "Exp" not in ops


@pytest.mark.parametrize("dtype", [F32, F64])
def test_log_softmax_pattern(dtype):
    shape = (5, 33)
    b = Builder(dtype)
    src = b.op("Sub", "x", _reduce(b, "ReduceMax", "x", -1, 13))
    e = b.op("Exp", src)
    y = b.op("Log", b.op("Div", e, _reduce(b, "ReduceSum", e, -1, 13)))
    y2 = b.op("Log", b.op("Softmax", "x", axis=0))
    model = b.model([("x", shape)], [(y, "y", list(shape)), (y2, "y2", list(shape))], 13)
    ops = run_all(model, {"x": _feed(shape, dtype)}, dtype, "softmax_fusion", ["LogSoftmax"])
    assert ops.count("LogSoftmax") == 2 and "Log" not in ops and "Softmax" not in ops


def test_softmax_pattern_parallel_rows():
    shape = (_jit.PARALLEL_THRESHOLD // 128 + 1, 128)
    b = Builder(F32)
    e = b.op("Exp", b.op("Sub", "x", _reduce(b, "ReduceMax", "x", -1, 17)))
    y = b.op("Div", e, _reduce(b, "ReduceSum", e, -1, 17))
    model = b.model([("x", shape)], [(y, "y", list(shape))], 17)
    run_all(model, {"x": _feed(shape, F32, scale=4.0)}, F32, "softmax_fusion", ["Softmax"])


@pytest.mark.parametrize("case", ["axes_differ", "exp_read_elsewhere", "sum_two_axes"])
def test_softmax_near_misses_not_fused(case):
    shape = (3, 4, 5)
    b = Builder(F32)
    e = b.op("Exp", b.op("Sub", "x", _reduce(b, "ReduceMax", "x", -1, 17)))
    outs = []
    if case == "exp_read_elsewhere":
        outs.append((e, "e", list(shape)))
    if case == "sum_two_axes":
        s = b.op("ReduceSum", e, b.const([-2, -1], np.int64), keepdims=1)
    else:
        s = _reduce(b, "ReduceSum", e, -2 if case == "axes_differ" else -1, 17)
    y = b.op("Div", e, s)
    model = b.model([("x", shape)], [(y, "y", list(shape)), *outs], 17)
    run_all(model, {"x": _feed(shape, F32)}, F32, "softmax_fusion", [], absent=["Softmax"])


# --------------------------------------------------------------------------------------------
# The row kernels through the standard operators (lowerings of Softmax / LayerNormalization)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("n", [1, 13, 100])
def test_row_kernels_row_lengths(dtype, n):
    # Rows shorter than, equal to and not a multiple of the eight partial sums.
    shape = (3, n)
    x = _feed(shape, dtype, scale=10.0)
    rng = np.random.default_rng(n)
    for op, inputs, attrs, opset in [
        ("Softmax", {"x": x}, {"axis": -1}, 13),
        ("LogSoftmax", {"x": x}, {"axis": -1}, 13),
        (
            "LayerNormalization",
            {"x": x, "s": rng.standard_normal(n).astype(dtype), "b": x[0].copy()},
            {"axis": -1},
            17,
        ),
    ]:
        b = Builder(dtype)
        b.nodes.append(helper.make_node(op, list(inputs), ["y"], **attrs))
        for k in list(inputs)[1:]:
            b.inits.append(numpy_helper.from_array(inputs[k], k))
        model = b.model([("x", shape)], [], opset)
        model.graph.output.append(
            helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(x.dtype), shape)
        )
        want = ort_outputs(model, {"x": x})
        got = onnxjit.InferenceSession(model).run(None, {"x": x})
        assert_close(got[0], want[0], *TOL[dtype], f"{op} n={n}")


def test_fused_nodes_on_empty_batches():
    # Dynamic batch of 0 rows: the fused nodes return empty results of the right shape and type.
    shape = (0, 12)
    b = Builder(F32)
    ln = layernorm(b, "x", [-1], 17, gamma=np.ones(12), beta=np.zeros(12))
    ge = gelu_erf(b, "x")
    e = b.op("Exp", b.op("Sub", "x", _reduce(b, "ReduceMax", "x", -1, 17)))
    sm = b.op("Div", e, _reduce(b, "ReduceSum", e, -1, 17))
    dims = ["n", 12]
    outs = [(ln, "ln", dims), (ge, "ge", dims), (sm, "sm", dims)]
    model = b.model([("x", dims)], outs, 17)
    sess = onnxjit.InferenceSession(model)
    ops = [n.op_type for n in sess.graph_nodes()]
    assert {"LayerNorm", "Gelu", "Softmax"} <= set(ops)
    for y in sess.run(None, {"x": np.zeros(shape, F32)}):
        assert y.shape == shape and y.dtype == F32
