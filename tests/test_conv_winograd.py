"""Winograd F(2x2, 3x3) convolutions (kernels/cpu/conv_winograd.py) beyond the shapes of
tests/test_conv_kernels.py: the work split (items of a few tile rows and few output channels,
each thread's V block reused across items), the session switch, NaN propagation, and the
accuracy against float64. Oracles: onnxruntime (float32) and numpy in float64."""

from __future__ import annotations

import numpy as np
import pytest
from oracle import assert_close, ort_outputs
from test_conv_kernels import _fused_model, rnd, weights

import onnxjit
from onnxjit.errors import InvalidArgumentError
from onnxjit.ops import nn


def _direct_f64(x: np.ndarray, w: np.ndarray, b: np.ndarray, pads: list[int]) -> np.ndarray:
    """3x3 stride-1 convolution in float64, tap by tap (numpy, not onnxjit's code)."""
    pt, pl, pb, pr = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    N, _C, Hp, Wp = xp.shape
    OH, OW = Hp - 2, Wp - 2
    y = np.zeros((N, w.shape[0], OH, OW)) + b.astype(np.float64)[None, :, None, None]
    for i in range(3):
        for j in range(3):
            y += np.einsum("nchw,mc->nmhw", xp[:, :, i : i + OH, j : j + OW], w[:, :, i, j])
    return y


def _session(model, threads: int, winograd: str | None = None) -> onnxjit.InferenceSession:
    opts = onnxjit.SessionOptions()
    opts.intra_op_num_threads = threads
    if winograd is not None:
        opts.add_session_config_entry("onnxjit.conv_winograd", winograd)
    return onnxjit.InferenceSession(model.SerializeToString(), opts)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "cols, mbuf", [(6, 16 * 12 * 6 * 4), (12, 16 * 24 * 12 * 4), (128, 1 << 20)]
)
def test_work_items(cols, mbuf, threads, monkeypatch):
    # Items of one tile row (6 product columns: 9-wide outputs) or two, and of 12 or 24 of
    # the 50 output channels (the last item of each block of tile rows partial): a thread
    # runs several items of one block of tile rows in a row and reuses the V block it
    # transformed for the first; two images, residual and Relu; twice (the planning run,
    # then the plan).
    monkeypatch.setattr(nn, "_WINO_COLS", cols)
    monkeypatch.setattr(nn, "_WINO_MBUF_BYTES", mbuf)
    xs, ws, attrs = (2, 24, 11, 9), (50, 24, 3, 3), {"pads": [1, 1, 1, 1]}
    out = (2, 50, 11, 9)
    model = _fused_model(xs, ws, attrs, "Relu", out)
    feeds = {"x": rnd(xs, np.float32, 3), "r": rnd(out, np.float32, 4)}
    sess = _session(model, threads)
    want = ort_outputs(model, feeds)
    for _ in range(2):
        assert_close(sess.run(None, feeds), want, rtol=1e-4, atol=1e-5)
    plan = nn._ConvPlan(
        xs, np.float32, weights(ws), 1, [3, 3], [1, 1], [1, 1], [1, 1], [11, 9], None, True,
        0, 0.0, 0.0,
    )  # fmt: skip
    tm, tile_rows = plan.wino_tail[1:3]
    assert plan.kind == nn._WINOGRAD and tile_rows * 6 <= max(cols, 6)
    assert tm == min(50, max(12, mbuf // (16 * tile_rows * 6 * 4) // 12 * 12))


@pytest.mark.parametrize("value, kind", [("1", "_WINOGRAD"), ("0", "_TAPS")])
def test_session_switch(value, kind):
    # onnxjit.conv_winograd = 0 keeps the direct form; both agree with onnxruntime
    xs, ws, attrs = (1, 32, 14, 14), (32, 32, 3, 3), {"pads": [1, 1, 1, 1]}
    model = _fused_model(xs, ws, attrs, None, None)
    feeds = {"x": rnd(xs, np.float32, 5)}
    sess = _session(model, 1, value)
    plan = nn._ConvPlan(
        xs, np.float32, weights(ws), 1, [3, 3], [1, 1], [1, 1], [1, 1], [14, 14], None,
        False, 0, 0.0, 0.0, winograd=value == "1",
    )  # fmt: skip
    assert plan.kind == getattr(nn, kind)
    assert_close(sess.run(None, feeds), ort_outputs(model, feeds), rtol=1e-4, atol=1e-5)
    steps = sess.stats()["plans"][-1]["steps"]
    conv = next(s for s in steps if s["op_type"] in ("Conv", "FusedConv"))
    # what the session's Conv plans are made with
    assert conv["kernel"] == ("conv.winograd" if value == "1" else "conv.taps")


def test_session_switch_rejects_other_values():
    model = _fused_model((1, 16, 8, 8), (4, 16, 3, 3), {"pads": [1, 1, 1, 1]}, None, None)
    with pytest.raises(InvalidArgumentError, match="onnxjit.conv_winograd.*'yes'"):
        _session(model, 1, "yes")


@pytest.mark.parametrize("threads", [1, 2])
def test_nan_reaches_exactly_the_outputs_over_it(threads):
    # A NaN input reaches the outputs whose 3x3 window covers it and no others (as in the
    # direct form): the transforms mix a tile's inputs, but each output's part of them only
    # with what its window holds. NaNs at a tile's corner, edge and middle.
    xs, ws = (1, 16, 12, 12), (8, 16, 3, 3)
    model = _fused_model(xs, ws, {"pads": [1, 1, 1, 1]}, None, None)
    x = rnd(xs, np.float32, 6)
    for h, w in ((0, 0), (5, 4), (7, 10), (11, 11)):
        x[0, 3, h, w] = np.nan
    got = _session(model, threads).run(None, {"x": x})[0]
    want = ort_outputs(model, {"x": x})[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(want).sum() > 0
    ok = ~np.isnan(want)
    assert_close([got[ok]], [want[ok]], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_accuracy_against_float64(dtype):
    # A ResNet-like layer (64 channels, 28 x 28, O(1) values): Winograd's error against the
    # exact (float64) convolution stays within a small multiple of the direct form's
    # (onnxjit's own direct path, the session switch off). Measured: max |error| 4.8e-7
    # Winograd, 1.3e-6 direct in float32, 9.4e-16 and 2.4e-15 in float64 (outputs up to
    # 2.1): each of Winograd's 16 products sums over the 64 channels only, the direct one
    # over all 576 taps.
    xs, ws = (1, 64, 28, 28), (64, 64, 3, 3)
    model = _fused_model(xs, ws, {"pads": [1, 1, 1, 1]}, None, None, dtype)
    x = rnd(xs, dtype, 7)
    exact = _direct_f64(x, weights(ws, dtype), rnd((64,), dtype, 2), [1, 1, 1, 1])
    wino = _session(model, 1).run(None, {"x": x})[0]
    direct = _session(model, 1, "0").run(None, {"x": x})[0]
    err_w = np.abs(wino - exact).max()
    err_d = np.abs(direct - exact).max()
    eps = np.finfo(dtype).eps
    assert err_w <= 4 * max(err_d, 8 * eps * np.abs(exact).max()), (err_w, err_d)
