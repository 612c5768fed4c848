"""Vision kernels: GridSample, RoiAlign, NonMaxSuppression, Col2Im and DeformConv's im2col.

Every kernel works on contiguous arrays in canonical low-rank layouts prepared by the host
(``onnxjit/ops/vision.py``); sizes are run-time arguments, so one compilation per dtype serves
every shape. Parallel twins (``*_parallel``) split the outermost independent loop.
"""

from __future__ import annotations

import math

import numpy as np

from .._jit import njit
from .runtime.twins import twins

# --------------------------------------------------------------------------------------------
# GridSample
#
# x: (N, C, S) the input with its D spatial axes flattened (row-major, ``dims``);
# coords: (N, P, D) float32 source coordinates already denormalised to pixel units and ordered
# like the spatial axes (not like the grid's reversed (x, y, z) order);
# out: (N, C, P). mode 0 nearest, 1 linear, 2 cubic; padding 0 zeros, 1 border, 2 reflection.

_CUBIC_A = -0.75


@njit(inline="always")
def _reflect(x, lo, hi):
    """Reflect x at the borders [lo, hi] until it lies inside (float arithmetic)."""
    rng = hi - lo
    if rng <= 0.0:
        return lo
    if x < lo:
        dx = lo - x
        k = int(dx / rng)
        r = dx - k * rng
        return lo + r if k % 2 == 0 else hi - r
    if x > hi:
        dx = x - hi
        k = int(dx / rng)
        r = dx - k * rng
        return hi - r if k % 2 == 0 else lo + r
    return x


@njit(inline="always")
def _rint(x):
    """Round half to even (numpy's rint), as the spec's nearest mode asks."""
    f = math.floor(x)
    d = x - f
    if d > 0.5 or (d == 0.5 and f % 2.0 != 0.0):
        f += 1.0
    return f


@njit(inline="always")
def _tap(i, length, padding, lo, hi):
    """Index of tap i along an axis of ``length`` after padding; -1 means a zero tap."""
    if padding == 0:
        if i < 0 or i >= length:
            return -1
        return i
    if padding == 1:
        return min(max(i, 0), length - 1)
    j = int(_reflect(float(i), lo, hi))
    return min(max(j, 0), length - 1)


@njit(inline="always")
def _gs_point(coords, n, p, dims, mode, padding, align, k_n, tidx, tw):
    """Fill the per-axis taps (tidx, tw: (D, k_n)) of one output point."""
    d_n = dims.shape[0]
    for a in range(d_n):
        length = dims[a]
        if align:
            lo = 0.0
            hi = length - 1.0
        else:
            lo = -0.5
            hi = length - 0.5
        x = np.float64(coords[n, p, a])
        if mode == 0:
            x = _rint(x)
        if x < lo or x > hi:
            if padding == 1:
                x = min(max(x, 0.0), length - 1.0)
            elif padding == 2:
                x = np.float64(np.float32(_reflect(x, lo, hi)))
        if mode == 0:
            tidx[a, 0] = _tap(int(x), length, padding, lo, hi)
            tw[a, 0] = 1.0
        elif mode == 1:
            f = math.floor(x)
            t = x - f
            i0 = int(f)
            tidx[a, 0] = _tap(i0, length, padding, lo, hi)
            tidx[a, 1] = _tap(i0 + 1, length, padding, lo, hi)
            tw[a, 0] = 1.0 - t
            tw[a, 1] = t
        else:
            f = math.floor(x)
            t = x - f
            i0 = int(f)
            aa = _CUBIC_A
            s = t + 1.0
            tw[a, 0] = ((aa * s - 5.0 * aa) * s + 8.0 * aa) * s - 4.0 * aa
            tw[a, 1] = ((aa + 2.0) * t - (aa + 3.0)) * t * t + 1.0
            s = 1.0 - t
            tw[a, 2] = ((aa + 2.0) * s - (aa + 3.0)) * s * s + 1.0
            s = 2.0 - t
            tw[a, 3] = ((aa * s - 5.0 * aa) * s + 8.0 * aa) * s - 4.0 * aa
            for k in range(4):
                tidx[a, k] = _tap(i0 - 1 + k, length, padding, lo, hi)


