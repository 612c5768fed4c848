"""MaxRoiPool (ai.onnx, versions 1 and 22): max pooling over regions of interest.

Layout follows onnxruntime's kernel: roi corners are scaled by spatial_scale and rounded
half away from zero; the roi covers (end - start + 1) pixels (at least 1) split into
pooled_shape bins of equal fractional size, each bin [floor(k * size), ceil((k + 1) * size))
shifted by the roi start and clipped to the image; an empty bin gives 0.
"""

from __future__ import annotations

import numpy as np

from onnxjit.registry import onnx_op


def _round_away(v: np.ndarray) -> np.ndarray:
    """std::round (half away from zero); numpy's round is half to even."""
    return np.sign(v) * np.floor(np.abs(v) + v.dtype.type(0.5))


def _bounds(start: np.ndarray, length: np.ndarray, pooled: int, limit: int):
    """Clipped (R, pooled) bin bounds; arithmetic in the roi dtype, as onnxruntime does it."""
    dt = start.dtype.type
    size = (length / dt(pooled))[:, None]
    k = np.arange(pooled, dtype=start.dtype)[None, :]
    lo = np.floor(k * size).astype(np.int64) + start.astype(np.int64)[:, None]
    hi = np.ceil((k + dt(1)) * size).astype(np.int64) + start.astype(np.int64)[:, None]
    return np.clip(lo, 0, limit), np.clip(hi, 0, limit)


@onnx_op("MaxRoiPool", since=1)
@onnx_op("MaxRoiPool", since=22)
def max_roi_pool_1(ctx, x, rois, *, pooled_shape=None, spatial_scale):
    """Y [num_rois, C, pooled_h, pooled_w] of x's dtype; rois [num_rois, 5] rows
    (batch_index, x1, y1, x2, y2) in input coordinates before spatial_scale.
    float16/bfloat16 compute in float32."""
    if not pooled_shape or len(pooled_shape) != 2:
        raise ctx.error(f"pooled_shape must be 2 ints [h, w], found {pooled_shape}")
    ph, pw = int(pooled_shape[0]), int(pooled_shape[1])
    if ph <= 0 or pw <= 0:
        raise ctx.error(f"pooled_shape must be positive, found {list(pooled_shape)}")
    if x.ndim != 4:
        raise ctx.error(f"X must be 4-D [N, C, H, W], found shape {list(x.shape)}")
    if rois.ndim != 2 or rois.shape[1] != 5:
        raise ctx.error(f"rois must be [num_rois, 5], found shape {list(rois.shape)}")
    orig = x.dtype
    work = orig if orig in (np.float32, np.float64) else np.dtype(np.float32)
    xc = np.ascontiguousarray(x, dtype=work)
    r = np.asarray(rois, dtype=work)
    n, c, h, w = xc.shape
    batch = r[:, 0].astype(np.int64)
    if batch.size and (batch.min() < 0 or batch.max() >= n):
        raise ctx.error(f"rois batch indices must lie in [0, {n}), found {batch.tolist()}")
    corners = _round_away(r[:, 1:] * work.type(spatial_scale))
    x1, y1, x2, y2 = (corners[:, i] for i in range(4))
    one = work.type(1)
    roi_h = np.maximum(y2 - y1 + one, one)
    roi_w = np.maximum(x2 - x1 + one, one)
    hs, he = _bounds(y1, roi_h, ph, h)
    ws, we = _bounds(x1, roi_w, pw, w)
    out = np.empty((r.shape[0], c, ph, pw), dtype=work)
    if out.size:
        ctx.kernel("roi_pool", "max_roi_pool")(xc, batch, hs, he, ws, we, out)
    return out if work == orig else out.astype(orig)
