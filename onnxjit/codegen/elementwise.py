"""Elementwise kernel generator: expression DAG -> Numba loop nest over broadcast inputs.

:func:`apply` evaluates one expression (or :func:`apply_many` several, sharing inputs) over
numpy arrays with numpy broadcasting. The work per call is a few shape computations and one
dict lookup; kernels are specialised per

    (output expressions, input dtypes, collapsed rank, per-input broadcast mask)

and never per size: the collapsed sizes are run-time arguments.

Layout. The output shape follows numpy's rules. Adjacent dimensions are merged where every
input agrees on being present (size n) or broadcast (size 1, or missing) in both (an output dim
of size 1 counts as present in the inputs that have it, so batch size 1 shares the kernel of
other batch sizes), so ``[N,C,H,W] + [C,1,1]`` runs as rank 3 ``(N, C, H*W)`` and same-shape
inputs run as rank 1. Each input is C-contiguous and flattened; its offset is the row-major
(Horner) index over the dimensions it is present in, so no stride arrays are needed. Loads of an
input, and every sub-expression that only depends on outer loop indices, are hoisted to the
outermost loop level where their value is known (a scalar input is read once).

Generated code is built as a Python AST, rendered with ``ast.unparse`` and imported from a file
named by the hash of its source (:mod:`onnxjit.codegen.modcache`) so that Numba's on-disk cache
works. The module defines ``kernel`` (serial) and ``kernel_par`` (a pool kernel whose threads
claim chunks of the outermost loop, see :mod:`onnxjit.backends.cpu.pool`), used when the
output's element count times the kernel's work per element (:func:`work_weight`) passes
``PARALLEL_THRESHOLD``; each is compiled on first use.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np

from onnxjit.backends.cpu.pool import run_parallel
from onnxjit.codegen import modcache
from onnxjit.codegen.expr import BINARY, UNARY, Const, Expr, Input, Op, input_dtypes, walk
from onnxjit.kernels import _jit
from onnxjit.kernels import scalar as _scalar
from onnxjit.kernels.cpu.runtime import prefetch, streaming

# Storage dtypes Numba cannot load: computed in float32, passed to kernels as their uint16
# bits and converted element by element on load and store (kernels/scalar.py helpers).
NARROW_FLOATS = frozenset({np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)})
_NARROW_KIND: dict[np.dtype, str] = {
    np.dtype(np.float16): "f16",
    np.dtype(ml_dtypes.bfloat16): "bf16",
}
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
# ast.FunctionDef grew a type_params field in Python 3.12.
_TYPE_PARAMS: dict[str, Any] = {"type_params": []} if sys.version_info >= (3, 12) else {}

# Part of every generated source, so that editing a scalar helper changes the file name (Numba's
# cache would otherwise keep machine code with the old helper inlined).
# The helpers inline kernels/vecmath.py, the pool twins kernels/cpu/runtime/chunks.py (with
# atomics.py), kernel_stream kernels/cpu/runtime/streaming.py: all five files are part of the key.
_SCALAR_HASH = hashlib.sha256(
    b"".join(
        (Path(_scalar.__file__).parent / name).read_bytes()
        for name in (
            "scalar.py",
            "vecmath.py",
            "cpu/runtime/chunks.py",
            "cpu/runtime/atomics.py",
            "cpu/runtime/streaming.py",
        )
    )
).hexdigest()[:16]


def compute_dtype(dtype: Any) -> np.dtype:
    """The dtype a kernel computes in for a tensor stored as ``dtype``."""
    dt = np.dtype(dtype)
    return F32 if dt in NARROW_FLOATS else dt


# ---------------------------------------------------------------------------------------------
# Helper resolution
# ---------------------------------------------------------------------------------------------


def helper_name(family: str, dtype: np.dtype) -> str:
    """The function of :mod:`onnxjit.kernels.scalar` implementing ``family`` for ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        names = [f"{family}_f{dtype.itemsize * 8}"]
    elif dtype.kind == "u":
        names = [f"{family}_uint", f"{family}_int"]
    elif dtype.kind == "i":
        names = [f"{family}_int"]
    elif dtype.kind == "b":
        names = [f"{family}_bool"]
    else:
        names = []
    names.append(family)
    for n in names:
        if not n.startswith("_") and hasattr(_scalar, n):
            return n
    raise NotImplementedError(f"no scalar helper {family!r} for dtype {dtype}")


# ---------------------------------------------------------------------------------------------
# Source generation
# ---------------------------------------------------------------------------------------------


def _name(n: str, store: bool = False) -> ast.Name:
    return ast.Name(id=n, ctx=ast.Store() if store else ast.Load())


def _assign(target: str, value: ast.expr) -> ast.Assign:
    return ast.Assign(targets=[_name(target, True)], value=value, lineno=0)


def _np_call(fn: str, arg: ast.expr) -> ast.Call:
    return ast.Call(
        func=ast.Attribute(value=_name("np"), attr=fn, ctx=ast.Load()), args=[arg], keywords=[]
    )


def _unsigned(index: ast.expr, always: bool = False) -> ast.expr:
    """``index`` as an unsigned integer, unless it is a bare ``range(n)`` loop variable.

    Numba adds ``n`` to a negative signed index (Python's wrap-around); with an index of the
    form ``base + i``, or a loop variable of ``range(lo, hi)``, LLVM cannot prove that test
    away and leaves the loop scalar (measured: a rank-2 float32 ``y = 2x + 1`` took 1.2 ms over
    1M elements, 0.2 ms with unsigned offsets). Offsets here are never negative, and an
    unsigned index has no wrap-around test. ``always`` also converts bare names (the pool
    kernel's outermost loop runs over ``range(chunk_lo, chunk_hi)``).
    """
    if isinstance(index, ast.Name) and not always:
        return index
    return _np_call("uint64", index)


def _claim_loop(body: list[ast.stmt]) -> ast.While:
    """``while True: chunk_lo, chunk_hi = claim(ctl, n0); if empty: break; <body>``."""
    claim = ast.Assign(
        targets=[
            ast.Tuple(elts=[_name("chunk_lo", True), _name("chunk_hi", True)], ctx=ast.Store())
        ],
        value=ast.Call(func=_name("claim"), args=[_name("ctl"), _name("n0")], keywords=[]),
        lineno=0,
    )
    done = ast.If(
        test=ast.Compare(left=_name("chunk_lo"), ops=[ast.GtE()], comparators=[_name("chunk_hi")]),
        body=[ast.Break()],
        orelse=[],
    )
    return ast.While(test=ast.Constant(True), body=[claim, done, *body], orelse=[])


def _for(var: str, rng_args: list[ast.expr], body: list[ast.stmt]) -> ast.For:
    return ast.For(
        target=_name(var, True),
        iter=ast.Call(func=_name("range"), args=rng_args, keywords=[]),
        body=body,
        orelse=[],
        lineno=0,
    )


# Elements per block of a blocked float32 sum (_blocked_sum_loop).
_SUM_BLOCK = 1024


def _blocked_sum_loop(var: str, n: ast.expr, body: list[ast.stmt]) -> list[ast.stmt]:
    """The innermost loop of a float32 sum over ``range(n)`` cut into blocks of _SUM_BLOCK
    elements: ``body`` adds to a float32 ``part`` that starts at 0 in each block, and each
    block's ``part`` is added to the float64 ``acc``.

    The vectorised loop keeps one partial sum per lane and per interleaved vector, and how
    many vectors LLVM interleaves depends on the body's register pressure. Over a whole row,
    32768 sigmoids of 8 values repeated (an Expand then a ReduceSum) came out with relative
    errors up to 2.4e-5 with 8 partial sums (each lane adds one value 4096 times, rounding the
    same way each time); in blocks of 1024 up to 8e-7 (blocks of 512: 4e-7, of 2048: 1.5e-6).
    The blocks cost a horizontal sum and a mispredicted loop exit each: a sigmoid and sum
    over 256K float32 took 150 -> 158 us on the Zen 3 (blocks of 512: 161). A float64 sum of
    every element would halve the vector width of the whole body (319 us)."""
    blk = f"{var}_blk"
    reset = _assign("part", _np_call("float32", ast.Constant(0)))
    left = ast.BinOp(left=n, op=ast.Sub(), right=_name(blk))
    size = ast.Call(func=_name("min"), args=[ast.Constant(_SUM_BLOCK), left], keywords=[])
    shifted = [_Stream(var, blk, set(), "").visit(copy.deepcopy(st)) for st in body]
    add = _assign(
        "acc", ast.BinOp(left=_name("acc"), op=ast.Add(), right=_np_call("float64", _name("part")))
    )
    blocks = [ast.Constant(0), n, ast.Constant(_SUM_BLOCK)]
    return [_for(blk, blocks, [reset, _for(var, [size], shifted), add])]


