"""The GEMM micro-kernel (kernels/cpu/ukernel.py) and the blocked products built on it
(kernels/cpu/blas.py), against numpy's float64 matmul as the oracle.

Sizes cover every row count of the register block (1..MR), column counts around the vector
width and the panel width (masked and full loads), inner dimensions around the step-set
unroll and the KC block, and every operand layout the callers use (A row-major, transposed
and packed; B row-major, packed, and row-major with long rows, which is copied into panels).
"""

from __future__ import annotations

import numpy as np
import pytest

from onnxjit.kernels._jit import njit
from onnxjit.kernels.cpu import blas as kblas
from onnxjit.kernels.cpu.ukernel import (
    geometry,
    int_geometry,
    ukernel,
    ukernel_ct,
    ukernel_int,
    ukernel_tab,
)

DTYPES = [np.float32, np.float64]


def _tol(dtype, k):
    # float32 sums of k products of N(0, 1) values: error grows like sqrt(k) ulps of the sum
    return (3e-5 if dtype == np.float32 else 1e-12) * max(1.0, np.sqrt(k))


@njit
def _call_ukernel(
    kc, a, a_off, a_rs, a_cs, b, b_off, b_rs, c, c_off, c_rs, mr, nr, alpha, beta, lc
):
    ukernel(kc, a, a_off, a_rs, a_cs, b, b_off, b_rs, c, c_off, c_rs, mr, nr, alpha, beta, lc)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ukernel_every_block_shape(dtype):
    """Every (mr, nr) the kernel takes, with strided A and B inside larger arrays: the block
    is right and nothing outside it is written."""
    mr_max, nr_max = geometry(np.dtype(dtype).itemsize)
    lanes = nr_max // 2
    rng = np.random.default_rng(1)
    kc = 37
    lda, ldb, ldc = 50, nr_max + 7, nr_max + 5
    a = rng.standard_normal(mr_max * lda + 3).astype(dtype)
    b = rng.standard_normal(kc * ldb + 3).astype(dtype)
    cols = sorted({1, 2, lanes - 1, lanes, lanes + 1, nr_max - 1, nr_max})
    for mr in range(1, mr_max + 1):
        for nr in cols:
            c = np.full((mr_max + 1) * ldc, np.nan, dtype)
            _call_ukernel(
                kc, a, 2, lda, 1, b, 1, ldb, c, 3, ldc, mr, nr, dtype(1.5), dtype(0), False
            )
            am = a[2 : 2 + mr * lda].reshape(mr, lda)[:, :kc].astype(np.float64)
            bm = b[1 : 1 + kc * ldb].reshape(kc, ldb)[:, :nr].astype(np.float64)
            want = 1.5 * am @ bm
            got = c[3 : 3 + mr * ldc].reshape(mr, ldc)[:, :nr]
            np.testing.assert_allclose(got, want, rtol=0, atol=_tol(dtype, kc) * 4)
            mask = np.ones_like(c, bool)
            for i in range(mr):
                mask[3 + i * ldc : 3 + i * ldc + nr] = False
            assert np.isnan(c[mask]).all(), (mr, nr)


@njit
def _call_ukernel_ct(
    kc, a, a_off, a_rs, a_cs, b, b_off, b_rs, c, c_off, c_rs, mr, nr, alpha, beta, lc
):
    ukernel_ct(kc, a, a_off, a_rs, a_cs, b, b_off, b_rs, c, c_off, c_rs, mr, nr, alpha, beta, lc)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("load_c", [False, True])
