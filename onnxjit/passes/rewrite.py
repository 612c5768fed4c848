"""Tools every rewriting pass uses: a use/def index over a graph and bound fused nodes.

Passes run after the registry has bound each node, so a node a pass creates must be bound too:
:func:`fused_node` makes a node of an internal (``onnxjit`` domain) operator, and
:func:`onnx_node` one of a standard operator at a given version. :class:`GraphIndex` answers the
questions pattern matchers ask (who produces a value, who reads it, is it a constant, is it a
graph output) and :meth:`GraphIndex.replace` swaps a set of nodes for new ones while keeping the
node list topologically sorted.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from onnxjit import ir, registry

_counter = itertools.count()


def fresh_name(graph: ir.Graph, hint: str) -> str:
    """A value or node name not used in ``graph`` (``hint`` plus a process-wide counter)."""
    taken = _names(graph)
    while True:
        name = f"{hint}__oj{next(_counter)}"
        if name not in taken:
            return name


def _names(graph: ir.Graph) -> set[str]:
    names = set(graph.initializers) | {v.name for v in graph.inputs}
    for n in graph.nodes:
        names.update(n.outputs)
        names.add(n.name)
    return names


def fused_node(
    op_type: str,
    inputs: Sequence[str],
    outputs: Sequence[str],
    *,
    attrs: dict[str, Any] | None = None,
    members: Iterable[ir.Node] = (),
    name: str = "",
) -> ir.Node:
    """A bound node of the internal operator ``op_type`` (registered with ``internal_op``).

    ``members`` are the nodes it replaces (kept for the optimised-model view and statistics);
    when ``name`` is empty it is made from the first member's name.
    """
    impl = registry.internal_impl(op_type)
    members = list(members)
    if not name:
        base = next((m.name for m in members if m.name), op_type)
        name = f"{op_type}:{base}"
    node = ir.Node(
        op_type=op_type,
        domain=registry.INTERNAL_DOMAIN,
        inputs=list(inputs),
        outputs=list(outputs),
        attrs=dict(attrs or {}),
        name=name,
        since_version=1,
        impl=impl,
        members=members,
    )
    return node


def onnx_node(
    op_type: str,
    since_version: int,
    inputs: Sequence[str],
    outputs: Sequence[str],
    *,
    attrs: dict[str, Any] | None = None,
    members: Iterable[ir.Node] = (),
    name: str = "",
    domain: str = "",
) -> ir.Node:
    """A bound node of a standard operator, resolved as a model at opset ``since_version``."""
    impl = registry.find_impl(domain, op_type, since_version)
    if impl is None:
        raise KeyError(f"no implementation of {op_type} at opset {since_version}")
    members = list(members)
    if not name:
        name = next((m.name for m in members if m.name), op_type)
    return ir.Node(
        op_type=op_type,
        domain=domain,
        inputs=list(inputs),
        outputs=list(outputs),
        attrs=dict(attrs or {}),
        name=name,
        since_version=impl.since,
        impl=impl,
        members=members,
    )


def is_op(node: ir.Node | None, *op_types: str) -> bool:
    """True when ``node`` is a default-domain node of one of ``op_types``."""
    return node is not None and node.domain in ("", "ai.onnx") and node.op_type in op_types


class GraphIndex:
    """Producers, consumers and constants of one graph (not of its subgraphs).

    Build it, match, then call :meth:`replace` for each rewrite; the index stays valid across
    replacements. Values read by subgraphs count as consumed (by the node owning the subgraph),
    so a pass never removes a value a subgraph needs.
    """

    def __init__(self, graph: ir.Graph):
        self.graph = graph
        self.producer: dict[str, ir.Node] = {}
        self.consumers: dict[str, list[ir.Node]] = {}
        self.outputs = {v.name for v in graph.outputs}
        self.inputs = {v.name for v in graph.inputs}
        for n in graph.nodes:
            self._add(n)

    def _add(self, n: ir.Node) -> None:
        for o in n.outputs:
            if o:
                self.producer[o] = n
        for x in dict.fromkeys(_reads(n)):
            self.consumers.setdefault(x, []).append(n)

    def _remove(self, n: ir.Node) -> None:
        for o in n.outputs:
            if o and self.producer.get(o) is n:
                del self.producer[o]
        for x in dict.fromkeys(_reads(n)):
            users = self.consumers.get(x)
            if users is not None:
                users[:] = [u for u in users if u is not n]

    def producer_of(self, name: str) -> ir.Node | None:
        return self.producer.get(name)

    def users(self, name: str) -> list[ir.Node]:
        return list(self.consumers.get(name, ()))

    def only_user(self, name: str) -> ir.Node | None:
        """The single node reading ``name`` when it is not also a graph output, else None."""
        users = self.consumers.get(name, ())
        if len(users) != 1 or name in self.outputs:
            return None
        return users[0]

    def const(self, name: str) -> np.ndarray | None:
        """The value of ``name`` when it is an initializer no feed can override, else None."""
        if name and name in self.graph.initializers and name not in self.inputs:
            v = self.graph.initializers[name]
            return v if isinstance(v, np.ndarray) else None
        return None

    def scalar(self, name: str) -> float | None:
        """A constant holding one element, as a Python float; None otherwise."""
        v = self.const(name)
        if v is None or v.size != 1 or v.dtype.kind not in "fiu":
            return None
        return float(v.reshape(()))

    def used_outside(self, name: str, members: Iterable[ir.Node]) -> bool:
        """True when a node not in ``members`` (or the graph's outputs) reads ``name``."""
        ids = {id(m) for m in members}
        return name in self.outputs or any(id(u) not in ids for u in self.consumers.get(name, ()))

    def add_initializer(self, hint: str, value: np.ndarray) -> str:
        """Store ``value`` as a new initializer; return its name."""
        name = fresh_name(self.graph, hint)
        self.graph.initializers[name] = value
        return name

    def replace(self, old: Sequence[ir.Node], new: Sequence[ir.Node]) -> None:
        """Remove ``old`` and insert ``new`` (in the given order) where the last of ``old`` was.

        The caller guarantees that every input of ``new`` is available at that position (true
        when they are inputs of ``old`` or values produced before it) and that values ``old``
        produced and others still read are produced by ``new``.
        """
        ids = {id(n) for n in old}
        nodes = self.graph.nodes
        last = max(i for i, n in enumerate(nodes) if id(n) in ids)
        kept_before = [n for n in nodes[:last] if id(n) not in ids]
        kept_after = [n for n in nodes[last + 1 :] if id(n) not in ids]
        for n in old:
            self._remove(n)
        for n in new:
            self._add(n)
        self.graph.nodes = kept_before + list(new) + kept_after
        for i, n in enumerate(self.graph.nodes):
            n.index = i


def _reads(n: ir.Node) -> list[str]:
    """The names ``n`` reads: its inputs, and what its subgraphs read from outside."""
    return [x for x in n.inputs if x] + ir.outer_reads(n)
