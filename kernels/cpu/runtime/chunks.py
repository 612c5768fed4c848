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

Kernels whose iteration is one body are not written this way: :mod:`.twins` generates this
loop, and the serial kernel's, from the body.

The calling thread and the pool's workers run the same kernel on the same arguments at once
(:func:`onnxjit.backends.cpu.pool.run_parallel`). Each thread claims chunks of its CPU's share
of the items first (see :func:`claim`), then whatever the others have left, so a thread that
starts late, or is descheduled, simply does less. Iterations must be independent,
and nothing outside the claim loop may write (a worker can enter the kernel when every chunk
is already claimed). A kernel that raises stops its thread; the caller then runs the kernel
again alone, which raises the error where Python can see it.

Inside a chunk, index arrays with non-negative offsets from ``range(0, m)`` (or unsigned ones):
an index like ``lo + i`` makes Numba keep a negative-index test that stops LLVM vectorising.
"""

from __future__ import annotations

import sys

import numpy as np

from ..._jit import njit
from .atomics import (
    call_address,
    compare_exchange,
    fetch_add,
    load,
    pause,
    sched_getcpu,
    sched_yield,
    store,
)

# Control array of one parallel call (the first CTL_SIZE slots of the job buffer).
THREADS = 0  # threads taking part: sets the segments and the chunk size
# The items are cut into min(threads, MAX_SEGMENTS) equal segments; slot NEXT + s counts the
# items of segment s claimed so far.
NEXT = 8
MAX_SEGMENTS = 8
CTL_SIZE = NEXT + MAX_SEGMENTS

# The job buffer (int64[JOB_SIZE]) a caller fills for the pool's workers (see
# onnxjit.backends.cpu.pool).
FN = CTL_SIZE  # address of the job's entry point, a C function void entry(int64 *job)
WORKERS = FN + 1  # how many pool workers may take part (worker i joins when i < job[WORKERS])
DONE = FN + 2  # sequence number of the last job whose caller has finished
ERROR = FN + 3  # set when the kernel raised in some thread
KERNEL = FN + 4  # address of the kernel's machine code, which the entry point calls
ARGS = FN + 8  # the kernel's arguments, packed from here (240 slots)
JOB_SIZE = ARGS + 240

# The pool's shared array.
SEQ = 0  # job sequence number: odd while the caller writes the job, even once published
STOP = 1  # non-zero: workers leave
BUSY = 2  # workers between looking at the job buffer and leaving it
SYNC_SIZE = 8

# Each thread first claims from its home segment, the one of the CPU it runs on: consecutive
# kernels whose items follow the same order (channels, rows, heads) then give each core the
# items whose data it wrote or read last, still in its own L2 cache, where one shared counter
# handed them to whichever thread came first. A thread whose home is used up takes from the
# other segments in turn, so a late or descheduled thread still does less. Whole models at 2
# threads on the development VM, old and new code in alternating processes: T1 (bert_prim)
# 4.37-4.66 -> 3.97-4.27 ms, M1 gemm/b1 27-29 -> 25 us, C1 4.80-5.04 -> 4.65-4.80 ms, C2
# 1.97-1.99 -> 1.88-1.96 ms; T2 unchanged, G1's tree ensembles at batch 100 1-3 % slower.
#
# Within a segment, guided self-scheduling: each claim takes 1/GUIDE of what is left of it,
# so chunks start large (few atomic adds, long contiguous runs) and shrink towards the end,
# where a thread that finishes its last chunk early waits for the others. With equal chunks
# of 1/16 of the work (2 threads, one shared counter) that wait averaged half a chunk: a 1024
# x 1024 float32 softmax on 2 threads took 180-184 us with equal chunks and 165-170 us guided.
GUIDE = 2
# No chunk is smaller than 1/(MAX_CHUNKS_PER_THREAD x threads) of the whole, so that claiming
# (one atomic add on a shared cache line) stays negligible next to a chunk's work.
MAX_CHUNKS_PER_THREAD = 32

if sys.platform.startswith("linux"):
    _cpu = sched_getcpu
else:

    @njit(inline="always")
    def _cpu():
        return 0  # no home segments: every thread starts at segment 0


@njit(inline="always")
def claim(ctl, n):
    """Claim the next chunk of ``range(n)``: ``(lo, hi)``; empty (``lo >= hi``) when none is
    left. Chunks are contiguous, disjoint and cover ``range(n)``; a thread takes them from
    its home segment first, then from the others, in sizes that shrink as each segment runs
    out (see GUIDE)."""
    t = ctl[THREADS]
    if t < 1:
        t = 1
    floor = (n + MAX_CHUNKS_PER_THREAD * t - 1) // (MAX_CHUNKS_PER_THREAD * t)
    if floor < 1:
        floor = 1
    segs = min(t, MAX_SEGMENTS)
    home = _cpu() % segs if segs > 1 else 0
    for k in range(segs):
        sg = home + k
        if sg >= segs:
            sg -= segs
        base = sg * n // segs
        size = (sg + 1) * n // segs - base
        # Read before the add: another thread may claim in between, and then this chunk is
        # sized from a slightly stale remainder (a little larger than guided): harmless.
        left = size - load(ctl, NEXT + sg)
        if left <= 0:
            continue
        step = left // GUIDE
        if step < floor:
            step = floor
        lo = fetch_add(ctl, NEXT + sg, step)
        if lo >= size:
            continue
        hi = lo + step
        if hi > size:
            hi = size
        return base + lo, base + hi
    return n, n


# Chunks claimed in phases (:func:`claim_phased`): slot PHASE_DONE counts the chunks finished,
# slot NEXT + u the phases whose unit u is claimed.
PHASE_DONE = 1
MAX_UNITS = MAX_SEGMENTS


@njit(inline="always")
def claim_phased(ctl, phase, units, phases):
    """Claim a chunk of work that runs in ``phases`` phases of ``units`` chunks (at most
    MAX_UNITS), each phase after every chunk of the phases before it: the time steps of a
    recurrence, each cut into slices. ``phase``: the calling thread's phase so far (0 at
    first, then the phase of its last chunk). Returns ``(phase, unit)`` of the claimed chunk
    once the earlier phases are finished, ``phase == phases`` when nothing is left. Call
    :func:`finish_phased` when the chunk's work is done.

    A thread tries its home unit first (its CPU's, as :func:`claim` does), then the others,
    so with every thread running each keeps to the same unit from phase to phase, and its
    data (a slice's weights) stays in its core's caches; a late or descheduled thread's
    units are taken by the others, and it catches up by skipping claimed phases. A thread
    only waits for chunks claimed before its own, by running threads: any number of threads
    makes progress. Waiting spins, yielding the core every YIELD_EVERY checks (the thread
    waited for may need it)."""
    home = _cpu() % units if units > 1 else 0
    while phase < phases:
        before = phase * units
        k = 0
        while load(ctl, PHASE_DONE) < before:
            pause()
            k += 1
            if k % YIELD_EVERY == 0:
                sched_yield()
        for i in range(units):
            u = home + i
            if u >= units:
                u -= units
            if load(ctl, NEXT + u) == phase and compare_exchange(ctl, NEXT + u, phase, phase + 1):
                return phase, u
        phase += 1
    return phases, 0


@njit(inline="always")
def finish_phased(ctl):
    """The chunk claimed last by :func:`claim_phased` is done (its writes are visible to every
    thread that sees the count)."""
    fetch_add(ctl, PHASE_DONE, 1)


@njit(inline="always")
def _wait_zero(arr, idx, spin_checks):
    """Wait until ``arr[idx] == 0``: spin ``spin_checks`` checks, then yield the core between
    checks (the thread waited for may need this very core)."""
    k = 0
    while load(arr, idx) != 0:
        if k < spin_checks:
            pause()
            k += 1
        else:
            sched_yield()


@njit(inline="always")
def publish_begin(sync, spin_checks):
    """Start writing a job: the sequence number turns odd (workers keep off the buffer), then
    wait for workers still looking at the previous job."""
    fetch_add(sync, SEQ, 1)
    _wait_zero(sync, BUSY, spin_checks)


@njit(inline="always")
def publish_end(sync):
    """The job buffer is complete: the sequence number turns even, workers may take it."""
    fetch_add(sync, SEQ, 1)


@njit(inline="always")
def finish(sync, job, spin_checks):
    """The caller's share is done (every chunk is claimed): mark the job finished and wait
    for workers still inside it. A worker that looks at the job after this sees it finished
    and does not run it (its arrays may be freed once the caller returns)."""
    store(job, DONE, load(sync, SEQ))
    _wait_zero(sync, BUSY, spin_checks)


@njit
def launch(sync, job, stage, end, fn, kernel, workers, spin):
    """Publish a job: the kernel at address ``kernel``, run through the C entry point at
    ``fn``, on the arguments in ``stage[ARGS:end]`` (written by
    :func:`onnxjit.kernels.cpu.runtime.jobargs.pack_args`), for ``workers``
    pool workers; run the caller's share and wait for the workers still inside it. Returns
    ``job[ERROR]`` (non-zero: the kernel raised in some thread)."""
    publish_begin(sync, spin)
    for i in range(CTL_SIZE):
        job[i] = 0
    job[THREADS] = workers + 1
    job[FN] = fn
    job[KERNEL] = kernel
    job[WORKERS] = workers
    job[ERROR] = 0
    job[DONE] = -1
    for i in range(ARGS, end):
        job[i] = stage[i]
    publish_end(sync)
    call_address(fn, job.ctypes.data)
    finish(sync, job, spin)
    return job[ERROR]


# A spinning worker gives up its core every this many checks without a job.
YIELD_EVERY = 64


@njit(nogil=True)
def worker_loop(sync, job, idx, seen, max_checks):
    """A pool worker's life between sleeps: spin for published jobs (yielding the core every
    YIELD_EVERY checks) and run each through its entry point, until ``max_checks`` checks pass
    without a new job (returns the last sequence number seen) or ``sync[STOP]`` is set
    (returns -1). Runs without the GIL: the job's entry point is a C function."""
    jp = job.ctypes.data
    k = 0
    while k < max_checks:
        if load(sync, STOP) != 0:
            return -1
        s = load(sync, SEQ)
        if s == seen or s & 1:
            pause()
            k += 1
            if k % YIELD_EVERY == YIELD_EVERY - 1:
                sched_yield()
            continue
        seen = s
        k = 0
        fetch_add(sync, BUSY, 1)
        if load(sync, SEQ) == s and load(job, DONE) != s and idx < load(job, WORKERS):
            call_address(load(job, FN), jp)
        fetch_add(sync, BUSY, -1)
    return seen


@njit(nogil=True)
def spin_probe(sync, max_checks):
    """The waiting loop of :func:`worker_loop` with no job coming, for timing it."""
    return worker_loop(sync, np.zeros(JOB_SIZE, np.int64), 1 << 30, load(sync, SEQ), max_checks)


@njit(nogil=True)
def current_cpu():
    """The CPU the calling thread runs on (-1 when unknown)."""
    return sched_getcpu()
