"""Control-flow operators: If, Loop, Scan.

Their graph attributes arrive bound as ``plan.Subgraph`` objects and run through
``ctx.run_subgraph(sub, inputs)``; values the bodies read from enclosing scopes are supplied
by the executor.

Registered versions: If 1 and 11 (11 lets the branches' output shapes differ; one body serves
both), Loop 1 and 11 (11 makes ``M`` and ``cond`` optional in the schema; the body already
accepted them omitted), Scan 8 (batched, with ``sequence_lens``) and 9 (unbatched, per-input
axes and directions; 11's negative axes are handled by the same body). The later versions of
each (If/Loop 13, 16, 19, 21, 23, 24, 25; Scan 16, 19, 21, 23, 24, 25) only widen the type
constraints (sequences, optionals, new element types), which these bodies pass through as they
are.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit import limits, scan_rows, types
from onnxjit.registry import NodeContext, onnx_op


def _as_bool(ctx: NodeContext, value: Any, what: str) -> bool:
    arr = np.asarray(value)
    if arr.size != 1:
        raise ctx.error(f"{what} must hold exactly one element, got shape {arr.shape}")
    return bool(arr.reshape(-1)[0])


def _detach(sub: Any, values: list[Any]) -> list[Any]:
    """Copy the arrays among ``values`` that share memory with the subgraph's initializers.

    A body may return one of its constants as it is (Identity, or a view by Reshape); the
    enclosing graph sees the node's output as a fresh value that it may overwrite in place,
    which would corrupt the constant for later runs.
    """
    consts = [c for c in sub.graph.initializers.values() if isinstance(c, np.ndarray)]
    if not consts:
        return values
    return [
        v.copy()
        if isinstance(v, np.ndarray) and any(np.may_share_memory(v, c) for c in consts)
        else v
        for v in values
    ]


# ---------------------------------------------------------------------------------------------
# If


@onnx_op("If", since=1)
@onnx_op("If", since=11)
def if_op(ctx, cond, *, else_branch=None, then_branch=None):
    """Run ``then_branch`` when ``cond`` is true, else ``else_branch``; return its outputs."""
    branch = then_branch if _as_bool(ctx, cond, "cond") else else_branch
    outs = ctx.run_subgraph(branch, [])
    if len(outs) != ctx.n_outputs:
        raise ctx.error(
            f"the selected branch produced {len(outs)} outputs but the node has "
            f"{ctx.n_outputs}; both branches must have one output per node output"
        )
    return tuple(_detach(branch, outs))


# ---------------------------------------------------------------------------------------------
# Loop


def _empty_scan_output(body: Any, index: int) -> np.ndarray:
    """A zero-iteration scan output: shape (0, ...) from the body's declared output type."""
    vi = body.graph.outputs[index]
    dtype = types.np_dtype(vi.elem_type) if vi.elem_type else np.dtype(np.float32)
    shape = vi.shape
    if shape is not None and all(isinstance(d, int) for d in shape):
        return np.zeros((0, *shape), dtype=dtype)
    return np.zeros((0,), dtype=dtype)


@onnx_op("Loop", since=1)
@onnx_op("Loop", since=11)
def loop(ctx, M=None, cond=None, *v_initial, body=None):
    """Run ``body`` while ``iteration < M`` (if M is given) and ``cond`` (if cond is given).

    The body takes ``(iteration_num, cond, *carried)`` and returns
    ``(cond, *carried, *scan_outputs)``; the node returns the final carried values followed by
    each scan output stacked along a new first axis.
    """
    n_carried = len(v_initial)
    n_body_out = len(body.output_names)
    n_scan = n_body_out - 1 - n_carried
    if n_scan < 0 or len(body.input_names) != 2 + n_carried:
        raise ctx.error(
            f"the body must take 2 + {n_carried} inputs and return 1 + {n_carried} + K outputs; "
            f"it takes {len(body.input_names)} and returns {n_body_out}"
        )
    max_trip = None
    if M is not None:
        m_arr = np.asarray(M)
        if m_arr.size != 1 or m_arr.dtype.kind not in "iu":
            raise ctx.error(
                f"the trip count M must be one integer (a scalar int64 tensor), found "
                f"{m_arr.dtype} of shape {list(m_arr.shape)}; feed a scalar"
            )
        max_trip = int(m_arr.reshape(-1)[0])
    keep_going = True if cond is None else _as_bool(ctx, cond, "cond")
    carried = list(v_initial)
    scans: list[list[Any]] = [[] for _ in range(n_scan)]
    i = 0
    run = body.iterations(ctx.outer)
    checked: list[Any] = [None] * n_carried  # (shape, dtype) of each carried value checked
    while keep_going and (max_trip is None or i < max_trip):
        outs = run([np.array(i, dtype=np.int64), np.array(keep_going, dtype=bool), *carried])
        carried = list(outs[1 : 1 + n_carried])
        for j, v in enumerate(carried):  # a value that grows every iteration meets the cap
            if isinstance(v, np.ndarray) and checked[j] != (v.shape, v.dtype):
                limits.check(ctx, v.shape, v.dtype, f"carried value of iteration {i}", False)
                checked[j] = (v.shape, v.dtype)
        for k in range(n_scan):
            v = outs[1 + n_carried + k]
            if isinstance(v, np.ndarray):  # the stack the scan output is growing into
                limits.check(ctx, (i + 1, *v.shape), v.dtype, f"scan output {k}", False)
            scans[k].append(v)
        if cond is not None:
            # Without a cond input the loop is a for loop and the body's cond is ignored.
            keep_going = _as_bool(ctx, outs[0], "the body's cond output")
        i += 1
    results: list[Any] = _detach(body, carried)
    for k in range(n_scan):
        if scans[k]:
            first = np.asarray(scans[k][0])
            limits.check(ctx, (len(scans[k]), *first.shape), first.dtype, f"scan output {k}")
            try:
                results.append(np.stack([np.asarray(v) for v in scans[k]]))
            except ValueError as exc:
                raise ctx.error(
                    f"scan output {k} changes shape between iterations ({exc}); every "
                    "iteration must produce the same shape"
                ) from None
        else:
            results.append(_empty_scan_output(body, 1 + n_carried + k))
    return tuple(results)


