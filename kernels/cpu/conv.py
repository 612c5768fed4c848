"""Convolution data-movement kernels (CPU, Numba): im2col, col2im, depthwise convolution.

The contraction itself is BLAS (numpy matmul) in the host code; these kernels only arrange
data. Tensors are canonicalised by the caller to 3 spatial dims: ``x`` is (N, C, D, H, W) with
leading size-1 spatial dims for 1-D and 2-D convolutions; ``k``, ``st``, ``dl``, ``pb`` are
int64 arrays of length 3 (kernel, strides, dilations, pads at the beginning).
"""

from __future__ import annotations

import numpy as np

from .._jit import njit
from .blas import (
    A_PACKED,
    BIAS_NONE,
    BIAS_ROW,
    block_geometry,
    chunk_epilogue,
    gemm_call_ep,
)
from .epilogue import activate
from .runtime.twins import twins
from .shuffle import T16, deinterleave2, split_row, transpose16


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
def _u(i):
    return np.uint64(i)


@njit(inline="always")
def _zero(v):
    for j in range(v.shape[0]):
        v[j] = 0


@njit(inline="always")
def _copy(dst, src):
    for j in range(dst.shape[0]):
        dst[j] = src[j]


@njit(inline="always")
def _phase_width(ow, kw, sw, dw):
    """Columns of one stride phase of the input span an output row reads: the window's
    extent over the row divided by the stride, rounded up."""
    return ((ow - 1) * sw + (kw - 1) * dw + sw) // sw


@njit(inline="always")
def _copy_run(dst, base, xf, src, ulo, uhi, uow, sw, usw):
    """One output row of an unfolded input at ``dst[base:]``: zeros before ``ulo`` and from
    ``uhi`` to ``uow``, and between them the input from ``xf[src]`` at stride ``sw`` (a plain
    copy at stride 1)."""
    for j in range(ulo):
        dst[base + j] = 0
    run = base + ulo
    if sw == 1:
        for j in range(uhi - ulo):
            dst[run + j] = xf[src + j]
    else:
        for j in range(uhi - ulo):
            dst[run + j] = xf[src + j * usw]
    for j in range(uhi, uow):
        dst[base + j] = 0


@njit(inline="always")
def _im2col_item(xf, C, D, H, W, c0, cg, k, st, dl, pb, osz, col, idx):
    """Rows ``(c, kd, kh, 0..KW-1)`` of ``col`` for item ``idx`` = (image, channel, kd, kh).

    Each output row's in-range taps are one run: zeros, a copy (contiguous at stride 1),
    zeros. Indices are unsigned so that LLVM sees no negative-index test (``xf`` is ``x``
    flattened)."""
    KD, KH, KW = k[0], k[1], k[2]
    per_c = KD * KH
    per_n = cg * per_c
    n = idx // per_n
    r = idx - n * per_n
    c = r // per_c
    r -= c * per_c
    kd = r // KH
    kh = r - kd * KH
    OD, OH, OW = osz[0], osz[1], osz[2]
    sw = st[2]
    usw = _u(sw)
    uow = _u(OW)
    plane = (n * C + c0 + c) * D
    for kw in range(KW):
        off = kw * dl[2] - pb[2]
        lo, hi = _span(OW, W, sw, off)
        ulo, uhi = _u(lo), _u(hi)
        dst = col[n, ((c * KD + kd) * KH + kh) * KW + kw]
        for od in range(OD):
            d = od * st[0] + kd * dl[0] - pb[0]
            for oh in range(OH):
                h = oh * st[1] + kh * dl[1] - pb[1]
                base = _u((od * OH + oh) * OW)
                if d < 0 or d >= D or h < 0 or h >= H:
                    for j in range(uow):
                        dst[base + j] = 0
                    continue
                src = _u(((plane + d) * H + h) * W + lo * sw + off)
                _copy_run(dst, base, xf, src, ulo, uhi, uow, sw, usw)


im2col, im2col_par = twins(
    "im2col(x, c0, cg, k, st, dl, pb, osz, col)",
    _im2col_item,
    setup=("N, C, D, H, W = x.shape", "xf = x.reshape(-1)"),
    items={"idx": "N * cg * k[0] * k[1]"},
    doc="""Unfold channels ``c0 .. c0+cg`` of ``x`` (N, C, D, H, W) into ``col`` (N, cg*KD*KH*KW,
    OD*OH*OW): row ``(c, kd, kh, kw)``, column ``(od, oh, ow)``; padding taps are zero.""",
)


@njit
def gather_table(k, st, dl, pb, osz, isz, tab):
    """Fill ``tab`` (KD*KH*KW, OD*OH*OW) with, for each tap and output position, the flat
    offset ``(d * H + h) * W + w`` of the input element it reads within one channel volume
    of size ``isz`` (D, H, W), or ``D * H * W`` (a zero slot past the volume) where the tap
    falls in the padding."""
    D, H, W = isz[0], isz[1], isz[2]
    V = D * H * W
    OD, OH, OW = osz[0], osz[1], osz[2]
    for kd in range(k[0]):
        for kh in range(k[1]):
            for kw in range(k[2]):
                row = tab[(kd * k[1] + kh) * k[2] + kw]
                for od in range(OD):
                    d = od * st[0] + kd * dl[0] - pb[0]
                    for oh in range(OH):
                        h = oh * st[1] + kh * dl[1] - pb[1]
                        for ow in range(OW):
                            w = ow * st[2] + kw * dl[2] - pb[2]
                            t = (od * OH + oh) * OW + ow
                            if d < 0 or d >= D or h < 0 or h >= H or w < 0 or w >= W:
                                row[t] = V
                            else:
                                row[t] = (d * H + h) * W + w


@njit(inline="always")
def _gather_item(xf, C, V, c0, cg, tab, col, idx, vol):
    """Rows ``(c, every tap)`` of ``col`` for item ``idx`` = (image, channel): the channel
    volume is copied into ``vol`` (V + 1 elements, the last one zero), then each row is one
    gather through ``tab``."""
    n = idx // cg
    c = idx - n * cg
    base = _u((n * C + c0 + c) * V)
    for j in range(_u(V)):
        vol[j] = xf[base + j]
    vol[V] = 0
    K, S = tab.shape[0], tab.shape[1]
    for tap in range(K):
        dst = col[n, c * K + tap]
        ti = tab[tap]
        for t in range(S):
            dst[t] = vol[ti[t]]


