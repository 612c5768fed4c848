"""Attention family: Attention (23, 24, 25), LinearAttention-27, CausalConvWithState-27.

Attention: Q K^T and P V are batched BLAS matmuls (grouped-query heads are folded into the
row dimension, so no K/V repetition is materialised); the additive bias (boolean/float mask,
causal frontier, sliding window, padding from ``nonpad_kv_seqlen``) is built once with numpy
at the mask's own broadcast shape; softcap, bias, softmax and the fully-masked-row guard run in
one kernel per row (the backend's ``attention`` family, kernels/cpu/attention.py).

float16/bfloat16 are computed in float32, with intermediates rounded to the narrow type where
the spec's dataflow holds them in that type (scaled Q and K, the scores, softmax in the input
precision unless ``softmax_precision`` says otherwise, the probabilities before P V).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx

from onnxjit.registry import NodeContext, onnx_op

_BF16 = "bfloat16"


def _narrow_mode(dtype: np.dtype) -> int:
    """Rounding mode of the kernels for an element type: 0 none, 1 float16, 2 bfloat16."""
    if dtype == np.float16:
        return 1
    if dtype.name == _BF16:
        return 2
    return 0


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def _round_to(a: np.ndarray, dtype: np.dtype, cdt: np.dtype) -> np.ndarray:
    """``a`` (compute type) rounded through ``dtype``: a numpy cast pair, one pass each."""
    if _narrow_mode(dtype) == 0:
        return a
    return a.astype(dtype).astype(cdt)


def _to_4d(x: np.ndarray, heads: int) -> np.ndarray:
    """(B, S, H*D) -> (B, H, S, D) view."""
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def _grouped_matmul(a: np.ndarray, b: np.ndarray, hkv: int) -> np.ndarray:
    """(B, Hq, L, X) @ (B, Hkv, X, Y) with query head h reading kv head h // (Hq / Hkv)."""
    nb, hq, n, x = a.shape
    g = hq // hkv
    a5 = np.ascontiguousarray(a).reshape(nb, hkv, g * n, x)
    out = np.matmul(a5, b)  # batched BLAS over (B, Hkv)
    return out.reshape(nb, hq, n, out.shape[-1])


def _frontier(n_q: int, n_kv: int, offset: Any, left: int, right: int, causal: bool) -> np.ndarray:
    """Boolean ``allowed`` (L, S) or (B, 1, L, S) for the causal and window constraints."""
    i = np.arange(n_q).reshape(n_q, 1)
    j = np.arange(n_kv).reshape(1, n_kv)
    if np.ndim(offset) > 0:
        pos = i + np.asarray(offset, dtype=np.int64).reshape(-1, 1, 1, 1)
    else:
        pos = i + int(offset)
    allowed = np.ones(np.broadcast_shapes(np.shape(pos), j.shape), dtype=bool)
    if causal:
        allowed &= j <= pos
    if left >= 0:
        allowed &= pos - j <= left
    if right >= 0:
        allowed &= j - pos <= right
    return allowed


