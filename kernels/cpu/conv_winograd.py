"""Winograd convolution F(2x2, 3x3) (CPU, Numba): 2-D, 3x3 kernel, stride 1, dilation 1,
group 1.

Each 2x2 block of outputs (a *tile*) is computed from the 4x4 patch of padded input under it
as ``Y = A^T [(G g G^T) * (B^T d B)] A``: 16 products per input channel and output channel
instead of the 36 of the direct form, so the multiply-adds of the convolution, which bound
it, drop by 2.25x. The products of all channels are 16 independent matrix products, one per
position ``xi`` of the 4x4 transformed patch::

    M[xi] (M x T) = U[xi] (M x C) @ V[xi] (C x T)

with ``U = G g G^T`` the transformed weights (computed once per weight, :func:`weights`),
``V = B^T d B`` the transformed input patches of the ``T`` tiles, and ``M`` transformed back
per tile by ``A^T M A``. The transforms use only additions and halvings (interpolation points
0, 1, -1 and infinity), so the results stay within a few units of float rounding of the
direct form (tests/test_conv_winograd.py measures it against onnxruntime).

Work items are (image, block of whole tile rows, block of output channels). A thread
transforms the input under its item's tile rows itself (all channels, into its own ``V``
block, kept for the next item when that has the same tile rows: items of one block of rows
are consecutive, so a claimed run of them reuses it), multiplies, and transforms back with
the epilogue (bias, residual, activation), writing one contiguous run of every output
channel it covers. No thread reads what another wrote (a shared ``V`` filled by both
threads and read across them ran only about 1.2x faster on two threads than on one). Both
transforms are single vector loops over a flat tile index (see :func:`_transform_channel`).
"""

from __future__ import annotations

import numpy as np

from .._jit import njit
from .blas import block_geometry
from .epilogue import activate
from .runtime.twins import twins
from .shuffle import split_row
from .ukernel import ukernel


