"""Miscellaneous default-domain operators, random generators and the training optimisers.

Loops that numpy cannot do in one pass run as the backend's ``misc`` kernels
(kernels/cpu/misc.py: CumProd, ReverseSequence, LpNormalization,
NegativeLogLikelihoodLoss, TensorScatter, Multinomial's draws); the rest is numpy doing one
pass (Compress, Unique, MaxUnpool's scatter, Det through LAPACK, BitCast as a view).
float16/bfloat16 inputs are computed in float32 and cast back.

Registered versions, and why later versions need no registration:

* Compress 9 and 11 (11 allows negative axes; one body serves both; 28 adds types);
  CumProd 26; ReverseSequence 10 (28 adds types); Unique 11 (28 adds types);
  LpNormalization 1 (22 adds bfloat16); MaxUnpool 9 (11 only rewords the docs; 22 adds types);
  Det 11 (22 adds types); BitCast 26; TensorScatter 24.
* NegativeLogLikelihoodLoss 12 (13 only reformats the docs, 22 adds types).
  SoftmaxCrossEntropyLoss is not registered: its schema's function body (LogSoftmax + NLL) is
  expanded by the inliner and runs with this NLL.
* RandomNormal, RandomUniform, RandomNormalLike, RandomUniformLike 1; Bernoulli 15;
  Multinomial 7 (22 adds bfloat16 to all of them).
* ai.onnx.preview.training Adagrad, Adam, Momentum 1.

Random numbers: every node owns a ``numpy.random.Generator`` (PCG64 through
``numpy.random.default_rng``) created on its first run and advanced by every later run, as
onnxruntime does, so two runs of one session give different samples. With a ``seed`` attribute
the generator is ``default_rng(int(seed))`` for an integral seed (the float's 64-bit pattern
otherwise), so two sessions of one seeded model produce the same sequence of outputs. Without
a seed attribute the generator comes from :func:`set_seed` (``onnxjit.set_seed``, onnxruntime's
function of the same name): once it has been called, a node's generator is created (again)
at the node's first run after each call, from the seed and the node's name and operator, so
that every session run after ``set_seed(n)`` draws the same sequence (and two unseeded nodes
of one model draw different ones); before any call it is seeded once from the operating
system's entropy. Values are not those of onnxruntime or of the reference evaluator, which use
other generators.
"""

from __future__ import annotations

import operator
import threading
import weakref
import zlib
from typing import Any

import numpy as np

from onnxjit import limits, types
from onnxjit.registry import NodeContext, onnx_op

_LOW_FLOATS = ("float16", "bfloat16")


def _is_low_float(dtype: np.dtype) -> bool:
    return dtype.name in _LOW_FLOATS


def _norm_axis(ctx: NodeContext, axis: int, rank: int, what: str = "axis") -> int:
    a = int(axis)
    if not -rank <= a < rank:
        raise ctx.error(
            f"{what} {a} is out of range for an input of rank {rank}; expected a value in "
            f"[{-rank}, {rank - 1}]"
        )
    return a + rank if a < 0 else a


def _scalar_int(ctx: NodeContext, value: Any, what: str) -> int:
    arr = np.asarray(value)
    if arr.size != 1 or arr.dtype.kind not in "iu":
        raise ctx.error(
            f"{what} must be a single int32/int64 value, found {arr.dtype} of shape "
            f"{list(arr.shape)}"
        )
    return int(arr.reshape(-1)[0])


_RAW = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _raw(x: np.ndarray) -> np.ndarray | None:
    """A same-width unsigned view of a contiguous array for kernels that only move items, so
    that one compiled kernel per item size serves every element type (None for objects)."""
    if x.dtype == object or x.dtype.itemsize not in _RAW:
        return None
    return x.view(_RAW[x.dtype.itemsize])


def _canonical3(x: np.ndarray, axis: int) -> np.ndarray:
    """A contiguous ``(outer, n, inner)`` view of ``x`` around ``axis``."""
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    inner = int(np.prod(x.shape[axis + 1 :], dtype=np.int64))
    return np.ascontiguousarray(x).reshape(outer, x.shape[axis], inner)


