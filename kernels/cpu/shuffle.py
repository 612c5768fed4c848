"""Data movement that LLVM's loop vectoriser leaves scalar, written as explicit vector IR.

:func:`deinterleave2` splits a run of pairs into its even and odd elements: what a stride-2
convolution or pooling does to each input row to build its phase planes. Written as a Numba
loop (two stride-2 loads per step) LLVM vectorises it only for rows of more than twice the
vector width times its interleave count; the rows of CNN layers (28 to 56 pairs at 56 to 112
pixels) then ran element by element, about one cycle per element. Here each step loads two
vectors, shuffles them apart and stores one vector to each destination, and the last partial
step is masked, so any length runs in vectors.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .._jit import njit
from .ukernel import _I32, _I64, _geometry, _Vectors, float_arrays


def _define_deinterleave(module: ir.Module, fty: ir.Type, lanes: int, masked: bool) -> ir.Function:
    """``void f(src*, dst_a*, dst_b*, n)``: ``dst_a[i] = src[2 i]``, ``dst_b[i] = src[2 i +
    1]`` for ``i < n``. The last partial vector is one masked step (``masked``) or element
    by element: AVX2's masked stores (vmaskmovps) are microcoded on AMD Zen, and took most of
    this copy's time there (rows of 28 pairs, 4 of them in the masked step)."""
    tag = "f32" if isinstance(fty, ir.FloatType) else "f64"
    name = f"onnxjit_deinterleave2_{tag}_{lanes}{'' if masked else '_s'}"
    if name in module.globals:
        return module.globals[name]
    ptr = fty.as_pointer()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr, ptr, ptr, _I64]), name)
    fn.linkage = "internal"
    src, da, db, n = fn.args
    for arg in (src, da, db):
        arg.add_attribute("noalias")
    one = _Vectors(module, fty, lanes)
    two = _Vectors(module, fty, 2 * lanes)
    even = ir.Constant(ir.VectorType(_I32, lanes), [2 * i for i in range(lanes)])
    odd = ir.Constant(ir.VectorType(_I32, lanes), [2 * i + 1 for i in range(lanes)])
    undef = ir.Constant(two.vty, ir.Undefined)

    def step(builder: ir.IRBuilder, i: ir.Value, pairs: ir.Value | None) -> None:
        # one vector of pairs from element pair i; pairs: how many remain (masked), or None
        p = builder.bitcast(builder.gep(src, [builder.shl(i, ir.Constant(_I64, 1))]), two.vptr)
        m2 = (
            None
            if pairs is None
            else two.masks(builder, builder.shl(pairs, ir.Constant(_I64, 1)), 1)[0]
        )
        m1 = None if pairs is None else one.masks(builder, pairs, 1)[0]
        v = two.load(builder, p, m2)
        for dst, sel in ((da, even), (db, odd)):
            part = builder.shuffle_vector(v, undef, sel)
            one.store(builder, part, builder.bitcast(builder.gep(dst, [i]), one.vptr), m1)

    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    full = builder.and_(n, ir.Constant(_I64, -lanes))
    with cgutils.for_range_slice(builder, ir.Constant(_I64, 0), full, ir.Constant(_I64, lanes)) as (
        i,
        _,
    ):
        step(builder, i, None)
    if masked:
        rest = builder.sub(n, full)
        with builder.if_then(builder.icmp_signed(">", rest, ir.Constant(_I64, 0))):
            step(builder, full, rest)
    else:
        with cgutils.for_range_slice(builder, full, n, ir.Constant(_I64, 1)) as (i, _):
            two_i = builder.shl(i, ir.Constant(_I64, 1))
            for dst, k in ((da, 0), (db, 1)):
                v = builder.load(builder.gep(src, [builder.add(two_i, ir.Constant(_I64, k))]))
                builder.store(v, builder.gep(dst, [i]))
    builder.ret_void()
    return fn


@intrinsic
def deinterleave2(typingctx, src, s_off, dst, a_off, b_off, n):
    """``dst[a_off + i] = src[s_off + 2 i]`` and ``dst[b_off + i] = src[s_off + 2 i + 1]`` for
    ``0 <= i < n`` (1-D arrays of one float type, element offsets; the two runs of ``dst``
    must not overlap each other or ``src``'s). Nothing outside those elements is read or
    written (the last partial vector is masked). No bounds checks: callers keep the offsets
    in range."""
    dtype = float_arrays("deinterleave2", src, dst)
    sig = types.void(src, s_off, dst, a_off, b_off, n)

    def codegen(context, builder, sig, args):
        s_, soff, d_, aoff, boff, n_ = args
        sa = sig.args
        fty = context.get_value_type(dtype)
        itemsize = 4 if dtype == types.float32 else 8
        lanes = _geometry(context.codegen()._tm_features, itemsize)[0]
        masked = lanes * itemsize == 64  # 512-bit vectors: AVX-512, whose masked stores are cheap

        def at(idx, val, off_idx, off):
            ary = context.make_array(sa[idx])(context, builder, val)
            return builder.gep(ary.data, [context.cast(builder, off, sa[off_idx], types.int64)])

        fn = _define_deinterleave(builder.module, fty, lanes, masked)
        count = context.cast(builder, n_, sa[5], types.int64)
        builder.call(fn, [at(0, s_, 1, soff), at(2, d_, 3, aoff), at(2, d_, 4, boff), count])
        return context.get_dummy_value()

    return sig, codegen


