"""The IR checker (onnxjit/check.py): one test per rule of ONNX's IR.md.

Each test builds a small model that breaks (or deliberately keeps) one rule, runs onnxjit's
checker and asserts the error type and that the message names the thing, what was expected
and what was found. Where ``onnx.checker.check_model(model, full_check=True)`` covers the same
rule it is used as an independent oracle for the accept/reject decision.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import onnx
import onnx.checker
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

import onnxjit
from onnxjit import check
from onnxjit.errors import ModelCheckError
from onnxjit.model import load_model

F = TensorProto.FLOAT


def vi(name: str, shape=(2, 3), elem: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def make(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto] | None = None,
    outputs: list[onnx.ValueInfoProto] | None = None,
    inits: list[onnx.TensorProto] = (),
    opset: int = 17,
    ir_version: int = 8,
    name: str = "g",
    extra_opsets: list[onnx.OperatorSetIdProto] = (),
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        name,
        [vi("x")] if inputs is None else inputs,
        [vi("y")] if outputs is None else outputs,
        initializer=list(inits),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])
    model.ir_version = ir_version
    return model


def problems(model: onnx.ModelProto) -> list[str]:
    """onnxjit's checker verdict: the list of problems ([] when the model passes)."""
    try:
        check.check_model(load_model(model))
    except ModelCheckError as exc:
        assert isinstance(exc, ValueError)
        assert str(exc).count("\n  - ") == len(exc.problems)
        return exc.problems
    return []


def onnx_accepts(model: onnx.ModelProto) -> bool:
    """The independent oracle: onnx's own checker with full_check (shape inference too)."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
        return False
    return True


def assert_one_problem(model: onnx.ModelProto, *needles: str, oracle: bool = True) -> str:
    """Exactly one problem, containing every needle; onnx's checker agrees when ``oracle``."""
    found = problems(model)
    assert len(found) == 1, found
    for needle in needles:
        assert needle in found[0], (needle, found[0])
    if oracle:
        assert not onnx_accepts(model), "onnx.checker accepts a model onnxjit rejects"
    return found[0]


def assert_valid(model: onnx.ModelProto, oracle: bool = True) -> None:
    assert problems(model) == []
    if oracle:
        assert onnx_accepts(model), "onnx.checker rejects a model onnxjit accepts"


def identity(x: str = "x", y: str = "y", name: str = "") -> onnx.NodeProto:
    return helper.make_node("Identity", [x], [y], name=name)


# -- versions and opset imports ---------------------------------------------------------------


def test_valid_model_passes_both_checkers():
    assert_valid(make([identity()]))


def test_ir_version_missing():
    model = make([identity()])
    model.ClearField("ir_version")
    assert_one_problem(model, "ir_version is missing", "set ModelProto.ir_version", "3 to 14")


@pytest.mark.parametrize("version", [1, 2, 15, 99])
def test_ir_version_out_of_range(version):
    model = make([identity()], ir_version=version)
    msg = assert_one_problem(model, f"ir_version {version}", "3..14", oracle=version > 14)
    assert "re-export" in msg


@pytest.mark.parametrize("version", [3, 4, 10, 14])
def test_ir_version_in_range_accepted(version):
    assert_valid(make([identity()], ir_version=version), oracle=False)


def test_ir_version_3_requires_initializers_to_be_inputs():
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    model = make([identity("w", "y")], inputs=[], inits=[w], ir_version=3, opset=8)
    assert_one_problem(model, "initializer 'w' is not a graph input", "IR version 3 (< 4)")
    assert_valid(make([identity("w", "y")], inputs=[vi("w")], inits=[w], ir_version=3, opset=8))
    assert_valid(make([identity("w", "y")], inputs=[], inits=[w], ir_version=4, opset=9))


def test_opset_import_missing():
    model = make([identity()])
    del model.opset_import[:]
    msg = assert_one_problem(model, "opset_import is empty", "make_opsetid")
    assert "Identity" not in msg  # one clear problem, not one per node


def test_opset_import_domain_listed_twice():
    model = make([identity()], extra_opsets=[helper.make_opsetid("ai.onnx", 13)])
    # onnx's checker accepts this (the last entry wins there), IR.md says one entry per domain.
    assert_one_problem(
        model, "'ai.onnx'", "more than once", "17 and 13", "one entry per domain", oracle=False
    )


def test_opset_import_exact_repeat_is_accepted_with_a_warning():
    # skl2onnx writes the default domain twice with one version; that is unambiguous.
    model = make([identity()], extra_opsets=[helper.make_opsetid("", 17)])
    with pytest.warns(UserWarning, match="twice with the same version 17"):
        sess = onnxjit.InferenceSession(model.SerializeToString())
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x)


