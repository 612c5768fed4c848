"""Softmax-family and LRN kernels (CPU, Numba).

Every kernel works on a canonical low-rank view so that one compiled specialisation serves any
input rank: softmax over ``(outer, n, inner)`` (the reduced axis in the middle), LRN over
``(N, C, inner)``. Sizes are run-time values; only dtype and rank drive compilation.
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from .._jit import njit, pjit


@njit(inline="always")
def _softmax_block(x, y, o, log):
    # One outer slice: x[o] is (n, inner). Running max and sum are kept per inner column so
    # that the loops walk memory contiguously (inner is the fastest-moving index).
    n = x.shape[1]
    inner = x.shape[2]
    mx = np.empty(inner, x.dtype)
    sm = np.zeros(inner, np.float64)
    for i in range(inner):
        mx[i] = -np.inf
    for k in range(n):
        for i in range(inner):
            v = x[o, k, i]
            if v > mx[i]:
                mx[i] = v
    for k in range(n):
        for i in range(inner):
            e = math.exp(x[o, k, i] - mx[i])
            sm[i] += e
            if not log:
                y[o, k, i] = e
    if log:
        for i in range(inner):
            sm[i] = math.log(sm[i])
        for k in range(n):
            for i in range(inner):
                y[o, k, i] = x[o, k, i] - mx[i] - sm[i]
    else:
        for i in range(inner):
            sm[i] = 1.0 / sm[i]
        for k in range(n):
            for i in range(inner):
                y[o, k, i] = y[o, k, i] * sm[i]


@njit
def softmax(x, y, log):
    """Softmax (``log=False``) or log-softmax (``log=True``) of ``x`` (outer, n, inner) over
    axis 1, written into ``y`` (same shape and dtype). Numerically stable (subtracts the max)."""
    for o in range(x.shape[0]):
        _softmax_block(x, y, o, log)


@pjit
def softmax_par(x, y, log):
    """Parallel twin of :func:`softmax` (threads over the outer axis)."""
    for o in prange(x.shape[0]):
        _softmax_block(x, y, o, log)


@njit
def lrn(x, y, size, alpha, beta, bias):
    """Local response normalisation across channels of ``x`` (N, C, inner) into ``y``.

    ``y[n, c] = x[n, c] / (bias + alpha / size * sum(x[n, j] ** 2)) ** beta`` where ``j`` runs
    over ``c - floor((size - 1) / 2) .. c + ceil((size - 1) / 2)`` clipped to the channels.
    """
    N, C, S = x.shape
    lo = (size - 1) // 2
    hi = size - 1 - lo
    acc = np.empty(S, np.float64)
    scale = alpha / size
    for n in range(N):
        for c in range(C):
            for s in range(S):
                acc[s] = 0.0
            for j in range(max(0, c - lo), min(C, c + hi + 1)):
                for s in range(S):
                    v = x[n, j, s]
                    acc[s] += v * v
            for s in range(S):
                y[n, c, s] = x[n, c, s] / (bias + scale * acc[s]) ** beta
