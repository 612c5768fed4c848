"""Tensor operators: data movement, shape manipulation, constants and index-taking ops.

Pure views and single-pass numpy operations (reshape, transpose + copy, slicing, concatenate,
tile, pad through an index map) stay in numpy. Gathers and scatters run Numba kernels from
``onnxjit.kernels.cpu.tensor`` over a canonical ``(outer, axis, inner)`` view, with the element
data reinterpreted as unsigned integers of the same width, so one compiled kernel serves every
rank and every dtype of a given width. String tensors (numpy object arrays) take a numpy path.

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
from onnxjit.backends.cpu import pool, threads
from onnxjit.backends.cpu.pool import run_parallel
from onnxjit.buffers import Slot
from onnxjit.kernels import _jit
from onnxjit.kernels.cpu import tensor as K
from onnxjit.registry import MISS, NodeContext, fast_path, onnx_op, plain_array

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_REDUCTIONS = {
    "none": K.RED_NONE,
    "add": K.RED_ADD,
    "mul": K.RED_MUL,
    "max": K.RED_MAX,
    "min": K.RED_MIN,
}


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


def _big(n: int) -> bool:
    return n >= _jit.PARALLEL_THRESHOLD


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
def shape_15(data, *, end=None, start=0):
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
def eye_like_9(ctx, input, *, dtype=None, k=0):
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
def range_27(ctx, start, limit, delta, *, stash_type=1):
    """Range-11 with ``stash_type`` (only float32 accumulation is supported for 16-bit floats)."""
    if int(stash_type) != 1 and np.asarray(start).dtype.itemsize < 4:
        raise ctx.unsupported(f"stash_type={stash_type} is not supported; use 1 (float)")
    return range_11(ctx, start, limit, delta)


# -- Reshape family ----------------------------------------------------------------------------
def _reshape(ctx: NodeContext, data: np.ndarray, shape: Sequence[int], allowzero: int):
    data = np.asarray(data)
    new: list[int] = []
    infer = -1
    for i, s in enumerate(shape):
        if s == 0 and not allowzero:
            if i >= data.ndim:
                raise ctx.error(
                    f"shape[{i}] = 0 copies input dimension {i}, but the input has rank {data.ndim}"
                )
            new.append(data.shape[i])
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
        if known == 0 or data.size % known:
            raise ctx.error(
                f"cannot infer the -1 in {list(shape)}: {data.size} elements are not a "
                f"multiple of {known}"
            )
        new[infer] = data.size // known
    if math.prod(new) != data.size:
        raise ctx.error(
            f"cannot reshape {list(data.shape)} ({data.size} elements) to {new} "
            f"({math.prod(new)} elements)"
        )
    return data.reshape(new)


@onnx_op("Reshape", since=1)
def reshape_1(ctx, data, *, consumed_inputs=None, shape=None):
    """Reshape to the ``shape`` attribute (0 copies a dimension, -1 is inferred)."""
    return _reshape(ctx, data, _ints(shape if shape is not None else []), 0)


@onnx_op("Reshape", since=5)
def reshape_5(ctx, data, shape):
    """Reshape to the ``shape`` input (0 copies a dimension, -1 is inferred)."""
    return _reshape(ctx, data, _ints(shape), 0)


@onnx_op("Reshape", since=14)
def reshape_14(ctx, data, shape, *, allowzero=0):
    """Reshape-5 where ``allowzero=1`` makes 0 a real zero-size dimension."""
    return _reshape(ctx, data, _ints(shape), allowzero)


@onnx_op("Flatten", since=1)
def flatten_1(ctx, input, *, axis=1):
    """2-D ``(prod(shape[:axis]), prod(shape[axis:]))``; axis in [-r, r]."""
    x = np.asarray(input)
    r = x.ndim
    a = int(axis)
    if not -r <= a <= r:
        raise ctx.error(f"axis {a} is out of range for rank {r}; expected [{-r}, {r}]")
    if a < 0:
        a += r
    return x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))


def _squeeze(ctx: NodeContext, data: np.ndarray, axes: Any) -> np.ndarray:
    x = np.asarray(data)
    if axes is None or np.size(axes) == 0:
        return x.reshape([d for d in x.shape if d != 1])
    ax = sorted({_norm_axis(ctx, a, x.ndim) for a in _ints(axes)})
    for a in ax:
        if x.shape[a] != 1:
            raise ctx.error(f"axis {a} has size {x.shape[a]}; only size-1 axes can be squeezed")
    return x.reshape([d for i, d in enumerate(x.shape) if i not in ax])


@onnx_op("Squeeze", since=1)
def squeeze_1(ctx, data, *, axes=None):
    """Drop the listed size-1 axes (attribute), or every size-1 axis."""
    return _squeeze(ctx, data, axes)


@onnx_op("Squeeze", since=13)
def squeeze_13(ctx, data, axes=None):
    """Drop the listed size-1 axes (input), or every size-1 axis."""
    return _squeeze(ctx, data, axes)


def _unsqueeze(ctx: NodeContext, data: np.ndarray, axes: Any) -> np.ndarray:
    x = np.asarray(data)
    ax_list = _ints(axes)
    r = x.ndim + len(ax_list)
    ax = [_norm_axis(ctx, a, r) for a in ax_list]
    if len(set(ax)) != len(ax):
        raise ctx.error(f"axes {ax_list} name the same axis twice; list each axis once")
    dims = iter(x.shape)
    return x.reshape([1 if i in ax else next(dims) for i in range(r)])


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
    if x.flags.c_contiguous:
        # the fast path's tiled kernel where it applies, so that the first run compiles what
        # the later ones call
        tiles = _transpose_plan(x, tuple(int(v) for v in p))
        if tiles is not None:
            go, dims, xs, ys, width = tiles
            y = np.empty([x.shape[int(v)] for v in p], x.dtype)
            go(x.reshape(-1).view(width), y.reshape(-1).view(width), dims, xs, ys)
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
def _split(
    ctx: NodeContext, x: np.ndarray, split: Any, axis: int, num_outputs: int | None = None
) -> tuple[np.ndarray, ...]:
    x = np.asarray(x)
    a = _norm_axis(ctx, axis, x.ndim)
    dim = x.shape[a]
    n_out = ctx.n_outputs
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
    outs = []
    start = 0
    for s in sizes:
        index = [slice(None)] * x.ndim
        index[a] = slice(start, start + s)
        outs.append(x[tuple(index)])
        start += s
    return tuple(outs)


@onnx_op("Split", since=1)
def split_1(ctx, input, split_input=None, *, split=None, axis=None):
    """Split-1: sizes from the ``split`` attribute or the optional second input; axis 0."""
    sizes = split if split is not None else split_input
    return _split(ctx, input, sizes, 0 if axis is None else axis)


@onnx_op("Split", since=2)
def split_2(ctx, input, *, split=None, axis=0):
    """Split along ``axis`` into the ``split`` sizes (attribute) or equal parts."""
    return _split(ctx, input, split, axis)


@onnx_op("Split", since=13)
def split_13(ctx, input, split=None, *, axis=0):
    """Split along ``axis`` into the ``split`` sizes (input) or equal parts."""
    return _split(ctx, input, split, axis)


@onnx_op("Split", since=18)
def split_18(ctx, input, split=None, *, axis=0, num_outputs=None):
    """Split-13 plus ``num_outputs``: ceil-sized parts, the last one smaller."""
    return _split(ctx, input, split, axis, num_outputs)


# -- Slice -------------------------------------------------------------------------------------
def _slice(ctx: NodeContext, data: np.ndarray, starts, ends, axes, steps) -> np.ndarray:
    x = np.asarray(data)
    st, en = _ints(starts), _ints(ends)
    if len(st) != len(en):
        raise ctx.error(f"starts {st} and ends {en} have different lengths")
    ax = list(range(len(st))) if axes is None or np.size(axes) == 0 else _ints(axes)
    sp = [1] * len(st) if steps is None or np.size(steps) == 0 else _ints(steps)
    if len(ax) != len(st) or len(sp) != len(st):
        raise ctx.error(f"axes {ax} and steps {sp} must have one entry per start ({len(st)})")
    index: list[slice] = [slice(None)] * x.ndim
    seen = set()
    for s, e, a, step in zip(st, en, ax, sp):
        a = _norm_axis(ctx, a, x.ndim)
        if a in seen:
            raise ctx.error(f"axis {a} is sliced twice; list each axis once")
        seen.add(a)
        if step == 0:
            raise ctx.error(f"step for axis {a} is 0; steps must be non-zero")
        dim = x.shape[a]
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
    return x[tuple(index)]


@onnx_op("Slice", since=1)
def slice_1(ctx, data, *, axes=None, ends=None, starts=None):
    """Slice with ``starts``/``ends``/``axes`` attributes (step 1), clamped to the bounds."""
    return _slice(ctx, data, starts, ends, axes, None)


@onnx_op("Slice", since=10)
def slice_10(ctx, data, starts, ends, axes=None, steps=None):
    """Slice with inputs; negative starts/ends count from the back, steps may be negative."""
    return _slice(ctx, data, starts, ends, axes, steps)


# -- Pad ---------------------------------------------------------------------------------------
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
    ax = list(range(r)) if axes is None else [_norm_axis(ctx, a, r) for a in _ints(axes)]
    if len(pads) != 2 * len(ax):
        raise ctx.error(f"pads {list(pads)} must have 2 * {len(ax)} entries (begins, then ends)")
    begin = [0] * r
    end = [0] * r
    for i, a in enumerate(ax):
        begin[a] = pads[i]
        end[a] = pads[i + len(ax)]
    out_shape = [x.shape[d] + begin[d] + end[d] for d in range(r)]
    if any(s < 0 for s in out_shape):
        raise ctx.error(f"pads {list(pads)} remove more than the input shape {list(x.shape)}")
    limits.check(ctx, out_shape, x.dtype)
    if mode == "constant":
        cv = 0 if value is None else _scalar(ctx, value, "constant_value")
        if x.dtype.hasobject and value is None:
            cv = ""
        out = np.full(out_shape, cv, dtype=x.dtype)
        dst = tuple(
            slice(
                max(begin[d], 0), max(begin[d], 0) + x.shape[d] + min(begin[d], 0) + min(end[d], 0)
            )
            for d in range(r)
        )
        src = tuple(slice(max(-begin[d], 0), x.shape[d] - max(-end[d], 0)) for d in range(r))
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
def pad_1(ctx, data, *, value=0.0, mode="constant", paddings=None):
    """Pad-1: ``paddings`` attribute, ``value`` for constant mode."""
    return _pad(ctx, data, _ints(paddings), mode, np.asarray(value, dtype=np.asarray(data).dtype))


@onnx_op("Pad", since=2)
def pad_2(ctx, data, *, value=0.0, mode="constant", pads=None):
    """Pad with the ``pads`` attribute ([begins..., ends...]); negative pads crop."""
    return _pad(ctx, data, _ints(pads), mode, np.asarray(value, dtype=np.asarray(data).dtype))


@onnx_op("Pad", since=11)
def pad_11(ctx, data, pads, constant_value=None, *, mode="constant"):
    """Pad with ``pads`` and ``constant_value`` inputs; modes constant/reflect/edge."""
    return _pad(ctx, data, _ints(pads), mode, constant_value)


@onnx_op("Pad", since=18)
def pad_18(ctx, data, pads, constant_value=None, axes=None, *, mode="constant"):
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
    wrapped, bad = K.wrap_indices(flat, n)
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
        # the fast path's threshold: a first run that used another kernel would leave the
        # second run (the fast path's first) to compile
        if out.size >= _GATHER_PARALLEL_MIN:
            run_parallel(K.gather_axis_par, xb, wrapped, ob)
        else:
            K.gather_axis(xb, wrapped, ob)
    return out


@onnx_op("Gather", since=1)
def gather_1(ctx, data, indices, *, axis=0):
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
def gather_elements_11(ctx, data, indices, *, axis=0):
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
        _, bad = K.wrap_indices(idx3.reshape(-1), n)
        if bad >= 0:
            raise _bad_index(ctx, ind, bad, n, f"axis {a}")
        o3[...] = np.take_along_axis(x3, np.where(idx3 < 0, idx3 + n, idx3), axis=1)
        return out
    bad = K.gather_elements(xb, idx3, ob)
    if bad >= 0:
        raise _bad_index(ctx, ind, bad, n, f"axis {a}")
    return out


def _scatter_work(x: np.ndarray, updates: np.ndarray, red: int):
    """Arrays to scatter into/from and a function that turns the result back into x's dtype."""
    if red == K.RED_NONE:
        return x, updates, lambda r: r
    if x.dtype == np.bool_:
        return x.astype(np.uint8), updates.astype(np.uint8), lambda r: r != 0
    if x.dtype.name in ("float16", "bfloat16"):
        return x.astype(np.float32), updates.astype(np.float32), lambda r: r.astype(x.dtype)
    return x, updates, lambda r: r


