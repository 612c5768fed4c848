"""onnxjit: an ONNX inference runtime whose kernels are compiled with Numba.

The public API mirrors onnxruntime's so that ``import onnxjit as ort`` mostly works::

    import onnxjit as ort
    sess = ort.InferenceSession("model.onnx")
    outputs = sess.run(None, {"input": x})
"""

# ruff: noqa: E402  (the import clock starts before the package's own imports)
import time as _time

_import_t0 = _time.perf_counter()

import logging as _logging
import operator as _operator
from pathlib import Path as _Path
from typing import Any as _Any

from onnxjit._source_checkout import register_checkout_kernels as _register_checkout_kernels

_checkout_kernels = _register_checkout_kernels(_Path(__file__).resolve().parent)
if _checkout_kernels is not None:
    kernels = _checkout_kernels

from onnxjit import compile_gc as _compile_gc  # noqa: F401  (holds the GC back in compiles)
from onnxjit import config as _config  # noqa: F401  (configures the kernel cache first)
from onnxjit import jitstats as _jitstats

_jitstats.install_cache_hooks()  # before any kernel can load from the cache
from onnxjit import ops as _ops  # noqa: F401  (registers every operator)
from onnxjit.check import DeprecatedOperatorWarning
from onnxjit.errors import (
    ExecutionError,
    ExternalDataError,
    InvalidArgumentError,
    InvalidInputError,
    ModelCheckError,
    ModelLoadError,
    OnnxJitError,
    ResourceLimitError,
    RunTerminatedError,
    UnsupportedOperatorError,
)
from onnxjit.iobinding import IOBinding
from onnxjit.jitstats import compile_count, compile_seconds
from onnxjit.ops.misc import set_seed
from onnxjit.options import (
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    RunOptions,
    SessionOptions,
)
from onnxjit.ortvalue import OrtValue
from onnxjit.session import GraphNode, InferenceSession, ModelMetadata, NodeArg, SemVer

__version__ = "0.1.0"
# How long `import onnxjit` took in this process (reported by the CLI).
IMPORT_SECONDS = _time.perf_counter() - _import_t0


def get_available_providers() -> list[str]:
    """Execution providers that can run here, best first (onnxruntime's function of the same
    name): ``["CUDAExecutionProvider", "CPUExecutionProvider"]`` when numba-cuda is installed
    and a GPU (or numba-cuda's simulator) is usable, else ``["CPUExecutionProvider"]``."""
    from onnxjit.providers import available_providers

    return available_providers()


def get_device() -> str:
    """``"GPU"`` when the CUDA provider can run here, else ``"CPU"`` (as onnxruntime)."""
    return "GPU" if "CUDAExecutionProvider" in get_available_providers() else "CPU"


def get_all_providers() -> list[str]:
    """The execution providers onnxjit implements, in default priority order (onnxruntime's
    function lists those its build knows): ``["CUDAExecutionProvider",
    "CPUExecutionProvider"]``. :func:`get_available_providers` says which can run here."""
    from onnxjit.providers import IMPLEMENTED

    return list(IMPLEMENTED)


def get_version_string() -> str:
    """onnxjit's version (``__version__``), as onnxruntime's function returns its own."""
    return __version__


def get_build_info() -> str:
    """A one-line description of this build (onnxruntime's function of the same name)."""
    import numba

    return f"onnxjit {__version__}, numba {numba.__version__}"


# onnxruntime's logging severities -> the levels of the "onnxjit" logger.
_SEVERITY_LEVELS = (
    _logging.DEBUG,  # 0: verbose
    _logging.INFO,  # 1: info
    _logging.WARNING,  # 2: warning
    _logging.ERROR,  # 3: error
    _logging.CRITICAL,  # 4: fatal
)


def set_default_logger_severity(severity: int) -> None:
    """Set the level of the ``"onnxjit"`` logger from onnxruntime's severity (0 verbose, 1
    info, 2 warning, 3 error, 4 fatal). Anything but an integer raises ``TypeError``, an
    integer outside 0..4 ``RuntimeError``, as in onnxruntime. Python warnings
    (``RuntimeWarning``) are not affected: filter them with :mod:`warnings`."""
    value = _operator.index(severity)
    if not 0 <= value <= 4:
        raise RuntimeError(
            f"Invalid logging severity {value}. 0:Verbose, 1:Info, 2:Warning, 3:Error, 4:Fatal"
        )
    _logging.getLogger("onnxjit").setLevel(_SEVERITY_LEVELS[value])


def set_default_logger_verbosity(verbosity: int) -> None:
    """Accept onnxruntime's verbose-log level (any integer; ``TypeError`` otherwise). onnxjit
    has no levels below DEBUG, so the value has no effect."""
    _operator.index(verbosity)


def disable_telemetry_events() -> None:
    """Does nothing: onnxjit sends no telemetry (onnxruntime's switch, for code calling it)."""


def enable_telemetry_events() -> None:
    """Does nothing: onnxjit sends no telemetry (onnxruntime's switch, for code calling it)."""


def preload_dlls(*args: _Any, **kwargs: _Any) -> None:
    """Does nothing: onnxjit loads no CUDA or cuDNN libraries of its own up front
    (onnxruntime's call, for code written for its GPU packages)."""


__all__ = [
    "InferenceSession",
    "IOBinding",
    "OrtValue",
    "SessionOptions",
    "RunOptions",
    "GraphOptimizationLevel",
    "ExecutionMode",
    "ExecutionOrder",
    "DeprecatedOperatorWarning",
    "NodeArg",
    "GraphNode",
    "compile_count",
    "compile_seconds",
    "ModelMetadata",
    "SemVer",
    "get_available_providers",
    "get_device",
    "get_all_providers",
    "get_version_string",
    "get_build_info",
    "set_seed",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
    "disable_telemetry_events",
    "enable_telemetry_events",
    "preload_dlls",
    "OnnxJitError",
    "ModelLoadError",
    "ExternalDataError",
    "ModelCheckError",
    "UnsupportedOperatorError",
    "InvalidInputError",
    "InvalidArgumentError",
    "ExecutionError",
    "ResourceLimitError",
    "RunTerminatedError",
    "__version__",
]
