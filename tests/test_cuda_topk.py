"""TopK: the CUDA kernel against its CPU twin, and the lowering on both backends.

The CUDA launcher ``topk3`` (kernels/cuda/reduce.py) runs under numba-cuda's simulator on
device copies of small inputs and is compared with the CPU twin of the same name on the host
arrays. One-node TopK models (k an initializer, so the lowering binds the kernel) run through
onnxjit.InferenceSession with the CUDA provider (placement: the node runs on the device) and
with the CPU provider, compared with onnx's ReferenceEvaluator. A subprocess without the
simulator compiles the ``@cuda.jit`` kernel through NVVM.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import textwrap  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from cuda_compile import run_without_simulator  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

try:
    from numba import cuda
except ImportError as exc:  # pragma: no cover - depends on the environment
    pytest.skip(f"numba.cuda cannot be imported ({exc}): no CUDA tests", allow_module_level=True)

import onnxjit  # noqa: E402
from onnxjit.kernels.cpu import reduce as cpu_reduce  # noqa: E402
from onnxjit.kernels.cuda import reduce as gpu_reduce  # noqa: E402

CUDA = ["CUDAExecutionProvider", "CPUExecutionProvider"]
DTYPES = [np.float32, np.float64, np.int32, np.int64]


def _data(shape, dtype, seed, nan=False):
    """Small integers (many ties); with ``nan``, a few NaNs (float types)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, shape).astype(dtype)
    if nan and np.dtype(dtype).kind == "f":
        mask = rng.random(shape) < 0.2
        x[mask] = np.nan
    return x


def _gpu_topk(x, k, largest):
    dev_x = cuda.to_device(x)
    outer, _, inner = x.shape
    values = cuda.to_device(np.full((outer, k, inner), 99, x.dtype))
    indices = cuda.to_device(np.full((outer, k, inner), -1, np.int64))
    gpu_reduce.topk3(dev_x, k, largest, values, indices)
    cuda.synchronize()
    return values.copy_to_host(), indices.copy_to_host()


def _cpu_topk(x, k, largest):
    outer, _, inner = x.shape
    values = np.empty((outer, k, inner), x.dtype)
    indices = np.empty((outer, k, inner), np.int64)
    cpu_reduce.topk3(x, k, largest, values, indices)
    return values, indices


# (outer, n, inner), k: one element, k=1, k=n, n not a multiple of anything, inner > 1,
# outer > 1, and more lines than one block of 256 threads
KERNEL_CASES = [
    ((1, 1, 1), 1),
    ((1, 7, 1), 1),
    ((1, 7, 1), 7),
    ((2, 13, 3), 5),
    ((3, 11, 2), 11),
    ((4, 5, 1), 2),
    ((1, 3, 300), 2),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("shape,k", KERNEL_CASES)
def test_topk3_matches_the_cpu_twin(dtype, largest, shape, k):
    x = _data(shape, dtype, 7, nan=True)
    want_v, want_i = _cpu_topk(x, k, largest)
    got_v, got_i = _gpu_topk(x, k, largest)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_array_equal(got_v, want_v)  # NaN in the same places counts as equal


@pytest.mark.parametrize("largest", [True, False])
def test_topk3_ties_and_nan_order_written_out(largest):
    # NaN ranks above every number, ties go to the lower index, -0.0 equals 0.0
    x = np.array([1, np.nan, 3, 3, np.nan, -0.0, 0.0, 1], np.float64).reshape(1, 8, 1)
    if largest:
        want_i = [1, 4, 2, 3, 0, 7, 5, 6]
    else:
        want_i = [5, 6, 0, 7, 2, 3, 1, 4]
    got_v, got_i = _gpu_topk(x, 8, largest)
    assert got_i.ravel().tolist() == want_i
    np.testing.assert_array_equal(got_v.ravel(), x.ravel()[want_i])
    # k below n cuts the same order
    got_v, got_i = _gpu_topk(x, 3, largest)
    assert got_i.ravel().tolist() == want_i[:3]


@pytest.mark.parametrize("dtype", [np.int64, np.float32])
def test_topk3_extreme_values(dtype):
    # the type's extremes and infinities: no sentinel value may stand in for "empty"
    if np.dtype(dtype).kind == "i":
        info = np.iinfo(dtype)
        line = [info.min, 0, info.max, info.min, info.max]
    else:
        line = [-np.inf, 0, np.inf, -np.inf, np.inf]
    x = np.array(line, dtype).reshape(1, 5, 1)
    for largest in (True, False):
        want_v, want_i = _cpu_topk(x, 3, largest)
        got_v, got_i = _gpu_topk(x, 3, largest)
        np.testing.assert_array_equal(got_i, want_i)
        np.testing.assert_array_equal(got_v, want_v)


def test_topk3_k0_and_empty_launch_nothing():
    for shape, k in (((2, 4, 3), 0), ((0, 4, 3), 2), ((2, 4, 0), 2)):
        x = np.zeros(shape, np.float32)
        got_v, got_i = _gpu_topk(x, k, True)
        assert got_v.shape == (shape[0], k, shape[2])
        assert (got_i == -1).all()  # nothing written


# -- sessions ------------------------------------------------------------------------------
def _topk_model(shape, dtype, k, axis, largest=1, opset=11) -> bytes:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    attrs = {"axis": axis}
    if opset >= 11:
        attrs["largest"] = largest
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], **attrs)
    out_shape = list(shape)
    out_shape[axis] = k
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", elem, list(shape))],
        [
            helper.make_tensor_value_info("v", elem, out_shape),
            helper.make_tensor_value_info("i", TensorProto.INT64, out_shape),
        ],
        [numpy_helper.from_array(np.array([k], np.int64), "k")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


def _reference(model: bytes, x: np.ndarray) -> list[np.ndarray]:
    return ReferenceEvaluator(model).run(None, {"x": x})


def _bound_ops(sess) -> set[str]:
    """Op types the latest plan runs through a bound kernel (not the implementation)."""
    return {s["op_type"] for s in sess.stats()["plans"][-1]["steps"] if not s["generic"]}


def _check(sess, model, x):
    want = _reference(model, x)
    for _ in range(2):  # the planning run, then the plan's
        got = sess.run(None, {"x": x})
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])
        assert got[0].dtype == x.dtype and got[1].dtype == np.int64


