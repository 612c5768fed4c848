"""Generated kernels: scalar expression IR, Python-AST emitters, file-backed modules."""
