"""Miscellaneous operators, random generators and training optimisers vs the reference
evaluator.

One row per op x version x dtype x shape class. Versions that only add element types
(Compress-28, ReverseSequence-28, Unique-28, LpNormalization-22, MaxUnpool-11/22, Det-22,
NegativeLogLikelihoodLoss-13/22, Random*-22, Bernoulli-22, Multinomial-22) are run at those
opsets too, to show that the earlier registration serves them. Random operators cannot be
compared value by value: their tests check shapes, dtypes, seeding and sample statistics.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from oracle import assert_close, check_node, make_node_model, ort_outputs, reference_outputs

import onnxjit
from onnxjit.errors import InvalidArgumentError

RNG = np.random.default_rng(11)
TRAINING = "ai.onnx.preview.training"


def rand(shape, dtype=np.float32, scale=1.0):
    arr = RNG.standard_normal(shape) * scale
    if np.dtype(dtype).kind in "iu":
        return np.round(arr * 3).astype(dtype)
    if np.dtype(dtype) == np.bool_:
        return arr > 0
    return arr.astype(dtype)


# ---- Compress -------------------------------------------------------------------------------

COMPRESS_CASES = [
    # (shape, condition, axis)
    ((3, 2), [False, True, True], 0),
    ((3, 2), [True, False], 1),
    ((3, 2), [False, True, False, False, True], None),
    ((3, 4, 2), [True, False, True], 1),
    ((3, 2), [True], 0),  # shorter condition: the rest is not selected
    ((0, 2), [True, False], 1),
    ((4,), [False, False, False, False], 0),
]


@pytest.mark.parametrize("opset", [9, 11, 28])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("shape,cond,axis", COMPRESS_CASES)
def test_compress(opset, dtype, shape, cond, axis):
    attrs = {} if axis is None else {"axis": axis}
    inputs = {"x": rand(shape, dtype), "c": np.array(cond, dtype=bool)}
    check_node("Compress", inputs, attrs, opset=opset)


@pytest.mark.parametrize("opset", [11, 28])
def test_compress_negative_axis(opset):
    inputs = {"x": rand((2, 3, 4)), "c": np.array([True, False, True, True])}
    check_node("Compress", inputs, {"axis": -1}, opset=opset)


def test_compress_bfloat16_and_strings():
    c = np.array([True, False, True])
    x = rand((3, 2)).astype(ml_dtypes.bfloat16)
    check_node("Compress", {"x": x, "c": c}, {"axis": 0}, opset=11)
    s = np.array(["a", "bb", "c"], dtype=object)
    check_node("Compress", {"x": s, "c": c}, {"axis": 0}, opset=11)


def test_compress_condition_selecting_past_the_axis_is_an_error():
    model = make_node_model("Compress", {"x": rand((2,)), "c": np.ones(3, bool)}, {"axis": 0}, 11)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    with pytest.raises(InvalidArgumentError, match="selects index 2"):
        sess.run(None, {"x": rand((2,)), "c": np.ones(3, bool)})


# ---- CumProd ---------------------------------------------------------------------------------

CUMPROD_SHAPES = [((5,), 0), ((3, 4), 1), ((3, 4), -2), ((2, 3, 4), 1), ((2, 0, 3), 1), ((4, 1), 0)]


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("shape,axis", CUMPROD_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_cumprod(exclusive, reverse, shape, axis, dtype):
    x = rand(shape, dtype, 0.7) + (1 if np.dtype(dtype).kind == "i" else 0)
    inputs = {"x": x.astype(dtype), "axis": np.array(axis, dtype=np.int64)}
    attrs = {"exclusive": exclusive, "reverse": reverse}
    check_node("CumProd", inputs, attrs, opset=26, rtol=1e-5)


@pytest.mark.parametrize("axis_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.uint64])
def test_cumprod_other_types(axis_dtype, dtype):
    x = (np.abs(rand((3, 5), np.float32)) + 0.5).astype(dtype)
    if np.dtype(dtype).kind == "u":
        x = np.arange(1, 16, dtype=dtype).reshape(3, 5)
    inputs = {"x": x, "axis": np.array(1, dtype=axis_dtype)}
    check_node("CumProd", inputs, {"reverse": 1}, opset=26, rtol=2e-2, atol=1e-2)


# ---- ReverseSequence ---------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [10, 28])
@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
@pytest.mark.parametrize("shape", [(4, 4), (5, 3, 2), (3, 5, 2, 2)], ids=["2d", "3d", "4d"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.float16, np.int8])
def test_reverse_sequence(opset, batch_axis, time_axis, shape, dtype):
    n_batch, n_time = shape[batch_axis], shape[time_axis]
    lens = RNG.integers(0, n_time + 1, size=n_batch).astype(np.int64)
    inputs = {"x": rand(shape, dtype), "lens": lens}
    attrs = {"batch_axis": batch_axis, "time_axis": time_axis}
    check_node("ReverseSequence", inputs, attrs, opset=opset)


def test_reverse_sequence_strings():
    x = np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=object)
    inputs = {"x": x, "lens": np.array([3, 2], dtype=np.int64)}
    check_node("ReverseSequence", inputs, {"batch_axis": 0, "time_axis": 1}, opset=10)


def test_reverse_sequence_length_past_the_time_axis_is_an_error():
    inputs = {"x": rand((3, 2)), "lens": np.array([4, 1], dtype=np.int64)}
    model = make_node_model("ReverseSequence", inputs, {}, 10)
    with pytest.raises(InvalidArgumentError, match=r"must lie in \[0, 3\]"):
        onnxjit.InferenceSession(model.SerializeToString()).run(None, inputs)


# ---- Unique ----------------------------------------------------------------------------------

UNIQUE_CASES = [
    # (values, axis)
    (np.array([2, 1, 1, 3, 4, 3]), None),
    (np.array([[1, 3], [2, 3]]), None),
    (np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4]]), 0),
    (np.array([[3, 0, 3], [1, 0, 1], [2, 3, 2]]), 1),
    (np.array([[[1, 1], [0, 1], [2, 1], [0, 1]], [[1, 1], [0, 1], [2, 1], [0, 1]]]), 1),
    (np.array([[[1, 1], [0, 1]], [[1, 1], [0, 1]]]), -1),
    (np.array([7]), None),
]


@pytest.mark.parametrize("opset", [11, 28])
@pytest.mark.parametrize("sorted_", [1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8])
@pytest.mark.parametrize("values,axis", UNIQUE_CASES)
def test_unique(opset, sorted_, dtype, values, axis):
    attrs = {"sorted": sorted_}
    if axis is not None:
        attrs["axis"] = axis
    # The reference evaluator reorders unsorted results along axis 0 whatever the axis, and
    # returns sorted values when only Y is asked for: onnxruntime is the oracle for sorted=0.
    oracle = "ref" if sorted_ else "ort"
    opset = min(opset, 11) if oracle == "ort" else opset  # onnxruntime stops at Unique-11
    check_node(
        "Unique", {"x": values.astype(dtype)}, attrs, opset=opset, n_outputs=4, oracle=oracle
    )


def test_unique_random_large():
    x = RNG.integers(0, 50, size=(400,)).astype(np.float64)
    check_node("Unique", {"x": x}, {"sorted": 0}, opset=11, n_outputs=4, oracle="ort")
    check_node("Unique", {"x": x}, {}, opset=11, n_outputs=4)


def test_unique_first_output_only():
    x = np.array([3, 1, 3, 2], np.int64)
    check_node("Unique", {"x": x}, {"sorted": 0}, opset=11, oracle="ort")
    check_node("Unique", {"x": x}, {"sorted": 1}, opset=11)


# ---- LpNormalization ---------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [1, 22])
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("shape,axis", [((5,), 0), ((3, 4), -1), ((3, 4), 0), ((2, 3, 4), 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lp_normalization(opset, p, shape, axis, dtype):
    # The reference evaluator sums x**p without abs (wrong for p=1 and negative inputs):
    # onnxruntime is the oracle.
    x = rand(shape, dtype)
    attrs = {"axis": axis, "p": p}
    check_node("LpNormalization", {"x": x}, attrs, opset=opset, oracle="ort", rtol=1e-5)


@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization_zero_rows_give_zeros(p):
    x = rand((3, 4))
    x[1] = 0
    got = check_node("LpNormalization", {"x": x}, {"p": p}, opset=1, oracle="ort")
    assert not np.isnan(got[0]).any() and (got[0][1] == 0).all()


def test_lp_normalization_float16_and_empty():
    # onnxruntime has no float16 kernel; the reference is right for p=2 (x**2 >= 0).
    x16 = rand((3, 4), np.float16)
    check_node("LpNormalization", {"x": x16}, {"p": 2}, opset=1, rtol=2e-3)
    check_node("LpNormalization", {"x": rand((0, 4))}, {}, opset=1, oracle="ort")


# ---- MaxUnpool ---------------------------------------------------------------------------------


def _maxpool_indices(x, kernel, strides, pads=None):
    """Pooled values and flat indices of a max pool (test input builder)."""
    attrs = {"kernel_shape": kernel, "strides": strides}
    if pads:
        attrs["pads"] = pads
    model = make_node_model("MaxPool", {"x": x}, attrs, 12, n_outputs=2)
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, {"x": x})


@pytest.mark.parametrize("opset", [9, 11, 22])
@pytest.mark.parametrize(
    "shape,kernel,strides",
    [((1, 1, 4, 4), [2, 2], [2, 2]), ((2, 3, 6), [3], [3]), ((1, 2, 4, 4, 2), [2, 2, 2], None)],
    ids=["2d", "1d", "3d"],
)
def test_max_unpool(opset, shape, kernel, strides):
    x = rand(shape)
    y, idx = _maxpool_indices(x, kernel, strides or [1] * len(kernel))
    attrs = {"kernel_shape": kernel}
    if strides:
        attrs["strides"] = strides
    check_node("MaxUnpool", {"x": y, "i": idx}, attrs, opset=opset)


def test_max_unpool_with_pads():
    x = rand((1, 2, 5, 5))
    y, idx = _maxpool_indices(x, [2, 2], [2, 2], [0, 0, 1, 1])
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1]}
    check_node("MaxUnpool", {"x": y, "i": idx}, attrs, opset=11)


@pytest.mark.parametrize("const", [True, False])
def test_max_unpool_inverts_max_pool_with_output_shape(const):
    """MaxPool on 5x5 then MaxUnpool with output_shape 5x5: the maxima return to their
    places. The spec's indices are linear in the tensor output_shape names; onnxruntime
    agrees. The reference evaluator reads them in the inferred 4x4 shape (and fails on these
    indices), so onnxruntime is the oracle."""
    x = rand((2, 3, 5, 5))
    y, idx = _maxpool_indices(x, [2, 2], [2, 2])
    inputs = {"x": y, "i": idx, "shape": np.array(x.shape, dtype=np.int64)}
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    got = check_node(
        "MaxUnpool", inputs, attrs, opset=11, oracle="ort", const_inputs=("shape",) if const else ()
    )
    kept = got[0] != 0
    np.testing.assert_array_equal(got[0][kept], x[kept])


def test_max_unpool_float64_and_pads():
    x = rand((1, 2, 3, 3), np.float64)
    idx = RNG.permutation(16)[:9].reshape(1, 1, 3, 3)
    idx = np.concatenate([idx, idx + 16], axis=1).astype(np.int64)
    attrs = {"kernel_shape": [2, 2], "strides": [1, 1], "pads": [0, 0, 0, 0]}
    check_node("MaxUnpool", {"x": x, "i": idx}, attrs, opset=9)


# ---- Det ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [11, 22])
@pytest.mark.parametrize("shape", [(3, 3), (1, 1), (4, 2, 2), (2, 3, 5, 5), (0, 3, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_det(opset, shape, dtype):
    check_node("Det", {"x": rand(shape, dtype)}, opset=opset, rtol=1e-4, atol=1e-5)


def test_det_float16():
    """Neither oracle runs Det on float16: compare with the reference on the float32 values."""
    x = rand((2, 3, 3), np.float16)
    model32 = make_node_model("Det", {"x": x.astype(np.float32)}, {}, 11)
    (want,) = reference_outputs(model32, {"x": x.astype(np.float32)})
    model = make_node_model("Det", {"x": x}, {}, 11)
    (got,) = onnxjit.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    assert_close(got, want.astype(np.float16), rtol=1e-2, atol=1e-2)


# ---- BitCast -----------------------------------------------------------------------------------

BITCAST_CASES = [
    (np.float32, TensorProto.INT32),
    (np.int32, TensorProto.FLOAT),
    (np.float64, TensorProto.INT64),
    (np.uint16, TensorProto.FLOAT16),
    (np.float16, TensorProto.BFLOAT16),
    (np.bool_, TensorProto.UINT8),
    (np.int8, TensorProto.UINT8),
    (np.uint64, TensorProto.DOUBLE),
]


@pytest.mark.parametrize("src,to", BITCAST_CASES)
@pytest.mark.parametrize("shape", [(), (5,), (2, 3), (0, 2)])
def test_bitcast(src, to, shape):
    if np.dtype(src).kind == "f":
        x = rand(shape, src)
    else:
        info = np.iinfo(src) if np.dtype(src).kind in "iu" else None
        x = (
            RNG.integers(info.min, info.max, size=shape, dtype=src, endpoint=True)
            if info
            else rand(shape, src)
        )
    check_node("BitCast", {"x": x}, {"to": to}, opset=26)


def test_bitcast_of_different_widths_is_an_error():
    x = rand((3,))
    model = make_node_model("BitCast", {"x": x}, {"to": TensorProto.INT64}, 26)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y0", TensorProto.INT64, [3]))
    with pytest.raises(InvalidArgumentError, match="widths must match"):
        onnxjit.InferenceSession(model.SerializeToString()).run(None, {"x": x})


# ---- TensorScatter -----------------------------------------------------------------------------

SCATTER_CASES = [
    # (cache shape, update length, axis, mode, write_indices)
    ((2, 3, 8, 4), 2, -2, "linear", [1, 5]),
    ((2, 3, 8, 4), 3, 2, "circular", [6, 7]),
    ((2, 3, 8, 4), 8, -2, "linear", None),
    ((3, 6, 5), 1, 1, "linear", [0, 3, 5]),
    ((3, 6), 4, 1, "circular", [4, 0, 5]),
    ((2, 5, 2, 3), 2, 1, "linear", [3, 0]),
    ((2, 4, 3), 0, 1, "linear", [4, 1]),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.int8])
@pytest.mark.parametrize("shape,length,axis,mode,wi", SCATTER_CASES)
def test_tensor_scatter(dtype, shape, length, axis, mode, wi):
    a = axis % len(shape)
    upd_shape = list(shape)
    upd_shape[a] = length
    inputs = {"past": rand(shape, dtype), "update": rand(tuple(upd_shape), dtype)}
    inputs["wi"] = None if wi is None else np.array(wi, dtype=np.int64)
    check_node("TensorScatter", inputs, {"axis": axis, "mode": mode}, opset=24)


def test_tensor_scatter_linear_overflow_is_an_error():
    inputs = {"past": rand((1, 4, 2)), "update": rand((1, 2, 2)), "wi": np.array([3])}
    model = make_node_model("TensorScatter", inputs, {"axis": 1}, 24)
    with pytest.raises(InvalidArgumentError, match="run past the cache length"):
        onnxjit.InferenceSession(model.SerializeToString()).run(None, inputs)


# ---- NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss ---------------------------------------

NLL_SHAPES = [(4, 3), (2, 3, 5), (2, 4, 3, 2)]


@pytest.mark.parametrize("opset", [12, 13, 22])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 1, -1])
@pytest.mark.parametrize("shape", NLL_SHAPES, ids=["2d", "3d", "4d"])
def test_nll_loss(opset, reduction, weighted, ignore, shape):
    n_class = shape[1]
    target = RNG.integers(0, n_class, size=(shape[0], *shape[2:])).astype(np.int64)
    if ignore is not None:
        target.reshape(-1)[::3] = ignore
    inputs = {"x": rand(shape), "t": target}
    inputs["w"] = rand((n_class,)) ** 2 if weighted else None
    attrs = {"reduction": reduction}
    if ignore is not None:
        attrs["ignore_index"] = ignore
    # The reference evaluator special-cases ignore_index == -1 without weights: its 'mean'
    # then divides by every element, ignored ones included. The spec (and onnxruntime, and
    # PyTorch) average over the counted elements: onnxruntime is the oracle there.
    oracle = "ort" if (ignore == -1 and not weighted and reduction == "mean") else "ref"
    check_node(
        "NegativeLogLikelihoodLoss", inputs, attrs, opset=opset, rtol=1e-5, atol=1e-6,
        oracle=oracle,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_nll_loss_other_float_types_and_int32_targets(dtype):
    inputs = {"x": rand((3, 4, 2), dtype), "t": RNG.integers(0, 4, (3, 2)).astype(np.int32)}
    check_node("NegativeLogLikelihoodLoss", inputs, {}, opset=13, rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("reduction", ["none", "sum"])
@pytest.mark.parametrize("shape", [(0, 3), (2, 3, 0)], ids=["no_batch", "no_positions"])
def test_nll_loss_empty(shape, reduction):
    # The reference evaluator cannot reshape an empty batch (N=0): onnxruntime is the oracle.
    t = np.zeros((shape[0], *shape[2:]), dtype=np.int64)
    inputs = {"x": rand(shape), "t": t}
    check_node("NegativeLogLikelihoodLoss", inputs, {"reduction": reduction}, 13, oracle="ort")


def test_nll_loss_target_out_of_range_is_an_error():
    inputs = {"x": rand((2, 3)), "t": np.array([0, 3], dtype=np.int64)}
    model = make_node_model("NegativeLogLikelihoodLoss", inputs, {}, 13)
    with pytest.raises(InvalidArgumentError, match="outside"):
        onnxjit.InferenceSession(model.SerializeToString()).run(None, inputs)


@pytest.mark.parametrize("opset", [12, 13])
@pytest.mark.parametrize("reduction", ["none", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_softmax_cross_entropy_loss_through_its_function_body(opset, reduction, weighted):
    """SoftmaxCrossEntropyLoss runs as its schema's function body, which calls NLL."""
    inputs = {"x": rand((3, 5, 2)), "t": RNG.integers(0, 5, (3, 2)).astype(np.int64)}
    inputs["w"] = rand((5,)) ** 2 if weighted else None
    attrs = {"reduction": reduction, "ignore_index": 2}
    check_node("SoftmaxCrossEntropyLoss", inputs, attrs, opset=opset, n_outputs=2, rtol=1e-5)


