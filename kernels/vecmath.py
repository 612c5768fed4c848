"""Vectorisable exp, log, log1p, tanh, sigmoid, erf and GELU (erf and tanh forms) for float32 and
float64, and expm1 (x <= 0), atan, asin and acos for float32.

Numba lowers ``math.exp`` and friends to one libm call per element, and a loop with a call in it
is never vectorised by LLVM. The functions here use only arithmetic, comparisons (which LLVM
turns into selects) and integer views of the float bits, so a loop such as
``for i in range(n): y[i] = exp_f32(x[i])`` compiles to SIMD code (AVX2 / AVX-512 on x86).

Every public function is ``@njit(inline="always")`` and comes in a float32 flavour (typed
float32 constants throughout, so no value is promoted to float64) and a float64 flavour. They use
only operators and numpy scalar constructors / scalar ``view``, as :mod:`onnxjit.kernels.scalar`
helpers must. Bodies are written in single-assignment style because Numba's inliner rejects a
variable that is assigned twice.

Method (all coefficients were fitted for this module: Chebyshev / Lawson near-minimax fits made
with mpmath; tests/test_vecmath.py checks each function's error over dense grids):

* exp: k = round(x / ln 2) with the 1.5 * 2^p "shifter" (no float -> int conversion, so NaN
  and inf inputs cannot create poison values), r = x - k ln 2 in two parts (Cody-Waite),
  e^r = 1 + r + r^2 P(r) on |r| <= ln2 / 2, and 2^k built by shifting k into the exponent
  field. 2^k is applied as two factors 2^(k//2) * 2^(k - k//2) so that results in the
  subnormal range are rounded once and results just below the overflow threshold do not
  overflow early. **Subnormal results are produced (not flushed).** x above the overflow
  threshold gives +inf, x below the underflow threshold gives +0, NaN gives NaN.
* log: x = 2^e m with m in [sqrt(1/2), sqrt(2)) taken from the bits (subnormal x are scaled by
  2^23 / 2^52 first), f = m - 1, s = f / (2 + f) and
  log(1 + f) = f - f^2/2 + s (f^2/2 + R(s^2)) with R fitted; e ln 2 is added in two parts.
  log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN gives NaN.
* log1p: u = 1 + x rounded, the rounding error d of that sum recovered exactly (TwoSum), and
  log1p(x) = log(u) + d / u. log1p(-1) = -inf, log1p(x < -1) = NaN.
* tanh: |x| < 0.625: x + x^3 T(x^2) with T fitted; otherwise 1 - 2 / (e^(2|x|) + 1) with the
  sign of x, |x| clamped to 20 in float64 where tanh is +-1 after rounding. float32 computes
  1 - e / (1/2 + e/2) with e = e^(-2|x|) (exp_nonpos_f32, which clamps the argument) and copies
  the sign of x onto either branch's value.
* sigmoid: e = exp(-|x|); 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0: one exp, one
  division, never an overflow; sigmoid(-inf) = 0, sigmoid(inf) = 1, subnormal results kept.
  In float32 e is carried as 2^64 e^-|x| (one scale factor 2^(k + 64), normal down to the
  clamp) against 2^64 + e, so subnormal results are rounded once, by the division.
* erf (float32): |x| < 1: x E(x^2) with E fitted; 1 <= |x| < 3.92: 1 - e^(-x^2) G(|x|) with G
  fitted (weighted by e^(-x^2), the weight of its error in the result); beyond: +-1.
  **erf_f64 keeps math.erf**: a float64 erf at full accuracy needs several rational pieces
  (hence several evaluated polynomials per element in a branch-free version) and would be
  slower than libm's for the modest gain; float64 erf is rare in models.
* atan (float32): |x| reduced to |t| <= 1/2 by pi/2 + atan(-1/|x|) above tan(3pi/8) or
  pi/4 + atan((|x| - 1) / (|x| + 1)) from 1/2 (one selected division per lane), an odd
  polynomial, the offset in two parts. asin / acos (float32): w + w^3 S(w^2) on [0, 0.7] and
  above through asin(a) = pi/2 - 2 asin(sqrt((1 - a) / 2)) (acos: pi/2 - asin(x), or
  2 asin(sqrt((1 - |x|) / 2)) and pi minus that). Over every float32: atan 1.71 ulp, asin
  1.28, acos 1.07. float64 keeps libm's.
* gelu (erf form, float32): not 0.5 x (1 + erf(x / sqrt 2)) but, with a = |x| clamped to 13.265
  and Phi the normal CDF, D = Phi(-a) = e^(-a^2/2) R(a) and gelu(x) = max(x, 0) - a D (that is
  x - x Phi(-x) for x >= 0 and x Phi(x) for x < 0). e^(-a^2/2) = 2^k 2^r with k = round(v),
  v = -a^2 / (2 ln 2), r = v - k and 2^r a fitted polynomial; R(a) = 1/2 + a S(a) with S
  one fitted rational (the only division). About 25 vector operations against erf_f32's ~40
  plus the composition, and no 1 + erf cancellation: the error is 2 ulps of the result plus an
  absolute error under 7e-8 |x| (``GELU_F32_BUDGET``), and for x < 0 the relative error stays
  ~1e-6 down to x = -3 and 3e-4 down to -6 (the composition: 1.2e-5, then 100 %).
  gelu_f64 keeps the formula with libm's erf.
* gelu (tanh form, float32): not 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), but
  the same value as x / (1 + e^(-2u)) (1 + tanh(u) = 2 / (1 + e^(-2u))): one exp (the
  exp_nonpos_normal_f32 reduction with -2u clamped to [-88, 88.5], where 2^k becomes +0 and
  +inf) and one division, against tanh_f32's two branches plus the composition; no
  1 + tanh cancellation for x < 0. Error 2 ulps of the result plus an absolute error under
  2e-8 |x| (``GELU_TANH_F32_BUDGET``); for x < 0 the relative error stays ~1e-6 down to
  x = -3 and ~4e-6 down to -6 (the composition: 1.2e-5, then 100 %). gelu_tanh_f64 keeps the
  formula with tanh_f64.

Accuracy (max error in float32 ulps against float64 numpy over dense grids of every binade,
checked in tests/test_vecmath.py; float64 against numpy's float64 libm): see ``ULP_BUDGET``.
The budgets hold both as written and with floating-point contraction (``a * b + c`` fused into
one multiply-add), which the generated and activation kernels enable (kernels/_jit.py); the
tests run every grid both ways.
"""

from __future__ import annotations

import math
import platform
from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from ._jit import njit

# Max error, in ulps of the result type, that tests/test_vecmath.py enforces. float32 values are
# measured against float64 numpy (rounded to float32, which itself is within 0.5 ulp of the
# truth), float64 values against numpy's float64 functions (libm, within ~1 ulp).
ULP_BUDGET = {
    "exp_f32": 1.5,
    "exp_nonpos_f32": 1.5,
    "exp_nonpos_normal_f32": 1.5,
    "expm1_nonpos_f32": 1.5,
    "log_f32": 1.5,
    "log1p_f32": 2,
    "tanh_f32": 2,
    "sigmoid_f32": 3,
    "erf_f32": 2,
    "atan_f32": 2,
    "asin_f32": 2,
    "acos_f32": 2,
    "exp_f64": 2,
    "log_f64": 2,
    "log1p_f64": 2,
    "tanh_f64": 3,
    "sigmoid_f64": 3,
}

