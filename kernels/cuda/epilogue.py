"""GEMM/convolution epilogues on the GPU: activation codes, the per-element epilogue device
helpers the product kernels apply as they store, and the in-place row/plane launchers.

The codes ``ACT_*`` have the values of :mod:`onnxjit.kernels.cpu.epilogue` (a lowering asks the
backend for them by name, and a plan bound for one backend never mixes them with the other's,
but equal values keep any stray mix harmless). :func:`act_value` applies one activation to one
value; :func:`finish` is ``act(v + bias + residual)`` for one output element. Both, and the
device helpers of the product kernels, are decorated with :func:`device_fn`: a plain ``@njit``
function, which numba-cuda compiles for the device when a ``@cuda.jit`` kernel calls it (and
which ``compile_ptx`` can compile without a GPU: a ``@cuda.jit(device=True)`` function asks the
driver for the device's compute capability when it is first typed); under the simulator the
Python function itself (an ``@njit`` function cannot take the simulator's device arrays).

Constants go through ``t`` (the element type's class, ``y.dtype.type`` in the kernel): a bare
float literal is float64 to Numba, and would promote float32 math to float64 (slow on most GPUs).

:func:`rows` and :func:`planes` take the arguments of their CPU twins (device arrays) and launch
one thread per element on :func:`onnxjit.kernels.cuda.runtime.stream`.
"""

from __future__ import annotations

import math

from numba import config, cuda, njit

from .runtime import BLOCK, blocks, stream

# Activation codes (the values of onnxjit.kernels.cpu.epilogue).
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


def device_fn(fn):
    """``fn`` as a device helper of ``@cuda.jit`` kernels: inlined ``@njit`` (compiled for the
    device by the kernel that calls it), or ``fn`` itself under the CUDA simulator."""
    if config.ENABLE_CUDASIM:
        return fn
    return njit(inline="always")(fn)


_SQRT1_2 = 0.7071067811865476
_SQRT_2_PI = 0.7978845608028654


@device_fn
def _sigmoid(x, t):
    # the form that never overflows: e^x of a non-positive x only
    one = t(1)
    if x >= t(0):
        return one / (one + math.exp(-x))
    e = math.exp(x)
    return e / (one + e)


@device_fn
def act_value(x, act, p0, p1, t):
    """Activation ``act`` (an ``ACT_*`` code) with parameters ``p0``, ``p1`` of the value
    ``x`` of type ``t``, as the CPU's ``activate`` computes it element by element (NaN passes
    Relu, LeakyRelu and Clip; ``x + 0`` turns -0 into +0 where those keep x, as there)."""
    zero = t(0)
    one = t(1)
    if act == ACT_NONE:
        return x
    if act == ACT_RELU:
        return zero if x < zero else x + zero
    if act == ACT_LEAKY_RELU:
        return x * p0 if x < zero else x + zero
    if act == ACT_SIGMOID:
        return _sigmoid(x, t)
    if act == ACT_TANH:
        return math.tanh(x)
    if act == ACT_CLIP:
        return p0 if x < p0 else (p1 if x > p1 else x + zero)
    if act == ACT_GELU:
        return t(0.5) * x * (one + math.erf(x * t(_SQRT1_2)))
    if act == ACT_GELU_TANH:
        u = t(_SQRT_2_PI) * (x + t(0.044715) * x * x * x)
        return t(0.5) * x * (one + math.tanh(u))
    if act == ACT_HARD_SIGMOID:
        h = x * p0 + p1
        return zero if h < zero else (one if h > one else h)
    if act == ACT_SILU:
        return x * _sigmoid(x, t)
    if act == ACT_HARD_SWISH:
        h = x / t(6) + t(0.5)
        return zero if h <= zero else (x if h >= one else x * h)
    return x


@device_fn
def finish(v, b, has_bias, r, has_res, act, p0, p1, t):
    """``act(v + b + r)`` for one output element (``b``/``r`` added only when ``has_bias`` /
    ``has_res``), in the CPU epilogue's order: bias first, then the residual."""
    # single assignments: Numba's inliner rejects a variable assigned twice
    vb = v + b if has_bias else v
    vr = vb + r if has_res else vb
    return act_value(vr, act, p0, p1, t)


@cuda.jit
def _rows_kernel(y, alpha, bias, has_bias, act, p0, p1):
    t = y.dtype.type
    cols = y.shape[1]
    total = y.shape[0] * cols
    start, step = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, total, step):
        r = i // cols
        j = i - r * cols
        v = y[r, j]
        if alpha != t(1):
            v = v * alpha
        b = bias[j] if has_bias else t(0)
        y[r, j] = finish(v, b, has_bias, t(0), False, act, p0, p1, t)


def rows(y, alpha, bias, has_bias, act, p0, p1):
    """``y[r, :] = act(alpha * y[r, :] + bias)`` in place for every row of the device array
    ``y`` (R, C) of float32/float64; ``bias`` (C,) of ``y``'s type, read only when
    ``has_bias`` (an empty array otherwise); ``alpha``, ``p0``, ``p1`` in ``y``'s type,
    ``act`` an ``ACT_*`` code. One thread per element; nothing for an empty ``y``."""
    if y.size == 0:
        return
    _rows_kernel[blocks(y.size), BLOCK, stream()](y, alpha, bias, has_bias, act, p0, p1)


@cuda.jit
def _planes_kernel(y, bias, has_bias, res, has_res, act, p0, p1):
    t = y.dtype.type
    M, S = y.shape[1], y.shape[2]
    total = y.shape[0] * M * S
    start, step = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, total, step):
        q = i // S
        s = i - q * S
        n = q // M
        m = q - n * M
        b = bias[m] if has_bias else t(0)
        r = res[n, m, s] if has_res else t(0)
        y[n, m, s] = finish(y[n, m, s], b, has_bias, r, has_res, act, p0, p1, t)


def planes(y, bias, has_bias, res, has_res, act, p0, p1):
    """``y[n, m, :] = act(y[n, m, :] + bias[m] + res[n, m, :])`` in place for the device
    array ``y`` (N, M, S) of float32/float64; ``bias`` (M,) read only when ``has_bias``,
    ``res`` of ``y``'s shape (3-D) only when ``has_res`` (empty arrays otherwise); ``p0``,
    ``p1`` in ``y``'s type. One thread per element; nothing for an empty ``y``."""
    if y.size == 0:
        return
    _planes_kernel[blocks(y.size), BLOCK, stream()](y, bias, has_bias, res, has_res, act, p0, p1)
