"""Buffers by liveness (onnxjit/plan.py): a plan's intermediates share one arena, placed so
that values alive at the same time never overlap; dead buffers are reused, live ones never.

Oracles: numpy computing the same chain directly (float64 products, compared with a float32
tolerance), tracemalloc for what a session holds between runs."""

from __future__ import annotations

import gc
import threading
import tracemalloc

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit

N = 256  # 256 x 256 float32: 256 KiB per value
LAYERS = 10


def _weights(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((N, N)) / np.sqrt(N)).astype(np.float32) for _ in range(LAYERS)]


def _chain_model(ws: list[np.ndarray], rows: str | int = N) -> bytes:
    """x -> (MatMul W_i -> Tanh) x LAYERS -> y, plus ``early``: a Reshape (a view) of the first
    product, which later nodes also read."""
    nodes, inits = [], []
    prev = "x"
    for i, w in enumerate(ws):
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]))
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"t{i}"]))
        prev = f"t{i}"
    inits.append(numpy_helper.from_array(np.array([-1], np.int64), "flat"))
    nodes.append(helper.make_node("Reshape", ["m0", "flat"], ["early"]))
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", f, [rows, N])],
        [
            helper.make_tensor_value_info("y", f, [rows, N]),
            helper.make_tensor_value_info(
                "early", f, [rows * N if isinstance(rows, int) else None]
            ),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def _oracle(ws: list[np.ndarray], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h = x.astype(np.float64)
    early = None
    for w in ws:
        m = h @ w.astype(np.float64)
        if early is None:
            early = m.reshape(-1)
        h = np.tanh(m)
    return h, early


def _check(got: list[np.ndarray], want: tuple[np.ndarray, np.ndarray]) -> None:
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5)


def _session(**options: bool) -> tuple[onnxjit.InferenceSession, list[np.ndarray]]:
    ws = _weights()
    so = onnxjit.SessionOptions()
    for k, v in options.items():
        setattr(so, k, v)
    return onnxjit.InferenceSession(_chain_model(ws), so), ws


def test_dead_buffers_are_reused_and_a_repeated_signature_makes_one_arena():
    sess, ws = _session()
    rng = np.random.default_rng(1)
    for _ in range(5):
        x = rng.standard_normal((N, N)).astype(np.float32)
        _check(sess.run(None, {"x": x}), _oracle(ws, x))
    stats = sess.stats()["buffers"]
    (plan,) = sess.stats()["plans"]
    # every run of the signature takes the same arena
    assert stats["arenas"] == 1, stats
    # a few values' worth, not one buffer per value: m0 stays alive (the Reshape reads it at
    # the end, and it leaves the graph as ``early``: not in the arena); each layer's input
    # and output alternate between two ranges
    assert 0 < stats["arena_bytes"] <= 3 * N * N * 4, stats
    assert plan["value_bytes"] >= LAYERS * N * N * 4


def test_outputs_the_caller_keeps_are_never_written_again():
    sess, ws = _session()
    rng = np.random.default_rng(2)
    kept = []
    for _ in range(4):
        x = rng.standard_normal((N, N)).astype(np.float32)
        got = sess.run(None, {"x": x})
        kept.append((got, [g.copy() for g in got], x))
    for got, copies, x in kept:
        for g, c in zip(got, copies):
            np.testing.assert_array_equal(g, c)  # untouched by the later runs
        _check(got, _oracle(ws, x))
    bases = {id(g.base if g.base is not None else g) for got, _, _ in kept for g in got}
    assert len(bases) == 8  # no two outputs share memory


def test_a_value_viewed_by_a_live_value_is_not_reused():
    """``early`` views the first product, which Tanh reads and then releases: its buffer
    must stay out of the pool while the view lives (the caller holds it after the run)."""
    sess, ws = _session()
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((N, N)).astype(np.float32) for _ in range(3)]
    early = [sess.run(["early"], {"x": x})[0] for x in xs]
    for e, x in zip(early, xs):
        np.testing.assert_allclose(e, _oracle(ws, x)[1], rtol=2e-4, atol=2e-5)


