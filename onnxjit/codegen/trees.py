"""Generated tree-ensemble walks over the perfect layout (kernels/cpu/trees.py).

One module per (row width ``F``, interior slots per tree ``NI``, values per leaf ``KT``): all
are constants in it, so that the walk of ``G`` rows in lock-step reads ``x`` at constant offsets
``j * F`` from one base and the walk of ``GT`` trees for one row reads the trees at constant
offsets ``j * NI``; neither needs a register per row or per tree (with run-time strides the
chains spilled their pointers to the stack: 0.62 ns per node visit against 0.53 with constants,
rf_reg of G1 on the development machine). A leaf's ``KT`` additions are unrolled, and only the
branches for its ``KT`` are generated. Everything else is a run-time argument, and Numba
specialises on dtypes only, so a new batch size compiles nothing.

The source is built as a Python AST (parsed from a fixed template holding only generated names
and integer constants), rendered with ``ast.unparse`` and imported through
:mod:`onnxjit.codegen.modcache`, so Numba caches the kernels on disk. The module composes the
helpers of kernels/cpu/trees.py (``pstep``, ``nan_rows_in``, ``finish_rows``).

Exported: ``predict(ctl, x, feat, thr, leaves, depth, tgt, fin_i, fin_f, y, labels, label_values,
bad_rows)``, a pool kernel (:mod:`onnxjit.kernels.cpu.runtime.chunks`) that adds the number of rows
holding a NaN (whose outputs are not valid) to ``bad_rows[0]`` and returns the count of the rows it
walked itself: called directly with an empty ``ctl`` (:data:`SERIAL`) it is the serial kernel, which
makes its own one-thread control block (one compiled entry point instead of two: each links and
optimises every walk again).

This module is also the CPU side of the tree operators' lowerings (onnxjit/ops/ml.py): it packs
the finishing arguments the kernels read (:func:`finish_arrays`) and binds a walk module's
``predict`` for one plan, serially through its compiled entry point (:func:`entry_point`) or on
the thread pool (:func:`pooled`), or runs it once (:func:`run`).
"""

from __future__ import annotations

import ast
import functools
import hashlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from onnxjit.codegen import modcache
from onnxjit.kernels.cpu import trees as _ktrees

# Numba's cache checks only the file that defines a function, not the helpers it inlines: the
# generated source names the hash of the helpers' files, so that editing them gives new files.
_KERNELS = Path(_ktrees.__file__).parent.parent  # the kernels package
_HELPERS_HASH = hashlib.sha256(
    b"".join(
        (_KERNELS / name).read_bytes()
        for name in (
            "cpu/trees.py",
            "cpu/ml.py",
            "_jit.py",
            "cpu/runtime/chunks.py",
            "cpu/runtime/atomics.py",
        )
    )
).hexdigest()[:16]

# Rows walked in lock-step: 12 independent chains hide the load latency of a level (about 15
# cycles) without spilling; 8 chains ran 0.67 ns per visit, 12 0.53, 16 0.54 (rf_reg, G1).
G = 12
# Trees walked in lock-step for a row outside a full group of G rows (batch 1, the last rows).
GT = 16
# Values per leaf up to which adding a leaf's values is unrolled (a loop beyond).
KT_UNROLL = 8


def _indent(lines: list[str], n: int) -> str:
    return "\n".join(" " * n + line for line in lines)


def _walk_rows(f: int, ni: int, kt: int) -> str:
    chains = range(G)
    # one tree for the G rows; the root is the same slot for every row (loaded once)
    walk = [
        f"ft = feat[t * {ni}:(t + 1) * {ni}]",
        f"th = thr[t * {ni}:(t + 1) * {ni}]",
        "; ".join(f"n{j} = ZERO" for j in chains),
        "d = depth[t]",
        "if d > 0:",
        "    f0 = np.uint64(ft[0])",
        "    t0 = th[0]",
        *(f"    n{j} = ONE + np.uint64(xg[np.uint64({j * f}) + f0] > t0)" for j in chains),
        "    for _ in range(d - 1):",
        *(f"        n{j} = pstep(xg, np.uint64({j * f}), ft, th, ZERO, n{j})" for j in chains),
        "# leaves[lb + n] is the leaf a walk ending on slot n reaches (modulo 2**64)",
        "lb = np.uint64(t) * n_leaves - ((ONE << np.uint64(d)) - ONE)",
    ]
    head = f'''
@njit
def walk_rows(xf, xo, feat, thr, leaves, depth, tgt, acc, uk):
    """Rows xo / {f} .. + {G - 1}: every tree's leaf values added to acc[j * uk + ...]."""
    n_leaves = np.uint64({ni + 1})
    xg = xf[xo:]  # the rows at constant offsets from one base
'''
    if kt > 1:  # every leaf holds kt values, for targets 0 .. kt - 1 (kt == uk)
        if kt <= KT_UNROLL:
            adds = [
                f"acc[np.uint64({j * kt + k})] += "
                f"leaves[(lb + n{j}) * np.uint64({kt}) + np.uint64({k})]"
                for j in chains
                for k in range(kt)
            ]
        else:
            adds = [
                line
                for j in chains
                for line in (
                    f"for k in range(np.uint64({kt})):",
                    f"    acc[np.uint64({j * kt}) + k] += "
                    f"leaves[(lb + n{j}) * np.uint64({kt}) + k]",
                )
            ]
        return (
            head
            + f"""    for t in range(depth.shape[0]):
{_indent(walk, 8)}
{_indent(adds, 8)}
"""
        )
    regs = "; ".join(f"a{j} = acc[{j}]" for j in chains)
    reg_adds = [f"a{j} += leaves[lb + n{j}]" for j in chains]
    reg_store = "; ".join(f"acc[{j}] = a{j}" for j in chains)
    adds1 = [f"acc[np.uint64({j}) * uk + tg] += leaves[lb + n{j}]" for j in chains]
    return (
        head
        + f"""    if uk == ONE:  # one target: the sums stay in registers
        {regs}
        for t in range(depth.shape[0]):
{_indent(walk, 12)}
{_indent(reg_adds, 12)}
        {reg_store}
        return
    for t in range(depth.shape[0]):
{_indent(walk, 8)}
        tg = np.uint64(tgt[t])
{_indent(adds1, 8)}
"""
    )


