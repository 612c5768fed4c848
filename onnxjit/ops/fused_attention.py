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

Q/K/V of rank 2 to 4 whose batch dimensions broadcast like MatMul's, with V broadcasting into
the scores' batch and masks that do not widen the scores, run the backend's ``sdpa.heads``
kernel: each (batch, head) pair from end to end (Q K^T, scale, masks and softmax per row, P V),
reading operands in (batch, seq, heads, dim) layout in place. Its lowering binds that call once
per plan (strides, sizes, thread choice, the scores' scratch buffer). Other batch layouts take
one batched BLAS matmul for Q K^T, the ``sdpa.attention_rows`` pass per row and one batched
BLAS matmul for P V; anything else (rank 5 and more, a mask that broadcasts the scores to a
larger shape) takes a numpy path with the same semantics. float16/bfloat16 compute in float32.
"""

from __future__ import annotations

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
from onnxjit.ops.gemm import PARALLEL_MACS
from onnxjit.registry import NodeContext, internal_op

_DUMMY = {}


def _dummy(dtype: np.dtype) -> np.ndarray:
    """A (1, 1, 1, 1) stand-in for an absent mask (one array per dtype, never written)."""
    d = _DUMMY.get(dtype)
    if d is None:
        d = _DUMMY[dtype] = np.zeros((1, 1, 1, 1), dtype=dtype)
    return d


def _as_4d(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` left-padded to rank 4 with its last dimension widened to ``n``, C-contiguous."""
    a = _rank4(a)
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
        y = _by_heads(ctx, q, k, bool(k_transposed), v, given, layouts, wrote, mask, cond,
                      batch, cdt, scale, fill, args)  # fmt: skip
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
    ctx.run_kernel("sdpa", "attention_rows", rows.size, *kargs)
    y = np.matmul(s, v)
    return y.astype(dtype, copy=False), False


def _strides(shape: tuple[int, ...], bshd: bool) -> np.ndarray:
    """The (batch, head, row) element strides of a C-contiguous operand of rank 2 to 4, batch
    and head 0 where the dim is 1 (broadcast). ``bshd``: the operand is in (b, s, h, d) layout
    and stands for its [0, 2, 1, 3] transpose, read in place."""
    if bshd:
        nb, s, nh, d = shape
        return np.array([s * nh * d if nb > 1 else 0, d if nh > 1 else 0, nh * d], np.int64)
    nb, nh, s, d = (1,) * (4 - len(shape)) + tuple(shape)
    return np.array([nh * s * d if nb > 1 else 0, s * d if nh > 1 else 0, d], np.int64)


def _heads_work(nb: int, nh: int, sq: int, sk: int, d: int, dv: int) -> int:
    """The work figure of the heads kernel for the backend's thread choice (from
    ``PARALLEL_MACS`` multiply-adds on, when there is more than one head)."""
    return nb * nh * sq * sk * (d + dv) if nb * nh > 1 else 0


def _by_heads(
    ctx, q, k, k_given_t, v, given, layouts, y_bshd, mask, cond, batch, cdt, scale, fill, opts
) -> np.ndarray:
    """Attention through the backend's ``sdpa.heads`` kernel over every (batch, head) pair.
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
    flat = [np.ascontiguousarray(a, dtype=cdt) for a in given]
    qs, ks, vs = (_strides(a.shape, bshd) for a, bshd in zip(flat, layouts))
    y_shape, ys = _out_layout(batch, nb, nh, sq, dv, y_bshd)
    backend = ctx.backend
    if not k_given_t and sq <= backend.kernel("sdpa", "BLAS_ROWS"):
        backend.blas_ready()  # Q K^T with K as stored goes to BLAS (kernels/cpu/sdpa.py)
    y = np.empty(y_shape, cdt)
    s = np.empty((nb * nh * sq, sk), cdt)
    masks = _masks(mask, cond, sk, cdt)
    t = cdt.type
    args = (nb * nh, flat[0].reshape(-1), qs, flat[1].reshape(-1), ks, k_given_t,
            flat[2].reshape(-1), vs, s, y.reshape(-1), ys, nh, sq, d, dv, masks, t(scale),
            (t(fill), *opts))  # fmt: skip
    work = _heads_work(nb, nh, sq, sk, d, dv)
    backend.run("sdpa", "heads", work, *args, threshold=PARALLEL_MACS)
    return y


def _out_layout(batch, nb, nh, sq, dv, y_bshd) -> tuple[tuple[int, ...], np.ndarray]:
    """The heads kernel's output shape and its (batch, head, row) element strides."""
    if y_bshd:
        return (nb, sq, nh, dv), np.array([sq * nh * dv, dv, nh * dv], np.int64)
    return (*batch, sq, dv), np.array([nh * sq * dv, sq * dv, dv], np.int64)


def _masks(mask: np.ndarray | None, cond: np.ndarray | None, sk: int, cdt: np.dtype) -> tuple:
    """The heads kernel's ``masks`` argument: (mask, cond) as 4-D C-contiguous arrays widened
    to ``sk`` columns (stand-ins where absent) and whether each is given."""
    return (
        _dummy(cdt) if mask is None else _as_4d(mask, sk),
        _dummy(np.dtype(np.bool_)) if cond is None else _as_4d(cond, sk),
        mask is not None,
        cond is not None,
    )


# -- lowering (see onnxjit.lowering) -------------------------------------------------------------
def _logical(shape: tuple[int, ...], bshd: bool) -> tuple[int, ...]:
    return (shape[0], shape[2], shape[1], shape[3]) if bshd else shape


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


@lowers(sdpa)
def _lower_sdpa(lc: LowerContext) -> Bound | None:
    """SDPA on float32/float64 operands that the heads kernel takes (see the module
    docstring): its call bound once, with every stride and size, the thread choice and the
    scores' scratch buffer (an extra output); a constant mask or condition is widened once.
    Anything else runs the implementation."""
    specs = list(lc.inputs) + [None] * (5 - len(lc.inputs))
    q, k, v, mask, cond = specs[:5]
    if not all(s is not None and s.kind == TENSOR for s in (q, k, v)):
        return None
    for s in (mask, cond):
        if s is not None and s.kind != TENSOR:
            return None
    dtype = q.dtype
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        return None
    if k.dtype != dtype or v.dtype != dtype:
        return None
    a = lc.attrs
    k_t = bool(a["k_transposed"])
    layouts = (bool(a["q_bshd"]), bool(a["k_bshd"]), bool(a["v_bshd"]))
    if layouts[1] and k_t:
        return None
    if any(flag and s.ndim != 4 for s, flag in zip((q, k, v), layouts)):
        return None
    qsh, ksh, vsh = (_logical(s.shape, flag) for s, flag in zip((q, k, v), layouts))
    if len(ksh) < 2 or (not k_t and a["k_rank"] and len(ksh) != a["k_rank"]):
        return None
    kt = ksh if k_t else ksh[:-2] + (ksh[-1], ksh[-2])
    if not (2 <= len(qsh) <= 4 and len(kt) <= 4 and 2 <= len(vsh) <= 4):
        return None
    batch = _broadcast(qsh[:-2], kt[:-2])
    if batch is None:
        return None
    sq, d, sk, dv = qsh[-2], qsh[-1], kt[-1], vsh[-1]
    if d != kt[-2] or vsh[-2] != sk:
        return None
    scores = batch + (sq, sk)
    for s, want in ((mask, dtype), (cond, np.dtype(np.bool_))):
        if s is not None and (
            s.ndim > 4 or s.dtype != want or _broadcast(scores, s.shape) != scores
        ):
            return None
    vb = vsh[:-2]
    if len(vb) > len(batch) or not all(x in (1, y) for x, y in zip(vb[::-1], batch[::-1])):
        return None  # V does not broadcast into the scores' batch: the implementation's matmuls
    y_bshd = bool(a["y_bshd"])
    if y_bshd and len(batch) != 2:
        return None
    nb, nh = (1,) * (2 - len(batch)) + tuple(batch)
    if nb * nh * sq * dv == 0 or sk == 0 or d == 0:
        return None
    return _bind_heads(lc, (q, k, v), layouts, k_t, mask, cond, batch, (nb, nh, sq, d, sk, dv))


def _bind_heads(lc: LowerContext, operands, layouts, k_t, mask, cond, batch, sizes) -> Bound:
    nb, nh, sq, d, sk, dv = sizes
    dtype = operands[0].dtype
    t = dtype.type
    a = lc.attrs
    qs, ks, vs = (_strides(s.shape, bshd) for s, bshd in zip(operands, layouts))
    y_shape, ys = _out_layout(batch, nb, nh, sq, dv, bool(a["y_bshd"]))
    if not k_t and sq <= lc.kernel("sdpa", "BLAS_ROWS"):
        lc.backend.blas_ready()  # Q K^T with K as stored goes to BLAS (kernels/cpu/sdpa.py)
    scale = t(a["scale"])
    opts = (t(a["fill"]), bool(a["swap"]), bool(a["where_first"]), bool(a["nan_to_zero"]))
    flat = np.empty(1, dtype)
    masks0 = _masks(None, None, sk, dtype)
    sample = (nb * nh, flat, qs, flat, ks, k_t, flat, vs, np.empty((1, sk), dtype), flat, ys,
              nh, sq, d, dv, masks0, scale, opts)  # fmt: skip
    work = _heads_work(nb, nh, sq, sk, d, dv)
    kernel = lc.backend.launcher("sdpa", "heads", work, sample, threshold=PARALLEL_MACS)
    outs = [tensor(dtype, y_shape), tensor(dtype, (nb * nh * sq, sk))]  # y, the scores
    q, k, v = (In(i, flat=True) for i in range(3))
    y, s = Out(0, flat=True), Out(1)
    extras = [(i, spec) for i, spec in ((3, mask), (4, cond)) if spec is not None]
    if all(lc.is_const(i) for i, _ in extras):
        masks = _masks(lc.const(3), lc.const(4), sk, dtype)
        return writes(kernel, nb * nh, q, qs, k, ks, k_t, v, vs, s, y, ys, nh, sq, d, dv, masks,
                      scale, opts, outs=outs, name="sdpa.heads")  # fmt: skip

    m = In(3) if mask is not None else None
    c = In(4) if cond is not None else None
    return writes(_heads_fed_masks, kernel, nb * nh, q, qs, k, ks, k_t, v, vs, s, y, ys, nh,
                  sq, d, dv, m, c, sk, dtype, scale, opts, outs=outs,
                  name="sdpa.heads")  # fmt: skip


def _heads_fed_masks(kernel, n_heads, q, qs, k, ks, k_t, v, vs, s, y, ys, nh, sq, d, dv, m, c,
                     sk, dtype, scale, opts) -> None:  # fmt: skip
    """The heads kernel with masks fed per run, brought to the kernel's form every run: on
    the host :func:`_masks`; on a device (``m``/``c`` device arrays), only padded to rank 4,
    since the device kernel reads a mask of one column as broadcast along the row."""
    if (m is None or isinstance(m, np.ndarray)) and (c is None or isinstance(c, np.ndarray)):
        masks = _masks(m, c, sk, dtype)
    else:
        masks = (
            _dummy(dtype) if m is None else _rank4(m),
            _dummy(np.dtype(np.bool_)) if c is None else _rank4(c),
            m is not None,
            c is not None,
        )
    kernel(n_heads, q, qs, k, ks, k_t, v, vs, s, y, ys, nh, sq, d, dv, masks, scale, opts)


def _rank4(a):
    return a.reshape((1,) * (4 - a.ndim) + tuple(a.shape))


portable(_heads_fed_masks)
