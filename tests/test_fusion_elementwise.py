"""Elementwise-chain fusion: fused groups agree with the ops run one by one and with oracles.

The unfused run (``graph_optimization_level`` = basic: folding and elimination only) is the
first oracle: a fused group must give bit-identical results, since it evaluates the same
scalar helpers in the same order and rounds float16/bfloat16 intermediates where the separate
ops would store them. onnxruntime / the reference evaluator are the independent oracle.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from scipy.special import erfc

import onnxjit

OPSET = 17
FUSED = "FusedElementwise"


def _model(nodes, inputs, outputs, inits=(), opset=OPSET):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _vi(name, elem=TensorProto.FLOAT, shape=("n",)):
    """A value declaration; onnxjit's checker wants the rank of graph inputs and outputs."""
    if isinstance(shape, int):  # a rank: dim names
        shape = [f"{name}_d{i}" for i in range(shape)]
    return helper.make_tensor_value_info(name, elem, shape)


def _with_output_ranks(m, feeds):
    """Declare each graph output's rank as the reference evaluator computes it."""
    got = ReferenceEvaluator(m).run(None, feeds)
    for vi, v in zip(m.graph.output, got):
        vi.CopyFrom(
            helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, list(np.shape(v)))
        )
    return m


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


# Pattern passes that would claim some of these chains first (Gelu, LayerNorm, Softmax).
PATTERNS = ["gelu_fusion", "layernorm_fusion", "softmax_fusion", "gemm_epilogue_fusion"]


def _sessions(model, **kw):
    data = model.SerializeToString()
    kw.setdefault("disabled_optimizers", PATTERNS)
    basic = onnxjit.SessionOptions()
    basic.graph_optimization_level = onnxjit.GraphOptimizationLevel.ORT_ENABLE_BASIC
    fused = onnxjit.InferenceSession(data, **kw)
    return fused, onnxjit.InferenceSession(data, basic)


def _fused_nodes(sess):
    return [n for n in sess.graph_nodes() if n.op_type == FUSED]


def _assert_same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)  # NaN == NaN here


def _gelu_nodes(x="x", y="y"):
    return [
        helper.make_node("Div", [x, "s2"], ["a"]),
        helper.make_node("Erf", ["a"], ["b"]),
        helper.make_node("Add", ["b", "one"], ["c"]),
        helper.make_node("Mul", [x, "c"], ["d"]),
        helper.make_node("Mul", ["d", "half"], [y]),
    ]


def _gelu_consts(dtype=np.float32):
    return [
        _const("s2", np.array(1.4142135, dtype)),
        _const("one", np.array(1.0, dtype)),
        _const("half", np.array(0.5, dtype)),
    ]


