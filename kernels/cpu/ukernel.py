"""A register-blocked GEMM micro-kernel written in LLVM IR, callable from Numba code.

:func:`ukernel` computes one ``mr x nr`` block of ``C = alpha * A @ B + beta * C`` over ``kc``
steps of the inner dimension, keeping the whole block in vector registers: per step it loads
``NV`` vectors of one row of ``B``, broadcasts one element of each of the ``mr`` rows of ``A``,
and issues ``mr * NV`` fused multiply-adds. That is the loop BLAS libraries write in assembly;
LLVM's loop vectoriser cannot derive it from a Numba loop nest (the accumulators would have to
live in an array it cannot keep in registers), so the IR is built here with explicit vector
types, and LLVM only allocates registers and selects instructions.

Operands are addressed with element strides, so one kernel serves every layout the callers
have without copies: ``A`` by row and column stride (row-major or transposed), ``B`` by row
stride with unit column stride (a row-major matrix, or a weight packed into panels of ``NR``
columns, which keeps the rows a step reads on one cache line pair), ``C`` by row stride, or
by column stride (:func:`ukernel_ct`: a product of few columns computed as its transpose).

Shape of the register block (chosen from the CPU Numba compiles for, so cached kernels never
mix, see :func:`_geometry`): with AVX-512, 16 float32 (8 float64) lanes per vector, ``NV = 2``
vectors across and up to ``MR = 12`` rows: 24 accumulators, 2 ``B`` vectors and a broadcast
fill 27 of the 32 vector registers. Without AVX-512, 8 (4) lanes and ``MR = 6``: 12 of 16.
Kernels exist for 1, 2, 4, 8 and 12 rows (1, 2, 4, 6 without AVX-512); a block of a count in
between runs the next larger one, whose extra rows repeat the last real row of ``A`` and are
not stored (15 kernels instead of 48: each costs compile time in every Numba function that
calls :func:`ukernel`). Blocks of one or two rows (matrix-vector products) keep several
accumulator sets over consecutive steps, so that the multiply-adds do not wait on each other's
latency, and prefetch B (a weight read once, across page boundaries) ahead of the steps.
Columns beyond ``nr`` are neither read from ``B`` nor written to ``C`` (masked vector loads
and stores); a block at most one vector wide runs a one-vector kernel.

Integer products (MatMulInteger and the quantized family) run the same kernel in its
int16-pair mode (:func:`ukernel_int`, x86 only, see :func:`_int_geometry`): operands are
8-bit values widened to int16 with their zero points subtracted (within [-255, 255]), and
each step covers two steps of the inner dimension. It broadcasts one 32-bit word of a row of
A (the row's two int16 values) and multiplies it into each ``B`` vector with ``pmaddwd``
(16-bit products, adjacent pairs added into int32 lanes), adding the result into int32
accumulators. Exact: a pair of products is at most 2 * 255**2, far from int16 saturation,
which ``pmaddwd`` does not have anyway, and int32 addition wraps as MatMulInteger's int32
output does (addition modulo 2**32 is associative), so no blocking of the inner dimension is
needed for exactness. ``B`` is in panels of NR int32 columns whose rows interleave the pairs
of steps (``[k / 2][NR][2]`` int16, :func:`onnxjit.kernels.cpu.blas.pack_b_pairs`).
"""

from __future__ import annotations

import contextlib
import functools

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .epilogue import ACT_CLIP, ACT_NONE, ACT_RELU
from .runtime.prefetch import LINE_BYTES, emit_prefetch

# Bias modes of the epilogue (:func:`ukernel_ep`, and the GEMM tiles of :mod:`.blas`)
BIAS_NONE = 0
BIAS_COL = 1  # bias[j] added to column j (a fully connected layer: one bias per output feature)
BIAS_ROW = 2  # bias[i] added to row i (a convolution: one bias per output channel)

_I1 = ir.IntType(1)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)

# Enough independent multiply-add chains to cover the FMA latency (4 cycles, 2 ports).
_MIN_CHAINS = 8
# Steps of the inner dimension that the prefetch of A runs ahead of the multiply-adds: with
# a 12 x 32 block, 16 steps are about 200 cycles. ResNet-18 back to back on 2 threads (its
# weights do not stay in cache): 256x7x7 3x3 layers 242-251 -> 229-236 us, whole network
# 4.49 -> 4.35 ms; 32 steps were no better.
_A_AHEAD = 16
# Steps of the inner dimension that the prefetch of B runs ahead in blocks of one or two rows
# (matrix-vector products: B is a weight read once per product, from L3 or memory, and its
# packed panels cross a 4 KiB page every 64 steps, where the hardware prefetchers stop).
_B_AHEAD = 64


def _geometry(features: str, itemsize: int) -> tuple[int, int, int]:
    """(lanes per vector, vectors across NV, rows MR) for a target feature string."""
    wide = "+avx512f" in features.split(",")
    lanes = (64 if wide else 32) // itemsize
    return lanes, 2, 12 if wide else 6


def geometry(itemsize: int) -> tuple[int, int]:
    """``(MR, NR)``, the register block of the kernels compiled in this process for elements
    of ``itemsize`` bytes (the host CPU's, or Numba's configured feature string)."""
    from numba.core.registry import cpu_target

    # the feature string the kernels are compiled with (what the intrinsic's codegen sees)
    lanes, nv, mr = _geometry(cpu_target.target_context.codegen()._tm_features, itemsize)
    return mr, lanes * nv


# pmaddwd by vector width (int32 lanes): SSE2, AVX2, AVX-512BW.
_PMADD = {
    4: "llvm.x86.sse2.pmadd.wd",
    8: "llvm.x86.avx2.pmadd.wd",
    16: "llvm.x86.avx512.pmaddw.d.512",
}


