"""How a node becomes a bound kernel call, for one backend and one input signature.

An operator's implementation (registered with :func:`onnxjit.registry.onnx_op`) states what
the operator computes, on any values. Its *lowering* (registered with :func:`lowers`) is asked
once per plan, with what the plan knows of the node's inputs (a :class:`Spec` per input: kind,
element type, shape, and the value itself where it is the same in every run of the plan), and
returns a :class:`Bound`: the kernel to call, its arguments (references to the node's inputs
and outputs, and constants worked out once: sizes, packed weights), whether it writes into
output buffers the plan provides and of what shape, which input's buffer it may write its
output over, and which outputs view an input's memory. The executor calls it as it is, run
after run: no shape inference, no dispatch decision and no allocation it could avoid.

A lowering that returns None (or an operator without one) leaves the node to the generic
bound call: its implementation, called with its attributes. The plan then learns the outputs'
types and shapes from the planning run and checks them after every call (a *guard*): where a
later run's output differs (a shape that depends on data, such as NonZero's or a Loop's), the
plan re-plans the rest of the graph from there.

Lowerings import no backend's kernels: they ask the backend for one by family and name
(``lc.kernel("norm", "standardize_rows")``), so that a second backend can serve the same
lowering with its own twin.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnxjit import ir
from onnxjit.registry import NodeContext

#: Kinds of values a :class:`Spec` describes.
TENSOR, SEQUENCE, MAP, NONE, OTHER = "tensor", "sequence", "map", "none", "other"


@dataclass(frozen=True, eq=False)
class Spec:
    """What a plan knows of one value.

    ``dtype`` and ``shape`` for tensors (numpy dtype, tuple of ints), None otherwise.
    ``const`` is True when the value is the same in every run of the plan (an initializer no
    feed can override, or a value computed only from those and from shapes, such as a Reshape
    target built from a Shape), and then ``value`` holds it.
    """

    kind: str
    dtype: np.dtype | None = None
    shape: tuple[int, ...] | None = None
    const: bool = False
    value: Any = None

    @property
    def ndim(self) -> int:
        return len(self.shape) if self.shape is not None else -1

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape or ():
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize if self.dtype is not None else 0

    def describe(self) -> str:
        if self.kind == TENSOR:
            return f"{self.dtype}{list(self.shape)}"
        return self.kind


def spec_of(value: Any, const: bool = False) -> Spec:
    """The spec of a run-time value (``const``: it is the same in every run)."""
    if type(value) is np.ndarray:
        return Spec(TENSOR, value.dtype, value.shape, const, value if const else None)
    if isinstance(value, np.ndarray):
        value = np.asarray(value)
        return Spec(TENSOR, value.dtype, value.shape, const, value if const else None)
    if value is None:
        return Spec(NONE, const=const)
    if on_device(value):  # a device array (never a plan constant)
        return Spec(TENSOR, np.dtype(value.dtype), tuple(int(d) for d in value.shape))
    if isinstance(value, list):
        return Spec(SEQUENCE, const=const, value=value if const else None)
    if isinstance(value, dict):
        return Spec(MAP, const=const, value=value if const else None)
    return Spec(OTHER, const=const, value=value if const else None)


def on_device(value: Any) -> bool:
    """Whether ``value`` is a tensor in a device's memory: a numba-cuda device array (the
    form every device value takes inside a plan; the simulator's arrays included)."""
    return hasattr(value, "copy_to_host") and not isinstance(value, np.ndarray)


def tensor(dtype: Any, shape: Sequence[int]) -> Spec:
    """The spec of a tensor output a lowering declares."""
    return Spec(TENSOR, np.dtype(dtype), tuple(int(d) for d in shape))


@dataclass(frozen=True)
class In:
    """Argument: the node's input ``index``, reinterpreted as dtype ``view`` (float16 as its
    uint16 bits) and reshaped to ``shape`` (a view: values are C-contiguous) where given;
    ``flat`` is ``shape=(-1,)``."""

    index: int
    flat: bool = False
    view: Any = None
    shape: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Out:
    """Argument: the buffer of the node's output ``index`` (``flat``, ``view`` and ``shape``
    as for :class:`In`). A bound call may declare more outputs than the node has: the extra
    ones, and outputs the node omits, are scratch buffers the plan provides."""

    index: int
    flat: bool = False
    view: Any = None
    shape: tuple[int, ...] | None = None


