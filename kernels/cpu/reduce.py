"""Reduction, arg-reduction, scan and top-k kernels over a canonical ``(outer, n, inner)`` view.

The host side reshapes (transposing first when the reduced axes are not adjacent) so that the
reduced elements of each output lie along the middle axis; one compiled kernel then serves every
rank. Sums and products accumulate in the accumulator array the caller passes (float64 for
floats, int64 for integers: integer wrap-around modulo the narrower width is unchanged), and the
caller casts the result back to the input dtype.
"""

from __future__ import annotations

import math

import numpy as np

from .._jit import njit
from .runtime.twins import twins

# Reduction kinds shared with onnxjit.ops.reduce.
SUM = 0
PROD = 1
MAX = 2
MIN = 3
SUMSQ = 4
L1 = 5
LOGSUMEXP = 6

# What :func:`finish` does after a reduction, shared with onnxjit.ops.reduce.
FINISH_CAST = 0
FINISH_MEAN = 1
FINISH_SQRT = 2
FINISH_LOG = 3


def reset(acc, value):
    """Fill accumulator ``acc`` with the identity ``value`` of the reduction about to run."""
    acc.fill(value)


def finish(acc, how, n, y):
    """Write the reduction held in ``acc`` (float64) into ``y`` in y's type after step
    ``how``: FINISH_CAST (none), FINISH_MEAN (divide by ``n``, the count reduced),
    FINISH_SQRT or FINISH_LOG (``acc`` may be overwritten)."""
    if how == FINISH_MEAN:
        np.divide(acc, n, out=y, casting="unsafe")
        return
    if how in (FINISH_SQRT, FINISH_LOG):
        with np.errstate(all="ignore"):
            (np.sqrt if how == FINISH_SQRT else np.log)(acc, out=acc)
    np.copyto(y, acc, casting="unsafe")


@njit
def _reduce_block(x, o, kind, out):
    """Reduce ``x[o, :, :]`` into ``out[o, :]`` (length inner), which arrives initialised."""
    acc = out[o]
    n = x.shape[1]
    inner = x.shape[2]
    if kind == LOGSUMEXP:
        # Shift by the maximum so exp never overflows; acc holds the shift.
        for i in range(inner):
            m = -np.inf
            for j in range(n):
                v = x[o, j, i]
                if v > m or v != v:
                    m = v
            if n == 0 or m == -np.inf or m != m or m == np.inf:
                s = 0.0
                for j in range(n):
                    s += math.exp(x[o, j, i])
                acc[i] = math.log(s)
            else:
                s = 0.0
                for j in range(n):
                    s += math.exp(x[o, j, i] - m)
                acc[i] = m + math.log(s)
        return
    if inner == 1:
        # one value per row (a reduction over the last axis): the running value stays in a
        # register, where acc[i] would be loaded and stored per element
        a = acc[0]
        for j in range(n):
            a = _fold(kind, a, x[o, j, 0])
        acc[0] = a
        return
    for j in range(n):
        for i in range(inner):
            acc[i] = _fold(kind, acc[i], x[o, j, i])


@njit(inline="always")
def _fold(kind, a, v):
    """The running value ``a`` of reduction ``kind`` with element ``v`` folded in."""
    if kind == SUM:
        return a + v
    if kind == PROD:
        return a * v
    if kind == MAX:
        # NaN propagates, like numpy's max.
        return v if v > a or v != v else a
    if kind == MIN:
        return v if v < a or v != v else a
    if kind == SUMSQ:
        return a + v * v
    return a + abs(v)


reduce3, reduce3_par = twins(
    "reduce3(x, kind, out)",
    _reduce_block,
    items={"o": "x.shape[0]"},
    doc="""``out[o, i] = reduce_j x[o, j, i]``; ``out`` arrives filled with the identity.""",
)


