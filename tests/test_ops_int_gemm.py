"""MatMulInteger on the micro-kernel's int16-pair mode is integer arithmetic, exactly.

Oracle: numpy's int64 matmul of the zero-point-shifted operands, wrapped to int32 (what int32
accumulation gives; it differs from int64 only where a sum leaves the int32 range). The
shapes aim at the kernel's edges: one row, an inner length that is odd or shorter than a pair,
rows and columns that are not multiples of the register block, batched A, inner lengths of
several passes with the extreme values of each type (every product at its largest magnitude),
a sum past the int32 range; zero points absent, scalar, per row of A and per column of B; B a
constant (packed once) or fed at each run; one and two threads.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator
from oracle import matmul_integer_feeds, matmul_integer_model

import onnxjit

U8, I8 = np.uint8, np.int8
_ONNX_TYPE = {U8: TP.UINT8, I8: TP.INT8}


def _session(model, threads: int) -> onnxjit.InferenceSession:
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = threads
    return onnxjit.InferenceSession(model.SerializeToString(), so)


def _ints(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


def _extreme(rng, dtype, shape):
    """Only the type's smallest and largest values."""
    info = np.iinfo(dtype)
    return np.where(rng.random(shape) < 0.5, info.min, info.max).astype(dtype)


def _oracle(a, b, azp, bzp):
    av = a.astype(np.int64)
    if azp is not None:
        z = azp.astype(np.int64)
        av = av - (z.reshape(-1, 1) if z.size > 1 else z)
    bv = b.astype(np.int64) - (0 if bzp is None else bzp.astype(np.int64))
    return (av @ bv).astype(np.int32)  # wraps as int32 accumulation does


# (A shape, A type, B shape (k, n), B type, a_zero_point shape or None, b_zero_point shape or
# None, values: "random" or "extreme")
CASES = {
    "row_k1": ((1, 1), U8, (1, 1), I8, (), (), "random"),
    "row_k768": ((1, 768), U8, (768, 768), I8, (), (), "random"),
    "row_odd_k": ((1, 7), U8, (7, 5), U8, (), (5,), "random"),
    "odd_k_blocks": ((13, 33), I8, (33, 19), I8, None, (19,), "random"),
    "m_n_edges": ((7, 64), U8, (64, 37), I8, (7,), (), "random"),
    "one_column": ((9, 10), I8, (10, 1), U8, (), None, "random"),
    "batched": ((2, 5, 97), U8, (97, 50), I8, (5,), (50,), "random"),
    "wide_pool": ((40, 300), U8, (300, 200), U8, (), (200,), "random"),
    "k4096_extreme_u8s8": ((6, 4096), U8, (4096, 33), I8, (), (), "extreme"),
    "k4097_extreme_u8u8": ((17, 4097), U8, (4097, 18), U8, (), (18,), "extreme"),
    "k4095_extreme_s8s8": ((3, 4095), I8, (4095, 16), I8, (3,), (16,), "extreme"),
    # 40001 * 255 * 255 is past 2**31: the sums wrap as int32 accumulation does
    "int32_wrap": ((2, 40001), U8, (40001, 3), I8, None, (), "wrap"),
}


def _operands(case):
    a_shape, a_dt, b_shape, b_dt, azp_shape, bzp_shape, values = CASES[case]
    rng = np.random.default_rng(sorted(CASES).index(case))
    if values == "wrap":  # every product 255 * 255: A all 255, B all -128 minus 127
        a = np.full(a_shape, 255, a_dt)
        b = np.full(b_shape, -128, b_dt)
        return a, b, None, np.array(127, b_dt)
    make = _extreme if values == "extreme" else _ints
    a = make(rng, a_dt, a_shape)
    b = make(rng, b_dt, b_shape)
    # extreme cases: zero points at the other end, so that the shifted values reach +-255
    azp = None if azp_shape is None else make(rng, a_dt, azp_shape)
    bzp = None if bzp_shape is None else make(rng, b_dt, bzp_shape)
    return a, b, azp, bzp


