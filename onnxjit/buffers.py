"""Intermediate buffers: reused from one node to the next by lifetime, and from run to run.

A fresh NumPy array of 128 KiB or more comes from ``mmap`` and costs a page fault per 4 KiB the
first time it is written (a 132 KiB Concat output took about 20 us on the development VM, most
of it the allocation), and every distinct intermediate a run keeps alive is memory the caches
have to hold. So each session owns a :class:`Pool` of dead buffers:

* when the executor drops a value after its last reader (``onnxjit.plan``), :meth:`Pool.give`
  takes the array that owns its memory into the pool, but only when the reference counts say
  nothing else can reach it: no later node, no caller, no cache and no view (a view holds its
  base). CPython's counts are exact, so a buffer is never handed out twice;
* when a node needs an output, :func:`empty` (or :meth:`Slot.get`) hands out a pooled buffer
  of the same byte size before it asks NumPy for a new one. A node thus writes into the
  buffer of a value that died a few nodes earlier, which is still in cache;
* the outputs of the last run come back into the pool at the next run once the caller has
  dropped them; a fast path whose output leaves the graph keeps its own buffer instead
  (:class:`Slot` made with no pool current, see ``onnxjit.plan._call_impl``), which gives the
  same reuse without the pool's bookkeeping.

With a fixed input signature the order of gives and takes is the same in every run, so after
the first run each node writes into the same buffers every time and nothing is allocated: the
pool is the signature's buffer assignment, found by the run itself rather than computed ahead
(an op's output may be a view of its input, or a donated input, which only the run knows).
A run with new shapes takes what fits and allocates the rest; buffers of sizes no run has asked
for in a while are dropped (:meth:`Pool.forget_idle`), and the pool never holds more than its
byte limit.

Arrays under :data:`MIN_BYTES` are left to NumPy's own small-block cache.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np

_getrefcount = sys.getrefcount
_empty = np.empty
_ndarray = np.ndarray
_u8 = np.dtype(np.uint8)

# Arrays smaller than this come from NumPy's own cache or the heap without page faults;
# pooling them would cost more than it saves.
MIN_BYTES = 64 << 10

# A byte size that no run has asked for during this many runs is dropped from the pool.
IDLE_RUNS = 8


class _Size:
    """The pool's record of one byte size."""

    __slots__ = ("stack", "run", "asked", "most")

    def __init__(self, run: int) -> None:
        self.stack: list[np.ndarray] = []  # free buffers of this size
        self.run = run  # the last run that asked for one
        self.asked = 0  # buffers asked for in that run
        self.most = 0  # the most any run asked for