def test_opset_import_version_unknown():
    model = make([identity()], opset=onnx.defs.onnx_opset_version() + 5)
    # onnx's checker resolves unknown future versions to the newest schema; no oracle.
    assert_one_problem(model, "version", "outside", "use a released opset", oracle=False)


# -- operators exist --------------------------------------------------------------------------


def test_operator_unknown():
    model = make([helper.make_node("Frobnicate", ["x"], ["y"], name="frob")])
    assert_one_problem(
        model, "node 'frob'", "'Frobnicate' does not exist in domain 'ai.onnx' at opset 17", "fix"
    )


def test_operator_newer_than_the_opset():
    # Gelu appeared in opset 20; a model importing opset 17 cannot use it.
    model = make([helper.make_node("Gelu", ["x"], ["y"])])
    assert_one_problem(model, "node #0", "'Gelu' does not exist", "at opset 17")
    assert_valid(make([helper.make_node("Gelu", ["x"], ["y"])], opset=20))


@pytest.mark.parametrize(("op", "opset", "n_in"), [("Scatter", 11, 3), ("Upsample", 10, 2)])
def test_operator_deprecated_at_the_opset(op, opset, n_in):
    # Scatter was withdrawn at opset 11 (ScatterElements), Upsample at 10 (Resize).
    ins = [vi("x"), vi("i", elem=TensorProto.INT64), vi("u")][:n_in]
    if op == "Upsample":
        ins[1] = vi("i", (2,))
    node = helper.make_node(op, [v.name for v in ins], ["y"], name="old")
    model = make([node], inputs=ins, opset=opset)
    # onnx's checker refuses the model; onnxjit warns (a deliberate divergence: models at
    # those opsets exist and implementations such as Scatter-9 can still run them).
    assert not onnx_accepts(model)
    with pytest.warns(check.DeprecatedOperatorWarning) as record:
        assert problems(model) == []
    msg = str(record[0].message)
    assert f"node 'old' ({op}-{opset})" in msg and "is deprecated since opset" in msg
    assert "use " in msg and "onnx.checker refuses" in msg
    # One opset earlier the operator is valid and nothing is said.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert problems(make([node], inputs=ins, opset=opset - 1)) == []
    assert onnx_accepts(make([node], inputs=ins, opset=opset - 1))


def test_domain_not_imported():
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml")
    assert_one_problem(make([node]), "domain 'ai.onnx.ml'", "not import", "add it to opset_import")


# -- the main graph ---------------------------------------------------------------------------


def test_main_graph_without_name():
    assert_one_problem(make([identity()], name=""), "main graph has no name", "GraphProto.name")


def test_main_graph_input_without_type():
    x = onnx.ValueInfoProto(name="x")
    assert_one_problem(
        make([identity()], inputs=[x]), "main-graph input 'x' has no type", "make_tensor_value_info"
    )


def test_main_graph_output_with_undefined_element_type():
    y = vi("y", elem=TensorProto.UNDEFINED)
    # onnx's checker accepts an UNDEFINED element type on outputs; IR.md requires a type.
    assert_one_problem(
        make([identity()], outputs=[y]),
        "main-graph output 'y'",
        "UNDEFINED",
        "elem_type",
        oracle=False,
    )


def test_main_graph_input_without_rank():
    # IR.md: the rank of main-graph inputs and outputs is static. onnx's checker does not
    # enforce this, so there is no oracle.
    x = helper.make_tensor_value_info("x", F, None)
    assert_one_problem(
        make([identity()], inputs=[x]),
        "input 'x' has no shape (unknown rank)",
        "dim_param",
        oracle=False,
    )


def test_main_graph_dims_may_be_unknown_or_named():
    x = vi("x", ("N", None))
    y = vi("y", ("N", None))
    assert_valid(make([identity()], inputs=[x], outputs=[y]))


# -- single static assignment -----------------------------------------------------------------


def test_ssa_output_assigned_twice():
    model = make([identity("x", "y"), identity("x", "y", name="second")])
    assert_one_problem(model, "node 'second' (Identity-16)", "assigns 'y'", "already defined")


def test_ssa_node_output_shadows_graph_input():
    model = make([identity("x", "x"), identity("x", "y")])
    assert_one_problem(model, "node #0 (Identity-16) assigns 'x'", "rename the output")


def test_ssa_initializer_declared_twice():
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    model = make([identity("w", "y")], inputs=[], inits=[w, w])
    assert_one_problem(model, "initializer 'w' is declared twice", "keep one")


