"""A Scan body run over many rows at once: the body rewritten for a leading row axis.

A Scan whose states pass through its body unchanged (each state output is its state input,
through Identity nodes) computes every scan output row from that row's slices of the scan
inputs alone: the iterations are independent. When every node that reads a scan input (or a
value computed from one) has a *row rule* below, the body is rewritten once into a *batched*
body whose scan inputs carry a leading axis of rows, and runs on blocks of rows, so that a
Scan of thousands of rows is a few kernel calls instead of thousands of body runs.

The row rules (a value computed from the scan inputs is *batched*: per row it has rank ``r``,
batched ``r + 1`` with the rows first):

* elementwise operators (unary, and the multidirectionally broadcasting binary and variadic
  ones): each batched input gets unit axes after the row axis up to the largest rank among
  the inputs, so that broadcasting lines up the per-row dimensions as in the body;
* reductions (``axes`` attribute, or an input the body holds as an initializer) and
  ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax: their axes, normalised against the per-row rank,
  move one right (an absent ``axes`` that means every axis becomes the per-row axes
  explicitly).

The rewrite depends on the ranks of the body's values, which a shape can change (Squeeze
without axes), so a batched form is kept per signature of the body's inputs.

Nodes that read no batched value run once per block, as they would run identically in every
iteration; a nondeterministic one, a node with subgraphs, an operator without a row rule
(or with axis-carrying broadcast attributes of old opsets), or a scan output that does not
depend on the scan inputs makes the body run iteration by iteration instead.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from onnxjit import ir, lowering, registry
from onnxjit.program import BodyRunner, Program, Subgraph

# Rows per block: as many as keep a block's batched values under this many bytes (the body's
# per-row intermediates times the rows), so that a block's values stay in the caches.
BLOCK_BYTES = 1 << 20

_UNARY = frozenset(
    {
        "Identity", "Abs", "Neg", "Sqrt", "Exp", "Log", "Relu", "Sigmoid", "Tanh", "Erf",
        "Floor", "Ceil", "Round", "Reciprocal", "Sign", "Sin", "Cos", "Tan", "Not", "IsNaN",
        "IsInf", "Cast", "Softplus", "Softsign", "LeakyRelu", "Elu", "Selu", "Celu",
        "HardSigmoid", "HardSwish", "Mish", "ThresholdedRelu", "Asin", "Acos", "Atan", "Sinh",
        "Cosh", "Asinh", "Acosh", "Atanh", "BitwiseNot",
    }
)  # fmt: skip
# Multidirectional broadcasting (numpy's rules) from the version given on.
_BROADCAST = {
    **dict.fromkeys(("Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater"), 7),
    **dict.fromkeys(("And", "Or", "Xor"), 7),
    **dict.fromkeys(("Max", "Min", "Sum", "Mean"), 8),
    **dict.fromkeys(("Where", "Mod", "BitShift", "LessOrEqual", "GreaterOrEqual"), 1),
    **dict.fromkeys(("BitwiseAnd", "BitwiseOr", "BitwiseXor"), 1),
}
_REDUCE = frozenset(
    {
        "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
        "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
    }
)  # fmt: skip
_AXIS = frozenset({"ArgMax", "ArgMin", "Softmax", "LogSoftmax", "Hardmax"})

# Batched forms kept per body (one per signature of its inputs and outer values).
MAX_FORMS = 16

# body -> {signature of one iteration's inputs and outer values: its Batched form, or None}
_CACHE: weakref.WeakKeyDictionary[Subgraph, dict[tuple, Any]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


class Batched:
    """A body rewritten for blocks of rows: ``program`` takes the states, then each scan
    input with a leading row axis, and returns each scan output with a leading row axis;
    ``row_bytes`` is the bytes of its batched values per row."""

    def __init__(self, program: Program, row_bytes: int):
        self.program = program
        self.row_bytes = row_bytes

    def program_runner(self, outer: Any) -> BodyRunner:
        """A runner of ``program`` for the blocks of one Scan node call."""
        return BodyRunner(self.program, outer)

    def block(self) -> int:
        """Rows per block (see :data:`BLOCK_BYTES`)."""
        return max(1, BLOCK_BYTES // max(self.row_bytes, 1))


def batched(body: Subgraph, n_state: int, specs: dict[str, lowering.Spec]) -> Batched | None:
    """The batched form of ``body`` (its Scan has ``n_state`` states) for the per-row value
    specs ``specs`` (name -> spec of one iteration's plan), or None where the iterations are
    not independent or a node has no row rule (see the module docstring)."""
    graph = body.graph
    names = [v.name for v in graph.inputs] + body.program.outer_names
    # keyed by the shapes, not only the ranks: a rank inside the body can depend on a shape
    # (Squeeze without axes)
    key = tuple((specs[n].dtype, specs[n].shape) if n in specs else None for n in names)
    with _LOCK:
        per_body = _CACHE.setdefault(body, {})
        if key not in per_body:
            while len(per_body) >= MAX_FORMS:
                per_body.pop(next(iter(per_body)))
            per_body[key] = _rewrite(body, n_state, specs)
        return per_body[key]


def _rank(specs: dict[str, lowering.Spec], name: str) -> int | None:
    spec = specs.get(name)
    if spec is None or spec.kind != lowering.TENSOR or spec.shape is None:
        return None
    return len(spec.shape)


def _source(graph: ir.Graph, name: str) -> str:
    """What ``name`` is through Identity nodes: the name it is an Identity (chain) of."""
    made = {o: n for n in graph.nodes for o in n.outputs if o}
    seen = set()
    while name in made and made[name].op_type == "Identity" and name not in seen:
        seen.add(name)
        name = made[name].inputs[0]
    return name


def _rewrite(body: Subgraph, n_state: int, specs: dict[str, lowering.Spec]) -> Batched | None:
    graph = body.graph
    inputs = [v.name for v in graph.inputs]
    outputs = [v.name for v in graph.outputs]
    # the iterations are independent only where every state passes through unchanged
    for k in range(n_state):
        if _source(graph, outputs[k]) != inputs[k]:
            return None
    batched = set(inputs[n_state:])  # values with a row axis
    nodes: list[ir.Node] = []
    inits = dict(graph.initializers)
    fresh = iter(range(1 << 30))

    def new_name(hint: str) -> str:
        while True:
            name = f"{hint}__rows{next(fresh)}"
            if name not in body.program.slots and name not in inits:
                return name

    def copy(node: ir.Node, inputs: list[str], attrs: dict[str, Any]) -> ir.Node:
        return ir.Node(
            node.op_type, node.domain, inputs, list(node.outputs), attrs,
            dict(node.attr_types), node.name, node.index, since_version=node.since_version,
            impl=node.impl,
        )  # fmt: skip

    unsqueeze = registry.find_impl("", "Unsqueeze", 13)
    for node in graph.nodes:
        reads = [n for n in node.inputs if n] + ir.outer_reads(node)
        if not any(n in batched for n in reads):
            if node.op_type in registry.NONDETERMINISTIC or ir.subgraphs(node):
                return None
            nodes.append(node)  # the same in every iteration: once per block
            continue
        op, ver = node.op_type, node.since_version or 0
        if registry.normalize_domain(node.domain) != "" or ir.subgraphs(node):
            return None
        ranks = [_rank(specs, n) if n else None for n in node.inputs]
        if any(r is None for n, r in zip(node.inputs, ranks) if n):
            return None
        attrs = dict(node.attrs)
        ins = list(node.inputs)
        if op in _UNARY:
            pass
        elif op in _BROADCAST and ver >= _BROADCAST[op] and "axis" not in attrs:
            top = max(r for n, r in zip(node.inputs, ranks) if n)
            for j, (n, r) in enumerate(zip(node.inputs, ranks)):
                if n in batched and r < top:
                    axes = new_name("axes")
                    inits[axes] = np.arange(1, 1 + top - r, dtype=np.int64)
                    ins[j] = new_name(n)
                    nodes.append(
                        ir.Node(
                            "Unsqueeze",
                            "",
                            [n, axes],
                            [ins[j]],
                            since_version=13,
                            impl=unsqueeze,
                        )  # fmt: skip
                    )
        elif op == "Clip" and all(n not in batched for n in node.inputs[1:]):
            pass
        elif op in _REDUCE:
            r = ranks[0]
            if node.inputs[0] not in batched or r == 0:
                return None
            if "axes" in node.impl.attrs:
                axes = attrs.get("axes")
            elif len(ins) > 1 and ins[1]:
                # axes the body holds (an initializer): the same in every call
                value = graph.initializers.get(ins[1])
                if ins[1] in inputs or not isinstance(value, np.ndarray):
                    return None
                axes = [int(a) for a in value.reshape(-1)]
            else:
                axes = None
            if not axes:
                if attrs.get("noop_with_empty_axes", 0):
                    axes = None  # no reduction per row, nor batched
                else:
                    axes = list(range(r))
            if axes is not None:
                if any(not -r <= a < r for a in axes):
                    return None
                shifted = [a % r + 1 for a in axes]
                if "axes" in node.impl.attrs:
                    attrs["axes"] = shifted
                else:
                    name = new_name("axes")
                    inits[name] = np.array(shifted, dtype=np.int64)
                    ins = [ins[0], name]
        elif op in _AXIS:
            r = ranks[0]
            default = -1 if op in ("Softmax", "LogSoftmax", "Hardmax") and ver >= 13 else 0
            if op in ("Softmax", "LogSoftmax", "Hardmax") and ver < 13:
                default = 1
            a = int(attrs.get("axis", default))
            if node.inputs[0] not in batched or not -r <= a < r:
                return None
            attrs["axis"] = a % r + 1
        else:
            return None
        nodes.append(copy(node, ins, attrs))
        batched.update(o for o in node.outputs if o)
    scan_outs = outputs[n_state:]
    if not scan_outs or any(o not in batched for o in scan_outs):
        return None
    row_bytes = sum(
        specs[n].nbytes for n in batched if n in specs and specs[n].kind == lowering.TENSOR
    )
    rows_graph = ir.Graph(
        f"{graph.name}__rows",
        nodes,
        list(graph.inputs),
        [graph.outputs[n_state + k] for k in range(len(scan_outs))],
        inits,
        list(inits),
        {},
    )
    parent = body.program
    program = Program(rows_graph, frozenset(), parent.settings, parent.arena, parent.owner)
    return Batched(program, row_bytes)


def specs_by_name(body: Subgraph, plan: Any) -> dict[str, lowering.Spec]:
    """The specs an iteration's plan holds, by value name."""
    names = body.program.names
    return {names[s]: spec for s, spec in plan.specs.items() if s < len(names)}
