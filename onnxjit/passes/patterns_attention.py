"""Scaled-dot-product attention written with primitive operators becomes one ``SDPA`` node.

The pattern, read backwards from each Softmax on the last axis::

    [Transpose(K) swapping the last two axes] -> K^T
    [Mul/Div(Q, c)] and [Mul(K^T, c)]           scale before the product (torch: sqrt on both)
    MatMul(Q', K^T')                             -> scores
    any of: Mul/Div(scores, c)                   scale after the product (before the masks)
            Add(scores, mask)                    one additive mask, any broadcastable shape
            Where(cond, scores, fill) or Where(cond, fill, scores)   one, fill a constant
    Softmax(axis=-1)   (Softmax-1/11 too: their 2-D coercion on the last axis is the same)
    [Where(IsNaN(p), 0, p)]                      the NaN guard of torch's boolean-mask export
    MatMul(p, V)

Every constant must be a one-element initializer of rank 0 or 1 (so it cannot widen the
result); every intermediate value must be read by the pattern alone (not by another node, not
a graph output); the scale steps must come before the masks. The Reshapes that make Q, K and
V stay outside; a Transpose of K with another perm is not folded (the node then takes K^T,
``k_transposed=1``), except the head split below.

The head split exporters write after the projections (Transpose perm [0, 2, 1, 3] of a
(b, s, h, d) Q, K or V; [0, 2, 3, 1] making K^T) and the merge of the heads after P V
(Transpose perm [0, 2, 1, 3] of the result) fold in when only the pattern reads their values:
the node then reads and writes the (b, s, h, d) data in place (``q_bshd``, ``k_bshd``,
``v_bshd``, ``y_bshd``), which saves a copy of every operand and of the result (BERT at
hidden 256, sequence 128: 16 Transposes of 11-25 us each per run).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from onnxjit import ir
from onnxjit.passes.rewrite import GraphIndex, fused_node, is_op

_MAX_STEPS = 6  # scale, scale, Add, Where and slack: deeper chains are not attention


@dataclass
class _Step:
    """One elementwise step between the Q K^T MatMul and the Softmax."""

    kind: str  # "scale", "add", "where"
    node: ir.Node
    factor: float = 1.0
    mask: str = ""
    cond: str = ""
    fill: float = 0.0
    swap: bool = False


@dataclass
class _Match:
    members: list[ir.Node] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    attrs: dict = field(default_factory=dict)
    output: str = ""


def _const_scalar(idx: GraphIndex, name: str) -> float | None:
    """A one-element constant of rank 0 or 1 (it cannot broadcast a result wider)."""
    v = idx.const(name)
    if v is None or v.size != 1 or v.ndim > 1 or v.dtype.kind not in "fiu":
        return None
    return float(v.reshape(()))


def _rank(idx: GraphIndex, name: str) -> int | None:
    """The statically known rank of ``name``, else None.

    From declared shapes (value_info, graph inputs/outputs), constants, and the producers whose
    output rank their attributes fix (Transpose's perm, Reshape to a constant shape).
    """
    graph = idx.graph
    for vi in (graph.value_info.get(name), *graph.inputs, *graph.outputs):
        if vi is not None and vi.name == name and vi.shape is not None:
            return len(vi.shape)
    c = idx.const(name)
    if c is not None:
        return c.ndim
    prod = idx.producer_of(name)
    if is_op(prod, "Transpose") and prod.attrs.get("perm"):
        return len(prod.attrs["perm"])
    if is_op(prod, "Reshape") and len(prod.inputs) > 1:
        shape = idx.const(prod.inputs[1])
        if shape is not None and shape.ndim == 1:
            return int(shape.size)
    return None


def _scores_rank(idx: GraphIndex, qk: ir.Node, steps: list[_Step]) -> int | None:
    """The rank of the softmax input: MatMul of ranks >= 2 and the masks broadcast to the max."""
    ranks = [_rank(idx, qk.inputs[0]), _rank(idx, qk.inputs[1])]
    if None in ranks or min(ranks) < 2:
        return None
    for s in steps:
        extra = s.mask or s.cond
        if extra:
            ranks.append(_rank(idx, extra))
    return None if None in ranks else max(ranks)


def _softmax_axis(sm: ir.Node) -> int:
    default = -1 if (sm.since_version or 13) >= 13 else 1
    return int(sm.attrs.get("axis", default))


def _steps_back(idx: GraphIndex, name: str, depth: int = 0) -> Iterator[tuple[list, ir.Node]]:
    """Every way to read ``name`` as steps (in graph order) applied to a MatMul's output."""
    prod = idx.producer_of(name)
    if prod is None or depth > _MAX_STEPS or len(prod.outputs) != 1:
        return
    if is_op(prod, "MatMul"):
        yield [], prod
        return
    ins = prod.inputs
    if is_op(prod, "Mul", "Div") and len(ins) == 2:
        sides = ((0, 1), (1, 0)) if prod.op_type == "Mul" else ((0, 1),)
        for a, c in sides:
            k = _const_scalar(idx, ins[c])
            if k is None or idx.const(ins[a]) is not None:
                continue
            if prod.op_type == "Div":
                if k == 0.0:
                    continue
                k = 1.0 / k
            for steps, mm in _steps_back(idx, ins[a], depth + 1):
                yield [*steps, _Step("scale", prod, factor=k)], mm
    elif is_op(prod, "Add") and len(ins) == 2:
        for a in (0, 1):
            if idx.const(ins[a]) is not None:
                continue
            for steps, mm in _steps_back(idx, ins[a], depth + 1):
                yield [*steps, _Step("add", prod, mask=ins[1 - a])], mm
    elif is_op(prod, "Where") and len(ins) == 3:
        for a, f, swap in ((1, 2, False), (2, 1, True)):
            fill = _const_scalar(idx, ins[f])
            if fill is None or idx.const(ins[a]) is not None:
                continue
            for steps, mm in _steps_back(idx, ins[a], depth + 1):
                step = _Step("where", prod, cond=ins[0], fill=fill, swap=swap)
                yield [*steps, step], mm


def _valid_order(steps: list[_Step]) -> bool:
    """Scale steps first, then at most one Add and one Where in either order."""
    seen_mask = False
    kinds = [s.kind for s in steps]
    for kind in kinds:
        if kind == "scale" and seen_mask:
            return False
        if kind != "scale":
            seen_mask = True
    return kinds.count("add") <= 1 and kinds.count("where") <= 1


def _pre_scale(idx: GraphIndex, name: str) -> tuple[str, float, ir.Node | None]:
    """``name`` = Mul/Div(x, c), c a constant scalar: (x, factor, node); else (name, 1, None)."""
    prod = idx.producer_of(name)
    if not is_op(prod, "Mul", "Div") or len(prod.inputs) != 2:
        return name, 1.0, None
    sides = ((0, 1), (1, 0)) if prod.op_type == "Mul" else ((0, 1),)
    for a, c in sides:
        k = _const_scalar(idx, prod.inputs[c])
        if k is None or idx.const(prod.inputs[a]) is not None:
            continue
        if prod.op_type == "Div":
            if k == 0.0:
                continue
            k = 1.0 / k
        return prod.inputs[a], k, prod
    return name, 1.0, None


def _swaps_last_two(perm: list[int] | None) -> bool:
    if not perm or len(perm) < 2:
        return False
    n = len(perm)
    return list(perm) == [*range(n - 2), n - 1, n - 2]


def _match(idx: GraphIndex, sm: ir.Node) -> _Match | None:
    if len(sm.inputs) != 1:
        return None
    axis = _softmax_axis(sm)
    p = sm.outputs[0]
    tail: list[ir.Node] = []
    nan_to_zero = 0
    users = idx.users(p)
    if p in idx.outputs:
        return None
    if len(users) == 2:
        isnan = next((u for u in users if is_op(u, "IsNaN")), None)
        guard = next((u for u in users if is_op(u, "Where")), None)
        if isnan is None or guard is None:
            return None
        if guard.inputs[0] != isnan.outputs[0] or guard.inputs[2] != p:
            return None
        if _const_scalar(idx, guard.inputs[1]) != 0.0:
            return None
        tail = [isnan, guard]
        nan_to_zero = 1
        p = guard.outputs[0]
        users = idx.users(p)
    if len(users) != 1 or p in idx.outputs:
        return None
    pv = users[0]
    if not is_op(pv, "MatMul") or pv.inputs[0] != p or pv.inputs[1] == p:
        return None
    for steps, qk in _steps_back(idx, sm.inputs[0]):
        if not _valid_order(steps):
            continue
        # Softmax over the last axis only (Softmax-1/11 coerce to 2-D at `axis`, which is the
        # same thing when `axis` is the last one).
        if axis != -1 and _scores_rank(idx, qk, steps) != axis + 1:
            continue
        m = _finish(idx, sm, qk, steps, tail, pv, nan_to_zero)
        if m is not None:
            return m
    return None


def _finish(
    idx: GraphIndex,
    sm: ir.Node,
    qk: ir.Node,
    steps: list[_Step],
    tail: list[ir.Node],
    pv: ir.Node,
    nan_to_zero: int,
) -> _Match | None:
    scale = 1.0
    members: list[ir.Node] = [qk, *(s.node for s in steps), sm, *tail, pv]
    q, fq, nq = _pre_scale(idx, qk.inputs[0])
    kt, fk, nk = _pre_scale(idx, qk.inputs[1])
    if qk.inputs[0] == qk.inputs[1]:  # x x^T: keep any scaling of x outside
        q, kt, nq, nk = qk.inputs[0], qk.inputs[1], None, None
    for node, f in ((nq, fq), (nk, fk)):
        if node is not None and not idx.used_outside(node.outputs[0], [qk]):
            members.append(node)
            scale *= f
    if nq is not None and nq not in members:
        q = qk.inputs[0]
    if nk is not None and nk not in members:
        kt = qk.inputs[1]
    mask = cond = ""
    fill, swap, where_first, seen_add = 0.0, 0, 0, False
    for s in steps:
        if s.kind == "scale":
            scale *= s.factor
        elif s.kind == "add":
            mask, seen_add = s.mask, True
        else:
            cond, fill, swap, where_first = s.cond, s.fill, int(s.swap), int(not seen_add)
    # Every value made inside the pattern is read inside it only.
    final = pv.outputs[0]
    for node in members:
        if len(node.outputs) != 1:
            return None
        if node.outputs[0] != final and idx.used_outside(node.outputs[0], members):
            return None
    # The node's inputs must exist once the members are gone (Add(s, s) reads s as its mask).
    made = {node.outputs[0] for node in members}
    if any(x in made for x in (q, kt, pv.inputs[1], mask, cond)):
        return None
    k, k_transposed, k_rank = kt, 1, 0
    tr = idx.producer_of(kt)
    if is_op(tr, "Transpose") and _swaps_last_two(tr.attrs.get("perm")):
        k, k_transposed, k_rank = tr.inputs[0], 0, len(tr.attrs["perm"])
        if not idx.used_outside(kt, members):
            members.append(tr)
    v = pv.inputs[1]
    layouts = {"q_bshd": 0, "k_bshd": 0, "v_bshd": 0, "y_bshd": 0}
    if len({q, k, v}) == 3:
        # the head split of Q, K and V and the merge of the output, read in place
        heads = [
            ("q_bshd", _head_transpose(idx, q, members, _HEADS)),
            ("k_bshd", _head_transpose(idx, k, members, _HEADS_KT if k_transposed else _HEADS)),
            ("v_bshd", _head_transpose(idx, v, members, _HEADS)),
        ]
        for key, tr in heads:
            if tr is not None:
                members.append(tr)
                layouts[key] = 1
        q, k, v = (tr.inputs[0] if tr is not None else x for (_, tr), x in zip(heads, (q, k, v)))
        if layouts["k_bshd"]:
            k_transposed, k_rank = 0, 4
        out = idx.only_user(final)
        if is_op(out, "Transpose") and list(out.attrs.get("perm") or ()) == _HEADS:
            members.append(out)
            final = out.outputs[0]
            layouts["y_bshd"] = 1
    inputs = [q, k, v, mask, cond]
    while inputs and not inputs[-1]:
        inputs.pop()
    attrs = {
        "scale": float(scale),
        "k_transposed": k_transposed,
        "k_rank": k_rank,
        "fill": float(fill),
        "swap": swap,
        "where_first": where_first,
        "nan_to_zero": nan_to_zero,
        **{key: flag for key, flag in layouts.items() if flag},
    }
    order = {id(n): i for i, n in enumerate(idx.graph.nodes)}
    members.sort(key=lambda n: order[id(n)])
    return _Match(members=members, inputs=inputs, attrs=attrs, output=final)


# The head split exporters write after the Q/K/V projections ((b, s, h, d) -> (b, h, s, d)),
# the same for K^T ((b, s, h, d) -> (b, h, d, s)), and the merge of the heads after P V.
_HEADS = [0, 2, 1, 3]
_HEADS_KT = [0, 2, 3, 1]


def _head_transpose(
    idx: GraphIndex, name: str, members: list[ir.Node], perm: list[int]
) -> ir.Node | None:
    """The Transpose with ``perm`` making ``name``, when only ``members`` read ``name``."""
    tr = idx.producer_of(name)
    if (
        is_op(tr, "Transpose")
        and list(tr.attrs.get("perm") or ()) == perm
        and not idx.used_outside(name, members)
    ):
        return tr
    return None


def fuse_attention(graph: ir.Graph) -> int:
    """Replace each attention pattern (see the module docstring) by an ``SDPA`` node.

    Returns the number of patterns replaced.
    """
    idx = GraphIndex(graph)
    count = 0
    for sm in list(graph.nodes):
        if not is_op(sm, "Softmax") or idx.producer_of(sm.outputs[0]) is not sm:
            continue
        m = _match(idx, sm)
        if m is None:
            continue
        node = fused_node("SDPA", m.inputs, [m.output], attrs=m.attrs, members=m.members)
        idx.replace(m.members, [node])
        count += 1
    return count
