"""``onnxjit.OrtValue``: a tensor on the host or on a CUDA device, with onnxruntime's API.

A CPU value wraps a numpy array (``ortvalue_from_numpy`` keeps the caller's array, as
onnxruntime does); a CUDA value wraps a numba-cuda device array and exposes
``__cuda_array_interface__``, so CuPy, PyTorch and numba read it without a copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

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
    """A tensor and the device it lives on (onnxruntime's ``OrtValue``; tensors only).

    Build one with :meth:`ortvalue_from_numpy`, :meth:`ortvalue_from_shape_and_type` or
    :meth:`from_dlpack`; :meth:`numpy` copies a CUDA value to the host.
    """

    __slots__ = ("_data", "_device_type", "_device_id")

    def __init__(self, data: Any, device_type: str = "cpu", device_id: int = 0) -> None:
        # ``data``: a numpy array (cpu) or a numba-cuda device array (cuda)
        self._data = data
        self._device_type = device_type
        self._device_id = int(device_id)

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
        """``"cpu"`` or ``"cuda"``."""
        return self._device_type

    def shape(self) -> list[int]:
        return [int(d) for d in self._data.shape]

    def element_type(self) -> int:
        """The ONNX element type (``onnx.TensorProto.FLOAT``...)."""
        return types.onnx_elem_type(self._data.dtype)

    def data_type(self) -> str:
        """``"tensor(float)"`` and the like."""
        return types.tensor_type_string(self.element_type())

    def tensor_size_in_bytes(self) -> int:
        return int(np.prod(self._data.shape)) * self._data.dtype.itemsize

    def data_ptr(self) -> int:
        """The address of the first element (a device address for a CUDA value)."""
        if self._device_type == "cpu":
            return int(self._data.__array_interface__["data"][0])
        return int(device.cuda_array_interface(self._data)["data"][0])

    def has_value(self) -> bool:
        return True

    def is_tensor(self) -> bool:
        return True

    def is_sparse_tensor(self) -> bool:
        return False

    def is_tensor_sequence(self) -> bool:
        return False

    def __repr__(self) -> str:
        where = self._device_type if self._device_type == "cpu" else f"cuda:{self._device_id}"
        return f"OrtValue({self.data_type()}, shape={self.shape()}, device={where})"

    # -- data ----------------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The tensor as a numpy array: the held array for a CPU value, a host copy for CUDA."""
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
