"""Execution providers: onnxruntime's ``providers=`` / ``provider_options=`` arguments, which
of them can run here, and the one a session runs on.

onnxjit implements two providers: ``CPUExecutionProvider`` and ``CUDAExecutionProvider``
(numba-cuda kernels on an NVIDIA GPU). The arguments are read as onnxruntime reads them: a
list of names or ``(name, options)`` tuples in order of preference, or names plus a parallel
``provider_options`` list; option keys and values become strings; a repeated provider is
ignored with a warning. A provider that cannot run here (CUDA without a usable GPU, another
onnxruntime provider onnxjit does not implement) is skipped with one warning that says why
and how to fix it, and the next one listed is used; nothing usable listed is an error.

The public seam for "is the GPU usable" is :func:`cuda_unavailable_reason`: every decision
here calls it through this module, so tests (and tools) can replace it with
``monkeypatch.setattr(onnxjit.providers, "cuda_unavailable_reason", ...)``.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from onnxjit.errors import UnsupportedOperatorError

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"

#: The providers onnxjit implements, in onnxruntime's order of preference.
IMPLEMENTED = (CUDA, CPU)

#: onnxruntime's other provider names (``onnxruntime.get_all_providers()``): code written for
#: onnxruntime may list them first; they are skipped with a warning rather than refused.
ORT_ONLY = (
    "TensorrtExecutionProvider",
    "NvTensorRTRTXExecutionProvider",
    "MIGraphXExecutionProvider",
    "ROCMExecutionProvider",
    "OpenVINOExecutionProvider",
    "DnnlExecutionProvider",
    "VitisAIExecutionProvider",
    "QNNExecutionProvider",
    "NnapiExecutionProvider",
    "VSINPUExecutionProvider",
    "JsExecutionProvider",
    "CoreMLExecutionProvider",
    "ArmNNExecutionProvider",
    "ACLExecutionProvider",
    "DmlExecutionProvider",
    "RknpuExecutionProvider",
    "WebNNExecutionProvider",
    "WebGpuExecutionProvider",
    "XnnpackExecutionProvider",
    "CANNExecutionProvider",
    "AzureExecutionProvider",
    "SNPEExecutionProvider",
    "TvmExecutionProvider",
)

INSTALL_HINT = 'pip install "onnxjit[cuda]"'

# onnxruntime's CUDA provider options (CUDAExecutionProviderInfo), sorted by what onnxjit
# does with them. onnxruntime refuses an option it does not know ("Unknown provider option"),
# and so does onnxjit: a misspelt option is a mistake worth hearing about on every machine.
#: Options onnxjit honours.
CUDA_HONOURED = frozenset({"device_id"})
#: Tuning and memory knobs of onnxruntime's own kernels (cuDNN, TunableOp, its arena, CUDA
#: graphs): they change speed or memory use, never results or the caller's contract, so
#: onnxjit accepts them and warns that they have no effect.
CUDA_IGNORED = frozenset(
    {
        "gpu_mem_limit",
        "arena_extend_strategy",
        "cudnn_conv_algo_search",
        "cudnn_conv_use_max_workspace",
        "cudnn_conv1d_pad_to_nc1d",
        "do_copy_in_default_stream",
        "enable_cuda_graph",
        "enable_skip_layer_norm_strict_mode",
        "prefer_nhwc",
        "use_ep_level_unified_stream",
        "use_tf32",
        "tunable_op_enable",
        "tunable_op_tuning_enable",
        "tunable_op_max_tuning_duration_ms",
        "sdpa_kernel",
        "fuse_conv_bias",
    }
)
#: Options that hand onnxjit the caller's stream or allocator. Ignoring them would break what
#: the caller relies on (work ordered on their stream, memory from their allocator), so a
#: value that asks for them is refused; their "off" values ("0", "") are accepted.
CUDA_REFUSED = frozenset(
    {
        "has_user_compute_stream",
        "user_compute_stream",
        "gpu_external_alloc",
        "gpu_external_free",
        "gpu_external_empty_cache",
    }
)
CUDA_OPTIONS = CUDA_HONOURED | CUDA_IGNORED | CUDA_REFUSED


@dataclass(frozen=True)
class DeviceChoice:
    """Where a session runs: what :func:`choose` decided.

    - ``provider``: ``"CUDAExecutionProvider"`` or ``"CPUExecutionProvider"``, the provider
      that runs the plan's nodes (on CUDA, nodes without a CUDA kernel still run on the CPU);
    - ``device_id``: the CUDA device ordinal (``cuda.gpus[device_id]``); 0 on the CPU;
    - ``reason``: why this provider: ``"requested"`` when it was the first listed (or the
      default), else the warnings of the providers skipped before it;
    - ``providers``: what ``get_providers()`` reports (``[CUDA, CPU]`` or ``[CPU]``);
    - ``provider_options``: what ``get_provider_options()`` reports, strings as onnxruntime
      gives them;
    - ``simulator``: the CUDA device is numba-cuda's simulator (``NUMBA_ENABLE_CUDASIM=1``).
    """

    provider: str
    device_id: int = 0
    reason: str = "requested"
    providers: tuple[str, ...] = (CPU,)
    provider_options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    simulator: bool = False

    @property
    def is_cuda(self) -> bool:
        return self.provider == CUDA


def simulator_enabled() -> bool:
    """numba-cuda's simulator is on (``NUMBA_ENABLE_CUDASIM``, which numba reads into its
    config when it is first imported: onnxjit reads no environment outside onnxjit.config)."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def cuda_unavailable_reason(device_id: int = 0) -> str | None:
    """None when CUDA device ``device_id`` can run onnxjit's CUDA kernels, else a sentence
    saying why not and how to fix it.

    Usable means: numba-cuda is installed, ``numba.cuda.is_available()`` (a driver and at
    least one GPU; numba-cuda's simulator counts, which is how CI runs the CUDA path) and
    ``device_id`` names one of the devices. This is the seam tests replace to simulate a
    machine without a GPU.
    """
    # Not cached: numba caches the driver probe, and the rest is a few attribute reads.
    device_id = int(device_id)
    # importlib.util.find_spec: numba itself still ships a deprecated built-in CUDA target;
    # onnxjit's kernels are written for the maintained numba-cuda package.
    if importlib.util.find_spec("numba_cuda") is None:
        return f"numba-cuda is not installed; install it with {INSTALL_HINT}"
    try:
        from numba import cuda
    except Exception as e:  # a broken install: missing libraries, version clash
        return f"numba.cuda could not be imported ({e}); reinstall it with {INSTALL_HINT}"
    try:
        available = cuda.is_available()
    except Exception as e:
        available, detail = False, str(e)
    else:
        detail = ""
    if not available:
        detail = " ".join((detail or _driver_error(cuda)).split())
        return (
            "numba.cuda.is_available() is False: no NVIDIA driver or GPU was found"
            + (f" ({detail})" if detail else "")
            + "; check that `nvidia-smi` lists a GPU, and install the CUDA libraries with "
            + INSTALL_HINT
        )
    count = len(cuda.gpus)
    if not 0 <= device_id < count:
        return (
            f"device_id {device_id} is out of range: this machine has {count} CUDA "
            f"device{'s' if count != 1 else ''} (device_id 0 to {count - 1}); pass "
            f'("CUDAExecutionProvider", {{"device_id": n}}) with one of them'
        )
    return None