# (shape, axis, k, largest): last axis, middle axis (inner > 1), negative axis, k = n, k = 1,
# smallest first
SESSION_CASES = [
    ((3, 7), -1, 3, 1),
    ((2, 6, 4), 1, 4, 1),
    ((2, 6, 4), -2, 2, 0),
    ((4, 5), 0, 4, 0),
    ((9,), 0, 9, 1),
    ((3, 5, 2), -1, 1, 0),
]


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("shape,axis,k,largest", SESSION_CASES)
def test_topk_runs_on_the_device(dtype, shape, axis, k, largest):
    model = _topk_model(shape, dtype, k, axis, largest)
    x = _data(shape, dtype, 11)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a node left on the CPU warns
        sess = onnxjit.InferenceSession(model, providers=CUDA)
        _check(sess, model, x)
    topk = [p for p in sess.placement() if p["op"].startswith("TopK") and not p["copy"]]
    assert [p["device"] for p in topk] == ["cuda"], sess.placement()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis,k,largest", SESSION_CASES)
def test_topk_lowered_on_the_cpu(dtype, shape, axis, k, largest):
    model = _topk_model(shape, dtype, k, axis, largest)
    sess = onnxjit.InferenceSession(model, providers=["CPUExecutionProvider"])
    _check(sess, model, _data(shape, dtype, 12))
    assert "TopK" in _bound_ops(sess)  # the lowering's kernel, not the implementation


def test_topk_version_10_lowered_with_nan():
    # opset 10 (largest only); NaN ranks first, as in onnxruntime and the implementation
    x = np.array([[1, np.nan, 3, 3, -2], [0, 0, np.nan, np.nan, 5]], np.float32)
    model = _topk_model(x.shape, np.float32, 3, -1, opset=10)
    for providers in (["CPUExecutionProvider"], CUDA):
        sess = onnxjit.InferenceSession(model, providers=providers)
        for _ in range(2):
            v, i = sess.run(None, {"x": x})
            np.testing.assert_array_equal(i, [[1, 2, 3], [2, 3, 4]])
            np.testing.assert_array_equal(v, [[np.nan, 3, 3], [np.nan, np.nan, 5]])


def test_topk_k0_and_k_too_large_keep_the_implementation():
    # k = 0: empty outputs; k > n: the implementation's error, on either provider
    x = _data((3, 4), np.float32, 13)
    model = _topk_model(x.shape, np.float32, 0, 1)
    for providers in (["CPUExecutionProvider"], CUDA):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # k = 0 may stay on the CPU
            sess = onnxjit.InferenceSession(model, providers=providers)
            v, i = sess.run(None, {"x": x})
        assert v.shape == (3, 0) and i.shape == (3, 0) and i.dtype == np.int64
        sess.run(None, {"x": x})
        assert "TopK" not in _bound_ops(sess)
    model = _topk_model(x.shape, np.float32, 5, 1)
    for providers in (["CPUExecutionProvider"], CUDA):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            sess = onnxjit.InferenceSession(model, providers=providers)
            with pytest.raises(Exception, match=r"k = 5 is outside \[0, 4\]"):
                sess.run(None, {"x": x})


# -- NVVM ----------------------------------------------------------------------------------
_COMPILE_SCRIPT = textwrap.dedent(
    """
    from numba import cuda, types
    from onnxjit.kernels.cuda import reduce as red

    A = lambda dt, nd: types.Array(dt, nd, "C")
    n = 0
    for dt in (types.float32, types.float64, types.int32, types.int64):
        sig = (A(dt, 3), types.int64, types.boolean, A(dt, 3), A(types.int64, 3))
        assert ".entry" in cuda.compile_ptx(red._topk_cols.py_func, sig, cc=(8, 0))[0]
        n += 1
    print("compiled", n)
    """
)


def test_topk_kernel_compiles_through_nvvm():
    out = run_without_simulator(["-c", _COMPILE_SCRIPT], timeout=300)
    assert out.split()[-1] == "4"
