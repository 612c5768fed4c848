"""One thread setting for everything onnxjit runs.

``SessionOptions.intra_op_num_threads`` (as in onnxruntime; 0 = the default,
``ONNXJIT_NUM_THREADS`` or every core the process may use) is the number of threads a run uses:
the calling thread plus workers of onnxjit's pool (:mod:`onnxjit.backends.cpu.pool`), which run the
multi-threaded kernels and split matrix products into tiles. The setting is per calling
thread, so sessions with different settings can run side by side.

BLAS is called single-threaded from those threads: at a session's first run, onnxjit sets the
thread count of every BLAS library loaded in the process to one (through threadpoolctl, which
knows OpenBLAS, MKL and BLIS), and again whenever another is loaded (:func:`blas_ready`, before
a kernel first calls SciPy's), so that BLAS never starts a second pool of busy threads
competing with onnxjit's for the cores. That is process-wide: numpy code outside onnxjit then
runs its BLAS single-threaded too (``threadpoolctl.threadpool_limits`` can raise it again for
a block of code).
"""

from __future__ import annotations

import os
import sys
import threading

from onnxjit import jitstats
from onnxjit.config import SETTINGS

_lock = threading.Lock()
_scanned_at = -1  # jitstats.compile_count() when the BLAS libraries were last set
_SCIPY_BLAS = "scipy.linalg.cython_blas"
_scipy_blas_limited = False  # whether SciPy's BLAS was loaded when they were
_local = threading.local()


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_threads() -> int:
    """The thread count used when the setting is 0: ``ONNXJIT_NUM_THREADS`` (default: every
    core the process may use), at most that many cores."""
    return max(1, min(SETTINGS.num_threads, available_cores()))


def resolve(threads: int) -> int:
    """The thread count a setting stands for: 0 (or less) is the default; more threads than
    cores are cut to the core count (extra threads would only wait for a core)."""
    if threads <= 0:
        return default_threads()
    return max(1, min(int(threads), available_cores()))


_resolved: dict[int, int] = {}  # setting -> thread count (the cores do not change per process)


def apply(threads: int) -> None:
    """Use ``threads`` threads (0 = default) for the calling thread's runs; keep BLAS at one
    thread. Runs before every session run."""
    n = _resolved.get(threads)
    if n is None:
        n = _resolved[threads] = resolve(threads)
    _local.n = n
    # Compiling can load a BLAS library that was not there when the limit was set (Numba's
    # lowering imports SciPy's OpenBLAS), so a compile since the last setting means again;
    # so does SciPy's BLAS appearing by any other route.
    if jitstats.compile_count() != _scanned_at or (
        not _scipy_blas_limited and _SCIPY_BLAS in sys.modules
    ):
        _single_threaded_blas()


def blas_ready() -> None:
    """Load the BLAS library that onnxjit's compiled kernels call (SciPy's, through Numba's
    helper) and hold it at one thread. Operators call this when they choose a kernel path
    that multiplies through BLAS, before the kernel first runs: Numba would otherwise load
    the library inside that run, at its default thread count. Models that never take such a
    path never import SciPy's linear algebra (0.2 s of a warm start on a Zen 3)."""
    if not _scipy_blas_limited:
        import scipy.linalg.cython_blas  # noqa: F401

        _single_threaded_blas()


def current() -> int:
    """The thread count of the calling thread's current run (set by :func:`apply`)."""
    n = getattr(_local, "n", None)
    return default_threads() if n is None else n


def _single_threaded_blas() -> None:
    global _scanned_at, _scipy_blas_limited
    with _lock:
        from threadpoolctl import ThreadpoolController

        _scanned_at = jitstats.compile_count()
        _scipy_blas_limited = _SCIPY_BLAS in sys.modules
        ThreadpoolController().limit(limits=1, user_api="blas")
