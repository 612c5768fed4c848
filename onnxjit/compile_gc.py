"""Python's cyclic garbage collector held back while kernels compile.

Numba's compiler allocates and drops millions of small objects per kernel (its IR, deep copies
of it for every inlined call, type-inference graphs), many in reference cycles. Under Python's
default thresholds that starts a full collection every few million allocations, and each one
walks every object the process holds, Numba's type system and caches included: on the Zen 3 an
empty-cache start of the BERT-style bench model (T1) spent 2.3 s of its ~19 s in the collector
(14 full collections), the ResNet-18 one (C1) 4.4 s of ~32 (22).

While a compilation runs (Numba's ``numba:compile`` event, fired with its global compiler lock
held) or a session's first run of an input signature compiles what it needs (the pool's C
entry points too, which Numba announces with no event), young collections happen every
10,000 allocations instead of 700 and full ones not at all; the thresholds are put back when
the outermost such section ends, and later collections free what it left.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Iterator

from numba.core import event

# Young collections every 10,000 net allocations, a middle-generation one every 100 of those,
# and no full collection (1000 middle ones: far more than any compilation makes).
COMPILING_THRESHOLDS = (10_000, 100, 1000)

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, ...] | None = None


def _enter() -> None:
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(*COMPILING_THRESHOLDS)
        _depth += 1


def _restore() -> None:
    # The thresholds saved on entry come back, unless whoever set other thresholds meanwhile
    # keeps theirs.
    global _saved
    if _saved is not None and gc.get_threshold() == COMPILING_THRESHOLDS:
        gc.set_threshold(*_saved)
    _saved = None


def _leave() -> None:
    global _depth
    with _lock:
        _depth = max(_depth - 1, 0)
        if _depth == 0:
            _restore()


@contextlib.contextmanager
def held() -> Iterator[None]:
    """The compiling thresholds for the duration (nests; several threads may hold it)."""
    _enter()
    try:
        yield
    finally:
        _leave()


def active() -> bool:
    """Whether the compiling thresholds are in force."""
    return _depth > 0


class _Listener(event.Listener):
    def on_start(self, ev: event.Event) -> None:
        _enter()

    def on_end(self, ev: event.Event) -> None:
        _leave()


def _after_fork_in_child() -> None:
    # A fork while another thread compiled: that compilation does not go on in the child,
    # which gets the caller's thresholds back and a fresh lock.
    global _lock, _depth
    _lock = threading.Lock()
    _depth = 0
    _restore()


event.register("numba:compile", _Listener())
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
