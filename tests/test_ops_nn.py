"""Neural-network operators against onnx's ReferenceEvaluator (onnxruntime where noted).

One row per op x registered version x dtype x shape class. Each registered version is tested
at an opset where it is the version selected. Inputs are seeded random values.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper
from oracle import assert_close, check_node, make_node_model, ort_outputs, reference_outputs

import onnxjit
from onnxjit import types
from onnxjit.errors import InvalidArgumentError
from onnxjit.kernels import _jit

F32, F64, F16 = np.float32, np.float64, np.float16
BF16 = ml_dtypes.bfloat16
TOL = {
    np.dtype(F32): (1e-4, 1e-5),
    np.dtype(F64): (1e-9, 1e-10),
    np.dtype(F16): (1e-2, 1e-2),
    np.dtype(BF16): (3e-2, 3e-2),
}


def rnd(shape, dtype=F32, seed=0, lo=-1.0, hi=1.0):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return rng.integers(int(lo), int(hi), size=shape).astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def tol(dtype):
    rtol, atol = TOL.get(np.dtype(dtype), (0, 0))
    return {"rtol": rtol, "atol": atol}


def typed_model(op, inputs, attrs, opset, ranks=None, n_outputs=1):
    """make_node_model, then outputs that shape inference left untyped get the first input's
    element type and the given ranks (default: the first input's rank)."""
    first = next(v for v in inputs.values() if v is not None)
    ranks = ranks or [first.ndim] * n_outputs
    model = make_node_model(op, inputs, attrs, opset, n_outputs=len(ranks))
    for out, rank in zip(model.graph.output, ranks):
        if not out.type.tensor_type.HasField("shape"):
            out.type.CopyFrom(
                helper.make_tensor_type_proto(
                    types.onnx_elem_type(first.dtype), [f"{out.name}_{i}" for i in range(rank)]
                )
            )
    return model


def check_typed(op, inputs, attrs=None, opset=None, ranks=None, oracle="ref", **tol_kw):
    """Like check_node, for nodes whose outputs onnx shape inference cannot type (function
    ops such as GroupNormalization and MVN, equations with spaces): outputs get the first
    input's element type and the given ranks, so the model passes onnxjit's checker."""
    model = typed_model(op, inputs, attrs, opset, ranks)
    feeds = {k: v for k, v in inputs.items() if v is not None}
    want = reference_outputs(model, feeds) if oracle == "ref" else ort_outputs(model, feeds)
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, feeds)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, what=f"{op}-{opset} output {i}", **tol_kw)


def check_alt(
    op,
    inputs,
    attrs,
    opset,
    oracle="ort",
    alt_op=None,
    alt_attrs=None,
    alt_opset=None,
    widen=True,
    n_outputs=1,
    **tol_kw,
):
    """onnxjit on the node as given; the oracle on an equivalent node (``alt_*``) and/or on
    the float inputs widened to float32 (where the oracle lacks the dtype), its outputs cast
    back to onnxjit's dtype. The tolerance must suit the narrower of the two types."""
    model = typed_model(op, inputs, attrs, opset, n_outputs=n_outputs)
    feeds = {k: v for k, v in inputs.items() if v is not None}
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, feeds)
    wide = {
        k: (v.astype(F32) if widen and v is not None and v.dtype.kind == "f" else v)
        for k, v in inputs.items()
    }
    alt = make_node_model(
        alt_op or op,
        wide,
        attrs if alt_attrs is None else alt_attrs,
        alt_opset or opset,
        n_outputs=n_outputs,
    )
    wfeeds = {k: v for k, v in wide.items() if v is not None}
    want = reference_outputs(alt, wfeeds) if oracle == "ref" else ort_outputs(alt, wfeeds)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, np.asarray(w).astype(g.dtype), what=f"{op}-{opset} output {i}", **tol_kw)


def wide_tol(dtype):
    """Tolerance when the oracle computed in float32."""
    return tol(F32) if np.dtype(dtype) in (np.dtype(F32), np.dtype(F64)) else tol(dtype)


