"""Accuracy, special values and vectorisation of kernels/vecmath.py and the scalar helpers on it.

Oracle: numpy (and scipy.special for erf / expit, falling back to math.erf) evaluated in float64.
For a float32 function the float64 result is within ~1e-16 of the truth, so its distance to the
float32 result, in float32 ulps of the rounded reference, is the error of the float32 function
(a correctly rounded function scores <= 0.5). For a float64 function the oracle is libm's own
float64 function, so the measured error includes the oracle's (<= ~1 ulp).

Grids: for every float32 binade of the domain, both signs, a fixed-seed sample of mantissas plus
the binade's end points; every float32 in small windows around the points where a method changes
(range-reduction boundaries, polynomial/formula splits, overflow/underflow thresholds); and the
special values (+-0, +-inf, NaN, subnormals, the largest finite values).

The budgets are ``vecmath.ULP_BUDGET``; the composite helpers of kernels/scalar.py (softplus,
mish, gelu) are checked against float64 compositions with their own bounds below.
"""

from __future__ import annotations

import math
import re
import warnings

import numba
import numpy as np
import pytest

from onnxjit.kernels import scalar as S
from onnxjit.kernels import vecmath as V

try:
    from scipy import special as _sp
except ImportError:  # scipy comes with scikit-learn; keep a (slow) pure fallback
    _sp = None


def _erf64(x: np.ndarray) -> np.ndarray:
    if _sp is not None:
        return _sp.erf(x)
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _sigmoid64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.where(x >= 0, 1.0 / (1.0 + np.exp(-x)), np.exp(x) / (1.0 + np.exp(x)))


