"""The CUDA backend's caching allocator: block reuse by stream and size, release on demand.

Oracle: the contract written in onnxjit.kernels.cuda.memory (a freed block of a size goes to
the next request of that rounded size on the same stream, never to another stream); the
allocations are counted by the test's own allocator. Serving numba arrays from cached blocks
needs a GPU (the simulator's arrays are host memory): bench/NOTES.md lists the device check.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import threading  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from onnxjit import config  # noqa: E402
from onnxjit.errors import ConfigurationError  # noqa: E402
from onnxjit.kernels.cuda import memory  # noqa: E402


class Driver:
    """Stands in for the device: hands out numbered blocks, may be full."""

    def __init__(self, capacity=None):
        self.made = []
        self.capacity = capacity
        self.lock = threading.Lock()

    def __call__(self, n):
        with self.lock:
            if self.capacity is not None and sum(self.made) + n > self.capacity:
                raise MemoryError("out of memory")
            self.made.append(n)
            return ("block", len(self.made), n)


@pytest.mark.parametrize(
    "size, want",
    [(0, 512), (1, 512), (512, 512), (513, 1024), ((1 << 20) - 1, 1 << 20),
     (1 << 20, 1 << 20), ((1 << 20) + 1, 2 << 20)],
)  # fmt: skip
def test_sizes_are_rounded(size, want):
    cache, drv = memory.BlockCache(), Driver()
    _, n = cache.take(size, 0, drv)
    assert n == want and drv.made == [want]


def test_a_freed_block_serves_the_next_request_of_its_size_on_its_stream():
    cache, drv = memory.BlockCache(), Driver()
    a, n = cache.take(1000, "s1", drv)
    cache.give("s1", n, a)
    assert cache.stats.cached_bytes == 1024
    b, _ = cache.take(900, "s1", drv)  # rounds to the same 1024
    assert b is a and len(drv.made) == 1
    assert (cache.stats.hits, cache.stats.misses, cache.stats.cached_bytes) == (1, 1, 0)


def test_a_block_freed_on_one_stream_is_not_given_to_another():
    # another stream could still be reading it: its work is not ordered after the free
    cache, drv = memory.BlockCache(), Driver()
    a, n = cache.take(100, "s1", drv)
    cache.give("s1", n, a)
    b, _ = cache.take(100, "s2", drv)
    assert b is not a and len(drv.made) == 2
    c, _ = cache.take(5000, "s1", drv)  # another size on the first stream
    assert c is not a and len(drv.made) == 3


def test_a_full_device_gets_the_cached_blocks_back_then_retries():
    cache, drv = memory.BlockCache(), Driver()
    a, n = cache.take(3000, 0, drv)
    cache.give(0, n, a)
    seen = []

    def full_once(n):
        seen.append(cache.stats.cached_bytes)  # what the cache held at each attempt
        if len(seen) == 1:
            raise MemoryError("out of memory")
        return drv(n)

    b, _ = cache.take(4000, 0, full_once)  # another size: the cached 3072 must go first
    assert b != a and seen == [3072, 0]
    with pytest.raises(MemoryError):  # nothing cached left to release: the error stands

        def full(n):
            raise MemoryError("out of memory")

        cache.take(4096, 0, full)


def test_clear_releases_what_is_cached():
    cache, drv = memory.BlockCache(), Driver()
    blocks = [cache.take(s, 0, drv) for s in (10, 10, 2_000_000)]
    for b, n in blocks:
        cache.give(0, n, b)
    assert cache.clear() == 512 * 2 + (2 << 20)
    assert cache.stats.cached_bytes == 0
    cache.take(10, 0, drv)
    assert len(drv.made) == 4  # nothing left to reuse


def test_threads_taking_and_giving_never_share_a_block():
    cache, drv = memory.BlockCache(), Driver()
    held, errors = set(), []
    lock = threading.Lock()

    def work(stream):
        for _ in range(300):
            b, n = cache.take(700, stream, drv)
            with lock:
                if b in held:
                    errors.append(b)
                held.add(b)
            with lock:
                held.discard(b)
            cache.give(stream, n, b)

    threads = [threading.Thread(target=work, args=(i % 2,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cache.stats.hits + cache.stats.misses == 1200
    assert len(drv.made) <= 4  # at most one block per thread in flight


def test_the_allocator_setting_is_validated():
    assert config.read_settings({}).cuda_allocator == "caching"
    assert config.read_settings({"ONNXJIT_CUDA_ALLOCATOR": "numba"}).cuda_allocator == "numba"
    with pytest.raises(ConfigurationError, match="ONNXJIT_CUDA_ALLOCATOR='pool'"):
        config.read_settings({"ONNXJIT_CUDA_ALLOCATOR": "pool"})


def test_the_simulator_allocates_as_numba_does():
    # the simulator's arrays are host memory: empty() gives numba's, and caches nothing
    assert not memory.caching()
    before = (memory.CACHE.stats.hits, memory.CACHE.stats.misses)
    a = memory.empty((3, 4), "float32")
    assert a.shape == (3, 4) and a.dtype == "float32"
    a.copy_to_device(np.arange(12, dtype=np.float32).reshape(3, 4))
    np.testing.assert_array_equal(a.copy_to_host(), np.arange(12).reshape(3, 4))
    assert (memory.CACHE.stats.hits, memory.CACHE.stats.misses) == before
