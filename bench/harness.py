"""The ratio harness of shared/BENCHMARKING.md: onnxjit against onnxruntime in one process,
with OpenVINO's CPU runtime as a second anchor where it is installed and loads the model.

Protocol, per case (:func:`measure_case`); the engines are onnxjit, onnxruntime and, where
available, OpenVINO (:data:`ENGINES`):

1. Build every engine's session from the same model; run each once on the same preallocated
   feeds and compare every output with onnxruntime's at the case's ``rtol``/``atol``. An
   onnxjit mismatch makes the result void (no ratio is reported for it); an OpenVINO one, or a
   model OpenVINO does not load, leaves OpenVINO out of the timing, its reason in
   ``Result.anchors["openvino"]["why"]``.
2. Threads: onnxruntime ``intra_op_num_threads=2``, ``inter_op_num_threads=1``, sequential;
   onnxjit ``SessionOptions.intra_op_num_threads=2`` (its own pool, with BLAS single-threaded
   inside); OpenVINO ``INFERENCE_NUM_THREADS=2`` with the latency hint (one stream) in float32
   (:data:`OPENVINO_CONFIG`); BLAS limited to 2 threads with threadpoolctl for the roofs
   (:func:`fix_threads`).
3. Warm every engine: at least 5 runs each (plus one run per extra size for D1 cases, after
   which the Numba compilations triggered by those new sizes are counted).
4. At least 21 rounds. In each round every engine runs one block, in random order; all blocks
   have the same number of runs, as many as make about ``block_ms`` for the slowest engine and
   at least ``MIN_BLOCK_RUNS`` (see :func:`runs_per_block`), each run timed with
   ``perf_counter_ns`` and the garbage collector off; after every block the harness sleeps
   5-10 ms and then until the process's idle threads stop spinning (:func:`quiesce`):
   onnxruntime's spin for about 40 ms after a run on the development VM, and onnxjit's pool
   workers spin too; either would steal a core from the next engine's block.
   BENCHMARKING.md asks for a 5-10 ms pause after onnxruntime's blocks; that is too short here.
5. Per round: the median time per run of each engine, ratio = onnxjit / onnxruntime (and
   OpenVINO / onnxruntime for the anchor). Reported: the median ratio over rounds with a
   bootstrap 95 % interval, the median of the per-round medians of each engine, and a flag
   when onnxjit's interval is wider than 10 % of its ratio.

Roof fractions use figures measured in the same run (:func:`measure_roofs`): the copy bandwidth
of numpy copying a 256 MB float32 array (bytes read + bytes written per second) and numpy's
float32 GEMM rate on 2048^3. ``Case.bytes_moved / time`` is compared with the first,
``Case.flops / time`` with the second.

A case with ``Case.alternate`` (D1 ``alt/...``) is measured by :func:`measure_alternating`
instead: onnxjit and onnxruntime each against itself, two shapes alternating run after run
against each shape repeated, in the same interleaved rounds (OpenVINO is not measured there).
"""

from __future__ import annotations

import contextlib
import gc
import math
import random
import statistics
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from bench.workloads import Case

THREADS = 2
MIN_ROUNDS = 21
WARM_RUNS = 5
#: A result is flagged when its 95 % interval is wider than this fraction of the ratio.
WIDE_CI = 0.10


@dataclass(frozen=True)
class Target:
    """An issue's bound on a workload's ratio: ``ratio <= bound`` for the cases whose name
    ``applies`` to. For ``alt/...`` cases the ratio is alternating / repeated (onnxjit)."""

    issue: int
    workload: str
    bound: float
    applies: Callable[[str], bool]


def _every(name: str) -> bool:
    return True


def _is_alt(name: str) -> bool:
    return name.startswith("alt/")


#: Targets of issue 4 (per-kernel speed) and issue 41 (per-run overhead, alternating shapes).
TARGETS: list[Target] = [
    Target(4, "E1", 0.5, lambda name: not name.endswith("/4K")),
    Target(4, "E2", 1.0, _every),
    Target(4, "T1", 1.2, _every),
    Target(4, "C1", 1.5, lambda name: name.endswith("/b1") or "/b1/" in name),
    Target(4, "G1", 0.5, lambda name: not name.endswith("/b1")),
    Target(4, "M1", 1.5, lambda name: name.endswith("/b1")),
    Target(41, "O1", 1.2, lambda name: name == "relu_1x16"),
    Target(41, "O1", 0.6, lambda name: name.startswith("tiny_ops/")),
    Target(41, "G2", 1.0, lambda name: name in ("sk_scaler_logreg/b1", "rf_clf/b1")),
    Target(41, "T2", 1.0, _every),
    Target(41, "D1", 1.05, _is_alt),
]


