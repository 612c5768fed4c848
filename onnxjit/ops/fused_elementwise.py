"""FusedElementwise: a group of elementwise ops run as one generated kernel.

:mod:`onnxjit.passes.fuse_elementwise` chooses the groups; a :class:`FusedGroup` evaluates one.
On the first call with a given tuple of input dtypes it builds, from the member ops' own
expression builders (:func:`onnxjit.ops.elementwise.fused_expr`), one scalar expression per
group output and lets :mod:`onnxjit.codegen.elementwise` generate and compile the loop nest; on
the first call with a given tuple of input shapes it works out each output's shape. Later calls
only look these up. Sizes are run-time arguments of the kernel, so a new batch size compiles
nothing.

Exactness: the group computes what its ops compute one by one. A value stored as float16 or
bfloat16 between two member ops is rounded to that type where the next op reads it, as the
separate ops would do; size-1 constants are inlined with their dtype. When a member cannot be
generated for the dtypes seen (strings, float8, mixed operand types) or the shapes do not
broadcast, the group runs its member ops one by one instead, which gives their own results and
error messages.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from onnxjit import ir
from onnxjit.codegen import expr as E
from onnxjit.codegen.elementwise import (
    NARROW_FLOATS,
    apply_reduce,
    broadcast_layout,
    compute_dtype,
    kernel_inputs,
    plan_for,
    run_plan,
)
from onnxjit.lowering import TENSOR, Bound, In, LowerContext, lowers, returns, tensor
from onnxjit.ops.elementwise import NotFusable, fused_expr, fusible_key
from onnxjit.registry import NodeContext, attribute_values, internal_op

# operand reference kinds
_IN, _CONST, _VAL = 0, 1, 2


@dataclass(frozen=True)
class _Class:
    """Outputs of one shape, computed by one kernel call."""

    outputs: tuple[int, ...]
    inputs: tuple[int, ...]
    exprs: tuple[E.Expr, ...]
    out_dtypes: tuple[np.dtype, ...]
    shapes: tuple[tuple[int, ...], ...]
    kernel: Any  # the elementwise plan for these input shapes and dtypes (plan_for)
    direct: bool = False  # the kernel's outputs are the group's, as they are (see _plan)


_FALLBACK = object()


class FusedGroup:
    """The member ops of one fused node, with what is needed to run them as one kernel.

    ``inputs`` are the names the fused node reads (in order), ``outputs`` the names it
    writes, ``consts`` the size-1 constants inlined into the expressions (name -> array).
    """

    def __init__(
        self,
        members: Sequence[ir.Node],
        inputs: Sequence[str],
        outputs: Sequence[str],
        consts: dict[str, np.ndarray],
    ):
        self.members = list(members)
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.consts = dict(consts)
        in_pos = {n: k for k, n in enumerate(self.inputs)}
        produced: dict[str, int] = {}
        self._refs: list[list[tuple[int, Any] | None]] = []
        self._attrs: list[dict[str, Any]] = []
        # dependencies of each member's value: input indices and inlined constant names
        deps: list[tuple[frozenset[int], frozenset[str]]] = []
        for i, m in enumerate(self.members):
            refs: list[tuple[int, Any] | None] = []
            d_in: set[int] = set()
            d_c: set[str] = set()
            for x in m.inputs:
                if not x:
                    refs.append(None)
                elif x in produced:
                    j = produced[x]
                    refs.append((_VAL, j))
                    d_in |= deps[j][0]
                    d_c |= deps[j][1]
                elif x in self.consts:
                    refs.append((_CONST, x))
                    if not _shape_free(m, x):
                        d_c.add(x)
                else:
                    refs.append((_IN, in_pos[x]))
                    if not _shape_free(m, x):
                        d_in.add(in_pos[x])
            self._refs.append(refs)
            self._attrs.append(attribute_values(m))
            deps.append((frozenset(d_in), frozenset(d_c)))
            produced[m.outputs[0]] = i
        self._out_member = [produced[o] for o in self.outputs]
        self._out_deps = [deps[j] for j in self._out_member]
        self._exprs: dict[tuple, Any] = {}  # expressions per input dtypes (a few at most)

    # -- expressions (per input dtypes) ------------------------------------------------------
    def _expressions(self, dtypes: tuple[np.dtype, ...]) -> Any:
        got = self._exprs.get(dtypes)
        if got is not None:
            return got
        try:
            got = self._build(dtypes)
        except NotFusable:
            got = _FALLBACK
        self._exprs[dtypes] = got
        return got

    def _build(self, dtypes: tuple[np.dtype, ...]) -> list[tuple[E.Expr, np.dtype]]:
        values: list[tuple[E.Expr, np.dtype]] = []
        consumed: dict[int, E.Expr] = {}  # member value -> as read by other members
        for m, refs, attrs in zip(self.members, self._refs, self._attrs):
            args: list[E.Expr | None] = []
            stored: list[np.dtype | None] = []
            for k, ref in enumerate(refs):
                if ref is None:
                    args.append(None)
                    stored.append(None)
                    continue
                kind, key = ref
                if kind == _IN:
                    dt = dtypes[key]
                    args.append(E.inp(key, compute_dtype(dt)) if _kernel_dtype(dt) else None)
                    stored.append(dt)
                    if not _kernel_dtype(dt):
                        raise NotFusable(f"input of type {dt}")
                elif kind == _CONST:
                    c = self.consts[key]
                    stored.append(c.dtype)
                    if m.op_type == "CastLike" and k == 1:
                        args.append(None)  # read for its type only
                    else:
                        args.append(E.const(c.reshape(()), compute_dtype(c.dtype)))
                else:
                    e, dt = values[key]
                    if key not in consumed:
                        consumed[key] = _round_to(e, dt)
                    args.append(consumed[key])
                    stored.append(dt)
            key = fusible_key(m.domain, m.op_type)
            values.append(fused_expr(key, m.impl.since, attrs, args, stored))
        return [values[j] for j in self._out_member]

    # -- plans (per input shapes and dtypes) -------------------------------------------------
    def _plan(self, arrays: Sequence[np.ndarray]) -> Any:
        dtypes = tuple(a.dtype for a in arrays)
        exprs = self._expressions(dtypes)
        if exprs is _FALLBACK:
            return _FALLBACK
        try:
            shapes = [
                np.broadcast_shapes(
                    *[arrays[k].shape for k in d_in], *[self.consts[c].shape for c in d_c]
                )
                for d_in, d_c in self._out_deps
            ]
        except ValueError:
            return _FALLBACK  # the ops themselves report the mismatch
        by_shape: dict[tuple[int, ...], list[int]] = {}
        for j, (shape, (d_in, _)) in enumerate(zip(shapes, self._out_deps)):
            if not d_in:
                return _FALLBACK  # an output of constants only: nothing to loop over
            by_shape.setdefault(tuple(shape), []).append(j)
        classes = []
        for shape, outs in by_shape.items():
            used = sorted(set().union(*[self._out_deps[j][0] for j in outs]))
            remap = {old: new for new, old in enumerate(used)}
            cls_exprs = _renumber([exprs[j][0] for j in outs], remap)
            out_dtypes = tuple(exprs[j][1] for j in outs)
            classes.append(
                _Class(
                    outputs=tuple(outs),
                    inputs=tuple(used),
                    exprs=tuple(cls_exprs),
                    out_dtypes=out_dtypes,
                    shapes=tuple(tuple(shape) for _ in outs),
                    kernel=plan_for(cls_exprs, [arrays[k] for k in used], out_dtypes),
                )
            )
        if len(classes) == 1:
            cls = classes[0]
            # one kernel writes every output, in order and in its final shape
            direct = cls.outputs == tuple(range(len(self.outputs))) and all(
                s == cls.kernel.out_shape for s in cls.shapes
            )
            classes[0] = replace(cls, direct=direct)
        return classes

    @classmethod
    def of(cls, body: Any) -> FusedGroup:
        """The group of a FusedElementwise node's bound ``body`` (a Subgraph of the program),
        made once per body."""
        group = _GROUPS.get(body)
        if group is None:
            g = body.graph
            group = _GROUPS[body] = cls(
                g.nodes, [v.name for v in g.inputs], [v.name for v in g.outputs], g.initializers
            )
        return group

    def classes(self, specs: Sequence[Any]) -> list[_Class] | None:
        """The kernels computing the group for inputs of these specs (arrays or
        :class:`~onnxjit.lowering.Spec`), or None where the members must run one by one."""
        plan = self._plan(specs)
        return None if plan is _FALLBACK else plan

    def run(self, ctx: Any, body: Any, arrays: Sequence[Any]) -> tuple[Any, ...]:
        """Compute the group's outputs from its inputs (in ``self.inputs`` order), where no
        plan bound it: its kernels, or its members one by one (which gives their errors)."""
        arrays = [a if isinstance(a, np.ndarray) else np.asarray(a) for a in arrays]
        classes = self.classes(arrays)
        if classes is None:
            return tuple(ctx.run_subgraph(body, arrays))
        return _run_classes(classes, len(self.outputs), arrays)

    def lower(self, lc: LowerContext) -> Bound | None:
        """The group for inputs of these specs: one bound kernel where one loop nest writes
        every output in its final shape, else a call of its kernels decided once (None where
        its members must run one by one)."""
        specs = lc.inputs
        if any(s is None or s.kind != TENSOR for s in specs):
            return None
        classes = self.classes(specs)
        if classes is None:
            return None
        if len(classes) == 1 and classes[0].direct:
            cls = classes[0]
            return lc.backend.elementwise(
                cls.exprs, [specs[k] for k in cls.inputs], cls.out_dtypes, cls.inputs
            )
        outs = [None] * len(self.outputs)
        for cls in classes:
            for j, dt, shape in zip(cls.outputs, cls.kernel.alloc, cls.shapes):
                outs[j] = tensor(dt, shape)
        if any(o is None for o in outs):
            return None
        n = len(self.outputs)

        def call(*xs: np.ndarray) -> Any:
            results = _run_classes(classes, n, xs)
            return results if n > 1 else results[0]

        return returns(call, *[In(k) for k in range(len(specs))], outs=outs, name="elementwise")

    def describe(self) -> str:
        """A one-line summary: member op types and the values read and written."""
        ops = ", ".join(m.op_type for m in self.members)
        return f"[{ops}] ({', '.join(self.inputs)}) -> ({', '.join(self.outputs)})"


# The group of each bound body (see FusedGroup.of).
_GROUPS: weakref.WeakKeyDictionary[Any, FusedGroup] = weakref.WeakKeyDictionary()


def _run_classes(classes: list[_Class], n: int, arrays: Sequence[Any]) -> tuple[Any, ...]:
    results: list[Any] = [None] * n
    for cls in classes:
        outs = run_plan(cls.kernel, kernel_inputs([arrays[k] for k in cls.inputs]))
        if cls.direct:
            return tuple(outs)
        for j, o, shape in zip(cls.outputs, outs, cls.shapes):
            results[j] = o if o.shape == shape else o.reshape(shape)
    return tuple(results)


def _kernel_dtype(dt: np.dtype) -> bool:
    return dt.kind in "biuf" and (dt.kind != "f" or dt.itemsize >= 4 or dt in NARROW_FLOATS)


def _shape_free(node: ir.Node, name: str) -> bool:
    """True when ``name`` does not take part in the broadcast of ``node``'s output."""
    if node.op_type == "Clip":
        return name != node.inputs[0]
    if node.op_type == "CastLike":
        return name != node.inputs[0]
    return False