# ---- Random generators -------------------------------------------------------------------------


def _session(op, inputs, attrs, opset, n_outputs=1):
    model = make_node_model(op, inputs, attrs, opset, n_outputs=n_outputs)
    return model, onnxjit.InferenceSession(model.SerializeToString())


def _reference_shapes(model, feeds):
    """dtype and shape of the reference evaluator's outputs (its values are random too)."""
    from onnx.reference import ReferenceEvaluator

    return [(o.dtype, o.shape) for o in ReferenceEvaluator(model).run(None, feeds)]


RANDOM_DTYPES = [(None, np.float32), (TensorProto.DOUBLE, np.float64), (10, np.float16)]


@pytest.mark.parametrize("opset", [1, 22])
@pytest.mark.parametrize("dtype_attr,np_dtype", RANDOM_DTYPES)
@pytest.mark.parametrize("op", ["RandomNormal", "RandomUniform"])
def test_random_shape_dtype_and_statistics(opset, dtype_attr, np_dtype, op):
    if op == "RandomNormal":
        attrs, mean, std = {"mean": 2.0, "scale": 3.0}, 2.0, 3.0
    else:
        attrs, mean, std = {"low": -1.0, "high": 3.0}, 1.0, 4.0 / np.sqrt(12.0)
    attrs["shape"] = [200, 300]
    if dtype_attr is not None:
        attrs["dtype"] = dtype_attr
    model, sess = _session(op, {}, attrs, opset)
    (got,) = sess.run(None, {})
    assert [(got.dtype, got.shape)] == _reference_shapes(model, {})
    assert got.dtype == np_dtype
    v = got.astype(np.float64)
    # 60,000 samples: the standard error of the mean is std / 245.
    assert abs(v.mean() - mean) < 6 * std / 245
    assert abs(v.std() - std) < 0.05 * std
    if op == "RandomUniform":
        assert v.min() >= -1.0 and v.max() < 3.0


