"""Concat, Split, Slice, Expand, Pad and Gather on the CUDA backend (numba-cuda's simulator).

Kernels: ``tensor.copy_strided`` and ``tensor.fill_outside`` (kernels/cuda/tensor.py) run on
small inputs with fixed seeds; each result must equal numpy's (slicing, broadcasting, masked
fills of the same geometry) and the CPU twin's exactly (data movement). A compile-only test runs
the new ``@cuda.jit`` kernels through NVVM in a subprocess without the simulator.

Sessions: one-node models on ``providers=["CUDAExecutionProvider", ...]`` against onnxruntime's
CPU provider, with ``InferenceSession.placement()`` showing the node's step on "cuda".
"""

from __future__ import annotations

import os
import textwrap  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from cuda_compile import run_without_simulator  # noqa: E402

try:
    from numba import cuda  # noqa: E402
except Exception as exc:  # pragma: no cover - depends on the environment
    pytest.skip(f"numba.cuda cannot be imported: {exc}", allow_module_level=True)

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import onnxjit  # noqa: E402
from onnxjit.kernels.cpu import tensor as cpu  # noqa: E402
from onnxjit.kernels.cuda import tensor as gpu  # noqa: E402
from onnxjit.kernels.cuda.runtime import set_stream  # noqa: E402

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle of the sessions")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUDA = ["CUDAExecutionProvider", "CPUExecutionProvider"]
I64 = np.int64


@pytest.fixture(autouse=True)
def _run_stream():
    # launchers queue on the run's stream; the simulator has no default stream object
    prev = set_stream(cuda.stream())
    yield
    set_stream(prev)


def _random(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 250, shape).astype(dtype)


def _c_strides(shape) -> list[int]:
    return [int(np.prod(shape[d + 1 :], dtype=np.int64)) for d in range(len(shape))]


def _slice_case(shape, index):
    """``(dims, xs, xo)`` reading ``x[index]`` from flat C-ordered ``x`` of ``shape``."""
    st = _c_strides(shape)
    dims, xs, xo = [], [], 0
    for d, sl in enumerate(index):
        start, stop, step = sl.indices(shape[d])
        dims.append(len(range(start, stop, step)))
        xs.append(step * st[d])
        xo += start * st[d]
    return dims, xs, xo


def _both(x, y0, dims, xs, ys, xo, yo):
    """copy_strided on the CPU twin and under the simulator, from the same initial ``y0``."""
    g = [np.asarray(v, I64) for v in (dims, xs, ys)]
    want = y0.copy()
    cpu.copy_strided(x, want, *g, xo, yo)
    out = cuda.to_device(y0)
    gpu.copy_strided(cuda.to_device(x), out, *g, xo, yo)
    return want, out.copy_to_host()


WIDTHS = [np.uint8, np.uint16, np.uint32, np.uint64, np.float32, np.bool_]


# -- copy_strided --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", WIDTHS)
@pytest.mark.parametrize(
    "shape, index",
    [
        ((4, 5, 6), (slice(3, None, -2), slice(1, 5), slice(5, 0, -3))),  # negative steps
        ((7, 45), (slice(1, 7), slice(44, None, -1))),  # 270 elements: not a multiple of 256
        ((3, 4), (slice(2, 3), slice(1, 2))),  # one element
        ((3, 4), (slice(1, 1), slice(None))),  # empty
        ((600,), (slice(3, 599, 2),)),  # more than one block
    ],
)
def test_copy_strided_slices(dtype, shape, index):
    rng = np.random.default_rng(len(shape) * 7 + shape[0])
    x = _random(rng, shape, dtype)
    ref = x[index]
    dims, xs, xo = _slice_case(shape, index)
    y0 = np.zeros(ref.size, dtype)
    want, got = _both(x.reshape(-1), y0, dims, xs, _c_strides(dims), xo, 0)
    np.testing.assert_array_equal(want, ref.reshape(-1))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", WIDTHS)
@pytest.mark.parametrize(
    "xshape, shape", [((3, 1), (2, 3, 5)), ((1,), (4,)), ((2, 1, 3), (2, 4, 3))]
)
def test_copy_strided_broadcasts_with_zero_strides(dtype, xshape, shape):
    rng = np.random.default_rng(sum(shape))
    x = _random(rng, xshape, dtype)
    ref = np.broadcast_to(x, shape)
    lead = len(shape) - len(xshape)
    xs = [0] * lead + [0 if n == 1 else s for n, s in zip(xshape, _c_strides(xshape))]
    y0 = np.zeros(ref.size, dtype)
    want, got = _both(x.reshape(-1), y0, shape, xs, _c_strides(shape), 0, 0)
    np.testing.assert_array_equal(want, ref.reshape(-1))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.uint16, np.float32, np.uint64])
def test_copy_strided_into_columns_at_an_offset_leaves_the_rest(dtype):
    # a Concat part: x (3, 5) into columns 2..6 of y (3, 9); the other columns keep 7
    rng = np.random.default_rng(3)
    x = _random(rng, (3, 5), dtype)
    y0 = np.full((3, 9), 7, dtype)
    ref = y0.copy()
    ref[:, 2:7] = x
    want, got = _both(x.reshape(-1), y0.reshape(-1), (3, 5), (5, 1), (9, 1), 0, 2)
    np.testing.assert_array_equal(want, ref.reshape(-1))
    np.testing.assert_array_equal(got, want)


