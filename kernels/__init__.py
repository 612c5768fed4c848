"""Pure compute kernels (Numba). Nothing here imports onnxjit; onnxjit imports these."""
