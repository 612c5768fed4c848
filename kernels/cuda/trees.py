"""Tree-ensemble kernels (CUDA): the general walk and the finishing step, with the names and
arguments of their CPU twins in ``kernels/cpu/trees.py`` (the node table is described there).

One thread walks every tree for one row (rows grid-stride). The per-row code is the CPU
twin's own: :func:`_device_form` compiles the Python source of ``_find_leaf``, ``_row``,
``_argmax_masked``, ``finish_rows`` (kernels/cpu/trees.py) and ``post_transform``
(kernels/cpu/ml.py) as CUDA device functions, with the array-taking helpers they call
replaced by their device forms. That keeps the node modes (BRANCH_MEMBER included), the
missing-value rule, the MIN/MAX/SUM aggregation and the post-transforms identical on both
backends by construction; the scalar helpers (``logistic``, ``probit``) are ``@njit``
functions that numba-cuda retargets as they are.

Why device forms rather than calling the ``@njit`` helpers directly: a non-inlined function
called from a kernel is compiled for the current device's compute capability (which
NVVM's compile-only checks cannot ask a machine without a GPU for), so the forms are
inlined; and the simulator cannot pass its device arrays to a CPU dispatcher at all.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
from numba import config, cuda, njit

from ..cpu import ml as _cpu_ml
from ..cpu import trees as _cpu
from . import memory
from .runtime import BLOCK, blocks, stream


def _device_form(fn: Any, **subs: Any) -> Any:
    """A CUDA device function compiled from the Python source of ``@njit`` function ``fn``,
    with the module globals named in ``subs`` (the helpers it calls) replaced."""
    py = fn.py_func
    scope = dict(py.__globals__)
    scope.update(subs)
    clone = types.FunctionType(py.__code__, scope, py.__name__, py.__defaults__, py.__closure__)
    clone.__doc__ = py.__doc__
    if config.ENABLE_CUDASIM:
        # the simulator runs device functions as Python, on its own array objects
        return cuda.jit(device=True)(clone)
    # inlined into the kernel before typing, as kernels/cuda/reduce.py's device helpers: a
    # device function of its own would need a driver even to compile
    return njit(inline="always")(clone)


_find_leaf = _device_form(_cpu._find_leaf)
_row = _device_form(_cpu._row, _find_leaf=_find_leaf)
_argmax_masked = _device_form(_cpu._argmax_masked)
_post_transform = _device_form(_cpu_ml.post_transform)
_finish_rows = _device_form(
    _cpu.finish_rows, post_transform=_post_transform, _argmax_masked=_argmax_masked
)


def _dev(a: Any) -> Any:
    """``a`` on the device: a host array (a plan keeps small integer arrays such as
    ``fin_i`` on the host) is copied there on the run's stream; device arrays pass as they
    are."""
    return (
        cuda.to_device(np.ascontiguousarray(a), stream=stream()) if isinstance(a, np.ndarray) else a
    )


@cuda.jit
def _walk_k(
    x, roots, mode, feat, thr, tnode, fnode, miss, aux0, aux1, members, w_target, w_value, agg,
    out, has, bad_rows,
):  # fmt: skip
    n_targets = out.shape[1]
    bad = 0
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        # the row starts from zero here: a plan's scratch buffers are not zero-filled, and a
        # separate fill would cost a launch
        for j in range(n_targets):
            out[i, j] = 0
            has[i, j] = 0
        bad += _row(
            x, i, roots, mode, feat, thr, tnode, fnode, miss, aux0, aux1, members, w_target,
            w_value, agg, out, has,
        )  # fmt: skip
    if bad != 0:
        cuda.atomic.add(bad_rows, 0, bad)


@cuda.jit
def _clear_k(a):
    if cuda.grid(1) == 0:
        a[0] = 0


def _launch_walk(args: tuple[Any, ...], bad_rows: Any) -> None:
    x = args[0]
    n = x.shape[0]
    if n:
        tables = tuple(_dev(a) for a in args[1:13])
        _walk_k[blocks(n), BLOCK, stream()](x, *tables, *args[13:], bad_rows)


def general_walk(
    x, roots, mode, feat, thr, tnode, fnode, miss, aux0, aux1, members, w_target, w_value, agg,
    out, has, bad_rows,
):  # fmt: skip
    """Walk every tree of the table for every row of ``x`` (N, F) float32/float64: ``out``
    (N, T) (the table's accumulation type, float32 or float64) receives per target the sum
    (SUM/AVERAGE), min or max of the weights the trees' leaves give, ``has`` (N, T) uint8 1
    where some leaf gave one; the count of rows whose walk met a cycle is added to
    ``bad_rows[0]`` (int64, device). Unlike the CPU twin, ``out``/``has`` need not be zero:
    every element is written. One thread per row. Table arrays may be host arrays (copied)."""
    _launch_walk(
        (x, roots, mode, feat, thr, tnode, fnode, miss, aux0, aux1, members, w_target, w_value,
         agg, out, has),
        bad_rows,
    )  # fmt: skip


def predict_serial(
    x, roots, mode, feat, thr, tnode, fnode, miss, aux0, aux1, members, w_target, w_value, agg,
    out, has,
):  # fmt: skip
    """:func:`general_walk` with a fresh counter: fills ``out``/``has`` as there and returns
    the count of rows whose walk met a cycle as a 1-element int64 *device* array (the CPU
    twin returns an int; reading it here would wait for the device)."""
    bad = memory.empty(1, np.int64, stream())
    _clear_k[1, 1, stream()](bad)
    _launch_walk(
        (x, roots, mode, feat, thr, tnode, fnode, miss, aux0, aux1, members, w_target, w_value,
         agg, out, has),
        bad,
    )  # fmt: skip
    return bad


@cuda.jit
def _finish_k(acc, m, y, r, labels, label_values, fin_i, fin_f, tmp):
    c = y.shape[1]
    for j in range(cuda.grid(1), m, cuda.gridsize(1)):
        # the CPU twin's code for one row, on that row's sums and scratch row
        _finish_rows(
            acc[j * c : (j + 1) * c], 1, y, r + j, labels, label_values, fin_i, fin_f,
            tmp[j : j + 1],
        )  # fmt: skip


def finish_rows(acc, m, y, r, labels, label_values, fin_i, fin_f, tmp):
    """Scores of rows ``r .. r + m - 1`` of ``y`` (N, K) float32/float64 from their sums
    ``acc`` (flat, ``m * K``, float32/float64) as the CPU twin computes them: AVERAGE divides
    by ``fin_f[0]``, base values ``fin_f[1 : 1 + K]`` are added, a classifier
    (``fin_i[0] == 1``) writes ``labels[r + j] = label_values[argmax]`` (int64) over the
    classes whose mask ``fin_f[1 + K : 1 + 2K]`` is set, then post-transform ``fin_i[1]``.
    ``tmp`` is float64 scratch of one row per row finished (m, K); with fewer rows (the CPU
    twin's (1, K)) the launcher allocates its own. One thread per row; host arrays among
    ``labels``/``label_values``/``fin_i``/``fin_f`` are copied to the device."""
    if m <= 0:
        return
    c = y.shape[1]
    if tmp.shape[0] < m or tmp.shape[1] < c:
        tmp = memory.empty((m, c), np.float64, stream())
    _finish_k[blocks(m), BLOCK, stream()](
        acc, m, y, r, _dev(labels), _dev(label_values), _dev(fin_i), _dev(fin_f), tmp
    )
