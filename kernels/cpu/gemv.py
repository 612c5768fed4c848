"""Skinny GEMM (a few rows of A times a stored weight), for batch-1 and small-batch inference.

A matrix-vector loop over the weight as stored, instead of BLAS. The product itself runs at
the same speed as OpenBLAS's (a 1x784 by 784x512 float32 product: 25 us either way on the
development VM, both streaming the 1.6 MB weight from L3); what it saves is the call around
it: small GEMMs go through ``matmul_into``, which switches BLAS to one thread and back with
threadpoolctl on every call (the batch-1 MLP ran in 72 us instead of 85 us). The weight is
(K, N) row-major, as FusedGemm keeps it, so the inner loop runs along a row of W and a row of
Y and LLVM vectorises it; four rows of W are folded per pass over the output row to keep the
output's loads and stores to a quarter of the weight's.
"""

from __future__ import annotations

from .._jit import njit

# Rows of A the loop takes. Measured only at one row; the limit is kept small because from a
# few rows on BLAS's register blocking reuses each loaded weight across rows of A.
MAX_ROWS = 4


@njit(fma=True)
def skinny_matmul(a, w, y):
    """``y = a @ w`` for ``a`` (M, K), ``w`` (K, N) C-contiguous and ``y`` (M, N) C-contiguous.

    Accumulates in the arrays' type; the sum over K runs in order of k in blocks of four, so
    the result may differ from BLAS's in the last bits (both are within float rounding of
    the exact product).
    """
    M, K = a.shape
    N = w.shape[1]
    for m in range(M):
        for j in range(N):
            y[m, j] = 0
        k = 0
        while k + 4 <= K:
            a0 = a[m, k]
            a1 = a[m, k + 1]
            a2 = a[m, k + 2]
            a3 = a[m, k + 3]
            for j in range(N):
                y[m, j] += a0 * w[k, j] + a1 * w[k + 1, j] + a2 * w[k + 2, j] + a3 * w[k + 3, j]
            k += 4
        while k < K:
            a0 = a[m, k]
            for j in range(N):
                y[m, j] += a0 * w[k, j]
            k += 1
