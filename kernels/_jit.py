"""The only place that sets Numba options.

Kernel modules decorate with :func:`njit` (serial) or :func:`pjit` (parallel, ``prange``).
Every kernel is cached on disk (``cache=True``) under the folder given to :func:`configure`.
"""

from __future__ import annotations

import os
import threading

import numba

PARALLEL_THRESHOLD = 1 << 20

# Numba's default threading layers abort when two Python threads enter parallel regions at
# once; parallel kernels are therefore entered under this lock (see run_parallel).
PARALLEL_LOCK = threading.RLock()

_OPTIONS = dict(cache=True, nogil=True, error_model="numpy")

# Numba's own "workqueue" threading layer unless the user chose one (NUMBA_THREADING_LAYER).
# Its workers sleep between parallel regions; OpenMP's spin for a while after each region and,
# on a machine with few cores, take the cores BLAS threads (and the next kernel) need: a BERT
# block at 2 threads ran 5x slower with the OpenMP layer. Workqueue cannot host two parallel
# regions at once, which PARALLEL_LOCK already rules out.
if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"


def configure(cache_dir: str | None = None, parallel_threshold: int | None = None) -> None:
    """Set the on-disk cache folder and the parallel threshold (call before kernels import)."""
    global PARALLEL_THRESHOLD
    if cache_dir:
        os.makedirs(cache_dir, exist_ok=True)
        numba.config.CACHE_DIR = cache_dir
    if parallel_threshold is not None:
        PARALLEL_THRESHOLD = int(parallel_threshold)


def njit(fn=None, **kw):
    """Serial kernel: ``@njit`` or ``@njit(inline="always")``."""
    opts = {**_OPTIONS, **kw}
    if fn is None:
        return lambda f: numba.njit(**opts)(f)
    return numba.njit(**opts)(fn)


def pjit(fn=None, **kw):
    """Parallel kernel (uses ``numba.prange``); call it through :func:`run_parallel`."""
    opts = {**_OPTIONS, "parallel": True, **kw}
    if fn is None:
        return lambda f: numba.njit(**opts)(f)
    return numba.njit(**opts)(fn)


def run_parallel(kernel, *args):
    """Call a parallel kernel with the process-wide parallel lock held."""
    with PARALLEL_LOCK:
        return kernel(*args)
