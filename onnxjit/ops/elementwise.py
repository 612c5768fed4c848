"""Elementwise operators of the default domain, computed by generated Numba kernels.

Each op builds a scalar expression (:mod:`onnxjit.codegen.expr`) over its inputs, cached per
(op, attributes that change the expression, input dtypes), and evaluates it with
:func:`onnxjit.codegen.elementwise.apply`, which broadcasts with numpy's rules. Float attributes
(alpha, beta...) are passed as 0-d inputs rather than baked into the code, so a new attribute
value never compiles a new kernel.

float16/bfloat16 are computed in float32 and stored back in the narrow type: the generated
kernel widens each element on load and rounds it (to nearest even) on store, so no separate
conversion pass runs over memory. float8 inputs of IsNaN/IsInf are widened to float32 with
numpy first (ml_dtypes conversions). Strings (Equal, Where, Cast) use numpy.

Registered versions are the ones whose semantics, attributes or inputs changed; the others
only widened the type lists and resolve to the previous registration
(:data:`TYPE_ONLY_VERSIONS`, for the version audit).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

from onnxjit import types as onnx_types
from onnxjit.codegen import expr as E
from onnxjit.codegen.elementwise import apply, compute_dtype
from onnxjit.lowering import TENSOR, Bound, LowerContext, Spec, lowering_of, lowers
from onnxjit.registry import implementations, onnx_op

# Versions of our ops that only changed the allowed types (reviewed): resolved by the previous
# registration, which handles the new types.
TYPE_ONLY_VERSIONS: dict[str, tuple[int, ...]] = {
    **{op: (13, 14) for op in ("Add", "Sub", "Mul", "Div")},
    "Pow": (12, 13, 15),
    "Mod": (13, 28),
    **{
        op: (13,)
        for op in (
            "Neg",
            "Abs",
            "Reciprocal",
            "Sqrt",
            "Exp",
            "Log",
            "Floor",
            "Ceil",
            "Sigmoid",
            "Tanh",
            "Erf",
            "Sign",
        )
    },
    "Relu": (13, 14),
    "Round": (22,),
    **{
        op: (22,)
        for op in (
            "Sin",
            "Cos",
            "Tan",
            "Asin",
            "Acos",
            "Atan",
            "Sinh",
            "Cosh",
            "Asinh",
            "Acosh",
            "Atanh",
            "HardSigmoid",
            "HardSwish",
            "Elu",
            "Selu",
            "Softplus",
            "Softsign",
            "ThresholdedRelu",
            "Mish",
        )
    },
    "LeakyRelu": (16,),
    "PRelu": (9, 16),
    "Celu": (28,),
    "Clip": (12, 13),
    "Min": (12, 13),
    "Max": (12, 13),
    "Sum": (13,),
    "Mean": (13,),
    "Equal": (11, 13, 19),
    "Less": (9, 13),
    "Greater": (9, 13),
    "LessOrEqual": (16,),
    "GreaterOrEqual": (16,),
    "BitShift": (28,),
    "IsNaN": (13, 20),
    "IsInf": (20,),
    "Where": (16,),
    "Cast": (9, 13, 21, 23, 25, 28),
    "CastLike": (21, 23, 25),
}

_EXPRS: dict[tuple, E.Expr] = {}


def _ew(
    key: Any,
    build: Callable[..., E.Expr],
    arrays: list[np.ndarray] | tuple[np.ndarray, ...],
    out_dtype: Any = None,
) -> np.ndarray:
    """Evaluate ``build(*inputs)`` elementwise; the expression is cached by key and dtypes.

    The stored dtype defaults to the first input's when the expression computes in its
    compute dtype (so float16 in -> float16 out), else the expression's dtype.
    """
    dts = tuple(a.dtype for a in arrays)
    k = (key, dts)
    e = _EXPRS.get(k)
    if e is None:
        e = build(*[E.inp(i, compute_dtype(dt)) for i, dt in enumerate(dts)])
        _EXPRS[k] = e
    if out_dtype is None:
        out_dtype = dts[0] if compute_dtype(dts[0]) == e.dtype else e.dtype
    return apply(e, arrays, out_dtype)


def _scalar(value: Any, like: np.ndarray) -> np.ndarray:
    """A 0-d attribute value in the compute dtype of ``like``."""
    return np.array(value, dtype=compute_dtype(like.dtype))


# dtypes the generated kernels load and store (float16/bfloat16 through float32)
_KERNEL_DTYPES = frozenset(
    np.dtype(t)
    for t in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
        ml_dtypes.bfloat16,
    )
)


def _widen_exotic(x: np.ndarray) -> np.ndarray:
    """float8 and other ml_dtypes floats -> float32 (bfloat16/float16 are handled by apply)."""
    if x.dtype not in _KERNEL_DTYPES:
        return x.astype(np.float32)
    return x


def _is_float(e: E.Expr) -> bool:
    return e.dtype.kind == "f"


# ---------------------------------------------------------------------------------------------
# Binary arithmetic
# ---------------------------------------------------------------------------------------------


def _add(a: E.Expr, b: E.Expr) -> E.Expr:
    return E.op("add", a, b)


def _sub(a: E.Expr, b: E.Expr) -> E.Expr:
    return E.op("sub", a, b)


def _mul(a: E.Expr, b: E.Expr) -> E.Expr:
    return E.op("mul", a, b)


def _div(a: E.Expr, b: E.Expr) -> E.Expr:
    # Integer Div truncates toward zero (x/0 -> 0); float Div is IEEE.
    return E.op("truediv", a, b) if _is_float(a) else E.call("div", a, b)


_ARITH = {"Add": _add, "Sub": _sub, "Mul": _mul, "Div": _div}


def _legacy_broadcast(ctx: Any, a: np.ndarray, b: np.ndarray, broadcast: int, axis: Any):
    """Opset 6 arithmetic: B is broadcast onto A only with broadcast=1, aligned at ``axis``."""
    if not broadcast:
        if a.shape != b.shape:
            raise ctx.error(
                f"shapes {a.shape} and {b.shape} differ and broadcast=0; set broadcast=1 or "
                "use opset 7 or later"
            )
        return b
    if axis is None:
        return b
    ax = axis + a.ndim if axis < 0 else axis
    if ax < 0 or ax + b.ndim > a.ndim:
        raise ctx.error(f"axis={axis} cannot align B of shape {b.shape} with A of shape {a.shape}")
    return b.reshape(b.shape + (1,) * (a.ndim - ax - b.ndim))


def _make_arith(op_type: str) -> None:
    build = _ARITH[op_type]

    @onnx_op(op_type, since=6)
    def legacy(ctx, a, b, *, axis=None, broadcast):
        """Opset 6: numpy broadcasting replaced by the broadcast/axis attributes."""
        b = _legacy_broadcast(ctx, a, b, broadcast, axis)
        if a.dtype != b.dtype:
            raise ctx.error(f"A is {a.dtype} but B is {b.dtype}; both must have the same type")
        return _ew(op_type, build, (a, b))

    @onnx_op(op_type, since=7)
    def numpy_broadcast(ctx, a, b):
        if a.dtype != b.dtype:
            raise ctx.error(f"A is {a.dtype} but B is {b.dtype}; both must have the same type")
        return _ew(op_type, build, (a, b))

    legacy.__name__ = legacy.__qualname__ = f"{op_type.lower()}_6"
    numpy_broadcast.__name__ = numpy_broadcast.__qualname__ = f"{op_type.lower()}_7"


for _op in _ARITH:
    _make_arith(_op)


def _pow_expr(x: E.Expr, y: E.Expr) -> E.Expr:
    if _is_float(x):
        # float base: the exponent (any numeric type) is converted to the base's type
        return E.call("fpow", x, E.cast(y, x.dtype))
    if _is_float(y):
        # integer base, float exponent: the real power, truncated back to the integer type
        f64 = np.dtype(np.float64)
        return E.cast(E.call("fpow", E.cast(x, f64), E.cast(y, f64)), x.dtype)
    # integer ** integer by repeated squaring, wrapping like numpy
    return E.call("ipow", x, E.cast(y, np.int64) if y.dtype.kind == "u" else y, dtype=x.dtype)


@onnx_op("Pow", since=1)
def pow_1(ctx, x: np.ndarray, y: np.ndarray, *, axis=None, broadcast) -> np.ndarray:
    """Opset 1: Y is broadcast onto X only with broadcast=1, aligned at ``axis``."""
    return pow_7(x, _legacy_broadcast(ctx, x, y, broadcast, axis))


@onnx_op("Pow", since=7)
def pow_7(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """X ** Y with numpy broadcasting; the result has X's type (Y may differ from 12 on)."""
    return _ew("Pow", _pow_expr, (x, y))


