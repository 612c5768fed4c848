"""Compile-only checks of the CUDA kernels: the real NVVM compiler, in a process of its own.

numba-cuda's simulator replaces ``numba.cuda`` in the test processes (tests/conftest.py), and
it does not type-check kernels; ``cuda.compile_ptx`` in a process without it runs NVVM, which
needs no GPU, and catches what the simulator accepts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence


def run_without_simulator(args: Sequence[str], timeout: int = 300, cwd: str | None = None) -> str:
    """Run ``python *args`` with the simulator off and return its standard output; the test
    fails with the process's output when it exits with an error."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout
