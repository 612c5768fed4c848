"""Operator implementations keyed by ``(domain, op_type, since_version)``.

An implementation is a plain Python function registered with :func:`onnx_op`::

    @onnx_op("Softmax", since=13)
    def softmax_13(x, *, axis=-1):
        ...
        return y

Its signature is the contract:

* positional parameters are the operator's inputs in schema order; an optional input that the
  node leaves out (empty name or missing trailing input) arrives as ``None``; a variadic input
  is a ``*args`` parameter;
* keyword-only parameters are the attributes the implementation accepts, with the schema's
  default for that version (``None`` where the schema has none); an attribute the node sets that
  is not a keyword-only parameter makes the session refuse the node;
* a first positional parameter named ``ctx`` receives a :class:`NodeContext` (node name,
  outputs wanted, a way to raise errors that name the node);
* the function returns one value, or a tuple with one entry per node output (a tuple, not a
  list: a Python list is how a sequence value is represented).

Resolution follows the spec: the model's opset import for the node's domain picks the schema
(newest ``since_version`` at or below the import), then the implementation with the largest
``since`` at or below that schema version runs it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import onnx.defs

from onnxjit.errors import InvalidArgumentError, UnsupportedOperatorError

DEFAULT_DOMAIN = ""
ML_DOMAIN = "ai.onnx.ml"


def normalize_domain(domain: str) -> str:
    """``"ai.onnx"`` and ``""`` both name the default domain."""
    return DEFAULT_DOMAIN if domain in ("", "ai.onnx") else domain


@dataclass(frozen=True)
class OpImpl:
    """One registered implementation of one operator version."""

    domain: str
    op_type: str
    since: int
    fn: Callable[..., Any]
    inputs: tuple[str, ...]
    variadic: bool
    attrs: dict[str, Any] = field(hash=False)
    takes_ctx: bool

    @property
    def label(self) -> str:
        dom = f"{self.domain}." if self.domain else ""
        return f"{dom}{self.op_type}-{self.since}"


_REGISTRY: dict[tuple[str, str], list[OpImpl]] = {}


def onnx_op(op_type: str, since: int, domain: str = DEFAULT_DOMAIN):
    """Register the decorated function as ``(domain, op_type, since)``.

    Registering the same triple twice raises ``ValueError`` at import time. The function can be
    stacked under several decorators when one body serves several versions.
    """
    domain = normalize_domain(domain)

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)
        inputs: list[str] = []
        attrs: dict[str, Any] = {}
        variadic = False
        takes_ctx = False
        for i, p in enumerate(sig.parameters.values()):
            if i == 0 and p.name == "ctx" and p.kind is p.POSITIONAL_OR_KEYWORD:
                takes_ctx = True
            elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                inputs.append(p.name)
            elif p.kind is p.VAR_POSITIONAL:
                variadic = True
                inputs.append(p.name)
            elif p.kind is p.KEYWORD_ONLY:
                attrs[p.name] = None if p.default is p.empty else p.default
            else:
                raise TypeError(f"{fn.__qualname__}: **kwargs is not allowed in an op signature")
        impl = OpImpl(domain, op_type, since, fn, tuple(inputs), variadic, attrs, takes_ctx)
        versions = _REGISTRY.setdefault((domain, op_type), [])
        if any(v.since == since for v in versions):
            raise ValueError(f"{impl.label} is registered twice; keep one registration")
        versions.append(impl)
        versions.sort(key=lambda v: v.since)
        return fn

    return deco


def implementations() -> dict[tuple[str, str], list[OpImpl]]:
    """Every registration, for tables and audits (sorted by since within an op)."""
    return {k: list(v) for k, v in sorted(_REGISTRY.items())}


def find_schema(op_type: str, opset: int, domain: str) -> onnx.defs.OpSchema | None:
    """The schema a node obeys at the given opset import, or None if onnx has none."""
    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None


def find_impl(domain: str, op_type: str, since_version: int) -> OpImpl | None:
    """Our implementation with the largest ``since`` at or below ``since_version``."""
    best = None
    for impl in _REGISTRY.get((normalize_domain(domain), op_type), ()):
        if impl.since <= since_version:
            best = impl
    return best


@dataclass
class NodeContext:
    """What an implementation may know about the node it runs (passed as ``ctx``)."""

    name: str
    label: str
    n_outputs: int
    outputs_used: tuple[bool, ...]
    # Values of the enclosing scopes that subgraph attributes read (name -> value); filled
    # per call for nodes that carry subgraphs.
    outer: dict[str, Any] = field(default_factory=dict)

    def run_subgraph(self, subgraph: Any, inputs: list[Any]) -> list[Any]:
        """Run a graph attribute (bound as a ``plan.Subgraph``) on positional inputs."""
        return subgraph.program.run(inputs, outer=self.outer)

    def error(self, message: str) -> InvalidArgumentError:
        """An InvalidArgumentError whose message starts with the node and operator."""
        where = f"node {self.name!r}" if self.name else "node"
        return InvalidArgumentError(f"{where} ({self.label}): {message}")

    def unsupported(self, message: str) -> UnsupportedOperatorError:
        where = f"node {self.name!r}" if self.name else "node"
        return UnsupportedOperatorError(f"{where} ({self.label}): {message}")


def bind_graph(graph: Any, opsets: dict[str, int], problems: list[str]) -> None:
    """Attach ``since_version`` and ``impl`` to every node (subgraphs included).

    Nodes whose operator has no implementation are reported in ``problems``; attributes that
    the implementation does not accept are reported too.
    """
    for node in graph.nodes:
        for value in node.attrs.values():
            for sub in value if isinstance(value, list) else [value]:
                if hasattr(sub, "nodes") and hasattr(sub, "initializers"):
                    bind_graph(sub, opsets, problems)
        if node.impl is not None:
            continue
        domain = normalize_domain(node.domain)
        if node.since_version is None:
            schema = find_schema(node.op_type, opsets.get(domain, 0), domain)
            if schema is None:
                problems.append(
                    f"{node.describe()}: operator {node.op_type!r} does not exist in domain "
                    f"{domain or 'ai.onnx'!r} at opset {opsets.get(domain)}; fix the op_type "
                    "or the opset_import"
                )
                continue
            node.since_version = schema.since_version
        impl = find_impl(domain, node.op_type, node.since_version)
        if impl is None:
            versions = [i.since for i in _REGISTRY.get((domain, node.op_type), ())]
            have = f" (implemented versions: {versions})" if versions else ""
            problems.append(
                f"{node.describe()}: onnxjit has no implementation of {node.label}{have}; "
                "export the model at an opset onnxjit supports, or open an issue"
            )
            continue
        unknown = sorted(set(node.attrs) - set(impl.attrs))
        if unknown:
            problems.append(
                f"{node.describe()}: attributes {unknown} are not supported by onnxjit's "
                f"{impl.label} (it accepts {sorted(impl.attrs)}); remove them or open an issue"
            )
            continue
        node.impl = impl


def supported_ops_markdown() -> str:
    """The supported-operator table of the README, generated from the registrations.

    One row per (domain, operator): the registered since-versions. The README embeds this text
    between ``<!-- ops-table -->`` markers; a test fails when the two differ.
    """
    rows = ["| domain | operator | implemented versions |", "|---|---|---|"]
    for (domain, op), versions in sorted(_REGISTRY.items()):
        if domain.startswith("test."):
            continue
        since = ", ".join(str(v.since) for v in versions)
        rows.append(f"| {domain or 'ai.onnx'} | {op} | {since} |")
    return "\n".join(rows) + "\n"
