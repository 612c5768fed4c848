"""Scan and Loop bodies run many times: states carried across iterations, scan outputs,
directions and axes, outer-scope reads, zero iterations, shapes that change between
iterations, and Scan bodies whose rows are independent (run in blocks of rows, see
onnxjit.scan_rows), against onnxruntime and onnx's ReferenceEvaluator; and the scikit-learn
exports built on them (skl2onnx's k-NN computes distances in a Scan) and on deep tree
ensembles (HistGradientBoosting), against onnxruntime."""

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


def model_of(graph, opset=17):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def check(model, feeds, oracles=("ort", "ref"), rtol=1e-5, atol=1e-5):
    """Run twice in one session (the second run takes the planned path) against each oracle."""
    sess = onnxjit.InferenceSession(model.SerializeToString())
    first = sess.run(None, feeds)
    second = sess.run(None, feeds)
    for oracle in oracles:
        want = ort_outputs(model, feeds) if oracle == "ort" else reference_outputs(model, feeds)
        assert len(first) == len(want)
        for i, w in enumerate(want):
            assert_close(first[i], w, rtol, atol, f"{oracle} output {i}")
            assert_close(second[i], w, rtol, atol, f"{oracle} output {i} (second run)")
    return first


# ---- Scan -----------------------------------------------------------------------------------


def cdist_scan(
    n_cols=4, in_axis=0, in_dir=0, out_axis=0, out_dir=0, extra_nodes=(), metric="sqeuclidean"
):
    """skl2onnx's distance Scan: the state X passes through (Identity); each scanned row r
    gives ReduceSumSquare(X - r, axis 1) (or a Minkowski-1 distance scaled by an outer
    value ``w``)."""
    if metric == "sqeuclidean":
        nodes = [
            helper.make_node("Sub", ["x_in", "row"], ["diff"]),
            helper.make_node("ReduceSumSquare", ["diff"], ["dist"], axes=[1], keepdims=0),
        ]
    else:  # |x - r| summed (axes as an input, opset 18), times the outer value w
        nodes = [
            helper.make_node("Sub", ["x_in", "row"], ["diff"]),
            helper.make_node("Abs", ["diff"], ["adiff"]),
            helper.make_node("ReduceSum", ["adiff", "one"], ["l1"], keepdims=0),
            helper.make_node("Mul", ["l1", "w"], ["dist"]),
        ]
    body = helper.make_graph(
        [helper.make_node("Identity", ["x_in"], ["x_out"]), *nodes, *extra_nodes],
        "body",
        [vi("x_in", F, ["n", n_cols]), vi("row", F, [n_cols])],
        [vi("x_out", F, ["n", n_cols]), vi("dist", F, ["n"])],
        [helper.make_tensor("one", I64, [1], [1])] if metric != "sqeuclidean" else [],
    )
    scan = helper.make_node(
        "Scan",
        ["X", "T"],
        ["X_final", "D"],
        body=body,
        num_scan_inputs=1,
        scan_input_axes=[in_axis],
        scan_input_directions=[in_dir],
        scan_output_axes=[out_axis],
        scan_output_directions=[out_dir],
    )
    t_shape = [n_cols, "t"] if in_axis == 1 else ["t", n_cols]
    inputs = [vi("X", F, ["n", n_cols]), vi("T", F, t_shape)]
    if metric != "sqeuclidean":
        inputs.append(vi("w", F, []))
    return helper.make_graph(
        [scan], "g", inputs, [vi("X_final", F, ["n", n_cols]), vi("D", F, ["a", "b"])]
    )


@pytest.mark.parametrize("n_rows", [1, 7, 512])
@pytest.mark.parametrize("n_train", [1, 2, 50])
def test_cdist_scan_rows(n_rows, n_train):
    rng = np.random.default_rng(n_rows + n_train)
    feeds = {
        "X": rng.standard_normal((n_rows, 4)).astype(np.float32),
        "T": rng.standard_normal((n_train, 4)).astype(np.float32),
    }
    got = check(model_of(cdist_scan()), feeds)
    assert got[1].shape == (n_train, n_rows)


