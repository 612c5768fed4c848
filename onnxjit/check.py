"""The IR rules of the ONNX spec (IR.md), every problem collected, then one ModelCheckError.

Checked: ir_version present and supported; opset_import present, one entry per domain, known
versions; every operator exists in its domain at the imported opset; the main graph has a name
and typed, ranked inputs and outputs; single static assignment; every node input defined before
use (graph input, initializer, earlier node output, or enclosing scope inside a subgraph);
topological order without cycles; attributes (one value of the schema's type, required ones
present, unknown ones rejected); optional inputs/outputs given as empty names only where the
schema allows; arity within the schema's bounds (variadic minimum included).

Each node is resolved here to its schema's ``since_version`` (stored on the node) so that
messages name operators as ``Softmax-13``.
"""

from __future__ import annotations

import warnings

import onnx
import onnx.defs
from onnx import AttributeProto, TensorProto

from onnxjit import ir
from onnxjit.errors import ModelCheckError
from onnxjit.registry import (
    INTERNAL_DOMAIN,
    MEMBERS_ATTRIBUTE,
    find_schema,
    internal_ops,
    normalize_domain,
)

MIN_IR_VERSION = 3
MAX_IR_VERSION = onnx.IR_VERSION  # what the installed onnx writes (14 for onnx 1.23)

_FORMAL = onnx.defs.OpSchema.FormalParameterOption


def check_model(model: ir.Model) -> None:
    """Raise :class:`ModelCheckError` listing every rule of the IR spec ``model`` breaks."""
    problems: list[str] = list(model.load_problems)
    _check_versions(model, problems)
    graph = model.graph
    if not graph.name:
        problems.append("the main graph has no name; set GraphProto.name (any non-empty string)")
    _check_main_io(graph, problems)
    if model.ir_version is not None and model.ir_version < 4:
        inputs = {v.name for v in graph.inputs}
        for name in graph.initializer_order:
            if name not in inputs:
                problems.append(
                    f"initializer {name!r} is not a graph input, which IR version "
                    f"{model.ir_version} (< 4) requires; add it to the graph inputs or raise "
                    "ir_version to 4 or more"
                )
    functions = {
        (normalize_domain(f.domain), f.name, f.overload): f for f in model.functions.values()
    }
    _GraphChecker(model.opset_imports, functions, problems).check(graph, frozenset(), "graph")
    for fn in model.functions.values():
        _check_function(fn, model, functions, problems)
    if problems:
        raise ModelCheckError(problems)


def _check_versions(model: ir.Model, problems: list[str]) -> None:
    if model.ir_version is None or model.ir_version == 0:
        problems.append(
            "ir_version is missing; set ModelProto.ir_version "
            f"(onnxjit reads {MIN_IR_VERSION} to {MAX_IR_VERSION})"
        )
    elif not MIN_IR_VERSION <= model.ir_version <= MAX_IR_VERSION:
        problems.append(
            f"ir_version {model.ir_version} is outside the supported range "
            f"{MIN_IR_VERSION}..{MAX_IR_VERSION}; re-export the model with a current onnx"
        )
    if not model.opset_imports:
        problems.append(
            "opset_import is empty; a model must import at least the default domain, "
            "e.g. helper.make_opsetid('', 17)"
        )
    for domain, version in model.opset_imports.items():
        if domain in ("", "ai.onnx.ml", "ai.onnx.preview.training"):
            latest = onnx.defs.onnx_opset_version() if domain == "" else _max_domain(domain)
            if not 1 <= version <= latest:
                problems.append(
                    f"opset_import {domain or 'ai.onnx'!r} version {version} is outside "
                    f"1..{latest} (the newest that onnx {onnx.__version__} defines); "
                    "use a released opset"
                )


def _max_domain(domain: str) -> int:
    return (
        onnx.defs.onnx_opset_version()
        if not domain
        else max(
            (
                s.since_version
                for s in onnx.defs.get_all_schemas_with_history()
                if s.domain == domain
            ),
            default=1,
        )
    )


