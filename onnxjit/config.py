"""Every knob onnxjit reads, parsed and validated here and nowhere else.

Two kinds of knob:

* environment variables, read once when onnxjit is imported (:data:`SETTINGS`, built by
  :func:`read_settings`); they apply to every session of the process;
* session config entries (``SessionOptions.add_session_config_entry``), read when a session is
  created (:func:`session_settings`); where a knob has both, the entry wins for its session.

:data:`KNOBS` lists them all with their defaults (the README's configuration table is the same
list). A value onnxjit cannot use raises :class:`~onnxjit.errors.ConfigurationError` (a
``ValueError``) naming the variable or the entry, the value found, what was expected and how to
fix it: at import for a variable, at session creation for an entry.

Other modules take parsed values from here (:mod:`onnxjit.limits` the byte caps,
:mod:`onnxjit.progress` the bar's mode, the kernels their cache folder and vector width through
:func:`onnxjit.kernels._jit.configure`) and read no variable or entry themselves. This module
imports :mod:`onnxjit.limits` for its byte-count parser, never the other way round.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from onnxjit import limits as _limits
from onnxjit.errors import ConfigurationError, InvalidArgumentError

# Environment variables.
CACHE_DIR_ENV = "ONNXJIT_CACHE_DIR"
NUM_THREADS_ENV = "ONNXJIT_NUM_THREADS"
PARALLEL_THRESHOLD_ENV = "ONNXJIT_PARALLEL_THRESHOLD"
VECTOR_WIDTH_ENV = "ONNXJIT_VECTOR_WIDTH"
PROGRESS_ENV = "ONNXJIT_PROGRESS"
CUDA_ALLOCATOR_ENV = "ONNXJIT_CUDA_ALLOCATOR"
MAX_TENSOR_BYTES_ENV = "ONNXJIT_MAX_TENSOR_BYTES"
MAX_RUN_BYTES_ENV = "ONNXJIT_MAX_RUN_BYTES"

# Session config entries.
PROGRESS_KEY = "onnxjit.progress"
MAX_TENSOR_BYTES_KEY = "onnxjit.max_tensor_bytes"
MAX_RUN_BYTES_KEY = "onnxjit.max_run_bytes"
CONV_WINOGRAD_KEY = "onnxjit.conv_winograd"
DISABLED_OPTIMIZERS_KEY = "onnxjit.disabled_optimizers"
# onnxruntime's key, which onnxjit honours the same way
EXTERNAL_DATA_FOLDER_KEY = "session.model_external_initializers_file_folder_path"


@dataclass(frozen=True)
class Knob:
    """One setting: its environment variable and/or session config entry, its default as a
    user would write it, and what it does."""

    env: str | None
    key: str | None
    default: str
    meaning: str


KNOBS: tuple[Knob, ...] = (
    Knob(
        CACHE_DIR_ENV,
        None,
        "`$XDG_CACHE_HOME/onnxjit` or `~/.cache/onnxjit`",
        "folder of compiled kernels and generated kernel sources (in a subfolder `v-<key>`, "
        "see onnxjit.jitcache)",
    ),
    Knob(
        NUM_THREADS_ENV,
        None,
        "all cores",
        "default thread count (a whole number of 1 or more); "
        "`SessionOptions.intra_op_num_threads` overrides it per session",
    ),
    Knob(
        PARALLEL_THRESHOLD_ENV,
        None,
        "32768",
        "element count above which kernels run on onnxjit's thread pool (0 or more)",
    ),
    Knob(
        VECTOR_WIDTH_ENV,
        None,
        "auto",
        "`auto`: onnxjit's kernels may use 512-bit vectors on CPUs with AVX-512; `native`: "
        "LLVM's tuning for the CPU",
    ),
    Knob(
        CUDA_ALLOCATOR_ENV,
        None,
        "caching",
        "device memory of the CUDA provider: `caching` (freed blocks are reused, see "
        "onnxjit.device.empty_cache) or `numba` (numba-cuda's own allocator)",
    ),
    Knob(
        PROGRESS_ENV,
        PROGRESS_KEY,
        "auto",
        "progress bar while a first run compiles: `auto` (on a terminal or in Jupyter), "
        "`on`, `off`",
    ),
    Knob(
        MAX_TENSOR_BYTES_ENV,
        MAX_TENSOR_BYTES_KEY,
        "25%",
        "cap on the bytes of one tensor whose size comes from data (see onnxjit.limits)",
    ),
    Knob(
        MAX_RUN_BYTES_ENV,
        MAX_RUN_BYTES_KEY,
        "50%",
        "cap on the bytes such tensors add up to in one run (see onnxjit.limits)",
    ),
    Knob(
        None,
        CONV_WINOGRAD_KEY,
        "1",
        "`1`: 3x3 stride-1 convolutions of 16+ channels run the Winograd F(2x2, 3x3) "
        "algorithm; `0`: the direct form only",
    ),
    Knob(
        None,
        DISABLED_OPTIMIZERS_KEY,
        "(none)",
        "comma-separated graph pass names to skip",
    ),
    Knob(
        None,
        EXTERNAL_DATA_FOLDER_KEY,
        "(none)",
        "folder of external data for a model given as bytes",
    ),
)

SESSION_KEYS: frozenset[str] = frozenset(k.key for k in KNOBS if k.key)
"""The session config entries onnxjit acts on."""

_DEFAULT_THRESHOLD = 1 << 15
_VECTOR_WIDTHS = ("auto", "native")
_CUDA_ALLOCATORS = ("caching", "numba")
_PROGRESS = {
    "auto": None,
    "on": True,
    "1": True,
    "true": True,
    "off": False,
    "0": False,
    "false": False,
}


class _EntryError(ConfigurationError, InvalidArgumentError):
    """ConfigurationError for the entries (``onnxjit.progress``, ``onnxjit.conv_winograd``) that
    raised InvalidArgumentError before onnxjit read every knob in one place, so that callers
    catching either keep working."""


def _key_label(key: str) -> str:
    return f"session config entry {key!r}"


def _refuse(label: str, raw: str, expected: str, fix: str, cls: type = ConfigurationError):
    return cls(f"{label}={raw!r} is not {expected}; {fix}")


def _whole_number(label: str, raw: str, least: int, fix: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        value = least - 1
    if value < least:
        raise _refuse(label, raw, f"a whole number of {least} or more", fix)
    return value


def _choice(label: str, raw: str, choices: Collection[str], fix: str) -> str:
    key = raw.strip().lower()
    if key not in choices:
        raise _refuse(label, raw, f"one of {', '.join(choices)}", fix)
    return key


def _progress(label: str, raw: str, cls: type = ConfigurationError) -> bool | None:
    key = raw.strip().lower()
    if key not in _PROGRESS:
        raise _refuse(
            label,
            raw,
            "a progress bar mode",
            "use 'auto', 'on' or 'off' (also accepted: '1', '0', 'true', 'false')",
            cls,
        )
    return _PROGRESS[key]


# -- environment variables -----------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """The process-wide settings, from the environment (see :data:`KNOBS`)."""

    cache_dir: Path
    num_threads: int
    parallel_threshold: int
    vector_width: str  # "auto" or "native"
    limits: _limits.Limits
    progress: bool | None  # True: always, False: never, None: auto
    cuda_allocator: str = "caching"  # or "numba"


def _default_cache_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "onnxjit"


def _env_limits(env: Mapping[str, str]) -> _limits.Limits:
    tensor = env.get(MAX_TENSOR_BYTES_ENV) or "25%"
    run = env.get(MAX_RUN_BYTES_ENV) or "50%"
    return _limits.Limits(
        _limits.parse_bytes(tensor, MAX_TENSOR_BYTES_ENV),
        _limits.parse_bytes(run, MAX_RUN_BYTES_ENV),
        f"{MAX_TENSOR_BYTES_ENV} (or session config entry {MAX_TENSOR_BYTES_KEY!r})",
        f"{MAX_RUN_BYTES_ENV} (or session config entry {MAX_RUN_BYTES_KEY!r})",
    )


def read_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Parse the ``ONNXJIT_*`` variables of ``environ`` (default: the process environment);
    unset and empty variables take their defaults. Raises ConfigurationError naming the
    first variable onnxjit cannot use. Called once, at import, for :data:`SETTINGS`."""
    env = os.environ if environ is None else environ

    def raw(name: str) -> str | None:
        value = env.get(name)
        return value if value else None  # empty means unset, as in a shell's VAR= prefix

    cache_dir = _default_cache_dir(env)
    if (cache := raw(CACHE_DIR_ENV)) is not None:
        cache_dir = Path(cache).expanduser()
    num_threads = os.cpu_count() or 1
    if (threads := raw(NUM_THREADS_ENV)) is not None:
        num_threads = _whole_number(NUM_THREADS_ENV, threads, 1, "unset it to use every core")
    threshold = _DEFAULT_THRESHOLD
    if (text := raw(PARALLEL_THRESHOLD_ENV)) is not None:
        fix = f"unset it for the default {_DEFAULT_THRESHOLD}"
        threshold = _whole_number(PARALLEL_THRESHOLD_ENV, text, 0, fix)
    width = "auto"
    if (text := raw(VECTOR_WIDTH_ENV)) is not None:
        width = _choice(VECTOR_WIDTH_ENV, text, _VECTOR_WIDTHS, "unset it or pick one")
    progress = None
    if (text := raw(PROGRESS_ENV)) is not None:
        progress = _progress(PROGRESS_ENV, text)
    allocator = "caching"
    if (text := raw(CUDA_ALLOCATOR_ENV)) is not None:
        allocator = _choice(CUDA_ALLOCATOR_ENV, text, _CUDA_ALLOCATORS, "unset it or pick one")
    return Settings(
        cache_dir=cache_dir,
        num_threads=num_threads,
        parallel_threshold=threshold,
        vector_width=width,
        limits=_env_limits(env),
        progress=progress,
        cuda_allocator=allocator,
    )


