"""Implicit-GEMM convolution (CPU, Numba): 2-D, group 1, stride 1, dilation 1.

The product ``Y = W @ B`` of a convolution has one row of ``B`` per input channel and kernel
tap. With the input padded once into planes ``Wp = OW + KW - 1`` wide, the row of tap
``(kh, kw)`` of channel ``c`` is the padded plane itself, read from offset
``c * plane + kh * Wp + kw``: output position ``(oh, ow)`` sits at column ``oh * Wp + ow``
of every such row. So the micro-kernel reads ``B`` straight from the padded input through a
table of those offsets (:func:`onnxjit.kernels.cpu.ukernel.ukernel_tab`) and no im2col
matrix is ever written. The price is ``KW - 1`` extra columns per output row, computed and
dropped when the block is copied out with its epilogue (bias, residual, activation).

Work items are (image, block of output rows, block of output channels); each computes its
block into a scratch buffer of the thread, then writes the output.
"""

from __future__ import annotations

import numpy as np

from .._jit import njit, pjit
from ..chunks import claim
from .blas import block_geometry
from .epilogue import activate
from .ukernel import ukernel_tab


@njit
def tap_table(C, KH, KW, plane, Wp):
    """Offsets of the rows of ``B`` for weights laid out (M, C, KH, KW): row
    ``(c * KH + kh) * KW + kw`` starts at ``c * plane + kh * Wp + kw`` of an image's padded
    planes (``plane`` elements each)."""
    tab = np.empty(C * KH * KW, np.int64)
    for c in range(C):
        for kh in range(KH):
            for kw in range(KW):
                tab[(c * KH + kh) * KW + kw] = c * plane + kh * Wp + kw
    return tab


@njit
def pad_planes(x, xp, pt, pl):
    """Copy ``x`` (N, C, H, W) into ``xp`` (N, C, Hp, Wp) at row ``pt``, column ``pl``;
    the rest of ``xp`` is left as it is (zeros the caller wrote once)."""
    N, C, H, W = x.shape
    for n in range(N):
        for c in range(C):
            for h in range(H):
                src = x[n, c, h]
                dst = xp[n, c, pt + h]
                for w in range(W):
                    dst[pl + w] = src[w]


@njit(inline="always")
def _taps_item(xpf, img, tab, wp, yshape, Wp, yf, ep, tm, rpb, tk, item, cbuf):
    bias, has_bias, res, has_res, act, p0, p1 = ep
    M, OH, OW = yshape[1], yshape[2], yshape[3]
    Kt = tab.shape[0]
    n_rb = (OH + rpb - 1) // rpb
    n_mt = (M + tm - 1) // tm
    n = item // (n_rb * n_mt)
    rem = item - n * (n_rb * n_mt)
    rb = rem // n_mt
    r0 = (rem - rb * n_mt) * tm
    rows = min(tm, M - r0)
    r_lo = rb * rpb
    r_hi = min(OH, r_lo + rpb)
    cols = (r_hi - r_lo) * Wp
    mr_max, nr_max = block_geometry(yf)
    t = yf.dtype.type
    b_base = n * img + r_lo * Wp
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
                ukernel_tab(kk, wp, ao, 1, mr_max, xpf, b_base + j0, tab, k0, cbuf,
                            i0 * cols + j0, cols, mr, nr, t(1), beta, not first)  # fmt: skip
    S = OH * OW
    for i in range(rows):
        m = r0 + i
        b = bias[m] if has_bias else t(0)
        for oh in range(r_lo, r_hi):
            src = i * cols + (oh - r_lo) * Wp
            dst = (n * M + m) * S + oh * OW
            v = yf[dst : dst + OW]
            cv = cbuf[src : src + OW]
            if has_res:
                rv = res[dst : dst + OW]
                for j in range(OW):
                    v[j] = cv[j] + b + rv[j]
            else:
                for j in range(OW):
                    v[j] = cv[j] + b
            activate(v, act, p0, p1)


@njit(inline="always")
def _taps_setup(xp, y, tm, rpb):
    # what both kernels derive from their arguments: flat views, one image's padded size,
    # the thread's scratch block and the item count
    N, Wp = xp.shape[0], xp.shape[3]
    M, OH = y.shape[1], y.shape[2]
    img = xp.shape[1] * xp.shape[2] * Wp
    cbuf = np.empty(tm * rpb * Wp, y.dtype)
    n_items = N * ((OH + rpb - 1) // rpb) * ((M + tm - 1) // tm)
    return xp.reshape(-1), y.reshape(-1), img, cbuf, n_items


@njit(fma=True)
def conv_taps(xp, tab, wp, y, ep, tm, rpb, tk):
    """Convolution of the padded input ``xp`` (N, C, Hp + 1, Wp; see the module docstring:
    one more zero row than the padding needs, read by the dropped columns of the last output
    row) with weights ``wp`` (M x Kt in the panels of
    :func:`onnxjit.kernels.cpu.blas.pack_a`, ``Kt = tab.size``) into ``y`` (N, M, OH, OW),
    plus the epilogue ``ep = (bias, has_bias, res, has_res, act, p0, p1)`` (``res`` flat like
    ``y``). ``tab``: :func:`tap_table`; blocks of ``tm`` channels (a multiple of MR, or all
    of M) and ``rpb`` output rows, the inner dimension in chunks of ``tk``."""
    xpf, yf, img, cbuf, n_items = _taps_setup(xp, y, tm, rpb)
    for item in range(n_items):
        _taps_item(xpf, img, tab, wp, y.shape, xp.shape[3], yf, ep, tm, rpb, tk, item, cbuf)


@pjit(fma=True)
def conv_taps_par(ctl, xp, tab, wp, y, ep, tm, rpb, tk):
    """Pool twin of :func:`conv_taps` (items: image, row block, channel block)."""
    xpf, yf, img, cbuf, n_items = _taps_setup(xp, y, tm, rpb)
    while True:
        chunk_lo, chunk_hi = claim(ctl, n_items)
        if chunk_lo >= chunk_hi:
            break
        for item in range(chunk_lo, chunk_hi):
            _taps_item(xpf, img, tab, wp, y.shape, xp.shape[3], yf, ep, tm, rpb, tk, item,
                       cbuf)  # fmt: skip