@njit
def argreduce3(x, want_max, last, out):
    """Index of the max (``want_max``) or min along axis 1 of ``x (outer, n, inner)``.

    Ties go to the first index, or to the last when ``last``; the first NaN wins (numpy's rule),
    the last NaN when ``last``. ``n`` must be at least 1.
    """
    outer, n, inner = x.shape
    for o in range(outer):
        for i in range(inner):
            best = x[o, 0, i]
            bi = 0
            best_nan = best != best
            for j in range(1, n):
                v = x[o, j, i]
                if best_nan:
                    if last and v != v:
                        bi = j
                    continue
                if v != v:
                    best = v
                    bi = j
                    best_nan = True
                    continue
                if want_max:
                    better = v > best or (last and v == best)
                else:
                    better = v < best or (last and v == best)
                if better:
                    best = v
                    bi = j
            out[o, i] = bi


@njit
def cumsum3(x, exclusive, reverse, out):
    """Cumulative sum along axis 1 of ``x (outer, n, inner)`` into ``out`` (same shape)."""
    outer, n, inner = x.shape
    for o in range(outer):
        for i in range(inner):
            s = x[o, 0, i] * 0
            for t in range(n):
                j = n - 1 - t if reverse else t
                v = x[o, j, i]
                if exclusive:
                    out[o, j, i] = s
                    s += v
                else:
                    s += v
                    out[o, j, i] = s


@njit(inline="always")
def _before(a, b, largest):
    """Whether value ``a`` ranks strictly before ``b``: larger (``largest``) or smaller, NaN
    ranking as the largest value (where the sorts of :func:`topk3` put it)."""
    if largest:
        return a > b or (a != a and b == b)
    return a < b or (b != b and a == a)


@njit
def _topk_select(x, k, largest, values, indices):
    """:func:`topk3` for ``k`` much smaller than the line: one pass keeping the best ``k`` so
    far in rank order (a later value enters only when it ranks strictly before the last kept,
    so that ties keep the lower index, as the stable sorts do)."""
    outer, n, inner = x.shape
    if k == 0:
        return
    bv = np.empty(k, dtype=x.dtype)
    bi = np.empty(k, dtype=np.int64)
    for o in range(outer):
        for i in range(inner):
            m = 0  # values kept
            for j in range(n):
                v = x[o, j, i]
                if m == k and not _before(v, bv[k - 1], largest):
                    continue
                # insertion point: after every kept value that v does not rank before
                p = m if m < k else k - 1
                while p > 0 and _before(v, bv[p - 1], largest):
                    if p < k:
                        bv[p] = bv[p - 1]
                        bi[p] = bi[p - 1]
                    p -= 1
                bv[p] = v
                bi[p] = j
                if m < k:
                    m += 1
            for t in range(k):
                values[o, t, i] = bv[t]
                indices[o, t, i] = bi[t]


@njit
def topk3(x, k, largest, values, indices):
    """Top ``k`` along axis 1 of ``x (outer, n, inner)``, sorted, ties by lower index.

    A stable ascending sort of the reversed line, read backwards, orders values descending with
    equal values in ascending index order; a stable ascending sort orders the smallest first.
    """
    outer, n, inner = x.shape
    if k * 16 <= n:
        _topk_select(x, k, largest, values, indices)
        return
    line = np.empty(n, dtype=x.dtype)
    for o in range(outer):
        for i in range(inner):
            if largest:
                for j in range(n):
                    line[j] = x[o, n - 1 - j, i]
                order = np.argsort(line, kind="mergesort")
                for t in range(k):
                    src = n - 1 - order[n - 1 - t]
                    indices[o, t, i] = src
                    values[o, t, i] = x[o, src, i]
            else:
                for j in range(n):
                    line[j] = x[o, j, i]
                order = np.argsort(line, kind="mergesort")
                for t in range(k):
                    src = order[t]
                    indices[o, t, i] = src
                    values[o, t, i] = x[o, src, i]
