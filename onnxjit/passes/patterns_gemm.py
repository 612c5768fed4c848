"""GEMM epilogue fusion: MatMul/Gemm + bias Add + activation -> one ``FusedGemm`` node.

Matched (float32, float64, float16, bfloat16 weights):

* ``MatMul(A, W)`` with a constant 2-D ``W`` (A of any rank >= 1: its leading dims become the
  GEMM's rows), or ``Gemm(A, B, C)`` with a constant ``B`` and ``C`` absent or a constant that
  broadcasts along the last axis (size 1 or N, at most one non-1 dim, the last);
* then optionally ``Add(y, c)`` / ``Add(c, y)`` with a constant ``c`` of N values (or one)
  varying only along the last axis, for MatMul or a Gemm without C;
* then optionally ``Add(y, r)`` / ``Add(r, y)`` with a computed ``r`` (a residual
  connection, added in the epilogue where it has the product's shape);
* then optionally one activation (see :func:`match_activation`); without a residual, also
  one that follows a Reshape of the product (it commutes with it: the Reshape is kept after
  the fused node).

The weight is stored pre-arranged (C-contiguous (K, N), compute dtype) and Gemm's beta is
applied to the bias once, at rewrite time. Nothing fuses when an intermediate value is used by
another node or is a graph output, or when a constant does not have the expected shape/dtype.
A lone MatMul with a constant weight becomes a FusedGemm too: its weight is then rearranged
once for the GEMM micro-kernel (kernels/cpu/ukernel.py) instead of at every run.

:func:`fuse_qdq_matmul` (before constant folding, which would turn the weight's
DequantizeLinear into a float32 copy): ``MatMul(DequantizeLinear(xq), DequantizeLinear(wq))``
of 8-bit data, per-tensor scale and zero point on the activation and a constant weight
quantized per tensor or per column -> ``MatMulInteger(xq, wq, zx, zw)``, ``Cast`` to float32
and ``Mul`` by ``sx * sw``: the exact integer product on the micro-kernel's int16-pair mode,
its scaling an elementwise pass that fuses with what follows (the static QDQ form of a
quantized model, as onnxruntime's QDQ fusions compute it).

:func:`match_activation` and :func:`match_residual` are shared with
:mod:`onnxjit.passes.patterns_conv`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from onnxjit import ir
from onnxjit.passes.rewrite import GraphIndex, fresh_name, fused_node, is_op, onnx_node

_FLOAT_KINDS = "fV"
# Clip's defaults before opset 11 (float32 extremes).
_FLT_MAX = float(np.finfo(np.float32).max)


@dataclass
class Activation:
    """A matched activation: the nodes it spans, its output, name/params, and a bias it adds."""

    members: list[ir.Node]
    output: str
    name: str
    params: list[float] = field(default_factory=list)
    # A constant the activation node adds first (onnxjit Gelu's optional bias input).
    bias: np.ndarray | None = None


def is_float_dtype(dtype: np.dtype) -> bool:
    """float16/32/64 and bfloat16 (ml_dtypes' bfloat16 has kind 'V'); not float8 or ints."""
    return dtype.kind == "f" or (dtype.kind == "V" and dtype.itemsize == 2)


def _attr(node: ir.Node, name: str, default):
    return node.attrs.get(name, default)


def match_activation(idx: GraphIndex, value: str, allowed: frozenset[str]) -> Activation | None:
    """The activation applied to ``value`` when ``value`` has a single consumer that is one.

    Recognised: Relu, LeakyRelu, Sigmoid, Tanh, Clip (constant bounds; Relu6), HardSigmoid,
    HardSwish, Gelu (onnx Gelu-20 and the internal onnxjit Gelu with an optional constant bias
    input), and SiLU written as ``Mul(x, Sigmoid(x))`` in either operand order. Only names in
    ``allowed`` are returned.
    """
    users = idx.users(value)
    if value in idx.outputs:
        return None
    if len(users) == 2 and "Silu" in allowed:
        sig = next((u for u in users if is_op(u, "Sigmoid")), None)
        mul = next((u for u in users if is_op(u, "Mul")), None)
        if (
            sig is not None
            and mul is not None
            and sig.inputs[0] == value
            and sorted(mul.inputs) == sorted([value, sig.outputs[0]])
            and idx.only_user(sig.outputs[0]) is mul
            and (mul.since_version or 0) >= 7
        ):
            return Activation([sig, mul], mul.outputs[0], "Silu")
        return None
    if len(users) != 1:
        return None
    u = users[0]
    if not u.inputs or u.inputs[0] != value or len([o for o in u.outputs if o]) != 1:
        return None
    act: Activation | None = None
    out = u.outputs[0]
    if u.domain == "onnxjit" and u.op_type == "Gelu":
        approx = _attr(u, "approximate", "none")
        bias = None
        if len(u.inputs) > 1 and u.inputs[1]:
            bias = idx.const(u.inputs[1])
            if bias is None:
                return None
        if approx in ("none", "tanh") and len(u.inputs) <= 2:
            act = Activation([u], out, "Gelu" if approx == "none" else "GeluTanh", bias=bias)
    elif is_op(u, "Gelu"):
        approx = _attr(u, "approximate", "none")
        if approx in ("none", "tanh"):
            act = Activation([u], out, "Gelu" if approx == "none" else "GeluTanh")
    elif is_op(u, "Relu", "Sigmoid", "Tanh"):
        act = Activation([u], out, u.op_type)
    elif is_op(u, "LeakyRelu"):
        act = Activation([u], out, "LeakyRelu", [float(_attr(u, "alpha", 0.01))])
    elif is_op(u, "HardSigmoid"):
        act = Activation(
            [u], out, "HardSigmoid", [float(_attr(u, "alpha", 0.2)), float(_attr(u, "beta", 0.5))]
        )
    elif is_op(u, "HardSwish"):
        act = Activation([u], out, "HardSwish")
    elif is_op(u, "Clip"):
        if (u.since_version or 0) < 11:
            lo = float(_attr(u, "min", -_FLT_MAX))
            hi = float(_attr(u, "max", _FLT_MAX))
        else:
            bounds = []
            for i, default in ((1, -np.inf), (2, np.inf)):
                if len(u.inputs) > i and u.inputs[i]:
                    c = idx.const(u.inputs[i])
                    if c is None or c.size != 1:
                        return None
                    bounds.append(float(c.reshape(())))
                else:
                    bounds.append(default)
            lo, hi = bounds
        if np.isnan(lo) or np.isnan(hi) or lo > hi:
            return None
        act = Activation([u], out, "Clip", [lo, hi])
    if act is None or act.name not in allowed:
        return None
    return act


def match_residual(idx: GraphIndex, value: str) -> tuple[ir.Node, str] | None:
    """``(add, addend)`` when the only reader of ``value`` is an Add of ``value`` and a
    computed value ``addend`` (not a constant, not ``value`` itself): a residual connection
    an epilogue can take in."""
    u = idx.only_user(value)
    if not is_op(u, "Add") or (u.since_version or 0) < 7 or len(u.inputs) != 2:
        return None
    other = u.inputs[1] if u.inputs[0] == value else u.inputs[0]
    if not other or other == value or idx.const(other) is not None:
        return None
    return u, other


GEMM_ACTIVATIONS = frozenset(
    {
        "Relu",
        "LeakyRelu",
        "Sigmoid",
        "Tanh",
        "Clip",
        "Gelu",
        "GeluTanh",
        "HardSigmoid",
        "Silu",
        "HardSwish",
    }
)


def _row_bias(c: np.ndarray, n: int) -> np.ndarray | None:
    """``c`` as an (n,) float64 vector when it broadcasts along the last axis only, else None."""
    if c.size == 1:
        return np.full(n, float(c.reshape(())), np.float64)
    if c.ndim == 0 or c.shape[-1] != n or c.size != n:
        return None
    return c.reshape(n).astype(np.float64)


def _match_gemm(idx: GraphIndex, node: ir.Node) -> dict | None:
    """The GEMM head of a pattern: weight (K, N) float64-free copy, bias, attrs; or None."""
    if is_op(node, "MatMul"):
        if len(node.inputs) != 2:
            return None
        w = idx.const(node.inputs[1])
        if w is None or w.ndim != 2 or not is_float_dtype(w.dtype):
            return None
        return {"w": w, "bias": None, "trans_a": 0, "alpha": 1.0, "gemm": False}
    if is_op(node, "Gemm") and (node.since_version or 0) >= 7:
        b = idx.const(node.inputs[1]) if len(node.inputs) > 1 else None
        if b is None or b.ndim != 2 or not is_float_dtype(b.dtype):
            return None
        w = b.T if _attr(node, "transB", 0) else b
        beta = float(_attr(node, "beta", 1.0))
        bias = None
        if len(node.inputs) > 2 and node.inputs[2] and beta != 0.0:
            c = idx.const(node.inputs[2])
            if c is None or c.ndim > 2 or c.dtype != b.dtype:
                return None
            bias = _row_bias(c, w.shape[1])
            if bias is None:
                return None
            bias = bias * beta
        return {
            "w": w,
            "bias": bias,
            "trans_a": int(_attr(node, "transA", 0)),
            "alpha": float(_attr(node, "alpha", 1.0)),
            "gemm": True,
        }
    return None


def fuse_gemm_epilogue(graph: ir.Graph) -> int:
    """Rewrite MatMul/Gemm (+ bias Add) (+ activation) chains into FusedGemm; return the count."""
    idx = GraphIndex(graph)
    done: set[int] = set()
    count = 0
    for node in list(graph.nodes):
        if id(node) in done:
            continue
        head = _match_gemm(idx, node)
        if head is None:
            continue
        w: np.ndarray = head["w"]
        n = w.shape[1]
        dtype = w.dtype
        members = [node]
        cur = node.outputs[0]
        bias: np.ndarray | None = head["bias"]
        out_rank = 0
        if bias is None:
            u = idx.only_user(cur)
            if is_op(u, "Add") and (u.since_version or 0) >= 7 and len(u.inputs) == 2:
                other = u.inputs[1] if u.inputs[0] == cur else u.inputs[0]
                c = idx.const(other)
                ok = other != cur and c is not None and c.dtype == dtype
                ok = ok and (not head["gemm"] or c.ndim <= 2)
                row = _row_bias(c, n) if ok else None
                if row is not None:
                    bias = row
                    out_rank = c.ndim
                    members.append(u)
                    cur = u.outputs[0]
        # a computed addend (a residual connection): added in the epilogue as well, before
        # any activation, as the epilogue computes act(y + bias + residual)
        residual = ""
        found = match_residual(idx, cur)
        if found is not None:
            add, residual = found
            members.append(add)
            cur = add.outputs[0]
        act = match_activation(idx, cur, GEMM_ACTIVATIONS)
        reshape: ir.Node | None = None
        if act is None and not residual:
            # An activation after a Reshape of the product (torch's addmm on 2-D rows, then
            # view, then the activation: GPT-2's MLP): a unary elementwise function commutes
            # with the Reshape, so the epilogue applies it and the Reshape follows.
            r = idx.only_user(cur)
            if is_op(r, "Reshape") and r.inputs[0] == cur:
                after = match_activation(idx, r.outputs[0], GEMM_ACTIVATIONS)
                if after is not None and after.bias is None:
                    act, reshape = after, r
        if act is not None and act.bias is not None:
            extra = _row_bias(act.bias, n) if act.bias.dtype == dtype else None
            if extra is None or act.bias.ndim > 1:
                act = None
            else:
                bias = extra if bias is None else bias + extra
        after_reshape: list[ir.Node] = []
        if act is not None:
            if reshape is not None:
                # the product, activated, under a new name; the Reshape then writes the
                # activation's output name
                pre = fresh_name(graph, cur)
                after_reshape.append(
                    onnx_node(
                        "Reshape",
                        reshape.since_version or 14,
                        [pre, *reshape.inputs[1:]],
                        [act.output],
                        attrs=reshape.attrs,
                        name=reshape.name,
                    )
                )
                members.append(reshape)
                cur = pre
            members.extend(act.members)
            if reshape is None:
                cur = act.output
        cd = np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)
        inputs = [node.inputs[0], idx.add_initializer("fused_gemm_w", np.ascontiguousarray(w, cd))]
        if bias is not None or residual:
            inputs.append(
                idx.add_initializer("fused_gemm_b", bias.astype(cd)) if bias is not None else ""
            )
        if residual:
            inputs.append(residual)
        attrs = {"trans_a": head["trans_a"], "alpha": head["alpha"]}
        if act is not None:
            attrs["activation"] = act.name
            if act.params:
                attrs["activation_params"] = list(act.params)
        if out_rank:
            attrs["out_rank"] = out_rank
        fused = fused_node("FusedGemm", inputs, [cur], attrs=attrs, members=members)
        idx.replace(members, [fused, *after_reshape])
        done.update(id(m) for m in members)
        count += 1
    return count