@njit(inline="always")
def _gs_combine(dims, k_n, tidx, tw, off, wt):
    """Turn per-axis taps into flat offsets and weights; return how many are non-zero."""
    d_n = dims.shape[0]
    total = 1
    for _ in range(d_n):
        total *= k_n
    m = 0
    for combo in range(total):
        rem = combo
        flat = 0
        w = 1.0
        ok = True
        for a in range(d_n - 1, -1, -1):
            k = rem % k_n
            rem //= k_n
            i = tidx[a, k]
            if i < 0:
                ok = False
                break
            stride = 1
            for b in range(a + 1, d_n):
                stride *= dims[b]
            flat += i * stride
            w *= tw[a, k]
        if ok:
            off[m] = flat
            wt[m] = w
            m += 1
    return m


@njit(inline="always")
def _gs_taps_one(coords, dims, mode, padding, align, q0, off, wt, cnt, k_n, tidx, tw, r):
    n_p = coords.shape[1]
    q = q0 + r
    n = q // n_p
    p = q - n * n_p
    _gs_point(coords, n, p, dims, mode, padding, align, k_n, tidx, tw)
    cnt[r] = _gs_combine(dims, k_n, tidx, tw, off[r], wt[r])


grid_sample_taps, grid_sample_taps_parallel = twins(
    "grid_sample_taps(coords, dims, mode, padding, align, q0, off, wt, cnt)",
    _gs_taps_one,
    # the per-axis taps and weights of the current point
    setup=(
        "k_n = 1 if mode == 0 else (2 if mode == 1 else 4)",
        "tidx = np.empty((dims.shape[0], k_n), np.int64)",
        "tw = np.empty((dims.shape[0], k_n), np.float64)",
    ),
    items={"r": "cnt.shape[0]"},
    par="grid_sample_taps_parallel",
    doc="""Flat source offsets, weights and tap count of the output points q0 .. q0 + len(cnt).

    q = n*P + p numbers (batch, output point). Independent of X's element type (coords are
    float32), so it compiles once; off and wt are (points, K**D) with K = 1, 2, 4 for
    nearest, linear, cubic; row q - q0 describes point q.
    """,
)


@njit(inline="always")
def _gs_apply_one(x, q0, off, wt, cnt, nearest, zero, out, r):
    c_n = x.shape[1]
    n_p = out.shape[2]
    q = q0 + r
    n = q // n_p
    p = q - n * n_p
    m = cnt[r]
    if nearest:  # a gather: exact in every type
        for c in range(c_n):
            if m == 0:
                out[n, c, p] = zero
            else:
                out[n, c, p] = x[n, c, off[r, 0]]
        return
    for c in range(c_n):
        acc = zero
        for k in range(m):
            acc += wt[r, k] * x[n, c, off[r, k]]
        out[n, c, p] = acc


grid_sample_apply, grid_sample_apply_parallel = twins(
    "grid_sample_apply(x, q0, off, wt, cnt, nearest, zero, out)",
    _gs_apply_one,
    items={"r": "cnt.shape[0]"},
    par="grid_sample_apply_parallel",
    doc="""out[n, c, p] = sum_k wt[r, k] * x[n, c, off[r, k]] over the cnt[r] taps of point q0 + r.

    x (N, C, S) and out (N, C, P) share a type; zero is that type's zero.
    """,
)


# --------------------------------------------------------------------------------------------
# RoiAlign
#
# x: (N, C, H*W) with the map's height and width given; per region r: start (R, 2) [h, w],
# bin (R, 2) [h, w] sizes, grid (R, 2) samples per bin, batch index bidx (R,);
# out (R, C, OH, OW).


