"""``python -m bench.ops``: lone elementwise operators, onnxjit against onnxruntime.

Each operator runs as a one-node model over a float32 [N / 1024, 1024] input (inputs drawn
inside the operator's domain, fixed seed) through the ratio protocol of :mod:`bench.harness`,
and one line per operator is printed: the median ratio onnxjit / onnxruntime and both medians.
A ratio far above 1 points at a kernel that does not vectorise (a libm call per element) or at
an operator left to its implementation by its plan; this sweep found both kinds (Elu and the
inverse trigonometric functions, LeakyRelu and the other attribute activations).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import numpy as np
from onnx import TensorProto, helper

from bench import harness
from bench.workloads import Case

UNARY = (
    "Abs,Neg,Floor,Ceil,Round,Sqrt,Reciprocal,Exp,Log,Sin,Cos,Tan,Asin,Acos,Atan,Sinh,Cosh,"
    "Asinh,Acosh,Atanh,Sign,Erf,Tanh,Sigmoid,Relu,LeakyRelu,Elu,Selu,Celu,Softplus,Softsign,"
    "HardSigmoid,HardSwish,ThresholdedRelu,Mish,Gelu,IsNaN,IsInf"
)
BINARY = "Add,Sub,Mul,Div,Pow,Max,Min,Mod,PRelu,Equal,Less,Greater"
_BOOL_OUT = {"IsNaN", "IsInf", "Equal", "Less", "Greater"}


def _inputs(op: str, shape: tuple[int, int], rng: np.random.Generator) -> list[np.ndarray]:
    """The operator's inputs, inside its domain (positive for Log and Sqrt, |x| < 1 for the
    inverse sine and cosine...)."""

    def normal() -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    domain: dict[str, Callable[[], np.ndarray]] = {
        "Log": lambda: np.abs(normal()) + np.float32(0.1),
        "Sqrt": lambda: np.abs(normal()),
        "Acosh": lambda: np.abs(normal()) + np.float32(1.0),
        "Atanh": lambda: np.tanh(normal()) * np.float32(0.99),
        "Asin": lambda: np.tanh(normal()) * np.float32(0.99),
        "Acos": lambda: np.tanh(normal()) * np.float32(0.99),
        "Reciprocal": lambda: normal() + np.float32(3.0),
    }
    if op in BINARY.split(","):
        a, b = normal(), normal()
        if op == "Pow":
            a = np.abs(a) + np.float32(0.1)
        if op in ("Div", "Mod"):
            b = np.abs(b) + np.float32(0.5)
        return [a, b]
    return [domain.get(op, normal)()]


def case(op: str, n: int, seed: int = 0) -> Case:
    """The one-node case of ``op`` over ``n`` float32 elements (opset 20; Mod with fmod=1)."""
    shape = (max(1, n // 1024), 1024)
    feeds = _inputs(op, shape, np.random.default_rng(seed))
    names = ["a", "b"][: len(feeds)]
    attrs = {"fmod": 1} if op == "Mod" else {}
    out_type = TensorProto.BOOL if op in _BOOL_OUT else TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)],
        f"op_{op}",
        [helper.make_tensor_value_info(m, TensorProto.FLOAT, list(shape)) for m in names],
        [helper.make_tensor_value_info("y", out_type, list(shape))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    return Case("OPS", op, model, dict(zip(names, feeds)), rtol=1e-4, atol=1e-5)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ops", description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1 << 18, help="elements per input (262144)")
    p.add_argument("--ops", default=f"{UNARY},{BINARY}", help="comma-separated op types")
    args = p.parse_args(argv)
    harness.fix_threads()
    roofs = harness.measure_roofs(3)
    print(f"one-node models over {args.size} float32 elements, 2 threads each")
    ops = [o for o in args.ops.split(",") if o]
    harness.print_case_ratios((case(op, args.size) for op in ops), roofs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
