"""MatMulInteger on the micro-kernel's int16-pair mode is integer arithmetic, exactly.

Oracle: numpy's int64 matmul of the zero-point-shifted operands, wrapped to int32 (what int32
accumulation gives; it differs from int64 only where a sum leaves the int32 range). The
shapes aim at the kernel's edges: one row, an inner length that is odd or shorter than a pair,
rows and columns that are not multiples of the register block, batched A, inner lengths of
several passes with the extreme values of each type (every product at its largest magnitude),
a sum past the int32 range; zero points absent, scalar, per row of A and per column of B; B a
constant (packed once) or fed at each run; one and two threads.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

import onnxjit

U8, I8 = np.uint8, np.int8
_ONNX_TYPE = {U8: TP.UINT8, I8: TP.INT8}


def _model(a_shape, a_dt, b, b_dt, azp_shape, bzp, b_const):
    inputs = [oh.make_tensor_value_info("a", _ONNX_TYPE[a_dt], list(a_shape))]
    inits = []
    if b_const:
        inits.append(nh.from_array(b, "b"))
    else:
        inputs.append(oh.make_tensor_value_info("b", _ONNX_TYPE[b_dt], list(b.shape)))
    names = ["a", "b", "", ""]
    if azp_shape is not None:
        names[2] = "azp"
        inputs.append(oh.make_tensor_value_info("azp", _ONNX_TYPE[a_dt], list(azp_shape)))
    if bzp is not None:
        names[3] = "bzp"
        if b_const:
            inits.append(nh.from_array(bzp, "bzp"))
        else:
            inputs.append(oh.make_tensor_value_info("bzp", _ONNX_TYPE[b_dt], list(bzp.shape)))
    while not names[-1]:
        names.pop()
    graph = oh.make_graph(
        [oh.make_node("MatMulInteger", names, ["y"])],
        "g",
        inputs,
        [oh.make_tensor_value_info("y", TP.INT32, [*a_shape[:-1], b.shape[1]])],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])


def _ints(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


def _extreme(rng, dtype, shape):
    """Only the type's smallest and largest values."""
    info = np.iinfo(dtype)
    return np.where(rng.random(shape) < 0.5, info.min, info.max).astype(dtype)


def _oracle(a, b, azp, bzp):
    av = a.astype(np.int64)
    if azp is not None:
        z = azp.astype(np.int64)
        av = av - (z.reshape(-1, 1) if z.size > 1 else z)
    bv = b.astype(np.int64) - (0 if bzp is None else bzp.astype(np.int64))
    return (av @ bv).astype(np.int32)  # wraps as int32 accumulation does


# (A shape, A type, B shape (k, n), B type, a_zero_point shape or None, b_zero_point shape or
# None, values: "random" or "extreme")
CASES = {
    "row_k1": ((1, 1), U8, (1, 1), I8, (), (), "random"),
    "row_k768": ((1, 768), U8, (768, 768), I8, (), (), "random"),
    "row_odd_k": ((1, 7), U8, (7, 5), U8, (), (5,), "random"),
    "odd_k_blocks": ((13, 33), I8, (33, 19), I8, None, (19,), "random"),
    "m_n_edges": ((7, 64), U8, (64, 37), I8, (7,), (), "random"),
    "one_column": ((9, 10), I8, (10, 1), U8, (), None, "random"),
    "batched": ((2, 5, 97), U8, (97, 50), I8, (5,), (50,), "random"),
    "wide_pool": ((40, 300), U8, (300, 200), U8, (), (200,), "random"),
    "k4096_extreme_u8s8": ((6, 4096), U8, (4096, 33), I8, (), (), "extreme"),
    "k4097_extreme_u8u8": ((17, 4097), U8, (4097, 18), U8, (), (18,), "extreme"),
    "k4095_extreme_s8s8": ((3, 4095), I8, (4095, 16), I8, (3,), (16,), "extreme"),
    # 40001 * 255 * 255 is past 2**31: the sums wrap as int32 accumulation does
    "int32_wrap": ((2, 40001), U8, (40001, 3), I8, None, (), "wrap"),
}


def _operands(case):
    a_shape, a_dt, b_shape, b_dt, azp_shape, bzp_shape, values = CASES[case]
    rng = np.random.default_rng(sorted(CASES).index(case))
    if values == "wrap":  # every product 255 * 255: A all 255, B all -128 minus 127
        a = np.full(a_shape, 255, a_dt)
        b = np.full(b_shape, -128, b_dt)
        return a, b, None, np.array(127, b_dt)
    make = _extreme if values == "extreme" else _ints
    a = make(rng, a_dt, a_shape)
    b = make(rng, b_dt, b_shape)
    # extreme cases: zero points at the other end, so that the shifted values reach +-255
    azp = None if azp_shape is None else make(rng, a_dt, azp_shape)
    bzp = None if bzp_shape is None else make(rng, b_dt, bzp_shape)
    return a, b, azp, bzp


@pytest.mark.parametrize("b_const", [True, False], ids=["b_const", "b_fed"])
@pytest.mark.parametrize("case", list(CASES))
def test_matmul_integer_is_exact(case, b_const):
    a, b, azp, bzp = _operands(case)
    azp_shape = CASES[case][4]
    model = _model(a.shape, a.dtype.type, b, b.dtype.type, azp_shape, bzp, b_const)
    feeds = {"a": a}
    if not b_const:
        feeds["b"] = b
        if bzp is not None:
            feeds["bzp"] = bzp
    if azp is not None:
        feeds["azp"] = azp
    want = _oracle(a, b, azp, bzp)
    if CASES[case][6] == "wrap":
        assert np.abs(a.astype(np.int64) @ (b.astype(np.int64) - 127)).min() > 2**31  # it wraps
    for threads in (1, 2):
        so = onnxjit.SessionOptions()
        so.intra_op_num_threads = threads
        sess = onnxjit.InferenceSession(model.SerializeToString(), so)
        got = sess.run(None, feeds)[0]
        assert got.dtype == np.int32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        got = sess.run(None, feeds)[0]  # a second run: the packed B and scratch reused
        np.testing.assert_array_equal(got, want)


def test_matmul_integer_runs_the_pair_kernel():
    """On x86 the product runs on the int16-pair kernel (elsewhere on exact float32 blocks)."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("the int16-pair kernel is x86 only (pmaddwd); other CPUs use float32 blocks")
    a, b, azp, bzp = _operands("m_n_edges")
    model = _model(a.shape, U8, b, I8, (7,), bzp, True)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    sess.run(None, {"a": a, "azp": azp})
    kernels = [s["kernel"] for plan in sess.stats()["plans"] for s in plan["steps"]]
    assert kernels == ["blas.igemm_pairs"]
