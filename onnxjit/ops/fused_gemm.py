"""``FusedGemm``: a GEMM with its epilogue (bias, residual, activation) fused in.

Created by ``onnxjit.passes.patterns_gemm.fuse_gemm_epilogue`` from MatMul/Gemm + bias Add +
activation. The weight arrives pre-arranged at rewrite time as a C-contiguous (K, N) matrix of
the compute dtype, and the bias (already multiplied by Gemm's beta) as an (N,) vector, so a run
is one product of :mod:`onnxjit.ops.gemm`: the backend's threads each take tiles of the
output, one BLAS or micro-kernel call and then the bias and activation on the tile while it is
in cache. A plan binds it once per input shape, the weight packed into the micro-kernel's
panels.

The activation helpers here are shared with ``FusedConv``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxjit.lowering import TENSOR, Bound, In, LowerContext, Out, lowers, tensor, writes
from onnxjit.ops.gemm import (
    Epilogue,
    apply_epilogue,
    bound_product,
    epilogue_args,
    matmul_into,
    packed_weight,
    product,
)
from onnxjit.registry import NodeContext, internal_op

_NATIVE = (np.dtype(np.float32), np.dtype(np.float64))

# activation attribute value -> (the backend's code of it in family "epilogue", number of
# parameters)
ACTIVATIONS: dict[str, tuple[str, int]] = {
    "": ("ACT_NONE", 0),
    "Relu": ("ACT_RELU", 0),
    "LeakyRelu": ("ACT_LEAKY_RELU", 1),
    "Sigmoid": ("ACT_SIGMOID", 0),
    "Tanh": ("ACT_TANH", 0),
    "Clip": ("ACT_CLIP", 2),
    "Gelu": ("ACT_GELU", 0),
    "GeluTanh": ("ACT_GELU_TANH", 0),
    "HardSigmoid": ("ACT_HARD_SIGMOID", 2),
    "Silu": ("ACT_SILU", 0),
    "HardSwish": ("ACT_HARD_SWISH", 0),
}


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """float32/float64 stay; float16, bfloat16 compute in float32."""
    return dtype if dtype in _NATIVE else np.dtype(np.float32)


def activation_args(
    ctx: NodeContext,
    name: str,
    params: Sequence[float] | None,
    dtype: np.dtype,
    backend: Any = None,
) -> tuple[int, np.generic, np.generic]:
    """The epilogue's (code, p0, p1) for activation ``name`` on ``backend`` (default: the
    node's); parameters in ``dtype``."""
    if name not in ACTIVATIONS:
        raise ctx.unsupported(f"activation {name!r} is not one of {sorted(ACTIVATIONS)}")
    const, n = ACTIVATIONS[name]
    p = [float(v) for v in (params or [])]
    if len(p) != n:
        raise ctx.error(f"activation {name} takes {n} parameters, got {p}")
    p += [0.0] * (2 - n)
    t = dtype.type
    code = (backend or ctx.backend).kernel("epilogue", const)
    return code, t(p[0]), t(p[1])


