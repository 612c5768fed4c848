"""Model builders for the real-model tests: small torch.nn architectures and export helpers.

Every model is built with seeded random weights (nothing is downloaded) and kept small so that
exporting and running it takes seconds on two cores. The torch classes mirror the layer
structure of the architectures they are named after (ResNet-18 BasicBlocks, MobileNetV2
inverted residuals, an LSTM tagger, a Conv1d + GRU sequence model); widths are reduced.

Helpers:

* :func:`export_torch` exports a module with the TorchScript exporter or the dynamo exporter
  into a directory and returns the path of the ``.onnx`` file;
* :func:`ort_session` opens a model in onnxruntime with graph optimisations disabled, so that
  the oracle runs the exported graph as written;
* :func:`summarize_ops` counts ``(domain, op_type)`` pairs of a model, used in failure messages
  so that a failing test says which operators the model needs.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn

# --------------------------------------------------------------------------------------------
# ResNet-18 style CNN
# --------------------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    """ResNet BasicBlock: two 3x3 conv + BN, identity or 1x1-conv + BN shortcut, ReLU."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.down is None else self.down(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + identity)


class ResNet18Small(nn.Module):
    """ResNet-18 layout ([2, 2, 2, 2] BasicBlocks) with reduced widths.

    Stem: 7x7/2 conv + BN + ReLU + 3x3/2 MaxPool; head: AdaptiveAvgPool2d(1) + Linear.
    """

    def __init__(self, widths: Sequence[int] = (16, 32, 64, 128), num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        layers = []
        cin = widths[0]
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            layers += [BasicBlock(cin, w, stride), BasicBlock(w, w, 1)]
            cin = w
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pool(self.layers(self.stem(x)))
        return self.fc(torch.flatten(y, 1))


# --------------------------------------------------------------------------------------------
# MobileNetV2 style CNN
# --------------------------------------------------------------------------------------------


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand + depthwise 3x3 + 1x1 project, residual when shapes match.

    Hardswish is the activation (as in MobileNetV3) so that the export contains HardSwish.
    """

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [
                nn.Conv2d(cin, hidden, 1, bias=False),
                nn.BatchNorm2d(hidden),
                nn.Hardswish(),
            ]
        layers += [
            nn.Conv2d(hidden, hidden, 3, stride=stride, padding=1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.Hardswish(),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.use_res else y


class MobileNetV2Small(nn.Module):
    """MobileNetV2 layout with fewer, narrower stages; ReLU6 in the stem, Hardswish in blocks."""

    # (expansion, out channels, repeats, first stride)
    CONFIG = ((1, 8, 1, 1), (4, 12, 2, 2), (4, 16, 2, 2), (4, 24, 2, 1))

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU6(inplace=True),
        ]
        cin = 8
        for t, c, n, s in self.CONFIG:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [nn.Conv2d(cin, 64, 1, bias=False), nn.BatchNorm2d(64), nn.Hardswish()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(64, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.features(x).mean(dim=(2, 3))
        return self.classifier(y)


# --------------------------------------------------------------------------------------------
# Recurrent models
# --------------------------------------------------------------------------------------------


class LSTMTagger(nn.Module):
    """Embedding -> bidirectional 2-layer LSTM -> Linear: per-token tag scores (batch first)."""

    def __init__(self, vocab: int = 100, emb: int = 16, hidden: int = 24, tags: int = 7) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(self.emb(tokens))
        return self.out(y)


class ConvGRU(nn.Module):
    """Conv1d feature extractor -> GRU -> Linear on the last step (sequence classification).

    Input is (batch, channels, time); the conv output is transposed to (batch, time, features).
    """

    def __init__(self, cin: int = 6, feat: int = 16, hidden: int = 20, classes: int = 5) -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, feat, kernel_size=3, padding=1)
        self.act = nn.ReLU()
        self.gru = nn.GRU(feat, hidden, batch_first=True)
        self.out = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.conv(x)).transpose(1, 2)
        seq, _ = self.gru(y)
        return self.out(seq[:, -1, :])


def randomize_batchnorm(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give every BatchNorm non-trivial running statistics and affine parameters.

    Fresh BatchNorm layers have mean 0 / var 1 / weight 1 / bias 0, which would make the
    normalisation an identity and hide bugs in it.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
                m.weight.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(n, generator=g) * 0.1)
    return model


# --------------------------------------------------------------------------------------------
# Transformers (small configs, random weights)
# --------------------------------------------------------------------------------------------


def build_bert() -> nn.Module:
    """A 2-layer BERT encoder (hidden 64, 4 heads) with seeded random weights."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=1000,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    return BertModel(cfg).eval()


def build_gpt2() -> nn.Module:
    """A 2-layer GPT-2 decoder with LM head (n_embd 64, 4 heads), no KV cache outputs."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_positions=64,
        vocab_size=1000,
        use_cache=False,
        attn_implementation="eager",
    )
    return GPT2LMHeadModel(cfg).eval()


def build_vit() -> nn.Module:
    """A 2-layer ViT (32x32 images, 8x8 patches, hidden 64) with seeded random weights."""
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    cfg = ViTConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        image_size=32,
        patch_size=8,
        num_channels=3,
        attn_implementation="eager",
    )
    return ViTModel(cfg, add_pooling_layer=True).eval()


class OutputsAsTuple(nn.Module):
    """Wrap a transformers model: positional tensors in, a tuple of named outputs out.

    ``arg_names`` names the keyword arguments the positional inputs (one or two) are passed as;
    ``keys`` names the model output fields to return, in order. The forward signature has
    fixed parameters (not ``*args``) because the dynamo exporter matches ``dynamic_shapes``
    against it.
    """

    def __init__(self, model: nn.Module, arg_names: Sequence[str], keys: Sequence[str]) -> None:
        super().__init__()
        assert 1 <= len(arg_names) <= 2
        self.model = model
        self.arg_names = tuple(arg_names)
        self.keys = tuple(keys)

    def forward(self, x0: torch.Tensor, x1: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        kwargs = {self.arg_names[0]: x0}
        if x1 is not None:
            kwargs[self.arg_names[1]] = x1
        out = self.model(**kwargs, return_dict=True)
        return tuple(out[k] for k in self.keys)


# --------------------------------------------------------------------------------------------
# Export and oracle helpers
# --------------------------------------------------------------------------------------------


def export_torch(
    model: nn.Module,
    args: tuple[torch.Tensor, ...],
    path: str | os.PathLike[str],
    input_names: Sequence[str],
    output_names: Sequence[str],
    dynamic_axes: dict[str, dict[int, str]] | None = None,
    dynamo: bool = False,
    opset: int = 17,
    keep_batchnorm: bool = False,
) -> str:
    """Export ``model`` (put in eval mode) to ``path`` and return the path as a string.

    ``dynamo=False`` uses the TorchScript exporter with ``dynamic_axes``; ``dynamo=True`` uses
    the torch.export-based exporter, where the same axes become ``dynamic_shapes`` given as
    ``torch.export.Dim.AUTO`` entries (so names need not be invented per input).
    """
    model.eval()
    path = str(path)
    with torch.no_grad():
        if dynamo:
            shapes = None
            if dynamic_axes:
                shapes = tuple(
                    {ax: torch.export.Dim.AUTO for ax in dynamic_axes.get(name, {})}
                    for name in input_names
                )
            prog = torch.onnx.export(
                model,
                args,
                dynamo=True,
                opset_version=opset,
                input_names=list(input_names),
                output_names=list(output_names),
                dynamic_shapes=shapes,
                verbose=False,
            )
            prog.save(path)
        else:
            torch.onnx.export(
                model,
                args,
                path,
                dynamo=False,
                opset_version=opset,
                input_names=list(input_names),
                output_names=list(output_names),
                dynamic_axes=dynamic_axes,
                do_constant_folding=True,
                training=(
                    torch.onnx.TrainingMode.PRESERVE
                    if keep_batchnorm
                    else torch.onnx.TrainingMode.EVAL
                ),
            )
    return path


def ort_session(path: str | bytes) -> Any:
    """An onnxruntime CPU session with graph optimisations off (runs the graph as exported)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def summarize_ops(model: onnx.ModelProto | str) -> dict[str, int]:
    """``{"domain::Op-opset": count}`` over the main graph and every subgraph of ``model``."""
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(model)
    opsets = {imp.domain or "": imp.version for imp in model.opset_import}
    counts: Counter[str] = Counter()

    def walk(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            dom = node.domain or ""
            key = f"{dom + '::' if dom else ''}{node.op_type}-{opsets.get(dom, '?')}"
            counts[key] += 1
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)
                for g in attr.graphs:
                    walk(g)

    walk(model.graph)
    return dict(sorted(counts.items()))


def seeded(shape: Sequence[int], seed: int, dtype: Any = np.float32) -> np.ndarray:
    """Standard-normal values of ``shape`` from ``np.random.default_rng(seed)``."""
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# --------------------------------------------------------------------------------------------
# Torch model table: what each test exports, with which inputs
# --------------------------------------------------------------------------------------------


class TorchSpec:
    """How to build, export and feed one torch model.

    ``build()`` returns the module (seeded, eval mode); ``inputs(batch, seed)`` returns the
    feeds as a dict of numpy arrays in input order (batch size and, for sequence models, a
    length that varies with the seed, so that dynamic axes are exercised).
    """

    def __init__(
        self,
        name: str,
        build: Any,
        inputs: Any,
        input_names: Sequence[str],
        output_names: Sequence[str],
        dynamic_axes: dict[str, dict[int, str]],
        dynamo: bool = False,
        keep_batchnorm: bool = False,
        opset: int = 17,
    ) -> None:
        self.name = name
        self.build = build
        self.inputs = inputs
        self.input_names = tuple(input_names)
        self.output_names = tuple(output_names)
        self.dynamic_axes = dynamic_axes
        self.dynamo = dynamo
        self.keep_batchnorm = keep_batchnorm
        self.opset = opset

    def export(self, model: nn.Module, path: str | os.PathLike[str]) -> str:
        feeds = self.inputs(2, 0)
        args = tuple(torch.from_numpy(feeds[n]) for n in self.input_names)
        return export_torch(
            model,
            args,
            path,
            self.input_names,
            self.output_names,
            self.dynamic_axes,
            dynamo=self.dynamo,
            opset=self.opset,
            keep_batchnorm=self.keep_batchnorm,
        )


def _tokens_and_mask(batch: int, seed: int, vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    seq = 16 if seed == 0 else 11
    ids = rng.integers(0, vocab, size=(batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), dtype=np.int64)
    if seed != 0 and batch > 1:
        mask[1, seq - 3 :] = 0  # right padding on one row exercises the attention mask
    return {"input_ids": ids, "attention_mask": mask}


def _bert() -> nn.Module:
    return OutputsAsTuple(
        build_bert(), ("input_ids", "attention_mask"), ("last_hidden_state", "pooler_output")
    )


def _gpt2() -> nn.Module:
    # attention_mask is passed explicitly: without it transformers looks for packed
    # sequences with torch.diff, which the TorchScript exporter cannot export.
    return OutputsAsTuple(build_gpt2(), ("input_ids", "attention_mask"), ("logits",))


def _vit() -> nn.Module:
    return OutputsAsTuple(build_vit(), ("pixel_values",), ("last_hidden_state", "pooler_output"))


def _seeded_module(cls: Any, bn: bool = False) -> Any:
    def build() -> nn.Module:
        torch.manual_seed(0)
        m = cls()
        if bn:
            randomize_batchnorm(m)
        return m.eval()

    return build


_TOKEN_AXES = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}

TORCH_MODELS: dict[str, TorchSpec] = {
    spec.name: spec
    for spec in [
        TorchSpec(
            "bert",
            _bert,
            lambda b, s: _tokens_and_mask(b, s, 1000),
            ("input_ids", "attention_mask"),
            ("last_hidden_state", "pooler_output"),
            _TOKEN_AXES,
        ),
        TorchSpec(
            "bert_dynamo",
            _bert,
            lambda b, s: _tokens_and_mask(b, s, 1000),
            ("input_ids", "attention_mask"),
            ("last_hidden_state", "pooler_output"),
            _TOKEN_AXES,
            dynamo=True,
            # The dynamo exporter builds opset 18 graphs; asking for 17 runs a version
            # converter, so export at its native opset.
            opset=18,
        ),
        TorchSpec(
            "gpt2",
            _gpt2,
            lambda b, s: _tokens_and_mask(b, s, 1000),
            ("input_ids", "attention_mask"),
            ("logits",),
            _TOKEN_AXES,
        ),
        TorchSpec(
            "vit",
            _vit,
            lambda b, s: {"pixel_values": seeded((b, 3, 32, 32), s)},
            ("pixel_values",),
            ("last_hidden_state", "pooler_output"),
            {"pixel_values": {0: "batch"}},
        ),
        TorchSpec(
            "resnet18",
            _seeded_module(ResNet18Small, bn=True),
            lambda b, s: {"x": seeded((b, 3, 64, 64), s)},
            ("x",),
            ("logits",),
            {"x": {0: "batch"}, "logits": {0: "batch"}},
            keep_batchnorm=True,
        ),
        TorchSpec(
            "resnet18_folded",
            _seeded_module(ResNet18Small, bn=True),
            lambda b, s: {"x": seeded((b, 3, 64, 64), s)},
            ("x",),
            ("logits",),
            {"x": {0: "batch"}, "logits": {0: "batch"}},
        ),
        TorchSpec(
            "mobilenetv2",
            _seeded_module(MobileNetV2Small, bn=True),
            lambda b, s: {"x": seeded((b, 3, 64, 64), s)},
            ("x",),
            ("logits",),
            {"x": {0: "batch"}, "logits": {0: "batch"}},
            keep_batchnorm=True,
        ),
        TorchSpec(
            "lstm_tagger",
            _seeded_module(LSTMTagger),
            lambda b, s: {
                "tokens": np.random.default_rng(s)
                .integers(0, 100, size=(b, 9 if s == 0 else 5))
                .astype(np.int64)
            },
            ("tokens",),
            ("scores",),
            {"tokens": {0: "batch", 1: "seq"}, "scores": {0: "batch", 1: "seq"}},
        ),
        TorchSpec(
            "conv_gru",
            _seeded_module(ConvGRU),
            lambda b, s: {"x": seeded((b, 6, 12 if s == 0 else 7), s)},
            ("x",),
            ("y",),
            {"x": {0: "batch", 2: "time"}, "y": {0: "batch"}},
        ),
    ]
}


# --------------------------------------------------------------------------------------------
# Comparison and diagnosis
# (EXPORT_RELEVANT_END: the export cache key hashes this file up to this line only.)
# --------------------------------------------------------------------------------------------


def compare_outputs(
    got: Sequence[Any], want: Sequence[Any], names: Sequence[str], rtol: float, atol: float
) -> list[str]:
    """Compare output lists; return one line per mismatching output (empty when all match).

    Dtypes and shapes must be equal; float values within ``rtol``/``atol``; others equal.
    """
    problems = []
    if len(got) != len(want):
        return [f"{len(got)} outputs, expected {len(want)}"]
    for name, g, w in zip(names, got, want):
        g = np.asarray(g)
        w = np.asarray(w)
        if g.dtype != w.dtype or g.shape != w.shape:
            problems.append(
                f"{name}: {g.dtype}{list(g.shape)} != expected {w.dtype}{list(w.shape)}"
            )
            continue
        if w.dtype.kind in "fc":
            bad = ~np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        else:
            bad = g != w
        if bad.any():
            diff = np.abs(g.astype(np.float64) - w.astype(np.float64))
            problems.append(
                f"{name}: {int(bad.sum())}/{bad.size} values differ, max abs diff "
                f"{float(np.nanmax(diff)):.3g} (|expected| max {float(np.abs(w).max()):.3g})"
            )
    return problems


def locate_divergence(
    model: onnx.ModelProto,
    feeds: dict[str, np.ndarray],
    rtol: float = 1e-3,
    atol: float = 1e-4,
    limit: int = 3,
) -> list[str]:
    """Find the first nodes whose outputs differ between onnxjit and onnxruntime.

    Every intermediate value of the main graph whose type shape inference knows is exposed as
    a graph output; both runtimes run the widened model and the nodes are walked in graph
    (topological) order. Returns up to ``limit`` lines ``node (Op): problem`` — the first one
    is where the error starts. This is a diagnostic for failure messages: it never raises
    (a runtime that cannot run the widened model is reported as a line).
    """
    import onnxjit

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception as e:  # diagnostics only
        return [f"(shape inference failed: {e})"]
    known = {v.name: v for v in inferred.graph.value_info}
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    existing = {o.name for o in wide.graph.output}
    for node in wide.graph.node:
        for out in node.output:
            if out and out not in existing and out in known:
                vi = known[out]
                # Only tensors with a known rank: graph outputs need a rank in onnxjit.
                if vi.type.WhichOneof("value") == "tensor_type" and vi.type.tensor_type.HasField(
                    "shape"
                ):
                    wide.graph.output.append(vi)
                    existing.add(out)
    names = [o.name for o in wide.graph.output]
    try:
        want = dict(zip(names, ort_session(wide.SerializeToString()).run(None, feeds)))
    except Exception as e:
        return [f"(onnxruntime cannot run the widened model: {str(e)[:200]})"]
    try:
        sess = onnxjit.InferenceSession(wide.SerializeToString())
        got = dict(zip(names, sess.run(None, feeds)))
    except Exception as e:
        return [f"(onnxjit cannot run the widened model: {type(e).__name__}: {str(e)[:300]})"]
    lines = []
    for node in wide.graph.node:
        outs = [o for o in node.output if o in got]
        probs = compare_outputs([got[o] for o in outs], [want[o] for o in outs], outs, rtol, atol)
        if probs:
            ins = [
                f"{np.asarray(want[i]).dtype}{list(np.asarray(want[i]).shape)}"
                if i in want
                else ("<omitted>" if not i else "<graph input/initializer>")
                for i in node.input
            ]
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            attrs = {k: v for k, v in attrs.items() if not isinstance(v, (onnx.TensorProto,))}
            lines.append(
                f"{node.name or '<unnamed>'} ({node.op_type}, attrs {attrs}, inputs {ins}): "
                + "; ".join(probs)
            )
            if len(lines) >= limit:
                break
    return lines
