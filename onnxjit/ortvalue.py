"""``onnxjit.OrtValue``: a tensor on the host or on a CUDA device, with onnxruntime's API.

A CPU value wraps a numpy array (``ortvalue_from_numpy`` keeps the caller's array, as
onnxruntime does); a CUDA value wraps a numba-cuda device array and exposes
``__cuda_array_interface__``, so CuPy, PyTorch and numba read it without a copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from onnxjit import device, providers, types

_DEVICE_TYPES = ("cpu", "cuda")


def dtype_of(element_type: Any) -> np.dtype:
    """A numpy dtype from onnxruntime's ``element_type``: a numpy type (``np.float32``) or an
    ONNX element type number (``onnx.TensorProto.BFLOAT16``)."""
    if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
        return types.np_dtype(int(element_type))
    return np.dtype(element_type)


def check_device(device_type: str, device_id: int) -> str:
    """Validate a ``(device_type, device_id)`` pair; return the lower-case device type.
    A CUDA device that cannot be used raises ``RuntimeError`` saying why."""
    kind = str(device_type).lower()
    if kind not in _DEVICE_TYPES:
        raise ValueError(
            f"unsupported device type {device_type!r}; onnxjit supports {list(_DEVICE_TYPES)}"
        )
    if kind == "cpu":
        return kind
    if int(device_id) < 0:
        raise ValueError(f"device_id must be >= 0, found {device_id}")
    why = providers.cuda_unavailable_reason(int(device_id))
    if why is not None:
        raise RuntimeError(f"CUDA device {device_id} cannot be used: {why}")
    return kind


class OrtValue:
    """A value and the device it lives on (onnxruntime's ``OrtValue``).

    Build a tensor with :meth:`ortvalue_from_numpy`, :meth:`ortvalue_from_shape_and_type`,
    :meth:`ortvalue_from_numpy_with_onnx_type` or :meth:`from_dlpack`; :meth:`numpy` copies a
    CUDA value to the host. Outputs of ``run_with_ort_values`` and of an IOBinding that are not
    tensors come back as host values too, as in onnxruntime: a sequence
    (``is_tensor_sequence()`` for a sequence of tensors, ``data_type()`` ``"seq(...)"``), a map,
    or an optional output without a value (``has_value()`` False). Those have no ``numpy()``,
    ``shape()`` or buffer (``RuntimeError``, as in onnxruntime); ``run()`` and
    ``IOBinding.copy_outputs_to_cpu()`` return them as lists, dicts and None, and they can be
    fed back to ``run_with_ort_values``.
    """

    __slots__ = ("_data", "_device_type", "_device_id", "_kind", "_type", "_elem")

    def __init__(self, data: Any, device_type: str = "cpu", device_id: int = 0) -> None:
        # ``data``: a numpy array (cpu) or a numba-cuda device array (cuda); a list, dict or
        # None for the values _wrap makes (``_kind`` "sequence", "map" or "none")
        self._data = data
        self._device_type = device_type
        self._device_id = int(device_id)
        self._kind = "tensor"
        self._type: str | None = None  # data_type() of a value that is not a tensor
        self._elem: int | None = None  # element_type() of a sequence of tensors

    @classmethod
    def _wrap(cls, value: Any, type_proto: onnx.TypeProto | None = None) -> OrtValue:
        """A CPU value over an output of a run: numpy arrays become tensors, lists sequences,
        dicts maps and None a value-less optional; ``type_proto`` is the output's declared
        type, which ``data_type()`` reports for values that are not tensors."""
        if isinstance(value, OrtValue):
            return value
        if not isinstance(value, (list, tuple, dict)) and value is not None:
            return cls(device.to_numpy(value), "cpu", 0)
        out = cls(value, "cpu", 0)
        declared = types.type_proto_string(type_proto) if type_proto is not None else None
        if value is None:
            out._kind = "none"
            out._type = declared or "optional(unknown)"
            return out
        if isinstance(value, dict):
            out._kind = "map"
            out._type = declared or "map(unknown)"
            return out
        out._kind = "sequence"
        out._data = list(value)
        tp = type_proto
        while tp is not None and tp.WhichOneof("value") == "optional_type":
            tp = tp.optional_type.elem_type
        if tp is not None and tp.WhichOneof("value") == "sequence_type":
            inner = tp.sequence_type.elem_type
            if inner.WhichOneof("value") == "tensor_type" and inner.tensor_type.elem_type:
                out._elem = int(inner.tensor_type.elem_type)
        if out._elem is None and out._data and isinstance(out._data[0], np.ndarray):
            try:
                out._elem = types.onnx_elem_type(out._data[0].dtype)
            except ValueError:
                out._elem = None
        if declared is not None and declared.startswith("seq("):
            out._type = declared
        elif out._elem is not None:
            out._type = f"seq({types.tensor_type_string(out._elem)})"
        else:
            out._type = "seq(unknown)"
        return out

    def _feed_value(self) -> Any:
        """What this value feeds to a run: the tensor, or the list, dict or None it holds."""
        return self if self._kind == "tensor" else self._data

    def _need_tensor(self, what: str) -> None:
        if self._kind != "tensor":
            raise RuntimeError(
                f"{what} is only available for tensors; this OrtValue is a {self.data_type()} "
                "(get its value from run() or IOBinding.copy_outputs_to_cpu())"
            )

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def ortvalue_from_numpy(
        cls, numpy_obj: Any, /, device_type: str = "cpu", device_id: int = 0, vendor_id: int = -1
    ) -> OrtValue:
        """A value holding ``numpy_obj``: on ``cpu`` the array itself (no copy, so later writes
        to it show); on ``cuda`` a copy on device ``device_id``."""
        kind = check_device(device_type, device_id)
        arr = device.host_array(numpy_obj)
        if kind == "cpu":
            return cls(arr, "cpu", 0)
        _check_device_dtype(arr.dtype)
        with device.on_device(device_id):
            return cls(device.to_device(arr), "cuda", device_id)

    @classmethod
    def ortvalue_from_shape_and_type(
        cls,
        shape: Sequence[int],
        element_type: Any,
        device_type: str = "cpu",
        device_id: int = 0,
        vendor_id: int = -1,
    ) -> OrtValue:
        """An uninitialised tensor of ``shape`` and ``element_type`` on the device."""
        kind = check_device(device_type, device_id)
        dtype = dtype_of(element_type)
        shape = tuple(int(d) for d in shape)
        if kind == "cpu":
            return cls(np.empty(shape, dtype), "cpu", 0)
        _check_device_dtype(dtype)
        with device.on_device(device_id):
            from numba import cuda

            return cls(cuda.device_array(shape, dtype), "cuda", device_id)

    @classmethod
    def ortvalue_from_numpy_with_onnx_type(
        cls, data: np.ndarray, /, onnx_element_type: int
    ) -> OrtValue:
        """A CPU tensor of ONNX element type ``onnx_element_type`` (a ``TensorProto`` number)
        whose bytes are ``data``'s: for types numpy lacks, pass their bit pattern in an
        array of the same item size (uint16 for bfloat16, uint8 for the float8 types). The
        array is reinterpreted in place, not copied; a different item size raises
        ``ValueError``."""
        dtype = dtype_of(int(onnx_element_type))
        arr = device.host_array(data)
        if not isinstance(arr, np.ndarray) or arr.dtype.itemsize != dtype.itemsize:
            name = types.tensor_type_string(int(onnx_element_type))
            raise ValueError(
                f"ortvalue_from_numpy_with_onnx_type: {name} "
                f"takes {dtype.itemsize}-byte elements, found numpy {np.asarray(data).dtype}; "
                f"pass an array of a {dtype.itemsize}-byte type holding the bit patterns"
            )
        if arr.dtype != dtype:
            if arr.dtype.kind in "OUS":
                raise ValueError("string arrays cannot be reinterpreted as another element type")
            arr = np.ascontiguousarray(arr).view(dtype)
        return cls(arr, "cpu", 0)

    @classmethod
    def from_dlpack(cls, data: Any, /) -> OrtValue:
        """A value sharing ``data``'s memory (DLPack or ``__cuda_array_interface__``)."""
        if device.is_device_value(data):
            dev_id = device.device_id_of(data) or 0
            return cls(device.as_device_array(data), "cuda", dev_id)
        if not hasattr(data, "__dlpack__"):
            raise TypeError(f"{type(data).__name__} does not support DLPack")
        return cls(np.from_dlpack(data), "cpu", 0)

    # -- description ---------------------------------------------------------------------------
    def device_name(self) -> str:
        """``"cpu"`` or ``"cuda"`` (``"cpu"`` for values that are not tensors)."""
        return self._device_type

    def shape(self) -> list[int]:
        """The tensor's dimensions (``RuntimeError`` for other values)."""
        self._need_tensor("shape()")
        return [int(d) for d in self._data.shape]

    def element_type(self) -> int:
        """The ONNX element type (``onnx.TensorProto.FLOAT``...) of a tensor or of the tensors
        of a sequence; ``RuntimeError`` for other values, as in onnxruntime."""
        if self._kind == "tensor":
            return types.onnx_elem_type(self._data.dtype)
        if self._elem is None:
            raise RuntimeError(
                f"Tensor proto_type is unavailable for this value: it is a {self.data_type()}"
            )
        return self._elem

    def data_type(self) -> str:
        """``"tensor(float)"``, ``"seq(tensor(int64))"``, ``"seq(map(int64,tensor(float)))"``
        and the like."""
        if self._kind != "tensor":
            return str(self._type)
        return types.tensor_type_string(self.element_type())

    def tensor_size_in_bytes(self) -> int:
        self._need_tensor("tensor_size_in_bytes()")
        return int(np.prod(self._data.shape)) * self._data.dtype.itemsize

    def data_ptr(self) -> int:
        """The address of the first element (a device address for a CUDA value)."""
        self._need_tensor("data_ptr()")
        if self._device_type == "cpu":
            return int(self._data.__array_interface__["data"][0])
        return int(device.cuda_array_interface(self._data)["data"][0])

    def has_value(self) -> bool:
        """False only for an optional output that holds no value."""
        return self._kind != "none"

    def is_tensor(self) -> bool:
        return self._kind == "tensor"

    def is_sparse_tensor(self) -> bool:
        return False

    def is_tensor_sequence(self) -> bool:
        """True for a sequence whose elements are tensors (``seq(tensor(...))``)."""
        return self._kind == "sequence" and all(isinstance(v, np.ndarray) for v in self._data)

    def as_sparse_tensor(self) -> Any:
        """``RuntimeError``: onnxjit has no sparse tensors (nor does a dense OrtValue in
        onnxruntime)."""
        raise RuntimeError("this OrtValue is not a sparse tensor: onnxjit has none")

    def __repr__(self) -> str:
        if self._kind != "tensor":
            return f"OrtValue({self.data_type()})"
        where = self._device_type if self._device_type == "cpu" else f"cuda:{self._device_id}"
        return f"OrtValue({self.data_type()}, shape={self.shape()}, device={where})"

    # -- data ----------------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The tensor as a numpy array: the held array for a CPU value, a host copy for CUDA.
        Values that are not tensors raise ``RuntimeError``, as in onnxruntime."""
        self._need_tensor("numpy()")
        if self._device_type == "cpu":
            return self._data
        return device.to_host(self._data)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        arr = self.numpy()
        if copy:
            return np.array(arr, dtype=dtype, copy=True)
        return arr if dtype is None else np.asarray(arr, dtype=dtype)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The CUDA array interface of a CUDA value (absent on a CPU value)."""
        if self._device_type != "cuda":
            raise AttributeError("a CPU OrtValue has no __cuda_array_interface__; use numpy()")
        return device.cuda_array_interface(self._data)

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        self._need_tensor("__dlpack__")
        if self._device_type == "cpu":
            return self._data.__dlpack__(stream=stream, **kwargs)
        raise BufferError(
            "a CUDA OrtValue is shared through __cuda_array_interface__ (cupy.asarray, "
            "torch.as_tensor(..., device='cuda'), numba.cuda.as_cuda_array), not DLPack"
        )

    def __dlpack_device__(self) -> tuple[int, int]:
        if self._device_type == "cpu":
            return (device.KDL_CPU, 0)
        return (device.KDL_CUDA, self._device_id)

    def update_inplace(self, data: Any) -> None:
        """Copy ``data`` (a numpy array or an OrtValue of the same shape and element type)
        into this value's memory, which keeps its address."""
        self._need_tensor("update_inplace()")
        src = data.numpy() if isinstance(data, OrtValue) and data._device_type == "cpu" else data
        if isinstance(src, OrtValue):
            src_shape, src_dtype = tuple(src._data.shape), src._data.dtype
        else:
            if not isinstance(src, np.ndarray):
                raise TypeError("data must be a numpy.ndarray or an OrtValue")
            src_shape, src_dtype = src.shape, src.dtype
        if src_shape != tuple(self._data.shape) or src_dtype != self._data.dtype:
            raise ValueError(
                f"update_inplace needs shape {self.shape()} and dtype {self._data.dtype}, found "
                f"shape {list(src_shape)} and dtype {src_dtype}"
            )
        if self._device_type == "cpu":
            np.copyto(self._data, device.to_numpy(src))
        elif isinstance(src, OrtValue):
            self._data.copy_to_device(src._data)
        else:
            self._data.copy_to_device(device.contiguous(src))


def _check_device_dtype(dtype: np.dtype) -> None:
    if dtype.kind in "OUS":
        raise TypeError("string tensors cannot live on a CUDA device; keep them on the CPU")
