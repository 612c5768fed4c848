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
