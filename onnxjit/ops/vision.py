"""Vision operators: GridSample, RoiAlign, NonMaxSuppression, Col2Im and DeformConv.

The host code here validates shapes, resolves attributes and lays the data out for the
backend's ``vision`` kernels (kernels/cpu/vision.py: every sampling, pooling, suppression and
scatter loop runs there); DeformConv's contraction is one BLAS GEMM per group over the
deformed im2col matrix the kernel builds. float16/bfloat16 inputs are computed in float32 and
cast back.

Registered versions, and why later versions need no registration:

* GridSample 16 (4-D input; modes bilinear/nearest/bicubic) and 20 (N-D input; modes renamed
  linear/nearest/cubic); 22 only adds bfloat16, which the 20 body accepts.
* RoiAlign 10 (no coordinate_transformation_mode: the "output_half_pixel" behaviour, no -0.5
  shift) and 16 (adds coordinate_transformation_mode, default half_pixel); 22 adds bfloat16.
* NonMaxSuppression 10 and 11 (11 only rewords the documentation; one body serves both).
* Col2Im 18.
* DeformConv 19 (22 adds bfloat16). Two spatial dimensions, as onnx's reference and
  onnxruntime implement it.

Semantics follow the spec and, where it is loose, onnx's reference evaluator: GridSample's
nearest mode rounds half to even; coordinates are denormalised in the grid's precision and
held in float32; RoiAlign's max mode takes the maximum of the weighted corner values of each
sample (as onnxruntime does); NonMaxSuppression compares IoU in float32 and orders equal scores
by box index. GridSample's border and reflection modes first bring an out-of-range coordinate
inside (as the reference and the conformance cases do; onnxruntime and PyTorch clamp each cubic
tap instead, which differs near the border). GridSample on integer or bool inputs is exact in
nearest mode; linear and cubic modes interpolate in float64, round half to even and saturate
(the spec says nothing about it; the reference computes integer weights). Col2Im sums bool
inputs as a logical or, and other types in their own type.
"""

from __future__ import annotations

import numpy as np

from onnxjit import limits
from onnxjit.registry import NodeContext, onnx_op

_NATIVE_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _compute(x: np.ndarray) -> np.ndarray:
    """float32/float64 as they are; float16, bfloat16 -> float32 (contiguous)."""
    if x.dtype in _NATIVE_FLOATS:
        return np.ascontiguousarray(x)
    return np.ascontiguousarray(x, dtype=np.float32)


def _ints(ctx: NodeContext, values: list[int] | None, n: int, default: int, what: str) -> list:
    if values is None:
        return [default] * n
    values = [int(v) for v in values]
    if len(values) != n:
        raise ctx.error(f"{what} has {len(values)} values; expected {n}")
    return values


# --------------------------------------------------------------------------------------------
# GridSample

_GS_MODES_16 = {"bilinear": 1, "nearest": 0, "bicubic": 2}
_GS_MODES_20 = {"linear": 1, "nearest": 0, "cubic": 2}
_GS_PADDING = {"zeros": 0, "border": 1, "reflection": 2}
_TAP_BUDGET = 1 << 21  # taps per chunk of output points (32 MiB of offsets and weights)


