"""CUDA twins of ``kernels/cpu/tensor.py``: gathers, scatters, OneHot and the tiled Transpose.

Each public function here is a *launcher* with the name and the argument list of its CPU twin:
array arguments are device arrays shaped as the CPU kernel's are (the canonical
``(outer, axis, inner)`` / ``(batch, rows, slice)`` views), small integer parameter arrays
(``dims``, strides) are the plan's host constants, read on the host and passed to the device as
scalars or tuples. A launcher queues its kernels on :func:`onnxjit.kernels.cuda.runtime.stream`
and returns without synchronizing.

Index validation. Where the CPU kernel returns the flat position of the first invalid index (or
-1), the launcher returns an :class:`IndexFlag`: a one-element device array that the kernels
fill with the smallest invalid position (the first one in the CPU kernel's order) by atomic
minimum. It compares and converts like the CPU kernel's int (``bad >= 0``, ``int(bad)``), and
only such a use copies it to the host, synchronizing the stream there, so the lowering code that
raises on a bad index serves both backends unchanged. Device code never reads outside an array:
an element whose index is invalid is written as 0 (gathers) or skipped (scatters), where the
CPU kernel stops instead; the caller raises in both cases, so the partial output is not used.

Scatters apply duplicate indices in the CPU kernel's order: one thread owns a column (every
update that can reach a given output element) and applies that column's updates in index
order, so ``RED_NONE``'s last write wins and float reductions round as on the CPU. The cost is
parallelism over columns only (``outer * inner`` for ScatterElements, the slice size for
ScatterND).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, int64

from . import memory
from .runtime import BLOCK, blocks, stream

# Reduction codes shared with the host side: the CPU twin's values (the lowering reads them
# from whichever backend it lowers for).
RED_NONE = 0
RED_ADD = 1
RED_MUL = 2
RED_MAX = 3
RED_MIN = 4

# What the index flag holds while no invalid index was seen (a position never reaches it).
_NO_BAD = np.iinfo(np.int64).max


class IndexFlag:
    """The first invalid index position a launcher found, -1 when none: the CPU twin's int.

    ``device`` is the one-element int64 device array the kernels wrote (``_NO_BAD`` when all
    indices were valid). Reading the value (``int()``, comparisons, use as an index) copies it
    to the host after the stream's queued work, and only then synchronizes.
    """

    __slots__ = ("device", "_value")

    def __init__(self, device: Any) -> None:
        self.device = device
        self._value: int | None = None

    def value(self) -> int:
        """The position, or -1 (read from the device once)."""
        if self._value is None:
            host = _to_host(self.device)
            v = int(host[0])
            self._value = -1 if v == _NO_BAD else v
        return self._value

    def __int__(self) -> int:
        return self.value()

    __index__ = __int__

    def __eq__(self, other: object) -> bool:
        return self.value() == other

    def __ne__(self, other: object) -> bool:
        return self.value() != other

    def __lt__(self, other: int) -> bool:
        return self.value() < other

    def __le__(self, other: int) -> bool:
        return self.value() <= other

    def __gt__(self, other: int) -> bool:
        return self.value() > other

    def __ge__(self, other: int) -> bool:
        return self.value() >= other

    __hash__ = None  # type: ignore[assignment]  # compares by a value read later

    def __repr__(self) -> str:
        return f"IndexFlag({self.value()})"


def _to_host(a: Any) -> np.ndarray:
    """A device array's values on the host, after the work queued on the run's stream (the
    copy on stream 0, the default stream, is synchronous already)."""
    s = stream()
    host = a.copy_to_host(stream=s)
    if s != 0:
        s.synchronize()
    return host


@cuda.jit
def _flag_init(flag):
    if cuda.grid(1) == 0:
        flag[0] = _NO_BAD


def _new_flag() -> Any:
    """A fresh one-element flag set to ``_NO_BAD`` on the stream (no host copy)."""
    s = stream()
    flag = memory.empty(1, np.int64, s)
    _flag_init[1, 1, s](flag)
    return flag


def _host_ints(a: Any) -> tuple[int, ...]:
    """The values of a small integer parameter array (a plan constant) as Python ints; a
    device array is copied to the host (a synchronizing slow path the plan should not take)."""
    if not isinstance(a, np.ndarray) and hasattr(a, "copy_to_host"):
        a = _to_host(a)
    return tuple(int(v) for v in np.asarray(a).reshape(-1))


# -- wrap_indices --------------------------------------------------------------------------------
@cuda.jit
def _wrap_k(idx, n, out, flag):
    start, step = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, idx.shape[0], step):
        v = idx[i]
        if v < 0:
            v += n
        if v < 0 or v >= n:
            cuda.atomic.min(flag, 0, int64(i))
            v = 0  # a safe index for a consumer launched before the caller raises
        out[i] = v


def wrap_indices(idx, n):
    """Wrap negative entries of the 1-D int64 device array ``idx`` once into ``[0, n)``.

    Returns ``(wrapped, bad)``: ``wrapped`` a new int64 device array of ``idx``'s length,
    ``bad`` an :class:`IndexFlag` (the first position outside ``[-n, n)``, or -1). Invalid
    entries come out as 0 in ``wrapped``.
    """
    s = stream()
    m = idx.shape[0]
    out = memory.empty(m, np.int64, s)
    flag = _new_flag()
    if m:
        _wrap_k[blocks(m), BLOCK, s](idx, int64(n), out, flag)
    return out, IndexFlag(flag)


# -- gather_axis ---------------------------------------------------------------------------------
@cuda.jit
def _gather_axis_k(data, idx, out):
    outer, m, inner = out.shape
    n = data.shape[1]
    total = outer * m * inner
    start, step = cuda.grid(1), cuda.gridsize(1)
    for e in range(start, total, step):
        i = e % inner
        oj = e // inner
        j = oj % m
        o = oj // m
        src = idx[j]
        if src >= 0 and src < n:
            out[o, j, i] = data[o, src, i]
        else:  # never read outside data: the caller validated and raises on a bad index
            out[o, j, i] = 0


def gather_axis(data, idx, out):
    """``out[o, j, i] = data[o, idx[j], i]``: data (outer, n, inner), idx (m,) int64 already
    wrapped and validated (an invalid entry writes 0), out (outer, m, inner) of data's dtype."""
    total = out.size
    if total:
        _gather_axis_k[blocks(total), BLOCK, stream()](data, idx, out)