class Pool:
    """Dead buffers of one session, by byte size (see the module docstring).

    The pool keeps no more buffers of a size than one run asked for (a node whose output is
    not drawn from the pool, a NumPy or Numba allocation, would otherwise add one every run),
    and at most ``limit`` bytes in all. Thread-safe: list pops and appends are atomic, and a
    buffer is only taken in once the reference counts prove no thread can reach it.
    """

    def __init__(self, limit: int) -> None:
        self.sizes: dict[int, _Size] = {}
        self.runs = 0
        self.limit = limit
        self.held = 0  # bytes in the pool (approximate under concurrent runs; forget_idle
        # recounts it)
        self.reused = 0  # buffers handed out from the pool
        self.allocated = 0  # buffers of MIN_BYTES or more that had to be allocated

    def take(self, shape: tuple[int, ...], dtype: np.dtype, nbytes: int) -> np.ndarray:
        """An uninitialised C-contiguous array of ``shape`` and ``dtype`` (``nbytes`` bytes),
        pooled when one of that size is free, else new."""
        z = self.sizes.get(nbytes)
        if z is None:
            z = self.sizes.setdefault(nbytes, _Size(self.runs))
        if z.run != self.runs:
            z.run = self.runs
            z.asked = 0
        z.asked += 1
        if z.asked > z.most:
            z.most = z.asked
        if z.stack:
            try:
                root = z.stack.pop()
            except IndexError:  # another thread took the last one
                root = None
            if root is not None:
                self.held -= nbytes
                self.reused += 1
                if root.shape == shape and root.dtype == dtype:
                    return root
                # a flat byte view first: any C-contiguous root can be re-typed that way
                return root.reshape(-1).view(_u8).view(dtype).reshape(shape)
        self.allocated += 1
        return _empty(shape, dtype)

    def give(self, a: Any, held: int) -> None:
        """Take the memory of ``a`` into the pool if nothing but the caller's ``held``
        references can reach it; otherwise do nothing."""
        if type(a) is not _ndarray:
            return
        # references: the caller's, this frame's parameter, getrefcount's argument
        if _getrefcount(a) > held + 2:
            return
        root = a.base
        if root is None:
            root = a
        # a view (numpy points .base at the array that owns the memory): the root may be
        # taken when only this view holds it (a.base, the name root, getrefcount's argument)
        elif type(root) is not _ndarray or root.base is not None or _getrefcount(root) > 3:
            return
        n = root.nbytes
        z = self.sizes.get(n)
        if z is None or len(z.stack) >= z.most or self.held + n > self.limit:
            return
        if not root.flags.carray or not root.flags.owndata:
            return
        z.stack.append(root)
        self.held += n

    def end_run(self) -> None:
        """Count a run; every :data:`IDLE_RUNS` runs, :meth:`forget_idle`."""
        self.runs += 1
        if not self.runs % IDLE_RUNS:
            self.forget_idle()

    def forget_idle(self) -> None:
        """Forget the byte sizes no run asked for in the last :data:`IDLE_RUNS` runs (their
        buffers are freed) and recount the bytes held."""
        oldest = self.runs - IDLE_RUNS
        for n, z in list(self.sizes.items()):
            if z.run < oldest:
                self.sizes.pop(n, None)
        self.held = sum(n * len(z.stack) for n, z in list(self.sizes.items()))

    def clear(self) -> None:
        """Free every pooled buffer (the sizes asked for are remembered)."""
        for z in list(self.sizes.values()):
            z.stack.clear()
        self.held = 0

    def stats(self) -> dict[str, int]:
        """Buffers reused and allocated so far, and the buffers and bytes held now."""
        return {
            "reused": self.reused,
            "allocated": self.allocated,
            "pooled": sum(len(z.stack) for z in list(self.sizes.values())),
            "pooled_bytes": self.held,
        }


# Per thread: ``pool``, the pool of the session whose run is on this thread.
LOCAL = threading.local()


def current() -> Pool | None:
    """The pool of the session running on this thread (None outside a session's run)."""
    return getattr(LOCAL, "pool", None)


def recycling() -> Pool | None:
    """The pool the executor offers dead values to in this run: the current one, unless no
    node has asked it for a buffer yet (it would take none back: every size it keeps is one
    some run asked for)."""
    pool = getattr(LOCAL, "pool", None)
    return pool if pool is not None and pool.sizes else None


def activate(pool: Pool | None) -> Pool | None:
    """Make ``pool`` this thread's current pool; returns the previous one for :func:`restore`."""
    prev = getattr(LOCAL, "pool", None)
    LOCAL.pool = pool
    return prev


def restore(prev: Pool | None) -> None:
    LOCAL.pool = prev


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``np.empty(shape, dtype)`` for a node's output: from the running session's pool when
    the array is large enough to be pooled (see the module docstring)."""
    pool = getattr(LOCAL, "pool", None)
    if pool is None:
        return _empty(shape, dtype)
    dtype = np.dtype(dtype)
    n = dtype.itemsize
    for d in shape:
        n *= d
    if n < MIN_BYTES:
        return _empty(shape, dtype)
    return pool.take(tuple(shape), dtype, n)


class Slot:
    """Where a fast path gets the output array of one fixed shape and dtype.

    Inside a session's run (a pool is current when the slot is made) it draws from the pool.
    Without one, or for ``scratch`` (an array the fast path uses and drops within the call,
    which would leave the pool at every call), it keeps the array it returned last time and
    hands it out again once nothing else refers to it (the reference count says so exactly;
    a view holds its base)."""

    __slots__ = ("buf", "shape", "dtype", "nbytes", "reuse", "pool")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, scratch: bool = False) -> None:
        self.buf: np.ndarray | None = None
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(shape)) * self.dtype.itemsize
        self.reuse = self.nbytes >= MIN_BYTES
        self.pool = current() if self.reuse and not scratch else None

    def get(self) -> np.ndarray:
        """An uninitialised array of the slot's shape and dtype that nobody else holds."""
        pool = self.pool
        if pool is not None:
            return pool.take(self.shape, self.dtype, self.nbytes)
        b = self.buf
        # references: the slot, the local name b, getrefcount's argument
        if b is not None and _getrefcount(b) == 3:
            return b
        b = _empty(self.shape, self.dtype)
        if self.reuse:
            self.buf = b
        return b
