"""Reduction operators: Reduce*, ArgMax/ArgMin, CumSum, TopK.

All of them bring the input to a canonical ``(outer, n, inner)`` view, where ``n`` runs over the
reduced elements, and run one kernel of the backend's ``reduce`` family. Reduced axes that
are adjacent need no copy; otherwise the input is transposed once so that they become adjacent.

Versions: the axes of ReduceSum moved from an attribute to an input at 13, those of the other
Reduce* at 18 (with ``noop_with_empty_axes``). Later versions (ReduceMax/Min-20 adding bool,
ReduceLogSum/LogSumExp-28, ArgMax/ArgMin-13, CumSum-14, TopK-24) only widen the type lists, so
the earlier registration serves them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxjit.lowering import (
    TENSOR,
    Bound,
    In,
    LowerContext,
    Out,
    lowers,
    portable,
    tensor,
    writes,
)
from onnxjit.registry import NodeContext, onnx_op

_LOW_FLOATS = ("float16", "bfloat16")


def _is_low_float(dtype: np.dtype) -> bool:
    return dtype.name in _LOW_FLOATS or "float8" in dtype.name


def _norm_axis(ctx: NodeContext, axis: int, rank: int, what: str = "axis") -> int:
    """Wrap a negative axis once; out of ``[-rank, rank)`` is an error naming the range."""
    a = int(axis)
    if a < -rank or a >= max(rank, 1) or (rank == 0 and a not in (0, -1)):
        raise ctx.error(
            f"{what} {a} is out of range for an input of rank {rank}; "
            f"expected a value in [{-rank}, {rank - 1}]"
        )
    return a + rank if a < 0 else a


def _norm_axes(ctx: NodeContext, axes: Sequence[int], rank: int) -> list[int]:
    out = sorted(_norm_axis(ctx, a, rank, "axis") for a in axes)
    if len(set(out)) != len(out):
        raise ctx.error(f"axes {list(axes)} name the same axis twice; list each axis once")
    return out


def _canonical(x: np.ndarray, axes: list[int]) -> tuple[np.ndarray, int, int, int]:
    """A contiguous ``(outer, n, inner)`` array whose axis 1 runs over ``axes`` (sorted)."""
    shape = x.shape
    if axes and axes == list(range(axes[0], axes[-1] + 1)):
        a, b = axes[0], axes[-1] + 1
        outer, n, inner = math.prod(shape[:a]), math.prod(shape[a:b]), math.prod(shape[b:])
        return np.ascontiguousarray(x).reshape(outer, n, inner), outer, n, inner
    kept = [i for i in range(x.ndim) if i not in axes]
    xt = np.ascontiguousarray(np.transpose(x, kept + axes))
    outer = math.prod(shape[i] for i in kept)
    n = math.prod(shape[i] for i in axes)
    return xt.reshape(outer, n, 1), outer, n, 1


# name -> (kernel kind, post-processing applied to the reduced value); the kernel's code of a
# kind is its constant of that name (kernels/cpu/reduce.py)
_KINDS = {
    "sum": ("SUM", None),
    "mean": ("SUM", "mean"),
    "max": ("MAX", None),
    "min": ("MIN", None),
    "prod": ("PROD", None),
    "l1": ("L1", None),
    "l2": ("SUMSQ", "sqrt"),
    "logsum": ("SUM", "log"),
    "logsumexp": ("LOGSUMEXP", None),
    "sumsquare": ("SUMSQ", None),
}


def _elementwise_noop(x: np.ndarray, name: str) -> np.ndarray:
    """The result of reducing over an empty set of axes: the non-reduction steps only."""
    if name in ("sum", "mean", "max", "min", "prod"):
        return x
    work = x.astype(np.float32) if _is_low_float(x.dtype) else x
    with np.errstate(all="ignore"):
        if name == "l1":
            r = np.abs(work)
        elif name == "l2":
            r = (
                np.sqrt(work.astype(np.float64) * work)
                if work.dtype.kind in "iub"
                else np.abs(work)
            )
        elif name == "sumsquare":
            r = work * work
        elif name == "logsum":
            r = np.log(work)
        else:  # logsumexp
            r = np.log(np.exp(work))
    return np.asarray(r).astype(x.dtype)


def _identity(kind: str, dtype: np.dtype):
    if kind == "PROD":
        return 1
    if kind in ("MAX", "MIN"):
        if dtype.kind == "f":
            return -np.inf if kind == "MAX" else np.inf
        info = np.iinfo(dtype)
        return info.min if kind == "MAX" else info.max
    if kind == "LOGSUMEXP":
        return -np.inf
    return 0


def reduce_values(
    ctx: NodeContext,
    x: np.ndarray,
    axes: Sequence[int] | None,
    keepdims: int,
    noop_with_empty_axes: int,
    name: str,
) -> np.ndarray:
    """Shared body of every Reduce* version.

    ``axes`` None or empty reduces over all axes unless ``noop_with_empty_axes``, in which case
    only the elementwise steps run (ReduceSumSquare squares, ReduceLogSum takes the log...).
    Reductions over zero elements give the operation's identity (0, 1, -inf / the dtype's
    minimum for max...). The result has the input's dtype.
    """
    x = np.asarray(x)
    if axes is None or len(axes) == 0:
        if noop_with_empty_axes:
            return _elementwise_noop(x, name)
        axes_n = list(range(x.ndim))
    else:
        axes_n = _norm_axes(ctx, [int(a) for a in np.asarray(axes).reshape(-1)], x.ndim)
    if keepdims:
        out_shape = tuple(1 if i in axes_n else d for i, d in enumerate(x.shape))
    else:
        out_shape = tuple(d for i, d in enumerate(x.shape) if i not in axes_n)
    kind, post = _KINDS[name]
    dtype = x.dtype
    work = x
    if dtype == np.bool_:
        work = x.view(np.uint8)
    elif _is_low_float(dtype):
        work = x.astype(np.float32)
    elif kind == "LOGSUMEXP" and dtype.kind != "f":
        work = x.astype(np.float64)
    x3, outer, n, inner = _canonical(work, axes_n)
    wk = work.dtype
    if kind in ("MAX", "MIN"):
        acc_dtype = wk
    elif wk.kind == "f":
        acc_dtype = np.dtype(np.float64)
    elif wk.kind == "u":
        acc_dtype = np.dtype(np.uint64)
    else:
        acc_dtype = np.dtype(np.int64)
    acc = np.full((outer, inner), _identity(kind, wk), dtype=acc_dtype)
    if x3.size:
        code = int(ctx.kernel("reduce", kind))
        # threads split the outer rows: one row has nothing to split
        ctx.run_kernel("reduce", "reduce3", x3.size if outer > 1 else 0, x3, code, acc)
    res = acc
    with np.errstate(all="ignore"):
        if post == "mean":
            res = acc / n if n else np.full(acc.shape, np.nan)
        elif post == "sqrt":
            res = np.sqrt(acc.astype(np.float64))
        elif post == "log":
            res = np.log(acc.astype(np.float64))
        if dtype == np.bool_:
            res = res != 0
        res = np.asarray(res).astype(dtype)
    return res.reshape(out_shape)


# Element types the lowerings bind (the kernels compute in them); others run the implementation.
_BOUND_TYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _adjacent(axes: list[int]) -> bool:
    return bool(axes) and axes == list(range(axes[0], axes[-1] + 1))


def _lower_reduce(lc: LowerContext, name: str) -> Bound | None:
    """Reduce* of a float32/float64 tensor over constant axes that are adjacent (after
    dropping none): the (outer, n, inner) split, the kernel, its accumulator (a scratch
    output) and the step after it fixed once; per run, the accumulator is reset, the kernel
    runs and the result is written into the plan's buffer. Other cases (axes fed at run time,
    axes to transpose, an empty reduction, other types) run the implementation."""
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR or x.dtype not in _BOUND_TYPES or not lc.is_const(1):
        return None
    axes = lc.attrs["axes"] if "axes" in lc.attrs else lc.const(1)
    if axes is None or np.size(axes) == 0:
        if lc.attrs.get("noop_with_empty_axes"):
            return None
        axes_n = list(range(x.ndim))
    else:
        try:
            axes_n = _norm_axes(lc, [int(a) for a in np.asarray(axes).reshape(-1)], x.ndim)
        except Exception:  # the implementation raises its error at the planning run
            return None
    if not _adjacent(axes_n):
        return None
    lo, hi = axes_n[0], axes_n[-1] + 1
    outer, n, inner = (math.prod(x.shape[:lo]), math.prod(x.shape[lo:hi]),
                       math.prod(x.shape[hi:]))  # fmt: skip
    if n == 0 or outer * inner == 0:
        return None
    if lc.attrs["keepdims"]:
        shape = tuple(1 if i in axes_n else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes_n)
    kind, post = _KINDS[name]
    code = int(lc.kernel("reduce", kind))
    acc_dtype = x.dtype if kind in ("MAX", "MIN") else np.dtype(np.float64)
    start = acc_dtype.type(_identity(kind, acc_dtype))
    sample = (np.empty((1, 1, 1), x.dtype), code, np.empty((1, 1), acc_dtype))
    kernel = lc.backend.launcher("reduce", "reduce3", x.size if outer > 1 else 0, sample)
    reset = lc.kernel("reduce", "reset")
    x3, y2 = In(0, shape=(outer, n, inner)), Out(0, shape=(outer, inner))
    outs = [tensor(x.dtype, shape)]
    if acc_dtype == x.dtype and post is None:  # max, min: the kernel writes the output
        return writes(_reduce_into, kernel, reset, code, start, x3, y2, outs=outs,
                      name="reduce.reduce3")  # fmt: skip
    finish = lc.kernel("reduce", "finish")
    how = int(lc.kernel("reduce", f"FINISH_{(post or 'cast').upper()}"))
    outs.append(tensor(acc_dtype, (outer, inner)))  # the accumulator: a scratch output
    return writes(_reduce_acc, kernel, reset, finish, code, start, how, n, x3, y2, Out(1),
                  outs=outs, name="reduce.reduce3")  # fmt: skip


# The steps of a bound reduction, written once for every backend: the kernels they call are
# the backend's (passed in), so a device backend runs them on its arrays (``portable``).
def _reduce_into(kernel: Any, reset: Any, code: int, start: Any, x3: Any, y2: Any) -> None:
    """Max and min: the kernel folds ``x3`` straight into the output ``y2``."""
    reset(y2, start)
    kernel(x3, code, y2)


def _reduce_acc(
    kernel: Any, reset: Any, finish: Any, code: int, start: Any, how: int, n: int,
    x3: Any, y2: Any, acc: Any,
) -> None:  # fmt: skip
    """The others: fold into the float64 accumulator ``acc``, then finish into ``y2``."""
    reset(acc, start)
    kernel(x3, code, acc)
    finish(acc, how, n, y2)


portable(_reduce_into)
portable(_reduce_acc)


def _make_reduce(op: str, name: str, axes_input_since: int) -> None:
    """Register op-1 (axes attribute) and op-<axes_input_since> (axes input) for ``name``."""

    @onnx_op(op, since=1)
    def reduce_attr(ctx, data, *, axes=None, keepdims):
        return reduce_values(ctx, data, axes, keepdims, 0, name)

    @onnx_op(op, since=axes_input_since)
    def reduce_input(ctx, data, axes=None, *, keepdims, noop_with_empty_axes):
        return reduce_values(ctx, data, axes, keepdims, noop_with_empty_axes, name)

    reduce_attr.__name__ = reduce_attr.__qualname__ = f"{op.lower()}_1"
    reduce_input.__name__ = reduce_input.__qualname__ = f"{op.lower()}_{axes_input_since}"
    globals()[reduce_attr.__name__] = reduce_attr
    globals()[reduce_input.__name__] = reduce_input
    lowers(reduce_attr, reduce_input)(functools.partial(_lower_reduce, name=name))


_make_reduce("ReduceSum", "sum", 13)
for _op, _name in (
    ("ReduceMean", "mean"),
    ("ReduceMax", "max"),
    ("ReduceMin", "min"),
    ("ReduceProd", "prod"),
    ("ReduceL1", "l1"),
    ("ReduceL2", "l2"),
    ("ReduceLogSum", "logsum"),
    ("ReduceLogSumExp", "logsumexp"),
    ("ReduceSumSquare", "sumsquare"),
):
    _make_reduce(_op, _name, 18)


# -- ArgMax / ArgMin -------------------------------------------------------------------------
def _arg(ctx: NodeContext, x: np.ndarray, axis: int, keepdims: int, last: int, want_max: bool):
    x = np.asarray(x)
    if x.ndim == 0:
        raise ctx.error("the input is a scalar; ArgMax/ArgMin need a tensor of rank >= 1")
    a = _norm_axis(ctx, axis, x.ndim)
    if x.shape[a] == 0:
        raise ctx.error(
            f"axis {a} has size 0, so there is no element to select; use a non-empty axis"
        )
    work = x
    if x.dtype == np.bool_:
        work = x.view(np.uint8)
    elif _is_low_float(x.dtype):
        work = x.astype(np.float32)
    x3, outer, _, inner = _canonical(work, [a])
    out = np.empty((outer, inner), dtype=np.int64)
    if out.size:
        ctx.kernel("reduce", "argreduce3")(x3, want_max, bool(last), out)
    shape = list(x.shape)
    if keepdims:
        shape[a] = 1
    else:
        del shape[a]
    return out.reshape(shape)


@onnx_op("ArgMax", since=1)
def argmax_1(ctx, data, *, axis, keepdims):
    """Index (int64) of the first maximum along ``axis``."""
    return _arg(ctx, data, axis, keepdims, 0, True)


@onnx_op("ArgMax", since=12)
def argmax_12(ctx, data, *, axis, keepdims, select_last_index):
    """Index (int64) of the maximum along ``axis``; last occurrence when asked."""
    return _arg(ctx, data, axis, keepdims, select_last_index, True)


@onnx_op("ArgMin", since=1)
def argmin_1(ctx, data, *, axis, keepdims):
    """Index (int64) of the first minimum along ``axis``."""
    return _arg(ctx, data, axis, keepdims, 0, False)


@onnx_op("ArgMin", since=12)
def argmin_12(ctx, data, *, axis, keepdims, select_last_index):
    """Index (int64) of the minimum along ``axis``; last occurrence when asked."""
    return _arg(ctx, data, axis, keepdims, select_last_index, False)


_ARG_TYPES = (*_BOUND_TYPES, np.dtype(np.int32), np.dtype(np.int64))


@lowers(argmax_1, argmax_12, argmin_1, argmin_12)
def _lower_arg(lc: LowerContext) -> Bound | None:
    """ArgMax/ArgMin of a float32/float64/int32/int64 tensor along a non-empty axis: the
    kernel writing the plan's buffer through the (outer, n, inner) split fixed once."""
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR or x.dtype not in _ARG_TYPES or x.ndim == 0:
        return None
    a = int(lc.attrs["axis"])
    if not -x.ndim <= a < x.ndim:
        return None
    a += x.ndim if a < 0 else 0
    outer, n, inner = math.prod(x.shape[:a]), x.shape[a], math.prod(x.shape[a + 1 :])
    if n == 0 or outer * inner == 0:
        return None
    shape = list(x.shape)
    if lc.attrs["keepdims"]:
        shape[a] = 1
    else:
        del shape[a]
    want_max = lc.node.op_type == "ArgMax"
    last = bool(lc.attrs.get("select_last_index", 0))
    return writes(
        lc.kernel("reduce", "argreduce3"), In(0, shape=(outer, n, inner)), want_max, last,
        Out(0, shape=(outer, inner)), outs=[tensor(np.int64, shape)], name="reduce.argreduce3",
    )  # fmt: skip


