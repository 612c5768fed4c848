"""The CUDA provider's user-facing API: provider arguments and fallback (onnxjit/providers.py),
device feeds and OrtValue (onnxjit/device.py, onnxjit/ortvalue.py) and io_binding
(onnxjit/iobinding.py), under numba-cuda's simulator.

Oracle: onnxruntime's CPU session (and its OrtValue / IOBinding) on the same model and data.
A machine without a usable GPU is simulated by replacing the public seam
``onnxjit.providers.cuda_unavailable_reason``.
"""

from __future__ import annotations

# The simulator is chosen when numba.cuda is first imported: before onnxjit or numba.cuda.
import importlib.util  # noqa: E402
import os
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import pytest  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

try:
    from numba import cuda
except Exception as e:  # pragma: no cover - depends on the install
    pytest.skip(
        f"numba.cuda cannot be imported ({e}): install onnxjit[test]", allow_module_level=True
    )

import onnxjit  # noqa: E402
from onnxjit import device, providers  # noqa: E402
from onnxjit.errors import InvalidInputError, UnsupportedOperatorError  # noqa: E402

pytestmark = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") != "1",
    reason="these tests run the CUDA path on numba-cuda's simulator (NUMBA_ENABLE_CUDASIM=1)",
)

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
NO_GPU = "no GPU in this test"


def small_model() -> onnx.ModelProto:
    """y = Relu(x @ w + b), z = x * s (s a second input); x [N, 4], w [4, 3]."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["xwb"]),
        helper.make_node("Relu", ["xwb"], ["y"]),
        helper.make_node("Mul", ["x", "s"], ["z"]),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", f, ["N", 4]),
            helper.make_tensor_value_info("s", f, ["N", 4]),
        ],
        [
            helper.make_tensor_value_info("y", f, ["N", 3]),
            helper.make_tensor_value_info("z", f, ["N", 4]),
        ],
        [w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


MODEL = small_model()


def feeds(n: int = 5, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((n, 4)).astype(np.float32),
        "s": rng.standard_normal((n, 4)).astype(np.float32),
    }


def ort_session() -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(MODEL.SerializeToString(), so, providers=[CPU])


def want(feed: dict[str, np.ndarray], names=None) -> list[np.ndarray]:
    return ort_session().run(names, feed)


def session(providers_arg=(CUDA, CPU), **kwargs) -> onnxjit.InferenceSession:
    return onnxjit.InferenceSession(MODEL, providers=list(providers_arg), **kwargs)


def assert_outputs(got, expected) -> None:
    assert len(got) == len(expected)
    for g, w in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-6)


@pytest.fixture
def no_gpu(monkeypatch):
    """A machine where CUDA cannot run (the seam onnxjit.providers documents)."""
    monkeypatch.setattr(providers, "cuda_unavailable_reason", lambda device_id=0: NO_GPU)


class CaiBuffer:
    """A foreign device buffer: only ``__cuda_array_interface__`` (as CuPy or a torch CUDA
    tensor expose it). Under the simulator device memory is host memory, so the pointer is
    the address of a numpy array's data."""

    def __init__(self, host: np.ndarray) -> None:
        self.host = host
        self.__cuda_array_interface__ = {
            "shape": host.shape,
            "typestr": host.dtype.str,
            "data": (host.__array_interface__["data"][0], False),
            "strides": None if host.flags.c_contiguous else host.strides,
            "version": 3,
        }


# -- providers ------------------------------------------------------------------------------


def test_cuda_is_chosen_on_a_usable_device_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sess = session()
    assert sess.get_providers() == [CUDA, CPU]
    choice = sess._device
    assert (choice.provider, choice.device_id, choice.reason) == (CUDA, 0, "requested")
    assert choice.is_cuda and choice.simulator
    assert sess.get_provider_options() == {CUDA: {"device_id": "0"}, CPU: {}}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"providers": [(CUDA, {"device_id": 0}), CPU]},
        {"providers": [(CUDA, {"device_id": "0"}), (CPU, {})]},
        {"providers": [CUDA, CPU], "provider_options": [{"device_id": 0}, {}]},
    ],
)
def test_cuda_with_device_id_in_each_spelling(kwargs):
    sess = onnxjit.InferenceSession(MODEL, **kwargs)
    assert sess.get_providers() == [CUDA, CPU]
    assert sess._device.device_id == 0
    assert sess.get_provider_options()[CUDA]["device_id"] == "0"  # strings, as onnxruntime


