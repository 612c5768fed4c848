"""The recurrent operators (LSTM, GRU, RNN): whole sequences in one kernel call.

The host side (``onnxjit/ops/rnn.py``) computes the input projection of every time step and
every direction with one GEMM, ``XW = X @ [W_0; W_1]^T + bias`` (the biases folded in as the
operator allows, see below), into a ``(T * B, D * G * H)`` array (``G`` gates, ``D``
directions, ``H`` hidden units; row ``t * B + b`` for layout 0, ``b * T + t`` for layout 1).
:func:`sequence` then runs the time steps: per step one GEMM ``H_{t-1} @ R^T`` (R^T packed in
the micro-kernel's panels, :func:`onnxjit.kernels.cpu.blas.pack_b`) and one pass over the gates
that applies peepholes, clip and the activations and updates the state, for a block of batch
rows of one direction (an *item*). Items are independent (directions, and batch rows, never
exchange values), so the pool twin :func:`sequence_par` runs them on several threads with no
synchronisation between time steps.

What ``XW`` holds per kind: LSTM ``Wb + Rb``; GRU with ``linear_before_reset`` ``Wb`` plus
``Rb`` of the z and r gates (``Rb`` of the h gate, ``rbh``, is scaled by the reset gate with
``H @ Rh^T``); GRU without it and RNN ``Wb + Rb``. GRU without ``linear_before_reset`` takes
two products a step: ``H @ [Rz; Rr]^T`` (``rp``), then ``(r * H) @ Rh^T`` (``rp2``).

Sequence lengths: row ``b`` runs ``lens[b]`` steps. The reverse direction reads time
``lens[b] - 1 - s`` at step ``s`` and writes its output there; steps past a row's length leave
its state as it is and write zeros at time ``s`` of ``Y`` (so every position at or past the
row's length is zero in both directions). Final states of rows of length 0 are zeros (what
onnxruntime reports; the spec leaves it open).

Activation functions are run-time codes (``ACT_*``) with their ``alpha``/``beta``; each is
applied to a span of gate values by :func:`_activate`, whose switch is outside its loops so that
every loop vectorises (sigmoid and tanh are :mod:`onnxjit.kernels.vecmath`'s).
"""

from __future__ import annotations

import math

import numpy as np

from .._jit import njit
from ..vecmath import vsigmoid, vtanh
from .blas import block_geometry
from .runtime.twins import twins
from .ukernel import ukernel

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

KIND_LSTM = 0
KIND_GRU = 1
KIND_RNN = 2


@njit(fma=True)
def _activate(v, lo, hi, code, alpha, beta):
    """``v[lo:hi] = act(v[lo:hi])`` in place for activation ``code`` with ``alpha``/``beta``
    (float64, cast to ``v``'s type). Called, not inlined: one compiled copy per row type."""
    t = v.dtype.type
    a, b = t(alpha), t(beta)
    zero, one = t(0), t(1)
    if code == ACT_SIGMOID:
        for j in range(lo, hi):
            v[j] = vsigmoid(v[j])
    elif code == ACT_TANH:
        for j in range(lo, hi):
            v[j] = vtanh(v[j])
    elif code == ACT_RELU:
        for j in range(lo, hi):
            x = v[j]
            v[j] = zero if x < zero else x + zero
    elif code == ACT_HARDSIGMOID:
        for j in range(lo, hi):
            x = a * v[j] + b
            v[j] = zero if x < zero else (one if x > one else x)
    elif code == ACT_AFFINE:
        for j in range(lo, hi):
            v[j] = a * v[j] + b
    elif code == ACT_LEAKYRELU:
        for j in range(lo, hi):
            x = v[j]
            v[j] = a * x if x < zero else x
    elif code == ACT_THRESHOLDEDRELU:
        for j in range(lo, hi):
            x = v[j]
            v[j] = x if x > a else zero
    elif code == ACT_SCALEDTANH:
        for j in range(lo, hi):
            v[j] = a * vtanh(b * v[j])
    elif code == ACT_ELU:
        for j in range(lo, hi):
            x = v[j]
            v[j] = x if x >= zero else a * t(math.expm1(x))
    elif code == ACT_SOFTSIGN:
        for j in range(lo, hi):
            x = v[j]
            v[j] = x / (one + abs(x))
    else:  # softplus, without overflow of exp for large x
        for j in range(lo, hi):
            x = v[j]
            if x > zero:
                v[j] = x + t(math.log1p(math.exp(-x)))
            else:
                v[j] = t(math.log1p(math.exp(x)))