def _softplus64(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def _mish64(x: np.ndarray) -> np.ndarray:
    return x * np.tanh(_softplus64(x))


def _gelu64(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf64(x / np.sqrt(2.0)))


def _gelu_tanh64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


# ---------------------------------------------------------------------------------------------
# Loops (one compiled loop per function; not cached so that each run checks the current code)
# ---------------------------------------------------------------------------------------------

_LOOPS: dict = {}


def _loop(fn, fma: bool = False):
    """A compiled ``y[i] = fn(x[i])`` loop over 1-D arrays.

    ``fma``: compiled with floating-point contraction, as the generated and activation
    kernels are (kernels/_jit.py), which changes how the polynomials round.
    """
    if (fn, fma) not in _LOOPS:

        def body(x, y):
            for i in range(x.size):
                y[i] = fn(x[i])

        # error_model="numpy" as in onnxjit's own kernels: a division must not raise
        opts: dict = {"error_model": "numpy"}
        if fma:
            opts["fastmath"] = {"contract"}
        _LOOPS[fn, fma] = numba.njit(**opts)(body)
    return _LOOPS[fn, fma]


def _apply(fn, x: np.ndarray, fma: bool = False) -> np.ndarray:
    y = np.empty_like(x)
    _loop(fn, fma)(x, y)
    return y


# ---------------------------------------------------------------------------------------------
# Grids
# ---------------------------------------------------------------------------------------------


def _window32(v: float, n: int = 2000) -> np.ndarray:
    """Every float32 within n steps of v (v itself rounded to float32)."""
    b = int(np.float32(v).view(np.int32))
    bits = np.arange(b - n, b + n + 1, dtype=np.int64)
    if v >= 0:
        bits = bits[(bits >= 0) & (bits < 0x7F800000)]
    else:
        bits = bits[(bits < 0) & (bits >= -0x00800001)] if v == 0 else bits
    return bits.astype(np.int32).view(np.float32)


def _binades32(lo_exp: int, hi_exp: int, per: int, seed: int) -> np.ndarray:
    """Positive float32 samples: ``per`` mantissas in each binade 2^e, lo_exp <= e <= hi_exp,
    plus the binade edges; exponents below -126 give subnormals."""
    rng = np.random.default_rng(seed)
    out = []
    for e in range(lo_exp, hi_exp + 1):
        if e < -126:  # subnormals: bits 1 .. 2^23-1 sampled
            bits = rng.integers(1, 1 << 23, per)
            out.append(bits.astype(np.int32).view(np.float32))
            continue
        base = (e + 127) << 23
        m = rng.integers(0, 1 << 23, per)
        bits = np.concatenate([base + m, [base, base + (1 << 23) - 1]])
        out.append(bits.astype(np.int64).astype(np.int32).view(np.float32))
    return np.unique(np.concatenate(out))


def _both(v: np.ndarray) -> np.ndarray:
    return np.concatenate([v, -v])


def _grid32(lo_exp: int, hi_exp: int, windows: list[float], signed: bool, per: int = 600):
    pos = _binades32(lo_exp, hi_exp, per, seed=lo_exp + 1000 * hi_exp)
    parts = [_both(pos) if signed else pos]
    parts += [_window32(w) for w in windows]
    x = np.concatenate(parts).astype(np.float32)
    return x[np.isfinite(x)]


def _ulps32(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|y - ref| in float32 ulps of the rounded reference; matching inf/NaN count as 0."""
    with np.errstate(all="ignore"):
        r32 = ref.astype(np.float32)
        err = np.abs(y.astype(np.float64) - ref) / np.spacing(np.abs(r32)).astype(np.float64)
    same = (np.isnan(y) & np.isnan(ref)) | ((y == r32) & np.isinf(r32))
    err[same] = 0.0
    err[np.isnan(err)] = np.inf
    return err


def _ulps64(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        err = np.abs(y - ref) / np.spacing(np.abs(ref))
    same = (np.isnan(y) & np.isnan(ref)) | ((y == ref) & np.isinf(ref))
    err[same] = 0.0
    err[np.isnan(err)] = np.inf
    return err


def _worst(err: np.ndarray, x: np.ndarray, y: np.ndarray, ref: np.ndarray) -> str:
    i = int(np.argmax(err))
    return f"{err[i]:.3f} ulp at x={x[i]!r}: got {y[i]!r}, want {ref[i]!r}"


# exp: thresholds, k changes at odd multiples of ln2/2, the subnormal range
_EXP_WIN = [88.72283172607422, -103.97207641601562, -87.33654, -0.34657359, 0.34657359, 0.0]
_EXP_WIN += [(k + 0.5) * math.log(2) for k in (-150, -126, -100, -2, 1, 5, 60, 127)]
# log: the mantissa split at sqrt(1/2), 1, powers of two, the smallest normal, subnormals
_LOG_WIN = [0.7071067811865476, 1.0, 2.0, 0.5, 1.1754943508222875e-38, 1e-45, 3.4028235e38]
_TANH_WIN = [0.625, 9.0, 10.0, 1e-4, 0.0]
_ERF_WIN = [1.0, 3.92, 2.0, 1e-4, 0.0]


def _nonpos_exp_grid() -> np.ndarray:
    """x <= 0 down to where e^x is the smallest normal float32 (exp_nonpos_f32's contract)."""
    x = -_grid32(-149, 7, [-w for w in _EXP_WIN if w < 0] + [0.0, 0.34657359], False)
    return x[(x <= 0) & (x >= np.float32(V.EXP_NONPOS_NORMAL_MIN))]


# expm1 (x <= 0): k changes at odd multiples of -ln2/2, 2^k - 1 stops being exact below
# -17.33 (the result is -1), the clamp at -20
_EXPM1_WIN = [-0.34657359, -1.03972077, -1.73286795, -17.328679, -20.0, -1e-4, 0.0]


def _nonpos_expm1_grid() -> np.ndarray:
    return -_grid32(-149, 7, [-w for w in _EXPM1_WIN], False)


# atan: the reduction's switch points tan(pi/8) and tan(3pi/8), 1; asin/acos: the split at
# 0.7, the ends of the domain (values past +-1 give NaN, which the test leaves out)
_ATAN_WIN = [0.41421356, 2.4142135, 1.0, 1e-4, 0.0]
_ASIN_WIN = [0.7, -0.7, 0.5, 1.0, -1.0, 1e-4, 0.0]


def _unit_grid() -> np.ndarray:
    # up to |x| < 16: the test drops the NaN results past +-1 (test_inverse_trig_special_values
    # checks them), so the binades below 1 are the ones measured
    return _grid32(-149, 3, _ASIN_WIN, True)


F32_CASES = {
    # name: (function, oracle, grid)
    "exp_f32": (V.exp_f32, np.exp, lambda: _grid32(-149, 7, _EXP_WIN, True)),
    "exp_nonpos_f32": (V.exp_nonpos_f32, np.exp, lambda: _nonpos_exp_grid()),
    "exp_nonpos_normal_f32": (V.exp_nonpos_normal_f32, np.exp, lambda: _nonpos_exp_grid()),
    "expm1_nonpos_f32": (V.expm1_nonpos_f32, np.expm1, lambda: _nonpos_expm1_grid()),
    "log_f32": (V.log_f32, np.log, lambda: _grid32(-149, 127, _LOG_WIN, False)),
    "log1p_f32": (
        V.log1p_f32,
        np.log1p,
        lambda: np.concatenate(
            [
                _grid32(-149, 127, [1e-4, 0.0, 0.41421356, -0.29289322], False),
                -_binades32(-149, -1, 600, seed=7),
                _window32(-0.99999994, 3000),
            ]
        ),
    ),
    "tanh_f32": (V.tanh_f32, np.tanh, lambda: _grid32(-149, 6, _TANH_WIN, True)),
    "sigmoid_f32": (V.sigmoid_f32, _sigmoid64, lambda: _grid32(-149, 7, _EXP_WIN, True)),
    "erf_f32": (V.erf_f32, _erf64, lambda: _grid32(-149, 3, _ERF_WIN, True)),
    "atan_f32": (V.atan_f32, np.arctan, lambda: _grid32(-149, 127, _ATAN_WIN, True)),
    "asin_f32": (V.asin_f32, np.arcsin, _unit_grid),
    "acos_f32": (V.acos_f32, np.arccos, _unit_grid),
}


_FMA = pytest.mark.parametrize("fma", [False, True], ids=["plain", "fma"])


@_FMA
@pytest.mark.parametrize("name", sorted(F32_CASES))
def test_float32_within_ulp_budget(name: str, fma: bool) -> None:
    fn, oracle, grid = F32_CASES[name]
    x = grid()
    y = _apply(fn, x, fma)
    assert y.dtype == np.float32
    with np.errstate(all="ignore"):
        ref = oracle(x.astype(np.float64))
    # the log functions are only defined on their domain; the domain's edge is tested below
    ok = ~np.isnan(ref)
    err = _ulps32(y[ok], ref[ok])
    assert err.max() <= V.ULP_BUDGET[name], _worst(err, x[ok], y[ok], ref[ok])


def _grid64(lo_exp: int, hi_exp: int, signed: bool, windows=(), per: int = 400, seed: int = 0):
    rng = np.random.default_rng(seed)
    out = []
    for e in range(lo_exp, hi_exp + 1):
        out.append(np.ldexp(1.0 + rng.random(per), e))
        out.append(np.ldexp(np.array([1.0, 2.0 - 2.0**-52]), e))
    if lo_exp < -1022:
        out.append(rng.integers(1, 1 << 52, per).view(np.float64))  # subnormals
    pos = np.concatenate(out)
    parts = [np.concatenate([pos, -pos]) if signed else pos]
    for w in windows:
        b = np.float64(w).view(np.int64)
        parts.append(np.arange(b - 500, b + 501, dtype=np.int64).view(np.float64))
    x = np.concatenate(parts)
    return x[np.isfinite(x)]


F64_CASES = {
    "exp_f64": (
        V.exp_f64,
        np.exp,
        lambda: _grid64(-1074, 9, True, [709.782712893384, -745.1332191019412, -708.39641853]),
    ),
    "log_f64": (
        V.log_f64,
        np.log,
        lambda: _grid64(-1074, 1023, False, [0.7071067811865476, 1.0, 2.2250738585072014e-308]),
    ),
    "log1p_f64": (
        V.log1p_f64,
        np.log1p,
        lambda: np.concatenate(
            [_grid64(-1074, 1023, False, [1e-8]), -_grid64(-1074, -1, False, [0.9999999])]
        ),
    ),
    "tanh_f64": (V.tanh_f64, np.tanh, lambda: _grid64(-1074, 5, True, [0.625, 19.0])),
    "sigmoid_f64": (V.sigmoid_f64, _sigmoid64, lambda: _grid64(-1074, 10, True, [-708.4])),
}


@_FMA
@pytest.mark.parametrize("name", sorted(F64_CASES))
def test_float64_within_ulp_budget(name: str, fma: bool) -> None:
    fn, oracle, grid = F64_CASES[name]
    x = grid()
    x = x[~np.isnan(oracle(x))] if name.startswith("log") else x
    y = _apply(fn, x, fma)
    assert y.dtype == np.float64
    with np.errstate(all="ignore"):
        ref = oracle(x)
    err = _ulps64(y, ref)
    assert err.max() <= V.ULP_BUDGET[name], _worst(err, x, y, ref)


_SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, -1e-40, 1.0, -1.0]
_SPECIALS += [3.4028235e38, -3.4028235e38, 1.1754944e-38, -1.1754944e-38]

_ALL = [
    ("exp", V.exp_f32, V.exp_f64, np.exp),
    ("log", V.log_f32, V.log_f64, np.log),
    ("log1p", V.log1p_f32, V.log1p_f64, np.log1p),
    ("tanh", V.tanh_f32, V.tanh_f64, np.tanh),
    ("sigmoid", V.sigmoid_f32, V.sigmoid_f64, _sigmoid64),
    ("erf", V.erf_f32, V.erf_f64, _erf64),
]


@_FMA
@pytest.mark.parametrize("name,f32,f64,oracle", _ALL, ids=[a[0] for a in _ALL])
def test_special_values(name, f32, f64, oracle, fma) -> None:
    """NaN propagates; overflow -> inf, underflow -> 0 (subnormals kept), log(0) = -inf,
    log(<0) = NaN, saturation to +-1 and to 0 / 1; the sign of a zero result is numpy's."""
    for dt, fn in ((np.float32, f32), (np.float64, f64)):
        x = np.array(_SPECIALS + [-1.0000001, 88.8, -104.0, 1e5, -1e5], dtype=dt)
        if dt == np.float64:
            x = np.concatenate([x, [710.0, -746.0, 5e-324, -5e-324, 1.7976931348623157e308]])
        y = _apply(fn, x, fma)
        with np.errstate(all="ignore"):
            want = oracle(x.astype(np.float64)).astype(dt)
        for xi, yi, wi in zip(x, y, want):
            if np.isnan(wi):
                assert np.isnan(yi), (name, dt, xi, yi)
            elif wi == 0 or np.isinf(wi) or abs(wi) == 1:
                # exact results: zeros (with numpy's sign), infinities, saturation
                assert yi == wi and np.signbit(yi) == np.signbit(wi), (name, dt, xi, yi, wi)
            else:
                assert abs(float(yi) - float(wi)) <= 4 * np.spacing(abs(wi)), (name, dt, xi, yi)


def test_exp_keeps_subnormal_results() -> None:
    """exp_f32 rounds into the subnormal range instead of flushing (and so does sigmoid)."""
    x = np.linspace(-103.9, -87.4, 5001).astype(np.float32)
    y = _apply(V.exp_f32, x)
    ref = np.exp(x.astype(np.float64))
    assert np.all(y > 0)
    err = np.abs(y - ref) / np.spacing(np.float32(0))  # in units of the smallest subnormal
    assert err.max() <= 1.0
    s = _apply(V.sigmoid_f32, x)
    assert np.all(s > 0)


# ---------------------------------------------------------------------------------------------
# gelu_f32 (erf form, vecmath.GELU_F32_BUDGET) and gelu_tanh_f32 (vecmath.GELU_TANH_F32_BUDGET)
# ---------------------------------------------------------------------------------------------


def _gelu_erfc64(x: np.ndarray) -> np.ndarray:
    """x Phi(x) in float64 without the 1 + erf cancellation (exact far into the x < 0 tail)."""
    if _sp is not None:
        return x * 0.5 * _sp.erfc(-x / np.sqrt(2.0))
    return x * 0.5 * np.vectorize(math.erfc, otypes=[np.float64])(-x / np.sqrt(2.0))


# where gelu_f32 changes: k = round(-x^2 / (2 ln 2)) steps at x^2 = 2 ln2 (k + 1/2), the clamp
# (2^k is +0 beyond it), the last normal 2^k, the result leaving the normal range
_GELU_WIN = [math.sqrt(2 * math.log(2) * (k + 0.5)) for k in (0, 1, 2, 10, 60, 125, 126)]
_GELU_WIN += [13.265, 13.2, 12.9, 1.0, 1e-4, 0.0]
# where gelu_tanh_f32 changes: -2u reaching its clamps (-88 and 88.5: x near +-10.4),
# e^(-2u) crossing 2^-24 (the result rounding to x, x near 4.2), the middle of the range, 0
_GELU_TANH_WIN = [0.5, 1.0, 2.0, 4.2, 5.0, 10.3, 10.4, 10.5, 1e-4, 0.0]


def _gelu_grid(windows: list[float] = _GELU_WIN, seed: int = 11) -> np.ndarray:
    """Every 64th float32 of 1e-3 <= |x| <= 16 (~3.7M values: a relative step of 64 ulps),
    binade samples below that down to the subnormals, every float32 within 2000 steps of the
    points in ``windows`` (both signs)."""
    lo, hi = (int(np.float32(v).view(np.int32)) for v in (1e-3, 16.0))
    dense = np.arange(lo, hi + 1, 64, dtype=np.int32).view(np.float32)
    small = _binades32(-149, -10, 300, seed=seed)
    wins = np.concatenate([_window32(w) for w in windows])
    return np.concatenate([_both(dense), _both(small), _both(wins[wins > 0]), [0.0, -0.0]])


# form -> (float32 helper, float64 oracle, budget, grid windows)
_GELU_FORMS = {
    "erf": (V.gelu_f32, _gelu_erfc64, V.GELU_F32_BUDGET, _GELU_WIN),
    "tanh": (V.gelu_tanh_f32, _gelu_tanh64, V.GELU_TANH_F32_BUDGET, _GELU_TANH_WIN),
}
_GELU_FORM = pytest.mark.parametrize("form", sorted(_GELU_FORMS))


@_FMA
@_GELU_FORM
def test_gelu_f32_within_budget(form: str, fma: bool) -> None:
    """|gelu(x) - ref(x)| <= ulps * ulp(|ref(x)|) + abs_x * |x| against float64, and never the
    wrong sign. erf form (vecmath.GELU_F32_BUDGET, 2 ulp + 7e-8 |x|): measured 2 ulp +
    5.4e-8 |x| plain, 4.9e-8 |x| with contraction, against scipy's erfc; the erf_f32
    composition it replaced measured 2 ulp + 3.5e-8 |x|, the rational erf (x P(x^2) / Q(x^2))
    it was weighed against ~2 ulp + 1.6e-7 |x| (its float32 Horner rounding alone is ~5 ulp of
    0.5 erf). tanh form (GELU_TANH_F32_BUDGET, 2 ulp + 2e-8 |x|): measured 1.5e-8 |x| plain,
    1.4e-8 with contraction, against the float64 formula (whose own 1 + tanh loses digits
    beyond |x| = 6, where the |x| term is a million times the result); the tanh_f32
    composition it replaced needs 3.6e-8 |x|."""
    fn, oracle, budget, windows = _GELU_FORMS[form]
    x = _gelu_grid(windows, seed=11 if form == "erf" else 12).astype(np.float32)
    y = _apply(fn, x, fma)
    assert y.dtype == np.float32
    x64 = x.astype(np.float64)
    ref = oracle(x64)
    ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    excess = np.abs(y - ref) - budget["ulps"] * ulp - budget["abs_x"] * np.abs(x64)
    i = int(np.argmax(excess))
    assert excess[i] <= 0, (
        f"x={x[i]!r}: got {y[i]!r}, want {ref[i]!r} "
        f"({abs(y[i] - ref[i]) / ulp[i]:.2f} ulp, {abs(y[i] - ref[i]) / abs(x64[i]):.3g} |x|)"
    )
    assert not np.any((x > 0) & (y < 0)) and not np.any((x < 0) & (y > 0))


@_FMA
@_GELU_FORM
def test_gelu_f32_special_values(form: str, fma: bool) -> None:
    """NaN propagates, gelu(+inf) = +inf, gelu(-inf) = NaN (-inf * 0, as the float64 formula
    and onnxruntime give), +-0 keep their sign, subnormal x give x / 2 (to the last
    subnormal), x >= 6 gives x itself (gelu(x) rounds to x there) and x far below 0 gives -0
    (erf form: x <= -13.265; tanh form: x <= -11, also where x^2 overflows float32). For
    x < 0 neither form has the 1 + erf (1 + tanh) cancellation: relative error under 2e-6
    (erf; tanh 1.5e-6) down to x = -3 and 5e-4 (tanh 1e-5) down to -6, where the compositions
    measured 1.2e-5 and 100 %."""
    fn, oracle, _, _ = _GELU_FORMS[form]
    f32 = np.float32
    sp = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], f32)
    y = _apply(fn, sp, fma)
    assert np.isnan(y[0]) and y[1] == np.inf and np.isnan(y[2])
    assert y[3] == 0 and not np.signbit(y[3]) and y[4] == 0 and np.signbit(y[4])
    big = np.concatenate([np.linspace(6, 20, 5001, dtype=f32), f32([1e5, 1e20, 1e30, 3.4e38])])
    np.testing.assert_array_equal(_apply(fn, big, fma), big)
    y = _apply(fn, -big[big >= (f32(13.265) if form == "erf" else 11)], fma)
    assert np.all(y == 0) and np.all(np.signbit(y))
    sub = _binades32(-149, -127, 200, seed=3)
    for s in (sub, -sub):
        y = _apply(fn, s, fma).astype(np.float64)
        assert np.all(np.abs(y - s.astype(np.float64) / 2) <= 2.0**-149)
    tails = (
        ((-3, -1e-3, 2e-6), (-6, -3, 5e-4))
        if form == "erf"
        else ((-3, -1e-3, 1.5e-6), (-6, -3, 1e-5))
    )
    for lo, hi, rel in tails:
        x = np.linspace(lo, hi, 20001, dtype=f32)
        y = _apply(fn, x, fma)
        ref = oracle(x.astype(np.float64))
        assert np.max(np.abs(y - ref) / np.abs(ref)) < rel, (lo, hi)


