"""Benchmark workloads: each builds ``Case`` objects (one ONNX model plus its feeds).

Every workload module exposes ``cases(quick: bool) -> list[Case]`` (``quick`` selects a small
subset for a CI smoke run). ``WORKLOADS`` maps workload ids ("E1", "M1", ...) to those functions;
modules are imported lazily so that the harness works while some of them do not exist yet.
Models are built with ``onnx.helper`` from fixed seeds and random weights; nothing is downloaded.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx

__all__ = ["Case", "WORKLOADS", "get_cases", "workload_ids"]


@dataclass
class Case:
    """One benchmark case.

    ``workload`` is the workload id ("E1"), ``name`` identifies the case within it
    ("gelu_erf/256K"). ``feeds`` are the inputs of the timed runs (the same preallocated arrays
    go to both engines). Outputs must agree within ``rtol``/``atol`` or the figure is void.
    ``bytes_moved`` (minimum main-memory traffic of one run) gives the bandwidth roof fraction,
    ``flops`` (floating-point operations of one run) the GEMM roof fraction. ``sizes`` (D1) holds
    extra feeds of other sizes, run after warm-up to count recompilations. ``alternate`` (D1
    ``alt/...`` cases) holds feeds of a second shape B: such a case is not timed against
    onnxruntime but each engine against itself, ``feeds`` and ``alternate`` alternating run
    after run against each repeated (:func:`bench.harness.measure_alternating`).
    """

    workload: str
    name: str
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    rtol: float = 1e-4
    atol: float = 1e-5
    bytes_moved: int | None = None
    flops: int | None = None
    sizes: list[dict[str, np.ndarray]] | None = None
    alternate: dict[str, np.ndarray] | None = None


CaseFactory = Callable[[bool], "list[Case]"]


def _lazy(module: str, func: str) -> CaseFactory:
    """A factory that imports ``bench.workloads.<module>`` only when called."""

    def factory(quick: bool) -> list[Case]:
        mod = importlib.import_module(f"bench.workloads.{module}")
        return getattr(mod, func)(quick)

    factory.__name__ = f"{module}.{func}"
    return factory


#: Workload id -> ``cases(quick) -> list[Case]``. Order is the report order.
WORKLOADS: dict[str, CaseFactory] = {
    "E1": _lazy("elementwise", "cases"),
    "E2": _lazy("norms", "cases"),
    "M1": _lazy("mlp", "cases"),
    "T1": _lazy("transformer", "cases_t1"),
    "T2": _lazy("transformer", "cases_t2"),
    "C1": _lazy("cnn", "cases_c1"),
    "C2": _lazy("cnn", "cases_c2"),
    "G1": _lazy("trees", "cases"),
    "G2": _lazy("classic_ml", "cases"),
    "O1": _lazy("overhead", "cases"),
    "D1": _lazy("dynamic", "cases"),
    "R1": _lazy("real", "cases_r1"),
    "R2": _lazy("real", "cases_r2"),
    "R3": _lazy("real", "cases_r3"),
    "R4": _lazy("real", "cases_r4"),
    "R5": _lazy("real_cnn", "cases_r5"),
    "R6": _lazy("real_rnn", "cases_r6"),
    "R7": _lazy("real_fp16", "cases_r7"),
}


def workload_ids() -> list[str]:
    """All workload ids in report order."""
    return list(WORKLOADS)


def get_cases(workload: str, quick: bool = False) -> list[Case]:
    """Build the cases of one workload; raises ImportError when its module is not written yet."""
    return WORKLOADS[workload](quick)
