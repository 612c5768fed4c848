"""Softmax-family kernels (CUDA), with the names and arguments of their CPU twins in
``kernels/cpu/nn.py``.

``softmax_rows`` normalises each contiguous row with one block of ``ROW_BLOCK`` threads: the
row maximum, then e^(x - max) written out with its sum, then the scale (or, for log-softmax,
``x - max - log(sum)``), each a strided pass with a shared-memory reduction between
(reduce.block_max / block_sum). Each thread sums its exponentials in the element type, as
the CPU twin does; the block adds the threads' sums in float64. ``softmax`` over a middle axis
(outer, n, inner) runs one thread per (o, i) column, whose neighbours read neighbouring
addresses.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from .reduce import ROW_BLOCK, _log0, block_max, block_sum
from .runtime import MAX_BLOCKS, blocks, stream


def _make_softmax_rows(T):
    """The row kernel for element type ``T`` (np.float32 or np.float64): the max and the
    scale are rounded to it, so the exp pass and the scaling run in x's type."""

    @cuda.jit
    def kernel(x, y, log):
        buf = cuda.shared.array(ROW_BLOCK, np.float64)
        rows, n = x.shape
        tid = cuda.threadIdx.x
        for r in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
            m = -math.inf
            for j in range(tid, n, ROW_BLOCK):
                v = x[r, j]
                if v > m or v != v:
                    m = v
            mx = T(block_max(buf, m))  # one of x's values: exact
            acc = T(0.0)
            for j in range(tid, n, ROW_BLOCK):
                e = math.exp(x[r, j] - mx)
                acc += e
                if not log:
                    y[r, j] = e
            total = block_sum(buf, acc)
            if log:
                lse = T(mx + _log0(total))
                for j in range(tid, n, ROW_BLOCK):
                    y[r, j] = x[r, j] - lse
            else:
                inv = T(1.0 / total)
                for j in range(tid, n, ROW_BLOCK):
                    y[r, j] = y[r, j] * inv

    return kernel


_SOFTMAX_ROWS = {np.dtype(t): _make_softmax_rows(t) for t in (np.float32, np.float64)}


def softmax_rows(x, y, log):
    """Softmax (or log-softmax, ``log``) of each row of ``x`` (R, n), float32 or float64,
    into ``y`` (same shape and type). Numerically stable (subtracts the row maximum); a NaN
    in a row makes the row NaN. One block per row."""
    rows, n = x.shape
    if rows and n:
        grid = min(rows, MAX_BLOCKS)
        _SOFTMAX_ROWS[x.dtype][grid, ROW_BLOCK, stream()](x, y, log)


@cuda.jit
def _softmax_cols(x, y, log):
    outer, n, inner = x.shape
    for t in range(cuda.grid(1), outer * inner, cuda.gridsize(1)):
        o = t // inner
        i = t - o * inner
        mx = -math.inf
        for k in range(n):
            v = x[o, k, i]
            if v > mx:
                mx = v
        sm = np.float64(0.0)  # as the CPU twin (np.float64: also under the simulator)
        for k in range(n):
            e = math.exp(x[o, k, i] - mx)
            sm += e
            if not log:
                y[o, k, i] = e
        if log:
            ls = math.log(sm)
            for k in range(n):
                y[o, k, i] = x[o, k, i] - mx - ls
        else:
            inv = 1.0 / sm
            for k in range(n):
                y[o, k, i] = y[o, k, i] * inv


def softmax(x, y, log):
    """Softmax (``log=False``) or log-softmax of ``x`` (outer, n, inner) over axis 1 into
    ``y`` (same shape and type); sums in float64 as the CPU twin. One thread per column."""
    outer, n, inner = x.shape
    if outer * inner and n:
        _softmax_cols[blocks(outer * inner), 256, stream()](x, y, log)
