"""CUDA data-movement kernels (kernels/cuda/tensor.py, resize.py) against their CPU twins.

Under numba-cuda's simulator (set before numba.cuda is imported), each launcher runs on small
random inputs with fixed seeds and its result must equal the CPU kernel's exactly (data
movement), bad-index reports included. A compile-only test runs every ``@cuda.jit`` kernel of
the module through NVVM (``cuda.compile_ptx``) in a subprocess without the simulator.
"""

from __future__ import annotations

import os
import textwrap  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from cuda_compile import run_without_simulator  # noqa: E402

try:
    from numba import cuda  # noqa: E402
except Exception as exc:  # pragma: no cover - depends on the environment
    pytest.skip(f"numba.cuda cannot be imported: {exc}", allow_module_level=True)

from onnxjit.kernels.cpu import resize as cpu_resize  # noqa: E402
from onnxjit.kernels.cpu import tensor as cpu  # noqa: E402
from onnxjit.kernels.cuda import resize as gpu_resize  # noqa: E402
from onnxjit.kernels.cuda import tensor as gpu  # noqa: E402
from onnxjit.kernels.cuda.runtime import set_stream  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# float16 reaches the kernels as its uint16 bits (the CPU twin has no float16 type)
DTYPES = [np.float32, np.uint8, np.int64, np.uint16, np.bool_]


@pytest.fixture(autouse=True)
def _run_stream():
    # The launchers queue on the run's stream; the simulator has no cuda.default_stream, so
    # each test gives them one, as the backend does around a run.
    prev = set_stream(cuda.stream())
    yield
    set_stream(prev)


def _random(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 100, shape).astype(dtype)


def _dev(a: np.ndarray):
    return cuda.to_device(np.ascontiguousarray(a))


# -- wrap_indices --------------------------------------------------------------------------------
@pytest.mark.parametrize("m, n", [(0, 3), (1, 1), (7, 5), (300, 40)])
def test_wrap_indices_valid(m, n):
    rng = np.random.default_rng(m + n)
    idx = rng.integers(-n, n, m).astype(np.int64)
    want, want_bad = cpu.wrap_indices(idx, n)
    got, bad = gpu.wrap_indices(_dev(idx), n)
    assert want_bad == -1 and int(bad) == -1
    assert not bad >= 0
    np.testing.assert_array_equal(got.copy_to_host(), want)


def test_wrap_indices_reports_the_first_bad_position():
    idx = np.array([0, -2, 4, 1, 9, -7, 3], np.int64)  # n=4: 4, 9 and -7 are out of range
    _, want_bad = cpu.wrap_indices(idx, 4)
    _, bad = gpu.wrap_indices(_dev(idx), 4)
    assert want_bad == 2
    assert bad == want_bad and int(bad) == 2 and bad >= 0


def test_flag_on_the_default_stream():
    # outside a run the launchers use stream 0, and reading the flag needs no stream object
    prev = set_stream(None)
    try:
        idx = np.array([[[0, 5]]], np.int64)
        bad = gpu.gather_elements(_dev(np.ones((1, 2, 2))), _dev(idx), cuda.device_array((1, 1, 2)))
        assert bad == cpu.gather_elements(np.ones((1, 2, 2)), idx, np.zeros((1, 1, 2))) == 1
    finally:
        set_stream(prev)


# -- gather_axis ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape, m", [((1, 1, 1), 1), ((3, 5, 7), 4), ((2, 9, 1), 130), ((1, 4, 3), 0)]
)
def test_gather_axis(dtype, shape, m):
    rng = np.random.default_rng(sum(shape) + m)
    data = _random(rng, shape, dtype)
    idx = rng.integers(0, shape[1], m).astype(np.int64)
    want = np.zeros((shape[0], m, shape[2]), dtype)
    cpu.gather_axis(data, idx, want)
    out = cuda.device_array((shape[0], m, shape[2]), dtype)
    gpu.gather_axis(_dev(data), _dev(idx), out)
    np.testing.assert_array_equal(out.copy_to_host(), want)


def test_gather_axis_never_reads_outside_data():
    # an invalid index (the caller raises on the flag) writes 0 rather than reading past data
    data = np.arange(6, dtype=np.int32).reshape(1, 3, 2) + 1
    out = cuda.device_array((1, 2, 2), np.int32)
    gpu.gather_axis(_dev(data), _dev(np.array([2, 3], np.int64)), out)
    np.testing.assert_array_equal(out.copy_to_host(), [[[5, 6], [0, 0]]])