@_GELU_FORM
def test_gelu_kernels_use_vecmath_gelu(form: str) -> None:
    """onnxjit's fused Gelu with a bias row (one generated kernel: small, odd and long rows,
    and more data than prefetch.ROW_STREAMS_MAX_BYTES, on the pool) and the GEMM/conv
    epilogue (ACT_GELU, ACT_GELU_TANH) give exactly gelu_f32's (gelu_tanh_f32's) values of
    x + bias on float32 (compiled, as they are, with contraction) and keep the formula on
    float64 (libm's erf; tanh_f64)."""
    from onnxjit.kernels.cpu import epilogue as ep
    from onnxjit.kernels.cpu.runtime.prefetch import ROW_STREAMS_MAX_BYTES
    from onnxjit.ops.elementwise import generated_gelu

    fn = _GELU_FORMS[form][0]
    tanh_form = form == "tanh"
    approximate = "tanh" if tanh_form else "none"
    act = ep.ACT_GELU_TANH if tanh_form else ep.ACT_GELU
    formula64 = _gelu_tanh64 if tanh_form else _gelu64
    rng = np.random.default_rng(4)
    n_long = 1024
    big = ROW_STREAMS_MAX_BYTES // (2 * 4 * n_long) + 1
    for rows, n in ((3, 7), (3, 517), (3, n_long), (big, n_long)):
        x = (rng.standard_normal((rows, n)) * 4).astype(np.float32)
        b = (rng.standard_normal(n) * 0.1).astype(np.float32)
        want = _apply(fn, (x + b).ravel(), fma=True).reshape(x.shape)
        np.testing.assert_array_equal(generated_gelu(x, approximate, b), want)
        v = (x + b)[0].copy()
        ep.activate(v, act, np.float32(0), np.float32(0))
        np.testing.assert_array_equal(v, want[0])
        # float64: 1 + erf (1 + tanh) cancelling for x < 0 as in the formula
        x64, b64 = x.astype(np.float64), b.astype(np.float64)
        y64 = generated_gelu(x64, approximate, b64)
        v64 = x64[0] + b64
        ep.activate(v64, act, 0.0, 0.0)
        ref64 = formula64(x64 + b64)
        tol64 = 1e-14 * np.abs(ref64) + 2 * np.finfo(np.float64).eps * np.abs(x64 + b64)
        assert np.all(np.abs(y64 - ref64) <= tol64) and np.all(np.abs(v64 - ref64[0]) <= tol64[0])


