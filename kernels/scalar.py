"""Exact ONNX scalar semantics, written once.

Every helper is a small ``@njit(inline="always")`` function that uses only operators and
``math``, so the same body compiles for the CPU, for CUDA and for the CUDA simulator. Generated
elementwise kernels (``onnxjit.codegen.elementwise``) call these helpers by name.

Naming: a helper exists in up to four flavours and the code generator picks the first that
exists for the operand type:

* ``<name>_f32`` / ``<name>_f64``: floating point, one per precision. Their constants are
  typed (``np.float32(0.5)``) because a bare ``0.5`` would promote a float32 chain to float64.
  They are written once (a ``_f`` body reading the constants ``ZERO``, ``ONE``... as globals)
  and specialised by :func:`_per_precision`, which rebinds those globals.
* ``<name>_uint``: unsigned integers.
* ``<name>_int``: signed integers (and unsigned, if there is no ``_uint`` flavour).
* ``<name>``: any type.

Numba's CPU target types ``math.floor``/``math.ceil`` as int (Python semantics) and lacks
``math.fmod``, so those three use the numpy scalar functions, which keep the float type.

exp, log, log1p, tanh, sigmoid and erf of float32 (and float64, except erf), and atan, asin
and acos of float32, come from :mod:`onnxjit.kernels.vecmath`: plain arithmetic instead of
libm calls, so that LLVM vectorises the generated loops (ulp budgets in
``vecmath.ULP_BUDGET``). The generic ``exp``/``log``/``tanh``/``atan``... below (libm) remain
for any other type.

Integer helpers compute in Numba's promoted integer type (int64/uint64); the generator casts
the result back to the operand type, which wraps exactly like numpy.
"""

from __future__ import annotations

import math
import types

import numpy as np
from llvmlite import ir
from numba import types as nbtypes
from numba.extending import intrinsic

from . import vecmath as _vm
from ._jit import njit
from .vecmath import (  # noqa: F401  (re-exported: the code generator picks these by name)
    acos_f32,
    asin_f32,
    atan_f32,
    erf_f32,
    erf_f64,
    exp_f32,
    exp_f64,
    log1p_f32,
    log1p_f64,
    log_f32,
    log_f64,
    maxnum,
    sigmoid_f32,
    sigmoid_f64,
    tanh_f32,
    tanh_f64,
)

# ---------------------------------------------------------------------------------------------
# Per-precision specialisation of float helpers
# ---------------------------------------------------------------------------------------------

# The constants a float body may read; each precision gets its own typed copies.
_CONSTS = {
    "ZERO": 0.0,
    "HALF": 0.5,
    "ONE": 1.0,
    "TWO": 2.0,
    "THREE": 3.0,
    "SIXTH": 1.0 / 6.0,
}

_F32_GLOBALS = {k: np.float32(v) for k, v in _CONSTS.items()}
_F64_GLOBALS = {k: np.float64(v) for k, v in _CONSTS.items()}
# The vectorisable transcendental functions (kernels/vecmath.py) a float body may call: plain
# arithmetic instead of libm calls, so that loops over these helpers are SIMD-vectorised.
_F32_GLOBALS.update(
    EXP=_vm.exp_f32, EXPM1=_vm.expm1_nonpos_f32, LOG1P=_vm.log1p_f32, TANH=_vm.tanh_f32
)
_F64_GLOBALS.update(
    EXP=_vm.exp_f64, EXPM1=_vm.expm1_nonpos_f64, LOG1P=_vm.log1p_f64, TANH=_vm.tanh_f64
)


def _per_precision(body):
    """Compile ``body`` twice, with float32 and float64 globals; returns (f32, f64).

    The globals are the typed constants (``ZERO``...) and the per-precision vecmath functions
    (``EXP``, ``EXPM1`` (arguments <= 0 only), ``LOG1P``, ``TANH``).
    """
    out = []
    for suffix, consts in (("f32", _F32_GLOBALS), ("f64", _F64_GLOBALS)):
        g = dict(body.__globals__)
        g.update(consts)
        name = body.__name__[1:-2] + "_" + suffix  # "_erf_f" -> "erf_f32"
        fn = types.FunctionType(body.__code__, g, name, body.__defaults__, body.__closure__)
        # A distinct qualname keeps Numba's on-disk cache entries of the two flavours apart.
        fn.__qualname__ = name
        fn.__module__ = body.__module__
        fn.__doc__ = body.__doc__
        out.append(njit(inline="always")(fn))
    return tuple(out)


