"""Feeds (issue 6, item 5): wrong element types, non-contiguous, misaligned, byte-swapped and
Fortran-order arrays, zero-size dimensions, NaN and Inf, object arrays, Python scalars and lists,
0-d against shape [1], numpy subclasses.

onnxruntime is the oracle for every row: where it accepts a feed, onnxjit accepts it and gives
the same values (twice: the second run's feed is a known one, checked in one pass); where
it refuses one, onnxjit raises InvalidInputError naming the input, what was expected and what
was found. The few rows where following onnxruntime would not be sensible are in DIFFERENCES,
each with its reason, and are checked against numpy instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.errors import InvalidInputError, OnnxJitError

F, D, I32, I64, B, S = (
    TensorProto.FLOAT,
    TensorProto.DOUBLE,
    TensorProto.INT32,
    TensorProto.INT64,
    TensorProto.BOOL,
    TensorProto.STRING,
)
RNG = np.random.default_rng(6)
W = RNG.standard_normal((3, 5)).astype(np.float32)
BIAS = RNG.standard_normal(5).astype(np.float32)


def vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def make(nodes, inputs, outputs, inits=()) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model.SerializeToString()


def unary(op: str, elem: int, shape) -> bytes:
    return make(
        [helper.make_node(op, ["x"], ["y"])], [vi("x", elem, shape)], [vi("y", elem, shape)]
    )


def mlp() -> bytes:
    """MatMul + Add + Relu + Softmax over a dynamic batch."""
    return make(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Add", ["m", "b"], ["a"]),
            helper.make_node("Relu", ["a"], ["r"]),
            helper.make_node("Softmax", ["r"], ["y"], axis=-1),
        ],
        [vi("x", F, ["N", 3])],
        [vi("y", F, ["N", 5])],
        [numpy_helper.from_array(W, "w"), numpy_helper.from_array(BIAS, "b")],
    )


def reductions(with_max: bool = True) -> bytes:
    """ReduceSum (and ReduceMax) over axis 1 with keepdims, Concat of x with itself, Max."""
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [
        helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=1),
        helper.make_node("Concat", ["x", "x"], ["c"], axis=0),
        helper.make_node("Max", ["x", "c0"], ["mm"]),
    ]
    outputs = [vi("s", F, ["N", 1]), vi("c", F, ["N2", "K"]), vi("mm", F, ["N", "K"])]
    if with_max:
        nodes.append(helper.make_node("ReduceMax", ["x", "axes"], ["mx"], keepdims=1))
        outputs.append(vi("mx", F, ["N", 1]))
    return make(nodes, [vi("x", F, ["N", "K"]), vi("c0", F, [1, "K"])], outputs, [axes])


def chain() -> bytes:
    """A fused elementwise chain large enough to run on the thread pool."""
    return make(
        [
            helper.make_node("Mul", ["x", "x"], ["a"]),
            helper.make_node("Add", ["a", "x"], ["b"]),
            helper.make_node("Tanh", ["b"], ["y"]),
        ],
        [vi("x", F, ["N", "M"])],
        [vi("y", F, ["N", "M"])],
    )


def ort_session(model: bytes) -> ort.InferenceSession:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"])


def ort_outcome(model: bytes, feed: dict) -> list[np.ndarray] | Exception:
    try:
        return ort_session(model).run(None, feed)
    except Exception as e:  # noqa: BLE001 - any onnxruntime error counts as a refusal
        return e


def misaligned(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``a`` one byte off its element alignment."""
    buf = np.zeros(a.nbytes + 1, np.uint8)
    out = np.frombuffer(buf.data, dtype=a.dtype, count=a.size, offset=1).reshape(a.shape)
    out[...] = a
    assert not out.flags.aligned and out.flags.c_contiguous
    return out


