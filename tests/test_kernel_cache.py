"""The on-disk kernel cache across processes (issue 5): a second process compiles nothing; a
damaged entry, an unwritable folder and two processes filling one folder at once all end in
correct results.

Each case runs the same model in fresh Python processes against a cache folder of its own
(``ONNXJIT_CACHE_DIR`` under tmp_path, so the suite's own cache is never touched) and checks
the outputs against onnx's ReferenceEvaluator. The model covers the kinds of cached code: a
hand-written kernel (GEMM with a fused epilogue, Softmax), a generated elementwise kernel
(a fused chain, its source written under the cache folder) and a pool kernel large enough to
run on two threads (its generated C entry point is cached too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, sys, warnings
warnings.simplefilter("always")
import numpy as np
import onnxjit
model, feeds_path, out_path = sys.argv[1:4]
feeds = dict(np.load(feeds_path))
so = onnxjit.SessionOptions()
so.intra_op_num_threads = 2
sess = onnxjit.InferenceSession(model, so)
outs = sess.run(None, feeds)
np.savez(out_path, *outs)
st = sess.stats()
print("STATS " + json.dumps({
    "compiles": onnxjit.compile_count(),
    "kernels_compiled": st["kernels_compiled"],
    "kernels_loaded": st["kernels_loaded"],
    "loaded": sorted({k["name"] for k in st["kernels"] if k["origin"] == "loaded"}),
    "compiled": sorted({k["name"] for k in st["kernels"] if k["origin"] == "compiled"}),
    "cache_dir": st["cache_dir"],
    "scipy_linalg": "scipy.linalg" in sys.modules,
    "blas_threads": sorted({i["num_threads"] for i in __import__("threadpoolctl").threadpool_info()
                            if i["user_api"] == "blas"}),
}))
"""


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    d_in, d_h = 48, 64
    inits = [
        numpy_helper.from_array(rng.standard_normal((d_in, d_h)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(d_h).astype(np.float32), "b"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Softmax", ["r"], ["y"], axis=-1),
        # an elementwise chain over a tensor large enough for the thread pool
        helper.make_node("Mul", ["big", "half"], ["t0"]),
        helper.make_node("Tanh", ["t0"], ["t1"]),
        helper.make_node("Add", ["t1", "big"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "cached",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", d_in]),
            helper.make_tensor_value_info("big", TensorProto.FLOAT, ["k"]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", d_h]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["k"]),
        ],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cache-case")
    model = _model()
    onnx.save(model, folder / "model.onnx")
    rng = np.random.default_rng(3)
    feeds = {
        "x": rng.standard_normal((5, 48)).astype(np.float32),
        "big": rng.standard_normal(1 << 17).astype(np.float32),
    }
    np.savez(folder / "feeds.npz", **feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    return folder, want


def _spawn(folder: Path, cache: Path, tag: str, preexec=None) -> subprocess.Popen:
    env = dict(os.environ)
    env["ONNXJIT_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    args = [folder / "model.onnx", folder / "feeds.npz", folder / f"out-{tag}.npz"]
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, *map(str, args)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec,
    )


def _finish(
    proc: subprocess.Popen, folder: Path, tag: str, want, atol: float = 1e-6
) -> tuple[dict, str]:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    stats = json.loads(next(ln[6:] for ln in out.splitlines() if ln.startswith("STATS ")))
    got = np.load(folder / f"out-{tag}.npz")
    for i, w in enumerate(want):
        np.testing.assert_allclose(got[f"arr_{i}"], w, rtol=1e-5, atol=atol)
    return stats, err


def _child(
    folder: Path, cache: Path, tag: str, want, preexec=None, atol: float = 1e-6
) -> tuple[dict, str]:
    return _finish(_spawn(folder, cache, tag, preexec), folder, tag, want, atol)


def test_second_process_loads_every_kernel_without_compiling(case, tmp_path):
    folder, want = case
    first, _ = _child(folder, tmp_path / "cache", "first", want)
    assert first["compiles"] > 0 and first["kernels_compiled"] > 0
    # the hand-written GEMM, the softmax and the generated chain were among them
    names = " ".join(first["compiled"])
    assert "gemm" in names and "softmax" in names and "gen" in names, names
    # and the pool workers' loop, brought in by the caller for the session (a worker thread
    # compiling it could be cut off at exit before saving it)
    assert "worker_loop" in names, names
    second, _ = _child(folder, tmp_path / "cache", "second", want)
    assert second["compiles"] == 0, second
    assert second["kernels_compiled"] == 0
    assert second["loaded"] == first["compiled"], (second["loaded"], first["compiled"])
    assert second["cache_dir"] == first["cache_dir"]
    assert Path(first["cache_dir"]).parent == tmp_path / "cache"


def test_damaged_entries_are_compiled_again_with_a_warning(case, tmp_path):
    folder, want = case
    cache = tmp_path / "cache"
    first, _ = _child(folder, cache, "first", want)
    numba_dir = Path(first["cache_dir"]) / "numba"
    data = sorted(numba_dir.rglob("*.nbc"))
    index = sorted(numba_dir.rglob("*.nbi"))
    assert data and index
    for i, f in enumerate(data):  # half the entries truncated, half overwritten with junk
        raw = f.read_bytes()
        f.write_bytes(raw[: len(raw) // 3] if i % 2 else b"\x80junk" * 7)
    index[0].write_bytes(index[0].read_bytes()[:5])  # and one index cut short
    again, err = _child(folder, cache, "again", want)
    assert again["compiles"] > 0
    assert "onnxjit: the kernel cache entry of" in err, err[-2000:]
    # the damaged entries were replaced: a third process compiles nothing
    third, _ = _child(folder, cache, "third", want)
    assert third["compiles"] == 0, third


def test_cache_folder_that_cannot_be_created_falls_back_with_one_warning(case, tmp_path):
    folder, want = case
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    stats, err = _child(folder, blocker / "cache", "blocked", want)
    assert stats["compiles"] > 0
    assert err.count("cannot write the kernel cache") == 1, err[-2000:]
    assert not Path(stats["cache_dir"]).exists()  # the temporary folder is gone at exit
    assert blocker.read_text() == "a file where the cache folder should be"


def _drop_file_override() -> None:
    """In the child, before exec: take CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH out of the
    capability bounding set, so that even root obeys a folder's permission bits."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_read_only_cache_folder_falls_back_with_one_warning(case, tmp_path):
    folder, want = case
    cache = tmp_path / "ro"
    cache.mkdir()
    cache.chmod(0o555)
    preexec = None
    if os.geteuid() == 0:  # root writes anywhere unless it gives up the override
        if not sys.platform.startswith("linux"):
            pytest.skip("running as root off Linux: no way to make a folder read-only for it")
        preexec = _drop_file_override
    try:
        proc = _spawn(folder, cache, "ro", preexec)
    except subprocess.SubprocessError as exc:
        pytest.skip(f"running as root without CAP_SETPCAP, cannot drop CAP_DAC_OVERRIDE: {exc}")
    stats, err = _finish(proc, folder, "ro", want)
    assert stats["compiles"] > 0
    assert err.count("cannot write the kernel cache") == 1, err[-2000:]
    assert list(cache.iterdir()) == []  # nothing was written into the read-only folder


def test_two_processes_filling_one_cache_at_once(case, tmp_path):
    folder, want = case
    cache = tmp_path / "cache"
    procs = [_spawn(folder, cache, f"p{i}") for i in range(2)]
    results = [_finish(p, folder, f"p{i}", want) for i, p in enumerate(procs)]
    assert all(s["compiles"] > 0 or s["kernels_loaded"] > 0 for s, _ in results)
    for _, err in results:
        assert "kernel cache entry" not in err, err[-2000:]
    after, _ = _child(folder, cache, "after", want)
    assert after["compiles"] == 0, after
    # no temporary files left behind by the atomic writes
    leftovers = [p for p in cache.rglob("*") if p.is_file() and ".tmp" in p.name]
    assert leftovers == []


def test_cache_key_covers_helpers_generators_and_versions(tmp_path, monkeypatch):
    """Numba only notices a change of the file that defines a function; the folder key must
    change when an inlined helper (vecmath), a code generator or a version changes."""
    from onnxjit import jitcache

    sources = jitcache._kernel_sources()
    names = {p.name for p in sources}
    assert {"vecmath.py", "scalar.py", "_jit.py", "elementwise.py", "pool.py"} <= names
    copies = []
    for i, p in enumerate(sources):
        c = tmp_path / f"{i}-{p.name}"
        c.write_bytes(p.read_bytes())
        copies.append(c)
    monkeypatch.setattr(jitcache, "_kernel_sources", lambda: copies)
    base = jitcache.cache_key()
    assert jitcache.cache_key() == base  # stable
    helper_copy = next(c for c in copies if c.name.endswith("-vecmath.py"))
    helper_copy.write_bytes(helper_copy.read_bytes() + b"\n# a change\n")
    changed = jitcache.cache_key()
    assert changed != base
    import numba

    monkeypatch.setattr(numba, "__version__", numba.__version__ + ".post1")
    assert jitcache.cache_key() not in (base, changed)


def _transposed_b_model() -> onnx.ModelProto:
    # Gemm with transB = 1 and B a graph input: the product goes to BLAS (a transposed B that
    # is not a weight cannot be packed for the micro-kernel)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "wt"], ["y"], transB=1)],
        "blas",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 48]),
            helper.make_tensor_value_info("wt", TensorProto.FLOAT, [64, 48]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def test_warm_start_loads_scipy_blas_only_for_a_blas_path_and_holds_it_at_one_thread(
    case, tmp_path
):
    """Loading kernels from the cache does not import scipy.linalg (Numba's full context
    refresh, which does, is skipped for loads); a model whose product goes to SciPy's BLAS
    loads it before the kernel runs, at one thread like every other BLAS."""
    folder, want = case
    blas = tmp_path / "blas"
    blas.mkdir()
    model = _transposed_b_model()
    onnx.save(model, blas / "model.onnx")
    rng = np.random.default_rng(5)
    feeds = {
        "x": rng.standard_normal((300, 48)).astype(np.float32),
        "wt": rng.standard_normal((64, 48)).astype(np.float32),
    }
    np.savez(blas / "feeds.npz", **feeds)
    blas_want = ReferenceEvaluator(model).run(None, feeds)
    # float32 sums of 48 products of standard normal values: rounding errors of ~1e-6 where
    # the sum cancels to near 0, whichever order BLAS and the reference add in
    atol = 1e-5
    cache = tmp_path / "cache"
    _child(folder, cache, "cold", want)
    cold_blas, _ = _child(blas, cache, "cold", blas_want, atol=atol)
    assert cold_blas["blas_threads"] == [1], cold_blas
    plain, _ = _child(folder, cache, "warm", want)
    assert plain["compiles"] == 0 and not plain["scipy_linalg"], plain
    assert plain["blas_threads"] == [1], plain  # numpy's own BLAS
    with_blas, _ = _child(blas, cache, "warm", blas_want, atol=atol)
    assert with_blas["compiles"] == 0 and with_blas["scipy_linalg"], with_blas
    assert with_blas["blas_threads"] == [1], with_blas