def _driver_error(cuda: Any) -> str:
    """The driver's initialisation error, when numba-cuda recorded one."""
    try:
        from numba.cuda.cudadrv.driver import driver

        err = getattr(driver, "initialization_error", None)
        return str(err) if err else ""
    except Exception:
        return ""


def available_providers() -> list[str]:
    """``onnxjit.get_available_providers()``: the providers that can run here, best first.

    Unlike onnxruntime, whose list names what the build contains, CUDA is listed only when
    a device is usable (see :func:`cuda_unavailable_reason`).
    """
    return [CUDA, CPU] if cuda_unavailable_reason(0) is None else [CPU]


def normalize(
    providers: Sequence[Any] | None, provider_options: Sequence[Any] | None = None
) -> list[tuple[str, dict[str, str]]]:
    """``(name, options)`` pairs as onnxruntime normalises its arguments: options as strings,
    the later of two entries for one provider dropped with a warning."""
    if providers is None:
        if provider_options is not None:
            raise ValueError("provider_options was given without providers; give both")
        return []
    if isinstance(providers, str) or not isinstance(providers, Sequence):
        raise ValueError(
            f"providers should be a sequence of names or (name, options) tuples, found "
            f"{providers!r}; pass e.g. ['CUDAExecutionProvider', 'CPUExecutionProvider']"
        )
    pairs: list[tuple[str, Mapping[Any, Any]]] = []
    if provider_options is not None:
        if isinstance(provider_options, Mapping) or not isinstance(provider_options, Sequence):
            raise ValueError("provider_options should be a sequence of dicts, one per provider")
        if len(provider_options) != len(providers):
            raise ValueError(
                f"provider_options has {len(provider_options)} entries for {len(providers)} "
                "providers; give one dict per provider"
            )
        for name, opts in zip(providers, provider_options):
            if not isinstance(name, str):
                raise ValueError(
                    "with provider_options, providers must be names only; found "
                    f"{name!r}: put the options in provider_options"
                )
            if not isinstance(opts, Mapping):
                raise ValueError(f"provider_options values must be dicts, found {opts!r}")
            pairs.append((name, opts))
    else:
        for p in providers:
            if isinstance(p, str):
                pairs.append((p, {}))
            elif (
                isinstance(p, tuple)
                and len(p) == 2
                and isinstance(p[0], str)
                and isinstance(p[1], Mapping)
            ):
                pairs.append((p[0], p[1]))
            else:
                raise ValueError(
                    f"providers values must be names or (name, options dict) tuples, found {p!r}"
                )
    out: list[tuple[str, dict[str, str]]] = []
    seen: set[str] = set()
    for name, opts in pairs:
        if name in seen:
            warnings.warn(f"duplicate provider {name!r} ignored", RuntimeWarning, stacklevel=4)
            continue
        seen.add(name)
        out.append((name, {str(k): str(v) for k, v in opts.items()}))
    return out


