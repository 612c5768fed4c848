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

import functools
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import onnx
import onnx.defs

from onnxjit import interrupt, ir
from onnxjit.errors import InvalidArgumentError, UnsupportedOperatorError

DEFAULT_DOMAIN = ""
ML_DOMAIN = "ai.onnx.ml"


def normalize_domain(domain: str) -> str:
    """``"ai.onnx"`` and ``""`` both name the default domain."""
    return DEFAULT_DOMAIN if domain in ("", "ai.onnx") else domain


# Operators whose results must not be computed once for all runs (constant folding, a plan's
# static values): they draw random numbers.
NONDETERMINISTIC = frozenset(
    {
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
        "Dropout",  # in training mode
    }
)


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


# Operators that only graph passes create (fused groups and patterns), in their own domain.
INTERNAL_DOMAIN = "onnxjit"
# The attribute that lists, in a written model, the nodes a fused node replaced ("Add-14 add",
# as InferenceSession.graph_nodes() spells them): documentation, not an operator attribute.
MEMBERS_ATTRIBUTE = "members"
_INTERNAL: dict[str, OpImpl] = {}


def internal_op(op_type: str):
    """Register the decorated function as the onnxjit-domain operator ``op_type``.

    Internal operators have no ONNX schema and no versions: graph passes create their nodes
    (see :func:`onnxjit.passes.rewrite.fused_node`) after binding, and models cannot name them.
    The signature follows the :func:`onnx_op` contract.
    """

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        if op_type in _INTERNAL:
            raise ValueError(f"internal operator {op_type!r} is registered twice")
        onnx_op(op_type, since=1, domain=INTERNAL_DOMAIN)(fn)
        _INTERNAL[op_type] = _REGISTRY.pop((INTERNAL_DOMAIN, op_type))[0]
        return fn

    return deco


def internal_impl(op_type: str) -> OpImpl:
    """The implementation of internal operator ``op_type`` (KeyError if none)."""
    return _INTERNAL[op_type]


def internal_ops() -> dict[str, OpImpl]:
    """Every internal operator, by name."""
    return dict(_INTERNAL)


def implementations() -> dict[tuple[str, str], list[OpImpl]]:
    """Every registration, for tables and audits (sorted by since within an op)."""
    return {k: list(v) for k, v in sorted(_REGISTRY.items())}


def find_schema(op_type: str, opset: int, domain: str) -> onnx.defs.OpSchema | None:
    """The schema a node obeys at the given opset import, or None if onnx has none."""
    if not 0 < opset < 1 << 31:  # onnx takes an int: a hostile version raises TypeError there
        return None
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
    # The session's settings (onnxjit.config.SessionSettings) that kernel choices read; None
    # outside a session (the defaults).
    settings: Any = None

    def kernel(self, family: str, name: str) -> Any:
        """The backend's kernel ``name`` of ``family`` (see :mod:`onnxjit.backends`): an
        implementation asks for its kernels so, never importing a backend's."""
        return _backend().kernel(family, name)

    def run_kernel(self, family: str, name: str, work: int, *args: Any) -> None:
        """Run kernel ``name`` of ``family`` on ``args``, on the backend's threads when
        ``work`` (elements) is large (:meth:`onnxjit.backends.Backend.run`)."""
        _backend().run(family, name, work, *args)

    @property
    def backend(self) -> Any:
        """The backend the node runs on."""
        return _backend()

    @property
    def winograd(self) -> bool:
        """Winograd convolutions allowed (config entry ``onnxjit.conv_winograd``, default on)."""
        return self.settings is None or self.settings.conv_winograd

    def run_subgraph(self, subgraph: Any, inputs: list[Any]) -> list[Any]:
        """Run a graph attribute (bound as a :class:`onnxjit.program.Subgraph`) on positional
        inputs: its program, with a plan per signature like the main graph's. A run told to
        stop (``RunOptions.terminate``) raises RunTerminatedError here instead."""
        interrupt.check()
        return subgraph.program.run_subgraph(inputs, self.outer)

    def error(self, message: str) -> InvalidArgumentError:
        """An InvalidArgumentError whose message starts with the node and operator."""
        where = f"node {self.name!r}" if self.name else "node"
        return InvalidArgumentError(f"{where} ({self.label}): {message}")

    def unsupported(self, message: str) -> UnsupportedOperatorError:
        where = f"node {self.name!r}" if self.name else "node"
        return UnsupportedOperatorError(f"{where} ({self.label}): {message}")