# ---------------------------------------------------------------------------------------------
# Composite helpers of kernels/scalar.py
# ---------------------------------------------------------------------------------------------

_COMPOSITES = [
    # name, f32, f64, oracle, ulp bound, absolute bound as a multiple of |x| * eps32
    ("softplus", S.softplus_f32, S.softplus_f64, _softplus64, 3, 0),
    # mish(x) for x < -87 is x * softplus(x) with softplus(x) subnormal: a few bits only
    ("mish", S.mish_f32, S.mish_f64, _mish64, 4, "subnormal"),
    # 1 + erf(x/sqrt 2) cancels for x << 0: the erf error (absolute, ~eps) is scaled by x/2
    ("gelu", S.gelu_f32, S.gelu_f64, _gelu64, 3, 2),
    ("gelu_tanh", S.gelu_tanh_f32, S.gelu_tanh_f64, _gelu_tanh64, 4, 2),
]


@pytest.mark.parametrize(
    "name,f32,f64,oracle,ulp,absx", _COMPOSITES, ids=[c[0] for c in _COMPOSITES]
)
def test_composite_helpers(name, f32, f64, oracle, ulp, absx) -> None:
    x = np.concatenate([_grid32(-30, 7, [0.0, -5.0, 5.0, 20.0], True, per=300)])
    x = np.concatenate([x, np.array([np.inf, -np.inf, np.nan, 1e30, -1e30], np.float32)])
    y = _apply(f32, x)
    with np.errstate(all="ignore"):
        ref = oracle(x.astype(np.float64))
        r32 = ref.astype(np.float32)
        bound = ulp * np.spacing(np.abs(r32)).astype(np.float64)
        if absx == "subnormal":
            bound += np.abs(x.astype(np.float64)) * 2.0**-149
        else:
            bound += absx * np.abs(x.astype(np.float64)) * np.finfo(np.float32).eps
        same = (np.isnan(y) & np.isnan(ref)) | (y == r32)
        bad = ~same & ~(np.abs(y - ref) <= bound)
    assert not bad.any(), (name, x[bad][:5], y[bad][:5], ref[bad][:5])
    # float64 flavour: within 1e-14 relative (+ the same cancellation allowance)
    x64 = x.astype(np.float64)
    y64 = _apply(f64, x64)
    with np.errstate(all="ignore"):
        bound64 = 1e-14 * np.abs(ref)
        if absx == "subnormal":
            bound64 += np.abs(x64) * 2.0**-1074
        else:
            bound64 += absx * np.abs(x64) * np.finfo(np.float64).eps
        bad64 = ~((np.isnan(y64) & np.isnan(ref)) | (y64 == ref)) & ~(np.abs(y64 - ref) <= bound64)
    assert not bad64.any(), (name, x64[bad64][:5], y64[bad64][:5], ref[bad64][:5])


