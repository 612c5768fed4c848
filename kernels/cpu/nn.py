"""Softmax-family and LRN kernels (CPU, Numba).

Every kernel works on a canonical low-rank view so that one compiled specialisation serves any
input rank: softmax over ``(outer, n, inner)`` (the reduced axis in the middle), LRN over
``(N, C, inner)``. Sizes are run-time values; only dtype and rank drive compilation.
"""

from __future__ import annotations

import math

import numpy as np

from .._jit import njit
from ..vecmath import (
    EXP_NONPOS_NORMAL_MIN,
    fence,
    maxnum,
    minnum,
    vexp,
    vexp_nonpos,
    vexp_nonpos_normal,
)
from .runtime.prefetch import NEXT_ROW, prefetch_all
from .runtime.twins import twins

# Reassociation only: lets LLVM vectorise sums (a different summation order); NaN, inf and
# signed zeros keep their IEEE meaning.
_REASSOC = {"reassoc"}


@njit(inline="always")
def _softmax_block(x, y, o, log):
    # One outer slice: x[o] is (n, inner). Running max and sum are kept per inner column so
    # that the loops walk memory contiguously (inner is the fastest-moving index).
    n = x.shape[1]
    inner = x.shape[2]
    mx = np.empty(inner, x.dtype)
    sm = np.zeros(inner, np.float64)
    for i in range(inner):
        mx[i] = -np.inf
    for k in range(n):
        for i in range(inner):
            v = x[o, k, i]
            if v > mx[i]:
                mx[i] = v
    for k in range(n):
        for i in range(inner):
            e = vexp(x[o, k, i] - mx[i])
            sm[i] += e
            if not log:
                y[o, k, i] = e
    if log:
        for i in range(inner):
            sm[i] = math.log(sm[i])
        for k in range(n):
            for i in range(inner):
                y[o, k, i] = x[o, k, i] - mx[i] - sm[i]
    else:
        for i in range(inner):
            sm[i] = 1.0 / sm[i]
        for k in range(n):
            for i in range(inner):
                y[o, k, i] = y[o, k, i] * sm[i]


softmax, softmax_par = twins(
    "softmax(x, y, log)",
    _softmax_block,
    items={"o": "x.shape[0]"},
    fma=True,
    doc="""Softmax (``log=False``) or log-softmax (``log=True``) of ``x`` (outer, n, inner) over
    axis 1, written into ``y`` (same shape and dtype). Numerically stable (subtracts the max).""",
)


@njit(fastmath={"nnan", "nsz", "reassoc"})
def softmax_row_range(x, r):
    """The largest and the smallest element of row ``r`` of the 2-D array ``x`` (rows
    non-empty), for softmax only: with NaN in the row both are unspecified, and the row still
    comes out NaN (the NaN reaches the sum). Under ``nnan`` LLVM reduces with plain vector
    max and min instructions (one per vector each, where maxnum's NaN semantics take three).
    Compiled on its own so that the no-NaN assumption stays inside this loop. It takes the
    array and the row index rather than a row view: a view passed to a call costs a reference
    count increment and decrement per row (calls into Numba's runtime). The minimum rides
    along in the pass that first loads the row, where it costs next to nothing, and spares the
    exp pass its clamp (see exp_sum)."""
    mx = x[r, 0]
    mn = x[r, 0]
    for j in range(x.shape[1]):
        mx = maxnum(mx, x[r, j])
        mn = minnum(mn, x[r, j])
    return mx, mn


@njit(inline="always")
def exp_sum(src, dst, r, top, lowest):
    """Write ``e^(src[r, j] - top)`` into ``dst[r, j]`` for the whole row and return the
    sum (``src`` may be ``dst``). ``top`` is the row's maximum, ``lowest`` its minimum: when
    every shifted argument has a normal exp the unclamped exp runs (14 vector instructions
    per 16 float32 instead of 15: 1024-wide rows in cache, 250 ns a row instead of 263),
    else the clamped one, which also turns -inf (masked scores) into 0."""
    n = src.shape[1]
    total = src.dtype.type(0.0)
    if lowest - top >= src.dtype.type(EXP_NONPOS_NORMAL_MIN):
        for j in range(n):
            e = vexp_nonpos_normal(src[r, j] - top)
            dst[r, j] = e
            total += e
    else:
        for j in range(n):
            e = vexp_nonpos(src[r, j] - top)
            dst[r, j] = e
            total += e
    return total


@njit(inline="always")
def _softmax_row(x, y, r, log):
    # One row of a (R, n) array, softmax over the row: max and min, exp with the sum in the
    # same pass, then scale; the row stays in cache. The max ignores NaN semantics
    # (softmax_row_range): a NaN still reaches exp and turns the row to NaN, as an unfused
    # softmax does; the sum vectorises by reassociation. Elements are indexed as x[r, j] (no
    # row views: see softmax_row_range); 1024-wide float32 rows in cache: 258 ns a row
    # instead of 278.
    n = x.shape[1]
    if n == 0:
        return
    if NEXT_ROW and r + 1 < x.shape[0]:
        # the next row starts on another page, where the hardware prefetchers stop: ask for
        # it now so that its loads overlap this row's exp pass (see prefetch.NEXT_ROW)
        prefetch_all(x[r + 1])
    mx, mn = softmax_row_range(x, r)
    total = exp_sum(x, y, r, mx, mn)
    if log:
        lse = mx + math.log(total)
        for j in range(n):
            y[r, j] = x[r, j] - lse
    else:
        inv = fence(x.dtype.type(1.0) / total)  # keeps the multiply (see vecmath.fence)
        for j in range(n):
            y[r, j] = y[r, j] * inv


softmax_rows, softmax_rows_par = twins(
    "softmax_rows(x, y, log)",
    _softmax_row,
    items={"r": "x.shape[0]"},
    fastmath=_REASSOC,
    fma=True,
    doc="""Softmax (or log-softmax) of each row of ``x`` (R, n) into ``y`` (same shape and type).

    The row is read three times while it stays in cache: max, exp and sum, scale. Partial
    sums are kept in x's type.""",
)


@njit
def lrn(x, y, size, alpha, beta, bias):
    """Local response normalisation across channels of ``x`` (N, C, inner) into ``y``.

    ``y[n, c] = x[n, c] / (bias + alpha / size * sum(x[n, j] ** 2)) ** beta`` where ``j`` runs
    over ``c - floor((size - 1) / 2) .. c + ceil((size - 1) / 2)`` clipped to the channels.
    """
    N, C, S = x.shape
    lo = (size - 1) // 2
    hi = size - 1 - lo
    acc = np.empty(S, np.float64)
    scale = alpha / size
    for n in range(N):
        for c in range(C):
            for s in range(S):
                acc[s] = 0.0
            for j in range(max(0, c - lo), min(C, c + hi + 1)):
                for s in range(S):
                    v = x[n, j, s]
                    acc[s] += v * v
            for s in range(S):
                y[n, c, s] = x[n, c, s] / (bias + scale * acc[s]) ** beta
