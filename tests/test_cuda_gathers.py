"""GatherElements, ScatterElements (and Scatter), GatherND, ScatterND and OneHot lowered: on
the CUDA backend (numba-cuda's simulator) and on the CPU backend.

Each model is a single node with small inputs (fixed seeds, negative indices, several axes,
ranks and reductions), run twice per feed (the planning run, then the plan's run) and compared
with onnxruntime's CPU provider (``onnx.reference`` for the ND ops and
OneHot). On ``CUDAExecutionProvider`` the node's step must
run on "cuda" (``InferenceSession.placement()``) with no warning of nodes left to the CPU; on
``CPUExecutionProvider`` the step must be the lowering's bound kernel, not the generic
implementation (``InferenceSession.stats()``). A bad index raises the implementation's error
(same type, same text, on both providers) and the session then still runs good feeds.

A compile-only test runs the kernels these lowerings feed with int32 indices (and the narrow
integer types the reductions take) through NVVM in a subprocess without the simulator.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import textwrap  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from cuda_compile import run_without_simulator  # noqa: E402

try:
    from numba import cuda  # noqa: E402, F401
except Exception as exc:  # pragma: no cover - depends on the environment
    pytest.skip(f"numba.cuda cannot be imported: {exc}", allow_module_level=True)

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import onnxjit  # noqa: E402
from onnxjit.errors import InvalidArgumentError  # noqa: E402

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle of the sessions")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUDA = ["CUDAExecutionProvider", "CPUExecutionProvider"]
CPU = ["CPUExecutionProvider"]
PROVIDERS = {"cuda": CUDA, "cpu": CPU}

F, F16, F64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE
I8, I32, I64, B = TensorProto.INT8, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL
NP = {F: np.float32, F16: np.float16, F64: np.float64, I8: np.int8, I32: np.int32}
NP.update({I64: np.int64, B: np.bool_})
KERNELS = {
    "GatherElements": "tensor.gather_elements",
    "ScatterElements": "tensor.scatter",
    "Scatter": "tensor.scatter",
    "GatherND": "tensor.gather_nd",
    "ScatterND": "tensor.scatter_nd",
    "OneHot": "tensor.one_hot",
}


# -- models --------------------------------------------------------------------------------------
def _model(node, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph([node], "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _io(name, elem, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _data(rng, shape, elem, small=False):
    """Random data of ``elem``; ``small``: integer values in [1, 4] (exact products and sums
    in any order, for the reductions)."""
    dt = NP[elem]
    if small:
        return rng.integers(1, 5, shape).astype(dt)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dt).kind == "f":
        return rng.standard_normal(shape).astype(dt)
    return rng.integers(-100, 100, shape).astype(dt)


def _indices(rng, shape, n, dtype):
    """Indices in [-n, n) (negatives wrap once)."""
    return rng.integers(-n, n, shape).astype(dtype)


def _nd_indices(rng, lead, sizes, dtype):
    """ND indices of shape ``lead + (k,)`` in range of ``sizes``, negatives included."""
    cols = [rng.integers(-n, n, lead) for n in sizes]
    return np.stack(cols, axis=-1).astype(dtype).reshape(*lead, len(sizes))


def _unique_rows(rng, count, sizes, dtype):
    """``count`` distinct ND index rows (a plain ScatterND's rows must not repeat)."""
    total = int(np.prod(sizes))
    flat = rng.permutation(total)[:count]
    rows = np.stack(np.unravel_index(flat, sizes), axis=-1)
    # half of them written as negative indices
    neg = rng.random(rows.shape) < 0.5
    rows = np.where(neg, rows - np.asarray(sizes), rows)
    return rows.astype(dtype)


def _reference(model):
    """The oracle: onnxruntime's CPU provider, or ``onnx.reference`` for GatherND and
    ScatterND (whose int32 indices onnxjit takes, beyond the spec's int64, and onnxruntime
    refuses) and OneHot (onnxruntime serves only some type combinations);
    ``onnx.reference`` mishandles GatherElements' negative axes."""
    if model.graph.node[-1].op_type in ("GatherND", "ScatterND", "OneHot"):
        return ReferenceEvaluator(model)
    return ort.InferenceSession(model.SerializeToString(), providers=CPU)


def _steps(sess):
    return [p for p in sess.placement() if not p["copy"]]


def _check(model, feeds, provider, op):
    """The session's results equal the reference's for every feed (planning run and plan's
    run); the node's step is on the device (cuda) or the lowering's kernel (cpu)."""
    ref = _reference(model)
    with warnings.catch_warnings():
        # the planning run warns of nodes left to the CPU: fail on it
        warnings.simplefilter("error", RuntimeWarning)
        sess = onnxjit.InferenceSession(model.SerializeToString(), providers=PROVIDERS[provider])
        for feed in feeds:
            want = ref.run(None, feed)
            for _ in range(2):
                got = sess.run(None, feed)
                assert len(got) == len(want)
                for g, w in zip(got, want):
                    assert isinstance(g, np.ndarray) and g.dtype == w.dtype, (g.dtype, w.dtype)
                    np.testing.assert_array_equal(g, w)
    steps = _steps(sess)
    assert [p["op"].split("-")[0] for p in steps] == [op], sess.placement()
    assert steps[0]["device"] == provider, sess.placement()
    plan_steps = [s for s in sess.stats()["plans"][-1]["steps"] if not s["copy"]]
    assert plan_steps[0]["kernel"].startswith(KERNELS[op]), plan_steps
    assert not plan_steps[0]["generic"], plan_steps
    return sess


both = pytest.mark.parametrize("provider", ["cuda", "cpu"])


# -- GatherElements ------------------------------------------------------------------------------
@both
@pytest.mark.parametrize(
    "elem, idx_dt, shape, axis, m",
    [
        (F, np.int64, (3, 4, 5), 1, 2),
        (F16, np.int32, (2, 6), -1, 9),  # more indices than the axis: repeats
        (B, np.int64, (7,), 0, 3),
        (I8, np.int32, (2, 3, 2, 4), 0, 4),
    ],
)
def test_gather_elements(provider, elem, idx_dt, shape, axis, m):
    a = axis % len(shape)
    ishape = shape[:a] + (m,) + shape[a + 1 :]
    ie = I64 if idx_dt == np.int64 else I32
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis)
    model = _model(node, [_io("x", elem, shape), _io("i", ie, ishape)], [_io("y", elem, ishape)])
    rng = np.random.default_rng(len(shape) * 10 + m)
    feeds = [
        {"x": _data(rng, shape, elem), "i": _indices(rng, ishape, shape[a], idx_dt)}
        for _ in range(2)
    ]
    _check(model, feeds, provider, "GatherElements")


