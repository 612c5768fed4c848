"""Reduction fusion (passes/fuse_reduce.py): ReduceSum/Mean/Max of an elementwise chain.

Oracle: onnxruntime on the same model, and onnxjit with the pass switched off. Also checks
which cases fuse (trailing axes, known axes, a producer read only by the Reduce) and that the
others keep their nodes or fall back inside the fused node.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxjit

F32 = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, "red", inputs, outputs, list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _vi(name, shape, et=F32):
    return helper.make_tensor_value_info(name, et, shape)


def _axes(values):
    return numpy_helper.from_array(np.array(values, np.int64), "axes")


# The float16 graphs here check the fused operators' own float16 kernels, which serve CUDA
# sessions; on the CPU the float16_in_float32 pass would compute them in float32 instead.
F16_KERNELS = ["float16_in_float32"]


def _run_all(m, feed, tol=1e-5, oracle="onnxruntime"):
    sess = onnxjit.InferenceSession(m.SerializeToString(), disabled_optimizers=F16_KERNELS)
    off = onnxjit.InferenceSession(
        m.SerializeToString(), disabled_optimizers=["reduction_fusion", *F16_KERNELS]
    )
    if oracle == "onnxruntime":
        ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    else:
        ref = ReferenceEvaluator(m)
    for _ in range(2):  # the second run takes the cached plan
        got = sess.run(None, feed)[0]
        want = ref.run(None, feed)[0]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        np.testing.assert_allclose(got, off.run(None, feed)[0], rtol=tol, atol=tol)
    return [n.op_type for n in sess.graph_nodes()]


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("shape", [(7, 33), (2, 3, 130), (1, 5), (4000, 64)])
def test_sum_of_squares_over_the_last_axis_fuses(keepdims, shape):
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "axes"], ["y"], keepdims=keepdims),
    ]
    out = list(shape[:-1]) + ([1] if keepdims else [])
    m = _model(nodes, [_vi("x", list(shape))], [_vi("y", out)], [_axes([-1])])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    assert _run_all(m, {"x": x}, tol=1e-4) == ["FusedReduce"]


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceSum"])
def test_chain_with_a_broadcast_operand_reduced_over_two_trailing_axes(op):
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"]),
        helper.make_node("Tanh", ["a"], ["t"]),
        helper.make_node("Mul", ["t", "x"], ["m"]),
        helper.make_node(op, ["m", "axes"], ["y"], keepdims=1),
    ]
    rng = np.random.default_rng(1)
    b = rng.standard_normal((1, 1, 1)).astype(np.float32)
    m = _model(
        nodes,
        [_vi("x", [3, 4, 50])],
        [_vi("y", [3, 1, 1])],
        [_axes([1, 2]), numpy_helper.from_array(b, "b")],
    )
    x = rng.standard_normal((3, 4, 50)).astype(np.float32)
    assert _run_all(m, {"x": x}, tol=1e-4) == ["FusedReduce"]


def test_max_propagates_nan_and_infinities():
    nodes = [
        helper.make_node("Abs", ["x"], ["a"]),
        helper.make_node("Neg", ["a"], ["n"]),
        helper.make_node("ReduceMax", ["n", "axes"], ["y"], keepdims=0),
    ]
    m = _model(nodes, [_vi("x", [4, 6])], [_vi("y", [4])], [_axes([-1])])
    x = np.random.default_rng(2).standard_normal((4, 6)).astype(np.float32)
    x[1, 3] = np.nan
    x[2, :] = np.inf
    x[3, 0] = 0.0
    # onnx's reference: a NaN in the row makes the maximum NaN (onnxruntime 1.32 skips it)
    got = _run_all(m, {"x": x}, oracle="reference")
    assert got == ["FusedReduce"]


def test_float16_and_float64():
    for et, dt, tol in (
        (TensorProto.FLOAT16, np.float16, 2e-2),
        (TensorProto.DOUBLE, np.float64, 1e-12),
    ):
        nodes = [
            helper.make_node("Sigmoid", ["x"], ["s"]),
            helper.make_node("ReduceMean", ["s", "axes"], ["y"], keepdims=0),
        ]
        m = _model(nodes, [_vi("x", [5, 40], et)], [_vi("y", [5], et)], [_axes([-1])])
        x = np.random.default_rng(3).standard_normal((5, 40)).astype(dt)
        assert _run_all(m, {"x": x}, tol=tol) == ["FusedReduce"]


@pytest.mark.parametrize("case", ["leading_axis", "middle_axis", "empty_axes_all"])
def test_other_axes_still_agree(case):
    """Leading or middle axes fall back inside the fused node; empty axes reduce everything."""
    axes = {"leading_axis": [0], "middle_axis": [1], "empty_axes_all": []}[case]
    nodes = [
        helper.make_node("Exp", ["x"], ["e"]),
        helper.make_node("ReduceSum", ["e", "axes"], ["y"], keepdims=1),
    ]
    out = {"leading_axis": [1, 4, 5], "middle_axis": [3, 1, 5], "empty_axes_all": [1, 1, 1]}
    m = _model(nodes, [_vi("x", [3, 4, 5])], [_vi("y", out[case])], [_axes(axes)])
    x = np.random.default_rng(4).standard_normal((3, 4, 5)).astype(np.float32)
    assert _run_all(m, {"x": x}, tol=1e-5) == ["FusedReduce"]


def test_not_fused_when_the_chain_is_read_elsewhere_or_axes_unknown_or_ints():
    # the squared values are also a graph output
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "axes"], ["y"], keepdims=0),
    ]
    m = _model(nodes, [_vi("x", [3, 4])], [_vi("y", [3]), _vi("sq", [3, 4])], [_axes([-1])])
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    assert "FusedReduce" not in _run_all(m, {"x": x})
    # the axes come from a graph input
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "ax"], ["y"], keepdims=0),
    ]
    m = _model(nodes, [_vi("x", [3, 4]), _vi("ax", [1], TensorProto.INT64)], [_vi("y", [3])])
    assert "FusedReduce" not in _run_all(m, {"x": x, "ax": np.array([1], np.int64)})
    # integers: fused node, reduced by the ReduceSum op's own rules
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "axes"], ["y"], keepdims=0),
    ]
    m = _model(
        nodes,
        [_vi("x", [3, 4], TensorProto.INT32)],
        [_vi("y", [3], TensorProto.INT32)],
        [_axes([-1])],
    )
    xi = np.random.default_rng(6).integers(-50, 50, (3, 4)).astype(np.int32)
    _run_all(m, {"x": xi})


@pytest.mark.parametrize("opset", [11, 13, 17])
def test_axes_as_attributes_in_older_versions(opset):
    red_in = ["sq"] if opset < 13 else ["sq", "axes"]
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node(
            "ReduceSum", red_in, ["y"], keepdims=0, **({"axes": [-1]} if opset < 13 else {})
        ),
    ]
    inits = [] if opset < 13 else [_axes([-1])]
    m = _model(nodes, [_vi("x", [6, 9])], [_vi("y", [6])], inits, opset=opset)
    x = np.random.default_rng(7).standard_normal((6, 9)).astype(np.float32)
    assert _run_all(m, {"x": x}, tol=1e-5) == ["FusedReduce"]


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean"])
def test_long_float32_sums_stay_accurate_on_repeated_values(op):
    """A fused float32 sum over 32768 sigmoids of 8 values repeated (the pattern an Expand
    feeding a reduction gives), against float64 numpy: within 2e-6 relative (8e-7 measured;
    a single float32 partial sum per vector lane over the whole row reached 2.4e-5, each
    lane adding one value 4096 times)."""
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node(op, ["s", "axes"], ["y"], keepdims=0),
    ]
    m = _model(nodes, [_vi("x", [3, 32768])], [_vi("y", [3])], [_axes([-1])])
    sess = onnxjit.InferenceSession(m.SerializeToString())
    assert [n.op_type for n in sess.graph_nodes()] != ["Sigmoid", op]
    rng = np.random.default_rng(8)
    for _ in range(3):
        x = np.tile(rng.standard_normal((3, 8)).astype(np.float32), (1, 4096))
        s64 = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
        want = s64.sum(axis=1) if op == "ReduceSum" else s64.mean(axis=1)
        got = sess.run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=2e-6)
