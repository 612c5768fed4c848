"""Heavy load (issue 6, item 6): one session called from many threads at once.

8 threads x 200 runs on ONE session, with mixed batch sizes (one large enough for onnxjit's
thread pool), mixed output subsets and some deliberately bad feeds (wrong element type, wrong
rank, a ConstantOfShape over the session's allocation cap). Every good run must equal the
serial result bitwise, also after every thread has finished (no later run wrote into a returned
array); every bad run raises the expected onnxjit error; the process stays up. Then: a failed run
leaves the next good run bitwise identical, and a process forked after a run does not hang.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.errors import InvalidInputError, OnnxJitError, ResourceLimitError

F, I64 = TensorProto.FLOAT, TensorProto.INT64
THREADS, RUNS = 8, 200
BATCHES = (1, 2, 3, 5, 8, 17, 64, 2500)  # 2500 x 16 outputs: above the pool's threshold
LENGTHS = (0, 1, 4, 9)
SUBSETS = (None, ["y"], ["r"], ["z", "y"], ["r", "y", "z"], ["z"])
CAP = "1M"


def model() -> onnx.ModelProto:
    """y = Softmax(Relu(x @ W + b)), r = Relu(x @ W + b), z = ConstantOfShape(s) (float 0.5)."""
    rng = np.random.default_rng(61)
    w = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    half = numpy_helper.from_array(np.array([0.5], np.float32), "value")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
            helper.make_node("Add", ["m", "b"], ["a"], name="add"),
            helper.make_node("Relu", ["a"], ["r"], name="relu"),
            helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=-1),
            helper.make_node("ConstantOfShape", ["s"], ["z"], name="fill", value=half),
        ],
        "stress",
        [
            helper.make_tensor_value_info("x", F, ["N", 8]),
            helper.make_tensor_value_info("s", I64, [1]),
        ],
        [
            helper.make_tensor_value_info("y", F, ["N", 16]),
            helper.make_tensor_value_info("r", F, ["N", 16]),
            helper.make_tensor_value_info("z", F, ["L"]),
        ],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def session(m: onnx.ModelProto, threads: int = 2) -> onnxjit.InferenceSession:
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = threads
    so.add_session_config_entry("onnxjit.max_tensor_bytes", CAP)
    return onnxjit.InferenceSession(m.SerializeToString(), so)


XS = {n: np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32) for n in BATCHES}
NAMES = ["y", "r", "z"]


def feed(n: int, length: int) -> dict[str, np.ndarray]:
    return {"x": XS[n], "s": np.array([length], np.int64)}


# kind -> (feed, error class, needles)
BAD = {
    "dtype": (
        {"x": XS[3].astype(np.float64), "s": np.array([1], np.int64)},
        InvalidInputError,
        ("input 'x'", "expected element type tensor(float)", "found numpy float64"),
    ),
    "rank": (
        {"x": XS[8].reshape(2, 4, 8), "s": np.array([1], np.int64)},
        InvalidInputError,
        ("input 'x'", "expected rank 2", "found rank 3"),
    ),
    "cap": (
        {"x": XS[2], "s": np.array([1 << 28], np.int64)},
        ResourceLimitError,
        ("node 'fill' (ConstantOfShape", "over the per-tensor cap", "onnxjit.max_tensor_bytes"),
    ),
}


@pytest.fixture(scope="module")
def serial() -> dict[tuple[int, int], list[np.ndarray]]:
    """Every (batch, length) result of one session run serially, checked against
    onnxruntime (the session's own serial results are the bitwise reference)."""
    m = model()
    sess = session(m)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    out = {}
    for n in BATCHES:
        for length in LENGTHS:
            got = sess.run(None, feed(n, length))
            want = ref.run(None, feed(n, length))
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and g.shape == w.shape
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
            out[n, length] = [g.copy() for g in got]
    return out


def test_eight_threads_two_hundred_runs_one_session(serial) -> None:
    sess = session(model())
    start = threading.Barrier(THREADS)
    problems: list[str] = []
    kept: list[tuple[tuple[int, int], list[str], list[np.ndarray]]] = []
    counts = {"good": 0, "bad": 0}
    lock = threading.Lock()

    def worker(t: int) -> None:
        rng = np.random.default_rng(1000 + t)
        mine, good, bad = [], 0, 0
        start.wait()
        for i in range(RUNS):
            try:
                if i % 10 == t % 10:  # one run in ten is a bad feed, each thread its own
                    kind = ("dtype", "rank", "cap")[(i // 10 + t) % 3]
                    bad_feed, cls, needles = BAD[kind]
                    try:
                        sess.run(None, bad_feed)
                    except cls as e:
                        msg = str(e)
                        missing = [n for n in needles if n not in msg]
                        if missing:
                            problems.append(f"thread {t} run {i} {kind}: {missing} not in {msg}")
                    else:
                        problems.append(f"thread {t} run {i}: bad feed {kind} was accepted")
                    bad += 1
                    continue
                n = BATCHES[rng.integers(len(BATCHES))]
                length = LENGTHS[rng.integers(len(LENGTHS))]
                subset = SUBSETS[rng.integers(len(SUBSETS))]
                outs = sess.run(subset, feed(n, length))
                names = subset or NAMES
                want = serial[n, length]
                for name, got in zip(names, outs, strict=True):
                    w = want[NAMES.index(name)]
                    if got.shape != w.shape or got.tobytes() != w.tobytes():
                        problems.append(f"thread {t} run {i}: {name} differs (N={n}, L={length})")
                mine.append(((n, length), list(names), outs))
                good += 1
            except Exception as e:  # noqa: BLE001 - every unexpected error is reported
                problems.append(f"thread {t} run {i}: {type(e).__name__}: {e}")
        with lock:
            kept.extend(mine)
            counts["good"] += good
            counts["bad"] += bad

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    seconds = time.perf_counter() - t0
    assert not any(th.is_alive() for th in threads), "a thread hung"
    assert not problems, problems[:20]
    assert counts["good"] + counts["bad"] == THREADS * RUNS
    assert counts["bad"] == THREADS * RUNS // 10
    # Returned arrays still hold their results after all later runs (no buffer reuse race).
    for key, names, outs in kept:
        for name, got in zip(names, outs):
            assert got.tobytes() == serial[key][NAMES.index(name)].tobytes(), (key, name)
    print(f"\n{THREADS} threads x {RUNS} runs in {seconds:.2f} s")


def test_next_good_run_after_each_failure_is_bitwise_identical(serial) -> None:
    sess = session(model())
    want = serial[17, 4]
    for kind in ("dtype", "rank", "cap", "cap", "dtype"):
        bad_feed, cls, _ = BAD[kind]
        with pytest.raises(cls) as info:
            sess.run(None, bad_feed)
        assert isinstance(info.value, OnnxJitError)
        got = sess.run(None, feed(17, 4))
        assert [g.tobytes() for g in got] == [w.tobytes() for w in want], kind
    # A cap error in the middle of a run whose other outputs were fine leaves nothing behind.
    with pytest.raises(ResourceLimitError):
        sess.run(["y"], {"x": XS[2500], "s": np.array([1 << 28], np.int64)})
    got = sess.run(None, feed(2500, 9))
    assert [g.tobytes() for g in got] == [w.tobytes() for w in serial[2500, 9]]


FORK_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    sys.path.insert(0, {tests!r})
    import onnxjit
    from onnxjit.backends.cpu import pool
    from test_stress import model, session, feed

    sess = session(model(), threads=2)
    before = sess.run(None, feed(2500, 4))
    parent_workers = pool.worker_count()
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            got = sess.run(None, feed(2500, 4))
            same = all(g.tobytes() == b.tobytes() for g, b in zip(got, before))
            fresh = onnxjit.InferenceSession(model().SerializeToString()).run(None, feed(5, 1))
            code = 0 if same and fresh[2].tolist() == [0.5] else 4
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            print("CHILD HUNG")
            sys.exit(5)
        time.sleep(0.02)
    print("parent workers", parent_workers, "child status", status)
    again = sess.run(None, feed(2500, 4))
    assert all(g.tobytes() == b.tobytes() for g, b in zip(again, before))
    sys.exit(os.waitstatus_to_exitcode(status))
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() exists on POSIX only")
def test_fork_after_a_run_does_not_hang() -> None:
    """A child forked after the parent's pool workers started (they stay in the parent) runs
    the same session and a new one, with the same results, and exits; the parent keeps
    running. In a subprocess, so that a hang or crash cannot take pytest down."""
    script = FORK_SCRIPT.format(tests=os.path.dirname(__file__))
    env = dict(os.environ, ONNXJIT_PARALLEL_THRESHOLD="1024")
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=240, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "child status 0" in proc.stdout
    workers = int(proc.stdout.split("parent workers")[1].split()[0])
    if (os.cpu_count() or 1) > 1 and len(os.sched_getaffinity(0)) > 1:
        assert workers >= 1, proc.stdout  # the parent's pool was running when it forked