im2col_gather, im2col_gather_par = twins(
    "im2col_gather(x, c0, cg, tab, col)",
    _gather_item,
    setup=(
        "N, C = x.shape[0], x.shape[1]",
        "V = x.shape[2] * x.shape[3] * x.shape[4]",
        "xf = x.reshape(-1)",
        "vol = np.empty(V + 1, x.dtype)",
    ),
    items={"idx": "N * cg"},
    doc=""":func:`im2col` through a :func:`gather_table` ``tab`` (for small output planes, where
    the per-run cost of the run copies dominates).""",
)


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


col2im, col2im_par = twins(
    "col2im(col, m0, mg, k, st, dl, pb, isz, y)",
    _col2im_one,
    items={"idx": "col.shape[0] * mg"},
    doc="""Fold ``col`` (N, mg*KD*KH*KW, ID*IH*IW) into channels ``m0 .. m0+mg`` of ``y`` (N, M,
    OD, OH, OW) by accumulation (the adjoint of :func:`im2col`; used by ConvTranspose).""",
)


@njit(inline="always")
def _dw_geom(x, k, st, dl, pb, osz):
    """What every plane of a depthwise call shares: ``(Dp, Hq, Wq, toff, cols)``.

    A plane is padded into a buffer of Dp padded depth slices, each split into sh * sw stride
    phases of Hq x Wq (one slack row, so that the junk columns of the last output row stay
    inside). ``toff[tap]`` is the buffer offset tap (kd, kh, kw) reads for output (0, 0, 0);
    ``cols[qw]`` = (first input column of phase qw, its column in the phase, column count).
    Integer divisions are done here once, not per plane or per row."""
    Dp = (osz[0] - 1) * st[0] + (k[0] - 1) * dl[0] + 1
    Hq = osz[1] + ((k[1] - 1) * dl[1]) // st[1] + 1
    Wq = osz[2] + ((k[2] - 1) * dl[2]) // st[2]
    sh, sw = st[1], st[2]
    HW = Hq * Wq
    toff = np.empty(k[0] * k[1] * k[2], np.uint64)
    for kd in range(k[0]):
        for kh in range(k[1]):
            for kw in range(k[2]):
                qh, qw = (kh * dl[1]) % sh, (kw * dl[2]) % sw
                s0 = kd * dl[0] * sh * sw
                toff[(kd * k[1] + kh) * k[2] + kw] = (
                    (s0 + qh * sw + qw) * HW + ((kh * dl[1]) // sh) * Wq + (kw * dl[2]) // sw
                )
    W = x.shape[4]
    pw = pb[2]
    cols = np.empty((sw, 3), np.int64)
    for qw in range(sw):
        # input columns w = w0 + m * sw land in phase qw at j = j0 + m
        w0 = (qw - pw) % sw
        j0 = (w0 + pw) // sw
        cnt = (W - w0 + sw - 1) // sw
        if cnt > Wq - j0:
            cnt = Wq - j0
        cols[qw, 0], cols[qw, 1], cols[qw, 2] = w0, j0, max(cnt, 0)
    return Dp, Hq, Wq, toff, cols


@njit(inline="always")
def _dw_fill(xf, plane, D, H, W, st, pb, g, bf):
    """The input volume at ``plane`` (flat offset / (H*W) of its first depth slice) padded
    and split into stride phases in ``bf``: phase (qh, qw) of padded slice dd holds, at row i
    and column j, the padded input element (dd, i * sh + qh, j * sw + qw). Only the input's
    elements are written: the padding keeps the value :func:`_dw_bufs` filled it with, as
    every plane of one call puts its elements at the same places (refilling the whole buffer
    per plane took 8 of ResNet-18's MaxPool's 67 us on one thread)."""
    Dp, Hq, Wq, toff, cols = g
    sh, sw = st[1], st[2]
    ph = pb[1]
    usw = _u(sw)
    uW = _u(W)
    i_start = ph // sh
    qh_start = ph - i_start * sh
    # sw == 2: the phase holding the even input columns (a) and the odd ones (b)
    qa = 0 if cols[0, 0] == 0 else 1
    qb = 1 - qa
    for dd in range(Dp):
        d = dd - pb[0]
        if d < 0 or d >= D:
            continue
        i, qh = i_start, qh_start
        src = _u(((plane + d) * H) * W)
        for _h in range(H):
            if i >= Hq:
                break
            row = ((dd * sh + qh) * sw) * Hq + i
            if sw == 1:
                dst = _u(row * Wq + cols[0, 1])
                s0 = src + _u(cols[0, 0])
                for m in range(_u(cols[0, 2])):
                    bf[dst + m] = xf[s0 + m]
            elif sw == 2:
                # both phases at once, in vectors (shuffle.split_row: as a loop of
                # stride-2 loads LLVM left rows of 28 pairs scalar; ResNet-18's MaxPool, 64
                # planes of 56 x 56: 48 -> 13 us for this copy on one thread)
                da = _u((row + qa * Hq) * Wq + cols[qa, 1])
                db = _u((row + qb * Hq) * Wq + cols[qb, 1])
                split_row(xf, src, bf, da, db, cols[qa, 2], cols[qb, 2])
            else:
                for qw in range(sw):
                    dst = _u((row + qw * Hq) * Wq + cols[qw, 1])
                    s0 = src + _u(cols[qw, 0])
                    for m in range(_u(cols[qw, 2])):
                        bf[dst + m] = xf[s0 + m * usw]
            src += uW
            qh += 1
            if qh == sh:
                qh = 0
                i += 1


@njit(inline="always")
def _dw_plane(xf, C, D, H, W, wm, k, st, pb, osz, yf, M, idx, mult, g, bf, wide, last, ep):
    """Output plane ``idx`` = (image, channel m) of a depthwise convolution plus its epilogue
    ``ep = (bias, has_bias, res, has_res, act, p0, p1)`` (``res`` flat like ``yf``).

    The input plane is padded and split into stride phases in ``bf`` once (``last`` is the
    plane ``bf`` holds: the outputs of a channel multiplier > 1 share it). In phase layout
    every tap reads the output grid at a fixed offset, so each output depth slice is one flat
    loop over ``OH`` rows of ``Wq`` columns (the ``Wq - OW`` extra columns per row are junk,
    dropped when the rows are copied out), with the nine weights of a 3x3 kernel in
    registers. Returns the plane now in ``bf``."""
    bias, has_bias, res, has_res, act, p0, p1 = ep
    Dp, Hq, Wq, toff, cols = g
    n = idx // M
    m = idx - n * M
    c = m // mult
    OD, OH, OW = osz[0], osz[1], osz[2]
    K = toff.shape[0]
    plane = (n * C + c) * D
    if plane != last:
        _dw_fill(xf, plane, D, H, W, st, pb, g, bf)
    w = wm[m]
    t = yf.dtype.type
    bv = t(bias[m]) if has_bias else t(0)
    # whole vectors: the junk past OH * Wq reads the buffer's slack (see _dw_bufs)
    n_wide = _u((OH * Wq + _SLACK - 1) // _SLACK * _SLACK)
    ybase = (n * M + m) * OD * OH * OW
    slice_step = _u(st[0] * st[1] * st[2] * Hq * Wq)
    for od in range(OD):
        sb = _u(od) * slice_step
        if K == 9 and k[0] == 1:
            o0, o1, o2 = sb + toff[0], sb + toff[1], sb + toff[2]
            o3, o4, o5 = sb + toff[3], sb + toff[4], sb + toff[5]
            o6, o7, o8 = sb + toff[6], sb + toff[7], sb + toff[8]
            w0, w1, w2, w3, w4 = w[0], w[1], w[2], w[3], w[4]
            w5, w6, w7, w8 = w[5], w[6], w[7], w[8]
            for j in range(n_wide):
                wide[j] = (
                    bv
                    + w0 * bf[o0 + j]
                    + w1 * bf[o1 + j]
                    + w2 * bf[o2 + j]
                    + w3 * bf[o3 + j]
                    + w4 * bf[o4 + j]
                    + w5 * bf[o5 + j]
                    + w6 * bf[o6 + j]
                    + w7 * bf[o7 + j]
                    + w8 * bf[o8 + j]
                )
        else:
            for j in range(n_wide):
                wide[j] = bv
            for tap in range(K):
                off = sb + toff[tap]
                wv = w[tap]
                for j in range(n_wide):
                    wide[j] += wv * bf[off + j]
        _store_slice(wide, n_wide, yf, ybase + od * OH * OW, OH, OW, Wq, has_res, act, p0, p1)
    if has_res:
        _add_residual(yf, res, ybase, OD * OH * OW, act, p0, p1)
    return plane


@njit(inline="always")
def _store_slice(wide, n_wide, yf, yb, OH, OW, Wq, has_res, act, p0, p1):
    """One output depth slice computed in phase layout in ``wide`` (``OH`` rows of ``Wq``
    columns): activated unless a residual is still to be added (:func:`_add_residual`), then
    its rows copied to ``yf`` from ``yb`` on, the ``Wq - OW`` junk columns of each dropped."""
    if not has_res:
        activate(wide[:n_wide], act, p0, p1)
    _copy_phase_rows(wide, yf, yb, OH, OW, Wq)


@njit(inline="always")
def _copy_phase_rows(wide, yf, yb, OH, OW, Wq):
    """Copy ``OH`` rows of ``OW`` values from ``wide`` (rows ``Wq`` apart) to ``yf`` from
    ``yb`` on (rows ``OW`` apart), dropping the ``Wq - OW`` junk columns of each."""
    yb = _u(yb)
    wb = _u(0)
    for _oh in range(OH):
        for j in range(_u(OW)):
            yf[yb + j] = wide[wb + j]
        yb += _u(OW)
        wb += _u(Wq)


@njit(inline="always")
def _add_residual(yf, res, ybase, n_plane, act, p0, p1):
    """The residual added to the finished output plane at ``ybase`` (``n_plane`` elements of
    ``yf``, ``res`` flat like it), then the activation."""
    v = yf[ybase : ybase + n_plane]
    rv = res[ybase : ybase + n_plane]
    for j in range(n_plane):
        v[j] += rv[j]
    activate(v, act, p0, p1)


# Elements past a depthwise plane's buffer and row loop: the loop runs whole 16-lane vectors.
_SLACK = 16


@njit(inline="always")
def _dw_bufs(x, g, st, osz, planes, pad):
    # the phase buffer of ``planes`` input planes side by side, filled with the padding value
    # once per call (see _dw_fill), and the wide output rows
    Dp, Hq, Wq, toff, cols = g
    bf = np.full(planes * Dp * st[1] * st[2] * Hq * Wq + _SLACK, pad, x.dtype)
    wide = np.empty((osz[1] * Wq + _SLACK - 1) // _SLACK * _SLACK, x.dtype)
    return bf, wide


depthwise, depthwise_par = twins(
    "depthwise(x, wm, k, st, dl, pb, y, mult, ep)",
    _dw_plane,
    setup=(
        "N, C, D, H, W = x.shape",
        "M = y.shape[1]",
        "osz = y.shape[2:]",
        "xf = x.reshape(-1)",
        "yf = y.reshape(-1)",
        "g = _dw_geom(x, k, st, dl, pb, osz)",
        "bf, wide = _dw_bufs(x, g, st, osz, 1, 0)",
    ),
    items={"idx": "N * M"},
    state="last = -1",
    fma=True,
    doc="""Depthwise convolution (group == C) with its epilogue: output channel ``m`` of ``y``
    (N, M, OD, OH, OW) convolves input channel ``m // mult`` of ``x`` (N, C, D, H, W) with the
    taps ``wm[m]`` (``wm`` is (M, KD*KH*KW), M = C * mult), then ``y = act(y + bias[m] +
    res)`` with ``ep = (bias, has_bias, res, has_res, act, p0, p1)``, ``res`` flat like ``y``.
    Direct loops: no im2col buffer, no GEMM.""",
)


@njit(inline="always")
def _grp_item(xf, C, D, H, W, wm, k, st, pb, osz, yf, M, G, idx, g, bf, wide, ep):
    """Output channels of group ``idx`` = (image, group) of a grouped convolution (``cg = C /
    G`` input channels and ``mg = M / G`` output channels per group) plus the epilogue ``ep``
    (as :func:`_dw_plane`'s).

    The group's ``cg`` input planes are padded and split into stride phases once, side by
    side in ``bf`` (see :func:`_dw_fill`); every output channel of the group then sums, per
    input channel, its taps as flat multiply-add loops over ``OH`` rows of ``Wq`` columns,
    the nine taps of a 3x3 kernel in one loop, as the depthwise kernel does for one channel.
    A GEMM per group (im2col) would multiply ``mg`` x ``cg * K`` weights (8 x 72 for RegNet's
    3x3 layers of 8-channel groups), all call overhead."""
    bias, has_bias, res, has_res, act, p0, p1 = ep
    Dp, Hq, Wq, toff, cols = g
    n = idx // G
    grp = idx - n * G
    cg = C // G
    mg = M // G
    OD, OH, OW = osz[0], osz[1], osz[2]
    K = toff.shape[0]
    pl = Dp * st[1] * st[2] * Hq * Wq
    upl = _u(pl)
    for ci in range(cg):
        _dw_fill(xf, (n * C + grp * cg + ci) * D, D, H, W, st, pb, g, bf[ci * pl :])
    t = yf.dtype.type
    n_wide = _u((OH * Wq + _SLACK - 1) // _SLACK * _SLACK)
    slice_step = _u(st[0] * st[1] * st[2] * Hq * Wq)
    nine = K == 9 and k[0] == 1
    for mi in range(mg):
        m = grp * mg + mi
        w = wm[m]
        bv = t(bias[m]) if has_bias else t(0)
        ybase = (n * M + m) * OD * OH * OW
        for od in range(OD):
            sb = _u(od) * slice_step
            for j in range(n_wide):
                wide[j] = bv
            for ci in range(cg):
                cb = sb + _u(ci) * upl
                wo = ci * K
                if nine:
                    o0, o1, o2 = cb + toff[0], cb + toff[1], cb + toff[2]
                    o3, o4, o5 = cb + toff[3], cb + toff[4], cb + toff[5]
                    o6, o7, o8 = cb + toff[6], cb + toff[7], cb + toff[8]
                    w0, w1, w2 = w[wo], w[wo + 1], w[wo + 2]
                    w3, w4, w5 = w[wo + 3], w[wo + 4], w[wo + 5]
                    w6, w7, w8 = w[wo + 6], w[wo + 7], w[wo + 8]
                    for j in range(n_wide):
                        wide[j] += (
                            w0 * bf[o0 + j]
                            + w1 * bf[o1 + j]
                            + w2 * bf[o2 + j]
                            + w3 * bf[o3 + j]
                            + w4 * bf[o4 + j]
                            + w5 * bf[o5 + j]
                            + w6 * bf[o6 + j]
                            + w7 * bf[o7 + j]
                            + w8 * bf[o8 + j]
                        )
                else:
                    for tap in range(K):
                        off = cb + toff[tap]
                        wv = w[wo + tap]
                        for j in range(n_wide):
                            wide[j] += wv * bf[off + j]
            yb = ybase + od * OH * OW
            _store_slice(wide, n_wide, yf, yb, OH, OW, Wq, has_res, act, p0, p1)
        if has_res:
            _add_residual(yf, res, ybase, OD * OH * OW, act, p0, p1)


grouped, grouped_par = twins(
    "grouped(x, wm, k, st, dl, pb, y, G, ep)",
    _grp_item,
    setup=(
        "N, C, D, H, W = x.shape",
        "M = y.shape[1]",
        "osz = y.shape[2:]",
        "xf = x.reshape(-1)",
        "yf = y.reshape(-1)",
        "g = _dw_geom(x, k, st, dl, pb, osz)",
        "bf, wide = _dw_bufs(x, g, st, osz, C // G, 0)",
    ),
    items={"idx": "N * G"},
    fma=True,
    doc="""Grouped convolution (``G`` groups of ``C / G`` > 1 input channels) with its epilogue:
    output channel ``m`` of ``y`` (N, M, OD, OH, OW) sums input channels ``[gi * C / G, (gi +
    1) * C / G)`` of ``x`` (N, C, D, H, W), ``gi = m // (M / G)``, convolved with the taps
    ``wm[m]`` ((M, C / G * KD*KH*KW), input channel major), then ``y = act(y + bias[m] +
    res)`` with ``ep = (bias, has_bias, res, has_res, act, p0, p1)``, ``res`` flat like
    ``y``. Direct loops: no im2col buffer, no GEMM.""",
)


# -- 3x3 depthwise, stride 1 or 2, one pixel of padding (MobileNet's geometry) ---------------
# Direct flat loops over each plane, with no padded copy of it: the taps of an output element
# are at fixed offsets in the input (stride 1) or in its even / odd columns (stride 2), so
# one long vectorisable loop covers all rows at once; the few elements whose taps cross a
# row boundary or reach into the padding (first and last column, first and last row) are
# redone with the taps that exist.


@njit(inline="always")
def _dw3_at(xf, xo, H, W, wm, m, bv, oh, ow, s):
    """Output (oh, ow) of a 3x3 depthwise plane (stride ``s``, one pixel of zero padding
    before each axis), from the taps inside the input."""
    acc = bv
    for kh in range(3):
        h = oh * s - 1 + kh
        if h >= 0 and h < H:
            for kw in range(3):
                c = ow * s - 1 + kw
                if c >= 0 and c < W:
                    acc += wm[m, kh * 3 + kw] * xf[xo + h * W + c]
    return acc


@njit(inline="always")
def _two_row_taps(a, a0, a1, a2, b, b0, b1, b2, n, u0, u1, u2, v0, v1, v2, bv, yf, d):
    """``yf[d + j]`` for ``j < n``: an output row of a 3x3 depthwise convolution with two
    input rows of taps, the three taps of one at ``a[a0 + j]``, ``a[a1 + j]``, ``a[a2 + j]``
    (weights u) and of the other at ``b[b0 + j]`` .. (weights v), unsigned offsets."""
    for j in range(n):
        yf[d + j] = (
            bv
            + u0 * a[a0 + j]
            + u1 * a[a1 + j]
            + u2 * a[a2 + j]
            + v0 * b[b0 + j]
            + v1 * b[b1 + j]
            + v2 * b[b2 + j]
        )


@njit(inline="always")
def _three_row_taps(taps, n, w0, w1, w2, w3, w4, w5, w6, w7, w8, bv, yf, d):
    """``yf[d + j]`` for ``j < n``: output elements of a 3x3 depthwise convolution with all
    three input rows of taps; ``taps`` = (a, a0, a1, a2, b, b0, b1, b2, c, c0, c1, c2): row
    kh's three taps at ``a[a0 + j]`` .. for kh = 0 (weights w0-w2), ``b`` for kh = 1, ``c``
    for kh = 2 (unsigned offsets)."""
    a, a0, a1, a2, b, b0, b1, b2, c, c0, c1, c2 = taps
    for j in range(n):
        yf[d + j] = (
            bv
            + w0 * a[a0 + j]
            + w1 * a[a1 + j]
            + w2 * a[a2 + j]
            + w3 * b[b0 + j]
            + w4 * b[b1 + j]
            + w5 * b[b2 + j]
            + w6 * c[c0 + j]
            + w7 * c[c1 + j]
            + w8 * c[c2 + j]
        )


@njit(inline="always")
def _dw3_s1_two_rows(xf, a, uW, u0, u1, u2, v0, v1, v2, bv, yf, d):
    """Inner columns (1 .. W-2) of an output row of stride 1 with two input rows of taps:
    ``yf[d + j]`` from rows at ``a`` (weights u) and ``a + W`` (weights v), columns j .. j+2."""
    one = _u(1)
    a1, a2 = a + one, a + one + one
    _two_row_taps(xf, a, a1, a2, xf, a + uW, a1 + uW, a2 + uW, uW - one - one,
                  u0, u1, u2, v0, v1, v2, bv, yf, d)  # fmt: skip


@njit(inline="always")
def _dw3_s1_plane(xf, xo, H, W, wm, m, bv, yf, yo):
    """Stride 1: output plane (H, W) at ``yo`` from the input plane at ``xo`` (H, W >= 2)."""
    w0, w1, w2, w3, w4 = wm[m, 0], wm[m, 1], wm[m, 2], wm[m, 3], wm[m, 4]
    w5, w6, w7, w8 = wm[m, 5], wm[m, 6], wm[m, 7], wm[m, 8]
    one = _u(1)
    uW = _u(W)
    if H >= 3:
        # rows 1 .. H-2 as one run from (1, 1) to (H-2, W-2); the run's elements in columns
        # 0 and W-1 read across a row boundary and are redone below
        a0 = _u(xo)
        a1, a2 = a0 + one, a0 + one + one
        b0, b1, b2 = a0 + uW, a1 + uW, a2 + uW
        c0, c1, c2 = b0 + uW, b1 + uW, b2 + uW
        d = _u(yo) + uW + one
        taps = (xf, a0, a1, a2, xf, b0, b1, b2, xf, c0, c1, c2)
        _three_row_taps(taps, _u((H - 2) * W - 2), w0, w1, w2, w3, w4, w5, w6, w7, w8, bv, yf, d)
    if W >= 3:
        # first and last rows, inner columns: two rows of taps each
        top, bottom = _u(xo), _u(xo + (H - 2) * W)
        _dw3_s1_two_rows(xf, top, uW, w3, w4, w5, w6, w7, w8, bv, yf, _u(yo) + one)
        d = _u(yo + (H - 1) * W) + one
        _dw3_s1_two_rows(xf, bottom, uW, w0, w1, w2, w3, w4, w5, bv, yf, d)
    # first and last columns of rows 1 .. H-2: the taps of the two columns that exist
    r = _u(xo)
    d = _u(yo) + uW
    for _oh in range(1, H - 1):
        r1, r2 = r + uW, r + uW + uW
        yf[d] = (
            bv
            + w1 * xf[r]
            + w2 * xf[r + one]
            + w4 * xf[r1]
            + w5 * xf[r1 + one]
            + w7 * xf[r2]
            + w8 * xf[r2 + one]
        )
        e, e1, e2 = r + uW - one - one, r1 + uW - one - one, r2 + uW - one - one
        yf[d + uW - one] = (
            bv
            + w0 * xf[e]
            + w1 * xf[e + one]
            + w3 * xf[e1]
            + w4 * xf[e1 + one]
            + w6 * xf[e2]
            + w7 * xf[e2 + one]
        )
        r += uW
        d += uW
    for oh in (0, H - 1):
        for ow in (0, W - 1):
            yf[yo + oh * W + ow] = _dw3_at(xf, xo, H, W, wm, m, bv, oh, ow, 1)


@njit(inline="always")
def _dw3_s2_edge_row(a, ae, ao, b, be, bo, uWh, u0, u1, u2, v0, v1, v2, bv, yf, d):
    """An output row of stride 2 with two input rows of taps (the first row, and the last
    of an odd height): ``yf[d + ow]`` from the even / odd column phases of one input row at
    ``a[ae:]`` / ``a[ao:]`` (weights u) and of the next at ``b[be:]`` / ``b[bo:]`` (weights
    v); column 0 has no left tap (padding)."""
    one = _u(1)
    yf[d] = bv + u1 * a[ae] + u2 * a[ao] + v1 * b[be] + v2 * b[bo]
    # columns 1 .. Wh-1: left tap at odd column ow-1, then even and odd column ow
    _two_row_taps(a, ao, ae + one, ao + one, b, bo, be + one, bo + one, uWh - one,
                  u0, u1, u2, v0, v1, v2, bv, yf, d + one)  # fmt: skip


@njit(inline="always")
def _dw3_s2_plane(xf, xo, H, W, wm, m, bv, yf, yo, ev, od):
    """Stride 2: output plane ((H+1)//2, W/2) at ``yo`` from the input plane at ``xo`` (H >=
    2, W >= 2 even). Each input row is split into its even and odd columns (deinterleave2),
    the even rows into ``ev`` and the odd rows into ``od``, each buffer holding the even
    phases of its rows and then the odd phases (``Wh = W/2`` columns per row). Output row oh
    reads the odd row oh-1, the even row oh and the odd row oh at the same column offset
    ``q = oh Wh + ow``, so all output rows with three input rows are one dense run over q
    (no junk outputs, written in place); column 0 of each, whose left taps read the previous
    row, is redone with the taps inside."""
    w0, w1, w2, w3, w4 = wm[m, 0], wm[m, 1], wm[m, 2], wm[m, 3], wm[m, 4]
    w5, w6, w7, w8 = wm[m, 5], wm[m, 6], wm[m, 7], wm[m, 8]
    one = _u(1)
    Wh = W // 2
    uWh = _u(Wh)
    Ho = H // 2  # odd input rows; (H + 1) // 2 even ones, as many as output rows
    ee, eo = _u(0), _u((H + 1) // 2) * uWh
    oe, oo = _u(0), _u(Ho) * uWh
    src = _u(xo)
    uW = _u(W)
    for r in range(H):
        ur = _u(r)
        i = (ur >> one) * uWh
        if r % 2:
            deinterleave2(xf, src + ur * uW, od, oe + i, oo + i, uWh)
        else:
            deinterleave2(xf, src + ur * uW, ev, ee + i, eo + i, uWh)
    d = _u(yo)
    # rows 1 .. Ho-1: odd row oh-1 at od[q - Wh], even row oh at ev[q], odd row oh at od[q]
    if Ho >= 2:
        t0, t1 = oo - one, oe  # (oo >= 1: column 0's junk left taps stay inside od)
        m0, m1, m2 = eo + uWh - one, ee + uWh, eo + uWh
        b0, b1, b2 = oo + uWh - one, oe + uWh, oo + uWh
        taps = (od, t0, t1, oo, ev, m0, m1, m2, od, b0, b1, b2)
        n = _u((Ho - 1) * Wh)
        _three_row_taps(taps, n, w0, w1, w2, w3, w4, w5, w6, w7, w8, bv, yf, d + uWh)
        for oh in range(one, _u(Ho)):
            q = oh * uWh
            yf[d + q] = (
                bv
                + w1 * od[oe + q - uWh]
                + w2 * od[oo + q - uWh]
                + w4 * ev[ee + q]
                + w5 * ev[eo + q]
                + w7 * od[oe + q]
                + w8 * od[oo + q]
            )
    # row 0 (input rows 0 and 1) and, for odd H, the last row (input rows H-2 and H-1)
    _dw3_s2_edge_row(ev, ee, eo, od, oe, oo, uWh, w3, w4, w5, w6, w7, w8, bv, yf, d)
    if H % 2:
        q = _u(Ho) * uWh
        a = q - uWh
        _dw3_s2_edge_row(
            od, oe + a, oo + a, ev, ee + q, eo + q, uWh, w0, w1, w2, w3, w4, w5, bv, yf, d + q
        )


@njit(inline="always")
def _dw3_s2_unpadded_plane(xf, xo, H, W, wm, m, bv, yf, yo, ev, od):
    """Stride 2 with no padding before either axis (TensorFlow's "same" padding of even
    sizes: one row and column of zeros after): output plane (H/2, W/2) at ``yo`` from the
    input plane at ``xo`` (H, W >= 2 even). Each input row is split into its even and odd
    columns (deinterleave2) and a zero after the even ones, even rows into ``ev`` (then a
    row of zeros) and odd rows into ``od``, ``2 (W/2 + 1)`` elements a row; output row oh
    then reads rows 2 oh, 2 oh + 1 and 2 oh + 2 of the input at the same column offsets,
    with no edge cases."""
    w0, w1, w2, w3, w4 = wm[m, 0], wm[m, 1], wm[m, 2], wm[m, 3], wm[m, 4]
    w5, w6, w7, w8 = wm[m, 5], wm[m, 6], wm[m, 7], wm[m, 8]
    one = _u(1)
    Wh, Hh = _u(W // 2), _u(H // 2)
    P = Wh + one  # one phase of a row with its trailing zero
    R = P + P  # a row in the buffers
    src, uW = _u(xo), _u(W)
    zero = yf.dtype.type(0)
    for r in range(H):
        ur = _u(r)
        buf = od if r % 2 else ev
        b = (ur >> one) * R
        deinterleave2(xf, src + ur * uW, buf, b, b + P, Wh)
        buf[b + Wh] = zero
    ev[Hh * R : Hh * R + R] = zero
    d = _u(yo)
    for oh in range(Hh):
        a = oh * R  # input row 2 oh, in ev
        c = a + R  # input row 2 oh + 2, in ev (the zero row past the last)
        for ow in range(Wh):
            yf[d + ow] = (
                bv
                + w0 * ev[a + ow] + w1 * ev[a + P + ow] + w2 * ev[a + ow + one]
                + w3 * od[a + ow] + w4 * od[a + P + ow] + w5 * od[a + ow + one]
                + w6 * ev[c + ow] + w7 * ev[c + P + ow] + w8 * ev[c + ow + one]
            )  # fmt: skip
        d += Wh


@njit(inline="always")
def _dw3_plane(xf, C, H, W, wm, s, unpadded, yf, M, idx, ep, ev, od):
    """Plane ``idx`` = (image, channel) of :func:`depthwise3` with its epilogue."""
    bias, has_bias, res, has_res, act, p0, p1 = ep
    n = idx // M
    m = idx - n * M
    t = yf.dtype.type
    bv = t(bias[m]) if has_bias else t(0)
    xo = (n * C + m) * H * W
    OH, OW = (H - 1) // s + 1, (W - 1) // s + 1
    yo = (n * M + m) * OH * OW
    if s == 1:
        _dw3_s1_plane(xf, xo, H, W, wm, m, bv, yf, yo)
    elif unpadded:
        _dw3_s2_unpadded_plane(xf, xo, H, W, wm, m, bv, yf, yo, ev, od)
    else:
        _dw3_s2_plane(xf, xo, H, W, wm, m, bv, yf, yo, ev, od)
    v = yf[yo : yo + OH * OW]
    if has_res:
        rv = res[yo : yo + OH * OW]
        for j in range(OH * OW):
            v[j] += rv[j]
    activate(v, act, p0, p1)


@njit(inline="always")
def _dw3_bufs(x, s):
    # stride 2: the column phases of the even rows and of the odd rows (and a zero after the
    # even phase of each row and a row of zeros, without padding before)
    H, W = x.shape[3], x.shape[4]
    n = (H + 2) * (W // 2 + 1) if s == 2 else 1
    return np.empty(n, x.dtype), np.empty(n, x.dtype)


depthwise3, depthwise3_par = twins(
    "depthwise3(x, wm, k, st, dl, pb, y, mult, ep)",
    _dw3_plane,
    setup=(
        "N, C, D, H, W = x.shape",
        "M = y.shape[1]",
        "s = st[2]",
        "unpadded = pb[2] == 0",
        "xf, yf = x.reshape(-1), y.reshape(-1)",
        "ev, od = _dw3_bufs(x, s)",
    ),
    items={"idx": "N * M"},
    fma=True,
    doc=""":func:`depthwise` for 2-D 3x3 kernels of stride 1 or 2 with one pixel of padding
    before each axis, no dilation and one output per channel (``wm`` (C, 9)); the caller
    checks the geometry: H, W >= 2, W even for stride 2, and the output size the padding
    implies (``(H - 1) // s + 1`` by ``(W - 1) // s + 1``; taps past the input read zero).
    Stride 2 also without padding before either axis, for H even: output (H/2, W/2).""",
)


# Channels per block of the small-plane depthwise kernel: one 16-lane float32 vector, the
# blocks transpose16 turns.
DW_LANES = T16


@njit(inline="always")
def _dw_tile_geom(k, st, dl, osz):
    """Tile of :func:`_dw_tile_block`: ``(Hp, Wq)``, padded input rows the block reads and
    columns per stride phase (each holds ``Wq`` columns of ``DW_LANES`` lanes)."""
    Hp = (osz[1] - 1) * st[1] + (k[1] - 1) * dl[1] + 1
    Wp = (osz[2] - 1) * st[2] + (k[2] - 1) * dl[2] + 1
    return Hp, (Wp + st[2] - 1) // st[2]


@njit(inline="always")
def _dw_tile_col(kw, dw, sw, row_len, uL):
    """Offset of tap column ``kw`` within a padded tile row: padded column ``kw * dw`` is in
    stride phase ``kw * dw % sw`` at column ``kw * dw // sw``."""
    c = kw * dw
    return _u(c % sw) * row_len + _u(c // sw) * uL


@njit(inline="always")
def _dw_tile_block(xf, C, H, W, wx, k, st, dl, osz, yf, M, mult, blk, tb, acc, idx, ep):
    """Output channels ``[m0, m0 + DW_LANES)`` (``blk`` = image * blocks + block) of a 2-D
    depthwise convolution of small planes, with the channels across vector lanes.

    The block's input planes are copied transposed into ``tb`` (16 x 16 blocks turned by
    :func:`transpose16`): padded row r, stride phase qw, column j, lane l holds channel l's
    padded input (r, j * sw + qw), zero in the padding (``tb`` comes zeroed and every block
    writes the same positions).
    Output row oh then gets, for each tap, one flat multiply-add loop over its ``OW`` columns
    of ``DW_LANES`` lanes: ``acc[ow, l] += wx[tap, ow, l] * tb[row, phase, j0 + ow, l]`` with
    the weights ``wx`` (blocks, taps + 1, OW * DW_LANES) repeated along the row and its last
    tap the bias. Long contiguous loops: LLVM vectorises them (with loops over the lanes
    alone it fully unrolls them into scalar code, as it cannot rule out aliasing). The
    epilogue runs on ``acc`` (output positions x lanes) before it is copied back transposed.
    """
    _bias, _has_bias, res, has_res, act, p0, p1 = ep
    so, yo, rows16, spots = idx
    L = DW_LANES
    uL = _u(L)
    nbk = (M + L - 1) // L
    n = blk // nbk
    b = blk - n * nbk
    m0 = b * L
    nl = min(L, M - m0)
    KH, KW = k[1], k[2]
    sh, sw = st[1], st[2]
    dh, dw = dl[1], dl[2]
    OH, OW = osz[1], osz[2]
    OHW = OH * OW
    Hp, Wq = _dw_tile_geom(k, st, dl, osz)
    row_len = _u(Wq * L)
    # per lane: its input plane and output plane (lanes past M repeat channel M - 1); the
    # division only for channel multipliers (a division per lane and block is ~10 % of a
    # 7x7 layer's time)
    for lane in range(L):
        m = min(m0 + lane, M - 1)
        c = m if mult == 1 else m // mult
        so[lane] = _u((n * C + c) * H * W)
        yo[lane] = _u((n * M + m) * OHW)
    # transposed copy: blocks of 16 positions of the 16 planes turned by transpose16 straight
    # into the tile (spots: each input position's place there, a sink past the tile for the
    # positions no output reads); the last HW % 16 positions one lane at a time
    HW = H * W
    full = HW - HW % T16
    for q0 in range(0, full, T16):
        transpose16(xf, so, 0, _u(q0), tb, spots, q0, _u(0))
    for q in range(full, HW):
        d = spots[q]
        for lane in range(uL):
            tb[d + lane] = xf[so[lane] + _u(q)]
    K = KH * KW
    n_row = _u(OW * L)
    wb = _u(b * (K + 1)) * n_row
    bias_row = wb + _u(K) * n_row
    # tile offsets of the taps kw = 0, 1, 2 within a padded row (divisions by run-time
    # values: once per block, not per output row)
    tc0 = _dw_tile_col(0, dw, sw, row_len, uL)
    tc1 = _dw_tile_col(1, dw, sw, row_len, uL)
    tc2 = _dw_tile_col(2, dw, sw, row_len, uL)
    for oh in range(OH):
        ab = _u(oh) * n_row
        if KH == 3 and KW == 3:
            # MobileNet's 3x3: the nine taps and the bias in one loop per output row
            r0 = _u(oh * sh * sw) * row_len
            t0, t1, t2 = r0 + tc0, r0 + tc1, r0 + tc2
            r1 = _u((oh * sh + dh) * sw) * row_len
            t3, t4, t5 = r1 + tc0, r1 + tc1, r1 + tc2
            r2 = _u((oh * sh + 2 * dh) * sw) * row_len
            t6, t7, t8 = r2 + tc0, r2 + tc1, r2 + tc2
            v0, v1, v2 = wb, wb + n_row, wb + _u(2) * n_row
            v3, v4, v5 = wb + _u(3) * n_row, wb + _u(4) * n_row, wb + _u(5) * n_row
            v6, v7, v8 = wb + _u(6) * n_row, wb + _u(7) * n_row, wb + _u(8) * n_row
            for j in range(n_row):
                acc[ab + j] = (
                    wx[bias_row + j]
                    + wx[v0 + j] * tb[t0 + j]
                    + wx[v1 + j] * tb[t1 + j]
                    + wx[v2 + j] * tb[t2 + j]
                    + wx[v3 + j] * tb[t3 + j]
                    + wx[v4 + j] * tb[t4 + j]
                    + wx[v5 + j] * tb[t5 + j]
                    + wx[v6 + j] * tb[t6 + j]
                    + wx[v7 + j] * tb[t7 + j]
                    + wx[v8 + j] * tb[t8 + j]
                )
            continue
        for j in range(n_row):
            acc[ab + j] = wx[bias_row + j]
        for kh in range(KH):
            r = _u((oh * sh + kh * dh) * sw) * row_len
            for kw in range(KW):
                cb = r + _dw_tile_col(kw, dw, sw, row_len, uL)
                wv = wb + _u(kh * KW + kw) * n_row
                for j in range(n_row):
                    acc[ab + j] += wx[wv + j] * tb[cb + j]
    if has_res:
        for p in range(_u(OHW)):
            for lane in range(uL):
                acc[p * uL + lane] += res[yo[lane] + p]
    activate(acc[: OHW * L], act, p0, p1)
    if nl == L:
        # copied back transposed, 16 positions of the 16 planes at a time, as above
        full_o = OHW - OHW % T16
        for q0 in range(0, full_o, T16):
            transpose16(acc, rows16, 0, _u(q0) * uL, yf, yo, 0, _u(q0))
        for p in range(_u(full_o), _u(OHW)):
            for lane in range(uL):
                yf[yo[lane] + p] = acc[p * uL + lane]
    else:
        for lane in range(nl):
            for p in range(_u(OHW)):
                yf[yo[lane] + p] = acc[p * uL + _u(lane)]


@njit(inline="always")
def _dw_tile_bufs(x, k, st, dl, pb, osz):
    Hp, Wq = _dw_tile_geom(k, st, dl, osz)
    L = DW_LANES
    row_len = Wq * L
    size = Hp * st[2] * row_len
    # zeroed once: every block writes the same (inside) positions of all lanes; one more row
    # of lanes at the end is the sink of the input positions outside the tile
    tb = np.zeros(size + L, x.dtype)
    acc = np.empty(osz[1] * osz[2] * L, x.dtype)
    offs = np.empty((2, L), np.uint64)
    rows16 = np.empty(L, np.uint64)
    for i in range(L):
        rows16[i] = i * T16  # rows of the position-major block acc
    # each input position's offset in the tile: padded row h + ph, stride phase (w + pw) %
    # sw, column (w + pw) // sw
    H, W = x.shape[3], x.shape[4]
    ph, pw, sw = pb[1], pb[2], st[2]
    h_hi = min(H, Hp - ph)
    w_hi = min(W, Wq * sw - pw)
    spots = np.empty(H * W, np.uint64)
    for h in range(H):
        phase = pw % sw  # of column w + pw, counted along the row (no division per element)
        col = pw // sw
        for w in range(W):
            inside = h < h_hi and w < w_hi
            spot = ((h + ph) * sw + phase) * row_len + col * L
            spots[h * W + w] = spot if inside else size
            phase += 1
            if phase == sw:
                phase = 0
                col += 1
    # per block: each lane's input and output plane; shared: rows16, spots
    return tb, acc, (offs[0], offs[1], rows16, spots)


depthwise_tiles, depthwise_tiles_par = twins(
    "depthwise_tiles(x, wx, k, st, dl, pb, y, mult, ep)",
    _dw_tile_block,
    setup=(
        "N, C, D, H, W = x.shape",
        "M = y.shape[1]",
        "osz = y.shape[2:]",
        "xf = x.reshape(-1)",
        "yf = y.reshape(-1)",
        "tb, acc, idx = _dw_tile_bufs(x, k, st, dl, pb, osz)",
    ),
    items={"blk": "N * ((M + DW_LANES - 1) // DW_LANES)"},
    fma=True,
    doc="""Depthwise convolution of small 2-D planes (``x`` (N, C, 1, H, W), ``k[0] == 1``) with
    its epilogue, as :func:`depthwise` but DW_LANES channels at a time (see
    :func:`_dw_tile_block` for ``wx``, which carries the bias: ``ep``'s is not read).""",
)


@njit(inline="always")
def _im2col_rows(xf, C, D, H, W, k, st, dl, pb, osz, spans, n, r_lo, r_hi, blk):
    """Columns of output rows ``[r_lo, r_hi)`` (rows of the flattened (od, oh) grid) of the
    im2col matrix of image ``n``, into ``blk`` ((C*KD*KH*KW) x ((r_hi - r_lo) * OW), row-major,
    flat). ``spans[kw] = (lo, hi, off)``: the in-range output columns of kernel column kw and
    its input column offset (computed once per call: no division per run)."""
    KD, KH, KW = k[0], k[1], k[2]
    OH, OW = osz[1], osz[2]
    sw = st[2]
    usw = _u(sw)
    uow = _u(OW)
    ld = _u((r_hi - r_lo) * OW)
    for rr in range(r_lo, r_hi):
        od = rr // OH
        oh = rr - od * OH
        cb = _u((rr - r_lo) * OW)
        for kd in range(KD):
            d = od * st[0] + kd * dl[0] - pb[0]
            for kh in range(KH):
                h = oh * st[1] + kh * dl[1] - pb[1]
                inside = d >= 0 and d < D and h >= 0 and h < H
                for c in range(C):
                    row0 = ((c * KD + kd) * KH + kh) * KW
                    src_row = ((n * C + c) * D + d) * H + h
                    for kw in range(KW):
                        base = _u(row0 + kw) * ld + cb
                        if not inside:
                            for j in range(uow):
                                blk[base + j] = 0
                            continue
                        lo, hi, off = spans[kw, 0], spans[kw, 1], spans[kw, 2]
                        ulo, uhi = _u(lo), _u(hi)
                        src = _u(src_row * W + lo * sw + off)
                        _copy_run(blk, base, xf, src, ulo, uhi, uow, sw, usw)


@njit(inline="always")
def _conv_rows_item(
    xf, C, D, H, W, wf, M, Kt, k, st, dl, pb, osz, spans, yf, ep, tm, rpb, tk, item, blk
):
    bias, has_bias, res, has_res, act, p0, p1 = ep
    R = osz[0] * osz[1]
    OW = osz[2]
    nb = (R + rpb - 1) // rpb
    n = item // nb
    b = item - n * nb
    r_lo = b * rpb
    r_hi = min(R, r_lo + rpb)
    cols = (r_hi - r_lo) * OW
    _im2col_rows(xf, C, D, H, W, k, st, dl, pb, osz, spans, n, r_lo, r_hi, blk)
    S = R * OW
    t = yf.dtype.type
    mr = block_geometry(yf)[0]
    for r0 in range(0, M, tm):
        rows = min(tm, M - r0)
        base = (n * M + r0) * S + r_lo * OW
        for k0 in range(0, Kt, tk):
            kk = min(tk, Kt - k0)
            ep_k = (bias, r0, BIAS_ROW if has_bias else BIAS_NONE, res, has_res, act, p0, p1)
            gemm_call_ep(A_PACKED, False, rows, cols, kk, t(1), wf, r0 * Kt + k0 * mr, Kt, blk,
                         k0 * cols, cols, t(0) if k0 == 0 else t(1), yf, base, S, 0,
                         chunk_epilogue(ep_k, k0 + kk >= Kt))  # fmt: skip


@njit(inline="always")
def _spans(W, k, st, dl, pb, OW):
    spans = np.empty((k[2], 3), np.int64)
    for kw in range(k[2]):
        off = kw * dl[2] - pb[2]
        lo, hi = _span(OW, W, st[2], off)
        spans[kw, 0], spans[kw, 1], spans[kw, 2] = lo, hi, off
    return spans


conv_rows, conv_rows_par = twins(
    "conv_rows(x, w2, wp, k, st, dl, pb, y, ep, tm, rpb, tk)",
    _conv_rows_item,
    setup=(
        "N, C, D, H, W = x.shape",
        "M, Kt = w2.shape",
        "osz = y.shape[2:]",
        "R = osz[0] * osz[1]",
        "spans = _spans(W, k, st, dl, pb, osz[2])",
        "blk = np.empty(Kt * rpb * osz[2], x.dtype)",
        "xf, wf, yf = x.reshape(-1), wp, y.reshape(-1)",
    ),
    items={"item": "N * ((R + rpb - 1) // rpb)"},
    fma=True,
    doc="""Convolution (group 1) of ``x`` (N, C, D, H, W) with ``w2`` (M, C*KD*KH*KW) into ``y``
    (N, M, OD, OH, OW) plus the epilogue ``ep = (bias, has_bias, res, has_res, act, p0, p1)``
    (``res`` flat like ``y``), by blocks of ``rpb`` output rows: the block's im2col columns
    are built in a buffer that stays in cache, then multiplied by the GEMM micro-kernel in
    ``tm``-row tiles (a multiple of MR, or all of M), each followed by its epilogue (the inner
    dimension in chunks of ``tk``). ``wp`` is ``w2`` in the panels of
    :func:`onnxjit.kernels.cpu.blas.pack_a`. No im2col matrix of the whole image is ever
    written.""",
)