@pytest.mark.parametrize(
    "dtype,elem",
    [(np.float32, TensorProto.FLOAT), (np.float64, TensorProto.DOUBLE)],
)
@pytest.mark.parametrize("shape", [(7,), (3, 1000), (2, 0, 4), ()])
def test_gelu_chain_is_one_kernel(dtype, elem, shape):
    rank = len(shape)
    m = _model(_gelu_nodes(), [_vi("x", elem, rank)], [_vi("y", elem, rank)], _gelu_consts(dtype))
    fused, basic = _sessions(m)
    nodes = fused.graph_nodes()
    assert [n.op_type for n in nodes] == [FUSED]
    assert len(nodes[0].members) == 5
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    got = fused.run(None, {"x": x})[0]
    _assert_same(got, basic.run(None, {"x": x})[0])
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-12, atol=1e-7)


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize(
    "dtype,elem",
    [(np.float32, TensorProto.FLOAT), (np.float64, TensorProto.DOUBLE)],
)
def test_internal_gelu_joins_a_group(with_bias, dtype, elem):
    # gelu_fusion writes onnxjit's Gelu (taking the bias Add before it as its second input);
    # elementwise fusion then takes that node into the group of the Mul after it
    rng = np.random.default_rng(4)
    nodes, x = [], "x"
    consts = [
        _const("s2", np.sqrt(np.array(2.0, dtype))),  # exact, as the fused Gelu computes
        _const("one", np.array(1.0, dtype)),
        _const("half", np.array(0.5, dtype)),
        _const("gain", rng.standard_normal(8).astype(dtype)),
    ]
    if with_bias:
        nodes.append(helper.make_node("Add", ["x", "bias"], ["xb"]))
        consts.append(_const("bias", rng.standard_normal(8).astype(dtype)))
        x = "xb"
    nodes += _gelu_nodes(x, "g") + [helper.make_node("Mul", ["g", "gain"], ["y"])]
    m = _model(nodes, [_vi("x", elem, [5, 8])], [_vi("y", elem, [5, 8])], consts)
    fused, basic = _sessions(m, disabled_optimizers=[])
    groups = _fused_nodes(fused)
    assert len(groups) == 1
    # members are spelt "<domain.>Op-version name"
    assert [m.split()[0] for m in groups[0].members] == ["onnxjit.Gelu-1", "Mul-14"]
    x = rng.standard_normal((5, 8)).astype(dtype) * 3
    got = fused.run(None, {"x": x})[0]
    # oracle: float64 erfc form (the reference evaluator's float64 Erf is off by percents in
    # the tails, where 1 + erf cancels)
    v = x.astype(np.float64) + (numpy_helper.to_array(consts[-1]) if with_bias else 0.0)
    want = 0.5 * v * erfc(-v / np.sqrt(2.0)) * numpy_helper.to_array(consts[3])
    # float32: within GELU_F32_BUDGET (2 ulp + 7e-8 |x|), then one rounded multiply; float64
    # keeps the erf form, whose 1 + erf cancels to an absolute error of ~1e-16 |x|
    tol = dict(rtol=5e-7, atol=7e-7) if dtype == np.float32 else dict(rtol=1e-13, atol=2e-15)
    np.testing.assert_allclose(got, want, **tol)


@pytest.mark.parametrize("with_bias", [False, True])
def test_internal_gelu_runs_a_generated_kernel(with_bias):
    # onnxjit's Gelu, with or without a bias, is bound to one generated kernel (which streams
    # large outputs), the same kernel every run
    rng = np.random.default_rng(5)
    nodes, consts, x = [], _gelu_consts(), "x"
    if with_bias:
        nodes.append(helper.make_node("Add", ["x", "bias"], ["xb"]))
        consts.append(_const("bias", rng.standard_normal(32).astype(np.float32)))
        x = "xb"
    nodes += _gelu_nodes(x)
    m = _model(nodes, [_vi("x", shape=[6, 32])], [_vi("y", shape=[6, 32])], consts)
    sess = onnxjit.InferenceSession(m.SerializeToString())
    assert [(n.domain, n.op_type) for n in sess.graph_nodes()] == [("onnxjit", "Gelu")]
    feeds = {"x": rng.standard_normal((6, 32)).astype(np.float32) * 3}
    compiled = None
    for _ in range(3):
        got = sess.run(None, feeds)[0]
        want = ReferenceEvaluator(m).run(None, feeds)[0]
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
        if compiled is None:
            compiled = onnxjit.compile_count()
    assert onnxjit.compile_count() == compiled
    (plan,) = sess.stats()["plans"]
    (step,) = plan["steps"]
    assert not step["generic"] and step["kernel"].startswith("elementwise")


def test_intermediate_used_outside_becomes_an_output():
    nodes = _gelu_nodes() + [helper.make_node("Neg", ["b"], ["erf_neg"])]
    nodes.append(helper.make_node("MatMul", ["c", "w"], ["mm"]))
    m = _model(
        nodes,
        [_vi("x", shape=[4, 8]), _vi("w", shape=[8, 3])],
        [_vi("y", shape=2), _vi("erf_neg", shape=2), _vi("mm", shape=2), _vi("a", shape=2)],
        _gelu_consts(),
    )
    fused, basic = _sessions(m)
    groups = _fused_nodes(fused)
    assert len(groups) == 1 and len(groups[0].members) == 6  # Neg joins the chain
    rng = np.random.default_rng(1)
    feeds = {
        "x": rng.standard_normal((4, 8), np.float32),
        "w": rng.standard_normal((8, 3), np.float32),
    }
    for g, b in zip(fused.run(None, feeds), basic.run(None, feeds)):
        _assert_same(g, b)


