"""Shape arithmetic: static types of values, and Shape/Size folding.

Exporters compute shapes at run time (``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``).
When a shape is static those chains are constants: :func:`fold_static_shapes` turns ``Shape``
and ``Size`` of a statically shaped value into initializers and folds what follows. When shapes
are dynamic, each input signature's plan computes them once (:mod:`onnxjit.plan`, static
values).

:func:`infer_types` is the static knowledge this pass and the no-op elimination rely on.
It trusts only what can be proven: dims fixed by graph input types (feeds are checked against
them), initializer shapes, value_info written by exporters, and shapes propagated node by node
through onnx's own per-operator inference functions from those. Symbolic dims (``dim_param``)
never count as known, free-dimension overrides included.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from onnxjit import ir, types

# Integer constants up to this many elements are passed to onnx's inference as data (a
# Reshape's shape, a Slice's starts...); larger ones only by type.
_DATA_LIMIT = 1024


@dataclass(frozen=True)
class TensorType:
    """What is statically known about a tensor: element type and shape.

    ``shape`` is None when the rank is unknown; otherwise one entry per dim, an int when the
    dim is proven, None when it is unknown or symbolic.
    """

    elem_type: int
    shape: tuple[int | None, ...] | None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def static(self) -> bool:
        """True when every dim is known."""
        return self.shape is not None and all(d is not None for d in self.shape)


def infer_types(graph: ir.Graph) -> dict[str, TensorType]:
    """Statically known tensor types of the values of ``graph`` (main graph, not subgraphs).

    A value missing from the result is not known to be a tensor. Dims that are symbolic in the
    model (``dim_param``) or unknown are None in the result.
    """
    tracker = _TypeTracker(graph)
    for node in graph.nodes:
        tracker.visit(node)
    return tracker.result()


class _TypeTracker:
    """Types propagated node by node, in graph order, with onnx's inference functions."""

    def __init__(self, graph: ir.Graph):
        self.graph = graph
        self.protos: dict[str, onnx.TypeProto] = {}
        self.data: dict[str, onnx.TensorProto] = {}
        inputs = {v.name for v in graph.inputs}
        for v in graph.inputs:
            if v.is_tensor:
                self.protos[v.name] = v.type
        for name, value in graph.initializers.items():
            if name not in inputs:
                self.add_const(name, value)
        versions: dict[str, int] = {}
        for node in graph.nodes:
            if node.since_version is not None:
                versions[node.domain] = max(versions.get(node.domain, 0), node.since_version)
        self.opsets = [onnx.helper.make_opsetid(d, v) for d, v in versions.items()]

    def add_const(self, name: str, value: object) -> None:
        """Record a constant: its exact type, and its value when it is a small integer."""
        from onnxjit.export import tensor_proto

        if not isinstance(value, np.ndarray):
            return
        try:
            et = types.onnx_elem_type(value.dtype)
        except ValueError:
            return
        self.protos[name] = onnx.helper.make_tensor_type_proto(et, list(value.shape))
        if value.dtype.kind in "iu" and value.size <= _DATA_LIMIT:
            self.data[name] = tensor_proto(name, value)

    def visit(self, node: ir.Node) -> None:
        """Infer the types of ``node``'s outputs from those of its inputs (and value_info)."""
        from onnxjit.export import node_proto

        inferred: dict[str, onnx.TypeProto] = {}
        protos = self.protos
        if (
            _inferable(node)
            and all(x in protos for x in node.inputs if x)
            # onnx computes with a negative dim as given, and some of its assertions then
            # abort the process: such a type is not inferred from (the loader clears declared
            # ones; this guards against any produced along the way)
            and not any(_negative_dim(protos[x]) for x in node.inputs if x)
        ):
            try:
                schema = onnx.defs.get_schema(node.op_type, node.since_version, node.domain)
                inferred = onnx.shape_inference.infer_node_outputs(
                    schema,
                    node_proto(node),
                    {x: protos[x] for x in node.inputs if x},
                    {x: self.data[x] for x in node.inputs if x in self.data},
                    opset_imports=self.opsets,
                )
            except Exception:  # no schema, a type error, an inference bug: know nothing
                inferred = {}
        for out in node.outputs:
            if not out:
                continue
            t = _merge(inferred.get(out), self.graph.value_info.get(out))
            if t is not None:
                protos[out] = t

    def get(self, name: str) -> TensorType | None:
        tp = self.protos.get(name)
        return None if tp is None else _tensor_type(tp)

    def result(self) -> dict[str, TensorType]:
        result: dict[str, TensorType] = {}
        for name, tp in self.protos.items():
            tt = _tensor_type(tp)
            if tt is not None:
                result[name] = tt
        return result


def _inferable(node: ir.Node) -> bool:
    if node.domain == "onnxjit" or node.since_version is None:
        return False
    return not ir.subgraphs(node)