@njit(inline="always")
def _clip(v, lo, hi, clip):
    """Clamp ``v[lo:hi]`` to ``[-clip, clip]`` (``clip <= 0``: no clipping)."""
    if clip > 0:
        c = v.dtype.type(clip)
        for j in range(lo, hi):
            x = v[j]
            v[j] = -c if x < -c else (c if x > c else x)


@njit(fma=True)
def _lstm_row(z, xr, gr, c, h, p, has_p, clip, input_forget, acts, par, d, nh):
    """One LSTM step of one batch row. ``z`` (4H) scratch; ``xr`` the row's projection, ``gr``
    its ``H @ R^T`` (gate order i, o, f, c); ``c``, ``h`` (H) updated in place; ``p`` (3H)
    peepholes i, o, f. Writes the new hidden state into ``h``."""
    for j in range(4 * nh):
        z[j] = xr[j] + gr[j]
    if has_p:
        for j in range(nh):
            z[j] += p[j] * c[j]
            z[2 * nh + j] += p[2 * nh + j] * c[j]
    # the o gate is clipped once its peephole term (of the new cell state) is in
    _clip(z, 0, nh, clip)
    _clip(z, 2 * nh, 4 * nh, clip)
    f, g, hc = acts[d, 0], acts[d, 1], acts[d, 2]
    _activate(z, 0, nh, f, par[d, 0, 0], par[d, 0, 1])
    if input_forget:
        one = z.dtype.type(1)
        for j in range(nh):
            z[2 * nh + j] = one - z[j]
    else:
        _activate(z, 2 * nh, 3 * nh, f, par[d, 0, 0], par[d, 0, 1])
    _activate(z, 3 * nh, 4 * nh, g, par[d, 1, 0], par[d, 1, 1])
    for j in range(nh):
        c[j] = z[2 * nh + j] * c[j] + z[j] * z[3 * nh + j]
    if has_p:
        for j in range(nh):
            z[nh + j] += p[nh + j] * c[j]
    _clip(z, nh, 2 * nh, clip)
    _activate(z, nh, 2 * nh, f, par[d, 0, 0], par[d, 0, 1])
    # h = o * act_h(c): act_h applied to a copy of c in the i gate's slot (no longer needed)
    for j in range(nh):
        z[j] = c[j]
    _activate(z, 0, nh, hc, par[d, 2, 0], par[d, 2, 1])
    for j in range(nh):
        h[j] = z[nh + j] * z[j]


@njit(fma=True)
def _gru_zr_row(z, xr, gr, clip, acts, par, d, nh):
    """The z and r gates of one GRU row into ``z[0:2H]`` (``gr`` holds ``H @ [Rz; Rr]^T``)."""
    for j in range(2 * nh):
        z[j] = xr[j] + gr[j]
    _clip(z, 0, 2 * nh, clip)
    _activate(z, 0, 2 * nh, acts[d, 0], par[d, 0, 0], par[d, 0, 1])


@njit(fma=True)
def _gru_finish_row(z, h, clip, acts, par, d, nh):
    """``h = (1 - z) * g(z[2H:3H]) + z * h`` for one GRU row whose candidate input is in
    ``z[2H:3H]``."""
    _clip(z, 2 * nh, 3 * nh, clip)
    _activate(z, 2 * nh, 3 * nh, acts[d, 1], par[d, 1, 0], par[d, 1, 1])
    one = z.dtype.type(1)
    for j in range(nh):
        zt = z[j]
        h[j] = (one - zt) * z[2 * nh + j] + zt * h[j]


@njit(inline="always")
def _cl(x, c):
    """``x`` clamped to ``[-c, c]`` (NaN passes)."""
    return -c if x < -c else (c if x > c else x)


