"""Internal (onnxjit-domain) operators made by the normalisation pattern passes.

``LayerNorm``, ``SkipLayerNorm``, ``RMSNorm`` and ``Gelu`` replace the primitive-op subgraphs
that exporters emit (see :mod:`onnxjit.passes.patterns_norm`). Each runs one Numba row kernel
of :mod:`onnxjit.kernels.cpu.norm` / :mod:`onnxjit.kernels.cpu.nn` over a contiguous
``(rows, n)`` view, with the parallel twin above ``PARALLEL_THRESHOLD`` elements. float32 and
float64 are computed in their own type; other float types in float32, cast back.

Each operator gives exactly what the subgraph it replaces gives, broadcasting included: the fast
path needs scale/bias that broadcast to the normalised dims (and, for SkipLayerNorm, operands of
one shape); anything else takes a numpy path with the subgraph's broadcasting.

The row helpers (:func:`layer_norm_rows`, :func:`softmax_last`) also serve the standard
LayerNormalization and Softmax operators of :mod:`onnxjit.ops.nn`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onnxjit.backends.cpu import pool, threads
from onnxjit.backends.cpu.pool import run_parallel
from onnxjit.buffers import Slot
from onnxjit.kernels import _jit
from onnxjit.kernels.cpu import nn as knn
from onnxjit.kernels.cpu import norm as knorm
from onnxjit.ops.elementwise import generated_gelu
from onnxjit.registry import MISS, NodeContext, fast_path, internal_op, plain_array

_NATIVE = (np.dtype(np.float32), np.dtype(np.float64))


def _cdtype(dtype: np.dtype) -> np.dtype:
    """The type a kernel computes in: float32/float64 as they are, anything else float32."""
    return dtype if dtype in _NATIVE else np.dtype(np.float32)


def _launch(serial, parallel, work: int, *args) -> None:
    if work >= _jit.PARALLEL_THRESHOLD:
        run_parallel(parallel, *args)
    else:
        serial(*args)


def _rows(x: np.ndarray, k: int, cd: np.dtype) -> np.ndarray:
    """``x`` in type ``cd`` as a contiguous (rows, n) array over its last ``k`` dims."""
    rows = math.prod(x.shape[: x.ndim - k])
    n = math.prod(x.shape[x.ndim - k :])
    if x.dtype != cd or not x.flags.c_contiguous:
        x = np.ascontiguousarray(x, dtype=cd)
    return x.reshape(rows, n)


def _param(p: np.ndarray | None, norm_shape: tuple[int, ...], cd: np.dtype, fill: float):
    """Scale/bias broadcast to the normalised dims as a contiguous (n,) vector, or None when
    it does not broadcast to them (then the caller takes the numpy path)."""
    n = math.prod(norm_shape)
    if p is None:
        return np.full(n, fill, cd)
    if p.shape == norm_shape and p.dtype == cd and p.flags.c_contiguous:
        return p.ravel()  # the usual case, without numpy's broadcasting machinery
    if p.ndim > len(norm_shape):
        return None
    try:
        b = np.broadcast_to(p, norm_shape)
    except ValueError:
        return None
    return np.ascontiguousarray(b, dtype=cd).reshape(n)


def _check_axis(ctx: NodeContext, axis: int, rank: int) -> int:
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < rank:
        raise ctx.error(f"axis {axis} is out of range for an input of rank {rank}")
    return a


def layer_norm_rows(
    x: np.ndarray, k: int, eps: float, scale: np.ndarray, bias: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """LayerNorm of ``x`` over its last ``k`` dims with ``scale``/``bias`` given as (n,) vectors
    of the compute type. Returns ``(y, mean, inv)``: ``y`` in the compute type with x's shape,
    ``mean``/``inv`` (rows,) in the compute type."""
    cd = scale.dtype
    x2 = _rows(x, k, cd)
    y2 = np.empty_like(x2)
    mean = np.empty(x2.shape[0], cd)
    inv = np.empty(x2.shape[0], cd)
    if x2.size:
        _launch(
            knorm.layer_norm_rows,
            knorm.layer_norm_rows_par,
            x2.size,
            x2,
            scale,
            bias,
            float(eps),
            y2,
            mean,
            inv,
        )
    elif x2.shape[1] == 0:
        # Rows of no elements: mean 0 and variance 0 (what LayerNormalization has given).
        mean[:] = 0.0
        inv[:] = 1.0 / math.sqrt(eps)
    return y2.reshape(x.shape), mean, inv


def _standardize_numpy(x: np.ndarray, k: int, eps: float, cd: np.dtype) -> np.ndarray:
    axes = tuple(range(x.ndim - k, x.ndim))
    xc = x.astype(cd)
    with np.errstate(all="ignore"):
        d = xc - xc.mean(axis=axes, keepdims=True)
        return d / np.sqrt((d * d).mean(axis=axes, keepdims=True) + cd.type(eps))


def _affine_numpy(y: np.ndarray, scale, bias, cd: np.dtype) -> np.ndarray:
    if scale is not None:
        y = y * scale.astype(cd)
    if bias is not None:
        y = y + bias.astype(cd)
    return y


@internal_op("LayerNorm")
def layer_norm(
    ctx: NodeContext,
    x: np.ndarray,
    scale: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    *,
    axis: int = -1,
    epsilon: float = 1e-5,
) -> np.ndarray:
    """``(x - mean) / sqrt(var + epsilon) * scale + bias`` over dims ``axis..`` (scale and bias
    optional, broadcast as the Mul/Add they replace broadcast)."""
    a = _check_axis(ctx, axis, x.ndim)
    k = x.ndim - a
    dtype = x.dtype
    cd = _cdtype(dtype)
    norm_shape = x.shape[a:]
    sc = _param(scale, norm_shape, cd, 1.0)
    bi = _param(bias, norm_shape, cd, 0.0)
    if sc is None or bi is None:
        y = _affine_numpy(_standardize_numpy(x, k, epsilon, cd), scale, bias, cd)
    else:
        y = layer_norm_rows(x, k, epsilon, sc, bi)[0]
    return y.astype(dtype, copy=False)


@internal_op("SkipLayerNorm")
def skip_layer_norm(
    ctx: NodeContext,
    a: np.ndarray,
    b: np.ndarray,
    scale: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    *,
    axis: int = -1,
    epsilon: float = 1e-5,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """``s = a + b``, then :func:`layer_norm` of ``s``; outputs ``(y, s)`` (``s`` only when the
    node has a second output). Sum and normalisation run in one pass over each row."""
    dtype = a.dtype
    cd = _cdtype(dtype)
    want_sum = ctx.n_outputs > 1 and ctx.outputs_used[1]
    shape = a.shape if a.shape == b.shape else np.broadcast_shapes(a.shape, b.shape)
    ax = _check_axis(ctx, axis, len(shape))
    k = len(shape) - ax
    norm_shape = shape[ax:]
    sc = _param(scale, norm_shape, cd, 1.0)
    bi = _param(bias, norm_shape, cd, 0.0)
    pair = _skip_order(a, b, k)
    if pair is None or sc is None or bi is None or math.prod(shape) == 0:
        s = a + b
        y = layer_norm(ctx, s, scale, bias, axis=axis, epsilon=epsilon)
        return (y, s) if ctx.n_outputs > 1 else y
    a2 = _rows(pair[0], k, cd)
    b2 = _rows(pair[1], k, cd)  # (rows, n), or (1, n) for a row added to every row
    y2 = np.empty_like(a2)
    s2 = np.empty_like(a2) if want_sum else y2
    rows = a2.shape[0]
    mean = np.empty(rows, cd)
    inv = np.empty(rows, cd)
    _launch(
        knorm.skip_layer_norm_rows,
        knorm.skip_layer_norm_rows_par,
        a2.size,
        a2,
        b2,
        sc,
        bi,
        float(epsilon),
        y2,
        s2,
        want_sum,
        mean,
        inv,
    )
    y = y2.reshape(shape).astype(dtype, copy=False)
    if ctx.n_outputs == 1:
        return y
    s = s2.reshape(shape).astype(dtype, copy=False) if want_sum else a + b
    return y, s


def _skip_order(a: np.ndarray, b: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray] | None:
    """SkipLayerNorm's operands ``(full, other)`` for the row kernel, normalised over the
    last ``k`` dims: ``full`` has the sum's shape; ``other`` has it too up to leading 1s
    (torch exports a (S, n) position table added to (1, S, n)), or is one row of the
    normalised dims broadcast over the rest (a BERT embedding adds its token-type row so:
    the kernel adds that row to every row). None for any other broadcast (numpy's path).
    Addition commutes exactly, so the order does not change the sum."""
    if a.shape == b.shape:
        return a, b
    for full, other in ((a, b), (b, a)):
        lead = full.ndim - k
        if other.ndim > full.ndim or lead < 0:
            continue
        padded = (1,) * (full.ndim - other.ndim) + other.shape
        if padded == full.shape or (
            padded[lead:] == full.shape[lead:] and all(d == 1 for d in padded[:lead])
        ):
            return full, other
    return None


@internal_op("RMSNorm")
def rms_norm(
    ctx: NodeContext,
    x: np.ndarray,
    scale: np.ndarray | None = None,
    *,
    axis: int = -1,
    epsilon: float = 1e-6,
) -> np.ndarray:
    """``x / sqrt(mean(x^2 over dims axis..) + epsilon) * scale`` (scale optional)."""
    a = _check_axis(ctx, axis, x.ndim)
    k = x.ndim - a
    dtype = x.dtype
    cd = _cdtype(dtype)
    norm_shape = x.shape[a:]
    sc = _param(scale, norm_shape, cd, 1.0)
    if sc is None or x.size == 0:
        axes = tuple(range(a, x.ndim))
        xc = x.astype(cd)
        with np.errstate(all="ignore"):
            y = xc / np.sqrt((xc * xc).mean(axis=axes, keepdims=True) + cd.type(epsilon))
        return _affine_numpy(y, scale, None, cd).astype(dtype, copy=False)
    x2 = _rows(x, k, cd)
    y2 = np.empty_like(x2)
    inv = np.empty(x2.shape[0], cd)
    _launch(
        knorm.rms_norm_rows,
        knorm.rms_norm_rows_par,
        x2.size,
        x2,
        sc,
        float(epsilon),
        y2,
        inv,
    )
    return y2.reshape(x.shape).astype(dtype, copy=False)


@internal_op("Gelu")
def gelu(
    ctx: NodeContext,
    x: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    approximate: str = "none",
) -> np.ndarray:
    """GELU of ``x`` (+ ``bias``, broadcast as the Add it replaces): ``approximate="none"``
    is the erf form, ``"tanh"`` the tanh approximation.

    One generated elementwise kernel (:func:`onnxjit.ops.elementwise.generated_gelu`), which
    streams large outputs and walks a bias row as any broadcast operand. The row kernel that
    took the biased form before was faster nowhere beyond noise, and slower on large inputs
    (Zen 3, 2 threads, float32 rows of 1024 plus a bias row, alternating in one process: 1.00x
    at 256 rows, 0.95x at 4096, 0.90x at 65536 the row kernel's time; tanh form 1.03x and
    0.99x)."""
    if approximate not in ("none", "tanh"):
        raise ctx.unsupported(f"approximate={approximate!r} (expected 'none' or 'tanh')")
    if bias is not None and bias.dtype != x.dtype:
        x = x + bias  # as the graph's Add did
        bias = None
    if x.dtype.kind == "f":
        return generated_gelu(x, approximate, bias)
    # bfloat16: computed in float32
    cd = _cdtype(x.dtype)
    b = None if bias is None else bias.astype(cd)
    return generated_gelu(x.astype(cd), approximate, b).astype(x.dtype)


def softmax_last(x: np.ndarray, log: bool) -> np.ndarray:
    """Softmax (or log-softmax) over the last axis of ``x`` (float32/float64, any rank >= 1),
    in a new array of x's shape and type."""
    n = x.shape[-1]
    x2 = np.ascontiguousarray(x).reshape(math.prod(x.shape[:-1]), n)
    y2 = np.empty_like(x2)
    if x2.size:
        _launch(knn.softmax_rows, knn.softmax_rows_par, x2.size, x2, y2, log)
    return y2.reshape(x.shape)


# -- fast paths (see registry.fast_path) -----------------------------------------------------
def _bound(serial: Any, parallel: Any, work: int, sample: tuple) -> Any:
    """``_launch`` with the serial/parallel choice and the pool entry made once."""
    if work >= _jit.PARALLEL_THRESHOLD:
        return pool.bind(parallel, sample, threads.current())
    return serial


@fast_path(skip_layer_norm)
def _prepare_skip_layer_norm(ctx: NodeContext, args: tuple, kwargs: dict, result: Any) -> Any:
    a, b = args[0], args[1]
    if not ctx.constant_args(args, (2, 3)):
        return None  # the fast path keys on the scale and bias objects: initializers only
    scale = args[2] if len(args) > 2 else None
    bias = args[3] if len(args) > 3 else None
    dtype = a.dtype
    if dtype not in _NATIVE or b.dtype != dtype or a.size == 0 or b.size == 0:
        return None
    rank = max(a.ndim, b.ndim)
    ax = _check_axis(ctx, kwargs["axis"], rank)
    pair = _skip_order(a, b, rank - ax)
    if pair is None:
        return None
    swapped = pair[0] is not a  # the node's second operand has the sum's shape
    shape, other_shape = pair[0].shape, pair[1].shape
    norm_shape = shape[ax:]
    sc = _param(scale, norm_shape, dtype, 1.0)
    bi = _param(bias, norm_shape, dtype, 0.0)
    if sc is None or bi is None:
        return None
    n = math.prod(norm_shape)
    rows = math.prod(shape) // n
    rows_b = math.prod(other_shape) // n
    eps = float(kwargs["epsilon"])
    want_sum = ctx.n_outputs > 1 and ctx.outputs_used[1]
    two = ctx.n_outputs > 1
    a2 = pair[0].reshape(rows, n)
    scratch = np.empty(rows, dtype)
    go = _bound(
        knorm.skip_layer_norm_rows,
        knorm.skip_layer_norm_rows_par,
        a.size,
        (a2, a2, sc, bi, eps, a2, a2, want_sum, scratch, scratch),
    )
    empty = np.empty
    y_slot = Slot(shape, dtype)
    s_slot = Slot(shape, dtype)

    def fast(x1: Any, x2: Any, s3: Any = None, b3: Any = None) -> Any:
        full, other = (x2, x1) if swapped else (x1, x2)
        if (
            not plain_array(full, shape, dtype)
            or not plain_array(other, other_shape, dtype)
            or s3 is not scale
            or b3 is not bias
        ):
            return MISS
        y = y_slot.get()
        y2 = y.reshape(rows, n)
        s = s_slot.get() if want_sum else y
        go(full.reshape(rows, n), other.reshape(rows_b, n), sc, bi, eps, y2, s.reshape(rows, n),
           want_sum, empty(rows, dtype), empty(rows, dtype))  # fmt: skip
        if not two:
            return y
        return y, (s if want_sum else x1 + x2)

    return fast
