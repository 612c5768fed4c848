"""Loading: protobuf parsing, external data (safe paths, mmap, SHA-1) and the in-memory IR.

:func:`load_model` accepts a path, bytes, or an ``onnx.ModelProto`` and returns an
:class:`onnxjit.ir.Model`. External data is only ever read from regular files inside the model's
folder: absolute locations, ``..`` components, NUL bytes, symlinks that resolve outside the
folder, files with several hard links (one of them may be outside), unknown or repeated
external_data keys, and offsets or lengths that do not fit the file or the tensor are refused.
The file is opened without following a final symlink and the opened file's real path is
checked again, so a path swapped between the check and the open is caught. Large external
tensors are memory-mapped read-only instead of copied.

Malformed protos raise :class:`ModelLoadError`: negative dims, element counts that overflow
int64, data that disagrees with dims, subgraphs nested more than ``MAX_GRAPH_DEPTH`` deep.
Dense forms of sparse initializers are created under the allocation caps of
:mod:`onnxjit.limits`.
"""

from __future__ import annotations

import hashlib
import math
import mmap
import os
import stat
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError
from onnx import AttributeProto, TensorProto, numpy_helper

from onnxjit import ir, limits, types
from onnxjit.errors import ExternalDataError, ModelLoadError, ResourceLimitError

# External tensors at least this large are memory-mapped rather than copied.
MMAP_THRESHOLD = 1 << 20
# Graph attributes (If/Loop/Scan bodies) nested deeper than this are refused: the IR is walked
# recursively by every stage. Bytes parsed by protobuf stop earlier (its limit of 100 nested
# messages is about 33 levels of subgraphs), so this bounds ModelProtos built in memory.
MAX_GRAPH_DEPTH = 64
# The keys of TensorProto.external_data (ONNX ExternalData.md); any other key is refused.
EXTERNAL_DATA_KEYS = ("location", "offset", "length", "checksum")

_ATTR_SCALAR_FIELDS = {
    AttributeProto.FLOAT: "f",
    AttributeProto.INT: "i",
    AttributeProto.STRING: "s",
    AttributeProto.TENSOR: "t",
    AttributeProto.GRAPH: "g",
    AttributeProto.SPARSE_TENSOR: "sparse_tensor",
    AttributeProto.TYPE_PROTO: "tp",
}
_ATTR_LIST_FIELDS = {
    AttributeProto.FLOATS: "floats",
    AttributeProto.INTS: "ints",
    AttributeProto.STRINGS: "strings",
    AttributeProto.TENSORS: "tensors",
    AttributeProto.GRAPHS: "graphs",
    AttributeProto.SPARSE_TENSORS: "sparse_tensors",
    AttributeProto.TYPE_PROTOS: "type_protos",
}


def load_model(
    model: str | os.PathLike[str] | bytes | onnx.ModelProto,
    base_dir: str | os.PathLike[str] | None = None,
) -> ir.Model:
    """Parse ``model`` and build the IR.

    ``base_dir`` is the folder external data is read from; it defaults to the model file's
    folder and must be given for bytes or a ModelProto that reference external data.
    Raises :class:`ModelLoadError` (or its subclass :class:`ExternalDataError`).
    """
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto = _parse(bytes(model), "the model bytes")
    elif isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise ModelLoadError(
                f"model file {str(path)!r} does not exist or is not a file; check the path"
            )
        proto = _parse(path.read_bytes(), f"model file {str(path)!r}")
        if base_dir is None:
            base_dir = path.resolve().parent
    else:
        raise ModelLoadError(
            f"expected a path, bytes or onnx.ModelProto, found {type(model).__name__}; "
            "pass the model file's path"
        )
    bad = _non_utf8_text(proto, "model")
    if bad is not None:
        field, value = bad
        raise ModelLoadError(
            f"the string field {field} holds bytes that are not UTF-8 ({value[:40]!r}); "
            "expected text (ONNX strings are UTF-8), found damaged bytes; re-export the model"
        )
    loader = _Loader(None if base_dir is None else Path(base_dir))
    result = loader.model(proto)
    result.proto = proto
    return result


