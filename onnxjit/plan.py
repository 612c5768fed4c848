"""Execution programs: a graph turned into a flat list of bound steps over value slots.

A :class:`Program` is built once per graph (main graph or subgraph) after the registry has bound
each node to its implementation. Values live in a list indexed by slot; initializers are placed
in their slots once; a value is released after its last use so memory stays bounded, and its
buffer goes to the session's pool (:mod:`onnxjit.buffers`) when nothing else holds it. The first
run of each input signature records the element type and shape of every value
(:meth:`Program.run`'s ``record``, :func:`plan_summary`), which ``InferenceSession.stats()``
reports.
"""

from __future__ import annotations

import logging
import math
import operator
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from onnxjit import buffers, ir, steps_code
from onnxjit.errors import ExecutionError, OnnxJitError
from onnxjit.registry import MISS, NodeContext, OpImpl, fast_path_of

log = logging.getLogger("onnxjit")


@dataclass
class Step:
    node: ir.Node
    fn: Callable[..., Any]
    in_slots: tuple[int, ...]  # -1 for an omitted optional input
    out_slots: tuple[int, ...]  # -1 for an omitted optional output
    kwargs: dict[str, Any]
    ctx: NodeContext | None
    variadic: bool
    n_fixed: int  # positional parameters before *args
    release: tuple[int, ...] = ()
    # (argument position, times the value appears among the arguments) for each input read
    # for the last time here: its buffer may go to the session's pool after the call.
    recycle: tuple[tuple[int, int], ...] = ()
    # (name, slot) of values that this node's subgraphs read from the enclosing scopes.
    captures: tuple = ()
    # True when an output of this step is an output of the graph (see _call_impl).
    makes_output: bool = False
    # The op's fast-path preparer (registry.fast_path) and the fast path prepared for the
    # arguments of the last run (None until then, or when the op has none for them).
    prepare: Callable[..., Any] | None = None
    fast: Callable[..., Any] | None = None


class Subgraph:
    """A graph attribute bound for execution; ops run it with ``ctx.run_subgraph``."""

    def __init__(
        self, graph: ir.Graph, scope: frozenset[str], settings: Mapping[str, str] | None = None
    ):
        self.graph = graph
        self.program = Program(graph, scope, settings)

    @property
    def input_names(self) -> list[str]:
        return [v.name for v in self.graph.inputs]

    @property
    def output_names(self) -> list[str]:
        return self.program.output_names


