"""InferenceSession: onnxruntime's call shape over onnxjit's pipeline.

load (model.py) -> check (check.py) -> inline functions and bind implementations
(passes/inline.py, registry.py) -> graph passes (passes/) -> program (plan.py) -> run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import onnx

from onnxjit import (
    check,
    compile_gc,
    config,
    device,
    interrupt,
    ir,
    jitstats,
    limits,
    passes,
    registry,
    types,
)
from onnxjit import progress as progress_mod
from onnxjit import providers as providers_mod
from onnxjit.backends.cpu import threads as threads_mod
from onnxjit.errors import InvalidInputError, UnsupportedOperatorError
from onnxjit.iobinding import IOBinding
from onnxjit.lowering import on_device
from onnxjit.model import load_model
from onnxjit.options import RunOptions, SessionOptions
from onnxjit.ortvalue import OrtValue
from onnxjit.passes.manager import PASS_NAMES
from onnxjit.plan import Profiler
from onnxjit.program import Program
from onnxjit.program import signature as program_signature

log = logging.getLogger("onnxjit")

CPU_PROVIDER = providers_mod.CPU


# Feeds remembered as checked (see InferenceSession._accept): a model fed many shapes checks
# the ones it dropped again.
_MAX_ACCEPTED = 64


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output: ``name``, ``type`` ("tensor(float)") and ``shape``.

    ``shape`` is a list of ints (fixed dims), strs (dimension variables) and ``None`` (unknown
    dims), or ``None`` when the rank is unknown.
    """

    name: str
    type: str
    shape: list[int | str | None] | None


class SemVer(NamedTuple):
    """A model_version packed as SemVer (ONNX Versioning spec)."""

    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


def decode_model_version(raw: int) -> int | SemVer:
    """Return ``raw`` unchanged, or its SemVer form when its top four bytes are non-zero.

    The ONNX Versioning spec packs MAJOR in the top two bytes, MINOR in the next two and PATCH
    in the low four bytes of the 64-bit model_version.
    """
    raw &= (1 << 64) - 1
    if raw >> 32 == 0:
        return raw
    return SemVer(raw >> 48, (raw >> 32) & 0xFFFF, raw & 0xFFFFFFFF)


@dataclass(frozen=True)
class GraphNode:
    """One node of the optimised graph (see :meth:`InferenceSession.graph_nodes`)."""

    name: str
    op_type: str
    domain: str
    members: list[str]
    # Attribute values that are plain data (numbers, strings, arrays and lists of them).
    attrs: dict[str, Any] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)  # "" for an omitted optional input
    outputs: list[str] = field(default_factory=list)
    # The version of the operator the node obeys (the schema its opset import resolves to).
    since_version: int | None = None

    @property
    def label(self) -> str:
        """``Softmax-13`` (``onnxjit.FusedGemm-1`` for onnxjit's own operators)."""
        dom = "" if self.domain in ("", "ai.onnx") else f"{self.domain}."
        ver = f"-{self.since_version}" if self.since_version is not None else ""
        return f"{dom}{self.op_type}{ver}"


@dataclass(frozen=True)
class ModelMetadata:
    """What ``get_modelmeta()`` returns (onnxruntime's field names)."""

    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int | SemVer
    custom_metadata_map: dict[str, str] = field(default_factory=dict)


