"""Serial and pool entry points generated from one kernel body (kernels/cpu/runtime/twins.py).

Oracles: numpy for the toy kernels below (which use every feature of a declaration: nested
items, setup values, carried state), and each kernel's own serial entry point for its pool
entry point, run directly with a one-thread control array and on two threads of the pool.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import numpy as np
import pytest

import onnxjit.kernels.cpu as kcpu
from onnxjit.backends.cpu.pool import run_parallel
from onnxjit.kernels._jit import njit
from onnxjit.kernels.cpu.runtime import twins as T
from onnxjit.kernels.cpu.runtime.chunks import CTL_SIZE, THREADS
from onnxjit.kernels.cpu.runtime.twins import twins

# Pool kernels written by hand, and why (the generated form cannot express them).
HAND_WRITTEN = {
    # the threads first share the padding copy through a counter of their own, then wait
    # for it before their first product item
    "conv_taps_par",
    # items are elements by a flat index; the serial form hoists the scale lookups per row
    "quantize_par",
    "dequantize_par",
    # a reduction: each thread adds its count of cycling rows to an output the serial form
    # returns instead (the signatures differ)
    "predict_parallel",
    # time steps in phases: the threads share each step's slices and wait for the previous
    # step (chunks.claim_phased); used only on several threads, it has no serial form
    "sequence_split_par",
}


def _ctl() -> np.ndarray:
    ctl = np.zeros(CTL_SIZE, np.int64)
    ctl[THREADS] = 1
    return ctl


@njit(inline="always")
def _scale_row(x, k, y, r):
    for j in range(x.shape[1]):
        y[r, j] = x[r, j] * k


scale_rows, scale_rows_par = twins(
    "scale_rows(x, k, y)", _scale_row, items={"r": "x.shape[0]"}, doc="y = x * k"
)


@njit(inline="always")
def _cell(x, y, i, j, m):
    y[i, j, m] = x[i, j, m] + 100 * i + 10 * j + m


cells, cells_run = twins(
    "cells(x, y)",
    _cell,
    items={"i": "x.shape[0]", "j": "x.shape[1]", "m": "x.shape[2]"},
    par="cells_run",
)


@njit(inline="always")
def _offset_row(x, y, off, r):
    for j in range(x.shape[1]):
        y[r, j] = x[r, j] + off


offset_rows, offset_rows_par = twins(
    "offset_rows(x, y)", _offset_row, setup="off = x.shape[1] * 2", items={"r": "x.shape[0]"}
)


@njit(inline="always")
def _count_row(x, seen, y, buf, n, r, done):
    # done: how many rows this thread did before this one
    for j in range(n):
        buf[j] = x[r, j]
    y[r] = buf.sum()
    seen[r] = done
    return done + 1


count_rows, count_rows_par = twins(
    "count_rows(x, seen, y)",
    _count_row,
    # a scratch row of this call and thread
    setup=("n = x.shape[1]", "buf = np.empty(n, x.dtype)"),
    items={"r": "x.shape[0]"},
    state="done = 0",
)


def test_generated_source_is_the_loop_around_the_body():
    src = T.GENERATED[f"{__name__}.scale_rows"]
    assert "def scale_rows(x, k, y):\n    for r in range(x.shape[0]):\n" in src
    assert "        _scale_row(x, k, y, r)\n" in src
    assert "def scale_rows_par(ctl, x, k, y):" in src
    assert "chunk_lo, chunk_hi = claim(ctl, n_items)" in src
    # three item dimensions: nested loops, flattened in the pool form
    src = T.GENERATED[f"{__name__}.cells"]
    assert "for i in range(x.shape[0]):" in src and "for m in range(x.shape[2]):" in src
    assert "i = flat // (n_j * n_m)" in src and "m = rest - j * (n_m)" in src
    src = T.GENERATED[f"{__name__}.count_rows"]
    assert "    n = x.shape[1]\n    buf = np.empty(n, x.dtype)\n    done = 0\n" in src
    assert "done = _count_row(x, seen, y, buf, n, r, done)" in src
    assert "    off = x.shape[1] * 2\n" in T.GENERATED[f"{__name__}.offset_rows"]


def test_entry_points_keep_the_kernel_signature_and_the_body_location():
    assert list(inspect.signature(scale_rows.py_func).parameters) == ["x", "k", "y"]
    assert list(inspect.signature(scale_rows_par.py_func).parameters) == ["ctl", "x", "k", "y"]
    assert cells_run.py_func.__name__ == "cells_run"
    body = _scale_row.py_func.__code__
    for fn in (scale_rows.py_func, scale_rows_par.py_func):
        # where Numba files the cache entries: the declaring module's file, the body's line
        assert fn.__code__.co_filename == body.co_filename
        assert fn.__code__.co_firstlineno == body.co_firstlineno
        assert fn.__module__ == __name__
    assert scale_rows.__doc__ == "y = x * k"
    assert "Pool twin of :func:`scale_rows`" in scale_rows_par.__doc__


@pytest.mark.parametrize("rows", [0, 1, 7, 300])
def test_serial_and_pool_forms_agree_with_numpy(rows):
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 5)).astype(np.float32)
    want = x * np.float32(3)
    outs = [np.full_like(x, np.nan) for _ in range(3)]
    scale_rows(x, np.float32(3), outs[0])
    scale_rows_par(_ctl(), x, np.float32(3), outs[1])
    run_parallel(scale_rows_par, x, np.float32(3), outs[2], threads=2)
    for out in outs:
        np.testing.assert_array_equal(out, want)

    outs = [np.zeros_like(x) for _ in range(3)]
    offset_rows(x, outs[0])
    offset_rows_par(_ctl(), x, outs[1])
    run_parallel(offset_rows_par, x, outs[2], threads=2)
    for out in outs:
        np.testing.assert_array_equal(out, x + 10)


def test_nested_items_cover_every_cell_once():
    x = np.zeros((3, 4, 5), np.int64)
    want = np.arange(3)[:, None, None] * 100 + np.arange(4)[None, :, None] * 10 + np.arange(5)
    for run in (
        lambda y: cells(x, y),
        lambda y: cells_run(_ctl(), x, y),
        lambda y: run_parallel(cells_run, x, y, threads=2),
    ):
        y = np.full_like(x, -1)
        run(y)
        np.testing.assert_array_equal(y, want)


def test_setup_scratch_and_carried_state():
    x = np.arange(400, dtype=np.float64).reshape(80, 5)
    for threads, run in (
        (1, lambda s, y: count_rows(x, s, y)),
        (1, lambda s, y: count_rows_par(_ctl(), x, s, y)),
        (2, lambda s, y: run_parallel(count_rows_par, x, s, y, threads=2)),
    ):
        seen, y = np.full(80, -1), np.zeros(80)
        run(seen, y)
        np.testing.assert_array_equal(y, x.sum(axis=1))
        # each thread counts its own rows from the initial state: 0, 1, 2, ... per thread
        counts = np.bincount(seen)
        assert seen.min() == 0 and counts[0] <= threads
        assert np.all(np.diff(counts) <= 0) and counts.sum() == 80


def test_declarations_that_do_not_fit_the_body_are_refused():
    @njit(inline="always")
    def body(x, y, r):
        y[r] = x[r]

    @njit(inline="always")
    def body2(x, z, y, r):
        y[r] = x[r] + z

    with pytest.raises(TypeError, match=r"neither a parameter.*\['z'\]"):
        twins("bad(x, y)", body2, items={"r": "x.shape[0]"})
    with pytest.raises(TypeError, match="assignments to names"):
        twins("bad(x, y)", body, setup="print(x)", items={"r": "x.shape[0]"})
    with pytest.raises(TypeError, match="the state is one value"):
        twins("bad(x, y)", body, items={"r": "x.shape[0]"}, state="a, b = 0, 0")

    @njit(inline="always")
    def reserved(ctl, y, r):
        y[r] = 0

    with pytest.raises(TypeError, match="names the generated loops use"):
        twins("bad(ctl, y)", reserved, items={"r": "y.shape[0]"})


def test_compiled_code_is_reused_and_a_damaged_code_file_is_ignored(tmp_path, monkeypatch):
    path = tmp_path / "twins.marshal"
    path.write_bytes(b"not marshal data")
    monkeypatch.setattr(T, "_code_file", lambda: str(path))
    monkeypatch.setattr(T, "_CODE", None)
    monkeypatch.setattr(T, "_NEW", False)
    src = T.GENERATED[f"{__name__}.scale_rows"]
    first = T._compiled(src, __file__, "scale_rows", "scale_rows_par")
    assert T._NEW and T._compiled(src, __file__, "scale_rows", "scale_rows_par") is first
    T._save_code()
    monkeypatch.setattr(T, "_CODE", None)
    monkeypatch.setattr(T, "_NEW", False)
    again = T._compiled(src, __file__, "scale_rows", "scale_rows_par")
    assert not T._NEW and [c.co_code for c in again] == [c.co_code for c in first]


def test_every_pool_kernel_is_generated_unless_listed_as_hand_written():
    generated, hand = set(), set()
    for info in pkgutil.iter_modules(kcpu.__path__):
        if info.ispkg:
            continue
        mod = importlib.import_module(f"{kcpu.__name__}.{info.name}")
        src = "".join(T.GENERATED.get(f"{mod.__name__}.{n}", "") for n in dir(mod))
        for name, obj in vars(mod).items():
            if not (name.endswith("_par") or name.endswith("_parallel")):
                continue
            if not hasattr(obj, "py_func") or obj.py_func.__module__ != mod.__name__:
                continue
            # an alias (general_walk_par = predict_parallel) counts as what it names
            fn = obj.py_func.__name__
            (generated if f"def {fn}(ctl, " in src else hand).add(fn)
    assert hand == HAND_WRITTEN
    assert len(generated) >= 30