# ---------------------------------------------------------------------------------------------
# Compress


@onnx_op("Compress", since=9)
@onnx_op("Compress", since=11)
def compress(ctx, input, condition, *, axis=None):
    """The slices of ``input`` along ``axis`` (the flattened input when absent) whose
    ``condition`` entry is true; a ``condition`` shorter than the axis selects nothing past
    its end, as numpy.compress does."""
    x = np.asarray(input)
    cond = np.asarray(condition)
    if cond.ndim != 1:
        raise ctx.error(f"'condition' must be 1-D, found shape {list(cond.shape)}")
    cond = cond.astype(bool, copy=False)
    if axis is None:
        x, a = x.reshape(-1), 0
    else:
        a = _norm_axis(ctx, axis, x.ndim)
    n = x.shape[a]
    if cond.shape[0] > n and cond[n:].any():
        raise ctx.error(
            f"'condition' selects index {int(np.flatnonzero(cond[n:])[0]) + n} but the axis "
            f"has length {n}; shorten 'condition'"
        )
    return np.compress(cond[:n], x, axis=a)


# ---------------------------------------------------------------------------------------------
# CumProd


@onnx_op("CumProd", since=26)
def cumprod_26(ctx, x, axis, *, exclusive, reverse):
    """Cumulative product along ``axis`` (a scalar input); ``exclusive`` starts from 1,
    ``reverse`` runs from the end of the axis."""
    x = np.asarray(x)
    rank = max(x.ndim, 1)
    a = _norm_axis(ctx, _scalar_int(ctx, axis, "'axis'"), rank)
    work = x.reshape(1) if x.ndim == 0 else x
    low = _is_low_float(x.dtype)
    if low:
        work = work.astype(np.float32)
    x3 = _canonical3(work, a)
    out = np.empty_like(x3)
    ctx.kernel("misc", "cumprod3")(x3, bool(exclusive), bool(reverse), out)
    out = out.reshape(x.shape)
    return out.astype(x.dtype) if low else out


# ---------------------------------------------------------------------------------------------
# ReverseSequence


@onnx_op("ReverseSequence", since=10)
def reverse_sequence(ctx, input, sequence_lens, *, batch_axis, time_axis):
    """Reverse the first ``sequence_lens[b]`` steps along ``time_axis`` of every batch entry;
    the steps past the length are copied as they are. The two axes are 0 and 1."""
    x = np.asarray(input)
    if x.ndim < 2:
        raise ctx.error(f"'input' must have rank >= 2, found rank {x.ndim}")
    if {batch_axis, time_axis} != {0, 1}:
        raise ctx.error(
            f"batch_axis={batch_axis} and time_axis={time_axis} must be 0 and 1 (one each)"
        )
    n_batch, n_time = x.shape[batch_axis], x.shape[time_axis]
    lens = np.asarray(sequence_lens).astype(np.int64).reshape(-1)
    if lens.shape[0] != n_batch:
        raise ctx.error(
            f"'sequence_lens' has {lens.shape[0]} entries but the batch axis has {n_batch}"
        )
    if lens.size and (lens.min() < 0 or lens.max() > n_time):
        raise ctx.error(
            f"'sequence_lens' values must lie in [0, {n_time}] (the time axis length), found "
            f"{lens.tolist()}"
        )
    inner = int(np.prod(x.shape[2:], dtype=np.int64))
    x3 = np.ascontiguousarray(x).reshape(x.shape[0], x.shape[1], inner)
    out = np.empty_like(x3)
    raw_in, raw_out = _raw(x3), _raw(out)
    if raw_in is not None:
        ctx.kernel("misc", "reverse_sequence3")(raw_in, lens, batch_axis == 0, raw_out)
        return out.reshape(x.shape)
    # Strings: gather along the time axis with a (batch, time) source-index table.
    t = np.arange(n_time)[None, :]
    src = np.where(t < lens[:, None], lens[:, None] - 1 - t, t)
    if batch_axis == 1:
        src = src.T
    return np.take_along_axis(x3, src[:, :, None], axis=1 - batch_axis).reshape(x.shape)