def _int_geometry(features: str) -> tuple[int, int, int] | None:
    """(int32 lanes per vector, vectors across NV, rows MR) of the int16-pair kernel for a
    target feature string, or None where the target has no ``pmaddwd`` (not x86): the
    integer products then run in exact float32 blocks instead. The register budget is the
    float kernel's: ``MR * NV`` accumulators, ``NV`` B vectors and a broadcast."""
    feats = set(features.split(","))
    if "+avx512bw" in feats and "+avx512f" in feats:
        return 16, 2, 12
    if "+avx2" in feats:
        return 8, 2, 6
    if "+sse2" in feats:
        return 4, 2, 6
    return None


def int_geometry() -> tuple[int, int] | None:
    """``(MR, NR)`` of the int16-pair kernel compiled in this process (NR int32 columns of
    C per block, a panel of :func:`onnxjit.kernels.cpu.blas.pack_b_pairs`), or None where
    there is none (see :func:`_int_geometry`)."""
    from numba.core.registry import cpu_target

    geo = _int_geometry(cpu_target.target_context.codegen()._tm_features)
    return None if geo is None else (geo[2], geo[0] * geo[1])


def row_counts(mr_max: int) -> tuple[int, ...]:
    """Row counts that get a kernel of their own (1, 2, 4, then steps of 4 up to MR)."""
    return tuple(sorted({1, 2, *range(4, mr_max, 4), mr_max}))


