"""Common-subexpression elimination: identical nodes on identical inputs are computed once.

Two nodes are identical when they have the same domain, op_type, resolved version, overload,
inputs (after earlier merges), output arity (which optional outputs are present) and
attributes (numpy arrays compared by dtype, shape and bytes; floats by their exact value, so
0.0 and -0.0 differ and NaN equals NaN). The later node's outputs are read from the earlier
node instead. Never merged: nondeterministic ops (``optimize.NONDETERMINISTIC``), nodes with
subgraph attributes, nodes with attributes that cannot be compared, and nodes one of whose
outputs is a graph output (renaming it would change the model's interface).

Exporters also emit the same small constant many times under different names (a ``[-1]``
shape, a ``0.5`` scale); identical initializers up to :data:`MERGE_LIMIT_BYTES` (same dtype,
shape and bytes) are merged first so that the nodes reading them compare equal.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from onnxjit import ir
from onnxjit.passes.optimize import NONDETERMINISTIC, rename_reads

MERGE_LIMIT_BYTES = 4096


class _NotComparable(Exception):
    pass


def eliminate_common_subexpressions(graph: ir.Graph) -> int:
    """Merge duplicated constants and nodes (see the module docstring); return how many."""
    outputs = {v.name for v in graph.outputs}
    rename = _merge_constants(graph, outputs)
    merged = len(rename)
    seen: dict[tuple, ir.Node] = {}
    kept: list[ir.Node] = []
    for node in graph.nodes:
        node.inputs = [rename.get(x, x) for x in node.inputs]
        key = _key(node)
        if key is None:
            kept.append(node)
            continue
        first = seen.get(key)
        if first is None or any(o in outputs for o in node.outputs):
            seen.setdefault(key, node)
            kept.append(node)
            continue
        for mine, theirs in zip(node.outputs, first.outputs):
            if mine:
                rename[mine] = theirs
        merged += 1
    if not merged:
        return 0
    rename_reads([n for n in kept if ir.subgraphs(n)], rename)
    graph.nodes = kept
    for i, n in enumerate(graph.nodes):
        n.index = i
    return merged


def _merge_constants(graph: ir.Graph, outputs: set[str]) -> dict[str, str]:
    """Point readers of duplicated small initializers at the first copy; return the renames."""
    inputs = {v.name for v in graph.inputs}
    first: dict[tuple, str] = {}
    rename: dict[str, str] = {}
    for name, value in graph.initializers.items():
        if name in inputs or not isinstance(value, np.ndarray):
            continue
        if value.nbytes > MERGE_LIMIT_BYTES or value.dtype.kind in "OUS":
            continue
        key = _canon(value)
        if key not in first:
            first[key] = name
        elif name not in outputs:
            rename[name] = first[key]
    if rename:
        for node in graph.nodes:
            node.inputs = [rename.get(x, x) for x in node.inputs]
        rename_reads([n for n in graph.nodes if ir.subgraphs(n)], rename)
        for name in rename:
            del graph.initializers[name]
    return rename


def _key(node: ir.Node) -> tuple | None:
    if node.op_type in NONDETERMINISTIC or node.impl is None or ir.subgraphs(node):
        return None
    if node.attr_refs:
        return None
    try:
        attrs = tuple(sorted((k, _canon(v)) for k, v in node.attrs.items()))
    except _NotComparable:
        return None
    return (
        node.domain,
        node.op_type,
        node.since_version,
        node.overload,
        tuple(node.inputs),
        tuple(bool(o) for o in node.outputs),
        attrs,
    )


def _canon(value: Any) -> Any:
    """A hashable form of an attribute value that is equal exactly when the values are."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, (int, np.integer)):
        return ("i", int(value))
    if isinstance(value, (float, np.floating)):
        return ("f", float(value).hex())  # exact; -0.0 != 0.0; every NaN alike
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, bytes):
        return ("y", value)
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "O":
            return ("a", value.shape, tuple(_canon(x) for x in value.reshape(-1)))
        return (
            "a",
            value.dtype.str,
            value.dtype.name,
            value.shape,
            np.ascontiguousarray(value).tobytes(),
        )
    if isinstance(value, onnx.TypeProto):
        return ("t", value.SerializeToString(deterministic=True))
    if isinstance(value, (list, tuple)):
        packed = _packed(value)
        if packed is not None:
            return packed
        return ("l", tuple(_canon(x) for x in value))
    raise _NotComparable(type(value).__name__)


# Lists at least this long are keyed in one piece (see _packed).
_PACK_MIN = 64


def _packed(values: list | tuple) -> tuple | None:
    """The key of a long list of Python floats only, of Python ints only, or of strings (or
    bytes) only: equal exactly when ``_canon``'s keys would be, but built without a call per
    element (numbers from their bytes). A tree ensemble's attribute lists hold 10^5 values;
    one ``_canon`` call each took 0.9 s of a 100-tree forest's session creation. None for
    anything else (short, mixed, other types, ints beyond 64 bits)."""
    if len(values) < _PACK_MIN:
        return None
    kind = type(values[0])
    if kind not in (float, int, str, bytes) or any(type(v) is not kind for v in values):
        return None  # bool is not int here: type(), not isinstance()
    if kind is str or kind is bytes:  # (a tree ensemble's node modes)
        return ("L", kind.__name__, tuple(values))
    try:
        arr = np.array(values, np.float64 if kind is float else np.int64)
    except OverflowError:
        return None
    if kind is float:
        arr[np.isnan(arr)] = np.nan  # every NaN alike, as in _canon; -0.0 stays apart
    return ("L", arr.dtype.char, arr.tobytes())
