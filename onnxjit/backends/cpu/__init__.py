"""The CPU backend: Numba kernels run by onnxjit's own thread pool."""
