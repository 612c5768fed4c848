"""onnxjit's thread pool: one set of worker threads for every multi-threaded kernel.

Why not Numba's ``parallel=True``: on the 2-core development VM a parallel region cost 50 to
90 us to start with Numba's workqueue layer and about 2 us with OpenMP, but OpenMP's fork-join
regions wait at their closing barrier for every thread: when the second virtual CPU was slow to
run the worker (a halted vCPU, a spinning thread of another pool), a 20 us kernel took 1.5 to 6
ms. Here the caller never waits for a worker that has not started: each chunk of a kernel's
iteration space goes to whichever thread claims it first
(:mod:`onnxjit.kernels.cpu.runtime.chunks`).

The workers never touch Python while they work. A worker thread spins, without the GIL, in
:func:`onnxjit.kernels.cpu.runtime.chunks.worker_loop` watching a shared sequence number; a caller
writes the kernel's arguments into a shared job buffer (data pointers, shapes, scalars) and
publishes it, and each worker calls the job's entry point: a C function (a Numba ``cfunc``) that
rebuilds the arguments as arrays and runs the kernel. (Workers that were Python threads calling the
kernel needed the GIL between jobs, and handing the GIL over woke a sleeping thread each time: they
joined 20 to 30 us late on the development VM.) The caller writes the arguments with a generated
``launch`` (one intrinsic call, :mod:`onnxjit.kernels.cpu.runtime.jobargs`, and a call of
:func:`onnxjit.kernels.cpu.runtime.chunks.launch`, which publishes, runs the caller's share and
waits, the same for every kernel). Per argument-type signature onnxjit generates that ``launch``
(explicit parameters: a ``*args`` function costs Numba's dispatcher 0.25 us more per call) and the
``entry`` (what each thread runs: it rebuilds the arguments and calls the kernel's machine code
through its address, so that entries are shared between kernels), in a source file under the cache
folder like every generated kernel, so that Numba caches them on disk. Written as one Python
statement per job-buffer slot, the launch and entry of a kernel with twenty arguments took 1 to
1.7 s to compile on a Zen 3.

A worker that finds no job for about ``SPIN_SECONDS`` sleeps on a condition variable; the next
caller wakes it, runs alone until it arrives, and the pool spins again for later kernels.

:func:`run_parallel` is the only entry point. The thread count is the caller's setting
(:func:`onnxjit.backends.cpu.threads.current`, from ``intra_op_num_threads``). Calls from
several Python threads at once are safe: one uses the workers, the others run their kernel
alone. A process forked from one with workers starts with none; its first call starts new
ones.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import numba
import numpy as np
from numba._dispatcher import compute_fingerprint
from numba.core import types

from onnxjit.codegen import modcache
from onnxjit.kernels.cpu.runtime import chunks as K
from onnxjit.kernels.cpu.runtime import jobargs

# How long an idle worker spins for the next job before it sleeps. The gaps between the
# parallel kernels of one model run are mostly below a millisecond; waking a sleeping worker
# took 50 to 100 us on the development VM (during which the caller works alone).
SPIN_SECONDS = 0.002
# How long a caller spins for workers before it starts yielding its core between checks.
CALLER_SPIN_SECONDS = 20e-6


class _Pool:
    def __init__(self) -> None:
        self.sync = np.zeros(K.SYNC_SIZE, np.int64)
        self.job = np.zeros(K.JOB_SIZE, np.int64)
        # the next job's arguments, written by the generated launch before it publishes
        self.stage = np.zeros(K.JOB_SIZE, np.int64)
        self.cond = threading.Condition()
        self.busy = threading.Lock()  # held by the caller whose job is published
        self.threads: list[threading.Thread] = []
        self.sleeping = 0  # workers waiting on cond
        self.wakes = 0  # bumped to wake them
        # Worker thread ids and the CPU they are kept off (see _keep_off).
        self.tids: list[int] = []
        self.kept_off = -1
        try:
            self.cpus = frozenset(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # no affinity control on this platform
            self.cpus = frozenset()

    def ensure(self, n: int) -> None:
        """Start workers until there are ``n``."""
        if len(self.threads) >= n:
            return
        # The workers' loop is loaded (or compiled) and the spin calibrated here, in the
        # caller: a worker left to do it itself could still be compiling when the process
        # exits (the kernel would then never reach the on-disk cache), and the kernel would
        # be charged to no session.
        spin = spin_checks(SPIN_SECONDS)
        K.worker_loop(self.sync, self.job, 0, int(self.sync[K.SEQ]), 0)
        while len(self.threads) < n:
            idx = len(self.threads)
            t = threading.Thread(
                target=self._work, args=(idx, spin), name=f"onnxjit-pool-{idx}", daemon=True
            )
            self.threads.append(t)
            t.start()

    def _work(self, idx: int, spin: int) -> None:
        self.tids.append(threading.get_native_id())
        if self.kept_off >= 0 and len(self.cpus) > 1:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, self.cpus - {self.kept_off})
        sync = self.sync
        seen = int(sync[K.SEQ])
        while True:
            seen = K.worker_loop(sync, self.job, idx, seen, spin)
            if seen < 0:
                return
            with self.cond:
                wakes = self.wakes
                self.sleeping += 1
                while self.wakes == wakes and not sync[K.STOP]:
                    self.cond.wait()
                self.sleeping -= 1

    def wake(self) -> None:
        with self.cond:
            self.wakes += 1
            self.cond.notify_all()

    def keep_off(self, cpu: int) -> None:
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

    def stop(self) -> None:
        self.sync[K.STOP] = 1
        self.wake()
        for t in self.threads:
            t.join(timeout=1.0)


_pool = _Pool()
_checks_per_second: float | None = None


def spin_checks(seconds: float) -> int:
    """How many checks of a waiting loop take about ``seconds`` (measured once)."""
    global _checks_per_second
    if _checks_per_second is None:
        probe = np.zeros(K.SYNC_SIZE, np.int64)
        K.spin_probe(probe, 1)  # compile or load before timing
        # The fastest of short batches, each within one stretch between the loop's yields.
        # One long probe yields the core hundreds of times, and when another thread spun on
        # this CPU (onnxruntime's pool after a run) each yield lasted a scheduler slice: the
        # rate measured then was far too low, the workers fell asleep between the kernels of
        # a run and every 2-thread kernel of the process ran at 1-thread speed.
        best = float("inf")
        for _ in range(64):
            t0 = time.perf_counter()
            K.spin_probe(probe, K.YIELD_EVERY - 1)
            best = min(best, time.perf_counter() - t0)
        _checks_per_second = (K.YIELD_EVERY - 1) / max(best, 1e-7)
    return max(1, int(seconds * _checks_per_second))


# -- generated launch / entry pairs -------------------------------------------------------------

_ENTRIES: dict[tuple, Any] = {}  # (kernel, fingerprint of the arguments) -> _Entry or None
_MODULES: dict[str, Any] = {}  # generated source -> module (one per argument-type signature)
_ENTRIES_LOCK = threading.Lock()


class _Entry:
    __slots__ = ("launch", "address", "kernel")

    def __init__(self, launch: Any, address: int, kernel: int) -> None:
        self.launch = launch  # the generated module's launch
        self.address = address  # the C entry point every thread calls
        self.kernel = kernel  # the kernel's machine code, called by the entry


def _type_expr(ty: types.Type) -> str:
    """Python source that evaluates, in the generated module, to the Numba type ``ty`` (one
    that :func:`onnxjit.kernels.cpu.runtime.jobargs.job_layout` returns)."""
    if isinstance(ty, types.Array):
        return f'types.Array({_type_expr(ty.dtype)}, {ty.ndim}, "C")'
    if isinstance(ty, types.BaseTuple):
        return f"types.BaseTuple.from_types([{', '.join(_type_expr(t) for t in ty.types)}])"
    return "types.boolean" if isinstance(ty, types.Boolean) else f"types.{ty.name}"


def _generate(args: tuple) -> tuple[str, tuple[types.Type, ...]]:
    """The module of ``launch`` (the caller's side: it writes the arguments into the staging
    buffer and calls :func:`onnxjit.kernels.cpu.runtime.chunks.launch`) and ``entry`` (each
    thread's) for kernel arguments like ``args`` (any kernel: the entry calls the kernel through the
    address in the job buffer), and the argument types the kernel must be compiled for (the control
    array first); raises ``jobargs.Uncarried`` when the job buffer cannot carry them."""
    names = ", ".join(f"a{i}" for i in range(len(args)))
    rebuilt, slots = jobargs.job_layout(types.BaseTuple.from_types([numba.typeof(a) for a in args]))
    if K.ARGS + slots > K.JOB_SIZE:
        raise jobargs.Uncarried(f"{slots} slots of arguments, the job buffer has room for "
                                f"{K.JOB_SIZE - K.ARGS}")  # fmt: skip
    # Numba's cache keys the entry by this file only: the name must change with the files
    # whose code it inlines.
    here = Path(K.__file__).parent
    h = hashlib.sha256()
    for f in (here / "chunks.py", here / "atomics.py", here / "jobargs.py", Path(__file__)):
        with contextlib.suppress(OSError):
            h.update(f.read_bytes())
    source = f'''"""onnxjit generated pool entry (sources {h.hexdigest()[:16]}).