def test_ssa_initializer_declared_twice_even_when_also_an_input():
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    model = make([identity("w", "y")], inputs=[vi("w")], inits=[w, w])
    assert_one_problem(model, "initializer 'w' is declared twice", oracle=False)


def test_ssa_graph_input_declared_twice():
    model = make([identity()], inputs=[vi("x"), vi("x")])
    assert_one_problem(model, "graph input 'x' is declared twice", "unique")


def test_ssa_name_both_input_and_initializer_is_allowed():
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "x")
    model = make([identity()], inits=[w])
    assert_valid(model)
    sess = onnxjit.InferenceSession(model)
    assert [a.name for a in sess.get_inputs()] == []
    assert [a.name for a in sess.get_overridable_initializers()] == ["x"]
    np.testing.assert_array_equal(sess.run(None, {})[0], np.ones((2, 3), np.float32))
    fed = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(sess.run(None, {"x": fed})[0], fed)
    np.testing.assert_array_equal(sess.run(None, {})[0], np.ones((2, 3), np.float32))


# -- defined before use, topological order, cycles --------------------------------------------


def test_input_undefined():
    model = make([helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")])
    assert_one_problem(
        model, "node 'add' (Add-14) reads 'nowhere' (input 1)", "not a graph input", "fix the name"
    )


def test_graph_output_not_produced():
    model = make([identity()], outputs=[vi("y"), vi("ghost")])
    assert_one_problem(model, "graph output 'ghost' is not produced", "fix the output name")


def test_nodes_out_of_order():
    model = make([identity("t", "y", name="second"), identity("x", "t", name="first")])
    msg = assert_one_problem(model, "node 'second' (Identity-16) reads 't'", "before node #1")
    assert "topological order" in msg


def test_cycle_detected():
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="n0"),
        helper.make_node("Identity", ["a"], ["b"], name="n1"),
        helper.make_node("Identity", ["a"], ["y"], name="n2"),
    ]
    found = problems(make(nodes))
    assert any("cycle" in p and "acyclic" in p for p in found), found
    assert any("'n0' (Add-14) reads 'b'" in p for p in found), found
    assert not onnx_accepts(make(nodes))


def test_self_loop_is_a_cycle():
    model = make([helper.make_node("Add", ["x", "y"], ["y"], name="loop")])
    found = problems(model)
    assert any("cycle" in p for p in found), found
    assert any("which is its own output" in p for p in found), found
    assert not onnx_accepts(model)


def _if_model(then_reads: str) -> onnx.ModelProto:
    cond = vi("c", (), TensorProto.BOOL)
    then_g = helper.make_graph(
        [helper.make_node("Identity", [then_reads], ["t_out"])], "then", [], [vi("t_out")]
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e_out"])], "else", [], [vi("e_out")]
    )
    node = helper.make_node(
        "If", ["c"], ["y"], name="branch", then_branch=then_g, else_branch=else_g
    )
    return make([helper.make_node("Neg", ["x"], ["nx"]), node], inputs=[cond, vi("x")])


def test_if_subgraph_reads_outer_scope():
    assert_valid(_if_model("nx"))


def test_if_subgraph_reads_undefined_name():
    model = _if_model("nothing")
    msg = assert_one_problem(model, "in a subgraph of node 'branch' (If-16)", "'nothing'")
    assert "outer-scope value" in msg


def _loop_model(body_reads: str) -> onnx.ModelProto:
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["acc_in", body_reads], ["acc_out"]),
        ],
        "body",
        [vi("i", (), TensorProto.INT64), vi("cond_in", (), TensorProto.BOOL), vi("acc_in")],
        [vi("cond_out", (), TensorProto.BOOL), vi("acc_out")],
    )
    trip = numpy_helper.from_array(np.array(3, np.int64), "trip")
    node = helper.make_node("Loop", ["trip", "", "x"], ["y"], name="loop", body=body)
    return make([helper.make_node("Neg", ["x"], ["step"]), node], inits=[trip])


def test_loop_body_reads_outer_scope():
    assert_valid(_loop_model("step"))


def test_loop_body_reads_undefined_name():
    assert_one_problem(_loop_model("missing"), "subgraph of node 'loop' (Loop-16)", "'missing'")


def test_subgraph_may_not_reassign_an_outer_name():
    model = _loop_model("step")
    body = model.graph.node[1].attribute[0].g
    body.node[1].output[0] = "step"  # Add in the body now assigns the outer 'step'
    body.output[1].name = "step"
    found = problems(model)
    assert any("'step'" in p and "enclosing scope" in p for p in found), found
    assert not onnx_accepts(model)


