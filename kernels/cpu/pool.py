"""Pooling kernels (CPU, Numba).

Inputs are canonicalised by the caller to ``(B, D, H, W)``: B = batch * channels planes and
every spatial rank padded to three dims with leading size-1 dims (kernel 1, stride 1, dilation
1, pad 0). One compiled specialisation per dtype then serves 1-D, 2-D and 3-D pooling.
Geometry arrays (``k``, ``st``, ``dl``, ``pb``, ``pe``) are int64 arrays of length 3; ``pb``/
``pe`` are the pads at the beginning/end. Output sizes come from the shape of ``y``.
"""

from __future__ import annotations

import numpy as np

from .._jit import njit
from .conv import _copy_phase_rows, _dw_bufs, _dw_fill, _dw_geom, _u  # noqa: F401 (two used by a setup)
from .runtime.twins import twins


@njit(inline="always")
def _max_plane(x, y, ind, b, k, st, dl, pb, col_major):
    D, H, W = x.shape[1], x.shape[2], x.shape[3]
    OD, OH, OW = y.shape[1], y.shape[2], y.shape[3]
    base = b * D * H * W
    for od in range(OD):
        d0 = od * st[0] - pb[0]
        for oh in range(OH):
            h0 = oh * st[1] - pb[1]
            for ow in range(OW):
                w0 = ow * st[2] - pb[2]
                best = -np.inf
                bi = -1
                for kd in range(k[0]):
                    d = d0 + kd * dl[0]
                    if d < 0 or d >= D:
                        continue
                    for kh in range(k[1]):
                        h = h0 + kh * dl[1]
                        if h < 0 or h >= H:
                            continue
                        for kw in range(k[2]):
                            w = w0 + kw * dl[2]
                            if w < 0 or w >= W:
                                continue
                            v = x[b, d, h, w]
                            # NaN wins (once: the first NaN in window order)
                            if bi < 0 or v > best or (v != v and best == best):
                                best = v
                                if col_major:
                                    bi = (w * H + h) * D + d
                                else:
                                    bi = (d * H + h) * W + w
                y[b, od, oh, ow] = best
                ind[b, od, oh, ow] = base + bi if bi >= 0 else -1


max_pool, max_pool_par = twins(
    "max_pool(x, y, ind, k, st, dl, pb, col_major)",
    _max_plane,
    items={"b": "x.shape[0]"},
    doc="""Max pooling of ``x`` (B, D, H, W) into ``y`` (B, OD, OH, OW) and the flat index of
    each maximum into ``ind`` (int64, same shape as y; row-major over the whole input, or
    column-major within a plane when ``col_major``). Padding never wins: taps outside the
    input are skipped. The first maximum in window order wins ties; a NaN in the window is
    the maximum (the first NaN, as np.max and PyTorch propagate it).""",
)


@njit(inline="always")
def _taps_inside(o0, lo, hi, dl, k):
    """Taps ``[t0, t1)`` of a window starting at ``o0`` (tap t at ``o0 + t * dl``) that lie in
    ``[lo, hi)``: the loops skip the rest without visiting them (a ceil_mode window can be far
    longer than the input: transformers' EfficientNet pools 7x7 maps with a 1280-wide one)."""
    t0 = 0 if o0 >= lo else (lo - o0 + dl - 1) // dl
    t1 = 0 if hi <= o0 else (hi - o0 + dl - 1) // dl
    return t0, max(t0, min(k, t1))


@njit(inline="always")
def _avg_plane(x, y, b, k, st, dl, pb, pe, lp, p, count_pad):
    D, H, W = x.shape[1], x.shape[2], x.shape[3]
    OD, OH, OW = y.shape[1], y.shape[2], y.shape[3]
    for od in range(OD):
        d0 = od * st[0] - pb[0]
        kd0, kd1 = _taps_inside(d0, -pb[0], D + pe[0], dl[0], k[0])
        for oh in range(OH):
            h0 = oh * st[1] - pb[1]
            kh0, kh1 = _taps_inside(h0, -pb[1], H + pe[1], dl[1], k[1])
            for ow in range(OW):
                w0 = ow * st[2] - pb[2]
                kw0, kw1 = _taps_inside(w0, -pb[2], W + pe[2], dl[2], k[2])
                acc = 0.0
                n_in = 0
                n_pad = 0
                for kd in range(kd0, kd1):
                    d = d0 + kd * dl[0]
                    din = d >= 0 and d < D
                    for kh in range(kh0, kh1):
                        h = h0 + kh * dl[1]
                        hin = h >= 0 and h < H
                        for kw in range(kw0, kw1):
                            w = w0 + kw * dl[2]
                            # Inside the padded input: counts for count_include_pad.
                            n_pad += 1
                            if din and hin and w >= 0 and w < W:
                                n_in += 1
                                v = x[b, d, h, w]
                                if lp:
                                    if p == 2.0:
                                        acc += v * v
                                    else:
                                        acc += abs(v) ** p
                                else:
                                    acc += v
                if lp:
                    y[b, od, oh, ow] = acc ** (1.0 / p)
                else:
                    cnt = n_pad if count_pad else n_in
                    y[b, od, oh, ow] = acc / cnt if cnt > 0 else np.nan


