"""Mutation fuzzing (issue 6, item 7) and the regression tests of what it found.

``test_mutation_fuzz`` runs tests/fuzz_onnxjit.py in a subprocess (a segfault or a hang there
cannot take pytest down, and the last case started is named) for about 40 seconds: mutated
seed models (bytes and protobuf fields) with random feeds, where the only allowed outcomes are
success and an ``onnxjit.errors.OnnxJitError``. For a longer maintainer run set
``ONNXJIT_FUZZ_CASES`` (a case count, no time bound) and optionally ``ONNXJIT_FUZZ_SEED``:

    ONNXJIT_FUZZ_CASES=20000 ONNXJIT_FUZZ_SEED=1 pytest -s tests/test_fuzz.py -k mutation_fuzz

A process death (segfault, abort, hang) is recorded with the last case started and the fuzzer
restarts after it; deaths fail ``test_mutation_fuzz_process_survives``.

The tests below it rebuild each crash the fuzzer found, as a plain model, and assert the
onnxjit error that replaced the raw exception.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxjit
from onnxjit.errors import ModelCheckError, ModelLoadError

FUZZ = os.path.join(os.path.dirname(__file__), "fuzz_onnxjit.py")
CASES_ENV, SEED_ENV = "ONNXJIT_FUZZ_CASES", "ONNXJIT_FUZZ_SEED"
SECONDS = 40.0  # the suite's time bound
CASE_TIMEOUT = 60.0  # one case longer than this counts as a hang


@pytest.fixture(scope="module")
def fuzz_run(tmp_path_factory) -> dict:
    """Run the fuzzer once for this module: cases, crash records, and process deaths (a
    death is recorded with the last case started, and the fuzzer restarts after it)."""
    cases = int(os.environ.get(CASES_ENV) or 0)
    seed = int(os.environ.get(SEED_ENV) or 0)
    progress = tmp_path_factory.mktemp("fuzz") / "progress"
    t0 = time.monotonic()
    start, end = 0, cases or 1_000_000
    result: dict = {"seed": seed, "tried": 0, "crashes": [], "deaths": [], "outcomes": {}}
    while start < end:
        left = SECONDS - (time.monotonic() - t0)
        if not cases and left <= 1:
            break
        cmd = [sys.executable, FUZZ, "--seed", str(seed), "--start", str(start)]
        cmd += ["--cases", str(end - start), "--seconds", str(0 if cases else left)]
        cmd += ["--case-timeout", str(CASE_TIMEOUT), "--progress", str(progress)]
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=None if cases else left + 300
            )
            out, err, rc = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            out, err, rc = (e.stdout or b"").decode(), (e.stderr or b"").decode(), "timeout"
        records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        result["crashes"] += [r["crash"] for r in records if "crash" in r]
        summaries = [r["summary"] for r in records if "summary" in r]
        started = progress.read_text().split() if progress.exists() else []
        if summaries:
            result["tried"] += summaries[-1]["tried"]
            for k, v in summaries[-1]["outcomes"].items():
                result["outcomes"][k] = result["outcomes"].get(k, 0) + v
            assert rc == 0, err[-4000:]
            break
        last = int(started[-1]) if started else start
        result["tried"] += last - start + 1
        lines = [ln for ln in err.splitlines() if ln.strip()]
        result["deaths"].append(
            {
                "case": last,
                "exit": rc,
                "error": " | ".join(lines[:2])[:300],
                "repro": f"python tests/fuzz_onnxjit.py --seed {seed} --start {start} "
                f"--cases {last - start + 1}",
            }
        )
        start = last + 1
    result["seconds"] = round(time.monotonic() - t0, 1)
    print(f"\nfuzz: {json.dumps({k: v for k, v in result.items() if k != 'crashes'})}")
    return result


def test_mutation_fuzz_only_onnxjit_errors(fuzz_run) -> None:
    """Every case that ran to its end succeeded or raised an OnnxJitError."""
    assert fuzz_run["tried"] >= 20, fuzz_run  # the run did fuzz something
    assert not fuzz_run["crashes"], "\n".join(json.dumps(c) for c in fuzz_run["crashes"][:20])


def test_mutation_fuzz_process_survives(fuzz_run) -> None:
    """The fuzzing process never died (segfault, abort, hang past CASE_TIMEOUT). Deaths found
    so far: heap corruption from a pooling stride near 2**63 (see the stride test below)."""
    assert not fuzz_run["deaths"], json.dumps(fuzz_run["deaths"][:5])


# -- regressions: each a crash the fuzzer found, as a plain model -------------------------------


def _model(node: onnx.NodeProto, opset: int = 18, elem: int = TensorProto.FLOAT) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", elem, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def test_opset_version_beyond_int32_is_a_check_error() -> None:
    """Was: TypeError from onnx.defs.get_schema (a mutated opset version)."""
    for version in (1 << 40, -1, 0):
        m = _model(helper.make_node("Relu", ["x"], ["y"]))
        m.opset_import[0].version = version
        with pytest.raises(ModelCheckError) as info:
            onnxjit.InferenceSession(m.SerializeToString())
        msg = str(info.value)
        assert f"opset_import 'ai.onnx' version {version} is outside" in msg, msg
        assert "use a released opset" in msg
    m = _model(helper.make_node("Relu", ["x"], ["y"], domain="custom.x"))
    m.opset_import.add(domain="custom.x", version=1 << 40)
    with pytest.raises(onnxjit.OnnxJitError):
        onnxjit.InferenceSession(m.SerializeToString())


def test_undefined_element_type_of_an_input_is_a_check_error() -> None:
    """Was: ValueError "Enum DataType has no name defined for value 814" when a feed was
    checked against it (a mutated elem_type)."""
    m = _model(helper.make_node("Relu", ["x"], ["y"]))
    m.graph.input[0].type.tensor_type.elem_type = 814
    with pytest.raises(ModelCheckError) as info:
        onnxjit.InferenceSession(m.SerializeToString())
    msg = str(info.value)
    assert "main-graph input 'x' has element type 814" in msg
    assert "set tensor_type.elem_type to a TensorProto.DataType value" in msg


def test_non_utf8_op_type_is_a_load_error() -> None:
    """Was: TypeError from onnx.defs.get_schema: protobuf decodes a string field holding
    bytes that are not UTF-8 as bytes (a flipped byte in 'Flatten')."""
    data = _model(helper.make_node("Flatten", ["x"], ["y"])).SerializeToString()
    i = data.index(b"Flatten") + 6
    damaged = data[:i] + b"\xee" + data[i + 1 :]
    with pytest.raises(ModelLoadError) as info:
        onnxjit.InferenceSession(damaged)
    msg = str(info.value)
    assert "the string field model.graph.node[0].op_type holds bytes that are not UTF-8" in msg
    assert "b'Flatte\\xee'" in msg and "re-export the model" in msg
    # Names too: a graph input name with a stray continuation byte.
    data = _model(helper.make_node("Relu", ["x"], ["y"])).SerializeToString()
    damaged = data.replace(b"\n\x01x", b"\n\x01\x80", 1)
    with pytest.raises(ModelLoadError, match="not UTF-8"):
        onnxjit.InferenceSession(damaged)


def test_every_seed_model_runs_clean() -> None:
    """The fuzzer's seed models are valid: each runs on a feed of its declared types."""
    sys.path.insert(0, os.path.dirname(__file__))
    import fuzz_onnxjit

    for name, data in fuzz_onnxjit.seed_models().items():
        sess = onnxjit.InferenceSession(data)
        rng = np.random.default_rng(0)
        dims: dict[str, int] = {}
        feed = {a.name: fuzz_onnxjit.random_value(a, rng, dims, True) for a in sess.get_inputs()}
        if name == "data_sized":
            feed = {"s": np.array([2, 3], np.int64), "e": np.array([2, 3], np.int64)}
            feed["n"] = np.array(4, np.int64)
        outs = sess.run(None, feed)
        assert outs and all(isinstance(o, np.ndarray) for o in outs), name


