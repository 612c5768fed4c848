"""The tree keeps the style pyproject.toml sets: ruff's lint rules and its formatter.

CI runs the README's test command only, so the style checks run as tests: a lint error or an
unformatted file fails the suite with ruff's own report.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "args",
    [["check", "--no-cache"], ["format", "--check", "--no-cache"]],
    ids=["ruff-check", "ruff-format"],
)
def test_ruff(args):
    out = subprocess.run(
        [sys.executable, "-m", "ruff", *args, str(REPO)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stdout + out.stderr
