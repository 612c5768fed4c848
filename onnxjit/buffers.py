"""Output buffers that fast paths reuse from one run to the next.

A fresh NumPy array of 128 KiB or more comes from ``mmap`` and costs a page fault per 4 KiB the
first time it is written (a 132 KiB Concat output took about 20 us on the development VM, most
of it the allocation). A fast path keeps the array it returned last time in a :class:`Slot` and
writes into it again when nothing else refers to it any more: the reference count says so
exactly (CPython; an array viewed by another array is referenced by that view's base). When a
caller still holds an output from an earlier run, or another thread is running the same node,
the count is higher and a new array is made, so no buffer is ever handed out twice.
"""

from __future__ import annotations

import sys

import numpy as np

_getrefcount = sys.getrefcount
_empty = np.empty

# Arrays smaller than this come from NumPy's own cache or the heap without page faults;
# reusing them would only keep memory alive.
MIN_BYTES = 64 << 10


class Slot:
    """One reusable array of a fixed shape and dtype (see the module docstring)."""

    __slots__ = ("buf", "shape", "dtype", "reuse")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.buf: np.ndarray | None = None
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.reuse = int(np.prod(shape)) * self.dtype.itemsize >= MIN_BYTES

    def get(self) -> np.ndarray:
        """An uninitialised array of the slot's shape and dtype that nobody else holds."""
        b = self.buf
        # references: the slot, the local name b, getrefcount's argument
        if b is not None and _getrefcount(b) == 3:
            return b
        b = _empty(self.shape, self.dtype)
        if self.reuse:
            self.buf = b
        return b