def run_jit(op, inputs, attrs, opset, out_rank):
    """Run one node in onnxjit only (for error tests): outputs typed by hand."""
    first = next(iter(inputs.values()))
    node = helper.make_node(op, list(inputs), ["y"], **(attrs or {}))
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(k, types.onnx_elem_type(v.dtype), v.shape)
            for k, v in inputs.items()
        ],
        [
            helper.make_tensor_value_info(
                "y", types.onnx_elem_type(first.dtype), [f"d{i}" for i in range(out_rank)]
            )
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(onnx.IR_VERSION, 10)
    return onnxjit.InferenceSession(model.SerializeToString()).run(None, inputs)


@pytest.fixture
def parallel(monkeypatch):
    """Force the parallel kernel twins on small inputs (the oracle stays fast)."""
    monkeypatch.setattr(_jit, "PARALLEL_THRESHOLD", 1)


# ------------------------------------------------------------------------------------ MatMul

MATMUL_SHAPES = {
    "2d": ((3, 4), (4, 5)),
    "1d_2d": ((4,), (4, 5)),
    "2d_1d": ((3, 4), (4,)),
    "1d_1d": ((4,), (4,)),
    "bcast": ((2, 1, 3, 4), (5, 4, 2)),
    "zero_m": ((0, 4), (4, 5)),
    "zero_k": ((3, 0), (0, 5)),
}


@pytest.mark.parametrize("opset", [8, 9, 13])
@pytest.mark.parametrize("shape", list(MATMUL_SHAPES))
@pytest.mark.parametrize("dtype", [F32, F64, F16])
def test_matmul_float(opset, shape, dtype):
    sa, sb = MATMUL_SHAPES[shape]
    check_node("MatMul", {"a": rnd(sa, dtype), "b": rnd(sb, dtype, 1)}, opset=opset, **tol(dtype))


@pytest.mark.parametrize("opset", [9, 13])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
@pytest.mark.parametrize("shape", ["2d", "bcast", "1d_1d"])
def test_matmul_int(opset, dtype, shape):
    sa, sb = MATMUL_SHAPES[shape]
    check_node("MatMul", {"a": rnd(sa, dtype, 0, 0, 9), "b": rnd(sb, dtype, 1, 0, 9)}, opset=opset)


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_matmul_bf16(op):
    # Neither the reference evaluator nor onnxruntime's CPU provider runs bfloat16 MatMul/Gemm:
    # the oracle is the reference on the same values widened to float32, rounded to bfloat16.
    a, b = rnd((3, 4), BF16), rnd((4, 5), BF16, 1)
    m = make_node_model(op, {"a": a, "b": b}, opset=13)
    got = onnxjit.InferenceSession(m.SerializeToString()).run(None, {"a": a, "b": b})[0]
    m32 = make_node_model(op, {"a": a.astype(F32), "b": b.astype(F32)}, opset=13)
    want = reference_outputs(m32, {"a": a.astype(F32), "b": b.astype(F32)})[0].astype(BF16)
    assert_close(got, want, **tol(BF16))


def test_matmul_bad_shapes():
    with pytest.raises(InvalidArgumentError, match="inner dimensions"):
        run_jit("MatMul", {"a": rnd((3, 4)), "b": rnd((5, 6))}, None, 13, 2)


# -------------------------------------------------------------------------------------- Gemm

GEMM_C = {"none": None, "scalar": (), "row": (5,), "row2": (1, 5), "col": (3, 1), "full": (3, 5)}


@pytest.mark.parametrize("opset", [7, 9, 11, 13])
@pytest.mark.parametrize("c", list(GEMM_C))
@pytest.mark.parametrize("dtype", [F32, F64, F16])
def test_gemm(opset, c, dtype):
    if c == "none" and opset < 11:
        pytest.skip("C is optional only from Gemm-11")
    cshape = GEMM_C[c]
    inputs = {
        "a": rnd((4, 3), dtype),
        "b": rnd((5, 4), dtype, 1),
        "c": None if cshape is None else rnd(cshape, dtype, 2),
    }
    attrs = {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}
    check_node("Gemm", inputs, attrs, opset=opset, **tol(dtype))


@pytest.mark.parametrize("trans", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_transposes(trans):
    a = rnd((3, 4)) if not trans[0] else rnd((4, 3))
    b = rnd((4, 5), F32, 1) if not trans[1] else rnd((5, 4), F32, 1)
    attrs = {"transA": trans[0], "transB": trans[1]}
    check_node("Gemm", {"a": a, "b": b, "c": rnd((5,), F32, 2)}, attrs, opset=13, **tol(F32))


@pytest.mark.parametrize("opset", [9, 13])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_gemm_int(opset, dtype):
    inputs = {
        "a": rnd((3, 4), dtype, 0, -5, 5),
        "b": rnd((4, 2), dtype, 1, -5, 5),
        "c": rnd((2,), dtype, 2, -5, 5),
    }
    check_node("Gemm", inputs, {"alpha": 2.0, "beta": 3.0}, opset=opset)


@pytest.mark.parametrize("opset", [5, 6])
def test_gemm_6_broadcast(opset):
    # The reference evaluator has no Gemm-1; Gemm-6 has the same definition (oracle at 6).
    inputs = {"a": rnd((3, 4)), "b": rnd((4, 5), F32, 1), "c": rnd((5,), F32, 2)}
    attrs = {"broadcast": 1, "alpha": 1.5}
    check_alt("Gemm", inputs, attrs, opset, "ref", alt_opset=6, **tol(F32))


def test_gemm_zero_size():
    inputs = {"a": rnd((0, 4)), "b": rnd((4, 5), F32, 1), "c": rnd((5,), F32, 2)}
    check_node("Gemm", inputs, opset=13)


def test_gemm_bad_c():
    with pytest.raises(InvalidArgumentError, match="broadcast"):
        run_jit("Gemm", {"a": rnd((3, 4)), "b": rnd((4, 5)), "c": rnd((2, 5))}, None, 13, 2)


# ----------------------------------------------------------------------------- MatMulInteger


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("zp", ["none", "scalar", "vector"])
def test_matmul_integer(dtype, zp):
    lo, hi = (0, 255) if dtype == np.uint8 else (-128, 127)
    # 2-D A: the reference evaluator mis-broadcasts a per-row zero point with batched A.
    a = rnd((3, 4), dtype, 0, lo, hi)
    b = rnd((4, 5), dtype, 1, lo, hi)
    azp = bzp = None
    if zp == "scalar":
        azp, bzp = np.array(3, dtype), np.array(5, dtype)
    elif zp == "vector":
        azp, bzp = rnd((3,), dtype, 2, 0, 9), rnd((5,), dtype, 3, 0, 9)
    inputs = {"a": a, "b": b, "azp": azp, "bzp": bzp}
    if zp != "vector":
        check_node("MatMulInteger", inputs, opset=10)
        return
    # The reference evaluator subtracts a per-row a_zero_point (M,) along columns, and
    # onnxruntime rejects it: the oracle is the reference given the same zero points as an
    # (M, 1) column, which numpy broadcasts per row as the spec means.
    model = make_node_model("MatMulInteger", inputs, opset=10)
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, inputs)[0]
    alt = {**inputs, "azp": azp.reshape(-1, 1)}
    want = reference_outputs(make_node_model("MatMulInteger", alt, opset=10), alt)[0]
    assert_close(got, want)


# ------------------------------------------------------------------------------------ Einsum

EINSUM = {
    "matmul": ("ij,jk->ik", [(3, 4), (4, 5)]),
    "batch": ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    "transpose": ("ij->ji", [(3, 4)]),
    "trace": ("ii", [(4, 4)]),
    "inner": ("i,i", [(5,), (5,)]),
    "ellipsis": ("...ij,...jk->...ik", [(2, 3, 4), (4, 2)]),
    "sum": ("ij->i", [(3, 4)]),
    "three": ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
}


@pytest.mark.parametrize("opset", [12, 28])
@pytest.mark.parametrize("case", list(EINSUM))
@pytest.mark.parametrize("dtype", [F32, F64, np.int64])
def test_einsum(opset, case, dtype):
    eq, shapes = EINSUM[case]
    inputs = {f"x{i}": rnd(s, dtype, i, -4, 4) for i, s in enumerate(shapes)}
    # numpy gives only the output rank, for typing the graph output (shape inference cannot
    # type broadcast ellipses).
    rank = np.einsum(eq, *inputs.values()).ndim
    check_typed("Einsum", inputs, {"equation": eq}, opset=opset, ranks=[rank], **tol(dtype))


def test_einsum_spaces():
    inputs = {"a": rnd((2, 3)), "b": rnd((3, 4), F32, 1)}
    check_typed("Einsum", inputs, {"equation": "ij, jk -> ik"}, opset=12, ranks=[2], **tol(F32))


# -------------------------------------------------------------------------------------- Conv

CONV = {
    # name: (x shape, w shape, attrs)
    "1d": ((2, 3, 9), (4, 3, 3), {}),
    "2d": ((2, 3, 7, 8), (4, 3, 3, 3), {}),
    "3d": ((1, 2, 5, 6, 4), (3, 2, 3, 2, 2), {"pads": [1, 0, 1, 0, 1, 1]}),
    "strides_pads": ((1, 3, 9, 9), (2, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "asym_pads": ((2, 2, 6, 7), (3, 2, 3, 2), {"pads": [0, 2, 1, 0]}),
    "dilations": ((1, 2, 9, 9), (2, 2, 3, 3), {"dilations": [2, 3], "pads": [1, 2, 0, 1]}),
    "groups": ((2, 4, 6, 6), (6, 2, 3, 3), {"group": 2}),
    "depthwise": ((2, 3, 7, 7), (3, 1, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}),
    "depthwise_mult": (
        (1, 2, 8, 6),
        (6, 1, 3, 3),
        {"group": 2, "strides": [2, 1], "dilations": [1, 2]},
    ),
    "depthwise_1d": ((2, 4, 10), (4, 1, 3), {"group": 4, "pads": [2, 1]}),
    "pointwise": ((2, 5, 4, 3), (6, 5, 1, 1), {}),
    "pointwise_strided": ((1, 5, 5, 5), (6, 5, 1, 1), {"strides": [2, 2]}),
    "same_upper": ((1, 2, 7, 8), (3, 2, 4, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 3]}),
    "same_lower": ((1, 2, 7, 8), (3, 2, 4, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    "valid": ((1, 2, 7, 8), (3, 2, 3, 3), {"auto_pad": "VALID", "strides": [2, 2]}),
    "kernel_shape": ((1, 2, 5, 5), (2, 2, 2, 2), {"kernel_shape": [2, 2]}),
    "zero_batch": ((0, 3, 5, 5), (4, 3, 3, 3), {}),
}


@pytest.mark.parametrize("case", list(CONV))
@pytest.mark.parametrize("bias", [False, True])
def test_conv_f32(case, bias):
    xs, ws, attrs = CONV[case]
    inputs = {"x": rnd(xs), "w": rnd(ws, F32, 1), "b": rnd((ws[0],), F32, 2) if bias else None}
    check_node("Conv", inputs, attrs, opset=22, **tol(F32))


@pytest.mark.parametrize("opset", [10, 11, 22])
@pytest.mark.parametrize("dtype", [F32, F64, F16])
@pytest.mark.parametrize("case", ["2d", "groups", "depthwise", "pointwise", "3d"])
def test_conv_versions(opset, dtype, case):
    xs, ws, attrs = CONV[case]
    inputs = {"x": rnd(xs, dtype), "w": rnd(ws, dtype, 1), "b": rnd((ws[0],), dtype, 2)}
    check_node("Conv", inputs, attrs, opset=opset, **tol(dtype))


@pytest.mark.parametrize("case", ["2d", "depthwise", "3d"])
def test_conv_parallel(parallel, case):
    xs, ws, attrs = CONV[case]
    inputs = {"x": rnd(xs), "w": rnd(ws, F32, 1), "b": rnd((ws[0],), F32, 2)}
    check_node("Conv", inputs, attrs, opset=22, **tol(F32))


def test_conv_bad_channels():
    with pytest.raises(InvalidArgumentError, match="channels"):
        run_jit("Conv", {"x": rnd((1, 3, 5, 5)), "w": rnd((2, 2, 3, 3))}, None, 13, 4)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("zp", [False, True])
@pytest.mark.parametrize("case", ["2d", "groups", "strides_pads"])
def test_conv_integer(dtype, zp, case):
    xs, ws, attrs = CONV[case]
    lo, hi = (0, 255) if dtype == np.uint8 else (-128, 127)
    inputs = {
        "x": rnd(xs, dtype, 0, lo, hi),
        "w": rnd(ws, dtype, 1, lo, hi),
        "xzp": np.array(7, dtype) if zp else None,
        "wzp": np.array(3, dtype) if zp else None,
    }
    check_node("ConvInteger", inputs, attrs, opset=10)


# ----------------------------------------------------------------------------- ConvTranspose

CONVT = {
    "1d": ((2, 3, 5), (3, 2, 3), {}),
    "2d": ((2, 2, 4, 5), (2, 3, 3, 3), {}),
    "3d": ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), {"strides": [2, 1, 2]}),
    "strides_pads": ((1, 2, 4, 4), (2, 3, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 2]}),
    "output_padding": ((1, 2, 3, 4), (2, 2, 3, 3), {"strides": [2, 3], "output_padding": [1, 2]}),
    "dilations": ((1, 2, 4, 4), (2, 2, 3, 2), {"dilations": [2, 3]}),
    "groups": ((2, 4, 3, 3), (4, 2, 2, 2), {"group": 2, "strides": [2, 2]}),
    "output_shape": ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2], "output_shape": [8, 7]}),
    "same_upper": ((1, 2, 3, 4), (2, 2, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "same_lower": ((1, 2, 3, 4), (2, 2, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    "valid": ((1, 2, 3, 4), (2, 2, 3, 3), {"auto_pad": "VALID", "strides": [2, 1]}),
    "zero_batch": ((0, 2, 3, 3), (2, 2, 3, 3), {}),
}


@pytest.mark.parametrize("case", list(CONVT))
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose_f32(case, bias):
    xs, ws, attrs = CONVT[case]
    m = ws[1] * attrs.get("group", 1)
    inputs = {"x": rnd(xs), "w": rnd(ws, F32, 1), "b": rnd((m,), F32, 2) if bias else None}
    # The reference evaluator ignores output_shape when it computes pads (it keeps zero pads),
    # fails on group > 1 with batch > 1 and on an empty batch: onnxruntime is the oracle there.
    oracle = "ort" if ("output_shape" in attrs or "group" in attrs or xs[0] != 1) else "ref"
    check_node("ConvTranspose", inputs, attrs, opset=22, oracle=oracle, **tol(F32))


@pytest.mark.parametrize("opset", [10, 11, 22])
@pytest.mark.parametrize("dtype", [F32, F64, F16])
@pytest.mark.parametrize("case", ["2d", "groups", "1d"])
def test_conv_transpose_versions(opset, dtype, case):
    xs, ws, attrs = CONVT[case]
    m = ws[1] * attrs.get("group", 1)
    inputs = {"x": rnd(xs, dtype), "w": rnd(ws, dtype, 1), "b": rnd((m,), dtype, 2)}
    if "group" in attrs or xs[0] != 1:
        # See test_conv_transpose_f32; onnxruntime has only float32 ConvTranspose.
        check_alt("ConvTranspose", inputs, attrs, opset, **wide_tol(dtype))
    else:
        check_node("ConvTranspose", inputs, attrs, opset=opset, **tol(dtype))


def test_conv_transpose_parallel(parallel):
    xs, ws, attrs = CONVT["strides_pads"]
    check_node("ConvTranspose", {"x": rnd(xs), "w": rnd(ws, F32, 1)}, attrs, opset=22, **tol(F32))


# ----------------------------------------------------------------------------------- Pooling

POOL = {
    "1d": ((2, 3, 9), {"kernel_shape": [3]}),
    "2d": ((2, 3, 6, 7), {"kernel_shape": [2, 3]}),
    "3d": ((1, 2, 5, 4, 6), {"kernel_shape": [2, 2, 3], "strides": [1, 2, 2]}),
    "strides": ((1, 2, 8, 9), {"kernel_shape": [3, 3], "strides": [2, 3]}),
    "pads": ((1, 2, 5, 6), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    "asym_pads": ((2, 1, 5, 6), {"kernel_shape": [3, 2], "pads": [0, 1, 2, 1], "strides": [2, 1]}),
    "same_upper": (
        (1, 2, 7, 6),
        {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    ),
    "same_lower": (
        (1, 2, 7, 6),
        {"kernel_shape": [3, 2], "auto_pad": "SAME_LOWER", "strides": [2, 2]},
    ),
    "valid": ((1, 2, 7, 6), {"kernel_shape": [3, 2], "auto_pad": "VALID", "strides": [2, 2]}),
    "zero_batch": ((0, 2, 5, 5), {"kernel_shape": [2, 2]}),
}
POOL_CEIL = {
    "ceil": ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "ceil_pads": (
        (1, 1, 6, 6),
        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 0, 1, 1]},
    ),
    "ceil_drop_last": (
        (1, 1, 5, 5),
        {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 1, 1, 1]},
    ),
}
POOL_DIL = {
    "dilations": ((1, 2, 8, 9), {"kernel_shape": [2, 3], "dilations": [2, 2]}),
    "dil_pads_ceil": (
        (1, 1, 7, 7),
        {
            "kernel_shape": [2, 2],
            "dilations": [2, 1],
            "pads": [1, 1, 0, 1],
            "strides": [2, 2],
            "ceil_mode": 1,
        },
    ),
    "dil_3d": ((1, 1, 5, 6, 5), {"kernel_shape": [2, 2, 2], "dilations": [2, 1, 2]}),
}


def _pool_cases(*tables):
    return [(t, name) for t in tables for name in t]


@pytest.mark.parametrize("opset", [12, 22])
@pytest.mark.parametrize("case", [*POOL, *POOL_CEIL, *POOL_DIL])
def test_maxpool_indices(opset, case):
    # The reference evaluator's Indices use the wrong plane width when the padded input is
    # wider than the input, and its SAME_LOWER windows are shifted: onnxruntime is the oracle
    # for every MaxPool with Indices.
    xs, attrs = {**POOL, **POOL_CEIL, **POOL_DIL}[case]
    check_node("MaxPool", {"x": rnd(xs)}, attrs, opset=opset, n_outputs=2, oracle="ort")


@pytest.mark.parametrize("case", ["2d", "3d", "pads", "1d"])
def test_maxpool_storage_order(case):
    xs, attrs = POOL[case]
    attrs = {**attrs, "storage_order": 1}
    check_node("MaxPool", {"x": rnd(xs)}, attrs, opset=12, n_outputs=2, oracle="ort")


@pytest.mark.parametrize("opset", [7, 8, 10, 11, 12, 22])
@pytest.mark.parametrize("dtype", [F32, F64, F16])
@pytest.mark.parametrize("case", ["2d", "pads", "1d"])
def test_maxpool_versions(opset, dtype, case):
    xs, attrs = POOL[case]
    n_out = 1 if opset < 8 else 2
    oracle = "ref" if n_out == 1 else "ort"  # see test_maxpool_indices
    check_node("MaxPool", {"x": rnd(xs, dtype)}, attrs, opset=opset, n_outputs=n_out, oracle=oracle)


@pytest.mark.parametrize("opset", [10, 11])
@pytest.mark.parametrize("case", list(POOL_CEIL))
def test_maxpool_ceil_10(opset, case):
    xs, attrs = POOL_CEIL[case]
    check_node("MaxPool", {"x": rnd(xs)}, attrs, opset=opset)


@pytest.mark.parametrize("opset", [12, 22])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_maxpool_int8(opset, dtype):
    # The reference evaluator pads integer inputs with NaN and fails: onnxruntime instead.
    xs, attrs = POOL["pads"]
    check_node("MaxPool", {"x": rnd(xs, dtype, 0, 0, 100)}, attrs, opset=opset, oracle="ort")


def test_maxpool_parallel(parallel):
    check_node(
        "MaxPool",
        {"x": rnd((2, 3, 9, 8))},
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
        opset=22,
        n_outputs=2,
        oracle="ort",
    )


@pytest.mark.parametrize("cip", [0, 1])
@pytest.mark.parametrize("case", [*POOL, *POOL_CEIL, *POOL_DIL])
def test_averagepool(cip, case):
    xs, attrs = {**POOL, **POOL_CEIL, **POOL_DIL}[case]
    check_node(
        "AveragePool", {"x": rnd(xs)}, {**attrs, "count_include_pad": cip}, opset=22, **tol(F32)
    )


@pytest.mark.parametrize("opset", [6, 7, 10, 11, 19, 22])
@pytest.mark.parametrize("dtype", [F32, F64, F16])
@pytest.mark.parametrize("case", ["2d", "pads", "1d"])
def test_averagepool_versions(opset, dtype, case):
    xs, attrs = POOL[case]
    x = rnd(xs, dtype)
    if opset < 7:
        # AveragePool-1 never counts padding, but the reference evaluator counts it and
        # onnxruntime lacks version 1: the oracle is the reference's AveragePool-7 with
        # count_include_pad=0, the same definition.
        model = make_node_model("AveragePool", {"x": x}, attrs, opset)
        got = onnxjit.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
        model7 = make_node_model("AveragePool", {"x": x}, {**attrs, "count_include_pad": 0}, 7)
        assert_close(got, reference_outputs(model7, {"x": x})[0], **tol(dtype))
        return
    attrs = {**attrs, "count_include_pad": 1}
    check_node("AveragePool", {"x": x}, attrs, opset=opset, **tol(dtype))


@pytest.mark.parametrize("opset", [10, 11])
@pytest.mark.parametrize("case", list(POOL_CEIL))
def test_averagepool_ceil_10(opset, case):
    xs, attrs = POOL_CEIL[case]
    check_node("AveragePool", {"x": rnd(xs)}, attrs, opset=opset, **tol(F32))


def test_averagepool_parallel(parallel):
    check_node(
        "AveragePool",
        {"x": rnd((2, 3, 9, 8))},
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
        opset=22,
        **tol(F32),
    )


@pytest.mark.parametrize("case", [*POOL, *POOL_DIL])
@pytest.mark.parametrize("p", [1, 2, 3])
def test_lppool(case, p):
    xs, attrs = {**POOL, **POOL_DIL}[case]
    if "ceil_mode" in attrs:
        # onnx's reference LpPool applies ceil_mode by padding with zeros past the input;
        # covered by the ceil cases against onnxruntime below.
        pytest.skip("ceil_mode LpPool is checked against onnxruntime in test_lppool_ceil")
    check_node("LpPool", {"x": rnd(xs)}, {**attrs, "p": p}, opset=22, **tol(F32))


@pytest.mark.parametrize("opset", [10, 11, 18, 22])
@pytest.mark.parametrize("dtype", [F32, F64, F16])
@pytest.mark.parametrize("case", ["2d", "pads", "1d"])
def test_lppool_versions(opset, dtype, case):
    xs, attrs = POOL[case]
    check_node("LpPool", {"x": rnd(xs, dtype)}, {**attrs, "p": 3}, opset=opset, **tol(dtype))


@pytest.mark.parametrize("case", list(POOL_CEIL))
def test_lppool_ceil(case):
    xs, attrs = POOL_CEIL[case]
    check_node("LpPool", {"x": rnd(xs)}, attrs, opset=18, oracle="ort", **tol(F32))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
@pytest.mark.parametrize("opset", [21, 22])
@pytest.mark.parametrize("dtype", [F32, F64, F16])
@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 2), (0, 3, 4, 4)])
def test_global_pools(op, opset, dtype, shape):
    # The reference evaluator has no GlobalLpPool, returns wrong shapes for GlobalMaxPool of
    # other than 2-D inputs and divides by zero on an empty batch; onnxruntime lacks these ops
    # at opset 22 and for float16/float64. Oracles: GlobalAveragePool / GlobalMaxPool are
    # onnxruntime's opset-21 version on float32; GlobalLpPool is the reference's LpPool with
    # the whole spatial extent as its window (the same definition).
    x = rnd(shape, dtype)
    if op == "GlobalLpPool":
        alt = {"kernel_shape": list(shape[2:])}
        check_alt(op, {"x": x}, None, opset, "ref", "LpPool", alt, 22, **wide_tol(dtype))
    else:
        check_alt(op, {"x": x}, None, opset, "ort", alt_opset=21, **wide_tol(dtype))