def test_outputs_of_different_shapes_in_one_group():
    # a = bias * 2 has the bias's shape [C]; y = x + a has x's shape [N, C]; both are outputs
    nodes = [
        helper.make_node("Mul", ["bias", "two"], ["a"]),
        helper.make_node("Add", ["x", "a"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    inits = [_const("two", np.array([[2.0]], np.float32))]  # size 1 but rank 2
    m = _model(
        nodes,
        [_vi("x", shape=2), _vi("bias", shape=1)],
        [_vi("a", shape=2), _vi("y", shape=2)],
        inits,
    )
    fused, basic = _sessions(m)
    assert len(_fused_nodes(fused)) == 1
    rng = np.random.default_rng(2)
    for xs, bs in [((5, 3), (3,)), ((1, 3), (3,)), ((4, 1), (1,))]:
        feeds = {
            "x": rng.standard_normal(xs).astype(np.float32),
            "bias": rng.standard_normal(bs).astype(np.float32),
        }
        got, want = fused.run(None, feeds), basic.run(None, feeds)
        for g, w in zip(got, want):
            _assert_same(g, w)
        ref = ReferenceEvaluator(m).run(None, feeds)
        for g, r in zip(got, ref):
            assert g.shape == r.shape  # the rank-2 constant adds a leading dimension


def test_no_cycle_through_a_non_elementwise_node():
    # r = Relu(x); m = MatMul(r, w); y = Add(r, m): Relu and Add cannot share a kernel
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Sigmoid", ["r"], ["s"]),
        helper.make_node("MatMul", ["s", "w"], ["m"]),
        helper.make_node("Add", ["r", "m"], ["t"]),
        helper.make_node("Tanh", ["t"], ["y"]),
    ]
    m = _model(nodes, [_vi("x", shape=[4, 4]), _vi("w", shape=[4, 4])], [_vi("y", shape=2)])
    fused, basic = _sessions(m)
    groups = _fused_nodes(fused)
    assert sorted(len(g.members) for g in groups) == [2, 2]
    rng = np.random.default_rng(3)
    feeds = {
        "x": rng.standard_normal((4, 4), np.float32),
        "w": rng.standard_normal((4, 4), np.float32),
    }
    _assert_same(fused.run(None, feeds)[0], basic.run(None, feeds)[0])


@pytest.mark.parametrize(
    "dtype,elem",
    [(np.float16, TensorProto.FLOAT16), ("bfloat16", TensorProto.BFLOAT16)],
)
def test_narrow_float_chain_rounds_like_separate_ops(dtype, elem):
    import ml_dtypes

    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["a"]),
        helper.make_node("Exp", ["a"], ["b"]),
        helper.make_node("Sub", ["b", "x"], ["c"]),
        helper.make_node("Sigmoid", ["c"], ["y"]),
    ]
    m = _model(nodes, [_vi("x", elem)], [_vi("y", elem)])
    fused, basic = _sessions(m)
    assert len(_fused_nodes(fused)) == 1
    x = (np.random.default_rng(4).standard_normal(5000) * 2).astype(dt)
    _assert_same(fused.run(None, {"x": x})[0], basic.run(None, {"x": x})[0])


def test_casts_and_integer_ops_fuse():
    nodes = [
        helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["f", "x"], ["p"]),
        helper.make_node("Greater", ["p", "zero"], ["g"]),
        helper.make_node("Where", ["g", "p", "x"], ["w"]),
        helper.make_node("Cast", ["w"], ["y"], to=TensorProto.FLOAT16),
        helper.make_node("Mod", ["i", "three"], ["r"]),
        helper.make_node("Add", ["r", "i"], ["z"]),
    ]
    inits = [_const("zero", np.array(0, np.float32)), _const("three", np.array(3, np.int64))]
    m = _model(
        nodes,
        [_vi("i", TensorProto.INT64, 2), _vi("x", shape=2)],
        [_vi("y", TensorProto.FLOAT16, 2), _vi("z", TensorProto.INT64, 2)],
        inits,
    )
    fused, basic = _sessions(m)
    assert len(_fused_nodes(fused)) >= 1
    rng = np.random.default_rng(5)
    feeds = {"i": rng.integers(-9, 9, (3, 5)), "x": rng.standard_normal((3, 5)).astype(np.float32)}
    got = fused.run(None, feeds)
    for g, b in zip(got, basic.run(None, feeds)):
        _assert_same(g, b)
    for g, r in zip(got, ReferenceEvaluator(m).run(None, feeds)):
        np.testing.assert_allclose(g.astype(np.float64), r.astype(np.float64), rtol=1e-3)


