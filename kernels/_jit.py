"""The only place that sets Numba options.

Kernel modules decorate with :func:`njit` (serial) or :func:`pjit` (pool kernels, which
onnxjit's thread pool runs on several threads: :mod:`onnxjit.kernels.chunks`).
Every kernel is cached on disk (``cache=True``) under the folder given to :func:`configure`.
Math-heavy kernels pass ``fma=True``: floating-point contraction lets LLVM turn ``a * b + c``
into one fused multiply-add (one rounding instead of two, so at most an ulp from numpy's
result, never further), which shortens the polynomial chains of kernels/vecmath.py by a third.
It is not the default because some kernels round a computed coordinate (Resize, RoiAlign) and
must round exactly as numpy does.
"""

from __future__ import annotations

import os

import numba

PARALLEL_THRESHOLD = 1 << 15

_OPTIONS = dict(cache=True, nogil=True, error_model="numpy")

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


_FMA = {"contract"}


def _options(fma: bool, kw: dict) -> dict:
    opts = {**_OPTIONS, **kw}
    if fma:
        opts["fastmath"] = set(kw.get("fastmath") or ()) | _FMA
    return opts


def njit(fn=None, *, fma: bool = False, **kw):
    """Serial kernel: ``@njit``, ``@njit(inline="always")``, ``@njit(fma=True)``."""
    opts = _options(fma, kw)
    if fn is None:
        return lambda f: numba.njit(**opts)(f)
    return numba.njit(**opts)(fn)


def pjit(fn=None, *, fma: bool = False, **kw):
    """Pool kernel: takes the control array first and claims its chunks
    (:mod:`onnxjit.kernels.chunks`); run it through ``onnxjit.pool.run_parallel``.

    It compiles as a serial, GIL-free function: the threads are onnxjit's pool, not Numba's
    ``parallel=True`` (see :mod:`onnxjit.pool` for why)."""
    return njit(fn, fma=fma, **kw)
