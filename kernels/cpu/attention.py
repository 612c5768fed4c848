"""Attention-family kernels: masked softmax rows, linear-attention recurrences, causal conv.

Contractions (Q K^T, P V) are BLAS calls made by the caller; these kernels do the per-row work
that numpy cannot do in one pass. Narrow float types (float16, bfloat16) are computed in float32;
``mode`` arguments say to which narrow type an intermediate is rounded (0: none, 1: float16,
2: bfloat16) so that results match an evaluation carried out in the narrow type step by step,
which is how the spec's "softmax in the precision of its input" reads for those types.
"""

from __future__ import annotations

import math

import numpy as np

from .._jit import njit
from .runtime.twins import twins

_F16_MAX_ROUNDED = 65520.0  # the smallest magnitude that float16 rounds to infinity


# Called, not inlined: its frexp/ldexp rounding inlined at every use made softmax_rows slow to
# compile (a user's first Attention run; bench/NOTES.md, issue 43 third session); the rows that
# round (float16/bfloat16 emulation) call it, the others skip it.
@njit
def _rnd(x, mode):
    """Round ``x`` to float16 (mode 1) or bfloat16 (mode 2), half to even; mode 0: unchanged."""
    if mode == 0 or not math.isfinite(x) or x == 0.0:
        return x
    v = float(x)
    a = abs(v)
    if mode == 1:
        if a >= _F16_MAX_ROUNDED:
            return x * np.inf
        if a < 6.103515625e-05:  # below 2**-14: float16 subnormals, a fixed step of 2**-24
            r = np.rint(v * 16777216.0) / 16777216.0
            return type(x)(r)
        bits = 11
    else:
        bits = 8
    m, e = math.frexp(v)
    r = math.ldexp(np.rint(math.ldexp(m, bits)), e - bits)
    return type(x)(r)


@njit
def round_array(a, mode):
    """Round every element of a contiguous 1-D array in place (see :func:`_rnd`)."""
    for i in range(a.size):
        a[i] = _rnd(a[i], mode)


@njit(inline="always")
def _softmax_row_plain(s, bias, r, br):
    """:func:`_softmax_row` without rounding, softcap or debug output: ``s[r] =
    softmax(s[r] + bias[br])``, a zero row where every key is masked."""
    n = s.shape[1]
    m = -np.inf
    bmax = -np.inf
    for j in range(n):
        b = bias[br, j]
        bmax = max(bmax, b)
        x = s[r, j] + b
        s[r, j] = x
        m = max(m, x)
    if bmax == -np.inf:
        for j in range(n):
            s[r, j] = 0.0
        return
    if m == -np.inf:
        m = 0.0
    tot = 0.0
    for j in range(n):
        e = math.exp(s[r, j] - m)
        s[r, j] = e
        tot += e
    tot = s.dtype.type(tot)
    if tot == 0.0:
        tot = 1.0
    for j in range(n):
        s[r, j] = s[r, j] / tot


@njit(inline="always")
def _softmax_row(s, bias, qk, r, bias_of_row, softcap, tmode, smode, qk_mode):
    """One attention row: softcap, bias, softmax with the fully-masked-row guard.

    ``s[r]`` holds the raw scores and receives the probabilities; ``bias[bias_of_row[r]]`` is
    the additive bias row; ``qk[r]`` receives the optional debug output chosen by ``qk_mode``
    (0 raw, 1 after softcap, 2 after bias, 3 probabilities) when ``qk_mode >= 0``.
    """
    if tmode == 0 and smode == 0 and softcap <= 0 and qk_mode < 0:
        _softmax_row_plain(s, bias, r, bias_of_row[r])
        return
    br = bias_of_row[r]
    n = s.shape[1]
    m = -np.inf
    bmax = -np.inf
    for j in range(n):
        x = _rnd(s[r, j], tmode)
        if qk_mode == 0:
            qk[r, j] = x
        if softcap > 0:
            x = _rnd(x / softcap, tmode)
            x = _rnd(math.tanh(x), tmode)
            x = _rnd(x * softcap, tmode)
        if qk_mode == 1:
            qk[r, j] = x
        b = bias[br, j]
        if b > bmax:
            bmax = b
        x = _rnd(x + b, tmode)
        if qk_mode == 2:
            qk[r, j] = x
        x = _rnd(x, smode)
        s[r, j] = x
        if x > m:
            m = x
    if bmax == -np.inf:
        # No key may be attended: a zero row, never NaN.
        for j in range(n):
            s[r, j] = 0.0
            if qk_mode == 3:
                qk[r, j] = 0.0
        return
    if m == -np.inf:
        m = 0.0
    tot = 0.0
    for j in range(n):
        e = _rnd(math.exp(_rnd(s[r, j] - m, smode)), smode)
        s[r, j] = e
        if smode == 2:
            # bfloat16 sums accumulate in bfloat16 (sequentially, as a bfloat16 reduction does)
            tot = _rnd(s.dtype.type(tot + e), smode)
        else:
            tot += e
    tot = _rnd(s.dtype.type(tot), smode)
    if tot == 0.0:
        tot = 1.0
    for j in range(n):
        p = _rnd(_rnd(s[r, j] / tot, smode), tmode)
        s[r, j] = p
        if qk_mode == 3:
            qk[r, j] = p


