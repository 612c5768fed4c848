"""Elementwise operators against onnx's ReferenceEvaluator (onnxruntime where noted).

One row per op x version x dtype x shape class. To keep the number of Numba compilations
reasonable, every shape class (same shape, scalar, row, middle [N,C,H,W]+[C,1,1], 0-d,
zero-size, above the parallel threshold) runs for float32 and the other dtypes run on a
smaller set of shape classes.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from oracle import check_node, make_node_model

import onnxjit
from onnxjit.kernels import _jit
from onnxjit.ops import elementwise as ew_ops

BIG = _jit.PARALLEL_THRESHOLD + 1000


def run_jit(op_type, inputs, attrs=None, opset=None):
    """onnxjit alone, for behaviour the oracles refuse or do not define."""
    model = make_node_model(op_type, inputs, attrs, opset)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    return sess.run(None, {k: v for k, v in inputs.items() if v is not None})


SHAPES_2 = {
    "same": ((2, 3, 4), (2, 3, 4)),
    "scalar": ((2, 3, 4), ()),
    "row": ((2, 3, 4), (4,)),
    "middle": ((2, 3, 4, 5), (3, 1, 1)),
    "outer": ((3, 1), (1, 4)),
    "0d": ((), ()),
    "empty": ((0, 3), (3,)),
    "big": ((BIG,), (BIG,)),
}
SHAPES_1 = {"same": (2, 3, 4), "0d": (), "empty": (0, 3), "big": (BIG,)}


def data(shape, dtype, kind="any", seed=0):
    """Random values of dtype suited to an op's domain."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        lo, hi = (1, 9) if kind in ("pos", "nonzero") else (-9 if dt.kind == "i" else 0, 9)
        v = rng.integers(lo, hi, size=shape).astype(dt)
        if kind == "nonzero" and dt.kind == "i":
            v = v * np.where(rng.random(shape) < 0.5, -1, 1).astype(dt)
        return v
    if kind == "pos":
        v = rng.uniform(0.1, 4.0, size=shape)
    elif kind == "unit":
        v = rng.uniform(-0.95, 0.95, size=shape)
    elif kind == "ge1":
        v = rng.uniform(1.0, 5.0, size=shape)
    elif kind == "nonzero":
        v = rng.uniform(0.5, 3.0, size=shape) * np.where(rng.random(shape) < 0.5, -1, 1)
    else:
        v = rng.uniform(-4.0, 4.0, size=shape)
    return np.asarray(v).astype(dt)


def tol(dtype):
    dt = np.dtype(dtype)
    if dt == np.float16 or dt == np.dtype(ml_dtypes.bfloat16):
        return dict(rtol=1e-2, atol=1e-2)
    if dt == np.float64:
        # The reference evaluator computes some float64 ops (Erf, HardSwish, Gelu...) with
        # float32 constants or intermediates, so float64 agrees to ~1e-7 only.
        return dict(rtol=1e-6, atol=1e-7)
    return dict(rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Binary arithmetic
# ---------------------------------------------------------------------------------------------

ARITH_ROWS = [(op, "float32", sc) for op in ("Add", "Sub", "Mul", "Div") for sc in SHAPES_2] + [
    (op, dt, sc)
    for op in ("Add", "Sub", "Mul", "Div")
    for dt in ("float64", "float16", "int32", "int64", "int8", "uint8", "uint64")
    for sc in ("same", "scalar")
]


@pytest.mark.parametrize("op, dtype, shapes", ARITH_ROWS)
def test_arith_7(op, dtype, shapes):
    sa, sb = SHAPES_2[shapes]
    a = data(sa, dtype, seed=1)
    b = data(sb, dtype, "nonzero" if op == "Div" else "any", seed=2)
    # opset 14 selects the since-7 implementation
    check_node(op, {"a": a, "b": b}, opset=14, **tol(dtype))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_arith_7_at_opset_7(op):
    check_node(op, {"a": data((2, 3), "float32"), "b": data((3,), "float32", "nonzero")}, opset=7)


@pytest.mark.parametrize("op", ["Add", "Mul", "Div"])
def test_arith_6_legacy_broadcast(op):
    # The reference evaluator has no opset-6 broadcast/axis semantics; the expected value is
    # numpy broadcasting after aligning B at `axis`, as the opset-6 spec describes.
    a = data((2, 3, 4, 5), "float32", seed=3)
    b = data((3, 4), "float32", "nonzero", seed=4)
    model = make_node_model(op, {"a": a, "b": b}, {"broadcast": 1, "axis": 1}, opset=6)
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, {"a": a, "b": b})[0]
    fn = {"Add": np.add, "Mul": np.multiply, "Div": np.divide}[op]
    np.testing.assert_allclose(got, fn(a, b.reshape(3, 4, 1)), rtol=1e-6)
    # same shapes without broadcast
    check_node(op, {"a": a, "b": data((2, 3, 4, 5), "float32", "nonzero")}, opset=6)


