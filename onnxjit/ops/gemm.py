"""Matrix products for the operators: the backend's GEMM kernel, in tiles on its threads.

:func:`product` is the call of the backend's batched GEMM kernel (family ``blas``, kernel
``gemm_ks``) for one product of fixed sizes, every decision made once: the kernel, whether it
runs on the backend's threads and in which tiles, the epilogue (bias, residual, activation)
applied to each tile by the thread that computed it. Lowerings bind it into a plan
(:func:`bound_product`: MatMul, Gemm, FusedGemm); :func:`matmul_into`, what the operators'
implementations and the convolutions call, makes the same call at once. Each tile is one
single-threaded BLAS or micro-kernel call (BLAS's own threads stay at one, see the backend's
``blas_ready``). Other element types, and layouts the kernel cannot take without a copy, go
to ``np.matmul``.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from onnxjit.backends import default as default_backend
from onnxjit.lowering import Bound, In, Out, Spec, portable, tensor, writes

_BLAS_TYPES = (np.dtype(np.float32), np.dtype(np.float64))

# Products below this many multiply-adds run on the calling thread alone: splitting them costs
# more than it saves (a tile's BLAS call repacks its operands; waking a worker costs some
# 100 us on the development VM when it is not spinning).
PARALLEL_MACS = 1 << 18
# A matrix-vector product is memory-bound: two threads halve the weight each reads (and each
# can keep its half in its own cache), but a 2-thread launch costs some 5 us more than a
# serial call on the Zen 3 VM (mostly Numba's unboxing of the kernel's arguments), which only
# products from about 2**17 multiply-adds repay there (float32, one thread against two,
# alternating in one process: 256 x 256 took 1.25 the time on two threads, 512 x 256 0.99,
# 256 x 768 0.89, 1024 x 256 0.82). Whole models against the 2**16 used before: M1 gemm/b1
# 0.98 the time, T2 gpt2_step 0.99.
GEMV_PARALLEL_MACS = 1 << 17


def _blas(backend: Any, name: str) -> Any:
    """The backend's GEMM kernel or constant ``name`` (family ``blas``: ``B_PACKED``,
    ``BIAS_COL``, ``pack_b``, ``tiles``, ...)."""
    return backend.kernel("blas", name)


def _operand(x: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, bool] | None:
    """``x`` (..., rows, cols) as (flat C-contiguous data, transposed flag), or None when only
    a copy would make it so. A transposed view of a C-contiguous matrix is passed as its
    base with the flag set (Gemm's transA/transB, attention's K^T)."""
    if x.flags.c_contiguous:
        return x.reshape(-1), False
    if x.ndim >= 2:
        xt = np.swapaxes(x, -1, -2)
        if xt.flags.c_contiguous and xt.shape[-2:] == (cols, rows):
            return xt.reshape(-1), True
    return None


class Epilogue(NamedTuple):
    """What :func:`matmul_into` applies to each tile of the product once it is computed:
    ``act(y + bias + residual)``. ``bias`` is per column (``bias_mode`` the backend's
    ``BIAS_COL``, a fully connected layer) or per row of each matrix (``BIAS_ROW``, a
    convolution's channels); ``residual`` has the output's shape; ``act``, ``p0``, ``p1``
    are an activation code of the backend's ``epilogue`` family (None: none) and its
    parameters in the output's type."""

    bias: np.ndarray | None = None
    bias_mode: int | None = None
    residual: np.ndarray | None = None
    act: int | None = None
    p0: float = 0.0
    p1: float = 0.0


_NO_EPILOGUE = Epilogue()
_EMPTY: dict[tuple[np.dtype, int], np.ndarray] = {}


def empty_array(dtype: np.dtype, ndim: int = 1) -> np.ndarray:
    """A cached empty C-contiguous array standing in for an absent kernel operand (one
    compiled specialisation whether the operand is there or not)."""
    key = (np.dtype(dtype), ndim)
    e = _EMPTY.get(key)
    if e is None:
        e = _EMPTY[key] = np.empty((0,) * ndim, dtype)
    return e


def epilogue_args(backend: Any, epilogue: Epilogue, dtype: np.dtype) -> tuple:
    """The epilogue as the kernel takes it: ``(bias, bias_mode, residual, has_residual, act,
    p0, p1)`` with empty stand-ins for what is absent."""
    t = dtype.type
    act = backend.kernel("epilogue", "ACT_NONE") if epilogue.act is None else epilogue.act
    return (
        empty_array(dtype) if epilogue.bias is None else epilogue.bias,
        epilogue.bias_mode if epilogue.bias is not None else _blas(backend, "BIAS_NONE"),
        empty_array(dtype) if epilogue.residual is None else epilogue.residual.reshape(-1),
        epilogue.residual is not None,
        act,
        t(epilogue.p0),
        t(epilogue.p1),
    )


def product(
    backend: Any,
    batch: int,
    m: int,
    n: int,
    k: int,
    a: Any,
    ta: int,
    sa: int,
    b: Any,
    tb: int,
    sb: int,
    c: Any,
    dtype: np.dtype,
    alpha: float = 1.0,
    beta: float = 0.0,
    ep: tuple | None = None,
) -> tuple[Callable[..., None], tuple]:
    """``(fn, args)``: ``fn(*args)`` computes ``c[p] = act(alpha * op(a[p]) @ op(b[p]) + beta
    * c[p] + bias + res[p])`` for each of ``batch`` row-major products of ``m x n`` (inner
    ``k > 0``), with every decision for these sizes made here: the kernel (the backend's
    ``gemm_ks``), whether it runs on the backend's threads and in which tiles.

    ``a``, ``b``, ``c`` are flat C-contiguous arrays of ``dtype`` (float32/float64), or a
    plan's references to them (:class:`~onnxjit.lowering.In`, :class:`~onnxjit.lowering.Out`):
    matrix ``p`` of ``a`` starts at element ``p * sa`` (``sa == 0``: one matrix for every
    ``p``), of ``b`` at ``p * sb``, of ``c`` at ``p * m * n``. ``ta``/``tb``: the operand is
    stored transposed (or, ``A_PACKED``/``B_PACKED``, in the micro-kernel's panels; ``B_BLAS``
    as stored but multiplied by BLAS). ``ep``: :func:`epilogue_args` (default: none)."""
    dtype = np.dtype(dtype)
    t = dtype.type
    if ep is None:
        ep = epilogue_args(backend, _NO_EPILOGUE, dtype)
    # the flags as ints, as the convolutions pass them: one compiled kernel serves both
    # (a bool flag compiled a second copy, 4 s for ResNet-18 from an empty cache on the Zen 3)
    ta, tb = int(ta), int(tb)
    if tb and tb != _blas(backend, "B_PACKED"):
        backend.blas_ready()  # a transposed B (or B_BLAS) goes to BLAS
    n_threads = backend.threads()
    limit = PARALLEL_MACS if m > 1 else GEMV_PARALLEL_MACS
    al, be = t(alpha), t(beta)
    if n_threads > 1 and batch * m * n * k >= limit:
        tm, tn = _blas(backend, "tiles")(batch, m, n, k, n_threads, dtype.itemsize)
        s = np.empty(1, dtype)
        sample = (batch, m, n, k, _like(a, s), sa, _like(b, s), sb, _like(c, s), ta, tb)
        fn = backend.pooled("blas", "gemm_ks", (*sample, al, be, ep, tm, tn, k))
    else:
        tm, tn = m, n
        fn = _blas(backend, "gemm_ks")
    return fn, (batch, m, n, k, a, sa, b, sb, c, ta, tb, al, be, ep, tm, tn, k)


def _like(x: Any, sample: np.ndarray) -> Any:
    return x if isinstance(x, np.ndarray) else sample


def matmul_into(
    a: np.ndarray,
    b: np.ndarray,
    out: np.ndarray,
    alpha: float = 1.0,
    beta: float = 0.0,
    epilogue: Epilogue = _NO_EPILOGUE,
    backend: Any = None,
) -> None:
    """``out = act(alpha * (a @ b) + beta * out + bias + residual)`` with ``np.matmul``'s
    broadcasting of stacks (the epilogue is optional, see :class:`Epilogue`), on ``backend``
    (default: :func:`onnxjit.backends.default`).

    ``out`` must have the product's shape and be C-contiguous. ``beta == 0`` ignores what
    ``out`` held. float32/float64 operands of one type go to the backend's GEMM kernel (one
    operand may be a single matrix shared by the whole stack; transposed views are read in
    place), the epilogue applied tile by tile by the thread that computed the tile; anything
    else to numpy.
    """
    if backend is None:
        backend = default_backend()
    dtype = out.dtype
    if (
        dtype in _BLAS_TYPES
        and a.dtype == dtype
        and b.dtype == dtype
        and a.ndim >= 2
        and b.ndim >= 2
        and out.flags.c_contiguous
        and out.flags.writeable
    ):
        m, k = a.shape[-2:]
        n = b.shape[-1]
        batch = out.size // (m * n) if m * n else 0
        lead_a = a.shape[:-2]
        lead_b = b.shape[:-2]
        lead = out.shape[:-2]
        pa = _operand(a, m, k)
        pb = _operand(b, k, n)
        if (
            pa is not None
            and pb is not None
            and (lead_a == lead or all(d == 1 for d in lead_a))
            and (lead_b == lead or all(d == 1 for d in lead_b))
        ):
            if out.size == 0:
                return
            if k == 0:
                # an empty sum (BLAS refuses a zero leading dimension): beta * out, epilogue
                if beta == 0:
                    out.fill(0)
                else:
                    out *= dtype.type(beta)
                apply_epilogue(backend, out, epilogue)
                return
            sa = m * k if lead_a == lead and lead else 0
            sb = k * n if lead_b == lead and lead else 0
            ep = epilogue_args(backend, epilogue, dtype)
            (af, ta), (bf, tb) = pa, pb
            fn, args = product(
                backend, batch, m, n, k, af, ta, sa, bf, tb, sb, out.reshape(-1), dtype,
                alpha, beta, ep,
            )  # fmt: skip
            fn(*args)
            return
    y = np.matmul(a, b)
    if alpha != 1.0:
        y = y * y.dtype.type(alpha)
    if beta != 0.0:
        y = y + out * out.dtype.type(beta)
    out[...] = y
    apply_epilogue(backend, out, epilogue)


@portable
def call_with_residual(fn: Any, pos: int, head: tuple, tail: tuple, *a: Any) -> None:
    """``fn(*a)`` with the epilogue tuple ``(*head, residual, *tail)`` inserted at ``pos``,
    the residual being ``a``'s last element."""
    fn(*a[:pos], (*head, a[-1], *tail), *a[pos:-1])


def with_residual(fn: Any, args: tuple, pos: int, residual: In) -> tuple[Any, tuple]:
    """``(call, args')``: ``fn(*args)`` whose epilogue tuple ``args[pos]`` (see
    :func:`epilogue_args`) takes as its residual the plan's buffer ``residual`` (a reference
    the plan resolves at every run, which it cannot do inside a tuple). The epilogue's other
    parts travel as arguments, where a device backend places them."""
    ep = args[pos]
    return call_with_residual, (fn, pos, ep[:2], ep[3:], *args[:pos], *args[pos + 1 :], residual)


# where :func:`product`'s argument tuple holds the epilogue
_EP_POS = 13


def bound_product(
    backend: Any,
    a: Spec,
    b: np.ndarray | In,
    m: int,
    n: int,
    k: int,
    out_shape: tuple[int, ...],
    alpha: float = 1.0,
    ep: tuple | None = None,
    packed: bool = False,
    residual: In | None = None,
) -> Bound:
    """The bound call writing ``alpha * A @ B`` (plus the epilogue ``ep``) into output 0 of
    shape ``out_shape``: input 0 (spec ``a``, float32/float64, read as ``m x k`` rows), by
    ``b``, a ``k x n`` weight constant for the plan (row-major, packed here into the
    micro-kernel's panels once per weight, see :func:`packed_weight`; ``packed``: already
    so), or the reference to an input holding one (read as stored at every run). A
    ``residual`` (a flat reference to an input of the output's size and type) is added in
    the epilogue; the output never shares its buffer."""
    dtype = a.dtype
    if isinstance(b, np.ndarray):
        bb = b if packed else packed_weight(backend, b, k, n)
        tb = _blas(backend, "B_PACKED")
    else:
        bb, tb = b, 0
    if residual is not None:
        ep = epilogue_args(backend, _NO_EPILOGUE, dtype) if ep is None else ep
        ep = (*ep[:3], True, *ep[4:])
    fn, args = product(
        backend, 1, m, n, k, In(0, flat=True), 0, 0, bb, tb, 0, Out(0, flat=True), dtype,
        alpha, 0.0, ep,
    )  # fmt: skip
    if residual is not None:
        fn, args = with_residual(fn, args, _EP_POS, residual)
    return writes(fn, *args, outs=[tensor(dtype, out_shape)], name="blas.gemm_ks")


_PACKED: dict[tuple, tuple[weakref.ref, np.ndarray]] = {}
_PACKED_LOCK = threading.Lock()


def packed_weight(
    backend: Any, b: np.ndarray, k: int, n: int, transposed: bool = False, constant: bool = True
) -> np.ndarray:
    """The row-major ``k x n`` weight ``b`` (``transposed``: stored ``n x k``, Gemm's transB)
    as the B operand in the micro-kernel's panels (the backend's ``blas.pack_b``), shared by
    every plan that binds the same array (see :func:`_packed`) when ``constant`` (an
    initializer, see :func:`packed_with`)."""
    pack_b = _blas(backend, "pack_b")
    if not transposed:
        return packed_with(backend, pack_b, b.reshape(-1), k, n, constant)

    def pack_b_t(w: np.ndarray, k: int, n: int) -> np.ndarray:
        return pack_b(np.ascontiguousarray(w.reshape(n, k).T).reshape(-1), k, n)

    return packed_with(backend, pack_b_t, b.reshape(-1), k, n, constant)


def packed_rows(backend: Any, a: np.ndarray, m: int, k: int, constant: bool) -> np.ndarray:
    """The flat row-major ``m x k`` weight ``a`` as the A operand in the micro-kernel's
    panels (the backend's ``blas.pack_a``: a convolution's weights); shared by every plan
    that binds the same array (:func:`_packed`) only when ``constant`` (an initializer): the
    values of any other array may change under the same identity."""
    return packed_with(backend, _blas(backend, "pack_a"), a, m, k, constant)


def packed_with(
    backend: Any, packer: Callable, w: np.ndarray, d0: int, d1: int, constant: bool
) -> np.ndarray:
    """``packer(w, d0, d1)``: a weight in the layout a kernel of ``backend`` wants, shared
    (:func:`_packed`) only when ``constant`` (as :func:`packed_rows`). ``packer`` is named
    uniquely within the backend (its name is part of the key)."""
    return _packed(backend, packer, w, d0, d1) if constant else packer(w, d0, d1)


def _packed(backend: Any, packer: Callable, w: np.ndarray, d0: int, d1: int) -> np.ndarray:
    """``packer(w, d0, d1)`` (one of ``backend``'s layouts), computed once per weight and
    kept while the array that owns its memory lives: every plan of a session (one per input
    signature) binds the same initializer, and each would otherwise hold a packed copy of
    every weight of the model. Keyed on identity: for constant weights only; and on the
    backend, whose packers share names but not layouts."""
    owner = w
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    data = w.__array_interface__["data"][0]
    key = (backend.name, packer.__name__, id(owner), data, d0, d1, w.dtype.str)
    with _PACKED_LOCK:
        hit = _PACKED.get(key)
        if hit is not None and hit[0]() is owner:
            return hit[1]
    packed = packer(w, d0, d1)

    def forget(ref: weakref.ref, key: tuple = key) -> None:
        with _PACKED_LOCK:
            if _PACKED.get(key, (None,))[0] is ref:
                del _PACKED[key]

    try:
        ref = weakref.ref(owner, forget)
    except TypeError:  # an owner that cannot be weakly referenced: no sharing
        return packed
    with _PACKED_LOCK:
        _PACKED[key] = (ref, packed)
    return packed


# OpenBLAS cores whose GEMM multiplies small blocks without packing the operands (its
# small-matrix kernels: Skylake-X and the AVX-512 cores that use its kernels), lower case.
_SMALL_BLOCK_CORES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})
_small_blocks: bool | None = None