def _check_main_io(graph: ir.Graph, problems: list[str]) -> None:
    for kind, values in (("input", graph.inputs), ("output", graph.outputs)):
        for v in values:
            if not v.name:
                problems.append(f"a main-graph {kind} has an empty name; give every {kind} a name")
                continue
            if v.type is None or v.type.WhichOneof("value") is None:
                problems.append(
                    f"main-graph {kind} {v.name!r} has no type; declare its type, e.g. "
                    f"helper.make_tensor_value_info({v.name!r}, TensorProto.FLOAT, shape)"
                )
                continue
            if v.is_tensor:
                if v.elem_type == 0:
                    problems.append(
                        f"main-graph {kind} {v.name!r} has element type UNDEFINED; set "
                        "tensor_type.elem_type"
                    )
                elif v.elem_type not in TensorProto.DataType.values():
                    problems.append(
                        f"main-graph {kind} {v.name!r} has element type {v.elem_type}, which "
                        f"onnx {onnx.__version__} does not define; set tensor_type.elem_type to "
                        "a TensorProto.DataType value"
                    )
                if v.shape is None:
                    problems.append(
                        f"main-graph {kind} {v.name!r} has no shape (unknown rank); declare "
                        "its rank with dims (use dim_param names for sizes that vary)"
                    )


def _check_function(fn: ir.Function, model: ir.Model, functions, problems: list[str]) -> None:
    opsets = dict(model.opset_imports)
    opsets.update(fn.opset_imports)
    fgraph = ir.Graph(
        name=fn.name,
        nodes=fn.nodes,
        inputs=[ir.ValueInfo(n, None) for n in fn.inputs if n],
        outputs=[ir.ValueInfo(n, None) for n in fn.outputs if n],
    )
    where = f"function {fn.domain}:{fn.name}"
    # IR.md: a function may import a different version of a domain than the model, but every
    # node of its body must resolve to the same schema under both imports.
    for node in fn.nodes:
        domain = normalize_domain(node.domain)
        mine, theirs = fn.opset_imports.get(domain), model.opset_imports.get(domain)
        if mine is None or theirs is None or mine == theirs:
            continue
        if (domain, node.op_type, node.overload) in functions:
            continue
        a, b = find_schema(node.op_type, mine, domain), find_schema(node.op_type, theirs, domain)
        if a is not None and b is not None and a.since_version != b.since_version:
            problems.append(
                f"in {where}: {node.where} resolves to {node.op_type}-{a.since_version} under "
                f"the function's opset_import ({domain or 'ai.onnx'!r} {mine}) but to "
                f"{node.op_type}-{b.since_version} under the model's ({theirs}); both must "
                "name the same schema, import the same version in the function and the model"
            )
    checker = _GraphChecker(opsets, functions, problems, in_function=where)
    # Resolution of function bodies happens at inlining, against the caller's opsets.
    checker.check(fgraph, frozenset(), where, resolve=False)