class _Stream(ast.NodeTransformer):
    """One interleaved stream's copy of the hot loop body: the body's own variables get the
    stream's suffix and the loop index ``var`` becomes ``var + offset`` (an index that was
    the bare loop variable is made unsigned, see :func:`_unsigned`)."""

    def __init__(self, var: str, offset: str, local: set[str], suffix: str):
        self.var, self.offset, self.local, self.suffix = var, offset, local, suffix

    def _shifted(self) -> ast.expr:
        return ast.BinOp(left=_name(self.var), op=ast.Add(), right=_name(self.offset))

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        if isinstance(node.slice, ast.Name) and node.slice.id == self.var:
            node.slice = _np_call("uint64", self._shifted())
            node.value = self.visit(node.value)
            return node
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == self.var:
            return self._shifted()
        if node.id in self.local:
            return ast.Name(id=node.id + self.suffix, ctx=node.ctx)
        return node


def _interleaved_loops(
    var: str, rng_args: list[ast.expr], body: list[ast.stmt], k: int
) -> list[ast.stmt]:
    """The innermost loop over ``range(*rng_args)`` as ``k`` interleaved streams.

    The range is cut into k equal parts walked side by side, statement by statement, then a
    remainder loop takes the last ``len % k`` elements. A long chain of transcendental
    helpers is one dependency chain per element; LLVM vectorises the loop but does not
    interleave it, and the core's reordering window holds barely more than one iteration,
    so the chain's latency, not the vector units, set the pace (the 16-op E1 chain with tanh,
    log and sigmoid: 620 us over 256K float32 elements, 388 us with four streams).
    """
    lo: ast.expr = rng_args[0] if len(rng_args) == 2 else ast.Constant(0)
    hi = rng_args[-1]
    span = _name(f"{var}_span")
    setup: list[ast.stmt] = [
        _assign(
            f"{var}_span",
            ast.BinOp(
                left=ast.BinOp(left=hi, op=ast.Sub(), right=lo),
                op=ast.FloorDiv(),
                right=ast.Constant(k),
            ),
        )
    ]
    for j in range(1, k):
        setup.append(
            _assign(f"{var}_at{j}", ast.BinOp(left=span, op=ast.Mult(), right=ast.Constant(j)))
        )
    local = {
        t.id
        for st in body
        if isinstance(st, ast.Assign)
        for t in st.targets
        if isinstance(t, ast.Name)
    }
    streams: list[ast.stmt] = []
    for st in body:
        streams.append(st)
        for j in range(1, k):
            streams.append(_Stream(var, f"{var}_at{j}", local, f"_{j}").visit(copy.deepcopy(st)))
    main_hi = ast.BinOp(left=lo, op=ast.Add(), right=span)
    rest_lo = ast.BinOp(
        left=lo, op=ast.Add(), right=ast.BinOp(left=span, op=ast.Mult(), right=ast.Constant(k))
    )
    main_args = [lo, main_hi] if len(rng_args) == 2 else [span]
    return [
        *setup,
        _for(var, main_args, streams),
        _for(var, [rest_lo, hi], copy.deepcopy(body)),
    ]


def _dtype_ctor(dtype: np.dtype) -> str:
    return "bool_" if dtype.kind == "b" else dtype.name


def _literal(c: Const) -> ast.expr:
    v = c.value
    if c.dtype.kind == "b":
        return ast.Constant(bool(v))
    if c.dtype.kind == "f":
        f = float(v)
        if math.isnan(f):
            lit: ast.expr = ast.Attribute(value=_name("np"), attr="nan", ctx=ast.Load())
        elif math.isinf(f):
            lit = ast.Attribute(value=_name("np"), attr="inf", ctx=ast.Load())
            if f < 0:
                lit = ast.UnaryOp(op=ast.USub(), operand=lit)
        else:
            lit = ast.Constant(f)
    else:
        lit = ast.Constant(int(v))
    # The dtype travels with the constant: np.float32(0.5), never a bare 0.5.
    return _np_call(_dtype_ctor(c.dtype), lit)


