"""warmup(), the ``onnxjit warmup`` command, stats() and the compile progress bar (issue 5).

Results are checked against onnxruntime; compile counts against Numba's own compile events
(``onnxjit.compile_count()``), which the statistics must agree with.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit import cli, progress


def _model(d_in: int = 24, d_h: int = 40) -> onnx.ModelProto:
    rng = np.random.default_rng(11)
    inits = [
        numpy_helper.from_array(rng.standard_normal((d_in, d_h)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(d_h).astype(np.float32), "b"),
    ]
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["x2"]),  # a generated (fused) kernel
        helper.make_node("Tanh", ["x2"], ["xt"]),
        helper.make_node("Sub", ["xt", "x"], ["xs"]),
        helper.make_node("MatMul", ["xs", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["h"]),
        helper.make_node("Sigmoid", ["h"], ["s"]),
        helper.make_node("Mul", ["h", "s"], ["a"]),
        helper.make_node("Softmax", ["a"], ["y"], axis=-1),
        helper.make_node("ReduceSum", ["ids"], ["t"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "warm",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", d_in]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [3]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", d_h]),
            helper.make_tensor_value_info("t", TensorProto.INT64, []),
        ],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def _feed(batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((batch, 24)).astype(np.float32),
        "ids": np.array([3, -1, 7], np.int64),
    }


def _check(sess: onnxjit.InferenceSession, feed: dict) -> None:
    ref = ort.InferenceSession(_model().SerializeToString(), providers=["CPUExecutionProvider"])
    for got, want in zip(sess.run(None, feed), ref.run(None, feed)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_warmup_compiles_ahead_so_runs_of_those_shapes_compile_nothing():
    sess = onnxjit.InferenceSession(_model().SerializeToString())
    stats = sess.warmup(shapes=[{"x": [4, 24]}, {"x": [1, 24]}])  # ids has a fixed shape
    assert stats["plan_signatures"] == 2 and stats["runs"] == 2
    before = onnxjit.compile_count()
    for batch in (4, 1):
        _check(sess, _feed(batch))
    assert onnxjit.compile_count() == before
    assert sess.stats()["plan_signatures"] == 2


def test_stats_list_the_kernels_a_fresh_process_needs(tmp_path):
    """In a fresh process with an empty cache every kernel the model needs is compiled for
    this session: the entries must name real functions and files, agree with Numba's compile
    count, and count the calls of the node that needed them."""
    import subprocess
    import sys

    model = tmp_path / "m.onnx"
    onnx.save(_model(), model)
    code = f"""
import json, numpy as np, onnxjit
sess = onnxjit.InferenceSession({str(model)!r})
feed = {{"x": np.ones((3, 24), np.float32), "ids": np.array([1, 2, 3], np.int64)}}
base = onnxjit.compile_count()
st = sess.warmup(feeds=feed)
for _ in range(4):
    sess.run(None, feed)
