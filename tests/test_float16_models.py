"""float16 models run in onnxjit, match onnxruntime, and keep their float16 interface.

Two kinds of model:

* real exports converted by onnxconverter-common (``convert_float_to_float16(model,
  keep_io_types=True)``, as users convert, through the bench's ``to_float16``): the small BERT,
  ResNet-18-style and MobileNetV2-style models of ``tests/models.py`` (BatchNormalization kept)
  and a 2-layer LLaMA-style decoder (grouped-query attention, rotary embeddings, RMSNorm)
  built here; seeded random weights, nothing downloaded;
* hand-built float16 graphs (float16 inputs, weights and outputs): MatMul/Gemm with a GELU,
  Conv with a residual, LayerNormalization and Softmax, Resize and Reduce*, and a graph whose
  float16 values also feed a comparison, an integer Cast and an If branch reading them from
  the outer scope; each also exposes an intermediate value as a graph output, requested by name.

Oracles: onnxruntime on the same float16 model (outputs within a few float16 steps of the
output scale: the engines round at different points) and the float32 version of the model
(onnxruntime): onnxjit's error against it may not exceed onnxruntime's own by more than half a
float16 step of the output scale. Every float16 graph output comes back as float16.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle")
import onnxruntime as ort  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import onnxjit  # noqa: E402

F16 = np.float16


def _ort(model: onnx.ModelProto, level: int = 99) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel(level)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _rel_err(a: np.ndarray, ref: np.ndarray) -> float:
    """Largest absolute difference, relative to the reference's scale."""
    a64, r64 = a.astype(np.float64), ref.astype(np.float64)
    return float(np.max(np.abs(a64 - r64)) / max(float(np.max(np.abs(r64))), 1e-6))


def _check(
    m16: onnx.ModelProto,
    m32: onnx.ModelProto | None,
    feeds16: dict[str, np.ndarray],
    feeds32: dict[str, np.ndarray] | None = None,
    steps: float = 4.0,
) -> None:
    """onnxjit on ``m16`` against onnxruntime on ``m16`` (within ``steps`` float16 steps,
    2^-10 of the output scale each) and, when given, against ``m32`` (no more than half a
    step worse than onnxruntime), output by output; float16 outputs stay float16."""
    names = [o.name for o in m16.graph.output]
    jit = onnxjit.InferenceSession(m16).run(None, feeds16)
    ref = _ort(m16).run(None, feeds16)
    exact = _ort(m32).run(None, feeds32 or feeds16) if m32 is not None else [None] * len(ref)
    for name, j, o, e, vi in zip(names, jit, ref, exact, m16.graph.output):
        want = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        assert j.dtype == want, f"{name}: {j.dtype}, declared {want}"
        assert j.shape == o.shape, name
        err = _rel_err(j, o)
        assert err <= steps * 2.0**-10, f"{name}: {err:.2e} of scale from onnxruntime"
        if e is not None:
            ej, eo = _rel_err(j, e), _rel_err(o, e)
            assert ej <= eo + 2.0**-11, f"{name}: error {ej:.2e} > onnxruntime's {eo:.2e}"


# --------------------------------------------------------------------------------------------
# hand-built float16 graphs


def _rand(shape: tuple[int, ...], seed: int, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


Builder = Callable[[int], tuple[onnx.ModelProto, dict[str, np.ndarray]]]


def _model(nodes, inputs, outputs, inits, elem: int, opset: int = 18) -> onnx.ModelProto:
    np_t = F16 if elem == TensorProto.FLOAT16 else np.float32
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t or elem, s) for n, s, t in inputs],
        [helper.make_tensor_value_info(n, t or elem, None) for n, t in outputs],
        [
            numpy_helper.from_array(v.astype(np_t) if v.dtype == np.float32 else v, k)
            for k, v in inits.items()
        ],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(m, strict_mode=True)  # output shapes declared


