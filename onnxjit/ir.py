"""The in-memory IR that every stage after loading works on.

It mirrors ModelProto/GraphProto/NodeProto with decoded Python values: attributes are ints,
floats, strs, numpy arrays, :class:`Graph` objects or lists of them; initializers are numpy arrays
(possibly memory-mapped). After :mod:`onnxjit.registry` has run, each :class:`Node` carries the
resolved ``since_version`` and implementation, so nothing downstream looks at opsets again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx


@dataclass
class ValueInfo:
    """A typed value of a graph: name, TypeProto, and for tensors elem_type and shape.

    ``shape`` is ``None`` when the rank is unknown; otherwise a tuple whose entries are ints
    (fixed dims), strs (dimension variables) or ``None`` (unknown dims).
    """

    name: str
    type: onnx.TypeProto | None
    doc: str = ""

    @property
    def is_tensor(self) -> bool:
        return self.type is not None and self.type.WhichOneof("value") == "tensor_type"

    @property
    def elem_type(self) -> int:
        if not self.is_tensor:
            return 0
        return self.type.tensor_type.elem_type

    @property
    def shape(self) -> tuple[int | str | None, ...] | None:
        if not self.is_tensor or not self.type.tensor_type.HasField("shape"):
            return None
        dims: list[int | str | None] = []
        for d in self.type.tensor_type.shape.dim:
            kind = d.WhichOneof("value")
            if kind == "dim_value":
                dims.append(int(d.dim_value))
            elif kind == "dim_param":
                dims.append(d.dim_param)
            else:
                dims.append(None)
        return tuple(dims)


@dataclass
class Node:
    """One operator call. ``attrs`` holds decoded values; ``attr_types`` the AttributeProto types.

    ``since_version`` and ``impl`` are filled in by the registry stage.
    """

    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    attr_types: dict[str, int] = field(default_factory=dict)
    name: str = ""
    index: int = 0
    overload: str = ""
    doc: str = ""
    # Attribute references inside function bodies: attr name -> caller attr name.
    attr_refs: dict[str, str] = field(default_factory=dict)
    since_version: int | None = None
    impl: Any = None
    # Problems found while decoding this node's attributes, reported by the checker.
    load_problems: list[str] = field(default_factory=list)
    # For a node made by a fusion pass: the original nodes it replaces, in graph order.
    members: list[Node] = field(default_factory=list)
    # For a fused node read from a model file: how the written model named its members.
    member_labels: list[str] = field(default_factory=list)

    @property
    def member_names(self) -> list[str]:
        """The nodes a fused node replaced, as ``"Add-14 add"`` (op label and node name)."""
        if self.members:
            return [f"{m.label} {m.name}".strip() for m in self.members]
        return list(self.member_labels)

    @property
    def label(self) -> str:
        """``Softmax-13`` once resolved, ``Softmax`` before."""
        dom = "" if self.domain in ("", "ai.onnx") else f"{self.domain}."
        ver = f"-{self.since_version}" if self.since_version is not None else ""
        return f"{dom}{self.op_type}{ver}"

    @property
    def where(self) -> str:
        """How messages refer to the node: its name, else its index."""
        return f"node {self.name!r}" if self.name else f"node #{self.index}"

    def describe(self) -> str:
        return f"{self.where} ({self.label})"


@dataclass
class Graph:
    """A graph: nodes in file order, inputs/outputs, initializers and value infos."""

    name: str
    nodes: list[Node]
    inputs: list[ValueInfo]
    outputs: list[ValueInfo]
    initializers: dict[str, np.ndarray] = field(default_factory=dict)
    # Names of initializers declared in TensorProto form (for duplicate detection etc.)
    initializer_order: list[str] = field(default_factory=list)
    value_info: dict[str, ValueInfo] = field(default_factory=dict)
    doc: str = ""
    sparse_initializer_names: list[str] = field(default_factory=list)
    # The GraphProto this graph was loaded from (a part of the model's proto, so no extra
    # memory): schema function builders need graph attributes in proto form.
    proto: Any = field(default=None, repr=False, compare=False)


def attr_graphs(value: object) -> list[Graph]:
    """The subgraphs an attribute value holds: ``[value]`` for a graph, the list itself for a
    list of graphs, ``[]`` for anything else.

    An ONNX list attribute holds one kind of value (each kind has its own repeated field), so
    only a list's first element is looked at: a tree ensemble's lists of 10^5 numbers cost
    one check here, where testing every element made a session over a 100-tree forest spend
    most of its 1 s creation in the graph passes."""
    if isinstance(value, Graph):
        return [value]
    if isinstance(value, list) and value and isinstance(value[0], Graph):
        return value
    return []


def subgraphs(node: Node) -> list[Graph]:
    """Every subgraph in ``node``'s attributes (If's branches, Loop's and Scan's bodies),
    in attribute order."""
    return [g for value in node.attrs.values() for g in attr_graphs(value)]


def outer_reads(node: Node) -> list[str]:
    """The names ``node``'s subgraphs (and theirs, nested) read from enclosing scopes, in
    first-use order: what they read that they do not define themselves (their inputs,
    initializers and node outputs shadow outer names)."""
    reads: list[str] = []
    for g in subgraphs(node):
        defined = set(g.initializers) | {v.name for v in g.inputs}
        for n in g.nodes:
            reads.extend(x for x in [*n.inputs, *outer_reads(n)] if x and x not in defined)
            defined.update(o for o in n.outputs if o)
        reads.extend(v.name for v in g.outputs if v.name and v.name not in defined)
    return list(dict.fromkeys(reads))


@dataclass
class Function:
    """A model-local function (FunctionProto)."""

    name: str
    domain: str
    overload: str
    inputs: list[str]
    outputs: list[str]
    attributes: list[str]
    attribute_defaults: dict[str, Any]
    nodes: list[Node]
    opset_imports: dict[str, int]
    doc: str = ""


@dataclass
class Model:
    """A loaded model: metadata, opset imports and the main graph."""

    ir_version: int | None
    opset_imports: dict[str, int]
    graph: Graph
    producer_name: str = ""
    producer_version: str = ""
    domain: str = ""
    model_version: int = 0
    doc: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    functions: dict[tuple[str, str, str], Function] = field(default_factory=dict)
    base_dir: str | None = None
    # Problems found while decoding (duplicate opset domains, ...) for the checker to report.
    load_problems: list[str] = field(default_factory=list)
    has_training_info: bool = False
    # The parsed ModelProto, kept only while the session is being built (type inference for
    # context-dependent function bodies, writing the optimised model); dropped afterwards.
    proto: Any = None
