"""Real-model CNN workload R5 (issue 43, item 1): image classifiers of transformers, exported
with torch.onnx.

torchvision and timm are not bench dependencies (torchvision's wheel from PyPI does not import
beside the torch installed here, and timm needs it), so the CNNs are transformers' image
models, which are plain torch modules: ResNet-50 (``ResNetForImageClassification``, bottleneck
blocks), MobileNetV2 (1.0, 224) and MobileNetV1 (1.0, 224: transformers has no MobileNetV3;
both with TensorFlow's "same" padding, exported as Pad nodes before the strided convolutions),
EfficientNet-B0 (depthwise 3x3 / 5x5, SiLU, squeeze-and-excitation), ConvNeXt-tiny (depthwise
7x7, LayerNorm, GELU), RegNetY-400MF (grouped 3x3 of 8 channels per group, SE blocks) and
MobileViT-small (MobileNetV2 blocks and transformer layers over unfolded patches). Every one
has 1000 classes and random weights drawn by transformers' own initialisation after
``torch.manual_seed``; configurations are written here, nothing is downloaded
(``HF_HUB_OFFLINE=1``, set by :mod:`bench.workloads.real` before transformers is imported).

Each model is exported once per image size (the TorchScript exporter, opset 17, in eval mode
so that BatchNormalization folds into the convolutions; a dynamic batch axis) and run at batch
1 and 8, 96 and 224 pixels; MobileNetV2 and EfficientNet-B0 also come from the dynamo exporter
(``*_dynamo``, batch 1, 224 pixels) where it works (a failure is listed by
:func:`bench.workloads.real.export_failures`). Exports are cached as R1-R4's are.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import onnx

from bench.workloads import Case
from bench.workloads.real import TOL_F32, _cached, _export, _seeded, _try

CLASSES = 1000
MODELS = (
    "resnet50",
    "mobilenet_v2",
    "mobilenet_v1",
    "efficientnet_b0",
    "convnext_tiny",
    "regnet_y_400mf",
    "mobilevit_s",
)
BATCHES = (1, 8)
PIXELS = (96, 224)
DYNAMO = ("mobilenet_v2", "efficientnet_b0")


def _module(kind: str) -> Any:
    """The transformers classifier ``kind`` (one of :data:`MODELS`), seeded, in eval mode."""
    import transformers as tf

    n = {"num_labels": CLASSES}
    if kind == "resnet50":
        cfg = tf.ResNetConfig(
            embedding_size=64,
            hidden_sizes=[256, 512, 1024, 2048],
            depths=[3, 4, 6, 3],
            layer_type="bottleneck",
            hidden_act="relu",
            **n,
        )
        return _seeded(lambda: tf.ResNetForImageClassification(cfg))
    if kind == "mobilenet_v2":
        cfg = tf.MobileNetV2Config(depth_multiplier=1.0, image_size=224, **n)
        return _seeded(lambda: tf.MobileNetV2ForImageClassification(cfg))
    if kind == "mobilenet_v1":
        cfg = tf.MobileNetV1Config(depth_multiplier=1.0, image_size=224, **n)
        return _seeded(lambda: tf.MobileNetV1ForImageClassification(cfg))
    if kind == "efficientnet_b0":
        cfg = tf.EfficientNetConfig(
            width_coefficient=1.0,
            depth_coefficient=1.0,
            image_size=224,
            hidden_dim=1280,
            dropout_rate=0.2,
            **n,
        )
        return _seeded(lambda: tf.EfficientNetForImageClassification(cfg))
    if kind == "convnext_tiny":
        cfg = tf.ConvNextConfig(depths=[3, 3, 9, 3], hidden_sizes=[96, 192, 384, 768], **n)
        return _seeded(lambda: tf.ConvNextForImageClassification(cfg))
    if kind == "regnet_y_400mf":
        cfg = tf.RegNetConfig(
            embedding_size=32,
            hidden_sizes=[48, 104, 208, 440],
            depths=[1, 3, 6, 6],
            groups_width=8,
            layer_type="y",
            **n,
        )
        return _seeded(lambda: tf.RegNetForImageClassification(cfg))
    if kind == "mobilevit_s":
        cfg = tf.MobileViTConfig(
            image_size=256,
            hidden_sizes=[144, 192, 240],
            neck_hidden_sizes=[16, 32, 64, 96, 128, 160, 640],
            **n,
        )
        return _seeded(lambda: tf.MobileViTForImageClassification(cfg))
    raise ValueError(f"unknown CNN {kind!r}")


def _calibrated(model: Any, px: int, seed: int = 2) -> Any:
    """``model`` with trained-like BatchNormalization layers: scales drawn from [0.5, 1.5],
    shifts near 0, and running statistics measured on 8 random ``px`` x ``px`` images (a
    cumulative average over one forward pass in training mode); then in eval mode.
    transformers' initialisation draws some networks' BN scales near 0 (std 0.02:
    EfficientNet, MobileViT) and leaves the statistics at mean 0, variance 1, so activations
    shrink or grow layer by layer (MobileNetV2's logits came out near 1e-21, EfficientNet's
    near 1e-30, and any two engines agreed within the tolerance); with these they stay near
    unit scale, as a trained network's do, and the comparison is meaningful."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.reset_running_stats()
                m.momentum = None
                if m.affine:
                    m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
                    m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)
    x = torch.randn(8, 3, px, px, generator=gen)
    model.train()
    with torch.no_grad():
        model(pixel_values=x)
    return model.eval()