@both
def test_gather_elements_with_constant_indices(provider):
    # constant indices are checked once at planning; the device call then reads no flag
    rng = np.random.default_rng(11)
    idx = _indices(rng, (4, 3), 5, np.int64)
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)
    model = _model(
        node,
        [_io("x", F, (4, 5))],
        [_io("y", F, (4, 3))],
        [numpy_helper.from_array(idx, "i")],
    )
    feeds = [{"x": _data(rng, (4, 5), F)} for _ in range(2)]
    _check(model, feeds, provider, "GatherElements")


# -- ScatterElements / Scatter -------------------------------------------------------------------
@both
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize(
    "elem, idx_dt, shape, axis, m",
    [
        (F, np.int64, (3, 4, 5), 1, 6),  # more updates than the axis: duplicates
        (I32, np.int32, (6, 3), -2, 4),
        (F64, np.int64, (9,), 0, 12),
    ],
)
def test_scatter_elements(provider, reduction, elem, idx_dt, shape, axis, m):
    a = axis % len(shape)
    ishape = shape[:a] + (m,) + shape[a + 1 :]
    ie = I64 if idx_dt == np.int64 else I32
    rng = np.random.default_rng(len(shape) * 7 + m)
    if reduction == "none":
        # a plain scatter's targets must not repeat (the spec leaves the winner open): a
        # permutation of the axis per column
        m = min(m, shape[a])
        ishape = shape[:a] + (m,) + shape[a + 1 :]
        perm = np.argsort(rng.random(shape), axis=a)
        idx = np.take(perm, np.arange(m), axis=a)
        idx = np.where(rng.random(ishape) < 0.5, idx - shape[a], idx).astype(idx_dt)
    else:
        idx = _indices(rng, ishape, shape[a], idx_dt)
    node = helper.make_node(
        "ScatterElements", ["x", "i", "u"], ["y"], axis=axis, reduction=reduction
    )
    model = _model(
        node,
        [_io("x", elem, shape), _io("i", ie, ishape), _io("u", elem, ishape)],
        [_io("y", elem, shape)],
    )
    feeds = []
    for _ in range(2):
        x, u = _data(rng, shape, elem, small=True), _data(rng, ishape, elem, small=True)
        feeds.append({"x": x, "i": idx, "u": u})
        idx = np.flip(idx, axis=a).copy()  # a second feed: other targets per position
    _check(model, feeds, provider, "ScatterElements")


