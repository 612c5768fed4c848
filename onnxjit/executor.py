"""The executor: a plan rendered as one straight-line Python function.

On small tensors a run's cost is the interpreter's work around each kernel call, so the plan
(:mod:`onnxjit.plan`) is not interpreted step by step: it is written out as the source of one
function whose body is, per step, the call of its bound kernel with the arguments already
resolved to local variables (values) and module-level names (kernels, constants, output
shapes), the guard of a step whose outputs the plan could not know in advance, and nothing
else. Arena buffers are unpacked into locals once per run. The same renderer writes the
profiled variant (each step timed) of the same plan.

Values are named by their slot (``v12``), never after the model, so that a model's names
cannot reach the generated source. The function is compiled with ``compile``/``exec``: it is
plain Python, which no on-disk cache could serve across processes anyway (it holds live
objects: the plan's kernels and constants).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from onnxjit import lowering
from onnxjit.errors import OnnxJitError
from onnxjit.lowering import In, Out
from onnxjit.plan import Plan, PlannedStep, transformed
from onnxjit.program import execution_error

_ids = itertools.count()


def render(plan: Plan, profiled: bool) -> Callable[..., list[Any]]:
    """The plan as straight-line Python: ``run(values)`` (with ``profiled``,
    ``run(values, profiler)``) returning the program's outputs."""
    return _Renderer(plan, profiled).function()


