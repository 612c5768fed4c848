"""Quantization kernels: affine quantize / dequantize with per-tensor, per-axis and blocked
scales.

Every kernel works on a canonical 3-D view ``(outer, axis, inner)`` of the data and a 3-D
scale (and zero point) of shape ``(so, sa, si)`` with ``so`` in ``{1, outer}``, ``si`` in
``{1, inner}``: element ``(o, a, i)`` uses ``scale[o or 0, a // block, i or 0]``. Per-tensor
is ``(1, 1, 1)`` with ``block = axis``; per-axis is ``(1, axis, 1)`` with ``block = 1``;
blocked is ``(outer, ceil(axis / block), inner)``. One compiled kernel thus serves every rank
and granularity; sizes are run-time arguments.
"""

from __future__ import annotations

import numpy as np

from .._jit import njit, pjit
from .runtime.chunks import claim
from .runtime.twins import twins


@njit(inline="always")
def _affine_one(v, s, z, divide, do_round, lo, hi):
    # divide: v / s (QuantizeLinear); else v * s (requantization with a combined factor).
    q = v / s if divide else v * s
    if do_round:
        if q != q:  # NaN has no integer image; map it to the zero point
            q = 0.0
        q = np.rint(q)  # round half to even
    q = q + z
    if q < lo:
        q = lo
    elif q > hi:
        q = hi
    return q


@njit
def quantize(x, s, z, block, divide, do_round, lo, hi, out):
    """``out = clamp(round?(x / s or x * s) + z, lo, hi)`` over ``(outer, axis, inner)``.

    ``x``, ``s``, ``z`` and ``out`` share one float dtype; ``lo``/``hi`` may be +-inf (no
    clamp) and ``do_round`` 0 (float8 / float4 targets keep the fraction for the later cast).
    """
    n_o, n_a, n_i = x.shape
    so = s.shape[0] > 1
    si = s.shape[2] > 1
    for o in range(n_o):
        oo = o if so else 0
        for a in range(n_a):
            sa = a // block
            for i in range(n_i):
                ii = i if si else 0
                out[o, a, i] = _affine_one(
                    x[o, a, i], s[oo, sa, ii], z[oo, sa, ii], divide, do_round, lo, hi
                )


@pjit
def quantize_par(ctl, x, s, z, block, divide, do_round, lo, hi, out):
    """Parallel twin of :func:`quantize` (over the flattened element index)."""
    n_o, n_a, n_i = x.shape
    so = s.shape[0] > 1
    si = s.shape[2] > 1
    n = n_o * n_a * n_i
    n_items = n
    while True:
        chunk_lo, chunk_hi = claim(ctl, n_items)
        if chunk_lo >= chunk_hi:
            break
        for k in range(chunk_lo, chunk_hi):
            o = k // (n_a * n_i)
            r = k - o * (n_a * n_i)
            a = r // n_i
            i = r - a * n_i
            oo = o if so else 0
            ii = i if si else 0
            sa = a // block
            out[o, a, i] = _affine_one(
                x[o, a, i], s[oo, sa, ii], z[oo, sa, ii], divide, do_round, lo, hi
            )


@njit
def dequantize(x, s, z, block, out):
    """``out = (x - z) * s`` over ``(outer, axis, inner)`` (all float32)."""
    n_o, n_a, n_i = x.shape
    so = s.shape[0] > 1
    si = s.shape[2] > 1
    for o in range(n_o):
        oo = o if so else 0
        for a in range(n_a):
            sa = a // block
            for i in range(n_i):
                ii = i if si else 0
                out[o, a, i] = (x[o, a, i] - z[oo, sa, ii]) * s[oo, sa, ii]


@pjit
def dequantize_par(ctl, x, s, z, block, out):
    """Parallel twin of :func:`dequantize`."""
    n_o, n_a, n_i = x.shape
    so = s.shape[0] > 1
    si = s.shape[2] > 1
    n = n_o * n_a * n_i
    n_items = n
    while True:
        chunk_lo, chunk_hi = claim(ctl, n_items)
        if chunk_lo >= chunk_hi:
            break
        for k in range(chunk_lo, chunk_hi):
            o = k // (n_a * n_i)
            r = k - o * (n_a * n_i)
            a = r // n_i
            i = r - a * n_i
            oo = o if so else 0
            ii = i if si else 0
            sa = a // block
            out[o, a, i] = (x[o, a, i] - z[oo, sa, ii]) * s[oo, sa, ii]


