"""The generated CUDA elementwise kernel (onnxjit.backends.cuda.elementwise.bind).

Runs under numba-cuda's simulator (kernels as Python threads: tiny tensors) against numpy, on
the expressions onnxjit.ops.elementwise builds for its nodes; a subprocess without the
simulator compiles the generated kernels through NVVM (cuda.compile_ptx, no GPU needed).
"""

from __future__ import annotations

import math  # noqa: E402
import textwrap  # noqa: E402

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from cuda_compile import run_without_simulator  # noqa: E402

try:
    from numba import cuda
except ImportError as exc:  # pragma: no cover - depends on the environment
    pytest.skip(f"numba.cuda cannot be imported ({exc}): no CUDA tests", allow_module_level=True)

from onnxjit.backends.cuda.elementwise import bind  # noqa: E402
from onnxjit.codegen import elementwise as gen  # noqa: E402
from onnxjit.codegen import expr as E  # noqa: E402
from onnxjit.lowering import In, Out, tensor  # noqa: E402

# numpy, standing in for the device under the simulator, warns where IEEE gives inf or NaN
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
I32 = np.dtype(np.int32)


def _resolve(bound, arrays, share=None):
    """The bound call's arguments as device arrays (``share = (j, p)``: output j is input p's
    buffer), and the output device arrays."""
    dev_in = [cuda.to_device(np.ascontiguousarray(a).reshape(-1)) for a in arrays]
    outs = {}
    args = []
    for arg in bound.args:
        if isinstance(arg, Out):
            if share is not None and share[0] == arg.index:
                outs[arg.index] = dev_in[share[1]]
            else:
                spec = bound.outs[arg.index]
                outs[arg.index] = cuda.device_array(math.prod(spec.shape), spec.dtype)
            args.append(outs[arg.index])
        elif isinstance(arg, In):
            args.append(dev_in[arg.index])
        else:
            args.append(arg)
    return args, outs


def run(exprs, arrays, out_dtypes=None, positions=None):
    """Bind ``exprs`` for ``arrays`` (node inputs), launch, and return the host outputs."""
    specs = [tensor(a.dtype, a.shape) for a in arrays]
    if positions is not None:
        specs = [
            tensor(p.dtype, p.shape) if not isinstance(p, int) else specs[p] for p in positions
        ]
    bound = bind(exprs, specs, out_dtypes, positions)
    assert bound is not None and bound.writes
    args, outs = _resolve(bound, arrays)
    bound.fn(*args)
    cuda.synchronize()
    return [outs[j].copy_to_host().reshape(spec.shape) for j, spec in enumerate(bound.outs)]


def rand(shape, dtype=np.float32, seed=0, lo=-3.0, hi=3.0):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


# Broadcast patterns: same shape (rank 1 after collapsing), a channel bias, an outer product,
# a scalar operand, batch size 1, and 300 elements (not a multiple of the 256-thread block).
PATTERNS = [
    ((2, 3, 4), (2, 3, 4)),
    ((2, 3, 4), (3, 1)),
    ((4, 1), (1, 5)),
    ((3, 5), ()),
    ((1, 3, 2, 2), (3, 1, 1)),
    ((300,), (300,)),
    ((1,), (1,)),
]


@pytest.mark.parametrize("sa,sb", PATTERNS)
def test_arith_broadcast(sa, sb):
    a, b = rand(sa, seed=1), rand(sb, seed=2)
    x, y = E.inp(0, F32), E.inp(1, F32)
    e = E.op("add", E.op("mul", x, y), E.const(0.5, F32))
    (got,) = run([e], [a, b])
    want = a * b + np.float32(0.5)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("sa,sb", PATTERNS[:5])
def test_compare_gives_bool(sa, sb):
    a, b = rand(sa, seed=3), rand(sb, seed=4)
    a.reshape(-1)[0] = np.nan  # NaN compares false
    x, y = E.inp(0, F32), E.inp(1, F32)
    lt, ge = run([E.op("lt", x, y), E.op("ge", x, y)], [a, b])
    assert lt.dtype == np.bool_ and ge.dtype == np.bool_
    np.testing.assert_array_equal(lt, a < b)
    np.testing.assert_array_equal(ge, a >= b)