def test_arith_6_refuses_mismatched_shapes_without_broadcast():
    with pytest.raises(onnxjit.InvalidArgumentError, match="broadcast=0"):
        run_jit("Add", {"a": data((2, 3), "float32"), "b": data((3,), "float32")}, opset=6)


def test_integer_div_truncates_and_div_by_zero_gives_zero():
    a = np.array([7, -7, 7, -7, 5, -5, np.iinfo(np.int32).min], np.int32)
    b = np.array([2, 2, -2, -2, 0, 0, -1], np.int32)
    check_node("Div", {"a": a[:4], "b": b[:4]}, opset=14)
    model = make_node_model("Div", {"a": a, "b": b}, opset=14)
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, {"a": a, "b": b})[0]
    # numpy's int division by zero gives 0 and MIN / -1 wraps to MIN
    want = np.array([3, -3, -3, 3, 0, 0, np.iinfo(np.int32).min], np.int32)
    np.testing.assert_array_equal(got, want)


def test_integer_overflow_wraps():
    a = np.array([100, -100, 127], np.int8)
    b = np.array([2, 2, 1], np.int8)
    check_node("Mul", {"a": a, "b": b}, opset=14)
    check_node("Add", {"a": a, "b": b}, opset=14)


def test_mismatched_types_are_rejected():
    with pytest.raises(onnxjit.OnnxJitError):
        run_jit("Add", {"a": data((3,), "float32"), "b": data((3,), "float64")}, opset=14)


def test_incompatible_shapes_are_rejected():
    # onnx shape inference rejects this model already, so run the op function directly.
    from onnxjit.registry import NodeContext, find_impl

    ctx = NodeContext("n", "Add-7", 1, (True,))
    add = find_impl("", "Add", 14).fn
    with pytest.raises(ValueError, match="cannot be broadcast"):
        add(ctx, data((2, 3), "float32"), data((4,), "float32"))


# ---------------------------------------------------------------------------------------------
# Pow, Mod
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [7, 15])
@pytest.mark.parametrize(
    "xt, yt, shapes",
    [
        ("float32", "float32", "same"),
        ("float32", "float32", "middle"),
        ("float32", "float32", "0d"),
        ("float32", "float32", "empty"),
        ("float64", "float64", "scalar"),
        ("float32", "int64", "same"),
        ("int32", "int32", "same"),
        ("int64", "int64", "row"),
        ("int64", "float32", "same"),
        ("float16", "float16", "same"),
    ],
)
def test_pow_7(opset, xt, yt, shapes):
    if opset < 12 and xt != yt:
        pytest.skip("mixed base/exponent types exist from opset 12 on")
    sa, sb = SHAPES_2[shapes]
    x = data(sa, xt, "pos", seed=5)
    y = data(sb, yt, seed=6)
    if np.dtype(yt).kind in "iu":
        y = np.abs(y) % 4  # numpy (the reference) refuses negative integer powers
    if np.dtype(xt).kind in "iu" and np.dtype(yt).kind == "f":
        y = np.abs(y)
    check_node("Pow", {"x": x, "y": y}, opset=opset, **tol(xt))


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize(
    "dtype, shapes",
    [
        ("int32", "same"),
        ("int32", "middle"),
        ("int64", "scalar"),
        ("int8", "same"),
        ("uint8", "same"),
        ("uint64", "row"),
        ("float32", "same"),
        ("float64", "middle"),
        ("float16", "same"),
        ("float32", "0d"),
        ("float32", "empty"),
    ],
)
def test_mod_10(fmod, dtype, shapes):
    if np.dtype(dtype).kind == "f" and fmod == 0:
        pytest.skip("the spec requires fmod=1 for floating point inputs")
    sa, sb = SHAPES_2[shapes]
    a = data(sa, dtype, seed=7) * (3 if np.dtype(dtype).kind in "iu" else 1)
    b = data(sb, dtype, "nonzero", seed=8)
    for opset in (10, 13):
        check_node("Mod", {"a": a.astype(dtype), "b": b}, {"fmod": fmod}, opset=opset, **tol(dtype))