def test_global_lppool_p3():
    x = rnd((2, 3, 4, 5))
    alt = {"kernel_shape": [4, 5], "p": 3}
    check_alt("GlobalLpPool", {"x": x}, {"p": 3}, 22, "ref", "LpPool", alt, **tol(F32))


# ------------------------------------------------------------------- Softmax family


SOFTMAX_SHAPES = {"1d": (7,), "2d": (3, 5), "3d": (2, 3, 4), "4d": (2, 3, 4, 5), "zero": (0, 4)}


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [10, 11, 13])
@pytest.mark.parametrize("axis", [0, 1, -1, None])
@pytest.mark.parametrize("shape", ["2d", "3d", "4d"])
def test_softmax_axes(op, opset, axis, shape):
    x = rnd(SOFTMAX_SHAPES[shape], F32, 0, -5, 5)
    if op == "Hardmax":
        x = np.round(x)  # ties: the first maximum wins
    attrs = {} if axis is None else {"axis": axis}
    # The reference evaluator implements only the -13 semantics (one axis); versions 1 and 11
    # coerce to 2-D, which onnxruntime implements.
    oracle = "ort" if opset < 13 else "ref"
    check_node(op, {"x": x}, attrs, opset=opset, oracle=oracle, **tol(F32))


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("dtype", [F32, F64, F16])
@pytest.mark.parametrize("shape", list(SOFTMAX_SHAPES))
def test_softmax_dtypes(op, opset, dtype, shape):
    x = rnd(SOFTMAX_SHAPES[shape], dtype, 0, -5, 5)
    attrs = {"axis": 0} if shape == "1d" else {}
    if opset < 13:
        # See test_softmax_axes; onnxruntime lacks some float16/float64 kernels before 13.
        check_alt(op, {"x": x}, attrs, opset, **wide_tol(dtype))
    else:
        check_node(op, {"x": x}, attrs, opset=opset, **tol(dtype))


