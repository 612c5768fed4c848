"""Graph rewrites between binding and planning.

``expand_gradients`` replaces ai.onnx.preview.training Gradient nodes by their reverse-mode
nodes; ``inline_functions`` expands model-local functions and schema function bodies of operators
onnxjit has no kernel for; ``optimize`` runs the passes enabled at a graph optimisation level.
"""

from __future__ import annotations

from onnxjit import ir
from onnxjit.passes.gradient import expand_gradients
from onnxjit.passes.inline import inline_functions
from onnxjit.passes.optimize import optimize

__all__ = ["expand_gradients", "inline_functions", "optimize", "ir"]
