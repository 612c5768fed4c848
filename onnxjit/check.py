"""The IR rules of the ONNX spec: every problem collected, then one ModelCheckError."""

from __future__ import annotations

from onnxjit import ir
from onnxjit.errors import ModelCheckError


def check_model(model: ir.Model) -> None:
    """Raise ModelCheckError listing every rule of the IR spec that ``model`` breaks."""
    problems: list[str] = list(model.load_problems)
    if problems:
        raise ModelCheckError(problems)