def test_softmax_large_values():
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 3.0]], F32)
    check_node("Softmax", {"x": x}, opset=13, **tol(F32))
    # The reference computes log(softmax) and underflows to -inf; onnxruntime does not.
    check_node("LogSoftmax", {"x": x}, opset=13, oracle="ort", **tol(F32))


def _softmax64(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis of 2-D ``x`` in float64 numpy (the oracle)."""
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _last_axis_runs(op: str, x: np.ndarray):
    """The output of ``op`` over the last axis of ``x`` on 1 and on 2 threads, each at the
    first run (the planning run) and the second (the plan's bound kernel)."""
    model = make_node_model(op, {"x": x}, {"axis": -1}, opset=13)
    for threads in (1, 2):
        opts = onnxjit.SessionOptions()
        opts.intra_op_num_threads = threads
        sess = onnxjit.InferenceSession(model.SerializeToString(), opts)
        for _ in range(2):
            yield sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_softmax_nan_and_inf_rows(parallel, op, dtype):
    """A NaN anywhere in a row makes the whole row NaN, as numpy's formula does (the row
    maximum is taken without NaN semantics, so this is what keeps that safe); +inf gives a
    NaN row, -inf entries give 0 (Softmax) or -inf (LogSoftmax); rows wider than one vector
    so that the NaN sits in the vector body and in the tail."""
    x = rnd((8, 37), dtype, 0, -5, 5)
    x[0, 0] = x[1, 17] = x[2, 36] = np.nan
    x[3, 5] = np.inf
    x[4, :] = -np.inf
    x[5, 3] = x[5, 30] = -np.inf
    x[6, :] = np.nan
    with np.errstate(all="ignore"):
        want = _softmax64(x)
        if op == "LogSoftmax":
            want = np.log(want)
    for got in _last_axis_runs(op, x):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_softmax_rows_around_exp_underflow(dtype):
    """Rows whose smallest shifted score sits on either side of where e^x stops being a
    normal float32 (about -87.34): the kernel drops its exp clamp for rows entirely above
    that bound, so rows just above, just below, far below and with -inf check both of its
    exp loops (values and zeros) against float64 numpy."""
    rng = np.random.default_rng(5)
    spreads = [10.0, 87.3, 87.33, 87.34, 87.4, 87.7, 88.0, 100.0, 300.0, np.inf]
    x = rng.uniform(-3, 3, (len(spreads), 67)).astype(dtype)
    for i, spread in enumerate(spreads):
        top = x[i].max()
        x[i, 7] = top - dtype(spread)  # in the vector body
        x[i, 66] = top - dtype(spread / 2)  # in the tail
    want = _softmax64(x)
    # e^x below the smallest normal may come out subnormal or 0 (exp_nonpos_f32's contract):
    # those terms are held to an absolute bound of that size
    tiny = np.finfo(dtype).tiny
    for got in _last_axis_runs("Softmax", x):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=tiny)
        assert (got[want >= 2 * tiny] > 0).all()


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [1, -1])
def test_softmax_parallel(parallel, op, axis):
    check_node(op, {"x": rnd((4, 6, 5), F32, 0, -5, 5)}, {"axis": axis}, opset=13, **tol(F32))


