"""Separable interpolation along one axis, for Resize and Upsample.

The host computes, for one axis, a table of source indices ``idx`` (n_out, K) and weights
``w`` (n_out, K) (nearest: K=1; linear: 2; cubic: 4; antialiased: wider), plus a flag per
output position that is outside the crop box of ``tf_crop_and_resize``. The kernels apply it to
the input viewed as (outer, n_in, inner):

    out[o, j, i] = sum_k w[j, k] * x[o, idx[j, k], i]      (or ``extrapolation`` when oob[j])
"""

from __future__ import annotations

from .._jit import njit, pjit
from .runtime.chunks import claim


@njit
def interp_axis(x, idx, w, oob, extrapolation, out):
    """Serial kernel: x (O, N, I), idx/w (M, K), oob (M,) uint8, out (O, M, I)."""
    n_outer, _, n_inner = x.shape
    m, k_n = idx.shape
    for o in range(n_outer):
        for j in range(m):
            _row(x, idx, w, oob, extrapolation, out, o, j, n_inner, k_n)


@pjit
def interp_axis_parallel(ctl, x, idx, w, oob, extrapolation, out):
    """Parallel twin of :func:`interp_axis` over (outer, output position) rows."""
    n_outer, _, n_inner = x.shape
    m, k_n = idx.shape
    n_items = n_outer * m
    while True:
        chunk_lo, chunk_hi = claim(ctl, n_items)
        if chunk_lo >= chunk_hi:
            break
        for r in range(chunk_lo, chunk_hi):
            o = r // m
            j = r - o * m
            _row(x, idx, w, oob, extrapolation, out, o, j, n_inner, k_n)


@njit(inline="always")
def _row(x, idx, w, oob, extrapolation, out, o, j, n_inner, k_n):
    if oob[j]:
        for i in range(n_inner):
            out[o, j, i] = extrapolation
        return
    if n_inner == 1:
        acc = 0.0 * w[j, 0]
        for k in range(k_n):
            acc += w[j, k] * x[o, idx[j, k], 0]
        out[o, j, 0] = acc
        return
    for i in range(n_inner):
        out[o, j, i] = 0
    for k in range(k_n):
        wk = w[j, k]
        src = idx[j, k]
        for i in range(n_inner):
            out[o, j, i] += wk * x[o, src, i]
