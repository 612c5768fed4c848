"""Resize and Upsample against onnx's ReferenceEvaluator.

onnxruntime is the oracle where the reference evaluator has no answer: Resize-10 (the
reference needs coordinate_transformation_mode, which version 10 does not have), the
tf_half_pixel_for_nearest mode (Resize-11 only; the reference does not implement it), and
Upsample with linear mode or non-integer scales (the reference implements integer nearest
only).
"""

from __future__ import annotations

import numpy as np
import pytest
from oracle import check_node

E = np.array([], dtype=np.float32)  # an empty roi/scales input


def data(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 100, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def resize(
    x, opset, *, roi=None, scales=None, sizes=None, oracle="ref", rtol=1e-5, atol=1e-5, **attrs
):
    inputs = {"X": x, "roi": roi, "scales": scales, "sizes": sizes}
    if opset == 10:
        inputs = {"X": x, "scales": scales}
    consts = tuple(k for k in ("roi", "scales", "sizes") if inputs.get(k) is not None)
    return check_node(
        "Resize", inputs, attrs, opset=opset, const_inputs=consts, oracle=oracle,
        rtol=rtol, atol=atol,
    )  # fmt: skip


COORD = [
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
]
SCALES = {
    "up": np.array([1, 1, 2.0, 1.5], np.float32),
    "down": np.array([1, 1, 0.6, 0.5], np.float32),
    "mixed": np.array([1, 1, 1.7, 0.4], np.float32),
}


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coord", COORD)
@pytest.mark.parametrize("which", ["up", "down", "mixed"])
def test_resize19_scales(mode, coord, which):
    x = data((1, 2, 5, 6))
    resize(x, 19, scales=SCALES[which], mode=mode, coordinate_transformation_mode=coord)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coord", ["half_pixel", "align_corners", "pytorch_half_pixel"])
def test_resize19_sizes(mode, coord):
    x = data((2, 1, 4, 7))
    sizes = np.array([2, 1, 9, 3], np.int64)
    resize(x, 19, sizes=sizes, mode=mode, coordinate_transformation_mode=coord)


@pytest.mark.parametrize(
    "nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
)
@pytest.mark.parametrize("coord", COORD)
def test_resize19_nearest_modes(nearest_mode, coord):
    x = data((1, 1, 4, 5))
    sizes = np.array([1, 1, 7, 3], np.int64)
    resize(
        x, 19, sizes=sizes, mode="nearest", nearest_mode=nearest_mode,
        coordinate_transformation_mode=coord,
    )  # fmt: skip


@pytest.mark.parametrize("a", [-0.75, -0.5])
@pytest.mark.parametrize("exclude", [0, 1])
@pytest.mark.parametrize("which", ["up", "down"])
def test_resize19_cubic_options(a, exclude, which):
    x = data((1, 1, 6, 6))
    resize(x, 19, scales=SCALES[which], mode="cubic", cubic_coeff_a=a, exclude_outside=exclude)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("extrap", [0.0, 10.0])
def test_resize19_tf_crop_and_resize(mode, extrap):
    x = data((1, 1, 5, 5))
    roi = np.array([0, 0, -0.2, 0.3, 1, 1, 0.8, 1.3], np.float32)
    sizes = np.array([1, 1, 4, 6], np.int64)
    resize(
        x, 19, roi=roi, sizes=sizes, mode=mode, extrapolation_value=extrap,
        coordinate_transformation_mode="tf_crop_and_resize",
    )  # fmt: skip


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("which", ["down", "mixed", "up"])
def test_resize18_antialias(mode, which):
    x = data((1, 2, 9, 10))
    resize(x, 18, scales=SCALES[which], mode=mode, antialias=1)


def test_resize18_antialias_sizes():
    x = data((1, 1, 16, 12))
    sizes = np.array([1, 1, 5, 7], np.int64)
    resize(x, 18, sizes=sizes, mode="linear", antialias=1)


@pytest.mark.parametrize("axes", [[2, 3], [3, 2], [3], [1]])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize18_axes(axes, mode):
    x = data((1, 3, 4, 5))
    scales = np.array([2.0, 0.5][: len(axes)], np.float32)
    resize(x, 18, scales=scales, mode=mode, axes=axes)


def test_resize18_negative_axes():
    # The reference evaluator mishandles negative axes (it transposes with them as given).
    x = data((1, 3, 4, 5))
    resize(x, 18, scales=np.array([0.5, 2.0], np.float32), mode="linear", axes=[-1, -2],
           oracle="ort")  # fmt: skip


def test_resize18_axes_tf_crop():
    x = data((1, 1, 5, 6))
    roi = np.array([0.1, 0.2, 0.9, 0.7], np.float32)
    sizes = np.array([4, 3], np.int64)
    resize(
        x, 18, roi=roi, sizes=sizes, axes=[3, 2], mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize",
    )  # fmt: skip


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize18_keep_aspect_ratio(policy, mode):
    x = data((1, 1, 4, 6))
    sizes = np.array([7, 8], np.int64)
    resize(x, 18, sizes=sizes, axes=[2, 3], mode=mode, keep_aspect_ratio_policy=policy)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.uint8, np.int8, np.int32])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize19_dtypes(dtype, mode):
    x = data((1, 1, 4, 5), dtype)
    tol = 2e-3 if dtype == np.float16 else 1e-5
    resize(x, 19, scales=SCALES["mixed"], mode=mode, rtol=tol, atol=tol)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize19_shape_classes(mode):
    # 1-D, 3-D, zero-size outer axis, identity scales.
    resize(data((7,)), 19, scales=np.array([1.6], np.float32), mode=mode)
    resize(data((2, 5, 3)), 19, scales=np.array([1, 0.6, 2], np.float32), mode=mode)
    resize(data((0, 1, 3, 3)), 19, scales=np.array([1, 1, 2, 2], np.float32), mode=mode)
    resize(data((1, 1, 3, 3)), 19, scales=np.array([1, 1, 1, 1], np.float32), mode=mode)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize19_large_parallel(mode):
    # Output above the parallel threshold (1 << 17 elements), inner axis > 1 and == 1.
    x = data((2, 3, 120, 130))
    resize(x, 19, scales=np.array([1, 1, 1.5, 1.25], np.float32), mode=mode, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coord", ["half_pixel", "align_corners", "asymmetric"])
def test_resize13(mode, coord):
    x = data((1, 2, 4, 4))
    resize(x, 13, scales=SCALES["mixed"], mode=mode, coordinate_transformation_mode=coord)
    resize(x, 13, sizes=np.array([1, 2, 3, 6], np.int64), mode=mode,
           coordinate_transformation_mode=coord)  # fmt: skip


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize11(mode):
    # Resize-11 requires the roi and scales inputs; empty tensors mean "not given".
    x = data((1, 1, 4, 5))
    resize(x, 11, roi=E, scales=SCALES["up"], mode=mode)
    resize(x, 11, roi=E, scales=E, sizes=np.array([1, 1, 2, 7], np.int64), mode=mode)


def test_resize11_tf_crop_and_resize():
    x = data((1, 1, 4, 4))
    roi = np.array([0, 0, 0.4, 0.6, 1, 1, 0.6, 0.8], np.float32)
    resize(
        x, 11, roi=roi, scales=E, sizes=np.array([1, 1, 3, 3], np.int64), mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize",
    )  # fmt: skip


def test_resize11_tf_half_pixel_for_nearest():
    # Neither oracle implements this mode (Resize-11 only), so the expected value is built here
    # from the spec's formula: x_original = (x_resized + 0.5) / scale, rounded by nearest_mode
    # (round_prefer_floor) and clamped.
    from oracle import assert_close, make_node_model

    import onnxjit

    x = data((1, 1, 4, 5))
    scales = SCALES["mixed"]
    model = make_node_model(
        "Resize", {"X": x, "roi": E, "scales": scales}, {"mode": "nearest",
        "coordinate_transformation_mode": "tf_half_pixel_for_nearest"}, opset=11,
        const_inputs=("roi", "scales"),
    )  # fmt: skip
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, {"X": x})[0]
    want = x
    for axis in (2, 3):
        n_in = x.shape[axis]
        n_out = int(np.floor(float(scales[axis]) * n_in))
        src = (np.arange(n_out) + 0.5) / float(scales[axis])
        idx = np.clip(np.ceil(src - 0.5), 0, n_in - 1).astype(np.int64)
        want = np.take(want, idx, axis=axis)
    assert_close(got, want)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("which", ["up", "down", "mixed"])