# Placeholders so that linters know the names; _per_precision rebinds them per precision.
ZERO = HALF = ONE = TWO = THREE = SIXTH = None
EXP = EXPM1 = LOG1P = TANH = None


# ---------------------------------------------------------------------------------------------
# Integer arithmetic
# ---------------------------------------------------------------------------------------------


@njit(inline="always")
def div_int(a, b):
    """Signed integer Div: truncates toward zero; x/0 -> 0 (numpy's result); MIN/-1 wraps."""
    if b == 0:
        return a - a
    if b == -1:
        return -a
    q = a // b  # floors
    if q * b != a and ((a < 0) != (b < 0)):
        q += 1
    return q


@njit(inline="always")
def div_uint(a, b):
    """Unsigned integer Div; x/0 -> 0."""
    if b == 0:
        return a - a
    return a // b


@njit(inline="always")
def mod_int(a, b):
    """Mod fmod=0 on signed ints: the result has the divisor's sign (Python %); x%0 -> 0."""
    if b == 0 or b == -1:
        return a - a
    return a % b


@njit(inline="always")
def mod_uint(a, b):
    """Mod on unsigned ints (both fmod flavours agree); x%0 -> 0."""
    if b == 0:
        return a - a
    return a % b


@njit(inline="always")
def fmod_int(a, b):
    """Mod fmod=1 on signed ints: C's %, the result has the dividend's sign; x%0 -> 0."""
    if b == 0 or b == -1:
        return a - a
    r = a % b
    if r != 0 and ((r < 0) != (a < 0)):
        r -= b
    return r


@njit(inline="always")
def fmod_uint(a, b):
    if b == 0:
        return a - a
    return a % b


@njit(inline="always")
def ipow_int(a, b):
    """Integer Pow by repeated squaring, wrapping on overflow like numpy.

    A negative exponent gives the truncated real result: 1 for a == 1, +-1 for a == -1, else 0
    (numpy refuses negative integer powers; ONNX leaves them undefined).
    """
    if b < 0:
        if a == 1:
            return a
        if a == -1:
            return a if (b % 2) != 0 else -a
        return a - a
    result = a - a + 1
    base = a
    e = b
    while e > 0:
        if e & 1:
            result = result * base
        base = base * base
        e >>= 1
    return result


@njit(inline="always")
def shl_int(a, b):
    """BitShift LEFT; shifting by the bit width or more gives 0 (numpy's left_shift)."""
    if b >= 64 or b < 0:
        return a - a
    return a << b


@njit(inline="always")
def shr_uint(a, b):
    """BitShift RIGHT on unsigned ints; shifting by the bit width or more gives 0."""
    if b >= 64 or b < 0:
        return a - a
    return a >> b


@njit(inline="always")
def shr_int(a, b):
    """BitShift RIGHT on signed ints: arithmetic shift, saturating to 0 or -1."""
    if b >= 64 or b < 0:
        return a - a if a >= 0 else a - a - 1
    return a >> b


@njit(inline="always")
def absval_uint(a):
    return a


@njit(inline="always")
def absval_int(a):
    """Abs of a signed int; abs(MIN) wraps to MIN after the cast back, like numpy."""
    return -a if a < 0 else a


@njit(inline="always")
def sign_int(a):
    return (a > 0) - (a < 0)


@njit(inline="always")
def sign_uint(a):
    return 1 if a > 0 else 0


@njit(inline="always")
def max_int(a, b):
    return a if a > b else b


@njit(inline="always")
def min_int(a, b):
    return a if a < b else b


@njit(inline="always")
def relu_int(a):
    return a if a > 0 else a - a


# ---------------------------------------------------------------------------------------------
# Floating point
# ---------------------------------------------------------------------------------------------


