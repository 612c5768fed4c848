"""MaxRoiPool kernel: max over the bins of each region of interest.

The bin boundaries (already rounded, offset by the roi corner and clipped to the image) are
computed by the caller, so one compiled kernel per input dtype serves every shape.
"""

from __future__ import annotations

import numpy as np

from .._jit import njit


@njit
def max_roi_pool(x, batch, hs, he, ws, we, out):
    """out[r, c, i, j] = max of x[batch[r], c, hs[r, i]:he[r, i], ws[r, j]:we[r, j]].

    x: (N, C, H, W) C-contiguous; batch: (R,) int64 batch indices (validated by the caller);
    hs/he: (R, PH) int64 row bounds; ws/we: (R, PW) int64 column bounds; out: (R, C, PH, PW)
    of x's dtype. An empty bin gives 0 (as onnxruntime does). A NaN in a bin gives NaN and a
    bin of -inf gives -inf (onnxruntime starts from -FLT_MAX and skips NaN, where
    np.max propagates it).
    """
    n_rois, n_ch, ph_n, pw_n = out.shape
    for r in range(n_rois):
        b = batch[r]
        for c in range(n_ch):
            for i in range(ph_n):
                h0 = hs[r, i]
                h1 = he[r, i]
                for j in range(pw_n):
                    w0 = ws[r, j]
                    w1 = we[r, j]
                    if h1 <= h0 or w1 <= w0:
                        out[r, c, i, j] = 0
                        continue
                    m = x[b, c, h0, w0]
                    for h in range(h0, h1):
                        for w in range(w0, w1):
                            v = x[b, c, h, w]
                            if v > m or np.isnan(v):
                                m = v
                    out[r, c, i, j] = m