def _walk_trees(f: int, ni: int, kt: int) -> str:
    chains = range(GT)
    steps = [f"        n{j} = pstep(xf, xo, ft, th, np.uint64({j * ni}), n{j})" for j in chains]
    # leaf i of tree t + j is leaves[(t + j) * n_leaves + i]; a walk of g steps ends
    # 2**(g - depth) times further right than the leaf's index on its own level
    leaf = [
        f"np.uint64(t + {j}) * n_leaves + ((n{j} - top) >> (ug - np.uint64(depth[t + {j}])))"
        for j in chains
    ]
    head = f'''
@njit
def walk_trees(xf, xo, feat, thr, leaves, depth, tgt, acc, ao, uk):
    """One row (features from xo): every tree's leaf values added to acc[ao + ...], {GT} trees
    in lock-step for the depth of the deepest of them (the tree count is a multiple of {GT})."""
    n_leaves = np.uint64({ni + 1})
    for tg in range(depth.shape[0] // {GT}):
        t = tg * {GT}
        g = depth[t]
        for j in range(1, {GT}):
            g = max(g, depth[t + j])
        ft = feat[t * {ni}:]
        th = thr[t * {ni}:]
        {"; ".join(f"n{j} = ZERO" for j in chains)}
        for _ in range(g):
{_indent(steps, 4)}
        ug = np.uint64(g)
        top = (ONE << ug) - ONE
'''
    if kt > 1:
        if kt <= KT_UNROLL:
            add = [f"acc[ao + np.uint64({k})] += leaves[lo + np.uint64({k})]" for k in range(kt)]
        else:
            add = [f"for k in range(np.uint64({kt})):", "    acc[ao + k] += leaves[lo + k]"]
        adds = [line for j in chains for line in (f"lo = ({leaf[j]}) * np.uint64({kt})", *add)]
        return head + _indent(adds, 8) + "\n"
    adds_reg = [f"s += leaves[{leaf[j]}]" for j in chains]
    adds1 = [f"acc[ao + np.uint64(tgt[t + {j}])] += leaves[{leaf[j]}]" for j in chains]
    return (
        head
        + f"""        if uk == ONE:  # one target: the sum stays in a register
            s = acc[ao]
{_indent(adds_reg, 12)}
            acc[ao] = s
        else:
{_indent(adds1, 12)}
"""
    )


def _drivers(f: int) -> str:
    return f'''
@pjit
def predict(ctl, x, feat, thr, leaves, depth, tgt, fin_i, fin_f, y, labels, label_values,
            bad_rows):
    """Every row: walk, then finish_rows. The items claimed from ctl are the whole groups of
    {G} rows, then each row after them on its own (so that threads share the last rows too).
    Adds the count of rows holding a NaN to bad_rows[0] and returns this thread's count."""
    if ctl.shape[0] == 0:  # called serially: a control block of one thread
        ctl = np.zeros(CTL_SIZE, np.int64)
        ctl[THREADS] = 1
    n = x.shape[0]
    n_groups = n // {G}
    n_items = n_groups + n % {G}
    n_out = y.shape[1]
    uk = np.uint64(n_out)
    xf = x.reshape(x.size)
    acc = np.empty({G} * n_out, leaves.dtype)
    tmp = np.empty((1, n_out), np.float64)
    bad = 0
    while True:
        chunk_lo, chunk_hi = claim(ctl, n_items)
        if chunk_lo >= chunk_hi:
            break
        for item in range(chunk_lo, chunk_hi):
            acc[:] = 0
            if item < n_groups:
                r = item * {G}
                m = {G}
                walk_rows(xf, np.uint64(r * {f}), feat, thr, leaves, depth, tgt, acc, uk)
            else:
                r = n_groups * {G} + (item - n_groups)
                m = 1
                walk_trees(xf, np.uint64(r * {f}), feat, thr, leaves, depth, tgt, acc, ZERO, uk)
            bad += nan_rows_in(x, r, m)
            finish_rows(acc, m, y, r, labels, label_values, fin_i, fin_f, tmp)
    fetch_add(bad_rows, 0, bad)
    return bad
'''