@njit
def weights(w, mr):
    """The transformed weights ``U[xi] = (G g G^T)[xi]`` of ``w`` (M, C, 3, 3), computed in
    float64 and rounded once to ``w``'s type, each of the 16 ``M x C`` matrices in the panels
    of :func:`onnxjit.kernels.cpu.blas.pack_a` (``mr`` rows a panel): matrix ``xi`` starts at
    ``xi * panels * C * mr``, ``panels = ceil(M / mr)``; rows past ``M`` are zero."""
    M, C = w.shape[0], w.shape[1]
    panels = (M + mr - 1) // mr
    per = panels * C * mr
    out = np.zeros(16 * per, w.dtype)
    g = np.empty((3, 3), np.float64)
    t = np.empty((4, 3), np.float64)
    for m in range(M):
        for c in range(C):
            for i in range(3):
                for j in range(3):
                    g[i, j] = w[m, c, i, j]
            # G g: G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]
            for j in range(3):
                t[0, j] = g[0, j]
                t[1, j] = 0.5 * (g[0, j] + g[1, j] + g[2, j])
                t[2, j] = 0.5 * (g[0, j] - g[1, j] + g[2, j])
                t[3, j] = g[2, j]
            base = (m // mr) * C * mr + c * mr + m % mr
            for i in range(4):
                u0 = t[i, 0]
                u1 = 0.5 * (t[i, 0] + t[i, 1] + t[i, 2])
                u2 = 0.5 * (t[i, 0] - t[i, 1] + t[i, 2])
                u3 = t[i, 2]
                out[(4 * i + 0) * per + base] = u0
                out[(4 * i + 1) * per + base] = u1
                out[(4 * i + 2) * per + base] = u2
                out[(4 * i + 3) * per + base] = u3
    return out


_u = np.uint64


@njit(inline="always")
def _phase_planes(x, n, c, ph, TW1, pt, pl, hp_lo, n_hp):
    # padded rows [hp_lo, hp_lo + n_hp) of channel c of image n (hp_lo even) into the phase
    # planes (see _transform_channel): input rows split into their even and odd columns in
    # vectors (shuffle.split_row: as loops, rows of 14 pairs ran element by element),
    # padding rows zeroed (another item may have left input there); the padding columns are
    # never written, so they stay zero.
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    L = ph.shape[1]
    phf = ph.reshape(-1)
    xf = x.reshape(-1)
    b_even = pl % 2  # the plane column parity of input column 2 m, at m + pl // 2
    for r in range(n_hp):
        a = r % 2
        row = (r // 2) * TW1
        h = hp_lo + r - pt
        if h < 0 or h >= H:
            for b in range(2):
                for j in range(TW1):
                    ph[2 * a + b, _u(row + j)] = 0
            continue
        ea = (2 * a + b_even) * L + row + pl // 2
        oa = (2 * a + 1 - b_even) * L + row + (pl + 1) // 2
        src = ((n * C + c) * H + h) * W
        split_row(xf, src, phf, ea, oa, (W + 1) // 2, W // 2)


@njit(inline="always")
def _transform_channel(x, n, c, ph, vb, TW1, pt, pl, ty_lo, n_ty):
    """``V[xi, c] = (B^T d B)[xi]`` for the tiles of tile rows ``[ty_lo, ty_lo + n_ty)`` of
    channel ``c`` of image ``n``, into ``vb`` (16, C, >= n_ty * TW1), ``TW1 = TW + 1``.
    B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]].

    ``ph`` (4, (n_ty + 1) * TW1 + 1): this thread's four phase planes of the padded rows
    under those tiles, plane ``2 a + b`` holding rows ``a, a + 2, ..`` and columns ``b, b +
    2, ..`` in rows of ``TW1``. Element ``(r, s)`` of tile ``(ty, tx)`` is then plane ``(r %
    2, s % 2)`` at ``f + (r // 2) * TW1 + s // 2`` with ``f = (ty - ty_lo) * TW1 + tx``: a
    constant offset from ``f``, so the transform is one long vector loop over ``f`` (loops
    over the ``TW`` tiles of a row are too short to vectorise). Its price is the column
    ``tx = TW`` of every tile row, computed from whatever lies there and never used (so the
    products have ``TW1`` columns per tile row)."""
    _phase_planes(x, n, c, ph, TW1, pt, pl, 2 * ty_lo, 2 * n_ty + 2)
    # one pass per row of B^T d: a loop with more than about eight output streams stays
    # scalar (LLVM gives up on the run-time overlap checks its vector version needs)
    for i in range(4):
        _transform_rows(ph, vb, c, i, TW1, n_ty * TW1)


@njit(inline="always")
def _transform_rows(ph, vb, c, i, TW1, nf):
    # row i of B^T d for every tile (rows 0 - 2, 1 + 2, 2 - 1, 1 - 3 of the patch), then its
    # column transform: V[4 i .. 4 i + 3]. Patch row r is phase row r % 2, r // 2 rows in.
    if i == 0:
        pa, oa, sa, pb, ob = 0, 0, 1, 0, TW1
    elif i == 1:
        pa, oa, sa, pb, ob = 2, 0, -1, 0, TW1
    elif i == 2:
        pa, oa, sa, pb, ob = 0, TW1, 1, 2, 0
    else:
        pa, oa, sa, pb, ob = 2, 0, 1, 2, TW1
    ua, ub = _u(oa), _u(ob)
    one = _u(1)
    base = 4 * i
    sg = ph.dtype.type(sa)
    for f in range(nf):
        g = _u(f)
        e0 = ph[pa, g + ua] - sg * ph[pb, g + ub]
        e1 = ph[pa + 1, g + ua] - sg * ph[pb + 1, g + ub]
        e2 = ph[pa, g + ua + one] - sg * ph[pb, g + ub + one]
        e3 = ph[pa + 1, g + ua + one] - sg * ph[pb + 1, g + ub + one]
        vb[base, c, f] = e0 - e2
        vb[base + 1, c, f] = e1 + e2
        vb[base + 2, c, f] = e2 - e1
        vb[base + 3, c, f] = e1 - e3


@njit(inline="always")
def _products(vb, up, M, r0, rows, cols, tk, mbuf):
    # M[xi][r0 : r0 + rows, :cols] = U[xi] @ V[xi] into mbuf (16, rows, cols)
    C, ldv = vb.shape[1], vb.shape[2]
    mr_max, nr_max = block_geometry(mbuf)
    t = mbuf.dtype.type
    per = ((M + mr_max - 1) // mr_max) * C * mr_max
    vf = vb.reshape(-1)
    for xi in range(16):
        for k0 in range(0, C, tk):
            kk = min(tk, C - k0)
            first = k0 == 0
            beta = t(0) if first else t(1)
            for j0 in range(0, cols, nr_max):
                nr = min(nr_max, cols - j0)
                for i0 in range(0, rows, mr_max):
                    mr = min(mr_max, rows - i0)
                    ao = xi * per + ((r0 + i0) // mr_max) * C * mr_max + k0 * mr_max
                    bo = (xi * C + k0) * ldv + j0
                    co = (xi * rows + i0) * cols + j0
                    ukernel(kk, up, ao, 1, mr_max, vf, bo, ldv, mbuf, co, cols, mr, nr, t(1),
                            beta, not first)  # fmt: skip


@njit(inline="always")
def _outputs(q, stage, y, res4, ep, n, r0, ty_lo, n_ty, TW1):
    # Y = A^T M A for the tiles of q (16, rows, cols), A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]
    # on both sides: one vector loop over the tiles into four rows (output (a, b) of each
    # tile), one that interleaves them into two output rows per tile row, then a copy per
    # output row with the bias and residual (contiguous stores: a loop that stored at
    # stride 2 as it computed ran 5x slower). Whole tile rows: the outputs of one channel
    # are one contiguous run of y (one activation call per channel).
    bias, has_bias, _res, has_res, act, p0, p1 = ep
    M, OH, OW = y.shape[1], y.shape[2], y.shape[3]
    rows, cols = q.shape[1], q.shape[2]
    t = y.dtype.type
    yf = y.reshape(-1)
    for i in range(rows):
        m = r0 + i
        for f in range(cols):
            # row 0: M[0] + M[4] + M[8]; row 1: M[4] - M[8] - M[12] (each column s)
            u0 = q[0, i, f] + q[4, i, f] + q[8, i, f]
            u1 = q[1, i, f] + q[5, i, f] + q[9, i, f]
            u2 = q[2, i, f] + q[6, i, f] + q[10, i, f]
            u3 = q[3, i, f] + q[7, i, f] + q[11, i, f]
            w0 = q[4, i, f] - q[8, i, f] - q[12, i, f]
            w1 = q[5, i, f] - q[9, i, f] - q[13, i, f]
            w2 = q[6, i, f] - q[10, i, f] - q[14, i, f]
            w3 = q[7, i, f] - q[11, i, f] - q[15, i, f]
            stage[0, f] = u0 + u1 + u2
            stage[1, f] = u1 - u2 - u3
            stage[2, f] = w0 + w1 + w2
            stage[3, f] = w1 - w2 - w3
        for f in range(cols):
            stage[4, 2 * f] = stage[0, f]
            stage[4, 2 * f + 1] = stage[1, f]
            stage[5, 2 * f] = stage[2, f]
            stage[5, 2 * f + 1] = stage[3, f]
        b = bias[m] if has_bias else t(0)
        for tyl in range(n_ty):
            s0 = _u(2 * tyl * TW1)
            for a in range(min(2, OH - 2 * (ty_lo + tyl))):
                oh = 2 * (ty_lo + tyl) + a
                if has_res:
                    for j in range(OW):
                        y[n, m, oh, j] = stage[4 + a, s0 + _u(j)] + b + res4[n, m, oh, j]
                else:
                    for j in range(OW):
                        y[n, m, oh, j] = stage[4 + a, s0 + _u(j)] + b
        base = (n * M + m) * OH * OW
        oh_end = min(OH, 2 * (ty_lo + n_ty))
        activate(yf[base + 2 * ty_lo * OW : base + oh_end * OW], act, p0, p1)


@njit(inline="always")
def _item(x, up, y, ep, pads, tm, tile_rows, tk, item, last, scratch):
    """Work item ``item``: image ``n``, tile rows ``[ty_lo, ty_lo + n_ty)`` (blocks of
    ``tile_rows``), output channels ``[r0, r0 + rows)`` (blocks of ``tm``). ``last``: the
    block of tile rows (``n * n_rb + rb``) this thread's V block holds, or -1; returns the
    one it holds after this item."""
    ph, vb, mbuf, stage, res4 = scratch
    C = x.shape[1]
    M, OH, OW = y.shape[1], y.shape[2], y.shape[3]
    pt, pl = pads
    TH, TW1 = (OH + 1) // 2, (OW + 1) // 2 + 1
    n_rb = (TH + tile_rows - 1) // tile_rows
    n_mt = (M + tm - 1) // tm
    block = item // n_mt  # n * n_rb + rb
    n = block // n_rb
    rb = block - n * n_rb
    r0 = (item - block * n_mt) * tm
    rows = min(tm, M - r0)
    ty_lo = rb * tile_rows
    n_ty = min(TH - ty_lo, tile_rows)
    cols = n_ty * TW1
    if block != last:
        for c in range(C):
            _transform_channel(x, n, c, ph, vb, TW1, pt, pl, ty_lo, n_ty)
    q = mbuf[: 16 * rows * cols].reshape(16, rows, cols)
    _products(vb, up, M, r0, rows, cols, tk, q.reshape(-1))
    _outputs(q, stage, y, res4, ep, n, r0, ty_lo, n_ty, TW1)
    return block


@njit(inline="always")
def _setup(x, y, ep, tm, tile_rows):
    # this thread's scratch: phase planes, V block, product blocks, output rows; the
    # residual's 4-D view; the item count
    N, C = x.shape[0], x.shape[1]
    M, OH, OW = y.shape[1], y.shape[2], y.shape[3]
    TH, TW1 = (OH + 1) // 2, (OW + 1) // 2 + 1
    cols = tile_rows * TW1
    ph = np.zeros((4, (tile_rows + 1) * TW1 + 1), x.dtype)
    vb = np.empty((16, C, cols), x.dtype)
    mbuf = np.empty(16 * min(tm, M) * cols, y.dtype)
    stage = np.empty((6, 2 * cols), y.dtype)
    res = ep[2]
    res4 = res.reshape(y.shape) if ep[3] else res.reshape((0, 0, 0, 0))
    n_items = N * ((TH + tile_rows - 1) // tile_rows) * ((M + tm - 1) // tm)
    return (ph, vb, mbuf, stage, res4), n_items


conv_winograd, conv_winograd_par = twins(
    "conv_winograd(x, up, y, ep, pads, tm, tile_rows, tk)",
    _item,
    setup="scratch, n_work = _setup(x, y, ep, tm, tile_rows)",
    items={"item": "n_work"},
    state="last = -1",
    fma=True,
    doc="""3x3 stride-1 convolution of ``x`` (N, C, H, W) with transformed weights ``up``
    (:func:`weights`) into ``y`` (N, M, OH, OW), plus the epilogue ``ep = (bias, has_bias,
    res, has_res, act, p0, p1)`` (``res`` flat like ``y``). ``pads = (pt, pl)``: leading pads
    (the trailing ones follow from the shapes). Items of ``tile_rows`` rows of 2x2 tiles and
    ``tm`` output channels (a multiple of MR, or all of M), the inner dimension in chunks of
    ``tk``.""",
)