def test_mod_float_fmod0_follows_numpy_mod():
    # fmod=0 on floats is outside the spec; onnxjit gives np.mod (the divisor's sign).
    a = np.array([5.5, -5.5, 5.5, -5.5, 3.0], np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0], np.float32)
    model = make_node_model("Mod", {"a": a, "b": b}, {"fmod": 0}, opset=13)
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, {"a": a, "b": b})[0]
    np.testing.assert_array_equal(got, np.mod(a, b))


def test_integer_mod_by_zero_gives_zero():
    a = np.array([5, -5, 7], np.int32)
    b = np.array([0, 0, -1], np.int32)
    for fmod in (0, 1):
        model = make_node_model("Mod", {"a": a, "b": b}, {"fmod": fmod}, opset=13)
        got = onnxjit.InferenceSession(model.SerializeToString()).run(None, {"a": a, "b": b})[0]
        np.testing.assert_array_equal(got, np.zeros(3, np.int32))


# ---------------------------------------------------------------------------------------------
# Unary
# ---------------------------------------------------------------------------------------------

# op, since, value domain, dtypes beyond float32
UNARY = [
    ("Neg", 6, "any", ("float64", "int32", "int8")),
    ("Abs", 6, "any", ("float64", "int64", "uint8", "float16")),
    ("Reciprocal", 6, "nonzero", ("float64",)),
    ("Sqrt", 6, "pos", ("float64", "float16")),
    ("Exp", 6, "any", ("float64", "float16")),
    ("Log", 6, "pos", ("float64",)),
    ("Floor", 6, "any", ("float64",)),
    ("Ceil", 6, "any", ("float64",)),
    ("Sigmoid", 6, "any", ("float64", "float16")),
    ("Tanh", 6, "any", ("float64",)),
    ("Relu", 6, "any", ("float64", "int32", "int8")),
    ("Round", 11, "any", ("float64",)),
    ("Sign", 9, "any", ("float64", "int32", "uint8")),
    ("Sin", 7, "any", ("float64",)),
    ("Cos", 7, "any", ("float64",)),
    ("Tan", 7, "unit", ("float64",)),
    ("Asin", 7, "unit", ("float64",)),
    ("Acos", 7, "unit", ("float64",)),
    ("Atan", 7, "any", ("float64",)),
    ("Sinh", 9, "any", ("float64",)),
    ("Cosh", 9, "any", ("float64",)),
    ("Asinh", 9, "any", ("float64",)),
    ("Acosh", 9, "ge1", ("float64",)),
    ("Atanh", 9, "unit", ("float64",)),
    ("Erf", 9, "any", ("float64",)),
    ("HardSwish", 14, "any", ("float64",)),
    ("Softplus", 1, "any", ("float64",)),
    ("Softsign", 1, "any", ("float64",)),
    ("Mish", 18, "any", ("float64",)),
]

UNARY_ROWS = [(op, since, dom, "float32", sc) for op, since, dom, _ in UNARY for sc in SHAPES_1]
UNARY_ROWS += [(op, since, dom, dt, "same") for op, since, dom, dts in UNARY for dt in dts]