def test_softmax_bad_axis():
    with pytest.raises(InvalidArgumentError, match="axis"):
        run_jit("Softmax", {"x": rnd((2, 3))}, {"axis": 2}, 13, 2)


# ------------------------------------------------------------------------ BatchNormalization


def _bn_inputs(shape, dtype, c=None):
    c = shape[1] if c is None else c
    pshape = (c,) if isinstance(c, int) else c
    return {
        "x": rnd(shape, dtype),
        "scale": rnd(pshape, dtype, 1),
        "b": rnd(pshape, dtype, 2),
        "mean": rnd(pshape, dtype, 3),
        "var": rnd(pshape, dtype, 4, 0.5, 2.0),
    }


BN_SHAPES = {
    "2d": (4, 3),
    "4d": (2, 3, 4, 5),
    "3d": (2, 3, 6),
    "5d": (1, 2, 2, 3, 2),
    "zero": (0, 3, 2, 2),
}


@pytest.mark.parametrize("opset", [7, 9, 14, 15])
@pytest.mark.parametrize("dtype", [F32, F64, F16])
@pytest.mark.parametrize("shape", list(BN_SHAPES))
def test_batchnorm(opset, dtype, shape):
    # The reference evaluator runs BatchNormalization-6/7/9 in training mode even with one
    # output: onnxruntime is the oracle before 14.
    check_node(
        "BatchNormalization",
        _bn_inputs(BN_SHAPES[shape], dtype),
        {"epsilon": 1e-3},
        opset=opset,
        oracle="ort" if opset < 14 else "ref",
        **tol(dtype),
    )


