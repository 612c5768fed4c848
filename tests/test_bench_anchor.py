"""The bench harness's engines beyond onnxjit and onnxruntime (issue 43 item 2: OpenVINO as a
second anchor) and R3's gradient-boosted models converted by onnxmltools (issue 43 item 1).

The harness tests measure a one-node model through :func:`bench.harness.measure_case` with
all engines interleaved in the same rounds, and render the table of ``python -m bench`` and of
``python -m bench.compare`` from the result: OpenVINO's ratio where it ran, ``-`` and a note
saying why where it did not. No timing is asserted, only that every engine was timed and that
the figures are where the reports put them.

The converter tests run LightGBM and XGBoost models fitted and converted by
:mod:`bench.workloads.real` (the models the bench times) through ``onnxjit.InferenceSession``
against onnxruntime.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import weakref

import numpy as np
import onnx
import onnxruntime as ort
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import onnxjit  # noqa: E402
from bench import __main__ as bench_main  # noqa: E402
from bench import compare, harness  # noqa: E402
from bench.workloads import Case  # noqa: E402
from bench.workloads._build import make_model, value_info  # noqa: E402

HAS_OPENVINO = importlib.util.find_spec("openvino") is not None
NEEDS_OPENVINO = pytest.mark.skipif(
    not HAS_OPENVINO,
    reason="openvino is not installed: it is the bench extra's optional anchor "
    "(pip install -e '.[bench]'); CI installs the test extra only",
)


def _tiny_case() -> Case:
    """x @ W + b, then Relu: a model every engine loads (OpenVINO included)."""
    r = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(r.standard_normal((16, 8)).astype(np.float32), "w")
    b = onnx.numpy_helper.from_array(r.standard_normal(8).astype(np.float32), "b")
    model = make_model(
        [
            onnx.helper.make_node("MatMul", ["x", "w"], ["xw"]),
            onnx.helper.make_node("Add", ["xw", "b"], ["z"]),
            onnx.helper.make_node("Relu", ["z"], ["y"]),
        ],
        [value_info("x", np.float32, ["N", 16])],
        [value_info("y", np.float32, ["N", 8])],
        initializers=[w, b],
    )
    feeds = {"x": r.standard_normal((4, 16), dtype=np.float32)}
    return Case("O1", "tiny_matmul_relu", model, feeds, rtol=1e-5, atol=1e-5)


def _sessions(case: Case) -> tuple:
    """onnxjit and onnxruntime at one thread each: no spinning pools, quick pauses."""
    return tuple(harness.make_sessions(case, threads=1)[:2])


def _tables(res: harness.Result) -> tuple[str, str]:
    """The ``python -m bench`` table and the ``python -m bench.compare`` table of one result."""
    env = bench_main.environment()
    md = bench_main.markdown(
        [res], env, harness.Roofs(1.0, 1.0), {"threads": 1}, "test", ("0 0 0", "0 0 0"), {}
    )
    run = {"results": [res.to_json()], "geomean": res.ratio}
    return md, compare.table(run, run)


def _row(table: str, case: str) -> list[str]:
    (line,) = [ln for ln in table.splitlines() if f"| {case} |" in ln]
    return [c.strip() for c in line.strip("|").split("|")]


@NEEDS_OPENVINO
def test_three_engines_are_timed_in_the_same_rounds_and_reported():
    case = _tiny_case()
    ov, why, seconds = harness.try_openvino(case, threads=1)
    assert why is None and ov is not None and seconds > 0
    # OpenVINO's adapter answers like onnxruntime: the graph's outputs, by name, as arrays
    want = ort.InferenceSession(case.model.SerializeToString()).run(None, case.feeds)
    got = ov.run(None, case.feeds)
    assert harness.compare_outputs(got, want, case.rtol, case.atol) is None
    assert harness.compare_outputs(ov.run(["y"], case.feeds), want, 1e-5, 1e-5) is None

    res = harness.measure_case(case, sessions=(*_sessions(case), ov), block_ms=0.1)
    assert res.error is None and res.void is None, (res.error, res.void)
    per_round = res.extra["per_round_ns"]
    assert set(per_round) == {"jit", "ort", "ov"} == set(res.runs_per_block)
    assert all(len(v) == res.rounds == harness.MIN_ROUNDS for v in per_round.values())
    assert len(set(res.runs_per_block.values())) == 1  # one block length for every engine
    a = res.anchors["openvino"]
    assert "why" not in a and a["ns"] > 0
    assert a["ci_low"] <= a["ratio"] <= a["ci_high"]
    ratios = [v / o for v, o in zip(per_round["ov"], per_round["ort"])]
    assert a["ratio"] == pytest.approx(float(np.median(ratios)))
    assert res.anchor_ratio("openvino") == a["ratio"]
    assert harness.anchor_summary([res], "openvino") == {"O1": pytest.approx(a["ratio"])}

    md, cmp = _tables(res)
    head = [c.strip() for c in md.split("\n| workload")[1].split("\n")[0].split("|")]
    assert "openvino/ort" in head
    row = _row(md, case.name)
    assert row[3] == f"{a['ratio']:.2f} [{a['ci_low']:.2f}, {a['ci_high']:.2f}]"
    means = "Per-workload geometric means of openvino/ort (cases where it ran): O1 "
    assert f"{means}{a['ratio']:.2f}" in md
    assert _row(cmp, case.name)[-1] == row[3]


@NEEDS_OPENVINO
def test_the_harness_builds_openvino_itself_unless_told_not_to():
    case = _tiny_case()
    res = harness.measure_case(case, sessions=_sessions(case), block_ms=0.1)
    assert res.anchor_ratio("openvino") is not None and res.extra["ov_create_s"] > 0
    off = harness.measure_case(case, sessions=_sessions(case), block_ms=0.1, openvino=False)
    assert off.ratio is not None and set(off.extra["per_round_ns"]) == {"jit", "ort"}
    assert off.anchors == {"openvino": {"why": "skipped (--no-openvino)"}}


def test_openvino_ratio_is_void_where_its_outputs_differ():
    """A third engine whose outputs disagree with onnxruntime's is not timed; the onnxjit
    ratio stands, and the table shows ``-`` with a note saying why."""

    class Wrong:
        def run(self, names, feeds):
            return [np.zeros((4, 8), np.float32) - 1.0]

    case = _tiny_case()
    res = harness.measure_case(case, sessions=(*_sessions(case), Wrong()), block_ms=0.1)
    assert res.ratio is not None and res.void is None
    assert set(res.extra["per_round_ns"]) == {"jit", "ort"}
    why = res.anchors["openvino"]["why"]
    assert why.startswith("outputs differ: output 0: ") and "values differ" in why
    md, cmp = _tables(res)
    assert _row(md, case.name)[3] == "- [1]"
    assert f"[1] openvino: {why}" in md
    assert _row(cmp, case.name)[-1] == "-"


def test_dead_weakref_proxies_elsewhere_do_not_void_a_case():
    """The compile counter walks every object the collector tracks; a weakref proxy whose
    target has died (numba keeps such proxies to function IR and code libraries) must not make
    the case fail with ReferenceError, as it did in full test runs."""

    class Target:
        pass

    target = Target()
    dead = [weakref.proxy(target)]
    del target
    case = _tiny_case()
    res = harness.measure_case(case, sessions=(*_sessions(case), "not here"), block_ms=0.1)
    assert res.error is None and res.ratio is not None
    assert len(dead) == 1


def test_openvino_reason_given_by_the_caller_is_reported():
    """``sessions``' third element may be the reason there is no OpenVINO session (what
    bench/test_bench.py passes when OpenVINO did not load the model)."""
    case = _tiny_case()
    res = harness.measure_case(case, sessions=(*_sessions(case), "not here"), block_ms=0.1)
    assert res.ratio is not None and res.anchors == {"openvino": {"why": "not here"}}
    assert bench_main.fmt_anchor(res, "openvino", {}) == "- [1]"


def test_missing_openvino_is_reported_not_raised(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino raises ImportError
    case = _tiny_case()
    ov, why, _ = harness.try_openvino(case)
    assert ov is None and why.startswith("openvino is not installed")
    res = harness.measure_case(case, sessions=_sessions(case), block_ms=0.1)
    assert res.ratio is not None and res.anchors["openvino"]["why"] == why


@NEEDS_OPENVINO
def test_openvino_reports_the_operators_it_does_not_convert():
    """A model with an ai.onnx.ml operator: OpenVINO's reason names the operator."""
    model = make_model(
        [onnx.helper.make_node("Scaler", ["x"], ["y"], domain="ai.onnx.ml", scale=[2.0])],
        [value_info("x", np.float32, ["N", 3])],
        [value_info("y", np.float32, ["N", 3])],
        ml_opset=3,
    )
    case = Case("R3", "scaler", model, {"x": np.ones((2, 3), np.float32)})
    ov, why, _ = harness.try_openvino(case)
    assert ov is None
    assert why.startswith("does not load: ") and "ai.onnx.ml.Scaler" in why


