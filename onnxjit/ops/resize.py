"""Resize and Upsample: separable per-axis interpolation.

For each resized axis the host builds a small table (source indices and weights per output
position) from the coordinate transformation, the interpolation mode and its options; the
backend's ``resize.interp_axis`` kernel applies it over the tensor viewed as
(outer, axis, inner). Nearest mode is a plain gather (``np.take``), exact for every dtype.

The arithmetic follows onnx's reference implementation where the spec is loose: the
"output width" in the align_corners, pytorch_half_pixel and tf_crop_and_resize formulas is
``scale * input_size`` (a float), output sizes from scales are ``floor(scale * input_size)``,
an axis whose scale is 1, whose size does not change and whose roi is the full range is left
as it is, and integer outputs are rounded half to even and saturated.

Registered versions: Resize 10, 11 (and 13: roi/scales became optional), 18 (and 19: adds the
half_pixel_symmetric mode, accepted by the same body); Upsample 7 (scales attribute) and 9
(scales input; the deprecated Upsample-10 resolves to it).
"""

from __future__ import annotations

import math

import numpy as np

from onnxjit import limits
from onnxjit.registry import NodeContext, onnx_op

_COORD_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nearest",
    "tf_crop_and_resize",
)
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source_coords(
    mode: str, n_in: int, n_out: int, scale: float, roi: tuple[float, float] | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Source coordinate of every output position, and the tf_crop_and_resize oob flags."""
    y = np.arange(n_out, dtype=np.float64)
    width = scale * n_in  # a float on purpose (see the module docstring)
    oob = None
    if mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = (n_in / 2.0) * (1.0 - n_out / width)
        x = offset + (y + 0.5) / scale - 0.5
    elif mode == "pytorch_half_pixel":
        x = np.full(n_out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif mode == "align_corners":
        x = np.zeros(n_out) if width == 1 else y * (n_in - 1) / (width - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_half_pixel_for_nearest":
        x = (y + 0.5) / scale
    else:  # tf_crop_and_resize
        start, end = roi
        if width == 1:
            x = np.full(n_out, (end - start) * (n_in - 1) / 2.0)
        else:
            x = y * (end - start) * (n_in - 1) / (width - 1)
        x = x + start * (n_in - 1)
        oob = (x < 0) | (x > n_in - 1)
    return x, oob


def _cubic(d: np.ndarray, a: float) -> np.ndarray:
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _axis_table(
    n_in: int,
    n_out: int,
    scale: float,
    *,
    mode: str,
    coord_mode: str,
    nearest_mode: str,
    cubic_a: float,
    exclude_outside: bool,
    antialias: bool,
    roi: tuple[float, float] | None,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(idx (n_out, K) int64, weights (n_out, K) float64 or None for nearest, oob or None)."""
    x, oob = _source_coords(coord_mode, n_in, n_out, scale, roi)
    if mode == "nearest":
        if nearest_mode == "round_prefer_floor":
            i = np.ceil(x - 0.5)
        elif nearest_mode == "round_prefer_ceil":
            i = np.floor(x + 0.5)
        elif nearest_mode == "floor":
            i = np.floor(x)
        else:
            i = np.ceil(x)
        idx = np.clip(i, 0, max(n_in - 1, 0)).astype(np.int64)[:, None]
        return idx, None, oob
    # Left neighbour i0 with x - i0 in (0, 1]; the taps are i0 + k for k in [k0, 1 - k0].
    i0 = np.ceil(x) - 1
    ratio = x - i0
    support = 1.0 if mode == "linear" else 2.0
    s = min(scale, 1.0) if antialias else 1.0
    k0 = math.floor(-support / s) + 1
    ks = np.arange(k0, 2 - k0, dtype=np.float64)
    d = (ks[None, :] - ratio[:, None]) * s
    w = np.clip(1.0 - np.abs(d), 0.0, 1.0) if mode == "linear" else _cubic(d, cubic_a)
    if antialias:
        w = w / w.sum(axis=1, keepdims=True)
    idx = (i0[:, None] + ks[None, :]).astype(np.int64)
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= n_in), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    idx = np.clip(idx, 0, max(n_in - 1, 0))
    return idx, w, oob


def _apply_axis(
    ctx: NodeContext,
    x: np.ndarray,
    axis: int,
    idx: np.ndarray,
    w: np.ndarray | None,
    oob: np.ndarray | None,
    extrapolation: float,
) -> np.ndarray:
    """Interpolate ``x`` along ``axis`` with one axis table (x is float for weighted modes)."""
    shape = x.shape
    n_out = idx.shape[0]
    if w is None:
        out = np.take(x, idx[:, 0], axis=axis)
        if oob is not None and oob.any():
            sel = (slice(None),) * axis + (oob,)
            out[sel] = extrapolation
        return out
    outer = math.prod(shape[:axis])
    inner = math.prod(shape[axis + 1 :])
    x3 = np.ascontiguousarray(x).reshape(outer, shape[axis], inner)
    out = np.empty((outer, n_out, inner), dtype=x.dtype)
    oob_u8 = np.zeros(n_out, dtype=np.uint8) if oob is None else oob.astype(np.uint8)
    wt = np.ascontiguousarray(w, dtype=x.dtype)
    if out.size:
        ctx.run_kernel("resize", "interp_axis", out.size, x3, idx, wt, oob_u8, extrapolation, out)
    return out.reshape(shape[:axis] + (n_out,) + shape[axis + 1 :])


