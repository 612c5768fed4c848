"""Signal-processing operators: DFT, STFT, MelWeightMatrix and the window generators.

The Fourier transforms run through numpy.fft (pocketfft: a well-kept library used as BLAS is
for contractions). Complex values travel as a trailing axis of length 2 (real, imaginary);
real inputs have a trailing axis of length 1. float16/bfloat16 inputs are transformed in
float32 and cast back; float32 stays single precision (numpy 2's pocketfft has a float32
path) and float64 double.

Registered versions:

* DFT 17 (``axis`` attribute, default 1) and 20 (``axis`` moved to an optional input, default
  -2). One body serves both: forward (``onesided=0``: full complex spectrum; ``onesided=1``:
  RFFT, the ``floor(n/2) + 1`` non-redundant bins), inverse (``onesided=0``: complex inverse
  DFT with the 1/n scaling; ``onesided=1``: IRFFT, a one-sided spectrum to a real signal of
  ``dft_length`` samples, default ``2 * (bins - 1)``). ``dft_length`` zero-pads or truncates
  the signal (the one-sided spectrum for IRFFT). A complex input with ``onesided=1, inverse=0``
  (which the spec does not define) gets the first ``floor(n/2) + 1`` bins of its full
  spectrum, as the reference evaluator does; a real input to the inverse is read as complex
  with zero imaginary part.
* STFT 17: frames of ``frame_length`` samples every ``frame_step`` samples, each multiplied by
  ``window`` (all ones when absent) and transformed; ``onesided`` (default 1) keeps the
  ``frame_length // 2 + 1`` non-redundant bins.
* MelWeightMatrix 17: the triangular filter bank (a Numba kernel, data-dependent triangle
  extents) whose band edges are ``num_mel_bins + 2`` points equally spaced on the mel scale
  ``2595 * log10(1 + f / 700)`` between the edge frequencies, mapped to spectrogram bins as
  ``floor((dft_length + 1) * f / sample_rate)``.
* HannWindow, HammingWindow, BlackmanWindow 17: generalised cosine windows over
  ``N = size`` (periodic, default) or ``N = size - 1`` (symmetric) points, computed in
  double precision and cast to ``output_datatype``; a size-1 symmetric window divides 0 by 0
  and is NaN, as the schemas' function bodies define it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit import limits, types
from onnxjit.registry import NodeContext, onnx_op

_LOW_FLOATS = ("float16", "bfloat16")
_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _scalar_int(ctx: NodeContext, value: Any, what: str) -> int:
    arr = np.asarray(value)
    if arr.size != 1 or arr.dtype.kind not in "iu":
        raise ctx.error(
            f"{what} must be a single int32/int64 value, found {arr.dtype} of shape "
            f"{list(arr.shape)}"
        )
    return int(arr.reshape(-1)[0])


def _scalar_float(ctx: NodeContext, value: Any, what: str) -> float:
    arr = np.asarray(value)
    if arr.size != 1 or (arr.dtype.kind not in "iuf" and arr.dtype.name != "bfloat16"):
        raise ctx.error(
            f"{what} must be a single number, found {arr.dtype} of shape {list(arr.shape)}"
        )
    return float(arr.reshape(-1)[0].astype(np.float64))


def _work_dtype(ctx: NodeContext, x: np.ndarray, what: str) -> np.dtype:
    """The real dtype the transform runs in (float32 for float16/bfloat16)."""
    if x.dtype.name not in _FLOATS:
        raise ctx.error(f"{what} must be float16, bfloat16, float or double, found {x.dtype}")
    return np.dtype(np.float32) if x.dtype.name in _LOW_FLOATS else x.dtype


def _as_signal(x: np.ndarray, work: np.dtype) -> np.ndarray:
    """The values of an ``[..., 1]`` (real) or ``[..., 2]`` (complex) tensor as a real or
    complex numpy array without the trailing axis (a view where the layout allows it)."""
    x = np.ascontiguousarray(x, dtype=work)
    if x.shape[-1] == 1:
        return x[..., 0]
    # A contiguous (..., 2) array of floats is a (..., 1) array of complex numbers: no copy.
    cplx = np.complex64 if work == np.float32 else np.complex128
    return x.view(cplx)[..., 0]


def _as_pairs(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A complex array as the ``[..., 2]`` real/imaginary layout, in ``dtype``."""
    y = np.ascontiguousarray(y)
    real = np.float32 if y.dtype == np.complex64 else np.float64
    pairs = y.view(real).reshape(y.shape + (2,))
    return pairs.astype(dtype, copy=False)