@internal_op("FusedGemm")
def fused_gemm(
    ctx: NodeContext,
    a: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    *,
    trans_a: int = 0,
    alpha: float = 1.0,
    activation: str = "",
    activation_params: list[float] | None = None,
    out_rank: int = 0,
) -> np.ndarray:
    """``act(alpha * op(A) @ W + bias + residual)``.

    ``W`` is (K, N) in the compute dtype; ``bias`` (N,) or absent. Without ``trans_a``, ``A`` is
    (..., K) (MatMul with a 2-D weight: leading dims flattened into the GEMM's rows; a 1-D ``A``
    gives an (N,) result); with ``trans_a`` it is 2-D (K, M) as in Gemm. ``out_rank`` prepends
    size-1 dims up to that rank (a bias Add of higher rank than the product broadcasts so).
    ``residual`` (of A's type) is added as ONNX's Add would: the result has the broadcast
    shape of the product and the residual (in the epilogue when that is the product's shape).
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
    shape = lead + (N,)
    if len(shape) < out_rank:
        shape = (1,) * (out_rank - len(shape)) + shape
    y = np.empty((a2.shape[0], N), cd)
    res = None
    if residual is not None:
        try:
            full = np.broadcast_shapes(shape, residual.shape)
        except ValueError:
            raise ctx.error(
                f"the residual of shape {residual.shape} does not broadcast with the product's "
                f"shape {shape}"
            ) from None
        if full == shape:
            res = np.ascontiguousarray(np.broadcast_to(residual, shape), cd).reshape(y.shape)
    if y.size:
        backend = ctx.backend
        code, p0, p1 = activation_args(ctx, activation, activation_params, cd, backend)
        mode = backend.kernel("blas", "BIAS_COL")
        widens = residual is not None and res is None
        ep = Epilogue(bias=bias, bias_mode=mode, residual=res)
        if not widens:
            ep = ep._replace(act=code, p0=p0, p1=p1)
        matmul_into(a2, w, y, alpha=alpha, epilogue=ep, backend=backend)
    y = y.reshape(shape)
    if residual is not None and res is None:  # the residual widens the result: Add's broadcast
        y = np.add(y, residual.astype(cd, copy=False))
        if y.size and y.ndim >= 2:
            code, p0, p1 = activation_args(ctx, activation, activation_params, cd)
            apply_epilogue(ctx.backend, y, Epilogue(act=code, p0=p0, p1=p1))
    return y if cd == dtype else y.astype(dtype)


@lowers(fused_gemm)
def _lower_fused_gemm(lc: LowerContext) -> Bound | None:
    """FusedGemm of an A (no trans_a, no zero-size dim) by a weight of the compute type, with
    a bias constant for the plan or none: one product kernel writing the output, the weight
    packed once when it is constant (a float32/float64 A's weight may also be an input, read
    as stored at every run), the epilogue's bias and activation fixed. A float16/bfloat16 A
    is cast into a float32 scratch buffer, and the product cast back into the output."""
    a, w = lc.inputs[0], lc.inputs[1]
    bias = lc.inputs[2] if len(lc.inputs) > 2 else None
    if lc.attrs["trans_a"] or a is None or a.kind != TENSOR:
        return None
    if a.dtype not in _NATIVE and a.dtype.name not in ("float16", "bfloat16"):
        return None
    if a.ndim < 1 or a.size == 0 or w is None or w.kind != TENSOR or w.ndim != 2:
        return None
    cd = compute_dtype(a.dtype)
    K, N = w.shape
    if w.dtype != cd or K == 0 or N == 0 or a.shape[-1] != K or (cd != a.dtype and not w.const):
        return None
    b = None
    if bias is not None:
        if not bias.const or bias.kind != TENSOR or bias.shape != (N,) or bias.dtype != cd:
            return None  # the implementation (a bias the plan does not hold)
        b = np.ascontiguousarray(bias.value)
    residual = lc.inputs[3] if len(lc.inputs) > 3 else None
    shape = a.shape[:-1] + (N,)
    rank = lc.attrs["out_rank"] or 0
    if len(shape) < rank:
        shape = (1,) * (rank - len(shape)) + shape
    if residual is not None and (
        residual.kind != TENSOR or residual.shape != shape or residual.dtype != a.dtype
        or cd != a.dtype
    ):  # fmt: skip
        return None  # the implementation: a residual that broadcasts, or a float16 one
    backend = lc.backend
    code, p0, p1 = activation_args(
        lc.ctx, lc.attrs["activation"], lc.attrs["activation_params"], cd, backend
    )
    mode = backend.kernel("blas", "BIAS_COL")
    ep = epilogue_args(backend, Epilogue(bias=b, bias_mode=mode, act=code, p0=p0, p1=p1), cd)
    M, alpha = a.size // K, lc.attrs["alpha"]
    if cd == a.dtype:
        weight = np.ascontiguousarray(w.value) if w.const else In(1, flat=True)
        res = None if residual is None else In(3, flat=True)
        return bound_product(backend, a, weight, M, N, K, shape, alpha, ep, residual=res)
    packed = packed_weight(backend, np.ascontiguousarray(w.value), K, N)
    b_packed = backend.kernel("blas", "B_PACKED")
    fn, args = product(
        backend, 1, M, N, K, None, 0, 0, packed, b_packed, 0, None, cd, alpha, 0.0, ep
    )  # fmt: skip
    head, mid, tail = args[:4], args[5:8], args[9:]

    def half(x: np.ndarray, y: np.ndarray, x32: np.ndarray, y32: np.ndarray) -> None:
        np.copyto(x32, x, casting="unsafe")
        fn(*head, x32, *mid, y32, *tail)
        np.copyto(y, y32, casting="unsafe")

    outs = [tensor(a.dtype, shape), tensor(cd, (M * K,)), tensor(cd, (M * N,))]
    return writes(
        half, In(0, flat=True), Out(0, flat=True), Out(1), Out(2), outs=outs,
        name="blas.gemm_ks_half",
    )  # fmt: skip