# ---------------------------------------------------------------------------------------------
# Scan


def _norm_axis(ctx: NodeContext, axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise ctx.error(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def _scan_core(
    ctx: NodeContext,
    body: Any,
    states: list[Any],
    scan_inputs: list[np.ndarray],
    in_axes: list[int],
    in_dirs: list[int],
    out_axes: list[int],
    out_dirs: list[int],
    length: int | None = None,
) -> list[Any]:
    """Unbatched scan: final states followed by the stacked scan outputs."""
    n_state = len(states)
    n_scan_out = len(body.output_names) - n_state
    if n_scan_out < 0:
        raise ctx.error(
            f"the body returns {len(body.output_names)} values but there are {n_state} states"
        )
    if length is None:
        lengths = {x.shape[a] for x, a in zip(scan_inputs, in_axes)}
        if len(lengths) > 1:
            raise ctx.error(
                f"scan inputs have different lengths along their scan axes: {sorted(lengths)}"
            )
        length = lengths.pop() if lengths else 0
    # Each scan input with its scan axis first and in the order the iterations read it, so
    # that iteration t takes row t: a C-contiguous view (a copy only for an axis other than
    # the first), which the body's plan takes as it is.
    rows = []
    for x, a, d in zip(scan_inputs, in_axes, in_dirs):
        if a:
            x = np.ascontiguousarray(np.moveaxis(x, a, 0))
        rows.append(x[length - 1 :: -1] if d and length else x)
    per_out: list[list[Any]] = [[] for _ in range(n_scan_out)]
    run = body.iterations(ctx.outer)
    it = 0
    blocked = False  # whether per_out holds each scan output's rows in one array
    while it < length:
        inputs = [*states, *[x[it] for x in rows]]
        outs = run(inputs)
        states = outs[:n_state]
        for k in range(n_scan_out):
            per_out[k].append(outs[n_state + k])
        it += 1
        if it == 1 and length > 1:
            blocks = _row_blocks(ctx, body, n_state, inputs, rows, length)
            if blocks is not None:
                for k in range(n_scan_out):
                    per_out[k] = [np.concatenate([np.asarray(per_out[k][0])[None], *blocks[k]])]
                blocked = True
                break
    results: list[Any] = _detach(body, states)
    for k in range(n_scan_out):
        vals = per_out[k]
        if not vals:
            results.append(_empty_scan_output(body, n_state + k))
            continue
        stacked = vals[0] if blocked else np.stack(vals)
        if out_dirs[k]:
            stacked = stacked[::-1]
        axis = _norm_axis(ctx, out_axes[k], stacked.ndim, "scan_output_axes entry")
        if axis or out_dirs[k]:
            stacked = np.ascontiguousarray(np.moveaxis(stacked, 0, axis))
        results.append(stacked)
    return results


def _row_blocks(
    ctx: NodeContext,
    body: Any,
    n_state: int,
    first: list[Any],
    rows: list[np.ndarray],
    length: int,
) -> list[list[np.ndarray]] | None:
    """Rows 1 to ``length`` of every scan output, computed in blocks of rows by the body's
    batched form (:mod:`onnxjit.scan_rows`), or None where the body has none (its states
    change, or a node has no row rule). ``first`` are the inputs of iteration 0, which has
    run: its states are every iteration's."""
    if not all(type(x) is np.ndarray for x in first):
        return None
    plan = body.program.plan_of(first, ctx.outer)
    if plan is None or plan.continuations:
        return None
    rows_body = scan_rows.batched(body, n_state, scan_rows.specs_by_name(body, plan))
    if rows_body is None:
        return None
    step = rows_body.block()
    states = first[:n_state]
    run = rows_body.program_runner(ctx.outer)
    blocks: list[list[np.ndarray]] = [[] for _ in range(len(body.output_names) - n_state)]
    for lo in range(1, length, step):
        outs = run([*states, *[x[lo : lo + step] for x in rows]])
        for k, v in enumerate(outs):
            blocks[k].append(v)
    return blocks


def _attr_list(value: list[int] | None, n: int, default: int = 0) -> list[int]:
    return list(value) if value else [default] * n


@onnx_op("Scan", since=9)
@onnx_op("Scan", since=11)
def scan_9(
    ctx, *initial_state_and_scan_inputs, body=None, num_scan_inputs=None,
    scan_input_axes=None, scan_input_directions=None, scan_output_axes=None,
    scan_output_directions=None,
):  # fmt: skip
    """Scan-9/11: N states then M scan inputs (no batch axis); per-input scan axes and
    directions, per-output stacking axes and directions (negative axes allowed from 11)."""
    vals = list(initial_state_and_scan_inputs)
    m = int(num_scan_inputs)
    n_state = len(vals) - m
    if n_state < 0:
        raise ctx.error(f"num_scan_inputs={m} exceeds the {len(vals)} inputs")
    states, scan_inputs = vals[:n_state], [np.asarray(v) for v in vals[n_state:]]
    n_scan_out = len(body.output_names) - n_state
    in_axes = [
        _norm_axis(ctx, a, x.ndim, "scan_input_axes entry")
        for a, x in zip(_attr_list(scan_input_axes, m), scan_inputs)
    ]
    in_dirs = _attr_list(scan_input_directions, m)
    out_axes = _attr_list(scan_output_axes, n_scan_out)
    out_dirs = _attr_list(scan_output_directions, n_scan_out)
    for name, lst, n in (
        ("scan_input_axes", in_axes, m),
        ("scan_input_directions", in_dirs, m),
        ("scan_output_axes", out_axes, n_scan_out),
        ("scan_output_directions", out_dirs, n_scan_out),
    ):
        if len(lst) != n:
            raise ctx.error(f"{name} has {len(lst)} entries, expected {n}")
    return tuple(_scan_core(ctx, body, states, scan_inputs, in_axes, in_dirs, out_axes, out_dirs))


@onnx_op("Scan", since=8)
def scan_8(
    ctx, sequence_lens=None, *initial_state_and_scan_inputs, body=None, directions=None,
    num_scan_inputs=None,
):  # fmt: skip
    """Scan-8: every input has a leading batch axis; scan inputs are scanned along axis 1.

    Each batch row runs separately for its ``sequence_lens`` entry (default: the full length);
    scan outputs of shorter rows are zero-padded to the longest row.
    """
    vals = [np.asarray(v) for v in initial_state_and_scan_inputs]
    m = int(num_scan_inputs)
    n_state = len(vals) - m
    if n_state < 0:
        raise ctx.error(f"num_scan_inputs={m} exceeds the {len(vals)} inputs")
    states, scan_inputs = vals[:n_state], vals[n_state:]
    dirs = _attr_list(directions, m)
    n_batch = vals[0].shape[0] if vals else 0
    n_seq = scan_inputs[0].shape[1] if scan_inputs else 0
    if sequence_lens is None:
        lens = np.full(n_batch, n_seq, dtype=np.int64)
    else:
        lens = np.asarray(sequence_lens).astype(np.int64).reshape(-1)
        if lens.shape != (n_batch,) or (lens.size and (lens.min() < 0 or lens.max() > n_seq)):
            raise ctx.error(
                f"sequence_lens must hold {n_batch} values in [0, {n_seq}], got {lens.tolist()}"
            )
    n_scan_out = len(body.output_names) - n_state
    rows: list[list[Any]] = []
    for b in range(n_batch):
        L = int(lens[b])
        row_states = [s[b] for s in states]
        row_inputs = [x[b, :L] for x in scan_inputs]
        rows.append(
            _scan_core(
                ctx,
                body,
                row_states,
                row_inputs,
                [0] * m,
                dirs,
                [0] * n_scan_out,
                [0] * n_scan_out,
                length=L,
            )  # fmt: skip
        )
    results: list[Any] = []
    for k in range(n_state):
        results.append(np.stack([np.asarray(r[k]) for r in rows]))
    for k in range(n_state, n_state + n_scan_out):
        full = [r[k] for r in rows if r[k].shape[0] == n_seq]
        template = full[0] if full else max((r[k] for r in rows), key=lambda a: a.shape[0])
        out = np.zeros((n_batch, n_seq, *template.shape[1:]), dtype=template.dtype)
        for b, r in enumerate(rows):
            if r[k].shape[0]:
                out[b, : r[k].shape[0]] = r[k]
        results.append(out)
    return tuple(results)
