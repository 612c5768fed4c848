"""Internal (onnxjit-domain) operators created by graph passes (being written)."""
