"""Transformer workloads: T1 (BERT-style encoder) and T2 (GPT-2-style decoder step with a KV cache).

Every model is built with fixed seeds and random weights; nothing is downloaded.

* :func:`bert_primitive` writes a BERT encoder from primitive ONNX ops the way exporters write
  them (MatMul + Add bias, LayerNorm as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add,
  attention as separate MatMul/Reshape/Transpose/Div/Add/Softmax nodes, GELU in its erf form),
  so that the pattern passes have the real exporter shapes to match.
* :func:`bert_torch` exports an equivalent hand-written PyTorch BERT with ``torch.onnx.export``
  (the TorchScript exporter, or the dynamo exporter with ``exporter="dynamo"``); exported bytes are
  cached under ``$TMPDIR/onnxjit_bench_models`` keyed by the parameters, since export takes seconds.
* :func:`gpt2_step` writes one GPT-2 decoding step (one new token, past K/V per layer as inputs,
  present K/V as outputs, GELU in its tanh form).

:func:`cases_t1` and :func:`cases_t2` return the benchmark :class:`bench.workloads.Case` lists.
The FLOP counts on those cases count 2*M*N*K per matrix product (the GEMMs and the two attention
products); elementwise work is not counted.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import tempfile
import warnings
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from . import Case

DEFAULT_OPSET = 17
"""Opset of the built models: LayerNormalization exists (17) and Reduce* still take ``axes`` as
an attribute, which is what the TorchScript exporter writes at its default opset."""

VOCAB = 8192
"""Vocabulary of the embedding tables: BERT's 30522 would add 90 MB of weights at hidden 768
for a Gather that costs nothing; the token count, not the vocabulary, drives the time."""

MAX_POSITIONS = 512


class GraphBuilder:
    """Accumulates nodes and initializers for an onnx.helper graph, with fresh names.

    ``op`` adds a node and returns its output name (or list of names when ``n_out > 1``);
    ``const`` adds an initializer (scalar constants are shared, as exporters share them);
    ``weight`` adds a random normal initializer from the builder's seeded generator.
    """

    def __init__(self, opset: int = DEFAULT_OPSET, seed: int = 0) -> None:
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count: dict[str, int] = {}
        self._scalars: dict[tuple, str] = {}

    def fresh(self, prefix: str) -> str:
        """A new unique value name starting with ``prefix``."""
        n = self._count.get(prefix, 0)
        self._count[prefix] = n + 1
        return f"{prefix}_{n}" if n else prefix

    def const(self, value: Any, prefix: str = "const", dtype: Any = None) -> str:
        """Add an initializer holding ``value``; 0-d and 1-element constants are shared."""
        arr = np.asarray(value, dtype=dtype)
        key = None
        if arr.size <= 8:
            key = (arr.dtype.str, arr.shape, arr.tobytes())
            if key in self._scalars:
                return self._scalars[key]
        name = self.fresh(prefix)
        self.inits.append(numpy_helper.from_array(arr, name))
        if key is not None:
            self._scalars[key] = name
        return name

    def weight(self, shape: tuple[int, ...], std: float, prefix: str, mean: float = 0.0) -> str:
        """A float32 initializer drawn from N(mean, std^2)."""
        arr = (mean + std * self.rng.standard_normal(shape)).astype(np.float32)
        name = self.fresh(prefix)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def op(self, op_type: str, *inputs: str, n_out: int = 1, name: str | None = None, **attrs):
        """Add a node; returns its output name, or a list of names when ``n_out > 1``."""
        base = name or op_type.lower()
        outs = [self.fresh(base) for _ in range(n_out)]
        self.nodes.append(
            helper.make_node(op_type, list(inputs), outs, name=self.fresh("n_" + base), **attrs)
        )
        return outs[0] if n_out == 1 else outs

    def rename(self, old: str, new: str) -> str:
        """Rename value ``old`` to ``new`` everywhere (to give a graph output its public name)."""
        for node in self.nodes:
            node.output[:] = [new if o == old else o for o in node.output]
            node.input[:] = [new if i == old else i for i in node.input]
        return new

    def reduce_mean(self, x: str, axes: list[int], keepdims: int = 1) -> str:
        """ReduceMean with ``axes`` as an attribute (opset < 18) or an input (opset >= 18)."""
        if self.opset >= 18:
            return self.op("ReduceMean", x, self.const(np.array(axes, np.int64)), keepdims=keepdims)
        return self.op("ReduceMean", x, axes=axes, keepdims=keepdims)

    def unsqueeze(self, x: str, axes: list[int]) -> str:
        """Unsqueeze with ``axes`` as an attribute (opset < 13) or an input (opset >= 13)."""
        if self.opset >= 13:
            return self.op("Unsqueeze", x, self.const(np.array(axes, np.int64)))
        return self.op("Unsqueeze", x, axes=axes)

    def model(
        self,
        inputs: list[onnx.ValueInfoProto],
        outputs: list[onnx.ValueInfoProto],
        name: str,
    ) -> onnx.ModelProto:
        """The finished model (IR version 8, so any onnxruntime since 1.10 loads it)."""
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", self.opset)],
            producer_name="onnxjit-bench",
            ir_version=8,
        )
        return model


def _dim(value: int, symbol: str, dynamic: bool) -> int | str:
    return symbol if dynamic else value


def _layer_norm(g: GraphBuilder, x: str, hidden: int, eps: float, prefix: str) -> str:
    """LayerNorm over the last axis as the TorchScript exporter writes it before opset 17."""
    gamma = g.weight((hidden,), 0.05, f"{prefix}.weight", mean=1.0)
    beta = g.weight((hidden,), 0.02, f"{prefix}.bias")
    mean = g.reduce_mean(x, [-1])
    d = g.op("Sub", x, mean)
    sq = g.op("Pow", d, g.const(np.float32(2.0)))
    var = g.reduce_mean(sq, [-1])
    std = g.op("Sqrt", g.op("Add", var, g.const(np.float32(eps))))
    y = g.op("Div", d, std)
    return g.op("Add", g.op("Mul", y, gamma), beta)


def _linear(g: GraphBuilder, x: str, n_in: int, n_out: int, prefix: str) -> str:
    """MatMul by a [n_in, n_out] weight, then Add of the bias (the exporter's nn.Linear)."""
    w = g.weight((n_in, n_out), 0.02, f"{prefix}.weight")
    b = g.weight((n_out,), 0.02, f"{prefix}.bias")
    return g.op("Add", g.op("MatMul", x, w), b)


def _gelu_erf(g: GraphBuilder, x: str) -> str:
    """x * 0.5 * (1 + erf(x / sqrt(2))) in the node order torch/HF exports."""
    e = g.op("Erf", g.op("Div", x, g.const(np.float32(1.4142135381698608))))
    return g.op(
        "Mul",
        g.op("Mul", x, g.op("Add", e, g.const(np.float32(1.0)))),
        g.const(0.5, dtype=np.float32),
    )


def _gelu_tanh(g: GraphBuilder, x: str) -> str:
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) as GPT-2 exports write it."""
    half = g.op("Mul", x, g.const(np.float32(0.5)))
    cube = g.op("Pow", x, g.const(np.float32(3.0)))
    inner = g.op("Add", x, g.op("Mul", cube, g.const(np.float32(0.044715))))
    t = g.op("Tanh", g.op("Mul", inner, g.const(np.float32(math.sqrt(2.0 / math.pi)))))
    return g.op("Mul", half, g.op("Add", t, g.const(np.float32(1.0))))


def _split_heads_shape(
    g: GraphBuilder, x: str, batch: int, seq: int, heads: int, d: int, dynamic: bool
) -> str:
    """Target shape [b, s, heads, d]: a constant when static, the exporter's
    Shape -> Gather -> Unsqueeze -> Concat chain when the batch and sequence are symbolic."""
    if not dynamic:
        return g.const(np.array([batch, seq, heads, d], np.int64), "shape_bshd")
    shape = g.op("Shape", x)
    b = g.unsqueeze(g.op("Gather", shape, g.const(np.array(0, np.int64)), axis=0), [0])
    s = g.unsqueeze(g.op("Gather", shape, g.const(np.array(1, np.int64)), axis=0), [0])
    hd = g.const(np.array([heads, d], np.int64))
    return g.op("Concat", b, s, hd, axis=0)


def _merge_heads_shape(
    g: GraphBuilder, x: str, batch: int, seq: int, hidden: int, dynamic: bool
) -> str:
    """Target shape [b, s, hidden], computed from ``x`` ([b, s, ...]) when dynamic."""
    if not dynamic:
        return g.const(np.array([batch, seq, hidden], np.int64), "shape_bsh")
    shape = g.op("Shape", x)
    b = g.unsqueeze(g.op("Gather", shape, g.const(np.array(0, np.int64)), axis=0), [0])
    s = g.unsqueeze(g.op("Gather", shape, g.const(np.array(1, np.int64)), axis=0), [0])
    return g.op("Concat", b, s, g.const(np.array([hidden], np.int64)), axis=0)


def _bert_layer(
    g: GraphBuilder,
    x: str,
    mask: str,
    hidden: int,
    heads: int,
    batch: int,
    seq: int,
    dynamic: bool,
    scale: str,
    prefix: str,
) -> str:
    d = hidden // heads
    q = _linear(g, x, hidden, hidden, f"{prefix}.attention.self.query")
    k = _linear(g, x, hidden, hidden, f"{prefix}.attention.self.key")
    v = _linear(g, x, hidden, hidden, f"{prefix}.attention.self.value")
    q = g.op("Reshape", q, _split_heads_shape(g, q, batch, seq, heads, d, dynamic))
    k = g.op("Reshape", k, _split_heads_shape(g, k, batch, seq, heads, d, dynamic))
    v = g.op("Reshape", v, _split_heads_shape(g, v, batch, seq, heads, d, dynamic))
    q = g.op("Transpose", q, perm=[0, 2, 1, 3])  # [b, h, s, d]
    kt = g.op("Transpose", k, perm=[0, 2, 3, 1])  # [b, h, d, s]
    v = g.op("Transpose", v, perm=[0, 2, 1, 3])
    scores = g.op("MatMul", q, kt)
    if scale == "div":
        scores = g.op("Div", scores, g.const(np.float32(math.sqrt(d))))
    else:
        scores = g.op("Mul", scores, g.const(np.float32(1.0 / math.sqrt(d))))
    scores = g.op("Add", scores, mask)
    probs = g.op("Softmax", scores, axis=-1)
    ctx = g.op("MatMul", probs, v)  # [b, h, s, d]
    ctx = g.op("Transpose", ctx, perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", ctx, _merge_heads_shape(g, ctx, batch, seq, hidden, dynamic))
    attn = _linear(g, ctx, hidden, hidden, f"{prefix}.attention.output.dense")
    x = _layer_norm(g, g.op("Add", attn, x), hidden, 1e-12, f"{prefix}.attention.output.LayerNorm")
    h = _gelu_erf(g, _linear(g, x, hidden, 4 * hidden, f"{prefix}.intermediate.dense"))
    out = _linear(g, h, 4 * hidden, hidden, f"{prefix}.output.dense")
    return _layer_norm(g, g.op("Add", out, x), hidden, 1e-12, f"{prefix}.output.LayerNorm")


def bert_primitive(
    hidden: int,
    heads: int,
    layers: int,
    seq: int = 128,
    batch: int = 1,
    dynamic: bool = False,
    opset: int = DEFAULT_OPSET,
    seed: int = 0,
    scale: str = "div",
) -> onnx.ModelProto:
    """A BERT encoder written with primitive ONNX ops as exporters write them.

    Inputs ``input_ids`` and ``attention_mask`` (int64, [batch, seq]; mask 1 = attend); output
    ``last_hidden_state`` (float32, [batch, seq, hidden]). Word + position + token-type
    embeddings, embedding LayerNorm, then ``layers`` post-LN encoder layers with a 4x FFN. The
    mask becomes the additive (1 - mask) * -10000 term of shape [b, 1, 1, s]. With
    ``dynamic=True`` the batch and sequence dims are symbolic ('batch', 'seq') and every
    reshape target is computed from Shape chains, so one model serves any size up to 512
    tokens. ``scale`` writes the 1/sqrt(d) scaling of the scores as a Div by sqrt(d) ("div",
    HF BERT's export) or a Mul by 1/sqrt(d) ("mul").
    """
    if scale not in ("div", "mul"):
        raise ValueError(f"scale must be 'div' or 'mul', found {scale!r}")
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
    if seq > MAX_POSITIONS:
        raise ValueError(f"seq {seq} exceeds the {MAX_POSITIONS} position embeddings")
    g = GraphBuilder(opset, seed)
    bdim, sdim = _dim(batch, "batch", dynamic), _dim(seq, "seq", dynamic)

    word = g.weight((VOCAB, hidden), 0.02, "embeddings.word_embeddings.weight")
    pos = g.weight((MAX_POSITIONS, hidden), 0.02, "embeddings.position_embeddings.weight")
    tok = g.weight((1, 1, hidden), 0.02, "embeddings.token_type_embeddings.row0")
    x = g.op("Gather", word, "input_ids", axis=0)
    # position ids 0..s-1: slice the table to the sequence length (from Shape when dynamic)
    if dynamic:
        s_len = g.unsqueeze(
            g.op("Gather", g.op("Shape", "input_ids"), g.const(np.array(1, np.int64)), axis=0),
            [0],
        )
    else:
        s_len = g.const(np.array([seq], np.int64))
    zero = g.const(np.array([0], np.int64))
    p = g.op("Slice", pos, zero, s_len, zero)
    x = g.op("Add", g.op("Add", x, p), tok)
    x = _layer_norm(g, x, hidden, 1e-12, "embeddings.LayerNorm")

    m = g.unsqueeze("attention_mask", [1, 2])
    m = g.op("Cast", m, to=TensorProto.FLOAT)
    m = g.op("Sub", g.const(np.float32(1.0)), m)
    mask = g.op("Mul", m, g.const(np.float32(-10000.0)))

    for i in range(layers):
        x = _bert_layer(g, x, mask, hidden, heads, batch, seq, dynamic, scale, f"encoder.layer.{i}")
    x = g.rename(x, "last_hidden_state")
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, [bdim, sdim]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [bdim, sdim]),
    ]
    outputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [bdim, sdim, hidden])]
    return g.model(inputs, outputs, f"bert_primitive_h{hidden}_l{layers}")


def bert_feeds(
    seq: int = 128, batch: int = 1, seed: int = 1, pad: int = 0
) -> dict[str, np.ndarray]:
    """Random token ids and an attention mask whose last ``pad`` positions are padding."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, size=(batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), np.int64)
    if pad:
        mask[:, seq - pad :] = 0
    return {"input_ids": ids, "attention_mask": mask}


def bert_flops(hidden: int, layers: int, seq: int = 128, batch: int = 1) -> int:
    """2*M*N*K over the matrix products of the encoder (QKV, scores, context, output, FFN)."""
    per_layer = 2 * seq * hidden * hidden * (3 + 1 + 4 + 4) + 2 * 2 * seq * seq * hidden
    return batch * layers * per_layer


# ---------------------------------------------------------------------------------------------
# torch export


def _torch_bert_module(hidden: int, heads: int, layers: int, seed: int):
    """A hand-written BERT (same structure as :func:`bert_primitive`) as a torch module."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads, self.d = heads, hidden // heads
            self.query = nn.Linear(hidden, hidden)
            self.key = nn.Linear(hidden, hidden)
            self.value = nn.Linear(hidden, hidden)
            self.dense = nn.Linear(hidden, hidden)
            self.norm = nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, x, mask):
            b, s, _ = x.shape
            q = self.query(x).view(b, s, self.heads, self.d).transpose(1, 2)
            k = self.key(x).view(b, s, self.heads, self.d).transpose(1, 2)
            v = self.value(x).view(b, s, self.heads, self.d).transpose(1, 2)
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d)
            probs = torch.softmax(scores + mask, dim=-1)
            ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, hidden)
            return self.norm(self.dense(ctx) + x)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = SelfAttention()
            self.intermediate = nn.Linear(hidden, 4 * hidden)
            self.output = nn.Linear(4 * hidden, hidden)
            self.norm = nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, x, mask):
            x = self.attention(x, mask)
            return self.norm(self.output(F.gelu(self.intermediate(x))) + x)

    class Bert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.word = nn.Embedding(VOCAB, hidden)
            self.pos = nn.Embedding(MAX_POSITIONS, hidden)
            self.norm = nn.LayerNorm(hidden, eps=1e-12)
            self.layers = nn.ModuleList([Layer() for _ in range(layers)])

        def forward(self, input_ids, attention_mask):
            s = input_ids.shape[1]
            x = self.word(input_ids) + self.pos.weight[:s]
            x = self.norm(x)
            mask = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
            for layer in self.layers:
                x = layer(x, mask)
            return x

    torch.manual_seed(seed)
    model = Bert()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
        for mod in model.modules():
            if isinstance(mod, nn.LayerNorm):
                mod.weight.normal_(1.0, 0.05)
    return model.eval()


def _cache_dir() -> str:
    path = os.environ.get("ONNXJIT_BENCH_CACHE") or os.path.join(
        tempfile.gettempdir(), "onnxjit_bench_models"
    )
    os.makedirs(path, exist_ok=True)
    return path


def bert_torch(
    hidden: int,
    heads: int,
    layers: int,
    seq: int = 128,
    batch: int = 1,
    dynamic: bool = False,
    exporter: str = "torchscript",
    opset: int = DEFAULT_OPSET,
    seed: int = 0,
) -> onnx.ModelProto:
    """A hand-written PyTorch BERT exported with ``torch.onnx.export``.

    Same inputs and output as :func:`bert_primitive` (the weights differ: torch draws them).
    ``exporter`` is "torchscript" (``dynamo=False``; LayerNorm becomes LayerNormalization-17,
    GELU its Erf form) or "dynamo" (the torch.export-based exporter through onnxscript). With
    ``dynamic=True`` the batch and sequence axes are exported as symbolic dims. The exported
    bytes are cached in a temporary directory keyed by every parameter and the torch version.
    """
    import torch

    if exporter not in ("torchscript", "dynamo"):
        raise ValueError(f"exporter must be 'torchscript' or 'dynamo', found {exporter!r}")
    key = f"bert_{hidden}_{heads}_{layers}_{seq}_{batch}_{dynamic}_{exporter}_{opset}_{seed}"
    key += "_" + hashlib.sha1(f"{torch.__version__} v1".encode()).hexdigest()[:8]
    path = os.path.join(_cache_dir(), key + ".onnx")
    if os.path.exists(path):
        return onnx.load(path)

    model = _torch_bert_module(hidden, heads, layers, seed)
    feeds = bert_feeds(seq, batch)
    args = (torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"]))
    names = dict(input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"])
    buf = io.BytesIO()
    # both exporters warn about their own deprecations; nothing the caller can act on
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        if exporter == "torchscript":
            axes = None
            if dynamic:
                axes = {
                    "input_ids": {0: "batch", 1: "seq"},
                    "attention_mask": {0: "batch", 1: "seq"},
                    "last_hidden_state": {0: "batch", 1: "seq"},
                }
            torch.onnx.export(
                model, args, buf, opset_version=opset, dynamo=False, dynamic_axes=axes, **names
            )
            proto = onnx.load_from_string(buf.getvalue())
        else:
            shapes = None
            if dynamic:
                b, s = torch.export.Dim("batch", max=64), torch.export.Dim("seq", max=MAX_POSITIONS)
                shapes = {"input_ids": {0: b, 1: s}, "attention_mask": {0: b, 1: s}}
            program = torch.onnx.export(
                model,
                args,
                dynamo=True,
                opset_version=max(opset, 18),
                dynamic_shapes=shapes,
                optimize=True,
                verbose=False,
                **names,
            )
            proto = program.model_proto
    tmp = path + f".{os.getpid()}.tmp"
    onnx.save(proto, tmp)
    os.replace(tmp, path)
    return proto


# ---------------------------------------------------------------------------------------------
# T2: GPT-2 decoder step


def gpt2_step(
    hidden: int,
    heads: int,
    layers: int,
    past: int = 128,
    batch: int = 1,
    dynamic: bool = False,
    opset: int = DEFAULT_OPSET,
    seed: int = 0,
) -> onnx.ModelProto:
    """One GPT-2 decoding step with a KV cache, from primitive ops.

    Inputs: ``hidden_states`` float32 [b, 1, hidden] (the new token's embedding), and per layer
    ``past_key_<i>`` / ``past_value_<i>`` float32 [b, heads, past, d]. Outputs: ``output``
    [b, 1, hidden] (after the final LayerNorm) and ``present_key_<i>`` / ``present_value_<i>``
    [b, heads, past + 1, d]. Each pre-LN block: LayerNorm, fused c_attn MatMul + bias, Split into
    Q/K/V, heads reshape/transpose, Concat with the past on the sequence axis, scores scaled by a
    Div, Softmax (no causal mask: the one new token may see every position), context, c_proj,
    residual; LayerNorm, MLP 4x with GELU in its tanh form, residual. With ``dynamic=True`` the
    batch and past dims are symbolic ('batch', 'past').
    """
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
    g = GraphBuilder(opset, seed)
    d = hidden // heads
    bdim = _dim(batch, "batch", dynamic)
    pdim = _dim(past, "past", dynamic)
    inputs = [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, [bdim, 1, hidden])]
    outputs = []
    x = "hidden_states"
    split = g.const(np.array([hidden, hidden, hidden], np.int64))
    if dynamic:
        shape = g.op("Shape", x)
        b = g.unsqueeze(g.op("Gather", shape, g.const(np.array(0, np.int64)), axis=0), [0])
        split_shape = g.op("Concat", b, g.const(np.array([1, heads, d], np.int64)), axis=0)
        merge_shape = g.op("Concat", b, g.const(np.array([1, hidden], np.int64)), axis=0)
    else:
        split_shape = g.const(np.array([batch, 1, heads, d], np.int64))
        merge_shape = g.const(np.array([batch, 1, hidden], np.int64))
    for i in range(layers):
        pk, pv = f"past_key_{i}", f"past_value_{i}"
        for nm in (pk, pv):
            inputs.append(
                helper.make_tensor_value_info(nm, TensorProto.FLOAT, [bdim, heads, pdim, d])
            )
        h = _layer_norm(g, x, hidden, 1e-5, f"h.{i}.ln_1")
        qkv = _linear(g, h, hidden, 3 * hidden, f"h.{i}.attn.c_attn")
        q, k, v = g.op("Split", qkv, split, n_out=3, axis=2)
        q = g.op("Transpose", g.op("Reshape", q, split_shape), perm=[0, 2, 1, 3])
        k = g.op("Transpose", g.op("Reshape", k, split_shape), perm=[0, 2, 1, 3])
        v = g.op("Transpose", g.op("Reshape", v, split_shape), perm=[0, 2, 1, 3])
        k = g.op("Concat", pk, k, axis=2, name=f"present_key_{i}")
        v = g.op("Concat", pv, v, axis=2, name=f"present_value_{i}")
        total = "past+1" if dynamic else past + 1
        for nm in (k, v):
            outputs.append(
                helper.make_tensor_value_info(nm, TensorProto.FLOAT, [bdim, heads, total, d])
            )
        scores = g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2]))
        scores = g.op("Div", scores, g.const(np.float32(math.sqrt(d))))
        probs = g.op("Softmax", scores, axis=-1)
        ctx = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])
        ctx = g.op("Reshape", ctx, merge_shape)
        x = g.op("Add", x, _linear(g, ctx, hidden, hidden, f"h.{i}.attn.c_proj"))
        h = _layer_norm(g, x, hidden, 1e-5, f"h.{i}.ln_2")
        h = _gelu_tanh(g, _linear(g, h, hidden, 4 * hidden, f"h.{i}.mlp.c_fc"))
        x = g.op("Add", x, _linear(g, h, 4 * hidden, hidden, f"h.{i}.mlp.c_proj"))
    x = _layer_norm(g, x, hidden, 1e-5, "ln_f")
    x = g.rename(x, "output")
    outputs.insert(0, helper.make_tensor_value_info(x, TensorProto.FLOAT, [bdim, 1, hidden]))
    return g.model(inputs, outputs, f"gpt2_step_h{hidden}_l{layers}")


def gpt2_feeds(
    hidden: int, heads: int, layers: int, past: int = 128, batch: int = 1, seed: int = 2
) -> dict[str, np.ndarray]:
    """A random token embedding and random past K/V tensors (unit scale)."""
    rng = np.random.default_rng(seed)
    d = hidden // heads
    feeds = {"hidden_states": rng.standard_normal((batch, 1, hidden)).astype(np.float32)}
    for i in range(layers):
        for nm in (f"past_key_{i}", f"past_value_{i}"):
            feeds[nm] = rng.standard_normal((batch, heads, past, d)).astype(np.float32)
    return feeds


def gpt2_flops(hidden: int, layers: int, past: int = 128, batch: int = 1) -> int:
    """2*M*N*K over the step's matrix products (c_attn, scores, context, c_proj, MLP)."""
    per_layer = 2 * hidden * hidden * (3 + 1 + 4 + 4) + 2 * 2 * (past + 1) * hidden
    return batch * layers * per_layer


# ---------------------------------------------------------------------------------------------
# cases

T1_CONFIGS = [(256, 4, 4), (768, 12, 4)]
"""(hidden, heads, layers) of T1: BERT-mini-like and BERT-base width with 4 of its 12 layers
(four layers keep the model at 28 M encoder parameters and a run in tens of ms here)."""

T2_CONFIGS = [(256, 4, 4), (768, 12, 4)]
"""(hidden, heads, layers) of T2: the same widths, 4 decoder blocks each."""


def cases_t1(quick: bool) -> list[Case]:
    """T1 cases: BERT encoders from primitive ops and from torch export, sequence 128, batch 1.

    quick: hidden 256 only, primitive and TorchScript export.
    """
    out = []
    configs = T1_CONFIGS[:1] if quick else T1_CONFIGS
    feeds = bert_feeds(128, 1, pad=16)
    for hidden, heads, layers in configs:
        flops = bert_flops(hidden, layers, 128, 1)
        tag = f"h{hidden}x{layers}/s128"
        builders = [
            ("bert_prim", bert_primitive, {}),
            ("bert_torch", bert_torch, {}),
        ]
        if not quick:
            builders.append(("bert_dynamo", bert_torch, {"exporter": "dynamo"}))
        for name, build, kwargs in builders:
            out.append(
                Case(
                    workload="T1",
                    name=f"{name}/{tag}",
                    model=build(hidden, heads, layers, **kwargs),
                    feeds=dict(feeds),
                    rtol=1e-3,
                    atol=1e-4,
                    flops=flops,
                )
            )
    return out


def cases_t2(quick: bool) -> list[Case]:
    """T2 cases: one GPT-2 decoding step with 128 past tokens, batch 1.

    quick: hidden 256 only.
    """
    out = []
    configs = T2_CONFIGS[:1] if quick else T2_CONFIGS
    for hidden, heads, layers in configs:
        out.append(
            Case(
                workload="T2",
                name=f"gpt2_step/h{hidden}x{layers}/past128",
                model=gpt2_step(hidden, heads, layers, past=128),
                feeds=gpt2_feeds(hidden, heads, layers, past=128),
                rtol=1e-3,
                atol=1e-4,
                flops=gpt2_flops(hidden, layers, 128, 1),
            )
        )
    return out