class _Renderer:
    def __init__(self, plan: Plan, profiled: bool):
        self.plan = plan
        self.profiled = profiled
        self.scope: dict[str, Any] = {
            "ndarray": np.ndarray,
            "EMPTY": np.empty,
            "OnnxJitError": OnnxJitError,
            "REPLACE": replace,
            "FAIL": self.fail,
            "PLAN": plan,
        }
        if profiled:
            import time

            self.scope["NS"] = time.perf_counter_ns
        self.lines: list[str] = []
        self.counter = itertools.count()
        self.named: dict[int, str] = {}

    # -- names --------------------------------------------------------------------------------
    def const(self, value: Any, hint: str) -> str:
        key = id(value)
        got = self.named.get(key)
        if got is not None and self.scope.get(got) is value:
            return got
        name = f"{hint}{next(self.counter)}"
        self.scope[name] = value
        self.named[key] = name
        return name

    def held(self, s: int) -> bool:
        """Whether value ``s`` is held by the program or the plan (not made per run)."""
        plan = self.plan
        return s in plan.program.constants or (s in plan.static and s not in plan.entry)

    def value(self, s: int) -> Any:
        """The value of a held (constant) slot."""
        plan = self.plan
        return plan.program.constants[s] if s in plan.program.constants else plan.static[s]

    def name(self, s: int) -> str:
        if self.held(s):
            name = f"k{s}"
            self.scope[name] = self.value(s)
            return name
        return f"v{s}"

    def flat(self, s: int) -> str:
        plan = self.plan
        r = plan.root(s)
        if r in plan.arena_offsets and r in plan.flat and (s == r or s in plan.whole):
            return f"v{r}f"  # all of the buffer: its flat view, made with the arena
        return f"{self.name(s)}.reshape(-1)"

    def arg(self, a: Any, ps: PlannedStep) -> str:
        t = type(a)
        if t is In or t is Out:
            s = ps.step.in_slots[a.index] if t is In else ps.out_value(a.index)
            if s < 0:
                return "None"
            if self.held(s) and (a.flat or a.view is not None or a.shape is not None):
                # a constant's view is the same every run: made once, here
                return self.const(transformed(a, self.value(s)), "c")
            spec = self.plan.specs.get(s)
            shape = spec.shape if spec is not None else None
            # reshaping to the shape it has already is the value itself
            if (
                a.view is None
                and shape is not None
                and (a.shape == shape or (a.flat and a.shape is None and len(shape) == 1))
            ):
                return self.name(s)
            if a.view is None and a.shape is None:
                return self.flat(s) if a.flat else self.name(s)
            v = self.name(s)
            if a.view is not None:
                v = f"{v}.view({self.const(a.view, 'D')})"
            if a.shape is not None:
                return f"{v}.reshape({self.const(a.shape, 'S')})"
            return f"{v}.reshape(-1)" if a.flat else v
        if a is None or type(a) in (bool, int) or (type(a) is float and math.isfinite(a)):
            return repr(a)
        return self.const(a, "c")

    def emit(self, text: str) -> None:
        self.lines.append("        " + text)

    # -- the function -------------------------------------------------------------------------
    def function(self) -> Callable[..., list[Any]]:
        plan = self.plan
        for ps in plan.steps:  # arena roots whose flat view some call takes
            if ps.bound is not None:
                for a in ps.bound.args:
                    if type(a) in (In, Out) and a.flat and a.view is None and a.shape is None:
                        s = ps.step.in_slots[a.index] if type(a) is In else ps.out_value(a.index)
                        r = plan.root(s)
                        if s >= 0 and r in plan.arena_offsets and (s == r or s in plan.whole):
                            plan.flat.add(r)
        head = ["def run(values" + (", profiler" if self.profiled else "") + "):"]
        entry = [self.name(s) for s in plan.entry]
        if entry:
            head.append(f"    ({', '.join(entry)},) = values")
        if plan.arena_offsets:
            unpack = []
            for s in plan.arena_offsets:
                unpack.append(f"v{s}")
                if s in plan.flat:
                    unpack.append(f"v{s}f")
            self.scope["TAKE"] = plan.take_arena
            self.scope["IDLE"] = plan._idle
            head.append("    ar = TAKE()")
            head.append(f"    ({', '.join(unpack)},) = ar")
        head.append("    k = -1")
        head.append("    try:")
        for pos, ps in enumerate(plan.steps):
            self.emit(f"k = {pos}")
            self.step(ps)
        outs = []
        for s in plan.program.output_slots:
            if s in plan.device:  # left on the device: the device session's run moves it
                outs.append(self.name(s))
            else:
                outs.append(f"{self.name(s)}.copy()" if self.copied(s) else self.name(s))
        self.emit(f"return [{', '.join(outs)}]")
        tail = [
            "    except OnnxJitError:",
            "        raise",
            "    except Exception as exc:",
            "        raise FAIL(exc, k) from exc",
        ]
        if plan.arena_offsets:
            tail += ["    finally:", "        IDLE.append(ar)"]
        source = "\n".join(head + self.lines + tail) + "\n"
        plan.source = source
        code = compile(source, f"<onnxjit plan {next(_ids)}>", "exec")
        exec(code, self.scope)
        return self.scope["run"]

    def copied(self, s: int) -> bool:
        """Outputs that are (or view) values the program or plan holds are copied."""
        r = self.plan.root(s)
        return self.held(r) and isinstance(self.scope.get(self.name(r)), np.ndarray)

    def step(self, ps: PlannedStep) -> None:
        if self.profiled:
            self.emit("t0 = NS()")
        if ps.generic:
            self.generic(ps)
        else:
            self.bound(ps)
        if self.profiled:
            self.emit(f"profiler.record({self.const(ps.step.node, 'node')}, t0, NS())")
        if ps.guard:
            self.guard(ps)

    def guard(self, ps: PlannedStep) -> None:
        plan, step = self.plan, ps.step
        conds = []
        for j in ps.guard:
            s = step.out_slots[j]
            spec = plan.specs[s]
            v = self.name(s)
            if spec.kind == lowering.TENSOR:
                shape = self.const(spec.shape, "S")
                dtype = self.const(spec.dtype, "D")
                conds.append(
                    f"{v}.__class__ is not ndarray or {v}.shape != {shape} or "
                    f"({v}.dtype is not {dtype} and {v}.dtype != {dtype})"
                )
            elif spec.kind == lowering.NONE:
                conds.append(f"{v} is not None")
            else:
                conds.append(f"{v}.__class__ is not {self.const(plan.classes[s], 'T')}")
        live = ", ".join(self.name(s) for s in plan.guard_live.get(step.index, ()))
        extra = ", profiler" if self.profiled else ""
        self.emit(f"if {' or '.join('(' + c + ')' for c in conds)}:")
        self.emit(f"    return PLAN.resume({step.index}, ({live}{',' if live else ''}){extra})")

    def generic(self, ps: PlannedStep) -> None:
        step = ps.step
        fn = self.const(step.impl.fn, "F")
        args = [self.name(s) if s >= 0 else "None" for s in step.in_slots]
        if step.ctx is not None:
            ctx = self.const(step.ctx, "C")
            if step.captures:
                outer = ", ".join(f"{n!r}: {self.name(s)}" for n, s in step.captures)
                ctx = f"REPLACE({ctx}, outer={{{outer}}})"
            args.insert(0, ctx)
        if step.kwargs:
            args.append(f"**{self.const(step.kwargs, 'K')}")
        self.emit(f"r = {fn}({', '.join(args)})")
        outs = step.out_slots
        if len(outs) == 1:
            if outs[0] >= 0:
                self.emit(f"{self.name(outs[0])} = r[0] if r.__class__ is tuple else r")
            return
        for j, s in enumerate(outs):
            if s >= 0:
                self.emit(f"{self.name(s)} = r[{j}] if len(r) > {j} else None")

    def bound(self, ps: PlannedStep) -> None:
        plan, b = self.plan, ps.bound
        fn = self.const(ps.call if ps.call is not None else b.fn, "F")
        if b.writes:
            for j, spec in enumerate(b.outs):
                s = ps.out_value(j)
                if ps.inplace is not None and j == 0:
                    self.emit(f"{self.name(s)} = {self.name(ps.step.in_slots[ps.inplace])}")
                elif s not in plan.arena_offsets and plan.root(s) not in plan.arena_offsets:
                    shape = self.const(spec.shape, "S")
                    dtype = self.const(spec.dtype, "D")
                    empty = "EMPTY"
                    if s in plan.device:
                        empty = self.const(plan.program.backend.empty, "E")
                    self.emit(f"{self.name(s)} = {empty}({shape}, {dtype})")
            self.emit(f"{fn}({', '.join(self.arg(a, ps) for a in b.args)})")
            return
        call = f"{fn}({', '.join(self.arg(a, ps) for a in b.args)})"
        outs = ps.step.out_slots
        if len(outs) == 1:
            self.emit(f"{self.name(outs[0]) if outs[0] >= 0 else '_'} = {call}")
            return
        self.emit(f"r = {call}")
        for j, s in enumerate(outs):
            if s >= 0:
                self.emit(f"{self.name(s)} = r[{j}]")

    def fail(self, exc: BaseException, pos: int) -> BaseException:
        """The error a run raises for ``exc`` raised by the plan's step ``pos``."""
        plan = self.plan
        if not 0 <= pos < len(plan.steps):
            return exc
        step = plan.steps[pos].step
        described = []
        for s in step.in_slots:
            spec = plan.specs.get(s) if s >= 0 else None
            described.append(spec.describe() if spec is not None else "None")
        return execution_error(step.node, described, exc)
