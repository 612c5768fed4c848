"""Kernels of miscellaneous operators (CumProd, ReverseSequence, LpNormalization,
NegativeLogLikelihoodLoss, TensorScatter, Multinomial sampling).

Every kernel works on a canonical low-rank contiguous view prepared by the caller
(``onnxjit/ops/misc.py``), so one compiled specialisation per dtype serves every input rank and
size. Outputs are written into arrays the caller allocates.
"""

from __future__ import annotations

import numpy as np

from .._jit import njit


@njit
def cumprod3(x, exclusive, reverse, out):
    """Cumulative product along axis 1 of ``x (outer, n, inner)`` into ``out`` (same shape).

    ``exclusive`` shifts by one (the first product is 1); ``reverse`` runs from the end. The
    running products live in a row of ``inner`` values so the innermost loop is contiguous.
    """
    outer, n, inner = x.shape
    acc = np.empty(inner, dtype=x.dtype)
    for o in range(outer):
        for i in range(inner):
            acc[i] = 1
        for t in range(n):
            j = n - 1 - t if reverse else t
            if exclusive:
                for i in range(inner):
                    out[o, j, i] = acc[i]
                    acc[i] = acc[i] * x[o, j, i]
            else:
                for i in range(inner):
                    acc[i] = acc[i] * x[o, j, i]
                    out[o, j, i] = acc[i]


@njit
def reverse_sequence3(x, lens, batch_first, out):
    """Reverse the first ``lens[b]`` time steps of every batch entry.

    ``x`` is ``(d0, d1, inner)`` where (d0, d1) is (batch, time) when ``batch_first`` else
    (time, batch); ``lens`` holds int64 lengths already checked to lie in ``[0, time]``.
    """
    d0, d1, inner = x.shape
    n_batch = d0 if batch_first else d1
    n_time = d1 if batch_first else d0
    for b in range(n_batch):
        length = lens[b]
        for t in range(n_time):
            src = length - 1 - t if t < length else t
            for i in range(inner):
                if batch_first:
                    out[b, t, i] = x[b, src, i]
                else:
                    out[t, b, i] = x[src, b, i]


@njit
def lp_normalize3(x, p, out):
    """``x / ||x||_p`` along axis 1 of ``x (outer, n, inner)`` for p in {1, 2}; a zero norm
    gives zeros. Norms accumulate in float64."""
    outer, n, inner = x.shape
    norm = np.empty(inner, dtype=np.float64)
    for o in range(outer):
        for i in range(inner):
            norm[i] = 0.0
        for j in range(n):
            for i in range(inner):
                v = np.float64(x[o, j, i])
                norm[i] += abs(v) if p == 1 else v * v
        if p == 2:
            for i in range(inner):
                norm[i] = np.sqrt(norm[i])
        for j in range(n):
            for i in range(inner):
                out[o, j, i] = x[o, j, i] / norm[i] if norm[i] != 0.0 else 0.0


@njit
def nll_loss3(x, target, weight, use_weight, ignore_index, loss, wsum):
    """Per-element negative log-likelihood of ``x (N, C, D)`` for ``target (N, D)``.

    ``loss[n, d] = -x[n, target, d] * w[target]`` (``w`` = 1 without weights), 0 where the
    target equals ``ignore_index``; ``wsum[0]`` receives the sum of the weights of the counted
    elements (the 'mean' denominator). Targets are validated by the caller.
    """
    n_batch, _, d = x.shape
    total = 0.0
    for b in range(n_batch):
        for k in range(d):
            c = target[b, k]
            if c == ignore_index:
                loss[b, k] = 0
                continue
            w = weight[c] if use_weight else 1
            loss[b, k] = -x[b, c, k] * w
            total += w
    wsum[0] = total


@njit
def tensor_scatter4(update, write_indices, circular, out):
    """Write ``update (B, P, s, inner)`` into ``out (B, P, S, inner)`` at sequence positions
    ``write_indices[b] + t`` (modulo S when ``circular``); positions were checked by the caller
    for the linear mode."""
    n_batch, n_prefix, s, inner = update.shape
    n_seq = out.shape[2]
    for b in range(n_batch):
        start = write_indices[b]
        for p in range(n_prefix):
            for t in range(s):
                j = start + t
                if circular:
                    j = j % n_seq
                for i in range(inner):
                    out[b, p, j, i] = update[b, p, t, i]


@njit
def multinomial_draw(cdf, u, out):
    """Class index per uniform draw: the first ``c`` with ``u[b, s] < cdf[b, c]``.

    ``cdf (B, C)`` holds unnormalised cumulative weights, ``u (B, S)`` uniforms already scaled
    by each row's total; binary search per draw.
    """
    n_batch, n_class = cdf.shape
    n_samples = u.shape[1]
    for b in range(n_batch):
        for s in range(n_samples):
            v = u[b, s]
            lo, hi = 0, n_class - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if v < cdf[b, mid]:
                    hi = mid
                else:
                    lo = mid + 1
            out[b, s] = lo
