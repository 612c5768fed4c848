"""A progress bar for long first runs (kernels compiling).

The first run of a new input signature compiles the kernels its nodes need (or loads them from
the cache). When that has taken more than :data:`DELAY` seconds, a tqdm bar appears showing the
nodes done out of the total and the kernels compiled so far; it closes when the run ends. tqdm's
``auto`` front end draws a widget in Jupyter and text on a terminal.

Whether it is shown: ``ONNXJIT_PROGRESS`` or the session config entry ``onnxjit.progress``
(parsed by :mod:`onnxjit.config`), ``"auto"`` (default: only when standard error is a terminal
or the code runs in a Jupyter kernel), ``"1"``/``"on"`` (always) or ``"0"``/``"off"`` (never).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from onnxjit import jitstats

DELAY = 2.0  # seconds of compiling before the bar appears


def _interactive() -> bool:
    if "ipykernel" in sys.modules:
        return True
    stream = sys.stderr
    return bool(stream is not None and hasattr(stream, "isatty") and stream.isatty())


class CompileProgress:
    """Called after each node of a first run (``step(i)``); draws the bar once compiling has
    taken longer than ``delay``. ``close()`` removes it."""

    def __init__(self, total: int, desc: str, delay: float | None = None) -> None:
        self.total = total
        self.desc = desc
        self.delay = DELAY if delay is None else delay
        self.t0 = time.perf_counter()
        self.compiles0 = jitstats.compile_count()
        self.bar: Any = None

    def __call__(self, done: int) -> None:
        if self.bar is None:
            if time.perf_counter() - self.t0 < self.delay:
                return
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, desc=self.desc, unit="node", leave=False)
        self.bar.n = done
        self.bar.set_postfix_str(
            f"{jitstats.compile_count() - self.compiles0} kernels compiled", refresh=False
        )
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def for_first_run(setting: bool | None, total: int, desc: str) -> CompileProgress | None:
    """A progress reporter for a first run, or None when the bar must stay hidden."""
    if setting is False or (setting is None and not _interactive()):
        return None
    return CompileProgress(total, desc)
