"""Pattern fusions for normalisations, GELU and softmax written with primitive operators.

* :func:`fuse_layernorm`: ``ReduceMean -> Sub -> (Pow 2 | Mul self) -> ReduceMean -> Add eps ->
  Sqrt -> Div`` (or ``Reciprocal``/``Div(1, .)``/``Pow -0.5`` then ``Mul``), optionally ``* gamma
  + beta``, over trailing axes -> internal ``LayerNorm``; with an ``Add(a, b)`` feeding it ->
  ``SkipLayerNorm`` (which also writes the sum when others read it); ``Add`` feeding the
  LayerNormalization operator -> ``SkipLayerNorm`` too. RMSNorm
  ``x / sqrt(mean(x^2) + eps) * gamma`` in the same spellings -> internal ``RMSNorm``.
* :func:`fuse_gelu`: ``x * 0.5 * (1 + erf(x / sqrt 2))`` and ``0.5 x (1 + tanh(sqrt(2/pi)
  (x + 0.044715 x^3)))`` in the orders exporters write, with an optional 1-D constant bias Add
  before -> internal ``Gelu``.
* :func:`fuse_softmax`: ``Exp(x - ReduceMax(x)) / ReduceSum(.)`` over one axis (also without
  the max) -> Softmax-13; ``Log(Softmax)`` -> LogSoftmax.

A pattern fires only when it is exactly equivalent: constants are checked (within float32
rounding), reduction axes and keepdims are checked, and every intermediate value must be read
only inside the pattern. Scalar constants must be 0-d or hold one element in at most one dim
(a constant of higher rank would broadcast the result to a larger shape).
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit import ir
from onnxjit.passes.rewrite import GraphIndex, fused_node, is_op, onnx_node

_SQRT2 = math.sqrt(2.0)
_SQRT_2_PI = math.sqrt(2.0 / math.pi)


# --------------------------------------------------------------------------------------------
# matching helpers


def _near(ix: GraphIndex, name: str, target: float) -> bool:
    """``name`` is a one-element constant equal to ``target`` up to the rounding of its own dtype.

    Exporters store constants such as 1/sqrt(2) in the graph's dtype, so a float16 graph's
    constant is ~5e-4 off in relative terms; a float32 or float64 one must be within a few
    float32 ulps.
    """
    value = _scalar(ix, name)
    if value is None:
        return False
    dtype = ix.const(name).dtype
    tol = max(4e-7, 2.0 * float(np.finfo(dtype).eps)) if dtype.kind == "f" else 4e-7
    return abs(value - target) <= tol * abs(target)


def _scalar(ix: GraphIndex, name: str) -> float | None:
    """The value of a one-element constant of rank <= 1, else None."""
    v = ix.const(name)
    if v is None or v.size != 1 or v.ndim > 1 or v.dtype.kind not in "fiu":
        return None
    return float(v.reshape(()))


def _other(node: ir.Node, name: str) -> str | None:
    """The other input of a binary node one of whose inputs is ``name``."""
    if len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if a == name:
        return b
    if b == name:
        return a
    return None


def _user(ix: GraphIndex, name: str, *op_types: str) -> ir.Node | None:
    """The only reader of ``name`` (not a graph output) when it is one of ``op_types``."""
    u = ix.only_user(name)
    return u if is_op(u, *op_types) else None


def _producer(ix: GraphIndex, name: str, *op_types: str) -> ir.Node | None:
    p = ix.producer_of(name)
    return p if is_op(p, *op_types) else None


def _rank(graph: ir.Graph, name: str) -> int | None:
    for vi in (graph.value_info.get(name), *graph.inputs, *graph.outputs):
        if vi is not None and vi.name == name and vi.shape is not None:
            return len(vi.shape)
    return None


def _value_rank(ix: GraphIndex, name: str) -> int | None:
    """The rank of a declared value or of a constant."""
    c = ix.const(name)
    return c.ndim if c is not None else _rank(ix.graph, name)


def _reduce_axes(ix: GraphIndex, node: ir.Node, axes_input_since: int) -> list[int] | None:
    """The explicit axes of a Reduce* node with keepdims=1, or None (no axes, or not constant).

    ``axes_input_since`` is the version from which axes are an input (18; ReduceSum 13).
    """
    if int(node.attrs.get("keepdims", 1)) != 1:
        return None
    if (node.since_version or 1) >= axes_input_since:
        if len(node.inputs) < 2 or not node.inputs[1]:
            return None
        v = ix.const(node.inputs[1])
        if v is None or v.dtype.kind not in "iu":
            return None
        axes = [int(a) for a in v.reshape(-1)]
    else:
        axes = node.attrs.get("axes")
        if axes is None:
            return None
        axes = [int(a) for a in axes]
    return axes or None


def _trailing(axes: list[int], rank: int | None) -> int | None:
    """k when ``axes`` are exactly the last k axes of a tensor of ``rank`` (None if unknown:
    then only negative axes can be proven trailing)."""
    if rank is not None:
        axes = [a - rank if a >= 0 else a for a in axes]
        if any(a < -rank for a in axes):
            return None
    if any(a >= 0 for a in axes):
        return None
    k = len(axes)
    return k if sorted(axes) == list(range(-k, 0)) else None


def _reduce_mean_k(ix: GraphIndex, node: ir.Node, x: str, rank: int | None = None) -> int | None:
    """k when ``node`` is ReduceMean(x) over the last k axes with keepdims, else None.

    ``rank`` is x's rank when the caller knows it (an elementwise function of a tensor whose
    rank is declared); otherwise the declared rank of x, if any, is used."""
    if not is_op(node, "ReduceMean") or node.inputs[0] != x:
        return None
    axes = _reduce_axes(ix, node, 18)
    if axes is None:
        return None
    return _trailing(axes, rank if rank is not None else _rank(ix.graph, x))


def _is_square(ix: GraphIndex, node: ir.Node | None, x: str) -> bool:
    """``node`` is Pow(x, 2) or Mul(x, x)."""
    if is_op(node, "Pow"):
        return node.inputs[0] == x and _scalar(ix, node.inputs[1]) == 2.0
    if is_op(node, "Mul"):
        return node.inputs[0] == x and node.inputs[1] == x
    return False


def _eps_sqrt_divide(
    ix: GraphIndex, stat: str, x: str
) -> tuple[float, list[ir.Node], ir.Node] | None:
    """Match ``x / sqrt(stat + eps)`` in its spellings, starting from the value ``stat``.

    Returns ``(eps, nodes, final)`` where ``nodes`` are the matched nodes (``final``, the node
    producing the normalised value, last), or None.
    """
    add = _user(ix, stat, "Add")
    if add is None:
        return None
    eps = _scalar(ix, _other(add, stat) or "")
    if eps is None or not eps >= 0.0:
        return None
    ve = add.outputs[0]
    nodes = [add]
    users = ix.users(ve) if ve not in ix.outputs else []
    if len(users) != 1:
        return None
    u = users[0]
    if is_op(u, "Pow") and u.inputs[0] == ve and _near(ix, u.inputs[1], -0.5):
        inv_node = u  # (var + eps) ** -0.5
    elif is_op(u, "Sqrt"):
        nodes.append(u)
        sd = u.outputs[0]
        nxt = ix.only_user(sd)
        if is_op(nxt, "Div") and nxt.inputs == [x, sd]:
            return eps, [*nodes, nxt], nxt
        one_over = is_op(nxt, "Div") and nxt.inputs[1] == sd and _scalar(ix, nxt.inputs[0]) == 1.0
        if not (is_op(nxt, "Reciprocal") or one_over):
            return None
        inv_node = nxt
    else:
        return None
    nodes.append(inv_node)
    inv = inv_node.outputs[0]
    mul = _user(ix, inv, "Mul")
    if mul is None or _other(mul, inv) != x or mul.inputs[0] == mul.inputs[1]:
        return None
    return eps, [*nodes, mul], mul


def _affine(ix: GraphIndex, out: str, k: int, op: str) -> tuple[str, ir.Node] | None:
    """A ``Mul``/``Add`` (``op``) of ``out`` by a float constant of rank <= k, else None."""
    u = _user(ix, out, op)
    if u is None:
        return None
    other = _other(u, out)
    v = ix.const(other or "")
    if v is None or v.dtype.kind not in "fV" or v.ndim > k or other == out:
        return None
    return other, u


# --------------------------------------------------------------------------------------------
# LayerNorm, SkipLayerNorm, RMSNorm


def _after(ix: GraphIndex, readers: list[ir.Node], members: list[ir.Node]) -> bool:
    """True when every node of ``readers`` comes after every node of ``members``: the fused
    node takes the place of the last member, so a value it now produces must not be read
    earlier."""
    if not readers:
        return True
    pos = {id(n): i for i, n in enumerate(ix.graph.nodes)}
    last = max(pos[id(m)] for m in members)
    return all(pos[id(r)] > last for r in readers)


def _match_layernorm(ix: GraphIndex, rm1: ir.Node) -> tuple[list[ir.Node], ir.Node] | None:
    x = rm1.inputs[0]
    k = _reduce_mean_k(ix, rm1, x)
    if k is None:
        return None
    sub = _user(ix, rm1.outputs[0], "Sub")
    if sub is None or sub.inputs != [x, rm1.outputs[0]]:
        return None
    d = sub.outputs[0]
    if d in ix.outputs:
        return None
    users = ix.users(d)
    sq = next((u for u in users if _is_square(ix, u, d)), None)
    if sq is None or len(users) != 2:
        return None  # d must be read by the square and the division only
    rm2 = _user(ix, sq.outputs[0], "ReduceMean")
    # d and its square have x's rank (keepdims statistics broadcast back to x's shape).
    if rm2 is None or _reduce_mean_k(ix, rm2, sq.outputs[0], _rank(ix.graph, x)) != k:
        return None
    m = _eps_sqrt_divide(ix, rm2.outputs[0], d)
    if m is None:
        return None
    eps, tail, final = m
    if not any(u is final for u in users) or final is sq:
        return None
    members = [rm1, sub, sq, rm2, *tail]
    out = final.outputs[0]
    gamma = beta = ""
    g = _affine(ix, out, k, "Mul")
    if g is not None:
        gamma, node = g
        members.append(node)
        out = node.outputs[0]
        b = _affine(ix, out, k, "Add")
        if b is not None:
            beta, node = b
            members.append(node)
            out = node.outputs[0]
    attrs = {"axis": -k, "epsilon": eps}
    # Add(a, b) feeding the LayerNorm and read by nothing else but it (or also elsewhere: then
    # SkipLayerNorm writes the sum as a second output).
    add = _producer(ix, x, "Add")
    readers = [u for u in ix.users(x) if u is not rm1 and u is not sub]
    skip = add is not None and len(add.inputs) == 2 and all(add.inputs)
    if skip and _after(ix, readers, members):
        outputs = [out, x] if readers or x in ix.outputs else [out]
        node = fused_node(
            "SkipLayerNorm",
            [add.inputs[0], add.inputs[1], gamma, beta],
            outputs,
            attrs=attrs,
            members=[add, *members],
        )
        return [add, *members], node
    node = fused_node("LayerNorm", [x, gamma, beta], [out], attrs=attrs, members=members)
    return members, node


def _match_rmsnorm(ix: GraphIndex, rm: ir.Node) -> tuple[list[ir.Node], ir.Node] | None:
    sq = ix.producer_of(rm.inputs[0]) if rm.inputs else None
    if sq is None or not (is_op(sq, "Pow", "Mul")):
        return None
    x = sq.inputs[0]
    if not _is_square(ix, sq, x) or ix.only_user(sq.outputs[0]) is not rm:
        return None
    k = _reduce_mean_k(ix, rm, sq.outputs[0], _rank(ix.graph, x))
    if k is None:
        return None
    m = _eps_sqrt_divide(ix, rm.outputs[0], x)
    if m is None:
        return None
    eps, tail, final = m
    members = [sq, rm, *tail]
    out = final.outputs[0]
    gamma = ""
    g = _affine(ix, out, k, "Mul")
    if g is not None:
        gamma, node = g
        members.append(node)
        out = node.outputs[0]
    node = fused_node(
        "RMSNorm", [x, gamma], [out], attrs={"axis": -k, "epsilon": eps}, members=members
    )
    return members, node


def _apply(graph: ir.Graph, start_ops: tuple[str, ...], matcher) -> int:
    """Run ``matcher(ix, node)`` on every node of ``start_ops`` still in the graph; replace."""
    ix = GraphIndex(graph)
    done = 0
    gone: set[int] = set()
    for node in list(graph.nodes):
        if id(node) in gone or not is_op(node, *start_ops):
            continue
        m = matcher(ix, node)
        if m is None:
            continue
        old, new = m
        ix.replace(old, [new])
        gone.update(id(n) for n in old)
        done += 1
    return done


def _match_add_layernormalization(
    ix: GraphIndex, ln: ir.Node
) -> tuple[list[ir.Node], ir.Node] | None:
    """``Add(a, b) -> LayerNormalization`` (the operator, opset 17, as the torch exporters
    write a transformer's residual) -> SkipLayerNorm: the sum and the normalisation in one pass
    over each row. Only when the statistics are computed in float32 (stash_type 1, the
    default) and the Mean / InvStdDev outputs are not asked for."""
    if (ln.since_version or 0) < 17 or int(ln.attrs.get("stash_type", 1)) != 1:
        return None
    if len(ln.inputs) < 2 or not ln.inputs[1] or any(ln.outputs[1:]):
        return None
    x = ln.inputs[0]
    add = _producer(ix, x, "Add")
    if add is None or len(add.inputs) != 2 or not all(add.inputs):
        return None
    axis = int(ln.attrs.get("axis", -1))
    if axis >= 0:
        # the sum's rank: declared, else the broadcast of its operands' ranks
        ranks = [_rank(ix.graph, x)]
        if ranks[0] is None:
            ranks = [_value_rank(ix, v) for v in add.inputs]
        if any(r is None for r in ranks):
            return None
        axis -= max(ranks)
    if axis >= 0:
        return None
    readers = [u for u in ix.users(x) if u is not ln]
    if not _after(ix, readers, [ln]):
        return None
    outputs = [ln.outputs[0], x] if readers or x in ix.outputs else [ln.outputs[0]]
    bias = ln.inputs[2] if len(ln.inputs) > 2 else ""
    node = fused_node(
        "SkipLayerNorm",
        [add.inputs[0], add.inputs[1], ln.inputs[1], bias],
        outputs,
        attrs={"axis": axis, "epsilon": float(ln.attrs.get("epsilon", 1e-5))},
        members=[add, ln],
    )
    return [add, ln], node


def fuse_layernorm(graph: ir.Graph) -> int:
    """LayerNorm (and Add + LayerNorm) and RMSNorm written with primitive ops -> one node;
    Add + the LayerNormalization operator -> SkipLayerNorm."""
    n = _apply(graph, ("ReduceMean",), _match_layernorm)
    n += _apply(graph, ("LayerNormalization",), _match_add_layernormalization)
    return n + _apply(graph, ("ReduceMean",), _match_rmsnorm)


# --------------------------------------------------------------------------------------------
# GELU


def _is_half(ix: GraphIndex, node: ir.Node | None, x: str) -> bool:
    """``node`` computes x * 0.5 (Mul either order) or x / 2."""
    if is_op(node, "Mul"):
        other = _other(node, x)
        return other is not None and other != x and _scalar(ix, other) == 0.5
    if is_op(node, "Div"):
        return node.inputs[0] == x and _scalar(ix, node.inputs[1]) == 2.0
    return False


def _gelu_product(ix: GraphIndex, p: str, x: str) -> list[ir.Node] | None:
    """Match ``0.5 * x * p`` from ``p`` (= 1 + erf(.) or 1 + tanh(.)) in any order; return the
    nodes (the one producing the result last)."""
    pm = _user(ix, p, "Mul")
    if pm is None:
        return None
    q = _other(pm, p)
    if q is None or q == p:
        return None
    if q == x:  # (x * p) * 0.5
        fin = ix.only_user(pm.outputs[0])
        return [pm, fin] if _is_half(ix, fin, pm.outputs[0]) else None
    h = ix.producer_of(q)
    if _is_half(ix, h, x) and ix.only_user(q) is pm:  # (x * 0.5) * p
        return [h, pm]
    if _scalar(ix, q) == 0.5:  # (p * 0.5) * x
        fin = _user(ix, pm.outputs[0], "Mul")
        if fin is not None and _other(fin, pm.outputs[0]) == x:
            return [pm, fin]
    return None


def _plus_one(ix: GraphIndex, t: str) -> ir.Node | None:
    add = _user(ix, t, "Add")
    if add is None or _scalar(ix, _other(add, t) or "") != 1.0:
        return None
    return add


def _finish_gelu(
    ix: GraphIndex, x: str, members: list[ir.Node], p_add: ir.Node, approximate: str
) -> tuple[list[ir.Node], ir.Node] | None:
    prod = _gelu_product(ix, p_add.outputs[0], x)
    if prod is None:
        return None
    members = [*members, p_add, *prod]
    out = prod[-1].outputs[0]
    inputs = [x]
    # A 1-D constant bias added just before (read by nothing else) joins the node.
    add = _producer(ix, x, "Add")
    if add is not None and not ix.used_outside(x, members):
        for i in (0, 1):
            z, b = add.inputs[i], add.inputs[1 - i]
            v = ix.const(b)
            if ix.const(z) is None and v is not None and v.ndim == 1 and v.dtype.kind == "f":
                inputs = [z, b]
                members = [add, *members]
                break
    node = fused_node("Gelu", inputs, [out], attrs={"approximate": approximate}, members=members)
    return members, node


def _match_gelu_erf(ix: GraphIndex, erf: ir.Node) -> tuple[list[ir.Node], ir.Node] | None:
    a = erf.inputs[0]
    pa = ix.producer_of(a)
    if pa is None or ix.only_user(a) is not erf:
        return None
    if is_op(pa, "Div") and _near(ix, pa.inputs[1], _SQRT2):
        x = pa.inputs[0]
    elif is_op(pa, "Mul"):
        c = next((i for i in pa.inputs if _near(ix, i, 1 / _SQRT2)), None)
        x = _other(pa, c) if c is not None else None
        if x is None or x == c:
            return None
    else:
        return None
    p_add = _plus_one(ix, erf.outputs[0])
    if p_add is None:
        return None
    return _finish_gelu(ix, x, [pa, erf], p_add, "none")


def _cube_of(ix: GraphIndex, name: str) -> tuple[str, list[ir.Node]] | None:
    """``name`` = x^3 as Pow(x, 3) or Mul(Mul(x, x), x) in either order: (x, nodes)."""
    node = ix.producer_of(name)
    if is_op(node, "Pow") and _scalar(ix, node.inputs[1]) == 3.0:
        return node.inputs[0], [node]
    if is_op(node, "Mul"):
        for i in (0, 1):
            sq = ix.producer_of(node.inputs[i])
            x = node.inputs[1 - i]
            if is_op(sq, "Mul") and sq.inputs == [x, x] and ix.only_user(node.inputs[i]) is node:
                return x, [sq, node]
    return None


def _match_gelu_tanh(ix: GraphIndex, th: ir.Node) -> tuple[list[ir.Node], ir.Node] | None:
    u = th.inputs[0]
    pu = _producer(ix, u, "Mul")
    if pu is None or ix.only_user(u) is not th:
        return None
    c = next((i for i in pu.inputs if _near(ix, i, _SQRT_2_PI)), None)
    s = _other(pu, c) if c is not None else None
    ps = _producer(ix, s or "", "Add")
    if ps is None or ix.only_user(s) is not pu:
        return None
    for i in (0, 1):
        x, kname = ps.inputs[i], ps.inputs[1 - i]
        pk = _producer(ix, kname, "Mul")
        if pk is None or ix.only_user(kname) is not ps:
            continue
        c2 = next((j for j in pk.inputs if _near(ix, j, 0.044715)), None)
        cube = _other(pk, c2) if c2 is not None else None
        if cube is None or cube == c2 or ix.only_user(cube) is not pk:
            continue
        m = _cube_of(ix, cube)
        if m is None or m[0] != x:
            continue
        p_add = _plus_one(ix, th.outputs[0])
        if p_add is None:
            return None
        return _finish_gelu(ix, x, [*m[1], pk, ps, pu, th], p_add, "tanh")
    return None


def fuse_gelu(graph: ir.Graph) -> int:
    """GELU in its erf and tanh forms (and a constant bias Add before it) -> internal Gelu."""
    n = _apply(graph, ("Erf",), _match_gelu_erf)
    return n + _apply(graph, ("Tanh",), _match_gelu_tanh)


# --------------------------------------------------------------------------------------------
# Softmax


def _single_axis(ix: GraphIndex, node: ir.Node, since: int, *same_shape: str) -> int | None:
    """The one axis ``node`` reduces, negative where the rank of any of ``same_shape`` (values
    of the reduced input's shape) is known, so that 1 and -2 of a rank-3 input compare equal."""
    axes = _reduce_axes(ix, node, since)
    if axes is None or len(axes) != 1:
        return None
    a = axes[0]
    rank = next((r for r in (_rank(ix.graph, v) for v in same_shape) if r is not None), None)
    if rank is not None:
        if not -rank <= a < rank:
            return None
        a = a - rank if a >= 0 else a
    return a


def _match_softmax(ix: GraphIndex, exp: ir.Node) -> tuple[list[ir.Node], ir.Node] | None:
    e = exp.inputs[0]
    members = [exp]
    x, axis = e, None
    sub = _producer(ix, e, "Sub")
    if sub is not None and ix.only_user(e) is exp:
        mx = _producer(ix, sub.inputs[1], "ReduceMax")
        if mx is not None and mx.inputs[0] == sub.inputs[0] and ix.only_user(mx.outputs[0]) is sub:
            axis = _single_axis(ix, mx, 18, mx.inputs[0])
            if axis is not None:
                x = sub.inputs[0]
                members = [mx, sub, exp]
    ev = exp.outputs[0]
    users = ix.users(ev) if ev not in ix.outputs else []
    if len(users) != 2:
        return None
    rs = next((u for u in users if is_op(u, "ReduceSum") and u.inputs[0] == ev), None)
    div = next((u for u in users if is_op(u, "Div")), None)
    if rs is None or div is None or div.inputs != [ev, rs.outputs[0]]:
        return None
    if ix.only_user(rs.outputs[0]) is not div:
        return None
    # exp(...) has the shape of x, whose rank is known more often (graph input).
    sum_axis = _single_axis(ix, rs, 13, ev, x, e)
    if sum_axis is None or (axis is not None and sum_axis != axis):
        return None
    members += [rs, div]
    node = onnx_node("Softmax", 13, [x], div.outputs, attrs={"axis": sum_axis}, members=members)
    return members, node


def _match_log_softmax(ix: GraphIndex, log: ir.Node) -> tuple[list[ir.Node], ir.Node] | None:
    sm = _producer(ix, log.inputs[0], "Softmax")
    if sm is None or ix.only_user(log.inputs[0]) is not log:
        return None
    version = sm.since_version or 13
    axis = sm.attrs.get("axis", -1 if version >= 13 else 1)
    members = [*(sm.members or [sm]), log]
    node = onnx_node(
        "LogSoftmax", version, sm.inputs, log.outputs, attrs={"axis": axis}, members=members
    )
    return [sm, log], node


def fuse_softmax(graph: ir.Graph) -> int:
    """``exp(x - max) / sum`` (with or without the max) -> Softmax-13; Log(Softmax) ->
    LogSoftmax."""
    n = _apply(graph, ("Exp",), _match_softmax)
    return n + _apply(graph, ("Log",), _match_log_softmax)
