"""CUDA twin of ``kernels/cpu/resize.py``: separable interpolation along one axis.

The host computes the axis table (source indices ``idx`` (M, K), weights ``w`` (M, K) and
the out-of-crop flags ``oob`` (M,)); the launcher applies it to the input viewed as
(outer, N, inner), one thread per output element:

    out[o, j, i] = sum_k w[j, k] * x[o, idx[j, k], i]      (or ``extrapolation`` when oob[j])
"""

from __future__ import annotations

from numba import cuda

from .runtime import BLOCK, blocks, stream


@cuda.jit
def _interp_axis_k(x, idx, w, oob, extrapolation, out):
    n_outer, m, n_inner = out.shape
    n_in = x.shape[1]
    k_n = idx.shape[1]
    start, step = cuda.grid(1), cuda.gridsize(1)
    for e in range(start, n_outer * m * n_inner, step):
        i = e % n_inner
        oj = e // n_inner
        j = oj % m
        o = oj // m
        if oob[j]:
            out[o, j, i] = extrapolation
            continue
        # the CPU twin's order: taps summed from k = 0, starting from a zero of w's type
        acc = w[j, 0] * 0
        for k in range(k_n):
            src = idx[j, k]
            if src >= 0 and src < n_in:  # the host clips the table; never read past x
                acc += w[j, k] * x[o, src, i]
        out[o, j, i] = acc


def interp_axis(x, idx, w, oob, extrapolation, out):
    """Interpolate along one axis: x (O, N, I) float, idx (M, K) int64, w (M, K) of x's dtype,
    oob (M,) uint8, ``extrapolation`` a float written where ``oob``; writes out (O, M, I)."""
    total = out.size
    if total:
        ext = out.dtype.type(extrapolation)
        _interp_axis_k[blocks(total), BLOCK, stream()](x, idx, w, oob, ext, out)


# The CPU module's parallel twin is a thread-pool form; on the GPU it is the same launcher.
interp_axis_parallel = interp_axis
