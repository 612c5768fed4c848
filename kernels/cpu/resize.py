"""Separable interpolation along one axis, for Resize and Upsample.

The host computes, for one axis, a table of source indices ``idx`` (n_out, K) and weights
``w`` (n_out, K) (nearest: K=1; linear: 2; cubic: 4; antialiased: wider), plus a flag per
output position that is outside the crop box of ``tf_crop_and_resize``. The kernels apply it to
the input viewed as (outer, n_in, inner):

    out[o, j, i] = sum_k w[j, k] * x[o, idx[j, k], i]      (or ``extrapolation`` when oob[j])
"""

from __future__ import annotations

from .._jit import njit
from .runtime.twins import twins


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


interp_axis, interp_axis_parallel = twins(
    "interp_axis(x, idx, w, oob, extrapolation, out)",
    _row,
    setup=("n_outer, _, n_inner = x.shape", "m, k_n = idx.shape"),
    items={"o": "n_outer", "j": "m"},
    par="interp_axis_parallel",
    doc="""Serial kernel: x (O, N, I), idx/w (M, K), oob (M,) uint8, out (O, M, I).""",
)
