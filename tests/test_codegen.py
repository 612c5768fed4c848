"""The elementwise code generator: generated files, specialisation keys, broadcasting."""

from __future__ import annotations

import hashlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import onnxjit  # noqa: F401  (configures the kernel cache)
from onnxjit import jitcache
from onnxjit.codegen import elementwise as ew
from onnxjit.codegen import expr as E
from onnxjit.codegen import modcache
from onnxjit.config import SETTINGS
from onnxjit.kernels import _jit
from onnxjit.kernels.cpu.runtime import prefetch

F32 = np.dtype(np.float32)


def _entry_for(expr, arrays):
    _, _, masks = ew.broadcast_layout([np.asarray(a).shape for a in arrays])
    return ew.kernel_cache()[((expr,), masks, ("",) * len(arrays), ("",))]


def _affine(dtype=np.float32):
    x, y = E.inp(0, dtype), E.inp(1, dtype)
    return E.op("add", E.op("mul", x, E.const(0.5, dtype)), y)


def test_generated_file_is_named_by_the_hash_of_its_source():
    e = _affine()
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    ew.apply(e, [a, a])
    path = Path(_entry_for(e, [a, a]).source_path)
    # <ONNXJIT_CACHE_DIR>/v-<key of the kernel sources>/gen (onnxjit.jitcache)
    assert path.parent == jitcache.cache_folder(SETTINGS.cache_dir) / "gen"
    assert path.parent.parent.parent == Path(SETTINGS.cache_dir)
    src = path.read_text(encoding="utf-8")
    assert path.name == hashlib.sha256(src.encode("utf-8")).hexdigest() + ".py"
    # no temporary files are left behind by the atomic write
    assert not list(path.parent.glob(".tmp-*"))


def test_generated_names_are_generated_and_constants_keep_their_dtype():
    e = E.call("sigmoid", _affine())
    src = ew.generate_source((e,), ((True,), (False,)))
    assert "np.float32(0.5)" in src
    assert "sigmoid_f32" in src
    assert "def kernel(y0, x0, x1, n0)" in src
    assert "def kernel_par(ctl, y0, x0, x1, n0)" in src and "claim(ctl, n0)" in src


def test_float32_chain_is_not_computed_in_float64():
    # (x + 1e-8) - x is exactly 0 in float32 for x = 1, but 1e-8 in float64.
    x = E.inp(0, np.float32)
    e = E.op("sub", E.op("add", x, E.const(1e-8, np.float32)), x)
    got = ew.apply(e, [np.ones(5, np.float32)])
    assert got.dtype == F32
    np.testing.assert_array_equal(got, np.zeros(5, np.float32))


def test_new_batch_size_compiles_nothing():
    e = E.call("relu", _affine())
    b = np.random.rand(3, 1, 1).astype(np.float32)
    a1 = np.random.rand(2, 3, 4, 5).astype(np.float32)
    ew.apply(e, [a1, b])
    n_kernels = len(ew.kernel_cache())
    entry = _entry_for(e, [a1, b])
    sigs = list(entry.module.kernel.signatures)
    assert len(sigs) == 1
    for n in (1, 7, 16):
        a = np.random.rand(n, 3, 4, 5).astype(np.float32)
        got = ew.apply(e, [a, b])
        np.testing.assert_allclose(got, np.maximum(a * np.float32(0.5) + b, 0), rtol=1e-6)
        # also a different spatial size: the same (N, C, H*W) layout
        a = np.random.rand(n, 3, 2, 9).astype(np.float32)
        np.testing.assert_allclose(ew.apply(e, [a, b]), np.maximum(a * 0.5 + b, 0), rtol=1e-6)
    assert len(ew.kernel_cache()) == n_kernels
    assert list(entry.module.kernel.signatures) == sigs