def test_concurrent_runs_never_share_a_buffer():
    """8 threads x 25 runs on one session, two batch sizes (values of 256 and 128 KiB, both
    pooled) and one feed in five of the wrong element type: every good run agrees with
    numpy, every bad one raises, and the outputs each thread kept are intact at the end."""
    ws = _weights()
    sess = onnxjit.InferenceSession(_chain_model(ws, "rows"))
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((rows, N)).astype(np.float32) for rows in (N, N // 2) * 4]
    want = [_oracle(ws, x) for x in xs]
    errors: list[BaseException] = []
    kept: list[tuple[list[np.ndarray], int]] = []

    def worker(k: int) -> None:
        try:
            for i in range(25):
                j = (k + i) % len(xs)
                if (k + i) % 5 == 4:
                    with pytest.raises(onnxjit.InvalidInputError):
                        sess.run(None, {"x": xs[j].astype(np.float64)})
                    continue
                got = sess.run(None, {"x": xs[j]})
                _check(got, want[j])
                if i % 8 == 0:
                    kept.append((got, j))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    for got, j in kept:
        _check(got, want[j])
    # overlapping runs of one plan each took an arena of their own
    assert sess.stats()["buffers"]["arenas"] >= 2


@pytest.mark.parametrize(
    "option", ["enable_mem_reuse", "enable_cpu_mem_arena", "enable_mem_pattern"]
)
def test_switching_the_arena_off(option):
    sess, ws = _session(**{option: False})
    x = np.random.default_rng(5).standard_normal((N, N)).astype(np.float32)
    for _ in range(2):
        _check(sess.run(None, {"x": x}), _oracle(ws, x))
    assert sess.stats()["buffers"] is None
    assert sess.stats()["plans"][0]["arena_bytes"] == 0


def _held_bytes(**options: bool) -> int:
    """Bytes NumPy holds for the session after three more runs, less what it held after its
    first run (weights, packed weights, compiled-kernel state)."""
    sess, _ = _session(**options)
    x = np.random.default_rng(7).standard_normal((N, N)).astype(np.float32)
    sess.run(None, {"x": x})
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(3):
            sess.run(None, {"x": x})
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_between_runs_a_session_holds_its_arena_and_nothing_else():
    """With the arena, a session keeps one arena per plan between runs (made by the second
    run: the first is the planning run); without it, nothing."""
    value = N * N * 4
    arena = _held_bytes()
    assert arena <= 3 * value + (64 << 10), arena
    bare = _held_bytes(enable_cpu_mem_arena=False)
    assert bare <= 64 << 10, bare


def test_each_signature_records_every_value_shape():
    """stats()["plans"]: the first run of each input signature records every value's element
    type and shape; checked against onnx's shape inference on the original model, and the
    peak of live bytes against the chain worked out by hand."""
    import onnx
    from onnx import shape_inference

    ws = _weights()
    raw = _chain_model(ws, "rows")
    sess = onnxjit.InferenceSession(raw)
    x = np.random.default_rng(8).standard_normal((N, N)).astype(np.float32)
    for _ in range(3):  # one signature: one plan
        sess.run(None, {"x": x})
    (plan,) = sess.stats()["plans"]
    inferred = shape_inference.infer_shapes(onnx.load_from_string(raw), strict_mode=True)
    declared = {}
    for v in (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output):
        # the variable "rows" is N here; a dimension inference left unknown is not checked
        dims = [
            d.dim_value if d.HasField("dim_value") else (N if d.dim_param == "rows" else None)
            for d in v.type.tensor_type.shape.dim
        ]
        if v.type.tensor_type.HasField("shape") and None not in dims:
            declared[v.name] = dims
    shapes = plan["shapes"]
    assert {"x", "y", "early"} <= set(shapes)
    checked = 0
    for name, (dtype, shape) in shapes.items():
        assert np.dtype(dtype) == np.float32, name
        if name in declared:
            assert shape == declared[name], name
            checked += 1
    assert checked >= 4
    produced = len(sess.graph_nodes())  # every node of this graph has one output
    assert plan["values"] == produced
    value = N * N * 4
    assert plan["value_bytes"] == value * produced
    # m0 lives until Reshape reads it, after the last MatMul: at every MatMul from the
    # second on, its input, its output and m0 are alive; at Reshape m0, t9 and early; at
    # Identity t9, early and y: never more than 3 values
    assert plan["peak_live_bytes"] == 3 * value
    sess.run(None, {"x": x[:128]})  # a second signature
    assert [p["shapes"]["x"][1] for p in sess.stats()["plans"]] == [[N, N], [128, N]]
