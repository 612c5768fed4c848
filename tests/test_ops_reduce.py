"""Reduce*, ArgMax/ArgMin, TopK and CumSum against onnx's ReferenceEvaluator.

One row per op x registered version x dtype x shape class. Each registered version is run at an
opset where it is the selected implementation: the axes-attribute Reduce* at opset 11 (and 13
for the ops whose axes moved at 18), the axes-input versions at 18 (13 for ReduceSum).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from oracle import check_node, make_node_model

import onnxjit
from onnxjit.errors import InvalidArgumentError
from onnxjit.kernels import _jit

REDUCE_OPS = [
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
]
# The reference evaluator rejects integer inputs for these two (it raises a TypeError inside its
# implementation), so they are checked on float types only.
FLOAT_ONLY = {"ReduceLogSum", "ReduceLogSumExp"}


def _data(op: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    rng = np.random.default_rng(abs(hash((op, shape))) % 2**32)
    if np.dtype(dtype).kind in "iu":
        lo = 1 if op in ("ReduceLogSum", "ReduceProd") else -4
        if np.dtype(dtype).kind == "u":
            lo = max(lo, 0)
        return rng.integers(lo, 5, size=shape).astype(dtype)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) > 0.5
    x = rng.standard_normal(shape)
    if op == "ReduceLogSum":
        x = np.abs(x) + 0.1
    if op == "ReduceProd":
        x = 0.5 + rng.random(shape)
    return x.astype(dtype)


# (shape, axes, keepdims): the shape classes.
SHAPES = [
    pytest.param((), None, 1, id="scalar"),
    pytest.param((7,), None, 0, id="1d-all"),
    pytest.param((7,), [0], 1, id="1d-axis0"),
    pytest.param((2, 3, 4), [1], 1, id="3d-mid"),
    pytest.param((2, 3, 4), [0, 2], 0, id="3d-nonadjacent"),
    pytest.param((2, 3, 4), [-1], 0, id="3d-negative"),
    pytest.param((2, 3, 4), [0, 1], 1, id="3d-leading"),
    pytest.param((2, 3, 4), None, 0, id="3d-all"),
    pytest.param((0, 3), [0], 1, id="empty-reduced"),
    pytest.param((2, 0), [0], 0, id="empty-kept"),
]


def _oracle(op: str, x: np.ndarray) -> str:
    # The reference evaluator's ReduceLogSumExp fails on 0-d inputs (a TypeError inside its
    # implementation); onnxruntime is the oracle there.
    return "ort" if op == "ReduceLogSumExp" and x.ndim == 0 else "ref"


def _attr_opset(op: str) -> int:
    # ReduceSum's attribute form ends at 13; 11 is the newest opset where it is in force.
    return 11 if op == "ReduceSum" else 13


def _input_opset(op: str) -> int:
    return 13 if op == "ReduceSum" else 18


def _dtypes(op: str):
    return [np.float32] if op in FLOAT_ONLY else [np.float32, np.int64]


@pytest.mark.parametrize("shape,axes,keepdims", SHAPES)
@pytest.mark.parametrize(
    "op,dtype",
    [(op, dt) for op in REDUCE_OPS for dt in _dtypes(op)],
    ids=lambda v: v if isinstance(v, str) else np.dtype(v).name,
)
def test_reduce_axes_attribute(op, dtype, shape, axes, keepdims):
    x = _data(op, shape, dtype)
    attrs = {"keepdims": keepdims}
    if axes is not None:
        attrs["axes"] = axes
    oracle = _oracle(op, x)
    check_node(op, {"x": x}, attrs, opset=_attr_opset(op), rtol=1e-5, atol=1e-5, oracle=oracle)


@pytest.mark.parametrize("shape,axes,keepdims", SHAPES)
@pytest.mark.parametrize(
    "op,dtype",
    [(op, dt) for op in REDUCE_OPS for dt in _dtypes(op)],
    ids=lambda v: v if isinstance(v, str) else np.dtype(v).name,
)
def test_reduce_axes_input(op, dtype, shape, axes, keepdims):
    x = _data(op, shape, dtype)
    inputs = {"x": x, "axes": None if axes is None else np.array(axes, dtype=np.int64)}
    check_node(
        op,
        inputs,
        {"keepdims": keepdims},
        opset=_input_opset(op),
        const_inputs=("axes",),
        rtol=1e-5,
        atol=1e-5,
        oracle=_oracle(op, x),
    )


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_noop_with_empty_axes(op):
    """Empty axes + noop_with_empty_axes=1: only the elementwise steps (square, log, ...)."""
    x = _data(op, (2, 3), np.float32)
    inputs = {"x": x, "axes": np.array([], dtype=np.int64)}
    check_node(
        op,
        inputs,
        {"keepdims": 1, "noop_with_empty_axes": 1},
        opset=_input_opset(op),
        const_inputs=("axes",),
    )


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes", [[1], None])
def test_reduce_max_min_bool_opset20(op, axes):
    x = _data(op, (3, 4), np.bool_)
    inputs = {"x": x, "axes": None if axes is None else np.array(axes, dtype=np.int64)}
    check_node(op, inputs, {"keepdims": 0}, opset=20, const_inputs=("axes",))


@pytest.mark.parametrize("op", ["ReduceLogSum", "ReduceLogSumExp"])
def test_reduce_log_opset28(op):
    x = _data(op, (3, 4), np.float32)
    inputs = {"x": x, "axes": np.array([0], dtype=np.int64)}
    check_node(op, inputs, {"keepdims": 1}, opset=28, const_inputs=("axes",))


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMean", "ReduceLogSumExp"])
@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.uint8])
def test_reduce_other_dtypes(op, dtype):
    if op == "ReduceLogSumExp" and np.dtype(dtype).kind != "f":
        pytest.skip("the reference evaluator rejects integer ReduceLogSumExp (see FLOAT_ONLY)")
    x = _data(op, (3, 5), np.float32 if dtype == np.float16 else dtype)
    # Small non-negative values: the reference accumulates uint8 means in uint8 (wrapping).
    x = np.abs(x).astype(dtype)
    tol = 2e-3 if dtype == np.float16 else 1e-6
    check_node(
        op, {"x": x}, {"axes": [1], "keepdims": 0}, opset=_attr_opset(op), rtol=tol, atol=tol
    )


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceSumSquare"])
@pytest.mark.parametrize("axes", [[1], [0]])
def test_reduce_parallel_path(op, axes):
    """Big enough to take the parallel kernel (outer > 1 and above the threshold)."""
    x = _data(op, (300, 2 + _jit.PARALLEL_THRESHOLD // 300), np.float32)
    attrs = {"axes": axes, "keepdims": 0}
    check_node(op, {"x": x}, attrs, opset=_attr_opset(op), rtol=1e-4, atol=1e-4)


def test_reduce_axis_out_of_range_is_an_error():
    # axes is a graph input so that shape inference cannot reject the model before it runs.
    x = np.zeros((2, 3), np.float32)
    axes = np.array([2], dtype=np.int64)
    model = make_node_model("ReduceMax", {"x": x, "axes": axes}, {}, 18)
    out = model.graph.output[0].type.tensor_type
    out.elem_type = onnx.TensorProto.FLOAT
    for name in ("a", "b"):
        out.shape.dim.add().dim_param = name
    sess = onnxjit.InferenceSession(model.SerializeToString())
    with pytest.raises(InvalidArgumentError, match=r"axis 2 is out of range"):
        sess.run(None, {"x": x, "axes": axes})


# -- ArgMax / ArgMin ---------------------------------------------------------------------------
ARG_CASES = [
    pytest.param((7,), 0, 1, id="1d"),
    pytest.param((3, 4, 5), 1, 0, id="3d-mid"),
    pytest.param((3, 4, 5), -1, 1, id="3d-negative"),
    pytest.param((0, 3), 1, 1, id="empty-outer"),
]


def _arg_data(shape, dtype):
    # Few distinct values, so that ties occur and the tie rules matter.
    rng = np.random.default_rng(7)
    return rng.integers(0, 3, size=shape).astype(dtype)


@pytest.mark.parametrize("shape,axis,keepdims", ARG_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.int64], ids=["float32", "int64"])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_version_1(op, dtype, shape, axis, keepdims):
    x = _arg_data(shape, dtype)
    check_node(op, {"x": x}, {"axis": axis, "keepdims": keepdims}, opset=11)


@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("shape,axis,keepdims", ARG_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.int64], ids=["float32", "int64"])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_version_12(op, dtype, shape, axis, keepdims, last):
    x = _arg_data(shape, dtype)
    attrs = {"axis": axis, "keepdims": keepdims, "select_last_index": last}
    check_node(op, {"x": x}, attrs, opset=13)


@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_nan(op, last):
    x = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, 2.0, -1.0, 5.0]], dtype=np.float32)
    check_node(op, {"x": x}, {"axis": 1, "select_last_index": last}, opset=13)


def test_arg_empty_axis_is_an_error():
    model = make_node_model("ArgMax", {"x": np.zeros((0, 3), np.float32)}, {"axis": 0}, 13)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    with pytest.raises(InvalidArgumentError, match="size 0"):
        sess.run(None, {"x": np.zeros((0, 3), np.float32)})


# -- TopK ----------------------------------------------------------------------------------------
TOPK_CASES = [
    pytest.param((9,), -1, 4, id="1d"),
    pytest.param((3, 6, 4), 1, 3, id="3d-mid"),
    pytest.param((3, 6, 4), -1, 4, id="3d-last-all"),
    pytest.param((3, 5), 1, 0, id="k0"),
    pytest.param((0, 5), 1, 2, id="empty-outer"),
    # k much smaller than the line: the one-pass selection, not the sort
    pytest.param((2, 200, 3), 1, 5, id="long-lines"),
]


def _topk_data(shape, dtype):
    rng = np.random.default_rng(3)
    return rng.integers(-3, 4, size=shape).astype(dtype)  # many ties


# k=0 is left out at version 1: onnx shape inference rejects k=0 as an attribute there, so the
# one-node model cannot be built.
@pytest.mark.parametrize("shape,axis,k", [c for c in TOPK_CASES if c.id != "k0"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64], ids=["float32", "int64"])
def test_topk_version_1(dtype, shape, axis, k):
    x = _topk_data(shape, dtype)
    check_node("TopK", {"x": x}, {"axis": axis, "k": k}, opset=9, n_outputs=2)


@pytest.mark.parametrize("shape,axis,k", TOPK_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.int64], ids=["float32", "int64"])
def test_topk_version_10(dtype, shape, axis, k):
    x = _topk_data(shape, dtype)
    inputs = {"x": x, "k": np.array([k], dtype=np.int64)}
    check_node("TopK", inputs, {"axis": axis}, opset=10, n_outputs=2)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("shape,axis,k", TOPK_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.int64], ids=["float32", "int64"])
def test_topk_version_11(dtype, shape, axis, k, largest):
    x = _topk_data(shape, dtype)
    inputs = {"x": x, "k": np.array([k], dtype=np.int64)}
    attrs = {"axis": axis, "largest": largest, "sorted": 1}
    check_node("TopK", inputs, attrs, opset=11, n_outputs=2)


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_nan_and_float16(largest):
    x = np.array([1.0, np.nan, 3.0, 3.0, np.nan, -2.0], dtype=np.float32)
    inputs = {"x": x, "k": np.array([4], dtype=np.int64)}
    check_node("TopK", inputs, {"largest": largest}, opset=24, n_outputs=2)
    inputs = {"x": x.astype(np.float16), "k": np.array([3], dtype=np.int64)}
    check_node("TopK", inputs, {"largest": largest}, opset=11, n_outputs=2)


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_long_lines_with_nan_and_ties(largest):
    # the selection path (k much smaller than the line): NaN ranks above every number, ties
    # keep the lower index, -0.0 ties with 0.0
    rng = np.random.default_rng(11)
    x = rng.integers(-2, 3, size=(3, 160)).astype(np.float32)
    x[rng.random(x.shape) < 0.03] = np.nan
    x[0, 5], x[0, 9] = -0.0, 0.0
    inputs = {"x": x, "k": np.array([7], dtype=np.int64)}
    check_node("TopK", inputs, {"largest": largest}, opset=11, n_outputs=2)


def test_topk_k_too_large_is_an_error():
    x = np.zeros((2, 3), np.float32)
    model = make_node_model("TopK", {"x": x, "k": np.array([4])}, {}, 11, n_outputs=2)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    with pytest.raises(InvalidArgumentError, match=r"k = 4 is outside \[0, 3\]"):
        sess.run(None, {"x": x, "k": np.array([4])})


# -- CumSum --------------------------------------------------------------------------------------
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize(
    "shape,axis",
    [
        pytest.param((6,), 0, id="1d"),
        pytest.param((2, 3, 4), 1, id="3d-mid"),
        pytest.param((2, 3, 4), -1, id="3d-negative"),
        pytest.param((2, 0, 3), 1, id="empty"),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("opset", [11, 14])
def test_cumsum(opset, dtype, shape, axis, exclusive, reverse):
    rng = np.random.default_rng(1)
    x = rng.integers(-5, 6, size=shape).astype(dtype)
    inputs = {"x": x, "axis": np.array(axis, dtype=np.int32 if opset == 11 else np.int64)}
    check_node("CumSum", inputs, {"exclusive": exclusive, "reverse": reverse}, opset=opset)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("axes", "keepdims"), [([1, 2], 1), ([-1], 0), (None, 0), ([0, 2], 1)])
@pytest.mark.parametrize("op", [*REDUCE_OPS, "ArgMax", "ArgMin"])
def test_plan_binds_reductions_while_the_batch_changes(op, axes, keepdims, dtype):
    """Reductions over constant axes run as the plan's bound call (adjacent axes; non-adjacent
    ones through the implementation), equal to onnxruntime run after run as the batch
    changes, with the output fed to a consumer that may write over it."""
    import onnxruntime as ort

    h = onnx.helper
    et = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    arg = op.startswith("Arg")
    if arg:
        if axes is None or len(axes) != 1:
            pytest.skip("ArgMax/ArgMin take one axis")
        attrs = {"axis": axes[0], "keepdims": keepdims}
    else:
        attrs = {"keepdims": keepdims} if axes is None else {"axes": axes, "keepdims": keepdims}
    inputs, inits = ["x"], []
    if op == "ReduceSum" and axes is not None:  # ReduceSum-13: the axes as a constant input
        inputs.append("axes")
        inits.append(onnx.numpy_helper.from_array(np.array(attrs.pop("axes"), np.int64), "axes"))
    nodes = [h.make_node(op, inputs, ["r"], **attrs), h.make_node("Neg", ["r"], ["y"])]
    rank = 3 - (0 if keepdims else (3 if axes is None else len(axes)))
    graph = h.make_graph(
        nodes,
        "reduce",
        [h.make_tensor_value_info("x", et, ["n", 5, 6])],
        [h.make_tensor_value_info("y", onnx.TensorProto.INT64 if arg else et, [None] * rank)],
        inits,
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13 if op == "ReduceSum" else 17)])
    blob = model.SerializeToString()
    sess = onnxjit.InferenceSession(blob)
    ref = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    for n in (2, 2, 3, 1, 3):
        x = _data(op, (n, 5, 6), dtype)
        (got,) = sess.run(None, {"x": x})
        (want,) = ref.run(None, {"x": x})
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        (step, _) = sess.stats()["plans"][-1]["steps"]
        adjacent = axes is None or len(axes) == 1 or axes == [1, 2]
        assert step["generic"] == (not adjacent)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_plan_binds_cumsum_with_a_constant_axis(exclusive, reverse, dtype):
    """CumSum along a constant axis is the plan's bound call, equal to onnxruntime while the
    batch changes."""
    import onnxruntime as ort

    h = onnx.helper
    et = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = h.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
    graph = h.make_graph(
        [node],
        "cumsum",
        [h.make_tensor_value_info("x", et, ["n", 5, 6])],
        [h.make_tensor_value_info("y", et, ["n", 5, 6])],
        [onnx.numpy_helper.from_array(np.array(-2, np.int64), "axis")],
    )
    blob = h.make_model(graph, opset_imports=[h.make_opsetid("", 14)]).SerializeToString()
    sess = onnxjit.InferenceSession(blob)
    ref = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    for n in (2, 2, 3, 1):
        x = _data("ReduceSum", (n, 5, 6), dtype)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0],
                                   rtol=1e-6, atol=1e-6)  # fmt: skip
        (step,) = sess.stats()["plans"][-1]["steps"]
        assert not step["generic"]
