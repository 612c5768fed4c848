"""File-backed modules for generated code.

Numba can only cache (``cache=True``) functions that live in a real source file, so generated
kernels are written to ``<cache folder>/gen/<sha256 of the source>.py`` (:mod:`onnxjit.jitcache`)
and imported from there.
The write is atomic (temporary file in the same folder, then ``os.replace``) so concurrent
processes never import a half-written file. Modules are kept in an in-process dict by hash.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
from pathlib import Path
from types import ModuleType

from onnxjit import jitcache
from onnxjit.config import SETTINGS

_MODULES: dict[str, ModuleType] = {}
_LOCK = threading.Lock()


def gen_dir() -> Path:
    """The folder that holds generated sources (created on first use)."""
    d = jitcache.cache_folder(SETTINGS.cache_dir) / "gen"
    d.mkdir(parents=True, exist_ok=True)
    return d


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def path_for(source: str) -> Path:
    """Where the module for ``source`` lives (whether or not it was written yet)."""
    return gen_dir() / f"{source_hash(source)}.py"


def _write_atomic(path: Path, source: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".py")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(source)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def load(source: str) -> ModuleType:
    """Import the module whose code is ``source``, writing its file first if needed."""
    h = source_hash(source)
    mod = _MODULES.get(h)
    if mod is not None:
        return mod
    with _LOCK:
        mod = _MODULES.get(h)
        if mod is not None:
            return mod
        path = gen_dir() / f"{h}.py"
        try:
            ok = path.read_text(encoding="utf-8") == source
        except OSError:
            ok = False
        if not ok:  # missing, or damaged by something else: (re)write it
            _write_atomic(path, source)
        name = f"onnxjit_gen_{h[:24]}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:  # pragma: no cover - importlib contract
            raise ImportError(f"cannot import generated module {path}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        _MODULES[h] = mod
        return mod


def loaded() -> dict[str, ModuleType]:
    """The modules imported so far in this process, by source hash (for inspection)."""
    return dict(_MODULES)
