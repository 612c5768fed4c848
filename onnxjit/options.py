"""SessionOptions and RunOptions with onnxruntime's field names.

Fields onnxjit implements behave as in onnxruntime. A field it does not implement may still be
set to onnxruntime's default value (so code that spells out defaults keeps working); any other
value raises ``NotImplementedError`` naming the field, so nothing is silently ignored.
"""

from __future__ import annotations

import enum
import warnings
from typing import Any

from onnxjit import config as _config
from onnxjit.errors import OnnxJitError, UnsupportedOperatorError


class ConfigEntryNotFoundError(OnnxJitError, RuntimeError, KeyError):
    """A session or run config entry that was never set was read.

    onnxruntime raises ``RuntimeError`` here; it is also a ``KeyError``, as onnxjit raised
    before, so either ``except`` clause catches it.
    """

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


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


class ExecutionOrder(enum.IntEnum):
    """Same names and values as ``onnxruntime.ExecutionOrder``."""

    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


class _NotImplementedField:
    """A field accepted only at its onnxruntime default."""

    def __init__(self, default: Any, why: str) -> None:
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


class _StrictFields:
    """Refuse assignments to names the class does not define (a typo must not pass silently).

    onnxruntime's option objects raise ``AttributeError`` for unknown names; so do these.
    """

    _fields: frozenset[str] = frozenset()

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_") and name not in self._fields:
            raise AttributeError(
                f"{type(self).__name__} has no option {name!r}; known options: "
                f"{sorted(self._fields)}"
            )
        super().__setattr__(name, value)


def _not_implemented(what: str, why: str, instead: str) -> UnsupportedOperatorError:
    return UnsupportedOperatorError(f"{what} is not implemented by onnxjit yet ({why}); {instead}")


# Session config entries onnxjit reads: key -> what it does (onnxjit.config parses them).
ONNXJIT_CONFIG_KEYS = {k.key: k.meaning for k in _config.KNOBS if k.key}


