"""Quantization operators: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
QLinearMatMul, QLinearConv.

The affine loops (scale broadcast per tensor / axis / block, round half to even, zero point,
clamp) are the backend's ``quant`` kernels (kernels/cpu/quant.py). They run in float32 (float64
where the input or the requantization factor is float64) and produce floats holding the
quantized values; the final conversion to the storage type (int8 ... int2, float8, float4,
float6) is one numpy/ml_dtypes ``astype``, through Cast's ``cast_array`` for the saturating
float8 conversion.
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from onnxjit import types as onnx_types
from onnxjit.codegen import expr as E
from onnxjit.lowering import TENSOR, Bound, In, LowerContext, Out, lowers, tensor, writes
from onnxjit.ops.elementwise import NotFusable, cast_array, fusible, lower_node
from onnxjit.ops.nn import (
    IntegerProduct,
    conv_integer,
    integer_conv,
    integer_zero_point,
    zero_point_spec,
)
from onnxjit.registry import NodeContext, onnx_op

# Integer storage types and their saturation ranges.
_INT_RANGES: dict[np.dtype, tuple[int, int]] = {
    np.dtype(np.uint8): (0, 255),
    np.dtype(np.int8): (-128, 127),
    np.dtype(np.uint16): (0, 65535),
    np.dtype(np.int16): (-32768, 32767),
    np.dtype(np.int32): (-(2**31), 2**31 - 1),
    np.dtype(ml_dtypes.uint4): (0, 15),
    np.dtype(ml_dtypes.int4): (-8, 7),
}
for _name, _rng in (("uint2", (0, 3)), ("int2", (-2, 1))):
    if hasattr(ml_dtypes, _name):
        _INT_RANGES[np.dtype(getattr(ml_dtypes, _name))] = _rng

# Low-precision float storage types: quantized by a (saturating) float conversion.
_FLOAT_Q_NAMES = ("float8", "float4", "float6")


def _is_float_q(dt: np.dtype) -> bool:
    return any(dt.name.startswith(p) for p in _FLOAT_Q_NAMES)


def _to_float(a: np.ndarray, dtype: Any = np.float32) -> np.ndarray:
    """Any numeric (incl. ml_dtypes) array as a contiguous float array of ``dtype``."""
    # np.require keeps 0-d arrays 0-d (ascontiguousarray would make them 1-d).
    return np.require(np.asarray(a).astype(dtype, copy=False), requirements="C")


def _layout(
    ctx: NodeContext,
    shape: tuple[int, ...],
    scale: np.ndarray,
    zero: np.ndarray | None,
    axis: int,
    block_size: int,
    what: str,
) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
    """The canonical (outer, axis, inner) shape of the data, the 3-D shape of the scale and
    the block length, from the scale's shape (per tensor / per axis / blocked)."""
    # Shapes must agree; a scalar and a one-element 1-D tensor are both per-tensor.
    if zero is not None and zero.shape != scale.shape and not (zero.size == scale.size == 1):
        raise ctx.error(
            f"the zero point has shape {zero.shape} but {what} has shape {scale.shape}; they must "
            "have the same shape"
        )
    n = math.prod(shape)
    if scale.size == 1 and (scale.ndim <= 1 or not block_size):
        return (1, n, 1), (1, 1, 1), max(n, 1)
    r = len(shape)
    if not -r <= axis < r:
        raise ctx.error(f"axis={axis} is out of range for an input of rank {r}")
    ax = axis % r
    outer = math.prod(shape[:ax])
    inner = math.prod(shape[ax + 1 :])
    d = shape[ax]
    if block_size and block_size > 0:
        if scale.ndim != r or any(scale.shape[k] != shape[k] for k in range(r) if k != ax):
            raise ctx.error(
                f"blocked quantization needs {what} of the input's shape {shape} except along "
                f"axis {ax}, got {scale.shape}"
            )
        nb = scale.shape[ax]
        if -(-d // block_size) != nb:
            raise ctx.error(
                f"block_size={block_size} along axis {ax} (length {d}) needs {-(-d // block_size)} "
                f"blocks but {what} has {nb}"
            )
        return (outer, d, inner), (outer, nb, inner), block_size
    if block_size and block_size < 0:
        raise ctx.error(f"block_size must be positive, got {block_size}")
    if scale.ndim != 1 or scale.shape[0] != d:
        raise ctx.error(
            f"per-axis quantization needs a 1-D {what} of length {d} (axis {ax} of input shape "
            f"{shape}), got shape {scale.shape}; use a scalar for per-tensor quantization or "
            "block_size for blocked quantization"
        )
    return (outer, d, inner), (1, d, 1), 1


def _run_affine(
    ctx: NodeContext,
    x3: np.ndarray,
    s3: np.ndarray,
    z3: np.ndarray,
    block: int,
    divide: bool,
    do_round: bool,
    lo: float,
    hi: float,
) -> np.ndarray:
    """Call the quantize kernel (serial or parallel by size); all arrays share one dtype."""
    out = np.empty(x3.shape, x3.dtype)
    if out.size == 0:
        return out
    args = (x3, s3, z3, np.int64(block), divide, do_round, float(lo), float(hi), out)
    ctx.run_kernel("quant", "quantize", out.size, *args)
    return out


def _store(ctx: NodeContext, q: np.ndarray, dst: np.dtype, saturate: int) -> np.ndarray:
    """Float values (already rounded and clamped for integer targets) -> storage type."""
    if dst in _INT_RANGES:
        return q.astype(dst)
    # float8 saturation (Cast-19 semantics); float4/float6 conversions always saturate.
    return cast_array(ctx, q, dst, saturate)


def _quantize(
    ctx: NodeContext,
    x: np.ndarray,
    scale: np.ndarray,
    zero: np.ndarray | None,
    *,
    axis: int = 1,
    block_size: int = 0,
    saturate: int = 1,
    output_dtype: int = 0,
    precision: int = 0,
) -> np.ndarray:
    if zero is not None:
        dst = zero.dtype
        if output_dtype and onnx_types.np_dtype(output_dtype) != dst:
            raise ctx.error(
                f"output_dtype={output_dtype} ({onnx_types.elem_type_name(output_dtype)}) "
                f"differs from the zero point's type {dst}; they must agree"
            )
    elif output_dtype:
        dst = onnx_types.np_dtype(output_dtype)
    else:
        dst = np.dtype(np.uint8)
    if dst not in _INT_RANGES and not _is_float_q(dst):
        raise ctx.error(f"{dst} is not a quantized type (int8/uint8/.../float8/float4)")
    xs, ss, _bs = _layout(ctx, x.shape, scale, zero, axis, block_size, "y_scale")
    # Division precision: the ``precision`` attribute, else the scale's type when x has the
    # same type, else the wider of the two (as numpy promotes x / y_scale). Division is done
    # in float32 (float64 for int32 or float64 operands); a float16 / bfloat16 precision
    # rounds the float32 quotient to that type, which equals the correctly rounded narrow
    # division (float32 has more than 2p+2 bits).
    if precision:
        prec = onnx_types.np_dtype(precision)
    elif x.dtype == scale.dtype:
        prec = scale.dtype
    else:
        prec = np.result_type(_promotable(x.dtype), _promotable(scale.dtype))
    narrow = prec in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
    cdt = np.float64 if prec in (np.dtype(np.float64), np.dtype(np.int32)) else np.float32
    x3 = _to_float(x.astype(prec, copy=False) if narrow else x, cdt).reshape(xs)
    s3 = _to_float(scale.astype(prec, copy=False) if narrow else scale, cdt)
    s3 = s3.reshape(ss)
    z3 = np.zeros(ss, cdt) if zero is None else _to_float(zero, cdt).reshape(ss)
    is_int = dst in _INT_RANGES
    lo, hi = _INT_RANGES[dst] if is_int else (-np.inf, np.inf)
    if narrow:
        q = _run_affine(ctx, x3, s3, np.zeros_like(z3), _bs, True, False, -np.inf, np.inf)
        q = _to_float(q.astype(prec), cdt)
        one = np.ones(ss, cdt)
        q = _run_affine(ctx, q, one, z3, _bs, False, is_int, lo, hi)
    else:
        q = _run_affine(ctx, x3, s3, z3, _bs, True, is_int, lo, hi)
    return _store(ctx, q.reshape(x.shape), dst, saturate)


def _promotable(dt: np.dtype) -> np.dtype:
    """ml_dtypes types (bfloat16, float8e8m0 scales) do not take part in numpy promotion:
    treat them as float32, which holds them exactly."""
    return np.dtype(np.float32) if dt.kind == "V" else dt


def _dequantize(
    ctx: NodeContext,
    x: np.ndarray,
    scale: np.ndarray,
    zero: np.ndarray | None,
    *,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
) -> np.ndarray:
    if zero is not None and zero.dtype != x.dtype:
        raise ctx.error(f"x is {x.dtype} but x_zero_point is {zero.dtype}; they must agree")
    dst = onnx_types.np_dtype(output_dtype) if output_dtype else scale.dtype
    xs, ss, bs = _layout(ctx, x.shape, scale, zero, axis, block_size, "x_scale")
    # Computed in float32 (as (x - zero) * scale); float16 / bfloat16 outputs are rounded
    # from it.
    x3 = _to_float(x).reshape(xs)
    s3 = _to_float(scale).reshape(ss)
    z3 = np.zeros(ss, np.float32) if zero is None else _to_float(zero).reshape(ss)
    out = np.empty(xs, np.float32)
    if out.size:
        ctx.run_kernel("quant", "dequantize", out.size, x3, s3, z3, np.int64(bs), out)
    out = out.reshape(x.shape)
    return out if dst == out.dtype else out.astype(dst)


# ---------------------------------------------------------------------------------------------
# QuantizeLinear
# ---------------------------------------------------------------------------------------------


def _check_scale_rank(ctx: NodeContext, scale: np.ndarray, name: str) -> None:
    if scale.ndim > 1:
        raise ctx.error(f"{name} must be a scalar or a 1-D tensor, got shape {scale.shape}")


@onnx_op("QuantizeLinear", since=10)
def quantizelinear_10(
    ctx: NodeContext, x: np.ndarray, y_scale: np.ndarray, y_zero_point: np.ndarray = None
) -> np.ndarray:
    """``saturate(round(x / y_scale) + y_zero_point)``, per-tensor; uint8 without a zero point."""
    if y_scale.size != 1:
        raise ctx.error(f"y_scale must be a scalar at this opset, got shape {y_scale.shape}")
    return _quantize(ctx, x, y_scale, y_zero_point)


@onnx_op("QuantizeLinear", since=13)
def quantizelinear_13(
    ctx: NodeContext,
    x: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray = None,
    *,
    axis: int,
) -> np.ndarray:
    """As 10, plus per-axis scales (1-D ``y_scale`` along ``axis``)."""
    _check_scale_rank(ctx, y_scale, "y_scale")
    return _quantize(ctx, x, y_scale, y_zero_point, axis=axis)


@onnx_op("QuantizeLinear", since=19)
def quantizelinear_19(
    ctx: NodeContext,
    x: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray = None,
    *,
    axis: int,
    saturate: int,
) -> np.ndarray:
    """As 13, plus float8 outputs (``saturate`` clamps out-of-range values to +-max)."""
    _check_scale_rank(ctx, y_scale, "y_scale")
    return _quantize(ctx, x, y_scale, y_zero_point, axis=axis, saturate=saturate)


@onnx_op("QuantizeLinear", since=21)
def quantizelinear_21(
    ctx: NodeContext,
    x: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray = None,
    *,
    axis: int,
    block_size: int,
    output_dtype: int,
    saturate: int,
) -> np.ndarray:
    """As 19, plus blocked scales (``block_size``), ``output_dtype``, int16/uint16/int4/uint4."""
    return _quantize(
        ctx,
        x,
        y_scale,
        y_zero_point,
        axis=axis,
        block_size=block_size,
        saturate=saturate,
        output_dtype=output_dtype,
    )


@onnx_op("QuantizeLinear", since=23)
@onnx_op("QuantizeLinear", since=24)
@onnx_op("QuantizeLinear", since=25)
@onnx_op("QuantizeLinear", since=28)
def quantizelinear_23(
    ctx: NodeContext,
    x: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray = None,
    *,
    axis: int,
    block_size: int,
    output_dtype: int,
    precision: int,
    saturate: int,
) -> np.ndarray:
    """As 21, plus ``precision`` (the type of the division) and float4e2m1 (23), float8e8m0
    scales (24), int2/uint2 (25), float6e2m3/float6e3m2 (28)."""
    return _quantize(
        ctx,
        x,
        y_scale,
        y_zero_point,
        axis=axis,
        block_size=block_size,
        saturate=saturate,
        output_dtype=output_dtype,
        precision=precision,
    )


# ---------------------------------------------------------------------------------------------
# Fused forms: per-tensor QuantizeLinear / DequantizeLinear in elementwise groups
# ---------------------------------------------------------------------------------------------

# Storage types whose per-tensor affine maps a generated kernel computes as the kernels above do.
_FUSED_Q_TYPES = tuple(np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16))
_F32 = np.dtype(np.float32)
_ROUNDER = E.const(12582912.0, _F32)  # 1.5 * 2**23