@dataclass
class Profiler:
    """Collects per-node timings when profiling is on (Chrome-trace events)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    t0: int = field(default_factory=time.perf_counter_ns)


class Program:
    """A runnable form of one graph.

    ``outer_names`` are names the graph reads from an enclosing scope (subgraphs only); their
    values are passed to :meth:`run` in ``outer``.
    """

    def __init__(
        self,
        graph: ir.Graph,
        scope: frozenset[str] = frozenset(),
        settings: Mapping[str, str] | None = None,
    ):
        self.graph = graph
        # the session's config entries, for kernel choices (NodeContext.settings)
        self.settings = dict(settings or {})
        self.slots: dict[str, int] = {}
        self.const_values: list[tuple[int, Any]] = []
        for name, value in graph.initializers.items():
            self.const_values.append((self._slot(name), value))
        self.input_slots = [self._slot(v.name) for v in graph.inputs]
        # Names read from enclosing scopes, in first-use order.
        self.outer_slots: dict[str, int] = {}
        defined = set(graph.initializers) | {v.name for v in graph.inputs}
        self.steps: list[Step] = []
        for node in graph.nodes:
            for name in node.inputs:
                if name and name not in defined:
                    self.outer_slots.setdefault(name, self._slot(name))
            step = self._bind(node, scope | defined)
            for name in step.captures:
                if name not in defined:
                    self.outer_slots.setdefault(name, self._slot(name))
            step.captures = tuple((n, self.slots[n]) for n in step.captures)
            self.steps.append(step)
            defined.update(o for o in node.outputs if o)
        self.output_names = [v.name for v in graph.outputs]
        for name in self.output_names:
            if name not in defined:
                self.outer_slots.setdefault(name, self._slot(name))
        self.output_slots = [self.slots[n] for n in self.output_names]
        self._compute_releases()
        outs = set(self.output_slots)
        for step in self.steps:
            step.makes_output = any(s in outs for s in step.out_slots)
        self._fast: list[tuple] | None = None  # built by the first _run_steps
        # the steps as generated straight-line code (steps_code), False when too long
        self._straight: Callable[[list[Any]], None] | bool | None = None
        self._env_template: list[Any] | None = None  # built by the first run
        self.n_slots = len(self.slots)
        self.runs = 0  # calls of run(): every step runs once per call (stats() reads it)
        # Buffers of constants: an output that views one is copied before it is returned, so
        # a caller writing into an output can never change the session's weights.
        self.const_roots = {id(_root(v)) for _, v in self.const_values if isinstance(v, np.ndarray)}

    def _slot(self, name: str) -> int:
        if name not in self.slots:
            self.slots[name] = len(self.slots)
        return self.slots[name]

    def _bind(self, node: ir.Node, scope: frozenset[str] | set[str]) -> Step:
        impl: OpImpl = node.impl
        kwargs = dict(impl.attrs)
        captures: list[str] = []
        for key, value in node.attrs.items():
            if isinstance(value, ir.Graph):
                sub = Subgraph(value, frozenset(scope), self.settings)
                captures.extend(sub.program.outer_slots)
                value = sub
            elif isinstance(value, list) and value and isinstance(value[0], ir.Graph):
                subs = [Subgraph(g, frozenset(scope), self.settings) for g in value]
                for sub in subs:
                    captures.extend(sub.program.outer_slots)
                value = subs
            kwargs[key] = value
        ctx = None
        if impl.takes_ctx:
            ctx = NodeContext(
                name=node.name,
                label=node.label,
                n_outputs=len(node.outputs),
                outputs_used=tuple(bool(o) for o in node.outputs),
                const_inputs=tuple(bool(n) and n in self.graph.initializers for n in node.inputs),
                settings=self.settings,
            )
        in_slots = tuple(self._slot(n) if n else -1 for n in node.inputs)
        out_slots = tuple(self._slot(n) if n else -1 for n in node.outputs)
        n_fixed = len(impl.inputs) - (1 if impl.variadic else 0)
        step = Step(node, impl.fn, in_slots, out_slots, kwargs, ctx, impl.variadic, n_fixed)
        step.captures = tuple(dict.fromkeys(captures))
        step.prepare = fast_path_of(impl.fn)
        return step

    def _compute_releases(self) -> None:
        keep = set(self.output_slots) | {s for s, _ in self.const_values}
        keep |= set(self.outer_slots.values())
        last_use: dict[int, int] = {}
        for i, step in enumerate(self.steps):
            for s in step.in_slots:
                if s >= 0:
                    last_use[s] = i
            for _, s in step.captures:
                last_use[s] = i
        per_step: dict[int, list[int]] = {}
        for s, i in last_use.items():
            if s not in keep:
                per_step.setdefault(i, []).append(s)
        # the caller's feeds (a graph input) stay referenced by the caller through the run
        fed = set(self.input_slots)
        for i, step in enumerate(self.steps):
            step.release = tuple(per_step.get(i, ()))
            slots = _padded_slots(step)
            step.recycle = tuple(
                (slots.index(s), slots.count(s))
                for s in step.release
                if s in slots and s not in fed
            )

    def run(
        self,
        inputs: Sequence[Any],
        outer: dict[str, Any] | None = None,
        profiler: Profiler | None = None,
        progress: Callable[[int], None] | None = None,
        record: dict[str, tuple[np.dtype, tuple[int, ...]]] | None = None,
    ) -> list[Any]:
        """Run the graph on positional ``inputs`` (graph input order); return its outputs.

        ``progress``, when given, is called with the number of steps done after each step.
        ``record``, when given, receives ``name -> (dtype, shape)`` for every tensor
        value the run produced (not initializers, nor values of subgraphs)."""
        self.runs += 1
        template = self._env_template
        if template is None:
            template = [None] * self.n_slots
            for slot, value in self.const_values:
                template[slot] = value
            self._env_template = template
        env = template.copy()  # the constants in place, every other slot empty
        for slot, value in zip(self.input_slots, inputs):
            env[slot] = value
        if self.outer_slots:
            outer = outer or {}
            for name, slot in self.outer_slots.items():
                if name in outer:
                    env[slot] = outer[name]
        if profiler is None and not outer and progress is None and record is None:
            self._run_steps(env)
        else:
            self._run_steps_traced(env, outer, profiler, progress, record)
        outputs = [env[s] for s in self.output_slots]
        if self.const_roots:
            for i, v in enumerate(outputs):
                if isinstance(v, np.ndarray) and id(_root(v)) in self.const_roots:
                    outputs[i] = v.copy()
        return outputs

    def _run_steps(self, env: list[Any]) -> None:
        """The steps without profiling or outer scope: the per-node path kept short (it is
        the whole cost of a run on small tensors). Once the program has run a few times, runs
        the generated straight-line version of the loop below (onnxjit.steps_code) unless the
        program is too long for one."""
        straight = self._straight
        if straight is None and self.runs > steps_code.AFTER_RUNS:
            straight = steps_code.generate(self.steps, _call_impl, _padded_slots, _execution_error)
            straight = self._straight = straight or False
        if straight:
            straight(env)
            return
        fast = self._fast
        if fast is None:
            fast = self._fast = [
                (
                    step,
                    step.fn,
                    step.ctx,
                    _arg_getter(_padded_slots(step)),
                    step.kwargs,
                    step.release,
                    step.out_slots[0] if len(step.out_slots) == 1 else None,
                    bool(step.captures),
                    step.recycle,
                )
                for step in self.steps
            ]
        pool = buffers.recycling()
        ndarray = np.ndarray
        min_bytes = buffers.MIN_BYTES
        for step, fn, ctx, getter, kwargs, release, out1, captures, recycle in fast:
            args = getter(env)
            if captures:
                ctx = replace(ctx, outer={name: env[slot] for name, slot in step.captures})
            for s in release:  # see _run_steps_traced
                env[s] = None
            try:
                # _call's first branch inline: a call frame less per step
                quick = step.fast
                result = MISS if quick is None else quick(*args)
                if result is MISS:
                    result = _call_impl(step, fn, ctx, args, kwargs)
            except OnnxJitError:
                raise
            except Exception as exc:
                raise _execution_error(step.node, list(args), exc) from exc
            if out1 is not None:
                env[out1] = result[0] if isinstance(result, tuple) else result
            else:
                for slot, value in zip(step.out_slots, result):
                    if slot >= 0:
                        env[slot] = value
            result = value = None
            if recycle and pool is not None:
                for pos, held in recycle:
                    a = args[pos]
                    # the cheap tests here: most released values are small
                    if a.__class__ is ndarray and a.nbytes >= min_bytes:
                        pool.give(a, held + 1)  # + the name a
                a = None
            args = None

    def _run_steps_traced(
        self,
        env: list[Any],
        outer: dict[str, Any] | None,
        profiler: Profiler | None,
        progress: Callable[[int], None] | None = None,
        record: dict[str, tuple[np.dtype, tuple[int, ...]]] | None = None,
    ) -> None:
        if record is not None:
            for v, slot in zip(self.graph.inputs, self.input_slots):
                _record(record, v.name, env[slot])
        pool = buffers.recycling()
        for done, step in enumerate(self.steps, 1):
            args = tuple([env[s] if s >= 0 else None for s in _padded_slots(step)])
            t0 = time.perf_counter_ns() if profiler is not None else 0
            ctx = step.ctx
            if step.captures:
                scope = dict(outer) if outer else {}
                scope.update((name, env[slot]) for name, slot in step.captures)
                ctx = replace(ctx, outer=scope)
            # Values read for the last time are dropped before the call, so that an op may
            # reuse the buffer of an input nothing else references (see
            # onnxjit.ops.fused_elementwise: it checks the reference count).
            for s in step.release:
                env[s] = None
            try:
                result = _call(step, step.fn, ctx, args, step.kwargs)
            except OnnxJitError:
                raise
            except Exception as exc:
                raise _execution_error(step.node, args, exc) from exc
            if profiler is not None:
                t1 = time.perf_counter_ns()
                profiler.events.append(
                    {
                        "name": step.node.name or step.node.label,
                        "cat": "Node",
                        "ph": "X",
                        "ts": (t0 - profiler.t0) / 1000.0,
                        "dur": (t1 - t0) / 1000.0,
                        "pid": 0,
                        "tid": 0,
                        "args": {"op": step.node.label},
                    }
                )
            if len(step.out_slots) == 1:
                if isinstance(result, tuple):
                    result = result[0]
                env[step.out_slots[0]] = result
            else:
                for slot, value in zip(step.out_slots, result):
                    if slot >= 0:
                        env[slot] = value
            if record is not None:
                for name, slot in zip(step.node.outputs, step.out_slots):
                    if slot >= 0:
                        _record(record, name, env[slot])
            result = value = None  # hold no reference past the step (see the release above)
            if pool is not None:
                for pos, held in step.recycle:
                    pool.give(args[pos], held)
            args = None
            if progress is not None:
                progress(done)


# Frames in which a step runs: onnxjit.jitstats charges a kernel compiled there to the step.
Program._STEP_CODES = frozenset({Program._run_steps.__code__, Program._run_steps_traced.__code__})


def _call(step: Step, fn: Callable[..., Any], ctx: Any, args: tuple, kwargs: dict) -> Any:
    """Run one step: its fast path when one was prepared for arguments like these, else the
    implementation (then prepare a fast path for the next run)."""
    fast = step.fast
    if fast is not None:
        result = fast(*args)
        if result is not MISS:
            return result
    return _call_impl(step, fn, ctx, args, kwargs)


def _call_impl(step: Step, fn: Callable[..., Any], ctx: Any, args: tuple, kwargs: dict) -> Any:
    """Run one step's implementation, then prepare its fast path for the next run."""
    result = fn(ctx, *args, **kwargs) if ctx is not None else fn(*args, **kwargs)
    prepare = step.prepare
    if prepare is not None:
        step.fast = None
        # A fast path whose output leaves the graph keeps its own output buffer (a Slot made
        # with no pool current, reused once the caller drops it) rather than drawing from the
        # pool: the same reuse from run to run without the pool's bookkeeping, which cost a
        # one-node model 1-2 us per run (its records are out of cache by then).
        prev = buffers.activate(None) if step.makes_output else buffers.current()
        try:
            step.fast = prepare(ctx, args, kwargs, result)
        except Exception:  # a fast path is an optimisation: without one the node still runs
            log.debug("no fast path for %s", step.node.describe(), exc_info=True)
        finally:
            buffers.restore(prev)
    return result


