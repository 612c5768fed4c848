"""The graph passes, in order, with the optimisation level that enables each.

Levels follow onnxruntime's ``GraphOptimizationLevel``: 0 disables everything; 1 (basic) runs
the rewrites that keep every operator (folding, elimination, CSE); 2 (extended) adds pattern
fusions into onnxjit's own operators; 3 (layout) and 99 (all, the default) add elementwise-chain
fusion. Any pass can be switched off by name (``disabled_optimizers=[...]`` of
``InferenceSession``, or the session config entry ``onnxjit.disabled_optimizers`` holding a
comma-separated list), as onnxruntime allows for its own optimisers.

Each pass is ``fn(graph) -> int`` (how many rewrites it made) and leaves the graph bound,
topologically sorted and equivalent. Passes run on the main graph only; subgraphs of
If/Loop/Scan keep their nodes.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from onnxjit import ir

log = logging.getLogger("onnxjit")

BASIC, EXTENDED, LAYOUT = 1, 2, 3


@dataclass(frozen=True)
class PassSpec:
    """A named pass: enabled at ``level`` and above; ``module:function`` under onnxjit.passes."""

    name: str
    level: int
    target: str
    doc: str

    def function(self) -> Callable[[ir.Graph], int]:
        module, fn = self.target.split(":")
        return getattr(importlib.import_module(f"onnxjit.passes.{module}"), fn)


PASSES: tuple[PassSpec, ...] = (
    PassSpec(
        "qdq_matmul_integer",
        EXTENDED,
        "patterns_gemm:fuse_qdq_matmul",
        "MatMul of a DequantizeLinear activation by a DequantizeLinear constant weight -> "
        "MatMulInteger, Cast, Mul by the scales (before folding turns the weight to float)",
    ),
    PassSpec("constant_folding", BASIC, "optimize:fold_constants", "nodes of constants run once"),
    PassSpec(
        "shape_folding",
        BASIC,
        "shape_subgraphs:fold_static_shapes",
        "Shape/Size of statically shaped values become constants",
    ),
    PassSpec(
        "float16_in_float32",
        BASIC,
        "float16_compute:compute_float16_in_float32",
        "float16 regions computed in float32, Casts only at their edges",
    ),
    PassSpec("identity_elimination", BASIC, "optimize:eliminate_identities", "Identity, Dropout"),
    PassSpec(
        "noop_elimination",
        BASIC,
        "cleanup:eliminate_noops",
        "Cast to the same type, Reshape to the same shape, identity Transpose...",
    ),
    PassSpec(
        "common_subexpression_elimination",
        BASIC,
        "cse:eliminate_common_subexpressions",
        "identical nodes on identical inputs computed once",
    ),
    PassSpec("dead_node_elimination", BASIC, "optimize:remove_dead_nodes", "unused nodes"),
    PassSpec(
        "pad_conv_folding",
        EXTENDED,
        "patterns_conv:fold_pad_into_conv",
        "zero Pad of the spatial axes before Conv folded into its pads",
    ),
    PassSpec(
        "conv_bn_folding",
        EXTENDED,
        "patterns_conv:fold_conv_batchnorm",
        "BatchNormalization after Conv folded into its weights",
    ),
    PassSpec(
        "layernorm_fusion",
        EXTENDED,
        "patterns_norm:fuse_layernorm",
        "LayerNormalization and RMSNorm written with primitive ops; a residual Add into either "
        "LayerNormalization form -> SkipLayerNorm (one pass; the added operand may also be a "
        "single row, as BERT's token-type embedding, or lack leading 1s)",
    ),
    PassSpec("gelu_fusion", EXTENDED, "patterns_norm:fuse_gelu", "Gelu (erf and tanh forms)"),
    PassSpec("softmax_fusion", EXTENDED, "patterns_norm:fuse_softmax", "exp(x-max)/sum forms"),
    PassSpec(
        "attention_fusion",
        EXTENDED,
        "patterns_attention:fuse_attention",
        "MatMul, scale, mask, Softmax, MatMul as one attention kernel; the Transposes "
        "splitting Q, K, V into heads and merging the output's heads fold in (the kernel "
        "reads and writes the (batch, seq, heads, dim) data in place)",
    ),
    PassSpec(
        "gemm_epilogue_fusion",
        EXTENDED,
        "patterns_gemm:fuse_gemm_epilogue",
        "MatMul/Gemm + bias + activation as one GEMM with an epilogue",
    ),
    PassSpec(
        "conv_activation_fusion",
        EXTENDED,
        "patterns_conv:fuse_conv_activation",
        "Conv + bias + activation (and residual Add)",
    ),
    PassSpec(
        "elementwise_fusion",
        LAYOUT,
        "fuse_elementwise:fuse_elementwise",
        "maximal elementwise groups as one generated kernel",
    ),
    PassSpec(
        "reduction_fusion",
        LAYOUT,
        "fuse_reduce:fuse_reductions",
        "ReduceSum/Mean/Max of an elementwise chain in one pass",
    ),
    PassSpec("final_dead_node_elimination", BASIC, "optimize:remove_dead_nodes", "unused nodes"),
)

PASS_NAMES = frozenset(p.name for p in PASSES)


def run_passes(
    graph: ir.Graph, level: int, disabled: Iterable[str] = ()
) -> dict[str, dict[str, float]]:
    """Run every pass enabled at ``level`` and not in ``disabled``; return per-pass figures.

    The result maps a pass name to ``{"rewrites": n, "seconds": s}``.
    """
    disabled = set(disabled)
    unknown = disabled - PASS_NAMES
    if unknown:
        raise ValueError(
            f"unknown optimizer names {sorted(unknown)} in disabled_optimizers; known passes: "
            f"{sorted(PASS_NAMES)}"
        )
    report: dict[str, dict[str, float]] = {}
    for spec in PASSES:
        if level < spec.level or spec.name in disabled:
            continue
        t0 = time.perf_counter()
        n = spec.function()(graph)
        dt = time.perf_counter() - t0
        report[spec.name] = {"rewrites": int(n), "seconds": dt}
        if n:
            log.debug("pass %s: %d rewrites in %.3f s", spec.name, n, dt)
    return report