@njit(fma=True)
def _lstm_row_std(xr, gr, c, h, p, clip, input_forget, nh):
    """:func:`_lstm_row` for the default activations (sigmoid, tanh, tanh) as one loop over
    the hidden units, which vectorises; ``p`` (3H) holds zeros where there are no peepholes
    and ``clip`` is infinite where there is no clipping. The row functions are called, not
    inlined: inlined into the sequence kernel this loop did not vectorise (8x the time)."""
    one = c.dtype.type(1)
    for j in range(nh):
        cp = c[j]
        it = vsigmoid(_cl(xr[j] + gr[j] + p[j] * cp, clip))
        if input_forget:
            ft = one - it
        else:
            ft = vsigmoid(_cl(xr[2 * nh + j] + gr[2 * nh + j] + p[2 * nh + j] * cp, clip))
        gt = vtanh(_cl(xr[3 * nh + j] + gr[3 * nh + j], clip))
        cn = ft * cp + it * gt
        ot = vsigmoid(_cl(xr[nh + j] + gr[nh + j] + p[nh + j] * cn, clip))
        c[j] = cn
        h[j] = ot * vtanh(cn)


@njit(fma=True)
def _rnn_row_std(xr, gr, h, clip, nh):
    """One simple-RNN row with tanh: ``h = tanh(clip(xr + gr))``."""
    for j in range(nh):
        h[j] = vtanh(_cl(xr[j] + gr[j], clip))


@njit(fma=True)
def _gru_lbr_row_std(xr, gr, bh, h, clip, nh):
    """One GRU row with linear_before_reset and the default activations (sigmoid, tanh)."""
    one = h.dtype.type(1)
    for j in range(nh):
        zt = vsigmoid(_cl(xr[j] + gr[j], clip))
        rt = vsigmoid(_cl(xr[nh + j] + gr[nh + j], clip))
        nt = vtanh(_cl(xr[2 * nh + j] + rt * (gr[2 * nh + j] + bh[j]), clip))
        h[j] = (one - zt) * nt + zt * h[j]


@njit(fma=True)
def _gru_zr_row_std(xr, gr, h, rr, clip, nh):
    """First half of a GRU row without linear_before_reset (sigmoid): the z gate into
    ``gr[:H]``, ``r * h`` into ``rr``."""
    for j in range(nh):
        zt = vsigmoid(_cl(xr[j] + gr[j], clip))
        rt = vsigmoid(_cl(xr[nh + j] + gr[nh + j], clip))
        gr[j] = zt
        rr[j] = rt * h[j]


@njit(fma=True)
def _gru_n_row_std(xr, gz, g2r, h, clip, nh):
    """Second half of that row (tanh): ``g2r`` = ``(r * h) @ Rh^T``, ``gz[:H]`` the z gate."""
    one = h.dtype.type(1)
    for j in range(nh):
        zt = gz[j]
        nt = vtanh(_cl(xr[2 * nh + j] + g2r[j], clip))
        h[j] = (one - zt) * nt + zt * h[j]


