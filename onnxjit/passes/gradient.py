"""Reverse-mode expansion of ``ai.onnx.preview.training.Gradient`` nodes.

``Gradient(xs, zs, y)`` takes the values of ``xs + zs`` as inputs and outputs dY/dX for each X of
``xs``, computed over the part of the graph that produces ``y`` from ``xs`` and ``zs``. This pass
replaces every Gradient node, before binding, with standard ONNX nodes that compute those
derivatives by reverse-mode differentiation, so no kernel is needed for Gradient itself.

Contract:

* The seed is ``ones_like(y)``: for a non-scalar ``y`` each output is the gradient of
  ``sum(y)`` (what onnxruntime's training Gradient and the ONNX conformance data compute), with
  the shape and dtype of its X.
* The differentiated graph is made of the nodes between the leaves ``xs + zs`` and ``y``: the
  nodes producing a leaf are cut, and every other value those nodes read (initializers, graph
  inputs, values that do not depend on a leaf) is a constant. When the Gradient node's inputs are
  the very tensors named in ``xs``/``zs`` the forward values are reused; otherwise the forward
  nodes are cloned and evaluated at the Gradient node's inputs, as the specification allows.
* Differentiable operators: Add, Sub, Mul, Div, Pow, Neg, Abs, Sqrt, MatMul, Gemm, Relu,
  Sigmoid, Tanh, Exp, Log, Sum, Identity, Cast, CastLike, Reshape, Flatten, Squeeze, Unsqueeze,
  Expand, Transpose, ReduceSum and ReduceMean (every version), Softmax and LogSoftmax (13+),
  Sign, and two-operand Einsum (the ops the expansion itself emits, so that a Gradient of a
  Gradient's output, the specification's higher-order example, expands too).
  Operators whose outputs receive no gradient (shape computations, comparisons) may appear
  anywhere. A gradient reaching an operator outside this set is an
  :class:`UnsupportedOperatorError` naming it, as is a forward node carrying a subgraph (If,
  Loop, Scan).
* Broadcasting (Add, Sub, Mul, Div, Sum, Gemm's C, MatMul's batch dimensions, Expand) is undone
  by summing the gradient over the broadcast axes, found at run time from the two shapes
  (Shape, Equal, NonZero, then ReduceSum with ``noop_with_empty_axes`` and a Reshape to the
  input's shape), so unknown static shapes are fine.
* An X that ``y`` does not depend on gets zeros. An empty output name skips that derivative.

The emitted nodes are resolved at opset ``GRAD_OPSET`` whatever the model imports (they carry
their own ``since_version``), so the expansion works for models importing opset 7 as for 23.
After the expansion the graph's nodes are sorted topologically (stable), because a Gradient
node may come before the nodes producing ``y`` in the file.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from onnxjit import ir
from onnxjit.errors import ModelCheckError, UnsupportedOperatorError
from onnxjit.registry import find_schema, normalize_domain

GRADIENT_DOMAIN = "ai.onnx.preview.training"
GRAD_OPSET = 18

_ATTR_TYPES = {
    int: onnx.AttributeProto.INT,
    float: onnx.AttributeProto.FLOAT,
    str: onnx.AttributeProto.STRING,
}


def expand_gradients(model: ir.Model) -> None:
    """Replace every Gradient node of the model (subgraphs included) by its reverse-mode nodes.

    Raises UnsupportedOperatorError when a gradient must flow through an operator this pass
    cannot differentiate, ModelCheckError when the Gradient node's attributes are malformed.
    """
    if not _has_gradient(model.graph):
        return
    names = _all_names(model.graph)
    _Expander(model, names).graph(model.graph)


def _has_gradient(graph: ir.Graph) -> bool:
    for node in graph.nodes:
        if node.op_type == "Gradient" and normalize_domain(node.domain) == GRADIENT_DOMAIN:
            return True
        for g in ir.subgraphs(node):
            if _has_gradient(g):
                return True
    return False


def _all_names(graph: ir.Graph) -> set[str]:
    names = set(graph.initializers) | {v.name for v in graph.inputs + graph.outputs}
    for node in graph.nodes:
        names.update(node.inputs)
        names.update(node.outputs)
        for g in ir.subgraphs(node):
            names |= _all_names(g)
    return names


def _topological(nodes: list[ir.Node]) -> list[ir.Node]:
    """``nodes`` in an order where producers come first, keeping file order where possible."""
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.outputs:
            if o:
                producer[o] = i
    state = [0] * len(nodes)  # 0 unseen, 1 on the stack, 2 placed
    order: list[ir.Node] = []
    for start in range(len(nodes)):
        if state[start]:
            continue
        stack: list[tuple[int, int]] = [(start, 0)]
        state[start] = 1
        while stack:
            i, k = stack.pop()
            deps = nodes[i].inputs + ir.outer_reads(nodes[i])
            while k < len(deps):
                j = producer.get(deps[k], -1) if deps[k] else -1
                k += 1
                if j >= 0 and state[j] == 0:
                    stack.append((i, k))
                    stack.append((j, 0))
                    state[j] = 1
                    break
                if j >= 0 and state[j] == 1 and j != i:
                    raise ModelCheckError(
                        [
                            f"{nodes[i].describe()}: the graph has a cycle through "
                            f"{deps[k - 1]!r} after expanding Gradient nodes; a Gradient's y "
                            "must not depend on the Gradient's own outputs"
                        ]
                    )
            else:
                state[i] = 2
                order.append(nodes[i])
    return order


class _Expander:
    def __init__(self, model: ir.Model, names: set[str]):
        self.model = model
        self.names = names
        self.counter = itertools.count()
        self._shapes: dict[str, tuple] | None = None
        self.reuse = True

    # -- naming and emission -------------------------------------------------------------

    def fresh(self, hint: str) -> str:
        while True:
            name = f"{self.prefix}/{hint}_{next(self.counter)}"
            if name not in self.names:
                self.names.add(name)
                return name

    def emit(self, op: str, inputs: list[str], n_out: int = 1, **attrs: Any) -> list[str]:
        outs = [self.fresh(op) for _ in range(n_out)]
        schema = find_schema(op, GRAD_OPSET, "")
        node = ir.Node(
            op_type=op,
            domain="",
            inputs=list(inputs),
            outputs=outs,
            attrs=dict(attrs),
            attr_types={k: _attr_type(v) for k, v in attrs.items()},
            name=self.fresh(op),
            since_version=schema.since_version if schema is not None else None,
        )
        self.out_nodes.append(node)
        return outs

    def op(self, op: str, *inputs: str, **attrs: Any) -> str:
        return self.emit(op, list(inputs), 1, **attrs)[0]

    def const(self, value: np.ndarray, hint: str = "const") -> str:
        name = self.fresh(hint)
        self.cur_graph.initializers[name] = value
        self.cur_graph.initializer_order.append(name)
        return name

    # -- graphs ----------------------------------------------------------------------------

    def graph(self, graph: ir.Graph) -> None:
        for node in graph.nodes:
            for g in ir.subgraphs(node):
                self.graph(g)
        while True:
            idx = next(
                (
                    i
                    for i, n in enumerate(graph.nodes)
                    if n.op_type == "Gradient" and normalize_domain(n.domain) == GRADIENT_DOMAIN
                ),
                None,
            )
            if idx is None:
                break
            node = graph.nodes[idx]
            self.cur_graph = graph
            self.out_nodes: list[ir.Node] = []
            self.prefix = node.name or f"Gradient_{idx}"
            self.expand(graph, node)
            graph.nodes = graph.nodes[:idx] + self.out_nodes + graph.nodes[idx + 1 :]
            graph.nodes = _topological(graph.nodes)
        for i, n in enumerate(graph.nodes):
            n.index = i

    def expand(self, graph: ir.Graph, gnode: ir.Node) -> None:
        xs = list(gnode.attrs.get("xs") or [])
        zs = list(gnode.attrs.get("zs") or [])
        y = gnode.attrs.get("y")
        problems = []
        if not xs:
            problems.append("attribute 'xs' is missing or empty")
        if not y:
            problems.append("attribute 'y' is missing")
        if len(gnode.inputs) != len(xs) + len(zs):
            problems.append(
                f"it has {len(gnode.inputs)} inputs but xs and zs name {len(xs) + len(zs)} "
                "tensors; pass one input per name of xs followed by zs"
            )
        if len(gnode.outputs) > len(xs):
            problems.append(
                f"it has {len(gnode.outputs)} outputs but xs names {len(xs)} tensors; "
                "one output per name of xs"
            )
        if problems:
            raise ModelCheckError([f"{gnode.describe()}: {p}" for p in problems])
        leaves = xs + zs
        # The forward nodes: ancestors of y (stopping at leaves) that depend on a leaf.
        producer = {o: n for n in graph.nodes for o in n.outputs if o}
        producer = {k: v for k, v in producer.items() if v is not gnode}
        needed: list[ir.Node] = []
        seen: set[int] = set()
        stack = [y]
        visited_vals: set[str] = set()
        while stack:
            v = stack.pop()
            if not v or v in visited_vals or v in leaves:
                continue
            visited_vals.add(v)
            n = producer.get(v)
            if n is None or id(n) in seen:
                continue
            seen.add(id(n))
            needed.append(n)
            stack.extend(n.inputs)
        order = {id(n): i for i, n in enumerate(graph.nodes)}
        needed.sort(key=lambda n: order[id(n)])
        dep = set(leaves)  # values depending on a leaf
        active = set(xs)  # values depending on an x (gradients flow through these)
        fwd: list[ir.Node] = []
        for n in needed:
            if any(i in dep for i in n.inputs if i):
                fwd.append(n)
                dep.update(o for o in n.outputs if o and o not in leaves)
                if any(i in active for i in n.inputs if i):
                    active.update(o for o in n.outputs if o and o not in leaves)
        # Evaluate at the Gradient's inputs: clone the forward nodes unless they are the tensors.
        rename: dict[str, str] = {}
        self.reuse = list(gnode.inputs) == leaves
        if not self.reuse:
            rename = dict(zip(leaves, gnode.inputs, strict=True))
            for n in fwd:
                if ir.subgraphs(n):
                    raise UnsupportedOperatorError(
                        f"{gnode.describe()}: cannot differentiate through {n.describe()}: "
                        "operators with subgraphs are not supported by the Gradient expansion"
                    )
                c = ir.Node(
                    op_type=n.op_type,
                    domain=n.domain,
                    inputs=[rename.get(i, i) if i else "" for i in n.inputs],
                    outputs=[],
                    attrs=dict(n.attrs),
                    attr_types=dict(n.attr_types),
                    name=self.fresh(n.name or n.op_type),
                    overload=n.overload,
                    since_version=n.since_version,
                )
                for o in n.outputs:
                    if o:
                        rename[o] = self.fresh(o)
                c.outputs = [rename.get(o, "") if o else "" for o in n.outputs]
                self.out_nodes.append(c)

        def val(name: str) -> str:
            return rename.get(name, name) if name else ""

        grads: dict[str, list[str]] = {}
        if y in active:
            yv = val(y)
            one = self.op("CastLike", self.const(np.array(1.0, dtype=np.float32), "one"), yv)
            grads[y] = [self.op("Expand", one, self.op("Shape", yv))]
        for n in reversed(fwd):
            outs_g = [self.total(grads.get(o)) if o else None for o in n.outputs]
            if all(g is None for g in outs_g):
                continue
            if ir.subgraphs(n):
                raise UnsupportedOperatorError(
                    f"{gnode.describe()}: cannot differentiate through {n.describe()}: "
                    "operators with subgraphs are not supported by the Gradient expansion"
                )
            rule = _RULES.get(n.op_type) if normalize_domain(n.domain) == "" else None
            if rule is None:
                raise UnsupportedOperatorError(
                    f"{gnode.describe()}: cannot differentiate through {n.describe()}: "
                    f"operator {n.op_type!r} has no gradient rule in onnxjit (supported: "
                    f"{', '.join(sorted(_RULES))})"
                )
            ins = [val(i) for i in n.inputs]
            want = [bool(i) and i in active for i in n.inputs]
            in_grads = rule(self, n, ins, [val(o) for o in n.outputs], outs_g, want)
            for i, g in zip(n.inputs, in_grads, strict=False):
                if g is not None and i and i in active:
                    grads.setdefault(i, []).append(g)
        for x, out in zip(xs, gnode.outputs, strict=False):
            if not out:
                continue
            g = self.total(grads.get(x))
            if g is None:
                xv = val(x)
                zero = self.op("CastLike", self.const(np.array(0.0, dtype=np.float32), "zero"), xv)
                g = self.op("Expand", zero, self.op("Shape", xv))
            self.out_nodes.append(
                ir.Node(
                    op_type="Identity",
                    domain="",
                    inputs=[g],
                    outputs=[out],
                    name=self.fresh("Identity"),
                    since_version=find_schema("Identity", GRAD_OPSET, "").since_version,
                )
            )

    def total(self, gs: list[str] | None) -> str | None:
        """The sum of the gradient contributions to one value (None when there are none)."""
        if not gs:
            return None
        if len(gs) > 1:
            gs[:] = [self.op("Sum", *gs)]
        return gs[0]

    # -- helpers for rules -----------------------------------------------------------------

    def unbroadcast(self, g: str, x: str, like: str | None = None) -> str:
        """``g`` summed over the axes along which ``x`` was broadcast, reshaped to x's shape.

        ``like`` names the forward value whose shape ``g`` has; when it and ``x`` are declared
        with the same shape there is nothing to undo and ``g`` is returned as it is.
        """
        if like is not None and self.same_static_shape(x, like):
            return g
        sx = self.op("Shape", x)
        sg = self.op("Shape", g)
        n_pad = self.op("Sub", self.op("Size", sg), self.op("Size", sx))
        ones = self.op(
            "Expand",
            self.const(np.ones(1, dtype=np.int64), "one_i64"),
            self.op("Reshape", n_pad, self.const(np.array([1], dtype=np.int64), "shape1")),
        )
        padded = self.op("Concat", ones, sx, axis=0)
        axes = self.op(
            "Reshape",
            self.op("NonZero", self.op("Not", self.op("Equal", padded, sg))),
            self.const(np.array([-1], dtype=np.int64), "flat"),
        )
        r = self.op("ReduceSum", g, axes, keepdims=1, noop_with_empty_axes=1)
        return self.op("Reshape", r, sx)

    def version(self, n: ir.Node) -> int:
        """The schema version a forward node obeys (set by the inliner, else from the opset)."""
        if n.since_version is not None:
            return n.since_version
        dom = normalize_domain(n.domain)
        schema = find_schema(n.op_type, self.model.opset_imports.get(dom, 0), dom)
        return schema.since_version if schema is not None else 1

    def rank(self, name: str) -> int | None:
        """The static rank of a value (original name) when the model says it."""
        shape = self.shapes().get(name)
        return None if shape is None else len(shape)

    def same_static_shape(self, a: str, b: str) -> bool:
        """Whether two values of the forward graph are declared with one and the same shape.

        Only when the forward values are reused (not cloned at other inputs, whose shapes may
        differ), and only for fully declared shapes (ints or the same dimension names).
        """
        if not self.reuse:
            return False
        sa, sb = self.shapes().get(a), self.shapes().get(b)
        return sa is not None and sa == sb and all(d is not None for d in sa)

    def shapes(self) -> dict[str, tuple]:
        """Declared and inferred shapes of the model's values (value infos, shape inference)."""
        if self._shapes is None:
            self._shapes = {}
            self._collect_shapes(self.model.graph)
            proto = getattr(self.model, "proto", None)
            if proto is not None:
                try:
                    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
                except Exception:  # noqa: BLE001 - shapes are only hints here
                    inferred = None
                if inferred is not None:
                    for v in inferred.graph.value_info:
                        shape = ir.ValueInfo(v.name, v.type).shape
                        if shape is not None:
                            self._shapes.setdefault(v.name, shape)
        return self._shapes

    def _collect_shapes(self, graph: ir.Graph) -> None:
        for v in graph.inputs + graph.outputs + list(graph.value_info.values()):
            if v.shape is not None:
                self._shapes[v.name] = v.shape
        for name, arr in graph.initializers.items():
            self._shapes[name] = tuple(np.shape(arr))
        for n in graph.nodes:
            for g in ir.subgraphs(n):
                self._collect_shapes(g)


