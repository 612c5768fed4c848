"""Convolution patterns: zero Pad and BatchNormalization / constant Mul/Add folded into Conv;
Conv + residual + activation fused into ``FusedConv``.

:func:`fold_pad_into_conv` (level 2, ``pad_conv_folding``): ``Pad`` (constant mode, value 0,
non-negative pads on the spatial axes only, no ``axes`` input) whose only reader is a Conv's
input X with explicit pads (``auto_pad`` NOTSET) becomes part of that Conv: its pads are added
to the Conv's. TensorFlow's "same" padding is exported this way (transformers' MobileNetV1/V2
pad before every strided or 3x3 convolution, EfficientNet before its stride-2 depthwise ones),
and the padded copy is a pass over the whole tensor that the convolution's own padding avoids.

:func:`fold_conv_batchnorm` (level 2, ``conv_bn_folding``):

* ``Conv -> BatchNormalization`` (inference form: one output, constant scale/B/mean/var, no
  training mode, per-channel statistics) becomes one Conv with weights ``W * a`` and bias
  ``(B_conv - mean) * a + B_bn`` where ``a = scale / sqrt(var + eps)``, computed in float64 and
  stored in the weight's dtype;
* ``Conv -> Mul(c)`` and ``Conv -> Add(c)`` with a constant ``c`` that is a scalar or one value
  per output channel (shape broadcasting to (1, M, 1, ...) without raising the rank) fold into
  the weights / bias the same way.

The Conv must have constant W (and B when present) and be the only reader of its output; the
folded node keeps Conv's attributes and output name, and lists the folded nodes as members.

:func:`fuse_conv_activation` (level 2, ``conv_activation_fusion``): ``Conv`` (+ ``Add(other)``,
the residual of ResNet blocks) + activation (Relu, Clip/Relu6, LeakyRelu, Sigmoid, Tanh,
HardSigmoid, HardSwish, SiLU) -> ``FusedConv``, whose epilogue adds bias, residual and
activation in one pass over the GEMM output. A Conv followed by an Add but no activation fuses
the Add alone.
"""

from __future__ import annotations

import numpy as np

from onnxjit import ir
from onnxjit.passes.patterns_gemm import is_float_dtype, match_activation, match_residual
from onnxjit.passes.rewrite import GraphIndex, fused_node, is_op, onnx_node

CONV_ACTIVATIONS = frozenset(
    {"Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Silu"}
)


def _conv_consts(idx: GraphIndex, conv: ir.Node) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(W, B) of a float Conv with constant W and constant-or-absent B, else None."""
    if not is_op(conv, "Conv") or len(conv.inputs) < 2:
        return None
    w = idx.const(conv.inputs[1])
    if w is None or w.ndim < 3 or not is_float_dtype(w.dtype):
        return None
    b = None
    if len(conv.inputs) > 2 and conv.inputs[2]:
        b = idx.const(conv.inputs[2])
        if b is None or b.shape != (w.shape[0],) or b.dtype != w.dtype:
            return None
    return w, b


def _channel_vector(c: np.ndarray, m: int, rank: int) -> np.ndarray | None:
    """``c`` as an (m,) float64 vector when it broadcasts against (N, m, *spatial) of ``rank``
    only along the channel axis without raising the rank; else None."""
    if c.ndim > rank:
        return None
    shape = (1,) * (rank - c.ndim) + c.shape
    if any(s != 1 for i, s in enumerate(shape) if i != 1) or shape[1] not in (1, m):
        return None
    return np.broadcast_to(c.reshape(-1).astype(np.float64), (m,)).copy()


def _bn_scale_shift(idx: GraphIndex, bn: ir.Node, m: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(a, shift) of an inference-form BatchNormalization over m channels: y = x * a + shift."""
    if not is_op(bn, "BatchNormalization") or len(bn.inputs) != 5:
        return None
    if any(o for o in bn.outputs[1:]):
        return None
    v = bn.since_version or 0
    if v >= 14 and int(bn.attrs.get("training_mode", 0)):
        return None
    if v < 9:
        # BatchNormalization-1/6/7 (spatial attribute, opset-7 test disagreement with
        # onnxruntime not yet explained): left unfolded.
        return None
    consts = [idx.const(name) for name in bn.inputs[1:]]
    if any(c is None or c.size != m or not is_float_dtype(c.dtype) for c in consts):
        return None
    scale, bias, mean, var = (c.reshape(m).astype(np.float64) for c in consts)
    eps = float(bn.attrs.get("epsilon", 1e-5))
    a = scale / np.sqrt(var + eps)
    return a, bias - mean * a


def _zero_spatial_pads(idx: GraphIndex, pad: ir.Node, rank: int) -> list[int] | None:
    """The spatial pads (begins, then ends) of a zero constant-mode Pad of a rank-``rank``
    tensor that leaves the batch and channel axes alone, else None."""
    if (pad.attrs.get("mode") or "constant") not in ("constant", b"constant"):
        return None
    if (pad.since_version or 1) < 11:
        pads, value = pad.attrs.get("pads"), float(pad.attrs.get("value", 0.0))
    else:
        if len(pad.inputs) < 2 or (len(pad.inputs) > 3 and pad.inputs[3]):
            return None
        p = idx.const(pad.inputs[1])
        pads = None if p is None else p.reshape(-1).tolist()
        value = 0.0
        if len(pad.inputs) > 2 and pad.inputs[2]:
            v = idx.scalar(pad.inputs[2])
            if v is None:
                return None
            value = v
    if pads is None or len(pads) != 2 * rank or value != 0.0:
        return None
    pads = [int(v) for v in pads]
    if min(pads) < 0 or any(pads[i] or pads[rank + i] for i in (0, 1)):
        return None
    return pads[2:rank] + pads[rank + 2 :]