def _dft(
    ctx: NodeContext, x: Any, dft_length: Any, axis: int, inverse: int, onesided: int
) -> np.ndarray:
    x = np.asarray(x)
    work = _work_dtype(ctx, x, "'input'")
    r = x.ndim
    if r < 2 or x.shape[-1] not in (1, 2):
        raise ctx.error(
            f"'input' must have rank >= 2 and a last dimension of 1 (real) or 2 (complex), "
            f"found shape {list(x.shape)}"
        )
    if not (-r <= axis <= -2 or 0 <= axis <= r - 2):
        raise ctx.error(
            f"axis {axis} is out of range for an input of rank {r}; expected a value in "
            f"[{-r}, -2] or [0, {r - 2}] (the last dimension holds real/imaginary parts)"
        )
    a = axis % r
    irfft = bool(inverse) and bool(onesided)
    if dft_length is None:
        n = 2 * (x.shape[a] - 1) if irfft else x.shape[a]
    else:
        n = _scalar_int(ctx, dft_length, "'dft_length'")
    if n < 1:
        raise ctx.error(
            f"the transform length must be >= 1, found {n} (axis {a} of 'input' has "
            f"{x.shape[a]} entries); pass a positive 'dft_length'"
        )
    limits.check(ctx, x.shape[:a] + (n,) + x.shape[a + 1 : -1] + (2,), np.float64)
    sig = _as_signal(x, work)
    if irfft:
        # One-sided spectrum -> real signal of n samples (numpy pads/truncates the bins).
        y = np.fft.irfft(sig, n=n, axis=a)
        return np.ascontiguousarray(y[..., None]).astype(x.dtype, copy=False)
    if inverse:
        y = np.fft.ifft(sig, n=n, axis=a)
    elif onesided and sig.dtype.kind == "f":
        y = np.fft.rfft(sig, n=n, axis=a)
    else:
        y = np.fft.fft(sig, n=n, axis=a)
        if onesided:
            y = y[(slice(None),) * a + (slice(0, n // 2 + 1),)]
    return _as_pairs(y, x.dtype)


@onnx_op("DFT", since=17)
def dft_17(ctx, input, dft_length=None, *, axis, inverse, onesided):
    """Discrete Fourier transform of ``input`` along the ``axis`` attribute (see the module
    docstring for the four modes and ``dft_length``)."""
    return _dft(ctx, input, dft_length, int(axis), inverse, onesided)


@onnx_op("DFT", since=20)
def dft_20(ctx, input, dft_length=None, axis=None, *, inverse, onesided):
    """DFT-17 with ``axis`` an optional scalar input (default -2, the last signal axis)."""
    a = -2 if axis is None else _scalar_int(ctx, axis, "'axis'")
    return _dft(ctx, input, dft_length, a, inverse, onesided)


# ---------------------------------------------------------------------------------------------
# STFT


@onnx_op("STFT", since=17)
def stft_17(ctx, signal, frame_step, window=None, frame_length=None, *, onesided):
    """Short-time Fourier transform of a ``[batch, length, 1|2]`` signal: output
    ``[batch, frames, bins, 2]`` with ``frames = (length - frame_length) // frame_step + 1``
    and ``bins = frame_length // 2 + 1`` when ``onesided`` else ``frame_length``."""
    x = np.asarray(signal)
    work = _work_dtype(ctx, x, "'signal'")
    if x.ndim != 3 or x.shape[-1] not in (1, 2):
        raise ctx.error(
            f"'signal' must have shape [batch, length, 1] (real) or [batch, length, 2] "
            f"(complex), found {list(x.shape)}"
        )
    length = x.shape[1]
    step = _scalar_int(ctx, frame_step, "'frame_step'")
    if step < 1:
        raise ctx.error(f"'frame_step' must be >= 1, found {step}")
    win = None
    if window is not None:
        win = np.asarray(window)
        if win.ndim != 1:
            raise ctx.error(f"'window' must be 1-D, found shape {list(win.shape)}")
    if frame_length is not None:
        flen = _scalar_int(ctx, frame_length, "'frame_length'")
        if win is not None and win.shape[0] != flen:
            raise ctx.error(
                f"'window' has {win.shape[0]} entries but 'frame_length' is {flen}; they "
                f"must be equal"
            )
    else:
        flen = win.shape[0] if win is not None else length
    if not 1 <= flen <= length:
        raise ctx.error(
            f"the frame length must be in [1, {length}] (the signal length), found {flen}"
        )
    frames = (length - flen) // step + 1
    limits.check(ctx, (x.shape[0], frames, flen), np.complex128, "framed signal")
    sig = _as_signal(x, work)  # (batch, length), real or complex
    # Framing is a strided view and windowing one broadcast multiply over it: numpy does
    # both in a single pass, so no kernel is needed before the batched FFT.
    view = np.lib.stride_tricks.sliding_window_view(sig, flen, axis=1)[:, ::step][:, :frames]
    if win is not None:
        framed = view * win.astype(work, copy=False)
    else:
        framed = view
    if onesided and framed.dtype.kind == "f":
        y = np.fft.rfft(framed, n=flen, axis=-1)
    else:
        y = np.fft.fft(framed, n=flen, axis=-1)
        if onesided:
            y = y[..., : flen // 2 + 1]
    return _as_pairs(y, x.dtype)


# ---------------------------------------------------------------------------------------------
# MelWeightMatrix


@onnx_op("MelWeightMatrix", since=17)
def mel_weight_matrix_17(
    ctx,
    num_mel_bins,
    dft_length,
    sample_rate,
    lower_edge_hertz,
    upper_edge_hertz,
    *,
    output_datatype,
):
    """A ``[dft_length // 2 + 1, num_mel_bins]`` matrix of triangular mel filters with peak
    1 (see the module docstring), in ``output_datatype``."""
    n_mel = _scalar_int(ctx, num_mel_bins, "'num_mel_bins'")
    n_fft = _scalar_int(ctx, dft_length, "'dft_length'")
    rate = _scalar_int(ctx, sample_rate, "'sample_rate'")
    lo = _scalar_float(ctx, lower_edge_hertz, "'lower_edge_hertz'")
    hi = _scalar_float(ctx, upper_edge_hertz, "'upper_edge_hertz'")
    if n_mel < 1 or n_fft < 1 or rate < 1:
        raise ctx.error(
            f"'num_mel_bins', 'dft_length' and 'sample_rate' must be >= 1, found {n_mel}, "
            f"{n_fft} and {rate}"
        )
    if not 0.0 <= lo <= hi:
        raise ctx.error(f"expected 0 <= lower_edge_hertz <= upper_edge_hertz, found {lo} and {hi}")
    n_spec = n_fft // 2 + 1
    limits.check(ctx, (n_spec, n_mel), np.float64)
    # n_mel + 2 band edges equally spaced on the mel scale; log1p/expm1 keep the small
    # frequencies exact. A few values: one numpy pass.
    mel_lo = 2595.0 * np.log1p(lo / 700.0) / np.log(10.0)
    mel_hi = 2595.0 * np.log1p(hi / 700.0) / np.log(10.0)
    mels = np.arange(n_mel + 2, dtype=np.float64) * ((mel_hi - mel_lo) / (n_mel + 2)) + mel_lo
    hz = 700.0 * np.expm1(mels / 2595.0 * np.log(10.0))
    edges = np.floor((n_fft + 1) * hz / rate).astype(np.int64)
    # Rows written: up to the last peak (inclusive) and the last right edge (exclusive).
    if edges[-2] >= n_spec or edges[-1] > n_spec:
        raise ctx.error(
            f"upper_edge_hertz {hi} maps past the last of the {n_spec} spectrogram bins of a "
            f"{n_fft}-point DFT at sample_rate {rate}; use at most sample_rate / 2"
        )
    out = np.zeros((n_spec, n_mel), dtype=np.float64)
    ctx.kernel("signal", "mel_triangles")(edges, out)
    return out.astype(types.np_dtype(int(output_datatype)))


# ---------------------------------------------------------------------------------------------
# Windows


def _cosine_window(ctx: NodeContext, size: Any, periodic: int, output_datatype: int, coefs):
    """``sum_k coefs[k] * cos(2 pi k n / N)`` for ``n < size`` (``N = size`` if periodic
    else ``size - 1``), in double precision, cast to ``output_datatype``."""
    n = _scalar_int(ctx, size, "'size'")
    if n < 0:
        raise ctx.error(f"'size' must be >= 0, found {n}")
    limits.check(ctx, (n,), np.float64)
    denom = float(n if periodic else n - 1)
    phase = np.arange(n, dtype=np.float64) * (2.0 * np.pi)
    with np.errstate(divide="ignore", invalid="ignore"):
        phase /= denom
    # Two or three cosine terms over a few values: plain numpy passes. The constant term is
    # added last, so that values that are 1 in exact arithmetic (Blackman's centre) round to
    # 1.0 and survive a cast to an integer output type.
    y = np.zeros(n, dtype=np.float64)
    for k, c in enumerate(coefs[1:], start=1):
        y += c * np.cos(k * phase)
    y += coefs[0]
    with np.errstate(invalid="ignore"):
        return y.astype(types.np_dtype(int(output_datatype)))


@onnx_op("HannWindow", since=17)
def hann_window_17(ctx, size, *, output_datatype, periodic):
    """Hann window ``0.5 - 0.5 cos(2 pi n / N)``."""
    return _cosine_window(ctx, size, periodic, output_datatype, (0.5, -0.5))


@onnx_op("HammingWindow", since=17)
def hamming_window_17(ctx, size, *, output_datatype, periodic):
    """Hamming window ``25/46 - 21/46 cos(2 pi n / N)``."""
    return _cosine_window(ctx, size, periodic, output_datatype, (25.0 / 46.0, 25.0 / 46.0 - 1.0))


@onnx_op("BlackmanWindow", since=17)
def blackman_window_17(ctx, size, *, output_datatype, periodic):
    """Blackman window ``0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)``."""
    return _cosine_window(ctx, size, periodic, output_datatype, (0.42, -0.5, 0.08))