class InferenceSession:
    """Load, check, optimise and run an ONNX model.

    ``path_or_bytes`` is a file path, the serialized model, or an ``onnx.ModelProto``.
    External data is read only from inside the model file's folder, or from ``base_dir`` (also
    settable as onnxruntime's session config entry
    ``session.model_external_initializers_file_folder_path``), which bytes and ModelProtos
    that reference external data need.
    Raises :class:`onnxjit.errors.ModelLoadError` when the model cannot be read,
    :class:`onnxjit.errors.ModelCheckError` listing every rule of the IR spec it breaks, and
    :class:`onnxjit.errors.UnsupportedOperatorError` listing every operator onnxjit cannot run.
    """

    def __init__(
        self,
        path_or_bytes: str | os.PathLike[str] | bytes | onnx.ModelProto,
        sess_options: SessionOptions | None = None,
        providers: Sequence[str | tuple[str, dict]] | None = None,
        provider_options: Sequence[dict] | None = None,
        disabled_optimizers: Sequence[str] | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise TypeError(f"InferenceSession got unexpected arguments {sorted(kwargs)}")
        if sess_options is not None and not isinstance(sess_options, SessionOptions):
            raise TypeError(
                f"sess_options must be an onnxjit.SessionOptions, found "
                f"{type(sess_options).__module__}.{type(sess_options).__name__}; build it with "
                "onnxjit.SessionOptions() (same field names as onnxruntime's)"
            )
        self._options = sess_options if sess_options is not None else SessionOptions()
        # What set_providers() builds the session again from.
        self._source = path_or_bytes
        self._disabled_optimizers = disabled_optimizers
        self._base_dir = base_dir
        # Kernels compiled or loaded on this session's behalf (onnxjit.jitstats fills it).
        self._kernel_records: list[jitstats.KernelRecord] = []
        # Where the session runs (onnxjit.providers.DeviceChoice: provider, device_id,
        # reason); the plan is placed from it.
        self._device = providers_mod.choose(providers, provider_options)
        self._providers = list(self._device.providers)
        self._lock = threading.Lock()
        self._profiler: Profiler | None = Profiler() if self._options.enable_profiling else None
        self._profiling_start_ns = time.time_ns() if self._profiler is not None else 0
        previous = jitstats.charge_to(self._kernel_records)
        try:
            self._build(path_or_bytes, disabled_optimizers, base_dir)
        finally:
            jitstats.charge_to(previous)

    def _build(
        self,
        path_or_bytes: str | os.PathLike[str] | bytes | onnx.ModelProto,
        disabled_optimizers: Sequence[str] | None,
        base_dir: str | os.PathLike[str] | None,
    ) -> None:
        """Load, check, bind and optimise the model (the rest of :meth:`__init__`)."""
        t0 = time.perf_counter()
        t0_ns = time.perf_counter_ns()
        # Caps on data-sized allocations (onnxjit.limits); constant folding below runs under
        # them too. External data of a model given as bytes is read from base_dir (or
        # onnxruntime's config entry naming that folder).
        settings = self._settings = config.session_settings(
            self._options._config, known_passes=PASS_NAMES
        )
        self._limits = settings.limits
        limits.begin_run(self._limits)
        if base_dir is None:
            base_dir = settings.external_data_folder
        self._model = load_model(path_or_bytes, base_dir=base_dir)
        check.check_model(self._model)
        problems: list[str] = []
        passes.inline_functions(self._model)
        passes.expand_gradients(self._model)
        registry.bind_graph(self._model.graph, self._model.opset_imports, problems)
        if problems:
            raise UnsupportedOperatorError(
                "onnxjit cannot run this model:\n  - " + "\n  - ".join(problems)
            )
        disabled = set(disabled_optimizers or ()) | settings.disabled_optimizers
        if self._device.is_cuda:
            # CUDA kernels load and store float16 natively; the float32 regions are for the CPU
            disabled.add("float16_in_float32")
            # MatMulInteger has no CUDA kernel: a QDQ MatMul stays a float GEMM on the device
            disabled.add("qdq_matmul_integer")
        self._pass_report = passes.optimize(
            self._model.graph, int(self._options.graph_optimization_level), disabled
        )
        if self._options.optimized_model_filepath:
            from onnxjit.export import write_optimized_model

            write_optimized_model(self._model, self._options.optimized_model_filepath)
        self._program = Program(
            self._model.graph,
            backend=self._device_backend(),
            settings=settings,
            arena=bool(
                self._options.enable_mem_reuse
                and self._options.enable_cpu_mem_arena
                and self._options.enable_mem_pattern
            ),
        )
        self._program.owner.records = self._kernel_records
        if self._program.backend is not None:
            self.run = self._run_on_device  # type: ignore[method-assign]
        graph = self._model.graph
        inits = set(graph.initializers)
        self._inputs = [v for v in graph.inputs if v.name not in inits]
        self._overridable = [v for v in graph.inputs if v.name in inits]
        self._outputs = list(graph.outputs)
        self._input_index = {v.name: i for i, v in enumerate(graph.inputs)}
        self._output_index = {v.name: i for i, v in enumerate(graph.outputs)}
        self._defaults = [graph.initializers.get(v.name) for v in graph.inputs]
        self._accepted: dict[tuple, tuple] = {}  # see _accept
        self._create_seconds = time.perf_counter() - t0
        if self._profiler is not None:
            self._profiler.events.append(
                _session_event(
                    "session_initialization", self._profiler, t0_ns, time.perf_counter_ns()
                )
            )
        self._all_outputs = list(range(len(self._outputs)))
        self._threads_setting = int(self._options.intra_op_num_threads or 0)
        self._signatures: set[tuple] = set()  # input dtypes and shapes seen by run()
        self._progress = settings.progress

    # -- metadata ----------------------------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        """The inputs a caller must feed (graph inputs that are not initializers)."""
        return [_node_arg(v) for v in self._inputs]

    def get_outputs(self) -> list[NodeArg]:
        return [_node_arg(v) for v in self._outputs]

    def get_overridable_initializers(self) -> list[NodeArg]:
        """Graph inputs that have an initializer: feeding one replaces its value."""
        return [_node_arg(v) for v in self._overridable]

    def get_modelmeta(self) -> ModelMetadata:
        m = self._model
        return ModelMetadata(
            producer_name=m.producer_name,
            graph_name=m.graph.name,
            domain=m.domain,
            description=m.doc,
            graph_description=m.graph.doc,
            version=decode_model_version(m.model_version),
            custom_metadata_map=dict(m.metadata),
        )

    def _device_backend(self) -> Any:
        """The backend plans place nodes on first: CUDA's where it is the provider in use,
        else None (the CPU)."""
        if not self._device.is_cuda:
            return None
        from onnxjit.backends import cuda

        return cuda.backend(self._device.device_id)

    def get_providers(self) -> list[str]:
        """The providers the session runs on, in order: ``["CUDAExecutionProvider",
        "CPUExecutionProvider"]`` on a GPU (nodes without a CUDA kernel run on the CPU), else
        ``["CPUExecutionProvider"]``."""
        return list(self._providers)

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        """Each provider in use -> its options as strings (``{"device_id": "0", ...}`` for
        CUDA), as onnxruntime reports them."""
        return {k: dict(v) for k, v in self._device.provider_options.items()}

    def get_session_options(self) -> SessionOptions:
        return self._options

    def set_providers(
        self,
        providers: Sequence[str | tuple[str, dict]] | None = None,
        provider_options: Sequence[dict] | None = None,
    ) -> None:
        """Build the session again for ``providers`` (read as the constructor reads them:
        ``None`` is the constructor's default), as onnxruntime re-creates its session: the
        model is loaded again from the path, bytes or ModelProto it was created from, with
        the same SessionOptions, and planned for the new provider (kernels already compiled
        in this process are reused). On an error (an unknown provider, nothing listed that
        can run here) the session is left as it was and usable; onnxruntime's is not. Not
        to be called while other threads run the session."""
        fresh = InferenceSession(
            self._source,
            self._options,
            providers,
            provider_options,
            self._disabled_optimizers,
            self._base_dir,
        )
        state = dict(fresh.__dict__)
        state.pop("run", None)  # a device session's run, bound to ``fresh``
        self.__dict__.clear()
        self.__dict__.update(state)
        if self._program.backend is not None:
            self.run = self._run_on_device  # type: ignore[method-assign]

    def disable_fallback(self) -> None:
        """Does nothing: onnxjit has no provider fallback to disable (onnxruntime's switch,
        for code that calls it)."""

    def enable_fallback(self) -> None:
        """Does nothing: a failed run raises; onnxjit does not re-create the session on
        another provider (onnxruntime's switch, for code that calls it)."""

    # -- running -----------------------------------------------------------------------------
    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: RunOptions | None = None,
    ) -> list[Any]:
        """Run the model and return the requested outputs (all when ``output_names`` is None).

        Feeds are checked first: missing or unknown names, element type, rank, fixed
        dimensions and dimension variables (one value per variable across all inputs).
        """
        if run_options is not None and not isinstance(run_options, RunOptions):
            raise TypeError(
                f"run_options must be an onnxjit.RunOptions, found "
                f"{type(run_options).__module__}.{type(run_options).__name__}; build it with "
                "onnxjit.RunOptions()"
            )
        if run_options is not None and run_options.terminate:
            raise InvalidInputError(
                "run() was called with RunOptions.terminate = True; clear it to run"
            )
        interrupt.begin(run_options)
        if not output_names:
            wanted = self._all_outputs
        else:
            wanted = self._wanted(output_names)
        limits.begin_run(self._limits)
        threads_mod.apply(self._threads_setting)
        known = self._known_feed(input_feed) if self._profiler is None else None
        if known is not None:
            self._program.runs += 1
            outputs = known[1].run(known[0])
        else:
            outputs = self._run_checked(input_feed)
        return outputs if wanted is self._all_outputs else [outputs[i] for i in wanted]

    def _run_on_device(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: RunOptions | None = None,
    ) -> list[Any]:
        """:meth:`run` on the device backend's stream of the calling thread (it replaces
        :meth:`run` on sessions whose plans use a device, so that CPU sessions pay nothing
        for it)."""
        backend = self._program.backend
        return backend.running(self._device_run, output_names, input_feed, run_options, True)

    def _device_run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: RunOptions | None,
        to_host: bool,
    ) -> list[Any]:
        """A run of a device session (inside its backend's ``running``): the outputs that
        the plan leaves on the device copied to the host where ``to_host``."""
        outputs = InferenceSession.run(self, output_names, input_feed, run_options)
        if not to_host:
            return outputs
        to_host_fn = self._program.backend.to_host
        return [to_host_fn(o) if on_device(o) else o for o in outputs]

    def run_async(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        callback: Callable[[list[Any], Any, str], Any],
        user_data: Any,
        run_options: RunOptions | None = None,
    ) -> None:
        """Start :meth:`run` on a thread of onnxjit's and return at once (onnxruntime's
        ``run_async``).

        When the run ends, ``callback(outputs, user_data, err)`` is called on that thread:
        ``outputs`` the list :meth:`run` returns and ``err`` ``""``, or on failure ``[]`` and
        the error's message. As in onnxruntime, a feed that lacks a required input raises
        :class:`~onnxjit.errors.InvalidInputError` (a ``ValueError``) here, before anything
        starts; every other problem reaches the callback. The feed dict is copied, its
        arrays are not: leave them unchanged until the callback. An exception raised by the
        callback is printed to stderr and dropped. Runs started together run concurrently,
        as calls of :meth:`run` from several threads do.
        """
        if not callable(callback):
            raise TypeError(f"callback must be callable, found {type(callback).__name__}")
        if not isinstance(input_feed, Mapping):
            raise InvalidInputError(
                f"input_feed must be a dict of input name -> array, found "
                f"{type(input_feed).__name__}"
            )
        # the inputs run() reports missing: those without an initializer to stand in
        missing = [v.name for v in self._inputs if v.name not in input_feed]
        if missing:
            raise InvalidInputError(
                f"Required inputs ({missing}) are missing from input feed "
                f"({list(input_feed)}); add them to input_feed"
            )
        feed = dict(input_feed)
        names = output_names
        if names is not None and not isinstance(names, str):
            names = list(names)

        def job() -> None:
            try:
                outputs = self.run(names, feed, run_options)
            except Exception as e:
                _deliver(callback, [], user_data, str(e) or type(e).__name__)
            else:
                _deliver(callback, outputs, user_data, "")

        _async_pool().submit(job)

    def io_binding(self) -> IOBinding:
        """A new :class:`~onnxjit.iobinding.IOBinding` for :meth:`run_with_iobinding`."""
        return IOBinding(self)

    def run_with_iobinding(
        self, iobinding: IOBinding, run_options: RunOptions | None = None
    ) -> None:
        """Run with the inputs and outputs bound in ``iobinding``; read the outputs with its
        ``get_outputs()`` or ``copy_outputs_to_cpu()``."""
        if not isinstance(iobinding, IOBinding) or iobinding._session is not self:
            raise ValueError("IOBinding must be used with the session that created it.")
        names = iobinding._output_names()
        backend = self._program.backend
        if backend is None:
            iobinding._place(self.run(names, iobinding._feed(), run_options))
            return
        # outputs the plan leaves on the device stay there for the binding to place
        feed = iobinding._feed()
        iobinding._place(backend.running(self._device_run, names, feed, run_options, False))

    def run_with_ort_values(
        self,
        output_names: Sequence[str] | None,
        input_dict_ort_values: Mapping[str, OrtValue],
        run_options: RunOptions | None = None,
    ) -> list[OrtValue]:
        """:meth:`run` with OrtValue feeds (numpy arrays are accepted too); the outputs come
        back as CPU OrtValues: tensors, or sequences, maps and value-less optionals typed as
        the model declares them (see :class:`~onnxjit.OrtValue`)."""
        if not isinstance(input_dict_ort_values, Mapping):
            return self.run(output_names, input_dict_ort_values, run_options)  # its error
        feed = {
            k: v._feed_value() if isinstance(v, OrtValue) else v
            for k, v in input_dict_ort_values.items()
        }
        outputs = self.run(output_names, feed, run_options)
        wanted = self._all_outputs if not output_names else self._wanted(output_names)
        return [OrtValue._wrap(v, self._outputs[i].type) for i, v in zip(wanted, outputs)]

    def _wanted(self, output_names: Sequence[str]) -> list[int]:
        if isinstance(output_names, str):
            output_names = [output_names]
        wanted = []
        for name in output_names:
            if name not in self._output_index:
                raise InvalidInputError(
                    f"output {name!r} is not an output of the model; expected one of "
                    f"{[v.name for v in self._outputs]}"
                )
            wanted.append(self._output_index[name])
        return wanted

    def _run_checked(self, input_feed: Mapping[str, Any]) -> list[Any]:
        """A run whose feed takes the full check (a new kind of feed, profiling on)."""
        feeds = self._check_feed(input_feed)
        program = self._program
        first = program.plan_of(feeds) is None
        with self._lock:
            self._signatures.add(program_signature(feeds))
        profiler = self._profiler
        # a new signature may compile kernels: show progress when that takes long
        bar = None
        if first and self._progress is not False:
            bar = progress_mod.for_first_run(
                self._progress, len(program.steps), "onnxjit: compiling"
            )
        t0 = time.perf_counter_ns()
        try:
            # a new signature's run compiles (or loads) its kernels
            with compile_gc.held() if first else contextlib.nullcontext():
                outputs = program.run(feeds, profiler=profiler, progress=bar)
        finally:
            if bar is not None:
                bar.close()
        if profiler is not None:
            profiler.events.append(
                _session_event("model_run", profiler, t0, time.perf_counter_ns())
            )
        self._accept(input_feed, feeds)
        return outputs

    def _accept(self, input_feed: Mapping[str, Any], feeds: list[Any]) -> None:
        """Remember a feed that passed the full check, with its plan, so that the next feed of
        the same names, dtypes and shapes (C-contiguous, aligned arrays, used as they are)
        skips the check and the plan lookup (:meth:`_known_feed`)."""
        plan = self._program.plan_of(feeds)
        if plan is None or type(input_feed) is not dict:
            return
        key = []
        positions = []
        for name, arr in input_feed.items():
            index = self._input_index[name]
            if type(arr) is not np.ndarray or feeds[index] is not arr or arr.dtype.kind in "OUS":
                return  # converted (byte order, layout) or strings: the check must run
            key += (name, arr.dtype, arr.shape)
            positions.append(index)
        accepted = self._accepted
        if len(accepted) >= _MAX_ACCEPTED:
            accepted.clear()
        accepted[tuple(key)] = (tuple(positions), plan)

    def _known_feed(self, input_feed: Mapping[str, Any]) -> tuple[list[Any], Any] | None:
        """``(inputs, plan)`` when ``input_feed`` has the names (in order), dtypes and shapes
        of an accepted feed and each array is C-contiguous and aligned, so that every check
        would pass again; else None. On small models this is a good part of a run's cost."""
        if type(input_feed) is not dict:
            return None
        key = []
        ndarray = np.ndarray
        for name, arr in input_feed.items():
            if type(arr) is not ndarray:
                return None
            flags = arr.flags
            # carray: C-contiguous, aligned and writable (the common case, one test)
            if not (flags.carray or (flags.c_contiguous and flags.aligned)):
                return None
            key += (name, arr.dtype, arr.shape)
        entry = self._accepted.get(tuple(key))
        if entry is None:
            return None
        positions, plan = entry
        values = self._defaults.copy()
        for index, arr in zip(positions, input_feed.values()):
            values[index] = arr
        return values, plan

    def _check_feed(self, input_feed: Mapping[str, Any]) -> list[Any]:
        if not isinstance(input_feed, Mapping):
            example = self._inputs[0].name if self._inputs else "x"
            raise InvalidInputError(
                f"input_feed must be a dict of input name -> array, found "
                f"{type(input_feed).__name__}; pass {{{example!r}: array}}"
            )
        values = list(self._defaults)
        problems: list[str] = []
        for name in input_feed:
            if name not in self._input_index:
                problems.append(
                    f"input {name!r} is not an input of the model; expected one of "
                    f"{[v.name for v in self._inputs]}"
                )
        overrides = self._options.free_dimension_overrides
        dim_values = {k: (v, "free_dimension_override") for k, v in overrides.items()}
        graph_inputs = self._model.graph.inputs
        for vi in graph_inputs:
            if vi.name not in input_feed:
                if values[self._input_index[vi.name]] is None:
                    problems.append(
                        f"input {vi.name!r} ({_type_str(vi)}, shape {_shape_str(vi)}) is missing "
                        "from the feed; add it to input_feed"
                    )
                continue
            raw = input_feed[vi.name]
            if self._program.backend is not None and device.is_device_value(raw):
                ok, value = _device_feed(raw, vi, dim_values, problems)
            else:
                ok, value = _convert_feed(raw, vi, dim_values, problems)
            if ok:
                values[self._input_index[vi.name]] = value
        if problems:
            raise InvalidInputError("invalid input feed:\n  - " + "\n  - ".join(problems))
        return values

    # -- profiling / statistics --------------------------------------------------------------
    def get_profiling_start_time_ns(self) -> int:
        """When profiling started, in nanoseconds since the epoch (``time.time_ns()``, the
        clock onnxruntime's value follows); the trace's timestamps count from it. 0 when the
        session was created without ``enable_profiling``, as in onnxruntime."""
        return self._profiling_start_ns

    def end_profiling(self) -> str:
        """Write the collected per-node timings as Chrome-trace JSON; return the file name."""
        if self._profiler is None:
            return ""
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        path = f"{self._options.profile_file_prefix}_{stamp}.json"
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(self._profiler.events, f)
        os.replace(tmp, path)
        self._profiler = None
        return path

    def stats(self) -> dict[str, Any]:
        """Session statistics: where start-up time went, and what is cached.

        - ``session_create_seconds``, ``runs``, ``nodes`` (after the graph passes);
        - ``passes``: each pass that ran, ``{"rewrites": n, "seconds": s}``;
        - ``plan_signatures``: distinct input signatures (dtypes and shapes) run so far;
        - ``kernels_compiled`` / ``kernels_loaded``: kernels this session brought into memory,
          compiled by Numba or loaded from the on-disk cache (kernels already in memory from
          an earlier session of this process cost nothing and are not listed);
          ``compile_seconds`` / ``load_seconds``: their wall time;
        - ``kernels``: one entry per such kernel: ``name`` (module.function), ``source`` (the
          file it is compiled from: a generated kernel's file is under the cache folder),
          ``signature``, ``origin`` ("compiled" or "loaded"), ``seconds``, ``node`` (the
          node whose first run needed it, None for session set-up such as constant folding)
          and ``calls`` (runs of that node since, None for set-up);
        - ``cache_dir``: the folder kernels are cached in for this process;
        - ``plans``: one entry per input signature whose plan is kept (least recently used
          first, at most ``onnxjit.program.MAX_PLANS``): ``values`` (tensors the nodes
          produced), ``value_bytes`` (their total), ``peak_live_bytes`` (the most alive at
          once, by last use), ``arena_bytes`` (the plan's buffer arena: intermediate tensors
          placed by liveness), ``static_values`` (values the plan computed once), ``steps``
          (per step: ``node``, ``op``, ``kernel`` (what runs it), ``generic`` (the operator's
          implementation rather than a bound kernel), ``guarded`` (its outputs' shapes are
          checked at each run, the plan continuing from there when they differ), ``in_place``
          (its output took a dying input's buffer)) and ``shapes`` (name -> ``[dtype,
          shape]`` for the graph inputs and every value);
        - ``buffers``: ``arena_bytes`` (the arenas of the kept plans, one each, more while
          runs overlap) and ``arenas`` (how many exist now); None when ``enable_mem_reuse``
          or ``enable_cpu_mem_arena`` is off.
        """
        from onnxjit import jitcache
        from onnxjit.config import SETTINGS

        out = {
            "session_create_seconds": self._create_seconds,
            "runs": self._program.runs,
            "nodes": len(self._program.steps),
            "passes": {k: dict(v) for k, v in self._pass_report.items()},
            "plan_signatures": len(self._signatures),
        }
        out.update(jitstats.summarize(list(self._kernel_records)))
        out["cache_dir"] = str(jitcache.cache_folder(SETTINGS.cache_dir))
        plans = self._program.plans()
        out["plans"] = [p.summary() for p in plans]
        out["buffers"] = None
        if self._program.arena:
            out["buffers"] = {
                "arena_bytes": sum(p.arena_bytes for p in plans),
                "arenas": sum(p.arenas() for p in plans),
            }
        return out

    def warmup(
        self,
        shapes: Mapping[str, Sequence[int]] | Sequence[Mapping[str, Sequence[int]]] | None = None,
        feeds: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Compile (or load from the cache) every kernel the given input shapes need, so that
        later runs start at full speed and a deployment can fill the kernel cache at build
        time.

        ``shapes`` maps input names to shapes; a list of such maps warms several signatures.
        Inputs left out take their declared shape, which must then be fully static. Each
        signature is run once on zeros (False, empty strings) of the input's element type;
        a model whose inputs must hold meaningful values (indices, shapes) can be warmed with
        real ``feeds`` instead (one feed dict or a list). With neither argument, the declared
        shapes are used. Returns :meth:`stats`.
        """
        if shapes is not None and feeds is not None:
            raise TypeError("warmup() takes shapes or feeds, not both")
        if feeds is not None:
            batch = [feeds] if isinstance(feeds, Mapping) else list(feeds)
        else:
            wanted = [shapes or {}] if shapes is None or isinstance(shapes, Mapping) else shapes
            batch = [self._zero_feed(dict(s)) for s in wanted]
        for feed in batch:
            self.run(None, feed)
        return self.stats()

    def _zero_feed(self, shapes: dict[str, Sequence[int]]) -> dict[str, Any]:
        known = {v.name for v in self._inputs}
        unknown = sorted(set(shapes) - known)
        if unknown:
            raise InvalidInputError(
                f"warmup(shapes=...) names {unknown}, which are not inputs of the model; "
                f"expected names among {sorted(known)}"
            )
        feed = {}
        for vi in self._inputs:
            given = shapes.get(vi.name)
            if given is None:
                if vi.shape is None or not all(isinstance(d, int) for d in vi.shape):
                    raise InvalidInputError(
                        f"input {vi.name!r} has shape {_shape_str(vi)}, which is not fixed; "
                        f"give it in warmup(shapes={{{vi.name!r}: [...]}}) (for the CLI: "
                        f"--shape {vi.name}=DIMS)"
                    )
                given = vi.shape
            dims = [int(d) for d in given]
            if any(d < 0 for d in dims):
                raise InvalidInputError(
                    f"warmup shape of input {vi.name!r} is {dims}; dimensions must be >= 0"
                )
            feed[vi.name] = _zeros(vi, dims)
        return feed

    def placement(self) -> list[dict[str, str]]:
        """Where each step of the most recently used plan runs, in run order: one dict per
        step with ``node`` (its name), ``op`` (its label), ``device`` (``"cuda"`` or
        ``"cpu"``) and ``copy`` (``""`` for a node's own step; ``"to device"`` or
        ``"to host"`` for a copy the plan added before the node it names). Empty before the
        first run."""
        plans = self._program.plans()  # least recently used first
        if not plans:
            return []
        return [
            {key: step[key] for key in ("node", "op", "device", "copy")}
            for step in plans[-1].summary()["steps"]
        ]

    def graph_nodes(self) -> list[GraphNode]:
        """The nodes that run, after the graph passes, in execution order.

        A fused node (domain ``onnxjit``) lists the original nodes it replaced in ``members``.
        """
        return [
            GraphNode(
                name=n.name,
                op_type=n.op_type,
                domain=n.domain,
                members=n.member_names,
                attrs={k: v for k, v in n.attrs.items() if _plain(v)},
                inputs=list(n.inputs),
                outputs=list(n.outputs),
                since_version=n.since_version,
            )
            for n in self._model.graph.nodes
        ]


_ASYNC_POOL: ThreadPoolExecutor | None = None
_ASYNC_POOL_LOCK = threading.Lock()


def _async_pool() -> ThreadPoolExecutor:
    """The threads :meth:`InferenceSession.run_async` runs on (made at first use)."""
    global _ASYNC_POOL
    with _ASYNC_POOL_LOCK:
        if _ASYNC_POOL is None:
            _ASYNC_POOL = ThreadPoolExecutor(
                max_workers=max(2, min(8, os.cpu_count() or 1)),
                thread_name_prefix="onnxjit-run_async",
            )
        return _ASYNC_POOL


def _deliver(callback: Callable[..., Any], outputs: list[Any], user_data: Any, err: str) -> None:
    """Call a run_async callback; what it raises is printed, as onnxruntime does."""
    try:
        callback(outputs, user_data, err)
    except Exception:
        print(
            "Exception ignored in: 'onnxjit.InferenceSession.run_async callback'",
            file=sys.stderr,
        )
        traceback.print_exc()


def _zeros(vi: ir.ValueInfo, dims: list[int]) -> Any:
    """Zeros of an input's type and the given shape (for warmup); sequences, maps and
    optionals cannot be made up from a shape."""
    if not vi.is_tensor or not vi.elem_type:
        raise InvalidInputError(
            f"input {vi.name!r} is a {_type_str(vi)}, which warmup cannot make from a shape; "
            "pass warmup(feeds={...}) with a real value"
        )
    dtype = types.np_dtype(vi.elem_type)
    if dtype.kind in "OUS":
        return np.full(dims, "", dtype=object)
    return np.zeros(dims, dtype)


def _plain(v: Any) -> bool:
    if isinstance(v, list):
        return all(_plain(x) for x in v)
    return isinstance(v, (int, float, str, bytes, np.ndarray))


def _session_event(name: str, profiler: Profiler, t0: int, t1: int) -> dict[str, Any]:
    """A session-level Chrome-trace event, as onnxruntime writes them."""
    return {
        "name": name,
        "cat": "Session",
        "ph": "X",
        "ts": (t0 - profiler.t0) / 1000.0,
        "dur": (t1 - t0) / 1000.0,
        "pid": 0,
        "tid": 0,
        "args": {},
    }


def _node_arg(v: ir.ValueInfo) -> NodeArg:
    shape = v.shape
    return NodeArg(v.name, _type_str(v), None if shape is None else list(shape))


def _type_str(v: ir.ValueInfo) -> str:
    return types.type_proto_string(v.type) if v.type is not None else "unknown"


def _shape_str(v: ir.ValueInfo) -> str:
    shape = v.shape
    if shape is None:
        return "unknown"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _device_feed(
    raw: Any, vi: ir.ValueInfo, dim_values: dict[str, tuple[int, str]], problems: list[str]
) -> tuple[bool, Any]:
    """A tensor in device memory fed to a session on that device: used where it is, without
    a copy, after the checks a host tensor takes; (False, None) on a problem."""
    if vi.type is None or vi.type.WhichOneof("value") != "tensor_type":
        problems.append(
            f"input {vi.name!r} is {_type_str(vi)}; a device array can only feed a tensor input"
        )
        return False, None
    arr = device.as_device_array(raw)
    if not arr.is_c_contiguous():
        problems.append(
            f"input {vi.name!r}: the device array of shape {list(arr.shape)} is not "
            "C-contiguous; pass a contiguous copy (cupy.ascontiguousarray, tensor.contiguous())"
        )
        return False, None
    n = len(problems)
    _check_tensor(vi, arr, dim_values, problems)
    return len(problems) == n, arr


def _convert_feed(
    raw: Any, vi: ir.ValueInfo, dim_values: dict[str, tuple[int, str]], problems: list[str]
) -> tuple[bool, Any]:
    """Convert and check one feed against its declared type; (False, None) on a problem.

    Tensors become C-contiguous arrays checked for element type, rank and dimensions;
    sequences must be lists or tuples whose elements are checked the same way (and come out as
    a list); an optional input accepts None (no value) or a value of its element type.
    """
    kind = vi.type.WhichOneof("value") if vi.type is not None else None
    if kind == "tensor_type":
        arr = _as_array(raw, vi, problems)
        if arr is None:
            return False, None
        n = len(problems)
        _check_tensor(vi, arr, dim_values, problems)
        return len(problems) == n, arr
    if kind == "sequence_type":
        if not isinstance(raw, (list, tuple)):
            problems.append(
                f"input {vi.name!r} is a sequence ({_type_str(vi)}); found "
                f"{type(raw).__name__}, pass a list of arrays"
            )
            return False, None
        elem_type = vi.type.sequence_type.elem_type
        items = []
        for i, item in enumerate(raw):
            elem = ir.ValueInfo(f"{vi.name}[{i}]", elem_type)
            ok, value = _convert_feed(item, elem, {}, problems)
            if not ok:
                return False, None
            items.append(value)
        return True, items
    if kind == "optional_type":
        if raw is None:
            return True, None
        inner = ir.ValueInfo(vi.name, vi.type.optional_type.elem_type)
        return _convert_feed(raw, inner, dim_values, problems)
    return True, raw  # maps and untyped values are passed as given


def _from_python(raw: Any, vi: ir.ValueInfo, problems: list[str]) -> np.ndarray | None:
    """Python scalars and lists take the declared element type when no value changes in kind:
    bools, ints and floats to float types; bools, ints and whole floats to integer types whose
    range holds them (onnxruntime truncates 1.5 to 1 there: onnxjit refuses). Numpy arrays are
    never converted silently. None (with a problem added) when a value does not fit."""
    arr = np.asarray(raw)
    elem = vi.elem_type
    if not elem or elem == onnx.TensorProto.STRING or arr.dtype.kind not in "biuf":
        return arr
    want = np.dtype(types.np_dtype(elem))
    if arr.dtype == want or want.kind not in "iuf":
        return arr  # a bool input takes bools only: _check_tensor reports anything else
    if want.kind == "f":
        return arr.astype(want)
    bad = None
    if arr.size:
        info = np.iinfo(want)
        if arr.dtype.kind == "f":
            whole = np.isfinite(arr) & (np.floor(arr) == arr)
            whole &= (arr >= info.min) & (arr <= info.max)
        else:
            whole = (arr >= info.min) & (arr <= info.max)
        if not whole.all():
            bad = arr.ravel()[np.flatnonzero(~whole.ravel())[0]].item()
    if bad is not None:
        problems.append(
            f"input {vi.name!r}: expected element type {_type_str(vi)} (numpy {want}), found "
            f"a {type(raw).__name__} holding {bad!r}, which {want} cannot hold exactly; pass "
            f"whole numbers in {want}'s range or a numpy array of {want}"
        )
        return None
    return arr.astype(want)


def _as_string_array(arr: np.ndarray, vi: ir.ValueInfo, problems: list[str]) -> np.ndarray | None:
    """An object array of str for a string input: str elements as they are, bytes decoded as
    UTF-8, any other element as ``str(element)`` (what onnxruntime stores)."""
    out = arr.astype(object) if arr.dtype != object else arr
    flat = out.ravel()
    if all(type(v) is str for v in flat):
        return out
    fixed = np.empty(out.shape, dtype=object)
    dst = fixed.reshape(-1)
    for i, v in enumerate(flat):
        if isinstance(v, (bytes, np.bytes_)):
            try:
                dst[i] = bytes(v).decode("utf-8")
            except UnicodeDecodeError as e:
                problems.append(
                    f"input {vi.name!r} ({_type_str(vi)}): element {i} is bytes that are not "
                    f"UTF-8 ({e.reason} at byte {e.start}); expected text, found "
                    f"{bytes(v)[:32]!r}; decode it yourself or pass str elements"
                )
                return None
        else:
            dst[i] = v if isinstance(v, str) else str(v)
    return fixed


def _as_array(raw: Any, vi: ir.ValueInfo, problems: list[str]) -> np.ndarray | None:
    """``raw`` as a C-contiguous, aligned, native-byte-order base-class ndarray (copied only
    when it is not one already), or None with a problem added."""
    try:
        if type(raw) is np.ndarray:
            arr = raw
        elif isinstance(raw, np.ndarray):
            arr = np.asarray(raw)  # matrix, masked array: their data, as onnxruntime reads it
        elif device.is_tensor_object(raw):
            # another library's tensor (DLPack, CUDA array interface) or an OrtValue: read in
            # place on the host, copied from a device
            arr = device.to_numpy(raw)
        else:
            arr = _from_python(raw, vi, problems)
            if arr is None:
                return None
    except Exception:
        problems.append(
            f"input {vi.name!r}: could not convert {type(raw).__name__} to an array; "
            "pass a numpy array"
        )
        return None
    if vi.elem_type == onnx.TensorProto.STRING and arr.dtype.kind in "OUS":
        return _as_string_array(arr, vi, problems)
    if arr.dtype.kind in "biufc" and not arr.dtype.isnative:
        # Same element type in the other byte order: its values in native order.
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.dtype != object and not (arr.flags.c_contiguous and arr.flags.aligned):
        arr = np.ascontiguousarray(arr)
        if not arr.flags.aligned:  # a contiguous but misaligned view stays one: copy it
            arr = arr.copy()
    return arr


def _check_tensor(
    vi: ir.ValueInfo,
    arr: np.ndarray,
    dim_values: dict[str, tuple[int, str]],
    problems: list[str],
) -> None:
    expected = vi.elem_type
    try:
        got = types.onnx_elem_type(arr.dtype)
    except ValueError:
        got = None
    if got != expected:
        want = types.np_dtype(expected) if expected else "?"
        problems.append(
            f"input {vi.name!r}: expected element type {_type_str(vi)} (numpy {want}), found "
            f"numpy {arr.dtype}; convert it with .astype(np.{want})"
        )
        return
    shape = vi.shape
    if shape is None:
        return
    if arr.ndim != len(shape):
        problems.append(
            f"input {vi.name!r}: expected rank {len(shape)} (shape {_shape_str(vi)}), found "
            f"rank {arr.ndim} (shape {list(arr.shape)}); reshape the array"
        )
        return
    for axis, (want, have) in enumerate(zip(shape, arr.shape)):
        if isinstance(want, int):
            if want != have:
                problems.append(
                    f"input {vi.name!r}: dimension {axis} must be {want} (shape "
                    f"{_shape_str(vi)}), found {have} (shape {list(arr.shape)})"
                )
        elif isinstance(want, str) and want:
            if want in dim_values and dim_values[want][0] != have:
                first_value, first_input = dim_values[want]
                source = (
                    "a free-dimension override"
                    if first_input == "free_dimension_override"
                    else f"input {first_input!r}"
                )
                problems.append(
                    f"dimension variable {want!r} must have one value across the graph: "
                    f"{source} gives {want}={first_value} but input {vi.name!r} dimension "
                    f"{axis} gives {want}={have}; feed arrays that agree on {want!r}"
                )
            else:
                dim_values.setdefault(want, (have, vi.name))