@pytest.mark.parametrize(
    "shapes, sizes",
    [
        ([(2, 3, 4, 5), (2, 3, 4, 5)], (120,)),
        ([(2, 3, 4, 5), (3, 1, 1)], (2, 3, 20)),
        ([(2, 3, 4, 5), ()], (120,)),
        ([(4, 5), (5,)], (4, 5)),
        ([(4, 1), (1, 5)], (4, 5)),
        ([(1, 1, 6), (6,)], (1, 6)),
        ([(1, 3, 4, 5), (3, 1, 1)], (1, 3, 20)),
        ([(), ()], ()),
        ([(1, 1), (1,)], (1, 1)),
        ([(0, 3), (3,)], (0, 3)),
    ],
)
def test_broadcast_layout_collapses_dimensions(shapes, sizes):
    out, got, masks = ew.broadcast_layout(shapes)
    assert out == np.broadcast_shapes(*shapes)
    if 0 not in out:
        assert got == sizes
        assert all(len(m) == len(got) for m in masks)


def test_broadcast_layout_rejects_incompatible_shapes():
    with pytest.raises(ValueError, match="cannot be broadcast"):
        ew.broadcast_layout([(2, 3), (4,)])


@pytest.mark.parametrize(
    "shapes",
    [
        [(2, 3, 4, 5), (3, 1, 1), (5,)],
        [(4, 1, 3), (1, 5, 1), ()],
        [(3,), (2, 1), (2, 3)],
        [(), (), ()],
        [(0, 4), (4,), (1, 1)],
        [(2, 0, 3), (1,), (3,)],
    ],
)
def test_three_input_broadcast_agrees_with_numpy(shapes):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    x, y, z = (E.inp(i, np.float32) for i in range(3))
    e = E.call("max", E.op("mul", x, y), z)
    got = ew.apply(e, arrays)
    want = np.maximum(arrays[0] * arrays[1], arrays[2])
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_non_contiguous_inputs():
    a = np.arange(24, dtype=np.float64).reshape(4, 6)
    e = E.op("add", E.inp(0, np.float64), E.inp(1, np.float64))
    got = ew.apply(e, [a.T, a[::2].T[:, :1]])
    np.testing.assert_array_equal(got, a.T + a[::2].T[:, :1])


@pytest.mark.parametrize("threads", [1, 2])
def test_parallel_path_agrees(monkeypatch, threads):
    monkeypatch.setattr(_jit, "PARALLEL_THRESHOLD", 10)
    launched = []
    real = ew.run_parallel

    def spy(kernel, *args, **kw):
        launched.append(kernel)
        return real(kernel, *args, threads=threads)

    monkeypatch.setattr(ew, "run_parallel", spy)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((6, 3, 7)).astype(np.float32)
    b = rng.standard_normal((3, 1)).astype(np.float32)
    e = E.call("relu", _affine())
    got = ew.apply(e, [a, b])
    np.testing.assert_allclose(got, np.maximum(a * 0.5 + b, 0), rtol=1e-6)
    assert launched == [_entry_for(e, [a, b]).module.kernel_par]


def _heavy_chain():
    # sigmoid(log(tanh(x + b) + 2)) * x: three vecmath helpers, enough for interleaved streams
    x, b = E.inp(0, np.float32), E.inp(1, np.float32)
    t = E.call("tanh", E.op("add", x, b))
    t = E.call("sigmoid", E.call("log", E.op("add", t, E.const(2.0, np.float32))))
    return E.op("mul", t, x)


def test_heavy_chains_walk_their_innermost_loop_in_interleaved_streams():
    e = _heavy_chain()
    assert ew.interleave_streams((e,)) > 1 and ew.interleave_streams((_affine(),)) == 1
    src = ew.generate_source((e,), ((True, True), (False, True)))
    assert "i1_span" in src and "i1_at1" in src
    assert "i1_span" not in ew.generate_source((_affine(),), ((True, True), (False, True)))


@pytest.fixture
def many_registers(monkeypatch):
    """The stream policy of a CPU with 32 vector registers (AVX-512), whatever this one has."""
    monkeypatch.setattr(_jit, "vector_registers", lambda: 32)


def test_cheap_chains_over_rows_walk_one_stream(many_registers):
    # one vecmath helper and an add: interleaved over one collapsed dim, not over rows (rank 2,
    # a row-broadcast operand), where the streams would be short segments of each row
    x, b = E.inp(0, np.float32), E.inp(1, np.float32)
    e = E.call("gelu", E.op("add", x, b))
    assert ew.interleave_streams((e,), 1) > 1 and ew.interleave_streams((e,), 2) == 1
    assert "i1_span" not in ew.generate_source((e,), ((True, True), (False, True)))
    assert "i0_span" in ew.generate_source((e,), ((True,), (True,)))