@pytest.mark.parametrize("b_const", [True, False], ids=["b_const", "b_fed"])
@pytest.mark.parametrize("case", list(CASES))
def test_matmul_integer_is_exact(case, b_const):
    a, b, azp, bzp = _operands(case)
    azp_shape = CASES[case][4]
    model = matmul_integer_model(a.shape, a.dtype.type, b, b.dtype.type, azp_shape, bzp, b_const)
    feeds = matmul_integer_feeds(a, b, azp, bzp, b_const)
    want = _oracle(a, b, azp, bzp)
    if CASES[case][6] == "wrap":
        assert np.abs(a.astype(np.int64) @ (b.astype(np.int64) - 127)).min() > 2**31  # it wraps
    for threads in (1, 2):
        sess = _session(model, threads)
        got = sess.run(None, feeds)[0]
        assert got.dtype == np.int32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        got = sess.run(None, feeds)[0]  # a second run: the packed B and scratch reused
        np.testing.assert_array_equal(got, want)


def test_matmul_integer_runs_the_pair_kernel():
    """On x86 the product runs on the int16-pair kernel (elsewhere on exact float32 blocks)."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("the int16-pair kernel is x86 only (pmaddwd); other CPUs use float32 blocks")
    a, b, azp, bzp = _operands("m_n_edges")
    model = matmul_integer_model(a.shape, U8, b, I8, (7,), bzp, True)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    sess.run(None, {"a": a, "azp": azp})
    kernels = [s["kernel"] for plan in sess.stats()["plans"] for s in plan["steps"]]
    assert kernels == ["blas.igemm_pairs"]


# ---------------------------------------------------------------------------------------------
# The static QDQ form: MatMul(DequantizeLinear(x), DequantizeLinear(w)) as MatMulInteger
# ---------------------------------------------------------------------------------------------


def _qdq_model(x_shape, w, w_scale, w_zero, x_scale, x_zero, axis, bias):
    """QuantizeLinear -> DequantizeLinear of the activation, DequantizeLinear of the constant
    8-bit weight, MatMul, + bias: what onnxruntime's quantize_static writes."""
    n = w.shape[1]
    inits = [
        nh.from_array(w, "w"),
        nh.from_array(w_scale, "ws"),
        nh.from_array(w_zero, "wz"),
        nh.from_array(x_scale, "xs"),
        nh.from_array(x_zero, "xz"),
        nh.from_array(bias, "bias"),
    ]
    nodes = [
        oh.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        oh.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"]),
        oh.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=axis),
        oh.make_node("MatMul", ["xf", "wf"], ["p"]),
        oh.make_node("Add", ["p", "bias"], ["y"]),
    ]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TP.FLOAT, list(x_shape))],
        [oh.make_tensor_value_info("y", TP.FLOAT, [*x_shape[:-1], n])],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])


# (x shape, weight (k, n), weight type, per-column weight scales, activation zero point type)
QDQ_CASES = {
    "per_tensor_u8s8": ((2, 9, 65), (65, 40), I8, False, U8),
    "per_column_u8s8": ((13, 128), (128, 33), I8, True, U8),
    "per_column_s8u8": ((1, 31), (31, 17), U8, True, I8),
}


