"""onnxjit sets Numba options on its own functions only (issue 41; kernels/_jit.py).

Importing onnxjit and running a session leaves ``numba.config`` as it was: a user's own
``@numba.njit(cache=True)`` function caches where Numba's rules put it (its ``__pycache__``, or
the user's ``NUMBA_CACHE_DIR``), onnxjit's kernels go to onnxjit's folder through onnxjit's cache
locator whatever the user set, and the 512-bit vector preference is an attribute of onnxjit's
functions, not the process's CPU feature string.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numba
import numpy as np
import pytest

from onnxjit.kernels import _jit

ROOT = Path(__file__).resolve().parents[1]

_USER_MODULE = """
import numba

@numba.njit(cache=True)
def user_sum(a):
    s = 0.0
    for x in a:
        s += x
    return s
"""

_CHILD = r"""
import json, sys
import numba
import numpy as np

KEYS = ("CACHE_DIR", "CPU_FEATURES", "CPU_NAME", "CACHE_LOCATOR_CLASSES")
before = {k: getattr(numba.config, k) for k in KEYS}

import onnx
from onnx import TensorProto, helper, numpy_helper
import onnxjit

half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
nodes = [
    helper.make_node("Softmax", ["x"], ["y"], axis=-1),  # a hand-written kernel
    # a generated chain, over enough elements for the thread pool (its entry point is cached)
    helper.make_node("Mul", ["big", "half"], ["t0"]),
    helper.make_node("Tanh", ["t0"], ["t1"]),
    helper.make_node("Add", ["t1", "big"], ["z"]),
]
graph = helper.make_graph(
    nodes,
    "isolation",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8]),
     helper.make_tensor_value_info("big", TensorProto.FLOAT, ["k"])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8]),
     helper.make_tensor_value_info("z", TensorProto.FLOAT, ["k"])],
    [half],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
model.ir_version = 9
so = onnxjit.SessionOptions()
so.intra_op_num_threads = 2
sess = onnxjit.InferenceSession(model.SerializeToString(), so)
x = np.arange(16, dtype=np.float32).reshape(2, 8)
big = np.linspace(-3, 3, 1 << 17, dtype=np.float32)
y, z = sess.run(None, {"x": x, "big": big})
e = np.exp(x - x.max(axis=1, keepdims=True))
assert np.allclose(y, e / e.sum(axis=1, keepdims=True), atol=1e-6)
assert np.allclose(z, np.tanh(big * np.float32(0.5)) + big, atol=1e-6)

compiles = onnxjit.compile_count()  # counts every Numba compilation, the user's too

sys.path.insert(0, sys.argv[1])
import usermod
assert usermod.user_sum(np.arange(4.0)) == 6.0

after = {k: getattr(numba.config, k) for k in KEYS}
print("RESULT " + json.dumps({
    "before": before,
    "after": after,
    "compiles": compiles,
    "cache_dir": sess.stats()["cache_dir"],
    "user_cache_path": usermod.user_sum.stats.cache_path,
    "user_cache_hits": sum(usermod.user_sum.stats.cache_hits.values()),
}, default=str))
"""


def _run_child(user_dir: Path, onnxjit_cache: Path, numba_cache: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env["ONNXJIT_CACHE_DIR"] = str(onnxjit_cache)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if numba_cache is not None:
        env["NUMBA_CACHE_DIR"] = str(numba_cache)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(user_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def _files(folder: Path, pattern: str) -> list[Path]:
    return sorted(folder.rglob(pattern)) if folder.exists() else []


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A folder with the user's module and an onnxjit cache folder both processes share."""
    base = tmp_path_factory.mktemp("isolation")
    user_dir = base / "user"
    user_dir.mkdir()
    (user_dir / "usermod.py").write_text(_USER_MODULE)
    return user_dir, base / "onnxjit-cache"


def test_numba_config_and_the_users_cache_are_left_alone(shared):
    user_dir, onnxjit_cache = shared
    got = _run_child(user_dir, onnxjit_cache)
    assert got["after"] == got["before"]
    assert got["before"]["CACHE_DIR"] == ""  # the child runs without NUMBA_* variables
    # the user's function caches next to its source, as Numba does without onnxjit
    assert Path(got["user_cache_path"]) == user_dir / "__pycache__"
    assert _files(user_dir / "__pycache__", "usermod.user_sum-*.nbi")
    # and nothing of it lands in onnxjit's folder, nor anything of onnxjit next to it
    assert not _files(onnxjit_cache, "usermod*")
    assert [p.name for p in _files(user_dir, "*.nbi")] == [
        p.name for p in _files(user_dir / "__pycache__", "usermod.user_sum-*.nbi")
    ]
    # onnxjit's entries: hand-written kernels, generated kernels and the pool's generated entry
    # points (C callbacks), each in its folder below onnxjit's cache folder (named from the
    # package, not from where it is installed)
    numba_dir = Path(got["cache_dir"]) / "numba"
    assert Path(got["cache_dir"]).parent == onnxjit_cache
    entries = sorted(str(p.relative_to(numba_dir)) for p in numba_dir.rglob("*.nbi"))
    assert _files(numba_dir / "kernels", "*softmax*.nbi"), entries
    assert _files(numba_dir / "gen", "*.kernel_par-*.nbi"), entries
    assert _files(numba_dir / "gen", "*.entry-*.nbi"), entries


