"""What every CUDA launcher shares: the stream it launches on and its grid sizes.

The CUDA backend runs a plan's kernels on one stream per run (set here by the backend around a
run); a launcher in ``kernels/cuda/<family>.py`` takes the stream from :func:`stream` and
never synchronizes, so the launches of one run queue up behind each other on the device.
"""

from __future__ import annotations

import threading
from typing import Any

#: Threads per block of the one-dimensional launches (a multiple of the warp size that keeps
#: several blocks resident per multiprocessor).
BLOCK = 256

#: Upper bound of blocks of a grid-stride launch: enough to fill any current GPU several
#: times over; larger work loops inside the kernel.
MAX_BLOCKS = 65535

_local = threading.local()


def stream() -> Any:
    """The stream the calling thread's launches go to: the run's, else 0, which every
    numba-cuda call (launches, copies, allocations) takes as the default stream (the
    simulator has no stream objects to offer instead)."""
    s = getattr(_local, "stream", None)
    return s if s is not None else 0


def set_stream(s: Any) -> Any:
    """Make ``s`` the calling thread's stream (None: the default stream); return the
    previous one, for the caller to restore."""
    prev = getattr(_local, "stream", None)
    _local.stream = s
    return prev


def blocks(n: int, block: int = BLOCK) -> int:
    """Blocks of ``block`` threads for a grid-stride loop over ``n`` items (at least one)."""
    return max(1, min(MAX_BLOCKS, (n + block - 1) // block))
