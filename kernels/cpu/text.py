"""Text kernels: n-gram counting for TfIdfVectorizer.

The n-gram pool is a trie stored as flat arrays (built on the host side once per node):

* node ``u``'s children are ``child_key[child_start[u]:child_start[u + 1]]`` (sorted keys) and
  ``child_node[...]`` (the child node numbers); node 0 is the root;
* ``node_col[u]`` is the output column of the n-gram that ends at ``u``, or -1 when ``u`` is
  only a prefix of longer pool n-grams.

Tokens are int64 (string inputs are mapped to ids on the host side first), one row per batch
entry, so one compiled kernel serves every input type and shape.
"""

from __future__ import annotations

from .._jit import njit
from .runtime.twins import twins


@njit(inline="always")
def _find_child(u, key, child_start, child_key, child_node):
    """The child of trie node ``u`` reached by ``key``, or -1 (binary search)."""
    lo = child_start[u]
    hi = child_start[u + 1]
    while lo < hi:
        mid = (lo + hi) >> 1
        k = child_key[mid]
        if k < key:
            lo = mid + 1
        elif k > key:
            hi = mid
        else:
            return child_node[mid]
    return -1


@njit(inline="always")
def _count_row(
    tokens, r, child_start, child_key, child_node, node_col, min_n, max_n, max_skip, counts
):
    """Count the pool n-grams of row ``r`` into ``counts[r]``.

    n-grams of length n >= 2 are counted once per gap ``skip`` in 0..max_skip (items
    i, i + skip + 1, ..., i + (n - 1) * (skip + 1)); unigrams are counted once, since the gap
    does not change them. Only lengths in [min_n, max_n] are counted.
    """
    c = tokens.shape[1]
    for skip in range(max_skip + 1):
        step = skip + 1
        first_n = min_n
        if skip > 0 and first_n < 2:
            first_n = 2
        if first_n > max_n:
            break
        for i in range(c):
            # No n-gram of a counted length fits from here on.
            if i + step * (first_n - 1) >= c:
                break
            u = 0
            pos = i
            n = 1
            while n <= max_n and pos < c:
                u = _find_child(u, tokens[r, pos], child_start, child_key, child_node)
                if u < 0:
                    break
                if n >= first_n and node_col[u] >= 0:
                    counts[r, node_col[u]] += 1.0
                n += 1
                pos += step


ngram_counts, ngram_counts_par = twins(
    "ngram_counts(tokens, child_start, child_key, child_node, node_col, min_n, max_n, max_skip, "
    "counts)",
    _count_row,
    items={"r": "tokens.shape[0]"},
    doc="""Serial n-gram counting: ``tokens`` (rows, C) int64, ``counts`` (rows, n_out) float32
    zero-initialised; see :func:`_count_row` for the counting rule.""",
)
