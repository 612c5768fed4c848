"""Signal-processing kernels (MelWeightMatrix's triangular filter bank).

The transforms themselves (DFT, STFT) run through numpy.fft (pocketfft), as GEMMs run through
BLAS; STFT's framing and windowing is one strided numpy multiply. What is left as a loop that
numpy cannot express in one pass is the filter bank, whose triangles have data-dependent
extents.
"""

from __future__ import annotations

import numpy as np

from .._jit import njit


@njit
def mel_triangles(edges: np.ndarray, out: np.ndarray) -> None:
    """Fill ``out`` (float64, ``(n_spectrogram_bins, n_mel_bins)``, zeros on entry) with the
    triangular filters whose left edge, peak and right edge are the spectrogram bin indices
    ``edges[m]``, ``edges[m + 1]`` and ``edges[m + 2]`` (int64, non-decreasing, length
    ``n_mel_bins + 2``, all written rows in range: the caller checks).

    Filter ``m`` rises linearly from 0 at its left edge to 1 at its peak (inclusive) and falls
    back towards 0 before its right edge (exclusive); a filter whose left edge equals its
    peak is 1 at the peak.
    """
    n_mel = out.shape[1]
    for m in range(n_mel):
        left = edges[m]
        peak = edges[m + 1]
        right = edges[m + 2]
        rise = peak - left
        if rise == 0:
            out[peak, m] = 1.0
        else:
            for j in range(left, peak + 1):
                out[j, m] = (j - left) / rise
        fall = right - peak
        if fall > 0:
            for j in range(peak, right):
                out[j, m] = (right - j) / fall
