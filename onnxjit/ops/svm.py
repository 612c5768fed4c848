"""SVMClassifier-1 and SVMRegressor-1 (ai.onnx.ml), laid out as onnxruntime computes them.

The spec leaves the score layout open; onnxruntime's is the one skl2onnx models are built
for, so it is followed here:

* Inputs are cast to float32 first (onnxruntime converts every input type to float); the
  arithmetic then runs in float64 and the scores come out float32.
* Kernel matrix K(x, sv): LINEAR x.sv, POLY (gamma x.sv + coef0) ** degree, SIGMOID
  tanh(gamma x.sv + coef0), RBF exp(-gamma |x - sv|^2); kernel_params = [gamma, coef0,
  degree]. Dot products are one BLAS GEMM (numpy ``@``); RBF distances use
  |x|^2 + |sv|^2 - 2 x.sv (GEMM again) clamped at 0.
* SVMClassifier with support vectors (libsvm one-vs-one): one decision value per class pair
  (i < j) = coefficients . K + rho, a vote for i when > 0 else for j (Numba kernel); the
  label is the class with most votes (first on ties). Without prob_a/prob_b the scores are
  the pairwise decision values, except with two classes, where the one value s becomes
  [-s, s] (post_transform NONE), [probit(s), 0] (PROBIT), [logistic(-s), logistic(s)]
  (LOGISTIC) or [1 - s, s] (SOFTMAX, SOFTMAX_ZERO). With
  prob_a/prob_b the scores are the Platt-scaled pairwise probabilities coupled into one
  probability per class (Numba kernel). post_transform then applies to rows of > 1 column.
* SVMClassifier without support vectors (liblinear): scores = X @ coefficients.reshape(C,
  F).T + rho[0], label = argmax, except two classes without probabilities: label 1 when the
  best score is >= 0.5 and every coefficient is >= 0, or when it is > 0 and some coefficient
  is negative (onnxruntime's rule).
* SVMRegressor: K @ coefficients + rho[0] (n_supports > 0) or X @ coefficients + rho[0];
  one_class maps the value to +1 (> 0) / -1. post_transform is accepted and not applied, as
  in onnxruntime (the ONNX reference evaluator rejects values other than NONE).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.kernels.cpu import ml as kml
from onnxjit.kernels.cpu import svm as ksvm
from onnxjit.ops.ml import class_labels, label_output
from onnxjit.registry import ML_DOMAIN, onnx_op

_POST = {
    "NONE": kml.PT_NONE,
    "SOFTMAX": kml.PT_SOFTMAX,
    "LOGISTIC": kml.PT_LOGISTIC,
    "SOFTMAX_ZERO": kml.PT_SOFTMAX_ZERO,
    "PROBIT": kml.PT_PROBIT,
}
_KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")


def _post_code(ctx: Any, post_transform: str) -> int:
    if post_transform not in _POST:
        raise ctx.unsupported(f"post_transform {post_transform!r} is not one of {sorted(_POST)}")
    return _POST[post_transform]


def _rows(ctx: Any, x: np.ndarray) -> np.ndarray:
    """[N, F] float64 rows of the float32-rounded input (1-D input = one row)."""
    if x.ndim == 1:
        x = x.reshape(1, -1)
    elif x.ndim != 2:
        raise ctx.error(f"expected a 1-D or 2-D input [N, F], found shape {list(x.shape)}")
    return np.ascontiguousarray(x.astype(np.float32), dtype=np.float64)


def _floats(values: Any) -> np.ndarray:
    return np.asarray(values if values is not None else [], dtype=np.float32).astype(np.float64)


def _kernel_matrix(
    ctx: Any, x: np.ndarray, sv: np.ndarray, kernel_type: str, params: Any
) -> np.ndarray:
    """K[n, v] = kernel(x[n], sv[v]) (see the module docstring); numpy/BLAS one-pass ops."""
    if kernel_type not in _KERNELS:
        raise ctx.unsupported(f"kernel_type {kernel_type!r} is not one of {list(_KERNELS)}")
    p = [float(v) for v in np.asarray(params, np.float32)] if params else []
    gamma, coef0, degree = (p + [0.0, 0.0, 0.0])[:3]
    if kernel_type == "RBF":
        d = (x * x).sum(axis=1)[:, None] + (sv * sv).sum(axis=1)[None, :] - 2.0 * (x @ sv.T)
        np.maximum(d, 0.0, out=d)
        return np.exp(-gamma * d)
    k = x @ sv.T
    if kernel_type == "POLY":
        return np.power(gamma * k + coef0, degree)
    if kernel_type == "SIGMOID":
        return np.tanh(gamma * k + coef0)
    return k


def _check_features(ctx: Any, x: np.ndarray, f: int, what: str) -> None:
    if x.shape[1] != f:
        raise ctx.error(f"input has {x.shape[1]} features, {what} expects {f}")


def _post(scores: np.ndarray, code: int) -> np.ndarray:
    """post_transform applied to rows of more than one column (onnxruntime's rule)."""
    if scores.shape[1] > 1 and code != kml.PT_NONE and scores.size:
        scores = np.ascontiguousarray(scores, dtype=np.float64)
        kml.post_transform(scores, code)
    return scores.astype(np.float32)


@onnx_op("SVMClassifier", since=1, domain=ML_DOMAIN)
def svm_classifier_1(
    ctx,
    x,
    *,
    classlabels_ints=None,
    classlabels_strings=None,
    coefficients=None,
    kernel_params=None,
    kernel_type="LINEAR",
    post_transform="NONE",
    prob_a=None,
    prob_b=None,
    rho=None,
    support_vectors=None,
    vectors_per_class=None,
):
    """(Y labels [N] int64|string, Z scores [N, K] float32); see the module docstring for
    K and the label rule."""
    code = _post_code(ctx, post_transform)
    labels = class_labels(ctx, classlabels_ints, classlabels_strings, "classlabels_ints")
    n_cls = labels.shape[0]
    xf = _rows(ctx, x)
    coefs = _floats(coefficients)
    rhos = _floats(rho)
    pa, pb = _floats(prob_a), _floats(prob_b)
    if coefs.size == 0:
        raise ctx.error("attribute coefficients is required")
    if pa.shape != pb.shape:
        raise ctx.error(f"prob_a has {pa.size} values and prob_b {pb.size}; they must match")
    have_proba = pa.size > 0
    counts = np.asarray(vectors_per_class if vectors_per_class else [], dtype=np.int64)
    n_vec = int(counts.sum())
    n = xf.shape[0]

    if n_vec > 0:  # libsvm one-vs-one form
        if counts.shape[0] != n_cls or n_cls < 2:
            raise ctx.error(
                f"vectors_per_class has {counts.shape[0]} entries for {n_cls} class labels "
                "(need one per class, at least 2 classes)"
            )
        sv = _floats(support_vectors)
        if sv.size == 0 or sv.size % n_vec:
            raise ctx.error(f"support_vectors has {sv.size} values for {n_vec} vectors")
        sv = sv.reshape(n_vec, -1)
        _check_features(ctx, xf, sv.shape[1], "support_vectors")
        n_pairs = n_cls * (n_cls - 1) // 2
        if coefs.size < (n_cls - 1) * n_vec:
            raise ctx.error(
                f"coefficients has {coefs.size} values, expected (classes - 1) x vectors = "
                f"{(n_cls - 1) * n_vec}"
            )
        if rhos.size < n_pairs or (have_proba and pa.size < n_pairs):
            raise ctx.error(
                f"rho (and prob_a/prob_b when given) need {n_pairs} values (one per class "
                f"pair), found {rhos.size} / {pa.size}"
            )
        coefs = np.ascontiguousarray(coefs[: (n_cls - 1) * n_vec].reshape(n_cls - 1, n_vec))
        kern = np.ascontiguousarray(
            _kernel_matrix(ctx, xf, sv, kernel_type, kernel_params), dtype=np.float64
        )
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        dec = np.zeros((n, n_pairs))
        votes = np.zeros((n, n_cls), dtype=np.int64)
        if n:
            ksvm.ovo_decisions(kern, coefs, starts, counts, rhos, dec, votes)
        y = label_output(labels, np.argmax(votes, axis=1))
        if have_proba:
            probs = np.zeros((n, n_cls))
            if n:
                ksvm.platt_coupling(dec, pa, pb, probs)
            return y, _post(probs, code)
        if n_cls > 2:
            return y, _post(dec, code)
        s = dec[:, 0]
        if code == kml.PT_NONE:
            z = np.stack([-s, s], axis=1)
        elif code == kml.PT_PROBIT:
            z = np.zeros((n, 2))
            col = dec.copy()
            if n:
                kml.post_transform(col, code)
            z[:, 0] = col[:, 0]
        elif code == kml.PT_LOGISTIC:
            z = np.ascontiguousarray(np.stack([-s, s], axis=1))
            if n:
                kml.post_transform(z, code)
        else:
            z = np.stack([1.0 - s, s], axis=1)
        return y, z.astype(np.float32)

    # liblinear form: one weight row per class, rho[0] as the common intercept
    if coefs.size % n_cls:
        raise ctx.error(f"coefficients has {coefs.size} values for {n_cls} classes")
    w = coefs.reshape(n_cls, -1)
    _check_features(ctx, xf, w.shape[1], "coefficients")
    if rhos.size < 1:
        raise ctx.error("attribute rho needs at least one value")
    scores = xf @ w.T + rhos[0]
    best = np.argmax(scores, axis=1) if n else np.zeros(0, np.int64)
    if n_cls == 2 and not have_proba:
        top = scores[np.arange(n), best]
        if bool((coefs >= 0).all()):
            best = np.where(top >= 0.5, 1, best)
        else:
            best = np.where(top > 0, 1, best)
    y = label_output(labels, best)
    if n_cls == 1 and code == kml.PT_PROBIT and n:
        scores = np.ascontiguousarray(scores)
        kml.post_transform(scores, code)
    return y, _post(scores, code)


@onnx_op("SVMRegressor", since=1, domain=ML_DOMAIN)
def svm_regressor_1(
    ctx,
    x,
    *,
    coefficients=None,
    kernel_params=None,
    kernel_type="LINEAR",
    n_supports=0,
    one_class=0,
    post_transform="NONE",
    rho=None,
    support_vectors=None,
):
    """Y [N, 1] float32: support-vector (n_supports > 0) or linear regression value, or the
    one-class decision sign (+1 / -1) when one_class is set."""
    _post_code(ctx, post_transform)
    xf = _rows(ctx, x)
    coefs = _floats(coefficients)
    rhos = _floats(rho)
    if coefs.size == 0:
        raise ctx.error("attribute coefficients is required")
    bias = rhos[0] if rhos.size else 0.0
    if n_supports > 0:
        sv = _floats(support_vectors)
        if sv.size == 0 or sv.size % n_supports:
            raise ctx.error(f"support_vectors has {sv.size} values for {n_supports} vectors")
        sv = sv.reshape(n_supports, -1)
        _check_features(ctx, xf, sv.shape[1], "support_vectors")
        if coefs.size < n_supports:
            raise ctx.error(f"coefficients has {coefs.size} values for {n_supports} vectors")
        kern = _kernel_matrix(ctx, xf, sv, kernel_type, kernel_params)
        y = kern @ coefs[:n_supports] + bias
    else:
        _check_features(ctx, xf, coefs.size, "coefficients")
        y = xf @ coefs + bias
    if one_class:
        y = np.where(y > 0, 1.0, -1.0)
    return y.reshape(-1, 1).astype(np.float32)