# ---------------------------------------------------------------------------------------------
# Unique


@onnx_op("Unique", since=11)
def unique(ctx, X, *, axis=None, sorted):
    """Unique values (or sub-tensors along ``axis``), sorted or in first-occurrence order.

    Returns ``(Y, indices, inverse_indices, counts)``; the three index outputs are int64.
    """
    x = np.asarray(X)
    low = _is_low_float(x.dtype)
    work = x.astype(np.float32) if low else x
    if axis is None:
        a = None
        work = work.reshape(-1)
    else:
        a = _norm_axis(ctx, axis, x.ndim)
    y, first, inverse, counts = np.unique(
        work, return_index=True, return_inverse=True, return_counts=True, axis=a
    )
    inverse = inverse.reshape(-1)
    if not sorted:
        # Reorder by first occurrence; the inverse map follows the new positions.
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.shape[0])
        y = np.take(y, order, axis=0 if a is None else a)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    if low:
        y = y.astype(x.dtype)
    as64 = lambda v: np.asarray(v, dtype=np.int64)  # noqa: E731
    return y, as64(first), as64(inverse), as64(counts)


# ---------------------------------------------------------------------------------------------
# LpNormalization


@onnx_op("LpNormalization", since=1)
def lp_normalization(ctx, input, *, axis, p):
    """``input / ||input||_p`` along ``axis`` (p is 1 or 2); a zero norm gives zeros."""
    x = np.asarray(input)
    if p not in (1, 2):
        raise ctx.unsupported(f"p={p} is not supported; LpNormalization defines p = 1 or 2")
    rank = max(x.ndim, 1)
    a = _norm_axis(ctx, axis, rank)
    work = x.reshape(1) if x.ndim == 0 else x
    low = _is_low_float(x.dtype)
    if low or work.dtype.kind != "f":
        work = work.astype(np.float32)
    x3 = _canonical3(work, a)
    out = np.empty_like(x3)
    ctx.kernel("misc", "lp_normalize3")(x3, int(p), out)
    out = out.reshape(x.shape)
    return out.astype(x.dtype) if out.dtype != x.dtype else out


# ---------------------------------------------------------------------------------------------
# MaxUnpool


@onnx_op("MaxUnpool", since=9)
def max_unpool(ctx, X, I, output_shape=None, *, kernel_shape=None, pads=None, strides=None):  # noqa: E741
    """Scatter ``X`` into a zero tensor at the flat indices ``I`` (as MaxPool returns them).

    The output shape is ``output_shape`` when given (then ``pads`` are ignored, as the spec
    says), else per spatial axis ``(in - 1) * stride + kernel - pad_begin - pad_end``. The
    indices are linear in the output tensor, as MaxPool computes them on its input, which is
    what an ``output_shape`` names. onnxruntime does the same; onnx's reference evaluator (and
    the data of the conformance case test_maxunpool_export_with_output_shape) instead read
    them in the inferred shape and pad that at the end of each axis.
    """
    x = np.asarray(X)
    idx = np.asarray(I)
    if x.ndim < 3:
        raise ctx.error(f"'X' must be (N, C, D1, ...), found shape {list(x.shape)}")
    if idx.shape != x.shape:
        raise ctx.error(f"'I' has shape {list(idx.shape)} but 'X' has {list(x.shape)}")
    k = x.ndim - 2
    if kernel_shape is None or len(kernel_shape) != k:
        raise ctx.error(f"'kernel_shape' must give {k} sizes, found {kernel_shape}")
    strides = list(strides) if strides else [1] * k
    pads = list(pads) if pads else [0] * (2 * k)
    if len(strides) != k or len(pads) != 2 * k:
        raise ctx.error(f"'strides' needs {k} entries and 'pads' {2 * k}")
    inferred = list(x.shape[:2]) + [
        (x.shape[2 + i] - 1) * strides[i] + kernel_shape[i] - pads[i] - pads[i + k]
        for i in range(k)
    ]
    if output_shape is None:
        shape = inferred
    else:
        shape = [int(v) for v in np.asarray(output_shape).reshape(-1)]
        if len(shape) != x.ndim or shape[:2] != inferred[:2]:
            raise ctx.error(
                f"'output_shape' {shape} must have rank {x.ndim} and start with {inferred[:2]}"
            )
    if min(shape) < 0:
        raise ctx.error(f"the unpooled shape {shape} has a negative size")
    limits.check(ctx, shape, x.dtype)
    out = np.zeros(shape, dtype=x.dtype)
    flat_idx = idx.reshape(-1).astype(np.int64, copy=False)
    if flat_idx.size and (flat_idx.min() < 0 or flat_idx.max() >= out.size):
        raise ctx.error(f"'I' holds indices outside [0, {out.size}) for the output shape {shape}")
    out.reshape(-1)[flat_idx] = x.reshape(-1)
    return out