@pytest.mark.parametrize("op, since, domain, dtype, shape", UNARY_ROWS)
def test_unary(op, since, domain, dtype, shape):
    if shape == "big" and op not in ("Relu", "Sigmoid", "Exp", "Neg"):
        pytest.skip("the parallel path is shared; four ops cover it")
    x = data(SHAPES_1[shape], dtype, domain, seed=9)
    if op == "Round" and x.size >= 4:
        x.reshape(-1)[:4] = np.array([0.5, 1.5, -2.5, 2.5], x.dtype)  # ties go to even
    # the registered version, and the newest opset (same implementation)
    # The reference evaluator's Softsign returns a numpy scalar for 0-d input; use onnxruntime.
    oracle = "ort" if (op == "Softsign" and shape == "0d") else "ref"
    for opset in sorted({max(since, 7), 22}):
        check_node(op, {"x": x}, opset=opset, oracle=oracle, **tol(dtype))


@pytest.mark.parametrize("op", ["Sqrt", "Log", "Exp", "Sigmoid", "Relu", "Floor", "Round", "Abs"])
def test_unary_special_values(op):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30], np.float32)
    with np.errstate(all="ignore"):
        check_node(op, {"x": x}, opset=13)


# ---------------------------------------------------------------------------------------------
# Activations with attributes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op, attrs, opsets",
    [
        ("HardSigmoid", {}, (6, 22)),
        ("HardSigmoid", {"alpha": 0.5, "beta": 0.3}, (6,)),
        ("LeakyRelu", {}, (6, 16)),
        ("LeakyRelu", {"alpha": 0.2}, (16,)),
        ("Elu", {}, (6,)),
        ("Elu", {"alpha": 0.5}, (22,)),
        ("Selu", {}, (6,)),
        ("Selu", {"alpha": 2.0, "gamma": 3.0}, (22,)),
        ("Celu", {}, (12,)),
        ("Celu", {"alpha": 2.0}, (12,)),
        ("ThresholdedRelu", {}, (10,)),
        ("ThresholdedRelu", {"alpha": 0.5}, (22,)),
        ("Gelu", {}, (20,)),
        ("Gelu", {"approximate": "tanh"}, (20,)),
        ("Shrink", {}, (9,)),
        ("Shrink", {"lambd": 1.5, "bias": 0.5}, (9,)),
    ],
)
@pytest.mark.parametrize(
    "dtype, shape",
    [
        ("float32", "same"),
        ("float32", "0d"),
        ("float32", "empty"),
        ("float64", "same"),
        ("float16", "same"),
    ],
)
def test_activation_with_attrs(op, attrs, opsets, dtype, shape):
    x = data(SHAPES_1[shape], dtype, seed=10)
    for opset in opsets:
        check_node(op, {"x": x}, attrs, opset=opset, **tol(dtype))


@pytest.mark.parametrize("dtype", ["int32", "int8"])
def test_shrink_integers(dtype):
    x = (data((4, 5), dtype, seed=11) * 2).astype(dtype)
    check_node("Shrink", {"x": x}, {"lambd": 1.5, "bias": 1.0}, opset=9)


@pytest.mark.parametrize(
    "sx, ss",
    [
        ((2, 3, 4, 5), (3, 1, 1)),
        ((2, 3, 4), (2, 3, 4)),
        ((2, 3, 4), (1,)),
        ((3, 4), ()),
        ((2, 3, 4), (4,)),
        ((0, 3), (3,)),
    ],
)
@pytest.mark.parametrize("opset", [7, 16])
def test_prelu(sx, ss, opset):
    x = data(sx, "float32", seed=12)
    s = data(ss, "float32", "pos", seed=13)
    check_node("PRelu", {"x": x, "slope": s}, opset=opset)


@pytest.mark.parametrize("dtype", ["int32", "float64", "float16"])
def test_prelu_types(dtype):
    x = data((2, 3, 4), dtype, seed=14)
    s = data((3, 1), dtype, "pos", seed=15)
    check_node("PRelu", {"x": x, "slope": s}, opset=16, **tol(dtype))


