"""Operators of the ``ai.onnx.ml`` domain (tree ensembles, linear models, scalers, encoders).

Where the ONNX specification is vague (binary classifiers with one score column, MIN/MAX
aggregation of targets that no leaf reached, Normalizer MAX), these implementations follow
onnxruntime, which is what converters such as skl2onnx are tested against.

Every operator has an implementation (what it computes, on any values) and most have a
lowering (:mod:`onnxjit.lowering`): for the input specs of a plan, the one call a run makes,
with the node's attributes worked out once for the plan (weights and offsets as float32
arrays, class labels, sorted lookup keys, ZipMap's keys). The call is a kernel of
kernels/cpu/ml.py (through the backend), the generated tree walk, or, where the outputs are
Python objects (ZipMap's dicts, string labels), a small function over those precomputed values.

Tree ensembles are converted once per node into a flat node table (kernels/cpu/trees.py),
kept per model (keyed by the node's attribute objects, :func:`_cached_table`); the layouts the
fast walks read are built from it once per input type. A plan binds the generated
walk-and-finish kernel of the ensemble for its input's type and row width
(:mod:`onnxjit.codegen.trees`), or the host path where that kernel does not apply.
"""

from __future__ import annotations

import functools
import threading
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxjit.codegen import trees as gtrees
from onnxjit.lowering import (
    SEQUENCE,
    TENSOR,
    Bound,
    In,
    LowerContext,
    Out,
    Spec,
    lowers,
    portable,
    returns,
    tensor,
    writes,
)
from onnxjit.registry import ML_DOMAIN, onnx_op

# Codes the kernels take (kernels/cpu/ml.py, kernels/cpu/trees.py define the same numbers;
# tests/test_ops_ml.py checks that they agree). post_transform, aggregate_function and the
# branch modes are numbered as TreeEnsemble-5 numbers its attributes; MODE_LEAF marks a leaf
# in the node table.
PT_NONE, PT_SOFTMAX, PT_LOGISTIC, PT_SOFTMAX_ZERO, PT_PROBIT = range(5)
AGG_AVERAGE, AGG_SUM, AGG_MIN, AGG_MAX = range(4)
MODE_LEQ, MODE_LT, MODE_GTE, MODE_GT, MODE_EQ, MODE_NEQ, MODE_MEMBER, MODE_LEAF = range(8)
NORM_MAX, NORM_L1, NORM_L2 = range(3)
# LinearClassifier forms: several score columns (argmax); one column with two labels; one
# column with other label counts
LC_ARGMAX, LC_BINARY, LC_SINGLE = range(3)

_POST = {
    "NONE": PT_NONE,
    "SOFTMAX": PT_SOFTMAX,
    "LOGISTIC": PT_LOGISTIC,
    "SOFTMAX_ZERO": PT_SOFTMAX_ZERO,
    "PROBIT": PT_PROBIT,
}
_AGG = {"AVERAGE": AGG_AVERAGE, "SUM": AGG_SUM, "MIN": AGG_MIN, "MAX": AGG_MAX}
_MODES = {
    "BRANCH_LEQ": MODE_LEQ,
    "BRANCH_LT": MODE_LT,
    "BRANCH_GTE": MODE_GTE,
    "BRANCH_GT": MODE_GT,
    "BRANCH_EQ": MODE_EQ,
    "BRANCH_NEQ": MODE_NEQ,
    "BRANCH_MEMBER": MODE_MEMBER,
    "LEAF": MODE_LEAF,
}
_NORMS = {"MAX": NORM_MAX, "L1": NORM_L1, "L2": NORM_L2}
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_I64 = np.dtype(np.int64)
_OBJ = np.dtype(object)
# Input types the row kernels take as they are (onnxruntime's ml kernels take these four)
_REAL = (_F32, _F64, _I64, np.dtype(np.int32))


def post_code(ctx: Any, post_transform: str) -> int:
    """The code of a post_transform attribute (PT_*); unsupported names are an error."""
    try:
        return _POST[post_transform]
    except KeyError:
        raise ctx.unsupported(
            f"post_transform {post_transform!r} is not one of {sorted(_POST)}"
        ) from None


def _apply_post(be: Any, scores: np.ndarray, code: int) -> np.ndarray:
    """Post-transform a float64 (N, C) score array in place (Numba kernel)."""
    if code != PT_NONE and scores.size:
        be.kernel("ml", "post_transform")(scores, code)
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


def _rows_spec(x: Spec | None) -> tuple[int, int] | None:
    """(N, F) of a 1-D or 2-D tensor spec (a 1-D input is one row), else None."""
    if x is None or x.kind != TENSOR or x.ndim not in (1, 2):
        return None
    return (1, x.shape[0]) if x.ndim == 1 else (x.shape[0], x.shape[1])


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
    # What the node's other attributes fix (set when the table is built).
    spec: _Spec | None = None

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

    def fast_for(self, be: Any, dtype: Any, n_targets: int) -> _FastTable | None:
        """The fast layout for inputs of ``dtype`` (built on first use, with backend ``be``'s
        kernels), or None."""
        key = (np.dtype(dtype).str, n_targets)
        if key not in self.fast:
            fast = _build_fast(be, self, np.dtype(dtype), n_targets)
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
_FAST_MODES = (MODE_LEQ, MODE_LT, MODE_GT, MODE_GTE)