# -- CumSum ------------------------------------------------------------------------------------
def _scalar_int(ctx: NodeContext, value: np.ndarray, what: str) -> int:
    arr = np.asarray(value)
    if arr.size != 1:
        raise ctx.error(f"{what} must hold exactly one value; found shape {list(arr.shape)}")
    return int(arr.reshape(-1)[0])


@onnx_op("CumSum", since=11)
def cumsum_11(ctx, x, axis, *, exclusive, reverse):
    """Cumulative sum along ``axis`` (a scalar input); ``exclusive`` and ``reverse`` flags."""
    x = np.asarray(x)
    rank = max(x.ndim, 1)
    a = _norm_axis(ctx, _scalar_int(ctx, axis, "axis"), rank)
    work = x.reshape(1) if x.ndim == 0 else x
    low = _is_low_float(x.dtype)
    if low:
        work = work.astype(np.float32)
    x3, _, _, _ = _canonical(work, [a])
    out = np.empty_like(x3)
    if out.size:
        ctx.kernel("reduce", "cumsum3")(x3, bool(exclusive), bool(reverse), out)
    out = out.reshape(x.shape)
    return out.astype(x.dtype) if low else out


@lowers(cumsum_11)
def _lower_cumsum(lc: LowerContext) -> Bound | None:
    """CumSum of a float32/float64/int32/int64 tensor along a constant axis: the scan kernel
    writing the plan's buffer through the (outer, n, inner) split fixed once."""
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR or x.dtype not in _ARG_TYPES or x.ndim == 0:
        return None
    axis = lc.const(1)
    if axis is None or np.size(axis) != 1:
        return None
    a = int(np.asarray(axis).reshape(-1)[0])
    if not -x.ndim <= a < x.ndim:
        return None
    a += x.ndim if a < 0 else 0
    dims = (math.prod(x.shape[:a]), x.shape[a], math.prod(x.shape[a + 1 :]))
    if x.size == 0:
        return None
    flags = (bool(lc.attrs["exclusive"]), bool(lc.attrs["reverse"]))
    return writes(
        lc.kernel("reduce", "cumsum3"), In(0, shape=dims), *flags, Out(0, shape=dims),
        outs=[tensor(x.dtype, x.shape)], name="reduce.cumsum3",
    )  # fmt: skip