@njit(inline="always")
def _roi_one(x, height, width, start, binsz, grid, bidx, is_max, out, r):
    c_n = x.shape[1]
    oh, ow = out.shape[2], out.shape[3]
    gh = grid[r, 0]
    gw = grid[r, 1]
    count = max(gh * gw, 1)
    n_s = oh * ow * gh * gw
    pos = np.zeros((n_s, 4), np.int64)
    wts = np.zeros((n_s, 4), np.float64)
    s = 0
    for ph in range(oh):
        for pw in range(ow):
            for iy in range(gh):
                y = start[r, 0] + ph * binsz[r, 0] + (iy + 0.5) * binsz[r, 0] / gh
                for ix in range(gw):
                    xx = start[r, 1] + pw * binsz[r, 1] + (ix + 0.5) * binsz[r, 1] / gw
                    if not (-1.0 <= y <= height and -1.0 <= xx <= width):
                        s += 1  # outside the map (or NaN): zero weights
                        continue
                    yy = max(y, 0.0)
                    xv = max(xx, 0.0)
                    y_lo = int(yy)
                    x_lo = int(xv)
                    if y_lo >= height - 1:
                        y_lo = height - 1
                        y_hi = y_lo
                        yy = float(y_lo)
                    else:
                        y_hi = y_lo + 1
                    if x_lo >= width - 1:
                        x_lo = width - 1
                        x_hi = x_lo
                        xv = float(x_lo)
                    else:
                        x_hi = x_lo + 1
                    ly = yy - y_lo
                    lx = xv - x_lo
                    hy = 1.0 - ly
                    hx = 1.0 - lx
                    pos[s, 0] = y_lo * width + x_lo
                    pos[s, 1] = y_lo * width + x_hi
                    pos[s, 2] = y_hi * width + x_lo
                    pos[s, 3] = y_hi * width + x_hi
                    wts[s, 0] = hy * hx
                    wts[s, 1] = hy * lx
                    wts[s, 2] = ly * hx
                    wts[s, 3] = ly * lx
                    s += 1
    b = bidx[r]
    for c in range(c_n):
        plane = x[b, c]
        s = 0
        for ph in range(oh):
            for pw in range(ow):
                if is_max:
                    acc = 0.0
                    for k in range(gh * gw):
                        v = wts[s, 0] * plane[pos[s, 0]]
                        for j in range(1, 4):
                            v = max(v, wts[s, j] * plane[pos[s, j]])
                        acc = v if k == 0 else max(acc, v)
                        s += 1
                    out[r, c, ph, pw] = acc
                else:
                    acc = 0.0
                    for _ in range(gh * gw):
                        for j in range(4):
                            acc += wts[s, j] * plane[pos[s, j]]
                        s += 1
                    out[r, c, ph, pw] = acc / count


roi_align, roi_align_parallel = twins(
    "roi_align(x, height, width, start, binsz, grid, bidx, is_max, out)",
    _roi_one,
    items={"r": "out.shape[0]"},
    par="roi_align_parallel",
    doc="""Serial RoiAlign over regions (average or max of bilinear samples per bin).""",
)


# --------------------------------------------------------------------------------------------
# NonMaxSuppression
#
# boxes (B, NB, 4), scores (B, NC, NB) and order (B, NC, NB): per class the box indices sorted
# by descending score (ties: lower index first). Arithmetic stays in the boxes' dtype, as the
# spec's reference does, so threshold comparisons at the boundary agree.


@njit(inline="always")
def _corners(box, center, half):
    if center:
        x_min = box[0] - box[2] * half
        x_max = box[0] + box[2] * half
        y_min = box[1] - box[3] * half
        y_max = box[1] + box[3] * half
    else:
        y_min = min(box[0], box[2])
        y_max = max(box[0], box[2])
        x_min = min(box[1], box[3])
        x_max = max(box[1], box[3])
    return y_min, x_min, y_max, x_max


@njit(inline="always")
def _suppress(b1, b2, center, half, iou_threshold):
    y1a, x1a, y1b, x1b = _corners(b1, center, half)
    y2a, x2a, y2b, x2b = _corners(b2, center, half)
    ix_min = max(x1a, x2a)
    ix_max = min(x1b, x2b)
    if ix_max <= ix_min:
        return False
    iy_min = max(y1a, y2a)
    iy_max = min(y1b, y2b)
    if iy_max <= iy_min:
        return False
    inter = (ix_max - ix_min) * (iy_max - iy_min)
    if inter <= 0:
        return False
    area1 = (x1b - x1a) * (y1b - y1a)
    area2 = (x2b - x2a) * (y2b - y2a)
    union = area1 + area2 - inter
    if area1 <= 0 or area2 <= 0 or union <= 0:
        return False
    return inter / union > iou_threshold


@njit
def non_max_suppression(
    boxes, scores, order, max_out, iou_threshold, score_threshold, use_score, center, half, out
):
    """Greedy per-class selection; writes (batch, class, box) rows into out, returns the count."""
    n_b, n_c, n_box = scores.shape
    sel = np.empty(n_box, np.int64)
    count = 0
    for b in range(n_b):
        for c in range(n_c):
            n_sel = 0
            for t in range(n_box):
                if n_sel >= max_out:
                    break
                i = order[b, c, t]
                if use_score and not scores[b, c, i] > score_threshold:
                    continue
                keep = True
                for s in range(n_sel):
                    if _suppress(boxes[b, i], boxes[b, sel[s]], center, half, iou_threshold):
                        keep = False
                        break
                if keep:
                    sel[n_sel] = i
                    n_sel += 1
                    out[count, 0] = b
                    out[count, 1] = c
                    out[count, 2] = i
                    count += 1
    return count


