"""E1: elementwise chains written with primitive ONNX ops (what fusion is for).

Forms: GELU (erf form as exporters emit it, tanh form with Pow), SiLU, bias+GELU (row bias),
and 8- and 16-op mixed chains with row ([C]) and scalar broadcasting. Sizes 4K, 256K, 4M and
64M float32 elements as [N / 1024, 1024] (64M only when not quick). ``bytes_moved`` is one
read of the input plus one write of the output: the least traffic any implementation needs.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from bench.workloads import Case
from bench.workloads._build import NodeBuilder, make_model, rng, value_info

COLS = 1024
SIZES = {"4K": 1 << 12, "256K": 1 << 18, "4M": 1 << 22, "64M": 1 << 26}


def _gelu_erf(b: NodeBuilder, x: str) -> str:
    # torch.onnx export of nn.GELU(): x * 0.5 * (1 + erf(x / sqrt(2))) as Div, Erf, Add, Mul, Mul
    t = b.op("Div", x, b.const(math.sqrt(2.0)))
    t = b.op("Erf", t)
    t = b.op("Add", t, b.const(1.0))
    t = b.op("Mul", x, t)
    return b.op("Mul", t, b.const(0.5))


def _gelu_tanh(b: NodeBuilder, x: str) -> str:
    # 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
    t = b.op("Pow", x, b.const(3.0))
    t = b.op("Mul", t, b.const(0.044715))
    t = b.op("Add", x, t)
    t = b.op("Mul", t, b.const(math.sqrt(2.0 / math.pi)))
    t = b.op("Tanh", t)
    t = b.op("Add", t, b.const(1.0))
    t = b.op("Mul", x, t)
    return b.op("Mul", t, b.const(0.5))


def _silu(b: NodeBuilder, x: str) -> str:
    return b.op("Mul", x, b.op("Sigmoid", x))


def _bias_gelu(b: NodeBuilder, x: str) -> str:
    bias = b.const(rng(11).standard_normal(COLS).astype(np.float32) * 0.1)
    return _gelu_erf(b, b.op("Add", x, bias))


def _chain8(b: NodeBuilder, x: str) -> str:
    # row bias, scalar scale, tanh, gate by x, row shift, relu, +1, sqrt (8 ops)
    r = rng(12)
    t = b.op("Add", x, b.const(r.standard_normal(COLS).astype(np.float32) * 0.1))
    t = b.op("Mul", t, b.const(0.5))
    t = b.op("Tanh", t)
    t = b.op("Mul", t, x)
    t = b.op("Sub", t, b.const(r.standard_normal(COLS).astype(np.float32) * 0.1))
    t = b.op("Relu", t)
    t = b.op("Add", t, b.const(1.0))
    return b.op("Sqrt", t)


def _chain16(b: NodeBuilder, x: str) -> str:
    # the 8-op chain, then log (argument >= 1), row gain, sigmoid, residual, abs, min,
    # row divide (|divisor| >= 0.5), scalar shift (16 ops)
    r = rng(13)
    t = b.op("Log", _chain8(b, x))
    t = b.op("Mul", t, b.const(r.standard_normal(COLS).astype(np.float32)))
    t = b.op("Sigmoid", t)
    t = b.op("Add", t, x)
    t = b.op("Abs", t)
    t = b.op("Min", t, b.const(3.0))
    t = b.op("Div", t, b.const((0.5 + r.random(COLS)).astype(np.float32)))
    return b.op("Sub", t, b.const(0.25))


FORMS: dict[str, Callable[[NodeBuilder, str], str]] = {
    "gelu_erf": _gelu_erf,
    "gelu_tanh": _gelu_tanh,
    "silu": _silu,
    "bias_gelu": _bias_gelu,
    "chain8": _chain8,
    "chain16": _chain16,
}


def build(form: str, n: int) -> Case:
    """One E1 case: ``form`` applied to a float32 [n / 1024, 1024] input."""
    rows = max(1, n // COLS)
    b = NodeBuilder()
    y = FORMS[form](b, "x")
    b.nodes[-1].output[0] = "y"
    del y
    model = make_model(
        b.nodes,
        [value_info("x", np.float32, [rows, COLS])],
        [value_info("y", np.float32, [rows, COLS])],
        b.inits,
        name=f"e1_{form}",
    )
    x = rng(1).standard_normal((rows, COLS), dtype=np.float32)
    label = next((k for k, v in SIZES.items() if v == n), str(n))
    return Case(
        workload="E1",
        name=f"{form}/{label}",
        model=model,
        feeds={"x": x},
        rtol=1e-4,
        atol=1e-5,
        bytes_moved=2 * x.nbytes,
    )


def cases(quick: bool) -> list[Case]:
    """All forms at 4K, 256K, 4M and 64M; quick: four cases (4K and 256K)."""
    if quick:
        plan = [("gelu_erf", "4K"), ("gelu_tanh", "256K"), ("bias_gelu", "256K")]
        plan.append(("chain16", "256K"))
    else:
        plan = [(f, s) for s in SIZES for f in FORMS]
    return [build(form, SIZES[size]) for form, size in plan]
