"""G1: tree ensembles converted by skl2onnx (TreeEnsembleRegressor / TreeEnsembleClassifier).

Random forests (100 trees, depth 8) and gradient boosting (100 trees, depth 8) trained on
synthetic data (fixed seeds, 20 features), as regressors and classifiers (3 classes; class
probabilities as a tensor, no ZipMap), converted with ``target_opset={'': 17, 'ai.onnx.ml':
3}``; batch 1, 100 and 10000. G2 (classic_ml.py) converts the same random forest classifier
with skl2onnx's default options (ZipMap on), as users get it.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import onnx

from bench.workloads import Case
from bench.workloads._build import IR_VERSION, rng

N_FEATURES = 20
N_TREES = 100
DEPTH = 8
BATCHES = (1, 100, 10000)
KINDS = ("rf_reg", "rf_clf", "gb_reg", "gb_clf")


@functools.cache
def build_model(kind: str, zipmap: bool = False) -> onnx.ModelProto:
    """Train the ensemble ``kind`` (one of KINDS) and convert it (cached per process).

    A classifier's probabilities are a float tensor unless ``zipmap`` (skl2onnx's default):
    then a ZipMap turns them into a list of {class: probability} dicts.
    """
    from skl2onnx import to_onnx
    from sklearn.datasets import make_classification, make_regression
    from sklearn.ensemble import (
        GradientBoostingClassifier,
        GradientBoostingRegressor,
        RandomForestClassifier,
        RandomForestRegressor,
    )

    n = 2000
    if kind.endswith("reg"):
        x, y = make_regression(n, N_FEATURES, n_informative=10, noise=0.5, random_state=0)
    else:
        x, y = make_classification(n, N_FEATURES, n_informative=10, n_classes=3, random_state=0)
    x = x.astype(np.float32)
    common = {"n_estimators": N_TREES, "max_depth": DEPTH, "random_state": 0}
    est = {
        "rf_reg": lambda: RandomForestRegressor(n_jobs=1, **common),
        "rf_clf": lambda: RandomForestClassifier(n_jobs=1, **common),
        "gb_reg": lambda: GradientBoostingRegressor(learning_rate=0.1, **common),
        "gb_clf": lambda: GradientBoostingClassifier(learning_rate=0.1, **common),
    }[kind]()
    est.fit(x, y)
    options = {id(est): {"zipmap": False}} if kind.endswith("clf") and not zipmap else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = to_onnx(est, x[:1], target_opset={"": 17, "ai.onnx.ml": 3}, options=options)
    return tidy(model)


def tidy(model: onnx.ModelProto) -> onnx.ModelProto:
    """Cap the IR version at IR_VERSION and list each opset domain once."""
    model.ir_version = min(model.ir_version, IR_VERSION)
    # skl2onnx may list the default domain twice (as "" and "ai.onnx"); keep one entry
    seen: dict[str, int] = {}
    for op in model.opset_import:
        dom = "" if op.domain == "ai.onnx" else op.domain
        seen[dom] = max(seen.get(dom, 0), op.version)
    del model.opset_import[:]
    model.opset_import.extend(onnx.helper.make_opsetid(d, v) for d, v in seen.items())
    return model


def build(kind: str, batch: int) -> Case:
    model = build_model(kind)
    name = model.graph.input[0].name
    x = (rng(6).standard_normal((batch, N_FEATURES)) * 2).astype(np.float32)
    return Case(
        workload="G1",
        name=f"{kind}/b{batch}",
        model=model,
        feeds={name: x},
        rtol=1e-4,
        atol=1e-4,
    )


def cases(quick: bool) -> list[Case]:
    """Every ensemble at batch 1, 100, 10000; quick: rf_clf at 100, gb_reg at 1 and 100."""
    if quick:  # the cheapest to train: gb_clf grows one tree per class and stage
        plan = [("rf_clf", 100), ("gb_reg", 1), ("gb_reg", 100)]
    else:
        plan = [(k, bs) for k in KINDS for bs in BATCHES]
    return [build(k, bs) for k, bs in plan]