def _max_f(a, b):
    """Max with NaN propagation (np.maximum): a NaN in either operand gives NaN.

    Equal operands (+0 and -0) give the first, as numpy and the reference evaluator do.
    """
    return a if (a >= b or a != a) else b


def _min_f(a, b):
    """Min with NaN propagation (np.minimum); equal operands (+0, -0) give the first."""
    return a if (a <= b or a != a) else b


def _mod_f(a, b):
    """Mod fmod=0 on floats: np.mod semantics, the result has the divisor's sign."""
    r = np.fmod(a, b)
    if r != ZERO:
        if (r < ZERO) != (b < ZERO):
            r = r + b
    else:
        r = math.copysign(ZERO, b)
    return r


def _fmod_f(a, b):
    """Mod fmod=1 on floats: C fmod, the result has the dividend's sign."""
    return np.fmod(a, b)


def _round_f(x):
    """Round half to even (np.round); inf and NaN pass through."""
    r = np.floor(x)
    d = x - r
    if d > HALF:
        r = r + ONE
    elif d == HALF and np.floor(r * HALF) != r * HALF:
        # a tie rounds up only when r is odd (r/2 is not a whole number)
        r = r + ONE
    # a negative value that rounds to zero gives -0.0, as np.round does
    return math.copysign(r, x)


def _sign_f(x):
    """Sign: -1, 0 or 1; NaN stays NaN."""
    if x > ZERO:
        return ONE
    if x < ZERO:
        return -ONE
    return x * ZERO


def _relu_f(x):
    """max(x, 0) with NaN propagation."""
    return ZERO if x < ZERO else x


def _reciprocal_f(x):
    return ONE / x


# Sigmoid and Erf are vecmath's sigmoid_f32/_f64 and erf_f32/_f64, imported above.


def _softplus_f(x):
    """log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|)); vectorisable."""
    m = x if x > ZERO else ZERO
    return m + LOG1P(EXP(-abs(x)))


def _softsign_f(x):
    return x / (ONE + abs(x))


def _hardsigmoid_f(x, alpha, beta):
    """max(0, min(1, alpha*x + beta))."""
    v = alpha * x + beta
    if v > ONE:
        v = ONE
    return ZERO if v < ZERO else v


def _hardswish_f(x):
    """x * max(0, min(1, x/6 + 1/2))."""
    v = x * SIXTH + HALF
    if v > ONE:
        v = ONE
    if v < ZERO:
        v = ZERO
    return x * v


def _leakyrelu_f(x, alpha):
    return x * alpha if x < ZERO else x


def _prelu_f(x, slope):
    return x * slope if x < ZERO else x


# ELU-family bodies: EXPM1 takes arguments <= 0 (vectorisable); lanes on the other side of
# the select compute a value that is thrown away.
def _elu_f(x, alpha):
    return alpha * EXPM1(x) if x < ZERO else x


def _selu_f(x, alpha, gamma):
    return gamma * (alpha * EXPM1(x)) if x <= ZERO else gamma * x


def _celu_f(x, alpha):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)). For x < 0, x / alpha <= 0 when
    alpha > 0 (EXPM1's domain; alpha is loop-invariant, so LLVM can take the test out of
    the loop); a negative alpha keeps libm's expm1."""
    u = x / alpha
    return alpha * (EXPM1(u) if alpha > ZERO else math.expm1(u)) if x < ZERO else x


def _thresholdedrelu_f(x, alpha):
    return x if x > alpha else ZERO


def _mish_f(x):
    """x * tanh(softplus(x)); vectorisable."""
    m = x if x > ZERO else ZERO
    return x * TANH(m + LOG1P(EXP(-abs(x))))


def _shrink_f(x, lambd, bias):
    if x < -lambd:
        return x + bias
    if x > lambd:
        return x - bias
    return ZERO


def _isinf_f(x):
    return math.isinf(x)


def _isposinf_f(x):
    return x > ZERO and math.isinf(x)


def _isneginf_f(x):
    return x < ZERO and math.isinf(x)


def _isnan_f(x):
    return x != x


