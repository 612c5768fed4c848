"""Function inlining (model-local FunctionProtos and schema function bodies)."""

from __future__ import annotations

from onnxjit import ir


def inline_functions(model: ir.Model) -> None:
    """Expand calls to model-local functions in place (implemented in a later step)."""
    return None
