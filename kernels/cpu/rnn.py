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
synchronisation between time steps. With fewer items than threads (one sequence, one
direction) :func:`sequence_split_par` shares each step's hidden units between the threads
instead, which then meet at every step; a step's product is a matrix-vector product that
reads all of ``R``, and each thread reads only its slice.

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

from .._jit import njit, pjit
from ..vecmath import vsigmoid, vtanh
from .blas import block_geometry
from .runtime.chunks import MAX_UNITS, claim_phased, finish_phased
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
def _lstm_row(z, xr, gr, c, h, p, has_p, clip, input_forget, acts, par, d, nh, n):
    """The first ``n`` hidden units of one LSTM step of one batch row (the arrays are views
    from the first unit of a slice). ``z`` (4H) scratch; ``xr`` the row's projection, ``gr``
    its ``H @ R^T`` (gate order i, o, f, c, ``nh`` apart); ``c``, ``h`` updated in place;
    ``p`` peepholes i, o, f."""
    for k in range(4):
        for j in range(n):
            z[k * nh + j] = xr[k * nh + j] + gr[k * nh + j]
    if has_p:
        for j in range(n):
            z[j] += p[j] * c[j]
            z[2 * nh + j] += p[2 * nh + j] * c[j]
    # the o gate is clipped once its peephole term (of the new cell state) is in
    _clip(z, 0, n, clip)
    _clip(z, 2 * nh, 2 * nh + n, clip)
    _clip(z, 3 * nh, 3 * nh + n, clip)
    f, g, hc = acts[d, 0], acts[d, 1], acts[d, 2]
    _activate(z, 0, n, f, par[d, 0, 0], par[d, 0, 1])
    if input_forget:
        one = z.dtype.type(1)
        for j in range(n):
            z[2 * nh + j] = one - z[j]
    else:
        _activate(z, 2 * nh, 2 * nh + n, f, par[d, 0, 0], par[d, 0, 1])
    _activate(z, 3 * nh, 3 * nh + n, g, par[d, 1, 0], par[d, 1, 1])
    for j in range(n):
        c[j] = z[2 * nh + j] * c[j] + z[j] * z[3 * nh + j]
    if has_p:
        for j in range(n):
            z[nh + j] += p[nh + j] * c[j]
    _clip(z, nh, nh + n, clip)
    _activate(z, nh, nh + n, f, par[d, 0, 0], par[d, 0, 1])
    # h = o * act_h(c): act_h applied to a copy of c in the i gate's slot (no longer needed)
    for j in range(n):
        z[j] = c[j]
    _activate(z, 0, n, hc, par[d, 2, 0], par[d, 2, 1])
    for j in range(n):
        h[j] = z[nh + j] * z[j]


@njit(fma=True)
def _gru_zr_row(z, xr, gr, clip, acts, par, d, nh, n):
    """The first ``n`` units of the z and r gates of one GRU row into ``z`` (r at ``nh``;
    ``gr`` holds ``H @ [Rz; Rr]^T``)."""
    for k in range(2):
        for j in range(n):
            z[k * nh + j] = xr[k * nh + j] + gr[k * nh + j]
        _clip(z, k * nh, k * nh + n, clip)
        _activate(z, k * nh, k * nh + n, acts[d, 0], par[d, 0, 0], par[d, 0, 1])


@njit(fma=True)
def _gru_finish_row(z, h, clip, acts, par, d, nh, n):
    """``h = (1 - z) * g(z[2H:]) + z * h`` for the first ``n`` units of one GRU row whose
    candidate input is at ``z[2H:]``."""
    _clip(z, 2 * nh, 2 * nh + n, clip)
    _activate(z, 2 * nh, 2 * nh + n, acts[d, 1], par[d, 1, 0], par[d, 1, 1])
    one = z.dtype.type(1)
    for j in range(n):
        zt = z[j]
        h[j] = (one - zt) * z[2 * nh + j] + zt * h[j]


@njit(inline="always")
def _cl(x, c):
    """``x`` clamped to ``[-c, c]`` (NaN passes)."""
    return -c if x < -c else (c if x > c else x)


# The row functions below take views from a slice's first unit, index each gate through a
# view of its own and loop over range(n): an index that Numba cannot prove non-negative
# (lo + j, 2 * nh + j) keeps a wrap-around test in the loop, which then does not vectorise.


