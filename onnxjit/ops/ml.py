"""Operators of the ``ai.onnx.ml`` domain (tree ensembles, linear models, scalers, encoders).

Where the ONNX specification is vague (binary classifiers with one score column, MIN/MAX
aggregation of targets that no leaf reached, Normalizer MAX), these implementations follow
onnxruntime, which is what converters such as skl2onnx are tested against.

Tree ensembles are converted once per node into a flat node table (see
:mod:`onnxjit.kernels.cpu.trees`) and cached; every run then only walks the table.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxjit.backends.cpu import pool, threads
from onnxjit.backends.cpu.pool import run_parallel
from onnxjit.codegen import trees as gtrees
from onnxjit.kernels import _jit
from onnxjit.kernels.cpu import ml as kml
from onnxjit.kernels.cpu import trees as ktrees
from onnxjit.kernels.cpu.runtime import chunks as kchunks
from onnxjit.registry import MISS, ML_DOMAIN, fast_path, onnx_op

_POST = {
    "NONE": kml.PT_NONE,
    "SOFTMAX": kml.PT_SOFTMAX,
    "LOGISTIC": kml.PT_LOGISTIC,
    "SOFTMAX_ZERO": kml.PT_SOFTMAX_ZERO,
    "PROBIT": kml.PT_PROBIT,
}
_AGG = {
    "AVERAGE": ktrees.AGG_AVERAGE,
    "SUM": ktrees.AGG_SUM,
    "MIN": ktrees.AGG_MIN,
    "MAX": ktrees.AGG_MAX,
}
_MODES = {
    "BRANCH_LEQ": ktrees.MODE_LEQ,
    "BRANCH_LT": ktrees.MODE_LT,
    "BRANCH_GTE": ktrees.MODE_GTE,
    "BRANCH_GT": ktrees.MODE_GT,
    "BRANCH_EQ": ktrees.MODE_EQ,
    "BRANCH_NEQ": ktrees.MODE_NEQ,
    "BRANCH_MEMBER": ktrees.MODE_MEMBER,
    "LEAF": ktrees.MODE_LEAF,
}


def _post_code(ctx: Any, post_transform: str) -> int:
    try:
        return _POST[post_transform]
    except KeyError:
        raise ctx.unsupported(
            f"post_transform {post_transform!r} is not one of {sorted(_POST)}"
        ) from None


def _apply_post(scores: np.ndarray, code: int) -> np.ndarray:
    """Post-transform a float64 (N, C) score array in place (Numba kernel)."""
    if code != kml.PT_NONE and scores.size:
        kml.post_transform(scores, code)
    return scores


def _as_rows(ctx: Any, x: np.ndarray) -> np.ndarray:
    """The [N, F] view the ml operators work on: a 1-D input is one row."""
    if x.ndim == 1:
        return x.reshape(1, -1)
    if x.ndim != 2:
        raise ctx.error(
            f"expected a 1-D or 2-D input [N, F], found shape {list(x.shape)}; reshape it"
        )
    return x


def _float_rows(ctx: Any, x: np.ndarray) -> np.ndarray:
    """Input as C-contiguous float32/float64 rows (integers and float16 -> float32, as
    onnxruntime converts them)."""
    x = _as_rows(ctx, x)
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float32)
    return np.ascontiguousarray(x)


# --------------------------------------------------------------------------------------------
# Tree ensembles
# --------------------------------------------------------------------------------------------


@dataclass
class _TreeTable:
    """A flattened tree ensemble (see kernels/cpu/trees.py for the field meanings)."""

    roots: np.ndarray
    mode: np.ndarray
    feat: np.ndarray
    thr: np.ndarray
    tnode: np.ndarray
    fnode: np.ndarray
    miss: np.ndarray
    aux0: np.ndarray
    aux1: np.ndarray
    members: np.ndarray
    w_target: np.ndarray
    w_value: np.ndarray
    n_features: int  # 1 + the largest feature id a branch reads
    n_targets: int  # 1 + the largest target id a leaf writes
    # Scores are summed in float32 when every weight is a float32 attribute, as onnxruntime
    # does: labels then break exact ties (e.g. 0.5 vs 0.5) the same way.
    acc_dtype: Any = np.float64
    # Classifier facts derived from the attributes (set by the classifier's build).
    binary_case: bool = False
    all_positive: bool = True
    # Fast layouts per (comparison dtype, n_targets); None where the ensemble has none.
    fast: dict[Any, _FastTable | None] = field(default_factory=dict)
    # The node's other attributes, resolved on its first run (_Spec).
    spec: Any = None

    @property
    def n_trees(self) -> int:
        return int(self.roots.shape[0])

    def walk_arrays(self) -> tuple[np.ndarray, ...]:
        """The arrays the general tree walk kernels take, in their parameter order."""
        return (
            self.roots,
            self.mode,
            self.feat,
            self.thr,
            self.tnode,
            self.fnode,
            self.miss,
            self.aux0,
            self.aux1,
            self.members,
            self.w_target,
            self.w_value,
        )

    def fast_for(self, dtype: Any, n_targets: int) -> _FastTable | None:
        """The fast layout for inputs of ``dtype`` (built on first use), or None."""
        key = (np.dtype(dtype).str, n_targets)
        if key not in self.fast:
            fast = _build_fast(self, np.dtype(dtype), n_targets)
            with _TABLES_LOCK:
                self.fast.setdefault(key, fast)
        return self.fast[key]


@dataclass
class _FastTable:
    """Breadth-first, branch-free layout of an ensemble (kernels/cpu/trees.py, "Fast
    layout"), valid for rows without NaN under SUM/AVERAGE aggregation."""

    t_root: np.ndarray  # int32 [n_trees]: slot of each tree's root
    t_depth: np.ndarray  # int32 [n_trees]: steps that reach every leaf of the tree
    g_depth: np.ndarray  # int32 [ceil(n_trees / 8)]: deepest tree of each group of eight
    f_left: np.ndarray  # int32 [slots]
    f_feat: np.ndarray  # int32 [slots]
    f_thr: np.ndarray  # float32/float64 [slots]: thresholds of ``x <= t``
    f_leaf: np.ndarray  # int32 [slots]: dense row of a leaf, -1 for a branch
    values: np.ndarray  # acc dtype [n_leaves, n_targets]: summed leaf weights
    has: np.ndarray  # uint8 [n_targets]: 1 where every row gets a weight for the target
    visits: int  # node visits per row (sum of t_depth)
    tree_targets: np.ndarray  # bool [n_trees, n_targets]: the targets each tree's leaves give
    perfect: _PerfectTable | None = None  # the perfect layout, where it applies


@dataclass
class _PerfectTable:
    """Perfect-tree layout of a fast table (kernels/cpu/trees.py, "Perfect layout")."""

    feat: np.ndarray  # uint8/uint16/uint32 [n_trees * ni]
    thr: np.ndarray  # the fast table's threshold dtype [n_trees * ni]
    leaves: np.ndarray  # acc dtype [n_trees * (ni + 1) * kt]
    depth: np.ndarray  # int64 [n_trees]
    tgt: np.ndarray  # int64 [n_trees]: first target of each tree's kt values
    kt: int  # values per leaf: 1 (each tree gives one target) or n_targets
    ni: int  # interior slots per tree, 2**D - 1
    visits: int  # node visits per row (sum of depth)


# Deeper trees go to the general walk: lock-step walks take the depth of the deepest leaf.
_FAST_MAX_DEPTH = 64
_FAST_MODES = (ktrees.MODE_LEQ, ktrees.MODE_LT, ktrees.MODE_GT, ktrees.MODE_GTE)


def _build_fast(table: _TreeTable, xdtype: np.dtype, n_targets: int) -> _FastTable | None:
    """Convert a general table into the fast layout, or None when it does not apply exactly:
    modes other than LEQ/LT/GT/GTE, NaN thresholds, -inf thresholds of LT/GTE, a leaf giving
    the same target twice (summed there in another order than onnxruntime's), targets that
    some leaves of a tree reach and others not (has[] then depends on the row), or trees deeper
    than _FAST_MAX_DEPTH."""
    mode = table.mode
    n = mode.shape[0]
    is_leaf = mode == ktrees.MODE_LEAF
    branch = ~is_leaf
    if n == 0 or table.n_trees == 0 or not np.all(np.isin(mode[branch], _FAST_MODES)):
        return None
    thr = table.thr
    # Compare in the input's precision; float32 inputs keep float64 thresholds that float32
    # cannot hold exactly (the general walk compares in float64 too).
    dt = np.dtype(np.float32) if xdtype == np.float32 else np.dtype(np.float64)
    t = thr.astype(dt)
    if dt == np.float32 and np.any(t[branch].astype(np.float64) != thr[branch]):
        dt = np.dtype(np.float64)
        t = thr.astype(dt)
    if np.any(np.isnan(t[branch])):
        return None
    lt_like = branch & ((mode == ktrees.MODE_LT) | (mode == ktrees.MODE_GTE))
    if np.any(lt_like & (t == -np.inf)):
        return None
    # x < t  <=>  x <= the largest value below t (x and t in the same precision)
    t = np.where(lt_like, np.nextafter(t, dt.type(-np.inf)), t).astype(dt)
    swap = (branch & ((mode == ktrees.MODE_GT) | (mode == ktrees.MODE_GTE))).astype(np.uint8)
    nt = table.n_trees
    cap = n + nt
    f_left = np.empty(cap, np.int32)
    f_feat = np.empty(cap, np.int32)
    f_thr = np.empty(cap, dt)
    f_leaf = np.empty(cap, np.int32)
    t_root = np.empty(nt, np.int32)
    t_depth = np.empty(nt, np.int32)
    used = ktrees.fast_layout(
        table.roots,
        is_leaf.astype(np.uint8),
        table.feat,
        t,
        swap,
        table.tnode,
        table.fnode,
        f_left,
        f_feat,
        f_thr,
        f_leaf,
        t_root,
        t_depth,
        _FAST_MAX_DEPTH,
    )
    if used < 0:
        return None
    f_left, f_feat, f_thr, f_leaf = (a[:used].copy() for a in (f_left, f_feat, f_thr, f_leaf))

    # Dense leaf values: one row per leaf of the general table.
    leaves = np.flatnonzero(is_leaf)
    row_of = np.full(n, -1, np.int64)
    row_of[leaves] = np.arange(leaves.shape[0])
    lens = (table.aux1[leaves] - table.aux0[leaves]).astype(np.int64)
    total = int(lens.sum())
    first = np.cumsum(lens) - lens
    entry = np.repeat(table.aux0[leaves] - first, lens) + np.arange(total)
    rows = np.repeat(row_of[leaves], lens)
    targets = table.w_target[entry]
    if total and (targets.min() < 0 or targets.max() >= n_targets):
        return None
    keys = rows * n_targets + targets
    if np.unique(keys).shape[0] != total:
        return None
    values = np.zeros((leaves.shape[0], n_targets), dtype=table.acc_dtype)
    values[rows, targets] = table.w_value[entry]
    written = np.zeros((leaves.shape[0], n_targets), dtype=bool)
    written[rows, targets] = True

    slot_leaf = np.flatnonzero(f_leaf >= 0)
    tree_of = np.searchsorted(t_root, slot_leaf, side="right") - 1
    w = written[row_of[f_leaf[slot_leaf]]]
    any_t = np.zeros((nt, n_targets), dtype=bool)
    all_t = np.ones((nt, n_targets), dtype=bool)
    np.logical_or.at(any_t, tree_of, w)
    np.logical_and.at(all_t, tree_of, w)
    if not np.array_equal(any_t, all_t):
        return None
    f_leaf = np.where(f_leaf >= 0, row_of[np.maximum(f_leaf, 0)], -1).astype(np.int32)
    g_depth = np.array([t_depth[i : i + 8].max() for i in range(0, nt, 8)], dtype=np.int32).reshape(
        -1
    )
    fast = _FastTable(
        t_root=t_root,
        t_depth=t_depth,
        g_depth=g_depth,
        f_left=f_left,
        f_feat=f_feat,
        f_thr=f_thr,
        f_leaf=f_leaf,
        values=values,
        has=any_t.any(axis=0).astype(np.uint8),
        visits=int(t_depth.sum()),
        tree_targets=any_t,
    )
    fast.perfect = _build_perfect(fast, table.n_features)
    return fast


# The perfect layout pads every tree to 2**D slots (D: the deepest tree): beyond these bounds
# the padding costs more memory than the walk saves, and the fast layout's walk serves.
_PERFECT_MAX_DEPTH = 12
_PERFECT_MAX_BYTES = 64 << 20


def _build_perfect(fast: _FastTable, n_features: int) -> _PerfectTable | None:
    """The perfect layout of ``fast`` (kernels/cpu/trees.py), or None beyond the bounds."""
    nt = fast.t_root.shape[0]
    depth = fast.t_depth.astype(np.int64)
    d_max = int(depth.max()) if nt else 0
    n_targets = fast.values.shape[1]
    # each tree giving exactly one target (gradient-boosted classifiers, regressors) stores
    # one value per leaf; otherwise every leaf stores all targets, zeros included (as the fast
    # layout adds them)
    per_tree = fast.tree_targets.sum(axis=1)
    if nt and np.all(per_tree == 1):
        kt = 1
        tgt = np.argmax(fast.tree_targets, axis=1).astype(np.int64)
    else:
        kt = n_targets
        tgt = np.zeros(nt, np.int64)
    ni = (1 << d_max) - 1
    n_leaves = ni + 1
    thr_dt = fast.f_thr.dtype
    feat_dt = (
        np.uint8 if n_features <= 1 << 8 else np.uint16 if n_features <= 1 << 16 else np.uint32
    )
    size = nt * (ni * (np.dtype(feat_dt).itemsize + thr_dt.itemsize) + n_leaves * kt * 4)
    if nt == 0 or d_max > _PERFECT_MAX_DEPTH or size > _PERFECT_MAX_BYTES or kt == 0:
        return None
    feat = np.zeros((nt, ni), feat_dt)
    thr = np.full((nt, ni), np.inf, thr_dt)
    leaves = np.zeros((nt, n_leaves, kt), fast.values.dtype)
    # level by level: the fast-layout slot at every position of every tree; a leaf slot (its
    # threshold +inf in the fast layout) repeats into both children, so that the positions
    # below a leaf stay on it
    cur = fast.t_root.astype(np.int64).reshape(nt, 1)
    is_leaf_slot = fast.f_leaf >= 0
    for d in range(d_max + 1):
        done = np.flatnonzero(depth == d)
        if done.shape[0]:
            slots = cur[done]
            if not np.all(is_leaf_slot[slots]):  # pragma: no cover - fast_layout's contract
                return None
            vals = fast.values[fast.f_leaf[slots]]  # [trees, 2**d, n_targets]
            if kt == 1:
                vals = np.take_along_axis(vals, tgt[done].reshape(-1, 1, 1), axis=2)
            leaves[done, : 1 << d] = vals
        if d == d_max:
            break
        lo = (1 << d) - 1
        live = depth > d  # trees still branching at this level
        sl = cur[live]
        feat[live, lo : lo + (1 << d)] = fast.f_feat[sl]
        thr[live, lo : lo + (1 << d)] = fast.f_thr[sl]
        left = fast.f_left[cur].astype(np.int64)
        right = np.where(is_leaf_slot[cur], left, left + 1)
        cur = np.stack([left, right], axis=2).reshape(nt, -1)
    # the tree count padded to whole groups of the single-row walk with trees that are one
    # leaf worth 0: adding +0.0 to a sum that starts at +0.0 changes nothing
    n_pad = -nt % gtrees.GT
    if n_pad:
        feat = np.concatenate([feat, np.zeros((n_pad, ni), feat_dt)])
        thr = np.concatenate([thr, np.full((n_pad, ni), np.inf, thr_dt)])
        leaves = np.concatenate([leaves, np.zeros((n_pad, n_leaves, kt), leaves.dtype)])
        depth = np.concatenate([depth, np.zeros(n_pad, np.int64)])
        tgt = np.concatenate([tgt, np.zeros(n_pad, np.int64)])
    return _PerfectTable(
        feat=feat.reshape(-1),
        thr=thr.reshape(-1),
        leaves=leaves.reshape(-1),
        depth=depth,
        tgt=tgt,
        kt=kt,
        ni=ni,
        visits=int(depth.sum()),
    )


# Tables are built on first use and kept per attribute object: the executor passes the same
# attribute objects to every run of a node. The key objects are kept alive by the cache entry,
# so an id cannot be reused while its entry exists; the cache is bounded.
_TABLES: dict[tuple[int, ...], tuple[tuple[Any, ...], _TreeTable]] = {}
_TABLES_LOCK = threading.Lock()
_TABLES_MAX = 256


def _cached_table(keys: tuple[Any, ...], build: Any) -> _TreeTable:
    key = tuple(map(id, keys))
    hit = _TABLES.get(key)  # one dict read is atomic; writers hold the lock
    if hit is not None:
        return hit[1]
    table = build()
    with _TABLES_LOCK:
        if len(_TABLES) >= _TABLES_MAX:
            _TABLES.pop(next(iter(_TABLES)))
        _TABLES[key] = (keys, table)
    return table


def _attr_floats(values: Any, as_tensor: Any) -> np.ndarray | None:
    """A FLOATS attribute or its *_as_tensor twin (which wins), as float64."""
    if as_tensor is not None:
        return np.asarray(as_tensor, dtype=np.float64).reshape(-1)
    if values is not None:
        return np.asarray(values, dtype=np.float64).reshape(-1)
    return None


def _ranges(owner: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stable order of entries grouped by owner, and [start, end) per owner 0..n-1."""
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner, minlength=n)[:n]
    end = np.cumsum(counts)
    return order, (end - counts).astype(np.int64), end.astype(np.int64)


def _build_legacy_table(
    ctx: Any,
    treeids: Any,
    nodeids: Any,
    featureids: Any,
    values: np.ndarray | None,
    modes: Any,
    truenodeids: Any,
    falsenodeids: Any,
    missing_true: Any,
    w_treeids: Any,
    w_nodeids: Any,
    w_ids: Any,
    w_values: np.ndarray | None,
    what: str,
    w_float32: bool = True,
) -> _TreeTable:
    """Table of TreeEnsembleRegressor/Classifier 1 and 3 (nodes named by (tree id, node id))."""
    if treeids is None or nodeids is None or modes is None:
        raise ctx.error("nodes_treeids, nodes_nodeids and nodes_modes are required")
    tree = np.asarray(treeids, dtype=np.int64)
    nid = np.asarray(nodeids, dtype=np.int64)
    n = tree.shape[0]

    def col(v: Any, name: str, dtype: Any, default: Any = None) -> np.ndarray:
        if v is None or len(v) == 0:
            if default is None:
                raise ctx.error(f"attribute {name} is required (one entry per node)")
            return np.full(n, default, dtype=dtype)
        a = np.asarray(v, dtype=dtype).reshape(-1)
        if a.shape[0] != n:
            raise ctx.error(
                f"attribute {name} has {a.shape[0]} entries but nodes_treeids has {n}; every "
                "nodes_* attribute needs one entry per node"
            )
        return a

    try:
        mode = np.array([_MODES[m] for m in modes], dtype=np.int64)
    except KeyError as exc:
        raise ctx.error(f"unknown node mode {exc.args[0]!r} in nodes_modes") from None
    if mode.shape[0] != n:
        raise ctx.error(f"nodes_modes has {mode.shape[0]} entries, nodes_treeids has {n}")
    if np.any(mode == ktrees.MODE_MEMBER):
        raise ctx.error("BRANCH_MEMBER is only valid in TreeEnsemble-5")
    feat = col(featureids, "nodes_featureids", np.int64, 0)
    thr = col(values, "nodes_values", np.float64, 0.0)
    miss = col(missing_true, "nodes_missing_value_tracks_true", np.int64, 0)
    tid = col(truenodeids, "nodes_truenodeids", np.int64, 0)
    fid = col(falsenodeids, "nodes_falsenodeids", np.int64, 0)

    # (tree id, node id) -> row, via a sorted array of combined keys.
    ckeys = _combo(tree, nid)
    order = np.argsort(ckeys, kind="stable")
    skeys = ckeys[order]
    if n > 1 and np.any(skeys[1:] == skeys[:-1]):
        raise ctx.error("two nodes share the same (nodes_treeids, nodes_nodeids) pair")

    def lookup(t: np.ndarray, k: np.ndarray, name: str) -> np.ndarray:
        q = _combo(t, k)
        pos = np.minimum(np.searchsorted(skeys, q), max(n - 1, 0))
        ok = skeys[pos] == q if n else np.zeros(q.shape[0], dtype=bool)
        if not np.all(ok):
            bad = int(np.flatnonzero(~ok)[0])
            raise ctx.error(
                f"{name} refers to node {int(k[bad])} of tree {int(t[bad])}, which does not exist"
            )
        return order[pos].astype(np.int64)

    branch = mode != ktrees.MODE_LEAF
    tnode = np.zeros(n, dtype=np.int64)
    fnode = np.zeros(n, dtype=np.int64)
    if np.any(branch):
        tnode[branch] = lookup(tree[branch], tid[branch], "nodes_truenodeids")
        fnode[branch] = lookup(tree[branch], fid[branch], "nodes_falsenodeids")

    # The root of a tree is its first node in attribute order (onnxruntime's rule); trees are
    # taken in order of first appearance.
    _, first = np.unique(tree, return_index=True)
    roots = np.sort(first).astype(np.int64)

    wt = np.asarray(w_treeids if w_treeids is not None else [], dtype=np.int64)
    wn = np.asarray(w_nodeids if w_nodeids is not None else [], dtype=np.int64)
    wi = np.asarray(w_ids if w_ids is not None else [], dtype=np.int64)
    wv = w_values if w_values is not None else np.zeros(0, dtype=np.float64)
    if not (wt.shape[0] == wn.shape[0] == wi.shape[0] == wv.shape[0]):
        raise ctx.error(
            f"the {what}_treeids/_nodeids/_ids/_weights attributes must have equal lengths, "
            f"found {wt.shape[0]}, {wn.shape[0]}, {wi.shape[0]}, {wv.shape[0]}"
        )
    if np.any(wi < 0):
        raise ctx.error(f"{what}_ids must be >= 0")
    owner = lookup(wt, wn, f"{what}_nodeids") if wt.shape[0] else np.zeros(0, np.int64)
    worder, start, end = _ranges(owner, n)
    is_leaf = mode == ktrees.MODE_LEAF
    aux0 = np.where(is_leaf, start, 0).astype(np.int64)
    aux1 = np.where(is_leaf, end, 0).astype(np.int64)
    return _TreeTable(
        roots=roots,
        mode=mode,
        feat=feat,
        thr=thr,
        tnode=tnode,
        fnode=fnode,
        miss=miss,
        aux0=aux0,
        aux1=aux1,
        members=np.zeros(0, dtype=np.float64),
        w_target=np.ascontiguousarray(wi[worder]),
        w_value=np.ascontiguousarray(wv[worder]),
        n_features=int(feat[branch].max()) + 1 if np.any(branch) else 0,
        n_targets=int(wi.max()) + 1 if wi.shape[0] else 0,
        acc_dtype=np.float32 if w_float32 else np.float64,
    )


def _combo(tree: np.ndarray, node: np.ndarray) -> np.ndarray:
    # One int64 per (tree id, node id) pair; injective while |node id| < 2**31.
    return tree.astype(np.int64) * (1 << 32) + node.astype(np.int64)


def _run_table(ctx: Any, table: _TreeTable, x: np.ndarray, agg: int, n_targets: int):
    """Walk every tree for every row: (scores float64 [N, T], has uint8 [N, T])."""
    _check_shapes(ctx, table, x, n_targets)
    n = x.shape[0]
    out = np.zeros((n, n_targets), dtype=table.acc_dtype)
    if n and table.n_trees and agg in (ktrees.AGG_SUM, ktrees.AGG_AVERAGE):
        fast = table.fast_for(x.dtype, n_targets)
        if fast is not None:
            if fast.perfect is not None:
                return _perfect_sums(ctx, table, fast, x, agg, n_targets)
            return _run_fast(ctx, table, fast, x, agg, out)
    has = np.zeros((n, n_targets), dtype=np.uint8)
    if n == 0 or table.n_trees == 0:
        return out.astype(np.float64), has
    args = (x, *table.walk_arrays(), agg, out, has)
    if n > 1 and n * table.n_trees * 8 >= _jit.PARALLEL_THRESHOLD:
        bad_rows = np.zeros(1, np.int64)
        run_parallel(ktrees.predict_parallel, *args, bad_rows)
        bad = int(bad_rows[0])
    else:
        bad = ktrees.predict_serial(*args)
    if bad:
        raise _cycle_error(ctx)
    return out.astype(np.float64), has


def _cycle_error(ctx: Any) -> Exception:
    return ctx.error(
        "a tree walk did not reach a leaf (the true/false node ids form a cycle); fix the "
        "nodes_truenodeids / nodes_falsenodeids attributes"
    )


def _run_fast(
    ctx: Any, table: _TreeTable, fast: _FastTable, x: np.ndarray, agg: int, out: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_run_table` through the fast layout; rows holding a NaN take the general walk."""
    n = x.shape[0]
    skip = np.empty(n, dtype=np.uint8)
    n_nan = ktrees.nan_rows(x, skip)
    args = (
        x,
        fast.t_root,
        fast.t_depth,
        fast.g_depth,
        fast.f_left,
        fast.f_feat,
        fast.f_thr,
        fast.f_leaf,
        fast.values,
        skip,
        out,
    )
    if n >= 16 and n * fast.visits >= _FAST_PARALLEL_VISITS:
        run_parallel(ktrees.fast_predict_parallel, *args)
    else:
        ktrees.fast_predict_serial(*args)
    has = np.empty((n, out.shape[1]), dtype=np.uint8)
    has[:] = fast.has
    if n_nan:
        rows = np.flatnonzero(skip).astype(np.int64)
        has[rows] = 0
        if ktrees.rows_general(x, rows, *table.walk_arrays(), agg, out, has):
            raise _cycle_error(ctx)
    return out.astype(np.float64), has


# Node visits (rows x summed tree depths) from which the fast walk runs on several threads:
# about 5 ms of serial walking, so that waking the thread pool (milliseconds on a loaded
# machine, measured) stays small beside it. Batch 100 of 100 depth-10 trees stays serial.
_FAST_PARALLEL_VISITS = 1 << 22


# --------------------------------------------------------------------------------------------
# Perfect layout: walk and finish in one generated kernel (onnxjit/codegen/trees.py)
# --------------------------------------------------------------------------------------------

# Node visits (rows x summed tree depths) from which the perfect walk runs on the thread pool:
# about 15 us of walking. A pool call costs a few microseconds more than the serial kernel at
# worst (onnxjit/backends/cpu/pool.py), and halves the time when a worker is spinning.
_PERFECT_PARALLEL_VISITS = 1 << 15
_NO_LABELS = np.zeros(1, np.int64)


@dataclass
class _Spec:
    """What a tree-ensemble node's attributes fix besides its table (set on its first run)."""

    kind: int  # ktrees.KIND_REGRESSOR or ktrees.KIND_CLASSIFIER
    agg: int
    post: int
    base: np.ndarray | None
    n_targets: int
    labels: np.ndarray | None = None  # classifier labels (int64 or object)
    # per input (dtype, row width): the kernel plan, or None where the perfect walk does not
    # serve (the host path then runs)
    plans: dict[Any, _Plan | None] = field(default_factory=dict)


@dataclass
class _Plan:
    """Arguments of one generated walk-and-finish kernel for one input dtype and width."""

    predict: Any
    args: tuple[Any, ...]  # feat, thr, leaves, depth, tgt, fin_i, fin_f
    label_values: np.ndarray  # what the kernel writes as a label (class indices for strings)
    fast: _FastTable
    visits: int


def _perfect_call(p: _PerfectTable, x: np.ndarray, fin_i, fin_f, y, labels, label_values):
    """Run the generated kernel over every row of ``x``; returns the rows holding a NaN."""
    mod = gtrees.module(x.shape[1], p.ni, p.kt)
    args = (x, p.feat, p.thr, p.leaves, p.depth, p.tgt, fin_i, fin_f, y, labels)
    return _launch(mod.predict, args, label_values, x.shape[0] * p.visits)


# The control array of a kernel run on the calling thread alone (copied per call).
_CTL_ALONE = np.zeros(kchunks.CTL_SIZE, np.int64)
_CTL_ALONE[kchunks.THREADS] = 1
# Where serial calls add their count of NaN rows (they read the kernel's return value).
_BAD_SINK = np.zeros(1, np.int64)


def _launch(predict: Any, args: tuple, label_values, visits: int) -> int:
    n = args[0].shape[0]
    if n > gtrees.G and visits >= _PERFECT_PARALLEL_VISITS:
        bad_rows = np.zeros(1, np.int64)
        run_parallel(predict, *args, label_values, bad_rows)
        return int(bad_rows[0])
    return int(predict(_CTL_ALONE.copy(), *args, label_values, _BAD_SINK))


def _nan_rows(x: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.isnan(x).any(axis=1))


def _perfect_sums(
    ctx: Any, table: _TreeTable, fast: _FastTable, x: np.ndarray, agg: int, n_targets: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_run_table` through the perfect layout (raw sums, no finishing)."""
    fin_i = np.zeros(ktrees.FIN_SIZE, np.int64)
    fin_f = np.zeros(1 + 2 * n_targets, np.float64)
    n = x.shape[0]
    out = np.empty((n, n_targets), np.float64)
    bad = _perfect_call(fast.perfect, x, fin_i, fin_f, out, _NO_LABELS, _NO_LABELS)
    has = np.empty((n, n_targets), dtype=np.uint8)
    has[:] = fast.has
    if bad:
        rows = _nan_rows(x)
        sub = np.zeros((rows.shape[0], n_targets), dtype=table.acc_dtype)
        out[rows], has[rows] = _run_fast(ctx, table, fast, np.ascontiguousarray(x[rows]), agg, sub)
    return out, has


def _check_shapes(ctx: Any, table: _TreeTable, x: np.ndarray, n_targets: int) -> None:
    if x.shape[1] < table.n_features:
        raise ctx.error(
            f"the trees read feature {table.n_features - 1} but the input has {x.shape[1]} "
            "features per row; pass [N, F] with enough columns"
        )
    if table.n_targets > n_targets:
        raise ctx.error(
            f"a leaf writes target/class {table.n_targets - 1} but there are only {n_targets}"
        )


def _make_plan(ctx: Any, table: _TreeTable, spec: _Spec, x: np.ndarray) -> _Plan | None:
    """The fused kernel plan of ``spec`` for inputs like ``x``, or None where the host path
    must run (no perfect layout, MIN/MAX, a binary classifier's conventions)."""
    nt = spec.n_targets
    _check_shapes(ctx, table, x, nt)
    if table.n_trees == 0 or spec.agg not in (ktrees.AGG_SUM, ktrees.AGG_AVERAGE):
        return None
    if spec.kind == ktrees.KIND_CLASSIFIER and nt == 2:
        return None
    fast = table.fast_for(x.dtype, nt)
    if fast is None or fast.perfect is None:
        return None
    p = fast.perfect
    if p.kt not in (1, nt):  # pragma: no cover - _build_perfect's contract
        return None
    fin_i = np.zeros(ktrees.FIN_SIZE, np.int64)
    fin_f = np.zeros(1 + 2 * nt, np.float64)
    fin_i[ktrees.FIN_KIND] = spec.kind
    fin_i[ktrees.FIN_AVG] = int(spec.agg == ktrees.AGG_AVERAGE)
    fin_f[0] = table.n_trees
    base = spec.base
    label_values = _NO_LABELS
    if spec.kind == ktrees.KIND_REGRESSOR:
        # _finish_regression, row by row
        if base is not None and base.shape[0]:
            if base.shape[0] == nt and nt > 1:
                fin_f[1 : 1 + nt] = base * fast.has
            elif nt == 1:
                fin_f[1] = base[0]
            else:
                raise ctx.error(f"base_values has {base.shape[0]} entries, expected n_targets={nt}")
            fin_i[ktrees.FIN_BASE] = 1
        post = spec.post if nt > 1 or spec.post == kml.PT_PROBIT else kml.PT_NONE
    else:
        # _tree_classify with one score column or more than two
        mask = fast.has.astype(np.float64)
        if base is not None and base.shape[0]:
            if base.shape[0] != nt:
                raise ctx.error(f"base_values has {base.shape[0]} entries, expected {nt}")
            fin_f[1 : 1 + nt] = base
            fin_i[ktrees.FIN_BASE] = 1
            mask[:] = 1.0
        fin_f[1 + nt :] = mask
        labels = spec.labels
        label_values = labels if labels.dtype == np.int64 else np.arange(nt, dtype=np.int64)
        post = spec.post
    fin_i[ktrees.FIN_POST] = post
    mod = gtrees.module(x.shape[1], p.ni, p.kt)
    return _Plan(
        predict=mod.predict,
        args=(p.feat, p.thr, p.leaves, p.depth, p.tgt, fin_i, fin_f),
        label_values=label_values,
        fast=fast,
        visits=p.visits,
    )


_MISSING = object()


def _plan_for(ctx: Any, table: _TreeTable, spec: _Spec, x: np.ndarray) -> _Plan | None:
    key = (x.dtype, x.shape[1])
    plan = spec.plans.get(key, _MISSING)
    if plan is _MISSING:
        plan = _make_plan(ctx, table, spec, x)
        with _TABLES_LOCK:
            spec.plans.setdefault(key, plan)
    return plan


def _run_plan(
    ctx: Any, table: _TreeTable, spec: _Spec, plan: _Plan, x: np.ndarray, ydtype: Any
) -> tuple[np.ndarray, np.ndarray | None]:
    """Scores (and labels, for a classifier) of every row through the fused kernel; rows
    holding a NaN are computed again by the host path."""
    n = x.shape[0]
    y = np.empty((n, spec.n_targets), ydtype)
    lab = np.empty(n, np.int64) if spec.kind == ktrees.KIND_CLASSIFIER else _NO_LABELS
    bad = _launch(plan.predict, (x, *plan.args, y, lab), plan.label_values, n * plan.visits)
    return _complete(ctx, table, spec, plan, x, y, lab, bad)


def _complete(
    ctx: Any,
    table: _TreeTable,
    spec: _Spec,
    plan: _Plan,
    x: np.ndarray,
    y: np.ndarray,
    lab: np.ndarray,
    bad: int,
) -> tuple[np.ndarray, np.ndarray | None]:
    """After the fused kernel: string labels, and the rows holding a NaN (``bad`` of them)
    computed again by the host path. Returns (scores, labels or None)."""
    classify = spec.kind == ktrees.KIND_CLASSIFIER
    labels = spec.labels
    if classify and labels.dtype == object:
        lab = label_output(labels, lab)
    if bad:
        rows = _nan_rows(x)
        sub = np.zeros((rows.shape[0], spec.n_targets), dtype=table.acc_dtype)
        out, has = _run_fast(ctx, table, plan.fast, np.ascontiguousarray(x[rows]), spec.agg, sub)
        if classify:
            lab[rows], y[rows] = _tree_classify(
                ctx, out, has, labels, spec.base, spec.post, table.binary_case, table.all_positive
            )
        else:
            y[rows] = _finish_regression(
                ctx, out, has, spec.agg, table.n_trees, spec.base, spec.post
            )
    return y, (lab if classify else None)


def _finish_regression(
    ctx: Any,
    out: np.ndarray,
    has: np.ndarray,
    agg: int,
    n_trees: int,
    base: np.ndarray | None,
    post: int,
) -> np.ndarray:
    """Aggregate finishing (AVERAGE divides by the tree count), base values, post-transform."""
    if agg == ktrees.AGG_AVERAGE and n_trees:
        out /= n_trees
    n_targets = out.shape[1]
    if base is not None and base.shape[0]:
        if base.shape[0] == n_targets and n_targets > 1:
            # onnxruntime adds a target's base value only where some leaf reached it
            out += base * has
        elif n_targets == 1:
            out += base[0]
        else:
            raise ctx.error(
                f"base_values has {base.shape[0]} entries, expected n_targets={n_targets}"
            )
    if n_targets == 1:
        # onnxruntime applies only PROBIT to a single score column.
        if post == kml.PT_PROBIT:
            kml.post_transform(out, post)
        return out
    return _apply_post(out, post)


def _regressor_spec(
    ctx: Any,
    table: _TreeTable,
    aggregate_function: str,
    base: np.ndarray | None,
    n_targets: int | None,
    post_transform: str,
) -> _Spec:
    if aggregate_function not in _AGG:
        raise ctx.unsupported(f"aggregate_function {aggregate_function!r} is not supported")
    nt = int(n_targets) if n_targets is not None else max(table.n_targets, 1)
    spec = _Spec(
        kind=ktrees.KIND_REGRESSOR,
        agg=_AGG[aggregate_function],
        post=_post_code(ctx, post_transform),
        base=base,
        n_targets=nt,
    )
    table.spec = spec
    return spec


def _regress(ctx: Any, table: _TreeTable, spec: _Spec, x: np.ndarray, ydtype: Any) -> np.ndarray:
    """Y [N, n_targets] in ``ydtype``: the fused kernel where it serves, else the host path."""
    xf = _float_rows(ctx, x)
    plan = _plan_for(ctx, table, spec, xf)
    if plan is None:
        out, has = _run_table(ctx, table, xf, spec.agg, spec.n_targets)
        out = _finish_regression(ctx, out, has, spec.agg, table.n_trees, spec.base, spec.post)
        return out.astype(ydtype)
    if ydtype not in (np.float32, np.float64):  # rounded once, from float64
        return _run_plan(ctx, table, spec, plan, xf, np.float64)[0].astype(ydtype)
    return _run_plan(ctx, table, spec, plan, xf, ydtype)[0]


@onnx_op("TreeEnsembleRegressor", since=1, domain=ML_DOMAIN)
def tree_ensemble_regressor_1(
    ctx,
    x,
    *,
    aggregate_function="SUM",
    base_values=None,
    n_targets=None,
    nodes_falsenodeids=None,
    nodes_featureids=None,
    nodes_hitrates=None,
    nodes_missing_value_tracks_true=None,
    nodes_modes=None,
    nodes_nodeids=None,
    nodes_treeids=None,
    nodes_truenodeids=None,
    nodes_values=None,
    post_transform="NONE",
    target_ids=None,
    target_nodeids=None,
    target_treeids=None,
    target_weights=None,
):
    """TreeEnsembleRegressor-1: Y [N, n_targets] float32."""
    return tree_ensemble_regressor_3(
        ctx,
        x,
        aggregate_function=aggregate_function,
        base_values=base_values,
        n_targets=n_targets,
        nodes_falsenodeids=nodes_falsenodeids,
        nodes_featureids=nodes_featureids,
        nodes_hitrates=nodes_hitrates,
        nodes_missing_value_tracks_true=nodes_missing_value_tracks_true,
        nodes_modes=nodes_modes,
        nodes_nodeids=nodes_nodeids,
        nodes_treeids=nodes_treeids,
        nodes_truenodeids=nodes_truenodeids,
        nodes_values=nodes_values,
        post_transform=post_transform,
        target_ids=target_ids,
        target_nodeids=target_nodeids,
        target_treeids=target_treeids,
        target_weights=target_weights,
    )


@onnx_op("TreeEnsembleRegressor", since=3, domain=ML_DOMAIN)
def tree_ensemble_regressor_3(
    ctx,
    x,
    *,
    aggregate_function="SUM",
    base_values=None,
    base_values_as_tensor=None,
    n_targets=None,
    nodes_falsenodeids=None,
    nodes_featureids=None,
    nodes_hitrates=None,
    nodes_hitrates_as_tensor=None,
    nodes_missing_value_tracks_true=None,
    nodes_modes=None,
    nodes_nodeids=None,
    nodes_treeids=None,
    nodes_truenodeids=None,
    nodes_values=None,
    nodes_values_as_tensor=None,
    post_transform="NONE",
    target_ids=None,
    target_nodeids=None,
    target_treeids=None,
    target_weights=None,
    target_weights_as_tensor=None,
):
    """TreeEnsembleRegressor-3 (adds the *_as_tensor attributes, double precision allowed).

    Y [N, n_targets] float32: per target, the SUM / AVERAGE / MIN / MAX over trees of the
    reached leaves' weights, plus base_values, then post_transform.
    """

    def build() -> _TreeTable:
        # Attribute conversions happen here, once per node, not on every run.
        return _build_legacy_table(
            ctx,
            nodes_treeids,
            nodes_nodeids,
            nodes_featureids,
            _attr_floats(nodes_values, nodes_values_as_tensor),
            nodes_modes,
            nodes_truenodeids,
            nodes_falsenodeids,
            nodes_missing_value_tracks_true,
            target_treeids,
            target_nodeids,
            target_ids,
            _attr_floats(target_weights, target_weights_as_tensor),
            "target",
            target_weights_as_tensor is None
            or np.asarray(target_weights_as_tensor).dtype == np.float32,
        )

    table = _cached_table(  # the attributes of _REGRESSOR_KEYS, in that order
        (
            nodes_treeids,
            nodes_modes,
            nodes_values,
            nodes_values_as_tensor,
            target_weights,
            target_weights_as_tensor,
            target_ids,
            aggregate_function,
            base_values,
            base_values_as_tensor,
            n_targets,
            post_transform,
        ),
        build,
    )
    spec = table.spec
    if spec is None:
        spec = _regressor_spec(
            ctx,
            table,
            aggregate_function,
            _attr_floats(base_values, base_values_as_tensor),
            n_targets,
            post_transform,
        )
    return _regress(ctx, table, spec, x, np.float32)


def class_labels(
    ctx: Any, ints: Any, strings: Any, ints_name: str = "classlabels_int64s"
) -> np.ndarray:
    """A classifier's label attribute as an int64 or string (object) array."""
    if strings:
        return np.array(list(strings), dtype=object)
    if ints:
        return np.asarray(ints, dtype=np.int64)
    raise ctx.error(f"one of {ints_name} / classlabels_strings must be set")


def label_output(labels: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``labels[idx]`` as the label output (int64, or an object array of str)."""
    if labels.dtype == object:
        out = np.empty(idx.shape[0], dtype=object)
        out[:] = labels[idx] if idx.shape[0] else []
        return out
    return labels[idx].astype(np.int64)


def _tree_classify(
    ctx: Any,
    out: np.ndarray,
    has: np.ndarray,
    labels: np.ndarray,
    base: np.ndarray | None,
    post: int,
    binary_case: bool,
    all_positive: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Labels and scores from summed class scores, following onnxruntime's classifier."""
    n, c = out.shape
    has = has.astype(bool)
    base = base if base is not None else np.zeros(0)
    if c > 2 or c == 1:
        if base.shape[0]:
            if base.shape[0] != c:
                raise ctx.error(f"base_values has {base.shape[0]} entries, expected {c}")
            out += base
            has[:] = True
        # argmax among the classes that received a score (class 0 when none did)
        masked = np.where(has, out, -np.inf)
        idx = np.argmax(masked, axis=1) if c else np.zeros(n, np.int64)
        return label_output(labels, idx), _apply_post(out, post).astype(np.float32)

    # Two classes. "wide" rows keep both columns; the others reduce to one score s0.
    s0 = out[:, 0].copy()
    s1 = out[:, 1].copy()
    h0 = has[:, 0]
    h1 = has[:, 1].copy()
    if base.shape[0] == 2:
        # onnxruntime: when class 1 got a score, s1 = base1 + s0 and s0 = -s1; otherwise both
        # columns get their base value.
        s1 = np.where(h1, base[1] + s0, s1 + base[1])
        s0 = np.where(h1, -s1, s0 + base[0])
        wide = np.ones(n, dtype=bool)
    elif base.shape[0] == 1:
        s0 = s0 + base[0]
        wide = h1
    elif base.shape[0] == 0:
        wide = h1
    else:
        raise ctx.error(f"base_values has {base.shape[0]} entries, expected 2")
    pos = np.where(wide & h1, s1, np.where(h0, s0, 0.0))
    if binary_case:
        positive = pos > 0.5 if all_positive else pos > 0
    else:
        positive = pos > 0
    idx = positive.astype(np.int64)
    scores = np.empty((n, 2), dtype=np.float64)
    # rows with two score columns: post-transform both
    w = np.flatnonzero(wide)
    if w.shape[0]:
        sw = np.ascontiguousarray(np.stack([s0[w], s1[w]], axis=1))
        scores[w] = _apply_post(sw, post)
    # rows with one score column: expand it to two
    nw = np.flatnonzero(~wide)
    if nw.shape[0]:
        v = s0[nw]
        if post == kml.PT_PROBIT:
            p = np.ascontiguousarray(v.reshape(-1, 1))
            kml.post_transform(p, post)
            scores[nw, 0] = p[:, 0]
            scores[nw, 1] = 0.0
        elif binary_case and all_positive:
            if post == kml.PT_LOGISTIC:
                p = np.ascontiguousarray(v.reshape(-1, 1))
                kml.post_transform(p, post)
                v = p[:, 0]
            scores[nw, 0] = 1.0 - v
            scores[nw, 1] = v
        elif post == kml.PT_LOGISTIC:
            a = np.ascontiguousarray(np.stack([-v, v], axis=1))
            scores[nw] = _apply_post(a, post)
        else:
            scores[nw, 0] = -v
            scores[nw, 1] = v
    return label_output(labels, idx), scores.astype(np.float32)


@onnx_op("TreeEnsembleClassifier", since=1, domain=ML_DOMAIN)
def tree_ensemble_classifier_1(
    ctx,
    x,
    *,
    base_values=None,
    class_ids=None,
    class_nodeids=None,
    class_treeids=None,
    class_weights=None,
    classlabels_int64s=None,
    classlabels_strings=None,
    nodes_falsenodeids=None,
    nodes_featureids=None,
    nodes_hitrates=None,
    nodes_missing_value_tracks_true=None,
    nodes_modes=None,
    nodes_nodeids=None,
    nodes_treeids=None,
    nodes_truenodeids=None,
    nodes_values=None,
    post_transform="NONE",
):
    """TreeEnsembleClassifier-1: (Y labels [N], Z scores [N, n_classes] float32)."""
    return tree_ensemble_classifier_3(
        ctx,
        x,
        base_values=base_values,
        class_ids=class_ids,
        class_nodeids=class_nodeids,
        class_treeids=class_treeids,
        class_weights=class_weights,
        classlabels_int64s=classlabels_int64s,
        classlabels_strings=classlabels_strings,
        nodes_falsenodeids=nodes_falsenodeids,
        nodes_featureids=nodes_featureids,
        nodes_hitrates=nodes_hitrates,
        nodes_missing_value_tracks_true=nodes_missing_value_tracks_true,
        nodes_modes=nodes_modes,
        nodes_nodeids=nodes_nodeids,
        nodes_treeids=nodes_treeids,
        nodes_truenodeids=nodes_truenodeids,
        nodes_values=nodes_values,
        post_transform=post_transform,
    )


@onnx_op("TreeEnsembleClassifier", since=3, domain=ML_DOMAIN)
def tree_ensemble_classifier_3(
    ctx,
    x,
    *,
    base_values=None,
    base_values_as_tensor=None,
    class_ids=None,
    class_nodeids=None,
    class_treeids=None,
    class_weights=None,
    class_weights_as_tensor=None,
    classlabels_int64s=None,
    classlabels_strings=None,
    nodes_falsenodeids=None,
    nodes_featureids=None,
    nodes_hitrates=None,
    nodes_hitrates_as_tensor=None,
    nodes_missing_value_tracks_true=None,
    nodes_modes=None,
    nodes_nodeids=None,
    nodes_treeids=None,
    nodes_truenodeids=None,
    nodes_values=None,
    nodes_values_as_tensor=None,
    post_transform="NONE",
):
    """TreeEnsembleClassifier-3: (Y labels [N] int64 or string, Z scores [N, C] float32).

    Class scores are the sums of the reached leaves' class weights plus base_values, then
    post_transform. With two class labels and weights for only one class, the one score is
    expanded to two columns as onnxruntime does ([1-s, s] for non-negative weights, else
    [-s, s] or logistic of both).
    """

    def build() -> _TreeTable:
        # Attribute conversions happen here, once per node, not on every run.
        labels = class_labels(ctx, classlabels_int64s, classlabels_strings)
        weights = _attr_floats(class_weights, class_weights_as_tensor)
        table = _build_legacy_table(
            ctx,
            nodes_treeids,
            nodes_nodeids,
            nodes_featureids,
            _attr_floats(nodes_values, nodes_values_as_tensor),
            nodes_modes,
            nodes_truenodeids,
            nodes_falsenodeids,
            nodes_missing_value_tracks_true,
            class_treeids,
            class_nodeids,
            class_ids,
            weights,
            "class",
            class_weights_as_tensor is None
            or np.asarray(class_weights_as_tensor).dtype == np.float32,
        )
        cid = np.asarray(class_ids if class_ids is not None else [], dtype=np.int64)
        table.binary_case = labels.shape[0] == 2 and np.unique(cid).shape[0] == 1
        table.all_positive = weights is None or bool(np.all(weights >= 0))
        return table

    table = _cached_table(  # the attributes of _CLASSIFIER_KEYS, in that order
        (
            nodes_treeids,
            nodes_modes,
            nodes_values,
            nodes_values_as_tensor,
            class_weights,
            class_weights_as_tensor,
            class_ids,
            classlabels_int64s,
            classlabels_strings,
            base_values,
            base_values_as_tensor,
            post_transform,
        ),
        build,
    )
    spec = table.spec
    if spec is None:
        labels = class_labels(ctx, classlabels_int64s, classlabels_strings)
        spec = _Spec(
            kind=ktrees.KIND_CLASSIFIER,
            agg=ktrees.AGG_SUM,
            post=_post_code(ctx, post_transform),
            base=_attr_floats(base_values, base_values_as_tensor),
            n_targets=labels.shape[0],
            labels=labels,
        )
        table.spec = spec
    xf = _float_rows(ctx, x)
    plan = _plan_for(ctx, table, spec, xf)
    if plan is not None:
        y, lab = _run_plan(ctx, table, spec, plan, xf, np.float32)
        return lab, y
    out, has = _run_table(ctx, table, xf, ktrees.AGG_SUM, spec.n_targets)
    return _tree_classify(
        ctx,
        out,
        has,
        spec.labels,
        spec.base,
        spec.post,
        table.binary_case,
        table.all_positive,
    )


def _build_v5_table(
    ctx: Any,
    n_targets: int,
    featureids: Any,
    splits: np.ndarray,
    modes: np.ndarray,
    truenodeids: Any,
    falsenodeids: Any,
    trueleafs: Any,
    falseleafs: Any,
    missing_true: Any,
    leaf_targetids: Any,
    leaf_weights: np.ndarray,
    tree_roots: Any,
    membership_values: np.ndarray | None,
) -> _TreeTable:
    """Table of TreeEnsemble-5: interior nodes first, then one LEAF row per leaf entry."""
    mode = np.asarray(modes).reshape(-1).astype(np.int64)
    n = mode.shape[0]

    def col(v: Any, name: str, default: int | None = None) -> np.ndarray:
        if v is None or len(v) == 0:
            if default is None:
                raise ctx.error(f"attribute {name} is required (one entry per node)")
            return np.full(n, default, dtype=np.int64)
        a = np.asarray(v, dtype=np.int64).reshape(-1)
        if a.shape[0] != n:
            raise ctx.error(f"{name} has {a.shape[0]} entries, nodes_modes has {n}")
        return a

    if np.any((mode < 0) | (mode > ktrees.MODE_MEMBER)):
        raise ctx.error("nodes_modes values must be in 0..6")
    feat = col(featureids, "nodes_featureids")
    thr = np.asarray(splits, dtype=np.float64).reshape(-1)
    if thr.shape[0] != n:
        raise ctx.error(f"nodes_splits has {thr.shape[0]} entries, nodes_modes has {n}")
    tl = col(trueleafs, "nodes_trueleafs")
    fl = col(falseleafs, "nodes_falseleafs")
    ti = col(truenodeids, "nodes_truenodeids")
    fi = col(falsenodeids, "nodes_falsenodeids")
    miss = col(missing_true, "nodes_missing_value_tracks_true", 0)
    lt = np.asarray(leaf_targetids, dtype=np.int64).reshape(-1)
    lw = np.asarray(leaf_weights, dtype=np.float64).reshape(-1)
    nl = lt.shape[0]
    if lw.shape[0] != nl:
        raise ctx.error(f"leaf_weights has {lw.shape[0]} entries, leaf_targetids has {nl}")
    if nl and (lt.min() < 0 or lt.max() >= n_targets):
        raise ctx.error(f"leaf_targetids must be in [0, n_targets={n_targets})")

    def child(ids: np.ndarray, leaf: np.ndarray, name: str) -> np.ndarray:
        lim = np.where(leaf != 0, nl, n)
        if np.any((ids < 0) | (ids >= lim)):
            raise ctx.error(f"{name} has an index out of range of the nodes/leaves it refers to")
        return np.where(leaf != 0, n + ids, ids).astype(np.int64)

    tnode = child(ti, tl, "nodes_truenodeids")
    fnode = child(fi, fl, "nodes_falsenodeids")
    roots = np.asarray(tree_roots, dtype=np.int64).reshape(-1)
    if np.any((roots < 0) | (roots >= n)):
        raise ctx.error("tree_roots has an index out of range of the nodes")

    aux0 = np.zeros(n + nl, dtype=np.int64)
    aux1 = np.zeros(n + nl, dtype=np.int64)
    aux0[n:] = np.arange(nl)
    aux1[n:] = np.arange(1, nl + 1)
    members = np.zeros(0, dtype=np.float64)
    member_nodes = np.flatnonzero(mode == ktrees.MODE_MEMBER)
    if member_nodes.shape[0]:
        if membership_values is None:
            raise ctx.error("BRANCH_MEMBER nodes need the membership_values attribute")
        mv = np.asarray(membership_values, dtype=np.float64).reshape(-1)
        seps = np.flatnonzero(np.isnan(mv))
        if seps.shape[0] < member_nodes.shape[0]:
            raise ctx.error(
                f"membership_values holds {seps.shape[0]} NaN-terminated sets but there are "
                f"{member_nodes.shape[0]} BRANCH_MEMBER nodes; give one set per node"
            )
        starts = np.concatenate([[0], seps[:-1] + 1])
        aux0[member_nodes] = starts[: member_nodes.shape[0]]
        aux1[member_nodes] = seps[: member_nodes.shape[0]]
        members = mv
    full_mode = np.concatenate([mode, np.full(nl, ktrees.MODE_LEAF, dtype=np.int64)])
    zeros = np.zeros(nl, dtype=np.int64)
    return _TreeTable(
        roots=roots,
        mode=full_mode,
        feat=np.concatenate([feat, zeros]),
        thr=np.concatenate([thr, np.zeros(nl)]),
        tnode=np.concatenate([tnode, zeros]),
        fnode=np.concatenate([fnode, zeros]),
        miss=np.concatenate([miss, zeros]),
        aux0=aux0,
        aux1=aux1,
        members=members,
        w_target=np.ascontiguousarray(lt),
        w_value=np.ascontiguousarray(lw),
        n_features=int(feat.max()) + 1 if n else 0,
        n_targets=int(lt.max()) + 1 if nl else 0,
        acc_dtype=np.float64 if np.asarray(leaf_weights).dtype == np.float64 else np.float32,
    )


@onnx_op("TreeEnsemble", since=5, domain=ML_DOMAIN)
def tree_ensemble_5(
    ctx,
    x,
    *,
    aggregate_function=1,
    leaf_targetids=None,
    leaf_weights=None,
    membership_values=None,
    n_targets=None,
    nodes_falseleafs=None,
    nodes_falsenodeids=None,
    nodes_featureids=None,
    nodes_hitrates=None,
    nodes_missing_value_tracks_true=None,
    nodes_modes=None,
    nodes_splits=None,
    nodes_trueleafs=None,
    nodes_truenodeids=None,
    post_transform=0,
    tree_roots=None,
):
    """TreeEnsemble-5: Y [N, n_targets] in X's float type.

    aggregate_function: 0 AVERAGE, 1 SUM, 2 MIN, 3 MAX; post_transform: 0 NONE, 1 SOFTMAX,
    2 LOGISTIC, 3 SOFTMAX_ZERO, 4 PROBIT. Node modes 0..6 (6 = BRANCH_MEMBER, sets taken from
    membership_values in node order, NaN-separated).
    """
    if aggregate_function not in (0, 1, 2, 3):
        raise ctx.unsupported(f"aggregate_function {aggregate_function} is not in 0..3")
    if post_transform not in (0, 1, 2, 3, 4):
        raise ctx.unsupported(f"post_transform {post_transform} is not in 0..4")
    if n_targets is None or n_targets < 1:
        raise ctx.error("n_targets must be set to a positive value")
    for name, v in (
        ("nodes_modes", nodes_modes),
        ("nodes_splits", nodes_splits),
        ("leaf_weights", leaf_weights),
        ("leaf_targetids", leaf_targetids),
        ("tree_roots", tree_roots),
    ):
        if v is None:
            raise ctx.error(f"attribute {name} is required")

    def build() -> _TreeTable:
        return _build_v5_table(
            ctx,
            int(n_targets),
            nodes_featureids,
            nodes_splits,
            nodes_modes,
            nodes_truenodeids,
            nodes_falsenodeids,
            nodes_trueleafs,
            nodes_falseleafs,
            nodes_missing_value_tracks_true,
            leaf_targetids,
            leaf_weights,
            tree_roots,
            membership_values,
        )

    table = _cached_table(  # the attributes of _V5_KEYS, in that order
        (
            nodes_modes,
            nodes_splits,
            leaf_weights,
            tree_roots,
            aggregate_function,
            n_targets,
            post_transform,
        ),
        build,
    )
    spec = table.spec
    if spec is None:
        spec = table.spec = _Spec(
            kind=ktrees.KIND_REGRESSOR,
            agg=int(aggregate_function),
            post=int(post_transform),
            base=None,
            n_targets=int(n_targets),
        )
    out_dtype = x.dtype if x.dtype in (np.float32, np.float64, np.float16) else np.float32
    return _regress(ctx, table, spec, x, out_dtype)


# -- fast paths (registry.fast_path): later runs of a node go straight to its kernel --------

# The attributes that key each operator's table, in the order its implementation passes them
# to _cached_table (version 1 of the legacy operators lacks the *_as_tensor attributes: None).
_REGRESSOR_KEYS = (
    "nodes_treeids",
    "nodes_modes",
    "nodes_values",
    "nodes_values_as_tensor",
    "target_weights",
    "target_weights_as_tensor",
    "target_ids",
    "aggregate_function",
    "base_values",
    "base_values_as_tensor",
    "n_targets",
    "post_transform",
)
_CLASSIFIER_KEYS = (
    "nodes_treeids",
    "nodes_modes",
    "nodes_values",
    "nodes_values_as_tensor",
    "class_weights",
    "class_weights_as_tensor",
    "class_ids",
    "classlabels_int64s",
    "classlabels_strings",
    "base_values",
    "base_values_as_tensor",
    "post_transform",
)
_V5_KEYS = (
    "nodes_modes",
    "nodes_splits",
    "leaf_weights",
    "tree_roots",
    "aggregate_function",
    "n_targets",
    "post_transform",
)


def _prepare_trees(ctx: Any, x: Any, kwargs: dict, names: tuple[str, ...], v5: bool) -> Any:
    """``fast(x)`` running the fused kernel the implementation just used for inputs like
    ``x`` (same dtype and row width, 2-D C-contiguous, any row count), or None."""
    hit = _TABLES.get(tuple(id(kwargs.get(k)) for k in names))
    if hit is None or not isinstance(x, np.ndarray) or x.ndim != 2 or not x.flags.c_contiguous:
        return None
    table = hit[1]
    spec = table.spec
    if spec is None or x.dtype not in (np.float32, np.float64):
        return None
    plan = spec.plans.get((x.dtype, x.shape[1]))
    if plan is None:
        return None
    dtype = x.dtype
    width = x.shape[1]
    ydtype = dtype if v5 else np.dtype(np.float32)
    n_out = spec.n_targets
    classify = spec.kind == ktrees.KIND_CLASSIFIER
    strings = classify and spec.labels.dtype == object
    predict = plan.predict
    args = plan.args
    label_values = plan.label_values
    visits = plan.visits
    group = gtrees.G
    from_visits = _PERFECT_PARALLEL_VISITS
    n_threads = threads.current()
    par = None  # the pool launch, bound when a batch first needs it (it compiles an entry)
    empty = np.empty
    zeros = np.zeros
    ndarray = np.ndarray
    no_labels = _NO_LABELS
    ctl_alone = _CTL_ALONE
    sink = _BAD_SINK

    def fast(x: Any) -> Any:
        nonlocal par
        if (
            type(x) is not ndarray
            or x.dtype is not dtype
            or x.ndim != 2
            or x.shape[1] != width
            or not x.flags.c_contiguous
        ):
            return MISS
        n = x.shape[0]
        y = empty((n, n_out), ydtype)
        lab = empty(n, np.int64) if classify else no_labels
        if n_threads > 1 and n > group and n * visits >= from_visits:
            bad_rows = zeros(1, np.int64)
            call = (x, *args, y, lab, label_values, bad_rows)
            if par is None:
                par = pool.bind(predict, call, n_threads)
            par(*call)
            bad = bad_rows[0]
        else:
            bad = predict(ctl_alone.copy(), x, *args, y, lab, label_values, sink)
        if bad or strings:
            y, lab = _complete(ctx, table, spec, plan, x, y, lab, bad)
        return (lab, y) if classify else y

    return fast


@fast_path(tree_ensemble_regressor_1, tree_ensemble_regressor_3)
def _prepare_regressor(ctx: Any, args: tuple, kwargs: dict, result: Any) -> Any:
    return _prepare_trees(ctx, args[0], kwargs, _REGRESSOR_KEYS, False)


@fast_path(tree_ensemble_classifier_1, tree_ensemble_classifier_3)
def _prepare_classifier(ctx: Any, args: tuple, kwargs: dict, result: Any) -> Any:
    return _prepare_trees(ctx, args[0], kwargs, _CLASSIFIER_KEYS, False)


@fast_path(tree_ensemble_5)
def _prepare_v5(ctx: Any, args: tuple, kwargs: dict, result: Any) -> Any:
    return _prepare_trees(ctx, args[0], kwargs, _V5_KEYS, True)


# --------------------------------------------------------------------------------------------
# Linear models, scaling, normalisation
# --------------------------------------------------------------------------------------------


def _linear_scores(ctx: Any, x: np.ndarray, coefficients: Any, intercepts: Any) -> np.ndarray:
    """X @ W.T + b in float32 (onnxruntime converts every input type to float first)."""
    xf = np.ascontiguousarray(_as_rows(ctx, x), dtype=np.float32)
    if coefficients is None:
        raise ctx.error("attribute coefficients is required")
    w = np.asarray(coefficients, dtype=np.float32)
    f = xf.shape[1]
    if f == 0 or w.shape[0] % f:
        raise ctx.error(
            f"coefficients has {w.shape[0]} values, not a multiple of the {f} input features"
        )
    w = w.reshape(-1, f)
    s = xf @ w.T
    if intercepts:
        b = np.asarray(intercepts, dtype=np.float32)
        if b.shape[0] != w.shape[0]:
            raise ctx.error(f"intercepts has {b.shape[0]} values, expected {w.shape[0]}")
        s += b
    return s


def _post32(s: np.ndarray, code: int) -> np.ndarray:
    if code == kml.PT_NONE or s.size == 0:
        return s.astype(np.float32)
    d = np.ascontiguousarray(s, dtype=np.float64)
    kml.post_transform(d, code)
    return d.astype(np.float32)


@onnx_op("LinearRegressor", since=1, domain=ML_DOMAIN)
def linear_regressor_1(
    ctx, x, *, coefficients=None, intercepts=None, post_transform="NONE", targets=1
):
    """Y [N, targets] float32 = X @ coefficients.reshape(targets, F).T + intercepts, then
    post_transform (only PROBIT applies to a single target, as in onnxruntime)."""
    code = _post_code(ctx, post_transform)
    s = _linear_scores(ctx, x, coefficients, intercepts)
    if s.shape[1] != targets:
        raise ctx.error(f"coefficients give {s.shape[1]} targets, attribute targets={targets}")
    if s.shape[1] == 1 and code != kml.PT_PROBIT:
        return s
    return _post32(s, code)


@onnx_op("LinearClassifier", since=1, domain=ML_DOMAIN)
def linear_classifier_1(
    ctx,
    x,
    *,
    classlabels_ints=None,
    classlabels_strings=None,
    coefficients=None,
    intercepts=None,
    multi_class=0,
    post_transform="NONE",
):
    """(Y labels [N], Z scores [N, C] float32) of a linear model.

    One score column with two class labels: the label is labels[1] when the raw score is
    > 0, and the scores become [1 - s, s] (onnxruntime's rule). Several columns: the label is
    the argmax of the raw scores and all columns are post-transformed.
    """
    code = _post_code(ctx, post_transform)
    s = _linear_scores(ctx, x, coefficients, intercepts)
    strings = bool(classlabels_strings)
    labels = class_labels(ctx, classlabels_ints, classlabels_strings, "classlabels_ints")
    n, c = s.shape
    if c == 1:
        if labels.shape[0] == 2:
            lab = labels
        else:
            lab = np.array(["0", "1"], dtype=object) if strings else np.array([0, 1], np.int64)
        y = label_output(lab, (s[:, 0] > 0).astype(np.int64))
        if labels.shape[0] == 2:
            if code == kml.PT_PROBIT:
                z = np.zeros((n, 2), dtype=np.float32)
                z[:, 0] = _post32(s, code)[:, 0]
                return y, z
            if code == kml.PT_LOGISTIC:
                both = np.ascontiguousarray(np.stack([-s[:, 0], s[:, 0]], axis=1))
                return y, _post32(both, code)
            return y, np.stack([1.0 - s[:, 0], s[:, 0]], axis=1).astype(np.float32)
        return y, (_post32(s, code) if code == kml.PT_PROBIT else s)
    if labels.shape[0] != c:
        raise ctx.error(f"{labels.shape[0]} class labels for {c} score columns")
    idx = np.argmax(s, axis=1) if n else np.zeros(0, np.int64)
    return label_output(labels, idx), _post32(s, code)


@onnx_op("Scaler", since=1, domain=ML_DOMAIN)
def scaler_1(ctx, x, *, offset=None, scale=None):
    """Y float32 = (X - offset) * scale, offset/scale of length 1 or F (last axis)."""
    xf = np.asarray(x, dtype=np.float32)
    f = xf.shape[-1] if xf.ndim else 1
    off = np.asarray(offset if offset else [0.0], dtype=np.float32)
    sc = np.asarray(scale if scale else [1.0], dtype=np.float32)
    for name, v in (("offset", off), ("scale", sc)):
        if v.shape[0] not in (1, f):
            raise ctx.error(f"{name} has {v.shape[0]} values, expected 1 or {f}")
    return ((xf - off) * sc).astype(np.float32)


@onnx_op("Normalizer", since=1, domain=ML_DOMAIN)
def normalizer_1(ctx, x, *, norm="MAX"):
    """Y float32: each row divided by its MAX (largest value), L1 or L2 norm; a row whose
    norm is 0 is kept as is."""
    kinds = {"MAX": kml.NORM_MAX, "L1": kml.NORM_L1, "L2": kml.NORM_L2}
    if norm not in kinds:
        raise ctx.unsupported(f"norm {norm!r} is not one of MAX, L1, L2")
    rows = np.ascontiguousarray(_as_rows(ctx, x), dtype=np.float64)
    out = np.empty_like(rows)
    kml.normalize_rows(rows, out, kinds[norm])
    return out.astype(np.float32).reshape(x.shape)


@onnx_op("Binarizer", since=1, domain=ML_DOMAIN)
def binarizer_1(x, *, threshold=0.0):
    """Y = 1 where X > threshold else 0, in X's dtype."""
    return (x > threshold).astype(x.dtype)


@onnx_op("ZipMap", since=1, domain=ML_DOMAIN)
def zipmap_1(ctx, x, *, classlabels_int64s=None, classlabels_strings=None):
    """A list (one per row) of dicts class label -> score (Python float)."""
    labels = class_labels(ctx, classlabels_int64s, classlabels_strings)
    rows = _as_rows(ctx, x)
    if rows.shape[1] != labels.shape[0]:
        raise ctx.error(
            f"the input has {rows.shape[1]} columns but there are {labels.shape[0]} class labels"
        )
    keys = labels.tolist()
    return [dict(zip(keys, r)) for r in rows.tolist()]


@onnx_op("ArrayFeatureExtractor", since=1, domain=ML_DOMAIN)
def array_feature_extractor_1(ctx, x, y):
    """Z = X[..., indices] with the last axis of size len(indices); a 1-D X gives [1, k]."""
    idx = np.asarray(y, dtype=np.int64).reshape(-1)
    f = x.shape[-1]
    if idx.size and (idx.min() < 0 or idx.max() >= f):
        raise ctx.error(f"indices must be in [0, {f}), found {idx.min()}..{idx.max()}")
    z = np.take(x, idx, axis=-1)
    return z.reshape(1, -1) if x.ndim == 1 else z


@onnx_op("Imputer", since=1, domain=ML_DOMAIN)
def imputer_1(
    ctx,
    x,
    *,
    imputed_value_floats=None,
    imputed_value_int64s=None,
    replaced_value_float=0.0,
    replaced_value_int64=0,
):
    """Replace the entries equal to the replaced value (NaN matches NaN) by the imputed value
    of their column (one value, or one per column of the last axis)."""
    if x.dtype.kind == "f":
        vals, rep = imputed_value_floats, replaced_value_float
    else:
        vals, rep = imputed_value_int64s, replaced_value_int64
    if not vals:
        raise ctx.error("the imputed values for this input type are missing")
    v = np.asarray(vals, dtype=x.dtype)
    f = x.shape[-1] if x.ndim else 1
    if v.shape[0] not in (1, f):
        raise ctx.error(f"{v.shape[0]} imputed values for {f} columns; give 1 or {f}")
    mask = np.isnan(x) if (x.dtype.kind == "f" and np.isnan(rep)) else (x == rep)
    return np.where(mask, v, x).astype(x.dtype)


def _lookup(ctx: Any, x: np.ndarray, keys: np.ndarray, values: np.ndarray, default: Any):
    """values[k] where keys[k] == x (NaN matches NaN), else default; output in values' dtype."""
    flat = x.reshape(-1)
    if keys.dtype == object or flat.dtype == object:
        table: dict[Any, Any] = {}
        for k, v in zip(keys.tolist(), values.tolist()):
            table.setdefault(k, v)
        out = [table.get(k, default) for k in flat.tolist()]
        res = np.empty(len(out), dtype=values.dtype) if values.dtype != object else None
        if res is None:
            res = np.empty(len(out), dtype=object)
            res[:] = out
        else:
            res[:] = out
        return res.reshape(x.shape)
    kk = keys.astype(flat.dtype) if flat.dtype.kind == "f" else keys
    order = np.argsort(kk, kind="stable")
    sk = kk[order]
    pos = np.minimum(np.searchsorted(sk, flat), max(sk.shape[0] - 1, 0))
    if sk.shape[0]:
        hit = (sk[pos] == flat) | (
            np.isnan(sk[pos]) & np.isnan(flat) if flat.dtype.kind == "f" else False
        )
        res = np.where(hit, values[order][pos], default)
    else:
        res = np.full(flat.shape, default)
    return res.astype(values.dtype).reshape(x.shape)


@onnx_op("LabelEncoder", since=1, domain=ML_DOMAIN)
def label_encoder_1(ctx, x, *, classes_strings=None, default_int64=-1, default_string="_Unused"):
    """Strings -> their index in classes_strings (default_int64 if absent); int64 -> the
    string at that index (default_string if out of range)."""
    classes = np.array(list(classes_strings or []), dtype=object)
    if x.dtype == object:
        return _lookup(ctx, x, classes, np.arange(classes.shape[0], dtype=np.int64), default_int64)
    return _lookup(
        ctx,
        x.astype(np.int64),
        np.arange(classes.shape[0], dtype=np.int64),
        classes,
        default_string,
    )


def _encoder_side(ctx: Any, floats: Any, ints: Any, strings: Any, tensor: Any, what: str):
    given = [
        (np.asarray(floats, dtype=np.float32) if floats else None),
        (np.asarray(ints, dtype=np.int64) if ints else None),
        (np.array(list(strings), dtype=object) if strings else None),
        (np.asarray(tensor).reshape(-1) if tensor is not None else None),
    ]
    present = [g for g in given if g is not None]
    if len(present) != 1:
        raise ctx.error(f"exactly one of the {what} attributes must be set, found {len(present)}")
    return present[0]


@onnx_op("LabelEncoder", since=2, domain=ML_DOMAIN)
def label_encoder_2(
    ctx,
    x,
    *,
    default_float=-0.0,
    default_int64=-1,
    default_string="_Unused",
    keys_floats=None,
    keys_int64s=None,
    keys_strings=None,
    values_floats=None,
    values_int64s=None,
    values_strings=None,
):
    """Map each input through keys_* -> values_*; missing keys give the default_* of the
    values' type."""
    return label_encoder_4(
        ctx,
        x,
        default_float=default_float,
        default_int64=default_int64,
        default_string=default_string,
        keys_floats=keys_floats,
        keys_int64s=keys_int64s,
        keys_strings=keys_strings,
        values_floats=values_floats,
        values_int64s=values_int64s,
        values_strings=values_strings,
    )


@onnx_op("LabelEncoder", since=4, domain=ML_DOMAIN)
def label_encoder_4(
    ctx,
    x,
    *,
    default_float=-0.0,
    default_int64=-1,
    default_string="_Unused",
    default_tensor=None,
    keys_floats=None,
    keys_int64s=None,
    keys_strings=None,
    keys_tensor=None,
    values_floats=None,
    values_int64s=None,
    values_strings=None,
    values_tensor=None,
):
    """LabelEncoder-4: keys/values may also be tensors of any type (keys_tensor,
    values_tensor); default_tensor (one element) overrides the default_* attributes."""
    keys = _encoder_side(ctx, keys_floats, keys_int64s, keys_strings, keys_tensor, "keys_*")
    values = _encoder_side(
        ctx, values_floats, values_int64s, values_strings, values_tensor, "values_*"
    )
    if keys.shape[0] != values.shape[0]:
        raise ctx.error(f"{keys.shape[0]} keys but {values.shape[0]} values")
    if default_tensor is not None:
        default = np.asarray(default_tensor).reshape(-1)[0]
        if values.dtype == object:
            default = str(default)
    elif values.dtype == object:
        default = default_string
    elif values.dtype.kind == "f":
        default = default_float
    else:
        default = default_int64
    if x.dtype != object and keys.dtype == object:
        raise ctx.error(f"string keys cannot match a {x.dtype} input")
    if x.dtype == object and keys.dtype != object:
        raise ctx.error(f"{keys.dtype} keys cannot match a string input")
    if x.dtype != object:
        keys = keys.astype(x.dtype)
    return _lookup(ctx, x, keys, values, default)


@onnx_op("OneHotEncoder", since=1, domain=ML_DOMAIN)
def one_hot_encoder_1(ctx, x, *, cats_int64s=None, cats_strings=None, zeros=1):
    """Y float32 [..., n_cats]: 1 at the category of each input value. An unknown value gives
    a row of zeros (zeros=1) or an error (zeros=0)."""
    if x.dtype == object:
        if not cats_strings:
            raise ctx.error("string input needs cats_strings")
        cats = np.array(list(cats_strings), dtype=object)
        lookup = {c: i for i, c in enumerate(cats.tolist())}
        idx = np.array([lookup.get(v, -1) for v in x.reshape(-1).tolist()], dtype=np.int64)
    else:
        if not cats_int64s:
            raise ctx.error("numeric input needs cats_int64s")
        cats = np.asarray(cats_int64s, dtype=np.int64)
        idx = _lookup(
            ctx, x.astype(np.int64).reshape(-1), cats, np.arange(cats.shape[0], dtype=np.int64), -1
        )
    if not zeros and np.any(idx < 0):
        raise ctx.error("an input value is not among the categories and zeros=0")
    out = np.zeros((idx.shape[0], cats.shape[0]), dtype=np.float32)
    ok = np.flatnonzero(idx >= 0)
    out[ok, idx[ok]] = 1.0
    return out.reshape(*x.shape, cats.shape[0])


@onnx_op("CategoryMapper", since=1, domain=ML_DOMAIN)
def category_mapper_1(
    ctx, x, *, cats_int64s=None, cats_strings=None, default_int64=-1, default_string="_Unused"
):
    """Strings -> int64 and int64 -> strings through the pairs (cats_strings[i], cats_int64s[i])."""
    ints = np.asarray(cats_int64s or [], dtype=np.int64)
    strs = np.array(list(cats_strings or []), dtype=object)
    if ints.shape[0] != strs.shape[0]:
        raise ctx.error("cats_int64s and cats_strings must have the same length")
    if x.dtype == object:
        return _lookup(ctx, x, strs, ints, default_int64)
    return _lookup(ctx, x.astype(np.int64), ints, strs, default_string)


@onnx_op("FeatureVectorizer", since=1, domain=ML_DOMAIN)
def feature_vectorizer_1(ctx, *xs, inputdimensions=None):
    """Y float32 [N, sum(inputdimensions)]: the inputs' columns side by side, each cut or
    zero-padded to its inputdimensions entry."""
    dims = list(inputdimensions or [])
    if len(dims) != len(xs):
        raise ctx.error(f"{len(xs)} inputs but {len(dims)} inputdimensions")
    n = None
    parts = []
    for a, d in zip(xs, dims):
        r = np.asarray(a, dtype=np.float32)
        r = r.reshape(1, -1) if r.ndim == 1 else r.reshape(r.shape[0], -1)
        if n is None:
            n = r.shape[0]
        elif r.shape[0] != n:
            raise ctx.error(f"inputs have different batch sizes ({n} and {r.shape[0]})")
        part = np.zeros((r.shape[0], d), dtype=np.float32)
        k = min(d, r.shape[1])
        part[:, :k] = r[:, :k]
        parts.append(part)
    return np.concatenate(parts, axis=1)


@onnx_op("DictVectorizer", since=1, domain=ML_DOMAIN)
def dict_vectorizer_1(ctx, x, *, int64_vocabulary=None, string_vocabulary=None):
    """A map (or a list of maps) -> [N, len(vocabulary)] with the map values at their key's
    vocabulary position and 0 elsewhere."""
    vocab = list(string_vocabulary or []) or list(int64_vocabulary or [])
    if not vocab:
        raise ctx.error("one of int64_vocabulary / string_vocabulary must be set")
    maps = x if isinstance(x, list) else [x]
    pos = {k: i for i, k in enumerate(vocab)}
    sample = next((v for m in maps for v in m.values()), 0.0)
    dtype = np.dtype(object) if isinstance(sample, str) else np.asarray(sample).dtype
    if dtype.kind == "f" and dtype != np.float64:
        dtype = np.dtype(np.float32)
    if isinstance(sample, float):
        dtype = np.dtype(np.float32)
    out = np.zeros((len(maps), len(vocab)), dtype=dtype)
    if dtype.kind == "O":
        out[:] = ""
    for i, m in enumerate(maps):
        for k, v in m.items():
            j = pos.get(k)
            if j is not None:
                out[i, j] = v
    return out


@onnx_op("CastMap", since=1, domain=ML_DOMAIN)
def cast_map_1(ctx, x, *, cast_to="TO_FLOAT", map_form="DENSE", max_map=1):
    """A map int64 -> (string | float) as a [1, K] tensor ordered by key (DENSE), or a
    [1, max_map] tensor with values at their key positions (SPARSE)."""
    dtypes = {"TO_FLOAT": np.float32, "TO_STRING": object, "TO_INT64": np.int64}
    if cast_to not in dtypes:
        raise ctx.unsupported(f"cast_to {cast_to!r} is not one of {sorted(dtypes)}")
    dtype = dtypes[cast_to]

    def conv(v: Any) -> Any:
        if dtype is object:
            return v if isinstance(v, str) else repr(float(v)) if isinstance(v, float) else str(v)
        return dtype(float(v)) if isinstance(v, str) else dtype(v)

    items = sorted(x.items())
    if map_form == "DENSE":
        out = np.empty((1, len(items)), dtype=dtype)
        for j, (_, v) in enumerate(items):
            out[0, j] = conv(v)
        return out
    if map_form != "SPARSE":
        raise ctx.unsupported(f"map_form {map_form!r} is not DENSE or SPARSE")
    out = np.zeros((1, max_map), dtype=dtype)
    if dtype is object:
        out[:] = "0"
    for k, v in items:
        if 0 <= k < max_map:
            out[0, k] = conv(v)
    return out