def _grid_sample(
    ctx: NodeContext, x: np.ndarray, grid: np.ndarray, mode: int, padding: str, align: int
) -> np.ndarray:
    if padding not in _GS_PADDING:
        raise ctx.unsupported(f"padding_mode {padding!r}; expected zeros, border or reflection")
    if x.ndim < 3:
        raise ctx.error(f"X must have rank >= 3 (N, C, spatial...); found shape {x.shape}")
    n_sp = x.ndim - 2
    if grid.ndim != x.ndim or grid.shape[-1] != n_sp or grid.shape[0] != x.shape[0]:
        raise ctx.error(
            f"grid must have shape (N, out spatial..., {n_sp}) with N = {x.shape[0]} for X of "
            f"shape {x.shape}; found {grid.shape}"
        )
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    out_sp = grid.shape[1:-1]
    out_shape = (n, c, *out_sp)
    if int(np.prod(out_shape)) == 0:
        return np.zeros(out_shape, x.dtype)
    if min(spatial) == 0:
        raise ctx.error(f"X has an empty spatial axis {x.shape}: there is nothing to sample")
    if x.dtype.kind in "OUS":
        raise ctx.unsupported("string inputs")
    # The grid holds (x, y, z...) with x indexing the last axis: reverse it so coordinate a
    # belongs to spatial axis a. Denormalise in the grid's precision, keep float32 (as the
    # spec's reference does) so nearest rounding ties agree.
    g = grid if grid.dtype in _NATIVE_FLOATS else grid.astype(np.float32)
    g = g[..., ::-1]
    length = np.asarray(spatial, dtype=g.dtype)
    if align:
        coords = (g + 1) / 2 * (length - 1)
    else:
        coords = ((g + 1) * length - 1) / 2
    coords = np.ascontiguousarray(coords.reshape(n, -1, n_sp), dtype=np.float32)
    dims = np.asarray(spatial, dtype=np.int64)

    dt = x.dtype
    back = None
    if dt.kind == "c" or dt in _NATIVE_FLOATS:
        xs = np.ascontiguousarray(x)
    elif dt.kind in "iub":
        if mode == 0:  # nearest is a gather: exact in the input's own type
            xs = np.ascontiguousarray(x, dtype=np.uint8 if dt.kind == "b" else dt)
        else:  # interpolate in float64, round half to even, saturate
            xs = np.ascontiguousarray(x, dtype=np.float64)
            back = "int"
    else:  # float16, bfloat16
        xs = np.ascontiguousarray(x, dtype=np.float32)
    xs = xs.reshape(n, c, -1)
    zero = xs.dtype.type(0)
    # Taps and weights per output point (one compilation: coordinates are float32), then a
    # small per-type kernel that applies them to every channel. Points go in chunks so the
    # tap tables stay small (a 3-D cubic point has 64 taps).
    n_q = coords.shape[0] * coords.shape[1]
    n_taps = (1, 2, 4)[mode] ** n_sp
    chunk = max(1, min(n_q, _TAP_BUDGET // n_taps))
    off = np.empty((chunk, n_taps), np.int64)
    wt = np.empty((chunk, n_taps), np.float64)
    cnt = np.empty(chunk, np.int64)
    out = np.empty((n, c, coords.shape[1]), xs.dtype)
    pad = _GS_PADDING[padding]
    for q0 in range(0, n_q, chunk):
        k = min(chunk, n_q - q0)
        targs = (coords, dims, mode, pad, int(bool(align)), q0, off[:k], wt[:k], cnt[:k])
        ctx.run_kernel("vision", "grid_sample_taps", k * n_taps, *targs)
        args = (xs, q0, off[:k], wt[:k], cnt[:k], mode == 0, zero, out)
        ctx.run_kernel("vision", "grid_sample_apply", k * c, *args)
    out = out.reshape(out_shape)
    if back == "int":
        if dt.kind == "b":
            return np.rint(out) != 0
        info = np.iinfo(dt)
        return np.clip(np.rint(out), info.min, info.max).astype(dt)
    return out if out.dtype == dt else out.astype(dt)


@onnx_op("GridSample", since=16)
def grid_sample_16(
    ctx: NodeContext,
    X: np.ndarray,
    grid: np.ndarray,
    *,
    align_corners: int,
    mode: str,
    padding_mode: str,
) -> np.ndarray:
    """GridSample-16: 4-D X (N, C, H, W), grid (N, H_out, W_out, 2) of (x, y) in [-1, 1]."""
    if mode not in _GS_MODES_16:
        raise ctx.unsupported(f"mode {mode!r}; expected bilinear, nearest or bicubic")
    if X.ndim != 4:
        raise ctx.error(f"GridSample-16 takes a 4-D X; found shape {X.shape} (use opset 20)")
    return _grid_sample(ctx, X, grid, _GS_MODES_16[mode], padding_mode, align_corners)


@onnx_op("GridSample", since=20)
def grid_sample_20(
    ctx: NodeContext,
    X: np.ndarray,
    grid: np.ndarray,
    *,
    align_corners: int,
    mode: str,
    padding_mode: str,
) -> np.ndarray:
    """GridSample-20/22: N-D X (N, C, D1..Dr), grid (N, O1..Or, r) ordered (x, y, z...)."""
    if mode not in _GS_MODES_20:
        raise ctx.unsupported(f"mode {mode!r}; expected linear, nearest or cubic")
    return _grid_sample(ctx, X, grid, _GS_MODES_20[mode], padding_mode, align_corners)


# --------------------------------------------------------------------------------------------
# RoiAlign


def _roi_align(
    ctx: NodeContext,
    x: np.ndarray,
    rois: np.ndarray,
    batch_indices: np.ndarray,
    mode: str,
    output_height: int,
    output_width: int,
    sampling_ratio: int,
    spatial_scale: float,
    half_pixel: bool,
) -> np.ndarray:
    mode = mode.lower()
    if mode not in ("avg", "max"):
        raise ctx.unsupported(f"mode {mode!r}; expected avg or max")
    if x.ndim != 4:
        raise ctx.error(f"X must be 4-D (N, C, H, W); found shape {x.shape}")
    if rois.ndim != 2 or rois.shape[1] != 4:
        raise ctx.error(f"rois must have shape (num_rois, 4); found {rois.shape}")
    bidx = np.asarray(batch_indices, dtype=np.int64).reshape(-1)
    if bidx.shape[0] != rois.shape[0]:
        raise ctx.error(
            f"batch_indices has {bidx.shape[0]} entries but rois has {rois.shape[0]} rows"
        )
    n, c, height, width = x.shape
    if bidx.size and (bidx.min() < 0 or bidx.max() >= n):
        raise ctx.error(f"batch_indices must lie in [0, {n - 1}]; found {bidx.tolist()}")
    oh, ow = int(output_height), int(output_width)
    if oh <= 0 or ow <= 0:
        raise ctx.error(f"output_height/output_width must be positive; found {oh}, {ow}")
    r_n = rois.shape[0]
    if rois.size and not np.isfinite(rois.astype(np.float64)).all():
        bad = int(np.flatnonzero(~np.isfinite(rois.astype(np.float64)).all(axis=1))[0])
        raise ctx.error(
            f"rois[{bad}] = {rois[bad].tolist()} is not finite; every region needs finite "
            "coordinates"
        )
    out_shape = (r_n, c, oh, ow)
    if r_n == 0 or c == 0:
        return np.zeros(out_shape, x.dtype)
    if height == 0 or width == 0:
        raise ctx.error(f"X has an empty spatial axis {x.shape}")
    xs = _compute(x)
    cdt = xs.dtype
    # The per-region geometry is computed in X's precision, as the spec's reference does:
    # ceil(roi_height / output_height) picks the number of samples and must agree with it.
    r = rois.astype(cdt) * cdt.type(spatial_scale)
    shift = cdt.type(0.5 if half_pixel else 0.0)
    start_w, start_h = r[:, 0] - shift, r[:, 1] - shift
    roi_w = (r[:, 2] - shift) - start_w
    roi_h = (r[:, 3] - shift) - start_h
    if not half_pixel:  # malformed regions are forced to 1x1
        roi_w = np.maximum(roi_w, cdt.type(1.0))
        roi_h = np.maximum(roi_h, cdt.type(1.0))
    bin_h = roi_h / cdt.type(oh)
    bin_w = roi_w / cdt.type(ow)
    if sampling_ratio > 0:
        grid = np.full((r_n, 2), int(sampling_ratio), np.int64)
    else:
        grid = np.stack([np.ceil(roi_h / cdt.type(oh)), np.ceil(roi_w / cdt.type(ow))], axis=1)
        grid = np.maximum(np.nan_to_num(grid), 0).astype(np.int64)
    start = np.stack([start_h, start_w], axis=1).astype(np.float64)
    binsz = np.stack([bin_h, bin_w], axis=1).astype(np.float64)
    out = np.empty(out_shape, cdt)
    args = (xs.reshape(n, c, height * width), height, width, start, binsz, grid, bidx)
    args = (*args, mode == "max", out)
    work = out.size * int(grid.max(initial=1)) ** 2 if r_n > 1 else 0  # threads split the rois
    ctx.run_kernel("vision", "roi_align", work, *args)
    return out if out.dtype == x.dtype else out.astype(x.dtype)


@onnx_op("RoiAlign", since=10)
def roi_align_10(
    ctx: NodeContext,
    X: np.ndarray,
    rois: np.ndarray,
    batch_indices: np.ndarray,
    *,
    mode: str,
    output_height: int,
    output_width: int,
    sampling_ratio: int,
    spatial_scale: float,
) -> np.ndarray:
    """RoiAlign-10: regions are not shifted by half a pixel (output_half_pixel)."""
    return _roi_align(
        ctx, X, rois, batch_indices, mode, output_height, output_width, sampling_ratio,
        spatial_scale, False,
    )  # fmt: skip


@onnx_op("RoiAlign", since=16)
def roi_align_16(
    ctx: NodeContext,
    X: np.ndarray,
    rois: np.ndarray,
    batch_indices: np.ndarray,
    *,
    coordinate_transformation_mode: str,
    mode: str,
    output_height: int,
    output_width: int,
    sampling_ratio: int,
    spatial_scale: float,
) -> np.ndarray:
    """RoiAlign-16/22: coordinate_transformation_mode half_pixel (default) or output_half_pixel."""
    ctm = coordinate_transformation_mode.lower()
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise ctx.unsupported(
            f"coordinate_transformation_mode {ctm!r}; expected half_pixel or output_half_pixel"
        )
    return _roi_align(
        ctx, X, rois, batch_indices, mode, output_height, output_width, sampling_ratio,
        spatial_scale, ctm == "half_pixel",
    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# NonMaxSuppression


def _optional_scalar(value: np.ndarray | None) -> np.ndarray | None:
    if value is None:
        return None
    value = np.asarray(value).reshape(-1)
    return value if value.size else None


@onnx_op("NonMaxSuppression", since=10)
@onnx_op("NonMaxSuppression", since=11)
def non_max_suppression_10(
    ctx: NodeContext,
    boxes: np.ndarray,
    scores: np.ndarray,
    max_output_boxes_per_class: np.ndarray | None = None,
    iou_threshold: np.ndarray | None = None,
    score_threshold: np.ndarray | None = None,
    *,
    center_point_box: int,
) -> np.ndarray:
    """Greedy per-(batch, class) selection; int64 rows (batch, class, box) in selection order.

    Missing max_output_boxes_per_class selects nothing (spec default 0); missing iou_threshold
    is 0; missing score_threshold filters nothing.
    """
    if center_point_box not in (0, 1):
        raise ctx.unsupported(f"center_point_box {center_point_box}; expected 0 or 1")
    if boxes.ndim != 3 or boxes.shape[2] != 4:
        raise ctx.error(f"boxes must have shape (batches, boxes, 4); found {boxes.shape}")
    if scores.ndim != 3 or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise ctx.error(
            f"scores must have shape (batches, classes, boxes) = ({boxes.shape[0]}, C, "
            f"{boxes.shape[1]}) to match boxes {boxes.shape}; found {scores.shape}"
        )
    mo = _optional_scalar(max_output_boxes_per_class)
    max_out = max(int(mo[0]), 0) if mo is not None else 0
    it = _optional_scalar(iou_threshold)
    iou = np.float32(it[0]) if it is not None else np.float32(0.0)
    st = _optional_scalar(score_threshold)
    n_b, n_c, n_box = scores.shape
    max_out = min(max_out, n_box)
    if max_out == 0 or n_b * n_c == 0:
        return np.empty((0, 3), np.int64)
    bx = np.ascontiguousarray(boxes, dtype=np.float32)
    sc = np.ascontiguousarray(scores, dtype=np.float32)
    # One stable sort of all classes at once (a numpy pass): descending score, ties by index.
    order = np.ascontiguousarray(np.argsort(-sc, axis=-1, kind="stable"), dtype=np.int64)
    out = np.empty((n_b * n_c * max_out, 3), np.int64)
    count = ctx.kernel("vision", "non_max_suppression")(
        bx, sc, order, max_out, iou, np.float32(st[0]) if st is not None else np.float32(0.0),
        st is not None, bool(center_point_box), np.float32(0.5), out,
    )  # fmt: skip
    return out[:count].copy()


# --------------------------------------------------------------------------------------------
# Col2Im


@onnx_op("Col2Im", since=18)
def col2im_18(
    ctx: NodeContext,
    input: np.ndarray,
    image_shape: np.ndarray,
    block_shape: np.ndarray,
    *,
    dilations: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """Col2Im-18: (N, C*prod(block), L) columns summed back into (N, C, *image_shape)."""
    image = [int(v) for v in np.asarray(image_shape).reshape(-1)]
    block = [int(v) for v in np.asarray(block_shape).reshape(-1)]
    d_n = len(image)
    if len(block) != d_n or d_n == 0:
        raise ctx.error(
            f"image_shape {image} and block_shape {block} must have the same non-zero length"
        )
    dil = _ints(ctx, dilations, d_n, 1, "dilations")
    st = _ints(ctx, strides, d_n, 1, "strides")
    pd = _ints(ctx, pads, 2 * d_n, 0, "pads")
    if input.ndim != 3:
        raise ctx.error(f"input must be 3-D (N, C*prod(block_shape), L); found {input.shape}")
    if min(block) <= 0 or min(dil) <= 0 or min(st) <= 0 or min(image) < 0:
        raise ctx.error("block_shape, dilations and strides must be positive")
    limits.check(ctx, (*input.shape[:2], *image), np.float64)
    k_total = int(np.prod(block))
    n, ck, l_n = input.shape
    if ck % k_total:
        raise ctx.error(
            f"input's dimension 1 ({ck}) must be a multiple of prod(block_shape) = {k_total}"
        )
    cols = [
        (image[a] + pd[a] + pd[a + d_n] - (dil[a] * (block[a] - 1) + 1)) // st[a] + 1
        for a in range(d_n)
    ]
    if min(cols) <= 0 or int(np.prod(cols)) != l_n:
        raise ctx.error(
            f"input's dimension 2 ({l_n}) must equal the number of sliding blocks "
            f"{cols} = {int(np.prod(cols))} for image_shape {image}, block_shape {block}, "
            f"dilations {dil}, pads {pd}, strides {st}"
        )
    if input.dtype.kind in "OUS":
        raise ctx.unsupported("string inputs")
    c = ck // k_total
    out_shape = (n, c, *image)
    dt = input.dtype
    if input.size == 0 or int(np.prod(out_shape)) == 0:
        return np.zeros(out_shape, dt)
    if dt.kind == "b":
        data = input.astype(np.int64)
    elif dt.kind in "iufc" and dt.name not in ("float16",):
        data = input
    else:  # float16, bfloat16
        data = input.astype(np.float32)
    data = np.ascontiguousarray(data).reshape(n * c, k_total, l_n)
    i64 = np.int64
    idx = ctx.kernel("vision", "col2im_index")(
        np.asarray(image, i64), np.asarray(block, i64), np.asarray(dil, i64),
        np.asarray(pd[:d_n], i64), np.asarray(st, i64), np.asarray(cols, i64),
    )  # fmt: skip
    out = np.zeros((n * c, int(np.prod(image))), data.dtype)
    # threads split the (image, channel) planes: one plane has nothing to split
    ctx.run_kernel("vision", "col2im_scatter", data.size if n * c > 1 else 0, data, idx, out)
    out = out.reshape(out_shape)
    if dt.kind == "b":
        return out != 0
    return out if out.dtype == dt else out.astype(dt)


# --------------------------------------------------------------------------------------------
# DeformConv


@onnx_op("DeformConv", since=19)
def deform_conv_19(
    ctx: NodeContext,
    X: np.ndarray,
    W: np.ndarray,
    offset: np.ndarray,
    B: np.ndarray | None = None,
    mask: np.ndarray | None = None,
    *,
    dilations: list[int] | None = None,
    group: int,
    kernel_shape: list[int] | None = None,
    offset_group: int,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """DeformConv-19/22 over 2 spatial axes: a deformed im2col (Numba) then a GEMM per group."""
    if X.ndim != 4:
        raise ctx.unsupported(
            f"DeformConv over {X.ndim - 2} spatial axes (X shape {X.shape}); only 2-D is "
            "implemented, as in onnx's reference and onnxruntime"
        )
    n, c, height, width = X.shape
    if W.ndim != 4:
        raise ctx.error(f"W must be 4-D (OC, C/group, kH, kW); found {W.shape}")
    oc = W.shape[0]
    ks = _ints(ctx, kernel_shape, 2, 0, "kernel_shape") if kernel_shape else list(W.shape[2:])
    if tuple(ks) != tuple(W.shape[2:]):
        raise ctx.error(f"kernel_shape {ks} does not match W's spatial shape {W.shape[2:]}")
    kh, kw = ks
    sh, sw = _ints(ctx, strides, 2, 1, "strides")
    dh, dw = _ints(ctx, dilations, 2, 1, "dilations")
    pt, pl, pb, pr = _ints(ctx, pads, 4, 0, "pads")
    group, og = int(group), int(offset_group)
    if group <= 0 or c != W.shape[1] * group or oc % group:
        raise ctx.error(
            f"X has {c} channels, W has shape {W.shape} and group is {group}: expected "
            "C == W.shape[1] * group and OC divisible by group"
        )
    if og <= 0 or c % og:
        raise ctx.error(f"offset_group {og} must divide the {c} input channels")
    oh = (height + pt + pb - ((kh - 1) * dh + 1)) // sh + 1
    ow = (width + pl + pr - ((kw - 1) * dw + 1)) // sw + 1
    if offset.shape != (n, og * kh * kw * 2, oh, ow):
        raise ctx.error(
            f"offset must have shape {(n, og * kh * kw * 2, oh, ow)}; found {offset.shape}"
        )
    if mask is not None and mask.shape != (n, og * kh * kw, oh, ow):
        raise ctx.error(f"mask must have shape {(n, og * kh * kw, oh, ow)}; found {mask.shape}")
    if B is not None and B.shape != (oc,):
        raise ctx.error(f"B must have shape ({oc},); found {B.shape}")
    xs = _compute(X)
    cdt = xs.dtype
    out = np.zeros((n, oc, oh * ow), cdt)
    if out.size and c and kh * kw:
        offs = np.ascontiguousarray(offset, dtype=cdt).reshape(n, og, kh, kw, 2, oh, ow)
        if mask is None:
            msk = np.ones((n, og, kh, kw, oh, ow), cdt)
        else:
            msk = np.ascontiguousarray(mask, dtype=cdt).reshape(n, og, kh, kw, oh, ow)
        geo = np.asarray([kh, kw, sh, sw, pt, pl, dh, dw], np.int64)
        cols = np.empty((c, kh * kw, oh * ow), cdt)
        wm = np.ascontiguousarray(W, dtype=cdt).reshape(oc, -1)
        icg, ocg = c // group, oc // group
        work = cols.size if c > 1 else 0  # threads split the channels
        for b in range(n):
            ctx.run_kernel("vision", "deform_im2col", work, xs[b], offs[b], msk[b], geo, cols)
            for g in range(group):
                cg = cols[g * icg : (g + 1) * icg].reshape(icg * kh * kw, oh * ow)
                # BLAS GEMM: (OC/group, C/group*kH*kW) @ (C/group*kH*kW, OH*OW)
                np.matmul(wm[g * ocg : (g + 1) * ocg], cg, out=out[b, g * ocg : (g + 1) * ocg])
    if B is not None:
        out += B.astype(cdt).reshape(1, oc, 1)
    out = out.reshape(n, oc, oh, ow)
    return out if out.dtype == X.dtype else out.astype(X.dtype)
