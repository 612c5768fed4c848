"""Shared pytest configuration.

The conformance hooks count the ONNX backend cases that pass and print the figure at the end
of the run; with ``ONNXJIT_CONFORMANCE_RECORD=<file>`` they also write every case's raw outcome
(used by ``tests/conformance/update_lists.py`` to refresh the classification lists).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

# The CUDA tests run numba-cuda's simulator unless told otherwise (NUMBA_ENABLE_CUDASIM=0 on a
# machine with a GPU runs them there). Numba reads the setting when it is first imported, so
# it is set here, before any test module imports onnxjit or numba.
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

_CONFORMANCE_CLASSES = {
    "OnnxBackendNodeModelTest": "node",
    "OnnxBackendSimpleModelTest": "simple",
    "OnnxBackendPyTorchConvertedModelTest": "pytorch-converted",
    "OnnxBackendPyTorchOperatorModelTest": "pytorch-operator",
}
_outcomes: dict[str, dict[str, str]] = {}


def _conformance_case(nodeid: str) -> tuple[str, str] | None:
    parts = nodeid.split("::")
    if len(parts) < 3 or not parts[0].endswith("test_conformance.py"):
        return None
    kind = _CONFORMANCE_CLASSES.get(parts[1])
    if kind is None:
        return None
    name = parts[2]
    return kind, name[: -len("_cpu")] if name.endswith("_cpu") else name


def pytest_runtest_logreport(report):
    case = _conformance_case(report.nodeid)
    if case is None:
        return
    kind, name = case
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        if report.skipped and hasattr(report, "wasxfail"):
            outcome = "xfailed"
        elif report.skipped:
            outcome = "skipped"
        else:
            outcome = report.outcome
        detail = ""
        if report.failed or outcome == "xfailed":
            text = str(report.longrepr) if report.longrepr else ""
            lines = [ln for ln in text.splitlines() if ln.startswith("E ")]
            if lines:
                detail = " ".join(ln[1:].strip() for ln in lines[:4])
            else:
                detail = text.splitlines()[-1] if text else ""
        _outcomes.setdefault(kind, {})[name] = outcome + ("\t" + detail[:300] if detail else "")


def pytest_terminal_summary(terminalreporter):
    if not _outcomes:
        return
    terminalreporter.section("ONNX backend conformance")
    for kind, cases in sorted(_outcomes.items()):
        passed = sum(1 for v in cases.values() if v.startswith("passed"))
        xfailed = sum(1 for v in cases.values() if v.startswith("xfailed"))
        failed = sum(1 for v in cases.values() if v.startswith("failed"))
        run = passed + xfailed + failed
        terminalreporter.write_line(
            f"{kind}: {passed} passed, {xfailed} expected failures, {failed} failed (of {run} run)"
        )
    record = os.environ.get("ONNXJIT_CONFORMANCE_RECORD")
    if record:
        with open(record, "w") as f:
            json.dump(_outcomes, f, indent=1, sort_keys=True)