# ---------------------------------------------------------------------------------------------
# Det


@onnx_op("Det", since=11)
def det(ctx, X):
    """Determinants of the square matrices in the last two axes of ``X`` (shape ``[*, M, M]``)."""
    x = np.asarray(X)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ctx.error(f"'X' must be [*, M, M], found shape {list(x.shape)}")
    work = x.astype(np.float32) if _is_low_float(x.dtype) else x
    out = np.asarray(np.linalg.det(work))
    return out.astype(x.dtype, copy=False)


# ---------------------------------------------------------------------------------------------
# BitCast


def _bit_width(dtype: np.dtype) -> int:
    name = dtype.name
    if name in ("int4", "uint4", "float4_e2m1fn"):
        return 4
    if name in ("int2", "uint2"):
        return 2
    return dtype.itemsize * 8


@onnx_op("BitCast", since=26)
def bitcast(ctx, input, *, to=None):
    """The input's bytes read as element type ``to`` (same bit width; shape unchanged)."""
    x = np.asarray(input)
    if to is None:
        raise ctx.error("the 'to' attribute is required")
    dst = types.np_dtype(to)
    if x.dtype.kind == "O" or dst.kind == "O":
        raise ctx.error("BitCast does not accept string tensors")
    if _bit_width(x.dtype) != _bit_width(dst):
        raise ctx.error(
            f"cannot reinterpret {x.dtype} ({_bit_width(x.dtype)} bits) as {dst} "
            f"({_bit_width(dst)} bits); the widths must match"
        )
    # A same-width view needs no copy (and keeps 0-d inputs 0-d).
    return x.view(dst)


# ---------------------------------------------------------------------------------------------
# TensorScatter


@onnx_op("TensorScatter", since=24)
def tensor_scatter(ctx, past_cache, update, write_indices=None, *, axis, mode):
    """``past_cache`` with ``update`` written along ``axis`` from ``write_indices[b]`` for every
    batch entry (0 without ``write_indices``); 'circular' wraps positions modulo the axis."""
    cache = np.asarray(past_cache)
    upd = np.asarray(update)
    if mode not in ("linear", "circular"):
        raise ctx.error(f"'mode' must be 'linear' or 'circular', found {mode!r}")
    if cache.ndim < 2:
        raise ctx.error(f"'past_cache' must have rank >= 2, found {cache.ndim}")
    a = _norm_axis(ctx, axis, cache.ndim)
    if a == 0:
        raise ctx.error("'axis' cannot be the batch axis 0")
    if upd.ndim != cache.ndim or any(
        u != c for i, (u, c) in enumerate(zip(upd.shape, cache.shape)) if i != a
    ):
        raise ctx.error(
            f"'update' shape {list(upd.shape)} must equal 'past_cache' shape "
            f"{list(cache.shape)} except along axis {a}"
        )
    if upd.dtype != cache.dtype:
        raise ctx.error(f"'update' is {upd.dtype} but 'past_cache' is {cache.dtype}")
    n_batch, n_seq, s = cache.shape[0], cache.shape[a], upd.shape[a]
    if s > n_seq:
        raise ctx.error(f"'update' has {s} steps along axis {a}, more than the cache's {n_seq}")
    if write_indices is None:
        wi = np.zeros(n_batch, dtype=np.int64)
    else:
        wi = np.asarray(write_indices).astype(np.int64).reshape(-1)
        if wi.shape[0] != n_batch:
            raise ctx.error(f"'write_indices' has {wi.shape[0]} entries for a batch of {n_batch}")
    if wi.size and wi.min() < 0:
        raise ctx.error(f"'write_indices' must be >= 0, found {wi.tolist()}")
    if mode == "linear" and wi.size and wi.max() + s > n_seq:
        raise ctx.error(
            f"write_indices {wi.tolist()} + {s} update steps run past the cache length "
            f"{n_seq}; use mode='circular' or smaller indices"
        )
    prefix = int(np.prod(cache.shape[1:a], dtype=np.int64))
    inner = int(np.prod(cache.shape[a + 1 :], dtype=np.int64))
    out = np.array(cache, copy=True, order="C")
    if out.size == 0 or upd.size == 0:
        return out
    o4, u4 = _raw(out), _raw(np.ascontiguousarray(upd))
    if o4 is None or u4 is None:
        raise ctx.unsupported(f"element type {cache.dtype} is not supported")
    o4 = o4.reshape(n_batch, prefix, n_seq, inner)
    u4 = u4.reshape(n_batch, prefix, s, inner)
    ctx.kernel("misc", "tensor_scatter4")(u4, wi, mode == "circular", o4)
    return out


