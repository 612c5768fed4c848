"""The thread setting reaches Numba and BLAS; new input sizes compile nothing (workload D1)."""

from __future__ import annotations

import os
import sys

import numba
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_info

import onnxjit
import onnxjit.threads


def _mlp_model(seq_dim: bool = False):
    """MLP with a GELU chain, LayerNorm and Softmax over a dynamic batch (and sequence)."""
    rng = np.random.default_rng(0)
    d_in, d_h = 64, 96
    shape_in = ["batch", "seq", d_in] if seq_dim else ["batch", d_in]
    inits = [
        numpy_helper.from_array(rng.standard_normal((d_in, d_h)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(d_h).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((d_h, d_in)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.ones(d_in, np.float32), "gamma"),
        numpy_helper.from_array(np.zeros(d_in, np.float32), "beta"),
        numpy_helper.from_array(np.array(1.4142135, np.float32), "s2"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h"]),
        helper.make_node("Div", ["h", "s2"], ["g0"]),
        helper.make_node("Erf", ["g0"], ["g1"]),
        helper.make_node("Add", ["g1", "one"], ["g2"]),
        helper.make_node("Mul", ["h", "g2"], ["g3"]),
        helper.make_node("Mul", ["g3", "half"], ["g"]),
        helper.make_node("MatMul", ["g", "w2"], ["o"]),
        helper.make_node("Add", ["o", "x"], ["r"]),
        helper.make_node("LayerNormalization", ["r", "gamma", "beta"], ["n"], axis=-1),
        helper.make_node("Softmax", ["n"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape_in)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape_in)],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("seq_dim", [False, True])
def test_new_sizes_compile_nothing_after_warmup(seq_dim):
    m = _mlp_model(seq_dim)
    sess = onnxjit.InferenceSession(m.SerializeToString())
    ref = ort.InferenceSession(m.SerializeToString())
    rng = np.random.default_rng(1)

    def shape(n):
        return (n, 3, 64) if seq_dim else (n, 64)

    # warm-up: batch 1 (size-1 dims), a small batch and one above the parallel threshold
    for n in (1, 2, 12000):
        sess.run(None, {"x": rng.standard_normal(shape(n)).astype(np.float32)})
    before = onnxjit.compile_count()
    for n in (3, 5, 7, 16, 33, 64, 100, 129, 1000, 15000):
        x = rng.standard_normal(shape(n)).astype(np.float32)
        got = sess.run(None, {"x": x})[0]
        np.testing.assert_allclose(got, ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert onnxjit.compile_count() == before


def _blas_threads() -> int:
    return next(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


def _numpy_blas_threads() -> int:
    """The thread count of the BLAS inside numpy's install (scipy's copy may be loaded too)."""
    home = os.path.dirname(os.path.realpath(np.__file__))
    own = [
        i["num_threads"]
        for i in threadpool_info()
        if i["user_api"] == "blas" and os.path.realpath(i["filepath"]).startswith(home)
    ]
    return own[0] if own else _blas_threads()  # numpy linked to a BLAS outside its install


def test_intra_op_num_threads_sets_numba_and_blas():
    m = _mlp_model()
    x = np.random.default_rng(2).standard_normal((8, 64)).astype(np.float32)
    results = []
    for threads in (1, 2, 0):
        so = onnxjit.SessionOptions()
        so.intra_op_num_threads = threads
        sess = onnxjit.InferenceSession(m.SerializeToString(), so)
        results.append(sess.run(None, {"x": x})[0])
        want = threads or onnxjit.threads.default_threads()
        want = min(want, numba.config.NUMBA_NUM_THREADS)
        assert numba.get_num_threads() == want
        assert _blas_threads() == want
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(results[0], results[2], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("small", [True, False])
def test_small_gemms_run_with_single_threaded_blas_and_the_setting_comes_back(monkeypatch, small):
    """GEMMs under SINGLE_THREAD_MACS see numpy's BLAS at one thread, larger ones and ops
    that call BLAS themselves see the session's count, which is also back after the run."""
    import onnxjit.ops.fused_gemm as fg

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs Numba's pool to have two threads to tell 1 from the setting")
    if not small:
        monkeypatch.setattr(fg, "SINGLE_THREAD_MACS", 0)
    seen = []  # from FusedGemm's matmul_into
    direct = []  # from ops that call BLAS themselves (the plain MatMul here)
    real = np.matmul

    def spy(*args, **kw):
        caller = sys._getframe(1).f_code.co_name
        (seen if caller == "matmul_into" else direct).append(_numpy_blas_threads())
        return real(*args, **kw)

    monkeypatch.setattr(fg.np, "matmul", spy)
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = 2
    m = _mlp_model()
    sess = onnxjit.InferenceSession(m.SerializeToString(), so)
    x = np.random.default_rng(3).standard_normal((8, 64)).astype(np.float32)
    got = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(
        got,
        ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0],
        rtol=1e-4,
        atol=1e-5,
    )
    assert seen and all(n == (1 if small else 2) for n in seen), seen
    assert direct and all(n == 2 for n in direct), direct
    assert _numpy_blas_threads() == 2