class _Emitter:
    """Builds the kernel module for one specialisation.

    ``loads[k]`` / ``stores[j]`` name the narrow storage of input k / output j (``"f16"``,
    ``"bf16"``) or are ``""`` for a dtype the kernel reads and writes directly. Narrow arrays
    arrive viewed as uint16: each element is widened to float32 by a scalar helper on load
    and narrowed (round to nearest even) on store, so no separate conversion pass runs.
    """

    def __init__(
        self,
        exprs: tuple[Expr, ...],
        masks: tuple[tuple[bool, ...], ...],
        loads: tuple[str, ...] = (),
        stores: tuple[str, ...] = (),
        reduce: str = "",
        interleave: int = 1,
        interleave_serial: int = 1,
    ):
        self.exprs = exprs
        self.masks = masks
        # interleaved streams of the pool kernels' and of the serial kernel's innermost loop
        self.interleave = interleave
        self.interleave_serial = interleave_serial
        self.rank = len(masks[0]) if masks else 0
        self.n_in = len(masks)
        self.loads = loads or ("",) * self.n_in
        self.stores = stores or ("",) * len(exprs)
        self.helpers: set[str] = set()
        # "sum", "mean" or "max": the one expression is reduced over the innermost dim
        self.reduce = reduce
        if reduce and (len(exprs) != 1 or self.rank < 1):
            raise ValueError("a reduction kernel has one expression and rank >= 1")

    def _helper_call(self, fn: str, arg: ast.expr) -> ast.Call:
        self.helpers.add(fn)
        return ast.Call(func=_name(fn), args=[arg], keywords=[])

    # present dims of input k, and the loop level at which its load can happen
    def _present(self, k: int) -> list[int]:
        return [d for d in range(self.rank) if self.masks[k][d]]

    def function(
        self, name: str, parallel: bool, inplace: int | None = None, streams: int | None = None
    ) -> ast.FunctionDef:
        """``name(ctl?, y0.., x0.., n0..)``; with ``inplace = k`` output 0 is stored through
        input k (the caller passes x_k's buffer as y0 too, which the body leaves unused): one
        array written and read at the same index, where two that alias would fail LLVM's
        run-time overlap check and run the loop's scalar version (see inplace_inputs).
        ``streams``: interleaved streams of the innermost loop (default: the module's for pool
        or serial kernels, see interleave_streams)."""
        if streams is None:
            streams = self.interleave if parallel else self.interleave_serial
        r = self.rank
        levels: list[list[ast.stmt]] = [[] for _ in range(r + 1)]
        # Offsets: output q{d}, inputs o{k}_{d}; Horner over the dims an array is present in.
        # The innermost dim uses a base computed one level up, so the hot loop is base + i.

        def offsets(var: str, present: list[int]) -> ast.expr:
            prev: ast.expr | None = None
            for d in present:
                i = _name(f"i{d}")
                if d == r - 1:
                    if prev is None:
                        return i
                    base = f"{var}b"
                    levels[d].append(
                        _assign(base, ast.BinOp(left=prev, op=ast.Mult(), right=_name(f"n{d}")))
                    )
                    return ast.BinOp(left=_name(base), op=ast.Add(), right=i)
                if prev is None:
                    val: ast.expr = i
                else:
                    val = ast.BinOp(
                        left=ast.BinOp(left=prev, op=ast.Mult(), right=_name(f"n{d}")),
                        op=ast.Add(),
                        right=i,
                    )
                levels[d + 1].append(_assign(f"{var}_{d}", val))
                prev = _name(f"{var}_{d}")
            return prev if prev is not None else ast.Constant(0)

        out_dims = list(range(r - 1)) if self.reduce else list(range(r))
        out_index = offsets("q", out_dims)
        node_level: dict[Expr, int] = {}
        names: dict[Expr, str] = {}
        for k in range(self.n_in):
            present = self._present(k)
            idx = offsets(f"o{k}", present)
            lvl = present[-1] + 1 if present else 0
            load: ast.expr = ast.Subscript(
                value=_name(f"x{k}"), slice=_unsigned(idx, parallel), ctx=ast.Load()
            )
            if self.loads[k]:
                load = self._helper_call(f"{self.loads[k]}_to_f32", load)
            levels[lvl].append(_assign(f"v{k}", load))
        n_tmp = 0
        n_const = 0
        for node in walk(self.exprs):
            if isinstance(node, Input):
                present = self._present(node.index)
                node_level[node] = present[-1] + 1 if present else 0
                names[node] = f"v{node.index}"
                continue
            if isinstance(node, Const):
                var = f"c{n_const}"
                n_const += 1
                levels[0].append(_assign(var, _literal(node)))
                node_level[node] = 0
                names[node] = var
                continue
            assert isinstance(node, Op)
            lvl = max((node_level[a] for a in node.args), default=0)
            var = f"t{n_tmp}"
            n_tmp += 1
            levels[lvl].append(_assign(var, self._render(node, [names[a] for a in node.args])))
            node_level[node] = lvl
            names[node] = var
        around: tuple[list[ast.stmt], list[ast.stmt]] = ([], [])
        for j, e in enumerate(self.exprs):
            value: ast.expr = _name(names[e])
            if self.reduce:
                # accumulate over the innermost loop, store once per row after it
                init, step, value = self._reduction(e, value)
                around[0].extend(init)
                levels[r].extend(step)
            if self.stores[j]:
                src = "f64" if e.dtype == np.float64 else "f32"
                value = self._helper_call(f"{src}_to_{self.stores[j]}", value)
            target = f"x{inplace}" if inplace is not None and j == 0 else f"y{j}"
            store = ast.Assign(
                targets=[
                    ast.Subscript(
                        value=_name(target),
                        slice=_unsigned(out_index, parallel),
                        ctx=ast.Store(),
                    )
                ],
                value=value,
                lineno=0,
            )
            (around[1] if self.reduce else levels[r]).append(store)
        body: list[ast.stmt] = levels[r]
        for d in range(r - 1, -1, -1):
            if parallel and d == 0:
                # pool kernel: the outermost loop runs over the chunks this thread claims
                rng_args: list[ast.expr] = [_name("chunk_lo"), _name("chunk_hi")]
            else:
                rng_args = [_name(f"n{d}")]
            inner: list[ast.stmt]
            if d == r - 1 and streams > 1 and not self.reduce:
                inner = _interleaved_loops(f"i{d}", rng_args, body, streams)
            elif d == r - 1 and self._blocked_sum():
                inner = _blocked_sum_loop(f"i{d}", _name(f"n{d}"), body)
            else:
                inner = [_for(f"i{d}", rng_args, body)]
            if self.reduce and d == r - 1:
                inner = around[0] + inner + around[1]
            if parallel and d == 0:
                inner = [_claim_loop(inner)]
            body = levels[d] + inner
        params = (["ctl"] if parallel else []) + (
            [f"y{j}" for j in range(len(self.exprs))]
            + [f"x{k}" for k in range(self.n_in)]
            + [f"n{d}" for d in range(r)]
        )
        # fma: contraction shortens the vecmath polynomials (see kernels/_jit.py); a sum
        # vectorises only when it may be reassociated (partial sums per vector lane)
        keywords = [ast.keyword(arg="fma", value=ast.Constant(True))]
        if self.reduce in ("sum", "mean"):
            keywords.append(
                ast.keyword(arg="fastmath", value=ast.Set(elts=[ast.Constant("reassoc")]))
            )
        deco = ast.Call(func=_name("pjit" if parallel else "njit"), args=[], keywords=keywords)
        return ast.FunctionDef(
            name=name,
            args=ast.arguments(
                posonlyargs=[],
                args=[ast.arg(arg=p) for p in params],
                kwonlyargs=[],
                kw_defaults=[],
                defaults=[],
            ),
            body=body or [ast.Pass()],
            decorator_list=[deco],
            returns=None,
            lineno=0,
            **_TYPE_PARAMS,
        )

    def _blocked_sum(self) -> bool:
        """Whether the innermost loop sums float32 values block by block."""
        return self.reduce in ("sum", "mean") and self.exprs[0].dtype == np.float32

    def _reduction(
        self, e: Expr, value: ast.expr
    ) -> tuple[list[ast.stmt], list[ast.stmt], ast.expr]:
        """(statements before the innermost loop, statements inside it, the row's result)."""
        dt = e.dtype
        acc = _name("acc")
        n_last = _name(f"n{self.rank - 1}")
        if self.reduce in ("sum", "mean"):
            if self._blocked_sum():
                # blocked (see _blocked_sum_loop): float32 partial sums per block of
                # _SUM_BLOCK elements, the block sums added in float64
                init = [_assign("acc", _np_call("float64", ast.Constant(0)))]
                part = _name("part")
                step = [_assign("part", ast.BinOp(left=part, op=ast.Add(), right=value))]
                total: ast.expr = acc
                if self.reduce == "mean":
                    total = ast.BinOp(left=acc, op=ast.Div(), right=_np_call("float64", n_last))
                return init, step, _np_call("float32", total)
            init = [_assign("acc", _np_call(_dtype_ctor(dt), ast.Constant(0)))]
            step = [_assign("acc", ast.BinOp(left=acc, op=ast.Add(), right=value))]
            if self.reduce == "sum":
                return init, step, acc
            count = _np_call(_dtype_ctor(dt), n_last)
            return init, step, ast.BinOp(left=acc, op=ast.Div(), right=count)
        if self.reduce != "max":
            raise ValueError(f"unknown reduction {self.reduce!r}")
        if dt.kind == "f":
            # maxNum vectorises (kernels.vecmath.maxnum); a NaN is remembered on the side so
            # that the row's maximum is NaN as ReduceMax gives it
            self.helpers.add("maxnum")
            neg_inf = ast.UnaryOp(op=ast.USub(), operand=_name("np.inf"))
            init = [
                _assign("acc", _np_call(_dtype_ctor(dt), neg_inf)),
                _assign("nan", ast.Constant(False)),
            ]
            step = [
                _assign("acc", ast.Call(func=_name("maxnum"), args=[acc, value], keywords=[])),
                _assign(
                    "nan",
                    ast.BoolOp(
                        op=ast.Or(),
                        values=[
                            _name("nan"),
                            ast.Compare(left=value, ops=[ast.NotEq()], comparators=[value]),
                        ],
                    ),
                ),
            ]
            result = ast.IfExp(
                test=_name("nan"), body=_np_call(_dtype_ctor(dt), _name("np.nan")), orelse=acc
            )
            return init, step, result
        lowest = int(np.iinfo(dt).min) if dt.kind in "iu" else 0
        init = [_assign("acc", _np_call(_dtype_ctor(dt), ast.Constant(lowest)))]
        step = [
            _assign(
                "acc",
                ast.IfExp(
                    test=ast.Compare(left=value, ops=[ast.Gt()], comparators=[acc]),
                    body=value,
                    orelse=acc,
                ),
            )
        ]
        return init, step, acc

    def _render(self, node: Op, args: list[str]) -> ast.expr:
        a = [_name(x) for x in args]
        dt = node.dtype
        if node.name in BINARY:
            opname, is_cmp = BINARY[node.name]
            if is_cmp:
                return ast.Compare(left=a[0], ops=[getattr(ast, opname)()], comparators=[a[1]])
            val: ast.expr = ast.BinOp(left=a[0], op=getattr(ast, opname)(), right=a[1])
            # Numba widens small ints to int64; casting back wraps like numpy. Bool & | ^
            # must stay bool.
            return _np_call(_dtype_ctor(dt), val) if dt.kind in "iub" else val
        if node.name in UNARY:
            val = ast.UnaryOp(op=getattr(ast, UNARY[node.name])(), operand=a[0])
            return _np_call(_dtype_ctor(dt), val) if dt.kind in "iu" else val
        if node.name == "cast":
            if dt.kind == "b":
                return ast.Compare(left=a[0], ops=[ast.NotEq()], comparators=[ast.Constant(0)])
            return _np_call(_dtype_ctor(dt), a[0])
        if node.name == "where":
            return ast.IfExp(test=a[0], body=a[1], orelse=a[2])
        fn = self._helper_for(node.name, node.args[0].dtype)
        val = ast.Call(func=_name(fn), args=a, keywords=[])
        # Helpers return Numba's natural type (int64 for small ints); pin the node's dtype.
        return val if dt.kind == "b" else _np_call(_dtype_ctor(dt), val)

    def _helper_for(self, family: str, dtype: np.dtype) -> str:
        """The function a call of the scalar helper ``family`` on ``dtype`` renders as
        (recorded for the module's imports); the GPU emitter resolves some families to
        device forms instead."""
        fn = helper_name(family, dtype)
        self.helpers.add(fn)
        return fn

    def streams_output(self) -> bool:
        """Whether the module gets ``kernel_stream``: one output, every operand of the full
        (one collapsed dim) shape, nothing stored or loaded narrow, no reduction, and little
        enough work per element that memory sets the pace (_STREAM_MAX_COST)."""
        return (
            _chain_cost(self.exprs) <= _STREAM_MAX_COST
            and self.rank == 1
            and not self.reduce
            and len(self.exprs) == 1
            and all(m == (True,) for m in self.masks)
            and not any(self.loads)
            and not any(self.stores)
        )

    def _stream_function(self) -> list[ast.stmt]:
        """``kernel_stream(ctl, y0, x0.., n0)``: :func:`kernel_par` for outputs far larger than the
        caches. The pool claims blocks of streaming.BLOCK_BYTES; the serial ``kernel`` computes each
        into a scratch array that stays in L1 (chains cheap enough to stream are below
        _INTERLEAVE_COST: one stream) and kernels/cpu/runtime/streaming.py stores it with
        non-temporal stores (no read of the output lines first). The elements before the output's
        first 64-byte boundary and after its last whole block go through ``kernel`` in place (claims
        0 and blocks + 1)."""
        xs = [f"x{k}" for k in range(self.n_in)]
        block = streaming.BLOCK_BYTES // self.exprs[0].dtype.itemsize

        def call(fn: str, out: str, lo: str, hi: str, n: str) -> str:
            sliced = ", ".join(f"{x}[{lo}:{hi}]" for x in xs)
            return f"{fn}({out}, {sliced}, {n})"

        src = f"""
@pjit
def kernel_stream(ctl, y0, {", ".join(xs)}, n0):
    head = stream_head(y0)
    blocks = (n0 - head) // {block}
    buf = np.empty({block}, y0.dtype)
    while True:
        chunk_lo, chunk_hi = claim(ctl, blocks + 2)
        if chunk_lo >= chunk_hi:
            break
        for b in range(chunk_lo, chunk_hi):
            lo, hi = span_of(b, head, blocks, {block}, n0)
            if b == 0 or b > blocks:
                if hi > lo:
                    {call("kernel", "y0[lo:hi]", "lo", "hi", "hi - lo")}
            else:
                {call("kernel", "buf", "lo", "hi", str(block))}
                stream_block(y0, lo, buf)
    stream_fence()
"""
        return ast.parse(src).body

    def inplace_inputs(self) -> list[int]:
        """Inputs that output 0 may overwrite through ``kernel_ip{k}``: a single output, no
        reduction, and input k of the full shape, loaded and stored in the output's type."""
        if self.reduce or len(self.exprs) != 1 or self.stores[0] or not self.rank:
            return []
        dtypes = dict(enumerate(input_dtypes(self.exprs)))
        return [
            k
            for k in range(self.n_in)
            if all(self.masks[k]) and not self.loads[k] and dtypes.get(k) == self.exprs[0].dtype
        ]

    def module(self) -> str:
        fns = [self.function("kernel", False)]
        # a reduction over the only dim has no rows to share out
        if self.rank and not (self.reduce and self.rank == 1):
            fns.append(self.function("kernel_par", True))
        else:
            fns.append(_assign("kernel_par", _name("kernel")))
        # compiled only when a call writes in place (Numba compiles a function at its first
        # call), so groups that never do pay nothing for them
        for k in self.inplace_inputs():
            fns.append(self.function(f"kernel_ip{k}", False, k))
            fns.append(self.function(f"kernel_par_ip{k}", True, k))
        # pool kernels over rows walking interleaved streams get a one-stream twin for data
        # beyond the caches (see prefetch.ROW_STREAMS_MAX_BYTES), compiled only when such data comes
        if self.rank > 1 and self.interleave > 1 and not self.reduce:
            fns.append(self.function(f"kernel_par{_ONE_STREAM}", True, streams=1))
            for k in self.inplace_inputs():
                fns.append(self.function(f"kernel_par{_ONE_STREAM}_ip{k}", True, k, streams=1))
        stream = self.streams_output()
        if stream:
            fns.extend(self._stream_function())
        imports: list[ast.stmt] = [
            ast.Import(names=[ast.alias(name="numpy", asname="np")]),
            ast.ImportFrom(
                module="onnxjit.kernels.cpu.runtime.chunks",
                names=[ast.alias(name="claim")],
                level=0,
            ),
            ast.ImportFrom(
                module="onnxjit.kernels._jit",
                names=[ast.alias(name="njit"), ast.alias(name="pjit")],
                level=0,
            ),
        ]
        if stream:
            names = ("span_of", "stream_block", "stream_fence", "stream_head")
            imports.append(
                ast.ImportFrom(
                    module="onnxjit.kernels.cpu.runtime.streaming",
                    names=[ast.alias(name=n) for n in names],
                    level=0,
                )
            )
        if self.helpers:
            imports.append(
                ast.ImportFrom(
                    module="onnxjit.kernels.scalar",
                    names=[ast.alias(name=h) for h in sorted(self.helpers)],
                    level=0,
                )
            )
        mod = ast.Module(body=imports + fns, type_ignores=[])
        ast.fix_missing_locations(mod)
        header = (
            f'"""onnxjit generated elementwise kernel (scalar helpers {_SCALAR_HASH}).\n\n'
            f"rank {self.rank}, broadcast masks {self.masks}\n"
            f"narrow loads {self.loads}, narrow stores {self.stores}\n"
            + (f"reduced over the innermost dim: {self.reduce}\n" if self.reduce else "")
            + "\n".join(f"y{j} = {e!r}" for j, e in enumerate(self.exprs))
            + '\n"""\n'
        )
        return header + ast.unparse(mod) + "\n"