def test_batchnorm_7_not_spatial():
    shape = (2, 3, 4)
    check_node(
        "BatchNormalization",
        _bn_inputs(shape, F32, (3, 4)),
        {"spatial": 0},
        opset=7,
        oracle="ort",
        **tol(F32),
    )


@pytest.mark.parametrize("opset", [14, 15])
def test_batchnorm_training(opset):
    inputs = _bn_inputs((3, 2, 4, 5), F32)
    check_node(
        "BatchNormalization",
        inputs,
        {"training_mode": 1, "momentum": 0.8},
        opset=opset,
        n_outputs=3,
        **tol(F32),
    )


def test_batchnorm_parallel(parallel):
    check_node("BatchNormalization", _bn_inputs((2, 3, 4, 5), F32), opset=15, **tol(F32))


def test_batchnorm_9_training_outputs_unsupported():
    inputs = _bn_inputs((2, 3, 4), F32)
    outs = ["y", "m", "v", "sm", "sv"]
    node = helper.make_node("BatchNormalization", list(inputs), outs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(k, 1, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, 1, [2, 3, 4] if o == "y" else [3]) for o in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 10
    with pytest.raises(NotImplementedError, match="training"):
        onnxjit.InferenceSession(model.SerializeToString()).run(None, inputs)


# --------------------------------------------------------------- Instance / Group / Layer norm


@pytest.mark.parametrize("opset", [6, 22])
@pytest.mark.parametrize("dtype", [F32, F64, F16])
@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 2, 2), (0, 3, 4)])
def test_instance_norm(opset, dtype, shape):
    c = shape[1]
    inputs = {"x": rnd(shape, dtype), "s": rnd((c,), dtype, 1), "b": rnd((c,), dtype, 2)}
    check_node("InstanceNormalization", inputs, {"epsilon": 1e-4}, opset=opset, **tol(dtype))


