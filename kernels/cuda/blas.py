"""Batched matrix products on the GPU: a tiled shared-memory GEMM with the epilogue in its store.

The twin of :mod:`onnxjit.kernels.cpu.blas` for the lowerings of MatMul, Gemm and FusedGemm
(:mod:`onnxjit.ops.gemm`): :func:`gemm_ks` takes the CPU kernel's arguments, device arrays in
place of host ones, and launches :func:`_gemm_kernel` on the run's stream.

The kernel: each block of 16 x 16 threads computes a 64 x 64 tile of one output matrix, each
thread a 4 x 4 register block (rows ``ty + 16 r``, columns ``tx + 16 s``: the threads of a warp
store consecutive columns). The inner dimension goes in steps of 16: a 64 x 16 block of op(A)
and a 16 x 64 block of op(B) are staged in shared memory (read from global memory with
consecutive threads on consecutive addresses, whichever way the operand is stored), then every
thread accumulates its 4 x 4 outer products from there. The store applies ``alpha``, ``beta``
and the epilogue (bias, residual, activation) to each element as it leaves the registers, so
the output is written once.

The CPU layouts: ``ta``/``tb`` 0 (as stored) or 1 (transposed) mean the same here. The
micro-kernel's panel layouts have no use on the GPU: this backend's :func:`pack_a` and
:func:`pack_b` (which the lowerings call once per constant weight) return the row-major matrix
itself, and ``A_PACKED`` / ``B_PACKED`` / ``B_BLAS`` mean "row-major as stored".
:func:`tiles` answers the whole matrix (the kernel tiles itself).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .epilogue import device_fn, finish
from .runtime import stream

# Epilogue bias modes (the CPU's values)
BIAS_NONE = 0
BIAS_COL = 1  # bias[j] added to column j
BIAS_ROW = 2  # bias[i] added to row i of each matrix

# ``ta`` / ``tb`` values of the CPU's packed and BLAS layouts: here the operand as stored,
# row-major (see :func:`pack_a`, :func:`pack_b`).
A_PACKED = 2
B_PACKED = 2
B_BLAS = 3

# Output tile of a block (TM x TN), inner step (TK), threads (TY x TX) and each thread's
# register block (RM x RN).
TM = 64
TN = 64
TK = 16
TY = 16
TX = 16
RM = TM // TY
RN = TN // TX
THREADS = TY * TX
# widths of the staged blocks in shared memory: one padding column, so that the staging
# stores of a warp fall on distinct banks (a shared array's shape must be constants)
TM_PAD = TM + 1
TN_PAD = TN + 1
# grid limits of the y and z dimensions (x: 2**31 - 1); larger counts loop in the kernel
_GRID_YZ = 65535
_GRID_X = (1 << 31) - 1


def _cuda_pack_a(a: np.ndarray, m: int, k: int) -> np.ndarray:
    """The row-major ``m x k`` matrix flat in ``a`` as this backend's A operand with ``ta ==
    A_PACKED``: a C-contiguous copy of it (row-major is what the GPU kernels read; a copy, not
    ``a`` itself, because the lowerings keep the result alive for as long as ``a``'s memory
    lives and a view would keep that memory alive forever). Host arrays, at plan time."""
    return np.array(a.reshape(m * k), copy=True)


def _cuda_pack_b(b: np.ndarray, k: int, n: int) -> np.ndarray:
    """The row-major ``k x n`` matrix flat in ``b`` as this backend's B operand with ``tb ==
    B_PACKED``: a C-contiguous copy of it (see :func:`pack_a`). Host arrays, at plan time."""
    return np.array(b.reshape(k * n), copy=True)


# Named apart from the CPU's pack_a / pack_b: the lowerings' weight cache keys on the packer's
# __name__ (onnxjit.ops.gemm._packed), and the two backends' packings differ.
pack_a = _cuda_pack_a
pack_b = _cuda_pack_b


def tiles(batch: int, m: int, n: int, k: int, threads: int, itemsize: int = 4) -> tuple[int, int]:
    """``(m, n)``: the GPU kernel cuts the product into its own tiles (the CPU twin's tiles
    split it over host threads); ``tm``/``tn`` are not read by :func:`gemm_ks`."""
    return m, n


@device_fn
def load_tile(s, width, src, base, rs, cs, p_fast, r0, k0, rows, k, tid, t):
    """Stage a block of an operand in shared memory: ``s[p, i] = src[base + (r0 + i) * rs +
    (k0 + p) * cs]`` for the block's ``width`` rows ``i`` and ``TK`` steps ``p`` (zero
    past ``rows`` / ``k``), by the block's ``THREADS`` threads (this one ``tid``), consecutive
    threads on consecutive steps when ``p_fast`` (``cs == 1``) and on consecutive rows
    otherwise, so that a warp reads contiguous memory either way."""
    for e in range(tid, TK * width, THREADS):
        if p_fast:
            i = e // TK
            p = e - i * TK
        else:
            p = e // width
            i = e - p * width
        r = r0 + i
        q = k0 + p
        if r < rows and q < k:
            s[p, i] = src[base + r * rs + q * cs]
        else:
            s[p, i] = t(0)


@device_fn
def mac_tile(a_s, b_s, acc, af, bf, ty, tx):
    """``acc[r, c] += sum_p a_s[p, ty + TY r] * b_s[p, tx + TX c]`` over the staged step (the
    thread's RM x RN register block; ``af``, ``bf``: the thread's RM and RN local scratch).
    Device helpers take their local arrays from the kernel: under the simulator only the
    kernel's own module sees the simulated ``cuda`` API."""
    for p in range(TK):
        for r in range(RM):
            af[r] = a_s[p, ty + TY * r]
        for c in range(RN):
            bf[c] = b_s[p, tx + TX * c]
        for r in range(RM):
            for c in range(RN):
                acc[r, c] += af[r] * bf[c]


