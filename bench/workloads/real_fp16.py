"""R7 (issue 43, item 1): float16 variants of real models.

Each model is converted by onnxconverter-common's ``convert_float_to_float16(model,
keep_io_types=True)``, the conversion users run: float16 weights and activations inside, a Cast
from float32 after every float input and to float32 before every float output. The float32
sources are R1's BERT (:func:`bench.workloads.real.encoder_model`) and LLaMA-style prefill
(:func:`bench.workloads.real.decoder_model`), and two CNNs built here from transformers' image
models with random weights (:func:`small_cnn_model`: a ResNet-18-style ``ResNetModel`` and a
MobileNetV2 ``MobileNetV2Model`` at width multiplier 0.5, TorchScript export, dynamic batch).
Nothing is downloaded; export and conversion are cached as :mod:`bench.workloads.real` caches.

Cases: BERT at batch 1 / sequence 16, batch 1 / 128 and batch 8 / 128; the LLaMA-style prefill
at batch 1, sequence 16 and 128; both CNNs at 96 px, batch 1 and 8.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from bench.workloads import Case
from bench.workloads.real import (
    _cached,
    _export,
    _seeded,
    _try,
    decoder_model,
    encoder_model,
    prefill_feeds,
    text_feeds,
)

# Tolerances. float16 storage rounds weights and activations to 11 significant bits, and two
# correct engines round at different points (onnxruntime's CPU provider computes most float16
# operators in float32 between Casts, onnxjit computes whole float16 regions in float32), so
# they differ by several float16 steps of the output scale. Measured (largest absolute
# difference; output scale 2-6): onnxruntime against itself (ORT_ENABLE_ALL vs ORT_DISABLE_ALL)
# 0.001-0.008; each engine against the float32 model 0.001-0.006 (onnxjit) and 0.004-0.006
# (onnxruntime) on BERT, 0.026 both on the LLaMA-style prefill at sequence 128, 0.004-0.005 both
# on the ResNet, 0.14-0.22 both on the MobileNetV2 (17 blocks of ReLU6 amplify the weights'
# rounding); onnxjit against onnxruntime 0.003-0.006 BERT, 0.002 LLaMA, 0.001 ResNet, 0.05-0.07
# MobileNetV2. Bounds: about 3x the largest engine-to-engine difference of each family.
TOL_FP16_TEXT = {"rtol": 1e-2, "atol": 2e-2}
TOL_FP16_CNN = {
    "resnet": {"rtol": 1e-2, "atol": 5e-3},
    "mobilenetv2": {"rtol": 2e-2, "atol": 0.2},
}

CNNS = ("resnet", "mobilenetv2")
CNN_PX = 96


def to_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxconverter-common's float16 conversion with float32 inputs and outputs."""
    import warnings

    from onnxconverter_common.float16 import convert_float_to_float16

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one warning per constant clamped to float16's range
        out = convert_float_to_float16(model, keep_io_types=True)
    _fix_float_casts(out)
    return out


def _fix_float_casts(model: onnx.ModelProto) -> None:
    """onnxconverter-common 1.16 converts the constants and value types around a
    ``Cast(to=FLOAT)`` of the source model to float16 but leaves ``to=FLOAT`` (the LLaMA-style
    model's RMSNorm ``.to(float32)`` and its rotary position Casts), which onnxruntime rejects
    ("Type (tensor(float16)) of output arg ... does not match expected type (tensor(float))").
    With ``keep_io_types`` float32 belongs at the graph's edges only, so every such Cast that
    does not write a graph output is made to write float16, as the converted graph around it
    expects. Likewise nodes that read a graph output (the LLaMA-style model reads its
    ``present.*`` values) are left reading the float32 output Cast added by ``keep_io_types``;
    they are made to read its float16 source."""
    outputs = {v.name for v in model.graph.output}
    source: dict[str, str] = {}
    for node in model.graph.node:
        if node.op_type != "Cast":
            continue
        to = next(a for a in node.attribute if a.name == "to")
        if to.i != onnx.TensorProto.FLOAT:
            continue
        if node.output[0] in outputs:
            source[node.output[0]] = node.input[0]
        else:
            to.i = onnx.TensorProto.FLOAT16
    for node in model.graph.node:
        if not (node.op_type == "Cast" and node.output[0] in source):
            node.input[:] = [source.get(x, x) for x in node.input]


def _fp16_key(base: str) -> str:
    import onnxconverter_common

    return f"{base}_fp16_occ{onnxconverter_common.__version__}_v4"


def fp16_encoder(kind: str = "bert") -> onnx.ModelProto:
    """The float16 conversion of R1's TorchScript encoder ``kind``."""
    return _cached(_fp16_key(f"{kind}_torchscript"), lambda: to_float16(encoder_model(kind)))