# -- attributes -------------------------------------------------------------------------------


def _softmax(*attrs: AttributeProto, opset: int = 13) -> onnx.ModelProto:
    node = helper.make_node("Softmax", ["x"], ["y"], name="sm")
    node.attribute.extend(attrs)
    return make([node], opset=opset)


def test_attribute_type_mismatch():
    model = _softmax(helper.make_attribute("axis", 1.0))
    assert_one_problem(
        model, "node 'sm' (Softmax-13)", "attribute 'axis' has type FLOAT", "expects INT"
    )


def test_attribute_with_two_values():
    attr = AttributeProto(name="axis", type=AttributeProto.INT, i=1, f=2.0)
    assert_one_problem(_softmax(attr), "'axis' is declared INT", "fields", "exactly one value")


def test_attribute_without_value():
    attr = AttributeProto(name="axis", type=AttributeProto.INT)
    # onnx's checker only counts set fields for non-default values and accepts this node;
    # IR.md says an attribute carries exactly one value.
    assert_one_problem(
        _softmax(attr), "'axis' is declared INT but carries no value", "'i'", oracle=False
    )


def test_attribute_without_type():
    attr = AttributeProto(name="axis", i=1)
    assert_one_problem(_softmax(attr), "'axis' has no type", "UNDEFINED", "set its type")


def test_attribute_given_twice():
    a = helper.make_attribute("axis", 1)
    found = problems(_softmax(a, a))
    assert len(found) == 1 and "'axis' is given twice" in found[0], found
    assert not onnx_accepts(_softmax(a, a))


def test_attribute_unknown():
    model = _softmax(helper.make_attribute("axes", [1]))
    assert_one_problem(model, "attribute 'axes' is not defined", "known: ['axis']", "remove it")


def test_attribute_required_missing():
    model = make([helper.make_node("Cast", ["x"], ["y"], name="cast")])
    assert_one_problem(model, "node 'cast' (Cast-13)", "required attribute 'to' (INT)", "set it")


def test_attribute_list_may_be_empty():
    node = helper.make_node("Transpose", ["x"], ["y"])
    node.attribute.append(AttributeProto(name="perm", type=AttributeProto.INTS))
    assert problems(make([node])) == []


# -- optional and variadic inputs/outputs -----------------------------------------------------


def test_optional_input_omitted_with_empty_name():
    hi = numpy_helper.from_array(np.array(1.0, np.float32), "hi")
    node = helper.make_node("Clip", ["x", "", "hi"], ["y"])
    assert_valid(make([node], inits=[hi]))


def test_required_input_given_as_empty_name():
    node = helper.make_node("Add", ["x", ""], ["y"], name="add")
    assert_one_problem(make([node]), "node 'add' (Add-14): input 1 ('B') is required", "empty name")


def test_optional_output_omitted_with_empty_name():
    node = helper.make_node("Dropout", ["x"], ["y", ""])
    assert_valid(make([node]))


def test_required_output_given_as_empty_name():
    node = helper.make_node("Identity", ["x"], [""], name="idn")
    model = make([node, identity()])
    found = problems(model)
    assert any("'idn' (Identity-16): output 0 ('output') is required" in p for p in found), found


def test_variadic_minimum_concat_without_inputs():
    node = helper.make_node("Concat", [], ["y"], axis=0, name="cat")
    assert_one_problem(make([node]), "node 'cat' (Concat-13) has 0 inputs", "1 to unbounded", "fix")


def test_variadic_minimum_max_without_inputs():
    node = helper.make_node("Max", [], ["y"])
    assert_one_problem(make([node]), "node #0 (Max-13) has 0 inputs", "1 to unbounded")


def test_too_many_inputs():
    node = helper.make_node("Relu", ["x", "x"], ["y"])
    assert_one_problem(make([node]), "(Relu-14) has 2 inputs", "allows 1 to 1")


# -- collection and message format ------------------------------------------------------------


def test_all_problems_reported_in_one_error():
    nodes = [
        helper.make_node("Frobnicate", ["x"], ["a"], name="bad_op"),
        helper.make_node("Softmax", ["x"], ["b"], axis=1.5, name="bad_attr"),
        helper.make_node("Add", ["b", "undefined"], ["y"], name="bad_input"),
        helper.make_node("Cast", ["x"], ["z"]),
    ]
    model = make(nodes, name="")
    model.ClearField("ir_version")
    with pytest.raises(ModelCheckError) as info:
        onnxjit.InferenceSession(model)
    err = info.value
    assert len(err.problems) == 6, err.problems
    text = str(err)
    assert text.startswith("the model is not valid ONNX (6 problems):")
    for needle in (
        "ir_version is missing",
        "main graph has no name",
        "'bad_op'",
        "node 'bad_attr' (Softmax-13): attribute 'axis' has type FLOAT",
        "node 'bad_input' (Add-14) reads 'undefined'",
        "node #3 (Cast-13): required attribute 'to'",
    ):
        assert needle in text, needle


