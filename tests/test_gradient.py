"""The Gradient expansion pass (onnxjit/passes/gradient.py).

Oracle: central finite differences in float64 of ``sum(y)``, with ``y`` evaluated by
``onnx.reference.ReferenceEvaluator`` on the forward graph alone (the reference evaluator has no
Gradient, and onnxruntime's inference build has none either). Each rule is checked on shapes
that broadcast where the operator broadcasts; points are kept away from kinks (Relu, Abs at 0)
and from the domain edges (Log, Sqrt, Div).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxjit
from onnxjit.errors import UnsupportedOperatorError
from onnxjit.passes.gradient import expand_gradients

TRAINING = "ai.onnx.preview.training"
RNG = np.random.default_rng(1234)


def _vi(name: str, arr: np.ndarray, with_shape: bool = True) -> onnx.ValueInfoProto:
    elem = helper.np_dtype_to_tensor_dtype(arr.dtype)
    shape = arr.shape if with_shape else [f"{name}_{i}" for i in range(arr.ndim)]
    return helper.make_tensor_value_info(name, elem, shape)


def _out_vi(name: str, inputs: dict[str, np.ndarray]) -> onnx.ValueInfoProto:
    # d_<x> has the type and shape of x; the tests' other outputs those of the first input.
    src = inputs.get(name[2:]) if name.startswith("d_") else None
    if src is None:
        src = next(v for v in inputs.values() if v.dtype.kind == "f")
    return _vi(name, src)


def _model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    opset: int,
    inits: dict[str, np.ndarray] | None = None,
    with_shape: bool = True,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [_vi(k, v, with_shape) for k, v in inputs.items()],
        [_out_vi(o, inputs) for o in outputs],
        initializer=[onnx.numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(TRAINING, 1)],
        ir_version=8,
    )


def _numeric_grad(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, np.ndarray],
    y: str,
    x: str,
    opset: int,
    inits: dict[str, np.ndarray] | None,
    eps: float = 1e-6,
) -> np.ndarray:
    ref = ReferenceEvaluator(_model(nodes, inputs, [y], opset, inits))
    base = {
        k: np.array(v, dtype=np.float64) if v.dtype.kind == "f" else v for k, v in inputs.items()
    }
    grad = np.zeros(base[x].shape, dtype=np.float64)
    flat = grad.reshape(-1)
    for i in range(base[x].size):
        plus = {k: v.copy() for k, v in base.items()}
        minus = {k: v.copy() for k, v in base.items()}
        plus[x].reshape(-1)[i] += eps
        minus[x].reshape(-1)[i] -= eps
        hi = np.sum(ref.run(None, plus)[0])
        lo = np.sum(ref.run(None, minus)[0])
        flat[i] = (hi - lo) / (2 * eps)
    return grad


def check_gradient(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, np.ndarray],
    xs: list[str],
    y: str,
    opset: int = 18,
    zs: list[str] = (),
    inits: dict[str, np.ndarray] | None = None,
    with_shape: bool = True,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> list[np.ndarray]:
    """Run forward nodes + Gradient(xs, zs, y) in onnxjit and compare with finite differences."""
    outs = [f"d_{x}" for x in xs]
    attrs: dict[str, Any] = {"xs": list(xs), "y": y}
    if zs:
        attrs["zs"] = list(zs)
    grad_node = helper.make_node(
        "Gradient", list(xs) + list(zs), outs, domain=TRAINING, name="grad", **attrs
    )
    model = _model(nodes + [grad_node], inputs, outs, opset, inits, with_shape)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    got = sess.run(None, {k: v for k, v in inputs.items()})
    for x, g in zip(xs, got, strict=True):
        source = inputs.get(x)
        want = _numeric_grad(nodes, inputs, y, x, opset, inits)
        if source is not None:
            assert g.dtype == source.dtype
        assert g.shape == want.shape
        np.testing.assert_allclose(g, want, rtol=rtol, atol=atol)
    return got


def _r(*shape: int, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return RNG.uniform(low, high, shape).astype(np.float64)


def _away_from_zero(*shape: int) -> np.ndarray:
    v = _r(*shape)
    return np.where(np.abs(v) < 0.3, 0.5, v)


def _n(op: str, ins: list[str], out: str = "y", **attrs: Any) -> onnx.NodeProto:
    return helper.make_node(op, ins, [out], **attrs)


BINARY = [
    ("Add", (3, 4), (4,)),
    ("Add", (2, 3, 4), (2, 3, 4)),
    ("Sub", (2, 3, 4), (3, 1)),
    ("Mul", (3, 1), (1, 4)),
    ("Mul", (), (2, 3)),
    ("Div", (3, 4), (4,)),
]


@pytest.mark.parametrize(("op", "sa", "sb"), BINARY)
def test_binary_broadcast(op, sa, sb):
    a = _r(*sa)
    b = _away_from_zero(*sb) + (2.0 if op == "Div" else 0.0)
    check_gradient([_n(op, ["a", "b"])], {"a": a, "b": b}, ["a", "b"], "y")


UNARY = [
    ("Neg", _r),
    ("Abs", _away_from_zero),
    ("Sqrt", lambda *s: _r(*s, low=0.5, high=3.0)),
    ("Relu", _away_from_zero),
    ("Sigmoid", _r),
    ("Tanh", _r),
    ("Exp", _r),
    ("Log", lambda *s: _r(*s, low=0.5, high=3.0)),
    ("Identity", _r),
]


@pytest.mark.parametrize(("op", "gen"), UNARY, ids=[u[0] for u in UNARY])
def test_unary(op, gen):
    check_gradient([_n(op, ["x"])], {"x": gen(2, 5)}, ["x"], "y")


def test_sum_variadic_broadcast():
    inputs = {"a": _r(2, 3), "b": _r(3), "c": _r(2, 1)}
    check_gradient([_n("Sum", ["a", "b", "c"])], inputs, ["a", "b", "c"], "y")


def test_cast_castlike():
    nodes = [
        _n("Cast", ["x"], "c", to=TensorProto.DOUBLE),
        _n("CastLike", ["c", "x"], "y"),
    ]
    check_gradient(nodes, {"x": _r(3, 2)}, ["x"], "y")


@pytest.mark.parametrize(
    ("op", "extra", "attrs"),
    [
        ("Reshape", {"s": np.array([6, -1], dtype=np.int64)}, {}),
        ("Flatten", {}, {"axis": 2}),
        ("Squeeze", {"s": np.array([1], dtype=np.int64)}, {}),
        ("Unsqueeze", {"s": np.array([0, 3], dtype=np.int64)}, {}),
        ("Expand", {"s": np.array([2, 2, 1, 4], dtype=np.int64)}, {}),
        ("Transpose", {}, {"perm": [2, 0, 1]}),
        ("Transpose", {}, {}),
    ],
)
def test_shape_ops(op, extra, attrs):
    x = _r(2, 1, 4) if op in ("Squeeze", "Expand") else _r(2, 3, 4)
    node = _n(op, ["x", *extra], **attrs)
    check_gradient([node], {"x": x}, ["x"], "y", inits=extra)


@pytest.mark.parametrize(
    ("sa", "sb"),
    [
        ((3, 4), (4, 5)),
        ((2, 3, 4), (4, 5)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((4,), (4, 5)),
        ((2, 3, 4), (4,)),
        ((4,), (4,)),
    ],
)
def test_matmul(sa, sb):
    check_gradient([_n("MatMul", ["a", "b"])], {"a": _r(*sa), "b": _r(*sb)}, ["a", "b"], "y")


def test_matmul_symbolic_dims():
    # Symbolic dimensions only: the operands' ranks still select the Einsum equations.
    check_gradient(
        [_n("MatMul", ["a", "b"])],
        {"a": _r(2, 3, 4), "b": _r(4, 2)},
        ["a", "b"],
        "y",
        with_shape=False,
    )


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (5,), (3, 5)])
def test_gemm(trans_a, trans_b, c_shape):
    a = _r(4, 3) if trans_a else _r(3, 4)
    b = _r(5, 4) if trans_b else _r(4, 5)
    inputs = {"a": a, "b": b}
    ins = ["a", "b"]
    if c_shape is not None:
        inputs["c"] = _r(*c_shape)
        ins.append("c")
    node = _n("Gemm", ins, alpha=0.7, beta=1.3, transA=trans_a, transB=trans_b)
    check_gradient([node], inputs, ins, "y", opset=13)


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", [None, [1], [0, -1]])
@pytest.mark.parametrize(("op", "opset"), [("ReduceSum", 11), ("ReduceMean", 13)])
def test_reduce_axes_attribute(op, opset, axes, keepdims):
    attrs = {"keepdims": keepdims}
    if axes is not None:
        attrs["axes"] = axes
    check_gradient([_n(op, ["x"], **attrs)], {"x": _r(2, 3, 4)}, ["x"], "y", opset=opset)


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", [None, [1], [0, -1], []])
@pytest.mark.parametrize(("op", "opset"), [("ReduceSum", 13), ("ReduceMean", 18)])
def test_reduce_axes_input(op, opset, axes, keepdims):
    inits = {} if axes is None else {"axes": np.array(axes, dtype=np.int64)}
    node = _n(op, ["x", "axes"] if axes is not None else ["x"], keepdims=keepdims)
    check_gradient([node], {"x": _r(2, 3, 4)}, ["x"], "y", opset=opset, inits=inits)


@pytest.mark.parametrize(("op", "opset"), [("ReduceSum", 13), ("ReduceMean", 18)])
def test_reduce_noop_without_axes(op, opset):
    # No axes input with noop_with_empty_axes=1: the reduction is the identity.
    node = _n(op, ["x"], keepdims=0, noop_with_empty_axes=1)
    check_gradient([node], {"x": _r(2, 3)}, ["x"], "y", opset=opset)


def test_pow():
    a = _r(3, 4, low=0.5, high=2.0)
    check_gradient([_n("Pow", ["a", "b"])], {"a": a, "b": _r(4)}, ["a", "b"], "y")


def test_pow_integer_exponent():
    inputs = {"a": _r(3, 4), "b": np.array(3, dtype=np.int64)}
    check_gradient([_n("Pow", ["a", "b"])], inputs, ["a"], "y", zs=["b"])


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [0, -1])
def test_softmax(op, axis):
    # Multiplied by a second input so that the seed is not uniform along the axis (the
    # gradient of sum(softmax) alone is zero).
    nodes = [_n(op, ["x"], "s", axis=axis), _n("Mul", ["s", "w"], "y")]
    check_gradient(nodes, {"x": _r(3, 4), "w": _r(3, 4)}, ["x"], "y", opset=13)


def test_softmax_before_13_is_refused():
    nodes = [_n("Softmax", ["x"], "y", axis=1)]
    grad = helper.make_node("Gradient", ["x"], ["d_x"], domain=TRAINING, xs=["x"], y="y")
    model = _model(nodes + [grad], {"x": _r(2, 3)}, ["d_x"], 12)
    with pytest.raises(UnsupportedOperatorError, match="opset 13"):
        onnxjit.InferenceSession(model.SerializeToString())


def test_reduce_dynamic_axes():
    # axes computed at run time (a graph input): the kept shape is found at run time.
    inputs = {"x": _r(2, 3, 4), "axes": np.array([1], dtype=np.int64)}
    node = _n("ReduceSum", ["x", "axes"], keepdims=0)
    check_gradient([node], inputs, ["x"], "y", opset=13)


def test_mlp_chain_and_reuse():
    # y = Tanh(x @ W + b) then Mul by x-dependent value: x feeds two paths (accumulation).
    nodes = [
        _n("MatMul", ["x", "w"], "h"),
        _n("Add", ["h", "b"], "z"),
        _n("Tanh", ["z"], "t"),
        _n("ReduceMean", ["t"], "m", axes=[1], keepdims=1),
        _n("Mul", ["t", "m"], "u"),
        _n("Sigmoid", ["u"], "y"),
    ]
    inputs = {"x": _r(3, 4), "w": _r(4, 5), "b": _r(5)}
    check_gradient(nodes, inputs, ["x", "w", "b"], "y", opset=13)


def test_opset_7_model():
    nodes = [_n("Mul", ["a", "b"], "c"), _n("Add", ["c", "a"], "y")]
    check_gradient(nodes, {"a": _r(2, 3), "b": _r(3)}, ["a", "b"], "y", opset=7)


def test_zs_are_not_differentiated():
    nodes = [_n("Mul", ["a", "z"], "c"), _n("Exp", ["c"], "y")]
    check_gradient(nodes, {"a": _r(2, 3), "z": _r(2, 3)}, ["a"], "y", zs=["z"])


def test_intermediate_x():
    # Gradient with respect to an intermediate H: the nodes producing H are cut.
    nodes = [_n("Exp", ["w"], "h"), _n("Mul", ["h", "h"], "y")]
    inputs = {"w": _r(3)}
    grad = helper.make_node("Gradient", ["h"], ["d_h"], domain=TRAINING, xs=["h"], y="y")
    model = _model(nodes + [grad], inputs, ["d_h"], 18)
    (got,) = onnxjit.InferenceSession(model.SerializeToString()).run(None, inputs)
    np.testing.assert_allclose(got, 2 * np.exp(inputs["w"]), rtol=1e-12)


def test_gradient_at_other_values():
    # The Gradient's inputs are not the tensors named in xs: the forward graph is evaluated
    # at the Gradient's inputs (cloned), so dY/dA is taken at a2.
    nodes = [_n("Mul", ["a", "a"], "c"), _n("Add", ["c", "b"], "y")]
    grad = helper.make_node(
        "Gradient", ["a2", "b"], ["d_a", "d_b"], domain=TRAINING, xs=["a", "b"], y="y"
    )
    inputs = {"a": _r(4), "b": _r(4), "a2": _r(4)}
    model = _model(nodes + [grad], inputs, ["y", "d_a", "d_b"], 18)
    y, da, db = onnxjit.InferenceSession(model.SerializeToString()).run(None, inputs)
    np.testing.assert_allclose(y, inputs["a"] ** 2 + inputs["b"])
    np.testing.assert_allclose(da, 2 * inputs["a2"])
    np.testing.assert_allclose(db, np.ones(4))


def test_gradient_node_before_forward_nodes():
    # A Gradient listed before the nodes producing y: the expansion is sorted topologically.
    grad = helper.make_node("Gradient", ["a"], ["d_a"], domain=TRAINING, xs=["a"], y="y")
    nodes = [grad, _n("Exp", ["a"], "y")]
    inputs = {"a": _r(3)}
    model = _model(nodes, inputs, ["d_a", "y"], 18)
    da, y = onnxjit.InferenceSession(model.SerializeToString()).run(None, inputs)
    np.testing.assert_allclose(da, np.exp(inputs["a"]))
    np.testing.assert_allclose(y, np.exp(inputs["a"]))


def test_float32_and_unrelated_x():
    # float32 gradients keep their dtype; an x that y does not depend on gets zeros.
    nodes = [_n("Mul", ["a", "a"], "y")]
    grad = helper.make_node(
        "Gradient", ["a", "b"], ["d_a", "d_b"], domain=TRAINING, xs=["a", "b"], y="y"
    )
    inputs = {"a": _r(2, 2).astype(np.float32), "b": _r(3).astype(np.float32)}
    model = _model(nodes + [grad], inputs, ["d_a", "d_b"], 18)
    da, db = onnxjit.InferenceSession(model.SerializeToString()).run(None, inputs)
    assert da.dtype == np.float32 and db.dtype == np.float32
    np.testing.assert_allclose(da, 2 * inputs["a"], rtol=1e-6)
    np.testing.assert_array_equal(db, np.zeros(3, np.float32))


def test_skipped_output():
    nodes = [_n("Mul", ["a", "b"], "y")]
    grad = helper.make_node(
        "Gradient", ["a", "b"], ["", "d_b"], domain=TRAINING, xs=["a", "b"], y="y"
    )
    inputs = {"a": _r(3), "b": _r(3)}
    model = _model(nodes + [grad], inputs, ["d_b"], 18)
    (db,) = onnxjit.InferenceSession(model.SerializeToString()).run(None, inputs)
    np.testing.assert_allclose(db, inputs["a"])


def test_unsupported_operator_is_named():
    nodes = [_n("Hardmax", ["a"], "s"), _n("Exp", ["s"], "y")]
    grad = helper.make_node("Gradient", ["a"], ["d_a"], domain=TRAINING, xs=["a"], y="y")
    model = _model(nodes + [grad], {"a": _r(3)}, ["d_a"], 18)
    with pytest.raises(UnsupportedOperatorError, match="Hardmax"):
        onnxjit.InferenceSession(model.SerializeToString())


def test_no_gradient_node_is_untouched():
    from onnxjit.model import load_model

    model = load_model(_model([_n("Exp", ["a"], "y")], {"a": _r(3)}, ["y"], 18).SerializeToString())
    before = [(n.op_type, n.inputs, n.outputs) for n in model.graph.nodes]
    expand_gradients(model)
    assert [(n.op_type, n.inputs, n.outputs) for n in model.graph.nodes] == before


@pytest.mark.parametrize(("sb", "undone"), [((2, 3), False), ((3,), True)])
def test_broadcast_undone_only_where_shapes_differ(sb, undone):
    # Declared equal shapes need no reduction; a broadcast operand does (found at run time).
    from onnxjit.model import load_model

    nodes = [_n("Add", ["a", "b"], "y")]
    grad = helper.make_node(
        "Gradient", ["a", "b"], ["d_a", "d_b"], domain=TRAINING, xs=["a", "b"], y="y"
    )
    inputs = {"a": _r(2, 3), "b": _r(*sb)}
    model = load_model(_model(nodes + [grad], inputs, ["d_a", "d_b"], 18).SerializeToString())
    expand_gradients(model)
    ops = [n.op_type for n in model.graph.nodes]
    assert ops.count("ReduceSum") == (1 if undone else 0)
    check_gradient(nodes, inputs, ["a", "b"], "y")


def _first_then_second(nodes, inputs, x, y, opset=18):
    g1 = helper.make_node("Gradient", [x], ["g1"], domain=TRAINING, xs=[x], y=y, name="g1")
    g2 = helper.make_node("Gradient", [x], ["g2"], domain=TRAINING, xs=[x], y="g1", name="g2")
    model = _model(nodes + [g1, g2], inputs, ["g1", "g2"], opset)
    model.graph.output[0].CopyFrom(_vi("g1", inputs[x]))
    model.graph.output[1].CopyFrom(_vi("g2", inputs[x]))
    return onnxjit.InferenceSession(model.SerializeToString()).run(None, inputs)


def test_second_order_polynomial():
    # y = x**3 elementwise: dy/dx = 3x**2, and the gradient of sum(3x**2) is 6x.
    nodes = [_n("Mul", ["x", "x"], "s"), _n("Mul", ["s", "x"], "y")]
    inputs = {"x": _r(2, 3)}
    g1, g2 = _first_then_second(nodes, inputs, "x", "y")
    np.testing.assert_allclose(g1, 3 * inputs["x"] ** 2, rtol=1e-12)
    np.testing.assert_allclose(g2, 6 * inputs["x"], rtol=1e-12)


def test_second_order_through_matmul_and_tanh():
    # The second gradient is checked against finite differences of sum(first gradient), the
    # first gradient being checked against finite differences by the tests above.
    nodes = [_n("MatMul", ["w", "x"], "h"), _n("Tanh", ["h"], "y")]
    inputs = {"w": _r(3, 4), "x": _r(4, 2)}
    first = helper.make_node("Gradient", ["x"], ["g1"], domain=TRAINING, xs=["x"], y="y")
    m1 = _model(nodes + [first], inputs, ["g1"], 18)
    m1.graph.output[0].CopyFrom(_vi("g1", inputs["x"]))
    s1 = onnxjit.InferenceSession(m1.SerializeToString())
    eps = 1e-6
    want = np.zeros_like(inputs["x"])
    for i in range(inputs["x"].size):
        hi, lo = dict(inputs), dict(inputs)
        hi["x"] = inputs["x"].copy()
        lo["x"] = inputs["x"].copy()
        hi["x"].reshape(-1)[i] += eps
        lo["x"].reshape(-1)[i] -= eps
        d = np.sum(s1.run(None, hi)[0]) - np.sum(s1.run(None, lo)[0])
        want.reshape(-1)[i] = d / (2 * eps)
    _, g2 = _first_then_second(nodes, inputs, "x", "y")
    np.testing.assert_allclose(g2, want, rtol=1e-5, atol=1e-6)