def _bias(
    ctx: NodeContext,
    mask: np.ndarray | None,
    n_b: int,
    n_h: int,
    n_q: int,
    n_kv: int,
    past: int,
    nonpad: np.ndarray | None,
    causal: bool,
    left: int,
    right: int,
    cdt: np.dtype,
) -> np.ndarray:
    """The additive bias, shape (1 or B, 1 or Hq, L, S), contiguous, in the compute type."""
    bias = np.zeros((n_q, n_kv), dtype=cdt)
    if mask is not None:
        if mask.ndim == 0 or mask.ndim > 4:
            raise ctx.error(f"attn_mask must have rank 1 to 4, got shape {mask.shape}")
        pad = n_kv - mask.shape[-1]
        if pad < 0:
            raise ctx.error(
                f"attn_mask's last dimension ({mask.shape[-1]}) exceeds the total sequence "
                f"length ({n_kv})"
            )
        if mask.dtype == np.bool_:
            add = np.where(mask, cdt.type(0), cdt.type(-np.inf))
        else:
            add = mask.astype(cdt)
        if pad > 0:
            widths = [(0, 0)] * (add.ndim - 1) + [(0, pad)]
            add = np.pad(add, widths, constant_values=-np.inf)
        try:
            bias = bias + add
        except ValueError:
            raise ctx.error(
                f"attn_mask of shape {mask.shape} does not broadcast to (batch, heads, "
                f"{n_q}, {n_kv})"
            ) from None
    if nonpad is not None:
        nonpad = np.asarray(nonpad, dtype=np.int64).reshape(-1)
        offset: Any = nonpad - n_q
    else:
        offset = past
    if causal or left >= 0 or right >= 0:
        allowed = _frontier(n_q, n_kv, offset, left, right, causal)
        bias = bias + np.where(allowed, cdt.type(0), cdt.type(-np.inf))
    if nonpad is not None:
        valid = np.arange(n_kv).reshape(1, n_kv) < nonpad.reshape(-1, 1)
        pad_bias = np.where(valid, cdt.type(0), cdt.type(-np.inf))
        bias = bias + pad_bias.reshape(-1, 1, 1, n_kv)
    bias = bias.reshape((1,) * (4 - bias.ndim) + bias.shape)
    bb, bh = bias.shape[:2]
    if bb not in (1, n_b) or bh not in (1, n_h):
        raise ctx.error(
            f"attention bias of shape {bias.shape} does not broadcast to ({n_b}, {n_h}, "
            f"{n_q}, {n_kv})"
        )
    return np.ascontiguousarray(np.broadcast_to(bias, (bb, bh, n_q, n_kv)))


_PRECISION = {
    onnx.TensorProto.FLOAT: np.dtype(np.float32),
    onnx.TensorProto.DOUBLE: np.dtype(np.float64),
    onnx.TensorProto.FLOAT16: np.dtype(np.float16),
}


def _softmax_dtype(ctx: NodeContext, code: int | None, dtype: np.dtype) -> np.dtype:
    if code is None:
        return dtype
    if code == onnx.TensorProto.BFLOAT16:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    if code not in _PRECISION:
        raise ctx.unsupported(
            f"softmax_precision={code}; supported: 1 (FLOAT), 10 (FLOAT16), 11 (DOUBLE), "
            "16 (BFLOAT16)"
        )
    return _PRECISION[code]


