"""SessionOptions and RunOptions with onnxruntime's field names.

Fields onnxjit implements behave as in onnxruntime. A field it does not implement may still be
set to onnxruntime's default value (so code that spells out defaults keeps working); any other
value raises ``NotImplementedError`` naming the field, so nothing is silently ignored.
"""

from __future__ import annotations

import enum
from typing import Any

from onnxjit.errors import UnsupportedOperatorError


class GraphOptimizationLevel(enum.IntEnum):
    """Same names and values as ``onnxruntime.GraphOptimizationLevel``."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """Same names and values as ``onnxruntime.ExecutionMode``."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class _NotImplementedField:
    """A field accepted only at its onnxruntime default."""

    def __init__(self, default: Any, why: str):
        self.default = default
        self.why = why

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self
        return obj.__dict__.get(self.name, self.default)

    def __set__(self, obj: Any, value: Any) -> None:
        if value != self.default:
            raise UnsupportedOperatorError(
                f"{type(obj).__name__}.{self.name} = {value!r} is not implemented by onnxjit "
                f"yet ({self.why}); leave it at its default {self.default!r}"
            )
        obj.__dict__[self.name] = value


class SessionOptions:
    """Options for :class:`onnxjit.InferenceSession` (onnxruntime's names).

    Implemented: ``graph_optimization_level``, ``intra_op_num_threads``,
    ``inter_op_num_threads`` (accepted; onnxjit runs nodes sequentially),
    ``execution_mode`` (sequential only), ``enable_profiling``, ``profile_file_prefix``,
    ``log_severity_level``, ``log_verbosity_level``, ``logid``, ``use_deterministic_compute``,
    ``add_session_config_entry``/``get_session_config_entry``,
    ``add_free_dimension_override_by_name``.
    """

    enable_cpu_mem_arena = _NotImplementedField(True, "onnxjit has no memory arena")
    enable_mem_pattern = _NotImplementedField(True, "onnxjit has no memory-pattern planner")
    enable_mem_reuse = _NotImplementedField(True, "buffer reuse cannot be switched off")
    optimized_model_filepath = _NotImplementedField("", "writing the optimised graph")

    def __init__(self) -> None:
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self._execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.enable_profiling = False
        self.profile_file_prefix = "onnxjit_profile"
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.use_deterministic_compute = False
        self._config: dict[str, str] = {}
        self.free_dimension_overrides: dict[str, int] = {}

    @property
    def execution_mode(self) -> ExecutionMode:
        return self._execution_mode

    @execution_mode.setter
    def execution_mode(self, value: ExecutionMode) -> None:
        if int(value) != ExecutionMode.ORT_SEQUENTIAL:
            raise UnsupportedOperatorError(
                "SessionOptions.execution_mode = ORT_PARALLEL is not implemented by onnxjit "
                "yet (nodes run in sequence, kernels are multi-threaded); use ORT_SEQUENTIAL"
            )
        self._execution_mode = ExecutionMode(int(value))

    def add_session_config_entry(self, key: str, value: str) -> None:
        """Store a config entry (read back with :meth:`get_session_config_entry`)."""
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise KeyError(f"session config entry {key!r} is not set")
        return self._config[key]

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        """Fix a dimension variable to a value; feeds that disagree are rejected."""
        self.free_dimension_overrides[str(dim_name)] = int(dim_value)

    def add_free_dimension_override_by_denotation(self, dim_denotation: str, value: int) -> None:
        raise UnsupportedOperatorError(
            "SessionOptions.add_free_dimension_override_by_denotation is not implemented by "
            "onnxjit yet; use add_free_dimension_override_by_name"
        )

    def add_initializer(self, name: str, value: Any) -> None:
        raise UnsupportedOperatorError(
            "SessionOptions.add_initializer is not implemented by onnxjit yet; feed the "
            "initializer by name in run() instead (see get_overridable_initializers())"
        )

    def register_custom_ops_library(self, path: str) -> None:
        raise UnsupportedOperatorError(
            "custom op libraries are onnxruntime shared objects and cannot run in onnxjit"
        )


class RunOptions:
    """Options for one ``run()`` call (onnxruntime's names)."""

    only_execute_path_to_fetches = _NotImplementedField(False, "pruning per call")

    def __init__(self) -> None:
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.terminate = False
        self._config: dict[str, str] = {}

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_run_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise KeyError(f"run config entry {key!r} is not set")
        return self._config[key]
