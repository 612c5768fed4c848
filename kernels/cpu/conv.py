"""Convolution data-movement kernels (CPU, Numba): im2col, col2im, depthwise convolution.

The contraction itself is BLAS (numpy matmul) in the host code; these kernels only arrange
data. Tensors are canonicalised by the caller to 3 spatial dims: ``x`` is (N, C, D, H, W) with
leading size-1 spatial dims for 1-D and 2-D convolutions; ``k``, ``st``, ``dl``, ``pb`` are
int64 arrays of length 3 (kernel, strides, dilations, pads at the beginning).
"""

from __future__ import annotations

from .._jit import njit, pjit
from ..chunks import claim


@njit(inline="always")
def _span(n_out, size, st, off):
    """Output positions ``[lo, hi)`` whose tap ``o * st + off`` lies inside ``[0, size)``."""
    lo = 0
    if off < 0:
        lo = (-off + st - 1) // st
    hi = 0
    if size - off > 0:
        hi = (size - off + st - 1) // st
    if hi > n_out:
        hi = n_out
    if lo > hi:
        lo = hi
    return lo, hi


@njit(inline="always")
def _im2col_one(x, c0, k, st, dl, pb, osz, col, idx, cg):
    n = idx // cg
    c = idx % cg
    D, H, W = x.shape[2], x.shape[3], x.shape[4]
    OD, OH, OW = osz[0], osz[1], osz[2]
    for kd in range(k[0]):
        for kh in range(k[1]):
            for kw in range(k[2]):
                row = ((c * k[0] + kd) * k[1] + kh) * k[2] + kw
                dst = col[n, row]
                # The in-range output columns of this tap are one contiguous run per output
                # row: zero the edges, copy the run (a plain strided copy, no per-element test).
                woff = kw * dl[2] - pb[2]
                lo, hi = _span(OW, W, st[2], woff)
                for od in range(OD):
                    d = od * st[0] - pb[0] + kd * dl[0]
                    dok = d >= 0 and d < D
                    for oh in range(OH):
                        h = oh * st[1] - pb[1] + kh * dl[1]
                        base = (od * OH + oh) * OW
                        if dok and h >= 0 and h < H:
                            src = x[n, c0 + c, d, h]
                            for ow in range(lo):
                                dst[base + ow] = 0
                            if st[2] == 1:
                                for ow in range(lo, hi):
                                    dst[base + ow] = src[ow + woff]
                            else:
                                for ow in range(lo, hi):
                                    dst[base + ow] = src[ow * st[2] + woff]
                            for ow in range(hi, OW):
                                dst[base + ow] = 0
                        else:
                            for ow in range(OW):
                                dst[base + ow] = 0


@njit
def im2col(x, c0, cg, k, st, dl, pb, osz, col):
    """Unfold channels ``c0 .. c0+cg`` of ``x`` (N, C, D, H, W) into ``col`` (N, cg*KD*KH*KW,
    OD*OH*OW): row ``(c, kd, kh, kw)``, column ``(od, oh, ow)``; padding taps are zero."""
    for idx in range(x.shape[0] * cg):
        _im2col_one(x, c0, k, st, dl, pb, osz, col, idx, cg)


@pjit
def im2col_par(ctl, x, c0, cg, k, st, dl, pb, osz, col):
    """Parallel twin of :func:`im2col` (threads over (batch, channel))."""
    n_items = x.shape[0] * cg
    while True:
        chunk_lo, chunk_hi = claim(ctl, n_items)
        if chunk_lo >= chunk_hi:
            break
        for idx in range(chunk_lo, chunk_hi):
            _im2col_one(x, c0, k, st, dl, pb, osz, col, idx, cg)