def _attention(
    ctx: NodeContext,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_mask: np.ndarray | None,
    past_key: np.ndarray | None,
    past_value: np.ndarray | None,
    nonpad: np.ndarray | None,
    *,
    is_causal: int,
    kv_num_heads: int | None,
    q_num_heads: int | None,
    qk_matmul_output_mode: int,
    scale: float | None,
    softcap: float,
    softmax_precision: int | None,
    left: int = -1,
    right: int = -1,
    strict_4d: bool = False,
) -> tuple[np.ndarray, ...]:
    dtype = q.dtype
    if not (q.ndim == k.ndim == v.ndim) or q.ndim not in (3, 4):
        raise ctx.error(
            f"Q, K and V must all be 3-D or all be 4-D; got ranks {q.ndim}, {k.ndim}, {v.ndim}"
        )
    if (past_key is None) != (past_value is None):
        raise ctx.error("past_key and past_value must be given together")
    if nonpad is not None and past_key is not None:
        raise ctx.error("nonpad_kv_seqlen cannot be combined with past_key/past_value")
    if left < -1 or right < -1:
        raise ctx.error(f"window sizes must be -1 or >= 0, got ({left}, {right})")
    rank3 = q.ndim == 3
    if rank3:
        if not q_num_heads or not kv_num_heads:
            raise ctx.error("3-D Q, K, V need the q_num_heads and kv_num_heads attributes")
        for name, x, h in (("Q", q, q_num_heads), ("K", k, kv_num_heads), ("V", v, kv_num_heads)):
            if x.shape[2] % h:
                raise ctx.error(f"{name}'s hidden size {x.shape[2]} is not a multiple of {h}")
        q, k, v = _to_4d(q, q_num_heads), _to_4d(k, kv_num_heads), _to_4d(v, kv_num_heads)
    elif strict_4d and (q_num_heads is not None or kv_num_heads is not None):
        raise ctx.error("q_num_heads and kv_num_heads must not be set for 4-D inputs")
    n_b, hq, n_q, d = q.shape
    hkv = k.shape[1]
    if hkv == 0 or v.shape[1] != hkv or hq % hkv or k.shape[3] != d or k.shape[2] != v.shape[2]:
        raise ctx.error(
            f"incompatible shapes Q {q.shape}, K {k.shape}, V {v.shape} (after 3-D unpacking): "
            "q heads must be a multiple of kv heads, K and V must share heads and length"
        )
    if past_key is not None:
        present_k = np.concatenate((past_key.astype(dtype, copy=False), k), axis=2)
        present_v = np.concatenate((past_value.astype(v.dtype, copy=False), v), axis=2)
        past = past_key.shape[2]
    else:
        present_k, present_v, past = k, v, 0
    n_kv = present_k.shape[2]

    cdt = _compute_dtype(dtype)
    sdt = _softmax_dtype(ctx, softmax_precision, dtype)
    if sdt == np.float64:
        cdt = np.dtype(np.float64)
    tmode, smode = _narrow_mode(dtype), _narrow_mode(sdt)

    # Scale Q and K by sqrt(scale) each, the factor held in the input type (as the spec's
    # dataflow does); products of narrow types are rounded back to them.
    sc = (1.0 / math.sqrt(d)) if scale is None else float(scale)
    root = float(np.asarray(math.sqrt(sc)).astype(dtype).astype(np.float64))
    qs = _round_to(q.astype(cdt) * cdt.type(root), dtype, cdt)
    ks = _round_to(present_k.astype(cdt) * cdt.type(root), dtype, cdt)
    scores = _grouped_matmul(qs, ks.transpose(0, 1, 3, 2), hkv)  # (B, Hq, L, S)
    scores = np.ascontiguousarray(scores, dtype=cdt)

    bias = _bias(
        ctx, attn_mask, n_b, hq, n_q, n_kv, past, nonpad, bool(is_causal), left, right, cdt
    )
    bb, bh = bias.shape[:2]
    rows = np.arange(n_b * hq * n_q, dtype=np.int64)
    b_idx, h_idx, i_idx = rows // (hq * n_q), (rows // n_q) % hq, rows % n_q
    bias_of_row = ((b_idx if bb > 1 else 0) * bh + (h_idx if bh > 1 else 0)) * n_q + i_idx

    want_qk = ctx.n_outputs > 3 and ctx.outputs_used[3]
    mode = int(qk_matmul_output_mode) if want_qk else -1
    if want_qk and mode not in (0, 1, 2, 3):
        raise ctx.unsupported(f"qk_matmul_output_mode={mode}; supported: 0, 1, 2, 3")
    s2 = scores.reshape(n_b * hq * n_q, n_kv)  # explicit: n_kv may be 0
    qk = np.empty_like(s2) if want_qk else np.empty((0, 0), dtype=cdt)
    args = (
        s2,
        bias.reshape(bb * bh * n_q, n_kv),
        bias_of_row,
        qk,
        cdt.type(softcap or 0.0),
        tmode,
        smode,
        mode,
    )
    ctx.run_kernel("attention", "softmax_rows", s2.size, *args)

    y = _grouped_matmul(scores, present_v.astype(cdt), hkv)  # probabilities @ V
    if rank3:
        y = y.transpose(0, 2, 1, 3).reshape(n_b, n_q, -1)
    y = np.ascontiguousarray(y).astype(dtype, copy=False)
    outs: list[np.ndarray] = [y, present_k, present_v]
    if ctx.n_outputs > 3:
        outs.append(qk.reshape(n_b, hq, n_q, n_kv).astype(dtype) if want_qk else None)
    return tuple(outs[: max(ctx.n_outputs, 1)])


@onnx_op("Attention", since=23)
def attention_23(
    ctx: NodeContext,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_mask: np.ndarray | None = None,
    past_key: np.ndarray | None = None,
    past_value: np.ndarray | None = None,
    *,
    is_causal: int,
    kv_num_heads: int | None = None,
    q_num_heads: int | None = None,
    qk_matmul_output_mode: int,
    scale: float | None = None,
    softcap: float,
    softmax_precision: int | None = None,
) -> tuple[np.ndarray, ...]:
    """Attention-23: scaled dot-product attention with KV cache, GQA, masks and softcap."""
    return _attention(
        ctx,
        q,
        k,
        v,
        attn_mask,
        past_key,
        past_value,
        None,
        is_causal=is_causal,
        kv_num_heads=kv_num_heads,
        q_num_heads=q_num_heads,
        qk_matmul_output_mode=qk_matmul_output_mode,
        scale=scale,
        softcap=softcap,
        softmax_precision=softmax_precision,
    )