def _fused_checks(attrs: dict, scale: E.Expr, x: E.Expr | None = None) -> None:
    """Raise NotFusable unless the map is per tensor in float32 (the groups inline only
    size-1 scales; blocks, a narrower division precision or another output type are left
    to the kernels above)."""
    if attrs.get("block_size") or attrs.get("precision") not in (None, 0, 1):
        raise NotFusable("blocked or narrow-precision quantization")
    if scale.dtype != _F32 or (x is not None and x.dtype != _F32):
        raise NotFusable("float32 data and scale only")


@fusible("QuantizeLinear", since=10)
def _quantize_builder(attrs: dict, x: E.Expr, scale: E.Expr, zero: E.Expr | None = None) -> E.Expr:
    # as _affine_one: x / scale, NaN to 0, round half to even, + zero point, saturate
    _fused_checks(attrs, scale, x)
    out_type = attrs.get("output_dtype") or 0
    dst = (
        zero.dtype
        if zero is not None
        else (onnx_types.np_dtype(out_type) if out_type else np.dtype(np.uint8))
    )
    if dst not in _FUSED_Q_TYPES or (out_type and onnx_types.np_dtype(out_type) != dst):
        raise NotFusable(f"quantization to {dst}")
    lo, hi = (E.const(v, _F32) for v in _INT_RANGES[dst])
    z = E.cast(zero, _F32) if zero is not None else E.const(0, _F32)
    q = E.op("truediv", x, scale)
    q = E.where(E.call("isnan", q, dtype=np.bool_), E.const(0, _F32), q)
    # Saturate before rounding (the bounds are integers: the same result), so that |q| stays
    # far below 2**22, where adding and subtracting 1.5 * 2**23 rounds half to even in
    # float32 (a vector add where the general rounding helper branches).
    q = E.call("clip_hi", E.call("clip_lo", q, E.op("sub", lo, z)), E.op("sub", hi, z))
    q = E.op("sub", E.op("add", q, _ROUNDER), _ROUNDER)
    return E.cast(E.op("add", q, z), dst)


