"""Attention family against onnx's ReferenceEvaluator.

Attention 23/24/25, LinearAttention-27, CausalConvWithState-27 and ai.onnx.preview
FlexAttention-1: each registered version is tested at an opset that selects it, over the
element types it allows, 3-D and 4-D layouts, GQA, KV cache, masks of several ranks and
kinds, causal/window/padding combinations, the debug output modes, zero-length queries and one
case large enough for the parallel softmax kernel.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper
from oracle import check_node, make_node_model

import onnxjit
from onnxjit import types
from onnxjit.errors import InvalidArgumentError

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = dict(rtol=1e-4, atol=1e-5)
TOL = {
    np.dtype(np.float32): F32,
    np.dtype(np.float64): dict(rtol=1e-10, atol=1e-12),
    # Narrow types: the kernels round where the reference rounds; the slack covers float32
    # vs numpy summation order in the matmuls.
    np.dtype(np.float16): dict(rtol=2e-3, atol=2e-3),
    BF16: dict(rtol=2**-6, atol=2**-7),
}


def rand(rng: np.random.Generator, *shape: int, dtype=np.float32) -> np.ndarray:
    return rng.random(shape).astype(dtype)


def attn_inputs(
    rng,
    dtype=np.float32,
    b=2,
    hq=4,
    hkv=4,
    lq=3,
    lkv=5,
    d=8,
    dv=8,
    rank=4,
    mask=None,
    past=0,
    nonpad=None,
):
    if rank == 4:
        q = rand(rng, b, hq, lq, d, dtype=dtype)
        k = rand(rng, b, hkv, lkv, d, dtype=dtype)
        v = rand(rng, b, hkv, lkv, dv, dtype=dtype)
    else:
        q = rand(rng, b, lq, hq * d, dtype=dtype)
        k = rand(rng, b, lkv, hkv * d, dtype=dtype)
        v = rand(rng, b, lkv, hkv * dv, dtype=dtype)
    ins = {"Q": q, "K": k, "V": v, "attn_mask": mask, "past_key": None, "past_value": None}
    if past:
        ins["past_key"] = rand(rng, b, hkv, past, d, dtype=dtype)
        ins["past_value"] = rand(rng, b, hkv, past, dv, dtype=dtype)
    if nonpad is not None:
        ins["nonpad_kv_seqlen"] = np.asarray(nonpad, dtype=np.int64)
    return ins


# --- Attention-23 --------------------------------------------------------------------------

ATT23 = [
    # id, input kwargs, attrs, n_outputs
    ("4d", {}, {}, 1),
    ("4d_scale_softcap", {}, {"scale": 0.3, "softcap": 2.0}, 1),
    ("3d_gqa", {"rank": 3, "hq": 6, "hkv": 2}, {"q_num_heads": 6, "kv_num_heads": 2}, 1),
    (
        "3d_mqa_dv",
        {"rank": 3, "hq": 4, "hkv": 1, "dv": 3},
        {"q_num_heads": 4, "kv_num_heads": 1},
        1,
    ),
    ("causal", {"lq": 4, "lkv": 4}, {"is_causal": 1}, 1),
    ("causal_past", {"past": 3}, {"is_causal": 1}, 3),
    ("past_qk0", {"past": 2}, {"qk_matmul_output_mode": 0}, 4),
    ("past_qk1", {"past": 2}, {"qk_matmul_output_mode": 1, "softcap": 1.5}, 4),
    ("past_qk3_gqa", {"past": 2, "hq": 4, "hkv": 2}, {"qk_matmul_output_mode": 3}, 4),
    ("zero_len_q", {"lq": 0}, {}, 1),
]


@pytest.mark.parametrize("case", ATT23, ids=[c[0] for c in ATT23])
def test_attention_23(case):
    _, kw, attrs, n_out = case
    ins = attn_inputs(np.random.default_rng(0), **kw)
    check_node("Attention", ins, attrs, opset=23, n_outputs=n_out, **F32)


MASKS = [
    ("bool_2d", lambda r: r.random((3, 5)) > 0.3),
    ("bool_rank1", lambda r: r.random(5) > 0.3),
    ("float_4d", lambda r: r.standard_normal((2, 4, 3, 5)).astype(np.float32)),
    ("float_3d_heads", lambda r: r.standard_normal((4, 3, 5)).astype(np.float32)),
    (
        "bool_all_false_row",
        lambda r: np.array([[True] * 5, [False] * 5, [True, False] * 2 + [True]]),
    ),
]


# The reference evaluator cannot combine a rank-1 mask with is_causal (it unpacks the mask's
# last two dimensions), so that pair is left out; rank 1 is tested without causal masking.
MASK_CASES = [(m, c) for m in MASKS for c in (0, 1) if not (m[0] == "bool_rank1" and c)]


@pytest.mark.parametrize(
    ("mask", "causal"), MASK_CASES, ids=[f"{m[0]}-causal{c}" for m, c in MASK_CASES]
)
def test_attention_23_masks(mask, causal):
    rng = np.random.default_rng(1)
    ins = attn_inputs(rng, mask=mask[1](rng))
    check_node(
        "Attention", ins, {"is_causal": causal, "qk_matmul_output_mode": 2}, 23, n_outputs=4, **F32
    )


@pytest.mark.parametrize("dtype", [np.float64, np.float16, BF16], ids=["f64", "f16", "bf16"])
def test_attention_23_dtypes(dtype):
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(2)
    mask = (rng.standard_normal((3, 5)) * 0.5).astype(dtype)
    ins = attn_inputs(rng, dtype=dtype, mask=mask, past=2)
    check_node("Attention", ins, {"is_causal": 1}, 23, n_outputs=3, **TOL[dtype])


@pytest.mark.parametrize("precision", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_attention_23_softmax_precision(precision):
    ins = attn_inputs(np.random.default_rng(3), dtype=np.float16)
    attrs = {"softmax_precision": precision, "qk_matmul_output_mode": 3}
    check_node("Attention", ins, attrs, 23, n_outputs=4, **TOL[np.dtype(np.float16)])


def test_attention_23_parallel_path():
    # 2 * 4 * 128 * 128 scores: at the parallel threshold of the softmax kernel.
    ins = attn_inputs(np.random.default_rng(4), lq=128, lkv=128, d=16, dv=16)
    check_node("Attention", ins, {"is_causal": 1}, 23, **F32)


def run_jit(op, ins, attrs, opset, ranks=(4,)):
    """Run onnxjit alone (for inputs that the reference evaluator also rejects)."""
    model = make_node_model(op, ins, attrs, opset, n_outputs=len(ranks))
    elem = types.onnx_elem_type(next(iter(ins.values())).dtype)
    for out, rank in zip(model.graph.output, ranks):
        out.type.CopyFrom(helper.make_tensor_type_proto(elem, [f"d{i}" for i in range(rank)]))
    sess = onnxjit.InferenceSession(model.SerializeToString())
    return sess.run(None, {k: v for k, v in ins.items() if v is not None})


def test_attention_23_bad_heads():
    ins = attn_inputs(np.random.default_rng(5), rank=3, hq=3, hkv=3)
    with pytest.raises(InvalidArgumentError, match="multiple"):
        run_jit("Attention", ins, {"q_num_heads": 3, "kv_num_heads": 2}, 23, (3,))


# --- Attention-24: nonpad_kv_seqlen --------------------------------------------------------

ATT24 = [
    ("nonpad", {"nonpad": [3, 5]}, {}),
    ("nonpad_causal", {"lq": 2, "lkv": 6, "nonpad": [4, 6]}, {"is_causal": 1}),
    ("nonpad_negative_offset", {"lq": 4, "lkv": 6, "nonpad": [2, 6]}, {"is_causal": 1}),
    (
        "nonpad_gqa_3d",
        {"rank": 3, "hq": 4, "hkv": 2, "nonpad": [1, 4]},
        {"q_num_heads": 4, "kv_num_heads": 2},
    ),
    ("past_causal", {"past": 2}, {"is_causal": 1}),
]


@pytest.mark.parametrize("case", ATT24, ids=[c[0] for c in ATT24])
def test_attention_24(case):
    _, kw, attrs = case
    ins = attn_inputs(np.random.default_rng(6), **kw)
    check_node("Attention", ins, attrs, 24, **F32)


def test_attention_24_short_mask_bf16():
    # A mask shorter than the kv length is padded with -inf; bfloat16 composition.
    rng = np.random.default_rng(7)
    mask = rng.random((2, 4, 3, 4)).astype(BF16)
    ins = attn_inputs(rng, dtype=BF16, lkv=6, mask=mask, nonpad=[4, 3])
    check_node("Attention", ins, {"is_causal": 1}, 24, **TOL[BF16])


# --- Attention-25: sliding windows ---------------------------------------------------------

ATT25 = [
    ("left2", {"lq": 4, "lkv": 6}, {"left_window_size": 2, "right_window_size": 1}),
    ("causal_left1_past", {"past": 3}, {"is_causal": 1, "left_window_size": 1}),
    (
        "right0_nonpad",
        {"lkv": 6, "nonpad": [4, 6]},
        {"right_window_size": 0, "left_window_size": 3},
    ),
    ("window_mask_rank3", {"mask": np.ones((4, 3, 5), dtype=bool)}, {"left_window_size": 0}),
]


@pytest.mark.parametrize("case", ATT25, ids=[c[0] for c in ATT25])
def test_attention_25(case):
    _, kw, attrs = case
    ins = attn_inputs(np.random.default_rng(8), **kw)
    check_node("Attention", ins, attrs, 25, **F32)


def test_attention_25_rejects_heads_on_4d():
    ins = attn_inputs(np.random.default_rng(9))
    with pytest.raises(InvalidArgumentError, match="4-D"):
        run_jit("Attention", ins, {"q_num_heads": 4, "kv_num_heads": 4}, 25)


# --- LinearAttention-27 --------------------------------------------------------------------

LIN = [
    # id, rule, hq, hkv, decay last dim ("k": per key dim, "h": per head), beta last ("h"/"1"), past
    ("linear", "linear", 2, 2, None, None, False),
    ("gated_k", "gated", 2, 2, "k", None, True),
    ("gated_h", "gated", 2, 2, "h", None, False),
    ("delta", "delta", 2, 2, None, "h", True),
    ("gated_delta_gqa", "gated_delta", 4, 2, "h", "h", True),
    ("gated_delta_mqa_beta1", "gated_delta", 3, 1, "k", "1", False),
]


def lin_inputs(rng, rule, hq, hkv, decay, beta, past, dtype=np.float32, b=2, t=5, dk=4, dv=3):
    key = rng.standard_normal((b, t, hkv, dk))
    key /= np.linalg.norm(key, axis=-1, keepdims=True)
    ins = {
        "query": rand(rng, b, t, hq * dk, dtype=dtype),
        "key": key.reshape(b, t, hkv * dk).astype(dtype),
        "value": rand(rng, b, t, hkv * dv, dtype=dtype),
        "past_state": rand(rng, b, hkv, dk, dv, dtype=dtype) if past else None,
        "decay": None,
        "beta": None,
    }
    if decay:
        last = hkv * dk if decay == "k" else hkv
        ins["decay"] = (-rng.random((b, t, last))).astype(dtype)
    if beta:
        ins["beta"] = rng.random((b, t, hkv if beta == "h" else 1)).astype(dtype)
    return ins


@pytest.mark.parametrize("case", LIN, ids=[c[0] for c in LIN])
def test_linear_attention_27(case):
    _, rule, hq, hkv, decay, beta, past = case
    ins = lin_inputs(np.random.default_rng(10), rule, hq, hkv, decay, beta, past)
    attrs = {"update_rule": rule, "q_num_heads": hq, "kv_num_heads": hkv}
    check_node("LinearAttention", ins, attrs, 27, n_outputs=2, **F32)


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["f16", "bf16"])
def test_linear_attention_27_narrow(dtype):
    ins = lin_inputs(np.random.default_rng(11), "gated_delta", 2, 2, "h", "h", True, dtype=dtype)
    attrs = {"q_num_heads": 2, "kv_num_heads": 2, "scale": 0.25}
    check_node("LinearAttention", ins, attrs, 27, n_outputs=2, **TOL[np.dtype(dtype)])


def test_linear_attention_27_rule_needs_inputs():
    ins = lin_inputs(np.random.default_rng(12), "linear", 2, 2, None, None, False)
    with pytest.raises(InvalidArgumentError, match="decay"):
        run_jit("LinearAttention", ins, {"q_num_heads": 2, "kv_num_heads": 2}, 27, (3, 4))


# --- CausalConvWithState-27 ----------------------------------------------------------------

CONV = [
    ("plain", 3, False, False, "none", 6),
    ("bias_state_silu", 4, True, True, "silu", 5),
    ("swish_short_input", 4, True, True, "swish", 2),
    ("k1", 1, True, False, "none", 4),
    ("zero_length", 3, False, True, "none", 0),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("case", CONV, ids=[c[0] for c in CONV])
def test_causal_conv_with_state_27(case, dtype):
    _, kw, bias, past, act, n = case
    rng = np.random.default_rng(13)
    b, c = 2, 3
    ins = {
        "input": rng.standard_normal((b, c, n)).astype(dtype),
        "weight": rng.standard_normal((c, 1, kw)).astype(dtype),
        "bias": rng.standard_normal(c).astype(dtype) if bias else None,
        "past_state": rng.standard_normal((b, c, kw - 1)).astype(dtype) if past else None,
    }
    tol = TOL[np.dtype(dtype)] if np.dtype(dtype) != np.float32 else F32
    check_node("CausalConvWithState", ins, {"activation": act}, 27, n_outputs=2, **tol)


# --- FlexAttention-1 (ai.onnx.preview) -----------------------------------------------------


def _mod_graph(op: str, value: float) -> object:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "H", "L", "S"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "H", "L", "S"])
    c = helper.make_tensor("c", TensorProto.FLOAT, [], [value])
    return helper.make_graph([helper.make_node(op, ["x", "c"], ["y"])], "mod", [x], [y], [c])


def _causal_score_mod() -> object:
    # Where(q_idx >= k_idx, scores, -inf) from the scores' own shape.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "H", "L", "S"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "H", "L", "S"])
    nodes = [
        helper.make_node("Shape", ["x"], ["L"], start=2, end=3),
        helper.make_node("Shape", ["x"], ["S"], start=3, end=4),
        helper.make_node("Squeeze", ["L"], ["l"]),
        helper.make_node("Squeeze", ["S"], ["s"]),
        helper.make_node("Range", ["zero", "l", "one"], ["qi"]),
        helper.make_node("Range", ["zero", "s", "one"], ["ki"]),
        helper.make_node("Unsqueeze", ["qi", "ax1"], ["q2"]),
        helper.make_node("GreaterOrEqual", ["q2", "ki"], ["m"]),
        helper.make_node("Where", ["m", "x", "ninf"], ["y"]),
    ]
    inits = [
        helper.make_tensor("zero", TensorProto.INT64, [], [0]),
        helper.make_tensor("one", TensorProto.INT64, [], [1]),
        helper.make_tensor("ax1", TensorProto.INT64, [1], [1]),
        helper.make_tensor("ninf", TensorProto.FLOAT, [], [float("-inf")]),
    ]
    return helper.make_graph(nodes, "causal", [x], [y], inits)


FLEX = [
    ("plain", np.float32, 4, {}),
    ("gqa_scale", np.float32, 2, {"scale": 0.2}),
    ("score_mod_causal", np.float32, 4, {"score_mod": "causal"}),
    ("prob_mod_mul", np.float32, 4, {"prob_mod": ("Mul", 0.5)}),
    ("score_mod_add_f16", np.float16, 4, {"score_mod": ("Add", 0.25)}),
    ("f64", np.float64, 2, {}),
    ("bf16", BF16, 4, {}),
]


@pytest.mark.parametrize("case", FLEX, ids=[c[0] for c in FLEX])
def test_flex_attention_1(case):
    _, dtype, hkv, spec = case
    rng = np.random.default_rng(14)
    attrs = {}
    for key, val in spec.items():
        if key in ("score_mod", "prob_mod"):
            attrs[key] = _causal_score_mod() if val == "causal" else _mod_graph(*val)
        else:
            attrs[key] = val
    ins = {
        "Q": rand(rng, 2, 4, 3, 8, dtype=dtype),
        "K": rand(rng, 2, hkv, 4, 8, dtype=dtype),
        "V": rand(rng, 2, hkv, 4, 5, dtype=dtype),
    }
    tol = TOL[np.dtype(dtype)] if np.dtype(dtype) != np.float32 else F32
    check_node("FlexAttention", ins, attrs, 1, domain="ai.onnx.preview", **tol)


# --- RotaryEmbedding-23 --------------------------------------------------------------------

ROPE = [
    # id, rank, interleaved, rotary dim, with position ids
    ("4d_pos", 4, 0, 0, True),
    ("4d_interleaved_partial", 4, 1, 4, True),
    ("3d_no_pos", 3, 0, 0, False),
    ("3d_no_pos_interleaved_partial", 3, 1, 6, False),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("case", ROPE, ids=[c[0] for c in ROPE])
def test_rotary_embedding_23(case, dtype):
    _, rank, inter, rot, with_pos = case
    rng = np.random.default_rng(15)
    b, h, s, d = 2, 3, 4, 8
    half = (rot or d) // 2
    x = rng.standard_normal((b, h, s, d) if rank == 4 else (b, s, h * d)).astype(dtype)
    if with_pos:
        angles = rng.random((10, half)) * 3
        pos = rng.integers(0, 10, (b, s)).astype(np.int64)
    else:
        angles = rng.random((b, s, half)) * 3
        pos = None
    ins = {
        "X": x,
        "cos_cache": np.cos(angles).astype(dtype),
        "sin_cache": np.sin(angles).astype(dtype),
        "position_ids": pos,
    }
    attrs = {"interleaved": inter, "rotary_embedding_dim": rot}
    if rank == 3:
        attrs["num_heads"] = h
    tol = TOL[np.dtype(dtype)] if np.dtype(dtype) != np.float32 else F32
    check_node("RotaryEmbedding", ins, attrs, 23, **tol)


def test_rotary_embedding_23_position_out_of_range():
    rng = np.random.default_rng(16)
    ins = {
        "X": rng.standard_normal((1, 2, 3, 4)).astype(np.float32),
        "cos_cache": np.ones((3, 2), np.float32),
        "sin_cache": np.zeros((3, 2), np.float32),
        "position_ids": np.array([[0, 1, 3]], dtype=np.int64),
    }
    with pytest.raises(InvalidArgumentError, match="position_ids"):
        run_jit("RotaryEmbedding", ins, {}, 23)


def test_attention_24_empty_kv():
    # No key at all: every row is fully masked, which the spec defines as a zero output row.
    # (The reference evaluator cannot take a max over an empty axis, hence no oracle.)
    rng = np.random.default_rng(17)
    ins = attn_inputs(rng, lkv=0)
    (y,) = run_jit("Attention", ins, {}, 24)
    assert y.shape == (2, 4, 3, 8) and y.dtype == np.float32
    assert not y.any()


@pytest.mark.parametrize(("mode", "dtype"), [(1, np.float16), (2, BF16)], ids=["f16", "bf16"])
def test_narrow_rounding_matches_numpy_casts(mode, dtype):
    # The kernels' rounding helper must agree with numpy's / ml_dtypes' casts: ties to even,
    # float16 subnormals, overflow to infinity, signed zeros, inf and NaN.
    from onnxjit.kernels.cpu import attention as katt

    rng = np.random.default_rng(18)
    vals = np.concatenate(
        [
            rng.standard_normal(4000) * 10.0 ** rng.integers(-9, 6, 4000),
            [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65519.0, 65520.0, -70000.0],
            [2.0**-24, 3 * 2.0**-25, 2.0**-25, 1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-8],
        ]
    ).astype(np.float32)
    got = vals.copy()
    katt.round_array(got, mode)
    with np.errstate(over="ignore"):  # the overflow to infinity is part of what is tested
        want = vals.astype(dtype).astype(np.float32)
    np.testing.assert_array_equal(got, want)