argument types: {", ".join(str(t) for t in rebuilt.types)}
"""
from numba import carray, types
from onnxjit.kernels._jit import centry, njit
from onnxjit.kernels.cpu.runtime.atomics import call_native
from onnxjit.kernels.cpu.runtime.chunks import ARGS, CTL_SIZE, ERROR, JOB_SIZE, KERNEL
from onnxjit.kernels.cpu.runtime.chunks import launch as publish
from onnxjit.kernels.cpu.runtime.jobargs import pack_args, unpack_args

ARG_TYPES = {_type_expr(rebuilt)}


@centry(types.void(types.CPointer(types.int64)))
def entry(jp):
    job = carray(jp, (JOB_SIZE,))
    if call_native(job[KERNEL], (job[0:CTL_SIZE],) + unpack_args(job, ARGS, ARG_TYPES)) != 0:
        job[ERROR] = 1  # the caller reruns the kernel alone to raise it in Python


@njit
def launch(sync, job, stage, fn, kernel, workers, spin, {names}):
    return publish(sync, job, stage, pack_args(stage, ARGS, ({names},)), fn, kernel, workers, spin)
'''
    ctl_type = types.Array(types.int64, 1, "C")
    return source, (ctl_type, *rebuilt.types)


def _native_address(kernel: Any, sig: tuple[types.Type, ...]) -> int:
    """The machine-code address of ``kernel`` compiled for ``sig`` (compiled, or loaded
    from Numba's disk cache, now if needed)."""
    cres = kernel.overloads.get(sig)
    if cres is None:
        kernel.compile(sig)
        cres = kernel.overloads[sig]
    return cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)


