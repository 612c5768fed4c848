"""Execution backends: each resolves kernels and owns the runtime they run on."""