def _round_to(e: E.Expr, stored: np.dtype) -> E.Expr:
    """``e`` as read back from storage of type ``stored`` (float16/bfloat16 round)."""
    if stored not in NARROW_FLOATS:
        return e
    kind = "f16" if stored == np.dtype(np.float16) else "bf16"
    bits = E.call(f"f32_to_{kind}", e, dtype=np.uint16)
    return E.call(f"{kind}_to_f32", bits, dtype=np.float32)


def _renumber(exprs: list[E.Expr], remap: dict[int, int]) -> list[E.Expr]:
    if all(k == v for k, v in remap.items()):
        return exprs
    memo: dict[E.Expr, E.Expr] = {}
    for node in E.walk(exprs):
        if isinstance(node, E.Input):
            memo[node] = E.Input(remap[node.index], node.dtype)
        elif isinstance(node, E.Op):
            memo[node] = E.Op(node.name, [memo[a] for a in node.args], node.dtype)
        else:
            memo[node] = node
    return [memo[e] for e in exprs]


@internal_op("FusedElementwise")
def fused_elementwise(ctx: NodeContext, *xs: np.ndarray, body: Any = None) -> Any:
    """Run a fused group of elementwise ops: ``body`` holds the members (see
    :class:`FusedGroup`)."""
    out = FusedGroup.of(body).run(ctx, body, xs)
    return out if len(out) != 1 else out[0]