_INT8 = (np.dtype(np.uint8), np.dtype(np.int8))
_F32 = np.dtype(np.float32)


def _dequantized(idx: GraphIndex, name: str) -> ir.Node | None:
    """The DequantizeLinear producing ``name`` with a float32 output and constant float32
    scale and 8-bit zero point (no blocks), or None."""
    dq = idx.producer_of(name)
    if not is_op(dq, "DequantizeLinear") or len(dq.inputs) < 3 or not dq.inputs[2]:
        return None
    scale, zero = idx.const(dq.inputs[1]), idx.const(dq.inputs[2])
    if scale is None or zero is None or scale.dtype != _F32 or zero.dtype not in _INT8:
        return None
    if _attr(dq, "block_size", 0) or _attr(dq, "output_dtype", 0) not in (0, 1):
        return None
    return dq


def fuse_qdq_matmul(graph: ir.Graph) -> int:
    """Rewrite ``MatMul(DQ(xq), DQ(wq))`` into ``Mul(Cast(MatMulInteger(...)), sx * sw)``
    (see the module's docstring); return the count. The activation's DequantizeLinear is
    per tensor (one scale and zero point); the weight's is a constant 2-D 8-bit ``(K, N)``
    with one scale and zero point or one per column (axis 1). The weight's DequantizeLinear
    goes when the MatMul was its only reader; the activation's stays for its other readers
    (dead-node elimination removes it otherwise)."""
    idx = GraphIndex(graph)
    count = 0
    for node in list(graph.nodes):
        if not is_op(node, "MatMul") or len(node.inputs) != 2:
            continue
        dx, dw = _dequantized(idx, node.inputs[0]), _dequantized(idx, node.inputs[1])
        if dx is None or dw is None or dx is dw:
            continue
        sx, zx = idx.const(dx.inputs[1]), idx.const(dx.inputs[2])
        wq, sw, zw = (idx.const(x) for x in dw.inputs[:3])
        if sx.size != 1 or zx.size != 1 or wq is None or wq.ndim != 2 or wq.dtype != zw.dtype:
            continue
        n = wq.shape[1]
        if sw.size != 1:
            axis = _attr(dw, "axis", 1)
            if sw.shape != (n,) or zw.shape != (n,) or axis not in (1, -1):
                continue
        elif zw.size != 1:
            continue
        xq = dx.inputs[0]
        # an array (0-d arrays multiply into a numpy scalar, which is no tensor initializer)
        scale = np.asarray(sx.reshape(()) * sw.reshape(-1 if sw.size > 1 else ()), _F32)
        acc = fresh_name(graph, node.outputs[0] + "_int32")
        real = fresh_name(graph, node.outputs[0] + "_float")
        zx_name = idx.add_initializer("qdq_matmul_zx", zx.reshape(()))
        zw_name = idx.add_initializer(
            "qdq_matmul_zw", zw.reshape(-1) if zw.size > 1 else zw.reshape(())
        )
        new = [
            onnx_node(
                "MatMulInteger", 10, [xq, dw.inputs[0], zx_name, zw_name], [acc], name=node.name
            ),
            onnx_node("Cast", 13, [acc], [real], attrs={"to": 1}, name=node.name + "_cast"),
            onnx_node(
                "Mul",
                14,
                [real, idx.add_initializer("qdq_matmul_scale", scale)],
                node.outputs,
                name=node.name + "_scale",
            ),
        ]
        old = [node]
        if not idx.used_outside(dw.outputs[0], [node]):
            old.insert(0, dw)
        idx.replace(old, new)
        count += 1
    return count
