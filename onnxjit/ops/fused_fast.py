"""The per-run call of a fused elementwise group on inputs of known shapes, unrolled.

On small tensors the Python around the kernel call is the whole cost of a group (the kernel
runs in well under a microsecond), so the fast path is generated per number of inputs and
outputs with every loop unrolled into straight-line code: no argument tuple, no zip, no list
building. It does what :meth:`onnxjit.ops.fused_elementwise.FusedGroup.fast_path` specifies:
the same input checks, an input buffer nothing else references reused for an output of its
shape and dtype, the other outputs from their slots. And it calls the kernel's compiled entry
point for the argument types it will always get, skipping Numba's type dispatch.

On the development VM, a group of 2 inputs and 3 outputs on [1, 16] float32: 2.07 us per call
with the general loop, 1.4 us unrolled, the kernel's dispatch 0.36 -> 0.26 us of that.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numba.core.registry import CPUDispatcher

from onnxjit.registry import MISS

_FACTORIES: dict[tuple[int, int], Callable[..., Callable[..., Any]]] = {}
_NAMED_REFS = 0


def _source(n_in: int, n_out: int) -> str:
    xs = [f"x{i}" for i in range(n_in)]
    os_ = [f"o{j}" for j in range(n_out)]
    lines = [
        "def make(shapes, dtypes, outable, slots, go, sizes, limit, group, sole_owner, take, ips):",
        *(
            f"    s{i}, d{i}, ok{i}, ip{i} = shapes[{i}], dtypes[{i}], outable[{i}], ips[{i}]"
            for i in range(n_in)
        ),
        *(f"    sl{j} = slots[{j}]" for j in range(n_out)),
        # defaults and *more: a call with another number of arguments misses (a missing one
        # is MISS, which fails the type test) instead of raising
        f"    def fast({', '.join(x + '=MISS' for x in xs)}, *more):",
        "        if more:",
        "            return MISS",
    ]
    for i in range(n_in):
        x = xs[i]
        lines += [
            f"        if type({x}) is not ndarray or {x}.shape != s{i}:",
            "            return MISS",
            f"        if ({x}.dtype is not d{i} and {x}.dtype != d{i}) or not {x}.flags.carray:",
            "            return MISS",
        ]
    flat = [f"{x}.ravel()" for x in xs]
    if n_out == 1:
        # One output: written through the first input nothing else references, by the kernel
        # variant that stores through that input (ip{i}; None where input i cannot take the
        # output). Cheapest test first; the count is the caller's argument tuple, this
        # frame's name and getrefcount's argument (see _named_baseline).
        for i in range(n_in):
            x = xs[i]
            args = ", ".join(["f", *(("f" if k == i else flat[k]) for k in range(n_in))])
            lines += [
                f"        if ip{i} is not None and getrefcount({x}) <= limit and sole_owner({x}):",
                f"            f = {x}.ravel()",
                f"            ip{i}({args}, *sizes)",
                "            group.fast_reused = 1",
                f"            return {x}",
            ]
        lines += [
            "        o0 = sl0.get()",
            "        group.fast_reused = 0",
            f"        go(o0.ravel(), {', '.join(flat)}, *sizes)",
            "        return o0",
            "    return fast",
        ]
        return "\n".join(lines) + "\n"
    lines.append("        donors = None")
    for i in range(n_in):
        x = xs[i]
        lines += [
            f"        if ok{i} and getrefcount({x}) <= limit and sole_owner({x}):",
            f"            donors = [{x}] if donors is None else donors + [{x}]",
        ]
    lines += [
        "        if donors is None:",
        *(f"            {o} = sl{j}.get()" for j, o in enumerate(os_)),
        "            group.fast_reused = 0",
        "        else:",
        f"            {', '.join(os_)}, = take(slots, donors, group)",
        f"        go({', '.join(f'{v}.ravel()' for v in os_)}, {', '.join(flat)}, *sizes)",
        f"        return ({', '.join(os_)},)",
        "    return fast",
    ]
    return "\n".join(lines) + "\n"


def _factory(n_in: int, n_out: int) -> Callable[..., Callable[..., Any]]:
    key = (n_in, n_out)
    make = _FACTORIES.get(key)
    if make is None:
        scope = {"ndarray": np.ndarray, "MISS": MISS, "getrefcount": sys.getrefcount}
        exec(compile(_source(n_in, n_out), f"<fused fast path {n_in}x{n_out}>", "exec"), scope)
        make = _FACTORIES[key] = scope["make"]
    return make


def _named_baseline() -> int:
    """References to a released input that an unrolled fast path sees at its getrefcount
    test, measured through a call like the executor's (``fast(*args)``)."""
    global _NAMED_REFS
    if not _NAMED_REFS:

        def probe(x0: Any = None, *more: Any) -> int:  # the generated signature's shape
            return sys.getrefcount(x0)

        args = (np.empty(1),)  # the executor's argument tuple
        _NAMED_REFS = probe(*args)
    return _NAMED_REFS


