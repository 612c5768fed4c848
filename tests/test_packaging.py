"""Packaging: kernels/ ships inside the onnxjit namespace, and the package imports cleanly."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import onnxjit
import onnxjit.kernels

PKG = Path(onnxjit.__file__).resolve().parent
REPO = Path(__file__).resolve().parent.parent
INSTALLED = "site-packages" in str(PKG) and (PKG / "kernels").is_dir()


def test_kernels_live_in_the_onnxjit_namespace():
    assert onnxjit.kernels.__name__ == "onnxjit.kernels"
    spec = importlib.util.find_spec("onnxjit.kernels.cpu")
    assert spec is not None


def test_no_top_level_kernels_package_of_ours():
    # A top-level `kernels` would collide with an unrelated PyPI package of that name; the
    # installed distribution's file list must not carry one.
    # Look only outside the checkout: `pip install .` leaves onnxjit.egg-info in the source tree,
    # whose SOURCES.txt lists the repository layout (kernels/ included), and the checkout is on
    # sys.path when pytest runs from it.
    path = [p for p in sys.path if p and Path(p).resolve() != REPO]
    dists = list(importlib.metadata.distributions(name="onnxjit", path=path))
    files = (dists[0].files if dists else None) or []
    top_level = {Path(str(f)).parts[0] for f in files}
    assert "kernels" not in top_level
    assert "onnxjit" in top_level or not INSTALLED


@pytest.mark.skipif(
    not INSTALLED,
    reason="onnxjit is installed in editable mode here; CI installs a real copy and checks it",
)
def test_installed_copy_carries_the_kernels():
    kernels_dir = Path(onnxjit.kernels.__file__).resolve().parent
    assert kernels_dir == PKG / "kernels"
    assert (kernels_dir / "_jit.py").is_file()
    assert (PKG / "demo" / "demo.onnx").is_file()
    assert (PKG / "py.typed").is_file()


def test_the_package_declares_its_type_hints():
    # PEP 561: type checkers read onnxjit's annotations only when py.typed ships with it
    assert (REPO / "onnxjit" / "py.typed").is_file()
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"py.typed"' in pyproject


@pytest.mark.parametrize("where", ["repository root", "elsewhere"])
def test_import_is_clean_in_a_fresh_process(where, tmp_path):
    # From the repository root the checkout shadows any installed copy (sys.path[0] is the
    # working folder), so both the checkout and the installed copy must import on their own.
    cwd = REPO if where == "repository root" else tmp_path
    code = (
        "import onnxjit, onnxjit.kernels._jit, warnings; "
        "print(onnxjit.__version__, onnxjit.kernels.__name__, onnxjit.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
    )
    assert out.returncode == 0, out.stderr
    version, kernels_name, origin = out.stdout.split()
    assert version == onnxjit.__version__
    assert kernels_name == "onnxjit.kernels"
    if where == "repository root":
        assert Path(origin).resolve().parent == REPO / "onnxjit"


def test_every_package_in_the_tree_is_listed_for_installation():
    # pyproject lists packages by hand (kernels/ is mapped into onnxjit's namespace, which
    # automatic discovery cannot express); a package missing from the list installs without
    # its files, which an editable install hides.
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from 3.11")
    setup = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setup["packages"])
    roots = {name: REPO / folder for name, folder in setup["package-dir"].items()}
    in_tree = set()
    for name, root in roots.items():
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root).parts
            in_tree.add(".".join((name, *rel)))
    assert in_tree - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
