"""Implicit-GEMM convolution (CPU, Numba): 2-D, group 1, dilation 1, any stride.

The product ``Y = W @ B`` of a convolution has one row of ``B`` per input channel and kernel
tap. With stride 1 and the input padded once into planes ``Wp = OW + KW - 1`` wide, the row
of tap ``(kh, kw)`` of channel ``c`` is the padded plane itself, read from offset
``c * plane + kh * Wp + kw``: output position ``(oh, ow)`` sits at column ``oh * Wp + ow``
of every such row. So the micro-kernel reads ``B`` straight from the padded input through a
table of those offsets (:func:`onnxjit.kernels.cpu.ukernel.ukernel_tab`) and no im2col
matrix is ever written. The price is ``KW - 1`` extra columns per output row, computed and
dropped when the block is copied out with its epilogue (bias, residual, activation).

A stride ``(sh, sw)`` splits the padded input into ``sh * sw`` phase planes (rows
``a, a + sh, ..``, columns ``b, b + sw, ..``), ``Wp = OW + (KW - 1) // sw`` wide: tap
``(kh, kw)`` reads phase ``(kh % sh, kw % sw)`` from ``kh // sh`` rows and ``kw // sw``
columns in, again one unit-stride run per output row, so a strided convolution (a
ResNet stem's 7x7, a downsampling 3x3) is the same product over another table.

The product's columns run ``(OH - 1) * Wp + OW`` long per image. Work items are (image,
block of columns, block of output channels); column blocks are whole micro-kernel blocks
wide (cutting at output rows would leave a partial, masked block per row group), and each
item computes its block into a scratch buffer of the thread, then writes the output.
"""

from __future__ import annotations

import numpy as np

from .._jit import njit, pjit
from .blas import block_geometry
from .conv import _u
from .epilogue import ACT_NONE, activate
from .runtime.atomics import fetch_add, load, pause
from .runtime.chunks import claim
from .shuffle import split_row
from .ukernel import ukernel_tab