def test_cdist_scan_of_zero_rows():
    # onnxruntime and the reference evaluator both refuse a Scan of zero iterations
    x = np.ones((3, 4), np.float32)
    feeds = {"X": x, "T": np.zeros((0, 4), np.float32)}
    sess = onnxjit.InferenceSession(model_of(cdist_scan()).SerializeToString())
    final, dist = sess.run(None, feeds)
    np.testing.assert_array_equal(final, x)
    assert dist.shape[0] == 0 and dist.dtype == np.float32


@pytest.mark.parametrize(
    "in_axis,in_dir,out_axis,out_dir",
    [(1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1), (1, 1, -1, 1)],
)
def test_cdist_scan_axes_and_directions(in_axis, in_dir, out_axis, out_dir):
    rng = np.random.default_rng(1)
    t = rng.standard_normal((40, 4)).astype(np.float32)
    feeds = {
        "X": rng.standard_normal((300, 4)).astype(np.float32),
        "T": np.ascontiguousarray(t.T) if in_axis == 1 else t,
    }
    model = model_of(cdist_scan(4, in_axis, in_dir, out_axis, out_dir))
    check(model, feeds, ("ort",))
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, feeds)[1]
    rows = t[::-1] if in_dir else t
    want = ((feeds["X"][None] - rows[:, None]) ** 2).sum(-1)  # numpy, rows first
    if out_dir:
        want = want[::-1]
    if out_axis in (1, -1):
        want = want.T
    assert_close(got, want, 1e-4, 1e-4, "numpy")


def test_scan_body_reading_the_outer_scope_with_axes_input():
    rng = np.random.default_rng(2)
    feeds = {
        "X": rng.standard_normal((64, 4)).astype(np.float32),
        "T": rng.standard_normal((30, 4)).astype(np.float32),
        "w": np.array(0.5, np.float32),
    }
    check(model_of(cdist_scan(metric="l1"), opset=18), feeds)


def test_scan_rows_with_reductions_arg_softmax_where_and_cast():
    # one row in: [3, 5] block per row, through the ops the row rules cover
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["s_in"], ["s_out"]),
            helper.make_node("Mul", ["row", "s_in"], ["m"]),  # [3, 5] * [5]
            helper.make_node("Softmax", ["m"], ["sm"], axis=-1),
            helper.make_node("ReduceMax", ["sm"], ["mx"], axes=[0], keepdims=1),  # [1, 5]
            helper.make_node("ArgMax", ["m"], ["am"], axis=1, keepdims=0),  # [3]
            helper.make_node("Cast", ["am"], ["amf"], to=F),
            helper.make_node("Greater", ["m", "zero"], ["pos"]),
            helper.make_node("Where", ["pos", "m", "mx"], ["wh"]),  # [3, 5]
            helper.make_node("ReduceMean", ["wh"], ["mean"], keepdims=0),  # every axis: []
            helper.make_node("Shape", ["s_in"], ["shp"]),  # reads the state only: hoisted
            helper.make_node("Cast", ["shp"], ["shpf"], to=F),
            helper.make_node("Add", ["mean", "shpf"], ["o3"]),  # [] + [1]
        ],
        "body",
        [vi("s_in", F, [5]), vi("row", F, [3, 5])],
        [
            vi("s_out", F, [5]),
            vi("amf", F, [3]),
            vi("mx", F, [1, 5]),
            vi("o3", F, [1]),
        ],
        [helper.make_tensor("zero", F, [], [0.0])],
    )
    scan = helper.make_node(
        "Scan", ["S", "R"], ["S_final", "A", "M", "O"], body=body, num_scan_inputs=1
    )
    graph = helper.make_graph(
        [scan],
        "g",
        [vi("S", F, [5]), vi("R", F, ["t", 3, 5])],
        [
            vi("S_final", F, [5]),
            vi("A", F, ["t", 3]),
            vi("M", F, ["t", 1, 5]),
            vi("O", F, ["t", 1]),
        ],
    )
    rng = np.random.default_rng(3)
    for t in (1, 2, 33):
        feeds = {
            "S": rng.standard_normal(5).astype(np.float32),
            "R": rng.standard_normal((t, 3, 5)).astype(np.float32),
        }
        check(model_of(graph), feeds)


