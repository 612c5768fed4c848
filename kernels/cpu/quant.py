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

# Lanes of the min/max pass: independent running minima and maxima, which LLVM keeps in one
# vector register each (a single running value is a chain of dependent compares).
_LANES = 16


@njit(inline="always")
def _minmax_chunk(x, per, lo, hi, p):
    start = p * per
    stop = min(x.size, start + per)
    mn = np.zeros(_LANES, x.dtype)
    mx = np.zeros(_LANES, x.dtype)
    i = start
    while i + _LANES <= stop:
        for j in range(_LANES):
            v = x[i + j]
            mn[j] = v if v < mn[j] else mn[j]
            mx[j] = v if v > mx[j] else mx[j]
        i += _LANES
    a = mn.min()
    b = mx.max()
    for q in range(i, stop):
        v = x[q]
        a = v if v < a else a
        b = v if v > b else b
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
def _quantize_u8_chunk(x, scale, zp, per, out, p):
    start = p * per
    stop = min(x.size, start + per)
    lo = np.float32(0)
    hi = np.float32(255)
    for i in range(start, stop):
        q = x[i] / scale
        if q != q:
            q = lo
        q = np.rint(q) + zp
        if q < lo:
            q = lo
        elif q > hi:
            q = hi
        out[i] = np.uint8(q)


quantize_u8, quantize_u8_par = twins(
    "quantize_u8(x, scale, zp, per, n_chunks, out)",
    _quantize_u8_chunk,
    items={"p": "n_chunks"},
    doc="""``out = saturate(round(x / scale) + zp)`` into uint8 (round half to even, NaN to
    the zero point) for the flat float32 ``x``, in ``n_chunks`` chunks of ``per`` elements;
    ``scale`` and ``zp`` are float32 scalars.""",
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