@onnx_op("Mod", since=10)
def mod_10(ctx, a: np.ndarray, b: np.ndarray, *, fmod: int) -> np.ndarray:
    """fmod=0: the result has the divisor's sign (np.mod); fmod=1: the dividend's (C fmod)."""
    if a.dtype != b.dtype:
        raise ctx.error(f"A is {a.dtype} but B is {b.dtype}; both must have the same type")
    fam = "fmod" if fmod else "mod"
    return _ew(("Mod", fam), lambda p, q: E.call(fam, p, q), (a, b))


# ---------------------------------------------------------------------------------------------
# Unary
# ---------------------------------------------------------------------------------------------


def _unary(op_type: str, since: int, family: str) -> None:
    def build(x: E.Expr) -> E.Expr:
        return E.call(family, x)

    def impl(x: np.ndarray) -> np.ndarray:
        return _ew(op_type, build, (x,))

    impl.__name__ = impl.__qualname__ = f"{op_type.lower()}_{since}"
    impl.__doc__ = f"{op_type}: elementwise scalar helper family {family!r}."
    onnx_op(op_type, since=since)(impl)


_UNARY_FAMILIES = [
    ("Abs", 6, "absval"),
    ("Reciprocal", 6, "reciprocal"),
    ("Sqrt", 6, "sqrt"),
    ("Exp", 6, "exp"),
    ("Log", 6, "log"),
    ("Floor", 6, "floor"),
    ("Ceil", 6, "ceil"),
    ("Sigmoid", 6, "sigmoid"),
    ("Tanh", 6, "tanh"),
    ("Relu", 6, "relu"),
    ("Round", 11, "round"),
    ("Sign", 9, "sign"),
    ("Sin", 7, "sin"),
    ("Cos", 7, "cos"),
    ("Tan", 7, "tan"),
    ("Asin", 7, "asin"),
    ("Acos", 7, "acos"),
    ("Atan", 7, "atan"),
    ("Sinh", 9, "sinh"),
    ("Cosh", 9, "cosh"),
    ("Asinh", 9, "asinh"),
    ("Acosh", 9, "acosh"),
    ("Atanh", 9, "atanh"),
    ("Erf", 9, "erf"),
    ("HardSwish", 14, "hardswish"),
    ("Softplus", 1, "softplus"),
    ("Softsign", 1, "softsign"),
    ("Mish", 18, "mish"),
]
for _op, _since, _fam in _UNARY_FAMILIES:
    _unary(_op, _since, _fam)


@onnx_op("Neg", since=6)
def neg_6(x: np.ndarray) -> np.ndarray:
    """-x (integers wrap: -MIN == MIN, like numpy)."""
    return _ew("Neg", lambda a: E.op("neg", a), (x,))


# ---------------------------------------------------------------------------------------------
# Activations with attributes (attributes travel as 0-d inputs)
# ---------------------------------------------------------------------------------------------


