"""Streaming (non-temporal) stores for kernels whose output is far larger than the caches.

An ordinary store first reads the cache line it writes into (read for ownership), so a
kernel that reads n bytes and writes n bytes moves 3n bytes over the memory bus. A
non-temporal store writes a whole 64-byte line straight to memory without reading it: 2n
bytes. For outputs that no cache holds anyway this is up to 1.5 times faster; for outputs
that would still be in cache when the next operator reads them it is slower (they come back
from memory), hence :data:`MIN_BYTES`. It only pays in kernels bound by memory: in a kernel
with much arithmetic per element ordinary stores drain while the core computes, streamed ones
stall it (an erf GELU over 64M float32 on one thread: 44 ms with ordinary stores, 62 ms
streamed), hence the cost bound in onnxjit/codegen/elementwise.py.

The pattern: compute a block of the output into a small scratch array that stays in L1, then
:func:`stream_block` it to its place, whose address must be 64-byte aligned
(:func:`stream_head` counts the elements before the first aligned one); :func:`stream_fence`
orders the streamed lines before whatever the thread writes next (the pool's completion flag).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..._jit import njit

LINE = 64  # bytes per non-temporal store: one cache line, one 512-bit register

# Outputs of at least this many bytes are worth streaming. On the development VM (2 cores,
# 2 MiB of L2 each, 2 threads) a float32 copy runs at 22-23.5 GB/s (read + write) with
# ordinary stores and 33-39 GB/s streamed from 16 MiB up; but a SiLU kernel run again on the
# same input, whose output an ordinary store leaves in the last-level cache, is only faster
# streamed from 32 MiB of output (4M elements: 0.95 ms against 0.76; 8M: 1.85 against 2.01;
# 16M: 3.78 against 5.17; 64M: 16.4 against 22.4).
MIN_BYTES = 32 << 20
# The scratch block a streaming kernel computes into and then streams out. Small, so that the
# core's computing of one block and the draining of the previous block's streamed lines
# overlap instead of taking turns: on the Zen 3 VM (2 threads, 64M float32, output at
# numpy's 16-byte offset, streamed against ordinary stores in one process) x + 1 ran at
# 0.64-0.76 the ordinary kernel's time with 256 B to 2 KiB blocks and 0.86-0.89 with 16 KiB;
# x (1.5 x + 0.25) + 2 at 0.71 against 0.84.
BLOCK_BYTES = 1 << 10


@njit(inline="always")
def stream_head(a):
    """How many leading elements of the C-contiguous 1-D array ``a`` lie before its first
    64-byte-aligned element (all of them when there is none; none when the itemsize does not
    divide 64 into whole elements, which never holds for the 1, 2, 4 and 8-byte types)."""
    off = a.ctypes.data % LINE
    if off == 0:
        return 0
    if off % a.itemsize:
        return a.size  # no element is aligned: the caller stores everything normally
    return min(a.size, (LINE - off) // a.itemsize)


@njit(inline="always")
def span_of(b, head, blocks, block, n):
    """Elements ``[lo, hi)`` of claim ``b`` of a streaming kernel over ``n`` elements cut as
    ``head`` elements (before the output's first aligned one), ``blocks`` whole blocks of
    ``block`` elements, and the tail: claim 0 is the head, claims 1 to ``blocks`` the blocks
    (the ones to stream), claim ``blocks + 1`` the tail. Claim ``blocks + 2`` in all."""
    if b == 0:
        return 0, head
    if b > blocks:
        return head + blocks * block, n
    lo = head + (b - 1) * block
    return lo, lo + block


@intrinsic
def stream_block(typingctx, dst, start, src):
    """Copy the whole of ``src`` into ``dst[start:start + src.size]`` with non-temporal
    64-byte stores. Contract (not checked here): both C-contiguous 1-D arrays of one
    itemsize, ``src.nbytes`` a multiple of 64, ``dst`` 64-byte aligned at ``start`` and long
    enough. ``src`` may be unaligned."""
    if not (
        isinstance(dst, types.Array)
        and isinstance(src, types.Array)
        and dst.ndim == src.ndim == 1
        and dst.layout == src.layout == "C"
        and isinstance(start, types.Integer)
    ):
        raise TypeError(f"stream_block takes two 1-D C arrays and a start, got {dst}, {src}")
    sig = types.void(dst, start, src)

    def codegen(context, builder, sig, args):
        d = context.make_array(sig.args[0])(context, builder, args[0])
        s = context.make_array(sig.args[2])(context, builder, args[2])
        i8p = ir.IntType(8).as_pointer()
        line = ir.VectorType(ir.IntType(64), LINE // 8)
        start = context.cast(builder, args[1], sig.args[1], types.intp)
        size = context.get_abi_sizeof(context.get_data_type(sig.args[0].dtype))
        itemsize = context.get_constant(types.intp, size)
        dbase = builder.gep(builder.bitcast(d.data, i8p), [builder.mul(start, itemsize)])
        sbase = builder.bitcast(s.data, i8p)
        n_lines = builder.udiv(builder.mul(s.nitems, itemsize), ir.Constant(start.type, LINE))
        nt = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
        with cgutils.for_range(builder, n_lines) as loop:
            off = builder.mul(loop.index, ir.Constant(start.type, LINE))
            sp = builder.bitcast(builder.gep(sbase, [off]), line.as_pointer())
            dp = builder.bitcast(builder.gep(dbase, [off]), line.as_pointer())
            store = builder.store(builder.load(sp, align=1), dp, align=LINE)
            store.set_metadata("nontemporal", nt)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def stream_fence(typingctx):
    """A full memory fence (``mfence`` on x86): the streamed stores become visible before
    any later store of this thread. They are weakly ordered, and the release ordering the
    pool's done flag relies on does not cover them."""
    sig = types.void()

    def codegen(context, builder, sig, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return sig, codegen
