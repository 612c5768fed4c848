"""The pattern fusions fire on transformers models as torch's exporters write them.

Each model is a small configuration of a transformers class (random weights from fixed
seeds, default attention implementation, as users export them), exported by the TorchScript
exporter and, where noted, by the dynamo exporter. Every model must equal onnxruntime, and the
optimised graph (``graph_nodes()``) must show the fused form of each block: attention as one
SDPA node, LayerNorm / RMSNorm as one node, GELU / SiLU and the residual Add inside the GEMM
that produces their input.
"""

from __future__ import annotations

import io
import warnings
from collections import Counter

import numpy as np
import pytest
from oracle import assert_close, ort_outputs

import onnxjit

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

LAYERS = 2
VOCAB = 500


def _encoder(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "bert":
        cfg = tf.BertConfig(
            vocab_size=VOCAB,
            hidden_size=64,
            num_attention_heads=4,
            intermediate_size=128,
            num_hidden_layers=LAYERS,
            max_position_embeddings=64,
        )
        return tf.BertModel(cfg, add_pooling_layer=False).eval()
    if kind == "t5":
        cfg = tf.T5Config(
            vocab_size=VOCAB,
            d_model=64,
            d_kv=16,
            d_ff=128,
            num_layers=LAYERS,
            num_heads=4,
            feed_forward_proj="gated-gelu",
        )
        return tf.T5EncoderModel(cfg).eval()
    raise ValueError(kind)


def _decoder(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = tf.GPT2Config(
            vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=LAYERS, n_head=4, use_cache=False
        )
        return tf.GPT2LMHeadModel(cfg).eval()
    # LLaMA-style: grouped-query attention (4 query heads, 2 key/value heads), rotary
    # embeddings, RMSNorm, SiLU-gated MLP
    cfg = tf.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        use_cache=False,
    )
    return tf.LlamaForCausalLM(cfg).eval()


class _Text(torch.nn.Module):
    """input_ids, attention_mask -> the first output (last hidden state or logits)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask)[0]


def _feeds(batch: int = 2, seq: int = 9) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    ids = rng.integers(5, VOCAB, size=(batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), np.int64)
    mask[1, seq - 3 :] = 0  # a padded row
    return {"input_ids": ids, "attention_mask": mask}


def _export(module: torch.nn.Module, exporter: str) -> bytes:
    f = _feeds()
    args = (torch.from_numpy(f["input_ids"]), torch.from_numpy(f["attention_mask"]))
    names = ["input_ids", "attention_mask"]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            axes = {0: "batch", 1: "seq"}
            buf = io.BytesIO()
            torch.onnx.export(
                _Text(module),
                args,
                buf,
                opset_version=17,
                dynamo=False,
                input_names=names,
                output_names=["y"],
                dynamic_axes={"input_ids": axes, "attention_mask": axes, "y": axes},
            )
            return buf.getvalue()
        auto = torch.export.Dim.AUTO
        program = torch.onnx.export(
            _Text(module),
            args,
            dynamo=True,
            opset_version=18,
            input_names=names,
            output_names=["y"],
            dynamic_shapes=({0: auto, 1: auto}, {0: auto, 1: auto}),
            verbose=False,
        )
        return program.model_proto.SerializeToString()


_MODELS = {
    "bert": lambda: _encoder("bert"),
    "t5": lambda: _encoder("t5"),
    "gpt2": lambda: _decoder("gpt2"),
    "llama": lambda: _decoder("llama"),
}

_CASES = [
    ("bert", "torchscript"),
    ("bert", "dynamo"),
    ("t5", "torchscript"),
    ("gpt2", "torchscript"),
    ("llama", "torchscript"),
    ("llama", "dynamo"),
]


@pytest.fixture(scope="module")
def exported() -> dict[tuple[str, str], bytes]:
    return {}


def _model(cache: dict, kind: str, exporter: str) -> bytes:
    if (kind, exporter) not in cache:
        cache[kind, exporter] = _export(_MODELS[kind](), exporter)
    return cache[kind, exporter]


def _gemm_activations(nodes) -> Counter:
    return Counter(n.attrs.get("activation", "") for n in nodes if n.op_type == "FusedGemm")


def _residual_gemms(nodes) -> int:
    """FusedGemm nodes with a residual input (their fourth)."""
    return sum(1 for n in nodes if n.op_type == "FusedGemm" and len(n.inputs) > 3 and n.inputs[3])


@pytest.mark.parametrize(("kind", "exporter"), _CASES, ids=[f"{k}-{e}" for k, e in _CASES])
def test_export_fuses_and_matches_onnxruntime(exported, kind, exporter):
    import onnx

    data = _model(exported, kind, exporter)
    feeds = _feeds()
    want = ort_outputs(onnx.load_from_string(data), feeds)
    sess = onnxjit.InferenceSession(data)
    assert_close(sess.run(None, feeds), want, rtol=1e-4, atol=1e-4)
    # another batch and sequence length through the same session
    feeds2 = _feeds(batch=3, seq=5)
    assert_close(
        sess.run(None, feeds2), ort_outputs(onnx.load_from_string(data), feeds2), 1e-4, 1e-4
    )

    nodes = sess.graph_nodes()
    ops = Counter(n.op_type for n in nodes)
    acts = _gemm_activations(nodes)
    # attention: one node per layer, whatever the mask and head layout
    assert ops["SDPA"] == LAYERS, ops
    for gone in ("Softmax", "Erf", "Tanh", "Pow", "Sigmoid", "ReduceMean", "Sqrt"):
        assert ops[gone] == 0, (gone, ops)
    if kind == "bert":
        # two LayerNorms per layer plus the embeddings', each with its residual Add
        assert ops["SkipLayerNorm"] + ops["LayerNormalization"] == 2 * LAYERS + 1, ops
        assert acts["Gelu"] == LAYERS, acts
    elif kind == "gpt2":
        # GPT-2's Conv1D is addmm on 2-D rows then a view: the tanh GELU after the view and the
        # residual Adds after it are fused into the GEMMs (through the Reshape for the GELU)
        assert acts["GeluTanh"] == LAYERS, acts
        assert ops["Gelu"] == 0, ops
    elif kind == "t5":
        # T5's norm is RMSNorm without the mean; its gated-GELU MLP's GELU sits in the GEMM
        assert ops["RMSNorm"] == 2 * LAYERS + 1, ops
        assert acts["GeluTanh"] + acts["Gelu"] == LAYERS, acts
    elif kind == "llama":
        assert ops["RMSNorm"] == 2 * LAYERS + 1, ops
        assert acts["Silu"] == LAYERS, acts
        # the residual stream's two Adds per layer happen in the epilogue of the attention's
        # output projection and of the MLP's down projection
        assert _residual_gemms(nodes) == 2 * LAYERS, [
            (n.op_type, n.inputs) for n in nodes if n.op_type == "FusedGemm"
        ]


@pytest.mark.parametrize("kind", ["bert", "llama"])
def test_fusion_off_gives_the_same_results(exported, kind):
    """Every fusion switched off (level 0) against the default level on the same export."""
    data = _model(exported, kind, "torchscript")
    feeds = _feeds()
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = onnxjit.InferenceSession(data, so).run(None, feeds)
    fused = onnxjit.InferenceSession(data).run(None, feeds)
    assert_close(fused, plain, rtol=1e-4, atol=1e-4)
