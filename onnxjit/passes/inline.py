"""Function inlining: model-local FunctionProtos and schema function bodies.

A node that calls a model-local function, or an operator onnxjit has no kernel for whose schema
defines a function body (context-dependent bodies included), is replaced by the body's nodes.
Body-internal value names are renamed to fresh names, attribute references are substituted
with the caller's attributes (or the function's defaults), and each body node is resolved
against the body's own opset imports. Nested calls are expanded recursively, up to
``MAX_DEPTH`` levels (recursive functions are refused).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import onnx
import onnx.defs
import onnx.numpy_helper

from onnxjit import ir
from onnxjit.errors import ModelCheckError
from onnxjit.registry import find_impl, find_schema, normalize_domain

MAX_DEPTH = 64


def inline_functions(model: ir.Model) -> None:
    """Expand function calls in the main graph and all subgraphs, in place."""
    _Inliner(model).graph(model.graph, depth=0)


class _Inliner:
    def __init__(self, model: ir.Model):
        self.model = model
        self.functions = {
            (normalize_domain(f.domain), f.name, f.overload): f for f in model.functions.values()
        }
        self.counter = itertools.count()
        self._types: dict[str, onnx.TypeProto] | None = None

    def graph(self, graph: ir.Graph, depth: int, opsets: dict[str, int] | None = None) -> None:
        opsets = opsets or self.model.opset_imports
        new_nodes: list[ir.Node] = []
        for node in graph.nodes:
            for sub in ir.subgraphs(node):
                self.graph(sub, depth, opsets)
            body = self.expand(node, depth, opsets)
            if body is None:
                new_nodes.append(node)
            else:
                new_nodes.extend(body)
        for i, n in enumerate(new_nodes):
            n.index = i
        graph.nodes = new_nodes

    def expand(
        self,
        node: ir.Node,
        depth: int,
        opsets: dict[str, int],
        chain: tuple[str, ...] = (),
        root: ir.Node | None = None,
    ) -> list[ir.Node] | None:
        """The nodes replacing ``node`` (None to keep it).

        ``chain`` lists the functions being expanded around ``node`` and ``root`` is the
        call in the graph that started the expansion, so a recursive function is reported
        with its call chain at the node the user wrote.
        """
        domain = normalize_domain(node.domain)
        root = root or node
        local = self.functions.get((domain, node.op_type, node.overload))
        if local is not None:
            key = f"{local.domain}:{local.name}" + (
                f" (overload {local.overload!r})" if local.overload else ""
            )
            if key in chain:
                path = " -> ".join((*chain, key))
                raise ModelCheckError(
                    [
                        f"{root.describe()}: function {key} is recursive ({path}); ONNX "
                        "functions must not call themselves, directly or through other "
                        "functions; rewrite it without the recursive call"
                    ]
                )
            chain = (*chain, key)
            body_opsets = dict(self.model.opset_imports)
            body_opsets.update(local.opset_imports)
            fn = local
        else:
            if node.since_version is None:
                schema = find_schema(node.op_type, opsets.get(domain, 0), domain)
                if schema is None:
                    return None
                node.since_version = schema.since_version
            if find_impl(domain, node.op_type, node.since_version) is not None:
                return None
            found = self.schema_function(node, domain, opsets)
            if found is None:
                return None
            fn, body_opsets = found
        if depth >= MAX_DEPTH:
            raise ModelCheckError(
                [
                    f"{root.describe()}: function calls nest deeper than {MAX_DEPTH} levels "
                    f"(through {node.label}); flatten the functions"
                ]
            )
        nodes = self.instantiate(node, fn, body_opsets)
        result: list[ir.Node] = []
        for n in nodes:
            sub = self.expand(n, depth + 1, body_opsets, chain, root)
            result.extend(n_ for n_ in (sub if sub is not None else [n]))
        # Subgraphs inside the body may call functions too.
        holder = ir.Graph(name="", nodes=result, inputs=[], outputs=[])
        for n in result:
            for g in ir.subgraphs(n):
                self.graph(g, depth + 1, body_opsets)
        return holder.nodes

    def schema_function(
        self, node: ir.Node, domain: str, opsets: dict[str, int]
    ) -> tuple[ir.Function, dict[str, int]] | None:
        from onnxjit.model import _Loader, attribute_default

        schema = find_schema(node.op_type, opsets.get(domain, 0), domain)
        if schema is None:
            return None
        opset = opsets.get(domain, 0)
        raw = None
        if schema.has_function:
            versions = [v for v in schema.function_opset_versions if v <= opset]
            if versions:
                raw = schema.get_function_with_opset_version(max(versions))
        if raw is None and schema.has_context_dependent_function:
            versions = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
            if versions:
                node_proto = _node_to_proto(node)
                input_types = [
                    self.type_of(name).SerializeToString() if name else b"" for name in node.inputs
                ]
                if all(input_types):
                    try:
                        raw = schema.get_context_dependent_function_with_opset_version(
                            max(versions), node_proto.SerializeToString(), input_types
                        )
                    except Exception:
                        raw = None
        if not raw:
            return None
        fp = onnx.FunctionProto()
        fp.ParseFromString(raw)
        fn = _Loader(None).function(fp)
        # Schema bodies refer to the operator's attributes (``@output_datatype``) whose
        # defaults live in the schema, not in the body: supply them as function defaults.
        for name, attr in schema.attributes.items():
            default = attr.default_value
            if name in fn.attribute_defaults or default.type == onnx.AttributeProto.UNDEFINED:
                continue
            fn.attribute_defaults[name] = attribute_default(name, default)
        body_opsets = dict(opsets)
        body_opsets.update(fn.opset_imports)
        return fn, body_opsets

    def type_of(self, name: str) -> onnx.TypeProto:
        if self._types is None:
            self._types = {}
            proto = self.model.proto
            if proto is not None:
                try:
                    skeleton = onnx.ModelProto()
                    skeleton.CopyFrom(proto)
                    for t in skeleton.graph.initializer:
                        t.ClearField("raw_data")
                        t.data_location = onnx.TensorProto.DEFAULT
                        del t.external_data[:]
                    inferred = onnx.shape_inference.infer_shapes(skeleton, strict_mode=False)
                    _collect_types(inferred.graph, self._types)
                except Exception:
                    _collect_types(proto.graph, self._types)
        tp = self._types.get(name)
        return tp if tp is not None else onnx.TypeProto()

    def instantiate(
        self, call: ir.Node, fn: ir.Function, body_opsets: dict[str, int]
    ) -> list[ir.Node]:
        tag = f"_inl{next(self.counter)}_"
        rename: dict[str, str] = {}
        for i, formal in enumerate(fn.inputs):
            rename[formal] = call.inputs[i] if i < len(call.inputs) else ""
        for i, formal in enumerate(fn.outputs):
            rename[formal] = call.outputs[i] if i < len(call.outputs) else ""
        attrs = dict(fn.attribute_defaults)
        attrs.update(call.attrs)
        attr_types = dict(call.attr_types)
        nodes = []
        for body_node in fn.nodes:
            n = _copy_node(body_node)
            for out in n.outputs:
                if out and out not in rename:
                    rename[out] = tag + out
            n.inputs = [rename.get(x, x) if x else "" for x in n.inputs]
            n.outputs = [rename.get(x, x) if x else "" for x in n.outputs]
            for key, ref in n.attr_refs.items():
                if ref in attrs:
                    n.attrs[key] = attrs[ref]
                    if ref in attr_types:
                        n.attr_types[key] = attr_types[ref]
            n.attr_refs = {}
            for g in ir.subgraphs(n):
                _rename_in_graph(g, rename, attrs)
            n.name = f"{call.name or call.op_type}/{n.name or n.op_type}"
            dom = normalize_domain(n.domain)
            if (dom, n.op_type, n.overload) not in self.functions:
                schema = find_schema(n.op_type, body_opsets.get(dom, 0), dom)
                if schema is not None:
                    n.since_version = schema.since_version
            nodes.append(n)
        return nodes


def _copy_node(n: ir.Node) -> ir.Node:
    return ir.Node(
        op_type=n.op_type,
        domain=n.domain,
        inputs=list(n.inputs),
        outputs=list(n.outputs),
        attrs=dict(n.attrs),
        attr_types=dict(n.attr_types),
        name=n.name,
        overload=n.overload,
        attr_refs=dict(n.attr_refs),
    )


def _rename_in_graph(g: ir.Graph, rename: dict[str, str], attrs: dict[str, Any]) -> None:
    # Outer-scope references inside a body's subgraph follow the body's renaming.
    for n in g.nodes:
        n.inputs = [rename.get(x, x) if x else "" for x in n.inputs]
        for key, ref in list(n.attr_refs.items()):
            if ref in attrs:
                n.attrs[key] = attrs[ref]
        n.attr_refs = {}
        for sub in ir.subgraphs(n):
            _rename_in_graph(sub, rename, attrs)
    for v in g.outputs:
        if v.name in rename and v.name not in {o for n in g.nodes for o in n.outputs}:
            v.name = rename[v.name]


def _node_to_proto(node: ir.Node) -> onnx.NodeProto:
    proto = onnx.helper.make_node(node.op_type, node.inputs, node.outputs, domain=node.domain)
    for key, value in node.attrs.items():
        if isinstance(value, ir.Graph):
            # Bodies such as FlexAttention's splice the score_mod/prob_mod graphs in.
            if value.proto is None:
                continue
            value = value.proto
        if isinstance(value, np.ndarray):
            value = onnx.numpy_helper.from_array(value)
        try:
            attr = onnx.helper.make_attribute(key, value, attr_type=node.attr_types.get(key))
        except (TypeError, ValueError):
            continue  # only the attributes a body builder reads matter; skip odd ones
        proto.attribute.append(attr)
    return proto


def _collect_types(graph: onnx.GraphProto, out: dict[str, onnx.TypeProto]) -> None:
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        if v.type.WhichOneof("value"):
            out[v.name] = v.type
    for t in graph.initializer:
        tp = onnx.TypeProto()
        tp.tensor_type.elem_type = t.data_type
        for d in t.dims:
            tp.tensor_type.shape.dim.add().dim_value = d
        out.setdefault(t.name, tp)
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _collect_types(a.g, out)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    _collect_types(g, out)
