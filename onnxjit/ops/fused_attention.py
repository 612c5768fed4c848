"""Internal operator ``SDPA``: the attention subgraph the ``attention_fusion`` pass replaces.

The node stands for exactly this sequence of standard operators (see
onnxjit/passes/patterns_attention.py for the patterns that produce it)::

    kt = k                      if k_transposed else swap the last two axes of k
    s  = MatMul(q, kt) * scale  (scale: the product of every constant Mul/Div of the pattern)
    s  = s + mask               (when a mask input is given)   } in this order, or the reverse
    s  = Where(cond, s, fill)   (when a cond input is given;   } when where_first; swap puts s
                                 Where(cond, fill, s) if swap) } in the false branch
    p  = Softmax(s, axis=-1)
    p  = Where(IsNaN(p), 0, p)  (when nan_to_zero)
    y  = MatMul(p, v)

``q_bshd``, ``k_bshd``, ``v_bshd`` say that the input is given in the (batch, seq, heads,
dim) layout of the projections and stands for its Transpose(perm=[0, 2, 1, 3]) (the head
split exporters write, folded in: the kernel reads each head in place with a row stride of
heads * dim); ``y_bshd`` that the node's output is that Transpose of ``y`` (the merge of the
heads, written in place). ``k_bshd`` describes K itself, so it comes with ``k_transposed = 0``.

The fast path covers Q/K/V of rank 2 to 4 whose batch dimensions broadcast like MatMul's and
masks that do not widen the scores: one batched BLAS matmul for Q K^T, one Numba pass per row
for scale, masks and softmax (in place, masks read through their broadcast layout), one batched
BLAS matmul for P V. Anything else (rank 5 and more, a mask that broadcasts the scores to a
larger shape) takes a numpy path with the same semantics. float16/bfloat16 compute in float32.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from onnxjit.backends.cpu import pool, threads
from onnxjit.backends.cpu.pool import run_parallel
from onnxjit.buffers import Slot
from onnxjit.kernels import _jit
from onnxjit.kernels.cpu import sdpa as ksdpa
from onnxjit.ops.gemm import PARALLEL_MACS
from onnxjit.registry import MISS, NodeContext, fast_path, internal_op

_DUMMY = {}


def _dummy(dtype: np.dtype) -> np.ndarray:
    """A (1, 1, 1, 1) stand-in for an absent mask (one array per dtype, never written)."""
    d = _DUMMY.get(dtype)
    if d is None:
        d = _DUMMY[dtype] = np.zeros((1, 1, 1, 1), dtype=dtype)
    return d


def _as_4d(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` left-padded to rank 4 with its last dimension widened to ``n``, C-contiguous."""
    a = a.reshape((1,) * (4 - a.ndim) + a.shape)
    if a.shape[3] != n:
        a = np.broadcast_to(a, a.shape[:3] + (n,))
    return np.ascontiguousarray(a)


def _reference(
    q: np.ndarray,
    kt: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None,
    cond: np.ndarray | None,
    scale: float,
    fill: float,
    swap: bool,
    where_first: bool,
    nan_to_zero: bool,
) -> np.ndarray:
    """The unfused sequence with numpy (every shape the standard operators accept)."""
    s = np.matmul(q, kt)
    s = s * s.dtype.type(scale)

    def _where(s: np.ndarray) -> np.ndarray:
        f = s.dtype.type(fill)
        return np.where(cond, f, s) if swap else np.where(cond, s, f)

    if where_first and cond is not None:
        s = _where(s)
    if mask is not None:
        s = s + mask
    if not where_first and cond is not None:
        s = _where(s)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
    if nan_to_zero:
        p = np.where(np.isnan(p), p.dtype.type(0), p)
    return np.matmul(p, v)