# gelu_f32 (tests/test_vecmath.py, against float64 scipy over a dense grid, with and without
# contraction): |gelu_f32(x) - gelu(x)| <= ulps * ulp(|gelu(x)|) + abs_x * |x|. The second term
# is an absolute error in Phi(x) = gelu(x) / x: float32's own 1 + erf(x / sqrt 2) rounds Phi to
# a multiple of 2^-24 near 1, so an erf-form float32 GELU cannot do much better than ~3e-8 |x|
# (onnxruntime's has that cancellation too). Measured: 2 ulp + 5.4e-8 |x| at worst (the erf_f32
# composition it replaced: 3.5e-8 |x|, but 1.2e-5 relative error at x = -3 and 100 % beyond;
# a degree-6 2^r polynomial would give 2.5e-8 |x| for ~1 cycle per 16 floats more).
GELU_F32_BUDGET = {"ulps": 2.0, "abs_x": 7e-8}

# gelu_tanh_f32, the same form of budget against the float64 formula (tests/test_vecmath.py,
# |x| < 6, where float64's own 1 + tanh still holds ~8 digits): measured 2 ulp + 1.4e-8 |x|
# with contraction, 1.5e-8 |x| without (the composition it replaced: 2 ulp + 3.6e-8 |x|). The
# |x| term is the rounding of u in float32, which e^(-2u) turns into a relative error of ~|2u|
# ulps where the result is x e^(-2u) (x < 0).
GELU_TANH_F32_BUDGET = {"ulps": 2.0, "abs_x": 2e-8}

_f32 = np.float32
_f64 = np.float64

# ---------------------------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------------------------

_LN2 = 0.6931471805599453
# ln 2 split so that k * hi is exact for every |k| the functions meet (hi keeps 12 and 42
# significant bits); lo is the rest of the true ln 2 (computed with mpmath, not from the
# rounded float64 ln 2).
_LN2_HI_F32 = _f32(0.693115234375)
_LN2_LO_F32 = _f32(3.194618329871446e-05)
_LN2_HI_F64 = _f64(0.6931471805598903)
_LN2_LO_F64 = _f64(5.497923018708371e-14)
_LOG2E_F32 = _f32(1.4426950408889634)
_LOG2E_F64 = _f64(1.4426950408889634)
# Adding 1.5 * 2^23 (2^52) rounds a float to an integer in the low mantissa bits.
_SHIFT_F32 = _f32(12582912.0)
_SHIFT_F64 = _f64(6755399441055744.0)
_SHIFT_BITS_F32 = 0x4B400000
_SHIFT_BITS_F64 = 0x4338000000000000

# exp thresholds: above OVF the result is inf; below UNF it rounds to +0 (float32: the values
# exp_f32 reaches without testing them, see there).
_EXP_OVF_F64 = _f64(709.782712893384)
_EXP_UNF_F64 = _f64(-745.1332191019412)
# Clamps that keep k (and the two scale factors) in range for any input: float32 k in
# [-150, 128] (x log2(e) at -104 and 89 rounded).
_EXP_HI_F32 = _f32(89.0)
_EXP_LO_F32 = _f32(-104.0)
_EXP_HI_F64 = _f64(710.0)
_EXP_LO_F64 = _f64(-746.0)

# e^r = 1 + r + r^2 P(r), |r| <= ln2/2: P fitted (degree 4 for float32, 10 for float64).
_EP_F32 = tuple(
    _f32(c)
    for c in (
        0.5,
        0.1666657702559799,
        0.041666554662050534,
        0.008363173074513711,
        0.001392617611993558,
    )
)
_EP_F64 = tuple(
    _f64(c)
    for c in (
        0.5,
        0.1666666666666667,
        0.04166666666666667,
        0.008333333333326141,
        0.0013888888888883752,
        0.00019841269874800493,
        2.4801587325533363e-05,
        2.7557255425746435e-06,
        2.7557273661348637e-07,
        2.510520637395701e-08,
        2.0914679376583935e-09,
    )
)
_EP0_F32, _EP1_F32, _EP2_F32, _EP3_F32, _EP4_F32 = _EP_F32
(
    _EP0_F64,
    _EP1_F64,
    _EP2_F64,
    _EP3_F64,
    _EP4_F64,
    _EP5_F64,
    _EP6_F64,
    _EP7_F64,
    _EP8_F64,
    _EP9_F64,
    _EP10_F64,
) = _EP_F64

# log(1+f) = 2 atanh(s), s = f/(2+f): R(z) = z Q(z), z = s^2 <= 0.0295, Q fitted.
_LQ0_F32, _LQ1_F32, _LQ2_F32, _LQ3_F32 = (
    _f32(c)
    for c in (0.6666666655449709, 0.40000121839806124, 0.28550820815960665, 0.23330467216303835)
)
_LQ0_F64, _LQ1_F64, _LQ2_F64, _LQ3_F64, _LQ4_F64, _LQ5_F64, _LQ6_F64, _LQ7_F64 = (
    _f64(c)
    for c in (
        0.6666666666666666,
        0.4000000000000088,
        0.28571428570803614,
        0.22222222391713917,
        0.18181795640132906,
        0.15386239702814658,
        0.13268773138656886,
        0.13086626147840102,
    )
)
_SQRT_HALF_BITS_F32 = 0x3F3504F3
_SQRT_HALF_BITS_F64 = 0x3FE6A09E667F3BCD
_TINY_F32 = _f32(1.1754943508222875e-38)  # smallest normal
_TINY_F64 = _f64(2.2250738585072014e-308)
_TWO23 = _f32(8388608.0)
_MINUS23_F32 = _f32(-23.0)
_TWO52 = _f64(4503599627370496.0)
_MAX_F32 = _f32(3.4028234663852886e38)
_MAX_F64 = _f64(1.7976931348623157e308)

# tanh(x) = x + x^3 T(x^2) for |x| < 0.625: T fitted (degree 5 / 11).
_TANH_SMALL_F32 = _f32(0.625)
_TANH_SMALL_F64 = _f64(0.625)
# below these tanh(x) and log1p(x) round to x (also keeps the sign of -0)
_TINY_ARG_F64 = _f64(2.0**-54)
_LOG1P_TINY_F32 = _f32(2.0**-25)
_LOG1P_TINY_F64 = _f64(2.0**-54)
_TANH_CLAMP_F64 = _f64(20.0)
_TT0_F32, _TT1_F32, _TT2_F32, _TT3_F32, _TT4_F32, _TT5_F32 = (
    _f32(c)
    for c in (
        -0.3333333317214036,
        0.1333330355691574,
        -0.053959259577204544,
        0.02176891865102821,
        -0.008343945515839153,
        0.002292744816178142,
    )
)
(
    _TT0_F64,
    _TT1_F64,
    _TT2_F64,
    _TT3_F64,
    _TT4_F64,
    _TT5_F64,
    _TT6_F64,
    _TT7_F64,
    _TT8_F64,
    _TT9_F64,
    _TT10_F64,
    _TT11_F64,
) = (
    _f64(c)
    for c in (
        -0.3333333333333333,
        0.13333333333333042,
        -0.05396825396789699,
        0.021869488519008305,
        -0.008863235103240878,
        0.0035921217511549622,
        -0.0014557754120478055,
        0.0005896606577757043,
        -0.0002375906496055562,
        9.257116129556769e-05,
        -3.12011014257974e-05,
        6.485163482793113e-06,
    )
)