def _reduction_code(ctx: NodeContext, reduction: str) -> int:
    if reduction not in _REDUCTIONS:
        raise ctx.unsupported(f"reduction {reduction!r}; use one of {sorted(_REDUCTIONS)}")
    return _REDUCTIONS[reduction]


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
    view = _elements_view(ctx, x, ind, a)
    work, wupd, finish = _scatter_work(x, upd, red)
    sub = np.array(work[view], copy=True, order="C")
    n = x.shape[a]
    outer, inner = math.prod(ind.shape[:a]), math.prod(ind.shape[a + 1 :])
    idx3 = _index_array(ind).reshape(outer, ind.shape[a], inner)
    s3 = sub.reshape(outer, n, inner)
    u3 = np.ascontiguousarray(wupd).reshape(idx3.shape)
    if red == K.RED_NONE:
        sb, ub = _bits(s3), _bits(u3)
    else:
        sb, ub = s3, u3
    if ind.size:
        if sb is None or ub is None or sb.shape[2] != s3.shape[2] or sb.dtype.hasobject:
            _, bad = K.wrap_indices(idx3.reshape(-1), n)
            if bad >= 0:
                raise _bad_index(ctx, ind, bad, n, f"axis {a}")
            if red != K.RED_NONE:
                raise ctx.unsupported(f"reduction {reduction!r} on {x.dtype} data")
            np.put_along_axis(s3, np.where(idx3 < 0, idx3 + n, idx3), u3, axis=1)
        else:
            bad = K.scatter_elements(sb, idx3, ub, red)
            if bad >= 0:
                raise _bad_index(ctx, ind, bad, n, f"axis {a}")
    out = np.array(work, copy=True)
    out[view] = sub
    return finish(out)