@onnx_op("Attention", since=24)
def attention_24(
    ctx: NodeContext,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_mask: np.ndarray | None = None,
    past_key: np.ndarray | None = None,
    past_value: np.ndarray | None = None,
    nonpad_kv_seqlen: np.ndarray | None = None,
    *,
    is_causal: int,
    kv_num_heads: int | None = None,
    q_num_heads: int | None = None,
    qk_matmul_output_mode: int,
    scale: float | None = None,
    softcap: float,
    softmax_precision: int | None = None,
) -> tuple[np.ndarray, ...]:
    """Attention-24: adds ``nonpad_kv_seqlen`` (external KV cache; per-batch causal offset)."""
    return _attention(
        ctx,
        q,
        k,
        v,
        attn_mask,
        past_key,
        past_value,
        nonpad_kv_seqlen,
        is_causal=is_causal,
        kv_num_heads=kv_num_heads,
        q_num_heads=q_num_heads,
        qk_matmul_output_mode=qk_matmul_output_mode,
        scale=scale,
        softcap=softcap,
        softmax_precision=softmax_precision,
    )


@onnx_op("Attention", since=25)
def attention_25(
    ctx: NodeContext,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_mask: np.ndarray | None = None,
    past_key: np.ndarray | None = None,
    past_value: np.ndarray | None = None,
    nonpad_kv_seqlen: np.ndarray | None = None,
    *,
    is_causal: int,
    kv_num_heads: int | None = None,
    left_window_size: int,
    q_num_heads: int | None = None,
    qk_matmul_output_mode: int,
    right_window_size: int,
    scale: float | None = None,
    softcap: float,
    softmax_precision: int | None = None,
) -> tuple[np.ndarray, ...]:
    """Attention-25: adds sliding windows (left/right_window_size); 4-D inputs take no heads."""
    return _attention(
        ctx,
        q,
        k,
        v,
        attn_mask,
        past_key,
        past_value,
        nonpad_kv_seqlen,
        is_causal=is_causal,
        kv_num_heads=kv_num_heads,
        q_num_heads=q_num_heads,
        qk_matmul_output_mode=qk_matmul_output_mode,
        scale=scale,
        softcap=softcap,
        softmax_precision=softmax_precision,
        left=left_window_size,
        right=right_window_size,
        strict_4d=True,
    )


_RULES = {"linear": 0, "gated": 1, "delta": 2, "gated_delta": 3}