def test_available_providers_and_device_on_the_simulator():
    assert onnxjit.get_available_providers() == [CUDA, CPU]
    assert onnxjit.get_device() == "GPU"
    assert providers.cuda_unavailable_reason(0) is None


def test_no_gpu_falls_back_to_the_next_provider_with_one_warning(no_gpu):
    with pytest.warns(RuntimeWarning) as record:
        sess = session()
    messages = [str(w.message) for w in record if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1
    assert messages[0] == f"{CUDA} is not available: {NO_GPU}; using {CPU} instead"
    assert sess.get_providers() == [CPU]
    assert sess._device.provider == CPU and not sess._device.is_cuda
    assert NO_GPU in sess._device.reason
    assert sess.get_provider_options() == ort_session().get_provider_options() == {CPU: {}}
    assert onnxjit.get_available_providers() == [CPU]
    assert onnxjit.get_device() == "CPU"
    feed = feeds()
    assert_outputs(sess.run(None, feed), want(feed))


def test_only_cuda_listed_and_unusable_is_an_error(no_gpu):
    with pytest.raises(RuntimeError, match=f"none of the providers.*{NO_GPU}.*add 'CPUExecution"):
        session([CUDA])


def test_device_id_out_of_range_names_the_devices_and_falls_back():
    with pytest.warns(RuntimeWarning, match=r"device_id 3 is out of range: this machine has 1 "):
        sess = onnxjit.InferenceSession(MODEL, providers=[(CUDA, {"device_id": 3}), CPU])
    assert sess.get_providers() == [CPU]
    with pytest.raises(RuntimeError, match="device_id 3 is out of range"):
        onnxjit.InferenceSession(MODEL, providers=[(CUDA, {"device_id": 3})])


def test_missing_numba_cuda_says_what_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "numba_cuda" else real(name, *a),
    )
    reason = providers.cuda_unavailable_reason(0)
    assert reason == 'numba-cuda is not installed; install it with pip install "onnxjit[cuda]"'
    with pytest.warns(RuntimeWarning, match=r'numba-cuda is not installed.*"onnxjit\[cuda\]"'):
        sess = session()
    assert sess.get_providers() == [CPU]


def test_unknown_cuda_option_is_refused_like_onnxruntime():
    with pytest.raises(ValueError, match=r"unknown CUDAExecutionProvider option \['devcie_id'\]"):
        onnxjit.InferenceSession(MODEL, providers=[(CUDA, {"devcie_id": 0}), CPU])


def test_tuning_options_are_accepted_and_reported_ignored():
    with pytest.warns(RuntimeWarning, match=r"\['cudnn_conv_algo_search', 'gpu_mem_limit'\].*"):
        sess = onnxjit.InferenceSession(
            MODEL,
            providers=[(CUDA, {"gpu_mem_limit": 2**30, "cudnn_conv_algo_search": "HEURISTIC"})],
        )
    assert sess.get_providers() == [CUDA, CPU]
    assert sess.get_provider_options()[CUDA] == {
        "gpu_mem_limit": str(2**30),
        "cudnn_conv_algo_search": "HEURISTIC",
        "device_id": "0",
    }


def test_user_stream_and_allocator_options_are_refused():
    with pytest.raises(UnsupportedOperatorError, match=r"\['has_user_compute_stream', 'user_"):
        onnxjit.InferenceSession(
            MODEL,
            providers=[(CUDA, {"has_user_compute_stream": "1", "user_compute_stream": "1234"})],
        )
    with pytest.raises(NotImplementedError, match="gpu_external_alloc"):
        onnxjit.InferenceSession(MODEL, providers=[(CUDA, {"gpu_external_alloc": "99"})])
    # their "off" values ask for nothing
    sess = onnxjit.InferenceSession(MODEL, providers=[(CUDA, {"has_user_compute_stream": "0"})])
    assert sess.get_providers() == [CUDA, CPU]


@pytest.mark.parametrize("bad", ["-1", "one", "1.5"])
def test_bad_device_id(bad):
    with pytest.raises(ValueError, match=f"device_id must be an integer >= 0, found '{bad}'"):
        onnxjit.InferenceSession(MODEL, providers=[(CUDA, {"device_id": bad}), CPU])


def test_onnxruntime_only_provider_is_skipped_with_a_warning():
    with pytest.warns(RuntimeWarning, match="TensorrtExecutionProvider is an onnxruntime provider"):
        sess = session(["TensorrtExecutionProvider", CUDA, CPU])
    assert sess.get_providers() == [CUDA, CPU]