def test_mismatched_feed_falls_back_to_the_ops_errors():
    nodes = [helper.make_node("Add", ["x", "y"], ["a"]), helper.make_node("Relu", ["a"], ["z"])]
    m = _model(nodes, [_vi("x", shape=1), _vi("y", shape=1)], [_vi("z", shape=1)])
    fused, _ = _sessions(m)
    with pytest.raises(onnxjit.errors.OnnxJitError, match="broadcast"):
        fused.run(None, {"x": np.zeros((3,), np.float32), "y": np.zeros((4,), np.float32)})
    # the session is still usable
    x = np.ones((3,), np.float32)
    np.testing.assert_array_equal(fused.run(None, {"x": x, "y": x})[0], x + x)


def test_switched_off_by_name_and_by_level():
    m = _model(_gelu_nodes(), [_vi("x")], [_vi("y")], _gelu_consts())
    off = onnxjit.InferenceSession(
        m.SerializeToString(), disabled_optimizers=["elementwise_fusion"]
    )
    assert not _fused_nodes(off)
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    assert not _fused_nodes(onnxjit.InferenceSession(m.SerializeToString(), so))
    so = onnxjit.SessionOptions()
    so.add_session_config_entry("onnxjit.disabled_optimizers", "elementwise_fusion")
    assert not _fused_nodes(onnxjit.InferenceSession(m.SerializeToString(), so))
    with pytest.raises(ValueError, match="unknown optimizer"):
        onnxjit.InferenceSession(m.SerializeToString(), disabled_optimizers=["nope"])


def test_identical_groups_share_one_kernel():
    from onnxjit.codegen.elementwise import kernel_cache

    def chain(x, y, tag):
        return [
            helper.make_node("Mul", [x, "half"], [f"{tag}a"]),
            helper.make_node("Tanh", [f"{tag}a"], [f"{tag}b"]),
            helper.make_node("Add", [f"{tag}b", "one"], [y]),
        ]

    # two identical chains separated by a MatMul, so they are two groups
    nodes = chain("x", "y1", "p") + [helper.make_node("MatMul", ["y1", "w"], ["m"])]
    nodes += chain("m", "y2", "q")
    m = _model(
        nodes,
        [_vi("x", shape=[3, 3]), _vi("w", shape=[3, 3])],
        [_vi("y2", shape=2)],
        _gelu_consts(),
    )
    fused, basic = _sessions(m)
    assert len(_fused_nodes(fused)) == 2
    rng = np.random.default_rng(7)
    feeds = {
        "x": rng.standard_normal((3, 3), np.float32),
        "w": rng.standard_normal((3, 3), np.float32),
    }
    want = basic.run(None, feeds)[0]  # the unfused run builds its own one-op kernels first
    before = len(kernel_cache())
    _assert_same(fused.run(None, feeds)[0], want)
    assert len(kernel_cache()) - before <= 1  # one kernel serves both groups


# ---------------------------------------------------------------------------------------------
# Random elementwise DAGs: fused == unfused (bitwise) == reference (tolerance)
# ---------------------------------------------------------------------------------------------

_UNARY_F = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Erf", "Ceil", "Floor"]
_BINARY = ["Add", "Sub", "Mul", "Max", "Min"]
_ELEM = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(np.int32): TensorProto.INT32,
}


