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


if __name__ == "__main__":
    text = README.read_text()
    README.write_text(replace_section(text, "ops-table", supported_ops_markdown()))
    print("README.md updated")
