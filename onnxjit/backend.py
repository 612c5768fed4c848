"""``onnx.backend.base.Backend`` adapter, so onnx's backend test suite can drive onnxjit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from onnxjit.session import InferenceSession


class OnnxJitRep(BackendRep):
    """A prepared model: ``run(inputs)`` takes inputs positionally (or a dict) -> list."""

    def __init__(self, session: InferenceSession) -> None:
        self.session = session
        self._names = [i.name for i in session.get_inputs()]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        if isinstance(inputs, dict):
            feed = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feed = dict(zip(self._names, inputs))
        return tuple(self.session.run(None, feed))


class OnnxJitBackend(Backend):
    """onnxjit as an onnx backend (CPU)."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> OnnxJitRep:
        super().prepare(model, device, **kwargs)
        return OnnxJitRep(InferenceSession(model))

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Sequence[np.ndarray],
        device: str = "CPU",
        outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
        **kwargs: Any,
    ) -> tuple[Any, ...]:
        from onnxjit import types

        graph_inputs = [
            onnx.helper.make_tensor_value_info(
                name, types.onnx_elem_type(np.asarray(x).dtype), np.asarray(x).shape
            )
            for name, x in zip([n for n in node.input if n], inputs)
        ]
        graph_outputs = [
            onnx.helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None)
            for name in node.output
            if name
        ]
        graph = onnx.helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        model = onnx.helper.make_model(
            graph, opset_imports=[onnx.helper.make_opsetid(node.domain, opset)]
        )
        # The main graph must declare typed, ranked outputs: take them from shape inference.
        inferred = onnx.shape_inference.infer_shapes(model)
        known = {v.name: v for v in inferred.graph.value_info}
        for out in model.graph.output:
            if out.name in known:
                out.type.CopyFrom(known[out.name].type)
        return cls.run_model(model, list(inputs), device)


prepare = OnnxJitBackend.prepare
run_model = OnnxJitBackend.run_model
run_node = OnnxJitBackend.run_node
supports_device = OnnxJitBackend.supports_device