@cuda.jit
def _gemm_kernel(
    batch, m, n, k, a, sa, a_rs, a_cs, b, sb, b_rs, b_cs, c, alpha, beta,
    bias, bias_mode, res, has_res, act, p0, p1,
):  # fmt: skip
    # matrix q of the batch: op(A)[i, p] = a[q * sa + i * a_rs + p * a_cs], op(B)[p, j] =
    # b[q * sb + p * b_rs + j * b_cs], C[i, j] = c[q * m * n + i * n + j]
    t = c.dtype.type
    a_s = cuda.shared.array((TK, TM_PAD), c.dtype)
    b_s = cuda.shared.array((TK, TN_PAD), c.dtype)
    acc = cuda.local.array((RM, RN), c.dtype)
    af = cuda.local.array(RM, c.dtype)
    bf = cuda.local.array(RN, c.dtype)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    tid = ty * TX + tx
    gm = (m + TM - 1) // TM
    gn = (n + TN - 1) // TN
    has_bias = bias_mode != BIAS_NONE
    for q in range(cuda.blockIdx.z, batch, cuda.gridDim.z):
        a_base = q * sa
        b_base = q * sb
        c_base = q * m * n
        for bi in range(cuda.blockIdx.y, gm, cuda.gridDim.y):
            row0 = bi * TM
            for bj in range(cuda.blockIdx.x, gn, cuda.gridDim.x):
                col0 = bj * TN
                for r in range(RM):
                    for cc in range(RN):
                        acc[r, cc] = t(0)
                for k0 in range(0, k, TK):
                    load_tile(a_s, TM, a, a_base, a_rs, a_cs, a_cs == 1, row0, k0, m, k, tid, t)
                    load_tile(b_s, TN, b, b_base, b_cs, b_rs, b_rs == 1, col0, k0, n, k, tid, t)
                    cuda.syncthreads()
                    mac_tile(a_s, b_s, acc, af, bf, ty, tx)
                    cuda.syncthreads()
                for r in range(RM):
                    i = row0 + ty + TY * r
                    if i >= m:
                        continue
                    for cc in range(RN):
                        j = col0 + tx + TX * cc
                        if j >= n:
                            continue
                        off = c_base + i * n + j
                        v = alpha * acc[r, cc]
                        if beta != t(0):  # beta == 0 ignores what c held, NaN included
                            v = v + beta * c[off]
                        bv = t(0)
                        if bias_mode == BIAS_COL:
                            bv = bias[j]
                        elif bias_mode == BIAS_ROW:
                            bv = bias[i]
                        rv = res[off] if has_res else t(0)
                        c[off] = finish(v, bv, has_bias, rv, has_res, act, p0, p1, t)