def _attr_type(value: Any) -> int:
    if isinstance(value, list):
        if value and isinstance(value[0], float):
            return onnx.AttributeProto.FLOATS
        if value and isinstance(value[0], str):
            return onnx.AttributeProto.STRINGS
        return onnx.AttributeProto.INTS
    return _ATTR_TYPES.get(type(value), onnx.AttributeProto.UNDEFINED)


# -- gradient rules ----------------------------------------------------------------------------
# A rule gets (expander, node, input value names, output value names, output gradients (None
# where an output gets none), which inputs need a gradient) and returns one gradient name (or
# None) per input. Names are those of the expanded graph (clones when the forward is cloned).

Rule = Callable[
    [_Expander, ir.Node, list[str], list[str], list[str | None], list[bool]], list[str | None]
]
_RULES: dict[str, Rule] = {}


def _rule(*ops: str) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        for op in ops:
            _RULES[op] = fn
        return fn

    return deco


@_rule("Add")
def _add(e, n, ins, outs, gs, want):
    g = gs[0]
    return [
        e.unbroadcast(g, ins[0], outs[0]) if want[0] else None,
        e.unbroadcast(g, ins[1], outs[0]) if want[1] else None,
    ]


@_rule("Sub")
def _sub(e, n, ins, outs, gs, want):
    g = gs[0]
    return [
        e.unbroadcast(g, ins[0], outs[0]) if want[0] else None,
        e.unbroadcast(e.op("Neg", g), ins[1], outs[0]) if want[1] else None,
    ]


