"""O1: the overhead floor: 150-300 tiny ops on 1x16 float32 tensors, and one lone Relu.

``tiny_ops/N``: a chain of blocks mixing Add/Mul/Sub with constants, Relu/Tanh/Sigmoid/Abs/
Neg, Reshape to [4, 4], Transpose, Reshape back, and a Max that joins a side branch, so the
graph is not a pure line. Values stay bounded (Tanh every block). No roof applies: the figure
is time per node.

``relu_1x16``: a one-node model (Relu, opset 17, float32 [1, 16]), issue 41's per-run floor:
the whole run is the executor's fixed cost (feed checks, dispatch, output handling) around a
16-float kernel. It lives here rather than under a workload of its own because it measures
the same thing as tiny_ops at N = 1: the cost of a run that does almost no arithmetic.
"""

from __future__ import annotations

import numpy as np

from bench.workloads import Case
from bench.workloads._build import NodeBuilder, make_model, rng, value_info

WIDTH = 16
BLOCK_OPS = 13


def build(n_ops: int) -> Case:
    """About ``n_ops`` nodes (a whole number of 13-op blocks)."""
    r = rng(41)
    b = NodeBuilder()
    sq = b.const(np.array([4, 4], np.int64), dtype=np.int64)
    flat = b.const(np.array([1, WIDTH], np.int64), dtype=np.int64)
    t = "x"
    n_blocks = max(1, round(n_ops / BLOCK_OPS))
    for _ in range(n_blocks):
        a = b.op("Add", t, b.const(r.standard_normal((1, WIDTH)).astype(np.float32)))
        a = b.op("Mul", a, b.const(float(0.5 + r.random())))
        side = b.op("Relu", a)
        m = b.op("Reshape", a, sq)
        m = b.op("Transpose", m, perm=[1, 0])
        m = b.op("Reshape", m, flat)
        m = b.op("Sigmoid", m)
        m = b.op("Sub", m, b.const(0.5))
        m = b.op("Max", m, b.op("Neg", side))
        m = b.op("Abs", m)
        t = b.op("Tanh", b.op("Add", m, side))
    b.nodes[-1].output[0] = "y"
    model = make_model(
        b.nodes,
        [value_info("x", np.float32, [1, WIDTH])],
        [value_info("y", np.float32, [1, WIDTH])],
        b.inits,
        name="o1_tiny_ops",
    )
    x = rng(5).standard_normal((1, WIDTH), dtype=np.float32)
    return Case(
        workload="O1",
        name=f"tiny_ops/{len(b.nodes)}",
        model=model,
        feeds={"x": x},
        rtol=1e-4,
        atol=1e-5,
    )


def build_relu() -> Case:
    """One Relu node on float32 [1, 16] (opset 17)."""
    b = NodeBuilder()
    b.op("Relu", "x", out="y")
    model = make_model(
        b.nodes,
        [value_info("x", np.float32, [1, WIDTH])],
        [value_info("y", np.float32, [1, WIDTH])],
        name="o1_relu_1x16",
    )
    x = rng(5).standard_normal((1, WIDTH), dtype=np.float32)
    return Case(workload="O1", name="relu_1x16", model=model, feeds={"x": x}, rtol=0, atol=0)


def cases(quick: bool) -> list[Case]:
    """About 150 and 300 ops, then the lone Relu; quick: about 200 ops and the Relu. (tiny_ops
    stays first: ``--cold`` measures the first case of each workload.)"""
    return [build(n) for n in ((200,) if quick else (150, 300))] + [build_relu()]
