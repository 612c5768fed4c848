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

import math

import numpy as np
from numba import prange

from .._jit import njit, pjit


@njit(inline="always")
def _row(s, r, nh, sq, mask, cond, has_mask, has_cond, scale, fill, swap, where_first, nan_zero):
    """Probabilities of row ``r`` of ``s`` in place (see the module docstring for the layout).

    Per element: ``x = s * scale``, then the additive mask and the Where select in the order
    ``where_first`` gives (Where keeps ``x`` where ``cond`` is true, or where it is false when
    ``swap``, and puts ``fill`` elsewhere); then a softmax over the row. NaN propagates as in
    an unfused softmax (a row with a NaN, or with every entry -inf, becomes NaN); ``nan_zero``
    then replaces NaN probabilities by 0 (the ``Where(IsNaN(p), 0, p)`` guard exporters emit).
    """
    n = s.shape[1]
    b = r // (sq * nh)
    h = (r // sq) % nh
    i = r % sq
    mb = b if mask.shape[0] > 1 else 0
    mh = h if mask.shape[1] > 1 else 0
    mi = i if mask.shape[2] > 1 else 0
    cb = b if cond.shape[0] > 1 else 0
    ch = h if cond.shape[1] > 1 else 0
    ci = i if cond.shape[2] > 1 else 0
    top = -np.inf
    for j in range(n):
        x = s[r, j] * scale
        if where_first:
            if has_cond and cond[cb, ch, ci, j] == swap:
                x = fill
            if has_mask:
                x = x + mask[mb, mh, mi, j]
        else:
            if has_mask:
                x = x + mask[mb, mh, mi, j]
            if has_cond and cond[cb, ch, ci, j] == swap:
                x = fill
        s[r, j] = x
        if x > top:
            top = x
    tot = 0.0
    for j in range(n):
        e = math.exp(s[r, j] - top)
        s[r, j] = e
        tot += e
    inv = 1.0 / tot
    for j in range(n):
        p = s[r, j] * inv
        if nan_zero and p != p:
            p = 0.0
        s[r, j] = p


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