@onnx_op("HardSigmoid", since=6)
def hardsigmoid_6(x: np.ndarray, *, alpha: float, beta: float) -> np.ndarray:
    """max(0, min(1, alpha * x + beta))."""
    return _ew(
        "HardSigmoid",
        lambda v, a, b: E.call("hardsigmoid", v, a, b),
        (x, _scalar(alpha, x), _scalar(beta, x)),
    )


@onnx_op("LeakyRelu", since=6)
def leakyrelu_6(x: np.ndarray, *, alpha: float) -> np.ndarray:
    """x if x >= 0 else alpha * x."""
    return _ew("LeakyRelu", lambda v, a: E.call("leakyrelu", v, a), (x, _scalar(alpha, x)))


@onnx_op("PRelu", since=6)
def prelu_6(ctx, x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    """Opset 6: a slope of size 1 is shared; a 1-D slope of size C applies per channel (axis 1).

    Exporters of that era (e.g. PyTorch's PReLU with num_parameters=C) rely on the channel
    reading; numpy-style broadcasting arrived with PRelu-7.
    """
    if slope.ndim == 1 and slope.size > 1 and x.ndim >= 2 and slope.shape[0] == x.shape[1]:
        slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
    return prelu_7(ctx, x, slope)


@onnx_op("PRelu", since=7)
def prelu_7(ctx, x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    """x if x >= 0 else slope * x; slope broadcasts to X (unidirectionally)."""
    if slope.dtype != x.dtype:
        raise ctx.error(f"X is {x.dtype} but slope is {slope.dtype}; both must match")
    if slope.ndim > x.ndim:
        raise ctx.error(
            f"slope of shape {slope.shape} has more dimensions than X of shape {x.shape}"
        )
    y = _ew("PRelu", lambda v, s: E.call("prelu", v, s), (x, slope))
    if y.shape != x.shape:
        raise ctx.error(
            f"slope of shape {slope.shape} does not broadcast to X of shape {x.shape}; "
            "PRelu broadcasts slope to X only"
        )
    return y


@onnx_op("Elu", since=6)
def elu_6(x: np.ndarray, *, alpha: float) -> np.ndarray:
    """x if x >= 0 else alpha * (exp(x) - 1)."""
    return _ew("Elu", lambda v, a: E.call("elu", v, a), (x, _scalar(alpha, x)))


@onnx_op("Selu", since=6)
def selu_6(x: np.ndarray, *, alpha: float, gamma: float) -> np.ndarray:
    """gamma * (x if x > 0 else alpha * (exp(x) - 1))."""
    return _ew(
        "Selu",
        lambda v, a, g: E.call("selu", v, a, g),
        (x, _scalar(alpha, x), _scalar(gamma, x)),
    )


@onnx_op("Celu", since=12)
def celu_12(x: np.ndarray, *, alpha: float) -> np.ndarray:
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    return _ew("Celu", lambda v, a: E.call("celu", v, a), (x, _scalar(alpha, x)))


@onnx_op("ThresholdedRelu", since=10)
def thresholdedrelu_10(x: np.ndarray, *, alpha: float) -> np.ndarray:
    """x if x > alpha else 0."""
    return _ew(
        "ThresholdedRelu", lambda v, a: E.call("thresholdedrelu", v, a), (x, _scalar(alpha, x))
    )


@onnx_op("Gelu", since=20)
def gelu_20(ctx, x: np.ndarray, *, approximate: str) -> np.ndarray:
    """x/2 (1 + erf(x/sqrt 2)); approximate="tanh" uses the tanh formula."""
    if isinstance(approximate, bytes):
        approximate = approximate.decode()
    if approximate not in ("none", "tanh"):
        raise ctx.error(f"approximate={approximate!r}; expected 'none' or 'tanh'")
    fam = "gelu_tanh" if approximate == "tanh" else "gelu"
    return _ew(("Gelu", fam), lambda v: E.call(fam, v), (x,))


@onnx_op("Shrink", since=9)
def shrink_9(x: np.ndarray, *, bias: float, lambd: float) -> np.ndarray:
    """x + bias if x < -lambd; x - bias if x > lambd; else 0."""
    if x.dtype.kind in "iu":
        # integer input: compare and shift in float64, truncate back
        f64 = np.dtype(np.float64)
        lam = np.array(lambd, f64)
        b = np.array(bias, f64)
        return _ew(
            "ShrinkInt",
            lambda v, la, bi: E.cast(E.call("shrink", E.cast(v, f64), la, bi), v.dtype),
            (x, lam, b),
        )
    return _ew(
        "Shrink",
        lambda v, la, bi: E.call("shrink", v, la, bi),
        (x, _scalar(lambd, x), _scalar(bias, x)),
    )


# ---------------------------------------------------------------------------------------------
# Clip
# ---------------------------------------------------------------------------------------------


def _clip(x: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None) -> np.ndarray:
    arrays = [x]
    if lo is not None:
        arrays.append(lo)
    if hi is not None:
        arrays.append(hi)
    has_lo, has_hi = lo is not None, hi is not None

    def build(v: E.Expr, *bounds: E.Expr) -> E.Expr:
        i = 0
        if has_lo:
            v = E.call("clip_lo", v, bounds[i])
            i += 1
        if has_hi:
            v = E.call("clip_hi", v, bounds[i])
        return v

    return _ew(("Clip", has_lo, has_hi), build, arrays)


@onnx_op("Clip", since=6)
def clip_6(x: np.ndarray, *, max: float, min: float) -> np.ndarray:
    """min(max(x, min), max) with the bounds as attributes."""
    return _clip(x, _scalar(min, x), _scalar(max, x))


@onnx_op("Clip", since=11)
def clip_11(ctx, x: np.ndarray, min: np.ndarray = None, max: np.ndarray = None) -> np.ndarray:
    """min(max(x, min), max); min/max are optional scalar inputs (min > max gives max)."""
    bounds = []
    for name, b in (("min", min), ("max", max)):
        if b is not None:
            if b.size != 1:
                raise ctx.error(f"{name} must be a scalar, got shape {b.shape}")
            if b.dtype != x.dtype:
                raise ctx.error(f"{name} is {b.dtype} but input is {x.dtype}; they must match")
            b = b.reshape(())
        bounds.append(b)
    return _clip(x, bounds[0], bounds[1])


# ---------------------------------------------------------------------------------------------
# Variadic Min / Max / Sum / Mean
# ---------------------------------------------------------------------------------------------


def _variadic(ctx: Any, op_type: str, family: str, arrays: tuple[np.ndarray, ...]) -> np.ndarray:
    if not arrays:
        raise ctx.error("needs at least one input")
    for a in arrays[1:]:
        if a.dtype != arrays[0].dtype:
            raise ctx.error(
                f"inputs have types {[str(b.dtype) for b in arrays]}; all must be the same"
            )
    n = len(arrays)

    def build(*xs: E.Expr) -> E.Expr:
        acc = xs[0]
        for x in xs[1:]:
            acc = E.op("add", acc, x) if family == "add" else E.call(family, acc, x)
        if op_type == "Mean":
            acc = E.op("truediv", acc, E.const(n, acc.dtype))
        return acc

    if n == 1 and op_type != "Mean":
        return arrays[0].copy()
    return _ew((op_type, n), build, arrays)


@onnx_op("Max", since=6)
@onnx_op("Max", since=8)
def max_8(ctx, *data: np.ndarray) -> np.ndarray:
    """Elementwise maximum with broadcasting (opset 6 required equal shapes); NaN wins."""
    return _variadic(ctx, "Max", "max", data)


@onnx_op("Min", since=6)
@onnx_op("Min", since=8)
def min_8(ctx, *data: np.ndarray) -> np.ndarray:
    """Elementwise minimum with broadcasting (opset 6 required equal shapes); NaN wins."""
    return _variadic(ctx, "Min", "min", data)


@onnx_op("Sum", since=6)
@onnx_op("Sum", since=8)
def sum_8(ctx, *data: np.ndarray) -> np.ndarray:
    """Elementwise sum with broadcasting (opset 6 required equal shapes)."""
    return _variadic(ctx, "Sum", "add", data)


@onnx_op("Mean", since=6)
@onnx_op("Mean", since=8)
def mean_8(ctx, *data: np.ndarray) -> np.ndarray:
    """Elementwise mean with broadcasting (opset 6 required equal shapes)."""
    return _variadic(ctx, "Mean", "add", data)


# ---------------------------------------------------------------------------------------------
# Comparisons and logic
# ---------------------------------------------------------------------------------------------


def _compare(ctx: Any, name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype != b.dtype:
        raise ctx.error(f"A is {a.dtype} but B is {b.dtype}; both must have the same type")
    if a.dtype.kind in "OUS":
        if name != "eq":
            raise ctx.error(f"string tensors only support Equal, got {a.dtype}")
        return np.equal(a.astype(object), b.astype(object)).astype(bool)
    return _ew(("cmp", name), lambda p, q: E.op(name, p, q), (a, b), np.bool_)


@onnx_op("Equal", since=7)
def equal_7(ctx, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a == b (bool; NaN == NaN is False; strings compared with numpy)."""
    return _compare(ctx, "eq", a, b)


@onnx_op("Less", since=7)
def less_7(ctx, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _compare(ctx, "lt", a, b)


@onnx_op("Greater", since=7)
def greater_7(ctx, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _compare(ctx, "gt", a, b)


@onnx_op("LessOrEqual", since=12)
def lessorequal_12(ctx, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _compare(ctx, "le", a, b)


@onnx_op("GreaterOrEqual", since=12)
def greaterorequal_12(ctx, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _compare(ctx, "ge", a, b)


@onnx_op("Not", since=1)
def not_1(x: np.ndarray) -> np.ndarray:
    return _ew("Not", lambda a: E.op("not", a), (x,), np.bool_)


def _logic(name: str, build: Callable[[E.Expr, E.Expr], E.Expr]) -> None:
    def impl(ctx, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype != np.bool_ or b.dtype != np.bool_:
            raise ctx.error(f"{name} takes bool tensors, got {a.dtype} and {b.dtype}")
        return _ew(name, build, (a, b), np.bool_)

    impl.__name__ = impl.__qualname__ = f"{name.lower()}_7"
    impl.__doc__ = f"Logical {name} of two bool tensors with broadcasting."
    onnx_op(name, since=7)(impl)


_logic("And", lambda a, b: E.op("bitand", a, b))
_logic("Or", lambda a, b: E.op("bitor", a, b))
_logic("Xor", lambda a, b: E.op("ne", a, b))


def _bitwise(name: str, opname: str) -> None:
    def impl(ctx, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype != b.dtype:
            raise ctx.error(f"A is {a.dtype} but B is {b.dtype}; both must have the same type")
        return _ew(name, lambda p, q: E.op(opname, p, q), (a, b))

    impl.__name__ = impl.__qualname__ = f"{name.lower()}_18"
    impl.__doc__ = f"{name} of two integer (or bool) tensors with broadcasting."
    onnx_op(name, since=18)(impl)


_bitwise("BitwiseAnd", "bitand")
_bitwise("BitwiseOr", "bitor")
_bitwise("BitwiseXor", "bitxor")


@onnx_op("BitwiseNot", since=18)
def bitwisenot_18(x: np.ndarray) -> np.ndarray:
    if x.dtype == np.bool_:
        return _ew("Not", lambda a: E.op("not", a), (x,), np.bool_)
    return _ew("BitwiseNot", lambda a: E.op("invert", a), (x,))


@onnx_op("BitShift", since=11)
def bitshift_11(ctx, x: np.ndarray, y: np.ndarray, *, direction: str = None) -> np.ndarray:
    """x << y (LEFT) or x >> y (RIGHT); shifting by the bit width or more gives 0."""
    if isinstance(direction, bytes):
        direction = direction.decode()
    if direction not in ("LEFT", "RIGHT"):
        raise ctx.error(f"direction={direction!r}; expected 'LEFT' or 'RIGHT'")
    if x.dtype != y.dtype:
        raise ctx.error(f"X is {x.dtype} but Y is {y.dtype}; both must have the same type")
    fam = "shl" if direction == "LEFT" else "shr"
    return _ew(("BitShift", fam), lambda a, b: E.call(fam, a, b), (x, y))


@onnx_op("IsNaN", since=9)
def isnan_9(x: np.ndarray) -> np.ndarray:
    x = _widen_exotic(x)
    return _ew("IsNaN", lambda a: E.call("isnan", a, dtype=np.bool_), (x,), np.bool_)


@onnx_op("IsInf", since=10)
def isinf_10(x: np.ndarray, *, detect_negative: int, detect_positive: int) -> np.ndarray:
    """True at +inf (if detect_positive) and -inf (if detect_negative)."""
    x = _widen_exotic(x)
    if detect_negative and detect_positive:
        fam = "isinf"
    elif detect_positive:
        fam = "isposinf"
    elif detect_negative:
        fam = "isneginf"
    else:
        return np.zeros(x.shape, dtype=np.bool_)
    if x.dtype.kind in "iu":
        return np.zeros(x.shape, dtype=np.bool_)
    return _ew(("IsInf", fam), lambda a: E.call(fam, a, dtype=np.bool_), (x,), np.bool_)


@onnx_op("Where", since=9)
def where_9(ctx, condition: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """condition ? x : y with broadcasting over all three."""
    if x.dtype != y.dtype:
        raise ctx.error(f"X is {x.dtype} but Y is {y.dtype}; both must have the same type")
    if condition.dtype != np.bool_:
        raise ctx.error(f"condition must be bool, got {condition.dtype}")
    if x.dtype.kind not in "biuf" and x.dtype != np.dtype(ml_dtypes.bfloat16):
        return np.where(condition, x, y)
    return _ew("Where", lambda c, a, b: E.where(c, a, b), (condition, x, y), x.dtype)


# ---------------------------------------------------------------------------------------------
# Cast / CastLike
# ---------------------------------------------------------------------------------------------


def _native(dt: np.dtype) -> bool:
    """dtypes the generated kernels load and store directly (or via float32)."""
    return dt in _KERNEL_DTYPES


def _to_e8m0(x: np.ndarray, saturate: int, round_mode: str) -> np.ndarray:
    """float -> float8e8m0 (a biased power of two, no sign, no zero) by exponent bits.

    The exponent of |x| is rounded "up" (any mantissa bit set), "down" (dropped) or
    "nearest" (mantissa >= 1/2 of the binade); NaN -> NaN; infinity and overflow -> the
    largest value (2^127) when saturating, else NaN; below the smallest value (2^-127, zero
    included) -> 2^-127 when saturating, else NaN ("up" rounds values under 2^-127 up to it).
    """
    # (np.ascontiguousarray would turn a 0-d array into 1-d)
    bits = np.array(x, dtype=np.float32, order="C").view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.uint32)
    mant = bits & 0x7FFFFF
    special = exp == 0xFF
    is_nan = special & (mant != 0)
    sub = exp == 0  # zero and float32 subnormals (< 2^-126): value mant * 2^-149
    if round_mode == "up":
        exp = exp + ((mant != 0) & ~special & ~sub)
        # (2^-127, 2^-126) rounds up to 2^-126
        exp = np.where(sub & (mant > 0x400000), np.uint32(1), exp)
    elif round_mode == "nearest":
        exp = exp + ((mant >= 0x400000) & ~special & ~sub)
        exp = np.where(sub & (mant >= 0x600000), np.uint32(1), exp)
    out = np.where(exp >= 0xFF, np.uint32(0xFE if saturate else 0xFF), exp)
    # below E8M0_MIN (2^-127, mant 0x400000): E8M0_MIN when saturating, else NaN (spec
    # table); rounding up, only zero is below it ((0, 2^-127) rounds up to E8M0_MIN).
    too_small = sub & ((mant == 0) if round_mode == "up" else (mant < 0x400000))
    out = np.where(too_small, np.uint32(0x00 if saturate else 0xFF), out)
    out = np.where(is_nan, np.uint32(0xFF), out).astype(np.uint8)
    return out.view(ml_dtypes.float8_e8m0fnu)


def _float_to_string(x: np.ndarray) -> np.ndarray:
    """Floats as ONNX prints them: NaN / INF / -INF, finite values as Python's repr."""
    out = np.empty(x.shape, dtype=object)
    res = out.reshape(-1)
    for i, v in enumerate(x.reshape(-1).tolist()):
        if v != v:
            res[i] = "NaN"
        elif v in (float("inf"), float("-inf")):
            res[i] = "INF" if v > 0 else "-INF"
        else:
            res[i] = repr(v)
    return out


def _parse_strings(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    """Strings -> numbers through Python's float() (accepts NaN, INF, -INF, 1e3)."""
    vals = np.array([float(s) for s in x.reshape(-1).tolist()], dtype=np.float64)
    if dst.kind == "b":
        return (vals != 0).reshape(x.shape)
    return vals.astype(dst).reshape(x.shape)


def _saturate_float8(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    """Cast-19 saturate=1: out-of-range values and infinities become +-max."""
    xf = x.astype(np.float32)
    big = np.float32(ml_dtypes.finfo(dst).max)
    xf = np.where(np.isnan(xf), xf, np.clip(xf, -big, big))
    return xf.astype(dst)


def cast_array(
    ctx: Any, x: np.ndarray, dst: np.dtype, saturate: int, round_mode: str = "up"
) -> np.ndarray:
    """Cast's conversion of ``x`` to ``dst`` (saturation of float8/4/6 targets, e8m0 rounding,
    strings parsed and printed); shared with the quantization operators."""
    src = x.dtype
    if "e8m0" in dst.name and src != dst:
        if src.kind in "OUS":
            x = x.astype(object).astype(np.float64)
        return _to_e8m0(x.astype(np.float32), saturate, round_mode)
    if src == dst:
        return x.copy()
    if dst.kind == "O":
        if src.kind in "OUS":
            return x.astype(object)
        if src.kind in "iub":
            strs = [str(v) for v in x.reshape(-1).tolist()]
            return np.array(strs, dtype=object).reshape(x.shape)
        return _float_to_string(x if src.kind == "f" else x.astype(np.float64))
    if src.kind in "OUS":
        return _parse_strings(x, dst)
    if _native(src) and _native(dst):
        cdst = compute_dtype(dst)
        return _ew(("Cast", cdst), lambda a: E.cast(a, cdst), (x,), dst)
    # float8 / int4 and friends: ml_dtypes conversions
    if saturate and "float8" in dst.name and not (_native(src) and src.kind in "iub"):
        return _saturate_float8(x, dst)
    return x.astype(dst)


def _round_mode(ctx: Any, mode: Any) -> str:
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in ("up", "down", "nearest"):
        raise ctx.error(f"round_mode={mode!r}; expected 'up', 'down' or 'nearest'")
    return mode


@onnx_op("Cast", since=6)
def cast_6(ctx, x: np.ndarray, *, to: int = None) -> np.ndarray:
    """Convert to element type ``to`` (numpy astype semantics; strings parsed and printed)."""
    return cast_array(ctx, x, onnx_types.np_dtype(to), 1)


@onnx_op("Cast", since=19)
def cast_19(ctx, x: np.ndarray, *, saturate: int, to: int = None) -> np.ndarray:
    """As Cast-6, plus ``saturate`` for float8 targets (clamp out-of-range to the max)."""
    return cast_array(ctx, x, onnx_types.np_dtype(to), saturate)


@onnx_op("Cast", since=24)
def cast_24(ctx, x: np.ndarray, *, round_mode: str, saturate: int, to: int = None) -> np.ndarray:
    """As Cast-19, plus ``round_mode`` (how float8e8m0 targets round the exponent)."""
    return cast_array(ctx, x, onnx_types.np_dtype(to), saturate, _round_mode(ctx, round_mode))


@onnx_op("CastLike", since=15)
def castlike_15(ctx, x: np.ndarray, target_type: np.ndarray) -> np.ndarray:
    """Cast ``x`` to the element type of ``target_type``."""
    return cast_array(ctx, x, target_type.dtype, 1)


@onnx_op("CastLike", since=19)
def castlike_19(ctx, x: np.ndarray, target_type: np.ndarray, *, saturate: int) -> np.ndarray:
    return cast_array(ctx, x, target_type.dtype, saturate)


@onnx_op("CastLike", since=24)
def castlike_24(
    ctx, x: np.ndarray, target_type: np.ndarray, *, round_mode: str, saturate: int
) -> np.ndarray:
    return cast_array(ctx, x, target_type.dtype, saturate, _round_mode(ctx, round_mode))


# ---------------------------------------------------------------------------------------------
# Expressions for fused groups (onnxjit.passes.fuse_elementwise)
# ---------------------------------------------------------------------------------------------


class NotFusable(TypeError):
    """The op cannot be part of a generated kernel for these element types."""


# fusible_key -> (first registered version the builder serves, builder(attrs, *exprs) -> Expr).
# Builders mirror the registered implementations above (same helper families, same casts), so
# a fused group computes what the ops compute one by one; attribute values become constants.
_BUILDERS: dict[str, tuple[int, Callable[..., E.Expr]]] = {}


def fusible_key(domain: str, op_type: str) -> str:
    """The name a fused form is registered under: the op type for the standard domain,
    ``domain.op_type`` for another (onnxjit's own ops that pattern passes write)."""
    return op_type if domain in ("", "ai.onnx") else f"{domain}.{op_type}"


def fusible(op_type: str, since: int = 1):
    """Register the decorated builder as the fused form of ``op_type`` (see
    :func:`fusible_key`) from opset ``since``: it takes the node's attributes and its operand
    expressions and returns the result's expression, or raises NotFusable."""

    def deco(fn: Callable[..., E.Expr]) -> Callable[..., E.Expr]:
        _BUILDERS[op_type] = (since, fn)
        return fn

    return deco


def _float_only(*xs: E.Expr) -> None:
    if not all(_is_float(x) for x in xs):
        raise NotFusable("float operands only")


def _same_types(*xs: E.Expr) -> None:
    if any(x.dtype != xs[0].dtype for x in xs):
        raise NotFusable("operand types differ")


for _name, _build in _ARITH.items():

    def _arith_builder(attrs: dict, a: E.Expr, b: E.Expr, _b=_build) -> E.Expr:
        _same_types(a, b)
        return _b(a, b)

    fusible(_name, since=7)(_arith_builder)

fusible("Pow", since=7)(lambda attrs, x, y: _pow_expr(x, y))


@fusible("Mod", since=10)
def _mod_builder(attrs: dict, a: E.Expr, b: E.Expr) -> E.Expr:
    _same_types(a, b)
    fam = "fmod" if attrs.get("fmod") else "mod"
    return E.call(fam, a, b)


for _op, _since, _fam in _UNARY_FAMILIES:

    def _unary_builder(attrs: dict, x: E.Expr, _f=_fam) -> E.Expr:
        return E.call(_f, x)

    fusible(_op, since=_since)(_unary_builder)

fusible("Neg", since=6)(lambda attrs, x: E.op("neg", x))


# Float attributes a lone node's kernel takes as 0-d operands (see lower_node), so that a new
# attribute value compiles no new kernel; a fused group inlines them as constants.
_ATTR_OPERANDS: dict[str, tuple[str, ...]] = {"Clip": ("min", "max")}


def _attr_value(value: Any, dtype: np.dtype) -> E.Expr:
    """An attribute in an expression: as it is when lower_node made it an operand, else a
    constant of the compute type."""
    return value if isinstance(value, E.Expr) else E.const(value, dtype)


def _attr_activation(op_type: str, family: str, names: tuple[str, ...]) -> None:
    def build(attrs: dict, x: E.Expr) -> E.Expr:
        _float_only(x)
        return E.call(family, x, *[_attr_value(attrs[n], x.dtype) for n in names])

    fusible(op_type, since=6)(build)
    _ATTR_OPERANDS[op_type] = names


_attr_activation("HardSigmoid", "hardsigmoid", ("alpha", "beta"))
_attr_activation("LeakyRelu", "leakyrelu", ("alpha",))
_attr_activation("Elu", "elu", ("alpha",))
_attr_activation("Selu", "selu", ("alpha", "gamma"))
_attr_activation("Celu", "celu", ("alpha",))
_attr_activation("ThresholdedRelu", "thresholdedrelu", ("alpha",))
_attr_activation("Shrink", "shrink", ("lambd", "bias"))


@fusible("Gelu", since=20)
def _gelu_builder(attrs: dict, x: E.Expr) -> E.Expr:
    approximate = attrs.get("approximate") or "none"
    if isinstance(approximate, bytes):
        approximate = approximate.decode()
    if approximate not in ("none", "tanh"):
        raise NotFusable(f"approximate={approximate!r}")
    return E.call("gelu_tanh" if approximate == "tanh" else "gelu", x)


@fusible("onnxjit.Gelu")
def _internal_gelu_builder(attrs: dict, x: E.Expr, bias: E.Expr | None = None) -> E.Expr:
    # onnxjit's Gelu (gelu_fusion's node): the Gelu of x + bias
    _float_only(x)
    if bias is not None:
        _same_types(x, bias)
        x = _add(x, bias)
    return _gelu_builder(attrs, x)


def generated_gelu(x: np.ndarray, approximate: str, bias: np.ndarray | None = None) -> np.ndarray:
    """GELU of the floating-point array ``x`` (+ ``bias`` of the same dtype, broadcast as an
    Add) in one generated kernel (onnxjit's internal Gelu op); ``approximate`` is "none" (erf
    form) or "tanh"."""
    attrs = {"approximate": approximate}
    key = ("onnxjit.Gelu", approximate)
    if bias is None:
        return _ew(key, lambda v: _internal_gelu_builder(attrs, v), (x,))
    return _ew(key, lambda v, b: _internal_gelu_builder(attrs, v, b), (x, bias))


@fusible("Clip", since=6)
def _clip_builder(attrs: dict, x: E.Expr, lo: E.Expr | None = None, hi: E.Expr | None = None):
    # Clip-11 bounds reach a fused group only as constants (see fuse_elementwise); Clip-6
    # has them as attributes.
    if "min" in attrs and lo is None and hi is None:
        lo, hi = _attr_value(attrs["min"], x.dtype), _attr_value(attrs["max"], x.dtype)
    for b in (lo, hi):
        if b is not None and b.dtype != x.dtype:
            raise NotFusable("bound type differs")
    if lo is not None:
        x = E.call("clip_lo", x, lo)
    if hi is not None:
        x = E.call("clip_hi", x, hi)
    return x


def _variadic_builder(op_type: str, family: str) -> None:
    def build(attrs: dict, *xs: E.Expr) -> E.Expr:
        if len(xs) < 2:
            raise NotFusable("one operand")
        _same_types(*xs)
        acc = xs[0]
        for x in xs[1:]:
            acc = E.op("add", acc, x) if family == "add" else E.call(family, acc, x)
        if op_type == "Mean":
            acc = E.op("truediv", acc, E.const(len(xs), acc.dtype))
        return acc

    fusible(op_type, since=8)(build)


for _op, _fam in (("Max", "max"), ("Min", "min"), ("Sum", "add"), ("Mean", "add")):
    _variadic_builder(_op, _fam)


for _op, _since, _name in (
    ("Equal", 7, "eq"),
    ("Less", 7, "lt"),
    ("Greater", 7, "gt"),
    ("LessOrEqual", 12, "le"),
    ("GreaterOrEqual", 12, "ge"),
):

    def _compare_builder(attrs: dict, a: E.Expr, b: E.Expr, _n=_name) -> E.Expr:
        _same_types(a, b)
        return E.op(_n, a, b)

    fusible(_op, since=_since)(_compare_builder)


def _bool_only(*xs: E.Expr) -> None:
    if not all(x.dtype == E.BOOL for x in xs):
        raise NotFusable("bool operands only")


fusible("Not")(lambda attrs, x: (_bool_only(x), E.op("not", x))[1])
fusible("And", since=7)(lambda attrs, a, b: (_bool_only(a, b), E.op("bitand", a, b))[1])
fusible("Or", since=7)(lambda attrs, a, b: (_bool_only(a, b), E.op("bitor", a, b))[1])
fusible("Xor", since=7)(lambda attrs, a, b: (_bool_only(a, b), E.op("ne", a, b))[1])
for _op, _name in (("BitwiseAnd", "bitand"), ("BitwiseOr", "bitor"), ("BitwiseXor", "bitxor")):
    fusible(_op, since=18)(lambda attrs, a, b, _n=_name: (_same_types(a, b), E.op(_n, a, b))[1])


@fusible("BitwiseNot", since=18)
def _bitwise_not_builder(attrs: dict, x: E.Expr) -> E.Expr:
    return E.op("not", x) if x.dtype == E.BOOL else E.op("invert", x)


@fusible("BitShift", since=11)
def _bitshift_builder(attrs: dict, x: E.Expr, y: E.Expr) -> E.Expr:
    _same_types(x, y)
    direction = attrs.get("direction")
    if isinstance(direction, bytes):
        direction = direction.decode()
    if direction not in ("LEFT", "RIGHT"):
        raise NotFusable(f"direction={direction!r}")
    return E.call("shl" if direction == "LEFT" else "shr", x, y)


@fusible("IsNaN", since=9)
def _isnan_builder(attrs: dict, x: E.Expr) -> E.Expr:
    _float_only(x)
    return E.call("isnan", x, dtype=np.bool_)


@fusible("IsInf", since=10)
def _isinf_builder(attrs: dict, x: E.Expr) -> E.Expr:
    _float_only(x)
    neg, pos = attrs.get("detect_negative", 1), attrs.get("detect_positive", 1)
    if not (neg or pos):
        raise NotFusable("detects nothing")
    fam = "isinf" if neg and pos else ("isposinf" if pos else "isneginf")
    return E.call(fam, x, dtype=np.bool_)


@fusible("Where", since=9)
def _where_builder(attrs: dict, c: E.Expr, a: E.Expr, b: E.Expr) -> E.Expr:
    _same_types(a, b)
    if c.dtype != E.BOOL:
        raise NotFusable("condition is not bool")
    return E.where(c, a, b)


def fused_expr(
    op_type: str,
    since: int,
    attrs: dict[str, Any],
    args: list[E.Expr | None],
    stored: list[np.dtype | None],
) -> tuple[E.Expr, np.dtype]:
    """The expression and stored dtype of one op inside a fused group.

    ``op_type`` is the op's :func:`fusible_key`; ``args`` are the operand expressions (None
    for an omitted optional input) and ``stored`` their stored dtypes (float16/bfloat16
    operands are float32 expressions). Raises
    :class:`NotFusable` when the op, its version or these types cannot be generated; the group
    then runs its ops one by one, which also gives the ops' own error messages.
    """
    if op_type in ("Cast", "CastLike"):
        dst = (
            onnx_types.np_dtype(attrs["to"]) if op_type == "Cast" else stored[1]  # type: ignore[arg-type]
        )
        if dst is None or stored[0] is None or not (_native(stored[0]) and _native(dst)):
            raise NotFusable("cast outside the kernel types")
        return E.cast(args[0], compute_dtype(dst)), dst  # type: ignore[arg-type]
    entry = _BUILDERS.get(op_type)
    if entry is None or since < entry[0]:
        raise NotFusable(f"{op_type}-{since} has no fused form")
    if any(s is not None and s not in _KERNEL_DTYPES for s in stored):
        raise NotFusable("operand outside the kernel types")
    while args and args[-1] is None:
        args = args[:-1]
    e = entry[1](attrs, *args)
    first = stored[1] if op_type == "Where" else stored[0]
    if first is not None and compute_dtype(first) == e.dtype:
        return e, first
    return e, e.dtype


def fusible_ops() -> dict[str, int]:
    """Op types a fused group may contain (as :func:`fusible_key` names them), with the first
    version that can (Cast included)."""
    out = {k: v[0] for k, v in _BUILDERS.items()}
    out.update(Cast=6, CastLike=15)
    return out


# -- lowering ----------------------------------------------------------------------------------
def lower_node(lc: LowerContext) -> Bound | None:
    """An elementwise node as one generated kernel: its expression from the same builder a
    fused group uses (:func:`fused_expr`), over its present inputs. None (the node keeps its
    implementation, which also gives its errors) for types or versions the builders do not
    serve, and for anything the implementation treats specially."""
    node = lc.node
    key = fusible_key(node.domain, node.op_type)
    specs = list(lc.inputs)
    while specs and specs[-1] is None:
        specs.pop()
    if any(s is not None and s.kind != TENSOR for s in specs):
        return None
    if key == "CastLike":
        specs = specs[:1] + [None]  # the target is read for its type only
        stored = [lc.inputs[0].dtype, lc.inputs[1].dtype]
    else:
        stored = [s.dtype if s is not None else None for s in specs]
    if key == "Clip" and node.since_version >= 11:
        x = specs[0]
        for k in (1, 2):
            b = specs[k] if k < len(specs) else None
            if b is not None and (b.size != 1 or b.dtype != x.dtype):
                return None  # the implementation's error
            if b is not None:
                specs[k] = Spec(TENSOR, b.dtype, ())  # a scalar bound, whatever its rank
    operands: list[Spec] = []
    positions: list[int] = []
    args: list[E.Expr | None] = []
    for k, s in enumerate(specs):
        if s is None:
            args.append(None)
            continue
        args.append(E.inp(len(operands), compute_dtype(s.dtype)))
        operands.append(s)
        positions.append(k)
    if not operands:
        return None
    attrs = dict(lc.attrs)
    extra: list[np.ndarray] = []
    names = _ATTR_OPERANDS.get(key, ())
    if names and all(n in attrs for n in names) and operands[0].dtype.kind == "f":
        cd = compute_dtype(operands[0].dtype)
        for n in names:
            attrs[n] = E.inp(len(operands) + len(extra), cd)
            extra.append(np.array(lc.attrs[n], cd))
    try:
        expr, out_dtype = fused_expr(key, node.since_version, attrs, args, stored)
    except NotFusable:
        return None
    specs_all = operands + [Spec(TENSOR, a.dtype, ()) for a in extra]
    return lc.backend.elementwise([expr], specs_all, [out_dtype], positions + extra)


def _register_lowerings() -> None:
    """Every elementwise implementation of this module lowers through :func:`lower_node`."""
    seen = set()
    for impls in implementations().values():
        for impl in impls:
            fn = impl.fn
            if fn.__module__ == __name__ and fn not in seen and lowering_of(fn) is None:
                seen.add(fn)
                lowers(fn)(lower_node)


_register_lowerings()
