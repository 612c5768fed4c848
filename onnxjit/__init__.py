"""onnxjit: an ONNX inference runtime whose kernels are compiled with Numba.

The public API mirrors onnxruntime's so that ``import onnxjit as ort`` mostly works::

    import onnxjit as ort
    sess = ort.InferenceSession("model.onnx")
    outputs = sess.run(None, {"input": x})
"""

# ruff: noqa: E402  (the import clock starts before the package's own imports)
import time as _time

_import_t0 = _time.perf_counter()

from pathlib import Path as _Path

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
    UnsupportedOperatorError,
)
from onnxjit.iobinding import IOBinding
from onnxjit.jitstats import compile_count, compile_seconds
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
    "OnnxJitError",
    "ModelLoadError",
    "ExternalDataError",
    "ModelCheckError",
    "UnsupportedOperatorError",
    "InvalidInputError",
    "InvalidArgumentError",
    "ExecutionError",
    "ResourceLimitError",
    "__version__",
]
