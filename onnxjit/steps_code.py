"""A program's steps as one generated straight-line Python function.

On small tensors a run's cost is the interpreter's work around each step, and the general step
loop (:meth:`onnxjit.plan.Program._run_steps`) pays for being general at every step:
unpacking the step's record, testing for captures, omitted inputs, several outputs and buffers
to recycle. The generated function settles all of that when it is written and keeps only what
each step needs: build its argument tuple, drop the values it is the last reader of, call its
fast path (or its implementation, which prepares one), store its results, hand released
buffers back to the pool. The order of those actions, and so the reference counts the fast
paths read to find buffers they may write into, are the general loop's.

On the development VM: O1's 61 steps (195 tiny ops) 83-86 -> 77-80 us a run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from onnxjit import buffers
from onnxjit.errors import OnnxJitError
from onnxjit.registry import MISS

# Programs with more steps keep the general loop: compiling the generated source takes about
# 0.13 ms a step (0.13 s for 1000 steps, 0.54 s for 4000 on the development VM), while the
# loop costs ~0.15 us a step more per run, small next to the kernels of models that long.
MAX_STEPS = 1000
# A program gets its straight-line function once it has run this many times: the first runs
# of a session (warm-up, a one-off call) keep the loop and do not pay for the compile.
AFTER_RUNS = 2


def _store_many(env: list[Any], slots: tuple[int, ...], result: Any) -> None:
    for slot, value in zip(slots, result):
        if slot >= 0:
            env[slot] = value


def generate(
    steps: Sequence[Any],
    call_impl: Callable[..., Any],
    arg_slots: Callable[[Any], tuple[int, ...]],
    execution_error: Callable[..., Exception],
) -> Callable[[list[Any]], None] | None:
    """``run_steps(env)`` doing what the general step loop does for ``steps``, or None for a
    program too long to be worth it. ``call_impl(step, fn, ctx, args, kwargs)`` runs a step's
    implementation; ``arg_slots(step)`` gives its input slots (-1 for an omitted input);
    ``execution_error(node, args, exc)`` wraps an exception a step raised."""
    if len(steps) > MAX_STEPS:
        return None
    scope: dict[str, Any] = {
        "MISS": MISS,
        "OnnxJitError": OnnxJitError,
        "call_impl": call_impl,
        "execution_error": execution_error,
        "replace": replace,
        "store_many": _store_many,
        "recycling": buffers.recycling,
        "ndarray": np.ndarray,
        "MIN_BYTES": buffers.MIN_BYTES,
        "STEPS": list(steps),
    }
    body: list[str] = []
    any_recycle = False
    for i, step in enumerate(steps):
        scope[f"S{i}"] = step
        scope[f"F{i}"] = step.fn
        scope[f"C{i}"] = step.ctx
        scope[f"K{i}"] = step.kwargs
        slots = arg_slots(step)
        items = [f"env[{s}]" if s >= 0 else "None" for s in slots]
        body.append(f"        i = {i}")
        body.append(f"        args = ({', '.join(items)}{',' if len(items) == 1 else ''})")
        ctx = f"C{i}"
        if step.captures:
            outer = ", ".join(f"{name!r}: env[{slot}]" for name, slot in step.captures)
            body.append(f"        ctx = replace(C{i}, outer={{{outer}}})")
            ctx = "ctx"
        body += [f"        env[{s}] = None" for s in step.release]
        body += [
            f"        q = S{i}.fast",
            "        r = MISS if q is None else q(*args)",
            "        if r is MISS:",
            f"            r = call_impl(S{i}, F{i}, {ctx}, args, K{i})",
        ]
        out_slots = step.out_slots
        if len(out_slots) == 1:
            body.append(f"        env[{out_slots[0]}] = r[0] if isinstance(r, tuple) else r")
        else:
            body.append(f"        store_many(env, {tuple(out_slots)!r}, r)")
        body.append("        r = None")
        if step.recycle:
            any_recycle = True
            body.append("        if pool is not None:")
            for pos, held in step.recycle:
                body += [
                    f"            a = args[{pos}]",
                    "            if a.__class__ is ndarray and a.nbytes >= MIN_BYTES:",
                    f"                pool.give(a, {held + 1})",  # + the name a
                    "            a = None",
                ]
        body.append("        args = None")
    head = [
        "def run_steps(env):",
        "    pool = recycling()" if any_recycle else "    pool = None",
        "    i = 0",
        "    args = None",
        "    try:",
    ]
    tail = [
        "    except OnnxJitError:",
        "        raise",
        "    except Exception as exc:",
        "        shown = list(args) if args is not None else []",
        "        raise execution_error(STEPS[i].node, shown, exc) from exc",
    ]
    if not steps:
        body.append("        pass")
    source = "\n".join(head + body + tail) + "\n"
    exec(compile(source, "<onnxjit steps>", "exec"), scope)
    return scope["run_steps"]
