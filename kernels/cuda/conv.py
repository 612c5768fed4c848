"""Convolutions on the GPU: implicit GEMM, im2col into a device buffer, direct depthwise.

The twins of :mod:`onnxjit.kernels.cpu.conv` that the convolution plans of
:mod:`onnxjit.ops.nn` call, with the same names and arguments (device arrays for host ones).
Tensors come canonicalised as there: ``x`` is (N, C, D, H, W) (leading size-1 spatial dims for
1-D and 2-D convolutions), ``k``, ``st``, ``dl``, ``pb`` are int64 arrays of length 3 (kernel,
strides, dilations, pads at the beginning), read by the kernels from device memory.

* :func:`conv_rows` is a group-1 convolution of any geometry as one implicit GEMM per image:
  ``y[n] = W (M x C*K) @ col[n] (C*K x S)`` in the tiles of :mod:`.blas`'s GEMM kernel, with
  the block of ``col`` each step needs gathered from ``x`` straight into shared memory (no
  im2col buffer in global memory) and the epilogue applied in the store.
* :func:`im2col` and :func:`im2col_gather` unfold into a device scratch buffer (one thread per
  element) for plans that multiply it with :func:`onnxjit.kernels.cuda.blas.gemm_ks`.
* :func:`depthwise`, :func:`depthwise3` and :func:`depthwise_tiles` are one thread per output
  element summing its taps directly, then the epilogue.

:func:`gather_table` is the CPU's own function: the lowerings compute the table on the host at
plan time (the plan then holds it as a device constant).
"""

from __future__ import annotations

from numba import cuda

from ..cpu.conv import gather_table  # noqa: F401  (host, plan time: see the module docstring)
from .blas import (
    RM,
    RN,
    THREADS,
    TK,
    TM,
    TM_PAD,
    TN,
    TN_PAD,
    TX,
    TY,
    grid_for,
    load_tile,
    mac_tile,
)
from .epilogue import device_fn, finish
from .runtime import BLOCK, blocks, stream

# Channels per block of the weights ``depthwise_tiles`` reads (the lowering lays them out in
# blocks of this many channels: one channel per block here, the smallest copy; the kernel
# reads any block width, see _dw_weight).
DW_LANES = 1


@device_fn
def _col_block(b_s, x, n, c0, D, H, W, k, st, dl, pb, OH, OW, S, col0, k0, kt, tid, t):
    """Stage ``b_s[p, j] = col[k0 + p, col0 + j]`` of image ``n``'s unfolded input from the
    channels from ``c0`` on (its group's): row ``r = ((c * KD + kd) * KH + kh) * KW + kw`` of
    ``col`` holds, at column ``s = (od * OH + oh) * OW + ow``, ``x[n, c0 + c, od * sd + kd *
    dd - pd, ...]`` (zero in the padding). Consecutive threads take consecutive columns
    (consecutive output positions: neighbouring inputs)."""
    KD, KH, KW = k[0], k[1], k[2]
    for e in range(tid, TK * TN, THREADS):
        p = e // TN
        j = e - p * TN
        r = k0 + p
        s = col0 + j
        v = t(0)
        if r < kt and s < S:
            kw = r % KW
            q = r // KW
            kh = q % KH
            q2 = q // KH
            kd = q2 % KD
            c = q2 // KD
            ow = s % OW
            s2 = s // OW
            oh = s2 % OH
            od = s2 // OH
            d = od * st[0] + kd * dl[0] - pb[0]
            h = oh * st[1] + kh * dl[1] - pb[1]
            w = ow * st[2] + kw * dl[2] - pb[2]
            if d >= 0 and d < D and h >= 0 and h < H and w >= 0 and w < W:
                v = x[n, c0 + c, d, h, w]
        b_s[p, j] = v