@pytest.mark.parametrize(
    "family,ref,dtype",
    [
        ("sigmoid", lambda v: 1 / (1 + np.exp(-v)), F32),
        ("sigmoid", lambda v: 1 / (1 + np.exp(-v)), F64),
        ("exp", np.exp, F32),
        ("tanh", np.tanh, F32),
        ("log", np.log, F64),
        ("sqrt", np.sqrt, F32),
        ("erf", np.vectorize(math.erf), F32),
        ("softplus", lambda v: np.log1p(np.exp(v)), F32),
        ("floor", np.floor, F32),
        ("ceil", np.ceil, F64),
        ("round", np.round, F32),
        ("absval", np.abs, F32),
    ],
)
def test_unary_math(family, ref, dtype):
    # halves exercise round's ties to even; log and sqrt of negatives give NaN
    a = np.concatenate([rand(37, dtype, seed=5), np.array([-2.5, -0.5, 0.5, 1.5, 2.5], dtype)])
    (got,) = run([E.call(family, E.inp(0, dtype))], [a])
    with np.errstate(all="ignore"):
        want = ref(a.astype(np.float64)).astype(dtype)
    tol = 2e-6 if dtype == F32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_special_values_do_not_raise():
    # the simulator runs device forms as Python: inf/NaN must come out, not exceptions
    a = np.array([0.0, -1.0, np.inf, -np.inf, np.nan, 1e30], np.float32)
    x = E.inp(0, F32)
    got = run([E.call("log", x), E.call("exp", x), E.call("floor", x), E.call("sigmoid", x)], [a])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got[0], np.log(a))
        np.testing.assert_array_equal(got[1], np.exp(a))
        np.testing.assert_array_equal(got[2], np.floor(a))
    np.testing.assert_array_equal(got[3][2:5], [1.0, 0.0, np.nan])


def test_float_and_int_mod_match_numpy():
    a = np.array([5.5, -5.5, 5.5, -5.5, 3.0, -3.0], np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 3.0], np.float32)
    x, y = E.inp(0, F32), E.inp(1, F32)
    mod, fmod = run([E.call("mod", x, y), E.call("fmod", x, y)], [a, b])
    np.testing.assert_array_equal(mod, np.mod(a, b))
    np.testing.assert_array_equal(np.signbit(mod), np.signbit(np.mod(a, b)))
    np.testing.assert_array_equal(fmod, np.fmod(a, b))
    ia = np.array([7, -7, 7, -7, 5, 0], np.int32)
    ib = np.array([2, 2, -2, -2, 0, 3], np.int32)
    (div,) = run([E.call("div", E.inp(0, I32), E.inp(1, I32))], [ia, ib])
    assert div.dtype == np.int32
    np.testing.assert_array_equal(div, [3, -3, -3, 3, 0, 0])  # truncation; x/0 -> 0


def test_cast():
    a = np.array([[-2.7, -0.5, 0.0], [0.4, 1.9, 300.2]], np.float32)
    x = E.inp(0, F32)
    to_int, to_bool, to_f64 = run([E.cast(x, np.int32), E.cast(x, np.bool_), E.cast(x, F64)], [a])
    assert (to_int.dtype, to_bool.dtype, to_f64.dtype) == (np.int32, np.bool_, np.float64)
    np.testing.assert_array_equal(to_int, a.astype(np.int32))
    np.testing.assert_array_equal(to_bool, a != 0)
    np.testing.assert_array_equal(to_f64, a.astype(np.float64))
    ints = np.arange(-3, 9, dtype=np.int32).reshape(3, 4)
    (back,) = run([E.cast(E.inp(0, I32), F32)], [ints])
    np.testing.assert_array_equal(back, ints.astype(np.float32))


@pytest.mark.parametrize("sc,sa,sb", [((3, 1), (3, 4), (4,)), ((5,), (5,), (5,)), ((), (2, 2), ())])
def test_where(sc, sa, sb):
    c = rand(sc, seed=6) > 0
    a, b = rand(sa, seed=7), rand(sb, seed=8)
    e = E.where(E.inp(0, np.bool_), E.inp(1, F32), E.inp(2, F32))
    (got,) = run([e], [np.asarray(c), a, b])
    np.testing.assert_array_equal(got, np.where(c, a, b))


def test_int_arith_wraps_like_numpy():
    a = np.array([2**31 - 1, -(2**31), 5, -7], np.int32)
    b = np.array([1, -1, 3, 2], np.int32)
    x, y = E.inp(0, I32), E.inp(1, I32)
    s, p = run([E.op("add", x, y), E.op("mul", x, y)], [a, b])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(s, a + b)
        np.testing.assert_array_equal(p, a * b)
    assert s.dtype == np.int32


