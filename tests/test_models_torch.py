"""Real models exported from torch run in onnxjit and match onnxruntime.

Models (built in ``tests/models.py`` with seeded random weights, nothing downloaded):
BERT and GPT-2 (transformers, TorchScript exporter, opset 17), BERT again through the dynamo
exporter, ViT, a ResNet-18-style CNN (with BatchNormalization nodes kept, and with BN folded
into the convs), a MobileNetV2-style CNN (depthwise convs, HardSwish), a bidirectional 2-layer
LSTM tagger and a Conv1d + GRU model.

Each model is exported once per test session (and cached on disk under pytest's cache
directory, keyed by the source of ``models.py`` and the exporter versions; ``pytest
--cache-clear`` re-exports). Each model runs at two input shapes: the export shape and a
different batch size (and sequence length for sequence models), both with seeded inputs.
onnxjit is compared with onnxruntime (graph optimisations off) at rtol 1e-3, atol 1e-4; a
failing comparison reports the first nodes where the two runtimes diverge.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is needed to build and export the models")
pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle for exported models")

import onnx  # noqa: E402
from models import (  # noqa: E402
    TORCH_MODELS,
    compare_outputs,
    locate_divergence,
    ort_session,
    summarize_ops,
)

import onnxjit  # noqa: E402

RTOL, ATOL = 1e-3, 1e-4

# Exporter chatter (tracer and RNN batch-size warnings) is expected for these models: the
# export-vs-torch test below checks that the traced graphs generalise to a second shape.
pytestmark = [
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
    pytest.mark.filterwarnings("ignore:Exporting a model to ONNX with a batch_size:UserWarning"),
]

# (batch, seed): the export shape, then another batch size and sequence length.
SHAPES = [pytest.param(2, 0, id="b2"), pytest.param(3, 1, id="b3-other-len")]

_NEEDS_TRANSFORMERS = {"bert", "bert_dynamo", "gpt2", "vit"}
# The dynamo exporter takes minutes on two busy cores (torch.export tracing of a transformers
# model); it is marked slow so that `-m "not slow"` gives a quick run.
_SLOW = {"bert_dynamo"}


def _model_params() -> list[Any]:
    return [
        pytest.param(name, marks=[pytest.mark.slow] if name in _SLOW else [], id=name)
        for name in TORCH_MODELS
    ]


def _versions_key(name: str) -> str:
    h = hashlib.sha256()
    source = Path(__file__).with_name("models.py").read_text()
    # Only the builders and the export helper matter, not the diagnostics below the marker.
    h.update(source.split("EXPORT_RELEVANT_END")[0].encode())
    for pkg in ("torch", "transformers", "onnxscript", "onnx"):
        try:
            h.update(f"{pkg}={importlib.metadata.version(pkg)};".encode())
        except importlib.metadata.PackageNotFoundError:
            h.update(f"{pkg}=none;".encode())
    h.update(name.encode())
    return h.hexdigest()[:16]


class _Exported:
    """One exported model: the torch module, the ONNX path and lazily made sessions."""

    def __init__(self, name: str, module: Any, path: str) -> None:
        self.name = name
        self.spec = TORCH_MODELS[name]
        self.module = module
        self.path = path
        self.proto = onnx.load(path)
        self._ort = None
        self._jit = None

    @property
    def ort(self) -> Any:
        if self._ort is None:
            self._ort = ort_session(self.path)
        return self._ort

    @property
    def jit(self) -> onnxjit.InferenceSession:
        # One onnxjit session per model for the whole test session: the second shape runs
        # through the same session, as a user's second call would.
        if self._jit is None:
            self._jit = onnxjit.InferenceSession(self.path)
        return self._jit

    def feeds(self, batch: int, seed: int) -> dict[str, np.ndarray]:
        feeds = self.spec.inputs(batch, seed)
        # The TorchScript exporter drops inputs the graph does not use.
        wanted = {i.name for i in self.proto.graph.input}
        return {k: v for k, v in feeds.items() if k in wanted}


@pytest.fixture(scope="session")
def torch_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``torch_model(name) -> _Exported``, building and exporting each model at most once."""
    cache = getattr(request.config, "cache", None)
    # Exports persist in pytest's cache folder; with the cacheprovider plugin off
    # (-p no:cacheprovider) they live for this run only.
    if cache is not None:
        cache_dir = Path(cache.mkdir("onnxjit_torch_exports"))
    else:
        cache_dir = tmp_path_factory.mktemp("onnxjit_torch_exports")
    done: dict[str, _Exported] = {}

    def get(name: str) -> _Exported:
        if name not in done:
            if name in _NEEDS_TRANSFORMERS:
                pytest.importorskip("transformers", reason="transformers builds this model")
            if TORCH_MODELS[name].dynamo:
                pytest.importorskip("onnxscript", reason="the dynamo exporter needs onnxscript")
            spec = TORCH_MODELS[name]
            module = spec.build()
            path = cache_dir / f"{name}-{_versions_key(name)}.onnx"
            if not path.exists():
                tmp = cache_dir / f"{name}-{os.getpid()}.tmp.onnx"
                spec.export(module, tmp)
                os.replace(tmp, path)
                # Drop exports of this model made by older builders or exporter versions.
                for stale in cache_dir.glob(f"{name}-*.onnx"):
                    if stale != path and stale.name.count("-") == path.name.count("-"):
                        stale.unlink(missing_ok=True)
            done[name] = _Exported(name, module, str(path))
        return done[name]

    return get


