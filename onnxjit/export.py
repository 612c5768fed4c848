"""The IR back to protobuf: the optimised graph as an ONNX file people can open in a viewer.

:func:`to_model_proto` turns an :class:`onnxjit.ir.Model` (after the graph passes) into an
``onnx.ModelProto``: nodes with their attributes (subgraphs included), initializers, graph
inputs/outputs/value_info, model functions, opset imports and metadata. Nodes that fusion passes
made (domain ``onnxjit``) are written as nodes of that domain with a STRINGS attribute
``members`` listing the nodes they replace (``"Add-14 name"``, the same spelling as
``InferenceSession.graph_nodes()``); the ``onnxjit`` opset (version 1) is imported when such
nodes exist. A fused node's members travel as data (FusedElementwise and FusedReduce carry them
as a ``body`` graph; the pattern nodes carry their parameters as attributes), so such a model
loads back into onnxjit and runs with the same results, skipping the passes' work; it also
loads with ``onnx.load`` and passes ``onnx.checker.check_model`` (``full_check=False``; the
custom domain has no schemas), but only onnxjit can run its fused nodes. A model with no fused
nodes (``graph_optimization_level=1``) runs in onnxruntime.

:func:`write_optimized_model` writes that proto to a file atomically (temp file + os.replace).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from onnxjit import ir
from onnxjit.registry import INTERNAL_DOMAIN, MEMBERS_ATTRIBUTE

# Above this many bytes of tensor data the file is written with external data: protobuf
# cannot serialise a message of 2 GiB or more.
EXTERNAL_DATA_BYTES = 1_800_000_000
# With external data, tensors of at least this many bytes go to the data file.
EXTERNAL_TENSOR_MIN_BYTES = 1024


def to_model_proto(model: ir.Model) -> onnx.ModelProto:
    """The ModelProto of ``model`` as it stands (passes applied); the IR is not changed."""
    writer = _Writer()
    graph = writer.graph(model.graph)
    opsets = dict(model.opset_imports)
    if writer.internal_nodes:
        opsets.setdefault(INTERNAL_DOMAIN, 1)
    opset_protos = [helper.make_opsetid(d, v) for d, v in opsets.items()]
    proto = helper.make_model(graph, opset_imports=opset_protos)
    ir_version = model.ir_version if model.ir_version is not None else onnx.IR_VERSION
    proto.ir_version = int(ir_version)
    proto.producer_name = model.producer_name
    proto.producer_version = model.producer_version
    proto.domain = model.domain
    proto.model_version = int(model.model_version)
    proto.doc_string = model.doc
    for key, value in model.metadata.items():
        proto.metadata_props.add(key=key, value=value)
    for fn in model.functions.values():
        proto.functions.append(writer.function(fn))
    return proto


def write_optimized_model(model: ir.Model, path: str | os.PathLike[str]) -> str:
    """Write ``model`` (after the passes) to ``path`` as an ONNX file; return the path.

    The file appears atomically: it is written to a temporary file in the same folder and
    renamed over ``path``. Models whose tensors exceed about 1.8 GB keep their tensor data in
    ``<file name>.data`` next to the file (protobuf cannot hold 2 GiB).
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    proto = to_model_proto(model)
    external = _tensor_bytes(proto.graph) >= EXTERNAL_DATA_BYTES
    fd, tmp = tempfile.mkstemp(prefix=".onnxjit-", suffix=".onnx.tmp", dir=folder)
    os.close(fd)
    tmp_data = None
    try:
        if external:
            data_name = os.path.basename(path) + ".data"
            tmp_data = os.path.join(folder, f".{data_name}.tmp{os.getpid()}")
            ext = onnx.external_data_helper
            ext.convert_model_to_external_data(
                proto,
                all_tensors_to_one_file=True,
                location=os.path.basename(tmp_data),
                size_threshold=EXTERNAL_TENSOR_MIN_BYTES,
            )
            proto = ext.write_external_data_tensors(proto, folder)
            # The proto names the final data file, not the temporary one.
            for t in ext._get_all_tensors(proto):
                for entry in t.external_data:
                    if entry.key == "location":
                        entry.value = data_name
            with open(tmp, "wb") as f:
                f.write(proto.SerializeToString())
            if os.path.exists(tmp_data):
                os.replace(tmp_data, os.path.join(folder, data_name))
        else:
            with open(tmp, "wb") as f:
                f.write(proto.SerializeToString())
        os.replace(tmp, path)
    except BaseException:
        for leftover in (tmp, tmp_data):
            if leftover:
                with contextlib.suppress(OSError):
                    os.unlink(leftover)
        raise
    return path