@njit(fma=True)
def _recur_product(a, b, b_off, c, m, n, k):
    """``C = A @ B`` for the few rows of a recurrent state: ``A`` (m x k) and ``C`` (m x n)
    row-major and flat, ``B`` in :func:`~onnxjit.kernels.cpu.blas.pack_b`'s panels from
    ``b_off``. Each panel of B (k x NR) is read once from memory for all rows, in blocks of
    at most MR rows sized evenly (8 rows: 4 + 4, not 6 + 2); the GEMM's own loop nest sweeps
    all of B once per block of MR rows, which costs a second pass over a B that is out of L2
    (a 256-unit LSTM's 1 MiB R^T)."""
    mr_max, nr_max = block_geometry(c)
    blocks = (m + mr_max - 1) // mr_max
    mb = (m + blocks - 1) // blocks
    one, zero = c.dtype.type(1), c.dtype.type(0)
    for j0 in range(0, n, nr_max):
        nr = min(nr_max, n - j0)
        bo = b_off + (j0 // nr_max) * k * nr_max
        for i0 in range(0, m, mb):
            ukernel(k, a, i0 * k, k, 1, b, bo, nr_max, c, i0 * n + j0, n, min(mb, m - i0), nr,
                    one, zero, False)  # fmt: skip


@njit(inline="always")
def _copy(dst, src, n):
    for j in range(n):
        dst[j] = src[j]


@njit(inline="always")
def _sequence_item(
    kind, xw, rp, rp2, rbh, p, has_p, h0, has_h0, c0, has_c0, lens, layout, reverse,
    clip, input_forget, lbr, acts, par, y, want_y, yh, yc, nh, n_t, nb, rows_per, d, ci,
):  # fmt: skip
    """Direction ``d``, batch rows ``ci * rows_per ..`` of the sequence (see the module
    docstring for the arguments' contents)."""
    r0 = ci * rows_per
    nr = min(rows_per, nb - r0)
    if nr <= 0:
        return
    dt = xw.dtype
    ng = 4 if kind == KIND_LSTM else (3 if kind == KIND_GRU else 1)
    gh = ng * nh
    # GRU without linear_before_reset multiplies H by [Rz; Rr] first, by Rh after the reset
    two = kind == KIND_GRU and lbr == 0
    n_first = 2 * nh if two else gh
    backward = reverse == 1 or d == 1
    # the default activations run as one vectorised loop per row (_*_std)
    if kind == KIND_RNN:
        std = acts[d, 0] == ACT_TANH
    else:
        std = acts[d, 0] == ACT_SIGMOID and acts[d, 1] == ACT_TANH
        if kind == KIND_LSTM:
            std = std and acts[d, 2] == ACT_TANH
    cl = dt.type(clip) if clip > 0 else dt.type(np.inf)
    pz = np.zeros(3 * nh, dt)
    pd = p[d] if has_p else pz
    hb = np.zeros((nr, nh), dt)
    cb = np.zeros((nr, nh), dt)
    for r in range(nr):
        b = r0 + r
        if has_h0:
            _copy(hb[r], h0[d, b] if layout == 0 else h0[b, d], nh)
        if has_c0:
            _copy(cb[r], c0[d, b] if layout == 0 else c0[b, d], nh)
    g = np.empty((nr, n_first), dt)
    rh = np.empty((nr, nh) if two else (0, nh), dt)
    g2 = np.empty((nr, nh) if two else (0, nh), dt)
    z = np.empty(gh, dt)
    hf, gf = hb.reshape(-1), g.reshape(-1)
    rhf, g2f = rh.reshape(-1), g2.reshape(-1)
    zero = dt.type(0)
    p_len = rp.shape[1]
    p2_len = rp2.shape[1]
    rpf, rp2f = rp.reshape(-1), rp2.reshape(-1)
    max_len = 0
    for r in range(nr):
        max_len = max(max_len, lens[r0 + r])
    for s in range(n_t):
        if s < max_len:
            _recur_product(hf, rpf, d * p_len, gf, nr, n_first, nh)
        for r in range(nr):
            b = r0 + r
            ln = lens[b]
            if s >= ln:
                if want_y:
                    yv = y[s, d, b] if layout == 0 else y[b, s, d]
                    for j in range(nh):
                        yv[j] = zero
                continue
            t = ln - 1 - s if backward else s
            xr = xw[t * nb + b if layout == 0 else b * n_t + t, d]
            gr, hr = g[r], hb[r]
            if kind == KIND_LSTM:
                if std:
                    _lstm_row_std(xr, gr, cb[r], hr, pd, cl, input_forget, nh)
                else:
                    _lstm_row(z, xr, gr, cb[r], hr, pd, has_p, clip, input_forget, acts, par,
                              d, nh)  # fmt: skip
            elif kind == KIND_RNN:
                if std:
                    _rnn_row_std(xr, gr, hr, cl, nh)
                else:
                    for j in range(nh):
                        z[j] = xr[j] + gr[j]
                    _clip(z, 0, nh, clip)
                    _activate(z, 0, nh, acts[d, 0], par[d, 0, 0], par[d, 0, 1])
                    _copy(hr, z, nh)
            elif two:
                # the z gate waits in g[r, :H] and r * H in rh until the second product
                rr = rh[r]
                if std:
                    _gru_zr_row_std(xr, gr, hr, rr, cl, nh)
                else:
                    _gru_zr_row(z, xr, gr, clip, acts, par, d, nh)
                    for j in range(nh):
                        gr[j] = z[j]
                        rr[j] = z[nh + j] * hr[j]
            else:  # GRU, linear_before_reset
                bh = rbh[d]
                if std:
                    _gru_lbr_row_std(xr, gr, bh, hr, cl, nh)
                else:
                    _gru_zr_row(z, xr, gr, clip, acts, par, d, nh)
                    for j in range(nh):
                        z[2 * nh + j] = xr[2 * nh + j] + z[nh + j] * (gr[2 * nh + j] + bh[j])
                    _gru_finish_row(z, hr, clip, acts, par, d, nh)
            if want_y and not two:
                _copy(y[t, d, b] if layout == 0 else y[b, t, d], hr, nh)
        if two and s < max_len:
            _recur_product(rhf, rp2f, d * p2_len, g2f, nr, nh, nh)
            for r in range(nr):
                b = r0 + r
                ln = lens[b]
                if s >= ln:
                    continue
                t = ln - 1 - s if backward else s
                xr = xw[t * nb + b if layout == 0 else b * n_t + t, d]
                gr, g2r, hr = g[r], g2[r], hb[r]
                if std:
                    _gru_n_row_std(xr, gr, g2r, hr, cl, nh)
                else:
                    for j in range(nh):
                        z[j] = gr[j]
                        z[2 * nh + j] = xr[2 * nh + j] + g2r[j]
                    _gru_finish_row(z, hr, clip, acts, par, d, nh)
                if want_y:
                    _copy(y[t, d, b] if layout == 0 else y[b, t, d], hr, nh)
    for r in range(nr):
        b = r0 + r
        hv = yh[d, b] if layout == 0 else yh[b, d]
        empty = lens[b] == 0
        for j in range(nh):
            hv[j] = zero if empty else hb[r, j]
        if kind == KIND_LSTM:
            cv = yc[d, b] if layout == 0 else yc[b, d]
            for j in range(nh):
                cv[j] = zero if empty else cb[r, j]


sequence, sequence_par = twins(
    "sequence(kind, xw, rp, rp2, rbh, p, has_p, h0, has_h0, c0, has_c0, lens, layout, reverse,"
    " clip, input_forget, lbr, acts, par, y, want_y, yh, yc, nh, n_t, nb, rows_per, n_chunks)",
    _sequence_item,
    items={"d": "acts.shape[0]", "ci": "n_chunks"},
    fma=True,
    doc="""Run the time steps of a recurrent operator for every direction ``d`` and block
    ``ci`` of ``rows_per`` batch rows (``n_chunks`` blocks).

    ``kind``: ``KIND_LSTM``/``KIND_GRU``/``KIND_RNN``. ``xw`` (T * B, D, G * H): the input
    projection with biases (module docstring). ``rp`` (D, P): per direction ``R^T`` (H x G * H;
    GRU without ``lbr``: ``[Rz; Rr]^T``, H x 2H) in :func:`~onnxjit.kernels.cpu.blas.pack_b`'s
    panels; ``rp2`` (D, P2): ``Rh^T`` so packed (GRU without ``lbr``; else (D, 0)). ``rbh``
    (D, H): the h gate's recurrence bias (GRU with ``lbr``). ``p`` (D, 3H): LSTM peepholes
    (``has_p``). ``h0``, ``c0``: initial states in the layout's shape ((D, B, H), layout 1
    (B, D, H); ``has_h0``/``has_c0``, else empty). ``lens`` (B,) int32 in ``[0, T]``.
    ``reverse``: 0 forward, 1 reverse, 2 bidirectional (direction 1 runs backwards).
    ``clip`` (<= 0: none), ``input_forget`` (LSTM), ``lbr`` (GRU's linear_before_reset).
    ``acts`` (D, 3) int64 activation codes f, g, h and ``par`` (D, 3, 2) float64 their alpha,
    beta. Writes ``y`` ((T, D, B, H), layout 1 (B, T, D, H); only with ``want_y``), ``yh``
    and (LSTM) ``yc`` (the states' shape).""",
)
