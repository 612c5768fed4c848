"""Elementwise expressions bound to generated CUDA kernels, for one plan.

The GPU twin of :mod:`onnxjit.backends.cpu.elementwise`, with the same contract: the op
layer's scalar expressions (:mod:`onnxjit.codegen.expr`) and the input specs of a plan give a
bound call writing the outputs. Planning (output shape and dtypes, collapsed sizes, broadcast
masks) is the CPU generator's :func:`onnxjit.codegen.elementwise.plan_for`; the kernel is the
grid-stride ``@cuda.jit`` kernel :func:`onnxjit.codegen.elementwise.cuda_kernel` generates from
the same expressions, launched on the run's stream (:mod:`onnxjit.kernels.cuda.runtime`).

float16 inputs and outputs are the device's float16 arrays, computed in float32 as on the CPU.
Not served (None, so the node takes the CPU path the plan decides): bfloat16 (numba has no
such type) and outputs of a stored type the kernel cannot write itself (the CPU plan's
``post`` conversions).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onnxjit.codegen import elementwise as gen
from onnxjit.codegen.expr import Expr
from onnxjit.lowering import Bound, In, Out, Spec, tensor, writes


def _nothing(*args: Any) -> None:
    """The call of an elementwise node with an empty output: nothing to launch."""


def bind(
    exprs: Sequence[Expr],
    inputs: Sequence[Spec],
    out_dtypes: Sequence[Any] | None = None,
    positions: Sequence[int] | None = None,
) -> Bound | None:
    """A call computing ``exprs`` over broadcast tensors of specs ``inputs`` into outputs of
    ``out_dtypes`` (see :func:`onnxjit.codegen.elementwise.apply_many`) on the GPU, or None
    where the kernel cannot (bfloat16, an output type it cannot store itself).

    ``Input(k)`` reads the node's input ``positions[k]`` (by default k), or where
    ``positions[k]`` is an array, that array (a constant operand), copied to the device once
    here. The call's arguments are the outputs and inputs as flat device arrays, then the
    collapsed sizes; its function launches the kernel on ``runtime.stream()`` and returns
    without waiting. A single output may take the buffer of an input of its shape and type
    (``inplace``): each thread reads its element before writing it, so the same kernel serves.
    """
    if positions is None:
        positions = range(len(inputs))
    plan = gen.plan_for(exprs, inputs, out_dtypes)
    in_dtypes = [s.dtype for s in inputs]
    if any(p is not None for p in plan.post) or "bf16" in sum(
        gen.narrow_kinds(exprs, plan, in_dtypes), ()
    ):
        return None
    outs = tuple(tensor(dt, plan.out_shape) for dt in plan.alloc)
    if not plan.size:
        return writes(_nothing, outs=outs, name="cuda elementwise (empty)")
    from numba import cuda

    from onnxjit.kernels.cuda import runtime

    kernel = gen.cuda_kernel(exprs, plan, in_dtypes)
    args = (
        *(Out(j, flat=True) for j in range(len(plan.alloc))),
        *(
            In(p, flat=True) if isinstance(p, int) else cuda.to_device(p.reshape(-1))
            for p in positions
        ),
        *plan.sizes,
    )
    grid, block = runtime.blocks(plan.size), runtime.BLOCK

    def launch(*a: Any) -> None:
        kernel[grid, block, runtime.stream()](*a)

    name = f"cuda elementwise {gen.cuda_source_path(exprs, plan, in_dtypes)}"
    candidates: tuple[int, ...] = ()
    if len(exprs) == 1:
        candidates = tuple(
            p
            for p, s in zip(positions, inputs)
            if isinstance(p, int) and s.shape == plan.out_shape and s.dtype == plan.alloc[0]
        )

    def with_inplace(p: int) -> Bound:
        return writes(launch, *args, outs=outs, name=f"{name} (in place)")

    return writes(
        launch, *args, outs=outs, name=name, inplace=candidates, with_inplace=with_inplace
    )
