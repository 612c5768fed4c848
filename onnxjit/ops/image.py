"""Image operators: ImageDecoder-20.

Decoding is a library call (Pillow), not a compute loop, so there is no Numba kernel here:
the codecs (libjpeg-turbo, libpng, libtiff, libwebp, OpenJPEG) do the work. Pillow is an
optional dependency (``pip install onnxjit[image]``); it is imported on the first run of an
ImageDecoder node, so models without one never need it.

Registered versions: ImageDecoder 20 (the only version).

Contract (ONNX ImageDecoder-20):

* input: a 1-D uint8 tensor holding one encoded image (BMP, JPEG, JPEG 2000, TIFF, PNG, WebP,
  PBM/PGM/PPM/PNM: whatever the installed Pillow can open);
* output: uint8, channel-last, ``(H, W, 3)`` for ``pixel_format`` ``"RGB"`` or ``"BGR"`` and
  ``(H, W, 1)`` for ``"Grayscale"``. Images stored with another mode (palette, grey, alpha,
  CMYK, 16-bit) are converted with Pillow's ``Image.convert``; Grayscale uses Pillow's "L"
  conversion (ITU-R 601-2 luma, L = R*299/1000 + G*587/1000 + B*114/1000), which is what the
  ONNX reference evaluator and the ONNX conformance data use. 16-bit grey images (Pillow modes
  ``I;16*``) keep their high byte (value >> 8), as OpenCV's decoder does, where Pillow's
  conversion would clip every value above 255;
* a stream that cannot be decoded gives an empty ``(0, 0, C)`` output, as the operator's
  specification says ("it will return an empty matrix").

JPEG: Pillow decodes with libjpeg(-turbo)'s default "fancy" chroma upsampling, the method the
specification describes.
"""

from __future__ import annotations

import io

import numpy as np

from onnxjit import limits
from onnxjit.registry import NodeContext, onnx_op

_CHANNELS = {"RGB": 3, "BGR": 3, "Grayscale": 1}


def _pil_image():
    """Pillow's Image module, or a clear ImportError saying how to install it."""
    try:
        import PIL.Image  # noqa: PLC0415 - optional dependency, imported on first use
    except ImportError as e:
        raise ImportError(
            "the ImageDecoder operator needs Pillow, which is not installed; install it with "
            "`pip install onnxjit[image]` (or `pip install pillow`)"
        ) from e
    return PIL.Image


@onnx_op("ImageDecoder", since=20)
def image_decoder_20(
    ctx: NodeContext, encoded_stream: np.ndarray, *, pixel_format: str
) -> np.ndarray:
    """Decode one encoded image into a uint8 (H, W, C) array in the requested pixel format."""
    if pixel_format not in _CHANNELS:
        raise ctx.unsupported(
            f"pixel_format {pixel_format!r} is not supported; expected one of {sorted(_CHANNELS)}"
        )
    data = np.asarray(encoded_stream)
    if data.dtype != np.uint8:
        raise ctx.error(
            f"encoded_stream must be a uint8 tensor, found {data.dtype}; pass the file's bytes "
            "as np.frombuffer(data, dtype=np.uint8)"
        )
    if data.ndim != 1:
        raise ctx.error(
            f"encoded_stream must be 1-D (the bytes of one encoded image), found shape "
            f"{data.shape}; flatten it or decode one image per run"
        )
    image_mod = _pil_image()
    channels = _CHANNELS[pixel_format]
    try:
        img = image_mod.open(io.BytesIO(data.tobytes()))
        # the header's size, before decoding: a small stream may claim a huge image
        limits.check(ctx, (img.height, img.width, 4), np.uint8, "decoded image")
        img.load()
        if img.mode.startswith("I;16"):
            # 16-bit grey: Pillow's convert clips to 255; keep the high byte instead (the
            # scaling OpenCV's imdecode applies), then replicate to the requested channels.
            # numpy one-pass array operations.
            high = (np.asarray(img).astype(np.uint16) >> 8).astype(np.uint8)
            return np.ascontiguousarray(np.repeat(high[:, :, np.newaxis], channels, axis=2))
        if pixel_format == "Grayscale":
            arr = np.asarray(img.convert("L") if img.mode != "L" else img)
        else:
            arr = np.asarray(img.convert("RGB") if img.mode != "RGB" else img)
    except (OSError, ValueError, SyntaxError, image_mod.DecompressionBombError):
        # The specification asks for an empty matrix when the stream cannot be decoded
        # (corrupted stream, unknown format); Pillow raises these for such data.
        return np.zeros((0, 0, channels), dtype=np.uint8)
    if pixel_format == "Grayscale":
        return np.ascontiguousarray(arr, dtype=np.uint8)[:, :, np.newaxis]
    if pixel_format == "BGR":
        return np.ascontiguousarray(arr[:, :, ::-1], dtype=np.uint8)
    return np.array(arr, dtype=np.uint8)
