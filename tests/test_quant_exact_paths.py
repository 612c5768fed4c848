"""The fast paths of quantized models compute exactly what the operators define.

* MatMulInteger's exact product (the micro-kernel's int16-pair mode on x86; float32 blocks,
  exact while each block's sums stay below 2**24, elsewhere) against a numpy int64 oracle
  and onnxruntime: inner lengths above one block and not a
  multiple of it, uint8/int8 mixes, per-row a_zero_point, per-column b_zero_point, batched A,
  B constant (packed once) or fed, products large enough for the thread pool.
* DynamicQuantizeLinear's two-pass kernel bit for bit against onnxruntime (scale, zero point,
  round half to even), serial and parallel sizes.
* Per-tensor QuantizeLinear / DequantizeLinear as members of fused elementwise groups (a Q->DQ
  pair is one fused node) and as lone generated kernels, bit for bit against onnxruntime;
  DequantizeLinear of a constant weight feeding MatMul folded at load.
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator
from oracle import matmul_integer_feeds, matmul_integer_model

import onnxjit

U8, I8 = np.uint8, np.int8
_ONNX_TYPE = {U8: TP.UINT8, I8: TP.INT8}


def _ints(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


def _session(model: onnx.ModelProto, threads: int = 2, profile: bool = False):
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = threads
    so.enable_profiling = profile
    return onnxjit.InferenceSession(model.SerializeToString(), so)


def _ort(model: onnx.ModelProto, feeds: dict, optimize: bool = True) -> list:
    so = ort.SessionOptions()
    if not optimize:  # onnxruntime's own rewrites (QDQ fusions) change results
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _profiled_ops(sess, feeds: dict) -> list[str]:
    """The operators of the nodes a second run of ``sess`` ran (the first plans the graph)."""
    sess.run(None, feeds)
    path = sess.end_profiling()
    try:
        with open(path) as f:
            events = json.load(f)
    finally:
        os.remove(path)
    return [e["args"]["op"] for e in events if "op" in e.get("args", {})]


# ---------------------------------------------------------------------------------------------
# MatMulInteger
# ---------------------------------------------------------------------------------------------


# (A shape, A type, B shape, B type, a_zero_point shape or None, b_zero_point shape or None)
MATMUL_INTEGER = {
    # a BERT layer's FFN product at batch 1, sequence 16: the pool's tiles, K in 2 blocks
    "bert_ffn": ((16, 768), U8, (768, 3072), I8, (), ()),
    "batched_a": ((2, 8, 768), U8, (768, 768), I8, (), None),
    "u8u8_col_zp": ((3, 5, 1000), U8, (1000, 37), U8, (), (37,)),
    "s8s8_row_col_zp": ((7, 513), I8, (513, 19), I8, (7,), (19,)),
    "s8u8_no_zp": ((7, 300), I8, (300, 19), U8, None, None),
    "long_k": ((9, 3001), U8, (3001, 40), U8, (), (40,)),
    "batched_row_zp": ((4, 6, 256), U8, (256, 64), I8, (6,), ()),
    "one": ((1, 1), U8, (1, 1), I8, (), ()),
}


@pytest.mark.parametrize("b_const", [True, False], ids=["b_const", "b_fed"])
@pytest.mark.parametrize("case", list(MATMUL_INTEGER))
def test_matmul_integer_exact(case, b_const):
    a_shape, a_dt, b_shape, b_dt, azp_shape, bzp_shape = MATMUL_INTEGER[case]
    rng = np.random.default_rng(sorted(MATMUL_INTEGER).index(case))
    a = _ints(rng, a_dt, a_shape)
    b = _ints(rng, b_dt, b_shape)
    azp = None if azp_shape is None else _ints(rng, a_dt, azp_shape)
    bzp = None if bzp_shape is None else _ints(rng, b_dt, bzp_shape)
    model = matmul_integer_model(
        a_shape, a_dt, b, b_dt, None if azp is None else azp_shape, bzp, b_const
    )
    feeds = matmul_integer_feeds(a, b, azp, bzp, b_const)
    # oracle: int64 arithmetic, a per-row zero point subtracted along the rows of A
    av = a.astype(np.int64)
    if azp is not None:
        av = av - (azp.astype(np.int64).reshape(-1, 1) if azp.size > 1 else azp.astype(np.int64))
    bv = b.astype(np.int64) - (0 if bzp is None else bzp.astype(np.int64))
    want = (av @ bv).astype(np.int32)
    for threads in (1, 2):
        got = _session(model, threads).run(None, feeds)[0]
        assert got.dtype == np.int32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    # onnxruntime rejects a per-row a_zero_point, and its uint8 x int8 kernel on CPUs without
    # VNNI adds pairs of raw products in saturating int16 (vpmaddubsw: 255 * 127 * 2 > 32767,
    # before the zero points are accounted for), so it is exact only on the other cases.
    if not (azp is not None and azp.size > 1) and not (a_dt == U8 and b_dt == I8):
        np.testing.assert_array_equal(_ort(model, feeds)[0], want)


# ---------------------------------------------------------------------------------------------
# DynamicQuantizeLinear
# ---------------------------------------------------------------------------------------------


def _dql_model(shape):
    graph = oh.make_graph(
        [oh.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])],
        "g",
        [oh.make_tensor_value_info("x", TP.FLOAT, list(shape))],
        [
            oh.make_tensor_value_info("y", TP.UINT8, list(shape)),
            oh.make_tensor_value_info("s", TP.FLOAT, []),
            oh.make_tensor_value_info("z", TP.UINT8, []),
        ],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])


@pytest.mark.parametrize(
    "shape", [(3, 5), (16, 768), (64, 3072), (100003,)], ids=["tiny", "b1s16", "pool", "odd"]
)
def test_dynamic_quantize_linear_matches_onnxruntime(shape):
    model = _dql_model(shape)
    sess = _session(model)
    rng = np.random.default_rng(len(shape) * 1000 + shape[-1])
    for trial in range(6):
        scale = rng.uniform(0.05, 20.0)
        shift = rng.uniform(-2.0, 4.0) if trial < 4 else (3.0 if trial == 4 else -3.0)
        x = (rng.standard_normal(shape) * scale + shift * scale).astype(np.float32)
        got = sess.run(None, {"x": x})
        want = _ort(model, {"x": x})
        for g, w, name in zip(got, want, ("y", "y_scale", "y_zero_point")):
            assert g.dtype == w.dtype and g.shape == w.shape, name
            np.testing.assert_array_equal(g, w, err_msg=name)


# ---------------------------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear
# ---------------------------------------------------------------------------------------------


def _qdq_model(nodes, shape, outputs, inits, opset=13):
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TP.FLOAT, list(shape))],
        [oh.make_tensor_value_info(n, t, list(shape)) for n, t in outputs],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def _qdq_input(shape, step, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 100 * step).astype(np.float32)
    # exact ties of x / step (round half to even) and values past the saturation bounds
    x.flat[:6] = np.array([0.5, 1.5, -2.5, 3.5, 1e6, -1e6], np.float32) * np.float32(step)
    return x


@pytest.mark.parametrize("zp_type", [U8, I8, None], ids=["uint8", "int8", "no_zp"])
@pytest.mark.parametrize("opset", [13, 21])
def test_fake_quant_pair_is_one_fused_node(zp_type, opset):
    step = 0.0625  # a power of two: x / scale is exact, the ties stay ties
    inits = [nh.from_array(np.array(step, np.float32), "s")]
    names = ["s"]
    if zp_type is not None:
        inits.append(nh.from_array(np.array(7 if zp_type == U8 else -3, zp_type), "z"))
        names.append("z")
    nodes = [
        oh.make_node("Relu", ["x"], ["r"]),
        oh.make_node("QuantizeLinear", ["r", *names], ["q"]),
        oh.make_node("DequantizeLinear", ["q", *names], ["dq"]),
        oh.make_node("Add", ["dq", "x"], ["y"]),
    ]
    shape = (4, 3, 50)
    q_type = TP.INT8 if zp_type == I8 else TP.UINT8
    model = _qdq_model(nodes, shape, [("y", TP.FLOAT), ("q", q_type)], inits, opset)
    x = _qdq_input(shape, step, 3)
    sess = _session(model, profile=True)
    got = sess.run(None, {"x": x})
    ops = _profiled_ops(sess, {"x": x})
    want = _ort(model, {"x": x}, optimize=False)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    assert not any(op.startswith(("QuantizeLinear", "DequantizeLinear")) for op in ops), ops
    assert sum(op.startswith("onnxjit.FusedElementwise") for op in ops) == 1, ops


@pytest.mark.parametrize("zp_type", [U8, I8])
@pytest.mark.parametrize("shape", [(5, 7), (300, 512)], ids=["small", "pool"])
def test_lone_quantize_and_dequantize(zp_type, shape):
    step = 0.1  # not a power of two: the division's rounding is what is compared
    zp = np.array(200 if zp_type == U8 else -100, zp_type)
    inits = [nh.from_array(np.array(step, np.float32), "s"), nh.from_array(zp, "z")]
    q_type = _ONNX_TYPE[zp_type]
    x = _qdq_input(shape, step, 5)
    q_model = _qdq_model(
        [oh.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])], shape, [("q", q_type)], inits
    )
    q = _session(q_model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(q, _ort(q_model, {"x": x})[0])
    graph = oh.make_graph(
        [oh.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])],
        "g",
        [oh.make_tensor_value_info("q", q_type, list(shape))],
        [oh.make_tensor_value_info("y", TP.FLOAT, list(shape))],
        inits,
    )
    dq_model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    y = _session(dq_model).run(None, {"q": q})[0]
    np.testing.assert_array_equal(y, _ort(dq_model, {"q": q})[0])


def test_float16_scale_is_not_fused():
    # A float16 scale makes QuantizeLinear divide in float16 and DequantizeLinear return
    # float16: the per-tensor kernels keep those, the fused float32 form must not take them.
    step = np.float16(0.1)
    inits = [nh.from_array(np.array(step), "s"), nh.from_array(np.array(128, U8), "z")]
    graph = oh.make_graph(
        [
            oh.make_node("Cast", ["x"], ["h"], to=TP.FLOAT16),
            oh.make_node("QuantizeLinear", ["h", "s", "z"], ["q"]),
            oh.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
        ],
        "g",
        [oh.make_tensor_value_info("x", TP.FLOAT, [6, 40])],
        [oh.make_tensor_value_info("y", TP.FLOAT16, [6, 40])],
        inits,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 19)])
    x = _qdq_input((6, 40), 0.1, 9)
    x[np.abs(x) > 20] = 3.0  # within float16 and the uint8 range
    got = _session(model).run(None, {"x": x})[0]
    assert got.dtype == np.float16
    # onnx's reference divides in the scale's type as the spec says (onnxruntime in float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


def test_dequantized_constant_weight_is_folded():
    # quantize_static's MatMul: DequantizeLinear of an int8 initializer (12 MB once in float32)
    # feeding MatMul: folded at load, so no DequantizeLinear runs, and the product matches.
    rng = np.random.default_rng(11)
    w = rng.integers(-127, 128, size=(768, 3072)).astype(I8)
    inits = [
        nh.from_array(w, "w"),
        nh.from_array(np.array(0.01, np.float32), "ws"),
        nh.from_array(np.array(0, I8), "wz"),
    ]
    graph = oh.make_graph(
        [
            oh.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"]),
            oh.make_node("MatMul", ["x", "wf"], ["y"]),
        ],
        "g",
        [oh.make_tensor_value_info("x", TP.FLOAT, [16, 768])],
        [oh.make_tensor_value_info("y", TP.FLOAT, [16, 3072])],
        inits,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    x = rng.standard_normal((16, 768)).astype(np.float32)
    sess = _session(model, profile=True)
    got = sess.run(None, {"x": x})[0]
    ops = _profiled_ops(sess, {"x": x})
    want = x.astype(np.float64) @ (w.astype(np.float64) * np.float64(np.float32(0.01)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert not any(op.startswith("DequantizeLinear") for op in ops), ops