@pytest.mark.parametrize("opset", [1, 22])
@pytest.mark.parametrize("op", ["RandomNormalLike", "RandomUniformLike"])
@pytest.mark.parametrize("dtype_attr", [None, TensorProto.DOUBLE])
def test_random_like(opset, op, dtype_attr):
    x = rand((4, 0, 3)) if dtype_attr else rand((30, 20), np.float16)
    attrs = {} if dtype_attr is None else {"dtype": dtype_attr}
    model, sess = _session(op, {"x": x}, attrs, opset)
    (got,) = sess.run(None, {"x": x})
    assert [(got.dtype, got.shape)] == _reference_shapes(model, {"x": x})


@pytest.mark.parametrize(
    "op,inputs,attrs",
    [
        ("RandomNormal", {}, {"shape": [50]}),
        ("RandomUniformLike", {"x": np.zeros((5, 10), np.float32)}, {}),
        ("Bernoulli", {"x": np.full((50,), 0.5, np.float32)}, {}),
        ("Multinomial", {"x": np.zeros((2, 6), np.float32)}, {"sample_size": 25}),
    ],
)
def test_random_seeding(op, inputs, attrs):
    """A seed makes sessions reproducible; successive runs of one node still differ, and no
    seed gives different sessions different values."""
    opset = 15 if op == "Bernoulli" else 7
    _, s1 = _session(op, inputs, {**attrs, "seed": 3.0}, opset)
    _, s2 = _session(op, inputs, {**attrs, "seed": 3.0}, opset)
    _, s3 = _session(op, inputs, {**attrs, "seed": 4.5}, opset)
    _, n1 = _session(op, inputs, attrs, opset)
    _, n2 = _session(op, inputs, attrs, opset)
    a1, a2 = s1.run(None, inputs)[0], s1.run(None, inputs)[0]
    b1, b2 = s2.run(None, inputs)[0], s2.run(None, inputs)[0]
    np.testing.assert_array_equal(a1, b1)
    np.testing.assert_array_equal(a2, b2)
    assert not np.array_equal(a1, a2)
    assert not np.array_equal(a1, s3.run(None, inputs)[0])
    assert not np.array_equal(n1.run(None, inputs)[0], n2.run(None, inputs)[0])