@onnx_op("Scatter", since=9)
@onnx_op("ScatterElements", since=11)
def scatter_elements_11(ctx, data, indices, updates, *, axis=0):
    """A copy of ``data`` with ``updates`` written at ``indices`` along ``axis`` (last wins)."""
    return _scatter_elements(ctx, data, indices, updates, axis, "none")


@onnx_op("ScatterElements", since=16)
def scatter_elements_16(ctx, data, indices, updates, *, reduction="none", axis=0):
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
def gather_nd_12(ctx, data, indices, *, batch_dims=0):
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
        bad = K.gather_nd(dummy_x, idx3, dims, np.empty((nb, nn, 0), np.uint8))
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
    bad = K.gather_nd(xb, idx3, dims, ob)
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
    work, wupd, finish = _scatter_work(x, upd, red)
    out = np.array(work, copy=True, order="C")
    o2 = out.reshape(m, s)
    u2 = np.ascontiguousarray(wupd).reshape(nn, s)
    idx2 = _index_array(ind).reshape(nn, k)
    if red == K.RED_NONE:
        ob, ub = _bits(o2), _bits(u2)
    else:
        ob, ub = o2, u2
    if ob is None or ub is None or ob.dtype.hasobject:
        if red != K.RED_NONE:
            raise ctx.unsupported(f"reduction {reduction!r} on {x.dtype} data")
        bad = K.scatter_nd(np.zeros((m, 0), np.uint8), idx2, dims, np.zeros((nn, 0), np.uint8), red)
        if bad >= 0:
            raise _bad_index(ctx, ind, bad, int(dims[bad % k]), "an indexed axis")
        wrapped = np.where(idx2 < 0, idx2 + dims, idx2)
        rows = np.ravel_multi_index(tuple(wrapped.T), tuple(dims)) if k else np.zeros(nn, int)
        for r in range(nn):
            o2[rows[r]] = u2[r]
    else:
        bad = K.scatter_nd(ob, idx2, dims, ub, red)
        if bad >= 0:
            raise _bad_index(ctx, ind, bad, int(dims[bad % k]), "an indexed axis")
    return finish(out)