def test_prelu_6():
    # PRelu-6 (before unidirectional broadcasting): slope of X's shape or a single value.
    # onnxruntime has no PRelu-6 kernel older than 7, so the reference evaluator is the oracle.
    x = data((2, 3), "float32", seed=16)
    check_node("PRelu", {"x": x, "slope": data((2, 3), "float32", "pos")}, opset=6)


def test_prelu_rejects_slope_that_grows_x():
    with pytest.raises(onnxjit.OnnxJitError, match="slope"):
        run_jit("PRelu", {"x": data((3,), "float32"), "slope": data((2, 3), "float32")}, opset=16)


# ---------------------------------------------------------------------------------------------
# Clip
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("attrs", [{}, {"min": -1.0}, {"max": 0.5}, {"min": -1.0, "max": 1.0}])
@pytest.mark.parametrize(
    "dtype, shape",
    [("float32", "same"), ("float32", "0d"), ("float64", "same"), ("float16", "same")],
)
def test_clip_6(attrs, dtype, shape):
    x = data(SHAPES_1[shape], dtype, seed=17)
    check_node("Clip", {"x": x}, attrs, opset=6, **tol(dtype))


@pytest.mark.parametrize("opset", [11, 12, 13])
@pytest.mark.parametrize("bounds", [(None, None), (-1, None), (None, 2), (-1, 2), (3, 1)])
@pytest.mark.parametrize(
    "dtype, shape",
    [
        ("float32", "same"),
        ("float32", "0d"),
        ("float32", "empty"),
        ("float32", "big"),
        ("float64", "same"),
        ("int32", "same"),
        ("uint8", "same"),
        ("int64", "same"),
        ("float16", "same"),
    ],
)
def test_clip_11(opset, bounds, dtype, shape):
    if opset == 11 and np.dtype(dtype).kind in "iu":
        pytest.skip("integer Clip exists from opset 12 on")
    if shape == "big" and bounds != (-1, 2):
        pytest.skip("one parallel row is enough")
    if np.dtype(dtype).kind == "u" and bounds[0] is not None and bounds[0] < 0:
        bounds = (0, bounds[1])
    x = data(SHAPES_1[shape], dtype, seed=18)
    lo = None if bounds[0] is None else np.array(bounds[0], dtype)
    hi = None if bounds[1] is None else np.array(bounds[1], dtype)
    check_node("Clip", {"x": x, "min": lo, "max": hi}, opset=opset, **tol(dtype))


def test_clip_11_bounds_as_initializers():
    x = data((4, 5), "float32")
    check_node(
        "Clip",
        {"x": x, "min": np.array(-0.5, np.float32), "max": np.array(0.5, np.float32)},
        opset=13,
        const_inputs=("min", "max"),
    )


def test_clip_nan_passes_through():
    x = np.array([np.nan, -5, 5, 0.3], np.float32)
    check_node(
        "Clip", {"x": x, "min": np.array(-1, np.float32), "max": np.array(1, np.float32)}, opset=13
    )


# ---------------------------------------------------------------------------------------------
# Variadic Min / Max / Sum / Mean
# ---------------------------------------------------------------------------------------------

VARIADIC_SHAPES = {
    "one": [(2, 3)],
    "two_same": [(2, 3), (2, 3)],
    "three_bcast": [(2, 3, 4), (3, 1), (4,)],
    "0d": [(), ()],
    "empty": [(0, 3), (3,)],
    "big": [(BIG,), (BIG,)],
}


