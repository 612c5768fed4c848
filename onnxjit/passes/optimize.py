"""Constant folding, Identity/Dropout elimination and dead-node removal, plus renaming helpers.

These are three of the basic-level passes; the pass table, their order and the optimisation
levels (``SessionOptions.graph_optimization_level``) live in :mod:`onnxjit.passes.manager`, and
:func:`optimize` is the entry point that runs them all.

* :func:`fold_constants`: a deterministic node whose inputs are all constants is run once at
  load and its outputs become initializers (unless an output would be much larger than its
  inputs, which would trade a cheap run-time op for memory);
* :func:`eliminate_identities`: Identity, and inference-mode Dropout treated as Identity;
* :func:`remove_dead_nodes`: nodes none of whose outputs reach a graph output.

Subgraphs keep their nodes; only the values they read from outer scopes are renamed
(:func:`rename_reads`).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from onnxjit import ir
from onnxjit.registry import NONDETERMINISTIC

# A folded output may be at most this large, or no larger than its inputs together.
FOLD_LIMIT_BYTES = 1 << 24


def optimize(
    graph: ir.Graph, level: int, disabled: Iterable[str] = ()
) -> dict[str, dict[str, float]]:
    """Run the passes enabled at ``level`` (0 = none) on ``graph`` in place.

    See :mod:`onnxjit.passes.manager` for the passes and levels; returns per-pass figures.
    """
    from onnxjit.passes.manager import run_passes

    return run_passes(graph, level, disabled)


def fold_constants(graph: ir.Graph) -> int:
    """Fold nodes whose inputs are all initializers; return how many nodes were folded."""
    inputs = {v.name for v in graph.inputs}
    # A graph input with an initializer can be overridden by a feed: not a constant.
    constants = {k for k in graph.initializers if k not in inputs}
    kept: list[ir.Node] = []
    folded = 0
    for node in graph.nodes:
        values = fold_node(node, graph.initializers, constants)
        if values is None:
            kept.append(node)
            continue
        for name, value in values.items():
            graph.initializers[name] = value
            constants.add(name)
        folded += 1
    graph.nodes = kept
    _reindex(graph)
    return folded


def fold_node(
    node: ir.Node, values: dict[str, object], constants: set[str]
) -> dict[str, np.ndarray] | None:
    """The outputs of ``node`` (output name -> value) when it can be folded, else None.

    A node folds when it is deterministic, has no subgraph, every input it names is in
    ``constants`` (whose values are in ``values``), it runs without error (errors are left to
    run time, where they name the feed) and no output is much larger than its inputs.
    """
    from onnxjit.program import run_node

    foldable = (
        node.impl is not None
        and node.op_type not in NONDETERMINISTIC
        and all(not x or x in constants for x in node.inputs)
        and not ir.subgraphs(node)
    )
    if not foldable:
        return None
    try:
        results = run_node(node, [values[x] if x else None for x in node.inputs])
    except Exception:
        return None
    results = [v for o, v in zip(node.outputs, results) if o]
    in_bytes = sum(_nbytes(values[x]) for x in node.inputs if x)
    if any(
        not isinstance(v, np.ndarray) or _nbytes(v) > max(FOLD_LIMIT_BYTES, in_bytes)
        for v in results
    ):
        return None
    return dict(zip([o for o in node.outputs if o], results))


def eliminate_identities(graph: ir.Graph) -> int:
    """Bypass Identity nodes (and inference Dropout) whose output is not a graph output."""
    outputs = {v.name for v in graph.outputs}
    rename: dict[str, str] = {}
    kept = []
    for node in graph.nodes:
        node.inputs = [rename.get(x, x) for x in node.inputs]
        src = _identity_source(node)
        if src is not None and node.outputs[0] not in outputs and src:
            rename[node.outputs[0]] = src
            continue
        kept.append(node)
    if rename:
        for node in kept:
            for g in ir.subgraphs(node):
                _rename_outer(g, rename)
    graph.nodes = kept
    _reindex(graph)
    return len(rename)


def _identity_source(node: ir.Node) -> str | None:
    if node.domain not in ("", "ai.onnx") or not node.inputs:
        return None
    if node.op_type == "Identity" and len(node.outputs) == 1:
        return node.inputs[0]
    if node.op_type == "Dropout":
        mask_used = len(node.outputs) > 1 and node.outputs[1]
        training = len(node.inputs) > 2 and node.inputs[2]
        if not mask_used and not training and node.attrs.get("is_test") != 0:
            return node.inputs[0]
    return None


def remove_dead_nodes(graph: ir.Graph) -> int:
    """Drop nodes that contribute to no graph output; return how many were dropped."""
    live = {v.name for v in graph.outputs}
    kept_rev = []
    for node in reversed(graph.nodes):
        if any(o and o in live for o in node.outputs):
            kept_rev.append(node)
            live.update(x for x in node.inputs if x)
            live.update(ir.outer_reads(node))
    removed = len(graph.nodes) - len(kept_rev)
    graph.nodes = list(reversed(kept_rev))
    _reindex(graph)
    for name in list(graph.initializers):
        if name not in live and name not in {v.name for v in graph.inputs}:
            del graph.initializers[name]
    return removed


def rename_reads(nodes: Iterable[ir.Node], rename: dict[str, str]) -> None:
    """Make ``nodes`` (and the subgraphs they own) read ``rename[x]`` wherever they read ``x``.

    Names a subgraph defines itself shadow the outer ones and are left alone.
    """
    if not rename:
        return
    for node in nodes:
        node.inputs = [rename.get(x, x) for x in node.inputs]
        for g in ir.subgraphs(node):
            _rename_outer(g, rename)


def _rename_outer(g: ir.Graph, rename: dict[str, str]) -> None:
    local = {v.name for v in g.inputs} | set(g.initializers)
    local |= {o for n in g.nodes for o in n.outputs}
    active = {k: v for k, v in rename.items() if k not in local}
    if not active:
        return
    for n in g.nodes:
        n.inputs = [active.get(x, x) for x in n.inputs]
        for sub in ir.subgraphs(n):
            _rename_outer(sub, active)
    for v in g.outputs:
        if v.name in active:
            v.name = active[v.name]


def _nbytes(v) -> int:
    return int(v.nbytes) if isinstance(v, np.ndarray) else 0


def _reindex(graph: ir.Graph) -> None:
    for i, n in enumerate(graph.nodes):
        n.index = i
