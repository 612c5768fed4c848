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

Both operators have a lowering: the attributes are converted and checked once per plan
(support vectors, coefficients and pair offsets as float64 arrays), and a run is one call of
the model over the rows (a BLAS product and, for the classifier, the one-vs-one kernels of
kernels/cpu/svm.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.lowering import TENSOR, Bound, In, LowerContext, Spec, lowers, returns, tensor
from onnxjit.ops.ml import (
    PT_LOGISTIC,
    PT_NONE,
    PT_PROBIT,
    class_labels,
    label_output,
    post_code,
)
from onnxjit.registry import ML_DOMAIN, onnx_op

_KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")
_REAL = tuple(np.dtype(t) for t in (np.float32, np.float64, np.int64, np.int32))


def _rows(ctx: Any, x: np.ndarray) -> np.ndarray:
    """[N, F] float64 rows of the float32-rounded input (1-D input = one row)."""
    if x.ndim == 1:
        x = x.reshape(1, -1)
    elif x.ndim != 2:
        raise ctx.error(f"expected a 1-D or 2-D input [N, F], found shape {list(x.shape)}")
    return np.ascontiguousarray(x.astype(np.float32), dtype=np.float64)


def _floats(values: Any) -> np.ndarray:
    return np.asarray(values if values is not None else [], dtype=np.float32).astype(np.float64)


class _Kernel:
    """The kernel function K(x, sv) (see the module docstring), its parameters converted
    once."""

    def __init__(self, ctx: Any, kernel_type: str, params: Any):
        if kernel_type not in _KERNELS:
            raise ctx.unsupported(f"kernel_type {kernel_type!r} is not one of {list(_KERNELS)}")
        p = [float(v) for v in np.asarray(params, np.float32)] if params else []
        self.kind = kernel_type
        self.gamma, self.coef0, self.degree = (p + [0.0, 0.0, 0.0])[:3]

    def matrix(self, x: np.ndarray, sv: np.ndarray, sv_sq: np.ndarray) -> np.ndarray:
        """K[n, v] = kernel(x[n], sv[v]); ``sv_sq`` the squared norms of the vectors."""
        if self.kind == "RBF":
            d = (x * x).sum(axis=1)[:, None] + sv_sq[None, :] - 2.0 * (x @ sv.T)
            np.maximum(d, 0.0, out=d)
            return np.exp(-self.gamma * d)
        k = x @ sv.T
        if self.kind == "POLY":
            return np.power(self.gamma * k + self.coef0, self.degree)
        if self.kind == "SIGMOID":
            return np.tanh(self.gamma * k + self.coef0)
        return k


def _check_features(ctx: Any, width: int, f: int, what: str) -> None:
    if width != f:
        raise ctx.error(f"input has {width} features, {what} expects {f}")


def _post(be: Any, scores: np.ndarray, code: int) -> np.ndarray:
    """post_transform applied to rows of more than one column (onnxruntime's rule)."""
    if scores.shape[1] > 1 and code != PT_NONE and scores.size:
        scores = np.ascontiguousarray(scores, dtype=np.float64)
        be.kernel("ml", "post_transform")(scores, code)
    return scores.astype(np.float32)


class _Classifier:
    """An SVMClassifier node's model, its attributes converted and checked once: ``run(x)``
    on float64 rows [N, F] gives (labels, scores float32 [N, ``width``])."""

    def __init__(self, be: Any, ctx: Any, a: dict[str, Any]):
        self.be, self.ctx = be, ctx
        self.code = post_code(ctx, a["post_transform"])
        self.labels = class_labels(
            ctx, a["classlabels_ints"], a["classlabels_strings"], "classlabels_ints"
        )
        n_cls = self.n_cls = self.labels.shape[0]
        coefs = _floats(a["coefficients"])
        rhos = self.rhos = _floats(a["rho"])
        pa, pb = self.pa, self.pb = _floats(a["prob_a"]), _floats(a["prob_b"])
        if coefs.size == 0:
            raise ctx.error("attribute coefficients is required")
        if pa.shape != pb.shape:
            raise ctx.error(f"prob_a has {pa.size} values and prob_b {pb.size}; they must match")
        self.proba = pa.size > 0
        vpc = a["vectors_per_class"]
        counts = self.counts = np.asarray(vpc if vpc else [], dtype=np.int64)
        n_vec = int(counts.sum())
        self.ovo = n_vec > 0
        if self.ovo:  # libsvm one-vs-one form
            if counts.shape[0] != n_cls or n_cls < 2:
                raise ctx.error(
                    f"vectors_per_class has {counts.shape[0]} entries for {n_cls} class labels "
                    "(need one per class, at least 2 classes)"
                )
            sv = _floats(a["support_vectors"])
            if sv.size == 0 or sv.size % n_vec:
                raise ctx.error(f"support_vectors has {sv.size} values for {n_vec} vectors")
            self.sv = np.ascontiguousarray(sv.reshape(n_vec, -1))
            self.sv_sq = (self.sv * self.sv).sum(axis=1)
            self.f = self.sv.shape[1]
            self.n_pairs = n_cls * (n_cls - 1) // 2
            if coefs.size < (n_cls - 1) * n_vec:
                raise ctx.error(
                    f"coefficients has {coefs.size} values, expected (classes - 1) x vectors = "
                    f"{(n_cls - 1) * n_vec}"
                )
            if rhos.size < self.n_pairs or (self.proba and pa.size < self.n_pairs):
                raise ctx.error(
                    f"rho (and prob_a/prob_b when given) need {self.n_pairs} values (one per "
                    f"class pair), found {rhos.size} / {pa.size}"
                )
            self.coefs = np.ascontiguousarray(
                coefs[: (n_cls - 1) * n_vec].reshape(n_cls - 1, n_vec)
            )
            self.kernel = _Kernel(ctx, a["kernel_type"], a["kernel_params"])
            self.starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
            self.width = n_cls if self.proba or n_cls > 2 else 2
            if not self.proba and n_cls > 2:
                self.width = self.n_pairs
        else:  # liblinear form: one weight row per class, rho[0] as the common intercept
            if coefs.size % n_cls:
                raise ctx.error(f"coefficients has {coefs.size} values for {n_cls} classes")
            self.w = coefs.reshape(n_cls, -1)
            self.f = self.w.shape[1]
            if rhos.size < 1:
                raise ctx.error("attribute rho needs at least one value")
            self.nonneg = bool((coefs >= 0).all())
            self.width = n_cls

    def check(self, width: int) -> None:
        _check_features(self.ctx, width, self.f, "support_vectors" if self.ovo else "coefficients")

    def run(self, xf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._ovo(xf) if self.ovo else self._linear(xf)

    def _ovo(self, xf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        be, code, n, n_cls = self.be, self.code, xf.shape[0], self.n_cls
        kern = np.ascontiguousarray(self.kernel.matrix(xf, self.sv, self.sv_sq), np.float64)
        dec = np.zeros((n, self.n_pairs))
        votes = np.zeros((n, n_cls), dtype=np.int64)
        if n:
            be.kernel("svm", "ovo_decisions")(
                kern, self.coefs, self.starts, self.counts, self.rhos, dec, votes
            )
        y = label_output(self.labels, np.argmax(votes, axis=1))
        if self.proba:
            probs = np.zeros((n, n_cls))
            if n:
                be.kernel("svm", "platt_coupling")(dec, self.pa, self.pb, probs)
            return y, _post(be, probs, code)
        if n_cls > 2:
            return y, _post(be, dec, code)
        s = dec[:, 0]
        if code == PT_NONE:
            z = np.stack([-s, s], axis=1)
        elif code == PT_PROBIT:
            z = np.zeros((n, 2))
            col = dec.copy()
            if n:
                be.kernel("ml", "post_transform")(col, code)
            z[:, 0] = col[:, 0]
        elif code == PT_LOGISTIC:
            z = np.ascontiguousarray(np.stack([-s, s], axis=1))
            if n:
                be.kernel("ml", "post_transform")(z, code)
        else:
            z = np.stack([1.0 - s, s], axis=1)
        return y, z.astype(np.float32)

    def _linear(self, xf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        be, code, n = self.be, self.code, xf.shape[0]
        scores = xf @ self.w.T + self.rhos[0]
        best = np.argmax(scores, axis=1) if n else np.zeros(0, np.int64)
        if self.n_cls == 2 and not self.proba:
            top = scores[np.arange(n), best]
            if self.nonneg:
                best = np.where(top >= 0.5, 1, best)
            else:
                best = np.where(top > 0, 1, best)
        y = label_output(self.labels, best)
        if self.n_cls == 1 and code == PT_PROBIT and n:
            scores = np.ascontiguousarray(scores)
            be.kernel("ml", "post_transform")(scores, code)
        return y, _post(be, scores, code)


@onnx_op("SVMClassifier", since=1, domain=ML_DOMAIN)
def svm_classifier_1(
    ctx,
    x,
    *,
    classlabels_ints=None,
    classlabels_strings=None,
    coefficients=None,
    kernel_params=None,
    kernel_type,
    post_transform,
    prob_a=None,
    prob_b=None,
    rho=None,
    support_vectors=None,
    vectors_per_class=None,
):
    """(Y labels [N] int64|string, Z scores [N, K] float32); see the module docstring for
    K and the label rule."""
    attrs = locals()  # the attributes by name (and ctx, x)
    model = _Classifier(ctx.backend, ctx, attrs)
    xf = _rows(ctx, x)
    model.check(xf.shape[1])
    return model.run(xf)


def _rows_of(lc: LowerContext) -> tuple[int, int] | None:
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR or x.ndim not in (1, 2) or x.dtype not in _REAL:
        return None
    return (1, x.shape[0]) if x.ndim == 1 else (x.shape[0], x.shape[1])


def _as_float64(x: np.ndarray) -> np.ndarray:
    """float32-rounded, as float64 (what the implementations compute on)."""
    return x.astype(np.float32).astype(np.float64)


@lowers(svm_classifier_1)
def _lower_svm_classifier(lc: LowerContext) -> Bound | None:
    rows = _rows_of(lc)
    if rows is None:
        return None
    model = _Classifier(lc.backend, lc.ctx, dict(lc.attrs))
    model.check(rows[1])
    run, n = model.run, rows[0]
    if lc.inputs[0].dtype == np.float32:

        def classify(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return run(x.astype(np.float64))

    else:

        def classify(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return run(_as_float64(x))

    labels = Spec(TENSOR, model.labels.dtype, (n,))
    outs = [labels, tensor(np.float32, (n, model.width))]
    return returns(classify, In(0, shape=rows), outs=outs, name="svm.classifier")


class _Regressor:
    """An SVMRegressor node's model (as :class:`_Classifier`): ``run(x)`` gives Y [N, 1]."""

    def __init__(self, ctx: Any, a: dict[str, Any]):
        self.ctx = ctx
        post_code(ctx, a["post_transform"])
        coefs = _floats(a["coefficients"])
        rhos = _floats(a["rho"])
        if coefs.size == 0:
            raise ctx.error("attribute coefficients is required")
        self.bias = rhos[0] if rhos.size else 0.0
        self.one_class = bool(a["one_class"])
        n_supports = a["n_supports"]
        self.svm = n_supports > 0
        if self.svm:
            sv = _floats(a["support_vectors"])
            if sv.size == 0 or sv.size % n_supports:
                raise ctx.error(f"support_vectors has {sv.size} values for {n_supports} vectors")
            self.sv = np.ascontiguousarray(sv.reshape(n_supports, -1))
            self.sv_sq = (self.sv * self.sv).sum(axis=1)
            self.f = self.sv.shape[1]
            if coefs.size < n_supports:
                raise ctx.error(f"coefficients has {coefs.size} values for {n_supports} vectors")
            self.coefs = coefs[:n_supports]
            self.kernel = _Kernel(ctx, a["kernel_type"], a["kernel_params"])
        else:
            self.coefs = coefs
            self.f = coefs.size

    def check(self, width: int) -> None:
        _check_features(self.ctx, width, self.f, "support_vectors" if self.svm else "coefficients")

    def run(self, xf: np.ndarray) -> np.ndarray:
        if self.svm:
            y = self.kernel.matrix(xf, self.sv, self.sv_sq) @ self.coefs + self.bias
        else:
            y = xf @ self.coefs + self.bias
        if self.one_class:
            y = np.where(y > 0, 1.0, -1.0)
        return y.reshape(-1, 1).astype(np.float32)


@onnx_op("SVMRegressor", since=1, domain=ML_DOMAIN)
def svm_regressor_1(
    ctx,
    x,
    *,
    coefficients=None,
    kernel_params=None,
    kernel_type,
    n_supports,
    one_class,
    post_transform,
    rho=None,
    support_vectors=None,
):
    """Y [N, 1] float32: support-vector (n_supports > 0) or linear regression value, or the
    one-class decision sign (+1 / -1) when one_class is set."""
    attrs = locals()  # the attributes by name (and ctx, x)
    model = _Regressor(ctx, attrs)
    xf = _rows(ctx, x)
    model.check(xf.shape[1])
    return model.run(xf)


@lowers(svm_regressor_1)
def _lower_svm_regressor(lc: LowerContext) -> Bound | None:
    rows = _rows_of(lc)
    if rows is None:
        return None
    model = _Regressor(lc.ctx, dict(lc.attrs))
    model.check(rows[1])
    run = model.run
    if lc.inputs[0].dtype == np.float32:

        def regress(x: np.ndarray) -> np.ndarray:
            return run(x.astype(np.float64))

    else:

        def regress(x: np.ndarray) -> np.ndarray:
            return run(_as_float64(x))

    outs = [tensor(np.float32, (rows[0], 1))]
    return returns(regress, In(0, shape=rows), outs=outs, name="svm.regressor")
