"""CUDA row kernels (kernels/cuda/{nn,norm,reduce}.py) against their CPU twins.

Each launcher runs under numba-cuda's simulator (kernels as Python threads: tiny arrays) on
device copies of small random inputs, and the result is compared with the CPU twin of the
same name called on the host arrays; a subprocess without the simulator compiles every
``@cuda.jit`` kernel through NVVM (cuda.compile_ptx, no GPU needed).
"""

from __future__ import annotations

import textwrap  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from cuda_compile import run_without_simulator  # noqa: E402

try:
    from numba import cuda
except ImportError as exc:  # pragma: no cover - depends on the environment
    pytest.skip(f"numba.cuda cannot be imported ({exc}): no CUDA tests", allow_module_level=True)

from onnxjit.kernels.cpu import nn as cpu_nn  # noqa: E402
from onnxjit.kernels.cpu import norm as cpu_norm  # noqa: E402
from onnxjit.kernels.cpu import reduce as cpu_reduce  # noqa: E402
from onnxjit.kernels.cuda import nn as gpu_nn  # noqa: E402
from onnxjit.kernels.cuda import norm as gpu_norm  # noqa: E402
from onnxjit.kernels.cuda import reduce as gpu_reduce  # noqa: E402

# numpy, standing in for the device under the simulator, warns where IEEE gives inf or NaN
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

DTYPES = [np.float32, np.float64]


def tol(dtype):
    return dict(rtol=3e-6, atol=3e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


def rand(shape, dtype, seed, lo=-2.0, hi=2.0):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


def on_gpu(fn, *args):
    """Call launcher ``fn`` with every array argument copied to the device; return the
    arguments (arrays copied back) after it ran."""
    dev = [cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    fn(*dev)
    cuda.synchronize()
    return [d.copy_to_host() if isinstance(a, np.ndarray) else a for d, a in zip(dev, args)]


# (rows, n): one element, n below the 128-thread block, n not a multiple of it
ROW_SHAPES = [(1, 1), (2, 7), (3, 129)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ROW_SHAPES)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_rows(dtype, shape, log):
    x = rand(shape, dtype, 1, -8, 8)
    want = np.empty_like(x)
    cpu_nn.softmax_rows(x, want, log)
    _, got, _ = on_gpu(gpu_nn.softmax_rows, x, np.zeros_like(x), log)
    np.testing.assert_allclose(got, want, **tol(dtype))


def test_softmax_rows_masked_and_nan():
    # -inf scores (an attention mask) give 0; a NaN turns its row NaN, as on the CPU
    x = rand((3, 9), np.float32, 2)
    x[0, :4] = -np.inf
    x[1, 5] = np.nan
    want = np.empty_like(x)
    cpu_nn.softmax_rows(x, want, False)
    _, got, _ = on_gpu(gpu_nn.softmax_rows, x, np.zeros_like(x), False)
    np.testing.assert_array_equal(got[0, :4], 0.0)
    assert np.isnan(got[1]).all() and np.isnan(want[1]).all()
    np.testing.assert_allclose(got[[0, 2]], want[[0, 2]], rtol=3e-6, atol=3e-7)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 5, 3), (1, 200, 2)])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_middle_axis(dtype, shape, log):
    x = rand(shape, dtype, 3, -6, 6)
    want = np.empty_like(x)
    cpu_nn.softmax(x, want, log)
    _, got, _ = on_gpu(gpu_nn.softmax, x, np.zeros_like(x), log)
    np.testing.assert_allclose(got, want, **tol(dtype))