def test_scan_rows_where_a_rank_follows_the_state_shape():
    # Squeeze(state) has rank 1 for a [1, 4] state and rank 2 for [3, 4]: the same session
    # must line up the broadcasting differently for the two
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["s_in"], ["s_out"]),
            helper.make_node("Squeeze", ["s_in"], ["sq"]),
            helper.make_node("Sub", ["sq", "row"], ["d"]),
            helper.make_node("ReduceSumSquare", ["d"], ["dist"], keepdims=0),  # every axis
        ],
        "body",
        [vi("s_in", F, ["a", 4]), vi("row", F, [4])],
        [vi("s_out", F, ["a", 4]), vi("dist", F, [])],
    )
    scan = helper.make_node("Scan", ["S", "X"], ["S_final", "D"], body=body, num_scan_inputs=1)
    graph = helper.make_graph(
        [scan],
        "g",
        [vi("S", F, ["a", 4]), vi("X", F, ["t", 4])],
        [vi("S_final", F, ["a", 4]), vi("D", F, ["t"])],
    )
    model = model_of(graph, opset=13)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(5)
    x = rng.standard_normal((9, 4)).astype(np.float32)
    for rows in (1, 3, 1):
        feeds = {"S": rng.standard_normal((rows, 4)).astype(np.float32), "X": x}
        got = sess.run(None, feeds)
        want = ort_outputs(model, feeds)
        assert got[1].shape == want[1].shape
        assert_close(got[1], want[1], 1e-5, 1e-5, f"state of {rows} rows")


def test_scan_carried_state_cumulative_sum_both_directions():
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc_in", "row"], ["acc_out"]),
            helper.make_node("Identity", ["acc_out"], ["y"]),
        ],
        "body",
        [vi("acc_in", F, [2]), vi("row", F, [2])],
        [vi("acc_out", F, [2]), vi("y", F, [2])],
    )
    for direction in (0, 1):
        scan = helper.make_node(
            "Scan",
            ["init", "X"],
            ["final", "Y"],
            body=body,
            num_scan_inputs=1,
            scan_input_directions=[direction],
        )
        graph = helper.make_graph(
            [scan],
            "g",
            [vi("init", F, [2]), vi("X", F, ["t", 2])],
            [vi("final", F, [2]), vi("Y", F, ["t", 2])],
        )
        x = np.arange(20, dtype=np.float32).reshape(10, 2)
        feeds = {"init": np.array([1.0, -1.0], np.float32), "X": x}
        got = check(model_of(graph), feeds, ("ort",) if direction else ("ort", "ref"))
        rows = x[::-1] if direction else x
        assert_close(got[1], feeds["init"] + np.cumsum(rows, axis=0), 0, 0, "numpy")


def test_scan_whose_output_ignores_the_scan_input_stacks_it_per_iteration():
    # the state passes through, and the scan output depends on the state only
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["s_in"], ["s_out"]),
            helper.make_node("Neg", ["s_in"], ["y"]),
        ],
        "body",
        [vi("s_in", F, [2]), vi("row", F, [3])],
        [vi("s_out", F, [2]), vi("y", F, [2])],
    )
    scan = helper.make_node("Scan", ["S", "X"], ["S_final", "Y"], body=body, num_scan_inputs=1)
    graph = helper.make_graph(
        [scan],
        "g",
        [vi("S", F, [2]), vi("X", F, ["t", 3])],
        [vi("S_final", F, [2]), vi("Y", F, ["t", 2])],
    )
    feeds = {"S": np.array([1.0, 2.0], np.float32), "X": np.zeros((6, 3), np.float32)}
    got = check(model_of(graph), feeds)
    assert got[1].shape == (6, 2)