@onnx_op("LinearAttention", since=27)
def linear_attention_27(
    ctx: NodeContext,
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    past_state: np.ndarray | None = None,
    decay: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    *,
    chunk_size: int,
    kv_num_heads: int | None = None,
    q_num_heads: int | None = None,
    scale: float,
    update_rule: str,
) -> tuple[np.ndarray, np.ndarray]:
    """LinearAttention-27: the token-by-token recurrence (linear, gated, delta, gated_delta).

    ``chunk_size`` is a tuning hint with no effect on values; the recurrence runs sequentially
    in float32 (a Numba kernel), which is exact to the definition.
    """
    if update_rule not in _RULES:
        raise ctx.error(f"update_rule must be one of {sorted(_RULES)}, got {update_rule!r}")
    rule = _RULES[update_rule]
    if not q_num_heads or not kv_num_heads or q_num_heads <= 0 or kv_num_heads <= 0:
        raise ctx.error("q_num_heads and kv_num_heads are required and must be positive")
    if q_num_heads % kv_num_heads:
        raise ctx.error(
            f"q_num_heads ({q_num_heads}) must be a multiple of kv_num_heads ({kv_num_heads})"
        )
    gated, delta = rule in (1, 3), rule >= 2
    if gated != (decay is not None):
        raise ctx.error(f"update_rule {update_rule!r} {'needs' if gated else 'forbids'} decay")
    if delta != (beta is not None):
        raise ctx.error(f"update_rule {update_rule!r} {'needs' if delta else 'forbids'} beta")
    for name, x in (("query", query), ("key", key), ("value", value)):
        if x.ndim != 3:
            raise ctx.error(f"{name} must be rank 3 (B, T, H*D), got shape {x.shape}")
    nb, nt, _ = query.shape
    if query.shape[2] % q_num_heads or key.shape[2] % kv_num_heads:
        raise ctx.error("query/key hidden sizes must be multiples of their head counts")
    if value.shape[2] % kv_num_heads:
        raise ctx.error("value's hidden size must be a multiple of kv_num_heads")
    dk = query.shape[2] // q_num_heads
    dv = value.shape[2] // kv_num_heads
    if key.shape != (nb, nt, kv_num_heads * dk) or value.shape[:2] != (nb, nt):
        raise ctx.error(f"key/value shapes {key.shape}, {value.shape} do not match query")
    f32 = np.float32
    q4 = np.ascontiguousarray(query.reshape(nb, nt, q_num_heads, dk), dtype=f32)
    k4 = np.ascontiguousarray(key.reshape(nb, nt, kv_num_heads, dk), dtype=f32)
    v4 = np.ascontiguousarray(value.reshape(nb, nt, kv_num_heads, dv), dtype=f32)
    if decay is not None:
        last = decay.shape[-1] if decay.ndim == 3 else -1
        if last == kv_num_heads:
            d4 = decay.reshape(nb, nt, kv_num_heads, 1)
        elif last == kv_num_heads * dk:
            d4 = decay.reshape(nb, nt, kv_num_heads, dk)
        else:
            raise ctx.error(
                f"decay must be (B, T, {kv_num_heads}) or (B, T, {kv_num_heads * dk}), "
                f"got {decay.shape}"
            )
        d4 = np.ascontiguousarray(np.broadcast_to(d4, (nb, nt, kv_num_heads, dk)), dtype=f32)
    else:
        d4 = np.zeros((0, 0, 0, 0), dtype=f32)
    if beta is not None:
        if beta.ndim != 3 or beta.shape[-1] not in (kv_num_heads, 1):
            raise ctx.error(f"beta must be (B, T, {kv_num_heads}) or (B, T, 1), got {beta.shape}")
        b3 = np.ascontiguousarray(np.broadcast_to(beta, (nb, nt, kv_num_heads)), dtype=f32)
    else:
        b3 = np.zeros((0, 0, 0), dtype=f32)
    shape = (nb, kv_num_heads, dk, dv)
    if past_state is not None:
        if past_state.shape != shape:
            raise ctx.error(f"past_state must have shape {shape}, got {past_state.shape}")
        state = np.array(past_state, dtype=f32, order="C")  # a fresh copy, updated in place
        state_dtype = past_state.dtype
    else:
        state = np.zeros(shape, dtype=f32)
        state_dtype = query.dtype
    sc = 1.0 / math.sqrt(dk) if not scale else float(scale)
    out = np.empty((nb, nt, q_num_heads, dv), dtype=f32)
    ctx.kernel("attention", "linear_attention")(
        q4, k4, v4, state, d4, b3, q_num_heads // kv_num_heads, rule, f32(sc), out
    )
    y = out.reshape(nb, nt, q_num_heads * dv).astype(query.dtype, copy=False)
    return y, state.astype(state_dtype, copy=False)