def test_constant_operand_by_position():
    # a 0-d attribute value given as an array position (LeakyRelu's alpha), copied once
    x = rand((4, 6), seed=9)
    alpha = np.array(0.1, np.float32)
    e = E.call("leakyrelu", E.inp(0, F32), E.inp(1, F32))
    (got,) = run([e], [x], positions=[0, alpha])
    np.testing.assert_allclose(got, np.where(x < 0, x * np.float32(0.1), x), rtol=1e-7)


def test_output_dtype_the_kernel_cannot_store_is_declined():
    # the CPU plan converts such outputs after its kernel; the GPU bind leaves them to it
    x = E.op("add", E.inp(0, F32), E.inp(0, F32))
    assert bind([x], [tensor(F32, (3,))], [np.int64]) is None


def test_bfloat16_is_declined():
    # numba has no bfloat16 type: such nodes stay on the CPU
    x = E.inp(0, F32)
    assert bind([E.op("neg", x)], [tensor(ml_dtypes.bfloat16, (4,))]) is None
    assert bind([E.op("neg", x)], [tensor(F32, (4,))], [ml_dtypes.bfloat16]) is None


def test_float16_is_computed_in_float32_and_rounded_to_nearest_even():
    # inputs widened exactly, the float32 result narrowed once on store (numpy's rounding);
    # values near float16's limits: subnormals, the largest finite, overflow to inf, NaN
    h = np.array([1.0, -2.5, 6.1e-5, 3e-7, 65504.0, 60000.0, np.nan, -0.0, 0.1, 1000.5],
                 np.float16)  # fmt: skip
    f = rand(h.shape, seed=14)
    x = E.inp(0, F32)
    s = E.op("add", E.op("mul", x, E.const(1.5, F32)), E.inp(1, F32))
    (got,) = run([s], [h, f], out_dtypes=[np.float16])
    want = (h.astype(np.float32) * np.float32(1.5) + f).astype(np.float16)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)
    (wide,) = run([E.call("exp", x)], [h])  # float16 in, float32 out
    assert wide.dtype == np.float32
    np.testing.assert_allclose(wide, np.exp(h.astype(np.float32)), rtol=1e-6)
    (cast,) = run([E.cast(E.inp(0, F64), F32)], [np.linspace(-7e4, 7e4, 9)], [np.float16])
    np.testing.assert_array_equal(
        cast, np.linspace(-7e4, 7e4, 9).astype(np.float32).astype(np.float16)
    )


def test_empty_output_launches_nothing():
    bound = bind([E.op("neg", E.inp(0, F32))], [tensor(F32, (0, 3))])
    assert bound is not None and bound.writes
    assert bound.outs[0].shape == (0, 3) and bound.outs[0].dtype == F32
    bound.fn(*[a for a in bound.args if not isinstance(a, (In, Out))])


def test_in_place_writes_through_the_input():
    a, b = rand((3, 4), seed=10), rand((4,), seed=11)
    specs = [tensor(F32, a.shape), tensor(F32, b.shape)]
    bound = bind([E.op("sub", E.inp(0, F32), E.inp(1, F32))], specs)
    assert bound.inplace == (0,)  # b is broadcast: only a may hold the output
    ip = bound.with_inplace(0)
    args, outs = _resolve(ip, [a, b], share=(0, 0))
    ip.fn(*args)
    np.testing.assert_allclose(outs[0].copy_to_host().reshape(3, 4), a - b, rtol=1e-7)


def test_grid_smaller_than_the_work_still_covers_it():
    # the grid-stride loop: one block of 32 threads over 1000 elements with a broadcast
    x, y = E.inp(0, F32), E.inp(1, F32)
    e = E.op("sub", x, y)
    a, b = rand((10, 100), seed=12), rand((10, 1), seed=13)
    plan = gen.plan_for([e], [a, b])
    kernel = gen.cuda_kernel([e], plan, [F32, F32])
    out = cuda.device_array(a.size, np.float32)
    kernel[1, 32](out, cuda.to_device(a.reshape(-1)), cuda.to_device(b.reshape(-1)), *plan.sizes)
    np.testing.assert_allclose(out.copy_to_host().reshape(10, 100), a - b, rtol=1e-7)