max_f32, max_f64 = _per_precision(_max_f)
min_f32, min_f64 = _per_precision(_min_f)
mod_f32, mod_f64 = _per_precision(_mod_f)
fmod_f32, fmod_f64 = _per_precision(_fmod_f)
round_f32, round_f64 = _per_precision(_round_f)
sign_f32, sign_f64 = _per_precision(_sign_f)
relu_f32, relu_f64 = _per_precision(_relu_f)
reciprocal_f32, reciprocal_f64 = _per_precision(_reciprocal_f)
softplus_f32, softplus_f64 = _per_precision(_softplus_f)
softsign_f32, softsign_f64 = _per_precision(_softsign_f)
hardsigmoid_f32, hardsigmoid_f64 = _per_precision(_hardsigmoid_f)
hardswish_f32, hardswish_f64 = _per_precision(_hardswish_f)
leakyrelu_f32, leakyrelu_f64 = _per_precision(_leakyrelu_f)
prelu_f32, prelu_f64 = _per_precision(_prelu_f)
elu_f32, elu_f64 = _per_precision(_elu_f)
selu_f32, selu_f64 = _per_precision(_selu_f)
celu_f32, celu_f64 = _per_precision(_celu_f)
thresholdedrelu_f32, thresholdedrelu_f64 = _per_precision(_thresholdedrelu_f)
mish_f32, mish_f64 = _per_precision(_mish_f)
# Gelu, erf form: vecmath's (float32 without the 1 + erf cancellation, see its docstring)
gelu_f32, gelu_f64 = _vm.gelu_f32, _vm.gelu_f64
# Gelu, tanh form: vecmath's (float32 as x / (1 + e^(-2u)): one exp, one division)
gelu_tanh_f32, gelu_tanh_f64 = _vm.gelu_tanh_f32, _vm.gelu_tanh_f64
shrink_f32, shrink_f64 = _per_precision(_shrink_f)
isinf_f32, isinf_f64 = _per_precision(_isinf_f)
isposinf_f32, isposinf_f64 = _per_precision(_isposinf_f)
isneginf_f32, isneginf_f64 = _per_precision(_isneginf_f)
isnan_f32, isnan_f64 = _per_precision(_isnan_f)


# ---------------------------------------------------------------------------------------------
# Any type
# ---------------------------------------------------------------------------------------------


@njit(inline="always")
def prelu_int(x, slope):
    return x * slope if x < 0 else x


@njit(inline="always")
def clip_lo(x, lo):
    """max(x, lo); a NaN x stays NaN."""
    return lo if x < lo else x


@njit(inline="always")
def clip_hi(x, hi):
    """min(x, hi); a NaN x stays NaN."""
    return hi if x > hi else x


@njit(inline="always")
def shrink_int(x, lambd, bias):
    if x < -lambd:
        return x + bias
    if x > lambd:
        return x - bias
    return x - x


# ---------------------------------------------------------------------------------------------
# Float unary functions (the math function keeps float32 as float32)
# ---------------------------------------------------------------------------------------------


@njit(inline="always")
def floor(x):
    return np.floor(x)


@njit(inline="always")
def ceil(x):
    return np.ceil(x)


@njit(inline="always")
def sqrt(x):
    return math.sqrt(x)


@njit(inline="always")
def exp(x):
    return math.exp(x)


@njit(inline="always")
def log(x):
    return math.log(x)


@njit(inline="always")
def sin(x):
    return math.sin(x)


@njit(inline="always")
def cos(x):
    return math.cos(x)


@njit(inline="always")
def tan(x):
    return math.tan(x)


@njit(inline="always")
def asin(x):
    return math.asin(x)


@njit(inline="always")
def acos(x):
    return math.acos(x)


@njit(inline="always")
def atan(x):
    return math.atan(x)


@njit(inline="always")
def sinh(x):
    return math.sinh(x)


@njit(inline="always")
def cosh(x):
    return math.cosh(x)


@njit(inline="always")
def tanh(x):
    return math.tanh(x)


@njit(inline="always")
def asinh(x):
    return math.asinh(x)


@njit(inline="always")
def acosh(x):
    return math.acosh(x)


@njit(inline="always")
def atanh(x):
    return math.atanh(x)


