"""Lowerings (onnxjit.lowering): nodes bound to their kernels by the plan of each signature.

Oracle: onnxruntime on the same feeds, run after run, while the batch size changes (each
signature has its own plan, its own bound kernels) and while a caller keeps the outputs of
earlier runs (no buffer is handed out twice). Which nodes are bound to a kernel rather than
left to their implementation is read from ``stats()["plans"]``.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit


def bound_ops(sess: onnxjit.InferenceSession) -> set[str]:
    """Op types the most recent plan runs through a bound kernel (not the implementation)."""
    return {s["op_type"] for s in sess.stats()["plans"][-1]["steps"] if not s["generic"]}


def _model():
    rng = np.random.default_rng(0)
    d, h = 16, 32

    def init(name, shape, dtype=np.float32):
        arr = rng.standard_normal(shape).astype(dtype) if dtype == np.float32 else None
        return numpy_helper.from_array(arr, name)

    inits = [
        init("w1", (d, h)),
        init("b1", (h,)),
        init("w2", (h, d)),
        init("gamma", (d,)),
        init("beta", (d,)),
        numpy_helper.from_array(np.array([0, 8, 4, 4], np.int64), "shape4"),
        numpy_helper.from_array(np.array([0, 8, 16], np.int64), "shape3"),
        numpy_helper.from_array(np.array([8, 8], np.int64), "halves"),
        numpy_helper.from_array(np.array([1], np.int64), "ax1"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["o"]),
        helper.make_node("Reshape", ["o", "shape4"], ["o4"]),
        helper.make_node("Transpose", ["o4"], ["t4"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["t4"], ["u4"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["u4", "shape3"], ["u"]),
        helper.make_node("Split", ["u", "halves"], ["s0", "s1"], axis=2),
        helper.make_node("Tanh", ["s0"], ["a0"]),
        helper.make_node("Mul", ["s1", "half"], ["a1"]),
        helper.make_node("Concat", ["a1", "a0"], ["c"], axis=2),
        helper.make_node("Add", ["c", "x"], ["r"]),
        helper.make_node("LayerNormalization", ["r", "gamma", "beta"], ["n"], axis=-1),
        helper.make_node("Unsqueeze", ["n", "ax1"], ["n4"]),
        helper.make_node("Squeeze", ["n4", "ax1"], ["y"]),
        helper.make_node("Flatten", ["y"], ["z"], axis=2),
    ]
    graph = helper.make_graph(
        nodes,
        "fast",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8, d])],
        [
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 128]),
            helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", 8, h]),
        ],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("threads", [1, 2])
def test_plans_agree_with_onnxruntime_while_shapes_change(threads):
    m = _model()
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = threads
    sess = onnxjit.InferenceSession(m.SerializeToString(), so)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    kept = []
    for batch in (2, 2, 2, 5, 2, 5, 300, 300, 1, 1):
        x = rng.standard_normal((batch, 8, 16)).astype(np.float32)
        got = sess.run(None, {"x": x})
        want = ref.run(None, {"x": x})
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)
        kept.append((x, got))
    # outputs of earlier runs are still what they were (no buffer handed out twice)
    for x, got in kept:
        for g, w in zip(got, ref.run(None, {"x": x})):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)
    expected = {"FusedGemm", "Reshape", "Transpose", "Split", "Concat", "Flatten"}
    assert expected <= bound_ops(sess)


def test_feeds_of_other_layouts_run_the_same_plan():
    """A Fortran-order feed is made C-contiguous before it reaches the plan's kernels."""
    m = _model()
    sess = onnxjit.InferenceSession(m.SerializeToString())
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(2).standard_normal((3, 8, 16)).astype(np.float32)
    for feed in (x, x, np.asfortranarray(x), x):
        got = sess.run(None, {"x": feed})
        for g, w in zip(got, ref.run(None, {"x": np.ascontiguousarray(feed)})):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_single_elementwise_ops_are_bound(dtype):
    """Lone elementwise ops (optimisation level basic: nothing fuses them) with broadcasting,
    integer division and an attribute operand, while the batch changes."""
    nodes = [
        helper.make_node("Add", ["x", "b"], ["s"]),
        helper.make_node("Div", ["s", "d"], ["q"]),
        helper.make_node("Abs", ["q"], ["y"]),
    ]
    if dtype == np.float32:
        nodes.append(helper.make_node("LeakyRelu", ["y"], ["z"], alpha=0.2))
    else:
        nodes.append(helper.make_node("Neg", ["y"], ["z"]))
    et = TensorProto.FLOAT if dtype == np.float32 else TensorProto.INT32
    rng = np.random.default_rng(3)
    b = rng.integers(-5, 5, (1, 6)).astype(dtype)
    d = rng.integers(1, 4, (6,)).astype(dtype)
    graph = helper.make_graph(
        nodes,
        "ew",
        [helper.make_tensor_value_info("x", et, ["n", 6])],
        [helper.make_tensor_value_info("z", et, ["n", 6])],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(d, "d")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = onnxjit.InferenceSession(m.SerializeToString(), so)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for n in (3, 3, 3, 40000, 3, 40000):
        x = rng.integers(-100, 100, (n, 6)).astype(dtype)
        np.testing.assert_allclose(
            sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-6
        )
    bound = bound_ops(sess)
    assert {"Add", "Div", "Abs"} <= bound, bound
    if dtype == np.float32:
        assert "LeakyRelu" in bound, bound  # its alpha is a 0-d operand made from the attribute


@pytest.mark.parametrize(
    "op,attrs,opset",
    [
        ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 17),
        ("LeakyRelu", {"alpha": 0.2}, 17),
        ("Elu", {"alpha": 0.7}, 17),
        ("Selu", {"alpha": 1.5, "gamma": 1.1}, 17),
        ("Celu", {"alpha": 1.3}, 17),
        ("ThresholdedRelu", {"alpha": 0.25}, 17),
        ("Shrink", {"lambd": 0.4, "bias": 0.1}, 17),
        ("Clip", {"min": -0.5, "max": 0.6}, 6),
    ],
)
def test_activations_with_attribute_operands_are_bound(op, attrs, opset):
    """Lone activations whose attributes become 0-d kernel operands are bound to generated
    kernels (not left to their implementations), agreeing with onnxruntime while the batch
    changes."""
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], **attrs)],
        "act",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 7])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = onnxjit.InferenceSession(m.SerializeToString(), so)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    for n in (2, 2, 2, 50000, 2, 50000):
        x = (rng.standard_normal((n, 7)) * 2).astype(np.float32)
        np.testing.assert_allclose(
            sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6
        )
    for plan in sess.stats()["plans"]:
        assert not any(s["generic"] for s in plan["steps"]), op


