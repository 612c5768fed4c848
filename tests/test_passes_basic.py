"""Basic passes: no-op elimination, CSE, static-shape folding and cached shape subgraphs.

Every model runs with the passes on and off and is compared with onnxruntime (the oracle);
each test also asserts that the rewrite happened (or, for a near miss, did not).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from oracle import ort_outputs

import onnxjit

DTYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}
INT64_MAX = 2**63 - 1


def _model(nodes, inputs, outputs, inits=(), opset=17, value_info=()) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "basic", inputs, outputs, initializer=list(inits), value_info=list(value_info)
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _out(name: str, et: int, rank: int) -> onnx.ValueInfoProto:
    """A graph output of known rank whose dims are free (the checker wants a rank)."""
    return helper.make_tensor_value_info(name, et, [f"{name}_{i}" for i in range(rank)])


def _session(model, level=1, disabled=None) -> onnxjit.InferenceSession:
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel(level)
    return onnxjit.InferenceSession(model.SerializeToString(), so, disabled_optimizers=disabled)


def _names(sess) -> list[str]:
    return [n.name for n in sess.graph_nodes()]


def _ops(sess) -> list[str]:
    return [n.op_type for n in sess.graph_nodes()]


def _check(model, feeds, level=1, disabled=None, rtol=1e-6, atol=0.0):
    """Run at ``level`` and at 0, compare both with onnxruntime; return the optimised session."""
    want = ort_outputs(model, feeds)
    sess = _session(model, level, disabled)
    for lvl, s in ((level, sess), (0, _session(model, 0))):
        got = s.run(None, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, f"level {lvl}"
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"level {lvl}")
    return sess


# -- no-op elimination ---------------------------------------------------------------------


def _c(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def _noop_cases(dt):
    """(id, nodes before the final Relu, initializers, input dims, opset, removed?)."""
    et = DTYPES[dt]
    other = TensorProto.DOUBLE if et == TensorProto.FLOAT else TensorProto.FLOAT
    n = helper.make_node
    S = [2, 3, 4]
    cases = [
        ("cast", [n("Cast", ["x"], ["a"], to=et, name="noop")], [], S, 17, True),
        ("cast_other_type", [n("Cast", ["x"], ["a0"], to=other, name="noop"),
                             n("Cast", ["a0"], ["a"], to=et)], [], S, 17, False),
        ("castlike", [n("CastLike", ["x", "like"], ["a"], name="noop")],
         [_c("like", [1], dt)], S, 17, True),
        ("castlike_other", [n("CastLike", ["x", "like"], ["a0"], name="noop"),
                            n("CastLike", ["a0", "back"], ["a"])],
         [_c("like", [1], np.float16), _c("back", [1], dt)], S, 17, False),
        ("reshape_same", [n("Reshape", ["x", "s"], ["a"], name="noop")],
         [_c("s", S)], S, 17, True),
        ("reshape_zero_minus_one", [n("Reshape", ["x", "s"], ["a"], name="noop")],
         [_c("s", [0, 3, -1])], S, 17, True),
        ("reshape_other", [n("Reshape", ["x", "s"], ["a0"], name="noop"),
                           n("Reshape", ["a0", "s2"], ["a"])],
         [_c("s", [3, 2, 4]), _c("s2", S)], S, 17, False),
        ("reshape_dynamic_zero", [n("Reshape", ["x", "s"], ["a"], name="noop")],
         [_c("s", [0, 3, 4])], ["n", 3, 4], 17, True),
        # -1 next to a copied dim that may be 0 could mean anything: not provable.
        ("reshape_dynamic_zero_minus_one", [n("Reshape", ["x", "s"], ["a"], name="noop")],
         [_c("s", [0, 3, -1])], ["n", 3, 4], 17, False),
        ("reshape_dynamic_fixed", [n("Reshape", ["x", "s"], ["a"], name="noop")],
         [_c("s", S)], ["n", 3, 4], 17, False),
        ("reshape_allowzero", [n("Reshape", ["x", "s"], ["a"], allowzero=1, name="noop")],
         [_c("s", [0, 3, 4])], [0, 3, 4], 17, True),
        ("transpose_identity", [n("Transpose", ["x"], ["a"], perm=[0, 1, 2], name="noop")],
         [], S, 17, True),
        ("transpose_swap", [n("Transpose", ["x"], ["a"], perm=[1, 0, 2], name="noop")],
         [], S, 17, False),
        ("squeeze_none", [n("Squeeze", ["x"], ["a"], name="noop")], [], S, 17, True),
        ("squeeze_none_11", [n("Squeeze", ["x"], ["a"], name="noop")], [], S, 11, True),
        ("squeeze_has_one", [n("Squeeze", ["x"], ["a"], name="noop")], [], [2, 1, 4], 17, False),
        ("squeeze_dynamic", [n("Squeeze", ["x"], ["a"], name="noop")], [], ["n", 3, 4], 17,
         False),
        ("expand_ones", [n("Expand", ["x", "s"], ["a"], name="noop")],
         [_c("s", [1, 1])], S, 17, True),
        ("expand_grows_rank", [n("Expand", ["x", "s"], ["a"], name="noop")],
         [_c("s", [1, 1, 1, 1])], S, 17, False),
        ("slice_all", [n("Slice", ["x", "st", "en", "ax"], ["a"], name="noop")],
         [_c("st", [0, 0]), _c("en", [INT64_MAX, 3]), _c("ax", [0, -2])], S, 17, True),
        ("slice_part", [n("Slice", ["x", "st", "en", "ax"], ["a"], name="noop")],
         [_c("st", [0, 0]), _c("en", [INT64_MAX, 2]), _c("ax", [0, 1])], S, 17, False),
        ("slice_reverse", [n("Slice", ["x", "st", "en", "ax", "sp"], ["a"], name="noop")],
         [_c("st", [-1]), _c("en", [-INT64_MAX]), _c("ax", [0]), _c("sp", [-1])], S, 17,
         False),
        ("slice_1", [n("Slice", ["x"], ["a"], starts=[0], ends=[INT64_MAX], name="noop")],
         [], S, 9, True),
        ("pad_zero", [n("Pad", ["x", "p"], ["a"], name="noop")],
         [_c("p", [0] * 6)], S, 17, True),
        ("pad_some", [n("Pad", ["x", "p"], ["a"], name="noop")],
         [_c("p", [0, 1, 0, 0, 0, 0])], S, 17, False),
        ("pad_2", [n("Pad", ["x"], ["a"], pads=[0] * 6, name="noop")], [], S, 9, True),
        ("concat_one", [n("Concat", ["x"], ["a"], axis=1, name="noop")], [], S, 17, True),
        ("mul_one", [n("Mul", ["x", "one"], ["a"], name="noop")],
         [_c("one", 1, dt)], S, 17, True),
        ("one_mul", [n("Mul", ["one", "x"], ["a"], name="noop")],
         [_c("one", [[1]], dt)], S, 17, True),
        ("mul_ones_grow", [n("Mul", ["x", "one"], ["a"], name="noop")],
         [_c("one", np.ones((1, 1, 1, 1)), dt)], S, 17, False),
        ("mul_two", [n("Mul", ["x", "two"], ["a"], name="noop")],
         [_c("two", 2, dt)], S, 17, False),
        ("div_one", [n("Div", ["x", "one"], ["a"], name="noop")],
         [_c("one", [1], dt)], S, 17, True),
        ("add_neg_zero", [n("Add", ["x", "z"], ["a"], name="noop")],
         [_c("z", -0.0, dt)], S, 17, True),
        # x + (+0.0) turns -0.0 into +0.0: not an identity.
        ("add_pos_zero", [n("Add", ["x", "z"], ["a"], name="noop")],
         [_c("z", 0.0, dt)], S, 17, False),
        ("sub_zero", [n("Sub", ["x", "z"], ["a"], name="noop")],
         [_c("z", 0.0, dt)], S, 17, True),
        ("zero_sub", [n("Sub", ["z", "x"], ["a"], name="noop")],
         [_c("z", 0.0, dt)], S, 17, False),
    ]  # fmt: skip
    return cases


_NOOP_IDS = [c[0] for c in _noop_cases(np.float32)]


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", _NOOP_IDS)
def test_noop_elimination(case, dt):
    name, nodes, inits, dims, opset, removed = next(c for c in _noop_cases(dt) if c[0] == case)
    et = DTYPES[dt]
    nodes = [*nodes, helper.make_node("Relu", ["a"], ["y"])]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", et, dims)],
        [_out("y", et, 3)],
        inits,
        opset,
    )
    shape = [2 if isinstance(d, str) else d for d in dims]
    x = np.random.default_rng(0).standard_normal(shape).astype(dt)
    x.reshape(-1)[:1] = -0.0
    sess = _check(model, {"x": x})
    assert ("noop" not in _names(sess)) == removed
    if removed:
        assert sess.stats()["passes"]["noop_elimination"]["rewrites"] >= 1
        off = _session(model, 1, disabled=["noop_elimination"])
        assert "noop" in _names(off)


def test_noop_on_integers():
    model = _model(
        [
            helper.make_node("Add", ["x", "z"], ["a"], name="noop"),
            helper.make_node("Neg", ["a"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.INT32, [3])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [3])],
        [_c("z", [0], np.int32)],
    )
    sess = _check(model, {"x": np.array([1, -2, 3], np.int32)})
    assert "noop" not in _names(sess)


def test_noop_producing_a_graph_output_is_kept():
    model = _model(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT, name="noop")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    x = np.array([1.0, 2.0], np.float32)
    sess = _check(model, {"x": x})
    assert "noop" in _names(sess)
    out = sess.run(None, {"x": x})[0]
    out[:] = 7
    assert x[0] == 1.0  # the output is not the caller's feed


def test_noop_read_inside_a_subgraph_is_renamed():
    then = helper.make_graph(
        [helper.make_node("Neg", ["a"], ["t"])],
        "then",
        [],
        [_out("t", TensorProto.FLOAT, 2)],
    )
    other = helper.make_graph(
        [helper.make_node("Abs", ["a"], ["e"])],
        "else",
        [],
        [_out("e", TensorProto.FLOAT, 2)],
    )
    model = _model(
        [
            helper.make_node("Transpose", ["x"], ["a"], perm=[0, 1], name="noop"),
            helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
        ],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [_out("y", TensorProto.FLOAT, 2)],
    )
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    for c in (True, False):
        sess = _check(model, {"x": x, "c": np.array(c)})
        assert "noop" not in _names(sess)


# -- common-subexpression elimination ------------------------------------------------------


def _xy(dt=np.float32, dims=(2, 3)):
    et = DTYPES[dt]
    return [helper.make_tensor_value_info("x", et, list(dims))], et


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_cse_merges_identical_chains(dt):
    inputs, et = _xy(dt)
    n = helper.make_node
    model = _model(
        [
            n("Relu", ["x"], ["r1"], name="r1"),
            n("Relu", ["x"], ["r2"], name="r2"),
            n("Exp", ["r1"], ["e1"], name="e1"),
            n("Exp", ["r2"], ["e2"], name="e2"),
            n("Add", ["e1", "e2"], ["y"]),
        ],
        inputs,
        [_out("y", et, 2)],
    )
    x = np.random.default_rng(2).standard_normal((2, 3)).astype(dt)
    sess = _check(model, {"x": x})
    assert _names(sess).count("r2") == 0 and _names(sess).count("e2") == 0
    assert sess.stats()["passes"]["common_subexpression_elimination"]["rewrites"] == 2
    off = _session(model, 1, disabled=["common_subexpression_elimination"])
    assert "r2" in _names(off) and "e2" in _names(off)


def test_cse_compares_attributes_and_merges_duplicate_constants():
    inputs, et = _xy()
    n = helper.make_node
    inits = [
        _c("c1", [1.5, 2.0, 3.0], np.float32),
        _c("c2", [1.5, 2.0, 3.0], np.float32),  # same bytes as c1
        _c("c3", [1.5, 2.0, 4.0], np.float32),
        _c("z1", 0.0, np.float32),
        _c("z2", -0.0, np.float32),  # equal to 0.0 but not the same constant
    ]
    model = _model(
        [
            n("LeakyRelu", ["x"], ["l1"], alpha=0.1, name="l1"),
            n("LeakyRelu", ["x"], ["l2"], alpha=0.2, name="l2"),
            n("Mul", ["x", "c1"], ["m1"], name="m1"),
            n("Mul", ["x", "c2"], ["m2"], name="m2"),
            n("Mul", ["x", "c3"], ["m3"], name="m3"),
            n("Sub", ["x", "z1"], ["s1"], name="s1"),
            n("Sub", ["x", "z2"], ["s2"], name="s2"),
            n("Sum", ["l1", "l2", "m1", "m2", "m3", "s1", "s2"], ["y"]),
        ],
        inputs,
        [_out("y", et, 2)],
        inits,
    )
    x = np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)
    sess = _check(model, {"x": x}, disabled=["noop_elimination"], rtol=1e-5)
    names = _names(sess)
    assert "m2" not in names
    assert {"l1", "l2", "m1", "m3", "s1", "s2"} <= set(names)


def test_cse_compares_tensor_attributes_and_renames_subgraph_reads():
    n = helper.make_node

    def fill(v):
        return numpy_helper.from_array(np.array([v], np.float32))

    then = helper.make_graph(
        [n("Neg", ["f3"], ["t"])], "then", [], [_out("t", TensorProto.FLOAT, 2)]
    )
    other = helper.make_graph(
        [n("Abs", ["f1"], ["e"])], "else", [], [_out("e", TensorProto.FLOAT, 2)]
    )
    model = _model(
        [
            n("Shape", ["x"], ["s"]),
            n("ConstantOfShape", ["s"], ["f1"], value=fill(1.0), name="f1"),
            n("ConstantOfShape", ["s"], ["f2"], value=fill(2.0), name="f2"),
            n("ConstantOfShape", ["s"], ["f3"], value=fill(1.0), name="f3"),
            n("If", ["c"], ["i"], then_branch=then, else_branch=other),
            n("Sum", ["x", "f1", "f2", "f3", "i"], ["y"]),
        ],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [_out("y", TensorProto.FLOAT, 2)],
    )
    x = np.random.default_rng(10).standard_normal((2, 3)).astype(np.float32)
    for c in (True, False):
        sess = _check(model, {"x": x, "c": np.array(c)})
        names = _names(sess)
        assert "f1" in names and "f2" in names and "f3" not in names


def test_cse_keeps_random_ops_and_graph_outputs():
    inputs, et = _xy()
    n = helper.make_node
    model = _model(
        [
            n("RandomUniformLike", ["x"], ["u1"], name="u1"),
            n("RandomUniformLike", ["x"], ["u2"], name="u2"),
            n("Sub", ["u1", "u2"], ["d"]),
            n("Relu", ["x"], ["y1"], name="y1"),
            n("Relu", ["x"], ["y2"], name="y2"),
        ],
        inputs,
        [
            _out("d", et, 2),
            _out("y1", et, 2),
            _out("y2", et, 2),
        ],
    )
    sess = _session(model)
    assert {"u1", "u2", "y1", "y2"} <= set(_names(sess))
    x = np.random.default_rng(4).standard_normal((2, 3)).astype(np.float32)
    d, y1, y2 = sess.run(None, {"x": x})
    assert np.any(d != 0)
    np.testing.assert_array_equal(y1, np.maximum(x, 0))
    y1[:] = 5
    assert not np.shares_memory(y1, y2)


# -- static shape folding ------------------------------------------------------------------


def _reshape_chain(dims, et, opset=17):
    """x -> Shape -> Gather(0), Gather(1) -> Unsqueeze -> Concat(.., -1) -> Reshape(x)."""
    n = helper.make_node
    inits = [_c("i0", 0), _c("i1", 1), _c("ax", [0]), _c("m1", [-1])]
    nodes = [
        n("Shape", ["x"], ["s"], name="shape"),
        n("Gather", ["s", "i0"], ["b"], name="gb"),
        n("Gather", ["s", "i1"], ["q"], name="gq"),
        n("Unsqueeze", ["b", "ax"], ["bu"]),
        n("Unsqueeze", ["q", "ax"], ["qu"]),
        n("Concat", ["bu", "qu", "m1"], ["shp"], axis=0, name="concat"),
        n("Reshape", ["x", "shp"], ["r"], name="reshape"),
        n("Relu", ["r"], ["y"]),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", et, dims)],
        [_out("y", et, 3)],
        inits,
        opset,
    )


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_static_shape_chain_folds_to_a_constant(dt):
    model = _reshape_chain([2, 3, 4, 2], DTYPES[dt])
    x = np.random.default_rng(5).standard_normal((2, 3, 4, 2)).astype(dt)
    sess = _check(model, {"x": x})
    assert _ops(sess) == ["Reshape", "Relu"]
    assert sess.stats()["passes"]["shape_folding"]["rewrites"] == 6  # Shape and 5 folded
    off = _session(model, 1, disabled=["shape_folding"])
    assert "shape" in _names(off)


def test_dynamic_shape_is_not_folded():
    model = _reshape_chain(["n", 3, 4, 2], TensorProto.FLOAT)
    for n in (1, 3):
        x = np.random.default_rng(n).standard_normal((n, 3, 4, 2)).astype(np.float32)
        sess = _check(model, {"x": x})
        assert "shape" in _names(sess)


def test_shape_after_matmul_and_shape15_start_end_and_size_fold():
    n = helper.make_node
    w = np.random.default_rng(6).standard_normal((4, 5)).astype(np.float32)
    model = _model(
        [
            n("MatMul", ["x", "w"], ["h"]),
            n("Shape", ["h"], ["s"], start=1, end=-1, name="shape"),
            n("Size", ["h"], ["sz"], name="size"),
            n("Cast", ["sz"], ["szf"], to=TensorProto.FLOAT),
            n("Mul", ["h", "szf"], ["y"]),
            n("Identity", ["s"], ["s_out"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [
            _out("y", TensorProto.FLOAT, 3),
            _out("s_out", TensorProto.INT64, 1),
        ],
        [numpy_helper.from_array(w, "w")],
        opset=15,
    )
    x = np.random.default_rng(7).standard_normal((2, 3, 4)).astype(np.float32)
    sess = _check(model, {"x": x}, rtol=1e-5)
    assert "shape" not in _names(sess) and "size" not in _names(sess)


def test_exporter_value_info_is_trusted():
    # The input's first dim is symbolic, but the exporter declared the Relu output static.
    n = helper.make_node
    model = _model(
        [
            n("Relu", ["x"], ["h"]),
            n("Shape", ["h"], ["s"], name="shape"),
            n("Reshape", ["h", "s"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [_out("y", TensorProto.FLOAT, 2)],
        value_info=[helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 3])],
    )
    x = np.ones((2, 3), np.float32)
    sess = _check(model, {"x": x})
    assert "shape" not in _names(sess)


# -- shape arithmetic folded per plan --------------------------------------------------------


def _plan_ops(sess) -> list[list[str]]:
    """Per kept plan, the op types of the steps that run (stats()["plans"])."""
    return [[s["op_type"] for s in p["steps"]] for p in sess.stats()["plans"]]


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_dynamic_shape_arithmetic_is_folded_per_signature(dt):
    # Shape -> Gather -> ... -> Reshape on a dynamic input: each signature's plan computes the
    # arithmetic once and runs only the Reshape
    model = _reshape_chain(["n", "s", 4, 2], DTYPES[dt])
    for level in (1, 2):
        sess = _session(model, level)
        rng = np.random.default_rng(8)
        shapes = [(2, 3, 4, 2), (2, 3, 4, 2), (1, 5, 4, 2), (2, 3, 4, 2), (3, 1, 4, 2)]
        for shape in shapes:
            x = rng.standard_normal(shape).astype(dt)
            want = ort_outputs(model, {"x": x})[0]
            got = sess.run(None, {"x": x})[0]
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
        plans = sess.stats()["plans"]
        assert len(plans) == 3
        for ops, plan in zip(_plan_ops(sess), plans):
            assert "Shape" not in ops and "Concat" not in ops, ops
            assert plan["static_values"] >= 5


def test_shape_arithmetic_on_a_computed_tensor_is_folded_too():
    # The arithmetic reads the shape of r, which is computed from its own output.
    n = helper.make_node
    model = _model(
        [
            n("Shape", ["x"], ["s"]),
            n("Gather", ["s", "i0"], ["b"]),
            n("Unsqueeze", ["b", "ax"], ["bu"]),
            n("Concat", ["bu", "m1"], ["shp"], axis=0),
            n("Reshape", ["x", "shp"], ["r"]),
            n("Shape", ["r"], ["s2"]),
            n("Gather", ["s2", "i1"], ["c"]),
            n("Add", ["b", "c"], ["t"]),
            n("Cast", ["t"], ["tf"], to=TensorProto.FLOAT),
            n("Mul", ["r", "tf"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [_out("y", TensorProto.FLOAT, 2)],
        [_c("i0", 0), _c("i1", 1), _c("ax", [0]), _c("m1", [-1])],
    )
    x = np.random.default_rng(9).standard_normal((2, 3)).astype(np.float32)
    sess = _check(model, {"x": x}, level=2)
    for ops in _plan_ops(sess):
        assert "Shape" not in ops and "Gather" not in ops, ops


def test_large_constant_of_shape_is_computed_not_stored():
    n = helper.make_node
    model = _model(
        [
            n("Shape", ["x"], ["s"]),
            n("Mul", ["s", "k"], ["s2"]),
            n("ConstantOfShape", ["s2"], ["big"], value=numpy_helper.from_array(
                np.array([1.0], np.float32))),
            n("Add", ["x", "big"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1])],
        [_out("y", TensorProto.FLOAT, 2)],
        [_c("k", [1, 20000])],
    )  # fmt: skip
    sess = _session(model, 2)
    for shape in [(2, 1), (2, 1), (1, 1)]:
        x = np.ones(shape, np.float32)
        want = ort_outputs(model, {"x": x})[0]
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want)
    # the 160 KB constant of shape (2, 20000) is made at every run; at batch 1 (80 KB) too
    for ops in _plan_ops(sess):
        assert "ConstantOfShape" in ops and "Shape" not in ops, ops


def test_cse_compares_long_list_attributes():
    """Long list attributes (a linear model's coefficients here, a tree ensemble's in real
    models), which CSE keys in one piece, merge only when every element is the same: one ulp
    apart, or -0.0 against 0.0, keeps both nodes."""
    coef = np.random.default_rng(12).standard_normal(80).astype(np.float32)
    near = coef.copy()
    near[41] = np.nextafter(near[41], np.float32(2))
    zero, nzero = coef.copy(), coef.copy()
    zero[7], nzero[7] = 0.0, -0.0

    def linear(out, c):
        return helper.make_node(
            "LinearRegressor", ["x"], [out], domain="ai.onnx.ml", name=out,
            coefficients=[float(v) for v in c], intercepts=[0.5],
        )  # fmt: skip

    graph = helper.make_graph(
        [
            linear("a", coef),
            linear("b", coef),
            linear("c", near),
            linear("d", zero),
            linear("e", nzero),
            helper.make_node("Sum", ["a", "b", "c", "d", "e"], ["y"]),
        ],
        "long_lists",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 80])],
        [_out("y", TensorProto.FLOAT, 2)],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    )
    model.ir_version = 8
    x = np.random.default_rng(13).standard_normal((4, 80)).astype(np.float32)
    sess = _check(model, {"x": x}, rtol=1e-5, atol=1e-5)
    names = _names(sess)
    assert "b" not in names
    assert {"a", "c", "d", "e"} <= set(names)


def test_cse_keys_of_long_lists_agree_with_element_keys():
    """The one-piece key of a long list equals another list's exactly when the element by
    element keys do (NaN payloads alike, -0.0 apart from 0.0, ints apart from floats and from
    bools), and lists it cannot pack fall back to those keys."""
    from onnxjit.passes import cse

    def by_element(v):
        return tuple(cse._canon(x) for x in v)

    base = [float(v) for v in np.random.default_rng(14).standard_normal(100)]
    payload_nan = float(np.array([0x7FF8000000000001], np.int64).view(np.float64)[0])
    ints = [int(v * 1000) for v in base]
    lists = [
        base,
        list(base),
        base[:-1] + [0.0],
        base[:-1] + [-0.0],
        base[:-1] + [float("nan")],
        base[:-1] + [payload_nan],
        ints,
        [float(v) for v in ints],
        ints[:-1] + [2**70],  # beyond int64: not packed
        ints[:-1] + [True],  # mixed: not packed
        [v != 0 for v in ints],  # bools: not packed
        [str(v) for v in ints],
        [str(v).encode() for v in ints],
    ]
    for a in lists:
        for b in lists:
            assert (cse._canon(a) == cse._canon(b)) == (by_element(a) == by_element(b)), (a, b)
    assert cse._canon(base)[0] == "L" and cse._canon(ints[:-1] + [2**70])[0] == "l"
