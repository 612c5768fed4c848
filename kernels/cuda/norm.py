"""Normalisation kernels (CUDA): LayerNorm, SkipLayerNorm and RMSNorm rows, standardised
(MVN) rows and group/instance norm, with the names and arguments of their CPU twins in
``kernels/cpu/norm.py``.

One block of ``ROW_BLOCK`` threads normalises a row (a group, for group_norm); blocks walk the
rows grid-stride. Statistics are two-pass as on the CPU (mean, then the mean of squared
deviations): each thread sums a strided part of the row, in the element type where the CPU
twin accumulates in it (the layer/RMS rows) and in float64 where it does (standardize_rows,
group_norm; written ``np.float64(0.0)``, which the simulator also keeps in float64); the
block adds the threads' sums in float64 (reduce.block_sum). The per-row statistics go through
the ``mean``/``inv`` outputs, as on the CPU, which also rounds them to the element type
before the output pass uses them.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from .reduce import ROW_BLOCK, block_sum
from .runtime import MAX_BLOCKS, stream


def _grid(rows):
    return min(rows, MAX_BLOCKS), ROW_BLOCK, stream()


@cuda.jit
def _layer_norm(x, scale, bias, eps, y, mean, inv, zero):
    buf = cuda.shared.array(ROW_BLOCK, np.float64)
    rows, n = x.shape
    tid = cuda.threadIdx.x
    for r in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
        acc = zero
        for j in range(tid, n, ROW_BLOCK):
            acc += x[r, j]
        total = block_sum(buf, acc)
        if tid == 0:
            mean[r] = total / n
        cuda.syncthreads()
        m = mean[r]
        acc2 = zero
        for j in range(tid, n, ROW_BLOCK):
            d = x[r, j] - m
            acc2 += d * d
        sq = block_sum(buf, acc2)
        if tid == 0:
            inv[r] = 1.0 / math.sqrt(sq / n + eps)
        cuda.syncthreads()
        iv = inv[r]
        for j in range(tid, n, ROW_BLOCK):
            y[r, j] = (x[r, j] - m) * iv * scale[j] + bias[j]


def layer_norm_rows(x, scale, bias, eps, y, mean, inv):
    """LayerNorm of each row of ``x`` (R, n), float32 or float64, into ``y`` (same shape and
    type; may be ``x``): ``y = (x - mean) / sqrt(var + eps) * scale + bias`` with
    ``scale``/``bias`` (n,); ``mean[r]`` and ``inv[r]`` (x's type, length R) receive the row
    mean and 1 / sqrt(var + eps). One block per row."""
    rows = x.shape[0]
    if rows:
        _layer_norm[_grid(rows)](x, scale, bias, eps, y, mean, inv, x.dtype.type(0))


@cuda.jit
def _skip_layer_norm(a, b, scale, bias, eps, y, s, write_sum, mean, inv, zero):
    buf = cuda.shared.array(ROW_BLOCK, np.float64)
    rows, n = a.shape
    tid = cuda.threadIdx.x
    for r in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
        rb = r if b.shape[0] > 1 else 0
        acc = zero
        # each thread later reads back only the elements it wrote itself: no barrier needed
        for j in range(tid, n, ROW_BLOCK):
            v = a[r, j] + b[rb, j]
            y[r, j] = v
            if write_sum:
                s[r, j] = v
            acc += v
        total = block_sum(buf, acc)
        if tid == 0:
            mean[r] = total / n
        cuda.syncthreads()
        m = mean[r]
        acc2 = zero
        for j in range(tid, n, ROW_BLOCK):
            d = y[r, j] - m
            acc2 += d * d
        sq = block_sum(buf, acc2)
        if tid == 0:
            inv[r] = 1.0 / math.sqrt(sq / n + eps)
        cuda.syncthreads()
        iv = inv[r]
        for j in range(tid, n, ROW_BLOCK):
            y[r, j] = (y[r, j] - m) * iv * scale[j] + bias[j]


def skip_layer_norm_rows(a, b, scale, bias, eps, y, s, write_sum, mean, inv):
    """``s = a + b`` (``a`` (R, n), ``b`` (R, n) or one row (1, n) added to every row), then
    :func:`layer_norm_rows` of the sum into ``y``; the sum is also stored into ``s`` when
    ``write_sum`` (``s`` may be ``y`` otherwise). One block per row."""
    rows = a.shape[0]
    if rows:
        _skip_layer_norm[_grid(rows)](
            a, b, scale, bias, eps, y, s, write_sum, mean, inv, a.dtype.type(0)
        )


@cuda.jit
def _rms_norm(x, scale, eps, y, inv, zero):
    buf = cuda.shared.array(ROW_BLOCK, np.float64)
    rows, n = x.shape
    tid = cuda.threadIdx.x
    for r in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
        acc = zero
        for j in range(tid, n, ROW_BLOCK):
            v = x[r, j]
            acc += v * v
        sq = block_sum(buf, acc)
        if tid == 0:
            inv[r] = 1.0 / math.sqrt(sq / n + eps)
        cuda.syncthreads()
        iv = inv[r]
        for j in range(tid, n, ROW_BLOCK):
            y[r, j] = x[r, j] * iv * scale[j]


def rms_norm_rows(x, scale, eps, y, inv):
    """RMSNorm of each row of ``x`` (R, n): ``y = x / sqrt(mean(x^2) + eps) * scale``;
    ``inv[r]`` (x's type) receives 1 / sqrt(mean(x^2) + eps). One block per row."""
    rows = x.shape[0]
    if rows:
        _rms_norm[_grid(rows)](x, scale, eps, y, inv, x.dtype.type(0))


@cuda.jit
def _standardize(x, scale, bias, eps_in, eps_out, y, mean, inv):
    buf = cuda.shared.array(ROW_BLOCK, np.float64)
    rows, n = x.shape
    tid = cuda.threadIdx.x
    for r in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
        acc = np.float64(0.0)
        for j in range(tid, n, ROW_BLOCK):
            acc += x[r, j]
        m = block_sum(buf, acc) / n if n > 0 else 0.0
        acc2 = np.float64(0.0)
        for j in range(tid, n, ROW_BLOCK):
            d = x[r, j] - m
            acc2 += d * d
        var = block_sum(buf, acc2) / n if n > 0 else 0.0
        iv = 1.0 / (math.sqrt(var + eps_in) + eps_out)
        if tid == 0:
            mean[r] = m
            inv[r] = iv
        for j in range(tid, n, ROW_BLOCK):
            y[r, j] = (x[r, j] - m) * iv * scale[j] + bias[j]


def standardize_rows(x, scale, bias, eps_in, eps_out, y, mean, inv):
    """For each row of ``x`` (R, n): ``y = (x - mean) / (sqrt(var + eps_in) + eps_out) *
    scale + bias`` with ``scale``/``bias`` (n,); ``mean[r]`` and ``inv[r]`` (float64, length
    R) receive the mean and the inverse denominator. Statistics in float64."""
    rows = x.shape[0]
    if rows:
        _standardize[_grid(rows)](x, scale, bias, eps_in, eps_out, y, mean, inv)


@cuda.jit
def _group_norm(x, groups, scale, bias, eps, y):
    buf = cuda.shared.array(ROW_BLOCK, np.float64)
    N, C, S = x.shape
    cg = C // groups
    cnt = cg * S
    tid = cuda.threadIdx.x
    for idx in range(cuda.blockIdx.x, N * groups, cuda.gridDim.x):
        n = idx // groups
        c0 = (idx % groups) * cg
        acc = np.float64(0.0)
        for k in range(tid, cnt, ROW_BLOCK):
            acc += x[n, c0 + k // S, k % S]
        m = block_sum(buf, acc) / cnt if cnt > 0 else 0.0
        acc2 = np.float64(0.0)
        for k in range(tid, cnt, ROW_BLOCK):
            d = x[n, c0 + k // S, k % S] - m
            acc2 += d * d
        var = block_sum(buf, acc2) / cnt if cnt > 0 else 0.0
        iv = 1.0 / math.sqrt(var + eps)
        for k in range(tid, cnt, ROW_BLOCK):
            c = c0 + k // S
            a = scale[c] * iv
            y[n, c, k % S] = x[n, c, k % S] * a + (bias[c] - m * a)


def group_norm(x, groups, scale, bias, eps, y):
    """Normalise ``x`` (N, C, S) over each group of ``C // groups`` consecutive channels (and
    all of S), then apply the per-channel ``scale``/``bias`` (length C) into ``y``;
    InstanceNormalization is ``groups == C``. Statistics in float64; one block per group."""
    work = x.shape[0] * groups
    if work:
        _group_norm[_grid(work)](x, groups, scale, bias, eps, y)
