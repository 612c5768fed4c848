"""pytest-benchmark entry point for the workloads (marked ``bench``; not in the default run).

    pytest bench -m bench                                  # quick subset of every workload
    ONNXJIT_BENCH=full ONNXJIT_BENCH_ONLY=E1,M1 pytest bench -m bench --benchmark-json=b.json

For every case and engine (onnxjit, onnxruntime and OpenVINO, the optional anchor: skipped
with the reason where it is not installed or does not load the case's model),
``benchmark.pedantic`` times the engine alone (>= 20 rounds, each round at least 1 ms of runs,
garbage collector off); ``extra_info`` carries the ratio onnxjit / onnxruntime measured by the
interleaved protocol of :mod:`bench.harness` (median, 95 % interval, raw medians, roof
fraction, flags) and OpenVINO / onnxruntime from the same rounds.
``test_d1_no_compile_after_warmup`` asserts that the D1 cases compile nothing for ten new
sizes once warm. D1's ``alt/...`` cases time one A run plus one B run per iteration, and their
``extra_info`` ratio is alternating / repeated (onnxjit against itself, onnxruntime's beside
it; OpenVINO is not measured there); ``test_alternating_shapes_compile_nothing`` asserts that,
once both shapes are warm, alternating them compiles nothing and both engines agree on both.
"""

from __future__ import annotations

import importlib.util
import math
import os
import time
from typing import Any

import pytest

from bench import harness
from bench.workloads import Case, get_cases, workload_ids

pytestmark = [pytest.mark.bench, pytest.mark.benchmark(disable_gc=True)]

QUICK = os.environ.get("ONNXJIT_BENCH", "quick") != "full"
ONLY = [w.strip().upper() for w in os.environ.get("ONNXJIT_BENCH_ONLY", "").split(",") if w]
MIN_ROUNDS = 20
MIN_ROUND_NS = 1_000_000
OPENVINO_MISSING = (
    None
    if importlib.util.find_spec("openvino")
    else "openvino is not installed: it is the bench extra's optional second anchor "
    "(pip install -e '.[bench]')"
)


def _collect() -> tuple[list[Any], list[Any], list[Any]]:
    params, d1, alt = [], [], []
    for w in ONLY or workload_ids():
        try:
            cases = get_cases(w, QUICK)
        except ImportError as exc:
            reason = f"workload {w} not available: {exc}"
            params.append(pytest.param(None, "-", id=f"{w}", marks=pytest.mark.skip(reason)))
            continue
        for c in cases:
            for eng in ("onnxjit", "onnxruntime", "openvino"):
                missing = eng == "openvino" and OPENVINO_MISSING
                marks = [pytest.mark.skip(reason=OPENVINO_MISSING)] if missing else []
                params.append(pytest.param(c, eng, id=f"{w}:{c.name}:{eng}", marks=marks))
            if c.sizes:
                d1.append(pytest.param(c, id=f"{w}:{c.name}"))
            if c.alternate is not None:
                alt.append(pytest.param(c, id=f"{w}:{c.name}"))
    return params, d1, alt


PARAMS, D1_PARAMS, ALT_PARAMS = _collect()
_SESSIONS: dict[int, tuple[Any, Any, Any]] = {}
_RESULTS: dict[int, harness.Result] = {}


@pytest.fixture(scope="module", autouse=True)
def _threads() -> None:
    harness.fix_threads(harness.THREADS)


@pytest.fixture(scope="module")
def roofs() -> harness.Roofs:
    return harness.measure_roofs()


def _sessions(case: Case) -> tuple[Any, Any, Any]:
    """(onnxjit, onnxruntime, OpenVINO session or the reason there is none) of a case."""
    if id(case) not in _SESSIONS:
        jit, ort_sess, _ = harness.make_sessions(case)
        if case.alternate is None:
            ov, why, _ = harness.try_openvino(case)
        else:  # measure_alternating times onnxjit and onnxruntime only
            ov, why = None, "not measured in alternating-shape cases"
        _SESSIONS[id(case)] = (jit, ort_sess, ov if ov is not None else why)
    return _SESSIONS[id(case)]


def _ratio(case: Case, roofs: harness.Roofs) -> harness.Result:
    if id(case) not in _RESULTS:
        _RESULTS[id(case)] = harness.measure_case(case, roofs, sessions=_sessions(case))
    return _RESULTS[id(case)]


