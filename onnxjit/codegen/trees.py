"""Generated tree-ensemble walks over the perfect layout (kernels/cpu/trees.py).

One module per (row width ``F``, interior slots per tree ``NI``): both are constants in it, so
that the walk of ``G`` rows in lock-step reads ``x`` at constant offsets ``j * F`` from one base
and the walk of ``GT`` trees for one row reads the trees at constant offsets ``j * NI``; neither
needs a register per row or per tree (with run-time strides the sixteen chains spilled their
pointers to the stack: 0.62 ns per node visit against 0.53 with constants, rf_reg of G1 on the
development machine). Everything else is a run-time argument, and Numba specialises on dtypes
only, so a new batch size compiles nothing.

The source is built as a Python AST (parsed from a fixed template holding only generated names
and integer constants), rendered with ``ast.unparse`` and imported through
:mod:`onnxjit.codegen.modcache`, so Numba caches the kernels on disk. The module composes the
helpers of kernels/cpu/trees.py (``pstep``, ``add_leaf``, ``nan_rows_in``, ``finish_rows``).

Exported: ``predict(x, feat, thr, leaves, depth, tgt, kt, fin_i, fin_f, y, labels,
label_values)`` (serial; returns the number of rows holding a NaN, whose outputs are not valid)
and ``predict_par(ctl, ..., bad_rows)``, its pool twin (adds that count to ``bad_rows[0]``).
"""

from __future__ import annotations

import ast
import functools
from types import ModuleType

from onnxjit.codegen import modcache

# Rows walked in lock-step: 12 independent chains hide the load latency of a level (about 15
# cycles) without spilling; 8 chains ran 0.67 ns per visit, 12 0.53, 16 0.54 (rf_reg, G1).
G = 12
# Trees walked in lock-step for a row outside a full group of G rows (batch 1, the last rows).
GT = 16


def _walk_rows(f: int, ni: int) -> str:
    chains = range(G)
    steps = "\n".join(
        f"            n{j} = pstep(xg, np.uint64({j * f}), ft, th, ZERO, n{j})" for j in chains
    )
    adds1 = "\n".join(
        f"            acc[np.uint64({j}) * uk + tg] += leaves[lb + n{j}]" for j in chains
    )
    adds = "\n".join(
        f"            add_leaf(acc, np.uint64({j}) * uk + tg, leaves, (lb + n{j}) * kt, kt)"
        for j in chains
    )
    regs = "; ".join(f"a{j} = acc[{j}]" for j in chains)
    reg_adds = "\n".join(f"        a{j} += leaves[lb + n{j}]" for j in chains)
    reg_store = "; ".join(f"acc[{j}] = a{j}" for j in chains)
    steps_ = "\n".join("    " + line for line in steps.split("\n"))
    reg_adds_ = "\n".join("    " + line for line in reg_adds.split("\n"))
    return f'''
@njit
def walk_rows(xf, xo, feat, thr, leaves, depth, tgt, kt, acc, uk):
    """Rows xo / {f} .. + {G - 1}: every tree's leaf values added to acc[j * uk + ...]."""
    n_leaves = np.uint64({ni + 1})
    xg = xf[xo:]  # the rows at constant offsets from one base
    if uk == ONE and kt == ONE:  # one target: the sums stay in registers
        {regs}
        for t in range(depth.shape[0]):
            ft = feat[t * {ni}:(t + 1) * {ni}]
            th = thr[t * {ni}:(t + 1) * {ni}]
            {"; ".join(f"n{j} = ZERO" for j in chains)}
            for _ in range(depth[t]):
{steps_}
            lb = np.uint64(t) * n_leaves - ((ONE << np.uint64(depth[t])) - ONE)
{reg_adds_}
        {reg_store}
        return
    for t in range(depth.shape[0]):
        ft = feat[t * {ni}:(t + 1) * {ni}]
        th = thr[t * {ni}:(t + 1) * {ni}]
        {"; ".join(f"n{j} = ZERO" for j in chains)}
        for _ in range(depth[t]):
{steps}
        # leaves[lb + n] is the leaf a walk ending on slot n reaches (modulo 2**64)
        lb = np.uint64(t) * n_leaves - ((ONE << np.uint64(depth[t])) - ONE)
        tg = np.uint64(tgt[t])
        if kt == ONE:
{adds1}
        else:
{adds}
'''