@dataclass(frozen=True, eq=False)
class Bound:
    """A kernel call bound for one plan.

    ``fn(*args)`` with ``args`` resolved: :class:`In` and :class:`Out` references become the
    run's values and buffers, anything else is passed as it is. With ``outs`` given and
    ``writes`` true, ``fn`` writes the node's outputs into buffers of those specs, which the
    plan provides (drawn from its arena, or fresh for values that leave the graph) and
    returns nothing; otherwise it returns the outputs (one value for a one-output node, a
    tuple otherwise), whose specs are ``outs`` when the lowering knows them (else the planning
    run observes them and a guard checks them at every run).

    ``views[j]`` is the input whose memory output j may share (a reshape, a slice), or None:
    the plan keeps that input's buffer alive while the output lives. ``inplace`` lists inputs
    whose buffer the (single, written) output may take when the input dies at this node;
    ``with_inplace(i)`` then gives the call that does so (it writes through input i, which it
    also receives as the output).
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    outs: tuple[Spec, ...] | None = None
    writes: bool = False
    views: tuple[int | None, ...] = ()
    inplace: tuple[int, ...] = ()
    with_inplace: Callable[[int], Bound] | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if self.writes and self.outs is None:
            raise ValueError(f"bound call {self.name or self.fn!r} writes outputs of no spec")


@dataclass
class LowerContext:
    """What a lowering is given: the node, its attributes (schema defaults filled in), the
    specs of its inputs (None for an omitted optional input), the backend it lowers for and
    the session's settings."""

    node: ir.Node
    attrs: Mapping[str, Any]
    inputs: tuple[Spec | None, ...]
    backend: Any
    ctx: NodeContext | None
    settings: Any = None  # the session's onnxjit.config.SessionSettings (None: defaults)

    def kernel(self, family: str, name: str) -> Any:
        """The backend's kernel ``name`` of ``family`` (``kernels/<backend>/<family>.py``)."""
        return self.backend.kernel(family, name)

    def const(self, i: int) -> Any:
        """Input ``i``'s value when it is constant for the plan, else None."""
        if i < len(self.inputs):
            s = self.inputs[i]
            if s is not None and s.const:
                return s.value
        return None

    def is_const(self, i: int) -> bool:
        """Input ``i`` is absent or constant for the plan."""
        return i >= len(self.inputs) or self.inputs[i] is None or self.inputs[i].const

    @property
    def outputs_used(self) -> tuple[bool, ...]:
        return tuple(bool(o) for o in self.node.outputs)

    def error(self, message: str) -> Exception:
        if self.ctx is not None:
            return self.ctx.error(message)
        return ValueError(f"{self.node.describe()}: {message}")


Lowering = Callable[[LowerContext], "Bound | None"]
_LOWERINGS: dict[Callable[..., Any], Lowering] = {}


def lowers(*impls: Callable[..., Any]) -> Callable[[Lowering], Lowering]:
    """Register the decorated function as the lowering of the implementations ``impls``
    (functions decorated with :func:`onnxjit.registry.onnx_op` or ``internal_op``).

    It is called as ``lower(lc)`` with a :class:`LowerContext` and returns a :class:`Bound`
    doing exactly what the implementation does for inputs of those specs, or None where it
    has nothing better than the implementation itself. Validation that depends only on specs
    and constants belongs in the lowering (it then costs nothing per run); validation of data
    (indices in range) stays in the bound call.
    """

    def deco(lower: Lowering) -> Lowering:
        for impl in impls:
            if impl in _LOWERINGS:
                raise ValueError(f"{impl.__qualname__} already has a lowering")
            _LOWERINGS[impl] = lower
        return lower

    return deco


def lowering_of(impl: Callable[..., Any]) -> Lowering | None:
    """The lowering registered for ``impl`` (see :func:`lowers`), or None."""
    return _LOWERINGS.get(impl)


def returns(fn: Callable[..., Any], *args: Any, outs: Sequence[Spec], name: str = "",
            views: Sequence[int | None] = ()) -> Bound:  # fmt: skip
    """A bound call that returns outputs of the known specs ``outs``."""
    return Bound(fn, tuple(args), tuple(outs), False, tuple(views), name=name or _name(fn))


def writes(fn: Callable[..., Any], *args: Any, outs: Sequence[Spec], name: str = "",
           inplace: Sequence[int] = (),
           with_inplace: Callable[[int], Bound] | None = None) -> Bound:  # fmt: skip
    """A bound call that writes outputs of specs ``outs`` into the buffers it is given."""
    return Bound(
        fn, tuple(args), tuple(outs), True, (), tuple(inplace), with_inplace, name or _name(fn)
    )


def view(fn: Callable[..., Any], *args: Any, out: Spec, of: int = 0, name: str = "") -> Bound:
    """A bound call returning one output that may view input ``of``'s memory."""
    return Bound(fn, tuple(args), (out,), False, (of,), name=name or _name(fn))


# Functions bound calls make that also run on device arrays -> the form that does (itself,
# or a stand-in for a builtin that takes numpy arrays only).
_DEVICE_FORMS: dict[Any, Callable[..., Any]] = {}


def portable(fn: Any, device_form: Callable[..., Any] | None = None) -> Any:
    """Declare that ``fn``, called by bound calls, does its work on a device backend's arrays
    too (it only uses what numpy and device arrays share: ``reshape``, ``shape``, slicing),
    or that ``device_form`` does it there (for a builtin such as ``np.ndarray.reshape``).
    A device backend runs a bound call of a portable function on the device; any other
    function that is not one of the backend's kernels runs on the CPU. Returns ``fn``."""
    _DEVICE_FORMS[fn] = device_form if device_form is not None else fn
    return fn


def device_form(fn: Any) -> Callable[..., Any] | None:
    """The form of ``fn`` that takes device arrays (see :func:`portable`), or None."""
    try:
        return _DEVICE_FORMS.get(fn)
    except TypeError:  # an unhashable callable is no portable function
        return None


def _name(fn: Any) -> str:
    module = getattr(fn, "__module__", "") or ""
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{module}.{qual}" if module else qual