def fold_pad_into_conv(graph: ir.Graph) -> int:
    """Fold zero constant-mode Pad nodes into the Conv reading them; return the count."""
    idx = GraphIndex(graph)
    count = 0
    for conv in list(graph.nodes):
        if not is_op(conv, "Conv") or len(conv.inputs) < 2 or not conv.inputs[0]:
            continue
        if (conv.attrs.get("auto_pad") or "NOTSET") not in ("NOTSET", b"NOTSET"):
            continue
        pad = idx.producer_of(conv.inputs[0])
        if not is_op(pad, "Pad") or idx.only_user(conv.inputs[0]) is not conv:
            continue
        w = idx.const(conv.inputs[1])
        if w is None:
            continue
        nsp = w.ndim - 2
        extra = _zero_spatial_pads(idx, pad, w.ndim)
        if extra is None:
            continue
        own = [int(v) for v in conv.attrs.get("pads") or [0] * (2 * nsp)]
        attrs = dict(conv.attrs)
        attrs["pads"] = [a + b for a, b in zip(own, extra)]
        attrs.pop("auto_pad", None)
        new = onnx_node(
            "Conv",
            conv.since_version or 11,
            [pad.inputs[0], *conv.inputs[1:]],
            list(conv.outputs),
            attrs=attrs,
            members=[pad, conv],
            name=conv.name,
        )
        idx.replace([pad, conv], [new])
        count += 1
    return count


def fold_conv_batchnorm(graph: ir.Graph) -> int:
    """Fold BatchNormalization and per-channel constant Mul/Add after Conv into its weights."""
    idx = GraphIndex(graph)
    count = 0
    for conv in list(graph.nodes):
        if not is_op(conv, "Conv"):
            continue
        consts = _conv_consts(idx, conv)
        if consts is None:
            continue
        w0, b0 = consts
        m = w0.shape[0]
        rank = w0.ndim
        w = w0.astype(np.float64)
        b = np.zeros(m) if b0 is None else b0.astype(np.float64)
        members = [conv]
        cur = conv.outputs[0]
        while True:
            u = idx.only_user(cur)
            if u is None:
                break
            if is_op(u, "BatchNormalization") and u.inputs[0] == cur:
                sb = _bn_scale_shift(idx, u, m)
                if sb is None:
                    break
                a, shift = sb
                w = w * a.reshape(m, *([1] * (rank - 1)))
                b = b * a + shift
            elif is_op(u, "Mul", "Add") and (u.since_version or 0) >= 7 and len(u.inputs) == 2:
                other = u.inputs[1] if u.inputs[0] == cur else u.inputs[0]
                c = idx.const(other)
                if other == cur or c is None or c.dtype != w0.dtype:
                    break
                vec = _channel_vector(c, m, rank)
                if vec is None:
                    break
                if u.op_type == "Mul":
                    w = w * vec.reshape(m, *([1] * (rank - 1)))
                    b = b * vec
                else:
                    b = b + vec
            else:
                break
            members.append(u)
            cur = u.outputs[0]
        if len(members) == 1:
            continue
        inputs = [
            conv.inputs[0],
            idx.add_initializer("folded_w", w.astype(w0.dtype)),
            idx.add_initializer("folded_b", b.astype(w0.dtype)),
        ]
        new = onnx_node(
            "Conv",
            conv.since_version or 11,
            inputs,
            [cur],
            attrs=dict(conv.attrs),
            members=members,
            name=conv.name,
        )
        idx.replace(members, [new])
        count += 1
    return count


def fuse_conv_activation(graph: ir.Graph) -> int:
    """Rewrite Conv (+ residual Add) (+ activation) into FusedConv; return the count."""
    idx = GraphIndex(graph)
    count = 0
    # Members are the Conv and nodes after it, never another Conv: each Conv is seen once.
    for conv in list(graph.nodes):
        if not is_op(conv, "Conv") or len(conv.inputs) < 2:
            continue
        w = idx.const(conv.inputs[1])
        if w is None or not is_float_dtype(w.dtype):
            continue
        members = [conv]
        cur = conv.outputs[0]
        residual = ""
        found = match_residual(idx, cur)
        if found is not None:
            add, residual = found
            members.append(add)
            cur = add.outputs[0]
        act = match_activation(idx, cur, CONV_ACTIVATIONS)
        if act is not None:
            members.extend(act.members)
            cur = act.output
        if len(members) == 1:
            continue
        b = conv.inputs[2] if len(conv.inputs) > 2 else ""
        inputs = [conv.inputs[0], conv.inputs[1], b]
        if residual:
            inputs.append(residual)
        attrs = dict(conv.attrs)
        if act is not None:
            attrs["activation"] = act.name
            if act.params:
                attrs["activation_params"] = list(act.params)
        fused = fused_node("FusedConv", inputs, [cur], attrs=attrs, members=members)
        idx.replace(members, [fused])
        count += 1
    return count
