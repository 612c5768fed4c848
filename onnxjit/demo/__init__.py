"""The demo model shipped with the package (``onnxjit run`` with no model runs it).

A small image-classifier head: Conv -> BatchNorm -> Relu -> MaxPool -> Flatten -> Gemm ->
LayerNormalization -> Gelu-style MLP -> Softmax, with seeded random weights and a dynamic batch
dimension. ``build_demo_model()`` rebuilds it; the shipped file must equal its output (a test
checks this).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DEMO_PATH = Path(__file__).with_name("demo.onnx")


def build_demo_model(seed: int = 0) -> onnx.ModelProto:
    """Build the demo model with weights drawn from ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)

    def init(name: str, *shape: int, scale: float = 0.1) -> onnx.TensorProto:
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name
        )

    inits = [
        init("conv_w", 8, 3, 3, 3, scale=0.3),
        init("conv_b", 8),
        numpy_helper.from_array((1 + 0.1 * rng.standard_normal(8)).astype(np.float32), "bn_scale"),
        init("bn_bias", 8),
        init("bn_mean", 8),
        numpy_helper.from_array((0.5 + rng.random(8)).astype(np.float32), "bn_var"),
        init("fc1_w", 8 * 8 * 8, 64, scale=0.05),
        init("fc1_b", 64),
        numpy_helper.from_array(np.ones(64, np.float32), "ln_scale"),
        numpy_helper.from_array(np.zeros(64, np.float32), "ln_bias"),
        init("fc2_w", 64, 10, scale=0.2),
        init("fc2_b", 10),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(2**-0.5, np.float32), "rsqrt2"),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv_w", "conv_b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization", ["c", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["bn"]
        ),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], axis=1),
        helper.make_node("MatMul", ["f", "fc1_w"], ["h0"]),
        helper.make_node("Add", ["h0", "fc1_b"], ["h1"]),
        helper.make_node(
            "LayerNormalization", ["h1", "ln_scale", "ln_bias"], ["h2"], axis=-1, epsilon=1e-5
        ),
        # GELU written with primitive ops, as exporters emit it: 0.5 * x * (1 + erf(x / sqrt 2))
        helper.make_node("Mul", ["h2", "rsqrt2"], ["g0"]),
        helper.make_node("Erf", ["g0"], ["g1"]),
        helper.make_node("Add", ["g1", "one"], ["g2"]),
        helper.make_node("Mul", ["h2", "g2"], ["g3"]),
        helper.make_node("Mul", ["g3", "half"], ["g4"]),
        helper.make_node("Gemm", ["g4", "fc2_w", "fc2_b"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "onnxjit_demo",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10]),
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 10]),
        ],
        initializer=inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="onnxjit-demo"
    )
    model.ir_version = 8
    model.model_version = (1 << 48) | (0 << 32) | 0  # SemVer 1.0.0
    model.doc_string = "onnxjit demo: a small CNN classifier with random weights"
    return model


def write_demo_model(path: Path = DEMO_PATH) -> Path:
    """Write the demo model file (run after changing build_demo_model)."""
    onnx.save(build_demo_model(), str(path))
    return path