def test_kernels_are_cached_by_expression():
    x = E.inp(0, F32)
    e1 = E.call("tanh", E.op("mul", x, E.const(2.0, F32)))
    e2 = E.call("tanh", E.op("mul", E.inp(0, F32), E.const(2.0, F32)))  # equal, distinct objects
    p1 = gen.plan_for([e1], [tensor(F32, (5,))])
    p2 = gen.plan_for([e2], [tensor(F32, (7,))])
    assert gen.cuda_kernel([e1], p1, [F32]) is gen.cuda_kernel([e2], p2, [F32])
    p3 = gen.plan_for([e1], [tensor(F32, (5, 1))])  # same collapsed layout: same kernel
    assert gen.cuda_kernel([e1], p3, [F32]) is gen.cuda_kernel([e1], p1, [F32])


def test_cpu_source_unchanged_by_the_gpu_target():
    # the CPU module of an expression calls the vecmath helpers, not the GPU's device forms
    x = E.inp(0, F32)
    src = gen.generate_source([E.call("sigmoid", x)], [(True,)])
    assert "sigmoid_f32(" in src and "_gpu" not in src and "cuda" not in src
    gpu = gen.generate_cuda_source([E.call("sigmoid", x)], [(True,)])
    assert "sigmoid_f32_gpu(" in gpu and "@cuda.jit" in gpu


# Expressions compiled through NVVM in the subprocess: every device form in both float types,
# helpers taken from kernels/scalar.py, integer helpers, operators, casts and Where, over
# broadcast masks of the three kinds (full, partial, none).
_COMPILE_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    from numba import cuda, types
    from numba.np.numpy_support import from_dtype
    from onnxjit.codegen import elementwise as gen, expr as E
    from onnxjit.codegen import modcache

    f32, f64, i32 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int32)
    cases = []
    forms = sorted(gen._CUDA_FORMS)
    for i, fam in enumerate(forms):
        dt = (f32, f64)[i % 2]
        x, y, z = E.inp(0, dt), E.inp(1, dt), E.const(1.5, dt)
        n = {"fmod": 2, "mod": 2, "elu": 2, "celu": 2, "selu": 3}.get(fam, 1)
        cases.append(([E.call(fam, *(x, y, z)[:n])], (dt, dt)))
    x, y = E.inp(0, f32), E.inp(1, f32)
    xi, yi = E.inp(0, i32), E.inp(1, i32)
    cases += [
        ([E.call("sigmoid", x), E.call("exp", x)], (f32, f32)),  # each form in the other type
        ([E.call("atan", x), E.call("sin", E.cast(x, f64)), E.call("sqrt", y)], (f32, f32)),
        ([E.call("max", x, y), E.call("hardswish", x), E.call("clip_lo", x, y)], (f32, f32)),
        ([E.call("div", xi, yi), E.call("mod", xi, yi), E.call("ipow", xi, yi)], (i32, i32)),
        ([E.op("bitxor", xi, yi), E.op("invert", xi), E.cast(xi, f32)], (i32, i32)),
        ([E.where(E.op("lt", x, y), x, y), E.cast(x, np.bool_), E.cast(x, np.int64),
          E.op("not", E.op("ge", x, y)), E.op("pow", x, y)], (f32, f32)),
    ]
    f16 = np.dtype(np.float16)
    # float16 loads and stores: arrays of the device's float16
    narrow = [([E.op("add", x, E.call("tanh", y))], (f16, f32), ("f16", ""), ("f16",)),
              ([E.call("sigmoid", E.cast(x, f64))], (f16, f16), ("f16", "f16"), ("",))]
    cases = [(e, d, (), ()) for e, d in cases] + narrow
    masks = [((True,), (True,)), ((True, True), (False, True)), ((True,), (False,))]
    for n, (exprs, dts, loads, stores) in enumerate(cases):
        m = masks[n % 3]
        src = gen.generate_cuda_source(exprs, m, loads, stores)
        k = modcache.load(src).kernel
        arr = lambda dt: types.Array(from_dtype(np.dtype(dt)), 1, "C")
        outs = [f16 if st else e.dtype for e, st in zip(exprs, stores or ("",) * len(exprs))]
        sig = (*[arr(dt) for dt in outs], *[arr(d) for d in dts],
               *[types.int64] * len(m[0]))
        ptx, _ = cuda.compile_ptx(k.py_func, sig, cc=(8, 0))
        assert ".entry" in ptx
    print("compiled", len(cases))
    """
)


def test_generated_kernels_compile_through_nvvm():
    out = run_without_simulator(["-c", _COMPILE_SCRIPT])
    n = int(out.split("compiled")[-1])
    assert n == len(gen._CUDA_FORMS) + 8