# ELU family (kernels/scalar.py on vecmath.expm1_nonpos_f32): name, helper with its parameters
# bound, float64 oracle, ulp bound (expm1's 1.5 plus half an ulp per multiply after it).
_ELU_ALPHA, _SELU_GAMMA, _CELU_ALPHA = 1.6732632, 1.050701, 2.0
_ELUS = [
    (
        "elu",
        lambda x: S.elu_f32(x, np.float32(_ELU_ALPHA)),
        lambda x: np.where(x < 0, np.float64(np.float32(_ELU_ALPHA)) * np.expm1(x), x),
        2.0,
    ),
    (
        "selu",
        lambda x: S.selu_f32(x, np.float32(_ELU_ALPHA), np.float32(_SELU_GAMMA)),
        lambda x: (
            np.float64(np.float32(_SELU_GAMMA))
            * np.where(x <= 0, np.float64(np.float32(_ELU_ALPHA)) * np.expm1(x), x)
        ),
        2.5,
    ),
    (
        "celu",
        lambda x: S.celu_f32(x, np.float32(_CELU_ALPHA)),
        lambda x: np.where(x < 0, _CELU_ALPHA * np.expm1(x / _CELU_ALPHA), x),
        2.0,
    ),
    (
        # a negative alpha puts x / alpha above 0, outside expm1_nonpos: libm's expm1 then.
        # The oracle takes x / alpha rounded to float32 as the helper does: e^u turns that
        # rounding into a relative error of ~u ulps, which is the input's, not the helper's.
        "celu_negative_alpha",
        lambda x: S.celu_f32(x, np.float32(-1.5)),
        lambda x: np.where(
            x < 0, -1.5 * np.expm1((x.astype(np.float32) / np.float32(-1.5)).astype(np.float64)), x
        ),
        2.0,
    ),
]