avg_pool, avg_pool_par = twins(
    "avg_pool(x, y, k, st, dl, pb, pe, lp, p, count_pad)",
    _avg_plane,
    items={"b": "x.shape[0]"},
    doc="""Average pooling (``lp=False``) or Lp pooling (``lp=True``, ``(sum |v|^p)^(1/p)``) of
    ``x`` (B, D, H, W) into ``y``. The average divides by the taps inside the input, or with
    ``count_pad`` by the taps inside the explicitly padded input (taps that only exist because
    of ceil_mode never count). Padding contributes zero to Lp pooling.""",
)


@njit(inline="always")
def _nan_max(v, m):
    """The larger of ``v`` and ``m``, NaN if either is (as a select: vectorises)."""
    return v if (v > m) | (v != v) else m


@njit(inline="always")
def _max_values_plane(xf, D, H, W, k, st, pb, osz, yf, b, g, bf, wide):
    """Plane ``b`` of :func:`max_pool_values`: the input plane padded with -inf and split
    into stride phases (``bf``), then for each output depth slice one flat loop over ``OH``
    rows of ``Wq`` columns taking the maximum over the taps at their fixed offsets (the junk
    columns past ``OW`` are dropped when the rows are copied out)."""
    Dp, Hq, Wq, toff, cols = g
    _dw_fill(xf, b * D, D, H, W, st, pb, g, bf)
    OD, OH, OW = osz[0], osz[1], osz[2]
    K = toff.shape[0]
    n_wide = _u(OH * Wq)
    slice_step = _u(st[0] * st[1] * st[2] * Hq * Wq)
    ybase = b * OD * OH * OW
    for od in range(OD):
        sb = _u(od) * slice_step
        # three taps per pass, kept in registers (a tap repeated to fill the last pass is
        # harmless to a maximum): ``wide`` is loaded and stored once per three taps, and
        # the store is never "the value just loaded, or another", which LLVM turns into a
        # masked store (vmaskmovps on AVX2, microcoded on AMD Zen) or leaves scalar.
        # ResNet-18's MaxPool (64 planes of 56 x 56, 3x3 stride 2) on a Zen 3, one thread:
        # 440-530 -> 92-137 us (-> 130-145 with this alone, the rest from deinterleave2)
        for t in range(0, K, 3):
            oa = sb + toff[t]
            ob = sb + toff[min(t + 1, K - 1)]
            oc = sb + toff[min(t + 2, K - 1)]
            if t == 0:
                for j in range(n_wide):
                    wide[j] = _nan_max(bf[oc + j], _nan_max(bf[ob + j], bf[oa + j]))
            else:
                for j in range(n_wide):
                    m = _nan_max(bf[ob + j], _nan_max(bf[oa + j], wide[j]))
                    wide[j] = _nan_max(bf[oc + j], m)
        _copy_phase_rows(wide, yf, ybase + od * OH * OW, OH, OW, Wq)


max_pool_values, max_pool_values_par = twins(
    "max_pool_values(x, y, k, st, dl, pb)",
    _max_values_plane,
    setup=(
        "B, D, H, W = x.shape",
        "osz = y.shape[1:]",
        "x5 = x.reshape(B, 1, D, H, W)",
        "g = _dw_geom(x5, k, st, dl, pb, osz)",
        "bf, wide = _dw_bufs(x5, g, st, osz, 1, -np.inf)",
        "xf = x.reshape(-1)",
        "yf = y.reshape(-1)",
    ),
    items={"b": "B"},
    doc="""Max pooling of ``x`` (B, D, H, W) into ``y`` (B, OD, OH, OW) without indices, for
    float inputs. Padding never wins; a NaN in the window is the maximum, as in
    :func:`max_pool`.""",
)


@njit(inline="always")
def _mean_row(x, y, r):
    v = x[r]
    acc = 0.0
    for j in range(v.shape[0]):
        acc += v[j]
    y[r] = acc / v.shape[0]


global_mean, global_mean_par = twins(
    "global_mean(x, y)",
    _mean_row,
    items={"r": "x.shape[0]"},
    doc="""``y[r] = mean(x[r, :])`` for ``x`` (R, S) with S > 0, summed in float64.""",
)
