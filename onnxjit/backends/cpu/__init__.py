"""The CPU backend: Numba kernels from ``kernels/cpu/``, run by onnxjit's own thread pool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onnxjit.backends import find_kernel
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
            found = self._kernels[key] = find_kernel("cpu", family, name)
        return found

    @property
    def parallel_threshold(self) -> int:
        """Elements of work from which :meth:`launcher` and :meth:`run` use the pool."""
        return _jit.PARALLEL_THRESHOLD

    def threads(self) -> int:
        """The calling thread's thread count (its session's ``intra_op_num_threads``)."""
        from onnxjit.backends.cpu import threads

        return threads.current()

    def launcher(
        self, family: str, name: str, work: int, sample: Sequence[Any], threshold: int | None = None
    ) -> Any:
        """Kernel ``name`` of ``family`` for ``work`` elements of work: the serial kernel, or
        from ``threshold`` (default ``PARALLEL_THRESHOLD``) on, with more than one thread,
        its pool twin ``name_par`` bound to the thread pool for arguments typed like
        ``sample`` (arrays of the call's dtypes and ranks, and its scalars), at the calling
        thread's thread count."""
        limit = _jit.PARALLEL_THRESHOLD if threshold is None else threshold
        if work < limit or self.threads() <= 1:
            return self.kernel(family, name)
        return self.pooled(family, name, sample)

    def pooled(self, family: str, name: str, sample: Sequence[Any]) -> Any:
        """The pool twin ``name_par`` of kernel ``name`` of ``family`` bound to the thread
        pool for arguments typed like ``sample``, at the calling thread's thread count
        (called without the pool's control argument)."""
        from onnxjit.backends.cpu import pool

        return pool.bind(self.twin(family, name), tuple(sample), self.threads())

    def twin(self, family: str, name: str) -> Any:
        """The pool twin of kernel ``name`` of ``family``: ``name_par``, or ``name_parallel``
        where a family names its twins so (resize, vision)."""
        try:
            return self.kernel(family, f"{name}_par")
        except KeyError:
            return self.kernel(family, f"{name}_parallel")

    def run(
        self, family: str, name: str, work: int, *args: Any, threshold: int | None = None
    ) -> None:
        """Call kernel ``name`` of ``family`` on ``args`` now: serially, or from ``threshold``
        (default ``PARALLEL_THRESHOLD``) elements of work on, with more than one thread, its
        pool twin ``name_par`` on the thread pool (what an implementation does where no plan
        bound the call)."""
        limit = _jit.PARALLEL_THRESHOLD if threshold is None else threshold
        if work < limit or self.threads() <= 1:
            self.kernel(family, name)(*args)
            return
        from onnxjit.backends.cpu.pool import run_parallel

        run_parallel(self.twin(family, name), *args)

    def blas_ready(self) -> None:
        """Load the BLAS library the kernels call and hold it at one thread, before a kernel
        that multiplies through it first runs (:func:`onnxjit.backends.cpu.threads.blas_ready`)."""
        from onnxjit.backends.cpu import threads

        threads.blas_ready()

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