@internal_op("SDPA")
def sdpa(
    ctx: NodeContext,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None = None,
    cond: np.ndarray | None = None,
    *,
    scale: float = 1.0,
    k_transposed: int = 0,
    k_rank: int = 0,
    fill: float = 0.0,
    swap: int = 0,
    where_first: int = 0,
    nan_to_zero: int = 0,
    q_bshd: int = 0,
    k_bshd: int = 0,
    v_bshd: int = 0,
    y_bshd: int = 0,
) -> np.ndarray:
    """Fused attention (see the module docstring for the exact semantics).

    ``k`` is K ([..., sk, d]) when ``k_transposed`` is 0 (the graph's Transpose of K, which
    swapped the last two of ``k_rank`` axes, is folded in), else K^T ([..., d, sk]).
    """
    _LAST.runner = None
    given = (q, k, v)
    layouts = (bool(q_bshd), bool(k_bshd), bool(v_bshd))
    if k_bshd and k_transposed:
        raise ctx.error("k_bshd describes K, not K^T: it needs k_transposed = 0")
    for name, a, flag in zip("QKV", given, layouts):
        if flag and a.ndim != 4:
            raise ctx.error(
                f"{name} is declared in (batch, seq, heads, dim) layout but has shape {a.shape}; "
                "expected rank 4"
            )
    q, k, v = (a.transpose(0, 2, 1, 3) if flag else a for a, flag in zip(given, layouts))
    y, wrote_bshd = _sdpa(ctx, q, k, v, mask, cond, given, layouts, bool(y_bshd), scale,
                          k_transposed, k_rank, fill, swap, where_first, nan_to_zero)  # fmt: skip
    if y_bshd and not wrote_bshd:
        _LAST.runner = None  # the fast path would skip this transpose
        if y.ndim != 4:
            raise ctx.error(f"the output is declared in (batch, seq, heads, dim) layout but has "
                            f"shape {y.shape}; expected rank 4")  # fmt: skip
        y = np.ascontiguousarray(y.transpose(0, 2, 1, 3))
    return y


def _sdpa(ctx, q, k, v, mask, cond, given, layouts, y_bshd, scale, k_transposed, k_rank, fill,
          swap, where_first, nan_to_zero) -> tuple[np.ndarray, bool]:  # fmt: skip
    """The attention of logical (b, h, s, d) operands and whether it is already in (b, s, h,
    d) layout (only when ``y_bshd`` asks for it); ``given`` holds the operands as the node got
    them and ``layouts`` which were in (b, s, h, d) layout (the per-head kernel reads those
    in place)."""
    dtype = q.dtype
    if not k_transposed and k_rank and k.ndim != k_rank:
        raise ctx.error(
            f"the Transpose of K folded into this attention has a perm of length {k_rank}, "
            f"but K has rank {k.ndim}"
        )
    if k.ndim < 2:
        raise ctx.error(f"K must have rank 2 or more, got shape {k.shape}")
    kt = k if k_transposed else np.swapaxes(k, -1, -2)
    narrow = dtype in (np.float16,) or dtype.name == "bfloat16"
    cdt = np.dtype(np.float32) if narrow else dtype
    args = (bool(swap), bool(where_first), bool(nan_to_zero))
    fast = (
        (dtype in (np.float32, np.float64) or narrow)
        and 2 <= q.ndim <= 4
        and kt.ndim <= 4
        and 2 <= v.ndim <= 4
    )
    if fast:
        try:
            batch = np.broadcast_shapes(q.shape[:-2], kt.shape[:-2])
        except ValueError:
            fast = False
    if fast:
        sq, sk = q.shape[-2], kt.shape[-1]
        shape = batch + (sq, sk)
        fast = q.shape[-1] == kt.shape[-2] and v.shape[-2] == sk
        for extra in (mask, cond):
            if extra is not None and fast:
                try:
                    fast = extra.ndim <= 4 and np.broadcast_shapes(shape, extra.shape) == shape
                except ValueError:
                    fast = False
        if fast and mask is not None:
            fast = mask.dtype == dtype
        if fast and cond is not None:
            fast = cond.dtype == np.bool_
    if not fast:
        c = [None if a is None else a.astype(cdt) for a in (q, kt, v, mask)]
        y = _reference(c[0], c[1], c[2], c[3], cond, scale, fill, *args)
        return y.astype(dtype, copy=False), False
    if narrow:
        q, kt, v = q.astype(cdt), kt.astype(cdt), v.astype(cdt)
        mask = None if mask is None else mask.astype(cdt)
        k = kt if k_transposed else np.swapaxes(kt, -1, -2)
    vb = v.shape[:-2]
    if len(vb) <= len(batch) and all(x in (1, y) for x, y in zip(vb[::-1], batch[::-1])):
        # V broadcasts into the scores' batch: one kernel does each head from end to end
        if narrow:  # converted copies in the logical layout
            given, layouts = (q, k, v), (False, False, False)
        wrote = y_bshd and len(batch) == 2
        y = _by_heads(q, k, bool(k_transposed), v, given, layouts, wrote, mask, cond, batch,
                      cdt, scale, fill, args)  # fmt: skip
        return y.astype(dtype, copy=False), wrote
    s = np.matmul(q, kt)  # batched BLAS, fresh and C-contiguous
    s = np.ascontiguousarray(s, dtype=cdt)
    s4 = s.reshape((1,) * (4 - s.ndim) + s.shape)
    nh = s4.shape[1]
    m4 = _dummy(cdt) if mask is None else _as_4d(mask, sk)
    c4 = _dummy(np.dtype(np.bool_)) if cond is None else _as_4d(cond, sk)
    if s.size == 0:
        return np.matmul(s, v).astype(dtype, copy=False), False
    rows = s.reshape(-1, sk)
    kargs = (
        rows,
        nh,
        sq,
        m4,
        c4,
        mask is not None,
        cond is not None,
        cdt.type(scale),
        cdt.type(fill),
        *args,
    )
    if rows.size >= _jit.PARALLEL_THRESHOLD:
        run_parallel(ksdpa.attention_rows_par, *kargs)
    else:
        ksdpa.attention_rows(*kargs)
    y = np.matmul(s, v)
    return y.astype(dtype, copy=False), False


