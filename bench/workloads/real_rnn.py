"""Real-model workload R6 (issue 43, item 1): recurrent models exported by ``torch.onnx``.

Every model is a ``torch.nn`` module built here from code with weights drawn from fixed seeds
(:func:`bench.workloads.real._seeded`); nothing is downloaded. Exports go through
:func:`bench.workloads.real._export` and are cached by :func:`bench.workloads.real._cached`,
as R1-R4's are.

* ``lstm``: ``nn.LSTM`` (input 128, hidden 256, 2 layers, ``batch_first``) and a Linear head on
  every step (32 classes);
* ``bilstm``: a bidirectional ``nn.LSTM`` (input 128, hidden 256, 1 layer, ``batch_first``)
  and a Linear head on every step;
* ``gru``: ``nn.GRU`` (input 128, hidden 256, 2 layers, sequence-major as torch's default)
  and a Linear head on every step;
* ``lstm_lm``: a small language model, Embedding (vocabulary 2048, 128 wide) + ``nn.LSTM``
  (hidden 256, 2 layers) + Linear over the vocabulary, taking and returning the recurrent
  state (``h0``, ``c0`` -> ``hn``, ``cn``) as a streaming model does;
* ``kws_gru``: keyword spotting, ``nn.GRU`` over 40 filter-bank features (hidden 64, 1 layer)
  and a Linear classifier (12 keywords) on the last step.

Each is exported once with dynamic batch and sequence axes by the TorchScript exporter, which
writes ONNX ``LSTM`` / ``GRU`` nodes (``layout`` 0, ``linear_before_reset=1`` for GRU, one node
per layer, Transposes around the batch-first ones), and run at batch 1 and 8, sequence 16 and
128. The dynamo exporter is tried on ``lstm`` and ``gru`` at batch 1, sequence 128 (``*_dynamo``);
where it fails the failure is listed by :func:`bench.workloads.real.export_failures`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from bench.workloads import Case
from bench.workloads.real import TOL_F32, _cached, _export, _seeded, _try

INPUT, HIDDEN, CLASSES = 128, 256, 32
LM_VOCAB, LM_EMBED = 2048, 128
KWS_FEATURES, KWS_HIDDEN, KWS_CLASSES = 40, 64, 12
BATCHES = (1, 8)
SEQS = (16, 128)
KINDS = ("lstm", "bilstm", "gru", "lstm_lm", "kws_gru")


def _module(kind: str) -> Any:
    """The seeded torch module of ``kind`` (see the module docstring)."""
    import torch
    from torch import nn

    class Tagger(nn.Module):
        """A recurrent layer stack and a Linear head on every step."""

        def __init__(self, rnn: nn.Module, width: int) -> None:
            super().__init__()
            self.rnn = rnn
            self.head = nn.Linear(width, CLASSES)

        def forward(self, x: Any) -> Any:
            y, _ = self.rnn(x)
            return self.head(y)

    class LanguageModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(LM_VOCAB, LM_EMBED)
            self.rnn = nn.LSTM(LM_EMBED, HIDDEN, 2, batch_first=True)
            self.head = nn.Linear(HIDDEN, LM_VOCAB)

        def forward(self, input_ids: Any, h0: Any, c0: Any) -> Any:
            y, (hn, cn) = self.rnn(self.embed(input_ids), (h0, c0))
            return self.head(y), hn, cn

    class Keywords(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.GRU(KWS_FEATURES, KWS_HIDDEN, 1, batch_first=True)
            self.head = nn.Linear(KWS_HIDDEN, KWS_CLASSES)

        def forward(self, x: Any) -> Any:
            y, _ = self.rnn(x)
            return torch.log_softmax(self.head(y[:, -1]), dim=-1)

    if kind == "lstm":
        return _seeded(lambda: Tagger(nn.LSTM(INPUT, HIDDEN, 2, batch_first=True), HIDDEN))
    if kind == "bilstm":
        return _seeded(
            lambda: Tagger(
                nn.LSTM(INPUT, HIDDEN, 1, batch_first=True, bidirectional=True), 2 * HIDDEN
            )
        )
    if kind == "gru":
        return _seeded(lambda: Tagger(nn.GRU(INPUT, HIDDEN, 2), HIDDEN))
    if kind == "lstm_lm":
        return _seeded(LanguageModel)
    if kind == "kws_gru":
        return _seeded(Keywords)
    raise ValueError(f"unknown recurrent model {kind!r}")


def feeds(kind: str, batch: int, seq: int, seed: int = 1) -> dict[str, np.ndarray]:
    """Inputs of ``kind`` at ``batch`` x ``seq`` (unit-scale features; random token ids and
    small random states for the language model)."""
    rng = np.random.default_rng(seed)
    if kind == "lstm_lm":
        state = (2, batch, HIDDEN)
        return {
            "input_ids": rng.integers(0, LM_VOCAB, size=(batch, seq), dtype=np.int64),
            "h0": (0.1 * rng.standard_normal(state)).astype(np.float32),
            "c0": (0.1 * rng.standard_normal(state)).astype(np.float32),
        }
    if kind == "gru":  # sequence-major
        return {"x": rng.standard_normal((seq, batch, INPUT)).astype(np.float32)}
    width = KWS_FEATURES if kind == "kws_gru" else INPUT
    return {"x": rng.standard_normal((batch, seq, width)).astype(np.float32)}


def model(kind: str, exporter: str = "torchscript") -> onnx.ModelProto:
    """``kind`` exported with dynamic batch and sequence axes (cached)."""

    def build() -> onnx.ModelProto:
        import torch

        module = _module(kind)
        f = feeds(kind, 2, 16)
        names = list(f)
        args = tuple(torch.from_numpy(f[n]) for n in names)
        bs = {0: "batch", 1: "seq"}
        if kind == "lstm_lm":
            state = {1: "batch"}
            dyn = {"input_ids": bs, "h0": state, "c0": state}
            dyn |= {"logits": bs, "hn": state, "cn": state}
            return _export(module, args, names, ["logits", "hn", "cn"], dyn, exporter)
        if kind == "kws_gru":
            dyn = {"x": bs, "logits": {0: "batch"}}
        elif kind == "gru":
            sb = {0: "seq", 1: "batch"}
            dyn = {"x": sb, "logits": sb}
        else:
            dyn = {"x": bs, "logits": bs}
        return _export(module, args, names, ["logits"], dyn, exporter)

    return _cached(f"rnn_{kind}_{exporter}", build)


def cases_r6(quick: bool) -> list[Case]:
    """R6: the five recurrent models at batch 1/8 x sequence 16/128 (TorchScript exporter), and
    ``lstm`` and ``gru`` from the dynamo exporter at batch 1, sequence 128.

    quick: ``lstm`` at batch 1, sequence 16.
    """
    out: list[Case] = []
    if quick:
        return [Case("R6", "lstm/b1/s16", model("lstm"), feeds("lstm", 1, 16), **TOL_F32)]
    for kind in KINDS:
        m = model(kind)
        for b in BATCHES:
            for s in SEQS:
                out.append(Case("R6", f"{kind}/b{b}/s{s}", m, feeds(kind, b, s), **TOL_F32))
    for kind in ("lstm", "gru"):

        def dynamo(kind: str = kind) -> Case:
            m = model(kind, "dynamo")
            return Case("R6", f"{kind}_dynamo/b1/s128", m, feeds(kind, 1, 128), **TOL_F32)

        dynamo.__name__ = f"{kind}_dynamo"
        _try(out, dynamo)
    return out
