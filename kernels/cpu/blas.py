"""Matrix products from Numba code on row-major blocks, single-threaded per block.

:func:`gemm_block` multiplies sub-blocks of row-major operands given as flat arrays, element
offsets and row strides. Products whose B is stored as is (or packed by :func:`pack_b`) run on
onnxjit's micro-kernel (:mod:`.ukernel`) in the usual blocked loop nest; a transposed B, or
``tb == B_BLAS``, goes to the BLAS library Numba itself links to for ``np.dot`` (SciPy's,
through Numba's ``numba_xxgemm`` helper, whose address is resolved when the process runs, so
kernels calling it are cached on disk like any other).

The pool kernels below split one product into tiles, one block each, claimed by the pool's
threads (:mod:`onnxjit.backends.cpu.pool`): the BLAS library runs single-threaded inside
onnxjit's runs, so the product's threads are the pool's and never compete with a second pool
for the cores.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.linalg import ensure_blas, get_blas_kind

from .._jit import njit
from .epilogue import ACT_CLIP, ACT_NONE, ACT_RELU, activate
from .runtime.twins import twins
from .ukernel import (
    BIAS_COL,
    BIAS_NONE,
    BIAS_ROW,
    float_arrays,
    int_geometry,
    pack_panel,
    row_counts,
    ukernel_ct,
    ukernel_ep,
    ukernel_ep_panels,
    ukernel_int,
)
from .ukernel import geometry as ugeometry

_ll_char = ir.IntType(8)
_ll_intp = ir.IntType(64)
_ll_voidp = ir.IntType(8).as_pointer()


@intrinsic
def _xxgemm(
    typingctx, transa, transb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc
):
    """Column-major ``C = alpha * op(A) @ op(B) + beta * C`` (Fortran BLAS semantics) on the
    blocks of the flat arrays ``a``, ``b``, ``c`` starting at the element offsets."""
    dtype = float_arrays("gemm", a, b, c)
    sig = types.int32(
        transa, transb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc
    )

    def codegen(context, builder, sig, args):
        ensure_blas()
        (ta, tb, m_, n_, k_, alpha_, a_, aoff, lda_, b_, boff, ldb_, beta_, c_, coff, ldc_) = args
        aty, bty, cty = sig.args[6], sig.args[9], sig.args[13]

        def ptr(aryty, val, off, offty):
            ary = context.make_array(aryty)(context, builder, val)
            off = context.cast(builder, off, offty, types.intp)
            return builder.bitcast(builder.gep(ary.data, [off]), _ll_voidp)

        def intp(val, ty):
            return context.cast(builder, val, ty, types.intp)

        def slot(val, ty):
            v = context.cast(builder, val, ty, dtype)
            return builder.bitcast(cgutils.alloca_once_value(builder, v), _ll_voidp)

        fnty = ir.FunctionType(
            ir.IntType(32),
            [
                _ll_char,
                _ll_char,
                _ll_char,
                _ll_intp,
                _ll_intp,
                _ll_intp,
                _ll_voidp,
                _ll_voidp,
                _ll_intp,
                _ll_voidp,
                _ll_intp,
                _ll_voidp,
                _ll_voidp,
                _ll_intp,
            ],
        )
        fn = cgutils.get_or_insert_function(builder.module, fnty, "numba_xxgemm")
        kind = ir.Constant(_ll_char, ord(get_blas_kind(dtype)))
        tas = builder.trunc(intp(ta, sig.args[0]), _ll_char)
        tbs = builder.trunc(intp(tb, sig.args[1]), _ll_char)
        return builder.call(
            fn,
            (
                kind, tas, tbs,
                intp(m_, sig.args[2]), intp(n_, sig.args[3]), intp(k_, sig.args[4]),
                slot(alpha_, sig.args[5]),
                ptr(aty, a_, aoff, sig.args[7]), intp(lda_, sig.args[8]),
                ptr(bty, b_, boff, sig.args[10]), intp(ldb_, sig.args[11]),
                slot(beta_, sig.args[12]),
                ptr(cty, c_, coff, sig.args[14]), intp(ldc_, sig.args[15]),
            ),
        )  # fmt: skip

    return sig, codegen


@intrinsic
def _xxgemv(typingctx, trans, m, n, alpha, a, a_off, lda, x, x_off, beta, y, y_off):
    """Column-major ``y = alpha * op(A) @ x + beta * y`` (Fortran BLAS ``?gemv``, unit
    strides) on the blocks of the flat arrays starting at the element offsets."""
    dtype = float_arrays("gemv", a, x, y)
    sig = types.int32(trans, m, n, alpha, a, a_off, lda, x, x_off, beta, y, y_off)

    def codegen(context, builder, sig, args):
        ensure_blas()
        (tr, m_, n_, alpha_, a_, aoff, lda_, x_, xoff, beta_, y_, yoff) = args

        def ptr(i, val, off):
            ary = context.make_array(sig.args[i])(context, builder, val)
            off = context.cast(builder, off, sig.args[i + 1], types.intp)
            return builder.bitcast(builder.gep(ary.data, [off]), _ll_voidp)

        def intp(i, val):
            return context.cast(builder, val, sig.args[i], types.intp)

        def slot(i, val):
            v = context.cast(builder, val, sig.args[i], dtype)
            return builder.bitcast(cgutils.alloca_once_value(builder, v), _ll_voidp)

        fnty = ir.FunctionType(
            ir.IntType(32),
            [_ll_char, _ll_char, _ll_intp, _ll_intp, _ll_voidp, _ll_voidp, _ll_intp,
             _ll_voidp, _ll_voidp, _ll_voidp],
        )  # fmt: skip
        fn = cgutils.get_or_insert_function(builder.module, fnty, "numba_xxgemv")
        kind = ir.Constant(_ll_char, ord(get_blas_kind(dtype)))
        trs = builder.trunc(intp(0, tr), _ll_char)
        return builder.call(
            fn,
            (kind, trs, intp(1, m_), intp(2, n_), slot(3, alpha_), ptr(4, a_, aoff),
             intp(6, lda_), ptr(7, x_, xoff), slot(9, beta_), ptr(10, y_, yoff)),
        )  # fmt: skip

    return sig, codegen


_N = ord("n")
_T = ord("t")


# Blocking of the products the micro-kernel computes (kernels/cpu/ukernel.py): KC steps of the
# inner dimension per pass (a packed panel of B, KC x NR, stays in L1: 32 KB in float32), NC
# columns of B packed at a time (KC x NC in L2), MC rows of A per sweep over the panels.
KC = 256
NC = 1024
MC = 96
_MR, _NR = ugeometry(4)
_MR64, _NR64 = ugeometry(8)
_ROW_COUNTS = {4: row_counts(_MR), 8: row_counts(_MR64)}
# ``tb`` value for a B operand in the panels of :func:`pack_b`, ``ta`` value for an A operand
# in the panels of :func:`pack_a` (False / True: as stored / transposed).
B_PACKED = 2
A_PACKED = 2
# ``tb`` value for B as stored, multiplied by BLAS rather than the micro-kernel.
B_BLAS = 3
# ``ta`` value of a tile product (:func:`gemm_ks`) for an A (``m x k``) given as ``A^T`` in
# the panels of :func:`pack_b` (NR rows of A per panel), B stored ``k x n``: each tile runs
# as its transpose, ``B^T A^T``, written back transposed (see :func:`transposed_tiles`).
A_PANELS_T = 4
# Products of at most this many columns may run in that form; a row of the micro-kernel costs
# about this factor of a column of the direct form there (the transposed stores) over a short
# inner dimension, and about one over inner dimensions from _LONG_K on, where those stores are
# spread over enough steps (and where the direct form's fixed costs per block are small too:
# see transposed_tiles' ``narrow``); the panels
# of A^T a tile reads per block of KC steps take at most these bytes (they must stay in L1
# beside the lines of B^T that each MR columns read).
_TRANSPOSED_MAX_N = 128
_TRANSPOSE_COST = 1.15
_LONG_K = 512
_TRANSPOSED_L1 = 16384


@njit
def pack_a(a, m, k):
    """The row-major ``m x k`` matrix flat in ``a`` as panels of MR rows: panel ``i`` holds
    rows ``i * MR ..`` interleaved, step by step (``k`` groups of MR, the last panel
    zero-padded), so that the micro-kernel reads A as one sequential stream (a weight read
    in place is MR streams, which the prefetchers follow badly once it is out of cache);
    the operand of :func:`gemm_block` with ``ta == A_PACKED``."""
    mr_max = block_geometry(a)[0]
    panels = (m + mr_max - 1) // mr_max
    out = np.zeros(panels * k * mr_max, a.dtype)
    for i in range(m):
        base = (i // mr_max) * k * mr_max + i % mr_max
        for p in range(k):
            out[base + p * mr_max] = a[i * k + p]
    return out


@njit
def pack_b(b, k, n):
    """The row-major ``k x n`` matrix flat in ``b`` as panels of NR columns: panel ``j`` holds
    columns ``j * NR ..`` as ``k`` rows of NR (the last zero-padded), one after another; the
    operand of :func:`gemm_block` with ``tb == B_PACKED``."""
    nr_max = block_geometry(b)[1]
    panels = (n + nr_max - 1) // nr_max
    out = np.zeros(panels * k * nr_max, b.dtype)
    for j in range(panels):
        nr = min(nr_max, n - j * nr_max)
        pack_panel(out, j * k * nr_max, b, j * nr_max, n, k, nr)
    return out


@njit(inline="always")
def block_geometry(c):
    """``(MR, NR)`` of the micro-kernel for the element type of array ``c``."""
    if c.itemsize == 4:
        return _MR, _NR
    return _MR64, _NR64


@njit(inline="always")
def _block(a_panels, kc, a, ao, a_rs, a_cs, b, bo, b_rs, c, co, ldc, mr, nr, alpha, beta, load_c,
           ep):  # fmt: skip
    """One block of :func:`_own_gemm` through :func:`ukernel_ep` with its epilogue ``ep =
    (bias, bias_mode, res, act, p0, p1)``: the panel kernel where A is in panels (constant
    row offsets, see :func:`ukernel_ep_panels`), the strided one otherwise."""
    bias, bias_mode, res, act, p0, p1 = ep
    if a_panels:
        ukernel_ep_panels(kc, a, ao, a_rs, a_cs, b, bo, b_rs, c, co, ldc, mr, nr, alpha, beta,
                          load_c, bias, bias_mode, res, act, p0, p1)  # fmt: skip
    else:
        ukernel_ep(kc, a, ao, a_rs, a_cs, b, bo, b_rs, c, co, ldc, mr, nr, alpha, beta, load_c,
                   bias, bias_mode, res, act, p0, p1)  # fmt: skip


@njit(inline="always")
def _own_gemm(ta, packed, tc, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off,
              ldc, ep):  # fmt: skip
    """Row-major ``C = alpha * op(A) @ B + beta * C`` (B not transposed) with the micro-kernel
    (``tc``: C stored transposed, ``C[i, j]`` at ``c_off + j * ldc + i``; B packed only),
    then the epilogue ``ep`` of :func:`gemm_block_ep` in the micro-kernel's registers as each
    block is finished (``tc``: none, the caller applies it).

    Blocks of KC steps, NC columns and MC rows (the usual GEMM loop nest, A read in place).
    ``packed``: B is already in panels (:func:`pack_b`; ``b_off`` is this block's first panel
    at step 0, ``ldb`` the panels' length). Otherwise B is copied into panels of NR columns
    when more than one block of rows will read them (the copy keeps each step's columns on
    one pair of cache lines however long B's rows are), and read in place when one will (a
    matrix-vector product reads each weight once)."""
    mr_max, nr_max = block_geometry(c)
    a_packed = ta == A_PACKED
    a_rs = 1 if ta else lda
    a_cs = mr_max if a_packed else (lda if ta else 1)
    # Long rows of B put the rows of a panel on few cache sets (a 2 KB stride: 2 of L1's 64)
    # and pages; short ones (a convolution's im2col block) are read well in place.
    pack = m > mr_max and not packed and ldb > 4 * nr_max
    # One block of rows reads each step of B once: nothing to keep in L1, so the whole inner
    # dimension goes in one pass (a packed weight is then one stream, panel after panel,
    # that the micro-kernel's prefetch follows; in KC steps it jumped between panels).
    kcs = KC if m > mr_max else k
    kcb = min(kcs, k)
    ncb = min(NC, ((n + nr_max - 1) // nr_max) * nr_max)
    buf = np.empty(kcb * ncb if pack else 0, c.dtype)
    one = c.dtype.type(1)
    load0 = beta != 0
    bias_p, bias_mode, res_p, act, p0, p1 = ep
    isz = c.itemsize
    for pc in range(0, k, kcs):
        kc = min(kcs, k - pc)
        first = pc == 0
        bt = beta if first else one
        lc = load0 if first else True
        # the epilogue on the last pass over the inner dimension only
        last = pc + kc >= k
        bm = bias_mode if last else BIAS_NONE
        rp = res_p if last else 0
        ac = act if last else ACT_NONE
        for jc in range(0, n, NC):
            nc = min(NC, n - jc)
            if pack:
                for j0 in range(0, nc, nr_max):
                    nr = min(nr_max, nc - j0)
                    dst = (j0 // nr_max) * kc * nr_max
                    pack_panel(buf, dst, b, b_off + pc * ldb + jc + j0, ldb, kc, nr)
            for ic in range(0, m, MC):
                mc = min(MC, m - ic)
                # Each block of MR rows sweeps the columns (its block of A stays in L1, its
                # rows of C are written line after line), rather than each panel of B
                # sweeping the blocks of rows (a column of C blocks, MC rows ldc apart:
                # with 4 KiB rows all on one L1 set). Zen 3, one thread, alternating in one
                # process: C2's 96 x 16 x 3136 product 0.88x the time, 144 x 24 x 784 0.94,
                # 576 x 96 x 1024 0.87, 512^3 0.92; pre-packed B (MatMul weights) 0.96-1.02.
                for i0 in range(ic, ic + mc, mr_max):
                    mr = min(mr_max, ic + mc - i0)
                    if a_packed:  # panel i0 / MR, whose steps are lda long
                        ao = a_off + (i0 // mr_max) * lda * mr_max + pc * mr_max
                    else:
                        ao = a_off + i0 * a_rs + pc * a_cs
                    for j0 in range(0, nc, nr_max):
                        nr = min(nr_max, nc - j0)
                        rel = i0 * ldc + jc + j0  # the block's C (and residual) element
                        co = c_off + rel
                        bp = bias_p + (i0 if bm == BIAS_ROW else jc + j0) * isz
                        rpb = rp + rel * isz if rp else 0
                        if packed:
                            bo = b_off + ((jc + j0) // nr_max) * ldb * nr_max + pc * nr_max
                            if tc:
                                ukernel_ct(kc, a, ao, a_rs, a_cs, b, bo, nr_max, c,
                                           c_off + (jc + j0) * ldc + i0, ldc, mr, nr, alpha,
                                           bt, lc)  # fmt: skip
                            else:
                                _block(a_packed, kc, a, ao, a_rs, a_cs, b, bo, nr_max, c, co, ldc,
                                       mr, nr, alpha, bt, lc, (bp, bm, rpb, ac, p0,
                                       p1))  # fmt: skip
                        elif pack:  # B from the panels just packed
                            _block(a_packed, kc, a, ao, a_rs, a_cs, buf,
                                   (j0 // nr_max) * kc * nr_max, nr_max, c, co, ldc, mr, nr,
                                   alpha, bt, lc, (bp, bm, rpb, ac, p0, p1))  # fmt: skip
                        else:  # B read in place
                            _block(a_packed, kc, a, ao, a_rs, a_cs, b, b_off + pc * ldb + jc + j0,
                                   ldb, c, co, ldc, mr, nr, alpha, bt, lc, (bp, bm, rpb, ac, p0,
                                   p1))  # fmt: skip


@njit(inline="always")
def gemm_block(ta, tb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc, tc=0):
    """:func:`gemm_block_ep` with no epilogue."""
    t = c.dtype.type
    gemm_block_ep(ta, tb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc, tc,
                  (0, BIAS_NONE, 0, ACT_NONE, t(0), t(0)))  # fmt: skip


@njit(inline="always")
def gemm_block_ep(ta, tb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc, tc,
                  ep):  # fmt: skip
    """Row-major ``C = alpha * op(A) @ op(B) + beta * C`` on blocks of flat arrays.

    ``C`` is the ``m x n`` block at ``c[c_off:]`` with row stride ``ldc``; ``op(A)`` is ``m x
    k``: ``A`` stored ``m x k`` (row stride ``lda``), or ``k x m`` when ``ta``; likewise ``op(B)``
    is ``k x n`` from ``B`` stored ``k x n``, or ``n x k`` when ``tb``. ``beta == 0`` ignores
    what ``C`` held (NaN included), as BLAS does. ``k == 0`` is not allowed.
    ``tb == B_PACKED``: ``B`` is in the panels of :func:`pack_b`, ``b_off`` at the panel of
    the block's first column (a multiple of NR) and step 0 of the block, ``ldb`` the
    panels' length (the packed matrix's inner dimension). Likewise ``ta == A_PACKED``: ``A``
    in the panels of :func:`pack_a`, ``a_off`` at the panel of the block's first row (a
    multiple of MR) and its step 0, ``lda`` the panels' length. ``tc`` (with ``tb ==
    B_PACKED`` only): ``C`` stored transposed, ``C[i, j]`` at ``c[c_off + j * ldc + i]``.

    Products with ``B`` as stored or packed go to onnxjit's micro-kernel (:func:`_own_gemm`);
    with ``B`` transposed (columns of op(B) not contiguous, which the micro-kernel does not
    read) to BLAS.

    ``ep = (bias, bias_mode, res, act, p0, p1)``: the epilogue of :func:`.ukernel.ukernel_ep`
    for the block (``bias`` the address of its first row's or column's value, ``res`` of
    the residual's element for ``C[0, 0]``, addressed with ``ldc``; 0 where absent), applied
    as the micro-kernel stores C. Returns whether it was: not with ``tc`` or through BLAS,
    where the caller applies it (:func:`gemm_call_ep` does).
    """
    if m <= 0 or n <= 0:
        return True
    if tb == B_PACKED or not tb:
        _own_gemm(ta, tb == B_PACKED, tc, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c,
                  c_off, ldc, ep)  # fmt: skip
        return not tc
    tr = tb != B_BLAS  # B transposed (True) or as stored through BLAS
    if m == 1:
        # One row: a matrix-vector product (no operand packing). The row of op(A) is
        # contiguous either way (a transposed m == 1 operand has row stride 1); op(B)^T is,
        # in column-major terms, B's memory as it is (tr) or transposed.
        _xxgemv(_T if tr else _N, k if tr else n, n if tr else k, alpha, b, b_off, ldb, a,
                a_off, beta, c, c_off)  # fmt: skip
        return False
    # Row-major C is column-major C^T = op(B)^T op(A)^T: swap the operands, keep the flags.
    _xxgemm(_T if tr else _N, _T if ta else _N, n, m, k, alpha, b, b_off, ldb, a, a_off, lda,
            beta, c, c_off, ldc)  # fmt: skip
    return False


@njit(fma=True)
def _gemm_compiled(ta, tb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc, tc,
                   ep):  # fmt: skip
    """:func:`gemm_block_ep` as a called function, for :func:`gemm_call_ep` only (which fixes
    the argument types)."""
    return gemm_block_ep(ta, tb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off,
                         ldc, tc, ep)  # fmt: skip


@njit(inline="always")
def gemm_call(ta, tb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc, tc=0):
    """:func:`gemm_block` through one compiled copy of the micro-kernel's loop nest per
    element type, which the GEMM tiles (:func:`_tile`), the attention heads (``sdpa._head``)
    and the im2col row blocks (``conv._conv_rows_item``) share. The integers are passed on as
    run-time int64 (a bool flag, or a literal, which Numba types as ``Literal[int]``, would
    each compile another copy) and ``alpha``, ``beta`` in ``c``'s type.
    Numba's typing and lowering of the inlined loop nest was most of each caller's compile
    time: T1 (BERT hidden 256) compiled its GEMM kernel in 15.2 s and its attention kernel in
    10.6 s on the Zen 3 with a copy each, 10.8 and 6.0 s with this one (itself 3.7 s). A call
    per tile costs nothing next to the tile's product."""
    i, t = np.int64, c.dtype.type
    _gemm_compiled(i(ta), i(tb), i(m), i(n), i(k), t(alpha), a, i(a_off), i(lda), b, i(b_off),
                   i(ldb), t(beta), c, i(c_off), i(ldc), i(tc),
                   (i(0), i(BIAS_NONE), i(0), i(ACT_NONE), t(0), t(0)))  # fmt: skip


@njit(inline="always")
def gemm_call_ep(ta, tb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc, tc,
                 ep):  # fmt: skip
    """:func:`gemm_call` then ``C = act(C + bias + res)`` on the block: ``ep = (bias,
    bias_off, bias_mode, res, has_res, act, p0, p1)``, ``bias`` an array indexed from
    ``bias_off`` by the block's row (``BIAS_ROW``) or column (``BIAS_COL``), ``res`` an array
    addressed as ``c`` (element ``c_off + i * ldc + j``), ``act`` an activation code of
    :mod:`.epilogue` with its parameters. Bias, residual, Relu and Clip are applied in the
    micro-kernel's registers where the product runs there; any other activation, or the
    whole epilogue after a product that does not, as a pass over the block. With ``tc`` the
    epilogue is in terms of C as stored: ``n`` rows of ``m`` (bias by those rows or
    columns)."""
    bias, bias_off, bias_mode, res, has_res, act, p0, p1 = ep
    i, t = np.int64, c.dtype.type
    in_regs = act in (ACT_NONE, ACT_RELU, ACT_CLIP)
    isz = c.itemsize
    bias_p = i(bias.ctypes.data) + i(bias_off) * isz if bias_mode != BIAS_NONE else i(0)
    res_p = i(res.ctypes.data) + i(c_off) * isz if has_res else i(0)
    kernel_ep = (bias_p, i(bias_mode), res_p, i(act if in_regs else ACT_NONE), t(p0), t(p1))
    done = _gemm_compiled(i(ta), i(tb), i(m), i(n), i(k), t(alpha), a, i(a_off), i(lda), b,
                          i(b_off), i(ldb), t(beta), c, i(c_off), i(ldc), i(tc),
                          kernel_ep)  # fmt: skip
    if not done or not in_regs:  # what the micro-kernel did not apply
        rows, cols = (n, m) if tc else (m, n)
        block_epilogue(c, c_off, ldc, rows, cols, bias, bias_off,
                       BIAS_NONE if done else bias_mode, res, has_res and not done, act, p0,
                       p1)  # fmt: skip


# Epilogue bias modes: BIAS_NONE, BIAS_COL and BIAS_ROW (imported from .ukernel above).


@njit(inline="always")
def _tile_counts(m, n, tm, tn):
    return (m + tm - 1) // tm, (n + tn - 1) // tn


@njit(inline="always")
def _tile_at(m, n, tm, tn, t):
    """Where tile ``t`` of a batch of ``m x n`` products in ``tm x tn`` tiles lies (tiles
    numbered batch-major, then rows, then columns): ``(matrix, first row, first column, rows,
    columns)``."""
    gm, gn = _tile_counts(m, n, tm, tn)
    per = gm * gn
    p = t // per
    r = t - p * per
    i = r // gn
    j = r - i * gn
    r0 = i * tm
    c0 = j * tn
    return p, r0, c0, min(tm, m - r0), min(tn, n - c0)


@njit(fma=True)
def block_epilogue(c, c_off, ldc, rows, cols, bias, bias_off, bias_mode, res, has_res, act, p0,
                   p1):  # fmt: skip
    """``act(C + bias + residual)`` in place on the ``rows x cols`` block of ``c`` at ``c_off``
    (row stride ``ldc``; ``bias`` indexed from ``bias_off`` by row or column, ``res``
    addressed as ``c``), one row at a time while the product left it in cache; a block of
    whole rows is one run of memory, whose activation is one call (a call per row cost more
    than a short row's loop). A called function, not inlined: each copy of its loops in a
    GEMM kernel cost seconds of compile time."""
    whole = cols == ldc
    for r in range(rows):
        off = c_off + r * ldc
        v = c[off : off + cols]
        if has_res:
            rv = res[off : off + cols]
            if bias_mode == BIAS_COL:
                bv = bias[bias_off : bias_off + cols]
                for j in range(cols):
                    v[j] = v[j] + bv[j] + rv[j]
            elif bias_mode == BIAS_ROW:
                b = bias[bias_off + r]
                for j in range(cols):
                    v[j] = v[j] + b + rv[j]
            else:
                for j in range(cols):
                    v[j] = v[j] + rv[j]
        elif bias_mode == BIAS_COL:
            bv = bias[bias_off : bias_off + cols]
            for j in range(cols):
                v[j] = v[j] + bv[j]
        elif bias_mode == BIAS_ROW:
            b = bias[bias_off + r]
            for j in range(cols):
                v[j] = v[j] + b
        if not whole and act != ACT_NONE:
            activate(v, act, p0, p1)
    if whole and act != ACT_NONE:
        activate(c[c_off : c_off + rows * ldc], act, p0, p1)


@njit(inline="always")
def _tile(m, n, k, a, sa, b, sb, c, ta, tb, alpha, beta, tm, tn, t, ep, tk):
    """Tile ``t`` of the batched product (tiles numbered batch-major, then rows, then cols),
    followed by the epilogue ``ep = (bias, bias_mode, res, has_res, act, p0, p1)``. The
    inner dimension goes in chunks of ``tk`` (one BLAS call each, the later ones adding to
    the tile: ``tk >= k`` is one call)."""
    p, r0, c0, rows, cols = _tile_at(m, n, tm, tn, t)
    bias, bias_mode, res, has_res, act, p0, p1 = ep
    # the tile's epilogue: bias by its rows or columns, residual addressed as c
    tep = (bias, r0 if bias_mode == BIAS_ROW else c0, bias_mode, res, has_res, act, p0, p1)
    if ta == A_PANELS_T:
        _tile_transposed(n, k, a, p * sa, b, p * sb, c, p * m * n, r0, rows, c0, cols, alpha,
                         beta, tk, tep)  # fmt: skip
    else:
        _tile_direct(m, n, k, a, sa, b, sb, c, ta, tb, alpha, beta, tk, p, r0, c0, rows, cols,
                     tep)  # fmt: skip


@njit(inline="always")
def chunk_epilogue(ep, last):
    """The epilogue ``ep`` (:func:`gemm_call_ep`'s) for one chunk of a tile's inner
    dimension: all of it with the last chunk, none before."""
    bias, bias_off, bias_mode, res, has_res, act, p0, p1 = ep
    return (bias, bias_off, bias_mode if last else BIAS_NONE, res, has_res and last,
            act if last else ACT_NONE, p0, p1)  # fmt: skip


@njit(inline="always")
def _tile_transposed(n, k, a, a_base, b, b_base, c, c_base, r0, rows, c0, cols, alpha, beta, tk,
                     ep):  # fmt: skip
    """A tile of ``c = alpha * A @ B + beta * c`` with A in the transposed panels of
    ``ta == A_PANELS_T`` (``r0`` a multiple of NR) and B row-major, as the product ``B^T
    A^T`` (the tile's columns in the micro-kernel's rows) stored transposed into the tile,
    and its epilogue ``ep`` (:func:`gemm_call_ep`'s) with the last chunk of the inner
    dimension."""
    nr_max = block_geometry(c)[1]
    one = c.dtype.type(1)
    k0 = 0
    while True:
        kk = min(tk, k - k0)
        gemm_call_ep(1, B_PACKED, cols, rows, kk, alpha, b, b_base + k0 * n + c0, n, a,
                     a_base + (r0 // nr_max) * k * nr_max + k0 * nr_max, k,
                     beta if k0 == 0 else one, c, c_base + r0 * n + c0, n, 1,
                     chunk_epilogue(ep, k0 + kk >= k))  # fmt: skip
        k0 += tk
        if k0 >= k:
            break


@njit(inline="always")
def _tile_direct(m, n, k, a, sa, b, sb, c, ta, tb, alpha, beta, tk, p, r0, c0, rows, cols, ep):
    """A tile of the batched product with the operands as :func:`gemm_block` takes them,
    and its epilogue ``ep`` (:func:`gemm_call_ep`'s) with the last chunk of the inner
    dimension."""
    a_base = p * sa
    b_base = p * sb
    c_base = p * m * n
    lda = m if ta != 0 and ta != A_PACKED else k
    a_off = a_base + (r0 if ta != 0 and ta != A_PACKED else r0 * k)
    # packed: panel c0 / NR of k * NR elements, c0 a multiple of NR (tn is)
    b_tr = tb != 0 and tb != B_BLAS and tb != B_PACKED  # B transposed
    b_off = b_base + (c0 * k if tb != 0 and tb != B_BLAS else c0)
    ldb = n if tb == 0 or tb == B_BLAS else k
    # offsets per inner step; a packed A's panel r0 / MR starts at r0 * k as a row-major one
    a_step = block_geometry(c)[0] if ta == A_PACKED else (m if ta else 1)
    b_step = block_geometry(c)[1] if tb == B_PACKED else (1 if b_tr else n)
    one = c.dtype.type(1)
    k0 = 0
    while True:
        kk = min(tk, k - k0)
        gemm_call_ep(ta, tb, rows, cols, kk, alpha, a, a_off + k0 * a_step, lda,
                     b, b_off + k0 * b_step, ldb, beta if k0 == 0 else one, c,
                     c_base + r0 * n + c0, n, 0, chunk_epilogue(ep, k0 + kk >= k))  # fmt: skip
        k0 += tk
        if k0 >= k:
            break


def gemm(batch, m, n, k, a, sa, b, sb, c, ta, tb, alpha, beta, ep, tm, tn):
    """``c[p] = act(alpha * op(a[p]) @ op(b[p]) + beta * c[p] + bias + res[p])`` for each of
    ``batch`` matrices, in tiles of ``tm x tn`` outputs (one BLAS call and the epilogue each),
    on the calling thread: :func:`gemm_ks` with the whole inner dimension per tile.

    ``a``, ``b``, ``c`` are flat C-contiguous arrays of row-major matrices: matrix ``p`` of
    ``a`` starts at element ``p * sa`` (``sa == 0``: one matrix shared by every ``p``), of
    ``b`` at ``p * sb``, of ``c`` at ``p * m * n``. ``op`` transposes when ``ta`` / ``tb``.
    ``ep`` is the epilogue ``(bias, bias_mode, res, has_res, act, p0, p1)``: ``bias`` per
    column or per row (``BIAS_*``), ``res`` a flat array shaped like ``c``, ``act`` an
    activation code of :mod:`onnxjit.kernels.cpu.epilogue` with its parameters.

    A Python function, not a kernel: a compiled wrapper would be one more function for Numba
    to compile, with a copy of everything it calls (4 s on the Zen 3), for one call.
    """
    gemm_ks(batch, m, n, k, a, sa, b, sb, c, ta, tb, alpha, beta, ep, tm, tn, k)


# gemm_ks_par is also the pool twin of gemm (with tk = k).
gemm_ks, gemm_ks_par = twins(
    "gemm_ks(batch, m, n, k, a, sa, b, sb, c, ta, tb, alpha, beta, ep, tm, tn, tk)",
    _tile,
    setup="gm, gn = _tile_counts(m, n, tm, tn)",
    items={"t": "batch * gm * gn"},
    fma=True,
    doc=""":func:`gemm` with the inner dimension of each tile in chunks of ``tk`` (one BLAS call
    each, accumulating; ``tk >= k``: one call): tiles that OpenBLAS multiplies without
    packing its operands when ``k`` alone is too long for that.""",
)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _ceil_div(a, b) * b


def tiles(batch: int, m: int, n: int, k: int, threads: int, itemsize: int = 4) -> tuple[int, int]:
    """Tile shape ``(tm, tn)`` splitting ``batch`` products of ``m x n`` (inner ``k``) over
    ``threads`` threads; ``tn`` is a multiple of the panel width NR (or all of ``n``), as a
    packed B operand needs.

    Whole matrices when the batch alone gives every thread several, or for one thread (the
    micro-kernel's own blocking keeps the operands in cache). A matrix-vector product
    (``m == 1``) is cut into one block of columns per thread: the caller usually claims the
    first, so each thread keeps reading the same part of the weight, which can then stay in
    its core's cache from one call to the next. Otherwise some four tiles per thread (the
    slack that evens out unequal threads), cut so that the tiles read the operands the fewest
    times: each column of tiles reads all of A's rows it spans again, each row of tiles
    all of B's columns (a product of few columns and a long inner dimension, a late
    convolution layer's, is cut across its rows: in three column tiles each thread read its
    rows of the weight three times, from memory). Columns in multiples of NR, rows of MR.
    """
    if batch >= 4 * threads or threads <= 1:
        return m, n
    mr, nr = (_MR, _NR) if itemsize == 4 else (_MR64, _NR64)
    if m == 1 and batch == 1:
        return 1, min(n, _round_up(_ceil_div(n, threads), nr))
    want = _ceil_div(4 * threads, batch)  # tiles wanted per matrix
    best = None
    for cuts in range(1, min(want, _ceil_div(n, nr)) + 1):
        tn = max(nr, _round_up(_ceil_div(n, cuts), nr))
        gn = _ceil_div(n, tn)
        tm = max(mr, _round_up(_ceil_div(m, _ceil_div(want, gn)), mr))
        gm = _ceil_div(m, tm)
        # elements read: A once per column of tiles, B once per row of tiles; then fewer
        # column cuts (tiles that share rows read them from the cache they fill)
        key = (m * k * gn + k * n * gm, gn)
        if best is None or key < best[0]:
            best = (key, min(m, tm), min(n, tn))
    return best[1], best[2]


def transposed_tiles(
    batch: int, m: int, n: int, k: int, threads: int, itemsize: int = 4
) -> tuple[int, int] | None:
    """Tile shape ``(tm, tn)`` of ``batch`` products of ``m x n`` (inner ``k``) with A in
    the transposed panels of ``ta == A_PANELS_T``, or None where that form does not pay.

    It pays for few columns that fill the micro-kernel's NR-wide blocks badly (a 1x1
    convolution of a 6x6 or 3x3 plane: 36 = 16 + 16 + 4 columns, 9 of 16), since there the
    columns become the kernel's rows, which come in blocks of MR (and of 1, 2 or 4), at the
    cost of storing the tile transposed. Each tile holds every column (``tn = n``) and a
    multiple of NR rows, some four tiles per thread, at most as many as keep the weights of
    one block of KC steps in L1 (every MR columns read them again).
    """
    if n > _TRANSPOSED_MAX_N:
        return None
    mr, nr = (_MR, _NR) if itemsize == 4 else (_MR64, _NR64)
    full, tail = divmod(n, nr)
    # a block of at most half of NR columns runs the one-vector kernel: half a full block's
    # time over a long inner dimension, about 3/4 over a short one (its fixed costs)
    narrow = nr // 2 if k >= _LONG_K else (3 * nr) // 4
    direct = full * nr + (0 if tail == 0 else nr if 2 * tail > nr else narrow)
    blocks, rest = divmod(n, mr)
    rows = [r for r in _ROW_COUNTS[itemsize] if r >= rest][0] if rest else 0
    if (blocks * mr + rows) * (_TRANSPOSE_COST if k < _LONG_K else 1.0) >= direct:
        return None
    panels = _ceil_div(m, nr)
    want = _ceil_div(4 * max(1, threads), batch)
    # the panels of A^T one block of KC steps of a tile reads for each MR columns stay in L1
    fit = max(1, _TRANSPOSED_L1 // (itemsize * min(k, KC) * nr))
    per = max(1, min(panels // want, fit))
    return min(m, per * nr), n


# Integer products through the float32 micro-kernel (MatMulInteger): the operands are integers
# stored as float32, so every partial sum of a block of at most ``kb`` steps is an integer
# below 2**24 in magnitude when the caller bounds ``kb`` by the operands' ranges, and float32
# holds it exactly whatever the order of the additions (FMA included). Each block's product
# is converted to int32 and added into the int32 output, which wraps as integer arithmetic
# does.


@njit(inline="always")
def _itile(m, n, k, a, sa, b, sb, c, tb, tm, tn, kb, buf, t):
    """Tile ``t`` of the batched integer product (numbered as :func:`_tile`'s): the inner
    dimension in blocks of ``kb`` steps, each block's float32 product (exact) written to the
    scratch ``buf`` and added into the int32 tile of ``c``."""
    p, r0, c0, rows, cols = _tile_at(m, n, tm, tn, t)
    a_off = p * sa + r0 * k
    b_off = p * sb + (c0 * k if tb == B_PACKED else c0)
    ldb = k if tb == B_PACKED else n
    b_step = block_geometry(buf)[1] if tb == B_PACKED else n
    c_base = p * m * n + r0 * n + c0
    zero = buf.dtype.type(0)
    one = buf.dtype.type(1)
    k0 = 0
    while k0 < k:
        kk = min(kb, k - k0)
        gemm_call(0, tb, rows, cols, kk, one, a, a_off + k0, k, b, b_off + k0 * b_step, ldb,
                  zero, buf, 0, cols)  # fmt: skip
        for rr in range(rows):
            co = c_base + rr * n
            bo = rr * cols
            if k0 == 0:
                for jj in range(cols):
                    c[co + jj] = np.int32(buf[bo + jj])
            else:
                for jj in range(cols):
                    c[co + jj] += np.int32(buf[bo + jj])
        k0 += kb


igemm_ks, igemm_ks_par = twins(
    "igemm_ks(batch, m, n, k, a, sa, b, sb, c, tb, tm, tn, kb)",
    _itile,
    setup=(
        "gm, gn = _tile_counts(m, n, tm, tn)",
        "buf = np.empty(min(tm, m) * min(tn, n), a.dtype)",
    ),
    items={"t": "batch * gm * gn"},
    fma=True,
    doc="""``c[p] = op(a[p]) @ op(b[p])`` in int32 for each of ``batch`` row-major products of
    ``m x n`` (inner ``k > 0``) whose operands are integers held in float32 (``a``, ``b``
    flat, C-contiguous; matrix ``p`` of ``a`` at ``p * sa``, of ``b`` at ``p * sb``, ``0``:
    shared; ``c`` flat int32). ``tb``: 0 (B as stored, ``k x n``) or ``B_PACKED`` (the panels
    of :func:`pack_b`). Tiles of ``tm x tn`` outputs, the inner dimension in blocks of ``kb``
    steps: exact when ``kb * max|a| * max|b| < 2**24``, which the caller guarantees.""",
)


# Integer products in the micro-kernel's int16-pair mode (:func:`.ukernel.ukernel_int`, x86):
# A's rows widened to int16 with their zero point subtracted, rows of an even length ``2 kp``
# (``kp`` pairs of steps, the last padded with a zero), B packed by :func:`pack_b_pairs`.
# ``INT_PAIRS``: ``(MR, NR)`` of that kernel, or None where the target has none (then
# :func:`igemm_ks` multiplies in exact float32 blocks).
INT_PAIRS = int_geometry()
_IMR, _INR = INT_PAIRS if INT_PAIRS is not None else (1, 1)


@njit
def pack_b_pairs_into(b, zp, k, n, out):
    """The row-major ``k x n`` 8-bit matrix flat in ``b``, minus ``zp`` (one value, or one
    per column), as int16 panels of NR columns for :func:`.ukernel.ukernel_int`: panel ``j``
    holds columns ``j * NR ..`` as ``kp = ceil(k / 2)`` rows of ``[NR][2]`` (the pair of
    steps ``2q, 2q + 1`` of each column side by side), the panels one after another, written
    over all of ``out`` (``ceil(n / NR) * kp * 2 NR`` values; the padding columns and the
    odd step past ``k`` are zero)."""
    nr_max = _INR
    kp = (k + 1) // 2
    row = 2 * nr_max
    panels = (n + nr_max - 1) // nr_max
    one = zp.size == 1
    out[:] = 0
    for j in range(panels):
        c0 = j * nr_max
        cols = min(nr_max, n - c0)
        base = j * kp * row
        for p in range(k):
            src = p * n + c0
            dst = base + (p // 2) * row + (p & 1)
            for jj in range(cols):
                z = np.int16(zp[0] if one else zp[c0 + jj])
                out[dst + 2 * jj] = np.int16(b[src + jj]) - z


def pack_b_pairs(b: np.ndarray, zp: np.ndarray, k: int, n: int) -> np.ndarray:
    """:func:`pack_b_pairs_into` into a new int16 array (a constant weight, packed once)."""
    out = np.empty(((n + _INR - 1) // _INR) * ((k + 1) // 2) * 2 * _INR, np.int16)
    pack_b_pairs_into(b, zp, k, n, out)
    return out


def pairs_b_size(k: int, n: int) -> int:
    """Elements of :func:`pack_b_pairs`'s layout of a ``k x n`` matrix."""
    return ((n + _INR - 1) // _INR) * ((k + 1) // 2) * 2 * _INR


@njit
def _igemm_pairs_block(m, n, kp, a, a_off, lda, b, b_off, c, c_off, ldc):
    """``C = A @ B`` in int32 for the ``m x n`` block at ``c[c_off:]`` (row stride ``ldc``):
    A int16 rows of ``2 kp`` steps from ``a_off`` (row stride ``lda``), B the panels of
    :func:`pack_b_pairs` from the block's first panel ``b_off``. The loop nest of
    :func:`_own_gemm` for a packed B (KC pairs per pass while several blocks of rows reuse a
    panel from L1, later passes adding to C); one compiled copy, called per tile."""
    mr_max, nr_max = _IMR, _INR
    panel = kp * 2 * nr_max
    kcs = KC if m > mr_max else kp
    for pc in range(0, kp, kcs):
        kc = min(kcs, kp - pc)
        lc = pc > 0
        for jc in range(0, n, NC):
            nc = min(NC, n - jc)
            for ic in range(0, m, MC):
                mc = min(MC, m - ic)
                for i0 in range(ic, ic + mc, mr_max):
                    mr = min(mr_max, ic + mc - i0)
                    ao = a_off + i0 * lda + 2 * pc
                    for j0 in range(0, nc, nr_max):
                        nr = min(nr_max, nc - j0)
                        bo = b_off + ((jc + j0) // nr_max) * panel + pc * 2 * nr_max
                        co = c_off + i0 * ldc + jc + j0
                        ukernel_int(kc, a, ao, lda, b, bo, c, co, ldc, mr, nr, lc)


@njit(inline="always")
def _ptile(m, n, kp, a, b, c, tm, tn, t):
    """Tile ``t`` of the int16-pair product (numbered as :func:`_tile_at`'s, one matrix);
    ``tn`` a multiple of NR or all of ``n``."""
    _p, r0, c0, rows, cols = _tile_at(m, n, tm, tn, t)
    i = np.int64
    _igemm_pairs_block(i(rows), i(cols), i(kp), a, i(r0 * 2 * kp), i(2 * kp), b,
                       i((c0 // _INR) * kp * 2 * _INR), c, i(r0 * n + c0), i(n))  # fmt: skip


igemm_pairs, igemm_pairs_par = twins(
    "igemm_pairs(m, n, kp, a, b, c, tm, tn)",
    _ptile,
    setup="gm, gn = _tile_counts(m, n, tm, tn)",
    items={"t": "gm * gn"},
    doc="""``c = a @ b`` in int32 (exact, wrapping as int32 arithmetic does) for the ``m x n``
    product whose A is ``m`` int16 rows of ``2 kp`` steps flat in ``a`` (8-bit values minus
    their zero points, an odd inner length padded with a zero) and whose B is flat in ``b``
    in the panels of :func:`pack_b_pairs`; ``c`` flat int32, row-major. Tiles of ``tm x tn``
    outputs (:func:`tiles`, ``tn`` a multiple of NR or ``n``), each on the micro-kernel's
    int16-pair mode.""",
)