def _function_source(src: str, name: str) -> str:
    start = src.index(f"def {name}(")
    end = src.find("\n@", start)
    return src[start:] if end < 0 else src[start:end]


def test_lone_helpers_walk_one_stream_with_16_vector_registers(monkeypatch):
    # without AVX-512 four streams of one vecmath helper spill its constants: one stream,
    # while a chain of three helpers still interleaves
    monkeypatch.setattr(_jit, "vector_registers", lambda: 16)
    x = E.inp(0, np.float32)
    for e in (E.call("gelu", x), E.op("mul", x, E.call("sigmoid", x))):
        assert ew.interleave_streams((e,), 1) == 1
        assert "i0_span" not in ew.generate_source((e,), ((True,),))
    assert ew.interleave_streams((_heavy_chain(),), 1) > 1


def test_vector_registers_follow_the_feature_string(monkeypatch):
    # an x86 feature string with and without AVX-512 (vector_registers is cached: call the
    # function it wraps)
    monkeypatch.setattr(_jit.platform, "machine", lambda: "x86_64")
    read = _jit.vector_registers.__wrapped__
    monkeypatch.setattr(_jit.numba.config, "CPU_FEATURES", "+avx2,+fma,-avx512f")
    assert read() == 16
    monkeypatch.setattr(_jit.numba.config, "CPU_FEATURES", "+avx2,+fma,+avx512f,+avx512vl")
    assert read() == 32
    monkeypatch.setattr(_jit.platform, "machine", lambda: "aarch64")
    assert read() == 32


def test_cpu_name_follows_numba_cpu_name(monkeypatch):
    # NUMBA_CPU_NAME where set, LLVM's host name for "host" or unset (cpu_name is cached:
    # call the function it wraps)
    import llvmlite.binding as llvm

    read = _jit.cpu_name.__wrapped__
    monkeypatch.setattr(_jit.numba.config, "CPU_NAME", "skylake-avx512")
    assert read() == "skylake-avx512"
    for unset in ("host", None):
        monkeypatch.setattr(_jit.numba.config, "CPU_NAME", unset)
        assert read() == llvm.get_host_cpu_name()


def test_serial_kernels_interleave_only_long_chains(many_registers):
    # the serial kernel takes small work only: one stream unless the chain is long (compile
    # time); the pool kernel keeps the module's streams; a chain this dear has no streaming
    # twin (elementwise._STREAM_MAX_COST)
    x = E.inp(0, np.float32)
    gelu = E.call("gelu", x)  # cost 12
    src = ew.generate_source((gelu,), ((True,),))
    assert "i0_span" not in _function_source(src, "kernel")
    assert "i0_span" in _function_source(src, "kernel_par")
    assert "def kernel_stream(" not in src
    heavy = _heavy_chain()  # cost 33
    src = ew.generate_source((heavy,), ((True, True), (False, True)))
    assert "i1_span" in _function_source(src, "kernel")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cols", [1, 3, 4, 5, 1023, 4097])