def _splat(builder: ir.IRBuilder, value: ir.Value, lanes: int) -> ir.Value:
    vty = ir.VectorType(value.type, lanes)
    v = builder.insert_element(ir.Constant(vty, ir.Undefined), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(
        v, ir.Constant(vty, ir.Undefined), ir.Constant(ir.VectorType(_I32, lanes), None)
    )


def float_arrays(what: str, *arrays: types.Type) -> types.Type:
    """The element type of Numba array types that must all be float32 or all float64 (the
    typing check of the intrinsics here and in :mod:`.blas`); TypeError naming ``what``."""
    first = arrays[0]
    for arr in arrays:
        if not isinstance(arr, types.Array) or not isinstance(first, types.Array):
            raise TypeError(f"{what} operands must be arrays of one float type, got {arr}")
        if arr.dtype != first.dtype:
            raise TypeError(f"{what} operands must be arrays of one float type")
    if first.dtype not in (types.float32, types.float64):
        raise TypeError(f"{what} takes float32 or float64, got {first.dtype}")
    return first.dtype


class _Vectors:
    """Vector loads and stores of ``lanes`` elements of ``fty`` in one LLVM module: plain,
    or masked (lanes whose mask bit is off are neither read, reading as 0, nor written)."""

    def __init__(self, module: ir.Module, fty: ir.Type, lanes: int) -> None:
        if isinstance(fty, ir.IntType):  # int32: C of the int16-pair kernel (no fma)
            tag, self.align = f"i{fty.width}", fty.width // 8
        else:
            tag = "f32" if isinstance(fty, ir.FloatType) else "f64"
            self.align = 4 if tag == "f32" else 8
        self.itemsize = self.align
        self.lanes = lanes
        self.vty = vty = ir.VectorType(fty, lanes)
        self.vptr = vptr = vty.as_pointer()
        self.zero = ir.Constant(vty, None)
        mty = ir.VectorType(_I1, lanes)
        suffix = f"v{lanes}{tag}"
        if not isinstance(fty, ir.IntType):
            self.fma = cgutils.get_or_insert_function(
                module, ir.FunctionType(vty, [vty, vty, vty]), f"llvm.fma.{suffix}"
            )
        self._mload = cgutils.get_or_insert_function(
            module, ir.FunctionType(vty, [vptr, _I32, mty, vty]), f"llvm.masked.load.{suffix}.p0"
        )
        self._mstore = cgutils.get_or_insert_function(
            module,
            ir.FunctionType(ir.VoidType(), [vty, vptr, _I32, mty]),
            f"llvm.masked.store.{suffix}.p0",
        )

    def masks(self, builder: ir.IRBuilder, count: ir.Value, nv: int) -> list[ir.Value]:
        """Per vector ``v`` of ``nv``: the lanes whose column ``v * lanes + i`` is below
        ``count``."""
        lanes = self.lanes
        limit = _splat(builder, count, lanes)
        return [
            builder.icmp_signed(
                "<",
                ir.Constant(ir.VectorType(_I64, lanes), [v * lanes + i for i in range(lanes)]),
                limit,
            )
            for v in range(nv)
        ]

    def at(self, builder: ir.IRBuilder, base: ir.Value, v: int) -> ir.Value:
        """Pointer to vector ``v`` from the element pointer ``base``."""
        return builder.bitcast(builder.gep(base, [ir.Constant(_I64, v * self.lanes)]), self.vptr)

    def load(self, builder: ir.IRBuilder, ptr: ir.Value, mask: ir.Value | None) -> ir.Value:
        if mask is None:
            return builder.load(ptr, align=self.align)
        return builder.call(self._mload, [ptr, ir.Constant(_I32, self.align), mask, self.zero])

    def store(
        self, builder: ir.IRBuilder, value: ir.Value, ptr: ir.Value, mask: ir.Value | None
    ) -> None:
        if mask is None:
            builder.store(value, ptr, align=self.align)
        else:
            builder.call(self._mstore, [value, ptr, ir.Constant(_I32, self.align), mask])


def _define(
    module: ir.Module,
    fty: ir.Type,
    lanes: int,
    nv: int,
    rows: int,
    masked: bool,
    tabled: bool,
    panel: int = 0,
    c_transposed: bool = False,
    epilogue: bool = False,
) -> ir.Function:
    """The micro-kernel for exactly ``rows`` rows (masked: columns limited to ``nr``;
    ``c_transposed``: ``C[i, j]`` at ``c + j * c_rs + i``, see :func:`ukernel_ct`;
    tabled: row ``p`` of B starts at ``b + tab[p]``, an extra ``i64*`` argument, instead of
    ``b + p * b_rs``; ``panel`` > 0: A is in zero-padded panels of that many rows, element
    ``(i, p)`` at ``a + p * panel + i``, and ``a_rs``, ``a_cs`` and ``mr`` do not move it).

    ``fty`` int16: the int16-pair mode (:func:`ukernel_int`). ``kc`` counts pairs of steps;
    A's elements ``(i, 2q)`` and ``(i, 2q + 1)`` are the two int16 at ``a + i * a_rs + q *
    a_cs``; B's pair row ``q`` at ``b + q * b_rs`` holds ``[NR][2]`` int16 (zero-padded
    columns, so only C is masked); C is int32, ``C = acc (+ C when load_c)``, no alpha or
    beta arguments.

    ``epilogue``: the kernel of :func:`ukernel_ep`, with six more parameters after ``mr``
    (``bias``, ``bias_mode``, ``res``, ``act``, ``p0``, ``p1``, see :func:`_store_epilogue`).
    """
    pairs = isinstance(fty, ir.IntType)
    tag = "i16" if pairs else ("f32" if isinstance(fty, ir.FloatType) else "f64")
    suffix = (
        ("_m" if masked else "")
        + ("_t" if tabled else "")
        + (f"_p{panel}" if panel else "")
        + ("_ct" if c_transposed else "")
        + ("_e" if epilogue else "")
    )
    name = f"onnxjit_ukernel_{tag}_{lanes}x{nv}_r{rows}{suffix}"
    if name in module.globals:
        return module.globals[name]
    ptr = fty.as_pointer()
    cty = _I32 if pairs else fty
    scalars = [] if pairs else [fty, fty]  # alpha, beta
    params = [_I64, ptr, _I64, _I64, ptr, _I64, cty.as_pointer(), _I64, _I64, *scalars, _I1, _I64]
    n_fixed = len(params)
    if tabled:
        params.append(_I64.as_pointer())
    if epilogue:
        params += [ptr, _I64, ptr, _I64, fty, fty]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), params), name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    kc, a, a_rs, a_cs, b, b_rs, c, c_rs, nr = fn.args[:9]
    alpha, beta = fn.args[9:11] if not pairs else (None, None)
    load_c, mr = fn.args[n_fixed - 2 : n_fixed]
    tab = fn.args[n_fixed] if tabled else None
    ep_args = fn.args[n_fixed:] if epilogue else None
    for arg in (a, b, c):
        arg.add_attribute("noalias")
    vec = _Vectors(module, cty, lanes)
    vty, zero = vec.vty, vec.zero
    if pairs:
        # B vectors: 2 * lanes int16, each adjacent pair multiplied into one int32 lane
        bty = ir.VectorType(fty, 2 * lanes)
        pmadd = cgutils.get_or_insert_function(
            module, ir.FunctionType(vty, [bty, bty]), _PMADD[lanes]
        )
        # an accumulator's chain is only its (one-cycle) integer add: one set suffices
        sets = 1
        add = ir.IRBuilder.add
    else:
        fma = vec.fma
        sets = min(4, max(1, -(-_MIN_CHAINS // (rows * nv))))
        add = ir.IRBuilder.fadd

    entry = fn.append_basic_block("entry")
    builder = ir.IRBuilder(entry)
    masks = vec.masks(builder, nr, nv) if masked else [None] * nv
    if panel:
        # rows from mr on read the panel's next rows or its zero padding (never stored); the
        # constant offsets leave one pointer to step (runtime strides cost an address add
        # per row and step: 225 against 238 GFLOP/s for a 12 x 32 block in L1, one thread)
        a_rows = [builder.gep(a, [ir.Constant(_I64, i)]) for i in range(rows)]
        a_cs = ir.Constant(_I64, panel)
    else:
        # rows from mr on repeat row mr - 1 (read, never stored): one kernel serves several
        # counts
        last = builder.sub(mr, ir.Constant(_I64, 1))
        a_rows = []
        for i in range(rows):
            ci = ir.Constant(_I64, i)
            r = builder.select(builder.icmp_signed("<", ci, mr), ci, last)
            a_rows.append(builder.gep(a, [builder.mul(a_rs, r)]))
    c_rows = [builder.gep(c, [builder.mul(c_rs, ir.Constant(_I64, i))]) for i in range(rows)]

    def step(
        bld: ir.IRBuilder,
        kk: ir.Value,
        accs: list[ir.Value],
        ahead: bool = False,
        b_ahead: bool = False,
    ) -> list[ir.Value]:
        if b_ahead:
            # B's row _B_AHEAD steps on, every cache line of it (see _B_AHEAD)
            ahead_row = bld.gep(b, [bld.mul(bld.add(kk, ir.Constant(_I64, _B_AHEAD)), b_rs)])
            elem = 2 if pairs else vec.itemsize  # bytes of one element of B
            for line in range(0, nv * lanes * vec.itemsize, LINE_BYTES):
                emit_prefetch(bld, bld.gep(ahead_row, [ir.Constant(_I64, line // elem)]))
        if ahead:
            # A's first row _A_AHEAD steps on: a packed A is one stream, which a weight
            # read from memory (a network's late layers, not in any cache) needs asked for
            # early; a prefetch never faults, so the steps past the end cost nothing. (Blocks
            # of one or two rows, matrix-vector products, read a short row of activations.)
            ahead_k = bld.add(kk, ir.Constant(_I64, _A_AHEAD))
            emit_prefetch(bld, bld.gep(a_rows[0], [bld.mul(ahead_k, a_cs)]))
        if tab is None:
            brow = bld.gep(b, [bld.mul(kk, b_rs)])
        else:
            brow = bld.gep(b, [bld.load(bld.gep(tab, [kk]))])
        acol = bld.mul(kk, a_cs)
        out = []
        if pairs:
            bptr = bty.as_pointer()
            bvec = []
            for v in range(nv):
                at = bld.gep(brow, [ir.Constant(_I64, v * 2 * lanes)])
                bvec.append(bld.load(bld.bitcast(at, bptr), align=2))
            for i in range(rows):
                word = bld.load(bld.bitcast(bld.gep(a_rows[i], [acol]), _I32.as_pointer()), align=2)
                sv = bld.bitcast(_splat(bld, word, lanes), bty)
                for v in range(nv):
                    out.append(bld.add(accs[i * nv + v], bld.call(pmadd, [sv, bvec[v]])))
            return out
        bvec = [vec.load(bld, vec.at(bld, brow, v), masks[v]) for v in range(nv)]
        for i in range(rows):
            s = bld.load(bld.gep(a_rows[i], [acol]))
            sv = _splat(bld, s, lanes)
            for v in range(nv):
                out.append(bld.call(fma, [sv, bvec[v], accs[i * nv + v]]))
        return out

    n_acc = rows * nv
    # main loop: `sets` consecutive steps per iteration, one accumulator set each
    main_n = builder.mul(builder.sdiv(kc, ir.Constant(_I64, sets)), ir.Constant(_I64, sets))
    loop = fn.append_basic_block("loop")
    tail_head = fn.append_basic_block("tail_head")
    builder.cbranch(builder.icmp_signed(">", main_n, ir.Constant(_I64, 0)), loop, tail_head)
    builder.position_at_end(loop)
    kphi = builder.phi(_I64)
    kphi.add_incoming(ir.Constant(_I64, 0), entry)
    phis = []
    for _ in range(sets * n_acc):
        ph = builder.phi(vty)
        ph.add_incoming(zero, entry)
        phis.append(ph)
    new = []
    for s in range(sets):
        kk = builder.add(kphi, ir.Constant(_I64, s))
        accs = phis[s * n_acc : (s + 1) * n_acc]
        new += step(builder, kk, accs, rows >= 4, rows <= 2 and tab is None)
    knext = builder.add(kphi, ir.Constant(_I64, sets))
    loop_end = builder.block
    kphi.add_incoming(knext, loop_end)
    for ph, nv_ in zip(phis, new):
        ph.add_incoming(nv_, loop_end)
    builder.cbranch(builder.icmp_signed("<", knext, main_n), loop, tail_head)

    # combine the sets, then the remaining steps one at a time
    builder.position_at_end(tail_head)
    joined = []
    for j in range(sets * n_acc):
        ph = builder.phi(vty)
        ph.add_incoming(zero, entry)
        ph.add_incoming(new[j], loop_end)
        joined.append(ph)
    merged = []
    for j in range(n_acc):
        acc = joined[j]
        for s in range(1, sets):
            acc = add(builder, acc, joined[s * n_acc + j])
        merged.append(acc)
    tail = fn.append_basic_block("tail")
    store = fn.append_basic_block("store")
    builder.cbranch(builder.icmp_signed("<", main_n, kc), tail, store)
    builder.position_at_end(tail)
    tphi = builder.phi(_I64)
    tphi.add_incoming(main_n, tail_head)
    taccs = []
    for j in range(n_acc):
        ph = builder.phi(vty)
        ph.add_incoming(merged[j], tail_head)
        taccs.append(ph)
    tnew = step(builder, tphi, taccs)
    tnext = builder.add(tphi, ir.Constant(_I64, 1))
    tphi.add_incoming(tnext, builder.block)
    for ph, v in zip(taccs, tnew):
        ph.add_incoming(v, builder.block)
    tail_end = builder.block
    builder.cbranch(builder.icmp_signed("<", tnext, kc), tail, store)

    builder.position_at_end(store)
    final = []
    for j in range(n_acc):
        ph = builder.phi(vty)
        ph.add_incoming(merged[j], tail_head)
        ph.add_incoming(tnew[j], tail_end)
        final.append(ph)
    if pairs:
        scaled = final
    else:
        alpha_v = _splat(builder, alpha, lanes)
        beta_v = _splat(builder, beta, lanes)
        scaled = [builder.fmul(x, alpha_v) for x in final]

    if c_transposed:
        _store_transposed(builder, vec, scaled, rows, nv, masked, c, c_rs, mr, nr, load_c, beta)
        builder.ret_void()
        return fn

    if ep_args is not None:
        _store_epilogue(builder, vec, scaled, rows, nv, masks, c_rows, c_rs, mr, load_c, beta,
                        ep_args)  # fmt: skip
        builder.ret_void()
        return fn

    # C = alpha * acc (+ beta * C when load_c), rows from mr on not stored (pairs: C = acc
    # (+ C), wrapping)
    with builder.if_else(load_c) as (then, otherwise):
        for accumulate, branch in ((True, then), (False, otherwise)):
            with branch:
                for i in range(rows):
                    with builder.if_then(builder.icmp_signed("<", ir.Constant(_I64, i), mr)):
                        for v in range(nv):
                            p = vec.at(builder, c_rows[i], v)
                            r = scaled[i * nv + v]
                            if accumulate and pairs:
                                r = builder.add(vec.load(builder, p, masks[v]), r)
                            elif accumulate:
                                r = builder.call(fma, [beta_v, vec.load(builder, p, masks[v]), r])
                            vec.store(builder, r, p, masks[v])
    builder.ret_void()
    return fn


def _store_epilogue(builder, vec, scaled, rows, nv, masks, c_rows, c_rs, mr, load_c, beta, ep):
    """Store the accumulators ``scaled`` (row ``i``, vector ``v`` at ``i * nv + v``) as
    ``C = act(alpha * acc (+ beta * C when load_c) + bias + res)``, rows from ``mr`` on not
    stored; the block's epilogue applied in registers, so that the result is written once
    (as a pass of its own over the block, the epilogue made a 16 -> 96 channel 1x1
    convolution on 112 x 112 planes a third slower).

    ``ep`` holds the kernel's last six parameters: ``bias`` (pointer to the block's first
    bias value), ``bias_mode`` (``BIAS_NONE``, ``BIAS_COL``: one value per column, or
    ``BIAS_ROW``: one per row), ``res`` (a residual addressed as C, or null), ``act``
    (``ACT_NONE``, ``ACT_RELU`` or ``ACT_CLIP``: a clamp to ``[p0, p1]``; callers apply other
    activations themselves) and its parameters. Without any of them the block is stored
    as :func:`_define`'s plain kernel stores it."""
    bias, bias_mode, res, act, p0, p1 = ep
    fty = vec.vty.element
    lanes = vec.lanes
    zero = vec.zero
    i64 = functools.partial(ir.Constant, _I64)
    no_res = builder.icmp_unsigned("==", builder.ptrtoint(res, _I64), i64(0))
    plain = builder.and_(
        builder.and_(builder.icmp_signed("==", bias_mode, i64(BIAS_NONE)), no_res),
        builder.icmp_signed("==", act, i64(ACT_NONE)),
    )
    beta_v = _splat(builder, beta, lanes)

    def store_rows(with_c, addend=None, res_rows=None, lo=None, hi=None):
        for i in range(rows):
            with builder.if_then(builder.icmp_signed("<", i64(i), mr)):
                for v in range(nv):
                    p = vec.at(builder, c_rows[i], v)
                    r = scaled[i * nv + v]
                    if with_c:
                        r = builder.call(vec.fma, [beta_v, vec.load(builder, p, masks[v]), r])
                    if addend is not None:
                        r = builder.fadd(r, addend[i * nv + v])
                    if res_rows is not None:
                        at = vec.at(builder, res_rows[i], v)
                        rv = vec.load(builder, at, masks[v])
                        r = builder.fadd(r, builder.select(no_res, zero, rv))
                    if lo is not None:
                        # ordered comparisons: NaN passes the clamp
                        r = builder.select(builder.fcmp_ordered("<", r, lo), lo, r)
                        r = builder.select(builder.fcmp_ordered(">", r, hi), hi, r)
                    vec.store(builder, r, p, masks[v])

    with builder.if_else(plain) as (then, otherwise):
        with then, builder.if_else(load_c) as (acc, fresh):
            with acc:
                store_rows(True)
            with fresh:
                store_rows(False)
        with otherwise:
            # the addend of each vector: its column's bias, its row's, or zero
            head = builder.block
            col_blk = builder.append_basic_block("ep_col")
            row_blk = builder.append_basic_block("ep_row")
            joined = builder.append_basic_block("ep_bias")
            sw = builder.switch(bias_mode, joined)
            sw.add_case(i64(BIAS_COL), col_blk)
            sw.add_case(i64(BIAS_ROW), row_blk)
            builder.position_at_end(col_blk)
            cols = [vec.load(builder, vec.at(builder, bias, v), masks[v]) for v in range(nv)]
            builder.branch(joined)
            builder.position_at_end(row_blk)
            last = builder.sub(mr, i64(1))
            per_row = []
            for i in range(rows):  # rows from mr on read row mr - 1's value (never stored)
                r = builder.select(builder.icmp_signed("<", i64(i), mr), i64(i), last)
                per_row.append(_splat(builder, builder.load(builder.gep(bias, [r])), lanes))
            builder.branch(joined)
            builder.position_at_end(joined)
            addend = []
            for i in range(rows):
                for v in range(nv):
                    ph = builder.phi(vec.vty)
                    ph.add_incoming(zero, head)
                    ph.add_incoming(cols[v], col_blk)
                    ph.add_incoming(per_row[i], row_blk)
                    addend.append(ph)
            inf = ir.Constant(fty, float("inf"))
            is_relu = builder.icmp_signed("==", act, i64(ACT_RELU))
            is_clip = builder.icmp_signed("==", act, i64(ACT_CLIP))
            zero_s = ir.Constant(fty, 0.0)
            lo_s = builder.select(is_clip, p0, builder.select(is_relu, zero_s, builder.fneg(inf)))
            hi_s = builder.select(is_clip, p1, inf)
            lo, hi = _splat(builder, lo_s, lanes), _splat(builder, hi_s, lanes)
            # without a residual, C's own rows are read in its place and discarded
            # (one copy of the stores fewer; the line is about to be written anyway)
            res_base = builder.select(no_res, c_rows[0], res)
            res_rows = [builder.gep(res_base, [builder.mul(c_rs, i64(i))]) for i in range(rows)]
            with builder.if_else(load_c) as (acc, fresh):
                with acc:
                    store_rows(True, addend, res_rows, lo, hi)
                with fresh:
                    store_rows(False, addend, res_rows, lo, hi)


def _store_transposed(builder, vec, scaled, rows, nv, masked, c, c_rs, mr, nr, load_c, beta):
    """Store the accumulators ``scaled`` (row ``i``, vector ``v`` at ``i * nv + v``) as the
    columns of C: column ``j`` (``j < nr``) is ``rows`` consecutive elements from ``c + j *
    c_rs``, of which the first ``mr`` are written (``C = acc (+ beta * C when load_c)``). A
    whole column is one vector of ``rows`` lanes gathered from the accumulators' lane ``j``
    (LLVM makes the gathers shuffles); a block of fewer rows stores element by element."""
    fty = vec.vty.element
    cty = ir.VectorType(fty, rows)
    exact = builder.icmp_signed("==", mr, ir.Constant(_I64, rows))
    for j in range(nv * vec.lanes):
        v, lane = divmod(j, vec.lanes)
        guard = builder.icmp_signed("<", ir.Constant(_I64, j), nr) if masked else None
        with cgutils.if_likely(builder, guard) if masked else contextlib.nullcontext():
            elems = [
                builder.extract_element(scaled[i * nv + v], ir.Constant(_I32, lane))
                for i in range(rows)
            ]
            col = builder.gep(c, [builder.mul(c_rs, ir.Constant(_I64, j))])
            with builder.if_else(exact) as (whole, part):
                with whole:
                    x = ir.Constant(cty, ir.Undefined)
                    for i, e in enumerate(elems):
                        x = builder.insert_element(x, e, ir.Constant(_I32, i))
                    ptr = builder.bitcast(col, cty.as_pointer())
                    with builder.if_then(load_c):
                        old = builder.load(ptr, align=vec.align)
                        bv = ir.Constant(cty, ir.Undefined)
                        for i in range(rows):
                            bv = builder.insert_element(bv, beta, ir.Constant(_I32, i))
                        summed = builder.fadd(builder.fmul(bv, old), x)
                        builder.store(summed, ptr, align=vec.align)
                    with builder.if_then(builder.not_(load_c)):
                        builder.store(x, ptr, align=vec.align)
                with part:
                    for i, e in enumerate(elems[:-1]):  # mr < rows here
                        with builder.if_then(builder.icmp_signed("<", ir.Constant(_I64, i), mr)):
                            at = builder.gep(col, [ir.Constant(_I64, i)])
                            with builder.if_else(load_c) as (acc, plain):
                                with acc:
                                    old = builder.load(at, align=vec.align)
                                    builder.store(
                                        builder.fadd(builder.fmul(beta, old), e), at,
                                        align=vec.align,
                                    )  # fmt: skip
                                with plain:
                                    builder.store(e, at, align=vec.align)


@intrinsic
def ukernel(
    typingctx, kc, a, a_off, a_rs, a_cs, b, b_off, b_rs, c, c_off, c_rs, mr, nr, alpha, beta, load_c
):
    """``C[:mr, :nr] = alpha * A[:mr, :kc] @ B[:kc, :nr] + (beta * C if load_c)``.

    ``a``, ``b``, ``c`` are arrays of one float type addressed as flat memory from the element
    offsets: ``A[i, p]`` at ``a_off + i * a_rs + p * a_cs``, ``B[p, j]`` at
    ``b_off + p * b_rs + j``, ``C[i, j]`` at ``c_off + i * c_rs + j``. ``1 <= mr <= MR`` and
    ``1 <= nr <= NR`` (:func:`geometry`); nothing outside those rows and columns is read or
    written. ``load_c`` false ignores what ``C`` held (NaN included), as BLAS does for beta 0.
    """
    return _ukernel_typing(
        False, kc, a, a_off, a_rs, a_cs, b, b_off, b_rs, c, c_off, c_rs, mr, nr, alpha, beta,
        load_c,
    )  # fmt: skip


@intrinsic
def ukernel_ct(
    typingctx, kc, a, a_off, a_rs, a_cs, b, b_off, b_rs, c, c_off, c_rs, mr, nr, alpha, beta, load_c
):
    """:func:`ukernel` storing C transposed: ``C[i, j]`` at ``c_off + j * c_rs + i``. A
    product with few columns and many rows runs as its transpose through this kernel (its
    columns in the kernel's rows, which come in steps of MR, not of NR) and still writes the
    caller's row-major result."""
    return _ukernel_typing(
        True, kc, a, a_off, a_rs, a_cs, b, b_off, b_rs, c, c_off, c_rs, mr, nr, alpha, beta,
        load_c,
    )  # fmt: skip


@intrinsic
def ukernel_ep(
    typingctx, kc, a, a_off, a_rs, a_cs, b, b_off, b_rs, c, c_off, c_rs, mr, nr, alpha, beta,
    load_c, bias, bias_mode, res, act, p0, p1,
):  # fmt: skip
    """:func:`ukernel` followed by an epilogue in registers: ``C[:mr, :nr] = act(alpha * A @
    B + (beta * C if load_c) + bias + res)``, each element of C written once.

    ``bias`` and ``res`` are addresses (int64; 0 where absent, a plain integer so that one
    compiled caller serves operands of any array type): ``bias`` of the block's first bias
    value, ``bias_mode`` one of ``BIAS_NONE``, ``BIAS_COL`` (``bias[j]`` added to column
    ``j``) and ``BIAS_ROW`` (``bias[i]`` to row ``i``); ``res`` of the residual's element
    for ``C[0, 0]``, addressed with C's row stride. ``act``: ``ACT_NONE``, ``ACT_RELU`` or
    ``ACT_CLIP`` (clamped to ``[p0, p1]``), codes of :mod:`.epilogue`; the caller applies
    any other activation itself. The arrays must stay alive for the call."""
    return _ukernel_typing(
        False, kc, a, a_off, a_rs, a_cs, b, b_off, b_rs, c, c_off, c_rs, mr, nr, alpha, beta,
        load_c, (bias, bias_mode, res, act, p0, p1),
    )  # fmt: skip


@intrinsic
def ukernel_ep_panels(
    typingctx, kc, a, a_off, a_rs, a_cs, b, b_off, b_rs, c, c_off, c_rs, mr, nr, alpha, beta,
    load_c, bias, bias_mode, res, act, p0, p1,
):  # fmt: skip
    """:func:`ukernel_ep` with A in the panels of :func:`onnxjit.kernels.cpu.blas.pack_a`:
    ``A[i, p]`` at ``a_off + p * MR + i``, ``a_off`` the start of a panel's step, rows past
    the matrix's last zero (``a_rs`` and ``a_cs`` are ignored). The row addresses are then
    constant offsets of one pointer. With runtime strides LLVM kept a pointer per row and per
    unrolled step, more than the 16 registers, and reloaded five from the stack every two
    steps: one thread, MobileNetV2's 1x1 layers took 8-14 % longer (16 -> 96 channels on
    112 x 112 planes 0.81 -> 0.70 of onnxruntime's time, 576 -> 96 on 14 x 14 1.12 -> 1.02)."""
    return _ukernel_typing(
        False, kc, a, a_off, a_rs, a_cs, b, b_off, b_rs, c, c_off, c_rs, mr, nr, alpha, beta,
        load_c, (bias, bias_mode, res, act, p0, p1), True,
    )  # fmt: skip


def _ukernel_typing(
    c_transposed, kc, a, a_off, a_rs, a_cs, b, b_off, b_rs, c, c_off, c_rs, mr, nr, alpha, beta,
    load_c, ep=None, a_panels=False,
):  # fmt: skip
    """Signature and code generator of :func:`ukernel`, :func:`ukernel_ct`, :func:`ukernel_ep`
    and :func:`ukernel_ep_panels` (``ep``: the types of the epilogue's arguments;
    ``a_panels``: A in panels of MR rows)."""
    dtype = float_arrays("ukernel", a, b, c)
    ep_types = tuple(ep or ())
    sig = types.void(
        kc, a, a_off, a_rs, a_cs, b, b_off, b_rs, c, c_off, c_rs, mr, nr, alpha, beta, load_c,
        *ep_types,
    )  # fmt: skip

    def codegen(context, builder, sig, args):
        (kc_, a_, aoff, ars, acs, b_, boff, brs, c_, coff, crs, mr_, nr_, al, be, lc) = args[:16]
        sa = sig.args
        fty = context.get_value_type(dtype)
        itemsize = 4 if dtype == types.float32 else 8
        lanes, nv, mr_max = _geometry(context.codegen()._tm_features, itemsize)

        def i64(val, ty):
            return context.cast(builder, val, ty, types.int64)

        def base(idx, val, off):
            ary = context.make_array(sa[idx])(context, builder, val)
            return builder.gep(ary.data, [i64(off, sa[idx + 1])])

        argv = [
            i64(kc_, sa[0]),
            base(1, a_, aoff), i64(ars, sa[3]), i64(acs, sa[4]),
            base(5, b_, boff), i64(brs, sa[7]),
            base(8, c_, coff), i64(crs, sa[10]),
            i64(nr_, sa[12]),
            context.cast(builder, al, sa[13], dtype),
            context.cast(builder, be, sa[14], dtype),
            context.cast(builder, lc, sa[15], types.boolean),
        ]  # fmt: skip
        argv[-1] = builder.trunc(argv[-1], _I1) if argv[-1].type != _I1 else argv[-1]
        argv.append(i64(mr_, sa[11]))  # rows
        ep_vals = None
        if ep_types:
            bias_, mode_, res_, act_, p0_, p1_ = args[16:]
            ptr = fty.as_pointer()
            ep_vals = [
                builder.inttoptr(i64(bias_, sa[16]), ptr),
                i64(mode_, sa[17]),
                builder.inttoptr(i64(res_, sa[18]), ptr),
                i64(act_, sa[19]),
                context.cast(builder, p0_, sa[20], dtype),
                context.cast(builder, p1_, sa[21], dtype),
            ]
        _dispatch(builder, fty, lanes, nv, mr_max, argv, None, c_transposed, ep_vals, a_panels)
        return context.get_dummy_value()

    return sig, codegen


def _dispatch(
    builder: ir.IRBuilder,
    fty: ir.Type,
    lanes: int,
    nv: int,
    mr_max: int,
    argv: list[ir.Value],
    tab: ir.Value | None,
    c_transposed: bool = False,
    ep: list[ir.Value] | None = None,
    a_panels: bool = False,
) -> None:
    """Call the kernel for ``argv`` (the arguments of :func:`_define`'s functions, rows
    last) by its columns and rows; ``tab``: the row-offset table of a tabled call;
    ``c_transposed``: C stored transposed (:func:`ukernel_ct`); ``ep``: the epilogue's
    arguments (:func:`ukernel_ep`); ``a_panels``: A in panels of MR rows (a tabled call's A
    always is)."""
    # By the columns: NR (full), more than one vector (masked), at most one vector
    # (masked, one vector wide: half the multiply-adds of a masked NR block). By the rows:
    # kernels for a few counts, the next larger one taking the counts in between (few
    # kernels keep compile time down; the extra rows are at a product's edge only).
    module = builder.module
    rows = argv[-1]
    nr_v = argv[8]
    call_args = [*argv, *([] if tab is None else [tab]), *(ep or [])]
    done = builder.append_basic_block("uk_done")
    kinds = ((nv, False), (nv, True), (1, True))
    blocks = [builder.append_basic_block(f"uk_k{i}") for i in range(len(kinds))]
    wide = builder.append_basic_block("uk_wide")
    builder.cbranch(builder.icmp_signed(">", nr_v, ir.Constant(_I64, lanes)), wide, blocks[2])
    builder.position_at_end(wide)
    full = builder.icmp_signed("==", nr_v, ir.Constant(_I64, lanes * nv))
    builder.cbranch(full, blocks[0], blocks[1])
    counts = row_counts(mr_max)
    for blk, (vecs, masked) in zip(blocks, kinds):
        builder.position_at_end(blk)
        sw = builder.switch(rows, done)
        for r in range(1, mr_max + 1):
            kernel_rows = next(c for c in counts if c >= r)
            case = builder.append_basic_block(f"uk_r{r}")
            sw.add_case(ir.Constant(_I64, r), case)
            builder.position_at_end(case)
            # a tabled call's A is always in panels (the convolution's packed weights)
            panel = mr_max if tab is not None or a_panels else 0
            fn = _define(
                module, fty, lanes, vecs, kernel_rows, masked, tab is not None, panel,
                c_transposed, ep is not None,
            )  # fmt: skip
            builder.call(fn, call_args)
            builder.branch(done)
    builder.position_at_end(done)


@intrinsic
def ukernel_tab(
    typingctx, kc, a, a_off, b, b_off, tab, t_off, c, c_off, c_rs, mr, nr, alpha, beta, load_c
):
    """:func:`ukernel` with A in the panels of :func:`onnxjit.kernels.cpu.blas.pack_a`
    (``A[i, p]`` at ``a_off + p * MR + i``, ``a_off`` the start of a panel's step, zero rows
    past the matrix's last) and the rows of ``B`` found through a table: ``B[p, j]`` at
    ``b_off + tab[t_off + p] + j``. An implicit-GEMM convolution reads its input in place
    this way: row ``p`` of the product's B is one kernel tap of one input channel, a run of
    the (padded) input shifted by the tap's offset, so no im2col matrix is built."""
    dtype = float_arrays("ukernel_tab", a, b, c)
    if not (isinstance(tab, types.Array) and tab.dtype == types.int64 and tab.ndim == 1):
        raise TypeError(f"ukernel_tab's table must be a 1-D int64 array, got {tab}")
    sig = types.void(
        kc, a, a_off, b, b_off, tab, t_off, c, c_off, c_rs, mr, nr, alpha, beta, load_c
    )

    def codegen(context, builder, sig, args):
        (kc_, a_, aoff, b_, boff, tab_, toff, c_, coff, crs, mr_, nr_, al, be, lc) = args
        sa = sig.args
        fty = context.get_value_type(dtype)
        itemsize = 4 if dtype == types.float32 else 8
        lanes, nv, mr_max = _geometry(context.codegen()._tm_features, itemsize)

        def i64(i, val):
            return context.cast(builder, val, sa[i], types.int64)

        def base(idx, val, off_idx, off):
            ary = context.make_array(sa[idx])(context, builder, val)
            return builder.gep(ary.data, [i64(off_idx, off)])

        lc_ = context.cast(builder, lc, sa[14], types.boolean)
        argv = [
            i64(0, kc_),
            base(1, a_, 2, aoff), ir.Constant(_I64, 1), ir.Constant(_I64, mr_max),
            base(3, b_, 4, boff), ir.Constant(_I64, 0),
            base(7, c_, 8, coff), i64(9, crs),
            i64(11, nr_),
            context.cast(builder, al, sa[12], dtype),
            context.cast(builder, be, sa[13], dtype),
            builder.trunc(lc_, _I1) if lc_.type != _I1 else lc_,
            i64(10, mr_),
        ]  # fmt: skip
        _dispatch(builder, fty, lanes, nv, mr_max, argv, base(5, tab_, 6, toff))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def ukernel_int(typingctx, kp, a, a_off, a_rs, b, b_off, c, c_off, c_rs, mr, nr, load_c):
    """``C[:mr, :nr] = A[:mr, :2 kp] @ B[:2 kp, :nr] (+ C if load_c)`` in int32, exact and
    wrapping as int32 arithmetic does: the int16-pair mode of the micro-kernel (see the
    module's docstring), x86 only (:func:`int_geometry` is not None).

    ``a`` and ``b`` are int16 arrays, ``c`` an int32 array, addressed as flat memory from the
    element offsets: ``A[i, p]`` at ``a_off + i * a_rs + p`` (rows of even length, the pairs
    of steps on 32-bit words when ``a_off`` and ``a_rs`` are even), ``B`` a panel of
    :func:`onnxjit.kernels.cpu.blas.pack_b_pairs` (``B[2q + t, j]`` at ``b_off + q * 2 NR + 2 j
    + t``, columns past the matrix's zero), ``C[i, j]`` at ``c_off + i * c_rs + j``.
    ``1 <= mr <= MR`` and ``1 <= nr <= NR``; nothing outside those rows and columns of C is
    written."""
    for arr, want in ((a, types.int16), (b, types.int16), (c, types.int32)):
        if not isinstance(arr, types.Array) or arr.dtype != want:
            raise TypeError(f"ukernel_int takes int16 A and B and an int32 C, got {arr}")
    sig = types.void(kp, a, a_off, a_rs, b, b_off, c, c_off, c_rs, mr, nr, load_c)

    def codegen(context, builder, sig, args):
        (kp_, a_, aoff, ars, b_, boff, c_, coff, crs, mr_, nr_, lc) = args
        sa = sig.args
        geo = _int_geometry(context.codegen()._tm_features)
        if geo is None:
            raise TypeError("ukernel_int needs an x86 target (pmaddwd)")
        lanes, nv, mr_max = geo

        def i64(i, val):
            return context.cast(builder, val, sa[i], types.int64)

        def base(idx, val, off_idx, off):
            ary = context.make_array(sa[idx])(context, builder, val)
            return builder.gep(ary.data, [i64(off_idx, off)])

        lc_ = context.cast(builder, lc, sa[11], types.boolean)
        argv = [
            i64(0, kp_),
            base(1, a_, 2, aoff), i64(3, ars), ir.Constant(_I64, 2),
            base(4, b_, 5, boff), ir.Constant(_I64, 2 * lanes * nv),
            base(6, c_, 7, coff), i64(8, crs),
            i64(10, nr_),
            builder.trunc(lc_, _I1) if lc_.type != _I1 else lc_,
            i64(9, mr_),
        ]  # fmt: skip
        _dispatch(builder, ir.IntType(16), lanes, nv, mr_max, argv, None)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def pack_panel(typingctx, dst, d_off, src, s_off, ld, rows, nr):
    """Copy ``rows`` rows of ``nr <= NR`` elements, ``src[s_off + p * ld :][:nr]``, to the
    panel ``dst[d_off + p * NR :]`` (row stride NR; the columns from ``nr`` on are left as
    they were): the layout :func:`ukernel` reads with ``b_rs = NR``, two vector moves a row."""
    dtype = float_arrays("pack_panel", dst, src)
    sig = types.void(dst, d_off, src, s_off, ld, rows, nr)

    def codegen(context, builder, sig, args):
        sa = sig.args
        fty = context.get_value_type(dtype)
        itemsize = 4 if dtype == types.float32 else 8
        lanes, nv, _ = _geometry(context.codegen()._tm_features, itemsize)

        def i64(i):
            return context.cast(builder, args[i], sa[i], types.int64)

        d = context.make_array(sa[0])(context, builder, args[0]).data
        s = context.make_array(sa[2])(context, builder, args[2]).data
        d = builder.gep(d, [i64(1)])
        s = builder.gep(s, [i64(3)])
        ld_, rows_, nr_ = i64(4), i64(5), i64(6)
        vec = _Vectors(builder.module, fty, lanes)
        masks = vec.masks(builder, nr_, nv)
        full = builder.icmp_signed("==", nr_, ir.Constant(_I64, lanes * nv))
        with cgutils.for_range(builder, rows_) as loop:
            p = loop.index
            srow = builder.gep(s, [builder.mul(p, ld_)])
            drow = builder.gep(d, [builder.mul(p, ir.Constant(_I64, lanes * nv))])
            with builder.if_else(full) as (then, otherwise):
                for branch, mks in ((then, [None] * nv), (otherwise, masks)):
                    with branch:
                        for v in range(nv):
                            x = vec.load(builder, vec.at(builder, srow, v), mks[v])
                            vec.store(builder, x, vec.at(builder, drow, v), mks[v])
        return context.get_dummy_value()

    return sig, codegen
