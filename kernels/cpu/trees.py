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

from .._jit import njit, pjit
from .ml import PT_NONE, post_transform
from .runtime.atomics import fetch_add
from .runtime.chunks import claim
from .runtime.twins import twins

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
    ctl,
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
    bad_rows,
):
    """Pool twin of :func:`predict_serial` (rows split across threads); adds its count of
    rows that met a cycle to ``bad_rows[0]``."""
    bad = 0
    n_items = x.shape[0]
    while True:
        chunk_lo, chunk_hi = claim(ctl, n_items)
        if chunk_lo >= chunk_hi:
            break
        for i in range(chunk_lo, chunk_hi):
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
    fetch_add(bad_rows, 0, bad)


# --------------------------------------------------------------------------------------------
# Fast layout: branch-free lock-step traversal
# --------------------------------------------------------------------------------------------
#
# Ensembles whose branches all reduce to ``x <= t`` (BRANCH_LEQ as is; BRANCH_LT as
# ``x <= nextafter(t, -inf)``; BRANCH_GT and BRANCH_GTE as the same with the children
# swapped), with SUM/AVERAGE aggregation, are re-laid out per tree in breadth-first order:
#
# * ``f_left[n]``: slot of the child taken when ``x <= f_thr[n]``; the other child is the next
#   slot (children are siblings), so the next slot is ``f_left[n] + (x > f_thr[n])``;
# * a leaf points at itself with threshold +inf, so walking a tree for exactly its depth
#   ``t_depth[t]`` steps lands on the leaf every row reaches, whatever its depth;
# * ``f_leaf[n]``: the row of a leaf in the dense ``values`` [n_leaves, T] matrix (-1 for a
#   branch).
#
# The swap is exact for numbers; a NaN compares false every way, so rows holding a NaN are
# left to the general walk above (which applies missing_value_tracks_true). Eight rows (or,
# for the last rows of a batch, eight trees) advance in lock-step so that their independent
# load chains overlap; rows are taken in blocks of BLOCK so that a tree's upper nodes stay in
# cache while the block's rows walk it.

BLOCK = 64


@njit
def fast_layout(
    roots,
    is_leaf,
    feat,
    thr_leq,
    swap,
    tnode,
    fnode,
    f_left,
    f_feat,
    f_thr,
    f_leaf,
    t_root,
    t_depth,
    max_depth,
):
    """Fill the fast layout (``f_*`` preallocated with capacity) from the general table.

    ``thr_leq``/``swap`` are the per-node LEQ thresholds (already in the comparison
    precision) and the child-swap flags. ``f_leaf`` receives the general table's node index of
    each leaf slot. Returns the number of slots used, -1 when the capacity is too small (the
    trees share subtrees), -2 when a tree is deeper than ``max_depth`` (or has a cycle).
    """
    cap = f_left.shape[0]
    depth = np.zeros(cap, dtype=np.int32)
    src = np.zeros(cap, dtype=np.int64)
    pos = 0
    for t in range(roots.shape[0]):
        if pos >= cap:
            return -1
        start = pos
        t_root[t] = start
        src[pos] = roots[t]
        depth[pos] = 0
        pos += 1
        head = start
        deepest = 0
        while head < pos:
            s = src[head]
            if is_leaf[s]:
                f_left[head] = head
                f_feat[head] = 0
                f_thr[head] = np.inf
                f_leaf[head] = s
            else:
                d = depth[head] + 1
                if d > max_depth:
                    return -2
                if pos + 2 > cap:
                    return -1
                a = tnode[s]
                b = fnode[s]
                if swap[s]:
                    a, b = b, a
                f_left[head] = pos
                f_feat[head] = feat[s]
                f_thr[head] = thr_leq[s]
                f_leaf[head] = -1
                src[pos] = a
                src[pos + 1] = b
                depth[pos] = d
                depth[pos + 1] = d
                pos += 2
                if d > deepest:
                    deepest = d
            head += 1
        t_depth[t] = deepest
    return pos


@njit(inline="always")
def _next(x, r, n, f_left, f_feat, f_thr):
    return f_left[n] + np.int32(x[r, f_feat[n]] > f_thr[n])


