"""Vision operators (GridSample, RoiAlign, NonMaxSuppression, Col2Im, DeformConv) vs the reference.

The oracle is onnx's ReferenceEvaluator, except (each case says so again):

* GridSample-16 is compared with the reference running the same node at opset 20 (the
  reference knows only version 20's mode names);
* NonMaxSuppression with omitted optional inputs uses onnxruntime: the reference fails on a
  missing iou_threshold or max_output_boxes_per_class;
* cases large enough to take the parallel kernels use onnxruntime: the reference loops in
  Python per output element and takes minutes on them;
* empty outputs of GridSample use onnxruntime: the reference returns a flat (0,) array instead
  of the (N, C, *grid spatial) shape;
* RoiAlign-10 uses onnxruntime: the reference has no version-10 behaviour (it applies the
  half_pixel default of version 16, which shifts every region by half a pixel).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from oracle import (
    assert_close,
    check_node,
    declare_outputs_like,
    make_node_model,
    reference_outputs,
)

import onnxjit
from onnxjit.errors import InvalidArgumentError
from onnxjit.ops import vision as vision_ops


def data(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 100, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def grid_of(shape, dtype=np.float32, seed=1, spread=1.3):
    """Normalised sampling coordinates, some outside [-1, 1] to exercise the padding modes."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-spread, spread, size=shape).astype(dtype)


# --------------------------------------------------------------------------------------------
# GridSample

PADDING = ["zeros", "border", "reflection"]


V20_MODE = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest"}


