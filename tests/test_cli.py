"""The ``onnxjit`` command (onnxjit/cli.py) and the shipped demo model.

The printed output values are parsed back and compared with onnxruntime's outputs for the same
model and inputs, so the test checks what a user reads, not onnxjit against itself.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxjit.cli import main
from onnxjit.demo import DEMO_PATH, build_demo_model

_OUTPUT = re.compile(r"^output (\S+): (\S+) \[([\d, ]*)\] \[(.*?)\]( \.\.\.)?$")


def run_cli(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the installed console script when there is one, else ``python -m onnxjit.cli``."""
    script = Path(sys.executable).with_name("onnxjit")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "onnxjit.cli"]
    return subprocess.run(
        [*cmd, *argv], capture_output=True, text=True, timeout=timeout, check=False
    )


def parse_outputs(stdout: str) -> dict[str, tuple[str, list[int], np.ndarray, bool]]:
    """name -> (dtype, shape, first values, truncated) from the 'output' lines."""
    found = {}
    for line in stdout.splitlines():
        m = _OUTPUT.match(line)
        if m:
            name, dtype, shape, values, more = m.groups()
            dims = [int(d) for d in shape.split(",") if d.strip()]
            vals = np.array([float(v) for v in values.split(",") if v.strip()])
            found[name] = (dtype, dims, vals, bool(more))
    return found


def ort_outputs(model_path: str, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feed)))


def assert_printed_match(stdout: str, want: dict[str, np.ndarray]) -> None:
    printed = parse_outputs(stdout)
    assert list(printed) == list(want), stdout
    for name, value in want.items():
        dtype, shape, vals, more = printed[name]
        assert dtype == str(value.dtype) and shape == list(value.shape), (name, stdout)
        flat = value.reshape(-1)
        n = min(6, flat.size)
        assert more == (flat.size > 6)
        # Values are printed with 5 decimals.
        np.testing.assert_allclose(vals, flat[:n].astype(np.float64), rtol=1e-4, atol=2e-5)


def test_shipped_demo_model_is_not_stale():
    assert DEMO_PATH.read_bytes() == build_demo_model().SerializeToString()
    onnx.checker.check_model(onnx.load(str(DEMO_PATH)), full_check=True)


def test_run_demo_without_a_model(tmp_path):
    image = np.random.default_rng(5).standard_normal((2, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "image.npy", image)
    proc = run_cli("run", "--input", f"image={tmp_path / 'image.npy'}", "--runs", "2")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # The console script may run the installed copy while this process imported the checkout
    # (or the reverse), so the printed path is checked by content, not spelling.
    shown = re.search(r"^model: (.+)$", out, re.M)
    assert shown is not None, out
    used = Path(shown.group(1))
    assert used.parts[-2:] == ("demo", "demo.onnx") and used.read_bytes() == DEMO_PATH.read_bytes()
    assert "input  image: float32 [2, 3, 16, 16]" in out
    assert_printed_match(out, ort_outputs(str(DEMO_PATH), {"image": image}))
    for label in ("session creation:", "first run:", "next 2 runs:"):
        assert label in out
    assert proc.stderr == ""


def test_run_demo_with_generated_inputs():
    proc = run_cli("run", "--runs", "0", "--dim", "batch=3")
    assert proc.returncode == 0, proc.stderr
    printed = parse_outputs(proc.stdout)
    assert printed["logits"][:2] == ("float32", [3, 10])
    assert printed["probabilities"][:2] == ("float32", [3, 10])
    assert "next" not in proc.stdout  # --runs 0: no timed runs


def _small_model(path: Path) -> None:
    w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), "w")
    b = numpy_helper.from_array(np.array([0.5, -0.5, 0.25], np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"]),
            helper.make_node("Add", ["h", "b"], ["z"]),
            helper.make_node("Relu", ["z"], ["y"]),
            helper.make_node("Shape", ["y"], ["shape"]),
        ],
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        initializer=[w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_run_model_with_input_file(tmp_path):
    model = tmp_path / "small.onnx"
    _small_model(model)
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = run_cli("run", str(model), "--input", f"x={tmp_path / 'x.npy'}", "--runs", "3")
    assert proc.returncode == 0, proc.stderr
    assert "input  x: float32 [5, 4]" in proc.stdout
    assert_printed_match(proc.stdout, ort_outputs(str(model), {"x": x}))
    assert "next 3 runs:" in proc.stdout and "median" in proc.stdout


# -- errors (in-process: faster, same code path) ----------------------------------------------


def test_missing_model_file(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.onnx")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("onnxjit: ") and "does not exist" in err


def test_invalid_model_file(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff\xff\xff")
    assert main(["run", str(bad)]) == 1
    assert "could not be decoded" in capsys.readouterr().err


def test_unknown_input_name(tmp_path, capsys):
    model = tmp_path / "small.onnx"
    _small_model(model)
    np.save(tmp_path / "x.npy", np.zeros((1, 4), np.float32))
    assert main(["run", str(model), "--input", f"q={tmp_path / 'x.npy'}", "--runs", "0"]) == 1
    err = capsys.readouterr().err
    assert "--input names ['q'] are not model inputs" in err and "['x']" in err


def test_input_file_unreadable(tmp_path, capsys):
    model = tmp_path / "small.onnx"
    _small_model(model)
    assert main(["run", str(model), "--input", f"x={tmp_path / 'missing.npy'}"]) == 1
    err = capsys.readouterr().err
    assert "--input x=" in err and "cannot read a .npy array" in err


def test_input_with_wrong_dtype(tmp_path, capsys):
    model = tmp_path / "small.onnx"
    _small_model(model)
    np.save(tmp_path / "x.npy", np.zeros((1, 4), np.float64))
    assert main(["run", str(model), "--input", f"x={tmp_path / 'x.npy'}", "--runs", "0"]) == 1
    err = capsys.readouterr().err
    assert "input 'x': expected element type tensor(float)" in err


def test_malformed_pairs(capsys):
    with pytest.raises(SystemExit, match="--input expects NAME=VALUE, found 'x'"):
        main(["run", "--input", "x"])
    assert main(["run", "--dim", "batch=two"]) == 2
    assert "--dim batch='two': expected an integer" in capsys.readouterr().err


def test_no_command(capsys):
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