def test_random_ops_are_not_constant_folded():
    """Two runs of RandomUniform with a constant-foldable graph give different values."""
    _, sess = _session("RandomUniform", {}, {"shape": [10]}, 1)
    assert not np.array_equal(sess.run(None, {})[0], sess.run(None, {})[0])


@pytest.mark.parametrize("opset", [15, 22])
@pytest.mark.parametrize(
    "x_dtype,dtype_attr,out_dtype",
    [
        (np.float32, None, np.float32),
        (np.float64, None, np.float64),
        (np.float32, TensorProto.DOUBLE, np.float64),
        (np.float32, TensorProto.INT32, np.int32),
        (np.float64, TensorProto.BOOL, np.bool_),
    ],
)
def test_bernoulli(opset, x_dtype, dtype_attr, out_dtype):
    p = np.tile(np.array([0.0, 0.2, 0.9, 1.0], dtype=x_dtype), (5000, 1))
    attrs = {} if dtype_attr is None else {"dtype": dtype_attr}
    model, sess = _session("Bernoulli", {"x": p}, attrs, opset)
    (got,) = sess.run(None, {"x": p})
    assert [(got.dtype, got.shape)] == _reference_shapes(model, {"x": p})
    assert got.dtype == out_dtype
    freq = got.astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(freq, [0.0, 0.2, 0.9, 1.0], atol=0.03)
    assert set(np.unique(got.astype(np.float64))) <= {0.0, 1.0}