# -- TopK -------------------------------------------------------------------------------------
def _topk(ctx: NodeContext, x: np.ndarray, k: int, axis: int, largest: int):
    x = np.asarray(x)
    if x.ndim == 0:
        raise ctx.error("the input is a scalar; TopK needs a tensor of rank >= 1")
    a = _norm_axis(ctx, axis, x.ndim)
    n = x.shape[a]
    if k < 0 or k > n:
        raise ctx.error(f"k = {k} is outside [0, {n}] (the size of axis {a}); lower k")
    work = x.view(np.uint8) if x.dtype == np.bool_ else x
    if _is_low_float(x.dtype):
        work = x.astype(np.float32)
    x3, outer, _, inner = _canonical(work, [a])
    values = np.empty((outer, k, inner), dtype=work.dtype)
    indices = np.empty((outer, k, inner), dtype=np.int64)
    if values.size:
        ctx.kernel("reduce", "topk3")(x3, k, bool(largest), values, indices)
    shape = list(x.shape)
    shape[a] = k
    values = values.reshape(shape)
    if work.dtype != x.dtype:
        values = values.view(np.bool_) if x.dtype == np.bool_ else values.astype(x.dtype)
    return values, indices.reshape(shape)


@onnx_op("TopK", since=1)
def topk_1(ctx, x, *, axis, k=None):
    """The ``k`` (attribute) largest values along ``axis`` and their int64 indices."""
    return _topk(ctx, x, int(k), axis, 1)


