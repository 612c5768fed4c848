"""Moving tensors between the host and a CUDA device.

A *device array* here is what onnxjit's CUDA kernels take: a numba-cuda device array
(``DeviceNDArray``; under ``NUMBA_ENABLE_CUDASIM=1`` the simulator's ``FakeCUDAArray``, whose
"device memory" is host memory). Values from other libraries become device arrays without a
copy when they say where their memory is:

- ``__cuda_array_interface__`` (CuPy, PyTorch CUDA tensors, numba, onnxjit's CUDA OrtValue);
- DLPack with a CUDA device (``__dlpack_device__()`` of kDLCUDA or kDLCUDAManaged), read
  through cuda.core (a numba-cuda dependency).

Everything else (numpy arrays, CPU torch tensors, lists) is host data: :func:`to_device`
copies it on a given stream. ``numba.cuda`` is imported on first use, never at
``import onnxjit``: it is slow to import, and the simulator must be chosen before it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

# DLPack device types (dlpack.h, DLDeviceType).
KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3  # pinned host memory: readable by numpy as it is
KDL_CUDA_MANAGED = 13
_CUDA_DLPACK = (KDL_CUDA, KDL_CUDA_MANAGED)


def _cuda() -> Any:
    from numba import cuda

    return cuda


def _simulated() -> bool:
    from onnxjit.providers import simulator_enabled

    return simulator_enabled()


def is_device_array(obj: Any) -> bool:
    """``obj`` is a numba-cuda device array (real or simulated)."""
    mod = type(obj).__module__
    if not mod.startswith(("numba.cuda", "numba_cuda")):
        return False  # numba.cuda is not imported for a plain numpy feed
    cuda = _cuda()
    if _simulated():
        from numba.cuda.simulator.cudadrv.devicearray import is_cuda_ndarray

        return bool(is_cuda_ndarray(obj))
    return bool(cuda.is_cuda_array(obj)) and hasattr(obj, "copy_to_host")


def _dlpack_device(obj: Any) -> tuple[int, int] | None:
    fn = getattr(type(obj), "__dlpack_device__", None)
    if fn is None:
        return None
    try:
        kind, ordinal = fn(obj)
    except Exception:
        return None
    return int(kind), int(ordinal)


def is_tensor_object(obj: Any) -> bool:
    """``obj`` is a tensor of another library or device (not a numpy array): it speaks DLPack
    or the CUDA array interface, or is a device array or an :class:`~onnxjit.OrtValue`.
    :func:`to_numpy` reads any of them."""
    if isinstance(obj, np.ndarray):
        return False
    from onnxjit.ortvalue import OrtValue

    return (
        isinstance(obj, OrtValue)
        or hasattr(type(obj), "__dlpack__")
        or hasattr(obj, "__cuda_array_interface__")
        or is_device_array(obj)
    )


def is_device_value(obj: Any) -> bool:
    """``obj`` lives in CUDA device memory: a device array, an OrtValue on ``cuda``, an object
    with ``__cuda_array_interface__``, or DLPack with a CUDA device. Numpy arrays and CPU
    tensors (DLPack device kDLCPU) are host values."""
    if type(obj) is np.ndarray:
        return False
    from onnxjit.ortvalue import OrtValue

    if isinstance(obj, OrtValue):
        return obj.device_name() == "cuda"
    if is_device_array(obj):
        return True
    # hasattr, not getattr: torch raises AttributeError for a CPU tensor's interface
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    dev = _dlpack_device(obj)
    return dev is not None and dev[0] in _CUDA_DLPACK


def device_id_of(obj: Any) -> int | None:
    """The CUDA device ordinal a device value lives on, when it says so."""
    dev = _dlpack_device(obj)
    if dev is not None and dev[0] in _CUDA_DLPACK:
        return dev[1]
    return None


@contextlib.contextmanager
def on_device(device_id: int) -> Iterator[None]:
    """Make CUDA device ``device_id`` current for allocations and copies inside the block."""
    cuda = _cuda()
    if _simulated():
        if device_id != 0:
            raise ValueError(f"the CUDA simulator has one device (0); device_id {device_id}")
        yield
        return
    with cuda.gpus[device_id]:
        yield


def as_device_array(obj: Any, stream: Any = None) -> Any:
    """``obj`` as a device array: without a copy for a device value (see
    :func:`is_device_value`); a host value (numpy array, CPU tensor, nested lists) is
    copied to the current device on ``stream`` (None: the default stream)."""
    from onnxjit.ortvalue import OrtValue

    if isinstance(obj, OrtValue):
        if obj.device_name() == "cuda":
            return obj._data
        obj = obj._data
    if is_device_array(obj):
        return obj
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cai(obj)
    dev = _dlpack_device(obj)
    if dev is not None and dev[0] in _CUDA_DLPACK:
        return _from_dlpack(obj)
    return to_device(host_array(obj), stream)


def host_array(obj: Any) -> np.ndarray:
    """A host value as a numpy array, without a copy where numpy can read it in place
    (numpy arrays, DLPack CPU tensors, the buffer protocol)."""
    if isinstance(obj, np.ndarray):
        return obj
    dev = _dlpack_device(obj)
    if dev is not None and dev[0] in (KDL_CPU, KDL_CUDA_HOST):
        with contextlib.suppress(Exception):  # e.g. a torch tensor that requires grad
            return np.from_dlpack(obj)
    return np.asarray(obj)


def contiguous(arr: Any) -> np.ndarray:
    """``arr`` as a C-contiguous numpy array, copied only when it is not one (keeping 0-d
    arrays 0-d, which ``np.ascontiguousarray`` does not)."""
    arr = np.asarray(arr)
    return arr if arr.flags.c_contiguous else np.require(arr, requirements="C")


def to_device(arr: np.ndarray, stream: Any = None) -> Any:
    """Copy a numpy array to the current CUDA device on ``stream`` (asynchronous with respect
    to the host when ``stream`` is given and ``arr`` is pinned)."""
    cuda = _cuda()
    arr = contiguous(arr)
    return cuda.to_device(arr, stream=stream if stream is not None else 0)


def to_host(dev: Any, stream: Any = None) -> np.ndarray:
    """Copy a device array to a new numpy array; returns once the copy is done (the stream
    is synchronized)."""
    if stream is None:
        return dev.copy_to_host()
    out = dev.copy_to_host(stream=stream)
    stream.synchronize()
    return out


def to_numpy(obj: Any, stream: Any = None) -> np.ndarray:
    """Any tensor value as a numpy array: device values are copied to the host, host values
    read in place where possible."""
    if type(obj) is np.ndarray:
        return obj
    if is_device_value(obj):
        return to_host(as_device_array(obj), stream)
    from onnxjit.ortvalue import OrtValue

    if isinstance(obj, OrtValue):
        return obj.numpy()
    return host_array(obj)


def cuda_array_interface(dev: Any) -> dict[str, Any]:
    """The ``__cuda_array_interface__`` (version 3) of a device array. Under the simulator the
    pointer is the host address of the simulated memory, which :func:`from_pointer` reads
    back the same way."""
    if not _simulated():
        return dict(dev.__cuda_array_interface__)
    # FakeCUDAArray forwards attribute reads to the numpy array that holds its data
    host = dev.__array_interface__
    return {
        "shape": tuple(host["shape"]),
        "typestr": host["typestr"],
        "data": (host["data"][0], False),
        "strides": host.get("strides"),
        "version": 3,
        "stream": None,
    }


def from_pointer(
    ptr: int,
    shape: Sequence[int],
    dtype: Any,
    strides: Sequence[int] | None = None,
    owner: Any = None,
) -> Any:
    """A device array over existing device memory at ``ptr`` (no copy): ``shape``, numpy
    ``dtype``, byte ``strides`` (None: C-contiguous). ``owner`` is kept alive with it.
    The caller vouches that the memory holds that many bytes on the current device."""
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    if _simulated():
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return FakeCUDAArray(host_view(ptr, shape, dtype, strides, owner))
    cuda = _cuda()
    desc = {
        "shape": shape,
        "typestr": dtype.str,
        "data": (int(ptr), False),
        "strides": None if strides is None else tuple(int(s) for s in strides),
        "version": 3,
    }
    # sync=False: the memory's producer, not a stream named here, orders the work
    dev = cuda.from_cuda_array_interface(desc, owner=owner, sync=False)
    if dev.dtype != dtype:  # ml_dtypes types (bfloat16, float8) travel as raw bytes ("V2")
        dev = dev.view(dtype)
    return dev


class _Interface:
    """Holds a numpy ``__array_interface__`` and the object whose memory it describes."""

    def __init__(self, interface: dict[str, Any], owner: Any) -> None:
        self.__array_interface__ = interface
        self.owner = owner


def host_view(
    ptr: int,
    shape: Sequence[int],
    dtype: Any,
    strides: Sequence[int] | None = None,
    owner: Any = None,
) -> np.ndarray:
    """A numpy array over host memory at ``ptr`` (no copy; byte ``strides``, None for
    C-contiguous), keeping ``owner`` alive: a bound CPU buffer, or the simulator's device
    memory. The caller vouches for the memory."""
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    if int(np.prod(shape)) == 0:
        return np.empty(shape, dtype)
    itemsize = dtype.itemsize
    if strides is None:
        span = int(np.prod(shape)) * itemsize
        strides = tuple(int(np.prod(shape[i + 1 :])) * itemsize for i in range(len(shape)))
    else:
        strides = tuple(int(s) for s in strides)
        if any(s < 0 for s in strides):
            raise ValueError("negative strides are not supported for device buffers")
        span = sum((d - 1) * s for d, s in zip(shape, strides)) + itemsize
    raw = np.asarray(
        _Interface(
            {"shape": (span,), "typestr": "|u1", "data": (int(ptr), False), "version": 3}, owner
        )
    )
    return np.lib.stride_tricks.as_strided(raw[:itemsize].view(dtype), shape, strides)


def _from_cai(obj: Any) -> Any:
    cai = obj.__cuda_array_interface__
    if not _simulated():
        # as_cuda_array waits on the producer's stream (CAI v3 "stream") before returning
        return _cuda().as_cuda_array(obj)
    data = cai["data"]
    return from_pointer(data[0], cai["shape"], np.dtype(cai["typestr"]), cai.get("strides"), obj)


def _from_dlpack(obj: Any) -> Any:
    """A CUDA DLPack producer that has no ``__cuda_array_interface__`` (JAX, for one)."""
    if _simulated():
        raise TypeError(
            f"{type(obj).__name__} holds CUDA memory (DLPack device "
            f"{_dlpack_device(obj)}), which the CUDA simulator cannot read; pass a numpy array"
        )
    from cuda.core.utils import StridedMemoryView

    # stream_ptr=-1: the producer need not order its work on a stream of ours; the run
    # synchronizes before it reads (DLPack's "no synchronization" value)
    view = StridedMemoryView.from_dlpack(obj, stream_ptr=-1)
    dtype = np.dtype(view.dtype)
    strides = None if view.strides is None else [s * dtype.itemsize for s in view.strides]
    with on_device(max(view.device_id, 0)):
        return from_pointer(view.ptr, view.shape, dtype, strides, owner=(obj, view))


def empty_cache() -> int:
    """Give the device memory blocks that onnxjit's caching allocator holds free back to
    the driver (see ``ONNXJIT_CUDA_ALLOCATOR``); return how many bytes that released.
    Blocks in use are untouched: they return to the cache when freed."""
    from onnxjit.kernels.cuda import memory

    released = memory.CACHE.clear()
    if released and not _simulated():
        # numba frees dropped blocks in batches: free them now
        _cuda().current_context().deallocations.clear()
    return released


def cache_stats() -> Any:
    """The caching allocator's counts: ``hits`` (requests served by a cached block),
    ``misses`` (served by the driver) and ``cached_bytes`` (held free now)."""
    from onnxjit.kernels.cuda import memory

    return memory.CACHE.stats