@_rule("Mul")
def _mul(e, n, ins, outs, gs, want):
    g = gs[0]
    a, b = ins
    return [
        e.unbroadcast(e.op("Mul", g, b), a, outs[0]) if want[0] else None,
        e.unbroadcast(e.op("Mul", g, a), b, outs[0]) if want[1] else None,
    ]


@_rule("Div")
def _div(e, n, ins, outs, gs, want):
    # d(a/b)/da = 1/b; d(a/b)/db = -a/b**2 = -(a/b)/b.
    g = gs[0]
    a, b = ins
    ga = gb = None
    if want[0]:
        ga = e.unbroadcast(e.op("Div", g, b), a, outs[0])
    if want[1]:
        gb = e.unbroadcast(e.op("Neg", e.op("Mul", g, e.op("Div", outs[0], b))), b, outs[0])
    return [ga, gb]


@_rule("Neg")
def _neg(e, n, ins, outs, gs, want):
    return [e.op("Neg", gs[0])]


@_rule("Identity")
def _identity(e, n, ins, outs, gs, want):
    return [gs[0]]


@_rule("Abs")
def _abs(e, n, ins, outs, gs, want):
    return [e.op("Mul", gs[0], e.op("Sign", ins[0]))]


@_rule("Sqrt")
def _sqrt(e, n, ins, outs, gs, want):
    # d sqrt(x)/dx = 1 / (2 sqrt(x)); y + y avoids a typed constant 2.
    return [e.op("Div", gs[0], e.op("Add", outs[0], outs[0]))]