# -- gather_elements -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float64])
@pytest.mark.parametrize("shape, m", [((1, 1, 1), 1), ((2, 5, 3), 4), ((3, 4, 50), 6)])
def test_gather_elements(dtype, shape, m):
    rng = np.random.default_rng(7 * m + shape[2])
    outer, n, inner = shape
    data = _random(rng, shape, dtype)
    idx = rng.integers(-n, n, (outer, m, inner)).astype(np.int64)
    want = np.zeros(idx.shape, dtype)
    want_bad = cpu.gather_elements(data, idx, want)
    out = cuda.device_array(idx.shape, dtype)
    bad = gpu.gather_elements(_dev(data), _dev(idx), out)
    assert want_bad == -1 and bad == -1
    np.testing.assert_array_equal(out.copy_to_host(), want)


def test_gather_elements_reports_the_first_bad_position():
    data = np.ones((2, 3, 4), np.float32)
    idx = np.zeros((2, 5, 4), np.int64)
    idx[1, 2, 3] = 3
    idx[0, 4, 1] = -4  # earlier in flat order: the one both report
    idx[1, 0, 0] = 100
    want_bad = cpu.gather_elements(data, idx, np.zeros(idx.shape, np.float32))
    bad = gpu.gather_elements(_dev(data), _dev(idx), cuda.device_array(idx.shape, np.float32))
    assert want_bad == (0 * 5 + 4) * 4 + 1
    assert int(bad) == want_bad


# -- scatter_elements ----------------------------------------------------------------------------
REDUCTIONS = ["RED_NONE", "RED_ADD", "RED_MUL", "RED_MAX", "RED_MIN"]


@pytest.mark.parametrize("red", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8])
@pytest.mark.parametrize("shape, m", [((1, 1, 1), 1), ((1, 3, 1), 9), ((2, 4, 33), 7)])
def test_scatter_elements(red, dtype, shape, m):
    # duplicates on purpose (m > n): the order of their application must be the CPU's
    rng = np.random.default_rng(m * 31 + shape[2])
    outer, n, inner = shape
    base = _random(rng, shape, dtype)
    idx = rng.integers(-n, n, (outer, m, inner)).astype(np.int64)
    upd = _random(rng, idx.shape, dtype)
    code = getattr(gpu, red)
    assert code == getattr(cpu, red)
    want = base.copy()
    want_bad = cpu.scatter_elements(want, idx, upd, code)
    out = _dev(base)
    bad = gpu.scatter_elements(out, _dev(idx), _dev(upd), code)
    assert want_bad == -1 and bad == -1
    np.testing.assert_array_equal(out.copy_to_host(), want)


def test_scatter_elements_bad_index():
    base = np.zeros((2, 3, 2), np.float32)
    idx = np.zeros((2, 2, 2), np.int64)
    idx[1, 1, 0] = -4
    idx[1, 0, 1] = 3
    want_bad = cpu.scatter_elements(base.copy(), idx, np.ones(idx.shape, np.float32), 0)
    bad = gpu.scatter_elements(_dev(base), _dev(idx), _dev(np.ones(idx.shape, np.float32)), 0)
    assert want_bad == (1 * 2 + 0) * 2 + 1
    assert bad == want_bad


# -- gather_nd / scatter_nd ----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint16])
@pytest.mark.parametrize(
    "nb, dims, nn, s", [(1, (1,), 1, 1), (2, (3, 4), 5, 6), (1, (2, 3, 2), 40, 1), (3, (), 2, 5)]
)
def test_gather_nd(dtype, nb, dims, nn, s):
    rng = np.random.default_rng(nn + s + len(dims))
    m = int(np.prod(dims))
    k = len(dims)
    data = _random(rng, (nb, m, s), dtype)
    idx = np.stack([rng.integers(-d, d, (nb, nn)) for d in dims], axis=-1) if k else None
    idx = np.zeros((nb, nn, 0), np.int64) if idx is None else idx.astype(np.int64)
    dims_a = np.array(dims, np.int64)
    want = np.zeros((nb, nn, s), dtype)
    want_bad = cpu.gather_nd(data, idx, dims_a, want)
    out = cuda.device_array((nb, nn, s), dtype)
    bad = gpu.gather_nd(_dev(data), _dev(idx), dims_a, out)
    assert want_bad == -1 and bad == -1
    np.testing.assert_array_equal(out.copy_to_host(), want)