def test_copy_strided_rank_zero_copies_one_element():
    x = np.arange(10, dtype=np.uint32)
    want, got = _both(x, np.zeros(4, np.uint32), [], [], [], 6, 2)
    np.testing.assert_array_equal(want, [0, 0, 6, 0])
    np.testing.assert_array_equal(got, want)


# -- fill_outside --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize(
    "shape, lo, hi",
    [
        ((3, 4), (1, 1), (2, 3)),
        ((5, 7, 9), (1, 0, 2), (4, 7, 8)),  # 315 elements, no border on axis 1
        ((4, 6), (2, 3), (2, 5)),  # nothing kept: all border
        ((1,), (0,), (1,)),  # one element, inside
        ((0, 3), (0, 0), (0, 3)),  # empty
    ],
)
def test_fill_outside(dtype, shape, lo, hi):
    rng = np.random.default_rng(len(shape) + shape[0])
    y0 = _random(rng, shape, dtype)
    value = dtype(201)
    ref = y0.copy()
    inside = np.zeros(shape, bool)
    inside[tuple(slice(a, b) for a, b in zip(lo, hi))] = True
    ref[~inside] = value
    g = [np.asarray(v, I64) for v in (shape, lo, hi)]
    want = y0.reshape(-1).copy()
    cpu.fill_outside(want, *g, value)
    out = cuda.to_device(y0.reshape(-1))
    gpu.fill_outside(out, *g, value)
    np.testing.assert_array_equal(want, ref.reshape(-1))
    np.testing.assert_array_equal(out.copy_to_host(), want)


def test_fill_outside_of_a_scalar_writes_nothing():
    none = np.zeros(0, I64)
    want = np.array([5], np.uint32)
    cpu.fill_outside(want, none, none, none, np.uint32(9))
    out = cuda.to_device(np.array([5], np.uint32))
    gpu.fill_outside(out, none, none, none, np.uint32(9))
    np.testing.assert_array_equal(want, [5])
    np.testing.assert_array_equal(out.copy_to_host(), want)


def test_wrap_indices_widens_int32_indices_on_the_device():
    # Gather's device path hands int32 indices to wrap_indices as they are
    idx = np.array([0, -1, 3, -4, 2], np.int32)
    want, want_bad = cpu.wrap_indices(idx, 4)
    got, bad = gpu.wrap_indices(cuda.to_device(idx), 4)
    assert want_bad == -1 and int(bad) == -1
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got.copy_to_host(), [0, 3, 3, 0, 2])
    np.testing.assert_array_equal(got.copy_to_host(), want)


# -- compile-only through NVVM -------------------------------------------------------------------
_COMPILE = textwrap.dedent(
    """
    import os, sys
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    sys.path.insert(0, {root!r})
    from numba import cuda, types as t
    from onnxjit.kernels.cuda import tensor as g

    i64 = t.int64
    count = 0
    def ptx(fn, sig):
        global count
        cuda.compile_ptx(fn.py_func, sig, cc=(8, 0))
        count += 1

    for dt in (t.uint8, t.uint16, t.uint32, t.uint64):
        a = t.Array(dt, 1, "C")
        for r in (1, 2, 3):
            tup = t.UniTuple(i64, r)
            ptx(g._copy_strided_k, (a, a, tup, tup, tup, i64, i64, i64))
        tup = t.UniTuple(i64, 3)
        ptx(g._fill_outside_k, (a, tup, tup, tup, dt, i64))
    ptx(g._wrap_k, (t.Array(t.int32, 1, "C"), i64, t.Array(i64, 1, "C"), t.Array(i64, 1, "C")))
    print("compiled", count)
    """
)


def test_kernels_compile_through_nvvm():
    out = run_without_simulator(["-c", _COMPILE.format(root=ROOT)])
    assert "compiled 17" in out, out


