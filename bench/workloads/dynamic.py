"""D1: dynamic shapes. After warm-up on one size, ten new sizes must compile nothing.

Cases: the M1 MLP (Gemm form) with a symbolic batch ("N"), warmed at batch 32 then run at ten
other batch sizes; and, when H2b's transformer builder is available, the T1 BERT encoder from
primitive ops (hidden 256, 4 layers) with symbolic batch and sequence, warmed at sequence 128
then run at ten other sequence lengths. ``Case.sizes`` holds the extra feeds; the harness
counts Numba compilations while running them, and checks every output against onnxruntime.
The timed ratio is taken on the warm-up size.

``alt/...`` cases (issue 41: two shapes alternating must cost within 5 % of one shape
repeated): the same two models at small sizes, the MLP at batch 1 and 2, BERT at sequence 16
and 32. They set ``Case.alternate`` (shape B beside ``feeds``, shape A), and the harness
times each engine against itself (:func:`bench.harness.measure_alternating`): the reported
ratio is onnxjit's time per run with A, B, A, B, ... over its time with A repeated and B
repeated (the mean of the two), not a ratio against onnxruntime; onnxruntime's own figure
is reported beside it for reference.
"""

from __future__ import annotations

from bench.workloads import Case, mlp

MLP_BASE = 32
MLP_SIZES = (1, 2, 3, 5, 8, 13, 21, 50, 100, 257)
BERT_BASE = 128
BERT_SIZES = (8, 16, 24, 40, 64, 96, 100, 160, 192, 256)
MLP_ALT = (1, 2)  # batch sizes of the alternating case
BERT_ALT = (16, 32)  # sequence lengths of the alternating case


def mlp_case() -> Case:
    return Case(
        workload="D1",
        name=f"mlp_dyn_batch/b{MLP_BASE}+10",
        model=mlp.build_model("gemm", "N"),
        feeds=mlp.feeds(MLP_BASE),
        rtol=1e-4,
        atol=1e-4,
        flops=mlp.flops(MLP_BASE),
        sizes=[mlp.feeds(n, seed=10 + n) for n in MLP_SIZES],
    )


def bert_case(quick: bool) -> Case | None:
    try:
        from bench.workloads import transformer
    except ImportError:
        return None
    return Case(
        workload="D1",
        name=f"bert_prim_dyn_seq/h256x4/s{BERT_BASE}+10",
        model=transformer.bert_primitive(256, 4, 4, dynamic=True),
        feeds=transformer.bert_feeds(BERT_BASE, 1, pad=16),
        rtol=1e-3,
        atol=1e-4,
        flops=transformer.bert_flops(256, 4, BERT_BASE, 1),
        sizes=[transformer.bert_feeds(s, 1, seed=20 + s, pad=s // 8) for s in BERT_SIZES],
    )


def mlp_alt_case() -> Case:
    a, b = MLP_ALT
    return Case(
        workload="D1",
        name=f"alt/mlp_dyn_batch/b{a},b{b}",
        model=mlp.build_model("gemm", "N"),
        feeds=mlp.feeds(a, seed=10 + a),
        alternate=mlp.feeds(b, seed=10 + b),
        rtol=1e-4,
        atol=1e-4,
    )


def bert_alt_case() -> Case | None:
    try:
        from bench.workloads import transformer
    except ImportError:
        return None
    a, b = BERT_ALT
    return Case(
        workload="D1",
        name=f"alt/bert_prim_dyn_seq/h256x4/s{a},s{b}",
        model=transformer.bert_primitive(256, 4, 4, dynamic=True),
        feeds=transformer.bert_feeds(a, 1, seed=20 + a, pad=a // 8),
        alternate=transformer.bert_feeds(b, 1, seed=20 + b, pad=b // 8),
        rtol=1e-3,
        atol=1e-4,
    )


def cases(quick: bool) -> list[Case]:
    """The MLP with dynamic batch and (when available, not quick) BERT with dynamic sequence,
    then the alternating-shape cases of both (quick: the same two)."""
    out = [mlp_case()]
    bert = None if quick else bert_case(quick)
    if bert is not None:
        out.append(bert)
    out.append(mlp_alt_case())
    bert_alt = bert_alt_case()
    if bert_alt is not None:
        out.append(bert_alt)
    return out
