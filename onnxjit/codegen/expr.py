"""A scalar expression IR for elementwise kernels.

An expression is a DAG of immutable, hashable nodes; each node knows the numpy dtype of its
value (the *compute* dtype: float16/bfloat16 tensors are computed in float32). The emitter
(:mod:`onnxjit.codegen.elementwise`) turns a tuple of output expressions over N inputs into one
Numba loop nest, so a single ONNX op is a one-node expression and a fused chain of ops is a
larger DAG; nothing here is specific to one op.

Nodes:

* :class:`Input` ``(index, dtype)``: element of the kernel's ``index``-th input tensor.
* :class:`Const` ``(value, dtype)``: a literal rendered with its dtype (``np.float32(0.5)``).
* :class:`Op` ``(name, args, dtype)``: an operator (``add``, ``lt``, ``neg``, ``cast``,
  ``where``...; see :data:`BINARY`, :data:`UNARY`) or otherwise the name of a helper in
  :mod:`onnxjit.kernels.scalar`, resolved for the dtype of the first argument
  (``sigmoid`` on float32 -> ``sigmoid_f32``, ``div`` on int32 -> ``div_int``).

Build nodes with the functions at the bottom (:func:`inp`, :func:`const`, :func:`op`,
:func:`call`, :func:`cast`, :func:`where`); they compute result dtypes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

# Binary operators rendered as Python operators: name -> (ast operator class name, is compare).
BINARY: dict[str, tuple[str, bool]] = {
    "add": ("Add", False),
    "sub": ("Sub", False),
    "mul": ("Mult", False),
    "truediv": ("Div", False),
    "pow": ("Pow", False),
    "bitand": ("BitAnd", False),
    "bitor": ("BitOr", False),
    "bitxor": ("BitXor", False),
    "lt": ("Lt", True),
    "le": ("LtE", True),
    "gt": ("Gt", True),
    "ge": ("GtE", True),
    "eq": ("Eq", True),
    "ne": ("NotEq", True),
}

# Unary operators rendered as Python operators.
UNARY: dict[str, str] = {"neg": "USub", "not": "Not", "invert": "Invert"}

BOOL = np.dtype(np.bool_)


class Expr:
    """Base class: every node has a ``dtype`` and is hashable by structure."""

    __slots__ = ("dtype", "_hash")
    dtype: np.dtype

    def _key(self) -> tuple:
        raise NotImplementedError

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return (
            type(other) is type(self)
            and other._hash == self._hash  # type: ignore[attr-defined]
            and other._key() == self._key()  # type: ignore[attr-defined]
        )

    def children(self) -> tuple[Expr, ...]:
        return ()


class Input(Expr):
    """Element of input ``index`` (of compute dtype ``dtype``)."""

    __slots__ = ("index",)

    def __init__(self, index: int, dtype: Any):
        self.index = int(index)
        self.dtype = np.dtype(dtype)
        self._hash = hash(("in", self.index, self.dtype))

    def _key(self) -> tuple:
        return (self.index, self.dtype)

    def __repr__(self) -> str:
        return f"Input({self.index}, {self.dtype})"


class Const(Expr):
    """A literal of a given dtype; compared by its bytes (so NaN constants compare equal)."""

    __slots__ = ("value",)

    def __init__(self, value: Any, dtype: Any):
        self.dtype = np.dtype(dtype)
        self.value = self.dtype.type(value)
        self._hash = hash(("c", self.dtype, self.value.tobytes()))

    def _key(self) -> tuple:
        return (self.dtype, self.value.tobytes())

    def __repr__(self) -> str:
        return f"Const({self.value!r}, {self.dtype})"


class Op(Expr):
    """An operator or scalar-helper application."""

    __slots__ = ("name", "args")

    def __init__(self, name: str, args: Iterable[Expr], dtype: Any):
        self.name = name
        self.args = tuple(args)
        self.dtype = np.dtype(dtype)
        self._hash = hash(("op", name, self.args, self.dtype))

    def _key(self) -> tuple:
        return (self.name, self.args, self.dtype)

    def children(self) -> tuple[Expr, ...]:
        return self.args

    def __repr__(self) -> str:
        args = ", ".join(map(repr, self.args))
        return f"{self.name}<{self.dtype}>({args})"


# ---------------------------------------------------------------------------------------------
# Builders
# ---------------------------------------------------------------------------------------------


def inp(index: int, dtype: Any) -> Input:
    return Input(index, dtype)


def const(value: Any, dtype: Any) -> Const:
    return Const(value, dtype)


def op(name: str, *args: Expr) -> Op:
    """A Python-operator node; comparisons and ``not`` give bool, others the first arg's dtype."""
    if name in BINARY:
        if len(args) != 2:
            raise TypeError(f"{name} takes 2 operands, got {len(args)}")
        return Op(name, args, BOOL if BINARY[name][1] else args[0].dtype)
    if name in UNARY:
        if len(args) != 1:
            raise TypeError(f"{name} takes 1 operand, got {len(args)}")
        return Op(name, args, BOOL if name == "not" else args[0].dtype)
    raise KeyError(f"{name!r} is not an operator; use call() for scalar helpers")


def call(name: str, *args: Expr, dtype: Any = None) -> Op:
    """A call of the scalar helper family ``name``; the result dtype defaults to args[0]'s."""
    if name in BINARY or name in UNARY or name in ("cast", "where"):
        raise KeyError(f"{name!r} is an operator; use op()/cast()/where()")
    return Op(name, args, args[0].dtype if dtype is None else dtype)


def cast(x: Expr, dtype: Any) -> Expr:
    """Convert to ``dtype`` (numpy astype semantics; to bool means ``!= 0``)."""
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    return Op("cast", (x,), dtype)


def where(cond: Expr, a: Expr, b: Expr) -> Op:
    if cond.dtype != BOOL:
        cond = cast(cond, BOOL)
    return Op("where", (cond, a, b), a.dtype)


def walk(roots: Iterable[Expr]) -> Iterator[Expr]:
    """Every distinct node reachable from ``roots``, children before parents."""
    # Keyed by structure, so equal subtrees built as distinct objects are computed once.
    seen: set[Expr] = set()
    order: list[Expr] = []

    def visit(e: Expr) -> None:
        # Iterative post-order: fused DAGs may be deep enough to hit the recursion limit.
        stack: list[tuple[Expr, bool]] = [(e, False)]
        while stack:
            node, expanded = stack.pop()
            if node in seen:
                continue
            if expanded:
                seen.add(node)
                order.append(node)
                continue
            stack.append((node, True))
            for child in reversed(node.children()):
                if child not in seen:
                    stack.append((child, False))

    for r in roots:
        visit(r)
    return iter(order)


def input_dtypes(roots: Iterable[Expr]) -> tuple[np.dtype, ...]:
    """The dtype of every input index used by ``roots`` (indices must be 0..n-1, no gaps)."""
    found: dict[int, np.dtype] = {}
    for node in walk(roots):
        if isinstance(node, Input):
            prev = found.setdefault(node.index, node.dtype)
            if prev != node.dtype:
                raise TypeError(f"input {node.index} used as both {prev} and {node.dtype}")
    n = len(found)
    if sorted(found) != list(range(n)):
        raise ValueError(f"inputs must be numbered 0..{n - 1}, found {sorted(found)}")
    return tuple(found[i] for i in range(n))