_HEADER = """
import numpy as np
from onnxjit.kernels._jit import njit, pjit
from onnxjit.kernels.cpu.runtime.atomics import fetch_add
from onnxjit.kernels.cpu.runtime.chunks import CTL_SIZE, THREADS, claim
from onnxjit.kernels.cpu.trees import (
    ONE, ZERO, finish_rows, nan_rows_in, pstep,
)
"""


def source(f: int, ni: int, kt: int) -> str:
    """Source of the walk module for rows of ``f`` features, ``ni`` slots per tree and ``kt``
    values per leaf (1: each tree gives one target, ``tgt[t]``; more: targets 0 .. kt - 1)."""
    f, ni, kt = int(f), int(ni), int(kt)
    if f < 1 or ni < 0 or kt < 1:
        raise ValueError(f"row width {f}, slots per tree {ni}, values per leaf {kt}: bad sizes")
    text = _HEADER + _walk_rows(f, ni, kt) + _walk_trees(f, ni, kt) + _drivers(f)
    tree = ast.parse(text)
    doc = (
        f'"""onnxjit generated tree-ensemble walk: rows of {f} features, {ni} slots per tree, '
        f"{kt} values per leaf, {G} rows / {GT} trees in lock-step (helpers {_HELPERS_HASH})."
        '"""\n'
    )
    return doc + ast.unparse(tree) + "\n"


@functools.lru_cache(maxsize=64)
def module(f: int, ni: int, kt: int) -> ModuleType:
    """The imported walk module for (``f``, ``ni``, ``kt``) (written to the cache folder once)."""
    return modcache.load(source(f, ni, kt))


# -- binding for plans ----------------------------------------------------------------------

#: The ``ctl`` argument of a serial call of ``predict``.
SERIAL = np.zeros(0, np.int64)
#: The ``bad_rows`` argument of a serial call (which reads the kernel's return value instead).
SINK = np.zeros(1, np.int64)
#: ``labels`` / ``label_values`` of a regressor's walk.
NO_LABELS = np.zeros(1, np.int64)


def finish_arrays(
    classifier: bool,
    average: bool,
    post: int,
    n_trees: int,
    base: np.ndarray | None,
    mask: np.ndarray | None,
    n_targets: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``fin_i``, ``fin_f`` arguments of ``predict`` (``finish_rows`` in
    kernels/cpu/trees.py): a classifier takes the argmax of the finished scores (among the
    classes whose ``mask`` entry is non-zero, all where None), ``average`` divides the sums by
    the tree count, ``base`` (n_targets values, or None) is added, then post-transform ``post``
    (kernels/cpu/ml.py codes). All zero but the tree count: the raw sums."""
    fin_i = np.zeros(_ktrees.FIN_SIZE, np.int64)
    fin_f = np.zeros(1 + 2 * n_targets, np.float64)
    fin_i[_ktrees.FIN_KIND] = _ktrees.KIND_CLASSIFIER if classifier else _ktrees.KIND_REGRESSOR
    fin_i[_ktrees.FIN_AVG] = int(average)
    fin_i[_ktrees.FIN_POST] = post
    fin_f[0] = n_trees
    if base is not None:
        fin_f[1 : 1 + n_targets] = base
        fin_i[_ktrees.FIN_BASE] = 1
    fin_f[1 + n_targets :] = 1.0 if mask is None else mask
    return fin_i, fin_f


def entry_point(predict: Any, sample: tuple) -> Callable[..., int]:
    """The compiled entry point of ``predict`` for arguments typed like ``sample`` (all of them,
    ``ctl`` first): called serially as ``entry(SERIAL, x, ..., label_values, SINK)`` it skips
    Numba's type dispatch and returns the count of rows holding a NaN. The arrays must have
    the sample's types and be C-contiguous (as a plan keeps them)."""
    return predict.compile(tuple(predict.typeof_pyval(a) for a in sample))


def pooled(predict: Any, sample: tuple, threads: int) -> Callable[..., None]:
    """``predict`` bound to the thread pool (``threads`` threads, the caller's included) for
    arguments typed like ``sample`` (all but ``ctl``): ``call(x, ..., label_values,
    bad_rows)`` adds the count of rows holding a NaN to ``bad_rows[0]``."""
    from onnxjit.backends.cpu import pool

    return pool.bind(predict, tuple(sample), threads)


def run(predict: Any, args: tuple, parallel: bool, threads: int) -> int:
    """Run ``predict`` on ``args`` (all but ``ctl`` and ``bad_rows``) now, outside a plan,
    serially or on ``threads`` threads of the pool; returns the count of rows holding a NaN."""
    if parallel and threads > 1:
        from onnxjit.backends.cpu import pool

        bad_rows = np.zeros(1, np.int64)
        pool.run_parallel(predict, *args, bad_rows, threads=threads)
        return int(bad_rows[0])
    return int(predict(SERIAL, *args, SINK))
