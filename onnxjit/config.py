"""Every ``ONNXJIT_*`` environment variable, read in one place.

``ONNXJIT_CACHE_DIR``   folder for compiled kernels and generated kernel sources
                        (default: ``$XDG_CACHE_HOME/onnxjit`` or ``~/.cache/onnxjit``; the
                        kernels go to a subfolder named by their sources, see
                        :mod:`onnxjit.jitcache`).
``ONNXJIT_NUM_THREADS`` default thread count for Numba kernels and BLAS (default: all cores).
``ONNXJIT_PARALLEL_THRESHOLD`` element count above which kernels run multi-threaded.
``ONNXJIT_VECTOR_WIDTH`` ``auto`` (default: 512-bit vectors on CPUs with AVX-512) or
                        ``native`` (LLVM's tuning, which prefers 256-bit vectors there).
``ONNXJIT_MAX_TENSOR_BYTES`` cap on the bytes of one tensor whose size comes from data
                        (default ``25%`` of memory; ``0`` = no cap; see :mod:`onnxjit.limits`).
``ONNXJIT_MAX_RUN_BYTES`` cap on the bytes such tensors add up to in one run (default ``50%``).
``ONNXJIT_PROGRESS``    compile progress bar: ``auto`` (default: on a terminal or in Jupyter),
                        ``on`` or ``off`` (see :mod:`onnxjit.progress`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from onnxjit import limits as _limits


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "onnxjit"


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer; set it to a whole number") from None


@dataclass(frozen=True)
class Settings:
    cache_dir: Path
    num_threads: int
    parallel_threshold: int
    vector_width: str
    limits: _limits.Limits
    progress: str


_VECTOR_WIDTHS = ("auto", "native")


def _choice_env(name: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name) or choices[0]
    if raw not in choices:
        raise ValueError(f"{name}={raw!r} is not one of {', '.join(choices)}; unset it or pick one")
    return raw


def read_settings() -> Settings:
    """Read the environment once; called at import time of :mod:`onnxjit`."""
    cache = os.environ.get("ONNXJIT_CACHE_DIR")
    return Settings(
        cache_dir=Path(cache).expanduser() if cache else _default_cache_dir(),
        num_threads=_int_env("ONNXJIT_NUM_THREADS", os.cpu_count() or 1),
        parallel_threshold=_int_env("ONNXJIT_PARALLEL_THRESHOLD", 1 << 15),
        vector_width=_choice_env("ONNXJIT_VECTOR_WIDTH", _VECTOR_WIDTHS),
        limits=_limits.from_environment(),
        progress=os.environ.get("ONNXJIT_PROGRESS") or "auto",
    )


SETTINGS = read_settings()


def _configure_kernels() -> None:
    # Numba reads its cache folder when a cached function is decorated, so this must run
    # before any kernel module is imported.
    from onnxjit import jitcache
    from onnxjit.kernels import _jit

    _jit.configure(
        cache_dir=str(jitcache.cache_folder(SETTINGS.cache_dir) / "numba"),
        parallel_threshold=SETTINGS.parallel_threshold,
        vector_width=SETTINGS.vector_width,
    )


_configure_kernels()
