"""Regenerate the generated sections of README.md (the supported-operator table).

python tests/update_readme.py
"""

from __future__ import annotations

import re
from pathlib import Path

import onnxjit  # noqa: F401
from onnxjit.registry import supported_ops_markdown

README = Path(__file__).resolve().parent.parent / "README.md"


def replace_section(text: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- {name} -->\n).*?(<!-- /{name} -->)", re.S)
    return pattern.sub(lambda m: m.group(1) + body + m.group(2), text)


def passes_markdown() -> str:
    """The graph passes, their levels and what each rewrites (from the pass table)."""
    from onnxjit.passes.manager import PASSES

    names = {1: "basic (1)", 2: "extended (2)", 3: "all (3, 99)"}
    rows = ["| pass | from level | rewrites |", "|---|---|---|"]
    rows += [f"| `{p.name}` | {names[p.level]} | {p.doc} |" for p in PASSES]
    return "\n".join(rows) + "\n"


def bench_markdown(name: str = "results.md") -> str:
    """The table of bench/``name`` (written by ``python -m bench --out``), with its header
    lines."""
    results = README.parent / "bench" / name
    if not results.exists():
        return f"No results yet: run `python -m bench --out bench/{name}`.\n"
    return results.read_text()


if __name__ == "__main__":
    text = README.read_text()
    text = replace_section(text, "ops-table", supported_ops_markdown())
    text = replace_section(text, "passes-table", passes_markdown())
    text = replace_section(text, "bench-table", bench_markdown())
    text = replace_section(text, "bench-real-table", bench_markdown("results_real.md"))
    README.write_text(text)
    print("README.md updated")