def readonly(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


X43 = RNG.standard_normal((4, 3)).astype(np.float32)
X_WIDE = RNG.standard_normal((4, 6)).astype(np.float32)
BIG = RNG.standard_normal((256, 257)).astype(np.float32)  # 65792 elements: the pool path
NAN_INF = np.array(
    [[np.nan, 1.0, -2.0], [np.inf, -np.inf, 0.5], [3.0, np.nan, np.inf], [-0.0, 0.0, -1.0]],
    np.float32,
)
C0 = np.array([[0.25, np.nan, -np.inf]], np.float32)

# name -> (model, feed as given to both engines); onnxruntime accepts every one.
ACCEPTED: dict[str, tuple[Callable[[], bytes], Callable[[], dict[str, Any]]]] = {
    "fortran_order": (mlp, lambda: {"x": np.asfortranarray(X43)}),
    "non_contiguous_columns": (mlp, lambda: {"x": X_WIDE[:, ::2]}),
    "negative_strides": (mlp, lambda: {"x": X43[::-1, ::-1]}),
    "zero_strides_broadcast_to": (mlp, lambda: {"x": np.broadcast_to(X43[:1], (4, 3))}),
    "transposed_view": (mlp, lambda: {"x": np.ascontiguousarray(X43.T).T}),
    "misaligned": (mlp, lambda: {"x": misaligned(X43)}),
    "misaligned_pool_sized": (chain, lambda: {"x": misaligned(BIG)}),
    "non_contiguous_pool_sized": (chain, lambda: {"x": BIG[:, ::-1]}),
    "read_only": (mlp, lambda: {"x": readonly(X43)}),
    "zero_batch": (mlp, lambda: {"x": np.zeros((0, 3), np.float32)}),
    "zero_size_reduced_axis": (
        reductions,
        lambda: {"x": np.zeros((3, 0), np.float32), "c0": np.zeros((1, 0), np.float32)},
    ),
    "zero_rows_reductions": (
        reductions,
        lambda: {"x": np.zeros((0, 3), np.float32), "c0": C0},
    ),
    "zero_size_pool_chain": (chain, lambda: {"x": np.zeros((0, 100000), np.float32)}),
    "nan_inf_mlp": (mlp, lambda: {"x": NAN_INF}),
    # ReduceMax over NaN: see test_difference_reduce_max_propagates_nan
    "nan_inf_reductions": (lambda: reductions(False), lambda: {"x": NAN_INF, "c0": C0}),
    "nan_inf_chain": (chain, lambda: {"x": NAN_INF}),
    "numpy_matrix": (mlp, lambda: {"x": np.asmatrix(X43)}),
    "masked_array_data": (mlp, lambda: {"x": np.ma.masked_array(X43, mask=X43 > 0)}),
    "list_of_floats": (mlp, lambda: {"x": X43.astype(np.float64).tolist()}),
    "list_of_ints": (mlp, lambda: {"x": [[1, 2, 3], [-4, 5, 0]]}),
    "list_to_int64": (lambda: unary("Neg", I64, ["N"]), lambda: {"x": [1, -2, 2**40]}),
    "list_to_double": (lambda: unary("Neg", D, ["N"]), lambda: {"x": [1, 2.5]}),
    "list_to_float16": (
        lambda: unary("Neg", TensorProto.FLOAT16, ["N"]),
        lambda: {"x": [1.0, 2.5]},
    ),
    "list_of_bools": (lambda: unary("Not", B, ["N"]), lambda: {"x": [True, False]}),
    "empty_list": (lambda: unary("Neg", F, ["N"]), lambda: {"x": []}),
    "scalar_0d_array": (lambda: unary("Neg", F, []), lambda: {"x": np.array(3.5, np.float32)}),
    "strings_unicode_array": (
        lambda: unary("Identity", S, ["N"]),
        lambda: {"x": np.array(["a", "bé", ""])},
    ),
    "strings_list": (lambda: unary("Identity", S, ["N"]), lambda: {"x": ["a", "b"]}),
    "strings_object_array": (
        lambda: unary("Identity", S, ["N"]),
        lambda: {"x": np.array(["x", "yz"], dtype=object)},
    ),
    # onnxruntime stores str(element) for non-string objects in a string input; so does onnxjit.
    "strings_object_numbers_and_none": (
        lambda: unary("Identity", S, ["N"]),
        lambda: {"x": np.array([1, 2.5, None, "s"], dtype=object)},
    ),
}


def assert_same(got: list, want: list) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert type(g) is np.ndarray
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if w.dtype == object or w.dtype.kind == "b" or w.dtype.kind in "iu":
            assert g.tolist() == w.tolist()
        else:
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
            np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted_like_onnxruntime(name: str) -> None:
    build, feed_fn = ACCEPTED[name]
    model = build()
    want = ort_outcome(model, feed_fn())
    assert not isinstance(want, Exception), f"onnxruntime refused {name}: {want}"
    sess = onnxjit.InferenceSession(model)
    feed = feed_fn()
    before = {k: np.array(v, copy=True) for k, v in feed.items()}
    assert_same(sess.run(None, feed), want)
    # The same feed again (a known feed, checked in one pass), then the caller's arrays unchanged.
    assert_same(sess.run(None, feed), want)
    for k, v in feed.items():
        now = np.asarray(v)
        if now.dtype.kind in "OUS":
            assert now.tolist() == before[k].tolist(), k
        else:
            assert np.array_equal(now, before[k], equal_nan=True), k


def test_nan_inf_pool_chain_bitwise_against_numpy() -> None:
    """A pool-sized chain with NaN and Inf scattered through it: NaN where numpy has NaN."""
    x = BIG.copy()
    x.ravel()[::97] = np.nan
    x.ravel()[1::89] = np.inf
    x.ravel()[2::83] = -np.inf
    got = onnxjit.InferenceSession(chain()).run(None, {"x": x})[0]
    want = np.tanh(x * x + x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# name -> (model, feed, needles): onnxruntime refuses every one.
REFUSED: dict[str, tuple[Callable[[], bytes], Callable[[], dict[str, Any]], tuple[str, ...]]] = {
    "float64_for_float": (
        mlp,
        lambda: {"x": X43.astype(np.float64)},
        ("input 'x'", "expected element type tensor(float)", "found numpy float64", ".astype("),
    ),
    "int32_for_float": (
        mlp,
        lambda: {"x": X43.astype(np.int32)},
        ("input 'x'", "tensor(float)", "found numpy int32"),
    ),
    "int32_for_int64": (
        lambda: unary("Neg", I64, ["N"]),
        lambda: {"x": np.array([1, 2], np.int32)},
        ("input 'x'", "tensor(int64)", "found numpy int32", ".astype(np.int64)"),
    ),
    "uint8_for_bool": (
        lambda: unary("Not", B, ["N"]),
        lambda: {"x": np.array([1, 0], np.uint8)},
        ("input 'x'", "tensor(bool)", "found numpy uint8"),
    ),
    "zero_size_float64": (
        mlp,
        lambda: {"x": np.zeros((0, 3), np.float64)},
        ("input 'x'", "tensor(float)", "found numpy float64"),
    ),
    "object_floats_for_float": (
        mlp,
        lambda: {"x": X43.astype(object)},
        ("input 'x'", "tensor(float)", "found numpy object"),
    ),
    "complex_for_float": (
        mlp,
        lambda: {"x": X43.astype(np.complex64)},
        ("input 'x'", "tensor(float)", "found numpy complex64"),
    ),
    "datetime_for_float": (
        mlp,
        lambda: {"x": np.zeros((4, 3), "datetime64[s]")},
        ("input 'x'", "tensor(float)", "found numpy datetime64[s]"),
    ),
    "structured_for_float": (
        mlp,
        lambda: {"x": np.zeros((4, 3), [("a", np.float32)])},
        ("input 'x'", "tensor(float)", "found numpy [('a', '<f4')]"),
    ),
    "string_for_float": (
        mlp,
        lambda: {"x": "hello"},
        ("input 'x'", "tensor(float)", "found numpy <U5"),
    ),
    "dict_for_float": (
        mlp,
        lambda: {"x": {"a": 1.0}},
        ("input 'x'", "tensor(float)", "found numpy object"),
    ),
    "ragged_list": (
        mlp,
        lambda: {"x": [[1.0, 2.0, 3.0], [3.0]]},
        ("input 'x'", "could not convert list to an array", "pass a numpy array"),
    ),
    "list_out_of_int32_range": (
        lambda: unary("Neg", I32, ["N"]),
        lambda: {"x": [1, 2**40]},
        ("input 'x'", "tensor(int32)", "holding 1099511627776", "int32 cannot hold exactly"),
    ),
    "wrong_fixed_dim_zero": (
        mlp,
        lambda: {"x": np.zeros((2, 0), np.float32)},
        ("input 'x'", "dimension 1 must be 3", "found 0", "shape [2, 0]"),
    ),
    "wrong_rank": (
        mlp,
        lambda: {"x": X43.reshape(2, 2, 3)},
        ("input 'x'", "expected rank 2", "found rank 3", "reshape"),
    ),
    "0d_for_shape_1": (
        lambda: unary("Neg", F, [1]),
        lambda: {"x": np.array(1.0, np.float32)},
        ("input 'x'", "expected rank 1 (shape [1])", "found rank 0 (shape [])"),
    ),
    "python_scalar_for_shape_1": (
        lambda: unary("Neg", F, [1]),
        lambda: {"x": 1.0},
        ("input 'x'", "expected rank 1 (shape [1])", "found rank 0"),
    ),
    "0d_for_vector": (
        lambda: unary("Neg", F, ["N"]),
        lambda: {"x": np.array(1.0, np.float32)},
        ("input 'x'", "expected rank 1", "found rank 0"),
    ),
    "missing_input": (mlp, lambda: {}, ("input 'x'", "missing from the feed")),
    "unknown_input": (
        mlp,
        lambda: {"x": X43, "z": X43},
        ("input 'z' is not an input of the model", "expected one of ['x']"),
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_like_onnxruntime(name: str) -> None:
    build, feed_fn, needles = REFUSED[name]
    model = build()
    assert isinstance(ort_outcome(model, feed_fn()), Exception), f"onnxruntime accepted {name}"
    sess = onnxjit.InferenceSession(model)
    with pytest.raises(InvalidInputError) as info:
        sess.run(None, feed_fn())
    assert isinstance(info.value, OnnxJitError) and isinstance(info.value, ValueError)
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_refusal_then_good_run_is_bitwise_identical() -> None:
    sess = onnxjit.InferenceSession(mlp())
    want = sess.run(None, {"x": X43})[0]
    for bad in (
        X43.astype(np.float64),
        X43.reshape(12),
        [[1.5, "a"]],
        np.zeros((4, 2), np.float32),
    ):
        with pytest.raises(InvalidInputError):
            sess.run(None, {"x": bad})
        assert sess.run(None, {"x": X43})[0].tobytes() == want.tobytes()


# -- where onnxjit deliberately differs from onnxruntime -------------------------------------------


def test_difference_python_scalar_is_a_0d_array() -> None:
    """onnxruntime raises "Unable to handle object of type <class 'float'>" for a Python (or
    numpy) scalar even where the input is declared 0-d, yet accepts lists. onnxjit treats a
    scalar as the 0-d case of a list (documented in the README): the result is onnxruntime's for
    the equivalent 0-d array."""
    model = unary("Neg", F, [])
    assert isinstance(ort_outcome(model, {"x": 2.5}), Exception)
    want = ort_session(model).run(None, {"x": np.array(2.5, np.float32)})
    sess = onnxjit.InferenceSession(model)
    for scalar in (2.5, np.float32(2.5), np.float64(2.5)):
        assert_same(sess.run(None, {"x": scalar}), want)
    assert_same(onnxjit.InferenceSession(unary("Neg", I64, [])).run(None, {"x": 7}), [np.int64(-7)])


def test_difference_shape_1_for_declared_scalar_is_refused() -> None:
    """onnxruntime accepts a [1] array for an input declared 0-d and returns a [1] output while
    logging that it does not match the model's declared output shape. onnxjit plans the graph
    for the declared ranks, so it refuses, naming both shapes and the fix."""
    model = unary("Neg", F, [])
    feed = {"x": np.array([3.0], np.float32)}
    assert not isinstance(ort_outcome(model, feed), Exception)
    with pytest.raises(InvalidInputError) as info:
        onnxjit.InferenceSession(model).run(None, feed)
    msg = str(info.value)
    for needle in (
        "input 'x'",
        "expected rank 0 (shape [])",
        "found rank 1 (shape [1])",
        "reshape",
    ):
        assert needle in msg, (needle, msg)


def test_difference_fractional_floats_for_int_input_are_refused() -> None:
    """onnxruntime truncates a list of floats fed to an integer input ([1.5] becomes 1).
    onnxjit converts whole floats (the same values as onnxruntime) and refuses any other value,
    because truncating silently changes the data."""
    model = unary("Neg", I64, ["N"])
    want = ort_session(model).run(None, {"x": [1.0, -3.0]})
    assert_same(onnxjit.InferenceSession(model).run(None, {"x": [1.0, -3.0]}), want)
    assert not isinstance(ort_outcome(model, {"x": [1.5]}), Exception)
    for bad, shown in (([1.5], "1.5"), ([float("nan")], "nan"), ([1e30], "1e+30")):
        with pytest.raises(InvalidInputError) as info:
            onnxjit.InferenceSession(model).run(None, {"x": bad})
        msg = str(info.value)
        for needle in ("input 'x'", "tensor(int64)", f"holding {shown}", "whole numbers"):
            assert needle in msg, (needle, msg)


def test_difference_byte_swapped_arrays_keep_their_values() -> None:
    """A big-endian float32 array is float32 data in the other byte order. onnxruntime reads its
    bytes as native floats (garbage values); onnxjit converts it to native order, so the result
    equals onnxruntime's on the native-order array."""
    model = mlp()
    swapped = X43.astype(">f4")
    ort_got = ort_session(model).run(None, {"x": swapped})[0]
    want = ort_session(model).run(None, {"x": X43})
    assert not np.allclose(ort_got, want[0])  # onnxruntime's reinterpretation
    sess = onnxjit.InferenceSession(model)
    assert_same(sess.run(None, {"x": swapped}), want)
    assert_same(sess.run(None, {"x": swapped}), want)
    got = onnxjit.InferenceSession(unary("Neg", I64, ["N"])).run(
        None, {"x": np.array([1, -2], ">i8")}
    )
    assert_same(got, [np.array([-1, 2], np.int64)])


def test_difference_bytes_in_string_inputs_are_decoded() -> None:
    """onnxruntime stores str(b'a') == "b'a'" for bytes elements of an object array and fails
    with a UnicodeDecodeError on a numpy bytes (S) array. onnxjit decodes bytes as UTF-8 and
    refuses bytes that are not UTF-8, naming the element."""
    model = unary("Identity", S, ["N"])
    sess = onnxjit.InferenceSession(model)
    for feed in (np.array([b"a", "b\xc3\xa9".encode("latin-1")], dtype=object), [b"a", b"b"]):
        got = sess.run(None, {"x": feed})[0]
        assert got.dtype == object and all(type(v) is str for v in got)
    assert sess.run(None, {"x": np.array([b"ab", b"c"])})[0].tolist() == ["ab", "c"]
    with pytest.raises(InvalidInputError) as info:
        sess.run(None, {"x": np.array([b"ok", b"\xff\xfe"], dtype=object)})
    msg = str(info.value)
    for needle in ("input 'x'", "element 1", "not UTF-8", "b'\\xff\\xfe'", "pass str elements"):
        assert needle in msg, (needle, msg)


def test_subclasses_become_plain_arrays() -> None:
    """A masked array feeds its data (the mask is ignored, as in onnxruntime) and np.matrix its
    2-D data; outputs are plain ndarrays."""
    x = np.ma.masked_array(X43, mask=np.ones_like(X43, bool))
    got = onnxjit.InferenceSession(mlp()).run(None, {"x": x})[0]
    assert type(got) is np.ndarray
    np.testing.assert_array_equal(got, onnxjit.InferenceSession(mlp()).run(None, {"x": X43})[0])


def test_difference_reduce_max_propagates_nan() -> None:
    """onnxruntime's ReduceMax drops a NaN unless it is the first value of the row ([3, nan,
    inf] gives inf, [nan, 1, -2] gives nan). onnxjit returns NaN for every row holding one,
    like numpy.max and onnx's ReferenceEvaluator; rows without NaN equal onnxruntime's."""
    model = reductions()
    feed = {"x": NAN_INF, "c0": C0}
    ort_mx = ort_session(model).run(None, feed)[3]
    got = onnxjit.InferenceSession(model).run(None, feed)
    want = np.max(NAN_INF, axis=1, keepdims=True)
    np.testing.assert_array_equal(got[3], want)
    assert np.isnan(got[3][2, 0]) and ort_mx[2, 0] == np.inf  # the documented difference
    rows = ~np.isnan(NAN_INF).any(axis=1)
    np.testing.assert_array_equal(got[3][rows], ort_mx[rows])
