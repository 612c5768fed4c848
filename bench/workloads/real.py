"""Real-model workloads (issue 43, item 1): models exported by the tools users use.

Every model is built here from a configuration written in code and random weights drawn from
fixed seeds (``torch.manual_seed`` / ``random_state``); nothing is downloaded
(``HF_HUB_OFFLINE=1`` is set before transformers is imported). Exported bytes are cached under
``$TMPDIR/onnxjit_bench_models`` (or ``$ONNXJIT_BENCH_CACHE``), keyed by the model, the exporter
and the library versions, as :mod:`bench.workloads.transformer` does; models are never written
into the repository.

* R1 (transformer prefill): transformers encoders BERT, DistilBERT, RoBERTa (BERT-base width:
  768 wide, 12 heads, FFN 3072, **2 layers** to keep export and run times down; vocabulary
  8192), exported once each with dynamic batch and sequence axes (as optimum does) and run at
  batch 1 and 8, sequence 16 and 128; the T5 encoder and the Whisper encoder (t5-small /
  whisper-base widths: 512 wide, 8 heads, FFN 2048, 2 layers; Whisper's input length is fixed
  by its configuration, so one export per sequence length) at the same shapes; CLIP's text
  tower (512 wide, causal mask) at sequence 16 and 77; ViT (768 wide, 12 heads, 2 layers,
  patch 16, dynamic batch) at 64 and 96 px and CLIP's vision tower (ViT-B width) at 96 and
  224 px, batch 1 and 8; decoder prefill of GPT-2 (768 wide, 12 heads, 2
  layers) and a LLaMA-style model (512 wide, 8 query heads and 2 key/value heads: grouped-query
  attention, rotary embeddings, RMSNorm, SiLU-gated MLP 1376, 2 layers), exported with
  ``use_cache=True`` the way optimum's ``decoder_model.onnx`` is (inputs ``input_ids``,
  ``attention_mask``; outputs ``logits`` and ``present.<i>.key/value``), sequence 16 and 128,
  batch 1 and 8; and one model of each kind from the dynamo exporter (``*_dynamo``) at batch 1.
* R2 (decode): the same GPT-2 and LLaMA-style decoders for one new token with a past KV cache
  (optimum's ``decoder_with_past_model.onnx`` layout: ``input_ids`` [b, 1], ``attention_mask``
  [b, past + 1], ``past_key_values.<i>.key/value`` [b, kv_heads, past, head_dim]; outputs
  ``logits`` and ``present.<i>.key/value``), through a wrapper module that takes the flat past
  tensors and builds a ``DynamicCache``; past 32 and 128, batch 1 and 8.
* R3 (classic ML): scikit-learn through skl2onnx with its default options (ZipMap on for
  classifiers): StandardScaler + LogisticRegression, a ColumnTransformer pipeline (8 scaled
  numeric columns and 3 one-hot encoded integer-coded columns of one float32 array, then a
  LogisticRegression; pandas is not a bench dependency, so no DataFrame / string inputs),
  RandomForest, HistGradientBoosting, SVC (RBF) and KNeighbors classifiers; and gradient-boosted
  trees through onnxmltools with its default options: LightGBM (LGBMClassifier, 100 trees of 31
  leaves, 3 classes, ZipMap on; LGBMRegressor, 100 trees of 31 leaves) and XGBoost
  (XGBClassifier, 100 rounds of depth 6, 3 classes); batch 1 and 512.
* R4 (quantized): onnxruntime's ``quantize_dynamic`` (QInt8 weights, the MatMulInteger /
  DynamicQuantizeLinear form) on R1's BERT, and ``quantize_static`` (QDQ, QUInt8 activations,
  QInt8 weights, MinMax calibration on random token ids) on the same model.

The module functions return :class:`bench.workloads.Case` lists: :func:`cases_r1`,
:func:`cases_r2`, :func:`cases_r3`, :func:`cases_r4`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import io
import os
import warnings
from collections.abc import Callable
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402

from bench.workloads import Case  # noqa: E402
from bench.workloads.transformer import _cache_dir  # noqa: E402

VOCAB = 8192
LAYERS = 2
WHISPER_MELS = 80
CLIP_TEXT_MAX = 77  # CLIP's text tower takes at most 77 tokens
OPSET = 17
"""TorchScript exporter opset (LayerNormalization exists; optimum's default for these models is
14-17). The dynamo exporter writes opset 18."""

# tolerances: float32 transformers (sums of 768-3072 products in other orders)
TOL_F32 = {"rtol": 1e-3, "atol": 1e-3}
# quantized BERT (outputs after LayerNorm, unit scale): an activation that lands on the other
# side of a rounding step moves the output by up to ~0.09 in onnxruntime itself (its
# ORT_ENABLE_ALL against ORT_DISABLE_ALL on the same model: 0.023 dynamic, 0.086 QDQ at batch
# 8, sequence 128), and each engine is 0.07-0.13 from the float32 model
TOL_QUANT = {"rtol": 1e-2, "atol": 0.1}


# ---------------------------------------------------------------------------------------------
# export and cache


def _versions() -> str:
    import torch
    import transformers

    return hashlib.sha1(f"{torch.__version__} {transformers.__version__} v1".encode()).hexdigest()[
        :8
    ]


def _cached(key: str, build: Callable[[], onnx.ModelProto]) -> onnx.ModelProto:
    """The model cached under ``key`` (plus the library versions), built and saved if absent."""
    path = os.path.join(_cache_dir(), f"real_{key}_{_versions()}.onnx")
    if os.path.exists(path):
        return onnx.load(path)
    proto = build()
    tmp = path + f".{os.getpid()}.tmp"
    onnx.save(proto, tmp)
    os.replace(tmp, path)
    return proto


def _export(
    module: Any,
    args: tuple[Any, ...],
    input_names: list[str],
    output_names: list[str],
    dynamic: dict[str, dict[int, str]],
    exporter: str = "torchscript",
) -> onnx.ModelProto:
    """``torch.onnx.export`` with the TorchScript exporter (``dynamo=False``, opset 17, dynamic
    axes) or the dynamo exporter (opset 18, ``dynamic_shapes`` from the same axis names)."""
    import torch

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            buf = io.BytesIO()
            torch.onnx.export(
                module,
                args,
                buf,
                opset_version=OPSET,
                dynamo=False,
                input_names=input_names,
                output_names=output_names,
                dynamic_axes=dynamic,
            )
            return onnx.load_from_string(buf.getvalue())
        import inspect

        shapes: list[Any] = [
            {a: torch.export.Dim.AUTO for a in dynamic.get(name, {})} for name in input_names
        ]
        params = list(inspect.signature(module.forward).parameters.values())
        if params and params[-1].kind is inspect.Parameter.VAR_POSITIONAL:  # forward(a, b, *past)
            k = len(params) - 1
            shapes = shapes[:k] + [tuple(shapes[k:])]
        program = torch.onnx.export(
            module,
            args,
            dynamo=True,
            opset_version=18,
            input_names=input_names,
            output_names=output_names,
            dynamic_shapes=tuple(shapes),
            optimize=True,
            verbose=False,
        )
        return program.model_proto


def _seeded(factory: Callable[[], Any], seed: int = 0) -> Any:
    import torch

    torch.manual_seed(seed)
    model = factory()
    return model.eval()


# ---------------------------------------------------------------------------------------------
# R1: encoders


def _encoder_module(kind: str) -> Any:
    import transformers as tf

    common = dict(
        hidden_size=768,
        num_attention_heads=12,
        intermediate_size=3072,
        num_hidden_layers=LAYERS,
    )
    if kind == "bert":
        cfg = tf.BertConfig(vocab_size=VOCAB, max_position_embeddings=512, **common)
        return _seeded(lambda: tf.BertModel(cfg, add_pooling_layer=False))
    if kind == "roberta":
        cfg = tf.RobertaConfig(vocab_size=VOCAB, max_position_embeddings=514, **common)
        return _seeded(lambda: tf.RobertaModel(cfg, add_pooling_layer=False))
    if kind == "distilbert":
        cfg = tf.DistilBertConfig(
            vocab_size=VOCAB, dim=768, n_heads=12, hidden_dim=3072, n_layers=LAYERS
        )
        return _seeded(lambda: tf.DistilBertModel(cfg))
    if kind == "vit":
        cfg = tf.ViTConfig(image_size=96, patch_size=16, num_channels=3, **common)
        return _seeded(lambda: tf.ViTModel(cfg, add_pooling_layer=False))
    # t5-small / CLIP-B / whisper-base widths: 512 wide, 8 heads, FFN 2048 (CLIP's vision tower
    # is 768 wide as in ViT-B)
    small = dict(num_hidden_layers=LAYERS, num_attention_heads=8, intermediate_size=2048)
    if kind == "t5":
        cfg = tf.T5Config(
            vocab_size=VOCAB,
            d_model=512,
            d_kv=64,
            d_ff=2048,
            num_layers=LAYERS,
            num_heads=8,
            feed_forward_proj="relu",
        )
        return _seeded(lambda: tf.T5EncoderModel(cfg))
    if kind == "clip_text":
        cfg = tf.CLIPTextConfig(
            vocab_size=VOCAB, hidden_size=512, max_position_embeddings=CLIP_TEXT_MAX, **small
        )
        return _seeded(lambda: tf.CLIPTextModel(cfg))
    if kind == "clip_vision":
        cfg = tf.CLIPVisionConfig(image_size=96, patch_size=16, **common)
        return _seeded(lambda: tf.CLIPVisionModel(cfg))
    if kind.startswith("whisper"):  # "whisper<tokens>": the encoder's input length is fixed
        tokens = int(kind[len("whisper") :])
        cfg = tf.WhisperConfig(
            vocab_size=VOCAB,
            d_model=512,
            encoder_layers=LAYERS,
            encoder_attention_heads=8,
            encoder_ffn_dim=2048,
            decoder_layers=1,
            num_mel_bins=WHISPER_MELS,
            max_source_positions=tokens,
            pad_token_id=0,
            bos_token_id=0,
            eos_token_id=0,
            decoder_start_token_id=0,
        )
        from transformers.models.whisper.modeling_whisper import WhisperEncoder

        return _seeded(lambda: WhisperEncoder(cfg))
    raise ValueError(f"unknown encoder {kind!r}")


def _last_hidden(model: Any, image: bool = False, audio: bool = False) -> Any:
    """Wraps a transformers encoder so that it returns ``last_hidden_state`` only (explicit
    argument names, which the dynamo exporter's ``dynamic_shapes`` follow)."""
    import torch

    if audio:

        class Audio(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, input_features: Any) -> Any:
                return self.model(input_features=input_features).last_hidden_state

        return Audio().eval()
    if image:

        class Image(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, pixel_values: Any) -> Any:
                out = self.model(pixel_values=pixel_values, interpolate_pos_encoding=True)
                return out.last_hidden_state

        return Image().eval()

    class Text(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    return Text().eval()


def encoder_model(kind: str, exporter: str = "torchscript") -> onnx.ModelProto:
    """A transformers encoder exported with dynamic batch and sequence (ViT: batch, height and
    width) axes; ``kind`` is "bert", "roberta", "distilbert", "t5" (encoder), "clip_text", "vit",
    "clip_vision" or "whisper<tokens>" (the Whisper encoder, whose input length is fixed at twice
    its token count: batch axis only)."""

    def build() -> onnx.ModelProto:
        import torch

        model = _encoder_module(kind)
        if kind.startswith("whisper"):
            x = torch.from_numpy(whisper_feeds(int(kind[7:]), 2)["input_features"])
            return _export(
                _last_hidden(model, audio=True),
                (x,),
                ["input_features"],
                ["last_hidden_state"],
                {"input_features": {0: "batch"}, "last_hidden_state": {0: "batch"}},
                exporter,
            )
        if kind in ("vit", "clip_vision"):
            x = torch.from_numpy(vit_feeds(96, 2)["pixel_values"])
            return _export(
                _last_hidden(model, image=True),
                (x,),
                ["pixel_values"],
                ["last_hidden_state"],
                {
                    "pixel_values": {0: "batch", 2: "height", 3: "width"},
                    "last_hidden_state": {0: "batch", 1: "tokens"},
                },
                exporter,
            )
        f = text_feeds(2, 16)
        args = (torch.from_numpy(f["input_ids"]), torch.from_numpy(f["attention_mask"]))
        axes = {0: "batch", 1: "seq"}
        return _export(
            _last_hidden(model),
            args,
            ["input_ids", "attention_mask"],
            ["last_hidden_state"],
            {"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes},
            exporter,
        )

    return _cached(f"{kind}_{exporter}", build)


def text_feeds(batch: int, seq: int, seed: int = 1) -> dict[str, np.ndarray]:
    """Random token ids (never the padding id 1 of RoBERTa) and a full attention mask except for
    the last quarter of the sequence of every second row (padded batches, as served)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, size=(batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), np.int64)
    mask[1::2, seq - seq // 4 :] = 0
    return {"input_ids": ids, "attention_mask": mask}


def whisper_feeds(tokens: int, batch: int, seed: int = 1) -> dict[str, np.ndarray]:
    """Random log-mel features [batch, mels, 2 x tokens] (the encoder's stride-2 convolution
    halves the frames)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, WHISPER_MELS, 2 * tokens)).astype(np.float32)
    return {"input_features": x}


def vit_feeds(px: int, batch: int, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"pixel_values": rng.standard_normal((batch, 3, px, px)).astype(np.float32)}


# ---------------------------------------------------------------------------------------------
# R1/R2: decoders


DECODERS = ("gpt2", "llama")


def _decoder_config(kind: str) -> Any:
    import transformers as tf

    if kind == "gpt2":
        return tf.GPT2Config(
            vocab_size=VOCAB,
            n_positions=512,
            n_embd=768,
            n_layer=LAYERS,
            n_head=12,
            bos_token_id=0,
            eos_token_id=0,
        )
    if kind == "llama":
        return tf.LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=512,
            intermediate_size=1376,
            num_hidden_layers=LAYERS,
            num_attention_heads=8,
            num_key_value_heads=2,
            max_position_embeddings=512,
            rope_theta=10000.0,
        )
    raise ValueError(f"unknown decoder {kind!r}")