def _parse(data: bytes, what: str) -> onnx.ModelProto:
    if not data:
        raise ModelLoadError(f"{what} is empty; expected a serialized ONNX ModelProto")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        if "MaxDepth" in str(exc) or "recursion" in str(exc).lower():
            raise ModelLoadError(
                f"{what} nests messages more deeply than protobuf's limit of 100 (about 33 "
                f"levels of subgraphs) ({exc}); flatten the nested If/Loop/Scan bodies"
            ) from None
        raise ModelLoadError(
            f"{what} could not be decoded as an ONNX ModelProto ({exc}); "
            "check that the file is a complete .onnx model"
        ) from None
    if not proto.HasField("graph") and not proto.opset_import:
        raise ModelLoadError(
            f"{what} decoded to an empty ModelProto (no graph, no opset_import); "
            "check that the file is an .onnx model and not another protobuf message"
        )
    return proto


_STRING = FieldDescriptor.TYPE_STRING
_MESSAGE = FieldDescriptor.TYPE_MESSAGE


def _repeated(field: Any) -> bool:
    # protobuf 6+ has is_repeated (and dropped label); older versions have label only
    flag = getattr(field, "is_repeated", None)
    return bool(flag) if flag is not None else field.label == FieldDescriptor.LABEL_REPEATED


def _non_utf8_text(msg: Any, path: str) -> tuple[str, bytes] | None:
    """The first string field (path, raw value) that protobuf decoded as bytes because it is
    not UTF-8 (op types, names and domains would then be bytes, not str), or None. A loop
    over a stack, since a ModelProto built in memory may nest deeper than Python's recursion;
    each entry is (message, its parent's entry, its label), the path is spelled out only for
    the field found."""

    def spell(entry: tuple | None, last: str) -> str:
        parts = [last]
        while entry is not None:
            parts.append(entry[2])
            entry = entry[1]
        return ".".join(reversed(parts))

    stack: list[tuple] = [(msg, None, path)]
    while stack:
        entry = stack.pop()
        for field, value in entry[0].ListFields():
            if field.type == _STRING:
                for v in value if _repeated(field) else (value,):
                    if not isinstance(v, str):
                        return spell(entry, field.name), bytes(v)
            elif field.type == _MESSAGE:
                if _repeated(field):
                    for i in range(len(value) - 1, -1, -1):
                        stack.append((value[i], entry, f"{field.name}[{i}]"))
                else:
                    stack.append((value, entry, field.name))
    return None