@onnx_op("CausalConvWithState", since=27)
def causal_conv_with_state_27(
    ctx: NodeContext,
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    past_state: np.ndarray | None = None,
    *,
    activation: str,
) -> tuple[np.ndarray, np.ndarray]:
    """CausalConvWithState-27: depthwise causal 1-D conv carrying the last k-1 inputs."""
    if activation not in ("none", "silu", "swish"):
        raise ctx.error(f"activation must be 'none', 'silu' or 'swish', got {activation!r}")
    if x.ndim != 3 or weight.ndim != 3 or weight.shape[1] != 1:
        raise ctx.error(
            f"input must be (B, C, L) and weight (C, 1, k); got {x.shape} and {weight.shape}"
        )
    nb, nc, n = x.shape
    kw = weight.shape[2]
    if weight.shape[0] != nc or kw < 1:
        raise ctx.error(f"weight {weight.shape} does not match {nc} channels")
    dtype = x.dtype
    cdt = _compute_dtype(dtype)
    if bias is not None and bias.shape != (nc,):
        raise ctx.error(f"bias must have shape ({nc},), got {bias.shape}")
    if past_state is not None and past_state.shape != (nb, nc, kw - 1):
        raise ctx.error(f"past_state must have shape {(nb, nc, kw - 1)}, got {past_state.shape}")
    xc = np.ascontiguousarray(x, dtype=cdt)
    w = np.ascontiguousarray(weight.reshape(nc, kw), dtype=cdt)
    b = np.zeros(nc, dtype=cdt) if bias is None else np.ascontiguousarray(bias, dtype=cdt)
    st = (
        np.zeros((nb, nc, kw - 1), dtype=cdt)
        if past_state is None
        else np.ascontiguousarray(past_state, dtype=cdt)
    )
    out = np.empty_like(xc)
    new_state = np.empty((nb, nc, kw - 1), dtype=cdt)
    ctx.kernel("attention", "causal_conv")(
        xc, w, b, st, activation != "none", _narrow_mode(dtype), out, new_state
    )
    return out.astype(dtype, copy=False), new_state.astype(dtype, copy=False)


def _run_mod(ctx: NodeContext, graph: Any, x: np.ndarray, what: str) -> np.ndarray:
    outs = ctx.run_subgraph(graph, [x])
    if len(outs) != 1:
        raise ctx.error(f"{what} must have exactly one output, it has {len(outs)}")
    y = np.asarray(outs[0])
    if y.shape != x.shape:
        raise ctx.error(f"{what} must keep the shape {x.shape}, it returned {y.shape}")
    return y


@onnx_op("FlexAttention", since=1, domain="ai.onnx.preview")
def flex_attention_1(
    ctx: NodeContext,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    prob_mod: Any = None,
    scale: float | None = None,
    score_mod: Any = None,
    softmax_precision: int | None = None,
) -> np.ndarray:
    """ai.onnx.preview FlexAttention-1: attention with score_mod / prob_mod subgraphs.

    Scores are formed in the input type (sqrt(scale) applied to Q and K, as the function body
    does), cast to the softmax precision (float32 for float16/bfloat16/float32 inputs, float64
    for double, or ``softmax_precision``), passed through ``score_mod``, softmaxed, passed
    through ``prob_mod`` and contracted with V in that precision; Y has V's type.
    """
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ctx.error(f"Q, K, V must be rank 4, got {q.shape}, {k.shape}, {v.shape}")
    n_b, hq, n_q, d = q.shape
    hkv, n_kv = k.shape[1], k.shape[2]
    if v.shape[1] != hkv or v.shape[2] != n_kv or k.shape[3] != d or hkv == 0 or hq % hkv:
        raise ctx.error(
            f"incompatible shapes Q {q.shape}, K {k.shape}, V {v.shape}: K and V must share "
            "heads and length, Q and K the head size, and q heads be a multiple of kv heads"
        )
    dtype = q.dtype
    if softmax_precision is None:
        sdt = np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)
    else:
        sdt = _softmax_dtype(ctx, softmax_precision, dtype)
    cdt = np.dtype(np.float64) if np.float64 in (dtype, sdt) else np.dtype(np.float32)
    sc = (1.0 / math.sqrt(d)) if scale is None else float(scale)
    # sqrt(scale) is taken in float32 whatever the input type, as the function body does.
    root = float(np.sqrt(np.float32(sc)).astype(dtype).astype(np.float64))
    qs = _round_to(q.astype(cdt) * cdt.type(root), dtype, cdt)
    ks = _round_to(k.astype(cdt) * cdt.type(root), dtype, cdt)
    scores = _grouped_matmul(qs, ks.transpose(0, 1, 3, 2), hkv)
    scores = _round_to(np.ascontiguousarray(scores, dtype=cdt), dtype, cdt)  # Q K^T in T
    if score_mod is not None:
        scores = _run_mod(ctx, score_mod, scores.astype(sdt), "score_mod")
    scores = np.array(scores, dtype=cdt, order="C")  # fresh: the kernel writes in place
    s2 = scores.reshape(n_b * hq * n_q, n_kv)
    args = (
        s2,
        np.zeros((1, n_kv), dtype=cdt),
        np.zeros(s2.shape[0], dtype=np.int64),
        np.empty((0, 0), dtype=cdt),
        cdt.type(0.0),
        _narrow_mode(sdt),
        _narrow_mode(sdt),
        -1,
    )
    ctx.run_kernel("attention", "softmax_rows", s2.size, *args)
    probs = scores
    if prob_mod is not None:
        probs = _run_mod(ctx, prob_mod, probs.astype(sdt), "prob_mod").astype(cdt)
    y = _grouped_matmul(probs, v.astype(cdt), hkv)
    return _round_to(y, sdt, cdt).astype(v.dtype)


