"""SVMClassifier kernels: one-vs-one decision values with votes, and Platt-scaled pairwise
coupling into class probabilities (Wu, Lin and Weng 2004, method 2, as libsvm and
onnxruntime iterate it).

The kernel matrix K (rows, support vectors) is computed by the caller (BLAS GEMM or a
distance matrix); these loops only combine it with the coefficients.
"""

from __future__ import annotations

import math

import numpy as np

from .._jit import njit


@njit
def ovo_decisions(kern, coefs, starts, counts, rho, dec, votes):
    """One-vs-one decision values of every class pair (i < j, in row-major pair order).

    kern: (N, V) kernel values; coefs: (C - 1, V) dual coefficients in libsvm's layout (the
    coefficient of a class-i vector against class j sits in row j - 1 when j > i, row j when
    j < i); starts/counts: (C,) first support vector and count of each class; rho: (P,)
    offsets added to each pair. dec: (N, P) out; votes: (N, C) int64 out, zeroed by the
    caller; a pair's vote goes to i when its value is > 0, else to j.
    """
    n = kern.shape[0]
    n_cls = starts.shape[0]
    for r in range(n):
        p = 0
        for i in range(n_cls - 1):
            for j in range(i + 1, n_cls):
                s = 0.0
                for v in range(starts[i], starts[i] + counts[i]):
                    s += coefs[j - 1, v] * kern[r, v]
                for v in range(starts[j], starts[j] + counts[j]):
                    s += coefs[i, v] * kern[r, v]
                s += rho[p]
                dec[r, p] = s
                if s > 0:
                    votes[r, i] += 1
                else:
                    votes[r, j] += 1
                p += 1


@njit
def _couple(pair, n_cls, q, qp, prob):
    """Solve min_p p^T Q p, sum p = 1 for one row; pair[i, j] = P(i | i or j)."""
    for i in range(n_cls):
        prob[i] = 1.0 / n_cls
        q[i, i] = 0.0
        for j in range(n_cls):
            if j != i:
                q[i, i] += pair[j, i] * pair[j, i]
                if j < i:
                    q[i, j] = q[j, i]
                else:
                    q[i, j] = -pair[j, i] * pair[i, j]
    eps = 0.005 / n_cls
    for _ in range(100):
        pqp = 0.0
        for i in range(n_cls):
            t = 0.0
            for j in range(n_cls):
                t += q[i, j] * prob[j]
            qp[i] = t
            pqp += prob[i] * t
        worst = 0.0
        for i in range(n_cls):
            e = abs(qp[i] - pqp)
            if e > worst:
                worst = e
        if worst < eps:
            break
        for i in range(n_cls):
            d = (pqp - qp[i]) / q[i, i]
            prob[i] += d
            pqp = (pqp + d * (d * q[i, i] + 2.0 * qp[i])) / (1.0 + d) / (1.0 + d)
            for j in range(n_cls):
                qp[j] = (qp[j] + d * q[i, j]) / (1.0 + d)
                prob[j] /= 1.0 + d


@njit
def platt_coupling(dec, prob_a, prob_b, out):
    """Class probabilities from pairwise decision values.

    dec: (N, P) decision values in pair order; prob_a/prob_b: (P,) Platt parameters; out:
    (N, C). Pair probability = 1 / (1 + exp(a * f + b)) clipped to [1e-7, 1 - 1e-7].
    """
    n, n_cls = out.shape
    pair = np.zeros((n_cls, n_cls))
    q = np.zeros((n_cls, n_cls))
    qp = np.zeros(n_cls)
    prob = np.zeros(n_cls)
    for r in range(n):
        p = 0
        for i in range(n_cls - 1):
            for j in range(i + 1, n_cls):
                z = dec[r, p] * prob_a[p] + prob_b[p]
                # 1 - logistic(z), from exp(-|z|) so it never overflows
                e = math.exp(-abs(z))
                v = e / (1.0 + e) if z >= 0 else 1.0 / (1.0 + e)
                v = min(max(v, 1e-7), 1.0 - 1e-7)
                pair[i, j] = v
                pair[j, i] = 1.0 - v
                p += 1
        _couple(pair, n_cls, q, qp, prob)
        for i in range(n_cls):
            out[r, i] = prob[i]