def fp16_llama_prefill() -> onnx.ModelProto:
    """The float16 conversion of R1's TorchScript LLaMA-style prefill model."""
    return _cached(
        _fp16_key("llama_prefill_torchscript"),
        lambda: to_float16(decoder_model("llama", with_past=False)),
    )


def _small_cnn_module(kind: str) -> Any:
    """A transformers image backbone with random weights: "resnet" (ResNet-18 layout: basic
    blocks, depths 2-2-2-2, widths 64-512) or "mobilenetv2" (width multiplier 0.5, symmetric
    padding as torchvision's)."""
    import torch
    import transformers as tf

    if kind == "resnet":
        cfg = tf.ResNetConfig(
            depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512], layer_type="basic"
        )
        model = _seeded(lambda: tf.ResNetModel(cfg))
    elif kind == "mobilenetv2":
        cfg = tf.MobileNetV2Config(depth_multiplier=0.5, image_size=CNN_PX, tf_padding=False)
        model = _seeded(lambda: _kaiming(tf.MobileNetV2Model(cfg)))
    else:
        raise ValueError(f"unknown CNN {kind!r}")

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, pixel_values: Any) -> Any:
            return self.model(pixel_values=pixel_values).last_hidden_state

    return Pooled().eval()


def _kaiming(model: Any) -> Any:
    """Convolution weights drawn Kaiming normal (fan-in, gain for ReLU), which keeps activations
    at unit scale: with transformers' MobileNetV2 initialisation (normal, std 0.02) they shrink
    by ~100x per block and the float16 model's output underflows to zero."""
    import torch

    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
    return model


def small_cnn_model(kind: str) -> onnx.ModelProto:
    """The float32 CNN ``kind`` (see :func:`_small_cnn_module`), TorchScript export with a
    dynamic batch axis. A stand-in for the CNN workload's builder: R7 only needs some float32
    ResNet- and MobileNet-style exports to convert."""

    def build() -> onnx.ModelProto:
        import torch

        x = torch.from_numpy(image_feeds(2)["pixel_values"])
        return _export(
            _small_cnn_module(kind),
            (x,),
            ["pixel_values"],
            ["last_hidden_state"],
            {"pixel_values": {0: "batch"}, "last_hidden_state": {0: "batch"}},
        )

    return _cached(f"cnn_{kind}_{CNN_PX}_v3", build)


def fp16_cnn(kind: str) -> onnx.ModelProto:
    """The float16 conversion of :func:`small_cnn_model`."""
    return _cached(_fp16_key(f"cnn_{kind}_{CNN_PX}_v3"), lambda: to_float16(small_cnn_model(kind)))


def image_feeds(batch: int, px: int = CNN_PX, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"pixel_values": rng.standard_normal((batch, 3, px, px)).astype(np.float32)}


def cases_r7(quick: bool) -> list[Case]:
    """R7: float16 BERT (b1/s16, b1/s128, b8/s128), LLaMA-style prefill (b1/s16, b1/s128) and
    the ResNet- and MobileNetV2-style CNNs (96 px, batch 1 and 8).

    quick: BERT at batch 1, sequence 16.
    """
    out: list[Case] = []
    bert_grid = [(1, 16)] if quick else [(1, 16), (1, 128), (8, 128)]

    def bert() -> list[Case]:
        m = fp16_encoder("bert")
        return [
            Case("R7", f"bert_fp16/b{b}/s{s}", m, text_feeds(b, s), **TOL_FP16_TEXT)
            for b, s in bert_grid
        ]

    for make in [bert] if quick else [bert, _llama_cases, *(_cnn_factory(k) for k in CNNS)]:
        _try_many(out, make)
    return out


def _llama_cases() -> list[Case]:
    m = fp16_llama_prefill()
    return [
        Case("R7", f"llama_prefill_fp16/b1/s{s}", m, prefill_feeds(1, s), **TOL_FP16_TEXT)
        for s in (16, 128)
    ]


def _cnn_factory(kind: str) -> Any:
    def make() -> list[Case]:
        m = fp16_cnn(kind)
        return [
            Case("R7", f"{kind}_fp16/b{b}/{CNN_PX}px", m, image_feeds(b), **TOL_FP16_CNN[kind])
            for b in (1, 8)
        ]

    make.__name__ = f"{kind}_fp16"
    return make


def _try_many(out: list[Case], make: Any) -> None:
    """:func:`bench.workloads.real._try` for a factory of several cases sharing one model."""
    got: list[Case] = []

    def one() -> Case:
        first, *rest = make()
        got.extend(rest)
        return first

    one.__name__ = make.__name__
    _try(out, one)
    out.extend(got)
