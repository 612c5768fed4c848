"""``python -m bench.compare BEFORE.json AFTER.json``: two runs of ``python -m bench --json``
as one before/after table (markdown on stdout).

Each row is a case both runs measured: its ratio onnxjit/onnxruntime with the 95 % interval
in each run, and whether the change is beyond the intervals (the after interval lies wholly
above the before one: slower; wholly below: faster); beside them, OpenVINO's ratio to
onnxruntime in the after run (``-`` where it has none; the run's table says why), the bar
where OpenVINO is faster than onnxruntime. The runs should come from the same
machine and hour; the header repeats each run's command, commit, time and load.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _rows(run: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["workload"], r["case"]): r for r in run["results"] if r.get("ratio") is not None}


def _ratio(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    prefix = "alt/rep " if r.get("kind") == "alternating" else ""
    return f"{prefix}{r['ratio']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"


def _anchor(r: dict[str, Any] | None, name: str) -> str:
    """Engine ``name``'s ratio to onnxruntime in a result (JSON), ``-`` where it has none
    (runs from before the harness measured it have no ``anchors``)."""
    a = (r or {}).get("anchors", {}).get(name) or {}
    if a.get("ratio") is None:
        return "-"
    return f"{a['ratio']:.2f} [{a['ci_low']:.2f}, {a['ci_high']:.2f}]"


def _verdict(before: dict[str, Any], after: dict[str, Any]) -> str:
    if after["ci_low"] > before["ci_high"]:
        return "slower"
    if after["ci_high"] < before["ci_low"]:
        return "faster"
    return "within intervals"


def _header(label: str, run: dict[str, Any]) -> str:
    env = run.get("environment", {})
    load = run.get("load", {})
    return (
        f"{label}: `{run.get('command', '?')}`, onnxjit {env.get('onnxjit', '?')}, "
        f"{env.get('date', '?')}, load {load.get('start', '?')} .. {load.get('end', '?')}"
    )


def table(before: dict[str, Any], after: dict[str, Any]) -> str:
    """The markdown before/after table of two runs' JSON."""
    b, a = _rows(before), _rows(after)
    lines = [
        _header("Before", before) + "  ",
        _header("After", after) + "  ",
        "",
        "| workload | case | before (ratio, 95 % CI) | after (ratio, 95 % CI) | onnxjit before "
        "| onnxjit after | change | openvino/ort after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key in list(b) + [k for k in a if k not in b]:
        rb, ra = b.get(key), a.get(key)
        verdict = _verdict(rb, ra) if rb is not None and ra is not None else "-"
        jit_b = f"{rb['jit_ns'] / 1e3:.1f} µs" if rb is not None else "-"
        jit_a = f"{ra['jit_ns'] / 1e3:.1f} µs" if ra is not None else "-"
        lines.append(
            f"| {key[0]} | {key[1]} | {_ratio(rb)} | {_ratio(ra)} | {jit_b} | {jit_a} | {verdict} "
            f"| {_anchor(ra, 'openvino')} |"
        )
    both = [k for k in b if k in a and b[k].get("kind") != "alternating"]
    if both:
        logs = [math.log(a[k]["ratio"] / b[k]["ratio"]) for k in both]
        mean = math.exp(sum(logs) / len(logs))
        lines += [
            "",
            f"Geometric mean of after/before over the {len(both)} ratio cases both ran: "
            f"{mean:.2f}; per-workload geometric means before "
            f"{before.get('geomean', float('nan')):.2f}, after "
            f"{after.get('geomean', float('nan')):.2f}.",
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    args = ap.parse_args(argv)
    runs = [json.loads(p.read_text()) for p in (args.before, args.after)]
    sys.stdout.write(table(*runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