@_rule("Relu")
def _relu(e, n, ins, outs, gs, want):
    # Sign(y) is 1 where x > 0 and 0 elsewhere (y = max(x, 0) >= 0): the derivative, 0 at 0.
    return [e.op("Mul", gs[0], e.op("Sign", outs[0]))]


@_rule("Sigmoid")
def _sigmoid(e, n, ins, outs, gs, want):
    y = outs[0]
    return [e.op("Mul", gs[0], e.op("Sub", y, e.op("Mul", y, y)))]


@_rule("Tanh")
def _tanh(e, n, ins, outs, gs, want):
    y = outs[0]
    return [e.op("Sub", gs[0], e.op("Mul", gs[0], e.op("Mul", y, y)))]


@_rule("Exp")
def _exp(e, n, ins, outs, gs, want):
    return [e.op("Mul", gs[0], outs[0])]


@_rule("Log")
def _log(e, n, ins, outs, gs, want):
    return [e.op("Div", gs[0], ins[0])]


@_rule("Sum")
def _sum(e, n, ins, outs, gs, want):
    return [e.unbroadcast(gs[0], x, outs[0]) if w else None for x, w in zip(ins, want, strict=True)]


@_rule("Cast", "CastLike")
def _cast(e, n, ins, outs, gs, want):
    return [e.op("CastLike", gs[0], ins[0])] + [None] * (len(ins) - 1)


