"""Execution backends: each resolves kernels by family and name and owns their runtime.

A lowering (:mod:`onnxjit.lowering`) never imports a backend's kernels: it asks the backend it
lowers for, ``backend.kernel("norm", "standardize_rows")``, and the backend answers with its
kernel of that name (``kernels/<backend>/<family>.py``). The CPU backend
(:mod:`onnxjit.backends.cpu`) owns the thread pool and the thread setting its kernels run
with; a CUDA backend would own its streams and device allocator, and serve the same lowerings
with its twins of the same names.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any, Protocol


class Backend(Protocol):
    """What the plan and the lowerings ask of a backend."""

    #: The backend's name ("cpu").
    name: str

    def kernel(self, family: str, name: str) -> Any:
        """The kernel ``name`` of ``family``; KeyError naming both when it has none."""
        ...

    #: Elements of work from which :meth:`launcher` and :meth:`run` use the backend's
    #: threads by default.
    parallel_threshold: int

    def threads(self) -> int:
        """How many threads the calling thread's runs use."""
        ...

    def launcher(
        self, family: str, name: str, work: int, sample: Sequence[Any], threshold: int | None = None
    ) -> Any:
        """The call of kernel ``name`` of ``family`` for ``work`` elements of work, bound for
        arguments typed like ``sample`` (serial, or on the backend's threads from
        ``threshold``, by default :attr:`parallel_threshold`)."""
        ...

    def pooled(self, family: str, name: str, sample: Sequence[Any]) -> Any:
        """The call of kernel ``name`` of ``family`` on the backend's threads, bound for
        arguments typed like ``sample`` (for callers that choose the threads themselves)."""
        ...

    def run(
        self, family: str, name: str, work: int, *args: Any, threshold: int | None = None
    ) -> None:
        """Call kernel ``name`` of ``family`` on ``args`` now, as :meth:`launcher` would."""
        ...

    def blas_ready(self) -> None:
        """Prepare the BLAS library that the backend's product kernels call."""
        ...

    def elementwise(
        self,
        exprs: Sequence[Any],
        inputs: Sequence[Any],
        out_dtypes: Sequence[Any] | None = None,
        positions: Sequence[int] | None = None,
    ) -> Any:
        """A bound call computing scalar expressions over broadcast inputs of these specs (a
        kernel generated for them; ``positions[k]``: the node input that expression input k
        reads, by default k), or None where the backend cannot."""
        ...


def find_kernel(backend: str, family: str, name: str) -> Any:
    """``onnxjit.kernels.<backend>.<family>.<name>``; KeyError naming the backend, the family
    and the name when there is none (the backends' :meth:`Backend.kernel`)."""
    try:
        module = importlib.import_module(f"onnxjit.kernels.{backend}.{family}")
        return getattr(module, name)
    except (ImportError, AttributeError):
        raise KeyError(
            f"the {backend.upper()} backend has no kernel {name!r} in family {family!r}"
        ) from None


def default() -> Backend:
    """The backend that code running outside a plan (an implementation called directly)
    uses: the CPU backend, the only one yet."""
    from onnxjit.backends.cpu import CPU

    return CPU
