"""The benchmark model builders of bench/workloads (T1, T2, C1, C2, and issue 41's O1 relu_1x16,
G2 scikit-learn models with ZipMap, D1 alternating shapes) build valid models that onnxjit runs
and that match onnxruntime.

A correctness test, not a timing test: small sizes (hidden 64, sequence 16, 32x32 images) of
the same builders the benchmarks call at full size. Each model runs with onnxjit's default
optimisation level (all passes) and with optimisation disabled, so a pass that breaks a real
exporter pattern shows up here. The FLOP counts the builders put on the cases are checked
against an independent count over the shape-inferred graph.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import onnxjit  # noqa: E402
from bench.workloads import Case, cnn, transformer  # noqa: E402


def _ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _check(
    model: onnx.ModelProto,
    feed_list: list[dict[str, np.ndarray]],
    rtol: float,
    atol: float,
    levels: tuple[int, ...] = (99, 0),
) -> None:
    """onnxjit at each optimisation level matches onnxruntime on every feed dict."""
    onnx.checker.check_model(model, full_check=True)
    sessions = []
    for level in levels:
        so = onnxjit.SessionOptions()
        so.graph_optimization_level = level
        sessions.append((level, onnxjit.InferenceSession(model, so)))
    names = [o.name for o in model.graph.output]
    for feeds in feed_list:
        want = _ort_run(model, feeds)
        for level, sess in sessions:
            got = sess.run(None, feeds)
            assert len(got) == len(want)
            for name, g, w in zip(names, got, want):
                assert g.dtype == w.dtype, (level, name)
                assert g.shape == w.shape, (level, name)
                np.testing.assert_allclose(
                    g, w, rtol=rtol, atol=atol, err_msg=f"level {level}, output {name}"
                )


# ----------------------------------------------------------------------------------------------
# independent FLOP count: 2*M*N*K over MatMul/Gemm/Conv from shape inference


def _graph_flops(model: onnx.ModelProto) -> int:
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    shapes: dict[str, list[int]] = {}
    for vi in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        dims = vi.type.tensor_type.shape.dim
        shapes[vi.name] = [d.dim_value for d in dims]
    for init in model.graph.initializer:
        shapes[init.name] = list(init.dims)
    total = 0
    for node in model.graph.node:
        out = shapes[node.output[0]]
        if node.op_type == "MatMul":
            k = shapes[node.input[0]][-1]
            total += 2 * int(np.prod(out)) * k
        elif node.op_type == "Gemm":
            trans_a = next((a.i for a in node.attribute if a.name == "transA"), 0)
            a = shapes[node.input[0]]
            total += 2 * int(np.prod(out)) * (a[0] if trans_a else a[1])
        elif node.op_type == "Conv":
            w = shapes[node.input[1]]
            total += 2 * int(np.prod(out)) * int(np.prod(w[1:]))
    return total


def test_flops_bert_and_gpt2_match_the_graph():
    assert transformer.bert_flops(64, 2, 16, 2) == _graph_flops(
        transformer.bert_primitive(64, 2, 2, seq=16, batch=2)
    )
    assert transformer.gpt2_flops(64, 2, 8, 2) == _graph_flops(
        transformer.gpt2_step(64, 4, 2, past=8, batch=2)
    )


def test_flops_cnns_match_the_graph():
    model, flops = cnn.resnet18(2, 32, classes=10)
    assert flops == _graph_flops(model)
    model, flops = cnn.mobilenet_v2(1, 32, classes=10, width=0.5)
    assert flops == _graph_flops(model)
    model, flops = cnn.resnet50(1, 32, classes=10)
    assert flops == _graph_flops(model)


def test_full_size_flops_are_the_published_figures():
    # ResNet-18 is 1.82 GMAC at 224x224, MobileNetV2 (width 1) 300 MMAC.
    assert cnn.resnet18(1, 224)[1] == pytest.approx(2 * 1.82e9, rel=0.01)
    assert cnn.mobilenet_v2(1, 224)[1] == pytest.approx(2 * 0.30e9, rel=0.01)
    # ResNet-50 (v1.5) is 4.09 GMAC at 224x224
    assert cnn.resnet50(1, 224)[1] == pytest.approx(2 * 4.09e9, rel=0.01)


# ----------------------------------------------------------------------------------------------
# T1


def _node_types(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in model.graph.node}


def test_bert_primitive_is_written_with_primitive_ops():
    ops = _node_types(transformer.bert_primitive(64, 2, 1, seq=16))
    assert {"ReduceMean", "Pow", "Sqrt", "Erf", "Softmax", "Transpose", "Reshape"} <= ops
    assert not ops & {"LayerNormalization", "Gelu", "Attention"}


@pytest.mark.parametrize("opset", [17, 18])
def test_bert_primitive_static_matches_onnxruntime(opset):
    model = transformer.bert_primitive(64, 2, 2, seq=16, batch=2, opset=opset)
    _check(model, [transformer.bert_feeds(16, 2, pad=3)], rtol=1e-4, atol=1e-4)


def test_bert_primitive_scale_as_mul_matches_onnxruntime():
    model = transformer.bert_primitive(64, 2, 1, seq=16, scale="mul")
    divs = sum(n.op_type == "Div" for n in model.graph.node)
    base = transformer.bert_primitive(64, 2, 1, seq=16)
    assert sum(n.op_type == "Div" for n in base.graph.node) == divs + 1  # one layer
    _check(model, [transformer.bert_feeds(16, 1, pad=3)], rtol=1e-4, atol=1e-4)


def test_bert_primitive_dynamic_runs_several_sizes():
    model = transformer.bert_primitive(64, 2, 2, dynamic=True)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param for d in dims] == ["batch", "seq"]
    feeds = [
        transformer.bert_feeds(16, 1, pad=2, seed=4),
        transformer.bert_feeds(9, 3, seed=5),
        transformer.bert_feeds(33, 2, pad=7, seed=6),
    ]
    _check(model, feeds, rtol=1e-4, atol=1e-4)


def test_bert_torch_torchscript_matches_onnxruntime():
    model = transformer.bert_torch(64, 2, 2, seq=16)
    assert "LayerNormalization" in _node_types(model)
    _check(model, [transformer.bert_feeds(16, 1, pad=3)], rtol=1e-4, atol=1e-4)


def test_bert_torch_torchscript_dynamic_matches_onnxruntime():
    model = transformer.bert_torch(64, 2, 1, seq=16, dynamic=True)
    feeds = [transformer.bert_feeds(16, 1, pad=3), transformer.bert_feeds(11, 2, seed=7)]
    _check(model, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_bert_torch_dynamo_matches_onnxruntime():
    # slow: the dynamo exporter takes about a minute on a cold cache (then it is cached)
    model = transformer.bert_torch(64, 2, 1, seq=16, exporter="dynamo")
    _check(model, [transformer.bert_feeds(16, 1, pad=3)], rtol=1e-4, atol=1e-4)


def test_bert_torch_export_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNXJIT_BENCH_CACHE", str(tmp_path))
    first = transformer.bert_torch(32, 2, 1, seq=8)
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].suffix == ".onnx"
    again = transformer.bert_torch(32, 2, 1, seq=8)
    assert again.SerializeToString() == first.SerializeToString()
    # another parameter set is another file
    transformer.bert_torch(32, 2, 1, seq=8, batch=2)
    assert len(list(tmp_path.iterdir())) == 2


def test_bert_builders_reject_bad_parameters():
    with pytest.raises(ValueError, match="multiple of heads"):
        transformer.bert_primitive(100, 3, 1)
    with pytest.raises(ValueError, match="position"):
        transformer.bert_primitive(64, 2, 1, seq=1000)
    with pytest.raises(ValueError, match="scale"):
        transformer.bert_primitive(64, 2, 1, scale="sqrt")
    with pytest.raises(ValueError, match="exporter"):
        transformer.bert_torch(64, 2, 1, exporter="onnxscript")


# ----------------------------------------------------------------------------------------------
# T2


def test_gpt2_step_matches_onnxruntime():
    model = transformer.gpt2_step(64, 4, 2, past=12, batch=2)
    ops = _node_types(model)
    assert {"Tanh", "Split", "Concat", "Softmax"} <= ops
    names = [o.name for o in model.graph.output]
    assert names == ["output", "present_key_0", "present_value_0", "present_key_1",
                     "present_value_1"]  # fmt: skip
    _check(model, [transformer.gpt2_feeds(64, 4, 2, past=12, batch=2)], rtol=1e-4, atol=1e-4)


def test_gpt2_step_dynamic_runs_several_past_lengths():
    model = transformer.gpt2_step(64, 4, 1, dynamic=True)
    feeds = [
        transformer.gpt2_feeds(64, 4, 1, past=5, batch=1, seed=8),
        transformer.gpt2_feeds(64, 4, 1, past=20, batch=3, seed=9),
    ]
    _check(model, feeds, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------------------------
# C1, C2


def test_resnet18_matches_onnxruntime():
    model, _ = cnn.resnet18(2, 32, classes=10)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("BatchNormalization") == ops.count("Conv") == 20
    _check(model, [cnn.image_feeds(2, 32)], rtol=1e-4, atol=1e-3)


def test_resnet50_matches_onnxruntime():
    model, _ = cnn.resnet50(1, 32, classes=10)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("BatchNormalization") == ops.count("Conv") == 53
    _check(model, [cnn.image_feeds(1, 32)], rtol=1e-4, atol=1e-3)


def test_mobilenet_v2_matches_onnxruntime():
    model, _ = cnn.mobilenet_v2(1, 32, classes=10, width=0.5)
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    depthwise = [n for n in convs if next(a.i for a in n.attribute if a.name == "group") > 1]
    assert len(depthwise) == 17
    assert sum(n.op_type == "BatchNormalization" for n in model.graph.node) == len(convs)
    _check(model, [cnn.image_feeds(1, 32)], rtol=1e-4, atol=1e-3)


# ----------------------------------------------------------------------------------------------
# the Case lists the harness consumes


def _check_case_list(cases: list[Case], workload: str) -> None:
    assert cases
    assert len({c.name for c in cases}) == len(cases)
    for c in cases:
        assert isinstance(c, Case) and c.workload == workload
        assert c.flops and c.flops > 0
        graph_inputs = {i.name for i in c.model.graph.input} - {
            t.name for t in c.model.graph.initializer
        }
        assert set(c.feeds) == graph_inputs
        assert c.flops == _graph_flops(c.model)


def test_quick_cases_t2_c1_c2():
    _check_case_list(transformer.cases_t2(True), "T2")
    _check_case_list(cnn.cases_c1(True), "C1")
    _check_case_list(cnn.cases_c2(True), "C2")


@pytest.mark.slow
def test_quick_cases_t1():
    # slow on a cold export cache (the TorchScript export of the hidden-256 model)
    _check_case_list(transformer.cases_t1(True), "T1")


@pytest.mark.parametrize("level", ["disabled", "basic", "extended", "all"])
def test_bench_sessions_share_the_optimisation_level(level):
    """``python -m bench --level``: both engines get the same graph optimisation level (the
    names map onto onnxruntime's enum and onnxjit's, whose values agree), and the unfused
    model still matches."""
    from bench import harness
    from bench.workloads import mlp

    case = mlp.build("gemm", 1)
    jit, ort_sess, _ = harness.make_sessions(case, threads=1, level=level)
    got = int(ort_sess.get_session_options().graph_optimization_level)
    assert int(jit._options.graph_optimization_level) == got
    assert got == {"disabled": 0, "basic": 1, "extended": 2, "all": 99}[level]
    np.testing.assert_allclose(
        jit.run(None, case.feeds)[0], ort_sess.run(None, case.feeds)[0], rtol=1e-4, atol=1e-4
    )


@pytest.mark.parametrize(
    "t_jit_ms, t_ort_ms, block_ms",
    [(3.0, 1.3, 5.0), (1.3, 3.0, 5.0), (0.006, 0.005, 5.0), (25.0, 30.0, 5.0), (1.0, 1.0, 5.0)],
)
def test_blocks_have_equal_run_counts_filling_the_slower_engines_block(
    t_jit_ms, t_ort_ms, block_ms
):
    # the harness gives both engines one count (the median of unequal counts leaned on the
    # first run after the pause for the slower engine only); at least three runs, and the
    # slower engine's block lasts at least block_ms
    from bench import harness

    n = harness.runs_per_block([t_jit_ms * 1e6, t_ort_ms * 1e6], block_ms)
    slower = max(t_jit_ms, t_ort_ms)
    assert n >= harness.MIN_BLOCK_RUNS == 3
    assert n * slower >= block_ms
    assert n == 3 or (n - 1) * slower < block_ms  # no more runs than that takes


# ----------------------------------------------------------------------------------------------
# bench/ops.py: the one-node models of the operator sweep


def _sweep_ops() -> list[str]:
    from bench import ops

    return [o for o in f"{ops.UNARY},{ops.BINARY}".split(",") if o]


@pytest.mark.parametrize("op", _sweep_ops())
def test_operator_sweep_models_run_and_match_onnxruntime(op):
    """Every one-node model of ``python -m bench.ops`` is valid, its inputs lie in the
    operator's domain, and onnxjit matches onnxruntime on it (the sweep's ratios mean
    something only then)."""
    from bench import ops

    c = ops.case(op, 2048)
    for name, x in c.feeds.items():
        assert np.isfinite(x).all(), (op, name)
    _check(c.model, [c.feeds], rtol=c.rtol, atol=c.atol, levels=(99,))


# ----------------------------------------------------------------------------------------------
# issue 41: O1's lone Relu, G2's scikit-learn models (ZipMap on), D1's alternating shapes


def _check_outputs(
    model: onnx.ModelProto,
    feed_list: list[dict[str, np.ndarray]],
    rtol: float,
    atol: float,
    levels: tuple[int, ...] = (99, 0),
) -> None:
    """Like :func:`_check` through the harness's comparison, which takes ZipMap's list of maps;
    the feed dicts run one after another on the same sessions (so they alternate)."""
    from bench import harness

    onnx.checker.check_model(model, full_check=True)
    sessions = []
    for level in levels:
        so = onnxjit.SessionOptions()
        so.graph_optimization_level = level
        sessions.append((level, onnxjit.InferenceSession(model, so)))
    for feeds in feed_list:
        want = _ort_run(model, feeds)
        for level, sess in sessions:
            why = harness.compare_outputs(sess.run(None, feeds), want, rtol, atol)
            assert why is None, f"level {level}: {why}"


def test_o1_relu_1x16_is_one_relu_node():
    from bench.workloads import overhead

    case = overhead.build_relu()
    assert (case.workload, case.name) == ("O1", "relu_1x16")
    assert [n.op_type for n in case.model.graph.node] == ["Relu"]
    assert [(o.domain, o.version) for o in case.model.opset_import] == [("", 17)]
    (x,) = case.feeds.values()
    assert x.dtype == np.float32 and x.shape == (1, 16) and (x < 0).any() and (x > 0).any()
    _check(case.model, [case.feeds], rtol=0, atol=0)
    names = [c.name for c in overhead.cases(True)]
    assert names[0].startswith("tiny_ops/") and "relu_1x16" in names  # --cold takes the first


def _zipmap_output(model: onnx.ModelProto) -> onnx.ValueInfoProto:
    out = model.graph.output[-1]
    assert out.type.sequence_type.elem_type.HasField("map_type"), out
    return out


@pytest.mark.parametrize("kind", ["sk_scaler_logreg", "rf_clf"])
def test_g2_sklearn_models_with_zipmap_match_onnxruntime(kind):
    """G2's models come out of skl2onnx with its default options (ZipMap on), run at batch 1,
    and onnxjit matches onnxruntime on them, maps included; a batch of 32 gets more than one
    class, so the model is not trivially constant."""
    pytest.importorskip("sklearn")
    pytest.importorskip("skl2onnx")
    from bench.workloads import classic_ml

    case = classic_ml.build(kind, 1)
    model = case.model
    ops = [n.op_type for n in model.graph.node]
    assert ops[-1] == "ZipMap"
    if kind == "sk_scaler_logreg":
        assert {"Scaler", "LinearClassifier"} <= set(ops)
    else:
        (tree,) = [n for n in model.graph.node if n.op_type == "TreeEnsembleClassifier"]
        tree_ids = next(a.ints for a in tree.attribute if a.name == "nodes_treeids")
        assert len(set(tree_ids)) == 100
    _zipmap_output(model)
    (x,) = case.feeds.values()
    assert x.shape == (1, classic_ml.N_FEATURES) and x.dtype == np.float32
    batch = classic_ml.build(kind, 32)
    labels = _ort_run(model, batch.feeds)[0]
    assert len(set(labels.tolist())) > 1
    _check_outputs(model, [case.feeds, batch.feeds], case.rtol, case.atol)
    assert [c.name for c in classic_ml.cases(True)] == ["sk_scaler_logreg/b1", "rf_clf/b1"]


def test_compare_outputs_zipmap():
    """The harness compares ZipMap outputs map by map: keys exactly, values within tolerance."""
    from bench import harness

    label = np.array([1, 0], np.int64)
    want = [label, [{0: 0.25, 1: 0.75}, {0: 0.5, 1: 0.5}]]
    same = [label.copy(), [{1: 0.75 + 1e-7, 0: 0.25}, {0: 0.5, 1: 0.5}]]
    assert harness.compare_outputs(same, want, 1e-4, 1e-5) is None
    # numpy keys and values, as an engine may return them
    as_numpy = [label, [{np.int64(k): np.float32(v) for k, v in m.items()} for m in want[1]]]
    assert harness.compare_outputs(as_numpy, want, 1e-4, 1e-5) is None
    far = [label, [{0: 0.25, 1: 0.75}, {0: 0.4, 1: 0.5}]]
    why = harness.compare_outputs(far, want, 1e-4, 1e-5)
    assert why and why.startswith("output 1[1]: 1 of 2 map values differ (key 0")
    keys = [label, [{0: 0.25, 2: 0.75}, {0: 0.5, 1: 0.5}]]
    assert "map keys [0, 2], onnxruntime gives [0, 1]" in harness.compare_outputs(
        keys, want, 1e-4, 1e-5
    )
    short = [label, want[1][:1]]
    assert "1 elements, onnxruntime gives 2" in harness.compare_outputs(short, want, 1e-4, 1e-5)
    tensor = [label, np.array([[0.25, 0.75], [0.5, 0.5]], np.float32)]
    assert "ndarray, onnxruntime gives a list" in harness.compare_outputs(tensor, want, 1e-4, 1e-5)
    not_maps = [label, [[0.25, 0.75], [0.5, 0.5]]]
    assert "list, onnxruntime gives a map" in harness.compare_outputs(not_maps, want, 1e-4, 1e-5)
    wrong_label = [np.array([1, 1], np.int64), want[1]]
    assert harness.compare_outputs(wrong_label, want, 1e-4, 1e-5) == (
        "output 0: 1 of 2 values differ"
    )


def test_d1_alternating_cases_have_two_shapes_and_match_onnxruntime():
    """D1's alt/... cases: shape B has A's inputs and dtypes and differs from A only in the
    dynamic dimension; onnxjit matches onnxruntime with A and B alternating on one session."""
    from bench.workloads import dynamic

    cases = [c for c in dynamic.cases(True) if c.alternate is not None]
    assert [c.name for c in cases] == [
        "alt/mlp_dyn_batch/b1,b2",
        "alt/bert_prim_dyn_seq/h256x4/s16,s32",
    ]
    for c in cases:
        assert c.name.startswith("alt/") and c.sizes is None
        graph_inputs = {i.name for i in c.model.graph.input}
        assert set(c.feeds) == set(c.alternate) == graph_inputs
        for name, a in c.feeds.items():
            b = c.alternate[name]
            assert a.dtype == b.dtype and a.ndim == b.ndim and a.shape != b.shape
        # A, B, A, B on one session: the first case at both levels, BERT (slower to compile
        # unoptimised) at the default level
        levels = (99, 0) if "mlp" in c.name else (99,)
        _check_outputs(c.model, [c.feeds, c.alternate] * 2, c.rtol, c.atol, levels=levels)


def test_issue_41_target_flags():
    """Issue 41's targets flag alongside issue 4's, each naming its issue."""
    from bench import harness

    def flags(workload: str, name: str, ratio: float) -> list[str]:
        return harness.target_flags(workload, name, ratio)

    assert flags("O1", "relu_1x16", 1.32) == ["target <= 1.2 missed (1.10x, issue 41)"]
    assert flags("O1", "relu_1x16", 1.2) == []
    assert flags("O1", "tiny_ops/195", 0.9) == ["target <= 0.6 missed (1.50x, issue 41)"]
    assert flags("G2", "sk_scaler_logreg/b1", 1.1) == ["target <= 1.0 missed (1.10x, issue 41)"]
    assert flags("G2", "rf_clf/b1", 1.1) == ["target <= 1.0 missed (1.10x, issue 41)"]
    assert flags("T2", "gpt2_step/h256x4/past128", 1.3) == [
        "target <= 1.0 missed (1.30x, issue 41)"
    ]
    assert flags("D1", "alt/mlp_dyn_batch/b1,b2", 1.06) == [
        "target <= 1.05 missed (1.01x, issue 41)"
    ]
    assert flags("D1", "mlp_dyn_batch/b32+10", 2.0) == []
    # issue 4's stay as they were
    assert flags("G1", "rf_clf/b100", 0.6) == ["target <= 0.5 missed (1.20x, issue 4)"]
    assert flags("G1", "rf_clf/b1", 0.6) == []
    assert flags("M1", "gemm/b1", 1.8) == ["target <= 1.5 missed (1.20x, issue 4)"]


def test_measure_alternating_reports_both_engines_ratios():
    """The alternating measurement on a one-node model with a dynamic batch: onnxjit's
    alternating / repeated ratio with its interval, onnxruntime's beside it, the engines'
    alternating medians, and the row left out of the geometric means."""
    from bench import __main__ as bench_main
    from bench import harness
    from bench.workloads import Case
    from bench.workloads._build import make_model, value_info

    model = make_model(
        [onnx.helper.make_node("Relu", ["x"], ["y"])],
        [value_info("x", np.float32, ["N", 16])],
        [value_info("y", np.float32, ["N", 16])],
    )
    r = np.random.default_rng(0)
    case = Case(
        "D1",
        "alt/relu/b1,b2",
        model,
        {"x": r.standard_normal((1, 16), dtype=np.float32)},
        alternate={"x": r.standard_normal((2, 16), dtype=np.float32)},
    )
    sessions = harness.make_sessions(case, threads=1)[:2]  # no spinning pool: quick pauses
    res = harness.measure_case(case, sessions=sessions, block_ms=0.1)
    assert res.error is None and res.void is None, (res.error, res.void)
    assert res.kind == "alternating" and res.rounds == harness.MIN_ROUNDS
    assert res.ci_low <= res.ratio <= res.ci_high and res.ratio > 0
    lo_ort = res.extra["ort_ratio"]
    assert lo_ort[1] <= lo_ort[0] <= lo_ort[2] and lo_ort[0] > 0
    assert res.jit_ns > 0 and res.ort_ns > 0 and res.extra["jit_repeated_ns"] > 0
    assert set(res.extra["medians_ns"]["jit"]) == {"alt_A", "alt_B", "rep_A", "rep_B"}
    assert res.flags[0].startswith("ratio: onnxjit's time per run with A, B alternating")
    assert bench_main.fmt_ratio(res).startswith("alt/rep ")
    plain = harness.Result("D1", "mlp_dyn_batch/b32+10", ratio=2.0)
    means, overall = harness.summary([res, plain])
    assert means == {"D1": 2.0} and overall == 2.0


@pytest.mark.parametrize("epilogue", ["none", "bias", "bias+clip", "bias+residual"])
def test_layer_cases_match_onnxruntime(epilogue):
    """``python -m bench.layers``: its one-layer models (at a small plane here, and one
    projection) run in onnxjit and match onnxruntime."""
    from bench import layers

    case = layers.conv_case(24, 40, 9, epilogue)
    _check(case.model, [case.feeds], case.rtol, case.atol)
    assert case.flops == 2 * 24 * 40 * 81
    mm = layers.matmul_case(5, 48, 33)
    _check(mm.model, [mm.feeds], mm.rtol, mm.atol)