@pytest.mark.parametrize("op", ["Min", "Max", "Sum", "Mean"])
@pytest.mark.parametrize(
    "dtype, shapes",
    [("float32", s) for s in VARIADIC_SHAPES]
    + [
        ("float64", "two_same"),
        ("int32", "three_bcast"),
        ("float16", "two_same"),
        ("uint8", "two_same"),
    ],
)
@pytest.mark.parametrize("opset", [8, 13])
def test_variadic(op, dtype, shapes, opset):
    if op == "Mean" and np.dtype(dtype).kind in "iu":
        pytest.skip("Mean is defined for floating point types only")
    if opset == 8 and np.dtype(dtype).kind in "iu" and op in ("Min", "Max"):
        pytest.skip("integer Min/Max exist from opset 12 on")
    if shapes == "big" and opset == 8:
        pytest.skip("one parallel row per op is enough")
    ins = {f"x{i}": data(s, dtype, seed=20 + i) for i, s in enumerate(VARIADIC_SHAPES[shapes])}
    check_node(op, ins, opset=opset, **tol(dtype))


@pytest.mark.parametrize("op", ["Min", "Max", "Sum", "Mean"])
def test_variadic_6_same_shapes(op):
    ins = {f"x{i}": data((2, 3), "float32", seed=30 + i) for i in range(3)}
    check_node(op, ins, opset=6)


@pytest.mark.parametrize("op", ["Min", "Max"])
def test_min_max_propagate_nan(op):
    a = np.array([np.nan, 1.0, np.nan, 2.0], np.float32)
    b = np.array([1.0, np.nan, np.nan, 3.0], np.float32)
    check_node(op, {"a": a, "b": b}, opset=13)


# ---------------------------------------------------------------------------------------------
# Comparisons and logic
# ---------------------------------------------------------------------------------------------

CMP = [("Equal", 7), ("Less", 7), ("Greater", 7), ("LessOrEqual", 12), ("GreaterOrEqual", 12)]


@pytest.mark.parametrize("op, since", CMP)
@pytest.mark.parametrize(
    "dtype, shapes",
    [("float32", s) for s in ("same", "scalar", "middle", "0d", "empty", "big")]
    + [
        ("int32", "row"),
        ("int64", "same"),
        ("float64", "same"),
        ("uint8", "same"),
        ("float16", "same"),
    ],
)
def test_compare(op, since, dtype, shapes):
    sa, sb = SHAPES_2[shapes]
    a = data(sa, dtype, seed=40)
    b = data(sb, dtype, seed=41)
    if np.dtype(dtype).kind in "iu" and a.size and b.size:
        b = np.broadcast_to(b, np.broadcast_shapes(a.shape, b.shape)).copy()
        a = np.broadcast_to(a, b.shape).copy()
        b.reshape(-1)[::2] = a.reshape(-1)[::2]  # some equal pairs
    for opset in sorted({max(since, 9 if np.dtype(dtype).kind in "iu" else since), 16}):
        check_node(op, {"a": a, "b": b}, opset=opset, **tol(dtype))


def test_compare_nan():
    a = np.array([np.nan, 1, np.nan], np.float32)
    b = np.array([np.nan, np.nan, 1], np.float32)
    for op, _ in CMP:
        check_node(op, {"a": a, "b": b}, opset=16)


def test_equal_bool_and_string():
    check_node(
        "Equal", {"a": data((5,), np.bool_, seed=1), "b": data((5,), np.bool_, seed=2)}, opset=11
    )
    a = np.array(["a", "bc", "d"], dtype=object)
    b = np.array(["a", "b", "d"], dtype=object)
    check_node("Equal", {"a": a, "b": b}, opset=19)


def test_not_1():
    for shape in ((2, 3), (), (0,)):
        check_node("Not", {"x": data(shape, np.bool_)}, opset=1)
        check_node("Not", {"x": data(shape, np.bool_)}, opset=13)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
@pytest.mark.parametrize("shapes", ["same", "scalar", "middle", "0d", "empty"])
def test_logic_7(op, shapes):
    sa, sb = SHAPES_2[shapes]
    check_node(op, {"a": data(sa, np.bool_, seed=1), "b": data(sb, np.bool_, seed=2)}, opset=7)


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", ["int32", "uint8", "int64", "uint64", "int8"])
@pytest.mark.parametrize("shapes", ["same", "row"])
def test_bitwise_18(op, dtype, shapes):
    sa, sb = SHAPES_2[shapes]
    a = data(sa, dtype, seed=3) * 13
    b = data(sb, dtype, seed=4) * 7
    check_node(op, {"a": a.astype(dtype), "b": b.astype(dtype)}, opset=18)