def _stats(rows, dtype):
    return np.zeros(rows, dtype), np.zeros(rows, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_layer_norm_rows(dtype, shape):
    rows, n = shape
    x = rand(shape, dtype, 4, -3, 5)  # an offset mean: the two-pass variance matters
    scale, bias = rand(n, dtype, 5), rand(n, dtype, 6)
    y, mean, inv = np.empty_like(x), *_stats(rows, dtype)
    cpu_norm.layer_norm_rows(x, scale, bias, 1e-5, y, mean, inv)
    got = on_gpu(
        gpu_norm.layer_norm_rows, x, scale, bias, 1e-5, np.zeros_like(x), *_stats(rows, dtype)
    )
    for g, w in zip(got[4:], (y, mean, inv)):
        np.testing.assert_allclose(g, w, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ROW_SHAPES)
@pytest.mark.parametrize("b_rows,write_sum", [("all", True), ("one", False)])
def test_skip_layer_norm_rows(dtype, shape, b_rows, write_sum):
    rows, n = shape
    a = rand(shape, dtype, 7)
    b = rand((rows if b_rows == "all" else 1, n), dtype, 8)
    scale, bias = rand(n, dtype, 9), rand(n, dtype, 10)
    y, s, (mean, inv) = np.empty_like(a), np.zeros_like(a), _stats(rows, dtype)
    cpu_norm.skip_layer_norm_rows(a, b, scale, bias, 1e-6, y, s, write_sum, mean, inv)
    gy, gs, (gm, gi) = np.zeros_like(a), np.zeros_like(a), _stats(rows, dtype)
    got = on_gpu(gpu_norm.skip_layer_norm_rows, a, b, scale, bias, 1e-6, gy, gs, write_sum, gm, gi)
    for g, w in zip((got[5], got[6], got[8], got[9]), (y, s, mean, inv)):
        np.testing.assert_allclose(g, w, **tol(dtype))


def test_skip_layer_norm_sum_may_share_the_output():
    # the lowering passes y as s when nothing reads the sum
    a, b = rand((2, 10), np.float32, 11), rand((1, 10), np.float32, 12)
    scale, bias = np.ones(10, np.float32), np.zeros(10, np.float32)
    y, mean, inv = np.empty_like(a), *_stats(2, np.float32)
    cpu_norm.skip_layer_norm_rows(a, b, scale, bias, 1e-5, y, y, False, mean, inv)
    da, db = cuda.to_device(a), cuda.to_device(b)
    dy, dm, di = cuda.device_array_like(a), cuda.to_device(mean * 0), cuda.to_device(inv * 0)
    gpu_norm.skip_layer_norm_rows(da, db, scale, bias, 1e-5, dy, dy, False, dm, di)
    np.testing.assert_allclose(dy.copy_to_host(), y, rtol=3e-6, atol=3e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_rms_norm_rows(dtype, shape):
    rows, n = shape
    x, scale = rand(shape, dtype, 13), rand(n, dtype, 14)
    y, inv = np.empty_like(x), np.zeros(rows, dtype)
    cpu_norm.rms_norm_rows(x, scale, 1e-6, y, inv)
    got = on_gpu(gpu_norm.rms_norm_rows, x, scale, 1e-6, np.zeros_like(x), np.zeros(rows, dtype))
    np.testing.assert_allclose(got[3], y, **tol(dtype))
    np.testing.assert_allclose(got[4], inv, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_standardize_rows(dtype, shape):
    rows, n = shape
    x, scale, bias = rand(shape, dtype, 15, 1, 4), rand(n, dtype, 16), rand(n, dtype, 17)
    y, mean, inv = np.empty_like(x), np.zeros(rows), np.zeros(rows)
    cpu_norm.standardize_rows(x, scale, bias, 1e-9, 1e-9, y, mean, inv)
    got = on_gpu(
        gpu_norm.standardize_rows,
        x,
        scale,
        bias,
        1e-9,
        1e-9,
        np.zeros_like(x),
        np.zeros(rows),
        np.zeros(rows),
    )
    np.testing.assert_allclose(got[5], y, **tol(dtype))
    np.testing.assert_allclose(got[6], mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[7], inv, rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape,groups", [((1, 1, 1), 1), ((2, 6, 5), 3), ((1, 4, 70), 4), ((2, 2, 131), 1)]
)
def test_group_norm(dtype, shape, groups):
    x = rand(shape, dtype, 18, -1, 3)
    scale, bias = rand(shape[1], dtype, 19), rand(shape[1], dtype, 20)
    y = np.empty_like(x)
    cpu_norm.group_norm(x, groups, scale, bias, 1e-5, y)
    got = on_gpu(gpu_norm.group_norm, x, groups, scale, bias, 1e-5, np.zeros_like(x))
    np.testing.assert_allclose(got[5], y, **tol(dtype))


def test_empty_rows_launch_nothing():
    x = np.zeros((0, 4), np.float32)
    y = np.full((0, 4), 7, np.float32)
    assert on_gpu(gpu_nn.softmax_rows, x, y, False)[1].shape == (0, 4)
    stats = np.zeros(0, np.float32)
    on_gpu(
        gpu_norm.layer_norm_rows,
        x,
        np.ones(4, np.float32),
        np.zeros(4, np.float32),
        1e-5,
        y,
        stats,
        stats,
    )
    out = np.full((0, 3), 5.0)
    assert on_gpu(gpu_reduce.reduce3, np.zeros((0, 2, 3), np.float32), gpu_reduce.SUM, out)[
        2
    ].shape == (0, 3)


_KINDS = ["SUM", "PROD", "MAX", "MIN", "SUMSQ", "L1", "LOGSUMEXP"]


def _identity(kind, acc_dtype):
    return {"PROD": 1.0, "MAX": -np.inf, "MIN": np.inf}.get(kind, 0.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", _KINDS)
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 150, 1), (2, 7, 3)])
def test_reduce3(dtype, kind, shape):
    code = getattr(gpu_reduce, kind)
    assert code == getattr(cpu_reduce, kind)  # the lowering's code serves both backends
    x = rand(shape, dtype, 21, 0.5, 1.5) if kind == "PROD" else rand(shape, dtype, 21)
    acc_dtype = dtype if kind in ("MAX", "MIN") else np.float64
    start = np.full((shape[0], shape[2]), _identity(kind, acc_dtype), acc_dtype)
    want = start.copy()
    cpu_reduce.reduce3(x, code, want)
    got = on_gpu(gpu_reduce.reduce3, x, code, start.copy())[2]
    assert got.dtype == want.dtype
    if kind in ("MAX", "MIN"):
        np.testing.assert_array_equal(got, want)
    else:
        # float64 sums of the same values in another order (rows) or in the same (columns)
        np.testing.assert_allclose(got, want, rtol=1e-6 if kind == "LOGSUMEXP" else 1e-12)


@pytest.mark.parametrize("kind", ["MAX", "MIN", "SUM", "LOGSUMEXP"])
@pytest.mark.parametrize("inner", [1, 3])
def test_reduce3_special_values(kind, inner):
    x = rand((4, 150, inner), np.float32, 22)
    x[0, 17] = np.nan
    x[1, 3] = np.inf
    x[2, :] = -np.inf
    code = getattr(gpu_reduce, kind)
    acc_dtype = np.float32 if kind in ("MAX", "MIN") else np.float64
    start = np.full((4, inner), _identity(kind, acc_dtype), acc_dtype)
    want = start.copy()
    cpu_reduce.reduce3(x, code, want)
    got = on_gpu(gpu_reduce.reduce3, x, code, start.copy())[2]
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)