def _matmul_gelu(elem: int) -> onnx.ModelProto:
    """MatMul + bias, GELU in the exporters' erf form, Gemm; ``h`` (the GELU) is an output."""
    s2 = np.array(1 / np.sqrt(2), np.float32)
    inits = {
        "w1": _rand((32, 64), 1, 0.2),
        "b1": _rand((64,), 2, 0.1),
        "w2": _rand((64, 16), 3, 0.2),
        "b2": _rand((16,), 4, 0.1),
        "s2": s2,
        "half": np.array(0.5, np.float32),
        "one": np.array(1.0, np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m"]),
        helper.make_node("Add", ["m", "b1"], ["a"]),
        helper.make_node("Mul", ["a", "s2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["a", "e1"], ["p"]),
        helper.make_node("Mul", ["p", "half"], ["h"]),
        helper.make_node("Gemm", ["h", "w2", "b2"], ["y"]),
    ]
    return _model(nodes, [("x", [8, 32], 0)], [("y", 0), ("h", 0)], inits, elem)


def _conv_residual(elem: int) -> onnx.ModelProto:
    """Conv + Relu, Conv, residual Add, BatchNormalization, GlobalAveragePool."""
    c = 8
    inits = {
        "w1": _rand((c, c, 3, 3), 5, 0.15),
        "b1": _rand((c,), 6, 0.1),
        "w2": _rand((c, c, 3, 3), 7, 0.15),
        "g": np.abs(_rand((c,), 8)) + 0.5,
        "bb": _rand((c,), 9, 0.1),
        "mu": _rand((c,), 10, 0.1),
        "var": np.abs(_rand((c,), 11)) + 0.5,
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "x"], ["s"]),
        helper.make_node("BatchNormalization", ["s", "g", "bb", "mu", "var"], ["n"]),
        helper.make_node("GlobalAveragePool", ["n"], ["y"]),
    ]
    return _model(nodes, [("x", [2, c, 10, 10], 0)], [("y", 0), ("r1", 0)], inits, elem)


def _layernorm_softmax(elem: int) -> onnx.ModelProto:
    """LayerNormalization, scores through MatMul with a transposed copy, scale, Softmax."""
    inits = {
        "g": np.abs(_rand((32,), 12)) + 0.5,
        "b": _rand((32,), 13, 0.1),
        "scale": np.array(1 / np.sqrt(32), np.float32),
    }
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1),
        helper.make_node("Transpose", ["ln"], ["lt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["ln", "lt"], ["sc"]),
        helper.make_node("Mul", ["sc", "scale"], ["ss"]),
        helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "ln"], ["y"]),
    ]
    return _model(nodes, [("x", [2, 12, 32], 0)], [("y", 0), ("ln", 0), ("p", 0)], inits, elem)


def _resize_reduce(elem: int) -> onnx.ModelProto:
    """Resize (linear, float32 scales), Exp, ReduceSum/Mean/Max/L2 on different axes."""
    inits = {
        "scales": np.array([1, 1, 2, 2], np.float32),
        "axes": np.array([2, 3], np.int64),
        "ax1": np.array([1], np.int64),
    }
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["r"], mode="linear"),
        helper.make_node("Exp", ["r"], ["e"]),
        helper.make_node("ReduceSum", ["e", "axes"], ["s"], keepdims=1),
        helper.make_node("ReduceMean", ["r", "ax1"], ["m"], keepdims=0),
        helper.make_node("ReduceMax", ["r", "axes"], ["mx"], keepdims=0),
        helper.make_node("ReduceL2", ["e", "ax1"], ["l2"], keepdims=1),
    ]
    m = _model(
        nodes,
        [("x", [2, 3, 5, 6], 0)],
        [("s", 0), ("m", 0), ("mx", 0), ("l2", 0), ("r", 0)],
        {k: v for k, v in inits.items() if k != "scales"},
        elem,
    )
    m.graph.initializer.append(numpy_helper.from_array(inits["scales"], "scales"))
    return m


