"""ImageDecoder-20 (onnxjit/ops/image.py).

Oracle: onnx.reference.ReferenceEvaluator (Pillow underneath, as the ONNX conformance data) for
images stored in the requested layout. For images stored in another mode (RGBA, grey, palette)
the reference evaluator returns Pillow's raw array (4 channels, or 2-D), which the operator's
specification does not allow (RGB/BGR output is (H, W, 3)); there the oracle is Pillow's own
``Image.convert("RGB")``, which is the documented conversion.
"""

from __future__ import annotations

import io
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from oracle import check_node

import onnxjit

PIL_Image = pytest.importorskip("PIL.Image", reason="ImageDecoder tests need Pillow (image extra)")

RNG = np.random.default_rng(7)


def _encode(img, fmt: str) -> np.ndarray:
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return np.frombuffer(buf.getvalue(), dtype=np.uint8)


def _rgb_image(h: int = 12, w: int = 17):
    # Blocks of colour (like the conformance data) plus noise, so channel order matters.
    arr = np.kron(RNG.integers(0, 256, (3, 4, 3)), np.ones((4, 5, 1))).astype(np.uint8)
    arr = arr[:h, :w]
    arr = np.pad(arr, ((0, h - arr.shape[0]), (0, w - arr.shape[1]), (0, 0)), mode="edge")
    return PIL_Image.fromarray(arr, "RGB")


def _session(pixel_format: str | None = None) -> onnxjit.InferenceSession:
    attrs = {} if pixel_format is None else {"pixel_format": pixel_format}
    node = helper.make_node("ImageDecoder", ["data"], ["out"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("data", TensorProto.UINT8, ["n"])],
        [helper.make_tensor_value_info("out", TensorProto.UINT8, ["h", "w", "c"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    return onnxjit.InferenceSession(model.SerializeToString())


FORMATS = ["PNG", "BMP", "JPEG", "TIFF", "WEBP", "PPM", "JPEG2000"]


@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_formats_against_reference(fmt, pixel_format):
    data = _encode(_rgb_image(), fmt)
    got = check_node("ImageDecoder", {"data": data}, attrs={"pixel_format": pixel_format}, opset=20)
    assert got[0].shape == (12, 17, 1 if pixel_format == "Grayscale" else 3)
    assert got[0].flags.c_contiguous


def test_default_pixel_format_is_rgb():
    data = _encode(_rgb_image(), "PNG")
    check_node("ImageDecoder", {"data": data}, opset=20)


@pytest.mark.parametrize(
    ("mode", "fmt"),
    [("RGBA", "PNG"), ("L", "PNG"), ("P", "GIF"), ("CMYK", "JPEG"), ("LA", "PNG")],
)
@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
def test_other_stored_modes_are_converted(mode, fmt, pixel_format):
    # The reference evaluator returns these modes unconverted (see the module docstring).
    src = _rgb_image().convert(mode)
    data = _encode(src, fmt)
    decoded = PIL_Image.open(io.BytesIO(data.tobytes()))
    if pixel_format == "Grayscale":
        want = np.asarray(decoded.convert("L"))[:, :, None]
    else:
        want = np.asarray(decoded.convert("RGB"))
        if pixel_format == "BGR":
            want = want[:, :, ::-1]
    (got,) = _session(pixel_format).run(None, {"data": data})
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("pixel_format", "channels"), [("RGB", 3), ("BGR", 3), ("Grayscale", 1)])
def test_16_bit_grey_keeps_the_high_byte(pixel_format, channels):
    # Pillow's convert would clip to 255 (and the reference evaluator returns uint16); the
    # operator outputs uint8, so the high byte is kept (OpenCV's scaling of 16-bit images).
    grey = (np.arange(12 * 17).reshape(12, 17) * 300).astype(np.uint16)
    data = _encode(PIL_Image.fromarray(grey), "PNG")
    (got,) = _session(pixel_format).run(None, {"data": data})
    want = np.repeat((grey >> 8).astype(np.uint8)[:, :, None], channels, axis=2)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("pixel_format", "channels"), [("RGB", 3), ("Grayscale", 1)])
@pytest.mark.parametrize(
    "data",
    [np.zeros(0, np.uint8), np.frombuffer(b"not an image at all", np.uint8)],
    ids=["empty", "garbage"],
)
def test_undecodable_stream_gives_empty_output(data, pixel_format, channels):
    # The specification: "If it can't decode for any reason ... it will return an empty matrix".
    (got,) = _session(pixel_format).run(None, {"data": data})
    assert got.dtype == np.uint8
    assert got.shape == (0, 0, channels)


def test_truncated_png_gives_empty_output():
    data = _encode(_rgb_image(), "PNG")[:60]
    (got,) = _session("RGB").run(None, {"data": data})
    assert got.shape == (0, 0, 3)


def test_bad_pixel_format_is_reported():
    data = _encode(_rgb_image(), "PNG")
    with pytest.raises(onnxjit.errors.OnnxJitError, match="pixel_format"):
        _session("YUV").run(None, {"data": data})


def test_missing_pillow_names_the_extra(monkeypatch):
    sess = _session("RGB")
    data = _encode(_rgb_image(), "PNG")
    monkeypatch.setitem(sys.modules, "PIL", None)
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    with pytest.raises(Exception, match=r"onnxjit\[image\]"):
        sess.run(None, {"data": data})


def test_opset_selects_version_20():
    # The node resolves to ImageDecoder-20 at later opsets too.
    node = helper.make_node("ImageDecoder", ["data"], ["out"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("data", TensorProto.UINT8, ["n"])],
        [helper.make_tensor_value_info("out", TensorProto.UINT8, ["h", "w", "c"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    onnx.checker.check_model(model)
    img = _rgb_image()
    (got,) = onnxjit.InferenceSession(model.SerializeToString()).run(
        None, {"data": _encode(img, "PNG")}
    )
    np.testing.assert_array_equal(got, np.asarray(img))