@onnx_op("TopK", since=10)
def topk_10(ctx, x, k, *, axis):
    """The ``k`` (input) largest values along ``axis`` and their int64 indices."""
    return _topk(ctx, x, _scalar_int(ctx, k, "K"), axis, 1)


@onnx_op("TopK", since=11)
def topk_11(ctx, x, k, *, axis, largest, sorted):
    """Top ``k`` largest (or smallest) along ``axis``; always sorted, ties by lower index."""
    return _topk(ctx, x, _scalar_int(ctx, k, "K"), axis, largest)


@lowers(topk_1, topk_10, topk_11)
def _lower_topk(lc: LowerContext) -> Bound | None:
    """TopK of a float32/float64/int32/int64 tensor with a constant k in [1, n] along an axis
    in range: the kernel writing the plan's two outputs (values, int64 indices) through the
    (outer, k, inner) split fixed once. The implementation always sorts, so ``sorted`` = 0
    (any order allowed) gets the same sorted result. A k fed at run time, k out of range (the
    implementation raises its error), k = 0, an empty input and other types run the
    implementation."""
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR or x.dtype not in _ARG_TYPES or x.ndim == 0:
        return None
    # TopK-1 takes k as an attribute, TopK-10 and later as input 1
    k = lc.const(1) if len(lc.inputs) > 1 else lc.attrs.get("k")
    if k is None or np.size(k) != 1:
        return None
    k = int(np.asarray(k).reshape(-1)[0])
    a = int(lc.attrs["axis"])
    if not -x.ndim <= a < x.ndim:
        return None
    a += x.ndim if a < 0 else 0
    outer, n, inner = math.prod(x.shape[:a]), x.shape[a], math.prod(x.shape[a + 1 :])
    if not 0 < k <= n or outer * inner == 0:
        return None
    shape = list(x.shape)
    shape[a] = k
    largest = bool(lc.attrs.get("largest", 1))
    return writes(
        lc.kernel("reduce", "topk3"), In(0, shape=(outer, n, inner)), k, largest,
        Out(0, shape=(outer, k, inner)), Out(1, shape=(outer, k, inner)),
        outs=[tensor(x.dtype, shape), tensor(np.int64, shape)], name="reduce.topk3",
    )  # fmt: skip
