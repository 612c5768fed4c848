"""scikit-learn models converted with skl2onnx run in onnxjit and match onnxruntime.

Models (fitted on seeded random data inside the tests): a random forest classifier, a
gradient boosting regressor, and a StandardScaler + LogisticRegression pipeline. Classifiers
are converted twice: with skl2onnx's default ZipMap (probabilities as a sequence of maps,
which both runtimes return as a list of dicts) and with ``zipmap=False`` (a probability
tensor). Labels are compared exactly, probabilities and regression values at rtol 1e-3,
atol 1e-4 (float32 sums over trees in a different order differ in the last bits).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="scikit-learn fits the models")
pytest.importorskip("skl2onnx", reason="skl2onnx converts the models")
pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle")

import onnx  # noqa: E402
from models import compare_outputs, locate_divergence, ort_session, summarize_ops  # noqa: E402
from skl2onnx import to_onnx  # noqa: E402
from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

import onnxjit  # noqa: E402

RTOL, ATOL = 1e-3, 1e-4
N_FEATURES = 6
# Row counts: one row, a handful, and enough rows for the kernels' parallel paths.
ROWS = [1, 7, 3000]


def _data(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # Scaled and shifted so that StandardScaler has work to do.
    x = rng.standard_normal((n, N_FEATURES)) * [1, 2, 0.5, 3, 1, 1] + [0, 1, -2, 0, 5, 0]
    return x.astype(np.float32)


def _classes(x: np.ndarray) -> np.ndarray:
    # Three classes from a non-linear rule, so trees split on several features.
    return ((x[:, 0] + 0.5 * x[:, 1] > 0.5).astype(np.int64) + (x[:, 3] > 1.5)).astype(np.int64)


def _fit(kind: str) -> Any:
    x = _data(400, 0)
    if kind == "random_forest":
        return RandomForestClassifier(n_estimators=12, max_depth=6, random_state=0).fit(
            x, _classes(x)
        )
    if kind == "gradient_boosting":
        y = x[:, 0] * 2.0 + np.sin(x[:, 1]) - x[:, 3] * x[:, 4] * 0.1
        return GradientBoostingRegressor(n_estimators=25, max_depth=3, random_state=0).fit(x, y)
    if kind == "scaler_logreg":
        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, _classes(x))
    raise AssertionError(kind)


_CACHE: dict[tuple[str, bool, int | None, bool], onnx.ModelProto] = {}


def _convert(kind: str, zipmap: bool, ml_opset: int | None, raw: bool = False) -> onnx.ModelProto:
    """The converted model (cached for the test session).

    ``ml_opset`` rewrites the model's ai.onnx.ml import (skl2onnx writes the lowest version
    that has the ops it uses) so that a newer version of the ML ops is resolved.

    skl2onnx 1.20 writes the default-domain opset import twice (same version) in some models;
    unless ``raw``, duplicate identical entries are merged so that the numeric tests do not
    depend on how the checker treats that (``test_duplicate_opset_import_loads`` covers it).
    """
    key = (kind, zipmap, ml_opset, raw)
    if key not in _CACHE:
        est = _fit(kind)
        options = None
        if not zipmap:
            options = {
                RandomForestClassifier: {"zipmap": False},
                LogisticRegression: {"zipmap": False},
            }
        model = to_onnx(est, _data(1, 0), target_opset={"": 17, "ai.onnx.ml": 3}, options=options)
        if ml_opset is not None:
            for imp in model.opset_import:
                if imp.domain == "ai.onnx.ml":
                    imp.version = ml_opset
        if not raw:
            seen: list[tuple[str, int]] = []
            for imp in model.opset_import:
                if (imp.domain, imp.version) not in seen:
                    seen.append((imp.domain, imp.version))
            del model.opset_import[:]
            model.opset_import.extend(onnx.helper.make_opsetid(d, v) for d, v in seen)
        _CACHE[key] = model
    return _CACHE[key]


def _run_both(model: onnx.ModelProto, x: np.ndarray) -> tuple[list[Any], list[Any], list[str]]:
    data = model.SerializeToString()
    name = model.graph.input[0].name
    want = ort_session(data).run(None, {name: x})
    try:
        sess = onnxjit.InferenceSession(data)
    except onnxjit.UnsupportedOperatorError as e:
        pytest.fail(f"onnxjit cannot load the model ({summarize_ops(model)}):\n{e}")
    got = sess.run(None, {name: x})
    return got, want, [o.name for o in model.graph.output]


def _compare_zipmap(got: Any, want: list[dict], rtol: float, atol: float) -> None:
    assert isinstance(got, list), f"ZipMap output should be a list of dicts, got {type(got)}"
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert isinstance(g, dict), f"row {i}: expected a dict, got {type(g)}"
        assert sorted(g) == sorted(w), f"row {i}: keys {sorted(g)} != {sorted(w)}"
        # Same key types as onnxruntime (Python int / str), so code written for it works.
        assert {type(k) for k in g} == {type(k) for k in w}, (
            f"row {i}: key types { ({type(k) for k in g}) } != { ({type(k) for k in w}) }"
        )
        for k in w:
            np.testing.assert_allclose(float(g[k]), float(w[k]), rtol=rtol, atol=atol)


def _check_labels(
    model: onnx.ModelProto, x: np.ndarray, got: np.ndarray, want: np.ndarray, probs: np.ndarray
) -> None:
    """Labels equal exactly, except on near-ties of the two top probabilities.

    ``probs`` are onnxruntime's probabilities (rows x classes). A random forest averages tree
    votes in float32: two classes can tie exactly (6 of 12 trees each) and the summation order
    then decides which one is larger by one ulp, so such rows may pick either class.
    """
    problems = compare_outputs([got], [want], ["label"], RTOL, ATOL)
    if not problems or got.shape != want.shape:
        if problems:
            _fail_with_divergence(model, x, problems)
        return
    bad = np.nonzero(got != want)[0]
    for i in bad:
        # Class indices equal the labels for these models (classes 0..k-1).
        p_got, p_want = probs[i, int(got[i])], probs[i, int(want[i])]
        if not np.isclose(p_got, p_want, rtol=1e-5, atol=1e-6):
            _fail_with_divergence(
                model,
                x,
                [f"label row {i}: {got[i]} != {want[i]} (probabilities {probs[i].tolist()})"],
            )


def _zipmap_to_array(rows: list[dict]) -> np.ndarray:
    keys = sorted(rows[0]) if rows else []
    return np.array([[r[k] for k in keys] for r in rows], dtype=np.float64)


def _fail_with_divergence(model: onnx.ModelProto, x: np.ndarray, problems: list[str]) -> None:
    where = locate_divergence(model, {model.graph.input[0].name: x}, RTOL, ATOL)
    pytest.fail("\n".join(problems) + "\nfirst diverging nodes:\n  " + "\n  ".join(where))


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("ml_opset", [None, 3], ids=["ml-as-exported", "ml3"])
@pytest.mark.parametrize("kind", ["random_forest", "scaler_logreg"])
def test_classifier_zipmap(kind: str, ml_opset: int | None, rows: int) -> None:
    model = _convert(kind, zipmap=True, ml_opset=ml_opset)
    x = _data(rows, 1)
    got, want, _ = _run_both(model, x)
    assert len(got) == 2
    _compare_zipmap(got[1], want[1], RTOL, ATOL)
    _check_labels(model, x, np.asarray(got[0]), want[0], _zipmap_to_array(want[1]))


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("ml_opset", [None, 3], ids=["ml-as-exported", "ml3"])
@pytest.mark.parametrize("kind", ["random_forest", "scaler_logreg"])
def test_classifier_tensor_probabilities(kind: str, ml_opset: int | None, rows: int) -> None:
    model = _convert(kind, zipmap=False, ml_opset=ml_opset)
    x = _data(rows, 2)
    got, want, names = _run_both(model, x)
    problems = compare_outputs(got[1:], want[1:], names[1:], RTOL, ATOL)
    if problems:
        _fail_with_divergence(model, x, problems)
    _check_labels(model, x, np.asarray(got[0]), want[0], want[1])


# onnxjit warns about the repeated entry (IR.md asks for one per domain) and runs the model.
@pytest.mark.filterwarnings("ignore:opset_import lists domain:UserWarning")
@pytest.mark.parametrize("kind", ["random_forest", "scaler_logreg"])
def test_duplicate_opset_import_loads(kind: str) -> None:
    """skl2onnx's output as written (default domain imported twice at the same version).

    The ONNX checker and onnxruntime accept a repeated identical opset import; onnxjit should
    too.
    """
    model = _convert(kind, zipmap=False, ml_opset=None, raw=True)
    x = _data(5, 6)
    got, want, names = _run_both(model, x)
    problems = compare_outputs(got, want, names, RTOL, ATOL)
    assert not problems, problems


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("ml_opset", [None, 3], ids=["ml-as-exported", "ml3"])
def test_gradient_boosting_regressor(ml_opset: int | None, rows: int) -> None:
    model = _convert("gradient_boosting", zipmap=False, ml_opset=ml_opset)
    x = _data(rows, 3)
    got, want, names = _run_both(model, x)
    problems = compare_outputs(got, want, names, RTOL, ATOL)
    if problems:
        _fail_with_divergence(model, x, problems)


def test_sklearn_predictions_agree_with_onnxjit_labels() -> None:
    """onnxjit's labels equal scikit-learn's own predictions (the converter is sound here)."""
    est = _fit("random_forest")
    model = _convert("random_forest", zipmap=False, ml_opset=None)
    x = _data(200, 4)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    got = sess.run(None, {model.graph.input[0].name: x})
    agree = np.mean(got[0] == est.predict(x))
    # float32 thresholds in the ONNX trees can flip a sample sitting exactly on a split.
    assert agree >= 0.99, f"only {agree:.3f} of labels agree with scikit-learn"