def _walk_trees(f: int, ni: int) -> str:
    chains = range(GT)
    steps = "\n".join(
        f"            n{j} = pstep(xf, xo, ft, th, np.uint64({j * ni}), n{j})" for j in chains
    )
    adds = "\n".join(
        f"        add_leaf(acc, ao + np.uint64(tgt[t + {j}]), leaves, leaf_offset(t + {j}, "
        f"(n{j} - top) >> (ug - np.uint64(depth[t + {j}])), n_leaves, kt), kt)"
        for j in chains
    )
    return f'''
@njit
def walk_trees(xf, xo, feat, thr, leaves, depth, tgt, kt, acc, ao):
    """One row (features from xo): every tree's leaf values added to acc[ao + ...], {GT} trees
    in lock-step for the depth of the deepest of them."""
    n_leaves = np.uint64({ni + 1})
    n_trees = depth.shape[0]
    t = 0
    while t + {GT} <= n_trees:
        g = depth[t]
        for j in range(1, {GT}):
            g = max(g, depth[t + j])
        ft = feat[t * {ni}:]
        th = thr[t * {ni}:]
        {"; ".join(f"n{j} = ZERO" for j in chains)}
        for _ in range(g):
{steps}
        ug = np.uint64(g)
        top = (ONE << ug) - ONE
{adds}
        t += {GT}
    while t < n_trees:
        ft = feat[t * {ni}:(t + 1) * {ni}]
        th = thr[t * {ni}:(t + 1) * {ni}]
        n0 = ZERO
        for _ in range(depth[t]):
            n0 = pstep(xf, xo, ft, th, ZERO, n0)
        off = (ONE << np.uint64(depth[t])) - ONE
        add_leaf(acc, ao + np.uint64(tgt[t]), leaves, leaf_offset(t, n0 - off, n_leaves, kt), kt)
        t += 1
'''


def _drivers(f: int) -> str:
    return f'''
@njit
def run_rows(x, r0, r1, feat, thr, leaves, depth, tgt, kt, fin_i, fin_f, y, labels,
             label_values):
    """Rows r0 .. r1 - 1: walk, then finish_rows; returns how many hold a NaN."""
    n_out = y.shape[1]
    uk = np.uint64(n_out)
    ukt = np.uint64(kt)
    xf = x.reshape(x.size)
    acc = np.empty({G} * n_out, leaves.dtype)
    tmp = np.empty((1, n_out), np.float64)
    bad = 0
    r = r0
    while r < r1:
        m = min({G}, r1 - r)
        bad += nan_rows_in(x, r, m)
        acc[:] = 0
        if m == {G}:
            walk_rows(xf, np.uint64(r * {f}), feat, thr, leaves, depth, tgt, ukt, acc, uk)
        else:
            for j in range(m):
                walk_trees(xf, np.uint64((r + j) * {f}), feat, thr, leaves, depth, tgt, ukt,
                           acc, np.uint64(j) * uk)
        finish_rows(acc, m, y, r, labels, label_values, fin_i, fin_f, tmp)
        r += m
    return bad


@njit
def predict(x, feat, thr, leaves, depth, tgt, kt, fin_i, fin_f, y, labels, label_values):
    return run_rows(x, 0, x.shape[0], feat, thr, leaves, depth, tgt, kt, fin_i, fin_f, y,
                    labels, label_values)


@pjit
def predict_par(ctl, x, feat, thr, leaves, depth, tgt, kt, fin_i, fin_f, y, labels,
                label_values, bad_rows):
    n = x.shape[0]
    n_items = (n + {G - 1}) // {G}
    bad = 0
    while True:
        chunk_lo, chunk_hi = claim(ctl, n_items)
        if chunk_lo >= chunk_hi:
            break
        bad += run_rows(x, chunk_lo * {G}, min(chunk_hi * {G}, n), feat, thr, leaves, depth,
                        tgt, kt, fin_i, fin_f, y, labels, label_values)
    fetch_add(bad_rows, 0, bad)
'''


_HEADER = """
import numpy as np
from onnxjit.kernels._jit import njit, pjit
from onnxjit.kernels.atomics import fetch_add
from onnxjit.kernels.chunks import claim
from onnxjit.kernels.cpu.trees import (
    ONE, ZERO, add_leaf, finish_rows, leaf_offset, nan_rows_in, pstep,
)
"""


def source(f: int, ni: int) -> str:
    """Source of the walk module for rows of ``f`` features and ``ni`` slots per tree."""
    f, ni = int(f), int(ni)
    if f < 1 or ni < 0:
        raise ValueError(f"row width {f} and slots per tree {ni} must be positive")
    text = _HEADER + _walk_rows(f, ni) + _walk_trees(f, ni) + _drivers(f)
    tree = ast.parse(text)
    doc = (
        f'"""onnxjit generated tree-ensemble walk: rows of {f} features, {ni} slots per tree, '
        f'{G} rows / {GT} trees in lock-step."""\n'
    )
    return doc + ast.unparse(tree) + "\n"


@functools.lru_cache(maxsize=64)
def module(f: int, ni: int) -> ModuleType:
    """The imported walk module for (``f``, ``ni``) (written to the cache folder once)."""
    return modcache.load(source(f, ni))
