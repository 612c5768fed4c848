"""Tree-ensemble evaluation over a flattened node table.

Every tree-ensemble operator (TreeEnsembleRegressor/Classifier 1 and 3, TreeEnsemble 5) is
converted on the host into one table of nodes, shared by all trees:

* ``mode[i]``: 0 BRANCH_LEQ, 1 BRANCH_LT, 2 BRANCH_GTE, 3 BRANCH_GT, 4 BRANCH_EQ, 5 BRANCH_NEQ,
  6 BRANCH_MEMBER, 7 LEAF (see the ``MODE_*`` constants);
* ``feat[i]``, ``thr[i]``: feature column and threshold of a branch;
* ``tnode[i]``, ``fnode[i]``: table index of the true / false child;
* ``miss[i]``: 1 when a NaN feature value follows the true branch;
* ``aux0[i]``, ``aux1[i]``: for a leaf, the range ``[aux0, aux1)`` of its (target, weight)
  pairs in ``w_target``/``w_value``; for a BRANCH_MEMBER node, the range of its set in
  ``members``.

The kernels walk every tree for every row and aggregate leaf weights per target. All
specialisation is by dtype of ``x`` only (float32 or float64, always 2-D C-contiguous); sizes
are run-time values.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .._jit import njit, pjit

MODE_LEQ = 0
MODE_LT = 1
MODE_GTE = 2
MODE_GT = 3
MODE_EQ = 4
MODE_NEQ = 5
MODE_MEMBER = 6
MODE_LEAF = 7

AGG_AVERAGE = 0
AGG_SUM = 1
AGG_MIN = 2
AGG_MAX = 3


@njit(inline="always")
def _find_leaf(x, i, root, mode, feat, thr, tnode, fnode, miss, aux0, aux1, members):
    """Index of the leaf that row ``i`` of ``x`` reaches from node ``root``; -1 when the walk
    takes more steps than there are nodes (the child links form a cycle)."""
    node = root
    steps = 0
    limit = mode.shape[0]
    while True:
        m = mode[node]
        if m == MODE_LEAF:
            return node
        steps += 1
        if steps > limit:
            return -1
        v = np.float64(x[i, feat[node]])
        if v != v and miss[node] != 0:
            # NaN with the missing-value flag follows the true branch; a NaN without it
            # falls through to the comparison (False, except BRANCH_NEQ which is True).
            node = tnode[node]
            continue
        if m == MODE_LEQ:
            go = v <= thr[node]
        elif m == MODE_LT:
            go = v < thr[node]
        elif m == MODE_GTE:
            go = v >= thr[node]
        elif m == MODE_GT:
            go = v > thr[node]
        elif m == MODE_EQ:
            go = v == thr[node]
        elif m == MODE_NEQ:
            go = v != thr[node]
        else:
            go = False
            for k in range(aux0[node], aux1[node]):
                if members[k] == v:
                    go = True
                    break
        node = tnode[node] if go else fnode[node]


@njit(inline="always")
def _row(
    x,
    i,
    roots,
    mode,
    feat,
    thr,
    tnode,
    fnode,
    miss,
    aux0,
    aux1,
    members,
    w_target,
    w_value,
    agg,
    out,
    has,
):
    """Aggregate the leaf weights of every tree for row ``i`` into ``out[i]``/``has[i]``;
    return 1 if a walk hit a cycle, else 0."""
    for t in range(roots.shape[0]):
        leaf = _find_leaf(x, i, roots[t], mode, feat, thr, tnode, fnode, miss, aux0, aux1, members)
        if leaf < 0:
            return 1
        for k in range(aux0[leaf], aux1[leaf]):
            j = w_target[k]
            w = w_value[k]
            if agg == AGG_MIN:
                if has[i, j] == 0 or w < out[i, j]:
                    out[i, j] = w
            elif agg == AGG_MAX:
                if has[i, j] == 0 or w > out[i, j]:
                    out[i, j] = w
            else:
                out[i, j] += w
            has[i, j] = 1
    return 0


@njit
def predict_serial(
    x,
    roots,
    mode,
    feat,
    thr,
    tnode,
    fnode,
    miss,
    aux0,
    aux1,
    members,
    w_target,
    w_value,
    agg,
    out,
    has,
):
    """Fill ``out`` (N, T) float64 zeros and ``has`` (N, T) uint8 zeros for every row of x.

    ``out[i, j]`` is the sum (SUM/AVERAGE), min or max of the weights that the trees' leaves
    give target ``j``; ``has[i, j]`` is 1 where at least one leaf gave one. Returns the number
    of rows whose walk found a cycle (0 for a valid ensemble).
    """
    bad = 0
    for i in range(x.shape[0]):
        bad += _row(
            x,
            i,
            roots,
            mode,
            feat,
            thr,
            tnode,
            fnode,
            miss,
            aux0,
            aux1,
            members,
            w_target,
            w_value,
            agg,
            out,
            has,
        )
    return bad


@pjit
def predict_parallel(
    x,
    roots,
    mode,
    feat,
    thr,
    tnode,
    fnode,
    miss,
    aux0,
    aux1,
    members,
    w_target,
    w_value,
    agg,
    out,
    has,
):
    """Parallel twin of :func:`predict_serial` (rows split across threads)."""
    bad = 0
    for i in prange(x.shape[0]):
        bad += _row(
            x,
            i,
            roots,
            mode,
            feat,
            thr,
            tnode,
            fnode,
            miss,
            aux0,
            aux1,
            members,
            w_target,
            w_value,
            agg,
            out,
            has,
        )
    return bad
