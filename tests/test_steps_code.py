"""onnxjit/steps_code.py: the generated straight-line step function against the general step
loop it replaces (same outputs, same errors), on graphs with what the generator has to settle:
outer-scope captures (If), several outputs (Split), an omitted optional input (Clip), a buffer
recycled into the pool, and a step that fails at run time. onnx's ReferenceEvaluator checks
the values themselves."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from oracle import assert_close, reference_outputs

import onnxjit
from onnxjit import steps_code
from onnxjit.errors import ExecutionError, OnnxJitError

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def _graph_with_everything():
    """y = If(c, then: Split(x + w)[0] * z (z, the square of x's first half, from the outer
    scope), else: Clip(x's first two columns) with its minimum omitted, maximum 0.5), s =
    the second half of x plus the sum of a large intermediate (Sigmoid of a 128 KiB
    broadcast: positive terms, no cancellation in the sum) whose buffer dies early and goes
    back to the pool."""
    split_then = [
        helper.make_node("Add", ["x", "w"], ["xw"]),
        helper.make_node("Split", ["xw"], ["h0", "h1"], axis=1),
        helper.make_node("Mul", ["h0", "z"], ["t_out"]),
    ]
    then_g = helper.make_graph(split_then, "then", [], [_vi("t_out", [2, 2])])
    else_g = helper.make_graph(
        [
            helper.make_node("Slice", ["x", "zero", "two", "one"], ["xs"]),
            helper.make_node("Clip", ["xs", "", "half"], ["e_out"]),
        ],
        "else",
        [],
        [_vi("e_out", [2, 2])],
    )
    nodes = [
        helper.make_node("Expand", ["x", "big"], ["wide"]),
        helper.make_node("Sigmoid", ["wide"], ["wt"]),
        helper.make_node("ReduceSum", ["wt"], ["tot"], keepdims=0),
        helper.make_node("Split", ["x"], ["s0", "s1"], axis=1),
        helper.make_node("Mul", ["s0", "s0"], ["z"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Add", ["s1", "tot"], ["s"]),
    ]
    inits = [
        numpy_helper.from_array(np.full((2, 4), 0.25, np.float32), "w"),
        numpy_helper.from_array(np.array([4096, 2, 4], np.int64), "big"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([2], np.int64), "two"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
    ]
    inputs = [_vi("x", [2, 4]), _vi("c", [], TensorProto.BOOL)]
    return _model(nodes, inputs, [_vi("y", [2, 2]), _vi("s", [2, 2])], inits)


def _sessions(model):
    data = model.SerializeToString()
    straight = onnxjit.InferenceSession(data)
    loop = onnxjit.InferenceSession(data)
    loop._program._straight = False  # the general loop
    return straight, loop


@pytest.mark.parametrize("cond", [True, False])
def test_straight_line_steps_match_the_loop_and_the_reference(cond):
    model = _graph_with_everything()
    straight, loop = _sessions(model)
    rng = np.random.default_rng(3)
    # the first run prepares fast paths, later ones take them; the straight-line function is
    # made after steps_code.AFTER_RUNS runs
    for _ in range(steps_code.AFTER_RUNS + 3):
        feeds = {"x": rng.standard_normal((2, 4)).astype(np.float32), "c": np.array(cond)}
        want = reference_outputs(model, feeds)
        got_straight = straight.run(None, feeds)
        got_loop = loop.run(None, feeds)
        assert_close(got_straight, want, rtol=1e-5, atol=1e-5)
        for a, b in zip(got_straight, got_loop):
            np.testing.assert_array_equal(a, b)
    # the generated code hands the dead 128 KiB buffer back to the pool
    assert "give" in straight._program._straight.__code__.co_names


def test_straight_line_steps_report_the_failing_node_like_the_loop():
    # an onnxjit error raised by a step passes through as it is (Reshape to a shape the
    # element count does not fit); any other exception is wrapped in an ExecutionError that
    # names the node and its inputs (here the Relu step's fast path made to raise)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="the_relu"),
        helper.make_node("Reshape", ["r", "shape"], ["y"], name="bad_reshape"),
    ]
    model = _model(
        nodes,
        [_vi("x", ["n"])],
        [_vi("y", [3, "m"])],
        [numpy_helper.from_array(np.array([3, -1], np.int64), "shape")],
    )
    straight, loop = _sessions(model)
    good = {"x": np.arange(6, dtype=np.float32)}
    for _ in range(steps_code.AFTER_RUNS + 2):
        np.testing.assert_array_equal(straight.run(None, good)[0], loop.run(None, good)[0])
    bad = {"x": np.arange(7, dtype=np.float32)}
    messages = []
    for sess in (straight, loop):
        with pytest.raises(OnnxJitError, match="bad_reshape") as info:
            sess.run(None, bad)
        messages.append((type(info.value), str(info.value)))
    assert messages[0] == messages[1]

    def boom(*args):
        raise ValueError("boom")

    messages = []
    for sess in (straight, loop):
        step = sess._program.steps[0]
        kept, step.fast = step.fast, boom
        with pytest.raises(ExecutionError, match="the_relu.*ValueError: boom") as info:
            sess.run(None, good)
        step.fast = kept
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    # and the sessions still run good feeds afterwards
    np.testing.assert_array_equal(straight.run(None, good)[0], loop.run(None, good)[0])
    assert callable(straight._program._straight)


def test_programs_past_the_limit_keep_the_loop(monkeypatch):
    monkeypatch.setattr(steps_code, "MAX_STEPS", 0)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])]
    model = _model(nodes, [_vi("x", [3])], [_vi("y", [3])])
    sess = onnxjit.InferenceSession(model.SerializeToString())
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    for _ in range(steps_code.AFTER_RUNS + 2):
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], -np.maximum(x, 0))
    assert sess._program._straight is False