def take_donor(donors: list[np.ndarray], shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """Remove and return the first of ``donors`` (input buffers a group may write into) with
    this shape and dtype, or None."""
    for i, a in enumerate(donors):
        if a.shape == shape and a.dtype == dtype:
            return donors.pop(i)
    return None


def _take(slots: Sequence[Any], donors: list[np.ndarray], group: Any) -> list[np.ndarray]:
    """The outputs' buffers: a donor of the slot's shape and dtype where there is one, else
    the slot's."""
    outs = []
    reused = 0
    for slot in slots:
        buf = take_donor(donors, slot.shape, slot.dtype)
        if buf is None:
            buf = slot.get()
        else:
            reused += 1
        outs.append(buf)
    group.fast_reused = reused  # for tests: buffers reused by the last fast call
    return outs


def _entry_point(go: Any, sample: tuple) -> Any:
    """The compiled entry point of Numba dispatcher ``go`` for arguments typed like
    ``sample``, or ``go`` itself (a pool launcher, or no such compiled signature yet)."""
    if not isinstance(go, CPUDispatcher):
        return go
    try:
        sig = tuple(go.typeof_pyval(a) for a in sample)
    except Exception:  # an argument Numba cannot type: let the dispatcher report it
        return go
    cres = go.overloads.get(sig)
    return go if cres is None else cres.entry_point


def unrolled_fast_path(
    arrays: Sequence[np.ndarray],
    out_shape: tuple[int, ...],
    slots: Sequence[Any],
    bind: Callable[[int | None], Callable[[], Any] | None],
    sizes: tuple[int, ...],
    group: Any,
    sole_owner: Callable[[np.ndarray], bool],
    in_place: bool = True,
) -> Callable[..., Any]:
    """``fast(*xs)`` for inputs shaped and typed like ``arrays`` (C-contiguous, writable):
    the kernel that ``bind(None)()`` binds, called as ``go(*outs_flat, *inputs_flat,
    *sizes)``, into buffers from ``slots`` or, with ``in_place``, from inputs that have
    ``out_shape``, the slot's dtype and no other holder (``sole_owner`` decides past the
    reference count); MISS for any other input. With one output, input i takes it only
    through the kernel variant that writes through it, bound by ``bind(i)()`` (``bind(i)`` is
    None where there is none).

    Where a call may go either way, kernels are bound (and compiled) at their first call, so
    that a group that always writes in place compiles only the variant it runs."""
    shapes = tuple(a.shape for a in arrays)
    dtypes = tuple(a.dtype for a in arrays)
    outable = tuple(in_place and a.shape == out_shape for a in arrays)
    ips: list[Any] = [None] * len(arrays)
    if len(slots) == 1:
        for i, a in enumerate(arrays):
            binder = bind(i) if outable[i] and a.dtype == slots[0].dtype else None
            ips[i] = None if binder is None else _lazy(binder)
    binder = bind(None)
    assert binder is not None
    if any(ip is not None for ip in ips):
        go = _lazy(binder)
    else:
        sample = (*(np.empty(1, s.dtype) for s in slots), *(a.ravel() for a in arrays), *sizes)
        go = _entry_point(binder(), sample)
    make = _factory(len(arrays), len(slots))
    limit = _named_baseline()
    return make(
        shapes, dtypes, outable, tuple(slots), go, sizes, limit, group, sole_owner, _take,
        tuple(ips),
    )  # fmt: skip


def _lazy(bind: Callable[[], Any]) -> Callable[..., None]:
    """A kernel call that binds (``bind()``) and compiles at its first call, then calls the
    compiled entry point."""
    fn = None

    def call(*args: Any) -> None:
        nonlocal fn
        if fn is None:
            kernel = bind()
            kernel(*args)
            fn = _entry_point(kernel, args)
            return
        fn(*args)

    return call