@fusible("DequantizeLinear", since=10)
def _dequantize_builder(
    attrs: dict, x: E.Expr, scale: E.Expr, zero: E.Expr | None = None
) -> E.Expr:
    # as the dequantize kernel: (x - zero point) * scale in float32
    _fused_checks(attrs, scale)
    if x.dtype not in _FUSED_Q_TYPES or (zero is not None and zero.dtype != x.dtype):
        raise NotFusable(f"dequantization of {x.dtype}")
    if (attrs.get("output_dtype") or 0) not in (0, 1):
        raise NotFusable("output type other than float32")
    v = E.cast(x, _F32)
    if zero is not None:
        v = E.op("sub", v, E.cast(zero, _F32))
    return E.op("mul", v, scale)


def _lower_per_tensor(lc: LowerContext) -> Bound | None:
    """A lone Quantize/DequantizeLinear with a one-value float32 scale and zero point (data of
    rank >= 1): the generated kernel of its fused form (:func:`lower_node`); None otherwise."""
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR or x.ndim < 1:
        return None
    for s in lc.inputs[1:]:
        if s is not None and (s.kind != TENSOR or s.size != 1 or s.ndim > 1):
            return None
    if lc.inputs[1].dtype != _F32:  # a float16 scale divides / outputs in float16
        return None
    return lower_node(lc)


