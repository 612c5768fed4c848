"""Cold start (shared/BENCHMARKING.md): fresh subprocesses, empty and warm kernel cache.

For one case, each engine runs in new Python processes: import time, session creation, first
run, second run, peak resident memory (``VmHWM``, else ``resource.getrusage``), and for
onnxjit the Numba compilations and their seconds (``onnxjit.compile_count()``,
``compile_seconds()``) and the kernels loaded from the cache (``stats()``). Each figure is
the median of ``repeats`` processes: onnxjit with an empty ``ONNXJIT_CACHE_DIR`` (a new empty
folder each time: everything compiles), onnxjit with a warm one (kernels load from disk), and
onnxruntime. "ready" is session creation plus the first run, the wait a user sees after import.
Python's bytecode is written before the measured processes start, as after an install.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bench.workloads import Case

_CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
engine, model_path, feeds_path = sys.argv[1:4]
if engine == "onnxjit":
    import onnxjit as rt
else:
    import onnxruntime as rt
t_import = time.perf_counter() - t0
import numpy as np
feeds = dict(np.load(feeds_path))
t0 = time.perf_counter()
if engine == "onnxjit":
    so = rt.SessionOptions()
    so.intra_op_num_threads = 2
    sess = rt.InferenceSession(model_path, so)
else:
    so = rt.SessionOptions()
    so.intra_op_num_threads = 2
    so.inter_op_num_threads = 1
    sess = rt.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
t_create = time.perf_counter() - t0
t0 = time.perf_counter()
sess.run(None, feeds)
t_first = time.perf_counter() - t0
t0 = time.perf_counter()
sess.run(None, feeds)
t_second = time.perf_counter() - t0
# VmHWM belongs to this process image; ru_maxrss would include the parent's peak (fork)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
try:
    with open("/proc/self/status") as f:
        peak = next(int(ln.split()[1]) / 1024 for ln in f if ln.startswith("VmHWM:"))
except (OSError, StopIteration):
    pass
out = {"import_s": t_import, "create_s": t_create, "first_run_s": t_first,
       "second_run_s": t_second, "peak_rss_mb": peak}
if engine == "onnxjit":
    out["compiles"] = getattr(rt, "compile_count", lambda: None)()
    out["compile_s"] = getattr(rt, "compile_seconds", lambda: None)()
    out["loaded"] = sess.stats().get("kernels_loaded") if hasattr(sess, "stats") else None
print("COLD " + json.dumps(out))
"""


@dataclass
class ColdResult:
    workload: str
    case: str
    engine: str
    cache: str  # "empty", "warm" or "-" (onnxruntime)
    figures: dict[str, Any]
    error: str | None = None


def _child(engine: str, model: Path, feeds: Path, env: dict[str, str], timeout: float) -> Any:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, engine, str(model), str(feeds)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("COLD "):
            return json.loads(line[5:]), None
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return {}, f"exit {proc.returncode}: {tail[0]}"


def measure_cold(case: Case, repeats: int = 5, timeout: float = 900.0) -> list[ColdResult]:
    """Empty-cache and warm-cache onnxjit, and onnxruntime, each the median of ``repeats``
    fresh processes."""
    out = []
    with tempfile.TemporaryDirectory(prefix="onnxjit-cold-") as tmp:
        model = Path(tmp) / "model.onnx"
        feeds = Path(tmp) / "feeds.npz"
        onnx.save(case.model, str(model))
        np.savez(feeds, **case.feeds)
        env = dict(os.environ)
        env["ONNXJIT_NUM_THREADS"] = "2"
        env["ONNXJIT_PROGRESS"] = "off"
        # Measured as installed: pip writes every module's bytecode at install time, and Python
        # writes it on first import of an editable install. A PYTHONDONTWRITEBYTECODE=1 in
        # the caller's environment would compile onnxjit's ~100 modules from source in every
        # process (0.4 s of import on the Zen 3 bench machine), which no user's install does;
        # one priming import writes the bytecode before the measured processes start.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run(
            [sys.executable, "-c", "import onnxjit, onnxruntime"],
            env=env,
            check=False,
            timeout=timeout,
        )
        warm = Path(tmp) / "cache-warm"
        plans = [
            ("onnxjit", "empty", [Path(tmp) / f"cache-empty-{i}" for i in range(repeats)]),
            ("onnxjit", "warm", [warm] * (repeats + 1)),  # the first fills the cache
            ("onnxruntime", "-", [warm] * repeats),
        ]
        for engine, cache, dirs in plans:
            runs, err = [], None
            for i, d in enumerate(dirs):
                env["ONNXJIT_CACHE_DIR"] = str(d)
                try:
                    figs, err = _child(engine, model, feeds, env, timeout)
                except subprocess.TimeoutExpired:
                    figs, err = {}, f"timed out after {timeout:.0f} s"
                if err:
                    break
                if not (cache == "warm" and i == 0):
                    runs.append(figs)
            out.append(ColdResult(case.workload, case.name, engine, cache, _median(runs), err))
    return out


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    if not runs:
        return {}
    merged: dict[str, Any] = {"processes": len(runs)}
    for key in runs[0]:
        vals = [r[key] for r in runs if r.get(key) is not None]
        merged[key] = float(np.median(vals)) if vals else None
    if merged.get("create_s") is not None:
        merged["ready_s"] = float(np.median([r["create_s"] + r["first_run_s"] for r in runs]))
    return merged


def markdown(results: list[ColdResult]) -> str:
    def f(v: Any, fmt: str = "{:.2f}") -> str:
        return "-" if v is None else fmt.format(v)

    lines = [
        "| workload | case | engine | kernel cache | processes | import s | session s "
        "| first run s | ready s | second run s | compiled | loaded | compile s | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        g = r.figures
        cells = [
            f(g.get("processes"), "{:.0f}"),
            f(g.get("import_s")),
            f(g.get("create_s")),
            f(g.get("first_run_s")),
            f(g.get("ready_s")),
            f(g.get("second_run_s"), "{:.4f}"),
            f(g.get("compiles"), "{:.0f}"),
            f(g.get("loaded"), "{:.0f}"),
            f(g.get("compile_s")),
            f(g.get("peak_rss_mb"), "{:.0f}"),
        ]
        if r.error:
            cells = [r.error.replace("|", "/")] + ["-"] * 9
        lines.append(f"| {r.workload} | {r.case} | {r.engine} | {r.cache} | " + " | ".join(cells))
        lines[-1] += " |"
    return "\n".join(lines) + "\n"