def _quantized(x, scale, zero):
    """QuantizeLinear of ``x`` by onnx's reference evaluator."""
    graph = oh.make_graph(
        [oh.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])],
        "q",
        [oh.make_tensor_value_info("x", TP.FLOAT, list(x.shape))],
        [oh.make_tensor_value_info("q", _ONNX_TYPE[zero.dtype.type], list(x.shape))],
        [nh.from_array(scale, "s"), nh.from_array(zero, "z")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


@pytest.mark.parametrize("case", list(QDQ_CASES))
def test_qdq_matmul_runs_the_integer_product(case):
    """The product equals the dequantized operands' product (numpy float64 on the quantized
    values, which the graph computes exactly up to float32 rounding of the sums and the
    scaling), and runs as MatMulInteger (the weight is not dequantized at load)."""
    x_shape, w_shape, w_dt, per_column, x_dt = QDQ_CASES[case]
    rng = np.random.default_rng(sorted(QDQ_CASES).index(case))
    n = w_shape[1]
    w = _ints(rng, w_dt, w_shape)
    w_scale = (rng.random(n if per_column else ()) * 0.02 + 0.001).astype(np.float32)
    w_zero = _ints(rng, w_dt, n if per_column else ())
    x_scale, x_zero = np.array(0.03, np.float32), np.array(7 if x_dt == I8 else 131, x_dt)
    bias = rng.standard_normal(n).astype(np.float32)
    model = _qdq_model(x_shape, w, w_scale, w_zero, x_scale, x_zero, 1, bias)
    x = (rng.standard_normal(x_shape) * 2).astype(np.float32)
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = 2
    sess = onnxjit.InferenceSession(model.SerializeToString(), so)
    got = sess.run(None, {"x": x})[0]
    ops = [s["op_type"] for plan in sess.stats()["plans"] for s in plan["steps"]]
    assert "MatMulInteger" in ops and "MatMul" not in ops, ops
    xq = _quantized(x, x_scale, x_zero)
    xf = (xq.astype(np.float64) - float(x_zero)) * float(x_scale)
    wf = (w.astype(np.float64) - w_zero.astype(np.float64)) * w_scale.astype(np.float64)
    want = xf @ wf + bias
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * scale)


def test_qdq_matmul_per_row_weight_scale_stays_float():
    """A weight quantized along its rows (axis 0: one scale per step of the inner dimension)
    is not an integer product with a scaled result: the MatMul stays, and is right."""
    rng = np.random.default_rng(5)
    w = _ints(rng, I8, (24, 10))
    w_scale = (rng.random(24) * 0.02 + 0.001).astype(np.float32)
    w_zero = np.zeros(24, I8)
    model = _qdq_model(
        (3, 24), w, w_scale, w_zero, np.array(0.05, np.float32), np.array(128, U8), 0,
        np.zeros(10, np.float32),
    )  # fmt: skip
    x = rng.standard_normal((3, 24)).astype(np.float32)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    got = sess.run(None, {"x": x})[0]
    ops = [s["op_type"] for plan in sess.stats()["plans"] for s in plan["steps"]]
    assert "MatMulInteger" not in ops, ops
    xq = _quantized(x, np.array(0.05, np.float32), np.array(128, U8))
    xf = (xq.astype(np.float64) - 128) * np.float64(np.float32(0.05))
    want = xf @ (w.astype(np.float64) * w_scale.astype(np.float64).reshape(-1, 1))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# QLinearMatMul: the integer product, then the requantization
# ---------------------------------------------------------------------------------------------


def _qlinear_model(a_shape, a_dt, b, b_const, b_scale, b_zero, y_dt, a_zero_shape):
    names = ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"]
    inputs = [
        oh.make_tensor_value_info("a", _ONNX_TYPE[a_dt], list(a_shape)),
        oh.make_tensor_value_info("za", _ONNX_TYPE[a_dt], list(a_zero_shape)),
    ]
    inits = [
        nh.from_array(np.array(0.02, np.float32), "sa"),
        nh.from_array(b_scale, "sb"),
        nh.from_array(b_zero, "zb"),
        nh.from_array(np.array(0.7, np.float32), "sy"),
        nh.from_array(np.array(3 if y_dt == I8 else 120, y_dt), "zy"),
    ]
    if b_const:
        inits.append(nh.from_array(b, "b"))
    else:
        inputs.append(oh.make_tensor_value_info("b", _ONNX_TYPE[b.dtype.type], list(b.shape)))
    graph = oh.make_graph(
        [oh.make_node("QLinearMatMul", names, ["y"])],
        "g",
        inputs,
        [oh.make_tensor_value_info("y", _ONNX_TYPE[y_dt], [*a_shape[:-1], b.shape[1]])],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 10)])


# (A shape, A type, B (k, n) type, per-column B scale and zero point, output type, a_zero_point
# shape)
QLINEAR_CASES = {
    "u8u8_u8": ((16, 300), U8, (300, 40), U8, False, U8, ()),
    "u8s8_per_column_s8": ((2, 7, 129), U8, (129, 33), I8, True, I8, ()),
    "s8s8_row_zp": ((5, 64), I8, (64, 17), I8, True, U8, (5,)),
}