def test_interleaved_streams_cover_every_element(monkeypatch, threads, cols):
    # the main loop takes len // k elements per stream and the remainder loop the rest:
    # every length modulo k, on the serial and the pool kernel, against numpy in float64
    monkeypatch.setattr(_jit, "PARALLEL_THRESHOLD", 10)
    real = ew.run_parallel
    monkeypatch.setattr(ew, "run_parallel", lambda k, *a, **kw: real(k, *a, threads=threads))
    rng = np.random.default_rng(cols)
    a = rng.standard_normal((3, cols)).astype(np.float32)
    b = rng.standard_normal(cols).astype(np.float32)
    got = ew.apply(_heavy_chain(), [a, b])
    x, bb = a.astype(np.float64), b.astype(np.float64)
    want = x / (1.0 + 1.0 / (np.tanh(x + bb) + 2.0))  # sigmoid(log(u)) = u / (1 + u)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    flat = ew.apply(_heavy_chain(), [a.ravel(), np.tile(b, 3)])  # rank 1 (one flat loop)
    np.testing.assert_allclose(flat, want.ravel(), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cols", [5, 4097])
def test_writing_over_an_input_runs_the_in_place_variant(monkeypatch, threads, cols):
    # output 0 into input 0's buffer: the kernel that stores through x0 runs (with two
    # arrays that alias, LLVM's overlap check would pick the loop's scalar version), and
    # gives the numbers of a run into a fresh buffer; the row-broadcast input has no variant
    monkeypatch.setattr(_jit, "PARALLEL_THRESHOLD", 10)
    real = ew.run_parallel
    monkeypatch.setattr(ew, "run_parallel", lambda k, *a, **kw: real(k, *a, threads=threads))
    chosen = []
    real_ip = ew.inplace_kernel

    def spy(plan, k, parallel):
        found = real_ip(plan, k, parallel)
        chosen.append((k, parallel, getattr(found, "__name__", None)))
        return found

    monkeypatch.setattr(ew, "inplace_kernel", spy)
    rng = np.random.default_rng(cols)
    a = rng.standard_normal((3, cols)).astype(np.float32)
    b = rng.standard_normal(cols).astype(np.float32)
    e = _heavy_chain()
    src = ew.generate_source((e,), ((True, True), (False, True)))
    assert "def kernel_ip0(" in src and "def kernel_par_ip0(" in src and "kernel_ip1" not in src
    want = ew.apply(e, [a, b])
    buf = a.copy()
    (got,) = ew.apply_many((e,), [buf, b], out=[buf])
    assert got is buf
    np.testing.assert_array_equal(got, want)
    k, parallel, name = chosen[-1]
    assert k == 0 and name == ("kernel_par_ip0" if parallel else "kernel_ip0")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("in_place", [False, True])
def test_rows_beyond_the_caches_run_the_one_stream_twin(monkeypatch, threads, in_place):
    # a row kernel walking interleaved streams runs its one-stream twin once the data passes
    # prefetch.ROW_STREAMS_MAX_BYTES (lowered here), into a fresh buffer or over its input, with the
    # numbers of the four-stream kernel (the same operations per element) and of numpy
    monkeypatch.setattr(_jit, "PARALLEL_THRESHOLD", 10)
    real = ew.run_parallel
    launched = []

    def spy(kernel, *args, **kw):
        launched.append(kernel.__name__)
        return real(kernel, *args, threads=threads)

    monkeypatch.setattr(ew, "run_parallel", spy)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((37, 1021)).astype(np.float32)
    b = rng.standard_normal(1021).astype(np.float32)
    e = _heavy_chain()
    ew._PLANS.clear()
    want = ew.apply(e, [a, b])
    assert launched == ["kernel_par"]
    monkeypatch.setattr(prefetch, "ROW_STREAMS_MAX_BYTES", a.nbytes)
    ew._PLANS.clear()
    try:
        if in_place:
            buf = a.copy()
            (got,) = ew.apply_many((e,), [buf, b], out=[buf])
            assert got is buf
        else:
            got = ew.apply(e, [a, b])
    finally:
        ew._PLANS.clear()
    assert launched[-1] == ("kernel_par_1s_ip0" if in_place else "kernel_par_1s")
    np.testing.assert_array_equal(got, want)
    x, bb = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(got, x / (1.0 + 1.0 / (np.tanh(x + bb) + 2.0)), rtol=2e-6)


def test_only_interleaved_row_kernels_have_a_one_stream_twin():
    rows = ((True, True), (False, True))
    assert "def kernel_par_1s(" in ew.generate_source((_heavy_chain(),), rows)
    assert "def kernel_par_1s(" not in ew.generate_source((_affine(),), rows)
    flat = ((True,), (True,))
    assert "def kernel_par_1s(" not in ew.generate_source((_heavy_chain(),), flat)


def test_multiple_outputs_share_one_loop():
    x, y = E.inp(0, np.int32), E.inp(1, np.int32)
    q = E.call("div", x, y)
    r = E.call("mod", x, y)
    a = np.array([7, -7, 7, -7, 5, 0], np.int32)
    b = np.array([2, 2, -2, -2, 0, 3], np.int32)
    got_q, got_r = ew.apply_many((q, r), [a, b])
    np.testing.assert_array_equal(got_q, np.array([3, -3, -3, 3, 0, 0], np.int32))
    np.testing.assert_array_equal(got_r, np.mod(a, np.where(b == 0, 1, b)) * (b != 0))


def test_integer_intermediates_wrap_like_numpy():
    # int8 (a * b) wraps before the add, as numpy does op by op
    x, y = E.inp(0, np.int8), E.inp(1, np.int8)
    e = E.op("add", E.op("mul", x, y), x)
    a = np.array([100, -128, 3], np.int8)
    b = np.array([3, -1, 50], np.int8)
    with np.errstate(over="ignore"):
        want = a * b + a
    np.testing.assert_array_equal(ew.apply(e, [a, b]), want)


def test_float16_is_computed_in_float32_and_stored_narrow():
    x = E.inp(0, np.float32)
    e = E.call("sigmoid", x)
    a = np.linspace(-4, 4, 9).astype(np.float16)
    got = ew.apply(e, [a], np.float16)
    assert got.dtype == np.float16
    want = (1 / (1 + np.exp(-a.astype(np.float32)))).astype(np.float16)
    np.testing.assert_array_equal(got, want)


def test_input_dtype_mismatch_is_an_error():
    e = E.op("add", E.inp(0, np.float32), E.inp(1, np.float32))
    with pytest.raises(TypeError, match="input 1 is float64"):
        ew.apply(e, [np.ones(3, np.float32), np.ones(3, np.float64)])


def test_zero_size_and_zero_d():
    e = E.op("mul", E.inp(0, np.float32), E.inp(1, np.float32))
    got = ew.apply(e, [np.ones((0, 3), np.float32), np.ones(3, np.float32)])
    assert got.shape == (0, 3) and got.dtype == F32
    got = ew.apply(e, [np.array(2, np.float32), np.array(3, np.float32)])
    assert got.shape == () and got == 6


def test_modcache_reuses_and_repairs_files():
    src = '"""modcache test"""\nVALUE = 42\n'
    mod = modcache.load(src)
    assert mod.VALUE == 42
    assert modcache.load(src) is mod
    path = modcache.path_for(src)
    assert path.exists()
    # A damaged file (another process died mid-way without the atomic write) is rewritten.
    path.write_text("VALUE = 0\n", encoding="utf-8")
    modcache._MODULES.pop(modcache.source_hash(src))
    assert modcache.load(src).VALUE == 42
    assert path.read_text(encoding="utf-8") == src


def test_expressions_hash_by_structure():
    a = _affine()
    b = _affine()
    assert a is not b and a == b and hash(a) == hash(b)
    assert E.const(np.nan, np.float32) == E.const(np.nan, np.float32)
    assert E.const(1, np.float32) != E.const(1, np.float64)


def test_helper_resolution():
    assert ew.helper_name("sigmoid", np.float32) == "sigmoid_f32"
    assert ew.helper_name("div", np.int16) == "div_int"
    assert ew.helper_name("div", np.uint16) == "div_uint"
    assert ew.helper_name("max", np.uint8) == "max_int"
    assert ew.helper_name("exp", np.float64) == "exp_f64"
    assert ew.helper_name("sin", np.float64) == "sin"  # no float flavour: the generic helper
    with pytest.raises(NotImplementedError):
        ew.helper_name("no_such_helper", np.float32)


@pytest.mark.parametrize("fam", ["sigmoid", "gelu", "mod", "round", "max", "softplus"])
def test_float32_helpers_return_float32(fam):
    from onnxjit.kernels import scalar

    fn = getattr(scalar, ew.helper_name(fam, np.float32))
    # inline="always" helpers can still be called from Python; their type must not widen
    n_args = fn.py_func.__code__.co_argcount
    res = fn(*([np.float32(0.75)] * n_args))
    assert isinstance(res, np.float32) or type(res) is float
    sig = fn.nopython_signatures[-1]
    assert str(sig.return_type) == "float32"


# ---------------------------------------------------------------------------------------------
# float16 / bfloat16 storage: converted inside the kernel, element by element
# ---------------------------------------------------------------------------------------------

_NARROW = [np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)]