def _entry_for(kernel: Any, args: tuple, key: tuple) -> _Entry | None:
    with _ENTRIES_LOCK:
        if key in _ENTRIES:
            return _ENTRIES[key]
        try:
            source, sig = _generate(args)
        except jobargs.Uncarried:
            _ENTRIES[key] = None
            return None
        mod = _MODULES.get(source)
        if mod is None:
            mod = _MODULES[source] = modcache.load(source)
        entry = _Entry(mod.launch, mod.entry.address, _native_address(kernel, sig))
        _ENTRIES[key] = entry
        return entry


def run_parallel(kernel: Any, *args: Any, threads: int | None = None) -> None:
    """Run the pool kernel ``kernel(ctl, *args)`` on ``threads`` threads (default: the caller's
    setting, :func:`onnxjit.backends.cpu.threads.current`), the calling thread included.

    ``kernel`` claims its chunks with :func:`onnxjit.kernels.cpu.runtime.chunks.claim`; its result
    is not returned (each thread has its own). With one thread, with arguments the job buffer cannot
    carry (arrays that are not C-contiguous), or while another Python thread has the workers, the
    caller runs every chunk itself. An exception raised in any thread is raised here.
    """
    if threads is None:
        from onnxjit.backends.cpu.threads import current

        threads = current()
    entry = None
    if threads > 1:
        key = (kernel, compute_fingerprint(args))
        entry = _ENTRIES.get(key, False)
        if entry is False:
            entry = _entry_for(kernel, args, key)
    _launch(entry, kernel, args, threads)


def bind(kernel: Any, sample: tuple, threads: int) -> Any:
    """``run_parallel(kernel, *args, threads=threads)`` for arguments of the same types as
    ``sample`` (dtypes, ranks, layouts: what a plan guarantees), with the generated entry
    looked up once instead of at every call."""
    entry = None
    if threads > 1:
        key = (kernel, compute_fingerprint(sample))
        entry = _ENTRIES.get(key, False)
        if entry is False:
            entry = _entry_for(kernel, sample, key)

    def go(*args: Any) -> None:
        _launch(entry, kernel, args, threads)

    return go


def _launch(entry: _Entry | None, kernel: Any, args: tuple, threads: int) -> None:
    pool = _pool
    if entry is None or not pool.busy.acquire(blocking=False):
        _run_alone(kernel, args)
        return
    try:
        pool.ensure(threads - 1)
        if pool.cpus:
            pool.keep_off(K.current_cpu())
        if pool.sleeping:
            pool.wake()
        failed = entry.launch(
            pool.sync, pool.job, pool.stage, entry.address, entry.kernel, threads - 1,
            _caller_spin(), *args,
        )  # fmt: skip
    finally:
        pool.busy.release()
    if failed:
        _run_alone(kernel, args)  # raises the kernel's error with its message
        raise RuntimeError(
            f"the pool kernel {kernel.__name__} failed in a worker thread but not when run "
            "again alone; please report this with the model"
        )


def _run_alone(kernel: Any, args: tuple) -> None:
    ctl = np.zeros(K.CTL_SIZE, np.int64)
    ctl[K.THREADS] = 1
    kernel(ctl, *args)


_caller_checks: int | None = None


def _caller_spin() -> int:
    global _caller_checks
    if _caller_checks is None:
        _caller_checks = spin_checks(CALLER_SPIN_SECONDS)
    return _caller_checks


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
