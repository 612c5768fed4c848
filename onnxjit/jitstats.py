"""Where start-up time goes: the kernels Numba compiled or loaded from its cache, and for whom.

Numba announces every real compilation (a cache miss) with the ``numba:compile`` event; a
listener installed when onnxjit is imported counts them and their wall time. Loads from the
on-disk cache are not announced, so onnxjit's cache class reports them through
``onnxjit.kernels._jit.ON_LOAD``, and the pool's generated entry points (C callbacks, which
Numba compiles without events) through ``ON_CFUNC``.

Nested compilations (a kernel compiling a helper it calls) count individually in
:func:`compile_count`, and their time is included in the outermost one's; a kernel record
(:class:`KernelRecord`) is kept for each outermost compilation and each load.

A record is charged to the session on whose behalf it happened, and to the node being planned
then: the session names its record list for the duration of its set-up and runs
(:func:`charge_to`), and the planner the node it is planning (:func:`planning`), both in
thread-local state, so that the (rare, slow) compile event finds them. Nothing is added to the
run path of a known signature but two thread-local assignments per run.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from numba.core import event

_lock = threading.Lock()
_local = threading.local()


@dataclass
class _Totals:
    compiles: int = 0
    seconds: float = 0.0
    loads: int = 0
    load_seconds: float = 0.0


_totals = _Totals()


@dataclass
class KernelRecord:
    """One kernel brought into memory: compiled (``origin == "compiled"``) or loaded from the
    on-disk cache (``"loaded"``)."""

    name: str
    source: str
    signature: str
    origin: str
    seconds: float
    node: str | None = None  # the node whose first run needed it (None: session set-up)
    program: Any = None  # the plan it ran in, for call counts
    runs_before: int = 0  # runs of that plan before the one that needed it


def _function_info(py_func: Any) -> tuple[str, str]:
    code = getattr(py_func, "__code__", None)
    name = getattr(py_func, "__qualname__", None) or getattr(py_func, "__name__", "?")
    module = getattr(py_func, "__module__", "") or ""
    return f"{module}.{name}" if module else name, code.co_filename if code else "?"


def charge_to(records: list[KernelRecord] | None) -> list[KernelRecord] | None:
    """Charge kernels compiled or loaded on this thread from now on to ``records`` (a
    session's list; None: to nobody); returns the previous list, for restoring it."""
    previous = getattr(_local, "records", None)
    _local.records = records
    return previous


@contextlib.contextmanager
def planning(program: Any, node: Any) -> Iterator[None]:
    """Charge kernels brought in while ``node`` of ``program`` is planned to that node."""
    outer = getattr(_local, "planning", None)
    _local.planning = (program, node)
    try:
        yield
    finally:
        _local.planning = outer


def _record(rec: KernelRecord) -> None:
    where = getattr(_local, "planning", None)
    if where is not None:
        program, node = where
        rec.node = node.describe()
        rec.program = program
        rec.runs_before = max(getattr(program, "runs", 1) - 1, 0)
    sink = getattr(_local, "records", None)
    if sink is not None:
        sink.append(rec)


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
        if _local.depth:
            return
        seconds = time.perf_counter() - _local.t0
        with _lock:
            _totals.seconds += seconds
        data = ev.data or {}
        disp = data.get("dispatcher")
        name, source = _function_info(getattr(disp, "py_func", None))
        _record(KernelRecord(name, source, str(data.get("args", "")), "compiled", seconds))


def _on_load(py_func: Any, sig: Any, seconds: float) -> None:
    if getattr(_local, "depth", 0):
        return  # a helper loaded while compiling its caller: part of that compile
    with _lock:
        _totals.loads += 1
        _totals.load_seconds += seconds
    name, source = _function_info(py_func)
    _record(KernelRecord(name, source, str(sig), "loaded", seconds))


@contextlib.contextmanager
def _cfunc_scope() -> Iterator[None]:
    """Compilations inside a C callback's are nested in it (Numba announces none for it)."""
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1


def _on_cfunc(py_func: Any, sig: Any, seconds: float, loaded: bool) -> None:
    if loaded:
        _on_load(py_func, sig, seconds)
        return
    with _lock:
        _totals.compiles += 1
        _totals.seconds += seconds
    name, source = _function_info(py_func)
    _record(KernelRecord(name, source, str(sig), "compiled", seconds))


_listener = _CompileListener()
event.register("numba:compile", _listener)


def install_cache_hooks() -> None:
    """Have the kernel cache report loads and C-callback builds here (called at import)."""
    from onnxjit.kernels import _jit

    _jit.ON_LOAD = _on_load
    _jit.ON_CFUNC = _on_cfunc
    _jit.CFUNC_SCOPE = _cfunc_scope


def compile_count() -> int:
    """How many functions Numba has compiled (not loaded from cache) in this process."""
    return _totals.compiles


def compile_seconds() -> float:
    """Wall seconds spent in (outermost) Numba compilations in this process."""
    return _totals.seconds


def load_count() -> int:
    """How many kernels were loaded from the on-disk cache in this process."""
    return _totals.loads


def summarize(records: list[KernelRecord]) -> dict[str, Any]:
    """The kernel part of ``InferenceSession.stats()`` for a session's records."""
    kernels = []
    for r in records:
        calls = None
        if r.program is not None:
            calls = max(getattr(r.program, "runs", 0) - r.runs_before, 0)
        kernels.append(
            {
                "name": r.name,
                "source": r.source,
                "signature": r.signature,
                "origin": r.origin,
                "seconds": r.seconds,
                "node": r.node,
                "calls": calls,
            }
        )
    compiled = [r for r in records if r.origin == "compiled"]
    loaded = [r for r in records if r.origin == "loaded"]
    return {
        "kernels_compiled": len(compiled),
        "kernels_loaded": len(loaded),
        "compile_seconds": sum(r.seconds for r in compiled),
        "load_seconds": sum(r.seconds for r in loaded),
        "kernels": kernels,
    }