# ---- Loop -----------------------------------------------------------------------------------


def loop_graph(
    body_nodes, body_outputs, carried=("acc",), extra_inputs=(), cond=False, ranks=(1, 2)
):
    """A Loop over ``body_nodes``; ``ranks``: of its carried outputs, then its scan outputs."""
    body = helper.make_graph(
        body_nodes,
        "body",
        [vi("i", I64, []), vi("c_in", BOOL, []), *[vi(f"{c}_in", F, ["k"]) for c in carried]],
        body_outputs,
    )
    node = helper.make_node(
        "Loop",
        ["M", "cond" if cond else "", *[f"{c}0" for c in carried]],
        [f"{c}_final" for c in carried]
        + [f"scan{k}" for k in range(len(body_outputs) - 1 - len(carried))],
        body=body,
    )
    inputs = [vi("M", I64, []), *([vi("cond", BOOL, [])] if cond else [])]
    inputs += [vi(f"{c}0", F, ["k"]) for c in carried] + list(extra_inputs)
    outputs = [vi(n, F, [f"d{j}" for j in range(r)]) for n, r in zip(node.output, ranks)]
    return helper.make_graph([node], "g", inputs, outputs)


@pytest.mark.parametrize("trips", [0, 1, 5, 300])
def test_loop_carried_state_and_scan_output_with_outer_reads(trips):
    # acc = acc * decay + i (decay read from the outer scope); the scan output stacks acc
    graph = loop_graph(
        [
            helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Cast", ["i"], ["fi"], to=F),
            helper.make_node("Mul", ["acc_in", "decay"], ["scaled"]),
            helper.make_node("Add", ["scaled", "fi"], ["acc_out"]),
            helper.make_node("Identity", ["acc_out"], ["y"]),
        ],
        [vi("c_out", BOOL, []), vi("acc_out", F, [3]), vi("y", F, [3])],
        extra_inputs=[vi("decay", F, [3])],
    )
    feeds = {
        "M": np.array(trips, np.int64),
        "acc0": np.array([1.0, 2.0, 3.0], np.float32),
        "decay": np.array([0.5, 0.9, 1.0], np.float32),
    }
    # the reference evaluator's Loop fails without a cond input
    got = check(model_of(graph), feeds, ("ort",))
    acc, rows = feeds["acc0"], []
    for i in range(trips):
        acc = acc * feeds["decay"] + np.float32(i)
        rows.append(acc)
    assert_close(got[0], acc, 1e-6, 1e-6, "numpy")
    assert_close(got[1], np.array(rows, np.float32).reshape(trips, 3), 1e-6, 1e-6, "numpy")


def test_loop_carried_value_that_grows_every_iteration():
    # the carried value's shape changes each iteration: [1], [2], [4], ... (a new plan each)
    graph = loop_graph(
        [
            helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Cast", ["i"], ["fi"], to=F),
            helper.make_node("Add", ["acc_in", "fi"], ["plus"]),
            helper.make_node("Concat", ["acc_in", "plus"], ["acc_out"], axis=0),
        ],
        [vi("c_out", BOOL, []), vi("acc_out", F, ["k"])],
    )
    feeds = {"M": np.array(6, np.int64), "acc0": np.array([1.0], np.float32)}
    got = check(model_of(graph), feeds, ("ort",))
    acc = feeds["acc0"]
    for i in range(6):
        acc = np.concatenate([acc, acc + i])
    assert_close(got[0], acc, 0, 0, "numpy")


