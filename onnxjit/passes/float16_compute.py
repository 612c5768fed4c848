"""float16 regions computed in float32.

A float16 model (float16 weights and activations, as onnxconverter-common's conversion writes
it) would otherwise run every operator on float16 arrays: each kernel widens its inputs to
float32, computes, and narrows its output back, and no fusion sees a float32 graph.
:func:`compute_float16_in_float32` rewrites the graph so that float16 values computed by
arithmetic and data-movement operators are computed and kept in float32 instead, with Casts only
where a value crosses the region's edge:

* a *member* is a default-domain node of an operator in :data:`COMPUTE_OPS` (arithmetic whose
  float32 result rounded to float16 is at least as accurate as the float16 computation) or
  :data:`MOVE_OPS` (exact in any type; a member only when one of its float16 inputs is
  already in float32, so that an isolated Reshape does not buy two Casts), with at least one
  float16 output and the types of all its inputs and outputs statically known. Its float16
  inputs and outputs become float32 values (float16 constants become float32 constants,
  converted exactly);
* a float16 value a non-member reads (an operator whose result would observe the extra
  precision: comparisons, ArgMax, TopK, Range, Cast to an integer type...; a node with
  subgraphs), and every float16 graph output, is narrowed by ``Cast(to=FLOAT16)`` from its
  float32 twin under its own name: graph outputs keep their names and float16 type;
* a float16 value produced outside the region (a graph input, a non-member's output, the
  explicit ``Cast(to=FLOAT16)`` of the model, which therefore still rounds) is widened by
  ``Cast(to=FLOAT)`` where a member reads it;
* ``Cast`` to float32 or float16 of a region value reads the float32 twin (a ``Cast(to=FLOAT)``,
  and a ``Cast(to=FLOAT16)`` of a float16 value, which changes nothing, become same-type Casts
  that no-op elimination removes), and ``Shape``/``Size`` read whichever twin exists.

This is what onnxruntime's CPU provider does for the float16 operators it has no kernel for
(Casts inserted around them, then removed between neighbours), so results are at least as
accurate as its. Values are rounded to float16 only where the model or its interface makes the
rounding visible.
"""

from __future__ import annotations

from onnx import TensorProto

from onnxjit import ir
from onnxjit.passes.rewrite import onnx_node
from onnxjit.passes.shape_subgraphs import infer_types

F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT

#: Operators whose float16 computation is replaced by float32 computation.
COMPUTE_OPS = frozenset(
    [
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Neg",
        "Abs",
        "Sqrt",
        "Reciprocal",
        "Exp",
        "Log",
        "Tanh",
        "Sigmoid",
        "Relu",
        "LeakyRelu",
        "Elu",
        "Selu",
        "Celu",
        "Gelu",
        "Erf",
        "HardSigmoid",
        "HardSwish",
        "Softplus",
        "Softsign",
        "Mish",
        "ThresholdedRelu",
        "Shrink",
        "Clip",
        "Sin",
        "Cos",
        "Tan",
        "Asin",
        "Acos",
        "Atan",
        "Sinh",
        "Cosh",
        "Asinh",
        "Acosh",
        "Atanh",
        "Min",
        "Max",
        "Mean",
        "Sum",
        "PRelu",
        "MatMul",
        "Gemm",
        "Einsum",
        "Conv",
        "ConvTranspose",
        "BatchNormalization",
        "InstanceNormalization",
        "LayerNormalization",
        "GroupNormalization",
        "RMSNormalization",
        "LpNormalization",
        "MeanVarianceNormalization",
        "Softmax",
        "LogSoftmax",
        "ReduceSum",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceSumSquare",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "GlobalLpPool",
        "AveragePool",
        "MaxPool",
        "LpPool",
        "Resize",
        "CumSum",
        "Dropout",
    ]
)

#: Operators that move or select elements without arithmetic (exact in float32 and float16).
MOVE_OPS = frozenset(
    [
        "Identity",
        "Reshape",
        "Transpose",
        "Squeeze",
        "Unsqueeze",
        "Flatten",
        "Concat",
        "Split",
        "Slice",
        "Gather",
        "GatherElements",
        "GatherND",
        "Expand",
        "Tile",
        "Pad",
        "Where",
        "DepthToSpace",
        "SpaceToDepth",
        "Trilu",
        "ScatterND",
        "ScatterElements",
    ]
)

# Readers that depend only on a value's shape.
_SHAPE_READERS = frozenset({"Shape", "Size"})

_CAST_VERSION = 13


