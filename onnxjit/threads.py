"""One thread setting for everything onnxjit runs: Numba's parallel kernels and BLAS.

``SessionOptions.intra_op_num_threads`` (as in onnxruntime; 0 = the default,
``ONNXJIT_NUM_THREADS`` or every core)
sets, when a session runs, Numba's thread count for the calling thread (``numba.set_num_threads``,
which Numba keeps per thread) and the BLAS library's thread count (through threadpoolctl, which
knows OpenBLAS, MKL and BLIS; BLAS has one process-wide pool, so sessions with different
settings take turns setting it). Parallel Numba kernels run only above a size threshold
(``ONNXJIT_PARALLEL_THRESHOLD`` elements, see :mod:`onnxjit.config`) and never call BLAS
inside their parallel loops, so the two pools are never active at once.
"""

from __future__ import annotations

import os
import threading

import numba
import numpy as np

from onnxjit import jitstats
from onnxjit.config import SETTINGS

_lock = threading.Lock()
_blas_threads: int | None = None  # last value set, or None while untouched
_controller = None
_scanned_at = -1  # jitstats.compile_count() when the BLAS libraries were last listed
_numpy_blas = None  # threadpoolctl's controller of numpy's BLAS; False when there is none


def default_threads() -> int:
    """The thread count used when the setting is 0: ``ONNXJIT_NUM_THREADS`` (default: all
    cores), at most Numba's pool size."""
    return max(1, min(SETTINGS.num_threads, int(numba.config.NUMBA_NUM_THREADS)))


_resolved: dict[int, int] = {}  # setting -> thread count (both inputs are fixed per process)


def apply(threads: int) -> None:
    """Use ``threads`` threads (0 = default) for this thread's Numba kernels and for BLAS.

    Runs before every session run: the thread count is resolved once per setting, and BLAS is
    set only when the count changes or a compile may have loaded another BLAS library.
    """
    n = _resolved.get(threads)
    if n is None:
        n = _resolved[threads] = (
            default_threads()
            if threads <= 0
            else min(int(threads), int(numba.config.NUMBA_NUM_THREADS))
        )
    if numba.get_num_threads() != n:
        numba.set_num_threads(n)
    # Compiling can load a BLAS library that was not there when the limit was set (Numba's
    # np.dot lowering loads scipy's OpenBLAS), so a compile since the last listing means rescan.
    _set_blas(n, rescan=jitstats.compile_count() != _scanned_at)


def _set_blas(n: int, rescan: bool) -> None:
    global _blas_threads, _controller, _scanned_at
    if _blas_threads == n and not rescan:
        return
    with _lock:
        if _controller is None or rescan:
            from threadpoolctl import ThreadpoolController

            _scanned_at = jitstats.compile_count()
            _controller = ThreadpoolController()
        _controller.limit(limits=n, user_api="blas")
        _blas_threads = n


def blas_threads() -> int | None:
    """The BLAS thread count onnxjit last set (None before any run)."""
    return _blas_threads


def numpy_blas():
    """threadpoolctl's controllers of the BLAS library numpy calls (False when none), with
    ``set_num_threads``.

    Other BLAS copies may be loaded too (scipy's, which Numba's np.dot lowering loads), so
    the one shipped inside numpy's install is preferred; without one (numpy linked to a system
    or conda BLAS) every BLAS library is switched.
    """
    global _numpy_blas
    if _numpy_blas is None:
        try:
            from threadpoolctl import ThreadpoolController

            libs = ThreadpoolController().select(user_api="blas").lib_controllers
            home = os.path.dirname(os.path.realpath(np.__file__))
            own = [c for c in libs if os.path.realpath(c.filepath).startswith(home)]
            _numpy_blas = _Controllers(own or libs) if libs else False
        except Exception:  # pragma: no cover - threadpoolctl missing or unusable
            _numpy_blas = False
    return _numpy_blas


class _Controllers:
    """Several threadpoolctl library controllers set together."""

    def __init__(self, libs: list) -> None:
        self.libs = libs

    def set_num_threads(self, n: int) -> None:
        for lib in self.libs:
            lib.set_num_threads(n)