@pytest.mark.parametrize("case", list(QLINEAR_CASES))
def test_qlinear_matmul_integer_product(case):
    """With B constant (the integer product, then the requantization kernel) the result is
    the implementation's, which runs when B is fed, bit for bit; and onnx's reference
    evaluator's, up to one step where a product lands near a rounding tie (it requantizes
    in float32)."""
    a_shape, a_dt, b_shape, b_dt, per_column, y_dt, azp_shape = QLINEAR_CASES[case]
    rng = np.random.default_rng(sorted(QLINEAR_CASES).index(case))
    n = b_shape[1]
    a = _ints(rng, a_dt, a_shape)
    b = _ints(rng, b_dt, b_shape)
    azp = _ints(rng, a_dt, azp_shape)
    b_scale = (rng.random(n if per_column else ()) * 0.05 + 0.001).astype(np.float32)
    b_zero = _ints(rng, b_dt, n if per_column else ())
    results = []
    for b_const in (True, False):
        model = _qlinear_model(a_shape, a_dt, b, b_const, b_scale, b_zero, y_dt, azp_shape)
        feeds = {"a": a, "za": azp, **({} if b_const else {"b": b})}
        so = onnxjit.SessionOptions()
        so.intra_op_num_threads = 2
        sess = onnxjit.InferenceSession(model.SerializeToString(), so)
        results.append(sess.run(None, feeds)[0])
        kernels = [s["kernel"] for plan in sess.stats()["plans"] for s in plan["steps"]]
        assert any("requantize_rows" in k for k in kernels) == b_const, kernels
    got, impl = results
    assert got.dtype == np.dtype(y_dt) and got.shape == impl.shape
    np.testing.assert_array_equal(got, impl)
    if azp.size == 1:  # the reference evaluator subtracts a per-row zero point along columns
        want = ReferenceEvaluator(model).run(None, feeds)[0]
        assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
        assert (got != want).mean() < 0.01


# ---------------------------------------------------------------------------------------------
# ConvInteger: im2col and the integer product
# ---------------------------------------------------------------------------------------------


# (X shape, X type, W shape, W type, attributes, per-channel w_zero_point: the reference
# evaluator takes one only in 2-D)
_PADS_STRIDE = {"pads": [1, 2, 1, 0], "strides": [2, 1]}
_GROUP_DILATION = {"group": 2, "dilations": [2, 2], "pads": [2, 2, 2, 2]}
CONV_CASES = {
    "2d_pads_stride": ((2, 3, 9, 11), U8, (5, 3, 3, 3), I8, _PADS_STRIDE, False),
    "2d_group_dilation": ((1, 4, 10, 10), U8, (6, 2, 3, 3), U8, _GROUP_DILATION, True),
    "1d_extreme": ((1, 7, 40), U8, (4, 7, 5), I8, {"auto_pad": "SAME_UPPER"}, False),
    "3d": ((1, 2, 4, 5, 6), I8, (3, 2, 2, 3, 2), I8, {"pads": [1, 0, 1, 0, 1, 1]}, False),
    "1x1_wide": ((1, 64, 20, 20), U8, (32, 64, 1, 1), I8, {}, True),
}


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv_integer_is_exact(case):
    x_shape, x_dt, w_shape, w_dt, attrs, per_channel = CONV_CASES[case]
    rng = np.random.default_rng(sorted(CONV_CASES).index(case))
    make = _extreme if "extreme" in case else _ints
    x = make(rng, x_dt, x_shape)
    w = make(rng, w_dt, w_shape)
    x_zero = make(rng, x_dt, ())
    w_zero = make(rng, w_dt, (w_shape[0],) if per_channel else ())
    node = oh.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)
    graph = oh.make_graph(
        [node],
        "g",
        [
            oh.make_tensor_value_info("x", _ONNX_TYPE[x_dt], list(x_shape)),
            oh.make_tensor_value_info("xz", _ONNX_TYPE[x_dt], []),
        ],
        [oh.make_tensor_value_info("y", TP.INT32, [None] * len(x_shape))],
        [nh.from_array(w, "w"), nh.from_array(w_zero, "wz")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 10)])
    feeds = {"x": x, "xz": x_zero}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    for threads in (1, 2):
        sess = _session(model, threads)
        got = sess.run(None, feeds)[0]
        assert got.dtype == np.int32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        kernels = [s["kernel"] for plan in sess.stats()["plans"] for s in plan["steps"]]
        assert kernels == ["conv.im2col+blas.igemm_pairs"], kernels


