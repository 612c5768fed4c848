"""Old operator versions that exporters of their era relied on (PyTorch's opset-6 exports).

Neither onnx's reference evaluator nor onnxruntime runs these versions, so the oracle is the
formula written directly in numpy.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit

RNG = np.random.default_rng(7)


def _run(node: onnx.NodeProto, opset: int, feeds: dict, out_shape, inits=()):
    graph = helper.make_graph(
        [node],
        "legacy",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, out_shape)],
        initializer=list(inits),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 4
    return onnxjit.InferenceSession(model.SerializeToString()).run(None, feeds)[0]


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 4), (2, 3, 4, 5)])
def test_prelu_6_slope_per_channel(shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    slope = RNG.random(3).astype(np.float32)
    got = _run(helper.make_node("PRelu", ["x", "s"], ["y"]), 6, {"x": x, "s": slope}, shape)
    channel = slope.reshape((1, 3) + (1,) * (len(shape) - 2))
    np.testing.assert_allclose(got, np.where(x >= 0, x, x * channel), rtol=1e-6)


def test_prelu_6_shared_slope():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    slope = np.array([0.25], np.float32)
    got = _run(helper.make_node("PRelu", ["x", "s"], ["y"]), 6, {"x": x, "s": slope}, x.shape)
    np.testing.assert_allclose(got, np.where(x > 0, x, 0.25 * x), rtol=1e-6)


def test_pow_1_broadcast_along_axis():
    x = RNG.random((2, 3, 4)).astype(np.float32) + 0.5
    e = np.array([1.0, 2.0, 0.5], np.float32)
    node = helper.make_node("Pow", ["x", "e"], ["y"], broadcast=1, axis=1)
    got = _run(node, 1, {"x": x, "e": e}, x.shape)
    np.testing.assert_allclose(got, x ** e[None, :, None], rtol=1e-6)


@pytest.mark.parametrize(
    "opset,extra", [(6, {"is_test": 1}), (6, {}), (1, {"consumed_inputs": [0]})]
)
def test_batchnorm_old_versions_normalise_with_given_statistics(opset, extra):
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    scale, bias, mean = (RNG.standard_normal(3).astype(np.float32) for _ in range(3))
    var = (RNG.random(3) + 0.5).astype(np.float32)
    inits = [
        numpy_helper.from_array(v, n)
        for v, n in ((scale, "s"), (bias, "b"), (mean, "m"), (var, "v"))
    ]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], **extra)
    got = _run(node, opset, {"x": x}, x.shape, inits)
    c = (1, 3, 1, 1)
    want = (x - mean.reshape(c)) / np.sqrt(var.reshape(c) + 1e-5) * scale.reshape(c)
    np.testing.assert_allclose(got, want + bias.reshape(c), rtol=1e-5, atol=1e-5)
