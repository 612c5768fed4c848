"""MaxRoiPool-1 and -22 against onnxruntime.

The ONNX reference evaluator has no MaxRoiPool, so onnxruntime is the oracle. onnxruntime
implements MaxRoiPool for float only and only up to opset 21: MaxRoiPool-22 (which only adds
bfloat16 to the types) is checked against onnxruntime's result for the same node at opset 21,
and double/float16/bfloat16 against onnxruntime's float result on the same (exactly
representable) values.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from oracle import assert_close, make_node_model, ort_outputs

import onnxjit
from onnxjit.errors import OnnxJitError


def _rois(rng: np.random.Generator, n_rois: int, n: int, h: int, w: int) -> np.ndarray:
    """Rois with corners partly outside the image, inverted and degenerate boxes included."""
    b = rng.integers(0, n, n_rois)
    x1 = rng.integers(-3, w + 2, n_rois)
    y1 = rng.integers(-3, h + 2, n_rois)
    x2 = x1 + rng.integers(-2, w, n_rois)
    y2 = y1 + rng.integers(-2, h, n_rois)
    return np.stack([b, x1, y1, x2, y2], axis=1).astype(np.float32)


def _want(x32, rois32, attrs):
    model = make_node_model("MaxRoiPool", {"x": x32, "rois": rois32}, attrs, 21)
    return ort_outputs(model, {"x": x32, "rois": rois32})[0]


def _got(x, rois, attrs, opset):
    model = make_node_model("MaxRoiPool", {"x": x, "rois": rois}, attrs, opset)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    return sess.run(None, {"x": x, "rois": rois})[0]


CASES = [
    # (N, C, H, W, n_rois, pooled_shape, spatial_scale)
    (1, 1, 6, 6, 1, [2, 2], 1.0),
    (2, 3, 10, 12, 7, [3, 2], 0.5),
    (2, 4, 9, 7, 12, [4, 5], 1.0),
    (1, 2, 5, 5, 5, [1, 1], 0.25),
    (3, 2, 16, 20, 20, [7, 7], 0.625),
    (1, 2, 4, 4, 0, [2, 2], 1.0),  # no rois: empty output
]


@pytest.mark.parametrize("opset", [1, 22])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:5])))
def test_max_roi_pool_float(opset, case):
    n, c, h, w, nr, pooled, scale = case
    rng = np.random.default_rng(n * 100 + nr)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    rois = _rois(rng, nr, n, h, w)
    if scale != 0.625:  # keep the boxes about image-sized after scaling
        rois[:, 1:] *= np.float32(1 / scale)
    attrs = {"pooled_shape": pooled, "spatial_scale": scale}
    got = _got(x, rois, attrs, 21 if opset == 1 else 22)
    assert got.shape == (nr, c, pooled[0], pooled[1])
    assert_close(got, _want(x, rois, attrs), 0, 0, f"MaxRoiPool-{opset}")


def test_max_roi_pool_half_rounding():
    # corners landing exactly on .5 after scaling: std::round goes away from zero
    x = np.arange(2 * 1 * 8 * 8, dtype=np.float32).reshape(2, 1, 8, 8) * -1.0
    rois = np.array([[0, 1, 1, 5, 5], [1, 3, 5, 9, 7], [0, -1, -1, 3, 3]], np.float32)
    attrs = {"pooled_shape": [2, 3], "spatial_scale": 0.5}
    assert_close(_got(x, rois, attrs, 21), _want(x, rois, attrs), 0, 0)


@pytest.mark.parametrize(
    ("dtype", "opset"),
    [(np.float64, 21), (np.float16, 21), (np.float64, 22), (ml_dtypes.bfloat16, 22)],
)
def test_max_roi_pool_other_dtypes(dtype, opset):
    rng = np.random.default_rng(5)
    # small integers: exact in every dtype, so the float oracle's result is the answer
    x = rng.integers(-50, 50, (2, 3, 9, 11)).astype(np.float32)
    rois = _rois(rng, 6, 2, 9, 11)
    attrs = {"pooled_shape": [3, 4], "spatial_scale": 1.0}
    got = _got(x.astype(dtype), rois.astype(dtype), attrs, opset)
    assert got.dtype == np.dtype(dtype)
    assert_close(got.astype(np.float32), _want(x, rois, attrs), 0, 0)


def test_max_roi_pool_bad_batch_index():
    x = np.zeros((1, 1, 4, 4), np.float32)
    rois = np.array([[1, 0, 0, 2, 2]], np.float32)
    with pytest.raises(OnnxJitError, match="batch indices"):
        _got(x, rois, {"pooled_shape": [2, 2]}, 21)
