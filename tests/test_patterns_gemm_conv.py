"""GEMM epilogue fusion, Conv+BatchNorm folding and Conv+activation fusion.

Every model runs three ways: optimised (default level), unoptimised (level 0) and with the pass
under test switched off by name; all must equal onnxruntime (its optimisations off), and the
optimised graph must show (or, for near misses, must not show) the fused node.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from oracle import assert_close, ort_outputs, reference_outputs

import onnxjit
from onnxjit import registry

_ET = {
    np.float32: TensorProto.FLOAT,
    np.float64: TensorProto.DOUBLE,
    np.float16: TensorProto.FLOAT16,
}
_TOL = {np.float32: (1e-4, 1e-5), np.float64: (1e-7, 1e-9), np.float16: (1e-2, 1e-2)}


def _model(nodes, inputs, outputs, inits, opset=17, dtype=np.float32):
    """A model from helper nodes; ``inputs``/``outputs`` map names to shapes (dtype ``dtype``)."""
    et = _ET[dtype]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(k, et, s) for k, s in inputs.items()],
        [helper.make_tensor_value_info(k, et, s) for k, s in outputs.items()],
        [numpy_helper.from_array(np.asarray(v).astype(dtype), k) for k, v in inits.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


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


def _check(model, feeds, pass_name, dtype=np.float32, oracle="ort", want=None):
    """Run optimised / level 0 / pass off, compare with onnxruntime; return the fused nodes.

    ``want`` overrides the oracle with outputs computed elsewhere.
    """
    rtol, atol = _TOL[dtype]
    if want is None and oracle == "ort":
        try:
            want = ort_outputs(model, feeds)
        except Exception as exc:
            # onnxruntime's CPU provider lacks some float64 kernels (HardSigmoid, Clip-6):
            # the reference evaluator is the oracle for those.
            if "NOT_IMPLEMENTED" not in str(exc):
                raise
    if want is None:
        want = reference_outputs(model, feeds)
    sess = _session(model)
    for s in (sess, _session(model, level=0), _session(model, disabled=[pass_name])):
        assert_close(s.run(None, feeds), want, rtol=rtol, atol=atol)
    return sess.graph_nodes()


def _ops(nodes):
    return [n.op_type for n in nodes]


def _rng(seed=0):
    return np.random.default_rng(seed)


# --------------------------------------------------------------------------------------------
# GEMM epilogues


# (activation node(s) builder: input name -> (nodes, output name, extra inits), opset, fused name)
def _act(op, **attrs):
    def build(x):
        return [helper.make_node(op, [x], ["y"], **attrs)], "y", {}

    return build


def _clip13(x):
    return (
        [helper.make_node("Clip", [x, "lo", "hi"], ["y"])],
        "y",
        {"lo": np.array(0.0), "hi": np.array(6.0)},
    )


def _silu(order):
    def build(x):
        mul_in = [x, "s"] if order == 0 else ["s", x]
        return (
            [helper.make_node("Sigmoid", [x], ["s"]), helper.make_node("Mul", mul_in, ["y"])],
            "y",
            {},
        )

    return build


ACTS = [
    ("Relu", _act("Relu"), 17),
    ("LeakyRelu", _act("LeakyRelu", alpha=0.2), 17),
    ("Sigmoid", _act("Sigmoid"), 17),
    ("Tanh", _act("Tanh"), 17),
    ("Clip", _clip13, 17),
    ("Clip", _act("Clip", min=-0.5, max=0.7), 10),
    ("HardSigmoid", _act("HardSigmoid", alpha=0.3, beta=0.4), 17),
    ("HardSwish", _act("HardSwish"), 17),
    ("Silu", _silu(0), 17),
    ("Silu", _silu(1), 17),
    ("Gelu", _act("Gelu"), 20),
    ("GeluTanh", _act("Gelu", approximate="tanh"), 20),
]


# onnx defines HardSwish and Gelu by function bodies whose constants (1/6, 1/sqrt(2)) are float32
# attributes, so the reference evaluator's float64 results carry float32 rounding (~4e-8), and
# onnxruntime has no float64 kernels for them. In float64 the oracle is the reference evaluator
# up to the pre-activation value, then these formulas with exact constants.
_EXACT_F64_ACTS = {
    "HardSwish": lambda z: z * np.clip(z / 6.0 + 0.5, 0.0, 1.0),
    "Gelu": lambda z: 0.5 * z * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0))),
}


def _exact_f64_want(name, dtype, model_without_act, feeds):
    """The float64 oracle of ``_EXACT_F64_ACTS`` (None where it does not apply)."""
    if dtype != np.float64 or name not in _EXACT_F64_ACTS:
        return None
    return [_EXACT_F64_ACTS[name](z) for z in reference_outputs(model_without_act, feeds)]


def _mlp_layer(act_builder, opset, dtype, m=5, k=7, n=6, bias_first=False, seed=0):
    rng = _rng(seed)
    inits = {"w": rng.standard_normal((k, n)), "b": rng.standard_normal(n)}
    add_in = ["b", "mm"] if bias_first else ["mm", "b"]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", add_in, ["z"])]
    out = "z"
    if act_builder is not None:
        more, out, extra = act_builder("z")
        nodes += more
        inits.update(extra)
    model = _model(nodes, {"x": [m, k]}, {out: [m, n]}, inits, opset, dtype)
    x = (rng.standard_normal((m, k)) * 2).astype(dtype)
    return model, {"x": x}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "name,build,opset", ACTS, ids=[f"{a[0]}-{a[2]}-{i}" for i, a in enumerate(ACTS)]
)
def test_matmul_bias_activation_fuses(name, build, opset, dtype):
    model, feeds = _mlp_layer(build, opset, dtype)
    # onnxruntime has no float64 Clip-6 kernel: the reference evaluator is the oracle there.
    oracle = "ref" if (opset == 10 and dtype == np.float64) else "ort"
    want = _exact_f64_want(name, dtype, _mlp_layer(None, opset, dtype)[0], feeds)
    nodes = _check(model, feeds, "gemm_epilogue_fusion", dtype, oracle, want)
    assert _ops(nodes) == ["FusedGemm"]
    assert len(nodes[0].members) == len(model.graph.node)


def test_float16_matmul_bias_relu_fuses():
    model, feeds = _mlp_layer(_act("Relu"), 17, np.float16)
    nodes = _check(model, feeds, "gemm_epilogue_fusion", np.float16)
    assert _ops(nodes) == ["FusedGemm"]


@pytest.mark.parametrize("threads", [1, 2])
def test_float16_fused_gemm_is_bound(threads):
    """A float16 FusedGemm is bound by its plan (A cast into a float32 buffer, the product,
    the result cast back) and agrees with onnxruntime while the batch changes and earlier
    outputs are kept."""
    rng = _rng(3)
    k, n = 40, 24
    inits = {"w": rng.standard_normal((k, n)), "b": rng.standard_normal(n)}
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["z"]),
        helper.make_node("Relu", ["z"], ["y"]),
    ]
    model = _model(nodes, {"x": ["batch", k]}, {"y": ["batch", n]}, inits, 17, np.float16)
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = threads
    sess = onnxjit.InferenceSession(model.SerializeToString(), so, disabled_optimizers=F16_KERNELS)
    rtol, atol = _TOL[np.float16]
    kept = []
    for batch in (5, 5, 300, 5, 1):
        x = rng.standard_normal((batch, k)).astype(np.float16)
        got = sess.run(None, {"x": x})
        assert_close(got, ort_outputs(model, {"x": x}), rtol=rtol, atol=atol)
        kept.append((x, got))
    for x, got in kept:
        assert_close(got, ort_outputs(model, {"x": x}), rtol=rtol, atol=atol)
    steps = sess.stats()["plans"][-1]["steps"]
    assert [(s["op_type"], s["generic"]) for s in steps] == [("FusedGemm", False)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bias_first_and_no_activation(dtype):
    model, feeds = _mlp_layer(None, 17, dtype, bias_first=True)
    assert _ops(_check(model, feeds, "gemm_epilogue_fusion", dtype)) == ["FusedGemm"]


def test_large_rows_use_parallel_epilogue():
    # 600 x 512 outputs: above PARALLEL_THRESHOLD (2**17), so the parallel twin runs.
    model, feeds = _mlp_layer(_act("Relu"), 17, np.float32, m=600, k=33, n=512)
    assert _ops(_check(model, feeds, "gemm_epilogue_fusion")) == ["FusedGemm"]


@pytest.mark.parametrize(
    "xshape,bshape",
    [((2, 3, 7), (6,)), ((7,), (1, 6)), ((4, 7), (1, 1, 6)), ((0, 7), (6,)), ((3, 7), (1,))],
    ids=["batched", "vector-input", "bias-raises-rank", "empty", "scalar-bias"],
)
def test_matmul_shapes(xshape, bshape):
    rng = _rng(1)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["z"]),
        helper.make_node("Relu", ["z"], ["y"]),
    ]
    inits = {"w": rng.standard_normal((7, 6)), "b": rng.standard_normal(bshape)}
    yshape = np.broadcast_shapes((*xshape[:-1], 6), bshape)
    model = _model(nodes, {"x": list(xshape)}, {"y": list(yshape)}, inits)
    x = rng.standard_normal(xshape).astype(np.float32)
    assert _ops(_check(model, {"x": x}, "gemm_epilogue_fusion")) == ["FusedGemm"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "attrs,cshape",
    [
        ({}, (6,)),
        ({"transB": 1}, (1, 6)),
        ({"transA": 1, "alpha": 0.5, "beta": 2.0}, (6,)),
        ({"transA": 1, "transB": 1}, (1,)),
        ({"beta": 0.0}, (6,)),
        ({"alpha": 3.0}, None),
    ],
)
def test_gemm_relu_fuses(attrs, cshape, dtype):
    rng = _rng(2)
    a_shape = (7, 5) if attrs.get("transA") else (5, 7)
    b_shape = (6, 7) if attrs.get("transB") else (7, 6)
    inits = {"B": rng.standard_normal(b_shape)}
    ins = ["a", "B"]
    if cshape is not None:
        inits["C"] = rng.standard_normal(cshape)
        ins.append("C")
    nodes = [helper.make_node("Gemm", ins, ["g"], **attrs), helper.make_node("Relu", ["g"], ["y"])]
    model = _model(nodes, {"a": list(a_shape)}, {"y": [5, 6]}, inits, 13, dtype)
    feeds = {"a": rng.standard_normal(a_shape).astype(dtype)}
    nodes = _check(model, feeds, "gemm_epilogue_fusion", dtype)
    assert _ops(nodes) == ["FusedGemm"] and len(nodes[0].members) == 2


def test_gemm_opset_7_without_activation():
    rng = _rng(3)
    inits = {"B": rng.standard_normal((7, 6)), "C": rng.standard_normal(6)}
    nodes = [helper.make_node("Gemm", ["a", "B", "C"], ["y"], transB=0)]
    model = _model(nodes, {"a": [5, 7]}, {"y": [5, 6]}, inits, 7)
    feeds = {"a": rng.standard_normal((5, 7)).astype(np.float32)}
    assert _ops(_check(model, feeds, "gemm_epilogue_fusion")) == ["FusedGemm"]


def test_mlp_chain_fuses_every_layer():
    rng = _rng(4)
    dims = [20, 16, 12, 4]
    nodes, inits, cur = [], {}, "x"
    for i in range(3):
        inits[f"w{i}"] = rng.standard_normal((dims[i + 1], dims[i]))
        inits[f"b{i}"] = rng.standard_normal(dims[i + 1])
        nodes.append(helper.make_node("Gemm", [cur, f"w{i}", f"b{i}"], [f"g{i}"], transB=1))
        cur = f"g{i}"
        if i < 2:
            nodes.append(helper.make_node("Relu", [cur], [f"r{i}"]))
            cur = f"r{i}"
    model = _model(nodes, {"x": ["n", 20]}, {cur: ["n", 4]}, inits, 13)
    for n in (1, 9):
        feeds = {"x": rng.standard_normal((n, 20)).astype(np.float32)}
        assert _ops(_check(model, feeds, "gemm_epilogue_fusion")) == ["FusedGemm"] * 3


def _near_miss_models():
    rng = _rng(5)
    w, b = rng.standard_normal((7, 6)), rng.standard_normal(6)
    mm = helper.make_node("MatMul", ["x", "w"], ["mm"])
    add = helper.make_node("Add", ["mm", "b"], ["z"])
    relu = helper.make_node("Relu", ["z"], ["y"])
    out = {"y": [5, 6]}
    yield (
        "product-used-twice",
        _model([mm, add, relu], {"x": [5, 7]}, {"y": [5, 6], "mm": [5, 6]}, {"w": w, "b": b}),
        ["FusedGemm", "Add", "Relu"],
    )
    yield (
        "bias-per-row",
        _model([mm, add, relu], {"x": [5, 7]}, out, {"w": w, "b": rng.standard_normal((5, 1))}),
        ["FusedGemm", "Add", "Relu"],
    )
    yield (
        "bias-full-matrix",
        _model([mm, add, relu], {"x": [5, 7]}, out, {"w": w, "b": rng.standard_normal((5, 6))}),
        ["FusedGemm", "Add", "Relu"],
    )
    yield (
        "weight-not-constant",
        _model([mm, add, relu], {"x": [5, 7], "w": [7, 6]}, out, {"b": b}),
        ["MatMul", "Add", "Relu"],
    )
    yield (
        "activation-output-used-twice",
        _model([mm, add, relu], {"x": [5, 7]}, {"y": [5, 6], "z": [5, 6]}, {"w": w, "b": b}),
        ["FusedGemm", "Relu"],
    )
    clip = helper.make_node("Clip", ["z", "lo"], ["y"])
    yield (
        "clip-bound-not-constant",
        _model([mm, add, clip], {"x": [5, 7], "lo": []}, out, {"w": w, "b": b}),
        ["FusedGemm", "Clip"],
    )
    gemm = helper.make_node("Gemm", ["x", "w", "c"], ["y"])
    yield "gemm-c-not-constant", _model([gemm], {"x": [5, 7], "c": [6]}, out, {"w": w}), ["Gemm"]
    yield (
        "gemm-c-full-matrix",
        _model([gemm], {"x": [5, 7]}, out, {"w": w, "c": rng.standard_normal((5, 6))}),
        ["Gemm"],
    )


@pytest.mark.parametrize("case", list(_near_miss_models()), ids=lambda c: c[0])
def test_gemm_near_misses_not_fused(case):
    _, model, unfused = case
    # elementwise_fusion (another pass) may merge the leftover Add/Relu: only the GEMM matters.
    expected = [op for op in unfused if op in ("MatMul", "Gemm", "FusedGemm")]
    rng = _rng(6)
    feeds = {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in model.graph.input
    }
    nodes = _check(model, feeds, "gemm_epilogue_fusion")
    got = [op for op in _ops(nodes) if op in expected]
    assert got == expected
    # a MatMul with a constant weight becomes a FusedGemm on its own (its weight is packed once
    # for the micro-kernel); the near miss is that nothing after it was taken in
    bare = [n for n in nodes if n.op_type == "FusedGemm" and "Add" in unfused]
    for n in bare:
        assert len(n.inputs) == 2 and "activation" not in n.attrs, n


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("first", [False, True], ids=["product-first", "addend-first"])
@pytest.mark.parametrize(
    ("rshape", "act"),
    [
        ((4, 5, 6), None),
        ((4, 5, 6), "Relu"),
        ((6,), None),
        ((3, 4, 5, 6), None),
        ((3, 1, 1, 6), "Relu"),
    ],
    ids=["same", "same-relu", "row", "wider", "wider-relu"],
)
def test_computed_addend_is_a_residual_in_the_epilogue(rshape, act, first, dtype):
    """MatMul + constant bias + a computed addend (+ activation): one FusedGemm whose epilogue
    adds the residual, whatever shape it broadcasts from (a wider one widens the result)."""
    rng = _rng(8)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["z"]),
        helper.make_node("Add", ["r", "z"] if first else ["z", "r"], ["s" if act else "y"]),
    ]
    if act:
        nodes.append(helper.make_node(act, ["s"], ["y"]))
    out = list(np.broadcast_shapes((4, 5, 6), rshape))
    model = _model(
        nodes,
        {"x": [4, 5, 7], "r": list(rshape)},
        {"y": out},
        {"w": rng.standard_normal((7, 6)), "b": rng.standard_normal(6)},
        dtype=dtype,
    )
    feeds = {
        "x": rng.standard_normal((4, 5, 7)).astype(dtype),
        "r": rng.standard_normal(rshape).astype(dtype),
    }
    nodes = _check(model, feeds, "gemm_epilogue_fusion", dtype=dtype)
    assert _ops(nodes) == ["FusedGemm"]
    assert nodes[0].inputs[3] == "r"


def test_residual_not_taken_when_the_product_is_read_elsewhere():
    rng = _rng(9)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "r"], ["y"]),
    ]
    model = _model(
        nodes,
        {"x": [5, 7], "r": [5, 6]},
        {"y": [5, 6], "mm": [5, 6]},
        {"w": rng.standard_normal((7, 6))},
    )
    feeds = {
        "x": rng.standard_normal((5, 7)).astype(np.float32),
        "r": rng.standard_normal((5, 6)).astype(np.float32),
    }
    nodes = _check(model, feeds, "gemm_epilogue_fusion")
    gemm = next(n for n in nodes if n.op_type == "FusedGemm")
    assert len(gemm.inputs) == 2


@pytest.mark.parametrize("act", ["Relu", "Tanh", "Sigmoid"])
def test_activation_after_a_reshape_of_the_product_fuses(act):
    """Gemm on 2-D rows, Reshape to (batch, seq, N), activation: the activation moves into the
    epilogue and the Reshape follows the fused node (torch's addmm + view + activation)."""
    rng = _rng(10)
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["g"]),
        helper.make_node("Reshape", ["g", "shape"], ["gr"]),
        helper.make_node(act, ["gr"], ["y"]),
    ]
    inits = {"w": rng.standard_normal((7, 6)), "b": rng.standard_normal(6)}
    graph_inits = dict(inits)
    model = _model(nodes, {"x": [10, 7]}, {"y": [2, 5, 6]}, graph_inits)
    model.graph.initializer.append(numpy_helper.from_array(np.array([2, -1, 6], np.int64), "shape"))
    feeds = {"x": rng.standard_normal((10, 7)).astype(np.float32)}
    nodes = _check(model, feeds, "gemm_epilogue_fusion")
    assert _ops(nodes) == ["FusedGemm", "Reshape"]
    assert nodes[0].attrs["activation"] == act