@both
@pytest.mark.parametrize("elem", [F16, B])
def test_scatter_elements_moves_any_width(provider, elem):
    rng = np.random.default_rng(21)
    idx = np.array([[1, -4], [0, 3], [-1, 2]], np.int64)  # distinct per row
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1)
    model = _model(
        node,
        [_io("x", elem, (3, 4)), _io("i", I64, (3, 2)), _io("u", elem, (3, 2))],
        [_io("y", elem, (3, 4))],
        opset=13,
    )
    feeds = [{"x": _data(rng, (3, 4), elem), "i": idx, "u": _data(rng, (3, 2), elem)}]
    _check(model, feeds, provider, "ScatterElements")


@both
def test_legacy_scatter(provider):
    rng = np.random.default_rng(22)
    idx = np.array([[2, -1, 0]], np.int64)
    node = helper.make_node("Scatter", ["x", "i", "u"], ["y"], axis=1)
    model = _model(
        node,
        [_io("x", F, (1, 5)), _io("i", I64, (1, 3)), _io("u", F, (1, 3))],
        [_io("y", F, (1, 5))],
        opset=9,
    )
    feeds = [{"x": _data(rng, (1, 5), F), "i": idx, "u": _data(rng, (1, 3), F)}]
    _check(model, feeds, provider, "Scatter")


