"""Kernels of the ai.onnx.ml operators: score post-transforms, Scaler, Normalizer, linear
models, Binarizer, Imputer, the encoders' lookups, ArrayFeatureExtractor.

Arrays are C-contiguous; row kernels take [N, F] views. Post-transform codes follow
TreeEnsemble-5: 0 NONE, 1 SOFTMAX, 2 LOGISTIC, 3 SOFTMAX_ZERO, 4 PROBIT (onnxjit/ops/ml.py
numbers them the same). Kernels named ``name_par`` are the pool twins of ``name`` (the control
block first, rows claimed in chunks: :mod:`.runtime.chunks`).

The linear models' kernels compute a row's scores as dot products: they serve the small
weight matrices of converted scikit-learn models (onnxjit/ops/ml.py bounds their size), where
one call beats the several numpy calls of a BLAS product, its bias and its post-transform.
"""

from __future__ import annotations

import math

import numpy as np

from .._jit import njit
from .runtime.twins import twins

PT_NONE = 0
PT_SOFTMAX = 1
PT_LOGISTIC = 2
PT_SOFTMAX_ZERO = 3
PT_PROBIT = 4

NORM_MAX = 0
NORM_L1 = 1
NORM_L2 = 2


@njit(inline="always")
def logistic(v):
    """1 / (1 + exp(-v)), computed from exp(-|v|) so it never overflows."""
    e = 1.0 / (1.0 + math.exp(-abs(v)))
    return e if v >= 0 else 1.0 - e


@njit(inline="always")
def probit(v):
    """sqrt(2) * erfinv(2v - 1) with the closed-form erfinv approximation (a = 0.147) that
    onnxruntime and the ONNX reference use, so that scores match theirs."""
    x = 2.0 * v - 1.0
    sgn = -1.0 if x < 0 else 1.0
    x = (1.0 - x) * (1.0 + x)
    if x == 0.0:  # v = 0 or 1: -inf / +inf, as onnxruntime gives
        return sgn * math.inf
    lg = math.log(x)
    a = 2.0 / (math.pi * 0.147) + 0.5 * lg
    b = lg / 0.147
    return 1.41421356 * sgn * math.sqrt(-a + math.sqrt(a * a - b))


@njit
def post_transform(s, kind):
    """Apply post-transform ``kind`` to every row of the 2-D array ``s`` in place.

    SOFTMAX_ZERO leaves entries within 1e-7 of zero out of the sum (they stay ~0), as
    onnxruntime does.
    """
    n, c = s.shape
    if kind == PT_LOGISTIC:
        for i in range(n):
            for j in range(c):
                s[i, j] = logistic(s[i, j])
    elif kind == PT_PROBIT:
        for i in range(n):
            for j in range(c):
                s[i, j] = probit(s[i, j])
    elif kind == PT_SOFTMAX:
        for i in range(n):
            if c == 0:
                continue
            m = s[i, 0]
            for j in range(1, c):
                if s[i, j] > m:
                    m = s[i, j]
            tot = 0.0
            for j in range(c):
                e = math.exp(s[i, j] - m)
                s[i, j] = e
                tot += e
            for j in range(c):
                s[i, j] /= tot
    elif kind == PT_SOFTMAX_ZERO:
        for i in range(n):
            if c == 0:
                continue
            m = s[i, 0]
            for j in range(1, c):
                if s[i, j] > m:
                    m = s[i, j]
            em = math.exp(-m)
            tot = 0.0
            for j in range(c):
                v = s[i, j]
                if v > 1e-7 or v < -1e-7:
                    e = math.exp(v - m)
                    s[i, j] = e
                    tot += e
                else:
                    s[i, j] = v * em
            if tot == 0.0:
                for j in range(c):
                    s[i, j] = 0.5
            else:
                for j in range(c):
                    s[i, j] /= tot


@njit(inline="always")
def _normalize_row(x, kind, y, r):
    c = x.shape[1]
    if kind == NORM_MAX:
        d = -np.inf
        for j in range(c):
            v = np.float64(x[r, j])
            if v > d:
                d = v
    elif kind == NORM_L1:
        d = 0.0
        for j in range(c):
            d += abs(np.float64(x[r, j]))
    else:
        d = 0.0
        for j in range(c):
            v = np.float64(x[r, j])
            d += v * v
        d = math.sqrt(d)
    if d == 0.0 or c == 0:
        for j in range(c):
            y[r, j] = np.float64(x[r, j])
    else:
        for j in range(c):
            y[r, j] = np.float64(x[r, j]) / d