class _GraphChecker:
    def __init__(
        self,
        opsets: dict[str, int],
        functions: dict[tuple[str, str, str], ir.Function],
        problems: list[str],
        in_function: str = "",
    ):
        self.opsets = opsets
        self.functions = functions
        self.problems = problems
        self.in_function = in_function

    def add(self, message: str) -> None:
        self.problems.append(message)

    def check(
        self, graph: ir.Graph, outer: frozenset[str], where: str, resolve: bool = True
    ) -> None:
        defined: set[str] = set()
        prefix = "" if where == "graph" else f"in {where}: "
        for v in graph.inputs:
            if v.name in defined:
                self.add(
                    f"{prefix}graph input {v.name!r} is declared twice; names must be unique (SSA)"
                )
            defined.add(v.name)
        seen_inits: set[str] = set()
        for name in graph.initializer_order:
            # A name may be both a graph input and an initializer (a default the caller can
            # override), but an initializer may be declared only once.
            if name in seen_inits:
                self.add(f"{prefix}initializer {name!r} is declared twice; keep one")
            seen_inits.add(name)
            defined.add(name)
        producers: dict[str, int] = {}
        for node in graph.nodes:
            for out in node.outputs:
                if out:
                    producers.setdefault(out, node.index)
        order_problem = False
        for node in graph.nodes:
            self.check_node(node, prefix, resolve)
            for i, name in enumerate(node.inputs):
                if not name:
                    continue
                if name in defined or name in outer:
                    continue
                later = producers.get(name)
                if later is not None and later >= node.index:
                    order_problem = True
                    if later == node.index:
                        found = "which is its own output; a node cannot read what it produces"
                    else:
                        found = f"before node #{later} produces it"
                    self.add(
                        f"{prefix}{node.describe()} reads {name!r} (input {i}) {found}; nodes "
                        "must be in topological order (sort them so that every value is "
                        "produced before it is read)"
                    )
                else:
                    self.add(
                        f"{prefix}{node.describe()} reads {name!r} (input {i}), which is not a "
                        "graph input, initializer, earlier node output"
                        + (" or outer-scope value" if where != "graph" else "")
                        + "; add it to the graph inputs or fix the name"
                    )
            for sub in ir.subgraphs(node):
                self.check(sub, outer | frozenset(defined), f"a subgraph of {node.describe()}")
            for out in node.outputs:
                if not out:
                    continue
                if out in defined or out in outer:
                    self.add(
                        f"{prefix}{node.describe()} assigns {out!r}, which is already defined"
                        + (" in an enclosing scope" if out in outer and out not in defined else "")
                        + "; every name must be assigned once (SSA), rename the output"
                    )
                defined.add(out)
        if order_problem and _has_cycle(graph.nodes):
            self.add(
                f"{prefix}the nodes form a cycle; an ONNX graph must be acyclic (use Loop or "
                "Scan for iteration)"
            )
        for v in graph.outputs:
            if v.name and v.name not in defined and v.name not in outer:
                self.add(
                    f"{prefix}graph output {v.name!r} is not produced by any node, input or "
                    "initializer; fix the output name"
                )

    def check_node(self, node: ir.Node, prefix: str, resolve: bool):
        domain = normalize_domain(node.domain)
        for p in node.load_problems:
            self.add(f"{prefix}{node.describe()}: {p}")
        fn = self.functions.get((domain, node.op_type, node.overload))
        if fn is not None:
            self.check_call(node, fn, prefix)
            return None  # the body is checked once, with the function
        if domain not in self.opsets:
            if self.opsets:  # an empty opset_import is reported once, not once per node
                self.add(
                    f"{prefix}{node.describe()} uses domain {domain or 'ai.onnx'!r}, which the "
                    "model does not import; add it to opset_import"
                )
            return None
        version = self.opsets[domain]
        if domain == INTERNAL_DOMAIN:
            self.check_internal(node, version, prefix, resolve)
            return None
        schema = find_schema(node.op_type, version, domain)
        if schema is None:
            self.add(
                f"{prefix}{node.describe()}: operator {node.op_type!r} does not exist in domain "
                f"{domain or 'ai.onnx'!r} at opset {version}; fix op_type or the opset_import"
            )
            return None
        if resolve:
            node.since_version = schema.since_version
        label = f"{node.op_type}-{schema.since_version}"
        who = f"{prefix}{node.where} ({label})"
        if schema.deprecated:
            # onnx's checker refuses deprecated operators. onnxjit warns instead of refusing:
            # models exported at those opsets exist, and where an implementation serves the
            # operator (GroupNormalization-18, Scatter-9) it runs; the registry reports the
            # node when none does.
            instead = _REPLACEMENTS.get(node.op_type, "its replacement")
            warnings.warn(
                f"{who}: operator {node.op_type!r} is deprecated since opset "
                f"{schema.since_version} (the model imports {domain or 'ai.onnx'!r} {version}); "
                f"onnx.checker refuses such models; use {instead} or import an opset below "
                f"{schema.since_version}",
                DeprecatedOperatorWarning,
                stacklevel=2,
            )
        self.check_arity(node, schema, who)
        self.check_attributes(node, schema, who)
        return schema

    def check_internal(self, node: ir.Node, version: int, prefix: str, resolve: bool) -> None:
        """A node of onnxjit's own domain (a fused node of a model that onnxjit optimised and
        wrote, SessionOptions.optimized_model_filepath): it must name one of onnxjit's
        operators, at version 1, with attributes that operator takes."""
        impl = internal_ops().get(node.op_type)
        who = f"{prefix}{node.describe()}"
        if impl is None or version != 1:
            known = ", ".join(sorted(internal_ops()))
            self.add(
                f"{who}: onnxjit has no operator {node.op_type!r} in its domain "
                f"{INTERNAL_DOMAIN!r} at version {version} (version 1 has {known}); the node "
                "must come from a model onnxjit wrote: load the original model instead"
            )
            return
        unknown = sorted(set(node.attr_types) - set(impl.attrs) - {MEMBERS_ATTRIBUTE})
        if unknown:
            self.add(
                f"{who}: attributes {unknown} are not attributes of onnxjit's {node.op_type} "
                f"(it takes {sorted(impl.attrs)}); remove them"
            )
        if resolve:
            node.since_version = 1

    def check_call(self, node: ir.Node, fn: ir.Function, prefix: str) -> None:
        """A call of a model-local function: arity and attribute names against its proto."""
        who = f"{prefix}{node.where} (function {fn.domain}:{fn.name})"
        for kind, have, formal in (
            ("inputs", node.inputs, fn.inputs),
            ("outputs", node.outputs, fn.outputs),
        ):
            if len(have) > len(formal):
                self.add(
                    f"{who} has {len(have)} {kind}; the function takes {len(formal)} "
                    f"({formal}); remove the extra {kind}"
                )
        known = sorted(set(fn.attributes))
        for name in node.attr_types:
            if name not in known:
                self.add(
                    f"{who}: attribute {name!r} is not declared by the function (known: "
                    f"{known}); remove it or declare it in FunctionProto.attribute"
                )

    def check_arity(self, node: ir.Node, schema, who: str) -> None:
        n_in, n_out = len(node.inputs), len(node.outputs)
        if n_in < schema.min_input or n_in > schema.max_input:
            self.add(
                f"{who} has {n_in} inputs; the schema allows {schema.min_input} to "
                f"{_bound(schema.max_input)}; fix the node's inputs"
            )
        if n_out < schema.min_output or n_out > schema.max_output:
            self.add(
                f"{who} has {n_out} outputs; the schema allows {schema.min_output} to "
                f"{_bound(schema.max_output)}; fix the node's outputs"
            )
        for kind, names, formals in (
            ("input", node.inputs, schema.inputs),
            ("output", node.outputs, schema.outputs),
        ):
            for i, name in enumerate(names):
                if name:
                    continue
                formal = formals[min(i, len(formals) - 1)] if formals else None
                if formal is not None and formal.option == _FORMAL.Single:
                    self.add(
                        f"{who}: {kind} {i} ({formal.name!r}) is required but given as an "
                        f"empty name; only optional {kind}s may be omitted"
                    )

    def check_attributes(self, node: ir.Node, schema, who: str) -> None:
        declared = schema.attributes
        for name, atype in node.attr_types.items():
            if name not in declared:
                known = sorted(declared)
                self.add(
                    f"{who}: attribute {name!r} is not defined by the schema (known: {known}); "
                    "remove it or fix its name"
                )
                continue
            want = int(declared[name].type)
            if atype != want:
                self.add(
                    f"{who}: attribute {name!r} has type "
                    f"{AttributeProto.AttributeType.Name(atype)} but the schema expects "
                    f"{AttributeProto.AttributeType.Name(want)}; store it in the right field"
                )
        for name, attr in declared.items():
            if attr.required and name not in node.attr_types:
                self.add(
                    f"{who}: required attribute {name!r} "
                    f"({AttributeProto.AttributeType.Name(int(attr.type))}) is missing; set it"
                )


class DeprecatedOperatorWarning(UserWarning):
    """A node uses an operator that onnx deprecated at the model's opset."""


# What replaces each deprecated operator of the default domain.
_REPLACEMENTS = {
    "Scatter": "ScatterElements",
    "Upsample": "Resize",
    "GroupNormalization": "GroupNormalization at opset 21 (per-channel scale and bias)",
}


def _bound(n: int) -> str:
    return "unbounded" if n >= 2**31 - 1 else str(n)


def _has_cycle(nodes: list[ir.Node]) -> bool:
    producer = {}
    for n in nodes:
        for o in n.outputs:
            if o:
                producer[o] = n.index
    state: dict[int, int] = {}
    by_index = {n.index: n for n in nodes}
    for start in by_index:
        if state.get(start):
            continue
        stack = [(start, iter(by_index[start].inputs))]
        state[start] = 1
        while stack:
            idx, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[idx] = 2
                stack.pop()
                continue
            p = producer.get(nxt)
            if p is None:
                continue
            if state.get(p) == 1:
                return True
            if not state.get(p):
                state[p] = 1
                stack.append((p, iter(by_index[p].inputs)))
    return False