@njit(fma=True)
def _lstm_row_std(xr, gr, c, h, p, clip, input_forget, nh, n):
    """:func:`_lstm_row` for the default activations (sigmoid, tanh, tanh) as one loop over
    the hidden units, which vectorises; ``p`` holds zeros where there are no peepholes
    and ``clip`` is infinite where there is no clipping. The row functions are called, not
    inlined: inlined into the sequence kernel this loop did not vectorise (8x the time)."""
    one = c.dtype.type(1)
    xo, xf, xc = xr[nh:], xr[2 * nh :], xr[3 * nh :]
    go, gf, gc = gr[nh:], gr[2 * nh :], gr[3 * nh :]
    po, pf = p[nh:], p[2 * nh :]
    for j in range(n):
        cp = c[j]
        it = vsigmoid(_cl(xr[j] + gr[j] + p[j] * cp, clip))
        if input_forget:
            ft = one - it
        else:
            ft = vsigmoid(_cl(xf[j] + gf[j] + pf[j] * cp, clip))
        gt = vtanh(_cl(xc[j] + gc[j], clip))
        cn = ft * cp + it * gt
        ot = vsigmoid(_cl(xo[j] + go[j] + po[j] * cn, clip))
        c[j] = cn
        h[j] = ot * vtanh(cn)


@njit(fma=True)
def _rnn_row_std(xr, gr, h, clip, n):
    """One simple-RNN row with tanh: ``h = tanh(clip(xr + gr))``."""
    for j in range(n):
        h[j] = vtanh(_cl(xr[j] + gr[j], clip))


@njit(fma=True)
def _gru_lbr_row_std(xr, gr, bh, h, clip, nh, n):
    """One GRU row with linear_before_reset and the default activations (sigmoid, tanh)."""
    one = h.dtype.type(1)
    xr_, xn, gr_, gn = xr[nh:], xr[2 * nh :], gr[nh:], gr[2 * nh :]
    for j in range(n):
        zt = vsigmoid(_cl(xr[j] + gr[j], clip))
        rt = vsigmoid(_cl(xr_[j] + gr_[j], clip))
        nt = vtanh(_cl(xn[j] + rt * (gn[j] + bh[j]), clip))
        h[j] = (one - zt) * nt + zt * h[j]


@njit(fma=True)
def _gru_zr_row_std(xr, gr, h, rr, clip, nh, n):
    """First half of a GRU row without linear_before_reset (sigmoid): the z gate into
    ``gr[:n]``, ``r * h`` into ``rr``."""
    xr_, gr_ = xr[nh:], gr[nh:]
    for j in range(n):
        zt = vsigmoid(_cl(xr[j] + gr[j], clip))
        rt = vsigmoid(_cl(xr_[j] + gr_[j], clip))
        gr[j] = zt
        rr[j] = rt * h[j]


@njit(fma=True)
def _gru_n_row_std(xr, gz, g2r, h, clip, nh, n):
    """Second half of that row (tanh): ``g2r`` = ``(r * h) @ Rh^T``, ``gz[:n]`` the z gate."""
    one = h.dtype.type(1)
    xn = xr[2 * nh :]
    for j in range(n):
        zt = gz[j]
        nt = vtanh(_cl(xn[j] + g2r[j], clip))
        h[j] = (one - zt) * nt + zt * h[j]