def test_ukernel_ct_every_block_shape(dtype, load_c):
    """The kernel storing C transposed (C[i, j] at c_off + j * c_rs + i): every (mr, nr),
    A read transposed from a larger array, with and without beta * C; nothing outside the
    block is written."""
    mr_max, nr_max = geometry(np.dtype(dtype).itemsize)
    lanes = nr_max // 2
    rng = np.random.default_rng(5)
    kc, lda, ldb, ldc = 23, mr_max + 4, nr_max + 3, mr_max + 2
    a = rng.standard_normal(kc * lda + 5).astype(dtype)  # A[i, p] at 1 + p * lda + i
    b = rng.standard_normal(kc * ldb + 3).astype(dtype)
    cols = sorted({1, 2, lanes - 1, lanes, lanes + 1, nr_max - 1, nr_max})
    for mr in range(1, mr_max + 1):
        for nr in cols:
            c = rng.standard_normal((nr_max + 1) * ldc).astype(dtype)
            before = c.copy()
            _call_ukernel_ct(
                kc, a, 1, 1, lda, b, 2, ldb, c, 3, ldc, mr, nr, dtype(1.5), dtype(-0.5), load_c
            )
            am = a[1 : 1 + kc * lda].reshape(kc, lda)[:, :mr].T.astype(np.float64)
            bm = b[2 : 2 + kc * ldb].reshape(kc, ldb)[:, :nr].astype(np.float64)
            want = 1.5 * am @ bm  # (mr, nr), stored as its transpose
            old = before[3 : 3 + nr * ldc].reshape(nr, ldc)[:, :mr].T
            if load_c:
                want = want - 0.5 * old
            got = c[3 : 3 + nr * ldc].reshape(nr, ldc)[:, :mr].T
            np.testing.assert_allclose(got, want, rtol=0, atol=_tol(dtype, kc) * 4)
            mask = np.ones_like(c, bool)
            for j in range(nr):
                mask[3 + j * ldc : 3 + j * ldc + mr] = False
            np.testing.assert_array_equal(c[mask], before[mask])


@njit
def _call_ukernel_tab(kc, a, a_off, b, b_off, tab, t_off, c, c_off, c_rs, mr, nr, alpha, beta, lc):
    ukernel_tab(kc, a, a_off, b, b_off, tab, t_off, c, c_off, c_rs, mr, nr, alpha, beta, lc)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ukernel_tab_every_block_shape(dtype):
    """The tabled kernel, A in zero-padded panels (pack_a) and B's rows anywhere in a flat
    array through a table (overlapping, out of order): every (mr, nr) it takes, from the
    second panel of A, with and without beta * C; nothing outside the block is written."""
    mr_max, nr_max = geometry(np.dtype(dtype).itemsize)
    lanes = nr_max // 2
    rng = np.random.default_rng(2)
    kc, m = 29, 2 * mr_max + 1
    am = rng.standard_normal((m, kc)).astype(dtype)
    ap = kblas.pack_a(am.ravel(), m, kc)
    flat = rng.standard_normal(kc * 3 + nr_max + 10).astype(dtype)
    tab = np.concatenate([[0, 2], rng.permutation(3 * kc)[: kc - 2]]).astype(np.int64) + 1
    ldc = nr_max + 3
    cols = sorted({1, 2, lanes - 1, lanes, lanes + 1, nr_max - 1, nr_max})
    bm = np.stack([flat[4 + t : 4 + t + nr_max] for t in tab]).astype(np.float64)
    for mr in range(1, mr_max + 1):
        for nr in cols:
            for lc in (False, True):
                c = rng.standard_normal((mr_max + 1) * ldc).astype(dtype)
                c[:2] = np.nan
                before = c.copy()
                # panel 1: rows mr_max .. mr_max + mr - 1 of am
                _call_ukernel_tab(kc, ap, kc * mr_max, flat, 4, tab, 0, c, 2, ldc, mr, nr,
                                  dtype(1.5), dtype(0.5), lc)  # fmt: skip
                want = 1.5 * am[mr_max : mr_max + mr].astype(np.float64) @ bm[:, :nr]
                if lc:
                    want = want + 0.5 * before[2 : 2 + mr * ldc].reshape(mr, ldc)[:, :nr]
                got = c[2 : 2 + mr * ldc].reshape(mr, ldc)[:, :nr]
                np.testing.assert_allclose(got, want, rtol=0, atol=_tol(dtype, kc) * 4)
                mask = np.ones_like(c, bool)
                for i in range(mr):
                    mask[2 + i * ldc : 2 + i * ldc + nr] = False
                np.testing.assert_array_equal(c[mask], before[mask])


