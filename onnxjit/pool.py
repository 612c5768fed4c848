"""onnxjit's thread pool: one set of worker threads for every multi-threaded kernel.

Why not Numba's ``parallel=True``: on the 2-core development VM a parallel region cost 50 to
90 us to start with Numba's workqueue layer and about 2 us with OpenMP, but OpenMP's fork-join
regions wait at their closing barrier for every thread: when the second virtual CPU was slow to
run the worker (a halted vCPU, a spinning thread of another pool), a 20 us kernel took 1.5 to 6
ms. Here the calling thread never waits for a worker that has not started: a call publishes a
job, runs the kernel itself, and each chunk of the kernel's iteration space goes to whichever
thread claims it first (:mod:`onnxjit.kernels.chunks`). At worst a call costs its serial time
plus a few microseconds; with a worker spinning nearby it runs on every thread.

Workers are Python threads that call the same nogil kernel as the caller. Between jobs a worker
spins (in nogil code, yielding its core every few checks) for about ``SPIN_SECONDS``, then sleeps
on a condition variable until the next job. BLAS is called single-threaded from pool kernels, so
there is one pool of busy threads, never two competing for cores.

:func:`run_parallel` is the only entry point. The thread count is the caller's setting
(:func:`onnxjit.threads.current`, from ``intra_op_num_threads``). Calls from several Python
threads at once are safe: one uses the workers, the others run their kernel alone.
A process forked from one with workers starts with none; its first call starts new ones.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from typing import Any

import numpy as np

from onnxjit.kernels import chunks as K

# How long an idle worker spins for the next job before it sleeps. The gaps between the
# parallel kernels of one model run are mostly below a millisecond; waking a sleeping worker
# took 50 to 100 us on the development VM (during which the caller works alone).
SPIN_SECONDS = 0.002
# How long a caller spins for workers still inside its call before it yields its core.
CALLER_SPIN_SECONDS = 20e-6


class _Job:
    __slots__ = ("kernel", "args", "workers", "error")

    def __init__(self, kernel: Any, args: tuple, workers: int) -> None:
        self.kernel = kernel
        self.args = args
        self.workers = workers  # pool workers that may take part (the caller is one more)
        self.error: BaseException | None = None


class _Pool:
    def __init__(self) -> None:
        self.sync = np.zeros(K.SYNC_SIZE, np.int64)
        self.cond = threading.Condition()
        self.busy = threading.Lock()  # held by the caller whose job is published
        self.job: _Job | None = None
        self.threads: list[threading.Thread] = []
        self.sleeping = 0  # workers waiting on cond
        # Worker thread ids and the CPU they are kept off (see _keep_off).
        self.tids: list[int] = []
        self.kept_off = -1
        try:
            self.cpus = frozenset(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # no affinity control on this platform
            self.cpus = frozenset()

    def ensure(self, n: int) -> None:
        """Start workers until there are ``n``."""
        while len(self.threads) < n:
            idx = len(self.threads)
            t = threading.Thread(
                target=self._work, args=(idx,), name=f"onnxjit-pool-{idx}", daemon=True
            )
            self.threads.append(t)
            t.start()

    def _keep_off(self, cpu: int) -> None:
        """Keep the workers off ``cpu``, the CPU the caller runs on.

        Linux places a woken thread on the waker's CPU when it believes the other CPUs busy,
        and on a virtual machine a halted vCPU can look so: the worker then queues behind the
        caller it was meant to help until the load balancer moves it, milliseconds later
        (measured: jobs picked up 0.1 to 1.2 ms late, a 2-thread Softmax at its 1-thread
        time). Restricting the workers' affinity to the other CPUs moves them at once. The
        caller itself is never pinned."""
        if cpu == self.kept_off or cpu not in self.cpus or len(self.cpus) < 2:
            return
        others = self.cpus - {cpu}
        for tid in list(self.tids):
            # OSError: the thread is gone, or the process lost that CPU
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, others)
        self.kept_off = cpu

    def _work(self, idx: int) -> None:
        self.tids.append(threading.get_native_id())
        sync = self.sync
        seen = int(sync[K.SEQ])
        spin = _spin_checks(SPIN_SECONDS)
        while True:
            seq = K.wait_job(sync, seen, spin)
            if seq == seen and not sync[K.STOP]:
                with self.cond:
                    self.sleeping += 1
                    while sync[K.SEQ] == seen and not sync[K.STOP]:
                        self.cond.wait()
                    self.sleeping -= 1
                seq = int(sync[K.SEQ])
            if sync[K.STOP]:
                return
            seen = seq
            job = self.job
            if job is None or idx >= job.workers:
                continue
            ctl = job.args[0]
            K.add(ctl, K.ACTIVE, 1)  # before claiming anything: see run()
            try:
                job.kernel(*job.args)
            except BaseException as exc:  # handed to the caller, which re-raises it
                job.error = exc
            finally:
                K.add(ctl, K.ACTIVE, -1)

    def run(self, kernel: Any, args: tuple, threads: int) -> Any:
        ctl = args[0]
        self.ensure(threads - 1)
        if self.cpus:
            self._keep_off(K.current_cpu())
        job = _Job(kernel, args, threads - 1)
        self.job = job
        K.add(self.sync, K.SEQ, 1)  # an atomic add also orders the job before it
        if self.sleeping:
            with self.cond:
                self.cond.notify_all()
        try:
            result = kernel(*args)
        finally:
            # Every chunk is claimed once the caller's kernel returns; a worker that claimed
            # one entered (ACTIVE) before claiming it, so ACTIVE == 0 means all are done.
            K.wait_idle(ctl, _spin_checks(CALLER_SPIN_SECONDS))
            self.job = None
        if job.error is not None:
            raise job.error
        return result

    def stop(self) -> None:
        self.sync[K.STOP] = 1
        with self.cond:
            self.cond.notify_all()
        for t in self.threads:
            t.join(timeout=1.0)


_pool = _Pool()
_checks_per_second: float | None = None


def _spin_checks(seconds: float) -> int:
    """How many checks of a waiting loop take about ``seconds`` (measured once)."""
    global _checks_per_second
    if _checks_per_second is None:
        probe = np.zeros(K.SYNC_SIZE, np.int64)
        K.wait_job(probe, 0, 1)  # compile or load before timing
        n = 20000
        t0 = time.perf_counter()
        K.wait_job(probe, 0, n)
        _checks_per_second = n / max(time.perf_counter() - t0, 1e-6)
    return max(1, int(seconds * _checks_per_second))


def run_parallel(kernel: Any, *args: Any, threads: int | None = None) -> Any:
    """Run the pool kernel ``kernel(ctl, *args)`` on ``threads`` threads (default: the caller's
    setting, :func:`onnxjit.threads.current`), the calling thread included; return its result.

    ``kernel`` claims its chunks with :func:`onnxjit.kernels.chunks.claim`. With one thread,
    or while another Python thread has the workers, the caller runs every chunk itself. An
    exception raised in a worker is raised here, after every thread has left the kernel.
    """
    if threads is None:
        from onnxjit.threads import current

        threads = current()
    ctl = np.zeros(K.CTL_SIZE, np.int64)
    ctl[K.THREADS] = threads
    call = (ctl, *args)
    pool = _pool
    if threads <= 1 or not pool.busy.acquire(blocking=False):
        ctl[K.THREADS] = 1
        return kernel(*call)
    try:
        return pool.run(kernel, call, threads)
    finally:
        pool.busy.release()


def _after_fork_in_child() -> None:
    # The workers stayed in the parent (and the busy lock may have been held by a thread that
    # does not exist here): the child starts a pool of its own when it first needs one.
    global _pool
    _pool = _Pool()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def worker_count() -> int:
    """Pool worker threads started so far (the callers' own threads are not counted)."""
    return len(_pool.threads)


@atexit.register
def _stop_workers() -> None:
    # Workers spin in nogil code that reads the pool's arrays: stop them before the
    # interpreter tears modules down.
    _pool.stop()
