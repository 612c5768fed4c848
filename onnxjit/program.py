"""A graph made runnable: its nodes bound to steps over value slots, and a plan per signature.

A :class:`Program` is built once per graph (the main graph, and each subgraph attribute of
If, Loop and Scan) after the registry has bound every node to its implementation. It numbers
the graph's values (slots), binds each node's attributes (schema defaults filled in, graph
attributes made into :class:`Subgraph` programs) and works out which values each node's
subgraphs read from enclosing scopes.

:meth:`Program.run` looks the input signature up (element types and shapes of the inputs, and
of the values read from enclosing scopes) in a bounded LRU of :class:`onnxjit.plan.Plan`; a
new signature is planned by running it once (:func:`onnxjit.plan.build`). A plan is what runs
afterwards: one generated function per plan, the same mechanism for main graphs and subgraphs.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnxjit import interrupt, ir, registry
from onnxjit.errors import ExecutionError
from onnxjit.lowering import on_device
from onnxjit.registry import NodeContext, OpImpl

# Plans kept per program: a model fed many shapes (a dynamic batch) re-plans the ones it
# dropped. Each plan holds its generated code, its bound kernels and its idle arenas.
MAX_PLANS = 32


@dataclass
class Owner:
    """What a program, and the programs of its subgraphs, know of the session that runs
    them: ``records``, the list its compiled and loaded kernels are reported to
    (:mod:`onnxjit.jitstats`), charged while a signature is planned; ``placement_warned``,
    whether the session has warned that a plan runs nodes off its device backend."""

    records: list[Any] | None = None
    placement_warned: bool = False


@dataclass
class Step:
    """One node bound for execution.

    ``in_slots`` has one entry per implementation parameter (trailing omitted optional inputs
    padded with -1) or, for a variadic implementation, one per input; ``out_slots`` one per
    node output (-1 for an omitted one). ``captures`` are the (name, slot) pairs of values
    the node's subgraphs read from this program's scope or an enclosing one.
    """

    index: int
    node: ir.Node
    impl: OpImpl
    kwargs: dict[str, Any]
    ctx: NodeContext | None
    in_slots: tuple[int, ...]
    out_slots: tuple[int, ...]
    captures: tuple[tuple[str, int], ...] = ()


class Subgraph:
    """A graph attribute bound for execution; ops run it with ``ctx.run_subgraph``."""

    def __init__(self, graph: ir.Graph, scope: frozenset[str], parent: Program):
        self.graph = graph
        self.program = Program(graph, scope, parent.settings, parent.arena, parent.owner)

    @property
    def input_names(self) -> list[str]:
        return [v.name for v in self.graph.inputs]

    @property
    def output_names(self) -> list[str]:
        return self.program.output_names

    def iterations(self, outer: Mapping[str, Any] | None) -> BodyRunner:
        """A runner for many calls of this body with the same enclosing-scope values (the
        iterations of one Loop or Scan node call); see :class:`BodyRunner`."""
        return BodyRunner(self.program, outer)


class BodyRunner:
    """Runs one subgraph body many times with the same enclosing-scope values: a Loop's or a
    Scan's iterations.

    A call ``runner(inputs)`` returns what ``program.run_subgraph(inputs, outer)`` returns,
    and checks ``RunOptions.terminate`` first (the point where a run can be stopped). Between
    calls whose inputs have the signature of the previous call (element types and shapes,
    C-contiguous arrays: what a Scan's slices and a loop's carried values usually keep), it
    calls the plan's generated function directly: no signature of the enclosing-scope
    values, no plan lookup, no copies; an input that is not a C-contiguous ndarray, or whose
    signature changed, takes :meth:`Program.run_subgraph` (planning a new signature there).
    """

    __slots__ = ("program", "scope", "outer", "key", "fn")

    def __init__(self, program: Program, outer: Mapping[str, Any] | None):
        self.program = program
        self.scope = outer or {}
        self.outer = [self.scope.get(name) for name in program.outer_names]
        self.key: list[Any] | None = None  # the signature of the last call's inputs
        self.fn: Callable[..., list[Any]] | None = None  # its plan's function

    def __call__(self, inputs: list[Any]) -> list[Any]:
        interrupt.check()
        key = [
            (v.dtype, v.shape) if type(v) is np.ndarray and v.flags.c_contiguous else _NO_KEY
            for v in inputs
        ]
        fn = self.fn
        if fn is not None and key == self.key:
            self.program.runs += 1
            return fn(inputs + self.outer if self.outer else inputs)
        program = self.program
        fixed = [
            np.ascontiguousarray(v) if type(v) is np.ndarray and not v.flags.c_contiguous else v
            for v in inputs
        ]
        outs = program.run(fixed, self.scope)
        plan = program._plans.get(signature(fixed + self.outer))
        if _NO_KEY in key or plan is None:
            self.fn = self.key = None  # not ndarrays (or re-planned away): the full path
        else:
            self.key, self.fn = key, plan.run
        return outs


class Program:
    """A runnable form of one graph (see the module docstring).

    ``outer_names`` are the names the graph reads from enclosing scopes (subgraphs only),
    in first-use order; :meth:`run` takes their values in ``outer``.
    """

    def __init__(
        self,
        graph: ir.Graph,
        scope: frozenset[str] = frozenset(),
        settings: Any = None,
        arena: bool = True,
        owner: Owner | None = None,
        backend: Any = None,
    ):
        self.graph = graph
        # the backend plans place nodes on first (None: the CPU); a node it cannot run runs
        # on the CPU, with copies (subgraph bodies run on the CPU)
        self.backend = backend
        # the session's onnxjit.config.SessionSettings (None: the defaults)
        self.settings = settings
        # whether plans place intermediate tensors in an arena (SessionOptions'
        # enable_cpu_mem_arena and enable_mem_reuse), else allocate them per run
        self.arena = arena
        # shared by a program and its subgraphs' programs: whom compiles are charged to
        self.owner = owner if owner is not None else Owner()
        self.slots: dict[str, int] = {}
        self.names: list[str] = []
        fed = {v.name for v in graph.inputs}
        # Initializers that no feed can override: the same value in every run.
        self.constants: dict[int, Any] = {
            self._slot(name): value for name, value in graph.initializers.items() if name not in fed
        }
        self.input_slots = [self._slot(v.name) for v in graph.inputs]
        self.outer_slots: dict[str, int] = {}
        defined = set(graph.initializers) | fed
        self.steps: list[Step] = []
        for node in graph.nodes:
            for name in node.inputs:
                if name and name not in defined:
                    self.outer_slots.setdefault(name, self._slot(name))
            step = self._bind(len(self.steps), node, frozenset(scope | defined))
            for name, _ in step.captures:
                if name not in defined:
                    self.outer_slots.setdefault(name, self._slot(name))
            self.steps.append(step)
            defined.update(o for o in node.outputs if o)
        self.output_names = [v.name for v in graph.outputs]
        for name in self.output_names:
            if name not in defined:
                self.outer_slots.setdefault(name, self._slot(name))
        self.output_slots = [self.slots[n] for n in self.output_names]
        self.outer_names = list(self.outer_slots)
        # Slots a plan takes as its inputs: the graph's, then the outer scopes' values.
        self.entry_slots = self.input_slots + list(self.outer_slots.values())
        self.n_slots = len(self.slots)
        self.runs = 0  # calls of run() (stats() reads it)
        self._plans: OrderedDict[tuple, Any] = OrderedDict()
        self._recent: Any = None  # the plan of the last run
        self._lock = threading.RLock()

    def bind_step(self, node: ir.Node) -> Step:
        """``node`` bound as a step of this program (its values get slots here)."""
        return self._bind(len(self.steps), node, frozenset())

    def _slot(self, name: str) -> int:
        slot = self.slots.get(name)
        if slot is None:
            slot = self.slots[name] = len(self.names)
            self.names.append(name)
        return slot

    def _bind(self, index: int, node: ir.Node, scope: frozenset[str]) -> Step:
        impl: OpImpl = node.impl
        kwargs = registry.attribute_values(node)
        captures: list[str] = []
        for key, value in node.attrs.items():
            graphs = ir.attr_graphs(value)
            if graphs:
                subs = [Subgraph(g, scope, self) for g in graphs]
                for sub in subs:
                    captures.extend(sub.program.outer_names)
                value = subs[0] if isinstance(value, ir.Graph) else subs
            kwargs[key] = value
        ctx = None
        if impl.takes_ctx:
            ctx = NodeContext(
                name=node.name,
                label=node.label,
                n_outputs=len(node.outputs),
                outputs_used=tuple(bool(o) for o in node.outputs),
                settings=self.settings,
            )
        in_slots = tuple(self._slot(n) if n else -1 for n in node.inputs)
        n_fixed = len(impl.inputs) - (1 if impl.variadic else 0)
        if not impl.variadic and len(in_slots) < n_fixed:
            in_slots = in_slots + (-1,) * (n_fixed - len(in_slots))
        out_slots = tuple(self._slot(n) if n else -1 for n in node.outputs)
        names = tuple(dict.fromkeys(captures))
        return Step(
            index,
            node,
            impl,
            kwargs,
            ctx,
            in_slots,
            out_slots,
            tuple((n, self._slot(n)) for n in names),
        )

    # -- running ----------------------------------------------------------------------------
    def run(
        self,
        inputs: Sequence[Any],
        outer: Mapping[str, Any] | None = None,
        profiler: Any = None,
        progress: Callable[[int], None] | None = None,
    ) -> list[Any]:
        """Run the graph on positional ``inputs`` (graph input order), with the values it
        reads from enclosing scopes in ``outer``; return its outputs in graph output order.

        ``profiler`` (an :class:`onnxjit.plan.Profiler`) records one event per step;
        ``progress`` is called with the number of steps planned while a new signature is
        planned."""
        self.runs += 1
        values = list(inputs)
        if self.outer_names:
            outer = outer or {}
            values += [outer.get(name) for name in self.outer_names]
        key = signature(values)
        plan = self._plans.get(key)
        if plan is None:
            return self._plan_and_run(key, values, progress)
        if plan is not self._recent:  # least recently used order, kept cheaply
            self._recent = plan
            self._plans.move_to_end(key)
        if profiler is not None:
            return plan.run_profiled(values, profiler)
        return plan.run(values)

    def plan_of(self, inputs: Sequence[Any], outer: Mapping[str, Any] | None = None) -> Any:
        """The plan kept for the signature of these inputs (and outer values), or None."""
        values = list(inputs)
        if self.outer_names:
            outer = outer or {}
            values += [outer.get(name) for name in self.outer_names]
        return self._plans.get(signature(values))

    def run_subgraph(self, inputs: Sequence[Any], outer: Mapping[str, Any] | None) -> list[Any]:
        """:meth:`run` for a subgraph body: inputs made C-contiguous first (a Scan's slices
        are strided views), as the plans' kernels take them."""
        fixed = [
            np.ascontiguousarray(v) if type(v) is np.ndarray and not v.flags.c_contiguous else v
            for v in inputs
        ]
        return self.run(fixed, outer)

    def _plan_and_run(
        self, key: tuple, values: list[Any], progress: Callable[[int], None] | None
    ) -> list[Any]:
        from onnxjit import plan as plan_mod

        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                return plan.run(values)
            plan, outputs = plan_mod.build(self, values, progress)
            self._plans[key] = plan
            while len(self._plans) > MAX_PLANS:
                self._plans.popitem(last=False)
            return outputs

    def plans(self) -> list[Any]:
        """The plans kept now, least recently used first."""
        with self._lock:
            return list(self._plans.values())


