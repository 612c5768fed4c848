"""Recurrent operators: LSTM, GRU, RNN.

Every version runs the same two kernel calls of the backend's family ``rnn``
(``kernels/cpu/rnn.py``), prepared by :class:`_Runner`:

* the input projection of every time step and both directions, ``X @ [W_0; W_1]^T`` plus the
  biases that can be folded into it, as one GEMM (on the backend's threads when large);
* :func:`sequence`, which runs every time step without returning to Python: per step the
  recurrent product ``H_{t-1} @ R^T`` (R^T packed once into the GEMM micro-kernel's panels)
  and one pass over the gates (peepholes, clip, activations, state update), for blocks of
  batch rows of each direction, which are independent and so run on several threads. Where
  there are fewer such blocks than threads (one sequence, one direction), each step's hidden
  units are shared between the threads instead (:func:`sequence_split_par`), which meet at
  every step.

The lowering (:func:`_lower`) does the weight layout once per plan where W, R, B and P are
constant (initializers, as exporters write them); the implementation (:func:`_recurrent`)
does it per call for any inputs. ``layout`` 1 and the reverse direction are index arithmetic
in the kernel (no transposed or reversed copies).

Rows past their ``sequence_lens`` entry keep their state (so ``Y_h``/``Y_c`` are the states at
each row's last valid step) and get zeros in ``Y``; rows of length 0 get zero final states. The
spec leaves these cases open; this is what onnxruntime does.

Registered versions: LSTM 1, 7, 14; GRU 1, 3, 7, 14; RNN 1, 7, 14. Version 22 of each only adds
bfloat16 to the type constraint, which the implementation handles (half types compute in
float32).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from onnxjit.lowering import TENSOR, Bound, In, LowerContext, Out, lowers, tensor, writes
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


@dataclass(frozen=True, eq=False)
class _Weights:
    """What one node's weights and attributes become for the kernels (computed once per plan
    where W, R, B and P are constant): the projection's packed weight and bias, the packed
    recurrence weights and the kernel's scalar arguments (see ``kernels/cpu/rnn.py``)."""

    kind: str
    n_dir: int
    n_in: int
    n_h: int
    dtype: np.dtype
    w_packed: np.ndarray  # [W_0; W_1]^T (I x D*G*H) in the micro-kernel's panels
    bias: np.ndarray  # (D*G*H,) added to the projection
    kind_code: int  # the kernel's KIND_*
    recurrence: tuple  # (rp, rp2, rbh, p, has_p): see kernels/cpu/rnn.sequence
    options: tuple  # (reverse, clip, input_forget, lbr, acts, par)


