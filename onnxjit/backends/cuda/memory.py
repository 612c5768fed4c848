"""The caching device allocator of the CUDA backend.

A run allocates device memory for what the plan's arena does not hold (outputs, kernels'
scratch); ``cuMemAlloc`` costs microseconds to milliseconds and ``cuMemFree`` waits for the
device, so a plan run in a loop would spend its time in the driver. Blocks freed by a run are
kept in :class:`BlockCache` and handed to the next request of the same rounded size made on
the same stream: work queued on one stream runs in order, so a block freed there can be
reused there at once, while another stream could still be reading it.

The cache plugs into numba-cuda as an External Memory Management plugin
(:func:`install`, numba's documented interface), so every numba device array of the process
allocates through it, onnxjit's and the caller's alike; ``ONNXJIT_CUDA_ALLOCATOR=numba``
keeps numba's own allocator, and a manager chosen with ``NUMBA_CUDA_MEMORY_MANAGER`` (RMM,
for one) is never replaced. :func:`onnxjit.device.empty_cache` gives the cached blocks back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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


#: The cache of the process (numba's memory managers are per context; the blocks are keyed
#: by stream, and a stream belongs to one context).
CACHE = BlockCache()

_INSTALLED: list[bool] = []


def install(allocator: str) -> bool:
    """Make numba-cuda allocate device memory through :data:`CACHE` (``allocator``:
    "caching", else nothing is done). Only before the process's first CUDA context exists
    (numba gives each context the manager set when it is made) and only where no other
    manager was chosen with ``NUMBA_CUDA_MEMORY_MANAGER``. Returns whether the cache is in
    use; never under the simulator, whose arrays are host memory."""
    if _INSTALLED:
        return _INSTALLED[0]
    from numba import config

    ok = False
    if allocator == "caching" and not config.ENABLE_CUDASIM:
        from numba.cuda.cudadrv import driver as drv

        # numba sets its module's manager when it makes the first context: unset, no
        # context exists yet and nobody chose another manager
        if config.CUDA_MEMORY_MANAGER == "default" and drv._memory_manager is None:
            drv.set_memory_manager(_manager_class())
            ok = True
    _INSTALLED.append(ok)
    return ok


def _manager_class() -> type:
    """numba's own manager with its allocation served from :data:`CACHE`."""
    import weakref

    from numba.cuda.cudadrv import driver as drv

    from onnxjit.kernels.cuda.runtime import stream as current_stream

    class CachingMemoryManager(drv.NumbaCUDAMemoryManager):
        """numba's manager, its blocks reused through :data:`CACHE` (see the module)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # the pointers handed out, held until their last view is gone (numba's arrays
            # hold only weak proxies of them, as of the pointers of numba's own manager)
            self._held: dict[int, Any] = {}

        def memalloc(self, size: int) -> Any:
            parent = super().memalloc
            s = current_stream()
            key = id(s) if s else 0
            block, n = CACHE.take(size, key, lambda n: _driver_memory(parent, n))
            address = int(block.device_pointer_value or 0)
            held = self._held

            def give_back() -> None:
                held.pop(address, None)
                CACHE.give(key, n, block)

            # its reference count reaches zero when the last array viewing it is gone; its
            # finalizer then returns the block to the cache
            mem = drv.AutoFreePointer(
                weakref.proxy(self.context), block.device_pointer, size, finalizer=give_back
            )
            held[address] = mem
            return mem.own()

        def reset(self) -> None:
            CACHE.clear()
            super().reset()

    return CachingMemoryManager


def _driver_memory(parent: Callable[[int], Any], n: int) -> Any:
    """A block of ``n`` bytes from numba's allocator; MemoryError where the device is full."""
    from numba.cuda.cudadrv.driver import CudaAPIError

    try:
        return parent(n)
    except CudaAPIError as exc:
        if "OUT_OF_MEMORY" in str(exc) or getattr(exc, "code", None) == 2:
            raise MemoryError(str(exc)) from exc
        raise
