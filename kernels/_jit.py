"""The only place that sets Numba options, and only on onnxjit's own functions.

Kernel modules decorate with :func:`njit` (serial) or :func:`pjit` (pool kernels, which
onnxjit's thread pool runs on several threads: :mod:`onnxjit.kernels.cpu.runtime.chunks`).
Math-heavy kernels pass ``fma=True``: floating-point contraction lets LLVM turn ``a * b + c``
into one fused multiply-add (one rounding instead of two, so at most an ulp from numpy's
result, never further), which shortens the polynomial chains of kernels/vecmath.py by a third.
It is not the default because some kernels round a computed coordinate (Resize, RoiAlign) and
must round exactly as numpy does.

Nothing here changes ``numba.config``, which the caller's own Numba code reads too:

* Every kernel is cached on disk (``cache=True``) under the folder given to :func:`configure`,
  through a cache locator of onnxjit's own (:class:`_KernelLocator`) that only onnxjit's
  dispatchers use; the caller's cached functions go where Numba's rules put them.
* The 512-bit vector preference (``ONNXJIT_VECTOR_WIDTH=auto`` on a CPU with AVX-512) is an
  LLVM function attribute on onnxjit's functions (:class:`_KernelCompiler`), not a change of
  the process's CPU feature string.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import platform
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping

import numba
from llvmlite import ir as llvmir
from numba.core import compiler
from numba.core.caching import CompileResultCacheImpl, FunctionCache, NullCache
from numba.core.codegen import JITCodeLibrary
from numba.core.compiler_machinery import LoweringPass, register_pass
from numba.core.runtime import rtsys
from numba.core.typed_passes import NativeLowering, NativeParforLowering

PARALLEL_THRESHOLD = 1 << 15

_OPTIONS = dict(cache=True, nogil=True, error_model="numpy")

# Statistics hooks (set by onnxjit.jitstats; kernels/ does not import onnxjit):
# ON_LOAD(py_func, signature, seconds) after a kernel is loaded from the on-disk cache,
# ON_CFUNC(py_func, signature, seconds, loaded) after a C callback is compiled or loaded.
# CFUNC_SCOPE() is a context manager around a C callback's compilation.
ON_LOAD = None
ON_CFUNC = None
CFUNC_SCOPE = contextlib.nullcontext

# Set by configure(): whether onnxjit's functions ask LLVM for 512-bit vectors (see
# _wide_vectors), and where their cache entries go (see _KernelLocator).
WIDE_VECTORS = False
_CACHE_DIR: str | None = None
_SOURCE_ROOTS: list[tuple[str, str]] = []  # (folder, label), deepest folder first


def configure(
    cache_dir: str | None = None,
    parallel_threshold: int | None = None,
    vector_width: str = "native",
    source_roots: Mapping[str, str] | None = None,
) -> None:
    """Set the on-disk cache folder, the parallel threshold and the vector width policy.

    Call before any kernel compiles. ``cache_dir`` holds the compiled kernels; a function
    defined in a file under one of ``source_roots`` (label -> folder; this package's own folder
    is ``"kernels"``) is cached in ``<cache_dir>/<label>/<the file's folder below the root>``,
    so the entries do not depend on where onnxjit is installed. ``vector_width`` is ``"auto"``
    (512-bit vectors where the CPU has AVX-512, see :func:`_wide_vectors`) or ``"native"``
    (LLVM's own tuning).
    """
    global PARALLEL_THRESHOLD, WIDE_VECTORS, _CACHE_DIR, _SOURCE_ROOTS
    if cache_dir:
        os.makedirs(cache_dir, exist_ok=True)
        _CACHE_DIR = os.path.realpath(cache_dir)
    roots = {"kernels": os.path.dirname(os.path.abspath(__file__)), **(source_roots or {})}
    found = [(os.path.realpath(folder), label) for label, folder in roots.items()]
    _SOURCE_ROOTS = sorted(found, key=lambda item: len(item[0]), reverse=True)
    if parallel_threshold is not None:
        PARALLEL_THRESHOLD = int(parallel_threshold)
    WIDE_VECTORS = vector_width == "auto" and _wide_vectors()


def _wide_vectors() -> bool:
    """Whether onnxjit's functions should ask LLVM for 512-bit vectors: on a CPU with AVX-512.

    LLVM's tuning for Intel server cores prefers 256-bit vectors (older parts lowered their
    clock for 512-bit work), which costs the compute-bound kernels much of their speed:
    vecmath chains ran 1.4 to 1.6 times as fast with 16 float32 lanes on this project's
    test machine. The preference is lifted per function (:class:`_KernelCompiler`), so the
    caller's own Numba code keeps LLVM's tuning; a feature string or CPU name the user gave
    Numba (NUMBA_CPU_FEATURES, NUMBA_CPU_NAME) is taken as the user's choice and left alone.
    """
    if numba.config.CPU_FEATURES is not None or numba.config.CPU_NAME is not None:
        return False
    from numba.core.codegen import get_host_cpu_features

    # Numba's own query: it honours NUMBA_ENABLE_AVX=0 (no avx* features at all)
    features = get_host_cpu_features().split(",")
    return "+avx512f" in features and "+avx512vl" in features


@functools.cache
def vector_registers() -> int:
    """How many vector registers the compiled kernels have: 16 on x86 without AVX-512 (ymm0 to
    ymm15), 32 with it (and on other targets, such as AArch64's v0 to v31). Read from the
    feature string Numba compiles for (the user's NUMBA_CPU_FEATURES where set)."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686", "x86"):
        return 32
    features = numba.config.CPU_FEATURES
    if features is None:
        from numba.core.codegen import get_host_cpu_features

        features = get_host_cpu_features()
    return 32 if "+avx512f" in features.split(",") else 16


@functools.cache
def cpu_name() -> str:
    """LLVM's name of the CPU the kernels are compiled for ("znver3", "icelake-server", ...):
    the user's NUMBA_CPU_NAME where set (other than "host"), else the host's."""
    name = numba.config.CPU_NAME
    if name and name != "host":
        return name
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_name()


_FMA = {"contract"}


def _options(fma: bool, kw: dict) -> dict:
    opts = {**_OPTIONS, **kw}
    if fma:
        opts["fastmath"] = set(kw.get("fastmath") or ()) | _FMA
    return opts


# -- 512-bit vectors, per function -------------------------------------------------------

# LLVM's X86 back end reads this function attribute before the CPU's tuning (which prefers
# 256-bit vectors on Intel server cores even with AVX-512): the loop and SLP vectorisers of a
# function that carries it may use 512-bit registers. It only acts where the CPU has AVX-512.
_WIDE_ATTRIBUTE = '"prefer-vector-width"="512"'


class _WideFunctionAttributes(llvmir.FunctionAttributes):
    """A function's attributes plus :data:`_WIDE_ATTRIBUTE` (llvmlite's own set only takes
    attributes without a value)."""

    def __bool__(self) -> bool:
        return True  # printed even when the function has no other attribute

    def _to_list(self, ret_type):
        return [*super()._to_list(ret_type), _WIDE_ATTRIBUTE]


class _WideVectorLibrary(JITCodeLibrary):
    """A code library whose functions all carry :data:`_WIDE_ATTRIBUTE`.

    The attribute goes on every function defined in the modules lowered into this library
    (the kernel, the Numba-level inlined helpers, the wrappers), before LLVM optimises them.
    Functions of other libraries linked in (onnxjit's own helpers compiled apart carry it too;
    Numba's library code, such as its implementations of numpy functions, does not) were
    optimised in their own library and keep the vectors they got there.
    """

    def add_ir_module(self, ir_module):
        for fn in ir_module.functions:
            if fn.is_declaration or isinstance(fn.attributes, _WideFunctionAttributes):
                continue
            wide = _WideFunctionAttributes(fn.attributes)
            wide.alignstack = fn.attributes.alignstack
            wide.personality = fn.attributes.personality
            fn.attributes = wide
        super().add_ir_module(ir_module)


@register_pass(mutates_CFG=False, analysis_only=True)
class _WideVectorLowering(LoweringPass):
    """Hands the lowering a :class:`_WideVectorLibrary` when :data:`WIDE_VECTORS` is set
    (Numba's lowering pass creates a plain library when the state has none)."""

    _name = "onnxjit_wide_vector_library"

    def __init__(self) -> None:
        LoweringPass.__init__(self)

    def run_pass(self, state) -> bool:
        if not WIDE_VECTORS or state.library is not None:
            return False
        codegen = state.targetctx.codegen()
        if codegen._library_class is not JITCodeLibrary:  # a target onnxjit does not know
            return False
        library = _WideVectorLibrary(codegen, state.func_id.func_qualname)
        library.enable_object_caching()  # as Numba's lowering does: the cache serialises it
        state.library = library
        return False


class _KernelCompiler(compiler.Compiler):
    """Numba's compiler with :class:`_WideVectorLowering` in front of the lowering: the
    ``pipeline_class`` of every onnxjit dispatcher and C callback."""

    def define_pipelines(self):
        pipelines = super().define_pipelines()
        for pm in pipelines:
            order = [cls for cls, _ in pm.passes]
            at = next(
                (i for i, c in enumerate(order) if c in (NativeLowering, NativeParforLowering)),
                None,
            )
            if at:
                pm.add_pass_after(_WideVectorLowering, order[at - 1])
                pm.finalize()
        return pipelines


def _codegen_marks() -> tuple[str, ...]:
    """What onnxjit's pipeline adds to the machine code beyond Numba's codegen settings (its
    cache entries are keyed by it, so code compiled with and without wide vectors never
    mixes)."""
    return (_WIDE_ATTRIBUTE,) if WIDE_VECTORS else ()


def njit(fn=None, *, fma: bool = False, **kw):
    """Serial kernel: ``@njit``, ``@njit(inline="always")``, ``@njit(fma=True)``."""
    opts = _options(fma, kw)
    cached = opts.pop("cache", False)
    if fn is None:
        return lambda f: _safe(numba.njit(pipeline_class=_KernelCompiler, **opts)(f), cached)
    return _safe(numba.njit(pipeline_class=_KernelCompiler, **opts)(fn), cached)


def centry(sig):
    """``@numba.cfunc(sig, cache=True)`` with onnxjit's cache safety (see :class:`_SafeCache`);
    the pool's generated entry points use it."""

    def deco(fn):
        from numba.core import sigutils
        from numba.core.ccallback import CFunc

        res = CFunc(
            fn,
            sigutils.normalize_signature(sig),
            locals={},
            options={"nopython": True, **_OPTIONS_NOCACHE},
            pipeline_class=_KernelCompiler,
        )
        res._cache = _new_cache(fn)
        res._cache.report_loads = False  # reported below, once, as a C callback
        t0 = time.perf_counter()
        with CFUNC_SCOPE():  # Numba announces no event for a C callback: helpers nest in it
            res.compile()
        if ON_CFUNC is not None:
            ON_CFUNC(fn, res._sig, time.perf_counter() - t0, res.cache_hits > 0)
        return res

    return deco


_OPTIONS_NOCACHE = {k: v for k, v in _OPTIONS.items() if k != "cache"}


# -- the on-disk cache ---------------------------------------------------------------------


def _cache_subpath(py_file: str) -> str:
    """The folder, below the cache folder, of the functions defined in ``py_file``: the
    file's folder relative to the deepest source root holding it, under the root's label
    (``kernels/cpu`` for kernels/cpu/norm.py, ``gen`` for a generated kernel), so it is the same
    wherever onnxjit is installed. A file under no root (a test's own kernel) gets its folder's
    name and a hash of the folder's path, as Numba names its own cache folders."""
    path = os.path.dirname(os.path.realpath(py_file))
    for root, label in _SOURCE_ROOTS:
        if path == root or path.startswith(root + os.sep):
            rel = os.path.relpath(path, root)
            return label if rel == os.curdir else os.path.join(label, rel)
    digest = hashlib.sha1(path.encode()).hexdigest()
    return f"{os.path.basename(path)}_{digest}"


@functools.cache
def _source_stamp(path: str, mtime: float, size: int) -> bytes:
    # keyed by the file's time and size too, so a file changed while the process runs is
    # hashed again
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).digest()


class _KernelLocator:
    """Where the cache entries of an onnxjit function go: ``<cache dir>/<_cache_subpath>``.

    Numba's cache implementation asks a locator for the entries' folder, for a stamp of the
    source (an entry made from other source is stale; here the file's content hash, so that
    a copied or moved file keeps its entries) and for a disambiguator between functions of one
    name in a file (the line it starts on).
    """

    def __init__(self, py_func, py_file: str) -> None:
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = os.path.join(_CACHE_DIR or "", _cache_subpath(py_file))

    @classmethod
    def from_function(cls, py_func, py_file: str) -> _KernelLocator | None:
        """The locator, or None when there is no cache folder, the source file is not a file
        (code made with ``exec``) or the folder cannot be written."""
        if not _CACHE_DIR or not os.path.isfile(py_file):
            return None
        locator = cls(py_func, py_file)
        try:
            locator.ensure_cache_path()
        except OSError:
            return None
        return locator

    def ensure_cache_path(self) -> None:
        """Create the folder; raise OSError when it cannot take files."""
        os.makedirs(self._cache_path, exist_ok=True)
        tempfile.TemporaryFile(dir=self._cache_path).close()

    def get_cache_path(self) -> str:
        return self._cache_path

    def get_source_stamp(self) -> bytes:
        st = os.stat(self._py_file)
        return _source_stamp(self._py_file, st.st_mtime, st.st_size)

    def get_disambiguator(self) -> str:
        return str(self._lineno)


class _NoCacheFolder(Exception):
    """An onnxjit function cannot be cached (see :meth:`_KernelLocator.from_function`)."""


class _KernelCacheImpl(CompileResultCacheImpl):
    """Numba's cache of compile results with :class:`_KernelLocator` as the only locator.

    Numba's own ``__init__`` picks the first locator of its list (or of the user's
    NUMBA_CACHE_LOCATOR_CLASSES) that accepts the function; onnxjit's functions always go to
    onnxjit's folder, so this one sets the same three things from its locator alone.
    """

    def __init__(self, py_func) -> None:
        source = inspect.getfile(py_func)
        qualname = getattr(py_func, "__qualname__", py_func.__name__)
        locator = _KernelLocator.from_function(py_func, source)
        if locator is None:
            raise _NoCacheFolder(f"{qualname} ({source}) has no writable cache folder")
        self._lineno = py_func.__code__.co_firstlineno
        self._locator = locator
        module = os.path.splitext(os.path.basename(source))[0]
        abiflags = getattr(sys, "abiflags", "")
        self._filename_base = self.get_filename_base(f"{module}.{qualname}", abiflags)


def _new_cache(py_func):
    """The on-disk cache of an onnxjit function (:class:`_SafeCache`), or Numba's null cache
    (compile every time, one warning) when it has no folder to go to."""
    try:
        return _SafeCache(py_func)
    except _NoCacheFolder as exc:
        warnings.warn(
            f"onnxjit: the kernel {exc} and compiles in every process",
            RuntimeWarning,
            stacklevel=3,
        )
        return NullCache()


class _SafeCache(FunctionCache):
    """Numba's on-disk cache, made to survive damaged entries.

    Numba raises (an unpickling error, a ValueError) when an index or data file is truncated
    or overwritten; here the entry is dropped, a warning names it, and the function compiles
    again (and is saved afresh). A failed save warns and leaves the function compiled in
    memory. Concurrent writers are safe in Numba itself: files are written to a temporary
    name and renamed into place.
    """

    _impl_class = _KernelCacheImpl
    report_loads = True

    def _index_key(self, sig, codegen):
        sig_key, codegen_key, code_key = super()._index_key(sig, codegen)
        return sig_key, (*codegen_key, *_codegen_marks()), code_key

    def load_overload(self, sig, target_context):
        t0 = time.perf_counter()
        try:
            # Numba's load_overload refreshes the target context first: it imports every
            # lowering registry (numba.np.linalg among them, whose BLAS check imports
            # scipy.linalg: 0.2 s of the 0.29 s on a Zen 3), which loading machine code
            # from disk does not use. The runtime (NRT), which that code calls, is the part
            # it needs. Compiling refreshes the contexts itself (numba's CompilerBase), and
            # parfors' reload hooks, the only ones Numba defines, do not concern kernels
            # compiled without parallel=True.
            rtsys.initialize(target_context)
            data = None  # stays None where the guard swallows an error (as Numba's does)
            with self._guard_against_spurious_io_errors():
                data = self._load_overload(sig, target_context)
        except Exception as exc:
            self._drop(f"could not be read ({type(exc).__name__}: {exc}); compiling it again")
            return None
        if data is not None and ON_LOAD is not None and self.report_loads:
            ON_LOAD(self._py_func, sig, time.perf_counter() - t0)
        return data

    def save_overload(self, sig, data):
        try:
            super().save_overload(sig, data)
        except Exception:
            self._drop("could not be updated; starting it afresh")
            try:
                super().save_overload(sig, data)
            except Exception as exc:
                warnings.warn(
                    f"onnxjit: cannot save the compiled kernel {self._label} to the kernel "
                    f"cache ({type(exc).__name__}: {exc}); it stays compiled in memory",
                    RuntimeWarning,
                    stacklevel=2,
                )

    @property
    def _label(self) -> str:
        return getattr(self._py_func, "__qualname__", "?")

    def _drop(self, why: str) -> None:
        index = getattr(self._cache_file, "_index_path", None)
        warnings.warn(
            f"onnxjit: the kernel cache entry of {self._label} ({index}) {why}",
            RuntimeWarning,
            stacklevel=3,
        )
        if index:
            with contextlib.suppress(OSError):
                os.unlink(index)


class _LazyCache:
    """Stands in for a dispatcher's :class:`_SafeCache` until the dispatcher first uses it.

    Building Numba's cache object finds and creates the cache folder and writes a probe file
    into it (about 0.25 ms); onnxjit defines several hundred kernels and a model uses a few
    dozen, so building them all at import cost a fifth of ``import onnxjit``. The real cache
    is built on first use, from the first kernel load or compile onward.
    """

    __slots__ = ("_py_func", "_real")

    def __init__(self, py_func) -> None:
        self._py_func = py_func
        self._real: _SafeCache | NullCache | None = None

    def __getattr__(self, name: str):
        if self._real is None:
            self._real = _new_cache(self._py_func)
        return getattr(self._real, name)


def _safe(disp, cached: bool = True):
    """Give a dispatcher the damage-tolerant on-disk cache, built lazily (``cached=False``:
    leave it uncached)."""
    if cached:
        disp._cache = _LazyCache(disp.py_func)
    return disp


def pjit(fn=None, *, fma: bool = False, **kw):
    """Pool kernel: takes the control array first and claims its chunks
    (:mod:`onnxjit.kernels.cpu.runtime.chunks`); run it through
    ``onnxjit.backends.cpu.pool.run_parallel``.

    It compiles as a serial, GIL-free function: the threads are onnxjit's pool, not Numba's
    ``parallel=True`` (see :mod:`onnxjit.backends.cpu.pool` for why)."""
    return njit(fn, fma=fma, **kw)
