"""tensor operators."""

from __future__ import annotations

from onnxjit.registry import onnx_op


@onnx_op("Identity", since=1)
def identity(x):
    return x
