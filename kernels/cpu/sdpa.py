"""Scaled-dot-product attention rows: scale, additive mask, Where mask, softmax in one pass.

The contractions (Q K^T and P V) are BLAS calls made by the caller; these kernels turn a block
of raw scores into probabilities in place, row by row, reading the masks through their
broadcast layout instead of materialising them at the scores' shape.

Layout contract shared by every kernel here: ``s`` is a C-contiguous (rows, n) block whose row
``r`` is query ``i = r % sq`` of head ``h = (r // sq) % nh`` of batch ``b = r // (sq * nh)``;
``mask`` (float, same dtype as ``s``) and ``cond`` (bool) are C-contiguous 4-D arrays whose
first three dimensions are either 1 (broadcast) or ``(nb, nh, sq)`` and whose last dimension is
``n``; ``has_mask`` / ``has_cond`` say whether they take part (a (1, 1, 1, 1) dummy otherwise).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .._jit import njit, pjit

# exp for the shifted scores (x - max <= 0): Numba lowers math.exp to one libm call per element,
# which keeps LLVM from vectorising the loop; this one is arithmetic and bit moves only.
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # ln 2 split so that k * _LN2_HI is exact for |k| < 2^11
_LN2_LO = 1.90821492927058770002e-10
_SHIFTER = 6755399441055744.0  # 1.5 * 2^52: adding it rounds to an integer held in the low bits
_SHIFTER_BITS = np.int64(0x4338000000000000)
_EXP_MIN = -708.0  # below: the result is under 1e-307 and is returned as 0


@njit(inline="always")
def _exp_nonpos(x):
    """e^x in float64 for x <= 0 (relative error about 2e-16), 0 below -708, NaN for NaN.

    e^x = 2^k e^r with k = round(x / ln 2) and |r| <= ln 2 / 2 (r computed in two parts); e^r
    is its Taylor polynomial to degree 12 (remainder below 2e-16) and 2^k is built in the
    exponent field.
    """
    xc = _EXP_MIN if x < _EXP_MIN else x
    t = xc * _LOG2E + _SHIFTER
    kf = t - _SHIFTER
    k = np.float64(t).view(np.int64) - _SHIFTER_BITS
    r = (xc - kf * _LN2_HI) - kf * _LN2_LO
    p = 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    y = p * np.int64((k + 1023) << 52).view(np.float64)
    y0 = 0.0 if x < _EXP_MIN else y
    return x if x != x else y0


@njit(inline="always")
def _row(s, r, nh, sq, mask, cond, has_mask, has_cond, scale, fill, swap, where_first, nan_zero):
    """Probabilities of row ``r`` of ``s`` in place (see the module docstring for the layout).

    Per element: ``x = s * scale``, then the additive mask and the Where select in the order
    ``where_first`` gives (Where keeps ``x`` where ``cond`` is true, or where it is false when
    ``swap``, and puts ``fill`` elsewhere); then a softmax over the row. NaN propagates as in
    an unfused softmax (a row with a NaN, or with every entry -inf, becomes NaN); ``nan_zero``
    then replaces NaN probabilities by 0 (the ``Where(IsNaN(p), 0, p)`` guard exporters emit).
    Each step is its own loop over the (cache-resident) row so that every loop vectorises.
    """
    n = s.shape[1]
    b = r // (sq * nh)
    h = (r // sq) % nh
    i = r % sq
    row = s[r]
    mrow = mask[b if mask.shape[0] > 1 else 0, h if mask.shape[1] > 1 else 0]
    mrow = mrow[i if mask.shape[2] > 1 else 0]
    crow = cond[b if cond.shape[0] > 1 else 0, h if cond.shape[1] > 1 else 0]
    crow = crow[i if cond.shape[2] > 1 else 0]
    for j in range(n):
        row[j] = row[j] * scale
    if has_cond and where_first:
        for j in range(n):
            row[j] = fill if crow[j] == swap else row[j]
    if has_mask:
        for j in range(n):
            row[j] = row[j] + mrow[j]
    if has_cond and not where_first:
        for j in range(n):
            row[j] = fill if crow[j] == swap else row[j]
    # Max with four partial maxima (a NaN never wins a comparison: it reaches exp below).
    m0 = m1 = m2 = m3 = -np.inf
    j = 0
    while j + 4 <= n:
        m0 = row[j] if row[j] > m0 else m0
        m1 = row[j + 1] if row[j + 1] > m1 else m1
        m2 = row[j + 2] if row[j + 2] > m2 else m2
        m3 = row[j + 3] if row[j + 3] > m3 else m3
        j += 4
    while j < n:
        m0 = row[j] if row[j] > m0 else m0
        j += 1
    top = max(max(m0, m1), max(m2, m3))
    for j in range(n):
        row[j] = _exp_nonpos(np.float64(row[j]) - top)
    t0 = t1 = t2 = t3 = 0.0
    j = 0
    while j + 4 <= n:
        t0 += row[j]
        t1 += row[j + 1]
        t2 += row[j + 2]
        t3 += row[j + 3]
        j += 4
    while j < n:
        t0 += row[j]
        j += 1
    inv = 1.0 / ((t0 + t1) + (t2 + t3))
    if nan_zero:
        for j in range(n):
            p = row[j] * inv
            row[j] = 0.0 if p != p else p
    else:
        for j in range(n):
            row[j] = row[j] * inv


@njit
def attention_rows(
    s, nh, sq, mask, cond, has_mask, has_cond, scale, fill, swap, where_first, nan_zero
):
    """Every row of ``s`` through :func:`_row` (serial)."""
    for r in range(s.shape[0]):
        _row(s, r, nh, sq, mask, cond, has_mask, has_cond, scale, fill, swap, where_first, nan_zero)


@pjit
def attention_rows_par(
    s, nh, sq, mask, cond, has_mask, has_cond, scale, fill, swap, where_first, nan_zero
):
    """Parallel twin of :func:`attention_rows` (call through ``run_parallel``)."""
    for r in prange(s.shape[0]):
        _row(s, r, nh, sq, mask, cond, has_mask, has_cond, scale, fill, swap, where_first, nan_zero)