# erf(x) = x E(x^2) for |x| < 1 (E fitted, degree 6); erf(x) = 1 - e^(-x^2) G(x - 2) for
# 1 <= x < 3.92 (G fitted, degree 8, centred at 2 for well-conditioned coefficients).
_ERF_SPLIT = _f32(1.0)
# the smallest float32 whose erf rounds to 1
_ERF_SAT = _f32(3.919205904006958)
_ERF_CENTRE = _f32(2.0)
# erf(x) = x + x (E(x^2) - 1): the leading x is exact, which halves the rounding error.
_EE0M1, _EE1, _EE2, _EE3, _EE4, _EE5, _EE6 = (
    _f32(c)
    for c in (
        1.1283791658483509 - 1.0,
        -0.37612626666720334,
        0.11283594715160218,
        -0.026854212010626412,
        0.005189087423433974,
        -0.000801686428716587,
        7.875875062685488e-05,
    )
)
_EG0, _EG1, _EG2, _EG3, _EG4, _EG5, _EG6, _EG7, _EG8 = (
    _f32(c)
    for c in (
        0.25539560170306413,
        -0.1067977870255584,
        0.041801567887765324,
        -0.015443009677188417,
        0.0054755436596479155,
        -0.0018574048327415246,
        0.0005035017334665571,
        -0.00020230925044922694,
        0.00010684383105699859,
    )
)

# gelu_f32. The clamp: |x| >= 13.265 gives v = -a^2 / (2 ln 2) = -126.93, k = -127, so 2^k built
# from the biased shifter's bits is exactly +0 (the biased exponent field is 0) and D = 0: gelu is
# then max(x, 0) exactly (x itself, or -0: the sign of the underflowed x Phi(x)), also for
# +-inf. Below the clamp k >= -126.
_GELU_CLAMP = _f32(13.265)
# Fits (float64, numpy least squares; scipy.special.erfcx as the reference):
# * 2^r = 1 + r E(r) on |r| <= 1/2, E of degree 4: near-minimax relative error (9.1e-8) by
#   Lawson's iteratively reweighted least squares (300 iterations, weights *= |error|, best
#   iterate kept) on 20001 Chebyshev nodes, fitting (2^r - 1) / r with weight r / 2^r.
# * R(a) = Phi(-a) e^(a^2/2) = erfcx(a / sqrt 2) / 2 = 1/2 + a S(a) on [0, 13.265],
#   S(a) = (p0 + p1 a + p2 a^2) / (1 + q1 a + ... + q4 a^4): the rational version of the same
#   iteration (Sanathanan-Koerner linearisation: minimise |w (N - S Q)| / Q_previous, then
#   Lawson weights) on 40000 Chebyshev nodes in a / 13.265, weight
#   w = a e^(-a^2/2) / max(Phi(-a), 0.01): the relative error of D where D > 0.01 and its
#   absolute error / 0.01 beyond, both under 2.7e-8. The leading 1/2 is exact (R(0) = 1/2
#   exactly), which keeps gelu within ~2 ulp near 0.
# Coefficients are rounded to float32 as they stand (S's after the division by q4 below; no
# re-fit); the test measures the result.
_GE1, _GE2, _GE3, _GE4, _GE5 = (
    _f32(c)
    for c in (
        0.6931469775985429,
        0.24022242084661788,
        0.05550733743927383,
        0.009671512682433363,
        0.0013264727094027796,
    )
)
# S as fitted: (p0 + p1 a + p2 a^2) / (1 + q1 a + ... + q4 a^4). Evaluated with numerator and
# denominator divided by q4: the monic denominator's Horner chain starts with an add, where
# a leading multiply-add needs a register copy (0.5 cycle per 16 floats less on the test VM).
_GS_P = (-0.3989428545301643, -0.20221286776104108, -0.037250965006335165)
_GS_Q = (1.0, 1.1335489563898264, 0.4702959670965195, 0.07375031851455979, 4.139250414888102e-05)
# The kernel works in b = a C, C = sqrt(log2(e) / 2), so that the exponent -a^2 / (2 ln 2) is
# -b^2, one multiply-add away from the shifter, and the remainder (b^2 + k, its negation) is
# one more: the fits above in terms of b (2^-n for 2^r with n = -r flips E's odd terms; S's
# monic denominator and a S = b S / C rescaled), in float64, then rounded to float32.
_GELU_C64 = math.sqrt(math.log2(math.e) / 2.0)
_GELU_C = _f32(_GELU_C64)
_GF1, _GF2, _GF3, _GF4, _GF5 = (-_GE1, _GE2, -_GE3, _GE4, -_GE5)
_GP0, _GP1, _GP2 = (_f32(c / _GS_Q[4] * _GELU_C64 ** (3 - i)) for i, c in enumerate(_GS_P))
_GQ0, _GQ1, _GQ2, _GQ3 = (
    _f32(c / _GS_Q[4] * _GELU_C64 ** (4 - i)) for i, c in enumerate(_GS_Q[:4])
)
_SQRT1_2_F64 = _f64(0.7071067811865476)

_ZERO_F32 = _f32(0.0)
_HALF_F32 = _f32(0.5)
_ONE_F32 = _f32(1.0)
_TWO_F32 = _f32(2.0)
_INF_F32 = _f32(np.inf)
_NAN_F32 = _f32(np.nan)
_ZERO_F64 = _f64(0.0)
_HALF_F64 = _f64(0.5)
_ONE_F64 = _f64(1.0)
_TWO_F64 = _f64(2.0)
_INF_F64 = _f64(np.inf)
_NAN_F64 = _f64(np.nan)


# ---------------------------------------------------------------------------------------------
# exp
# ---------------------------------------------------------------------------------------------


@njit(inline="always")
def _expm1_poly_f32(r):
    """e^r - 1 for |r| <= ln2/2: r + r^2 P(r) (relative error ~0.2 ulp before rounding)."""
    p = _pin(_EP0_F32) + r * (
        _pin(_EP1_F32) + r * (_pin(_EP2_F32) + r * (_pin(_EP3_F32) + r * _pin(_EP4_F32)))
    )
    return r + r * r * p


@njit(inline="always")
def _exp_poly_f32(r):
    """e^r for |r| <= ln2/2 (relative error well under 1 ulp before rounding)."""
    return _pin(_ONE_F32) + _expm1_poly_f32(r)


@njit(inline="always")
def _exp_poly_f64(r):
    p = _EP0_F64 + r * (
        _EP1_F64
        + r
        * (
            _EP2_F64
            + r
            * (
                _EP3_F64
                + r
                * (
                    _EP4_F64
                    + r
                    * (
                        _EP5_F64
                        + r
                        * (
                            _EP6_F64
                            + r * (_EP7_F64 + r * (_EP8_F64 + r * (_EP9_F64 + r * _EP10_F64)))
                        )
                    )
                )
            )
        )
    )
    return _ONE_F64 + (r + r * r * p)


@njit(inline="always")
def _exp_mid_f32(x):
    """e^x for -87 <= x <= 88 (one scale factor, 2^k stays normal); NaN propagates."""
    t = x * _pin(_LOG2E_F32) + _pin(_SHIFT_F32)
    kf = t - _pin(_SHIFT_F32)
    k = np.int64(np.float32(t).view(np.int32)) - _SHIFT_BITS_F32
    r = (x - kf * _pin(_LN2_HI_F32)) - kf * _pin(_LN2_LO_F32)
    s = np.int32((k + 127) << 23).view(np.float32)
    return _exp_poly_f32(r) * s


