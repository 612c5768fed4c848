"""Data-movement kernels: gathers and scatters over canonical low-rank views.

Every kernel works on a fixed-rank view so that one compiled specialisation serves inputs of
any rank: axis operators use ``(outer, axis, inner)``, ND operators use ``(batch, rows, slice)``.
Callers pass element data reinterpreted as unsigned integers of the same width (see
``onnxjit.ops.tensor``) when a kernel only moves values, so those kernels compile once per
element width rather than once per dtype. Indices are always ``int64``.

Kernels that read indices validate them in the same pass: a negative index wraps once, and the
first index out of range stops the kernel, which returns its flat position (``-1`` when all are
valid) so that the caller can raise an error naming it.
"""

from __future__ import annotations

import numpy as np

from .._jit import njit
from .runtime.twins import twins

# Reduction codes shared with the host side (ScatterElements / ScatterND ``reduction``).
RED_NONE = 0
RED_ADD = 1
RED_MUL = 2
RED_MAX = 3
RED_MIN = 4


@njit
def wrap_indices(idx, n):
    """Wrap negative entries of the 1-D int64 ``idx`` once into ``[0, n)``.

    Returns ``(wrapped, bad)``: ``bad`` is the position of the first entry outside
    ``[-n, n)``, or -1 when every entry is valid.
    """
    out = np.empty_like(idx)
    for i in range(idx.shape[0]):
        v = idx[i]
        if v < 0:
            v += n
        if v < 0 or v >= n:
            return out, i
        out[i] = v
    return out, -1


@njit(inline="always")
def _gather_row(data, idx, out, inner, o, j):
    src = idx[j]
    for i in range(inner):
        out[o, j, i] = data[o, src, i]


gather_axis, gather_axis_par = twins(
    "gather_axis(data, idx, out)",
    _gather_row,
    setup=("outer, _, inner = data.shape", "m = idx.shape[0]"),
    items={"o": "outer", "j": "m"},
    doc="""``out[o, j, i] = data[o, idx[j], i]``; ``idx`` already validated.""",
)


@njit
def gather_elements(data, idx, out):
    """``out[o, j, i] = data[o, idx[o, j, i], i]`` with validation; returns the bad position."""
    outer, n, inner = data.shape
    m = idx.shape[1]
    for o in range(outer):
        for j in range(m):
            for i in range(inner):
                v = idx[o, j, i]
                if v < 0:
                    v += n
                if v < 0 or v >= n:
                    return (o * m + j) * inner + i
                out[o, j, i] = data[o, v, i]
    return -1


@njit
def scatter_elements(out, idx, upd, reduction):
    """``out[o, idx[o, j, i], i] (op)= upd[o, j, i]`` in place; returns the bad position.

    ``reduction`` is one of the ``RED_*`` codes; duplicates apply in index order, so with
    ``RED_NONE`` the last write wins.
    """
    outer, n, inner = out.shape
    m = idx.shape[1]
    for o in range(outer):
        for j in range(m):
            for i in range(inner):
                v = idx[o, j, i]
                if v < 0:
                    v += n
                if v < 0 or v >= n:
                    return (o * m + j) * inner + i
                u = upd[o, j, i]
                if reduction == RED_NONE:
                    out[o, v, i] = u
                elif reduction == RED_ADD:
                    out[o, v, i] += u
                elif reduction == RED_MUL:
                    out[o, v, i] *= u
                elif reduction == RED_MAX:
                    if u > out[o, v, i]:
                        out[o, v, i] = u
                else:
                    if u < out[o, v, i]:
                        out[o, v, i] = u
    return -1


@njit
def gather_nd(data, idx, dims, out):
    """ND gather over ``data (B, M, S)``, ``idx (B, N, k)`` -> ``out (B, N, S)``.

    ``dims`` (length k) are the sizes of the indexed axes whose row-major product is M.
    Returns the flat position (in ``idx``) of the first invalid index, or -1.
    """
    nb, _, s = data.shape
    nn = idx.shape[1]
    k = idx.shape[2]
    for b in range(nb):
        for r in range(nn):
            off = 0
            for j in range(k):
                v = idx[b, r, j]
                d = dims[j]
                if v < 0:
                    v += d
                if v < 0 or v >= d:
                    return (b * nn + r) * k + j
                off = off * d + v
            for t in range(s):
                out[b, r, t] = data[b, off, t]
    return -1


@njit
def scatter_nd(out, idx, dims, upd, reduction):
    """ND scatter in place: ``out (M, S)``, ``idx (N, k)``, ``upd (N, S)``; see gather_nd."""
    s = out.shape[1]
    nn = idx.shape[0]
    k = idx.shape[1]
    for r in range(nn):
        off = 0
        for j in range(k):
            v = idx[r, j]
            d = dims[j]
            if v < 0:
                v += d
            if v < 0 or v >= d:
                return r * k + j
            off = off * d + v
        for t in range(s):
            u = upd[r, t]
            if reduction == RED_NONE:
                out[off, t] = u
            elif reduction == RED_ADD:
                out[off, t] += u
            elif reduction == RED_MUL:
                out[off, t] *= u
            elif reduction == RED_MAX:
                if u > out[off, t]:
                    out[off, t] = u
            else:
                if u < out[off, t]:
                    out[off, t] = u
    return -1