# ---------------------------------------------------------------------------------------------
# NegativeLogLikelihoodLoss


@onnx_op("NegativeLogLikelihoodLoss", since=12)
def nll_loss(ctx, input, target, weight=None, *, ignore_index=None, reduction):
    """Negative log-likelihood of ``input (N, C, d1..dk)`` for class labels ``target
    (N, d1..dk)``, optionally weighted per class; 'none' | 'sum' | 'mean' (weighted mean)."""
    x = np.asarray(input)
    t = np.asarray(target)
    if reduction not in ("none", "sum", "mean"):
        raise ctx.error(f"'reduction' must be 'none', 'sum' or 'mean', found {reduction!r}")
    if x.ndim < 2:
        raise ctx.error(f"'input' must be (N, C, ...), found shape {list(x.shape)}")
    if t.shape != (x.shape[0], *x.shape[2:]):
        raise ctx.error(
            f"'target' shape {list(t.shape)} must be 'input' shape {list(x.shape)} without "
            "the class axis 1"
        )
    n_class = x.shape[1]
    t64 = t.astype(np.int64, copy=False)
    ignore = np.iinfo(np.int64).min if ignore_index is None else int(ignore_index)
    counted = t64 != ignore
    if counted.any():
        bad = counted & ((t64 < 0) | (t64 >= n_class))
        if bad.any():
            raise ctx.error(
                f"'target' holds class {int(t64[bad][0])} outside [0, {n_class}) that is not "
                f"ignore_index ({ignore_index})"
            )
    low = _is_low_float(x.dtype)
    work = x.astype(np.float32) if low else x
    d = int(np.prod(x.shape[2:], dtype=np.int64))
    x3 = np.ascontiguousarray(work).reshape(x.shape[0], n_class, d)
    t2 = np.ascontiguousarray(t64).reshape(x.shape[0], d)
    if weight is not None:
        w = np.asarray(weight)
        if w.shape != (n_class,):
            raise ctx.error(f"'weight' must have shape [{n_class}], found {list(w.shape)}")
        w = w.astype(work.dtype, copy=False)
    else:
        w = np.ones(1, dtype=work.dtype)
    loss = np.empty(t2.shape, dtype=work.dtype)
    wsum = np.zeros(1, dtype=np.float64)
    ctx.kernel("misc", "nll_loss3")(x3, t2, w, weight is not None, ignore, loss, wsum)
    if reduction == "none":
        out = loss.reshape(t.shape)
    elif reduction == "sum":
        out = np.asarray(loss.sum(dtype=work.dtype))
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.asarray(loss.sum(dtype=work.dtype) / work.dtype.type(wsum[0]))
    return out.astype(x.dtype) if low else out