@njit(inline="always")
def split_row(src, s_off, dst, a_off, b_off, n_a, n_b):
    """``dst[a_off + i] = src[s_off + 2 i]`` for ``i < n_a`` and ``dst[b_off + i] =
    src[s_off + 2 i + 1]`` for ``i < n_b`` (non-negative counts): a row split into its two
    column phases, which may differ in length by the odd element at its end or by columns
    no output reads. :func:`deinterleave2` over the pairs both phases have, the rest one by
    one. Offsets unsigned inside (no negative-index fix-up in the loops)."""
    us, ua, ub = np.uint64(s_off), np.uint64(a_off), np.uint64(b_off)
    na, nb = np.uint64(n_a), np.uint64(n_b)
    both = min(na, nb)
    deinterleave2(src, us, dst, ua, ub, both)
    for m in range(both, na):
        dst[ua + m] = src[us + np.uint64(2) * m]
    for m in range(both, nb):
        dst[ub + m] = src[us + np.uint64(2) * m + np.uint64(1)]


# Rows and columns of the block transpose16 turns (conv.DW_LANES channels of the small-plane
# depthwise kernel).
T16 = 16


def _define_transpose16(module: ir.Module, fty: ir.Type) -> ir.Function:
    """``void f(src*, soffs*, sadd, dst*, doffs*, dadd)``: row ``r`` of the block is
    ``src[soffs[r] + sadd :][:16]``; column ``c`` goes to ``dst[doffs[c] + dadd :][:16]``
    (``soffs`` and ``doffs`` point at the first of their 16 offsets)."""
    tag = "f32" if isinstance(fty, ir.FloatType) else "f64"
    name = f"onnxjit_transpose16_{tag}"
    if name in module.globals:
        return module.globals[name]
    ptr = fty.as_pointer()
    i64p = _I64.as_pointer()
    fn = ir.Function(
        module, ir.FunctionType(ir.VoidType(), [ptr, i64p, _I64, ptr, i64p, _I64]), name
    )
    fn.linkage = "internal"
    src, soffs, sadd, dst, doffs, dadd = fn.args
    vec = _Vectors(module, fty, T16)
    builder = ir.IRBuilder(fn.append_basic_block("entry"))

    def row_ptr(base: ir.Value, offs: ir.Value, add: ir.Value, i: int) -> ir.Value:
        off = builder.load(builder.gep(offs, [ir.Constant(_I64, i)]), align=8)
        return builder.bitcast(builder.gep(base, [builder.add(off, add)]), vec.vptr)

    rows = [vec.load(builder, row_ptr(src, soffs, sadd, r), None) for r in range(T16)]
    # Stage k swaps bit k of the row index with bit k of the column index; after the four
    # stages element (r, c) sits at (c, r). Rows i (bit k clear) and i | d pair up: the new
    # row i takes columns with bit k clear from row i and the others from row i | d shifted
    # down by d; the new row i | d the mirror image.
    for k in range(4):
        d = 1 << k
        lo = ir.Constant(
            ir.VectorType(_I32, T16), [c if not c & d else T16 + (c & ~d) for c in range(T16)]
        )
        hi = ir.Constant(
            ir.VectorType(_I32, T16), [c | d if not c & d else T16 + c for c in range(T16)]
        )
        for i in range(T16):
            if i & d:
                continue
            a, b = rows[i], rows[i | d]
            rows[i] = builder.shuffle_vector(a, b, lo)
            rows[i | d] = builder.shuffle_vector(a, b, hi)
    for c in range(T16):
        vec.store(builder, rows[c], row_ptr(dst, doffs, dadd, c), None)
    builder.ret_void()
    return fn


@intrinsic
def transpose16(typingctx, src, soffs, si, sadd, dst, doffs, di, dadd):
    """Transpose one 16 x 16 block: ``dst[doffs[di + c] + dadd + r] = src[soffs[si + r] + sadd
    + c]`` for ``r, c < 16`` (``src``, ``dst``: 1-D C-contiguous arrays of one float type;
    ``soffs``, ``doffs``: 1-D C-contiguous arrays of int64 or uint64 element offsets, 16 of
    them read from ``si`` and ``di``). Sixteen vector loads, four stages of shuffles, sixteen
    vector stores, in that order: destination rows may repeat (the last store wins) but must
    not overlap the source rows. No bounds checks: callers keep every row in range."""
    dtype = float_arrays("transpose16", src, dst)
    for offs in (soffs, doffs):
        if not (
            isinstance(offs, types.Array)
            and offs.ndim == 1
            and offs.layout == "C"
            and offs.dtype in (types.int64, types.uint64)
        ):
            raise TypeError(f"transpose16 offsets must be 1-D int64 or uint64 arrays, got {offs}")
    sig = types.void(src, soffs, si, sadd, dst, doffs, di, dadd)

    def codegen(context, builder, sig, args):
        sa = sig.args

        def data(idx):
            return context.make_array(sa[idx])(context, builder, args[idx]).data

        def index(idx):
            return context.cast(builder, args[idx], sa[idx], types.int64)

        def offsets(idx, start):
            ptr = builder.bitcast(data(idx), _I64.as_pointer())
            return builder.gep(ptr, [index(start)])

        fn = _define_transpose16(builder.module, context.get_value_type(dtype))
        builder.call(
            fn,
            [data(0), offsets(1, 2), index(3), data(4), offsets(5, 6), index(7)],
        )
        return context.get_dummy_value()

    return sig, codegen
