"""Plans per input signature (onnxjit/plan.py, onnxjit/executor.py), seen from the public API.

Oracles: onnxruntime on the same feeds, and numpy. What the plans hold is read through
``InferenceSession.stats()["plans"]`` (the steps that run, what runs them, guards, in-place
writes), the view the notebooks use.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit


def _session(model, level=None, **config):
    so = onnxjit.SessionOptions()
    if level is not None:
        so.graph_optimization_level = level
    for k, v in config.items():
        so.add_session_config_entry(k, v)
    return onnxjit.InferenceSession(model.SerializeToString(), so)


def _ort(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _mlp():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["a"]),
        helper.make_node("Tanh", ["a"], ["t"]),
        helper.make_node("Mul", ["t", "a"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 16])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_alternating_signatures_keep_their_plans_and_compile_nothing():
    m = _mlp()
    sess, ref = _session(m), _ort(m)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((n, 8)).astype(np.float32) for n in (3, 5)]
    for x in xs:  # plan both signatures
        sess.run(None, {"x": x})
    compiled = onnxjit.compile_count()
    for i in range(20):
        x = xs[i % 2] + np.float32(i)
        (got,) = sess.run(None, {"x": x})
        (want,) = ref.run(None, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert onnxjit.compile_count() == compiled
    plans = sess.stats()["plans"]
    assert sorted(p["shapes"]["x"][1][0] for p in plans) == [3, 5]


def test_outputs_of_earlier_runs_are_never_overwritten():
    m = _mlp()
    sess = _session(m)
    rng = np.random.default_rng(2)
    kept = []
    for _ in range(6):
        x = rng.standard_normal((4, 8)).astype(np.float32)
        (y,) = sess.run(None, {"x": x})
        kept.append((y, y.copy()))
    for y, snapshot in kept:
        np.testing.assert_array_equal(y, snapshot)


def _nonzero_model():
    # y = Sum(x[NonZero(x > 0)]) per row count: NonZero's output shape depends on the data
    nodes = [
        helper.make_node("Greater", ["x", "zero"], ["pos"]),
        helper.make_node("NonZero", ["pos"], ["idx"]),
        helper.make_node("Transpose", ["idx"], ["idx_t"], perm=[1, 0]),
        helper.make_node("GatherND", ["x", "idx_t"], ["vals"]),
        helper.make_node("Mul", ["vals", "two"], ["doubled"]),
        helper.make_node("Shape", ["doubled"], ["count"]),
        helper.make_node("ReduceSum", ["doubled"], ["total"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "nz",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
        [
            helper.make_tensor_value_info("doubled", TensorProto.FLOAT, ["k"]),
            helper.make_tensor_value_info("count", TensorProto.INT64, [1]),
            helper.make_tensor_value_info("total", TensorProto.FLOAT, []),
        ],
        [
            numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
            numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_data_dependent_shapes_replan_the_rest_and_reuse_it():
    m = _nonzero_model()
    sess, ref = _session(m), _ort(m)
    rng = np.random.default_rng(3)
    feeds = [rng.standard_normal((4, 6)).astype(np.float32) for _ in range(4)]
    feeds.append(np.abs(feeds[0]) + 1)  # every element positive
    feeds.append(-np.abs(feeds[0]) - 1)  # none positive: NonZero gives 0 indices
    for x in feeds + feeds:  # every count twice: the second pass runs known continuations
        got = sess.run(None, {"x": x})
        want = ref.run(None, {"x": x})
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    (plan,) = sess.stats()["plans"]
    assert any(s["guarded"] and s["op"].startswith("NonZero") for s in plan["steps"])


def test_shape_computations_fold_into_the_plan():
    # Reshape to (n * 2, -1) with the target computed from the input's shape at run time
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        helper.make_node("Mul", ["n", "c2"], ["n2"]),
        helper.make_node("Concat", ["n2", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "fold",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", "k"])],
        [
            numpy_helper.from_array(np.array([0], np.int64), "i0"),
            numpy_helper.from_array(np.array([2], np.int64), "c2"),
            numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
        ],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess, ref = _session(m, level=0), _ort(m)
    for n in (2, 6, 2):
        x = np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0])
    for plan in sess.stats()["plans"]:
        ops = [s["op"].split("-")[0] for s in plan["steps"]]
        assert ops == ["Reshape", "Relu"], ops
        assert plan["static_values"] >= 4


def test_dying_inputs_are_written_over_in_place():
    # A chain of elementwise ops on 256 x 256 floats without fusion: each output may take the
    # buffer of the value that dies at it
    nodes = [
        helper.make_node("Exp", ["x"], ["a"]),
        helper.make_node("Neg", ["a"], ["b"]),
        helper.make_node("Tanh", ["b"], ["c"]),
        helper.make_node("Abs", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 256])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess, ref = _session(m, level=0), _ort(m)
    x = np.random.default_rng(4).standard_normal((256, 256)).astype(np.float32)
    x_before = x.copy()
    for _ in range(3):
        np.testing.assert_allclose(
            sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6
        )
    np.testing.assert_array_equal(x, x_before)  # the caller's array is never written
    (plan,) = sess.stats()["plans"]
    assert [s["in_place"] for s in plan["steps"]] == [False, True, True, True]
    assert plan["arena_bytes"] == 0  # every buffer leaves the graph as the output's


def test_arena_holds_the_intermediates_by_liveness():
    # a and b (256 KiB each) are alive together; c takes the buffer of one of them (both die
    # where it is made), and the reduction's output leaves the graph: two arena ranges
    nodes = [
        helper.make_node("Exp", ["x"], ["a"]),
        helper.make_node("Mul", ["a", "x"], ["b"]),
        helper.make_node("Mul", ["b", "a"], ["c"]),
        helper.make_node("ReduceSum", ["c"], ["y"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "arena",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess, ref = _session(m, level=0), _ort(m)
    x = np.random.default_rng(5).standard_normal((256, 256)).astype(np.float32) / 4
    for _ in range(3):
        np.testing.assert_allclose(
            sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-4
        )
    (plan,) = sess.stats()["plans"]
    assert plan["arena_bytes"] == 2 * 256 * 256 * 4
    assert [s["in_place"] for s in plan["steps"]][:3] == [False, False, True]
    assert sess.stats()["buffers"] == {"arena_bytes": 2 * 256 * 256 * 4, "arenas": 1}
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = 0
    so.enable_cpu_mem_arena = False  # the same plan allocating its buffers per run
    bare = onnxjit.InferenceSession(m.SerializeToString(), so)
    np.testing.assert_array_equal(bare.run(None, {"x": x})[0], sess.run(None, {"x": x})[0])
    assert bare.stats()["buffers"] is None
    assert bare.stats()["plans"][0]["arena_bytes"] == 0


def test_concurrent_runs_of_two_signatures_agree_with_serial_runs():
    m = _mlp()
    sess = _session(m)
    rng = np.random.default_rng(6)
    xs = [rng.standard_normal((n, 8)).astype(np.float32) for n in (2, 7, 2, 7, 3)]
    expected = [sess.run(None, {"x": x})[0] for x in xs]
    errors = []

    def worker(seed):
        order = np.random.default_rng(seed).permutation(len(xs) * 20) % len(xs)
        for i in order:
            got = sess.run(None, {"x": xs[i]})[0]
            if not np.array_equal(got, expected[i]):
                errors.append(i)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_a_failing_step_names_its_node_and_leaves_the_session_usable():
    nodes = [
        helper.make_node("Relu", ["data"], ["d"]),
        helper.make_node("Gather", ["d", "idx"], ["y"], axis=0, name="pick"),
    ]
    graph = helper.make_graph(
        nodes,
        "gather",
        [
            helper.make_tensor_value_info("data", TensorProto.FLOAT, [5, 3]),
            helper.make_tensor_value_info("idx", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess, ref = _session(m), _ort(m)
    data = np.arange(15, dtype=np.float32).reshape(5, 3)
    good = {"data": data, "idx": np.array([4, 0], np.int64)}
    sess.run(None, good)
    with pytest.raises(onnxjit.InvalidArgumentError, match="pick"):
        sess.run(None, {"data": data, "idx": np.array([9, 0], np.int64)})
    np.testing.assert_array_equal(sess.run(None, good)[0], ref.run(None, good)[0])


def test_profiled_runs_time_every_step_of_the_plan(tmp_path):
    so = onnxjit.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel.ORT_DISABLE_ALL
    m = _mlp()
    sess = onnxjit.InferenceSession(m.SerializeToString(), so)
    x = np.ones((3, 8), np.float32)
    for _ in range(3):
        sess.run(None, {"x": x})
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    nodes = [e for e in events if e["cat"] == "Node"]
    # the first run plans the signature (compiling what it needs): its time is no node's
    assert len(nodes) == (3 - 1) * 4
    assert len([e for e in events if e["name"] == "model_run"]) == 3
    assert {e["args"]["op"].split("-")[0] for e in nodes} == {"MatMul", "Add", "Tanh", "Mul"}


def test_a_long_graph_runs_as_one_plan():
    # 3000 elementwise nodes that nothing fuses (optimisation off): one plan, one function
    n = 3000
    nodes = [
        helper.make_node("Neg" if i % 2 else "Abs", [f"t{i}" if i else "x"], [f"t{i + 1}"])
        for i in range(n)
    ]
    nodes.append(helper.make_node("Identity", [f"t{n}"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "long",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = _session(m, level=0)
    x = np.array([-1.5, 0.0, 2.0, -3.0], np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], -np.abs(x))
    (plan,) = sess.stats()["plans"]
    assert len(plan["steps"]) == n + 1