def test_node_label_uses_the_resolved_since_version():
    # Softmax at opset 12 obeys the Softmax-11 schema; at 13 the Softmax-13 one.
    bad = helper.make_attribute("bogus", 1)
    assert "(Softmax-11)" in problems(_softmax(bad, opset=12))[0]
    assert "(Softmax-1)" in problems(_softmax(bad, opset=10))[0]
    assert "(Softmax-13)" in problems(_softmax(bad, opset=17))[0]


def test_checker_resolves_since_version_on_the_nodes():
    model = load_model(_softmax(opset=12))
    check.check_model(model)
    assert model.graph.nodes[0].label == "Softmax-11"
    sess = onnxjit.InferenceSession(_softmax(opset=12))
    assert [g.label for g in sess.graph_nodes()] == ["Softmax-11"]
    sess.run(None, {"x": np.ones((2, 3), np.float32)})
    (step,) = sess.stats()["plans"][0]["steps"]
    assert step["op"] == "Softmax-11" and step["kernel"].endswith("softmax_1")


# -- functions --------------------------------------------------------------------------------


def test_function_body_checked():
    fn = helper.make_function(
        "local",
        "F",
        ["a"],
        ["b"],
        [helper.make_node("Frobnicate", ["a"], ["b"])],
        [helper.make_opsetid("", 17)],
    )
    model = make(
        [helper.make_node("F", ["x"], ["y"], domain="local")],
        extra_opsets=[helper.make_opsetid("local", 1)],
    )
    model.functions.append(fn)
    msg = assert_one_problem(model, "function local:F", "'Frobnicate' does not exist")
    assert msg.startswith("in function local:F: ")


# -- onnx's checker as the oracle on a table of decisions ---------------------------------------


_CASES: dict[str, Callable[[], onnx.ModelProto]] = {
    "valid": lambda: make([identity()]),
    "undefined_input": lambda: make([identity("nope", "y")]),
    "unknown_op": lambda: make([helper.make_node("Nope", ["x"], ["y"])]),
    "wrong_attr_type": lambda: _softmax(helper.make_attribute("axis", "0")),
    "missing_required_attr": lambda: make([helper.make_node("Cast", ["x"], ["y"])]),
    "unknown_attr": lambda: _softmax(helper.make_attribute("bogus", 1)),
    "out_of_order": lambda: make([identity("t", "y"), identity("x", "t")]),
    "if_outer_scope": lambda: _if_model("nx"),
    "if_undefined": lambda: _if_model("nothing"),
    "loop_outer_scope": lambda: _loop_model("step"),
    "loop_undefined": lambda: _loop_model("missing"),
    "concat_zero_inputs": lambda: make([helper.make_node("Concat", [], ["y"], axis=0)]),
    "optional_input_empty": lambda: make([helper.make_node("Clip", ["x", "", "x"], ["y"])]),
}


@pytest.mark.parametrize("case", sorted(_CASES))
def test_decision_matches_onnx_checker(case):
    model = _CASES[case]()
    assert (problems(model) == []) == onnx_accepts(model)


@pytest.mark.parametrize("cond", [True, False])
def test_if_reading_outer_scope_runs(cond):
    # Accepted by the checker, the outer-scope read also runs (If-16 is registered).
    from onnx.reference import ReferenceEvaluator

    model = _if_model("nx")
    feed = {"c": np.array(cond), "x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    want = ReferenceEvaluator(model).run(None, feed)[0]
    np.testing.assert_array_equal(onnxjit.InferenceSession(model).run(None, feed)[0], want)


def test_loop_reading_outer_scope_runs():
    # onnxruntime is the oracle: onnx 1.23's ReferenceEvaluator returns x unchanged for this
    # Loop (acc += step three times with step = -x from the outer scope; the answer is -2x).
    import onnxruntime as ort

    model = _loop_model("step")
    feed = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    want = ort.InferenceSession(model.SerializeToString()).run(None, feed)[0]
    np.testing.assert_array_equal(want, -2 * feed["x"])
    np.testing.assert_array_equal(onnxjit.InferenceSession(model).run(None, feed)[0], want)
