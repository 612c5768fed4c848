"""Software prefetch for kernels whose next block of input starts on a new memory page.

The hardware prefetchers follow a stream only within a 4 KiB page, so a kernel that walks
rows of a few KiB (a 1024-wide float32 softmax: one page per row) takes the first misses of
every row at full memory latency. Asking for the next row's cache lines while the current
row is being computed hides them. Prefetches never fault and change no result.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..._jit import cpu_name, njit

LINE_BYTES = 64  # bytes per cache line

# Whether row kernels ask for their next row's lines at the start of each row (softmax). On
# the Xeon development VM this hid the first misses of every row (2 threads, 1024 x 1024
# float32: 164-175 us a run instead of 183-195); on the Zen 3 VM, whose prefetchers keep up
# (the time is the exp pass's), the 64 prefetches at each row start cost more than they
# hide: without them the same softmax took 0.96-0.99 the time, and 0.94 with 4096 x 128
# (kernels alternating in one process). Decided per CPU family, as measured: off on AMD Zen
# (LLVM's "znver*" names), on elsewhere.
NEXT_ROW = not cpu_name().startswith("znver")

# Kernels that walk each row in several interleaved segments (to overlap independent
# dependency chains) do so only while the data they read and write fits in this many bytes:
# from memory the short segments, several per page, defeat the prefetchers. Zen 3 VM, 2
# threads, rows of 1024 float32: an 8-op elementwise chain in four segments against one took
# 0.95 the time at 256K elements, 1.01 at 1M, 1.6 at 2M and 1.4-1.6 up to 64M; a bias + GELU
# row kernel (since replaced by the generated one) in two halves against one 0.96 at 256K,
# 1.2 at 4M and 1.8 at 64M.
ROW_STREAMS_MAX_BYTES = 8 << 20


def emit_prefetch(builder: ir.IRBuilder, ptr: ir.Value) -> None:
    """Emit a read prefetch of the cache line holding ``ptr`` (any pointer type) into every
    cache level (``prefetcht0``): for intrinsics and LLVM IR kernels."""
    i8p = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0"
    )
    # read (0), keep in every cache level (3), data cache (1)
    args = [
        builder.bitcast(ptr, i8p),
        ir.Constant(i32, 0),
        ir.Constant(i32, 3),
        ir.Constant(i32, 1),
    ]
    builder.call(fn, args)


@intrinsic
def _prefetch(typingctx, arr, idx):
    """Hint that ``arr.ravel()[idx]`` (C-contiguous ``arr``) is read soon (``prefetcht0``).
    Other layouts emit nothing: their flat index is not an offset from the data pointer."""
    if not isinstance(arr, types.Array) or not isinstance(idx, types.Integer):
        raise TypeError(f"prefetch takes an array and an integer index, got {arr} and {idx}")
    sig = types.void(arr, idx)

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        if aryty.layout != "C":
            return context.get_dummy_value()
        ary = context.make_array(aryty)(context, builder, args[0])
        emit_prefetch(builder, builder.gep(ary.data, [args[1]]))
        return context.get_dummy_value()

    return sig, codegen


@njit(inline="always")
def prefetch_all(a):
    """Ask for every cache line of the C-contiguous array ``a`` (any rank) to be loaded;
    nothing for other layouts. Issues ``a.nbytes / 64`` prefetch instructions."""
    step = max(1, LINE_BYTES // a.itemsize)
    for i in range(0, a.size, step):
        _prefetch(a, i)
