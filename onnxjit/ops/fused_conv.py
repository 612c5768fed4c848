"""``FusedConv``: Conv whose epilogue adds the bias, a residual and an activation in one pass.

Created by ``onnxjit.passes.patterns_conv.fuse_conv_activation`` from Conv (+ Add(other)) +
activation. The convolution itself is :func:`onnxjit.ops.nn.conv_compute` (im2col + BLAS
writing NCHW directly, plain GEMM for 1x1, a Numba kernel for depthwise); then
:func:`onnxjit.kernels.cpu.epilogue.planes` walks each (image, channel) plane once.
"""

from __future__ import annotations

import numpy as np

from onnxjit.kernels import _jit
from onnxjit.kernels._jit import run_parallel
from onnxjit.kernels.cpu import epilogue as kep
from onnxjit.ops.fused_gemm import activation_args, empty, run_rows
from onnxjit.ops.nn import conv_compute
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
    y = conv_compute(
        ctx,
        x,
        w,
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
    )
    cd = y.dtype
    M = y.shape[1]
    bias = None
    if b is not None:
        if b.shape != (M,):
            raise ctx.error(f"B has shape {b.shape}, expected ({M},)")
        bias = np.ascontiguousarray(b, dtype=cd)
    code, p0, p1 = activation_args(ctx, activation, activation_params, cd)
    res = None
    if residual is not None:
        res = residual if residual.dtype == cd else residual.astype(cd)
        if res.shape != y.shape:
            # Broadcasting residual: bias in place, numpy's broadcasting add, then activation.
            if bias is not None:
                y += bias.reshape(1, M, *([1] * (y.ndim - 2)))
            y = np.add(y, res)
            if y.size:
                y2 = y.reshape(-1, y.shape[-1] if y.ndim else 1)
                run_rows(y2, 1.0, None, code, p0, p1)
            return y if cd == x.dtype else y.astype(x.dtype)
        res = np.ascontiguousarray(res)
    if y.size and (bias is not None or res is not None or code != kep.ACT_NONE):
        y3 = y.reshape(y.shape[0], M, -1)
        r3 = empty(cd, 3) if res is None else res.reshape(y3.shape)
        bb = empty(cd, 1) if bias is None else bias
        args = (y3, bb, bias is not None, r3, res is not None, code, p0, p1)
        if y.size >= _jit.PARALLEL_THRESHOLD and y3.shape[0] * M > 1:
            run_parallel(kep.planes_par, *args)
        else:
            kep.planes(*args)
    return y if cd == x.dtype else y.astype(x.dtype)
