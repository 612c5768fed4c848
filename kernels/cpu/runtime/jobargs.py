"""A pool kernel's arguments written into, and read back from, int64 slots of a job buffer.

The thread pool (:mod:`onnxjit.backends.cpu.pool`) hands a kernel's arguments to its workers
through a shared ``int64`` array: a C-contiguous array as its data address and its dimensions, a
bool or an integer as itself, a float as its float64 bits, a tuple as its members in order.
:func:`pack_args` writes them, :func:`unpack_args` rebuilds them (arrays as views of the
caller's memory, C-contiguous, with no owner). Both are single intrinsics that emit the whole
walk as LLVM IR: written as Python statements, one per slot, the packing of a kernel with
twenty arguments took Numba 0.4 to 1.1 s to compile on a Zen 3, for a few dozen stores.

:func:`job_layout` says, from Python, how many slots arguments take and which types the
rebuilt arguments have (the kernel is compiled for exactly those), or why they cannot be
carried.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import populate_array

_i64 = ir.IntType(64)


class Uncarried(TypeError):
    """An argument type the job buffer cannot carry."""


def job_layout(ty: types.Type) -> tuple[types.Type, int]:
    """The type ``ty`` (a Numba type) has once rebuilt from the job buffer, and the slots it
    takes; raises :class:`Uncarried` for types the buffer does not carry (arrays that are not
    C-contiguous or are 0-d, anything but arrays, bools, integers, floats and tuples of
    those)."""
    if isinstance(ty, types.Array):
        if ty.layout != "C" or ty.ndim < 1:
            raise Uncarried(f"{ty} (only C-contiguous arrays of rank >= 1)")
        if not isinstance(ty.dtype, (types.Boolean, types.Integer, types.Float)):
            raise Uncarried(f"array of {ty.dtype}")
        return types.Array(ty.dtype, ty.ndim, "C"), 1 + ty.ndim
    if isinstance(ty, types.BaseTuple):
        parts = [job_layout(t) for t in ty.types]
        return types.BaseTuple.from_types([p[0] for p in parts]), sum(p[1] for p in parts)
    if isinstance(ty, (types.Boolean, types.Integer, types.Float)):
        return ty, 1
    raise Uncarried(f"argument of type {ty}")


def _walk(ty: types.Type, leaf: Callable[[types.Type, Any], Any], value: Any, builder) -> None:
    """Call ``leaf(type, value)`` on every array and scalar inside ``value`` (of type ``ty``),
    depth first, in slot order."""
    if isinstance(ty, types.BaseTuple):
        for i, t in enumerate(ty.types):
            _walk(t, leaf, builder.extract_value(value, i), builder)
    else:
        leaf(ty, value)


@intrinsic
def pack_args(typingctx, job, start, args):
    """Write the tuple ``args`` into ``job`` (a C-contiguous int64 array) from slot ``start``
    on; return the slot after the last one written. The caller has checked, with
    :func:`job_layout`, that the types are carried and the slots fit."""
    if not isinstance(args, types.BaseTuple):
        raise TypeError("pack_args takes the arguments as one tuple")
    job_layout(args)
    sig = types.int64(job, start, args)

    def codegen(context, builder, sig, llargs):
        base = context.make_array(sig.args[0])(context, builder, llargs[0]).data
        slot = [context.cast(builder, llargs[1], sig.args[1], types.int64)]

        def put(v):
            builder.store(v, builder.gep(base, [slot[0]]))
            slot[0] = builder.add(slot[0], ir.Constant(_i64, 1))

        def leaf(ty, v):
            if isinstance(ty, types.Array):
                ary = context.make_array(ty)(context, builder, v)
                put(builder.ptrtoint(ary.data, _i64))
                for d in cgutils.unpack_tuple(builder, ary.shape, ty.ndim):
                    put(d)
            elif isinstance(ty, types.Float):
                put(builder.bitcast(context.cast(builder, v, ty, types.float64), _i64))
            else:  # bool (0 or 1) and integers
                put(context.cast(builder, v, ty, types.int64))

        _walk(sig.args[2], leaf, llargs[2], builder)
        return slot[0]

    return sig, codegen


@intrinsic
def unpack_args(typingctx, job, start, arg_types):
    """The arguments :func:`pack_args` wrote into ``job`` from slot ``start``, as a tuple of
    ``arg_types`` (a tuple type, passed as a global holding the Numba type, as
    :func:`job_layout` returns it): arrays are C-contiguous views with no owner."""
    if not isinstance(arg_types, types.TypeRef) or not isinstance(
        arg_types.instance_type, types.BaseTuple
    ):
        raise TypeError(f"unpack_args needs a tuple type, got {arg_types}")
    target = arg_types.instance_type
    if job_layout(target)[0] != target:
        raise TypeError(f"unpack_args rebuilds {job_layout(target)[0]}, not {target}")
    sig = target(job, start, arg_types)

    def codegen(context, builder, sig, llargs):
        base = context.make_array(sig.args[0])(context, builder, llargs[0]).data
        slot = [context.cast(builder, llargs[1], sig.args[1], types.int64)]

        def get():
            v = builder.load(builder.gep(base, [slot[0]]))
            slot[0] = builder.add(slot[0], ir.Constant(_i64, 1))
            return v

        def rebuild(ty):
            if isinstance(ty, types.BaseTuple):
                return context.make_tuple(builder, ty, [rebuild(t) for t in ty.types])
            if isinstance(ty, types.Array):
                ary = context.make_array(ty)(context, builder)
                data = builder.inttoptr(get(), ary.data.type)
                shape = [get() for _ in range(ty.ndim)]
                itemsize = context.get_abi_sizeof(context.get_data_type(ty.dtype))
                strides, step = [], ir.Constant(_i64, itemsize)
                for d in reversed(shape):
                    strides.insert(0, step)
                    step = builder.mul(step, d)
                populate_array(
                    ary,
                    data=data,
                    shape=cgutils.pack_array(builder, shape),
                    strides=cgutils.pack_array(builder, strides),
                    itemsize=ir.Constant(_i64, itemsize),
                    meminfo=None,
                )
                return ary._getvalue()
            v = get()
            if isinstance(ty, types.Float):
                return context.cast(builder, builder.bitcast(v, ir.DoubleType()), types.float64, ty)
            if isinstance(ty, types.Boolean):
                return builder.icmp_unsigned("!=", v, ir.Constant(_i64, 0))
            return context.cast(builder, v, types.int64, ty)

        return rebuild(target)

    return sig, codegen
