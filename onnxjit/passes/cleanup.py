"""No-op elimination: nodes whose output provably equals their first input are bypassed.

A node is bypassed (its readers read its input instead) only when the statically known types
(:func:`onnxjit.passes.shape_subgraphs.infer_types`) prove that it changes nothing:

* Cast / CastLike to the element type the input already has;
* Reshape to a constant shape equal to the input's (0 copies a dim unless ``allowzero``; one
  -1 only when every other dim is proven non-zero, so it can only mean the input's dim);
* Transpose with the identity permutation (or the default one on a rank-0/1 input);
* Squeeze with no axes on an input with no dim that could be 1; Unsqueeze with empty axes;
* Expand to a constant shape of ones no longer than the input's rank;
* Slice with step 1 from 0 to the end of every axis it names;
* Pad with all-zero pads;
* Concat of a single input;
* ``x * 1``, ``x / 1``, ``x - 0`` and ``x + 0`` with a constant of the same element type that
  cannot broadcast the shape (a scalar, or no more dims than ``x`` and all of size 1). For
  floats ``x + 0.0`` maps -0.0 to +0.0 and ``x - (-0.0)`` does too, so those are bypassed only
  with a zero of the right sign (Add: -0.0, Sub: +0.0); integer zeros always.

A node whose output is a graph output is kept (renaming a graph output would change the
model's interface, and an Identity would return the caller's own feed). Identity and Dropout
are handled by :func:`onnxjit.passes.optimize.eliminate_identities`.
"""

from __future__ import annotations

import numpy as np

from onnxjit import ir, types
from onnxjit.passes.optimize import rename_reads
from onnxjit.passes.shape_subgraphs import TensorType, infer_types

# An end at or above this means "to the end of the axis" (exporters write INT32_MAX/INT64_MAX).
_TO_END = 2**31 - 1


def eliminate_noops(graph: ir.Graph) -> int:
    """Bypass no-op nodes (see the module docstring); return how many were bypassed."""
    if not any(n.op_type in _RULES and n.domain in ("", "ai.onnx") for n in graph.nodes):
        return 0
    known = infer_types(graph)
    inputs = {v.name for v in graph.inputs}
    consts = {k: v for k, v in graph.initializers.items() if k not in inputs}
    outputs = {v.name for v in graph.outputs}
    rename: dict[str, str] = {}
    kept: list[ir.Node] = []
    for node in graph.nodes:
        node.inputs = [rename.get(x, x) for x in node.inputs]
        rule = _RULES.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        src = None
        if (
            rule is not None
            and len(node.outputs) == 1
            and node.outputs[0]
            and node.outputs[0] not in outputs
            and node.inputs
        ):
            try:
                src = rule(node, known, consts)
            except (TypeError, ValueError, IndexError, KeyError):
                src = None  # malformed attributes: leave the node to report itself at run time
        if src:
            rename[node.outputs[0]] = src
            continue
        kept.append(node)
    if not rename:
        return 0
    # Readers were renamed on the way; subgraphs reading bypassed values from outside still
    # need it.
    rename_reads([n for n in kept if ir.subgraphs(n)], rename)
    graph.nodes = kept
    for i, n in enumerate(graph.nodes):
        n.index = i
    return len(rename)


Known = dict[str, TensorType]
Consts = dict[str, np.ndarray]


def _const(consts: Consts, node: ir.Node, i: int) -> np.ndarray | None:
    """Input ``i`` of ``node`` as a constant, None when absent or not constant."""
    if i >= len(node.inputs) or not node.inputs[i]:
        return None
    v = consts.get(node.inputs[i])
    return v if isinstance(v, np.ndarray) else None


def _present(node: ir.Node, i: int) -> bool:
    return i < len(node.inputs) and bool(node.inputs[i])


def _ints(v: np.ndarray | None) -> list[int] | None:
    if v is None or v.dtype.kind not in "iu" or v.ndim > 1:
        return None
    return [int(x) for x in v.reshape(-1)]


def _cast(node: ir.Node, known: Known, consts: Consts) -> str | None:
    t = known.get(node.inputs[0])
    to = node.attrs.get("to")
    if t is None or not isinstance(to, int) or isinstance(to, bool):
        return None
    return node.inputs[0] if t.elem_type == to else None


def _cast_like(node: ir.Node, known: Known, consts: Consts) -> str | None:
    t, like = known.get(node.inputs[0]), known.get(node.inputs[1])
    if t is None or like is None:
        return None
    return node.inputs[0] if t.elem_type == like.elem_type else None


def _reshape(node: ir.Node, known: Known, consts: Consts) -> str | None:
    t = known.get(node.inputs[0])
    if t is None or t.shape is None:
        return None
    if node.since_version is not None and node.since_version < 5:
        target = node.attrs.get("shape")
        allowzero = 0
    else:
        target = _ints(_const(consts, node, 1))
        allowzero = int(node.attrs.get("allowzero", 0) or 0)
    if target is None or len(target) != len(t.shape):
        return None
    # The dim each entry provably gives, or None.
    dims: list[int | None] = []
    minus_one = [i for i, s in enumerate(target) if s == -1]
    if len(minus_one) > 1:
        return None
    for s, d in zip(target, t.shape):
        if s == 0 and not allowzero:
            dims.append(d)  # copies the input's dim, whatever it is
        elif s >= 0:
            if d is None or s != d:
                return None
            dims.append(d)
        elif s == -1:
            dims.append(None)
        else:
            return None
    if minus_one:
        others = [d for i, d in enumerate(dims) if i != minus_one[0]]
        if any(d is None or d == 0 for d in others):
            return None
    return node.inputs[0]