def generate_source(
    exprs: Sequence[Expr],
    masks: Sequence[Sequence[bool]],
    loads: Sequence[str] = (),
    stores: Sequence[str] = (),
    reduce: str = "",
) -> str:
    """Source of the kernel module for ``exprs`` with per-input broadcast ``masks``.

    ``masks[k][d]`` is True where input k is present (not broadcast) in collapsed dim d.
    ``loads[k]`` / ``stores[j]`` are ``"f16"`` or ``"bf16"`` where input k / output j is
    stored narrow (and passed as a uint16 view), else ``""`` (the default for all).
    """
    m = tuple(tuple(bool(b) for b in mk) for mk in masks)
    rank = len(m[0]) if m else 0
    k = 1 if reduce else interleave_streams(exprs, rank)
    k_serial = 1 if reduce else interleave_streams(exprs, rank, serial=True)
    e = _Emitter(tuple(exprs), m, tuple(loads), tuple(stores), reduce, k, k_serial)
    # the function body has to be generated first to know which helpers to import
    return e.module()


# ---------------------------------------------------------------------------------------------
# Run time
# ---------------------------------------------------------------------------------------------


# Rough cost of one node per element, in units of a vectorised add, for deciding when a kernel
# is worth threads (not for anything exact). The vecmath functions and the activations built
# on them are polynomials of some 20 to 40 instructions; the libm ones are scalar calls.
_VECMATH = ("exp", "log", "log1p", "tanh", "sigmoid", "erf", "softplus", "elu", "selu", "celu")
_LIBM = ("sin", "cos", "tan", "sinh", "cosh", "asinh", "acosh", "atanh")
_NODE_COST: dict[str, float] = {
    **dict.fromkeys(_VECMATH, 10.0),
    **dict.fromkeys(_LIBM, 30.0),
    # vecmath in float32 (a division, a square root for asin/acos); libm in float64
    **dict.fromkeys(("atan", "asin", "acos"), 12.0),
    "gelu": 12.0,
    "gelu_tanh": 12.0,
    "mish": 25.0,
    "fpow": 30.0,
    "pow": 30.0,
    "mod": 30.0,
    "fmod": 30.0,
    "truediv": 4.0,
    "div": 10.0,  # integer division does not vectorise
    "sqrt": 4.0,
    "reciprocal": 4.0,
}
# A kernel of this cost per element or less is as fast as a copy; one of cost c takes about
# c / _STREAM_COST times as long per element. The ratio is deliberately conservative: the
# threshold was set for memory-bound kernels, and on the 2-core VM this was tuned on waking
# Numba's workqueue threads costs some 150 us, so a 16-op chain with tanh, log and sigmoid ran
# slower on two threads than on one at 256K elements (1.31 ms against 0.86 ms) and only gained
# from 4M elements on.
_STREAM_COST = 16.0