def _configure(
    ctx: Any,
    backend: Any,
    kind: str,
    W: np.ndarray,
    R: np.ndarray,
    B: np.ndarray | None,
    P: np.ndarray | None,
    n_in: int,
    *,
    constant: bool,
    hidden_size: int | None,
    direction: str,
    activations: list[str] | None,
    activation_alpha: list[float] | None,
    activation_beta: list[float] | None,
    clip: float | None,
    input_forget: int = 0,
    linear_before_reset: int = 0,
) -> _Weights:
    """Check the weights and attributes and lay them out for the kernels (``constant``: the
    weights are the plan's constants, so their packed forms are shared between plans)."""
    from onnxjit.ops.gemm import packed_weight, packed_with

    if direction == "foward":  # GRU-1's schema default has this typo.
        direction = "forward"
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ctx.error(
            f"direction must be 'forward', 'reverse' or 'bidirectional', got {direction!r}"
        )
    n_dir = 2 if direction == "bidirectional" else 1
    dt = _compute_dtype(W.dtype)
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
    if P is not None and P.shape != (n_dir, 3 * n_h):
        raise ctx.error(f"P must have shape {(n_dir, 3 * n_h)}, got {P.shape}")
    acts = _parse_activations(ctx, kind, n_dir, activations, activation_alpha, activation_beta)
    clip_v = float(clip) if clip is not None else 0.0
    if clip is not None and clip_v <= 0:
        raise ctx.error(f"clip must be positive, got {clip_v}")

    gh = n_g * n_h
    lbr = int(bool(linear_before_reset)) if kind == "GRU" else 0
    W = np.asarray(W, dt)
    R = np.asarray(R, dt)
    w_packed = packed_weight(backend, np.ascontiguousarray(W.reshape(n_dir * gh, n_in)),
                             n_in, n_dir * gh, transposed=True)  # fmt: skip
    bias = np.zeros((n_dir, gh), dt)
    rbh = np.zeros((n_dir, n_h if lbr else 0), dt)
    if B is not None:
        B = np.asarray(B, dt)
        wb, rb = B[:, :gh], B[:, gh:]
        bias += wb
        if lbr:
            # the h gate's recurrence bias is scaled by the reset gate with H @ Rh^T
            bias[:, : 2 * n_h] += rb[:, : 2 * n_h]
            rbh[:] = rb[:, 2 * n_h :]
        else:
            bias += rb
    pack_b = backend.kernel("blas", "pack_b")

    def packed_t(rows: slice) -> np.ndarray:
        """R[d, rows]^T (H x len(rows)) of each direction in pack_b's panels, stacked."""
        parts = []
        for d in range(n_dir):
            r = np.ascontiguousarray(R[d, rows])
            parts.append(packed_with(backend, _pack_t, r.reshape(-1), r.shape[0], n_h, constant))
        return np.ascontiguousarray(np.stack(parts))

    def _pack_t(r: np.ndarray, n: int, k: int) -> np.ndarray:
        return pack_b(np.ascontiguousarray(r.reshape(n, k).T).reshape(-1), k, n)

    _pack_t.__name__ = "rnn_pack_rt"  # the packed-weight cache keys on the packer's name
    two = kind == "GRU" and not lbr
    rp = packed_t(slice(0, 2 * n_h) if two else slice(0, gh))
    rp2 = packed_t(slice(2 * n_h, gh)) if two else np.zeros((n_dir, 0), dt)
    has_p = kind == "LSTM" and P is not None
    p = np.ascontiguousarray(P, dt) if has_p else np.zeros((n_dir, 0), dt)
    codes = np.zeros((n_dir, 3), np.int64)
    par = np.zeros((n_dir, 3, 2), np.float64)
    for d, per_dir in enumerate(acts):
        for k, (code, alpha, beta) in enumerate(per_dir):
            codes[d, k], par[d, k, 0], par[d, k, 1] = code, alpha, beta
    kind_code = int(backend.kernel("rnn", f"KIND_{kind}"))
    reverse = {"forward": 0, "reverse": 1, "bidirectional": 2}[direction]
    return _Weights(
        kind, n_dir, n_in, n_h, dt, w_packed, bias.reshape(-1), kind_code,
        (rp, rp2, rbh, p, has_p), (reverse, clip_v, int(bool(input_forget)), lbr, codes, par),
    )  # fmt: skip


# Few rows on several threads share each step's hidden units (sequence_split) where a
# direction has at most this many rows and its recurrent weights at least this many bytes:
# smaller steps do not pay for the threads' meeting at every step.
SPLIT_MAX_ROWS = 8
SPLIT_MIN_BYTES = 128 * 1024