@njit
def tap_table(C, KH, KW, sh, sw, plane, Wp):
    """Offsets of the rows of ``B`` for weights laid out (M, C, KH, KW) and strides
    ``(sh, sw)``: row ``(c * KH + kh) * KW + kw`` starts in phase plane ``(kh % sh, kw % sw)``
    of channel ``c`` (:func:`_pad_channel`), ``kh // sh`` rows and ``kw // sw`` columns in;
    ``plane`` elements per phase plane, rows ``Wp`` long."""
    tab = np.empty(C * KH * KW, np.int64)
    for c in range(C):
        for kh in range(KH):
            for kw in range(KW):
                phase = (c * sh + kh % sh) * sw + kw % sw
                tab[(c * KH + kh) * KW + kw] = phase * plane + (kh // sh) * Wp + kw // sw
    return tab


@njit(inline="always")
def _pad_channel(x, xp, n, c, geo):
    """Copy channel ``c`` of image ``n`` of ``x`` (N, C, H, W), padded by ``pt`` rows and
    ``pl`` columns before (``geo = (sh, sw, pt, pl)``), into its phase planes of ``xp`` (N,
    C * sh * sw, Hq, Wq): plane ``(c * sh + a) * sw + b`` holds the padded input's rows
    ``a, a + sh, ..`` and columns ``b, b + sw, ..`` (with stride 1, one plane per channel: the
    padded input itself). Elements of ``xp`` that fall in the padding are left as they are
    (zeros the caller wrote once)."""
    sh, sw, pt, pl = geo
    H, W = x.shape[2], x.shape[3]
    Hq, Wq = xp.shape[2], xp.shape[3]
    if sh == 1 and sw == 1:
        # An element loop, its row and column offsets unsigned (no negative-index wraparound
        # for LLVM to keep: the rows vectorise). Not the 2-D slice assignment ``xp[n, c, pt :
        # pt + H, pl : pl + W] = x[n, c]``: for its shape mismatch error Numba compiles a
        # message formatter (str, join, repr of tuples), 6 s of the ResNet-18 bench model's
        # 39 s empty-cache start on the Zen 3; and this copies 2-3x faster (64 channels of
        # 56 x 56: 24-33 against 70-99 us; 512 of 7 x 7: 11-12 against 22-33).
        upl = _u(pl)
        for h in range(H):
            ph = _u(pt + h)
            for w in range(_u(W)):
                xp[n, c, ph, upl + w] = x[n, c, h, w]
        return
    if sw == 2:
        _pad_channel_w2(x, xp, n, c, geo)
        return
    src = x[n, c]
    for a in range(sh):
        # phase rows i whose padded row i * sh + a is input row h = i * sh + a - pt in [0, H)
        i_lo = max(0, (pt - a + sh - 1) // sh)
        i_hi = min(Hq, (H + pt - a + sh - 1) // sh)
        for b in range(sw):
            j_lo = max(0, (pl - b + sw - 1) // sw)
            j_hi = min(Wq, (W + pl - b + sw - 1) // sw)
            dst = xp[n, (c * sh + a) * sw + b]
            h0 = i_lo * sh + a - pt
            w0 = j_lo * sw + b - pl
            for i in range(i_hi - i_lo):
                drow = dst[i_lo + i]
                srow = src[h0 + i * sh]
                for j in range(j_hi - j_lo):
                    drow[j_lo + j] = srow[w0 + j * sw]


@njit(inline="always")
def _pad_channel_w2(x, xp, n, c, geo):
    # _pad_channel for a column stride of 2: each input row goes to both column phases at
    # once, in vectors (shuffle.split_row). Input column 2 m lands in phase pl % 2 at
    # m + pl // 2, column 2 m + 1 in the other at m + (pl + 1) // 2; columns no output reads
    # (past Wq) are not copied.
    sh, _sw, pt, pl = geo
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    P, Hq, Wq = xp.shape[1], xp.shape[2], xp.shape[3]
    xf = x.reshape(-1)
    xpf = xp.reshape(-1)
    be = pl % 2
    je, jo = pl // 2, (pl + 1) // 2
    n_even = max(0, min((W + 1) // 2, Wq - je))
    n_odd = max(0, min(W // 2, Wq - jo))
    for a in range(sh):
        i_lo = max(0, (pt - a + sh - 1) // sh)
        i_hi = min(Hq, (H + pt - a + sh - 1) // sh)
        base = n * P + (c * sh + a) * 2
        pe = (base + be) * Hq * Wq + je
        po = (base + 1 - be) * Hq * Wq + jo
        for i in range(i_lo, i_hi):
            src = ((n * C + c) * H + i * sh + a - pt) * W
            split_row(xf, src, xpf, pe + i * Wq, po + i * Wq, n_even, n_odd)


@njit(inline="always")
def _taps_item(xpf, img, tab, wp, yshape, Wp, yf, ep, tm, cpb, tk, item, cbuf):
    bias, has_bias, res, has_res, act, p0, p1 = ep
    M, OH, OW = yshape[1], yshape[2], yshape[3]
    Kt = tab.shape[0]
    # the product's columns: output (oh, ow) is column oh * Wp + ow; the last output row
    # needs only OW of its Wp
    total = (OH - 1) * Wp + OW
    n_cb = (total + cpb - 1) // cpb
    n_mt = (M + tm - 1) // tm
    n = item // (n_cb * n_mt)
    rem = item - n * (n_cb * n_mt)
    cb = rem // n_mt
    r0 = (rem - cb * n_mt) * tm
    rows = min(tm, M - r0)
    j_lo = cb * cpb
    cols = min(cpb, total - j_lo)
    mr_max, nr_max = block_geometry(yf)
    t = yf.dtype.type
    b_base = n * img + j_lo
    for k0 in range(0, Kt, tk):
        kk = min(tk, Kt - k0)
        first = k0 == 0
        beta = t(0) if first else t(1)
        for j0 in range(0, cols, nr_max):
            nr = min(nr_max, cols - j0)
            for i0 in range(0, rows, mr_max):
                mr = min(mr_max, rows - i0)
                # A in the panels of pack_a: r0 + i0 is a multiple of MR (tm is)
                ao = ((r0 + i0) // mr_max) * Kt * mr_max + k0 * mr_max
                ukernel_tab(kk, wp, ao, xpf, b_base + j0, tab, k0, cbuf,
                            i0 * cols + j0, cols, mr, nr, t(1), beta, not first)  # fmt: skip
    # Copy out, dropping the KW - 1 extra columns of each output row: the block's outputs
    # of one channel are one contiguous run of y, so the activation is one call per channel
    # (a call per output row cost more than the copy itself on 7- to 28-wide outputs).
    S = OH * OW
    j_hi = j_lo + cols
    oh_lo = j_lo // Wp
    oh_hi = (j_hi - 1) // Wp
    y_lo = oh_lo * OW + min(j_lo - oh_lo * Wp, OW)
    for i in range(rows):
        m = r0 + i
        b = bias[m] if has_bias else t(0)
        base = (n * M + m) * S
        d = base + y_lo
        for oh in range(oh_lo, oh_hi + 1):
            c_lo = max(j_lo, oh * Wp)
            c_n = min(j_hi, oh * Wp + OW) - c_lo
            if c_n <= 0:
                continue
            # unsigned offsets: no negative-index wrap-around code in the loops, and no
            # slices (a view costs two reference count updates, more than a 56-wide row's
            # copy: C2's 3x3 stride-2 stem spent ~40 % of its time on them)
            s0 = np.uint64(i * cols + c_lo - j_lo)
            ud = np.uint64(d)
            if has_res:
                for j in range(np.uint64(c_n)):
                    yf[ud + j] = cbuf[s0 + j] + b + res[ud + j]
            else:
                for j in range(np.uint64(c_n)):
                    yf[ud + j] = cbuf[s0 + j] + b
            d += c_n
        if act != ACT_NONE:
            activate(yf[base + y_lo : d], act, p0, p1)


@njit(inline="always")
def _taps_setup(xp, y, tm, cpb):
    # what both kernels derive from their arguments: flat views, one image's padded size,
    # the thread's scratch block and the item count
    N, Wp = xp.shape[0], xp.shape[3]
    M, OH, OW = y.shape[1], y.shape[2], y.shape[3]
    img = xp.shape[1] * xp.shape[2] * Wp
    cbuf = np.empty(tm * cpb, y.dtype)
    total = (OH - 1) * Wp + OW
    n_items = N * ((total + cpb - 1) // cpb) * ((M + tm - 1) // tm)
    return xp.reshape(-1), y.reshape(-1), img, cbuf, n_items


@njit(fma=True)
def conv_taps(x, xp, done, tab, wp, y, ep, geo, tm, cpb, tk):
    """Convolution of ``x`` (N, C, H, W) with weights ``wp`` (M x Kt in the panels of
    :func:`onnxjit.kernels.cpu.blas.pack_a`, ``Kt = tab.size``) into ``y`` (N, M, OH, OW),
    plus the epilogue ``ep = (bias, has_bias, res, has_res, act, p0, p1)`` (``res`` flat like
    ``y``). ``geo = (sh, sw, pt, pl)``: strides and leading pads. ``x`` is first copied into
    its padded phase planes ``xp`` (N, C * sh * sw, Hq, Wq; see the module docstring), whose
    padding must be zero. ``tab``: :func:`tap_table`; blocks of ``tm`` channels (a multiple
    of MR, or all of M) and ``cpb`` columns of the product (a multiple of NR: only the last
    block of an image has a partial micro-kernel block; see :func:`_taps_item`), the inner
    dimension in chunks of ``tk``. ``done`` (int64, two elements): scratch of the pool
    twin, unused here."""
    N, C = x.shape[0], x.shape[1]
    for i in range(N * C):
        _pad_channel(x, xp, i // C, i % C, geo)
    xpf, yf, img, cbuf, n_items = _taps_setup(xp, y, tm, cpb)
    for item in range(n_items):
        _taps_item(xpf, img, tab, wp, y.shape, xp.shape[3], yf, ep, tm, cpb, tk, item, cbuf)


@pjit(fma=True)
def conv_taps_par(ctl, x, xp, done, tab, wp, y, ep, geo, tm, cpb, tk):
    """Pool twin of :func:`conv_taps`. Each thread first takes channels of the padding copy
    (``done[0]``: the next one to take, ``done[1]``: how many are copied; zero on entry),
    then items of the product (image, column block, channel block) from the pool's
    counter, and waits before its first product item until every channel is copied. No
    thread can wait on a copy that no thread has taken: a thread reaches the product only
    once every copy is taken. (The copies go by their own counter so that a claim never
    bundles the product's few large items with them.)"""
    N, C = x.shape[0], x.shape[1]
    n_pad = N * C
    # channels in runs of about 4096 elements: an atomic add on the line both threads write
    # costs about 0.1 us, as much as copying a 28 x 28 plane
    run = max(1, min(n_pad // 4, 4096 // (x.shape[2] * x.shape[3])))
    while True:
        lo = fetch_add(done, 0, run)
        if lo >= n_pad:
            break
        hi = min(n_pad, lo + run)
        for i in range(lo, hi):
            _pad_channel(x, xp, i // C, i % C, geo)
        fetch_add(done, 1, hi - lo)
    xpf, yf, img, cbuf, n_items = _taps_setup(xp, y, tm, cpb)
    ready = False
    while True:
        chunk_lo, chunk_hi = claim(ctl, n_items)
        if chunk_lo >= chunk_hi:
            break
        while not ready:
            ready = load(done, 1) >= n_pad
            if not ready:
                pause()
        for item in range(chunk_lo, chunk_hi):
            _taps_item(xpf, img, tab, wp, y.shape, xp.shape[3], yf, ep, tm, cpb, tk, item,
                       cbuf)  # fmt: skip