# -- gather_elements -----------------------------------------------------------------------------
@cuda.jit
def _gather_elements_k(data, idx, out, flag):
    outer, m, inner = idx.shape
    n = data.shape[1]
    total = outer * m * inner
    start, step = cuda.grid(1), cuda.gridsize(1)
    for e in range(start, total, step):
        i = e % inner
        oj = e // inner
        j = oj % m
        o = oj // m
        v = idx[o, j, i]
        if v < 0:
            v += n
        if v < 0 or v >= n:
            cuda.atomic.min(flag, 0, int64(e))  # e is the flat position in idx
            out[o, j, i] = 0
        else:
            out[o, j, i] = data[o, v, i]


def gather_elements(data, idx, out):
    """``out[o, j, i] = data[o, idx[o, j, i], i]`` with validation: data (outer, n, inner),
    idx and out (outer, m, inner). Returns an :class:`IndexFlag` (first bad flat position in
    ``idx``, or -1)."""
    flag = _new_flag()
    total = idx.size
    if total:
        _gather_elements_k[blocks(total), BLOCK, stream()](data, idx, out, flag)
    return IndexFlag(flag)


# -- scatter_elements ----------------------------------------------------------------------------
@cuda.jit
def _scatter_elements_k(out, idx, upd, reduction, flag):
    outer, n, inner = out.shape
    m = idx.shape[1]
    start, step = cuda.grid(1), cuda.gridsize(1)
    for c in range(start, outer * inner, step):
        # column (o, i): every update that can reach out[o, :, i], applied in index order
        i = c % inner
        o = c // inner
        for j in range(m):
            v = idx[o, j, i]
            if v < 0:
                v += n
            if v < 0 or v >= n:
                cuda.atomic.min(flag, 0, int64((o * m + j) * inner + i))
            else:
                # the reduction written out here and in _scatter_nd_k (a device function
                # would need a GPU to compile_ptx; an @njit one runs as CPU code, not wrapping
                # narrow integers, under the simulator)
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
                elif u < out[o, v, i]:
                    out[o, v, i] = u