def test_activation_after_a_reshape_read_elsewhere_stays():
    rng = _rng(11)
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["g"]),
        helper.make_node("Reshape", ["g", "shape"], ["gr"]),
        helper.make_node("Relu", ["gr"], ["y"]),
    ]
    model = _model(
        nodes,
        {"x": [10, 7]},
        {"y": [2, 5, 6], "gr": [2, 5, 6]},
        {"w": rng.standard_normal((7, 6)), "b": rng.standard_normal(6)},
    )
    model.graph.initializer.append(numpy_helper.from_array(np.array([2, -1, 6], np.int64), "shape"))
    feeds = {"x": rng.standard_normal((10, 7)).astype(np.float32)}
    nodes = _check(model, feeds, "gemm_epilogue_fusion")
    gemm = next(n for n in nodes if n.op_type == "FusedGemm")
    assert "activation" not in gemm.attrs


def test_internal_gelu_with_bias_fuses_when_gelu_fusion_runs():
    if "Gelu" not in registry.internal_ops():
        pytest.skip("the internal onnxjit Gelu op (gelu_fusion, another engineer's pass) is absent")
    rng = _rng(7)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["z"]),
        helper.make_node("Div", ["z", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["z", "e1"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"]),
    ]
    inits = {
        "w": rng.standard_normal((7, 6)),
        "b": rng.standard_normal(6),
        "sqrt2": np.array(np.sqrt(2.0)),
        "one": np.array(1.0),
        "half": np.array(0.5),
    }
    model = _model(nodes, {"x": [5, 7]}, {"y": [5, 6]}, inits)
    feeds = {"x": rng.standard_normal((5, 7)).astype(np.float32)}
    nodes = _check(model, feeds, "gemm_epilogue_fusion")
    assert _ops(nodes) == ["FusedGemm"]


# --------------------------------------------------------------------------------------------
# Conv + BatchNormalization folding


def _conv_w(rng, m, c, ks):
    return rng.standard_normal((m, c, *ks)) / np.sqrt(c * np.prod(ks))


def _bn_inits(rng, m, prefix="bn"):
    return {
        f"{prefix}_s": 1 + 0.2 * rng.standard_normal(m),
        f"{prefix}_b": 0.2 * rng.standard_normal(m),
        f"{prefix}_m": 0.2 * rng.standard_normal(m),
        f"{prefix}_v": 0.5 + rng.random(m),
    }


def _bn(x, y, prefix="bn", **attrs):
    return helper.make_node(
        "BatchNormalization",
        [x, f"{prefix}_s", f"{prefix}_b", f"{prefix}_m", f"{prefix}_v"],
        [y],
        **attrs,
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
# BatchNormalization-7 is not folded (see patterns_conv._bn_scale_shift).
@pytest.mark.parametrize("opset", [9, 14, 15, 22])
@pytest.mark.parametrize("with_bias", [False, True])
def test_conv_batchnorm_folds(opset, with_bias, dtype):
    rng = _rng(8)
    inits = {"w": _conv_w(rng, 4, 3, (3, 3)), **_bn_inits(rng, 4)}
    ins = ["x", "w"]
    if with_bias:
        inits["cb"] = rng.standard_normal(4)
        ins.append("cb")
    nodes = [
        helper.make_node("Conv", ins, ["c"], pads=[1, 1, 1, 1]),
        _bn("c", "y", epsilon=1e-3),
    ]
    model = _model(nodes, {"x": [2, 3, 6, 5]}, {"y": [2, 4, 6, 5]}, inits, opset, dtype)
    feeds = {"x": rng.standard_normal((2, 3, 6, 5)).astype(dtype)}
    want = None
    if opset == 9 and dtype == np.float64:
        # onnxruntime has no float64 Conv, and onnx 1.23's reference BatchNormalization-9 fills
        # in momentum's default and so normalises with batch statistics even with one output.
        # Inference-mode BatchNormalization-14 means the same thing: the oracle runs that.
        want = reference_outputs(
            _model(nodes, {"x": [2, 3, 6, 5]}, {"y": [2, 4, 6, 5]}, inits, 14, dtype), feeds
        )
    got = _check(model, feeds, "conv_bn_folding", dtype, want=want)
    assert _ops(got) == ["Conv"] and len(got[0].members) == 2


def test_conv_mul_add_constants_fold():
    rng = _rng(9)
    inits = {
        "w": _conv_w(rng, 4, 2, (3,)),
        "k": rng.standard_normal((4, 1)),
        "s": np.array(0.5),
        "a": rng.standard_normal((1, 4, 1)),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], strides=[2]),
        helper.make_node("Mul", ["k", "c"], ["c1"]),
        helper.make_node("Mul", ["c1", "s"], ["c2"]),
        helper.make_node("Add", ["c2", "a"], ["y"]),
    ]
    model = _model(nodes, {"x": [1, 2, 9]}, {"y": [1, 4, 4]}, inits)
    feeds = {"x": rng.standard_normal((1, 2, 9)).astype(np.float32)}
    got = _check(model, feeds, "conv_bn_folding")
    assert _ops(got) == ["Conv"] and len(got[0].members) == 4


def _conv_near_misses():
    rng = _rng(10)
    w = _conv_w(rng, 4, 3, (3, 3))
    bn = _bn_inits(rng, 4)
    conv = helper.make_node("Conv", ["x", "w"], ["c"])
    x = {"x": [1, 3, 5, 5]}
    out = {"y": [1, 4, 3, 3]}
    yield (
        "bn-mean-not-constant",
        _model(
            [conv, _bn("c", "y")],
            {**x, "bn_m": [4]},
            out,
            {"w": w, **{k: v for k, v in bn.items() if k != "bn_m"}},
        ),
        ["Conv", "BatchNormalization"],
        15,
    )
    yield (
        "conv-output-used-twice",
        _model([conv, _bn("c", "y")], x, {**out, "c": [1, 4, 3, 3]}, {"w": w, **bn}),
        ["Conv", "BatchNormalization"],
        15,
    )
    yield (
        "mul-not-per-channel",
        _model(
            [conv, helper.make_node("Mul", ["c", "k"], ["y"])],
            x,
            out,
            {"w": w, "k": rng.standard_normal((1, 1, 3, 1))},
        ),
        ["Conv", "Mul"],
        15,
    )
    yield (
        "mul-raises-rank",
        _model(
            [conv, helper.make_node("Mul", ["c", "k"], ["y"])],
            x,
            {"y": [1, 1, 4, 3, 3]},
            {"w": w, "k": rng.standard_normal((1, 1, 4, 1, 1))},
        ),
        ["Conv", "Mul"],
        15,
    )
    yield (
        "weight-not-constant",
        _model([conv, _bn("c", "y")], {**x, "w": [4, 3, 3, 3]}, out, bn),
        ["Conv", "BatchNormalization"],
        15,
    )


@pytest.mark.parametrize("case", list(_conv_near_misses()), ids=lambda c: c[0])
def test_conv_fold_near_misses(case):
    _, model, expected, _opset = case
    rng = _rng(11)
    feeds = {
        i.name: (0.5 + rng.random([d.dim_value for d in i.type.tensor_type.shape.dim])).astype(
            np.float32
        )
        for i in model.graph.input
    }
    assert _ops(_check(model, feeds, "conv_bn_folding")) == expected


def test_batchnorm_training_mode_not_folded():
    # Training mode with its running-statistics outputs: onnxruntime's CPU provider has no
    # inference kernel for it, so the unoptimised onnxjit run is the reference here (both runs
    # are onnxjit; the point is that folding leaves the node alone and changes nothing).
    rng = _rng(12)
    inits = {"w": _conv_w(rng, 4, 3, (3, 3)), **_bn_inits(rng, 4)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node(
            "BatchNormalization",
            ["c", "bn_s", "bn_b", "bn_m", "bn_v"],
            ["y", "rm", "rv"],
            training_mode=1,
        ),
    ]
    model = _model(nodes, {"x": [2, 3, 5, 5]}, {"y": [2, 4, 3, 3], "rm": [4], "rv": [4]}, inits, 15)
    feeds = {"x": rng.standard_normal((2, 3, 5, 5)).astype(np.float32)}
    sess = _session(model)
    assert _ops(sess.graph_nodes()) == ["Conv", "BatchNormalization"]
    assert_close(sess.run(None, feeds), _session(model, level=0).run(None, feeds))


# --------------------------------------------------------------------------------------------
# Conv + activation (+ residual)

CONV_ACTS = [a for a in ACTS if a[0] not in ("Gelu", "GeluTanh")]

# (x shape, w shape, attrs): strided, padded, dilated, grouped, depthwise, 1x1, 1-D, 3-D.
GEOMETRIES = [
    ((1, 3, 8, 7), (5, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 4, 9, 9), (6, 2, 3, 3), {"group": 2, "strides": [2, 2], "pads": [1, 0, 1, 0]}),
    ((1, 4, 9, 9), (4, 1, 3, 3), {"group": 4, "dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((1, 4, 9, 9), (8, 1, 3, 3), {"group": 4, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((2, 6, 7, 7), (5, 6, 1, 1), {}),
    ((1, 6, 7, 7), (5, 6, 1, 1), {"strides": [2, 2]}),
    ((1, 6, 7, 7), (5, 6, 1, 1), {"pads": [0, 0, 1, 1]}),
    ((2, 3, 11), (4, 3, 3), {"strides": [2], "dilations": [2]}),
    ((1, 2, 4, 5, 6), (3, 2, 2, 3, 2), {"pads": [1, 0, 1, 0, 1, 0]}),
]


def _conv_model(xs, ws, attrs, act_builder, opset, dtype, residual=None, bias=True, seed=13):
    rng = _rng(seed)
    inits = {"w": _conv_w(rng, ws[0], ws[1], ws[2:])}
    ins = ["x", "w"]
    if bias:
        inits["cb"] = rng.standard_normal(ws[0])
        ins.append("cb")
    nodes = [helper.make_node("Conv", ins, ["c"], **attrs)]
    graph_in = {"x": list(xs)}
    cur = "c"
    feeds = {"x": rng.standard_normal(xs).astype(dtype)}
    if residual is not None:
        nodes.append(helper.make_node("Add", ["r", "c"], ["a"]))
        graph_in["r"] = list(residual)
        feeds["r"] = rng.standard_normal(residual).astype(dtype)
        cur = "a"
    if act_builder is not None:
        more, cur, extra = act_builder(cur)
        nodes += more
        inits.update(extra)
    rank = max(len(xs), len(residual or ()))
    dims = [f"d{i}" for i in range(rank)]
    return _model(nodes, graph_in, {cur: dims}, inits, opset, dtype), feeds


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "name,build,opset", CONV_ACTS, ids=[f"{a[0]}-{a[2]}-{i}" for i, a in enumerate(CONV_ACTS)]
)
def test_conv_activation_fuses(name, build, opset, dtype):
    model, feeds = _conv_model(*GEOMETRIES[0], build, opset, dtype)
    want = _exact_f64_want(name, dtype, _conv_model(*GEOMETRIES[0], None, opset, dtype)[0], feeds)
    got = _check(model, feeds, "conv_activation_fusion", dtype, want=want)
    assert _ops(got) == ["FusedConv"] and len(got[0].members) == len(model.graph.node)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geom", GEOMETRIES, ids=[str(i) for i in range(len(GEOMETRIES))])
def test_conv_residual_relu_geometries(geom, dtype):
    xs, ws, attrs = geom
    out = (
        _session(_conv_model(xs, ws, attrs, None, 17, dtype, bias=False)[0], level=0)
        .run(None, {"x": np.zeros(xs, dtype)})[0]
        .shape
    )
    model, feeds = _conv_model(xs, ws, attrs, _act("Relu"), 17, dtype, residual=out)
    got = _check(model, feeds, "conv_activation_fusion", dtype)
    assert _ops(got) == ["FusedConv"] and len(got[0].members) == 3


def test_conv_residual_broadcast_and_no_bias():
    # The residual (1, M, 1, 1) broadcasts: fused, added by numpy's broadcasting path.
    model, feeds = _conv_model(*GEOMETRIES[0], _act("Relu"), 17, np.float32, (1, 5, 1, 1), False)
    assert _ops(_check(model, feeds, "conv_activation_fusion")) == ["FusedConv"]
    # A residual that raises the output's shape (batch 3 against batch 1).
    model, feeds = _conv_model(*GEOMETRIES[0], _act("Sigmoid"), 17, np.float32, (3, 5, 8, 7))
    assert _ops(_check(model, feeds, "conv_activation_fusion")) == ["FusedConv"]


def test_conv_add_without_activation_fuses():
    model, feeds = _conv_model(*GEOMETRIES[1], None, 17, np.float32, (2, 6, 5, 4))
    assert _ops(_check(model, feeds, "conv_activation_fusion")) == ["FusedConv"]


def test_conv_parallel_epilogue():
    # 1 x 16 x 96 x 96 outputs > PARALLEL_THRESHOLD: parallel im2col and epilogue.
    model, feeds = _conv_model(
        (1, 8, 96, 96),
        (16, 8, 3, 3),
        {"pads": [1, 1, 1, 1]},
        _act("Relu"),
        17,
        np.float32,
        (1, 16, 96, 96),
    )
    assert _ops(_check(model, feeds, "conv_activation_fusion")) == ["FusedConv"]


def test_float16_conv_relu_fuses():
    model, feeds = _conv_model(*GEOMETRIES[0], _act("Relu"), 17, np.float16)
    want = _session(model, level=0).run(None, feeds)
    sess = _session(model)
    assert _ops(sess.graph_nodes()) == ["FusedConv"]
    assert_close(sess.run(None, feeds), want, rtol=1e-2, atol=1e-2)


def test_resnet_block_folds_and_fuses():
    rng = _rng(14)
    inits = {
        "w1": _conv_w(rng, 8, 8, (3, 3)),
        "w2": _conv_w(rng, 8, 8, (3, 3)),
        **_bn_inits(rng, 8, "b1"),
        **_bn_inits(rng, 8, "b2"),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        _bn("c1", "n1", "b1"),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        _bn("c2", "n2", "b2"),
        helper.make_node("Add", ["n2", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    model = _model(nodes, {"x": [1, 8, 10, 10]}, {"y": [1, 8, 10, 10]}, inits, 15)
    feeds = {"x": rng.standard_normal((1, 8, 10, 10)).astype(np.float32)}
    got = _check(model, feeds, "conv_activation_fusion")
    assert _ops(got) == ["FusedConv", "FusedConv"]
    sess = _session(model, disabled=["conv_bn_folding"])
    assert _ops(sess.graph_nodes()).count("BatchNormalization") == 2
    stats = _session(model).stats()["passes"]
    assert stats["conv_bn_folding"]["rewrites"] == 2
    assert stats["conv_activation_fusion"]["rewrites"] == 2


def test_optimised_model_written_with_fused_nodes(tmp_path):
    model, feeds = _conv_model(*GEOMETRIES[0], _act("Relu"), 17, np.float32)
    so = onnxjit.SessionOptions()
    path = tmp_path / "opt.onnx"
    so.optimized_model_filepath = str(path)
    onnxjit.InferenceSession(model.SerializeToString(), so)
    written = onnx.load(str(path))
    assert [n.op_type for n in written.graph.node] == ["FusedConv"]


# (C, M, H, W, activation, residual): 1x1 convolutions whose products have ragged row blocks
# (M not a multiple of the micro-kernel's rows), ragged column blocks, an inner dimension
# longer than one pass of the GEMM's blocking (C = 300: the epilogue on the last pass only)
# and few columns (the transposed tile form).
_POINTWISE = [
    (3, 13, 5, 7, "Relu", False),
    (16, 40, 20, 20, "Clip", True),
    (300, 7, 6, 6, "Relu", True),
    (300, 70, 9, 9, "Clip", False),
    (64, 384, 3, 3, "Clip", True),
    (24, 10, 17, 19, "HardSwish", True),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", _POINTWISE, ids=[str(i) for i in range(len(_POINTWISE))])
def test_pointwise_conv_epilogue_blocks_and_nan(case, dtype):
    """Bias, residual and activation applied with the product: against numpy in float64,
    with NaN inputs passing through Relu and Clip as they do in numpy."""
    C, M, H, W, act, residual = case
    rng = _rng(7)
    w = rng.standard_normal((M, C, 1, 1)) / math.sqrt(C)
    b = rng.standard_normal(M)
    x = rng.standard_normal((1, C, H, W)).astype(dtype)
    x[0, :, 1, 2] = np.nan  # one output position NaN in every channel
    r = rng.standard_normal((1, M, H, W)).astype(dtype)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"])]
    inputs = {"x": list(x.shape)}
    feeds = {"x": x}
    cur = "c"
    if residual:
        nodes.append(helper.make_node("Add", ["c", "r"], ["a"]))
        inputs["r"] = list(r.shape)
        feeds["r"] = r
        cur = "a"
    inits = {"w": w, "b": b}
    if act == "Clip":
        nodes.append(helper.make_node("Clip", [cur, "lo", "hi"], ["y"]))
        inits.update(lo=np.array(-0.5), hi=np.array(0.75))
    else:
        nodes.append(helper.make_node(act, [cur], ["y"]))
    model = _model(nodes, inputs, {"y": [1, M, H, W]}, inits, 17, dtype)
    z = np.einsum("mc,chw->mhw", w[:, :, 0, 0], x[0].astype(np.float64)) + b[:, None, None]
    if residual:
        z = z + r[0]
    if act == "Relu":
        want = np.maximum(z, 0.0)
    elif act == "Clip":
        want = np.clip(z, -0.5, 0.75)
    else:
        want = z * np.clip(z / 6.0 + 0.5, 0.0, 1.0)
    sess = _session(model)
    assert _ops(sess.graph_nodes()) == ["FusedConv"]
    got = sess.run(None, feeds)[0][0]
    rtol, atol = _TOL[dtype]
    assert np.isnan(got[:, 1, 2]).all()
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", [(5, 300, 37), (130, 20, 33), (1, 64, 70)])
def test_matmul_bias_relu_epilogue_blocks(m, k, n, dtype):
    """A fully connected layer's bias per column and Relu applied with the product, over
    ragged blocks and an inner dimension longer than one pass."""
    model, feeds = _mlp_layer(_act("Relu"), 17, dtype, m=m, k=k, n=n, seed=3)
    feeds["x"][0, :3] = np.nan
    sess = _session(model)
    assert _ops(sess.graph_nodes()) == ["FusedGemm"]
    w = numpy_helper.to_array(model.graph.initializer[0]).astype(np.float64)
    b = numpy_helper.to_array(model.graph.initializer[1]).astype(np.float64)
    want = np.maximum(feeds["x"].astype(np.float64) @ w + b, 0.0)
    got = sess.run(None, feeds)[0]
    rtol, atol = _TOL[dtype]
    assert np.isnan(got[0]).all() and not np.isnan(got[1:]).any()
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