@njit(inline="always")
def _col2im_one(col, m0, k, st, dl, pb, isz, y, idx, mg):
    n = idx // mg
    m = idx % mg
    OD, OH, OW = y.shape[2], y.shape[3], y.shape[4]
    ID, IH, IW = isz[0], isz[1], isz[2]
    for kd in range(k[0]):
        for kh in range(k[1]):
            for kw in range(k[2]):
                row = ((m * k[0] + kd) * k[1] + kh) * k[2] + kw
                for i_d in range(ID):
                    d = i_d * st[0] - pb[0] + kd * dl[0]
                    if d < 0 or d >= OD:
                        continue
                    for ih in range(IH):
                        h = ih * st[1] - pb[1] + kh * dl[1]
                        if h < 0 or h >= OH:
                            continue
                        base = (i_d * IH + ih) * IW
                        for iw in range(IW):
                            w = iw * st[2] - pb[2] + kw * dl[2]
                            if w >= 0 and w < OW:
                                y[n, m0 + m, d, h, w] += col[n, row, base + iw]


@njit
def col2im(col, m0, mg, k, st, dl, pb, isz, y):
    """Fold ``col`` (N, mg*KD*KH*KW, ID*IH*IW) into channels ``m0 .. m0+mg`` of ``y`` (N, M,
    OD, OH, OW) by accumulation (the adjoint of :func:`im2col`; used by ConvTranspose)."""
    for idx in range(col.shape[0] * mg):
        _col2im_one(col, m0, k, st, dl, pb, isz, y, idx, mg)


@pjit
def col2im_par(ctl, col, m0, mg, k, st, dl, pb, isz, y):
    """Parallel twin of :func:`col2im` (each thread owns whole output planes)."""
    n_items = col.shape[0] * mg
    while True:
        chunk_lo, chunk_hi = claim(ctl, n_items)
        if chunk_lo >= chunk_hi:
            break
        for idx in range(chunk_lo, chunk_hi):
            _col2im_one(col, m0, k, st, dl, pb, isz, y, idx, mg)


@njit(inline="always")
def _dw_one(x, w, k, st, dl, pb, y, idx, mult):
    M = y.shape[1]
    n = idx // M
    m = idx % M
    c = m // mult
    D, H, W = x.shape[2], x.shape[3], x.shape[4]
    OD, OH, OW = y.shape[2], y.shape[3], y.shape[4]
    for od in range(OD):
        for oh in range(OH):
            for ow in range(OW):
                y[n, m, od, oh, ow] = 0
    for kd in range(k[0]):
        for kh in range(k[1]):
            for kw in range(k[2]):
                wv = w[m, 0, kd, kh, kw]
                woff = kw * dl[2] - pb[2]
                lo, hi = _span(OW, W, st[2], woff)
                for od in range(OD):
                    d = od * st[0] - pb[0] + kd * dl[0]
                    if d < 0 or d >= D:
                        continue
                    for oh in range(OH):
                        h = oh * st[1] - pb[1] + kh * dl[1]
                        if h < 0 or h >= H:
                            continue
                        # In-range taps form one run [lo, hi): no per-element bounds test.
                        src = x[n, c, d, h]
                        dst = y[n, m, od, oh]
                        if st[2] == 1:
                            for ow in range(lo, hi):
                                dst[ow] += wv * src[ow + woff]
                        else:
                            for ow in range(lo, hi):
                                dst[ow] += wv * src[ow * st[2] + woff]


@njit
def depthwise(x, w, k, st, dl, pb, y, mult):
    """Depthwise convolution (group == C): output channel ``m`` of ``y`` (N, M, OD, OH, OW)
    convolves input channel ``m // mult`` of ``x`` with ``w[m, 0]`` (``w`` is (M, 1, KD, KH,
    KW), M = C * mult). Direct loops: no im2col buffer, no GEMM."""
    for idx in range(y.shape[0] * y.shape[1]):
        _dw_one(x, w, k, st, dl, pb, y, idx, mult)


@pjit
def depthwise_par(ctl, x, w, k, st, dl, pb, y, mult):
    """Parallel twin of :func:`depthwise` (threads over (batch, channel) planes)."""
    n_items = y.shape[0] * y.shape[1]
    while True:
        chunk_lo, chunk_hi = claim(ctl, n_items)
        if chunk_lo >= chunk_hi:
            break
        for idx in range(chunk_lo, chunk_hi):
            _dw_one(x, w, k, st, dl, pb, y, idx, mult)
