"""A kernel's serial and pool entry points, generated from its per-item body.

Most multi-threaded kernels are a loop over independent items (rows, planes, tiles) around one
``@njit(inline="always")`` body. The body is written once; :func:`twins` writes the two loops
around it: the serial entry point runs every item, the pool entry point (the control array
first, run by ``onnxjit.backends.cpu.pool.run_parallel``) runs the chunks it claims
(:func:`.chunks.claim`)::

    @njit(inline="always")
    def _row(x, scale, y, n, r):
        ...

    scale_rows, scale_rows_par = twins(
        "scale_rows(x, scale, y)", _row, setup="n = x.shape[1]", items={"r": "x.shape[0]"}
    )

defines the equivalent of::

    @njit
    def scale_rows(x, scale, y):
        n = x.shape[1]
        for r in range(x.shape[0]):
            _row(x, scale, y, n, r)

    @pjit
    def scale_rows_par(ctl, x, scale, y):
        n = x.shape[1]
        n_items = x.shape[0]
        while True:
            chunk_lo, chunk_hi = claim(ctl, n_items)
            if chunk_lo >= chunk_hi:
                break
            for r in range(chunk_lo, chunk_hi):
                _row(x, scale, y, n, r)

A declaration gives the kernel's signature; ``setup``, statements run once per call and thread
before the loop (views, geometry, scratch buffers); ``items``, the item index and its count, or
several (outermost first) for nested loops, which the pool entry point flattens; and
``state``, a value carried from one item to the next (the body returns its next value; each
thread starts from the initial one). The body is called with its own parameter names, each of
which must be one of those: a kernel parameter, a value the setup assigns, an item index or the
state. Everything is Python source over those names and the declaring module's globals (as they
are at the declaration), so that the entry points are the loops one would write by hand, down to
the IR Numba hands LLVM: a setup written as an inlined function, taking every parameter and
returning a tuple, added reference counting of every array it passed in and out (a tenth of the
unoptimised IR of the kernels that had one).

Why generated source, and why it caches: the entry points must be real functions with the
kernel's own parameters (callers, the pool's argument packing and Numba's explicit signatures
see them), so their source is written here and compiled. Numba caches a function on disk only
where it finds the function's file (``inspect.getfile``), which is why ``exec`` of a string
usually defeats ``cache=True``. These functions carry the declaring module's file name and the
body's line, so Numba files them beside that module's hand-written kernels, keyed by the
module's content (editing the body re-keys them as it re-keys the module's other kernels) and
by their own names. The source of every pair is kept in :data:`GENERATED`; compiled code is kept
between processes in the kernel cache folder (:func:`_compiled`).
"""

from __future__ import annotations

import atexit
import contextlib
import marshal
import os
import sys
import tempfile
from types import CodeType, FunctionType

from ... import _jit
from ..._jit import njit, pjit
from .chunks import claim

# "module.name" of each generated serial entry point -> the source of its pair.
GENERATED: dict[str, str] = {}

# Compiled code of the generated pairs by source, kept in the kernel cache folder between
# processes: compiling every pair again made `import onnxjit` measurably slower, while
# marshalled code loads in microseconds.
_CODE: dict[str, tuple[CodeType, CodeType]] | None = None
_NEW = False  # compiled in this process, not in the file yet


def _code_file() -> str | None:
    if not _jit._CACHE_DIR:
        return None
    return os.path.join(_jit._CACHE_DIR, f"twins.{sys.implementation.cache_tag}.marshal")


def _load_code() -> dict[str, tuple[CodeType, CodeType]]:
    path = _code_file()
    if path:
        # missing, unreadable or damaged (another Python, a torn file): compile afresh
        with contextlib.suppress(Exception), open(path, "rb") as f:
            code = marshal.loads(f.read())
            if isinstance(code, dict):
                return code
    return {}


@atexit.register
def _save_code() -> None:
    path = _code_file()
    if not _NEW or _CODE is None or not path:
        return
    # Written whole and renamed into place; a folder that cannot be written keeps no copy.
    with contextlib.suppress(OSError):
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".twins-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(marshal.dumps(_CODE))
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def _compiled(source: str, filename: str, serial: str, par: str) -> tuple[CodeType, CodeType]:
    """The code objects of the two functions ``source`` defines."""
    global _CODE, _NEW
    if _CODE is None:
        _CODE = _load_code()
    pair = _CODE.get(source)
    if pair is None:
        made = {}
        for const in compile(source, filename, "exec").co_consts:
            if isinstance(const, CodeType):
                made[const.co_name] = const
        pair = _CODE[source] = (made[serial], made[par])
        _NEW = True
    return pair


# Names the generated loops use besides the body's own; no kernel parameter may take them.
_RESERVED = frozenset({"ctl", "n_items", "chunk_lo", "chunk_hi", "flat", "rest", "claim"})


def _params(fn) -> tuple[str, ...]:
    code = fn.__code__
    if code.co_flags & 0x0C or code.co_kwonlyargcount:  # *args, **kwargs, keyword-only
        raise TypeError(f"{fn.__qualname__}: a kernel body takes plain positional parameters")
    return code.co_varnames[: code.co_argcount]


