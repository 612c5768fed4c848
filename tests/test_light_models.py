"""The nine ``light_*`` models shipped with onnx run in onnxjit and match.

``onnx/backend/test/data/light/light_<name>.onnx`` are the classic zoo CNNs (AlexNet,
DenseNet-121, Inception v1/v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512) with every
weight replaced by a ``ConstantOfShape`` node, so each file is a few kilobytes. onnx's backend
runner (``onnx.backend.test.runner.Runner``, the "real" model kind listed in
``onnx.backend.test.case.model``) feeds the single float input with the deterministic ramp
``arange(n).reshape(shape) / n`` (dims without a value taken as 1) and compares with
``light_<name>_output_0.pb`` at the per-model tolerances listed there; where an onnx release
ships no expected output it computes one with ``onnx.reference.ReferenceEvaluator``. This file
does the same, and also compares with onnxruntime on the ramp and on a seeded random input,
with the logits before the final Softmax exposed as an extra output: with constant weights the
softmax is nearly uniform (``0.001`` everywhere), which alone would hide errors upstream.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
import pytest
from models import compare_outputs, locate_divergence, ort_session, summarize_ops
from onnx import numpy_helper

import onnxjit

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")

# (name, rtol, atol) as in onnx.backend.test.case.model.collect_testcases.
LIGHT_MODELS = [
    ("bvlc_alexnet", 1e-3, 1e-7),
    ("densenet121", 2e-3, 1e-7),
    ("inception_v1", 1e-3, 1e-7),
    ("inception_v2", 1e-3, 1e-7),
    ("resnet50", 1e-3, 1e-7),
    ("shufflenet", 1e-3, 1e-7),
    ("squeezenet", 1e-3, 1e-7),
    ("vgg19", 1e-3, 1e-7),
    ("zfnet512", 1e-3, 1e-7),
]
# Tolerances for the onnxruntime comparison (different summation orders in Conv/Gemm).
ORT_RTOL, ORT_ATOL = 1e-3, 1e-4

# Marked slow (deselect with -m "not slow"): VGG-19, ZFNet-512 and AlexNet materialise
# 60M-140M constant weights per run (the weights are overridable initializers in these IR-3
# models, so they cannot be folded at load); DenseNet-121 runs 121 convolutions, over a minute
# per run on two busy cores at the time of writing.
_SLOW = {"vgg19", "zfnet512", "bvlc_alexnet", "densenet121"}


def _params() -> list[Any]:
    return [
        pytest.param(n, r, a, id=n, marks=[pytest.mark.slow] if n in _SLOW else [])
        for n, r, a in LIGHT_MODELS
    ]


def _model_path(name: str) -> str:
    path = os.path.join(LIGHT_DIR, f"light_{name}.onnx")
    if not os.path.exists(path):
        pytest.skip(f"this onnx release ({onnx.__version__}) does not ship {path}")
    return path


def _data_input(model: onnx.ModelProto) -> onnx.ValueInfoProto:
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    assert len(inputs) == 1, [i.name for i in inputs]
    return inputs[0]


def _ramp(vi: onnx.ValueInfoProto) -> np.ndarray:
    """The runner's dummy input: ``arange(n).reshape(shape) / n`` in float32."""
    shape = tuple(
        d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim
    )
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def _expected(path: str, model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[Any]:
    """``light_<name>_output_<i>.pb`` files, or the reference evaluator when they are absent."""
    prefix = os.path.splitext(path)[0]
    files = [f"{prefix}_output_{i}.pb" for i in range(len(model.graph.output))]
    if all(os.path.exists(f) for f in files):
        return [numpy_helper.to_array(onnx.load_tensor(f)) for f in files]
    from onnx.reference import ReferenceEvaluator

    return list(ReferenceEvaluator(model).run(None, feeds))


def _with_logits(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` that also outputs the input of every Softmax (the logits)."""
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    names = [o.name for o in wide.graph.output]
    for node in wide.graph.node:
        if node.op_type == "Softmax" and node.input[0] not in names:
            vi = onnx.helper.make_tensor_value_info(node.input[0], onnx.TensorProto.FLOAT, None)
            # onnxjit needs a rank on graph outputs; the logits are (batch, classes).
            vi.type.tensor_type.shape.dim.add().dim_param = "n"
            vi.type.tensor_type.shape.dim.add().dim_param = "classes"
            wide.graph.output.append(vi)
            names.append(node.input[0])
    return wide, names


class _Light:
    """One light model, loaded once per test session: the file as shipped, the copy with
    logits exposed, and one onnxjit and one onnxruntime session on that copy (the VGG-19
    constants alone take seconds to materialise, so sessions are shared between tests)."""

    def __init__(self, name: str) -> None:
        self.path = _model_path(name)
        self.model = onnx.load(self.path)
        self.wide, self.names = _with_logits(self.model)
        self.n_shipped = len(self.model.graph.output)
        self.input = _data_input(self.model)
        data = self.wide.SerializeToString()
        try:
            self.jit = onnxjit.InferenceSession(data)
        except onnxjit.UnsupportedOperatorError as e:
            pytest.fail(f"{name}: onnxjit cannot load it ({summarize_ops(self.model)}):\n{e}")
        self._data = data
        self._ort: Any = None

    @property
    def ort(self) -> Any:
        if self._ort is None:
            self._ort = ort_session(self._data)
        return self._ort


_LOADED: dict[str, _Light] = {}


def _light(name: str) -> _Light:
    if name not in _LOADED:
        _LOADED[name] = _Light(name)
    return _LOADED[name]


@pytest.mark.parametrize("name,rtol,atol", _params())
def test_light_model_expected_output(name: str, rtol: float, atol: float) -> None:
    """The backend runner's check: ramp input, shipped expected output, onnx's tolerances."""
    m = _light(name)
    feeds = {m.input.name: _ramp(m.input)}
    want = _expected(m.path, m.model, feeds)
    got = m.jit.run(None, feeds)[: m.n_shipped]
    problems = compare_outputs(got, want, m.names, rtol, atol)
    if problems:
        where = locate_divergence(m.model, feeds, rtol=ORT_RTOL, atol=ORT_ATOL)
        pytest.fail("\n".join(problems) + "\nfirst diverging nodes:\n  " + "\n  ".join(where))


@pytest.mark.parametrize("input_kind", ["ramp", "random"])
@pytest.mark.parametrize("name,rtol,atol", _params())
def test_light_model_matches_onnxruntime(
    name: str, rtol: float, atol: float, input_kind: str
) -> None:
    """Outputs and pre-softmax logits equal onnxruntime's on the ramp and a random input."""
    pytest.importorskip("onnxruntime", reason="onnxruntime is the second oracle")
    m = _light(name)
    x = _ramp(m.input)
    if input_kind == "random":
        x = np.random.default_rng(0).random(x.shape, dtype=np.float32)
    feeds = {m.input.name: x}
    want = m.ort.run(None, feeds)
    got = m.jit.run(None, feeds)
    problems = compare_outputs(got, want, m.names, ORT_RTOL, ORT_ATOL)
    if problems:
        where = locate_divergence(m.model, feeds, rtol=ORT_RTOL, atol=ORT_ATOL)
        pytest.fail("\n".join(problems) + "\nfirst diverging nodes:\n  " + "\n  ".join(where))