def _assert_same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bit patterns, except that any NaN matches any NaN (payloads may differ)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    gf, wf = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(wf)
    np.testing.assert_array_equal(np.isnan(gf), nan)
    ub = np.uint16 if got.itemsize == 2 else np.uint32
    bad = np.nonzero(got.view(ub)[~nan] != want.view(ub)[~nan])[0]
    assert bad.size == 0, f"{bad.size} values differ, first inputs at {bad[:5]}"


def _narrowing_inputs(dt: np.dtype) -> np.ndarray:
    """float32 values around every value of ``dt``: exact, +-1 ulp, the midpoints and
    their neighbours (ties to even), plus random bit patterns (NaN, inf, subnormals)."""
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dt)
    w = every.astype(np.float32).view(np.uint32)
    half = np.uint32(0x1000 if dt == np.float16 else 0x8000)
    near = [w, w + 1, w - 1, w + half, w + half - 1, w + half + 1]
    rnd = np.random.default_rng(0).integers(0, 1 << 32, 200_000, dtype=np.uint64)
    return np.concatenate(near + [rnd.astype(np.uint32)]).view(np.float32)


@pytest.mark.parametrize("dt", _NARROW, ids=str)
def test_narrow_loads_are_exact_for_all_65536_bit_patterns(dt):
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dt)
    got = ew.apply(E.inp(0, F32), [every], np.float32)
    with np.errstate(invalid="ignore"):
        _assert_same_bits(got, every.astype(np.float32))


