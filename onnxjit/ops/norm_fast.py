"""Fast paths (registry.fast_path) of the row-kernel operators: Softmax/LogSoftmax-13 and
LayerNormalization-17 (onnxjit/ops/nn.py), internal LayerNorm, Gelu and RMSNorm
(onnxjit/ops/fused_norm.py).

Each is prepared after the operator ran once for an input shape: the row count and width, the
converted scale/bias vectors and the kernel (serial, or pool-bound above the parallel
threshold) are fixed, so a later run with the same shapes and constant operands only allocates
its output and calls the kernel. Only float32/float64 C-contiguous inputs get one; others keep
the operator's own path.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onnxjit.buffers import Slot
from onnxjit.kernels.cpu import nn as knn
from onnxjit.kernels.cpu import norm as knorm
from onnxjit.ops import fused_norm, nn
from onnxjit.ops.elementwise import prepare_generated
from onnxjit.ops.fused_norm import _bound, _param
from onnxjit.registry import MISS, NodeContext, fast_path, plain_array

_NATIVE = (np.dtype(np.float32), np.dtype(np.float64))


def _rows_of(x: np.ndarray, axis: int) -> tuple[int, int] | None:
    """(rows, width) of ``x`` normalised over dims ``axis..``, or None for no fast path."""
    if type(x) is not np.ndarray or x.dtype not in _NATIVE or not x.flags.c_contiguous:
        return None
    if x.ndim == 0 or x.size == 0:
        return None
    a = axis + x.ndim if axis < 0 else axis
    if not 0 <= a < x.ndim:
        return None
    n = math.prod(x.shape[a:])
    return x.size // n, n


@fast_path(nn.softmax, nn.log_softmax)
def _prepare_softmax(ctx: NodeContext, args: tuple, kwargs: dict, result: Any) -> Any:
    x = args[0]
    rn = _rows_of(x, kwargs["axis"])
    a = kwargs["axis"] + x.ndim if kwargs["axis"] < 0 else kwargs["axis"]
    if rn is None or a != x.ndim - 1:  # Softmax-13 over the last axis only: contiguous rows
        return None
    rows, n = rn
    shape, dtype = x.shape, x.dtype
    log = ctx.label.startswith("LogSoftmax")
    x2 = x.reshape(rows, n)
    go = _bound(knn.softmax_rows, knn.softmax_rows_par, x.size, (x2, x2, log))
    y_slot = Slot(shape, dtype)

    def fast(x3: Any) -> Any:
        if not plain_array(x3, shape, dtype):
            return MISS
        y = y_slot.get()
        go(x3.reshape(rows, n), y.reshape(rows, n), log)
        return y

    return fast


def _layer_norm_fast(
    x: np.ndarray, scale: Any, bias: Any, axis: int, epsilon: float, several: bool
) -> Any:
    """The fast path of a layer normalisation of ``x`` over dims ``axis..`` with these scale
    and bias objects (either may be None), or None; it returns ``(y, None, None)`` when
    ``several`` (LayerNormalization-17 with its unread statistics outputs), else ``y``."""
    rn = _rows_of(x, axis)
    if rn is None:
        return None
    rows, n = rn
    shape, dtype = x.shape, x.dtype
    a = axis + x.ndim if axis < 0 else axis
    sc = _param(scale, shape[a:], dtype, 1.0)
    bi = _param(bias, shape[a:], dtype, 0.0)
    if sc is None or bi is None:
        return None
    eps = float(epsilon)
    x2 = x.reshape(rows, n)
    scratch = np.empty(rows, dtype)
    go = _bound(
        knorm.layer_norm_rows,
        knorm.layer_norm_rows_par,
        x.size,
        (x2, sc, bi, eps, x2, scratch, scratch),
    )
    empty = np.empty
    y_slot = Slot(shape, dtype)

    def fast(x3: Any, s3: Any = None, b3: Any = None) -> Any:
        if not plain_array(x3, shape, dtype) or s3 is not scale or b3 is not bias:
            return MISS
        y = y_slot.get()
        go(x3.reshape(rows, n), sc, bi, eps, y.reshape(rows, n), empty(rows, dtype),
           empty(rows, dtype))  # fmt: skip
        return (y, None, None) if several else y

    return fast


@fast_path(nn.layer_norm)
def _prepare_layer_normalization(ctx: NodeContext, args: tuple, kwargs: dict, result: Any) -> Any:
    """LayerNormalization-17 whose Mean and InvStdDev outputs nothing reads."""
    if ctx.n_outputs > 1 and any(ctx.outputs_used[1:]):
        return None
    if not ctx.constant_args(args, (1, 2)):
        return None  # the fast path keys on the scale and bias objects: initializers only
    bias = args[2] if len(args) > 2 else None
    return _layer_norm_fast(
        args[0], args[1], bias, kwargs["axis"], kwargs["epsilon"], ctx.n_outputs > 1
    )


@fast_path(fused_norm.layer_norm)
def _prepare_layer_norm(ctx: NodeContext, args: tuple, kwargs: dict, result: Any) -> Any:
    """The internal LayerNorm (scale and bias optional)."""
    if not ctx.constant_args(args, (1, 2)):
        return None  # the fast path keys on the scale and bias objects: initializers only
    scale = args[1] if len(args) > 1 else None
    bias = args[2] if len(args) > 2 else None
    return _layer_norm_fast(args[0], scale, bias, kwargs["axis"], kwargs["epsilon"], False)


@fast_path(fused_norm.gelu)
def _prepare_gelu(ctx: NodeContext, args: tuple, kwargs: dict, result: Any) -> Any:
    # onnxjit's Gelu hands x (and its bias) as they are to the code generator (generated_gelu)
    return prepare_generated(ctx, args, kwargs, result)


@fast_path(fused_norm.rms_norm)
def _prepare_rms_norm(ctx: NodeContext, args: tuple, kwargs: dict, result: Any) -> Any:
    x = args[0]
    if not ctx.constant_args(args, (1,)):
        return None  # the fast path keys on the scale object: initializers only
    scale = args[1] if len(args) > 1 else None
    rn = _rows_of(x, kwargs["axis"])
    if rn is None:
        return None
    rows, n = rn
    shape, dtype = x.shape, x.dtype
    a = kwargs["axis"] + x.ndim if kwargs["axis"] < 0 else kwargs["axis"]
    sc = _param(scale, shape[a:], dtype, 1.0)
    if sc is None:
        return None
    eps = float(kwargs["epsilon"])
    x2 = x.reshape(rows, n)
    go = _bound(
        knorm.rms_norm_rows,
        knorm.rms_norm_rows_par,
        x.size,
        (x2, sc, eps, x2, np.empty(rows, dtype)),
    )
    empty = np.empty
    y_slot = Slot(shape, dtype)

    def fast(x3: Any, s3: Any = None) -> Any:
        if not plain_array(x3, shape, dtype) or s3 is not scale:
            return MISS
        y = y_slot.get()
        go(x3.reshape(rows, n), sc, eps, y.reshape(rows, n), empty(rows, dtype))
        return y

    return fast
