"""CUDA product, convolution and pooling kernels against their CPU twins.

Each launcher of ``kernels/cuda/{blas,epilogue,conv,pool}.py`` runs under the CUDA simulator
on small random inputs and is compared with the CPU kernel of the same name on the same
values. The compile tests run this file as a script in a subprocess without the simulator and
compile every ``@cuda.jit`` kernel of those modules to PTX with NVVM (no GPU needed).
"""

from __future__ import annotations

import os

# before numba.cuda is first imported: the simulator replaces the module in-process
import sys

import numpy as np
import pytest
from cuda_compile import run_without_simulator

try:
    from numba import cuda
except ImportError as exc:  # numba-cuda is an optional dependency (extra "cuda")
    pytest.skip(f"numba.cuda cannot be imported: {exc}", allow_module_level=True)

from onnxjit.kernels.cpu import blas as cpu_blas
from onnxjit.kernels.cpu import conv as cpu_conv
from onnxjit.kernels.cpu import epilogue as cpu_ep
from onnxjit.kernels.cpu import pool as cpu_pool
from onnxjit.kernels.cuda import blas, conv, epilogue, pool, runtime

DTYPES = (np.float32, np.float64)


def _tol(dtype) -> dict:
    # sums of up to ~50 products, one FMA contraction apart from the CPU's order
    return dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


@pytest.fixture(autouse=True)
def _sim_stream():
    """The simulator has no ``cuda.default_stream``: launch on a stream of its own."""
    prev = runtime.set_stream(cuda.stream())
    yield
    runtime.set_stream(prev)


def _dev(a: np.ndarray):
    return cuda.to_device(np.ascontiguousarray(a))


# -- blas.gemm_ks -------------------------------------------------------------------------------

# (batch, m, n, k, shared A, shared B, ta, tb, alpha, beta, bias mode, residual, act)
GEMM_CASES = [
    pytest.param(1, 1, 1, 1, False, False, 0, 0, 1.0, 0.0, 0, False, 0, id="one-element"),
    pytest.param(1, 33, 20, 37, False, False, 0, 0, 1.5, 0.0, 1, False, 1, id="bias-col-relu"),
    pytest.param(2, 17, 9, 20, False, False, 0, 0, 1.0, 0.5, 2, True, 6, id="batch-beta-row-res"),
    pytest.param(3, 5, 70, 18, False, True, 1, 0, 1.0, 0.0, 0, False, 9, id="shared-b-trans-a"),
    pytest.param(2, 70, 8, 5, True, False, 0, 1, 0.5, 0.0, 1, True, 5, id="shared-a-trans-b"),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "batch, m, n, k, share_a, share_b, ta, tb, alpha, beta, mode, with_res, act", GEMM_CASES
)
def test_gemm_ks_matches_cpu(
    dtype, batch, m, n, k, share_a, share_b, ta, tb, alpha, beta, mode, with_res, act
):
    rng = np.random.default_rng(batch * 1000 + m * 31 + n)
    t = np.dtype(dtype).type
    na, nb = (1 if share_a else batch), (1 if share_b else batch)
    a = rng.standard_normal((na, *((k, m) if ta else (m, k)))).astype(dtype)
    b = rng.standard_normal((nb, *((n, k) if tb else (k, n)))).astype(dtype)
    c0 = rng.standard_normal(batch * m * n).astype(dtype)
    if beta == 0:
        c0[::3] = np.nan  # beta == 0 ignores what c held
    bias = rng.standard_normal(n if mode == blas.BIAS_COL else m).astype(dtype)
    if mode == blas.BIAS_NONE:
        bias = np.empty(0, dtype)
    res = rng.standard_normal(batch * m * n).astype(dtype) if with_res else np.empty(0, dtype)
    sa, sb = (0 if share_a else m * k), (0 if share_b else k * n)
    p0, p1 = (t(-0.5), t(0.75)) if act == epilogue.ACT_CLIP else (t(0), t(0))
    want = c0.copy()
    ep = (bias, mode, res, with_res, act, p0, p1)
    cpu_blas.gemm_ks(batch, m, n, k, a.reshape(-1), sa, b.reshape(-1), sb, want, ta, tb,
                     t(alpha), t(beta), ep, m, n, k)  # fmt: skip
    c = _dev(c0)
    dep = (_dev(bias), mode, _dev(res), with_res, act, p0, p1)
    blas.gemm_ks(batch, m, n, k, _dev(a.reshape(-1)), sa, _dev(b.reshape(-1)), sb, c, ta, tb,
                 t(alpha), t(beta), dep, 7, 7, 3)  # fmt: skip
    got = c.copy_to_host()
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_packed_operands_are_row_major(dtype):
    """What the lowerings pass for constant weights: ``pack_b`` / ``pack_a`` of this backend
    with ``B_PACKED`` / ``A_PACKED``, and ``B_BLAS``, multiply as the row-major matrix."""
    rng = np.random.default_rng(5)
    t = np.dtype(dtype).type
    m, n, k = 3, 21, 19
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    want = (a.astype(np.float64) @ b.astype(np.float64)).reshape(-1)
    e = np.empty(0, dtype)
    ep = (_dev(e), blas.BIAS_NONE, _dev(e), False, epilogue.ACT_NONE, t(0), t(0))
    pa = blas.pack_a(a.reshape(-1), m, k)
    pb = blas.pack_b(b.reshape(-1), k, n)
    assert pb.__array_interface__["data"][0] != b.__array_interface__["data"][0]
    for ta, tb, bb in ((0, blas.B_PACKED, pb), (blas.A_PACKED, blas.B_BLAS, b.reshape(-1))):
        c = cuda.device_array(m * n, dtype)
        aa = pa if ta == blas.A_PACKED else a.reshape(-1)
        blas.gemm_ks(1, m, n, k, _dev(aa), 0, _dev(bb), 0, c, ta, tb, t(1), t(0), ep, m, n, k)
        np.testing.assert_allclose(c.copy_to_host(), want, **_tol(dtype))
    assert blas.tiles(1, m, n, k, 4, np.dtype(dtype).itemsize) == (m, n)


