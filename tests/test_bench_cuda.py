"""``python -m bench.cuda`` (the GPU bench) runs end to end: here on numba-cuda's simulator, on
its quick elementwise case, so that the script a GPU session runs is known to work before a GPU
is lent. Its outputs are checked inside against onnxjit on the CPU."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
# bench/ is a folder of the checkout, not an installed package
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pytest  # noqa: E402

pytest.importorskip(
    "numba.cuda", reason="numba-cuda is not installed (pip install 'onnxjit[cuda]')"
)
pytest.importorskip("onnxruntime", reason="the bench compares with onnxruntime")

from bench import cuda as bench_cuda  # noqa: E402


def test_the_gpu_bench_writes_its_table(tmp_path):
    out = tmp_path / "gpu.md"
    argv = ["--quick", "--cases", "E1", "--seconds", "0", "--runs", "1", "--warmup", "0"]
    assert bench_cuda.main([*argv, "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("Device: ")
    rows = [line for line in text.splitlines() if line.startswith("| E1 gelu_erf/1024 |")]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    header = next(line for line in text.splitlines() if line.startswith("| case |"))
    names = [c.strip() for c in header.strip("|").split("|")]
    got = dict(zip(names, cells))
    for engine in ("onnxjit cuda", "onnxjit cuda bound", "onnxjit cpu"):
        assert got[engine].endswith(")"), got  # "median (best)" timings, not an error
    assert float(got["max err vs CPU"]) < 1e-5