def _targets(name: str, stmt: str) -> list[str]:
    """The names an assignment statement ``"a, b = ..."`` binds."""
    targets, eq, _ = stmt.partition(" = ")
    names = [t.strip() for t in targets.split(",") if t.strip()]
    if not eq or not all(t.isidentifier() for t in names):
        raise TypeError(f"{name}: setup and state are assignments to names, got {stmt!r}")
    return names


def _ref(kernel, ns: dict, key: str) -> str:
    """The name the generated code calls ``kernel`` by: its own where the module holds it."""
    name = kernel.py_func.__name__
    if ns.get(name) is not kernel:
        name = key
        ns[key] = kernel
    return name


def twins(
    signature: str,
    body,
    *,
    items: dict[str, str],
    setup: str | tuple[str, ...] = (),
    state: str | None = None,
    par: str | None = None,
    doc: str | None = None,
    **options,
):
    """Generate ``(serial, pool)`` entry points looping over the items of ``body``.

    ``signature`` is the serial kernel's, ``"name(param, ...)"``; the pool kernel is ``par``
    (default ``name + "_par"``) and takes the control array first. ``body`` is an
    ``@njit(inline="always")`` function (or a plain ``@njit`` one, then called per item); ``setup``
    an assignment statement (``"a, b = f(x)"``) or a tuple of them; ``items`` maps each item index
    to its count expression (outermost loop first); ``state`` an assignment of the carried value's
    initial value (``"last = -1"``). See the module docstring. ``doc`` becomes the serial kernel's
    docstring. ``options`` go to both :func:`njit` and :func:`pjit` (``fma=True``,
    ``fastmath=...``). Raises TypeError when the body's parameters do not fit the declaration.
    """
    name, _, rest = signature.partition("(")
    name = name.strip()
    params = [p.strip() for p in rest.rstrip().removesuffix(")").split(",") if p.strip()]
    py = body.py_func
    bparams = _params(py)
    head = [setup] if isinstance(setup, str) else list(setup)
    carried = []
    if state is not None:
        carried = _targets(name, state)
        if len(carried) != 1:
            raise TypeError(f"{name}: the state is one value, got {state!r}")
    assigned = [t for stmt in head for t in _targets(name, stmt)]
    index = list(items)
    known = {*params, *assigned, *index, *carried}
    if not params or not index or not set(bparams) <= known:
        raise TypeError(
            f"{name}: the body {py.__qualname__}{bparams} takes names that are neither a "
            f"parameter, a setup value, an item index nor the state: "
            f"{sorted(set(bparams) - known) or '(no parameters or no items)'}"
        )
    clash = _RESERVED.union(f"n_{v}" for v in index[1:]).intersection(known)
    if clash:
        raise TypeError(f"{name}: {sorted(clash)} are names the generated loops use")
    par = par or name + "_par"

    ns = dict(py.__globals__)
    ns["claim"] = claim
    call = f"{_ref(body, ns, '_twin_body')}({', '.join(bparams)})"
    if carried:
        head.append(state)
        call = f"{carried[0]} = {call}"
    sizes = [items[v] for v in index]

    serial = [f"def {name}({', '.join(params)}):", *("    " + h for h in head)]
    for depth, (var, size) in enumerate(zip(index, sizes)):
        serial.append(f"{'    ' * (depth + 1)}for {var} in range({size}):")
    serial.append(f"{'    ' * (len(sizes) + 1)}{call}")

    # The pool form flattens nested loops; the inner extents are evaluated once.
    inner = [f"n_{var}" for var in index[1:]]
    pool = [f"def {par}(ctl, {', '.join(params)}):", *("    " + h for h in head)]
    pool += [f"    {n} = {size}" for n, size in zip(inner, sizes[1:])]
    pool += [
        f"    n_items = {' * '.join([sizes[0] if not inner else f'({sizes[0]})', *inner])}",
        "    while True:",
        "        chunk_lo, chunk_hi = claim(ctl, n_items)",
        "        if chunk_lo >= chunk_hi:",
        "            break",
        f"        for {'flat' if inner else index[0]} in range(chunk_lo, chunk_hi):",
    ]
    if inner:
        rest = "flat"
        for k, var in enumerate(index[:-1]):
            stride = " * ".join(inner[k:])
            pool.append(f"            {var} = {rest} // ({stride})")
            nxt = index[-1] if k == len(index) - 2 else "rest"
            pool.append(f"            {nxt} = {rest} - {var} * ({stride})")
            rest = "rest"
    pool.append(f"            {call}")

    source = "\n".join(serial) + "\n\n\n" + "\n".join(pool) + "\n"
    # Both functions are placed at the body's line of the declaring module's file: Numba names
    # a cache entry by file, qualified name and line, and keys it by the file's content.
    where = {"co_filename": py.__code__.co_filename, "co_firstlineno": py.__code__.co_firstlineno}
    codes = _compiled(source, py.__code__.co_filename, name, par)
    one, two = (FunctionType(c.replace(**where), ns, c.co_name) for c in codes)
    one.__doc__ = doc
    two.__doc__ = (
        f"Pool twin of :func:`{name}`: the same items, claimed by the pool's threads "
        "(generated by :func:`onnxjit.kernels.cpu.runtime.twins.twins`)."
    )
    GENERATED[f"{py.__globals__['__name__']}.{name}"] = source
    return njit(one, **options), pjit(two, **options)