normalize_rows, normalize_rows_par = twins(
    "normalize_rows(x, kind, y)",
    _normalize_row,
    items={"r": "x.shape[0]"},
    doc="""Normalizer: each row of ``x`` [N, C] (any real type, computed in float64) divided by
    its max (MAX), sum of |v| (L1) or Euclidean norm (L2) into ``y`` [N, C] (float32); a row
    whose norm is 0 is copied unchanged.""",
)


@njit(inline="always")
def _scale_row(x, offset, scale, y, r):
    for j in range(x.shape[1]):
        y[r, j] = (np.float32(x[r, j]) - offset[j]) * scale[j]


scale_rows, scale_rows_par = twins(
    "scale_rows(x, offset, scale, y)",
    _scale_row,
    items={"r": "x.shape[0]"},
    doc="""Scaler: ``y = (float32(x) - offset) * scale`` in float32, ``x``/``y`` [N, F],
    ``offset`` and ``scale`` float32 [F].""",
)


@njit(inline="always")
def _scores(x, r, w, b, s):
    """``s[k] = float32(x[r] . w[k]) + b[k]`` (float32): the features rounded to float32 and
    the products summed in float64, as one float32 product would give them at best."""
    f = x.shape[1]
    for k in range(w.shape[0]):
        acc = 0.0
        for j in range(f):
            acc += np.float64(np.float32(x[r, j])) * np.float64(w[k, j])
        s[k] = np.float32(acc) + b[k]


@njit(inline="always")
def _post_row(s, post, tmp, z, r):
    """``z[r] = float32(post(float64(s)))`` (``tmp`` [1, C] float64 scratch)."""
    if post == PT_NONE:
        for k in range(s.shape[0]):
            z[r, k] = s[k]
        return
    for k in range(s.shape[0]):
        tmp[0, k] = s[k]
    post_transform(tmp, post)
    for k in range(s.shape[0]):
        z[r, k] = tmp[0, k]


# LinearClassifier modes (onnxjit/ops/ml.py picks one from the score columns and labels)
LC_ARGMAX = 0  # several score columns: the argmax's label, every column post-transformed
LC_BINARY = 1  # one column, two labels: label 1 when s > 0; scores [1 - s, s] (see below)
LC_SINGLE = 2  # one column, other label counts: label 1 when s > 0; the one score column


@njit(inline="always")
def _classify_row(x, r, w, b, post, mode, label_values, labels, z, s, tmp):
    _scores(x, r, w, b, s)
    if mode == LC_ARGMAX:
        best = 0
        bv = s[0]
        if bv == bv:
            for k in range(1, s.shape[0]):
                v = s[k]
                if v != v:  # np.argmax stops at the first NaN
                    best = k
                    break
                if v > bv:
                    bv = v
                    best = k
        labels[r] = label_values[best]
        _post_row(s, post, tmp, z, r)
        return
    v = s[0]
    labels[r] = label_values[1] if v > 0 else label_values[0]
    if mode == LC_SINGLE:
        if post == PT_PROBIT:
            z[r, 0] = probit(np.float64(v))
        else:
            z[r, 0] = v
    elif post == PT_PROBIT:
        z[r, 0] = probit(np.float64(v))
        z[r, 1] = 0.0
    elif post == PT_LOGISTIC:
        z[r, 0] = logistic(np.float64(-v))
        z[r, 1] = logistic(np.float64(v))
    else:
        z[r, 0] = np.float32(1.0) - v
        z[r, 1] = v


# per call and thread: the row's scores (float32) and the post-transform's scratch (float64)
_SCRATCH = ("s = np.empty(w.shape[0], np.float32)", "tmp = np.empty((1, w.shape[0]), np.float64)")

