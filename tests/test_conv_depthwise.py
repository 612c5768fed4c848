"""Depthwise and grouped convolutions through onnxjit.InferenceSession, against onnxruntime and
onnx's ReferenceEvaluator: every geometry the kernels special-case (3x3 stride 1 / 2, small
planes across vector lanes, the general phase-plane loops, the direct grouped kernel, im2col
for wide groups), with and without bias, fused activations and residuals, batch 1 and 3; then
transformers' MobileNetV2 and EfficientNet (small configurations, random weights) exported by
torch.onnx, end to end against onnxruntime.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from oracle import assert_close, ort_outputs
from test_conv_kernels import rnd, threading_mode, weights  # noqa: F401 - a fixture

import onnxjit

# (x shape without batch, w shape, attrs): group = C / w.shape[1]
CASES = {
    # depthwise, one output per channel
    "dw3_s1": ((8, 9, 11), (8, 1, 3, 3), {"pads": [1, 1, 1, 1]}),
    "dw3_s2_even": ((16, 12, 14), (16, 1, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "dw3_s2_odd": ((8, 11, 13), (8, 1, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "dw3_s2_tf_same": ((8, 12, 14), (8, 1, 3, 3), {"strides": [2, 2], "pads": [0, 0, 1, 1]}),
    "dw5_s2_asym": ((12, 15, 17), (12, 1, 5, 5), {"strides": [2, 2], "pads": [1, 2, 2, 1]}),
    "dw5_s1": ((10, 19, 18), (10, 1, 5, 5), {"pads": [2, 2, 2, 2]}),
    "dw7_s1": ((6, 20, 19), (6, 1, 7, 7), {"pads": [3, 3, 3, 3]}),
    "dw3_dil2": ((5, 13, 12), (5, 1, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    "dw3_nopad": ((7, 9, 10), (7, 1, 3, 3), {}),
    "dw3_large": ((4, 40, 38), (4, 1, 3, 3), {"pads": [1, 1, 1, 1]}),
    "dw1d_k5": ((6, 17), (6, 1, 5), {"pads": [2, 2]}),
    # small planes: channels across vector lanes (more channels than one block of lanes)
    "dw3_small": ((40, 5, 6), (40, 1, 3, 3), {"pads": [1, 1, 1, 1]}),
    "dw5_small_s2": ((24, 7, 7), (24, 1, 5, 5), {"strides": [2, 2], "pads": [2, 2, 2, 2]}),
    "dw7_small": ((20, 7, 7), (20, 1, 7, 7), {"pads": [3, 3, 3, 3]}),
    # channel multiplier > 1
    "dw3_mult2": ((4, 9, 10), (8, 1, 3, 3), {"pads": [1, 1, 1, 1]}),
    "dw3_mult3_s2": ((3, 10, 9), (9, 1, 3, 3), {"strides": [2, 2], "pads": [0, 1, 1, 0]}),
    "dw3_mult2_small": ((20, 4, 5), (40, 1, 3, 3), {"pads": [1, 1, 1, 1]}),
    # grouped, a few input channels per group: the direct grouped kernel
    "g2_cg4": ((8, 10, 11), (6, 4, 3, 3), {"pads": [1, 1, 1, 1]}),
    "g8_cg8_s2": ((64, 13, 12), (64, 8, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "g3_cg2_k5_asym": ((6, 9, 10), (9, 2, 5, 5), {"pads": [2, 1, 1, 2]}),
    "g4_1x1": ((16, 7, 9), (12, 4, 1, 1), {}),
    "g2_dil2": ((4, 12, 12), (4, 2, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    "g2_k7_s2": ((4, 15, 16), (6, 2, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    "g4_1d_s2": ((8, 20), (8, 2, 3), {"strides": [2], "pads": [1, 1]}),
    "g2_3d": ((4, 5, 6, 7), (4, 2, 3, 3, 3), {"pads": [1, 1, 1, 1, 1, 1]}),
    # grouped with many taps per output: im2col and a product per group
    "g2_wide": ((64, 6, 7), (8, 32, 3, 3), {"pads": [1, 1, 1, 1]}),
}

# Activations after the convolution (fused into it by onnxjit's passes where they can be)
ACTS = [None, "Relu", "relu6", "HardSwish", "silu", "residual_relu"]


def _model(xs, ws, attrs, bias: bool, act: str | None) -> onnx.ModelProto:
    """Conv(x, w[, b]) then ``act``: Relu, Clip(0, 6) ("relu6"), HardSwish, x * Sigmoid(x)
    ("silu") or Relu(conv + r) ("residual_relu", ``r`` a second input)."""
    group = xs[0] // ws[1]
    inits = [numpy_helper.from_array(weights(ws), "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rnd((ws[0],), seed=2), "b"))
        ins.append("b")
    nodes = [helper.make_node("Conv", ins, ["c"], group=group, **attrs)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", *xs])]
    if act == "relu6":
        inits += [numpy_helper.from_array(np.float32(v), n) for n, v in (("lo", 0), ("hi", 0.6))]
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    elif act == "silu":
        nodes.append(helper.make_node("Sigmoid", ["c"], ["s"]))
        nodes.append(helper.make_node("Mul", ["c", "s"], ["y"]))
    elif act == "residual_relu":
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [None] * (len(xs) + 1)))
        nodes.append(helper.make_node("Add", ["c", "r"], ["a"]))
        nodes.append(helper.make_node("Relu", ["a"], ["y"]))
    elif act is not None:
        nodes.append(helper.make_node(act, ["c"], ["y"]))
    out = "c" if act is None else "y"
    rank = len(xs) + 1
    outputs = [helper.make_tensor_value_info(out, TensorProto.FLOAT, [None] * rank)]
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _feeds(model: onnx.ModelProto, xs, batch: int) -> dict[str, np.ndarray]:
    feeds = {"x": rnd((batch, *xs), seed=3)}
    if any(i.name == "r" for i in model.graph.input):
        y = ort_outputs(_without_act(model), feeds)[0]
        feeds["r"] = rnd(y.shape, seed=4)
    return feeds


def _without_act(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model's Conv alone (for the shape of the residual)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    conv = m.graph.node[0]
    del m.graph.node[1:]
    del m.graph.input[1:]
    m.graph.output[0].name = conv.output[0]
    return m


@pytest.mark.parametrize("variant", range(len(ACTS)))
@pytest.mark.parametrize("name", list(CASES))
def test_against_onnxruntime_and_reference(name, variant):
    """Each geometry with bias on / off (by variant) and one of the activations, batch 1
    and 3, against onnxruntime and the reference evaluator."""
    xs, ws, attrs = CASES[name]
    act = ACTS[variant]
    bias = variant % 2 == 1
    batch = 3 if variant % 3 == 2 else 1
    model = _model(xs, ws, attrs, bias, act)
    feeds = _feeds(model, xs, batch)
    got = onnxjit.InferenceSession(model).run(None, feeds)
    assert_close(got, ort_outputs(model, feeds), rtol=1e-4, atol=1e-5, what="onnxruntime")
    ref = ReferenceEvaluator(model).run(None, feeds)
    assert_close(got, ref, rtol=1e-4, atol=1e-5, what="reference")


@pytest.mark.parametrize(
    "name", ["dw3_s2_even", "dw5_s2_asym", "dw3_small", "g8_cg8_s2", "g2_3d", "dw3_mult2"]
)
def test_serial_and_parallel_twins(name, threading_mode):  # noqa: F811 - the fixture
    """The pool's twins of the kernels (thresholds at 1) and the serial ones agree with
    onnxruntime, with the fused epilogue and a residual, at batch 3."""
    xs, ws, attrs = CASES[name]
    model = _model(xs, ws, attrs, True, "residual_relu")
    feeds = _feeds(model, xs, 3)
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = 2
    got = onnxjit.InferenceSession(model, so).run(None, feeds)
    assert_close(got, ort_outputs(model, feeds), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Pad before Conv (TensorFlow's "same" padding as exporters write it)

# (Pad's pads over (N, C, H, W), its constant value, mode): folded or not
PADS = {
    "tf_same_s2": ([0, 0, 0, 0, 0, 0, 1, 1], 0.0, "constant", True),
    "asym_all": ([0, 0, 2, 1, 0, 0, 1, 3], 0.0, "constant", True),
    "nonzero_value": ([0, 0, 1, 1, 0, 0, 1, 1], 0.5, "constant", False),
    "channel_axis": ([0, 1, 1, 1, 0, 0, 1, 1], 0.0, "constant", False),
    "reflect": ([0, 0, 1, 1, 0, 0, 1, 1], 0.0, "reflect", False),
}


@pytest.mark.parametrize(
    ("name", "group"),
    [(n, g) for n in PADS for g in (1, 8) if not (n == "channel_axis" and g == 8)],
)
def test_pad_folds_into_conv(name, group):
    """A zero constant-mode Pad of the spatial axes before a (depthwise or dense) strided
    Conv folds into the Conv's own pads (no Pad runs); other Pads stay (one of the channel
    axis feeds a dense Conv of 9 input channels). Both against onnxruntime."""
    pads, value, mode, folds = PADS[name]
    c_in = 8 + pads[1] + pads[5]
    ws = (8, c_in // group, 3, 3)
    inits = [
        numpy_helper.from_array(np.array(pads, np.int64), "pads"),
        numpy_helper.from_array(np.float32(value), "value"),
        numpy_helper.from_array(weights(ws), "w"),
        numpy_helper.from_array(rnd((8,), seed=2), "b"),
    ]
    nodes = [
        helper.make_node("Pad", ["x", "pads", "value"], ["p"], mode=mode),
        helper.make_node("Conv", ["p", "w", "b"], ["y"], group=group, strides=[2, 2]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8, 12, 13])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = onnxjit.InferenceSession(model)
    ops = [n.op_type for n in sess.graph_nodes()]
    assert ("Pad" not in ops) == folds, ops
    feeds = {"x": rnd((2, 8, 12, 13), seed=3)}
    assert_close(sess.run(None, feeds), ort_outputs(model, feeds), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# transformers' image models, exported by torch.onnx


def _transformers_model(kind: str):
    torch = pytest.importorskip("torch", reason="the exported models come from torch")
    tf = pytest.importorskip("transformers", reason="the models are transformers' own")
    from models import randomize_batchnorm

    torch.manual_seed(0)
    if kind == "mobilenet_v2":
        cfg = tf.MobileNetV2Config(depth_multiplier=0.35, image_size=64, num_labels=10)
        model = tf.MobileNetV2ForImageClassification(cfg)
    else:
        cfg = tf.EfficientNetConfig(
            width_coefficient=0.25,
            depth_coefficient=0.3,
            image_size=64,
            hidden_dim=320,
            num_labels=10,
        )
        model = tf.EfficientNetForImageClassification(cfg)
    return randomize_batchnorm(model.eval())


@pytest.mark.parametrize("kind", ["mobilenet_v2", "efficientnet"])
def test_transformers_model_end_to_end(kind, tmp_path):
    """MobileNetV2 (TensorFlow "same" padding as Pad nodes, depthwise 3x3 stride 1 / 2,
    ReLU6) and EfficientNet (depthwise 3x3 / 5x5, SiLU, squeeze-and-excitation, and an
    AvgPool2d(320, ceil_mode=True) over a 2x2 map: one window far wider than its input),
    TorchScript export with a dynamic batch axis, batch 1 and 3, against onnxruntime."""
    import torch
    from models import export_torch

    model = _transformers_model(kind)

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, pixel_values):
            return self.model(pixel_values=pixel_values).logits

    x = torch.from_numpy(rnd((2, 3, 64, 64), seed=5) * 2)
    path = export_torch(
        Logits().eval(),
        (x,),
        tmp_path / f"{kind}.onnx",
        ["pixel_values"],
        ["logits"],
        {"pixel_values": {0: "batch"}, "logits": {0: "batch"}},
    )
    sess = onnxjit.InferenceSession(path)
    proto = onnx.load(path)
    for batch in (1, 3):
        feeds = {"pixel_values": rnd((batch, 3, 64, 64), seed=6 + batch) * 2}
        want = ort_outputs(proto, feeds)
        assert np.abs(want[0]).max() > 1e-2  # the logits are not vanishingly small
        assert_close(sess.run(None, feeds), want, rtol=1e-4, atol=1e-5)
