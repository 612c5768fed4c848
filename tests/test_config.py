"""Environment settings (onnxjit/config.py) and the Numba options they drive (kernels/_jit.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from onnxjit import config
from onnxjit.codegen import elementwise as ew
from onnxjit.codegen.expr import call, const, inp, op
from onnxjit.kernels import _jit


def _has_avx512() -> bool:
    from numba.core.codegen import get_host_cpu_features

    feats = get_host_cpu_features().split(",")
    return "+avx512f" in feats and "+avx512vl" in feats


def _numba_features_after_import(env: dict[str, str]) -> dict:
    """Import onnxjit in a fresh interpreter with ``env`` added; report Numba's CPU settings."""
    code = (
        "import json, numba, onnxjit\n"
        "from onnxjit.kernels import _jit\n"
        "print(json.dumps({'features': numba.config.CPU_FEATURES, 'wide': _jit.WIDE_VECTORS}))\n"
    )
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_CPU", "ONNXJIT_VEC"))}
    full.update(env)
    out = subprocess.run(
        [sys.executable, "-c", code], env=full, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_unknown_vector_width_is_refused_with_the_choices(monkeypatch) -> None:
    monkeypatch.setenv("ONNXJIT_VECTOR_WIDTH", "wide")
    with pytest.raises(ValueError, match=r"ONNXJIT_VECTOR_WIDTH='wide'.*auto, native"):
        config.read_settings()


def test_native_vector_width_leaves_numba_alone() -> None:
    got = _numba_features_after_import({"ONNXJIT_VECTOR_WIDTH": "native"})
    assert got == {"features": None, "wide": False}


def test_user_cpu_features_are_left_alone() -> None:
    from numba.core.codegen import get_host_cpu_features

    mine = get_host_cpu_features()
    got = _numba_features_after_import({"NUMBA_CPU_FEATURES": mine})
    assert got == {"features": mine, "wide": False}


@pytest.mark.skipif(not _has_avx512(), reason="512-bit vectors are only asked for with AVX-512")
def test_auto_vector_width_asks_for_512_bit_vectors_without_touching_numba() -> None:
    # onnxjit's functions carry the preference themselves (tests/test_numba_isolation.py)
    got = _numba_features_after_import({})
    assert got == {"features": None, "wide": True}


def test_work_weight_grows_with_transcendental_work() -> None:
    x = inp(0, np.float32)
    cheap = op("add", x, const(1.0, np.float32))
    heavy = call("sigmoid", call("tanh", op("mul", x, const(0.5, np.float32))))
    assert ew.work_weight((cheap,)) == 1.0
    assert ew.work_weight((heavy,)) > 1.0
    chain = heavy
    for _ in range(4):
        chain = call("tanh", chain)
    assert ew.work_weight((chain,)) > ew.work_weight((heavy,))


def test_heavy_kernels_take_threads_at_a_smaller_size(monkeypatch) -> None:
    """A tanh chain goes parallel at a size where an add stays serial; both match numpy."""
    x = inp(0, np.float32)
    heavy = call("tanh", call("tanh", x))
    cheap = op("add", x, const(1.0, np.float32))
    n = 1 << 12
    # a threshold between the add's work and the tanh chain's
    monkeypatch.setattr(_jit, "PARALLEL_THRESHOLD", int(n * (1 + ew.work_weight((heavy,))) / 2))
    ew._PLANS.clear()
    seen: list[str] = []
    real = ew.run_parallel

    def spy(kernel, *args):
        seen.append(kernel.__name__)
        return real(kernel, *args)

    monkeypatch.setattr(ew, "run_parallel", spy)
    a = np.random.default_rng(3).standard_normal((4, n // 4)).astype(np.float32)
    got_heavy = ew.apply(heavy, [a])
    assert seen == ["kernel_par"]
    got_cheap = ew.apply(cheap, [a])
    assert seen == ["kernel_par"]  # the add ran serial
    np.testing.assert_allclose(got_heavy, np.tanh(np.tanh(a)), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(got_cheap, a + np.float32(1.0))
    ew._PLANS.clear()