@pytest.mark.parametrize("opset", [7, 22])
@pytest.mark.parametrize("dtype_attr,out_dtype", [(None, np.int32), (TensorProto.INT64, np.int64)])
def test_multinomial(opset, dtype_attr, out_dtype):
    probs = np.array([[0.1, 0.0, 0.6, 0.3], [0.25, 0.25, 0.25, 0.25]])
    x = np.log(np.maximum(probs, 1e-30)).astype(np.float32)
    x[0, 1] = -np.inf
    attrs = {"sample_size": 20000}
    if dtype_attr is not None:
        attrs["dtype"] = dtype_attr
    model, sess = _session("Multinomial", {"x": x}, attrs, opset)
    (got,) = sess.run(None, {"x": x})
    assert got.dtype == out_dtype and got.shape == (2, 20000)
    # The reference evaluator has no Multinomial: onnxruntime gives the dtype and shape.
    if opset == 7:
        (ort,) = ort_outputs(model, {"x": x})
        assert (ort.dtype, ort.shape) == (got.dtype, got.shape)
    for row in range(2):
        freq = np.bincount(got[row], minlength=4) / 20000
        np.testing.assert_allclose(freq, probs[row], atol=0.02)
    assert not (got[0] == 1).any()


# ---- ai.onnx.preview.training ------------------------------------------------------------------


