"""Row-wise kernels of the ai.onnx.ml operators: score post-transforms, Normalizer, SVM kernels.

Score arrays are 2-D C-contiguous (rows, classes). Post-transform codes follow TreeEnsemble-5:
0 NONE, 1 SOFTMAX, 2 LOGISTIC, 3 SOFTMAX_ZERO, 4 PROBIT.
"""

from __future__ import annotations

import math

import numpy as np

from .._jit import njit

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


@njit
def normalize_rows(x, out, kind):
    """Normalizer: divide each row of ``x`` by its max (MAX), sum of |v| (L1) or Euclidean
    norm (L2); a row whose norm is 0 is copied unchanged. ``out`` has x's shape."""
    n, c = x.shape
    for i in range(n):
        if kind == NORM_MAX:
            d = -np.inf
            for j in range(c):
                if x[i, j] > d:
                    d = x[i, j]
        elif kind == NORM_L1:
            d = 0.0
            for j in range(c):
                d += abs(x[i, j])
        else:
            d = 0.0
            for j in range(c):
                d += x[i, j] * x[i, j]
            d = math.sqrt(d)
        if d == 0.0 or c == 0:
            for j in range(c):
                out[i, j] = x[i, j]
        else:
            for j in range(c):
                out[i, j] = x[i, j] / d