def _flat_heads(a: np.ndarray, bshd: bool, cdt: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """An operand of rank 2 to 4 as flat C-contiguous ``cdt`` data and its (batch, head, row)
    element strides, batch and head 0 where the dim is 1 (broadcast). ``bshd``: ``a`` is in
    (b, s, h, d) layout and stands for its [0, 2, 1, 3] transpose, read in place."""
    a = np.ascontiguousarray(a, dtype=cdt)
    if bshd:
        nb, s, nh, d = a.shape
        strides = [s * nh * d if nb > 1 else 0, d if nh > 1 else 0, nh * d]
    else:
        a = a.reshape((1,) * (4 - a.ndim) + a.shape)
        nb, nh, s, d = a.shape
        strides = [nh * s * d if nb > 1 else 0, s * d if nh > 1 else 0, d]
    return a.reshape(-1), np.array(strides, np.int64)


_LAST = threading.local()  # the heads runner of this thread's last SDPA (for _prepare)


def _by_heads(
    q, k, k_given_t, v, given, layouts, y_bshd, mask, cond, batch, cdt, scale, fill, opts
) -> np.ndarray:
    """The fast path: :func:`onnxjit.kernels.cpu.sdpa.heads` over every (batch, head) pair.
    ``q``, ``k``, ``v`` are the logical operands, ``given`` the arrays they view and
    ``layouts`` which of those are in (b, s, h, d) layout; ``y_bshd`` (``batch`` of length
    2 only) writes the result in that layout."""
    nb, nh = (1,) * (2 - len(batch)) + tuple(batch)
    sq, d = q.shape[-2:]
    sk = k.shape[-1] if k_given_t else k.shape[-2]
    dv = v.shape[-1]
    if nb * nh * sq * dv == 0 or sk == 0 or d == 0:
        kt = k if k_given_t else np.swapaxes(k, -1, -2)
        c = [a.astype(cdt) for a in (q, kt, v)]
        y = _reference(c[0], c[1], c[2], mask, cond, scale, fill, *opts)
        return np.ascontiguousarray(y.transpose(0, 2, 1, 3)) if y_bshd else y
    qf, qs = _flat_heads(given[0], layouts[0], cdt)
    kf, ks = _flat_heads(given[1], layouts[1], cdt)
    vf, vs = _flat_heads(given[2], layouts[2], cdt)
    run = _heads_runner(batch, sq, d, sk, dv, qs, ks, k_given_t, vs, y_bshd, cdt, scale, fill,
                        opts, qf)  # fmt: skip
    _LAST.runner = run
    return run(qf, kf, vf, mask, cond)


def _heads_runner(
    batch, sq, d, sk, dv, qs, ks, k_given_t, vs, y_bshd, cdt, scale, fill, opts, sample
):
    """``run(qf, kf, vf, mask, cond)`` for flat C-contiguous Q, K, V of these shapes and
    layouts (the kernel, its pool entry and every size fixed); the result is (*batch, sq,
    dv), or (nb, sq, nh, dv) when ``y_bshd``."""
    nb, nh = (1,) * (2 - len(batch)) + tuple(batch)
    if not k_given_t and sq <= ksdpa.BLAS_ROWS:
        threads.blas_ready()  # Q K^T with K as stored goes to BLAS (kernels/cpu/sdpa.py)
    t = cdt.type
    tail_scale, tail_opts = t(scale), (t(fill), *opts)
    if y_bshd:
        y_shape = (nb, sq, nh, dv)
        ys = np.array([sq * nh * dv, dv, nh * dv], np.int64)
    else:
        y_shape = (*batch, sq, dv)
        ys = np.array([nh * sq * dv, sq * dv, dv], np.int64)
    dummy_f, dummy_b = _dummy(cdt), _dummy(np.dtype(np.bool_))
    kernel = ksdpa.heads
    if nb * nh > 1 and nb * nh * sq * sk * (d + dv) >= PARALLEL_MACS:
        s0 = np.empty((1, sk), cdt)
        masks0 = (dummy_f, dummy_b, False, False)
        sample_args = (nb * nh, sample, qs, sample, ks, k_given_t, sample, vs, s0, sample, ys)
        sample_args += (nh, sq, d, dv, masks0, tail_scale, tail_opts)
        kernel = pool.bind(ksdpa.heads_par, sample_args, threads.current())

    y_slot = Slot(y_shape, cdt)
    s_slot = Slot((nb * nh * sq, sk), cdt, scratch=True)

    def run(qf, kf, vf, mask, cond):
        y = y_slot.get()
        s = s_slot.get()
        masks = (
            dummy_f if mask is None else _as_4d(mask, sk),
            dummy_b if cond is None else _as_4d(cond, sk),
            mask is not None,
            cond is not None,
        )
        kernel(nb * nh, qf, qs, kf, ks, k_given_t, vf, vs, s, y.reshape(-1), ys, nh, sq, d,
               dv, masks, tail_scale, tail_opts)  # fmt: skip
        return y

    return run


@fast_path(sdpa)
def _prepare(ctx: NodeContext, args: tuple, kwargs: dict, result: Any) -> Any:
    """SDPA on float32/float64 Q, K, V of fixed shapes that took the per-head kernel."""
    run = getattr(_LAST, "runner", None)
    _LAST.runner = None
    q, k, v = args[0], args[1], args[2]
    if run is None or q.dtype not in (np.float32, np.float64):
        return None
    if not all(type(a) is np.ndarray and a.flags.c_contiguous for a in (q, k, v)):
        return None
    extras = tuple(args[3:])
    shapes = (q.shape, k.shape, v.shape)
    dtype = q.dtype
    extra_kinds = tuple(None if e is None else (e.shape, e.dtype) for e in extras)

    def fast(q2: Any, k2: Any, v2: Any, *rest: Any) -> Any:
        if (
            (q2.shape, k2.shape, v2.shape) != shapes
            or q2.dtype != dtype
            or k2.dtype != dtype
            or v2.dtype != dtype
            or not (q2.flags.c_contiguous and k2.flags.c_contiguous and v2.flags.c_contiguous)
            or len(rest) != len(extras)
        ):
            return MISS
        for e, kind in zip(rest, extra_kinds):
            if (e is None) != (kind is None) or (e is not None and (e.shape, e.dtype) != kind):
                return MISS
        mask = rest[0] if len(rest) > 0 else None
        cond = rest[1] if len(rest) > 1 else None
        return run(q2.reshape(-1), k2.reshape(-1), v2.reshape(-1), mask, cond)

    return fast