def test_loop_ended_by_its_condition():
    # while sum < 100: acc = acc * 2 (M large): stops by cond, not by M
    graph = loop_graph(
        [
            helper.make_node("Mul", ["acc_in", "two"], ["acc_out"]),
            helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", "hundred"], ["c_out"]),
            helper.make_node("Identity", ["total"], ["t"]),
        ],
        [vi("c_out", BOOL, []), vi("acc_out", F, [2]), vi("t", F, [])],
        cond=True,
        extra_inputs=[vi("two", F, []), vi("hundred", F, [])],
        ranks=(1, 1),
    )
    feeds = {
        "M": np.array(1000, np.int64),
        "cond": np.array(True),
        "acc0": np.array([1.0, 2.0], np.float32),
        "two": np.array(2.0, np.float32),
        "hundred": np.array(100.0, np.float32),
    }
    got = check(model_of(graph), feeds, ("ort",))
    assert_close(got[0], np.array([64.0, 128.0], np.float32), 0, 0, "numpy")
    assert_close(got[1], np.array([6.0, 12, 24, 48, 96, 192], np.float32), 0, 0, "numpy")


# ---- scikit-learn exports -------------------------------------------------------------------


def _skl_check(model, x, rtol=1e-4, atol=1e-4):
    """onnxjit against onnxruntime on every output (ZipMap's list of dicts compared key by
    key), at batch 1 and the whole of ``x``."""
    sess = onnxjit.InferenceSession(model.SerializeToString())
    import onnxruntime as ort

    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    name = model.graph.input[0].name
    for batch in (x[:1], x):
        feeds = {name: np.ascontiguousarray(batch)}
        got = sess.run(None, feeds)
        want = ref.run(None, feeds)
        for g, w in zip(got, want):
            if isinstance(w, list):
                assert len(g) == len(w)
                for gd, wd in zip(g, w):
                    assert gd.keys() == wd.keys()
                    for k in wd:
                        np.testing.assert_allclose(gd[k], wd[k], rtol, atol)
            else:
                np.testing.assert_allclose(g, w, rtol, atol)


def _sk_data(n, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, 12)) * rng.uniform(0.1, 20, 12)).astype(np.float32)
    y = x[:, 0] / 20 - x[:, 1] / 10 + np.sin(x[:, 2])
    return x, y


def _to_onnx(estimator, x):
    pytest.importorskip("skl2onnx", reason="scikit-learn exports need skl2onnx (bench extra)")
    from skl2onnx import to_onnx

    from bench.workloads import real

    with real._skl2onnx_bool_fix():
        return to_onnx(estimator, x[:1], target_opset=real.ML_OPSET)


def test_sklearn_kneighbors_classifier_bench_export():
    pytest.importorskip("skl2onnx", reason="scikit-learn exports need skl2onnx (bench extra)")
    from bench.workloads import real

    x = real.sk_feeds("knn", 64)["X"]
    _skl_check(real.sk_model("knn"), x)


@pytest.mark.parametrize("p", [1, 2])
def test_sklearn_kneighbors_regressor(p):
    pytest.importorskip("sklearn", reason="scikit-learn exports need scikit-learn (bench extra)")
    from sklearn.neighbors import KNeighborsRegressor

    x, y = _sk_data(400)
    model = _to_onnx(KNeighborsRegressor(4, p=p, weights="distance").fit(x, y), x)
    _skl_check(model, _sk_data(50, 1)[0])


def test_sklearn_hist_gradient_boosting_classifier_bench_export():
    pytest.importorskip("skl2onnx", reason="scikit-learn exports need skl2onnx (bench extra)")
    from bench.workloads import real

    x = real.sk_feeds("hist_gb", 64)["X"]
    _skl_check(real.sk_model("hist_gb"), x)


def test_sklearn_hist_gradient_boosting_regressor():
    pytest.importorskip("sklearn", reason="scikit-learn exports need scikit-learn (bench extra)")
    from sklearn.ensemble import HistGradientBoostingRegressor

    x, y = _sk_data(600)
    est = HistGradientBoostingRegressor(max_iter=40, max_leaf_nodes=31, random_state=0)
    model = _to_onnx(est.fit(x, y), x)
    _skl_check(model, _sk_data(80, 2)[0])