def test_resize10(mode, which):
    x = data((1, 2, 5, 6))
    resize(x, 10, scales=SCALES[which], mode=mode, oracle="ort")


def test_resize_bad_scales_count_names_node():
    from oracle import make_node_model

    import onnxjit

    x = data((1, 1, 4, 4))
    model = make_node_model(
        "Resize", {"X": x, "roi": None, "scales": np.array([2, 2], np.float32)}, {},
        opset=19, const_inputs=("scales",),
    )  # fmt: skip
    out = model.graph.output[0].type.tensor_type
    out.elem_type = 1
    for _ in range(4):
        out.shape.dim.add().dim_param = "d"
    sess = onnxjit.InferenceSession(model.SerializeToString())
    with pytest.raises(ValueError, match="scales has 2 entries"):
        sess.run(None, {"X": x})


# ---- Upsample -----------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [7, 8])
def test_upsample7_nearest(opset):
    x = data((1, 2, 3, 4))
    # The reference evaluator implements Upsample-9's scales input only.
    check_node("Upsample", {"X": x}, {"mode": "nearest", "scales": [1.0, 1.0, 2.0, 3.0]},
               opset=opset, oracle="ort")  # fmt: skip


def test_upsample7_linear():
    x = data((1, 2, 3, 4))
    check_node("Upsample", {"X": x}, {"mode": "linear", "scales": [1.0, 1.0, 2.0, 2.5]},
               opset=7, oracle="ort", rtol=1e-5, atol=1e-5)  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_upsample9_nearest(dtype):
    x = data((2, 3, 4), dtype)
    check_node("Upsample", {"X": x, "scales": np.array([1, 2, 3], np.float32)},
               {"mode": "nearest"}, opset=9, const_inputs=("scales",))  # fmt: skip


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample9_fractional(mode):
    x = data((1, 1, 3, 4))
    check_node("Upsample", {"X": x, "scales": np.array([1, 1, 1.5, 2.5], np.float32)},
               {"mode": mode}, opset=9, const_inputs=("scales",), oracle="ort",
               rtol=1e-5, atol=1e-5)  # fmt: skip
