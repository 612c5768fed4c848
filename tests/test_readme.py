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


def test_passes_table_is_current():
    import update_readme

    assert _section("passes-table") == update_readme.passes_markdown(), (
        "the graph-pass table in README.md is stale; regenerate it with tests/update_readme.py"
    )


def test_ops_table_lists_versions_and_element_types():
    """Every row names its versions and a non-empty element-type summary from the schemas."""
    rows = [r for r in supported_ops_markdown().splitlines()[2:] if r]
    cells = {}
    for row in rows:
        domain, op, versions, types = (c.strip() for c in row.strip("|").split("|"))
        assert versions and types, f"row without versions or types: {row}"
        cells[(domain, op)] = (versions, types)
    # Spot checks against onnx's schemas: Add-14 allows every int width and bfloat16; Add-6
    # allowed only float16/float/double and 32/64-bit ints; StringNormalizer has no type
    # constraint, only tensor(string).
    versions, types = cells[("ai.onnx", "Add")]
    assert versions.startswith("6, 7") and "int8-64" in types and "bfloat16" in types
    assert "(6: no bfloat16, int8, int16, uint8, uint16)" in types
    assert cells[("ai.onnx", "StringNormalizer")][1] == "string"
    assert "maps" in cells[("ai.onnx.ml", "ZipMap")][1]


def test_ci_runs_the_readme_test_command():
    ci = (README.parent / ".ci" / "run").read_text()
    assert "test-command" in ci
    cmd = _section("test-command")
    assert "pytest" in cmd and "pip install" in cmd
