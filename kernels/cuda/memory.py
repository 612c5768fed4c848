"""The caching device allocator of onnxjit's CUDA kernels and plans.

A run allocates device memory for what the plan's arena does not hold (outputs, kernels'
scratch); ``cuMemAlloc`` costs microseconds to milliseconds and ``cuMemFree`` waits for the
device, so a plan run in a loop would spend its time in the driver. :func:`empty` serves
onnxjit's allocations from :class:`BlockCache`: a block freed by a run goes to the next
request of the same rounded size made on the same stream (work queued on one stream runs in
order, so a block freed there can be reused there at once, while another stream could still
be reading it).

Only onnxjit's own allocations go through it: the blocks come from the context's memory
manager (numba's, or the one the user chose with ``NUMBA_CUDA_MEMORY_MANAGER``), and the
process's other numba arrays are left as they are. ``ONNXJIT_CUDA_ALLOCATOR=numba`` turns the
cache off; :func:`onnxjit.device.empty_cache` gives the cached blocks back.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Requests are rounded up to a multiple of this many bytes below :data:`LARGE`, so that
#: nearby sizes share blocks, and to a multiple of :data:`LARGE` above it.
SMALL_ROUND = 512
LARGE = 1 << 20


def rounded(size: int) -> int:
    """The block size a request of ``size`` bytes gets (at least :data:`SMALL_ROUND`)."""
    step = SMALL_ROUND if size < LARGE else LARGE
    return max(step, -(-size // step) * step)


@dataclass
class CacheStats:
    """What the cache has done: requests served from it (``hits``) and by the driver
    (``misses``), and the bytes it holds free now (``cached_bytes``)."""

    hits: int = 0
    misses: int = 0
    cached_bytes: int = 0


class BlockCache:
    """Free device blocks by (stream, rounded size).

    :meth:`take` returns a free block of the size made on the stream, or a new one from
    ``allocate``; :meth:`give` returns a block to the free list of the stream it was taken
    on. Thread-safe (blocks are given back from finalizers, which run on any thread)."""

    def __init__(self) -> None:
        self._free: dict[tuple[Any, int], list[Any]] = {}
        self._lock = threading.Lock()
        self.stats = CacheStats()

    def take(self, size: int, stream: Any, allocate: Callable[[int], Any]) -> tuple[Any, int]:
        """``(block, rounded size)`` for a request of ``size`` bytes on ``stream`` (any
        hashable key of it). Where ``allocate`` fails (the device is full), the cached
        blocks are released and it is tried once more."""
        n = rounded(size)
        key = (stream, n)
        with self._lock:
            free = self._free.get(key)
            if free:
                self.stats.hits += 1
                self.stats.cached_bytes -= n
                return free.pop(), n
            self.stats.misses += 1
        try:
            return allocate(n), n
        except MemoryError:
            if not self.clear():
                raise
            return allocate(n), n

    def give(self, stream: Any, size: int, block: Any) -> None:
        """Return ``block`` of rounded size ``size``, taken on ``stream``, for reuse there."""
        with self._lock:
            self._free.setdefault((stream, size), []).append(block)
            self.stats.cached_bytes += size

    def clear(self) -> int:
        """Drop every free block (their memory goes back to the driver when the allocator
        under the cache frees them); return how many bytes that released."""
        with self._lock:
            released = self.stats.cached_bytes
            self._free.clear()
            self.stats.cached_bytes = 0
        return released


#: The cache of the process; blocks are keyed by context and stream.
CACHE = BlockCache()

#: The allocator :func:`empty` uses: "caching" or "numba" (``ONNXJIT_CUDA_ALLOCATOR``, set by
#: the CUDA backend through :func:`configure`).
_mode = ["caching"]

# The pointers handed out by address, held until their last view is gone: numba's arrays
# hold only weak proxies of the pointer they view, as of those of numba's own manager.
_HELD: dict[int, Any] = {}


def configure(allocator: str) -> None:
    """Choose the allocator of :func:`empty`: "caching" (the default) or "numba"."""
    _mode[0] = allocator


def caching() -> bool:
    """Whether :func:`empty` serves requests from :data:`CACHE`: the caching allocator is
    chosen and the device is real (the simulator's arrays are host memory)."""
    from numba import config as numba_config

    return _mode[0] == "caching" and not numba_config.ENABLE_CUDASIM


def empty(shape: Any, dtype: Any, stream: Any = 0) -> Any:
    """An uninitialised C-contiguous device array of ``shape`` and ``dtype`` for work on
    ``stream``: a cached block where :func:`caching`, else numba's ``device_array``."""
    from numba import cuda

    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(int(d) for d in shape)
    nbytes = math.prod(shape) * dtype.itemsize
    if not nbytes or not caching():
        return cuda.device_array(shape, dtype, stream=stream)
    from numba.cuda.cudadrv import driver as drv
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    ctx = cuda.current_context()
    key = (id(ctx), id(stream) if stream else 0)
    block, n = CACHE.take(nbytes, key, lambda n: _driver_memory(ctx.memalloc, n))
    address = int(block.device_pointer_value or 0)

    def give_back() -> None:
        _HELD.pop(address, None)
        CACHE.give(key, n, block)

    # its reference count reaches zero when the last array viewing it is gone; its finalizer
    # then returns the block to the cache
    mem = drv.AutoFreePointer(weakref.proxy(ctx), block.device_pointer, nbytes, finalizer=give_back)
    _HELD[address] = mem
    strides = tuple(math.prod(shape[i + 1 :]) * dtype.itemsize for i in range(len(shape)))
    return DeviceNDArray(shape, strides, dtype, stream=stream, gpu_data=mem.own())


def _driver_memory(parent: Callable[[int], Any], n: int) -> Any:
    """A block of ``n`` bytes from numba's allocator; MemoryError where the device is full."""
    from numba.cuda.cudadrv.driver import CudaAPIError

    try:
        return parent(n)
    except CudaAPIError as exc:
        if "OUT_OF_MEMORY" in str(exc) or getattr(exc, "code", None) == 2:
            raise MemoryError(str(exc)) from exc
        raise
