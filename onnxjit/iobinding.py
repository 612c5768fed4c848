"""``session.io_binding()``: inputs and outputs bound to host or device buffers before a run
(onnxruntime's ``IOBinding``), run with ``session.run_with_iobinding(binding)``.

Bound inputs are fed to the run as they are (numpy arrays, device arrays, OrtValues); each
bound output is placed where it was bound: a new OrtValue on the named device, or copied into
the caller's buffer (``buffer_ptr``) or OrtValue, which keep their addresses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from onnxjit import device
from onnxjit.errors import InvalidInputError
from onnxjit.ortvalue import OrtValue, check_device, dtype_of

if TYPE_CHECKING:
    from onnxjit.session import InferenceSession


@dataclass
class _Output:
    device_type: str
    device_id: int
    target: OrtValue | None  # the caller's buffer, or None: a new value each run


class IOBinding:
    """Inputs and outputs bound for :meth:`InferenceSession.run_with_iobinding`."""

    def __init__(self, session: InferenceSession) -> None:
        self._session = session
        self._inputs: dict[str, Any] = {}
        self._outputs: dict[str, _Output] = {}
        self._results: list[OrtValue] = []

    # -- inputs --------------------------------------------------------------------------------
    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        """Bind a host array (kept by reference: write to it between runs to change the input)."""
        self._inputs[self._input_name(name)] = arr_on_cpu

    def bind_input(
        self,
        name: str,
        device_type: str,
        device_id: int,
        element_type: Any,
        shape: Sequence[int],
        buffer_ptr: int,
    ) -> None:
        """Bind memory at ``buffer_ptr`` on ``device_type`` (``"cpu"`` or ``"cuda"``) holding a
        C-contiguous tensor of ``shape`` and ``element_type`` (a numpy type or an ONNX element
        type number). The memory is read at each run, not copied at bind time."""
        name = self._input_name(name)
        kind = check_device(device_type, device_id)
        dtype = dtype_of(element_type)
        if kind == "cpu":
            self._inputs[name] = device.host_view(buffer_ptr, shape, dtype)
        else:
            with device.on_device(device_id):
                self._inputs[name] = OrtValue(
                    device.from_pointer(buffer_ptr, shape, dtype), "cuda", device_id
                )

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        if not isinstance(ortvalue, OrtValue):
            raise TypeError(f"bind_ortvalue_input takes an onnxjit.OrtValue, found {ortvalue!r}")
        self._inputs[self._input_name(name)] = ortvalue

    def synchronize_inputs(self) -> None:
        """Wait for work queued on bound device inputs (the run waits for them anyway)."""
        self._synchronize(self._inputs.values())

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    # -- outputs -------------------------------------------------------------------------------
    def bind_output(
        self,
        name: str,
        device_type: str = "cpu",
        device_id: int = 0,
        element_type: Any = None,
        shape: Sequence[int] | None = None,
        buffer_ptr: int | None = None,
    ) -> None:
        """Bind an output to a device: without ``buffer_ptr`` each run makes a new value there;
        with it (and ``element_type`` and ``shape``) each run writes into that memory."""
        name = self._output_name(name)
        kind = check_device(device_type, device_id)
        target = None
        if buffer_ptr is not None:
            if element_type is None or shape is None:
                raise ValueError(
                    "`element_type` and `shape` are to be provided if pre-allocated memory is "
                    "provided"
                )
            dtype = dtype_of(element_type)
            if kind == "cpu":
                target = OrtValue(device.host_view(buffer_ptr, shape, dtype), "cpu", 0)
            else:
                with device.on_device(device_id):
                    target = OrtValue(
                        device.from_pointer(buffer_ptr, shape, dtype), kind, device_id
                    )
        self._outputs[name] = _Output(kind, int(device_id), target)

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """Bind an output to an existing OrtValue: each run writes into it."""
        if not isinstance(ortvalue, OrtValue):
            raise TypeError(f"bind_ortvalue_output takes an onnxjit.OrtValue, found {ortvalue!r}")
        name = self._output_name(name)
        self._outputs[name] = _Output(ortvalue.device_name(), ortvalue._device_id, ortvalue)

    def synchronize_outputs(self) -> None:
        """Wait for the outputs of the last run (run_with_iobinding returns with them done)."""
        self._synchronize(self._results)

    def get_outputs(self) -> list[OrtValue]:
        """The outputs of the last run, in the order they were bound, on their bound devices."""
        return list(self._results)

    def get_outputs_as_ortvaluevector(self) -> list[OrtValue]:
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[Any]:
        """The outputs of the last run as numpy arrays (device outputs copied to the host);
        outputs that are not tensors as ``run()`` returns them (lists, dicts, None), as in
        onnxruntime."""
        return [v.numpy() if v.is_tensor() else v._data for v in self._results]

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._results = []

    # -- the run ---------------------------------------------------------------------------------
    def _feed(self) -> dict[str, Any]:
        return {
            k: v._feed_value() if isinstance(v, OrtValue) else v for k, v in self._inputs.items()
        }

    def _output_names(self) -> list[str]:
        if not self._outputs:
            raise InvalidInputError(
                "no output is bound; call bind_output(name) for each output you want"
            )
        return list(self._outputs)

    def _place(self, values: Sequence[Any]) -> None:
        """Put each output of a run where it was bound (``values`` in bound order: numpy or
        device arrays)."""
        results = []
        declared = {v.name: v for v in self._session._outputs}
        for (name, out), value in zip(self._outputs.items(), values):
            if value is None or isinstance(value, (list, tuple, dict)):
                wrapped = OrtValue._wrap(value, declared[name].type)
                if out.target is not None:
                    raise InvalidInputError(
                        f"output {name!r} is a {wrapped.data_type()}, which cannot be written "
                        "into a bound buffer; bind it with bind_output(name) alone"
                    )
                results.append(wrapped)
            elif out.target is not None:
                _copy_into(name, out.target, value)
                results.append(out.target)
            elif out.device_type == "cpu":
                results.append(OrtValue(device.to_numpy(value), "cpu", 0))
            elif device.is_device_value(value):
                results.append(OrtValue(device.as_device_array(value), "cuda", out.device_id))
            else:
                results.append(OrtValue.ortvalue_from_numpy(value, "cuda", out.device_id))
        self._results = results

    def _input_name(self, name: str) -> str:
        known = [v.name for v in self._session.get_inputs()]
        known += [v.name for v in self._session.get_overridable_initializers()]
        if name not in known:
            raise InvalidInputError(
                f"cannot bind input {name!r}: it is not an input of the model; expected one "
                f"of {known}"
            )
        return name

    def _output_name(self, name: str) -> str:
        known = [v.name for v in self._session.get_outputs()]
        if name not in known:
            raise InvalidInputError(
                f"cannot bind output {name!r}: it is not an output of the model; expected one "
                f"of {known}"
            )
        return name

    @staticmethod
    def _synchronize(values: Any) -> None:
        if any(device.is_device_value(v) for v in values):
            from numba import cuda

            cuda.synchronize()


def _copy_into(name: str, target: OrtValue, value: Any) -> None:
    shape = tuple(value.shape)
    if list(shape) != target.shape() or np.dtype(value.dtype) != target._data.dtype:
        raise InvalidInputError(
            f"output {name!r} is bound to a buffer of shape {target.shape()} and dtype "
            f"{target._data.dtype}, but the run produced shape {list(shape)} and dtype "
            f"{np.dtype(value.dtype)}; bind it without a buffer or with matching ones"
        )
    if target.device_name() == "cpu":
        np.copyto(target._data, device.to_numpy(value))
    else:
        target._data.copy_to_device(
            device.as_device_array(value)
            if device.is_device_value(value)
            else device.contiguous(value)
        )