@pytest.mark.parametrize("dtype", ["int32", "uint8", "int64", "uint16"])
def test_bitwise_not_18(dtype):
    check_node("BitwiseNot", {"x": data((3, 4), dtype, seed=5)}, opset=18)
    check_node("BitwiseNot", {"x": data((), dtype, seed=5)}, opset=18)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64"])
@pytest.mark.parametrize("shapes", ["same", "scalar", "middle"])
def test_bitshift_11(direction, dtype, shapes):
    sa, sb = SHAPES_2[shapes]
    x = data(sa, dtype, seed=6) * 5
    y = (data(sb, dtype, seed=7) % 4).astype(dtype)
    check_node("BitShift", {"x": x.astype(dtype), "y": y}, {"direction": direction}, opset=11)


# ---------------------------------------------------------------------------------------------
# IsNaN, IsInf, Where
# ---------------------------------------------------------------------------------------------

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -1.5, 2.0], np.float32)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("opset", [9, 13, 20])
def test_isnan(dtype, opset):
    check_node("IsNaN", {"x": SPECIAL.astype(dtype)}, opset=opset)
    check_node("IsNaN", {"x": SPECIAL.astype(dtype).reshape(2, 3)[:, :0]}, opset=opset)


@pytest.mark.parametrize("neg, pos", [(1, 1), (0, 1), (1, 0), (0, 0)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("opset", [10, 20])
def test_isinf(neg, pos, dtype, opset):
    attrs = {"detect_negative": neg, "detect_positive": pos}
    check_node("IsInf", {"x": SPECIAL.astype(dtype)}, attrs, opset=opset)


@pytest.mark.parametrize(
    "shapes",
    [
        ((2, 3), (2, 3), (2, 3)),
        ((2, 1), (3,), ()),
        ((4, 1, 3), (2, 1), (1, 3)),
        ((), (), ()),
        ((0, 3), (3,), (1,)),
        ((BIG,), (BIG,), ()),
    ],
)
@pytest.mark.parametrize("dtype", ["float32"])
def test_where_shapes(shapes, dtype):
    c, sx, sy = shapes
    check_node(
        "Where",
        {"c": data(c, np.bool_, seed=1), "x": data(sx, dtype, seed=2), "y": data(sy, dtype)},
        opset=16,
    )


@pytest.mark.parametrize("dtype", ["float64", "int64", "int8", "uint8", "bool", "float16"])
@pytest.mark.parametrize("opset", [9, 16])
def test_where_types(dtype, opset):
    c = data((3, 4), np.bool_, seed=3)
    check_node(
        "Where", {"c": c, "x": data((3, 4), dtype, seed=4), "y": data((4,), dtype)}, opset=opset
    )


def test_where_strings():
    c = np.array([True, False, True])
    x = np.array(["a", "b", "c"], dtype=object)
    y = np.array(["x", "y", "z"], dtype=object)
    check_node("Where", {"c": c, "x": x, "y": y}, opset=16)


# ---------------------------------------------------------------------------------------------
# Cast / CastLike
# ---------------------------------------------------------------------------------------------

NUMERIC = ["float32", "float64", "float16", "int32", "int64", "int8", "uint8", "bool"]


def _cast_input(src):
    x = np.array([0.0, 1.0, -2.0, 3.7, -3.7, 100.2, 0.5, 7.0], np.float64)
    if np.dtype(src).kind == "u":
        x = np.abs(x)
    return x.astype(src)


def _cast_ok(src, dst, x):
    # float -> unsigned of negative values and float -> narrow int overflow are undefined.
    return not (np.dtype(src).kind == "f" and np.dtype(dst).kind == "u" and (x < 0).any())


@pytest.mark.parametrize("src", NUMERIC)
@pytest.mark.parametrize("dst", NUMERIC)
def test_cast_numeric(src, dst):
    from onnx import helper

    from onnxjit import types

    x = _cast_input(src)
    if not _cast_ok(src, dst, x):
        x = np.abs(x)
    to = types.onnx_elem_type(np.dtype(dst))
    check_node("Cast", {"x": x}, {"to": to}, opset=13, **tol(dst))
    assert helper.tensor_dtype_to_np_dtype(to) == np.dtype(dst)


@pytest.mark.parametrize("opset", [6, 9, 13, 19, 21, 24])
@pytest.mark.parametrize("shape", ["same", "0d", "empty", "big"])
def test_cast_versions(opset, shape):
    from onnx import TensorProto

    x = data(SHAPES_1[shape], "float32", seed=50)
    check_node("Cast", {"x": x}, {"to": TensorProto.INT32}, opset=opset)
    if opset >= 13:
        check_node(
            "Cast", {"x": x}, {"to": TensorProto.BFLOAT16}, opset=opset, rtol=1e-2, atol=1e-2
        )


def test_cast_to_and_from_string():
    from onnx import TensorProto
    from oracle import reference_outputs

    # The reference evaluator returns numpy unicode arrays; onnxjit (like onnxruntime) returns
    # object arrays of str, so compare the values.
    for x in (np.array([1.5, -2.25, 0.0, 3.0], np.float32), np.array([1, -2, 30], np.int64)):
        model = make_node_model("Cast", {"x": x}, {"to": TensorProto.STRING}, opset=13)
        got = run_jit("Cast", {"x": x}, {"to": TensorProto.STRING}, opset=13)[0]
        want = reference_outputs(model, {"x": x})[0]
        assert got.dtype == object and got.shape == want.shape
        assert [float(v) for v in got] == [float(v) for v in want]
    s = np.array(["1.5", "-2.25", "0", "3", "NaN", "INF", "-INF"], dtype=object)
    check_node("Cast", {"x": s}, {"to": TensorProto.FLOAT}, opset=13)


@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_19_float8(saturate):
    from onnx import TensorProto

    x = np.array([0.0, 1.0, -2.5, 400.0, -1000.0, 0.3], np.float32)
    check_node(
        "Cast",
        {"x": x},
        {"to": TensorProto.FLOAT8E4M3FN, "saturate": saturate},
        opset=19,
        rtol=0,
        atol=0,
    )
    check_node(
        "Cast",
        {"x": x},
        {"to": TensorProto.FLOAT8E5M2, "saturate": saturate},
        opset=19,
        rtol=0,
        atol=0,
    )


@pytest.mark.parametrize("opset", [15, 19, 24])
@pytest.mark.parametrize(
    "src, dst",
    [("float32", "int64"), ("int32", "float16"), ("float64", "float32"), ("uint8", "bool")],
)
def test_castlike(opset, src, dst):
    x = _cast_input(src)
    check_node("CastLike", {"x": x, "like": np.zeros(1, dst)}, opset=opset, **tol(dst))


# ---------------------------------------------------------------------------------------------
# Registry bookkeeping
# ---------------------------------------------------------------------------------------------


def test_type_only_versions_are_not_registered_and_exist():
    import onnx

    from onnxjit import registry

    impls = registry.implementations()
    for op, versions in ew_ops.TYPE_ONLY_VERSIONS.items():
        registered = {i.since for i in impls[("", op)]}
        for v in versions:
            assert v not in registered, (op, v)
            assert onnx.defs.get_schema(op, v).since_version == v, (op, v)


def test_no_compile_for_new_attribute_value():
    from onnxjit.codegen import elementwise as cg

    x = data((3, 4), "float32")
    check_node("LeakyRelu", {"x": x}, {"alpha": 0.1}, opset=16)
    n = len(cg.kernel_cache())
    check_node("LeakyRelu", {"x": x}, {"alpha": 0.3}, opset=16)
    check_node("LeakyRelu", {"x": data((7, 2, 4), "float32")}, {"alpha": 0.7}, opset=16)
    assert len(cg.kernel_cache()) == n
