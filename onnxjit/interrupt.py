"""Stopping a run from another thread: ``RunOptions.terminate``.

A run records its :class:`~onnxjit.options.RunOptions` for its thread when it starts
(:func:`begin`); :func:`check` raises :class:`~onnxjit.errors.RunTerminatedError` once another
thread has set ``terminate`` on them. Runs check at their start and before every iteration of
a subgraph (each Loop and Scan iteration, each If branch), which is where a valid model can
run for an unbounded time; the nodes of a graph between two such points run to their end.
"""

from __future__ import annotations

import threading
from typing import Any

from onnxjit.errors import RunTerminatedError

_local = threading.local()


def begin(run_options: Any) -> None:
    """Make ``run_options`` (or None) those of the run starting in this thread."""
    _local.options = run_options


def check() -> None:
    """Raise RunTerminatedError where this thread's run was told to stop."""
    options = getattr(_local, "options", None)
    if options is not None and options.terminate:
        raise RunTerminatedError(
            "Exiting due to terminate flag being set to true: RunOptions.terminate was set "
            "while the run was going; set it back to False to run again"
        )