def target_flags(workload: str, name: str, ratio: float | None) -> list[str]:
    """``target <= X missed (Yx, issue N)`` for every target the case's ratio misses."""
    if ratio is None:
        return []
    return [
        f"target <= {t.bound} missed ({ratio / t.bound:.2f}x, issue {t.issue})"
        for t in TARGETS
        if t.workload == workload and t.applies(name) and ratio > t.bound
    ]


# -- threads ---------------------------------------------------------------------------------
_THREAD_LIMITS: Any = None


def fix_threads(n: int = THREADS) -> dict[str, Any]:
    """Limit BLAS (threadpoolctl) and Numba to ``n`` threads for the rest of the process."""
    global _THREAD_LIMITS
    import numba
    from threadpoolctl import threadpool_info, threadpool_limits

    _THREAD_LIMITS = threadpool_limits(limits=n, user_api="blas")
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    return {
        "threads": n,
        "numba_threads": numba.get_num_threads(),
        "numba_threading_layer": numba.config.THREADING_LAYER,
        "blas": [
            {k: p.get(k) for k in ("internal_api", "version", "num_threads")}
            for p in threadpool_info()
            if p.get("user_api") == "blas"
        ],
    }


# -- roofs -----------------------------------------------------------------------------------
@dataclass
class Roofs:
    """Machine roofs measured in this run."""

    copy_gbps: float  # numpy copy of a 256 MB float32 array, (read + write) bytes per second / 1e9
    gemm_gflops: float  # numpy float32 2048^3 GEMM, 2*n^3 / seconds / 1e9


def _best_seconds(fn: Callable[[], Any], runs: int) -> float:
    """Fastest of ``runs`` calls: a roof is what the machine can do, noise only slows it."""
    best = math.inf
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        fn()
        best = min(best, time.perf_counter_ns() - t0)
    return best * 1e-9