@onnx_op("ScatterND", since=11)
def scatter_nd_11(ctx, data, indices, updates):
    """A copy of ``data`` with ``updates`` slices written at ``indices`` rows (last wins)."""
    return _scatter_nd(ctx, data, indices, updates, "none")


@onnx_op("ScatterND", since=16)
def scatter_nd_16(ctx, data, indices, updates, *, reduction="none"):
    """ScatterND with ``reduction`` none/add/mul (max/min from 18)."""
    return _scatter_nd(ctx, data, indices, updates, reduction)


# -- OneHot, NonZero, Trilu, EyeLike ------------------------------------------------------------
@onnx_op("OneHot", since=9)
def one_hot_9(ctx, indices, depth, values, *, axis=-1):
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
        K.one_hot(idx2, d, fb[0], fb[1], ob)
    return out


@onnx_op("NonZero", since=9)
def non_zero_9(x):
    """The indices of the non-zero elements, shape (rank, count), int64 (row-major order)."""
    a = np.asarray(x)
    if a.ndim == 0:
        return np.zeros((0, 1 if a.item() else 0), dtype=np.int64)
    return np.array(np.nonzero(a), dtype=np.int64).reshape(a.ndim, -1)


@onnx_op("Trilu", since=14)
def trilu_14(ctx, input, k=None, *, upper=1):
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
def dropout_6(ctx, data, *, is_test=0, ratio=0.5):
    """Inference dropout: the input unchanged and, when asked, an all-True mask."""
    return _dropout(data, ratio, False, None, ctx.n_outputs > 1 and ctx.outputs_used[1])