@njit(inline="always")
def _exp_mid_f64(x):
    """e^x for -708 <= x <= 709 (one scale factor); NaN propagates."""
    t = x * _LOG2E_F64 + _SHIFT_F64
    kf = t - _SHIFT_F64
    k = np.float64(t).view(np.int64) - _SHIFT_BITS_F64
    r = (x - kf * _LN2_HI_F64) - kf * _LN2_LO_F64
    s = np.int64((k + 1023) << 52).view(np.float64)
    return _exp_poly_f64(r) * s


# For x <= 0 down to the clamp -104, k = round(x log2(e)) lies in [-150, 0]: 2^(k + 64) is a
# normal float for all of them, so one biased shifter (bias 127 + 64, as _SHIFT_BIASED_F32)
# builds it with one shift.
_SHIFT_NEG_F32 = _f32(12582912.0 + 127.0 + 64.0)
_TWO_64_F32 = _f32(2.0**64)


@njit(inline="always")
def _exp_neg_2p64_f32(x):
    """2^64 e^x in float32 for x <= 0 or NaN (sigmoid's e^-|x|, scaled so that it stays a
    normal float down to the clamp at -104, where e^x itself is subnormal); NaN propagates.
    The error of :func:`exp_f32` with one scale factor and no underflow compare: ~25 % faster
    SiLU than the two-factor scaling of exp_f32 (256K float32 elements, one thread,
    development VM: 94 -> 70 us)."""
    xc = _pin(_EXP_LO_F32) if x < _pin(_EXP_LO_F32) else x  # NaN stays NaN, and so does the result
    t = xc * _pin(_LOG2E_F32) + _pin(_SHIFT_NEG_F32)
    kf = t - _pin(_SHIFT_NEG_F32)
    r = (xc - kf * _pin(_LN2_HI_F32)) - kf * _pin(_LN2_LO_F32)
    s = np.int32(np.float32(t).view(np.int32) << 23).view(np.float32)  # 2^(k + 64)
    return _exp_poly_f32(r) * s


@njit(inline="always")
def exp_f32(x):
    """e^x in float32: <= 1 ulp; inf above 88.7228, +0 below -103.972, subnormals kept."""
    # No compare-and-select for overflow, underflow or NaN: the clamps keep k in [-150, 128],
    # where both scale factors are normal, and the last product's own rounding gives inf above
    # the overflow threshold (k = 128 with e^r >= 1 there) and +0 below the underflow one (a
    # value under 2^-150); NaN passes the clamps and the arithmetic. Bit for bit the values of
    # the form with the three selects, for all 2^32 inputs with and without contraction, and
    # 0.75x its time (131072 float32 in L2, one thread, Zen 3, alternating in one process).
    xc0 = _pin(_EXP_HI_F32) if x > _pin(_EXP_HI_F32) else x
    xc = _pin(_EXP_LO_F32) if xc0 < _pin(_EXP_LO_F32) else xc0
    t = xc * _pin(_LOG2E_F32) + _pin(_SHIFT_F32)
    kf = t - _pin(_SHIFT_F32)
    k = np.int32(np.float32(t).view(np.int32) - np.int32(_SHIFT_BITS_F32))
    r = (xc - kf * _pin(_LN2_HI_F32)) - kf * _pin(_LN2_LO_F32)
    k1 = np.int32(k >> 1)
    s1 = np.int32((k1 + np.int32(127)) << 23).view(np.float32)
    s2 = np.int32((k - k1 + np.int32(127)) << 23).view(np.float32)
    return (_exp_poly_f32(r) * s1) * s2


@njit(inline="always")
def exp_f64(x):
    """e^x in float64: <= 2 ulp; inf above 709.78, +0 below -745.13, subnormals kept."""
    xc0 = _EXP_HI_F64 if x > _EXP_HI_F64 else x
    xc = _EXP_LO_F64 if xc0 < _EXP_LO_F64 else xc0
    t = xc * _LOG2E_F64 + _SHIFT_F64
    kf = t - _SHIFT_F64
    k = np.float64(t).view(np.int64) - _SHIFT_BITS_F64
    r = (xc - kf * _LN2_HI_F64) - kf * _LN2_LO_F64
    k1 = k >> 1
    s1 = np.int64((k1 + 1023) << 52).view(np.float64)
    s2 = np.int64((k - k1 + 1023) << 52).view(np.float64)
    y = (_exp_poly_f64(r) * s1) * s2
    y1 = _INF_F64 if x > _EXP_OVF_F64 else y
    y2 = _ZERO_F64 if x < _EXP_UNF_F64 else y1
    return x if x != x else y2


# Inputs are clamped here: round(x log2(e)) is then at least -127, and 2^-127 built from its
# biased exponent field (k + 127 = 0) is +0, so every x below about -87.68 gives exactly +0
# without a compare and select.
_EXP_NONPOS_MIN_F32 = _f32(-88.0)
# The shifter with the exponent bias folded in: t = x log2(e) + 1.5 * 2^23 + 127 holds k + 127
# in its low mantissa bits, and every bit of 1.5 * 2^23 sits at bit 22 or above, so shifting
# t's bits left by 23 leaves exactly (k + 127) << 23, the bits of 2^k (one shift, no add).
_SHIFT_BIASED_F32 = _f32(12582912.0 + 127.0)


@njit(inline="always")
def exp_nonpos_f32(x):
    """e^x in float32 for x <= 0 (softmax's shifted scores): <= 1.5 ulp down to -87.336
    (the smallest normal result); between there and -87.68 a subnormal (the product of e^r
    and 2^-126, correctly rounded), below that +0; NaN propagates. Fewer instructions than
    :func:`exp_f32` (no overflow handling, one scale factor, the biased shifter, e^r in
    plain Horner form, the zero from the scale factor itself): softmax's exp pass is compute
    bound. Positive x is outside the contract (results are wrong beyond ~88)."""
    xc = _pin(_EXP_NONPOS_MIN_F32) if x < _pin(_EXP_NONPOS_MIN_F32) else x  # NaN stays NaN
    return exp_nonpos_normal_f32(xc)


# Where e^x stops being a normal float32 (rounded towards zero): at and above it the unclamped
# exp_nonpos_normal_f32 is within its budget. Row kernels compare their smallest shifted
# argument with it to drop the clamp (one instruction of ~15 per vector).
EXP_NONPOS_NORMAL_MIN = -87.33654


@njit(inline="always")
def _reduce_biased_f32(x):
    """``(r, 2^k)`` with x = k ln2 + r, |r| <= ln2 / 2, k built with the biased shifter (one
    shift, no add; 2^k is +0 for k < -126, +inf for k > 127)."""
    t = x * _pin(_LOG2E_F32) + _pin(_SHIFT_BIASED_F32)
    kf = t - _pin(_SHIFT_BIASED_F32)
    r = (x - kf * _pin(_LN2_HI_F32)) - kf * _pin(_LN2_LO_F32)
    return r, np.int32(np.float32(t).view(np.int32) << 23).view(np.float32)