def test_gemm_empty_output_launches_nothing():
    e = np.empty(0, np.float32)
    ep = (_dev(e), 0, _dev(e), False, 0, np.float32(0), np.float32(0))
    c = _dev(np.array([7.0], np.float32))
    blas.gemm_ks(1, 0, 1, 3, _dev(e), 0, _dev(np.ones(3, np.float32)), 0, c, 0, 0,
                 np.float32(1), np.float32(0), ep, 0, 1, 3)  # fmt: skip
    assert c.copy_to_host()[0] == 7.0


# -- epilogue ---------------------------------------------------------------------------------

ACTS = [getattr(cpu_ep, name) for name in dir(cpu_ep) if name.startswith("ACT_")]


def _act_params(act, t):
    if act == epilogue.ACT_CLIP:
        return t(-0.3), t(0.4)
    if act in (epilogue.ACT_LEAKY_RELU, epilogue.ACT_HARD_SIGMOID):
        return t(0.2), t(0.5)
    return t(0), t(0)


@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_every_activation(dtype, act):
    rng = np.random.default_rng(act)
    t = np.dtype(dtype).type
    y0 = (rng.standard_normal((3, 7)) * 3).astype(dtype)
    y0[0, 0] = -0.0
    bias = rng.standard_normal(7).astype(dtype)
    p0, p1 = _act_params(act, t)
    want = y0.copy()
    cpu_ep.rows(want, t(1.25), bias, True, act, p0, p1)
    y = _dev(y0)
    epilogue.rows(y, t(1.25), _dev(bias), True, act, p0, p1)
    np.testing.assert_allclose(y.copy_to_host(), want, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("has_bias, has_res", [(True, True), (False, True), (True, False)])
def test_planes_bias_residual(dtype, has_bias, has_res):
    rng = np.random.default_rng(11)
    t = np.dtype(dtype).type
    y0 = rng.standard_normal((2, 3, 5)).astype(dtype)
    bias = rng.standard_normal(3).astype(dtype) if has_bias else np.empty(0, dtype)
    res = rng.standard_normal((2, 3, 5)).astype(dtype) if has_res else np.empty((0, 0, 0), dtype)
    want = y0.copy()
    cpu_ep.planes(want, bias, has_bias, res, has_res, epilogue.ACT_TANH, t(0), t(0))
    y = _dev(y0)
    epilogue.planes(y, _dev(bias), has_bias, _dev(res), has_res, epilogue.ACT_TANH, t(0), t(0))
    np.testing.assert_allclose(y.copy_to_host(), want, rtol=2e-6, atol=2e-6)


def test_rows_empty_is_a_no_op():
    y = cuda.device_array((0, 4), np.float32)
    epilogue.rows(y, np.float32(2), _dev(np.empty(0, np.float32)), False, 1, np.float32(0),
                  np.float32(0))  # fmt: skip
    assert y.shape == (0, 4)


# -- conv -------------------------------------------------------------------------------------


def _geo(ks, st, dl, pb):
    return [np.array(v, np.int64) for v in (ks, st, dl, pb)]


def _out(isz, ks, st, dl, pb, pe):
    return [(i + a + e - ((k - 1) * d + 1)) // s + 1
            for i, k, s, d, a, e in zip(isz, ks, st, dl, pb, pe)]  # fmt: skip


# (x shape (N, C, D, H, W), M, kernel, strides, dilations, pads begin, pads end)
CONV_CASES = [
    pytest.param(
        (2, 3, 1, 9, 9),
        4,
        (1, 3, 3),
        (1, 2, 2),
        (1, 1, 1),
        (0, 1, 1),
        (0, 1, 1),
        id="2d-stride2-pad",
    ),  # fmt: skip
    pytest.param(
        (1, 2, 1, 7, 8),
        5,
        (1, 2, 3),
        (1, 1, 1),
        (1, 2, 1),
        (0, 0, 2),
        (0, 1, 0),
        id="2d-dilated-uneven-pads",
    ),  # fmt: skip
    pytest.param(
        (1, 3, 1, 1, 12), 2, (1, 1, 3), (1, 1, 3), (1, 1, 1), (0, 0, 0), (0, 0, 0), id="1d-stride3"
    ),  # fmt: skip
    pytest.param(
        (1, 2, 3, 4, 4), 3, (2, 2, 2), (1, 1, 1), (1, 1, 1), (1, 0, 1), (0, 0, 0), id="3d"
    ),  # fmt: skip
    pytest.param(
        (1, 1, 1, 1, 1), 1, (1, 1, 1), (1, 1, 1), (1, 1, 1), (0, 0, 0), (0, 0, 0), id="one-element"
    ),  # fmt: skip
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xs, M, ks, st, dl, pb, pe", CONV_CASES)
def test_conv_rows_matches_cpu(dtype, xs, M, ks, st, dl, pb, pe):
    rng = np.random.default_rng(sum(xs) + M)
    t = np.dtype(dtype).type
    N, C = xs[:2]
    out = _out(xs[2:], ks, st, dl, pb, pe)
    kt = C * int(np.prod(ks))
    x = rng.standard_normal(xs).astype(dtype)
    w2 = rng.standard_normal((M, kt)).astype(dtype)
    bias = rng.standard_normal(M).astype(dtype)
    res = rng.standard_normal(N * M * int(np.prod(out))).astype(dtype)
    geo = _geo(ks, st, dl, pb)
    want = np.full((N, M, *out), np.nan, dtype)
    ep = (bias, True, res, True, epilogue.ACT_LEAKY_RELU, t(0.1), t(0))
    wp = cpu_blas.pack_a(w2.reshape(-1), M, kt)
    cpu_conv.conv_rows(x, w2, wp, *geo, want, ep, M, 1, kt)
    y = _dev(np.full((N, M, *out), np.nan, dtype))
    dep = (_dev(bias), True, _dev(res), True, epilogue.ACT_LEAKY_RELU, t(0.1), t(0))
    wpd = _dev(blas.pack_a(w2.reshape(-1), M, kt))
    conv.conv_rows(_dev(x), _dev(w2), wpd, *(_dev(g) for g in geo), y, dep, 8, 2, 16)
    np.testing.assert_allclose(y.copy_to_host(), want, **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "xs, M, G, ks, st",
    [
        ((2, 4, 1, 5, 6), 6, 2, (1, 3, 3), (1, 1, 1)),
        ((1, 6, 1, 4, 7), 9, 3, (1, 2, 3), (1, 2, 1)),  # 3 rows a group: tiles straddle groups
        ((1, 8, 1, 3, 3), 40, 4, (1, 1, 1), (1, 1, 1)),  # 10 rows a group, pointwise
    ],
)
def test_grouped_conv_rows_matches_the_cpu_twin_per_group(dtype, xs, M, G, ks, st):
    # the CPU twin takes one group: the oracle runs it on each group's channels and weights
    rng = np.random.default_rng(M + G)
    t = np.dtype(dtype).type
    N, C = xs[:2]
    cg, mg = C // G, M // G
    dl, pb, pe = (1, 1, 1), (0, 1, 0), (0, 0, 1)
    out = _out(xs[2:], ks, st, dl, pb, pe)
    kt = cg * int(np.prod(ks))
    x = rng.standard_normal(xs).astype(dtype)
    w2 = rng.standard_normal((M, kt)).astype(dtype)
    bias = rng.standard_normal(M).astype(dtype)
    geo = _geo(ks, st, dl, pb)
    want = np.empty((N, M, *out), dtype)
    for g in range(G):
        wg = np.ascontiguousarray(w2[g * mg : (g + 1) * mg])
        part = np.empty((N, mg, *out), dtype)
        ep = (np.ascontiguousarray(bias[g * mg : (g + 1) * mg]), True, _dummy_res(dtype), False,
              epilogue.ACT_RELU, t(0), t(0))  # fmt: skip
        xg = np.ascontiguousarray(x[:, g * cg : (g + 1) * cg])
        cpu_conv.conv_rows(xg, wg, cpu_blas.pack_a(wg.reshape(-1), mg, kt), *geo, part, ep, mg,
                           1, kt)  # fmt: skip
        want[:, g * mg : (g + 1) * mg] = part
    y = _dev(np.full((N, M, *out), np.nan, dtype))
    dep = (_dev(bias), True, _dev(_dummy_res(dtype)), False, epilogue.ACT_RELU, t(0), t(0))
    wpd = _dev(blas.pack_a(w2.reshape(-1), M, kt))
    conv.conv_rows(_dev(x), _dev(w2), wpd, *(_dev(g) for g in geo), y, dep, 8, 2, 16)
    np.testing.assert_allclose(y.copy_to_host(), want, **_tol(dtype))


def _dummy_res(dtype):
    return np.zeros(1, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xs, M, ks, st, dl, pb, pe", CONV_CASES[:4])
def test_im2col_and_gather_match_cpu(dtype, xs, M, ks, st, dl, pb, pe):
    rng = np.random.default_rng(3)
    N, C = xs[:2]
    c0, cg = (1, C - 1) if C > 1 else (0, C)
    out = _out(xs[2:], ks, st, dl, pb, pe)
    K, S = int(np.prod(ks)), int(np.prod(out))
    x = rng.standard_normal(xs).astype(dtype)
    geo = _geo(ks, st, dl, pb)
    osz = np.array(out, np.int64)
    want = np.full((N, cg * K, S), np.nan, dtype)
    cpu_conv.im2col(x, c0, cg, *geo, osz, want)
    col = _dev(np.full(want.shape, np.nan, dtype))
    conv.im2col(_dev(x), c0, cg, *(_dev(g) for g in geo), _dev(osz), col)
    np.testing.assert_array_equal(col.copy_to_host(), want)
    for tab_type in (np.uint32, np.int64):
        tab = np.empty((K, S), tab_type)
        conv.gather_table(*geo, osz, np.array(xs[2:], np.int64), tab)
        col = _dev(np.full(want.shape, np.nan, dtype))
        conv.im2col_gather(_dev(x), c0, cg, _dev(tab), col)
        np.testing.assert_array_equal(col.copy_to_host(), want)


# (x shape, channel multiplier, kernel, strides, dilations, pads begin, pads end)
DW_CASES = [
    pytest.param(
        (2, 3, 1, 9, 9),
        2,
        (1, 3, 3),
        (1, 2, 2),
        (1, 1, 1),
        (0, 1, 1),
        (0, 1, 1),
        id="2d-mult2-stride2",
    ),  # fmt: skip
    pytest.param(
        (1, 4, 1, 6, 7), 1, (1, 3, 2), (1, 1, 1), (1, 2, 1), (0, 1, 0), (0, 2, 1), id="2d-dilated"
    ),  # fmt: skip
    pytest.param(
        (1, 2, 3, 4, 4), 1, (2, 2, 2), (2, 1, 1), (1, 1, 1), (1, 1, 0), (0, 0, 0), id="3d"
    ),  # fmt: skip
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_res", [False, True])
@pytest.mark.parametrize("xs, mult, ks, st, dl, pb, pe", DW_CASES)
def test_depthwise_matches_cpu(dtype, with_res, xs, mult, ks, st, dl, pb, pe):
    rng = np.random.default_rng(sum(xs) * 7 + mult)
    t = np.dtype(dtype).type
    N, C = xs[:2]
    M = C * mult
    out = _out(xs[2:], ks, st, dl, pb, pe)
    K = int(np.prod(ks))
    x = rng.standard_normal(xs).astype(dtype)
    wm = rng.standard_normal((M, K)).astype(dtype)
    bias = rng.standard_normal(M).astype(dtype)
    n_out = N * M * int(np.prod(out))
    res = rng.standard_normal(n_out).astype(dtype) if with_res else np.empty(0, dtype)
    geo = _geo(ks, st, dl, pb)
    want = np.full((N, M, *out), np.nan, dtype)
    act = epilogue.ACT_SIGMOID
    cpu_conv.depthwise(x, wm, *geo, want, mult, (bias, True, res, with_res, act, t(0), t(0)))
    y = _dev(np.full(want.shape, np.nan, dtype))
    dep = (_dev(bias), True, _dev(res), with_res, act, t(0), t(0))
    conv.depthwise(_dev(x), _dev(wm), *(_dev(g) for g in geo), y, mult, dep)
    np.testing.assert_allclose(y.copy_to_host(), want, **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("s", [1, 2])
def test_depthwise3_matches_cpu(dtype, s):
    rng = np.random.default_rng(s)
    t = np.dtype(dtype).type
    N, C, H, W = 1, 3, 5, 6
    out = ((H - 1) // s + 1, (W - 1) // s + 1)
    x = rng.standard_normal((N, C, 1, H, W)).astype(dtype)
    wm = rng.standard_normal((C, 9)).astype(dtype)
    bias = rng.standard_normal(C).astype(dtype)
    geo = _geo((1, 3, 3), (1, s, s), (1, 1, 1), (0, 1, 1))
    e = np.empty(0, dtype)
    want = np.full((N, C, 1, *out), np.nan, dtype)
    cpu_conv.depthwise3(x, wm, *geo, want, 1, (bias, True, e, False, 1, t(0), t(0)))
    y = _dev(np.full(want.shape, np.nan, dtype))
    dep = (_dev(bias), True, _dev(e), False, 1, t(0), t(0))
    conv.depthwise3(_dev(x), _dev(wm), *(_dev(g) for g in geo), y, 1, dep)
    np.testing.assert_allclose(y.copy_to_host(), want, **_tol(dtype))


def _tiled_weights(wk, bias, lanes, ow):
    """The weight blocks of ``depthwise_tiles``, laid out as the lowering lays them out
    (onnxjit.ops.nn._ConvPlan) for a backend's ``DW_LANES``."""
    M, K = wk.shape
    nb = -(-M // lanes)
    wt = np.zeros((nb * lanes, K + 1), wk.dtype)
    wt[:M, :K] = wk
    wt[:M, K] = bias
    wt = wt.reshape(nb, lanes, K + 1).transpose(0, 2, 1)
    return np.ascontiguousarray(np.tile(wt, (1, 1, ow))).ravel()


@pytest.mark.parametrize("dtype", DTYPES)
def test_depthwise_tiles_matches_cpu(dtype):
    rng = np.random.default_rng(9)
    t = np.dtype(dtype).type
    N, C, H, W, mult = 2, 3, 4, 5, 2
    M = C * mult
    out = (H, W)  # 3x3, stride 1, one pixel of padding
    x = rng.standard_normal((N, C, 1, H, W)).astype(dtype)
    wk = rng.standard_normal((M, 9)).astype(dtype)
    bias = rng.standard_normal(M).astype(dtype)
    res = rng.standard_normal(N * M * H * W).astype(dtype)
    geo = _geo((1, 3, 3), (1, 1, 1), (1, 1, 1), (0, 1, 1))
    e = np.empty(0, dtype)
    act = epilogue.ACT_RELU
    want = np.full((N, M, 1, *out), np.nan, dtype)
    wx_cpu = _tiled_weights(wk, bias, cpu_conv.DW_LANES, W)
    cpu_conv.depthwise_tiles(x, wx_cpu, *geo, want, mult, (e, False, res, True, act, t(0), t(0)))
    y = _dev(np.full(want.shape, np.nan, dtype))
    wx = _dev(_tiled_weights(wk, bias, conv.DW_LANES, W))
    dep = (_dev(e), False, _dev(res), True, act, t(0), t(0))
    conv.depthwise_tiles(_dev(x), wx, *(_dev(g) for g in geo), y, mult, dep)
    np.testing.assert_allclose(y.copy_to_host(), want, **_tol(dtype))


# -- pool -------------------------------------------------------------------------------------

# (x shape (B, D, H, W), kernel, strides, dilations, pads begin, pads end)
POOL_CASES = [
    pytest.param((3, 1, 7, 9), (1, 3, 3), (1, 2, 2), (1, 1, 1), (0, 1, 1), (0, 1, 1), id="2d"),
    pytest.param(
        (2, 1, 6, 6), (1, 2, 3), (1, 2, 2), (1, 2, 1), (0, 0, 1), (0, 1, 2), id="2d-dilated-ceil"
    ),  # fmt: skip
    pytest.param((1, 3, 4, 5), (2, 2, 2), (1, 2, 2), (1, 1, 1), (1, 0, 0), (0, 1, 1), id="3d"),
    pytest.param((1, 1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1), (0, 0, 0), (0, 0, 0), id="1x1"),
]


def _pool_input(xs, dtype, seed):
    x = np.random.default_rng(seed).standard_normal(xs).astype(dtype)
    x.reshape(-1)[[i for i in range(0, x.size, 11)][1:3]] = np.nan  # a NaN or two
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xs, ks, st, dl, pb, pe", POOL_CASES)
def test_max_pools_match_cpu(dtype, xs, ks, st, dl, pb, pe):
    x = _pool_input(xs, dtype, sum(xs))
    out = (xs[0], *_out(xs[1:], ks, st, dl, pb, pe))
    geo = _geo(ks, st, dl, pb)
    dgeo = [_dev(g) for g in geo]
    for col_major in (False, True):
        want, want_i = np.empty(out, dtype), np.empty(out, np.int64)
        cpu_pool.max_pool(x, want, want_i, *geo, col_major)
        y, ind = _dev(np.empty(out, dtype)), _dev(np.zeros(out, np.int64))
        pool.max_pool(_dev(x), y, ind, *dgeo, col_major)
        np.testing.assert_array_equal(y.copy_to_host(), want)
        np.testing.assert_array_equal(ind.copy_to_host(), want_i)
    want = np.empty(out, dtype)
    cpu_pool.max_pool_values(x, want, *geo)
    y = _dev(np.empty(out, dtype))
    pool.max_pool_values(_dev(x), y, *dgeo)
    np.testing.assert_array_equal(y.copy_to_host(), want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xs, ks, st, dl, pb, pe", POOL_CASES)
@pytest.mark.parametrize("lp, p, count_pad", [(False, 2.0, False), (False, 2.0, True),
                                              (True, 2.0, False), (True, 3.0, False)])  # fmt: skip
def test_avg_pool_matches_cpu(dtype, xs, ks, st, dl, pb, pe, lp, p, count_pad):
    x = np.random.default_rng(len(xs) + int(p)).standard_normal(xs).astype(dtype)
    out = (xs[0], *_out(xs[1:], ks, st, dl, pb, pe))
    geo = [*_geo(ks, st, dl, pb), np.array(pe, np.int64)]
    want = np.empty(out, dtype)
    cpu_pool.avg_pool(x, want, *geo, lp, p, count_pad)
    y = _dev(np.empty(out, dtype))
    pool.avg_pool(_dev(x), y, *(_dev(g) for g in geo), lp, p, count_pad)
    np.testing.assert_allclose(y.copy_to_host(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows, size", [(1, 1), (3, 130), (5, 7)])
def test_global_mean_matches_cpu(dtype, rows, size):
    x = np.random.default_rng(rows * size).standard_normal((rows, size)).astype(dtype)
    want = np.empty(rows, dtype)
    cpu_pool.global_mean(x, want)
    y = _dev(np.full(rows, np.nan, dtype))
    pool.global_mean(_dev(x), y)
    np.testing.assert_allclose(y.copy_to_host(), want, rtol=1e-6 if dtype == np.float32 else 1e-14)


# -- compile-only checks through NVVM (subprocess, no simulator) -------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_kernels_compile_to_ptx(dtype):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = run_without_simulator([os.path.abspath(__file__), dtype], cwd=root)
    compiled = set(out.split())
    assert compiled == set(_ptx_signatures(None, dtype)), out


def _ptx_signatures(types, dtype: str) -> dict:
    """Kernel name -> (kernel, argument types) of every ``@cuda.jit`` kernel of the four
    modules, typed as their launchers call them (``types`` None: the names only)."""
    names = [
        "blas._gemm_kernel", "epilogue._rows_kernel", "epilogue._planes_kernel",
        "conv._conv_gemm_kernel", "conv._im2col_kernel", "conv._gather_kernel/u32",
        "conv._gather_kernel/i64", "conv._dw_kernel", "pool._max_pool_kernel",
        "pool._avg_pool_kernel", "pool._max_values_kernel", "pool._mean_rows_kernel",
    ]  # fmt: skip
    if types is None:
        return dict.fromkeys(names)
    ft = getattr(types, dtype)
    i64, b1, f64 = types.int64, types.boolean, types.float64
    v, i1 = ft[::1], i64[::1]
    a2, a3, a4, a5 = ft[:, ::1], ft[:, :, ::1], ft[:, :, :, ::1], ft[:, :, :, :, ::1]
    g4 = (i1, i1, i1, i1)
    ep = (ft, ft)
    sigs = [
        (blas._gemm_kernel, (i64, i64, i64, i64, v, i64, i64, i64, v, i64, i64, i64, v, ft, ft,
                             v, i64, v, b1, i64, *ep)),
        (epilogue._rows_kernel, (a2, ft, v, b1, i64, *ep)),
        (epilogue._planes_kernel, (a3, v, b1, a3, b1, i64, *ep)),
        (conv._conv_gemm_kernel, (a5, v, *g4, v, i64, i64, i64, i64, i64, v, b1, v, b1, i64, *ep)),
        (conv._im2col_kernel, (a5, i64, i64, *g4, i1, a3)),
        (conv._gather_kernel, (a5, i64, i64, types.uint32[:, ::1], a3)),
        (conv._gather_kernel, (a5, i64, i64, i64[:, ::1], a3)),
        (conv._dw_kernel, (a5, v, b1, *g4, a5, i64, v, b1, v, b1, i64, *ep)),
        (pool._max_pool_kernel, (a4, a4, i64[:, :, :, ::1], *g4, b1)),
        (pool._avg_pool_kernel, (a4, a4, *g4, i1, b1, f64, b1)),
        (pool._max_values_kernel, (a4, a4, *g4)),
        (pool._mean_rows_kernel, (a2, v)),
    ]  # fmt: skip
    return dict(zip(names, sigs))


def _compile_all(dtype: str) -> None:
    """Compile every kernel for ``dtype`` to PTX (sm_80) and print the names that compiled;
    float32 kernels must not compute in float64, except the float64 sums of the means."""
    from numba import cuda as real_cuda
    from numba import types

    f64_sums = {"pool._avg_pool_kernel", "pool._mean_rows_kernel"}
    for name, (kernel, sig) in _ptx_signatures(types, dtype).items():
        ptx, _ = real_cuda.compile_ptx(kernel.py_func, sig, cc=(8, 0))
        if dtype == "float32" and name not in f64_sums and ".f64" in ptx:
            raise AssertionError(f"{name} computes in float64 for float32 data")
        print(name, flush=True)


if __name__ == "__main__":
    _compile_all(sys.argv[1])