# --------------------------------------------------------------------------------------------
# Col2Im


@njit
def col2im_index(image, block, dilations, pads_begin, strides, cols):
    """Flat image position of every (kernel offset, column) pair; -1 where it lies in padding."""
    d_n = image.shape[0]
    k_total = 1
    l_total = 1
    for a in range(d_n):
        k_total *= block[a]
        l_total *= cols[a]
    idx = np.empty((k_total, l_total), np.int64)
    for k in range(k_total):
        for col in range(l_total):
            rk = k
            rc = col
            flat = 0
            stride = 1
            ok = True
            for a in range(d_n - 1, -1, -1):
                ko = rk % block[a]
                rk //= block[a]
                co = rc % cols[a]
                rc //= cols[a]
                pos = co * strides[a] - pads_begin[a] + ko * dilations[a]
                if pos < 0 or pos >= image[a]:
                    ok = False
                    break
                flat += pos * stride
                stride *= image[a]
            idx[k, col] = flat if ok else -1
    return idx


@njit(inline="always")
def _scatter_one(data, idx, out, p):
    k_n, l_n = idx.shape
    for k in range(k_n):
        for col in range(l_n):
            j = idx[k, col]
            if j >= 0:
                out[p, j] += data[p, k, col]


col2im_scatter, col2im_scatter_parallel = twins(
    "col2im_scatter(data, idx, out)",
    _scatter_one,
    items={"p": "data.shape[0]"},
    par="col2im_scatter_parallel",
    doc="""out[p, idx[k, l]] += data[p, k, l] for every (batch x channel) plane p (out zeroed).""",
)


# --------------------------------------------------------------------------------------------
# DeformConv: deformed im2col for one batch item
#
# x: (C, H, W); offset: (G, KH, KW, 2, OH, OW) with [.., 0, ..] the row offset and [.., 1, ..]
# the column offset; mask: (G, KH, KW, OH, OW); cols: (C, KH*KW, OH*OW). Channel c uses offset
# group c // (C // G). Samples are bilinear with zeros outside the image.


@njit(inline="always")
def _deform_channel(x, offset, mask, geo, cols, c, c_per_g):
    _, height, width = x.shape
    kh, kw, sh, sw, ph, pw, dh, dw = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6], geo[7]
    oh = offset.shape[4]
    ow = offset.shape[5]
    g = c // c_per_g
    for i in range(kh):
        for j in range(kw):
            k = i * kw + j
            for oy in range(oh):
                for ox in range(ow):
                    h = -ph + oy * sh + i * dh + np.float64(offset[g, i, j, 0, oy, ox])
                    w = -pw + ox * sw + j * dw + np.float64(offset[g, i, j, 1, oy, ox])
                    h0f = math.floor(h)
                    w0f = math.floor(w)
                    lh = h - h0f
                    lw = w - w0f
                    val = 0.0
                    if -1.0 <= h0f < height and -1.0 <= w0f < width:
                        h0 = int(h0f)
                        w0 = int(w0f)
                        if h0 >= 0:
                            if w0 >= 0:
                                val += (1.0 - lh) * (1.0 - lw) * x[c, h0, w0]
                            if w0 + 1 < width:
                                val += (1.0 - lh) * lw * x[c, h0, w0 + 1]
                        if h0 + 1 < height:
                            if w0 >= 0:
                                val += lh * (1.0 - lw) * x[c, h0 + 1, w0]
                            if w0 + 1 < width:
                                val += lh * lw * x[c, h0 + 1, w0 + 1]
                    cols[c, k, oy * ow + ox] = val * mask[g, i, j, oy, ox]


deform_im2col, deform_im2col_parallel = twins(
    "deform_im2col(x, offset, mask, geo, cols)",
    _deform_channel,
    setup=("c_n = x.shape[0]", "c_per_g = c_n // offset.shape[0]"),
    items={"c": "c_n"},
    par="deform_im2col_parallel",
    doc="""Deformed im2col of one batch item; geo = (kh, kw, sh, sw, ph, pw, dh, dw).""",
)
