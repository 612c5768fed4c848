"""The only place that sets Numba options.

Kernel modules decorate with :func:`njit` (serial) or :func:`pjit` (parallel, ``prange``).
Every kernel is cached on disk (``cache=True``) under the folder given to :func:`configure`.
Math-heavy kernels pass ``fma=True``: floating-point contraction lets LLVM turn ``a * b + c``
into one fused multiply-add (one rounding instead of two, so at most an ulp from numpy's
result, never further), which shortens the polynomial chains of kernels/vecmath.py by a third.
It is not the default because some kernels round a computed coordinate (Resize, RoiAlign) and
must round exactly as numpy does.
"""

from __future__ import annotations

import os
import threading

import numba

PARALLEL_THRESHOLD = 1 << 20

# Numba's default threading layers abort when two Python threads enter parallel regions at
# once; parallel kernels are therefore entered under this lock (see run_parallel).
PARALLEL_LOCK = threading.RLock()

_OPTIONS = dict(cache=True, nogil=True, error_model="numpy")

# Numba's own "workqueue" threading layer unless the user chose one (NUMBA_THREADING_LAYER).
# Its workers sleep between parallel regions; OpenMP's spin for a while after each region and,
# on a machine with few cores, take the cores BLAS threads (and the next kernel) need: a BERT
# block at 2 threads ran 5x slower with the OpenMP layer. Workqueue cannot host two parallel
# regions at once, which PARALLEL_LOCK already rules out.
if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"


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


def _options(fma: bool, kw: dict, parallel: bool = False) -> dict:
    opts = {**_OPTIONS, **kw}
    if parallel:
        opts["parallel"] = True
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
    """Parallel kernel (uses ``numba.prange``); call it through :func:`run_parallel`."""
    opts = _options(fma, kw, parallel=True)
    if fn is None:
        return lambda f: numba.njit(**opts)(f)
    return numba.njit(**opts)(fn)


def run_parallel(kernel, *args):
    """Call a parallel kernel with the process-wide parallel lock held."""
    with PARALLEL_LOCK:
        return kernel(*args)
