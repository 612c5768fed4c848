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

from onnxjit.lowering import TENSOR, Bound, In, LowerContext, Out, Spec, lowers, tensor, writes
from onnxjit.ops.elementwise import generated_gelu, lower_node
from onnxjit.registry import NodeContext, internal_op

_NATIVE = (np.dtype(np.float32), np.dtype(np.float64))


def _cdtype(dtype: np.dtype) -> np.dtype:
    """The type a kernel computes in: float32/float64 as they are, anything else float32."""
    return dtype if dtype in _NATIVE else np.dtype(np.float32)


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
    ctx: NodeContext, x: np.ndarray, k: int, eps: float, scale: np.ndarray, bias: np.ndarray
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
        ctx.run_kernel(
            "norm",
            "layer_norm_rows",
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
        y = layer_norm_rows(ctx, x, k, epsilon, sc, bi)[0]
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
    ctx.run_kernel(
        "norm",
        "skip_layer_norm_rows",
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
    ctx.run_kernel(
        "norm",
        "rms_norm_rows",
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


def softmax_last(ctx: NodeContext, x: np.ndarray, log: bool) -> np.ndarray:
    """Softmax (or log-softmax) over the last axis of ``x`` (float32/float64, any rank >= 1),
    in a new array of x's shape and type."""
    n = x.shape[-1]
    x2 = np.ascontiguousarray(x).reshape(math.prod(x.shape[:-1]), n)
    y2 = np.empty_like(x2)
    if x2.size:
        ctx.run_kernel("nn", "softmax_rows", x2.size, x2, y2, log)
    return y2.reshape(x.shape)


# -- lowerings --------------------------------------------------------------------------------


def rows_of(x: Spec | None, axis: int) -> tuple[int, int, int] | None:
    """``(rows, n, a)`` of a float32/float64 tensor normalised over dims ``a = axis..``, for
    the row kernels; None for anything else (the operator's own path)."""
    if x is None or x.kind != TENSOR or x.dtype not in _NATIVE or x.ndim == 0 or x.size == 0:
        return None
    a = axis + x.ndim if axis < 0 else axis
    if not 0 <= a < x.ndim:
        return None
    n = math.prod(x.shape[a:])
    return x.size // n, n, a


def vector_arg(lc: LowerContext, i: int, norm_shape: tuple[int, ...], dtype: Any, fill: float):
    """Argument for a scale or bias input ``i`` broadcast to the normalised dims as an (n,)
    vector: the vector itself when the input is constant or absent (worked out once), the
    input when it is already such a vector, else None."""
    n = math.prod(norm_shape)
    spec = lc.inputs[i] if i < len(lc.inputs) else None
    if spec is None or spec.const:
        value = spec.value if spec is not None else None
        if value is not None and not isinstance(value, np.ndarray):
            return None
        return _param(value, norm_shape, dtype, fill)
    if spec.kind == TENSOR and spec.shape == norm_shape and spec.dtype == dtype:
        return In(i, shape=(n,))
    return None


def _sample(dtype: Any, ndim: int) -> np.ndarray:
    return np.empty((1,) * ndim, dtype)


def lower_layer_norm(lc: LowerContext, axis: int, epsilon: float) -> Bound | None:
    """LayerNorm of input 0 over dims ``axis..`` with scale input 1 and bias input 2 (either
    may be absent): one row kernel writing the output; mean and inverse deviation go to
    scratch buffers."""
    x = lc.inputs[0]
    got = rows_of(x, axis)
    if got is None:
        return None
    rows, n, a = got
    sc = vector_arg(lc, 1, x.shape[a:], x.dtype, 1.0)
    bi = vector_arg(lc, 2, x.shape[a:], x.dtype, 0.0)
    if sc is None or bi is None:
        return None
    v, m = _sample(x.dtype, 1), _sample(x.dtype, 2)
    fn = lc.backend.launcher("norm", "layer_norm_rows", x.size, (m, v, v, 0.0, m, v, v))
    outs = (tensor(x.dtype, x.shape), tensor(x.dtype, (rows,)), tensor(x.dtype, (rows,)))
    two = (rows, n)
    return writes(
        fn, In(0, shape=two), sc, bi, float(epsilon), Out(0, shape=two), Out(1), Out(2),
        outs=outs, name="norm.layer_norm_rows",
    )  # fmt: skip


@lowers(layer_norm)
def _lower_layer_norm(lc: LowerContext) -> Bound | None:
    return lower_layer_norm(lc, lc.attrs["axis"], lc.attrs["epsilon"])


@lowers(rms_norm)
def _lower_rms_norm(lc: LowerContext) -> Bound | None:
    x = lc.inputs[0]
    got = rows_of(x, lc.attrs["axis"])
    if got is None:
        return None
    rows, n, a = got
    sc = vector_arg(lc, 1, x.shape[a:], x.dtype, 1.0)
    if sc is None:
        return None
    v, m = _sample(x.dtype, 1), _sample(x.dtype, 2)
    fn = lc.backend.launcher("norm", "rms_norm_rows", x.size, (m, v, 0.0, m, v))
    two = (rows, n)
    return writes(
        fn, In(0, shape=two), sc, float(lc.attrs["epsilon"]), Out(0, shape=two), Out(1),
        outs=(tensor(x.dtype, x.shape), tensor(x.dtype, (rows,))), name="norm.rms_norm_rows",
    )  # fmt: skip


@lowers(skip_layer_norm)
def _lower_skip_layer_norm(lc: LowerContext) -> Bound | None:
    a, b = lc.inputs[0], lc.inputs[1]
    if a is None or b is None or a.kind != TENSOR or b.kind != TENSOR:
        return None
    dtype = a.dtype
    if dtype not in _NATIVE or b.dtype != dtype or a.size == 0 or b.size == 0:
        return None
    rank = max(a.ndim, b.ndim)
    ax = lc.attrs["axis"] + rank if lc.attrs["axis"] < 0 else lc.attrs["axis"]
    if not 0 <= ax < rank:
        return None
    pair = _skip_order(a, b, rank - ax)
    if pair is None:
        return None
    full = 0 if pair[0] is a else 1
    shape, other_shape = pair[0].shape, pair[1].shape
    norm_shape = shape[ax:]
    sc = vector_arg(lc, 2, norm_shape, dtype, 1.0)
    bi = vector_arg(lc, 3, norm_shape, dtype, 0.0)
    if sc is None or bi is None:
        return None
    n = math.prod(norm_shape)
    rows = math.prod(shape) // n
    rows_b = math.prod(other_shape) // n
    want_sum = len(lc.node.outputs) > 1 and lc.outputs_used[1]
    v, m = _sample(dtype, 1), _sample(dtype, 2)
    fn = lc.backend.launcher(
        "norm", "skip_layer_norm_rows", math.prod(shape), (m, m, v, v, 0.0, m, m, True, v, v)
    )
    two = (rows, n)
    outs = (
        tensor(dtype, shape),
        tensor(dtype, shape),
        tensor(dtype, (rows,)),
        tensor(dtype, (rows,)),
    )
    s_arg = Out(1, shape=two) if want_sum else Out(0, shape=two)
    return writes(
        fn, In(full, shape=two), In(1 - full, shape=(rows_b, n)), sc, bi,
        float(lc.attrs["epsilon"]), Out(0, shape=two), s_arg, want_sum, Out(2), Out(3),
        outs=outs, name="norm.skip_layer_norm_rows",
    )  # fmt: skip


@lowers(gelu)
def _lower_gelu(lc: LowerContext) -> Bound | None:
    # onnxjit's Gelu is one generated elementwise kernel, as a lone Gelu is
    return lower_node(lc)