def _qlinear_conv_model(x_shape, x_dt, w, w_const, w_scale, w_zero, bias, attrs):
    m = w.shape[0]
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"] + (["b"] if bias is not None else [])
    inputs = [oh.make_tensor_value_info("x", _ONNX_TYPE[x_dt], list(x_shape))]
    inits = [
        nh.from_array(np.array(0.03, np.float32), "xs"),
        nh.from_array(np.array(5 if x_dt == I8 else 100, x_dt), "xz"),
        nh.from_array(w_scale, "ws"),
        nh.from_array(w_zero, "wz"),
        nh.from_array(np.array(0.4, np.float32), "ys"),
        nh.from_array(np.array(128, U8), "yz"),
    ]
    if bias is not None:
        inits.append(nh.from_array(bias, "b"))
    if w_const:
        inits.append(nh.from_array(w, "w"))
    else:
        inputs.append(oh.make_tensor_value_info("w", _ONNX_TYPE[w.dtype.type], list(w.shape)))
    graph = oh.make_graph(
        [oh.make_node("QLinearConv", names, ["y"], **attrs)],
        "g",
        inputs,
        [oh.make_tensor_value_info("y", TP.UINT8, [x_shape[0], m] + [None] * (len(x_shape) - 2))],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 10)])


# (X shape, X type, W shape, W type, attributes, per-channel scale and zero point, bias)
_GROUP_STRIDE = {"group": 2, "strides": [2, 2]}
QCONV_CASES = {
    "2d_bias_per_channel": ((2, 3, 8, 9), U8, (6, 3, 3, 3), I8, {"pads": [1] * 4}, True, True),
    "2d_group_stride": ((1, 4, 9, 9), U8, (4, 2, 3, 3), U8, _GROUP_STRIDE, False, True),
    "1d_no_bias": ((1, 5, 30), I8, (7, 5, 4), I8, {}, False, False),
}


@pytest.mark.parametrize("case", list(QCONV_CASES))
def test_qlinear_conv_integer_product(case):
    """With W constant (ConvInteger's kernels, then the requantization kernel) the result is
    the implementation's, which runs when W is fed, bit for bit; and onnx's reference
    evaluator's up to one step near rounding ties (it requantizes in float32)."""
    x_shape, x_dt, w_shape, w_dt, attrs, per_channel, with_bias = QCONV_CASES[case]
    rng = np.random.default_rng(sorted(QCONV_CASES).index(case))
    m = w_shape[0]
    x = _ints(rng, x_dt, x_shape)
    w = _ints(rng, w_dt, w_shape)
    w_scale = (rng.random(m if per_channel else ()) * 0.02 + 0.001).astype(np.float32)
    w_zero = _ints(rng, w_dt, m if per_channel else ())
    bias = rng.integers(-5000, 5000, m).astype(np.int32) if with_bias else None
    results = []
    for w_const in (True, False):
        model = _qlinear_conv_model(x_shape, x_dt, w, w_const, w_scale, w_zero, bias, attrs)
        feeds = {"x": x, **({} if w_const else {"w": w})}
        so = onnxjit.SessionOptions()
        so.intra_op_num_threads = 2
        sess = onnxjit.InferenceSession(model.SerializeToString(), so)
        results.append(sess.run(None, feeds)[0])
        kernels = [s["kernel"] for plan in sess.stats()["plans"] for s in plan["steps"]]
        assert any("requantize_rows" in k for k in kernels) == w_const, kernels
    got, impl = results
    np.testing.assert_array_equal(got, impl)
    if not per_channel or len(x_shape) == 4:  # the reference's per-channel zero point: 2-D
        want = ReferenceEvaluator(model).run(None, feeds)[0]
        assert got.shape == want.shape
        assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
        assert (got != want).mean() < 0.01
