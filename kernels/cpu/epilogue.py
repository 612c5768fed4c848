"""In-place GEMM/convolution epilogues (CPU, Numba): scale, bias, residual, activation.

The contraction writes its result with BLAS; one of these kernels then makes a single pass over
that result, row by row (a row is still in cache when the activation reads it), instead of one
pass per ONNX node. The activation is a run-time code (``ACT_*``) with two float parameters, so
one compiled kernel per dtype serves every activation and every size.

Layouts (all C-contiguous, one dtype):

* :func:`rows` takes ``y`` (R, C) and a bias (C,) broadcast along rows (GEMM: bias per output
  column).
* :func:`planes` takes ``y`` (N, M, S), a bias (M,) constant over each plane and an optional
  residual of ``y``'s shape (convolution: bias per output channel, then ``+ residual``).

Absent operands are passed as empty arrays with their flag set to False (no extra
specialisations). Parameters are passed in ``y``'s dtype so that float32 stays float32.
"""

from __future__ import annotations

from .._jit import njit
from ..vecmath import vgelu, vgelu_tanh, vsigmoid, vtanh
from .runtime.twins import twins

# Activation codes (shared with onnxjit.ops.fused_gemm / fused_conv).
ACT_NONE = 0
ACT_RELU = 1
ACT_LEAKY_RELU = 2  # p0 = alpha
ACT_SIGMOID = 3
ACT_TANH = 4
ACT_CLIP = 5  # p0 = min, p1 = max
ACT_GELU = 6  # erf form
ACT_GELU_TANH = 7  # tanh approximation
ACT_HARD_SIGMOID = 8  # p0 = alpha, p1 = beta
ACT_SILU = 9  # x * sigmoid(x)
ACT_HARD_SWISH = 10  # x * hard_sigmoid(x; 1/6, 1/2)


@njit(fma=True)
def activate(v, act, p0, p1):
    """Apply activation ``act`` to one row ``v`` (1-D view) in place.

    Compiled once per row type and called (not inlined): its ten vectorised loops would
    otherwise be typed and optimised again inside every kernel that applies an epilogue,
    which made the GEMM tile kernel take 7 s to compile.

    The switch is outside the element loops so that each loop is a plain vectorisable loop.
    NaN passes through Relu/LeakyRelu/Clip as in onnxruntime (comparisons with NaN are false).
    """
    n = v.shape[0]
    # Constants in v's type: a float64 literal would promote float32 rows to the float64 math.
    t = v.dtype.type
    # Relu, LeakyRelu and Clip store ``x + 0`` where they keep x: storing either a new value
    # or the one just loaded is a conditional store, which LLVM vectorises with AVX2's
    # masked stores (vmaskmovps, microcoded on AMD Zen) or not at all. ``x + 0`` is x except
    # that -0 becomes +0, which is still max(x, 0); NaN passes.
    zero = t(0)
    if act == ACT_RELU:
        for j in range(n):
            x = v[j]
            v[j] = zero if x < zero else x + zero
    elif act == ACT_LEAKY_RELU:
        for j in range(n):
            x = v[j]
            v[j] = x * p0 if x < zero else x + zero
    elif act == ACT_SIGMOID:
        for j in range(n):
            v[j] = vsigmoid(v[j])
    elif act == ACT_TANH:
        for j in range(n):
            v[j] = vtanh(v[j])
    elif act == ACT_CLIP:
        for j in range(n):
            x = v[j]
            v[j] = p0 if x < p0 else (p1 if x > p1 else x + zero)
    elif act == ACT_GELU:
        for j in range(n):
            v[j] = vgelu(v[j])  # float32: vecmath.gelu_f32
    elif act == ACT_GELU_TANH:
        for j in range(n):
            v[j] = vgelu_tanh(v[j])  # float32: vecmath.gelu_tanh_f32
    elif act == ACT_HARD_SIGMOID:
        for j in range(n):
            t = v[j] * p0 + p1
            v[j] = 0.0 if t < 0 else (1.0 if t > 1 else t)
    elif act == ACT_SILU:
        for j in range(n):
            x = v[j]
            v[j] = x * vsigmoid(x)
    elif act == ACT_HARD_SWISH:
        for j in range(n):
            x = v[j]
            t = x / 6.0 + 0.5
            v[j] = 0.0 if t <= 0 else (x if t >= 1 else x * t)


@njit(inline="always")
def _row(y, r, alpha, bias, has_bias, act, p0, p1):
    v = y[r]
    n = v.shape[0]
    if alpha != 1:
        for j in range(n):
            v[j] = v[j] * alpha
    if has_bias:
        for j in range(n):
            v[j] = v[j] + bias[j]
    activate(v, act, p0, p1)


rows, rows_par = twins(
    "rows(y, alpha, bias, has_bias, act, p0, p1)",
    _row,
    items={"r": "y.shape[0]"},
    fma=True,
    doc="""``y[r, :] = act(alpha * y[r, :] + bias)`` in place for every row of ``y`` (R, C).""",
)


@njit(inline="always")
def _plane(y, idx, bias, has_bias, res, has_res, act, p0, p1):
    M = y.shape[1]
    n = idx // M
    m = idx % M
    v = y[n, m]
    s = v.shape[0]
    if has_bias:
        b = bias[m]
        if has_res:
            r = res[n, m]
            for j in range(s):
                v[j] = v[j] + b + r[j]
        else:
            for j in range(s):
                v[j] = v[j] + b
    elif has_res:
        r = res[n, m]
        for j in range(s):
            v[j] = v[j] + r[j]
    activate(v, act, p0, p1)


planes, planes_par = twins(
    "planes(y, bias, has_bias, res, has_res, act, p0, p1)",
    _plane,
    items={"idx": "y.shape[0] * y.shape[1]"},
    fma=True,
    doc="``y[n, m, :] = act(y[n, m, :] + bias[m] + res[n, m, :])`` in place for ``y`` (N, M, S).",
)