# Kernels whose chain costs at least this much per element (one vecmath helper) run their
# innermost loop as _STREAMS interleaved streams (see _interleaved_loops); cheaper ones are
# bound by memory or by a short chain, and would only compile a longer body (the 16-op E1
# chain compiles in 3.5 s instead of 1.6). Eight streams ran out of vector registers: the
# same chain took 2 ms instead of 0.24.
_INTERLEAVE_COST = 10.0
_STREAMS = 4
# The same threshold where the kernels have 16 vector registers (x86 without AVX-512; the
# figures above come from an AVX-512 Xeon with 32): there four streams of a lone vecmath
# helper spill its constants and temporaries. Zen 3 VM, AVX2, 2 threads, four streams against
# one in one process: the erf GELU (12) 1.19x the time at 256K and ~1.2x at 4M, the tanh GELU
# (12) 1.05x and 1.04x, SiLU (11) 1.01x and 0.95x; the 16-op chain (49) still 0.60x and 0.73x.
_INTERLEAVE_COST_FEW_REGS = 16.0
# Kernels of rank 2 and more interleave only from this cost: their streams split each row of
# the innermost dim into short segments, which the hardware prefetchers follow poorly once the
# data comes from memory. Bias + GELU (13) over 64M float32 as [65536, 1024], 2 threads,
# development VM: 31.2 ms with four streams, 20.1 with one (4M: 0.84-1.07 ms against 0.73;
# 256K: equal), while the 8-op E1 chain (20) still gains from four (64M: 33.4 ms against
# 36.9) and the 16-op one (49) much more (256K: 205 us against 307).
_INTERLEAVE_COST_ROWS = 16.0
# ... and only while the output and one full-size input together fit in
# prefetch.ROW_STREAMS_MAX_BYTES; beyond, the pool runs the module's one-stream twin (suffix
# _ONE_STREAM). The 8-op E1 chain (20) over rows of 1024 float32, Zen 3 VM, 2 threads, one
# stream against four in one process: 1.05-1.13x the time at 256K elements (2 MiB), 0.99x at
# 1M (8 MiB), 0.62x at 2M, 0.64x at 4M and 0.73x at 64M (81 ms against 53). Four streams
# taken from four rows (rows i, i + s, i + 2s, i + 3s side by side, or four neighbouring
# rows) were no faster than one.
_ONE_STREAM = "_1s"
# Serial kernels (work under the parallel threshold) interleave only from this cost: there the
# four streams' longer body mostly costs compile time (bench O1, 18 generated kernels of tiny
# tensors: 19 s from an empty cache with four streams in every kernel, 4.5 s with one in the
# serial ones) and gains little at run time, except in long chains (E1 at 4K elements,
# 2 threads: the 16-op chain, cost 49, 11.1 us against 14.5 with one stream; the 8-op chain,
# cost 20, 6.5 against 7.0; the tanh GELU, 12, 6.8 against 7.5).
_INTERLEAVE_COST_SERIAL = 30.0

# Kernels costing at most this per element get kernel_stream (see kernels/cpu/runtime/streaming.py);
# dearer chains are bound by their arithmetic, where streamed stores stall the core instead of
# draining behind it. 64M float32 elements, 2 threads, 1 KiB blocks, streamed against the
# ordinary pool kernel in one process on the Zen 3 VM: x / (x^2 + 1) after a multiply-add
# (cost 8) 0.67, sqrt(x^2) + x (6) 0.70, e^(x/2) (11) 1.00, SiLU (11) 1.06-1.18. (On the
# Xeon development VM of earlier sessions, with 16 KiB blocks, SiLU ran 1.37x faster streamed.)
_STREAM_MAX_COST = 8.0


def _chain_cost(exprs: Sequence[Expr]) -> float:
    """Work per output element of ``exprs`` in units of a vectorised add (_NODE_COST)."""
    return sum(_NODE_COST.get(n.name, 1.0) for n in walk(exprs) if isinstance(n, Op))


def interleave_streams(exprs: Sequence[Expr], rank: int = 1, serial: bool = False) -> int:
    """How many interleaved streams the pool kernel (or with ``serial`` the serial kernel)
    for ``exprs`` over ``rank`` collapsed dims walks its innermost loop in.

    One where an output is stored as 1- or 2-byte integers (or bool): LLVM leaves such loops
    scalar when they have several streams, so interleaving would make them slower (see
    bench/NOTES.md, issue 43 third session)."""
    if any(np.dtype(e.dtype).kind in "iub" and np.dtype(e.dtype).itemsize < 4 for e in exprs):
        return 1
    if serial:
        least = _INTERLEAVE_COST_SERIAL
    elif rank > 1:
        least = _INTERLEAVE_COST_ROWS
    else:
        least = _INTERLEAVE_COST if _jit.vector_registers() >= 32 else _INTERLEAVE_COST_FEW_REGS
    return _STREAMS if _chain_cost(exprs) >= least else 1


def work_weight(exprs: Sequence[Expr]) -> float:
    """Work per output element of ``exprs`` relative to a memory-bound kernel (>= 1).

    A kernel runs multi-threaded when ``elements * work_weight > PARALLEL_THRESHOLD``.
    """
    return max(1.0, _chain_cost(exprs) / _STREAM_COST)


class _Entry:
    __slots__ = ("module", "in_dtypes", "source_path", "weight")

    def __init__(
        self, module: ModuleType, in_dtypes: tuple[np.dtype, ...], path: str, weight: float
    ):
        self.module = module
        self.in_dtypes = in_dtypes
        self.source_path = path
        self.weight = weight


# (exprs, masks) -> compiled module; masks encode the collapsed rank and broadcast pattern.
_KERNELS: dict[tuple, _Entry] = {}


def kernel_cache() -> dict[tuple, _Entry]:
    """The in-process kernel cache (key -> entry with ``module``, ``source_path``)."""
    return _KERNELS


def broadcast_layout(
    shapes: Sequence[tuple[int, ...]],
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[tuple[bool, ...], ...]]:
    """``(out_shape, collapsed_sizes, masks)`` for inputs of ``shapes`` (numpy broadcasting).

    Raises ``ValueError`` naming the shapes when they do not broadcast.
    """
    first = shapes[0]
    n = len(shapes)
    if all(s == first for s in shapes):
        if not first:
            return first, (), ((),) * n
        return first, (math.prod(first),), ((True,),) * n
    r = max(len(s) for s in shapes)
    padded = [(1,) * (r - len(s)) + tuple(s) for s in shapes]
    out: list[int] = []
    sizes: list[int] = []
    masks: list[tuple[bool, ...]] = []
    for d in range(r):
        dims = [p[d] for p in padded]
        big = [x for x in dims if x != 1]
        size = big[0] if big else 1
        if any(x != size for x in big):
            raise ValueError(
                f"shapes {', '.join(str(tuple(s)) for s in shapes)} cannot be broadcast "
                f"together: dimension {d - r} has sizes {dims}"
            )
        out.append(size)
        if size == 1:
            # Any mask is valid for a size-1 dim; "present where the input really has this
            # dim" keeps batch size 1 on the same kernel as other batch sizes for the common
            # [N,C,H,W] + [C,1,1] case.
            m = tuple(d >= r - len(s) for s in shapes)
        else:
            m = tuple(x != 1 for x in dims)
        if masks and masks[-1] == m:
            sizes[-1] *= size
        else:
            sizes.append(size)
            masks.append(m)
    per_input = tuple(tuple(m[k] for m in masks) for k in range(n))
    return tuple(out), tuple(sizes), per_input


def _entry(
    exprs: tuple[Expr, ...],
    masks: tuple[tuple[bool, ...], ...],
    loads: tuple[str, ...],
    stores: tuple[str, ...],
) -> _Entry:
    key = (exprs, masks, loads, stores)
    entry = _KERNELS.get(key)
    if entry is None:
        src = generate_source(exprs, masks, loads, stores)
        mod = modcache.load(src)
        path = str(modcache.path_for(src))
        entry = _Entry(mod, input_dtypes(exprs), path, work_weight(exprs))
        _KERNELS[key] = entry
    return entry


class _Plan:
    """Everything a call needs for one (expressions, input shapes and dtypes, output dtypes).

    ``alloc[j]`` is the dtype output j is allocated with (its stored dtype, also when the
    kernel narrows it on store); ``post[j]`` is a dtype to convert output j to after the
    kernel (a stored dtype the kernel cannot write), else None.
    """

    __slots__ = (
        "out_shape",
        "sizes",
        "size",
        "entry",
        "alloc",
        "post",
        "work",
        "narrow",
        "stream",
        "one_stream",
        "masks",
    )

    def __init__(self, out_shape, sizes, size, entry, alloc, post, narrow, masks=None):
        self.out_shape = out_shape
        self.sizes = sizes
        # per-input broadcast masks over the collapsed dims (see broadcast_layout): what a
        # kernel for another target (cuda_kernel) is generated from
        self.masks = masks
        self.size = size
        self.entry = entry
        self.alloc = alloc
        self.post = post
        # element count scaled by the kernel's work per element (see work_weight)
        self.work = size * entry.weight if entry is not None else 0.0
        # some input or output is float16/bfloat16 (passed to the kernel as its bits)
        self.narrow = narrow
        # the output is large enough for streaming stores and the kernel can do them
        self.stream = (
            entry is not None
            and hasattr(entry.module, "kernel_stream")
            and post == (None,)
            and size * alloc[0].itemsize >= streaming.MIN_BYTES
        )
        # the pool kernel walks one stream: rows of data beyond the caches (see
        # _INTERLEAVE_COST_ROWS)
        self.one_stream = (
            entry is not None
            and hasattr(entry.module, f"kernel_par{_ONE_STREAM}")
            and 2 * size * alloc[0].itemsize > prefetch.ROW_STREAMS_MAX_BYTES
        )


# (exprs, input shapes, input dtypes, output dtypes) -> _Plan; bounded, it only saves shape
# work.
_PLANS: dict[tuple, _Plan] = {}
_MAX_PLANS = 4096