def _random_case(seed: int):
    rng = np.random.default_rng(seed)
    dtype = list(_ELEM)[seed % len(_ELEM)]
    is_int = dtype.kind == "i"
    rank = int(rng.integers(0, 4))
    base = [int(rng.integers(1, 5)) for _ in range(rank)]
    n_in = int(rng.integers(1, 4))
    shapes = []
    for _ in range(n_in):
        s = [d if rng.random() < 0.7 else 1 for d in base]
        drop = int(rng.integers(0, len(s) + 1)) if rng.random() < 0.3 else 0
        shapes.append(s[drop:])
    names = [f"x{k}" for k in range(n_in)]
    nodes = []
    values = list(names)
    inits = [_const("k", np.array(1.5 if not is_int else 3, dtype))]
    for t in range(int(rng.integers(2, 12))):
        out = f"t{t}"
        r = rng.random()
        if r < 0.35 and not is_int:
            op = _UNARY_F[int(rng.integers(len(_UNARY_F)))]
            nodes.append(helper.make_node(op, [values[int(rng.integers(len(values)))]], [out]))
        elif r < 0.45:
            a = values[int(rng.integers(len(values)))]
            b = values[int(rng.integers(len(values)))]
            nodes.append(helper.make_node("Greater", [a, "k"], [out + "c"]))
            nodes.append(helper.make_node("Where", [out + "c", a, b], [out]))
        elif r < 0.55:
            a = values[int(rng.integers(len(values)))]
            nodes.append(helper.make_node("Mul", [a, "k"], [out]))
        else:
            op = _BINARY[int(rng.integers(len(_BINARY)))]
            a = values[int(rng.integers(len(values)))]
            b = values[int(rng.integers(len(values)))]
            nodes.append(helper.make_node(op, [a, b], [out]))
        values.append(out)
    # the last value, plus a random earlier one, are outputs
    outs = [values[-1]]
    extra = values[int(rng.integers(n_in, len(values)))]
    if extra not in outs:
        outs.append(extra)
    elem = _ELEM[dtype]
    m = _model(
        nodes,
        [_vi(n, elem, len(s)) for n, s in zip(names, shapes)],
        [_vi(o, elem) for o in outs],
        inits,
    )
    if is_int:
        feeds = {n: rng.integers(-20, 20, s).astype(dtype) for n, s in zip(names, shapes)}
    else:
        feeds = {n: (rng.standard_normal(s) * 3).astype(dtype) for n, s in zip(names, shapes)}
    return _with_output_ranks(m, feeds), feeds