@cuda.jit
def _conv_gemm_kernel(x, wf, k, st, dl, pb, yf, M, G, OH, OW, S, bias, has_bias, res, has_res,
                      act, p0, p1):  # fmt: skip
    # image n: yf[(n * M + i) * S + s] = sum_r wf[i * kt + r] * col[n][r, s], col unfolding
    # the C / G channels of output channel i's group; a tile of rows stays in one group
    t = yf.dtype.type
    N, C, D, H, W = x.shape
    cg = C // G
    mg = M // G
    kt = cg * k[0] * k[1] * k[2]
    a_s = cuda.shared.array((TK, TM_PAD), yf.dtype)
    b_s = cuda.shared.array((TK, TN_PAD), yf.dtype)
    acc = cuda.local.array((RM, RN), yf.dtype)
    af = cuda.local.array(RM, yf.dtype)
    bf = cuda.local.array(RN, yf.dtype)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    tid = ty * TX + tx
    gmg = (mg + TM - 1) // TM  # row tiles per group
    gn = (S + TN - 1) // TN
    for n in range(cuda.blockIdx.z, N, cuda.gridDim.z):
        for bi in range(cuda.blockIdx.y, G * gmg, cuda.gridDim.y):
            g = bi // gmg
            row0 = g * mg + (bi - g * gmg) * TM
            row_end = g * mg + mg
            for bj in range(cuda.blockIdx.x, gn, cuda.gridDim.x):
                col0 = bj * TN
                for r in range(RM):
                    for cc in range(RN):
                        acc[r, cc] = t(0)
                for k0 in range(0, kt, TK):
                    load_tile(a_s, TM, wf, 0, kt, 1, True, row0, k0, M, kt, tid, t)
                    _col_block(b_s, x, n, g * cg, D, H, W, k, st, dl, pb, OH, OW, S, col0, k0,
                               kt, tid, t)  # fmt: skip
                    cuda.syncthreads()
                    mac_tile(a_s, b_s, acc, af, bf, ty, tx)
                    cuda.syncthreads()
                for r in range(RM):
                    i = row0 + ty + TY * r
                    if i >= row_end:  # the next group's row (or past M): computed, not kept
                        continue
                    bv = bias[i] if has_bias else t(0)
                    for cc in range(RN):
                        s = col0 + tx + TX * cc
                        if s >= S:
                            continue
                        off = (n * M + i) * S + s
                        rv = res[off] if has_res else t(0)
                        yf[off] = finish(acc[r, cc], bv, has_bias, rv, has_res, act, p0, p1, t)