@pytest.mark.parametrize("dtype", DTYPES)
def test_ukernel_accumulates_with_beta(dtype):
    """load_c: C = alpha * A @ B + beta * C (a NaN in C with load_c false is ignored)."""
    mr_max, nr_max = geometry(np.dtype(dtype).itemsize)
    rng = np.random.default_rng(2)
    for kc in (1, 2, 3, 5, 8, 9):
        a = rng.standard_normal((mr_max, kc)).astype(dtype)
        b = rng.standard_normal((kc, nr_max)).astype(dtype)
        c0 = rng.standard_normal((mr_max, nr_max)).astype(dtype)
        c = c0.copy()
        _call_ukernel(kc, a.reshape(-1), 0, kc, 1, b.reshape(-1), 0, nr_max, c.reshape(-1), 0,
                      nr_max, mr_max, nr_max, dtype(2), dtype(-0.5), True)  # fmt: skip
        want = 2 * a.astype(np.float64) @ b - 0.5 * c0
        np.testing.assert_allclose(c, want, rtol=0, atol=_tol(dtype, kc) * 4)


@njit
def _call_ukernel_int(kp, a, a_off, a_rs, b, b_off, c, c_off, c_rs, mr, nr, lc):
    ukernel_int(kp, a, a_off, a_rs, b, b_off, c, c_off, c_rs, mr, nr, lc)


@pytest.mark.skipif(int_geometry() is None, reason="the int16-pair mode is x86 only (pmaddwd)")
@pytest.mark.parametrize("load_c", [False, True])
def test_ukernel_int_every_block_shape(load_c):
    """The int16-pair mode, every (mr, nr) it takes, A's rows inside a larger array and B in
    the panels of pack_b_pairs (a panel of a wider matrix): exact int32 results, C added to
    with load_c, nothing outside the block written."""
    mr_max, nr_max = int_geometry()
    lanes = nr_max // 2
    rng = np.random.default_rng(3)
    k, n = 41, 2 * nr_max + 3  # odd k: the last pair's second step is padding
    kp = (k + 1) // 2
    lda, ldc = 2 * kp + 6, nr_max + 5
    a = rng.integers(-255, 256, mr_max * lda + 4).astype(np.int16)
    for i in range(mr_max):  # the padded step is zero, as shift_rows writes it
        a[4 + i * lda + k] = 0
    b8 = rng.integers(0, 256, k * n).astype(np.uint8)
    zp = rng.integers(0, 256, n).astype(np.uint8)
    bp = kblas.pack_b_pairs(b8, zp, k, n)
    bm = b8.reshape(k, n).astype(np.int64) - zp.astype(np.int64)
    panel = kp * 2 * nr_max
    cols = sorted({1, 2, lanes - 1, lanes, lanes + 1, nr_max - 1, nr_max})
    for mr in range(1, mr_max + 1):
        for nr in cols:
            c = rng.integers(-(2**31), 2**31, (mr_max + 1) * ldc).astype(np.int32)
            before = c.copy()
            _call_ukernel_int(kp, a, 4, lda, bp, panel, c, 3, ldc, mr, nr, load_c)
            am = a[4 : 4 + mr * lda].reshape(mr, lda)[:, :k].astype(np.int64)
            want = am @ bm[:, nr_max : nr_max + nr]
            got = c[3 : 3 + mr * ldc].reshape(mr, ldc)[:, :nr]
            if load_c:
                want = want + before[3 : 3 + mr * ldc].reshape(mr, ldc)[:, :nr]
            np.testing.assert_array_equal(got, want.astype(np.int32))  # wrapping as int32
            mask = np.ones_like(c, bool)
            for i in range(mr):
                mask[3 + i * ldc : 3 + i * ldc + nr] = False
            np.testing.assert_array_equal(c[mask], before[mask])