def test_second_process_loads_onnxjit_from_its_folder_whatever_numba_cache_dir_says(
    shared, tmp_path
):
    user_dir, onnxjit_cache = shared
    _run_child(user_dir, onnxjit_cache)  # fills the cache (a no-op after the test above)
    users = tmp_path / "numba-cache"
    got = _run_child(user_dir, onnxjit_cache, numba_cache=users)
    assert got["compiles"] == 0, got
    assert got["after"] == got["before"]
    assert got["before"]["CACHE_DIR"] == str(users)
    # the user's own setting still applies to the user's function, and only to it
    assert Path(got["user_cache_path"]).parent == users
    assert _files(users, "usermod.user_sum-*.nbi")
    assert [p.name for p in _files(users, "*.nbi")] == [
        p.name for p in _files(users, "usermod.user_sum-*.nbi")
    ]


def test_cache_subfolders_are_named_from_the_package_not_its_path(tmp_path):
    kernels_root = os.path.dirname(os.path.abspath(_jit.__file__))
    sub = _jit._cache_subpath(os.path.join(kernels_root, "cpu", "norm.py"))
    assert sub == os.path.join("kernels", "cpu")
    assert _jit._cache_subpath(os.path.join(kernels_root, "vecmath.py")) == "kernels"
    elsewhere = tmp_path / "mine.py"
    elsewhere.write_text("")
    sub = _jit._cache_subpath(str(elsewhere))
    assert re.fullmatch(rf"{re.escape(tmp_path.name)}_[0-9a-f]{{40}}", sub), sub


def test_a_function_without_a_cache_folder_compiles_uncached(monkeypatch):
    monkeypatch.setattr(_jit, "_CACHE_DIR", None)

    def f(x):
        return x + 1

    with pytest.warns(RuntimeWarning, match="has no writable cache folder"):
        cache = _jit._new_cache(f)
    assert isinstance(cache, numba.core.caching.NullCache)


def _add_one(x, y):
    for i in range(x.size):
        y[i] = x[i] * np.float32(2.5) + np.float32(1.0)


_SIG = (numba.float32[::1], numba.float32[::1])


@pytest.mark.parametrize("wide", [False, True])
def test_wide_vectors_are_an_attribute_of_onnxjits_functions_only(monkeypatch, wide):
    monkeypatch.setattr(_jit, "WIDE_VECTORS", wide)
    kernel = _jit.njit(cache=False, fma=True)(_add_one)
    kernel.compile(_SIG)
    assert ('"prefer-vector-width"="512"' in kernel.inspect_llvm(_SIG)) is wide
    theirs = numba.njit(_add_one)
    theirs.compile(_SIG)
    assert "prefer-vector-width" not in theirs.inspect_llvm(_SIG)


def test_cache_entries_are_keyed_by_the_vector_width(monkeypatch):
    from numba.core.registry import cpu_target

    cache = _jit._SafeCache(_add_one)
    codegen = cpu_target.target_context.codegen()
    monkeypatch.setattr(_jit, "WIDE_VECTORS", False)
    narrow = cache._index_key(_SIG, codegen)
    monkeypatch.setattr(_jit, "WIDE_VECTORS", True)
    assert cache._index_key(_SIG, codegen) != narrow


# Compiles (never runs) for a Skylake server core: LLVM's tuning there prefers 256-bit vectors.
_ASM_CHILD = r"""
import json, re
import numba, numpy as np
from onnxjit.kernels import _jit

def body(x, y):
    for i in range(x.size):
        y[i] = x[i] * np.float32(2.5) + np.float32(1.0)

sig = (numba.float32[::1], numba.float32[::1])
out = {}
for wide in (False, True):
    _jit.WIDE_VECTORS = wide  # what configure() sets for ONNXJIT_VECTOR_WIDTH=auto
    kernel = _jit.njit(cache=False, fma=True)(body)
    kernel.compile(sig)
    out[f"onnxjit_wide={wide}"] = len(re.findall(r"%zmm", kernel.inspect_asm(sig)))
    theirs = numba.njit(body)
    theirs.compile(sig)
    out[f"user_wide={wide}"] = len(re.findall(r"%zmm", theirs.inspect_asm(sig)))
print("RESULT " + json.dumps(out))
"""

_SKYLAKE_X = (
    "+64bit,+sse,+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+cx16,+cmov,+fxsr,+xsave,"
    "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+lzcnt,+movbe,"
    "+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx512cd"
)


@pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64"), reason="x86 vector registers"
)
def test_wide_vectors_reach_the_machine_code_of_onnxjits_kernels_only(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(
        NUMBA_CPU_NAME="skylake-avx512",
        NUMBA_CPU_FEATURES=_SKYLAKE_X,
        ONNXJIT_CACHE_DIR=str(tmp_path),
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_ASM_CHILD)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(next(ln[7:] for ln in out.stdout.splitlines() if ln.startswith("RESULT ")))
    assert got["onnxjit_wide=False"] == 0, got  # LLVM's tuning: 256-bit vectors
    assert got["onnxjit_wide=True"] > 0, got  # the attribute: 512-bit vectors
    assert got["user_wide=False"] == got["user_wide=True"] == 0, got  # the user's code: as is
