"""If, Loop and Scan against onnx's ReferenceEvaluator (onnxruntime where the reference lacks
a feature: Scan's non-zero axes and reverse directions, Scan-8's sequence_lens)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from oracle import assert_close, ort_outputs, reference_outputs

import onnxjit

F = TensorProto.FLOAT
I64 = TensorProto.INT64
BOOL = TensorProto.BOOL


def vi(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def run_both(graph, opset, feeds, oracle="ref", rtol=1e-6, atol=1e-6):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    want = reference_outputs(model, feeds) if oracle == "ref" else ort_outputs(model, feeds)
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, feeds)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, rtol, atol, f"opset {opset} output {i}")
    return got


# ---- If -----------------------------------------------------------------------------------


def if_graph(same_shapes=True):
    # then: x + y (y read from the outer scope); else: x * 2, or Concat(x, x) * 2 to give the
    # branches different output shapes (allowed from If-11).
    then_g = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["t"])], "then", [], [vi("t", F, [3])]
    )
    two = helper.make_tensor("two", F, [], [2.0])
    if same_shapes:
        else_nodes = [helper.make_node("Mul", ["x", "two"], ["e"])]
        else_shape = [3]
    else:
        else_nodes = [
            helper.make_node("Concat", ["x", "x"], ["xx"], axis=0),
            helper.make_node("Mul", ["xx", "two"], ["e"]),
        ]
        else_shape = [6]
    else_g = helper.make_graph(else_nodes, "else", [], [vi("e", F, else_shape)], [two])
    node = helper.make_node("If", ["c"], ["out"], then_branch=then_g, else_branch=else_g)
    return helper.make_graph(
        [node], "g", [vi("c", BOOL, []), vi("x", F, [3]), vi("y", F, [3])], [vi("out", F, ["d0"])]
    )


@pytest.mark.parametrize("opset", [10, 11, 13, 16])
@pytest.mark.parametrize("cond", [True, False])
def test_if(opset, cond):
    feeds = {
        "c": np.array(cond),
        "x": np.array([1, 2, 3], np.float32),
        "y": np.array([10, 20, 30], np.float32),
    }
    run_both(if_graph(), opset, feeds)


@pytest.mark.parametrize("cond", [True, False])
def test_if11_branches_with_different_shapes(cond):
    feeds = {
        "c": np.array(cond),
        "x": np.array([1, 2, 3], np.float32),
        "y": np.array([10, 20, 30], np.float32),
    }
    run_both(if_graph(same_shapes=False), 11, feeds)


def test_if_cond_one_element_tensor():
    feeds = {
        "c": np.array([False]),
        "x": np.array([1, 2, 3], np.float32),
        "y": np.array([10, 20, 30], np.float32),
    }
    g = if_graph()
    g.input[0].CopyFrom(vi("c", BOOL, [1]))
    run_both(g, 13, feeds)


# ---- Loop ---------------------------------------------------------------------------------


def loop_graph(use_m=True, use_cond=True, limit=None):
    """Body: acc += x * i (x from the outer scope); scan output acc; cond = acc_sum < limit."""
    nodes = [
        helper.make_node("Cast", ["i"], ["fi"], to=F),
        helper.make_node("Mul", ["x", "fi"], ["xi"]),
        helper.make_node("Add", ["acc_in", "xi"], ["acc_out"]),
        helper.make_node("Identity", ["acc_out"], ["scan_out"]),
    ]
    inits = []
    if limit is not None:
        inits.append(helper.make_tensor("limit", F, [], [limit]))
        nodes += [
            helper.make_node("ReduceSum", ["acc_out"], ["s"], keepdims=0),
            helper.make_node("Less", ["s", "limit"], ["cond_out"]),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    body = helper.make_graph(
        nodes,
        "body",
        [vi("i", I64, []), vi("cond_in", BOOL, []), vi("acc_in", F, [2])],
        [vi("cond_out", BOOL, []), vi("acc_out", F, [2]), vi("scan_out", F, [2])],
        initializer=inits,
    )
    node = helper.make_node(
        "Loop", ["M" if use_m else "", "cond" if use_cond else "", "acc0"],
        ["acc_final", "scans"], body=body,
    )  # fmt: skip
    inputs = [vi("acc0", F, [2]), vi("x", F, [2])]
    if use_m:
        inputs.append(vi("M", I64, []))
    if use_cond:
        inputs.append(vi("cond", BOOL, []))
    return helper.make_graph(
        [node], "g", inputs, [vi("acc_final", F, [2]), vi("scans", F, ["n", 2])]
    )


def loop_feeds(m=5, cond=True, use_m=True, use_cond=True):
    feeds = {"acc0": np.array([1, -1], np.float32), "x": np.array([0.5, 2.0], np.float32)}
    if use_m:
        feeds["M"] = np.array(m, np.int64)
    if use_cond:
        feeds["cond"] = np.array(cond)
    return feeds


# The reference evaluator's Loop treats an omitted cond as false (it runs no iteration) and
# cannot stack zero scan outputs, so rows with no cond input or no iteration use onnxruntime.


@pytest.mark.parametrize("opset", [10, 11, 13, 16])
def test_loop_for(opset):
    run_both(loop_graph(use_cond=False), opset, loop_feeds(use_cond=False), oracle="ort")


@pytest.mark.parametrize("opset", [10, 11, 13])
def test_loop_while_with_limit(opset):
    g = loop_graph(use_m=False, limit=20.0)
    run_both(g, opset, loop_feeds(use_m=False))


@pytest.mark.parametrize("m", [0, 1, 7])
def test_loop_trip_count_and_cond(m):
    g = loop_graph(limit=8.0)
    run_both(g, 11, loop_feeds(m=m), oracle="ort" if m == 0 else "ref")


def test_loop_cond_false_initially():
    g = loop_graph(limit=8.0)
    run_both(g, 11, loop_feeds(m=4, cond=False), oracle="ort")


def test_loop_for_ignores_body_cond():
    # With M and no cond input the spec says the body's cond output is ignored (a for loop).
    # onnxruntime stops when it turns false, and the reference evaluator runs no iteration
    # without a cond input, so the oracle is onnxruntime on the same loop whose body passes its
    # cond through (always true).
    feeds = loop_feeds(m=4, use_cond=False)
    model = helper.make_model(
        loop_graph(use_cond=False, limit=None), opset_imports=[helper.make_opsetid("", 11)]
    )
    model.ir_version = 8
    want = ort_outputs(model, feeds)
    g = loop_graph(use_cond=False, limit=1.0)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, feeds)
    for g_, w in zip(got, want):
        assert_close(g_, w)


def test_loop_nested():
    # inner loop (2 iterations) adds x to acc; outer loop (M iterations) runs it.
    inner_body = helper.make_graph(
        [
            helper.make_node("Add", ["a_in", "x"], ["a_out"]),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
        ],
        "inner",
        [vi("j", I64, []), vi("c_in", BOOL, []), vi("a_in", F, [2])],
        [vi("c_out", BOOL, []), vi("a_out", F, [2])],
    )
    two = helper.make_tensor("two", I64, [], [2])
    outer_body = helper.make_graph(
        [
            helper.make_node("Loop", ["two", "", "acc_in"], ["acc_mid"], body=inner_body),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Identity", ["acc_mid"], ["acc_out"]),
        ],
        "outer",
        [vi("i", I64, []), vi("cond_in", BOOL, []), vi("acc_in", F, [2])],
        [vi("cond_out", BOOL, []), vi("acc_out", F, [2])],
        initializer=[two],
    )
    node = helper.make_node("Loop", ["M", "", "acc0"], ["acc_final"], body=outer_body)
    g = helper.make_graph(
        [node], "g", [vi("acc0", F, [2]), vi("x", F, [2]), vi("M", I64, [])],
        [vi("acc_final", F, [2])],
    )  # fmt: skip
    run_both(g, 13, loop_feeds(m=3, use_cond=False), oracle="ort")


# ---- Scan ---------------------------------------------------------------------------------


def scan9_graph(n_in=1, in_axes=None, in_dirs=None, out_axes=None, out_dirs=None):
    """State s (shape [2]); scan inputs x_k with slices [2]: s += sum_k x_k; outputs s and
    s * x_0 per step."""
    nodes, ins = [], [vi("s_in", F, [2])]
    prev = "s_in"
    for k in range(n_in):
        ins.append(vi(f"x{k}_t", F, [2]))
        nodes.append(helper.make_node("Add", [prev, f"x{k}_t"], [f"acc{k}"]))
        prev = f"acc{k}"
    nodes.append(helper.make_node("Identity", [prev], ["s_out"]))
    nodes.append(helper.make_node("Mul", [prev, "x0_t"], ["y_t"]))
    body = helper.make_graph(nodes, "body", ins, [vi("s_out", F, [2]), vi("y_t", F, [2])])
    attrs = {"num_scan_inputs": n_in}
    for k, v in (
        ("scan_input_axes", in_axes),
        ("scan_input_directions", in_dirs),
        ("scan_output_axes", out_axes),
        ("scan_output_directions", out_dirs),
    ):
        if v is not None:
            attrs[k] = v
    node = helper.make_node(
        "Scan", ["s0", *[f"x{k}" for k in range(n_in)]], ["s_final", "ys"], body=body, **attrs
    )
    return node, body


def scan9_model(n_in, x_shapes, **kw):
    node, _ = scan9_graph(n_in, **kw)
    inputs = [vi("s0", F, [2])] + [vi(f"x{k}", F, list(s)) for k, s in enumerate(x_shapes)]
    return helper.make_graph(
        node and [node], "g", inputs, [vi("s_final", F, [2]), vi("ys", F, ["a", "b"])]
    )


@pytest.mark.parametrize("opset", [9, 11, 16])
def test_scan9_basic(opset):
    rng = np.random.default_rng(0)
    feeds = {
        "s0": np.array([1, 2], np.float32),
        "x0": rng.standard_normal((4, 2)).astype(np.float32),
    }
    run_both(scan9_model(1, [(4, 2)]), opset, feeds, rtol=1e-5)


@pytest.mark.parametrize(
    "kw",
    [
        {"in_dirs": [1, 0]},
        {"in_axes": [1, 0]},
        {"out_dirs": [1]},
        {"out_axes": [1]},
        {"in_axes": [1, 0], "in_dirs": [0, 1], "out_axes": [1], "out_dirs": [1]},
    ],
)
def test_scan9_axes_directions(kw):
    # The reference evaluator only implements axis 0 / forward: onnxruntime is the oracle.
    rng = np.random.default_rng(1)
    x0_shape = (2, 5) if kw.get("in_axes", [0])[0] == 1 else (5, 2)
    feeds = {
        "s0": np.array([1, 2], np.float32),
        "x0": rng.standard_normal(x0_shape).astype(np.float32),
        "x1": rng.standard_normal((5, 2)).astype(np.float32),
    }
    run_both(scan9_model(2, [x0_shape, (5, 2)], **kw), 9, feeds, oracle="ort", rtol=1e-5)


def test_scan11_negative_axes():
    rng = np.random.default_rng(2)
    feeds = {
        "s0": np.array([1, 2], np.float32),
        "x0": rng.standard_normal((2, 3)).astype(np.float32),
    }
    g = scan9_model(1, [(2, 3)], in_axes=[-1], out_axes=[-1])
    run_both(g, 11, feeds, oracle="ort", rtol=1e-5)


def test_scan8_batched():
    # Scan-8: batch axis first; the reference evaluator implements Scan-9 semantics only,
    # so onnxruntime is the oracle.
    rng = np.random.default_rng(3)
    node, body = scan9_graph(1)
    node = helper.make_node(
        "Scan", ["", "s0", "x0"], ["s_final", "ys"], body=body, num_scan_inputs=1
    )
    g = helper.make_graph(
        [node], "g", [vi("s0", F, [3, 2]), vi("x0", F, [3, 4, 2])],
        [vi("s_final", F, [3, 2]), vi("ys", F, [3, 4, 2])],
    )  # fmt: skip
    feeds = {"s0": rng.standard_normal((3, 2)).astype(np.float32),
             "x0": rng.standard_normal((3, 4, 2)).astype(np.float32)}  # fmt: skip
    run_both(g, 8, feeds, oracle="ort", rtol=1e-5)


@pytest.mark.parametrize("directions", [[0], [1]])
def test_scan8_sequence_lens(directions):
    rng = np.random.default_rng(4)
    node, body = scan9_graph(1)
    node = helper.make_node(
        "Scan", ["lens", "s0", "x0"], ["s_final", "ys"], body=body, num_scan_inputs=1,
        directions=directions,
    )  # fmt: skip
    g = helper.make_graph(
        [node], "g", [vi("lens", I64, [3]), vi("s0", F, [3, 2]), vi("x0", F, [3, 4, 2])],
        [vi("s_final", F, [3, 2]), vi("ys", F, [3, 4, 2])],
    )  # fmt: skip
    feeds = {"lens": np.array([4, 2, 3], np.int64),
             "s0": rng.standard_normal((3, 2)).astype(np.float32),
             "x0": rng.standard_normal((3, 4, 2)).astype(np.float32)}  # fmt: skip
    run_both(g, 8, feeds, oracle="ort", rtol=1e-5)


def test_scan_outer_scope_capture():
    # The body reads w from the main graph.
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["x_t", "w"], ["xw"]),
            helper.make_node("Add", ["s_in", "xw"], ["s_out"]),
            helper.make_node("Identity", ["s_out"], ["y_t"]),
        ],
        "body", [vi("s_in", F, [2]), vi("x_t", F, [2])], [vi("s_out", F, [2]), vi("y_t", F, [2])],
    )  # fmt: skip
    node = helper.make_node("Scan", ["s0", "x0"], ["s_final", "ys"], body=body, num_scan_inputs=1)
    g = helper.make_graph(
        [node], "g", [vi("s0", F, [2]), vi("x0", F, [3, 2]), vi("w", F, [2])],
        [vi("s_final", F, [2]), vi("ys", F, [3, 2])],
    )  # fmt: skip
    feeds = {"s0": np.zeros(2, np.float32), "x0": np.arange(6, dtype=np.float32).reshape(3, 2),
             "w": np.array([2, -1], np.float32)}  # fmt: skip
    run_both(g, 16, feeds)


def test_if_branch_returns_its_constant():
    # A branch that returns its own initializer: the output must not alias it (checked by
    # running twice with a consumer that could reuse the buffer).
    k = helper.make_tensor("k", F, [3], [1.0, 2.0, 3.0])
    then_g = helper.make_graph(
        [helper.make_node("Identity", ["k"], ["t"])], "then", [], [vi("t", F, [3])], [k]
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", F, [3])]
    )
    nodes = [
        helper.make_node("If", ["c"], ["o"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Add", ["o", "x"], ["out"]),
    ]
    g = helper.make_graph(nodes, "g", [vi("c", BOOL, []), vi("x", F, [3])], [vi("out", F, [3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    sess = onnxjit.InferenceSession(model.SerializeToString())
    feeds = {"c": np.array(True), "x": np.array([10, 20, 30], np.float32)}
    want = reference_outputs(model, feeds)
    for _ in range(3):
        assert_close(sess.run(None, feeds)[0], want[0])