def test_gather_nd_bad_index():
    data = np.ones((2, 6, 3), np.float32)
    idx = np.zeros((2, 4, 2), np.int64)
    idx[1, 3, 0] = 2  # dims (2, 3): 2 is out of range on the first axis
    idx[1, 1, 1] = -4  # earlier
    dims = np.array([2, 3], np.int64)
    want_bad = cpu.gather_nd(data, idx, dims, np.zeros((2, 4, 3), np.float32))
    bad = gpu.gather_nd(_dev(data), _dev(idx), dims, cuda.device_array((2, 4, 3), np.float32))
    assert want_bad == (1 * 4 + 1) * 2 + 1
    assert int(bad) == want_bad


@pytest.mark.parametrize("red", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("dims, nn, s", [((1,), 1, 1), ((3, 2), 12, 5), ((4,), 9, 300)])
def test_scatter_nd(red, dtype, dims, nn, s):
    rng = np.random.default_rng(nn * 3 + s)
    m = int(np.prod(dims))
    base = _random(rng, (m, s), dtype)
    idx = np.stack([rng.integers(-d, d, nn) for d in dims], axis=-1).astype(np.int64)
    upd = _random(rng, (nn, s), dtype)
    dims_a = np.array(dims, np.int64)
    code = getattr(gpu, red)
    want = base.copy()
    want_bad = cpu.scatter_nd(want, idx, dims_a, upd, code)
    out = _dev(base)
    bad = gpu.scatter_nd(out, _dev(idx), dims_a, _dev(upd), code)
    assert want_bad == -1 and bad == -1
    np.testing.assert_array_equal(out.copy_to_host(), want)


def test_scatter_nd_bad_index():
    base = np.zeros((6, 2), np.float32)
    idx = np.array([[0, 1], [1, 3], [5, 0]], np.int64)  # dims (2, 3)
    dims = np.array([2, 3], np.int64)
    upd = np.ones((3, 2), np.float32)
    want_bad = cpu.scatter_nd(base.copy(), idx, dims, upd, 0)
    bad = gpu.scatter_nd(_dev(base), _dev(idx), dims, _dev(upd), 0)
    assert want_bad == 3
    assert bad == want_bad


# -- one_hot -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("outer, depth, inner", [(1, 1, 1), (3, 5, 4), (2, 11, 37)])
def test_one_hot(dtype, outer, depth, inner):
    rng = np.random.default_rng(depth + inner)
    idx = rng.integers(-depth - 2, depth + 2, (outer, inner)).astype(np.int64)
    off, on = dtype(-1), dtype(3)
    want = np.zeros((outer, depth, inner), dtype)
    cpu.one_hot(idx, depth, off, on, want)
    out = cuda.device_array(want.shape, dtype)
    gpu.one_hot(_dev(idx), depth, off, on, out)
    np.testing.assert_array_equal(out.copy_to_host(), want)


# -- transpose_tiles -----------------------------------------------------------------------------
def _params_3d(na, nl, nj):
    """x (na, nl, nj) by perm (0, 2, 1): y (na, nj, nl)."""
    dims = np.array([1, na, nj, nl], np.int64)
    xs = np.array([0, nl * nj, 1, nj], np.int64)
    ys = np.array([0, nj * nl, nl], np.int64)
    return (na, nl, nj), (0, 2, 1), dims, xs, ys


def _params_4d(b, s, h, d):
    """x (b, s, h, d) by perm (0, 2, 3, 1): y (b, h, d, s), a K^T."""
    dims = np.array([b, h, d, s], np.int64)
    xs = np.array([s * h * d, d, 1, h * d], np.int64)
    ys = np.array([h * d * s, d * s, s], np.int64)
    return (b, s, h, d), (0, 2, 3, 1), dims, xs, ys


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.float64, np.int16])
@pytest.mark.parametrize(
    "params",
    [_params_3d(1, 2, 3), _params_3d(2, 33, 5), _params_3d(1, 40, 70), _params_4d(2, 3, 2, 35)],
)
def test_transpose_tiles(dtype, params):
    shape, perm, dims, xs, ys = params
    rng = np.random.default_rng(int(np.prod(shape)))
    x = _random(rng, shape, dtype)
    want = np.zeros(x.size, dtype)
    cpu.transpose_tiles(x.reshape(-1), want, dims, xs, ys)
    np.testing.assert_array_equal(want, x.transpose(perm).reshape(-1))  # the twin's contract
    y = cuda.device_array(x.size, dtype)
    gpu.transpose_tiles(_dev(x.reshape(-1)), y, dims, xs, ys)
    np.testing.assert_array_equal(y.copy_to_host(), want)


