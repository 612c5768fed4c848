"""The fast tree-ensemble walk (kernels/cpu/trees.py, "Fast layout") against onnxruntime.

The fast layout serves ensembles whose branches are LEQ/LT/GT/GTE under SUM/AVERAGE; these
tests build unbalanced random trees (so lock-step walks run past shallow leaves), batches that
hit every path of the kernel (eight-row groups, the eight-tree groups of the last rows, single
trees, several row blocks, the parallel twin), rows with NaN (which take the general walk),
and ensembles that must fall back to the general walk (EQ branches, leaves that give a target
only in some of a tree's leaves, MIN/MAX). onnxruntime is the oracle throughout: it is what
skl2onnx models are checked against.

Which walk served a run is read from the plan (``sess.stats()["plans"][-1]["steps"]``): the
tree step's bound call is ``trees.perfect[f=F,ni=NI,kt=KT]`` (the generated walk-and-finish
kernel), ``trees.perfect_sums`` (the generated walk's sums, finished on the host),
``trees.fast_finish`` (the fast layout's walk and the finishing in one kernel), ``trees.fast``
or ``trees.general``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import numpy_helper

pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle")

from oracle import assert_close, ort_outputs, reference_outputs  # noqa: E402
from test_ops_ml import _compare_steps, _declare_outputs, _node_model  # noqa: E402

import onnxjit  # noqa: E402
import onnxjit.ops.ml as ml  # noqa: E402
from onnxjit import backends  # noqa: E402

FAST_MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GT", "BRANCH_GTE"]


def _unbalanced_forest(
    rng, n_trees, max_depth, n_features, n_targets, modes, *, uniform=True, one_target=False
):
    """Legacy-format attributes of random trees whose leaves sit at depths 1..max_depth.

    Node ids are shuffled per tree (root first in attribute order, as onnxruntime wants).
    ``uniform``: every leaf of a tree writes the same targets (tree t writes target
    t % n_targets, plus all targets for even t), as skl2onnx's ensembles do; otherwise each
    leaf writes one random target. ``one_target``: tree t writes only target t % n_targets
    (gradient-boosted classifiers).
    """
    a = {
        k: []
        for k in (
            "nodes_treeids",
            "nodes_nodeids",
            "nodes_featureids",
            "nodes_values",
            "nodes_modes",
            "nodes_truenodeids",
            "nodes_falsenodeids",
            "nodes_missing_value_tracks_true",
            "w_treeids",
            "w_nodeids",
            "w_ids",
            "w_weights",
        )
    }
    for t in range(n_trees):
        # shape first: list of (depth, children) built breadth-first
        nodes = [[0, None]]
        k = 0
        while k < len(nodes):
            d = nodes[k][0]
            if d < max_depth and (d == 0 or rng.random() < 0.75):
                nodes[k][1] = (len(nodes), len(nodes) + 1)
                nodes.append([d + 1, None])
                nodes.append([d + 1, None])
            k += 1
        ids = np.concatenate([[0], 1 + rng.permutation(len(nodes) - 1)])
        targets = [t % n_targets] if t % 2 or one_target else list(range(n_targets))
        for k, (_, children) in enumerate(nodes):
            a["nodes_treeids"].append(t)
            a["nodes_nodeids"].append(int(ids[k]))
            a["nodes_missing_value_tracks_true"].append(int(rng.random() < 0.5))
            if children is None:
                a["nodes_featureids"].append(0)
                a["nodes_values"].append(0.0)
                a["nodes_modes"].append("LEAF")
                a["nodes_truenodeids"].append(0)
                a["nodes_falsenodeids"].append(0)
                for tg in targets if uniform else [int(rng.integers(n_targets))]:
                    a["w_treeids"].append(t)
                    a["w_nodeids"].append(int(ids[k]))
                    a["w_ids"].append(int(tg))
                    a["w_weights"].append(float(np.round(rng.standard_normal(), 3)))
            else:
                a["nodes_featureids"].append(int(rng.integers(n_features)))
                # thresholds on the 0.1 grid of the features: ties exercise LT/GTE exactly
                a["nodes_values"].append(float(np.round(rng.standard_normal() * 0.7, 1)))
                a["nodes_modes"].append(str(rng.choice(modes)))
                a["nodes_truenodeids"].append(int(ids[children[0]]))
                a["nodes_falsenodeids"].append(int(ids[children[1]]))
    return a


def _x(rng, n, f, dtype=np.float32, nan_rows=0.0):
    x = np.round(rng.standard_normal((n, f)) * 0.7, 1)
    if nan_rows:
        rows = rng.random(n) < nan_rows
        cols = rng.integers(f, size=n)
        x[rows, cols[rows]] = np.nan
    return x.astype(dtype)


def _regressor(a, n_targets, **extra):
    attrs = {k: v for k, v in a.items() if not k.startswith("w_")}
    attrs.update(
        target_treeids=a["w_treeids"],
        target_nodeids=a["w_nodeids"],
        target_ids=a["w_ids"],
        target_weights=a["w_weights"],
        n_targets=n_targets,
    )
    attrs.update(extra)
    return attrs


def _classifier(a, labels, **extra):
    attrs = {k: v for k, v in a.items() if not k.startswith("w_")}
    attrs.update(
        class_treeids=a["w_treeids"],
        class_nodeids=a["w_nodeids"],
        class_ids=a["w_ids"],
        class_weights=a["w_weights"],
        classlabels_int64s=labels,
    )
    attrs.update(extra)
    return attrs


def _walk(model, feeds, oracle="ort", threads=None) -> str:
    """Run ``model`` against the oracle; the bound call of its tree step (see the module
    docstring), which must not be left to the implementation."""
    _, steps = _compare_steps(model, feeds, oracle=oracle, threads=threads)
    (step,) = steps
    assert not step["generic"], step
    return step["kernel"]


def _run_steps(model, feeds, threads=None):
    """onnxjit's outputs and its plan's steps (no oracle)."""
    so = onnxjit.SessionOptions()
    if threads:
        so.intra_op_num_threads = threads
    sess = onnxjit.InferenceSession(model.SerializeToString(), so)
    got = sess.run(None, feeds)
    return got, sess.stats()["plans"][-1]["steps"]


def _fast_layout(attrs: dict, n_targets: int, dtype=np.float32):
    """The fast layout ops/ml.py builds for a regressor with these attributes (a unit of the
    layout builders, outside any session)."""
    table = ml._regressor_model(_NoNode(), attrs)
    return table.fast_for(backends.default(), dtype, n_targets)


class _NoNode:
    """What the table builders ask of a node context: its errors."""

    def error(self, message: str) -> Exception:
        return ValueError(message)

    unsupported = error


def _perfect_kt(kernel: str) -> int:
    """Values per leaf of a ``trees.perfect[...]`` bound call."""
    m = re.fullmatch(r"trees\.perfect\[f=\d+,ni=\d+,kt=(\d+)\]", kernel)
    assert m, kernel
    return int(m.group(1))


@pytest.mark.parametrize("rows", [1, 5, 8, 13, 64, 131])
@pytest.mark.parametrize("mode", FAST_MODES + ["mixed"])
def test_fast_regressor_rows_and_modes(rows, mode):
    rng = np.random.default_rng(rows * 7 + len(mode))
    modes = FAST_MODES if mode == "mixed" else [mode]
    # 11 trees: one group of eight and three single trees for the last rows
    a = _unbalanced_forest(rng, 11, 6, 5, 1, modes)
    x = _x(rng, rows, 5)
    model = _node_model("TreeEnsembleRegressor", {"x": x}, _regressor(a, 1))
    assert _walk(model, {"x": x}).startswith("trees.perfect[")


@pytest.mark.parametrize("agg", ["SUM", "AVERAGE"])
@pytest.mark.parametrize("base", [False, True])
def test_fast_regressor_targets(agg, base):
    rng = np.random.default_rng(3)
    a = _unbalanced_forest(rng, 10, 5, 4, 3, FAST_MODES)
    x = _x(rng, 37, 4)
    extra = {"aggregate_function": agg}
    if base:
        extra["base_values"] = [0.5, -1.0, 2.0]
    model = _node_model("TreeEnsembleRegressor", {"x": x}, _regressor(a, 3, **extra))
    assert _walk(model, {"x": x}).startswith("trees.perfect[")


@pytest.mark.parametrize("rows", [3, 40])
def test_fast_rows_with_nan_take_the_general_walk(rows):
    rng = np.random.default_rng(rows)
    a = _unbalanced_forest(rng, 9, 5, 4, 1, FAST_MODES)
    x = _x(rng, rows, 4, nan_rows=0.4)
    assert np.isnan(x).any() and not np.isnan(x).all(axis=1).all()
    model = _node_model("TreeEnsembleRegressor", {"x": x}, _regressor(a, 1))
    assert _walk(model, {"x": x}).startswith("trees.perfect[")


@pytest.mark.parametrize("perfect", [False, True])
def test_fast_parallel_twin(monkeypatch, perfect):
    # the fast layout's own walk (no perfect layout), or the NaN rows the perfect walk leaves
    # to it, on two threads
    monkeypatch.setattr(ml, "_FAST_PARALLEL_VISITS", 0)
    if not perfect:
        monkeypatch.setattr(ml, "_build_perfect", lambda *args: None)
    rng = np.random.default_rng(11)
    a = _unbalanced_forest(rng, 12, 6, 6, 2, FAST_MODES)
    x = _x(rng, 300, 6, nan_rows=0.2 if perfect else 0.05)
    model = _node_model("TreeEnsembleRegressor", {"x": x}, _regressor(a, 2))
    kernel = _walk(model, {"x": x}, threads=2)
    assert kernel.startswith("trees.perfect[") if perfect else kernel == "trees.fast"


def test_fast_float64_input():
    rng = np.random.default_rng(5)
    a = _unbalanced_forest(rng, 9, 5, 4, 1, FAST_MODES)
    x = _x(rng, 29, 4, np.float64)
    model = _node_model("TreeEnsembleRegressor", {"x": x}, _regressor(a, 1))
    assert _walk(model, {"x": x}).startswith("trees.perfect[")


def test_fast_float32_input_double_thresholds(monkeypatch):
    # Thresholds float32 cannot hold: the fast layout keeps them in float64, comparing as the
    # general walk does. Neither oracle serves here (onnxruntime's float kernel rounds the
    # thresholds to float32; the reference evaluator rejects *_as_tensor attributes), so the
    # fast walk is checked against the general walk, which test_ops_ml checks against both.
    rng = np.random.default_rng(6)
    a = _unbalanced_forest(rng, 9, 5, 4, 1, ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE"])
    values = np.asarray(a.pop("nodes_values"), dtype=np.float64) + 1e-9
    # features on the float32 values next to the thresholds, so that rounding would show
    x = np.nextafter(values[:4].astype(np.float32), np.float32(np.inf))
    x = np.concatenate([_x(rng, 21, 4), np.tile(x, (5, 1))]).astype(np.float32)
    attrs = _regressor(a, 1, nodes_values_as_tensor=numpy_helper.from_array(values, "v"))
    model = _node_model("TreeEnsembleRegressor", {"x": x}, attrs)
    fast, steps = _run_steps(model, {"x": x})
    assert steps[0]["kernel"].startswith("trees.perfect[")
    # bit for bit: a float32 comparison would differ on the features next to the thresholds
    monkeypatch.setattr(ml, "_build_fast", lambda *args: None)
    general, steps = _run_steps(model, {"x": x})
    assert steps[0]["kernel"] == "trees.general"
    np.testing.assert_array_equal(fast[0], general[0])


@pytest.mark.parametrize("n_classes", [2, 4])
@pytest.mark.parametrize("rows", [1, 50])
def test_fast_classifier(n_classes, rows):
    rng = np.random.default_rng(n_classes * 10 + rows)
    a = _unbalanced_forest(rng, 10, 6, 5, n_classes, FAST_MODES)
    x = _x(rng, rows, 5)
    # labels 0..C-1: with other labels onnxruntime's binary case returns the class index
    # (a quirk test_ops_ml covers), which is not what this test is about
    attrs = _classifier(a, list(range(n_classes)), post_transform="SOFTMAX")
    model = _node_model("TreeEnsembleClassifier", {"x": x}, attrs, n_outputs=2)
    # two classes keep the host's binary conventions over the generated walk's sums
    want = "trees.perfect_sums" if n_classes == 2 else "trees.perfect["
    assert _walk(model, {"x": x}).startswith(want)


def _v5_attrs(rng, n_trees, depth, n_features):
    """TreeEnsemble-5 attributes of full trees of ``depth`` (modes LEQ, LT, GTE, GT)."""
    roots, modes, feats, splits, tids, fids, tleaf, fleaf, lt, lw = ([] for _ in range(10))
    for _ in range(n_trees):
        roots.append(len(modes))
        n_int = 2**depth - 1
        base = len(modes)
        for k in range(n_int):
            modes.append(int(rng.integers(4)))  # LEQ, LT, GTE, GT
            feats.append(int(rng.integers(n_features)))
            splits.append(float(np.round(rng.standard_normal() * 0.7, 1)))
            for c, ids, leafs in ((2 * k + 1, tids, tleaf), (2 * k + 2, fids, fleaf)):
                if c < n_int:
                    ids.append(base + c)
                    leafs.append(0)
                else:
                    ids.append(len(lt))
                    leafs.append(1)
                    lt.append(0)
                    lw.append(float(np.round(rng.standard_normal(), 3)))
    attrs = dict(
        n_targets=1,
        aggregate_function=1,
        post_transform=0,
        tree_roots=roots,
        nodes_modes=np.array(modes, dtype=np.uint8),
        nodes_featureids=feats,
        nodes_splits=np.array(splits, dtype=np.float32),
        nodes_truenodeids=tids,
        nodes_falsenodeids=fids,
        nodes_trueleafs=tleaf,
        nodes_falseleafs=fleaf,
        leaf_targetids=lt,
        leaf_weights=np.array(lw, dtype=np.float32),
    )
    for k in ("nodes_modes", "nodes_splits", "leaf_weights"):
        attrs[k] = numpy_helper.from_array(attrs[k])
    return attrs


def test_fast_tree_ensemble_5():
    # TreeEnsemble-5 from the legacy regressor (onnx's version converter is not needed:
    # onnxruntime runs both, the reference evaluator runs TreeEnsemble-5)
    rng = np.random.default_rng(8)
    attrs = _v5_attrs(rng, 9, 4, 3)
    x = _x(rng, 33, 3)
    model = _node_model("TreeEnsemble", {"x": x}, attrs, ml_opset=5)
    assert _walk(model, {"x": x}, oracle="ref").startswith("trees.perfect[")


@pytest.mark.parametrize("why", ["eq_mode", "mixed_targets", "min", "max"])
def test_general_walk_fallbacks(why):
    rng = np.random.default_rng(len(why))
    modes = FAST_MODES + ["BRANCH_EQ"] if why == "eq_mode" else FAST_MODES
    a = _unbalanced_forest(rng, 9, 5, 4, 3, modes, uniform=why != "mixed_targets")
    x = _x(rng, 24, 4)
    extra = {"aggregate_function": why.upper()} if why in ("min", "max") else {}
    model = _node_model("TreeEnsembleRegressor", {"x": x}, _regressor(a, 3, **extra))
    assert _walk(model, {"x": x}) == "trees.general"


# --------------------------------------------------------------------------------------------
# Perfect layout: the generated walk-and-finish kernels (onnxjit/codegen/trees.py)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rows", [1, 11, 12, 13, 25, 100])
def test_perfect_regressor_rows(rows):
    # 37 trees of depths up to 7: two groups of 16 trees for single rows plus five alone;
    # full groups of 12 rows and the rows after them
    rng = np.random.default_rng(100 + rows)
    a = _unbalanced_forest(rng, 37, 7, 6, 1, FAST_MODES)
    x = _x(rng, rows, 6)
    model = _node_model("TreeEnsembleRegressor", {"x": x}, _regressor(a, 1, base_values=[0.25]))
    assert _perfect_kt(_walk(model, {"x": x})) == 1
    depths = _fast_layout(_regressor(a, 1), 1).perfect.depth
    assert len({int(d) for d in depths}) > 1  # trees of several depths


@pytest.mark.parametrize("rows", [1, 30])
@pytest.mark.parametrize("agg", ["SUM", "AVERAGE"])
def test_perfect_one_target_per_tree(rows, agg):
    # every tree gives one target (gradient-boosted style): one value per leaf (kt == 1)
    rng = np.random.default_rng(7 + rows)
    a = _unbalanced_forest(rng, 20, 5, 4, 3, FAST_MODES, one_target=True)
    x = _x(rng, rows, 4)
    extra = {"aggregate_function": agg, "base_values": [0.5, -1.0, 2.0]}
    model = _node_model("TreeEnsembleRegressor", {"x": x}, _regressor(a, 3, **extra))
    assert _perfect_kt(_walk(model, {"x": x})) == 1


@pytest.mark.parametrize("labels", ["ints", "strings"])
@pytest.mark.parametrize("base", [False, True])
@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC"])
@pytest.mark.parametrize("rows", [1, 29])
def test_perfect_classifier(labels, base, post, rows):
    rng = np.random.default_rng(len(labels) * 3 + base + rows + len(post))
    one = post == "SOFTMAX"  # gradient-boosted style with a softmax, forest style otherwise
    a = _unbalanced_forest(rng, 18, 6, 5, 3, FAST_MODES, one_target=one)
    x = _x(rng, rows, 5, nan_rows=0.2 if rows > 1 else 0.0)
    extra = {"post_transform": post}
    if base:
        extra["base_values"] = [0.1, -0.2, 0.05]
    if labels == "ints":
        attrs = _classifier(a, [4, 7, 9], **extra)
    else:
        attrs = _classifier(a, [], **extra)
        del attrs["classlabels_int64s"]
        attrs["classlabels_strings"] = ["a", "b", "c"]
    model = _node_model("TreeEnsembleClassifier", {"x": x}, attrs, n_outputs=2)
    assert _perfect_kt(_walk(model, {"x": x})) == (1 if one else 3)


@pytest.mark.parametrize("rows", [1, 12, 40])
def test_perfect_rows_with_nan(rows):
    # rows holding a NaN follow missing_value_tracks_true through the host path; the others
    # stay in the kernel
    rng = np.random.default_rng(rows + 50)
    a = _unbalanced_forest(rng, 17, 5, 4, 2, FAST_MODES)
    x = _x(rng, rows, 4, nan_rows=0.3)
    if rows == 1:
        x[0, 2] = np.nan
    model = _node_model("TreeEnsembleRegressor", {"x": x}, _regressor(a, 2))
    assert _walk(model, {"x": x}).startswith("trees.perfect[")


@pytest.mark.parametrize("kind", ["regressor", "classifier"])
def test_perfect_parallel(monkeypatch, kind):
    monkeypatch.setattr(ml, "_PERFECT_PARALLEL_VISITS", 0)
    rng = np.random.default_rng(21)
    a = _unbalanced_forest(rng, 19, 6, 6, 3, FAST_MODES)
    x = _x(rng, 301, 6, nan_rows=0.03)
    if kind == "regressor":
        model = _node_model("TreeEnsembleRegressor", {"x": x}, _regressor(a, 3))
    else:
        attrs = _classifier(a, [0, 1, 2], post_transform="SOFTMAX")
        model = _node_model("TreeEnsembleClassifier", {"x": x}, attrs, n_outputs=2)
    assert _walk(model, {"x": x}, threads=2).startswith("trees.perfect[")


def test_perfect_wide_rows():
    # more than 256 features: uint16 feature ids
    rng = np.random.default_rng(31)
    a = _unbalanced_forest(rng, 10, 5, 300, 1, FAST_MODES)
    x = _x(rng, 27, 300)
    model = _node_model("TreeEnsembleRegressor", {"x": x}, _regressor(a, 1))
    assert _walk(model, {"x": x}).startswith("trees.perfect[f=300,")
    assert _fast_layout(_regressor(a, 1), 1).perfect.feat.dtype == np.uint16


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_perfect_input_types(dtype):
    rng = np.random.default_rng(41)
    a = _unbalanced_forest(rng, 10, 5, 4, 1, FAST_MODES)
    x = (_x(rng, 26, 4, np.float64) * (10 if dtype == np.int64 else 1)).astype(dtype)
    model = _node_model("TreeEnsembleRegressor", {"x": x}, _regressor(a, 1))
    if dtype == np.float64:
        assert _walk(model, {"x": x}).startswith("trees.perfect[")
    else:
        # onnxruntime has no integer-input kernel: integers become float32 (as onnxjit
        # converts them), so the oracle runs the same trees on float32 features; the
        # implementation converts them (a generic step) and runs the generated walk
        xf = x.astype(np.float32)
        want = ort_outputs(
            _node_model("TreeEnsembleRegressor", {"x": xf}, _regressor(a, 1)), {"x": xf}
        )
        _declare_outputs(model, want)
        got, steps = _run_steps(model, {"x": x})
        assert_close(got[0], want[0], 1e-5, 1e-5, "output 0")
        assert steps[0]["generic"]


def test_perfect_single_leaf_trees():
    # trees that are one leaf (depth 0) beside deeper ones
    rng = np.random.default_rng(51)
    a = _unbalanced_forest(rng, 17, 4, 3, 1, FAST_MODES)
    for t in (17, 18):
        a["nodes_treeids"].append(t)
        a["nodes_nodeids"].append(0)
        a["nodes_featureids"].append(0)
        a["nodes_values"].append(0.0)
        a["nodes_modes"].append("LEAF")
        a["nodes_truenodeids"].append(0)
        a["nodes_falsenodeids"].append(0)
        a["nodes_missing_value_tracks_true"].append(0)
        a["w_treeids"].append(t)
        a["w_nodeids"].append(0)
        a["w_ids"].append(0)
        a["w_weights"].append(0.5 + t)
    x = _x(rng, 15, 3)
    model = _node_model("TreeEnsembleRegressor", {"x": x}, _regressor(a, 1))
    assert _walk(model, {"x": x}).startswith("trees.perfect[")
    assert int(_fast_layout(_regressor(a, 1), 1).perfect.depth.min()) == 0


def test_perfect_too_deep_keeps_fast_walk(monkeypatch):
    # beyond the perfect layout's depth bound the fast layout's own walk serves, with the
    # finishing in the same kernel call (trees.fast_walk_finish) where it walks serially
    monkeypatch.setattr(ml, "_PERFECT_MAX_DEPTH", 3)
    rng = np.random.default_rng(61)
    a = _unbalanced_forest(rng, 11, 6, 4, 2, FAST_MODES)
    x = _x(rng, 33, 4)
    model = _node_model("TreeEnsembleRegressor", {"x": x}, _regressor(a, 2))
    assert _walk(model, {"x": x}) == "trees.fast_finish"
    monkeypatch.setattr(ml, "_FAST_PARALLEL_VISITS", 1)
    assert _walk(model, {"x": x}, threads=2) == "trees.fast"


@pytest.mark.parametrize("labels", ["ints", "strings"])
@pytest.mark.parametrize("base", [False, True])
@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC"])
@pytest.mark.parametrize("rows", [1, 29, 70])
def test_fast_finish_classifier(monkeypatch, labels, base, post, rows):
    # trees deeper than the perfect layout's bound: the fast walk and the finishing in one
    # kernel, rows holding a NaN computed again by the host path
    monkeypatch.setattr(ml, "_PERFECT_MAX_DEPTH", 3)
    rng = np.random.default_rng(len(labels) * 3 + base + rows + len(post) + 700)
    one = post == "SOFTMAX"
    a = _unbalanced_forest(rng, 21, 9, 5, 3, FAST_MODES, one_target=one)
    x = _x(rng, rows, 5, nan_rows=0.2 if rows > 1 else 0.0)
    extra = {"post_transform": post}
    if base:
        extra["base_values"] = [0.1, -0.2, 0.05]
    if labels == "ints":
        attrs = _classifier(a, [4, 7, 9], **extra)
    else:
        attrs = _classifier(a, [], **extra)
        del attrs["classlabels_int64s"]
        attrs["classlabels_strings"] = ["a", "b", "c"]
    model = _node_model("TreeEnsembleClassifier", {"x": x}, attrs, n_outputs=2)
    assert _walk(model, {"x": x}) == "trees.fast_finish"


@pytest.mark.parametrize("agg", ["SUM", "AVERAGE"])
@pytest.mark.parametrize("rows", [1, 9, 65])
def test_fast_finish_regressor(monkeypatch, agg, rows):
    monkeypatch.setattr(ml, "_PERFECT_MAX_DEPTH", 4)
    rng = np.random.default_rng(rows + 800 + len(agg))
    a = _unbalanced_forest(rng, 13, 10, 4, 2, FAST_MODES)
    x = _x(rng, rows, 4, nan_rows=0.25)
    if rows == 1:
        x[0, 1] = np.nan
    attrs = _regressor(a, 2, aggregate_function=agg, base_values=[0.5, -1.0])
    model = _node_model("TreeEnsembleRegressor", {"x": x}, attrs)
    assert _walk(model, {"x": x}) == "trees.fast_finish"


def test_perfect_binary_classifier_sums():
    # two classes keep the host's classifier conventions over the perfect walk's sums
    rng = np.random.default_rng(71)
    a = _unbalanced_forest(rng, 18, 5, 4, 2, FAST_MODES)
    x = _x(rng, 30, 4, nan_rows=0.1)
    attrs = _classifier(a, [0, 1], post_transform="LOGISTIC")
    model = _node_model("TreeEnsembleClassifier", {"x": x}, attrs, n_outputs=2)
    assert _walk(model, {"x": x}) == "trees.perfect_sums"


def test_perfect_layout_matches_fast_layout():
    # every leaf reached through the perfect layout is the one the fast layout reaches
    rng = np.random.default_rng(81)
    a = _unbalanced_forest(rng, 23, 7, 5, 1, FAST_MODES)
    x = _x(rng, 64, 5)
    fast = _fast_layout(_regressor(a, 1), 1)
    p = fast.perfect
    ni = p.ni
    for r in range(x.shape[0]):
        for t in range(fast.t_root.shape[0]):
            n = int(fast.t_root[t])
            for _ in range(int(fast.t_depth[t])):
                n = int(fast.f_left[n]) + int(x[r, fast.f_feat[n]] > fast.f_thr[n])
            want = fast.values[fast.f_leaf[n], 0]
            k = 0
            for _ in range(int(p.depth[t])):
                i = t * ni + k
                k = 2 * k + 1 + int(x[r, p.feat[i]] > p.thr[i])
            leaf = k - ((1 << int(p.depth[t])) - 1)
            assert p.leaves[(t * (ni + 1) + leaf) * p.kt] == want


@pytest.mark.parametrize("kind", ["regressor", "classifier", "strings", "v5"])
def test_plans_later_runs(monkeypatch, kind):
    # one session, many runs: each row count gets a plan binding the generated kernel (the
    # parallel one for 300 rows), also for rows holding NaN and a strided input, each run
    # against an oracle; earlier outputs must stay as they were
    monkeypatch.setattr(ml, "_PERFECT_PARALLEL_VISITS", 1 << 12)
    rng = np.random.default_rng(91)
    nan = 0.0 if kind == "v5" else 0.2  # the reference evaluator has no NaN rule for LT/GT
    feeds = [
        _x(rng, 5, 4),
        _x(rng, 40, 4, nan_rows=nan),
        _x(rng, 1, 4),
        _x(rng, 300, 4, nan_rows=nan / 10),
        _x(rng, 30, 4)[::2],
        _x(rng, 7, 4),
    ]
    if kind != "v5":
        feeds.append(_x(rng, 1, 4, nan_rows=1.0))
    a = _unbalanced_forest(rng, 18, 5, 4, 3, FAST_MODES)
    if kind == "regressor":
        model = _node_model("TreeEnsembleRegressor", {"x": feeds[0]}, _regressor(a, 3))
    elif kind == "v5":
        model = _node_model("TreeEnsemble", {"x": feeds[0]}, _v5_attrs(rng, 19, 5, 4), ml_opset=5)
    else:
        labels = [3, 1, 2] if kind == "classifier" else []
        attrs = _classifier(a, labels, post_transform="SOFTMAX", base_values=[0.1, 0.2, 0.3])
        if kind == "strings":
            del attrs["classlabels_int64s"]
            attrs["classlabels_strings"] = ["x", "y", "z"]
        model = _node_model("TreeEnsembleClassifier", {"x": feeds[0]}, attrs, n_outputs=2)
    for vi in model.graph.input:
        vi.type.tensor_type.shape.dim[0].dim_param = "N"
    oracle = reference_outputs if kind == "v5" else ort_outputs
    _declare_outputs(model, oracle(model, {"x": feeds[0]}))
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = 2
    sess = onnxjit.InferenceSession(model.SerializeToString(), so)
    kept = []
    for x in feeds:
        want = oracle(model, {"x": np.ascontiguousarray(x)})
        got = sess.run(None, {"x": x})
        assert len(got) == len(want)
        for g, w in zip(got, want):
            if w.dtype.kind in "OUS":
                np.testing.assert_array_equal(np.asarray(g, dtype=object), w.astype(object))
            else:
                assert_close(g, w, 1e-5, 1e-5, f"{kind}, {x.shape[0]} rows")
        kept.append((got, [np.array(g, copy=True) for g in got]))
    for got, copy in kept:
        for g, c in zip(got, copy):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(c))
    plans = sess.stats()["plans"]
    assert len(plans) == len({x.shape for x in feeds})
    for plan in plans:
        (step,) = plan["steps"]
        assert step["kernel"].startswith("trees.perfect[") and not step["generic"]
    # no rows: empty outputs of the same dtypes and widths
    empty = sess.run(None, {"x": np.zeros((0, 4), np.float32)})
    for e, g in zip(empty, kept[-1][0]):
        e, g = np.asarray(e), np.asarray(g)
        assert e.shape == (0, *g.shape[1:]) and e.dtype == g.dtype


@pytest.mark.parametrize("kind", ["regressor", "classifier"])
def test_new_batch_sizes_compile_nothing(kind):
    # the generated walks are compiled per dtype and row width, never per row count: after a
    # warm-up on one small and one parallel batch, new row counts compile nothing
    rng = np.random.default_rng(97)
    a = _unbalanced_forest(rng, 33, 6, 7, 3, FAST_MODES)
    x0 = _x(rng, 3, 7)
    if kind == "regressor":
        model = _node_model("TreeEnsembleRegressor", {"x": x0}, _regressor(a, 3))
    else:
        attrs = _classifier(a, [0, 1, 2], post_transform="SOFTMAX")
        model = _node_model("TreeEnsembleClassifier", {"x": x0}, attrs, n_outputs=2)
    for vi in model.graph.input:
        vi.type.tensor_type.shape.dim[0].dim_param = "N"
    _declare_outputs(model, ort_outputs(model, {"x": x0}))
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = 2
    sess = onnxjit.InferenceSession(model.SerializeToString(), so)
    for n in (3, 1, 2000):
        sess.run(None, {"x": _x(rng, n, 7, nan_rows=0.01)})
    before = onnxjit.compile_count()
    for n in (1, 2, 11, 12, 13, 50, 777, 3001):
        x = _x(rng, n, 7, nan_rows=0.01)
        want = ort_outputs(model, {"x": x})
        for g, w in zip(sess.run(None, {"x": x}), want):
            assert_close(g, w, 1e-5, 1e-5, f"{n} rows")
    assert onnxjit.compile_count() == before


@pytest.mark.parametrize("rows", [1, 30])
def test_perfect_many_classes(rows):
    # ten classes, every leaf giving all of them: the generated code adds a leaf's values in
    # a loop instead of unrolled (more than KT_UNROLL values per leaf)
    rng = np.random.default_rng(111 + rows)
    a = _unbalanced_forest(rng, 17, 5, 4, 10, FAST_MODES)
    # every leaf of every tree gives every class
    for k in ("w_treeids", "w_nodeids", "w_ids", "w_weights"):
        a[k] = []
    for t, n, m in zip(a["nodes_treeids"], a["nodes_nodeids"], a["nodes_modes"]):
        if m == "LEAF":
            for c in range(10):
                a["w_treeids"].append(t)
                a["w_nodeids"].append(n)
                a["w_ids"].append(c)
                a["w_weights"].append(float(np.round(rng.standard_normal(), 3)))
    x = _x(rng, rows, 4)
    attrs = _classifier(a, list(range(10)), post_transform="SOFTMAX")
    model = _node_model("TreeEnsembleClassifier", {"x": x}, attrs, n_outputs=2)
    assert _perfect_kt(_walk(model, {"x": x})) == 10
