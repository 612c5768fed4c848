"""Packaging: kernels/ ships inside the onnxjit namespace, and the package imports cleanly."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import onnxjit
import onnxjit.kernels

PKG = Path(onnxjit.__file__).resolve().parent
INSTALLED = "site-packages" in str(PKG) and (PKG / "kernels").is_dir()


def test_kernels_live_in_the_onnxjit_namespace():
    assert onnxjit.kernels.__name__ == "onnxjit.kernels"
    spec = importlib.util.find_spec("onnxjit.kernels.cpu")
    assert spec is not None


def test_no_top_level_kernels_package_of_ours():
    # A top-level `kernels` would collide with an unrelated PyPI package of that name.
    spec = importlib.util.find_spec("kernels")
    if spec is not None and spec.origin:
        assert Path(spec.origin).resolve().parent != Path(onnxjit.kernels.__file__).parent


@pytest.mark.skipif(
    not INSTALLED,
    reason="onnxjit is installed in editable mode here; CI installs a real copy and checks it",
)
def test_installed_copy_carries_the_kernels():
    kernels_dir = Path(onnxjit.kernels.__file__).resolve().parent
    assert kernels_dir == PKG / "kernels"
    assert (kernels_dir / "_jit.py").is_file()
    assert (PKG / "demo" / "demo.onnx").is_file()


def test_import_is_clean_in_a_fresh_process():
    code = "import onnxjit, warnings; print(onnxjit.__version__)"
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == onnxjit.__version__