# ---------------------------------------------------------------------------------------------
# Random generators


class _NodeRng:
    """A generator per node (keyed by its NodeContext), created on first use.

    A node with a ``seed`` attribute keeps its generator for the life of its session; one
    without takes the seed of the latest :func:`set_seed` and is re-created after each call.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gens: dict[int, tuple[weakref.ref, np.random.Generator, threading.Lock, int]] = {}
        self.global_seed: int | None = None  # set by set_seed
        self.epoch = 0  # set_seed calls so far

    def get(self, ctx: NodeContext, seed: float | None):
        key = id(ctx)
        with self._lock:
            entry = self._gens.get(key)
            epoch = self.epoch if seed is None else 0
            if entry is None or entry[0]() is not ctx or entry[3] != epoch:
                if seed is not None:
                    gen = np.random.default_rng(_seed_value(seed))
                elif self.global_seed is not None:
                    node = zlib.crc32(f"{ctx.name}\0{ctx.label}".encode())
                    gen = np.random.default_rng([self.global_seed, node])
                else:
                    gen = np.random.default_rng()
                ref = weakref.ref(ctx, lambda _r, k=key: self._gens.pop(k, None))
                entry = (ref, gen, threading.Lock(), epoch)
                self._gens[key] = entry
        return entry[1], entry[2]

    def set_seed(self, seed: int | None) -> None:
        """Seed unseeded nodes from ``seed`` (None: operating-system entropy, as before any
        :func:`set_seed`; for tests), re-creating their generators at their next run."""
        with self._lock:
            self.global_seed = seed
            self.epoch += 1


_RNGS = _NodeRng()


def set_seed(seed: int) -> None:
    """Seed the random operators that have no ``seed`` attribute (RandomNormal, RandomUniform,
    their ``Like`` forms, Bernoulli, Multinomial), in every session (onnxruntime's
    ``set_seed``).

    After ``set_seed(n)`` each such node draws, from its next run on, the sequence fixed by
    ``n`` and the node (its name and operator): two sessions of one model run after the same
    call give the same samples, a different ``n`` gives different ones, and calling it again
    with ``n`` restarts the sequence. Nodes with a ``seed`` attribute keep their own
    generator. ``seed`` is any integer (taken modulo 2**64); anything else raises
    ``TypeError``, as in onnxruntime.
    """
    try:
        value = operator.index(seed)
    except TypeError:
        raise TypeError(
            f"set_seed() takes an integer, found {type(seed).__name__} {seed!r}"
        ) from None
    _RNGS.set_seed(value & ((1 << 64) - 1))


def _seed_value(seed: float | None) -> int | None:
    if seed is None:
        return None
    s = float(seed)
    if s.is_integer():
        return abs(int(s))
    return int(np.array(s, dtype=np.float64).view(np.uint64))


def _float_dtype(ctx: NodeContext, dtype: int | None, default: np.dtype) -> np.dtype:
    dt = default if dtype is None else types.np_dtype(int(dtype))
    if dt.kind != "f" and dt.name != "bfloat16":
        raise ctx.error(f"'dtype' must be a floating-point type, found {dt}")
    return dt


def _shape_of(ctx: NodeContext, shape: list[int] | None) -> tuple[int, ...]:
    if shape is None:
        raise ctx.error("the 'shape' attribute is required")
    if any(int(d) < 0 for d in shape):
        raise ctx.error(f"'shape' must hold non-negative sizes, found {shape}")
    limits.check(ctx, shape, np.float64)  # drawn in float64
    return tuple(int(d) for d in shape)


def _normal(ctx, shape, dtype, mean, scale, seed) -> np.ndarray:
    gen, lock = _RNGS.get(ctx, seed)
    with lock:
        v = gen.standard_normal(shape, dtype=np.float64)
    return (v * scale + mean).astype(dtype)


def _uniform(ctx, shape, dtype, low, high, seed) -> np.ndarray:
    gen, lock = _RNGS.get(ctx, seed)
    with lock:
        v = gen.random(shape, dtype=np.float64)
    out = (v * (high - low) + low).astype(dtype)
    # Rounding to a narrow type can land on ``high``: the interval is half-open.
    if np.dtype(dtype).kind == "f" and high > low:
        below = np.nextafter(np.asarray(high, dtype=dtype), np.asarray(low, dtype=dtype))
        np.minimum(out, below, out=out)
    return out


@onnx_op("RandomNormal", since=1)
def random_normal(ctx, *, dtype, mean, scale, seed=None, shape=None):
    """Samples of N(mean, scale^2) of the given shape and float ``dtype`` (default float)."""
    dt = _float_dtype(ctx, dtype, np.dtype(np.float32))
    return _normal(ctx, _shape_of(ctx, shape), dt, mean, scale, seed)


@onnx_op("RandomUniform", since=1)
def random_uniform(ctx, *, dtype, high, low, seed=None, shape=None):
    """Samples of U[low, high) of the given shape and float ``dtype`` (default float)."""
    dt = _float_dtype(ctx, dtype, np.dtype(np.float32))
    return _uniform(ctx, _shape_of(ctx, shape), dt, low, high, seed)


@onnx_op("RandomNormalLike", since=1)
def random_normal_like(ctx, input, *, dtype=None, mean, scale, seed=None):
    """RandomNormal with the shape of ``input``; ``dtype`` defaults to the input's type."""
    x = np.asarray(input)
    dt = _float_dtype(ctx, dtype, x.dtype)
    return _normal(ctx, x.shape, dt, mean, scale, seed)