@onnx_op("Dropout", since=7)
@onnx_op("Dropout", since=10)
def dropout_7(ctx, data, *, ratio=0.5):
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
def space_to_depth_28(ctx, input, *, mode="DCR", blocksize=None):
    """SpaceToDepth with ``mode``: DCR (blocks outermost) or CRD (channels outermost)."""
    return _space_to_depth(ctx, input, blocksize, mode)


# -- fast paths (see registry.fast_path) -----------------------------------------------------
def _same_args(rest: tuple, ref: tuple) -> bool:
    """The trailing arguments are the very objects seen when preparing (constants)."""
    if len(rest) != len(ref):
        return False
    # a plain loop: all() over a generator costs more than these few comparisons
    for a, b in zip(rest, ref):  # noqa: SIM110
        if a is not b:
            return False
    return True


@fast_path(reshape_5, reshape_14, squeeze_13, unsqueeze_13, flatten_1)
def _prepare_view(ctx: NodeContext, args: tuple, kwargs: dict, result: Any) -> Any:
    """Shape-only ops on a fixed input shape with constant shape/axes inputs: a reshape."""
    x = args[0]
    if type(x) is not np.ndarray or type(result) is not np.ndarray:
        return None
    if ctx is None or not ctx.constant_args(args, range(1, len(args))):
        return None  # keyed on the trailing arguments' identity: initializers only
    in_shape, out_shape, rest = x.shape, result.shape, tuple(args[1:])
    if len(rest) == 1:
        # Reshape and (Un)Squeeze with one constant: the common case, spelt out (a call to
        # _same_args is a fifth of this step's cost on small tensors)
        (only,) = rest

        def fast_one(x2: Any, r: Any = None, *more: Any) -> Any:
            if type(x2) is not np.ndarray or x2.shape != in_shape or r is not only or more:
                return MISS
            return x2.reshape(out_shape)

        return fast_one

    def fast(x2: Any, *r: Any) -> Any:
        if type(x2) is not np.ndarray or x2.shape != in_shape or not _same_args(r, rest):
            return MISS
        return x2.reshape(out_shape)

    return fast