def _resize(
    ctx: NodeContext,
    X: np.ndarray,
    roi: np.ndarray | None,
    scales: np.ndarray | None,
    sizes: np.ndarray | None,
    *,
    mode: str,
    coord_mode: str,
    nearest_mode: str,
    cubic_a: float = -0.75,
    exclude_outside: int = 0,
    extrapolation: float = 0.0,
    antialias: int = 0,
    axes: list[int] | None = None,
    policy: str = "stretch",
    nearest_by_direction: bool = False,
) -> np.ndarray:
    """The common body. ``nearest_by_direction`` gives Resize-10/Upsample's nearest rounding:
    floor when an axis grows, ceil when it shrinks (what onnxruntime does for them)."""
    if mode not in ("nearest", "linear", "cubic"):
        raise ctx.unsupported(f"mode {mode!r} is not supported; use nearest, linear or cubic")
    if coord_mode not in _COORD_MODES:
        raise ctx.unsupported(
            f"coordinate_transformation_mode {coord_mode!r} is not supported; use one of "
            f"{list(_COORD_MODES)}"
        )
    if nearest_mode not in _NEAREST_MODES:
        raise ctx.unsupported(
            f"nearest_mode {nearest_mode!r} is not supported; use one of {list(_NEAREST_MODES)}"
        )
    rank = X.ndim
    if axes:
        ax = [a + rank if a < 0 else a for a in axes]
        if any(not 0 <= a < rank for a in ax) or len(set(ax)) != len(ax):
            raise ctx.error(f"axes {list(axes)} must be distinct axes of a rank-{rank} input")
    else:
        ax = list(range(rank))
    if scales is not None and np.asarray(scales).size == 0:
        scales = None
    if sizes is not None and np.asarray(sizes).size == 0:
        sizes = None
    if roi is not None and np.asarray(roi).size == 0:
        roi = None
    if (scales is None) == (sizes is None):
        raise ctx.error(
            "exactly one of scales and sizes must be given (a non-empty tensor); "
            f"got {'both' if scales is not None else 'neither'}"
        )
    in_shape = X.shape
    scale_of = {a: 1.0 for a in range(rank)}
    size_of = {a: in_shape[a] for a in range(rank)}
    if sizes is not None:
        sz = np.asarray(sizes).astype(np.int64).reshape(-1)
        if sz.size != len(ax):
            raise ctx.error(f"sizes has {sz.size} entries, expected {len(ax)} (one per axis)")
        if (sz < 0).any():
            raise ctx.error(f"sizes must be non-negative, got {sz.tolist()}")
        for a, n in zip(ax, sz.tolist()):
            scale_of[a] = n / in_shape[a] if in_shape[a] else 1.0
            size_of[a] = n
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                raise ctx.unsupported(
                    f"keep_aspect_ratio_policy {policy!r} is not supported; use stretch, "
                    "not_larger or not_smaller"
                )
            pick = min if policy == "not_larger" else max
            s = pick(scale_of[a] for a in ax)
            for a in ax:
                scale_of[a] = s
                size_of[a] = int(s * in_shape[a] + 0.5)
    else:
        sc = np.asarray(scales).reshape(-1)
        if sc.size != len(ax):
            raise ctx.error(f"scales has {sc.size} entries, expected {len(ax)} (one per axis)")
        if not (sc > 0).all() or not np.isfinite(sc).all():
            raise ctx.error(f"scales must be positive and finite, got {sc.tolist()}")
        for a, s in zip(ax, sc.tolist()):
            scale_of[a] = float(s)
            size_of[a] = int(math.floor(float(s) * in_shape[a]))
    roi_of: dict[int, tuple[float, float]] = {}
    if roi is not None:
        r = np.asarray(roi, dtype=np.float64).reshape(-1)
        if r.size != 2 * len(ax):
            raise ctx.error(f"roi has {r.size} entries, expected {2 * len(ax)} (starts, ends)")
        if not np.isfinite(r).all():
            raise ctx.error(f"roi {r.tolist()} holds a non-finite value; pass finite bounds")
        for i, a in enumerate(ax):
            roi_of[a] = (float(r[i]), float(r[len(ax) + i]))
    if coord_mode == "tf_crop_and_resize":
        for a in ax:
            roi_of.setdefault(a, (0.0, 1.0))
    limits.check(ctx, [size_of[a] for a in range(rank)], X.dtype)

    out_dtype = X.dtype
    if mode == "nearest" or out_dtype in (np.float32, np.float64):
        work = X
    elif out_dtype.kind == "f" or out_dtype.name == "bfloat16":
        work = X.astype(np.float32)  # float16/bfloat16 compute in float32
    else:
        work = X.astype(np.float64)  # integers: float64 keeps the rounding exact
    for a in range(rank):
        s, n_out = scale_of[a], size_of[a]
        lo, hi = roi_of.get(a, (0.0, 1.0))
        if (
            math.isclose(s, 1.0)
            and n_out == in_shape[a]
            and (a not in roi_of or (math.isclose(lo, 0.0) and math.isclose(hi, 1.0)))
        ):
            continue
        if in_shape[a] == 0 and n_out > 0:
            raise ctx.error(f"cannot resize axis {a} of size 0 to {n_out}")
        nm = nearest_mode
        if nearest_by_direction:
            nm = "floor" if s >= 1 else "ceil"
        idx, w, oob = _axis_table(
            in_shape[a], n_out, s, mode=mode, coord_mode=coord_mode, nearest_mode=nm,
            cubic_a=cubic_a, exclude_outside=bool(exclude_outside),
            antialias=bool(antialias), roi=roi_of.get(a),
        )  # fmt: skip
        work = _apply_axis(ctx, work, a, idx, w, oob, extrapolation)
    if work.dtype == out_dtype:
        return work if work is not X else X.copy()
    if out_dtype.kind in "iu":
        info = np.iinfo(out_dtype)
        return np.clip(np.rint(work), info.min, info.max).astype(out_dtype)
    return work.astype(out_dtype)


