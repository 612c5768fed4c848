"""``python -m bench``: run the workloads through the ratio harness and write a markdown table.

    python -m bench                      # every workload, full sizes
    python -m bench --quick              # small subset (CI smoke run, a few minutes)
    python -m bench --only E1,M1 --out bench/results.md --json
    python -m bench --quick --only M1 --cold   # also cold start (first case of each workload)

Columns: workload, case, ratio onnxjit/onnxruntime (median, 95 % bootstrap interval), ratio
openvino/onnxruntime measured in the same rounds (``-`` with a numbered note where OpenVINO is
not installed, does not load the model or disagrees with onnxruntime; ``--no-openvino`` leaves
it out), onnxjit median, onnxruntime median, roof fraction (bandwidth or GEMM, onnxjit then
onnxruntime), flags.
D1's ``alt/...`` rows are the exception: their ratio ("alt/rep") is onnxjit's time per run with
two shapes alternating over its time with each repeated (see the note under the table).
The last line is the geometric mean of the per-workload geometric means (``alt/...`` rows left
out).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench import harness
from bench.workloads import get_cases, workload_ids


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def fmt_ns(ns: float | None) -> str:
    if ns is None:
        return "-"
    if ns < 1e3:
        return f"{ns:.0f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.1f} µs"
    if ns < 1e9:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e9:.2f} s"


def fmt_ratio(r: harness.Result) -> str:
    if r.ratio is None:
        return "-"
    prefix = "alt/rep " if r.kind == "alternating" else ""
    return f"{prefix}{r.ratio:.2f} [{r.ci_low:.2f}, {r.ci_high:.2f}]"


ALT_NOTE = (
    "Rows `alt/...` (D1): shapes A and B (named in the case) run A, B, A, B, ... against A "
    "repeated and B repeated, interleaved in rounds; the ratio marked alt/rep is onnxjit's time "
    "per run alternating over the mean of its repeated-A and repeated-B times (1.00: switching "
    "shapes costs nothing), not a ratio against onnxruntime, whose own alt/rep is in the flags; "
    "the median columns are each engine's alternating time per run. Left out of the geometric "
    "means.  "
)


def fmt_anchor(r: harness.Result, name: str, notes: dict[str, int]) -> str:
    """Engine ``name``'s ratio to onnxruntime, or ``- [k]`` with ``k`` the number of the note
    that says why it has none (``notes`` maps reasons to numbers, filled here)."""
    a = r.anchors.get(name)
    if a is None or r.ratio is None:  # not asked for, or no onnxjit ratio to stand beside
        return "-"
    if a.get("ratio") is not None:
        return f"{a['ratio']:.2f} [{a['ci_low']:.2f}, {a['ci_high']:.2f}]"
    k = notes.setdefault(a.get("why", "?"), len(notes) + 1)
    return f"- [{k}]"


def fmt_roof(r: harness.Result) -> str:
    if r.roof_kind is None or r.jit_roof is None:
        return "-"
    return f"{r.roof_kind} {100 * r.jit_roof:.0f} % (ort {100 * r.ort_roof:.0f} %)"


def _uptime() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def _load1(loadavg: str) -> float:
    """The 1-minute figure of a /proc/loadavg excerpt (0 when unknown)."""
    try:
        return float(loadavg.split()[0])
    except (ValueError, IndexError):
        return 0.0


def _git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def environment() -> dict[str, Any]:
    import numba
    import numpy
    import onnxruntime

    import onnxjit

    try:
        import openvino

        ov_version = openvino.__version__
    except ImportError:
        ov_version = None

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "onnxjit": f"{onnxjit.__version__} ({_git_commit()})",
        "onnxruntime": onnxruntime.__version__,
        "openvino": ov_version,
        "numba": numba.__version__,
        "numpy": numpy.__version__,
    }


def markdown(
    results: Sequence[harness.Result],
    env: dict[str, Any],
    roofs: harness.Roofs,
    threads: dict[str, Any],
    command: str,
    load: tuple[str, str],
    missing: dict[str, str],
    busy_cores: int = 0,
) -> str:
    """The results table with its header (command, machine, versions, roofs, load) and the
    geometric means. ``busy_cores``: spinning processes the run kept beside the engines
    (``--busy``); the load warning counts only the load beyond them."""
    means, overall = harness.summary(results)
    lines = [
        f"Command: `{command}`  ",
        f"{env['date']}; {env['cpu']}, {env['cores']} cores; load average (1, 5, 15 min) "
        f"{load[0]} at start, {load[1]} at end  ",
        f"onnxjit {env['onnxjit']}, onnxruntime {env['onnxruntime']}, "
        f"openvino {env.get('openvino') or 'not installed'}, numba {env['numba']}, "
        f"numpy {env['numpy']}, Python {env['python']}; {threads['threads']} threads for every "
        f"engine and BLAS  ",
        f"Roofs measured in this run: copy {roofs.copy_gbps:.1f} GB/s (read + write, numpy "
        f"copy of 256 MB), float32 GEMM {roofs.gemm_gflops:.0f} GFLOP/s (numpy 2048^3)  ",
    ]
    if busy_cores:
        lines.append(
            f"**{busy_cores} core(s) kept busy** by as many spinning processes for the whole run "
            "(`--busy`): the loaded-machine figures of issue 43.  "
        )
    busy = max(_load1(load[0]), _load1(load[1])) - busy_cores
    if busy > (env["cores"] or 1):
        lines.append(
            f"**Warning: load average {busy:.1f} on {env['cores']} cores: other processes "
            "competed for the cores, so times, ratios and roofs are contention-dominated; "
            "rerun on a quiet machine before quoting them.**  "
        )
    lines += [
        "",
        "| workload | case | ratio onnxjit/ort (median, 95 % CI) | openvino/ort "
        "| onnxjit median | onnxruntime median | roof fraction | flags |",
        "|---|---|---|---|---|---|---|---|",
    ]
    notes: dict[str, int] = {}
    for r in results:
        flags = list(r.flags)
        if r.error:
            flags.append(r.error)
        if r.void:
            flags.append(r.void)
        lines.append(
            f"| {r.workload} | {r.case} | {fmt_ratio(r)} | {fmt_anchor(r, 'openvino', notes)} "
            f"| {fmt_ns(r.jit_ns)} | "
            f"{fmt_ns(r.ort_ns)} | {fmt_roof(r)} | {'; '.join(flags).replace('|', '/')} |"
        )
    for w, why in missing.items():
        lines.append(f"| {w} | - | - | - | - | - | - | not run: {why.replace('|', '/')} |")
    per = ", ".join(f"{w} {g:.2f}" for w, g in means.items())
    lines.append("")
    for why, k in notes.items():
        lines.append(f"[{k}] openvino: {why}  ")
    if any(r.kind == "alternating" for r in results):
        lines.append(ALT_NOTE)
    lines.append(f"Per-workload geometric means: {per or '-'}  ")
    ov_means = harness.anchor_summary(results, "openvino")
    if ov_means:
        ov_per = ", ".join(f"{w} {g:.2f}" for w, g in ov_means.items())
        lines.append(
            f"Per-workload geometric means of openvino/ort (cases where it ran): {ov_per}  "
        )
    lines.append(
        "**Geometric mean of per-workload geometric means: "
        + (f"{overall:.2f}**" if overall is not None else "-**")
    )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small subset of every workload")
    ap.add_argument("--only", default="", help="comma-separated workload ids, e.g. E1,M1")
    ap.add_argument("--out", default="bench/results.md", help="markdown table path")
    ap.add_argument(
        "--json",
        nargs="?",
        const="",
        default=None,
        help="also write the raw results as JSON (default path: --out with .json)",
    )
    ap.add_argument("--rounds", type=int, default=harness.MIN_ROUNDS, help="rounds (>= 21)")
    ap.add_argument("--block-ms", type=float, default=5.0, help="minimum block length")
    ap.add_argument("--cases", default="", help="only cases whose name contains this")
    ap.add_argument(
        "--cold",
        action="store_true",
        help="also measure cold start (fresh processes, empty then warm kernel cache) for the "
        "first case of each workload",
    )
    ap.add_argument(
        "--cold-repeats", type=int, default=5, help="fresh processes per cold figure (5)"
    )
    ap.add_argument("--no-ratio", action="store_true", help="skip the ratio runs (with --cold)")
    ap.add_argument(
        "--no-openvino",
        action="store_true",
        help="do not time OpenVINO beside the other two engines (it is timed by default where "
        "it is installed and loads the model)",
    )
    ap.add_argument(
        "--level",
        choices=harness.LEVELS,
        default="all",
        help="graph optimisation level of both engines (default all, as onnxruntime's)",
    )
    ap.add_argument(
        "--busy",
        type=int,
        default=0,
        metavar="N",
        help="keep N cores busy with spinning processes during the run (a shared or "
        "throttled machine); the table says so",
    )
    args = ap.parse_args(argv)
    if args.busy < 0:
        ap.error(f"--busy takes a count of cores, got {args.busy}")

    ids = [w.strip().upper() for w in args.only.split(",") if w.strip()] or workload_ids()
    unknown = [w for w in ids if w not in workload_ids()]
    if unknown:
        ap.error(f"unknown workload(s) {unknown}; choose from {workload_ids()}")
    command = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    with spinners(args.busy):
        return _run(args, ids, command)


@contextlib.contextmanager
def spinners(n: int) -> Iterator[list[subprocess.Popen]]:
    """``n`` processes (yielded) that spin on a core each until the block ends, also on an
    error or an interrupt."""
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(n)
    ]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def _run(args: argparse.Namespace, ids: list[str], command: str) -> int:
    load_start = _uptime()
    threads = harness.fix_threads(harness.THREADS)
    env = environment()
    _log(f"measuring roofs ({threads['threads']} threads) ...")
    roofs = harness.measure_roofs()
    _log(f"  copy {roofs.copy_gbps:.1f} GB/s, GEMM {roofs.gemm_gflops:.0f} GFLOP/s")
    results: list[harness.Result] = []
    cold_results: list[Any] = []
    missing: dict[str, str] = {}
    t_start = time.perf_counter()
    for w in ids:
        try:
            cases = get_cases(w, args.quick)
        except ImportError as exc:
            missing[w] = f"workload module not available ({exc})"
            _log(f"{w}: skipped, {missing[w]}")
            continue
        except Exception as exc:
            missing[w] = f"building the cases failed: {type(exc).__name__}: {exc}"
            _log(f"{w}: {missing[w]}")
            continue
        if args.cases:
            cases = [c for c in cases if args.cases in c.name]
        if args.cold and cases:
            from bench import cold

            _log(f"{w} {cases[0].name}: cold start ...")
            cold_results.extend(cold.measure_cold(cases[0], repeats=args.cold_repeats))
        if args.no_ratio:
            cases = []
        while cases:
            case = cases.pop(0)
            _log(f"{w} {case.name} ...")
            t0 = time.perf_counter()
            res = harness.measure_case(
                case,
                roofs,
                rounds=args.rounds,
                block_ms=args.block_ms,
                level=args.level,
                openvino=not args.no_openvino,
            )
            res.extra["wall_s"] = time.perf_counter() - t0
            results.append(res)
            ov = res.anchors.get("openvino", {})
            ov_text = ""
            if ov.get("ratio") is not None:
                ov_text = f"  openvino/ort {ov['ratio']:.2f}"
            elif ov.get("why"):
                ov_text = f"  (openvino: {ov['why']})"
            _log(
                f"  ratio {fmt_ratio(res)}{ov_text}  jit {fmt_ns(res.jit_ns)}"
                f"  ort {fmt_ns(res.ort_ns)}"
                f"  {'; '.join(res.flags)} {res.error or ''}{res.void or ''}"
                f"  ({res.extra['wall_s']:.1f} s)"
            )
            del case
            gc.collect()
            # rewrite the table after every case so that an interrupted run keeps its figures
            partial = markdown(
                results, env, roofs, threads, command, (load_start, _uptime()), missing, args.busy
            )
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(partial + "\n(partial: the run is still going)\n")
    load_end = _uptime()
    table = markdown(
        results, env, roofs, threads, command, (load_start, load_end), missing, args.busy
    )
    if cold_results:
        from bench import cold

        table += "\nCold start (medians over fresh processes; onnxjit with an empty, then a "
        table += "warm kernel cache; ready = session creation + first run):\n\n"
        table += cold.markdown(cold_results)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table)
    _log(f"wrote {out} ({time.perf_counter() - t_start:.0f} s)")
    if args.json is not None:
        jpath = Path(args.json) if args.json else out.with_suffix(".json")
        payload = {
            "command": command,
            "environment": env,
            "threads": threads,
            "roofs": vars(roofs),
            "load": {"start": load_start, "end": load_end},
            "busy_cores": args.busy,
            "results": [r.to_json() for r in results],
            "missing": missing,
            "cold": [vars(c) for c in cold_results],
            "geomean": harness.summary(results)[1],
            "per_workload_geomean": harness.summary(results)[0],
            "per_workload_geomean_openvino": harness.anchor_summary(results, "openvino"),
        }
        jpath.write_text(json.dumps(payload, indent=1, default=str))
        _log(f"wrote {jpath}")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