def _plan(
    exprs: tuple[Expr, ...],
    arrays: list[np.ndarray],
    out_dtypes: tuple[np.dtype | None, ...],
    key: tuple,
) -> _Plan:
    out_shape, sizes, masks = broadcast_layout([a.shape for a in arrays])
    size = math.prod(out_shape)
    loads = tuple(_NARROW_KIND.get(a.dtype, "") for a in arrays)
    alloc: list[np.dtype] = []
    post: list[np.dtype | None] = []
    stores: list[str] = []
    for e, dt in zip(exprs, out_dtypes):
        if dt is None or dt == e.dtype:
            alloc.append(e.dtype)
            post.append(None)
            stores.append("")
        elif dt in _NARROW_KIND and e.dtype in (F32, F64):
            # narrowed on store inside the kernel
            alloc.append(dt)
            post.append(None)
            stores.append(_NARROW_KIND[dt])
        else:
            alloc.append(e.dtype)
            post.append(dt)
            stores.append("")
    entry = None
    if size:
        entry = _entry(exprs, masks, loads, tuple(stores))
        if len(entry.in_dtypes) != len(arrays):
            raise TypeError(
                f"the expression reads {len(entry.in_dtypes)} inputs, {len(arrays)} were given"
            )
        for k, (a, dt) in enumerate(zip(arrays, entry.in_dtypes)):
            if compute_dtype(a.dtype) != dt:
                raise TypeError(f"input {k} is {a.dtype}, the expression reads it as {dt}")
    else:
        # nothing runs: allocate the stored dtypes directly
        alloc = [e.dtype if dt is None else dt for e, dt in zip(exprs, out_dtypes)]
        post = [None] * len(exprs)
    narrow = any(loads) or any(dt in _NARROW_KIND for dt in alloc)
    plan = _Plan(out_shape, sizes, size, entry, tuple(alloc), tuple(post), narrow, masks)
    if len(_PLANS) >= _MAX_PLANS:
        _PLANS.clear()
    _PLANS[key] = plan
    return plan


def apply_many(
    exprs: Sequence[Expr],
    inputs: Sequence[Any],
    out_dtypes: Sequence[Any] | None = None,
    out: Sequence[np.ndarray | None] | None = None,
) -> list[np.ndarray]:
    """Evaluate several output expressions over broadcast ``inputs`` in one loop nest.

    ``inputs[k]`` feeds ``Input(k, dtype)``; its dtype must equal that compute dtype, where a
    float16/bfloat16 array is read as float32 (widened element by element inside the
    kernel). ``out_dtypes[j]`` (default: ``exprs[j].dtype``) is the stored dtype of output j;
    a float16/bfloat16 output of a float32 (or float64) expression is narrowed on store with
    round to nearest even, other dtype changes are converted after the kernel.
    Returns fresh arrays of the broadcast shape (empty arrays when the shape has a zero),
    except where ``out[j]`` is an array of exactly the output's shape and stored dtype
    (C-contiguous, writable): output j is written into it. ``out[j]`` may be one of the inputs
    when that input has the output's full shape (each element is read before it is written).
    """
    arrays = kernel_inputs(inputs)
    return run_plan(plan_for(exprs, arrays, out_dtypes), arrays, out)


def kernel_inputs(inputs: Sequence[Any]) -> list[np.ndarray]:
    """``inputs`` as arrays a kernel takes: C-contiguous and writable (copied where not)."""
    arrays: list[np.ndarray] = []
    for a in inputs:
        if type(a) is not np.ndarray:
            a = np.asarray(a)
        if not a.flags.c_contiguous or not a.flags.writeable:
            # Numba types read-only arrays apart (one more compilation) and dispatches them
            # through a slow path; a contiguous writable copy avoids both.
            a = np.array(a, order="C")
        arrays.append(a)
    if not arrays:
        raise ValueError("an elementwise kernel needs at least one input")
    return arrays


def plan_for(
    exprs: Sequence[Expr], arrays: Sequence[np.ndarray], out_dtypes: Sequence[Any] | None = None
) -> _Plan:
    """The plan (kernel, output shape and dtypes) of ``exprs`` over arrays of these shapes and
    dtypes; see :func:`apply_many` for the arguments. Plans are cached: a caller that keeps the
    plan for a shape signature skips even this lookup (:func:`run_plan`)."""
    exprs = tuple(exprs)
    if out_dtypes is None:
        outd: tuple[np.dtype | None, ...] = (None,) * len(exprs)
    else:
        outd = tuple(None if dt is None else np.dtype(dt) for dt in out_dtypes)
    key = (exprs, tuple([a.shape for a in arrays]), tuple([a.dtype for a in arrays]), outd)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _plan(exprs, list(arrays), outd, key)
    return plan


def run_plan(
    plan: _Plan, arrays: Sequence[np.ndarray], out: Sequence[np.ndarray | None] | None = None
) -> list[np.ndarray]:
    """Run ``plan`` on ``arrays``: the shapes and dtypes the plan was made for, each
    C-contiguous and writable (:func:`kernel_inputs`). ``out`` as in :func:`apply_many`."""
    if out is None:
        outs = [np.empty(plan.out_shape, dtype=dt) for dt in plan.alloc]
    else:
        outs = [None] * len(plan.alloc)
        for j, buf in enumerate(out):
            if (
                buf is not None
                and plan.post[j] is None
                and buf.shape == plan.out_shape
                and buf.dtype == plan.alloc[j]
                and buf.flags.c_contiguous
                and buf.flags.writeable
            ):
                outs[j] = buf
            else:
                outs[j] = np.empty(plan.out_shape, dtype=plan.alloc[j])
    if plan.size:
        if plan.narrow:
            # narrow arrays travel as their uint16 bits
            args = [_flat_bits(o) for o in outs] + [_flat_bits(a) for a in arrays]
        else:
            args = [o.ravel() for o in outs] + [a.ravel() for a in arrays]
        args += plan.sizes
        parallel = runs_on_pool(plan)
        kernel = None
        if out is not None and not plan.narrow:
            k = next((k for k, a in enumerate(arrays) if a is outs[0]), None)
            if k is not None:
                kernel = _plan_kernel(plan, parallel, k)
        if kernel is None:
            kernel = _plan_kernel(plan, parallel)
        if parallel:
            run_parallel(kernel, *args)
        else:
            kernel(*args)
        for j, dt in enumerate(plan.post):
            if dt is not None:
                outs[j] = outs[j].astype(dt)
    return outs


def runs_on_pool(plan: _Plan) -> bool:
    """Whether :func:`run_plan` hands the plan's kernel to the pool (large work, or streaming
    stores); otherwise the serial kernel runs on the calling thread."""
    return plan.stream or (bool(plan.sizes) and plan.work > _jit.PARALLEL_THRESHOLD)


def _plan_kernel(plan: _Plan, parallel: bool, inplace: int | None = None) -> Any:
    """The module function that runs ``plan``: the streaming kernel (in place as it is), else
    the pool or the serial kernel, or with ``inplace = k`` their variant writing through
    input k (None where there is none)."""
    mod = plan.entry.module
    if plan.stream:
        return mod.kernel_stream
    if inplace is not None:
        return inplace_kernel(plan, inplace, parallel)
    return getattr(mod, _pool_kernel(plan) if parallel else "kernel")


def _pool_kernel(plan: _Plan) -> str:
    """The name of the plan's pool kernel: its one-stream twin for rows beyond the caches."""
    return f"kernel_par{_ONE_STREAM}" if plan.one_stream else "kernel_par"


def inplace_kernel(plan: _Plan, k: int, parallel: bool) -> Any:
    """The plan's kernel that writes output 0 through input k (the caller passes that input's
    buffer as the output too), or None where the module has none (see
    ``_Emitter.inplace_inputs``). The ordinary kernel would also be right, but run its loop
    unvectorised: LLVM's run-time check finds the output overlapping an input."""
    name = _pool_kernel(plan) if parallel else "kernel"
    return getattr(plan.entry.module, f"{name}_ip{k}", None)


def writes_in_place(plan: _Plan, k: int) -> bool:
    """Whether :func:`bind_plan` has a kernel for calls whose output 0 is input k's buffer:
    the streaming kernel (it computes each block into scratch first, so it is in place as it
    is), or an in-place variant of the other kernels (not for narrow types)."""
    return plan.stream or (not plan.narrow and inplace_kernel(plan, k, False) is not None)


def bind_plan(plan: _Plan, arrays: Sequence[Any], inplace: int | None = None) -> Any:
    """``go(*outs_flat, *inputs_flat, *plan.sizes)``: the plan's kernel for inputs of the
    dtypes of ``arrays`` (arrays or specs), serial or handed to the pool as :func:`run_plan`
    decides, with the pool entry looked up once. Narrow floats travel as their uint16 bits.
    ``inplace = k``: the kernel for calls whose output 0 is input k's buffer (None where there
    is none)."""
    parallel = runs_on_pool(plan)
    if inplace is not None and not writes_in_place(plan, inplace):
        return None
    kernel = _plan_kernel(plan, parallel, inplace)
    if parallel:
        from onnxjit.backends.cpu import pool, threads

        dtypes = [*plan.alloc, *[a.dtype for a in arrays]]
        sample = tuple(np.empty(1, np.uint16 if dt in _NARROW_KIND else dt) for dt in dtypes)
        return pool.bind(kernel, (*sample, *plan.sizes), threads.current())
    return kernel


