"""Reduction, arg-reduction, scan and top-k kernels (CUDA) over the canonical ``(outer, n, inner)``
view, with the names and arguments of their CPU twins in ``kernels/cpu/reduce.py``.

Where the reduced elements are contiguous (``inner == 1``) one block of :data:`ROW_BLOCK`
threads reduces each row: every thread folds a strided part of the row, then the block folds
the threads' partial results in shared memory (a tree; float64 slots, which hold float32 and
float64 values exactly). Otherwise one thread reduces each ``(o, i)`` column, walking the
reduced axis in the CPU twin's order (neighbouring threads read neighbouring addresses).

The block reductions here (:func:`block_sum`, :func:`block_max`, :func:`block_reduce`) also
serve the row kernels of ``nn.py`` and ``norm.py``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import config, cuda, njit

from .runtime import MAX_BLOCKS, blocks, stream

# Reduction kinds shared with onnxjit.ops.reduce (the CPU twin's codes).
SUM = 0
PROD = 1
MAX = 2
MIN = 3
SUMSQ = 4
L1 = 5
LOGSUMEXP = 6

# What finish does after a reduction (the CPU twin's codes).
FINISH_CAST = 0
FINISH_MEAN = 1
FINISH_SQRT = 2
FINISH_LOG = 3

#: Threads per block of the row kernels (a power of two: the shared-memory tree halves it).
ROW_BLOCK = 128
_TREE_STEPS = 7  # log2(ROW_BLOCK)
assert 1 << _TREE_STEPS == ROW_BLOCK

if config.ENABLE_CUDASIM:
    # the simulator's device functions see the thread's cuda.threadIdx & co.
    device = cuda.jit(device=True)
else:
    # Numba inlines these into the kernel before typing: a device function of its own would
    # need a driver even to compile (numba-cuda asks the current device for its compute
    # capability), and the compile-only checks run without one.
    device = njit(inline="always")


@device
def block_reduce(buf, v, kind):
    """Fold each thread's ``v`` across the block with ``kind`` (SUM, PROD, MAX, MIN; MAX and
    MIN propagate NaN) into the value every thread gets back. ``buf`` is a shared float64
    array of ROW_BLOCK slots; every thread of the block must call this."""
    tid = cuda.threadIdx.x
    buf[tid] = v
    cuda.syncthreads()
    for step in range(_TREE_STEPS):
        half = ROW_BLOCK >> (step + 1)
        if tid < half:
            a = buf[tid]
            b = buf[tid + half]
            if kind == PROD:
                buf[tid] = a * b
            elif kind == MAX:
                if b > a or b != b:
                    buf[tid] = b
            elif kind == MIN:
                if b < a or b != b:
                    buf[tid] = b
            else:
                buf[tid] = a + b
        cuda.syncthreads()
    total = buf[0]
    # nobody may refill buf before every thread has read the total
    cuda.syncthreads()
    return total


@device
def block_sum(buf, v):
    """The block's sum of each thread's ``v`` (float64), for every thread (see block_reduce)."""
    tid = cuda.threadIdx.x
    buf[tid] = v
    cuda.syncthreads()
    for step in range(_TREE_STEPS):
        half = ROW_BLOCK >> (step + 1)
        if tid < half:
            buf[tid] = buf[tid] + buf[tid + half]
        cuda.syncthreads()
    total = buf[0]
    cuda.syncthreads()
    return total


@device
def block_max(buf, v):
    """The block's maximum of each thread's ``v`` (float64; NaN wins), for every thread."""
    tid = cuda.threadIdx.x
    buf[tid] = v
    cuda.syncthreads()
    for step in range(_TREE_STEPS):
        half = ROW_BLOCK >> (step + 1)
        if tid < half:
            b = buf[tid + half]
            if b > buf[tid] or b != b:
                buf[tid] = b
        cuda.syncthreads()
    total = buf[0]
    cuda.syncthreads()
    return total


@device
def _log0(s):
    """math.log with log(0) = -inf written out: the device gives it, the simulator (Python's
    math.log) raises instead."""
    return -math.inf if s == 0.0 else math.log(s)


@cuda.jit
def _reduce_rows(x, kind, out):
    # one block per row o of x (outer, n, 1), grid-stride over rows
    buf = cuda.shared.array(ROW_BLOCK, np.float64)
    outer, n, _ = x.shape
    tid = cuda.threadIdx.x
    for o in range(cuda.blockIdx.x, outer, cuda.gridDim.x):
        if kind == LOGSUMEXP:
            m = -math.inf
            for j in range(tid, n, ROW_BLOCK):
                v = x[o, j, 0]
                if v > m or v != v:
                    m = v
            m = block_reduce(buf, m, MAX)
            # no finite shift (all -inf, an inf or a NaN): the unshifted sum, as the CPU twin
            shift = 0.0 if (m != m or m == math.inf or m == -math.inf) else m
            s = np.float64(0.0)
            for j in range(tid, n, ROW_BLOCK):
                s += math.exp(x[o, j, 0] - shift)
            s = block_sum(buf, s)
            if tid == 0:
                out[o, 0] = shift + _log0(s)
            continue
        # float64 partial results (np.float64: under the simulator a Python float added to a
        # float32 would stay float32)
        if kind == PROD:
            acc = np.float64(1.0)
        elif kind == MAX:
            acc = np.float64(-math.inf)
        elif kind == MIN:
            acc = np.float64(math.inf)
        else:
            acc = np.float64(0.0)
        for j in range(tid, n, ROW_BLOCK):
            v = x[o, j, 0]
            if kind == SUM:
                acc += v
            elif kind == PROD:
                acc *= v
            elif kind == MAX:
                if v > acc or v != v:
                    acc = v
            elif kind == MIN:
                if v < acc or v != v:
                    acc = v
            elif kind == SUMSQ:
                acc += v * v
            else:
                acc += abs(v)
        red = PROD if kind == PROD else (MAX if kind == MAX else (MIN if kind == MIN else SUM))
        total = block_reduce(buf, acc, red)
        if tid == 0:
            prev = out[o, 0]
            if kind == PROD:
                out[o, 0] = prev * total
            elif kind == MAX:
                if total > prev or total != total:
                    out[o, 0] = total
            elif kind == MIN:
                if total < prev or total != total:
                    out[o, 0] = total
            else:
                out[o, 0] = prev + total


@cuda.jit
def _reduce_cols(x, kind, out):
    # one thread per output (o, i), the CPU twin's loop over j
    outer, n, inner = x.shape
    for t in range(cuda.grid(1), outer * inner, cuda.gridsize(1)):
        o = t // inner
        i = t - o * inner
        if kind == LOGSUMEXP:
            m = -math.inf
            for j in range(n):
                v = x[o, j, i]
                if v > m or v != v:
                    m = v
            shift = 0.0 if (m != m or m == math.inf or m == -math.inf) else m
            s = np.float64(0.0)
            for j in range(n):
                s += math.exp(x[o, j, i] - shift)
            out[o, i] = shift + _log0(s)
            continue
        acc = out[o, i]
        for j in range(n):
            v = x[o, j, i]
            if kind == SUM:
                acc += v
            elif kind == PROD:
                acc *= v
            elif kind == MAX:
                if v > acc or v != v:
                    acc = v
            elif kind == MIN:
                if v < acc or v != v:
                    acc = v
            elif kind == SUMSQ:
                acc += v * v
            else:
                acc += abs(v)
        out[o, i] = acc


def reduce3(x, kind, out):
    """``out[o, i] = reduce_j x[o, j, i]`` folded into ``out``, which arrives filled with the
    identity (``kind``: SUM, PROD, MAX, MIN, SUMSQ, L1; LOGSUMEXP overwrites ``out`` with
    ``log(sum(exp))``, shifted by the maximum). ``x`` (outer, n, inner) float32 or float64;
    ``out`` (outer, inner) float64 for the sums, x's type for MAX and MIN. Rows (inner == 1)
    are reduced by one block each, columns by one thread each; launched on the run's stream."""
    outer, n, inner = x.shape
    if outer * inner == 0:
        return
    if inner == 1:
        _reduce_rows[min(outer, MAX_BLOCKS), ROW_BLOCK, stream()](x, kind, out)
    else:
        _reduce_cols[blocks(outer * inner), 256, stream()](x, kind, out)


