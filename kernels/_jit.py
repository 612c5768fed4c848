"""The only place that sets Numba options.

Kernel modules decorate with :func:`njit` (serial) or :func:`pjit` (pool kernels, which
onnxjit's thread pool runs on several threads: :mod:`onnxjit.kernels.cpu.runtime.chunks`).
Every kernel is cached on disk (``cache=True``) under the folder given to :func:`configure`.
Math-heavy kernels pass ``fma=True``: floating-point contraction lets LLVM turn ``a * b + c``
into one fused multiply-add (one rounding instead of two, so at most an ulp from numpy's
result, never further), which shortens the polynomial chains of kernels/vecmath.py by a third.
It is not the default because some kernels round a computed coordinate (Resize, RoiAlign) and
must round exactly as numpy does.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import time
import warnings

import numba
from numba.core.caching import FunctionCache
from numba.core.runtime import rtsys

PARALLEL_THRESHOLD = 1 << 15

_OPTIONS = dict(cache=True, nogil=True, error_model="numpy")

# Statistics hooks (set by onnxjit.jitstats; kernels/ does not import onnxjit):
# ON_LOAD(py_func, signature, seconds) after a kernel is loaded from the on-disk cache,
# ON_CFUNC(py_func, signature, seconds, loaded) after a C callback is compiled or loaded.
# CFUNC_SCOPE() is a context manager around a C callback's compilation.
ON_LOAD = None
ON_CFUNC = None
CFUNC_SCOPE = contextlib.nullcontext

# Set by configure(): whether LLVM was told it may use 512-bit vectors (see _wide_vectors).
WIDE_VECTORS = False


def configure(
    cache_dir: str | None = None,
    parallel_threshold: int | None = None,
    vector_width: str = "native",
) -> None:
    """Set the on-disk cache folder, the parallel threshold and the vector width policy.

    Call before any kernel compiles. ``vector_width`` is ``"auto"`` (512-bit vectors where the
    CPU has AVX-512, see :func:`_wide_vectors`) or ``"native"`` (LLVM's own tuning).
    """
    global PARALLEL_THRESHOLD, WIDE_VECTORS
    if cache_dir:
        os.makedirs(cache_dir, exist_ok=True)
        numba.config.CACHE_DIR = cache_dir
    if parallel_threshold is not None:
        PARALLEL_THRESHOLD = int(parallel_threshold)
    if vector_width == "auto" and not WIDE_VECTORS:
        WIDE_VECTORS = _wide_vectors()


def _wide_vectors() -> bool:
    """Let LLVM vectorise with 512-bit registers on a CPU with AVX-512; True if it now may.

    LLVM's tuning for Intel server cores prefers 256-bit vectors (older parts lowered their
    clock for 512-bit work), which costs the compute-bound kernels much of their speed:
    vecmath chains ran 1.4 to 1.6 times as fast with 16 float32 lanes on this project's
    test machine. Numba reads the feature string once, when its CPU code generator starts,
    and keys its on-disk cache with it, so kernels compiled either way never mix. A feature
    string or CPU name the user gave Numba (NUMBA_CPU_FEATURES, NUMBA_CPU_NAME) is left alone.
    """
    if numba.config.CPU_FEATURES is not None or numba.config.CPU_NAME is not None:
        return False
    from numba.core.codegen import get_host_cpu_features

    # Numba's own query: it honours NUMBA_ENABLE_AVX=0 (no avx* features at all)
    features = get_host_cpu_features().split(",")
    if "+avx512f" not in features or "+avx512vl" not in features:
        return False
    numba.config.CPU_FEATURES = ",".join(features + ["-prefer-256-bit"])
    return True


@functools.cache
def vector_registers() -> int:
    """How many vector registers the compiled kernels have: 16 on x86 without AVX-512 (ymm0 to
    ymm15), 32 with it (and on other targets, such as AArch64's v0 to v31). Read from the
    feature string Numba compiles for (the user's NUMBA_CPU_FEATURES where set)."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686", "x86"):
        return 32
    features = numba.config.CPU_FEATURES
    if features is None:
        from numba.core.codegen import get_host_cpu_features

        features = get_host_cpu_features()
    return 32 if "+avx512f" in features.split(",") else 16


@functools.cache
def cpu_name() -> str:
    """LLVM's name of the CPU the kernels are compiled for ("znver3", "icelake-server", ...):
    the user's NUMBA_CPU_NAME where set (other than "host"), else the host's."""
    name = numba.config.CPU_NAME
    if name and name != "host":
        return name
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_name()


_FMA = {"contract"}


def _options(fma: bool, kw: dict) -> dict:
    opts = {**_OPTIONS, **kw}
    if fma:
        opts["fastmath"] = set(kw.get("fastmath") or ()) | _FMA
    return opts


def njit(fn=None, *, fma: bool = False, **kw):
    """Serial kernel: ``@njit``, ``@njit(inline="always")``, ``@njit(fma=True)``."""
    opts = _options(fma, kw)
    cached = opts.pop("cache", False)
    if fn is None:
        return lambda f: _safe(numba.njit(**opts)(f), cached)
    return _safe(numba.njit(**opts)(fn), cached)


def centry(sig):
    """``@numba.cfunc(sig, cache=True)`` with onnxjit's cache safety (see :class:`_SafeCache`);
    the pool's generated entry points use it."""

    def deco(fn):
        from numba.core import sigutils
        from numba.core.ccallback import CFunc

        res = CFunc(
            fn,
            sigutils.normalize_signature(sig),
            locals={},
            options={"nopython": True, **_OPTIONS_NOCACHE},
        )
        res._cache = _SafeCache(fn)
        res._cache.report_loads = False  # reported below, once, as a C callback
        t0 = time.perf_counter()
        with CFUNC_SCOPE():  # Numba announces no event for a C callback: helpers nest in it
            res.compile()
        if ON_CFUNC is not None:
            ON_CFUNC(fn, res._sig, time.perf_counter() - t0, res.cache_hits > 0)
        return res

    return deco


_OPTIONS_NOCACHE = {k: v for k, v in _OPTIONS.items() if k != "cache"}


class _SafeCache(FunctionCache):
    """Numba's on-disk cache, made to survive damaged entries.

    Numba raises (an unpickling error, a ValueError) when an index or data file is truncated
    or overwritten; here the entry is dropped, a warning names it, and the function compiles
    again (and is saved afresh). A failed save warns and leaves the function compiled in
    memory. Concurrent writers are safe in Numba itself: files are written to a temporary
    name and renamed into place.
    """

    report_loads = True

    def load_overload(self, sig, target_context):
        t0 = time.perf_counter()
        try:
            # Numba's load_overload refreshes the target context first: it imports every
            # lowering registry (numba.np.linalg among them, whose BLAS check imports
            # scipy.linalg: 0.2 s of the 0.29 s on a Zen 3), which loading machine code
            # from disk does not use. The runtime (NRT), which that code calls, is the part
            # it needs. Compiling refreshes the contexts itself (numba's CompilerBase), and
            # parfors' reload hooks, the only ones Numba defines, do not concern kernels
            # compiled without parallel=True.
            rtsys.initialize(target_context)
            data = None  # stays None where the guard swallows an error (as Numba's does)
            with self._guard_against_spurious_io_errors():
                data = self._load_overload(sig, target_context)
        except Exception as exc:
            self._drop(f"could not be read ({type(exc).__name__}: {exc}); compiling it again")
            return None
        if data is not None and ON_LOAD is not None and self.report_loads:
            ON_LOAD(self._py_func, sig, time.perf_counter() - t0)
        return data

    def save_overload(self, sig, data):
        try:
            super().save_overload(sig, data)
        except Exception:
            self._drop("could not be updated; starting it afresh")
            try:
                super().save_overload(sig, data)
            except Exception as exc:
                warnings.warn(
                    f"onnxjit: cannot save the compiled kernel {self._label} to the kernel "
                    f"cache ({type(exc).__name__}: {exc}); it stays compiled in memory",
                    RuntimeWarning,
                    stacklevel=2,
                )

    @property
    def _label(self) -> str:
        return getattr(self._py_func, "__qualname__", "?")

    def _drop(self, why: str) -> None:
        index = getattr(self._cache_file, "_index_path", None)
        warnings.warn(
            f"onnxjit: the kernel cache entry of {self._label} ({index}) {why}",
            RuntimeWarning,
            stacklevel=3,
        )
        if index:
            with contextlib.suppress(OSError):
                os.unlink(index)


class _LazyCache:
    """Stands in for a dispatcher's :class:`_SafeCache` until the dispatcher first uses it.

    Building Numba's cache object finds and creates the cache folder and writes a probe file
    into it (about 0.25 ms); onnxjit defines several hundred kernels and a model uses a few
    dozen, so building them all at import cost a fifth of ``import onnxjit``. The real cache
    is built on first use, from the first kernel load or compile onward.
    """

    __slots__ = ("_py_func", "_real")

    def __init__(self, py_func) -> None:
        self._py_func = py_func
        self._real: _SafeCache | None = None

    def __getattr__(self, name: str):
        if self._real is None:
            self._real = _SafeCache(self._py_func)
        return getattr(self._real, name)


def _safe(disp, cached: bool = True):
    """Give a dispatcher the damage-tolerant on-disk cache, built lazily (``cached=False``:
    leave it uncached)."""
    if cached:
        disp._cache = _LazyCache(disp.py_func)
    return disp


def pjit(fn=None, *, fma: bool = False, **kw):
    """Pool kernel: takes the control array first and claims its chunks
    (:mod:`onnxjit.kernels.cpu.runtime.chunks`); run it through
    ``onnxjit.backends.cpu.pool.run_parallel``.

    It compiles as a serial, GIL-free function: the threads are onnxjit's pool, not Numba's
    ``parallel=True`` (see :mod:`onnxjit.backends.cpu.pool` for why)."""
    return njit(fn, fma=fma, **kw)