@pytest.mark.parametrize("batch,seed", SHAPES)
@pytest.mark.parametrize("name", _model_params())
def test_onnxjit_matches_onnxruntime(torch_model: Any, name: str, batch: int, seed: int) -> None:
    m = torch_model(name)
    feeds = m.feeds(batch, seed)
    want = m.ort.run(None, feeds)
    try:
        sess = m.jit
    except onnxjit.UnsupportedOperatorError as e:
        pytest.fail(f"{name}: onnxjit cannot load the model ({summarize_ops(m.proto)}):\n{e}")
    got = sess.run(None, feeds)
    names = [o.name for o in sess.get_outputs()]
    problems = compare_outputs(got, want, names, RTOL, ATOL)
    if problems:
        where = locate_divergence(m.proto, feeds, RTOL, ATOL)
        pytest.fail(
            f"{name} (batch {batch}): onnxjit != onnxruntime\n  "
            + "\n  ".join(problems)
            + "\nfirst diverging nodes:\n  "
            + "\n  ".join(where or ["(none found among typed intermediates)"])
        )


@pytest.mark.parametrize("batch,seed", SHAPES)
@pytest.mark.parametrize("name", _model_params())
def test_export_matches_torch(torch_model: Any, name: str, batch: int, seed: int) -> None:
    """The oracle itself is sound: onnxruntime on the export reproduces torch at both shapes.

    A failure here means the exported graph does not generalise to the second shape (a traced
    constant), not an onnxjit bug.
    """
    m = torch_model(name)
    feeds = m.feeds(batch, seed)
    full = m.spec.inputs(batch, seed)
    with torch.no_grad():
        ref = m.module(*(torch.from_numpy(full[n]) for n in m.spec.input_names))
    ref = ref if isinstance(ref, tuple) else (ref,)
    want = [r.numpy() for r in ref]
    got = m.ort.run(None, feeds)
    problems = compare_outputs(got, want, m.spec.output_names, RTOL, ATOL)
    assert not problems, "\n".join(problems)


def test_second_shape_reuses_session(torch_model: Any) -> None:
    """A new batch size runs through the same session and gives per-row consistent results.

    Row 0 of a batch-3 run equals the batch-1 run of the same row (no state leaks between
    shapes; batch rows are independent in a CNN).
    """
    m = torch_model("resnet18")
    x = m.feeds(3, 5)["x"]
    sess = m.jit
    full = sess.run(None, {"x": x})[0]
    one = sess.run(None, {"x": x[:1]})[0]
    np.testing.assert_allclose(one, full[:1], rtol=RTOL, atol=ATOL)
