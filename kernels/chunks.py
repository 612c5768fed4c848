"""The kernel side of onnxjit's thread pool: claiming chunks of work and waiting.

A *pool kernel* takes a control array ``ctl`` (``int64[CTL_SIZE]``) as its first argument and
loops over its outermost iteration space ``range(n)`` in chunks it claims::

    @pjit
    def rows_par(ctl, y, ...):
        n = y.shape[0]
        while True:
            lo, hi = claim(ctl, n)
            if lo >= hi:
                break
            for r in range(lo, hi):
                ...  # iteration r, independent of every other

The calling thread and the pool's workers run the same kernel on the same arguments at once
(:func:`onnxjit.pool.run_parallel`); each chunk goes to whichever thread claims it first, so a
thread that starts late, or is descheduled, simply does less. Iterations must be independent and
must not raise (a raising kernel still stops every thread, but its partial results are lost).

Inside a chunk, index arrays with non-negative offsets from ``range(0, m)`` (or unsigned ones):
an index like ``lo + i`` makes Numba keep a negative-index test that stops LLVM vectorising.
"""

from __future__ import annotations

from ._jit import njit
from .atomics import fetch_add, load, pause, sched_getcpu, sched_yield

# Control array of one parallel call.
NEXT = 0  # first item not yet claimed
ACTIVE = 1  # pool workers inside the kernel (the caller is not counted)
THREADS = 2  # threads taking part: sets the chunk size
CTL_SIZE = 8

# The pool's shared array (see onnxjit.pool).
SEQ = 0  # bumped when a job is published
STOP = 1  # non-zero: workers leave
SYNC_SIZE = 8

# Chunks per thread: enough that a thread that starts late or runs slow costs little balance,
# few enough that claiming (one atomic add) costs nothing next to a chunk.
CHUNKS_PER_THREAD = 8


@njit(inline="always")
def claim(ctl, n):
    """Claim the next chunk of ``range(n)``: ``(lo, hi)``; empty (``lo >= hi``) when none is
    left."""
    t = ctl[THREADS]
    per = CHUNKS_PER_THREAD * (t if t > 0 else 1)
    step = (n + per - 1) // per
    if step < 1:
        step = 1
    lo = fetch_add(ctl, NEXT, step)
    hi = lo + step
    if hi > n:
        hi = n
    return lo, hi


@njit(nogil=True)
def add(arr, idx, value):
    """Atomic ``arr[idx] += value`` callable from Python (returns the old value)."""
    return fetch_add(arr, idx, value)


@njit(nogil=True)
def wait_idle(ctl, spin_checks):
    """Return once no pool worker is inside the call of ``ctl`` (``ctl[ACTIVE] == 0``).

    Spins for ``spin_checks`` checks, then yields the core between checks (the worker may be
    waiting for this very core)."""
    k = 0
    while load(ctl, ACTIVE) > 0:
        if k < spin_checks:
            pause()
            k += 1
        else:
            sched_yield()


@njit(nogil=True)
def wait_job(sync, seen, max_checks):
    """Spin until ``sync[SEQ]`` differs from ``seen`` or ``sync[STOP]`` is set; return
    ``sync[SEQ]`` (still ``seen`` after ``max_checks`` checks without a job).

    Yields the core every 64 checks, so that a worker sharing a core with the thread that
    will publish the next job does not hold it for a whole time slice."""
    for k in range(max_checks):
        s = load(sync, SEQ)
        if s != seen or load(sync, STOP) != 0:
            return s
        pause()
        if k % 64 == 63:
            sched_yield()
    return load(sync, SEQ)


@njit(nogil=True)
def current_cpu():
    """The CPU the calling thread runs on (-1 when unknown)."""
    return sched_getcpu()