def grid_for(tiles_n: int, tiles_m: int, batch: int) -> tuple[int, int, int]:
    """The grid of a tiled product: one block per output tile, up to the grid's limits (the
    kernels loop over the rest)."""
    return (
        max(1, min(tiles_n, _GRID_X)),
        max(1, min(tiles_m, _GRID_YZ)),
        max(1, min(batch, _GRID_YZ)),
    )


def gemm_ks(batch, m, n, k, a, sa, b, sb, c, ta, tb, alpha, beta, ep, tm, tn, tk):
    """``c[p] = act(alpha * op(a[p]) @ op(b[p]) + beta * c[p] + bias + res[p])`` for each of
    ``batch`` row-major ``m x n`` products, on the device (the CPU twin's arguments).

    ``a``, ``b``, ``c`` are flat C-contiguous device arrays of one type (float32/float64):
    matrix ``p`` of ``a`` starts at element ``p * sa`` (``sa == 0``: one matrix shared by
    every ``p``), of ``b`` at ``p * sb``, of ``c`` at ``p * m * n``. ``op(A)`` is ``m x k``:
    ``a`` stored ``m x k`` (``ta`` 0 or ``A_PACKED``) or ``k x m`` (``ta == 1``); ``op(B)`` is
    ``k x n``: ``b`` stored ``k x n`` (``tb`` 0, ``B_PACKED``, ``B_BLAS``) or ``n x k`` (``tb
    == 1``). ``ep = (bias, bias_mode, res, has_res, act, p0, p1)``: ``bias`` a device array
    per column (``BIAS_COL``) or per row of each matrix (``BIAS_ROW``; empty with
    ``BIAS_NONE``), ``res`` flat like ``c`` (read when ``has_res``), ``act`` an ``ACT_*`` code
    of :mod:`.epilogue` with its parameters; ``alpha``, ``beta``, ``p0``, ``p1`` in ``c``'s
    type. ``beta == 0`` ignores what ``c`` held. ``k == 0`` gives ``beta * c`` plus the
    epilogue. ``tm``, ``tn``, ``tk`` (the CPU's host tiles) are not read. Writes ``c`` only.
    """
    if batch <= 0 or m <= 0 or n <= 0:
        return
    bias, bias_mode, res, has_res, act, p0, p1 = ep
    a_rs, a_cs = (1, m) if ta == 1 else (k, 1)
    b_rs, b_cs = (1, k) if tb == 1 else (n, 1)
    grid = grid_for((n + TN - 1) // TN, (m + TM - 1) // TM, batch)
    _gemm_kernel[grid, (TX, TY), stream()](
        batch, m, n, k, a, sa, a_rs, a_cs, b, sb, b_rs, b_cs, c, alpha, beta,
        bias, bias_mode, res, has_res, act, p0, p1,
    )  # fmt: skip


def gemm(batch, m, n, k, a, sa, b, sb, c, ta, tb, alpha, beta, ep, tm, tn):
    """:func:`gemm_ks` without the inner-dimension chunk (the CPU twin's ``gemm``)."""
    gemm_ks(batch, m, n, k, a, sa, b, sb, c, ta, tb, alpha, beta, ep, tm, tn, k)