def _norm_model():
    """Softmax-13, LogSoftmax-13, LayerNormalization-17 and the Gelu (erf) and RMSNorm
    patterns, which the passes turn into the internal Gelu and RMSNorm operators."""
    rng = np.random.default_rng(4)
    d = 24
    inits = [
        numpy_helper.from_array(rng.standard_normal(d).astype(np.float32), "g"),
        numpy_helper.from_array(rng.standard_normal(d).astype(np.float32), "bb"),
        numpy_helper.from_array(np.array(1.4142135, np.float32), "sqrt2"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
        numpy_helper.from_array(np.array([-1], np.int64), "last"),
    ]
    nodes = [
        helper.make_node("Softmax", ["x"], ["sm"], axis=-1),
        helper.make_node("LogSoftmax", ["sm"], ["ls"], axis=-1),
        helper.make_node("LayerNormalization", ["ls", "g", "bb"], ["ln"], axis=-1),
        helper.make_node("Div", ["ln", "sqrt2"], ["e0"]),
        helper.make_node("Erf", ["e0"], ["e1"]),
        helper.make_node("Add", ["e1", "one"], ["e2"]),
        helper.make_node("Mul", ["ln", "e2"], ["e3"]),
        helper.make_node("Mul", ["e3", "half"], ["ge"]),
        helper.make_node("Pow", ["ge", "two"], ["r0"]),
        helper.make_node("ReduceMean", ["r0", "last"], ["r1"], keepdims=1),
        helper.make_node("Add", ["r1", "eps"], ["r2"]),
        helper.make_node("Sqrt", ["r2"], ["r3"]),
        helper.make_node("Div", ["ge", "r3"], ["r4"]),
        helper.make_node("Mul", ["r4", "g"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "norms",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 5, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 5, d])],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("threads", [1, 2])
def test_row_kernels_agree_with_onnxruntime(threads):
    m = _norm_model()
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = threads
    sess = onnxjit.InferenceSession(m.SerializeToString(), so)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    for n in (2, 2, 2, 700, 2, 700, 1):
        x = rng.standard_normal((n, 5, 24)).astype(np.float32)
        np.testing.assert_allclose(
            sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4
        )
    bound = bound_ops(sess)
    assert {"Softmax", "LogSoftmax", "LayerNormalization", "Gelu", "RMSNorm"} <= bound, bound


def test_attention_agrees_with_onnxruntime():
    """MatMul(Q, K^T) * scale + mask -> Softmax -> MatMul(V), fused into SDPA, with the mask
    fed per run, while the batch changes."""
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s0"]),
        helper.make_node("Mul", ["s0", "scale"], ["s1"]),
        helper.make_node("Add", ["s1", "mask"], ["s2"]),
        helper.make_node("Softmax", ["s2"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    qkv = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["b", 4, 16, 8]) for n in "qkv"]
    graph = helper.make_graph(
        nodes,
        "att",
        [*qkv, helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["b", 1, 1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4, 16, 8])],
        [numpy_helper.from_array(np.array(0.35, np.float32), "scale")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    sess = onnxjit.InferenceSession(m.SerializeToString())
    assert [n.op_type for n in sess.graph_nodes()] == ["SDPA"]
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(6)
    for b in (1, 1, 1, 6, 1, 6):
        feed = {n: rng.standard_normal((b, 4, 16, 8)).astype(np.float32) for n in "qkv"}
        feed["mask"] = np.where(rng.random((b, 1, 1, 16)) < 0.2, -1e4, 0).astype(np.float32)
        np.testing.assert_allclose(
            sess.run(None, feed)[0], ref.run(None, feed)[0], rtol=1e-5, atol=1e-5
        )
    assert bound_ops(sess) == {"SDPA"}


def test_shape_inputs_fed_by_the_caller_are_read_every_run():
    """Reshape and Split given their shape / sizes as graph inputs: a caller that writes new
    values into the same array between runs gets results for the new values (a plan that
    took them for constants would repeat the first run's shapes)."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["x", "shape"], ["r"]),
            helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=1),
        ],
        "caller_shapes",
        [
            helper.make_tensor_value_info("x", f, [2, 6]),
            helper.make_tensor_value_info("shape", i64, [2]),
            helper.make_tensor_value_info("sizes", i64, [2]),
        ],
        [helper.make_tensor_value_info(n, f, ["d0", "d1"]) for n in ("r", "a", "b")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    sess = onnxjit.InferenceSession(m.SerializeToString())
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {
        "x": np.arange(12, dtype=np.float32).reshape(2, 6),
        "shape": np.array([3, 4], np.int64),
        "sizes": np.array([2, 4], np.int64),
    }
    for new_shape, new_sizes in (([3, 4], [2, 4]), ([3, 4], [2, 4]), ([4, 3], [5, 1])):
        feeds["shape"][...] = new_shape
        feeds["sizes"][...] = new_sizes
        for g, w in zip(sess.run(None, feeds), ref.run(None, feeds)):
            assert g.shape == w.shape
            np.testing.assert_array_equal(g, w)


def _caller_weight_model(case):
    """A model whose weights are graph inputs (see the test below)."""
    f = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    if case == "conv":  # 3x3 over 20-wide rows: the row-blocked convolution, packed weights
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1] * 4)]
        ins = [vi("x", f, [1, 8, 20, 20]), vi("w", f, [16, 8, 3, 3]), vi("b", f, [16])]
    elif case == "conv_relu":  # fused into FusedConv
        nodes = [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1] * 4),
            helper.make_node("Relu", ["c"], ["y"]),
        ]
        ins = [vi("x", f, [1, 8, 20, 20]), vi("w", f, [16, 8, 3, 3]), vi("b", f, [16])]
    else:  # LayerNormalization with scale and bias broadcast from one element
        nodes = [helper.make_node("LayerNormalization", ["x", "w", "b"], ["y"], axis=-1)]
        ins = [vi("x", f, [8, 64]), vi("w", f, [1]), vi("b", f, [1])]
    graph = helper.make_graph(nodes, case, ins, [vi("y", f, None)])
    graph.output[0].type.tensor_type.shape.dim.add().dim_param = "d0"
    graph.output[0].type.tensor_type.shape.dim.add().dim_param = "d1"
    if case != "layer_norm":
        for name in ("d2", "d3"):
            graph.output[0].type.tensor_type.shape.dim.add().dim_param = name
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, [tuple(d.dim_value for d in i.type.tensor_type.shape.dim) for i in ins]


@pytest.mark.parametrize("case", ["conv", "conv_relu", "layer_norm"])
def test_weights_fed_by_the_caller_are_read_every_run(case):
    """Weights that are graph inputs, with new values written into the same arrays between
    runs: every run uses the values of its own feeds (no plan or packed weight kept from the
    first run under the arrays' identity)."""
    m, shapes = _caller_weight_model(case)
    sess = onnxjit.InferenceSession(m.SerializeToString())
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(4)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip("xwb", shapes)}
    for _ in range(4):
        got, want = sess.run(None, feeds)[0], ref.run(None, feeds)[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        for name in "wb":
            feeds[name][...] = rng.standard_normal(feeds[name].shape)


def _product_model(c_shape, trans_b, dtype):
    """MatMul by a weight, then Gemm (transB, alpha, beta) with a C of ``c_shape`` (None:
    no C): the unfused products of a session below the extended optimisation level."""
    rng = np.random.default_rng(5)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    k, h, n = 24, 40, 36
    w1 = rng.standard_normal((k, h)).astype(dtype)
    w2 = rng.standard_normal((n, h) if trans_b else (h, n)).astype(dtype)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")]
    gemm_in = ["h", "w2"]
    if c_shape is not None:
        inits.append(numpy_helper.from_array(rng.standard_normal(c_shape).astype(dtype), "c"))
        gemm_in.append("c")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Gemm", gemm_in, ["y"], transB=int(trans_b), alpha=0.75, beta=1.5),
    ]
    graph = helper.make_graph(
        nodes,
        "products",
        [helper.make_tensor_value_info("x", elem, ["batch", k])],
        [helper.make_tensor_value_info("y", elem, ["batch", n])],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize(
    ("c_shape", "trans_b", "dtype"),
    [
        (None, True, np.float32),
        ((36,), True, np.float32),
        ((1, 36), False, np.float64),
        ((), False, np.float32),
        ((3, 36), True, np.float32),  # a full C (batch 3 only): the operator, not bound
    ],
)
@pytest.mark.parametrize("threads", [1, 2])
def test_unfused_products_are_bound(c_shape, trans_b, dtype, threads):
    """With graph optimisation at basic (no FusedGemm), MatMul by an initializer and Gemm
    with an initializer B and a row or scalar C are bound like FusedGemm, and agree with
    onnxruntime while the batch changes and earlier outputs are kept."""
    m = _product_model(c_shape, trans_b, dtype)
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = threads
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = onnxjit.InferenceSession(m.SerializeToString(), so)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(6)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    kept = []
    full_c = c_shape == (3, 36)
    for batch in (3, 3, 3) if full_c else (3, 3, 1, 3, 700, 700):
        x = rng.standard_normal((batch, 24)).astype(dtype)
        got = sess.run(None, {"x": x})[0]
        np.testing.assert_allclose(got, ref.run(None, {"x": x})[0], rtol=tol, atol=tol)
        kept.append((x, got))
    for x, got in kept:
        np.testing.assert_allclose(got, ref.run(None, {"x": x})[0], rtol=tol, atol=tol)
    if full_c:
        assert bound_ops(sess) == {"MatMul"}
    else:
        assert bound_ops(sess) == {"MatMul", "Gemm"}