def test_duplicate_provider_is_ignored_with_a_warning_like_onnxruntime():
    with pytest.warns(UserWarning, match="Duplicate provider"):
        ort.InferenceSession(MODEL.SerializeToString(), providers=[CPU, CPU])
    with pytest.warns(RuntimeWarning, match="duplicate provider 'CPUExecutionProvider' ignored"):
        sess = session([CPU, CPU])
    assert sess.get_providers() == [CPU]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"providers": CPU}, "providers should be a sequence"),
        ({"providers": [CPU], "provider_options": [{}, {}]}, "provider_options has 2 entries"),
        ({"providers": [(CPU, {})], "provider_options": [{}]}, "must be names only"),
        ({"providers": [(CPU,)]}, "names or \\(name, options dict\\) tuples"),
    ],
)
def test_malformed_provider_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        onnxjit.InferenceSession(MODEL, **kwargs)


def test_cpu_first_is_used_even_with_a_gpu():
    assert session([CPU, CUDA]).get_providers() == [CPU]
    assert onnxjit.InferenceSession(MODEL).get_providers() == [CPU]


# -- OrtValue ---------------------------------------------------------------------------------

DTYPES = [np.float32, np.float64, np.float16, np.int64, np.int32, np.uint8, np.bool_]
SHAPES = [(), (0, 3), (1,), (2, 3, 5)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("where", ["cpu", "cuda"])
def test_ortvalue_round_trip_matches_onnxruntime(dtype, shape, where):
    rng = np.random.default_rng(3)
    x = np.asarray(rng.standard_normal(shape) * 10).astype(dtype)
    got = onnxjit.OrtValue.ortvalue_from_numpy(x, where, 0)
    ref = ort.OrtValue.ortvalue_from_numpy(x)  # onnxruntime's CPU value describes the same data
    np.testing.assert_array_equal(got.numpy(), x)
    assert got.numpy().dtype == x.dtype
    assert got.device_name() == where
    assert list(got.shape()) == list(ref.shape())
    assert got.data_type() == ref.data_type()
    assert got.element_type() == ref.element_type()
    assert got.tensor_size_in_bytes() == ref.tensor_size_in_bytes()
    np.testing.assert_array_equal(np.asarray(got), x)


def test_cpu_ortvalue_shares_the_array_like_onnxruntime():
    x = np.zeros(4, np.float32)
    mine, theirs = onnxjit.OrtValue.ortvalue_from_numpy(x), ort.OrtValue.ortvalue_from_numpy(x)
    x[1] = 7
    np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    assert mine.numpy()[1] == 7
    assert mine.data_ptr() == theirs.data_ptr() == x.ctypes.data
    assert not hasattr(mine, "__cuda_array_interface__")


def test_cuda_ortvalue_is_a_copy_exposing_the_cuda_array_interface():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    v = onnxjit.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    x[0, 0] = -1  # the device copy does not see it
    assert v.numpy()[0, 0] == 0
    cai = v.__cuda_array_interface__
    assert cai["shape"] == (3, 4) and cai["typestr"] == "<f4" and cai["version"] == 3
    assert cai["data"][0] == v.data_ptr()
    # a consumer reading the interface sees the same memory (no copy)
    reader = type("Reader", (), {"__cuda_array_interface__": cai})()
    shared = device.as_device_array(reader)
    shared[1, 2] = 100
    assert v.numpy()[1, 2] == 100
    assert v.__dlpack_device__() == (device.KDL_CUDA, 0)
    assert "cuda" in repr(v)


def test_ortvalue_from_shape_and_type_and_update_inplace():
    v = onnxjit.OrtValue.ortvalue_from_shape_and_type([2, 3], TensorProto.INT64, "cuda", 0)
    assert v.data_type() == "tensor(int64)" and v.device_name() == "cuda"
    src = np.arange(6, dtype=np.int64).reshape(2, 3)
    ptr = v.data_ptr()
    v.update_inplace(src)
    np.testing.assert_array_equal(v.numpy(), src)
    assert v.data_ptr() == ptr
    w = onnxjit.OrtValue.ortvalue_from_shape_and_type((2, 3), np.int64)
    w.update_inplace(v)  # device -> host
    np.testing.assert_array_equal(w.numpy(), src)
    with pytest.raises(ValueError, match=r"needs shape \[2, 3\] and dtype int64"):
        v.update_inplace(np.zeros((3, 2), np.int64))


def test_ortvalue_device_errors():
    x = np.ones(3, np.float32)
    with pytest.raises(RuntimeError, match="CUDA device 2 cannot be used: device_id 2 is out"):
        onnxjit.OrtValue.ortvalue_from_numpy(x, "cuda", 2)
    with pytest.raises(ValueError, match="unsupported device type 'tpu'"):
        onnxjit.OrtValue.ortvalue_from_numpy(x, "tpu")


def test_ortvalue_from_dlpack_of_a_cpu_tensor_shares_memory():
    torch = pytest.importorskip("torch", reason="torch is in the test extra")
    t = torch.arange(5, dtype=torch.float32)
    v = onnxjit.OrtValue.from_dlpack(t)
    assert v.device_name() == "cpu"
    t[0] = 9
    assert v.numpy()[0] == 9


# -- device feeds ------------------------------------------------------------------------------


def test_numba_device_arrays_are_device_values_read_without_a_copy():
    x = np.arange(6, dtype=np.float32)
    dev = cuda.to_device(x)
    assert device.is_device_value(dev)
    assert device.as_device_array(dev) is dev
    np.testing.assert_array_equal(device.to_numpy(dev), x)


def test_cuda_array_interface_is_read_in_place():
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    buf = CaiBuffer(host)
    assert device.is_device_value(buf)
    dev = device.as_device_array(buf)
    dev[0, 0] = 50  # writes land in the producer's memory
    assert host[0, 0] == 50
    strided = host[:, ::2]
    np.testing.assert_array_equal(device.to_numpy(CaiBuffer(strided)), strided)


def test_torch_cpu_tensor_takes_the_host_path():
    torch = pytest.importorskip("torch", reason="torch is in the test extra")
    t = torch.arange(4, dtype=torch.float32)
    assert not device.is_device_value(t)
    assert device.is_tensor_object(t)
    arr = device.to_numpy(t)
    assert isinstance(arr, np.ndarray)
    t[0] = 3
    assert arr[0] == 3  # read in place (DLPack), not copied


def test_cuda_dlpack_without_an_array_interface_is_refused_on_the_simulator():
    class CudaOnlyDlpack:
        def __dlpack_device__(self):
            return (device.KDL_CUDA, 0)

        def __dlpack__(self, stream=None):
            raise AssertionError("not reached")

    assert device.is_device_value(CudaOnlyDlpack())
    with pytest.raises(TypeError, match="holds CUDA memory.*simulator cannot read"):
        device.as_device_array(CudaOnlyDlpack())


def test_to_device_and_back_on_a_stream():
    x = np.arange(20, dtype=np.float64).reshape(4, 5)[:, 1:4]  # not contiguous
    stream = cuda.stream()
    dev = device.to_device(x, stream)
    np.testing.assert_array_equal(device.to_host(dev, stream), x)


@pytest.mark.parametrize("kind", ["numba", "cai", "ortvalue", "torch_cpu"])
def test_run_accepts_device_and_foreign_feeds(kind):
    feed = feeds()

    def wrap(a):
        if kind == "numba":
            return cuda.to_device(a)
        if kind == "cai":
            return CaiBuffer(a)
        if kind == "ortvalue":
            return onnxjit.OrtValue.ortvalue_from_numpy(a, "cuda", 0)
        torch = pytest.importorskip("torch", reason="torch is in the test extra")
        return torch.from_numpy(a)

    got = session().run(None, {k: wrap(v) for k, v in feed.items()})
    assert all(type(g) is np.ndarray for g in got)
    assert_outputs(got, want(feed))


def test_torch_tensor_of_the_wrong_type_is_not_converted_silently():
    torch = pytest.importorskip("torch", reason="torch is in the test extra")
    feed = feeds()
    bad = {"x": torch.from_numpy(feed["x"]).to(torch.int64), "s": feed["s"]}
    with pytest.raises(InvalidInputError, match="expected element type tensor\\(float\\)"):
        session().run(None, bad)


def test_run_with_ort_values_matches_onnxruntime():
    feed = feeds()
    sess = session()
    values = {k: onnxjit.OrtValue.ortvalue_from_numpy(v, "cuda", 0) for k, v in feed.items()}
    got = sess.run_with_ort_values(["z"], values)
    ref_vals = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in feed.items()}
    ref = ort_session().run_with_ort_values(["z"], ref_vals)
    assert len(got) == len(ref) == 1
    np.testing.assert_allclose(got[0].numpy(), ref[0].numpy(), rtol=1e-6)