class SessionOptions(_StrictFields):
    """Options for :class:`onnxjit.InferenceSession` (onnxruntime's names).

    Implemented: ``graph_optimization_level``, ``optimized_model_filepath``,
    ``intra_op_num_threads`` (Numba's and BLAS's thread counts, see
    :mod:`onnxjit.backends.cpu.threads`),
    ``inter_op_num_threads`` (accepted; onnxjit runs nodes sequentially),
    ``execution_mode`` (sequential only), ``enable_profiling``, ``profile_file_prefix``,
    ``log_severity_level``, ``log_verbosity_level``, ``logid``, ``use_deterministic_compute``,
    ``add_session_config_entry``/``get_session_config_entry``,
    ``add_free_dimension_override_by_name``, and the memory switches ``enable_mem_reuse``,
    ``enable_cpu_mem_arena`` and ``enable_mem_pattern``: with all three on (the default) each
    plan places its intermediate tensors in one arena by liveness and writes over inputs that
    die where it may (:mod:`onnxjit.plan`), so a repeated input signature allocates only its
    outputs; with any of them off, intermediates are allocated per run.
    """

    execution_order = _NotImplementedField(
        ExecutionOrder.DEFAULT, "nodes run in the graph's topological order"
    )
    use_per_session_threads = _NotImplementedField(
        True, "Numba's thread pool is shared by the process; set intra_op_num_threads"
    )

    _fields = frozenset(
        {
            "enable_cpu_mem_arena",
            "enable_mem_pattern",
            "enable_mem_reuse",
            "optimized_model_filepath",
            "execution_order",
            "use_per_session_threads",
            "graph_optimization_level",
            "intra_op_num_threads",
            "inter_op_num_threads",
            "execution_mode",
            "enable_profiling",
            "profile_file_prefix",
            "log_severity_level",
            "log_verbosity_level",
            "logid",
            "use_deterministic_compute",
            "free_dimension_overrides",
        }
    )

    def __init__(self) -> None:
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        # Where to write the graph after the passes ("" = nowhere); fused groups appear as
        # nodes of the onnxjit domain listing their member nodes.
        self.optimized_model_filepath = ""
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self._execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.enable_profiling = False
        self.profile_file_prefix = "onnxjit_profile"
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.use_deterministic_compute = False
        self.enable_mem_reuse = True
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
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
        """Store a config entry (read back with :meth:`get_session_config_entry`).

        onnxjit acts on its own keys (:data:`ONNXJIT_CONFIG_KEYS`) and not on onnxruntime's; a
        ``RuntimeWarning`` says so for any other key rather than ignoring it silently.
        """
        if key in ONNXJIT_CONFIG_KEYS:
            self._config[str(key)] = str(value)
            return
        warnings.warn(
            f"session config entry {key!r} is stored but onnxjit does not act on it "
            "(onnxruntime-specific tuning)",
            RuntimeWarning,
            stacklevel=2,
        )
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        """The value stored for ``key``; :class:`ConfigEntryNotFoundError` (a
        ``RuntimeError``, as onnxruntime raises, and a ``KeyError``) when it is not set."""
        if key not in self._config:
            raise ConfigEntryNotFoundError(
                f"SessionOptions does not have configuration with key: {key} (session config "
                f"entry {key!r} is not set; set it with add_session_config_entry)"
            )
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
            "SessionOptions.register_custom_ops_library is not implemented by onnxjit: custom "
            "op libraries are onnxruntime shared objects; register a Python implementation "
            "with onnxjit.registry.onnx_op instead"
        )

    def add_external_initializers(self, names: Any, values: Any) -> None:
        raise _not_implemented(
            "SessionOptions.add_external_initializers",
            "initializers come from the model and its external-data files",
            "feed the value by name in run() instead (see get_overridable_initializers())",
        )

    def add_external_initializers_from_files_in_memory(self, *args: Any) -> None:
        raise _not_implemented(
            "SessionOptions.add_external_initializers_from_files_in_memory",
            "external data is read from files next to the model",
            "save the data next to the model file",
        )

    def add_provider(self, *args: Any) -> None:
        raise _not_implemented(
            "SessionOptions.add_provider",
            "onnxjit has one execution provider",
            "pass providers= to InferenceSession",
        )

    def add_provider_for_devices(self, *args: Any) -> None:
        raise _not_implemented(
            "SessionOptions.add_provider_for_devices",
            "onnxjit has one execution provider",
            "pass providers= to InferenceSession",
        )

    def has_providers(self) -> bool:
        """Always False: providers cannot be added to onnxjit's SessionOptions."""
        return False

    def set_provider_selection_policy(self, *args: Any) -> None:
        raise _not_implemented(
            "SessionOptions.set_provider_selection_policy",
            "onnxjit has one execution provider",
            "remove the call",
        )

    def set_provider_selection_policy_delegate(self, *args: Any) -> None:
        raise _not_implemented(
            "SessionOptions.set_provider_selection_policy_delegate",
            "onnxjit has one execution provider",
            "remove the call",
        )

    def set_load_cancellation_flag(self, *args: Any) -> None:
        raise _not_implemented(
            "SessionOptions.set_load_cancellation_flag",
            "session creation cannot be cancelled",
            "remove the call",
        )

    def set_ep_context_data_read_func(self, *args: Any) -> None:
        raise _not_implemented(
            "SessionOptions.set_ep_context_data_read_func",
            "onnxjit has no EP context models",
            "remove the call",
        )

    def clear_ep_context_data_read_func(self, *args: Any) -> None:
        raise _not_implemented(
            "SessionOptions.clear_ep_context_data_read_func",
            "onnxjit has no EP context models",
            "remove the call",
        )


class RunOptions(_StrictFields):
    """Options for one ``run()`` call (onnxruntime's names).

    ``terminate = True`` makes ``run()`` refuse to start, and set from another thread while
    a run goes stops it with RunTerminatedError at its next subgraph iteration (Loop, Scan,
    If: see onnxjit.interrupt); the session stays usable. The log fields are accepted.
    """

    only_execute_path_to_fetches = _NotImplementedField(False, "pruning per call")
    _fields = frozenset(
        {
            "only_execute_path_to_fetches",
            "log_severity_level",
            "log_verbosity_level",
            "logid",
            "terminate",
        }
    )

    def __init__(self) -> None:
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.terminate = False
        self._config: dict[str, str] = {}

    def add_run_config_entry(self, key: str, value: str) -> None:
        """Store a config entry; a ``RuntimeWarning`` says onnxjit does not act on it."""
        warnings.warn(
            f"run config entry {key!r} is stored but onnxjit does not act on it "
            "(onnxruntime-specific tuning)",
            RuntimeWarning,
            stacklevel=2,
        )
        self._config[str(key)] = str(value)

    def add_active_adapter(self, adapter: Any) -> None:
        raise _not_implemented(
            "RunOptions.add_active_adapter",
            "LoRA adapters are an onnxruntime format",
            "merge the adapter into the model's weights",
        )

    def get_run_config_entry(self, key: str) -> str:
        """The value stored for ``key``; :class:`ConfigEntryNotFoundError` (a
        ``RuntimeError``, as onnxruntime raises, and a ``KeyError``) when it is not set."""
        if key not in self._config:
            raise ConfigEntryNotFoundError(
                f"RunOptions does not have configuration with key: {key} (run config entry "
                f"{key!r} is not set; set it with add_run_config_entry)"
            )
        return self._config[key]
