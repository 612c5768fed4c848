"""M1: MLP 784-512-256-10 (ReLU), as Gemm (transB=1, how exporters write Linear) or as
MatMul + Add + Relu; batch 1, 64 and 1024. ``flops`` counts the multiply-adds of the three
layers (2 per weight per row). ``build(..., batch="N")`` gives a dynamic batch (used by D1).
"""

from __future__ import annotations

import numpy as np

from bench.workloads import Case
from bench.workloads._build import NodeBuilder, make_model, rng, value_info

LAYERS = (784, 512, 256, 10)
BATCHES = (1, 64, 1024)


def flops(batch: int) -> int:
    return 2 * batch * sum(a * b for a, b in zip(LAYERS[:-1], LAYERS[1:]))


def build_model(form: str, batch: int | str):
    """The MLP model; ``form`` is "gemm" or "matmul"; ``batch`` an int or a symbolic name."""
    r = rng(21)
    b = NodeBuilder()
    t = "x"
    n_layers = len(LAYERS) - 1
    for i, (fan_in, fan_out) in enumerate(zip(LAYERS[:-1], LAYERS[1:])):
        w = (r.standard_normal((fan_out, fan_in)) / np.sqrt(fan_in)).astype(np.float32)
        bias = (r.standard_normal(fan_out) * 0.1).astype(np.float32)
        last = i == n_layers - 1
        if form == "gemm":
            t = b.op("Gemm", t, b.const(w), b.const(bias), transB=1, out="y" if last else None)
        else:
            t = b.op("MatMul", t, b.const(np.ascontiguousarray(w.T)))
            t = b.op("Add", t, b.const(bias), out="y" if last else None)
        if not last:
            t = b.op("Relu", t)
    return make_model(
        b.nodes,
        [value_info("x", np.float32, [batch, LAYERS[0]])],
        [value_info("y", np.float32, [batch, LAYERS[-1]])],
        b.inits,
        name=f"m1_{form}",
    )


def feeds(batch: int, seed: int = 2) -> dict[str, np.ndarray]:
    return {"x": rng(seed).standard_normal((batch, LAYERS[0]), dtype=np.float32)}


def build(form: str, batch: int) -> Case:
    return Case(
        workload="M1",
        name=f"{form}/b{batch}",
        model=build_model(form, batch),
        feeds=feeds(batch),
        rtol=1e-4,
        atol=1e-4,
        flops=flops(batch),
    )


def cases(quick: bool) -> list[Case]:
    """Both forms at batch 1, 64, 1024; quick: gemm at batch 1, matmul at batch 64."""
    if quick:
        plan = [("gemm", 1), ("matmul", 64)]
    else:
        plan = [(f, bs) for f in ("gemm", "matmul") for bs in BATCHES]
    return [build(f, bs) for f, bs in plan]