def _host_has_avx512() -> bool:
    """Whether this CPU has AVX-512F, as LLVM reads it (True when LLVM cannot tell)."""
    import llvmlite.binding as llvm

    try:
        return bool(llvm.get_host_cpu_features().get("avx512f", False))
    except RuntimeError:
        return True


def small_blocks_in_place() -> bool:
    """Whether the BLAS Numba calls (SciPy's) multiplies small blocks without packing its
    operands, i.e. is an OpenBLAS whose core is one of ``_SMALL_BLOCK_CORES``. Convolution
    products are cut into tiles for that BLAS then (faster there, with weights read from
    memory, than the micro-kernel was); any other BLAS packs both operands at each call and
    the micro-kernel with weights packed once is used instead. Decided once per process."""
    global _small_blocks
    if _small_blocks is None and not _host_has_avx512():
        # OpenBLAS picks those cores only on CPUs with AVX-512: no need to load SciPy's
        # linear algebra to ask (0.2 s of a warm start)
        _small_blocks = False
    if _small_blocks is None:
        import scipy.linalg.cython_blas  # noqa: F401  (loads the library to inspect)
        from threadpoolctl import threadpool_info

        libs = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        # SciPy's own copy first where each wheel ships one (scipy.libs beside numpy.libs)
        libs.sort(key=lambda i: "scipy" not in os.path.basename(os.path.dirname(i["filepath"])))
        first = libs[0] if libs else {}
        core = str(first.get("architecture") or "").lower()
        _small_blocks = first.get("internal_api") == "openblas" and core in _SMALL_BLOCK_CORES
    return _small_blocks


