"""The benchmark model builders of bench/workloads (T1, T2, C1, C2) build valid models that
onnxjit runs and that match onnxruntime.

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


def test_full_size_flops_are_the_published_figures():
    # ResNet-18 is 1.82 GMAC at 224x224, MobileNetV2 (width 1) 300 MMAC.
    assert cnn.resnet18(1, 224)[1] == pytest.approx(2 * 1.82e9, rel=0.01)
    assert cnn.mobilenet_v2(1, 224)[1] == pytest.approx(2 * 0.30e9, rel=0.01)


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

    n = harness.runs_per_block(t_jit_ms * 1e6, t_ort_ms * 1e6, block_ms)
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
