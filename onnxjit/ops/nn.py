"""Neural-network operators: contractions, convolution, pooling, normalisation, softmax.

Contractions (MatMul, Gemm, Conv's GEMM) go to the backend's product kernels
(:mod:`onnxjit.ops.gemm`), Einsum to numpy; data movement that numpy cannot do in one pass
(im2col, col2im, depthwise convolution, pooling, normalisations, softmax, LRN) runs in the
backend's kernel families ``conv``, ``pool``, ``norm``, ``nn`` (``kernels/cpu/`` on the CPU).
Plans bind MatMul, Gemm, Conv, MaxPool and GlobalAveragePool once per input shape (their
lowerings); the implementations work out the same calls at every call.

Conventions shared by every operator here:

* float16 / bfloat16 inputs are computed in float32 and cast back (``_compute``/``_back``).
* Spatial operators canonicalise their inputs to three spatial dims (leading size-1 dims) so
  that one compiled kernel per dtype serves 1-D, 2-D and 3-D.
* Parallel kernel twins run only when the work exceeds the backend's parallel threshold.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from onnxjit.backends import default as default_backend
from onnxjit.lowering import (
    TENSOR,
    Bound,
    In,
    LowerContext,
    Out,
    lowers,
    tensor,
    writes,
)
from onnxjit.ops import gemm as blas
from onnxjit.ops.fused_norm import layer_norm_rows, lower_layer_norm, rows_of, softmax_last
from onnxjit.registry import NodeContext, onnx_op

# Schema defaults are stored as float32 in the ONNX schemas; the signatures use the exact value
# so that the registry's default lint sees equality.
_EPS = float(np.float32(1e-5))
_MOMENTUM = float(np.float32(0.9))
_LRN_ALPHA = float(np.float32(1e-4))

# Upper bound on one im2col buffer: larger batches are processed in chunks of images.
_COL_BYTES = 64 << 20

_NATIVE_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


# --------------------------------------------------------------------------------------------
# helpers


def _compute(x: np.ndarray) -> np.ndarray:
    """float32/float64 unchanged; float16, bfloat16 (and small ints) -> float32."""
    if x.dtype in _NATIVE_FLOATS:
        return x
    return x.astype(np.float32)


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    return dtype if dtype in _NATIVE_FLOATS else np.dtype(np.float32)


def _is_float(dtype: np.dtype) -> bool:
    # bfloat16 / float8 (ml_dtypes) have kind "V", not "f".
    return dtype.kind not in "iub"


def _back(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return y if y.dtype == dtype else y.astype(dtype)


def _norm_axis(ctx: NodeContext, axis: int, rank: int, allow_end: bool = False) -> int:
    hi = rank + 1 if allow_end else rank
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < max(hi, 1):
        raise ctx.error(f"axis {axis} is out of range for an input of rank {rank}")
    return a


def _pad3(vals: Sequence[int], fill: int) -> list[int]:
    return [fill] * (3 - len(vals)) + [int(v) for v in vals]


def _i64(vals: Sequence[int]) -> np.ndarray:
    return np.asarray(vals, dtype=np.int64)


# Largest dilation, kernel extent or pad the window kernels take (see _geometry).
_MAX_WINDOW_VALUE = 1 << 31


def _geometry(
    ctx: NodeContext,
    in_sz: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None,
    pads: Sequence[int] | None,
    auto_pad: str,
    ceil_mode: int = 0,
) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """Pads at the beginning and end, output sizes, strides and dilations of a sliding window.

    SAME_* gives ``ceil(in / stride)`` outputs and splits the padding with the odd one at the
    end (UPPER) or beginning (LOWER). With ``ceil_mode`` a last window that would start inside
    the end padding is dropped (onnx / PyTorch rule).
    """
    nsp = len(in_sz)
    st = [int(s) for s in strides] if strides else [1] * nsp
    dl = [int(d) for d in dilations] if dilations else [1] * nsp
    if len(st) != nsp or len(dl) != nsp or len(kernel) != nsp:
        raise ctx.error(
            f"strides {st}, dilations {dl} and kernel {list(kernel)} must each have one entry "
            f"per spatial dim ({nsp}); fix the attributes"
        )
    if min(st, default=1) < 1 or min(dl, default=1) < 1 or min(kernel, default=1) < 1:
        raise ctx.error(f"strides {st}, dilations {dl}, kernel {list(kernel)} must be >= 1")
    # The kernels compute window positions in 64-bit integers: a stride near 2**63 wrapped
    # there and wrote outside the output (found by the fuzzer). A stride is used only when
    # there are two windows or more (then it is below the padded input's size): see the end.
    # Dilations, kernels and pads that large cannot describe a window that fits.
    huge = [v for v in (*dl, *kernel, *(pads or ())) if abs(int(v)) >= _MAX_WINDOW_VALUE]
    if huge:
        raise ctx.error(
            f"dilations {dl}, kernel {list(kernel)} and pads {list(pads or [])} must each be "
            f"below 2**31 (found {huge[0]}); fix the attributes"
        )
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dl)]
    auto_pad = auto_pad or "NOTSET"
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [-(-i // s) for i, s in zip(in_sz, st)]
        pb, pe = [], []
        for i in range(nsp):
            total = max((out[i] - 1) * st[i] + span[i] - in_sz[i], 0)
            small = total // 2
            if auto_pad == "SAME_UPPER":
                pb.append(small)
                pe.append(total - small)
            else:
                pb.append(total - small)
                pe.append(small)
        return pb, pe, out, _used_strides(st, out), dl
    if auto_pad == "VALID":
        pb, pe = [0] * nsp, [0] * nsp
    elif auto_pad == "NOTSET":
        p = [int(v) for v in pads] if pads else [0] * (2 * nsp)
        if len(p) != 2 * nsp or min(p, default=0) < 0:
            raise ctx.error(
                f"pads {p} must hold 2 * {nsp} non-negative values (all begins, then all ends)"
            )
        pb, pe = p[:nsp], p[nsp:]
    else:
        raise ctx.unsupported(
            f"auto_pad={auto_pad!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID"
        )
    out = []
    for i in range(nsp):
        room = in_sz[i] + pb[i] + pe[i] - span[i]
        # with ceil_mode a window longer than the padded input still makes one output (the
        # spec's ceil((room) / stride) + 1 is 1 while room > -stride): transformers'
        # EfficientNet pools its last 7x7 map with AvgPool2d(1280, ceil_mode=True)
        if room < 0 and not (ceil_mode and room > -st[i]):
            raise ctx.error(
                f"the window (extent {span[i]}) is larger than the padded input "
                f"({in_sz[i]} + {pb[i]} + {pe[i]}) on spatial dim {i}; reduce the kernel or pad"
            )
        o = (-(-room // st[i]) if ceil_mode else room // st[i]) + 1
        if ceil_mode and (o - 1) * st[i] >= in_sz[i] + pb[i]:
            o -= 1
        out.append(o)
    return pb, pe, out, _used_strides(st, out), dl


def _used_strides(st: list[int], out: list[int]) -> list[int]:
    """The strides with 1 where a dim has one window (its stride is never multiplied by a
    non-zero position, so any value gives the same result, and a huge one overflowed)."""
    return [1 if o <= 1 else s for s, o in zip(st, out)]


def _spatial_rank(ctx: NodeContext, x: np.ndarray) -> int:
    nsp = x.ndim - 2
    if nsp < 1:
        raise ctx.error(f"expected an input (N, C, spatial...) of rank >= 3, got shape {x.shape}")
    if nsp > 3:
        raise ctx.unsupported(f"{nsp}-D spatial inputs are not supported (1-D to 3-D are)")
    return nsp


# --------------------------------------------------------------------------------------------
# MatMul, Gemm, MatMulInteger, Einsum


@onnx_op("MatMul", since=1)
@onnx_op("MatMul", since=9)
@onnx_op("MatMul", since=13)
def matmul(ctx: NodeContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy.matmul semantics (1-D promotion, batch broadcasting); BLAS for floats."""
    if a.ndim == 0 or b.ndim == 0:
        raise ctx.error(f"MatMul needs inputs of rank >= 1, got shapes {a.shape} and {b.shape}")
    ka = a.shape[-1]
    kb = b.shape[-2] if b.ndim >= 2 else b.shape[0]
    if ka != kb:
        raise ctx.error(f"inner dimensions differ: A {a.shape} and B {b.shape}")
    dtype = a.dtype
    if _is_float(dtype):
        y = blas.matmul(_compute(a), _compute(b), ctx.backend)
    else:
        y = np.matmul(a, b)
    return _back(np.asarray(y), dtype)


def _gemm(
    ctx: NodeContext,
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray | None,
    alpha: float,
    beta: float,
    trans_a: int,
    trans_b: int,
) -> np.ndarray:
    if a.ndim != 2 or b.ndim != 2:
        raise ctx.error(f"Gemm needs 2-D A and B, got shapes {a.shape} and {b.shape}")
    at = a.T if trans_a else a
    bt = b.T if trans_b else b
    if at.shape[1] != bt.shape[0]:
        raise ctx.error(
            f"inner dimensions differ: op(A) is {at.shape}, op(B) is {bt.shape}; check transA/"
            "transB"
        )
    dtype = a.dtype
    m, n = at.shape[0], bt.shape[1]
    c_ok = c is None or (c.ndim <= 2 and all(s in (1, t) for s, t in zip(c.shape[::-1], (n, m))))
    if not c_ok and beta != 0:
        raise ctx.error(f"C of shape {c.shape} does not broadcast to ({m}, {n})")
    if _is_float(dtype):
        y = blas.matmul(_compute(at), _compute(bt), ctx.backend)
        if alpha != 1.0:
            y *= y.dtype.type(alpha)
        if c is not None and beta != 0:
            cc = _compute(c)
            y += cc if beta == 1.0 else cc * y.dtype.type(beta)
        return _back(y, dtype)
    # Integer Gemm: exact when alpha/beta are integral, else computed in float64 and truncated.
    y = np.matmul(at, bt)
    if float(alpha).is_integer() and float(beta).is_integer():
        if alpha != 1.0:
            y = y * dtype.type(int(alpha))
        if c is not None and beta != 0:
            y = y + (c if beta == 1.0 else c * dtype.type(int(beta)))
        return _back(y, dtype)
    yf = y.astype(np.float64) * alpha
    if c is not None and beta != 0:
        yf = yf + beta * c.astype(np.float64)
    return yf.astype(dtype)


@onnx_op("Gemm", since=7)
@onnx_op("Gemm", since=9)
@onnx_op("Gemm", since=11)
@onnx_op("Gemm", since=13)
def gemm(
    ctx: NodeContext,
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray | None = None,
    *,
    alpha: float,
    beta: float,
    transA: int,  # noqa: N803 - ONNX attribute name
    transB: int,  # noqa: N803
) -> np.ndarray:
    """``alpha * op(A) @ op(B) + beta * C``; C broadcasts unidirectionally (optional from 11)."""
    return _gemm(ctx, a, b, c, alpha, beta, transA, transB)


@onnx_op("Gemm", since=1)
@onnx_op("Gemm", since=6)
def gemm_6(
    ctx: NodeContext,
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray | None = None,
    *,
    alpha: float,
    beta: float,
    broadcast: int,
    transA: int,  # noqa: N803
    transB: int,  # noqa: N803
) -> np.ndarray:
    """Gemm before 7: C must have the output's shape unless ``broadcast=1``."""
    if c is not None and not broadcast:
        m = a.shape[1] if transA else a.shape[0]
        n = b.shape[0] if transB else b.shape[1]
        if c.shape != (m, n):
            raise ctx.error(f"C has shape {c.shape}, expected ({m}, {n}) since broadcast=0")
    return _gemm(ctx, a, b, c, alpha, beta, transA, transB)


def _operands(lc: LowerContext, n: int) -> bool:
    """Inputs ``0 .. n-1`` are float32/float64 tensors of one type with no zero-size dim."""
    first = lc.inputs[0]
    for s in lc.inputs[:n]:
        if s is None or s.kind != TENSOR or s.dtype not in _NATIVE_FLOATS:
            return False
        if s.dtype != first.dtype or s.ndim == 0 or s.size == 0:
            return False
    return True