def test_negative_declared_dims_are_unknown_dims_like_onnxruntime() -> None:
    """Was: the process aborted (an assertion in onnx's C++ Slice shape inference, reached
    through onnxjit's type-inference pass) for an input declared with dim_value -1 feeding
    Gather -> Slice. onnxruntime reads a negative dim_value as an unknown dimension; so does
    onnxjit now, with the same results, and the caller's ModelProto is left as it was."""
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["x", "i"], ["g"], axis=0),
            helper.make_node("Slice", ["g", "st", "en", "ax"], ["y"]),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [-1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, -1])],
        initializer=[
            onnx.numpy_helper.from_array(np.array([1], np.int64), "st"),
            onnx.numpy_helper.from_array(np.array([5], np.int64), "en"),
            onnx.numpy_helper.from_array(np.array([0], np.int64), "ax"),
        ],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    before = m.SerializeToString()
    sess = onnxjit.InferenceSession(m)
    assert m.SerializeToString() == before
    assert sess.get_inputs()[0].shape == [None, 3] and sess.get_inputs()[1].shape == [None]
    import onnxruntime as ort

    ref = ort.InferenceSession(before, providers=["CPUExecutionProvider"])
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    for idx in ([0, 2, 3], [1], [3, 2, 1, 0, 0, 1]):
        feed = {"x": x, "i": np.array(idx, np.int64)}
        np.testing.assert_array_equal(sess.run(None, feed)[0], ref.run(None, feed)[0])