def _train_inputs(groups, shapes, dtype=np.float32):
    inputs = {"R": np.array(0.1, dtype=dtype), "T": np.array(3, dtype=np.int64)}
    for g in groups:
        for k, shape in enumerate(shapes):
            values = rand(shape, dtype)
            inputs[f"{g}{k}"] = np.abs(values) if g == "H" else values
    return inputs


@pytest.mark.parametrize("shapes", [[(3,)], [(2, 3), (4,)], [()]], ids=["one", "two", "scalar"])
@pytest.mark.parametrize(
    "attrs",
    [{}, {"decay_factor": 0.1, "epsilon": 1e-3, "norm_coefficient": 0.01}],
    ids=["defaults", "set"],
)
def test_adagrad(shapes, attrs):
    inputs = _train_inputs("XGH", shapes)
    n_out = 2 * len(shapes)
    check_node(
        "Adagrad", inputs, attrs, opset=1, domain=TRAINING, n_outputs=n_out, rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("shapes", [[(3,)], [(2, 3), (4,)]], ids=["one", "two"])
@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"alpha": 0.95, "beta": 0.1, "epsilon": 1e-7, "norm_coefficient": 0.001},
        {"norm_coefficient_post": 0.02},
    ],
    ids=["defaults", "set", "post"],
)
@pytest.mark.parametrize("step", [0, 3])
def test_adam(shapes, attrs, step):
    inputs = _train_inputs("XGVH", shapes)
    inputs["T"] = np.array(step, dtype=np.int64)
    check_adam(inputs, attrs, 3 * len(shapes))


