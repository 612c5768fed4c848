"""``RunOptions.terminate`` stops a running graph from another thread (onnxruntime's contract),
and the session runs again afterwards. Oracle for the results: onnxruntime (onnx's
ReferenceEvaluator runs a Loop without its optional cond input zero times)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxjit

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle")

I64 = TensorProto.INT64


def _counting_loop() -> bytes:
    """Loop M times (M fed), adding 1 to a carried counter each iteration."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Add", ["n_in", "one"], ["n_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("n_in", I64, []),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("n_out", I64, []),
        ],
        [helper.make_tensor("one", I64, [], [1])],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "n0"], ["n"], body=body)],
        "g",
        [helper.make_tensor_value_info("M", I64, []), helper.make_tensor_value_info("n0", I64, [])],
        [helper.make_tensor_value_info("n", I64, [])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_terminate_stops_a_long_loop_and_the_session_runs_again():
    model = _counting_loop()
    sess = onnxjit.InferenceSession(model)
    feed = {"M": np.array(10**12, np.int64), "n0": np.array(0, np.int64)}
    ro = onnxjit.RunOptions()
    set_at = []

    def stop():
        time.sleep(0.3)
        set_at.append(time.perf_counter())
        ro.terminate = True

    t = threading.Thread(target=stop)
    t.start()
    with pytest.raises(onnxjit.RunTerminatedError, match="terminate"):
        sess.run(None, feed, ro)
    stopped = time.perf_counter() - set_at[0]
    t.join()
    # a Loop iteration takes microseconds: the run stops at the next one (measured: well
    # under 0.1 s); the bound only guards against a run that ignores the flag
    assert stopped < 2.0
    assert isinstance(onnxjit.RunTerminatedError("x"), RuntimeError)
    # the session is usable: the same Loop, a short trip count, with and without the options
    short = {"M": np.array(5, np.int64), "n0": np.array(3, np.int64)}
    want = ort.InferenceSession(model).run(None, short)[0]
    assert sess.run(None, short)[0] == want == 8
    ro.terminate = False
    assert sess.run(None, short, ro)[0] == want


def test_terminate_set_before_the_run_refuses_to_start():
    sess = onnxjit.InferenceSession(_counting_loop())
    ro = onnxjit.RunOptions()
    ro.terminate = True
    with pytest.raises(onnxjit.InvalidInputError, match="terminate"):
        sess.run(None, {"M": np.array(2, np.int64), "n0": np.array(0, np.int64)}, ro)


def test_options_of_an_earlier_run_do_not_stop_a_later_one():
    # a run without options must not see the flag of the thread's previous run's options
    sess = onnxjit.InferenceSession(_counting_loop())
    ro = onnxjit.RunOptions()
    feed = {"M": np.array(4, np.int64), "n0": np.array(0, np.int64)}
    assert sess.run(None, feed, ro)[0] == 4
    ro.terminate = True
    assert sess.run(None, feed)[0] == 4