def tensor_proto(name: str, value: np.ndarray) -> TensorProto:
    """A numpy array (strings as an object array of ``str``, ml_dtypes types) as TensorProto."""
    arr = np.asarray(value)
    if arr.dtype.kind in ("O", "U", "S"):
        flat = [x.encode("utf-8") if isinstance(x, str) else bytes(x) for x in arr.reshape(-1)]
        t = helper.make_tensor(name, TensorProto.STRING, list(arr.shape), flat)
        return t
    return numpy_helper.from_array(arr, name)


def node_proto(node: ir.Node) -> onnx.NodeProto:
    """One IR node as a NodeProto (subgraph attributes converted recursively)."""
    return _Writer().node(node)


def graph_proto(graph: ir.Graph) -> onnx.GraphProto:
    """One IR graph as a GraphProto."""
    return _Writer().graph(graph)


def value_info_proto(v: ir.ValueInfo) -> onnx.ValueInfoProto:
    """A ValueInfo as ValueInfoProto (name only when its type is unknown)."""
    p = onnx.ValueInfoProto(name=v.name)
    if v.type is not None:
        p.type.CopyFrom(v.type)
    if v.doc:
        p.doc_string = v.doc
    return p


class _Writer:
    """Converts IR objects; remembers whether internal (fused) nodes were written."""

    def __init__(self) -> None:
        self.internal_nodes = False

    def graph(self, g: ir.Graph) -> onnx.GraphProto:
        gp = onnx.GraphProto(name=g.name)
        if g.doc:
            gp.doc_string = g.doc
        gp.node.extend(self.node(n) for n in g.nodes)
        gp.input.extend(value_info_proto(v) for v in g.inputs)
        gp.output.extend(value_info_proto(v) for v in g.outputs)
        sparse = set(g.sparse_initializer_names)
        for name, value in g.initializers.items():
            if name in sparse:
                gp.sparse_initializer.append(_sparse_proto(name, value))
            else:
                gp.initializer.append(tensor_proto(name, value))
        produced = {o for n in g.nodes for o in n.outputs if o}
        for name, v in g.value_info.items():
            # value_info of values the passes removed would only confuse readers.
            if name in produced:
                gp.value_info.append(value_info_proto(v))
        return gp

    def node(self, n: ir.Node) -> onnx.NodeProto:
        p = onnx.NodeProto(op_type=n.op_type, name=n.name)
        if n.domain:
            p.domain = n.domain
        if n.overload:
            p.overload = n.overload
        p.input.extend(n.inputs)
        p.output.extend(n.outputs)
        notes = [n.doc] if n.doc else []
        for key, value in n.attrs.items():
            a = self.attribute(n, key, value)
            if a is None:
                notes.append(
                    f"onnxjit: attribute {key!r} ({type(value).__name__}) is not serialisable "
                    "and was left out"
                )
            else:
                p.attribute.append(a)
        for key, ref in n.attr_refs.items():
            a = AttributeProto(name=key, ref_attr_name=ref, type=n.attr_types.get(key, 0))
            p.attribute.append(a)
        if n.domain == INTERNAL_DOMAIN:
            self.internal_nodes = True
        members = n.member_names
        if members:
            p.attribute.append(
                helper.make_attribute(MEMBERS_ATTRIBUTE, members, attr_type=_STRINGS)
            )
        if notes:
            p.doc_string = "\n".join(notes)
        return p

    def attribute(self, n: ir.Node, key: str, value: Any) -> AttributeProto | None:
        kind = n.attr_types.get(key) or _schema_attr_type(n, key) or _guess_type(value)
        if kind is None:
            return None
        a = AttributeProto(name=key, type=kind)
        try:
            self._fill(a, kind, value)
        except (TypeError, ValueError, AttributeError):
            return None
        return a

    def _fill(self, a: AttributeProto, kind: int, value: Any) -> None:
        A = AttributeProto
        if kind == A.FLOAT:
            a.f = float(value)
        elif kind == A.INT:
            a.i = int(value)
        elif kind == A.STRING:
            a.s = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        elif kind == A.TENSOR:
            a.t.CopyFrom(tensor_proto("", value))
        elif kind == A.GRAPH:
            a.g.CopyFrom(self.graph(value))
        elif kind == A.SPARSE_TENSOR:
            a.sparse_tensor.CopyFrom(_sparse_proto("", value))
        elif kind == A.TYPE_PROTO:
            a.tp.CopyFrom(value)
        elif kind == A.FLOATS:
            a.floats.extend(float(x) for x in value)
        elif kind == A.INTS:
            a.ints.extend(int(x) for x in value)
        elif kind == A.STRINGS:
            a.strings.extend(x.encode("utf-8") if isinstance(x, str) else bytes(x) for x in value)
        elif kind == A.TENSORS:
            a.tensors.extend(tensor_proto("", x) for x in value)
        elif kind == A.GRAPHS:
            a.graphs.extend(self.graph(x) for x in value)
        elif kind == A.SPARSE_TENSORS:
            a.sparse_tensors.extend(_sparse_proto("", x) for x in value)
        elif kind == A.TYPE_PROTOS:
            a.type_protos.extend(value)
        else:
            raise ValueError(f"attribute type {kind}")

    def function(self, fn: ir.Function) -> onnx.FunctionProto:
        fp = onnx.FunctionProto(name=fn.name, domain=fn.domain)
        if fn.overload:
            fp.overload = fn.overload
        if fn.doc:
            fp.doc_string = fn.doc
        fp.input.extend(fn.inputs)
        fp.output.extend(fn.outputs)
        holder = ir.Node("", "", [], [])
        for name in dict.fromkeys(fn.attributes):
            if name in fn.attribute_defaults:
                a = self.attribute(holder, name, fn.attribute_defaults[name])
                if a is not None:
                    fp.attribute_proto.append(a)
                    continue
            fp.attribute.append(name)
        fp.node.extend(self.node(n) for n in fn.nodes)
        for domain, version in fn.opset_imports.items():
            fp.opset_import.append(helper.make_opsetid(domain, version))
        return fp


