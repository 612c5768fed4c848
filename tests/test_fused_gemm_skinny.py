"""FusedGemm on skinny products (a few rows of A, transA included) against the reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnxjit


def _gemm_model(m: int, k: int, n: int, trans_a: int) -> onnx.ModelProto:
    r = np.random.default_rng(5)
    w = numpy_helper.from_array(r.standard_normal((n, k)).astype(np.float32), "W")
    b = numpy_helper.from_array(r.standard_normal(n).astype(np.float32), "B")
    a_shape = [k, m] if trans_a else [m, k]
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["A", "W", "B"], ["G"], transA=trans_a, transB=1),
            helper.make_node("Relu", ["G"], ["Y"]),
        ],
        "skinny",
        [helper.make_tensor_value_info("A", onnx.TensorProto.FLOAT, a_shape)],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [m, n])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("m,trans_a", [(1, 0), (3, 0), (2, 1), (5, 0)])
def test_fused_gemm_uses_it_and_agrees_with_the_reference(m, trans_a) -> None:
    from onnx.reference import ReferenceEvaluator

    model = _gemm_model(m, 37, 20, trans_a)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    assert [n.op_type for n in sess.graph_nodes()] == ["FusedGemm"]
    shape = (37, m) if trans_a else (m, 37)
    a = np.random.default_rng(m).standard_normal(shape).astype(np.float32)
    got = sess.run(None, {"A": a})[0]
    want = ReferenceEvaluator(model).run(None, {"A": a})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