@onnx_op("RandomUniformLike", since=1)
def random_uniform_like(ctx, input, *, dtype=None, high, low, seed=None):
    """RandomUniform with the shape of ``input``; ``dtype`` defaults to the input's type."""
    x = np.asarray(input)
    dt = _float_dtype(ctx, dtype, x.dtype)
    return _uniform(ctx, x.shape, dt, low, high, seed)


@onnx_op("Bernoulli", since=15)
def bernoulli(ctx, input, *, dtype=None, seed=None):
    """1 with probability ``input`` else 0, per element; output type ``dtype`` (default: the
    input's). Drawn as ``uniform < p``, the way the schema's function body defines it."""
    p = np.asarray(input)
    dt = p.dtype if dtype is None else types.np_dtype(int(dtype))
    gen, lock = _RNGS.get(ctx, seed)
    with lock:
        u = gen.random(p.shape, dtype=np.float64)
    return (u < p.astype(np.float64)).astype(dt)


@onnx_op("Multinomial", since=7)
def multinomial(ctx, input, *, dtype, sample_size, seed=None):
    """``sample_size`` class indices per batch row drawn from the distribution whose
    unnormalised log-probabilities are the row of ``input (batch, classes)``."""
    x = np.asarray(input)
    if x.ndim != 2:
        raise ctx.error(f"'input' must be [batch_size, class_size], found {list(x.shape)}")
    out_dt = types.np_dtype(int(dtype))
    if out_dt not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise ctx.error(f"'dtype' must be int32 or int64, found {out_dt}")
    if int(sample_size) < 0:
        raise ctx.error(f"'sample_size' must be >= 0, found {sample_size}")
    n_batch, n_class = x.shape
    limits.check(ctx, (n_batch, int(sample_size)), np.float64)
    out = np.zeros((n_batch, int(sample_size)), dtype=np.int64)
    gen, lock = _RNGS.get(ctx, seed)
    with lock:
        u = gen.random(out.shape, dtype=np.float64)
    if n_class and out.size:
        logits = x.astype(np.float64)
        cdf = np.cumsum(np.exp(logits - logits.max(axis=1, keepdims=True)), axis=1)
        ctx.kernel("misc", "multinomial_draw")(np.ascontiguousarray(cdf), u * cdf[:, -1:], out)
    return out.astype(out_dt, copy=False)


# ---------------------------------------------------------------------------------------------
# ai.onnx.preview.training optimisers

TRAINING = "ai.onnx.preview.training"