def measure_roofs(runs: int = 9) -> Roofs:
    """Copy bandwidth and float32 GEMM rate with the current thread limits (best of ``runs``)."""
    n = (256 << 20) // 4
    src = np.ones(n, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    t_copy = _best_seconds(lambda: np.copyto(dst, src), runs)
    copy_gbps = 2 * src.nbytes / t_copy / 1e9
    k = 2048
    r = np.random.default_rng(0)
    a = r.standard_normal((k, k), dtype=np.float32)
    b = r.standard_normal((k, k), dtype=np.float32)
    c = np.empty((k, k), dtype=np.float32)
    np.matmul(a, b, out=c)
    t_gemm = _best_seconds(lambda: np.matmul(a, b, out=c), max(3, runs // 2))
    return Roofs(copy_gbps=copy_gbps, gemm_gflops=2 * k**3 / t_gemm / 1e9)


# -- compile counting --------------------------------------------------------------------------
class CompileCounter:
    """Counts Numba compilations (cache misses that run the compiler) and their seconds.

    Uses ``onnxjit.compile_count()`` when onnxjit provides it; Numba's ``numba:compile`` event
    is always counted too (it fires for every compiled specialisation, nested ones included,
    and not for those loaded from the on-disk cache). ``specialisations()`` counts every
    specialisation held by any live dispatcher (compiled or loaded from disk), so a new entry
    for a new input size shows even when the cache hid the compile.
    """

    def __init__(self) -> None:
        from numba.core import event

        self._event = event
        counter = self

        class _Listener(event.Listener):
            def on_start(self, ev: Any) -> None:
                counter._starts.append(time.perf_counter())

            def on_end(self, ev: Any) -> None:
                t0 = counter._starts.pop() if counter._starts else time.perf_counter()
                counter.events += 1
                if not counter._starts:  # count wall time of outermost compiles only
                    counter.seconds += time.perf_counter() - t0

        self._starts: list[float] = []
        self.events = 0
        self.seconds = 0.0
        self._listener = _Listener()
        event.register("numba:compile", self._listener)

    def close(self) -> None:
        self._event.unregister("numba:compile", self._listener)

    @staticmethod
    def onnxjit_count() -> int | None:
        import onnxjit

        fn = getattr(onnxjit, "compile_count", None)
        return int(fn()) if callable(fn) else None

    @staticmethod
    def specialisations() -> int:
        from numba.core.dispatcher import Dispatcher

        # type(), not isinstance(): gc.get_objects() includes weakref proxies (numba keeps some
        # to its function IR and code libraries), and isinstance() on a dead one raises
        # ReferenceError through Dispatcher's ABC metaclass.
        return sum(len(o.overloads) for o in gc.get_objects() if issubclass(type(o), Dispatcher))

    def snapshot(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "seconds": self.seconds,
            "onnxjit": self.onnxjit_count(),
            "specialisations": self.specialisations(),
        }

    @staticmethod
    def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for k in before:
            a, b = before[k], after[k]
            out[k] = None if a is None or b is None else b - a
        return out


_COUNTER: CompileCounter | None = None


def compile_counter() -> CompileCounter:
    global _COUNTER
    if _COUNTER is None:
        _COUNTER = CompileCounter()
    return _COUNTER


# -- sessions --------------------------------------------------------------------------------
# --level: graph optimisation level, set the same in both engines
LEVELS = ("disabled", "basic", "extended", "all")


def make_sessions(
    case: Case, threads: int = THREADS, level: str = "all"
) -> tuple[Any, Any, dict[str, float]]:
    """(onnxjit session, onnxruntime session, creation seconds of each), both at the graph
    optimisation ``level`` (one of LEVELS)."""
    import onnxruntime as ort

    import onnxjit

    name = {
        "disabled": "ORT_DISABLE_ALL",
        "basic": "ORT_ENABLE_BASIC",
        "extended": "ORT_ENABLE_EXTENDED",
        "all": "ORT_ENABLE_ALL",
    }[level]
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, name)
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    blob = case.model.SerializeToString()
    t0 = time.perf_counter()
    ort_sess = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
    t1 = time.perf_counter()
    jo = onnxjit.SessionOptions()
    jo.intra_op_num_threads = threads
    jo.graph_optimization_level = getattr(onnxjit.GraphOptimizationLevel, name)
    jit_sess = onnxjit.InferenceSession(case.model, jo)
    t2 = time.perf_counter()
    return jit_sess, ort_sess, {"ort_create_s": t1 - t0, "jit_create_s": t2 - t1}


#: Engine keys of the per-round figures (``Result.runs_per_block``, ``extra["per_round_ns"]``)
#: and the names they are reported under. onnxruntime is the reference of every ratio.
ENGINES = {"jit": "onnxjit", "ort": "onnxruntime", "ov": "openvino"}

#: OpenVINO's CPU plugin at the harness's thread count, for one request at a time (the latency
#: hint: one stream), computing in float32 as the model is written (on a CPU with bfloat16
#: units OpenVINO's default precision would be bfloat16, another computation than the other
#: two engines'). ``INFERENCE_NUM_THREADS`` is filled in by :func:`make_openvino`.
OPENVINO_CONFIG: dict[str, Any] = {
    "PERFORMANCE_HINT": "LATENCY",
    "INFERENCE_PRECISION_HINT": "f32",
}


class OpenVINOSession:
    """An OpenVINO compiled model behind onnxruntime's ``run(output_names, feeds)``: one reused
    infer request, outputs returned as numpy arrays (copies, as onnxruntime returns fresh ones)
    in the ONNX graph's output order."""

    def __init__(self, compiled: Any, output_names: Sequence[str]) -> None:
        self._request = compiled.create_infer_request()
        ports = {name: port for port in compiled.outputs for name in port.get_names()}
        missing = [n for n in output_names if n not in ports]
        if missing:
            raise RuntimeError(f"OpenVINO's compiled model has no output named {missing}")
        self._ports = [ports[n] for n in output_names]
        self._names = list(output_names)

    def run(self, output_names: Sequence[str] | None, feeds: dict[str, Any]) -> list[Any]:
        res = self._request.infer(feeds)
        names = self._names if output_names is None else list(output_names)
        return [res[self._ports[self._names.index(n)]] for n in names]


def make_openvino(case: Case, threads: int = THREADS) -> tuple[OpenVINOSession, float]:
    """(OpenVINO session of the case's model on the CPU, creation seconds). Raises ImportError
    when OpenVINO is not installed, and whatever OpenVINO raises when it cannot read or compile
    the model (an operator it does not implement, such as ai.onnx.ml's)."""
    import openvino

    t0 = time.perf_counter()
    core = openvino.Core()
    model = core.read_model(case.model.SerializeToString())
    config = dict(OPENVINO_CONFIG, INFERENCE_NUM_THREADS=threads)
    compiled = core.compile_model(model, "CPU", config)
    sess = OpenVINOSession(compiled, [o.name for o in case.model.graph.output])
    return sess, time.perf_counter() - t0


def try_openvino(
    case: Case, threads: int = THREADS
) -> tuple[OpenVINOSession | None, str | None, float | None]:
    """:func:`make_openvino` that does not raise: (session, None, creation seconds), or
    (None, why there is none, None)."""
    try:
        sess, seconds = make_openvino(case, threads)
    except Exception as exc:  # OpenVINO missing or not loading the model is a finding
        return None, _openvino_why(exc), None
    return sess, None, seconds


def _openvino_why(exc: BaseException) -> str:
    """Why OpenVINO did not load a model, in one line: OpenVINO's messages start with the C++
    file that raised and put the reason on a later line; that line (the unsupported operators,
    say) is the one worth reporting."""
    if isinstance(exc, ImportError):
        return "openvino is not installed (pip install openvino; the bench extra has it)"
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    # the ONNX frontend's summary: "-- No conversion rule found for operations: ..." and
    # "-- Conversion is failed for: ..."
    summary = [ln.removeprefix("-- ") for ln in lines if ln.startswith("-- ") and ":" in ln]
    summary = [ln for ln in summary if not ln.endswith("with a message:")]
    useful = [ln for ln in lines if not ln.startswith(("Exception from", "Check '"))]
    text = "; ".join(summary) or (useful or lines or [type(exc).__name__])[0]
    return f"does not load: {text[:300]}"


def compare_outputs(
    got: Sequence[Any], want: Sequence[Any], rtol: float, atol: float
) -> str | None:
    """None when every output matches (dtype, shape, values within tolerance), else why not."""
    if len(got) != len(want):
        return f"{len(got)} outputs, onnxruntime gives {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, dict):
            why = compare_maps(g, w, rtol, atol)
            if why:
                return f"output {i}: {why}"
            continue
        if isinstance(w, list):  # sequence outputs; ZipMap's: a list of {class: probability}
            if not isinstance(g, (list, tuple)):
                return f"output {i}: {type(g).__name__}, onnxruntime gives a list"
            if len(g) != len(w):
                return f"output {i}: {len(g)} elements, onnxruntime gives {len(w)}"
            for j, (gj, wj) in enumerate(zip(g, w)):
                if isinstance(wj, dict):
                    why = compare_maps(gj, wj, rtol, atol)
                else:
                    why = compare_outputs([gj], [wj], rtol, atol)
                    why = why and why.removeprefix("output 0: ")
                if why:
                    return f"output {i}[{j}]: {why}"
            continue
        g = np.asarray(g)
        w = np.asarray(w)
        if g.dtype != w.dtype:
            return f"output {i}: dtype {g.dtype}, onnxruntime gives {w.dtype}"
        if g.shape != w.shape:
            return f"output {i}: shape {g.shape}, onnxruntime gives {w.shape}"
        if g.dtype.kind in "fc":
            bad = ~np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
            if bad.any():
                err = np.abs(g.astype(np.float64) - w.astype(np.float64))
                return (
                    f"output {i}: {int(bad.sum())} of {g.size} values differ "
                    f"(max abs err {np.nanmax(err):.3g}, rtol {rtol}, atol {atol})"
                )
        elif not np.array_equal(g, w):
            return f"output {i}: {int((g != w).sum())} of {g.size} values differ"
    return None


def compare_maps(got: Any, want: dict[Any, Any], rtol: float, atol: float) -> str | None:
    """None when ``got`` is a map with ``want``'s keys and values within tolerance (a ZipMap
    row: class label -> probability), else why not."""
    if not isinstance(got, dict):
        return f"{type(got).__name__}, onnxruntime gives a map"
    if set(got) != set(want):
        return f"map keys {sorted(got, key=repr)!r}, onnxruntime gives {sorted(want, key=repr)!r}"
    keys = list(want)
    try:
        g = np.asarray([got[k] for k in keys], dtype=np.float64)
        w = np.asarray([want[k] for k in keys], dtype=np.float64)
    except (TypeError, ValueError):  # non-numeric values: compare exactly
        bad_keys = [k for k in keys if got[k] != want[k]]
        return f"map values differ at keys {bad_keys!r}" if bad_keys else None
    bad = ~np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
    if bad.any():
        k = keys[int(np.argmax(bad))]
        return (
            f"{int(bad.sum())} of {len(keys)} map values differ (key {k!r}: {got[k]!r}, "
            f"onnxruntime {want[k]!r}; rtol {rtol}, atol {atol})"
        )
    return None


# -- timing ----------------------------------------------------------------------------------
@contextlib.contextmanager
def _gc_off() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def quiesce(window: float = 0.004, limit: float = 0.25) -> float:
    """Sleep until this process's other threads stop using the CPU; return the seconds waited.

    onnxruntime's idle pool threads spin for about 40 ms after a run on the development VM
    (BENCHMARKING.md's 5-10 ms pause is too short there): a block of the other engine that
    starts meanwhile finds one core taken, which multiplied a parallel Softmax's time by six.
    The process's CPU time is sampled over ``window``-long sleeps (the kernel accounts other
    threads' time per 4 ms tick, hence the window) until two windows in a row use less than a
    quarter of a core, or ``limit`` seconds have passed.
    """
    t0 = time.perf_counter()
    quiet = 0
    while quiet < 2 and time.perf_counter() - t0 < limit:
        c0 = time.process_time()
        time.sleep(window)
        quiet = quiet + 1 if time.process_time() - c0 < window / 4 else 0
    return time.perf_counter() - t0


def time_block(run: Callable[[], Any], n: int) -> float:
    """Median nanoseconds per run over ``n`` runs, gc off."""
    times = [0] * n
    clock = time.perf_counter_ns
    with _gc_off():
        for i in range(n):
            t0 = clock()
            run()
            times[i] = clock() - t0
    return float(statistics.median(times))


def time_alternating(
    run_a: Callable[[], Any], run_b: Callable[[], Any], n: int
) -> tuple[float, float]:
    """Runs A, B, A, B, ... (``n`` of each), gc off: median nanoseconds of the A runs and of
    the B runs."""
    ta = [0] * n
    tb = [0] * n
    clock = time.perf_counter_ns
    with _gc_off():
        for i in range(n):
            t0 = clock()
            run_a()
            t1 = clock()
            run_b()
            ta[i] = t1 - t0
            tb[i] = clock() - t1
    return float(statistics.median(ta)), float(statistics.median(tb))


def bootstrap_ci(
    values: Sequence[float], n_boot: int = 4000, seed: int = 0
) -> tuple[float, float, float]:
    """Median of ``values`` and its bootstrap 95 % interval (percentile method)."""
    v = np.asarray(values, dtype=np.float64)
    med = float(np.median(v))
    if len(v) < 2:
        return med, med, med
    idx = np.random.default_rng(seed).integers(0, len(v), size=(n_boot, len(v)))
    meds = np.median(v[idx], axis=1)
    lo, hi = np.percentile(meds, [2.5, 97.5])
    return med, float(lo), float(hi)


@dataclass
class Result:
    """One case's figures (times in nanoseconds per run)."""

    workload: str
    case: str
    #: "ratio": onnxjit / onnxruntime. "alternating": onnxjit against itself, two shapes
    #: alternating over each repeated (jit_ns / ort_ns: each engine's alternating time per
    #: run; onnxruntime's own ratio in ``extra["ort_ratio"]``).
    kind: str = "ratio"
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    jit_ns: float | None = None
    ort_ns: float | None = None
    roof_kind: str | None = None  # "bw" (copy bandwidth) or "gemm"
    jit_roof: float | None = None
    ort_roof: float | None = None
    rounds: int = 0
    runs_per_block: dict[str, int] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    void: str | None = None
    error: str | None = None
    compiles: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    #: The other engines measured against onnxruntime in the same rounds, by name
    #: ("openvino"): ``ratio`` (its time / onnxruntime's, median over rounds), ``ci_low``,
    #: ``ci_high``, ``ns`` (median time per run); or ``why`` it has no ratio (not installed,
    #: does not load the model, outputs differ from onnxruntime's, skipped).
    anchors: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def anchor_ratio(self, name: str) -> float | None:
        """The ratio engine ``name`` / onnxruntime, None where it has none."""
        return self.anchors.get(name, {}).get("ratio")


# Runs per block, at the least: the median of three never takes the first run after the pause
# between blocks, which pays the machine's waking from idle (C2 at 112 pixels after 50 ms idle:
# onnxjit 2.2 -> 3.8 ms, onnxruntime 1.45 -> 3.0 on the development VM).
MIN_BLOCK_RUNS = 3


def _describe(exc: BaseException) -> str:
    """A case's error for the report: the exception's first line and where it was raised
    (the innermost frame: an error from inside a library names its line there)."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {first}{where}"


def runs_per_block(times_ns: Sequence[float], block_ms: float) -> int:
    """Runs in each engine's block, given every engine's time per run: as many as take
    ``block_ms`` at the slowest engine's time per run, at least :data:`MIN_BLOCK_RUNS`. The
    same count for every engine: with blocks of equal length in time instead, the slower
    engine's block had fewer runs and its median leaned more on that first run (C2: 2 runs
    against 4, C1: 1 against 2 at 5 ms; see bench/README.md for the ratios both ways)."""
    slowest = max([*times_ns, 1.0])
    return max(MIN_BLOCK_RUNS, math.ceil(block_ms * 1e6 / slowest))


def measure_case(
    case: Case,
    roofs: Roofs | None = None,
    rounds: int = MIN_ROUNDS,
    block_ms: float = 5.0,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
    sessions: Sequence[Any] | None = None,
    level: str = "all",
    openvino: bool = True,
) -> Result:
    """Run the ratio protocol on one case (see the module docstring).

    ``sessions`` = (onnxjit session, onnxruntime session) built by :func:`make_sessions` reuses
    them, optionally with a third element: the :class:`OpenVINOSession` of
    :func:`make_openvino`, or the reason there is none (a string); by default they are built
    here, at graph optimisation ``level`` (and their creation time recorded). OpenVINO has no
    such level: it always optimises. ``openvino=False`` leaves OpenVINO out. A case with
    ``alternate`` goes to :func:`measure_alternating`.
    """
    if case.alternate is not None:
        return measure_alternating(case, rounds, block_ms, seed, log, sessions, level, openvino)
    res = Result(case.workload, case.name)
    counter = compile_counter()
    rounds = max(MIN_ROUNDS, rounds)
    try:
        before = counter.snapshot()
        if sessions is None:
            jit, ort_sess, extra = make_sessions(case, level=level)
            res.extra.update(extra)
        else:
            jit, ort_sess = sessions[:2]
        want = ort_sess.run(None, case.feeds)
        t0 = time.perf_counter()
        got = jit.run(None, case.feeds)
        res.extra["jit_first_run_s"] = time.perf_counter() - t0
    except Exception as exc:  # report and go on with the next case
        res.error = _describe(exc)
        res.flags.append("error")
        return res
    why = compare_outputs(got, want, case.rtol, case.atol)
    if why:
        res.void = why
        res.flags.append("VOID: outputs differ")
        return res
    del got
    engines: dict[str, Any] = {"jit": jit, "ort": ort_sess}
    ov = _anchor_openvino(case, res, openvino, sessions, want)
    if ov is not None:
        engines["ov"] = ov
    del want

    def runner(sess: Any) -> Callable[[], Any]:
        return lambda: sess.run(None, case.feeds)

    runs = {e: runner(s) for e, s in engines.items()}
    # warm-up: at least WARM_RUNS each; time per run estimated from the last ones
    est = {e: time_block(run, WARM_RUNS) for e, run in runs.items()}
    res.compiles["warm_up"] = counter.delta(before, counter.snapshot())

    if case.sizes:  # D1: new sizes after warm-up must compile nothing
        before = counter.snapshot()
        mismatches = []
        for k, feeds in enumerate(case.sizes):
            why = compare_outputs(
                jit.run(None, feeds), ort_sess.run(None, feeds), case.rtol, case.atol
            )
            if why:
                mismatches.append(f"size {k}: {why}")
        after = counter.delta(before, counter.snapshot())
        res.compiles["new_sizes"] = after
        res.compiles["n_sizes"] = len(case.sizes)
        n_new = after["onnxjit"] if after["onnxjit"] is not None else after["events"]
        res.flags.append(f"{n_new} compiles / {len(case.sizes)} new sizes")
        if after["specialisations"]:
            res.flags.append(f"{after['specialisations']} new specialisations")
        if mismatches:
            res.void = "; ".join(mismatches)
            res.flags.append("VOID: outputs differ on a new size")
            return res

    n = runs_per_block(list(est.values()), block_ms)
    res.runs_per_block = {e: n for e in engines}
    rnd = random.Random(seed)
    before_timing = counter.snapshot()
    per_round: dict[str, list[float]] = {e: [] for e in engines}
    for r in range(rounds):
        order = list(engines)
        rnd.shuffle(order)
        for eng in order:
            per_round[eng].append(time_block(runs[eng], n))
            # Every engine's idle workers spin after their last parallel region (onnxruntime's
            # pool, onnxjit's pool workers, OpenVINO's): wait until they sleep, so that no
            # engine's block starts with another's threads holding a core.
            time.sleep(rnd.uniform(0.005, 0.010))
            quiesce()
        if log and (r + 1) % 7 == 0:
            log(f"    round {r + 1}/{rounds}")
    res.rounds = rounds
    during = counter.delta(before_timing, counter.snapshot())
    res.compiles["timing"] = during
    if during["events"]:
        res.flags.append(f"{during['events']} compiles while timing")
    ratios = [j / o for j, o in zip(per_round["jit"], per_round["ort"])]
    res.ratio, res.ci_low, res.ci_high = bootstrap_ci(ratios, seed=seed)
    res.jit_ns = float(np.median(per_round["jit"]))
    res.ort_ns = float(np.median(per_round["ort"]))
    if "ov" in per_round:
        ov_ratio = bootstrap_ci(
            [v / o for v, o in zip(per_round["ov"], per_round["ort"])], seed=seed
        )
        res.anchors[ENGINES["ov"]].update(
            dict(
                zip(("ratio", "ci_low", "ci_high"), ov_ratio), ns=float(np.median(per_round["ov"]))
            )
        )
    res.extra["per_round_ns"] = per_round
    if (res.ci_high - res.ci_low) > WIDE_CI * res.ratio:
        res.flags.append("CI > 10 %")
    if roofs is not None:
        if case.bytes_moved:
            res.roof_kind = "bw"
            peak = roofs.copy_gbps * 1e9
            res.jit_roof = case.bytes_moved / (res.jit_ns * 1e-9) / peak
            res.ort_roof = case.bytes_moved / (res.ort_ns * 1e-9) / peak
        elif case.flops:
            res.roof_kind = "gemm"
            peak = roofs.gemm_gflops * 1e9
            res.jit_roof = case.flops / (res.jit_ns * 1e-9) / peak
            res.ort_roof = case.flops / (res.ort_ns * 1e-9) / peak
    res.flags += target_flags(case.workload, case.name, res.ratio)
    return res


def print_case_ratios(cases: Iterable[Case], roofs: Roofs, width: int = 16) -> None:
    """Measure each case (:func:`measure_case`) and print one line for it: the median ratio
    onnxjit / onnxruntime with its interval and both medians (and onnxjit's GFLOP/s where the
    case counts its floating-point operations), or why there is no ratio. The report of the
    one-node sweeps, ``python -m bench.ops`` and ``python -m bench.layers``."""
    for case in cases:
        r = measure_case(case, roofs)
        if r.ratio is None:
            print(f"{case.name:{width}s} no ratio: {r.error or r.void}", flush=True)
            continue
        rate = f" ({case.flops / r.jit_ns:5.1f} GFLOP/s)" if case.flops else ""
        print(
            f"{case.name:{width}s} {r.ratio:5.2f} [{r.ci_low:.2f}, {r.ci_high:.2f}]  "
            f"onnxjit {r.jit_ns / 1e3:9.1f} us{rate}  onnxruntime {r.ort_ns / 1e3:9.1f} us",
            flush=True,
        )


def _anchor_openvino(
    case: Case, res: Result, wanted: bool, sessions: Sequence[Any] | None, want: Sequence[Any]
) -> OpenVINOSession | None:
    """The OpenVINO session to time beside the other two, or None with the reason in
    ``res.anchors["openvino"]["why"]``: left out by ``wanted=False``, not installed, a model
    it does not load, an error in its first run, or outputs that differ from onnxruntime's
    ``want`` beyond the case's tolerance. The session comes from ``sessions[2]`` when given
    (a string there is the reason there is none), else it is built here."""
    name = ENGINES["ov"]
    if not wanted:
        res.anchors[name] = {"why": "skipped (--no-openvino)"}
        return None
    given = sessions[2] if sessions is not None and len(sessions) > 2 else None
    if isinstance(given, str):
        res.anchors[name] = {"why": given}
        return None
    if given is None:
        given, why, res.extra["ov_create_s"] = try_openvino(case)
        if given is None:
            res.anchors[name] = {"why": why}
            return None
    try:
        got = given.run(None, case.feeds)
    except Exception as exc:
        res.anchors[name] = {"why": f"run fails: {_describe(exc)}"}
        return None
    why = compare_outputs(got, want, case.rtol, case.atol)
    if why:
        res.anchors[name] = {"why": f"outputs differ: {why}"}
        return None
    res.anchors[name] = {}
    return given


def measure_alternating(
    case: Case,
    rounds: int = MIN_ROUNDS,
    block_ms: float = 5.0,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
    sessions: Sequence[Any] | None = None,
    level: str = "all",
    openvino: bool = True,
) -> Result:
    """Two input shapes alternating against each repeated, each engine against itself.

    Shape A is ``case.feeds``, shape B ``case.alternate``. Both engines' outputs are checked
    against each other on both shapes, then each engine warms on A, B and A, B alternating.
    Each round runs six blocks in random order, for each engine: A, B, A, B, ... (``n`` runs
    of each shape), A repeated (``n`` runs), B repeated (``n`` runs), with the pause and
    :func:`quiesce` of :func:`measure_case` after every block; ``n`` fills ``block_ms`` at the
    slowest of the four (engine, shape) times per run, at least :data:`MIN_BLOCK_RUNS`. Per
    round and engine: alternating = mean of the medians of its A runs and of its B runs in
    the alternating block, repeated = mean of the two repeated blocks' medians, ratio =
    alternating / repeated. ``Result.ratio`` is onnxjit's (median over rounds, bootstrap
    interval); onnxruntime's is in ``extra["ort_ratio"]`` and in the first flag;
    ``jit_ns``/``ort_ns`` are the engines' alternating times per run. OpenVINO is not
    measured (the alternating ratio is about onnxjit's per-shape cost, which onnxruntime's
    own ratio already puts in context); ``sessions`` may carry it as a third element, unused.
    """
    res = Result(case.workload, case.name, kind="alternating")
    if openvino:
        res.anchors[ENGINES["ov"]] = {"why": "not measured in alternating-shape cases"}
    counter = compile_counter()
    rounds = max(MIN_ROUNDS, rounds)
    assert case.alternate is not None
    shapes = {"A": case.feeds, "B": case.alternate}
    res.extra["shapes"] = {
        k: {n: list(np.shape(v)) for n, v in f.items()} for k, f in shapes.items()
    }
    try:
        before = counter.snapshot()
        if sessions is None:
            jit, ort_sess, extra = make_sessions(case, level=level)
            res.extra.update(extra)
        else:
            jit, ort_sess = sessions[:2]
        outs = {k: (jit.run(None, f), ort_sess.run(None, f)) for k, f in shapes.items()}
    except Exception as exc:  # report and go on with the next case
        res.error = _describe(exc)
        res.flags.append("error")
        return res
    for k, (got, want) in outs.items():
        why = compare_outputs(got, want, case.rtol, case.atol)
        if why:
            res.void = f"shape {k}: {why}"
            res.flags.append("VOID: outputs differ")
            return res
    del outs

    engines = {"jit": jit, "ort": ort_sess}

    def runner(sess: Any, feeds: dict[str, np.ndarray]) -> Callable[[], Any]:
        return lambda: sess.run(None, feeds)

    run = {(e, k): runner(s, f) for e, s in engines.items() for k, f in shapes.items()}
    est: dict[str, list[float]] = {"jit": [], "ort": []}
    for e in engines:
        for k in shapes:
            est[e].append(time_block(run[e, k], WARM_RUNS))
        time_alternating(run[e, "A"], run[e, "B"], WARM_RUNS)
    res.compiles["warm_up"] = counter.delta(before, counter.snapshot())
    n = runs_per_block([max(est["jit"]), max(est["ort"])], block_ms)
    res.runs_per_block = {"jit": n, "ort": n}

    rnd = random.Random(seed)
    before_timing = counter.snapshot()
    per_round: dict[str, dict[str, list[float]]] = {
        e: {"alt_A": [], "alt_B": [], "rep_A": [], "rep_B": []} for e in engines
    }
    for r in range(rounds):
        blocks = [(e, p) for e in engines for p in ("alt", "A", "B")]
        rnd.shuffle(blocks)
        for e, p in blocks:
            if p == "alt":
                ta, tb = time_alternating(run[e, "A"], run[e, "B"], n)
                per_round[e]["alt_A"].append(ta)
                per_round[e]["alt_B"].append(tb)
            else:
                per_round[e][f"rep_{p}"].append(time_block(run[e, p], n))
            time.sleep(rnd.uniform(0.005, 0.010))
            quiesce()
        if log and (r + 1) % 7 == 0:
            log(f"    round {r + 1}/{rounds}")
    res.rounds = rounds
    during = counter.delta(before_timing, counter.snapshot())
    res.compiles["timing"] = during

    def alt_rep(e: str) -> tuple[np.ndarray, np.ndarray]:
        t = {k: np.asarray(v) for k, v in per_round[e].items()}
        return (t["alt_A"] + t["alt_B"]) / 2, (t["rep_A"] + t["rep_B"]) / 2

    jit_alt, jit_rep = alt_rep("jit")
    ort_alt, ort_rep = alt_rep("ort")
    res.ratio, res.ci_low, res.ci_high = bootstrap_ci(list(jit_alt / jit_rep), seed=seed)
    ort_ratio = bootstrap_ci(list(ort_alt / ort_rep), seed=seed)
    res.jit_ns = float(np.median(jit_alt))
    res.ort_ns = float(np.median(ort_alt))
    res.extra.update(
        {
            "ort_ratio": list(ort_ratio),
            "jit_repeated_ns": float(np.median(jit_rep)),
            "ort_repeated_ns": float(np.median(ort_rep)),
            # onnxjit / onnxruntime with both alternating (median over rounds, interval)
            "jit_over_ort_alternating": list(bootstrap_ci(list(jit_alt / ort_alt), seed=seed)),
            "medians_ns": {
                e: {k: float(np.median(v)) for k, v in d.items()} for e, d in per_round.items()
            },
            "per_round_ns": per_round,
        }
    )
    res.flags.append(
        "ratio: onnxjit's time per run with A, B alternating over A and B repeated "
        f"(onnxruntime's: {ort_ratio[0]:.2f} [{ort_ratio[1]:.2f}, {ort_ratio[2]:.2f}]); "
        "medians: alternating"
    )
    if during["events"]:
        res.flags.append(f"{during['events']} compiles while timing")
    if (res.ci_high - res.ci_low) > WIDE_CI * res.ratio:
        res.flags.append("CI > 10 %")
    res.flags += target_flags(case.workload, case.name, res.ratio)
    return res


def geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return None
    return float(math.exp(sum(math.log(v) for v in vals) / len(vals)))


def summary(results: Sequence[Result]) -> tuple[dict[str, float], float | None]:
    """Per-workload geometric mean of case ratios onnxjit / onnxruntime (``alt/...`` cases,
    whose ratio is onnxjit against itself, left out), and the geometric mean of those."""
    per: dict[str, list[float]] = {}
    for r in results:
        if r.ratio is not None and r.kind == "ratio":  # not the alternating/repeated ones
            per.setdefault(r.workload, []).append(r.ratio)
    means = {w: g for w, v in per.items() if (g := geomean(v)) is not None}
    return means, geomean(list(means.values()))


def anchor_summary(results: Sequence[Result], name: str) -> dict[str, float]:
    """Per-workload geometric mean of engine ``name``'s ratios to onnxruntime, over the cases
    where it has one (a workload where it ran on no case is absent)."""
    per: dict[str, list[float]] = {}
    for r in results:
        if (v := r.anchor_ratio(name)) is not None:
            per.setdefault(r.workload, []).append(v)
    return {w: g for w, v in per.items() if (g := geomean(v)) is not None}
