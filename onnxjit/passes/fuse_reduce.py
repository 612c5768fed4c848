"""Reduction fusion: ReduceSum / ReduceMean / ReduceMax of an elementwise chain in one pass.

When the data input of a float ReduceSum, ReduceMean or ReduceMax is produced by a fused
elementwise group (or a lone fusible elementwise op) that nothing else reads, the two become one
``FusedReduce`` node: its kernel evaluates the chain element by element and accumulates each
row's result without ever storing the chain's values (one pass over memory instead of a write
and a read of a full intermediate). The kernel reduces trailing axes; for other axes, or inputs
whose broadcasting varies inside the reduced axes, the node computes the chain and then reduces,
as the two nodes did (:class:`onnxjit.ops.fused_elementwise.ReduceTail`).

The axes must be known when the graph is optimised (an attribute or a constant input) and
``noop_with_empty_axes`` must be 0 when they are empty.
"""

from __future__ import annotations

from onnxjit import ir
from onnxjit.passes.fuse_elementwise import _candidate, _fused
from onnxjit.passes.rewrite import GraphIndex, fused_node, is_op

_KINDS = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max"}


def fuse_reductions(graph: ir.Graph) -> int:
    """Rewrite every eligible (elementwise producer, Reduce) pair; return how many."""
    idx = GraphIndex(graph)
    replaced: dict[int, ir.Node] = {}  # id(reduce node) -> fused node
    dropped: set[int] = set()
    for node in graph.nodes:
        if not is_op(node, *_KINDS) or len(node.outputs) != 1 or not node.inputs[0]:
            continue
        axes = _axes(node, idx)
        if axes is None:
            continue
        producer = idx.producer_of(node.inputs[0])
        if producer is None or id(producer) in dropped or idx.only_user(node.inputs[0]) is not node:
            continue
        if producer.op_type == "FusedElementwise" and len(producer.outputs) == 1:
            group: ir.Graph = producer.attrs["body"]
        elif _candidate(producer, idx):
            group = _fused(graph, idx, [producer]).attrs["body"]
        else:
            continue
        # the group's members, then the Reduce node (its axes, where an input, a constant)
        inits = dict(group.initializers)
        if len(node.inputs) > 1 and node.inputs[1]:
            inits[node.inputs[1]] = idx.const(node.inputs[1])
        body = ir.Graph(
            name="fused_reduce",
            nodes=[*group.nodes, node],
            inputs=list(group.inputs),
            outputs=[ir.ValueInfo(node.outputs[0], None)],
            initializers=inits,
        )
        members = [*(producer.members or [producer]), node]
        fused = fused_node(
            "FusedReduce",
            [v.name for v in group.inputs],
            list(node.outputs),
            attrs={"body": body},
            members=members,
        )
        replaced[id(node)] = fused
        dropped.add(id(producer))
    if not replaced:
        return 0
    nodes = []
    for n in graph.nodes:
        if id(n) in replaced:
            nodes.append(replaced[id(n)])
        elif id(n) not in dropped:
            nodes.append(n)
    for i, n in enumerate(nodes):
        n.index = i
    graph.nodes = nodes
    return len(replaced)


def _axes(node: ir.Node, idx: GraphIndex) -> list[int] | None:
    """The reduced axes (empty: all), or None when unknown or when empty means 'none'."""
    if len(node.inputs) > 1 and node.inputs[1]:
        value = idx.const(node.inputs[1])
        if value is None:
            return None
        axes = [int(a) for a in value.reshape(-1)]
    else:
        attr = node.attrs.get("axes")
        axes = [int(a) for a in attr] if attr is not None else []
    if not axes and int(node.attrs.get("noop_with_empty_axes", 0)):
        return None
    return axes
