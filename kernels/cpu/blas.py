"""Matrix products from Numba code: BLAS ``?gemm`` on row-major blocks, single-threaded.

:func:`gemm_block` calls the BLAS library Numba itself links to for ``np.dot`` (SciPy's, through
Numba's ``numba_xxgemm`` helper, whose address is resolved when the process runs, so kernels
calling it are cached on disk like any other) on sub-blocks of row-major operands given as
flat arrays, element offsets and row strides. Numba's own ``np.dot`` takes whole contiguous
matrices only (a column block would be copied first).

The pool kernels below split one product into tiles, one BLAS call each, claimed by the pool's
threads (:mod:`onnxjit.pool`): the BLAS library runs single-threaded inside onnxjit's runs, so
the product's threads are the pool's and never compete with a second pool for the cores.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.linalg import ensure_blas, get_blas_kind

from .._jit import njit, pjit
from ..chunks import claim
from .epilogue import ACT_NONE, activate

_ll_char = ir.IntType(8)
_ll_intp = ir.IntType(64)
_ll_voidp = ir.IntType(8).as_pointer()


@intrinsic
def _xxgemm(
    typingctx, transa, transb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc
):
    """Column-major ``C = alpha * op(A) @ op(B) + beta * C`` (Fortran BLAS semantics) on the
    blocks of the flat arrays ``a``, ``b``, ``c`` starting at the element offsets."""
    for arr in (a, b, c):
        if not isinstance(arr, types.Array) or arr.dtype != a.dtype:
            raise TypeError("gemm operands must be arrays of one float type")
    dtype = a.dtype
    if dtype not in (types.float32, types.float64):
        raise TypeError(f"gemm takes float32 or float64, got {dtype}")
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
    for arr in (a, x, y):
        if not isinstance(arr, types.Array) or arr.dtype != a.dtype:
            raise TypeError("gemv operands must be arrays of one float type")
    dtype = a.dtype
    if dtype not in (types.float32, types.float64):
        raise TypeError(f"gemv takes float32 or float64, got {dtype}")
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


@njit(inline="always")
def gemm_block(ta, tb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
    """Row-major ``C = alpha * op(A) @ op(B) + beta * C`` on blocks of flat arrays.

    ``C`` is the ``m x n`` block at ``c[c_off:]`` with row stride ``ldc``; ``op(A)`` is ``m x
    k``: ``A`` stored ``m x k`` (row stride ``lda``), or ``k x m`` when ``ta``; likewise ``op(B)``
    is ``k x n`` from ``B`` stored ``k x n``, or ``n x k`` when ``tb``. ``beta == 0`` ignores
    what ``C`` held (NaN included), as BLAS does.
    """
    if m <= 0 or n <= 0:
        return
    if m == 1:
        # One row: a matrix-vector product (no operand packing). The row of op(A) is
        # contiguous either way (a transposed m == 1 operand has row stride 1); op(B)^T is,
        # in column-major terms, B's memory as it is (tb) or transposed (not tb).
        _xxgemv(_N if not tb else _T, n if not tb else k, k if not tb else n, alpha, b,
                b_off, ldb, a, a_off, beta, c, c_off)  # fmt: skip
        return
    # Row-major C is column-major C^T = op(B)^T op(A)^T: swap the operands, keep the flags.
    _xxgemm(_T if tb else _N, _T if ta else _N, n, m, k, alpha, b, b_off, ldb, a, a_off, lda,
            beta, c, c_off, ldc)  # fmt: skip


# Epilogue bias modes
BIAS_NONE = 0
BIAS_COL = 1  # bias[j] added to column j (a fully connected layer: one bias per output feature)
BIAS_ROW = 2  # bias[i] added to row i of each matrix (a convolution: one bias per channel)


@njit(inline="always")
def _tile_counts(m, n, tm, tn):
    return (m + tm - 1) // tm, (n + tn - 1) // tn


@njit(inline="always")
def _epilogue(c, c_base, n, r0, rows, c0, cols, bias, bias_mode, res, has_res, act, p0, p1):
    """``act(C + bias + residual)`` in place on a ``rows x cols`` tile, one row at a time
    while the BLAS call left it in cache."""
    for r in range(rows):
        off = c_base + (r0 + r) * n + c0
        v = c[off : off + cols]
        if has_res:
            rv = res[off : off + cols]
            if bias_mode == BIAS_COL:
                bv = bias[c0 : c0 + cols]
                for j in range(cols):
                    v[j] = v[j] + bv[j] + rv[j]
            elif bias_mode == BIAS_ROW:
                b = bias[r0 + r]
                for j in range(cols):
                    v[j] = v[j] + b + rv[j]
            else:
                for j in range(cols):
                    v[j] = v[j] + rv[j]
        elif bias_mode == BIAS_COL:
            bv = bias[c0 : c0 + cols]
            for j in range(cols):
                v[j] = v[j] + bv[j]
        elif bias_mode == BIAS_ROW:
            b = bias[r0 + r]
            for j in range(cols):
                v[j] = v[j] + b
        activate(v, act, p0, p1)


@njit(inline="always")
def _tile(m, n, k, a, sa, b, sb, c, ta, tb, alpha, beta, tm, tn, t, ep, tk):
    """Tile ``t`` of the batched product (tiles numbered batch-major, then rows, then cols),
    followed by the epilogue ``ep = (bias, bias_mode, res, has_res, act, p0, p1)``. The
    inner dimension goes in chunks of ``tk`` (one BLAS call each, the later ones adding to
    the tile: ``tk >= k`` is one call)."""
    gm, gn = _tile_counts(m, n, tm, tn)
    per = gm * gn
    p = t // per
    r = t - p * per
    i = r // gn
    j = r - i * gn
    r0 = i * tm
    c0 = j * tn
    rows = min(tm, m - r0)
    cols = min(tn, n - c0)
    a_base = p * sa
    b_base = p * sb
    c_base = p * m * n
    lda = m if ta else k
    ldb = k if tb else n
    a_off = a_base + (r0 if ta else r0 * k)
    b_off = b_base + (c0 * k if tb else c0)
    if tk >= k:
        gemm_block(ta, tb, rows, cols, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c,
                   c_base + r0 * n + c0, n)  # fmt: skip
    else:
        one = c.dtype.type(1)
        for k0 in range(0, k, tk):
            kk = min(tk, k - k0)
            gemm_block(ta, tb, rows, cols, kk, alpha, a, a_off + (k0 * m if ta else k0), lda,
                       b, b_off + (k0 if tb else k0 * n), ldb, beta if k0 == 0 else one, c,
                       c_base + r0 * n + c0, n)  # fmt: skip
    bias, bias_mode, res, has_res, act, p0, p1 = ep
    if bias_mode != BIAS_NONE or has_res or act != ACT_NONE:
        _epilogue(c, c_base, n, r0, rows, c0, cols, bias, bias_mode, res, has_res, act, p0, p1)


@njit(fma=True)
def gemm(batch, m, n, k, a, sa, b, sb, c, ta, tb, alpha, beta, ep, tm, tn):
    """``c[p] = act(alpha * op(a[p]) @ op(b[p]) + beta * c[p] + bias + res[p])`` for each of
    ``batch`` matrices, in tiles of ``tm x tn`` outputs (one BLAS call and the epilogue each),
    on the calling thread.

    ``a``, ``b``, ``c`` are flat C-contiguous arrays of row-major matrices: matrix ``p`` of
    ``a`` starts at element ``p * sa`` (``sa == 0``: one matrix shared by every ``p``), of
    ``b`` at ``p * sb``, of ``c`` at ``p * m * n``. ``op`` transposes when ``ta`` / ``tb``.
    ``ep`` is the epilogue ``(bias, bias_mode, res, has_res, act, p0, p1)``: ``bias`` per
    column or per row (``BIAS_*``), ``res`` a flat array shaped like ``c``, ``act`` an
    activation code of :mod:`onnxjit.kernels.cpu.epilogue` with its parameters.
    """
    gemm_ks(batch, m, n, k, a, sa, b, sb, c, ta, tb, alpha, beta, ep, tm, tn, k)


@pjit(fma=True)
def gemm_par(ctl, batch, m, n, k, a, sa, b, sb, c, ta, tb, alpha, beta, ep, tm, tn):
    """Pool twin of :func:`gemm`: tiles of ``tm x tn`` outputs, one BLAS call and its
    epilogue each."""
    gemm_ks_par(ctl, batch, m, n, k, a, sa, b, sb, c, ta, tb, alpha, beta, ep, tm, tn, k)


@njit(fma=True)
def gemm_ks(batch, m, n, k, a, sa, b, sb, c, ta, tb, alpha, beta, ep, tm, tn, tk):
    """:func:`gemm` with the inner dimension of each tile in chunks of ``tk`` (one BLAS call
    each, accumulating): tiles that OpenBLAS multiplies without packing its operands when
    ``k`` alone is too long for that."""
    gm, gn = _tile_counts(m, n, tm, tn)
    for t in range(batch * gm * gn):
        _tile(m, n, k, a, sa, b, sb, c, ta, tb, alpha, beta, tm, tn, t, ep, tk)


@pjit(fma=True)
def gemm_ks_par(ctl, batch, m, n, k, a, sa, b, sb, c, ta, tb, alpha, beta, ep, tm, tn, tk):
    """Pool twin of :func:`gemm_ks`."""
    gm, gn = _tile_counts(m, n, tm, tn)
    n_items = batch * gm * gn
    while True:
        chunk_lo, chunk_hi = claim(ctl, n_items)
        if chunk_lo >= chunk_hi:
            break
        for t in range(chunk_lo, chunk_hi):
            _tile(m, n, k, a, sa, b, sb, c, ta, tb, alpha, beta, tm, tn, t, ep, tk)


# OpenBLAS multiplies blocks of M*N*K up to about this without packing its operands (its
# small-matrix kernels); such tiles ran at 210-225 GFLOP/s on two threads of the development
# VM against 130-170 for packed tiles (128x256x768: 225 us against 290 us; 128x1024x256 in
# 8x64 tiles: 300 us against 376 us) as long as k <= ~2000 (a tile then has 8 rows or more).
SMALL_GEMM = 1_000_000


def tiles(batch: int, m: int, n: int, k: int, threads: int) -> tuple[int, int]:
    """Tile shape ``(tm, tn)`` splitting ``batch`` products of ``m x n`` (inner ``k``) over
    ``threads`` threads.

    Whole matrices when the batch alone gives every thread several. A matrix-vector product
    (``m == 1``) is cut into one block of columns per thread: the caller usually claims the
    first, so each thread keeps reading the same part of the weight, which can then stay in
    its core's cache from one call to the next. Otherwise tiles of 64 columns and 32, 16 or 8
    rows, the largest that BLAS multiplies without packing (``tm * tn * k <= SMALL_GEMM``);
    when ``k`` is too large for those, the longer side cut into blocks of at least 64 rows or
    columns (packing costs once per call: smaller packed tiles repack more than they balance).
    Measured on OpenBLAS; other BLAS libraries are correct with any tile.
    """
    if batch >= 4 * threads:
        return m, n
    if m == 1 and batch == 1:
        tn = -(-n // threads)
        return 1, min(n, -(-tn // 16) * 16)
    tn = min(64, n)
    for tm in (32, 16, 8):
        t_m = min(tm, m)
        if t_m * tn * k <= SMALL_GEMM:
            return t_m, tn
    per = -(-4 * threads // batch)  # tiles wanted per matrix
    if n >= m:
        tn = max(64, -(-n // per))
        tn = -(-tn // 16) * 16
        return m, min(n, tn)
    tm = max(64, -(-m // per))
    return min(m, tm), n
