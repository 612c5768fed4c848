"""Sequence and optional operators.

Representation: a sequence value is a Python ``list`` of numpy arrays; an optional value is
``None`` when empty, otherwise the value it holds (an array or a list). Implementations never
mutate a list they receive (the same list may feed several nodes): every sequence output is a
new list. Tensors inside a sequence are shared, which is safe because nothing writes into a
node's inputs.

Registered versions:

* SequenceConstruct, SequenceEmpty, SequenceAt, SequenceInsert, SequenceErase, SequenceLength,
  ConcatFromSequence: 11 (the only version).
* SplitToSequence: 11 (24 only adds element types).
* SequenceMap: 17 (the only version; run natively rather than through its function body).
* Optional: 15 (28 only adds element types).
* OptionalHasElement: 15, and 18 which makes the input optional (a missing input is an empty
  optional) and accepts plain tensors/sequences (which always hold an element); 28 only adds
  types.
* OptionalGetElement: 15, and 18 which also accepts a plain tensor or sequence and returns it
  as it is; 28 only adds types.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit import types
from onnxjit.registry import NodeContext, onnx_op


def _position(ctx: NodeContext, position: Any, n: int, allow_end: bool) -> int:
    """A non-negative index from a scalar position tensor; ``[-n, n-1]`` (``[-n, n]`` with
    ``allow_end``) is accepted, as the spec says."""
    arr = np.asarray(position)
    if arr.size != 1 or arr.dtype.kind not in "iu":
        raise ctx.error(
            f"'position' must be a scalar int32/int64 tensor, found {arr.dtype} of shape "
            f"{arr.shape}"
        )
    p = int(arr.reshape(-1)[0])
    hi = n if allow_end else n - 1
    if not -n <= p <= hi:
        raise ctx.error(
            f"'position' {p} is out of range [{-n}, {hi}] for a sequence of {n} tensors; "
            "pass a position inside the sequence"
        )
    return p + n if p < 0 else p


def _as_sequence(ctx: NodeContext, value: Any, what: str) -> list[Any]:
    """The value as a list; a tuple fed by a caller is accepted as a sequence too."""
    if isinstance(value, tuple):
        return list(value)
    if not isinstance(value, list):
        raise ctx.error(f"{what} must be a sequence (a Python list), found {type(value).__name__}")
    return value


# ---------------------------------------------------------------------------------------------
# Construction and access


@onnx_op("SequenceConstruct", since=11)
def sequence_construct(ctx, *inputs):
    """A sequence of the inputs, in order; they must share one element type."""
    arrays = [np.asarray(x) for x in inputs]
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) > 1:
        raise ctx.error(
            f"all inputs must have one element type, found {sorted(str(d) for d in dtypes)}; "
            "Cast them to one type first"
        )
    return list(arrays)


@onnx_op("SequenceEmpty", since=11)
def sequence_empty(*, dtype=None):
    """An empty sequence. ``dtype`` (default float) only types the value in the model; an empty
    Python list carries no element type."""
    if dtype is not None:
        types.np_dtype(dtype)  # reject unknown element types early
    return []


@onnx_op("SequenceAt", since=11)
def sequence_at(ctx, input_sequence, position):
    """The tensor at ``position`` (negative counts from the back)."""
    seq = _as_sequence(ctx, input_sequence, "'input_sequence'")
    return seq[_position(ctx, position, len(seq), allow_end=False)]


@onnx_op("SequenceInsert", since=11)
def sequence_insert(ctx, input_sequence, tensor, position=None):
    """A new sequence with ``tensor`` inserted before ``position`` (default: at the back)."""
    seq = _as_sequence(ctx, input_sequence, "'input_sequence'")
    tensor = np.asarray(tensor)
    if seq and np.asarray(seq[0]).dtype != tensor.dtype:
        raise ctx.error(
            f"'tensor' has element type {tensor.dtype} but the sequence holds "
            f"{np.asarray(seq[0]).dtype}; Cast it first"
        )
    out = list(seq)
    if position is None:
        out.append(tensor)
    else:
        out.insert(_position(ctx, position, len(seq), allow_end=True), tensor)
    return out


@onnx_op("SequenceErase", since=11)
def sequence_erase(ctx, input_sequence, position=None):
    """A new sequence without the tensor at ``position`` (default: the last one)."""
    seq = _as_sequence(ctx, input_sequence, "'input_sequence'")
    if not seq:
        raise ctx.error("cannot erase from an empty sequence")
    p = len(seq) - 1 if position is None else _position(ctx, position, len(seq), False)
    return seq[:p] + seq[p + 1 :]


@onnx_op("SequenceLength", since=11)
def sequence_length(ctx, input_sequence):
    """The number of tensors in the sequence, as an int64 scalar."""
    return np.array(len(_as_sequence(ctx, input_sequence, "'input_sequence'")), dtype=np.int64)


# ---------------------------------------------------------------------------------------------
# Split / concat


@onnx_op("SplitToSequence", since=11)
def split_to_sequence(ctx, input, split=None, *, axis, keepdims):
    """Split ``input`` along ``axis`` into a sequence.

    No ``split``: pieces of length 1, with the axis removed when ``keepdims`` is 0. A scalar
    ``split``: pieces of that length (the last may be shorter). A 1-D ``split``: those lengths,
    which must add up to the axis length. Pieces are views of the input.
    """
    x = np.asarray(input)
    if x.ndim == 0:
        raise ctx.error("'input' must have rank >= 1 to be split, found a scalar")
    if not -x.ndim <= axis < x.ndim:
        raise ctx.error(f"'axis' {axis} is out of range for rank {x.ndim}")
    axis %= x.ndim
    n = x.shape[axis]
    if split is None:
        if keepdims:
            return [x[(slice(None),) * axis + (slice(i, i + 1),)] for i in range(n)]
        return [x[(slice(None),) * axis + (i,)] for i in range(n)]
    s = np.asarray(split)
    if s.dtype.kind not in "iu":
        raise ctx.error(f"'split' must be int32 or int64, found {s.dtype}")
    if s.ndim == 0:
        size = int(s)
        if size <= 0:
            raise ctx.error(f"a scalar 'split' must be positive, found {size}")
        lengths = [size] * (n // size) + ([n % size] if n % size else [])
    elif s.ndim == 1:
        lengths = [int(v) for v in s]
        if any(v < 0 for v in lengths) or sum(lengths) != n:
            raise ctx.error(
                f"'split' {lengths} must hold non-negative lengths adding up to the axis length {n}"
            )
    else:
        raise ctx.error(f"'split' must be a scalar or 1-D, found shape {s.shape}")
    out, start = [], 0
    for length in lengths:
        out.append(x[(slice(None),) * axis + (slice(start, start + length),)])
        start += length
    return out


@onnx_op("ConcatFromSequence", since=11)
def concat_from_sequence(ctx, input_sequence, *, axis=None, new_axis):
    """Concatenate the sequence's tensors along ``axis`` (``new_axis=1``: stack them along a
    new axis inserted at ``axis``, which may then range over ``[-r-1, r]``)."""
    seq = _as_sequence(ctx, input_sequence, "'input_sequence'")
    if axis is None:
        raise ctx.error("the 'axis' attribute is required")
    if not seq:
        raise ctx.error("cannot concatenate an empty sequence: its shape is unknown")
    arrays = [np.asarray(a) for a in seq]
    rank = arrays[0].ndim + (1 if new_axis else 0)
    if not -rank <= axis < rank or rank == 0:
        raise ctx.error(f"'axis' {axis} is out of range for rank {rank}")
    try:
        if new_axis:
            return np.stack(arrays, axis=axis)
        return np.concatenate(arrays, axis=axis)
    except ValueError as exc:
        raise ctx.error(
            f"the tensors' shapes {[list(a.shape) for a in arrays]} cannot be joined along "
            f"axis {axis}: {exc}"
        ) from None


# ---------------------------------------------------------------------------------------------
# SequenceMap


@onnx_op("SequenceMap", since=17)
def sequence_map(ctx, input_sequence, *additional_inputs, body=None):
    """Run ``body`` once per element of ``input_sequence``; return one sequence per output.

    Additional inputs that are sequences are indexed alongside (they must have the same
    length); tensors are passed whole to every iteration.
    """
    seq = _as_sequence(ctx, input_sequence, "'input_sequence'")
    additional_inputs = tuple(list(e) if isinstance(e, tuple) else e for e in additional_inputs)
    n = len(seq)
    n_in = 1 + len(additional_inputs)
    if len(body.input_names) != n_in:
        raise ctx.error(f"the body takes {len(body.input_names)} inputs but the node passes {n_in}")
    for k, extra in enumerate(additional_inputs):
        if isinstance(extra, list) and len(extra) != n:
            raise ctx.error(
                f"additional input {k} is a sequence of {len(extra)} tensors but "
                f"'input_sequence' has {n}; sequences must have the same length"
            )
    outs: list[list[Any]] = [[] for _ in body.output_names]
    for i in range(n):
        args = [seq[i]] + [e[i] if isinstance(e, list) else e for e in additional_inputs]
        results = ctx.run_subgraph(body, args)
        for k, value in enumerate(results):
            outs[k].append(value)
    if len(outs) != ctx.n_outputs:
        raise ctx.error(
            f"the body returns {len(outs)} values but the node has {ctx.n_outputs} outputs"
        )
    return tuple(outs)


# ---------------------------------------------------------------------------------------------
# Optionals


@onnx_op("Optional", since=15)
def optional(input=None, *, type=None):
    """An optional holding ``input``, or the empty optional (``None``) when it is omitted."""
    return input


@onnx_op("OptionalHasElement", since=15)
@onnx_op("OptionalHasElement", since=18)
def optional_has_element(input=None):
    """True (a bool scalar) when the optional holds a value; an omitted input (18) is empty."""
    return np.array(input is not None, dtype=bool)


@onnx_op("OptionalGetElement", since=15)
@onnx_op("OptionalGetElement", since=18)
def optional_get_element(ctx, input=None):
    """The value an optional holds; a plain tensor or sequence (18) is returned as it is."""
    if input is None:
        raise ctx.error("the optional is empty; guard the read with OptionalHasElement and an If")
    return input
