"""CUDA twins of ``kernels/cpu/sdpa.py``: scaled-dot-product attention with masks.

:func:`attention_rows` turns raw scores into probabilities in place, one block per row with
the row's maximum and sum reduced in shared memory; :func:`heads` does whole attentions (Q K^T
into the scores buffer, the rows, P V into the output) as three launches on the run's stream.
Names, argument lists and the layout contract are the CPU twin's (see its module docstring):
``s`` is (rows, n) with row ``r`` query ``r % sq`` of head ``(r // sq) % nh`` of batch
``r // (sq * nh)``; ``mask`` (s's dtype) and ``cond`` (bool) are 4-D with leading dims 1 or
``(nb, nh, sq)`` and last dim ``n``. Array arguments are device arrays; the small stride
arrays (``qs``, ``ks``, ``vs``, ``ys``) are the plan's host constants, read on the host, and a
host mask stand-in (absent mask) is replaced by a cached device one.

Arithmetic is in the scores' dtype (float32 or float64) with the exponential of CUDA's
libdevice rather than the CPU kernel's polynomial, and sums are reduced in a different order,
so results agree with the CPU twin to a few ulps, not bit for bit. The NaN rules are the CPU
twin's: a row holding NaN, or only -inf entries, comes out NaN (``nan_zero`` then zeroes it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda, float32, float64

from .runtime import BLOCK, blocks, stream
from .tensor import _host_ints

# Query rows up to which the CPU twin reads K through BLAS; the lowering asks the backend for
# it (and calls ``blas_ready``), so the CUDA module answers with the same value.
BLAS_ROWS = 4

# Threads per row of the softmax (a power of two: the shared-memory tree reduction halves it).
ROW_THREADS = 128


def _kernels(nbtype: Any) -> tuple[Any, Any, Any]:
    """The (rows, scores, pv) kernels for scores of numba type ``nbtype``."""
    RT = ROW_THREADS

    @cuda.jit
    def rows_k(s, nh, sq, mask, cond, has_mask, has_cond, scale, fill, swap, where_first, nz):
        red = cuda.shared.array(RT, nbtype)
        tid = cuda.threadIdx.x
        n = s.shape[1]
        mb, mh, mq, mk = mask.shape
        cb, ch, cq, ck = cond.shape
        for r in range(cuda.blockIdx.x, s.shape[0], cuda.gridDim.x):
            b = r // (sq * nh)
            h = (r // sq) % nh
            i = r % sq
            mbi, mhi, mqi = b if mb > 1 else 0, h if mh > 1 else 0, i if mq > 1 else 0
            cbi, chi, cqi = b if cb > 1 else 0, h if ch > 1 else 0, i if cq > 1 else 0
            # scale, masks (in the CPU twin's order), the row's maximum ignoring NaN (a NaN
            # still reaches the exponentials below and makes the row NaN, as on the CPU)
            top = nbtype(-math.inf)
            for j in range(tid, n, RT):
                x = s[r, j] * scale
                # a mask of one column serves every column (one fed per run is not widened)
                mj, cj = j if mk > 1 else 0, j if ck > 1 else 0
                if has_cond and where_first and cond[cbi, chi, cqi, cj] == swap:
                    x = fill
                if has_mask:
                    x = x + mask[mbi, mhi, mqi, mj]
                if has_cond and not where_first and cond[cbi, chi, cqi, cj] == swap:
                    x = fill
                s[r, j] = x
                if x > top:
                    top = x
            red[tid] = top
            cuda.syncthreads()
            half = RT // 2
            while half > 0:
                if tid < half and red[tid + half] > red[tid]:
                    red[tid] = red[tid + half]
                cuda.syncthreads()
                half //= 2
            top = red[0]
            cuda.syncthreads()  # everyone has read red[0] before it is reused for the sum
            total = nbtype(0)
            for j in range(tid, n, RT):
                e = math.exp(s[r, j] - top)
                s[r, j] = e
                total += e
            red[tid] = total
            cuda.syncthreads()
            half = RT // 2
            while half > 0:
                if tid < half:
                    red[tid] = red[tid] + red[tid + half]
                cuda.syncthreads()
                half //= 2
            inv = nbtype(1) / red[0]
            cuda.syncthreads()  # red is the next row's
            for j in range(tid, n, RT):
                p = s[r, j] * inv
                if nz and p != p:
                    p = 0
                s[r, j] = p

    @cuda.jit
    def scores_k(q, qb, qh, qr, k, kb, kh, kr, k_t, s, nh, sq, d):
        # one thread per score: s[r, j] = Q[row r] . K[key j] of r's head
        rows, sk = s.shape
        start, step = cuda.grid(1), cuda.gridsize(1)
        for e in range(start, rows * sk, step):
            j = e % sk
            r = e // sk
            t = r // sq
            i = r - t * sq
            b = t // nh
            h = t - b * nh
            q0 = b * qb + h * qh + i * qr
            k0 = b * kb + h * kh
            acc = nbtype(0)
            if k_t:  # K^T (d, sk) with row stride kr
                for p in range(d):
                    acc += q[q0 + p] * k[k0 + p * kr + j]
            else:  # K (sk, d)
                kj = k0 + j * kr
                for p in range(d):
                    acc += q[q0 + p] * k[kj + p]
            s[r, j] = acc

    @cuda.jit
    def pv_k(s, v, vb, vh, vr, y, yb, yh, yr, nh, sq, dv):
        # one thread per output element: y[row r, c] = P[r] . V[:, c] of r's head; consecutive
        # threads take consecutive c, so V's rows and y are read and written coalesced
        rows, sk = s.shape
        start, step = cuda.grid(1), cuda.gridsize(1)
        for e in range(start, rows * dv, step):
            c = e % dv
            r = e // dv
            t = r // sq
            i = r - t * sq
            b = t // nh
            h = t - b * nh
            v0 = b * vb + h * vh + c
            acc = nbtype(0)
            for j in range(sk):
                acc += s[r, j] * v[v0 + j * vr]
            y[b * yb + h * yh + i * yr + c] = acc

    return rows_k, scores_k, pv_k


_KERNELS: dict[np.dtype, tuple[Any, Any, Any]] = {}
_NB = {np.dtype(np.float32): float32, np.dtype(np.float64): float64}


def _kernels_for(dtype: np.dtype) -> tuple[Any, Any, Any]:
    dtype = np.dtype(dtype)
    ks = _KERNELS.get(dtype)
    if ks is None:
        if dtype not in _NB:
            raise TypeError(f"the CUDA attention kernels take float32 or float64, not {dtype}")
        ks = _KERNELS[dtype] = _kernels(_NB[dtype])
    return ks


_DUMMIES: dict[np.dtype, Any] = {}


def _device(a: Any, given: bool) -> Any:
    """``a`` as a device array: as it is when it is one; a host stand-in for an absent mask
    (``given`` false) as a cached device stand-in; a host mask copied to the device."""
    if not isinstance(a, np.ndarray):
        return a
    if not given:
        d = _DUMMIES.get(a.dtype)
        if d is None:
            d = _DUMMIES[a.dtype] = cuda.to_device(np.zeros((1, 1, 1, 1), a.dtype))
        return d
    return cuda.to_device(np.ascontiguousarray(a), stream=stream())


def attention_rows(s, nh, sq, mask, cond, has_mask, has_cond, scale, fill, swap, where_first,
                   nan_zero):  # fmt: skip
    """Probabilities of every row of ``s`` (rows, n) in place: ``x = s * scale``, the additive
    ``mask`` and the Where select (keep ``x`` where ``cond != swap``, else ``fill``) in the
    order ``where_first`` gives, softmax over the row; ``nan_zero`` turns NaN probabilities
    into 0. ``s`` float32 or float64 (``mask``, ``scale``, ``fill`` of its type)."""
    rows, n = s.shape
    if rows == 0 or n == 0:
        return
    rows_k = _kernels_for(s.dtype)[0]
    t = s.dtype.type
    rows_k[min(rows, 65535), ROW_THREADS, stream()](
        s, int(nh), int(sq), _device(mask, has_mask), _device(cond, has_cond), bool(has_mask),
        bool(has_cond), t(scale), t(fill), bool(swap), bool(where_first), bool(nan_zero),
    )  # fmt: skip


def heads(n_heads, q, qs, k, ks, k_given_t, v, vs, s, y, ys, nh, sq, d, dv, masks, scale, opts):
    """Attention of every (batch, head) pair ``t < n_heads`` (batch ``t // nh``, head
    ``t % nh``) into ``y``, the CPU twin's contract: ``q``, ``k``, ``v``, ``y`` flat device
    arrays with (batch, head, row) element strides ``qs``, ``ks``, ``vs``, ``ys`` (host
    arrays; 0 where an operand broadcasts) and unit column stride; per head Q (sq, d), K (sk,
    d) or, when ``k_given_t``, K^T (d, sk), V (sk, dv), output (sq, dv); ``s`` the
    (n_heads * sq, sk) scores buffer it writes; ``masks = (mask, cond, has_mask, has_cond)``
    and ``opts = (fill, swap, where_first, nan_zero)`` as for :func:`attention_rows`."""
    rows, sk = s.shape
    if rows == 0 or sk == 0 or n_heads == 0:
        return
    _, scores_k, pv_k = _kernels_for(s.dtype)
    qb, qh, qr = _host_ints(qs)[:3]
    kb, kh, kr = _host_ints(ks)[:3]
    vb, vh, vr = _host_ints(vs)[:3]
    yb, yh, yr = _host_ints(ys)[:3]
    nh, sq, d, dv = int(nh), int(sq), int(d), int(dv)
    st = stream()
    scores_k[blocks(rows * sk), BLOCK, st](
        q, qb, qh, qr, k, kb, kh, kr, bool(k_given_t), s, nh, sq, d
    )
    mask, cond, has_mask, has_cond = masks
    fill, swap, where_first, nan_zero = opts
    attention_rows(s, nh, sq, mask, cond, has_mask, has_cond, scale, fill, swap, where_first,
                   nan_zero)  # fmt: skip
    if dv:
        pv_k[blocks(rows * dv), BLOCK, st](s, v, vb, vh, vr, y, yb, yh, yr, nh, sq, dv)
