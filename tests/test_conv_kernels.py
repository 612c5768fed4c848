"""Convolution and pooling kernels on the geometries their plans specialise.

Covers the paths of ``onnxjit.ops.nn._conv_core`` (im2col by output-row runs or by a gather
table, the conv GEMM tiles, the depthwise kernel with its fused epilogue) and the pooling
kernels without Indices (max over padded planes, global average), each serial and on the pool's
threads. Oracles: onnxruntime for float32 (its optimisations off), onnx's ReferenceEvaluator
for float64 and float16 (onnxruntime has no float64 Conv).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from oracle import (
    assert_close,
    check_node,
    declare_outputs_like,
    make_node_model,
    ort_outputs,
    reference_outputs,
)

import onnxjit
from onnxjit.kernels import _jit
from onnxjit.ops import gemm as gemm_ops

F32, F64, F16 = np.float32, np.float64, np.float16
TOL = {F32: (1e-4, 1e-5), F64: (1e-9, 1e-10), F16: (1e-2, 1e-2)}


def rnd(shape, dtype=F32, seed=0):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=shape).astype(dtype)


def weights(shape, dtype=F32, seed=1):
    """Uniform weights scaled by 1/sqrt(fan-in), so that outputs stay O(1) for every K."""
    fan_in = int(np.prod(shape[1:]))
    return (rnd(shape, F64, seed) / np.sqrt(fan_in)).astype(dtype)


@pytest.fixture(params=["serial", "parallel"])
def threading_mode(request, monkeypatch):
    """Every kernel on one thread (thresholds out of reach), or on the pool (thresholds 1:
    the elementwise one and the GEMM one the convolution products use)."""
    serial = request.param == "serial"
    monkeypatch.setattr(_jit, "PARALLEL_THRESHOLD", 1 << 40 if serial else 1)
    monkeypatch.setattr(gemm_ops, "PARALLEL_MACS", 1 << 40 if serial else 1)
    return request.param


# (x shape without batch, w shape, attrs)
CONV = {
    # im2col by runs (output rows >= 16 wide)
    "run_3x3": ((3, 18, 20), (5, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    "run_dil_s2": (
        (2, 21, 37),
        (4, 2, 3, 3),
        {"strides": [2, 2], "dilations": [2, 2], "pads": [2, 2, 2, 2]},
    ),
    "run_dil_asym": ((2, 9, 24), (3, 2, 3, 3), {"dilations": [2, 3], "pads": [0, 2, 1, 3]}),
    "run_s3_1d": ((3, 60), (2, 3, 5), {"strides": [3], "pads": [2, 1]}),
    # im2col by gather table (output rows < 16 wide)
    "gather_3x3": ((4, 7, 7), (6, 4, 3, 3), {"pads": [1, 1, 1, 1]}),
    "gather_s2": ((3, 8, 9), (5, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "gather_dil": ((2, 9, 9), (3, 2, 3, 2), {"dilations": [2, 2], "pads": [2, 0, 1, 1]}),
    "gather_3d": (
        (2, 5, 6, 4),
        (3, 2, 3, 2, 2),
        {"pads": [1, 0, 1, 0, 1, 1], "strides": [1, 2, 1]},
    ),
    "gather_big_k": ((448, 5, 5), (8, 448, 3, 3), {"pads": [1, 1, 1, 1]}),  # k in whole chunks
    # inner dimension >= 1024 in chunks of 576 with a remainder (1170 = 2 * 576 + 18), 24-row
    # tiles with a remainder (30 = 24 + 6)
    "gather_split_k": ((130, 6, 5), (30, 130, 3, 3), {"pads": [1, 1, 1, 1]}),
    # row-blocked convolution with the inner dimension in chunks (630 = 576 + 54)
    "run_split_k": ((70, 5, 18), (26, 70, 3, 3), {"pads": [1, 1, 1, 1]}),
    "run_split_k_dil": (
        (80, 7, 40),
        (10, 80, 3, 3),
        {"strides": [2, 2], "dilations": [1, 2], "pads": [1, 2, 1, 2]},
    ),
    "run_s5": ((2, 9, 90), (3, 2, 3, 3), {"strides": [5, 5], "pads": [1, 1, 1, 1]}),
    # implicit GEMM over the padded input (2-D, stride 1, dilation 1, outputs >= 7 wide;
    # run_3x3, run_split_k and gather_3x3 above go there too): asymmetric and no padding,
    # other kernel shapes, more channels than one block (50 = 48 + 2), the inner dimension
    # in chunks (630 = 576 + 54)
    "taps_asym_pads": ((3, 9, 12), (7, 3, 3, 3), {"pads": [0, 2, 1, 0]}),
    "taps_no_pad": ((3, 9, 10), (4, 3, 3, 3), {}),
    "taps_5x3": ((4, 10, 11), (5, 4, 5, 3), {"pads": [2, 1, 2, 1]}),
    "taps_1x7": ((2, 6, 15), (3, 2, 1, 7), {"pads": [0, 3, 0, 3]}),
    "taps_many_m": ((5, 8, 9), (50, 5, 3, 3), {"pads": [1, 1, 1, 1]}),
    "taps_split_k": ((70, 8, 9), (13, 70, 3, 3), {"pads": [1, 1, 1, 1]}),
    # strided: the product over phase planes (a ResNet stem, downsampling 3x3s with the
    # inner dimension in chunks, strides and kernel sizes that differ per axis, an even
    # kernel, a stride larger than the kernel)
    "taps_7x7_s2": ((3, 40, 40), (4, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    # Winograd F(2x2, 3x3) (3x3, stride 1, 16+ channels, outputs 8+ wide; run_split_k and
    # taps_split_k above go there too): odd sizes (a partial last tile row and column),
    # output channels past whole micro-kernel panels (13, 50 = 4 * 12 + 2), asymmetric and
    # no padding, padding of two (rows of padding only), the inner dimension in chunks
    # (600 = 576 + 24), many tile rows (40 high)
    "wino_odd": ((16, 9, 11), (13, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    "wino_asym": ((20, 10, 12), (50, 20, 3, 3), {"pads": [0, 2, 1, 0]}),
    "wino_no_pad": ((17, 12, 10), (8, 17, 3, 3), {}),
    "wino_pad2": ((16, 8, 9), (5, 16, 3, 3), {"pads": [2, 2, 2, 2]}),
    "wino_split_k": ((600, 8, 8), (7, 600, 3, 3), {"pads": [1, 1, 1, 1]}),
    "wino_tall": ((16, 40, 9), (12, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    "taps_s2": ((2, 21, 37), (4, 2, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "taps_split_k_s2": ((80, 7, 40), (10, 80, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 1]}),
    "taps_s2x3": ((4, 13, 40), (5, 4, 3, 5), {"strides": [2, 3], "pads": [0, 2, 1, 1]}),
    "taps_4x4_s2": ((3, 18, 18), (4, 3, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    # 7x7 outputs of one image: fewer column blocks than threads, so the threads split the
    # channels in one block each (40 -> 24 + 16, 50 -> 36 + 14), stride 1 and 2
    "taps_few_columns": ((64, 7, 7), (40, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
    "taps_few_columns_s2": ((32, 14, 14), (50, 32, 3, 3), {"strides": [2, 2], "pads": [1] * 4}),
    "taps_s4_k2": ((2, 9, 40), (3, 2, 2, 2), {"strides": [4, 4], "pads": [0, 1, 1, 0]}),
    "grouped": ((4, 6, 18), (6, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    "grouped_gather": ((6, 5, 5), (9, 2, 3, 3), {"group": 3, "strides": [2, 1]}),
    # 1x1: plain GEMM
    "pointwise": ((6, 5, 7), (9, 6, 1, 1), {}),
    "pointwise_s2": ((6, 9, 7), (4, 6, 1, 1), {"strides": [2, 2]}),
    # a 4x4 plane (few columns): rows in 4 tiles of 56, 56, 56 and 32
    "pointwise_rows": ((40, 4, 4), (200, 40, 1, 1), {}),
    # few positions (a late layer's 3x3 and 6x6 planes): the product as its transpose
    "pointwise_3x3": ((40, 3, 3), (70, 40, 1, 1), {}),
    "pointwise_6x6": ((24, 6, 6), (50, 24, 1, 1), {}),
    # depthwise (group == C)
    "dw_3x3": ((5, 19, 17), (5, 1, 3, 3), {"group": 5, "pads": [1, 1, 1, 1]}),
    "dw_3x3_s2": ((4, 20, 21), (4, 1, 3, 3), {"group": 4, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "dw_3x3_s2_odd": (
        (3, 7, 9),
        (3, 1, 3, 3),
        {"group": 3, "strides": [2, 2], "pads": [0, 1, 1, 0]},
    ),
    "dw_3x3_dil": (
        (3, 11, 12),
        (3, 1, 3, 3),
        {"group": 3, "dilations": [2, 3], "pads": [2, 3, 2, 3]},
    ),
    "dw_3x3_small": ((6, 4, 4), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),
    "dw_mult": ((2, 8, 6), (6, 1, 3, 3), {"group": 2, "strides": [2, 1], "dilations": [1, 2]}),
    "dw_5x5_s2": ((3, 13, 14), (3, 1, 5, 5), {"group": 3, "strides": [2, 2], "pads": [2, 2, 2, 2]}),
    "dw_s3": ((2, 10, 11), (2, 1, 3, 3), {"group": 2, "strides": [3, 3], "pads": [1, 1, 0, 0]}),
    "dw_1d": ((4, 10), (4, 1, 3), {"group": 4, "pads": [2, 1]}),
    "dw_3d": ((2, 5, 6, 7), (2, 1, 3, 3, 3), {"group": 2, "pads": [1, 1, 1, 1, 1, 1]}),
    "dw_3d_s2": ((2, 6, 5, 7), (4, 1, 2, 3, 3), {"group": 2, "strides": [2, 1, 2]}),
    "dw_same": ((3, 9, 8), (3, 1, 3, 3), {"group": 3, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    # 3x3 depthwise of stride 1 or 2 with one pixel of padding before each axis, planes too
    # large for the channel-block kernel (depthwise3): planes of 2 rows or columns, odd heights
    # at stride 2 (the last output row has no third input row), no padding after the input
    "dw3_s1_h2": ((4, 2, 40), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    "dw3_s1_w2": ((3, 40, 2), (3, 1, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}),
    "dw3_s1_w3": ((2, 30, 3), (2, 1, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    "dw3_s2_even": ((4, 20, 22), (4, 1, 3, 3), {"group": 4, "strides": [2, 2], "pads": [1] * 4}),
    "dw3_s2_odd_h": ((3, 21, 18), (3, 1, 3, 3), {"group": 3, "strides": [2, 2], "pads": [1] * 4}),
    "dw3_s2_h3": ((2, 3, 34), (2, 1, 3, 3), {"group": 2, "strides": [2, 2], "pads": [1] * 4}),
    "dw3_s2_w2": ((2, 70, 2), (2, 1, 3, 3), {"group": 2, "strides": [2, 2], "pads": [1] * 4}),
    "dw3_s2_no_end_pad": (
        (3, 20, 36),
        (3, 1, 3, 3),
        {"group": 3, "strides": [2, 2], "pads": [1, 1, 0, 0]},
    ),
    # TensorFlow's "same" padding of even sizes at stride 2: nothing before, one after
    "dw3_s2_unpadded": (
        (4, 20, 22),
        (4, 1, 3, 3),
        {"group": 4, "strides": [2, 2], "pads": [0, 0, 1, 1]},
    ),
    "dw3_s2_unpadded_h2": (
        (3, 2, 200),
        (3, 1, 3, 3),
        {"group": 3, "strides": [2, 2], "pads": [0, 0, 1, 1]},
    ),
    "dw3_s2_unpadded_w2": (
        (2, 140, 2),
        (2, 1, 3, 3),
        {"group": 2, "strides": [2, 2], "pads": [0, 0, 1, 1]},
    ),
    # depthwise of small planes, 16 channels across vector lanes (depthwise_tiles): whole and
    # partial blocks of channels, strides 1 and 2, padding, channel multiplier, dilations
    "dw_tiles_4x4": ((40, 4, 4), (40, 1, 3, 3), {"group": 40, "pads": [1, 1, 1, 1]}),
    "dw_tiles_7x7": ((17, 7, 7), (17, 1, 3, 3), {"group": 17, "pads": [1, 1, 1, 1]}),
    "dw_tiles_s2": (
        (20, 14, 13),
        (20, 1, 3, 3),
        {"group": 20, "strides": [2, 2], "pads": [1, 0, 1, 1]},
    ),
    "dw_tiles_s2_nopad": ((32, 9, 8), (32, 1, 3, 3), {"group": 32, "strides": [2, 2]}),
    "dw_tiles_5x5": ((16, 5, 6), (16, 1, 5, 5), {"group": 16, "pads": [2, 2, 2, 2]}),
    "dw_tiles_mult_dil": (
        (6, 6, 7),
        (18, 1, 3, 2),
        {"group": 6, "dilations": [2, 1], "strides": [1, 2], "pads": [2, 1, 0, 1]},
    ),
    "dw_tiles_3x3_dil": (
        (16, 6, 7),
        (16, 1, 3, 3),
        {"group": 16, "dilations": [2, 2], "strides": [2, 1], "pads": [2, 1, 1, 2]},
    ),
    "dw_tiles_1d": ((24, 9), (24, 1, 3), {"group": 24, "strides": [2], "pads": [1, 1]}),
}


@pytest.mark.parametrize("case", list(CONV))
@pytest.mark.parametrize("batch", [1, 3])
def test_conv_f32(case, batch, threading_mode):
    xs, ws, attrs = CONV[case]
    inputs = {"x": rnd((batch, *xs)), "w": weights(ws, F32), "b": rnd((ws[0],), F32, 2)}
    check_node("Conv", inputs, attrs, opset=22, oracle="ort", rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", list(CONV))
@pytest.mark.parametrize("dtype", [F64, F16])
def test_conv_other_types(case, dtype, threading_mode):
    xs, ws, attrs = CONV[case]
    inputs = {"x": rnd((2, *xs), dtype), "w": weights(ws, dtype), "b": rnd((ws[0],), dtype, 2)}
    rtol, atol = TOL[dtype]
    check_node("Conv", inputs, attrs, opset=22, rtol=rtol, atol=atol)


def _fused_model(xs, ws, attrs, act, residual, dtype=F32):
    """Conv(bias) [+ Add(residual)] [+ activation]: fused into one FusedConv by onnxjit."""
    et = {F32: TensorProto.FLOAT, F64: TensorProto.DOUBLE}[dtype]
    inits = [
        numpy_helper.from_array(weights(ws, dtype), "w"),
        numpy_helper.from_array(rnd((ws[0],), dtype, 2), "b"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs)]
    inputs = [helper.make_tensor_value_info("x", et, list(xs))]
    cur = "c"
    if residual is not None:
        nodes.append(helper.make_node("Add", [cur, "r"], ["a"]))
        inputs.append(helper.make_tensor_value_info("r", et, list(residual)))
        cur = "a"
    if act == "relu6":
        inits += [
            numpy_helper.from_array(np.array(0.0, dtype), "lo"),
            numpy_helper.from_array(np.array(6.0, dtype) / 10, "hi"),
        ]
        nodes.append(helper.make_node("Clip", [cur, "lo", "hi"], ["y"]))
        cur = "y"
    elif act is not None:
        nodes.append(helper.make_node(act, [cur], ["y"]))
        cur = "y"
    dims = [f"d{i}" for i in range(len(xs))]
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info(cur, et, dims)], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _out_shape(xs, ws, attrs):
    model = _fused_model(xs, ws, attrs, None, None)
    x = np.zeros(xs, F32)
    return onnxjit.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0].shape


@pytest.mark.parametrize(
    "case",
    [
        "dw_3x3",
        "dw_3x3_s2",
        "dw3_s1_h2",
        "dw3_s2_odd_h",
        "dw3_s2_even",
        "dw_3x3_small",
        "dw_mult",
        "dw_3d",
        "dw_tiles_4x4",
        "dw_tiles_s2",
        "dw_tiles_mult_dil",
        "run_3x3",
        "gather_s2",
        "gather_split_k",
        "run_split_k",
        "taps_asym_pads",
        "taps_many_m",
        "taps_split_k",
        "taps_7x7_s2",
        "taps_s2x3",
        "wino_odd",
        "wino_asym",
        "wino_pad2",
        "pointwise_rows",
        "pointwise_3x3",
        "pointwise_6x6",
    ],
)
@pytest.mark.parametrize("act", [None, "Relu", "relu6", "Sigmoid"])
@pytest.mark.parametrize("with_residual", [False, True])
def test_fused_conv_epilogue(case, act, with_residual, threading_mode):
    xs, ws, attrs = CONV[case]
    xs = (2, *xs)
    residual = _out_shape(xs, ws, attrs) if with_residual else None
    model = _fused_model(xs, ws, attrs, act, residual)
    feeds = {"x": rnd(xs, F32, 3)}
    if residual is not None:
        feeds["r"] = rnd(residual, F32, 4)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    if act is not None or with_residual:
        assert [n.op_type for n in sess.graph_nodes()] == ["FusedConv"]
    assert_close(sess.run(None, feeds), ort_outputs(model, feeds), rtol=1e-4, atol=1e-5)


# Cases whose products go through the conv GEMM (1x1 convolutions, im2col by gather table).
_GEMM_CASES = [c for c in CONV if c.startswith(("pointwise", "gather"))]


@pytest.mark.parametrize("case", _GEMM_CASES)
@pytest.mark.parametrize("blas_tiles", [True, False], ids=["blas", "micro_kernel"])
def test_conv_gemm_both_paths(case, blas_tiles, threading_mode, monkeypatch):
    """Both ways of multiplying, whichever this machine's BLAS selects: OpenBLAS on
    ``_conv_tiles`` (its AVX-512 kernels) and the micro-kernel with packed weights (others),
    with bias, residual and activation applied per tile."""
    monkeypatch.setattr(gemm_ops, "_small_blocks", blas_tiles)
    xs, ws, attrs = CONV[case]
    xs = (3, *xs)
    residual = _out_shape(xs, ws, attrs)
    model = _fused_model(xs, ws, attrs, "Relu", residual)
    feeds = {"x": rnd(xs, F32, 3), "r": rnd(residual, F32, 4)}
    sess = onnxjit.InferenceSession(model.SerializeToString())
    assert [n.op_type for n in sess.graph_nodes()] == ["FusedConv"]
    assert_close(sess.run(None, feeds), ort_outputs(model, feeds), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "case",
    [
        "dw_3x3_s2",
        "dw_mult",
        "dw_tiles_7x7",
        "dw_tiles_s2",
        "taps_s2",
        "gather_dil",
        "gather_split_k",
        "taps_split_k_s2",
        "run_split_k_dil",
        "pointwise_3x3",
    ],
)
def test_fused_conv_epilogue_f64(case, threading_mode):
    xs, ws, attrs = CONV[case]
    xs = (2, *xs)
    model = _fused_model(xs, ws, attrs, "Relu", _out_shape(xs, ws, attrs), F64)
    feeds = {"x": rnd(xs, F64, 3), "r": rnd(_out_shape(xs, ws, attrs), F64, 4)}
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, feeds)
    assert_close(got, reference_outputs(model, feeds), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize(
    "case, kind",
    [
        ("dw_tiles_4x4", "tiles"),
        ("dw_tiles_s2", "tiles"),
        ("dw_tiles_mult_dil", "tiles"),
        ("dw_tiles_3x3_dil", "tiles"),
        ("dw_tiles_1d", "tiles"),
        ("dw_3x3", "dw3"),  # 19 x 17 outputs per plane, 3x3, stride 1, padding 1
        ("dw3_s1_h2", "dw3"),
        ("dw3_s2_odd_h", "dw3"),
        ("dw3_s2_no_end_pad", "dw3"),
        ("dw3_s2_unpadded", "dw3"),
        ("dw3_s2_unpadded_h2", "dw3"),
        ("dw3_s2_unpadded_w2", "dw3"),
        ("dw_3x3_s2", "plane"),  # odd width at stride 2
        ("dw_3x3_dil", "plane"),
        ("dw_3d", "plane"),
    ],
)
def test_depthwise_kernel_choice(case, kind, threading_mode):
    """The cases above reach the kernel they are meant to test: small 1-D and 2-D planes the
    channel-block kernel, larger 3x3 planes of stride 1 or 2 the flat-loop one, the rest
    (other kernels, dilations, 3-D) the per-plane one."""
    from onnxjit.kernels.cpu import conv as kconv
    from onnxjit.ops import nn

    xs, ws, attrs = CONV[case]
    out = _out_shape((2, *xs), ws, attrs)[2:]
    nd = len(ws) - 2
    plan = nn._ConvPlan(
        (2, *xs), F32, weights(ws), attrs["group"], list(ws[2:]), attrs.get("strides", [1] * nd),
        attrs.get("dilations", [1] * nd), attrs.get("pads", [0] * 2 * nd)[:nd], list(out),
        None, False, 0, 0.0, 0.0,
    )  # fmt: skip
    assert plan.kind == nn._DEPTHWISE
    serial, par = {
        "tiles": (kconv.depthwise_tiles, kconv.depthwise_tiles_par),
        "dw3": (kconv.depthwise3, kconv.depthwise3_par),
        "plane": (kconv.depthwise, kconv.depthwise_par),
    }[kind]
    if threading_mode == "serial" or plan.dw.__closure__ is None:
        assert plan.dw is serial
    else:  # pool.bind's launcher of the pool kernel
        assert par in [cell.cell_contents for cell in plan.dw.__closure__]


@pytest.mark.parametrize(
    "case, kind",
    [
        ("run_3x3", "taps"),
        ("gather_3x3", "taps"),  # 7 wide: the narrowest output that goes there
        ("taps_1x7", "taps"),
        ("taps_split_k", "wino"),  # 3x3, stride 1, 70 channels, 9 wide
        ("wino_no_pad", "wino"),  # 8 wide: the narrowest output Winograd takes
        ("gather_big_k", "other"),  # 5 wide: too many dropped columns
        ("taps_7x7_s2", "taps"),
        ("taps_s2x3", "taps"),
        ("run_dil_s2", "other"),
        ("run_s5", "other"),
        ("run_dil_asym", "other"),
        ("run_s3_1d", "other"),
        ("grouped", "other"),
    ],
)
@pytest.mark.parametrize("winograd", [True, False])
def test_implicit_gemm_choice(case, kind, winograd, threading_mode):
    """3x3 stride-1 convolutions of 16+ channels with outputs 8+ wide run Winograd (unless
    it is switched off); other 2-D undilated convolutions of one group with strides up to 4
    and outputs at least 7 wide run the implicit GEMM (conv_taps), serial or on the pool;
    the others keep im2col."""
    from onnxjit.kernels.cpu import conv_taps as ktaps
    from onnxjit.kernels.cpu import conv_winograd as kwino
    from onnxjit.ops import nn

    xs, ws, attrs = CONV[case]
    out = _out_shape((2, *xs), ws, attrs)[2:]
    nd = len(ws) - 2
    plan = nn._ConvPlan(
        (2, *xs), F32, weights(ws), attrs.get("group", 1), list(ws[2:]),
        attrs.get("strides", [1] * nd), attrs.get("dilations", [1] * nd),
        attrs.get("pads", [0] * 2 * nd)[:nd], list(out), None, False, 0, 0.0, 0.0,
        winograd=winograd,
    )  # fmt: skip
    if kind == "wino" and not winograd:
        kind = "taps"  # every Winograd case is also a taps case
    assert plan.kind == {"taps": nn._TAPS, "wino": nn._WINOGRAD}.get(kind, plan.kind)
    assert plan.kind not in (nn._TAPS, nn._WINOGRAD) or kind != "other"
    fn, serial, par = {
        nn._TAPS: ("taps", ktaps.conv_taps, ktaps.conv_taps_par),
        nn._WINOGRAD: ("wino", kwino.conv_winograd, kwino.conv_winograd_par),
    }.get(plan.kind, (None, None, None))
    if fn is not None:
        if threading_mode == "serial":
            assert getattr(plan, fn) is serial
        else:
            assert par in [c.cell_contents for c in getattr(plan, fn).__closure__]


@pytest.mark.parametrize("cols", [32, 64])
def test_implicit_gemm_column_blocks(cols, threading_mode, monkeypatch):
    # Blocks of the product's columns cut output rows anywhere: with 13-wide padded rows
    # (11 outputs each), blocks of 32 start mid-row (32 = 2 * 13 + 6) and in a row's dropped
    # columns (64 = 4 * 13 + 12); each image's last block is partial. Residual, activation
    # and two images, against onnxruntime.
    from onnxjit.ops import nn

    monkeypatch.setattr(nn, "_TAPS_COLS", cols)
    xs, ws, attrs = (2, 5, 6, 11), (14, 5, 3, 3), {"pads": [1, 1, 1, 1]}
    out = _out_shape(xs, ws, attrs)
    model = _fused_model(xs, ws, attrs, "Relu", out)
    feeds = {"x": rnd(xs, F32, 3), "r": rnd(out, F32, 4)}
    sess = onnxjit.InferenceSession(model.SerializeToString())
    assert_close(sess.run(None, feeds), ort_outputs(model, feeds), rtol=1e-4, atol=1e-5)
    plan = nn._ConvPlan(
        xs, F32, weights(ws), 1, [3, 3], [1, 1], [1, 1], [1, 1], list(out[2:]), None, True,
        0, 0.0, 0.0,
    )  # fmt: skip
    assert plan.kind == nn._TAPS and plan.taps_tail[2] == cols  # the blocks above were used


def test_implicit_gemm_keeps_padding_zero_between_layers():
    # Two convolutions of one padded shape but other pads share no buffer: the second must
    # not see the first one's interior in its border (both checked against onnxruntime).
    x = rnd((1, 3, 9, 10), F32, 7)
    w = weights((4, 3, 3, 3))
    for pads in ([1, 1, 1, 1], [2, 0, 0, 2]):  # both: padded planes 11 x 12
        model = make_node_model("Conv", {"x": x, "w": w}, {"pads": pads}, 17, const_inputs=["w"])
        got = onnxjit.InferenceSession(model.SerializeToString()).run(None, {"x": x})
        assert_close(got, ort_outputs(model, {"x": x}), rtol=1e-4, atol=1e-5)


def test_implicit_gemm_keeps_padding_zero_across_input_sizes():
    # Padded planes of one shape and the same leading pads, filled from inputs of two sizes
    # (9 x 10 with one pixel after, 10 x 11 with none): the smaller input's trailing padding
    # is where the larger one has data, so the two must not share a buffer. Two convolutions
    # of one model on one thread, the larger first, both against onnxruntime.
    xa, xb = rnd((1, 3, 10, 11), F32, 7), rnd((1, 3, 9, 10), F32, 8)
    w = weights((4, 3, 3, 3))
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["xa", "w"], ["ya"], pads=[1, 1, 0, 0]),
            helper.make_node("Conv", ["xb", "w"], ["yb"], pads=[1, 1, 1, 1]),
        ],
        "g",
        [
            helper.make_tensor_value_info("xa", TensorProto.FLOAT, list(xa.shape)),
            helper.make_tensor_value_info("xb", TensorProto.FLOAT, list(xb.shape)),
        ],
        [
            helper.make_tensor_value_info("ya", TensorProto.FLOAT, [1, 4, 9, 10]),
            helper.make_tensor_value_info("yb", TensorProto.FLOAT, [1, 4, 9, 10]),
        ],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"xa": xa, "xb": xb}
    opts = onnxjit.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = onnxjit.InferenceSession(model.SerializeToString(), opts)
    for _ in range(2):
        assert_close(sess.run(None, feeds), ort_outputs(model, feeds), rtol=1e-4, atol=1e-5)


def test_conv_residual_not_contiguous():
    # A residual that is a transposed view reaches the epilogue as a contiguous copy.
    xs, ws, attrs = CONV["dw_3x3"]
    xs = (1, *xs)
    out = _out_shape(xs, ws, attrs)
    model = _fused_model(xs, ws, attrs, "Relu", out)
    r = np.ascontiguousarray(rnd(out[::-1], F32, 5).T)
    assert r.shape == out
    feeds = {"x": rnd(xs, F32, 3), "r": r}
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, feeds)
    assert_close(got, ort_outputs(model, feeds), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------ pooling

MAXPOOL = {
    "stem": ((3, 20, 22), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "2x2": ((2, 9, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "s1_asym": ((2, 7, 9), {"kernel_shape": [3, 2], "pads": [0, 1, 2, 0]}),
    "ceil": ((2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "dil": ((1, 9, 10), {"kernel_shape": [2, 3], "dilations": [2, 2], "pads": [1, 1, 1, 1]}),
    "s3": ((2, 11, 10), {"kernel_shape": [3, 3], "strides": [3, 3], "pads": [1, 0, 1, 2]}),
    "1d": ((3, 17), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    "3d": ((2, 5, 6, 7), {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [1, 1, 0] * 2}),
    "same": ((2, 7, 6), {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
}


@pytest.mark.parametrize("case", list(MAXPOOL))
@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("opset", [8, 12, 22])
def test_maxpool_values(case, dtype, opset, threading_mode):
    xs, attrs = MAXPOOL[case]
    if opset < 10 and ("ceil_mode" in attrs or "dilations" in attrs):
        pytest.skip("ceil_mode and dilations from MaxPool-10")
    x = rnd((2, *xs), dtype)
    check_node("MaxPool", {"x": x}, attrs, opset=opset, oracle="ort", rtol=0, atol=0)


def test_maxpool_values_f16_int8(threading_mode):
    xs, attrs = MAXPOOL["stem"]
    check_node("MaxPool", {"x": rnd((1, *xs), F16)}, attrs, opset=22, rtol=0, atol=0)
    xi = np.random.default_rng(0).integers(-100, 100, size=(1, *xs)).astype(np.int8)
    check_node("MaxPool", {"x": xi}, attrs, opset=12, oracle="ort")


def _maxpool_numpy(x, k, st, pads):
    """Max pooling by numpy over a -inf padded copy: NaN in a window gives NaN (np.max)."""
    widths = [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])]
    xp = np.pad(x, widths, constant_values=-np.inf)
    oh = (xp.shape[2] - k[0]) // st[0] + 1
    ow = (xp.shape[3] - k[1]) // st[1] + 1
    y = np.empty((*x.shape[:2], oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * st[0] : i * st[0] + k[0], j * st[1] : j * st[1] + k[1]]
            y[:, :, i, j] = np.max(win, axis=(2, 3))
    return y


@pytest.mark.parametrize("indices", [False, True])
def test_maxpool_nan_propagates(indices, threading_mode):
    # A NaN anywhere in a window makes the maximum NaN (np.max, PyTorch). onnxruntime's result
    # depends on the NaN's place in the window, so numpy is the oracle here; the Indices
    # output (first NaN in window order) is compared with onnxruntime where it has no NaN.
    x = rnd((1, 2, 9, 10))
    x[0, 0, 0, 0] = x[0, 0, 4, 5] = x[0, 1, 8, 9] = np.nan
    x[0, 1, :3, :3] = np.nan
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    model = make_node_model("MaxPool", {"x": x}, attrs, 12, n_outputs=2 if indices else 1)
    want = _maxpool_numpy(x, [3, 3], [2, 2], [1, 1, 1, 1])
    declare_outputs_like(model, [want, np.zeros(want.shape, np.int64)][: 2 if indices else 1])
    sess = onnxjit.InferenceSession(model.SerializeToString())
    for _ in range(2):  # the planning run, then the plan (its bound kernel without Indices)
        got = sess.run(None, {"x": x})
        assert_close(got[0], want, rtol=0, atol=0)
    if indices:
        flat = x.reshape(-1)
        assert np.array_equal(np.isnan(flat[got[1]]), np.isnan(want))
        assert_close(flat[got[1]], want, rtol=0, atol=0)


@pytest.mark.parametrize("case", ["stem", "2x2", "s1_asym", "ceil", "s3", "same", "dil"])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_maxpool_bound_kernel(case, dtype, threading_mode):
    """Runs take the kernel the plan binds (max_pool_values, geometry fixed once per plan);
    exact against onnxruntime, with other inputs of the same shape and earlier outputs
    kept."""
    xs, attrs = MAXPOOL[case]
    xa, xb = rnd((2, *xs), dtype, 1), rnd((2, *xs), dtype, 2)
    model = make_node_model("MaxPool", {"x": xa}, attrs, 12)
    want = [ort_outputs(model, {"x": x}) for x in (xa, xb)]
    declare_outputs_like(model, want[0])
    sess = onnxjit.InferenceSession(model.SerializeToString())
    kept = [sess.run(None, {"x": x}) for x in (xa, xb, xa, xb)]
    for got, w in zip(kept, want * 2):
        assert_close(got, w, rtol=0, atol=0)
    assert [not s["generic"] for s in sess.stats()["plans"][-1]["steps"]] == [True]


@pytest.mark.parametrize("shape", [(2, 3, 7, 9), (1, 64, 4, 4), (1, 3, 300), (1, 2, 3, 40, 50)])
def test_global_average_pool(shape, threading_mode):
    check_node("GlobalAveragePool", {"x": rnd(shape)}, opset=21, oracle="ort", rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------- conv and pool kernels in plans


def _cnn(dtype=F32):
    """Conv(bias) / FusedConv (ReLU6, residual) / depthwise / 1x1 / MaxPool / global average:
    every conv and pool lowering in one graph with a dynamic batch."""
    et = {F32: TensorProto.FLOAT, F64: TensorProto.DOUBLE}[dtype]

    def init(name, shape, seed):
        return numpy_helper.from_array(weights(shape, dtype, seed), name)

    inits = [
        init("w0", (8, 3, 3, 3), 1),
        init("b0", (8,), 2),
        init("wd", (8, 1, 3, 3), 3),
        init("bd", (8,), 4),
        init("wp", (8, 8, 1, 1), 5),
        init("w2", (16, 8, 3, 3), 6),
        numpy_helper.from_array(np.array(0.0, dtype), "lo"),
        numpy_helper.from_array(np.array(0.6, dtype), "hi"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["c0"], ["p0"], kernel_shape=[3, 3], strides=[2, 2]),
        helper.make_node("Conv", ["p0", "wd", "bd"], ["d0"], group=8, pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["d0", "lo", "hi"], ["d1"]),
        helper.make_node("Conv", ["d1", "wp"], ["q0"]),
        helper.make_node("Add", ["q0", "p0"], ["q1"]),
        helper.make_node("Relu", ["q1"], ["q2"]),
        helper.make_node("Conv", ["q2", "w2"], ["e0"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["e0"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", et, ["batch", 3, 23, 21])],
        [helper.make_tensor_value_info("y", et, ["batch", 16, 1, 1])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("dtype", [F32, F64])
def test_conv_pool_lowerings(dtype, threading_mode):
    model = _cnn(dtype)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    ops = {n.op_type for n in sess.graph_nodes()}
    assert {"Conv", "FusedConv", "MaxPool", "GlobalAveragePool"} <= ops
    rtol, atol = TOL[dtype] if dtype == F64 else (1e-4, 1e-5)
    kept = []
    for i, batch in enumerate([2, 2, 2, 1, 1, 2]):
        x = rnd((batch, 3, 23, 21), dtype, 10 + i)
        want = reference_outputs(model, {"x": x}) if dtype == F64 else ort_outputs(model, {"x": x})
        got = sess.run(None, {"x": x})
        assert_close(got, want, rtol=rtol, atol=atol)
        kept.append((got, want))
    for got, want in kept:  # no buffer handed out twice
        assert_close(got, want, rtol=rtol, atol=atol)
    bound = {s["op_type"] for s in sess.stats()["plans"][-1]["steps"] if not s["generic"]}
    assert {"Conv", "FusedConv", "MaxPool", "GlobalAveragePool"} <= bound, bound


def test_conv_plan_takes_feeds_of_other_layouts():
    # A Fortran-order feed of the planned shape, between C-order ones: the plan's kernels
    # get it C-contiguous (outputs still exact).
    model = _cnn()
    sess = onnxjit.InferenceSession(model.SerializeToString())
    x = rnd((2, 3, 23, 21), F32, 20)
    sess.run(None, {"x": x})
    xt = np.asfortranarray(x)
    assert_close(sess.run(None, {"x": xt}), ort_outputs(model, {"x": x}), rtol=1e-4, atol=1e-5)
    assert_close(sess.run(None, {"x": x}), ort_outputs(model, {"x": x}), rtol=1e-4, atol=1e-5)
