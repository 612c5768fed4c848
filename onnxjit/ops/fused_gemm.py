"""``FusedGemm``: a GEMM by BLAS followed by one in-place epilogue pass (bias + activation).

Created by ``onnxjit.passes.patterns_gemm.fuse_gemm_epilogue`` from MatMul/Gemm + bias Add +
activation. The weight arrives pre-arranged at rewrite time as a C-contiguous (K, N) matrix of
the compute dtype, and the bias (already multiplied by Gemm's beta) as an (N,) vector, so a run
is ``np.matmul(A, W, out=Y)`` plus :func:`onnxjit.kernels.cpu.epilogue.rows` over ``Y``.

The activation helpers here are shared with ``FusedConv``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onnxjit import threads
from onnxjit.kernels import _jit
from onnxjit.kernels._jit import run_parallel
from onnxjit.kernels.cpu import epilogue as kep
from onnxjit.registry import NodeContext, internal_op

_NATIVE = (np.dtype(np.float32), np.dtype(np.float64))

# activation attribute value -> (code, number of parameters)
ACTIVATIONS: dict[str, tuple[int, int]] = {
    "": (kep.ACT_NONE, 0),
    "Relu": (kep.ACT_RELU, 0),
    "LeakyRelu": (kep.ACT_LEAKY_RELU, 1),
    "Sigmoid": (kep.ACT_SIGMOID, 0),
    "Tanh": (kep.ACT_TANH, 0),
    "Clip": (kep.ACT_CLIP, 2),
    "Gelu": (kep.ACT_GELU, 0),
    "GeluTanh": (kep.ACT_GELU_TANH, 0),
    "HardSigmoid": (kep.ACT_HARD_SIGMOID, 2),
    "Silu": (kep.ACT_SILU, 0),
    "HardSwish": (kep.ACT_HARD_SWISH, 0),
}

_EMPTY: dict[np.dtype, np.ndarray] = {}

# GEMMs below this many multiply-adds (about 0.5 ms on one core) run single-threaded: BLAS's
# thread hand-off costs more than it saves there, and on a loaded machine OpenBLAS's threads
# wait for cores (measured: a 64x784x512 float32 GEMM took 2 s with 2 threads and 30 other
# runnable processes, against 0.3-70 ms with one thread).
SINGLE_THREAD_MACS = 1 << 25


def matmul_into(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``np.matmul(a, b, out=out)`` (2-D or batched), single-threaded BLAS for small GEMMs.

    The count goes back to the run's at once, not at the end of the run: other ops call BLAS
    directly (plain MatMul, attention, RNN steps) and must see the session's setting.
    """
    n = threads.blas_threads()
    ctl = threads.numpy_blas() if n is not None and n > 1 else False
    if not ctl or out.size * a.shape[-1] >= SINGLE_THREAD_MACS:
        np.matmul(a, b, out=out)
        return
    ctl.set_num_threads(1)
    try:
        np.matmul(a, b, out=out)
    finally:
        ctl.set_num_threads(n)


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """float32/float64 stay; float16, bfloat16 compute in float32."""
    return dtype if dtype in _NATIVE else np.dtype(np.float32)


def activation_args(
    ctx: NodeContext, name: str, params: Sequence[float] | None, dtype: np.dtype
) -> tuple[int, np.generic, np.generic]:
    """The epilogue's (code, p0, p1) for activation ``name``; parameters in ``dtype``."""
    if name not in ACTIVATIONS:
        raise ctx.unsupported(f"activation {name!r} is not one of {sorted(ACTIVATIONS)}")
    code, n = ACTIVATIONS[name]
    p = [float(v) for v in (params or [])]
    if len(p) != n:
        raise ctx.error(f"activation {name} takes {n} parameters, got {p}")
    p += [0.0] * (2 - n)
    t = dtype.type
    return code, t(p[0]), t(p[1])


def empty(dtype: np.dtype, ndim: int) -> np.ndarray:
    """A cached empty C-contiguous array standing in for an absent operand."""
    key = (np.dtype(dtype), ndim)
    a = _EMPTY.get(key)
    if a is None:
        a = _EMPTY[key] = np.empty((0,) * ndim, dtype)
    return a


def run_rows(
    y: np.ndarray, alpha: float, bias: np.ndarray | None, code: int, p0: object, p1: object
) -> None:
    """Apply the row epilogue to the C-contiguous 2-D ``y`` in place."""
    if code == kep.ACT_NONE and bias is None and alpha == 1.0:
        return
    t = y.dtype.type
    b = empty(y.dtype, 1) if bias is None else bias
    args = (y, t(alpha), b, bias is not None, code, p0, p1)
    if y.size >= _jit.PARALLEL_THRESHOLD and y.shape[0] > 1:
        run_parallel(kep.rows_par, *args)
    else:
        kep.rows(*args)


@internal_op("FusedGemm")
def fused_gemm(
    ctx: NodeContext,
    a: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    trans_a: int = 0,
    alpha: float = 1.0,
    activation: str = "",
    activation_params: list[float] | None = None,
    out_rank: int = 0,
) -> np.ndarray:
    """``act(alpha * op(A) @ W + bias)``.

    ``W`` is (K, N) in the compute dtype; ``bias`` (N,) or absent. Without ``trans_a``, ``A`` is
    (..., K) (MatMul with a 2-D weight: leading dims flattened into the GEMM's rows; a 1-D ``A``
    gives an (N,) result); with ``trans_a`` it is 2-D (K, M) as in Gemm. ``out_rank`` prepends
    size-1 dims up to that rank (a bias Add of higher rank than the product broadcasts so).
    """
    dtype = a.dtype
    cd = compute_dtype(dtype)
    if w.dtype != cd or w.ndim != 2:
        raise ctx.error(f"the fused weight must be 2-D {cd}, got {w.dtype} {w.shape}")
    ac = a if a.dtype == cd else a.astype(cd)
    K, N = w.shape
    if trans_a:
        if ac.ndim != 2:
            raise ctx.error(f"Gemm needs a 2-D A, got shape {a.shape}")
        a2 = ac.T
        lead: tuple[int, ...] = (a2.shape[0],)
    else:
        if ac.ndim == 0:
            raise ctx.error("MatMul needs inputs of rank >= 1, got a scalar")
        lead = ac.shape[:-1]
        a2 = ac.reshape(-1, ac.shape[-1])
    if a2.shape[1] != K:
        raise ctx.error(f"inner dimensions differ: A {a.shape} and the weight ({K}, {N})")
    y = np.empty((a2.shape[0], N), cd)
    if y.size:
        if K == 0:
            y.fill(0)
        else:
            matmul_into(a2, w, y)
        code, p0, p1 = activation_args(ctx, activation, activation_params, cd)
        run_rows(y, alpha, bias, code, p0, p1)
    shape = lead + (N,)
    if len(shape) < out_rank:
        shape = (1,) * (out_rank - len(shape)) + shape
    y = y.reshape(shape)
    return y if cd == dtype else y.astype(dtype)