def scatter_elements(out, idx, upd, reduction):
    """``out[o, idx[o, j, i], i] (op)= upd[o, j, i]`` in place: out (outer, n, inner), idx
    (int64) and upd (outer, m, inner); ``reduction`` a ``RED_*`` code, duplicates applied in
    index order. Returns an :class:`IndexFlag` (first bad flat position in ``idx``, or -1);
    invalid entries are skipped."""
    flag = _new_flag()
    outer, _, inner = out.shape
    cols = outer * inner
    if cols and idx.shape[1]:
        _scatter_elements_k[blocks(cols), BLOCK, stream()](out, idx, upd, int64(reduction), flag)
    return IndexFlag(flag)


# -- gather_nd / scatter_nd ----------------------------------------------------------------------
def _dims_tuple(dims: Any) -> tuple[int, ...]:
    """``dims`` as a tuple of at least one entry (a 0-long ``k`` never reads it)."""
    t = _host_ints(dims)
    return t if t else (1,)


@cuda.jit
def _gather_nd_k(data, idx, dims, out, flag):
    nb, nn, k = idx.shape
    s = data.shape[2]
    sw = s if s > 0 else 1  # one thread per row even when the slice is empty: it validates
    start, step = cuda.grid(1), cuda.gridsize(1)
    for e in range(start, nb * nn * sw, step):
        t = e % sw
        br = e // sw
        r = br % nn
        b = br // nn
        off = int64(0)
        ok = True
        for j in range(k):
            v = idx[b, r, j]
            d = dims[j]
            if v < 0:
                v += d
            if v < 0 or v >= d:
                if t == 0:
                    cuda.atomic.min(flag, 0, int64(br * k + j))
                ok = False
                break
            off = off * d + v
        if t < s:
            if ok:
                out[b, r, t] = data[b, off, t]
            else:
                out[b, r, t] = 0


def gather_nd(data, idx, dims, out):
    """ND gather: data (B, M, S), idx (B, N, k) int64, out (B, N, S); ``dims`` (host, length
    k) the sizes of the indexed axes, whose row-major product is M. Returns an
    :class:`IndexFlag` (first bad flat position in ``idx``, or -1)."""
    flag = _new_flag()
    nb, nn, _ = idx.shape
    work = nb * nn * max(data.shape[2], 1)
    if work:
        _gather_nd_k[blocks(work), BLOCK, stream()](data, idx, _dims_tuple(dims), out, flag)
    return IndexFlag(flag)


@cuda.jit
def _scatter_nd_k(out, idx, dims, upd, reduction, flag):
    s = out.shape[1]
    nn, k = idx.shape
    start, step = cuda.grid(1), cuda.gridsize(1)
    for t in range(start, s if s > 0 else 1, step):
        # column t: every update of slice element t, in index order
        for r in range(nn):
            off = int64(0)
            ok = True
            for j in range(k):
                v = idx[r, j]
                d = dims[j]
                if v < 0:
                    v += d
                if v < 0 or v >= d:
                    if t == 0:
                        cuda.atomic.min(flag, 0, int64(r * k + j))
                    ok = False
                    break
                off = off * d + v
            if ok and t < s:
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
                elif u < out[off, t]:
                    out[off, t] = u