def check_adam(inputs, attrs, n_out, rtol=1e-5):
    """The reference evaluator's Adam promotes a single float32 tensor's outputs to float64
    (the spec types them like X): compare its values cast back to the inputs' types."""
    model = make_node_model("Adam", inputs, attrs, 1, domain=TRAINING, n_outputs=n_out)
    want = reference_outputs(model, inputs)
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, inputs)
    assert len(got) == len(want) == n_out
    for g, w in zip(got, want):
        assert_close(g, w.astype(inputs["X0"].dtype), rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("shapes", [[(3,)], [(2, 3), (4,)]], ids=["one", "two"])
@pytest.mark.parametrize("mode", ["standard", "nesterov"])
@pytest.mark.parametrize("step", [0, 3])
def test_momentum(shapes, mode, step):
    inputs = _train_inputs("XGV", shapes)
    inputs["T"] = np.array(step, dtype=np.int64)
    attrs = {"alpha": 0.9, "beta": 0.5, "mode": mode, "norm_coefficient": 0.01}
    n_out = 2 * len(shapes)
    check_node(
        "Momentum", inputs, attrs, opset=1, domain=TRAINING, n_outputs=n_out, rtol=1e-5, atol=1e-6
    )


def test_training_ops_in_double():
    inputs = _train_inputs("XGVH", [(3, 2)], np.float64)
    check_adam(inputs, {}, 3, rtol=1e-10)


def test_momentum_without_required_attributes_is_refused():
    inputs = _train_inputs("XGV", [(3,)])
    node = helper.make_node("Momentum", list(inputs), ["x", "v"], domain=TRAINING)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(k, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("x", "v")],
    )  # fmt: skip
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(TRAINING, 1)],
    )
    with pytest.raises(Exception, match="alpha|required"):
        onnxjit.InferenceSession(model.SerializeToString()).run(None, inputs)


@pytest.mark.parametrize("op", ["RandomNormal", "RandomUniform"])
def test_random_bfloat16_at_22(op):
    """RandomNormal/RandomUniform-22 add bfloat16; the version-1 body serves it."""
    model, sess = _session(op, {}, {"shape": [400, 50], "dtype": TensorProto.BFLOAT16}, 22)
    (got,) = sess.run(None, {})
    assert got.dtype == ml_dtypes.bfloat16 and got.shape == (400, 50)
    v = got.astype(np.float64)
    assert abs(v.mean() - (0.0 if op == "RandomNormal" else 0.5)) < 0.05