@njit
def _gemm_block(ta, tb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
    kblas.gemm_block(ta, tb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc)


SHAPES = [(1, 1, 1), (1, 300, 70), (5, 3, 33), (13, 300, 17), (40, 257, 65), (97, 520, 200),
          (12, 1030, 32)]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["rowmajor", "a_transposed", "a_packed", "b_packed", "both"])
def test_gemm_block_layouts(dtype, layout):
    """gemm_block through the micro-kernel for each operand layout, with beta (C read) and
    without (C's NaN ignored); inner dimensions over KC exercise the K blocking."""
    rng = np.random.default_rng(3)
    for m, k, n in SHAPES:
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        ta, tb = False, False
        af, lda = a.reshape(-1), k
        bf, ldb = b.reshape(-1), n
        if layout == "a_transposed":
            ta, af, lda = True, np.ascontiguousarray(a.T).reshape(-1), m
        if layout in ("a_packed", "both"):
            ta, af, lda = kblas.A_PACKED, kblas.pack_a(a.reshape(-1), m, k), k
        if layout in ("b_packed", "both"):
            tb, bf, ldb = kblas.B_PACKED, kblas.pack_b(b.reshape(-1), k, n), k
        want = a.astype(np.float64) @ b
        c = np.full(m * n, np.nan, dtype)
        _gemm_block(ta, tb, m, n, k, dtype(1), af, 0, lda, bf, 0, ldb, dtype(0), c, 0, n)
        np.testing.assert_allclose(c.reshape(m, n), want, rtol=0, atol=_tol(dtype, k) * 4)
        c0 = rng.standard_normal(m * n).astype(dtype)
        c = c0.copy()
        _gemm_block(ta, tb, m, n, k, dtype(0.5), af, 0, lda, bf, 0, ldb, dtype(2), c, 0, n)
        want2 = 0.5 * want + 2 * c0.reshape(m, n)
        np.testing.assert_allclose(c.reshape(m, n), want2, rtol=0, atol=_tol(dtype, k) * 4)


@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_tiles_packed_and_blas_modes(threads):
    """The tiled kernels with a packed weight (FusedGemm's route), a packed A (row-blocked
    convolutions) and B through BLAS (the other convolutions) agree with numpy, over the
    tile shapes :func:`blas.tiles` picks; the epilogue adds the column bias per tile."""
    from onnxjit.backends.cpu import pool

    rng = np.random.default_rng(4)
    dtype = np.float32
    t = np.float32
    for m, k, n in [(1, 200, 100), (64, 300, 129), (30, 70, 31)]:
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        bias = rng.standard_normal(n).astype(dtype)
        want = a.astype(np.float64) @ b + bias
        ep = (bias, kblas.BIAS_COL, np.empty(0, dtype), False, 0, t(0), t(0))
        tm, tn = kblas.tiles(1, m, n, k, threads)
        for ta, af, tb, bf in [
            (False, a.reshape(-1), kblas.B_PACKED, kblas.pack_b(b.reshape(-1), k, n)),
            (kblas.A_PACKED, kblas.pack_a(a.reshape(-1), m, k), False, b.reshape(-1)),
            (False, a.reshape(-1), kblas.B_BLAS, b.reshape(-1)),
        ]:
            c = np.full(m * n, np.nan, dtype)
            args = (1, m, n, k, af, 0, bf, 0, c, ta, tb, t(1), t(0), ep, tm, tn, k)
            if threads == 1:
                kblas.gemm_ks(*args)
            else:
                pool.run_parallel(kblas.gemm_ks_par, *args, threads=2)
            np.testing.assert_allclose(c.reshape(m, n), want, rtol=0, atol=_tol(dtype, k) * 4)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_tiles_transposed_form(dtype, threads):
    """Products with few columns as their transpose (``ta == A_PANELS_T``, A given as the
    panels of A^T): over the tiles :func:`blas.transposed_tiles` picks, with the row bias,
    a residual and an activation per tile, for one matrix and a batch sharing A, and with
    the inner dimension in chunks (the later ones adding to the tile)."""
    from onnxjit.backends.cpu import pool
    from onnxjit.kernels.cpu.epilogue import ACT_RELU

    rng = np.random.default_rng(6)
    t = dtype
    for m, k, n, batch, tk in [
        (40, 24, 9, 1, 24),
        (384, 64, 36, 1, 64),
        (70, 300, 25, 2, 300),
        (33, 500, 49, 3, 128),
        (20, 7, 1, 1, 3),
    ]:
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((batch, k, n)).astype(dtype)
        bias = rng.standard_normal(m).astype(dtype)
        res = rng.standard_normal((batch, m, n)).astype(dtype)
        want = np.maximum(
            np.einsum("mk,pkn->pmn", a.astype(np.float64), b) + bias[:, None] + res, 0
        )
        tiles = kblas.transposed_tiles(batch, m, n, k, threads, np.dtype(dtype).itemsize)
        tm, tn = tiles or (min(m, geometry(np.dtype(dtype).itemsize)[1]), n)
        ep = (bias, kblas.BIAS_ROW, res.reshape(-1), True, ACT_RELU, t(0), t(0))
        at = kblas.pack_b(np.ascontiguousarray(a.T).reshape(-1), k, m)
        c = np.full(batch * m * n, np.nan, dtype)
        args = (batch, m, n, k, at, 0, b.reshape(-1), k * n, c, kblas.A_PANELS_T, 0, t(1), t(0),
                ep, tm, tn, tk)  # fmt: skip
        if threads == 1:
            kblas.gemm_ks(*args)
        else:
            pool.run_parallel(kblas.gemm_ks_par, *args, threads=2)
        np.testing.assert_allclose(c.reshape(batch, m, n), want, rtol=0, atol=_tol(dtype, k) * 4)