def conv_rows(x, w2, wp, k, st, dl, pb, y, ep, tm, rpb, tk):
    """Convolution of ``x`` (N, C, D, H, W) with ``w2`` (M, C/G*KD*KH*KW) into ``y`` (N, M,
    OD, OH, OW), plus ``ep = (bias, has_bias, res, has_res, act, p0, p1)``: ``y = act(conv +
    bias[m] + res)`` with ``res`` flat like ``y`` (device arrays of one type, float32/float64;
    ``k``, ``st``, ``dl``, ``pb`` int64 (3,)). Any stride, dilation and padding: one implicit
    GEMM per image, the im2col blocks gathered into shared memory. The groups G follow from
    the weights' width (``C * K / w2.shape[1]``): output channel m reads input channels ``m //
    (M/G) * C/G`` onward (the CPU twin serves G = 1 only). ``wp`` (the CPU's packed weights),
    ``tm``, ``rpb``, ``tk`` (its host tiles) are not read. Writes ``y`` only."""
    if y.size == 0:
        return
    bias, has_bias, res, has_res, act, p0, p1 = ep
    N, M = y.shape[0], y.shape[1]
    S = y.shape[2] * y.shape[3] * y.shape[4]
    taps = int(k[0]) * int(k[1]) * int(k[2])
    G = x.shape[1] * taps // w2.shape[1]
    grid = grid_for((S + TN - 1) // TN, G * ((M // G + TM - 1) // TM), N)
    # flat views (a kernel cannot reshape): the weights as the GEMM's A, the output as C
    wf = w2.reshape(w2.size)
    yf = y.reshape(y.size)
    _conv_gemm_kernel[grid, (TX, TY), stream()](
        x, wf, k, st, dl, pb, yf, M, G, y.shape[3], y.shape[4], S, bias, has_bias, res,
        has_res, act, p0, p1,
    )  # fmt: skip


@cuda.jit
def _im2col_kernel(x, c0, cg, k, st, dl, pb, osz, col):
    # col[n, ((c * KD + kd) * KH + kh) * KW + kw, (od * OH + oh) * OW + ow]
    t = col.dtype.type
    OH, OW = osz[1], osz[2]
    D, H, W = x.shape[2], x.shape[3], x.shape[4]
    KD, KH, KW = k[0], k[1], k[2]
    rows, S = col.shape[1], col.shape[2]
    total = col.shape[0] * rows * S
    start, step = cuda.grid(1), cuda.gridsize(1)
    for e in range(start, total, step):
        s = e % S
        q = e // S
        r = q % rows
        n = q // rows
        kw = r % KW
        q1 = r // KW
        kh = q1 % KH
        q2 = q1 // KH
        kd = q2 % KD
        c = q2 // KD
        ow = s % OW
        s1 = s // OW
        oh = s1 % OH
        od = s1 // OH
        d = od * st[0] + kd * dl[0] - pb[0]
        h = oh * st[1] + kh * dl[1] - pb[1]
        w = ow * st[2] + kw * dl[2] - pb[2]
        v = t(0)
        if d >= 0 and d < D and h >= 0 and h < H and w >= 0 and w < W:
            v = x[n, c0 + c, d, h, w]
        col[n, r, s] = v


def im2col(x, c0, cg, k, st, dl, pb, osz, col):
    """Unfold channels ``c0 .. c0+cg`` of ``x`` (N, C, D, H, W) into ``col`` (N,
    cg*KD*KH*KW, OD*OH*OW): row ``(c, kd, kh, kw)``, column ``(od, oh, ow)``, zero for taps in
    the padding (device arrays; ``k``, ``st``, ``dl``, ``pb``, ``osz`` (OD, OH, OW) int64
    (3,)). ``col``'s batch may be a leading part of ``x``'s images: images ``0 ..
    col.shape[0]`` are unfolded. One thread per element of ``col``; writes ``col`` only."""
    if col.size == 0:
        return
    _im2col_kernel[blocks(col.size), BLOCK, stream()](x, c0, cg, k, st, dl, pb, osz, col)


@cuda.jit
def _gather_kernel(x, c0, cg, tab, col):
    # col[n, c * K + tap, s] = x[n, c0 + c].flat[tab[tap, s]] (tab == D * H * W: padding)
    t = col.dtype.type
    D, H, W = x.shape[2], x.shape[3], x.shape[4]
    V = D * H * W
    HW = H * W
    K, S = tab.shape[0], tab.shape[1]
    rows = col.shape[1]
    total = col.shape[0] * rows * S
    start, step = cuda.grid(1), cuda.gridsize(1)
    for e in range(start, total, step):
        s = e % S
        q = e // S
        r = q % rows
        n = q // rows
        c = r // K
        tap = r - c * K
        o = tab[tap, s]
        v = t(0)
        if o < V:
            d = o // HW
            rem = o - d * HW
            h = rem // W
            v = x[n, c0 + c, d, h, rem - h * W]
        col[n, r, s] = v


def im2col_gather(x, c0, cg, tab, col):
    """:func:`im2col` through a :func:`gather_table` ``tab`` (K, S) on the device (uint32 or
    int64 offsets within one channel volume, ``D * H * W`` for padding): ``col[n, c * K + tap,
    s]`` is channel ``c0 + c``'s element ``tab[tap, s]`` of image ``n``, or zero. One thread
    per element of ``col``; writes ``col`` only."""
    if col.size == 0:
        return
    _gather_kernel[blocks(col.size), BLOCK, stream()](x, c0, cg, tab, col)


@device_fn
def _dw_weight(wm, tiled, m, tap, K, OW):
    """Tap ``tap`` of output channel ``m`` from the flat ``wm``: of an (M, K) array, or (``tiled``)
    from the flat blocks ``depthwise_tiles`` takes: block ``m // DW_LANES``, (K + 1) rows of
    ``OW * DW_LANES`` (the weights repeated along the output row; row K the bias)."""
    if tiled:
        blk = m // DW_LANES
        return wm[(blk * (K + 1) + tap) * (OW * DW_LANES) + (m - blk * DW_LANES)]
    return wm[m * K + tap]


@cuda.jit
def _dw_kernel(x, wm, tiled, k, st, dl, pb, y, mult, bias, has_bias, res, has_res, act, p0, p1):
    # one output element y[n, m, od, oh, ow] per iteration: bias, then the taps in order, then
    # the residual and the activation (the CPU kernels' order of the sums)
    t = y.dtype.type
    D, H, W = x.shape[2], x.shape[3], x.shape[4]
    M, OD, OH, OW = y.shape[1], y.shape[2], y.shape[3], y.shape[4]
    KD, KH, KW = k[0], k[1], k[2]
    K = KD * KH * KW
    total = y.shape[0] * M * OD * OH * OW
    start, step = cuda.grid(1), cuda.gridsize(1)
    for e in range(start, total, step):
        ow = e % OW
        q = e // OW
        oh = q % OH
        q = q // OH
        od = q % OD
        q = q // OD
        m = q % M
        n = q // M
        c = m // mult
        if tiled:
            acc = _dw_weight(wm, True, m, K, K, OW)  # the bias row of the blocks
        else:
            acc = bias[m] if has_bias else t(0)
        for kd in range(KD):
            d = od * st[0] + kd * dl[0] - pb[0]
            if d < 0 or d >= D:
                continue
            for kh in range(KH):
                h = oh * st[1] + kh * dl[1] - pb[1]
                if h < 0 or h >= H:
                    continue
                for kw in range(KW):
                    w = ow * st[2] + kw * dl[2] - pb[2]
                    if w < 0 or w >= W:
                        continue
                    tap = (kd * KH + kh) * KW + kw
                    acc += _dw_weight(wm, tiled, m, tap, K, OW) * x[n, c, d, h, w]
        rv = res[e] if has_res else t(0)
        y[n, m, od, oh, ow] = finish(acc, t(0), False, rv, has_res, act, p0, p1, t)


def _depthwise(x, wm, tiled, k, st, dl, pb, y, mult, ep):
    if y.size == 0:
        return
    bias, has_bias, res, has_res, act, p0, p1 = ep
    wf = wm.reshape(wm.size)  # flat: one kernel indexes both weight layouts
    _dw_kernel[blocks(y.size), BLOCK, stream()](
        x, wf, tiled, k, st, dl, pb, y, mult, bias, has_bias, res, has_res, act, p0, p1
    )


def depthwise(x, wm, k, st, dl, pb, y, mult, ep):
    """Depthwise convolution (group == C) with its epilogue: output channel ``m`` of ``y``
    (N, M, OD, OH, OW) convolves input channel ``m // mult`` of ``x`` (N, C, D, H, W) with the
    taps ``wm[m]`` (``wm`` (M, KD*KH*KW), M = C * mult), then ``y = act(y + bias[m] + res)``
    with ``ep = (bias, has_bias, res, has_res, act, p0, p1)``, ``res`` flat like ``y``. Device
    arrays of one type; ``k``, ``st``, ``dl``, ``pb`` int64 (3,). One thread per output
    element; writes ``y`` only."""
    _depthwise(x, wm, False, k, st, dl, pb, y, mult, ep)


def depthwise3(x, wm, k, st, dl, pb, y, mult, ep):
    """:func:`depthwise` (the CPU twin is specialised to 3x3 kernels of stride 1 or 2 with one
    pixel of padding; this one takes any geometry, the same as :func:`depthwise`)."""
    _depthwise(x, wm, False, k, st, dl, pb, y, mult, ep)


def depthwise_tiles(x, wx, k, st, dl, pb, y, mult, ep):
    """:func:`depthwise` with the weights and bias in the blocks the lowering lays out for
    ``DW_LANES`` channels (``wx`` flat: block ``b``, then the K taps and the bias, then the
    ``OW * DW_LANES`` repeats along an output row); ``ep``'s bias is not read (``wx``
    carries it), its residual and activation are."""
    _depthwise(x, wx, True, k, st, dl, pb, y, mult, ep)