@_FMA
@pytest.mark.parametrize("name,fn,oracle,ulp", _ELUS, ids=[e[0] for e in _ELUS])
def test_elu_family_helpers(name, fn, oracle, ulp, fma) -> None:
    """Elu, Selu and Celu in float32 against float64 numpy: within ``ulp`` ulps everywhere
    (both sides of 0, the saturation at -alpha, huge values, inf and NaN)."""
    x = _grid32(-149, 7, [0.0, -0.34657359, -17.328679, -20.0], True, per=300)
    x = np.concatenate([x, np.array([np.inf, -np.inf, np.nan, 1e30, -1e30, -0.0], np.float32)])
    f = numba.njit(inline="always")(fn)
    y = _apply(f, x, fma)
    with np.errstate(all="ignore"):
        ref = oracle(x.astype(np.float64))
    err = _ulps32(y, ref)
    assert err.max() <= ulp, _worst(err, x, y, ref)


def test_scalar_resolves_float_families_to_vecmath() -> None:
    from onnxjit.codegen.elementwise import helper_name

    for fam in ("exp", "log", "tanh", "erf", "sigmoid"):
        for dt, suffix in ((np.float32, "f32"), (np.float64, "f64")):
            name = helper_name(fam, dt)
            assert name == f"{fam}_{suffix}"
            assert getattr(S, name) is getattr(V, name)