def scatter_nd(out, idx, dims, upd, reduction):
    """ND scatter in place: out (M, S), idx (N, k) int64, upd (N, S), ``dims`` as for
    :func:`gather_nd`, ``reduction`` a ``RED_*`` code (duplicates in index order). Returns an
    :class:`IndexFlag` (first bad flat position in ``idx``, or -1)."""
    flag = _new_flag()
    cols = max(out.shape[1], 1)
    if idx.shape[0]:
        _scatter_nd_k[blocks(cols), BLOCK, stream()](
            out, idx, _dims_tuple(dims), upd, int64(reduction), flag
        )
    return IndexFlag(flag)


# -- one_hot -------------------------------------------------------------------------------------
@cuda.jit
def _one_hot_k(idx, depth, off_value, on_value, out):
    outer, inner = idx.shape
    total = outer * depth * inner
    start, step = cuda.grid(1), cuda.gridsize(1)
    for e in range(start, total, step):
        i = e % inner
        od = e // inner
        d = od % depth
        o = od // depth
        v = idx[o, i]
        if v < 0:
            v += depth
        out[o, d, i] = on_value if v == d else off_value


def one_hot(idx, depth, off_value, on_value, out):
    """``out (outer, depth, inner)`` of off/on values from ``idx (outer, inner)`` int64:
    indices in ``[-depth, depth)`` wrap once, others leave their column off."""
    total = out.size
    if total:
        _one_hot_k[blocks(total), BLOCK, stream()](idx, int64(depth), off_value, on_value, out)


# -- transpose_tiles -----------------------------------------------------------------------------
# Edge of the square tiles (the CPU twin's constant; here the shared-memory tile's edge).
TRANSPOSE_TILE = 32
_TILE_ROWS = 8  # threads per tile column: each moves TRANSPOSE_TILE / _TILE_ROWS elements


def _transpose_kernel(width: int):
    """The tiled transpose kernel moving elements as unsigned integers of ``width`` bytes."""
    from numba import uint8, uint16, uint32, uint64

    nbtype = {1: uint8, 2: uint16, 4: uint32, 8: uint64}[width]
    T = TRANSPOSE_TILE
    R = _TILE_ROWS
    TP = T + 1  # a constant: the shared array's shape must be literal

    @cuda.jit
    def k(x, y, na, nb, nj, nl, xs0, xs1, xs2, xs3, ys0, ys1, ys2):
        # One block per (a, b, tile of j, tile of l): read the tile with consecutive threads on
        # consecutive j (x's stride-1 axis), write it with consecutive threads on consecutive l
        # (y's), through shared memory; the +1 column keeps the transposed read bank-free.
        tile = cuda.shared.array((T, TP), nbtype)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        ntj = (nj + T - 1) // T
        ntl = (nl + T - 1) // T
        items = na * nb * ntj * ntl
        for item in range(cuda.blockIdx.x, items, cuda.gridDim.x):
            tl = item % ntl
            rest = item // ntl
            tj = rest % ntj
            ab = rest // ntj
            b = ab % nb
            a = ab // nb
            j0 = tj * T
            l0 = tl * T
            xb = a * xs0 + b * xs1
            yb = a * ys0 + b * ys1
            j = j0 + tx
            for r in range(ty, T, R):
                lo = l0 + r
                if j < nj and lo < nl:
                    tile[r, tx] = x[xb + j * xs2 + lo * xs3]
            cuda.syncthreads()
            lo = l0 + tx
            for r in range(ty, T, R):
                jj = j0 + r
                if jj < nj and lo < nl:
                    y[yb + jj * ys2 + lo] = tile[tx, r]
            cuda.syncthreads()  # the tile is reused by the block's next item

    return k


_TRANSPOSE: dict[int, Any] = {}


