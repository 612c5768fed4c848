"""Recurrent operators: LSTM, GRU, RNN.

Every version shares one driver, :func:`_recurrent`. Per direction it

* reverses each batch row within its own ``sequence_lens`` entry (reverse direction), so that
  the step loop always runs forward;
* computes the input projection ``X @ W^T`` of every time step with one BLAS call and folds the
  biases into it;
* runs the steps: ``H_{t-1} @ R^T`` with BLAS, then a gate kernel of the backend's family
  ``rnn`` (``kernels/cpu/rnn.py``) that applies peepholes, clip and activations and updates
  the state in place.

Rows past their ``sequence_lens`` entry keep their state (so ``Y_h``/``Y_c`` are the states at
each row's last valid step) and get zeros in ``Y``; rows of length 0 get zero final states. The
spec leaves these cases open; this is what onnxruntime does.

Registered versions: LSTM 1, 7, 14; GRU 1, 3, 7, 14; RNN 1, 7, 14. Version 22 of each only adds
bfloat16 to the type constraint, which the driver handles (half types compute in float32).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.registry import NodeContext, onnx_op

# name (lower case) -> (the backend's code of it in family "rnn", default alpha, default beta,
# takes alpha, takes beta)
_ACTIVATIONS: dict[str, tuple[str, float, float, bool, bool]] = {
    "sigmoid": ("ACT_SIGMOID", 0.0, 0.0, False, False),
    "tanh": ("ACT_TANH", 0.0, 0.0, False, False),
    "relu": ("ACT_RELU", 0.0, 0.0, False, False),
    "hardsigmoid": ("ACT_HARDSIGMOID", 0.2, 0.5, True, True),
    "affine": ("ACT_AFFINE", 1.0, 0.0, True, True),
    "leakyrelu": ("ACT_LEAKYRELU", 0.01, 0.0, True, False),
    "thresholdedrelu": ("ACT_THRESHOLDEDRELU", 1.0, 0.0, True, False),
    "scaledtanh": ("ACT_SCALEDTANH", 1.0, 1.0, True, True),
    "elu": ("ACT_ELU", 1.0, 0.0, True, False),
    "softsign": ("ACT_SOFTSIGN", 0.0, 0.0, False, False),
    "softplus": ("ACT_SOFTPLUS", 0.0, 0.0, False, False),
}

_DEFAULT_ACTIVATIONS = {
    "LSTM": ("Sigmoid", "Tanh", "Tanh"),
    "GRU": ("Sigmoid", "Tanh"),
    "RNN": ("Tanh",),
}
_N_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _parse_activations(
    ctx: NodeContext,
    kind: str,
    n_dir: int,
    activations: list[str] | None,
    alphas: list[float] | None,
    betas: list[float] | None,
) -> list[list[tuple[int, float, float]]]:
    """Per direction, the (code, alpha, beta) of each activation slot (f, g, h order).

    alpha/beta values are consumed in order by the activations that take them; an activation
    whose value is not given uses the default of the ONNX operator of that name (onnxruntime
    reads the attributes the same way).
    """
    per_dir = len(_DEFAULT_ACTIVATIONS[kind])
    names = list(activations) if activations else []
    if not names:
        names = list(_DEFAULT_ACTIVATIONS[kind]) * n_dir
    elif len(names) == per_dir and n_dir == 2:
        # A bidirectional node listing one set uses it for both directions.
        names = names * 2
    elif len(names) == 2 * per_dir and n_dir == 1:
        # RNN's schema default ["Tanh", "Tanh"] names a function for each direction of a
        # bidirectional node; a one-direction node uses the first (as onnxruntime does).
        names = names[:per_dir]
    if len(names) != per_dir * n_dir:
        raise ctx.error(
            f"activations lists {len(names)} functions; {kind} with {n_dir} direction(s) "
            f"needs {per_dir * n_dir} ({per_dir} per direction); fix the attribute"
        )
    alpha_it = iter(alphas or [])
    beta_it = iter(betas or [])
    parsed: list[tuple[int, float, float]] = []
    for name in names:
        entry = _ACTIVATIONS.get(str(name).lower())
        if entry is None:
            raise ctx.unsupported(
                f"activation {name!r} is not supported; use one of "
                f"{sorted(k for k in _ACTIVATIONS)} (case-insensitive)"
            )
        const, alpha, beta, takes_a, takes_b = entry
        code = ctx.kernel("rnn", const)
        if takes_a:
            alpha = float(next(alpha_it, alpha))
        if takes_b:
            beta = float(next(beta_it, beta))
        parsed.append((code, alpha, beta))
    return [parsed[d * per_dir : (d + 1) * per_dir] for d in range(n_dir)]


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    # float16/bfloat16 compute in float32 and are cast back at the end.
    return dtype if dtype in (np.float32, np.float64) else np.dtype(np.float32)


def _recurrent(
    ctx: NodeContext,
    kind: str,
    X: np.ndarray,
    W: np.ndarray,
    R: np.ndarray,
    B: np.ndarray | None,
    sequence_lens: np.ndarray | None,
    initial_h: np.ndarray | None,
    initial_c: np.ndarray | None = None,
    P: np.ndarray | None = None,
    *,
    hidden_size: int | None,
    direction: str,
    activations: list[str] | None,
    activation_alpha: list[float] | None,
    activation_beta: list[float] | None,
    clip: float | None,
    layout: int = 0,
    input_forget: int = 0,
    linear_before_reset: int = 0,
) -> tuple[Any, ...]:
    out_dtype = X.dtype
    dt = _compute_dtype(out_dtype)

    def prep(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else np.ascontiguousarray(a, dtype=dt)

    if direction == "foward":  # GRU-1's schema default has this typo.
        direction = "forward"
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ctx.error(
            f"direction must be 'forward', 'reverse' or 'bidirectional', got {direction!r}"
        )
    n_dir = 2 if direction == "bidirectional" else 1
    if layout not in (0, 1):
        raise ctx.error(f"layout must be 0 or 1, got {layout}")
    if X.ndim != 3:
        raise ctx.error(f"X must be 3-D, got shape {X.shape}")
    if layout == 1:
        X = X.transpose(1, 0, 2)
        if initial_h is not None:
            initial_h = initial_h.transpose(1, 0, 2)
        if initial_c is not None:
            initial_c = initial_c.transpose(1, 0, 2)
    X = prep(X)
    W, R, B, P = prep(W), prep(R), prep(B), prep(P)
    initial_h, initial_c = prep(initial_h), prep(initial_c)
    n_t, n_b, n_in = X.shape
    n_g = _N_GATES[kind]
    n_h = int(hidden_size) if hidden_size else R.shape[-1]
    if W.shape != (n_dir, n_g * n_h, n_in):
        raise ctx.error(
            f"W must have shape {(n_dir, n_g * n_h, n_in)} (num_directions, {n_g}*hidden_size, "
            f"input_size), got {W.shape}"
        )
    if R.shape != (n_dir, n_g * n_h, n_h):
        raise ctx.error(f"R must have shape {(n_dir, n_g * n_h, n_h)}, got {R.shape}")
    if B is not None and B.shape != (n_dir, 2 * n_g * n_h):
        raise ctx.error(f"B must have shape {(n_dir, 2 * n_g * n_h)}, got {B.shape}")
    for name, st in (("initial_h", initial_h), ("initial_c", initial_c)):
        if st is not None and st.shape != (n_dir, n_b, n_h):
            want = (n_dir, n_b, n_h) if layout == 0 else (n_b, n_dir, n_h)
            got = st.shape if layout == 0 else (st.shape[1], st.shape[0], st.shape[2])
            raise ctx.error(f"{name} must have shape {want}, got {got}")
    if P is not None and P.shape != (n_dir, 3 * n_h):
        raise ctx.error(f"P must have shape {(n_dir, 3 * n_h)}, got {P.shape}")
    acts = _parse_activations(ctx, kind, n_dir, activations, activation_alpha, activation_beta)
    clip_v = float(clip) if clip is not None else 0.0
    if clip is not None and clip_v <= 0:
        raise ctx.error(f"clip must be positive, got {clip_v}")

    # Per-step activity of each batch row, and the per-row time reversal.
    if sequence_lens is None:
        lens = None
        active = np.ones((n_t, n_b), dtype=np.uint8)
    else:
        lens = np.asarray(sequence_lens).astype(np.int64).reshape(-1)
        if lens.shape != (n_b,) or (lens.size and (lens.min() < 0 or lens.max() > n_t)):
            raise ctx.error(
                f"sequence_lens must hold {n_b} values in [0, {n_t}], got {lens.tolist()}"
            )
        active = (np.arange(n_t)[:, None] < lens[None, :]).astype(np.uint8)
        if lens.size and lens.min() == n_t:
            lens = None  # every row is full length: plain reversal suffices
    rev_idx = None
    if direction != "forward" and lens is not None:
        s = np.arange(n_t)[:, None]
        rev_idx = np.where(s < lens[None, :], lens[None, :] - 1 - s, s)
    batch_idx = np.arange(n_b)[None, :]

    want_y = ctx.outputs_used[0] if ctx.outputs_used else True
    ys: list[np.ndarray] = []
    hs: list[np.ndarray] = []
    cs: list[np.ndarray] = []
    gh_cols = n_g * n_h
    lstm_step, rnn_step = ctx.kernel("rnn", "lstm_step"), ctx.kernel("rnn", "rnn_step")
    gru_step_lbr = ctx.kernel("rnn", "gru_step_lbr")
    gru_gates_zr, gru_finish = ctx.kernel("rnn", "gru_gates_zr"), ctx.kernel("rnn", "gru_finish")
    for d in range(n_dir):
        backward = direction == "reverse" or d == 1
        if not backward:
            Xd = X
        elif rev_idx is None:
            Xd = X[::-1]
        else:
            Xd = X[rev_idx, batch_idx]
        xw = np.ascontiguousarray(Xd).reshape(n_t * n_b, n_in) @ W[d].T
        rb_h = np.zeros(n_h, dtype=dt)
        if B is not None:
            wb, rb = B[d, :gh_cols], B[d, gh_cols:]
            if kind == "GRU" and linear_before_reset:
                xw += wb
                xw[:, : 2 * n_h] += rb[: 2 * n_h]
                rb_h = np.ascontiguousarray(rb[2 * n_h :])
            else:
                xw += wb + rb
        xw = xw.reshape(n_t, n_b, gh_cols)
        h = initial_h[d].copy() if initial_h is not None else np.zeros((n_b, n_h), dtype=dt)
        y = np.empty((n_t, n_b, n_h), dtype=dt) if want_y else np.empty((1, n_b, n_h), dtype=dt)
        act_f = acts[d]
        if kind == "LSTM":
            c = initial_c[d].copy() if initial_c is not None else np.zeros((n_b, n_h), dtype=dt)
            p = P[d] if P is not None else np.zeros(3 * n_h, dtype=dt)
            Rt = np.ascontiguousarray(R[d].T)
            (f, fa, fb), (g, ga, gb), (hc, ha, hb) = act_f
            for t in range(n_t):
                lstm_step(
                    xw[t], h @ Rt, p, c, h, active[t], clip_v, int(input_forget),
                    f, fa, fb, g, ga, gb, hc, ha, hb, y[t if want_y else 0],
                )  # fmt: skip
            cs.append(c)
        elif kind == "GRU":
            (f, fa, fb), (g, ga, gb) = act_f
            if linear_before_reset:
                Rt = np.ascontiguousarray(R[d].T)
                for t in range(n_t):
                    gru_step_lbr(
                        xw[t], h @ Rt, rb_h, h, active[t], clip_v,
                        f, fa, fb, g, ga, gb, y[t if want_y else 0],
                    )  # fmt: skip
            else:
                Rzr = np.ascontiguousarray(R[d, : 2 * n_h].T)
                Rh = np.ascontiguousarray(R[d, 2 * n_h :].T)
                z = np.empty((n_b, n_h), dtype=dt)
                rh = np.empty((n_b, n_h), dtype=dt)
                for t in range(n_t):
                    gru_gates_zr(xw[t], h @ Rzr, h, clip_v, f, fa, fb, z, rh)
                    gru_finish(
                        xw[t], rh @ Rh, z, h, active[t], clip_v, g, ga, gb,
                        y[t if want_y else 0],
                    )  # fmt: skip
        else:
            (f, fa, fb) = act_f[0]
            Rt = np.ascontiguousarray(R[d].T)
            for t in range(n_t):
                rnn_step(xw[t], h @ Rt, h, active[t], clip_v, f, fa, fb, y[t if want_y else 0])
        if want_y and backward:
            y = y[::-1] if rev_idx is None else y[rev_idx, batch_idx]
        ys.append(y)
        hs.append(h)

    if sequence_lens is not None:
        # onnxruntime reports zero final states for rows of length 0 (not initial_h/c).
        empty = np.asarray(sequence_lens).reshape(-1) == 0
        if empty.any():
            for st in hs + cs:
                st[empty] = 0
    Y = np.stack(ys, axis=1) if want_y else None  # (T, nd, B, H)
    Y_h = np.stack(hs, axis=0)  # (nd, B, H)
    Y_c = np.stack(cs, axis=0) if kind == "LSTM" else None
    if layout == 1:
        Y = None if Y is None else Y.transpose(2, 0, 1, 3)
        Y_h = Y_h.transpose(1, 0, 2)
        Y_c = None if Y_c is None else Y_c.transpose(1, 0, 2)

    def out(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else np.ascontiguousarray(a).astype(out_dtype, copy=False)

    if kind == "LSTM":
        return out(Y), out(Y_h), out(Y_c)
    return out(Y), out(Y_h)


# ---------------------------------------------------------------------------------------------
# LSTM


@onnx_op("LSTM", since=1)
def lstm_1(
    ctx, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None,
    direction, hidden_size=None, input_forget, output_sequence,
):  # fmt: skip
    """LSTM-1: as LSTM-7; ``output_sequence`` is accepted and ignored (Y is optional anyway)."""
    return _recurrent(
        ctx, "LSTM", X, W, R, B, sequence_lens, initial_h, initial_c, P,
        hidden_size=hidden_size, direction=direction, activations=activations,
        activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
        input_forget=input_forget,
    )  # fmt: skip


@onnx_op("LSTM", since=7)
def lstm_7(
    ctx, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None,
    direction, hidden_size=None, input_forget,
):  # fmt: skip
    """LSTM-7: sequence-major layout (X is [seq_length, batch_size, input_size])."""
    return _recurrent(
        ctx, "LSTM", X, W, R, B, sequence_lens, initial_h, initial_c, P,
        hidden_size=hidden_size, direction=direction, activations=activations,
        activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
        input_forget=input_forget,
    )  # fmt: skip


@onnx_op("LSTM", since=14)
def lstm_14(
    ctx, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None,
    direction, hidden_size=None, input_forget, layout,
):  # fmt: skip
    """LSTM-14 (and 22): adds ``layout`` (1 = batch-major X, Y, states)."""
    return _recurrent(
        ctx, "LSTM", X, W, R, B, sequence_lens, initial_h, initial_c, P,
        hidden_size=hidden_size, direction=direction, activations=activations,
        activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
        input_forget=input_forget, layout=layout,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# GRU


@onnx_op("GRU", since=1)
def gru_1(
    ctx, X, W, R, B=None, sequence_lens=None, initial_h=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None,
    direction, hidden_size=None, output_sequence,
):  # fmt: skip
    """GRU-1: no linear_before_reset (it is 0); the schema's default direction is spelled
    ``"foward"`` and means forward."""
    return _recurrent(
        ctx, "GRU", X, W, R, B, sequence_lens, initial_h,
        hidden_size=hidden_size, direction=direction, activations=activations,
        activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
    )  # fmt: skip


@onnx_op("GRU", since=3)
def gru_3(
    ctx, X, W, R, B=None, sequence_lens=None, initial_h=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None,
    direction, hidden_size=None, linear_before_reset, output_sequence,
):  # fmt: skip
    """GRU-3: adds linear_before_reset; ``output_sequence`` is accepted and ignored."""
    return _recurrent(
        ctx, "GRU", X, W, R, B, sequence_lens, initial_h,
        hidden_size=hidden_size, direction=direction, activations=activations,
        activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
        linear_before_reset=linear_before_reset,
    )  # fmt: skip


@onnx_op("GRU", since=7)
def gru_7(
    ctx, X, W, R, B=None, sequence_lens=None, initial_h=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None,
    direction, hidden_size=None, linear_before_reset,
):  # fmt: skip
    """GRU-7: sequence-major layout."""
    return _recurrent(
        ctx, "GRU", X, W, R, B, sequence_lens, initial_h,
        hidden_size=hidden_size, direction=direction, activations=activations,
        activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
        linear_before_reset=linear_before_reset,
    )  # fmt: skip


@onnx_op("GRU", since=14)
def gru_14(
    ctx, X, W, R, B=None, sequence_lens=None, initial_h=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None,
    direction, hidden_size=None, layout, linear_before_reset,
):  # fmt: skip
    """GRU-14 (and 22): adds ``layout``."""
    return _recurrent(
        ctx, "GRU", X, W, R, B, sequence_lens, initial_h,
        hidden_size=hidden_size, direction=direction, activations=activations,
        activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
        layout=layout, linear_before_reset=linear_before_reset,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# RNN


@onnx_op("RNN", since=1)
def rnn_1(
    ctx, X, W, R, B=None, sequence_lens=None, initial_h=None, *,
    activation_alpha=None, activation_beta=None, activations,  # noqa: B006
    clip=None, direction, hidden_size=None, output_sequence,
):  # fmt: skip
    """RNN-1: as RNN-7; ``output_sequence`` is accepted and ignored."""
    return _recurrent(
        ctx, "RNN", X, W, R, B, sequence_lens, initial_h,
        hidden_size=hidden_size, direction=direction, activations=activations,
        activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
    )  # fmt: skip


@onnx_op("RNN", since=7)
def rnn_7(
    ctx, X, W, R, B=None, sequence_lens=None, initial_h=None, *,
    activation_alpha=None, activation_beta=None, activations,  # noqa: B006
    clip=None, direction, hidden_size=None,
):  # fmt: skip
    """RNN-7: sequence-major layout."""
    return _recurrent(
        ctx, "RNN", X, W, R, B, sequence_lens, initial_h,
        hidden_size=hidden_size, direction=direction, activations=activations,
        activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
    )  # fmt: skip


@onnx_op("RNN", since=14)
def rnn_14(
    ctx, X, W, R, B=None, sequence_lens=None, initial_h=None, *,
    activation_alpha=None, activation_beta=None, activations,  # noqa: B006
    clip=None, direction, hidden_size=None, layout,
):  # fmt: skip
    """RNN-14 (and 22): adds ``layout``."""
    return _recurrent(
        ctx, "RNN", X, W, R, B, sequence_lens, initial_h,
        hidden_size=hidden_size, direction=direction, activations=activations,
        activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
        layout=layout,
    )  # fmt: skip