def _groups(ctx: NodeContext, tensors: tuple, k: int, names: str) -> list[list[np.ndarray]]:
    if len(tensors) % k:
        raise ctx.error(
            f"expected {k} groups of tensors ({names}) after R and T, found {len(tensors)} tensors"
        )
    n = len(tensors) // k
    return [[np.asarray(v) for v in tensors[i * n : (i + 1) * n]] for i in range(k)]


def _scalar_float(value: Any) -> float:
    return float(np.asarray(value).reshape(-1)[0])


@onnx_op("Adagrad", since=1, domain=TRAINING)
def adagrad(ctx, R, T, *inputs, decay_factor, epsilon, norm_coefficient):
    """One ADAGRAD step for every (X, G, H) triple; returns the new Xs then the new Hs."""
    xs, gs, hs = _groups(ctx, inputs, 3, "X, G, H")
    r = _scalar_float(R) / (1.0 + _scalar_float(T) * decay_factor)
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs):
        dt = x.dtype
        g_reg = dt.type(norm_coefficient) * x + g
        h_new = h + g_reg * g_reg
        new_h.append(h_new.astype(h.dtype, copy=False))
        x_new = x - dt.type(r) * g_reg / (np.sqrt(h_new) + dt.type(epsilon))
        new_x.append(x_new.astype(dt, copy=False))
    return tuple(new_x + new_h)


@onnx_op("Adam", since=1, domain=TRAINING)
def adam(
    ctx, R, T, *inputs, alpha, beta, epsilon, norm_coefficient,
    norm_coefficient_post,
):  # fmt: skip
    """One Adam step for every (X, G, V, H) quadruple; returns new Xs, new Vs, new Hs."""
    xs, gs, vs, hs = _groups(ctx, inputs, 4, "X, G, V, H")
    r, t = _scalar_float(R), _scalar_float(T)
    r_adj = r * np.sqrt(1.0 - beta**t) / (1.0 - alpha**t) if t > 0 else r
    new_x, new_v, new_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        dt = x.dtype.type
        g_reg = dt(norm_coefficient) * x + g
        v_new = dt(alpha) * v + dt(1.0 - alpha) * g_reg
        h_new = dt(beta) * h + dt(1.0 - beta) * g_reg * g_reg
        x_new = x - dt(r_adj) * v_new / (np.sqrt(h_new) + dt(epsilon))
        x_new = dt(1.0 - norm_coefficient_post) * x_new
        new_x.append(x_new.astype(x.dtype, copy=False))
        new_v.append(v_new.astype(v.dtype, copy=False))
        new_h.append(h_new.astype(h.dtype, copy=False))
    return tuple(new_x + new_v + new_h)


@onnx_op("Momentum", since=1, domain=TRAINING)
def momentum(ctx, R, T, *inputs, alpha=None, beta=None, mode=None, norm_coefficient=None):
    """One SGD-with-momentum step ('standard' or 'nesterov') for every (X, G, V) triple;
    returns the new Xs then the new Vs."""
    for name, value in (
        ("alpha", alpha),
        ("beta", beta),
        ("mode", mode),
        ("norm_coefficient", norm_coefficient),
    ):
        if value is None:
            raise ctx.error(f"the '{name}' attribute is required")
    if mode not in ("standard", "nesterov"):
        raise ctx.error(f"'mode' must be 'standard' or 'nesterov', found {mode!r}")
    xs, gs, vs = _groups(ctx, inputs, 3, "X, G, V")
    r, t = _scalar_float(R), _scalar_float(T)
    beta_adj = beta if t > 0 else 1.0
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs):
        dt = x.dtype.type
        g_reg = dt(norm_coefficient) * x + g
        v_new = dt(alpha) * v + dt(beta_adj) * g_reg
        if mode == "nesterov":
            x_new = x - dt(r) * (g_reg + dt(alpha) * v_new)
        else:
            x_new = x - dt(r) * v_new
        new_x.append(x_new.astype(x.dtype, copy=False))
        new_v.append(v_new.astype(v.dtype, copy=False))
    return tuple(new_x + new_v)