@cuda.jit
def _reset_k(acc, value):
    rows, cols = acc.shape
    for t in range(cuda.grid(1), rows * cols, cuda.gridsize(1)):
        r = t // cols
        acc[r, t - r * cols] = value


def reset(acc, value):
    """Fill accumulator ``acc`` (2-D) with the identity ``value`` of the reduction about to
    run; launched on the run's stream."""
    if acc.size:
        _reset_k[blocks(acc.size), 256, stream()](acc, value)


@cuda.jit
def _finish_k(acc, how, n, y):
    rows, cols = acc.shape
    for t in range(cuda.grid(1), rows * cols, cuda.gridsize(1)):
        r = t // cols
        c = t - r * cols
        v = acc[r, c]
        if how == FINISH_MEAN:
            v = v / n
        elif how == FINISH_SQRT:
            v = math.sqrt(v) if v >= 0.0 else math.nan
        elif how == FINISH_LOG:
            v = _log0(v) if v >= 0.0 else math.nan
        y[r, c] = v


def finish(acc, how, n, y):
    """Write the reduction held in ``acc`` (float64, 2-D) into ``y`` (same shape) in y's type
    after step ``how``: FINISH_CAST, FINISH_MEAN (divide by ``n``), FINISH_SQRT or
    FINISH_LOG, as the CPU twin (NaN for the square root or logarithm of a negative sum)."""
    if acc.size:
        _finish_k[blocks(acc.size), 256, stream()](acc, how, n, y)