def test_loop_trip_count_must_be_one_integer() -> None:
    """Was: a trip count M declared [4] ran trip[0] iterations (the fuzzer fed 2**63 - 1: a
    hang) and an empty M raised IndexError. onnxruntime refuses an M that is not a scalar;
    onnxjit raises InvalidArgumentError naming the node, the shape found and the fix."""
    import onnxruntime as ort

    from onnxjit.errors import InvalidArgumentError

    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c2"]),
            helper.make_node("Add", ["a", "one"], ["a2"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [1]),
        ],
        [
            helper.make_tensor_value_info("c2", TensorProto.BOOL, []),
            helper.make_tensor_value_info("a2", TensorProto.FLOAT, [1]),
        ],
        initializer=[onnx.numpy_helper.from_array(np.ones(1, np.float32), "one")],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "a0"], ["y"], name="loop", body=body)],
        "g",
        [
            helper.make_tensor_value_info("M", TensorProto.INT64, ["K"]),
            helper.make_tensor_value_info("a0", TensorProto.FLOAT, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    sess = onnxjit.InferenceSession(m.SerializeToString())
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    a0 = np.zeros(1, np.float32)
    for bad in ([(1 << 63) - 1, 1, 2, 3], []):
        feed = {"M": np.array(bad, np.int64), "a0": a0}
        with pytest.raises(Exception):  # noqa: B017 - any onnxruntime error
            ref.run(None, feed)
        with pytest.raises(InvalidArgumentError) as info:
            sess.run(None, feed)
        msg = str(info.value)
        assert "node 'loop' (Loop-" in msg and "trip count M must be one integer" in msg
        assert f"of shape [{len(bad)}]" in msg and "feed a scalar" in msg
    # One element is one trip count (3 iterations of +1).
    assert sess.run(None, {"M": np.array([3], np.int64), "a0": a0})[0].tolist() == [3.0]


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "Conv"])
def test_stride_near_int64_max_gives_onnxruntime_result(op: str) -> None:
    """Was: heap corruption (glibc aborted in a later malloc): a MaxPool stride of 2**63 - 1
    wrapped in the window kernel's 64-bit arithmetic. A dim with one window ignores its
    stride, as onnxruntime does; the values match onnxruntime's."""
    import onnxruntime as ort

    from onnxjit.errors import InvalidArgumentError

    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 2, 8, 8)).astype(np.float32)
    inits, inputs = [], ["x"]
    attrs = {"strides": [(1 << 63) - 1, 2]}
    if op == "Conv":
        w = rng.standard_normal((4, 2, 2, 2)).astype(np.float32)
        inits = [onnx.numpy_helper.from_array(w, "w")]
        inputs.append("w")
    else:
        attrs["kernel_shape"] = [2, 2]
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], **attrs)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "C", "H", "W"])],
        initializer=inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    sess = onnxjit.InferenceSession(m.SerializeToString())
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )[0]
    for _ in range(20):
        got = sess.run(None, {"x": x})[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # Pads that large cannot describe a window: refused, naming the attributes.
    del attrs["strides"]
    m.graph.node[0].ClearField("attribute")
    m.graph.node[0].attribute.extend(
        [helper.make_attribute(k, v) for k, v in attrs.items()]
        + [helper.make_attribute("pads", [0, 0, 1 << 40, 0])]
    )
    with pytest.raises(InvalidArgumentError, match=r"must each be below 2\*\*31"):
        onnxjit.InferenceSession(m.SerializeToString()).run(None, {"x": x})
