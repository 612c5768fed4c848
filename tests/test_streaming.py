"""Streaming (non-temporal) stores: kernels/cpu/runtime/streaming.py and the generated
``kernel_stream``.

The oracle is the ordinary kernel of the same module (``kernel``, which the pool twins are
tested against numpy in test_fusion_elementwise.py) and numpy itself: a streamed output must
be bit-identical, whatever the output's alignment, length and dtype, and must write nothing
outside its range.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxjit
from onnxjit.backends.cpu import pool
from onnxjit.codegen import elementwise as E
from onnxjit.codegen.expr import call, const, inp, op
from onnxjit.kernels import _jit
from onnxjit.kernels.cpu.runtime import streaming

LINE = streaming.LINE


def _view(n: int, dtype, misalign: int, fill) -> tuple[np.ndarray, np.ndarray]:
    """``(whole, view)``: a view of ``n`` elements that starts ``misalign`` elements after a
    64-byte boundary inside a larger array filled with ``fill`` (to see stray writes)."""
    dtype = np.dtype(dtype)
    pad = LINE // dtype.itemsize
    whole = np.full(n + 3 * pad, fill, dtype)
    start = (-whole.ctypes.data % LINE) // dtype.itemsize + pad + misalign
    return whole, whole[start : start + n]


@_jit.njit
def _copy_streamed(dst, src):
    # dst[:] = src: ordinary stores before the first aligned element and after the last whole
    # line, stream_block in between (blocks of one line of dst's type)
    head = streaming.stream_head(dst)
    per_line = LINE // dst.itemsize
    lines = (dst.size - head) // per_line
    for i in range(head):
        dst[i] = src[i]
    for k in range(lines):
        lo = head + k * per_line
        streaming.stream_block(dst, lo, src[lo : lo + per_line].copy())
    for i in range(head + lines * per_line, dst.size):
        dst[i] = src[i]
    streaming.stream_fence()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.uint16])
@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 100, 1000])
def test_stream_block_copies_exactly_and_nothing_else(dtype, n):
    src = np.random.default_rng(n).integers(0, 100, n).astype(dtype)
    for misalign in range(0, LINE // np.dtype(dtype).itemsize, 3):
        whole, dst = _view(n, dtype, misalign, 111)
        head = streaming.stream_head(dst)
        assert 0 <= head <= n
        assert head == n or (dst[head:].ctypes.data % LINE == 0 and head < LINE)
        before = whole.copy()
        _copy_streamed(dst, src)
        np.testing.assert_array_equal(dst, src)
        outside = np.ones(whole.size, bool)
        lo = (dst.ctypes.data - whole.ctypes.data) // whole.itemsize
        outside[lo : lo + n] = False
        np.testing.assert_array_equal(whole[outside], before[outside])


def _ratio(dtype):
    # x / (x^2 + 1): cheap enough to stream (elementwise._STREAM_MAX_COST)
    x = inp(0, dtype)
    return op("truediv", x, op("add", op("mul", x, x), const(1, dtype)))


def _silu(dtype):
    x = inp(0, dtype)
    return op("mul", x, call("sigmoid", x))


def _axpy(dtype):
    return op("add", op("mul", inp(0, dtype), const(3, dtype)), inp(1, dtype))


@pytest.mark.parametrize(
    ("expr", "dtype", "n_in"),
    [
        (_ratio, np.float32, 1),
        (_ratio, np.float64, 1),
        (_axpy, np.int32, 2),
        (_axpy, np.float32, 2),
    ],
)
@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_stream_equals_kernel(expr, dtype, n_in, threads):
    """The generated streaming twin against the serial kernel, on lengths around its block
    size and on outputs at every alignment (its head and tail paths)."""
    e = expr(np.dtype(dtype))
    rng = np.random.default_rng(7)
    block = streaming.BLOCK_BYTES // np.dtype(dtype).itemsize
    for n in (1, 13, block - 1, block, 3 * block + 17):
        xs = [(rng.standard_normal(n) * 4).astype(dtype) for _ in range(n_in)]
        mod = E.plan_for([e], xs).entry.module
        assert hasattr(mod, "kernel_stream")
        want = np.empty(n, dtype)
        mod.kernel(want, *xs, n)
        for misalign in (0, 1, 5):
            whole, got = _view(n, dtype, misalign, 77)
            before = whole.copy()
            pool.run_parallel(mod.kernel_stream, got, *xs, n, threads=threads)
            np.testing.assert_array_equal(got, want)
            lo = (got.ctypes.data - whole.ctypes.data) // whole.itemsize
            np.testing.assert_array_equal(whole[:lo], before[:lo])
            np.testing.assert_array_equal(whole[lo + n :], before[lo + n :])


def test_kernel_stream_in_place():
    """The output may be the input (a donated buffer): each block is read before it is
    streamed back."""
    e = _ratio(np.dtype(np.float32))
    x = np.random.default_rng(3).standard_normal(5 * 4096 + 9).astype(np.float32)
    mod = E.plan_for([e], [x]).entry.module
    want = np.empty_like(x)
    mod.kernel(want, x, x.size)
    pool.run_parallel(mod.kernel_stream, x, x, x.size, threads=2)
    np.testing.assert_array_equal(x, want)


def test_only_cheap_full_size_single_output_kernels_stream():
    f32 = np.dtype(np.float32)
    assert E._Emitter((_ratio(f32),), ((True,),)).streams_output()
    # broadcast operand, two outputs, a chain with a vecmath function (SiLU) or three: no
    # streaming twin
    assert not E._Emitter((_axpy(f32),), ((True, True), (False, True))).streams_output()
    assert not E._Emitter((_ratio(f32), _ratio(f32)), ((True,),)).streams_output()
    assert not E._Emitter((_silu(f32),), ((True,),)).streams_output()
    dear = call("tanh", call("log", call("sigmoid", inp(0, f32))))
    assert not E._Emitter((dear,), ((True,),)).streams_output()


def test_session_streams_large_outputs(monkeypatch):
    """Through a session: with the threshold lowered, the output of x / (x * x + 1) is written
    by the streaming kernel (the kernels handed to the pool are recorded) and equals numpy, at the
    first run (planning) and the later ones (the plan's bound kernel)."""
    n = 3 * 4096 + 5
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "x"], ["sq"]),
            helper.make_node("Add", ["sq", "one"], ["d"]),
            helper.make_node("Div", ["x", "d"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x64 = x.astype(np.float64)
    want = x64 / (x64 * x64 + 1)
    e = _ratio(np.dtype(np.float32))
    assert not E.plan_for([e], [x]).stream  # 48 KiB: far under the threshold
    used: list[str] = []
    real_bind, real_run = pool.bind, E.run_parallel

    def bind(kernel, *args, **kw):
        used.append(kernel.__name__)
        return real_bind(kernel, *args, **kw)

    def run(kernel, *args, **kw):
        used.append(kernel.__name__)
        return real_run(kernel, *args, **kw)

    monkeypatch.setattr(pool, "bind", bind)
    monkeypatch.setattr(E, "run_parallel", run)
    monkeypatch.setattr(streaming, "MIN_BYTES", 4096)
    E._PLANS.clear()
    try:
        sess = onnxjit.InferenceSession(model.SerializeToString())
        for _ in range(3):
            (y,) = sess.run(None, {"x": x})
            np.testing.assert_allclose(y, want, rtol=3e-7, atol=0)
    finally:
        E._PLANS.clear()
    assert used and set(used) == {"kernel_stream"}, used