def run_node(node: ir.Node, inputs: Sequence[Any]) -> list[Any]:
    """Run one bound node's implementation on ``inputs`` (one per input it names, None for an
    omitted one) and return one value per output: what constant folding needs, without a
    plan. The node must have no subgraph."""
    step = Program(ir.Graph("node", [], [], [])).bind_step(node)
    args = list(inputs) + [None] * (len(step.in_slots) - len(inputs))
    fn = node.impl.fn
    ctx = step.ctx
    result = fn(ctx, *args, **step.kwargs) if ctx is not None else fn(*args, **step.kwargs)
    if len(node.outputs) == 1:
        return [result[0] if isinstance(result, tuple) else result]
    return list(result)


_NO_KEY = object()  # BodyRunner's key of an input it does not compare


def _key(value: Any) -> Any:
    if type(value) is np.ndarray:
        return (value.dtype, value.shape)
    if value is None:
        return None
    if on_device(value):  # a tensor on the device
        return ("device", np.dtype(value.dtype), tuple(value.shape))
    return value.__class__


def signature(values: Sequence[Any]) -> tuple:
    """What a plan is specialised for: each ndarray's element type and shape, the class of
    anything else (sequences, maps; their consumers are not specialised)."""
    return tuple([_key(v) for v in values])


def describe_value(v: Any) -> str:
    if isinstance(v, np.ndarray) or on_device(v):
        return f"{np.dtype(v.dtype)}{list(v.shape)}"
    if v is None:
        return "None"
    return type(v).__name__


def execution_error(node: ir.Node, described: Sequence[str], exc: BaseException) -> ExecutionError:
    """The error a run raises when ``node`` failed with ``exc`` on inputs ``described``."""
    shapes = ", ".join(f"{name or '<omitted>'}: {d}" for name, d in zip(node.inputs, described))
    return ExecutionError(
        f"{node.describe()} failed on inputs ({shapes}): {type(exc).__name__}: {exc}. "
        "Check the input shapes against the operator's rules; if they are valid, this is an "
        "onnxjit bug, please report it with the model"
    )
