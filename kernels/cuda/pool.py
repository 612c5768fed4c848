"""Pooling on the GPU: max (with and without indices), average / Lp, global mean.

The twins of :mod:`onnxjit.kernels.cpu.pool`, same names and arguments (device arrays for host
ones). Inputs come canonicalised as there: ``x`` is (B, D, H, W) with B = batch * channels and
leading size-1 spatial dims; ``k``, ``st``, ``dl``, ``pb``, ``pe`` are int64 arrays of length 3
on the device; output sizes come from the shape of ``y``. The window kernels are one thread per
output element (grid-stride); :func:`global_mean` is one block per row, reduced in shared
memory. Sums are carried in float64, as the CPU twins carry them.
"""

from __future__ import annotations

import math

from numba import cuda, float64

from .runtime import BLOCK, MAX_BLOCKS, blocks, stream

# Threads per row of global_mean (a power of two: the tree reduction halves it).
_ROW_THREADS = 128


@cuda.jit
def _max_pool_kernel(x, y, ind, k, st, dl, pb, col_major):
    t = y.dtype.type
    D, H, W = x.shape[1], x.shape[2], x.shape[3]
    OD, OH, OW = y.shape[1], y.shape[2], y.shape[3]
    total = y.shape[0] * OD * OH * OW
    start, step = cuda.grid(1), cuda.gridsize(1)
    for e in range(start, total, step):
        ow = e % OW
        q = e // OW
        oh = q % OH
        q = q // OH
        od = q % OD
        b = q // OD
        best = t(-math.inf)
        bi = -1
        for kd in range(k[0]):
            d = od * st[0] - pb[0] + kd * dl[0]
            if d < 0 or d >= D:
                continue
            for kh in range(k[1]):
                h = oh * st[1] - pb[1] + kh * dl[1]
                if h < 0 or h >= H:
                    continue
                for kw in range(k[2]):
                    w = ow * st[2] - pb[2] + kw * dl[2]
                    if w < 0 or w >= W:
                        continue
                    v = x[b, d, h, w]
                    # NaN wins (once: the first NaN in window order), as on the CPU
                    if bi < 0 or v > best or (v != v and best == best):
                        best = v
                        if col_major:
                            bi = (w * H + h) * D + d
                        else:
                            bi = (d * H + h) * W + w
        y[b, od, oh, ow] = best
        ind[b, od, oh, ow] = b * D * H * W + bi if bi >= 0 else -1


def max_pool(x, y, ind, k, st, dl, pb, col_major):
    """Max pooling of ``x`` (B, D, H, W) into ``y`` (B, OD, OH, OW) and the flat index of
    each maximum into ``ind`` (int64, ``y``'s shape; row-major over the whole input, or
    column-major within a plane when ``col_major``). Taps in the padding are skipped (a
    window with none inside gives -inf and index -1); the first maximum in window order wins
    ties; a NaN is the maximum (the first NaN). Writes ``y`` and ``ind``."""
    if y.size == 0:
        return
    _max_pool_kernel[blocks(y.size), BLOCK, stream()](x, y, ind, k, st, dl, pb, col_major)


@cuda.jit
def _avg_pool_kernel(x, y, k, st, dl, pb, pe, lp, p, count_pad):
    D, H, W = x.shape[1], x.shape[2], x.shape[3]
    OD, OH, OW = y.shape[1], y.shape[2], y.shape[3]
    total = y.shape[0] * OD * OH * OW
    start, step = cuda.grid(1), cuda.gridsize(1)
    for e in range(start, total, step):
        ow = e % OW
        q = e // OW
        oh = q % OH
        q = q // OH
        od = q % OD
        b = q // OD
        # float64 as the CPU twin (a bare 0.0 would sum in float32 under the simulator)
        acc = float64(0)
        n_in = 0
        n_pad = 0
        for kd in range(k[0]):
            d = od * st[0] - pb[0] + kd * dl[0]
            if d < -pb[0] or d >= D + pe[0]:
                continue
            din = d >= 0 and d < D
            for kh in range(k[1]):
                h = oh * st[1] - pb[1] + kh * dl[1]
                if h < -pb[1] or h >= H + pe[1]:
                    continue
                hin = h >= 0 and h < H
                for kw in range(k[2]):
                    w = ow * st[2] - pb[2] + kw * dl[2]
                    if w < -pb[2] or w >= W + pe[2]:
                        continue
                    # inside the explicitly padded input: counts for count_include_pad
                    n_pad += 1
                    if din and hin and w >= 0 and w < W:
                        n_in += 1
                        # the CPU twin's types: a square in x's type, a power in float64
                        v = x[b, d, h, w]
                        if lp:
                            if p == 2.0:
                                acc += v * v
                            else:
                                acc += abs(float64(v)) ** p
                        else:
                            acc += v
        if lp:
            y[b, od, oh, ow] = acc ** (1.0 / p)
        else:
            cnt = n_pad if count_pad else n_in
            y[b, od, oh, ow] = acc / cnt if cnt > 0 else math.nan