@njit(inline="always")
def absval(x):
    """abs for floats (clears the sign of -0.0 and NaN like numpy)."""
    return abs(x)


@njit(inline="always")
def fpow(a, b):
    """Float Pow (same float type on both sides)."""
    return a**b


# ---------------------------------------------------------------------------------------------
# float16 / bfloat16 storage: bit conversions to and from float32
# ---------------------------------------------------------------------------------------------
# Numba cannot do float16 arithmetic on the CPU (and knows nothing of bfloat16), so generated
# kernels see narrow tensors as uint16 arrays, widen each element to float32 in a register,
# compute, and narrow on store. Every conversion is exact where it can be (widening) and rounds
# to nearest, ties to even, where it cannot; NaN stays NaN (quiet, sign kept), infinities and
# subnormals are handled, and finite values past the largest one round to infinity, as numpy
# and ml_dtypes do. Where the CPU converts in hardware (x86 with F16C, AArch64), the conversion is
# LLVM's ``fpext``/``fptrunc`` of ``half``: one instruction per vector, which the loop vectoriser
# keeps in the hot loop. Elsewhere it is the integer-only code below (no libm calls, so LLVM
# can still vectorise). The hardware path also keeps compile times short: a float16 kernel that
# rounds after every node (the unfused form) inlines the conversions dozens of times per loop
# body, and the integer code made LLVM slow over it (bench/NOTES.md, issue 43 third session).


def _f16_to_f32_soft(h):
    """float16 bits (uint16) -> float32, exact (integer operations only)."""
    u = np.uint32(h)
    sign = (u & np.uint32(0x8000)) << np.uint32(16)
    em = u & np.uint32(0x7FFF)
    e = em >> np.uint32(10)
    if e == np.uint32(0x1F):
        # inf / NaN: all-ones exponent, mantissa moved up (a NaN is made quiet)
        m = (em & np.uint32(0x3FF)) << np.uint32(13)
        if m != np.uint32(0):
            m |= np.uint32(0x400000)
        bits = sign | np.uint32(0x7F800000) | m
        return np.uint32(bits).view(np.float32)
    if e == np.uint32(0):
        # zero or subnormal: mantissa * 2^-24, exact in float32
        mag = np.float32(em) * np.float32(5.960464477539063e-08)
        return -mag if sign else mag
    # normal: rebias the exponent by 127 - 15 = 112
    bits = sign | ((em << np.uint32(13)) + np.uint32(0x38000000))
    return np.uint32(bits).view(np.float32)


def _f32_to_f16_soft(x):
    """float32 -> float16 bits (uint16), round to nearest even (integer operations only)."""
    u = np.float32(x).view(np.uint32)
    sign = (u >> np.uint32(16)) & np.uint32(0x8000)
    a = u & np.uint32(0x7FFFFFFF)
    if a >= np.uint32(0x477FF000):
        # inf, NaN, or a finite value >= 65520 (which rounds to inf)
        if a > np.uint32(0x7F800000):
            return np.uint16(sign | np.uint32(0x7E00) | ((a >> np.uint32(13)) & np.uint32(0x3FF)))
        return np.uint16(sign | np.uint32(0x7C00))
    if a >= np.uint32(0x38800000):
        # normal in float16 (>= 2^-14): add the rounding bias (ties go to the even result),
        # drop 13 mantissa bits and rebias the exponent; a mantissa carry bumps the exponent.
        r = (a + np.uint32(0xFFF) + ((a >> np.uint32(13)) & np.uint32(1))) >> np.uint32(13)
        return np.uint16(sign | (r - np.uint32(0x1C000)))
    if a <= np.uint32(0x33000000):
        # |x| <= 2^-25 (half the smallest subnormal): rounds to zero (the tie goes to even 0)
        return np.uint16(sign)
    # float16 subnormal: mantissa with its implicit bit, shifted to units of 2^-24
    m = (a & np.uint32(0x7FFFFF)) | np.uint32(0x800000)
    shift = np.uint32(126) - (a >> np.uint32(23))
    r = m >> shift
    rem = m & ((np.uint32(1) << shift) - np.uint32(1))
    half = np.uint32(1) << (shift - np.uint32(1))
    if rem > half or (rem == half and (r & np.uint32(1)) != np.uint32(0)):
        r += np.uint32(1)
    return np.uint16(sign | r)