@lowers(fused_elementwise)
def _lower(lc: LowerContext) -> Bound | None:
    return FusedGroup.of(lc.attrs["body"]).lower(lc)


_REDUCE_KINDS = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max"}


class ReduceTail:
    """A fused elementwise group followed by ReduceSum, ReduceMean or ReduceMax of its one
    output (see :mod:`onnxjit.passes.fuse_reduce`): the members of a FusedReduce node's body,
    the Reduce node last.

    When the axes are the trailing ones of the group output's shape and every input
    broadcasts the same way across them, one generated kernel evaluates the group and
    accumulates (:func:`onnxjit.codegen.elementwise.apply_reduce`); otherwise the member ops
    and the original Reduce node run one after the other, which gives their own results and
    errors.
    """

    def __init__(self, body: ir.Graph):
        node = body.nodes[-1]
        self.group = FusedGroup(
            body.nodes[:-1], [v.name for v in body.inputs], [node.inputs[0]], body.initializers
        )
        self.kind = _REDUCE_KINDS[node.op_type]
        if len(node.inputs) > 1 and node.inputs[1]:
            axes = body.initializers[node.inputs[1]].reshape(-1)
        else:
            axes = node.attrs.get("axes") or []
        self.axes = [int(a) for a in axes]
        self.keepdims = int(node.attrs.get("keepdims", 1))

    @classmethod
    def of(cls, body: Any) -> ReduceTail:
        """The reduction of a FusedReduce node's bound ``body``, made once per body."""
        tail = _TAILS.get(body)
        if tail is None:
            tail = _TAILS[body] = cls(body.graph)
        return tail

    def plan(self, arrays: Sequence[Any]) -> Any:
        """What one kernel call needs for inputs of these shapes and dtypes (arrays or
        specs), or None where the members and the Reduce node must run one by one."""
        g = self.group
        dtypes = tuple(a.dtype for a in arrays)
        exprs = g._expressions(dtypes)
        if exprs is _FALLBACK or len(exprs) != 1:
            return None
        expr, out_dtype = exprs[0]
        if np.dtype(out_dtype).kind != "f" or expr.dtype.kind != "f":
            return None  # integer sums and means keep the Reduce op's own rules
        d_in, d_c = g._out_deps[0]
        if not d_in:
            return None
        try:
            shape = np.broadcast_shapes(
                *[arrays[k].shape for k in d_in], *[g.consts[c].shape for c in d_c]
            )
        except ValueError:
            return None
        rank = len(shape)
        if rank == 0:
            return None
        axes = sorted({a + rank if a < 0 else a for a in self.axes}) or list(range(rank))
        n_axes = len(axes)
        if axes != list(range(rank - n_axes, rank)) or any(a < 0 or a >= rank for a in axes):
            return None
        used = sorted(d_in)
        (renumbered,) = _renumber([expr], {old: new for new, old in enumerate(used)})
        lead = shape[: rank - n_axes]
        padded = [(1,) * (rank - arrays[k].ndim) + tuple(arrays[k].shape) for k in used]
        if not _tail_broadcasts_once(padded, rank - n_axes):
            return None
        out_shape = lead + (1,) * n_axes if self.keepdims else lead
        return renumbered, used, rank, n_axes, out_dtype, out_shape

    def run(self, plan: Any, arrays: Sequence[Any]) -> np.ndarray | None:
        """The reduction by ``plan`` (see :meth:`plan`), None where the kernel declined."""
        expr, used, rank, n_axes, out_dtype, out_shape = plan
        ins = [arrays[k].reshape((1,) * (rank - arrays[k].ndim) + arrays[k].shape) for k in used]
        y = apply_reduce(expr, ins, self.kind, n_axes, out_dtype)
        return None if y is None else y.reshape(out_shape)


