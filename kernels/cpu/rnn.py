"""Gate kernels of the recurrent operators (LSTM, GRU, RNN), one time step at a time.

The host side (``onnxjit/ops/rnn.py``) does the contractions with BLAS: the input projection
``X @ W^T`` for every time step at once, and ``H @ R^T`` once per step. These kernels then apply
biases already folded into the projection, peepholes, clipping and the activation functions
elementwise over ``(batch, hidden)`` and update the state in place.

Activation functions are selected at run time by an integer code (see ``ACT_*``) with their
``alpha``/``beta`` parameters, so one compiled kernel per dtype serves every activation choice.
A batch row whose ``active`` flag is 0 (past its ``sequence_lens`` entry) keeps its state and
gets zeros in the step output.
"""

from __future__ import annotations

import math

from .._jit import njit

ACT_SIGMOID = 0
ACT_TANH = 1
ACT_RELU = 2
ACT_HARDSIGMOID = 3
ACT_AFFINE = 4
ACT_LEAKYRELU = 5
ACT_THRESHOLDEDRELU = 6
ACT_SCALEDTANH = 7
ACT_ELU = 8
ACT_SOFTSIGN = 9
ACT_SOFTPLUS = 10


@njit
def activation(x, code, alpha, beta):
    """Apply the activation function ``code`` with parameters ``alpha``/``beta`` to scalar x."""
    if code == 0:
        if x >= 0:
            return 1.0 / (1.0 + math.exp(-x))
        e = math.exp(x)
        return e / (1.0 + e)
    if code == 1:
        return math.tanh(x)
    if code == 2:
        return x if x > 0 else 0.0 * x
    if code == 3:
        return min(max(alpha * x + beta, 0.0), 1.0)
    if code == 4:
        return alpha * x + beta
    if code == 5:
        return x if x >= 0 else alpha * x
    if code == 6:
        return x if x > alpha else 0.0 * x
    if code == 7:
        return alpha * math.tanh(beta * x)
    if code == 8:
        return x if x >= 0 else alpha * (math.exp(x) - 1.0)
    if code == 9:
        return x / (1.0 + abs(x))
    # Softplus, written to avoid overflow of exp for large x.
    if x > 0:
        return x + math.log1p(math.exp(-x))
    return math.log1p(math.exp(x))


@njit
def _clip(x, clip):
    # clip <= 0 means "no clipping" (the attribute is absent).
    if clip > 0:
        if x > clip:
            return clip
        if x < -clip:
            return -clip
    return x


@njit
def lstm_step(
    gx, gh, p, c, h, active, clip, input_forget,
    f, fa, fb, g, ga, gb, hc, ha, hb, y,
):  # fmt: skip
    """One LSTM step. gx, gh: (B, 4H) in gate order i, o, f, c; p: (3H,) peepholes i, o, f.

    ``gx`` holds ``X_t @ W^T + Wb + Rb``, ``gh`` holds ``H_{t-1} @ R^T``. ``c`` and ``h`` (B, H)
    are updated in place for active rows; ``y`` (B, H) receives the new hidden state (zeros for
    inactive rows).
    """
    nb, nh = h.shape
    for b in range(nb):
        if not active[b]:
            for j in range(nh):
                y[b, j] = 0
            continue
        for j in range(nh):
            c_prev = c[b, j]
            zi = _clip(gx[b, j] + gh[b, j] + p[j] * c_prev, clip)
            it = activation(zi, f, fa, fb)
            if input_forget:
                ft = 1.0 - it
            else:
                zf = _clip(gx[b, 2 * nh + j] + gh[b, 2 * nh + j] + p[2 * nh + j] * c_prev, clip)
                ft = activation(zf, f, fa, fb)
            zc = _clip(gx[b, 3 * nh + j] + gh[b, 3 * nh + j], clip)
            ct = activation(zc, g, ga, gb)
            c_new = ft * c_prev + it * ct
            zo = _clip(gx[b, nh + j] + gh[b, nh + j] + p[nh + j] * c_new, clip)
            ot = activation(zo, f, fa, fb)
            h_new = ot * activation(c_new, hc, ha, hb)
            c[b, j] = c_new
            h[b, j] = h_new
            y[b, j] = h_new


@njit
def gru_step_lbr(gx, gh, rbh, h, active, clip, f, fa, fb, g, ga, gb, y):
    """One GRU step with linear_before_reset=1. gx, gh: (B, 3H) in gate order z, r, h.

    ``gx`` holds ``X_t @ W^T + Wb`` plus ``Rb`` for the z and r gates; ``gh`` holds
    ``H_{t-1} @ R^T``; ``rbh`` (H,) is the recurrence bias of the h gate, which the reset gate
    scales together with ``H_{t-1} @ Rh^T``.
    """
    nb, nh = h.shape
    for b in range(nb):
        if not active[b]:
            for j in range(nh):
                y[b, j] = 0
            continue
        for j in range(nh):
            zt = activation(_clip(gx[b, j] + gh[b, j], clip), f, fa, fb)
            rt = activation(_clip(gx[b, nh + j] + gh[b, nh + j], clip), f, fa, fb)
            zh = _clip(gx[b, 2 * nh + j] + rt * (gh[b, 2 * nh + j] + rbh[j]), clip)
            ht = activation(zh, g, ga, gb)
            h_new = (1.0 - zt) * ht + zt * h[b, j]
            h[b, j] = h_new
            y[b, j] = h_new


@njit
def gru_gates_zr(gx, gh, h, clip, f, fa, fb, z, rh):
    """First half of a GRU step with linear_before_reset=0.

    gx: (B, 3H) with every bias folded in; gh: (B, 2H) = ``H_{t-1} @ R[z,r]^T``. Writes the
    update gate to ``z`` and ``r * H_{t-1}`` to ``rh`` (both (B, H)); the host then computes
    ``rh @ Rh^T`` with BLAS and calls :func:`gru_finish`.
    """
    nb, nh = h.shape
    for b in range(nb):
        for j in range(nh):
            z[b, j] = activation(_clip(gx[b, j] + gh[b, j], clip), f, fa, fb)
            rt = activation(_clip(gx[b, nh + j] + gh[b, nh + j], clip), f, fa, fb)
            rh[b, j] = rt * h[b, j]


@njit
def gru_finish(gx, ghh, z, h, active, clip, g, ga, gb, y):
    """Second half of a GRU step with linear_before_reset=0; ghh (B, H) = ``rh @ Rh^T``."""
    nb, nh = h.shape
    for b in range(nb):
        if not active[b]:
            for j in range(nh):
                y[b, j] = 0
            continue
        for j in range(nh):
            ht = activation(_clip(gx[b, 2 * nh + j] + ghh[b, j], clip), g, ga, gb)
            zt = z[b, j]
            h_new = (1.0 - zt) * ht + zt * h[b, j]
            h[b, j] = h_new
            y[b, j] = h_new


@njit
def rnn_step(gx, gh, h, active, clip, f, fa, fb, y):
    """One simple-RNN step: ``H_t = f(gx + gh)``; gx, gh, h, y: (B, H)."""
    nb, nh = h.shape
    for b in range(nb):
        if not active[b]:
            for j in range(nh):
                y[b, j] = 0
            continue
        for j in range(nh):
            h_new = activation(_clip(gx[b, j] + gh[b, j], clip), f, fa, fb)
            h[b, j] = h_new
            y[b, j] = h_new