@_rule("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(e, n, ins, outs, gs, want):
    return [e.op("Reshape", gs[0], e.op("Shape", ins[0]))] + [None] * (len(ins) - 1)


@_rule("Expand")
def _expand(e, n, ins, outs, gs, want):
    return [e.unbroadcast(gs[0], ins[0], outs[0]), None]


@_rule("Transpose")
def _transpose(e, n, ins, outs, gs, want):
    perm = n.attrs.get("perm")
    if perm is None:
        return [e.op("Transpose", gs[0])]  # the default (reversal) is its own inverse
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[int(p)] = i
    return [e.op("Transpose", gs[0], perm=inv)]


@_rule("MatMul")
def _matmul(e, n, ins, outs, gs, want):
    # numpy matmul semantics, written as Einsum so the batch dimensions broadcast; a 1-D
    # operand (rank known statically) has its vector dimension only. The summed batch axes
    # of a broadcast operand are removed by unbroadcast.
    g = gs[0]
    a, b = ins
    ra, rb = e.rank(n.inputs[0]), e.rank(n.inputs[1])
    if ra == 1 and rb == 1:  # a dot product: y is a scalar
        return [e.op("Mul", g, b) if want[0] else None, e.op("Mul", g, a) if want[1] else None]
    sa = "k" if ra == 1 else "...mk"
    sb = "k" if rb == 1 else "...kn"
    sy = "...n" if ra == 1 else ("...m" if rb == 1 else "...mn")
    ga = gb = None
    if want[0]:
        ga = e.unbroadcast(e.op("Einsum", g, b, equation=f"{sy},{sb}->{sa}"), a)
    if want[1]:
        gb = e.unbroadcast(e.op("Einsum", a, g, equation=f"{sa},{sy}->{sb}"), b)
    return [ga, gb]


@_rule("Pow")
def _pow(e, n, ins, outs, gs, want):
    # d(a**b)/da = b * a**(b-1); d(a**b)/db = a**b * log(a) (a > 0). The exponent may have an
    # integer type: it is cast to the gradient's type where it multiplies.
    g = gs[0]
    a, b = ins
    ga = gb = None
    if want[0]:
        one = e.op("CastLike", e.const(np.array(1.0, np.float32), "one"), b)
        da = e.op("Mul", e.op("CastLike", b, g), e.op("Pow", a, e.op("Sub", b, one)))
        ga = e.unbroadcast(e.op("Mul", g, da), a, outs[0])
    if want[1]:
        gb = e.unbroadcast(e.op("Mul", g, e.op("Mul", outs[0], e.op("Log", a))), b, outs[0])
    return [ga, gb]


def _softmax_axis(e, n) -> int:
    if e.version(n) < 13:
        # Before opset 13 Softmax and LogSoftmax flatten to 2-D around the axis.
        raise UnsupportedOperatorError(
            f"cannot differentiate through {n.describe()}: the gradient of {n.op_type} is "
            "implemented for opset 13 and later only (earlier versions coerce to 2-D); "
            "export the model at opset 13 or later"
        )
    return int(n.attrs.get("axis", -1))


@_rule("Softmax")
def _softmax(e, n, ins, outs, gs, want):
    # dx = y * (g - sum(g * y, axis)).
    axis = e.const(np.array([_softmax_axis(e, n)], np.int64), "axis")
    y = outs[0]
    s = e.op("ReduceSum", e.op("Mul", gs[0], y), axis, keepdims=1)
    return [e.op("Mul", y, e.op("Sub", gs[0], s))]


@_rule("LogSoftmax")
def _log_softmax(e, n, ins, outs, gs, want):
    # dx = g - softmax(x) * sum(g, axis), softmax(x) = exp(y).
    axis = e.const(np.array([_softmax_axis(e, n)], np.int64), "axis")
    s = e.op("ReduceSum", gs[0], axis, keepdims=1)
    return [e.op("Sub", gs[0], e.op("Mul", e.op("Exp", outs[0]), s))]


@_rule("Sign")
def _sign(e, n, ins, outs, gs, want):
    # Piecewise constant: zero derivative (a Relu gradient differentiated again uses it).
    return [None]


@_rule("Einsum")
def _einsum(e, n, ins, outs, gs, want):
    # For "A,B->C" without repeated letters in a term, dA = einsum("C,B->A", g, b): every
    # letter of A must appear in B or C (a letter summed away in A alone would need an
    # Expand). Ellipses broadcast; the summed batch axes are undone by unbroadcast. This is
    # what the MatMul rule emits, so Gradient nodes can be differentiated again.
    eq = str(n.attrs.get("equation", "")).replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if not arrow or len(terms) != len(ins) or len(terms) > 2:
        raise UnsupportedOperatorError(
            f"cannot differentiate through {n.describe()}: the Einsum gradient needs an "
            f"explicit output ('->') and one or two operands, found {eq!r}"
        )
    res: list[str | None] = [None] * len(ins)
    for k, term in enumerate(terms):
        if not want[k]:
            continue
        others = [t for j, t in enumerate(terms) if j != k]
        letters = list(term.replace("...", ""))
        known = set(out + "".join(others))
        if len(set(letters)) != len(letters) or not set(letters) <= known:
            raise UnsupportedOperatorError(
                f"cannot differentiate through {n.describe()}: equation {eq!r} repeats a "
                "letter in an operand or sums a letter of one operand alone"
            )
        operands = [gs[0]] + [ins[j] for j in range(len(ins)) if j != k]
        grad = e.op("Einsum", *operands, equation=",".join([out, *others]) + "->" + term)
        res[k] = e.unbroadcast(grad, ins[k])
    return res


@_rule("Gemm")
def _gemm(e, n, ins, outs, gs, want):
    # Y = alpha * A' @ B' + beta * C with A' = A or A^T (transA), B' = B or B^T (transB).
    g = gs[0]
    alpha = float(n.attrs.get("alpha", 1.0))
    beta = float(n.attrs.get("beta", 1.0))
    ta = int(n.attrs.get("transA", 0))
    tb = int(n.attrs.get("transB", 0))
    a, b = ins[0], ins[1]
    res: list[str | None] = [None] * len(ins)
    if want[0]:
        if ta:
            res[0] = e.op("Gemm", b, g, alpha=alpha, transA=tb, transB=1)
        else:
            res[0] = e.op("Gemm", g, b, alpha=alpha, transB=1 - tb)
    if want[1]:
        if tb:
            res[1] = e.op("Gemm", g, a, alpha=alpha, transA=1, transB=ta)
        else:
            res[1] = e.op("Gemm", a, g, alpha=alpha, transA=1 - ta)
    if len(ins) > 2 and ins[2] and want[2]:
        gc = g
        if beta != 1.0:
            gc = e.op("Mul", g, e.op("CastLike", e.const(np.array(beta, np.float64), "beta"), g))
        res[2] = e.unbroadcast(gc, ins[2], outs[0])
    return res


def _reduce_back(e, n, ins, g, axes_input: bool) -> str:
    """The gradient of a Reduce* output broadcast back to the input's shape (sum semantics)."""
    x = ins[0]
    keepdims = int(n.attrs.get("keepdims", 1))
    noop = int(n.attrs.get("noop_with_empty_axes", 0))
    if axes_input:
        axes_name = ins[1] if len(ins) > 1 and ins[1] else ""
        axes_value = e.cur_graph.initializers.get(n.inputs[1]) if axes_name else None
        if axes_name and axes_value is None:
            axes_value = _constant_value(e.cur_graph, n.inputs[1])
        axes = None if not axes_name else axes_value
        dynamic = bool(axes_name) and axes_value is None
    else:
        axes = n.attrs.get("axes")
        dynamic = False
    if not dynamic and (axes is None or len(np.atleast_1d(axes)) == 0):
        if noop:
            return g  # no axes with noop_with_empty_axes: the reduction is the identity
        axes = None  # no axes: every axis is reduced
    sx = e.op("Shape", x)
    if keepdims or (not dynamic and axes is None):
        # keepdims: the reduced axes are there with size 1; all axes reduced: g is a scalar.
        return e.op("Expand", g, sx)
    if not dynamic:
        ax = e.const(np.asarray(np.atleast_1d(axes), dtype=np.int64), "axes")
        return e.op("Expand", e.op("Unsqueeze", g, ax), sx)
    # Axes computed at run time: the kept shape is that of the reduction with keepdims.
    kept = e.op(
        "Shape",
        e.op("ReduceSum", x, ins[1], keepdims=1, noop_with_empty_axes=noop),
    )
    return e.op("Expand", e.op("Reshape", g, kept), sx)


def _constant_value(graph: ir.Graph, name: str) -> np.ndarray | None:
    for node in graph.nodes:
        if name in node.outputs and node.op_type == "Constant" and "value" in node.attrs:
            return np.asarray(node.attrs["value"])
    return None


def _reduce_rule(mean: bool) -> Rule:
    def rule(e, n, ins, outs, gs, want):
        version = e.version(n)
        axes_input = version >= (13 if n.op_type == "ReduceSum" else 18)
        g = gs[0]
        if mean:
            # The mean divides by the number of reduced elements = size(x) / size(y).
            count = e.op("Div", e.op("Size", ins[0]), e.op("Size", outs[0]))
            g = e.op("Div", g, e.op("CastLike", count, g))
        back = _reduce_back(e, n, ins, g, axes_input)
        return [back] + [None] * (len(ins) - 1)

    return rule


_RULES["ReduceSum"] = _reduce_rule(mean=False)
_RULES["ReduceMean"] = _reduce_rule(mean=True)