@fast_path(transpose_1)
def _prepare_transpose(ctx: NodeContext, args: tuple, kwargs: dict, result: Any) -> Any:
    x = args[0]
    if type(x) is not np.ndarray or x.ndim == 0:
        return None
    perm = kwargs.get("perm")
    p = tuple(range(x.ndim))[::-1] if perm is None else tuple(int(v) for v in perm)
    shape = x.shape
    out = Slot(tuple(shape[i] for i in p), x.dtype)
    dtype = x.dtype
    tiles = _transpose_plan(x, p)

    if tiles is not None:
        go, dims, xs, ys, width = tiles

        def fast_tiles(x2: Any) -> Any:
            if not plain_array(x2, shape, dtype):
                return MISS
            y = out.get()
            go(x2.reshape(-1).view(width), y.reshape(-1).view(width), dims, xs, ys)
            return y

        return fast_tiles

    if not out.reuse:
        # small: a fresh C-order copy of the view (half the cost of Slot.get + copyto)
        def fast_small(x2: Any) -> Any:
            if type(x2) is not np.ndarray or x2.shape != shape or x2.dtype != dtype:
                return MISS
            return x2.transpose(p).copy()

        return fast_small

    def fast(x2: Any) -> Any:
        if type(x2) is not np.ndarray or x2.shape != shape or x2.dtype != dtype:
            return MISS
        y = out.get()
        np.copyto(y, x2.transpose(p))
        return y

    return fast


# Transpositions that move the input's last axis and have at least this many elements run
# the tiled kernel (numpy's strided copy reads or writes a cache line per element: a K^T of
# (1, 128, 4, 64) by (0, 2, 3, 1) took 29 us against onnxruntime's 10).
_TILED_TRANSPOSE_MIN = 4096


def _transpose_plan(x: np.ndarray, p: tuple[int, ...]) -> tuple | None:
    """``(kernel, dims, xs, ys, uint type)`` for :func:`onnxjit.kernels.cpu.tensor.
    transpose_tiles` when the tiled kernel suits ``x.transpose(p)``, else None.

    Axes of size 1 are dropped; what remains must be at most four axes with the input's last
    one moving (a perm that keeps it is a copy of contiguous rows, which numpy does well)."""
    if x.size < _TILED_TRANSPOSE_MIN or x.dtype.itemsize not in _UINT or x.dtype.hasobject:
        return None
    keep = [a for a in p if x.shape[a] > 1]  # output order of the non-trivial input axes
    if len(keep) > 4 or len(keep) < 2:
        return None
    last = max(keep)  # the input's innermost non-trivial axis: stride 1
    if keep[-1] == last:
        return None
    # element strides of a C-contiguous input, the only kind the fast path takes
    in_strides = [math.prod(x.shape[a + 1 :]) for a in range(x.ndim)]
    out_shape = [x.shape[a] for a in keep]
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
    n_threads = threads.current()
    kernel = K.transpose_tiles
    args = (
        np.array(dims, np.int64),
        np.array(xs, np.int64),
        np.array(ys, np.int64),
    )
    width = _UINT[x.dtype.itemsize]
    if n_threads > 1 and x.size >= _jit.PARALLEL_THRESHOLD:
        sample = (np.empty(1, width), np.empty(1, width), *args)
        kernel = pool.bind(K.transpose_tiles_par, sample, n_threads)
    return (kernel, *args, width)


# A gather moves rows at copy speed: threads pay off only for larger outputs than an
# elementwise kernel's threshold (BERT's 128 x 256 embedding lookup: 12.7 us on two threads,
# 10.1 on one, onnxruntime 7.4).
_GATHER_PARALLEL_MIN = 8 * _jit.PARALLEL_THRESHOLD


