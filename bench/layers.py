"""``python -m bench.layers``: single layers of the real-model families, onnxjit against
onnxruntime.

Each layer runs as a one- to three-node model (fixed seed) through the ratio protocol of
:mod:`bench.harness`, and one line per layer is printed: the median ratio onnxjit /
onnxruntime and both medians. The layers are MobileNetV2's 1x1 convolutions at 224 px
(expand and projection layers of each plane size), bare or with the epilogue the models fuse
into them (bias, bias + Clip, bias + residual), and the transformer encoders' projections
(MatMul + bias at 16 and 128 tokens, 768 wide). Comparing the epilogue variants of one
layer shows what the epilogue costs next to the product.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from bench import harness
from bench.workloads import Case

# (input channels, output channels, plane side): MobileNetV2 at 224 px
CONVS = (
    (16, 96, 112),
    (24, 144, 56),
    (32, 192, 28),
    (144, 24, 56),
    (144, 32, 28),
    (576, 96, 14),
    (960, 320, 7),
)
EPILOGUES = ("none", "bias", "bias+clip", "bias+residual")
# (rows, inner, columns): projections of a 768-wide encoder
MATMULS = ((16, 768, 768), (128, 768, 768), (128, 768, 3072), (128, 3072, 768))


def conv_case(c: int, m: int, side: int, epilogue: str, seed: int = 0) -> Case:
    """A 1x1 convolution ``c -> m`` channels on ``side x side`` planes, batch 1, with
    ``epilogue`` (one of :data:`EPILOGUES`)."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    conv_in = ["x", "w"]
    if epilogue != "none":
        inits.append(numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b"))
        conv_in.append("b")
    nodes = [helper.make_node("Conv", conv_in, ["c"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, side, side])]
    feeds = {"x": rng.standard_normal((1, c, side, side)).astype(np.float32)}
    out = "c"
    if epilogue == "bias+clip":
        inits += [
            numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
            numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
        ]
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
        out = "y"
    elif epilogue == "bias+residual":
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, m, side, side]))
        feeds["r"] = rng.standard_normal((1, m, side, side)).astype(np.float32)
        nodes.append(helper.make_node("Add", ["c", "r"], ["y"]))
        out = "y"
    graph = helper.make_graph(
        nodes,
        "conv1x1",
        inputs,
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, m, side, side])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return Case(
        "LAYERS",
        f"conv1x1/{c}->{m}@{side}/{epilogue}",
        model,
        feeds,
        rtol=1e-3,
        atol=1e-4,
        flops=2 * c * m * side * side,
    )


def matmul_case(rows: int, k: int, n: int, seed: int = 0) -> Case:
    """``x (rows x k) @ W (k x n) + bias``, the weight and bias constants."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "b"], ["y"])],
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((rows, k)).astype(np.float32)}
    name = f"matmul/{rows}x{k}x{n}"
    return Case("LAYERS", name, model, feeds, rtol=1e-3, atol=1e-4, flops=2 * rows * k * n)


def cases(which: str, epilogues: Sequence[str]) -> list[Case]:
    """The layers of ``which`` ("conv", "matmul" or "all")."""
    out = []
    if which in ("conv", "all"):
        out += [conv_case(c, m, s, e) for c, m, s in CONVS for e in epilogues]
    if which in ("matmul", "all"):
        out += [matmul_case(*shape) for shape in MATMULS]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.layers", description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("conv", "matmul", "all"), default="all")
    p.add_argument(
        "--epilogues",
        default=",".join(EPILOGUES),
        help=f"comma-separated epilogues of the convolutions ({', '.join(EPILOGUES)})",
    )
    args = p.parse_args(argv)
    epilogues = [e for e in args.epilogues.split(",") if e]
    unknown = sorted(set(epilogues) - set(EPILOGUES))
    if unknown:
        p.error(f"unknown epilogue {', '.join(unknown)}: expected some of {', '.join(EPILOGUES)}")
    harness.fix_threads()
    roofs = harness.measure_roofs(3)
    print("one-layer models, 2 threads each")
    harness.print_case_ratios(cases(args.only, epilogues), roofs, width=36)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