def compute_float16_in_float32(graph: ir.Graph) -> int:
    """Compute float16 regions of ``graph`` in float32 (see the module docstring); return how
    many nodes now compute in float32."""
    from onnxjit.program import run_node

    known = infer_types(graph)

    def is16(x: str) -> bool:
        t = known.get(x)
        return bool(x) and t is not None and t.elem_type == F16

    if not any(is16(o) for n in graph.nodes for o in n.outputs):
        return 0
    graph_inputs = {v.name for v in graph.inputs}
    consts = {k for k in graph.initializers if k not in graph_inputs}
    wide: dict[str, str] = {}  # float16 value -> its float32 twin, for values a member made
    members: set[int] = set()
    for node in graph.nodes:
        if _member(node, known, is16, wide, consts):
            members.add(id(node))
            for o in node.outputs:
                if is16(o):
                    wide[o] = ""  # named below
    if not members:
        return 0

    taken = set(graph.initializers) | graph_inputs
    for n in graph.nodes:
        taken.update(n.outputs)

    def fresh(hint: str) -> str:
        name, k = f"{hint}__f32", 0
        while name in taken:
            k += 1
            name = f"{hint}__f32_{k}"
        taken.add(name)
        return name

    for v in wide:
        wide[v] = fresh(v)
    narrow_done: set[str] = set()  # promoted values whose float16 twin has been emitted
    widened: dict[str, str] = {}  # float16 values from outside the region -> float32 copies
    nodes: list[ir.Node] = []

    def as_f32(x: str) -> str:
        """The float32 twin of the float16 value ``x`` for a member to read."""
        if x in wide:
            return wide[x]
        if x not in widened:
            name = fresh(x)
            if x in consts:
                # onnxjit's own Cast: numpy's float16 conversion is scalar (~10x slower)
                (graph.initializers[name],) = run_node(_cast(x, name, F32), [graph.initializers[x]])
            else:
                nodes.append(_cast(x, name, F32))
            widened[x] = name
        return widened[x]

    def as_f16(x: str) -> str:
        """``x`` itself, narrowed from its float32 twin first when a member made it."""
        if x in wide and x not in narrow_done:
            nodes.append(_cast(wide[x], x, F16))
            narrow_done.add(x)
        return x

    for node in graph.nodes:
        if id(node) in members:
            if node.op_type == "Cast":  # a same-type Cast (see _member) stays one in float32
                node.attrs["to"] = F32
            node.inputs = [as_f32(x) if is16(x) else x for x in node.inputs]
            node.outputs = [wide.get(o, o) if o else o for o in node.outputs]
        elif _reads_wide(node) or (node.op_type in _SHAPE_READERS and _default(node)):
            node.inputs = [wide.get(x, x) if x else x for x in node.inputs]
        else:
            node.inputs = [as_f16(x) if x else x for x in node.inputs]
            for x in ir.outer_reads(node):
                as_f16(x)
        nodes.append(node)
    for v in graph.outputs:
        as_f16(v.name)
    read = {v.name for v in graph.outputs}
    for n in nodes:
        read.update(n.inputs)
        read.update(ir.outer_reads(n))
    for name in widened:
        if name in consts and name not in read:  # only the float32 copy is read now
            del graph.initializers[name]
    graph.nodes = nodes
    for i, n in enumerate(nodes):
        n.index = i
    return len(members)


def _default(node: ir.Node) -> bool:
    return node.domain in ("", "ai.onnx")


def _member(node: ir.Node, known: dict, is16, wide: dict[str, str], consts: set[str]) -> bool:
    """Whether ``node`` computes in float32 (see the module docstring)."""
    if not _default(node) or ir.subgraphs(node):
        return False
    if node.op_type == "Cast":
        # float16 to float16 changes nothing: inside a region it is an identity, not a rounding
        return node.attrs.get("to") == F16 and bool(node.inputs) and is16(node.inputs[0])
    compute = node.op_type in COMPUTE_OPS
    if not compute and node.op_type not in MOVE_OPS:
        return False
    if not any(is16(o) for o in node.outputs if o):
        return False
    if not all(x in known for x in [*node.inputs, *node.outputs] if x):
        return False
    if node.op_type == "Dropout" and len(node.inputs) > 2 and node.inputs[2]:
        return False  # training mode draws a mask: left as written
    return compute or any(x in wide or x in consts for x in node.inputs if is16(x))


def _reads_wide(node: ir.Node) -> bool:
    """A Cast to a floating type of at least float16's precision reads the float32 twin."""
    return _default(node) and node.op_type == "Cast" and node.attrs.get("to") in (F32, F16)


def _cast(src: str, dst: str, to: int) -> ir.Node:
    return onnx_node("Cast", _CAST_VERSION, [src], [dst], attrs={"to": to}, name=f"{dst}:cast")
