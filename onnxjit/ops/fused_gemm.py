"""``FusedGemm``: a GEMM by BLAS with its epilogue (bias + activation) fused in.

Created by ``onnxjit.passes.patterns_gemm.fuse_gemm_epilogue`` from MatMul/Gemm + bias Add +
activation. The weight arrives pre-arranged at rewrite time as a C-contiguous (K, N) matrix of
the compute dtype, and the bias (already multiplied by Gemm's beta) as an (N,) vector, so a run
is one :func:`onnxjit.ops.gemm.matmul_into`: the pool's threads each take tiles of the output,
one BLAS call and then the bias and activation on the tile while it is in cache.

The activation helpers here are shared with ``FusedConv``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxjit import buffers
from onnxjit.backends.cpu.pool import run_parallel
from onnxjit.buffers import Slot
from onnxjit.kernels import _jit
from onnxjit.kernels.cpu import blas as kblas
from onnxjit.kernels.cpu import epilogue as kep
from onnxjit.ops import nn
from onnxjit.ops.gemm import Epilogue, empty_array, matmul_into
from onnxjit.ops.gemm import bind as gemm_bind
from onnxjit.registry import MISS, NodeContext, fast_path, internal_op, plain_array

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


def run_rows(
    y: np.ndarray, alpha: float, bias: np.ndarray | None, code: int, p0: object, p1: object
) -> None:
    """Apply the row epilogue to the C-contiguous 2-D ``y`` in place."""
    if code == kep.ACT_NONE and bias is None and alpha == 1.0:
        return
    t = y.dtype.type
    b = empty_array(y.dtype, 1) if bias is None else bias
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
    y = buffers.empty((a2.shape[0], N), cd)
    if y.size:
        code, p0, p1 = activation_args(ctx, activation, activation_params, cd)
        ep = Epilogue(bias=bias, bias_mode=kblas.BIAS_COL, act=code, p0=p0, p1=p1)
        if cd in _NATIVE and a2.flags.c_contiguous and K:
            # the fast path's kernel (packed weight), not a second specialisation to compile
            run = gemm_bind(1, a2.shape[0], N, K, False, 0, w.reshape(-1), False, 0, cd, alpha,
                            0.0, ep, a2.reshape(-1), constant_b=ctx.constant(1))  # fmt: skip
            run(a2.reshape(-1), y.reshape(-1))
        else:
            matmul_into(a2, w, y, alpha=alpha, epilogue=ep)
    shape = lead + (N,)
    if len(shape) < out_rank:
        shape = (1,) * (out_rank - len(shape)) + shape
    y = y.reshape(shape)
    return y if cd == dtype else y.astype(dtype)


def _product_runner(
    a: np.ndarray, w: np.ndarray, out_shape: tuple[int, ...], alpha: float, ep: Epilogue
) -> Any:
    """``run(a2) -> y``: ``alpha * a2 @ w`` plus the epilogue ``ep`` into a new array of
    ``out_shape``, for any ``a2`` shaped, typed and laid out like ``a`` (float32/float64,
    C-contiguous, rows = all but its last dim); ``w`` is an initializer (K, N) of the same
    dtype, packed once. Every decision for these sizes is made here, once."""
    K, N = w.shape
    M = a.size // K
    dtype = a.dtype
    run = gemm_bind(1, M, N, K, False, 0, w.reshape(-1), False, 0, dtype, alpha, 0.0, ep,
                    a.reshape(-1), constant_b=True)  # fmt: skip
    out = Slot(out_shape, dtype)

    def product(a2: np.ndarray) -> np.ndarray:
        y = out.get()
        run(a2.reshape(-1), y.reshape(-1))
        return y

    return product


def _plain_operand(a: Any) -> bool:
    """``a`` can be the A of a prepared product: a float32/float64 C-contiguous array of
    rank >= 1 with no zero-size dimension."""
    return (
        type(a) is np.ndarray
        and a.dtype in _NATIVE
        and a.ndim >= 1
        and a.size > 0
        and a.flags.c_contiguous
    )


@fast_path(fused_gemm)
def _prepare(ctx: NodeContext, args: tuple, kwargs: dict, result: Any) -> Any:
    """FusedGemm for one shape of A (float32/float64, no trans_a), with the same weight and
    bias objects: the output shape, epilogue and kernel choice are fixed."""
    a, w = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    if not ctx.constant_args(args, (1, 2)):
        return None  # the plan keys on the weight and bias objects: initializers only
    dtype = a.dtype
    if kwargs.get("trans_a") or not _plain_operand(a) or w.dtype != dtype:
        return None
    K, N = w.shape
    shape = a.shape
    if K == 0 or N == 0:
        return None
    out_shape = shape[:-1] + (N,)
    out_rank = kwargs.get("out_rank") or 0
    if len(out_shape) < out_rank:
        out_shape = (1,) * (out_rank - len(out_shape)) + out_shape
    code, p0, p1 = activation_args(ctx, kwargs["activation"], kwargs["activation_params"], dtype)
    ep = Epilogue(bias=bias, bias_mode=kblas.BIAS_COL, act=code, p0=p0, p1=p1)
    product = _product_runner(a, w, out_shape, kwargs["alpha"], ep)

    def fast(a2: Any, w2: Any, b2: Any = None) -> Any:
        if w2 is not w or b2 is not bias or not plain_array(a2, shape, dtype):
            return MISS
        return product(a2)

    return fast


@fast_path(nn.matmul)
def _prepare_matmul(ctx: NodeContext, args: tuple, kwargs: dict, result: Any) -> Any:
    """MatMul by an initializer 2-D B (float32/float64, what graph optimisation would turn
    into FusedGemm; this serves sessions below that level): the same prepared product."""
    a, b = args
    if not ctx.constant(1) or not _plain_operand(a) or type(b) is not np.ndarray:
        return None
    if b.ndim != 2 or b.dtype != a.dtype or not b.flags.c_contiguous or 0 in b.shape:
        return None
    if a.shape[-1] != b.shape[0]:
        return None
    shape, dtype = a.shape, a.dtype
    product = _product_runner(a, b, shape[:-1] + (b.shape[1],), 1.0, Epilogue())

    def fast(a2: Any, b2: Any) -> Any:
        if b2 is not b or not plain_array(a2, shape, dtype):
            return MISS
        return product(a2)

    return fast


@fast_path(nn.gemm)
def _prepare_plain_gemm(ctx: NodeContext, args: tuple, kwargs: dict, result: Any) -> Any:
    """Gemm-7+ of a 2-D A (not transposed) by an initializer B, with C absent or an
    initializer that is a scalar or one row of N (a fully connected layer): ``beta * C``
    becomes the epilogue's bias, computed once. Other C shapes keep the operator."""
    a, b = args[0], args[1]
    c = args[2] if len(args) > 2 else None
    if not ctx.constant_args(args, (1, 2)) or kwargs.get("transA", 0) or not _plain_operand(a):
        return None
    if a.ndim != 2 or type(b) is not np.ndarray or b.ndim != 2 or b.dtype != a.dtype:
        return None
    w = b.T if kwargs.get("transB", 0) else b
    K, N = w.shape
    if a.shape[1] != K or N == 0:
        return None
    dtype = a.dtype
    bias = None
    beta = kwargs.get("beta", 1.0)
    if c is not None and beta != 0:
        if type(c) is not np.ndarray or c.dtype != dtype or c.size not in (1, N):
            return None
        if c.size == N and c.shape[-1] != N:  # (N, 1) with N == M would be per row
            return None
        bias = np.ascontiguousarray(np.broadcast_to(c.reshape(-1) * dtype.type(beta), (N,)))
    ep = Epilogue(bias=bias, bias_mode=kblas.BIAS_COL)
    # the weight as (K, N) rows (transB: one transposed copy; the packing copies it anyway)
    wk = np.ascontiguousarray(w)
    product = _product_runner(a, wk, (a.shape[0], N), kwargs.get("alpha", 1.0), ep)
    shape = a.shape

    def fast(a2: Any, b2: Any, c2: Any = None) -> Any:
        if b2 is not b or c2 is not c or not plain_array(a2, shape, dtype):
            return MISS
        return product(a2)

    return fast
