"""G2: scikit-learn models as users convert them: skl2onnx's default options, batch 1.

Issue 41's per-run-overhead cases for classic ML, where a run is a handful of small ops and the
executor's fixed cost per run is most of the time:

- ``sk_scaler_logreg/b1``: ``make_pipeline(StandardScaler(), LogisticRegression())`` on 20
  features, 3 classes (skl2onnx writes Scaler, LinearClassifier, Normalizer, Cast, ZipMap);
- ``rf_clf/b1``: G1's random forest classifier (100 trees, depth 8, 20 features, 3 classes).

Both are converted with no converter options, so the class probabilities come out of a ZipMap
as a list of {class: probability} dicts, as a user gets them (G1 turns ZipMap off to time the
trees alone). The opsets are pinned (``{'': 17, 'ai.onnx.ml': 3}``, as G1) so that a new
skl2onnx does not silently change the models. Fixed seeds; nothing is downloaded. The harness
compares ZipMap outputs map by map (same keys, values within tolerance).
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import onnx

from bench.workloads import Case, trees
from bench.workloads._build import rng

N_FEATURES = 20
N_CLASSES = 3
TARGET_OPSET = {"": 17, "ai.onnx.ml": 3}


def _unscaled(x: np.ndarray) -> np.ndarray:
    """Standard-normal-ish features put on different scales and offsets (so that the scaler
    matters); the same transform for the training data and the timed inputs."""
    scale = rng(3).uniform(0.1, 50.0, N_FEATURES)
    shift = rng(4).normal(0.0, 10.0, N_FEATURES)
    return (x * scale + shift).astype(np.float32)


@functools.cache
def scaler_logreg_model() -> onnx.ModelProto:
    """StandardScaler + LogisticRegression trained on synthetic data (cached per process)."""
    from skl2onnx import to_onnx
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = make_classification(
        2000, N_FEATURES, n_informative=10, n_classes=N_CLASSES, random_state=0
    )
    x = _unscaled(x)
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    pipe.fit(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = to_onnx(pipe, x[:1], target_opset=TARGET_OPSET)
    return trees.tidy(model)


def rf_clf_model() -> onnx.ModelProto:
    """G1's 100-tree random forest classifier converted with ZipMap (skl2onnx's default)."""
    return trees.build_model("rf_clf", zipmap=True)


def build(kind: str, batch: int = 1) -> Case:
    """``kind``: "sk_scaler_logreg" or "rf_clf"."""
    if kind == "sk_scaler_logreg":
        model = scaler_logreg_model()
        x = _unscaled(rng(6).standard_normal((batch, N_FEATURES)))  # the training scales
        tol = {"rtol": 1e-4, "atol": 1e-5}
    elif kind == "rf_clf":
        model = rf_clf_model()
        x = (rng(6).standard_normal((batch, N_FEATURES)) * 2).astype(np.float32)  # G1's inputs
        tol = {"rtol": 1e-4, "atol": 1e-4}
    else:
        raise ValueError(f"unknown G2 model {kind!r}")
    feeds = {model.graph.input[0].name: x}
    return Case(workload="G2", name=f"{kind}/b{batch}", model=model, feeds=feeds, **tol)


def cases(quick: bool) -> list[Case]:
    """Both models at batch 1; quick: the same (both are cheap to train and to run)."""
    return [build("sk_scaler_logreg", 1), build("rf_clf", 1)]