def _flat_bits(a: np.ndarray) -> np.ndarray:
    return (a.view(np.uint16) if a.dtype in _NARROW_KIND else a).ravel()


def apply(expr: Expr, inputs: Sequence[Any], out_dtype: Any = None) -> np.ndarray:
    """Evaluate ``expr`` elementwise over broadcast ``inputs``; see :func:`apply_many`."""
    return apply_many((expr,), inputs, None if out_dtype is None else (out_dtype,))[0]


# ---------------------------------------------------------------------------------------------
# Elementwise expression reduced over trailing axes
# ---------------------------------------------------------------------------------------------

REDUCTIONS = ("sum", "mean", "max")


def apply_reduce(
    expr: Expr, inputs: Sequence[Any], reduce: str, n_axes: int, out_dtype: Any = None
) -> np.ndarray | None:
    """``reduce`` ("sum", "mean" or "max") of ``expr`` over the last ``n_axes`` axes of the
    inputs' broadcast shape, in one pass: the elementwise values are never stored. Returns the
    reduced array (the leading axes' shape; the caller adds kept dims), or None when the
    inputs do not broadcast over the trailing axes in one pattern (then the caller reduces
    the materialised values itself). ``out_dtype`` defaults to the expression's dtype; a
    float16/bfloat16 one is narrowed on store, as :func:`apply_many` does.
    """
    if reduce not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduce!r}")
    arrays = kernel_inputs(inputs)
    shapes = [a.shape for a in arrays]
    rank = max(len(s) for s in shapes)
    if not 0 < n_axes <= rank:
        return None
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    split = rank - n_axes
    try:
        lead_out, lead_sizes, lead_masks = broadcast_layout([p[:split] for p in padded])
        tail_out, tail_sizes, tail_masks = broadcast_layout([p[split:] for p in padded])
    except ValueError:
        return None
    if len(tail_sizes) != 1 or math.prod(tail_out) == 0:
        return None  # several broadcast patterns over the reduced axes, or nothing to reduce
    sizes = tuple(lead_sizes) + tuple(tail_sizes)
    masks = tuple(tuple(lm) + tuple(tm) for lm, tm in zip(lead_masks, tail_masks))
    dt = np.dtype(out_dtype) if out_dtype is not None else expr.dtype
    loads = tuple(_NARROW_KIND.get(a.dtype, "") for a in arrays)
    stores = (_NARROW_KIND[dt],) if dt in _NARROW_KIND and expr.dtype in (F32, F64) else ("",)
    if not stores[0] and dt != expr.dtype:
        return None
    entry = _reduce_entry((expr,), masks, loads, stores, reduce)
    y = np.empty(lead_out, dtype=dt)
    if y.size == 0:
        return y
    flat_in = [_flat_bits(a) for a in arrays]
    args = [_flat_bits(y), *flat_in, *sizes]
    if (
        len(sizes) > 1
        and y.size > 1
        and y.size * sizes[-1] * entry.weight > _jit.PARALLEL_THRESHOLD
    ):
        run_parallel(entry.module.kernel_par, *args)
    else:
        entry.module.kernel(*args)
    return y


def _reduce_entry(exprs, masks, loads, stores, reduce) -> _Entry:
    key = (exprs, masks, loads, stores, reduce)
    entry = _KERNELS.get(key)
    if entry is None:
        src = generate_source(exprs, masks, loads, stores, reduce)
        mod = modcache.load(src)
        entry = _Entry(mod, input_dtypes(exprs), str(modcache.path_for(src)), work_weight(exprs))
        _KERNELS[key] = entry
    return entry


# ---------------------------------------------------------------------------------------------
# GPU target: the same expressions as one grid-stride CUDA kernel
# ---------------------------------------------------------------------------------------------

# Device forms of the helper families whose kernels/scalar.py helper cannot serve the GPU:
# vecmath's branch-free polynomials (written for SIMD lanes, where a libm call stops
# vectorisation; on the GPU libdevice's expf & co. are the fast path, and the polynomials call
# further Numba functions that NVVM only compiles with a driver present) and the helpers built
# on np.floor / np.fmod, which the CUDA target lacks. family -> (parameters, body); ``T(`` in a
# body is the float type's constructor, and the ``_name`` functions come from the generated
# module's preamble (_CUDA_PRELUDE): math's on the device (typed float there), numpy's under
# the simulator, which runs the kernel as Python, where math.log(0) raises instead of giving
# -inf. The semantics are those of the CPU helpers (NaN propagation, signs, ties to even).
_CUDA_FORMS: dict[str, tuple[str, str]] = {
    "exp": ("x", "return _exp(x)"),
    "log": ("x", "return _log(x)"),
    "log1p": ("x", "return _log1p(x)"),
    "tanh": ("x", "return _tanh(x)"),
    "erf": ("x", "return _erf(x)"),
    "floor": ("x", "return _floor(x)"),
    "ceil": ("x", "return _ceil(x)"),
    "fmod": ("a, b", "return _fmod(a, b)"),
    "sigmoid": (
        "x",
        "e = _exp(-abs(x))\nreturn T(1.0) / (T(1.0) + e) if x >= T(0.0) else e / (T(1.0) + e)",
    ),
    "gelu": ("x", "return T(0.5) * x * (T(1.0) + _erf(x * T(0.7071067811865476)))"),
    "gelu_tanh": (
        "x",
        "u = T(0.7978845608028654) * (x + T(0.044715) * x * x * x)\n"
        "return T(0.5) * x * (T(1.0) + _tanh(u))",
    ),
    "softplus": ("x", "m = x if x > T(0.0) else T(0.0)\nreturn m + _log1p(_exp(-abs(x)))"),
    "mish": (
        "x",
        "m = x if x > T(0.0) else T(0.0)\nreturn x * _tanh(m + _log1p(_exp(-abs(x))))",
    ),
    "elu": ("x, alpha", "return alpha * _expm1(x) if x < T(0.0) else x"),
    "selu": (
        "x, alpha, gamma",
        "return gamma * (alpha * _expm1(x)) if x <= T(0.0) else gamma * x",
    ),
    "celu": ("x, alpha", "return alpha * _expm1(x / alpha) if x < T(0.0) else x"),
    "mod": (
        "a, b",
        "r = _fmod(a, b)\n"
        "if r != T(0.0):\n"
        "    if (r < T(0.0)) != (b < T(0.0)):\n"
        "        r = r + b\n"
        "else:\n"
        "    r = _copysign(T(0.0), b)\n"
        "return r",
    ),
    "round": (
        "x",
        "r = _floor(x)\n"
        "d = x - r\n"
        "if d > T(0.5):\n"
        "    r = r + T(1.0)\n"
        "elif d == T(0.5) and _floor(r * T(0.5)) != r * T(0.5):\n"
        "    r = r + T(1.0)\n"
        "return _copysign(r, x)",
    ),
}

# The math functions the device forms call, and how the generated module binds them.
_CUDA_MATH = ("exp", "log", "log1p", "tanh", "expm1", "floor", "ceil", "fmod", "copysign")
_CUDA_PRELUDE = f"""
if config.ENABLE_CUDASIM:
    # the simulator runs kernels as Python: numpy's functions keep the float type and give
    # inf/NaN where math's raise
    {", ".join("_" + f for f in _CUDA_MATH)} = (
        {", ".join("np." + f for f in _CUDA_MATH)}
    )
    _erf = math.erf

    def device(fn):
        return fn

else:
    {", ".join("_" + f for f in _CUDA_MATH)} = (
        {", ".join("math." + f for f in _CUDA_MATH)}
    )
    _erf = math.erf
    # inlined into the kernel before typing: a device function of its own would need a
    # driver to compile (numba-cuda asks the current device for its compute capability)
    device = njit(inline="always")
"""


