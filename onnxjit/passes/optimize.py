"""Graph optimisation passes, selected by SessionOptions.graph_optimization_level."""

from __future__ import annotations

from onnxjit import ir


def optimize(graph: ir.Graph, level: int) -> None:
    """Run the passes enabled at ``level`` (0 = none) on ``graph`` in place."""
    return None
