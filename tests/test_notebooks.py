"""The notebooks in notebooks/ run from top to bottom (their code cells, in order, in one
namespace, in a fresh process with a kernel cache of their own); their own assertions compare
onnxjit's results with numpy written independently."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))

_RUNNER = r"""
import json, sys
nb = json.load(open(sys.argv[1], encoding="utf-8"))
ns = {"__name__": "__main__"}
for i, cell in enumerate(nb["cells"]):
    if cell["cell_type"] == "code":
        exec(compile("".join(cell["source"]), f"{sys.argv[1]} cell {i}", "exec"), ns)
print("NOTEBOOK OK")
"""


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path):
    env = {**os.environ, "ONNXJIT_CACHE_DIR": str(tmp_path / "cache"), "ONNXJIT_PROGRESS": "off"}
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER, str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0 and "NOTEBOOK OK" in proc.stdout, proc.stderr[-3000:]