def test_reduce3_folds_into_what_out_holds():
    # the accumulator arrives initialised; a row sum adds to it
    x = rand((2, 200, 1), np.float32, 23)
    start = np.array([[10.0], [-3.0]])
    got = on_gpu(gpu_reduce.reduce3, x, gpu_reduce.SUM, start.copy())[2]
    np.testing.assert_allclose(got, start + x.astype(np.float64).sum(axis=1), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("want_max", [True, False])
@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 9, 3), (3, 40, 1)])
def test_argreduce3(dtype, want_max, last, shape):
    x = np.random.default_rng(24).integers(-3, 4, shape).astype(dtype)  # many ties
    if np.dtype(dtype).kind == "f" and shape[1] > 1:
        x[0, shape[1] // 2, 0] = np.nan
        x[0, shape[1] - 1, 0] = np.nan
    want = np.zeros((shape[0], shape[2]), np.int64)
    cpu_reduce.argreduce3(x, want_max, last, want)
    got = on_gpu(gpu_reduce.argreduce3, x, want_max, last, np.full_like(want, -1))[3]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 6, 3), (1, 50, 1)])
def test_cumsum3(dtype, exclusive, reverse, shape):
    x = np.random.default_rng(25).integers(-9, 10, shape).astype(dtype)
    want = np.empty_like(x)
    cpu_reduce.cumsum3(x, exclusive, reverse, want)
    got = on_gpu(gpu_reduce.cumsum3, x, exclusive, reverse, np.zeros_like(x))[3]
    np.testing.assert_array_equal(got, want)  # small integers: exact in every type


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 300)])
def test_reset(dtype, shape):
    want = np.full(shape, -np.inf, dtype)
    got = on_gpu(gpu_reduce.reset, rand(shape, dtype, 1), dtype(-np.inf))[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("how", ["CAST", "MEAN", "SQRT", "LOG"])
def test_finish(dtype, how):
    # negative sums and zero: the NaN and -inf a square root or logarithm gives there
    acc = rand((3, 9), np.float64, 4, -3.0, 5.0)
    acc[0, :3] = [0.0, -1.0, np.inf]
    code = int(getattr(cpu_reduce, f"FINISH_{how}"))
    want = np.zeros(acc.shape, dtype)
    cpu_reduce.finish(acc.copy(), code, 7, want)
    got = on_gpu(gpu_reduce.finish, acc, code, 7, np.zeros(acc.shape, dtype))[3]
    np.testing.assert_allclose(got, want, **tol(dtype))


_COMPILE_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    from numba import cuda, types
    from onnxjit.kernels.cuda import nn, norm, reduce as red

    A = lambda dt, nd: types.Array(dt, nd, "C")
    b1, i64, f64 = types.boolean, types.int64, types.float64
    n = 0
    for dt in (types.float32, types.float64):
        jobs = [
            (nn._SOFTMAX_ROWS[np.dtype(str(dt))], (A(dt, 2), A(dt, 2), b1)),
            (nn._softmax_cols, (A(dt, 3), A(dt, 3), b1)),
            (norm._layer_norm, (A(dt, 2), A(dt, 1), A(dt, 1), f64, A(dt, 2), A(dt, 1),
                                A(dt, 1), dt)),
            (norm._skip_layer_norm, (A(dt, 2), A(dt, 2), A(dt, 1), A(dt, 1), f64, A(dt, 2),
                                     A(dt, 2), b1, A(dt, 1), A(dt, 1), dt)),
            (norm._rms_norm, (A(dt, 2), A(dt, 1), f64, A(dt, 2), A(dt, 1), dt)),
            (norm._standardize, (A(dt, 2), A(dt, 1), A(dt, 1), f64, f64, A(dt, 2),
                                 A(f64, 1), A(f64, 1))),
            (norm._group_norm, (A(dt, 3), i64, A(dt, 1), A(dt, 1), f64, A(dt, 3))),
            (red._reduce_rows, (A(dt, 3), i64, A(f64, 2))),
            (red._reduce_rows, (A(dt, 3), i64, A(dt, 2))),
            (red._reduce_cols, (A(dt, 3), i64, A(f64, 2))),
            (red._reduce_cols, (A(dt, 3), i64, A(dt, 2))),
            (red._reset_k, (A(dt, 2), dt)),
            (red._finish_k, (A(f64, 2), i64, i64, A(dt, 2))),
        ]
        for k, sig in jobs:
            assert ".entry" in cuda.compile_ptx(k.py_func, sig, cc=(8, 0))[0]
            n += 1
    for dt in (types.float32, types.float64, types.int32, types.int64):
        for k, sig in ((red._argreduce_cols, (A(dt, 3), b1, b1, A(i64, 2))),
                       (red._cumsum_cols, (A(dt, 3), b1, b1, A(dt, 3)))):
            assert ".entry" in cuda.compile_ptx(k.py_func, sig, cc=(8, 0))[0]
            n += 1
    print("compiled", n)
    """
)


def test_row_kernels_compile_through_nvvm():
    out = run_without_simulator(["-c", _COMPILE_SCRIPT], timeout=600)
    assert out.split()[-1] == "34"
