"""The thread setting reaches Numba and BLAS; new input sizes compile nothing (workload D1)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_info

import onnxjit
from onnxjit.backends.cpu import threads as cpu_threads


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


def _blas_thread_counts() -> list[int]:
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def test_intra_op_num_threads_sets_the_pool_and_blas_stays_single_threaded():
    m = _mlp_model()
    x = np.random.default_rng(2).standard_normal((8, 64)).astype(np.float32)
    results = []
    for threads in (1, 2, 0):
        so = onnxjit.SessionOptions()
        so.intra_op_num_threads = threads
        sess = onnxjit.InferenceSession(m.SerializeToString(), so)
        results.append(sess.run(None, {"x": x})[0])
        want = threads or cpu_threads.default_threads()
        assert cpu_threads.current() == min(want, cpu_threads.available_cores())
        # BLAS runs inside onnxjit's pool, one thread per call
        assert _blas_thread_counts() and set(_blas_thread_counts()) == {1}
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(results[0], results[2], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batch", [8, 4096])
def test_gemms_split_over_the_pool_above_the_size_threshold(monkeypatch, batch):
    """Large products are tiled over the pool's threads, small ones run on the caller alone;
    both agree with onnxruntime."""
    from onnxjit.backends.cpu import pool as cpu_pool

    if cpu_threads.available_cores() < 2:
        pytest.skip("needs two cores for a two-thread setting")
    kernels = []
    real = cpu_pool._launch

    def spy(entry, kernel, args, threads):
        kernels.append(kernel.__name__)
        return real(entry, kernel, args, threads)

    monkeypatch.setattr(cpu_pool, "_launch", spy)
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = 2
    m = _mlp_model()
    sess = onnxjit.InferenceSession(m.SerializeToString(), so)
    x = np.random.default_rng(3).standard_normal((batch, 64)).astype(np.float32)
    got = sess.run(None, {"x": x})[0]
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # 8 x 64 x 96 multiply-adds stay on the caller; 4096 rows are split (other kernels of
    # the model, the GELU chain or the LayerNorm rows, may take the pool too)
    gemms = [k for k in kernels if k.startswith("gemm")]
    assert gemms == ([] if batch == 8 else ["gemm_ks_par", "gemm_ks_par"]), kernels
    assert set(_blas_thread_counts()) == {1}


def test_second_run_calls_only_kernels_of_the_first():
    # A node's first run goes through its implementation, the later ones through the fast
    # path it prepared; both must use the same kernels, or the second run compiles (with an
    # empty cache) what the first did not: here an embedding lookup the size of BERT's (the
    # implementation took the pool kernel, the lowering the serial one) and a Transpose
    # (numpy in the implementation, the tiled kernel in the lowering).
    table = np.random.default_rng(0).standard_normal((1000, 256)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids"], ["rows"]),
            helper.make_node("Transpose", ["rows"], ["y"], perm=[1, 0]),
        ],
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 128])],
        [numpy_helper.from_array(table, "table")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    opts = onnxjit.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = onnxjit.InferenceSession(model.SerializeToString(), opts)
    ids = np.random.default_rng(1).integers(0, 1000, 128)

    def used() -> set:
        return {(k["name"], k["signature"]) for k in sess.stats()["kernels"]}

    for run in range(3):
        got = sess.run(None, {"ids": ids})[0]
        np.testing.assert_array_equal(got, table[ids].T)
        if run == 0:
            first = used()
    assert used() == first
