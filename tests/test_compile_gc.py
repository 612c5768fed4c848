"""The garbage collector's thresholds while kernels compile (onnxjit.compile_gc)."""

from __future__ import annotations

import gc
import os

import numba
import numpy as np
import pytest
from numba.extending import overload
from onnx import TensorProto, helper

import onnxjit
from onnxjit import compile_gc


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


_seen_in_compile: list = []


def _probe() -> None:
    """Called from a jitted function: its overload's typer runs while Numba compiles it."""


@overload(_probe)
def _probe_typer():
    _seen_in_compile.append((gc.get_threshold(), compile_gc.active()))
    return lambda: None


def test_compile_holds_thresholds_and_puts_them_back(thresholds):
    @numba.njit(cache=False)
    def f(x):
        _probe()
        return x + 1

    assert f(3) == 4  # the first call compiles
    assert _seen_in_compile == [(compile_gc.COMPILING_THRESHOLDS, True)]
    assert gc.get_threshold() == (700, 10, 10)
    assert not compile_gc.active()


def test_nested_sections_restore_once(thresholds):
    with compile_gc.held():
        with compile_gc.held():
            assert gc.get_threshold() == compile_gc.COMPILING_THRESHOLDS
        assert gc.get_threshold() == compile_gc.COMPILING_THRESHOLDS
    assert gc.get_threshold() == (700, 10, 10)


def test_thresholds_set_meanwhile_are_kept(thresholds):
    with compile_gc.held():
        gc.set_threshold(5000, 20, 20)
    assert gc.get_threshold() == (5000, 20, 20)


def test_error_in_section_restores(thresholds):
    with pytest.raises(ZeroDivisionError), compile_gc.held():
        1 / 0  # noqa: B018
    assert gc.get_threshold() == (700, 10, 10)
    assert not compile_gc.active()


def test_first_run_of_a_signature_holds_thresholds(thresholds, monkeypatch):
    """A session's first run of an input signature (which compiles or loads its kernels) runs
    under the compiling thresholds; later runs of that signature under the caller's."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    model = helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    sess = onnxjit.InferenceSession(model.SerializeToString())
    seen = []
    from onnxjit import plan

    original = plan.build

    def spy(*args, **kwargs):  # the planning run of a new signature
        seen.append(gc.get_threshold())
        return original(*args, **kwargs)

    monkeypatch.setattr(plan, "build", spy)
    feed = {"x": np.array([-1.0, 2.0], np.float32)}
    for _ in range(3):
        (out,) = sess.run(None, feed)
        np.testing.assert_array_equal(out, np.maximum(feed["x"], 0))
        assert gc.get_threshold() == (700, 10, 10)
    assert seen == [compile_gc.COMPILING_THRESHOLDS]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")
def test_fork_during_a_section_gives_the_child_its_thresholds(thresholds):
    with compile_gc.held():
        pid = os.fork()
        if pid == 0:  # the child: report through the exit status, never return to pytest
            ok = gc.get_threshold() == (700, 10, 10) and not compile_gc.active()
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert gc.get_threshold() == compile_gc.COMPILING_THRESHOLDS  # the parent's stays
    assert os.waitstatus_to_exitcode(status) == 0
    assert gc.get_threshold() == (700, 10, 10)
