"""Test helpers: build single-node models and compare onnxjit with independent oracles.

``check_node`` builds a one-node model at a given opset, runs it through
``onnxjit.InferenceSession`` and through ``onnx.reference.ReferenceEvaluator`` (or onnxruntime
when ``oracle="ort"``), and asserts the outputs match.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

import onnxjit
from onnxjit import types


def make_node_model(
    op_type: str,
    inputs: dict[str, np.ndarray | None],
    attrs: dict[str, Any] | None = None,
    opset: int | None = None,
    domain: str = "",
    n_outputs: int = 1,
    output_names: Sequence[str] | None = None,
    const_inputs: Sequence[str] = (),
    ir_version: int | None = None,
) -> onnx.ModelProto:
    """A model with one node. ``None`` inputs become omitted optional inputs ('').

    Inputs named in ``const_inputs`` become initializers instead of graph inputs.
    Output types are left to onnx shape inference (falling back to undefined).
    """
    attrs = attrs or {}
    node_inputs, graph_inputs, inits = [], [], []
    for name, value in inputs.items():
        if value is None:
            node_inputs.append("")
            continue
        node_inputs.append(name)
        if name in const_inputs:
            inits.append(onnx.numpy_helper.from_array(np.asarray(value), name))
        else:
            arr = np.asarray(value)
            graph_inputs.append(
                helper.make_tensor_value_info(name, types.onnx_elem_type(arr.dtype), arr.shape)
            )
    while node_inputs and node_inputs[-1] == "":
        node_inputs.pop()
    outs = list(output_names) if output_names else [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, node_inputs, outs, domain=domain or None, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        graph_inputs,
        [helper.make_value_info(o, onnx.TypeProto()) for o in outs if o],
        initializer=inits,
    )
    opsets = []
    if domain:
        opsets.append(helper.make_opsetid(domain, opset or onnx.defs.onnx_opset_version()))
        opsets.append(helper.make_opsetid("", 17))
    else:
        opsets.append(helper.make_opsetid("", opset or onnx.defs.onnx_opset_version()))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = ir_version or min(onnx.IR_VERSION, 10)
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        # Keep the outputs declared with inferred types where inference found them.
        inferred = {v.name: v for v in list(model.graph.value_info) + list(model.graph.output)}
        for out in model.graph.output:
            if out.name in inferred and inferred[out.name].type.WhichOneof("value"):
                out.type.CopyFrom(inferred[out.name].type)
    except Exception:
        pass
    _fill_output_types(model)
    return model


def _fill_output_types(model: onnx.ModelProto) -> None:
    # Outputs without a type get an unranked tensor(float) placeholder replaced at run time;
    # onnxjit does not need output types, but the reference evaluator does not either.
    for out in model.graph.output:
        if not out.type.WhichOneof("value"):
            out.type.tensor_type.elem_type = TensorProto.UNDEFINED


def declare_outputs_like(model: onnx.ModelProto, values: Sequence[Any]) -> None:
    """Give outputs that shape inference left untyped the oracle's element type and rank.

    onnxjit's checker requires typed, ranked main-graph outputs (IR spec); the dims are left as
    unknown so the declaration says no more than the oracle showed.
    """
    for out, value in zip(model.graph.output, values):
        tt = out.type.tensor_type
        if not isinstance(value, np.ndarray):
            continue
        if out.type.WhichOneof("value") not in (None, "tensor_type"):
            continue
        if tt.elem_type == TensorProto.UNDEFINED:
            tt.elem_type = types.onnx_elem_type(value.dtype)
        if not tt.HasField("shape"):
            tt.shape.SetInParent()
            for _ in range(value.ndim):
                tt.shape.dim.add()


def reference_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[Any]:
    from onnx.reference import ReferenceEvaluator

    return list(ReferenceEvaluator(model).run(None, feeds))


def ort_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[Any]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return list(sess.run(None, feeds))


def assert_close(got: Any, want: Any, rtol: float = 1e-5, atol: float = 1e-6, what: str = ""):
    """Compare values (arrays, lists of arrays, dicts); dtype and shape must match exactly."""
    if isinstance(want, list):
        assert isinstance(got, list), f"{what}: expected a sequence, got {type(got)}"
        assert len(got) == len(want), f"{what}: sequence length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_close(g, w, rtol, atol, f"{what}[{i}]")
        return
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), what
        for k in want:
            assert_close(got[k], want[k], rtol, atol, f"{what}[{k!r}]")
        return
    want = np.asarray(want)
    got = np.asarray(got)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != expected {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != expected {want.shape}"
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(
            got.astype(np.complex128 if want.dtype.kind == "c" else np.float64),
            want.astype(np.complex128 if want.dtype.kind == "c" else np.float64),
            rtol=rtol,
            atol=atol,
            equal_nan=True,
            err_msg=what,
        )
    elif want.dtype.kind == "V" or want.dtype.name in ("bfloat16",) or "float8" in want.dtype.name:
        np.testing.assert_allclose(
            got.astype(np.float64),
            want.astype(np.float64),
            rtol=rtol,
            atol=atol,
            equal_nan=True,
            err_msg=what,
        )
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def check_node(
    op_type: str,
    inputs: dict[str, np.ndarray | None],
    attrs: dict[str, Any] | None = None,
    opset: int | None = None,
    domain: str = "",
    n_outputs: int = 1,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    oracle: str = "ref",
    const_inputs: Sequence[str] = (),
    output_names: Sequence[str] | None = None,
) -> list[Any]:
    """Run one node in onnxjit and in the oracle; assert equal outputs; return onnxjit's."""
    model = make_node_model(
        op_type, inputs, attrs, opset, domain, n_outputs, output_names, const_inputs
    )
    feeds = {k: v for k, v in inputs.items() if v is not None and k not in const_inputs}
    want = reference_outputs(model, feeds) if oracle == "ref" else ort_outputs(model, feeds)
    declare_outputs_like(model, want)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    got = sess.run(None, feeds)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, rtol, atol, f"{op_type}-{opset} output {i}")
    return got