# -- sessions ------------------------------------------------------------------------------------
def _model(node, inputs, outputs, inits=(), opset=18) -> bytes:
    graph = helper.make_graph([node], "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


def _io(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _ints(name, values):
    return numpy_helper.from_array(np.asarray(values, I64), name)


def _check_on_cuda(model: bytes, feeds: list[dict], op: str) -> None:
    """The session's results equal onnxruntime's for every feed (planning run and plan's),
    and the node's step runs on cuda."""
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    with warnings.catch_warnings():
        # the planning run warns of nodes left to the CPU: fail on it
        warnings.simplefilter("error", RuntimeWarning)
        sess = onnxjit.InferenceSession(model, providers=CUDA)
        for feed in feeds:
            for _ in range(2):
                got = sess.run(None, feed)
                want = ref.run(None, feed)
                assert len(got) == len(want)
                for g, w in zip(got, want):
                    assert isinstance(g, np.ndarray) and g.dtype == w.dtype
                    np.testing.assert_array_equal(g, w)
    steps = [p for p in sess.placement() if not p["copy"]]
    assert [p["op"].split("-")[0] for p in steps] == [op], sess.placement()
    assert steps[0]["device"] == "cuda", sess.placement()


F, F16, I32, B = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.BOOL
NP = {F: np.float32, F16: np.float16, I32: np.int32, B: np.bool_}


@pytest.mark.parametrize("elem", [F, F16, B])
def test_concat_of_three_inputs_along_a_middle_axis(elem):
    node = helper.make_node("Concat", ["a", "b", "c"], ["y"], axis=1)
    widths = {"a": 3, "b": 1, "c": 2}
    model = _model(
        node, [_io(n, elem, [2, k, 5]) for n, k in widths.items()], [_io("y", elem, [2, 6, 5])]
    )
    rng = np.random.default_rng(1)
    feeds = [{n: _random(rng, (2, k, 5), NP[elem]) for n, k in widths.items()} for _ in range(2)]
    _check_on_cuda(model, feeds, "Concat")


def test_split_into_unequal_parts():
    node = helper.make_node("Split", ["x", "s"], ["p", "q", "r"], axis=2)
    model = _model(
        node,
        [_io("x", F, [2, 3, 7])],
        [_io(n, F, [2, 3, k]) for n, k in (("p", 1), ("q", 4), ("r", 2))],
        [_ints("s", [1, 4, 2])],
    )
    rng = np.random.default_rng(2)
    _check_on_cuda(model, [{"x": _random(rng, (2, 3, 7), np.float32)} for _ in range(2)], "Split")


@pytest.mark.parametrize("elem", [F, I32])
def test_slice_with_negative_steps(elem):
    node = helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])
    model = _model(
        node,
        [_io("x", elem, [3, 4, 6])],
        [_io("y", elem, [3, 2, 3])],
        [_ints("s", [-1, 5]), _ints("e", [-10, 0]), _ints("a", [1, 2]), _ints("t", [-2, -2])],
    )
    rng = np.random.default_rng(3)
    _check_on_cuda(model, [{"x": _random(rng, (3, 4, 6), NP[elem])} for _ in range(2)], "Slice")


def test_expand_with_broadcasting():
    node = helper.make_node("Expand", ["x", "shape"], ["y"])
    model = _model(
        node, [_io("x", F, [3, 1])], [_io("y", F, [2, 3, 4])], [_ints("shape", [2, 1, 4])]
    )
    rng = np.random.default_rng(4)
    _check_on_cuda(model, [{"x": _random(rng, (3, 1), np.float32)} for _ in range(2)], "Expand")


@pytest.mark.parametrize(
    "elem, pads, value",
    [
        (F, [0, 1, 2, 1, 0, 3], 1.5),  # begins, then ends
        (I32, [1, -1, 0, 0, 2, -2], 7),  # negative pads crop
        (F, [0, 0, 0, 0, 0, 0], 0.0),  # nothing added
    ],
)
def test_pad_constant_mode(elem, pads, value):
    node = helper.make_node("Pad", ["x", "pads", "v"], ["y"], mode="constant")
    shape = (2, 3, 4)
    out = [n + pads[d] + pads[d + 3] for d, n in enumerate(shape)]
    model = _model(
        node,
        [_io("x", elem, list(shape))],
        [_io("y", elem, out)],
        [_ints("pads", pads), numpy_helper.from_array(np.array(value, NP[elem]), "v")],
    )
    rng = np.random.default_rng(5)
    _check_on_cuda(model, [{"x": _random(rng, shape, NP[elem])} for _ in range(2)], "Pad")


@pytest.mark.parametrize("elem", [I32, TensorProto.INT64])
def test_gather_with_int32_and_int64_indices(elem):
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=1)
    model = _model(
        node, [_io("x", F, [2, 5, 3]), _io("i", elem, [2, 2])], [_io("y", F, [2, 2, 2, 3])]
    )
    rng = np.random.default_rng(6)
    dt = np.int32 if elem == I32 else np.int64
    feeds = [
        {"x": _random(rng, (2, 5, 3), np.float32), "i": np.array(i, dt)}
        for i in ([[0, -1], [4, 2]], [[-5, 3], [1, 1]])
    ]
    _check_on_cuda(model, feeds, "Gather")


def test_gather_on_the_device_rejects_an_index_out_of_range():
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=0)
    model = _model(node, [_io("x", F, [4, 2]), _io("i", I32, [3])], [_io("y", F, [3, 2])])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sess = onnxjit.InferenceSession(model, providers=CUDA)
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    good = sess.run(None, {"x": x, "i": np.array([3, 0, -4], np.int32)})[0]
    np.testing.assert_array_equal(good, x[[3, 0, 0]])
    steps = [p for p in sess.placement() if not p["copy"]]
    assert [(p["op"], p["device"]) for p in steps] == [("Gather-13", "cuda")], steps
    with pytest.raises(Exception, match=r"indices\[1\] = 4 is out of range"):
        sess.run(None, {"x": x, "i": np.array([0, 4, 1], np.int32)})