@functools.cache
def _schema_defaults(domain: str, op_type: str, since_version: int) -> dict[str, Any]:
    """The attribute defaults of the schema version ``since_version`` of an operator, decoded
    as the loader decodes a node's attributes (strings as str, tensors as arrays)."""
    schema = _schema_history(domain, op_type).get(since_version)
    if schema is None:
        return {}
    from onnxjit.model import attribute_default

    out: dict[str, Any] = {}
    for name, attr in schema.attributes.items():
        proto = attr.default_value
        if proto is not None and proto.type != onnx.AttributeProto.UNDEFINED:
            out[name] = attribute_default(name, proto)
    return out


def attribute_values(node: ir.Node) -> dict[str, Any]:
    """The attributes a bound node's implementation is called with: the node's own, else the
    default of the schema version the node obeys (as onnx's reference evaluator fills them),
    else the implementation's (attributes with no default, and internal operators)."""
    impl: OpImpl = node.impl
    values = dict(impl.attrs)
    if impl.domain != INTERNAL_DOMAIN:
        # a node a pass made may carry no version: the implementation's own is the schema's
        version = node.since_version if node.since_version is not None else impl.since
        defaults = _schema_defaults(impl.domain, impl.op_type, version)
        values.update((k, v) for k, v in defaults.items() if k in values)
    values.update(node.attrs)
    return values


def _backend() -> Any:
    from onnxjit.backends.cpu import CPU  # the only backend yet

    return CPU


def bind_graph(graph: Any, opsets: dict[str, int], problems: list[str]) -> None:
    """Attach ``since_version`` and ``impl`` to every node (subgraphs included).

    Nodes whose operator has no implementation are reported in ``problems``; attributes that
    the implementation does not accept are reported too.
    """
    for node in graph.nodes:
        for sub in ir.subgraphs(node):
            bind_graph(sub, opsets, problems)
        if node.impl is not None:
            continue
        domain = normalize_domain(node.domain)
        if domain == INTERNAL_DOMAIN:
            _bind_internal(node, problems)
            continue
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


def _bind_internal(node: ir.Node, problems: list[str]) -> None:
    """Bind a node of onnxjit's own domain read from a model file (the checker has vetted its
    operator and attributes); its ``members`` attribute becomes ``node.member_labels``."""
    impl = _INTERNAL.get(node.op_type)
    if impl is None:
        problems.append(
            f"{node.describe()}: onnxjit has no operator {node.op_type!r} in its domain "
            f"{INTERNAL_DOMAIN!r}; load the original model instead"
        )
        return
    labels = node.attrs.pop(MEMBERS_ATTRIBUTE, None)
    node.attr_types.pop(MEMBERS_ATTRIBUTE, None)
    if labels is not None:
        node.member_labels = [str(x) for x in labels]
    node.since_version = 1
    node.impl = impl


# Element types in the order the README lists them; sub-byte and 8-bit float kinds are grouped.
_FLOAT_TYPES = ("float16", "float", "double", "bfloat16")
_NARROW_FLOATS = (
    ("float8", ("e4m3fn", "e4m3fnuz", "e5m2", "e5m2fnuz", "e8m0")),
    ("float6", ("e2m3", "e3m2")),
    ("float4", ("e2m1",)),
)
_INT_WIDTHS = ("8", "16", "32", "64")
_OTHER_TYPES = ("int4", "int2", "uint4", "uint2", "bool", "string", "complex64", "complex128")
_CONTAINERS = (("seq(", "sequences"), ("optional(", "optionals"), ("map(", "maps"))


@functools.cache
def _all_schema_history() -> dict[tuple[str, str], dict[int, onnx.defs.OpSchema]]:
    # onnx rebuilds the whole schema list on every call (about 0.1 s): index it once.
    history: dict[tuple[str, str], dict[int, onnx.defs.OpSchema]] = {}
    for s in onnx.defs.get_all_schemas_with_history():
        history.setdefault((normalize_domain(s.domain), s.name), {})[s.since_version] = s
    return history


def _schema_history(domain: str, op_type: str) -> dict[int, onnx.defs.OpSchema]:
    return _all_schema_history().get((domain, op_type), {})


def served_schema(impl: OpImpl) -> onnx.defs.OpSchema | None:
    """The newest schema version that resolves to ``impl`` (None if onnx has none)."""
    later = [
        i.since for i in _REGISTRY.get((impl.domain, impl.op_type), ()) if i.since > impl.since
    ]
    stop = min(later, default=None)
    history = _schema_history(impl.domain, impl.op_type)
    served = [v for v in history if v >= impl.since and (stop is None or v < stop)]
    return history[max(served)] if served else None


def _type_names(type_strs: set[str] | list[str]) -> set[str]:
    """Element type names inside type strings (``seq(tensor(float))`` -> ``float``)."""
    elems: set[str] = set()
    for t in type_strs:
        elems.update(re.findall(r"tensor\((\w+)\)", t))
        elems.update(re.findall(r"map\((\w+),", t))
    return elems