@njit
def one_hot(idx, depth, off_value, on_value, out):
    """``out (outer, depth, inner)`` filled with off/on values from ``idx (outer, inner)``.

    Indices in ``[-depth, depth)`` wrap once; others leave the whole column off (the spec).
    """
    outer, inner = idx.shape
    for o in range(outer):
        for d in range(depth):
            for i in range(inner):
                out[o, d, i] = off_value
        for i in range(inner):
            v = idx[o, i]
            if v < 0:
                v += depth
            if v >= 0 and v < depth:
                out[o, v, i] = on_value


# Edge of the square tiles :func:`transpose_tiles` moves (elements): a tile's source lines
# and destination lines both stay in L1 while it is copied.
TRANSPOSE_TILE = 32


@njit(inline="always")
def _transpose_item(x, y, item, dims, xs, ys):
    """Tile ``item`` of :func:`transpose_tiles`: (a, b, block of TRANSPOSE_TILE along j)."""
    T = TRANSPOSE_TILE
    nB, nj, nL = dims[1], dims[2], dims[3]
    ntj = (nj + T - 1) // T
    ab = item // ntj
    j0 = (item - ab * ntj) * T
    j1 = min(nj, j0 + T)
    a = ab // nB
    b = ab - a * nB
    xb = a * xs[0] + b * xs[1]
    yb = a * ys[0] + b * ys[1]
    xsl = xs[3]
    for l0 in range(0, nL, T):
        l1 = min(nL, l0 + T)
        for j in range(j0, j1):
            xo = np.uint64(xb + j * xs[2])
            yo = np.uint64(yb + j * ys[2])
            for lo in range(l0, l1):
                y[yo + np.uint64(lo)] = x[xo + np.uint64(lo * xsl)]


transpose_tiles, transpose_tiles_par = twins(
    "transpose_tiles(x, y, dims, xs, ys)",
    _transpose_item,
    setup="T = TRANSPOSE_TILE",
    items={"item": "dims[0] * dims[1] * ((dims[2] + T - 1) // T)"},
    doc="""A transposition that moves the input's last axis: ``y[a, b, j, l] = x[a * xs[0] +
    b * xs[1] + j * xs[2] + l * xs[3]]`` with ``x``, ``y`` flat (any element type; callers pass
    unsigned views), ``dims = (nA, nB, nj, nL)`` and ``y``'s element strides ``ys`` for
    (a, b, j) (l is y's contiguous axis). ``j`` is the axis the input reads contiguously
    (``xs[2] == 1``), ``l`` the one the output writes contiguously: copied in square tiles so
    that neither side strides through memory a cache line per element.""",
)


@njit
def copy_strided(x, y, dims, xs, ys, xo, yo):
    """A strided copy between flat arrays: for every index ``(i0, ..., i(r-1))`` below
    ``dims``, ``y[yo + sum(i_d * ys[d])] = x[xo + sum(i_d * xs[d])]``.

    ``x`` and ``y`` are 1-D arrays of one element type (callers pass unsigned views of the
    element bits); ``dims``, ``xs`` and ``ys`` int64 arrays of one length r (0: one element),
    element strides that may be negative (a Slice's negative steps) or zero (Expand's
    broadcast axes); ``xo`` and ``yo`` the element offsets of index 0. Slice, Split parts,
    Concat parts, Expand and Pad's kept part are such copies.
    """
    r = dims.shape[0]
    if r == 0:
        y[yo] = x[xo]
        return
    total = 1
    for d in range(r):
        total *= dims[d]
    if total == 0:
        return
    n = dims[r - 1]
    sx = xs[r - 1]
    sy = ys[r - 1]
    idx = np.zeros(r, np.int64)
    xb = xo
    yb = yo
    for _ in range(total // n):
        for i in range(n):
            y[yb + i * sy] = x[xb + i * sx]
        # the next row: an odometer over the outer axes, carrying into the one before
        d = r - 2
        while d >= 0:
            idx[d] += 1
            xb += xs[d]
            yb += ys[d]
            if idx[d] < dims[d]:
                break
            xb -= dims[d] * xs[d]
            yb -= dims[d] * ys[d]
            idx[d] = 0
            d -= 1


@njit
def fill_outside(y, dims, lo, hi, value):
    """``y`` (flat, C order over the shape ``dims``) set to ``value`` at every element with
    some coordinate ``i_d`` outside ``[lo[d], hi[d])``; the elements inside are left as they
    are. Pad's border: the kept part is copied in by :func:`copy_strided`. ``dims``, ``lo``,
    ``hi`` int64 arrays of one length (0: ``y`` is one element, inside)."""
    r = dims.shape[0]
    total = 1
    for d in range(r):
        total *= dims[d]
    for e in range(total):
        rem = e
        outside = False
        for k in range(r):
            d = r - 1 - k
            i = rem % dims[d]
            rem //= dims[d]
            if i < lo[d] or i >= hi[d]:
                outside = True
        if outside:
            y[e] = value