@settings(
    derandomize=True,
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(seed=st.integers(0, 10**6))
def test_random_dags_fused_equals_unfused_equals_reference(seed):
    m, feeds = _random_case(seed)
    fused, basic = _sessions(m)
    got = fused.run(None, feeds)
    for g, b in zip(got, basic.run(None, feeds)):
        _assert_same(g, b)
    want = ReferenceEvaluator(m).run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == np.asarray(w).shape
        tol = 2e-2 if g.dtype == np.float16 else 1e-5
        np.testing.assert_allclose(
            g.astype(np.float64), np.asarray(w).astype(np.float64), rtol=tol, atol=tol
        )


def test_against_onnxruntime_on_a_mixed_chain():
    nodes = [
        helper.make_node("Add", ["x", "bias"], ["a"]),
        helper.make_node("Sigmoid", ["a"], ["s"]),
        helper.make_node("Mul", ["a", "s"], ["silu"]),
        helper.make_node("Clip", ["silu", "lo", "hi"], ["c"]),
        helper.make_node("Sub", ["c", "x"], ["y"]),
    ]
    inits = [
        _const("bias", np.linspace(-1, 1, 16, dtype=np.float32)),
        _const("lo", np.array(-0.5, np.float32)),
        _const("hi", np.array(2.0, np.float32)),
    ]
    m = _model(nodes, [_vi("x", shape=["n", 16])], [_vi("y", shape=2)], inits)
    fused, _ = _sessions(m)
    assert [n.op_type for n in fused.graph_nodes()] == [FUSED]
    x = np.random.default_rng(6).standard_normal((300, 16)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(fused.run(None, {"x": x})[0], want, rtol=1e-6, atol=1e-6)


def test_pass_statistics_count_the_groups():
    m = _model(_gelu_nodes(), [_vi("x")], [_vi("y")], _gelu_consts())
    sess = onnxjit.InferenceSession(m.SerializeToString(), disabled_optimizers=PATTERNS)
    assert sess.stats()["passes"]["elementwise_fusion"]["rewrites"] == 1


def test_optimized_model_file_lists_the_fused_members(tmp_path):
    import onnx

    m = _model(_gelu_nodes(), [_vi("x")], [_vi("y")], _gelu_consts())
    so = onnxjit.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    onnxjit.InferenceSession(m.SerializeToString(), so, disabled_optimizers=PATTERNS)
    written = onnx.load(so.optimized_model_filepath)
    (node,) = written.graph.node
    assert (node.domain, node.op_type) == ("onnxjit", FUSED)
    members = next(a for a in node.attribute if a.name == "members")
    assert [s.decode().split("-")[0] for s in members.strings] == [
        "Div",
        "Erf",
        "Add",
        "Mul",
        "Mul",
    ]


# ---------------------------------------------------------------------------------------------
# In-place: a fused group writes into an input buffer nothing else refers to
# ---------------------------------------------------------------------------------------------


def _inplace_model(case: str):
    """Softmax -> m0; a fused group Add(m0, w) -> Relu -> Sigmoid -> y, plus what ``case`` adds
    to keep m0 (or another input) alive."""
    nodes = [
        helper.make_node("Softmax", ["x"], ["m0"]),
        helper.make_node("Add", ["m0", "w"], ["m"]),
        helper.make_node("Relu", ["m"], ["r"]),
        helper.make_node("Sigmoid", ["r"], ["y"]),
    ]
    outs = [_vi("y", shape=[4, 4])]
    inits = []
    if case == "m0_is_output":
        outs.append(_vi("m0", shape=[4, 4]))
    elif case == "m0_read_later":
        nodes.append(helper.make_node("MatMul", ["y", "m0"], ["z"]))
        outs.append(_vi("z", shape=[4, 4]))
    elif case == "view_of_m0_read_later":
        nodes.insert(1, helper.make_node("Reshape", ["m0", "flat"], ["v"]))
        nodes.append(helper.make_node("ReduceSum", ["v"], ["z"], keepdims=0))
        outs.append(_vi("z", shape=[]))
        inits.append(_const("flat", np.array([16], np.int64)))
    elif case == "constant_operand":
        nodes[0] = helper.make_node("Identity", ["x"], ["m0"])  # m0 is the caller's array
    return _model(nodes, [_vi("x", shape=[4, 4]), _vi("w", shape=[4, 4])], outs, inits)


def _fused_steps(sess):
    """The fused groups' steps in the most recent plan (``stats()["plans"]``)."""
    steps = sess.stats()["plans"][-1]["steps"]
    return [s for s in steps if s["op_type"] == "FusedElementwise"]


@pytest.mark.parametrize(
    "case,donated",
    [
        ("dead", True),
        ("m0_is_output", False),
        ("m0_read_later", False),
        ("view_of_m0_read_later", False),
        ("constant_operand", False),
    ],
)
def test_fused_group_writes_in_place_only_into_unshared_buffers(case, donated):
    m = _inplace_model(case)
    fused, basic = _sessions(m)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 4)).astype(np.float32)
    w = rng.standard_normal((4, 4)).astype(np.float32)
    x_before, w_before = x.copy(), w.copy()
    kept = []
    for _ in range(3):  # later runs must see untouched inputs, weights and earlier outputs
        got = fused.run(None, {"x": x, "w": w})
        for g, b in zip(got, basic.run(None, {"x": x, "w": w})):
            _assert_same(g, b)
        kept.append([(g, g.copy()) for g in got])
    np.testing.assert_array_equal(x, x_before)
    np.testing.assert_array_equal(w, w_before)
    for outs in kept:
        for g, snapshot in outs:
            np.testing.assert_array_equal(g, snapshot)
    (step,) = _fused_steps(fused)
    assert not step["generic"] and step["in_place"] == donated


def test_groups_of_every_size_write_in_place_and_new_sizes_compile_nothing():
    # whether a group writes over its dying input is decided once per plan, whatever the
    # kernel (serial or on the pool); after a small and a large size, new sizes compile
    # nothing (each size takes one of those kernels)
    from onnxjit.kernels import _jit

    nodes = [
        helper.make_node("Softmax", ["x"], ["m0"]),
        helper.make_node("Add", ["m0", "w"], ["m"]),
        helper.make_node("Relu", ["m"], ["y"]),
    ]
    shape = ["n", 128]
    w = _const("w", np.random.default_rng(3).standard_normal(128).astype(np.float32))
    m = _model(nodes, [_vi("x", shape=shape)], [_vi("y", shape=shape)], [w])
    fused, basic = _sessions(m)
    rng = np.random.default_rng(9)

    def run(rows: int) -> bool:
        feeds = {"x": rng.standard_normal((rows, 128)).astype(np.float32)}
        for _ in range(3):
            _assert_same(fused.run(None, feeds)[0], basic.run(None, feeds)[0])
        (step,) = _fused_steps(fused)
        return step["in_place"]

    small, large = 4, 2 * _jit.PARALLEL_THRESHOLD // 128
    assert run(small) and run(large)
    before = onnxjit.compile_count()
    assert all(run(n) for n in (2, 7, large + 3, 3 * large))
    assert onnxjit.compile_count() == before