st = sess.stats()
st["process_compiles"] = onnxjit.compile_count()
print("STATS " + json.dumps(st, default=str))
"""
    env = {**__import__("os").environ, "ONNXJIT_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    st = next(
        __import__("json").loads(ln[6:]) for ln in proc.stdout.splitlines() if ln[:6] == "STATS "
    )
    assert st["kernels_loaded"] == 0 and st["kernels_compiled"] >= 3
    assert st["compile_seconds"] > 0
    names = [k["name"] for k in st["kernels"]]
    assert any("gemm" in n for n in names) and any("softmax" in n for n in names), names
    for k in st["kernels"]:
        assert Path(k["source"]).is_file(), k
        assert k["origin"] == "compiled" and k["seconds"] > 0
        if k["node"] is not None:
            assert k["calls"] == 5, k  # the warm-up run and the four after it
    generated = [k for k in st["kernels"] if "onnxjit_gen_" in k["name"]]
    assert generated and all(st["cache_dir"] in k["source"] for k in generated)
    # each outermost compile is one entry; nested helper compiles are counted by Numba too
    assert st["kernels_compiled"] <= st["process_compiles"]


def test_warmup_needs_a_shape_for_every_free_dimension():
    sess = onnxjit.InferenceSession(_model().SerializeToString())
    with pytest.raises(onnxjit.InvalidInputError, match=r"input 'x' has shape \[batch, 24\]"):
        sess.warmup()
    with pytest.raises(onnxjit.InvalidInputError, match="'nope'.*not inputs of the model"):
        sess.warmup(shapes={"x": [1, 24], "nope": [2]})
    with pytest.raises(onnxjit.InvalidInputError, match="input 'x'"):
        sess.warmup(shapes={"x": [2, 25]})  # a fixed dimension that does not match
    _check(sess, _feed(2))  # the session is unharmed


def test_warmup_command_fills_the_cache(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    assert cli.main(["warmup", str(path), "--shape", "x=2x24", "--also", "x=5,24"]) == 0
    out = capsys.readouterr().out
    assert "warmed: x=[2, 24]" in out and "warmed: x=[5, 24]" in out
    assert "kernel cache:" in out and "kernels compiled:" in out
    assert cli.main(["warmup", str(path)]) == 1
    assert "--shape x=DIMS" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="expected integer dimensions"):
        cli.main(["warmup", str(path), "--shape", "x=2xq"])


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _first_run_output(monkeypatch, setting: str | None, stream: io.StringIO) -> str:
    monkeypatch.setattr(progress, "DELAY", 0.0)
    monkeypatch.setattr("sys.stderr", stream)
    so = onnxjit.SessionOptions()
    if setting is not None:
        so.add_session_config_entry("onnxjit.progress", setting)
    sess = onnxjit.InferenceSession(_model().SerializeToString(), so)
    _check(sess, _feed(6))
    return stream.getvalue()


def test_progress_bar_on_a_terminal(monkeypatch):
    out = _first_run_output(monkeypatch, None, _Terminal())
    assert "onnxjit: compiling" in out and "node" in out


@pytest.mark.parametrize("setting, stream", [(None, io.StringIO()), ("off", _Terminal())])
def test_progress_bar_silent_off_a_terminal_or_when_disabled(monkeypatch, setting, stream):
    assert _first_run_output(monkeypatch, setting, stream) == ""


def test_progress_setting_checked():
    so = onnxjit.SessionOptions()
    so.add_session_config_entry("onnxjit.progress", "sometimes")
    with pytest.raises(onnxjit.InvalidArgumentError, match="'sometimes'.*'auto', 'on' or 'off'"):
        onnxjit.InferenceSession(_model().SerializeToString(), so)


def test_identical_fused_groups_share_one_kernel():
    """Two chains that differ only in the tensors they read compile (or load) one generated
    kernel between them; a constant no other test uses keeps the kernel new to this process."""
    c = numpy_helper.from_array(np.array(0.8173, np.float32), "c")
    nodes = []
    for side in ("p", "q"):
        nodes += [
            helper.make_node("Mul", [side, "c"], [f"{side}1"]),
            helper.make_node("Tanh", [f"{side}1"], [f"{side}2"]),
            helper.make_node("Sub", [f"{side}2", side], [f"{side}_out"]),
        ]
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", 5]) for n in ("p", "q")]
    out = [helper.make_tensor_value_info(f"{n}_out", TensorProto.FLOAT, ["n", 5]) for n in "pq"]
    model = helper.make_model(
        helper.make_graph(nodes, "twins", vi, out, [c]),
        opset_imports=[helper.make_opsetid("", 18)],
    )
    model.ir_version = 9
    sess = onnxjit.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(5)
    feed = {n: rng.standard_normal((3, 5)).astype(np.float32) for n in ("p", "q")}
    stats = sess.warmup(feeds=feed)
    fused = [n for n in sess.graph_nodes() if n.op_type == "FusedElementwise"]
    assert len(fused) == 2
    generated = [k for k in stats["kernels"] if "onnxjit_gen_" in k["name"]]
    assert len(generated) == 1, generated
    want = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    for got, w in zip(sess.run(None, feed), want):
        np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-6)