def _kv_shape(kind: str) -> tuple[int, int]:
    """(key/value heads, head dim) of a decoder."""
    cfg = _decoder_config(kind)
    if kind == "gpt2":
        return cfg.n_head, cfg.n_embd // cfg.n_head
    return cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads


def _decoder_wrapper(kind: str, with_past: bool) -> Any:
    """A module taking flat tensors: ``input_ids``, ``attention_mask`` and (``with_past``) one
    key and one value per layer; returning logits and the present key/value per layer."""
    import torch
    import transformers as tf

    cfg = _decoder_config(kind)
    cls = tf.GPT2LMHeadModel if kind == "gpt2" else tf.LlamaForCausalLM
    model = _seeded(lambda: cls(cfg))

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, *past: Any) -> Any:
            cache = tf.DynamicCache(config=cfg)
            if with_past:
                cache = tf.DynamicCache(
                    [(past[2 * i], past[2 * i + 1]) for i in range(LAYERS)], config=cfg
                )
            # position ids as optimum computes them from the mask (left padding allowed)
            pos = (attention_mask.cumsum(-1) - 1).clamp(min=0)
            pos = pos[:, -input_ids.shape[1] :]
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=pos,
                past_key_values=cache,
                use_cache=True,
            )
            pkv = out.past_key_values
            flat = []
            for layer in pkv.layers:
                flat += [layer.keys, layer.values]
            return (out.logits, *flat)

    return Wrapped().eval()