def _padded_slots(step: Step) -> tuple[int, ...]:
    """Input slots, with -1 (None) for trailing optional inputs the node leaves out."""
    slots = step.in_slots
    if not step.variadic and len(slots) < step.n_fixed:
        slots = slots + (-1,) * (step.n_fixed - len(slots))
    return slots


def _arg_getter(slots: tuple[int, ...]) -> Callable[[list[Any]], Sequence[Any]]:
    """A function of the value list giving a step's arguments as a tuple (None for slot -1);
    the common case of no omitted input is one C-level itemgetter call. Always a tuple: the
    reference counts that FusedElementwise reads to find buffers it may reuse depend on the
    container (see onnxjit.ops.fused_elementwise._baseline)."""
    if any(s < 0 for s in slots):
        return lambda env: tuple([env[s] if s >= 0 else None for s in slots])
    if len(slots) == 0:
        return lambda env: ()
    if len(slots) == 1:
        (only,) = slots
        return lambda env: (env[only],)
    return operator.itemgetter(*slots)


def _record(record: dict[str, tuple[np.dtype, tuple[int, ...]]], name: str, value: Any) -> None:
    if isinstance(value, np.ndarray):
        record[name] = (value.dtype, value.shape)


def plan_summary(program: Program, record: dict[str, tuple[np.dtype, tuple[int, ...]]]) -> dict:
    """What one input signature's run needs: ``values`` (tensors produced by nodes),
    ``value_bytes`` (their total size) and ``peak_live_bytes`` (the most that are alive at
    once: a value lives from the step that makes it to the last step that reads it, graph
    outputs to the end), with ``shapes``: name -> ``[dtype name, shape]`` for every recorded
    value, graph inputs included (the name NumPy or ml_dtypes gives: "float32",
    "float8_e5m2")."""
    nbytes: dict[int, int] = {}
    for name, (dt, shape) in record.items():
        slot = program.slots.get(name)
        if slot is not None:
            nbytes[slot] = int(dt.itemsize * math.prod(shape))
    live: set[int] = set()
    total = peak = made = alive = 0
    for step in program.steps:
        for s in step.out_slots:
            if s >= 0 and s in nbytes:
                live.add(s)
                made += 1
                total += nbytes[s]
                alive += nbytes[s]
        peak = max(peak, alive)
        for s in step.release:
            if s in live:
                live.remove(s)
                alive -= nbytes[s]
    return {
        "values": made,
        "value_bytes": total,
        "peak_live_bytes": peak,
        "shapes": {k: [dt.name, list(shape)] for k, (dt, shape) in record.items()},
    }


def _root(a: np.ndarray) -> object:
    """The object that owns an array's memory (follows .base)."""
    obj: object = a
    while isinstance(obj, np.ndarray) and obj.base is not None:
        obj = obj.base
    return obj


def _describe_value(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"{v.dtype}{list(v.shape)}"
    if v is None:
        return "None"
    return type(v).__name__


def _execution_error(node: ir.Node, args: list[Any], exc: Exception) -> ExecutionError:
    shapes = ", ".join(
        f"{name or '<omitted>'}: {_describe_value(a)}" for name, a in zip(node.inputs, args)
    )
    return ExecutionError(
        f"{node.describe()} failed on inputs ({shapes}): {type(exc).__name__}: {exc}. "
        "Check the input shapes against the operator's rules; if they are valid, this is an "
        "onnxjit bug, please report it with the model"
    )
