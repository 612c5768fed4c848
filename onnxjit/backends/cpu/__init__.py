"""The CPU backend: Numba kernels from ``kernels/cpu/``, run by onnxjit's own thread pool."""

from __future__ import annotations

import importlib
from typing import Any


class CpuBackend:
    """Resolves ``kernel(family, name)`` to ``onnxjit.kernels.cpu.<family>.<name>``."""

    name = "cpu"

    def __init__(self) -> None:
        self._kernels: dict[tuple[str, str], Any] = {}

    def kernel(self, family: str, name: str) -> Any:
        key = (family, name)
        found = self._kernels.get(key)
        if found is None:
            try:
                module = importlib.import_module(f"onnxjit.kernels.cpu.{family}")
                found = getattr(module, name)
            except (ImportError, AttributeError):
                raise KeyError(f"the CPU backend has no kernel {name!r} in family {family!r}")
            self._kernels[key] = found
        return found


#: The CPU backend (one per process: it holds no per-session state).
CPU = CpuBackend()
