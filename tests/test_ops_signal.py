"""Signal-processing operators vs the reference evaluator.

DFT-17 and DFT-20 (each at an opset that selects it), STFT-17, MelWeightMatrix-17 and the
Hann/Hamming/Blackman windows (17, periodic and symmetric): one row per mode x dtype x shape
class. The reference evaluator takes float16 and bfloat16 as they come (numpy.fft
transforms them in a wider type; the windows are computed in the output type itself), and
onnxjit transforms them in float32, so the low-precision rows compare with loose tolerances.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto
from oracle import check_node, make_node_model

import onnxjit
from onnxjit.errors import InvalidArgumentError

RNG = np.random.default_rng(7)
FLOATS = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16]


def rand(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def tol(dtype, scale=1.0):
    """(rtol, atol) for transforms whose outputs reach ``scale`` in magnitude."""
    name = np.dtype(dtype).name
    if name == "bfloat16":
        return 3e-2, 6e-2 * scale
    if name == "float16":
        return 5e-3, 5e-3 * scale
    if name == "float32":
        return 1e-4, 1e-5 * scale
    return 1e-10, 1e-12 * scale


# ---- DFT ------------------------------------------------------------------------------------

# (input shape, axis, inverse, onesided, dft_length)
DFT_CASES = [
    ((2, 8, 1), 1, 0, 0, None),  # real forward
    ((2, 8, 2), 1, 0, 0, None),  # complex forward
    ((3, 5, 4, 1), 2, 0, 0, None),  # odd batch layout, inner axis
    ((6, 3, 2), 0, 0, 0, None),  # axis 0
    ((2, 7, 3, 2), -3, 0, 0, None),  # negative axis
    ((2, 8, 1), 1, 0, 1, None),  # RFFT, even length
    ((2, 9, 1), 1, 0, 1, None),  # RFFT, odd length
    ((2, 8, 2), 1, 0, 1, None),  # complex input, one-sided: first n//2+1 bins
    ((2, 8, 2), 1, 1, 0, None),  # inverse
    ((2, 8, 1), 1, 1, 0, None),  # inverse of a real input
    ((2, 5, 2), 1, 1, 1, None),  # IRFFT, default length 2 * (5 - 1)
    ((2, 5, 2), 1, 1, 1, 9),  # IRFFT, odd length
    ((2, 5, 2), 1, 1, 1, 4),  # IRFFT, truncated spectrum
    ((2, 6, 1), 1, 0, 0, 10),  # zero-padded
    ((2, 6, 2), 1, 0, 0, 4),  # truncated
    ((2, 6, 1), 1, 0, 1, 11),  # RFFT, padded to odd length
    ((2, 6, 2), 1, 1, 0, 8),  # inverse, padded
    ((0, 6, 1), 1, 0, 0, None),  # zero-size batch
    ((2, 0, 3, 2), 2, 1, 0, None),  # zero-size outer axis, complex inverse
    ((3, 0, 2), 1, 0, 0, 4),  # empty signal zero-padded to 4
    ((3, 1, 1), 1, 0, 0, None),  # length-1 transform
]


def _dft_inputs(shape, dtype, dft_length):
    return {
        "x": rand(shape, dtype),
        "n": None if dft_length is None else np.array(dft_length, dtype=np.int64),
    }


# DFT-17 serves opsets 17 to 19: every dtype at 17, float32 at 19.
@pytest.mark.parametrize(
    "opset,dtype",
    [
        (17, np.float32),
        (17, np.float64),
        (17, np.float16),
        (17, ml_dtypes.bfloat16),
        (19, np.float32),
    ],
)
@pytest.mark.parametrize("shape,axis,inverse,onesided,n", DFT_CASES)
def test_dft_17(opset, dtype, shape, axis, inverse, onesided, n):
    inputs = _dft_inputs(shape, dtype, n)
    attrs = {"axis": axis, "inverse": inverse, "onesided": onesided}
    rtol, atol = tol(dtype, scale=4.0)
    check_node("DFT", inputs, attrs, opset=opset, rtol=rtol, atol=atol, const_inputs=("n",))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,axis,inverse,onesided,n", DFT_CASES)
def test_dft_20(dtype, shape, axis, inverse, onesided, n):
    inputs = {**_dft_inputs(shape, dtype, n), "axis": np.array(axis, dtype=np.int64)}
    attrs = {"inverse": inverse, "onesided": onesided}
    rtol, atol = tol(dtype, scale=4.0)
    check_node("DFT", inputs, attrs, opset=20, rtol=rtol, atol=atol, const_inputs=("n",))


@pytest.mark.parametrize("shape", [(2, 8, 1), (3, 4, 6, 2)])
def test_dft_20_default_axis(shape):
    # No axis input: -2, the last signal axis.
    check_node("DFT", {"x": rand(shape)}, {}, opset=20, rtol=1e-4, atol=4e-5)


def test_dft_20_runtime_inputs():
    # dft_length and axis fed at run time (int32), not as initializers.
    inputs = {
        "x": rand((3, 6, 2), np.float64),
        "n": np.array(8, dtype=np.int32),
        "axis": np.array(-2, dtype=np.int32),
    }
    check_node("DFT", inputs, {}, opset=20, rtol=1e-10, atol=1e-12)


def _session(op, inputs, attrs, opset, const=()):
    model = make_node_model(op, inputs, attrs, opset=opset, const_inputs=const)
    for out in model.graph.output:  # the checker wants typed, ranked outputs
        tt = out.type.tensor_type
        if tt.elem_type == TensorProto.UNDEFINED:
            tt.elem_type = TensorProto.FLOAT
        if not tt.HasField("shape"):
            tt.shape.SetInParent()
    sess = onnxjit.InferenceSession(model.SerializeToString())
    feeds = {k: v for k, v in inputs.items() if v is not None and k not in const}
    return sess, feeds


@pytest.mark.parametrize(
    "shape,axis,n",
    [
        ((2, 8, 3), 1, None),  # last dimension neither 1 nor 2
        ((8,), 0, None),  # rank 1
        ((2, 8, 1), 2, None),  # the real/imaginary axis
        ((2, 8, 1), -1, None),
        ((2, 8, 1), 3, None),
        ((2, 8, 1), 1, 0),  # non-positive length
    ],
)
def test_dft_errors(shape, axis, n):
    inputs = {"x": rand(shape), "n": None if n is None else np.array(n, dtype=np.int64)}
    sess, feeds = _session("DFT", inputs, {"axis": axis}, 17, ("n",))
    with pytest.raises(InvalidArgumentError):
        sess.run(None, feeds)


# ---- STFT -----------------------------------------------------------------------------------

# (signal shape, frame_step, window length or None, frame_length or None, onesided)
STFT_CASES = [
    ((1, 64, 1), 8, None, 16, 1),  # rectangular window, one-sided
    ((2, 64, 1), 8, 16, None, 1),  # window gives the frame length
    ((2, 64, 1), 5, 16, 16, 1),  # both given; step leaves a tail
    ((2, 63, 1), 7, 15, None, 1),  # odd frame length
    ((2, 64, 1), 8, 16, None, 0),  # two-sided
    ((2, 48, 2), 6, 12, None, 0),  # complex signal
    ((2, 48, 2), 6, None, 12, 1),  # complex signal, one-sided: first bins
    ((3, 20, 1), 4, None, None, 1),  # frame_length = signal length: one frame
    ((0, 32, 1), 8, 16, None, 1),  # zero-size batch
    ((0, 32, 2), 8, 16, None, 0),  # zero-size batch, complex
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,step,wlen,flen,onesided", STFT_CASES)
def test_stft_17(dtype, shape, step, wlen, flen, onesided):
    inputs = {
        "x": rand(shape, dtype),
        "step": np.array(step, dtype=np.int64),
        "w": None if wlen is None else (0.5 - 0.5 * np.cos(np.arange(wlen) / wlen)).astype(dtype),
        "flen": None if flen is None else np.array(flen, dtype=np.int64),
    }
    rtol, atol = tol(dtype, scale=8.0)
    check_node("STFT", inputs, {"onesided": onesided}, opset=17, rtol=rtol, atol=atol)


def test_stft_17_int32_scalars():
    inputs = {
        "x": rand((2, 40, 1), np.float64),
        "step": np.array(4, dtype=np.int32),
        "w": None,
        "flen": np.array(10, dtype=np.int32),
    }
    check_node("STFT", inputs, {}, opset=17, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "step,wlen,flen",
    [
        (0, None, 8),  # step must be positive
        (4, 8, 10),  # window and frame_length disagree
        (4, None, 40),  # frame longer than the signal
    ],
)
def test_stft_errors(step, wlen, flen):
    inputs = {
        "x": rand((1, 32, 1)),
        "step": np.array(step, dtype=np.int64),
        "w": None if wlen is None else np.ones(wlen, np.float32),
        "flen": None if flen is None else np.array(flen, dtype=np.int64),
    }
    sess, feeds = _session("STFT", inputs, {}, 17)
    with pytest.raises(InvalidArgumentError):
        sess.run(None, feeds)


# ---- MelWeightMatrix ------------------------------------------------------------------------

# (num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz)
MEL_CASES = [
    (8, 16, 8192, 0.0, 4096.0),
    (10, 64, 16000, 20.0, 8000.0),
    (40, 512, 16000, 0.0, 8000.0),
    (5, 31, 22050, 300.0, 5000.0),  # odd DFT length
    (1, 8, 8000, 100.0, 3000.0),
]


@pytest.mark.parametrize("output_datatype", [None, TensorProto.DOUBLE, TensorProto.FLOAT16])
@pytest.mark.parametrize("case", MEL_CASES)
def test_melweightmatrix_17(case, output_datatype):
    n_mel, n_fft, rate, lo, hi = case
    inputs = {
        "n_mel": np.array(n_mel, np.int64),
        "n_fft": np.array(n_fft, np.int64),
        "rate": np.array(rate, np.int64),
        "lo": np.array(lo, np.float32),
        "hi": np.array(hi, np.float32),
    }
    attrs = {} if output_datatype is None else {"output_datatype": output_datatype}
    check_node("MelWeightMatrix", inputs, attrs, opset=17, rtol=1e-3, atol=1e-3)


def test_melweightmatrix_17_int32_and_double_edges():
    inputs = {
        "n_mel": np.array(12, np.int32),
        "n_fft": np.array(128, np.int32),
        "rate": np.array(16000, np.int32),
        "lo": np.array(50.0, np.float64),
        "hi": np.array(7000.0, np.float64),
    }
    check_node("MelWeightMatrix", inputs, {}, opset=17, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "case",
    [
        (8, 16, 8000, 0.0, 8000.0),  # upper edge far above the Nyquist frequency
        (8, 16, 8000, 3000.0, 1000.0),  # edges reversed
        (0, 16, 8000, 0.0, 4000.0),  # no bands
    ],
)
def test_melweightmatrix_errors(case):
    n_mel, n_fft, rate, lo, hi = case
    inputs = {
        "n_mel": np.array(n_mel, np.int64),
        "n_fft": np.array(n_fft, np.int64),
        "rate": np.array(rate, np.int64),
        "lo": np.array(lo, np.float32),
        "hi": np.array(hi, np.float32),
    }
    sess, feeds = _session("MelWeightMatrix", inputs, {}, 17)
    with pytest.raises(InvalidArgumentError):
        sess.run(None, feeds)


# ---- Windows --------------------------------------------------------------------------------

WINDOW_TYPES = [
    (None, 1e-6, 1e-6),
    (TensorProto.DOUBLE, 1e-12, 1e-12),
    # The reference evaluator computes these in the output type itself: loose tolerances.
    (TensorProto.FLOAT16, 5e-3, 2e-3),
    (TensorProto.BFLOAT16, 2e-2, 1e-2),
]


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [None, 0])  # the default (periodic), symmetric
@pytest.mark.parametrize("size", [0, 7, 10])
@pytest.mark.parametrize("output_datatype,rtol,atol", WINDOW_TYPES)
def test_window_17(op, periodic, size, output_datatype, rtol, atol):
    attrs = {}
    if periodic is not None:
        attrs["periodic"] = periodic
    if output_datatype is not None:
        attrs["output_datatype"] = output_datatype
    inputs = {"size": np.array(size, np.int64)}
    check_node(op, inputs, attrs, opset=17, rtol=rtol, atol=atol)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [1, 0])
def test_window_17_int32_size_and_size_one(op, periodic):
    # A symmetric window of one point divides 0 by 0: NaN in both implementations.
    check_node(op, {"size": np.array(1, np.int32)}, {"periodic": periodic}, opset=17)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("output_datatype", [TensorProto.INT32, TensorProto.UINT8])
def test_window_17_integer_output(op, output_datatype):
    # Values in [0, 1] truncate to 0 except exact ones, e.g. Hann's periodic centre (n = N/2).
    attrs = {"output_datatype": output_datatype}
    check_node(op, {"size": np.array(8, np.int64)}, attrs, opset=17)


def test_window_negative_size():
    sess, feeds = _session("HannWindow", {"size": np.array(-3, np.int64)}, {}, 17)
    with pytest.raises(InvalidArgumentError):
        sess.run(None, feeds)