def apply_epilogue(backend: Any, out: np.ndarray, ep: Epilogue) -> None:
    """The epilogue ``ep`` on ``out`` (C-contiguous, at least 2-D) with numpy and the row
    kernel, for products not computed in tiles."""
    if ep is _NO_EPILOGUE:
        return
    m, n = out.shape[-2:]
    if ep.bias is not None:
        if ep.bias_mode == _blas(backend, "BIAS_COL"):
            out += ep.bias
        elif ep.bias_mode == _blas(backend, "BIAS_ROW"):
            out += ep.bias.reshape(m, 1)
    if ep.residual is not None:
        out += ep.residual
    if ep.act is not None and ep.act != backend.kernel("epilogue", "ACT_NONE") and out.size:
        t = out.dtype.type
        rows = out.reshape(-1, n)
        backend.kernel("epilogue", "rows")(
            rows, t(1), empty_array(out.dtype), False, ep.act, t(ep.p0), t(ep.p1)
        )


def matmul(a: np.ndarray, b: np.ndarray, backend: Any = None) -> np.ndarray:
    """``np.matmul(a, b)`` (same broadcasting and result type), products through
    :func:`matmul_into` where it can take them."""
    if a.ndim >= 2 and b.ndim >= 2 and a.dtype == b.dtype and a.dtype in _BLAS_TYPES:
        lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        out = np.empty((*lead, a.shape[-2], b.shape[-1]), a.dtype)
        matmul_into(a, b, out, backend=backend)
        return out
    return np.matmul(a, b)
