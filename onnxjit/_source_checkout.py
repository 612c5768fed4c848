"""Let ``onnxjit.kernels`` resolve when onnxjit is imported straight from a source checkout.

An installed copy carries the kernels as ``onnxjit/kernels`` (pyproject.toml maps the top-level
``kernels/`` folder there). A checkout keeps them beside the package, so ``python -c "import
onnxjit"`` run from the repository root, where the checkout shadows any installed copy, would
otherwise fail with ``No module named 'onnxjit.kernels'``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def register_checkout_kernels(package_dir: Path) -> ModuleType | None:
    """Import ``<checkout>/kernels`` as ``onnxjit.kernels`` when ``package_dir`` is a checkout.

    Returns the module when it had to be registered here, None when the package already carries
    its kernels (installed copy) or when another finder (an editable install) provides them.
    """
    if (package_dir / "kernels").is_dir() or "onnxjit.kernels" in sys.modules:
        return None
    if importlib.util.find_spec("onnxjit.kernels") is not None:
        return None
    source = package_dir.parent / "kernels"
    init = source / "__init__.py"
    if not (source / "_jit.py").is_file() or not init.is_file():
        return None
    spec = importlib.util.spec_from_file_location(
        "onnxjit.kernels", init, submodule_search_locations=[str(source)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["onnxjit.kernels"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["onnxjit.kernels"]
        raise
    return module