# ---------------------------------------------------------------------------------------------
# DequantizeLinear
# ---------------------------------------------------------------------------------------------


@onnx_op("DequantizeLinear", since=10)
def dequantizelinear_10(
    ctx: NodeContext, x: np.ndarray, x_scale: np.ndarray, x_zero_point: np.ndarray = None
) -> np.ndarray:
    """``(x - x_zero_point) * x_scale`` in float32, per-tensor."""
    if x_scale.size != 1:
        raise ctx.error(f"x_scale must be a scalar at this opset, got shape {x_scale.shape}")
    return _dequantize(ctx, x, x_scale, x_zero_point)


@onnx_op("DequantizeLinear", since=13)
@onnx_op("DequantizeLinear", since=19)
def dequantizelinear_13(
    ctx: NodeContext,
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray = None,
    *,
    axis: int,
) -> np.ndarray:
    """As 10, plus per-axis scales (13) and float8 inputs, float16/bfloat16 scales (19); the
    output has the scale's type."""
    _check_scale_rank(ctx, x_scale, "x_scale")
    return _dequantize(ctx, x, x_scale, x_zero_point, axis=axis)


@onnx_op("DequantizeLinear", since=21)
def dequantizelinear_21(
    ctx: NodeContext,
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray = None,
    *,
    axis: int,
    block_size: int,
) -> np.ndarray:
    """As 19, plus blocked scales and int16/uint16/int4/uint4 inputs."""
    return _dequantize(ctx, x, x_scale, x_zero_point, axis=axis, block_size=block_size)


@onnx_op("DequantizeLinear", since=23)
@onnx_op("DequantizeLinear", since=24)
@onnx_op("DequantizeLinear", since=25)
@onnx_op("DequantizeLinear", since=28)
def dequantizelinear_23(
    ctx: NodeContext,
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray = None,
    *,
    axis: int,
    block_size: int,
    output_dtype: int,
) -> np.ndarray:
    """As 21, plus ``output_dtype`` and float4e2m1 (23), float8e8m0 scales (24), int2/uint2
    (25), float6 (28) inputs."""
    return _dequantize(
        ctx, x, x_scale, x_zero_point, axis=axis, block_size=block_size, output_dtype=output_dtype
    )