@lowers(matmul)
def _lower_matmul(lc: LowerContext) -> Bound | None:
    """MatMul of float32/float64 operands: by a 2-D B constant for the plan, one product of
    all of A's rows with B packed once (what graph optimisation turns into FusedGemm; this
    serves sessions below that level); by any other B (attention's products, a KV cache's),
    the batched product of fixed sizes, both operands read as stored (C-contiguous) and a
    single matrix shared by the stack where one side broadcasts."""
    if len(lc.inputs) < 2 or not _operands(lc, 2):
        return None
    a, b = lc.inputs[0], lc.inputs[1]
    dtype = a.dtype
    if b.const and b.ndim == 2:
        K, N = b.shape
        if a.shape[-1] != K:
            return None
        w = np.ascontiguousarray(b.value)
        return blas.bound_product(lc.backend, a, w, a.size // K, N, K, a.shape[:-1] + (N,))
    a2 = a.shape if a.ndim >= 2 else (1, *a.shape)
    b2 = b.shape if b.ndim >= 2 else (*b.shape, 1)
    (m, k), (k2, n) = a2[-2:], b2[-2:]
    if k != k2:
        return None
    try:
        lead = np.broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError:
        return None
    lead_a, lead_b = a2[:-2], b2[:-2]
    if not (lead_a == lead or all(d == 1 for d in lead_a)):
        return None
    if not (lead_b == lead or all(d == 1 for d in lead_b)):
        return None
    sa = m * k if lead_a == lead and lead else 0
    sb = k * n if lead_b == lead and lead else 0
    shape = (*lead, *((m,) if a.ndim >= 2 else ()), *((n,) if b.ndim >= 2 else ()))
    fn, args = blas.product(
        lc.backend, math.prod(lead), m, n, k, In(0, flat=True), 0, sa, In(1, flat=True), 0, sb,
        Out(0, flat=True), dtype,
    )  # fmt: skip
    return writes(fn, *args, outs=[tensor(dtype, shape)], name="blas.gemm_ks")


@lowers(gemm)
def _lower_gemm(lc: LowerContext) -> Bound | None:
    """Gemm-7+ of a 2-D float32/float64 A (not transposed) by a B constant for the plan,
    with C absent or constant and a scalar or one row of N (a fully connected layer):
    ``beta * C`` becomes the epilogue's bias, B is packed once (transposed first for
    transB). Other C shapes keep the operator."""
    if not _operands(lc, 2) or lc.attrs["transA"]:
        return None
    a, b = lc.inputs[0], lc.inputs[1]
    c = lc.inputs[2] if len(lc.inputs) > 2 else None
    if a.ndim != 2 or b.ndim != 2 or not b.const:
        return None
    dtype = a.dtype
    trans_b = bool(lc.attrs["transB"])
    N, K = b.shape if trans_b else b.shape[::-1]
    if a.shape[1] != K:
        return None
    bias = None
    beta = lc.attrs["beta"]
    if c is not None and beta != 0:
        if not c.const or c.kind != TENSOR or c.dtype != dtype or c.size not in (1, N):
            return None
        if c.ndim > 2 or (c.size == N and c.shape[-1] != N):  # (N, 1) with N == M: per row
            return None
        bias = np.ascontiguousarray(np.broadcast_to(c.value.reshape(-1) * dtype.type(beta), (N,)))
    backend = lc.backend
    ep = blas.epilogue_args(
        backend, blas.Epilogue(bias=bias, bias_mode=backend.kernel("blas", "BIAS_COL")), dtype
    )
    w = blas.packed_weight(backend, np.ascontiguousarray(b.value), K, N, transposed=trans_b)
    return blas.bound_product(
        backend, a, w, a.shape[0], N, K, (a.shape[0], N), lc.attrs["alpha"], ep, packed=True
    )


@onnx_op("MatMulInteger", since=10)
def matmul_integer(
    ctx: NodeContext,
    a: np.ndarray,
    b: np.ndarray,
    a_zero_point: np.ndarray | None = None,
    b_zero_point: np.ndarray | None = None,
) -> np.ndarray:
    """``(A - a_zero_point) @ (B - b_zero_point)`` in int32. a_zero_point is a scalar or one
    value per row of A; b_zero_point a scalar or one value per column of B.

    Computed with float64 BLAS: products of 8-bit values and their sums up to 2**53 are exact,
    so the result equals integer arithmetic while using BLAS instead of numpy's integer loop.
    """
    af = a.astype(np.float64)
    bf = b.astype(np.float64)
    if a_zero_point is not None:
        azp = a_zero_point.astype(np.float64)
        if azp.ndim == 1 and azp.size > 1:
            if a.ndim < 2 or azp.shape[0] != a.shape[-2]:
                raise ctx.error(
                    f"a_zero_point of shape {azp.shape} must be a scalar or have one value per "
                    f"row of A {a.shape}"
                )
            azp = azp.reshape(-1, 1)
        af -= azp
    if b_zero_point is not None:
        bzp = b_zero_point.astype(np.float64)
        bf -= bzp
    if af.shape[-1] != (bf.shape[-2] if bf.ndim >= 2 else bf.shape[0]):
        raise ctx.error(f"inner dimensions differ: A {a.shape} and B {b.shape}")
    return np.asarray(np.matmul(af, bf)).astype(np.int32)


# Largest magnitude of an 8-bit operand after its zero point is subtracted (uint8 - uint8 or
# int8 - int8): what bounds the float32 blocks of an integer product (see _INT_EXACT).
_INT8_SHIFTED_MAX = 255
# float32 holds every integer of magnitude below 2**24 exactly.
_INT_EXACT = 1 << 24
_INT8_TYPES = (np.dtype(np.uint8), np.dtype(np.int8))


def integer_block(k: int, a_max: int, b_max: int) -> int:
    """Steps per block of an integer product of inner length ``k`` held in float32 whose
    operands are bounded by ``a_max`` and ``b_max`` in magnitude: the blocks' sums stay below
    2**24 (exact in float32), and the steps are spread evenly over as few blocks as that
    allows."""
    most = max(1, (_INT_EXACT - 1) // max(1, a_max * b_max))
    blocks = -(-k // most)
    return -(-k // blocks)


def zero_point_spec(s: Any, n: int) -> bool:
    """An absent zero point, or an 8-bit one holding one value or ``n`` (1-D)."""
    if s is None:
        return True
    if s.kind != TENSOR or s.dtype not in _INT8_TYPES:
        return False
    return s.size == 1 or (s.ndim == 1 and s.size == n)


class IntegerProduct:
    """A bound MatMulInteger of ``m_rows`` rows of A (a stack of ``m``-row matrices) by a
    ``k x n`` B. On the micro-kernel's int16-pair mode where the CPU has one (``blas.
    INT_PAIRS``): A's rows shifted by their zero point into int16 rows of an even length
    (kernel ``quant.shift_rows``), B shifted and packed in pairs of steps (``blas.
    pack_b_pairs``), the int32 product exact in one pass (``blas.igemm_pairs``). Elsewhere
    the operands go to float32 and the product in float32 blocks that are exact
    (``blas.igemm_ks``, :func:`integer_block`). A constant B is prepared once (shared by
    the session's plans), a fed one at each run into scratch ``b_f``."""

    def __init__(
        self,
        backend: Any,
        a_dtype: np.dtype,
        sizes: tuple[int, int, int, int],
        b_const: np.ndarray | None,
        b_zp: np.ndarray | None,
    ):
        m_rows, m, n, k = sizes
        self.m_rows, self.m, self.n, self.k = sizes
        self.pairs = backend.kernel("blas", "INT_PAIRS") is not None
        threads = backend.threads()
        parallel = threads > 1 and m_rows * n * k >= blas.PARALLEL_MACS
        tm, tn = backend.kernel("blas", "tiles")(1, m_rows, n, k, threads, 4)
        if not parallel:
            tm, tn = m_rows, n
        self.tm, self.tn = tm, tn
        a_sample = np.empty(1, a_dtype)
        zp = None
        if b_const is not None:
            zp = np.zeros(1, np.int16) if b_zp is None else b_zp.reshape(-1).astype(np.int16)
        if self.pairs:
            self.kp = (k + 1) // 2
            self.ld = 2 * self.kp
            work = np.int16
            self.b_size = backend.kernel("blas", "pairs_b_size")(k, n)
        else:
            self.ld = k
            work = np.float32
            self.b_size = k * n
        self.work = np.dtype(work)
        self.name = "blas.igemm_pairs" if self.pairs else "blas.igemm_ks"
        sample = (a_sample, a_sample, k, m, self.ld, np.empty(1, work))
        self.shift = backend.launcher("quant", "shift_rows", m_rows * k, sample)
        if b_const is not None:
            packer = _integer_weight_packer(backend, zp, self.pairs)
            self.b = blas.packed_with(backend, packer, b_const.reshape(-1), k, n, constant=True)
        else:
            self.b = None
        if self.pairs:
            self.pack = backend.kernel("blas", "pack_b_pairs_into")
            i16 = np.empty(1, np.int16)
            sample = (m_rows, n, self.kp, i16, i16, np.empty(1, np.int32), tm, tn)
            self.gemm = (
                backend.pooled("blas", "igemm_pairs", sample)
                if parallel
                else backend.kernel("blas", "igemm_pairs")
            )
            return
        if b_const is not None:
            b_max = int(np.abs(b_const.astype(np.float32) - zp.astype(np.float32)).max())
            self.tb = backend.kernel("blas", "B_PACKED")
        else:
            b_max = _INT8_SHIFTED_MAX
            self.tb = 0
        self.kb = integer_block(k, _INT8_SHIFTED_MAX, b_max)
        f = np.empty(1, np.float32)
        if parallel:
            self.gemm = backend.pooled(
                "blas", "igemm_ks",
                (1, m_rows, n, k, f, 0, f, 0, np.empty(1, np.int32), self.tb, tm, tn, self.kb),
            )  # fmt: skip
        else:
            self.gemm = backend.kernel("blas", "igemm_ks")

    def __call__(self, a, b, a_zp, b_zp, out, a_w, b_w) -> None:
        """``out = (a - a_zp) @ (b - b_zp)``; ``a_w``, ``b_w``: the scratch of A's rows and
        (when B is fed) of B, in :attr:`work`'s type."""
        self.shift(a, a_zp, self.k, self.m, self.ld, a_w)
        bb = self.b
        if self.pairs:
            if bb is None:
                self.pack(b, b_zp, self.k, self.n, b_w)
                bb = b_w
            self.gemm(self.m_rows, self.n, self.kp, a_w, bb, out, self.tm, self.tn)
            return
        if bb is None:  # B of this run: its rows are B's rows, the zero point per column
            _shift_columns(b, b_zp, self.n, b_w)
            bb = b_w
        self.gemm(1, self.m_rows, self.n, self.k, a_w, 0, bb, 0, out, self.tb, self.tm, self.tn,
                  self.kb)  # fmt: skip


def _shift_columns(b: np.ndarray, zp: np.ndarray, n: int, out: np.ndarray) -> None:
    """``out = float32(b) - zp`` for the flat row-major ``k x n`` matrix ``b``, ``zp`` one
    value or one per column."""
    np.subtract(
        b.reshape(-1, n), zp.reshape(-1).astype(np.float32), out=out.reshape(-1, n),
        dtype=np.float32, casting="unsafe",
    )  # fmt: skip


def integer_zero_point(s: Any, i: int, dtype: np.dtype) -> Any:
    """The argument standing for zero point input ``i``: the input, or a one-value zero."""
    return np.zeros(1, dtype) if s is None else In(i, flat=True)


def _integer_weight_packer(backend: Any, zp: np.ndarray, pairs: bool) -> Any:
    """The packer of a constant 8-bit B minus ``zp`` (one value or one per column): int16 in
    the pairs of steps of the int16-pair kernel (``blas.pack_b_pairs``), or float32 in the
    micro-kernel's panels (``blas.pack_b``); named for the layout and ``zp`` so that the
    shared packed copies (``blas.packed_with``) of one B with two zero points stay apart."""
    if pairs:
        pack_pairs = backend.kernel("blas", "pack_b_pairs")

        def pack(w: np.ndarray, k: int, n: int) -> np.ndarray:
            return pack_pairs(w, zp, k, n)

    else:
        pack_b = backend.kernel("blas", "pack_b")

        def pack(w: np.ndarray, k: int, n: int) -> np.ndarray:
            f = np.subtract(w.reshape(k, n), zp, dtype=np.float32)
            return pack_b(f.reshape(-1), k, n)

    digest = hashlib.sha1(zp.tobytes()).hexdigest()[:16]
    pack.__name__ = f"pack_integer_b_{'pairs' if pairs else 'f32'}_{digest}"
    return pack


@lowers(matmul_integer)
def _lower_matmul_integer(lc: LowerContext) -> Bound | None:
    """8-bit A (rank >= 2, batched rows) by a 2-D 8-bit B: the exact int32 product of
    :class:`IntegerProduct`. A constant B (with a constant zero point) is shifted, converted
    and packed once."""
    a, b = lc.inputs[0], lc.inputs[1]
    if a is None or b is None or a.kind != TENSOR or b.kind != TENSOR:
        return None
    if a.dtype not in _INT8_TYPES or b.dtype not in _INT8_TYPES or a.ndim < 2 or b.ndim != 2:
        return None
    m, k = a.shape[-2:]
    k2, n = b.shape
    if k != k2 or a.size == 0 or b.size == 0:
        return None
    a_zp = lc.inputs[2] if len(lc.inputs) > 2 else None
    b_zp = lc.inputs[3] if len(lc.inputs) > 3 else None
    if not (zero_point_spec(a_zp, m) and zero_point_spec(b_zp, n)):
        return None
    for s, x in ((a_zp, a), (b_zp, b)):
        if s is not None and s.dtype != x.dtype:
            return None
    m_rows = a.size // k
    b_const = None
    if b.const and (b_zp is None or b_zp.const):
        b_const = np.ascontiguousarray(b.value)
    zp_value = None if b_zp is None or b_const is None else b_zp.value
    run = IntegerProduct(lc.backend, a.dtype, (m_rows, m, n, k), b_const, zp_value)
    outs = [
        tensor(np.int32, (*a.shape[:-1], n)),
        tensor(run.work, (m_rows * run.ld,)),
        tensor(run.work, (0 if b_const is not None else run.b_size,)),
    ]
    args = (
        In(0, flat=True), In(1, flat=True), integer_zero_point(a_zp, 2, a.dtype),
        integer_zero_point(b_zp, 3, b.dtype), Out(0, flat=True), Out(1), Out(2),
    )  # fmt: skip
    return writes(run, *args, outs=outs, name=run.name)


@onnx_op("Einsum", since=12)
@onnx_op("Einsum", since=28)
def einsum(ctx: NodeContext, *inputs: np.ndarray, equation: str | None = None) -> np.ndarray:
    """numpy.einsum with ``optimize=True`` (pairwise contractions go to BLAS)."""
    if not equation:
        raise ctx.error("the equation attribute is required")
    eq = equation.replace(" ", "")
    if not inputs:
        raise ctx.error("Einsum needs at least one input")
    dtype = inputs[0].dtype
    ops = [_compute(x) for x in inputs] if _is_float(dtype) else list(inputs)
    try:
        y = np.einsum(eq, *ops, optimize=len(ops) > 1)
    except ValueError as exc:
        raise ctx.error(f"equation {equation!r} does not fit the inputs: {exc}") from None
    # einsum may return a numpy scalar, or a strided view for pure transposes: give an array,
    # C-contiguous so later kernels need no copy.
    y = np.asarray(y)
    if not y.flags.c_contiguous:
        y = np.ascontiguousarray(y)
    return _back(y, dtype)


# --------------------------------------------------------------------------------------------
# Conv, ConvTranspose, ConvInteger


# Convolution tuning, measured on the 2-core AMD EPYC (AVX-512) development VM.
# im2col of output rows narrower than this goes through a gather table (one gather per
# (channel, tap) row instead of one short copy per output row: 0.3 against 2 ns per element
# for 4-wide rows).
_GATHER_OW = 16
# Work above which im2col (elements written), depthwise convolution and max pooling
# (multiply-adds / comparisons) run on the pool's threads, as a right shift of
# PARALLEL_THRESHOLD (these kernels do more per element than an elementwise one).
_IM2COL_SHIFT = 5
_WINDOW_SHIFT = 4
# Depthwise convolutions of 1-D and 2-D planes with at most this many outputs per plane run
# DW_LANES channels at a time across vector lanes (kernels/cpu/conv.py, depthwise_tiles).
_DW_TILE_MAX = 64
_DW_TILE_MAX_OW = 16
# Grouped convolutions with at most this many taps per output (input channels per group x
# kernel taps) run the direct grouped kernel (kernels/cpu/conv.py, grouped) rather than im2col
# and a GEMM per group.
_GROUPED_MAX_K = 128
# Output rows at least this wide run the row-blocked convolution (group 1).
_ROWS_MIN_OW = 16
# Output columns per block of the row-blocked convolution (whole output rows, at least one).
_ROW_BLOCK = 64
# Conv GEMM tiles: rows of weights per BLAS call and the longest inner dimension of one call
# (see _conv_tiles).
_CONV_TM = 24
_CONV_TK = 576
# The BLAS Numba calls (OpenBLAS) multiplies blocks with M*N*K up to this without packing
# the operands: conv GEMM tiles under it ran 1.2-1.5x faster than 64-wide packed tiles.
_SMALL_GEMM = 1_000_000
# Products of at most this many columns (1x1 convolutions of 4x4 and 5x5 planes) are cut
# across their rows only, into at least this many tiles (an even count, for two threads).
_FEW_COLUMNS = 32
_MIN_ROW_TILES = 4
# Implicit-GEMM convolutions (2-D, undilated, kernels/cpu/conv_taps.py): output channels per
# block (rounded down to a multiple of MR) and columns of the product per block (rounded down
# to a multiple of NR). On the development VM, ResNet-18's 3x3 layers at 2 threads: 64x28x28
# 242 -> 211 us, 128x14x14 244-250 -> 218, 256x7x7 299-319 -> 235 with column blocks and one
# activation call per channel and block instead of blocks of whole output rows and a call per
# row; block shapes of 24 to 48 channels and 96 to 480 columns were within noise.
_TAPS_TM = 48
_TAPS_COLS = 128
# Narrower outputs keep the im2col path: the (KW - 1) // stride dropped columns per row are too
# many of the product (ResNet-18's 4x4 layers of 512 channels: 380-400 -> 580-610 us).
_TAPS_MIN_OW = 7
# Strided convolutions up to this stride run it on phase planes (ResNet-18's 7x7 stem and
# 3x3 downsampling layers); larger strides keep im2col.
_TAPS_MAX_STRIDE = 4
# Winograd F(2x2, 3x3) for 3x3 stride-1 convolutions (kernels/cpu/conv_winograd.py) with
# outputs at least this wide and at least this many input channels. On the development VM,
# 2 threads: 7x7 outputs of 256 channels 283 us against 222 for the implicit GEMM (8x8
# outputs computed for 49, a quarter of the product columns unused), 8x8 of 128 channels 75
# against 100; 16 channels at 56x56 69 against 71 (break-even), 8 channels 33 against 35
# there but 7 against 6 at 14x14.
_WINO_MIN_OW = 8
_WINO_MIN_C = 16
# Columns of the products per work item (whole rows of tiles, see _wino_blocks), and the
# most bytes of product blocks per thread (output channels per item are cut to fit).
_WINO_COLS = 128
_WINO_MBUF_BYTES = 1 << 20


def _wino_blocks(n: int, th: int, tw1: int, nr: int, n_threads: int) -> int:
    """Rows of tiles per work item of a Winograd convolution (``n`` images of ``th`` rows of
    ``tw1`` product columns each), so that the busiest thread has the least to do: an item
    costs about its columns rounded up to whole micro-kernel blocks of ``nr`` (the
    products), half its actual columns (the transforms) and a fixed part (16 columns),
    items go to threads largest first. On the development VM, 2 threads, ResNet-18's layers
    at 112 pixels: 64x28x28 136 us with two items of 7 tile rows against 147-160 with four
    to eight smaller ones, 128x14x14 135 against 154-161."""
    best, best_cost = 1, math.inf
    for rows in range(max(1, min(th, _WINO_COLS // tw1)), 0, -1):
        sizes = [min(rows, th - r) * tw1 for r in range(0, th, rows)] * n
        loads = [0.0] * max(1, n_threads)
        for cols in sorted(sizes, reverse=True):
            i = loads.index(min(loads))
            loads[i] += -(-cols // nr) * nr + 0.5 * cols + 16
        cost = max(loads)
        if cost < best_cost:
            best, best_cost = rows, cost
    return best


def _conv_tiles(m: int, n: int, k: int) -> tuple[int, int, int]:
    """Tile shape ``(tm, tn, tk)`` of a convolution GEMM (``m`` output channels, ``n`` output
    positions, inner ``k`` taken in chunks of ``tk``, one BLAS call each), from sweeps of the
    C1/C2 shapes at 112 and 224 pixels on the development VM (weights read from memory as in
    a network):

    * OpenBLAS multiplies a block with ``tm * tn * tk <= _SMALL_GEMM`` without packing the
      operands, 1.1-1.6x faster here than 64-row/column packed tiles; packed tiles also do
      not scale over the pool's two threads (two concurrent packed calls took as long as one
      thread making both), and some shapes just over the limit (8 x 49 x 4608) ran 50x
      slower;
    * long inner dimensions (``k >= 1024``: 3x3 convolutions of 128+ channels) are therefore
      cut into chunks of ``_CONV_TK``, so that the tiles can stay unpacked with 24 rows:
      ResNet-18 at 224 pixels ran 1.40 -> 1.27x onnxruntime against 8-row tiles of the
      whole ``k`` (and 128-row packed tiles for ``k = 4608``);
    * column blocks start at multiples of 16 (a block of 49 starting at column 49 ran 20 %
      slower than blocks of 48); wider than 64 columns gained nothing;
    * shorter rows (``k < 1024``) prefer taller tiles of the whole ``k`` (up to 64 rows),
      then as many columns as keep the tile under ``_SMALL_GEMM``: with a short ``k`` each
      64-column call was mostly BLAS's fixed cost (C2's 96 x 3136 x 16 layer made 98 calls;
      in 8 it ran 119 -> 103 us, the whole network 2.17 -> 2.04 ms, 2 threads);
    * products of at most ``_FEW_COLUMNS`` columns (1x1 layers on 4x4 planes) take the whole
      ``n`` and split the rows into an even number of equal tiles, at least
      ``_MIN_ROW_TILES``, as tall as stays unpacked: single-layer models at 2 threads, C2's
      960 x 16 x 160 ran 29-30 us against 32-33 in 15 tiles of 64 rows, 160 x 16 x 960
      28-29 against 34 in 3 (64, 64, 32), 1280 x 16 x 320 61-63 against 64;
    * an odd count of fewer than 8 tiles gets one more row tile (one thread of two would
      wait for the last): 32 x 196 x 144 14-15 us against 18-19 in one tile, 64 x 49 x 192
      13 against 16, 96 x 49 x 384 22-23 against 27, 192 x 196 x 32 17-18 against 21.

    These products (1x1 convolutions and the im2col of outputs narrower than
    ``_ROWS_MIN_OW``: the small late layers) stay with BLAS where OpenBLAS runs its AVX-512
    kernels (:func:`blas.small_blocks_in_place`; there onnxjit's micro-kernel was as fast in
    a loop but up to 1.6x slower on ResNet-18's 512-channel layers run between onnxruntime
    runs, weights no longer in cache: C1 in bench/ went 7.3 -> 10 ms). Elsewhere
    :meth:`_ConvPlan._gemm_call` gives them to the micro-kernel and these tiles are unused.
    """
    if k >= 1024:
        tk = min(k, _CONV_TK)
        tn = min(n, 64)
        tm = _CONV_TM
        while tm > 8 and tm * tn * tk > _SMALL_GEMM:
            tm -= 8
        return min(m, tm), tn, tk
    if n <= _FEW_COLUMNS:
        # the whole (tiny) n: rows in at least _MIN_ROW_TILES tiles of equal height, each
        # as tall as stays unpacked (C2's 960 x 16 x 160 layer: 4 tiles of 240 rows, 29-30 us
        # against 32-33 with 15 of 64; 1280 x 16 x 320: 8 of 160, 59-62 us against 64)
        cap = max(8, _SMALL_GEMM // (n * k) // 8 * 8)
        count = max(_MIN_ROW_TILES, -(-m // cap))
        count += count % 2
        tm = min(m, (-(-m // count) + 7) // 8 * 8)
        return tm, n, k
    tn = min(n, 64)
    tm = 64
    while tm > 8 and tm * tn * k > _SMALL_GEMM:
        tm //= 2
    tm = min(m, tm)
    tn = max(tn, min(n, _SMALL_GEMM // (tm * k) // 16 * 16))
    gm, gn = -(-m // tm), -(-n // tn)
    if gm * gn < 2 * _MIN_ROW_TILES and gm * gn % 2:
        # an odd count of a few tiles leaves one thread of two idle at the end: one
        # more row tile (C2's 96 x 49 x 576: 4 tiles of 24 rows, 28-30 us against
        # 37 in 3 of 32)
        tm = (-(-m // (gm + 1)) + 7) // 8 * 8
    return tm, tn, k


def _rows_plan(n: int, rows: int, ow: int, n_threads: int) -> int:
    """Output rows per block of the row-blocked convolution, for ``n`` images of ``rows``
    output rows ``ow`` wide: blocks of about ``_ROW_BLOCK`` columns (whole output rows, at
    least one), and at least 4 blocks per thread to share out. Each block is one product of
    all the weights by its im2col block (the micro-kernel blocks the inner dimension)."""
    rpb = max(1, _ROW_BLOCK // ow)
    return max(1, min(rpb, n * rows // (4 * n_threads)))


# What a _ConvPlan runs
_ZEROS, _POINTWISE, _DEPTHWISE, _IM2COL, _ROWS, _TAPS, _WINOGRAD, _GROUPED = range(8)
_KIND_NAMES = ("zeros", "pointwise", "depthwise", "im2col", "rows", "taps", "winograd", "grouped")

# The arguments of a convolution's call, as a plan passes them (the implementation resolves
# the same references itself, see _ConvPlan.run): the input, the residual (FusedConv's input
# 3, flat), the output, and scratch outputs.
_X = In(0)
_R = In(3, flat=True)
_Y = Out(0)
_YF = Out(0, flat=True)


def _dw3_fits(x_sp, ks, st, dl, pb, out, mult) -> bool:
    """The depthwise geometry kernels/cpu/conv.py's depthwise3 takes: 2-D planes of at least
    2 x 2, a 3x3 kernel, stride 1 or 2 (the same on both axes; stride 2 with an even width),
    no dilation, one pixel of padding before each axis and the output size that implies, one
    output channel per input channel; or stride 2 with no padding before either axis on even
    sizes, and half of each as the output (TensorFlow's "same" padding, which MobileNets
    exported from Keras or transformers have)."""
    if mult != 1 or len(ks) != 2 or tuple(ks) != (3, 3) or tuple(dl) != (1, 1):
        return False
    s = st[0]
    H, W = x_sp
    if s == 2 and st[1] == 2 and tuple(pb) == (0, 0):
        return H >= 2 and H % 2 == 0 and W >= 2 and W % 2 == 0 and tuple(out) == (H // 2, W // 2)
    if s not in (1, 2) or st[1] != s or tuple(pb) != (1, 1):
        return False
    if H < 2 or W < 2 or (s == 2 and W % 2):
        return False
    return tuple(out) == ((H - 1) // s + 1, (W - 1) // s + 1)


class _ConvPlan:
    """A convolution of one input shape with one weight and epilogue, every decision made
    once: the method (1x1 GEMM, depthwise kernel, grouped kernel, Winograd, implicit GEMM,
    im2col by runs or by gather table + GEMM), GEMM tiles, which kernels run on the backend's
    threads, weights in the layout their kernel reads. :meth:`call` is then the call a plan
    binds (Conv's and FusedConv's lowerings make one plan per input shape); :meth:`run` makes
    it at once (the operators' implementations, one plan per call).

    ``w`` is (M, C/group, *ks) in the compute dtype; ``bias`` (M,) or None; ``has_res``:
    the call takes a residual shaped like the output (C-contiguous, compute dtype);
    ``constant_w``: ``w`` is an initializer, whose rearranged copies every plan of a session
    shares; ``winograd``: 3x3 stride-1 convolutions of at least ``_WINO_MIN_C`` channels and
    outputs at least ``_WINO_MIN_OW`` wide may run Winograd F(2x2, 3x3) (conv_winograd);
    ``backend``: the one whose kernels run (default :func:`onnxjit.backends.default`)."""

    def __init__(
        self, x_shape, dtype, w, group, ks, st, dl, pb, out, bias, has_res, act, p0, p1,
        constant_w=False, winograd=True, backend=None,
    ):  # fmt: skip
        self.backend = backend = backend or default_backend()
        dtype = np.dtype(dtype)
        N, C = x_shape[:2]
        M = w.shape[0]
        cg, mg = C // group, M // group
        s_out = math.prod(out)
        K = math.prod(ks)
        t = dtype.type
        self.dtype = dtype
        self.has_res = has_res
        self.constant_w = constant_w
        self.y_shape = (N, M, *out)
        self.empty = empty = blas.empty_array(dtype)
        self.ep = (
            empty if bias is None else bias,
            _k(backend, "blas", "BIAS_NONE" if bias is None else "BIAS_ROW"),
            bias is not None,
            has_res,
            act,
            t(p0),
            t(p1),
        )
        self.conv_ep = ConvEpilogue(bias, None, act, t(p0), t(p1))
        self.scratch: list[tuple[int, ...]] = []  # shapes of the call's scratch outputs
        self.ep_pos: int | None = None  # where a kernel called as it is takes its epilogue
        if N == 0 or M == 0 or s_out == 0 or cg == 0 or K == 0:
            self.kind = _ZEROS
            with_ep = not (N == 0 or M == 0 or s_out == 0)
            self.fn, self.args = self._zeros(with_ep), (_Y,)
            return
        n_threads = backend.threads()
        w = np.ascontiguousarray(w, dtype)
        x_sp = tuple(x_shape[2:])
        # A device backend has the general kernels only (the implicit GEMM, the depthwise
        # loops, the stride-1 pointwise product): the CPU's specialised methods stage data
        # through host-side numpy work (strided copies, tap buffers, packed panels).
        device = backend.name != "cpu"
        if (
            group == 1
            and all(k == 1 for k in ks)
            and all(p == 0 for p in pb)
            and all((i - 1) // s + 1 == o for i, s, o in zip(x_sp, st, out))
            and not (device and any(s != 1 for s in st))
        ):
            # 1x1 convolution: a strided view of the input is already the GEMM operand
            # (stride 1: the input itself; stride > 1: one strided copy), no im2col.
            self.kind = _POINTWISE
            w2 = w.reshape(M, C)
            if all(s == 1 for s in st):
                self.fn, self.args = self._gemm_call(w2, M, s_out, C, N, n_threads,
                                                     In(0, flat=True), _YF)  # fmt: skip
                self.ep_pos = 13
                return
            steps = (slice(0, (o - 1) * s + 1, s) for o, s in zip(out, st))
            sl = (slice(None), slice(None), *steps)
            self.scratch = [(N, C, *out)]
            self.fn = self._strided_pointwise(w2, M, s_out, C, N, n_threads, sl)
            self.args = (_X, _YF, Out(1))
            return
        self.x5_shape = (N, C, *_pad3(x_sp, 1))
        k3, st3, dl3, pb3 = (
            _i64(_pad3(ks, 1)),
            _i64(_pad3(st, 1)),
            _i64(_pad3(dl, 1)),
            _i64(_pad3(pb, 0)),
        )
        osz = _i64(_pad3(out, 1))
        x5, y5 = In(0, shape=self.x5_shape), Out(0, shape=(N, M, *osz.tolist()))
        window = backend.parallel_threshold >> _WINDOW_SHIFT
        if group > 1 and cg == 1 and group == C:
            # Depthwise: direct loops with the epilogue fused (a GEMM with one input channel
            # would be all overhead).
            self.kind = _DEPTHWISE
            self.mult = M // C
            name = "depthwise"
            wk = w.reshape(M, K)
            if device:
                pass  # the general loops, any geometry
            elif len(ks) <= 2 and s_out <= _DW_TILE_MAX and out[-1] <= _DW_TILE_MAX_OW:
                # small planes: channels across vector lanes, the weights of each block of
                # lanes (taps + bias, lanes) repeated along an output row
                lanes = _k(backend, "conv", "DW_LANES")
                nb = -(-M // lanes)
                wt = np.zeros((nb * lanes, K + 1), dtype)
                wt[:M, :K] = wk
                if bias is not None:
                    wt[:M, K] = bias
                wt = wt.reshape(nb, lanes, K + 1).transpose(0, 2, 1)
                wk = np.ascontiguousarray(np.tile(wt, (1, 1, out[-1]))).ravel()
                name = "depthwise_tiles"
            elif _dw3_fits(x_sp, ks, st, dl, pb, out, M // C):
                # MobileNet's 3x3 of larger planes: flat loops over each plane, no padded copy
                # (2-thread kernel on C2's layers: 1.5-2.4x faster than the per-plane one)
                name = "depthwise3"
            self.dw_args = (wk, k3, st3, dl3, pb3)
            sample = (
                np.empty(self.x5_shape, dtype),
                *self.dw_args,
                np.empty((N, M, *osz.tolist()), dtype),
                self.mult,
                self._dw_ep(empty),
            )
            self.dw = backend.launcher("conv", name, N * M * s_out * K, sample, window)
            self.fn, self.args = self.dw, (x5, *self.dw_args, y5, self.mult, self._dw_ep(empty))
            self.ep_pos = 8
            return
        if group > 1 and cg * K <= _GROUPED_MAX_K and not device:
            # Grouped with few taps per output (RegNet's 3x3 of 8 channels per group,
            # ResNeXt-32x4d's early stages): direct loops per group, the epilogue fused;
            # im2col made one small GEMM per group and image from Python (RegNetY-400MF at
            # 96 pixels: its grouped layers 59 % of the run, 3.6x onnxruntime in all)
            self.kind = _GROUPED
            self.dw_args = (np.ascontiguousarray(w.reshape(M, cg * K)), k3, st3, dl3, pb3)
            sample = (
                np.empty(self.x5_shape, dtype),
                *self.dw_args,
                np.empty((N, M, *osz.tolist()), dtype),
                group,
                self._dw_ep(empty),
            )
            work = N * M * s_out * cg * K
            self.dw = backend.launcher("conv", "grouped", work, sample, window)
            self.fn, self.args = self.dw, (x5, *self.dw_args, y5, group, self._dw_ep(empty))
            self.ep_pos = 8
            return
        if (
            group == 1
            and tuple(ks) == (3, 3)
            and all(v == 1 for v in (*st, *dl))
            and out[1] >= _WINO_MIN_OW
            and C >= _WINO_MIN_C
            and winograd
            and not device
        ):
            self._plan_winograd(x_shape, w, pb, out, n_threads)
            return
        if (
            group == 1
            and len(ks) == 2
            and all(v == 1 for v in dl)
            and all(v <= _TAPS_MAX_STRIDE for v in st)
            and out[1] >= _TAPS_MIN_OW
            and not device
        ):
            # the micro-kernel reads the padded input (or its phase planes) in place
            self._plan_taps(x_shape, w, ks, st, pb, out, n_threads)
            return
        if device or (group == 1 and osz[2] >= _ROWS_MIN_OW):
            # im2col by blocks of output rows, each multiplied while it is in cache (on a
            # device: the implicit GEMM, which also takes groups)
            self.kind = _ROWS
            kt = cg * K
            rpb = _rows_plan(N, int(osz[0] * osz[1]), int(osz[2]), n_threads)
            w2 = np.ascontiguousarray(w.reshape(M, kt))
            wp = blas.packed_rows(backend, w2.reshape(-1), M, kt, constant_w)
            self.rows_args = (w2, wp, k3, st3, dl3, pb3)
            self.rows_tail = (M, rpb, kt)
            sample = (
                np.empty(self.x5_shape, dtype),
                *self.rows_args,
                np.empty((N, M, *osz.tolist()), dtype),
                self._dw_ep(empty),
                *self.rows_tail,
            )
            self.rows = _product_kernel(backend, "conv", "conv_rows", N * M * s_out * kt, sample)
            self.fn = self.rows
            self.args = (x5, *self.rows_args, y5, self._dw_ep(empty), *self.rows_tail)
            self.ep_pos = 8
            return
        self.kind = _IM2COL
        per_image = C * K * s_out * dtype.itemsize
        chunk = max(1, min(N, _COL_BYTES // max(per_image, 1)))
        col_shape = (chunk, C * K, s_out)
        sample_x = np.empty(self.x5_shape, dtype)
        sample_col = np.empty(col_shape, dtype)
        if osz[2] < _GATHER_OW:
            tab = _gather_table(backend, k3, st3, dl3, pb3, osz, _i64(self.x5_shape[2:]))
            im2col_args = (0, C, tab)
            name = "im2col_gather"
        else:
            im2col_args = (0, C, k3, st3, dl3, pb3, osz)
            name = "im2col"
        im2col = backend.launcher(
            "conv", name, chunk * C * K * s_out, (sample_x, *im2col_args, sample_col),
            backend.parallel_threshold >> _IM2COL_SHIFT,
        )  # fmt: skip
        w2 = w.reshape(M, cg * K)
        gemm = None
        if group == 1:
            gemm = self._gemm_runner(w2, M, s_out, cg * K, chunk, n_threads)
        self.scratch = [col_shape]
        self.fn = self._im2col_conv(im2col, im2col_args, gemm, w2, group, cg, mg, K, chunk)
        self.args = (x5, Out(0, shape=(N, M, s_out)), Out(1))

    def _plan_taps(self, x_shape, w, ks, st, pb, out, n_threads: int) -> None:
        """The implicit-GEMM plan of a 2-D undilated convolution (see conv_taps)."""
        dtype, backend = self.dtype, self.backend
        N, C, H, W = x_shape
        M = w.shape[0]
        KH, KW = ks
        sh, sw = st
        OH, OW = out
        Hq, Wq = OH + (KH - 1) // sh, OW + (KW - 1) // sw
        kt = C * KH * KW
        self.kind = _TAPS
        xp_shape = (N, C * sh * sw, Hq, Wq)
        mr, nr = _k(backend, "ukernel", "geometry")(dtype.itemsize)
        tm = M if M <= _TAPS_TM else _TAPS_TM // mr * mr
        cpb = max(nr, _TAPS_COLS // nr * nr)
        col_blocks = N * -(-((OH - 1) * Wq + OW) // cpb)
        if n_threads > 1 and col_blocks < n_threads and mr < M:
            # Fewer column blocks than threads (outputs of 7x7 and so): the threads split
            # the channels, so one block each, as equal as MR allows. With blocks of
            # _TAPS_TM the pool's halves were unequal (256 channels: 144 against 112). At 2
            # threads a one-node 256x7x7 3x3 layer took 261-267 -> 239 us; in C1 its three
            # such layers and the 128 -> 256 stride-2 one are 3-6 % faster each (about 40
            # us a run, inside the whole run's noise).
            per = -(-M // n_threads)
            tm = min(M, -(-per // mr) * mr)
        w2 = np.ascontiguousarray(w.reshape(M, kt))
        wp = blas.packed_rows(backend, w2.reshape(-1), M, kt, self.constant_w)
        tab = _k(backend, "conv_taps", "tap_table")(C, KH, KW, sh, sw, Hq * Wq, Wq)
        self.taps_args = (tab, wp)
        geo = (int(sh), int(sw), int(pb[0]), int(pb[1]))
        self.taps_tail = (geo, tm, cpb, min(kt, _CONV_TK))
        sample = (
            np.empty(x_shape, dtype),
            np.empty(xp_shape, dtype),
            np.zeros(2, np.int64),
            *self.taps_args,
            np.empty(self.y_shape, dtype),
            self._dw_ep(self.empty),
            *self.taps_tail,
        )
        self.taps = _product_kernel(backend, "conv_taps", "conv_taps", N * M * OH * OW * kt, sample)
        self.fn = self._taps_conv(xp_shape)
        self.args = (_X, _Y)

    def _plan_winograd(self, x_shape, w, pb, out, n_threads: int) -> None:
        """The Winograd F(2x2, 3x3) plan of a 3x3 stride-1 convolution (see conv_winograd)."""
        dtype, backend = self.dtype, self.backend
        N, C = x_shape[:2]
        M = w.shape[0]
        OH, OW = out
        TH, TW1 = (OH + 1) // 2, (OW + 1) // 2 + 1
        self.kind = _WINOGRAD
        mr, nr = _k(backend, "ukernel", "geometry")(dtype.itemsize)
        tile_rows = _wino_blocks(N, TH, TW1, nr, n_threads)
        per_row = 16 * tile_rows * TW1 * dtype.itemsize
        tm = min(M, max(mr, _WINO_MBUF_BYTES // per_row // mr * mr))
        transform = _k(backend, "conv_winograd", "weights")

        def wino_weights(wf: np.ndarray, m: int, c: int) -> np.ndarray:
            # the transformed weights in the micro-kernel's panels
            return transform(wf.reshape(m, c, 3, 3), mr)

        w4 = np.ascontiguousarray(w)
        up = blas.packed_with(self.backend, wino_weights, w4.reshape(-1), M, C, self.constant_w)
        self.wino_args = (up,)
        self.wino_tail = ((int(pb[0]), int(pb[1])), tm, tile_rows, min(C, _CONV_TK))
        sample = (
            np.empty(x_shape, dtype),
            up,
            np.empty(self.y_shape, dtype),
            self._dw_ep(self.empty),
            *self.wino_tail,
        )
        work = N * M * OH * OW * C * 4
        self.wino = _product_kernel(backend, "conv_winograd", "conv_winograd", work, sample)
        self.fn = self.wino
        self.args = (_X, up, _Y, self._dw_ep(self.empty), *self.wino_tail)
        self.ep_pos = 3

    def _dw_ep(self, res: np.ndarray) -> tuple:
        bias, _mode, has_bias, has_res, act, p0, p1 = self.ep
        return (bias, has_bias, res, has_res, act, p0, p1)

    def _gemm_call(
        self, w2, m: int, n: int, k: int, batch: int, n_threads: int, b: Any, c: Any
    ) -> tuple[Any, tuple]:
        """``(fn, args)``: ``c[p] = act(w2 @ b[p] + bias + res[p])`` on flat C-contiguous
        ``b`` (batch, k, n) and ``c`` (batch, m, n) (arrays or a plan's references; ``res``
        in the epilogue, ``args[13]``, empty), in tiles with the epilogue applied to each as
        the product leaves it: BLAS's tiles of :func:`_conv_tiles` where
        :func:`blas.small_blocks_in_place` (OpenBLAS's AVX-512 kernels), the micro-kernel's
        with the weights packed once otherwise."""
        backend = self.backend
        t = self.dtype.type
        bias, mode, _has_bias, has_res, act, p0, p1 = self.ep
        par = n_threads > 1 and batch * m * n * k >= blas.PARALLEL_MACS
        if blas.small_blocks_in_place():
            backend.blas_ready()
            tm, tn, tk = _conv_tiles(m, n, k)
            a = w2.reshape(-1)
            ta, tb = 0, _k(backend, "blas", "B_BLAS")
        else:
            # OpenBLAS's Haswell kernel (AVX2 CPUs, AMD Zen) packs both operands at every
            # call. On a Zen 3 at 2 threads, ResNet-18 at 112 pixels: its 512-channel 4x4
            # layers 1.9 -> 0.78 ms each (onnxruntime 0.83), 1x1 downsampling 130-157 ->
            # 82-136 us; the whole network 1.66 -> 1.20-1.29x onnxruntime in bench/
            threads = n_threads if par else 1
            # few output positions (a late layer's 6x6 or 3x3 planes): the product as its
            # transpose, the positions in the micro-kernel's rows (the kernels of a device
            # backend take the weights as stored)
            few = backend.name == "cpu" and _k(backend, "blas", "transposed_tiles")(
                batch, m, n, k, threads, self.dtype.itemsize
            )
            if few:
                a = blas.packed_weight(backend, w2, k, m, transposed=True, constant=self.constant_w)
                ta, tb = _k(backend, "blas", "A_PANELS_T"), 0
                tm, tn = few
            else:
                a = blas.packed_rows(backend, w2.reshape(-1), m, k, self.constant_w)
                ta, tb = _k(backend, "blas", "A_PACKED"), 0
                tm, tn = _k(backend, "blas", "tiles")(batch, m, n, k, threads, self.dtype.itemsize)
            tk = k
        ep = (bias, mode, self.empty, has_res, act, p0, p1)
        args = (batch, m, n, k, a, 0, b, k * n, c, ta, tb, t(1), t(0), ep, tm, tn, tk)
        if par:
            s = np.empty(1, self.dtype)
            sample = (*args[:6], s, k * n, s, *args[9:])
            return backend.pooled("blas", "gemm_ks", sample), args
        return _k(backend, "blas", "gemm_ks"), args

    def _gemm_runner(self, w2, m: int, n: int, k: int, batch: int, n_threads: int) -> Any:
        """``run(batch, b, c, res)``: :meth:`_gemm_call`'s product for ``batch`` matrices or
        fewer (the last chunk of images), made at once (``res`` flat like ``c``, or empty)."""
        fn, args = self._gemm_call(w2, m, n, k, batch, n_threads, None, None)
        head, kn, mid, (bias, mode, _r, has_res, act, p0, p1), tail = (
            args[1:6], args[7], args[9:13], args[13], args[14:]
        )  # fmt: skip

        def run(batch: int, b: np.ndarray, c: np.ndarray, res: np.ndarray) -> None:
            fn(batch, *head, b, kn, c, *mid, (bias, mode, res, has_res, act, p0, p1), *tail)

        return run

    def _strided_pointwise(self, w2, m, n, k, batch, n_threads, sl) -> Any:
        """The call of a strided 1x1 convolution: the strided input copied into a scratch
        buffer, then the product."""
        gemm = self._gemm_runner(w2, m, n, k, batch, n_threads)
        empty = self.empty

        def pointwise(x: np.ndarray, yf: np.ndarray, xs: np.ndarray, r: Any = None) -> None:
            np.copyto(xs, x[sl])
            gemm(batch, xs.reshape(-1), yf, empty if r is None else r)

        return pointwise

    def _taps_conv(self, xp_shape: tuple[int, ...]) -> Any:
        """The call of an implicit-GEMM convolution. Its padded input buffer is zeroed once
        and reused: ``conv_taps`` writes only the elements that hold input (the same ones at
        every call of this plan), so the padding stays zero; each concurrent call takes a
        buffer no other holds."""
        taps, (tab, wp), tail = self.taps, self.taps_args, self.taps_tail
        bias, has_bias, _r, has_res, act, p0, p1 = self._dw_ep(self.empty)
        empty, dtype = self.empty, self.dtype
        idle: list[np.ndarray] = []

        def conv_taps(x: np.ndarray, y: np.ndarray, r: Any = None) -> None:
            try:
                xp = idle.pop()
            except IndexError:
                xp = np.zeros(xp_shape, dtype)
            try:
                ep = (bias, has_bias, empty if r is None else r, has_res, act, p0, p1)
                taps(x, xp, np.zeros(2, np.int64), tab, wp, y, ep, *tail)
            finally:
                idle.append(xp)

        return conv_taps

    def _zeros(self, with_ep: bool) -> Any:
        """The call of a convolution with nothing to sum: zeros, plus the epilogue."""
        backend, ep = self.backend, self.conv_ep

        def zeros(y: np.ndarray, r: Any = None) -> None:
            y.fill(0)
            if with_ep:
                res = None if r is None else r.reshape(y.shape)
                _conv_epilogue(backend, y, ep._replace(residual=res))

        return zeros

    def _im2col_conv(self, im2col, im2col_args, gemm, w2, group, cg, mg, K, chunk) -> Any:
        """The call of an im2col convolution: chunks of images unfolded into the scratch
        buffer ``col``, each multiplied by the weights (per group: numpy's products)."""
        backend, conv_ep, empty = self.backend, self.conv_ep, self.empty

        def conv_im2col(x5: np.ndarray, y: np.ndarray, col: np.ndarray, r: Any = None) -> None:
            N = y.shape[0]
            rf = empty if r is None else r
            per_res = rf.size // N if r is not None else 0
            per_y = y.size // N
            yf = y.reshape(-1)
            for n0 in range(0, N, chunk):
                n1 = min(N, n0 + chunk)
                cs = col[: n1 - n0]
                im2col(x5[n0:n1], *im2col_args, cs)
                if group == 1:
                    rr = rf[n0 * per_res : n1 * per_res] if r is not None else rf
                    gemm(n1 - n0, cs.reshape(-1), yf[n0 * per_y : n1 * per_y], rr)
                    continue
                ep = conv_ep._replace(residual=None if r is None else r.reshape(y.shape))
                for g in range(group):
                    wg = w2[g * mg : (g + 1) * mg]
                    for i in range(n1 - n0):
                        yg = y[n0 + i, g * mg : (g + 1) * mg]
                        gep = _gemm_epilogue(backend, ep, y, g * mg, (g + 1) * mg, n0 + i)
                        blas.matmul_into(wg, cs[i, g * cg * K : (g + 1) * cg * K], yg,
                                         epilogue=gep, backend=backend)  # fmt: skip

        return conv_im2col

    def call(self) -> tuple[Any, tuple]:
        """``(fn, args)``: the convolution as a plan binds it, ``args`` referring to the
        input (In 0), the residual (In 3, when the plan has one), the output (Out 0) and the
        scratch buffers of :attr:`scratch` (Out 1 ...)."""
        if not self.has_res:
            return self.fn, self.args
        if self.ep_pos is not None:
            return blas.with_residual(self.fn, self.args, self.ep_pos, _R)
        return self.fn, (*self.args, _R)

    @property
    def name(self) -> str:
        """What runs it, for a plan's steps (``conv.<method>``)."""
        return f"conv.{_KIND_NAMES[self.kind]}"

    def run(self, x: np.ndarray, res: np.ndarray | None) -> np.ndarray:
        """The convolution of C-contiguous ``x`` (the plan's shape and compute dtype) plus the
        epilogue, with ``res`` the residual when the plan has one: a fresh (N, M, *out)."""
        y = np.empty(self.y_shape, self.dtype)
        outs = [y, *(np.empty(s, self.dtype) for s in self.scratch)]
        fn, args = self.call()
        fn(*[_resolve(a, x, res, outs) for a in args])
        return y


def _resolve(a: Any, x: np.ndarray, res: np.ndarray | None, outs: list[np.ndarray]) -> Any:
    """A convolution's call argument ``a`` (see :meth:`_ConvPlan.call`) for these values."""
    t = type(a)
    if t is not In and t is not Out:
        return a
    v = (x if a.index == 0 else res) if t is In else outs[a.index]
    if a.shape is not None:
        return v.reshape(a.shape)
    return v.reshape(-1) if a.flat else v


def _k(backend: Any, family: str, name: str) -> Any:
    return backend.kernel(family, name)


def _product_kernel(backend: Any, family: str, name: str, macs: int, sample: tuple) -> Any:
    """Kernel ``name`` of ``family``, or its pool twin bound for ``sample`` when the calling
    thread runs several threads and the product has ``PARALLEL_MACS`` multiply-adds."""
    if backend.threads() > 1 and macs >= blas.PARALLEL_MACS:
        return backend.pooled(family, name, sample)
    return backend.kernel(family, name)


def _gather_table(backend, k3, st3, dl3, pb3, osz, isz) -> np.ndarray:
    """The gather table of ``im2col_gather`` for this geometry."""
    vol = int(np.prod(isz))
    dt = np.uint32 if vol < (1 << 32) - 1 else np.int64
    tab = np.empty((int(np.prod(k3)), int(np.prod(osz))), dt)
    _k(backend, "conv", "gather_table")(k3, st3, dl3, pb3, osz, isz, tab)
    return tab


def _conv_core(
    backend: Any,
    x: np.ndarray,
    w: np.ndarray,
    group: int,
    ks: list[int],
    st: list[int],
    dl: list[int],
    pb: list[int],
    out: list[int],
    ep: ConvEpilogue | None = None,
    winograd: bool = True,
) -> np.ndarray:
    """Convolution of float32/float64 ``x`` (N, C, *sp) with ``w`` (M, C/group, *ks), then
    the epilogue ``ep`` (bias per channel, residual, activation) when given: a fresh
    C-contiguous (N, M, *out) array (see :class:`_ConvPlan`; ``winograd`` False keeps 3x3
    convolutions in the direct form).

    Each GEMM writes its (M/group, S) block of the output straight into place (``W[M, C*K] @
    col[C*K, S]`` is NCHW per image), so no transpose or copy follows it, and applies the
    epilogue tile by tile as it goes. Depthwise convolutions (group == C) and grouped ones
    with few taps per output run direct kernels with the epilogue fused.
    """
    if ep is None:
        t = x.dtype.type
        ep = ConvEpilogue(None, None, _k(backend, "epilogue", "ACT_NONE"), t(0), t(0))
    res = ep.residual
    plan = _ConvPlan(
        x.shape, x.dtype, w, group, ks, st, dl, pb, out, ep.bias, res is not None, ep.act,
        ep.p0, ep.p1, winograd=winograd, backend=backend,
    )  # fmt: skip
    if res is not None:
        res = np.ascontiguousarray(res.reshape(plan.y_shape), x.dtype)
    return plan.run(np.ascontiguousarray(x), res)


class ConvEpilogue(NamedTuple):
    """What follows a convolution inside FusedConv: ``act(y + bias + residual)``, with
    ``bias`` (M,) per channel, ``residual`` shaped like ``y`` (N, M, S) and an activation code
    of the backend's ``epilogue`` family with its parameters, all in ``y``'s type."""

    bias: np.ndarray | None
    residual: np.ndarray | None
    act: int
    p0: Any
    p1: Any


def _gemm_epilogue(
    backend: Any, ep: ConvEpilogue, y: np.ndarray, m0: int, m1: int, image: int | None = None
) -> blas.Epilogue:
    """The GEMM epilogue for output channels ``m0:m1`` (of one image, or of all)."""
    res = None
    if ep.residual is not None:
        r = ep.residual.reshape(y.shape)
        res = r[:, m0:m1] if image is None else r[image, m0:m1]
    return blas.Epilogue(
        bias=None if ep.bias is None else ep.bias[m0:m1],
        bias_mode=_k(backend, "blas", "BIAS_ROW"),
        residual=res,
        act=ep.act,
        p0=ep.p0,
        p1=ep.p1,
    )


def _conv_epilogue(backend: Any, y: np.ndarray, ep: ConvEpilogue | None) -> None:
    """Apply ``ep`` to ``y`` (N, M, ...) in place, one pass over each channel plane."""
    if ep is None or not y.size:
        return
    if ep.bias is None and ep.residual is None and ep.act == _k(backend, "epilogue", "ACT_NONE"):
        return
    N, M = y.shape[:2]
    y3 = y.reshape(N, M, -1)
    r3 = blas.empty_array(y.dtype, 3) if ep.residual is None else ep.residual.reshape(y3.shape)
    bb = blas.empty_array(y.dtype, 1) if ep.bias is None else ep.bias
    args = (y3, bb, ep.bias is not None, r3, ep.residual is not None, ep.act, ep.p0, ep.p1)
    backend.run("epilogue", "planes", y.size, *args)


def _conv_checks(
    ctx: NodeContext, x: np.ndarray, w: np.ndarray, group: int, kernel_shape: list[int] | None
) -> list[int]:
    _spatial_rank(ctx, x)
    if w.ndim != x.ndim:
        raise ctx.error(f"W has rank {w.ndim}, expected {x.ndim} like X {x.shape}")
    if group < 1 or x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        raise ctx.error(
            f"X has {x.shape[1]} channels and W has shape {w.shape} with group={group}: "
            "expected C == W.shape[1] * group and W.shape[0] divisible by group"
        )
    ks = [int(k) for k in w.shape[2:]]
    if kernel_shape and [int(k) for k in kernel_shape] != ks:
        raise ctx.error(f"kernel_shape {list(kernel_shape)} differs from W's shape {w.shape}")
    return ks


def conv_compute(
    ctx: NodeContext,
    x: np.ndarray,
    w: np.ndarray,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
    epilogue: ConvEpilogue | None = None,
) -> np.ndarray:
    """Conv without bias, in the compute dtype (float16/bfloat16 -> float32): a fresh
    C-contiguous (N, M, *out) array. Shared by Conv and the fused ``FusedConv``, which passes
    ``epilogue`` (its values in the compute dtype)."""
    ks = _conv_checks(ctx, x, w, group, kernel_shape)
    pb, _pe, out, st, dl = _geometry(ctx, x.shape[2:], ks, strides, dilations, pads, auto_pad)
    xc = _compute(x)
    wc = _compute(w).astype(xc.dtype, copy=False)
    return _conv_core(ctx.backend, xc, wc, group, ks, st, dl, pb, out, epilogue, ctx.winograd)


def conv_output_shape(
    ctx: NodeContext,
    x: np.ndarray,
    w: np.ndarray,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> tuple[int, ...]:
    """The shape :func:`conv_compute` returns for these inputs and attributes."""
    ks = _conv_checks(ctx, x, w, group, kernel_shape)
    _pb, _pe, out, _st, _dl = _geometry(ctx, x.shape[2:], ks, strides, dilations, pads, auto_pad)
    return (x.shape[0], w.shape[0], *out)


@onnx_op("Conv", since=1)
@onnx_op("Conv", since=11)
@onnx_op("Conv", since=22)
def conv(
    ctx: NodeContext,
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    *,
    auto_pad: str,
    dilations: list[int] | None = None,
    group: int,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """N-D convolution (1-D to 3-D): im2col + GEMM per group, plain GEMM for 1x1, Numba
    kernels for depthwise and for groups of few channels. Optional bias B of shape (M,),
    added by the epilogue."""
    ep = None
    if b is not None:
        if b.shape != (w.shape[0],):
            raise ctx.error(f"B has shape {b.shape}, expected ({w.shape[0]},)")
        cd = _compute_dtype(x.dtype)
        bc = np.ascontiguousarray(_compute(b), dtype=cd)
        none = ctx.kernel("epilogue", "ACT_NONE")
        ep = ConvEpilogue(bc, None, none, cd.type(0), cd.type(0))
    y = conv_compute(
        ctx,
        x,
        w,
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
        epilogue=ep,
    )
    return _back(y, x.dtype)


def _bound_geometry(lc: LowerContext, x_shape: tuple, w_shape: tuple) -> tuple | None:
    """``(group, kernel, pads_begin, out, strides, dilations)`` of a Conv-like node of ``lc``
    for these shapes (NC... input, MC/group... weight), from its attributes; None where the
    attributes do not fit the shapes (the implementation then raises the error)."""
    attrs = lc.attrs
    group = int(attrs.get("group", 1))
    ks = [int(k) for k in w_shape[2:]]
    kernel_shape = attrs.get("kernel_shape")
    if group < 1 or x_shape[1] != w_shape[1] * group or w_shape[0] % group:
        return None
    if kernel_shape and [int(k) for k in kernel_shape] != ks:
        return None
    pb, _pe, out, st, dl = _geometry(
        lc.ctx, x_shape[2:], ks, attrs.get("strides"), attrs.get("dilations"),
        attrs.get("pads"), attrs.get("auto_pad") or "NOTSET",
    )  # fmt: skip
    return group, ks, pb, out, st, dl


def lower_conv(lc: LowerContext, act: Any, p0: Any, p1: Any) -> Bound | None:
    """The bound call of Conv (inputs X, W, B) or FusedConv (and a residual, input 3) for
    float32/float64 inputs with a weight and bias constant for the plan, plus the epilogue
    ``act(y + bias + residual)`` (``act`` a code of the backend's ``epilogue`` family): a
    :class:`_ConvPlan` made once, its weights rearranged once (shared by every plan of the
    session). None where the implementation runs: other types, a weight or bias the plan
    does not hold (a graph input, read at every run), a residual of another shape than the
    output (it broadcasts), attributes the implementation rejects."""
    x, w = lc.inputs[0], lc.inputs[1]
    b = lc.inputs[2] if len(lc.inputs) > 2 else None
    r = lc.inputs[3] if len(lc.inputs) > 3 else None
    if x is None or x.kind != TENSOR or x.dtype not in _NATIVE_FLOATS or not 3 <= x.ndim <= 5:
        return None
    dtype = x.dtype
    if w is None or not w.const or w.kind != TENSOR or w.dtype != dtype or w.ndim != x.ndim:
        return None
    M = w.shape[0]
    if b is not None and (not b.const or b.kind != TENSOR or b.dtype != dtype or b.shape != (M,)):
        return None
    geometry = _bound_geometry(lc, x.shape, w.shape)
    if geometry is None:
        return None
    group, ks, pb, out, st, dl = geometry
    y_shape = (x.shape[0], M, *out)
    if r is not None and (r.kind != TENSOR or r.shape != y_shape or r.dtype != dtype):
        return None  # a residual that broadcasts: the implementation's numpy path
    bias = None if b is None else np.ascontiguousarray(b.value)
    winograd = lc.settings is None or lc.settings.conv_winograd
    plan = _ConvPlan(
        x.shape, dtype, w.value, group, ks, st, dl, pb, out, bias, r is not None, act, p0, p1,
        constant_w=True, winograd=winograd, backend=lc.backend,
    )  # fmt: skip
    fn, args = plan.call()
    outs = [tensor(dtype, y_shape), *(tensor(dtype, s) for s in plan.scratch)]
    return writes(fn, *args, outs=outs, name=plan.name)


@lowers(conv)
def _lower_conv(lc: LowerContext) -> Bound | None:
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR:
        return None
    t = x.dtype.type
    return lower_conv(lc, lc.backend.kernel("epilogue", "ACT_NONE"), t(0), t(0))


@onnx_op("ConvInteger", since=10)
def conv_integer(
    ctx: NodeContext,
    x: np.ndarray,
    w: np.ndarray,
    x_zero_point: np.ndarray | None = None,
    w_zero_point: np.ndarray | None = None,
    *,
    auto_pad: str,
    dilations: list[int] | None = None,
    group: int,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """Integer convolution of ``x - x_zero_point`` with ``w - w_zero_point`` (scalar or one per
    output channel), int32 result. Padding stands for the zero point (zero after the shift).

    Computed in float64 (exact: products of 8-bit values summed well below 2**53)."""
    ks = _conv_checks(ctx, x, w, group, kernel_shape)
    pb, _pe, out, st, dl = _geometry(ctx, x.shape[2:], ks, strides, dilations, pads, auto_pad)
    xf = x.astype(np.float64)
    wf = w.astype(np.float64)
    if x_zero_point is not None:
        if x_zero_point.size != 1:
            raise ctx.error(f"x_zero_point must be a scalar, got shape {x_zero_point.shape}")
        xf -= float(x_zero_point.reshape(()))
    if w_zero_point is not None:
        wzp = w_zero_point.astype(np.float64)
        if wzp.size not in (1, w.shape[0]):
            raise ctx.error(
                f"w_zero_point of shape {wzp.shape} must be a scalar or one value per output "
                f"channel ({w.shape[0]})"
            )
        wf -= wzp.reshape(-1, *([1] * (w.ndim - 1))) if wzp.size > 1 else wzp.reshape(())
    # the direct form: its float64 sums of integer products are exact (so is Winograd's
    # with these magnitudes, but that is one more argument to make)
    y = _conv_core(ctx.backend, xf, wf, group, ks, st, dl, pb, out, winograd=False)
    return np.rint(y).astype(np.int32)


class _IntegerConv:
    """A bound ConvInteger (1-D to 3-D) on the micro-kernel's int16-pair mode: ``x - x_zp``
    widened to int16 (``quant.shift_rows``; padding taps, zero after the shift, are the zero
    point as the operator defines), unfolded per image and group (``conv.im2col``), packed in
    pairs of steps (``blas.pack_b_pairs_into``), and multiplied by the weight, shifted by its
    zero point (one or one per output channel) and widened once (``blas.igemm_pairs``), each
    product written in place into the (N, M, S) output."""

    def __init__(self, backend: Any, x_shape, x_dtype, w: np.ndarray, w_zp, group, geo) -> None:
        ks, st, dl, pb, out = geo
        self.n_img, self.c = x_shape[:2]
        self.m = w.shape[0]
        self.group, self.mg, self.cg = group, w.shape[0] // group, x_shape[1] // group
        self.kk = self.cg * math.prod(ks)  # inner length per group
        self.s = math.prod(out)
        self.kp = (self.kk + 1) // 2
        self.x5 = (self.n_img, self.c, *_pad3(x_shape[2:], 1))
        self.k3, self.st3, self.dl3, self.pb3 = (
            _i64(_pad3(v, f)) for v, f in ((ks, 1), (st, 1), (dl, 1), (pb, 0))
        )
        self.o3 = _i64(_pad3(out, 1))
        self.x_size = math.prod(x_shape)
        self.plane = self.x_size // (self.n_img * self.c)
        self.b_size = backend.kernel("blas", "pairs_b_size")(self.kk, self.s)
        # the weight rows (output channels) minus their zero point, as int16 rows of 2 kp
        zp = np.zeros(1, w.dtype) if w_zp is None else np.ascontiguousarray(w_zp.reshape(-1))
        a_w = np.empty(self.m * 2 * self.kp, np.int16)
        backend.kernel("quant", "shift_rows")(w.reshape(-1), zp, self.kk, self.m, 2 * self.kp, a_w)
        self.a_w = a_w
        self.shift = backend.launcher(
            "quant", "shift_rows", self.x_size,
            (np.empty(1, x_dtype), np.empty(1, x_dtype), 1, 1, 1, np.empty(1, np.int16)),
        )  # fmt: skip
        self.im2col = backend.kernel("conv", "im2col")
        self.pack = backend.kernel("blas", "pack_b_pairs_into")
        threads = backend.threads()
        parallel = threads > 1 and self.mg * self.s * self.kk >= blas.PARALLEL_MACS
        tm, tn = backend.kernel("blas", "tiles")(1, self.mg, self.s, self.kk, threads, 4)
        self.tm, self.tn = (tm, tn) if parallel else (self.mg, self.s)
        i16 = np.empty(1, np.int16)
        sample = (self.mg, self.s, self.kp, i16, i16, np.empty(1, np.int32), tm, tn)
        self.gemm = (
            backend.pooled("blas", "igemm_pairs", sample)
            if parallel
            else backend.kernel("blas", "igemm_pairs")
        )
        self.zero16 = np.zeros(1, np.int16)
        self.y_shape = (self.n_img, self.m, *out)
        # scratch: X shifted to int16, one image's im2col block, the block packed in pairs
        self.scratch = [
            tensor(np.int16, (self.x_size,)),
            tensor(np.int16, (self.kk * self.s,)),
            tensor(np.int16, (self.b_size,)),
        ]
        self.name = "conv.im2col+blas.igemm_pairs"

    @staticmethod
    def scratch_args(first: int) -> tuple:
        """The ``Out`` arguments of the scratch, outputs ``first`` on of a bound call."""
        return tuple(Out(first + i) for i in range(3))

    def __call__(self, x, x_zp, out, x16, col, packed) -> None:
        self.shift(x, x_zp, self.plane, 1, self.plane, x16)  # one row per channel plane
        x5 = x16.reshape(self.x5)
        col3 = col.reshape(1, self.kk, self.s)
        y = out.reshape(self.n_img, self.m * self.s)
        rows = self.mg * 2 * self.kp
        for n in range(self.n_img):
            for g in range(self.group):
                self.im2col(x5[n : n + 1], g * self.cg, self.cg, self.k3, self.st3, self.dl3,
                            self.pb3, self.o3, col3)  # fmt: skip
                self.pack(col, self.zero16, self.kk, self.s, packed)
                a = self.a_w[g * rows : (g + 1) * rows]
                c = y[n, g * self.mg * self.s : (g + 1) * self.mg * self.s]
                self.gemm(self.mg, self.s, self.kp, a, packed, c, self.tm, self.tn)


def integer_conv(lc: LowerContext, x: Any, w: Any, x_zp: Any, w_zp: Any) -> _IntegerConv | None:
    """The :class:`_IntegerConv` of a ConvInteger-like node (ConvInteger, QLinearConv) with
    these input specs and ``lc``'s convolution attributes: 8-bit X (1-D to 3-D spatial) by a
    constant 8-bit weight with a constant zero point (one, or one per output channel), X's
    zero point one value, where the CPU has the int16-pair kernel; None otherwise."""
    if lc.backend.kernel("blas", "INT_PAIRS") is None:
        return None
    if x is None or w is None or x.kind != TENSOR or w.kind != TENSOR or not w.const:
        return None
    if x.dtype not in _INT8_TYPES or w.dtype not in _INT8_TYPES or not 3 <= x.ndim <= 5:
        return None
    if x.size == 0 or w.size == 0 or w.ndim != x.ndim:
        return None
    if x_zp is not None and (x_zp.kind != TENSOR or x_zp.size != 1 or x_zp.dtype != x.dtype):
        return None
    M = w.shape[0]
    if w_zp is not None and (
        not w_zp.const or w_zp.dtype != w.dtype or w_zp.size not in (1, M) or w_zp.ndim > 1
    ):
        return None
    geometry = _bound_geometry(lc, x.shape, w.shape)
    if geometry is None:
        return None
    group, ks, pb, out, st, dl = geometry
    if min(out) <= 0:
        return None
    return _IntegerConv(
        lc.backend, x.shape, x.dtype, np.ascontiguousarray(w.value),
        None if w_zp is None else w_zp.value, group, (ks, st, dl, pb, out),
    )  # fmt: skip


@lowers(conv_integer)
def _lower_conv_integer(lc: LowerContext) -> Bound | None:
    """:func:`integer_conv`'s kernels where it applies; the implementation (float64, exact)
    otherwise."""
    x = lc.inputs[0]
    x_zp = lc.inputs[2] if len(lc.inputs) > 2 else None
    run = integer_conv(lc, x, lc.inputs[1], x_zp, lc.inputs[3] if len(lc.inputs) > 3 else None)
    if run is None:
        return None
    args = (In(0, flat=True), integer_zero_point(x_zp, 2, x.dtype), Out(0, flat=True),
            *run.scratch_args(1))  # fmt: skip
    return writes(run, *args, outs=[tensor(np.int32, run.y_shape), *run.scratch], name=run.name)


@onnx_op("ConvTranspose", since=1)
@onnx_op("ConvTranspose", since=11)
@onnx_op("ConvTranspose", since=22)
def conv_transpose(
    ctx: NodeContext,
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    *,
    auto_pad: str,
    dilations: list[int] | None = None,
    group: int,
    kernel_shape: list[int] | None = None,
    output_padding: list[int] | None = None,
    output_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """Transposed convolution: per group a GEMM ``W_g^T @ X_g`` then col2im (Numba) into the
    output. The output shape comes from ``output_shape`` (pads then derived as the spec says)
    or from pads / auto_pad. W is (C, M/group, *kernel)."""
    nsp = _spatial_rank(ctx, x)
    if w.ndim != x.ndim:
        raise ctx.error(f"W has rank {w.ndim}, expected {x.ndim} like X {x.shape}")
    N, C = x.shape[:2]
    if group < 1 or w.shape[0] != C or C % group:
        raise ctx.error(
            f"X has {C} channels, W has shape {w.shape}, group={group}: expected W.shape[0] == "
            "C and C divisible by group"
        )
    ks = [int(k) for k in w.shape[2:]]
    if kernel_shape and [int(k) for k in kernel_shape] != ks:
        raise ctx.error(f"kernel_shape {list(kernel_shape)} differs from W's shape {w.shape}")
    mg = w.shape[1]
    M = mg * group
    cg = C // group
    in_sz = [int(s) for s in x.shape[2:]]
    st = [int(s) for s in strides] if strides else [1] * nsp
    dl = [int(d) for d in dilations] if dilations else [1] * nsp
    op = [int(p) for p in output_padding] if output_padding else [0] * nsp
    if len(st) != nsp or len(dl) != nsp or len(op) != nsp:
        raise ctx.error(
            f"strides {st}, dilations {dl}, output_padding {op} need {nsp} entries each"
        )
    span = [(k - 1) * d + 1 for k, d in zip(ks, dl)]
    full = [s * (i - 1) + p + k for s, i, p, k in zip(st, in_sz, op, span)]
    auto_pad = auto_pad or "NOTSET"
    if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise ctx.unsupported(f"auto_pad={auto_pad!r} is not supported")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if output_shape is not None:
            out = [int(v) for v in list(output_shape)[-nsp:]]
            if len(out) != nsp:
                raise ctx.error(f"output_shape {output_shape} needs {nsp} spatial entries")
        else:
            out = [i * s for i, s in zip(in_sz, st)]
        total = [f - o for f, o in zip(full, out)]
        if auto_pad == "SAME_UPPER":
            pb = [t // 2 for t in total]
        else:
            pb = [t - t // 2 for t in total]
    else:
        p = [int(v) for v in pads] if (pads and auto_pad == "NOTSET") else [0] * (2 * nsp)
        if len(p) != 2 * nsp:
            raise ctx.error(f"pads {p} must hold 2 * {nsp} values")
        pb = p[:nsp]
        out = [f - a - e for f, a, e in zip(full, p[:nsp], p[nsp:])]
    if min(out, default=1) < 0:
        raise ctx.error(f"the output shape {out} would be negative; check pads/output_shape")
    dtype = x.dtype
    xc = np.ascontiguousarray(_compute(x))
    wc = _compute(w).astype(xc.dtype, copy=False)
    K = math.prod(ks)
    s_in = math.prod(in_sz)
    y5 = np.zeros((N, M, *_pad3(out, 1)), xc.dtype)
    if y5.size and N and s_in:
        k3, st3, dl3, pb3 = (_i64(_pad3(v, f)) for v, f in ((ks, 1), (st, 1), (dl, 1), (pb, 0)))
        isz = _i64(_pad3(in_sz, 1))
        x3 = xc.reshape(N, C, s_in)
        for g in range(group):
            # (mg*K, cg) @ (N, cg, s_in) -> (N, mg*K, s_in)
            wg = np.ascontiguousarray(wc[g * cg : (g + 1) * cg].reshape(cg, mg * K).T)
            col = np.matmul(wg, x3[:, g * cg : (g + 1) * cg])
            ctx.run_kernel(
                "conv",
                "col2im",
                col.size,
                col,
                g * mg,
                mg,
                k3,
                st3,
                dl3,
                pb3,
                isz,
                y5,
            )
    y = y5.reshape(N, M, *out)
    if b is not None:
        if b.shape != (M,):
            raise ctx.error(f"B has shape {b.shape}, expected ({M},)")
        y += _compute(b).astype(y.dtype, copy=False).reshape(1, M, *([1] * nsp))
    return _back(y, dtype)


# --------------------------------------------------------------------------------------------
# Pooling


def _pool_input(x: np.ndarray) -> np.ndarray:
    # Max pooling of 8-bit ints is exact in float32; floats other than f32/f64 go to f32.
    return _compute(x)


def _pool(
    ctx: NodeContext,
    x: np.ndarray,
    kind: str,
    kernel_shape: list[int] | None,
    strides: list[int] | None,
    pads: list[int] | None,
    auto_pad: str,
    dilations: list[int] | None = None,
    ceil_mode: int = 0,
    count_include_pad: int = 0,
    p: float = 2.0,
    storage_order: int = 0,
) -> tuple[np.ndarray, np.ndarray | None]:
    nsp = _spatial_rank(ctx, x)
    if not kernel_shape:
        raise ctx.error("the kernel_shape attribute is required")
    ks = [int(k) for k in kernel_shape]
    if len(ks) != nsp:
        raise ctx.error(f"kernel_shape {ks} has {len(ks)} entries, the input {nsp} spatial dims")
    pb, pe, out, st, dl = _geometry(
        ctx, x.shape[2:], ks, strides, dilations, pads, auto_pad, ceil_mode
    )
    N, C = x.shape[:2]
    B = N * C
    dtype = x.dtype
    xc = np.ascontiguousarray(_pool_input(x))
    x4 = xc.reshape(B, *_pad3(x.shape[2:], 1))
    y4 = np.empty((B, *_pad3(out, 1)), xc.dtype)
    k3, st3, dl3, pb3, pe3 = (
        _i64(_pad3(v, f)) for v, f in ((ks, 1), (st, 1), (dl, 1), (pb, 0), (pe, 0))
    )
    work = y4.size * math.prod(ks)
    shape = (N, C, *out)
    if kind == "max" and not (len(ctx.outputs_used) > 1 and ctx.outputs_used[1]):
        # No Indices output: a vectorised kernel over padded planes.
        limit = ctx.backend.parallel_threshold >> _WINDOW_SHIFT
        ctx.backend.run("pool", "max_pool_values", work, x4, y4, k3, st3, dl3, pb3, threshold=limit)
        return _back(y4.reshape(shape), dtype), None
    if kind == "max":
        ind = np.empty(y4.shape, np.int64)
        ctx.run_kernel(
            "pool",
            "max_pool",
            work,
            x4,
            y4,
            ind,
            k3,
            st3,
            dl3,
            pb3,
            bool(storage_order),
        )
        return _back(y4.reshape(shape), dtype), ind.reshape(shape)
    ctx.run_kernel(
        "pool",
        "avg_pool",
        work,
        x4,
        y4,
        k3,
        st3,
        dl3,
        pb3,
        pe3,
        kind == "lp",
        float(p),
        bool(count_include_pad),
    )
    return _back(y4.reshape(shape), dtype), None


@onnx_op("MaxPool", since=1)
def max_pool_1(
    ctx: NodeContext,
    x: np.ndarray,
    *,
    auto_pad: str,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """MaxPool-1: one output, no dilations or ceil_mode."""
    return _pool(ctx, x, "max", kernel_shape, strides, pads, auto_pad)[0]


@onnx_op("MaxPool", since=8)
def max_pool_8(
    ctx: NodeContext,
    x: np.ndarray,
    *,
    auto_pad: str,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    storage_order: int,
    strides: list[int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """MaxPool-8: adds the Indices output (flat, row-major or column-major in a plane)."""
    return _pool(ctx, x, "max", kernel_shape, strides, pads, auto_pad, storage_order=storage_order)


@onnx_op("MaxPool", since=10)
@onnx_op("MaxPool", since=11)
@onnx_op("MaxPool", since=12)
@onnx_op("MaxPool", since=22)
def max_pool(
    ctx: NodeContext,
    x: np.ndarray,
    *,
    auto_pad: str,
    ceil_mode: int,
    dilations: list[int] | None = None,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    storage_order: int,
    strides: list[int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """MaxPool-10+: dilations and ceil_mode; int8/uint8 from 12 (exact through float32)."""
    return _pool(
        ctx,
        x,
        "max",
        kernel_shape,
        strides,
        pads,
        auto_pad,
        dilations,
        ceil_mode,
        storage_order=storage_order,
    )


@lowers(max_pool_1, max_pool_8, max_pool)
def _lower_max_pool(lc: LowerContext) -> Bound | None:
    """MaxPool without an Indices output nothing reads, on float32/float64 inputs: the
    vectorised kernel over padded planes, its geometry worked out once."""
    x = lc.inputs[0]
    if len(lc.outputs_used) > 1 and lc.outputs_used[1]:
        return None
    if x is None or x.kind != TENSOR or x.dtype not in _NATIVE_FLOATS or not 3 <= x.ndim <= 5:
        return None
    attrs = lc.attrs
    ks = [int(k) for k in attrs.get("kernel_shape") or ()]
    if len(ks) != x.ndim - 2:
        return None  # the implementation says what is wrong
    pb, _pe, out, st, dl = _geometry(
        lc.ctx, x.shape[2:], ks, attrs.get("strides"), attrs.get("dilations"),
        attrs.get("pads"), attrs.get("auto_pad") or "NOTSET", attrs.get("ceil_mode", 0),
    )  # fmt: skip
    N, C = x.shape[:2]
    dtype = x.dtype
    x4_shape = (N * C, *_pad3(x.shape[2:], 1))
    y4_shape = (N * C, *_pad3(out, 1))
    geo = tuple(_i64(_pad3(v, f)) for v, f in ((ks, 1), (st, 1), (dl, 1), (pb, 0)))
    sample = (np.empty(x4_shape, dtype), np.empty(y4_shape, dtype), *geo)
    work = math.prod(y4_shape) * math.prod(ks)
    limit = lc.backend.parallel_threshold >> _WINDOW_SHIFT
    fn = lc.backend.launcher("pool", "max_pool_values", work, sample, limit)
    return writes(
        fn, In(0, shape=x4_shape), Out(0, shape=y4_shape), *geo,
        outs=[tensor(dtype, (N, C, *out))], name="pool.max_pool_values",
    )  # fmt: skip


@onnx_op("AveragePool", since=1)
def average_pool_1(
    ctx: NodeContext,
    x: np.ndarray,
    *,
    auto_pad: str,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """AveragePool-1: padding never counts."""
    return _pool(ctx, x, "avg", kernel_shape, strides, pads, auto_pad)[0]


@onnx_op("AveragePool", since=7)
def average_pool_7(
    ctx: NodeContext,
    x: np.ndarray,
    *,
    auto_pad: str,
    count_include_pad: int,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """AveragePool-7: count_include_pad."""
    return _pool(
        ctx,
        x,
        "avg",
        kernel_shape,
        strides,
        pads,
        auto_pad,
        count_include_pad=count_include_pad,
    )[0]


@onnx_op("AveragePool", since=10)
@onnx_op("AveragePool", since=11)
def average_pool_10(
    ctx: NodeContext,
    x: np.ndarray,
    *,
    auto_pad: str,
    ceil_mode: int,
    count_include_pad: int,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """AveragePool-10/11: ceil_mode."""
    return _pool(
        ctx,
        x,
        "avg",
        kernel_shape,
        strides,
        pads,
        auto_pad,
        None,
        ceil_mode,
        count_include_pad=count_include_pad,
    )[0]


@onnx_op("AveragePool", since=19)
@onnx_op("AveragePool", since=22)
def average_pool(
    ctx: NodeContext,
    x: np.ndarray,
    *,
    auto_pad: str,
    ceil_mode: int,
    count_include_pad: int,
    dilations: list[int] | None = None,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """AveragePool-19+: dilations."""
    return _pool(
        ctx,
        x,
        "avg",
        kernel_shape,
        strides,
        pads,
        auto_pad,
        dilations,
        ceil_mode,
        count_include_pad=count_include_pad,
    )[0]


@onnx_op("LpPool", since=1)
@onnx_op("LpPool", since=2)
@onnx_op("LpPool", since=11)
def lp_pool_2(
    ctx: NodeContext,
    x: np.ndarray,
    *,
    auto_pad: str,
    kernel_shape: list[int] | None = None,
    p: float,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """LpPool-1/2/11: ``(sum |x|^p)^(1/p)`` over each window (p is a float at 1, int after)."""
    return _pool(ctx, x, "lp", kernel_shape, strides, pads, auto_pad, p=p)[0]


@onnx_op("LpPool", since=18)
@onnx_op("LpPool", since=22)
def lp_pool(
    ctx: NodeContext,
    x: np.ndarray,
    *,
    auto_pad: str,
    ceil_mode: int,
    dilations: list[int] | None = None,
    kernel_shape: list[int] | None = None,
    p: int,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """LpPool-18+: dilations and ceil_mode."""
    return _pool(ctx, x, "lp", kernel_shape, strides, pads, auto_pad, dilations, ceil_mode, p=p)[0]


def _spatial_axes(ctx: NodeContext, x: np.ndarray) -> tuple[int, ...]:
    if x.ndim < 3:
        raise ctx.error(f"expected an input (N, C, spatial...) of rank >= 3, got shape {x.shape}")
    return tuple(range(2, x.ndim))


@onnx_op("GlobalAveragePool", since=1)
@onnx_op("GlobalAveragePool", since=22)
def global_average_pool(ctx: NodeContext, x: np.ndarray) -> np.ndarray:
    """Mean over all spatial dims, kept as size-1 dims."""
    axes = _spatial_axes(ctx, x)
    s = math.prod(x.shape[2:])
    if s == 0 or x.size == 0:
        return _back(np.mean(_compute(x), axis=axes, keepdims=True), x.dtype)
    xc = np.ascontiguousarray(_compute(x))
    x2 = xc.reshape(-1, s)
    y = np.empty(x2.shape[0], xc.dtype)
    ctx.run_kernel("pool", "global_mean", x.size, x2, y)
    return _back(y.reshape(*x.shape[:2], *([1] * len(axes))), x.dtype)


@lowers(global_average_pool)
def _lower_global_average_pool(lc: LowerContext) -> Bound | None:
    """GlobalAveragePool of a float32/float64 input with no zero-size dim: one row kernel
    over the (N * C, spatial) planes."""
    x = lc.inputs[0]
    if x is None or x.kind != TENSOR or x.dtype not in _NATIVE_FLOATS or x.ndim < 3 or not x.size:
        return None
    dtype = x.dtype
    rows, n = x.shape[0] * x.shape[1], math.prod(x.shape[2:])
    sample = (np.empty((1, 1), dtype), np.empty(1, dtype))
    fn = lc.backend.launcher("pool", "global_mean", x.size, sample)
    return writes(
        fn, In(0, shape=(rows, n)), Out(0, shape=(rows,)),
        outs=[tensor(dtype, (*x.shape[:2], *([1] * (x.ndim - 2))))], name="pool.global_mean",
    )  # fmt: skip


@onnx_op("GlobalMaxPool", since=1)
@onnx_op("GlobalMaxPool", since=22)
def global_max_pool(ctx: NodeContext, x: np.ndarray) -> np.ndarray:
    """Max over all spatial dims, kept as size-1 dims."""
    axes = _spatial_axes(ctx, x)
    if any(x.shape[a] == 0 for a in axes):
        raise ctx.error(f"GlobalMaxPool of an empty spatial extent (shape {x.shape})")
    return np.max(x, axis=axes, keepdims=True)


@onnx_op("GlobalLpPool", since=1)
@onnx_op("GlobalLpPool", since=2)
@onnx_op("GlobalLpPool", since=22)
def global_lp_pool(ctx: NodeContext, x: np.ndarray, *, p: int) -> np.ndarray:
    """``(sum |x|^p)^(1/p)`` over all spatial dims (the LpPool kernel with a full window)."""
    axes = _spatial_axes(ctx, x)
    if len(axes) > 3:
        raise ctx.unsupported(f"{len(axes)}-D spatial inputs are not supported")
    ks = [int(x.shape[a]) for a in axes]
    if min(ks) == 0:
        return np.zeros((*x.shape[:2], *([1] * len(axes))), x.dtype)
    return _pool(ctx, x, "lp", ks, None, None, "NOTSET", p=p)[0]


# --------------------------------------------------------------------------------------------
# Softmax, LogSoftmax, Hardmax


def _softmax(ctx: NodeContext, x: np.ndarray, axis: int, coerce_2d: bool, log: bool) -> np.ndarray:
    a = _norm_axis(ctx, axis, x.ndim)
    shape = x.shape
    outer = math.prod(shape[:a])
    if coerce_2d:
        n, inner = math.prod(shape[a:]), 1
    else:
        n, inner = shape[a], math.prod(shape[a + 1 :])
    dtype = x.dtype
    if inner == 1 and n > 0:
        # Softmax over contiguous rows (the last axis, or the 2-D coercion): the row kernel.
        y2 = softmax_last(ctx, _compute(x).reshape(outer, n), log)
        return _back(y2.reshape(shape), dtype)
    x3 = np.ascontiguousarray(_compute(x)).reshape(outer, n, inner)
    y3 = np.empty_like(x3)
    ctx.run_kernel("nn", "softmax", x3.size, x3, y3, log)
    return _back(y3.reshape(shape), dtype)


@onnx_op("Softmax", since=1)
@onnx_op("Softmax", since=11)
def softmax_1(ctx: NodeContext, x: np.ndarray, *, axis: int) -> np.ndarray:
    """Softmax-1/11: the input is coerced to 2-D (dims before ``axis`` x dims from it)."""
    return _softmax(ctx, x, axis, True, False)


@onnx_op("Softmax", since=13)
def softmax(ctx: NodeContext, x: np.ndarray, *, axis: int) -> np.ndarray:
    """Softmax-13: over the single dim ``axis``."""
    return _softmax(ctx, x, axis, False, False)


@onnx_op("LogSoftmax", since=1)
@onnx_op("LogSoftmax", since=11)
def log_softmax_1(ctx: NodeContext, x: np.ndarray, *, axis: int) -> np.ndarray:
    """LogSoftmax-1/11: coerced to 2-D at ``axis``."""
    return _softmax(ctx, x, axis, True, True)


@onnx_op("LogSoftmax", since=13)
def log_softmax(ctx: NodeContext, x: np.ndarray, *, axis: int) -> np.ndarray:
    """LogSoftmax-13: over the single dim ``axis``."""
    return _softmax(ctx, x, axis, False, True)


@lowers(softmax, log_softmax)
def _lower_softmax(lc: LowerContext) -> Bound | None:
    """Softmax-13 over the last axis of a float32/float64 tensor: one row kernel."""
    x = lc.inputs[0]
    got = rows_of(x, lc.attrs["axis"])
    if got is None or got[2] != x.ndim - 1:
        return None
    rows, n, _ = got
    log = lc.node.op_type == "LogSoftmax"
    m = np.empty((1, 1), x.dtype)
    fn = lc.backend.launcher("nn", "softmax_rows", x.size, (m, m, log))
    return writes(
        fn, In(0, shape=(rows, n)), Out(0, shape=(rows, n)), log,
        outs=[tensor(x.dtype, x.shape)], name="nn.softmax_rows",
    )  # fmt: skip


def _hardmax(ctx: NodeContext, x: np.ndarray, axis: int, coerce_2d: bool) -> np.ndarray:
    a = _norm_axis(ctx, axis, x.ndim)
    shape = x.shape
    outer = math.prod(shape[:a])
    if coerce_2d:
        n, inner = math.prod(shape[a:]), 1
    else:
        n, inner = shape[a], math.prod(shape[a + 1 :])
    y3 = np.zeros((outer, n, inner), x.dtype)
    if y3.size:
        # argmax picks the first maximum, as the spec requires.
        idx = np.argmax(x.reshape(outer, n, inner), axis=1)
        np.put_along_axis(y3, idx[:, None, :], 1, axis=1)
    return y3.reshape(shape)


@onnx_op("Hardmax", since=1)
@onnx_op("Hardmax", since=11)
def hardmax_1(ctx: NodeContext, x: np.ndarray, *, axis: int) -> np.ndarray:
    """Hardmax-1/11: one-hot of the first maximum of the input coerced to 2-D at ``axis``."""
    return _hardmax(ctx, x, axis, True)


@onnx_op("Hardmax", since=13)
def hardmax(ctx: NodeContext, x: np.ndarray, *, axis: int) -> np.ndarray:
    """Hardmax-13: one-hot of the first maximum along ``axis``."""
    return _hardmax(ctx, x, axis, False)


# --------------------------------------------------------------------------------------------
# Normalisations


def _bn_inference(
    ctx: NodeContext,
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    epsilon: float,
    spatial: int = 1,
) -> np.ndarray:
    if x.ndim < 2:
        raise ctx.error(f"X must be (N, C, ...), got shape {x.shape}")
    N = x.shape[0]
    if spatial:
        C, S = x.shape[1], math.prod(x.shape[2:])
    else:
        C, S = math.prod(x.shape[1:]), 1
    for name, v in (("scale", scale), ("B", bias), ("mean", mean), ("var", var)):
        if v.size != C:
            raise ctx.error(f"{name} has shape {v.shape}, expected {C} values (one per channel)")
    dtype = x.dtype
    xc = np.ascontiguousarray(_compute(x))
    a = scale.astype(np.float64).reshape(C) / np.sqrt(var.astype(np.float64).reshape(C) + epsilon)
    b = bias.astype(np.float64).reshape(C) - mean.astype(np.float64).reshape(C) * a
    x3 = xc.reshape(N, C, S)
    y3 = np.empty_like(x3)
    ctx.run_kernel(
        "norm",
        "channel_affine",
        x3.size,
        x3,
        a.astype(xc.dtype),
        b.astype(xc.dtype),
        y3,
    )
    return _back(y3.reshape(x.shape), dtype)


def _no_training_outputs(ctx: NodeContext) -> None:
    if any(ctx.outputs_used[1:]):
        raise ctx.unsupported(
            "training-mode outputs (mean, var, saved_mean, saved_var) are not supported before "
            "BatchNormalization-14; use only output Y (inference) or opset >= 14"
        )


@onnx_op("BatchNormalization", since=1)
@onnx_op("BatchNormalization", since=6)
def batch_norm_6(
    ctx: NodeContext,
    x: np.ndarray,
    scale: np.ndarray,
    b: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    *,
    consumed_inputs: list[int] | None = None,
    epsilon: float,
    is_test: int,
    momentum: float,
    spatial: int,
) -> np.ndarray:
    """BatchNormalization-1/6, inference with the given statistics.

    ``is_test=0`` asked old training frameworks to update the statistics; an inference runtime
    only evaluates Y, so (like onnxruntime) both values normalise with ``mean``/``var``.
    ``consumed_inputs`` (opset 1) described in-place buffer reuse and changes no value.
    """
    _no_training_outputs(ctx)
    return _bn_inference(ctx, x, scale, b, mean, var, epsilon, spatial)


@onnx_op("BatchNormalization", since=7)
def batch_norm_7(
    ctx: NodeContext,
    x: np.ndarray,
    scale: np.ndarray,
    b: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    *,
    epsilon: float,
    momentum: float,
    spatial: int,
) -> np.ndarray:
    """BatchNormalization-7, inference: ``spatial=0`` takes per-element statistics of shape
    X.shape[1:]."""
    _no_training_outputs(ctx)
    return _bn_inference(ctx, x, scale, b, mean, var, epsilon, spatial)


@onnx_op("BatchNormalization", since=9)
def batch_norm_9(
    ctx: NodeContext,
    x: np.ndarray,
    scale: np.ndarray,
    b: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    *,
    epsilon: float,
    momentum: float,
) -> np.ndarray:
    """BatchNormalization-9, inference: per-channel statistics."""
    _no_training_outputs(ctx)
    return _bn_inference(ctx, x, scale, b, mean, var, epsilon)


@onnx_op("BatchNormalization", since=14)
@onnx_op("BatchNormalization", since=15)
def batch_norm(
    ctx: NodeContext,
    x: np.ndarray,
    scale: np.ndarray,
    b: np.ndarray,
    input_mean: np.ndarray,
    input_var: np.ndarray,
    *,
    epsilon: float,
    momentum: float,
    training_mode: int,
) -> np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BatchNormalization-14/15. Inference normalises with the given statistics. With
    ``training_mode=1`` it normalises with the batch statistics (biased variance) and also
    returns ``running = input * momentum + batch * (1 - momentum)`` for mean and variance."""
    if not training_mode:
        if any(ctx.outputs_used[1:]):
            raise ctx.error("running_mean/running_var outputs require training_mode=1")
        return _bn_inference(ctx, x, scale, b, input_mean, input_var, epsilon)
    if x.ndim < 2:
        raise ctx.error(f"X must be (N, C, ...), got shape {x.shape}")
    axes = (0, *range(2, x.ndim))
    xc = _compute(x).astype(np.float64)
    bmean = xc.mean(axis=axes)
    bvar = xc.var(axis=axes)
    y = _bn_inference(ctx, x, scale, b, bmean, bvar, epsilon)
    rmean = input_mean.astype(np.float64) * momentum + bmean * (1 - momentum)
    rvar = input_var.astype(np.float64) * momentum + bvar * (1 - momentum)
    return y, rmean.astype(input_mean.dtype), rvar.astype(input_var.dtype)


def _group_norm(
    ctx: NodeContext,
    x: np.ndarray,
    groups: int,
    scale_c: np.ndarray,
    bias_c: np.ndarray,
    eps: float,
    compute: np.dtype | None = None,
) -> np.ndarray:
    N, C = x.shape[:2]
    S = math.prod(x.shape[2:])
    dtype = x.dtype
    cd = compute or _compute_dtype(dtype)
    x3 = np.ascontiguousarray(x.astype(cd, copy=False)).reshape(N, C, S)
    y3 = np.empty_like(x3)
    ctx.run_kernel(
        "norm",
        "group_norm",
        x3.size,
        x3,
        groups,
        scale_c.astype(cd),
        bias_c.astype(cd),
        float(eps),
        y3,
    )
    return _back(y3.reshape(x.shape), dtype)


@onnx_op("InstanceNormalization", since=6)
@onnx_op("InstanceNormalization", since=22)
def instance_norm(
    ctx: NodeContext,
    x: np.ndarray,
    scale: np.ndarray,
    b: np.ndarray,
    *,
    epsilon: float,
) -> np.ndarray:
    """Normalise every (n, c) plane over its spatial dims; per-channel scale and bias."""
    if x.ndim < 3:
        raise ctx.error(f"expected (N, C, spatial...), got shape {x.shape}")
    C = x.shape[1]
    if scale.shape != (C,) or b.shape != (C,):
        raise ctx.error(f"scale {scale.shape} and B {b.shape} must both be ({C},)")
    return _group_norm(ctx, x, C, scale, b, epsilon)


def _check_groups(ctx: NodeContext, x: np.ndarray, num_groups: int | None) -> int:
    if x.ndim < 2:
        raise ctx.error(f"expected (N, C, ...), got shape {x.shape}")
    if num_groups is None or num_groups < 1 or x.shape[1] % num_groups:
        raise ctx.error(
            f"num_groups={num_groups} must be >= 1 and divide the {x.shape[1]} channels"
        )
    return int(num_groups)


@onnx_op("GroupNormalization", since=18)
def group_norm_18(
    ctx: NodeContext,
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    *,
    epsilon: float,
    num_groups: int | None = None,
) -> np.ndarray:
    """GroupNormalization-18: scale and bias have one value per group."""
    g = _check_groups(ctx, x, num_groups)
    if scale.shape != (g,) or bias.shape != (g,):
        raise ctx.error(
            f"scale {scale.shape} and bias {bias.shape} must be ({g},) (one per group) at "
            "opset 18; opset 21 takes one per channel"
        )
    rep = x.shape[1] // g
    return _group_norm(ctx, x, g, np.repeat(scale, rep), np.repeat(bias, rep), epsilon)


def _stash_dtype(ctx: NodeContext, stash_type: int) -> np.dtype:
    if stash_type == 1:
        return np.dtype(np.float32)
    if stash_type == 11:
        return np.dtype(np.float64)
    raise ctx.unsupported(f"stash_type={stash_type} (only 1 = float and 11 = double are)")


@onnx_op("GroupNormalization", since=21)
def group_norm(
    ctx: NodeContext,
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    *,
    epsilon: float,
    num_groups: int | None = None,
    stash_type: int,
) -> np.ndarray:
    """GroupNormalization-21: scale and bias have one value per channel; statistics are
    accumulated in float64 (at least the precision ``stash_type`` asks for)."""
    g = _check_groups(ctx, x, num_groups)
    C = x.shape[1]
    _stash_dtype(ctx, stash_type)
    if scale.shape != (C,) or bias.shape != (C,):
        raise ctx.error(f"scale {scale.shape} and bias {bias.shape} must be ({C},)")
    return _group_norm(ctx, x, g, scale, bias, epsilon)


@onnx_op("LayerNormalization", since=17)
def layer_norm(
    ctx: NodeContext,
    x: np.ndarray,
    scale: np.ndarray,
    b: np.ndarray | None = None,
    *,
    axis: int,
    epsilon: float,
    stash_type: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normalise over dims ``axis..`` then ``* Scale + B`` (broadcast to those dims). Mean and
    InvStdDev have shape X.shape[:axis] + ones and the stash type (float32 for stash_type=1),
    as onnx shape inference and onnxruntime give them."""
    a = _norm_axis(ctx, axis, x.ndim)
    stash = _stash_dtype(ctx, stash_type)
    norm_shape = x.shape[a:]
    n = math.prod(norm_shape)
    dtype = x.dtype
    cd = _compute_dtype(dtype)
    try:
        sc = np.ascontiguousarray(np.broadcast_to(scale, norm_shape).astype(cd)).reshape(n)
        bi = (
            np.zeros(n, cd)
            if b is None
            else np.ascontiguousarray(np.broadcast_to(b, norm_shape).astype(cd)).reshape(n)
        )
    except ValueError:
        raise ctx.error(
            f"Scale {scale.shape} / B {None if b is None else b.shape} do not broadcast to the "
            f"normalised shape {norm_shape}"
        ) from None
    # One pass per row over contiguous (R, n) rows (statistics in the compute type).
    y2, mean, inv = layer_norm_rows(ctx, x, x.ndim - a, float(epsilon), sc, bi)
    stat_shape = (*x.shape[:a], *([1] * (x.ndim - a)))
    return (
        _back(y2.reshape(x.shape), dtype),
        mean.astype(stash).reshape(stat_shape),
        inv.astype(stash).reshape(stat_shape),
    )


@lowers(layer_norm)
def _lower_layer_normalization(lc: LowerContext) -> Bound | None:
    """LayerNormalization-17 whose Mean and InvStdDev nothing reads: one row kernel."""
    if any(lc.outputs_used[1:]):
        return None
    return lower_layer_norm(lc, lc.attrs["axis"], lc.attrs["epsilon"])


@onnx_op("MeanVarianceNormalization", since=9)
@onnx_op("MeanVarianceNormalization", since=13)
def mean_variance_norm(
    ctx: NodeContext,
    x: np.ndarray,
    *,
    axes: list[int],  # noqa: B006 - schema default, never mutated
) -> np.ndarray:
    """``(X - mean) / (sqrt(var) + 1e-9)`` over ``axes`` (the function body's epsilon)."""
    red = sorted({_norm_axis(ctx, int(a), x.ndim) for a in axes})
    keep = [i for i in range(x.ndim) if i not in red]
    perm = keep + red
    dtype = x.dtype
    xt = np.ascontiguousarray(np.transpose(_compute(x), perm))
    R = math.prod(xt.shape[: len(keep)])
    n = math.prod(xt.shape[len(keep) :])
    x2 = xt.reshape(R, n)
    y2 = np.empty_like(x2)
    mean = np.empty(R, np.float64)
    inv = np.empty(R, np.float64)
    ctx.run_kernel(
        "norm",
        "standardize_rows",
        x2.size,
        x2,
        np.ones(n, x2.dtype),
        np.zeros(n, x2.dtype),
        0.0,
        1e-9,
        y2,
        mean,
        inv,
    )
    y = np.transpose(y2.reshape(xt.shape), np.argsort(perm))
    y = np.asarray(y)
    if not y.flags.c_contiguous:
        y = np.ascontiguousarray(y)
    return _back(y, dtype)


@onnx_op("LRN", since=1)
@onnx_op("LRN", since=13)
def lrn(
    ctx: NodeContext,
    x: np.ndarray,
    *,
    alpha: float,
    beta: float,
    bias: float,
    size: int | None = None,
) -> np.ndarray:
    """Local response normalisation across channels (window of ``size`` channels)."""
    if size is None or size < 1:
        raise ctx.error(f"size must be a positive integer, got {size}")
    if x.ndim < 2:
        raise ctx.error(f"expected (N, C, ...), got shape {x.shape}")
    dtype = x.dtype
    xc = np.ascontiguousarray(_compute(x))
    x3 = xc.reshape(x.shape[0], x.shape[1], math.prod(x.shape[2:]))
    y3 = np.empty_like(x3)
    ctx.kernel("nn", "lrn")(x3, y3, int(size), float(alpha), float(beta), float(bias))
    return _back(y3.reshape(x.shape), dtype)