def _merge(inferred: onnx.TypeProto | None, vi: ir.ValueInfo | None) -> onnx.TypeProto | None:
    """Onnx's inferred type, with dims it left unknown taken from exporter-written value_info."""
    declared = vi.type if vi is not None and vi.is_tensor else None
    if inferred is None or inferred.WhichOneof("value") != "tensor_type":
        return declared if declared is not None else inferred
    if declared is None:
        return inferred
    it, dt = inferred.tensor_type, declared.tensor_type
    if it.elem_type and dt.elem_type and it.elem_type != dt.elem_type:
        return inferred
    if not it.HasField("shape"):
        merged = onnx.TypeProto()
        merged.CopyFrom(inferred)
        if dt.HasField("shape"):
            merged.tensor_type.shape.CopyFrom(dt.shape)
        return merged
    if not dt.HasField("shape") or len(dt.shape.dim) != len(it.shape.dim):
        return inferred
    merged = onnx.TypeProto()
    merged.CopyFrom(inferred)
    for mine, theirs in zip(merged.tensor_type.shape.dim, dt.shape.dim):
        if not mine.HasField("dim_value") and theirs.HasField("dim_value"):
            mine.dim_value = theirs.dim_value
    return merged


def _tensor_type(tp: onnx.TypeProto) -> TensorType | None:
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.elem_type:
        return None
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return TensorType(tt.elem_type, None)
    dims = tuple(int(d.dim_value) if d.HasField("dim_value") else None for d in tt.shape.dim)
    return TensorType(tt.elem_type, dims)


def fold_static_shapes(graph: ir.Graph) -> int:
    """Shape and Size of values with a static shape become initializers; fold what follows.

    One walk in graph order: types are propagated as it goes, a Shape/Size of a statically
    shaped value becomes a constant, and a node whose inputs are all constants is folded on the
    spot (``optimize.fold_node``), so the next Reshape sees a constant shape and its output a
    static shape. A chain ``Shape -> Gather -> Concat -> Reshape -> ... -> Shape`` thus
    collapses in one run. Returns the number of nodes removed (replaced or folded).
    """
    from onnxjit.passes.optimize import fold_node

    if not any(n.op_type in ("Shape", "Size") for n in graph.nodes):
        return 0
    tracker = _TypeTracker(graph)
    inputs = {v.name for v in graph.inputs}
    constants = {k for k in graph.initializers if k not in inputs}
    kept: list[ir.Node] = []
    replaced = folded = 0
    for node in graph.nodes:
        value = _static_shape_value(node, tracker)
        if value is not None:
            results: dict[str, np.ndarray] | None = {node.outputs[0]: value}
            replaced += 1
        elif replaced:
            # Before the first replacement the constant-folding pass has done this already.
            results = fold_node(node, graph.initializers, constants)
            folded += results is not None
        else:
            results = None
        if results is None:
            kept.append(node)
            tracker.visit(node)
            continue
        for name, v in results.items():
            graph.initializers[name] = v
            constants.add(name)
            tracker.add_const(name, v)
    if not replaced:
        return 0
    graph.nodes = kept
    for i, n in enumerate(graph.nodes):
        n.index = i
    return replaced + folded


def _static_shape_value(node: ir.Node, known: _TypeTracker) -> np.ndarray | None:
    """The value of a Shape/Size node whose input shape is static, else None."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in ("Shape", "Size"):
        return None
    if len(node.outputs) != 1 or not node.outputs[0] or not node.inputs:
        return None
    t = known.get(node.inputs[0])
    if t is None or not t.static:
        return None
    shape = [int(d) for d in t.shape]  # type: ignore[union-attr]
    if node.op_type == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    rank = len(shape)
    start = _clamp(node.attrs.get("start", 0), rank)
    end = node.attrs.get("end")
    end = rank if end is None else _clamp(end, rank)
    return np.array(shape[start:end], dtype=np.int64).reshape(-1)


def _clamp(i: int, rank: int) -> int:
    i = int(i)
    if i < 0:
        i += rank
    return min(max(i, 0), rank)


# Ops that may join a shape group when every input is a shape value or a small constant.
# (Any deterministic op would be correct; this list keeps groups to cheap integer arithmetic.)
_SHAPE_OPS = frozenset(
    {
        "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Add", "Sub", "Mul",
        "Div", "Mod", "Neg", "Abs", "Sign", "Equal", "Less", "Greater", "LessOrEqual",
        "GreaterOrEqual", "Not", "And", "Or", "Where", "Max", "Min", "Reshape", "Identity",
        "ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin", "Sqrt", "Pow", "Floor", "Ceil",
        "Range", "ConstantOfShape", "Expand", "Tile", "Clip", "Flatten",
    }
)  # fmt: skip
# A constant read by a group is copied into its body; larger constants keep a node out.
_GROUP_CONST_LIMIT = 4096


def _negative_dim(tp: onnx.TypeProto) -> bool:
    if tp.WhichOneof("value") != "tensor_type":
        return False
    return any(d.dim_value < 0 for d in tp.tensor_type.shape.dim)