@njit(inline="always")
def _add_leaf(out, r, values, lr):
    for j in range(values.shape[1]):
        out[r, j] += values[lr, j]


@njit(inline="always")
def _fast_block(
    x, n, b, t_root, t_depth, g_depth, f_left, f_feat, f_thr, f_leaf, values, skip, out
):
    """The rows of block ``b``, ``[b * BLOCK, min(b * BLOCK + BLOCK, n))`` (NaN rows, flagged
    in ``skip``, are left alone)."""
    r0 = b * BLOCK
    r1 = min(r0 + BLOCK, n)
    n_trees = t_root.shape[0]
    r = r0
    # eight rows at a time, every tree
    while r + 8 <= r1:
        for t in range(n_trees):
            root = t_root[t]
            n0 = root
            n1 = root
            n2 = root
            n3 = root
            n4 = root
            n5 = root
            n6 = root
            n7 = root
            for _ in range(t_depth[t]):
                n0 = _next(x, r, n0, f_left, f_feat, f_thr)
                n1 = _next(x, r + 1, n1, f_left, f_feat, f_thr)
                n2 = _next(x, r + 2, n2, f_left, f_feat, f_thr)
                n3 = _next(x, r + 3, n3, f_left, f_feat, f_thr)
                n4 = _next(x, r + 4, n4, f_left, f_feat, f_thr)
                n5 = _next(x, r + 5, n5, f_left, f_feat, f_thr)
                n6 = _next(x, r + 6, n6, f_left, f_feat, f_thr)
                n7 = _next(x, r + 7, n7, f_left, f_feat, f_thr)
            if skip[r] == 0:
                _add_leaf(out, r, values, f_leaf[n0])
            if skip[r + 1] == 0:
                _add_leaf(out, r + 1, values, f_leaf[n1])
            if skip[r + 2] == 0:
                _add_leaf(out, r + 2, values, f_leaf[n2])
            if skip[r + 3] == 0:
                _add_leaf(out, r + 3, values, f_leaf[n3])
            if skip[r + 4] == 0:
                _add_leaf(out, r + 4, values, f_leaf[n4])
            if skip[r + 5] == 0:
                _add_leaf(out, r + 5, values, f_leaf[n5])
            if skip[r + 6] == 0:
                _add_leaf(out, r + 6, values, f_leaf[n6])
            if skip[r + 7] == 0:
                _add_leaf(out, r + 7, values, f_leaf[n7])
        r += 8
    # the last rows: eight trees at a time (leaves added in tree order)
    while r < r1:
        if skip[r] == 0:
            t = 0
            while t + 8 <= n_trees:
                n0 = t_root[t]
                n1 = t_root[t + 1]
                n2 = t_root[t + 2]
                n3 = t_root[t + 3]
                n4 = t_root[t + 4]
                n5 = t_root[t + 5]
                n6 = t_root[t + 6]
                n7 = t_root[t + 7]
                for _ in range(g_depth[t >> 3]):
                    n0 = _next(x, r, n0, f_left, f_feat, f_thr)
                    n1 = _next(x, r, n1, f_left, f_feat, f_thr)
                    n2 = _next(x, r, n2, f_left, f_feat, f_thr)
                    n3 = _next(x, r, n3, f_left, f_feat, f_thr)
                    n4 = _next(x, r, n4, f_left, f_feat, f_thr)
                    n5 = _next(x, r, n5, f_left, f_feat, f_thr)
                    n6 = _next(x, r, n6, f_left, f_feat, f_thr)
                    n7 = _next(x, r, n7, f_left, f_feat, f_thr)
                _add_leaf(out, r, values, f_leaf[n0])
                _add_leaf(out, r, values, f_leaf[n1])
                _add_leaf(out, r, values, f_leaf[n2])
                _add_leaf(out, r, values, f_leaf[n3])
                _add_leaf(out, r, values, f_leaf[n4])
                _add_leaf(out, r, values, f_leaf[n5])
                _add_leaf(out, r, values, f_leaf[n6])
                _add_leaf(out, r, values, f_leaf[n7])
                t += 8
            while t < n_trees:
                n0 = t_root[t]
                for _ in range(t_depth[t]):
                    n0 = _next(x, r, n0, f_left, f_feat, f_thr)
                _add_leaf(out, r, values, f_leaf[n0])
                t += 1
        r += 1