def _transpose(node: ir.Node, known: Known, consts: Consts) -> str | None:
    t = known.get(node.inputs[0])
    if t is None or t.rank is None:
        return None
    perm = node.attrs.get("perm")
    if perm is None:
        return node.inputs[0] if t.rank <= 1 else None
    return node.inputs[0] if list(perm) == list(range(t.rank)) else None


def _squeeze(node: ir.Node, known: Known, consts: Consts) -> str | None:
    t = known.get(node.inputs[0])
    if t is None or t.shape is None:
        return None
    if node.since_version is not None and node.since_version < 13:
        axes = node.attrs.get("axes")
    elif _present(node, 1):
        axes = _ints(_const(consts, node, 1))
        if axes is None:
            return None
    else:
        axes = None
    if axes:
        return None  # names dims that must be 1 and are removed
    # No axes: every size-1 dim goes, so it is a no-op only when no dim can be 1.
    if all(d is not None and d != 1 for d in t.shape):
        return node.inputs[0]
    return None


def _unsqueeze(node: ir.Node, known: Known, consts: Consts) -> str | None:
    if node.since_version is not None and node.since_version < 13:
        axes = node.attrs.get("axes")
    else:
        axes = _ints(_const(consts, node, 1))
    if axes is not None and len(axes) == 0 and node.inputs[0] in known:
        return node.inputs[0]
    return None


def _expand(node: ir.Node, known: Known, consts: Consts) -> str | None:
    t = known.get(node.inputs[0])
    shape = _ints(_const(consts, node, 1))
    if t is None or t.rank is None or shape is None:
        return None
    if len(shape) <= t.rank and all(s == 1 for s in shape):
        return node.inputs[0]
    return None


def _slice(node: ir.Node, known: Known, consts: Consts) -> str | None:
    t = known.get(node.inputs[0])
    if t is None or t.shape is None:
        return None
    rank = len(t.shape)
    if node.since_version is not None and node.since_version < 10:
        starts, ends = node.attrs.get("starts"), node.attrs.get("ends")
        axes, steps = node.attrs.get("axes"), None
    else:
        starts, ends = _ints(_const(consts, node, 1)), _ints(_const(consts, node, 2))
        axes = _ints(_const(consts, node, 3)) if _present(node, 3) else None
        steps = _ints(_const(consts, node, 4)) if _present(node, 4) else None
        if (_present(node, 3) and axes is None) or (_present(node, 4) and steps is None):
            return None
    if starts is None or ends is None or len(starts) != len(ends):
        return None
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if len(axes) != len(starts) or len(steps) != len(starts):
        return None
    norm = [a + rank if a < 0 else a for a in axes]
    if any(a < 0 or a >= rank for a in norm) or len(set(norm)) != len(norm):
        return None
    for a, s, e, st in zip(norm, starts, ends, steps):
        d = t.shape[a]
        if st != 1 or s != 0:
            return None
        if not (e >= _TO_END or (d is not None and e >= d)):
            return None
    return node.inputs[0]


def _pad(node: ir.Node, known: Known, consts: Consts) -> str | None:
    t = known.get(node.inputs[0])
    if t is None or t.rank is None:
        return None
    if node.since_version is not None and node.since_version < 11:
        pads = node.attrs.get("pads") or node.attrs.get("paddings")
        n_axes = t.rank
    else:
        pads = _ints(_const(consts, node, 1))
        n_axes = t.rank
        if _present(node, 3):
            axes = _ints(_const(consts, node, 3))
            if axes is None:
                return None
            n_axes = len(axes)
    if pads is None or len(pads) != 2 * n_axes or any(p != 0 for p in pads):
        return None
    return node.inputs[0]


def _concat(node: ir.Node, known: Known, consts: Consts) -> str | None:
    t = known.get(node.inputs[0])
    if len(node.inputs) != 1 or t is None or t.rank is None or t.rank == 0:
        return None
    axis = node.attrs.get("axis", 1 if node.since_version == 1 else None)
    if axis is None or not -t.rank <= int(axis) < t.rank:
        return None
    return node.inputs[0]


def _arith(node: ir.Node, known: Known, consts: Consts) -> str | None:
    if len(node.inputs) != 2 or node.since_version is None or node.since_version < 7:
        return None  # legacy broadcast/axis attributes: not worth the cases
    op = node.op_type
    sides = [(0, 1), (1, 0)] if op in ("Add", "Mul") else [(0, 1)]
    for xi, ci in sides:
        c = _const(consts, node, ci)
        t = known.get(node.inputs[xi])
        if c is None or t is None or t.rank is None:
            continue
        if c.dtype.kind not in "fiuc" or c.size == 0:
            continue
        try:
            if types.onnx_elem_type(c.dtype) != t.elem_type:
                continue
        except ValueError:
            continue
        if c.ndim > t.rank or any(d != 1 for d in c.shape):
            continue
        v = c.reshape(-1)[0]
        if _is_identity_constant(op, v, c.dtype):
            return node.inputs[xi]
    return None


def _is_identity_constant(op: str, v: np.generic, dtype: np.dtype) -> bool:
    if op in ("Mul", "Div"):
        return bool(v == 1)
    if v != 0:
        return False
    if dtype.kind in "iu":
        return True
    if dtype.kind == "c":
        return False  # signs of zero in two parts: not worth proving
    # x + (-0.0) == x and x - (+0.0) == x for every x, -0.0 included; the other signs are not.
    neg = bool(np.signbit(v))
    return neg if op == "Add" else not neg


_RULES = {
    "Cast": _cast,
    "CastLike": _cast_like,
    "Reshape": _reshape,
    "Transpose": _transpose,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Expand": _expand,
    "Slice": _slice,
    "Pad": _pad,
    "Concat": _concat,
    "Mul": _arith,
    "Div": _arith,
    "Add": _arith,
    "Sub": _arith,
}
