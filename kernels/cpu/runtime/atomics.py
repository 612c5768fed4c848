"""Atomic operations and CPU hints for Numba kernels (LLVM intrinsics; CPU target only).

These are what onnxjit's thread pool (:mod:`onnxjit.backends.cpu.pool`) is built on: threads claim
chunks of a kernel's iteration space with :func:`fetch_add` on a shared ``int64`` control array, and
wait for each other with :func:`load` in a loop that :func:`pause` and :func:`sched_yield` keep
polite. Every operation is sequentially consistent, which is what LLVM emits for x86's locked
instructions anyway and is also correct on weaker architectures.

All of it compiles to plain LLVM IR or a libc call, so kernels that use it are cached on disk
like any other (a function taking a dispatcher argument would not be).
"""

from __future__ import annotations

import platform

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = [
    "call_address",
    "call_native",
    "compare_exchange",
    "fetch_add",
    "load",
    "pause",
    "sched_getcpu",
    "sched_yield",
    "store",
]

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def _item_pointer(context, builder, aryty, ary_val, idx_val):
    ary = context.make_array(aryty)(context, builder, ary_val)
    return cgutils.get_item_pointer(context, builder, aryty, ary, [idx_val])


def _check_int64_array(arr) -> None:
    if not (isinstance(arr, types.Array) and arr.dtype == types.int64 and arr.ndim == 1):
        raise TypeError(f"atomics work on 1-D int64 arrays, got {arr}")


@intrinsic
def fetch_add(typingctx, arr, idx, val):
    """``old = arr[idx]; arr[idx] += val`` as one atomic step; returns ``old``."""
    _check_int64_array(arr)
    sig = types.int64(arr, idx, val)

    def codegen(context, builder, sig, args):
        ptr = _item_pointer(context, builder, sig.args[0], args[0], args[1])
        v = context.cast(builder, args[2], sig.args[2], types.int64)
        return builder.atomic_rmw("add", ptr, v, "seq_cst")

    return sig, codegen


@intrinsic
def compare_exchange(typingctx, arr, idx, expected, val):
    """``arr[idx] = val`` if ``arr[idx] == expected``, as one atomic step; returns whether it
    did."""
    _check_int64_array(arr)
    sig = types.boolean(arr, idx, expected, val)

    def codegen(context, builder, sig, args):
        ptr = _item_pointer(context, builder, sig.args[0], args[0], args[1])
        old = context.cast(builder, args[2], sig.args[2], types.int64)
        new = context.cast(builder, args[3], sig.args[3], types.int64)
        pair = builder.cmpxchg(ptr, old, new, "seq_cst", "seq_cst")
        return builder.extract_value(pair, 1)

    return sig, codegen


@intrinsic
def load(typingctx, arr, idx):
    """``arr[idx]`` read atomically (never hoisted out of a waiting loop by the compiler)."""
    _check_int64_array(arr)
    sig = types.int64(arr, idx)

    def codegen(context, builder, sig, args):
        ptr = _item_pointer(context, builder, sig.args[0], args[0], args[1])
        return builder.load_atomic(ptr, "seq_cst", 8)

    return sig, codegen


@intrinsic
def store(typingctx, arr, idx, val):
    """``arr[idx] = val`` as one atomic, sequentially consistent store (on x86 an exchange:
    later loads are not moved before it)."""
    _check_int64_array(arr)
    sig = types.none(arr, idx, val)

    def codegen(context, builder, sig, args):
        ptr = _item_pointer(context, builder, sig.args[0], args[0], args[1])
        v = context.cast(builder, args[2], sig.args[2], types.int64)
        builder.atomic_rmw("xchg", ptr, v, "seq_cst")
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def pause(typingctx):
    """The CPU's spin-wait hint (x86 ``pause``; nothing elsewhere)."""
    sig = types.none()

    def codegen(context, builder, sig, args):
        if _X86:
            fnty = ir.FunctionType(ir.VoidType(), [])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse2.pause")
            builder.call(fn, [])
        return context.get_dummy_value()

    return sig, codegen


#: libc's ``sched_yield()``: lets another runnable thread of this core run (a spinning thread
#: that shares a core with the thread it waits for must step aside, or it waits a time slice).
sched_yield = types.ExternalFunction("sched_yield", types.int32())

#: glibc's ``sched_getcpu()``: the CPU the calling thread runs on (a vDSO call, no syscall).
sched_getcpu = types.ExternalFunction("sched_getcpu", types.int32())


@intrinsic
def call_address(typingctx, fn, arg):
    """Call the C function ``void fn(int64 *arg)`` at address ``fn`` (both integers)."""
    sig = types.none(fn, arg)

    def codegen(context, builder, sig, args):
        i64p = ir.IntType(64).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i64p])
        f = builder.inttoptr(context.cast(builder, args[0], sig.args[0], types.intp),
                             fnty.as_pointer())  # fmt: skip
        a = builder.inttoptr(context.cast(builder, args[1], sig.args[1], types.intp), i64p)
        builder.call(f, [a])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def call_native(typingctx, addr, args):
    """Call the Numba-compiled function at address ``addr`` (an integer) with the tuple
    ``args``, in Numba's own calling convention; return 0, or 1 when it raised.

    The function must have been compiled for exactly the types of ``args`` and return None.
    Calling through the address keeps the callee's code out of the caller's module: a
    caller that names a dispatcher instead links its machine code in and has LLVM optimise
    it all again (seconds for a large kernel).
    """
    if not isinstance(args, types.BaseTuple):
        raise TypeError("call_native takes its arguments as one tuple")
    sig = types.int32(addr, args)

    def codegen(context, builder, sig, llargs):
        from numba.core.callconv import excinfo_t

        argtys = list(sig.args[1].types)
        values = [builder.extract_value(llargs[1], i) for i in range(len(argtys))]
        call_conv = context.call_conv
        fnty = call_conv.get_function_type(types.none, argtys)
        fn = builder.inttoptr(
            context.cast(builder, llargs[0], sig.args[0], types.intp), fnty.as_pointer()
        )
        retty = fnty.args[0].pointee
        retval = cgutils.alloca_once(builder, retty)
        builder.store(cgutils.get_null_value(retty), retval)
        excinfo = cgutils.alloca_once(builder, ir.PointerType(excinfo_t), name="excinfo")
        packed = list(call_conv._get_arg_packer(argtys).as_arguments(builder, values))
        code = builder.call(fn, [retval, excinfo, *packed])
        status = call_conv._get_return_status(builder, code, builder.load(excinfo))
        return builder.select(status.is_error, ir.Constant(ir.IntType(32), 1),
                              ir.Constant(ir.IntType(32), 0))  # fmt: skip

    return sig, codegen