def _region_edges(elem: int) -> onnx.ModelProto:
    """Values of a float16 region read by a comparison, an integer Cast and an If branch (from
    the outer scope), a Shape, and a float16 Cast that rounds inside the region."""
    ty = elem
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["u", "u"], ["o"])],
        "then",
        [],
        [helper.make_value_info("o", onnx.TypeProto())],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["u"], ["o"])],
        "else",
        [],
        [helper.make_value_info("o", onnx.TypeProto())],
    )
    inits = {"w": _rand((16, 16), 14, 0.3), "zero": np.array(0.0, np.float32)}
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["t"]),
        helper.make_node("Relu", ["t"], ["u"]),  # read only by the If's branches
        helper.make_node("Greater", ["t", "zero"], ["pos"]),
        helper.make_node("Cast", ["t"], ["ti"], to=TensorProto.INT32),
        helper.make_node("ReduceMax", ["t"], ["tmax"], keepdims=0),
        helper.make_node("Greater", ["tmax", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["branch"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Shape", ["t"], ["shape"]),
        helper.make_node("Cast", ["t"], ["t16"], to=ty),
        helper.make_node("Where", ["pos", "t16", "branch"], ["y"]),
    ]
    return _model(
        nodes,
        [("x", [4, 16], 0)],
        [
            ("y", 0),
            ("t", 0),
            ("ti", TensorProto.INT32),
            ("shape", TensorProto.INT64),
            ("pos", TensorProto.BOOL),
        ],
        inits,
        elem,
    )


GRAPHS: dict[str, Callable[[int], onnx.ModelProto]] = {
    "matmul_gelu": _matmul_gelu,
    "conv_residual": _conv_residual,
    "layernorm_softmax": _layernorm_softmax,
    "resize_reduce": _resize_reduce,
    "region_edges": _region_edges,
}


def _feeds(model: onnx.ModelProto, dtype: type, seed: int = 20) -> dict[str, np.ndarray]:
    out = {}
    for i, vi in enumerate(model.graph.input):
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        out[vi.name] = _rand(tuple(shape), seed + i).astype(dtype)
    return out


@pytest.mark.parametrize("name", list(GRAPHS))
def test_float16_graph_matches_onnxruntime(name: str) -> None:
    m16 = GRAPHS[name](TensorProto.FLOAT16)
    m32 = GRAPHS[name](TensorProto.FLOAT)
    feeds16 = _feeds(m16, F16)
    feeds32 = {k: v.astype(np.float32) for k, v in feeds16.items()}
    _check(m16, m32 if name != "region_edges" else None, feeds16, feeds32)


@pytest.mark.parametrize("name", list(GRAPHS))
def test_intermediate_float16_output_by_name(name: str) -> None:
    """An intermediate value exposed as a graph output, requested alone by name, is the same
    float16 array as in the full run."""
    m16 = GRAPHS[name](TensorProto.FLOAT16)
    feeds = _feeds(m16, F16)
    sess = onnxjit.InferenceSession(m16)
    full = sess.run(None, feeds)
    for k, vi in enumerate(m16.graph.output[1:], start=1):
        (got,) = sess.run([vi.name], feeds)
        assert got.dtype == full[k].dtype
        np.testing.assert_array_equal(got, full[k])


def test_graph_outputs_keep_float16_type() -> None:
    """Declared float16 outputs are float16 in the session's metadata and in every run,
    at every optimisation level."""
    m16 = _layernorm_softmax(TensorProto.FLOAT16)
    feeds = _feeds(m16, F16)
    for level in (
        onnxjit.GraphOptimizationLevel.ORT_DISABLE_ALL,
        onnxjit.GraphOptimizationLevel.ORT_ENABLE_ALL,
    ):
        so = onnxjit.SessionOptions()
        so.graph_optimization_level = level
        sess = onnxjit.InferenceSession(m16, so)
        assert [o.type for o in sess.get_outputs()] == ["tensor(float16)"] * 3
        for _ in range(2):
            assert all(a.dtype == F16 for a in sess.run(None, feeds))


# --------------------------------------------------------------------------------------------
# converted exports


def _export(module, args, path, names, outs, axes) -> None:  # noqa: ANN001
    import warnings

    from models import export_torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings of the transformers models
        export_torch(module, args, path, names, outs, axes)


def _llama(tmp: str) -> tuple[str, dict[str, np.ndarray]]:
    """A 2-layer LLaMA-style decoder (hidden 64, 4 query heads, 2 key/value heads), logits."""
    pytest.importorskip("transformers", reason="transformers builds the LLaMA-style model")
    import torch
    import transformers as tf

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            cfg = tf.LlamaConfig(
                vocab_size=500,
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                max_position_embeddings=64,
            )
            self.model = tf.LlamaForCausalLM(cfg).eval()

        def forward(self, input_ids, attention_mask):  # noqa: ANN001, ANN201
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False
            ).logits

    rng = np.random.default_rng(0)
    feeds = {
        "input_ids": rng.integers(0, 500, (2, 12)).astype(np.int64),
        "attention_mask": np.ones((2, 12), np.int64),
    }
    path = os.path.join(tmp, "llama.onnx")
    args = tuple(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask"))
    axes = {0: "b", 1: "s"}
    _export(
        Logits().eval(),
        args,
        path,
        ["input_ids", "attention_mask"],
        ["logits"],
        {"input_ids": axes, "attention_mask": axes, "logits": axes},
    )
    return path, feeds


def _torch_spec(name: str) -> Callable[[str], tuple[str, dict[str, np.ndarray]]]:
    def make(tmp: str) -> tuple[str, dict[str, np.ndarray]]:
        import warnings

        from models import TORCH_MODELS

        if name == "bert":
            pytest.importorskip("transformers", reason="transformers builds BERT")
        spec = TORCH_MODELS[name]
        path = os.path.join(tmp, f"{name}.onnx")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer warnings of the transformers models
            spec.export(spec.build(), path)
        wanted = {i.name for i in onnx.load(path).graph.input}
        return path, {k: v for k, v in spec.inputs(2, 1).items() if k in wanted}

    return make


CONVERTED = {
    "bert": _torch_spec("bert"),
    "resnet18": _torch_spec("resnet18"),
    "mobilenetv2": _torch_spec("mobilenetv2"),
    "llama": _llama,
}


@pytest.mark.parametrize("name", list(CONVERTED))
def test_converted_model_matches_onnxruntime(name: str, tmp_path) -> None:  # noqa: ANN001
    """The float16 conversion of an export against onnxruntime and against the float32
    export."""
    pytest.importorskip("torch", reason="torch builds the exported models")
    pytest.importorskip("onnxconverter_common", reason="onnxconverter-common converts")
    from bench.workloads.real_fp16 import to_float16

    path, feeds = CONVERTED[name](str(tmp_path))
    m32 = onnx.load(path)
    m16 = to_float16(m32)
    _check(m16, m32, feeds)
