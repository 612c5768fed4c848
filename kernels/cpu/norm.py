"""Normalisation kernels (CPU, Numba): layer/MVN rows, group/instance norm, channel affine.

Statistics accumulate in float64 whatever the element type, and use two passes (mean, then the
mean of squared deviations) rather than E[x^2] - E[x]^2, which cancels catastrophically.
"""

from __future__ import annotations

import math

from numba import prange

from .._jit import njit, pjit


@njit(inline="always")
def _row(x, scale, bias, eps_in, eps_out, y, mean, inv, r):
    n = x.shape[1]
    acc = 0.0
    for j in range(n):
        acc += x[r, j]
    m = acc / n if n > 0 else 0.0
    acc2 = 0.0
    for j in range(n):
        d = x[r, j] - m
        acc2 += d * d
    var = acc2 / n if n > 0 else 0.0
    iv = 1.0 / (math.sqrt(var + eps_in) + eps_out)
    mean[r] = m
    inv[r] = iv
    for j in range(n):
        y[r, j] = (x[r, j] - m) * iv * scale[j] + bias[j]


@njit
def standardize_rows(x, scale, bias, eps_in, eps_out, y, mean, inv):
    """For each row ``r`` of ``x`` (R, n): ``y = (x - mean) / (sqrt(var + eps_in) + eps_out)
    * scale + bias`` with ``scale``/``bias`` of length n; writes ``mean[r]`` and the inverse
    denominator ``inv[r]`` (float64 arrays of length R). Serves LayerNormalization and MVN."""
    for r in range(x.shape[0]):
        _row(x, scale, bias, eps_in, eps_out, y, mean, inv, r)


@pjit
def standardize_rows_par(x, scale, bias, eps_in, eps_out, y, mean, inv):
    """Parallel twin of :func:`standardize_rows` (threads over rows)."""
    for r in prange(x.shape[0]):
        _row(x, scale, bias, eps_in, eps_out, y, mean, inv, r)


@njit(inline="always")
def _group(x, groups, scale, bias, eps, y, idx):
    N, C, S = x.shape
    cg = C // groups
    n = idx // groups
    c0 = (idx % groups) * cg
    cnt = cg * S
    acc = 0.0
    for c in range(c0, c0 + cg):
        for s in range(S):
            acc += x[n, c, s]
    m = acc / cnt if cnt > 0 else 0.0
    acc2 = 0.0
    for c in range(c0, c0 + cg):
        for s in range(S):
            d = x[n, c, s] - m
            acc2 += d * d
    var = acc2 / cnt if cnt > 0 else 0.0
    iv = 1.0 / math.sqrt(var + eps)
    for c in range(c0, c0 + cg):
        a = scale[c] * iv
        b = bias[c] - m * a
        for s in range(S):
            y[n, c, s] = x[n, c, s] * a + b


@njit
def group_norm(x, groups, scale, bias, eps, y):
    """Normalise ``x`` (N, C, S) over each group of ``C // groups`` consecutive channels (and
    all of S), then apply the per-channel ``scale``/``bias`` (length C). InstanceNormalization
    is ``groups == C``."""
    for idx in range(x.shape[0] * groups):
        _group(x, groups, scale, bias, eps, y, idx)


@pjit
def group_norm_par(x, groups, scale, bias, eps, y):
    """Parallel twin of :func:`group_norm` (threads over (batch, group) pairs)."""
    for idx in prange(x.shape[0] * groups):
        _group(x, groups, scale, bias, eps, y, idx)


@njit
def channel_affine(x, a, b, y):
    """``y[n, c, s] = x[n, c, s] * a[c] + b[c]`` for ``x`` (N, C, S) (inference BatchNorm)."""
    N, C, S = x.shape
    for n in range(N):
        for c in range(C):
            ac = a[c]
            bc = b[c]
            for s in range(S):
                y[n, c, s] = x[n, c, s] * ac + bc


@pjit
def channel_affine_par(x, a, b, y):
    """Parallel twin of :func:`channel_affine` (threads over (batch, channel) planes)."""
    N, C, S = x.shape
    for idx in prange(N * C):
        n = idx // C
        c = idx % C
        ac = a[c]
        bc = b[c]
        for s in range(S):
            y[n, c, s] = x[n, c, s] * ac + bc
