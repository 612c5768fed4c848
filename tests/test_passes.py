"""Basic graph passes: results equal onnxruntime's, and the passes did what they claim."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from oracle import ort_outputs

import onnxjit


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 4)).astype(np.float32)
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.array([-1], np.int64), "shape"),
        numpy_helper.from_array(np.float32(0.5), "half"),
    ]
    nodes = [
        # Foldable: depends on initializers only.
        helper.make_node("Transpose", ["w"], ["wt"]),
        helper.make_node("Mul", ["wt", "half"], ["wh"]),
        helper.make_node("Identity", ["wh"], ["wi"]),
        helper.make_node("MatMul", ["x", "wi"], ["y0"]),
        helper.make_node("Dropout", ["y0"], ["y1"]),
        helper.make_node("Relu", ["y1"], ["y"]),
        # Dead: its result reaches no output.
        helper.make_node("Reshape", ["x", "shape"], ["unused"]),
        # A graph output that is an Identity of a constant must stay a fresh copy.
        helper.make_node("Identity", ["w"], ["w_out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "passes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("w_out", TensorProto.FLOAT, [4, 4]),
        ],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _session(level: int) -> onnxjit.InferenceSession:
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel(level)
    return onnxjit.InferenceSession(_model().SerializeToString(), so)


def test_optimised_and_unoptimised_runs_match_onnxruntime():
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    want = ort_outputs(_model(), {"x": x})
    for level in (0, 1, 99):
        got = _session(level).run(None, {"x": x})
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_basic_level_folds_constants_and_drops_identity_dropout_and_dead_nodes():
    ops_off = [g.op_type for g in _session(0).graph_nodes()]
    ops_on = [g.op_type for g in _session(1).graph_nodes()]
    assert ops_off == [n.op_type for n in _model().graph.node]
    # Transpose and Mul fold into one constant; the Identity feeding MatMul, the Dropout and
    # the dead Reshape disappear; the Identity of a constant graph output folds too.
    assert ops_on == ["MatMul", "Relu"]


def test_outputs_never_alias_session_constants():
    sess = _session(99)
    x = np.ones((1, 4), np.float32)
    first = sess.run(["w_out"], {"x": x})[0]
    first[:] = 123.0
    again = sess.run(["w_out"], {"x": x})[0]
    np.testing.assert_array_equal(again, numpy_helper.to_array(_model().graph.initializer[0]))