class _CudaEmitter(_Emitter):
    """Builds the CUDA kernel module for one specialisation (no bfloat16, no reduction).

    ``kernel(y0.., x0.., n0..)`` walks the output's flat index ``t`` with a grid-stride loop;
    the collapsed dims' indices are taken from ``t`` only where some input is broadcast in
    part of them, and each input's offset is the row-major (Horner) index over the dims it is
    present in (``t`` itself for an input of the full shape, 0 for one broadcast everywhere).
    Constants, loads of inputs broadcast everywhere and the nodes depending only on them are
    computed once per thread, before the loop. Operators render as the CPU emitter renders
    them; helper calls resolve to the device forms of _CUDA_FORMS where there is one.

    float16 (``loads[k]`` / ``stores[j]`` of ``"f16"``) is the device's own type: elements are
    widened with ``np.float32`` on load and narrowed with ``np.float16`` on store, which the
    GPU does in one conversion instruction rounding to nearest even, as the CPU's bit-level
    helpers do.
    """

    def __init__(
        self,
        exprs: tuple[Expr, ...],
        masks: tuple[tuple[bool, ...], ...],
        loads: tuple[str, ...] = (),
        stores: tuple[str, ...] = (),
    ):
        if "bf16" in loads or "bf16" in stores:
            raise ValueError("the CUDA kernel takes no bfloat16 (numba has no such type)")
        super().__init__(exprs, masks, loads, stores)
        self.forms: dict[str, str] = {}

    def _helper_for(self, family: str, dtype: np.dtype) -> str:
        dtype = np.dtype(dtype)
        if dtype.kind != "f" or family not in _CUDA_FORMS:
            return super()._helper_for(family, dtype)
        name = f"{family}_f{dtype.itemsize * 8}_gpu"
        if name not in self.forms:
            params, body = _CUDA_FORMS[family]
            text = body.replace("T(", f"np.{dtype.name}(")
            indented = "\n".join("    " + line for line in text.splitlines())
            self.forms[name] = f"@device\ndef {name}({params}):\n{indented}\n"
        return name

    def kernel(self) -> ast.FunctionDef:
        r = self.rank
        t = _name("t")
        pre: list[ast.stmt] = []
        body: list[ast.stmt] = []
        level: dict[Expr, int] = {}
        names: dict[Expr, str] = {}
        partial = [k for k in range(self.n_in) if 0 < len(self._present(k)) < r]
        if partial:
            # dim indices from the flat index, innermost first
            rem = "t"
            for d in range(r - 1, 0, -1):
                body.append(_assign(f"i{d}", ast.parse(f"{rem} % n{d}", mode="eval").body))
                body.append(_assign("rem", ast.parse(f"{rem} // n{d}", mode="eval").body))
                rem = "rem"
            body.append(_assign("i0", _name(rem)))
        for k in range(self.n_in):
            present = self._present(k)
            if not present:
                idx: ast.expr = ast.Constant(0)
            elif len(present) == r:
                idx = t
            else:
                idx = _name(f"i{present[0]}")
                for d in present[1:]:
                    idx = ast.BinOp(
                        left=ast.BinOp(left=idx, op=ast.Mult(), right=_name(f"n{d}")),
                        op=ast.Add(),
                        right=_name(f"i{d}"),
                    )
            load = ast.Subscript(value=_name(f"x{k}"), slice=idx, ctx=ast.Load())
            if self.loads[k]:
                load = _np_call("float32", load)
            (body if present else pre).append(_assign(f"v{k}", load))
        n_tmp = n_const = 0
        for node in walk(self.exprs):
            if isinstance(node, Input):
                level[node] = 1 if self._present(node.index) else 0
                names[node] = f"v{node.index}"
                continue
            if isinstance(node, Const):
                names[node] = f"c{n_const}"
                n_const += 1
                pre.append(_assign(names[node], _literal(node)))
                level[node] = 0
                continue
            assert isinstance(node, Op)
            lvl = max((level[a] for a in node.args), default=0)
            names[node] = f"t{n_tmp}"
            n_tmp += 1
            value = self._render(node, [names[a] for a in node.args])
            (body if lvl else pre).append(_assign(names[node], value))
            level[node] = lvl
        for j, e in enumerate(self.exprs):
            target = ast.Subscript(value=_name(f"y{j}"), slice=t, ctx=ast.Store())
            value: ast.expr = _name(names[e])
            if self.stores[j]:
                value = _np_call("float16", value)
            body.append(ast.Assign(targets=[target], value=value, lineno=0))
        total: ast.expr = ast.Constant(1)
        for d in range(r):
            total = _name("n0") if d == 0 else ast.BinOp(total, ast.Mult(), _name(f"n{d}"))
        grid = ast.parse("range(cuda.grid(1), total, cuda.gridsize(1))", mode="eval").body
        loop = ast.For(target=_name("t", True), iter=grid, body=body, orelse=[], lineno=0)
        params = (
            [f"y{j}" for j in range(len(self.exprs))]
            + [f"x{k}" for k in range(self.n_in)]
            + [f"n{d}" for d in range(r)]
        )
        return ast.FunctionDef(
            name="kernel",
            args=ast.arguments(
                posonlyargs=[],
                args=[ast.arg(arg=p) for p in params],
                kwonlyargs=[],
                kw_defaults=[],
                defaults=[],
            ),
            body=[_assign("total", total), *pre, loop],
            decorator_list=[ast.parse("cuda.jit", mode="eval").body],
            returns=None,
            lineno=0,
            **_TYPE_PARAMS,
        )

    def module(self) -> str:
        fn = self.kernel()  # first: it records the helpers and forms to define
        imports = "import math\n\nimport numpy as np\nfrom numba import config, cuda, njit\n"
        if self.helpers:
            imports += f"from onnxjit.kernels.scalar import {', '.join(sorted(self.helpers))}\n"
        mod = ast.Module(body=[fn], type_ignores=[])
        ast.fix_missing_locations(mod)
        header = (
            f'"""onnxjit generated CUDA elementwise kernel (scalar helpers {_SCALAR_HASH}).\n\n'
            f"rank {self.rank}, broadcast masks {self.masks}\n"
            + "\n".join(f"y{j} = {e!r}" for j, e in enumerate(self.exprs))
            + '\n"""\n'
        )
        forms = "\n\n".join(self.forms[n] for n in sorted(self.forms))
        return f"{header}{imports}{_CUDA_PRELUDE}\n\n{forms}\n\n{ast.unparse(mod)}\n"


def generate_cuda_source(
    exprs: Sequence[Expr],
    masks: Sequence[Sequence[bool]],
    loads: Sequence[str] = (),
    stores: Sequence[str] = (),
) -> str:
    """Source of the CUDA kernel module for ``exprs`` with per-input broadcast ``masks`` and
    float16 ``loads`` / ``stores`` (as :func:`generate_source`; no bfloat16). Its
    ``kernel(y0.., x0.., n0..)`` is a ``@cuda.jit`` grid-stride kernel over the flat output:
    launch it with any grid."""
    m = tuple(tuple(bool(b) for b in mk) for mk in masks)
    return _CudaEmitter(tuple(exprs), m, tuple(loads), tuple(stores)).module()


# (exprs, masks) -> (the CUDA kernel, its source file); the kernel is a numba-cuda dispatcher,
# compiled once per argument types, at its first launch.
_CUDA_KERNELS: dict[tuple, tuple[Any, str]] = {}


def _cuda_entry(exprs: Sequence[Expr], plan: _Plan, in_dtypes: Sequence[Any]) -> tuple[Any, str]:
    if plan.masks is None:
        raise ValueError("the CUDA kernel needs a sized plan")
    loads, stores = narrow_kinds(exprs, plan, in_dtypes)
    key = (tuple(exprs), plan.masks, loads, stores)
    entry = _CUDA_KERNELS.get(key)
    if entry is None:
        src = generate_cuda_source(exprs, plan.masks, loads, stores)
        entry = (modcache.load(src).kernel, str(modcache.path_for(src)))
        _CUDA_KERNELS[key] = entry
    return entry


def narrow_kinds(
    exprs: Sequence[Expr], plan: _Plan, in_dtypes: Sequence[Any]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The narrow storage (``"f16"``, ``"bf16"`` or ``""``) of each input, of dtype
    ``in_dtypes[k]``, and of each output of ``plan`` computing ``exprs``."""
    loads = tuple(_NARROW_KIND.get(np.dtype(dt), "") for dt in in_dtypes)
    stores = tuple(
        _NARROW_KIND.get(a, "") if a != e.dtype else "" for e, a in zip(exprs, plan.alloc)
    )
    return loads, stores


def cuda_kernel(exprs: Sequence[Expr], plan: _Plan, in_dtypes: Sequence[Any]) -> Any:
    """The ``@cuda.jit`` kernel computing ``exprs`` for ``plan`` (:func:`plan_for` of the same
    expressions) over inputs of ``in_dtypes`` (float16 read and written as such; no
    bfloat16): called as ``kernel[grid, block, stream](*outs_flat, *inputs_flat,
    *plan.sizes)``. Generated modules are imported from a file named by their source's hash
    (:mod:`onnxjit.codegen.modcache`), so one source is loaded, and each of its signatures
    compiled, once per process."""
    return _cuda_entry(exprs, plan, in_dtypes)[0]


def cuda_source_path(exprs: Sequence[Expr], plan: _Plan, in_dtypes: Sequence[Any]) -> str:
    """The file holding the source of :func:`cuda_kernel`'s module for these arguments."""
    return _cuda_entry(exprs, plan, in_dtypes)[1]