@fast_path(gather_1)
def _prepare_gather(ctx: NodeContext, args: tuple, kwargs: dict, result: Any) -> Any:
    """Gather of data of one shape and type by indices of one shape: the axis split, output
    shape and kernel fixed. Indices are still checked every run; a bad one leaves the fast
    path so that the operator raises its error."""
    x, ind = args
    if type(x) is not np.ndarray or type(ind) is not np.ndarray or type(result) is not np.ndarray:
        return None
    if x.ndim == 0 or ind.dtype not in (np.int32, np.int64) or _bits(x) is None:
        return None
    a = _norm_axis(ctx, kwargs["axis"], x.ndim)
    x_shape, x_dtype, i_shape, i_dtype = x.shape, x.dtype, ind.shape, ind.dtype
    n = x.shape[a]
    outer, inner = math.prod(x.shape[:a]), math.prod(x.shape[a + 1 :])
    count = ind.size
    out = Slot(result.shape, x_dtype)
    kernel = K.gather_axis
    if result.size >= _GATHER_PARALLEL_MIN:
        rows = _bits(np.empty((1, 1, 1), x_dtype))  # stands for both 3-D operands
        kernel = pool.bind(
            K.gather_axis_par, (rows, np.empty(1, np.int64), rows), threads.current()
        )

    def fast(x2: Any, ind2: Any) -> Any:
        if (
            not plain_array(x2, x_shape, x_dtype)
            or type(ind2) is not np.ndarray
            or ind2.shape != i_shape
            or ind2.dtype != i_dtype
        ):
            return MISS
        wrapped, bad = K.wrap_indices(_index_array(ind2).reshape(-1), n)
        if bad >= 0:
            return MISS  # the operator names the bad index
        y = out.get()
        if count:
            kernel(
                _bits(x2.reshape(outer, n, inner)), wrapped, _bits(y.reshape(outer, count, inner))
            )
        return y

    return fast


@fast_path(concat_4)
def _prepare_concat(ctx: NodeContext, args: tuple, kwargs: dict, result: Any) -> Any:
    """Concat of inputs of fixed shapes and one dtype: the result's shape and axis known,
    each input copied into its slot of one allocation."""
    if not args or any(type(a) is not np.ndarray for a in args) or type(result) is not np.ndarray:
        return None
    dtype = args[0].dtype
    if any(a.dtype != dtype for a in args) or dtype.kind == "O":
        return None
    shapes = tuple(a.shape for a in args)
    axis = _norm_axis(ctx, 1 if kwargs.get("axis") is None else kwargs["axis"], len(shapes[0]))
    out_shape = result.shape
    slot = Slot(out_shape, dtype)
    slots = []
    start = 0
    for s in shapes:
        index = [slice(None)] * len(out_shape)
        index[axis] = slice(start, start + s[axis])
        slots.append(tuple(index))
        start += s[axis]

    def fast(*xs: Any) -> Any:
        if len(xs) != len(shapes):
            return MISS
        for x, s in zip(xs, shapes):
            if type(x) is not np.ndarray or x.shape != s or x.dtype != dtype:
                return MISS
        out = slot.get()
        for x, sl in zip(xs, slots):
            out[sl] = x
        return out

    return fast


@fast_path(split_2, split_13, split_18)
def _prepare_split(ctx: NodeContext, args: tuple, kwargs: dict, result: Any) -> Any:
    """Split of a fixed input shape with constant sizes: the same views every time."""
    x = args[0]
    if type(x) is not np.ndarray or not isinstance(result, tuple):
        return None
    if ctx is None or not ctx.constant_args(args, range(1, len(args))):
        return None  # keyed on the trailing arguments' identity: initializers only
    shape, rest = x.shape, tuple(args[1:])
    axis = _norm_axis(ctx, kwargs.get("axis", 0), x.ndim)
    index = []
    start = 0
    for part in result:
        sl = [slice(None)] * x.ndim
        sl[axis] = slice(start, start + part.shape[axis])
        index.append(tuple(sl))
        start += part.shape[axis]

    def fast(x2: Any, *r: Any) -> Any:
        if type(x2) is not np.ndarray or x2.shape != shape or not _same_args(r, rest):
            return MISS
        return tuple([x2[sl] for sl in index])

    return fast
