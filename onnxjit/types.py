"""ONNX element types <-> numpy dtypes (bfloat16, float8, int4 and friends through ml_dtypes)."""

from __future__ import annotations

import contextlib

import numpy as np
import onnx
from onnx import TensorProto, helper

# ONNX element type -> the name onnxruntime prints inside "tensor(...)".
_TYPE_NAMES: dict[int, str] = {
    TensorProto.FLOAT: "float",
    TensorProto.UINT8: "uint8",
    TensorProto.INT8: "int8",
    TensorProto.UINT16: "uint16",
    TensorProto.INT16: "int16",
    TensorProto.INT32: "int32",
    TensorProto.INT64: "int64",
    TensorProto.STRING: "string",
    TensorProto.BOOL: "bool",
    TensorProto.FLOAT16: "float16",
    TensorProto.DOUBLE: "double",
    TensorProto.UINT32: "uint32",
    TensorProto.UINT64: "uint64",
    TensorProto.COMPLEX64: "complex64",
    TensorProto.COMPLEX128: "complex128",
    TensorProto.BFLOAT16: "bfloat16",
}
for _name in (
    "FLOAT8E4M3FN",
    "FLOAT8E4M3FNUZ",
    "FLOAT8E5M2",
    "FLOAT8E5M2FNUZ",
    "UINT4",
    "INT4",
    "FLOAT4E2M1",
    "FLOAT8E8M0",
    "UINT2",
    "INT2",
    "FLOAT6E2M3",
    "FLOAT6E3M2",
):
    if hasattr(TensorProto, _name):
        _TYPE_NAMES[getattr(TensorProto, _name)] = _name.lower()


def elem_type_name(elem_type: int) -> str:
    """``TensorProto.FLOAT`` -> ``"float"`` (onnxruntime's spelling)."""
    name = _TYPE_NAMES.get(elem_type)
    if name is None:
        try:
            name = TensorProto.DataType.Name(elem_type).lower()
        except ValueError:  # a value no onnx version defines (a damaged or hostile model)
            name = f"undefined element type {elem_type}"
    return name


def np_dtype(elem_type: int) -> np.dtype:
    """The numpy dtype that stores an ONNX element type (``object`` for strings)."""
    if elem_type == TensorProto.STRING:
        return np.dtype(object)
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


_NP_TO_ONNX: dict[np.dtype, int] = {}
for _et in _TYPE_NAMES:
    if _et in (TensorProto.STRING, TensorProto.UNDEFINED):
        continue
    with contextlib.suppress(KeyError, ValueError, TypeError):  # types numpy cannot hold
        _NP_TO_ONNX.setdefault(np_dtype(_et), _et)


def onnx_elem_type(dtype: np.dtype | type) -> int:
    """numpy dtype -> ONNX element type; raises ``ValueError`` naming the dtype if unknown."""
    dt = np.dtype(dtype)
    if dt.kind in ("O", "U", "S"):
        return TensorProto.STRING
    try:
        return _NP_TO_ONNX[dt]
    except KeyError:
        raise ValueError(f"numpy dtype {dt} has no ONNX element type") from None


def tensor_type_string(elem_type: int) -> str:
    """``TensorProto.FLOAT`` -> ``"tensor(float)"``."""
    return f"tensor({elem_type_name(elem_type)})"


def type_proto_string(tp: onnx.TypeProto) -> str:
    """onnxruntime's string for any TypeProto: tensor(float), seq(tensor(int64)), map(...)."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return tensor_type_string(tp.tensor_type.elem_type)
    if kind == "sparse_tensor_type":
        return f"sparse_tensor({elem_type_name(tp.sparse_tensor_type.elem_type)})"
    if kind == "sequence_type":
        return f"seq({type_proto_string(tp.sequence_type.elem_type)})"
    if kind == "map_type":
        key = elem_type_name(tp.map_type.key_type)
        return f"map({key},{type_proto_string(tp.map_type.value_type)})"
    if kind == "optional_type":
        return f"optional({type_proto_string(tp.optional_type.elem_type)})"
    return "unknown"
