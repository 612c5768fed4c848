"""``python -m bench.cuda``: onnxjit's CUDA provider on one GPU, against onnxjit on the CPU and
onnxruntime on the same machine (its CUDA provider where the installed onnxruntime has one,
else its CPU provider; the table names which).

The cases are the CUDA issue's targets: BERT-base (hidden 768, 12 heads, 12 layers, written as
exporters write it) at batch 8 and sequence 128, ResNet-50 at batch 32 and 224 px, and the
elementwise forms of workload E1 at 4M elements. Each engine runs each case after warm-up
runs, for at least ``--seconds`` or ``--runs`` runs, and the median and best times are
reported. onnxjit's CUDA session is timed twice: with numpy feeds and results (copies to and
from the device in each run, as ``sess.run`` does) and with inputs and outputs bound on the
device (``io_binding``, no copies: what onnxruntime's GPU users write for speed). Outputs are
checked against onnxjit on the CPU.

``--quick`` runs tiny shapes, for a smoke check of the script itself (under numba-cuda's
simulator, ``NUMBA_ENABLE_CUDASIM=1``, where its times mean nothing).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from bench.workloads import elementwise
from bench.workloads.cnn import image_feeds, resnet50
from bench.workloads.transformer import bert_feeds, bert_primitive

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


@dataclass
class GpuCase:
    name: str
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    rtol: float
    atol: float


@dataclass
class Timing:
    median_ms: float
    best_ms: float
    runs: int


@dataclass
class Row:
    case: str
    times: dict[str, Timing | str] = field(default_factory=dict)  # engine -> timing or error
    max_err: float | None = None


def cases(quick: bool) -> list[GpuCase]:
    """The target cases (quick: tiny shapes of the same models)."""
    if quick:
        bert = bert_primitive(32, 2, 1, seq=8, batch=1)
        return [
            GpuCase("bert/h32/b1/s8", bert, bert_feeds(8, 1, pad=2), 1e-4, 1e-5),
            _elementwise("gelu_erf", 1024),
        ]
    out = [
        GpuCase(
            "bert-base/b8/s128",
            bert_primitive(768, 12, 12, seq=128, batch=8),
            bert_feeds(128, 8, pad=16),
            1e-3,
            1e-3,
        ),
        GpuCase("resnet50/b32/224", resnet50(32, 224)[0], image_feeds(32, 224), 1e-3, 1e-3),
    ]
    out += [_elementwise(form, 1 << 22) for form in elementwise.FORMS]
    return out


def _elementwise(form: str, n: int) -> GpuCase:
    c = elementwise.build(form, n)
    return GpuCase(f"E1 {c.name}", c.model, c.feeds, c.rtol, c.atol)


def time_runs(run: Callable[[], Any], seconds: float, min_runs: int, warmup: int) -> Timing:
    """Median and best wall time of ``run`` after ``warmup`` calls, over at least
    ``min_runs`` calls and ``seconds`` seconds."""
    for _ in range(warmup):
        run()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
        if len(times) >= 10 * min_runs and time.perf_counter() - start >= seconds:
            break
    return Timing(statistics.median(times) * 1e3, min(times) * 1e3, len(times))


def _onnxjit(model: bytes, providers: list[str]) -> Any:
    import onnxjit

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # placement notes: listed below
        return onnxjit.InferenceSession(model, providers=providers)


def _bound_run(sess: Any, feeds: dict[str, np.ndarray], engine: Any) -> Callable[[], Any]:
    """A run of ``sess`` with the feeds already on the device and the outputs left there
    (``engine``: the ``onnxjit`` or ``onnxruntime`` module, whose binding calls are the
    same)."""
    binding = sess.io_binding()
    for name, value in feeds.items():
        binding.bind_ortvalue_input(name, engine.OrtValue.ortvalue_from_numpy(value, "cuda", 0))
    for out in sess.get_outputs():
        binding.bind_output(out.name, "cuda")
    return lambda: sess.run_with_iobinding(binding)


def measure(case: GpuCase, seconds: float, min_runs: int, warmup: int) -> Row:
    import onnxruntime as ort

    import onnxjit

    row = Row(case.name)
    model = case.model.SerializeToString()
    engines: list[tuple[str, Callable[[], Callable[[], Any]]]] = []
    gpu = _onnxjit(model, [CUDA, CPU])
    cpu = _onnxjit(model, [CPU])
    ort_gpu = CUDA in ort.get_available_providers()
    ort_sess = ort.InferenceSession(model, providers=[CUDA, CPU] if ort_gpu else [CPU])
    got = gpu.run(None, case.feeds)
    want = cpu.run(None, case.feeds)
    row.max_err = max(float(np.max(np.abs(g - w))) if g.size else 0.0 for g, w in zip(got, want))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=case.rtol, atol=case.atol, err_msg=case.name)
    engines.append(("onnxjit cuda", lambda: lambda: gpu.run(None, case.feeds)))
    engines.append(("onnxjit cuda bound", lambda: _bound_run(gpu, case.feeds, onnxjit)))
    engines.append(("onnxjit cpu", lambda: lambda: cpu.run(None, case.feeds)))
    label = "onnxruntime cuda" if ort_gpu else "onnxruntime cpu"
    engines.append((label, lambda: lambda: ort_sess.run(None, case.feeds)))
    if ort_gpu:
        engines.append(("onnxruntime cuda bound", lambda: _bound_run(ort_sess, case.feeds, ort)))
    for engine, make in engines:
        try:
            row.times[engine] = time_runs(make(), seconds, min_runs, warmup)
        except Exception as exc:  # one engine failing must not hide the others' figures
            row.times[engine] = f"{type(exc).__name__}: {exc}"[:120]
    off = [p["op"] for p in gpu.placement() if not p["copy"] and p["device"] != "cuda"]
    if off:
        row.times["on the CPU"] = ", ".join(sorted(set(off)))
    return row


def device_name() -> str:
    from numba import cuda

    if cuda.is_available() and not getattr(cuda, "simulator", None):
        name = cuda.get_current_device().name
        return name.decode() if isinstance(name, bytes) else str(name)
    return "numba-cuda simulator (times mean nothing)"


def markdown(rows: Sequence[Row], device: str) -> str:
    engines: list[str] = []
    for r in rows:
        engines += [e for e in r.times if e not in engines]
    lines = [
        f"Device: {device}. Median ms (best ms); ratio: onnxjit cuda bound / the onnxruntime "
        "figure beside it.",
        "",
        "| case | " + " | ".join(engines) + " | ratio | max err vs CPU |",
        "|---" * (len(engines) + 3) + "|",
    ]
    for r in rows:
        cells = []
        for e in engines:
            t = r.times.get(e, "")
            cells.append(f"{t.median_ms:.3f} ({t.best_ms:.3f})" if isinstance(t, Timing) else t)
        ratio = ""
        mine = r.times.get("onnxjit cuda bound")
        theirs = r.times.get("onnxruntime cuda bound") or next(
            (v for k, v in r.times.items() if k.startswith("onnxruntime")), None
        )
        if isinstance(mine, Timing) and isinstance(theirs, Timing):
            ratio = f"{mine.median_ms / theirs.median_ms:.2f}"
        err = "" if r.max_err is None else f"{r.max_err:.1e}"
        lines.append(f"| {r.case} | " + " | ".join(cells) + f" | {ratio} | {err} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cuda", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny shapes (a smoke check)")
    ap.add_argument("--seconds", type=float, default=3.0, help="minimum timed seconds per engine")
    ap.add_argument("--runs", type=int, default=10, help="minimum timed runs per engine")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs first")
    ap.add_argument("--cases", default="", help="only cases whose name contains this")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    args = ap.parse_args(argv)
    import onnxjit

    if CUDA not in onnxjit.get_available_providers():
        print("bench.cuda: no usable CUDA device (see onnxjit's README)", file=sys.stderr)
        return 2
    device = device_name()
    rows = []
    for case in cases(args.quick):
        if args.cases in case.name:
            print(f"bench.cuda: {case.name}", file=sys.stderr, flush=True)
            rows.append(measure(case, args.seconds, args.runs, args.warmup))
    text = markdown(rows, device)
    from onnxjit import device as onnxjit_device

    stats = onnxjit_device.cache_stats()
    text += (
        f"\nCaching allocator: {stats.hits} requests from the cache, {stats.misses} from the "
        f"driver, {stats.cached_bytes} bytes held free.\n"
    )
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