def avg_pool(x, y, k, st, dl, pb, pe, lp, p, count_pad):
    """Average pooling (``lp`` False) or Lp pooling (``lp`` True: ``(sum |v|^p)^(1/p)``, ``p``
    a float) of ``x`` (B, D, H, W) into ``y`` (B, OD, OH, OW), ``pe`` the pads at the end. The
    average divides by the taps inside the input, or with ``count_pad`` by the taps inside the
    explicitly padded input (taps that only exist through ceil_mode never count; no tap at all
    gives NaN). Padding adds zero to Lp pooling. Writes ``y``."""
    if y.size == 0:
        return
    _avg_pool_kernel[blocks(y.size), BLOCK, stream()](x, y, k, st, dl, pb, pe, lp, p, count_pad)


@cuda.jit
def _max_values_kernel(x, y, k, st, dl, pb):
    t = y.dtype.type
    D, H, W = x.shape[1], x.shape[2], x.shape[3]
    OD, OH, OW = y.shape[1], y.shape[2], y.shape[3]
    total = y.shape[0] * OD * OH * OW
    start, step = cuda.grid(1), cuda.gridsize(1)
    for e in range(start, total, step):
        ow = e % OW
        q = e // OW
        oh = q % OH
        q = q // OH
        od = q % OD
        b = q // OD
        best = t(-math.inf)  # the padding's value: it never wins
        for kd in range(k[0]):
            d = od * st[0] - pb[0] + kd * dl[0]
            if d < 0 or d >= D:
                continue
            for kh in range(k[1]):
                h = oh * st[1] - pb[1] + kh * dl[1]
                if h < 0 or h >= H:
                    continue
                for kw in range(k[2]):
                    w = ow * st[2] - pb[2] + kw * dl[2]
                    if w < 0 or w >= W:
                        continue
                    v = x[b, d, h, w]
                    # a NaN sticks: nothing compares greater than it
                    if v > best or v != v:
                        best = v
        y[b, od, oh, ow] = best


def max_pool_values(x, y, k, st, dl, pb):
    """Max pooling of ``x`` (B, D, H, W) into ``y`` (B, OD, OH, OW) without indices (float
    inputs): padding never wins (a window with no tap inside gives -inf), a NaN in the window
    is the maximum. Writes ``y``."""
    if y.size == 0:
        return
    _max_values_kernel[blocks(y.size), BLOCK, stream()](x, y, k, st, dl, pb)


@cuda.jit
def _mean_rows_kernel(x, y):
    part = cuda.shared.array(_ROW_THREADS, float64)
    tid = cuda.threadIdx.x
    R, S = x.shape[0], x.shape[1]
    for r in range(cuda.blockIdx.x, R, cuda.gridDim.x):
        acc = float64(0)
        for j in range(tid, S, _ROW_THREADS):
            acc += float64(x[r, j])
        part[tid] = acc
        cuda.syncthreads()
        half = _ROW_THREADS // 2
        while half > 0:
            if tid < half:
                part[tid] += part[tid + half]
            cuda.syncthreads()
            half //= 2
        if tid == 0:
            y[r] = part[0] / S
        cuda.syncthreads()  # part is rewritten for the block's next row


def global_mean(x, y):
    """``y[r] = mean(x[r, :])`` for ``x`` (R, S) with S > 0, summed in float64 (``y`` (R,)
    of ``x``'s type). One block of threads per row; writes ``y``."""
    R = x.shape[0]
    if R == 0:
        return
    grid = max(1, min(R, MAX_BLOCKS))
    _mean_rows_kernel[grid, _ROW_THREADS, stream()](x, y)