# ---------------------------------------------------------------------------------------------
# DynamicQuantizeLinear: the range of the data (min/max per chunk, reduced by the caller), then
# the uint8 quantization with the scale and zero point worked out from it.
# ---------------------------------------------------------------------------------------------


@njit(inline="always")
def _lo_hi(v, a, b):
    """``(min(a, v), max(b, v))``, keeping ``a``/``b`` where ``v`` is NaN."""
    return (v if v < a else a), (v if v > b else b)


@njit(inline="always")
def _minmax_chunk(x, per, lo, hi, p):
    # A view of the chunk indexed from 0: an index like start + i, which Numba cannot prove
    # non-negative, keeps a wrap-around test that stops the loop vectorising. Eight running
    # minima and maxima in scalars (LLVM packs them into vector registers; a single running
    # value is a chain of dependent compares, and lanes kept in an array stayed in memory).
    xs = x[p * per : min(x.size, (p + 1) * per)]
    n = xs.size
    z = x.dtype.type(0)
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = z
    b0 = b1 = b2 = b3 = b4 = b5 = b6 = b7 = z
    i = 0
    while i + 8 <= n:
        a0, b0 = _lo_hi(xs[i], a0, b0)
        a1, b1 = _lo_hi(xs[i + 1], a1, b1)
        a2, b2 = _lo_hi(xs[i + 2], a2, b2)
        a3, b3 = _lo_hi(xs[i + 3], a3, b3)
        a4, b4 = _lo_hi(xs[i + 4], a4, b4)
        a5, b5 = _lo_hi(xs[i + 5], a5, b5)
        a6, b6 = _lo_hi(xs[i + 6], a6, b6)
        a7, b7 = _lo_hi(xs[i + 7], a7, b7)
        i += 8
    a = min(min(min(a0, a1), min(a2, a3)), min(min(a4, a5), min(a6, a7)))
    b = max(max(max(b0, b1), max(b2, b3)), max(max(b4, b5), max(b6, b7)))
    for q in range(i, n):
        a, b = _lo_hi(xs[q], a, b)
    lo[p] = a
    hi[p] = b


minmax_chunks, minmax_chunks_par = twins(
    "minmax_chunks(x, per, lo, hi)",
    _minmax_chunk,
    items={"p": "lo.size"},
    doc="""``lo[p]``, ``hi[p]``: the minimum and maximum of chunk ``p`` (elements ``p * per``
    up to ``(p + 1) * per``) of the flat array ``x`` and of 0 (the range always holds 0, as
    DynamicQuantizeLinear's does); NaN is skipped.""",
)


@njit(inline="always")
def dynamic_scale_zero_point(lo, hi):
    """DynamicQuantizeLinear's float32 scale and zero point for the data whose chunks'
    minima and maxima (each including 0) are ``lo`` and ``hi``, in float32 arithmetic as
    onnxruntime computes them: ``scale = (mx - mn) / 255``, ``zero_point =
    round_half_even(clamp(0 - mn / scale, 0, 255))``. An all-zero range takes the scale
    1 / 255 of the ONNX reference (the quantized values are the zero point either way)."""
    f = np.float32
    mn, mx = f(0), f(0)
    for p in range(lo.size):
        mn = lo[p] if lo[p] < mn else mn
        mx = hi[p] if hi[p] > mx else mx
    rng = f(mx - mn) if mx != mn else f(1)
    scale = f(rng / f(255))
    zp = f(f(0) - f(mn / scale))
    zp = f(np.rint(min(f(255), max(f(0), zp))))
    return scale, zp