@pytest.mark.parametrize("dt", _NARROW, ids=str)
def test_narrow_stores_round_to_nearest_even_like_numpy(dt):
    x = _narrowing_inputs(dt)
    got = ew.apply(E.inp(0, F32), [x], dt)
    with np.errstate(over="ignore", invalid="ignore"):
        _assert_same_bits(got, x.astype(dt))


@pytest.mark.parametrize("dt", _NARROW, ids=str)
def test_float64_to_narrow_on_store(dt):
    # float16: numpy rounds float64 directly; bfloat16: ml_dtypes goes through float32 (we
    # match it, see kernels/scalar.py f64_to_bf16).
    with np.errstate(invalid="ignore"):
        x = _narrowing_inputs(dt).astype(np.float64)
    x = np.concatenate([x, x * (1 + 2.0**-30), x * (1 - 2.0**-30), [1e300, -1e-300, 65519.99]])
    got = ew.apply(E.inp(0, np.float64), [x], dt)
    with np.errstate(over="ignore", invalid="ignore"):
        _assert_same_bits(got, x.astype(dt))


@pytest.mark.parametrize("dt", _NARROW, ids=str)
def test_narrow_kernel_converts_in_registers(dt):
    e = E.call("sigmoid", E.op("add", E.inp(0, F32), E.inp(1, F32)))
    a = np.linspace(-8, 8, 37, dtype=np.float32).reshape(37, 1).astype(dt)
    b = np.linspace(-1, 1, 5, dtype=np.float32).astype(dt)
    got = ew.apply(e, [a, b], dt)
    assert got.dtype == dt and got.shape == (37, 5)
    s = a.astype(np.float32) + b.astype(np.float32)
    want = (1 / (1 + np.exp(-s))).astype(dt)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2)
    kind = "f16" if dt == np.float16 else "bf16"
    src = ew.generate_source((e,), ((True, False), (False, True)), (kind, kind), (kind,))
    assert f"{kind}_to_f32(x0[" in src and f"f32_to_{kind}(" in src


def test_float16_integer_conversions_match_numpy():
    """The integer-only float16 conversions, which kernels use where the CPU has no float16
    instructions (x86 without F16C): every bit pattern widened exactly, and the narrowing
    inputs (ties, neighbours, NaN, inf, subnormals) rounded as numpy rounds them."""
    from numba import njit

    from onnxjit.kernels import scalar

    widen_one = njit(scalar._f16_to_f32_soft)
    narrow_one = njit(scalar._f32_to_f16_soft)

    @njit
    def widen(h, out):
        for i in range(h.size):
            out[i] = widen_one(h[i])

    @njit
    def narrow(x, out):
        for i in range(x.size):
            out[i] = narrow_one(x[i])

    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = np.empty(bits.size, np.float32)
    widen(bits, got)
    with np.errstate(invalid="ignore"):
        _assert_same_bits(got, bits.view(np.float16).astype(np.float32))
    x = _narrowing_inputs(np.dtype(np.float16))
    out = np.empty(x.size, np.uint16)
    narrow(x, out)
    with np.errstate(over="ignore", invalid="ignore"):
        _assert_same_bits(out.view(np.float16), x.astype(np.float16))
