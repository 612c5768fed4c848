"""Scaled-dot-product attention rows: scale, additive mask, Where mask, softmax in one pass.

The contractions (Q K^T and P V) are BLAS calls made by the caller; these kernels turn a block
of raw scores into probabilities in place, row by row, reading the masks through their
broadcast layout instead of materialising them at the scores' shape.

:func:`heads` / :func:`heads_par` do the whole attention of one (batch, head) pair per
iteration: Q K^T by BLAS into that head's block of scores, the rows, then P V by BLAS, so
that a head's scores stay in cache from the first product to the second.

Layout contract shared by every kernel here: ``s`` is a C-contiguous (rows, n) block whose row
``r`` is query ``i = r % sq`` of head ``h = (r // sq) % nh`` of batch ``b = r // (sq * nh)``;
``mask`` (float, same dtype as ``s``) and ``cond`` (bool) are C-contiguous 4-D arrays whose
first three dimensions are either 1 (broadcast) or ``(nb, nh, sq)`` and whose last dimension is
``n``; ``has_mask`` / ``has_cond`` say whether they take part (a (1, 1, 1, 1) dummy otherwise).
"""

from __future__ import annotations

import numpy as np

from .._jit import njit
from ..vecmath import fence
from .blas import gemm_call
from .nn import exp_sum, softmax_row_range
from .runtime.twins import twins


@njit(inline="always")
def _row(s, r, nh, sq, mask, cond, has_mask, has_cond, scale, fill, swap, where_first, nan_zero):
    """Probabilities of row ``r`` of ``s`` in place (see the module docstring for the layout).

    Per element: ``x = s * scale``, then the additive mask and the Where select in the order
    ``where_first`` gives (Where keeps ``x`` where ``cond`` is true, or where it is false when
    ``swap``, and puts ``fill`` elsewhere); then a softmax over the row. NaN propagates as in
    an unfused softmax (a row with a NaN, or with every entry -inf, becomes NaN); ``nan_zero``
    then replaces NaN probabilities by 0 (the ``Where(IsNaN(p), 0, p)`` guard exporters emit).
    Each step is its own loop over the (cache-resident) row so that every loop vectorises.
    """
    n = s.shape[1]
    b = r // (sq * nh)
    h = (r // sq) % nh
    i = r % sq
    row = s[r]
    mrow = mask[b if mask.shape[0] > 1 else 0, h if mask.shape[1] > 1 else 0]
    mrow = mrow[i if mask.shape[2] > 1 else 0]
    crow = cond[b if cond.shape[0] > 1 else 0, h if cond.shape[1] > 1 else 0]
    crow = crow[i if cond.shape[2] > 1 else 0]
    for j in range(n):
        row[j] = row[j] * scale
    if has_cond and where_first:
        for j in range(n):
            row[j] = fill if crow[j] == swap else row[j]
    if has_mask:
        for j in range(n):
            row[j] = row[j] + mrow[j]
    if has_cond and not where_first:
        for j in range(n):
            row[j] = fill if crow[j] == swap else row[j]
    # a NaN makes the maximum unspecified but reaches exp below: the row is NaN either way
    top, lowest = softmax_row_range(s, r)
    total = exp_sum(s, s, r, top, lowest)
    inv = fence(row.dtype.type(1.0) / total)  # keeps the multiply (see vecmath.fence)
    if nan_zero:
        for j in range(n):
            p = row[j] * inv
            row[j] = 0.0 if p != p else p
    else:
        for j in range(n):
            row[j] = row[j] * inv


attention_rows, attention_rows_par = twins(
    "attention_rows(s, nh, sq, mask, cond, has_mask, has_cond, scale, fill, swap, where_first, "
    "nan_zero)",
    _row,
    items={"r": "s.shape[0]"},
    fastmath={"reassoc"},
    doc="""Every row of ``s`` through :func:`_row` (serial).""",
)


# Up to this many query rows, Q K^T with K as stored goes to BLAS (K read in place) rather
# than to the micro-kernel on K^T written out (sk x d copies per head): GPT-2 decoding steps
# at 2 threads on the Zen 3, 0.63-0.77 ms a step through BLAS against 0.73-0.86 with the copy.
BLAS_ROWS = 4


@njit(inline="always")
def _head(t, q, qs, k, ks, k_given_t, v, vs, s, y, ys, nh, sq, d, dv, masks, scale, opts):
    """Attention of head ``t`` (batch ``t // nh``, head ``t % nh``) into ``y``.

    ``q``, ``k``, ``v`` and ``y`` are flat; ``qs``, ``ks``, ``vs``, ``ys`` their (batch,
    head, row) element strides (batch and head 0 where an operand broadcasts). Per head Q is
    (sq, d), K (sk, d) or, when ``k_given_t``, K^T (d, sk), V (sk, dv) and the output
    (sq, dv), each with unit column stride and its own row stride: heads stored one after
    another ((b, h, s, d) layout, row stride d) or interleaved ((b, s, h, d), the layout of
    the projections before exporters' head Transposes, row stride h * d). ``s`` is the
    (nb * nh * sq, sk) scores buffer. ``masks`` = (mask, cond, has_mask, has_cond) and
    ``opts`` = (fill, swap, where_first, nan_zero) as for :func:`attention_rows`.
    """
    sk = s.shape[1]
    b = t // nh
    h = t - b * nh
    one = s.dtype.type(1)
    zero = s.dtype.type(0)
    sf = s.reshape(s.size)
    q0 = b * qs[0] + h * qs[1]
    k0 = b * ks[0] + h * ks[1]
    if k_given_t:  # K^T given: op(B) is B as stored
        gemm_call(False, False, sq, sk, d, one, q, q0, qs[2], k, k0, ks[2], zero, sf,
                  t * sq * sk, sk)  # fmt: skip
    elif sq <= BLAS_ROWS:
        # K given, a few query rows (a decoding step): BLAS's matrix-vector product reads K
        # in place, where writing K^T out would cost as much as the product itself
        gemm_call(False, True, sq, sk, d, one, q, q0, qs[2], k, k0, ks[2], zero, sf,
                  t * sq * sk, sk)  # fmt: skip
    else:
        # K given: its transpose, written out, is a B the micro-kernel reads as stored (a
        # transposed B would go to BLAS, and loading SciPy's OpenBLAS costs a warm start
        # 0.2 s); the copy is sk x d elements against the product's sq x sk x d
        kt = np.empty(d * sk, k.dtype)
        kr = ks[2]
        for j in range(sk):
            for p in range(d):
                kt[p * sk + j] = k[k0 + j * kr + p]
        gemm_call(False, False, sq, sk, d, one, q, q0, qs[2], kt, 0, sk, zero, sf,
                  t * sq * sk, sk)  # fmt: skip
    mask, cond, has_mask, has_cond = masks
    fill, swap, where_first, nan_zero = opts
    for i in range(sq):
        r = t * sq + i
        _row(s, r, nh, sq, mask, cond, has_mask, has_cond, scale, fill, swap, where_first, nan_zero)
    v0 = b * vs[0] + h * vs[1]
    y0 = b * ys[0] + h * ys[1]
    gemm_call(False, False, sq, dv, sk, one, sf, t * sq * sk, sk, v, v0, vs[2], zero, y, y0, ys[2])


heads, heads_par = twins(
    "heads(n_heads, q, qs, k, ks, k_given_t, v, vs, s, y, ys, nh, sq, d, dv, masks, scale, opts)",
    _head,
    items={"t": "n_heads"},
    fma=True,
    fastmath={"reassoc"},
    doc="""Every head through :func:`_head` (serial).""",
)