@onnx_op("RotaryEmbedding", since=23)
def rotary_embedding_23(
    ctx: NodeContext,
    x: np.ndarray,
    cos_cache: np.ndarray,
    sin_cache: np.ndarray,
    position_ids: np.ndarray | None = None,
    *,
    interleaved: int,
    num_heads: int | None = None,
    rotary_embedding_dim: int,
) -> np.ndarray:
    """RotaryEmbedding-23 (RoPE) on 4-D (B, H, S, D) or 3-D (B, S, H*D) input.

    Caches are (max_position + 1, rot/2) indexed by ``position_ids`` (B, S), or (B, S, rot/2)
    without them. float16/bfloat16 run in float32 with each product and sum rounded to the
    input type.
    """
    dtype = x.dtype
    if x.ndim == 4:
        x4 = x
    elif x.ndim == 3:
        if not num_heads or x.shape[2] % num_heads:
            raise ctx.error(
                f"3-D input needs num_heads dividing its hidden size {x.shape[2]}, "
                f"got num_heads={num_heads}"
            )
        x4 = _to_4d(x, num_heads)
    else:
        raise ctx.error(f"X must be 3-D or 4-D, got shape {x.shape}")
    nb, _, ns, nd = x4.shape
    rot = rotary_embedding_dim or nd
    if rot % 2 or rot > nd:
        raise ctx.error(f"rotary_embedding_dim {rot} must be even and at most head size {nd}")
    half = rot // 2
    if position_ids is not None:
        if cos_cache.ndim != 2 or sin_cache.shape != cos_cache.shape:
            raise ctx.error("with position_ids, cos_cache and sin_cache must be 2-D and alike")
        pos = np.asarray(position_ids, dtype=np.int64)
        if pos.shape != (nb, ns):
            raise ctx.error(f"position_ids must have shape {(nb, ns)}, got {pos.shape}")
        if pos.size and (pos.min() < 0 or pos.max() >= cos_cache.shape[0]):
            raise ctx.error(
                f"position_ids must lie in [0, {cos_cache.shape[0]}), found "
                f"[{pos.min()}, {pos.max()}]"
            )
        cos2, sin2 = cos_cache, sin_cache
    else:
        if cos_cache.shape != (nb, ns, cos_cache.shape[-1]) or sin_cache.shape != cos_cache.shape:
            raise ctx.error(
                f"without position_ids the caches must be (B, S, rot/2) = ({nb}, {ns}, {half}); "
                f"got {cos_cache.shape} and {sin_cache.shape}"
            )
        cos2 = cos_cache.reshape(nb * ns, -1)
        sin2 = sin_cache.reshape(nb * ns, -1)
        pos = np.arange(nb * ns, dtype=np.int64).reshape(nb, ns)
    if cos2.shape[1] != half:
        raise ctx.error(f"the caches' last dimension {cos2.shape[1]} must be rot/2 = {half}")
    cdt = _compute_dtype(dtype)
    xc = np.ascontiguousarray(x4, dtype=cdt)
    out = np.empty_like(xc)
    ctx.kernel("attention", "rotary")(
        xc,
        np.ascontiguousarray(cos2, dtype=cdt),
        np.ascontiguousarray(sin2, dtype=cdt),
        pos,
        rot,
        bool(interleaved),
        _narrow_mode(dtype),
        out,
    )
    if x.ndim == 3:
        out = out.transpose(0, 2, 1, 3).reshape(x.shape)
    return np.ascontiguousarray(out).astype(dtype, copy=False)
