"""The CPU backend: Numba kernels from ``kernels/cpu/``, run by onnxjit's own thread pool."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from onnxjit.kernels import _jit


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
                raise KeyError(
                    f"the CPU backend has no kernel {name!r} in family {family!r}"
                ) from None
            self._kernels[key] = found
        return found

    def launcher(self, family: str, name: str, work: int, sample: Sequence[Any]) -> Any:
        """Kernel ``name`` of ``family`` for ``work`` elements of work: the serial kernel, or
        from ``PARALLEL_THRESHOLD`` on its pool twin ``name_par`` bound to the thread pool
        for arguments typed like ``sample`` (arrays of the call's dtypes and ranks, and its
        scalars), at the calling thread's thread count."""
        if work < _jit.PARALLEL_THRESHOLD:
            return self.kernel(family, name)
        from onnxjit.backends.cpu import pool, threads

        return pool.bind(self.kernel(family, f"{name}_par"), tuple(sample), threads.current())

    def run(self, family: str, name: str, work: int, *args: Any) -> None:
        """Call kernel ``name`` of ``family`` on ``args`` now: serially, or from
        ``PARALLEL_THRESHOLD`` elements of work on, its pool twin ``name_par`` on the thread
        pool (what an implementation does where no plan bound the call)."""
        if work < _jit.PARALLEL_THRESHOLD:
            self.kernel(family, name)(*args)
            return
        from onnxjit.backends.cpu.pool import run_parallel

        run_parallel(self.kernel(family, f"{name}_par"), *args)

    def elementwise(
        self,
        exprs: Sequence[Any],
        inputs: Sequence[Any],
        out_dtypes: Sequence[Any] | None = None,
        positions: Sequence[int] | None = None,
    ) -> Any:
        """A bound call of the generated loop nest computing ``exprs`` (scalar expressions of
        :mod:`onnxjit.codegen.expr`) over broadcast inputs of specs ``inputs``, or None (see
        :func:`onnxjit.backends.cpu.elementwise.bind`)."""
        from onnxjit.backends.cpu import elementwise

        return elementwise.bind(exprs, inputs, out_dtypes, positions)


#: The CPU backend (one per process: it holds no per-session state).
CPU = CpuBackend()