@cuda.jit
def _argreduce_cols(x, want_max, last, out):
    outer, n, inner = x.shape
    for t in range(cuda.grid(1), outer * inner, cuda.gridsize(1)):
        o = t // inner
        i = t - o * inner
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


def argreduce3(x, want_max, last, out):
    """Index (into ``out`` (outer, inner), int64) of the max (``want_max``) or min along axis
    1 of ``x`` (outer, n, inner), n >= 1; ties to the first index, or the last when ``last``;
    the first NaN wins (the last when ``last``), as the CPU twin. One thread per output."""
    outer, n, inner = x.shape
    if outer * inner == 0:
        return
    _argreduce_cols[blocks(outer * inner), 256, stream()](x, want_max, last, out)


@cuda.jit
def _cumsum_cols(x, exclusive, reverse, out):
    outer, n, inner = x.shape
    for t in range(cuda.grid(1), outer * inner, cuda.gridsize(1)):
        o = t // inner
        i = t - o * inner
        s = x[o, 0, i] * 0
        for k in range(n):
            j = n - 1 - k if reverse else k
            v = x[o, j, i]
            if exclusive:
                out[o, j, i] = s
                s += v
            else:
                s += v
                out[o, j, i] = s


def cumsum3(x, exclusive, reverse, out):
    """Cumulative sum along axis 1 of ``x`` (outer, n, inner) into ``out`` (same shape and
    type), ``exclusive`` and ``reverse`` as ONNX CumSum; one thread scans each (o, i) line in
    the CPU twin's order."""
    outer, n, inner = x.shape
    if outer * inner == 0 or n == 0:
        return
    _cumsum_cols[blocks(outer * inner), 256, stream()](x, exclusive, reverse, out)


@device
def _beats(v, v_nan, u, largest):
    """Whether ``v`` (NaN: ``v_nan``) ranks strictly before the kept ``u``: NaN ranks as the
    largest value, and a tie keeps the element met first (the lower index)."""
    u_nan = u != u
    if largest:
        return (v_nan and not u_nan) or v > u
    return (u_nan and not v_nan) or v < u


@cuda.jit
def _topk_cols(x, k, largest, values, indices):
    # One thread per (o, i) line keeps the line's top k sorted in values/indices[o, :, i] by
    # insertion, reading the line in index order. An element moves ahead of a kept one only
    # when strictly better, so equal values keep index order (ties by lower index) and NaNs,
    # which compare unequal to everything, keep index order among themselves. NaN counts as
    # the largest value (first when largest, last otherwise), as the CPU twin's argsort.
    outer, n, inner = x.shape
    for t in range(cuda.grid(1), outer * inner, cuda.gridsize(1)):
        o = t // inner
        i = t - o * inner
        kept = 0
        for j in range(n):
            v = x[o, j, i]
            v_nan = v != v
            if kept < k:
                pos = kept
                kept += 1
            else:
                if not _beats(v, v_nan, values[o, k - 1, i], largest):
                    continue
                pos = k - 1
            # shift the kept elements that v beats one place down, then write v in the gap
            while pos > 0:
                u = values[o, pos - 1, i]
                if not _beats(v, v_nan, u, largest):
                    break
                values[o, pos, i] = u
                indices[o, pos, i] = indices[o, pos - 1, i]
                pos -= 1
            values[o, pos, i] = v
            indices[o, pos, i] = j


def topk3(x, k, largest, values, indices):
    """Top ``k`` along axis 1 of ``x`` (outer, n, inner), 0 <= k <= n, into ``values``
    (outer, k, inner, x's type) and ``indices`` (outer, k, inner, int64): the largest first
    (the smallest first unless ``largest``), ties by lower index, NaN ranked above every
    number (first when ``largest``, last otherwise), exactly as the CPU twin. One thread per
    (o, i) line inserts each element into the sorted top k (O(n k) work per line)."""
    outer, n, inner = x.shape
    if outer * inner == 0 or k == 0:
        return
    _topk_cols[blocks(outer * inner), 256, stream()](x, k, largest, values, indices)
