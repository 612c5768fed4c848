"""CNN workloads: C1 (ResNet-18-style) and C2 (MobileNetV2-style), built with onnx.helper.

Convolutions carry no bias and every one is followed by its own BatchNormalization node (eval
mode, running statistics as initializers), as an exporter writes a model whose BN was not folded:
the Conv+BN folding pass has all of them to fold. Weights use He initialisation and the BN
statistics are drawn near (mean 0, variance 1) so activations stay O(1) through the network.
Fixed seeds; nothing is downloaded.

FLOP counts on the cases are 2*M*N*K per convolution (2 * N * C_out * H_out * W_out *
C_in/group * kH * kW) plus the classifier Gemm; BN, activations and pooling are not counted.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from . import Case
from .transformer import GraphBuilder

CNN_OPSET = 17


class _ConvNet:
    """Adds Conv/BN/activation nodes to a GraphBuilder while tracking shape and FLOPs."""

    def __init__(self, g: GraphBuilder, batch: int) -> None:
        self.g = g
        self.batch = batch
        self.flops = 0

    def conv_bn(
        self,
        x: str,
        hw: tuple[int, int],
        c_in: int,
        c_out: int,
        k: int,
        stride: int,
        prefix: str,
        group: int = 1,
    ) -> tuple[str, tuple[int, int]]:
        """Conv (no bias, same padding k//2) followed by BatchNormalization; returns (y, hw)."""
        g = self.g
        fan_in = c_in // group * k * k
        w = g.weight((c_out, c_in // group, k, k), float(np.sqrt(2.0 / fan_in)), f"{prefix}.weight")
        pad = k // 2
        y = g.op(
            "Conv",
            x,
            w,
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[pad, pad, pad, pad],
            group=group,
            dilations=[1, 1],
        )
        h = (hw[0] + 2 * pad - k) // stride + 1
        w_ = (hw[1] + 2 * pad - k) // stride + 1
        self.flops += 2 * self.batch * c_out * h * w_ * fan_in
        scale = g.weight((c_out,), 0.1, f"{prefix}.bn.weight", mean=1.0)
        bias = g.weight((c_out,), 0.1, f"{prefix}.bn.bias")
        mean = g.weight((c_out,), 0.1, f"{prefix}.bn.running_mean")
        var_arr = g.rng.uniform(0.5, 1.5, size=c_out).astype(np.float32)
        var = g.const(var_arr, f"{prefix}.bn.running_var")
        y = g.op("BatchNormalization", y, scale, bias, mean, var, epsilon=1e-5, momentum=0.9)
        return y, (h, w_)

    def resnet_stem(self, size: int) -> tuple[str, tuple[int, int]]:
        """ResNet's stem on the input image: Conv 7x7/2 + BN + Relu, MaxPool 3x3/2 pad 1."""
        g = self.g
        x, hw = self.conv_bn("input", (size, size), 3, 64, 7, 2, "conv1")
        x = g.op("Relu", x)
        x = g.op("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        return x, ((hw[0] + 2 - 3) // 2 + 1, (hw[1] + 2 - 3) // 2 + 1)

    def relu6(self, x: str) -> str:
        """Clip(x, 0, 6), as torch exports ReLU6 from opset 11 on."""
        g = self.g
        return g.op("Clip", x, g.const(np.float32(0.0)), g.const(np.float32(6.0)))

    def head(self, x: str, c: int, classes: int) -> str:
        """GlobalAveragePool -> Flatten -> Gemm (transB=1) classifier."""
        g = self.g
        x = g.op("Flatten", g.op("GlobalAveragePool", x), axis=1)
        w = g.weight((classes, c), float(np.sqrt(1.0 / c)), "fc.weight")
        b = g.weight((classes,), 0.01, "fc.bias")
        self.flops += 2 * self.batch * classes * c
        return g.op("Gemm", x, w, b, alpha=1.0, beta=1.0, transB=1, name="logits")


def _finish(
    g: GraphBuilder, y: str, batch: int, size: int, classes: int, name: str
) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, size, size])]
    outputs = [helper.make_tensor_value_info(y, TensorProto.FLOAT, [batch, classes])]
    return g.model(inputs, outputs, name)


def resnet18(
    batch: int = 1, size: int = 224, classes: int = 1000, seed: int = 0
) -> tuple[onnx.ModelProto, int]:
    """A ResNet-18 (v1, basic blocks) with separate BatchNormalization nodes.

    Input ``input`` float32 [batch, 3, size, size]; output ``logits`` [batch, classes]. Stem: Conv
    7x7/2 + BN + Relu, MaxPool 3x3/2 pad 1; stages of 64, 128, 256, 512 channels with two basic
    blocks each (Conv 3x3 + BN + Relu, Conv 3x3 + BN, residual Add, Relu; the first block of
    stages 2-4 strides by 2 and projects the shortcut with Conv 1x1/2 + BN); GlobalAveragePool,
    Flatten, Gemm. Returns ``(model, flops)``.
    """
    g = GraphBuilder(CNN_OPSET, seed)
    net = _ConvNet(g, batch)
    x, hw = net.resnet_stem(size)
    c = 64
    for stage, c_out in enumerate([64, 128, 256, 512], start=1):
        for block in range(2):
            stride = 2 if (stage > 1 and block == 0) else 1
            p = f"layer{stage}.{block}"
            y, hw2 = net.conv_bn(x, hw, c, c_out, 3, stride, f"{p}.conv1")
            y = g.op("Relu", y)
            y, hw2 = net.conv_bn(y, hw2, c_out, c_out, 3, 1, f"{p}.conv2")
            if stride != 1 or c != c_out:
                shortcut, _ = net.conv_bn(x, hw, c, c_out, 1, stride, f"{p}.downsample")
            else:
                shortcut = x
            x = g.op("Relu", g.op("Add", y, shortcut))
            c, hw = c_out, hw2
    y = net.head(x, c, classes)
    return _finish(g, y, batch, size, classes, f"resnet18_b{batch}_{size}"), net.flops


def resnet50(
    batch: int = 1, size: int = 224, classes: int = 1000, seed: int = 0
) -> tuple[onnx.ModelProto, int]:
    """A ResNet-50 (v1.5: the stride in the bottleneck's 3x3) with separate BatchNormalization
    nodes, input and output as :func:`resnet18`. Stages of 3, 4, 6, 3 bottleneck blocks (Conv
    1x1 + BN + Relu, Conv 3x3 + BN + Relu, Conv 1x1 + BN, residual Add, Relu) of widths 64,
    128, 256, 512 expanded 4x; the first block of each stage projects the shortcut with Conv
    1x1 + BN. Returns ``(model, flops)``."""
    g = GraphBuilder(CNN_OPSET, seed)
    net = _ConvNet(g, batch)
    x, hw = net.resnet_stem(size)
    c = 64
    for stage, (width, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)], start=1):
        for block in range(blocks):
            stride = 2 if (stage > 1 and block == 0) else 1
            p = f"layer{stage}.{block}"
            y, hw2 = net.conv_bn(x, hw, c, width, 1, 1, f"{p}.conv1")
            y, hw2 = net.conv_bn(g.op("Relu", y), hw2, width, width, 3, stride, f"{p}.conv2")
            y, hw2 = net.conv_bn(g.op("Relu", y), hw2, width, 4 * width, 1, 1, f"{p}.conv3")
            if block == 0:
                shortcut, _ = net.conv_bn(x, hw, c, 4 * width, 1, stride, f"{p}.downsample")
            else:
                shortcut = x
            x = g.op("Relu", g.op("Add", y, shortcut))
            c, hw = 4 * width, hw2
    y = net.head(x, c, classes)
    return _finish(g, y, batch, size, classes, f"resnet50_b{batch}_{size}"), net.flops