@both
def test_scatter_writes_over_its_dying_data(provider):
    # data made by an earlier node dies at the scatter: the output takes its buffer (no copy)
    rng = np.random.default_rng(23)
    nodes = [
        helper.make_node("Neg", ["x"], ["t"]),
        helper.make_node("ScatterND", ["t", "i", "u"], ["y"], reduction="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [_io("x", F, (5, 3)), _io("i", I64, (4, 1)), _io("u", F, (4, 3))],
        [_io("y", F, (5, 3))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    ref = _reference(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        sess = onnxjit.InferenceSession(model.SerializeToString(), providers=PROVIDERS[provider])
        for _ in range(2):
            feed = {
                "x": _data(rng, (5, 3), F, small=True),
                "i": _indices(rng, (4, 1), 5, np.int64),
                "u": _data(rng, (4, 3), F, small=True),
            }
            for _ in range(2):
                np.testing.assert_array_equal(sess.run(None, feed)[0], ref.run(None, feed)[0])
    steps = sess.stats()["plans"][-1]["steps"]
    steps = [s for s in steps if s["op_type"] == "ScatterND" and not s["copy"]]
    assert steps[0]["in_place"] and not steps[0]["generic"], steps
    assert steps[0]["device"] == provider, steps


# -- GatherND ------------------------------------------------------------------------------------
@both
@pytest.mark.parametrize(
    "elem, idx_dt, shape, lead, k, batch, opset",
    [
        (F, np.int64, (4, 3, 5), (2, 3), 2, 0, 13),  # rows of the last axis
        (I32, np.int32, (2, 3, 4), (2, 5), 1, 1, 13),  # one batch axis
        (F16, np.int64, (3, 4), (6,), 2, 0, 11),  # whole elements, opset 11 (no batch_dims)
        (B, np.int32, (2, 2, 3, 2), (2, 2, 1), 1, 2, 13),  # two batch axes
    ],
)
def test_gather_nd(provider, elem, idx_dt, shape, lead, k, batch, opset):
    rng = np.random.default_rng(sum(shape) + k + batch)
    ie = I64 if idx_dt == np.int64 else I32
    ishape = shape[:batch] + lead[batch:] + (k,) if batch else lead + (k,)
    out = ishape[:-1] + shape[batch + k :]
    attrs = {"batch_dims": batch} if opset >= 12 else {}
    node = helper.make_node("GatherND", ["x", "i"], ["y"], **attrs)
    model = _model(
        node, [_io("x", elem, shape), _io("i", ie, ishape)], [_io("y", elem, out)], opset=opset
    )
    sizes = shape[batch : batch + k]
    feeds = [
        {"x": _data(rng, shape, elem), "i": _nd_indices(rng, ishape[:-1], sizes, idx_dt)}
        for _ in range(2)
    ]
    _check(model, feeds, provider, "GatherND")


# -- ScatterND -----------------------------------------------------------------------------------
@both
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize(
    "elem, idx_dt, shape, rows, k",
    [
        (F, np.int64, (4, 3, 2), 3, 1),  # slices of two axes
        (I32, np.int32, (3, 4, 2), 5, 2),  # rows of the last axis
        (F64, np.int64, (2, 3), 4, 2),  # single elements
    ],
)
def test_scatter_nd(provider, reduction, elem, idx_dt, shape, rows, k):
    rng = np.random.default_rng(sum(shape) * 3 + rows + k)
    ie = I64 if idx_dt == np.int64 else I32
    sizes = shape[:k]
    if reduction == "none":
        rows = min(rows, int(np.prod(sizes)))
    ushape = (rows,) + shape[k:]
    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction=reduction)
    model = _model(
        node,
        [_io("x", elem, shape), _io("i", ie, (rows, k)), _io("u", elem, ushape)],
        [_io("y", elem, shape)],
    )
    feeds = []
    for _ in range(2):
        if reduction == "none":
            idx = _unique_rows(rng, rows, sizes, idx_dt)
        else:
            idx = _nd_indices(rng, (rows,), sizes, idx_dt)
        x, u = _data(rng, shape, elem, small=True), _data(rng, ushape, elem, small=True)
        feeds.append({"x": x, "i": idx, "u": u})
    _check(model, feeds, provider, "ScatterND")


@both
def test_scatter_nd_opset_11_with_float16(provider):
    rng = np.random.default_rng(31)
    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"])
    model = _model(
        node,
        [_io("x", F16, (4, 3)), _io("i", I64, (2, 1)), _io("u", F16, (2, 3))],
        [_io("y", F16, (4, 3))],
        opset=11,
    )
    idx = np.array([[-1], [1]], np.int64)
    feeds = [{"x": _data(rng, (4, 3), F16), "i": idx, "u": _data(rng, (2, 3), F16)}]
    _check(model, feeds, provider, "ScatterND")


# -- OneHot --------------------------------------------------------------------------------------
@both
@pytest.mark.parametrize(
    "idx_dt, shape, axis, depth, values",
    [
        (np.int64, (3, 4), -1, 5, np.array([0.0, 1.0], np.float32)),
        (np.int32, (2, 3), 0, 4, np.array([-3, 7], np.int64)),
        (np.int64, (5,), 1, 3, np.array([2.5, -1.5], np.float16)),
        (np.int32, (2, 2, 3), 1, 6, np.array([0, 1], np.int8)),
    ],
)
def test_one_hot(provider, idx_dt, shape, axis, depth, values):
    rng = np.random.default_rng(depth + len(shape))
    ie = I64 if idx_dt == np.int64 else I32
    ve = {np.float32: F, np.int64: I64, np.float16: F16, np.int8: I8}[values.dtype.type]
    r = len(shape) + 1
    a = axis % r
    out = shape[:a] + (depth,) + shape[a:]
    node = helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=axis)
    model = _model(
        node,
        [_io("i", ie, shape)],
        [_io("y", ve, out)],
        [
            numpy_helper.from_array(np.array(depth, np.int64), "d"),
            numpy_helper.from_array(values, "v"),
        ],
    )
    # indices outside [-depth, depth) too: their column stays off
    feeds = [{"i": rng.integers(-depth - 2, depth + 2, shape).astype(idx_dt)} for _ in range(2)]
    _check(model, feeds, provider, "OneHot")


# -- bad indices ---------------------------------------------------------------------------------
def _bad_cases():
    """``(op, model, good feed, bad feed, message)`` per op."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    cases = []
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)
    model = _model(node, [_io("x", F, (3, 4)), _io("i", I32, (3, 2))], [_io("y", F, (3, 2))])
    good = np.array([[0, -4], [3, 1], [2, 2]], np.int32)
    bad = np.array([[0, 1], [3, -5], [4, 2]], np.int32)
    cases.append(("GatherElements", model, {"x": x, "i": good}, {"x": x, "i": bad},
                  r"indices\[1, 1\] = -5 is out of range for axis 1 of size 4"))  # fmt: skip
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=0, reduction="add")
    model = _model(
        node,
        [_io("x", F, (3, 4)), _io("i", I64, (2, 4)), _io("u", F, (2, 4))],
        [_io("y", F, (3, 4))],
    )
    u = np.ones((2, 4), np.float32)
    good = np.array([[0, 1, 2, -1], [2, 2, 0, -3]], np.int64)
    bad = np.array([[0, 1, 2, -1], [2, 3, 0, 7]], np.int64)
    cases.append(("ScatterElements", model, {"x": x, "i": good, "u": u},
                  {"x": x, "i": bad, "u": u},
                  r"indices\[1, 1\] = 3 is out of range for axis 0 of size 3"))  # fmt: skip
    node = helper.make_node("GatherND", ["x", "i"], ["y"])
    model = _model(node, [_io("x", F, (3, 4)), _io("i", I64, (3, 2))], [_io("y", F, (3,))])
    good = np.array([[0, 3], [-3, -4], [2, 0]], np.int64)
    bad = np.array([[0, 3], [1, 4], [5, 0]], np.int64)
    msg = r"indices\[1, 1\] = 4 is out of range for an indexed axis of size 4"
    cases.append(("GatherND", model, {"x": x, "i": good}, {"x": x, "i": bad}, msg))
    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"])
    model = _model(
        node,
        [_io("x", F, (3, 4)), _io("i", I32, (2, 1)), _io("u", F, (2, 4))],
        [_io("y", F, (3, 4))],
    )
    u = np.ones((2, 4), np.float32)
    good = np.array([[-1], [0]], np.int32)
    bad = np.array([[-4], [0]], np.int32)
    msg = r"indices\[0, 0\] = -4 is out of range for an indexed axis of size 3"
    cases.append(("ScatterND", model, {"x": x, "i": good, "u": u}, {"x": x, "i": bad, "u": u}, msg))
    return cases


_BAD = _bad_cases()


@both
@pytest.mark.parametrize("case", range(len(_BAD)), ids=[c[0] for c in _BAD])
def test_a_bad_index_raises_the_implementations_error(provider, case):
    op, model, good, bad, message = _BAD[case]
    ref = _reference(model)
    data = model.SerializeToString()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sess = onnxjit.InferenceSession(data, providers=PROVIDERS[provider])
        # a bad index on the planning run, then on the plan's run: the session stays usable
        with pytest.raises(InvalidArgumentError, match=message):
            sess.run(None, bad)
        for _ in range(2):
            np.testing.assert_array_equal(sess.run(None, good)[0], ref.run(None, good)[0])
        with pytest.raises(InvalidArgumentError, match=message) as raised:
            sess.run(None, bad)
        np.testing.assert_array_equal(sess.run(None, good)[0], ref.run(None, good)[0])
    steps = _steps(sess)
    assert [(p["op"].split("-")[0], p["device"]) for p in steps] == [(op, provider)], steps
    # the same error (type and text) on the device as on the CPU (the message matched above
    # is the implementation's text)
    if provider == "cuda":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            cpu = onnxjit.InferenceSession(data, providers=CPU)
        with pytest.raises(Exception) as on_cpu:
            cpu.run(None, bad)
        assert type(on_cpu.value) is type(raised.value)
        assert str(on_cpu.value) == str(raised.value)


@both
def test_constant_indices_out_of_range_raise_at_the_planning_run(provider):
    # checked once: the node is left to its implementation, which raises its error
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=0)
    model = _model(
        node,
        [_io("x", F, (3, 2))],
        [_io("y", F, (1, 2))],
        [numpy_helper.from_array(np.array([[1, 3]], np.int64), "i")],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sess = onnxjit.InferenceSession(model.SerializeToString(), providers=PROVIDERS[provider])
        with pytest.raises(InvalidArgumentError, match=r"indices\[0, 1\] = 3 is out of range"):
            sess.run(None, {"x": np.zeros((3, 2), np.float32)})


# -- compile-only through NVVM -------------------------------------------------------------------
_COMPILE = textwrap.dedent(
    """
    import os, sys
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    sys.path.insert(0, {root!r})
    from numba import cuda, types as t
    from onnxjit.kernels.cuda import tensor as g

    def arr(dt, nd):
        return t.Array(dt, nd, "C")

    i32, i64 = t.int32, t.int64
    count = 0
    def ptx(fn, sig):
        global count
        cuda.compile_ptx(fn.py_func, sig, cc=(8, 0))
        count += 1

    # the lowerings hand int32 indices to the device kernels as they are
    flag = arr(i64, 1)
    for dt in (t.uint8, t.uint16, t.uint32, t.uint64):
        a3 = arr(dt, 3)
        ptx(g._gather_elements_k, (a3, arr(i32, 3), a3, flag))
        ptx(g._gather_nd_k, (a3, arr(i32, 3), t.UniTuple(i64, 2), a3, flag))
        ptx(g._one_hot_k, (arr(i32, 2), i64, dt, dt, a3))
    # reductions take data as it is: the narrow integer types too
    for dt in (t.int8, t.int16, t.uint16, t.uint32, t.float32):
        ptx(g._scatter_elements_k, (arr(dt, 3), arr(i32, 3), arr(dt, 3), i64, flag))
        ptx(g._scatter_nd_k, (arr(dt, 2), arr(i32, 2), t.UniTuple(i64, 1), arr(dt, 2), i64, flag))
    print("compiled", count)
    """
)


def test_kernels_compile_through_nvvm_with_int32_indices():
    out = run_without_simulator(["-c", _COMPILE.format(root=ROOT)])
    assert "compiled 22" in out, out