def _hardware_half(context) -> bool:
    """Whether the target LLVM compiles for converts float16 in hardware (no libcall)."""
    features = context.codegen()._tm_features.split(",")
    arch = context.codegen()._tm.triple.split("-")[0]
    return arch in ("aarch64", "arm64") or (arch == "x86_64" and "+f16c" in features)


@intrinsic
def _f16_bits_to_f32(typingctx, h):
    if not isinstance(h, nbtypes.Integer):
        return None
    sig = nbtypes.float32(h)

    def codegen(context, builder, sig, args):
        if not _hardware_half(context):
            return context.compile_internal(builder, _f16_to_f32_soft, sig, args)
        bits = context.cast(builder, args[0], sig.args[0], nbtypes.uint16)
        return builder.fpext(builder.bitcast(bits, ir.HalfType()), ir.FloatType())

    return sig, codegen


@intrinsic
def _f32_to_f16_bits(typingctx, x):
    if not isinstance(x, (nbtypes.Float, nbtypes.Integer)):
        return None
    sig = nbtypes.uint16(x)

    def codegen(context, builder, sig, args):
        if not _hardware_half(context):
            return context.compile_internal(builder, _f32_to_f16_soft, sig, args)
        value = context.cast(builder, args[0], sig.args[0], nbtypes.float32)
        return builder.bitcast(builder.fptrunc(value, ir.HalfType()), ir.IntType(16))

    return sig, codegen


@njit(inline="always")
def f16_to_f32(h):
    """float16 bits (uint16) -> float32, exact."""
    return _f16_bits_to_f32(h)


@njit(inline="always")
def f32_to_f16(x):
    """float32 -> float16 bits (uint16), round to nearest even."""
    return _f32_to_f16_bits(x)


@njit(inline="always")
def bf16_to_f32(h):
    """bfloat16 bits (uint16) -> float32: the top half of the float32 bits, exact."""
    return np.uint32(np.uint32(h) << np.uint32(16)).view(np.float32)


@njit(inline="always")
def f32_to_bf16(x):
    """float32 -> bfloat16 bits (uint16), round to nearest even; NaN -> quiet NaN."""
    u = np.float32(x).view(np.uint32)
    if (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        return np.uint16((u >> np.uint32(16)) | np.uint32(0x40))
    # finite values that round past the largest bfloat16 carry into the inf pattern
    return np.uint16(
        (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    )


@njit(inline="always")
def f64_to_f32_odd(x):
    """float64 -> float32 rounded to odd (truncate, then set the last bit if inexact).

    Rounding to odd first and to nearest even second equals one direct rounding when the
    intermediate has at least 2p + 2 bits (24 >= 2*11 + 2 for float16, 2*8 + 2 for
    bfloat16), so float64 -> narrow goes through this without double-rounding errors.
    """
    f = np.float32(x)
    if f != f:
        return f
    # rounded away from zero (maybe to inf): step the magnitude back by one unit. Written
    # without reassignment: Numba's inliner rejects a variable defined twice.
    t = np.uint32(f.view(np.uint32) - np.uint32(abs(np.float64(f)) > abs(x)))
    odd = np.uint32(np.float64(t.view(np.float32)) != x)
    return np.uint32(t | odd).view(np.float32)


@njit(inline="always")
def f64_to_f16(x):
    """float64 -> float16 bits (uint16), round to nearest even."""
    return f32_to_f16(f64_to_f32_odd(x))


@njit(inline="always")
def f64_to_bf16(x):
    """float64 -> bfloat16 bits (uint16) the way ml_dtypes and onnxruntime do it.

    They round to float32 first and then to bfloat16 (both to nearest even), which differs
    from one direct rounding for about 1 value in 150 that lies just off a bfloat16 midpoint.
    We match them, since they are the reference implementations ONNX models are checked
    against; ``f32_to_bf16(f64_to_f32_odd(x))`` would be the single correctly rounded result.
    """
    return f32_to_bf16(np.float32(x))
