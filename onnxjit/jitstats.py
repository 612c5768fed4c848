"""Counts of Numba compilations in this process, for statistics and no-recompile checks.

Numba announces every real compilation (a cache miss: not a load from its on-disk cache) with
the ``numba:compile`` event; a listener installed when onnxjit is imported counts them and
their wall time. Nested compilations (a kernel compiling a helper it calls) are counted
individually, and their time is included in the outermost one's.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from numba.core import event

_lock = threading.Lock()
_local = threading.local()


@dataclass
class _Totals:
    compiles: int = 0
    seconds: float = 0.0


_totals = _Totals()


class _CompileListener(event.Listener):
    def on_start(self, ev: event.Event) -> None:
        depth = getattr(_local, "depth", 0)
        if depth == 0:
            _local.t0 = time.perf_counter()
        _local.depth = depth + 1

    def on_end(self, ev: event.Event) -> None:
        _local.depth -= 1
        with _lock:
            _totals.compiles += 1
            if _local.depth == 0:
                _totals.seconds += time.perf_counter() - _local.t0


_listener = _CompileListener()
event.register("numba:compile", _listener)


def compile_count() -> int:
    """How many functions Numba has compiled (not loaded from cache) in this process."""
    return _totals.compiles


def compile_seconds() -> float:
    """Wall seconds spent in (outermost) Numba compilations in this process."""
    return _totals.seconds