@njit(inline="always")
def exp_nonpos_normal_f32(xc):
    """e^x in float32 for ``EXP_NONPOS_NORMAL_MIN <= x <= 0`` (results normal): the same
    values as :func:`exp_nonpos_f32` there, without its clamp. Down to -87.68 results are
    still right (subnormal); below that they are garbage, not 0: callers check the range
    first (the row's smallest element). NaN propagates. Positive x (gelu_tanh_f32's use): e^x
    within the same bound up to 88.37; from there to 89.07 +inf (2^128 is the exponent field
    255; below 88.72 the true value is still finite), and garbage beyond 89.07."""
    r, s = _reduce_biased_f32(xc)
    # 1 + r + r^2 (E0 + E1 r + r^2 (E2 + E3 r + E4 r^2)) in Estrin's order: 4 dependent
    # multiply-adds after r^2 instead of Horner's 6, one operation more. Softmax's exp pass
    # waits on this chain more than on the vector units (Zen 3, 1024 x 1024 float32 rows at
    # 2 threads, alternating in one process: 0.955 and 0.981 the time of Horner's)
    r2 = r * r
    q = (_pin(_EP0_F32) + _pin(_EP1_F32) * r) + r2 * (
        (_pin(_EP2_F32) + _pin(_EP3_F32) * r) + _pin(_EP4_F32) * r2
    )
    p = _pin(_ONE_F32) + (r + r2 * q)
    return p * s


@njit(inline="always")
def exp_nonpos_f64(x):
    """e^x in float64 for x <= 0: :func:`exp_f64` (kept for the type dispatch)."""
    return exp_f64(x)


# Below this e^x - 1 rounds to -1 in float32 (e^-20 is 2^-28.9, under half an ulp of 1); the
# clamp keeps k >= -29, where 2^k is normal and 2^k - 1 exact or rounded to -1 as it should.
_EXPM1_NONPOS_MIN_F32 = _f32(-20.0)


@njit(inline="always")
def expm1_nonpos_f32(x):
    """e^x - 1 in float32 for x <= 0 (ELU's negative side): <= 1.5 ulp, -1 below -17.33,
    NaN propagates; expm1(-0) is +0. Positive x is outside the contract (a finite or
    infinite value, meaningless: callers select it away).

    x = k ln2 + r as in :func:`exp_nonpos_normal_f32`, then 2^k (e^r - 1) + (2^k - 1) with
    e^r - 1 = r + r^2 P(r) (exp's polynomial without its leading 1): no cancellation, as the
    two terms have one sign, and 2^k - 1 is exact. Replaces libm's expm1, a call per element
    that kept the loop scalar: 131072 float32 in L2 on one thread, Zen 3, 51 against
    2347 us; measured against float64 over every non-positive float32: 1.16 ulp without
    contraction, 1.01 with."""
    xc = _pin(_EXPM1_NONPOS_MIN_F32) if x < _pin(_EXPM1_NONPOS_MIN_F32) else x  # NaN stays
    r, s = _reduce_biased_f32(xc)
    return s * _expm1_poly_f32(r) + (s - _pin(_ONE_F32))


@njit(inline="always")
def expm1_nonpos_f64(x):
    """e^x - 1 in float64: libm's expm1 (float64 ELUs are rare; it is exact to ~1 ulp)."""
    return math.expm1(x)


def _ieee_pick(op: str, a: Any, b: Any) -> tuple:
    """Signature and code generator of ``llvm.<op>`` (maxnum or minnum) on two floats."""
    if not (isinstance(a, types.Float) and a == b):
        raise TypeError(f"{op} takes two floats of one type, got {a} and {b}")
    sig = a(a, b)

    def codegen(context, builder, sig, args):
        lt = context.get_value_type(sig.args[0])
        name = f"llvm.{op}.f32" if sig.args[0] == types.float32 else f"llvm.{op}.f64"
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(lt, [lt, lt]), name)
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def maxnum(typingctx, a, b):
    """IEEE maxNum of two floats of one type: the larger, and the other operand when one is
    NaN. LLVM turns ``m = maxnum(m, x[i])`` loops into vector max reductions, which it does
    not for ``max()`` or a compare-and-select (a 1M-element float32 max: 48 us against 570 us
    on the development VM). Callers that must propagate NaN check for it another way."""
    return _ieee_pick("maxnum", a, b)


@intrinsic
def minnum(typingctx, a, b):
    """IEEE minNum of two floats of one type: the smaller, and the other operand when one is
    NaN (see :func:`maxnum`)."""
    return _ieee_pick("minnum", a, b)


_FENCE_OK = platform.machine().lower() in ("x86_64", "amd64")


@intrinsic
def fence(typingctx, x):
    """``x`` unchanged, as a value fast-math rewriting cannot look through (LLVM's
    ``llvm.arithmetic.fence``; plain ``x`` off x86-64, where the fence may not lower).

    Under ``reassoc`` LLVM rewrites ``y * (1 / s)`` inside a loop as ``y / s``: a vector
    division per element instead of one reciprocal per row (a 1024-wide softmax's scale loop
    ran at 185 us per million floats instead of ~90 on the development VM). Scaling loops
    multiply by ``fence(1 / s)`` to keep the multiplication."""
    if not isinstance(x, types.Float):
        raise TypeError(f"fence takes a float, got {x}")
    sig = x(x)

    def codegen(context, builder, sig, args):
        if not _FENCE_OK:
            return args[0]
        lt = context.get_value_type(sig.args[0])
        name = (
            "llvm.arithmetic.fence.f32"
            if sig.args[0] == types.float32
            else "llvm.arithmetic.fence.f64"
        )
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(lt, [lt]), name)
        return builder.call(fn, args)

    return sig, codegen


# The float32 helpers' constants go through this fence (LLVM's ``llvm.arithmetic.fence``,
# identity off x86-64): LLVM hoists the fenced value out of the loop (the intrinsic has no side
# effects) but cannot rematerialise it from the constant pool inside the loop. Unfenced, a loop
# whose registers run short reloads its constants there: with Numba's large code model each
# reload is a 64-bit address move plus a broadcast, and the general-purpose registers holding
# those addresses run short too. Inlined into a pool kernel (whose claim loop holds more
# registers) the erf GELU's loop carried ~20 such reloads per 8 floats, ~30 % of its time;
# fenced, the constants stay in vector registers or become stack operands of the FMAs
# (256K float32, Zen 3: pool kernel 266 -> 183 us on one thread, 138 -> 99 us on two;
# serial loops unchanged; the same bits). Zero is left alone: vxorps makes it for free.
_pin = fence

# ---------------------------------------------------------------------------------------------
# log, log1p
# ---------------------------------------------------------------------------------------------


@njit(inline="always")
def _log_norm_f32(x, eadj):
    """log(x * 2^eadj) for a positive normal finite x (eadj is a float32 holding a small
    integer exponent offset)."""
    # Integer steps are cut back to int32 one by one (Numba widens integer arithmetic to
    # int64, which LLVM cannot narrow here): a float32 loop then vectorises in 32-bit lanes
    # instead of splitting every vector into two halves of int64.
    ix = np.float32(x).view(np.int32)
    ek = np.int32(np.int32(ix - _SQRT_HALF_BITS_F32) >> 23)
    m = np.int32(ix - np.int32(ek << 23)).view(np.float32)  # in [sqrt(1/2), sqrt(2))
    e = np.float32(ek) + eadj
    f = m - _pin(_ONE_F32)
    s = f / (_pin(_TWO_F32) + f)
    z = s * s
    r = z * (_pin(_LQ0_F32) + z * (_pin(_LQ1_F32) + z * (_pin(_LQ2_F32) + z * _pin(_LQ3_F32))))
    hfsq = _pin(_HALF_F32) * f * f
    return e * _pin(_LN2_HI_F32) + ((f - hfsq) + (s * (hfsq + r) + e * _pin(_LN2_LO_F32)))