@pytest.mark.parametrize("dtype", [F32, F64, F16])
@pytest.mark.parametrize(
    "shape,groups", [((2, 6, 5), 3), ((2, 4, 3, 3), 2), ((1, 4, 2), 4), ((3, 4), 1), ((0, 4, 3), 2)]
)
def test_group_norm_18(dtype, shape, groups):
    inputs = {"x": rnd(shape, dtype), "s": rnd((groups,), dtype, 1), "b": rnd((groups,), dtype, 2)}
    attrs = {"num_groups": groups}
    if shape[0] == 0:
        _check_empty("GroupNormalization", inputs, attrs, 18)
    else:
        _check_group_norm(inputs, attrs, 18, dtype)


def _check_group_norm(inputs, attrs, opset, dtype):
    if dtype == F16:
        # The reference computes float16 statistics in float16, far less accurate than
        # onnxjit's float32 on tiny groups: the oracle runs on the values widened to float32.
        check_alt("GroupNormalization", inputs, attrs, opset, "ref", **tol(F16))
    else:
        # stash_type=1: the reference computes the statistics in float32 even for float64
        # inputs (onnxjit keeps float64), so float64 is compared at float32 precision.
        check_typed("GroupNormalization", inputs, attrs, opset=opset, **wide_tol(dtype))


def _check_empty(op, inputs, attrs, opset):
    # Both oracles fail on an empty batch (reshape errors); the spec's answer is an empty Y of
    # X's shape and type.
    x = inputs["x"]
    model = typed_model(op, inputs, attrs, opset)
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, inputs)[0]
    assert got.shape == x.shape and got.dtype == x.dtype


@pytest.mark.parametrize("dtype", [F32, F64, F16])
@pytest.mark.parametrize(
    "shape,groups", [((2, 6, 5), 3), ((2, 4, 3, 3), 2), ((1, 4, 2), 4), ((0, 4, 3), 2)]
)
def test_group_norm_21(dtype, shape, groups):
    c = shape[1]
    inputs = {"x": rnd(shape, dtype), "s": rnd((c,), dtype, 1), "b": rnd((c,), dtype, 2)}
    attrs = {"num_groups": groups, "epsilon": 1e-3}
    if shape[0] == 0:
        _check_empty("GroupNormalization", inputs, attrs, 21)  # see test_group_norm_18
    else:
        _check_group_norm(inputs, attrs, 21, dtype)


def test_group_norm_parallel(parallel):
    inputs = {"x": rnd((2, 4, 3, 3)), "s": rnd((4,), F32, 1), "b": rnd((4,), F32, 2)}
    check_typed("GroupNormalization", inputs, {"num_groups": 2}, opset=21, **tol(F32))


@pytest.mark.parametrize("dtype", [F32, F64, F16])
@pytest.mark.parametrize(
    "shape,axis",
    [((2, 3, 4), -1), ((2, 3, 4), 1), ((2, 3, 4), 0), ((5,), 0), ((2, 3, 4, 5), -2), ((0, 4), -1)],
)
@pytest.mark.parametrize("bias", [False, True])
def test_layer_norm(dtype, shape, axis, bias):
    norm = shape[axis:] if axis >= 0 else shape[len(shape) + axis :]
    inputs = {
        "x": rnd(shape, dtype),
        "s": rnd(norm, dtype, 1),
        "b": rnd(norm, dtype, 2) if bias else None,
    }
    check_node("LayerNormalization", inputs, {"axis": axis}, opset=17, **tol(dtype))


