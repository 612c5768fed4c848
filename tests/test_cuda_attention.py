"""CUDA attention kernels (kernels/cuda/sdpa.py) against their CPU twins.

Under numba-cuda's simulator (set before numba.cuda is imported), ``attention_rows`` and
``heads`` run on small random inputs with fixed seeds (masks, Where conditions, broadcasts,
both K layouts, interleaved head layouts) and must agree with the CPU kernels to a few ulps
(the GPU's exp and summation order differ). A compile-only test runs every kernel through NVVM
(``cuda.compile_ptx``) in a subprocess without the simulator.
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

from onnxjit.backends.cpu import CPU  # noqa: E402
from onnxjit.kernels.cpu import sdpa as cpu  # noqa: E402
from onnxjit.kernels.cuda import sdpa as gpu  # noqa: E402
from onnxjit.kernels.cuda.runtime import set_stream  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL = {np.float32: 2e-5, np.float64: 1e-12}


@pytest.fixture(autouse=True)
def _run_stream():
    # the launchers queue on the run's stream, as the backend sets it around a run
    prev = set_stream(cuda.stream())
    yield
    set_stream(prev)


def _dummy(dtype) -> np.ndarray:
    return np.zeros((1, 1, 1, 1), dtype)


# -- attention_rows ------------------------------------------------------------------------------
ROW_CASES = [
    # nb, nh, sq, n, mask shape or None, cond shape or None
    (1, 1, 1, 1, None, None),
    (1, 2, 3, 5, (1, 1, 1, 5), None),
    (2, 2, 3, 130, (2, 1, 3, 130), (1, 2, 1, 130)),
    (1, 3, 2, 7, None, (1, 3, 2, 7)),
    (2, 1, 2, 257, (2, 1, 2, 257), (2, 1, 2, 257)),  # two passes of the row's threads
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ROW_CASES)
@pytest.mark.parametrize("where_first, swap", [(True, False), (False, True)])
def test_attention_rows(dtype, case, where_first, swap):
    nb, nh, sq, n, mshape, cshape = case
    rng = np.random.default_rng(nb * 100 + n)
    s = rng.standard_normal((nb * nh * sq, n)).astype(dtype) * 3
    mask = _dummy(dtype) if mshape is None else rng.standard_normal(mshape).astype(dtype)
    cond = _dummy(np.bool_) if cshape is None else rng.random(cshape) < 0.7
    args = (nh, sq, mask, cond, mshape is not None, cshape is not None, dtype(0.37),
            dtype(-1e4), swap, where_first, False)  # fmt: skip
    want = s.copy()
    cpu.attention_rows(want, *args)
    got = cuda.to_device(s)
    dargs = list(args)
    dargs[2], dargs[3] = cuda.to_device(mask), cuda.to_device(cond)
    gpu.attention_rows(got, *dargs)
    np.testing.assert_allclose(got.copy_to_host(), want, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("where_first", [True, False])
def test_attention_rows_one_column_masks_broadcast_along_the_row(where_first):
    # a mask fed per run reaches the device kernel unwidened (one column); the CPU twin gets
    # it widened to the row's length
    nb, nh, sq, n = 2, 2, 3, 9
    rng = np.random.default_rng(7)
    s = rng.standard_normal((nb * nh * sq, n)).astype(np.float32)
    mask = rng.standard_normal((nb, 1, sq, 1)).astype(np.float32)
    cond = rng.random((1, nh, sq, 1)) < 0.5
    tail = (np.float32(0.5), np.float32(-1e4), False, where_first, False)
    want = s.copy()
    wide = [np.ascontiguousarray(np.broadcast_to(a, a.shape[:3] + (n,))) for a in (mask, cond)]
    cpu.attention_rows(want, nh, sq, *wide, True, True, *tail)
    got = cuda.to_device(s)
    gpu.attention_rows(got, nh, sq, cuda.to_device(mask), cuda.to_device(cond), True, True,
                       *tail)  # fmt: skip
    np.testing.assert_allclose(got.copy_to_host(), want, rtol=TOL[np.float32], atol=1e-7)


@pytest.mark.parametrize("nan_zero", [False, True])
def test_attention_rows_nan_rules(nan_zero):
    # row 0 fully masked by Where with -inf (NaN, or 0 with nan_zero); row 1 holds a NaN;
    # row 2 is ordinary: the CPU twin's NaN rules, on host masks (the absent-mask stand-in)
    s = np.array([[1.0, 2.0, 3.0], [0.5, np.nan, 1.0], [0.1, 0.2, 0.3]], np.float32)
    cond = np.array([[False] * 3, [True] * 3, [True] * 3]).reshape(1, 1, 3, 3)
    args = (1, 3, _dummy(np.float32), cond, False, True, np.float32(1.0),
            np.float32(-np.inf), False, True, nan_zero)  # fmt: skip
    want = s.copy()
    cpu.attention_rows(want, *args)
    got = cuda.to_device(s)
    gpu.attention_rows(got, *args)
    got = got.copy_to_host()
    for r in (0, 1):  # the CPU twin's rule, which the comparison below then holds the GPU to
        assert (want[r] == 0).all() if nan_zero else np.isnan(want[r]).all()
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)  # NaN where want is NaN


# -- heads ---------------------------------------------------------------------------------------
def _strides(shape, bshd):
    """(batch, head, row) element strides, 0 where the dim broadcasts (the CPU twin's)."""
    if bshd:
        nb, s, nh, d = shape
        return np.array([s * nh * d if nb > 1 else 0, d if nh > 1 else 0, nh * d], np.int64)
    nb, nh, s, d = (1,) * (4 - len(shape)) + tuple(shape)
    return np.array([nh * s * d if nb > 1 else 0, s * d if nh > 1 else 0, d], np.int64)


HEAD_CASES = [
    # nb, nh, sq, sk, d, dv, k_given_t, q_bshd, q broadcast over batch, y_bshd, masks
    (1, 1, 1, 1, 1, 1, False, False, False, False, False),
    (2, 3, 1, 9, 4, 5, False, False, False, False, True),  # a decoding step (sq <= BLAS_ROWS)
    (1, 2, 6, 10, 8, 3, True, False, False, False, True),
    (2, 2, 5, 7, 4, 4, False, True, False, True, False),
    (2, 1, 3, 130, 3, 2, False, False, True, False, True),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", HEAD_CASES)
def test_heads(dtype, case):
    nb, nh, sq, sk, d, dv, k_t, q_bshd, q_bcast, y_bshd, with_masks = case
    rng = np.random.default_rng(sq * 7 + sk + d)
    qshape = (1 if q_bcast else nb, sq, nh, d) if q_bshd else (1 if q_bcast else nb, nh, sq, d)
    q = rng.standard_normal(qshape).astype(dtype)
    kshape = (nb, nh, d, sk) if k_t else (nb, nh, sk, d)
    k = rng.standard_normal(kshape).astype(dtype)
    v = rng.standard_normal((nb, nh, sk, dv)).astype(dtype)
    qs, ks, vs = _strides(qshape, q_bshd), _strides(kshape, False), _strides(v.shape, False)
    if y_bshd:
        yshape, ys = (nb, sq, nh, dv), np.array([sq * nh * dv, dv, nh * dv], np.int64)
    else:
        yshape, ys = (nb, nh, sq, dv), np.array([nh * sq * dv, sq * dv, dv], np.int64)
    if with_masks:
        mask = rng.standard_normal((nb, 1, sq, sk)).astype(dtype)
        cond = rng.random((1, nh, 1, sk)) < 0.8
    else:
        mask, cond = _dummy(dtype), _dummy(np.bool_)
    scale, opts = dtype(0.5), (dtype(-np.inf), False, True, True)
    rows = nb * nh * sq

    CPU.blas_ready()  # the CPU twin's Q K^T goes through BLAS for a few query rows
    y_want = np.zeros(int(np.prod(yshape)), dtype)
    s_want = np.zeros((rows, sk), dtype)
    masks = (mask, cond, with_masks, with_masks)
    cpu.heads(nb * nh, q.reshape(-1), qs, k.reshape(-1), ks, k_t, v.reshape(-1), vs, s_want,
              y_want, ys, nh, sq, d, dv, masks, scale, opts)  # fmt: skip

    y = cuda.device_array(y_want.size, dtype)
    s = cuda.device_array((rows, sk), dtype)
    dmasks = (cuda.to_device(mask), cuda.to_device(cond), with_masks, with_masks)
    gpu.heads(nb * nh, cuda.to_device(q.reshape(-1)), qs, cuda.to_device(k.reshape(-1)), ks,
              k_t, cuda.to_device(v.reshape(-1)), vs, s, y, ys, nh, sq, d, dv, dmasks, scale,
              opts)  # fmt: skip
    tol = TOL[dtype] * 5  # two contractions of a few terms around the softmax
    np.testing.assert_allclose(s.copy_to_host(), s_want, rtol=tol, atol=tol)
    np.testing.assert_allclose(y.copy_to_host(), y_want, rtol=tol, atol=tol)


def test_blas_rows_is_the_cpu_twins():
    # the lowering decides on it through whichever backend it lowers for
    assert gpu.BLAS_ROWS == cpu.BLAS_ROWS


# -- compile-only through NVVM -------------------------------------------------------------------
_COMPILE = textwrap.dedent(
    """
    import os, sys
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    sys.path.insert(0, {root!r})
    from numba import cuda, types as t
    from onnxjit.kernels.cuda import sdpa

    i64, b = t.int64, t.boolean
    count = 0
    for dt in (t.float32, t.float64):
        rows_k, scores_k, pv_k = sdpa._kernels(dt)
        a1, a2 = t.Array(dt, 1, "C"), t.Array(dt, 2, "C")
        sigs = [
            (rows_k, (a2, i64, i64, t.Array(dt, 4, "C"), t.Array(b, 4, "C"), b, b, dt, dt, b,
                      b, b)),
            (scores_k, (a1, i64, i64, i64, a1, i64, i64, i64, b, a2, i64, i64, i64)),
            (pv_k, (a2, a1, i64, i64, i64, a1, i64, i64, i64, i64, i64, i64)),
        ]
        for fn, sig in sigs:
            cuda.compile_ptx(fn.py_func, sig, cc=(8, 0))
            count += 1
    print("compiled", count)
    """
)


def test_kernels_compile_through_nvvm():
    out = run_without_simulator(["-c", _COMPILE.format(root=ROOT)])
    assert "compiled 6" in out, out
