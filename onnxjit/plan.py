"""Plans: what one input signature of a program needs, decided once, and the code that runs it.

A :class:`Plan` is built by running the program once on the signature's values (the planning
run, :func:`build`). Node by node it

* gives each node's inputs as :class:`~onnxjit.lowering.Spec` (element type, shape, and the
  value where it is the same in every run) to the node's lowering, which returns a bound
  kernel call, or leaves the node to its implementation (a *generic* step);
* calls it, and learns the outputs' specs: declared by the lowering, or observed (then a
  *guard* checks them after every later call: where a run's output differs, as NonZero's or
  a Loop's can, the plan re-plans the rest of the graph from there, keyed by the values alive
  at that point, and caches that continuation);
* folds *static* values: outputs of deterministic nodes whose inputs are all constant for the
  plan (initializers, and shapes: Shape and Size of any value are constant within a
  signature), up to :data:`STATIC_MAX_BYTES`; their nodes do not run again;
* notes which outputs share memory with an input (views), and lets a call write its output
  over an input that dies there, where its lowering allows it.

Buffers come from liveness: every tensor a bound call writes gets a range of one arena per
plan (an offset plan: tensors alive at the same time never overlap), except values that leave
the graph, which are allocated per run; in-place writes share their input's range. A run takes
an idle arena of the plan (or makes one), so concurrent runs never share buffers.

The plan is then rendered as one straight-line Python function (:mod:`onnxjit.executor`).
"""

from __future__ import annotations

import bisect
import heapq
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numba.core.registry import CPUDispatcher

from onnxjit import ir, jitstats, lowering
from onnxjit.errors import OnnxJitError
from onnxjit.lowering import Bound, In, LowerContext, Out, Spec, spec_of
from onnxjit.program import Program, Step, describe_value, execution_error
from onnxjit.registry import NONDETERMINISTIC

# Static values larger than this stay computed at run time: a plan holds its static values for
# as long as it is cached.
STATIC_MAX_BYTES = 1 << 16
# Operators whose outputs depend only on their input's shape, never its values.
_SHAPE_ONLY = frozenset({"Shape", "Size"})
# Continuations kept per plan (each a plan of the rest of the graph for one set of shapes).
MAX_CONTINUATIONS = 16
# Arena ranges start at multiples of this many bytes (a cache line, and AVX-512's width).
ALIGN = 64


