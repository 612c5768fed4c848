"""Plans on the CUDA backend: placement, copies, device feeds (numba-cuda's simulator).

Oracle: onnxruntime's CPU provider on the same model and feeds. Placement is read through
``InferenceSession.placement()``, the public listing of where each node runs.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

cuda = pytest.importorskip(
    "numba.cuda", reason="numba-cuda is not installed (pip install 'onnxjit[cuda]')"
)
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle")

import onnxjit  # noqa: E402

F = TensorProto.FLOAT
CUDA = ["CUDAExecutionProvider", "CPUExecutionProvider"]


def _model(nodes, inputs, outputs, inits=(), opset=17) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


def _ort(model: bytes, feed: dict) -> list[np.ndarray]:
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return sess.run(None, feed)


def _session(model: bytes) -> onnxjit.InferenceSession:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # placement warnings: tested below
        return onnxjit.InferenceSession(model, providers=CUDA)


def _chain() -> bytes:
    w = np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5)
    return _model(
        [
            helper.make_node("Add", ["x", "w"], ["a"]),
            helper.make_node("Relu", ["a"], ["r"]),
            helper.make_node("Softmax", ["r"], ["y"], axis=-1),
        ],
        [helper.make_tensor_value_info("x", F, ["n", 5])],
        [helper.make_tensor_value_info("y", F, ["n", 5])],
        [numpy_helper.from_array(w[:1], "w")],
    )


def test_the_cuda_provider_is_used_and_nodes_run_on_the_device():
    model = _chain()
    sess = _session(model)
    assert sess.get_providers()[0] == "CUDAExecutionProvider"
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    for _ in range(2):  # the planning run, then the plan's
        got = sess.run(None, {"x": x})[0]
        assert isinstance(got, np.ndarray)
        np.testing.assert_allclose(got, _ort(model, {"x": x})[0], rtol=1e-5, atol=1e-7)
    places = sess.placement()
    nodes = [p for p in places if not p["copy"]]
    assert {p["op"].split("-")[0] for p in nodes} >= {"Softmax"}
    assert all(p["device"] == "cuda" for p in nodes), places
    # the feed goes to the device once; the constant w is uploaded with the plan, not per run
    assert [p["copy"] for p in places if p["copy"]] == ["to device"]


def test_a_node_without_a_cuda_kernel_runs_on_the_cpu_with_copies_and_one_warning():
    model = _model(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("NonZero", ["r"], ["nz"]),
            helper.make_node("Cast", ["nz"], ["c"], to=F),
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, [2, 4])],
        [helper.make_tensor_value_info("y", F, [2, None])],
    )
    x = np.array([[1, -1, 2, 0], [0, 3, -2, 4]], np.float32)
    with pytest.warns(RuntimeWarning, match=r"run on the CPU, not on CUDA.*NonZero"):
        sess = onnxjit.InferenceSession(model, providers=CUDA)
        got = sess.run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, _ort(model, {"x": x})[0])
    places = sess.placement()
    nonzero = [p for p in places if p["op"].startswith("NonZero") and not p["copy"]]
    assert [p["device"] for p in nonzero] == ["cpu"]
    assert "to host" in [p["copy"] for p in places]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per session: a new signature warns no more
        x2 = np.ones((2, 4), np.float32)
        np.testing.assert_array_equal(sess.run(None, {"x": x2})[0], _ort(model, {"x": x2})[0])


def test_a_device_array_feed_gives_the_host_feeds_results():
    model = _chain()
    sess = _session(model)
    x = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    want = _ort(model, {"x": x})[0]
    np.testing.assert_allclose(sess.run(None, {"x": cuda.to_device(x)})[0], want, rtol=1e-5)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-5)


def test_alternating_shapes_and_threads_on_the_device():
    model = _chain()
    sess = _session(model)
    rng = np.random.default_rng(2)
    feeds = [rng.standard_normal((n, 5)).astype(np.float32) for n in (2, 7, 2, 7)]
    wants = [_ort(model, {"x": x})[0] for x in feeds]
    for x, want in zip(feeds, wants):
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-5)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for _ in range(3):
                got = sess.run(None, {"x": feeds[k]})[0]
                np.testing.assert_allclose(got, wants[k], rtol=1e-5)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_outputs_bound_to_the_device_stay_there():
    model = _chain()
    sess = _session(model)
    x = np.random.default_rng(3).standard_normal((3, 5)).astype(np.float32)
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", onnxjit.OrtValue.ortvalue_from_numpy(x, "cuda", 0))
    binding.bind_output("y", "cuda")
    for _ in range(2):
        sess.run_with_iobinding(binding)
        y = binding.get_outputs()[0]
        assert y.device_name() == "cuda"
        np.testing.assert_allclose(y.numpy(), _ort(model, {"x": x})[0], rtol=1e-5, atol=1e-7)
    # the plan wrote the output on the device: no copy back to the host after its last node
    assert [p["copy"] for p in sess.placement() if p["copy"]] == []


@pytest.mark.parametrize(
    "op, axes, keepdims",
    [
        ("ReduceMean", [1], 1),
        ("ReduceL2", [2], 0),
        ("ReduceLogSumExp", [1, 2], 1),
        ("ReduceMax", [0], 0),
        ("ReduceSum", [-1], 1),
        ("ReduceLogSum", [0, 1], 0),
    ],
)
def test_reductions_run_on_the_device(op, axes, keepdims):
    x = np.random.default_rng(3).uniform(0.1, 2.0, (2, 3, 5)).astype(np.float32)
    rank = x.ndim if keepdims else x.ndim - len(axes)
    model = _model(
        [helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)],
        [helper.make_tensor_value_info("x", F, list(x.shape))],
        [helper.make_tensor_value_info("y", F, [f"d{i}" for i in range(rank)])],
        [numpy_helper.from_array(np.array(axes, np.int64), "axes")],
        opset=18,
    )
    sess = _session(model)
    want = _ort(model, {"x": x})[0]
    for _ in range(2):  # the planning run, then the plan's
        got = sess.run(None, {"x": x})[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    places = [p for p in sess.placement() if not p["copy"]]
    assert [(p["op"].split("-")[0], p["device"]) for p in places] == [(op, "cuda")], places


@pytest.mark.parametrize("group, m, strides", [(2, 8, [1, 1]), (3, 9, [2, 1])])
def test_grouped_convolutions_run_on_the_device(group, m, strides):
    rng = np.random.default_rng(group)
    x = rng.standard_normal((1, 6, 5, 7)).astype(np.float32)
    w = rng.standard_normal((m, 6 // group, 3, 3)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    model = _model(
        [
            helper.make_node(
                "Conv", ["x", "w", "b"], ["c"], group=group, pads=[1, 0, 1, 2], strides=strides
            ),  # fmt: skip
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, list(x.shape))],
        [helper.make_tensor_value_info("y", F, ["n", "m", "h", "w"])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    sess = _session(model)
    want = _ort(model, {"x": x})[0]
    for _ in range(2):
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-5)
    places = [p for p in sess.placement() if not p["copy"]]
    assert places and all(p["device"] == "cuda" for p in places), places


def test_float16_elementwise_runs_on_the_device():
    # a float16 model's elementwise chain, and Casts into and out of float16
    h = TensorProto.FLOAT16
    model = _model(
        [
            helper.make_node("Cast", ["x"], ["x16"], to=h),
            helper.make_node("Mul", ["x16", "x16"], ["sq"]),
            helper.make_node("Erf", ["sq"], ["e"]),
            helper.make_node("Add", ["e", "b"], ["y16"]),
            helper.make_node("Cast", ["y16"], ["y"], to=F),
        ],
        [helper.make_tensor_value_info("x", F, [3, 5]), helper.make_tensor_value_info("b", h, [5])],
        [
            helper.make_tensor_value_info("y", F, [3, 5]),
            helper.make_tensor_value_info("y16", h, [3, 5]),
        ],
    )
    rng = np.random.default_rng(5)
    feed = {
        "x": rng.uniform(-2, 2, (3, 5)).astype(np.float32),
        "b": rng.uniform(-1, 1, 5).astype(np.float16),
    }
    sess = _session(model)
    want = _ort(model, feed)
    for _ in range(2):
        got = sess.run(None, feed)
        assert got[1].dtype == np.float16
        # float16 rounding of the intermediate values: one float16 ulp
        np.testing.assert_allclose(got[0], want[0], rtol=2e-3, atol=1e-3)
        np.testing.assert_allclose(got[1], want[1], rtol=2e-3, atol=1e-3)
    places = [p for p in sess.placement() if not p["copy"]]
    assert places and all(p["device"] == "cuda" for p in places), places


def test_a_qdq_matmul_stays_a_float_product_on_the_device():
    """The QDQ MatMul -> MatMulInteger rewrite is for the CPU (MatMulInteger has no CUDA
    kernel): on the CUDA provider the product runs on the device, with no copies back."""
    rng = np.random.default_rng(7)
    w = rng.integers(-127, 128, (24, 10)).astype(np.int8)
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.array(0.02, np.float32), "ws"),
        numpy_helper.from_array(np.array(1, np.int8), "wz"),
        numpy_helper.from_array(np.array(0.05, np.float32), "xs"),
        numpy_helper.from_array(np.array(128, np.uint8), "xz"),
    ]
    model = _model(
        [
            helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
            helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"]),
            helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"]),
            helper.make_node("MatMul", ["xf", "wf"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, [3, 24])],
        [helper.make_tensor_value_info("y", F, [3, 10])],
        inits,
    )
    x = rng.standard_normal((3, 24)).astype(np.float32)
    sess = _session(model)
    got = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(got, _ort(model, {"x": x})[0], rtol=1e-5, atol=1e-5)
    places = sess.placement()
    assert all(p["device"] == "cuda" for p in places if not p["copy"]), places
    assert [p["copy"] for p in places if p["copy"]] == ["to device"], places