def _present_names() -> list[str]:
    return [f"present.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]


def _past_names() -> list[str]:
    return [f"past_key_values.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]


def decoder_model(kind: str, with_past: bool, exporter: str = "torchscript") -> onnx.ModelProto:
    """GPT-2 or the LLaMA-style decoder (``kind``), prefill (``with_past=False``) or one-token
    decoding with a past KV cache, dynamic batch / sequence / past axes."""

    def build() -> onnx.ModelProto:
        import torch

        module = _decoder_wrapper(kind, with_past)
        if with_past:
            f = decode_feeds(kind, 2, 8)
            seq_axis = {0: "batch"}
            mask_axis = {0: "batch", 1: "total"}
        else:
            f = prefill_feeds(2, 16)
            seq_axis = {0: "batch", 1: "seq"}
            mask_axis = {0: "batch", 1: "seq"}
        names = ["input_ids", "attention_mask"] + (_past_names() if with_past else [])
        args = tuple(torch.from_numpy(f[n]) for n in names)
        dyn: dict[str, dict[int, str]] = {
            "input_ids": seq_axis,
            "attention_mask": mask_axis,
            "logits": seq_axis,
        }
        for n in _past_names() if with_past else []:
            dyn[n] = {0: "batch", 2: "past"}
        for n in _present_names():
            dyn[n] = {0: "batch", 2: "total"}
        return _export(module, args, names, ["logits", *_present_names()], dyn, exporter)

    tag = "decode" if with_past else "prefill"
    return _cached(f"{kind}_{tag}_{exporter}", build)


def prefill_feeds(batch: int, seq: int, seed: int = 1) -> dict[str, np.ndarray]:
    """Token ids and an all-ones mask (prefill of one prompt per row, no padding)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, size=(batch, seq), dtype=np.int64)
    return {"input_ids": ids, "attention_mask": np.ones((batch, seq), np.int64)}


def decode_feeds(kind: str, batch: int, past: int, seed: int = 2) -> dict[str, np.ndarray]:
    """One new token per row, a mask over past + 1 positions, random past keys and values (unit
    scale)."""
    rng = np.random.default_rng(seed)
    heads, d = _kv_shape(kind)
    feeds = {
        "input_ids": rng.integers(5, VOCAB, size=(batch, 1), dtype=np.int64),
        "attention_mask": np.ones((batch, past + 1), np.int64),
    }
    for n in _past_names():
        feeds[n] = rng.standard_normal((batch, heads, past, d)).astype(np.float32)
    return feeds


# ---------------------------------------------------------------------------------------------
# cases R1 / R2

BATCHES = (1, 8)
SEQS = (16, 128)
PIXELS = (64, 96)
CLIP_PIXELS = (96, 224)
PASTS = (32, 128)


def _try(out: list[Case], make: Callable[[], Case]) -> None:
    """Append ``make()``; an export that fails is reported by :func:`export_failures` rather than
    stopping the workload."""
    try:
        out.append(make())
    except Exception as exc:  # noqa: BLE001 - an exporter failure is a finding, not a crash
        EXPORT_FAILURES.append(f"{make.__name__}: {type(exc).__name__}: {str(exc)[:300]}")


EXPORT_FAILURES: list[str] = []


def export_failures() -> list[str]:
    """Exports that raised while the cases were built in this process."""
    return list(EXPORT_FAILURES)


def cases_r1(quick: bool) -> list[Case]:
    """R1: encoders (BERT, DistilBERT, RoBERTa, the T5 and Whisper encoders at batch 1/8 x sequence
    16/128; CLIP's text tower at sequence 16/77; ViT at batch 1/8 x 64/96 px, CLIP's vision tower
    at 96/224 px) and decoder prefill (GPT-2, LLaMA-style, batch 1/8 x sequence 16/128), TorchScript
    exporter; BERT and the LLaMA-style prefill from the dynamo exporter at batch 1, sequence 128.

    quick: BERT and the LLaMA-style prefill at batch 1, sequence 16.
    """
    out: list[Case] = []
    grid = [(1, 16)] if quick else [(b, s) for b in BATCHES for s in SEQS]
    encoders = ["bert"] if quick else ["bert", "distilbert", "roberta"]
    for kind in encoders:
        model = encoder_model(kind)
        for b, s in grid:
            out.append(Case("R1", f"{kind}/b{b}/s{s}", model, text_feeds(b, s), **TOL_F32))
    if not quick:
        model = encoder_model("t5")
        for b, s in grid:
            out.append(Case("R1", f"t5_encoder/b{b}/s{s}", model, text_feeds(b, s), **TOL_F32))
        model = encoder_model("clip_text")
        for b, s in [(b, s) for b in BATCHES for s in (16, CLIP_TEXT_MAX)]:
            out.append(Case("R1", f"clip_text/b{b}/s{s}", model, text_feeds(b, s), **TOL_F32))
        for s in SEQS:
            model = encoder_model(f"whisper{s}")
            for b in BATCHES:
                f = whisper_feeds(s, b)
                out.append(Case("R1", f"whisper_encoder/b{b}/s{s}", model, f, **TOL_F32))
        for kind in ("vit", "clip_vision"):
            model = encoder_model(kind)
            for b in BATCHES:
                for px in PIXELS if kind == "vit" else CLIP_PIXELS:
                    f = vit_feeds(px, b)
                    out.append(Case("R1", f"{kind}/b{b}/{px}px", model, f, **TOL_F32))
    for kind in ["llama"] if quick else list(DECODERS):
        model = decoder_model(kind, with_past=False)
        for b, s in grid:
            f = prefill_feeds(b, s)
            out.append(Case("R1", f"{kind}_prefill/b{b}/s{s}", model, f, **TOL_F32))
    if not quick:

        def bert_dynamo() -> Case:
            return Case(
                "R1",
                "bert_dynamo/b1/s128",
                encoder_model("bert", "dynamo"),
                text_feeds(1, 128),
                **TOL_F32,
            )

        def llama_prefill_dynamo() -> Case:
            return Case(
                "R1",
                "llama_prefill_dynamo/b1/s128",
                decoder_model("llama", False, "dynamo"),
                prefill_feeds(1, 128),
                **TOL_F32,
            )

        _try(out, bert_dynamo)
        _try(out, llama_prefill_dynamo)
    return out


def cases_r2(quick: bool) -> list[Case]:
    """R2: one-token decoding with a past KV cache, GPT-2 and LLaMA-style, batch 1/8 x past
    32/128 (TorchScript exporter); GPT-2 from the dynamo exporter at batch 1, past 128.

    quick: both at batch 1, past 32.
    """
    out: list[Case] = []
    grid = [(1, 32)] if quick else [(b, p) for b in BATCHES for p in PASTS]
    for kind in DECODERS:
        model = decoder_model(kind, with_past=True)
        for b, p in grid:
            f = decode_feeds(kind, b, p)
            out.append(Case("R2", f"{kind}_decode/b{b}/past{p}", model, f, **TOL_F32))
    if not quick:

        def gpt2_decode_dynamo() -> Case:
            return Case(
                "R2",
                "gpt2_decode_dynamo/b1/past128",
                decoder_model("gpt2", True, "dynamo"),
                decode_feeds("gpt2", 1, 128),
                **TOL_F32,
            )

        _try(out, gpt2_decode_dynamo)
    return out


# ---------------------------------------------------------------------------------------------
# R3: scikit-learn through skl2onnx

N_FEATURES = 20
N_CLASSES = 3
ML_OPSET = {"": 17, "ai.onnx.ml": 3}
SK_BATCHES = (1, 512)
N_NUM, CARDS = 8, (4, 3, 6)


def _classification(n: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n, N_FEATURES, n_informative=10, n_classes=N_CLASSES, random_state=seed
    )
    scale = np.random.default_rng(3).uniform(0.1, 50.0, N_FEATURES)
    shift = np.random.default_rng(4).normal(0.0, 10.0, N_FEATURES)
    return (x * scale + shift).astype(np.float32), y


def _sk_estimator(kind: str) -> Any:
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    return {
        "scaler_logreg": lambda: make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)),
        "random_forest": lambda: RandomForestClassifier(100, max_depth=8, random_state=0),
        "hist_gb": lambda: HistGradientBoostingClassifier(max_iter=100, random_state=0),
        "svc": lambda: make_pipeline(StandardScaler(), SVC(kernel="rbf", random_state=0)),
        "knn": lambda: make_pipeline(StandardScaler(), KNeighborsClassifier(5)),
    }[kind]()


def _mixed(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """N_NUM numeric columns on different scales, then len(CARDS) integer-coded categorical
    columns (float32, as a numpy-fed ColumnTransformer sees them), and labels."""
    rng = np.random.default_rng(seed)
    num = rng.standard_normal((n, N_NUM)) * np.arange(1, N_NUM + 1) + 3 * np.arange(N_NUM)
    cat = np.stack([rng.integers(0, c, n) for c in CARDS], axis=1)
    logit = num[:, 0] - num[:, 1] / 2 + (cat[:, 0] == 1) * 2.0
    y = np.digitize(logit, [-1.0, 1.0])
    return np.concatenate([num, cat], axis=1).astype(np.float32), y


@contextlib.contextmanager
def _skl2onnx_bool_fix() -> Any:
    """skl2onnx 1.20 passes ``nodes_missing_value_tracks_true=False`` (a bool) for the leaves of
    HistGradientBoosting trees, which onnx >= 1.18's ``make_attribute`` rejects ("Expected an
    int, got a boolean"); coerce it to int while converting."""
    from skl2onnx.common import tree_ensemble as te

    orig = te.add_node

    def add_node(*args: Any, **kwargs: Any) -> Any:
        if "nodes_missing_value_tracks_true" in kwargs:
            kwargs["nodes_missing_value_tracks_true"] = int(
                kwargs["nodes_missing_value_tracks_true"]
            )
        return orig(*args, **kwargs)

    te.add_node = add_node
    try:
        yield
    finally:
        te.add_node = orig


def _boosted_estimator(kind: str) -> Any:
    """An unfitted LightGBM or XGBoost model of R3 (fixed seeds; one training thread, so that
    the fitted trees do not depend on the machine)."""
    if kind.startswith("lgbm"):
        import lightgbm

        cls = lightgbm.LGBMClassifier if kind == "lgbm_clf" else lightgbm.LGBMRegressor
        return cls(n_estimators=100, num_leaves=31, random_state=0, n_jobs=1, verbose=-1)
    if kind == "xgb_clf":
        import xgboost

        return xgboost.XGBClassifier(n_estimators=100, max_depth=6, random_state=0, n_jobs=1)
    raise ValueError(f"unknown boosted model {kind!r}")


def _regression_target(x: np.ndarray) -> np.ndarray:
    """A continuous target of R3's features (LGBMRegressor): a fixed linear part plus a
    nonlinear one, so that the trees split on several features."""
    w = np.random.default_rng(5).standard_normal(x.shape[1])
    z = (x - x.mean(0)) / x.std(0)
    return z @ w + 2.0 * np.sin(z[:, 0]) * z[:, 1]


def _boosted_build(kind: str) -> onnx.ModelProto:
    """A LightGBM / XGBoost model fitted on R3's classification features and converted by
    onnxmltools with its defaults (its own default opsets: onnxmltools 1.16 converts these to
    opset 9 with ai.onnx.ml 1 and supports no opset above 15)."""
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType

    x, y = _classification()
    est = _boosted_estimator(kind)
    est.fit(x, _regression_target(x) if kind == "lgbm_reg" else y)
    types = [("X", FloatTensorType([None, N_FEATURES]))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind.startswith("lgbm"):
            return onnxmltools.convert_lightgbm(est, initial_types=types)
        return onnxmltools.convert_xgboost(est, initial_types=types)


#: R3's gradient-boosted models converted by onnxmltools (not skl2onnx).
BOOSTED_KINDS = ("lgbm_clf", "lgbm_reg", "xgb_clf")


def _library_versions(kind: str) -> str:
    """The versions of the libraries that fit and convert ``kind`` (part of its cache key)."""
    import sklearn

    if kind in BOOSTED_KINDS:
        import onnxmltools

        lib = importlib.import_module("lightgbm" if kind.startswith("lgbm") else "xgboost")
        return f"{sklearn.__version__} {lib.__version__} {onnxmltools.__version__}"
    import skl2onnx

    return f"{sklearn.__version__} {skl2onnx.__version__}"


@functools.cache
def sk_model(kind: str) -> onnx.ModelProto:
    """A fitted scikit-learn model converted by skl2onnx with default options, or (``kind`` in
    :data:`BOOSTED_KINDS`) a LightGBM / XGBoost model converted by onnxmltools (cached per
    process and on disk: HistGradientBoosting trains for several seconds here)."""
    key = hashlib.sha1(_library_versions(kind).encode()).hexdigest()[:6]
    build = _boosted_build if kind in BOOSTED_KINDS else _sk_build
    return _cached(f"sk_{kind}_{key}", lambda: build(kind))


def _sk_build(kind: str) -> onnx.ModelProto:
    from skl2onnx import to_onnx

    from bench.workloads import trees

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "column_transformer":
            from sklearn.compose import ColumnTransformer
            from sklearn.linear_model import LogisticRegression
            from sklearn.pipeline import Pipeline
            from sklearn.preprocessing import OneHotEncoder, StandardScaler

            x, y = _mixed(2000, 0)
            num = list(range(N_NUM))
            cat = list(range(N_NUM, N_NUM + len(CARDS)))
            pre = ColumnTransformer(
                [
                    ("num", StandardScaler(), num),
                    ("cat", OneHotEncoder(handle_unknown="ignore"), cat),
                ]
            )
            pipe = Pipeline([("pre", pre), ("clf", LogisticRegression(max_iter=1000))])
            pipe.fit(x, y)
            model = to_onnx(pipe, x[:1], target_opset=ML_OPSET)
        else:
            x, y = _classification()
            est = _sk_estimator(kind).fit(x, y)
            with _skl2onnx_bool_fix():
                model = to_onnx(est, x[:1], target_opset=ML_OPSET)
    return trees.tidy(model)


def sk_feeds(kind: str, batch: int, seed: int = 6) -> dict[str, np.ndarray]:
    if kind == "column_transformer":
        return {"X": _mixed(batch, seed)[0]}
    x, _ = _classification(max(batch, 8), seed)
    return {"X": np.ascontiguousarray(x[:batch])}


SK_KINDS = ("scaler_logreg", "column_transformer", "random_forest", "hist_gb", "svc", "knn")


def cases_r3(quick: bool) -> list[Case]:
    """R3: six scikit-learn models (skl2onnx defaults, ZipMap on) and three gradient-boosted
    ones (LightGBM classifier and regressor, XGBoost classifier; onnxmltools defaults) at batch
    1 and 512. A boosted model whose library is not installed (lightgbm, xgboost and
    onnxmltools are bench extras) is left out and named in :func:`export_failures`.

    quick: the scaler + logistic regression and the column transformer at batch 1.
    """
    kinds = SK_KINDS[:2] if quick else SK_KINDS + BOOSTED_KINDS
    out = []
    for kind in kinds:
        try:
            model = sk_model(kind)
        except ImportError as exc:
            if kind not in BOOSTED_KINDS:
                raise
            EXPORT_FAILURES.append(f"{kind}: not built, {exc}")
            continue
        for b in (1,) if quick else SK_BATCHES:
            out.append(Case("R3", f"{kind}/b{b}", model, sk_feeds(kind, b), rtol=1e-4, atol=1e-4))
    return out


# ---------------------------------------------------------------------------------------------
# R4: quantized


class _TextReader:
    """Calibration data for quantize_static: a few random batches of token ids."""

    def __init__(self) -> None:
        self._it = iter([text_feeds(2, 64, seed=s) for s in range(8)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)


def quantized_bert(mode: str) -> onnx.ModelProto:
    """R1's BERT quantized by onnxruntime: ``mode`` "dynamic" (quantize_dynamic, QInt8 weights)
    or "qdq" (quantize_static, QDQ format, MinMax calibration on random token ids)."""

    def build() -> onnx.ModelProto:
        import tempfile

        from onnxruntime import quantization as q

        src = encoder_model("bert")
        # quant_pre_process writes scratch models into the working directory: work in d
        with (
            tempfile.TemporaryDirectory() as d,
            contextlib.chdir(d),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            fp32, out = os.path.join(d, "fp32.onnx"), os.path.join(d, "q.onnx")
            onnx.save(src, fp32)
            if mode == "dynamic":
                q.quantize_dynamic(fp32, out, weight_type=q.QuantType.QInt8)
            else:
                pre = os.path.join(d, "pre.onnx")
                q.quant_pre_process(fp32, pre, skip_symbolic_shape=True)
                q.quantize_static(
                    pre,
                    out,
                    _TextReader(),
                    quant_format=q.QuantFormat.QDQ,
                    activation_type=q.QuantType.QUInt8,
                    weight_type=q.QuantType.QInt8,
                    op_types_to_quantize=["MatMul", "Gemm"],
                )
            return onnx.load(out)

    return _cached(f"bert_quant_{mode}", build)


def cases_r4(quick: bool) -> list[Case]:
    """R4: R1's BERT dynamically quantized (batch 1/8 x sequence 16/128) and statically
    quantized in QDQ form (batch 1 and 8, sequence 128).

    quick: the dynamic one at batch 1, sequence 16.
    """
    tol = TOL_QUANT
    out: list[Case] = []
    grid = [(1, 16)] if quick else [(b, s) for b in BATCHES for s in SEQS]
    model = quantized_bert("dynamic")
    for b, s in grid:
        out.append(Case("R4", f"bert_qdyn/b{b}/s{s}", model, text_feeds(b, s), **tol))
    if not quick:

        def qdq() -> list[Case]:
            m = quantized_bert("qdq")
            return [
                Case("R4", f"bert_qdq/b{b}/s128", m, text_feeds(b, 128), **tol) for b in BATCHES
            ]

        try:
            out += qdq()
        except Exception as exc:  # noqa: BLE001
            EXPORT_FAILURES.append(f"bert_qdq: {type(exc).__name__}: {str(exc)[:300]}")
    return out
