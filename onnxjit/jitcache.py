"""The on-disk kernel cache: where it lives, what it is keyed by, what happens when it cannot be
written.

Every compiled kernel (hand-written in ``onnxjit.kernels`` or generated) is cached by Numba
(``cache=True``) under ``<ONNXJIT_CACHE_DIR>/v-<key>/numba``, generated kernel sources under
``.../gen``. onnxjit's own cache locator (``onnxjit.kernels._jit._KernelLocator``) puts a
kernel's entries in a folder named from its file's place in the package (``numba/kernels/cpu``,
``numba/gen``), not from where the package is installed, and no Numba setting is changed: the
caller's own cached functions go where Numba puts them.

Numba invalidates an entry when the file that defines the function changes, but not when a
helper it inlines from another module does (``kernels/vecmath.py`` is inlined into dozens of
kernels), nor when onnxjit itself changes what it generates; so the folder is named
by a hash of every kernel source, of the code generators, and of the onnxjit, Numba, llvmlite
and Python versions. Any change there starts a new folder; older folders are left for the user
to delete.

When the folder cannot be created or written (read-only file system, a path that is a file,
no permission), one warning says so and the process compiles into a temporary folder that is
removed at exit: nothing persists, nothing fails. Damaged entries are handled per kernel
(``onnxjit.kernels._jit._SafeCache``).
"""

from __future__ import annotations

import atexit
import hashlib
import platform
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def _kernel_sources() -> list[Path]:
    """The files whose code ends up in compiled kernels."""
    from onnxjit import kernels  # the installed package or the checkout's kernels/ folder

    roots = [Path(p) for p in kernels.__path__]
    files: list[Path] = []
    for root in roots:
        files += sorted(root.rglob("*.py"))
    files += sorted((_HERE / "codegen").glob("*.py"))
    files.append(_HERE / "backends" / "cpu" / "pool.py")
    return files


def cache_key() -> str:
    """A short hash of everything the cached machine code depends on (see the module
    docstring)."""
    from importlib import metadata

    import llvmlite
    import numba

    try:
        version = metadata.version("onnxjit")
    except metadata.PackageNotFoundError:  # a source checkout that was never installed
        version = "checkout"
    h = hashlib.sha256()
    for part in (version, numba.__version__, llvmlite.__version__, sys.version):
        h.update(part.encode())
        h.update(b"\0")
    h.update(platform.machine().encode())
    for f in _kernel_sources():
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


_folder: Path | None = None


def cache_folder(root: Path) -> Path:
    """The folder this process caches kernels in (decided once): ``root/v-<key>`` when it can
    be written, else a temporary folder (one RuntimeWarning)."""
    global _folder
    if _folder is not None:
        return _folder
    folder = Path(root).expanduser() / f"v-{cache_key()}"
    try:
        (folder / "numba").mkdir(parents=True, exist_ok=True)
        (folder / "gen").mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
            pass
    except OSError as exc:
        tmp = Path(tempfile.mkdtemp(prefix="onnxjit-cache-"))
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
        warnings.warn(
            f"onnxjit: cannot write the kernel cache in {folder} ({exc.strerror or exc}); "
            f"kernels compile into {tmp} for this process only. Set ONNXJIT_CACHE_DIR to a "
            "writable folder to keep them between runs",
            RuntimeWarning,
            stacklevel=2,
        )
        folder = tmp
        (folder / "numba").mkdir(parents=True, exist_ok=True)
        (folder / "gen").mkdir(parents=True, exist_ok=True)
    _folder = folder
    return folder
