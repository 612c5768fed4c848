"""The ``onnxjit`` command.

``onnxjit run [MODEL] [--input NAME=FILE.npy ...] [--dim NAME=VALUE ...] [--runs N]`` runs a
model on the given inputs, or on seeded random inputs for those not given, and prints each
output (name, dtype, shape, first values) and the timings. Without MODEL it runs the demo model
shipped in the package.

``onnxjit warmup MODEL [--shape NAME=DIMS ...]`` compiles (or loads from the cache) every
kernel the model needs for the given input shapes (DIMS like ``1x128`` or ``1,128``; repeat
``--shape`` for several inputs, and separate signatures with ``--also``), so that a deployment
can fill the kernel cache (``ONNXJIT_CACHE_DIR``) at build time. It prints what was compiled.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="onnxjit", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a model and print its outputs and timings")
    run.add_argument("model", nargs="?", help="path to an .onnx file (default: the demo model)")
    run.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="feed input NAME from a .npy file (repeatable)",
    )
    run.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="value of a dimension variable for generated inputs (default 1)",
    )
    run.add_argument("--runs", type=int, default=10, help="timed runs after the first (10)")
    run.add_argument("--seed", type=int, default=0, help="seed for generated inputs (0)")
    warm = sub.add_parser("warmup", help="compile a model's kernels into the cache ahead of time")
    warm.add_argument("model", help="path to an .onnx file")
    warm.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=DIMS",
        help="shape of input NAME, e.g. input_ids=1x128 (repeatable; inputs with a fixed "
        "declared shape may be left out)",
    )
    warm.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="NAME=DIMS[;NAME=DIMS...]",
        help="one more signature to warm, its shapes separated by ';' (repeatable)",
    )
    warm.add_argument("--threads", type=int, default=0, help="intra_op_num_threads (0: all)")
    args = parser.parse_args(argv)
    if args.command == "run":
        return _run(args)
    if args.command == "warmup":
        return _warmup(args)
    return 2


def _parse_shapes(pairs: list[str]) -> dict[str, list[int]]:
    shapes = {}
    for name, dims in _parse_pairs(pairs, "shape").items():
        parts = [p for p in dims.replace(",", "x").split("x") if p.strip()] if dims else []
        try:
            shapes[name] = [int(p) for p in parts]
        except ValueError:
            raise SystemExit(
                f"onnxjit: --shape {name}={dims!r}: expected integer dimensions such as 1x128"
            ) from None
    return shapes


def _warmup(args: argparse.Namespace) -> int:
    import onnxjit

    signatures = [_parse_shapes(args.shape)]
    signatures += [_parse_shapes([p for p in also.split(";") if p]) for also in args.also]
    try:
        t0 = time.perf_counter()
        so = onnxjit.SessionOptions()
        so.intra_op_num_threads = args.threads
        sess = onnxjit.InferenceSession(args.model, so)
        stats = sess.warmup(shapes=signatures)
        elapsed = time.perf_counter() - t0
    except onnxjit.OnnxJitError as exc:
        print(f"onnxjit: {exc}", file=sys.stderr)
        return 1
    print(f"model: {args.model}")
    for sig in signatures:
        print("warmed: " + (", ".join(f"{k}={list(v)}" for k, v in sig.items()) or "declared"))
    print(f"kernel cache: {stats['cache_dir']}")
    print(
        f"kernels compiled: {stats['kernels_compiled']} ({stats['compile_seconds']:.1f} s), "
        f"loaded from the cache: {stats['kernels_loaded']} ({stats['load_seconds']:.1f} s)"
    )
    slow = sorted(stats["kernels"], key=lambda k: -k["seconds"])[:5]
    for k in slow:
        print(f"  {k['seconds']:7.2f} s  {k['origin']:8s} {k['name']}  ({k['node'] or 'set-up'})")
    print(f"total: {elapsed:.1f} s")
    return 0


def _parse_pairs(pairs: list[str], what: str) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"onnxjit: --{what} expects NAME=VALUE, found {pair!r}")
        out[name] = value
    return out


def _run(args: argparse.Namespace) -> int:
    import onnxjit
    from onnxjit import types
    from onnxjit.demo import DEMO_PATH

    model = args.model or str(DEMO_PATH)
    files = _parse_pairs(args.input, "input")
    dims = {}
    for k, v in _parse_pairs(args.dim, "dim").items():
        try:
            dims[k] = int(v)
        except ValueError:
            print(f"onnxjit: --dim {k}={v!r}: expected an integer value", file=sys.stderr)
            return 2
    try:
        t0 = time.perf_counter()
        sess = onnxjit.InferenceSession(model)
        t_create = time.perf_counter() - t0
    except onnxjit.OnnxJitError as exc:
        print(f"onnxjit: {exc}", file=sys.stderr)
        return 1
    rng = np.random.default_rng(args.seed)
    feed: dict[str, Any] = {}
    for arg in sess.get_inputs():
        if arg.name in files:
            path = files.pop(arg.name)
            try:
                feed[arg.name] = np.load(path, allow_pickle=False)
            except (OSError, ValueError) as exc:
                print(
                    f"onnxjit: --input {arg.name}={path}: cannot read a .npy array ({exc})",
                    file=sys.stderr,
                )
                return 1
            continue
        feed[arg.name] = _random_input(arg, dims, rng, types)
    if files:
        print(
            f"onnxjit: --input names {sorted(files)} are not model inputs; the inputs are "
            f"{[a.name for a in sess.get_inputs()]}",
            file=sys.stderr,
        )
        return 1
    print(f"model: {model}")
    for name, value in feed.items():
        print(f"input  {name}: {value.dtype} {list(value.shape)}")
    try:
        t0 = time.perf_counter()
        outputs = sess.run(None, feed)
        t_first = time.perf_counter() - t0
        times = []
        for _ in range(max(args.runs, 0)):
            t0 = time.perf_counter()
            sess.run(None, feed)
            times.append(time.perf_counter() - t0)
    except onnxjit.OnnxJitError as exc:
        print(f"onnxjit: {exc}", file=sys.stderr)
        return 1
    for arg, value in zip(sess.get_outputs(), outputs):
        print(f"output {arg.name}: {_summary(value)}")
    print(f"import onnxjit:     {onnxjit.IMPORT_SECONDS * 1e3:9.1f} ms")
    print(f"session creation:  {t_create * 1e3:9.1f} ms")
    print(f"first run:         {t_first * 1e3:9.1f} ms (includes compiling kernels not cached)")
    if times:
        print(
            f"next {len(times)} runs:     median {statistics.median(times) * 1e3:.3f} ms, "
            f"min {min(times) * 1e3:.3f} ms"
        )
    return 0


def _random_input(arg: Any, dims: dict[str, int], rng: np.random.Generator, types: Any):
    shape = [d if isinstance(d, int) else dims.get(d, 1) if d else 1 for d in (arg.shape or [])]
    elem = arg.type[len("tensor(") : -1] if arg.type.startswith("tensor(") else "float"
    dtype = {
        "float": np.float32,
        "double": np.float64,
        "float16": np.float16,
        "bool": np.bool_,
        "string": object,
    }.get(elem)
    if dtype is None:
        dtype = np.dtype(elem) if elem in np.sctypeDict else np.float32
    if dtype is object:
        return np.array(["a"] * int(np.prod(shape)), dtype=object).reshape(shape)
    if np.dtype(dtype).kind == "b":
        return rng.random(shape) > 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 10, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _summary(value: Any) -> str:
    if isinstance(value, np.ndarray):
        flat = value.reshape(-1)[:6]
        vals = np.array2string(flat, precision=5, separator=", ")
        more = " ..." if value.size > 6 else ""
        return f"{value.dtype} {list(value.shape)} {vals}{more}"
    if isinstance(value, list):
        return f"sequence of {len(value)}: {[_summary(v) for v in value[:2]]}"
    return repr(value)


if __name__ == "__main__":
    raise SystemExit(main())