@njit(inline="always")
def _log_norm_f64(x, eadj):
    ix = np.float64(x).view(np.int64)
    ek = (ix - _SQRT_HALF_BITS_F64) >> 52
    m = np.int64(ix - (ek << 52)).view(np.float64)
    e = np.float64(ek + eadj)
    f = m - _ONE_F64
    s = f / (_TWO_F64 + f)
    z = s * s
    r = z * (
        _LQ0_F64
        + z
        * (
            _LQ1_F64
            + z
            * (
                _LQ2_F64
                + z * (_LQ3_F64 + z * (_LQ4_F64 + z * (_LQ5_F64 + z * (_LQ6_F64 + z * _LQ7_F64))))
            )
        )
    )
    hfsq = _HALF_F64 * f * f
    return e * _LN2_HI_F64 + ((f - hfsq) + (s * (hfsq + r) + e * _LN2_LO_F64))


@njit(inline="always")
def log_f32(x):
    """Natural log in float32: <= 1 ulp; log(0) = -inf, log(<0) = NaN, subnormals handled."""
    tiny = x < _pin(_TINY_F32)
    xs = x * _pin(_TWO23) if tiny else x
    y = _log_norm_f32(xs, _pin(_MINUS23_F32) if tiny else _ZERO_F32)
    # x <= 0, inf and NaN: -inf, NaN, inf, NaN
    special = (-_pin(_INF_F32) if x == _ZERO_F32 else _pin(_NAN_F32)) if x <= _ZERO_F32 else x + x
    return y if (x > _ZERO_F32 and x <= _pin(_MAX_F32)) else special


@njit(inline="always")
def log_f64(x):
    """Natural log in float64: <= 2 ulp; log(0) = -inf, log(<0) = NaN, subnormals handled."""
    tiny = x < _TINY_F64
    xs = x * _TWO52 if tiny else x
    y = _log_norm_f64(xs, -52 if tiny else 0)
    special = (-_INF_F64 if x == _ZERO_F64 else _NAN_F64) if x <= _ZERO_F64 else x + x
    return y if (x > _ZERO_F64 and x <= _MAX_F64) else special


@njit(inline="always")
def log1p_f32(x):
    """log(1 + x) in float32: <= 2 ulp; log1p(-1) = -inf, log1p(<-1) = NaN."""
    u = _pin(_ONE_F32) + x
    # TwoSum: 1 + x = u + d exactly
    b = u - _pin(_ONE_F32)
    d = (_pin(_ONE_F32) - (u - b)) + (x - b)
    uc = u if u > _pin(_TINY_F32) else _pin(_ONE_F32)  # keep the core on normal input; fixed below
    y = _log_norm_f32(uc, _ZERO_F32) + d / uc
    special = (
        (-_pin(_INF_F32) if x == -_pin(_ONE_F32) else _pin(_NAN_F32))
        if x <= -_pin(_ONE_F32)
        else x + x
    )
    y1 = x if abs(x) < _pin(_LOG1P_TINY_F32) else y
    return y1 if (x > -_pin(_ONE_F32) and x <= _pin(_MAX_F32)) else special


@njit(inline="always")
def log1p_f64(x):
    """log(1 + x) in float64: <= 2 ulp; log1p(-1) = -inf, log1p(<-1) = NaN."""
    u = _ONE_F64 + x
    b = u - _ONE_F64
    d = (_ONE_F64 - (u - b)) + (x - b)
    uc = u if u > _TINY_F64 else _ONE_F64
    y = _log_norm_f64(uc, 0) + d / uc
    special = (-_INF_F64 if x == -_ONE_F64 else _NAN_F64) if x <= -_ONE_F64 else x + x
    y1 = x if abs(x) < _LOG1P_TINY_F64 else y
    return y1 if (x > -_ONE_F64 and x <= _MAX_F64) else special


# ---------------------------------------------------------------------------------------------
# tanh, sigmoid
# ---------------------------------------------------------------------------------------------


@njit(inline="always")
def tanh_f32(x):
    """tanh in float32: <= 2 ulp; saturates to +-1, NaN propagates, tanh(-0) = -0."""
    # Computed for a = |x| and the sign of x copied back (one bit operation where selects
    # had negated, kept -0 and tiny arguments), e^-2a from exp_nonpos_f32 (clamps itself,
    # one scale factor) and 2e / (1 + e) as e / (0.5 + 0.5 e): a vector loop computes both
    # branches, so every operation counts (8-op chain at 64M elements, 2 threads,
    # development VM, old and new alternated: 36-42 -> 33.4-33.6 ms; max error 1.27 -> 1.36 ulp)
    a = abs(x)
    z = a * a
    small = a + a * z * (
        _pin(_TT0_F32)
        + z
        * (
            _pin(_TT1_F32)
            + z
            * (_pin(_TT2_F32) + z * (_pin(_TT3_F32) + z * (_pin(_TT4_F32) + z * _pin(_TT5_F32))))
        )
    )
    e = exp_nonpos_f32(-(a + a))  # NaN stays NaN
    big = _pin(_ONE_F32) - e / (_pin(_HALF_F32) + _pin(_HALF_F32) * e)
    return math.copysign(small if a < _pin(_TANH_SMALL_F32) else big, x)


@njit(inline="always")
def tanh_f64(x):
    """tanh in float64: <= 3 ulp; saturates to +-1, NaN propagates, tanh(-0) = -0."""
    a = abs(x)
    z = x * x
    p = _TT0_F64 + z * (
        _TT1_F64
        + z
        * (
            _TT2_F64
            + z
            * (
                _TT3_F64
                + z
                * (
                    _TT4_F64
                    + z
                    * (
                        _TT5_F64
                        + z
                        * (
                            _TT6_F64
                            + z
                            * (
                                _TT7_F64
                                + z * (_TT8_F64 + z * (_TT9_F64 + z * (_TT10_F64 + z * _TT11_F64)))
                            )
                        )
                    )
                )
            )
        )
    )
    small = x + x * z * p
    ac = _TANH_CLAMP_F64 if a > _TANH_CLAMP_F64 else a
    big = _ONE_F64 - _TWO_F64 / (_exp_mid_f64(ac + ac) + _ONE_F64)
    y = small if a < _TANH_SMALL_F64 else (-big if x < _ZERO_F64 else big)
    return x if a < _TINY_ARG_F64 else y


@njit(inline="always")
def sigmoid_f32(x):
    """1 / (1 + e^-x) in float32: <= 2 ulp; sigmoid(-inf) = 0, sigmoid(inf) = 1."""
    # e = 2^64 e^-|x|: 2^64 / (2^64 + e) for x >= 0, e / (2^64 + e) for x < 0, the same
    # quotients as with e^-|x| and 1 (powers of two scale exactly) while e stays normal; a
    # subnormal result is rounded once, by the division
    e = _exp_neg_2p64_f32(-abs(x))
    return (_pin(_TWO_64_F32) if x >= _ZERO_F32 else e) / (_pin(_TWO_64_F32) + e)


@njit(inline="always")
def sigmoid_f64(x):
    """1 / (1 + e^-x) in float64: <= 3 ulp; sigmoid(-inf) = 0, sigmoid(inf) = 1."""
    e = exp_f64(-abs(x))
    return (_ONE_F64 if x >= _ZERO_F64 else e) / (_ONE_F64 + e)


# ---------------------------------------------------------------------------------------------
# erf
# ---------------------------------------------------------------------------------------------