# -- io_binding --------------------------------------------------------------------------------


def test_io_binding_cpu_calls_match_onnxruntimes_io_binding():
    feed = feeds()
    results = []
    for sess in (session(), ort_session()):
        b = sess.io_binding()
        b.bind_cpu_input("x", feed["x"])
        b.bind_cpu_input("s", feed["s"])
        b.bind_output("z")
        b.bind_output("y", "cpu")
        sess.run_with_iobinding(b)
        outs = b.get_outputs()
        assert [o.device_name() for o in outs] == ["cpu", "cpu"]
        results.append(b.copy_outputs_to_cpu())
    assert_outputs(results[0], results[1])


def test_io_binding_device_inputs_and_outputs():
    feed = feeds(7)
    sess = session()
    b = sess.io_binding()
    x_dev = onnxjit.OrtValue.ortvalue_from_numpy(feed["x"], "cuda", 0)
    s_dev = onnxjit.OrtValue.ortvalue_from_numpy(feed["s"], "cuda", 0)
    b.bind_ortvalue_input("x", x_dev)
    # raw pointer binding, as users pass a torch/CuPy buffer's data_ptr()
    b.bind_input("s", "cuda", 0, np.float32, s_dev.shape(), s_dev.data_ptr())
    b.bind_output("y", "cuda", 0)
    b.bind_output("z", "cpu")
    sess.run_with_iobinding(b)
    y, z = b.get_outputs()
    assert (y.device_name(), z.device_name()) == ("cuda", "cpu")
    assert hasattr(y, "__cuda_array_interface__")
    assert_outputs(b.copy_outputs_to_cpu(), want(feed, ["y", "z"]))
    # rebinding an input changes the next run
    feed2 = feeds(7, seed=9)
    x_dev.update_inplace(feed2["x"])
    s_dev.update_inplace(feed2["s"])
    sess.run_with_iobinding(b)
    assert_outputs(b.copy_outputs_to_cpu(), want(feed2, ["y", "z"]))