# ---------------------------------------------------------------------------------------------
# Resize


@onnx_op("Resize", since=10)
def resize_10(ctx, X, scales, *, mode):
    """Resize-10: scales only, asymmetric coordinates (Upsample's semantics, extended to
    downsampling)."""
    return _resize(
        ctx, X, None, scales, None, mode=mode, coord_mode="asymmetric",
        nearest_mode="floor", nearest_by_direction=True,
    )  # fmt: skip


@onnx_op("Resize", since=11)
@onnx_op("Resize", since=13)
def resize_11(
    ctx, X, roi=None, scales=None, sizes=None, *, coordinate_transformation_mode,
    cubic_coeff_a, exclude_outside, extrapolation_value, mode,
    nearest_mode,
):  # fmt: skip
    """Resize-11/13: roi, scales or sizes; coordinate modes, nearest modes, cubic options."""
    return _resize(
        ctx, X, roi, scales, sizes, mode=mode, coord_mode=coordinate_transformation_mode,
        nearest_mode=nearest_mode, cubic_a=cubic_coeff_a, exclude_outside=exclude_outside,
        extrapolation=extrapolation_value,
    )  # fmt: skip


@onnx_op("Resize", since=18)
@onnx_op("Resize", since=19)
def resize_18(
    ctx, X, roi=None, scales=None, sizes=None, *, antialias, axes=None,
    coordinate_transformation_mode, cubic_coeff_a, exclude_outside,
    extrapolation_value, keep_aspect_ratio_policy, mode,
    nearest_mode,
):  # fmt: skip
    """Resize-18/19: adds antialias, axes, keep_aspect_ratio_policy (19: half_pixel_symmetric)."""
    return _resize(
        ctx, X, roi, scales, sizes, mode=mode, coord_mode=coordinate_transformation_mode,
        nearest_mode=nearest_mode, cubic_a=cubic_coeff_a, exclude_outside=exclude_outside,
        extrapolation=extrapolation_value, antialias=antialias, axes=axes,
        policy=keep_aspect_ratio_policy,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Upsample


def _upsample(ctx: NodeContext, X: np.ndarray, scales: np.ndarray, mode: str) -> np.ndarray:
    sc = np.asarray(scales, dtype=np.float32).reshape(-1)
    if (sc < 1).any():
        raise ctx.error(f"Upsample scales must be >= 1, got {sc.tolist()}; use Resize to shrink")
    if mode == "bilinear":
        mode = "linear"
    return _resize(
        ctx, X, None, sc, None, mode=mode, coord_mode="asymmetric", nearest_mode="floor",
        nearest_by_direction=True,
    )  # fmt: skip


@onnx_op("Upsample", since=7)
def upsample_7(ctx, X, *, mode, scales=None):
    """Upsample-7: scales attribute (one per axis, >= 1), asymmetric coordinates."""
    if scales is None:
        raise ctx.error("the scales attribute is required")
    return _upsample(ctx, X, np.asarray(scales, dtype=np.float32), mode)


@onnx_op("Upsample", since=9)
def upsample_9(ctx, X, scales, *, mode):
    """Upsample-9 (and the deprecated 10): scales input."""
    return _upsample(ctx, X, scales, mode)
