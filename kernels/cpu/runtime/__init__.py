"""The CPU backend's kernel-side runtime: what pool kernels are built on.

Atomics and intrinsics (:mod:`.atomics`), claiming chunks of a pool kernel's items and the
workers' waiting loop (:mod:`.chunks`), packing a kernel's arguments into the pool's job buffer
(:mod:`.jobargs`), software prefetch (:mod:`.prefetch`) and non-temporal stores
(:mod:`.streaming`). The host side of the same runtime, the thread pool itself, is
:mod:`onnxjit.backends.cpu.pool`. Target-neutral helpers that CPU and CUDA kernels share stay in
``kernels/scalar.py`` and ``kernels/vecmath.py``.
"""
