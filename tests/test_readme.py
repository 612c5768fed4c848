"""The README tells the truth about what is generated from the code."""

from __future__ import annotations

import re
from pathlib import Path

import onnxjit  # noqa: F401
from onnxjit.registry import supported_ops_markdown

README = Path(__file__).resolve().parent.parent / "README.md"


def _section(name: str) -> str:
    text = README.read_text()
    m = re.search(rf"<!-- {name} -->\n(.*?)<!-- /{name} -->", text, re.S)
    assert m, f"README.md has no <!-- {name} --> section"
    return m.group(1)


def test_ops_table_is_current():
    assert _section("ops-table") == supported_ops_markdown(), (
        "the supported-operator table in README.md is stale; regenerate it with "
        "tests/update_readme.py"
    )


def test_ci_runs_the_readme_test_command():
    ci = (README.parent / ".ci" / "run").read_text()
    assert "test-command" in ci
    cmd = _section("test-command")
    assert "pytest" in cmd and "pip install" in cmd