@pytest.mark.parametrize("dtype", [F32, F64, F16])
@pytest.mark.parametrize("shape,axis", [((2, 3, 4), -1), ((2, 3, 4), 1), ((0, 4), 1)])
def test_layer_norm_stats(dtype, shape, axis):
    # Mean / InvStdDev have the stash type (float32), per the spec, onnx shape inference and
    # onnxruntime; the reference evaluator casts them to X's type, so onnxruntime is the oracle.
    inputs = {
        "x": rnd(shape, dtype),
        "s": rnd(shape[axis:], dtype, 1),
        "b": rnd(shape[axis:], dtype, 2),
    }
    check_node(
        "LayerNormalization",
        inputs,
        {"axis": axis, "epsilon": 1e-3},
        opset=17,
        n_outputs=3,
        oracle="ort",
        **tol(dtype),
    )


def test_layer_norm_broadcast_scale():
    inputs = {"x": rnd((2, 3, 4)), "s": rnd((4,), F32, 1), "b": rnd((1, 4), F32, 2)}
    check_node("LayerNormalization", inputs, {"axis": 1}, opset=17, **tol(F32))


def test_layer_norm_parallel(parallel):
    inputs = {"x": rnd((3, 4, 5)), "s": rnd((5,), F32, 1), "b": rnd((5,), F32, 2)}
    check_node("LayerNormalization", inputs, opset=17, n_outputs=3, **tol(F32))


@pytest.mark.parametrize("opset", [9, 13])
@pytest.mark.parametrize("dtype", [F32, F64, F16])
@pytest.mark.parametrize(
    "shape,axes",
    [
        ((2, 3, 4, 5), None),
        ((2, 3, 4, 5), [1]),
        ((2, 3, 4), [0, 2]),
        ((3, 4), [1]),
        ((0, 3, 2, 2), None),
    ],
)
def test_mvn(opset, dtype, shape, axes):
    attrs = {} if axes is None else {"axes": axes}
    # The oracles compute E[x^2] - E[x]^2, which cancels (onnxjit uses two passes): loose.
    t = {"rtol": 2e-2, "atol": 5e-2} if dtype == F16 else {"rtol": 1e-3, "atol": 1e-4}
    # The function body's float32 constants clash with float64/float16 inputs in both oracles:
    # those run on the values widened to float32.
    x = rnd(shape, dtype)
    if dtype == F32:
        check_typed("MeanVarianceNormalization", {"x": x}, attrs, opset=opset, **t)
    else:
        check_alt("MeanVarianceNormalization", {"x": x}, attrs, opset, "ref", **t)


# ----------------------------------------------------------------------------------------- LRN


@pytest.mark.parametrize("opset", [12, 13])
@pytest.mark.parametrize("dtype", [F32, F64, F16])
@pytest.mark.parametrize("shape", [(3, 3, 2, 2), (4, 4, 3, 1), (0, 3, 2, 2)])
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_lrn(opset, dtype, shape, size):
    # The reference evaluator loops its channel window over the batch dim, which is right
    # only when N == C (or the batch is empty): these shapes keep it a valid oracle.
    attrs = {"size": size, "alpha": 0.01, "beta": 0.5, "bias": 2.0}
    check_node("LRN", {"x": rnd(shape, dtype)}, attrs, opset=opset, **tol(dtype))


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_ort(size):
    # onnxruntime (odd sizes, float32 only) for N != C.
    attrs = {"size": size, "alpha": 0.01, "beta": 0.5, "bias": 2.0}
    check_node("LRN", {"x": rnd((2, 6, 3, 4))}, attrs, opset=13, oracle="ort", **tol(F32))


def test_lrn_defaults():
    check_node("LRN", {"x": rnd((1, 6, 3, 3))}, {"size": 5}, opset=13, oracle="ort", **tol(F32))


@pytest.mark.parametrize("shape", [(1, 4, 6), (2, 3), (1, 3, 2, 2, 2)])
def test_lrn_not_4d(shape):
    # onnxruntime runs only 4-D LRN. LRN mixes channels only, so the oracle is onnxruntime on
    # the same values viewed as (N, C, prod(rest), 1).
    x = rnd(shape)
    attrs = {"size": 3, "alpha": 0.01, "beta": 0.5, "bias": 2.0}
    model = make_node_model("LRN", {"x": x}, attrs, 13)
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    x4 = x.reshape(shape[0], shape[1], -1, 1)
    want = ort_outputs(make_node_model("LRN", {"x": x4}, attrs, 13), {"x": x4})[0]
    assert_close(got, want.reshape(shape), **tol(F32))


@pytest.mark.parametrize("op", ["LpPool", "GlobalLpPool"])
def test_lppool_1(op):
    # Version 1 takes p as a float; neither oracle runs opset 1. The oracle is onnxruntime on
    # the version-2 node with the same (integral) p, which has the same definition.
    x = rnd((2, 3, 5, 6))
    attrs = {"kernel_shape": [2, 3], "pads": [1, 0, 0, 1]} if op == "LpPool" else {}
    model1 = typed_model(op, {"x": x}, {**attrs, "p": 3.0}, 1)
    got = onnxjit.InferenceSession(model1.SerializeToString()).run(None, {"x": x})[0]
    if op == "GlobalLpPool":
        op, attrs = "LpPool", {"kernel_shape": [5, 6]}  # see test_global_pools
    model2 = make_node_model(op, {"x": x}, {**attrs, "p": 3}, 11)
    assert_close(got, reference_outputs(model2, {"x": x})[0], **tol(F32))
