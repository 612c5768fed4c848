"""The optimised-model writer: the IR back to an ONNX file that loads, checks and runs."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from oracle import ort_outputs

import onnxjit
from onnxjit import export, ir
from onnxjit.model import load_model


def _session(model: onnx.ModelProto, level: int) -> onnxjit.InferenceSession:
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel(level)
    return onnxjit.InferenceSession(model.SerializeToString(), so)


def _rich_model() -> onnx.ModelProto:
    """Attributes of most kinds, a subgraph, a local function, several initializer types."""
    rng = np.random.default_rng(0)
    n = helper.make_node
    w = rng.standard_normal((4, 4)).astype(np.float32)
    then = helper.make_graph(
        [n("Mul", ["h", "two"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["b", 4])],
        initializer=[numpy_helper.from_array(np.float32(2), "two")],
    )
    other = helper.make_graph(
        [n("Neg", ["h"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["b", 4])],
    )
    fn = helper.make_function(
        "local",
        "Scale3",
        ["a"],
        ["b"],
        [
            n("Constant", [], ["k"], value_float=3.0),
            n("Mul", ["a", "k"], ["b"]),
        ],
        opset_imports=[helper.make_opsetid("", 17)],
    )
    nodes = [
        n("MatMul", ["x", "w"], ["m"], name="matmul"),
        n("LeakyRelu", ["m"], ["l"], alpha=0.25, name="leaky"),
        n("Cast", ["l"], ["lc"], to=TensorProto.FLOAT, name="noop_cast"),
        n("Softmax", ["lc"], ["h"], axis=-1, name="softmax"),
        n("If", ["flag"], ["i"], then_branch=then, else_branch=other, name="if"),
        n("Scale3", ["i"], ["f"], domain="local", name="scale3"),
        n("Shape", ["x"], ["s"]),
        n("ConstantOfShape", ["s"], ["z"], value=numpy_helper.from_array(np.float32([0.5]))),
        n("Add", ["f", "z"], ["y"], name="add"),
        n("Identity", ["names"], ["names_out"]),
        n("Cast", ["half"], ["half_f"], to=TensorProto.FLOAT),
        n("Cast", ["bf"], ["bf_f"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "rich",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4]),
            helper.make_tensor_value_info("names_out", TensorProto.STRING, [2]),
            helper.make_tensor_value_info("half_f", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("bf_f", TensorProto.FLOAT, [2]),
        ],
        initializer=[
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(np.array(["alpha", "bêta"], dtype=object), "names"),
            numpy_helper.from_array(np.array([1.5, -2, 0.25], np.float16), "half"),
            numpy_helper.from_array(np.array([1.5, -3.0], ml_dtypes.bfloat16), "bf"),
        ],
        value_info=[helper.make_tensor_value_info("m", TensorProto.FLOAT, ["b", 4])],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        functions=[fn],
        producer_name="test_export",
    )
    model.ir_version = 9
    helper.set_model_props(model, {"author": "onnxjit tests"})
    return model


def _feeds(b: int = 3, flag: bool = True) -> dict[str, np.ndarray]:
    x = np.random.default_rng(b).standard_normal((b, 4)).astype(np.float32)
    return {"x": x, "flag": np.array(flag)}


def _assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype == object:
            assert g.tolist() == w.tolist()
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("level", [0, 1])
def test_written_model_loads_checks_and_runs_in_onnxruntime(tmp_path, level):
    model = _rich_model()
    sess = _session(model, level)
    path = export.write_optimized_model(sess._model, tmp_path / "opt.onnx")
    assert os.fspath(path) == os.fspath(tmp_path / "opt.onnx")
    assert sorted(os.listdir(tmp_path)) == ["opt.onnx"]  # no temporary file left behind
    written = onnx.load(path)
    onnx.checker.check_model(written, full_check=False)
    assert written.producer_name == "test_export"
    assert {p.key: p.value for p in written.metadata_props} == {"author": "onnxjit tests"}
    assert [f.name for f in written.functions] == ["Scale3"]
    assert "onnxjit" not in {o.domain for o in written.opset_import}
    if level == 1:
        assert "noop_cast" not in [n.name for n in written.graph.node]
    for flag in (True, False):
        feeds = _feeds(flag=flag)
        want = ort_outputs(model, feeds)
        _assert_same(ort_outputs(written, feeds), want)
        _assert_same(sess.run(None, feeds), want)
        # onnxjit reads its own output back.
        _assert_same(onnxjit.InferenceSession(path).run(None, feeds), want)


def test_round_trip_keeps_attributes_and_initializers():
    model = _rich_model()
    ir_model = load_model(model)
    proto = export.to_model_proto(ir_model)
    by_name = {n.name: n for n in proto.graph.node}
    assert helper.get_attribute_value(by_name["leaky"].attribute[0]) == pytest.approx(0.25)
    assert by_name["softmax"].attribute[0].i == -1
    assert by_name["scale3"].domain == "local"
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    np.testing.assert_array_equal(inits["w"], numpy_helper.to_array(model.graph.initializer[0]))
    assert inits["names"].tolist() == ["alpha", "bêta"]
    assert inits["half"].dtype == np.float16
    assert inits["bf"].dtype == ml_dtypes.bfloat16
    if_node = by_name["if"]
    branches = {a.name: a.g for a in if_node.attribute}
    assert [t.name for t in branches["then_branch"].initializer] == ["two"]
    assert [v.name for v in proto.graph.value_info] == ["m"]
    # Converting does not change the IR.
    assert export.to_model_proto(ir_model).SerializeToString() == proto.SerializeToString()


def _fused_model() -> onnx.ModelProto:
    """A graph every fusion pass touches: MatMul + bias (FusedGemm), an elementwise chain
    (FusedElementwise), its reduction (FusedReduce), LayerNormalization written with primitive
    ops (LayerNorm) and the erf GELU (Gelu), after dynamic shape arithmetic."""
    rng = np.random.default_rng(3)
    n = helper.make_node
    f32 = np.float32
    consts = {
        "w": rng.standard_normal((8, 16)).astype(f32),
        "b": rng.standard_normal(16).astype(f32),
        "g": rng.standard_normal(16).astype(f32),
        "beta": rng.standard_normal(16).astype(f32),
        "eps": np.array(1e-5, f32),
        "two": np.array(2.0, f32),
        "sqrt2": np.array(np.sqrt(2.0), f32),
        "one": np.array(1.0, f32),
        "half": np.array(0.5, f32),
        "last": np.array([-1], np.int64),
        "i0": np.array(0, np.int64),
        "ax": np.array([0], np.int64),
        "m1": np.array([-1], np.int64),
    }
    nodes = [
        n("MatMul", ["x", "w"], ["h0"], name="matmul"),
        n("Add", ["h0", "b"], ["h"], name="bias"),
        # LayerNormalization written out
        n("ReduceMean", ["h", "last"], ["mu"], name="mean"),
        n("Sub", ["h", "mu"], ["d"], name="sub"),
        n("Pow", ["d", "two"], ["d2"], name="pow"),
        n("ReduceMean", ["d2", "last"], ["var"], name="var"),
        n("Add", ["var", "eps"], ["ve"], name="add_eps"),
        n("Sqrt", ["ve"], ["sd"], name="sqrt"),
        n("Div", ["d", "sd"], ["nrm"], name="div"),
        n("Mul", ["nrm", "g"], ["ng"], name="scale"),
        n("Add", ["ng", "beta"], ["ln"], name="shift"),
        # GELU (erf form)
        n("Div", ["ln", "sqrt2"], ["e0"], name="gelu_div"),
        n("Erf", ["e0"], ["e1"], name="gelu_erf"),
        n("Add", ["e1", "one"], ["e2"], name="gelu_add"),
        n("Mul", ["ln", "e2"], ["e3"], name="gelu_mul"),
        n("Mul", ["e3", "half"], ["ge"], name="gelu_half"),
        # an elementwise chain and its reduction
        n("Tanh", ["ge"], ["t"], name="tanh"),
        n("Mul", ["t", "ge"], ["tm"], name="mul"),
        n("ReduceSum", ["tm", "last"], ["y"], keepdims=1, name="sum"),
        # dynamic shape arithmetic
        n("Shape", ["x"], ["s"], name="shape"),
        n("Gather", ["s", "i0"], ["nb"], name="gather"),
        n("Unsqueeze", ["nb", "ax"], ["nu"], name="unsqueeze"),
        n("Concat", ["nu", "m1"], ["shp"], axis=0, name="concat"),
        n("Reshape", ["ln", "shp"], ["z"], name="reshape"),
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "fused",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
            [
                helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1]),
                helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 16]),
            ],
            initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()],
        ),
        opset_imports=[helper.make_opsetid("", 18)],
    )
    model.ir_version = 8
    return model


def test_fused_nodes_are_written_in_the_onnxjit_domain_with_members(tmp_path):
    model = _fused_model()
    sess = _session(model, 99)
    path = export.write_optimized_model(sess._model, tmp_path / "fused.onnx")
    written = onnx.load(path)
    onnx.checker.check_model(written, full_check=False)
    assert {o.domain: o.version for o in written.opset_import}["onnxjit"] == 1
    fused = {n.op_type: n for n in written.graph.node if n.domain == "onnxjit"}
    assert sorted(fused) == ["FusedGemm", "FusedReduce", "SkipLayerNorm"]
    attrs = {a.name: a for a in fused["FusedReduce"].attribute}
    members = [s.decode() for s in attrs["members"].strings]
    assert members == [
        "onnxjit.Gelu-1 Gelu:gelu_div",
        "Tanh-13 tanh",
        "Mul-14 mul",
        "ReduceSum-13 sum",
    ]
    # the members travel as a graph, not as a Python object
    body = attrs["body"].g
    assert [(n.domain, n.op_type) for n in body.node] == [
        ("onnxjit", "Gelu"),
        ("", "Tanh"),
        ("", "Mul"),
        ("", "ReduceSum"),
    ]
    graph_nodes = {g.name: g for g in sess.graph_nodes()}
    for node in written.graph.node:
        got = [s.decode() for a in node.attribute if a.name == "members" for s in a.strings]
        assert got == graph_nodes[node.name].members


@pytest.mark.parametrize("level", [2, 99])
def test_an_optimized_model_loads_back_and_matches(tmp_path, level):
    """SessionOptions.optimized_model_filepath writes a model that onnxjit loads back: the
    same fused nodes (their members listed), the same outputs as the original model in
    onnxjit and in onnxruntime."""
    model = _fused_model()
    path = str(tmp_path / "optimized.onnx")
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = level
    so.optimized_model_filepath = path
    first = onnxjit.InferenceSession(model.SerializeToString(), so)
    so_again = onnxjit.SessionOptions()
    so_again.graph_optimization_level = level  # the passes find nothing more to rewrite
    again = onnxjit.InferenceSession(path, so_again)
    assert [(g.domain, g.op_type, g.members) for g in again.graph_nodes()] == [
        (g.domain, g.op_type, g.members) for g in first.graph_nodes()
    ]
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(4)
    for batch in (1, 5, 1):
        x = rng.standard_normal((batch, 8)).astype(np.float32)
        got = again.run(None, {"x": x})
        for g, f, r in zip(got, first.run(None, {"x": x}), ref.run(None, {"x": x})):
            np.testing.assert_array_equal(g, f)
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def test_a_node_of_the_onnxjit_domain_that_onnxjit_does_not_have_is_refused():
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Teleport", ["x"], ["y"], domain="onnxjit")],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        ),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("onnxjit", 1)],
    )
    with pytest.raises(onnxjit.ModelCheckError, match=r"no operator 'Teleport' in its domain"):
        onnxjit.InferenceSession(model.SerializeToString())


def test_unserialisable_attribute_is_left_out_with_a_note():
    member = ir.Node("Relu", "", ["x"], ["y"], name="relu", since_version=14)
    node = ir.Node(
        "Thing",
        "onnxjit",
        ["x"],
        ["y"],
        attrs={"alpha": 0.5, "plan": object(), "sizes": [1, 2], "empty": []},
        name="fused",
        since_version=1,
        members=[member],
    )
    graph = ir.Graph(
        name="g",
        nodes=[node],
        inputs=[ir.ValueInfo("x", helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))],
        outputs=[ir.ValueInfo("y", helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))],
    )
    model = ir.Model(ir_version=8, opset_imports={"": 17}, graph=graph)
    proto = export.to_model_proto(model)
    (p,) = proto.graph.node
    attrs = {a.name: helper.get_attribute_value(a) for a in p.attribute}
    assert attrs["alpha"] == pytest.approx(0.5)
    assert attrs["sizes"] == [1, 2] and attrs["empty"] == []
    assert attrs["members"] == [b"Relu-14 relu"]
    assert "plan" not in attrs and "'plan'" in p.doc_string
    onnx.checker.check_model(proto, full_check=False)


def test_external_data_for_large_models(tmp_path, monkeypatch):
    monkeypatch.setattr(export, "EXTERNAL_DATA_BYTES", 0)
    monkeypatch.setattr(export, "EXTERNAL_TENSOR_MIN_BYTES", 16)
    model = _rich_model()
    sess = _session(model, 1)
    path = export.write_optimized_model(sess._model, tmp_path / "big.onnx")
    assert sorted(os.listdir(tmp_path)) == ["big.onnx", "big.onnx.data"]
    written = onnx.load(path)
    onnx.checker.check_model(written, full_check=False)
    feeds = _feeds()
    r = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    _assert_same(r.run(None, feeds), ort_outputs(model, feeds))


def test_write_replaces_an_existing_file(tmp_path):
    target = tmp_path / "m.onnx"
    target.write_bytes(b"old")
    sess = _session(_rich_model(), 1)
    export.write_optimized_model(sess._model, target)
    onnx.checker.check_model(onnx.load(target), full_check=False)
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]