linear_classify, linear_classify_par = twins(
    "linear_classify(x, w, b, post, mode, label_values, labels, z)",
    _classify_row,
    setup=_SCRATCH,
    items={"r": "x.shape[0]"},
    doc="""LinearClassifier: ``x`` [N, F] (any real type, rounded to float32), weights ``w``
    [C, F] and bias ``b`` [C] (float32): labels [N] (``label_values`` of the winning column) and
    scores ``z`` [N, C'] float32 by ``mode`` (LC_*): LC_ARGMAX post-transforms every column (in
    float64); LC_BINARY gives [probit(s), 0] (PROBIT), [logistic(-s), logistic(s)] (LOGISTIC)
    or [1 - s, s]; LC_SINGLE gives probit(s) (PROBIT) or s.""",
)


@njit(inline="always")
def _regress_row(x, r, w, b, post, z, s, tmp):
    _scores(x, r, w, b, s)
    _post_row(s, post, tmp, z, r)


linear_regress, linear_regress_par = twins(
    "linear_regress(x, w, b, post, z)",
    _regress_row,
    setup=_SCRATCH,
    items={"r": "x.shape[0]"},
    doc="""LinearRegressor: ``z`` [N, T] float32 = x . w[k] + b[k] as :func:`linear_classify`
    computes scores, then post-transform ``post`` (in float64).""",
)


@njit
def binarize(x, threshold, y):
    """Binarizer: ``y[i] = 1 if x[i] > threshold else 0`` (flat arrays of one type; NaN gives
    0)."""
    one = y.dtype.type(1)
    zero = y.dtype.type(0)
    for i in range(x.shape[0]):
        y[i] = one if x[i] > threshold else zero


@njit
def impute(x, values, replaced, nan_mode, y):
    """Imputer: ``y[r, j] = values[j]`` where ``x[r, j]`` is the replaced value (any NaN when
    ``nan_mode``), else ``x[r, j]`` (``x``/``y`` [N, F] of one type, ``values`` [F])."""
    n, f = x.shape
    for r in range(n):
        for j in range(f):
            v = x[r, j]
            if nan_mode:
                hit = v != v
            else:
                hit = v == replaced
            y[r, j] = values[j] if hit else v


@njit(inline="always")
def _find(v, keys, n_valid, nan_at):
    """Index in ``keys`` (sorted, the first ``n_valid`` not NaN) of the first key equal to
    ``v``, ``nan_at`` for a NaN ``v`` (-1: no NaN key), -1 when none is."""
    if v != v:
        return nan_at
    lo = 0
    hi = n_valid
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    if lo < n_valid and keys[lo] == v:
        return lo
    return -1


@njit
def find_sorted(x, keys, n_valid, nan_at, pos, out):
    """``out[i] = pos[k]`` for the first sorted key ``keys[k] == x[i]`` (NaN matches the first
    NaN key, at ``nan_at``), else -1: flat ``x`` of the keys' type, ``out`` int64."""
    for i in range(x.shape[0]):
        k = _find(x[i], keys, n_valid, nan_at)
        out[i] = pos[k] if k >= 0 else -1


@njit
def encode_sorted(x, keys, n_valid, nan_at, values, default, out):
    """LabelEncoder on numbers: ``out[i] = values[k]`` for the first sorted key ``keys[k] ==
    x[i]`` (NaN matches NaN), else ``default`` (``values`` ordered as ``keys``)."""
    for i in range(x.shape[0]):
        k = _find(x[i], keys, n_valid, nan_at)
        out[i] = values[k] if k >= 0 else default


@njit
def one_hot(x, keys, n_valid, pos, out):
    """OneHotEncoder on numbers: row ``i`` of ``out`` [N, C] (float32) gets 1 at the category
    of ``int64(x[i])`` (the first one among sorted ``keys``, whose categories are ``pos``) and
    0 elsewhere; returns how many values have no category (their rows stay 0)."""
    out[:] = 0.0
    missed = 0
    for i in range(x.shape[0]):
        k = _find(np.int64(x[i]), keys, n_valid, -1)
        if k >= 0:
            out[i, pos[k]] = 1.0
        else:
            missed += 1
    return missed


@njit
def gather_columns(x, idx, z):
    """ArrayFeatureExtractor: ``z[r, k] = x[r, idx[k]]`` (``x`` [N, F], ``z`` [N, K])."""
    for r in range(x.shape[0]):
        for k in range(idx.shape[0]):
            z[r, k] = x[r, idx[k]]
