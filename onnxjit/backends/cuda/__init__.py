"""The CUDA backend: kernels from ``kernels/cuda/`` launched through numba-cuda.

It serves the same lowerings as the CPU backend: ``kernel(family, name)`` resolves to
``onnxjit.kernels.cuda.<family>.<name>``, a launcher with the argument list of its CPU twin
that takes device arrays and queues its kernels on the run's stream
(:mod:`onnxjit.kernels.cuda.runtime`). A bound call runs on the device only when its
function is one the backend handed out or a portable one (:meth:`CudaBackend.device_call`);
the plan runs any other node on the CPU, with explicit copies (:mod:`onnxjit.plan`).

numba-cuda is imported on first use, so that ``import onnxjit`` never needs it.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from onnxjit import lowering
from onnxjit.backends import find_kernel
from onnxjit.lowering import Bound


class CudaBackend:
    """Resolves ``kernel(family, name)`` to ``onnxjit.kernels.cuda.<family>.<name>`` and
    moves values between host and device on its stream."""

    name = "cuda"
    #: No thread pool: a launcher covers any amount of work.
    parallel_threshold = 0

    def __init__(self, device_id: int = 0) -> None:
        self.device_id = device_id
        self._kernels: dict[tuple[str, str], Any] = {}
        self._local = threading.local()
        # the functions it handed out (weakly: a plan's generated calls go with the plan)
        self._issued: weakref.WeakSet[Any] = weakref.WeakSet()

    # -- kernels ------------------------------------------------------------------------------
    def kernel(self, family: str, name: str) -> Any:
        key = (family, name)
        found = self._kernels.get(key)
        if found is None:
            found = self._kernels[key] = self._issue(find_kernel("cuda", family, name))
        return found

    def _device_fn(self, fn: Any) -> Any:
        """``fn`` where it takes device arrays (one this backend handed out, a portable one),
        its device form (:func:`onnxjit.lowering.portable`), or None."""
        try:
            if fn in self._issued:
                return fn
        except TypeError:  # not weakly referable: none of the backend's
            pass
        return lowering.device_form(fn)

    def _issue(self, fn: Any) -> Any:
        """Note ``fn`` as a function that takes this backend's arrays (``kernel`` also
        serves a family's constants, which are no functions)."""
        if callable(fn):
            self._issued.add(fn)
        return fn

    def threads(self) -> int:
        return 1

    def launcher(
        self, family: str, name: str, work: int, sample: Sequence[Any], threshold: int | None = None
    ) -> Any:
        """The launcher ``name`` of ``family`` (one for any amount of work)."""
        return self.kernel(family, name)

    def pooled(self, family: str, name: str, sample: Sequence[Any]) -> Any:
        return self.kernel(family, name)

    def run(
        self, family: str, name: str, work: int, *args: Any, threshold: int | None = None
    ) -> None:
        self.kernel(family, name)(*args)

    def blas_ready(self) -> None:
        """Nothing to prepare: the product kernels are the backend's own."""

    def elementwise(
        self,
        exprs: Sequence[Any],
        inputs: Sequence[Any],
        out_dtypes: Sequence[Any] | None = None,
        positions: Sequence[int] | None = None,
    ) -> Any:
        """A bound call of a generated grid-stride kernel computing ``exprs`` (see
        :func:`onnxjit.backends.cuda.elementwise.bind`), or None."""
        try:
            from onnxjit.backends.cuda import elementwise
        except ImportError:  # the generator is not there: the node runs on the CPU
            return None
        bound = elementwise.bind(exprs, inputs, out_dtypes, positions)
        if bound is not None:
            self._issue(bound.fn)
            alt = bound.with_inplace
            if alt is not None:

                def with_inplace(i: int) -> Bound | None:
                    b = alt(i)
                    if b is not None:
                        self._issue(b.fn)
                    return b

                bound = replace(bound, with_inplace=with_inplace)
        return bound

    def device_call(self, bound: Bound, upload: Callable[[np.ndarray], Any]) -> Bound | None:
        """``bound`` as it runs on the device, or None where it cannot: its function must be
        one this backend handed out (a kernel, a generated elementwise call) or a portable
        one (:func:`onnxjit.lowering.portable`), and it must declare its outputs (a device
        value's spec is not observed for free). Host arrays among its arguments become
        ``upload(array)``, their device copies (the caller's, kept as long as its plan),
        except small integer ones (see :data:`HOST_PARAMETER_SIZE` and :func:`_on_device`)."""
        if bound.outs is None:
            return None
        fn = self._device_fn(bound.fn)
        # a function passed along (a wrapper's kernel) must take device arrays too
        if fn is None or any(_function(a) and self._device_fn(a) is not a for a in bound.args):
            return None
        args = tuple(_on_device(a, upload) for a in bound.args)
        alt = bound.with_inplace
        with_inplace = None
        if alt is not None:

            def with_inplace(i: int) -> Bound | None:
                b = alt(i)
                return None if b is None else self.device_call(b, upload)

        return replace(bound, fn=fn, args=args, with_inplace=with_inplace)

    # -- runs ---------------------------------------------------------------------------------
    def running(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on this device, with its launches and copies on the calling thread's
        stream (each thread has its own, so concurrent runs do not wait for each other),
        waiting for that stream before returning: the host outputs are complete."""
        from numba import cuda

        from onnxjit.kernels.cuda import runtime

        with _simulator_turn(), cuda.gpus[self.device_id]:  # this device's memory and work
            s = getattr(self._local, "stream", None)
            if s is None:
                s = self._local.stream = cuda.stream()
            previous = runtime.set_stream(s)
            try:
                return fn(*args)
            finally:
                s.synchronize()
                runtime.set_stream(previous)

    # -- memory -------------------------------------------------------------------------------
    def to_device(self, value: np.ndarray) -> Any:
        """A device copy of host array ``value``, queued on the run's stream."""
        from onnxjit import device
        from onnxjit.kernels.cuda.runtime import stream

        return device.to_device(value, stream())

    def to_host(self, value: Any) -> np.ndarray:
        """A host copy of device array ``value`` (waits for the work queued before it)."""
        from onnxjit.kernels.cuda.runtime import stream

        return value.copy_to_host(stream=stream())

    def empty(self, shape: Sequence[int], dtype: Any) -> Any:
        """An uninitialised device array, from the caching allocator
        (:mod:`onnxjit.kernels.cuda.memory`)."""
        from onnxjit.kernels.cuda import memory
        from onnxjit.kernels.cuda.runtime import stream

        return memory.empty(shape, dtype, stream())


#: Integer arrays of at most this many elements among a bound call's arguments stay on the
#: host: they are geometry (dims, strides, tile tables) that launchers read on the host to
#: size a grid, where a device copy would cost a synchronising read. Larger arrays and
#: floating-point ones (weights, tables the kernels index) go to the device.
HOST_PARAMETER_SIZE = 64


def _on_device(a: Any, upload: Callable[[np.ndarray], Any], nested: bool = False) -> Any:
    """Argument ``a`` of a device-bound call with its host arrays uploaded: every array
    inside a tuple (the kernel reads it there: numba passes no host array in a tuple), and a
    top-level one unless it is a small integer array (geometry the launcher reads)."""
    if isinstance(a, np.ndarray):
        small = a.dtype.kind in "iub" and a.size <= HOST_PARAMETER_SIZE
        return upload(a) if nested or not small else a
    if type(a) is tuple:
        return tuple(_on_device(v, upload, True) for v in a)
    return a


def _function(a: Any) -> bool:
    """Whether argument ``a`` is a function a call makes (not a type such as ``np.float32``)."""
    return callable(a) and not isinstance(a, type)


# numba-cuda's simulator runs one kernel at a time in a process (it refuses a second one
# started while another runs): concurrent runs take turns there.
_SIMULATOR_LOCK = threading.Lock()


def _simulator_turn() -> Any:
    from onnxjit.providers import simulator_enabled

    return _SIMULATOR_LOCK if simulator_enabled() else contextlib.nullcontext()


_BACKENDS: dict[int, CudaBackend] = {}


def backend(device_id: int = 0) -> CudaBackend:
    """The CUDA backend of device ``device_id`` (one per device per process)."""
    found = _BACKENDS.get(device_id)
    if found is None:
        from onnxjit.config import SETTINGS
        from onnxjit.kernels.cuda import memory

        memory.configure(SETTINGS.cuda_allocator)
        found = _BACKENDS[device_id] = CudaBackend(device_id)
    return found