class _Loader:
    """Decodes protos into IR objects; holds the external-data context."""

    def __init__(self, base_dir: Path | None):
        self.base_dir = base_dir
        self._files: dict[Path, tuple[Any, mmap.mmap | None, int]] = {}
        self._depth = 0  # graphs being decoded around the current one

    # -- model / graph / node -----------------------------------------------------------
    def model(self, proto: onnx.ModelProto) -> ir.Model:
        problems: list[str] = []
        opsets: dict[str, int] = {}
        for imp in proto.opset_import:
            dom = "" if imp.domain in ("", "ai.onnx") else imp.domain
            if dom in opsets and opsets[dom] != imp.version:
                problems.append(
                    f"opset_import lists domain {imp.domain or 'ai.onnx'!r} more than once "
                    f"(versions {opsets[dom]} and {imp.version}); keep one entry per domain"
                )
            elif dom in opsets:
                # skl2onnx writes such exact repeats; they are unambiguous, so accept them.
                warnings.warn(
                    f"opset_import lists domain {imp.domain or 'ai.onnx'!r} twice with the same "
                    f"version {imp.version}; IR.md asks for one entry per domain",
                    UserWarning,
                    stacklevel=4,
                )
            opsets[dom] = int(imp.version)
        functions: dict[tuple[str, str, str], ir.Function] = {}
        for fp in proto.functions:
            fn = self.function(fp)
            key = (fn.domain, fn.name, fn.overload)
            if key in functions:
                problems.append(
                    f"function {fn.domain}:{fn.name} (overload {fn.overload!r}) is defined "
                    "twice; rename or remove one"
                )
            functions[key] = fn
        graph = self.graph(proto.graph) if proto.HasField("graph") else None
        if graph is None:
            problems.append("the model has no graph; a model needs a main graph")
            graph = ir.Graph(name="", nodes=[], inputs=[], outputs=[])
        return ir.Model(
            ir_version=int(proto.ir_version) if proto.HasField("ir_version") else None,
            opset_imports=opsets,
            graph=graph,
            producer_name=proto.producer_name,
            producer_version=proto.producer_version,
            domain=proto.domain,
            model_version=int(proto.model_version),
            doc=proto.doc_string,
            metadata={p.key: p.value for p in proto.metadata_props},
            functions=functions,
            base_dir=None if self.base_dir is None else str(self.base_dir),
            load_problems=problems,
            has_training_info=len(proto.training_info) > 0,
        )

    def graph(self, gp: onnx.GraphProto) -> ir.Graph:
        if self._depth >= MAX_GRAPH_DEPTH:
            raise ModelLoadError(
                f"subgraph attributes (If/Loop/Scan bodies) are nested more than "
                f"{MAX_GRAPH_DEPTH - 1} levels below the main graph (at graph {gp.name!r}); "
                "onnxjit refuses deeper nesting, flatten the nested bodies"
            )
        self._depth += 1
        try:
            return self._graph(gp)
        finally:
            self._depth -= 1

    def _graph(self, gp: onnx.GraphProto) -> ir.Graph:
        inits: dict[str, np.ndarray] = {}
        order: list[str] = []
        for t in gp.initializer:
            inits[t.name] = self.tensor(t)
            order.append(t.name)
        sparse_names = []
        for st in gp.sparse_initializer:
            name = st.values.name
            inits[name] = self.sparse_tensor(st)
            order.append(name)
            sparse_names.append(name)
        nodes = [self.node(n, i) for i, n in enumerate(gp.node)]
        return ir.Graph(
            name=gp.name,
            nodes=nodes,
            inputs=[ir.ValueInfo(v.name, _type_or_none(v), v.doc_string) for v in gp.input],
            outputs=[ir.ValueInfo(v.name, _type_or_none(v), v.doc_string) for v in gp.output],
            initializers=inits,
            initializer_order=order,
            value_info={v.name: ir.ValueInfo(v.name, _type_or_none(v)) for v in gp.value_info},
            doc=gp.doc_string,
            sparse_initializer_names=sparse_names,
            proto=gp,
        )

    def node(self, np_: onnx.NodeProto, index: int) -> ir.Node:
        node = ir.Node(
            op_type=np_.op_type,
            domain="" if np_.domain in ("", "ai.onnx") else np_.domain,
            inputs=list(np_.input),
            outputs=list(np_.output),
            name=np_.name,
            index=index,
            overload=np_.overload,
            doc=np_.doc_string,
        )
        for a in np_.attribute:
            self.attribute(a, node)
        return node

    def attribute(self, a: AttributeProto, node: ir.Node) -> None:
        if a.name in node.attrs or a.name in node.attr_refs:
            node.load_problems.append(
                f"attribute {a.name!r} is given twice; keep one AttributeProto per name"
            )
        if a.ref_attr_name:
            node.attr_refs[a.name] = a.ref_attr_name
            node.attr_types[a.name] = a.type
            return
        set_fields = [f for f in _ATTR_SCALAR_FIELDS.values() if a.HasField(f)]
        set_fields += [f for f in _ATTR_LIST_FIELDS.values() if len(getattr(a, f))]
        declared = _ATTR_SCALAR_FIELDS.get(a.type) or _ATTR_LIST_FIELDS.get(a.type)
        if a.type == AttributeProto.UNDEFINED or declared is None:
            node.load_problems.append(
                f"attribute {a.name!r} has no type (AttributeProto.type is UNDEFINED); "
                "set its type field"
            )
            return
        if len(set_fields) > 1 or (set_fields and set_fields[0] != declared):
            node.load_problems.append(
                f"attribute {a.name!r} is declared {AttributeProto.AttributeType.Name(a.type)} "
                f"but carries the fields {set_fields}; expected exactly one value in "
                f"field {declared!r}"
            )
            return
        if not set_fields and a.type in _ATTR_SCALAR_FIELDS:
            node.load_problems.append(
                f"attribute {a.name!r} is declared {AttributeProto.AttributeType.Name(a.type)} "
                f"but carries no value; set field {declared!r}"
            )
            return
        node.attrs[a.name] = self.attribute_value(a)
        node.attr_types[a.name] = a.type

    def attribute_value(self, a: AttributeProto) -> Any:
        t = a.type
        if t == AttributeProto.FLOAT:
            return float(a.f)
        if t == AttributeProto.INT:
            return int(a.i)
        if t == AttributeProto.STRING:
            return _decode_str(a.s)
        if t == AttributeProto.TENSOR:
            return self.tensor(a.t)
        if t == AttributeProto.GRAPH:
            return self.graph(a.g)
        if t == AttributeProto.SPARSE_TENSOR:
            return self.sparse_tensor(a.sparse_tensor)
        if t == AttributeProto.TYPE_PROTO:
            return a.tp
        if t == AttributeProto.FLOATS:
            return [float(x) for x in a.floats]
        if t == AttributeProto.INTS:
            return [int(x) for x in a.ints]
        if t == AttributeProto.STRINGS:
            return [_decode_str(x) for x in a.strings]
        if t == AttributeProto.TENSORS:
            return [self.tensor(x) for x in a.tensors]
        if t == AttributeProto.GRAPHS:
            return [self.graph(x) for x in a.graphs]
        if t == AttributeProto.SPARSE_TENSORS:
            return [self.sparse_tensor(x) for x in a.sparse_tensors]
        if t == AttributeProto.TYPE_PROTOS:
            return list(a.type_protos)
        raise ModelLoadError(f"attribute {a.name!r} has unknown type {t}")

    def function(self, fp: onnx.FunctionProto) -> ir.Function:
        defaults = {}
        for a in fp.attribute_proto:
            holder = ir.Node("", "", [], [])
            self.attribute(a, holder)
            if a.name in holder.attrs:
                defaults[a.name] = holder.attrs[a.name]
        return ir.Function(
            name=fp.name,
            domain=fp.domain,
            overload=fp.overload,
            inputs=list(fp.input),
            outputs=list(fp.output),
            attributes=list(fp.attribute) + [a.name for a in fp.attribute_proto],
            attribute_defaults=defaults,
            nodes=[self.node(n, i) for i, n in enumerate(fp.node)],
            opset_imports={
                ("" if o.domain in ("", "ai.onnx") else o.domain): int(o.version)
                for o in fp.opset_import
            },
            doc=fp.doc_string,
        )

    # -- tensors ---------------------------------------------------------------------------
    def tensor(self, t: TensorProto) -> np.ndarray:
        _check_dims(t.name, "tensor", t.dims)
        if t.data_type not in _ELEM_TYPES or t.data_type == TensorProto.UNDEFINED:
            raise ModelLoadError(
                f"tensor {t.name!r} has data_type {t.data_type}, which is not an ONNX element "
                "type; fix the tensor's data_type"
            )
        if t.data_location == TensorProto.EXTERNAL:
            return self.external_tensor(t)
        if t.HasField("raw_data") and t.data_type != TensorProto.STRING:
            count = math.prod(int(d) for d in t.dims)
            if t.data_type in _PACKED_TYPES:
                expected = _packed_nbytes(t.data_type, count)
            else:
                expected = count * types.np_dtype(t.data_type).itemsize
            if len(t.raw_data) != expected:
                raise ModelLoadError(
                    f"tensor {t.name!r}: raw_data holds {len(t.raw_data)} bytes but dims "
                    f"{list(t.dims)} of {types.elem_type_name(t.data_type)} need {expected}; "
                    "fix the dims or re-save the tensor"
                )
        try:
            arr = numpy_helper.to_array(t)
        except Exception as exc:  # onnx raises ValueError/TypeError on inconsistent protos
            raise ModelLoadError(
                f"tensor {t.name!r} could not be decoded ({exc}); check that its data "
                "matches its dims and data_type"
            ) from None
        if t.data_type == TensorProto.STRING:
            arr = np.array([_decode_str(x) for x in arr.reshape(-1)], dtype=object).reshape(
                arr.shape
            )
        elif not arr.flags.writeable or not arr.flags.c_contiguous:
            # to_array views the proto's bytes read-only; Numba types read-only arrays apart
            # (another compile, slower dispatch), so own one contiguous copy from the start.
            arr = np.array(arr, order="C", copy=True)  # (ascontiguousarray makes 0-d 1-d)
        return arr

    def sparse_tensor(self, st: onnx.SparseTensorProto) -> np.ndarray:
        values = self.tensor(st.values)
        indices = self.tensor(st.indices).astype(np.int64)
        _check_dims(st.values.name, "sparse tensor", st.dims)
        dims = tuple(int(d) for d in st.dims)
        # The dense form is allocated here from declared dims: it counts against the caps.
        limits.check(f"sparse tensor {st.values.name!r}", dims, values.dtype, "dense form")
        if values.ndim != 1:
            raise ModelLoadError(
                f"sparse tensor {st.values.name!r}: values have shape {list(values.shape)}; "
                "expected a 1-D tensor of the non-zero values"
            )
        dense = np.zeros(dims, dtype=values.dtype)
        flat = dense.reshape(-1)
        nnz = values.size
        if indices.ndim == 1:
            lin = indices
        elif indices.ndim == 2 and indices.shape == (nnz, len(dims)):
            if nnz and (indices.min() < 0 or (indices >= np.array(dims)).any()):
                raise ModelLoadError(
                    f"sparse tensor {st.values.name!r}: an index is outside dims {dims}; "
                    "expected each coordinate in [0, dim - 1]"
                )
            lin = np.ravel_multi_index(tuple(indices.T), dims) if nnz else indices[:, 0]
        else:
            raise ModelLoadError(
                f"sparse tensor {st.values.name!r}: indices of shape {indices.shape} do not "
                f"fit {nnz} values in dims {dims}; expected [{nnz}] or [{nnz}, {len(dims)}]"
            )
        if nnz and (lin.min() < 0 or lin.max() >= flat.size):
            raise ModelLoadError(
                f"sparse tensor {st.values.name!r}: an index is outside dims {dims}; "
                f"expected linear indices in [0, {flat.size - 1}]"
            )
        flat[lin] = values.reshape(-1)
        return dense

    def external_tensor(self, t: TensorProto) -> np.ndarray:
        info: dict[str, str] = {}
        for entry in t.external_data:
            if entry.key in info:
                raise ExternalDataError(
                    f"tensor {t.name!r}: external_data key {entry.key!r} appears twice; "
                    "each key may appear once"
                )
            if entry.key not in EXTERNAL_DATA_KEYS:
                raise ExternalDataError(
                    f"tensor {t.name!r}: external_data key {entry.key!r} is not one of "
                    f"{list(EXTERNAL_DATA_KEYS)} (ONNX ExternalData.md); remove the entry"
                )
            info[entry.key] = entry.value
        location = info.get("location")
        if not location:
            raise ExternalDataError(
                f"tensor {t.name!r} is stored externally but has no 'location' key; "
                "re-save the model with onnx.save(..., save_as_external_data=True)"
            )
        if t.data_type == TensorProto.STRING:
            raise ExternalDataError(
                f"tensor {t.name!r}: STRING tensors cannot be stored as external data (the "
                "spec allows only fixed-size types); store it inside the model"
            )
        path = self.safe_external_path(t.name, location)
        offset = _parse_nonneg(t.name, "offset", info.get("offset", "0"))
        try:
            dtype = types.np_dtype(t.data_type)
        except Exception:
            raise ExternalDataError(
                f"tensor {t.name!r}: data_type {t.data_type} is not an ONNX element type; "
                "fix the tensor's data_type"
            ) from None
        dims = tuple(int(d) for d in t.dims)
        count = math.prod(dims)  # exact: _check_dims bounded it
        packed = t.data_type in _PACKED_TYPES
        expected = _packed_nbytes(t.data_type, count) if packed else count * dtype.itemsize
        buf, fsize = self._map(t.name, location, path)
        length = _parse_nonneg(t.name, "length", info["length"]) if "length" in info else None
        if length is None:
            length = expected
        if length != expected:
            raise ExternalDataError(
                f"tensor {t.name!r}: external length {length} bytes does not match its dims "
                f"{dims} and type {types.elem_type_name(t.data_type)} ({expected} bytes); "
                "fix the 'length' entry or the dims"
            )
        if offset + length > fsize:
            raise ExternalDataError(
                f"tensor {t.name!r}: external data [{offset}, {offset + length}) lies beyond the "
                f"end of {location!r} ({fsize} bytes); the file is truncated or the offset is wrong"
            )
        view = memoryview(buf)[offset : offset + length]
        digest = info.get("checksum")
        if digest is not None:
            got = hashlib.sha1(view).hexdigest()
            if got.lower() != digest.lower():
                raise ExternalDataError(
                    f"tensor {t.name!r}: SHA-1 of external data in {location!r} is {got}, "
                    f"expected {digest}; the file has changed or is corrupt"
                )
        if packed:
            proto = TensorProto()
            proto.CopyFrom(t)
            del proto.external_data[:]
            proto.data_location = TensorProto.DEFAULT
            proto.raw_data = bytes(view)
            return numpy_helper.to_array(proto)
        if length >= MMAP_THRESHOLD and offset % max(dtype.itemsize, 1) == 0:
            arr = np.frombuffer(buf, dtype=dtype.newbyteorder("<"), count=count, offset=offset)
        else:
            arr = np.frombuffer(bytes(view), dtype=dtype.newbyteorder("<"), count=count)
        arr = arr.reshape(dims)
        if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and not _LITTLE):
            arr = arr.astype(dtype)
        return arr

    def safe_external_path(self, tensor: str, location: str) -> Path:
        """Resolve ``location`` inside the model folder or raise ExternalDataError."""
        if self.base_dir is None:
            raise ExternalDataError(
                f"tensor {tensor!r} references external file {location!r}, but the model was "
                "not loaded from a file; pass base_dir= (the folder holding the data)"
            )
        if "\x00" in location:
            raise ExternalDataError(
                f"tensor {tensor!r}: external location {location!r} contains a NUL byte; "
                "refusing it"
            )
        posix_abs = location.startswith(("/", "\\"))
        win_abs = len(location) > 1 and location[1] == ":"
        if posix_abs or win_abs or os.path.isabs(location):
            raise ExternalDataError(
                f"tensor {tensor!r}: external location {location!r} is an absolute path; "
                "locations must be relative to the model's folder"
            )
        parts = location.replace("\\", "/").split("/")
        if ".." in parts:
            raise ExternalDataError(
                f"tensor {tensor!r}: external location {location!r} climbs out of the model's "
                "folder with '..'; locations must stay inside the model's folder"
            )
        base = self.base_dir.resolve()
        target = (base / location).resolve()
        if target != base and base not in target.parents:
            raise ExternalDataError(
                f"tensor {tensor!r}: external location {location!r} resolves to {str(target)!r} "
                f"outside the model's folder {str(base)!r} (through a symlink); refusing it"
            )
        if not target.exists():
            raise ExternalDataError(
                f"tensor {tensor!r}: external data file {location!r} does not exist in "
                f"{str(base)!r}; copy it next to the model"
            )
        return target

    def _map(self, tensor: str, location: str, path: Path) -> tuple[Any, int]:
        """(the file's bytes, mapped read-only, and its size), opened once per file.

        The file is opened without following a final symlink and without blocking (a FIFO
        would otherwise hang the load); it must be a regular file with one link whose real
        path, read back from the open descriptor, lies inside the model's folder.
        """
        if path not in self._files:
            fd = self._open_checked(tensor, location, path)
            with os.fdopen(fd, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size == 0:
                    self._files[path] = (b"", None, 0)
                else:
                    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                    self._files[path] = (mm, mm, size)
        buf, _, size = self._files[path]
        return buf, size

    def _open_checked(self, tensor: str, location: str, path: Path) -> int:
        flags = os.O_RDONLY
        for name in ("O_NOFOLLOW", "O_NONBLOCK", "O_CLOEXEC", "O_BINARY"):
            flags |= getattr(os, name, 0)
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            raise ExternalDataError(
                f"tensor {tensor!r}: external data file {location!r} could not be opened "
                f"({exc.strerror}); check that it is a readable regular file in the model's "
                "folder"
            ) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ExternalDataError(
                    f"tensor {tensor!r}: external data {location!r} is not a regular file "
                    f"(mode {stat.filemode(st.st_mode)}); point location at a data file"
                )
            if st.st_nlink > 1:
                raise ExternalDataError(
                    f"tensor {tensor!r}: external data file {location!r} has {st.st_nlink} "
                    "hard links, and a hard link may be a file outside the model's folder "
                    "(onnx refuses them too); replace the link with a copy of the file"
                )
            base = self.base_dir.resolve() if self.base_dir is not None else None
            real = _fd_path(fd)
            if real is None:  # no /proc: the path must still name the file that was opened
                real = path.resolve()
                if not os.path.samestat(st, os.stat(real)):
                    real = None
            if base is None or real is None or (real != base and base not in real.parents):
                raise ExternalDataError(
                    f"tensor {tensor!r}: external data {location!r} changed while it was "
                    f"opened and now resolves outside the model's folder ({real}); refusing it"
                )
        except BaseException:
            os.close(fd)
            raise
        return fd


_LITTLE = np.little_endian
_ELEM_TYPES = frozenset(TensorProto.DataType.values())
# Element types stored packed below one byte, with their width in bits.
_PACKED_BITS = {
    getattr(TensorProto, n): bits
    for n, bits in (
        ("INT4", 4),
        ("UINT4", 4),
        ("FLOAT4E2M1", 4),
        ("INT2", 2),
        ("UINT2", 2),
        ("FLOAT6E2M3", 6),
        ("FLOAT6E3M2", 6),
    )
    if hasattr(TensorProto, n)
}
_PACKED_TYPES = set(_PACKED_BITS)


def _fd_path(fd: int) -> Path | None:
    """The real path of an open file, from /proc (Linux); None where that is unavailable."""
    link = f"/proc/self/fd/{fd}"
    try:
        target = os.readlink(link)
    except OSError:
        return None
    return Path(target) if target.startswith("/") else None


def _check_dims(name: str, what: str, dims: Any) -> None:
    """Refuse negative dims and element counts that overflow int64 (ModelLoadError)."""
    values = [int(d) for d in dims]
    if any(d < 0 for d in values):
        raise ModelLoadError(
            f"{what} {name!r} has negative dims {values}; dimensions must be >= 0, fix the "
            "tensor's dims"
        )
    try:
        limits.element_count(f"{what} {name!r}", values, "declared")
    except ResourceLimitError as exc:
        raise ModelLoadError(str(exc)) from None


def _packed_nbytes(data_type: int, count: int) -> int:
    return (count * _PACKED_BITS[data_type] + 7) // 8


def _parse_nonneg(tensor: str, key: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ExternalDataError(
            f"tensor {tensor!r}: external_data {key}={raw!r} is not an integer; expected a "
            "byte count (decimal digits), fix the entry"
        ) from None
    if value < 0:
        raise ExternalDataError(
            f"tensor {tensor!r}: external_data {key}={value} is negative; expected a byte "
            "count >= 0, fix the entry"
        )
    return value


def _type_or_none(v: onnx.ValueInfoProto) -> onnx.TypeProto | None:
    """The declared type; a negative dim_value (some exporters write -1 for a dynamic size)
    becomes an unknown dimension, as onnxruntime reads it (onnx's shape inference would
    otherwise compute with it, and one of its assertions aborts the process)."""
    if not v.HasField("type"):
        return None
    if not _has_negative_dim(v.type):
        return v.type
    tp = onnx.TypeProto()
    tp.CopyFrom(v.type)  # the caller's proto stays as it was
    _clear_negative_dims(tp)
    return tp


def _shapes_of(tp: onnx.TypeProto) -> list[onnx.TensorShapeProto]:
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        inner = getattr(tp, kind)
        return [inner.shape] if inner.HasField("shape") else []
    if kind == "sequence_type":
        return _shapes_of(tp.sequence_type.elem_type)
    if kind == "optional_type":
        return _shapes_of(tp.optional_type.elem_type)
    if kind == "map_type":
        return _shapes_of(tp.map_type.value_type)
    return []


def _has_negative_dim(tp: onnx.TypeProto) -> bool:
    return any(
        d.WhichOneof("value") == "dim_value" and d.dim_value < 0
        for shape in _shapes_of(tp)
        for d in shape.dim
    )


def _clear_negative_dims(tp: onnx.TypeProto) -> None:
    for shape in _shapes_of(tp):
        for d in shape.dim:
            if d.WhichOneof("value") == "dim_value" and d.dim_value < 0:
                d.ClearField("dim_value")


def attribute_default(name: str, proto: AttributeProto) -> Any:
    """A schema's default attribute value (which may carry no name), decoded as a node's
    attribute is (strings as str, tensors as arrays)."""
    named = AttributeProto()
    named.CopyFrom(proto)
    named.name = name
    return _Loader(None).attribute_value(named)


def _decode_str(b: bytes | str) -> str:
    if isinstance(b, str):
        return b
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b.decode("latin-1")