@pytest.mark.parametrize("layout", ["strided_slice", "read_only", "fortran"])
def test_fused_group_reads_inputs_that_are_not_contiguous_writable_arrays(layout):
    """The kernel takes C-contiguous writable arrays; a strided view (from Slice), a read-only
    feed and a Fortran-order feed are copied first and give the same numbers as numpy."""
    nodes = [
        helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["xs"]),
        helper.make_node("Mul", ["xs", "w"], ["a"]),
        helper.make_node("Tanh", ["a"], ["b"]),
        helper.make_node("Add", ["b", "w"], ["y"]),
    ]
    inits = [
        _const("starts", np.array([0], np.int64)),
        _const("ends", np.array([1 << 30], np.int64)),
        _const("axes", np.array([1], np.int64)),
        _const("steps", np.array([2 if layout == "strided_slice" else 1], np.int64)),
    ]
    m = _model(nodes, [_vi("x", shape=2), _vi("w", shape=2)], [_vi("y", shape=2)], inits)
    fused, _ = _sessions(m)
    assert len(_fused_nodes(fused)) == 1
    rng = np.random.default_rng(31)
    x = rng.standard_normal((5, 12)).astype(np.float32)
    cols = 6 if layout == "strided_slice" else 12
    w = rng.standard_normal((5, cols)).astype(np.float32)
    if layout == "read_only":
        w.flags.writeable = False
    elif layout == "fortran":
        w = np.asfortranarray(w)
    for _ in range(2):  # the second run takes the cached plan
        (got,) = fused.run(None, {"x": x, "w": w})
        xs = x[:, ::2] if layout == "strided_slice" else x
        np.testing.assert_allclose(got, np.tanh(xs * w) + w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n_out", [1, 2, 3])
def test_fused_group_of_several_inputs_and_outputs_is_one_kernel(n_out):
    """A group of three inputs (one broadcast) and one to three graph outputs is bound to one
    generated kernel and gives, run after run and while shapes change, what the unfused ops
    give (within an ulp or two: the fused kernel contracts the multiply and add); a
    non-contiguous feed runs the same plan."""
    nodes = [
        helper.make_node("Mul", ["x", "y"], ["a"]),
        helper.make_node("Add", ["a", "z"], ["b"]),
        helper.make_node("Tanh", ["b"], ["o0"]),
        helper.make_node("Sub", ["a", "z"], ["o1"]),
        helper.make_node("Sigmoid", ["b"], ["o2"]),
    ]
    outs = [_vi(f"o{j}", shape=2) for j in range(n_out)]
    inputs = [_vi("x", shape=2), _vi("y", shape=2), _vi("z", shape=[1, "w"])]
    fused, basic = _sessions(_model(nodes, inputs, outs))
    rng = np.random.default_rng(11)

    def same(got, want):
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)

    def feeds(rows, cols):
        return {
            "x": rng.standard_normal((rows, cols)).astype(np.float32),
            "y": rng.standard_normal((rows, cols)).astype(np.float32),
            "z": rng.standard_normal((1, cols)).astype(np.float32),
        }

    steady = feeds(3, 5)
    for f in (steady, steady, steady, feeds(4, 5), feeds(3, 7), steady):
        same(fused.run(None, f), basic.run(None, f))
    for plan in fused.stats()["plans"]:
        (step,) = [s for s in plan["steps"] if s["op_type"] == FUSED]
        assert not step["generic"] and step["kernel"].startswith("elementwise")
    strided = {k: v for k, v in steady.items()}
    strided["x"] = np.repeat(steady["x"], 2, axis=1)[:, ::2]  # same values, not contiguous
    same(fused.run(None, strided), basic.run(None, steady))