@pytest.mark.parametrize(("case", "engine"), PARAMS)
def test_bench(benchmark: Any, case: Case, engine: str, roofs: harness.Roofs) -> None:
    res = _ratio(case, roofs)
    if res.error:
        pytest.fail(f"{case.workload} {case.name}: {res.error}")
    if res.void:
        pytest.fail(f"{case.workload} {case.name}: result void, {res.void}")
    ov = res.anchors.get("openvino", {})
    if engine == "openvino" and ov.get("ratio") is None:
        pytest.skip(f"{case.workload} {case.name}: openvino {ov.get('why', 'not measured')}")
    jit, ort_sess, ov_sess = _sessions(case)
    sess = {"onnxjit": jit, "onnxruntime": ort_sess, "openvino": ov_sess}[engine]
    feeds = case.feeds
    other = case.alternate

    if other is None:

        def run() -> Any:
            return sess.run(None, feeds)

    else:  # alt/...: shapes A and B alternating, one of each per call

        def run() -> Any:
            sess.run(None, feeds)
            return sess.run(None, other)

    for _ in range(harness.WARM_RUNS):
        run()
    t0 = time.perf_counter_ns()
    run()
    per_run = max(time.perf_counter_ns() - t0, 1)
    iterations = max(1, math.ceil(MIN_ROUND_NS / per_run))
    benchmark.group = f"{case.workload}:{case.name}"
    benchmark.extra_info.update(
        {
            "workload": case.workload,
            "case": case.name,
            "engine": engine,
            "ratio_kind": res.kind,  # "ratio" (onnxjit/onnxruntime) or "alternating"
            "ratio": res.ratio,
            "ratio_ci95": [res.ci_low, res.ci_high],
            "onnxjit_median_ns": res.jit_ns,
            "onnxruntime_median_ns": res.ort_ns,
            "roof_kind": res.roof_kind,
            "onnxjit_roof": res.jit_roof,
            "onnxruntime_roof": res.ort_roof,
            "flags": res.flags,
            "onnxruntime_alternating_ratio": res.extra.get("ort_ratio"),
            "openvino_ratio": ov.get("ratio"),
            "openvino_ratio_ci95": [ov.get("ci_low"), ov.get("ci_high")],
            "openvino_median_ns": ov.get("ns"),
            "openvino_why_none": ov.get("why"),
            "copy_gbps": roofs.copy_gbps,
            "gemm_gflops": roofs.gemm_gflops,
        }
    )
    benchmark.pedantic(run, rounds=MIN_ROUNDS, iterations=iterations, warmup_rounds=1)


@pytest.mark.parametrize("case", D1_PARAMS)
def test_d1_no_compile_after_warmup(case: Case) -> None:
    """Once warm on one size, ten new sizes trigger no Numba compilation in onnxjit."""
    counter = harness.compile_counter()
    jit, ort_sess, _ = _sessions(case)
    for _ in range(harness.WARM_RUNS):
        jit.run(None, case.feeds)
    before = counter.snapshot()
    for feeds in case.sizes or ():
        why = harness.compare_outputs(
            jit.run(None, feeds), ort_sess.run(None, feeds), case.rtol, case.atol
        )
        assert why is None, why
    delta = counter.delta(before, counter.snapshot())
    n = delta["onnxjit"] if delta["onnxjit"] is not None else delta["events"]
    assert n == 0, f"{n} compilations for {len(case.sizes or ())} new sizes ({delta})"


@pytest.mark.parametrize("case", ALT_PARAMS)
def test_alternating_shapes_compile_nothing(case: Case) -> None:
    """Once both shapes ran, alternating them (ten of each) compiles nothing in onnxjit, and
    onnxjit matches onnxruntime on both every time."""
    counter = harness.compile_counter()
    jit, ort_sess, _ = _sessions(case)
    shapes = [case.feeds, case.alternate]
    for feeds in shapes:
        for _ in range(harness.WARM_RUNS):
            jit.run(None, feeds)
    want = [ort_sess.run(None, feeds) for feeds in shapes]
    before = counter.snapshot()
    for _ in range(10):
        for feeds, w in zip(shapes, want):
            why = harness.compare_outputs(jit.run(None, feeds), w, case.rtol, case.atol)
            assert why is None, why
    delta = counter.delta(before, counter.snapshot())
    n = delta["onnxjit"] if delta["onnxjit"] is not None else delta["events"]
    assert n == 0, f"{n} compilations while alternating two warm shapes ({delta})"