_STRINGS = AttributeProto.STRINGS


def _schema_attr_type(n: ir.Node, key: str) -> int | None:
    """The attribute's type from the operator schema (standard ops), else None."""
    if n.domain == INTERNAL_DOMAIN or n.since_version is None:
        return None
    try:
        schema = onnx.defs.get_schema(n.op_type, n.since_version, n.domain)
    except Exception:  # unknown op or domain: guess from the value instead
        return None
    attr = schema.attributes.get(key)
    return int(attr.type) if attr is not None else None


def _guess_type(value: Any) -> int | None:
    """The AttributeProto type a Python value serialises as, or None if it cannot."""
    A = AttributeProto
    if isinstance(value, (bool, int, np.integer)):
        return A.INT
    if isinstance(value, (float, np.floating)):
        return A.FLOAT
    if isinstance(value, (str, bytes)):
        return A.STRING
    if isinstance(value, np.ndarray):
        return A.TENSOR
    if isinstance(value, ir.Graph):
        return A.GRAPH
    if isinstance(value, onnx.TypeProto):
        return A.TYPE_PROTO
    if isinstance(value, (list, tuple)):
        if not value or all(isinstance(x, (bool, int, np.integer)) for x in value):
            return A.INTS
        if all(isinstance(x, (bool, int, float, np.integer, np.floating)) for x in value):
            return A.FLOATS
        if all(isinstance(x, (str, bytes)) for x in value):
            return A.STRINGS
        if all(isinstance(x, np.ndarray) for x in value):
            return A.TENSORS
        if all(isinstance(x, ir.Graph) for x in value):
            return A.GRAPHS
        if all(isinstance(x, onnx.TypeProto) for x in value):
            return A.TYPE_PROTOS
    return None


def _sparse_proto(name: str, dense: np.ndarray) -> onnx.SparseTensorProto:
    """A dense array (how the IR holds sparse tensors) back in sparse form (linear indices)."""
    dense = np.asarray(dense)
    flat = dense.reshape(-1)
    idx = np.flatnonzero(flat).astype(np.int64)
    values = tensor_proto(name, flat[idx])
    indices = numpy_helper.from_array(idx, name + "_indices" if name else "")
    return helper.make_sparse_tensor(values, indices, list(dense.shape))


def _tensor_bytes(g: onnx.GraphProto) -> int:
    total = sum(len(t.raw_data) for t in g.initializer)
    for n in g.node:
        for a in n.attribute:
            if a.type == AttributeProto.GRAPH:
                total += _tensor_bytes(a.g)
            elif a.type == AttributeProto.GRAPHS:
                total += sum(_tensor_bytes(x) for x in a.graphs)
            elif a.type == AttributeProto.TENSOR:
                total += len(a.t.raw_data)
    return total
