"""The onnxjit error hierarchy.

Every class also derives from the standard exception a caller would catch for that kind of
problem (``ValueError``, ``NotImplementedError``, ``RuntimeError``), so ordinary ``except``
clauses keep working. Messages name the thing (node, operator as ``Name-version``, input), say
what was expected and what was found, and give one fix.
"""

from __future__ import annotations


class OnnxJitError(Exception):
    """Base class of every error onnxjit raises on purpose."""


class ModelLoadError(OnnxJitError, ValueError):
    """The model file or bytes could not be read or decoded."""


class ExternalDataError(ModelLoadError):
    """An external-data reference is unsafe, missing or inconsistent."""


class ModelCheckError(OnnxJitError, ValueError):
    """The model breaks one or more rules of the ONNX IR spec.

    ``problems`` holds every problem found, one message each; ``str(err)`` lists them all.
    """

    def __init__(self, problems: list[str], what: str = "model") -> None:
        self.problems = list(problems)
        head = f"the {what} is not valid ONNX ({len(self.problems)} problem"
        head += "s):" if len(self.problems) != 1 else "):"
        super().__init__("\n  - ".join([head, *self.problems]))


class UnsupportedOperatorError(OnnxJitError, NotImplementedError):
    """An operator (or a version, attribute value or type of it) has no implementation."""


class InvalidInputError(OnnxJitError, ValueError):
    """A feed passed to ``run()`` does not match the model's declared inputs."""


class InvalidArgumentError(OnnxJitError, ValueError):
    """A node received values that its operator does not accept (shapes, indices, ranks)."""


class ExecutionError(OnnxJitError, RuntimeError):
    """A node failed while running; the message names the node and operator."""


class RunTerminatedError(OnnxJitError, RuntimeError):
    """A run stopped because its ``RunOptions.terminate`` was set (see onnxjit.interrupt);
    the session stays usable."""


class ResourceLimitError(OnnxJitError, MemoryError):
    """A tensor or a run would allocate more than the configured cap (see onnxjit.limits).

    Raised before the allocation; the message names the node, the size and the setting to
    change (``ONNXJIT_MAX_TENSOR_BYTES`` / ``ONNXJIT_MAX_RUN_BYTES`` or the session config
    entries ``onnxjit.max_tensor_bytes`` / ``onnxjit.max_run_bytes``).
    """


class ConfigurationError(OnnxJitError, ValueError):
    """An ``ONNXJIT_*`` variable or a session config entry holds a value onnxjit cannot use."""
