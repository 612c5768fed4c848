"""Tensor operators: data movement, shape manipulation, constants and index-taking ops.

Pure views and single-pass numpy operations (reshape, transpose + copy, slicing, concatenate,
tile, pad through an index map) stay in numpy. Gathers and scatters run the backend's ``tensor``
kernels (``kernels/cpu/tensor.py``) over a canonical ``(outer, axis, inner)`` view, with the
element data reinterpreted as unsigned integers of the same width, so one compiled kernel serves
every rank and every dtype of a given width. String tensors (numpy object arrays) take a numpy
path.

Lowerings (end of the module) bind what a plan runs every step: Reshape, Squeeze, Unsqueeze and
Flatten with constant shapes and axes are views of their input; a Transpose moving the last
axis is the tiled kernel writing into the plan's buffer; Slice, Split, Concat, Expand and Pad
with constant sizes copy into the plan's buffers; Gather calls its kernel with the axis split
fixed (indices checked every run); GatherElements, ScatterElements, GatherND, ScatterND and
OneHot call theirs over views fixed once (scatters copy the data into the output, or write over
its buffer where it dies), on the CPU and on a device backend alike.

Index-taking operators validate their indices: a negative index wraps once; an index out of
range raises an error naming the index and the valid range.

Versions are registered where semantics, attributes or inputs changed; the versions in between
(and later ones that only widen the type lists) are served by the previous registration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxjit import limits, types
from onnxjit.lowering import (
    TENSOR,
    Bound,
    In,
    LowerContext,
    Out,
    lowers,
    portable,
    returns,
    tensor,
    view,
    writes,
)
from onnxjit.registry import NodeContext, onnx_op

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
# Scatter reductions: the kernels' code of each is their constant RED_<NAME>.
_REDUCTIONS = ("none", "add", "mul", "max", "min")


# -- helpers -----------------------------------------------------------------------------------
def _bits(a: np.ndarray) -> np.ndarray | None:
    """``a`` (contiguous) viewed as unsigned integers of the element width, or None.

    16-byte elements become pairs of uint64 along the last axis. Object arrays (strings) have no
    such view; callers take a numpy path for them.
    """
    if a.dtype.hasobject:
        return None
    size = a.dtype.itemsize
    if size in _UINT:
        return a.view(_UINT[size])
    if size % 8 == 0 and a.ndim and a.flags.c_contiguous:
        return a.view(np.uint64)
    return None


def _norm_axis(ctx: NodeContext, axis: int, rank: int, what: str = "axis") -> int:
    a = int(axis)
    if not -rank <= a < rank:
        raise ctx.error(
            f"{what} {a} is out of range for rank {rank}; expected a value in [{-rank}, {rank - 1}]"
        )
    return a + rank if a < 0 else a


def _ints(value: Any) -> list[int]:
    arr = np.asarray(value)
    if arr.dtype.kind in "iu":
        return arr.ravel().tolist()  # Python ints already, without a per-element int()
    return [int(v) for v in arr.reshape(-1)]


def _scalar(ctx: NodeContext, value: Any, what: str) -> Any:
    arr = np.asarray(value)
    if arr.size != 1:
        raise ctx.error(f"{what} must hold exactly one value; found shape {list(arr.shape)}")
    return arr.reshape(-1)[0]


def _index_array(indices: np.ndarray) -> np.ndarray:
    """Indices as a contiguous int64 array (converted once, not compiled per index dtype)."""
    return np.ascontiguousarray(np.asarray(indices), dtype=np.int64)


def _bad_index(ctx: NodeContext, idx: np.ndarray, pos: int, size: int, what: str):
    flat = np.asarray(idx).reshape(-1)
    where = np.unravel_index(pos, idx.shape) if idx.ndim else ()
    return ctx.error(
        f"indices{list(map(int, where))} = {int(flat[pos])} is out of range for {what} of "
        f"size {size}; valid indices are in [{-size}, {size - 1}]"
    )


# -- Identity, Constant, Shape, Size -----------------------------------------------------------
@onnx_op("Identity", since=1)
def identity(x):
    """The input itself (tensors, sequences and optionals alike)."""
    return x


@onnx_op("Constant", since=1)
def constant_1(
    *,
    value=None,
    sparse_value=None,
    value_float=None,
    value_floats=None,
    value_int=None,
    value_ints=None,
    value_string=None,
    value_strings=None,
):
    """The one value attribute that is set, as a fresh array.

    ``value_float(s)`` give float32, ``value_int(s)`` int64, ``value_string(s)`` strings, and
    ``sparse_value`` its dense equivalent (the loader densifies sparse tensors).
    """
    if value is not None:
        return np.array(value, copy=True)
    if sparse_value is not None:
        return np.array(sparse_value, copy=True)
    if value_float is not None:
        return np.array(value_float, dtype=np.float32)
    if value_floats is not None:
        return np.array(value_floats, dtype=np.float32)
    if value_int is not None:
        return np.array(value_int, dtype=np.int64)
    if value_ints is not None:
        return np.array(value_ints, dtype=np.int64)
    if value_string is not None:
        return np.array(value_string, dtype=object)
    if value_strings is not None:
        return np.array(list(value_strings), dtype=object)
    raise ValueError("Constant has no value attribute; set exactly one of value, value_* ")


@onnx_op("Shape", since=1)
def shape_1(data):
    """The input's shape as int64."""
    return np.array(np.shape(data), dtype=np.int64)


@onnx_op("Shape", since=15)
def shape_15(data, *, end=None, start):
    """``shape[start:end]`` with negative bounds counted from the back and clamped to rank."""
    shape = np.shape(data)
    r = len(shape)

    def clamp(v: int) -> int:
        v = int(v)
        if v < 0:
            v += r
        return min(max(v, 0), r)

    s = clamp(start)
    e = r if end is None else clamp(end)
    return np.array(shape[s:e], dtype=np.int64)


@onnx_op("Size", since=1)
def size_1(data):
    """The number of elements as a 0-d int64."""
    return np.array(np.size(data), dtype=np.int64)


@onnx_op("ConstantOfShape", since=9)
def constant_of_shape_9(ctx, input, *, value=None):
    """A tensor of the given shape filled with ``value`` (one element; default float32 0)."""
    shape = _ints(input)
    if any(d < 0 for d in shape):
        raise ctx.error(f"shape {shape} has a negative dimension; dimensions must be >= 0")
    if value is None:
        limits.check(ctx, shape, np.float32)
        return np.zeros(shape, dtype=np.float32)
    v = np.asarray(value)
    if v.size != 1:
        raise ctx.error(f"attribute value must hold one element; found shape {list(v.shape)}")
    limits.check(ctx, shape, v.dtype)
    return np.full(shape, v.reshape(-1)[0], dtype=v.dtype)


@onnx_op("EyeLike", since=9)
def eye_like_9(ctx, input, *, dtype=None, k):
    """A 2-D tensor shaped like ``input`` with ones on diagonal ``k`` (dtype attr or input's)."""
    x = np.asarray(input)
    if x.ndim != 2:
        raise ctx.error(f"input must be 2-D; found rank {x.ndim}")
    dt = x.dtype if dtype is None else types.np_dtype(int(dtype))
    return np.eye(x.shape[0], x.shape[1], k=int(k), dtype=dt)