def _build_fast(be: Any, table: _TreeTable, xdtype: np.dtype, n_targets: int) -> _FastTable | None:
    """Convert a general table into the fast layout, or None when it does not apply exactly:
    modes other than LEQ/LT/GT/GTE, NaN thresholds, -inf thresholds of LT/GTE, a leaf giving
    the same target twice (summed there in another order than onnxruntime's), targets that
    some leaves of a tree reach and others not (has[] then depends on the row), or trees deeper
    than _FAST_MAX_DEPTH."""
    mode = table.mode
    n = mode.shape[0]
    is_leaf = mode == MODE_LEAF
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
    lt_like = branch & ((mode == MODE_LT) | (mode == MODE_GTE))
    if np.any(lt_like & (t == -np.inf)):
        return None
    # x < t  <=>  x <= the largest value below t (x and t in the same precision)
    t = np.where(lt_like, np.nextafter(t, dt.type(-np.inf)), t).astype(dt)
    swap = (branch & ((mode == MODE_GT) | (mode == MODE_GTE))).astype(np.uint8)
    nt = table.n_trees
    cap = n + nt
    f_left = np.empty(cap, np.int32)
    f_feat = np.empty(cap, np.int32)
    f_thr = np.empty(cap, dt)
    f_leaf = np.empty(cap, np.int32)
    t_root = np.empty(nt, np.int32)
    t_depth = np.empty(nt, np.int32)
    used = be.kernel("trees", "fast_layout")(
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


# Tables are built once per model and kept per attribute object: a session passes the same
# attribute objects to every run of a node and to its lowering, in every plan. The key objects
# are kept alive by the cache entry, so an id cannot be reused while its entry exists; the
# cache is bounded.
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
    if np.any(mode == MODE_MEMBER):
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

    branch = mode != MODE_LEAF
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
    is_leaf = mode == MODE_LEAF
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


# -- walking an ensemble --------------------------------------------------------------------

# Node visits (rows x summed tree depths) from which the fast walk runs on several threads:
# about 5 ms of serial walking, so that waking the thread pool (milliseconds on a loaded
# machine, measured) stays small beside it. Batch 100 of 100 depth-10 trees stays serial.
_FAST_PARALLEL_VISITS = 1 << 22
# Node visits (rows x summed tree depths) from which the perfect walk runs on the thread pool:
# about 15 us of walking. A pool call costs a few microseconds more than the serial kernel at
# worst (onnxjit/backends/cpu/pool.py), and halves the time when a worker is spinning.
_PERFECT_PARALLEL_VISITS = 1 << 15


@dataclass
class _Spec:
    """What a tree-ensemble node's attributes fix besides its table."""

    classifier: bool
    agg: int
    post: int
    base: np.ndarray | None
    n_targets: int
    labels: np.ndarray | None = None  # classifier labels (int64 or object)


def _check_shapes(ctx: Any, table: _TreeTable, width: int, n_targets: int) -> None:
    if width < table.n_features:
        raise ctx.error(
            f"the trees read feature {table.n_features - 1} but the input has {width} "
            "features per row; pass [N, F] with enough columns"
        )
    if table.n_targets > n_targets:
        raise ctx.error(
            f"a leaf writes target/class {table.n_targets - 1} but there are only {n_targets}"
        )


def _cycle_error(ctx: Any) -> Exception:
    return ctx.error(
        "a tree walk did not reach a leaf (the true/false node ids form a cycle); fix the "
        "nodes_truenodeids / nodes_falsenodeids attributes"
    )


def _run_table(be: Any, ctx: Any, table: _TreeTable, x: np.ndarray, agg: int, n_targets: int):
    """Walk every tree for every row of ``x`` (C-contiguous float32/float64 [N, F]): (scores
    float64 [N, T], has uint8 [N, T]) through the fastest layout that applies."""
    n = x.shape[0]
    out = np.zeros((n, n_targets), dtype=table.acc_dtype)
    if n and table.n_trees and agg in (AGG_SUM, AGG_AVERAGE):
        fast = table.fast_for(be, x.dtype, n_targets)
        if fast is not None:
            if fast.perfect is not None:
                return _perfect_sums(be, ctx, table, fast, x, agg, n_targets)
            return _run_fast(be, ctx, table, fast, x, agg, out)
    has = np.zeros((n, n_targets), dtype=np.uint8)
    if n == 0 or table.n_trees == 0:
        return out.astype(np.float64), has
    bad_rows = np.zeros(1, np.int64)
    work = n * table.n_trees * 8 if n > 1 else 0
    be.run("trees", "general_walk", work, x, *table.walk_arrays(), agg, out, has, bad_rows)
    if bad_rows[0]:
        raise _cycle_error(ctx)
    return out.astype(np.float64), has


def _run_fast(
    be: Any,
    ctx: Any,
    table: _TreeTable,
    fast: _FastTable,
    x: np.ndarray,
    agg: int,
    out: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_run_table` through the fast layout; rows holding a NaN take the general walk."""
    n = x.shape[0]
    skip = np.empty(n, dtype=np.uint8)
    n_nan = be.kernel("trees", "nan_rows")(x, skip)
    be.run(
        "trees", "fast_walk", n * fast.visits if n >= 16 else 0,
        x, fast.t_root, fast.t_depth, fast.g_depth, fast.f_left, fast.f_feat, fast.f_thr,
        fast.f_leaf, fast.values, skip, out,
        threshold=_FAST_PARALLEL_VISITS,
    )  # fmt: skip
    has = np.empty((n, out.shape[1]), dtype=np.uint8)
    has[:] = fast.has
    if n_nan:
        rows = np.flatnonzero(skip).astype(np.int64)
        has[rows] = 0
        general = be.kernel("trees", "rows_general")
        if general(x, rows, *table.walk_arrays(), agg, out, has):
            raise _cycle_error(ctx)
    return out.astype(np.float64), has


def _perfect_parallel(be: Any, n: int, visits: int) -> bool:
    return n > gtrees.G and n * visits >= _PERFECT_PARALLEL_VISITS and be.threads() > 1


def _perfect_sums(
    be: Any, ctx: Any, table: _TreeTable, fast: _FastTable, x: np.ndarray, agg: int, n_targets: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_run_table` through the perfect layout's generated walk (raw sums, no
    finishing); rows holding a NaN are walked again through the fast layout."""
    p = fast.perfect
    fin_i, fin_f = gtrees.finish_arrays(False, False, PT_NONE, table.n_trees, None, None, n_targets)
    n = x.shape[0]
    out = np.empty((n, n_targets), np.float64)
    no = gtrees.NO_LABELS
    bad = gtrees.run(
        gtrees.module(x.shape[1], p.ni, p.kt).predict,
        (x, p.feat, p.thr, p.leaves, p.depth, p.tgt, fin_i, fin_f, out, no, no),
        _perfect_parallel(be, n, p.visits),
        be.threads(),
    )
    has = np.empty((n, n_targets), dtype=np.uint8)
    has[:] = fast.has
    if bad:
        rows = _nan_rows(x)
        sub = np.zeros((rows.shape[0], n_targets), dtype=table.acc_dtype)
        sums = _run_fast(be, ctx, table, fast, np.ascontiguousarray(x[rows]), agg, sub)
        out[rows], has[rows] = sums
    return out, has


def _nan_rows(x: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.isnan(x).any(axis=1))


@dataclass
class _Walk:
    """The generated walk-and-finish kernel of an ensemble for inputs of one element type and
    row width (onnxjit/codegen/trees.py): what a plan binds."""

    predict: Any  # None: no perfect layout; the fast layout's kernel finishes (fin_i, fin_f)
    args: tuple[Any, ...]  # feat, thr, leaves, depth, tgt, fin_i, fin_f (fast: fin_i, fin_f)
    label_values: np.ndarray  # what the kernel writes as a label (class indices for strings)
    fast: _FastTable
    visits: int


def _make_walk(be: Any, ctx: Any, table: _TreeTable, dtype: Any, width: int) -> _Walk | None:
    """The fused walk of the node for inputs of ``dtype`` and ``width`` features, or None
    where the host path must run (no fast layout, MIN/MAX, a binary classifier's
    conventions). Without a perfect layout (trees too deep to pad) the walk's ``predict`` is
    None and ``args`` are ``(fin_i, fin_f)``: ``trees.fast_walk_finish`` walks the fast layout
    and finishes the same way."""
    spec = table.spec
    nt = spec.n_targets
    if table.n_trees == 0 or spec.agg not in (AGG_SUM, AGG_AVERAGE):
        return None
    if spec.classifier and nt == 2:
        return None
    fast = table.fast_for(be, dtype, nt)
    if fast is None:
        return None
    p = fast.perfect
    if p is not None and p.kt not in (1, nt):  # pragma: no cover - _build_perfect's contract
        return None
    base = spec.base if spec.base is not None and spec.base.shape[0] else None
    mask = None
    label_values = gtrees.NO_LABELS
    if not spec.classifier:
        # _finish_regression, row by row
        if base is not None:
            if base.shape[0] == nt and nt > 1:
                base = base * fast.has
            elif nt == 1:
                base = base[:1]
            else:
                raise ctx.error(f"base_values has {base.shape[0]} entries, expected n_targets={nt}")
        post = spec.post if nt > 1 or spec.post == PT_PROBIT else PT_NONE
    else:
        # _tree_classify with one score column or more than two
        if base is not None:
            if base.shape[0] != nt:
                raise ctx.error(f"base_values has {base.shape[0]} entries, expected {nt}")
        else:
            mask = fast.has.astype(np.float64)
        labels = spec.labels
        label_values = labels if labels.dtype == _I64 else np.arange(nt, dtype=np.int64)
        post = spec.post
    fin_i, fin_f = gtrees.finish_arrays(
        spec.classifier, spec.agg == AGG_AVERAGE, post, table.n_trees, base, mask, nt
    )
    if p is None:
        return _Walk(None, (fin_i, fin_f), label_values, fast, fast.visits)
    return _Walk(
        predict=gtrees.module(width, p.ni, p.kt).predict,
        args=(p.feat, p.thr, p.leaves, p.depth, p.tgt, fin_i, fin_f),
        label_values=label_values,
        fast=fast,
        visits=p.visits,
    )


def _redo_nan_rows(
    be: Any, ctx: Any, table: _TreeTable, walk: _Walk, x: np.ndarray, y: np.ndarray, lab: Any
) -> None:
    """After the fused kernel reported rows holding a NaN: their scores (and labels, as
    ``walk.label_values``) computed again by the host path."""
    spec = table.spec
    rows = _nan_rows(x)
    sub = np.zeros((rows.shape[0], spec.n_targets), dtype=table.acc_dtype)
    out, has = _run_fast(be, ctx, table, walk.fast, np.ascontiguousarray(x[rows]), spec.agg, sub)
    if spec.classifier:
        lab[rows], y[rows] = _tree_classify(
            be, ctx, out, has, walk.label_values, spec.base, spec.post, table.binary_case,
            table.all_positive,
        )  # fmt: skip
    else:
        y[rows] = _finish_regression(
            be, ctx, out, has, spec.agg, table.n_trees, spec.base, spec.post
        )


def _finish_regression(
    be: Any,
    ctx: Any,
    out: np.ndarray,
    has: np.ndarray,
    agg: int,
    n_trees: int,
    base: np.ndarray | None,
    post: int,
) -> np.ndarray:
    """Aggregate finishing (AVERAGE divides by the tree count), base values, post-transform."""
    if agg == AGG_AVERAGE and n_trees:
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
        if post == PT_PROBIT:
            _apply_post(be, out, post)
        return out
    return _apply_post(be, out, post)


def _host_predict(be: Any, ctx: Any, table: _TreeTable, ydtype: Any, x: np.ndarray) -> Any:
    """Outputs of the node for ``x`` (C-contiguous float32/float64 [N, F]) through the host
    path: the walk's sums, finished in numpy. Regressors: Y in ``ydtype``; classifiers:
    (labels, scores)."""
    spec = table.spec
    out, has = _run_table(be, ctx, table, x, spec.agg, spec.n_targets)
    if spec.classifier:
        return _tree_classify(
            be, ctx, out, has, spec.labels, spec.base, spec.post, table.binary_case,
            table.all_positive,
        )  # fmt: skip
    y = _finish_regression(be, ctx, out, has, spec.agg, table.n_trees, spec.base, spec.post)
    return y.astype(ydtype)


def _predict(be: Any, ctx: Any, table: _TreeTable, x: np.ndarray, ydtype: Any) -> Any:
    """The implementations' path (a run without a plan's binding): Y [N, n_targets] in
    ``ydtype`` for a regressor, (labels, scores float32) for a classifier."""
    spec = table.spec
    ydtype = np.dtype(ydtype)
    xf = _float_rows(ctx, x)
    n, width = xf.shape
    _check_shapes(ctx, table, width, spec.n_targets)
    walk = _make_walk(be, ctx, table, xf.dtype, width)
    if walk is None or walk.predict is None:
        if ydtype in (_F32, _F64) or spec.classifier:
            return _host_predict(be, ctx, table, ydtype, xf)
        return _host_predict(be, ctx, table, _F64, xf).astype(ydtype)
    y = np.empty((n, spec.n_targets), ydtype if ydtype in (_F32, _F64) else _F64)
    lab = np.empty(n, np.int64) if spec.classifier else gtrees.NO_LABELS
    args = (xf, *walk.args, y, lab, walk.label_values)
    if gtrees.run(walk.predict, args, _perfect_parallel(be, n, walk.visits), be.threads()):
        _redo_nan_rows(be, ctx, table, walk, xf, y, lab)
    if not spec.classifier:
        return y.astype(ydtype, copy=False)
    return (label_output(spec.labels, lab) if spec.labels.dtype == _OBJ else lab), y


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
    be: Any,
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
        return label_output(labels, idx), _apply_post(be, out, post).astype(np.float32)

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
        scores[w] = _apply_post(be, sw, post)
    # rows with one score column: expand it to two
    nw = np.flatnonzero(~wide)
    if nw.shape[0]:
        v = s0[nw]
        if post == PT_PROBIT:
            p = np.ascontiguousarray(v.reshape(-1, 1))
            _apply_post(be, p, post)
            scores[nw, 0] = p[:, 0]
            scores[nw, 1] = 0.0
        elif binary_case and all_positive:
            if post == PT_LOGISTIC:
                p = np.ascontiguousarray(v.reshape(-1, 1))
                _apply_post(be, p, post)
                v = p[:, 0]
            scores[nw, 0] = 1.0 - v
            scores[nw, 1] = v
        elif post == PT_LOGISTIC:
            a = np.ascontiguousarray(np.stack([-v, v], axis=1))
            scores[nw] = _apply_post(be, a, post)
        else:
            scores[nw, 0] = -v
            scores[nw, 1] = v
    return label_output(labels, idx), scores.astype(np.float32)


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

    if np.any((mode < 0) | (mode > MODE_MEMBER)):
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
    member_nodes = np.flatnonzero(mode == MODE_MEMBER)
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
    full_mode = np.concatenate([mode, np.full(nl, MODE_LEAF, dtype=np.int64)])
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


# -- the ensembles of the operators ----------------------------------------------------------

# The attributes that key each operator's table (version 1 of the legacy operators lacks the
# *_as_tensor attributes: None).
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


def _regressor_model(ctx: Any, a: Mapping[str, Any]) -> _TreeTable:
    """The table (and spec) of a TreeEnsembleRegressor-1/3 node with attributes ``a``."""

    def build() -> _TreeTable:
        agg = a.get("aggregate_function", "SUM")
        if agg not in _AGG:
            raise ctx.unsupported(f"aggregate_function {agg!r} is not supported")
        as_tensor = a.get("target_weights_as_tensor")
        table = _build_legacy_table(
            ctx,
            a.get("nodes_treeids"),
            a.get("nodes_nodeids"),
            a.get("nodes_featureids"),
            _attr_floats(a.get("nodes_values"), a.get("nodes_values_as_tensor")),
            a.get("nodes_modes"),
            a.get("nodes_truenodeids"),
            a.get("nodes_falsenodeids"),
            a.get("nodes_missing_value_tracks_true"),
            a.get("target_treeids"),
            a.get("target_nodeids"),
            a.get("target_ids"),
            _attr_floats(a.get("target_weights"), as_tensor),
            "target",
            as_tensor is None or np.asarray(as_tensor).dtype == np.float32,
        )
        n_targets = a.get("n_targets")
        table.spec = _Spec(
            classifier=False,
            agg=_AGG[agg],
            post=post_code(ctx, a.get("post_transform", "NONE")),
            base=_attr_floats(a.get("base_values"), a.get("base_values_as_tensor")),
            n_targets=int(n_targets) if n_targets is not None else max(table.n_targets, 1),
        )
        return table

    return _cached_table(tuple(a.get(k) for k in _REGRESSOR_KEYS), build)


def _classifier_model(ctx: Any, a: Mapping[str, Any]) -> _TreeTable:
    """The table (and spec) of a TreeEnsembleClassifier-1/3 node with attributes ``a``."""

    def build() -> _TreeTable:
        labels = class_labels(ctx, a.get("classlabels_int64s"), a.get("classlabels_strings"))
        as_tensor = a.get("class_weights_as_tensor")
        weights = _attr_floats(a.get("class_weights"), as_tensor)
        table = _build_legacy_table(
            ctx,
            a.get("nodes_treeids"),
            a.get("nodes_nodeids"),
            a.get("nodes_featureids"),
            _attr_floats(a.get("nodes_values"), a.get("nodes_values_as_tensor")),
            a.get("nodes_modes"),
            a.get("nodes_truenodeids"),
            a.get("nodes_falsenodeids"),
            a.get("nodes_missing_value_tracks_true"),
            a.get("class_treeids"),
            a.get("class_nodeids"),
            a.get("class_ids"),
            weights,
            "class",
            as_tensor is None or np.asarray(as_tensor).dtype == np.float32,
        )
        class_ids = a.get("class_ids")
        cid = np.asarray(class_ids if class_ids is not None else [], dtype=np.int64)
        table.binary_case = labels.shape[0] == 2 and np.unique(cid).shape[0] == 1
        table.all_positive = weights is None or bool(np.all(weights >= 0))
        table.spec = _Spec(
            classifier=True,
            agg=AGG_SUM,
            post=post_code(ctx, a.get("post_transform", "NONE")),
            base=_attr_floats(a.get("base_values"), a.get("base_values_as_tensor")),
            n_targets=labels.shape[0],
            labels=labels,
        )
        return table

    return _cached_table(tuple(a.get(k) for k in _CLASSIFIER_KEYS), build)


def _v5_model(ctx: Any, a: Mapping[str, Any]) -> _TreeTable:
    """The table (and spec) of a TreeEnsemble-5 node with attributes ``a``."""
    agg, post, n_targets = a.get("aggregate_function"), a.get("post_transform"), a.get("n_targets")
    if agg not in (0, 1, 2, 3):
        raise ctx.unsupported(f"aggregate_function {agg} is not in 0..3")
    if post not in (0, 1, 2, 3, 4):
        raise ctx.unsupported(f"post_transform {post} is not in 0..4")
    if n_targets is None or n_targets < 1:
        raise ctx.error("n_targets must be set to a positive value")
    for name in ("nodes_modes", "nodes_splits", "leaf_weights", "leaf_targetids", "tree_roots"):
        if a.get(name) is None:
            raise ctx.error(f"attribute {name} is required")

    def build() -> _TreeTable:
        table = _build_v5_table(
            ctx,
            int(n_targets),
            a.get("nodes_featureids"),
            a.get("nodes_splits"),
            a.get("nodes_modes"),
            a.get("nodes_truenodeids"),
            a.get("nodes_falsenodeids"),
            a.get("nodes_trueleafs"),
            a.get("nodes_falseleafs"),
            a.get("nodes_missing_value_tracks_true"),
            a.get("leaf_targetids"),
            a.get("leaf_weights"),
            a.get("tree_roots"),
            a.get("membership_values"),
        )
        table.spec = _Spec(
            classifier=False, agg=int(agg), post=int(post), base=None, n_targets=int(n_targets)
        )
        return table

    return _cached_table(tuple(a.get(k) for k in _V5_KEYS), build)


@onnx_op("TreeEnsembleRegressor", since=1, domain=ML_DOMAIN)
def tree_ensemble_regressor_1(
    ctx,
    x,
    *,
    aggregate_function,
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
    post_transform,
    target_ids=None,
    target_nodeids=None,
    target_treeids=None,
    target_weights=None,
):
    """TreeEnsembleRegressor-1: Y [N, n_targets] float32."""
    attrs = locals()  # the attributes by name (and ctx, x)
    return _predict(ctx.backend, ctx, _regressor_model(ctx, attrs), x, np.float32)


@onnx_op("TreeEnsembleRegressor", since=3, domain=ML_DOMAIN)
def tree_ensemble_regressor_3(
    ctx,
    x,
    *,
    aggregate_function,
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
    post_transform,
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
    attrs = locals()  # the attributes by name (and ctx, x)
    return _predict(ctx.backend, ctx, _regressor_model(ctx, attrs), x, np.float32)


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
    post_transform,
):
    """TreeEnsembleClassifier-1: (Y labels [N], Z scores [N, n_classes] float32)."""
    attrs = locals()  # the attributes by name (and ctx, x)
    return _predict(ctx.backend, ctx, _classifier_model(ctx, attrs), x, np.float32)


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
    post_transform,
):
    """TreeEnsembleClassifier-3: (Y labels [N] int64 or string, Z scores [N, C] float32).

    Class scores are the sums of the reached leaves' class weights plus base_values, then
    post_transform. With two class labels and weights for only one class, the one score is
    expanded to two columns as onnxruntime does ([1-s, s] for non-negative weights, else
    [-s, s] or logistic of both).
    """
    attrs = locals()  # the attributes by name (and ctx, x)
    return _predict(ctx.backend, ctx, _classifier_model(ctx, attrs), x, np.float32)


@onnx_op("TreeEnsemble", since=5, domain=ML_DOMAIN)
def tree_ensemble_5(
    ctx,
    x,
    *,
    aggregate_function,
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
    post_transform,
    tree_roots=None,
):
    """TreeEnsemble-5: Y [N, n_targets] in X's float type.

    aggregate_function: 0 AVERAGE, 1 SUM, 2 MIN, 3 MAX; post_transform: 0 NONE, 1 SOFTMAX,
    2 LOGISTIC, 3 SOFTMAX_ZERO, 4 PROBIT. Node modes 0..6 (6 = BRANCH_MEMBER, sets taken from
    membership_values in node order, NaN-separated).
    """
    attrs = locals()  # the attributes by name (and ctx, x)
    table = _v5_model(ctx, attrs)
    out_dtype = x.dtype if x.dtype in (np.float32, np.float64, np.float16) else np.float32
    return _predict(ctx.backend, ctx, table, x, out_dtype)


# -- lowerings -------------------------------------------------------------------------------


def _lower_trees(lc: LowerContext, table: _TreeTable, ydtype: Any) -> Bound | None:
    """The bound call of a tree-ensemble node for float32/float64 inputs [N, F] or [F]: the
    generated walk-and-finish kernel where it applies (rows holding a NaN computed again by
    the host path), else the host path (fast or general walk, finished in numpy). The
    bound call's name says which: ``trees.perfect[f=F,ni=NI,kt=KT]`` (the generated module's
    constants), ``trees.perfect_sums`` (the generated walk's sums, finished in numpy),
    ``trees.fast`` or ``trees.general``."""
    x = lc.inputs[0]
    rows = _rows_spec(x)
    if rows is None or x.dtype not in (_F32, _F64):
        return None
    be, ctx = lc.backend, lc.ctx
    spec = table.spec
    n, width = rows
    nt = spec.n_targets
    _check_shapes(ctx, table, width, nt)
    ydtype = np.dtype(ydtype)
    xin = In(0, shape=(n, width))
    y_spec = tensor(ydtype, (n, nt))
    classify = spec.classifier
    strings = classify and spec.labels.dtype == _OBJ
    lab_spec = Spec(TENSOR, _OBJ if strings else _I64, (n,))
    outs = [lab_spec, y_spec] if classify else [y_spec]
    if be.name != "cpu":
        return _lower_trees_device(lc, table, xin, outs)
    walk = _make_walk(be, ctx, table, x.dtype, width)
    if walk is not None and walk.predict is None:
        if n * walk.visits < _FAST_PARALLEL_VISITS or be.threads() == 1:
            return _lower_fast_finish(be, ctx, table, walk, xin, outs, ydtype, x.dtype)
        walk = None  # the host path's walk runs on the thread pool
    if walk is None:
        fast = None
        if table.n_trees and spec.agg in (AGG_SUM, AGG_AVERAGE):
            fast = table.fast_for(be, x.dtype, nt)
        how = "general" if fast is None else "fast" if fast.perfect is None else "perfect_sums"
        call = functools.partial(_host_predict, be, ctx, table, ydtype)
        return returns(call, xin, outs=outs, name=f"trees.{how}")
    feat, thr, leaves, depth, tgt, fin_i, fin_f = walk.args
    lv = walk.label_values
    sample = (
        np.empty((0, width), x.dtype), *walk.args, np.empty((0, nt), ydtype),
        np.empty(0, np.int64) if classify else gtrees.NO_LABELS, lv, gtrees.SINK,
    )  # fmt: skip
    p = walk.fast.perfect
    # the generated module's constants: row width, interior slots per tree, values per leaf
    name = f"trees.perfect[f={width},ni={p.ni},kt={p.kt}]"
    redo = functools.partial(_redo_nan_rows, be, ctx, table, walk)
    no = gtrees.NO_LABELS
    if _perfect_parallel(be, n, walk.visits):
        go = gtrees.pooled(walk.predict, sample, be.threads())

        def run(x: np.ndarray, y: np.ndarray, lab: np.ndarray) -> None:
            bad = np.zeros(1, np.int64)
            go(x, feat, thr, leaves, depth, tgt, fin_i, fin_f, y, lab, lv, bad)
            if bad[0]:
                redo(x, y, lab)

    else:
        # the compiled entry point called straight from the bound function: one Python frame
        # around the kernel
        entry = gtrees.entry_point(walk.predict, (gtrees.SERIAL, *sample))
        serial, sink = gtrees.SERIAL, gtrees.SINK

        def run(x: np.ndarray, y: np.ndarray, lab: np.ndarray) -> None:
            if entry(serial, x, feat, thr, leaves, depth, tgt, fin_i, fin_f, y, lab, lv, sink):
                redo(x, y, lab)

        if not classify:

            def regress(x: np.ndarray, y: np.ndarray) -> None:
                if entry(serial, x, feat, thr, leaves, depth, tgt, fin_i, fin_f, y, no, no, sink):
                    redo(x, y, no)

            return writes(regress, xin, Out(0), outs=outs, name=name)
        if not strings:

            def classify_ints(x: np.ndarray, lab: np.ndarray, y: np.ndarray) -> None:
                if entry(serial, x, feat, thr, leaves, depth, tgt, fin_i, fin_f, y, lab, lv, sink):
                    redo(x, y, lab)

            return writes(classify_ints, xin, Out(0), Out(1), outs=outs, name=name)

    if not classify:
        return writes(lambda x, y: run(x, y, no), xin, Out(0), outs=outs, name=name)
    if not strings:
        return writes(lambda x, lab, y: run(x, y, lab), xin, Out(0), Out(1), outs=outs,
                      name=name)  # fmt: skip
    labels = spec.labels

    def classify_strings(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        y = np.empty((n, nt), np.float32)
        idx = np.empty(n, np.int64)
        run(x, y, idx)
        return label_output(labels, idx), y

    return returns(classify_strings, xin, outs=outs, name=name)


def _lower_fast_finish(
    be: Any,
    ctx: Any,
    table: _TreeTable,
    walk: _Walk,
    xin: In,
    outs: list[Spec],
    ydtype: Any,
    xdtype: Any,
) -> Bound:
    """The bound call of ``trees.fast_walk_finish`` (a walk without a perfect layout, rows
    walked serially): the fast layout's walk and the finishing in one kernel call, rows
    holding a NaN computed again by the host path."""
    f = walk.fast
    fin_i, fin_f = walk.args
    lv = walk.label_values
    width = xin.shape[1]
    nt = table.spec.n_targets
    classify = table.spec.classifier
    no = gtrees.NO_LABELS
    tables = (f.t_root, f.t_depth, f.g_depth, f.f_left, f.f_feat, f.f_thr, f.f_leaf, f.values)
    lab_sample = np.empty(0, np.int64) if classify else no
    sample = (np.empty((0, width), xdtype), *tables, fin_i, fin_f,
              np.empty((0, nt), ydtype), lab_sample, lv)  # fmt: skip
    # the compiled entry point for these argument types: no type dispatch per call
    kernel = gtrees.entry_point(be.kernel("trees", "fast_walk_finish"), sample)
    redo = functools.partial(_redo_nan_rows, be, ctx, table, walk)
    name = "trees.fast_finish"
    if table.spec.classifier and table.spec.labels.dtype == _OBJ:
        labels = table.spec.labels

        def classify_strings(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            y = np.empty((x.shape[0], nt), ydtype)
            idx = np.empty(x.shape[0], np.int64)
            if kernel(x, *tables, fin_i, fin_f, y, idx, lv):
                redo(x, y, idx)
            return label_output(labels, idx), y

        return returns(classify_strings, xin, outs=outs, name=name)
    if not classify:

        def regress(x: np.ndarray, y: np.ndarray) -> None:
            if kernel(x, *tables, fin_i, fin_f, y, no, no):
                redo(x, y, no)

        return writes(regress, xin, Out(0), outs=outs, name=name)

    def classify_ints(x: np.ndarray, lab: np.ndarray, y: np.ndarray) -> None:
        if kernel(x, *tables, fin_i, fin_f, y, lab, lv):
            redo(x, y, lab)

    return writes(classify_ints, xin, Out(0), Out(1), outs=outs, name=name)


def _leaf_targets(table: _TreeTable, nt: int) -> tuple[np.ndarray, bool] | None:
    """None where a walk from a root can take more steps than there are nodes (a cycle);
    else bool [n_trees, nt], the targets the leaves of each tree (reachable from its
    root) give, and whether each tree's leaves all give the same set (then every row gets a
    weight for the same targets)."""
    mode = table.mode
    n = mode.shape[0]
    is_leaf = mode == MODE_LEAF
    # the targets of each leaf node
    lens = np.where(is_leaf, table.aux1 - table.aux0, 0)
    owner = np.repeat(np.arange(n), lens)
    first = np.cumsum(lens) - lens
    pos = table.aux0[owner] + (np.arange(owner.shape[0]) - first[owner])
    gives = np.zeros((n, nt), dtype=bool)
    gives[owner, table.w_target[pos]] = True
    # the (tree, leaf) pairs reachable from the roots, level by level; the pairs of a level
    # are deduplicated, so shared subtrees cost no more than the nodes they have
    tree = np.arange(table.n_trees, dtype=np.int64)
    node = table.roots.astype(np.int64)
    pairs_t, pairs_n = [], []
    for _ in range(n + 1):
        if node.shape[0] == 0:
            break
        leaf = is_leaf[node]
        pairs_t.append(tree[leaf])
        pairs_n.append(node[leaf])
        b = ~leaf
        key = np.unique(
            np.concatenate([tree[b] * n + table.tnode[node[b]], tree[b] * n + table.fnode[node[b]]])
        )
        tree, node = key // n, key % n
    else:
        return None  # a path longer than the table: a cycle
    pt = np.concatenate(pairs_t) if pairs_t else np.zeros(0, np.int64)
    pn = np.concatenate(pairs_n) if pairs_n else np.zeros(0, np.int64)
    sets = np.zeros((table.n_trees, nt), dtype=bool)
    sets[pt] = gives[pn]
    return sets, bool(np.array_equal(sets[pt], gives[pn]))


@portable
def _trees_on_device(
    walk: Any, finish: Any, x: Any, consts: tuple, agg: int, y: Any, labels: Any, out: Any,
    has: Any, bad: Any, tmp: Any,
) -> None:  # fmt: skip
    """The device path of a tree-ensemble node: the general walk's sums into scratch ``out``,
    then the finishing kernel into ``y`` (and ``labels``). ``consts``: the walk's table
    arrays, then fin_i, fin_f, label_values and the labels of a regressor (unused)."""
    tables, (fin_i, fin_f, label_values, no_labels) = consts[:12], consts[12:]
    walk(x, *tables, agg, out, has, bad)
    lab = labels if labels is not None else no_labels
    finish(out.reshape(-1), x.shape[0], y, 0, lab, label_values, fin_i, fin_f, tmp)


def _lower_trees_device(lc: LowerContext, table: _TreeTable, xin: In, outs: list[Spec]):
    """The device bound call of a tree-ensemble node (non-CPU backends): the general walk
    (``trees.general_walk``) and ``trees.finish_rows`` through :func:`_trees_on_device`,
    or None (the node runs on the CPU) where the host path's conventions do not reduce to
    that finishing: string labels, two-class classifiers, base values or masks that depend
    on which leaves a row reached (see :func:`_leaf_targets`), non-float outputs, a table
    whose walks could meet a cycle (the CPU path raises the error) or no targets.

    The walk's count of rows that met a cycle is written to a scratch output nobody reads:
    the table was checked for cycles here, so the count is always 0, and reading it would
    cost the run a wait for the device."""
    spec = table.spec
    nt = spec.n_targets
    ydtype = outs[-1].dtype
    classify = spec.classifier
    if nt == 0 or ydtype not in (_F32, _F64):
        return None
    if classify and (spec.labels.dtype != _I64 or nt == 2):
        return None
    found = _leaf_targets(table, nt)
    if found is None:
        return None
    sets, uniform = found
    # the targets every row gets a weight for, where that is the same for all rows
    has = sets.any(axis=0) if uniform else None
    base = spec.base if spec.base is not None and spec.base.shape[0] else None
    mask = None
    if not classify:
        # _finish_regression
        if base is not None:
            if base.shape[0] == nt and nt > 1:
                if has is None:
                    return None
                base = base * has
            elif nt == 1:
                base = base[:1]
            else:
                return None
        post = spec.post if nt > 1 or spec.post == PT_PROBIT else PT_NONE
        label_values = gtrees.NO_LABELS
    else:
        # _tree_classify with one score column or more than two
        if base is not None and base.shape[0] != nt:
            return None
        if base is None:
            if has is None:
                return None
            mask = has.astype(np.float64)
        post = spec.post
        label_values = spec.labels
    average = spec.agg == AGG_AVERAGE and table.n_trees > 0
    fin_i, fin_f = gtrees.finish_arrays(classify, average, post, table.n_trees, base, mask, nt)
    consts = (*table.walk_arrays(), fin_i, fin_f, label_values, gtrees.NO_LABELS)
    n = outs[-1].shape[0]
    scratch = [
        tensor(table.acc_dtype, (n, nt)),  # sums
        tensor(np.uint8, (n, nt)),  # has
        tensor(_I64, (1,)),  # rows that met a cycle (none: checked above)
        tensor(_F64, (n, nt)),  # finishing scratch, a row per row
    ]
    k = len(outs)
    refs = (Out(1), Out(0)) if classify else (Out(0), None)
    return writes(
        _trees_on_device, lc.kernel("trees", "general_walk"), lc.kernel("trees", "finish_rows"),
        xin, consts, spec.agg, *refs, Out(k), Out(k + 1), Out(k + 2), Out(k + 3),
        outs=[*outs, *scratch], name="trees.device",
    )  # fmt: skip


@lowers(tree_ensemble_regressor_1, tree_ensemble_regressor_3)
def _lower_regressor(lc: LowerContext) -> Bound | None:
    return _lower_trees(lc, _regressor_model(lc.ctx, lc.attrs), np.float32)


@lowers(tree_ensemble_classifier_1, tree_ensemble_classifier_3)
def _lower_classifier(lc: LowerContext) -> Bound | None:
    return _lower_trees(lc, _classifier_model(lc.ctx, lc.attrs), np.float32)


@lowers(tree_ensemble_5)
def _lower_v5(lc: LowerContext) -> Bound | None:
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR:
        return None
    return _lower_trees(lc, _v5_model(lc.ctx, lc.attrs), x.dtype)


# --------------------------------------------------------------------------------------------
# Linear models, scaling, normalisation
# --------------------------------------------------------------------------------------------

# Weight matrices of up to this many values run in the dot-product kernels (kernels/cpu/ml.py:
# one call per run, bias and post-transform included); larger ones, where a BLAS product wins,
# run the implementation (numpy's matmul).
_LINEAR_KERNEL_MAX = 1 << 14


def _linear_weights(
    ctx: Any, f: int, coefficients: Any, intercepts: Any
) -> tuple[np.ndarray, np.ndarray | None]:
    """(W [C, F], b [C] or None) float32 of a linear model on rows of ``f`` features."""
    if coefficients is None:
        raise ctx.error("attribute coefficients is required")
    w = np.asarray(coefficients, dtype=np.float32)
    if f == 0 or w.shape[0] % f:
        raise ctx.error(
            f"coefficients has {w.shape[0]} values, not a multiple of the {f} input features"
        )
    w = np.ascontiguousarray(w.reshape(-1, f))
    b = None
    if intercepts:
        b = np.asarray(intercepts, dtype=np.float32)
        if b.shape[0] != w.shape[0]:
            raise ctx.error(f"intercepts has {b.shape[0]} values, expected {w.shape[0]}")
    return w, b


def _linear_scores(ctx: Any, x: np.ndarray, coefficients: Any, intercepts: Any) -> np.ndarray:
    """X @ W.T + b in float32 (onnxruntime converts every input type to float first)."""
    xf = np.ascontiguousarray(_as_rows(ctx, x), dtype=np.float32)
    w, b = _linear_weights(ctx, xf.shape[1], coefficients, intercepts)
    s = xf @ w.T
    if b is not None:
        s += b
    return s


def _post32(be: Any, s: np.ndarray, code: int) -> np.ndarray:
    if code == PT_NONE or s.size == 0:
        return s.astype(np.float32)
    d = np.ascontiguousarray(s, dtype=np.float64)
    be.kernel("ml", "post_transform")(d, code)
    return d.astype(np.float32)


def _linear_kernel_args(
    lc: LowerContext,
) -> tuple[int, int, np.ndarray, np.ndarray, int] | None:
    """(N, F, W, b, post code) of a linear model's node for the dot-product kernels, or None
    where the implementation runs (input types, a large weight matrix)."""
    x = lc.inputs[0]
    rows = _rows_spec(x)
    if rows is None or x.dtype not in _REAL:
        return None
    a = lc.attrs
    code = post_code(lc.ctx, a["post_transform"])
    w, b = _linear_weights(lc.ctx, rows[1], a["coefficients"], a["intercepts"])
    if w.size > _LINEAR_KERNEL_MAX:
        return None
    return rows[0], rows[1], w, np.zeros(w.shape[0], np.float32) if b is None else b, code


@onnx_op("LinearRegressor", since=1, domain=ML_DOMAIN)
def linear_regressor_1(ctx, x, *, coefficients=None, intercepts=None, post_transform, targets):
    """Y [N, targets] float32 = X @ coefficients.reshape(targets, F).T + intercepts, then
    post_transform (only PROBIT applies to a single target, as in onnxruntime)."""
    code = post_code(ctx, post_transform)
    s = _linear_scores(ctx, x, coefficients, intercepts)
    if s.shape[1] != targets:
        raise ctx.error(f"coefficients give {s.shape[1]} targets, attribute targets={targets}")
    if s.shape[1] == 1 and code != PT_PROBIT:
        return s
    return _post32(ctx.backend, s, code)


@lowers(linear_regressor_1)
def _lower_linear_regressor(lc: LowerContext) -> Bound | None:
    """One kernel call: the dot products, bias and post-transform of every row."""
    got = _linear_kernel_args(lc)
    if got is None:
        return None
    n, f, w, b, code = got
    c = w.shape[0]
    if c != lc.attrs["targets"]:
        raise lc.error(f"coefficients give {c} targets, attribute targets={lc.attrs['targets']}")
    post = code if c > 1 or code == PT_PROBIT else PT_NONE
    x = lc.inputs[0]
    sample = (np.empty((0, f), x.dtype), w, b, post, np.empty((0, c), np.float32))
    fn = lc.backend.launcher("ml", "linear_regress", n * w.size, sample)
    return writes(
        fn, In(0, shape=(n, f)), w, b, post, Out(0),
        outs=[tensor(np.float32, (n, c))], name="ml.linear_regress",
    )  # fmt: skip


def _classifier_form(
    ctx: Any, c: int, labels: np.ndarray, strings: bool
) -> tuple[int, np.ndarray, int]:
    """(LC_* form, the labels the score columns decide between, score columns) of a linear
    classifier with ``c`` weight rows."""
    if c == 1:
        if labels.shape[0] == 2:
            return LC_BINARY, labels, 2
        pair = np.array(["0", "1"], dtype=object) if strings else np.array([0, 1], np.int64)
        return LC_SINGLE, pair, 1
    if labels.shape[0] != c:
        raise ctx.error(f"{labels.shape[0]} class labels for {c} score columns")
    return LC_ARGMAX, labels, c


@onnx_op("LinearClassifier", since=1, domain=ML_DOMAIN)
def linear_classifier_1(
    ctx,
    x,
    *,
    classlabels_ints=None,
    classlabels_strings=None,
    coefficients=None,
    intercepts=None,
    multi_class,
    post_transform,
):
    """(Y labels [N], Z scores [N, C] float32) of a linear model.

    One score column with two class labels: the label is labels[1] when the raw score is
    > 0, and the scores become [1 - s, s] (onnxruntime's rule). Several columns: the label is
    the argmax of the raw scores and all columns are post-transformed.
    """
    be = ctx.backend
    code = post_code(ctx, post_transform)
    s = _linear_scores(ctx, x, coefficients, intercepts)
    labels = class_labels(ctx, classlabels_ints, classlabels_strings, "classlabels_ints")
    n, c = s.shape
    form, lab, _ = _classifier_form(ctx, c, labels, bool(classlabels_strings))
    if form == LC_ARGMAX:
        idx = np.argmax(s, axis=1) if n else np.zeros(0, np.int64)
        return label_output(lab, idx), _post32(be, s, code)
    y = label_output(lab, (s[:, 0] > 0).astype(np.int64))
    if form == LC_SINGLE:
        return y, (_post32(be, s, code) if code == PT_PROBIT else s)
    if code == PT_PROBIT:
        z = np.zeros((n, 2), dtype=np.float32)
        z[:, 0] = _post32(be, s, code)[:, 0]
        return y, z
    if code == PT_LOGISTIC:
        both = np.ascontiguousarray(np.stack([-s[:, 0], s[:, 0]], axis=1))
        return y, _post32(be, both, code)
    return y, np.stack([1.0 - s[:, 0], s[:, 0]], axis=1).astype(np.float32)


@lowers(linear_classifier_1)
def _lower_linear_classifier(lc: LowerContext) -> Bound | None:
    """One kernel call: scores, labels and post-transform of every row (string labels are
    mapped from the kernel's class indices)."""
    got = _linear_kernel_args(lc)
    if got is None:
        return None
    n, f, w, b, code = got
    a = lc.attrs
    strings = bool(a["classlabels_strings"])
    labels = class_labels(
        lc.ctx, a["classlabels_ints"], a["classlabels_strings"], "classlabels_ints"
    )
    form, lab, width = _classifier_form(lc.ctx, w.shape[0], labels, strings)
    values = lab if lab.dtype == _I64 else np.arange(lab.shape[0], dtype=np.int64)
    x = lc.inputs[0]
    ids, z = np.empty(0, np.int64), np.empty((0, width), np.float32)
    sample = (np.empty((0, f), x.dtype), w, b, code, form, values, ids, z)
    fn = lc.backend.launcher("ml", "linear_classify", n * w.size, sample)
    outs = [Spec(TENSOR, _OBJ if strings else _I64, (n,)), tensor(np.float32, (n, width))]
    if not strings:
        return writes(
            fn, In(0, shape=(n, f)), w, b, code, form, values, Out(0), Out(1),
            outs=outs, name="ml.linear_classify",
        )  # fmt: skip

    def classify_strings(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        idx = np.empty(n, np.int64)
        scores = np.empty((n, width), np.float32)
        fn(x, w, b, code, form, values, idx, scores)
        return label_output(lab, idx), scores

    return returns(classify_strings, In(0, shape=(n, f)), outs=outs, name="ml.linear_classify")


def _scaler_params(ctx: Any, f: int, offset: Any, scale: Any) -> tuple[np.ndarray, np.ndarray]:
    off = np.asarray(offset if offset else [0.0], dtype=np.float32)
    sc = np.asarray(scale if scale else [1.0], dtype=np.float32)
    for name, v in (("offset", off), ("scale", sc)):
        if v.shape[0] not in (1, f):
            raise ctx.error(f"{name} has {v.shape[0]} values, expected 1 or {f}")
    return off, sc


@onnx_op("Scaler", since=1, domain=ML_DOMAIN)
def scaler_1(ctx, x, *, offset=None, scale=None):
    """Y float32 = (X - offset) * scale, offset/scale of length 1 or F (last axis)."""
    xf = np.asarray(x, dtype=np.float32)
    off, sc = _scaler_params(ctx, xf.shape[-1] if xf.ndim else 1, offset, scale)
    return ((xf - off) * sc).astype(np.float32)


@lowers(scaler_1)
def _lower_scaler(lc: LowerContext) -> Bound | None:
    """One row kernel over [size / F, F] (offset and scale spread over the F columns)."""
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR or x.dtype not in _REAL or x.ndim == 0 or x.shape[-1] == 0:
        return None
    f = x.shape[-1]
    off, sc = _scaler_params(lc.ctx, f, lc.attrs["offset"], lc.attrs["scale"])
    off = np.ascontiguousarray(np.broadcast_to(off, (f,)))
    sc = np.ascontiguousarray(np.broadcast_to(sc, (f,)))
    rows = (x.size // f, f)
    sample = (np.empty((0, f), x.dtype), off, sc, np.empty((0, f), np.float32))
    fn = lc.backend.launcher("ml", "scale_rows", x.size, sample)
    # the plan's output buffers are C-contiguous: a 2-D one needs no view
    out = Out(0) if x.ndim == 2 else Out(0, shape=rows)
    return writes(
        fn, In(0, shape=rows), off, sc, out,
        outs=[tensor(np.float32, x.shape)], name="ml.scale_rows",
    )  # fmt: skip


@onnx_op("Normalizer", since=1, domain=ML_DOMAIN)
def normalizer_1(ctx, x, *, norm):
    """Y float32: each row divided by its MAX (largest value), L1 or L2 norm; a row whose
    norm is 0 is kept as is."""
    if norm not in _NORMS:
        raise ctx.unsupported(f"norm {norm!r} is not one of MAX, L1, L2")
    rows = np.ascontiguousarray(_as_rows(ctx, x))
    out = np.empty(rows.shape, np.float32)
    ctx.run_kernel("ml", "normalize_rows", rows.size, rows, _NORMS[norm], out)
    return out.reshape(x.shape)


@lowers(normalizer_1)
def _lower_normalizer(lc: LowerContext) -> Bound | None:
    """One row kernel (norms in float64)."""
    x = lc.inputs[0]
    rows = _rows_spec(x)
    norm = lc.attrs["norm"]
    if rows is None or x.dtype not in _REAL or norm not in _NORMS:
        return None
    kind = _NORMS[norm]
    sample = (np.empty((0, rows[1]), x.dtype), kind, np.empty((0, rows[1]), np.float32))
    fn = lc.backend.launcher("ml", "normalize_rows", x.size, sample)
    out = Out(0) if x.ndim == 2 else Out(0, shape=rows)
    return writes(
        fn, In(0, shape=rows), kind, out,
        outs=[tensor(np.float32, x.shape)], name="ml.normalize_rows",
    )  # fmt: skip


@onnx_op("Binarizer", since=1, domain=ML_DOMAIN)
def binarizer_1(x, *, threshold):
    """Y = 1 where X > threshold else 0, in X's dtype."""
    return (x > threshold).astype(x.dtype)


@lowers(binarizer_1)
def _lower_binarizer(lc: LowerContext) -> Bound | None:
    """One flat kernel; the threshold compared in X's float type (float64 for integers), as
    numpy compares an array with a Python float."""
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR or x.dtype not in _REAL:
        return None
    t = float(lc.attrs["threshold"])
    threshold = x.dtype.type(t) if x.dtype.kind == "f" else np.float64(t)
    return writes(
        lc.kernel("ml", "binarize"), In(0, flat=True), threshold, Out(0, flat=True),
        outs=[tensor(x.dtype, x.shape)], name="ml.binarize",
    )  # fmt: skip


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


# Up to this many classes a run's dicts are built by a generated comprehension with one key
# per class (``{k0: v0, k1: v1, ...} for v0, v1, ... in rows``): 2.5x faster than
# dict(zip(keys, row)) per row; wider rows take zip.
_ZIPMAP_UNROLL = 64


@functools.lru_cache(maxsize=_ZIPMAP_UNROLL)
def _zipmap_code(c: int) -> Any:
    """The code of ``zipmap(x)`` for rows of ``c`` values: the list of dicts {k_j: row[j]}
    (the keys ``k0`` .. are the function's globals; names are generated, never the labels)."""
    values = ", ".join(f"v{j}" for j in range(c))
    pairs = ", ".join(f"k{j}: v{j}" for j in range(c))
    source = f"def zipmap(x):\n    return [{{{pairs}}} for ({values},) in x.tolist()]\n"
    scope: dict[str, Any] = {}
    exec(compile(source, f"<onnxjit zipmap of {c} classes>", "exec"), scope)
    return scope["zipmap"].__code__


def _zipmap_rows(keys: list[Any]) -> Any:
    """``zipmap(x)``: the list (one per row of the 2-D ``x``) of dicts key -> value as a
    Python number."""
    if 0 < len(keys) <= _ZIPMAP_UNROLL:
        scope = {f"k{j}": k for j, k in enumerate(keys)}
        return types.FunctionType(_zipmap_code(len(keys)), scope, "zipmap")

    def zipmap(x: np.ndarray) -> list[dict]:
        return [dict(zip(keys, r)) for r in x.tolist()]

    return zipmap


@lowers(zipmap_1)
def _lower_zipmap(lc: LowerContext) -> Bound | None:
    """The list of dicts built by one comprehension over the rows' values (Python floats),
    with the keys converted once (Python ints or strs, as onnxruntime gives them)."""
    x = lc.inputs[0]
    rows = _rows_spec(x)
    if rows is None:
        return None
    a = lc.attrs
    labels = class_labels(lc.ctx, a["classlabels_int64s"], a["classlabels_strings"])
    if rows[1] != labels.shape[0]:
        raise lc.error(
            f"the input has {rows[1]} columns but there are {labels.shape[0]} class labels"
        )
    xin = In(0) if x.ndim == 2 else In(0, shape=rows)
    return returns(_zipmap_rows(labels.tolist()), xin, outs=[Spec(SEQUENCE)], name="ml.zipmap")


# --------------------------------------------------------------------------------------------
# Feature extraction, imputation, encoders
# --------------------------------------------------------------------------------------------


def _afe_indices(ctx: Any, y: Any, f: int) -> np.ndarray:
    idx = np.asarray(y, dtype=np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= f):
        raise ctx.error(f"indices must be in [0, {f}), found {idx.min()}..{idx.max()}")
    return idx


@onnx_op("ArrayFeatureExtractor", since=1, domain=ML_DOMAIN)
def array_feature_extractor_1(ctx, x, y):
    """Z = X[..., indices] with the last axis of size len(indices); a 1-D X gives [1, k]."""
    idx = _afe_indices(ctx, y, x.shape[-1])
    z = np.take(x, idx, axis=-1)
    return z.reshape(1, -1) if x.ndim == 1 else z


@lowers(array_feature_extractor_1)
def _lower_array_feature_extractor(lc: LowerContext) -> Bound | None:
    """Constant indices, checked once: one gather kernel (numbers) or numpy's take (strings);
    indices fed at run time are the implementation's (it checks them every run)."""
    x = lc.inputs[0]
    y = lc.const(1)
    if x is None or x.kind != TENSOR or x.ndim == 0 or x.shape[-1] == 0 or y is None:
        return None
    f = x.shape[-1]
    idx = _afe_indices(lc.ctx, y, f)
    k = idx.shape[0]
    shape = (1, k) if x.ndim == 1 else (*x.shape[:-1], k)
    rows = x.size // f
    if x.dtype == _OBJ:

        def take(x: np.ndarray) -> np.ndarray:
            return np.take(x, idx, axis=-1).reshape(shape)

        return returns(take, In(0), outs=[Spec(TENSOR, _OBJ, shape)], name="ml.take")
    return writes(
        lc.kernel("ml", "gather_columns"), In(0, shape=(rows, f)), idx, Out(0, shape=(rows, k)),
        outs=[tensor(x.dtype, shape)], name="ml.gather_columns",
    )  # fmt: skip


def _imputer_params(
    ctx: Any, dtype: np.dtype, f: int, floats: Any, ints: Any, rep_float: float, rep_int: int
) -> tuple[np.ndarray, Any]:
    """(imputed values in ``dtype``, 1 or ``f`` of them; the replaced value) for X's type."""
    vals, rep = (floats, rep_float) if dtype.kind == "f" else (ints, rep_int)
    if not vals:
        raise ctx.error("the imputed values for this input type are missing")
    v = np.asarray(vals, dtype=dtype)
    if v.shape[0] not in (1, f):
        raise ctx.error(f"{v.shape[0]} imputed values for {f} columns; give 1 or {f}")
    return v, rep


@onnx_op("Imputer", since=1, domain=ML_DOMAIN)
def imputer_1(
    ctx,
    x,
    *,
    imputed_value_floats=None,
    imputed_value_int64s=None,
    replaced_value_float,
    replaced_value_int64,
):
    """Replace the entries equal to the replaced value (NaN matches NaN) by the imputed value
    of their column (one value, or one per column of the last axis)."""
    f = x.shape[-1] if x.ndim else 1
    v, rep = _imputer_params(
        ctx, x.dtype, f, imputed_value_floats, imputed_value_int64s,
        replaced_value_float, replaced_value_int64,
    )  # fmt: skip
    mask = np.isnan(x) if (x.dtype.kind == "f" and np.isnan(rep)) else (x == rep)
    return np.where(mask, v, x).astype(x.dtype)


@lowers(imputer_1)
def _lower_imputer(lc: LowerContext) -> Bound | None:
    """One row kernel; the imputed values spread over the columns, the replaced value in X's
    float type (as numpy compares with a Python float) or int64."""
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR or x.dtype not in _REAL or x.ndim == 0 or x.shape[-1] == 0:
        return None
    a = lc.attrs
    f = x.shape[-1]
    v, rep = _imputer_params(
        lc.ctx, x.dtype, f, a["imputed_value_floats"], a["imputed_value_int64s"],
        a["replaced_value_float"], a["replaced_value_int64"],
    )  # fmt: skip
    v = np.ascontiguousarray(np.broadcast_to(v, (f,)))
    nan_mode = x.dtype.kind == "f" and bool(np.isnan(rep))
    replaced = x.dtype.type(rep) if x.dtype.kind == "f" else np.int64(rep)
    rows = (x.size // f, f)
    return writes(
        lc.kernel("ml", "impute"), In(0, shape=rows), v, replaced, nan_mode, Out(0, shape=rows),
        outs=[tensor(x.dtype, x.shape)], name="ml.impute",
    )  # fmt: skip


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


def _sorted_keys(keys: np.ndarray) -> tuple[np.ndarray, int, int, np.ndarray]:
    """(keys sorted, NaNs last; how many are not NaN; the sorted position of the first NaN,
    -1 without one; the original position of each sorted key) for the lookup kernels: the
    first of equal keys wins, as :func:`_lookup` picks it."""
    order = np.argsort(keys, kind="stable")
    sk = np.ascontiguousarray(keys[order])
    n_valid = int(np.count_nonzero(~np.isnan(sk))) if sk.dtype.kind == "f" else sk.shape[0]
    nan_at = n_valid if n_valid < sk.shape[0] else -1
    return sk, n_valid, nan_at, order.astype(np.int64)


_LOOKUP_TYPES = (_F32, _F64, _I64, np.dtype(np.int32))


def _lower_lookup(
    lc: LowerContext, keys: np.ndarray, values: np.ndarray, default: Any
) -> Bound | None:
    """The bound call of :func:`_lookup` for the node's input 0 with these keys and values:
    a precomputed dict for strings, else the sorted keys' binary search (a kernel; object
    values then taken by position)."""
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR:
        return None
    out = Spec(TENSOR, values.dtype, x.shape)
    if keys.dtype == _OBJ or x.dtype == _OBJ:
        table: dict[Any, Any] = {}
        for k, v in zip(keys.tolist(), values.tolist()):
            table.setdefault(k, v)
        dtype, shape = values.dtype, x.shape

        def lookup(x: np.ndarray) -> np.ndarray:
            got = table.get
            res = np.empty(x.size, dtype=dtype)
            res[:] = [got(k, default) for k in x.reshape(-1).tolist()]
            return res.reshape(shape)

        return returns(lookup, In(0), outs=[out], name="ml.lookup_dict")
    if x.dtype not in _LOOKUP_TYPES or values.dtype not in (*_LOOKUP_TYPES, _OBJ):
        return None
    kk = keys.astype(x.dtype) if x.dtype.kind == "f" else keys
    if kk.dtype != x.dtype:  # integer keys compared in the input's integer type, as numpy
        return None
    sk, n_valid, nan_at, order = _sorted_keys(kk)
    if values.dtype != _OBJ:
        dv = np.asarray(default).astype(values.dtype)[()]
        return writes(
            lc.kernel("ml", "encode_sorted"), In(0, flat=True), sk, n_valid, nan_at,
            np.ascontiguousarray(values[order]), dv, Out(0, flat=True),
            outs=[out], name="ml.encode_sorted",
        )  # fmt: skip
    find = lc.kernel("ml", "find_sorted")
    # position -1 (no key) takes the default, after the values
    table = np.empty(values.shape[0] + 1, dtype=object)
    table[:-1] = values
    table[-1] = default
    shape = x.shape

    def lookup_objects(x: np.ndarray) -> np.ndarray:
        idx = np.empty(x.size, np.int64)
        find(x, sk, n_valid, nan_at, order, idx)
        return table[idx].reshape(shape)

    return returns(lookup_objects, In(0, flat=True), outs=[out], name="ml.find_sorted")


def _label_encoder_1_table(
    x_dtype: np.dtype, classes_strings: Any, default_int64: int, default_string: str
) -> tuple[np.ndarray, np.ndarray, Any]:
    classes = np.array(list(classes_strings or []), dtype=object)
    indices = np.arange(classes.shape[0], dtype=np.int64)
    if x_dtype == _OBJ:
        return classes, indices, default_int64
    return indices, classes, default_string


@onnx_op("LabelEncoder", since=1, domain=ML_DOMAIN)
def label_encoder_1(ctx, x, *, classes_strings=None, default_int64, default_string):
    """Strings -> their index in classes_strings (default_int64 if absent); int64 -> the
    string at that index (default_string if out of range)."""
    keys, values, default = _label_encoder_1_table(
        x.dtype, classes_strings, default_int64, default_string
    )
    return _lookup(ctx, x if x.dtype == object else x.astype(np.int64), keys, values, default)


@lowers(label_encoder_1)
def _lower_label_encoder_1(lc: LowerContext) -> Bound | None:
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR or x.dtype not in (_OBJ, _I64):
        return None
    a = lc.attrs
    keys, values, default = _label_encoder_1_table(
        x.dtype, a["classes_strings"], a["default_int64"], a["default_string"]
    )
    return _lower_lookup(lc, keys, values, default)


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


def _label_encoder_table(
    ctx: Any, x_dtype: np.dtype, a: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray, Any]:
    """(keys in X's type, values, default) of a LabelEncoder-2/4 node with attributes ``a``."""
    keys = _encoder_side(
        ctx, a["keys_floats"], a["keys_int64s"], a["keys_strings"], a.get("keys_tensor"), "keys_*"
    )
    values = _encoder_side(
        ctx, a["values_floats"], a["values_int64s"], a["values_strings"], a.get("values_tensor"),
        "values_*",
    )  # fmt: skip
    if keys.shape[0] != values.shape[0]:
        raise ctx.error(f"{keys.shape[0]} keys but {values.shape[0]} values")
    default_tensor = a.get("default_tensor")
    if default_tensor is not None:
        default = np.asarray(default_tensor).reshape(-1)[0]
        if values.dtype == object:
            default = str(default)
    elif values.dtype == object:
        default = a["default_string"]
    elif values.dtype.kind == "f":
        default = a["default_float"]
    else:
        default = a["default_int64"]
    x_dtype = np.dtype(x_dtype)
    if x_dtype != _OBJ and keys.dtype == _OBJ:
        raise ctx.error(f"string keys cannot match a {x_dtype} input")
    if x_dtype == _OBJ and keys.dtype != _OBJ:
        raise ctx.error(f"{keys.dtype} keys cannot match a string input")
    if x_dtype != _OBJ:
        keys = keys.astype(x_dtype)
    return keys, values, default


@onnx_op("LabelEncoder", since=2, domain=ML_DOMAIN)
def label_encoder_2(
    ctx,
    x,
    *,
    default_float,
    default_int64,
    default_string,
    keys_floats=None,
    keys_int64s=None,
    keys_strings=None,
    values_floats=None,
    values_int64s=None,
    values_strings=None,
):
    """Map each input through keys_* -> values_*; missing keys give the default_* of the
    values' type."""
    keys, values, default = _label_encoder_table(ctx, x.dtype, locals())
    return _lookup(ctx, x, keys, values, default)


@onnx_op("LabelEncoder", since=4, domain=ML_DOMAIN)
def label_encoder_4(
    ctx,
    x,
    *,
    default_float,
    default_int64,
    default_string,
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
    keys, values, default = _label_encoder_table(ctx, x.dtype, locals())
    return _lookup(ctx, x, keys, values, default)


@lowers(label_encoder_2, label_encoder_4)
def _lower_label_encoder(lc: LowerContext) -> Bound | None:
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR:
        return None
    keys, values, default = _label_encoder_table(lc.ctx, x.dtype, lc.attrs)
    return _lower_lookup(lc, keys, values, default)


@onnx_op("OneHotEncoder", since=1, domain=ML_DOMAIN)
def one_hot_encoder_1(ctx, x, *, cats_int64s=None, cats_strings=None, zeros):
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
        raise _unknown_category(ctx)
    out = np.zeros((idx.shape[0], cats.shape[0]), dtype=np.float32)
    ok = np.flatnonzero(idx >= 0)
    out[ok, idx[ok]] = 1.0
    return out.reshape(*x.shape, cats.shape[0])


def _unknown_category(ctx: Any) -> Exception:
    return ctx.error("an input value is not among the categories and zeros=0")


@lowers(one_hot_encoder_1)
def _lower_one_hot_encoder(lc: LowerContext) -> Bound | None:
    """Numbers: one kernel (the categories sorted once, the first of equal ones winning);
    strings: a dict of the categories made once."""
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR:
        return None
    a = lc.attrs
    ctx, zeros = lc.ctx, a["zeros"]
    if x.dtype == _OBJ:
        if not a["cats_strings"]:
            raise lc.error("string input needs cats_strings")
        cats = list(a["cats_strings"])
        found: dict[Any, int] = {}
        for i, c in enumerate(cats):
            found.setdefault(c, i)
        n_cats, shape = len(cats), (*x.shape, len(cats))

        def encode_strings(x: np.ndarray) -> np.ndarray:
            out = np.zeros((x.size, n_cats), np.float32)
            get = found.get
            for r, v in enumerate(x.reshape(-1).tolist()):
                i = get(v)
                if i is not None:
                    out[r, i] = 1.0
                elif not zeros:
                    raise _unknown_category(ctx)
            return out.reshape(shape)

        return returns(
            encode_strings, In(0), outs=[tensor(np.float32, shape)], name="ml.one_hot_strings"
        )
    if x.dtype not in _REAL:
        return None
    if not a["cats_int64s"]:
        raise lc.error("numeric input needs cats_int64s")
    keys, n_valid, _, pos = _sorted_keys(np.asarray(a["cats_int64s"], dtype=np.int64))
    shape = (*x.shape, keys.shape[0])
    kern = lc.kernel("ml", "one_hot")
    args = (In(0, flat=True), keys, n_valid, pos, Out(0, shape=(x.size, keys.shape[0])))
    outs = [tensor(np.float32, shape)]
    if zeros:
        return writes(kern, *args, outs=outs, name="ml.one_hot")

    def encode_checked(x: np.ndarray, keys: Any, n_valid: int, pos: Any, out: np.ndarray) -> None:
        if kern(x, keys, n_valid, pos, out):
            raise _unknown_category(ctx)

    return writes(encode_checked, *args, outs=outs, name="ml.one_hot")


def _category_table(
    ctx: Any, x_dtype: np.dtype, cats_int64s: Any, cats_strings: Any, d_int: int, d_str: str
) -> tuple[np.ndarray, np.ndarray, Any]:
    ints = np.asarray(cats_int64s or [], dtype=np.int64)
    strs = np.array(list(cats_strings or []), dtype=object)
    if ints.shape[0] != strs.shape[0]:
        raise ctx.error("cats_int64s and cats_strings must have the same length")
    return (strs, ints, d_int) if x_dtype == _OBJ else (ints, strs, d_str)


@onnx_op("CategoryMapper", since=1, domain=ML_DOMAIN)
def category_mapper_1(
    ctx, x, *, cats_int64s=None, cats_strings=None, default_int64, default_string
):
    """Strings -> int64 and int64 -> strings through the pairs (cats_strings[i], cats_int64s[i])."""
    keys, values, default = _category_table(
        ctx, x.dtype, cats_int64s, cats_strings, default_int64, default_string
    )
    return _lookup(ctx, x if x.dtype == object else x.astype(np.int64), keys, values, default)


@lowers(category_mapper_1)
def _lower_category_mapper(lc: LowerContext) -> Bound | None:
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR or x.dtype not in (_OBJ, _I64):
        return None
    a = lc.attrs
    keys, values, default = _category_table(
        lc.ctx, x.dtype, a["cats_int64s"], a["cats_strings"], a["default_int64"],
        a["default_string"],
    )  # fmt: skip
    return _lower_lookup(lc, keys, values, default)


def _vectorizer_parts(ctx: Any, shapes: list[tuple[int, ...]], dims: list[int]):
    """(N, [(columns of the input, columns kept, width)]) of FeatureVectorizer's inputs."""
    if len(dims) != len(shapes):
        raise ctx.error(f"{len(shapes)} inputs but {len(dims)} inputdimensions")
    n = None
    parts = []
    for shape, d in zip(shapes, dims):
        rows = 1 if len(shape) <= 1 else shape[0]
        cols = int(np.prod(shape[1:] if len(shape) > 1 else shape))
        if n is None:
            n = rows
        elif rows != n:
            raise ctx.error(f"inputs have different batch sizes ({n} and {rows})")
        parts.append((cols, min(d, cols), d))
    return n, parts


@onnx_op("FeatureVectorizer", since=1, domain=ML_DOMAIN)
def feature_vectorizer_1(ctx, *xs, inputdimensions=None):
    """Y float32 [N, sum(inputdimensions)]: the inputs' columns side by side, each cut or
    zero-padded to its inputdimensions entry."""
    dims = list(inputdimensions or [])
    n, parts = _vectorizer_parts(ctx, [np.shape(a) for a in xs], dims)
    out = np.zeros((n or 0, sum(dims)), dtype=np.float32)
    c0 = 0
    for a, (cols, k, d) in zip(xs, parts):
        out[:, c0 : c0 + k] = np.asarray(a).reshape(n, cols)[:, :k]
        c0 += d
    return out


@lowers(feature_vectorizer_1)
def _lower_feature_vectorizer(lc: LowerContext) -> Bound | None:
    """One function filling the output's column blocks (numpy slice copies; the padding
    columns zeroed)."""
    specs = lc.inputs
    if not specs or any(s is None or s.kind != TENSOR or s.dtype == _OBJ for s in specs):
        return None
    dims = list(lc.attrs["inputdimensions"] or [])
    n, parts = _vectorizer_parts(lc.ctx, [s.shape for s in specs], dims)
    blocks = []
    c0 = 0
    for _, k, d in parts:
        blocks.append((c0, c0 + k, c0 + d, k))
        c0 += d

    def vectorize(*args: np.ndarray) -> None:
        out = args[-1]
        for x, (lo, mid, hi, k) in zip(args, blocks):
            out[:, lo:mid] = x[:, :k]
            if mid < hi:
                out[:, mid:hi] = 0.0

    ins = [In(i, shape=(n, cols)) for i, (cols, _, _) in enumerate(parts)]
    return writes(
        vectorize, *ins, Out(0), outs=[tensor(np.float32, (n, c0))], name="ml.feature_vectorizer"
    )


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
def cast_map_1(ctx, x, *, cast_to, map_form, max_map):
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