MOBILENET_V2_BLOCKS = [
    # expansion t, output channels c, repeats n, first stride s (the paper's table 2)
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]


def mobilenet_v2(
    batch: int = 1, size: int = 224, classes: int = 1000, width: float = 1.0, seed: int = 0
) -> tuple[onnx.ModelProto, int]:
    """A MobileNetV2 with separate BatchNormalization nodes and ReLU6 as Clip(0, 6).

    Stem Conv 3x3/2 (32 ch) + BN + Relu6; the 17 inverted-residual blocks of the paper's table
    (1x1 expand + BN + Relu6 when t > 1, 3x3 depthwise (group = channels) + BN + Relu6, 1x1
    project + BN, residual Add when stride 1 and channels match); Conv 1x1 to 1280 + BN + Relu6;
    GlobalAveragePool, Flatten, Gemm. ``width`` scales channel counts (rounded to multiples of
    8). Returns ``(model, flops)``.
    """

    def ch(c: int) -> int:
        return max(8, int(c * width + 4) // 8 * 8)

    g = GraphBuilder(CNN_OPSET, seed)
    net = _ConvNet(g, batch)
    c = ch(32)
    x, hw = net.conv_bn("input", (size, size), 3, c, 3, 2, "features.0")
    x = net.relu6(x)
    idx = 1
    for t, c_out, n, s in MOBILENET_V2_BLOCKS:
        c_out = ch(c_out)
        for i in range(n):
            stride = s if i == 0 else 1
            p = f"features.{idx}"
            hidden = c * t
            y, hw2 = x, hw
            if t != 1:
                y, hw2 = net.conv_bn(y, hw2, c, hidden, 1, 1, f"{p}.expand")
                y = net.relu6(y)
            y, hw2 = net.conv_bn(y, hw2, hidden, hidden, 3, stride, f"{p}.dw", group=hidden)
            y = net.relu6(y)
            y, hw2 = net.conv_bn(y, hw2, hidden, c_out, 1, 1, f"{p}.project")
            if stride == 1 and c == c_out:
                y = g.op("Add", x, y)
            x, hw, c = y, hw2, c_out
            idx += 1
    last = max(1280, ch(1280))
    x, hw = net.conv_bn(x, hw, c, last, 1, 1, f"features.{idx}")
    x = net.relu6(x)
    y = net.head(x, last, classes)
    return _finish(g, y, batch, size, classes, f"mobilenet_v2_b{batch}_{size}"), net.flops


def image_feeds(batch: int, size: int, seed: int = 3) -> dict[str, np.ndarray]:
    """A random normalised image batch, float32 [batch, 3, size, size]."""
    rng = np.random.default_rng(seed)
    return {"input": rng.standard_normal((batch, 3, size, size)).astype(np.float32)}


# Tolerances: logits are O(1-10) after ~20 layers of float32 accumulation in different orders
# (im2col GEMM vs onnxruntime's MLAS convolutions), so 1e-3 relative with a 1e-3 floor.
_RTOL, _ATOL = 1e-3, 1e-3


def cases_c1(quick: bool) -> list[Case]:
    """C1 cases: ResNet-18 at 224x224, batch 1 and 8 (quick: batch 1 at 112x112)."""
    configs = [(1, 112)] if quick else [(1, 224), (8, 224)]
    out = []
    for batch, size in configs:
        model, flops = resnet18(batch, size)
        out.append(
            Case(
                workload="C1",
                name=f"resnet18/b{batch}/{size}",
                model=model,
                feeds=image_feeds(batch, size),
                rtol=_RTOL,
                atol=_ATOL,
                flops=flops,
            )
        )
    return out


def cases_c2(quick: bool) -> list[Case]:
    """C2 cases: MobileNetV2 at 224x224, batch 1 (quick: 112x112)."""
    size = 112 if quick else 224
    model, flops = mobilenet_v2(1, size)
    return [
        Case(
            workload="C2",
            name=f"mobilenet_v2/b1/{size}",
            model=model,
            feeds=image_feeds(1, size),
            rtol=_RTOL,
            atol=_ATOL,
            flops=flops,
        )
    ]
