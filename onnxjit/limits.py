"""Resource limits: how many bytes one tensor, and one run, may allocate.

A hostile or broken model can ask an operator for an output whose size comes from data
(ConstantOfShape of ``[1e6, 1e6]``, an Expand, Tile, Range, Pad, Resize or OneHot with huge
arguments, a sparse initializer with huge dims). Such operators call :func:`check` with the
shape and element type *before* they allocate; it raises :class:`ResourceLimitError` naming the
node, the size and the setting to change when

* one tensor would take more than ``max_tensor_bytes``, or
* the tensors created through :func:`check` during one ``run()`` (subgraph iterations
  included) would add up to more than ``max_run_bytes``, or
* the element count or byte size does not fit in a signed 64-bit integer (overflowing shape
  arithmetic), whatever the caps.

This module only does the arithmetic and reads no setting: :mod:`onnxjit.config` parses the
caps (``ONNXJIT_MAX_TENSOR_BYTES`` / ``ONNXJIT_MAX_RUN_BYTES``, read once at import and
installed here with :func:`install_default`; the session config entries
``onnxjit.max_tensor_bytes`` / ``onnxjit.max_run_bytes`` per session) with :func:`parse_bytes`.
A value is a byte count (``1073741824``), a count with a binary suffix (``512K``, ``64M``,
``4G``, ``1T``), a percentage of the machine's memory (``25%``), or ``0`` for no cap. The
defaults are 25 % (tensor) and 50 % (run) of the physical memory (or of the cgroup's memory
limit when that is smaller).

The run total is kept per thread: :func:`begin_run` starts a new total (``InferenceSession``
calls it when it validates a feed and before its constant folding), so concurrent runs from
several threads each have their own budget.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnxjit.errors import ConfigurationError, ResourceLimitError

INT64_MAX = (1 << 63) - 1

_SUFFIX = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def physical_memory() -> int:
    """Bytes of memory this process may use: physical memory, or the cgroup (v2 or v1) memory
    limit when one is set and smaller; 16 GiB where neither can be read."""
    total = 0
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        total = 0
    for limit_file in (
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ):
        try:
            with open(limit_file) as f:
                raw = f.read().strip()
        except OSError:
            continue
        if raw.isdigit() and 0 < int(raw) < (total or INT64_MAX):
            total = int(raw)
    return total if total > 0 else 16 << 30


def parse_bytes(raw: str, setting: str, memory: int | None = None) -> int:
    """Parse a cap: bytes, ``<n>K/M/G/T`` (binary), ``<p>%`` of ``memory`` (default: the
    machine's, see :func:`physical_memory`), or ``0`` (no cap). Returns the byte count
    (0 = no cap). Raises :class:`ConfigurationError` naming ``setting`` for anything else."""
    text = str(raw).strip().upper().replace("_", "")
    if text.endswith("IB"):
        text = text[:-2]
    elif text.endswith("B") and len(text) > 1 and not text[-2].isdigit():
        text = text[:-1]
    try:
        if text.endswith("%"):
            pct = float(text[:-1])
            if not 0 <= pct <= 100:
                raise ValueError(text)
            base = physical_memory() if memory is None else memory
            return int(base * pct / 100)
        if text and text[-1] in _SUFFIX:
            value = float(text[:-1]) * _SUFFIX[text[-1]]
        else:
            value = int(text)
        if value < 0 or value > INT64_MAX:
            raise ValueError(text)
        return int(value)
    except ValueError:
        raise ConfigurationError(
            f"{setting}={raw!r} is not a byte count; expected bytes (1073741824), a size with "
            "a binary suffix (512M, 4G), a percentage of the machine's memory (25%) or 0 for "
            "no cap"
        ) from None


@dataclass(frozen=True)
class Limits:
    """The caps in force: bytes per tensor and per run (0 = no cap), with the setting each came
    from (named in error messages so that users know what to change)."""

    max_tensor_bytes: int
    max_run_bytes: int
    tensor_setting: str = "the per-tensor cap"
    run_setting: str = "the per-run cap"


class _Budget:
    __slots__ = ("limits", "used")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.used = 0


_local = threading.local()
_default: Limits | None = None


def install_default(limits: Limits) -> None:
    """Make ``limits`` the process-wide caps (:mod:`onnxjit.config` installs the
    environment's at import)."""
    global _default
    _default = limits


def default_limits() -> Limits:
    """The process-wide caps (from the environment, read once by :mod:`onnxjit.config`)."""
    if _default is None:  # pragma: no cover - onnxjit/__init__ imports onnxjit.config first
        raise RuntimeError("onnxjit.config has not installed the process-wide caps yet")
    return _default


def begin_run(limits: Limits) -> None:
    """Start a new run total in this thread, under ``limits``."""
    budget = getattr(_local, "budget", None)
    if budget is not None and budget.limits is limits:
        budget.used = 0  # the thread's last run was under the same caps: reuse its record
    else:
        _local.budget = _Budget(limits)


def current() -> Limits:
    """The caps in force in this thread (the last :func:`begin_run`'s, else the defaults)."""
    budget = getattr(_local, "budget", None)
    return budget.limits if budget is not None else default_limits()


def _where(ctx: Any) -> str:
    if isinstance(ctx, str):
        return ctx
    name = getattr(ctx, "name", "")
    label = getattr(ctx, "label", "")
    where = f"node {name!r}" if name else "node"
    return f"{where} ({label})" if label else where


def human(n: int) -> str:
    """``n`` bytes in a short human form (``1.5 GiB``)."""
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{n} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} bytes"  # pragma: no cover


def element_count(ctx: Any, shape: Sequence[Any], what: str = "output") -> int:
    """The number of elements of ``shape``, computed without overflow; raises
    :class:`ResourceLimitError` when a dimension or the count exceeds int64."""
    dims = [int(d) for d in shape]
    count = math.prod(dims) if dims else 1
    if any(d > INT64_MAX for d in dims) or count > INT64_MAX:
        raise ResourceLimitError(
            f"{_where(ctx)}: the {what} shape {dims} has {count} elements, which overflows a "
            "64-bit integer; the shape arithmetic that produced it is wrong, fix the model's "
            "shape inputs"
        )
    return count


def check(
    ctx: Any, shape: Sequence[Any], dtype: Any, what: str = "output", run: bool = True
) -> int:
    """Account for a tensor of ``shape`` and ``dtype`` about to be allocated by the node of
    ``ctx`` (a NodeContext, or a string naming what allocates); return its byte size.

    Raises :class:`ResourceLimitError` (before anything is allocated) when the element count
    overflows int64, when the tensor exceeds the per-tensor cap, or (``run=True``) when the
    run's total would exceed the per-run cap; ``run=False`` checks a tensor that already
    exists or is counted elsewhere against the per-tensor cap only. Negative dimensions are
    the caller's to refuse first.
    """
    count = element_count(ctx, shape, what)
    itemsize = np.dtype(dtype).itemsize or 1
    size = count * itemsize
    budget = getattr(_local, "budget", None)
    if budget is None:
        budget = _local.budget = _Budget(default_limits())
    limits = budget.limits
    dims = [int(d) for d in shape]
    if size > INT64_MAX:
        raise ResourceLimitError(
            f"{_where(ctx)}: the {what} of shape {dims} ({np.dtype(dtype)}) needs {size} bytes, "
            "which overflows a 64-bit integer; fix the model's shape inputs"
        )
    cap = limits.max_tensor_bytes
    if cap and size > cap:
        raise ResourceLimitError(
            f"{_where(ctx)}: the {what} of shape {dims} ({np.dtype(dtype)}) would take "
            f"{size} bytes ({human(size)}), over the per-tensor cap of {cap} bytes "
            f"({human(cap)}); if the model really needs it, raise {limits.tensor_setting}"
        )
    if not run:
        return size
    cap = limits.max_run_bytes
    if cap and budget.used + size > cap:
        raise ResourceLimitError(
            f"{_where(ctx)}: the {what} of shape {dims} ({np.dtype(dtype)}) would take "
            f"{size} bytes ({human(size)}) after {budget.used} bytes ({human(budget.used)}) "
            f"already created by this run, over the per-run cap of {cap} bytes ({human(cap)}); "
            f"if the model really needs it, raise {limits.run_setting}"
        )
    budget.used += size
    return size