class _Runner:
    """One recurrent node at fixed sizes (``n_t`` steps, ``n_b`` rows, ``layout``): the input
    projection (one GEMM for every step and direction, on the backend's threads when large)
    and :func:`kernels.cpu.rnn.sequence` (its pool twin when there is more than one item of
    work and more than one thread; ``sequence_split_par`` when the items are fewer than the
    threads, see SPLIT_MAX_ROWS). Called with the run's arrays:
    ``(x, lens, h0, c0, y, yh, yc, xw)``, ``xw`` the projection's scratch."""

    def __init__(
        self, backend: Any, w: _Weights, n_t: int, n_b: int, layout: int, want_y: bool
    ) -> None:
        from onnxjit.ops.gemm import PARALLEL_MACS, Epilogue, epilogue_args, product

        dt = w.dtype
        n_cols = w.bias.size
        self.m, self.n_cols = n_t * n_b, n_cols
        mode = backend.kernel("blas", "BIAS_COL")
        ep = epilogue_args(backend, Epilogue(bias=w.bias, bias_mode=mode), dt)
        fn, args = product(
            backend, 1, self.m, n_cols, w.n_in, None, 0, 0, w.w_packed,
            backend.kernel("blas", "B_PACKED"), 0, None, dt, 1.0, 0.0, ep,
        )  # fmt: skip
        self.proj, self.head, self.mid, self.tail = fn, args[:4], args[5:8], args[9:]
        threads = backend.threads()
        n_chunks = max(1, min(n_b, -(-threads // w.n_dir)))
        rows_per = -(-n_b // n_chunks) if n_b else 1
        n_chunks = -(-n_b // rows_per) if n_b else 1
        self.sizes = (w.n_h, n_t, n_b, rows_per, n_chunks)
        self.w, self.layout, self.want_y = w, layout, bool(want_y)
        self.empty3 = np.empty((0, 0, 0), dt)
        self.empty4 = np.empty((0, 0, 0, 0), dt)
        work = n_t * n_b * n_cols * w.n_h  # multiply-adds of the recurrent products
        rp, rp2 = w.recurrence[:2]
        self.split = 0
        if (
            w.n_dir * n_b < threads
            and 1 <= n_b <= SPLIT_MAX_ROWS
            and (rp[0].nbytes + rp2[0].nbytes) >= SPLIT_MIN_BYTES
        ):
            self.split = max(1, threads // w.n_dir)  # slices of each step per direction
            v3, v4 = np.empty((1, 1, 1), dt), self.empty4
            sample = (
                w.kind_code, v3, *w.recurrence, np.empty(1, np.int32), layout, *w.options,
                v4, True, v4, v3, v3, v3, v3, w.n_h, n_t, n_b, self.split,
            )  # fmt: skip
            self.seq = backend.pooled("rnn", "sequence_split", sample)
        elif w.n_dir * n_chunks > 1:
            v3, v4 = np.empty((1, 1, 1), dt), self.empty4
            lens = np.empty(1, np.int32)
            sample = (
                w.kind_code, v3, *w.recurrence, v3, True, v3, True, lens, layout, *w.options,
                v4, True, v3, v3, *self.sizes,
            )  # fmt: skip
            # items run whole sequences: no per-step synchronisation to amortise
            self.seq = backend.launcher("rnn", "sequence", work, sample, PARALLEL_MACS)
        else:
            self.seq = backend.kernel("rnn", "sequence")

    def __call__(
        self,
        x: np.ndarray,
        lens: np.ndarray,
        h0: np.ndarray | None,
        c0: np.ndarray | None,
        y: np.ndarray,
        yh: np.ndarray,
        yc: np.ndarray | None,
        xw: np.ndarray,
    ) -> None:
        if self.m and self.n_cols and self.w.n_in:
            self.proj(*self.head, x.reshape(-1), *self.mid, xw.reshape(-1), *self.tail)
        elif self.m and self.n_cols:  # no inputs: the projection is the bias alone
            xw.reshape(self.m, self.n_cols)[:] = self.w.bias
        e3 = self.empty3
        w = self.w
        if self.split:
            self._run_split(xw, lens, h0, c0, y, yh, yc)
            return
        self.seq(
            w.kind_code, xw.reshape(self.m, w.n_dir, self.n_cols // w.n_dir), *w.recurrence,
            e3 if h0 is None else h0, h0 is not None, e3 if c0 is None else c0, c0 is not None,
            lens, self.layout, *w.options, y if self.want_y else self.empty4, self.want_y, yh,
            e3 if yc is None else yc, *self.sizes,
        )  # fmt: skip

    def _run_split(
        self,
        xw: np.ndarray,
        lens: np.ndarray,
        h0: np.ndarray | None,
        c0: np.ndarray | None,
        y: np.ndarray,
        yh: np.ndarray,
        yc: np.ndarray | None,
    ) -> None:
        """The steps through :func:`sequence_split_par`, whose state arrays (shared by the
        threads) are set up and read back here, in the kernel's (D, B, H) order."""
        w = self.w
        n_h, n_t, n_b = self.sizes[:3]
        dt, d = w.dtype, w.n_dir
        # the layout's state shape as (D, B, H) views
        order = (lambda a: a) if self.layout == 0 else (lambda a: a.transpose(1, 0, 2))
        hs = np.zeros((2, d, n_b, n_h), dt)
        cs = np.zeros((d, n_b, n_h), dt)
        if h0 is not None:
            hs[0] = order(h0)
        if c0 is not None:
            cs[:] = order(c0)
        two = w.recurrence[1].shape[1] > 0
        g = np.empty((d, n_b, (2 if two else w.bias.size // d // n_h) * n_h), dt)
        rh = np.empty((d, n_b, n_h if two else 0), dt)
        g2 = np.empty_like(rh)
        self.seq(
            w.kind_code, xw.reshape(self.m, d, self.n_cols // d), *w.recurrence, lens,
            self.layout, *w.options, y if self.want_y else self.empty4, self.want_y, hs, cs,
            g, rh, g2, n_h, n_t, n_b, self.split,
        )  # fmt: skip
        empty = lens == 0
        for out, state in ((yh, hs[n_t % 2]), (yc, cs)):
            if out is not None:
                view = order(out)
                view[:] = state
                view[:, empty] = 0


def _check_lens(ctx: Any, lens: np.ndarray, n_b: int, n_t: int) -> np.ndarray:
    """``sequence_lens`` as int32 (B,), checked to lie in ``[0, T]``."""
    lens = np.asarray(lens).reshape(-1)
    if lens.shape != (n_b,) or (lens.size and (lens.min() < 0 or lens.max() > n_t)):
        raise ctx.error(f"sequence_lens must hold {n_b} values in [0, {n_t}], got {lens.tolist()}")
    return np.ascontiguousarray(lens, np.int32)


def _state_shape(layout: int, n_dir: int, n_b: int, n_h: int) -> tuple[int, int, int]:
    return (n_dir, n_b, n_h) if layout == 0 else (n_b, n_dir, n_h)


def _y_shape(layout: int, n_t: int, n_dir: int, n_b: int, n_h: int) -> tuple[int, ...]:
    return (n_t, n_dir, n_b, n_h) if layout == 0 else (n_b, n_t, n_dir, n_h)


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
    layout: int = 0,
    **attrs: Any,
) -> tuple[Any, ...]:
    """The operator on any inputs: configures the weights, then runs what a plan binds."""
    backend = ctx.backend
    if layout not in (0, 1):
        raise ctx.error(f"layout must be 0 or 1, got {layout}")
    if X.ndim != 3:
        raise ctx.error(f"X must be 3-D, got shape {X.shape}")
    w = _configure(ctx, backend, kind, W, R, B, P, X.shape[2], constant=False, **attrs)
    dt = w.dtype
    n_t, n_b = (X.shape[0], X.shape[1]) if layout == 0 else (X.shape[1], X.shape[0])
    st = _state_shape(layout, w.n_dir, n_b, w.n_h)
    states = []
    for name, s in (("initial_h", initial_h), ("initial_c", initial_c)):
        if s is not None and s.shape != st:
            raise ctx.error(f"{name} must have shape {st}, got {s.shape}")
        states.append(None if s is None else np.ascontiguousarray(s, dt))
    if sequence_lens is None:
        lens = np.full(n_b, n_t, np.int32)
    else:
        lens = _check_lens(ctx, sequence_lens, n_b, n_t)
    want_y = ctx.outputs_used[0] if ctx.outputs_used else True
    y = np.empty(_y_shape(layout, n_t, w.n_dir, n_b, w.n_h) if want_y else (0, 0, 0, 0), dt)
    yh = np.empty(st, dt)
    yc = np.empty(st, dt) if kind == "LSTM" else None
    xw = np.empty(n_t * n_b * w.bias.size, dt)
    run = _Runner(backend, w, n_t, n_b, layout, want_y)
    run(np.ascontiguousarray(X, dt), lens, states[0], states[1], y, yh, yc, xw)

    def out(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a.astype(X.dtype, copy=False)

    if kind == "LSTM":
        return out(y if want_y else None), out(yh), out(yc)
    return out(y if want_y else None), out(yh)


_ATTRS = {
    "LSTM": ("hidden_size", "direction", "activations", "activation_alpha", "activation_beta",
             "clip", "input_forget"),
    "GRU": ("hidden_size", "direction", "activations", "activation_alpha", "activation_beta",
            "clip", "linear_before_reset"),
    "RNN": ("hidden_size", "direction", "activations", "activation_alpha", "activation_beta",
            "clip"),
}  # fmt: skip


def _lower(lc: LowerContext, kind: str) -> Bound | None:
    """float32/float64 nodes whose W, R, B (and P) are constant for the plan: the weights are
    laid out once, and each run is the projection GEMM and one sequence kernel call writing
    the outputs; the projection goes to a scratch output. Others run the implementation."""
    # a backend without the family (a device backend) raises KeyError first: the plan then
    # runs the node on the CPU, before any weight is laid out for the wrong backend
    lc.kernel("rnn", "sequence")
    x = lc.inputs[0]
    if lc.ctx is None or x is None or x.kind != TENSOR or x.ndim != 3:
        return None
    if x.dtype not in (np.float32, np.float64):
        return None
    consts = [lc.const(i) for i in (1, 2, 3, 7)]
    if not all(lc.is_const(i) for i in (1, 2, 3, 7)) or consts[0] is None or consts[1] is None:
        return None
    if any(c is not None and (not isinstance(c, np.ndarray) or c.dtype != x.dtype) for c in consts):
        return None
    layout = int(lc.attrs.get("layout", 0) or 0)
    if layout not in (0, 1):
        return None
    attrs = {k: lc.attrs.get(k) for k in _ATTRS[kind] if k in lc.attrs}
    W, R, B, P = consts
    w = _configure(lc.ctx, lc.backend, kind, W, R, B, P if kind == "LSTM" else None,
                   x.shape[2], constant=True, **attrs)  # fmt: skip
    n_t, n_b = (x.shape[0], x.shape[1]) if layout == 0 else (x.shape[1], x.shape[0])
    st = _state_shape(layout, w.n_dir, n_b, w.n_h)
    state_args: list[Any] = []
    for i, name in ((5, "initial_h"), (6, "initial_c")):
        s = lc.inputs[i] if i < len(lc.inputs) and (kind == "LSTM" or i == 5) else None
        if s is None or s.kind != TENSOR:
            state_args.append(None)
            continue
        if s.dtype != x.dtype:
            return None
        if s.shape != st:
            raise lc.error(f"{name} must have shape {st}, got {s.shape}")
        state_args.append(In(i))
    s = lc.inputs[4] if len(lc.inputs) > 4 else None
    has_lens = s is not None and s.kind == TENSOR
    used = lc.outputs_used
    want_y = used[0] if used else True
    y_shape = _y_shape(layout, n_t, w.n_dir, n_b, w.n_h) if want_y else (0, 0, 0, 0)
    outs = [tensor(x.dtype, y_shape), tensor(x.dtype, st)]
    if kind == "LSTM":
        outs.append(tensor(x.dtype, st))
    n_states = len(outs)
    outs.append(tensor(x.dtype, (n_t * n_b * w.bias.size,)))
    run = _Runner(lc.backend, w, n_t, n_b, layout, want_y)
    ctx = lc.ctx
    full = np.full(n_b, n_t, np.int32)

    def recurrent(x, lens, h0, c0, y, yh, yc, xw):  # noqa: ANN001, ANN202
        lens = full if lens is None else _check_lens(ctx, lens, n_b, n_t)
        run(x, lens, h0, c0, y, yh, yc, xw)

    yc_arg = Out(2) if kind == "LSTM" else None
    return writes(
        recurrent, In(0), In(4) if has_lens else None, *state_args, Out(0), Out(1), yc_arg,
        Out(n_states), outs=outs, name=f"rnn.sequence[{kind}]",
    )  # fmt: skip


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


@lowers(lstm_1, lstm_7, lstm_14)
def _lower_lstm(lc: LowerContext) -> Bound | None:
    return _lower(lc, "LSTM")


@lowers(gru_1, gru_3, gru_7, gru_14)
def _lower_gru(lc: LowerContext) -> Bound | None:
    return _lower(lc, "GRU")


@lowers(rnn_1, rnn_7, rnn_14)
def _lower_rnn(lc: LowerContext) -> Bound | None:
    return _lower(lc, "RNN")
