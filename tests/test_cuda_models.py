"""A small BERT and a small ResNet-18, exported from torch, run with the CUDA provider.

numba-cuda's simulator runs the device kernels (CI has no GPU), so the shapes are tiny: one
sequence of 8 tokens, one 16x16 image. Oracle: onnxruntime's CPU provider on the same
exported model and feeds. The placement listing says how many nodes ran on the device;
the test requires most of them there, and the figures go in the failure message.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is needed to build and export the models")
pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle")
pytest.importorskip(
    "numba.cuda", reason="numba-cuda is not installed (pip install 'onnxjit[cuda]')"
)

from models import (  # noqa: E402
    TORCH_MODELS,
    ResNet18Small,
    export_torch,
    ort_session,
    randomize_batchnorm,
    seeded,
)

import onnxjit  # noqa: E402

CUDA = ["CUDAExecutionProvider", "CPUExecutionProvider"]


def _export(name: str, tmp_path) -> str:
    spec = TORCH_MODELS[name]
    if name == "bert":
        pytest.importorskip("transformers", reason="transformers builds this model")
        return spec.export(spec.build(), tmp_path / name)
    # The table's network at 64x64 is too many simulated threads: the same ResNet-18 layout
    # (BasicBlocks, downsampling shortcuts, BatchNorm, max and average pooling) with narrow
    # layers, at 16x16.
    torch.manual_seed(0)
    model = randomize_batchnorm(ResNet18Small(widths=(8, 8, 16, 16))).eval()
    x = torch.from_numpy(seeded((1, 3, 16, 16), 0))
    axes = {"x": {0: "batch"}, "logits": {0: "batch"}}
    return export_torch(model, (x,), tmp_path / name, ["x"], ["logits"], axes, keep_batchnorm=True)


def _run_both(path: str, feeds: dict[str, np.ndarray]) -> tuple[list, list, list[dict]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the placement warning
        sess = onnxjit.InferenceSession(path, providers=CUDA)
    assert sess.get_providers()[0] == "CUDAExecutionProvider"
    got = sess.run(None, feeds)
    want = ort_session(path).run(None, feeds)
    return got, want, sess.placement()


def _on_device_share(places: list[dict]) -> tuple[float, list[str]]:
    nodes = [p for p in places if not p["copy"]]
    cpu = sorted({p["op"] for p in nodes if p["device"] != "cuda"})
    return sum(p["device"] == "cuda" for p in nodes) / max(1, len(nodes)), cpu


@pytest.mark.parametrize("name", ["bert", "resnet18"])
def test_small_models_match_onnxruntime_with_the_cuda_provider(name, tmp_path):
    path = _export(name, tmp_path)
    if name == "bert":
        rng = np.random.default_rng(0)
        feeds = {
            "input_ids": rng.integers(0, 1000, size=(1, 8)).astype(np.int64),
            "attention_mask": np.array([[1] * 6 + [0] * 2], np.int64),
        }
    else:
        feeds = {"x": seeded((1, 3, 16, 16), 0)}
    import onnx

    wanted = {i.name for i in onnx.load(path).graph.input}
    feeds = {k: v for k, v in feeds.items() if k in wanted}
    got, want, places = _run_both(path, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)
    share, cpu = _on_device_share(places)
    # every node has a CUDA kernel: nothing may fall back to the CPU
    assert cpu == [], f"{name}: {share:.0%} of the nodes on the device; CPU: {cpu}"