def _check_options(name: str, opts: dict[str, str]) -> int:
    """Validate a provider's options; return the CUDA device_id (0 for the CPU)."""
    if name == CPU:
        if opts:
            raise UnsupportedOperatorError(
                f"provider options {sorted(opts)} for {CPU} are not implemented by onnxjit "
                "yet; pass the provider name alone"
            )
        return 0
    unknown = sorted(set(opts) - CUDA_OPTIONS)
    if unknown:
        raise ValueError(
            f"unknown {CUDA} option{'s' if len(unknown) > 1 else ''} {unknown}; "
            f"onnxruntime's CUDA options are {sorted(CUDA_OPTIONS)}"
        )
    refused = sorted(k for k in CUDA_REFUSED & set(opts) if opts[k].strip() not in _OFF)
    if refused:
        raise UnsupportedOperatorError(
            f"{CUDA} options {refused} are not implemented by onnxjit: it runs on its own "
            "stream and allocator, and ignoring them would break the ordering or memory "
            "they promise; remove them (onnxjit synchronizes its stream before run() returns)"
        )
    raw = opts.get("device_id", "0")
    try:
        device_id = int(raw)
    except ValueError:
        device_id = -1
    if device_id < 0:
        raise ValueError(f"{CUDA} option device_id must be an integer >= 0, found {raw!r}")
    ignored = sorted(CUDA_IGNORED & set(opts))
    if ignored:
        warnings.warn(
            f"{CUDA} options {ignored} tune onnxruntime's own kernels and have no effect in "
            "onnxjit; they are ignored",
            RuntimeWarning,
            stacklevel=4,
        )
    return device_id


_OFF = ("", "0", "false", "False", "None", "nullptr")


def choose(
    providers: Sequence[Any] | None, provider_options: Sequence[Any] | None = None
) -> DeviceChoice:
    """Read onnxruntime's ``providers`` / ``provider_options`` and pick the provider to run.

    Raises ``ValueError`` for malformed arguments, an unknown provider name or an unknown
    CUDA option; :class:`~onnxjit.errors.UnsupportedOperatorError` for options onnxjit cannot
    honour; ``RuntimeError`` when no provider listed can run here. Warns (``RuntimeWarning``)
    once per skipped provider, naming why and the fix.
    """
    pairs = normalize(providers, provider_options)
    if not pairs:
        return DeviceChoice(CPU, providers=(CPU,), provider_options={CPU: {}})
    for name, _ in pairs:
        if name not in IMPLEMENTED and name not in ORT_ONLY:
            raise ValueError(
                f"unknown execution provider {name!r}; onnxjit knows {list(IMPLEMENTED)}"
            )
    device_ids = {name: _check_options(name, opts) for name, opts in pairs if name in IMPLEMENTED}
    skipped: list[str] = []
    for name, opts in pairs:
        if name in ORT_ONLY:
            why = f"{name} is an onnxruntime provider that onnxjit does not implement"
        elif name == CUDA:
            device_id = device_ids[name]
            why = cuda_unavailable_reason(device_id)
            if why is None:
                return DeviceChoice(
                    CUDA,
                    device_id,
                    "; ".join(skipped) or "requested",
                    (CUDA, CPU),
                    {CUDA: {**opts, "device_id": str(device_id)}, CPU: {}},
                    simulator_enabled(),
                )
            why = f"{CUDA} is not available: {why}"
        else:
            return DeviceChoice(CPU, 0, "; ".join(skipped) or "requested", (CPU,), {CPU: {}})
        rest = [n for n, _ in pairs[pairs.index((name, opts)) + 1 :]]
        nxt = next((n for n in rest if n in IMPLEMENTED), None)
        if nxt is not None:
            warnings.warn(f"{why}; using {nxt} instead", RuntimeWarning, stacklevel=3)
        skipped.append(why)
    listed = [n for n, _ in pairs]
    raise RuntimeError(
        f"none of the providers {listed} can run here: "
        + "; ".join(skipped)
        + f"; add {CPU!r} to providers to run on the CPU"
    )