def _type_list(elems: set[str]) -> list[str]:
    """Element type names in README order, with int widths and narrow floats grouped."""
    parts = [t for t in _FLOAT_TYPES if t in elems]
    for prefix, kinds in _NARROW_FLOATS:
        have = [k for k in kinds if prefix + k in elems]
        if len(have) == 1:
            parts.append(prefix + have[0])
        elif have:
            parts.append(f"{prefix} ({', '.join(have)})")
    for prefix in ("int", "uint"):
        widths = [w for w in _INT_WIDTHS if prefix + w in elems]
        first = _INT_WIDTHS.index(widths[0]) if widths else 0
        if len(widths) >= 3 and list(_INT_WIDTHS[first : first + len(widths)]) == widths:
            parts.append(f"{prefix}{widths[0]}-{widths[-1]}")
        else:
            parts.extend(prefix + w for w in widths)
    parts.extend(t for t in _OTHER_TYPES if t in elems)
    return parts


_ALL_TYPES: set[str] = set()


def _summarise_types(type_strs: set[str]) -> str:
    """``{"tensor(float)", "seq(tensor(int64))", ...}`` -> ``"float, int64; sequences"``.

    A set missing at most two groups of the element types onnx defines reads "all" or
    "all but ...".
    """
    if not _ALL_TYPES:
        _ALL_TYPES.update(
            _type_names(
                [
                    t
                    for versions in _all_schema_history().values()
                    for schema in versions.values()
                    for tc in schema.type_constraints
                    for t in tc.allowed_type_strs
                ]
            )
        )
    elems = _type_names(type_strs)
    missing = _type_list(_ALL_TYPES - elems)
    if not missing:
        text = "all"
    elif len(missing) <= 2 and len(elems) > len(_ALL_TYPES) // 2:
        text = "all but " + ", ".join(missing)
    else:
        text = ", ".join(_type_list(elems))
    containers = [label for start, label in _CONTAINERS if any(start in t for t in type_strs)]
    if containers:
        text = f"{text}; {', '.join(containers)}" if text else ", ".join(containers)
    return text


def _type_difference(old: set[str], new: set[str]) -> str:
    """How an older registration's types differ from the newest one's, briefly."""
    lost, gained = _type_names(new) - _type_names(old), _type_names(old) - _type_names(new)
    if gained or not lost:
        return _summarise_types(old)
    return "no " + ", ".join(_type_list(lost))


def _served_type_strs(impl: OpImpl) -> set[str]:
    schema = served_schema(impl)
    if schema is None:
        return set()
    types = {t for tc in schema.type_constraints for t in tc.allowed_type_strs}
    # Schemas without type constraints spell their types on the inputs and outputs
    # (StringNormalizer's tensor(string), NonMaxSuppression's float and int64).
    return types or {t for p in (*schema.inputs, *schema.outputs) for t in p.types}


def element_types(impl: OpImpl) -> str:
    """The element types ``impl`` accepts, summarised for the README.

    The union of the type constraints of the newest schema version the registration serves
    (its inputs' and outputs' fixed types where it has no constraint). No implementation
    declares types it refuses today, so none are subtracted.
    """
    return _summarise_types(_served_type_strs(impl))


def supported_ops_markdown() -> str:
    """The supported-operator table of the README, generated from the registrations.

    One row per (domain, operator): the registered since-versions and the element types of the
    newest registration (the union of its schema's type constraints, see
    :func:`element_types`).
    Where older registrations serve other types, the difference follows in parentheses, e.g.
    ``(1, 7: no bfloat16)``.
    The README embeds this text between ``<!-- ops-table -->`` markers; a test fails when the
    two differ.
    """
    rows = [
        "| domain | operator | implemented versions | element types |",
        "|---|---|---|---|",
    ]
    for (domain, op), versions in sorted(_REGISTRY.items()):
        if domain.startswith("test."):
            continue
        since = ", ".join(str(v.since) for v in versions)
        newest = _served_type_strs(versions[-1])
        notes: dict[str, list[int]] = {}
        for impl in versions[:-1]:
            old = _served_type_strs(impl)
            if old and old != newest:
                notes.setdefault(_type_difference(old, newest), []).append(impl.since)
        types = _summarise_types(newest)
        if notes:
            older = "; ".join(
                f"{', '.join(map(str, v))}: {text}"
                for text, v in sorted(notes.items(), key=lambda kv: kv[1])
            )
            types += f" ({older})"
        rows.append(f"| {domain or 'ai.onnx'} | {op} | {since} | {types} |")
    return "\n".join(rows) + "\n"
