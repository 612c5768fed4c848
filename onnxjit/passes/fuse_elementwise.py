"""Elementwise-chain fusion: maximal groups of elementwise ops become one FusedElementwise node.

A node is a candidate when it is an op with a fused form
(:func:`onnxjit.ops.elementwise.fusible_ops`: default-domain ops and onnxjit's Gelu), has one
output, and its operands that must be constants are (Clip-11 bounds, CastLike's target,
Quantize/DequantizeLinear's scale and zero point: one value each, a float32 scale). Groups
grow in topological order: a candidate joins the groups of the candidates that produce its
operands when that keeps the graph acyclic (no path may leave a group and come back into it
through another node), else it joins as many of them as it can, else it starts its own group.
Groups of one op stay as they are.

A group's inputs are the values its members read from outside (size-1 constants are inlined
instead), its outputs the member values read outside the group or returned by the graph. The
result is written as one node whose ``group`` attribute (:class:`onnxjit.ops.fused_elementwise.
FusedGroup`) generates and runs the kernel; identical groups (same ops, dtypes, broadcast
pattern) share one compiled kernel through the code generator's cache.
"""

from __future__ import annotations

import heapq

import numpy as np

from onnxjit import ir
from onnxjit.ops.elementwise import fusible_key, fusible_ops
from onnxjit.ops.fused_elementwise import _kernel_dtype
from onnxjit.passes.rewrite import GraphIndex, _reads, fused_node

_FUSIBLE = fusible_ops()


def _inlinable(idx: GraphIndex, name: str) -> bool:
    c = idx.const(name)
    return c is not None and c.size == 1 and _kernel_dtype(c.dtype)


def _candidate(node: ir.Node, idx: GraphIndex) -> bool:
    if node.impl is None:
        return False
    first = _FUSIBLE.get(fusible_key(node.domain, node.op_type))
    if first is None or node.impl.since < first:
        return False
    if len(node.outputs) != 1 or not node.outputs[0] or not node.inputs or not node.inputs[0]:
        return False
    if ir.subgraphs(node):
        return False
    if node.op_type == "Clip":
        return all(not x or _inlinable(idx, x) for x in node.inputs[1:])
    if node.op_type == "CastLike":
        return len(node.inputs) > 1 and idx.const(node.inputs[1]) is not None
    if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
        # per tensor: a float32 scale and the zero point inlined (a float16 scale would make
        # the op divide or return in float16, which the fused form does not)
        rest = node.inputs[1:]
        if len(rest) < 1 or not rest[0] or not all(not x or _inlinable(idx, x) for x in rest):
            return False
        return idx.const(rest[0]).dtype == np.float32
    return True


class _Groups:
    """Union-find over group ids, with the ancestor groups of each group's outside inputs."""

    def __init__(self) -> None:
        self.parent: list[int] = []
        self.members: list[list[ir.Node]] = []
        self.ext_anc: list[set[int]] = []

    def new(self) -> int:
        g = len(self.parent)
        self.parent.append(g)
        self.members.append([])
        self.ext_anc.append(set())
        return g

    def find(self, g: int) -> int:
        root = g
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[g] != root:
            self.parent[g], g = root, self.parent[g]
        return root

    def canon(self, gids: set[int]) -> set[int]:
        return {self.find(g) for g in gids}

    def merge(self, gids: list[int]) -> int:
        root = gids[0]
        for g in gids[1:]:
            self.parent[g] = root
            self.members[root].extend(self.members[g])
            self.ext_anc[root] |= self.ext_anc[g]
            self.members[g] = []
            self.ext_anc[g] = set()
        return root