def _logits(model: Any) -> Any:
    """``model`` returning its logits only, from a named ``pixel_values`` argument."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, pixel_values: Any) -> Any:
            return self.model(pixel_values=pixel_values).logits

    return Logits().eval()


@functools.cache
def cnn_model(kind: str, px: int, exporter: str = "torchscript") -> onnx.ModelProto:
    """Classifier ``kind`` exported for ``px`` x ``px`` images with a dynamic batch axis
    (input ``pixel_values`` [batch, 3, px, px], output ``logits`` [batch, 1000]); cached per
    process (the batch sizes share it) and on disk."""

    def build() -> onnx.ModelProto:
        import torch

        x = torch.from_numpy(image_feeds(px, 2)["pixel_values"])
        axes = {"pixel_values": {0: "batch"}, "logits": {0: "batch"}}
        model = _calibrated(_module(kind), px)
        return _export(_logits(model), (x,), ["pixel_values"], ["logits"], axes, exporter)

    return _cached(f"cnn_{kind}_{px}_{exporter}_v3", build)


def image_feeds(px: int, batch: int, seed: int = 1) -> dict[str, np.ndarray]:
    """A random normalised image batch, float32 [batch, 3, px, px]."""
    rng = np.random.default_rng(seed)
    return {"pixel_values": rng.standard_normal((batch, 3, px, px)).astype(np.float32)}


def cases_r5(quick: bool) -> list[Case]:
    """R5: the :data:`MODELS` at batch 1 and 8, 96 and 224 pixels (TorchScript exporter), and
    :data:`DYNAMO` from the dynamo exporter at batch 1, 224 pixels.

    quick: MobileNetV2 at batch 1, 96 pixels.
    """
    out: list[Case] = []
    models = ["mobilenet_v2"] if quick else list(MODELS)
    grid = [(1, 96)] if quick else [(b, px) for px in PIXELS for b in BATCHES]
    for kind in models:
        for b, px in grid:

            def make(kind: str = kind, b: int = b, px: int = px) -> Case:
                model = cnn_model(kind, px)
                return Case("R5", f"{kind}/b{b}/{px}px", model, image_feeds(px, b), **TOL_F32)

            make.__name__ = f"{kind}_b{b}_{px}"
            _try(out, make)
    if not quick:
        for kind in DYNAMO:

            def dynamo(kind: str = kind) -> Case:
                model = cnn_model(kind, 224, "dynamo")
                return Case("R5", f"{kind}_dynamo/b1/224px", model, image_feeds(224, 1), **TOL_F32)

            dynamo.__name__ = f"{kind}_dynamo"
            _try(out, dynamo)
    return out
