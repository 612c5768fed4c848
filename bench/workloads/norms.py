"""E2: normalisations and softmax over the last axis (fused reductions).

Forms: LayerNorm written with primitive ops (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div,
Mul, Add: the pre-opset-17 exporter pattern), LayerNormalization-17, Add + LayerNormalization
(residual), Softmax on the last axis, RMSNorm written with primitive ops (Pow, ReduceMean, Add,
Sqrt, Reciprocal, Mul, Mul: the Llama pattern). Shapes [128, 768] and [1024, 1024] float32.
``bytes_moved`` = inputs read once + output written once.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from bench.workloads import Case
from bench.workloads._build import NodeBuilder, make_model, rng, value_info

SHAPES = {"128x768": (128, 768), "1024x1024": (1024, 1024)}
EPS = 1e-5


def _layernorm_prim(b: NodeBuilder, x: str, cols: int) -> str:
    r = rng(31)
    mean = b.op("ReduceMean", x, axes=[-1], keepdims=1)
    d = b.op("Sub", x, mean)
    var = b.op("ReduceMean", b.op("Pow", d, b.const(2.0)), axes=[-1], keepdims=1)
    std = b.op("Sqrt", b.op("Add", var, b.const(EPS)))
    t = b.op("Div", d, std)
    t = b.op("Mul", t, b.const((1 + 0.1 * r.standard_normal(cols)).astype(np.float32)))
    return b.op("Add", t, b.const((0.1 * r.standard_normal(cols)).astype(np.float32)))


def _layernorm17(b: NodeBuilder, x: str, cols: int) -> str:
    r = rng(32)
    gamma = b.const((1 + 0.1 * r.standard_normal(cols)).astype(np.float32))
    beta = b.const((0.1 * r.standard_normal(cols)).astype(np.float32))
    return b.op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=EPS)


def _add_layernorm(b: NodeBuilder, x: str, cols: int) -> str:
    return _layernorm17(b, b.op("Add", x, "residual"), cols)


def _softmax(b: NodeBuilder, x: str, cols: int) -> str:
    return b.op("Softmax", x, axis=-1)


def _rmsnorm_prim(b: NodeBuilder, x: str, cols: int) -> str:
    r = rng(33)
    ms = b.op("ReduceMean", b.op("Pow", x, b.const(2.0)), axes=[-1], keepdims=1)
    inv = b.op("Reciprocal", b.op("Sqrt", b.op("Add", ms, b.const(1e-6))))
    t = b.op("Mul", x, inv)
    return b.op("Mul", t, b.const((1 + 0.1 * r.standard_normal(cols)).astype(np.float32)))


FORMS: dict[str, Callable[[NodeBuilder, str, int], str]] = {
    "layernorm_prim": _layernorm_prim,
    "layernorm17": _layernorm17,
    "add_layernorm": _add_layernorm,
    "softmax": _softmax,
    "rmsnorm_prim": _rmsnorm_prim,
}


def build(form: str, shape_label: str) -> Case:
    rows, cols = SHAPES[shape_label]
    b = NodeBuilder()
    FORMS[form](b, "x", cols)
    b.nodes[-1].output[0] = "y"
    x = rng(3).standard_normal((rows, cols), dtype=np.float32) * 2 + 0.5
    feeds = {"x": x}
    inputs = [value_info("x", np.float32, [rows, cols])]
    if form == "add_layernorm":
        feeds["residual"] = rng(4).standard_normal((rows, cols), dtype=np.float32)
        inputs.append(value_info("residual", np.float32, [rows, cols]))
    model = make_model(
        b.nodes, inputs, [value_info("y", np.float32, [rows, cols])], b.inits, name=f"e2_{form}"
    )
    return Case(
        workload="E2",
        name=f"{form}/{shape_label}",
        model=model,
        feeds=feeds,
        rtol=1e-4,
        atol=1e-5,
        bytes_moved=sum(v.nbytes for v in feeds.values()) + x.nbytes,
    )


def cases(quick: bool) -> list[Case]:
    """Every form at both shapes; quick: four cases, one per kind of reduction."""
    if quick:
        plan = [
            ("layernorm_prim", "128x768"),
            ("layernorm17", "1024x1024"),
            ("softmax", "1024x1024"),
            ("rmsnorm_prim", "128x768"),
        ]
    else:
        plan = [(f, s) for s in SHAPES for f in FORMS]
    return [build(f, s) for f, s in plan]