# ---------------------------------------------------------------------------------------------
# DynamicQuantizeLinear
# ---------------------------------------------------------------------------------------------


# Chunks of the parallel passes per thread (the slack that evens out unequal threads).
_CHUNKS_PER_THREAD = 4


class _DynamicQuantize:
    """DynamicQuantizeLinear of ``n`` float32 values on ``backend``, every decision made once:
    the chunking and the serial or pool kernels of the two passes (kernels ``quant.
    minmax_chunks`` and ``quant.quantize_u8``, which also computes the scale and zero point:
    in Python, numpy's float32 scalar arithmetic cost more than a pass over 12K values)."""

    def __init__(self, backend: Any, n: int):
        threads = backend.threads() if n >= backend.parallel_threshold else 1
        self.chunks = max(1, min(threads * _CHUNKS_PER_THREAD, n)) if threads > 1 else 1
        self.per = max(1, -(-n // self.chunks))
        x = np.empty(1, np.float32)
        u8 = np.empty(1, np.uint8)
        if self.chunks > 1:
            self.minmax = backend.pooled("quant", "minmax_chunks", (x, self.per, x, x))
            self.quantize = backend.pooled(
                "quant", "quantize_u8", (x, x, x, self.per, self.chunks, u8, x, u8)
            )
        else:
            self.minmax = backend.kernel("quant", "minmax_chunks")
            self.quantize = backend.kernel("quant", "quantize_u8")

    def __call__(
        self,
        x: np.ndarray,
        y: np.ndarray,
        y_scale: np.ndarray,
        y_zp: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
    ) -> None:
        """Quantize the flat float32 ``x`` into the flat uint8 ``y``; write the 0-d scale and
        zero point. ``lo``, ``hi``: float32 scratch of ``self.chunks`` values each."""
        if x.size:
            self.minmax(x, self.per, lo, hi)
        else:
            lo[:] = hi[:] = 0
        # with no elements, one chunk still runs: it writes the scale and zero point
        self.quantize(x, lo, hi, self.per, max(1, self.chunks), y, y_scale.reshape(1),
                      y_zp.reshape(1))  # fmt: skip


@onnx_op("DynamicQuantizeLinear", since=11)
def dynamicquantizelinear_11(
    ctx: NodeContext, x: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """uint8 quantization with scale = (max(0, max x) - min(0, min x)) / 255 and zero point =
    saturate(round(-min / scale)); returns (y, y_scale, y_zero_point). NaN values are
    skipped by the range and quantize to the zero point."""
    xf = _to_float(x).reshape(-1)
    y = np.empty(x.shape, np.uint8)
    sc = np.empty((), np.float32)
    zp = np.empty((), np.uint8)
    run = _DynamicQuantize(ctx.backend, xf.size)
    lo, hi = np.empty(run.chunks, np.float32), np.empty(run.chunks, np.float32)
    run(xf, y.reshape(-1), sc, zp, lo, hi)
    return y, sc, zp


@lowers(dynamicquantizelinear_11)
def _lower_dynamicquantizelinear(lc: LowerContext) -> Bound | None:
    """float32 data: the two passes bound for its size (:class:`_DynamicQuantize`)."""
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR or x.dtype != np.float32:
        return None
    run = _DynamicQuantize(lc.backend, x.size)
    scratch = tensor(np.float32, (run.chunks,))
    outs = [
        tensor(np.uint8, x.shape),
        tensor(np.float32, ()),
        tensor(np.uint8, ()),
        scratch,
        scratch,
    ]
    return writes(
        run, In(0, flat=True), Out(0, flat=True), Out(1), Out(2), Out(3), Out(4), outs=outs,
        name="quant.dynamic_quantize",
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# QLinearMatMul, QLinearConv
# ---------------------------------------------------------------------------------------------


def _requantize(
    ctx: NodeContext,
    acc: np.ndarray,
    factor: np.ndarray,
    y_zero_point: np.ndarray,
    trailing: tuple[int, ...],
) -> np.ndarray:
    """``saturate(round(acc * factor) + y_zero_point)`` into y_zero_point's type.

    ``factor`` and ``y_zero_point`` broadcast against the trailing dims ``trailing`` of
    ``acc`` (float64); integer targets round half to even and clamp, float8 ones saturate.
    """
    dst = y_zero_point.dtype
    tsize = math.prod(trailing)
    lead = acc.size // tsize if tsize else 0
    f = np.ascontiguousarray(np.broadcast_to(_to_float(factor, np.float64), trailing))
    z = np.ascontiguousarray(np.broadcast_to(_to_float(y_zero_point, np.float64), trailing))
    a3 = np.ascontiguousarray(acc, dtype=np.float64).reshape(lead, tsize, 1)
    is_int = dst in _INT_RANGES
    lo, hi = _INT_RANGES[dst] if is_int else (-np.inf, np.inf)
    q = _run_affine(
        ctx, a3, f.reshape(1, tsize, 1), z.reshape(1, tsize, 1), 1, False, is_int, lo, hi
    )
    return _store(ctx, q.reshape(acc.shape), dst, 1)


def _qlinear_operand(a: np.ndarray, zp: np.ndarray) -> np.ndarray:
    """float64 ``a - zp`` (exact for 8-bit integers; float8 values are exact in float64)."""
    return _to_float(a, np.float64) - _to_float(zp, np.float64)


@onnx_op("QLinearMatMul", since=10)
@onnx_op("QLinearMatMul", since=21)
def qlinearmatmul_10(
    ctx: NodeContext,
    a: np.ndarray,
    a_scale: np.ndarray,
    a_zero_point: np.ndarray,
    b: np.ndarray,
    b_scale: np.ndarray,
    b_zero_point: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
) -> np.ndarray:
    """Quantized matmul: ``(a - a_zp) @ (b - b_zp)`` requantized by ``a_scale * b_scale /
    y_scale`` (computed in the scales' type) to y_zero_point's type. Scales and zero points
    are scalars, or per row of A / per column of B (1-D). float8 operands from opset 21.

    The contraction is float64 BLAS: exact for 8-bit integers (sums far below 2**53)."""
    if a.ndim == 0 or b.ndim == 0:
        raise ctx.error(f"inputs must have rank >= 1, got shapes {a.shape} and {b.shape}")
    m = a.shape[-2] if a.ndim >= 2 else 1
    n = b.shape[-1] if b.ndim >= 2 else 1

    def _rows(v: np.ndarray, name: str) -> np.ndarray:
        if v.size == 1:
            return v.reshape(())
        if v.size == m and a.ndim >= 2:
            return v.reshape(m, 1)
        raise ctx.error(f"{name} of shape {v.shape} must be a scalar or have one value per row")

    def _cols(v: np.ndarray, name: str) -> np.ndarray:
        if v.size == 1:
            return v.reshape(())
        if v.size == n and b.ndim >= 2:
            return v.reshape(n)
        raise ctx.error(f"{name} of shape {v.shape} must be a scalar or have one value per column")

    af = _qlinear_operand(a, _rows(a_zero_point, "a_zero_point"))
    bf = _qlinear_operand(b, _cols(b_zero_point, "b_zero_point"))
    ka = af.shape[-1]
    kb = bf.shape[-2] if bf.ndim >= 2 else bf.shape[0]
    if ka != kb:
        raise ctx.error(f"inner dimensions differ: A {a.shape} and B {b.shape}")
    acc = np.asarray(np.matmul(af, bf))
    sdt = np.result_type(*(_promotable(s.dtype) for s in (a_scale, b_scale, y_scale)))
    fac = (
        _rows(a_scale, "a_scale").astype(sdt)
        * _cols(b_scale, "b_scale").astype(sdt)
        / y_scale.reshape(()).astype(sdt)
    )
    if y_zero_point.size != 1:
        raise ctx.error(f"y_zero_point must be a scalar, got shape {y_zero_point.shape}")
    trailing = acc.shape[-2:] if acc.ndim >= 2 and fac.ndim else ()
    return _requantize(ctx, acc, fac, y_zero_point.reshape(()), tuple(trailing))


class _QLinearProduct:
    """A bound QLinearMatMul: the exact int32 product of :class:`~onnxjit.ops.nn.
    IntegerProduct` into scratch, then its requantization (kernel ``quant.requantize_rows``,
    the implementation's float64 arithmetic)."""

    def __init__(self, backend: Any, run: Any, factor: np.ndarray, zp: float, dst: np.dtype):
        self.run, self.n = run, run.n
        self.factor = np.ascontiguousarray(factor, np.float64).reshape(-1)
        self.zp = np.float64(zp)
        self.lo, self.hi = (np.float64(v) for v in _INT_RANGES[dst])
        self.bias = np.empty(0, np.int32)
        sample = (
            np.empty(1, np.int32), self.bias, self.factor, self.zp, self.n, 0, self.lo, self.hi,
            np.empty(1, dst),
        )  # fmt: skip
        self.requantize = backend.launcher("quant", "requantize_rows", run.m_rows * run.n, sample)

    def __call__(self, a, b, a_zp, b_zp, out, acc, a_w, b_w) -> None:
        self.run(a, b, a_zp, b_zp, acc, a_w, b_w)
        self.requantize(acc, self.bias, self.factor, self.zp, self.n, 0, self.lo, self.hi, out)


@lowers(qlinearmatmul_10)
def _lower_qlinearmatmul(lc: LowerContext) -> Bound | None:
    """8-bit A (rank >= 2) by a constant 2-D 8-bit B, constant scales and output zero point,
    A's scale per tensor: the exact integer product of MatMulInteger's kernels, then the
    requantization as the implementation computes it (the factor in the scales' type, the
    product by it in float64). Other forms run the implementation."""
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = lc.inputs[:8]
    if any(x is None or x.kind != TENSOR for x in (a, b, a_s, b_s, y_s, y_zp)):
        return None
    if not all(x.const for x in (a_s, b, b_s, y_s, y_zp)) or (b_zp is not None and not b_zp.const):
        return None
    i8 = (np.dtype(np.uint8), np.dtype(np.int8))
    if a.dtype not in i8 or b.dtype not in i8 or y_zp.dtype not in i8:
        return None
    if a.ndim < 2 or b.ndim != 2 or a.size == 0 or b.size == 0:
        return None
    m, k = a.shape[-2:]
    k2, n = b.shape
    if k != k2 or a_s.size != 1 or y_s.size != 1 or y_zp.size != 1 or b_s.size not in (1, n):
        return None
    if not (zero_point_spec(a_zp, m) and zero_point_spec(b_zp, n)):
        return None
    for zp, x in ((a_zp, a), (b_zp, b)):
        if zp is not None and zp.dtype != x.dtype:
            return None
    sdt = np.result_type(*(_promotable(s.dtype) for s in (a_s, b_s, y_s)))
    if sdt.kind != "f":
        return None
    factor = (
        a_s.value.reshape(()).astype(sdt)
        * b_s.value.reshape(-1 if b_s.size > 1 else ()).astype(sdt)
        / y_s.value.reshape(()).astype(sdt)
    )
    m_rows = a.size // k
    b_zp_value = None if b_zp is None else b_zp.value
    run = IntegerProduct(
        lc.backend, a.dtype, (m_rows, m, n, k), np.ascontiguousarray(b.value), b_zp_value
    )
    q = _QLinearProduct(lc.backend, run, factor, float(y_zp.value.reshape(())), y_zp.dtype)
    outs = [
        tensor(y_zp.dtype, (*a.shape[:-1], n)),
        tensor(np.int32, (m_rows * n,)),
        tensor(run.work, (m_rows * run.ld,)),
        tensor(run.work, (0,)),
    ]
    args = (
        In(0, flat=True), In(3, flat=True), integer_zero_point(a_zp, 2, a.dtype),
        integer_zero_point(b_zp, 5, b.dtype), Out(0, flat=True), Out(1), Out(2), Out(3),
    )  # fmt: skip
    return writes(q, *args, outs=outs, name=f"{run.name}+quant.requantize_rows")


@onnx_op("QLinearConv", since=10)
def qlinearconv_10(
    ctx: NodeContext,
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray,
    w: np.ndarray,
    w_scale: np.ndarray,
    w_zero_point: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
    B: np.ndarray = None,
    *,
    auto_pad: str,
    dilations: list[int] | None = None,
    group: int,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """Quantized convolution: ConvInteger of the zero-point-shifted operands, plus the int32
    bias ``B``, requantized by ``x_scale * w_scale / y_scale`` (w_scale scalar or one per
    output channel) to y_zero_point's type."""
    acc = conv_integer(
        ctx,
        x,
        w,
        x_zero_point,
        w_zero_point,
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
    ).astype(np.float64)
    m = w.shape[0]
    if B is not None:
        if B.size != m:
            raise ctx.error(f"B has {B.size} values but there are {m} output channels")
        acc += B.astype(np.float64).reshape(1, m, *([1] * (acc.ndim - 2)))
    if w_scale.size not in (1, m):
        raise ctx.error(
            f"w_scale of shape {w_scale.shape} must be a scalar or one value per output channel "
            f"({m})"
        )
    if y_zero_point.size != 1:
        raise ctx.error(f"y_zero_point must be a scalar, got shape {y_zero_point.shape}")
    sdt = np.result_type(*(_promotable(s.dtype) for s in (x_scale, w_scale, y_scale)))
    fac = (
        x_scale.reshape(()).astype(sdt)
        * w_scale.reshape(-1).astype(sdt)
        / y_scale.reshape(()).astype(sdt)
    )
    # Channel-wise factor: view acc as (N, M, spatial) so the factor indexes the middle axis.
    n = acc.shape[0]
    sp = math.prod(acc.shape[2:])
    dst = y_zero_point.dtype
    f3 = np.ascontiguousarray(np.broadcast_to(fac.astype(np.float64), (m,))).reshape(1, m, 1)
    z3 = np.full((1, 1, 1), float(y_zero_point.reshape(())), np.float64)
    is_int = dst in _INT_RANGES
    lo, hi = _INT_RANGES[dst] if is_int else (-np.inf, np.inf)
    a3 = np.ascontiguousarray(acc).reshape(n, m, sp)
    # z3 must match f3's layout (per-channel) for the kernel's shared indexing.
    z3 = np.broadcast_to(z3, (1, m, 1)).copy()
    q = _run_affine(ctx, a3, f3, z3, 1, False, is_int, lo, hi)
    return _store(ctx, q.reshape(acc.shape), dst, 1)


class _QLinearConv:
    """A bound QLinearConv: ConvInteger's kernels (:func:`~onnxjit.ops.nn.integer_conv`)
    into int32 scratch, then the bias and the requantization per output channel (kernel
    ``quant.requantize_rows``, the implementation's float64 arithmetic)."""

    def __init__(self, backend: Any, run: Any, bias, factor, zp: float, dst: np.dtype) -> None:
        self.run = run
        m = run.m
        self.bias = np.empty(0, np.int32) if bias is None else bias.reshape(-1).astype(np.int32)
        self.factor = np.ascontiguousarray(np.broadcast_to(factor.reshape(-1), (m,)), np.float64)
        self.zp = np.float64(zp)
        self.lo, self.hi = (np.float64(v) for v in _INT_RANGES[dst])
        self.m, self.s = m, run.s
        sample = (
            np.empty(1, np.int32), self.bias, self.factor, self.zp, self.s, m, self.lo, self.hi,
            np.empty(1, dst),
        )  # fmt: skip
        self.requantize = backend.launcher(
            "quant", "requantize_rows", run.n_img * m * run.s, sample
        )

    def __call__(self, x, x_zp, out, acc, x16, col, packed) -> None:
        self.run(x, x_zp, acc, x16, col, packed)
        self.requantize(acc, self.bias, self.factor, self.zp, self.s, self.m, self.lo, self.hi,
                        out)  # fmt: skip


@lowers(qlinearconv_10)
def _lower_qlinearconv(lc: LowerContext) -> Bound | None:
    """ConvInteger's kernels where they apply (:func:`~onnxjit.ops.nn.integer_conv`), with
    constant scales, output zero point and bias: the int32 convolution, then the bias and
    the requantization per output channel as the implementation computes them."""
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp = lc.inputs[:8]
    b = lc.inputs[8] if len(lc.inputs) > 8 else None
    consts = (x_s, w_s, y_s, y_zp) + (() if b is None else (b,))
    if any(c is None or c.kind != TENSOR or not c.const for c in consts):
        return None
    if y_zp.dtype not in (np.dtype(np.uint8), np.dtype(np.int8)) or y_zp.size != 1:
        return None
    if x_s.size != 1 or y_s.size != 1 or (w is None or w_s.size not in (1, w.shape[0])):
        return None
    if b is not None and (b.dtype != np.int32 or b.size != w.shape[0]):
        return None
    sdt = np.result_type(*(_promotable(s.dtype) for s in (x_s, w_s, y_s)))
    if sdt.kind != "f":
        return None
    run = integer_conv(lc, x, w, x_zp, w_zp)
    if run is None:
        return None
    factor = (
        x_s.value.reshape(()).astype(sdt)
        * w_s.value.reshape(-1).astype(sdt)
        / y_s.value.reshape(()).astype(sdt)
    )
    q = _QLinearConv(
        lc.backend, run, None if b is None else b.value, np.asarray(factor),
        float(y_zp.value.reshape(())), y_zp.dtype,
    )  # fmt: skip
    outs = [tensor(y_zp.dtype, run.y_shape), tensor(np.int32, run.y_shape), *run.scratch]
    args = (In(0, flat=True), integer_zero_point(x_zp, 2, x.dtype), Out(0, flat=True),
            Out(1, flat=True), *run.scratch_args(2))  # fmt: skip
    return writes(q, *args, outs=outs, name=f"{run.name}+quant.requantize_rows")


for _impl in (
    quantizelinear_10,
    quantizelinear_13,
    quantizelinear_19,
    quantizelinear_21,
    quantizelinear_23,
    dequantizelinear_10,
    dequantizelinear_13,
    dequantizelinear_21,
    dequantizelinear_23,
):
    lowers(_impl)(_lower_per_tensor)