def test_exp_nonpos_edges() -> None:
    """Between -87.34 and -87.68 (e^x below the smallest normal) the result is e^x to within
    one subnormal step; below that it is +0; NaN propagates, -inf gives 0 and 0 gives
    exactly 1; with and without contraction."""
    band = np.linspace(-87.6826, -87.33655, 64, dtype=np.float32)
    low = np.array([-87.6835, -88.0, -88.1, -100.0, -1e30, -np.inf], np.float32)
    x = np.concatenate([band, low, np.array([np.nan, 0.0, -0.0], np.float32)])
    tiny = np.float32(2.0**-149)
    for fma in (False, True):
        y = _apply(V.exp_nonpos_f32, x, fma)
        yb = y[: band.size]
        want = np.exp(band.astype(np.float64))
        assert np.all(np.abs(yb.astype(np.float64) - want) <= tiny), (band, yb, want)
        assert np.all(yb > 0)
        yl = y[band.size : band.size + low.size]
        assert np.all(yl == 0) and not np.any(np.signbit(yl))
        assert np.isnan(y[-3]) and y[-2] == 1 and y[-1] == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_maxnum_reduction_matches_numpy_and_skips_nan(dtype) -> None:
    @numba.njit
    def row_max(x):
        m = x[0]
        for i in range(x.size):
            m = V.maxnum(m, x[i])
        return m

    x = np.random.default_rng(5).standard_normal(1001).astype(dtype)
    assert row_max(x) == x.max()
    x[[0, 500]] = np.nan  # maxNum takes the other operand of a NaN
    assert row_max(x) == np.nanmax(x)
    assert row_max(np.array([np.nan], dtype)) != row_max(np.array([np.nan], dtype))  # NaN


# ---------------------------------------------------------------------------------------------
# Vectorisation
# ---------------------------------------------------------------------------------------------


def _has_avx2() -> bool:
    try:
        import llvmlite.binding as llvm

        feats = llvm.get_host_cpu_features()
        return bool(feats.get("avx2", False))
    except Exception:  # pragma: no cover - no feature query on this platform
        return False


