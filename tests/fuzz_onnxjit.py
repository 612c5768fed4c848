"""A bounded mutation fuzzer for onnxjit (issue 6, item 7); tests/test_fuzz.py runs it.

It takes a few valid small models (serialized bytes), mutates them (byte flips, truncations,
insertions, and field mutations through the protobuf: dims, element types, attribute values,
node inputs and outputs, op_type, domains, opset and IR versions, removed or duplicated nodes
and initializers) and feeds each model that loads random inputs (random sizes for free
dimensions, NaN/Inf, out-of-range integers, sometimes a wrong element type or rank). The only
allowed outcomes are success and an error of onnxjit's own hierarchy
(``onnxjit.errors.OnnxJitError``): anything else (a protobuf DecodeError, IndexError, KeyError,
a Numba error, a segfault, a hang) is a crash.

Every case is a pure function of ``(seed, index)``, so a crash found at index i reproduces with
``python tests/fuzz_onnxjit.py --seed S --start i --cases 1``.

Run as a script it prints one JSON line per crash (``{"crash": ...}``) and a last line with the
figures (``{"summary": ...}``); before each case it writes the case index to ``--progress`` (a
file), so that the caller can name the case that killed or hung the process. A case that runs
longer than ``--case-timeout`` seconds is dumped by faulthandler and ends the process.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, I64 = TensorProto.FLOAT, TensorProto.INT64


# -- the seed models ---------------------------------------------------------------------------


def _model(nodes, inputs, outputs, inits=(), opset=18, extra_opsets=()) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])
    m.ir_version = 9
    return m.SerializeToString()


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def seed_models() -> dict[str, bytes]:
    rng = np.random.default_rng(7)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    models = {}
    models["mlp"] = _model(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Add", ["m", "b"], ["a"]),
            helper.make_node("Relu", ["a"], ["r"]),
            helper.make_node("Softmax", ["r"], ["y"], axis=-1),
        ],
        [_vi("x", F, ["N", 4])],
        [_vi("y", F, ["N", 3])],
        [_init("w", f32(4, 3)), _init("b", f32(3))],
    )
    models["cnn"] = _model(
        [
            helper.make_node("Conv", ["x", "k", "kb"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("Flatten", ["p"], ["f"], axis=1),
            helper.make_node("Gemm", ["f", "g", "gb"], ["y"], transB=1),
        ],
        [_vi("x", F, ["N", 1, 6, 6])],
        [_vi("y", F, ["N", 2])],
        [
            _init("k", f32(2, 1, 3, 3)),
            _init("kb", f32(2)),
            _init("g", f32(2, 18)),
            _init("gb", f32(2)),
        ],
    )
    models["shapes"] = _model(
        [
            helper.make_node("Gather", ["x", "i"], ["g"], axis=0),
            helper.make_node("Transpose", ["g"], ["t"], perm=[1, 0]),
            helper.make_node("Reshape", ["t", "shape"], ["r"]),
            helper.make_node("Concat", ["r", "r"], ["c"], axis=0),
            helper.make_node("Slice", ["c", "st", "en", "ax"], ["y"]),
        ],
        [_vi("x", F, ["N", 3]), _vi("i", I64, ["K"])],
        [_vi("y", F, ["M"])],
        [
            _init("shape", np.array([-1], np.int64)),
            _init("st", np.array([1], np.int64)),
            _init("en", np.array([5], np.int64)),
            _init("ax", np.array([0], np.int64)),
        ],
    )
    models["chain"] = _model(
        [
            helper.make_node("Mul", ["x", "x"], ["a"]),
            helper.make_node("Add", ["a", "z"], ["b"]),
            helper.make_node("Tanh", ["b"], ["c"]),
            helper.make_node("Sigmoid", ["c"], ["d"]),
            helper.make_node("ReduceSum", ["d", "axes"], ["s"], keepdims=1),
            helper.make_node("Div", ["d", "s"], ["y"]),
        ],
        [_vi("x", F, ["N", "M"]), _vi("z", F, [1, "M"])],
        [_vi("y", F, ["N", "M"])],
        [_init("axes", np.array([1], np.int64))],
    )
    models["data_sized"] = _model(
        [
            helper.make_node(
                "ConstantOfShape", ["s"], ["c"], value=_init("v", np.array([2.0], np.float32))
            ),
            helper.make_node("Expand", ["c", "e"], ["x"]),
            helper.make_node("Tile", ["x", "reps"], ["t"]),
            helper.make_node("Range", ["r0", "n", "r1"], ["r"]),
            helper.make_node("Cast", ["r"], ["rf"], to=F),
            helper.make_node("ReduceSum", ["t"], ["y"], keepdims=0),
        ],
        [_vi("s", I64, [2]), _vi("e", I64, [2]), _vi("n", I64, [])],
        [_vi("y", F, []), _vi("rf", F, ["R"])],
        [
            _init("reps", np.array([2, 1], np.int64)),
            _init("r0", np.array(0, np.int64)),
            _init("r1", np.array(1, np.int64)),
        ],
    )
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc", "step"], ["acc2"]),
            helper.make_node("Identity", ["cond"], ["cond2"]),
            helper.make_node("Mul", ["acc2", "two"], ["scan"]),
        ],
        "body",
        [_vi("it", I64, []), _vi("cond", TensorProto.BOOL, []), _vi("acc", F, ["D"])],
        [_vi("cond2", TensorProto.BOOL, []), _vi("acc2", F, ["D"]), _vi("scan", F, ["D"])],
        initializer=[
            _init("two", np.array([2.0], np.float32)),
            _init("step", np.array([0.5], np.float32)),
        ],
    )
    models["loop_if"] = _model(
        [
            helper.make_node("Loop", ["trip", "c0", "x"], ["acc", "scans"], body=body),
            helper.make_node("ReduceSum", ["acc"], ["total"], keepdims=1),
            helper.make_node("Greater", ["total", "zero"], ["pos"]),
            helper.make_node("Squeeze", ["pos"], ["p"]),
            helper.make_node(
                "If",
                ["p"],
                ["y"],
                then_branch=helper.make_graph(
                    [helper.make_node("Neg", ["acc"], ["o"])], "then", [], [_vi("o", F, ["D"])]
                ),
                else_branch=helper.make_graph(
                    [helper.make_node("Abs", ["acc"], ["o2"])], "else", [], [_vi("o2", F, ["D"])]
                ),
            ),
        ],
        [_vi("trip", I64, []), _vi("c0", TensorProto.BOOL, []), _vi("x", F, ["D"])],
        [_vi("y", F, ["D"]), _vi("scans", F, ["T", "D"])],
        [_init("zero", np.array([0.0], np.float32))],
    )
    models["misc"] = _model(
        [
            helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["ln"], axis=-1),
            helper.make_node("TopK", ["ln", "k"], ["tv", "ti"], axis=-1),
            helper.make_node("Where", ["cond", "x", "ln"], ["w"]),
            helper.make_node("ArgMax", ["w"], ["am"], axis=1, keepdims=0),
            helper.make_node("OneHot", ["am", "depth", "ohv"], ["oh"]),
            helper.make_node("ScatterElements", ["w", "idx", "upd"], ["y"], axis=1),
        ],
        [
            _vi("x", F, ["N", 4]),
            _vi("cond", TensorProto.BOOL, ["N", 4]),
            _vi("idx", I64, ["N", 2]),
            _vi("upd", F, ["N", 2]),
        ],
        [
            _vi("y", F, ["N", 4]),
            _vi("tv", F, ["N", 2]),
            _vi("ti", I64, ["N", 2]),
            _vi("oh", F, ["N", 4]),
        ],
        [
            _init("gamma", f32(4)),
            _init("beta", f32(4)),
            _init("k", np.array([2], np.int64)),
            _init("depth", np.array(4, np.int64)),
            _init("ohv", np.array([0.0, 1.0], np.float32)),
        ],
    )
    return models


# -- mutations ---------------------------------------------------------------------------------

_OPS: list[str] | None = None


def _op_names() -> list[str]:
    global _OPS
    if _OPS is None:
        _OPS = sorted({s.name for s in onnx.defs.get_all_schemas_with_history()})
    return _OPS


INT64_EDGE = (
    0,
    1,
    -1,
    2,
    3,
    -2,
    7,
    255,
    1 << 31,
    -(1 << 31),
    1 << 40,
    (1 << 62),
    (1 << 63) - 1,
    -(1 << 63),
)
FLOAT_EDGE = (
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    1e30,
    -1e30,
    float("nan"),
    float("inf"),
    float("-inf"),
    1e-45,
)


def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def _rand_int(rng) -> int:
    return int(_pick(rng, INT64_EDGE)) if rng.random() < 0.5 else int(rng.integers(-4, 12))


def _all_graphs(g: onnx.GraphProto) -> list[onnx.GraphProto]:
    out = [g]
    for n in g.node:
        for a in n.attribute:
            if a.HasField("g"):
                out.extend(_all_graphs(a.g))
            for sub in a.graphs:
                out.extend(_all_graphs(sub))
    return out


def _value_infos(g: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    return [*g.input, *g.output, *g.value_info]


def _mutate_dims(m, rng) -> None:
    g = _pick(rng, _all_graphs(m.graph))
    vis = [v for v in _value_infos(g) if v.type.HasField("tensor_type")]
    if rng.random() < 0.4 and g.initializer:
        t = _pick(rng, g.initializer)
        if t.dims and rng.random() < 0.7:
            t.dims[int(rng.integers(len(t.dims)))] = _rand_int(rng)
        else:
            t.dims.append(_rand_int(rng))
        return
    if not vis:
        return
    v = _pick(rng, vis)
    shape = v.type.tensor_type.shape
    choice = rng.random()
    if choice < 0.15:
        v.type.tensor_type.ClearField("shape")
    elif choice < 0.3 or not shape.dim:
        shape.dim.add().dim_value = int(rng.integers(0, 5))
    elif choice < 0.4:
        del shape.dim[int(rng.integers(len(shape.dim)))]
    else:
        d = shape.dim[int(rng.integers(len(shape.dim)))]
        if rng.random() < 0.7:
            d.dim_value = _rand_int(rng)
        else:
            d.dim_param = _pick(rng, ("N", "M", "", "K", "x y", "\x00"))


def _mutate_dtype(m, rng) -> None:
    g = _pick(rng, _all_graphs(m.graph))
    elem = int(rng.integers(0, 27)) if rng.random() < 0.9 else int(rng.integers(27, 1000))
    targets = [v for v in _value_infos(g) if v.type.HasField("tensor_type")]
    if g.initializer and (rng.random() < 0.4 or not targets):
        _pick(rng, g.initializer).data_type = elem
    elif targets:
        _pick(rng, targets).type.tensor_type.elem_type = elem


def _mutate_attribute(m, rng) -> None:
    nodes = [n for g in _all_graphs(m.graph) for n in g.node if n.attribute]
    if not nodes:
        return
    n = _pick(rng, nodes)
    a = _pick(rng, n.attribute)
    r = rng.random()
    if r < 0.1:
        a.name = _pick(rng, ("axis", "perm", "to", "kernel_shape", "bogus", ""))
    elif r < 0.2:
        a.type = int(rng.integers(0, 15))
    elif a.type == onnx.AttributeProto.INT:
        a.i = _rand_int(rng)
    elif a.type == onnx.AttributeProto.FLOAT:
        a.f = float(_pick(rng, FLOAT_EDGE))
    elif a.type == onnx.AttributeProto.INTS:
        if a.ints and rng.random() < 0.6:
            a.ints[int(rng.integers(len(a.ints)))] = _rand_int(rng)
        elif rng.random() < 0.5 and a.ints:
            del a.ints[-1]
        else:
            a.ints.append(_rand_int(rng))
    elif a.type == onnx.AttributeProto.STRING:
        a.s = bytes(rng.integers(0, 256, int(rng.integers(0, 8)), dtype=np.uint8))
    elif a.type == onnx.AttributeProto.TENSOR:
        if rng.random() < 0.5:
            a.t.data_type = int(rng.integers(0, 27))
        else:
            a.t.dims.append(_rand_int(rng))
    elif a.type == onnx.AttributeProto.GRAPH:
        if a.g.node and rng.random() < 0.5:
            del a.g.node[int(rng.integers(len(a.g.node)))]
        elif a.g.output:
            del a.g.output[int(rng.integers(len(a.g.output)))]
    else:
        n.attribute.remove(a)


def _names(g: onnx.GraphProto) -> list[str]:
    out = [v.name for v in g.input] + [t.name for t in g.initializer]
    for n in g.node:
        out.extend(n.output)
    return out or ["x"]


def _mutate_wiring(m, rng) -> None:
    g = _pick(rng, _all_graphs(m.graph))
    if not g.node:
        return
    n = _pick(rng, g.node)
    r = rng.random()
    if r < 0.35 and n.input:
        n.input[int(rng.integers(len(n.input)))] = _pick(rng, [*_names(g), "", "missing", "y"])
    elif r < 0.5:
        n.input.append(_pick(rng, [*_names(g), ""]))
    elif r < 0.6 and n.input:
        del n.input[-1]
    elif r < 0.75 and n.output:
        n.output[int(rng.integers(len(n.output)))] = _pick(rng, [*_names(g), "", "fresh"])
    elif r < 0.85 and g.input:
        _pick(rng, g.input).name = _pick(rng, [*_names(g), "", "renamed"])
    elif g.output:
        _pick(rng, g.output).name = _pick(rng, [*_names(g), "", "renamed"])


def _mutate_op(m, rng) -> None:
    g = _pick(rng, _all_graphs(m.graph))
    if not g.node:
        return
    n = _pick(rng, g.node)
    r = rng.random()
    if r < 0.7:
        n.op_type = _pick(rng, _op_names())
    elif r < 0.8:
        n.op_type = _pick(rng, ("", "Foo", "relu", "Relu\x00", "If"))
    else:
        n.domain = _pick(
            rng, ("ai.onnx.ml", "com.microsoft", "onnxjit", "x.y", "ai.onnx.preview.training")
        )


def _mutate_versions(m, rng) -> None:
    r = rng.random()
    if r < 0.6 and m.opset_import:
        m.opset_import[int(rng.integers(len(m.opset_import)))].version = int(
            _pick(rng, (1, 6, 7, 9, 11, 13, 17, 21, 23, 25, 26, 27, 99, -1, 1 << 40))
        )
    elif r < 0.75:
        m.opset_import.add(
            domain=_pick(rng, ("", "ai.onnx.ml", "custom")), version=int(rng.integers(1, 30))
        )
    elif r < 0.85 and m.opset_import:
        del m.opset_import[0]
    else:
        m.ir_version = int(_pick(rng, (0, 1, 3, 4, 7, 9, 10, 11, 12, 99, -1)))


def _mutate_structure(m, rng) -> None:
    g = _pick(rng, _all_graphs(m.graph))
    r = rng.random()
    if r < 0.3 and g.node:
        del g.node[int(rng.integers(len(g.node)))]
    elif r < 0.5 and g.node:
        g.node.add().CopyFrom(_pick(rng, g.node))
    elif r < 0.65 and len(g.node) > 1:
        i, j = rng.choice(len(g.node), 2, replace=False)
        a, b = onnx.NodeProto(), onnx.NodeProto()
        a.CopyFrom(g.node[int(i)])
        b.CopyFrom(g.node[int(j)])
        g.node[int(i)].CopyFrom(b)
        g.node[int(j)].CopyFrom(a)
    elif r < 0.8 and g.initializer:
        del g.initializer[int(rng.integers(len(g.initializer)))]
    elif r < 0.9 and g.initializer:
        t = _pick(rng, g.initializer)
        if t.raw_data:
            cut = int(rng.integers(0, len(t.raw_data) + 1))
            t.raw_data = t.raw_data[:cut]
        else:
            t.float_data.append(1.0)
    else:
        g.output.add().CopyFrom(
            _pick(rng, [*g.output, *g.input]) if (g.output or g.input) else onnx.ValueInfoProto()
        )


PROTO_MUTATIONS: list[Callable] = [
    _mutate_dims,
    _mutate_dtype,
    _mutate_attribute,
    _mutate_wiring,
    _mutate_op,
    _mutate_versions,
    _mutate_structure,
]


def mutate_bytes(data: bytes, rng) -> bytes:
    b = bytearray(data)
    r = rng.random()
    if r < 0.4:
        for _ in range(int(rng.integers(1, 9))):
            i = int(rng.integers(len(b)))
            b[i] ^= 1 << int(rng.integers(8))
    elif r < 0.6:
        b = b[: int(rng.integers(0, len(b)))]
    elif r < 0.8:
        i = int(rng.integers(len(b) + 1))
        b[i:i] = bytes(rng.integers(0, 256, int(rng.integers(1, 16)), dtype=np.uint8))
    else:
        i = int(rng.integers(len(b)))
        j = min(len(b), i + int(rng.integers(1, 64)))
        b[i:j] = b""
    return bytes(b)


def mutate(data: bytes, rng) -> tuple[bytes, str]:
    """One mutated model and a word naming the mutations."""
    if rng.random() < 0.25:
        return mutate_bytes(data, rng), "bytes"
    m = onnx.ModelProto()
    m.ParseFromString(data)
    done = []
    for _ in range(int(rng.choice([1, 2, 3], p=[0.6, 0.3, 0.1]))):
        fn = _pick(rng, PROTO_MUTATIONS)
        fn(m, rng)
        done.append(fn.__name__[len("_mutate_") :])
    return m.SerializeToString(), "+".join(done)


# -- random feeds ------------------------------------------------------------------------------

_NP = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int16)": np.int16,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64,
    "tensor(bool)": np.bool_,
    "tensor(string)": object,
}


def random_value(arg, rng, dims: dict, clean: bool):
    """A random feed for a NodeArg. ``clean``: of its declared type and shape (one value per
    dimension variable, kept in ``dims``), with small non-negative integers; otherwise
    sometimes of another type or rank, with out-of-range integers, NaN and Inf."""
    dtype = _NP.get(arg.type)
    if dtype is None or (not clean and rng.random() < 0.1):
        dtype = _pick(rng, [np.float32, np.int64, np.float64, np.bool_])
    if arg.shape is None:
        shape = [int(rng.integers(0, 4)) for _ in range(int(rng.integers(0, 4)))]
    else:
        shape = []
        for d in arg.shape:
            if isinstance(d, int) and 0 <= d <= 64:
                shape.append(d)
            elif isinstance(d, str) and d:
                shape.append(dims.setdefault(d, int(rng.integers(0 if not clean else 1, 5))))
            else:
                shape.append(int(rng.integers(0, 5)))
    if not clean and rng.random() < 0.1:
        shape.append(2)
    if int(np.prod(shape, dtype=np.int64)) > 1 << 16:
        shape = [min(s, 4) for s in shape]
    if dtype is object:
        return np.array(["a", "bc", "", "é"][:1] * int(np.prod(shape)), dtype=object).reshape(shape)
    if dtype is np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        lo, hi = (0, 3) if clean else (max(info.min, -3), min(info.max, 9))
        vals = rng.integers(lo, hi + 1, shape, dtype=np.int64).astype(dtype)
        if not clean and rng.random() < 0.2 and vals.size:
            if vals.size > 1:
                vals.ravel()[0] = _pick(rng, (info.max, info.min, min(info.max, 1 << 20)))
            else:
                # One integer may be a Loop trip count: a huge one runs that many iterations
                # (in onnxruntime too; there is no run-time cap, see the README): keep it small.
                vals.ravel()[0] = _pick(rng, (info.min, min(info.max, 1 << 10)))
        return vals
    vals = rng.standard_normal(shape) * float(_pick(rng, (1.0, 3.0, 100.0)))
    if not clean and rng.random() < 0.3 and vals.size:
        vals.ravel()[rng.integers(vals.size)] = _pick(rng, (np.nan, np.inf, -np.inf))
    return vals.astype(dtype)


# -- running -----------------------------------------------------------------------------------


def run_case(onnxjit, models: dict[str, bytes], seed: int, index: int) -> tuple[str, str, str]:
    """(outcome, mutation, detail): outcome is ok / refused-load / refused-run / crash."""
    from onnxjit.errors import OnnxJitError

    rng = np.random.default_rng([seed, index])
    name = _pick(rng, sorted(models))
    if rng.random() < 0.1:
        data, how = models[name], "inputs-only"
    else:
        try:
            data, how = mutate(models[name], rng)
        except ValueError:  # a mutation protobuf itself refuses: not a case
            return "skipped", name, ""
    label = f"{name}:{how}"
    stage = "load"
    try:
        so = onnxjit.SessionOptions()
        so.add_session_config_entry("onnxjit.max_tensor_bytes", "16M")
        so.add_session_config_entry("onnxjit.max_run_bytes", "64M")
        sess = onnxjit.InferenceSession(data, so)
        stage = "run"
        refused = False
        for _ in range(2):
            dims: dict[str, int] = {}
            clean = rng.random() < 0.6
            feed = {a.name: random_value(a, rng, dims, clean) for a in sess.get_inputs()}
            try:
                sess.run(None, feed)
            except OnnxJitError:
                refused = True
        return ("refused-run" if refused else "ok"), label, ""
    except OnnxJitError:
        return "refused-" + stage, label, ""
    except RecursionError as e:
        return "crash", label, f"{stage}: RecursionError: {str(e)[:200]}"
    except Exception as e:  # noqa: BLE001 - anything else is the bug being looked for
        tb = traceback.extract_tb(e.__traceback__)
        where = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno}" for f in tb[-4:][::-1])
        return "crash", label, f"{stage}: {type(e).__name__}: {str(e)[:300]} at {where}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--cases", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=0.0, help="stop after this long (0: no bound)")
    p.add_argument("--case-timeout", type=float, default=120.0)
    p.add_argument("--progress", default="")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    import onnxjit

    models = seed_models()
    t0 = time.perf_counter()
    counts: dict[str, int] = {}
    tried = 0
    # One line per case started, written straight to the file (no buffer to lose in a crash).
    progress = (
        os.open(args.progress, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if args.progress else -1
    )
    for index in range(args.start, args.start + args.cases):
        if args.seconds and time.perf_counter() - t0 > args.seconds:
            break
        if progress >= 0:
            os.write(progress, f"{index}\n".encode())
        if args.case_timeout > 0:
            faulthandler.dump_traceback_later(args.case_timeout, exit=True)
        outcome, label, detail = run_case(onnxjit, models, args.seed, index)
        if args.case_timeout > 0:
            faulthandler.cancel_dump_traceback_later()
        tried += 1
        counts[outcome] = counts.get(outcome, 0) + 1
        if outcome == "crash":
            print(
                json.dumps(
                    {"crash": {"seed": args.seed, "index": index, "case": label, "error": detail}}
                ),
                flush=True,
            )
    summary = {
        "seed": args.seed,
        "start": args.start,
        "tried": tried,
        "seconds": round(time.perf_counter() - t0, 2),
        "outcomes": counts,
    }
    print(json.dumps({"summary": summary}), flush=True)
    return 0


if __name__ == "__main__":
    faulthandler.enable()
    sys.exit(main())