softmax_rows, softmax_rows_par = twins(
    "softmax_rows(s, bias, bias_of_row, qk, softcap, tmode, smode, qk_mode)",
    _softmax_row,
    items={"r": "s.shape[0]"},
    doc="Masked softmax over the rows of ``s`` (rows, n); row ``r`` uses ``bias[bias_of_row[r]]``.",
)


@njit
def linear_attention(q, k, v, state, decay, beta, group, rule, scale, out):
    """Sequential linear-attention recurrence.

    q (B, T, Hq, dk), k (B, T, Hkv, dk), v (B, T, Hkv, dv), state (B, Hkv, dk, dv) updated in
    place, decay (B, T, Hkv, dk) (a per-head decay broadcast over dk), beta (B, T, Hkv),
    out (B, T, Hq, dv). ``rule``: 0 linear, 1 gated, 2 delta, 3 gated_delta. Query head ``h``
    reads key/value head ``h // group``.
    """
    nb, nt, hkv, dk = k.shape
    dv = v.shape[3]
    hq = q.shape[2]
    kv = np.empty(dv, dtype=state.dtype)
    for b in range(nb):
        for t in range(nt):
            for g in range(hkv):
                st = state[b, g]
                if rule == 1 or rule == 3:
                    for a in range(dk):
                        w = math.exp(decay[b, t, g, a])
                        for c in range(dv):
                            st[a, c] *= w
                if rule >= 2:
                    # delta: v - S^T k with the (decayed) state
                    for c in range(dv):
                        acc = 0.0
                        for a in range(dk):
                            acc += st[a, c] * k[b, t, g, a]
                        kv[c] = beta[b, t, g] * (v[b, t, g, c] - acc)
                else:
                    for c in range(dv):
                        kv[c] = v[b, t, g, c]
                for a in range(dk):
                    ka = k[b, t, g, a]
                    for c in range(dv):
                        st[a, c] += ka * kv[c]
            for h in range(hq):
                st = state[b, h // group]
                for c in range(dv):
                    acc = 0.0
                    for a in range(dk):
                        acc += q[b, t, h, a] * st[a, c]
                    out[b, t, h, c] = scale * acc


@njit
def causal_conv(x, w, bias, state, silu, mode, out, new_state):
    """Depthwise causal conv over ``concat(state, x)`` on the last axis.

    x (B, C, L), w (C, k), bias (C,), state (B, C, k-1), out (B, C, L),
    new_state (B, C, k-1) = the last k-1 positions of the concatenation. The convolution sum
    is rounded to the input's narrow type (``mode``) before the optional SiLU.
    """
    nb, nc, n = x.shape
    kw = w.shape[1]
    p = kw - 1
    for b in range(nb):
        for c in range(nc):
            for t in range(n):
                acc = bias[c]
                for j in range(kw):
                    pos = t + j  # index into concat(state, x)
                    if pos < p:
                        acc += w[c, j] * state[b, c, pos]
                    else:
                        acc += w[c, j] * x[b, c, pos - p]
                if silu:
                    acc = _rnd(acc, mode)
                    acc = acc / (1.0 + math.exp(-acc))
                out[b, c, t] = acc
            for j in range(p):
                pos = n + j  # last p positions of the (p + n)-long concatenation
                if pos < p:
                    new_state[b, c, j] = state[b, c, pos]
                else:
                    new_state[b, c, j] = x[b, c, pos - p]


@njit
def rotary(x, cos, sin, pos, rot, interleaved, mode, out):
    """Rotary embedding on x (B, H, S, D) into out (same shape).

    cos/sin (P, rot/2) are indexed by pos (B, S); the first ``rot`` features of each head are
    rotated as pairs (i, i + rot/2), or (2i, 2i + 1) when ``interleaved``; the rest are copied.
    Products and sums are rounded to the narrow type ``mode`` as an evaluation in that type does.
    """
    nb, nh, ns, nd = x.shape
    half = rot // 2
    for b in range(nb):
        for h in range(nh):
            for s in range(ns):
                p = pos[b, s]
                for i in range(half):
                    if interleaved:
                        i1, i2 = 2 * i, 2 * i + 1
                    else:
                        i1, i2 = i, i + half
                    c = cos[p, i]
                    sn = sin[p, i]
                    x1 = x[b, h, s, i1]
                    x2 = x[b, h, s, i2]
                    out[b, h, s, i1] = _rnd(_rnd(c * x1, mode) - _rnd(sn * x2, mode), mode)
                    out[b, h, s, i2] = _rnd(_rnd(sn * x1, mode) + _rnd(c * x2, mode), mode)
                for j in range(rot, nd):
                    out[b, h, s, j] = x[b, h, s, j]