@pytest.mark.parametrize(
    "times_ms, block_ms, want",
    [([1.0, 2.0, 0.5], 5.0, 3), ([0.1, 0.2, 0.05], 5.0, 25), ([0.001, 0.002], 0.1, 50)],
)
def test_block_length_fills_the_slowest_of_any_number_of_engines(times_ms, block_ms, want):
    assert harness.runs_per_block([t * 1e6 for t in times_ms], block_ms) == want


# ----------------------------------------------------------------------------------------------
# R3: LightGBM and XGBoost through onnxmltools


def _boosted(kind: str):
    """R3's model of ``kind``, skipped with the reason where its libraries are missing (they
    are bench extras, which CI does not install)."""
    for mod in ("onnxmltools", "lightgbm" if kind.startswith("lgbm") else "xgboost"):
        pytest.importorskip(mod, reason=f"{mod} is a bench extra (pip install -e '.[bench]')")
    from bench.workloads import real

    return real, real.sk_model(kind)


def _trees(model: onnx.ModelProto) -> tuple[onnx.NodeProto, dict[str, list]]:
    (node,) = [n for n in model.graph.node if n.op_type.startswith("TreeEnsemble")]
    return node, {a.name: list(a.ints) for a in node.attribute if a.ints}


@pytest.mark.parametrize(
    "kind, op, n_trees, max_leaves",
    [
        ("lgbm_clf", "TreeEnsembleClassifier", 300, 31),  # 100 rounds x 3 classes
        ("lgbm_reg", "TreeEnsembleRegressor", 100, 31),
        ("xgb_clf", "TreeEnsembleClassifier", 300, 2**6),  # depth 6
    ],
)
def test_boosted_models_match_onnxruntime(kind, op, n_trees, max_leaves):
    """The converted model is the ensemble asked for (trees, leaves) and onnxjit matches
    onnxruntime on it at batch 1 and 512, optimised and not; the classifiers' labels take
    more than one class over the batch, so the model is not trivially constant."""
    real, model = _boosted(kind)
    node, ints = _trees(model)
    assert node.op_type == op
    trees = np.asarray(ints["nodes_treeids"])
    (modes,) = [[m.decode() for m in a.strings] for a in node.attribute if a.name == "nodes_modes"]
    leaves = np.bincount(trees[np.asarray(modes) == "LEAF"])
    assert len(set(trees.tolist())) == n_trees
    assert leaves.max() <= max_leaves and leaves.max() > max_leaves // 4
    feeds = [real.sk_feeds(kind, b) for b in real.SK_BATCHES]
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = [ref.run(None, f) for f in feeds]
    if kind.endswith("_clf"):
        assert len(set(want[1][0].tolist())) > 1
    else:
        assert np.std(want[1][0]) > 0.1
    for level in (99, 0):
        so = onnxjit.SessionOptions()
        so.graph_optimization_level = level
        sess = onnxjit.InferenceSession(model, so)
        for f, w in zip(feeds, want):
            why = harness.compare_outputs(sess.run(None, f), w, 1e-4, 1e-4)
            assert why is None, f"level {level}, batch {len(f['X'])}: {why}"