def transpose_tiles(x, y, dims, xs, ys):
    """``y[a*ys[0] + b*ys[1] + j*ys[2] + l] = x[a*xs[0] + b*xs[1] + j*xs[2] + l*xs[3]]``
    over ``dims = (nA, nB, nj, nL)`` with ``x``, ``y`` flat device arrays of any 1, 2, 4 or
    8-byte element type, ``j`` the axis ``x`` reads contiguously (``xs[2] == 1``, the CPU
    twin's contract, for coalesced reads); ``dims``, ``xs``, ``ys``
    host int64 arrays. Moved in 32 x 32 shared-memory tiles so that reads and writes are both
    coalesced."""
    na, nb, nj, nl = _host_ints(dims)
    xs0, xs1, xs2, xs3 = _host_ints(xs)
    ys0, ys1, ys2 = _host_ints(ys)[:3]
    T = TRANSPOSE_TILE
    items = na * nb * ((nj + T - 1) // T) * ((nl + T - 1) // T)
    if not items:
        return
    width = x.dtype.itemsize
    if width not in (1, 2, 4, 8):
        raise TypeError(f"transpose_tiles moves 1, 2, 4 or 8-byte elements, not {x.dtype}")
    kern = _TRANSPOSE.get(width)
    if kern is None:
        kern = _TRANSPOSE[width] = _transpose_kernel(width)
    ut = np.dtype(f"u{width}")
    xv = x if x.dtype == ut else x.view(ut)
    yv = y if y.dtype == ut else y.view(ut)
    grid = min(items, 65535)
    kern[grid, (T, _TILE_ROWS), stream()](xv, yv, na, nb, nj, nl, xs0, xs1, xs2, xs3, ys0, ys1, ys2)


# -- copy_strided / fill_outside -----------------------------------------------------------------
def _geometry(dims: Any, xs: Any, ys: Any) -> tuple[tuple[int, ...], ...]:
    """A copy's host int arrays as tuples, 0-long ones as one axis of size 1 and strides 0
    (the element itself): the kernel takes at least one axis."""
    d = _host_ints(dims)
    if not d:
        return (1,), (0,), (0,)
    return d, _host_ints(xs), _host_ints(ys)


@cuda.jit
def _copy_strided_k(x, y, dims, xs, ys, xo, yo, total):
    r = len(dims)
    start, step = cuda.grid(1), cuda.gridsize(1)
    for e in range(start, total, step):
        # e is y's element in C order over dims: its coordinates from the last axis back
        rem = e
        xi = xo
        yi = yo
        for k in range(r):
            d = r - 1 - k
            n = dims[d]
            i = rem % n
            rem //= n
            xi += i * xs[d]
            yi += i * ys[d]
        y[yi] = x[xi]


def copy_strided(x, y, dims, xs, ys, xo, yo):
    """``y[yo + sum(i_d * ys[d])] = x[xo + sum(i_d * xs[d])]`` for every index below ``dims``:
    ``x`` and ``y`` flat device arrays of one element type (unsigned views of the bits),
    ``dims``, ``xs``, ``ys`` host int64 arrays of one length (strides in elements, negative or
    zero allowed), ``xo``, ``yo`` ints. One thread per copied element, in C order over
    ``dims`` (coalesced writes where ``ys``'s last stride is 1); compiled once per rank and
    element width."""
    d, sx, sy = _geometry(dims, xs, ys)
    total = 1
    for n in d:
        total *= n
    if total:
        _copy_strided_k[blocks(total), BLOCK, stream()](
            x, y, d, sx, sy, int64(xo), int64(yo), int64(total)
        )


@cuda.jit
def _fill_outside_k(y, dims, lo, hi, value, total):
    r = len(dims)
    start, step = cuda.grid(1), cuda.gridsize(1)
    for e in range(start, total, step):
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


def fill_outside(y, dims, lo, hi, value):
    """``y`` (a flat device array, C order over the shape ``dims``) set to ``value`` wherever
    some coordinate ``i_d`` lies outside ``[lo[d], hi[d])``; elements inside are not written.
    ``dims``, ``lo``, ``hi`` host int64 arrays of one length, ``value`` a scalar of ``y``'s
    type. One thread per element of ``y``."""
    d = _host_ints(dims)
    if d:
        low, high = _host_ints(lo), _host_ints(hi)
    else:  # a 0-d y: its one element, inside
        d, low, high = (1,), (0,), (1,)
    total = 1
    for n in d:
        total *= n
    if total:
        _fill_outside_k[blocks(total), BLOCK, stream()](y, d, low, high, value, int64(total))
