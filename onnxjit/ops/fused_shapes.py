"""``ShapeSubgraph``: shape arithmetic computed once per distinct set of input shapes.

:func:`onnxjit.passes.shape_subgraphs.cache_shape_subgraphs` replaces a group of nodes whose
values depend only on the shapes of some tensors (``Shape``/``Size`` and the arithmetic over
them) by one ``ShapeSubgraph`` node. Its inputs are those tensors, its ``body`` attribute the
member nodes as a graph (inputs named like the tensors, constants as initializers), its outputs
the values read outside the group. A run whose input shapes were seen before returns the stored
values and runs none of the members.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from onnxjit.registry import NodeContext, internal_op

# Distinct input-shape signatures remembered per node; the oldest is forgotten first.
CACHE_ENTRIES = 64
# Results larger than this (a ConstantOfShape of a big shape) are recomputed, not stored.
CACHE_MAX_BYTES = 1 << 16


class _Cache:
    """A bounded, thread-safe map from input shapes to output values."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: dict[tuple, tuple] = {}
        self.hits = 0
        self.misses = 0


# One cache per bound body (a plan.Subgraph, made once per node per Program, i.e. per session).
_CACHES: weakref.WeakKeyDictionary[Any, _Cache] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def _cache_of(body: Any) -> _Cache:
    cache = _CACHES.get(body)
    if cache is None:
        with _CACHES_LOCK:
            cache = _CACHES.get(body)
            if cache is None:
                cache = _CACHES[body] = _Cache()
    return cache


def cache_stats(body: Any) -> dict[str, int]:
    """Hits, misses and stored signatures of one bound body (for tests and stats)."""
    cache = _cache_of(body)
    return {"hits": cache.hits, "misses": cache.misses, "entries": len(cache.entries)}


@internal_op("ShapeSubgraph")
def shape_subgraph(ctx: NodeContext, *tensors: Any, body: Any = None) -> Any:
    """The outputs of ``body`` on ``tensors``, from the cache when their shapes were seen.

    Only the shapes of ``tensors`` are read (the body starts with Shape/Size nodes), so the
    shapes are the whole key. Every call returns fresh copies, so no caller can change a
    stored value.
    """
    key = tuple(np.shape(t) for t in tensors)
    cache = _cache_of(body)
    stored = cache.entries.get(key)
    if stored is None:
        cache.misses += 1
        values = ctx.run_subgraph(body, list(tensors))
        small = all(isinstance(v, np.ndarray) for v in values) and (
            sum(v.nbytes for v in values) <= CACHE_MAX_BYTES
        )
        if not small:
            return _result(values)
        stored = tuple(np.array(v, copy=True) for v in values)
        with cache.lock:
            if len(cache.entries) >= CACHE_ENTRIES:
                cache.entries.pop(next(iter(cache.entries)))
            cache.entries[key] = stored
    else:
        cache.hits += 1
    return _result([v.copy() for v in stored])


def _result(values: list[Any]) -> Any:
    return tuple(values) if len(values) != 1 else values[0]
