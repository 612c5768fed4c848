"""Normalisation kernels (CPU, Numba): layer/MVN rows, group/instance norm, channel affine.

Statistics accumulate in float64 whatever the element type, and use two passes (mean, then the
mean of squared deviations) rather than E[x^2] - E[x]^2, which cancels catastrophically.
"""

from __future__ import annotations

import math

from .._jit import njit
from .runtime.twins import twins

# Reassociation only (see the row kernels below).
_REASSOC = {"reassoc"}


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


standardize_rows, standardize_rows_par = twins(
    "standardize_rows(x, scale, bias, eps_in, eps_out, y, mean, inv)",
    _row,
    items={"r": "x.shape[0]"},
    doc="""For each row ``r`` of ``x`` (R, n): ``y = (x - mean) / (sqrt(var + eps_in) + eps_out)
    * scale + bias`` with ``scale``/``bias`` of length n; writes ``mean[r]`` and the inverse
    denominator ``inv[r]`` (float64 arrays of length R). Serves LayerNormalization and MVN.""",
)


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


group_norm, group_norm_par = twins(
    "group_norm(x, groups, scale, bias, eps, y)",
    _group,
    items={"idx": "x.shape[0] * groups"},
    doc="""Normalise ``x`` (N, C, S) over each group of ``C // groups`` consecutive channels (and
    all of S), then apply the per-channel ``scale``/``bias`` (length C). InstanceNormalization
    is ``groups == C``.""",
)


@njit(inline="always")
def _affine_plane(x, a, b, y, S, n, c):
    ac = a[c]
    bc = b[c]
    for s in range(S):
        y[n, c, s] = x[n, c, s] * ac + bc


channel_affine, channel_affine_par = twins(
    "channel_affine(x, a, b, y)",
    _affine_plane,
    setup="N, C, S = x.shape",
    items={"n": "N", "c": "C"},
    doc="""``y[n, c, s] = x[n, c, s] * a[c] + b[c]`` for ``x`` (N, C, S) (inference BatchNorm).""",
)


# --------------------------------------------------------------------------------------------
# Fast row kernels for LayerNorm / SkipLayerNorm / RMSNorm over the last dims of (R, n) arrays.
#
# Every inner loop runs in the element type (float32 or float64) and has no per-element branch.
# The kernels allow reassociation (fastmath={"reassoc"}) and nothing else: LLVM may then split a
# sum into SIMD partial sums (which is all it changes: a different summation order); NaN, inf and
# signed zeros keep their IEEE meaning (no nnan/ninf/nsz/arcp/afn). A row of a few thousand
# elements stays in L1 between the passes. Statistics are stored into the
# ``mean``/``inv`` arrays (of the element type), which is also how a float64 scalar is cast to
# the element type. Variance is two-pass (mean, then mean of squared deviations).


@njit(inline="always")
def _row_sum(x, r, z):
    t = z
    for j in range(x.shape[1]):
        t += x[r, j]
    return t


@njit(inline="always")
def _row_sq_dev(x, r, m, z):
    # sum((x[r] - m)^2); m = 0 gives the sum of squares (RMSNorm).
    t = z
    for j in range(x.shape[1]):
        d = x[r, j] - m
        t += d * d
    return t


@njit(inline="always")
def _ln_row(x, scale, bias, eps, y, mean, inv, r):
    # Statistics of row r of x, then y[r] = (x[r] - mean) * inv * scale + bias. y may be x.
    n = x.shape[1]
    mean[r] = 0.0
    z = mean[r]
    mean[r] = _row_sum(x, r, z) / n
    m = mean[r]
    inv[r] = 1.0 / math.sqrt(_row_sq_dev(x, r, m, z) / n + eps)
    iv = inv[r]
    for j in range(n):
        y[r, j] = (x[r, j] - m) * iv * scale[j] + bias[j]


layer_norm_rows, layer_norm_rows_par = twins(
    "layer_norm_rows(x, scale, bias, eps, y, mean, inv)",
    _ln_row,
    items={"r": "x.shape[0]"},
    fastmath=_REASSOC,
    doc="""LayerNorm of each row of ``x`` (R, n), float32 or float64, into ``y`` (same shape and
    type): ``y = (x - mean) / sqrt(var + eps) * scale + bias`` with ``scale``/``bias`` (n,).
    ``mean[r]`` and ``inv[r]`` (arrays of x's type, length R) receive the row mean and
    1 / sqrt(var + eps). Statistics are accumulated in x's type with eight partial sums.""",
)


@njit(inline="always")
def _skip_ln_row(a, b, scale, bias, eps, y, s, write_sum, mean, inv, r):
    # b is (R, n) like a, or (1, n): one row added to every row (BERT's token-type embedding)
    n = a.shape[1]
    rb = r if b.shape[0] > 1 else 0
    for j in range(n):
        y[r, j] = a[r, j] + b[rb, j]
    if write_sum:
        for j in range(n):
            s[r, j] = y[r, j]
    _ln_row(y, scale, bias, eps, y, mean, inv, r)


skip_layer_norm_rows, skip_layer_norm_rows_par = twins(
    "skip_layer_norm_rows(a, b, scale, bias, eps, y, s, write_sum, mean, inv)",
    _skip_ln_row,
    items={"r": "a.shape[0]"},
    fastmath=_REASSOC,
    doc="""``s = a + b`` (``a`` (R, n), ``b`` (R, n) or one row (1, n) added to every row) then
    :func:`layer_norm_rows` of ``s`` into ``y``, one row at a time while the row is in L1. The
    sum is also stored into ``s`` when ``write_sum``.""",
)


@njit(inline="always")
def _rms_row(x, scale, eps, y, inv, r):
    n = x.shape[1]
    inv[r] = 0.0
    z = inv[r]
    inv[r] = 1.0 / math.sqrt(_row_sq_dev(x, r, z, z) / n + eps)
    iv = inv[r]
    for j in range(n):
        y[r, j] = x[r, j] * iv * scale[j]


rms_norm_rows, rms_norm_rows_par = twins(
    "rms_norm_rows(x, scale, eps, y, inv)",
    _rms_row,
    items={"r": "x.shape[0]"},
    fastmath=_REASSOC,
    doc="""RMSNorm of each row of ``x`` (R, n): ``y = x / sqrt(mean(x^2) + eps) * scale``;
    ``inv[r]`` (x's type) receives 1 / sqrt(mean(x^2) + eps).""",
)