@njit(inline="always")
def _quantize_u8_chunk(x, lo, hi, per, out, y_scale, y_zp, p):
    scale, zp = dynamic_scale_zero_point(lo, hi)
    if p == 0:
        y_scale[0] = scale
        y_zp[0] = np.uint8(zp)
    start = p * per
    stop = min(x.size, start + per)
    xs, ys = x[start:stop], out[start:stop]  # indexed from 0: see _minmax_chunk
    bottom = np.float32(0)
    top = np.float32(255)
    for i in range(xs.size):
        q = xs[i] / scale
        q = bottom if q != q else q
        q = np.rint(q) + zp
        q = bottom if q < bottom else (top if q > top else q)
        ys[i] = np.uint8(q)


quantize_u8, quantize_u8_par = twins(
    "quantize_u8(x, lo, hi, per, n_chunks, out, y_scale, y_zp)",
    _quantize_u8_chunk,
    items={"p": "n_chunks"},
    doc="""DynamicQuantizeLinear's second pass: ``out = saturate(round(x / scale) + zp)``
    into uint8 (round half to even, NaN to the zero point) for the flat float32 ``x``, in
    ``n_chunks`` chunks of ``per`` elements, with the scale and zero point of the ranges
    ``lo``/``hi`` of :func:`minmax_chunks` (:func:`dynamic_scale_zero_point`), which go to
    ``y_scale`` (float32) and ``y_zp`` (uint8), flat arrays of one element.""",
)


# ---------------------------------------------------------------------------------------------
# Integer operands of MatMulInteger: ``a - zero_point``, exact for 8-bit values, as int16 (the
# micro-kernel's int16-pair mode) or float32 (its float32 blocks).
# ---------------------------------------------------------------------------------------------


@njit(inline="always")
def _shift_rows_row(a, zp, k, m, ld, out, r):
    t = out.dtype.type
    z = t(zp[(r % m) if zp.size > 1 else 0])
    src = r * k
    dst = r * ld
    for i in range(k):
        out[dst + i] = t(a[src + i]) - z
    for i in range(k, ld):
        out[dst + i] = 0


shift_rows, shift_rows_par = twins(
    "shift_rows(a, zp, k, m, ld, out)",
    _shift_rows_row,
    items={"r": "a.size // k"},
    doc="""``out = a - zp`` in ``out``'s type (int16 or float32) for the flat array ``a`` of
    rows of ``k`` values, written as rows of ``ld >= k`` values (the columns from ``k`` on
    zero): ``zp`` holds one value (every row) or one per row of an ``m``-row matrix (row
    ``r`` of the stack uses ``zp[r % m]``).""",
)


@njit(inline="always")
def _requantize_row(acc, bias, factor, zp, n, m, lo, hi, out, r):
    base = r * n
    if m > 0:  # one factor (and bias) per row of an m-row cycle: a convolution's channels
        f = factor[(r % m) if factor.size > 1 else 0]
        b = np.float64(bias[r % m]) if bias.size else 0.0
        for j in range(n):
            q = np.rint((np.float64(acc[base + j]) + b) * f) + zp
            out[base + j] = lo if q < lo else (hi if q > hi else q)
        return
    per_column = factor.size > 1
    for j in range(n):
        q = np.rint(np.float64(acc[base + j]) * factor[j if per_column else 0]) + zp
        out[base + j] = lo if q < lo else (hi if q > hi else q)


requantize_rows, requantize_rows_par = twins(
    "requantize_rows(acc, bias, factor, zp, n, m, lo, hi, out)",
    _requantize_row,
    items={"r": "acc.size // n"},
    doc="""``out = clamp(round(float64(acc) (+ bias) * factor) + zp, lo, hi)`` in ``out``'s
    (integer) type for the flat int32 rows of ``n`` values in ``acc`` (round half to even):
    ``factor`` float64, one value or, with ``m == 0``, one per column (QLinearMatMul), with
    ``m > 0`` one per row of a cycle of ``m`` rows (row ``r`` uses ``r % m``: QLinearConv's
    output channels), where ``bias`` (int32, empty for none) is added per row as well; ``zp``,
    ``lo``, ``hi`` float64 scalars. The requantization of the quantized products' exact
    integer results, in the float64 arithmetic of their implementations.""",
)