def gridsample16(x, grid, attrs, rtol, atol):
    """Run GridSample-16 in onnxjit; the oracle is the reference on the same node at opset 20.

    The reference knows only version 20's mode names (linear, cubic); for 4-D inputs the two
    versions differ in nothing else. (onnxruntime is no oracle here: it lacks float64, and for
    bicubic with border padding it clamps every tap instead of the coordinate, as PyTorch does,
    while the reference and the conformance cases clamp the coordinate.)
    """
    m16 = make_node_model("GridSample", {"X": x, "grid": grid}, attrs, 16, "", 1, None, ())
    a20 = {**attrs, "mode": V20_MODE[attrs.get("mode", "bilinear")]}
    m20 = make_node_model("GridSample", {"X": x, "grid": grid}, a20, 20, "", 1, None, ())
    feeds = {"X": x, "grid": grid}
    want = reference_outputs(m20, feeds)
    declare_outputs_like(m16, want)
    got = onnxjit.InferenceSession(m16.SerializeToString()).run(None, feeds)
    assert_close(got[0], want[0], rtol, atol, "GridSample-16")


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", PADDING)
@pytest.mark.parametrize("align", [0, 1])
def test_gridsample16(mode, padding, align):
    x = data((2, 3, 5, 6))
    grid = grid_of((2, 4, 7, 2))
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    gridsample16(x, grid, attrs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_gridsample16_dtypes(dtype):
    x = data((1, 2, 4, 5), dtype)
    grid = grid_of((1, 3, 3, 2), dtype)
    # float64: the reference holds denormalised coordinates in float32.
    tol = 1e-2 if dtype == np.float16 else 1e-5
    gridsample16(x, grid, {}, rtol=tol, atol=tol)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", PADDING)
def test_gridsample20_volumetric(mode, padding):
    x = data((1, 2, 3, 4, 5))
    grid = grid_of((1, 2, 3, 2, 3))
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": 0}
    check_node("GridSample", {"X": x, "grid": grid}, attrs, opset=20, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("align", [0, 1])
def test_gridsample20_1d(mode, align):
    x = data((2, 3, 7))
    grid = grid_of((2, 5, 1))
    attrs = {"mode": mode, "padding_mode": "reflection", "align_corners": align}
    check_node("GridSample", {"X": x, "grid": grid}, attrs, opset=20, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int64])
def test_gridsample22_nearest_integers(dtype):
    # Nearest is a gather: exact for integer inputs.
    x = data((1, 2, 4, 4), dtype)
    grid = grid_of((1, 3, 5, 2))
    attrs = {"mode": "nearest", "padding_mode": "border"}
    check_node("GridSample", {"X": x, "grid": grid}, attrs, opset=22)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_gridsample22(mode):
    x = data((2, 2, 6, 5), np.float64)
    grid = grid_of((2, 3, 4, 2), np.float64, spread=1.1)
    attrs = {"mode": mode, "padding_mode": "zeros", "align_corners": 1}
    # rtol 1e-5 for float64: the reference holds denormalised coordinates in float32.
    check_node("GridSample", {"X": x, "grid": grid}, attrs, opset=22, rtol=1e-5, atol=1e-6)


def test_gridsample_empty():
    # onnxruntime: the reference returns a flat (0,) array for an empty output.
    x = data((0, 2, 4, 4))
    grid = grid_of((0, 3, 5, 2))
    check_node("GridSample", {"X": x, "grid": grid}, {}, opset=20, oracle="ort")
    x = data((1, 2, 4, 4))
    grid = grid_of((1, 0, 5, 2))
    check_node("GridSample", {"X": x, "grid": grid}, {}, opset=20, oracle="ort")


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_gridsample_parallel(mode):
    # Above the parallel threshold (cubic: the tap kernel too); onnxruntime: the reference
    # needs minutes for this size. Zeros padding for cubic: onnxruntime clamps cubic taps at the
    # border instead of the coordinate (see gridsample16).
    x = data((1, 8, 40, 40))
    grid = grid_of((1, 128, 128, 2), spread=1.05)
    attrs = {"mode": mode, "padding_mode": "border" if mode == "linear" else "zeros"}
    check_node(
        "GridSample", {"X": x, "grid": grid}, attrs, opset=20, oracle="ort", rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_gridsample20_chunks(mode, monkeypatch):
    # A tiny tap budget splits the output points into many chunks (the last one partial).
    monkeypatch.setattr(vision_ops, "_TAP_BUDGET", 50)
    x = data((2, 2, 3, 4, 5))
    grid = grid_of((2, 3, 2, 3, 3))
    attrs = {"mode": mode, "padding_mode": "reflection", "align_corners": 1}
    check_node("GridSample", {"X": x, "grid": grid}, attrs, opset=20, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------------------------
# RoiAlign


def rois_of(n_rois, height, width, seed=2, dtype=np.float32):
    rng = np.random.default_rng(seed)
    y = np.sort(rng.uniform(-1, height + 1, size=(n_rois, 2)), axis=1)
    x = np.sort(rng.uniform(-1, width + 1, size=(n_rois, 2)), axis=1)
    return np.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], axis=1).astype(dtype)


def roi_inputs(dtype=np.float32, n=2, c=3, h=10, w=9, r=5):
    x = data((n, c, h, w), dtype)
    rois = rois_of(r, h, w, dtype=dtype)
    bidx = (np.arange(r) % n).astype(np.int64)
    return {"X": x, "rois": rois, "batch_indices": bidx}


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_roialign16(mode, ctm, sampling_ratio):
    attrs = {
        "mode": mode,
        "coordinate_transformation_mode": ctm,
        "output_height": 3,
        "output_width": 4,
        "sampling_ratio": sampling_ratio,
        "spatial_scale": 0.8,
    }
    check_node("RoiAlign", roi_inputs(), attrs, opset=16, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_roialign22(dtype):
    attrs = {"output_height": 2, "output_width": 2}
    tol = 1e-2 if dtype == np.float16 else 1e-5
    check_node("RoiAlign", roi_inputs(dtype), attrs, opset=22, rtol=tol, atol=tol)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roialign10(mode):
    # onnxruntime: the reference applies version 16's half_pixel default at opset 10.
    attrs = {"mode": mode, "output_height": 3, "output_width": 2, "sampling_ratio": 2}
    check_node("RoiAlign", roi_inputs(), attrs, opset=10, oracle="ort", rtol=1e-4, atol=1e-5)


def test_roialign_empty():
    check_node("RoiAlign", roi_inputs(r=0), {"output_height": 2}, opset=16)


def test_roialign_parallel():
    # Above the parallel threshold; onnxruntime: the reference takes minutes at this size.
    inputs = roi_inputs(n=1, c=64, h=20, w=20, r=8)
    attrs = {"output_height": 16, "output_width": 16, "sampling_ratio": 1}
    check_node("RoiAlign", inputs, attrs, opset=16, oracle="ort", rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------------------------
# NonMaxSuppression


def nms_inputs(n_b=2, n_c=3, n_box=12, center=False, seed=3):
    rng = np.random.default_rng(seed)
    if center:
        boxes = np.concatenate(
            [rng.uniform(0, 10, (n_b, n_box, 2)), rng.uniform(1, 4, (n_b, n_box, 2))], axis=2
        )
    else:
        a = rng.uniform(0, 10, (n_b, n_box, 2))
        b = a + rng.uniform(-4, 4, (n_b, n_box, 2))  # some flipped corners
        boxes = np.stack([a[..., 0], a[..., 1], b[..., 0], b[..., 1]], axis=2)
    scores = rng.uniform(0, 1, (n_b, n_c, n_box)).round(1)  # ties ordered by box index
    return boxes.astype(np.float32), scores.astype(np.float32)


NMS_CONST = ("max_output_boxes_per_class", "iou_threshold", "score_threshold")


@pytest.mark.parametrize("opset", [10, 11])
@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("with_score", [False, True])
def test_nms(opset, center, with_score):
    boxes, scores = nms_inputs(center=bool(center))
    inputs = {
        "boxes": boxes,
        "scores": scores,
        "max_output_boxes_per_class": np.array([4], np.int64),
        "iou_threshold": np.array([0.3], np.float32),
        "score_threshold": np.array([0.35], np.float32) if with_score else None,
    }
    consts = tuple(k for k in NMS_CONST if inputs[k] is not None)
    check_node(
        "NonMaxSuppression", inputs, {"center_point_box": center}, opset=opset,
        const_inputs=consts,
    )  # fmt: skip


@pytest.mark.parametrize("which", ["no_optional", "no_max", "zero_max", "huge_max"])
def test_nms11_optional_inputs(which):
    boxes, scores = nms_inputs(n_b=1, n_c=2)
    inputs = {"boxes": boxes, "scores": scores}
    if which == "zero_max":
        inputs["max_output_boxes_per_class"] = np.array([0], np.int64)
    elif which == "huge_max":
        inputs["max_output_boxes_per_class"] = np.array([2**40], np.int64)
        inputs["iou_threshold"] = np.array([0.5], np.float32)
    elif which == "no_max":
        inputs["max_output_boxes_per_class"] = None
        inputs["iou_threshold"] = np.array([0.5], np.float32)
    consts = tuple(k for k in NMS_CONST if inputs.get(k) is not None)
    # onnxruntime: the reference fails when iou_threshold or max_output_boxes_per_class is absent.
    check_node("NonMaxSuppression", inputs, {}, opset=11, const_inputs=consts, oracle="ort")


def test_nms11_no_boxes():
    boxes, scores = nms_inputs(n_b=1, n_c=2, n_box=0)
    inputs = {"boxes": boxes, "scores": scores, "max_output_boxes_per_class": np.array([3])}
    # onnxruntime: the reference fails when iou_threshold is absent.
    check_node(
        "NonMaxSuppression", inputs, {}, opset=11, const_inputs=("max_output_boxes_per_class",),
        oracle="ort",
    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# Col2Im


def col2im(x, image, block, opset=18, rtol=1e-5, atol=1e-5, oracle="ref", **attrs):
    inputs = {
        "input": x,
        "image_shape": np.array(image, np.int64),
        "block_shape": np.array(block, np.int64),
    }
    return check_node(
        "Col2Im", inputs, attrs, opset=opset, rtol=rtol, atol=atol, oracle=oracle,
        const_inputs=("image_shape", "block_shape"),
    )  # fmt: skip


def n_cols(image, block, dil, pads, strides):
    d = len(image)
    return int(
        np.prod(
            [
                (image[a] + pads[a] + pads[a + d] - (dil[a] * (block[a] - 1) + 1)) // strides[a] + 1
                for a in range(d)
            ]
        )
    )


COL2IM_2D = {
    "plain": dict(dilations=[1, 1], pads=[0, 0, 0, 0], strides=[1, 1]),
    "strides": dict(dilations=[1, 1], pads=[0, 0, 0, 0], strides=[2, 3]),
    "pads": dict(dilations=[1, 1], pads=[1, 0, 2, 1], strides=[1, 1]),
    "dilations": dict(dilations=[2, 1], pads=[0, 1, 0, 1], strides=[1, 2]),
}


@pytest.mark.parametrize("geo", list(COL2IM_2D))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.float16])
def test_col2im18_2d(geo, dtype):
    attrs = COL2IM_2D[geo]
    image, block = [7, 6], [2, 3]
    cols = n_cols(image, block, attrs["dilations"], attrs["pads"], attrs["strides"])
    x = data((2, 2 * 6, cols), dtype)
    tol = 1e-2 if dtype == np.float16 else 1e-5
    col2im(x, image, block, rtol=tol, atol=tol, **attrs)


def test_col2im18_3d_defaults():
    image, block = [4, 5, 3], [2, 2, 2]
    x = data((1, 3 * 8, n_cols(image, block, [1] * 3, [0] * 6, [1] * 3)))
    col2im(x, image, block)


def test_col2im18_bool():
    # The reference accumulates booleans with +=, a logical or.
    image, block = [4, 4], [2, 2]
    x = data((1, 4, 9), np.int32) % 3 == 0
    col2im(x, image, block)


def test_col2im18_empty_batch():
    # onnxruntime: the reference cannot build an output without a first batch item.
    image, block = [4, 4], [2, 2]
    col2im(np.zeros((0, 8, 9), np.float32), image, block, oracle="ort")


def test_col2im18_parallel():
    # Above the parallel threshold; onnxruntime: the reference loops in Python per element.
    image, block = [40, 40], [3, 3]
    x = data((4, 16 * 9, n_cols(image, block, [1, 1], [1, 1, 1, 1], [1, 1])))
    col2im(x, image, block, oracle="ort", pads=[1, 1, 1, 1])


# --------------------------------------------------------------------------------------------
# DeformConv


def deform_inputs(
    n=1, c=4, h=5, w=6, oc=4, k=(2, 2), group=1, og=1, stride=(1, 1), pads=(0, 0, 0, 0),
    dil=(1, 1), mask=False, bias=False, dtype=np.float32, seed=4,
):  # fmt: skip
    rng = np.random.default_rng(seed)
    oh = (h + pads[0] + pads[2] - ((k[0] - 1) * dil[0] + 1)) // stride[0] + 1
    ow = (w + pads[1] + pads[3] - ((k[1] - 1) * dil[1] + 1)) // stride[1] + 1
    inputs = {
        "X": rng.standard_normal((n, c, h, w)).astype(dtype),
        "W": rng.standard_normal((oc, c // group, *k)).astype(dtype),
        "offset": rng.uniform(-1.5, 1.5, (n, og * k[0] * k[1] * 2, oh, ow)).astype(dtype),
        "B": rng.standard_normal(oc).astype(dtype) if bias else None,
        "mask": rng.uniform(0, 1, (n, og * k[0] * k[1], oh, ow)).astype(dtype) if mask else None,
    }
    attrs = {
        "group": group,
        "offset_group": og,
        "strides": list(stride),
        "pads": list(pads),
        "dilations": list(dil),
        "kernel_shape": list(k),
    }
    return inputs, attrs


DEFORM = {
    "plain": {},
    "mask_bias": dict(mask=True, bias=True),
    "bias_only": dict(bias=True),
    "groups": dict(group=2, og=2, mask=True),
    "offset_groups": dict(og=4),
    "strided_padded": dict(stride=(2, 1), pads=(1, 0, 1, 2), dil=(1, 2)),
}


@pytest.mark.parametrize("case", list(DEFORM))
def test_deformconv19(case):
    inputs, attrs = deform_inputs(**DEFORM[case])
    check_node("DeformConv", inputs, attrs, opset=19, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_deformconv22(dtype):
    inputs, attrs = deform_inputs(n=2, c=2, oc=3, mask=True, bias=True, dtype=dtype)
    # float64: the reference samples through GridSample, which holds coordinates in float32.
    tol = 2e-2 if dtype == np.float16 else 1e-5
    check_node("DeformConv", inputs, attrs, opset=22, rtol=tol, atol=tol)


def test_deformconv_parallel():
    # Above the parallel threshold; onnxruntime: the reference runs one GridSample per
    # (output channel, input channel, output pixel) and takes minutes at this size.
    inputs, attrs = deform_inputs(c=8, h=50, w=50, oc=4, k=(3, 3), og=2, mask=True, bias=True)
    check_node("DeformConv", inputs, attrs, opset=19, oracle="ort", rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------------------------
# Other element types (bfloat16 from opset 22; GridSample and Col2Im take every numeric type)


def test_gridsample22_complex_linear():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((1, 2, 4, 5)) + 1j * rng.standard_normal((1, 2, 4, 5))).astype(
        np.complex64
    )
    grid = grid_of((1, 3, 3, 2))
    check_node("GridSample", {"X": x, "grid": grid}, {}, opset=22, rtol=1e-4, atol=1e-5)


def test_gridsample22_bool_nearest():
    x = data((1, 2, 4, 5)) > 0
    grid = grid_of((1, 3, 3, 2))
    check_node("GridSample", {"X": x, "grid": grid}, {"mode": "nearest"}, opset=22)


def test_gridsample22_bfloat16():
    x = data((1, 2, 4, 5)).astype(ml_dtypes.bfloat16)
    grid = grid_of((1, 3, 3, 2)).astype(ml_dtypes.bfloat16)
    check_node("GridSample", {"X": x, "grid": grid}, {}, opset=22, rtol=2e-2, atol=2e-2)


def test_roialign22_bfloat16():
    inputs = roi_inputs()
    inputs["X"] = inputs["X"].astype(ml_dtypes.bfloat16)
    inputs["rois"] = inputs["rois"].astype(ml_dtypes.bfloat16)
    attrs = {"output_height": 2, "output_width": 3}
    check_node("RoiAlign", inputs, attrs, opset=22, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [np.complex128, np.int8, "bfloat16"])
def test_col2im18_more_types(dtype):
    image, block = [4, 4], [2, 2]
    if dtype == np.complex128:
        rng = np.random.default_rng(6)
        x = (rng.standard_normal((1, 4, 9)) + 1j * rng.standard_normal((1, 4, 9))).astype(dtype)
    elif dtype == "bfloat16":
        x = data((1, 4, 9)).astype(ml_dtypes.bfloat16)
    else:
        x = (data((1, 4, 9), np.int32) - 50).astype(dtype)
    tol = 2e-2 if dtype == "bfloat16" else 1e-6
    col2im(x, image, block, rtol=tol, atol=tol)


def test_deformconv22_bfloat16():
    inputs, attrs = deform_inputs(c=2, oc=2, mask=True, bias=True)
    for k, v in inputs.items():
        if v is not None:
            inputs[k] = v.astype(ml_dtypes.bfloat16)
    check_node("DeformConv", inputs, attrs, opset=22, rtol=5e-2, atol=5e-2)


# --------------------------------------------------------------------------------------------
# Invalid inputs raise errors that name the node


FLOAT_4D = np.zeros((0, 0, 0, 0), np.float32)


def run_invalid(op, inputs, attrs, opset, const_inputs=(), out=FLOAT_4D):
    model = make_node_model(op, inputs, attrs, opset, "", 1, None, const_inputs)
    declare_outputs_like(model, [out])  # the output's type and rank; no oracle runs here
    feeds = {k: v for k, v in inputs.items() if v is not None and k not in const_inputs}
    sess = onnxjit.InferenceSession(model.SerializeToString())
    with pytest.raises(InvalidArgumentError):
        sess.run(None, feeds)


def test_invalid_inputs():
    inputs = roi_inputs()
    inputs["batch_indices"] = np.array([0, 1, 2, 0, 1], np.int64)  # X has 2 batch items
    run_invalid("RoiAlign", inputs, {}, 16)
    boxes, scores = nms_inputs()
    nms = {"boxes": boxes, "scores": scores[:, :, :5]}
    run_invalid("NonMaxSuppression", nms, {}, 11, out=np.zeros((0, 3), np.int64))
    col = {
        "input": data((1, 4, 8)),  # 9 columns expected for a 4x4 image and 2x2 blocks
        "image_shape": np.array([4, 4], np.int64),
        "block_shape": np.array([2, 2], np.int64),
    }
    run_invalid("Col2Im", col, {}, 18, const_inputs=("image_shape", "block_shape"))
    grid = grid_of((2, 3, 3, 3))  # 3 coordinates for a 2-D image
    run_invalid("GridSample", {"X": data((2, 1, 4, 4)), "grid": grid}, {}, 20)
    d_in, d_attrs = deform_inputs()
    d_in["offset"] = d_in["offset"][:, :4]
    run_invalid("DeformConv", d_in, d_attrs, 19)