@_FMA
@pytest.mark.parametrize(
    "fn,oracle",
    [(V.atan_f32, np.arctan), (V.asin_f32, np.arcsin), (V.acos_f32, np.arccos)],
    ids=["atan", "asin", "acos"],
)
def test_inverse_trig_special_values(fn, oracle, fma) -> None:
    """NaN in, NaN out; outside [-1, 1] asin and acos give NaN; atan(+-inf) = +-pi/2 and the
    sign of a zero is kept by the odd functions; the ends of the domain are exact."""
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1.0000001, -1.0000001, 3.0e38],
                 np.float32)  # fmt: skip
    y = _apply(fn, x, fma)
    with np.errstate(all="ignore"):
        want = oracle(x.astype(np.float64)).astype(np.float32)
    for xi, yi, wi in zip(x, y, want):
        if np.isnan(wi):
            assert np.isnan(yi), (fn.__name__, xi, yi)
        else:
            assert abs(float(yi) - float(wi)) <= np.spacing(abs(wi)), (fn.__name__, xi, yi, wi)
            if wi == 0:
                assert np.signbit(yi) == np.signbit(wi), (fn.__name__, xi, yi)


# one-argument forms of the ELU helpers, for the vectorisation check below
_ELU_ONE_ARG = numba.njit(inline="always")(lambda x: S.elu_f32(x, np.float32(1.0)))
_SELU_ONE_ARG = numba.njit(inline="always")(
    lambda x: S.selu_f32(x, np.float32(1.6732632), np.float32(1.050701))
)


@pytest.mark.skipif(not _has_avx2(), reason="the x86 SIMD check needs a CPU with AVX2")
@pytest.mark.parametrize(
    "fn",
    [
        V.exp_f32,
        V.exp_nonpos_f32,
        V.expm1_nonpos_f32,
        V.atan_f32,
        V.asin_f32,
        V.acos_f32,
        _ELU_ONE_ARG,
        _SELU_ONE_ARG,
        V.log_f32,
        V.tanh_f32,
        V.sigmoid_f32,
        V.erf_f32,
        V.gelu_f32,
        V.exp_f64,
        V.log_f64,
    ],
    ids=[
        "exp_f32",
        "exp_nonpos",
        "expm1_nonpos_f32",
        "atan_f32",
        "asin_f32",
        "acos_f32",
        "elu_f32",
        "selu_f32",
        "log_f32",
        "tanh_f32",
        "sigmoid_f32",
        "erf_f32",
        "gelu_f32",
        "exp_f64",
        "log_f64",
    ],
)
def test_loops_are_vectorised(fn) -> None:
    """The loop body compiles to packed SIMD arithmetic on ymm/zmm registers (no libm call)."""
    loop = _loop(fn)
    dt = np.float64 if fn.__name__.endswith("f64") else np.float32
    x = np.linspace(-3, 3, 64, dtype=dt)
    loop(x, np.empty_like(x))
    asm = loop.inspect_asm(loop.signatures[0])
    # AT&T syntax: "vmulps %zmm1, %zmm2, %zmm3"; a scalar loop would use xmm and *ss/*sd forms
    packed = re.findall(r"\bv(?:mul|add|sub|fmadd\w*)p[sd]\s+[^\n]*%[yz]mm", asm)
    assert len(packed) >= 4, f"only {len(packed)} packed ymm/zmm arithmetic instructions"


# -- type dispatch (vexp, vlog, vtanh, verf, vsigmoid, vgelu) ---------------------------------

_DISPATCH = [
    ("vexp", "exp", np.exp),
    ("vlog", "log", np.log),
    ("vtanh", "tanh", np.tanh),
    ("verf", "erf", _erf64),
    ("vsigmoid", "sigmoid", lambda v: 1.0 / (1.0 + np.exp(-v))),
    ("vgelu", "gelu", _gelu64),
]


@pytest.mark.parametrize("generic,base,oracle", _DISPATCH, ids=[d[0] for d in _DISPATCH])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dispatch_picks_the_flavour_of_the_operand_type(generic, base, oracle, dtype):
    g = getattr(V, generic)
    flavour = getattr(V, f"{base}_{'f32' if dtype == np.float32 else 'f64'}")

    # A branch in the loop, as in the GEMM epilogue, where numba once reported SSA warnings.
    # The dispatch compiles the flavour with contraction (vecmath._register), so the direct
    # call is compiled so too: then the two are the same code.
    @numba.njit(fastmath={"contract"}, error_model="numpy")
    def run(x, y, z, mode):
        for i in range(x.size):
            if mode == 1:
                y[i] = g(x[i])
                z[i] = flavour(x[i])
            else:
                y[i] = x[i]

    x = np.linspace(0.05, 4.0, 301).astype(dtype)
    y, z = np.empty_like(x), np.empty_like(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(x, y, z, 1)
    np.testing.assert_array_equal(y, z)  # the same code: bit-identical
    rtol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(y, oracle(x.astype(np.float64)), rtol=rtol)
    # Called from Python they are the math functions.
    assert g(0.5) == pytest.approx(float(oracle(np.float64(0.5))), rel=1e-15)
