"""kernels/cpu/shuffle.py: vector data movement, against numpy slicing."""

from __future__ import annotations

import numpy as np
import pytest

from onnxjit.kernels._jit import njit
from onnxjit.kernels.cpu.shuffle import deinterleave2, split_row, transpose16


@njit
def _split(src, s_off, dst, a_off, b_off, n):
    deinterleave2(src, s_off, dst, a_off, b_off, n)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 5, 7, 8, 9, 15, 16, 17, 28, 31, 32, 33, 56, 100])
def test_deinterleave2(dtype, n):
    # whole vectors and a masked last one (16 float32 or 8 float64 pairs per vector with
    # AVX-512, half that without), odd offsets; the elements around both runs of dst and
    # past the pairs of src stay untouched (sentinels; src's next element is a NaN that
    # must not be read into anything)
    src = np.random.default_rng(n).standard_normal(2 * n + 8).astype(dtype)
    src[3 + 2 * n] = np.nan
    dst = np.full(3 * n + 40, -7.0, dtype)
    a_off, b_off = 5, 5 + n + 11
    _split(src, 3, dst, a_off, b_off, n)
    want = np.full_like(dst, -7.0)
    want[a_off : a_off + n] = src[3 : 3 + 2 * n : 2]
    want[b_off : b_off + n] = src[4 : 4 + 2 * n : 2]
    np.testing.assert_array_equal(dst, want)


@njit
def _split_row(src, s_off, dst, a_off, b_off, n_a, n_b):
    split_row(src, s_off, dst, a_off, b_off, n_a, n_b)


@pytest.mark.parametrize("n_a, n_b", [(0, 0), (1, 0), (14, 14), (15, 14), (14, 15), (29, 27)])
def test_split_row(n_a, n_b):
    # two column phases of unequal lengths (a row's odd last element, columns no output
    # reads): each run exactly as long as asked, nothing around them touched
    src = np.random.default_rng(n_a * 31 + n_b).standard_normal(64).astype(np.float32)
    dst = np.full(100, -7.0, np.float32)
    _split_row(src, 1, dst, 3, 50, n_a, n_b)
    want = np.full_like(dst, -7.0)
    want[3 : 3 + n_a] = src[1 : 1 + 2 * n_a : 2]
    want[50 : 50 + n_b] = src[2 : 2 + 2 * n_b : 2]
    np.testing.assert_array_equal(dst, want)


@njit
def _transpose16(src, soffs, si, sadd, dst, doffs, di, dadd):
    transpose16(src, soffs, si, sadd, dst, doffs, di, dadd)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("offset_type", [np.int64, np.uint64])
def test_transpose16(dtype, offset_type):
    # rows gathered from scattered (unaligned, unordered) offsets and columns scattered to
    # others, both read from a start index into longer offset arrays; every element of dst
    # outside the sixteen written rows keeps its sentinel
    rng = np.random.default_rng(16)
    src = rng.standard_normal(4000).astype(dtype)
    dst = np.full(5000, -7.0, dtype)
    soffs = np.zeros(20, offset_type)
    soffs[3:19] = rng.choice(3900, 16, replace=False)
    doffs = np.zeros(20, offset_type)
    doffs[2:18] = rng.permutation(16) * 301 + 5
    _transpose16(src, soffs, 3, 11, dst, doffs, 2, 7)
    want = np.full_like(dst, -7.0)
    block = np.stack([src[int(o) + 11 : int(o) + 27] for o in soffs[3:19]])  # rows r
    for c, o in enumerate(doffs[2:18]):
        want[int(o) + 7 : int(o) + 23] = block[:, c]
    np.testing.assert_array_equal(dst, want)


def test_transpose16_repeated_destination_keeps_last():
    # the small-plane depthwise kernel sends every input position outside its tile to one
    # sink row: with a destination repeated, the highest column's values are what remain
    src = np.arange(16 * 16, dtype=np.float32)
    rows = np.arange(16, dtype=np.int64) * 16
    doffs = np.array([0] * 8 + [16 * k for k in range(1, 9)], np.int64)
    dst = np.zeros(16 * 9, np.float32)
    _transpose16(src, rows, 0, 0, dst, doffs, 0, 0)
    t = src.reshape(16, 16).T  # column c of the block is row c of t
    np.testing.assert_array_equal(dst[:16], t[7])
    np.testing.assert_array_equal(dst[16:].reshape(8, 16), t[8:])
