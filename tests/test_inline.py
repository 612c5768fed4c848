"""Function inlining (onnxjit/passes/inline.py), compared with onnx's ReferenceEvaluator.

Model-local FunctionProtos: attribute references (ref_attr_name), default attributes
(attribute_proto), nested calls, custom domains, overloads, recursion (refused), and operators
without a kernel whose schema defines a function body.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import AttributeProto, TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxjit
from onnxjit.errors import ModelCheckError

F = TensorProto.FLOAT
DOM = "com.example"


def ref_attr(name: str, ref: str, atype: int) -> AttributeProto:
    a = AttributeProto(name=name, ref_attr_name=ref, type=atype)
    return a


def function(
    name: str,
    inputs: list[str],
    outputs: list[str],
    nodes: list[onnx.NodeProto],
    attributes: list[str] = (),
    defaults: list[AttributeProto] = (),
    domain: str = DOM,
    overload: str = "",
    opset: int = 18,
) -> onnx.FunctionProto:
    fn = helper.make_function(
        domain,
        name,
        inputs,
        outputs,
        nodes,
        [helper.make_opsetid("", opset), helper.make_opsetid(DOM, 1)],
        attributes=list(attributes),
    )
    fn.attribute_proto.extend(defaults)
    if overload:
        fn.overload = overload
    return fn


def model_with(
    nodes: list[onnx.NodeProto],
    functions: list[onnx.FunctionProto],
    inputs=("x",),
    outputs=("y",),
    shape=(2, 3),
    opset: int = 18,
    ir_version: int = 10,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, F, shape) for n in inputs],
        [helper.make_tensor_value_info(n, F, shape) for n in outputs],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(DOM, 1)],
        functions=functions,
    )
    model.ir_version = ir_version
    return model


def compare(
    model: onnx.ModelProto,
    feeds: dict[str, np.ndarray],
    rtol: float = 1e-5,
    atol: float = 1e-6,
    oracle: str = "ref",
):
    """Run onnxjit and the oracle; assert equal outputs; return the onnxjit session.

    ``oracle="ort"`` uses onnxruntime where onnx's ReferenceEvaluator is wrong (each use says
    why).
    """
    if oracle == "ref":
        want = ReferenceEvaluator(model).run(None, feeds)
    else:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        want = ort.InferenceSession(
            model.SerializeToString(), so, providers=["CPUExecutionProvider"]
        ).run(None, feeds)
    # These tests read the inlined node list, so elementwise fusion (which would merge the
    # inlined nodes into one kernel) is off; the values are checked either way.
    sess = onnxjit.InferenceSession(model, disabled_optimizers=["elementwise_fusion"])
    got = sess.run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return sess


X = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]], np.float32)

# onnx 1.23's ReferenceEvaluator fails on ref_attr_name inside function bodies (it passes
# 'linked_attributes' to unary kernels that do not accept it, or leaves RefAttrName objects
# in place of defaults), so onnxruntime is the oracle for attribute references.
ORT_REF_ATTR = "ort"


def _ops(sess) -> list[str]:
    return [g.op_type for g in sess.graph_nodes()]


# -- attribute references and defaults --------------------------------------------------------


def _leaky_softmax() -> onnx.FunctionProto:
    """y = Softmax(LeakyRelu(x, alpha=@alpha), axis=@axis); both attributes referenced."""
    leaky = helper.make_node("LeakyRelu", ["a"], ["t"])
    leaky.attribute.append(ref_attr("alpha", "alpha", AttributeProto.FLOAT))
    soft = helper.make_node("Softmax", ["t"], ["b"])
    soft.attribute.append(ref_attr("axis", "axis", AttributeProto.INT))
    return function("LeakySoftmax", ["a"], ["b"], [leaky, soft], attributes=["alpha", "axis"])


@pytest.mark.parametrize("attrs", [{"alpha": 0.5, "axis": 0}, {"alpha": 0.1, "axis": 1}])
def test_attribute_references(attrs):
    node = helper.make_node("LeakySoftmax", ["x"], ["y"], domain=DOM, **attrs)
    sess = compare(model_with([node], [_leaky_softmax()]), {"x": X}, oracle=ORT_REF_ATTR)
    assert _ops(sess) == ["LeakyRelu", "Softmax"]
    assert [g.attrs for g in sess.graph_nodes()] == [
        {"alpha": pytest.approx(attrs["alpha"])},
        {"axis": attrs["axis"]},
    ]


def test_attribute_reference_left_unset_uses_the_operator_default():
    # Neither the call nor the function gives alpha/axis: the ops' own defaults apply.
    node = helper.make_node("LeakySoftmax", ["x"], ["y"], domain=DOM)
    compare(model_with([node], [_leaky_softmax()]), {"x": X}, oracle=ORT_REF_ATTR)


def test_default_attributes_from_attribute_proto():
    fn = _leaky_softmax()
    del fn.attribute[:]
    fn.attribute_proto.extend(
        [helper.make_attribute("alpha", 0.25), helper.make_attribute("axis", 0)]
    )
    default_call = helper.make_node("LeakySoftmax", ["x"], ["d"], domain=DOM)
    override = helper.make_node("LeakySoftmax", ["x"], ["o"], domain=DOM, axis=1)
    model = model_with([default_call, override], [fn], outputs=("d", "o"))
    sess = compare(model, {"x": X}, oracle=ORT_REF_ATTR)
    d, o = sess.run(None, {"x": X})
    np.testing.assert_allclose(d.sum(axis=0), 1, rtol=1e-6)  # default axis 0 was used
    np.testing.assert_allclose(o.sum(axis=1), 1, rtol=1e-6)  # the call's axis 1 won


# -- nesting, domains, overloads, renaming ----------------------------------------------------


def test_nested_calls_and_internal_names_do_not_clash():
    # Inner(a) = Relu(a) + a ; Outer(a) = Inner(Inner(a)) * a. Both bodies use the name "t".
    inner = function(
        "Inner",
        ["a"],
        ["b"],
        [helper.make_node("Relu", ["a"], ["t"]), helper.make_node("Add", ["t", "a"], ["b"])],
    )
    outer = function(
        "Outer",
        ["a"],
        ["b"],
        [
            helper.make_node("Inner", ["a"], ["t"], domain=DOM),
            helper.make_node("Inner", ["t"], ["u"], domain=DOM),
            helper.make_node("Mul", ["u", "a"], ["b"]),
        ],
    )
    # The main graph also has a value called "t" to catch leaks of body names.
    nodes = [
        helper.make_node("Neg", ["x"], ["t"]),
        helper.make_node("Outer", ["t"], ["y"], domain=DOM, name="call"),
    ]
    # Callees are listed first: the ReferenceEvaluator resolves functions in list order.
    sess = compare(model_with(nodes, [inner, outer]), {"x": X})
    assert _ops(sess) == ["Neg", "Relu", "Add", "Relu", "Add", "Mul"]
    internal = [o for g in sess.graph_nodes()[1:-1] for o in g.outputs]
    assert "t" not in internal and len(set(internal)) == len(internal)
    assert sess.graph_nodes()[1].name.startswith("call/")


def test_function_in_the_default_domain_name_space_of_a_custom_domain():
    # The same name in two domains: the node's domain picks the function.
    a = function("Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])])
    b = function(
        "Twice", ["a"], ["b"], [helper.make_node("Mul", ["a", "a"], ["b"])], domain="org.other"
    )
    model = model_with(
        [
            helper.make_node("Twice", ["x"], ["p"], domain=DOM),
            helper.make_node("Twice", ["x"], ["q"], domain="org.other"),
        ],
        [a, b],
        outputs=("p", "q"),
    )
    model.opset_import.append(helper.make_opsetid("org.other", 1))
    sess = compare(model, {"x": X})
    assert _ops(sess) == ["Add", "Mul"]


def test_overloads():
    plus = function(
        "Op", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])], overload="plus"
    )
    times = function(
        "Op", ["a"], ["b"], [helper.make_node("Mul", ["a", "a"], ["b"])], overload="times"
    )
    nodes = [
        helper.make_node("Op", ["x"], ["p"], domain=DOM, overload="plus"),
        helper.make_node("Op", ["x"], ["q"], domain=DOM, overload="times"),
    ]
    model = model_with(nodes, [plus, times], outputs=("p", "q"))
    sess = onnxjit.InferenceSession(model)
    assert _ops(sess) == ["Add", "Mul"]
    p, q = sess.run(None, {"x": X})
    # The reference evaluator ignores overloads, so the oracle is numpy here.
    np.testing.assert_allclose(p, X + X)
    np.testing.assert_allclose(q, X * X)


def test_function_with_two_outputs_and_an_unused_one():
    fn = function(
        "Split2",
        ["a"],
        ["pos", "neg"],
        [helper.make_node("Relu", ["a"], ["pos"]), helper.make_node("Neg", ["a"], ["neg"])],
    )
    model = model_with([helper.make_node("Split2", ["x"], ["y", "unused"], domain=DOM)], [fn])
    compare(model, {"x": X})


def test_function_body_uses_its_own_opset_imports():
    # The body imports opset 14 and the model 18; Relu resolves to Relu-14 under both, which
    # IR.md requires, and the node is labelled with the function's resolution.
    fn = function("R", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])], opset=14)
    model = model_with([helper.make_node("R", ["x"], ["y"], domain=DOM)], [fn])
    sess = compare(model, {"x": X})
    assert sess.graph_nodes()[0].label == "Relu-14"


def test_function_opset_that_changes_a_schema_is_refused():
    # Softmax-11 (opset 12 in the body) is not Softmax-13 (opset 18 in the model): IR.md
    # forbids this; onnx's checker refuses it too.
    soft = helper.make_node("Softmax", ["a"], ["b"], axis=1)
    fn = function("Soft11", ["a"], ["b"], [soft], opset=12)
    model = model_with([helper.make_node("Soft11", ["x"], ["y"], domain=DOM)], [fn])
    with pytest.raises(ModelCheckError) as info:
        onnxjit.InferenceSession(model)
    msg = str(info.value)
    assert f"in function {DOM}:Soft11: node #0 resolves to Softmax-11" in msg
    assert "but to Softmax-13 under the model's (18)" in msg and "same version" in msg
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(model, full_check=True)


# -- refused functions ------------------------------------------------------------------------


def test_recursive_function_refused():
    fn = function(
        "Forever",
        ["a"],
        ["b"],
        [helper.make_node("Forever", ["a"], ["b"], domain=DOM)],
    )
    model = model_with([helper.make_node("Forever", ["x"], ["y"], domain=DOM, name="f")], [fn])
    with pytest.raises(ModelCheckError) as info:
        onnxjit.InferenceSession(model)
    msg = str(info.value)
    assert "node 'f'" in msg and f"{DOM}:Forever" in msg and "recursive" in msg
    assert f"({DOM}:Forever -> {DOM}:Forever)" in msg


def test_mutually_recursive_functions_refused():
    ping = function("Ping", ["a"], ["b"], [helper.make_node("Pong", ["a"], ["b"], domain=DOM)])
    pong = function("Pong", ["a"], ["b"], [helper.make_node("Ping", ["a"], ["b"], domain=DOM)])
    model = model_with([helper.make_node("Ping", ["x"], ["y"], domain=DOM)], [ping, pong])
    with pytest.raises(ModelCheckError, match="Ping -> .*Pong -> .*Ping"):
        onnxjit.InferenceSession(model)


def test_function_call_with_unknown_attribute():
    node = helper.make_node("LeakySoftmax", ["x"], ["y"], domain=DOM, beta=1.0, name="call")
    with pytest.raises(ModelCheckError) as info:
        onnxjit.InferenceSession(model_with([node], [_leaky_softmax()]))
    msg = str(info.value)
    assert "node 'call'" in msg and "'beta'" in msg and "['alpha', 'axis']" in msg


def test_function_call_with_too_many_inputs():
    node = helper.make_node("LeakySoftmax", ["x", "x"], ["y"], domain=DOM, name="call")
    with pytest.raises(ModelCheckError) as info:
        onnxjit.InferenceSession(model_with([node], [_leaky_softmax()]))
    msg = str(info.value)
    assert "node 'call'" in msg and "2 inputs" in msg and "takes 1" in msg


def test_function_defined_twice():
    fn = _leaky_softmax()
    node = helper.make_node("LeakySoftmax", ["x"], ["y"], domain=DOM)
    with pytest.raises(ModelCheckError, match="is defined twice"):
        onnxjit.InferenceSession(model_with([node], [fn, fn]))


# -- schema function bodies -------------------------------------------------------------------


def test_schema_function_body_context_independent():
    # AffineGrid has no kernel; its schema's function body (a context-independent one) runs.
    theta = np.random.default_rng(2).standard_normal((2, 2, 3)).astype(np.float32)
    size = np.array([2, 3, 4, 5], np.int64)
    graph = helper.make_graph(
        [helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=0)],
        "g",
        [
            helper.make_tensor_value_info("theta", F, [2, 2, 3]),
            helper.make_tensor_value_info("size", TensorProto.INT64, [4]),
        ],
        [helper.make_tensor_value_info("grid", F, [None, None, None, None])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    sess = compare(model, {"theta": theta, "size": size}, rtol=1e-5, atol=1e-5)
    assert "AffineGrid" not in _ops(sess)


def test_schema_function_body_context_dependent():
    # RMSNormalization's body depends on the input type (a context-dependent function).
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    scale = np.linspace(0.5, 1.5, 4, dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=-1)],
        "g",
        [
            helper.make_tensor_value_info("x", F, [2, 3, 4]),
            helper.make_tensor_value_info("s", F, [4]),
        ],
        [helper.make_tensor_value_info("y", F, [2, 3, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    sess = compare(model, {"x": x, "s": scale}, rtol=1e-5, atol=1e-5)
    assert "RMSNormalization" not in _ops(sess)


def test_context_dependent_body_sees_graph_attributes():
    # FlexAttention's body builder splices the prob_mod graph in; the node handed to it must
    # carry that graph (it used to be dropped, giving a body with Identity in its place).
    from onnxjit.model import load_model
    from onnxjit.passes.inline import _Inliner

    preview = "ai.onnx.preview"
    mod = helper.make_graph(
        [helper.make_node("Mul", ["probs", "half"], ["probs_out"], name="prob_mod_mul")],
        "prob_mod",
        [helper.make_tensor_value_info("probs", F, None)],
        [helper.make_tensor_value_info("probs_out", F, None)],
        initializer=[helper.make_tensor("half", F, [], [0.5])],
    )

    def body_ops(with_mod: bool) -> list[str]:
        node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain=preview)
        if with_mod:
            node.attribute.append(helper.make_attribute("prob_mod", mod))
        shape = [1, 2, 3, 4]
        graph = helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info(n, F, shape) for n in "QKV"],
            [helper.make_tensor_value_info("Y", F, shape)],
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid(preview, 1)],
        )
        loaded = load_model(model)
        opsets = dict(loaded.opset_imports)
        found = _Inliner(loaded).schema_function(loaded.graph.nodes[0], preview, opsets)
        assert found is not None
        return [n.op_type for n in found[0].nodes]

    plain, modded = body_ops(False), body_ops(True)
    assert modded.count("Mul") == plain.count("Mul") + 1
    assert modded.count("Identity") == plain.count("Identity") - 1