def fuse_elementwise(graph: ir.Graph) -> int:
    """Replace maximal elementwise groups of two or more ops by fused nodes; return how many."""
    idx = GraphIndex(graph)
    groups = _Groups()
    group_of: dict[int, int] = {}  # id(node) -> group id (not canonical)
    anc: dict[str, set[int]] = {}  # value -> ancestor group ids (not canonical)

    def value_anc(x: str) -> set[int]:
        return anc.get(x, set())

    for node in graph.nodes:
        reads = [x for x in dict.fromkeys(_reads(node))]
        up: set[int] = set()
        for x in reads:
            up |= value_anc(x)
        if not _candidate(node, idx):
            for o in node.outputs:
                if o:
                    anc[o] = up
            continue
        # groups of the candidates producing this node's operands
        producers: dict[int, list[str]] = {}
        for x in node.inputs:
            p = idx.producer_of(x) if x else None
            if p is not None and id(p) in group_of:
                producers.setdefault(groups.find(group_of[id(p)]), []).append(x)
        chosen = _largest_legal(groups, list(producers), node, idx, group_of, value_anc)
        if chosen:
            gid = groups.merge(chosen)
        else:
            gid = groups.new()
        groups.members[gid].append(node)
        # outside inputs of this node (relative to its group) feed the group's ancestor set
        for x in node.inputs:
            if not x:
                continue
            p = idx.producer_of(x)
            if p is not None and id(p) in group_of and groups.find(group_of[id(p)]) == gid:
                continue
            groups.ext_anc[gid] |= value_anc(x)
        group_of[id(node)] = gid
        anc[node.outputs[0]] = up | {gid}

    fused = 0
    new_nodes: dict[int, ir.Node] = {}  # id(first member) -> fused node
    replaced: set[int] = set()
    for g in range(len(groups.parent)):
        members = groups.members[g]
        if groups.find(g) != g or len(members) < 2:
            continue
        members = sorted(members, key=lambda n: n.index)
        node = _fused(graph, idx, members)
        new_nodes[id(members[-1])] = node
        replaced.update(id(m) for m in members)
        fused += 1
    if fused:
        nodes: list[ir.Node] = []
        for n in graph.nodes:
            if id(n) in new_nodes:
                nodes.append(new_nodes[id(n)])
            elif id(n) not in replaced:
                nodes.append(n)
        graph.nodes = _toposort(nodes, graph)
    return fused


def _largest_legal(groups, candidates, node, idx, group_of, value_anc) -> list[int]:
    """The producer groups ``node`` can join together without creating a cycle."""
    if not candidates:
        return []
    options = [candidates] + [[g] for g in candidates] if len(candidates) > 1 else [candidates]
    for option in options:
        chosen = set(option)
        outside: set[int] = set()
        for x in node.inputs:
            if not x:
                continue
            p = idx.producer_of(x)
            if p is not None and id(p) in group_of and groups.find(group_of[id(p)]) in chosen:
                continue
            outside |= value_anc(x)
        outside = groups.canon(outside)
        ok = not (chosen & outside)
        if ok and len(option) > 1:
            for g in option:
                if (groups.canon(groups.ext_anc[g]) & chosen) - {g}:
                    ok = False
                    break
        if ok:
            return list(option)
    return []


def _fused(graph: ir.Graph, idx: GraphIndex, members: list[ir.Node]) -> ir.Node:
    produced = {m.outputs[0] for m in members}
    inputs: list[str] = []
    consts: dict[str, np.ndarray] = {}
    for m in members:
        for k, x in enumerate(m.inputs):
            if not x or x in produced:
                continue
            if _inlinable(idx, x) or (m.op_type == "CastLike" and k == 1):
                consts[x] = idx.const(x)
            elif x not in inputs:
                inputs.append(x)
    outputs = [m.outputs[0] for m in members if idx.used_outside(m.outputs[0], members)]
    body = ir.Graph(
        name="fused",
        nodes=list(members),
        inputs=[ir.ValueInfo(n, None) for n in inputs],
        outputs=[ir.ValueInfo(n, None) for n in outputs],
        initializers=consts,
    )
    return fused_node("FusedElementwise", inputs, outputs, attrs={"body": body}, members=members)


def _toposort(nodes: list[ir.Node], graph: ir.Graph) -> list[ir.Node]:
    """Kahn's algorithm, keeping the given order wherever the dependencies allow."""
    producer = {o: i for i, n in enumerate(nodes) for o in n.outputs if o}
    deps = [
        {producer[x] for x in _reads(n) if x in producer and producer[x] != i}
        for i, n in enumerate(nodes)
    ]
    users: list[list[int]] = [[] for _ in nodes]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    waiting = [len(d) for d in deps]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order: list[ir.Node] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i])
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):  # pragma: no cover - the grouping rule prevents cycles
        raise RuntimeError("elementwise fusion produced a cycle; this is an onnxjit bug")
    for i, n in enumerate(order):
        n.index = i
    return order
