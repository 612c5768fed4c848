"""Small helpers to build benchmark models with ``onnx.helper`` (no downloads, fixed seeds)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: IR version written into every benchmark model (onnxruntime 1.31 reads it; opset 17..21 ok).
IR_VERSION = 9

Dim = int | str | None


def tensor_type(dtype: np.dtype | type) -> int:
    """ONNX element type of a numpy dtype."""
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def value_info(name: str, dtype: np.dtype | type, shape: Sequence[Dim]) -> onnx.ValueInfoProto:
    """A tensor ValueInfo; string dims are symbolic (dynamic), None unknown."""
    return helper.make_tensor_value_info(name, tensor_type(dtype), list(shape))


def const(name: str, value: np.ndarray | float | int, dtype: type = np.float32) -> onnx.TensorProto:
    """An initializer from a numpy array or a Python scalar (0-d tensor of ``dtype``)."""
    arr = np.asarray(value, dtype=dtype if np.isscalar(value) else None)
    return numpy_helper.from_array(arr, name)


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Sequence[onnx.TensorProto] = (),
    *,
    opset: int = 17,
    ml_opset: int | None = None,
    name: str = "bench",
) -> onnx.ModelProto:
    """A checked model with the default domain at ``opset`` (and ai.onnx.ml when given)."""
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    opsets = [helper.make_opsetid("", opset)]
    if ml_opset is not None:
        opsets.append(helper.make_opsetid("ai.onnx.ml", ml_opset))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="onnxjit-bench")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


class NodeBuilder:
    """Accumulates nodes and initializers; ``op(...)`` returns the (first) output name."""

    def __init__(self, prefix: str = "n") -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count = 0
        self._prefix = prefix

    def fresh(self, stem: str = "t") -> str:
        self._count += 1
        return f"{stem}{self._count}"

    def const(self, value: np.ndarray | float | int, dtype: type = np.float32) -> str:
        name = self.fresh("c")
        self.inits.append(const(name, value, dtype))
        return name

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs) -> str:
        name = out or self.fresh(op_type.lower())
        self.nodes.append(
            helper.make_node(op_type, list(inputs), [name], name=self.fresh(self._prefix), **attrs)
        )
        return name


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


__all__ = [
    "IR_VERSION",
    "NodeBuilder",
    "TensorProto",
    "const",
    "make_model",
    "rng",
    "tensor_type",
    "value_info",
]