def test_r3_lists_the_boosted_cases():
    for mod in ("onnxmltools", "lightgbm", "xgboost"):
        pytest.importorskip(mod, reason=f"{mod} is a bench extra (pip install -e '.[bench]')")
    from bench.workloads import real

    names = [c.name for c in real.cases_r3(False)]
    for kind in real.BOOSTED_KINDS:
        assert [n for n in names if n.startswith(f"{kind}/")] == [f"{kind}/b1", f"{kind}/b512"]


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")
def test_busy_cores_spin_during_the_run_and_are_gone_after_it():
    """``python -m bench --busy N`` (the loaded-machine figures): N child processes use a core
    each while the block runs, none is left afterwards (an error included), and the table's
    header says the run was loaded, without the contention warning their load would raise."""
    with pytest.raises(RuntimeError), bench_main.spinners(2) as procs:
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
        t0 = [_cpu_seconds(p.pid) for p in procs]
        time.sleep(0.5)
        assert all(_cpu_seconds(p.pid) - t > 0.1 for p, t in zip(procs, t0))
        raise RuntimeError("the run failed")
    assert all(p.poll() is not None for p in procs)

    res = harness.Result("O1", "tiny", ratio=1.0, ci_low=0.9, ci_high=1.1)
    env = bench_main.environment()
    load = ("1.00 0.50 0.20", "1.00 0.50 0.20")
    md = bench_main.markdown(
        [res], env, harness.Roofs(1.0, 1.0), {"threads": 1}, "test", load, {}, busy_cores=1
    )
    assert "**1 core(s) kept busy**" in md
    assert "Warning: load average" not in md
    quiet = bench_main.markdown([res], env, harness.Roofs(1.0, 1.0), {"threads": 1}, "t", load, {})
    assert "kept busy" not in quiet