def limits_from_environment(environ: Mapping[str, str]) -> _limits.Limits:
    """The byte caps ``ONNXJIT_MAX_TENSOR_BYTES`` / ``ONNXJIT_MAX_RUN_BYTES`` of ``environ``
    give every session (defaults 25 % and 50 % of the memory the process may use)."""
    return _env_limits(environ)


# -- session config entries ----------------------------------------------------------------


@dataclass(frozen=True)
class SessionSettings:
    """One session's settings: its config entries over the process-wide :data:`SETTINGS`."""

    limits: _limits.Limits
    progress: bool | None  # True: always, False: never, None: auto
    conv_winograd: bool
    disabled_optimizers: frozenset[str]  # from the entry only; the constructor's list is apart
    external_data_folder: str | None


def session_settings(
    entries: Mapping[str, str],
    known_passes: Collection[str] | None = None,
    base: Settings | None = None,
) -> SessionSettings:
    """Parse a session's config entries (``SessionOptions`` keeps them; keys onnxjit does not
    act on are skipped) over ``base`` (default :data:`SETTINGS`).

    ``known_passes``, when given, are the graph pass names ``onnxjit.disabled_optimizers`` may
    list. Raises ConfigurationError naming the first entry onnxjit cannot use.
    """
    base = SETTINGS if base is None else base
    lim = base.limits
    tensor, run = lim.max_tensor_bytes, lim.max_run_bytes
    tensor_setting, run_setting = lim.tensor_setting, lim.run_setting
    if MAX_TENSOR_BYTES_KEY in entries:
        tensor_setting = _key_label(MAX_TENSOR_BYTES_KEY)
        tensor = _limits.parse_bytes(entries[MAX_TENSOR_BYTES_KEY], tensor_setting)
    if MAX_RUN_BYTES_KEY in entries:
        run_setting = _key_label(MAX_RUN_BYTES_KEY)
        run = _limits.parse_bytes(entries[MAX_RUN_BYTES_KEY], run_setting)

    progress = base.progress
    if PROGRESS_KEY in entries:
        progress = _progress(_key_label(PROGRESS_KEY), str(entries[PROGRESS_KEY]), _EntryError)

    winograd = str(entries.get(CONV_WINOGRAD_KEY, "1"))
    if winograd.strip() not in ("0", "1"):
        raise _refuse(
            _key_label(CONV_WINOGRAD_KEY),
            winograd,
            "'1' or '0'",
            "use '1' (Winograd convolutions allowed, the default) or '0' (direct form only)",
            _EntryError,
        )

    listed = str(entries.get(DISABLED_OPTIMIZERS_KEY, ""))
    disabled = frozenset(x.strip() for x in listed.split(",") if x.strip())
    if known_passes is not None and not disabled <= set(known_passes):
        unknown = sorted(disabled - set(known_passes))
        raise _refuse(
            _key_label(DISABLED_OPTIMIZERS_KEY),
            listed,
            "a comma-separated list of graph pass names",
            f"{unknown} are not passes; known passes: {sorted(known_passes)}",
        )

    folder = entries.get(EXTERNAL_DATA_FOLDER_KEY) or None
    return SessionSettings(
        limits=_limits.Limits(tensor, run, tensor_setting, run_setting),
        progress=progress,
        conv_winograd=winograd.strip() == "1",
        disabled_optimizers=disabled,
        external_data_folder=None if folder is None else str(folder),
    )


def progress_mode(entry: str | None) -> bool | None:
    """The progress bar's mode for a session whose ``onnxjit.progress`` entry is ``entry``
    (None: not set, the environment's mode). Raises ConfigurationError for an unknown mode."""
    if entry is None:
        return SETTINGS.progress
    return _progress(_key_label(PROGRESS_KEY), str(entry), _EntryError)


SETTINGS = read_settings()
_limits.install_default(SETTINGS.limits)


def _configure_kernels() -> None:
    # The kernels' cache folder and vector width must be set before any kernel compiles or
    # loads; kernel modules are imported after this module (onnxjit/__init__.py).
    from onnxjit import jitcache
    from onnxjit.kernels import _jit

    folder = jitcache.cache_folder(SETTINGS.cache_dir)
    _jit.configure(
        cache_dir=str(folder / "numba"),
        parallel_threshold=SETTINGS.parallel_threshold,
        vector_width=SETTINGS.vector_width,
        # generated kernels (onnxjit.codegen.modcache) and the pool's entry points
        source_roots={"gen": str(folder / "gen"), "onnxjit": str(Path(__file__).parent)},
    )


_configure_kernels()