_TAILS: weakref.WeakKeyDictionary[Any, ReduceTail] = weakref.WeakKeyDictionary()


def _tail_broadcasts_once(shapes: list[tuple[int, ...]], split: int) -> bool:
    """Every input is present in all, or in none, of the non-1 dims from ``split`` on."""
    try:
        _out, sizes, _masks = broadcast_layout([s[split:] for s in shapes])
    except ValueError:
        return False
    return len(sizes) == 1


@internal_op("FusedReduce")
def fused_reduce(ctx: NodeContext, *xs: np.ndarray, body: Any = None) -> np.ndarray:
    """Reduce the output of a fused elementwise group (see :class:`ReduceTail`)."""
    tail = ReduceTail.of(body)
    arrays = [a if isinstance(a, np.ndarray) else np.asarray(a) for a in xs]
    plan = tail.plan(arrays)
    y = None if plan is None else tail.run(plan, arrays)
    return ctx.run_subgraph(body, arrays)[0] if y is None else y


@lowers(fused_reduce)
def _lower_reduce(lc: LowerContext) -> Bound | None:
    specs = lc.inputs
    if any(s is None or s.kind != TENSOR for s in specs):
        return None
    tail = ReduceTail.of(lc.attrs["body"])
    plan = tail.plan(specs)
    if plan is None:
        return None
    out_dtype, out_shape = plan[4], plan[5]

    def call(*xs: np.ndarray) -> np.ndarray:
        y = tail.run(plan, xs)
        if y is None:  # pragma: no cover - plan() checked the layout
            raise RuntimeError("the fused reduction's layout changed within its plan")
        return y

    ins = [In(k) for k in range(len(specs))]
    return returns(call, *ins, outs=[tensor(out_dtype, out_shape)], name="elementwise reduce")