@onnx_op("Range", since=11)
def range_11(ctx, start, limit, delta):
    """``start + i * delta`` for ``i < max(ceil((limit - start) / delta), 0)``.

    float16/bfloat16 compute in float32 (stash_type=1 at opset 27) and cast back.
    """
    dtype = np.asarray(start).dtype
    s, lim, d = (
        _scalar(ctx, v, n) for v, n in ((start, "start"), (limit, "limit"), (delta, "delta"))
    )
    if d == 0:
        raise ctx.error("delta is 0, so the range never reaches limit; use a non-zero delta")
    if dtype.kind in "iu":
        s, lim, d = int(s), int(lim), int(d)
        n = max(-((s - lim) // d), 0)  # exact ceil((lim - s) / d)
        limits.check(ctx, [n], np.int64)
        return (np.arange(n, dtype=np.int64) * d + s).astype(dtype)
    work = np.dtype(np.float32) if dtype.itemsize < 4 else dtype
    sw, lw, dw = (np.asarray(v).astype(work) for v in (s, lim, d))
    count = (float(lw) - float(sw)) / float(dw)
    if not math.isfinite(count):
        raise ctx.error(
            f"start={float(sw)}, limit={float(lw)}, delta={float(dw)} give {count} elements; "
            "use finite start, limit and delta"
        )
    n = max(int(math.ceil(count)), 0)
    limits.check(ctx, [n], work)
    out = sw + np.arange(n, dtype=work) * dw
    return out.astype(dtype)


@onnx_op("Range", since=27)
def range_27(ctx, start, limit, delta, *, stash_type):
    """Range-11 with ``stash_type`` (only float32 accumulation is supported for 16-bit floats)."""
    if int(stash_type) != 1 and np.asarray(start).dtype.itemsize < 4:
        raise ctx.unsupported(f"stash_type={stash_type} is not supported; use 1 (float)")
    return range_11(ctx, start, limit, delta)


# -- Reshape family ----------------------------------------------------------------------------
# The shape functions take ``ctx`` for its ``error``: a NodeContext, or a LowerContext when a
# lowering works the output shape out once for its plan.
def _reshape_dims(ctx: Any, in_shape: tuple[int, ...], shape: Sequence[int], allowzero: int):
    """The output shape of reshaping ``in_shape`` to ``shape`` (0 copies, -1 infers)."""
    size = math.prod(in_shape)
    new: list[int] = []
    infer = -1
    for i, s in enumerate(shape):
        if s == 0 and not allowzero:
            if i >= len(in_shape):
                raise ctx.error(
                    f"shape[{i}] = 0 copies input dimension {i}, but the input has rank "
                    f"{len(in_shape)}"
                )
            new.append(in_shape[i])
        elif s == -1:
            if infer >= 0:
                raise ctx.error(f"shape {list(shape)} has more than one -1; keep at most one")
            infer = i
            new.append(1)
        elif s < 0:
            raise ctx.error(f"shape[{i}] = {s} is invalid; dimensions are >= -1")
        else:
            new.append(s)
    if infer >= 0:
        if allowzero and 0 in shape:
            raise ctx.error("shape has both 0 and -1 while allowzero=1; that is ambiguous")
        known = math.prod(new)
        if known == 0 or size % known:
            raise ctx.error(
                f"cannot infer the -1 in {list(shape)}: {size} elements are not a "
                f"multiple of {known}"
            )
        new[infer] = size // known
    if math.prod(new) != size:
        raise ctx.error(
            f"cannot reshape {list(in_shape)} ({size} elements) to {new} "
            f"({math.prod(new)} elements)"
        )
    return tuple(new)


def _reshape(ctx: NodeContext, data: np.ndarray, shape: Sequence[int], allowzero: int):
    data = np.asarray(data)
    return data.reshape(_reshape_dims(ctx, data.shape, shape, allowzero))


@onnx_op("Reshape", since=1)
def reshape_1(ctx, data, *, consumed_inputs=None, shape=None):
    """Reshape to the ``shape`` attribute (0 copies a dimension, -1 is inferred)."""
    return _reshape(ctx, data, _ints(shape if shape is not None else []), 0)


@onnx_op("Reshape", since=5)
def reshape_5(ctx, data, shape):
    """Reshape to the ``shape`` input (0 copies a dimension, -1 is inferred)."""
    return _reshape(ctx, data, _ints(shape), 0)


@onnx_op("Reshape", since=14)
def reshape_14(ctx, data, shape, *, allowzero):
    """Reshape-5 where ``allowzero=1`` makes 0 a real zero-size dimension."""
    return _reshape(ctx, data, _ints(shape), allowzero)


def _flatten_dims(ctx: Any, in_shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    r = len(in_shape)
    a = int(axis)
    if not -r <= a <= r:
        raise ctx.error(f"axis {a} is out of range for rank {r}; expected [{-r}, {r}]")
    if a < 0:
        a += r
    return math.prod(in_shape[:a]), math.prod(in_shape[a:])


@onnx_op("Flatten", since=1)
def flatten_1(ctx, input, *, axis):
    """2-D ``(prod(shape[:axis]), prod(shape[axis:]))``; axis in [-r, r]."""
    x = np.asarray(input)
    return x.reshape(_flatten_dims(ctx, x.shape, axis))


def _squeeze_dims(ctx: Any, in_shape: tuple[int, ...], axes: Any) -> tuple[int, ...]:
    if axes is None or np.size(axes) == 0:
        return tuple(d for d in in_shape if d != 1)
    ax = sorted({_norm_axis(ctx, a, len(in_shape)) for a in _ints(axes)})
    for a in ax:
        if in_shape[a] != 1:
            raise ctx.error(f"axis {a} has size {in_shape[a]}; only size-1 axes can be squeezed")
    return tuple(d for i, d in enumerate(in_shape) if i not in ax)


def _squeeze(ctx: NodeContext, data: np.ndarray, axes: Any) -> np.ndarray:
    x = np.asarray(data)
    return x.reshape(_squeeze_dims(ctx, x.shape, axes))


@onnx_op("Squeeze", since=1)
def squeeze_1(ctx, data, *, axes=None):
    """Drop the listed size-1 axes (attribute), or every size-1 axis."""
    return _squeeze(ctx, data, axes)


@onnx_op("Squeeze", since=13)
def squeeze_13(ctx, data, axes=None):
    """Drop the listed size-1 axes (input), or every size-1 axis."""
    return _squeeze(ctx, data, axes)


def _unsqueeze_dims(ctx: Any, in_shape: tuple[int, ...], axes: Any) -> tuple[int, ...]:
    ax_list = _ints(axes)
    r = len(in_shape) + len(ax_list)
    ax = [_norm_axis(ctx, a, r) for a in ax_list]
    if len(set(ax)) != len(ax):
        raise ctx.error(f"axes {ax_list} name the same axis twice; list each axis once")
    dims = iter(in_shape)
    return tuple(1 if i in ax else next(dims) for i in range(r))


def _unsqueeze(ctx: NodeContext, data: np.ndarray, axes: Any) -> np.ndarray:
    x = np.asarray(data)
    return x.reshape(_unsqueeze_dims(ctx, x.shape, axes))


@onnx_op("Unsqueeze", since=1)
def unsqueeze_1(ctx, data, *, axes=None):
    """Insert size-1 axes at the output positions listed in the ``axes`` attribute."""
    return _unsqueeze(ctx, data, axes)


@onnx_op("Unsqueeze", since=13)
def unsqueeze_13(ctx, data, axes):
    """Insert size-1 axes at the output positions listed in the ``axes`` input."""
    return _unsqueeze(ctx, data, axes)


@onnx_op("Transpose", since=1)
def transpose_1(ctx, data, *, perm=None):
    """Permute axes (default: reverse them); the result is contiguous."""
    x = data if type(data) is np.ndarray else np.asarray(data)
    p = list(range(x.ndim))[::-1] if perm is None else perm
    if sorted(p) != list(range(x.ndim)):
        p = [int(v) for v in p]
        raise ctx.error(f"perm {p} is not a permutation of the {x.ndim} axes of the input")
    p = tuple(int(v) for v in p)
    if (
        x.flags.c_contiguous
        and x.size >= _TILED_TRANSPOSE_MIN
        and x.dtype.itemsize in _UINT
        and not x.dtype.hasobject
    ):
        tiles = _transpose_tiles(x.shape, p)
        if tiles is not None:
            y = np.empty([x.shape[v] for v in p], x.dtype)
            width = _UINT[x.dtype.itemsize]
            xb, yb = x.reshape(-1).view(width), y.reshape(-1).view(width)
            ctx.run_kernel("tensor", "transpose_tiles", x.size, xb, yb, *tiles)
            return y
    # np.ascontiguousarray would turn a 0-d result into 1-d; copy(order="C") keeps the rank.
    return x.transpose(p).copy(order="C")


@onnx_op("Expand", since=8)
def expand_8(ctx, input, shape):
    """Broadcast ``input`` with ``shape`` (numpy rules, both ways) into a fresh array."""
    x = np.asarray(input)
    try:
        out_shape = np.broadcast_shapes(x.shape, tuple(_ints(shape)))
    except ValueError:
        raise ctx.error(
            f"input shape {list(x.shape)} cannot be broadcast with {_ints(shape)}"
        ) from None
    limits.check(ctx, out_shape, x.dtype)
    return np.broadcast_to(x, out_shape).copy()


@onnx_op("Tile", since=1)
def tile_1(ctx, input, tiles, axis):
    """Repeat ``input`` ``tiles`` times along ``axis`` (both scalar inputs)."""
    x = np.asarray(input)
    a = _norm_axis(ctx, int(_scalar(ctx, axis, "axis")), x.ndim)
    reps = [1] * x.ndim
    reps[a] = int(_scalar(ctx, tiles, "tiles"))
    return tile_6(ctx, x, np.array(reps))


@onnx_op("Tile", since=6)
def tile_6(ctx, input, repeats):
    """Repeat ``input`` ``repeats[i]`` times along each axis i."""
    x = np.asarray(input)
    reps = _ints(repeats)
    if len(reps) != x.ndim or any(r < 0 for r in reps):
        raise ctx.error(
            f"repeats {reps} must have one non-negative entry per input axis ({x.ndim})"
        )
    limits.check(ctx, [n * r for n, r in zip(x.shape, reps)], x.dtype)
    return np.tile(x, reps) if x.ndim else x.copy()


@onnx_op("Concat", since=1)
@onnx_op("Concat", since=4)
def concat_4(ctx, *inputs, axis=None):
    """Join inputs along ``axis`` (Concat-1 defaults it to 1)."""
    arrays = [np.asarray(v) for v in inputs]
    if not arrays:
        raise ctx.error("Concat needs at least one input")
    r = arrays[0].ndim
    if r == 0:
        raise ctx.error("Concat inputs are scalars; they need rank >= 1")
    a = _norm_axis(ctx, 1 if axis is None else axis, r)
    for i, v in enumerate(arrays):
        if v.ndim != r or any(v.shape[d] != arrays[0].shape[d] for d in range(r) if d != a):
            raise ctx.error(
                f"input {i} has shape {list(v.shape)}, which does not match input 0 "
                f"{list(arrays[0].shape)} outside axis {a}"
            )
    return np.concatenate(arrays, axis=a)


# -- Split -------------------------------------------------------------------------------------
def _split_sizes(
    ctx: Any,
    in_shape: tuple[int, ...],
    n_out: int,
    split: Any,
    axis: int,
    num_outputs: int | None = None,
) -> tuple[int, list[int]]:
    """The split axis and the size of each of the ``n_out`` parts."""
    a = _norm_axis(ctx, axis, len(in_shape))
    dim = in_shape[a]
    if split is not None and np.size(split):
        sizes = _ints(split)
        if sum(sizes) != dim or len(sizes) != n_out or any(s < 0 for s in sizes):
            raise ctx.error(
                f"split {sizes} must have {n_out} non-negative entries summing to {dim} (axis {a})"
            )
    elif num_outputs is not None:
        if int(num_outputs) != n_out:
            raise ctx.error(f"num_outputs={num_outputs} but the node has {n_out} outputs")
        chunk = -(-dim // n_out)
        sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(n_out)]
    else:
        if dim % n_out:
            raise ctx.error(
                f"axis {a} of size {dim} cannot be split into {n_out} equal parts; pass split"
            )
        sizes = [dim // n_out] * n_out
    return a, sizes


def _split_index(rank: int, a: int, sizes: list[int]) -> list[tuple[slice, ...]]:
    """The index of each part along axis ``a``."""
    index = []
    start = 0
    for s in sizes:
        sl = [slice(None)] * rank
        sl[a] = slice(start, start + s)
        index.append(tuple(sl))
        start += s
    return index


def _split(
    ctx: NodeContext, x: np.ndarray, split: Any, axis: int, num_outputs: int | None = None
) -> tuple[np.ndarray, ...]:
    x = np.asarray(x)
    a, sizes = _split_sizes(ctx, x.shape, ctx.n_outputs, split, axis, num_outputs)
    return tuple(x[sl] for sl in _split_index(x.ndim, a, sizes))


@onnx_op("Split", since=1)
def split_1(ctx, input, split_input=None, *, split=None, axis=None):
    """Split-1: sizes from the ``split`` attribute or the optional second input; axis 0."""
    sizes = split if split is not None else split_input
    return _split(ctx, input, sizes, 0 if axis is None else axis)


@onnx_op("Split", since=2)
def split_2(ctx, input, *, split=None, axis):
    """Split along ``axis`` into the ``split`` sizes (attribute) or equal parts."""
    return _split(ctx, input, split, axis)


@onnx_op("Split", since=13)
def split_13(ctx, input, split=None, *, axis):
    """Split along ``axis`` into the ``split`` sizes (input) or equal parts."""
    return _split(ctx, input, split, axis)


@onnx_op("Split", since=18)
def split_18(ctx, input, split=None, *, axis, num_outputs=None):
    """Split-13 plus ``num_outputs``: ceil-sized parts, the last one smaller."""
    return _split(ctx, input, split, axis, num_outputs)


# -- Slice -------------------------------------------------------------------------------------
def _slice_index(ctx: Any, in_shape: tuple[int, ...], starts, ends, axes, steps) -> tuple:
    """The numpy index of a Slice of an input of shape ``in_shape``."""
    rank = len(in_shape)
    st, en = _ints(starts), _ints(ends)
    if len(st) != len(en):
        raise ctx.error(f"starts {st} and ends {en} have different lengths")
    ax = list(range(len(st))) if axes is None or np.size(axes) == 0 else _ints(axes)
    sp = [1] * len(st) if steps is None or np.size(steps) == 0 else _ints(steps)
    if len(ax) != len(st) or len(sp) != len(st):
        raise ctx.error(f"axes {ax} and steps {sp} must have one entry per start ({len(st)})")
    index: list[slice] = [slice(None)] * rank
    seen = set()
    for s, e, a, step in zip(st, en, ax, sp):
        a = _norm_axis(ctx, a, rank)
        if a in seen:
            raise ctx.error(f"axis {a} is sliced twice; list each axis once")
        seen.add(a)
        if step == 0:
            raise ctx.error(f"step for axis {a} is 0; steps must be non-zero")
        dim = in_shape[a]
        if s < 0:
            s += dim
        if e < 0:
            e += dim
        if step > 0:
            s = min(max(s, 0), dim)
            e = min(max(e, 0), dim)
            index[a] = slice(s, e, step)
        else:
            s = min(max(s, 0), dim - 1)
            e = min(max(e, -1), dim - 1)
            # -1 means "past the front": a Python slice needs None for that.
            index[a] = slice(s, None if e < 0 else e, step)
    return tuple(index)


def _slice(ctx: NodeContext, data: np.ndarray, starts, ends, axes, steps) -> np.ndarray:
    x = np.asarray(data)
    return x[_slice_index(ctx, x.shape, starts, ends, axes, steps)]


@onnx_op("Slice", since=1)
def slice_1(ctx, data, *, axes=None, ends=None, starts=None):
    """Slice with ``starts``/``ends``/``axes`` attributes (step 1), clamped to the bounds."""
    return _slice(ctx, data, starts, ends, axes, None)


@onnx_op("Slice", since=10)
def slice_10(ctx, data, starts, ends, axes=None, steps=None):
    """Slice with inputs; negative starts/ends count from the back, steps may be negative."""
    return _slice(ctx, data, starts, ends, axes, steps)


# -- Pad ---------------------------------------------------------------------------------------
def _pad_layout(ctx: Any, shape: tuple[int, ...], pads: Sequence[int], axes: Any):
    """``(begin, end, out_shape)`` of a Pad of an input of ``shape``."""
    r = len(shape)
    ax = list(range(r)) if axes is None else [_norm_axis(ctx, a, r) for a in _ints(axes)]
    if len(pads) != 2 * len(ax):
        raise ctx.error(f"pads {list(pads)} must have 2 * {len(ax)} entries (begins, then ends)")
    begin = [0] * r
    end = [0] * r
    for i, a in enumerate(ax):
        begin[a] = pads[i]
        end[a] = pads[i + len(ax)]
    out_shape = [shape[d] + begin[d] + end[d] for d in range(r)]
    if any(s < 0 for s in out_shape):
        raise ctx.error(f"pads {list(pads)} remove more than the input shape {list(shape)}")
    return begin, end, out_shape


def _pad_value(ctx: Any, value: Any, dtype: np.dtype) -> Any:
    """The fill value of constant mode."""
    if value is None:
        return "" if dtype.hasobject else 0
    return _scalar(ctx, value, "constant_value")


def _pad_regions(shape: tuple[int, ...], begin: list[int], end: list[int]) -> tuple:
    """``(dst, src)``: where the input's kept part goes in the output, and that part."""
    r = len(shape)
    dst = tuple(
        slice(max(begin[d], 0), max(begin[d], 0) + shape[d] + min(begin[d], 0) + min(end[d], 0))
        for d in range(r)
    )
    src = tuple(slice(max(-begin[d], 0), shape[d] - max(-end[d], 0)) for d in range(r))
    return dst, src


def _pad(
    ctx: NodeContext,
    data: np.ndarray,
    pads: Sequence[int],
    mode: str,
    value: Any,
    axes: Any = None,
) -> np.ndarray:
    x = np.asarray(data)
    r = x.ndim
    begin, end, out_shape = _pad_layout(ctx, x.shape, pads, axes)
    limits.check(ctx, out_shape, x.dtype)
    if mode == "constant":
        out = np.full(out_shape, _pad_value(ctx, value, x.dtype), dtype=x.dtype)
        dst, src = _pad_regions(x.shape, begin, end)
        out[dst] = x[src]
        return out
    if mode not in ("reflect", "edge", "wrap"):
        raise ctx.unsupported(f"mode {mode!r} is not supported; use constant/reflect/edge/wrap")
    maps = []
    for d in range(r):
        n = x.shape[d]
        p = np.arange(-begin[d], n + end[d], dtype=np.int64)
        if n == 0:
            if p.size:
                raise ctx.error(f"axis {d} is empty, so mode {mode!r} has nothing to repeat")
            maps.append(p)
            continue
        if mode == "edge":
            p = np.clip(p, 0, n - 1)
        elif mode == "wrap":
            p = np.mod(p, n)
        elif n == 1:
            p = np.zeros_like(p)
        else:
            period = 2 * (n - 1)
            q = np.mod(p, period)
            p = np.where(q < n, q, period - q)
        maps.append(p)
    return x[np.ix_(*maps)] if r else x.copy()


@onnx_op("Pad", since=1)
def pad_1(ctx, data, *, value, mode, paddings=None):
    """Pad-1: ``paddings`` attribute, ``value`` for constant mode."""
    return _pad(ctx, data, _ints(paddings), mode, np.asarray(value, dtype=np.asarray(data).dtype))


@onnx_op("Pad", since=2)
def pad_2(ctx, data, *, value, mode, pads=None):
    """Pad with the ``pads`` attribute ([begins..., ends...]); negative pads crop."""
    return _pad(ctx, data, _ints(pads), mode, np.asarray(value, dtype=np.asarray(data).dtype))


@onnx_op("Pad", since=11)
def pad_11(ctx, data, pads, constant_value=None, *, mode):
    """Pad with ``pads`` and ``constant_value`` inputs; modes constant/reflect/edge."""
    return _pad(ctx, data, _ints(pads), mode, constant_value)


@onnx_op("Pad", since=18)
def pad_18(ctx, data, pads, constant_value=None, axes=None, *, mode):
    """Pad-11 plus an ``axes`` input naming the padded axes (wrap mode from 19)."""
    return _pad(ctx, data, _ints(pads), mode, constant_value, axes)


# -- Gather family -----------------------------------------------------------------------------
def _gather(ctx: NodeContext, data: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
    x = np.asarray(data)
    ind = np.asarray(indices)
    if x.ndim == 0:
        raise ctx.error("data is a scalar; Gather needs rank >= 1")
    a = _norm_axis(ctx, axis, x.ndim)
    n = x.shape[a]
    flat = _index_array(ind).reshape(-1)
    wrapped, bad = ctx.kernel("tensor", "wrap_indices")(flat, n)
    if bad >= 0:
        raise _bad_index(ctx, ind, bad, n, f"axis {a}")
    out_shape = x.shape[:a] + ind.shape + x.shape[a + 1 :]
    outer, inner = math.prod(x.shape[:a]), math.prod(x.shape[a + 1 :])
    x3 = np.ascontiguousarray(x).reshape(outer, n, inner)
    out = np.empty(out_shape, dtype=x.dtype)
    o3 = out.reshape(outer, flat.size, inner)
    xb, ob = _bits(x3), _bits(o3)
    if xb is None or ob is None:
        o3[...] = x3[:, wrapped, :]
    elif out.size:
        backend = ctx.backend
        threshold = _GATHER_PARALLEL_FACTOR * backend.parallel_threshold
        backend.run("tensor", "gather_axis", out.size, xb, wrapped, ob, threshold=threshold)
    return out


@onnx_op("Gather", since=1)
def gather_1(ctx, data, indices, *, axis):
    """``data`` indexed by ``indices`` along ``axis``; output rank r + q - 1."""
    return _gather(ctx, data, indices, axis)


def _elements_view(ctx: NodeContext, x: np.ndarray, ind: np.ndarray, a: int):
    """The part of ``x`` that ``ind`` can reach (equal to ``ind`` outside axis ``a``)."""
    if ind.ndim != x.ndim:
        raise ctx.error(f"indices have rank {ind.ndim}; they need the rank of data ({x.ndim})")
    for d in range(x.ndim):
        if d != a and ind.shape[d] > x.shape[d]:
            raise ctx.error(
                f"indices shape {list(ind.shape)} exceeds data shape {list(x.shape)} on axis {d}"
            )
    return tuple(slice(None) if d == a else slice(0, ind.shape[d]) for d in range(x.ndim))


@onnx_op("GatherElements", since=11)
def gather_elements_11(ctx, data, indices, *, axis):
    """``out[..i..] = data[.., indices[..i..], ..]`` along ``axis``; shaped like indices."""
    x = np.asarray(data)
    ind = np.asarray(indices)
    a = _norm_axis(ctx, axis, x.ndim)
    sub = np.ascontiguousarray(x[_elements_view(ctx, x, ind, a)])
    n = x.shape[a]
    outer, inner = math.prod(ind.shape[:a]), math.prod(ind.shape[a + 1 :])
    idx3 = _index_array(ind).reshape(outer, ind.shape[a], inner)
    x3 = sub.reshape(outer, n, inner)
    out = np.empty(ind.shape, dtype=x.dtype)
    o3 = out.reshape(idx3.shape)
    if out.size == 0:
        return out
    xb, ob = _bits(x3), _bits(o3)
    if xb is None or ob is None or xb.shape[2] != x3.shape[2]:
        # Strings and 16-byte elements: validate, then let numpy gather.
        _, bad = ctx.kernel("tensor", "wrap_indices")(idx3.reshape(-1), n)
        if bad >= 0:
            raise _bad_index(ctx, ind, bad, n, f"axis {a}")
        o3[...] = np.take_along_axis(x3, np.where(idx3 < 0, idx3 + n, idx3), axis=1)
        return out
    bad = ctx.kernel("tensor", "gather_elements")(xb, idx3, ob)
    if bad >= 0:
        raise _bad_index(ctx, ind, bad, n, f"axis {a}")
    return out


def _scatter_work(x: np.ndarray, updates: np.ndarray, reduction: str):
    """Arrays to scatter into/from and a function that turns the result back into x's dtype."""
    if reduction == "none":
        return x, updates, lambda r: r
    if x.dtype == np.bool_:
        return x.astype(np.uint8), updates.astype(np.uint8), lambda r: r != 0
    if x.dtype.name in ("float16", "bfloat16"):
        return x.astype(np.float32), updates.astype(np.float32), lambda r: r.astype(x.dtype)
    return x, updates, lambda r: r


def _reduction_code(ctx: NodeContext, reduction: str) -> int:
    if reduction not in _REDUCTIONS:
        raise ctx.unsupported(f"reduction {reduction!r}; use one of {sorted(_REDUCTIONS)}")
    return int(ctx.kernel("tensor", f"RED_{reduction.upper()}"))


def _scatter_elements(ctx, data, indices, updates, axis, reduction):
    x = np.asarray(data)
    ind = np.asarray(indices)
    upd = np.asarray(updates, dtype=x.dtype)
    red = _reduction_code(ctx, reduction)
    a = _norm_axis(ctx, axis, x.ndim)
    if upd.shape != ind.shape:
        raise ctx.error(
            f"updates shape {list(upd.shape)} must equal indices shape {list(ind.shape)}"
        )
    reach = _elements_view(ctx, x, ind, a)
    work, wupd, finish = _scatter_work(x, upd, reduction)
    sub = np.array(work[reach], copy=True, order="C")
    n = x.shape[a]
    outer, inner = math.prod(ind.shape[:a]), math.prod(ind.shape[a + 1 :])
    idx3 = _index_array(ind).reshape(outer, ind.shape[a], inner)
    s3 = sub.reshape(outer, n, inner)
    u3 = np.ascontiguousarray(wupd).reshape(idx3.shape)
    if reduction == "none":
        sb, ub = _bits(s3), _bits(u3)
    else:
        sb, ub = s3, u3
    if ind.size:
        if sb is None or ub is None or sb.shape[2] != s3.shape[2] or sb.dtype.hasobject:
            _, bad = ctx.kernel("tensor", "wrap_indices")(idx3.reshape(-1), n)
            if bad >= 0:
                raise _bad_index(ctx, ind, bad, n, f"axis {a}")
            if reduction != "none":
                raise ctx.unsupported(f"reduction {reduction!r} on {x.dtype} data")
            np.put_along_axis(s3, np.where(idx3 < 0, idx3 + n, idx3), u3, axis=1)
        else:
            bad = ctx.kernel("tensor", "scatter_elements")(sb, idx3, ub, red)
            if bad >= 0:
                raise _bad_index(ctx, ind, bad, n, f"axis {a}")
    out = np.array(work, copy=True)
    out[reach] = sub
    return finish(out)


@onnx_op("Scatter", since=9)
@onnx_op("ScatterElements", since=11)
def scatter_elements_11(ctx, data, indices, updates, *, axis):
    """A copy of ``data`` with ``updates`` written at ``indices`` along ``axis`` (last wins)."""
    return _scatter_elements(ctx, data, indices, updates, axis, "none")


@onnx_op("ScatterElements", since=16)
def scatter_elements_16(ctx, data, indices, updates, *, reduction, axis):
    """ScatterElements with ``reduction`` none/add/mul (max/min from 18)."""
    return _scatter_elements(ctx, data, indices, updates, axis, reduction)


def _nd_index(ctx: NodeContext, x: np.ndarray, ind: np.ndarray, b: int) -> int:
    if ind.ndim < 1:
        raise ctx.error("indices must have rank >= 1")
    k = ind.shape[-1]
    if b < 0 or b >= min(x.ndim, ind.ndim) or b + k > x.ndim:
        raise ctx.error(
            f"indices shape {list(ind.shape)} with batch_dims={b} does not fit data of shape "
            f"{list(x.shape)}"
        )
    if x.shape[:b] != ind.shape[:b]:
        raise ctx.error(
            f"the first {b} (batch) dimensions of data {list(x.shape)} and indices "
            f"{list(ind.shape)} differ"
        )
    return k


@onnx_op("GatherND", since=11)
def gather_nd_11(ctx, data, indices):
    """Slices of ``data`` addressed by the last axis of ``indices``."""
    return gather_nd_12(ctx, data, indices, batch_dims=0)


@onnx_op("GatherND", since=12)
def gather_nd_12(ctx, data, indices, *, batch_dims):
    """GatherND whose first ``batch_dims`` axes of data and indices are matched batch axes."""
    x = np.asarray(data)
    ind = np.asarray(indices)
    b = int(batch_dims)
    k = _nd_index(ctx, x, ind, b)
    nb = math.prod(x.shape[:b])
    dims = np.array(x.shape[b : b + k], dtype=np.int64)
    m = math.prod(x.shape[b : b + k])
    s = math.prod(x.shape[b + k :])
    nn = math.prod(ind.shape[b:-1])
    out_shape = ind.shape[:-1] + x.shape[b + k :]
    out = np.empty(out_shape, dtype=x.dtype)
    if out.size == 0 and ind.size == 0:
        return out
    x3 = np.ascontiguousarray(x).reshape(nb, m, s)
    idx3 = _index_array(ind).reshape(nb, nn, k)
    o3 = out.reshape(nb, nn, s)
    xb, ob = _bits(x3), _bits(o3)
    if xb is None or ob is None:
        # Strings: validate with a zero-width copy, then let numpy gather.
        dummy_x = np.empty((nb, m, 0), np.uint8)
        bad = ctx.kernel("tensor", "gather_nd")(
            dummy_x, idx3, dims, np.empty((nb, nn, 0), np.uint8)
        )
        if bad >= 0:
            raise _bad_index(ctx, ind, bad, int(dims[bad % k]), "an indexed axis")
        wrapped = np.where(idx3 < 0, idx3 + dims, idx3)
        flat = (
            np.ravel_multi_index(tuple(np.moveaxis(wrapped, -1, 0)), tuple(dims))
            if k
            else np.zeros((nb, nn), np.int64)
        )
        o3[...] = np.take_along_axis(x3, flat[:, :, None], axis=1)
        return out
    bad = ctx.kernel("tensor", "gather_nd")(xb, idx3, dims, ob)
    if bad >= 0:
        raise _bad_index(ctx, ind, bad, int(dims[bad % k]), "an indexed axis")
    return out


def _scatter_nd(ctx, data, indices, updates, reduction):
    x = np.asarray(data)
    ind = np.asarray(indices)
    upd = np.asarray(updates, dtype=x.dtype)
    red = _reduction_code(ctx, reduction)
    k = _nd_index(ctx, x, ind, 0)
    want = ind.shape[:-1] + x.shape[k:]
    if upd.shape != want:
        raise ctx.error(f"updates shape {list(upd.shape)} must be {list(want)}")
    dims = np.array(x.shape[:k], dtype=np.int64)
    m, s = math.prod(x.shape[:k]), math.prod(x.shape[k:])
    nn = math.prod(ind.shape[:-1])
    work, wupd, finish = _scatter_work(x, upd, reduction)
    out = np.array(work, copy=True, order="C")
    o2 = out.reshape(m, s)
    u2 = np.ascontiguousarray(wupd).reshape(nn, s)
    idx2 = _index_array(ind).reshape(nn, k)
    scatter_nd = ctx.kernel("tensor", "scatter_nd")
    if reduction == "none":
        ob, ub = _bits(o2), _bits(u2)
    else:
        ob, ub = o2, u2
    if ob is None or ub is None or ob.dtype.hasobject:
        if reduction != "none":
            raise ctx.unsupported(f"reduction {reduction!r} on {x.dtype} data")
        bad = scatter_nd(np.zeros((m, 0), np.uint8), idx2, dims, np.zeros((nn, 0), np.uint8), red)
        if bad >= 0:
            raise _bad_index(ctx, ind, bad, int(dims[bad % k]), "an indexed axis")
        wrapped = np.where(idx2 < 0, idx2 + dims, idx2)
        rows = np.ravel_multi_index(tuple(wrapped.T), tuple(dims)) if k else np.zeros(nn, int)
        for r in range(nn):
            o2[rows[r]] = u2[r]
    else:
        bad = scatter_nd(ob, idx2, dims, ub, red)
        if bad >= 0:
            raise _bad_index(ctx, ind, bad, int(dims[bad % k]), "an indexed axis")
    return finish(out)


@onnx_op("ScatterND", since=11)
def scatter_nd_11(ctx, data, indices, updates):
    """A copy of ``data`` with ``updates`` slices written at ``indices`` rows (last wins)."""
    return _scatter_nd(ctx, data, indices, updates, "none")


@onnx_op("ScatterND", since=16)
def scatter_nd_16(ctx, data, indices, updates, *, reduction):
    """ScatterND with ``reduction`` none/add/mul (max/min from 18)."""
    return _scatter_nd(ctx, data, indices, updates, reduction)


# -- OneHot, NonZero, Trilu, EyeLike ------------------------------------------------------------
@onnx_op("OneHot", since=9)
def one_hot_9(ctx, indices, depth, values, *, axis):
    """``values[1]`` where the new ``axis`` equals the index, ``values[0]`` elsewhere.

    Indices in [-depth, depth) wrap once; others give an all-off column (the spec).
    """
    ind = np.asarray(indices)
    vals = np.asarray(values)
    if vals.size != 2:
        raise ctx.error(f"values must hold [off_value, on_value]; found shape {vals.shape}")
    d = int(_scalar(ctx, depth, "depth"))
    if d < 1:
        raise ctx.error(f"depth is {d}; it must be >= 1")
    r = ind.ndim + 1
    a = _norm_axis(ctx, axis, r)
    outer, inner = math.prod(ind.shape[:a]), math.prod(ind.shape[a:])
    limits.check(ctx, ind.shape[:a] + (d,) + ind.shape[a:], vals.dtype)
    idx2 = _index_array(ind).reshape(outer, inner)
    out = np.empty(ind.shape[:a] + (d,) + ind.shape[a:], dtype=vals.dtype)
    o3 = out.reshape(outer, d, inner)
    flat = vals.reshape(-1)
    ob = _bits(o3)
    if ob is None or ob.shape != o3.shape:
        o3[...] = flat[0]
        ok = (idx2 >= -d) & (idx2 < d)
        oo, ii = np.nonzero(ok)
        o3[oo, np.where(idx2 < 0, idx2 + d, idx2)[oo, ii], ii] = flat[1]
    elif out.size:
        fb = _bits(np.ascontiguousarray(flat))
        ctx.kernel("tensor", "one_hot")(idx2, d, fb[0], fb[1], ob)
    return out


@onnx_op("NonZero", since=9)
def non_zero_9(x):
    """The indices of the non-zero elements, shape (rank, count), int64 (row-major order)."""
    a = np.asarray(x)
    if a.ndim == 0:
        return np.zeros((0, 1 if a.item() else 0), dtype=np.int64)
    return np.array(np.nonzero(a), dtype=np.int64).reshape(a.ndim, -1)


@onnx_op("Trilu", since=14)
def trilu_14(ctx, input, k=None, *, upper):
    """Keep the upper (or lower) triangle of the last two axes from diagonal ``k``."""
    x = np.asarray(input)
    if x.ndim < 2:
        raise ctx.error(f"input has rank {x.ndim}; Trilu needs rank >= 2")
    kk = 0 if k is None else int(_scalar(ctx, k, "k"))
    n, m = x.shape[-2:]
    kk = max(min(kk, m + 1), -n - 1)  # beyond these every element is kept or dropped
    rows = np.arange(n)[:, None]
    cols = np.arange(m)[None, :]
    keep = (cols - rows >= kk) if upper else (cols - rows <= kk)
    zero = np.zeros((), dtype=x.dtype) if not x.dtype.hasobject else ""
    return np.where(keep, x, zero).astype(x.dtype, copy=False)


# -- Dropout -----------------------------------------------------------------------------------
def _dropout(x, ratio: float, training: bool, seed, want_mask: bool, mask_dtype=np.bool_):
    x = np.asarray(x)
    if not training or ratio == 0:
        mask = np.ones(x.shape, dtype=mask_dtype) if want_mask else None
        return (x, mask) if want_mask else x
    rng = np.random.RandomState(seed)
    keep = rng.uniform(0.0, 1.0, x.shape) >= ratio
    scale = 1.0 / (1.0 - ratio) if ratio < 1 else 0.0
    y = (x * keep * scale).astype(x.dtype)
    return (y, keep) if want_mask else y


@onnx_op("Dropout", since=6)
def dropout_6(ctx, data, *, is_test, ratio):
    """Inference dropout: the input unchanged and, when asked, an all-True mask."""
    return _dropout(data, ratio, False, None, ctx.n_outputs > 1 and ctx.outputs_used[1])


@onnx_op("Dropout", since=7)
@onnx_op("Dropout", since=10)
def dropout_7(ctx, data, *, ratio):
    """Inference dropout: the input unchanged and, when asked, an all-True (bool) mask."""
    return _dropout(data, ratio, False, None, ctx.n_outputs > 1 and ctx.outputs_used[1])


@onnx_op("Dropout", since=12)
def dropout_12(ctx, data, ratio=None, training_mode=None, *, seed=None):
    """Dropout with ``ratio`` and ``training_mode`` inputs.

    Not training (the default) or ratio 0: identity and an all-True mask. Training: elements
    are kept where a uniform draw from ``numpy.random.RandomState(seed)`` is >= ratio, and
    scaled by 1 / (1 - ratio).
    """
    r = 0.5 if ratio is None else float(_scalar(ctx, ratio, "ratio"))
    if not 0 <= r < 1 and not (r == 1):
        raise ctx.error(f"ratio {r} must be in [0, 1)")
    training = False if training_mode is None else bool(_scalar(ctx, training_mode, "mode"))
    want = ctx.n_outputs > 1 and ctx.outputs_used[1]
    return _dropout(data, r, training, seed, want)


# -- DepthToSpace / SpaceToDepth -----------------------------------------------------------------
def _check4(ctx: NodeContext, x: np.ndarray) -> None:
    if x.ndim != 4:
        raise ctx.error(f"input has rank {x.ndim}; expected 4 (N, C, H, W)")


@onnx_op("DepthToSpace", since=1)
@onnx_op("DepthToSpace", since=11)
def depth_to_space_11(ctx, input, *, mode="DCR", blocksize=None):
    """Move channel blocks into ``blocksize x blocksize`` spatial tiles (DCR or CRD order)."""
    x = np.asarray(input)
    _check4(ctx, x)
    bs = int(blocksize)
    b, c, h, w = x.shape
    if bs < 1 or c % (bs * bs):
        raise ctx.error(f"channels ({c}) must be a multiple of blocksize^2 ({bs}^2)")
    cc = c // (bs * bs)
    if mode == "DCR":
        t = x.reshape(b, bs, bs, cc, h, w).transpose(0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        t = x.reshape(b, cc, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        raise ctx.unsupported(f"mode {mode!r}; use DCR or CRD")
    return np.ascontiguousarray(t).reshape(b, cc, h * bs, w * bs)


def _space_to_depth(ctx: NodeContext, input: np.ndarray, blocksize: int, mode: str):
    x = np.asarray(input)
    _check4(ctx, x)
    bs = int(blocksize)
    b, c, h, w = x.shape
    if bs < 1 or h % bs or w % bs:
        raise ctx.error(f"height {h} and width {w} must be multiples of blocksize {bs}")
    t = x.reshape(b, c, h // bs, bs, w // bs, bs)
    if mode == "DCR":
        t = t.transpose(0, 3, 5, 1, 2, 4)
    elif mode == "CRD":
        t = t.transpose(0, 1, 3, 5, 2, 4)
    else:
        raise ctx.unsupported(f"mode {mode!r}; use DCR or CRD")
    return np.ascontiguousarray(t).reshape(b, c * bs * bs, h // bs, w // bs)


@onnx_op("SpaceToDepth", since=1)
def space_to_depth_1(ctx, input, *, blocksize=None):
    """Move ``blocksize x blocksize`` spatial tiles into channels (blocks outermost)."""
    return _space_to_depth(ctx, input, blocksize, "DCR")


@onnx_op("SpaceToDepth", since=28)
def space_to_depth_28(ctx, input, *, mode, blocksize=None):
    """SpaceToDepth with ``mode``: DCR (blocks outermost) or CRD (channels outermost)."""
    return _space_to_depth(ctx, input, blocksize, mode)


# -- lowerings (see onnxjit.lowering) -----------------------------------------------------------
# Element types the kernels take as they are; any other type of a kernel's width (float16,
# bfloat16, the float8 kinds) goes as its unsigned integer bits.
_NUMBA_TYPES = frozenset(
    np.dtype(t)
    for t in (
        np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
        np.uint64, np.float32, np.float64,
    )
)  # fmt: skip


def _kernel_view(dtype: np.dtype) -> np.dtype | None:
    """The type a kernel sees elements of ``dtype`` as: None (as they are) or their bits."""
    return None if dtype in _NUMBA_TYPES else np.dtype(_UINT[dtype.itemsize])


def _tensor_input(lc: LowerContext, i: int) -> bool:
    s = lc.inputs[i] if i < len(lc.inputs) else None
    return s is not None and s.kind == TENSOR


def _attr_or_input(lc: LowerContext, name: str, i: int) -> Any:
    """The attribute ``name`` where the implementation has one, else constant input ``i``."""
    return lc.attrs[name] if name in lc.attrs else lc.const(i)


@lowers(
    reshape_1, reshape_5, reshape_14, flatten_1, squeeze_1, squeeze_13, unsqueeze_1, unsqueeze_13
)
def _lower_view(lc: LowerContext) -> Bound | None:
    """Reshape, Flatten, Squeeze and Unsqueeze with a constant shape or constant axes (or none):
    a reshape of the input to the output shape worked out once, a view where the input's
    layout allows it. A shape or axes fed at run time leaves the node to its implementation
    (a guard then checks its output)."""
    if not _tensor_input(lc, 0) or not lc.is_const(1):
        return None
    x = lc.inputs[0]
    op = lc.node.op_type
    try:
        if op == "Reshape":
            shape = _attr_or_input(lc, "shape", 1)
            shape = _ints(shape if shape is not None else [])
            out = _reshape_dims(lc, x.shape, shape, int(lc.attrs.get("allowzero", 0) or 0))
        elif op == "Flatten":
            out = _flatten_dims(lc, x.shape, lc.attrs["axis"])
        elif op == "Squeeze":
            out = _squeeze_dims(lc, x.shape, _attr_or_input(lc, "axes", 1))
        else:
            out = _unsqueeze_dims(lc, x.shape, _attr_or_input(lc, "axes", 1))
    except Exception:  # the implementation raises its error at the planning run
        return None
    return view(np.ndarray.reshape, In(0), out, out=tensor(x.dtype, out), name="tensor.reshape")


@portable
def _same(x: np.ndarray) -> np.ndarray:
    """The value itself (Identity, inference Dropout)."""
    return x


def _any_reshape(x: Any, shape: tuple[int, ...]) -> Any:
    """``x.reshape(shape)`` for any backend's array (``np.ndarray.reshape`` takes numpy's
    only, and stays the CPU's call: it costs no Python frame)."""
    return x.reshape(shape)


portable(np.ndarray.reshape, _any_reshape)


def _not_training(ratio: Any, training: Any) -> bool:
    """Dropout-12's ``ratio`` and ``training_mode`` are valid and do not ask for training."""
    for v in (ratio, training):
        if v is not None and np.size(v) != 1:
            return False
    if ratio is not None and not 0 <= float(np.asarray(ratio).reshape(-1)[0]) <= 1:
        return False
    return training is None or not bool(np.asarray(training).reshape(-1)[0])


@lowers(identity, dropout_6, dropout_7, dropout_12)
def _lower_identity(lc: LowerContext) -> Bound | None:
    """Identity of a tensor, and Dropout not training (a constant or absent ``training_mode``)
    without its mask: the input itself."""
    if not _tensor_input(lc, 0) or any(lc.outputs_used[1:]):
        return None
    dropout12 = lc.node.op_type == "Dropout" and len(lc.inputs) > 1
    if dropout12 and not (
        lc.is_const(1) and lc.is_const(2) and _not_training(lc.const(1), lc.const(2))
    ):
        return None
    x = lc.inputs[0]
    return view(_same, In(0), out=tensor(x.dtype, x.shape), name="tensor.identity")


# Transpositions that move the input's last axis run the tiled kernel (numpy's strided copy
# reads or writes a cache line per element: a K^T of (1, 128, 4, 64) by (0, 2, 3, 1) took 29 us
# against onnxruntime's 10), and so does the implementation from this many elements on (below
# it, a plain numpy copy of a transposed view; the lowering calls the kernel at every size:
# through its entry point, its call costs less than numpy's copy).
_TILED_TRANSPOSE_MIN = 4096


def _transpose_tiles(shape: tuple[int, ...], p: tuple[int, ...]) -> tuple | None:
    """``(dims, xs, ys)`` for :func:`onnxjit.kernels.cpu.tensor.transpose_tiles` transposing a
    C-contiguous array of ``shape`` by ``p``, or None where the kernel does not suit it.

    Axes of size 1 are dropped; what remains must be at most four axes with the input's last
    one moving (a perm that keeps it is a copy of contiguous rows, which numpy does well)."""
    keep = [a for a in p if shape[a] > 1]  # output order of the non-trivial input axes
    if len(keep) > 4 or len(keep) < 2:
        return None
    last = max(keep)  # the input's innermost non-trivial axis: stride 1
    if keep[-1] == last:
        return None
    # element strides of a C-contiguous input
    in_strides = [math.prod(shape[a + 1 :]) for a in range(len(shape))]
    out_shape = [shape[a] for a in keep]
    out_strides = [math.prod(out_shape[i + 1 :]) for i in range(len(keep))]
    j = keep.index(last)
    others = [i for i in range(len(keep) - 1) if i != j]
    others = [None] * (2 - len(others)) + others  # pad to (a, b)

    def pick(i: int | None, sizes: list, fill: int) -> int:
        return fill if i is None else sizes[i]

    dims = [pick(i, out_shape, 1) for i in others] + [out_shape[j], out_shape[-1]]
    xs = [pick(i, [in_strides[a] for a in keep], 0) for i in others]
    xs += [1, in_strides[keep[-1]]]
    ys = [pick(i, out_strides, 0) for i in others] + [out_strides[j]]
    return np.array(dims, np.int64), np.array(xs, np.int64), np.array(ys, np.int64)


def _transposed(x: np.ndarray, p: tuple[int, ...]) -> np.ndarray:
    return x.transpose(p).copy()


def _transpose_into(x: np.ndarray, p: tuple[int, ...], y: np.ndarray) -> None:
    np.copyto(y, x.transpose(p))


@lowers(transpose_1)
def _lower_transpose(lc: LowerContext) -> Bound | None:
    """Transpose: a reshape where only size-1 axes move; the tiled kernel writing into the
    plan's buffer where the input's last axis moves; else numpy's copy of the transposed view
    (into the plan's buffer from ``_TILED_TRANSPOSE_MIN`` elements on)."""
    if not _tensor_input(lc, 0):
        return None
    x = lc.inputs[0]
    perm = lc.attrs.get("perm")
    p = tuple(range(x.ndim))[::-1] if perm is None else tuple(int(v) for v in perm)
    if sorted(p) != list(range(x.ndim)):
        return None
    shape = tuple(x.shape[a] for a in p)
    out = tensor(x.dtype, shape)
    keep = [a for a in p if x.shape[a] > 1]
    if keep == sorted(keep):  # the same elements in the same order
        return view(np.ndarray.reshape, In(0), shape, out=out, name="tensor.reshape")
    tiles = None
    if x.dtype.itemsize in _UINT and not x.dtype.hasobject:
        tiles = _transpose_tiles(x.shape, p)
    if tiles is not None:
        as_ = _kernel_view(x.dtype)
        flat = np.empty(1, as_ or x.dtype)
        fn = lc.backend.launcher("tensor", "transpose_tiles", x.size, (flat, flat, *tiles))
        return writes(
            fn, In(0, flat=True, view=as_), Out(0, flat=True, view=as_), *tiles,
            outs=[out], name="tensor.transpose_tiles",
        )  # fmt: skip
    if x.size < _TILED_TRANSPOSE_MIN:
        return returns(_transposed, In(0), p, outs=[out], name="tensor.transpose")
    return writes(_transpose_into, In(0), p, Out(0), outs=[out], name="tensor.transpose")


# -- device backends: data movement as strided copies ------------------------------------------
# On a device backend (``lc.backend.name != "cpu"``) Slice, Split, Concat, Expand and Pad bind
# the backend's ``tensor.copy_strided`` (and ``fill_outside`` for Pad's border) over unsigned
# views of the element bits, the geometry worked out once as small int64 arrays (which stay on
# the host: the launchers read them there). The CPU lowerings keep their numpy calls, which
# the CPU twins do not beat. Several copies of one node go through a portable helper given the
# kernel, so that the node is still one step on the device.


def _copy_view(dtype: np.dtype) -> np.dtype | None:
    """The unsigned view a copy kernel takes elements of ``dtype`` as (None: as they are),
    so that one compiled copy serves every type of a width."""
    u = np.dtype(_UINT[dtype.itemsize])
    return None if dtype == u else u


def _movable(dtype: np.dtype) -> bool:
    """Whether a copy kernel moves elements of ``dtype`` (1, 2, 4 or 8 bytes, no objects)."""
    return not dtype.hasobject and dtype.itemsize in _UINT


def _c_strides(shape: Sequence[int]) -> list[int]:
    """Element strides of a C-contiguous array of ``shape``."""
    return [math.prod(shape[d + 1 :]) for d in range(len(shape))]


def _copy_geometry(dims: Sequence[int], xs: Sequence[int], ys: Sequence[int]) -> tuple:
    """``(dims, xs, ys)`` of a strided copy as int64 arrays, with axes of size 1 dropped and
    neighbours that both sides step through as one merged (fewer axes: fewer divisions per
    element on a device, one compiled kernel per rank)."""
    if any(int(n) == 0 for n in dims):
        merged = [(0, 0, 0)]
    else:
        merged = []
        for n, sx, sy in zip(dims, xs, ys):
            n, sx, sy = int(n), int(sx), int(sy)
            if n == 1:
                continue
            if merged and merged[-1][1] == n * sx and merged[-1][2] == n * sy:
                merged[-1] = (merged[-1][0] * n, sx, sy)
            else:
                merged.append((n, sx, sy))
    cols = list(zip(*merged)) if merged else [(), (), ()]
    return tuple(np.array(c, np.int64) for c in cols)


def _slice_geometry(shape: Sequence[int], index: tuple[slice, ...]) -> tuple:
    """``(dims, xs, ys, xo)`` copying ``x[index]`` (x C-contiguous of ``shape``) into a
    C-contiguous array."""
    strides = _c_strides(shape)
    dims, xs, xo = [], [], 0
    for d, (n, sl) in enumerate(zip(shape, index)):
        start, stop, step = sl.indices(n)
        dims.append(len(range(start, stop, step)))
        xs.append(step * strides[d])
        xo += start * strides[d] if dims[-1] else 0
    return (*_copy_geometry(dims, xs, _c_strides(dims)), xo)


@portable
def _copy_parts(copy: Any, parts: tuple, x: Any, *ys: Any) -> None:
    """``copy`` (a backend's ``tensor.copy_strided``) from ``x`` into each of ``ys``:
    ``parts[j]`` is ``(dims, xs, ys, xo)`` of ``ys[j]`` (Split)."""
    for (dims, sx, sy, xo), y in zip(parts, ys):
        copy(x, y, dims, sx, sy, xo, 0)


@portable
def _concat_parts(copy: Any, parts: tuple, *xs: Any) -> None:
    """``copy`` from each of ``xs[:-1]`` into ``xs[-1]``: ``parts[i]`` is
    ``(dims, xs, ys, yo)`` of input i (Concat)."""
    y = xs[-1]
    for (dims, sx, sy, yo), x in zip(parts, xs):
        copy(x, y, dims, sx, sy, 0, yo)


@portable
def _pad_into(fill: Any, copy: Any, border: tuple, kept: tuple, x: Any, y: Any) -> None:
    """Pad: ``fill`` (``tensor.fill_outside``) writes ``border = (dims, lo, hi, value)``,
    ``copy`` the kept part, ``kept = (dims, xs, ys, xo, yo)``."""
    fill(y, *border)
    copy(x, y, *kept)


@portable
def _gather_call(wrap: Any, kernel: Any, n: int, where: tuple, x3: Any, idx: Any, y3: Any):
    """Gather on a device backend: the indices (int32 or int64, as they are: the device's
    ``wrap_indices`` writes int64) wrapped and checked, then the rows gathered.
    ``where = (lc, axis)`` names the node and axis in an error."""
    wrapped, bad = wrap(idx.reshape(-1), n)
    if bad >= 0:
        host = idx if isinstance(idx, np.ndarray) else idx.copy_to_host()
        raise _bad_index(where[0], host, int(bad), n, f"axis {where[1]}")
    kernel(x3, wrapped, y3)


def _concat_call(n: int, axis: int):
    """``call(x0, ..., x(n-1), y)`` concatenating into ``y`` along ``axis``."""
    concatenate = np.concatenate
    if n == 2:

        def concat2(x0: np.ndarray, x1: np.ndarray, y: np.ndarray) -> None:
            concatenate((x0, x1), axis, y)

        return concat2

    def concat(*xs: np.ndarray) -> None:
        concatenate(xs[:-1], axis, xs[-1])

    return concat


@lowers(concat_4)
def _lower_concat(lc: LowerContext) -> Bound | None:
    """Concat of tensors of one element type: one numpy concatenate into the plan's buffer
    (a KV cache grown by a step: the past and the new rows copied once, no allocation)."""
    specs = lc.inputs
    if not specs or not all(_tensor_input(lc, i) for i in range(len(specs))):
        return None
    first = specs[0]
    dtype, r = first.dtype, first.ndim
    if r == 0 or dtype.hasobject or any(s.dtype != dtype for s in specs):
        return None
    a = lc.attrs.get("axis")
    a = 1 if a is None else int(a)
    if not -r <= a < r:
        return None
    a += r if a < 0 else 0
    for s in specs:
        if s.ndim != r or any(s.shape[d] != first.shape[d] for d in range(r) if d != a):
            return None
    shape = list(first.shape)
    shape[a] = sum(s.shape[a] for s in specs)
    outs = [tensor(dtype, shape)]
    if lc.backend.name != "cpu":
        return _device_concat(lc, a, shape, outs)
    if len(specs) == 1:
        return writes(np.copyto, Out(0), In(0), outs=outs, name="tensor.concat")
    args = [In(i) for i in range(len(specs))]
    return writes(_concat_call(len(specs), a), *args, Out(0), outs=outs, name="tensor.concat")


def _device_concat(lc: LowerContext, a: int, shape: list[int], outs: list) -> Bound | None:
    """Concat on a device backend: each input a 2-D copy (outer rows of its axis-and-inner
    block) into its columns of the output, one launch per input."""
    dtype = outs[0].dtype
    if not _movable(dtype):
        return None
    outer, inner = math.prod(shape[:a]), math.prod(shape[a + 1 :])
    width = shape[a] * inner
    parts, at = [], 0
    for sp in lc.inputs:
        cols = sp.shape[a] * inner
        parts.append((*_copy_geometry((outer, cols), (cols, 1), (width, 1)), at))
        at += cols
    u = _copy_view(dtype)
    args = [In(i, flat=True, view=u) for i in range(len(lc.inputs))]
    return writes(
        _concat_parts, lc.kernel("tensor", "copy_strided"), tuple(parts), *args,
        Out(0, flat=True, view=u), outs=outs, name="tensor.concat",
    )  # fmt: skip


@lowers(split_1, split_2, split_13, split_18)
def _lower_split(lc: LowerContext) -> Bound | None:
    """Split with constant sizes (or none): the parts copied into the plan's buffers, the
    regions worked out once (see :func:`_parts_into`)."""
    if not _tensor_input(lc, 0) or not lc.is_const(1):
        return None
    x = lc.inputs[0]
    split = lc.attrs.get("split")  # Split-1 and -2: the attribute (-1: else the input)
    if split is None:
        split = lc.const(1)
    axis = lc.attrs.get("axis")
    try:
        a, sizes = _split_sizes(
            lc, x.shape, len(lc.node.outputs), split, 0 if axis is None else axis,
            lc.attrs.get("num_outputs"),
        )  # fmt: skip
    except Exception:  # the implementation raises its error at the planning run
        return None
    index = tuple(_split_index(x.ndim, a, sizes))
    outs = []
    for size in sizes:
        shape = list(x.shape)
        shape[a] = size
        outs.append(tensor(x.dtype, shape))
    if len(index) == 1:  # the whole input
        return view(_same, In(0), out=outs[0], name="tensor.identity")
    if lc.backend.name != "cpu":
        if not _movable(x.dtype):
            return None
        u = _copy_view(x.dtype)
        geometry = tuple(_slice_geometry(x.shape, sl) for sl in index)
        return writes(
            _copy_parts, lc.kernel("tensor", "copy_strided"), geometry, In(0, flat=True, view=u),
            *[Out(j, flat=True, view=u) for j in range(len(index))], outs=outs,
            name="tensor.split",
        )  # fmt: skip
    parts = [Out(j) for j in range(len(index))]
    return writes(_parts_into(index), In(0), *parts, outs=outs, name="tensor.split")


def _sliced_shape(shape: tuple[int, ...], index: tuple[slice, ...]) -> tuple[int, ...]:
    return tuple(len(range(*sl.indices(d))) for sl, d in zip(index, shape))


def _whole(shape: tuple[int, ...], index: tuple[slice, ...]) -> bool:
    """Whether ``x[index]`` is all of ``x`` in its order."""
    for d, sl in zip(shape, index):
        start, stop, step = sl.indices(d)
        if len(range(start, stop, step)) != d or (step != 1 and d > 1):
            return False
    return True


def _parts_into(index: tuple[tuple[slice, ...], ...]):
    """``call(x, *ys)`` copying ``x[index[j]]`` into ``ys[j]``.

    Split and Slice copy their parts rather than return views of the input: a view that is
    only part of its input's buffer is not what the executor's flat view of that buffer
    holds, nor where a consumer may write its output in place; the copies are what a
    consumer's kernel would otherwise make of a strided part."""

    def parts(x: np.ndarray, *ys: np.ndarray) -> None:
        for sl, y in zip(index, ys):
            y[...] = x[sl]

    return parts


@lowers(slice_1, slice_10)
def _lower_slice(lc: LowerContext) -> Bound | None:
    """Slice with constant starts, ends, axes and steps: the part copied into the plan's
    buffer (see :func:`_parts_into`), or the input itself where the slice takes all of it."""
    if not _tensor_input(lc, 0) or not all(lc.is_const(i) for i in range(1, 5)):
        return None
    x = lc.inputs[0]
    if "starts" in lc.attrs:  # Slice-1
        starts, ends, axes, steps = lc.attrs["starts"], lc.attrs["ends"], lc.attrs["axes"], None
    else:
        starts, ends, axes, steps = (lc.const(i) for i in range(1, 5))
    try:
        index = _slice_index(lc, x.shape, starts, ends, axes, steps)
    except Exception:  # the implementation raises its error at the planning run
        return None
    out = tensor(x.dtype, _sliced_shape(x.shape, index))
    if _whole(x.shape, index):
        return view(_same, In(0), out=out, name="tensor.identity")
    if lc.backend.name != "cpu":
        if not _movable(x.dtype):
            return None
        u = _copy_view(x.dtype)
        dims, xs, ys, xo = _slice_geometry(x.shape, index)
        return writes(
            lc.kernel("tensor", "copy_strided"), In(0, flat=True, view=u),
            Out(0, flat=True, view=u), dims, xs, ys, xo, 0, outs=[out], name="tensor.slice",
        )  # fmt: skip
    return writes(_parts_into((index,)), In(0), Out(0), outs=[out], name="tensor.slice")


def _within_caps(lc: LowerContext, shape: Sequence[int], dtype: np.dtype) -> bool:
    """Whether an output of ``shape`` stays under the per-tensor cap (else the implementation
    runs, and refuses it with its error)."""
    try:
        limits.check(lc.ctx, shape, dtype, run=False)
    except MemoryError:
        return False
    return True


@lowers(expand_8)
def _lower_expand(lc: LowerContext) -> Bound | None:
    """Expand to a constant shape: the input broadcast into the plan's buffer."""
    if not _tensor_input(lc, 0) or not lc.is_const(1):
        return None
    x = lc.inputs[0]
    try:
        shape = np.broadcast_shapes(x.shape, tuple(_ints(lc.const(1))))
    except (ValueError, TypeError):
        return None
    if not _within_caps(lc, shape, x.dtype):
        return None
    if lc.backend.name != "cpu":
        if not _movable(x.dtype):
            return None
        # x's axes aligned with the output's last ones; a broadcast axis steps by 0
        lead = len(shape) - x.ndim
        in_strides = _c_strides(x.shape)
        xs = [0] * lead + [0 if n == 1 else st for n, st in zip(x.shape, in_strides)]
        dims, xs, ys = _copy_geometry(shape, xs, _c_strides(shape))
        u = _copy_view(x.dtype)
        return writes(
            lc.kernel("tensor", "copy_strided"), In(0, flat=True, view=u),
            Out(0, flat=True, view=u), dims, xs, ys, 0, 0, outs=[tensor(x.dtype, shape)],
            name="tensor.expand",
        )  # fmt: skip
    return writes(np.copyto, Out(0), In(0), outs=[tensor(x.dtype, shape)], name="tensor.expand")


@lowers(pad_2, pad_11, pad_18)
def _lower_pad(lc: LowerContext) -> Bound | None:
    """Pad in constant mode with constant pads, value and axes: the plan's buffer filled with
    the value and the input's kept part copied in, the regions worked out once."""
    if not _tensor_input(lc, 0) or lc.attrs.get("mode") != "constant":
        return None
    if not all(lc.is_const(i) for i in range(1, 4)):
        return None
    x = lc.inputs[0]
    if x.dtype.hasobject:
        return None
    if "pads" in lc.attrs:  # Pad-2: attributes
        pads, value, axes = lc.attrs["pads"], lc.attrs["value"], None
    else:
        pads, value, axes = lc.const(1), lc.const(2), lc.const(3)
    try:
        begin, end, shape = _pad_layout(lc, x.shape, _ints(pads), axes)
        fill = np.full((), _pad_value(lc, value, x.dtype), dtype=x.dtype)[()]
    except Exception:  # the implementation raises its error at the planning run
        return None
    if not _within_caps(lc, shape, x.dtype):
        return None
    if lc.backend.name != "cpu":
        return _device_pad(lc, x, begin, end, shape, fill)
    dst, src = _pad_regions(x.shape, begin, end)

    def pad(x: np.ndarray, y: np.ndarray) -> None:
        y.fill(fill)
        y[dst] = x[src]

    return writes(pad, In(0), Out(0), outs=[tensor(x.dtype, shape)], name="tensor.pad")


def _device_pad(
    lc: LowerContext, x: Any, begin: list[int], end: list[int], shape: list[int], fill: Any
) -> Bound | None:
    """Pad in constant mode on a device backend: the border filled (``fill_outside``), then
    the kept part of the input copied in (``copy_strided``)."""
    if not _movable(x.dtype):
        return None
    r = x.ndim
    # the kept part: where it starts in the input and in the output, and its extent (a crop
    # wider than the input keeps nothing)
    x0 = [max(-begin[d], 0) for d in range(r)]
    y0 = [max(begin[d], 0) for d in range(r)]
    kept = [max(x.shape[d] - x0[d] - max(-end[d], 0), 0) for d in range(r)]
    xst, yst = _c_strides(x.shape), _c_strides(shape)
    dims, xs, ys = _copy_geometry(kept, xst, yst)
    xo = sum(a * st for a, st in zip(x0, xst)) if all(kept) else 0
    yo = sum(a * st for a, st in zip(y0, yst)) if all(kept) else 0
    u = np.dtype(_UINT[x.dtype.itemsize])
    value = np.asarray(fill, x.dtype).view(u)[()]
    border = (
        np.array(shape, np.int64), np.array(y0, np.int64),
        np.array([a + n for a, n in zip(y0, kept)], np.int64), value,
    )  # fmt: skip
    v = _copy_view(x.dtype)
    return writes(
        _pad_into, lc.kernel("tensor", "fill_outside"), lc.kernel("tensor", "copy_strided"),
        border, (dims, xs, ys, xo, yo), In(0, flat=True, view=v), Out(0, flat=True, view=v),
        outs=[tensor(x.dtype, shape)], name="tensor.pad",
    )  # fmt: skip


# A gather moves rows at copy speed: threads pay off only for outputs this many times larger
# than the backend's threshold for elementwise work (BERT's 128 x 256 embedding lookup: 12.7 us
# on two threads, 10.1 on one, onnxruntime 7.4).
_GATHER_PARALLEL_FACTOR = 8


@lowers(gather_1)
def _lower_gather(lc: LowerContext) -> Bound | None:
    """Gather of data of one shape and type by int32/int64 indices: the axis split, output
    shape and kernel fixed once (and the bits view of constant data, an embedding table, made
    once); the indices are checked every run."""
    if not (_tensor_input(lc, 0) and _tensor_input(lc, 1)):
        return None
    x, ind = lc.inputs[0], lc.inputs[1]
    if x.ndim == 0 or x.dtype.hasobject or x.dtype.itemsize not in _UINT:
        return None
    if ind.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        return None
    a = int(lc.attrs["axis"])
    if not -x.ndim <= a < x.ndim:
        return None
    a += x.ndim if a < 0 else 0
    n = x.shape[a]
    outer, inner = math.prod(x.shape[:a]), math.prod(x.shape[a + 1 :])
    count = ind.size
    shape = x.shape[:a] + ind.shape + x.shape[a + 1 :]
    as_ = _kernel_view(x.dtype)
    rows = np.empty((1, 1, 1), as_ or x.dtype)
    kernel = lc.backend.launcher(
        "tensor", "gather_axis", math.prod(shape), (rows, np.empty(1, np.int64), rows),
        threshold=_GATHER_PARALLEL_FACTOR * lc.backend.parallel_threshold,
    )  # fmt: skip
    wrap = lc.kernel("tensor", "wrap_indices")
    wide = ind.dtype == np.int64
    err = lc

    def gather(x3: np.ndarray, idx: np.ndarray, y3: np.ndarray) -> None:
        flat = idx.reshape(-1) if wide else idx.astype(np.int64).reshape(-1)
        wrapped, bad = wrap(flat, n)
        if bad >= 0:
            raise _bad_index(err, idx, bad, n, f"axis {a}")
        kernel(x3, wrapped, y3)

    fn: Any = gather
    lead: tuple = ()
    if lc.backend.name != "cpu":  # no astype of the indices: the device's wrap widens them
        fn, lead = _gather_call, (wrap, kernel, n, (lc, a))

    data = lc.const(0)
    if data is not None:  # a table: its (outer, n, inner) view made once
        x3: Any = np.ascontiguousarray(data).reshape(outer, n, inner)
        x3 = x3 if as_ is None else x3.view(as_)
    else:
        x3 = In(0, view=as_, shape=(outer, n, inner))
    y3 = Out(0, view=as_, shape=(outer, count, inner))
    return writes(fn, *lead, x3, In(1), y3, outs=[tensor(x.dtype, shape)], name="tensor.gather")


# -- GatherElements, ScatterElements, GatherND, ScatterND, OneHot -------------------------------
# Their lowerings share one design with Gather's: the views, geometry and kernel fixed once,
# and one module-level portable call that the CPU backend runs with its kernels (which return
# the first bad index position, an int) and the CUDA backend with its launchers (which return
# an IndexFlag: a device flag whose read synchronises the run's stream). On the device the flag
# is read every run, as Gather's, unless the indices are constants of the plan: those are
# checked once here (a bad one leaves the node to the implementation, which raises its error),
# and the call then never waits for the flag.
_INDEX_TYPES = (np.dtype(np.int32), np.dtype(np.int64))

# Element types a scatter reduction runs on as they are (the implementation reduces booleans as
# uint8 and float16/bfloat16 in float32, converting back once: those stay with it).
_REDUCIBLE = frozenset(
    np.dtype(t)
    for t in (
        np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
        np.float32, np.float64,
    )
)  # fmt: skip


def _index_error(where: tuple, idx: Any, bad: Any) -> Exception:
    """The implementation's error for the bad index at flat position ``bad`` of ``idx`` (the
    node's indices as fed, host or device). ``where = (lc, sizes, what)``: the size of the
    axis that position indexes is ``sizes[bad % len(sizes)]``."""
    lc, sizes, what = where
    host = idx if isinstance(idx, np.ndarray) else idx.copy_to_host()
    pos = int(bad)
    return _bad_index(lc, host, pos, int(sizes[pos % len(sizes)]), what)


def _indices_valid(value: Any, sizes: Sequence[int]) -> bool:
    """Whether constant indices ``value`` are all in range: its last axis cycles through the
    axes of ``sizes`` (one size: every entry indexes that axis)."""
    v = np.asarray(value).reshape(-1, len(sizes)) if len(sizes) else np.zeros((0, 0), np.int64)
    n = np.asarray(sizes, np.int64)
    return bool(((v >= -n) & (v < n)).all())


def _check_every_run(lc: LowerContext, i: int, sizes: Sequence[int]) -> bool | None:
    """Whether the bound call must read the kernel's bad-index result at every run: always on
    the CPU (an int, free), on a device unless input ``i`` is a constant checked here. None:
    constant indices out of range (the implementation raises its error)."""
    value = lc.const(i)
    if value is None:
        return True
    if not _indices_valid(value, sizes):
        return None
    return lc.backend.name == "cpu"


def _indices(idx: Any, shape: tuple[int, ...], widen: bool) -> Any:
    """``idx`` reshaped for a kernel; int32 widened on the CPU, whose kernels take int64 (the
    device kernels read int32 as it is: no extra pass, no allocation)."""
    i = idx.reshape(shape)
    return i.astype(np.int64) if widen else i


def _copy_whole(x: np.ndarray, y: np.ndarray, dims: Any, xs: Any, ys: Any, xo: int, yo: int):
    """``y[:] = x`` for flat host arrays, in ``tensor.copy_strided``'s signature (a scatter's
    copy of its data on the CPU: numpy's memcpy)."""
    np.copyto(y, x)


@portable
def _gather_elements_call(
    kernel: Any, where: tuple, shape: tuple, widen: bool, check: bool, x3: Any, idx: Any, y3: Any
) -> None:
    """GatherElements: ``kernel`` (``tensor.gather_elements``) over the (outer, n, inner) views;
    a bad index raises the implementation's error where ``check``."""
    bad = kernel(x3, _indices(idx, shape, widen), y3)
    if check and bad >= 0:
        raise _index_error(where, idx, bad)


@portable
def _scatter_elements_call(
    copy: Any, scatter: Any, dims: Any, steps: Any, red: int, where: tuple, shape: tuple,
    widen: bool, check: bool, xf: Any, yf: Any, idx: Any, u3: Any, y3: Any,
) -> None:  # fmt: skip
    """ScatterElements: the data copied into the output (``copy``, ``tensor.copy_strided``'s
    signature, over the flat bits; None when the output is the data's own buffer), then
    ``scatter`` (``tensor.scatter_elements``) with reduction code ``red`` in place."""
    if copy is not None:
        copy(xf, yf, dims, steps, steps, 0, 0)
    bad = scatter(y3, _indices(idx, shape, widen), u3, red)
    if check and bad >= 0:
        raise _index_error(where, idx, bad)


@portable
def _gather_nd_call(
    kernel: Any, where: tuple, shape: tuple, dims: Any, widen: bool, check: bool,
    x3: Any, idx: Any, y3: Any,
) -> None:  # fmt: skip
    """GatherND: ``kernel`` (``tensor.gather_nd``) over the (B, M, S) views, ``dims`` the host
    sizes of the indexed axes."""
    bad = kernel(x3, _indices(idx, shape, widen), dims, y3)
    if check and bad >= 0:
        raise _index_error(where, idx, bad)


@portable
def _scatter_nd_call(
    copy: Any, scatter: Any, dims: Any, steps: Any, red: int, where: tuple, shape: tuple,
    axes: Any, widen: bool, check: bool, xf: Any, yf: Any, idx: Any, u2: Any, y2: Any,
) -> None:  # fmt: skip
    """ScatterND: the data copied as for :func:`_scatter_elements_call`, then ``scatter``
    (``tensor.scatter_nd``, ``axes`` the host sizes of the indexed axes) in place."""
    if copy is not None:
        copy(xf, yf, dims, steps, steps, 0, 0)
    bad = scatter(y2, _indices(idx, shape, widen), axes, u2, red)
    if check and bad >= 0:
        raise _index_error(where, idx, bad)


def _axis_op(lc: LowerContext, data: int) -> tuple | None:
    """``(x, ind, a, outer, n, m, inner)`` of an axis op (GatherElements, ScatterElements)
    whose int32/int64 indices span data outside the axis; None for the other cases (indices
    reaching a part of data: the implementation takes them)."""
    if not (_tensor_input(lc, data) and _tensor_input(lc, data + 1)):
        return None
    x, ind = lc.inputs[data], lc.inputs[data + 1]
    if x.ndim == 0 or ind.ndim != x.ndim or not _movable(x.dtype):
        return None
    if ind.dtype not in _INDEX_TYPES:
        return None
    a = int(lc.attrs.get("axis", 0) or 0)
    if not -x.ndim <= a < x.ndim:
        return None
    a += x.ndim if a < 0 else 0
    if any(ind.shape[d] != x.shape[d] for d in range(x.ndim) if d != a):
        return None
    outer, inner = math.prod(x.shape[:a]), math.prod(x.shape[a + 1 :])
    return x, ind, a, outer, x.shape[a], ind.shape[a], inner


@lowers(gather_elements_11)
def _lower_gather_elements(lc: LowerContext) -> Bound | None:
    """GatherElements of data by int32/int64 indices of data's shape outside the axis: the
    (outer, n, inner) views and the kernel fixed once, the indices checked every run (on a
    device: once, when they are constants)."""
    found = _axis_op(lc, 0)
    if found is None:
        return None
    x, ind, a, outer, n, m, inner = found
    check = _check_every_run(lc, 1, (n,))
    if check is None:
        return None
    u = _copy_view(x.dtype)
    widen = lc.backend.name == "cpu" and ind.dtype != np.int64
    return writes(
        _gather_elements_call, lc.kernel("tensor", "gather_elements"), (lc, (n,), f"axis {a}"),
        (outer, m, inner), widen, check, In(0, view=u, shape=(outer, n, inner)), In(1),
        Out(0, view=u, shape=(outer, m, inner)), outs=[tensor(x.dtype, ind.shape)],
        name="tensor.gather_elements",
    )  # fmt: skip


def _scatter_copy(lc: LowerContext, size: int) -> tuple:
    """``(copy, dims, steps)``: the scatter's copy of its data into the output (flat, ``size``
    elements) on this backend, its geometry as small host arrays."""
    if lc.backend.name == "cpu":
        copy = _copy_whole
    else:
        copy = lc.kernel("tensor", "copy_strided")
    return copy, np.array([size], np.int64), np.array([1], np.int64)


def _scatter_bound(lc: LowerContext, fn: Any, copy: Any, lead: tuple, tail: tuple,
                   x: Any, name: str) -> Bound:  # fmt: skip
    """``writes(fn, copy, *lead, *tail)`` for a scatter, whose output may take the data's
    buffer where the data dies at the node (then no copy)."""
    outs = [tensor(x.dtype, x.shape)]

    def with_inplace(i: int) -> Bound | None:
        if i != 0:
            return None
        return writes(fn, None, *lead, *tail, outs=outs, name=name + ".inplace")

    return writes(fn, copy, *lead, *tail, outs=outs, name=name, inplace=(0,),
                  with_inplace=with_inplace)  # fmt: skip


def _scatter_reduction(lc: LowerContext, x: Any, upd: Any) -> tuple | None:
    """``(code, view)``: the reduction's kernel code and the view the scatter takes data and
    updates as (their bits for a plain write), or None where the lowering leaves it."""
    if upd is None or upd.kind != TENSOR or upd.dtype != x.dtype:
        return None
    reduction = lc.attrs.get("reduction", "none") or "none"
    if reduction not in _REDUCTIONS:
        return None
    if reduction != "none" and x.dtype not in _REDUCIBLE:
        return None
    code = int(lc.kernel("tensor", f"RED_{reduction.upper()}"))
    return code, _copy_view(x.dtype) if reduction == "none" else None


@lowers(scatter_elements_11, scatter_elements_16)
def _lower_scatter_elements(lc: LowerContext) -> Bound | None:
    """Scatter and ScatterElements (reduction none, add, mul, max, min) with int32/int64
    indices of data's shape outside the axis: the data copied into the output (or the output
    taking its buffer), then the scatter kernel in place; indices checked as GatherElements'."""
    found = _axis_op(lc, 0)
    if found is None or not _tensor_input(lc, 2):
        return None
    x, ind, a, outer, n, m, inner = found
    upd = lc.inputs[2]
    red = _scatter_reduction(lc, x, upd)
    if red is None or upd.shape != ind.shape:
        return None
    code, v = red
    check = _check_every_run(lc, 1, (n,))
    if check is None:
        return None
    copy, dims, steps = _scatter_copy(lc, x.size)
    u = _copy_view(x.dtype)
    widen = lc.backend.name == "cpu" and ind.dtype != np.int64
    lead = (
        lc.kernel("tensor", "scatter_elements"), dims, steps, code, (lc, (n,), f"axis {a}"),
        (outer, m, inner), widen, check,
    )  # fmt: skip
    tail = (
        In(0, flat=True, view=u), Out(0, flat=True, view=u), In(1),
        In(2, view=v, shape=(outer, m, inner)), Out(0, view=v, shape=(outer, n, inner)),
    )  # fmt: skip
    return _scatter_bound(lc, _scatter_elements_call, copy, lead, tail, x, "tensor.scatter")


def _nd_geometry(x: Any, ind: Any, b: int) -> tuple | None:
    """``(k, nb, m, s, nn)`` of an ND op (batch axes ``b``), or None where the shapes do not
    fit (the implementation raises its error)."""
    if ind.ndim < 1:
        return None
    k = ind.shape[-1]
    if b < 0 or b >= min(x.ndim, ind.ndim) or b + k > x.ndim or x.shape[:b] != ind.shape[:b]:
        return None
    nb, m = math.prod(x.shape[:b]), math.prod(x.shape[b : b + k])
    return k, nb, m, math.prod(x.shape[b + k :]), math.prod(ind.shape[b:-1])


@lowers(gather_nd_11, gather_nd_12)
def _lower_gather_nd(lc: LowerContext) -> Bound | None:
    """GatherND (with batch axes) by int32/int64 indices: the (B, M, S) views, the indexed
    axes' sizes and the kernel fixed once; indices checked as GatherElements'."""
    if not (_tensor_input(lc, 0) and _tensor_input(lc, 1)):
        return None
    x, ind = lc.inputs[0], lc.inputs[1]
    if not _movable(x.dtype) or ind.dtype not in _INDEX_TYPES:
        return None
    b = int(lc.attrs.get("batch_dims", 0) or 0)
    geo = _nd_geometry(x, ind, b)
    if geo is None:
        return None
    k, nb, m, s, nn = geo
    sizes = x.shape[b : b + k]
    check = _check_every_run(lc, 1, sizes)
    if check is None:
        return None
    u = _copy_view(x.dtype)
    widen = lc.backend.name == "cpu" and ind.dtype != np.int64
    shape = ind.shape[:-1] + x.shape[b + k :]
    return writes(
        _gather_nd_call, lc.kernel("tensor", "gather_nd"), (lc, sizes or (1,), "an indexed axis"),
        (nb, nn, k), np.array(sizes, np.int64), widen, check, In(0, view=u, shape=(nb, m, s)),
        In(1), Out(0, view=u, shape=(nb, nn, s)), outs=[tensor(x.dtype, shape)],
        name="tensor.gather_nd",
    )  # fmt: skip


@lowers(scatter_nd_11, scatter_nd_16)
def _lower_scatter_nd(lc: LowerContext) -> Bound | None:
    """ScatterND (reduction none, add, mul, max, min) with int32/int64 indices: the data
    copied into the output (or the output taking its buffer), then the scatter kernel in
    place over the (M, S) view; indices checked as GatherElements'."""
    if not all(_tensor_input(lc, i) for i in range(3)):
        return None
    x, ind, upd = lc.inputs[0], lc.inputs[1], lc.inputs[2]
    if not _movable(x.dtype) or ind.dtype not in _INDEX_TYPES:
        return None
    geo = _nd_geometry(x, ind, 0)
    red = _scatter_reduction(lc, x, upd)
    if geo is None or red is None:
        return None
    k, _, m, s, nn = geo
    if upd.shape != ind.shape[:-1] + x.shape[k:]:
        return None
    code, v = red
    sizes = x.shape[:k]
    check = _check_every_run(lc, 1, sizes)
    if check is None:
        return None
    copy, dims, steps = _scatter_copy(lc, x.size)
    u = _copy_view(x.dtype)
    widen = lc.backend.name == "cpu" and ind.dtype != np.int64
    where = (lc, sizes or (1,), "an indexed axis")
    lead = (
        lc.kernel("tensor", "scatter_nd"), dims, steps, code, where, (nn, k),
        np.array(sizes, np.int64), widen, check,
    )  # fmt: skip
    tail = (
        In(0, flat=True, view=u), Out(0, flat=True, view=u), In(1),
        In(2, view=v, shape=(nn, s)), Out(0, view=v, shape=(m, s)),
    )  # fmt: skip
    return _scatter_bound(lc, _scatter_nd_call, copy, lead, tail, x, "tensor.scatter_nd")


def _one_hot_wide(kernel: Any):
    """OneHot on the CPU with int32 indices: ``kernel`` takes int64 ones."""

    def one_hot(idx: np.ndarray, depth: int, off: Any, on: Any, out: np.ndarray) -> None:
        kernel(idx.astype(np.int64), depth, off, on, out)

    return one_hot


@lowers(one_hot_9)
def _lower_one_hot(lc: LowerContext) -> Bound | None:
    """OneHot of int32/int64 indices with a constant depth and constant values: the kernel
    writing the plan's buffer, the off/on values' bits worked out once (an index outside
    [-depth, depth) leaves its column off: nothing to check)."""
    if not _tensor_input(lc, 0) or not (lc.is_const(1) and lc.is_const(2)):
        return None
    ind = lc.inputs[0]
    depth, values = lc.const(1), lc.const(2)
    if depth is None or values is None or ind.dtype not in _INDEX_TYPES:
        return None
    vals = np.ascontiguousarray(values).reshape(-1)
    if np.size(depth) != 1 or vals.size != 2 or not _movable(vals.dtype):
        return None
    d = int(np.asarray(depth).reshape(-1)[0])
    r = ind.ndim + 1
    a = int(lc.attrs.get("axis", -1))
    if d < 1 or not -r <= a < r:
        return None
    a += r if a < 0 else 0
    shape = ind.shape[:a] + (d,) + ind.shape[a:]
    if not _within_caps(lc, shape, vals.dtype):
        return None
    outer, inner = math.prod(ind.shape[:a]), math.prod(ind.shape[a:])
    off, on = vals.view(_UINT[vals.dtype.itemsize])  # the values' bits, as the output's view
    u = _copy_view(vals.dtype)
    kernel = lc.kernel("tensor", "one_hot")
    if lc.backend.name == "cpu" and ind.dtype != np.int64:
        kernel = _one_hot_wide(kernel)
    return writes(
        kernel, In(0, shape=(outer, inner)), d, off, on, Out(0, view=u, shape=(outer, d, inner)),
        outs=[tensor(vals.dtype, shape)], name="tensor.one_hot",
    )  # fmt: skip