# -- resize.interp_axis --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "outer, n, inner, m, k", [(1, 1, 1, 1, 1), (2, 5, 1, 9, 2), (3, 4, 6, 7, 4), (1, 8, 40, 3, 2)]
)
def test_interp_axis(dtype, outer, n, inner, m, k):
    rng = np.random.default_rng(outer + n + inner + m + k)
    x = rng.standard_normal((outer, n, inner)).astype(dtype)
    idx = rng.integers(0, n, (m, k)).astype(np.int64)
    w = rng.random((m, k)).astype(dtype)
    oob = (rng.random(m) < 0.3).astype(np.uint8)
    extrapolation = 2.5
    want = np.zeros((outer, m, inner), dtype)
    cpu_resize.interp_axis(x, idx, w, oob, extrapolation, want)
    out = cuda.device_array(want.shape, dtype)
    gpu_resize.interp_axis(_dev(x), _dev(idx), _dev(w), _dev(oob), extrapolation, out)
    # sums of at most four products: a contracted multiply-add is within an ulp or two
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(out.copy_to_host(), want, rtol=tol, atol=tol)


# -- compile-only through NVVM -------------------------------------------------------------------
_COMPILE = textwrap.dedent(
    """
    import os, sys
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    sys.path.insert(0, {root!r})
    from numba import cuda, types as t
    from onnxjit.kernels.cuda import tensor as g, resize as r

    def arr(dt, nd):
        return t.Array(dt, nd, "C")

    i64 = t.int64
    count = 0
    def ptx(fn, sig):
        global count
        cuda.compile_ptx(fn.py_func, sig, cc=(8, 0))
        count += 1

    ptx(g._flag_init, (arr(i64, 1),))
    ptx(g._wrap_k, (arr(i64, 1), i64, arr(i64, 1), arr(i64, 1)))
    for dt in (t.float32, t.float16, t.uint8, t.uint16, t.uint32, t.uint64, t.int64, t.boolean):
        a3 = arr(dt, 3)
        ptx(g._gather_axis_k, (a3, arr(i64, 1), a3))
        ptx(g._gather_elements_k, (a3, arr(i64, 3), a3, arr(i64, 1)))
        ptx(g._gather_nd_k, (a3, arr(i64, 3), t.UniTuple(i64, 2), a3, arr(i64, 1)))
        ptx(g._one_hot_k, (arr(i64, 2), i64, dt, dt, a3))
    for dt in (t.float32, t.float64, t.float16, t.int32, t.int64, t.uint8, t.uint64):
        ptx(g._scatter_elements_k, (arr(dt, 3), arr(i64, 3), arr(dt, 3), i64, arr(i64, 1)))
        ptx(g._scatter_nd_k,
            (arr(dt, 2), arr(i64, 2), t.UniTuple(i64, 3), arr(dt, 2), i64, arr(i64, 1)))
    for width, dt in ((1, t.uint8), (2, t.uint16), (4, t.uint32), (8, t.uint64)):
        ptx(g._transpose_kernel(width), (arr(dt, 1), arr(dt, 1)) + (i64,) * 11)
    for dt in (t.float32, t.float64, t.float16):
        ptx(r._interp_axis_k,
            (arr(dt, 3), arr(i64, 2), arr(dt, 2), arr(t.uint8, 1), dt, arr(dt, 3)))
    print("compiled", count)
    """
)


def test_kernels_compile_through_nvvm():
    out = run_without_simulator(["-c", _COMPILE.format(root=ROOT)])
    assert "compiled 55" in out, out