def test_io_binding_writes_into_preallocated_outputs():
    feed = feeds(3)
    sess = session()
    b = sess.io_binding()
    b.bind_input("x", "cpu", 0, TensorProto.FLOAT, [3, 4], feed["x"].ctypes.data)
    b.bind_cpu_input("s", feed["s"])
    y_host = np.full((3, 3), np.nan, np.float32)
    b.bind_output("y", "cpu", 0, np.float32, y_host.shape, y_host.ctypes.data)
    z_dev = onnxjit.OrtValue.ortvalue_from_shape_and_type([3, 4], np.float32, "cuda", 0)
    b.bind_ortvalue_output("z", z_dev)
    sess.run_with_iobinding(b)
    y_want, z_want = want(feed, ["y", "z"])
    np.testing.assert_allclose(y_host, y_want, rtol=1e-5, atol=1e-6)  # written in place
    outs = b.get_outputs()
    assert outs[1] is z_dev
    np.testing.assert_allclose(z_dev.numpy(), z_want, rtol=1e-6)


def test_io_binding_errors():
    feed = feeds()
    sess = session()
    b = sess.io_binding()
    with pytest.raises(InvalidInputError, match="cannot bind input 'q'"):
        b.bind_cpu_input("q", feed["x"])
    with pytest.raises(InvalidInputError, match="cannot bind output 'q'"):
        b.bind_output("q")
    b.bind_cpu_input("x", feed["x"])
    b.bind_cpu_input("s", feed["s"])
    with pytest.raises(InvalidInputError, match="no output is bound"):
        sess.run_with_iobinding(b)
    with pytest.raises(ValueError, match="`element_type` and `shape` are to be provided"):
        b.bind_output("y", "cpu", 0, buffer_ptr=feed["x"].ctypes.data)
    small = onnxjit.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32)
    b.bind_ortvalue_output("y", small)
    with pytest.raises(InvalidInputError, match=r"bound to a buffer of shape \[2, 3\]"):
        sess.run_with_iobinding(b)
    with pytest.raises(ValueError, match="session that created it"):
        session().run_with_iobinding(b)
    b.clear_binding_outputs()
    b.bind_output("y")
    sess.run_with_iobinding(b)
    assert_outputs(b.copy_outputs_to_cpu(), want(feed, ["y"]))
    b.clear_binding_inputs()
    with pytest.raises(InvalidInputError, match="'x'.*missing"):
        sess.run_with_iobinding(b)
