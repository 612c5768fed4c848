"""Elementwise expressions bound to generated CPU kernels, for one plan.

The op layer describes an elementwise node (a lone operator, a fused group, onnxjit's Gelu)
as scalar expressions over its inputs (:mod:`onnxjit.codegen.expr`, target-neutral); this
module turns them, with the input specs a plan gives, into a bound call of the loop nest that
:mod:`onnxjit.codegen.elementwise` generates for the CPU: serial, or run by the thread pool
when the work is large, with a variant that writes its output over an input where the plan
lets it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxjit.codegen import elementwise as gen
from onnxjit.codegen.expr import Expr
from onnxjit.lowering import Bound, In, Out, Spec, tensor, writes


def _nothing(*args: Any) -> None:
    """The call of an elementwise node with an empty output: nothing to compute."""


def bind(
    exprs: Sequence[Expr],
    inputs: Sequence[Spec],
    out_dtypes: Sequence[Any] | None = None,
    positions: Sequence[int] | None = None,
) -> Bound | None:
    """A call computing ``exprs`` over broadcast tensors of specs ``inputs`` into outputs of
    ``out_dtypes`` (see :func:`onnxjit.codegen.elementwise.apply_many`), or None where the
    kernel cannot store an output's type itself. ``Input(k)`` reads the node's input
    ``positions[k]`` (by default k), or where ``positions[k]`` is an array, that array (a
    constant operand: a 0-d attribute value)."""
    if positions is None:
        positions = range(len(inputs))
    plan = gen.plan_for(exprs, inputs, out_dtypes)
    if any(p is not None for p in plan.post):
        return None
    outs = tuple(tensor(dt, plan.out_shape) for dt in plan.alloc)
    if not plan.size:
        return writes(_nothing, outs=outs, name="elementwise (empty)")
    bits = np.dtype(np.uint16) if plan.narrow else None
    args = (
        *(Out(j, flat=True, view=_bits(dt, bits)) for j, dt in enumerate(plan.alloc)),
        *(
            In(p, flat=True, view=_bits(s.dtype, bits)) if isinstance(p, int) else p.reshape(-1)
            for p, s in zip(positions, inputs)
        ),
        *plan.sizes,
    )
    name = f"elementwise {plan.entry.source_path}"
    candidates: tuple[int, ...] = ()
    if len(exprs) == 1:
        candidates = tuple(
            p
            for k, (p, s) in enumerate(zip(positions, inputs))
            if isinstance(p, int)
            and s.shape == plan.out_shape
            and s.dtype == plan.alloc[0]
            and gen.writes_in_place(plan, k)
        )
    kernel_of = {p: k for k, p in enumerate(positions) if isinstance(p, int)}

    def with_inplace(p: int) -> Bound | None:
        fn = gen.bind_plan(plan, inputs, kernel_of[p])
        if fn is None:
            return None
        return writes(fn, *args, outs=outs, name=f"{name} (in place)")

    fn = gen.bind_plan(plan, inputs)
    return writes(fn, *args, outs=outs, name=name, inplace=candidates, with_inplace=with_inplace)


def _bits(dtype: np.dtype, bits: np.dtype | None) -> np.dtype | None:
    """The view a narrow float (float16, bfloat16) travels as: its uint16 bits."""
    return bits if bits is not None and dtype in gen.NARROW_FLOATS else None