@njit(inline="always")
def erf_f32(x):
    """erf in float32: <= 2 ulp; saturates to +-1 for |x| >= 3.92, NaN propagates."""
    a = abs(x)
    z = x * x
    small = x + x * (
        _pin(_EE0M1)
        + z
        * (
            _pin(_EE1)
            + z
            * (_pin(_EE2) + z * (_pin(_EE3) + z * (_pin(_EE4) + z * (_pin(_EE5) + z * _pin(_EE6)))))
        )
    )
    ac = _pin(_ERF_SAT) if a > _pin(_ERF_SAT) else a  # NaN stays NaN
    t = ac - _pin(_ERF_CENTRE)
    g = _pin(_EG0) + t * (
        _pin(_EG1)
        + t
        * (
            _pin(_EG2)
            + t
            * (
                _pin(_EG3)
                + t
                * (
                    _pin(_EG4)
                    + t * (_pin(_EG5) + t * (_pin(_EG6) + t * (_pin(_EG7) + t * _pin(_EG8))))
                )
            )
        )
    )
    big0 = _pin(_ONE_F32) - _exp_mid_f32(-(ac * ac)) * g
    big = _pin(_ONE_F32) if a >= _pin(_ERF_SAT) else big0
    return small if a < _pin(_ERF_SPLIT) else (-big if x < _ZERO_F32 else big)


@njit(inline="always")
def erf_f64(x):
    """erf in float64: libm's (see the module docstring for why)."""
    return math.erf(x)


# ---------------------------------------------------------------------------------------------
# atan, asin, acos (float32; float64 keeps libm)
# ---------------------------------------------------------------------------------------------

_TAN_3PI8_F32 = _f32(2.414213562373095)
# from here atan(a) = pi/4 + atan((a - 1) / (a + 1)): at 0.5 rather than tan(pi/8) so that
# a - 1 is exact (Sterbenz); below tan(pi/8) it rounded, 2.1 ulp in the result
_ATAN_MID_F32 = _f32(0.5)
# pi/2, pi/4 and pi as float32 plus the rest (added separately, so the result keeps ~8 more bits)
_PIO2_HI_F32 = _f32(math.pi / 2)
_PIO2_LO_F32 = _f32(math.pi / 2 - float(_f32(math.pi / 2)))
_PIO4_HI_F32 = _f32(math.pi / 4)
_PIO4_LO_F32 = _f32(math.pi / 4 - float(_f32(math.pi / 4)))
_PI_HI_F32 = _f32(math.pi)
_PI_LO_F32 = _f32(math.pi - float(_f32(math.pi)))
# atan(t) = t + t^3 A(t^2) for |t| <= 1/2: A fitted (0.089 ulp before rounding)
_AT0_F32, _AT1_F32, _AT2_F32, _AT3_F32, _AT4_F32 = (
    _f32(c)
    for c in (
        -0.3333323430631789,
        0.19994226689311861,
        -0.14175010770771007,
        0.10160015760821722,
        -0.05132598323753142,
    )
)
# asin(w) = w + w^3 S(w^2) for 0 <= w <= 0.7: S fitted (0.029 ulp before rounding). Above
# 0.7, asin(a) = pi/2 - 2 asin(sqrt((1 - a) / 2)) with sqrt((1 - a) / 2) <= 0.39; the split
# sits at 0.7 rather than the usual 0.5, where pi/2 - 2p halves 2p and doubles its error
# (the sqrt's rounding: 2.4 ulp there).
_ASIN_SPLIT_F32 = _f32(0.7)
_AS_F32 = tuple(
    _f32(c)
    for c in (
        0.16666632051544547,
        0.07502178824956454,
        0.0441772445955222,
        0.035139500588461686,
        -0.004016145540358802,
        0.09984021037478977,
        -0.12591661598784554,
        0.11851885177362566,
    )
)
_AS0_F32, _AS1_F32, _AS2_F32, _AS3_F32, _AS4_F32, _AS5_F32, _AS6_F32, _AS7_F32 = _AS_F32


@njit(inline="always")
def atan_f32(x):
    """atan in float32: <= 2 ulp; +-pi/2 at +-inf, NaN propagates, atan(-0) = -0.

    |x| reduced to |t| <= 1/2 by atan(a) = pi/2 + atan(-1/a) (a > tan(3pi/8)) or
    pi/4 + atan((a - 1) / (a + 1)) (a >= 1/2): one division for every lane, its
    numerator and denominator selected; then the odd polynomial, the offset added in two
    parts, and the sign of x."""
    a = abs(x)
    big = a > _pin(_TAN_3PI8_F32)
    mid = a >= _pin(_ATAN_MID_F32)
    num = -_pin(_ONE_F32) if big else (a - _pin(_ONE_F32) if mid else a)
    den = a if big else (a + _pin(_ONE_F32) if mid else _pin(_ONE_F32))
    t = num / den
    hi = _pin(_PIO2_HI_F32) if big else (_pin(_PIO4_HI_F32) if mid else _ZERO_F32)
    lo = _pin(_PIO2_LO_F32) if big else (_pin(_PIO4_LO_F32) if mid else _ZERO_F32)
    z = t * t
    p = t + t * z * (
        _pin(_AT0_F32)
        + z * (_pin(_AT1_F32) + z * (_pin(_AT2_F32) + z * (_pin(_AT3_F32) + z * _pin(_AT4_F32))))
    )
    return math.copysign(hi + (p + lo), x)


@njit(inline="always")
def _asin_core_f32(a):
    """``(p, big)``: p = asin(a) for 0 <= a <= 0.7 (big False), else p = asin(sqrt((1 - a)
    / 2)) (big True; NaN for a > 1). 1 - a is exact there (Sterbenz)."""
    big = a > _pin(_ASIN_SPLIT_F32)
    z = _pin(_HALF_F32) * (_pin(_ONE_F32) - a) if big else a * a
    w = math.sqrt(z) if big else a
    s = _pin(_AS0_F32) + z * (
        _pin(_AS1_F32)
        + z
        * (
            _pin(_AS2_F32)
            + z
            * (
                _pin(_AS3_F32)
                + z
                * (
                    _pin(_AS4_F32)
                    + z * (_pin(_AS5_F32) + z * (_pin(_AS6_F32) + z * _pin(_AS7_F32)))
                )
            )
        )
    )
    return w + w * z * s, big


@njit(inline="always")
def asin_f32(x):
    """asin in float32: <= 2 ulp; NaN outside [-1, 1] and for NaN, asin(-0) = -0."""
    p, big = _asin_core_f32(abs(x))
    r = _pin(_PIO2_HI_F32) - (_pin(_TWO_F32) * p - _pin(_PIO2_LO_F32)) if big else p
    return math.copysign(r, x)


@njit(inline="always")
def acos_f32(x):
    """acos in float32: <= 2 ulp; NaN outside [-1, 1] and for NaN.

    |x| <= 0.7: pi/2 - asin(x) (no cancellation: the result is >= 0.79); above,
    2 asin(sqrt((1 - x) / 2)), and pi minus that for x < -0.7."""
    p, big = _asin_core_f32(abs(x))
    small = _pin(_PIO2_HI_F32) - (math.copysign(p, x) - _pin(_PIO2_LO_F32))
    twice = _pin(_TWO_F32) * p
    far = _pin(_PI_HI_F32) - (twice - _pin(_PI_LO_F32)) if x < _ZERO_F32 else twice
    return far if big else small


# ---------------------------------------------------------------------------------------------
# gelu (erf form)
# ---------------------------------------------------------------------------------------------