def test_transposed_form_only_where_columns_fill_blocks_badly():
    """The transposed form is chosen for a 1x1 convolution of small planes (9, 25 or 36
    positions) and not where the columns fill whole panels (16, 64, 144), nor past its
    column limit."""
    mr, nr = geometry(4)
    for n in (9, 25, 36):
        assert kblas.transposed_tiles(1, 384, n, 64, 2) is not None, n
    for n in (nr, 4 * nr, 144, 1000):
        assert kblas.transposed_tiles(1, 384, n, 64, 2) is None, n
    tm, tn = kblas.transposed_tiles(1, 384, 36, 64, 2)
    assert tn == 36 and tm % nr == 0 and -(-384 // tm) >= 2
    if nr == 16:
        # a 7x7 plane (3 full column blocks and one of a single column) over a long inner
        # dimension (960 input channels), where the transposed stores are cheap next to the
        # steps and a narrow block costs half a full one
        assert kblas.transposed_tiles(1, 320, 49, 960, 2) is not None


def test_tiles_cover_the_product_in_register_blocks():
    """Tile shapes: column tiles multiples of NR (a packed B needs it), row tiles of MR, and
    at least one tile per thread when the product can be split."""
    mr, nr = geometry(4)
    for batch, m, n, k in [
        (1, 64, 512, 784),
        (1, 128, 3072, 768),
        (1, 3136, 64, 64),
        (1, 1, 1000, 512),
    ]:
        tm, tn = kblas.tiles(batch, m, n, k, 2)
        assert tn == n or tn % nr == 0
        assert tm == m or tm % mr == 0
        assert -(-m // tm) * -(-n // tn) >= 2


def test_tiles_read_the_larger_operand_once():
    """Few columns and a long inner dimension (a late 3x3 convolution's im2col product): the
    rows are cut, not the columns, so each thread reads its rows of the weight once; a wide
    product (a transformer's projection) is cut across its columns, sharing A's rows."""
    for m, n, k in [(256, 36, 2304), (512, 9, 4608), (2048, 49, 512)]:
        tm, tn = kblas.tiles(1, m, n, k, 2)
        assert tn == n and -(-m // tm) >= 2, (m, n, k, tm, tn)
    tm, tn = kblas.tiles(1, 128, 768, 768, 2)
    assert tm == 128 and -(-768 // tn) >= 2
