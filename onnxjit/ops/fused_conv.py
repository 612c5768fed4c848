"""``FusedConv``: Conv whose epilogue adds the bias, a residual and an activation.

Created by ``onnxjit.passes.patterns_conv.fuse_conv_activation`` from Conv (+ Add(other)) +
activation. The convolution is :func:`onnxjit.ops.nn.conv_compute` (im2col + BLAS writing NCHW
directly, plain GEMM for 1x1, a Numba kernel for depthwise); the epilogue runs on each GEMM
tile as soon as BLAS wrote it (after the depthwise kernel: one pass over each channel plane).
A plan binds it once per input shape (:func:`onnxjit.ops.nn.lower_conv`).
"""

from __future__ import annotations

import numpy as np

from onnxjit.lowering import TENSOR, Bound, LowerContext, lowers
from onnxjit.ops.fused_gemm import activation_args
from onnxjit.ops.gemm import empty_array
from onnxjit.ops.nn import ConvEpilogue, conv_compute, conv_output_shape, lower_conv
from onnxjit.registry import NodeContext, internal_op


@internal_op("FusedConv")
def fused_conv(
    ctx: NodeContext,
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
    activation: str = "",
    activation_params: list[float] | None = None,
) -> np.ndarray:
    """``act(Conv(X, W, B) + residual)`` with Conv's attributes; ``residual`` optional.

    A residual of the output's shape is added inside the epilogue; one of another shape
    broadcasts as ONNX Add does (a separate numpy pass, then the activation).
    """
    cd = np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)
    M = w.shape[0]
    bias = None
    if b is not None:
        if b.shape != (M,):
            raise ctx.error(f"B has shape {b.shape}, expected ({M},)")
        bias = np.ascontiguousarray(b, dtype=cd)
    code, p0, p1 = activation_args(ctx, activation, activation_params, cd)
    res = None
    if residual is not None:
        res = np.ascontiguousarray(residual, dtype=cd)
    geometry = dict(
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
    )
    if res is not None and res.shape != conv_output_shape(ctx, x, w, **geometry):
        # A residual that broadcasts: bias in the epilogue, numpy's broadcasting add, then
        # the activation in a second pass.
        none = ctx.kernel("epilogue", "ACT_NONE")
        y = conv_compute(ctx, x, w, **geometry, epilogue=ConvEpilogue(bias, None, none, p0, p1))
        y = np.add(y, res)
        if y.size and code != none:
            y2 = y.reshape(-1, y.shape[-1] if y.ndim else 1)
            t = y2.dtype.type
            ctx.kernel("epilogue", "rows")(y2, t(1), empty_array(y2.dtype, 1), False, code, p0, p1)
        return y if cd == x.dtype else y.astype(x.dtype)
    ep = ConvEpilogue(bias, res, code, p0, p1)
    y = conv_compute(ctx, x, w, **geometry, epilogue=ep)
    return y if cd == x.dtype else y.astype(x.dtype)


@lowers(fused_conv)
def _lower_fused_conv(lc: LowerContext) -> Bound | None:
    """FusedConv of float32/float64 inputs with a constant weight and bias and a residual of
    the output's shape (or none): see :func:`onnxjit.ops.nn.lower_conv`."""
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR:
        return None
    act, params = lc.attrs["activation"], lc.attrs["activation_params"]
    code, p0, p1 = activation_args(lc.ctx, act, params, x.dtype, lc.backend)
    return lower_conv(lc, code, p0, p1)