@dataclass
class Profiler:
    """Collects per-node timings when profiling is on (Chrome-trace events)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    t0: int = field(default_factory=time.perf_counter_ns)

    def record(self, node: ir.Node, t0: int, t1: int) -> None:
        self.events.append(
            {
                "name": node.name or node.label,
                "cat": "Node",
                "ph": "X",
                "ts": (t0 - self.t0) / 1000.0,
                "dur": (t1 - t0) / 1000.0,
                "pid": 0,
                "tid": 0,
                "args": {"op": node.label},
            }
        )


@dataclass
class PlannedStep:
    """One step as the plan runs it: its bound call (None: the implementation itself, a
    *generic* step), the outputs its guard checks, the input whose buffer its output took,
    and for each output it writes but the node omits, the scratch value standing in."""

    step: Step
    bound: Bound | None
    kernel: str
    guard: tuple[int, ...] = ()
    inplace: int | None = None
    scratch: dict[int, int] = field(default_factory=dict)
    call: Any = None  # what the generated code calls: the bound function or its entry point
    device: bool = False  # it runs on the device backend (its tensor outputs live there)
    copy: str = ""  # a copy the plan added: "to device" or "to host" ("": a node's step)

    @property
    def generic(self) -> bool:
        return self.bound is None

    def out_value(self, j: int) -> int:
        """The value (slot) output ``j`` is written to: its slot, or its scratch value."""
        outs = self.step.out_slots
        s = outs[j] if j < len(outs) else -1
        return s if s >= 0 else self.scratch[j]


class Plan:
    """Everything one input signature of a program needs (see the module docstring).

    ``specs`` holds the spec of every value the plan knows (entry values, constants, outputs
    of every step), ``steps`` the steps that run, in order. ``run(values)`` (set by
    :func:`build`: the generated function itself, so that a call costs no extra frame) takes
    the values of the ``entry`` slots in order and returns the program's outputs.
    """

    run: Callable[[Sequence[Any]], list[Any]]

    def __init__(self, program: Program, entry: list[int], start: int):
        self.program = program
        self.entry = entry
        self.start = start  # the first step of the program this plan covers
        self.specs: dict[int, Spec] = {}
        self.static: dict[int, Any] = {}  # values constant for the plan -> value
        self.steps: list[PlannedStep] = []
        # value -> the root of the memory it shares (the value that owns it), for views and
        # in-place outputs; a root maps to nothing
        self.alias: dict[int, int] = {}
        # values that are the whole of their root's memory, contiguous (see _Planner._share):
        # they may use its flat view, and be written over in place
        self.whole: set[int] = set()
        self.arena_offsets: dict[int, int] = {}  # arena root value -> its offset
        self.arena_bytes = 0
        # values on the device backend (program.backend), and the device arena's size: the
        # device's arena roots have their offsets in arena_offsets too, in their own arena
        self.device: set[int] = set()
        self.device_arena_bytes = 0
        self.flat: set[int] = set()  # arena roots whose flat view the code uses
        self.guard_live: dict[int, tuple[int, ...]] = {}  # step index -> live values
        self.classes: dict[int, type] = {}  # guarded non-tensor value -> its class
        self.continuations: OrderedDict[tuple, Plan] = OrderedDict()
        self.source = ""
        self._idle: list[tuple] = []  # arenas no run holds
        self._made = 0  # arenas made
        self._profiled: Callable[..., list[Any]] | None = None

    def root(self, s: int) -> int:
        """The value that owns ``s``'s memory (``s`` itself unless it is a view or an
        in-place output)."""
        return self.alias.get(s, s)

    def run_profiled(self, values: Sequence[Any], profiler: Profiler) -> list[Any]:
        """:meth:`run` with one trace event per step in ``profiler``."""
        fn = self._profiled
        if fn is None:
            from onnxjit import executor

            fn = self._profiled = executor.render(self, profiled=True)
        return fn(values, profiler)

    def resume(self, index: int, live: tuple, profiler: Profiler | None = None) -> list[Any]:
        """Run the rest of the program after step ``index``, whose guard failed, from the
        ``live`` values, with the continuation planned for their signature."""
        slots = self.guard_live[index]
        key = (index, *[_value_key(v) for v in live])
        plan = self.continuations.get(key)
        if plan is None:
            with self.program._lock:
                plan = self.continuations.get(key)
                if plan is None:
                    static = {s: v for s, v in zip(slots, live) if s in self.static}
                    plan, outputs = build(
                        self.program, list(live), None, list(slots), index + 1, static
                    )
                    self.continuations[key] = plan
                    while len(self.continuations) > MAX_CONTINUATIONS:
                        self.continuations.popitem(last=False)
                    return self._detached(outputs, slots, live)
        if profiler is not None:
            outputs = plan.run_profiled(list(live), profiler)
        else:
            outputs = plan.run(live)
        return self._detached(outputs, slots, live)

    def _detached(self, outputs: list[Any], slots: Sequence[int], live: tuple) -> list[Any]:
        """Outputs that share memory with this plan's arena copied: the arena goes back to
        the plan when the run ends, and the caller keeps its outputs."""
        held = [v for s, v in zip(slots, live) if self.root(s) in self.arena_offsets]
        if not held:
            return outputs
        return [
            o.copy()
            if isinstance(o, np.ndarray) and any(np.may_share_memory(o, h) for h in held)
            else o
            for o in outputs
        ]

    def take_arena(self) -> tuple:
        """An arena no other run holds: an idle one, or a new one (the run returns it)."""
        try:
            return self._idle.pop()
        except IndexError:
            return self._make_arena()

    def arenas(self) -> int:
        """How many arenas the plan has made (one per run that overlapped others)."""
        return self._made

    def _make_arena(self) -> tuple:
        self._made += 1
        base = np.empty(self.arena_bytes + ALIGN, np.uint8)
        skip = (-base.ctypes.data) % ALIGN
        device = None
        if self.device_arena_bytes:  # device allocations are aligned to far more than ALIGN
            device = self.program.backend.empty((self.device_arena_bytes,), np.uint8)
        views: list[Any] = []
        for s, offset in self.arena_offsets.items():
            spec = self.specs[s]
            if s in self.device:
                part = device[offset : offset + spec.nbytes]
            else:
                part = base[skip + offset : skip + offset + spec.nbytes]
            arr = part.view(spec.dtype).reshape(spec.shape)
            views.append(arr)
            if s in self.flat:
                views.append(arr.reshape(-1))
        return tuple(views)

    def summary(self) -> dict[str, Any]:
        """What the plan holds: tensor values made and their bytes, the most bytes alive at
        once (by last use), the arena's size, the steps with what runs them, and
        name -> [dtype, shape] of every tensor value."""
        names = self.program.names
        last = _last_uses(self.program, self.start)
        made: list[int] = []
        alive = peak = 0
        ends: dict[int, list[int]] = {}
        for ps in self.steps:
            for s in ps.step.out_slots:
                spec = self.specs.get(s) if s >= 0 else None
                if spec is not None and spec.kind == lowering.TENSOR:
                    made.append(s)
                    alive += spec.nbytes
                    ends.setdefault(last.get(s, ps.step.index), []).append(s)
            peak = max(peak, alive)
            for s in ends.pop(ps.step.index, ()):
                alive -= self.specs[s].nbytes
        return {
            "values": len(made),
            "value_bytes": sum(self.specs[s].nbytes for s in made),
            "peak_live_bytes": peak,
            "arena_bytes": self.arena_bytes,
            "static_values": len(self.static),
            "steps": [
                {
                    "node": ps.step.node.name,
                    "op": ps.step.node.label,
                    "op_type": ps.step.node.op_type,
                    "kernel": ps.kernel,
                    "generic": ps.generic,
                    "guarded": bool(ps.guard),
                    "in_place": ps.inplace is not None,
                    "device": self.program.backend.name if ps.device else "cpu",
                    "copy": ps.copy,
                }
                for ps in self.steps
            ],
            "shapes": {
                names[s]: [spec.dtype.name, list(spec.shape)]
                for s, spec in self.specs.items()
                if spec.kind == lowering.TENSOR
                and s < len(names)
                and s not in self.program.constants
            },
        }


def _value_key(v: Any) -> Any:
    if type(v) is np.ndarray:
        return (v.dtype, v.shape)
    return None if v is None else v.__class__


def _last_uses(program: Program, start: int) -> dict[int, int]:
    """Value -> the last step (from ``start``) that reads it; graph outputs: past the end."""
    last: dict[int, int] = {}
    for step in program.steps[start:]:
        for s in step.in_slots:
            if s >= 0:
                last[s] = step.index
        for _, s in step.captures:
            last[s] = step.index
    end = len(program.steps)
    for s in program.output_slots:
        last[s] = end
    return last


# ---------------------------------------------------------------------------------------------
# The planning run
# ---------------------------------------------------------------------------------------------


def build(
    program: Program,
    values: list[Any],
    progress: Callable[[int], None] | None,
    entry: list[int] | None = None,
    start: int = 0,
    static: dict[int, Any] | None = None,
) -> tuple[Plan, list[Any]]:
    """Plan ``program`` for ``values`` (of the ``entry`` slots, by default the program's
    inputs and outer values) from step ``start`` on, running it once; return the plan and
    the outputs of that run. ``static`` are entry values constant for the plan."""
    from onnxjit import executor

    # kernels compiled or loaded now are the session's (the run of a known signature charges
    # nothing: only planning compiles)
    previous = jitstats.charge_to(program.owner.records)
    try:
        planner = _Planner(program, entry if entry is not None else program.entry_slots, start)
        outputs = planner.run(values, static or {}, progress)
        planner.layout()
        plan = planner.plan
        plan.run = executor.render(plan, profiled=False)
    finally:
        jitstats.charge_to(previous)
    if planner.backend is not None and not program.owner.placement_warned:
        _warn_placement(plan)
    return plan, outputs


def _warn_placement(plan: Plan) -> None:
    """Warn (once per session) that nodes of ``plan`` run on the CPU, not on its device."""
    cpu = [ps.step.node for ps in plan.steps if not ps.device and not ps.copy]
    if not cpu:
        return
    plan.program.owner.placement_warned = True
    copies = sum(1 for ps in plan.steps if ps.copy)
    ops = sorted({n.label for n in cpu})
    name = plan.program.backend.name.upper()
    warnings.warn(
        f"{len(cpu)} node(s) of this model run on the CPU, not on {name}: the {name} backend "
        f"cannot run {', '.join(ops)} (no kernel for them, or host work in their call); the "
        f"plan copies {copies} value(s) between the devices. InferenceSession.placement() "
        "lists where each node runs and every copy",
        RuntimeWarning,
        stacklevel=2,
    )


class _Planner:
    def __init__(self, program: Program, entry: list[int], start: int):
        self.program = program
        self.plan = Plan(program, list(entry), start)
        self.last = _last_uses(program, start)
        self.env: dict[int, Any] = {}
        self.written: dict[int, int] = {}  # value written by a bound call -> its step
        self.pinned: set[int] = set()  # arena roots that must stay out of the arena
        self.sharers: dict[int, list[int]] = {}  # root -> the values sharing its memory
        self.guards: list[int] = []  # steps with a guard
        self.made: dict[int, int] = {}  # value -> the step that made it (entry values: -1)
        self.scratch_ids = program.n_slots
        # the device backend nodes go to first, and the copies made for its steps and for the
        # CPU's: value -> its copy on the device / on the host
        backend = program.backend
        self.backend = backend if backend is not None and backend.name != "cpu" else None
        self.copies: dict[tuple[int, bool], int] = {}
        self.uploaded: dict[int, tuple[np.ndarray, Any]] = {}  # id -> (host array, copy)

    def run(
        self, values: list[Any], static: dict[int, Any], progress: Callable[[int], None] | None
    ) -> list[Any]:
        program, plan = self.program, self.plan
        for slot, value in program.constants.items():
            self.env[slot] = value
            plan.specs[slot] = spec_of(value, const=True)
        for slot, value in zip(plan.entry, values):
            self.env[slot] = value
            self.made[slot] = -1
            plan.specs[slot] = spec_of(value, const=slot in static)
            if self.backend is not None and lowering.on_device(value):
                plan.device.add(slot)
            if slot in static:
                plan.static[slot] = value
        for done, step in enumerate(program.steps[plan.start :], 1):
            with jitstats.planning(program, step.node):
                self.plan_step(step)
            if progress is not None:
                progress(done)
        outputs = []
        for s in program.output_slots:
            v = self.env.get(s)
            if isinstance(v, np.ndarray) and self.constant_root(s):
                v = v.copy()
            outputs.append(v)
        return outputs

    def constant_root(self, s: int) -> bool:
        """Whether ``s`` is (or views) a value the program or the plan holds."""
        r = self.plan.root(s)
        return r in self.program.constants or (r in self.plan.static and r not in self.plan.entry)

    def plan_step(self, step: Step) -> None:
        plan = self.plan
        for s in step.out_slots:
            if s >= 0:
                self.made[s] = step.index
        args = [self.env.get(s) if s >= 0 else None for s in step.in_slots]
        try:
            folded = None
            if self._foldable(step):
                folded = self._call_generic(step, args)
                if self._fold(step, folded):
                    return
            # A node of constants whose result is too large to keep runs as any other; where
            # it has no lowering, the result just computed is this run's (computing it again
            # would count its bytes twice against the run's cap).
            specs = tuple(plan.specs.get(s) if s >= 0 else None for s in step.in_slots)
            if self.backend is not None:
                bound = self._lower_device(step, specs)
                if bound is not None:  # its inputs copied to the device where they are not
                    step = self._placed(step, True)
                    args = [self.env.get(s) if s >= 0 else None for s in step.in_slots]
                    ps = self._inplace(step, bound)
                    ps.device = True
                    results = self._call_bound(ps, args)
                    self._record(ps, results, args)
                    plan.steps.append(ps)
                    return
                if folded is None and any(s in plan.device for s in step.in_slots):
                    step = self._placed(step, False)  # the CPU's copies of its inputs
                    args = [self.env.get(s) if s >= 0 else None for s in step.in_slots]
            bound = self._lower(step, specs)
            if bound is None:
                results = folded if folded is not None else self._call_generic(step, args)
                ps = PlannedStep(step, None, _impl_name(step))
            else:
                ps = self._inplace(step, bound)
                results = self._call_bound(ps, args)
        except OnnxJitError:
            raise
        except Exception as exc:
            raise execution_error(step.node, [describe_value(a) for a in args], exc) from exc
        self._record(ps, results, args)
        plan.steps.append(ps)

    # -- folding ------------------------------------------------------------------------------
    def _foldable(self, step: Step) -> bool:
        node = step.node
        if node.op_type in NONDETERMINISTIC or step.captures:
            return False  # random, or its subgraphs read values of the run
        if node.domain in ("", "ai.onnx") and node.op_type in _SHAPE_ONLY:
            return True
        consts = self.program.constants
        return all(s < 0 or s in consts or s in self.plan.static for s in step.in_slots)

    def _fold(self, step: Step, results: list[Any]) -> bool:
        """Keep ``results`` as constants of the plan when they are small tensors."""
        outs = [(s, v) for s, v in zip(step.out_slots, results) if s >= 0]
        if any(not isinstance(v, np.ndarray) or v.nbytes > STATIC_MAX_BYTES for _, v in outs):
            return False
        for s, v in outs:
            self.env[s] = v
            self.plan.specs[s] = spec_of(v, const=True)
            self.plan.static[s] = v
        return True

    # -- calls --------------------------------------------------------------------------------
    def _lower(
        self, step: Step, specs: tuple[Spec | None, ...], backend: Any = None
    ) -> Bound | None:
        lower = lowering.lowering_of(step.impl.fn)
        if lower is None:
            return None
        if backend is None:
            from onnxjit.backends.cpu import CPU as backend
        lc = LowerContext(step.node, step.kwargs, specs, backend, step.ctx, self.program.settings)
        return lower(lc)

    # -- placement on the device backend ------------------------------------------------------
    def _lower_device(self, step: Step, specs: tuple[Spec | None, ...]) -> Bound | None:
        """The node's call on the device backend, its host constants copied to the device
        once; None where the backend has no kernel for it (the node runs on the CPU)."""
        if step.captures:
            return None
        try:
            bound = self._lower(step, specs, self.backend)
        except (KeyError, AttributeError, NotImplementedError):
            return None  # a kernel the backend lacks, or a CPU-only part of the lowering
        return None if bound is None else self.backend.device_call(bound, self._upload)

    def _upload(self, value: np.ndarray) -> Any:
        """The device copy of a host constant of a bound call, made once per plan."""
        found = self.uploaded.get(id(value))
        if found is None:
            found = self.uploaded[id(value)] = (value, self.backend.to_device(value))
        return found[1]

    def _placed(self, step: Step, device: bool) -> Step:
        """``step`` reading copies of its tensor inputs in the memory it runs in (device or
        host), adding a copy step for each input not there yet."""
        slots = []
        for s in step.in_slots:
            if s >= 0 and (s in self.plan.device) != device and _is_tensor(self.env.get(s)):
                s = self._copy(s, device, step)
            slots.append(s)
        return replace(step, in_slots=tuple(slots))

    def _copy(self, s: int, device: bool, step: Step) -> int:
        """The value holding ``s`` copied to the device (``device``) or to the host."""
        key = (s, device)
        c = self.copies.get(key)
        if c is not None:
            return c
        plan = self.plan
        c = self.copies[key] = self.scratch_ids
        self.scratch_ids += 1
        v = self.env[s]
        spec = Spec(lowering.TENSOR, np.dtype(v.dtype), tuple(v.shape))
        self.last[c] = self.last.get(s, step.index)
        self.made[c] = step.index
        plan.specs[c] = spec
        if device and (s in self.program.constants or (s in plan.static and s not in plan.entry)):
            # a constant: copied once, held by the plan
            plan.static[c] = self.env[c] = self.backend.to_device(v)
            plan.device.add(c)
            return c
        fn = _upload if device else _download
        copy = replace(step, in_slots=(s,), out_slots=(c,), captures=())
        label = "to device" if device else "to host"
        ps = PlannedStep(copy, lowering.writes(fn, Out(0), In(0), outs=(spec,)), f"copy {label}")
        ps.device, ps.copy = device, label
        out = (
            self.backend.empty(spec.shape, spec.dtype)
            if device
            else np.empty(spec.shape, spec.dtype)
        )
        fn(out, v)
        self.written[c] = step.index
        self.env[c] = out
        if device:
            plan.device.add(c)
        plan.steps.append(ps)
        return c

    def _call_generic(self, step: Step, args: list[Any]) -> list[Any]:
        ctx = step.ctx
        if step.captures:
            ctx = replace(ctx, outer={name: self.env.get(s) for name, s in step.captures})
        fn = step.impl.fn
        result = fn(ctx, *args, **step.kwargs) if ctx is not None else fn(*args, **step.kwargs)
        n = len(step.out_slots)
        if n == 1:
            return [result[0] if isinstance(result, tuple) else result]
        out = list(result)
        return out + [None] * (n - len(out))

    def _inplace(self, step: Step, bound: Bound) -> PlannedStep:
        """The step with the bound call that writes over a dying input, where one may."""
        ps = PlannedStep(step, bound, bound.name)
        if not (bound.writes and bound.inplace and bound.with_inplace and self.program.arena):
            return ps
        plan = self.plan
        for i in bound.inplace:
            s = step.in_slots[i]
            if s < 0:
                continue
            r = plan.root(s)
            if r not in self.written or r in self.pinned or (s != r and s not in plan.whole):
                continue
            # every value in that memory dies here, and no other input of the step views it
            if self.last.get(r, -1) > step.index or any(
                self.last.get(t, -1) > step.index for t in self.sharers.get(r, ())
            ):
                continue
            if any(t != s and t >= 0 and plan.root(t) == r for t in step.in_slots):
                continue
            alt = bound.with_inplace(i)
            if alt is not None:
                return PlannedStep(step, alt, alt.name, inplace=i)
        return ps

    def _call_bound(self, ps: PlannedStep, args: list[Any]) -> list[Any]:
        b = ps.bound
        outs: list[Any] = []
        if b.writes:
            empty = self.backend.empty if ps.device else np.empty
            outs = [empty(spec.shape, spec.dtype) for spec in b.outs]
            if ps.inplace is not None:
                outs[0] = args[ps.inplace]
        resolved = [_resolve(a, args, outs) for a in b.args]
        result = b.fn(*resolved)
        ps.call = _entry_point(b.fn, resolved)
        if b.writes:
            return outs
        return [result] if len(ps.step.out_slots) == 1 else list(result)

    # -- what a step's run tells ----------------------------------------------------------------
    def _record(self, ps: PlannedStep, results: list[Any], args: list[Any]) -> None:
        """Specs, views, guards and arena candidates of a step that ran."""
        step, b = ps.step, ps.bound
        plan = self.plan
        inputs = [(s, a) for s, a in zip(step.in_slots, args) if s >= 0]
        inputs += [(s, self.env.get(s)) for _, s in step.captures]
        guard = []
        containers = False
        for j, v in enumerate(results):
            s = step.out_slots[j] if j < len(step.out_slots) else -1
            if b is not None and b.writes:
                if s < 0:
                    s = ps.scratch[j] = self.scratch_ids
                    self.scratch_ids += 1
                self.written[s] = step.index
                plan.specs[s] = b.outs[j]
                self.env[s] = v
                if ps.device:
                    plan.device.add(s)
                if ps.inplace is not None and j == 0:
                    self._share(s, step.in_slots[ps.inplace], whole=True)
                continue
            if s < 0:
                continue
            self.env[s] = v
            if b is not None and b.outs is not None:
                plan.specs[s] = b.outs[j]
            else:
                plan.specs[s] = spec_of(v)
                guard.append(j)
                if plan.specs[s].kind not in (lowering.TENSOR, lowering.NONE):
                    plan.classes[s] = type(v)
            if ps.device and v is not None:
                plan.device.add(s)
                k = b.views[j] if j < len(b.views) else None
                if k is not None:  # a view of a device input: never all of its memory
                    self._share(s, step.in_slots[k], False)
                continue
            if not isinstance(v, np.ndarray):
                containers = containers or v is not None
                continue
            # memory shared with an input: declared by the lowering, else found
            viewed = -1
            if b is not None:
                k = b.views[j] if j < len(b.views) else None
                viewed = step.in_slots[k] if k is not None else -1
            else:
                for t, a in inputs:
                    if isinstance(a, np.ndarray) and np.may_share_memory(v, a):
                        viewed = t
                        break
            if viewed >= 0:
                root = self.env.get(plan.root(viewed))
                whole = (
                    isinstance(root, np.ndarray)
                    and v.flags.c_contiguous
                    and v.nbytes == root.nbytes
                    and v.ctypes.data == root.ctypes.data
                )
                self._share(s, viewed, whole)
        if containers:
            # a sequence or map may hold its inputs: keep their memory out of the arena
            for t, _ in inputs:
                self.pinned.add(plan.root(t))
        ps.guard = tuple(guard)
        if guard:
            self.guards.append(step.index)

    def _share(self, s: int, t: int, whole: bool) -> None:
        """Value ``s`` shares value ``t``'s memory (a view of it, or written over it);
        ``whole``: it is all of that memory, contiguous from its start (a reshape, an
        in-place output), not a part of it (a slice, a split's part)."""
        r = self.plan.root(t)
        self.plan.alias[s] = r
        if whole:
            self.plan.whole.add(s)
        self.sharers.setdefault(r, []).append(s)

    def _guard_live(self) -> None:
        """The values alive after each guarded step: what its continuation starts from."""
        consts = self.program.constants
        by_start = sorted((at, s) for s, at in self.made.items() if s not in consts)
        for index in self.guards:
            live = [s for at, s in by_start if at <= index and self.last.get(s, -1) > index]
            self.plan.guard_live[index] = tuple(sorted(live))

    # -- buffers ------------------------------------------------------------------------------
    def layout(self) -> None:
        """Arena offsets of the written values, by liveness (see the module docstring), and
        the live values of each guard."""
        self._guard_live()
        plan, program = self.plan, self.program
        for s in program.output_slots:
            self.pinned.add(plan.root(s))
        if not program.arena:
            return
        end = len(program.steps)
        span: dict[int, list[int]] = {}
        for s, at in self.written.items():
            if plan.root(s) == s and s not in self.pinned:
                span[s] = [at, max(at, min(self.last.get(s, at), end))]
        for r, shared in self.sharers.items():
            if r in span:
                for s in shared:
                    span[r][1] = max(span[r][1], min(self.last.get(s, span[r][0]), end))
        host = {r: v for r, v in span.items() if r not in plan.device}
        plan.arena_bytes = self._offsets(host)
        plan.device_arena_bytes = self._offsets({r: v for r, v in span.items() if r not in host})

    def _offsets(self, span: dict[int, list[int]]) -> int:
        """Arena offsets of the values of ``span`` (root -> [first step, last step]); the
        arena's size."""
        plan = self.plan
        # Values in order of their first step, each at the lowest free range that holds it
        # (free ranges come back when the values in them die, and merge with their
        # neighbours); the arena grows at its end when none does.
        free: list[list[int]] = []  # [offset, bytes], sorted by offset
        top = 0
        dying: list[tuple[int, int, int]] = []  # (last step, offset, bytes), a heap
        for r in sorted(span, key=lambda r: (span[r][0], r)):
            lo, hi = span[r]
            while dying and dying[0][0] < lo:
                _, o, n = heapq.heappop(dying)
                _release(free, o, n)
            n = -(-plan.specs[r].nbytes // ALIGN) * ALIGN
            offset = _claim(free, n)
            if offset is None:
                if free and free[-1][0] + free[-1][1] == top:  # grow the last free range
                    offset = free.pop()[0]
                else:
                    offset = top
                top = offset + n
            plan.arena_offsets[r] = offset
            heapq.heappush(dying, (hi, offset, n))
        return top


def _is_tensor(value: Any) -> bool:
    return isinstance(value, np.ndarray) or lowering.on_device(value)


def _upload(out: Any, value: np.ndarray) -> None:
    """Copy host array ``value`` into device array ``out`` (on the run's stream)."""
    from onnxjit.kernels.cuda.runtime import stream

    out.copy_to_device(np.ascontiguousarray(value), stream=stream())


def _download(out: np.ndarray, value: Any) -> None:
    """Copy device array ``value`` into host array ``out`` (waits for its producer)."""
    from onnxjit.kernels.cuda.runtime import stream

    value.copy_to_host(out, stream=stream())


def _claim(free: list[list[int]], n: int) -> int | None:
    """Take ``n`` bytes from the first free range that holds them; its offset, or None."""
    for i, (o, size) in enumerate(free):
        if size >= n:
            if size == n:
                free.pop(i)
            else:
                free[i] = [o + n, size - n]
            return o
    return None


def _release(free: list[list[int]], o: int, n: int) -> None:
    """Give the range [o, o + n) back, merged with the free ranges it touches."""
    i = bisect.bisect_left(free, [o, 0])
    if i < len(free) and free[i][0] == o + n:
        n += free.pop(i)[1]
    if i > 0 and free[i - 1][0] + free[i - 1][1] == o:
        free[i - 1][1] += n
    else:
        free.insert(i, [o, n])


def _resolve(a: Any, args: list[Any], outs: Sequence[Any]) -> Any:
    t = type(a)
    if t is In or t is Out:
        v = args[a.index] if t is In else outs[a.index]
        return v if v is None else transformed(a, v)
    return a


def transformed(a: In | Out, v: np.ndarray) -> np.ndarray:
    """``v`` as argument ``a`` passes it: reinterpreted as ``a.view``, reshaped to ``a.shape``
    or flattened."""
    if a.view is not None:
        v = v.view(a.view)
    if a.shape is not None:
        return v.reshape(a.shape)
    return v.reshape(-1) if a.flat else v


def _entry_point(fn: Any, args: Sequence[Any]) -> Any:
    """What the plan calls for ``fn`` called with arguments like ``args``: a Numba
    dispatcher's compiled entry point for their types (skipping its type dispatch, a good
    part of a small kernel's call), where every array among them is C-contiguous and aligned,
    as the plan keeps them from run to run (the same element types and ranks); else ``fn``."""
    if not isinstance(fn, CPUDispatcher):
        return fn
    for a in args:
        if isinstance(a, np.ndarray) and not (a.flags.c_contiguous and a.flags.aligned):
            return fn
    try:
        sig = tuple(fn.typeof_pyval(a) for a in args)
    except Exception:  # an argument Numba cannot type: the dispatcher reports it
        return fn
    cres = fn.overloads.get(sig)
    return fn if cres is None else cres.entry_point


def _impl_name(step: Step) -> str:
    fn = step.impl.fn
    return f"{fn.__module__}.{fn.__qualname__}"