def matmul_integer_model(a_shape, a_dt, b, b_dt, azp_shape, bzp, b_const) -> onnx.ModelProto:
    """One MatMulInteger node (opset 13): input ``a`` of ``a_shape`` and numpy type ``a_dt``;
    ``b`` an initializer (``b_const``) or an input of ``b``'s shape; ``azp`` an input of
    ``azp_shape`` where it is not None; ``bzp`` (array or None) an initializer or an input
    like ``b``."""
    a_type = helper.np_dtype_to_tensor_dtype(np.dtype(a_dt))
    b_type = helper.np_dtype_to_tensor_dtype(np.dtype(b_dt))
    inputs = [helper.make_tensor_value_info("a", a_type, list(a_shape))]
    inits = []
    if b_const:
        inits.append(onnx.numpy_helper.from_array(b, "b"))
    else:
        inputs.append(helper.make_tensor_value_info("b", b_type, list(b.shape)))
    names = ["a", "b", "", ""]
    if azp_shape is not None:
        names[2] = "azp"
        inputs.append(helper.make_tensor_value_info("azp", a_type, list(azp_shape)))
    if bzp is not None:
        names[3] = "bzp"
        if b_const:
            inits.append(onnx.numpy_helper.from_array(bzp, "bzp"))
        else:
            inputs.append(helper.make_tensor_value_info("bzp", b_type, list(bzp.shape)))
    while not names[-1]:
        names.pop()
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", names, ["y"])],
        "g",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.INT32, [*a_shape[:-1], b.shape[1]])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def matmul_integer_feeds(a, b, azp, bzp, b_const: bool) -> dict[str, np.ndarray]:
    """The feeds of :func:`matmul_integer_model`'s inputs: ``a``, and ``b`` with ``bzp`` where
    they are inputs (not ``b_const``), ``azp`` where it is given."""
    feeds = {"a": a}
    if not b_const:
        feeds["b"] = b
        if bzp is not None:
            feeds["bzp"] = bzp
    if azp is not None:
        feeds["azp"] = azp
    return feeds