@njit(inline="always")
def gelu_f32(x):
    """x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) in float32 (see the module docstring): within
    ``GELU_F32_BUDGET``; gelu(+inf) = +inf, gelu(-inf) = NaN, exactly x for x >= 13.265 and -0
    for x <= -13.265, gelu(-0) = -0, NaN propagates. No libm call: loops vectorise."""
    a0 = abs(x)
    a = _pin(_GELU_CLAMP) if a0 > _pin(_GELU_CLAMP) else a0  # NaN stays NaN
    b = a * _pin(_GELU_C)  # b^2 = a^2 / (2 ln 2): e^(-a^2/2) = 2^(-b^2)
    t = _pin(_SHIFT_BIASED_F32) - b * b  # k + 127 in the low mantissa bits, k = round(-b^2)
    kf = t - _pin(_SHIFT_BIASED_F32)
    n = b * b + kf  # -r: 2^(-b^2) = 2^k 2^r with |r| <= 1/2
    # 2^r's polynomial in Estrin's order (see exp_nonpos_normal_f32)
    n2 = n * n
    p = (_pin(_ONE_F32) + _pin(_GF1) * n) + n2 * (
        (_pin(_GF2) + _pin(_GF3) * n) + n2 * (_pin(_GF4) + _pin(_GF5) * n)
    )
    s = np.int32(np.float32(t).view(np.int32) << 23).view(np.float32)  # 2^k (+0 at k = -127)
    sb = (_pin(_GP0) + b * (_pin(_GP1) + b * _pin(_GP2))) / (
        _pin(_GQ0) + b * (_pin(_GQ1) + b * (_pin(_GQ2) + b * (_pin(_GQ3) + b)))
    )
    d = (p * s) * (_pin(_HALF_F32) + b * sb)  # Phi(-a)
    # max(x, 0) as x * 0 for x < 0: -inf * 0 is the NaN the formula gives at -inf (-inf * 0)
    # without a compare and select of its own; NaN, +-0 and +inf stay. The test is on the sign
    # bit, which x86's vblendvps reads from x itself (no compare): -0 and a negative NaN take
    # x * 0, which is themselves again
    u = x * _ZERO_F32 if np.float32(x).view(np.int32) < 0 else x
    return u - a * d


@njit(inline="always")
def gelu_f64(x):
    """0.5 x (1 + erf(x / sqrt 2)) in float64 with libm's erf (as :func:`erf_f64`)."""
    return _HALF_F64 * x * (_ONE_F64 + math.erf(x * _SQRT1_2_F64))


# ---------------------------------------------------------------------------------------------
# gelu (tanh form)
# ---------------------------------------------------------------------------------------------

# u = sqrt(2/pi) (x + 0.044715 x^3)
_SQRT_2_PI_F64 = _f64(math.sqrt(2.0 / math.pi))
_GELU_K3_F64 = _f64(0.044715)
# -2u = x (_GT_A + _GT_B x^2)
_GT_A = _f32(-2.0 * _SQRT_2_PI_F64)
_GT_B = _f32(-2.0 * _SQRT_2_PI_F64 * _GELU_K3_F64)
# -2u is clamped to [_EXP_NONPOS_MIN_F32, _GT_HI]: k = round(-2u log2(e)) then lies in
# [-127, 128], whose biased exponent fields 0 and 255 make 2^k +0 and +inf.
_GT_HI = _f32(88.5)


@njit(inline="always")
def gelu_tanh_f32(x):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) in float32 (see the module docstring),
    within ``GELU_TANH_F32_BUDGET``; +inf gives +inf, -inf NaN (-inf * 0, as the formula),
    NaN propagates, -0 stays -0, x far below 0 gives x e^(-2u) down to -0. No libm call:
    loops vectorise."""
    z0 = x * (_pin(_GT_A) + _pin(_GT_B) * (x * x))  # -2u; +-inf when x^2 overflows
    z1 = _pin(_GT_HI) if z0 > _pin(_GT_HI) else z0  # NaN stays NaN
    z = _pin(_EXP_NONPOS_MIN_F32) if z1 < _pin(_EXP_NONPOS_MIN_F32) else z1
    # e^z, +0 at the low clamp (x / 1 = x) and +inf at the high one (x / inf = -0, NaN for -inf)
    e = exp_nonpos_normal_f32(z)
    return x / (_pin(_ONE_F32) + e)


@njit(inline="always")
def gelu_tanh_f64(x):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) in float64 with :func:`tanh_f64`."""
    u = _SQRT_2_PI_F64 * (x + _GELU_K3_F64 * x * x * x)
    return _HALF_F64 * x * (_ONE_F64 + tanh_f64(u))


# --------------------------------------------------------------------------------------------
# Type-dispatching names for kernels that are compiled for several float types. In jitted code
# ``vexp(x)`` becomes exp_f32 for a float32 x and exp_f64 for a float64 x (chosen at typing
# time, compiled once per process and type, and inlined by LLVM into the caller's loop, which
# then vectorises), and the libm function for any other number type. Called from Python
# they are the math functions. Keep constants in the operand's type (``x.dtype.type(0.5)``):
# a float64 literal promotes a float32 operand and picks the float64 flavour.


def vexp(x):
    """e^x (see the dispatch note above)."""
    return math.exp(x)


def vexp_nonpos(x):
    """e^x for x <= 0 (see the dispatch note above and :func:`exp_nonpos_f32`)."""
    return math.exp(x)


def vexp_nonpos_normal(x):
    """e^x for ``EXP_NONPOS_NORMAL_MIN <= x <= 0`` (see the dispatch note above and
    :func:`exp_nonpos_normal_f32`; float64 takes :func:`exp_f64`)."""
    return math.exp(x)


def vlog(x):
    """Natural logarithm (see the dispatch note above)."""
    return math.log(x)


def vtanh(x):
    """tanh (see the dispatch note above)."""
    return math.tanh(x)


def verf(x):
    """erf (see the dispatch note above)."""
    return math.erf(x)


def vgelu(x):
    """GELU, erf form: 0.5 x (1 + erf(x / sqrt 2)) (see the dispatch note above and
    :func:`gelu_f32`)."""
    return 0.5 * x * (1.0 + math.erf(x * 0.7071067811865476))


def vgelu_tanh(x):
    """GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (see the dispatch
    note above and :func:`gelu_tanh_f32`)."""
    return 0.5 * x * (1.0 + math.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def vsigmoid(x):
    """1 / (1 + e^-x) (see the dispatch note above)."""
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def _register(generic, f32, f64) -> None:
    def typer(x):
        if x == types.float32:
            return lambda x: f32(x)
        if x == types.float64:
            return lambda x: f64(x)
        if isinstance(x, (types.Float, types.Integer)):

            def other(x):
                return f64(np.float64(x))

            return other
        return None

    # Not inline="always": Numba would inline and type the whole polynomial chain again at
    # every call site, which doubled the compile time of the GEMM epilogue's activation
    # switch (4.2 -> 2.0 s on the Zen 3); LLVM inlines the compiled function just as well
    # (same run time). Its own options: the numpy error model (no division checks) and
    # contraction, which the polynomials are written for (see kernels/_jit.py).
    overload(generic, jit_options={"error_model": "numpy", "fastmath": {"contract"}})(typer)


_register(vexp, exp_f32, exp_f64)
_register(vexp_nonpos, exp_nonpos_f32, exp_nonpos_f64)
_register(vexp_nonpos_normal, exp_nonpos_normal_f32, exp_nonpos_f64)
_register(vlog, log_f32, log_f64)
_register(vtanh, tanh_f32, tanh_f64)
_register(verf, erf_f32, erf_f64)
_register(vsigmoid, sigmoid_f32, sigmoid_f64)
_register(vgelu, gelu_f32, gelu_f64)
_register(vgelu_tanh, gelu_tanh_f32, gelu_tanh_f64)