@njit(fma=True)
def _recur_product(a, b, b_off, c, m, n, k, j_lo, j_hi):
    """Columns ``j_lo:j_hi`` of ``C = A @ B`` for the few rows of a recurrent state: ``A``
    (m x k) and ``C`` (m x n) row-major and flat, ``B`` in
    :func:`~onnxjit.kernels.cpu.blas.pack_b`'s panels from ``b_off`` (``j_lo`` a multiple of
    their width). Each panel of B (k x NR) is read once from memory for all rows, in blocks
    of at most MR rows sized evenly (8 rows: 4 + 4, not 6 + 2); the GEMM's own loop nest
    sweeps all of B once per block of MR rows, which costs a second pass over a B that is out
    of L2 (a 256-unit LSTM's 1 MiB R^T)."""
    mr_max, nr_max = block_geometry(c)
    blocks = (m + mr_max - 1) // mr_max
    mb = (m + blocks - 1) // blocks
    one, zero = c.dtype.type(1), c.dtype.type(0)
    for j0 in range(j_lo, j_hi, nr_max):
        nr = min(nr_max, j_hi - j0)
        bo = b_off + (j0 // nr_max) * k * nr_max
        for i0 in range(0, m, mb):
            ukernel(k, a, i0 * k, k, 1, b, bo, nr_max, c, i0 * n + j0, n, min(mb, m - i0), nr,
                    one, zero, False)  # fmt: skip


@njit(inline="always")
def _copy(dst, src, lo, hi):
    for j in range(lo, hi):
        dst[j] = src[j]


@njit(inline="always")
def _first_half(
    kind, std, two, xr, gr, c, h, rr, z, pd, has_p, bh, cl, clip, input_forget, acts, par, d,
    nh, lo, hi,
):  # fmt: skip
    """Units ``lo:hi`` of one row once the step's first product ``gr`` is in: the new state
    ``h`` (and LSTM's ``c``) in place; GRU without linear_before_reset (``two``) leaves its z
    gate in ``gr[:H]`` and ``r * h`` in ``rr`` for the second product instead."""
    n = hi - lo
    xr, gr, c, h, rr, pd, bh = xr[lo:], gr[lo:], c[lo:], h[lo:], rr[lo:], pd[lo:], bh[lo:]
    if kind == KIND_LSTM:
        if std:
            _lstm_row_std(xr, gr, c, h, pd, cl, input_forget, nh, n)
        else:
            _lstm_row(z, xr, gr, c, h, pd, has_p, clip, input_forget, acts, par, d, nh, n)
    elif kind == KIND_RNN:
        if std:
            _rnn_row_std(xr, gr, h, cl, n)
        else:
            for j in range(n):
                z[j] = xr[j] + gr[j]
            _clip(z, 0, n, clip)
            _activate(z, 0, n, acts[d, 0], par[d, 0, 0], par[d, 0, 1])
            _copy(h, z, 0, n)
    elif two:
        if std:
            _gru_zr_row_std(xr, gr, h, rr, cl, nh, n)
        else:
            _gru_zr_row(z, xr, gr, clip, acts, par, d, nh, n)
            for j in range(n):
                gr[j] = z[j]
                rr[j] = z[nh + j] * h[j]
    elif std:  # GRU, linear_before_reset
        _gru_lbr_row_std(xr, gr, bh, h, cl, nh, n)
    else:
        _gru_zr_row(z, xr, gr, clip, acts, par, d, nh, n)
        for j in range(n):
            z[2 * nh + j] = xr[2 * nh + j] + z[nh + j] * (gr[2 * nh + j] + bh[j])
        _gru_finish_row(z, h, clip, acts, par, d, nh, n)


@njit(inline="always")
def _second_half(std, xr, gr, g2r, h, z, cl, clip, acts, par, d, nh, lo, hi):
    """GRU without linear_before_reset, units ``lo:hi``: the new state once ``g2r`` holds
    ``(r * h) @ Rh^T`` (``gr[:H]``: the z gate)."""
    n = hi - lo
    xr, gr, g2r, h = xr[lo:], gr[lo:], g2r[lo:], h[lo:]
    if std:
        _gru_n_row_std(xr, gr, g2r, h, cl, nh, n)
    else:
        for j in range(n):
            z[j] = gr[j]
            z[2 * nh + j] = xr[2 * nh + j] + g2r[j]
        _gru_finish_row(z, h, clip, acts, par, d, nh, n)


@njit(inline="always")
def _step_rows(
    second, kind, std, two, xw, g, g2, hin, hout, cb, rh, z, pd, has_p, bh, gates, y, want_y,
    lens, layout, backward, nh, n_t, nb, span, split,
):  # fmt: skip
    """Step ``s`` of rows ``r0 .. r0 + nr`` of direction ``d``, hidden units ``lo:hi``
    (``span``: those six), once
    the step's first product is in ``g`` (``second``: GRU without linear_before_reset, once
    its second is in ``g2``). Row ``r`` of ``hin`` holds row ``r0 + r``'s state before the
    step, of ``hout`` after it: the same array updated in place unless ``split`` (the units
    of one step are shared between threads, which read all of ``hin`` for their products).
    Rows past their length keep their state and get zeros in ``Y`` at time ``s``.
    ``gates``: ``(cl, clip, input_forget, acts, par)``. (Arguments are grouped so that calls
    stay at 30 arguments or fewer, past which CPython passes them as ``*args``, which Numba
    does not inline. Inlined, the kernels compiled faster than calling one shared copy.)"""
    d, s, r0, nr, lo, hi = span
    cl, clip, input_forget, acts, par = gates
    zero = hout.dtype.type(0)
    last = second or not two  # the phase that finishes the step
    for r in range(nr):
        b = r0 + r
        ln = lens[b]
        if s >= ln:
            if want_y and not second:
                yv = y[s, d, b] if layout == 0 else y[b, s, d]
                for j in range(lo, hi):
                    yv[j] = zero
            if split and last:
                _copy(hout[r], hin[r], lo, hi)
            continue
        t = ln - 1 - s if backward else s
        xr = xw[t * nb + b if layout == 0 else b * n_t + t, d]
        hr = hout[r]
        if split and last:
            _copy(hr, hin[r], lo, hi)
        if second:
            _second_half(std, xr, g[r], g2[r], hr, z, cl, clip, acts, par, d, nh, lo, hi)
        else:
            _first_half(kind, std, two, xr, g[r], cb[r], hin[r] if two else hr, rh[r], z, pd,
                        has_p, bh, cl, clip, input_forget, acts, par, d, nh, lo, hi)  # fmt: skip
        if want_y and last:
            _copy(y[t, d, b] if layout == 0 else y[b, t, d], hr, lo, hi)


@njit(inline="always")
def _standard(kind, acts, d):
    """Direction ``d`` has the default activations (the rows run as one vectorised loop)."""
    if kind == KIND_RNN:
        return acts[d, 0] == ACT_TANH
    std = acts[d, 0] == ACT_SIGMOID and acts[d, 1] == ACT_TANH
    if kind == KIND_LSTM:
        std = std and acts[d, 2] == ACT_TANH
    return std


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
    std = _standard(kind, acts, d)
    cl = dt.type(clip) if clip > 0 else dt.type(np.inf)
    gates = (cl, clip, input_forget, acts, par)
    pz = np.zeros(3 * nh, dt)
    pd = p[d] if has_p else pz
    bh = rbh[d] if lbr else pz
    hb = np.zeros((nr, nh), dt)
    cb = np.zeros((nr, nh), dt)
    for r in range(nr):
        b = r0 + r
        if has_h0:
            _copy(hb[r], h0[d, b] if layout == 0 else h0[b, d], 0, nh)
        if has_c0:
            _copy(cb[r], c0[d, b] if layout == 0 else c0[b, d], 0, nh)
    g = np.empty((nr, n_first), dt)
    rh = np.empty((nr, nh if two else 0), dt)
    g2 = np.empty((nr, nh if two else 0), dt)
    z = np.empty(gh, dt)
    hf, gf = hb.reshape(-1), g.reshape(-1)
    rhf, g2f = rh.reshape(-1), g2.reshape(-1)
    p_len = rp.shape[1]
    p2_len = rp2.shape[1]
    rpf, rp2f = rp.reshape(-1), rp2.reshape(-1)
    max_len = 0
    for r in range(nr):
        max_len = max(max_len, lens[r0 + r])
    for s in range(n_t):
        if s < max_len:
            _recur_product(hf, rpf, d * p_len, gf, nr, n_first, nh, 0, n_first)
        span = (d, s, r0, nr, 0, nh)
        _step_rows(False, kind, std, two, xw, g, g2, hb, hb, cb, rh, z, pd, has_p, bh, gates,
                   y, want_y, lens, layout, backward, nh, n_t, nb, span, False)  # fmt: skip
        if two and s < max_len:
            _recur_product(rhf, rp2f, d * p2_len, g2f, nr, nh, nh, 0, nh)
            _step_rows(True, kind, std, two, xw, g, g2, hb, hb, cb, rh, z, pd, has_p, bh, gates,
                       y, want_y, lens, layout, backward, nh, n_t, nb, span, False)  # fmt: skip
    for r in range(nr):
        b = r0 + r
        hv = yh[d, b] if layout == 0 else yh[b, d]
        empty = lens[b] == 0
        zero = dt.type(0)
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


@pjit(fma=True)
def sequence_split_par(
    ctl, kind, xw, rp, rp2, rbh, p, has_p, lens, layout, reverse, clip, input_forget, lbr,
    acts, par, y, want_y, hs, cs, g, rh, g2, nh, n_t, nb, n_slices,
):  # fmt: skip
    """:func:`sequence` for few batch rows on several threads: each time step's hidden units
    are cut into ``n_slices`` slices per direction (whole panels of the packed ``R^T``), and
    the threads share a step's slices (:func:`~.runtime.chunks.claim_phased`, a phase per
    product: GRU without ``lbr`` has two a step). A thread computes all batch rows of its
    slice: their products against its columns of every gate, then their state update; the
    next step starts once every slice is done. Where ``H`` is no multiple of the panel width
    a direction is one slice.

    Arguments as :func:`sequence`'s, but the state lives in the caller's arrays, shared by
    the threads: ``hs`` (2, D, B, H) the hidden state before each step (step ``s`` reads
    ``hs[s % 2]`` and writes ``hs[1 - s % 2]``; the caller puts the initial state in
    ``hs[0]`` and finds the final one in ``hs[T % 2]``), ``cs`` (D, B, H) LSTM's cell state
    (the initial one put in by the caller; updated in place), and the scratch ``g``
    (D, B, first product's width), ``rh`` and ``g2`` (D, B, H; GRU without ``lbr``, else
    (D, B, 0)). ``yh``/``yc`` are the caller's to fill (rows of length 0: zeros)."""
    nd = acts.shape[0]
    dt = xw.dtype
    ng = 4 if kind == KIND_LSTM else (3 if kind == KIND_GRU else 1)
    two = kind == KIND_GRU and lbr == 0
    n_first = 2 * nh if two else ng * nh
    phases = 2 if two else 1
    _, nr_max = block_geometry(g)
    blocks = nh // nr_max
    # slices of whole panels, at most MAX_UNITS chunks a phase
    n_sl = max(1, min(n_slices, blocks, MAX_UNITS // nd)) if nh % nr_max == 0 else 1
    units = nd * n_sl
    cl = dt.type(clip) if clip > 0 else dt.type(np.inf)
    gates = (cl, clip, input_forget, acts, par)
    pz = np.zeros(3 * nh, dt)
    z = np.empty(ng * nh, dt)
    p_len = rp.shape[1]
    p2_len = rp2.shape[1]
    rpf, rp2f = rp.reshape(-1), rp2.reshape(-1)
    max_len = 0
    for b in range(nb):
        max_len = max(max_len, lens[b])
    phase = 0
    while True:
        phase, u = claim_phased(ctl, phase, units, n_t * phases)
        if phase >= n_t * phases:
            break
        s, second = phase // phases, phase % phases == 1
        d, j = u // n_sl, u % n_sl
        if n_sl == 1:
            lo, hi = 0, nh
        else:
            lo, hi = (j * blocks // n_sl) * nr_max, ((j + 1) * blocks // n_sl) * nr_max
        hin, hout = hs[s % 2, d], hs[1 - s % 2, d]
        gd, g2d, rhd = g[d], g2[d], rh[d]
        if s < max_len:
            if second:
                _recur_product(rhd.reshape(-1), rp2f, d * p2_len, g2d.reshape(-1), nb, nh, nh,
                               lo, hi)  # fmt: skip
            elif n_sl == 1:
                _recur_product(hin.reshape(-1), rpf, d * p_len, gd.reshape(-1), nb, n_first, nh,
                               0, n_first)  # fmt: skip
            else:
                for k in range(n_first // nh):
                    _recur_product(hin.reshape(-1), rpf, d * p_len, gd.reshape(-1), nb, n_first,
                                   nh, k * nh + lo, k * nh + hi)  # fmt: skip
        _step_rows(second, kind, _standard(kind, acts, d), two, xw, gd, g2d, hin, hout, cs[d],
                   rhd, z, p[d] if has_p else pz, has_p, rbh[d] if lbr else pz, gates, y,
                   want_y, lens, layout, reverse == 1 or d == 1, nh, n_t, nb,
                   (d, s, 0, nb, lo, hi), True)  # fmt: skip
        finish_phased(ctl)