fast_predict_serial, fast_predict_parallel = twins(
    "fast_predict_serial(x, t_root, t_depth, g_depth, f_left, f_feat, f_thr, f_leaf, values, "
    "skip, out)",
    _fast_block,
    setup="n = x.shape[0]",
    items={"b": "(n + BLOCK - 1) // BLOCK"},
    par="fast_predict_parallel",
    doc="""Add every tree's leaf values to ``out`` [N, T] for the rows of ``x`` not flagged in
    ``skip`` (fast layout, see above); blocks of BLOCK rows.""",
)


@njit
def fast_walk_finish(
    x, t_root, t_depth, g_depth, f_left, f_feat, f_thr, f_leaf, values, fin_i, fin_f, y, labels,
    label_values,
):  # fmt: skip
    """Scores of every row of ``x`` without a NaN (fast layout, finished by
    :func:`finish_rows` into ``y`` [N, K] and, for a classifier, ``labels`` [N]): one call for
    what the host path does as a walk and numpy's finishing. Returns how many rows hold a NaN
    (left untouched, for the host path to compute)."""
    n = x.shape[0]
    c = values.shape[1]
    skip = np.empty(n, np.uint8)
    bad = nan_rows(x, skip)
    out = np.zeros((n, c), values.dtype)
    for b in range((n + BLOCK - 1) // BLOCK):
        _fast_block(
            x, n, b, t_root, t_depth, g_depth, f_left, f_feat, f_thr, f_leaf, values, skip, out
        )  # fmt: skip
    tmp = np.empty((1, c), np.float64)
    for r in range(n):
        if skip[r] == 0:
            finish_rows(out[r], 1, y, r, labels, label_values, fin_i, fin_f, tmp)
    return bad


@njit
def nan_rows(x, skip):
    """``skip[i] = 1`` where row ``i`` of ``x`` holds a NaN; returns how many do."""
    count = 0
    for i in range(x.shape[0]):
        s = 0
        for j in range(x.shape[1]):
            v = x[i, j]
            if v != v:
                s = 1
        skip[i] = s
        count += s
    return count


@njit
def rows_general(
    x,
    rows,
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
    """The general walk (:func:`predict_serial`) for the listed rows only."""
    bad = 0
    for k in range(rows.shape[0]):
        bad += _row(
            x,
            rows[k],
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


# --------------------------------------------------------------------------------------------
# Perfect layout: implicit children, walked by generated code
# --------------------------------------------------------------------------------------------
#
# The fast layout above, re-laid out once more: every tree becomes a perfect binary tree of
# ``NI = 2**D - 1`` interior slots (D: the ensemble's deepest tree), numbered breadth-first, so
# that the children of slot ``n`` are ``2n + 1`` (``x <= t``) and ``2n + 2``; no child links are
# stored. Tree ``t`` of depth ``d_t`` uses levels 0..d_t-1 for its branches; a leaf above level
# ``d_t`` becomes a chain of always-left slots (threshold +inf) down to level ``d_t``, where
# ``leaves`` holds its values. Slots below level ``d_t`` are always-left too, so a walk of
# ``g >= d_t`` steps reaches level ``g`` at ``2**(g - d_t)`` times the leaf's index within
# level ``d_t``.
#
# Arrays (one stride per tree; T is padded to a multiple of 16 with one-leaf trees worth 0):
#
# * ``feat`` [T * NI] (uint8/uint16/uint32) and ``thr`` [T * NI] (float32/float64): branch
#   ``x[feat] <= thr`` goes left;
# * ``leaves`` [T * 2**D * kt]: the kt values of leaf ``i`` of tree ``t`` at
#   ``(t * 2**D + i) * kt``: with kt == 1 the value goes to target ``tgt[t]``, otherwise to
#   targets 0 .. kt - 1 (kt is then the target count);
# * ``depth`` [T] (int64): d_t.
#
# A NaN compares false and walks right: its row gets a wrong value, which the host replaces
# (the kernels count rows holding a NaN). The walks themselves live in generated modules
# (onnxjit/codegen/trees.py), which fix the row width, NI and kt as constants: then the
# lock-step walks of several rows address ``x`` and the trees with constant offsets from one
# base. Sums follow tree order for every row, whatever the batch size or thread count.

ZERO = np.uint64(0)
ONE = np.uint64(1)

# finish_rows ``fin_i`` fields
FIN_KIND = 0  # 0 regressor, 1 classifier (one score column or more than two)
FIN_POST = 1  # post-transform code (kernels/cpu/ml.py); NONE where it does not apply
FIN_AVG = 2  # 1: divide the sums by fin_f[0] (AVERAGE)
FIN_BASE = 3  # 1: add fin_f[1 : 1 + K] (base values)
FIN_SIZE = 4
KIND_REGRESSOR = 0
KIND_CLASSIFIER = 1


@njit
def pstep(xv, xo, ft, th, to, n):
    """One level down a perfect tree: from slot ``n`` of the tree whose slots start at ``to``
    in ``ft``/``th``, for the row whose features start at ``xo`` in ``xv`` (all uint64)."""
    i = to + n
    return n + n + ONE + np.uint64(xv[xo + np.uint64(ft[i])] > th[i])


@njit
def nan_rows_in(x, r, m):
    """How many of the rows ``r .. r + m - 1`` of ``x`` hold a NaN."""
    count = 0
    f = x.shape[1]
    for j in range(m):
        row = x[r + j]
        s = 0
        for c in range(f):
            v = row[c]
            if v != v:
                s = 1
        count += s
    return count


@njit
def _argmax_masked(s, fin_f, k0, c):
    """np.argmax of row ``s[0]`` where entries with a zero mask (``fin_f[k0 + k]``) count as
    -inf: the first maximum, or the first NaN."""
    best = 0
    bv = s[0, 0] if fin_f[k0] != 0.0 else -np.inf
    if bv != bv:
        return 0
    for k in range(1, c):
        v = s[0, k] if fin_f[k0 + k] != 0.0 else -np.inf
        if v != v:
            return k
        if v > bv:
            bv = v
            best = k
    return best


@njit
def finish_rows(acc, m, y, r, labels, label_values, fin_i, fin_f, tmp):
    """Scores of rows ``r .. r + m - 1`` from their summed leaf values ``acc`` [m * K] into
    ``y`` [N, K] (and, for a classifier, ``labels`` [N] from ``label_values``), exactly as the
    host code of onnxjit/ops/ml.py does in float64: AVERAGE divides by ``fin_f[0]``, base values
    ``fin_f[1 : 1 + K]`` are added, a classifier takes the argmax among classes whose mask
    ``fin_f[1 + K : 1 + 2K]`` is set, then the post-transform (``tmp`` [1, K] float64 scratch).
    """
    c = y.shape[1]
    kind = fin_i[FIN_KIND]
    post = fin_i[FIN_POST]
    avg = fin_i[FIN_AVG]
    base = fin_i[FIN_BASE]
    div = fin_f[0]
    for j in range(m):
        for k in range(c):
            v = np.float64(acc[j * c + k])
            if avg != 0:
                v = v / div
            if base != 0:
                v = v + fin_f[1 + k]
            tmp[0, k] = v
        if kind == KIND_CLASSIFIER:
            labels[r + j] = label_values[_argmax_masked(tmp, fin_f, 1 + c, c)]
        if post != PT_NONE:
            post_transform(tmp, post)
        for k in range(c):
            y[r + j, k] = tmp[0, k]


# The general and fast walks under the backend's names (``name`` serial, ``name_par`` its pool
# twin, the same arguments but the control block), as implementations run them through
# ``backend.run``.


@njit
def general_walk(
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
    bad_rows,
):
    """:func:`predict_serial`, adding its count of rows that met a cycle to ``bad_rows[0]``
    (the serial twin of :func:`predict_parallel`)."""
    bad_rows[0] += predict_serial(
        x, roots, mode, feat, thr, tnode, fnode, miss, aux0, aux1, members, w_target, w_value,
        agg, out, has,
    )  # fmt: skip


general_walk_par = predict_parallel
fast_walk = fast_predict_serial
fast_walk_par = fast_predict_parallel
