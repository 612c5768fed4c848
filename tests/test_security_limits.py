"""Allocation caps (issue 6, item 3; onnxjit/limits.py).

Operators whose output size comes from data (ConstantOfShape, Expand, Tile, Range, Pad,
Resize/Upsample, OneHot, random generators, MaxUnpool, Col2Im, DFT/STFT, windows, Loop scan
outputs and carried values, sparse initializers) check the size against
``onnxjit.max_tensor_bytes`` / ``onnxjit.max_run_bytes`` before allocating. Each refusal must be
a ResourceLimitError (also a MemoryError) naming the node and operator, the shape, the byte
count and the setting to change; the session stays usable and gives bitwise the same result
on the next good run. Results below the caps are compared with onnxruntime.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit import config, limits
from onnxjit.errors import ConfigurationError, OnnxJitError, ResourceLimitError

F, I64 = TensorProto.FLOAT, TensorProto.INT64
MiB = 1 << 20


def make(nodes, inputs, outputs, inits=(), opset=18, extra_opsets=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])
    model.ir_version = 9
    return model


def out(name: str, elem: int, rank: int) -> onnx.ValueInfoProto:
    """A main-graph output of known rank and unknown sizes."""
    return helper.make_tensor_value_info(name, elem, [f"{name}{i}" for i in range(rank)])


def session(model: onnx.ModelProto, tensor: str = "1M", run: str | None = None, **kw):
    so = onnxjit.SessionOptions()
    so.add_session_config_entry("onnxjit.max_tensor_bytes", tensor)
    if run is not None:
        so.add_session_config_entry("onnxjit.max_run_bytes", run)
    return onnxjit.InferenceSession(model.SerializeToString(), so, **kw)


def ort_run(model: onnx.ModelProto, feed: dict) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)


def refused(sess, feed: dict, *needles: str) -> str:
    with pytest.raises(ResourceLimitError) as info:
        sess.run(None, feed)
    assert isinstance(info.value, MemoryError) and isinstance(info.value, OnnxJitError)
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, (needle, msg)
    return msg


def cap_words(setting: str = "onnxjit.max_tensor_bytes") -> tuple[str, ...]:
    return (
        "over the per-tensor cap of 1048576 bytes (1.0 MiB)",
        f"raise session config entry '{setting}'",
    )


# -- one model per operator: a small good feed, then a hostile one --------------------------------


def _cos_model():
    return make(
        [helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")],
        [helper.make_tensor_value_info("s", I64, [2])],
        [out("y", F, 2)],
    )


def test_constant_of_shape_capped_then_session_still_exact():
    model = _cos_model()
    sess = session(model)
    good = {"s": np.array([3, 5], np.int64)}
    first = sess.run(None, good)[0]
    np.testing.assert_array_equal(first, ort_run(model, good)[0])
    msg = refused(
        sess,
        {"s": np.array([100_000, 100_000], np.int64)},
        "node 'fill' (ConstantOfShape-9)",
        "shape [100000, 100000] (float32)",
        "40000000000 bytes (37.3 GiB)",
        *cap_words(),
    )
    assert "if the model really needs it" in msg
    again = sess.run(None, good)[0]
    assert again.tobytes() == first.tobytes() and again.shape == first.shape


def test_overflowing_shape_refused_whatever_the_caps():
    sess = session(_cos_model(), tensor="0", run="0")
    refused(
        sess,
        {"s": np.array([1 << 62, 1 << 62], np.int64)},
        "node 'fill' (ConstantOfShape-9)",
        "overflows a 64-bit integer",
    )
    refused(
        sess,
        {"s": np.array([1 << 31, 1 << 31], np.int64)},  # 2^62 elements, 2^64 bytes
        "needs 18446744073709551616 bytes, which overflows a 64-bit integer",
    )


def test_no_cap_means_no_cap():
    sess = session(_cos_model(), tensor="0", run="0")
    out = sess.run(None, {"s": np.array([600, 600], np.int64)})[0]  # 1.4 MB, over 1M
    assert out.shape == (600, 600) and not out.any()


CASES = {
    # name: (model, good feed, hostile feed, needles)
    "Expand": (
        lambda: make(
            [helper.make_node("Expand", ["x", "s"], ["y"], name="n")],
            [
                helper.make_tensor_value_info("x", F, [1, 1]),
                helper.make_tensor_value_info("s", I64, [2]),
            ],
            [out("y", F, 2)],
        ),
        {"x": np.ones((1, 1), np.float32), "s": np.array([4, 3], np.int64)},
        {"x": np.ones((1, 1), np.float32), "s": np.array([1 << 20, 1 << 10], np.int64)},
        ("node 'n' (Expand-13)", "shape [1048576, 1024] (float32)", "4294967296 bytes"),
    ),
    "Tile": (
        lambda: make(
            [helper.make_node("Tile", ["x", "r"], ["y"], name="n")],
            [
                helper.make_tensor_value_info("x", F, [2, 2]),
                helper.make_tensor_value_info("r", I64, [2]),
            ],
            [out("y", F, 2)],
        ),
        {"x": np.ones((2, 2), np.float32), "r": np.array([3, 2], np.int64)},
        {"x": np.ones((2, 2), np.float32), "r": np.array([1 << 15, 1 << 15], np.int64)},
        ("node 'n' (Tile-13)", "shape [65536, 65536] (float32)"),
    ),
    "Range-int": (
        lambda: make(
            [helper.make_node("Range", ["a", "b", "d"], ["y"], name="n")],
            [helper.make_tensor_value_info(v, I64, []) for v in "abd"],
            [out("y", I64, 1)],
        ),
        {"a": np.array(0), "b": np.array(10), "d": np.array(3)},
        {"a": np.array(0), "b": np.array(1 << 40), "d": np.array(1)},
        ("node 'n' (Range-11)", "shape [1099511627776] (int64)"),
    ),
    "Range-float": (
        lambda: make(
            [helper.make_node("Range", ["a", "b", "d"], ["y"], name="n")],
            [helper.make_tensor_value_info(v, F, []) for v in "abd"],
            [out("y", F, 1)],
        ),
        {k: np.array(v, np.float32) for k, v in zip("abd", (0.5, 4.0, 0.75))},
        {k: np.array(v, np.float32) for k, v in zip("abd", (0.0, 1e9, 1e-3))},
        ("node 'n' (Range-11)", "(float32)", "over the per-tensor cap"),
    ),
    "Pad": (
        lambda: make(
            [helper.make_node("Pad", ["x", "p"], ["y"], name="n")],
            [
                helper.make_tensor_value_info("x", F, [2, 2]),
                helper.make_tensor_value_info("p", I64, [4]),
            ],
            [out("y", F, 2)],
        ),
        {"x": np.ones((2, 2), np.float32), "p": np.array([1, 0, 2, 3], np.int64)},
        {"x": np.ones((2, 2), np.float32), "p": np.array([0, 0, 1 << 20, 1 << 20], np.int64)},
        ("node 'n' (Pad-18)", "shape [1048578, 1048578] (float32)"),
    ),
    "Resize-scales": (
        lambda: make(
            [helper.make_node("Resize", ["x", "", "sc"], ["y"], name="n", mode="nearest")],
            [
                helper.make_tensor_value_info("x", F, [1, 1, 2, 2]),
                helper.make_tensor_value_info("sc", F, [4]),
            ],
            [out("y", F, 4)],
        ),
        {
            "x": np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2),
            "sc": np.array([1, 1, 2, 3], np.float32),
        },
        {
            "x": np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2),
            "sc": np.array([1, 1, 1e6, 1e6], np.float32),
        },
        ("node 'n' (Resize-18)", "shape [1, 1, 2000000, 2000000] (float32)"),
    ),
    "Resize-sizes": (
        lambda: make(
            [helper.make_node("Resize", ["x", "", "", "sz"], ["y"], name="n", mode="linear")],
            [
                helper.make_tensor_value_info("x", F, [1, 1, 2, 2]),
                helper.make_tensor_value_info("sz", I64, [4]),
            ],
            [out("y", F, 4)],
        ),
        {
            "x": np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2),
            "sz": np.array([1, 1, 3, 5], np.int64),
        },
        {
            "x": np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2),
            "sz": np.array([1, 1, 1 << 16, 1 << 16], np.int64),
        },
        ("node 'n' (Resize-18)", "shape [1, 1, 65536, 65536] (float32)"),
    ),
    "Upsample": (
        lambda: make(
            [helper.make_node("Upsample", ["x", "sc"], ["y"], name="n")],
            [
                helper.make_tensor_value_info("x", F, [1, 1, 2, 2]),
                helper.make_tensor_value_info("sc", F, [4]),
            ],
            [out("y", F, 4)],
            opset=9,
        ),
        {
            "x": np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2),
            "sc": np.array([1, 1, 2, 2], np.float32),
        },
        {
            "x": np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2),
            "sc": np.array([1, 1, 4096, 4096], np.float32),
        },
        ("node 'n' (Upsample-9)", "shape [1, 1, 8192, 8192] (float32)"),
    ),
    "OneHot": (
        lambda: make(
            [helper.make_node("OneHot", ["i", "d", "v"], ["y"], name="n")],
            [
                helper.make_tensor_value_info("i", I64, [3]),
                helper.make_tensor_value_info("d", I64, []),
                helper.make_tensor_value_info("v", F, [2]),
            ],
            [out("y", F, 2)],
        ),
        {
            "i": np.array([0, 2, 1], np.int64),
            "d": np.array(4, np.int64),
            "v": np.array([0, 1], np.float32),
        },
        {
            "i": np.array([0, 2, 1], np.int64),
            "d": np.array(1 << 40, np.int64),
            "v": np.array([0, 1], np.float32),
        },
        ("node 'n' (OneHot-11)", "shape [3, 1099511627776] (float32)"),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_data_sized_operator_capped(case):
    build, good, bad, needles = CASES[case]
    model = build()
    sess = session(model)
    first = sess.run(None, good)[0]
    want = ort_run(model, good)[0]
    if first.dtype.kind == "f":
        np.testing.assert_allclose(first, want, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(first, want)
    refused(sess, bad, *needles, *cap_words())
    again = sess.run(None, good)[0]
    assert again.tobytes() == first.tobytes() and again.shape == first.shape


def test_non_finite_range_is_an_argument_error():
    build, good, _, _ = CASES["Range-float"]
    sess = session(build())
    feed = {k: np.array(v, np.float32) for k, v in zip("abd", (0.0, np.inf, 1.0))}
    with pytest.raises(onnxjit.InvalidArgumentError) as info:
        sess.run(None, feed)
    assert "node 'n' (Range-11)" in str(info.value) and "use finite start, limit and delta" in str(
        info.value
    )


def test_non_finite_resize_scale_is_an_argument_error():
    build, good, _, _ = CASES["Resize-scales"]
    sess = session(build())
    feed = dict(good, sc=np.array([1, 1, np.inf, 2], np.float32))
    with pytest.raises(onnxjit.InvalidArgumentError, match="scales must be positive and finite"):
        sess.run(None, feed)


def test_random_normal_shape_attribute_capped_at_run():
    model = make(
        [helper.make_node("RandomNormal", [], ["y"], name="n", shape=[1 << 20, 1 << 20], seed=1.0)],
        [],
        [out("y", F, 2)],
    )
    sess = session(model)
    refused(sess, {}, "node 'n' (RandomNormal-1)", "shape [1048576, 1048576] (float64)")


def test_multinomial_sample_size_capped():
    model = make(
        [helper.make_node("Multinomial", ["x"], ["y"], name="n", sample_size=1 << 40)],
        [helper.make_tensor_value_info("x", F, [1, 3])],
        [out("y", TensorProto.INT32, 2)],
    )
    refused(
        session(model),
        {"x": np.zeros((1, 3), np.float32)},
        "node 'n' (Multinomial-7)",
        "shape [1, 1099511627776]",
    )


def test_max_unpool_output_shape_capped():
    model = make(
        [helper.make_node("MaxUnpool", ["x", "i", "s"], ["y"], name="n", kernel_shape=[2, 2])],
        [
            helper.make_tensor_value_info("x", F, [1, 1, 1, 1]),
            helper.make_tensor_value_info("i", I64, [1, 1, 1, 1]),
            helper.make_tensor_value_info("s", I64, [4]),
        ],
        [out("y", F, 4)],
    )
    feed = {
        "x": np.ones((1, 1, 1, 1), np.float32),
        "i": np.zeros((1, 1, 1, 1), np.int64),
        "s": np.array([1, 1, 1 << 20, 1 << 20], np.int64),
    }
    refused(session(model), feed, "node 'n' (MaxUnpool-11)", "shape [1, 1, 1048576, 1048576]")


def test_window_and_dft_lengths_capped():
    model = make(
        [helper.make_node("HannWindow", ["n"], ["y"], name="w")],
        [helper.make_tensor_value_info("n", I64, [])],
        [out("y", F, 1)],
    )
    sess = session(model)
    np.testing.assert_allclose(
        sess.run(None, {"n": np.array(8)})[0], ort_run(model, {"n": np.array(8)})[0], atol=1e-6
    )
    refused(sess, {"n": np.array(1 << 40)}, "node 'w' (HannWindow-17)", "shape [1099511627776]")
    model = make(
        [helper.make_node("DFT", ["x", "n"], ["y"], name="d")],
        [
            helper.make_tensor_value_info("x", F, [1, 4, 1]),
            helper.make_tensor_value_info("n", I64, []),
        ],
        [out("y", F, 3)],
        opset=20,
    )
    refused(
        session(model),
        {"x": np.ones((1, 4, 1), np.float32), "n": np.array(1 << 40)},
        "node 'd' (DFT-20)",
        "shape [1, 1099511627776, 2] (float64)",
    )


def _loop_model(body_nodes, body_outputs, carried_init=(), rank=1) -> onnx.ModelProto:
    body = helper.make_graph(
        body_nodes,
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
            *[helper.make_tensor_value_info(n + "_in", F, ["k"]) for n, _ in carried_init],
        ],
        body_outputs,
    )
    node = helper.make_node(
        "Loop", ["M", "", *[n for n, _ in carried_init]], ["out", "scan"][: len(body_outputs) - 1],
        name="loop", body=body,
    )  # fmt: skip
    return make(
        [node],
        [helper.make_tensor_value_info("M", I64, [])]
        + [helper.make_tensor_value_info(n, F, ["n"]) for n, _ in carried_init],
        [out(o, F, rank) for o in node.output],
    )


def test_loop_scan_outputs_count_against_the_caps():
    # Each iteration makes a 256 KiB scan output: the stack they grow into meets the tensor
    # cap during an endless loop; below it, the fills and the stack count against the run.
    body_nodes = [
        helper.make_node("Identity", ["c_in"], ["c_out"]),
        helper.make_node(
            "ConstantOfShape",
            ["shape"],
            ["slice"],
            value=helper.make_tensor("v", F, [1], [1.0]),
        ),
        helper.make_node(
            "Constant", [], ["shape"], value=numpy_helper.from_array(np.array([256, 256]))
        ),
    ]
    body_nodes = [body_nodes[0], body_nodes[2], body_nodes[1]]
    model = _loop_model(
        body_nodes,
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("slice", F, None),
        ],
        rank=3,
    )
    sess = session(model, tensor="1M", run="2M")
    good = {"M": np.array(3, np.int64)}
    first = sess.run(None, good)[0]
    np.testing.assert_array_equal(first, ort_run(model, good)[0])
    refused(
        sess,
        {"M": np.array(1 << 40, np.int64)},
        "node 'loop' (Loop-16)",
        "scan output 0 of shape [5, 256, 256] (float32)",
        *cap_words(),
    )
    again = sess.run(None, good)[0]
    assert again.tobytes() == first.tobytes()
    sess = session(model, tensor="64M", run="2M")
    refused(
        sess,
        {"M": np.array(6, np.int64)},
        "node 'loop' (Loop-16)",
        "scan output 0 of shape [6, 256, 256] (float32) would take 1572864 bytes",
        "after 1572864 bytes (1.5 MiB) already created by this run",
        "over the per-run cap of 2097152 bytes (2.0 MiB)",
        "raise session config entry 'onnxjit.max_run_bytes'",
    )


def test_loop_that_doubles_a_carried_value_meets_the_tensor_cap():
    body_nodes = [
        helper.make_node("Identity", ["c_in"], ["c_out"]),
        helper.make_node("Concat", ["x_in", "x_in"], ["x_out"], axis=0),
    ]
    model = _loop_model(
        body_nodes,
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x_out", F, None),
        ],
        carried_init=[("x", None)],
    )
    sess = session(model)
    good = {"M": np.array(4, np.int64), "x": np.arange(3, dtype=np.float32)}
    first = sess.run(None, good)[0]
    np.testing.assert_array_equal(first, ort_run(model, good)[0])
    refused(
        sess,
        {"M": np.array(100, np.int64), "x": np.arange(3, dtype=np.float32)},
        "node 'loop' (Loop-16)",
        "carried value of iteration",
        *cap_words(),
    )
    assert sess.run(None, good)[0].tobytes() == first.tobytes()


def test_run_cap_adds_up_the_tensors_of_one_run_and_restarts_each_run():
    # Two fills of 0.6 MiB each: under a 1 MiB tensor cap, over a 1 MiB run cap together.
    model = make(
        [
            helper.make_node("ConstantOfShape", ["s"], ["a"], name="first"),
            helper.make_node(
                "ConstantOfShape",
                ["s"],
                ["b"],
                name="second",
                value=helper.make_tensor("one", F, [1], [1.0]),
            ),
            helper.make_node("Add", ["a", "b"], ["y"]),
        ],
        [helper.make_tensor_value_info("s", I64, [1])],
        [out("y", F, 1)],
    )
    sess = session(model, tensor="1M", run="1M")
    small = {"s": np.array([1000], np.int64)}
    big = {"s": np.array([150_000], np.int64)}
    for _ in range(3):  # the total restarts with every run
        np.testing.assert_array_equal(sess.run(None, small)[0], np.ones(1000, np.float32))
    refused(
        sess,
        big,
        "node 'second' (ConstantOfShape-9)",
        "600000 bytes (585.9 KiB) after 600000 bytes (585.9 KiB) already created by this run",
        "over the per-run cap of 1048576 bytes",
        "raise session config entry 'onnxjit.max_run_bytes'",
    )
    np.testing.assert_array_equal(sess.run(None, small)[0], np.ones(1000, np.float32))


def test_constant_folding_of_a_huge_constant_is_deferred_to_the_run():
    # A ConstantOfShape of an initializer shape is folded at session creation: over the cap
    # it is not folded (nothing is allocated) and the run reports it.
    model = make(
        [helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")],
        [],
        [out("y", F, 2)],
        inits=[numpy_helper.from_array(np.array([1 << 20, 1 << 20], np.int64), "s")],
    )
    sess = session(model)
    refused(sess, {}, "node 'fill' (ConstantOfShape-9)", "4398046511104 bytes (4.0 TiB)")


def test_caps_are_per_session():
    model = _cos_model()
    feed = {"s": np.array([600, 600], np.int64)}  # 1.44 MB
    small = session(model, tensor="1M")
    large = session(model, tensor="2M")
    refused(small, feed, "over the per-tensor cap of 1048576 bytes")
    assert large.run(None, feed)[0].shape == (600, 600)


# -- settings -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("1048576", 1 << 20),
        ("512K", 512 << 10),
        ("64M", 64 << 20),
        ("4G", 4 << 30),
        ("4GiB", 4 << 30),
        ("1.5g", 3 << 29),
        ("2T", 2 << 40),
        ("0", 0),
        ("25%", 1 << 30),
        ("100%", 4 << 30),
    ],
)
def test_parse_bytes(raw, want):
    assert limits.parse_bytes(raw, "X", memory=4 << 30) == want


@pytest.mark.parametrize("raw", ["lots", "-1", "12Q", "150%", "", "1e400"])
def test_parse_bytes_refuses_nonsense_naming_the_setting(raw):
    with pytest.raises(ConfigurationError) as info:
        limits.parse_bytes(raw, "ONNXJIT_MAX_TENSOR_BYTES")
    msg = str(info.value)
    assert f"ONNXJIT_MAX_TENSOR_BYTES={raw!r} is not a byte count" in msg
    assert "512M, 4G" in msg and "0 for no cap" in msg
    assert isinstance(info.value, ValueError)


def test_bad_session_entry_refused_at_session_creation():
    so = onnxjit.SessionOptions()
    so.add_session_config_entry("onnxjit.max_run_bytes", "plenty")
    with pytest.raises(ConfigurationError, match="session config entry 'onnxjit.max_run_bytes'"):
        onnxjit.InferenceSession(_cos_model().SerializeToString(), so)


def test_defaults_follow_the_machine_memory():
    got = config.limits_from_environment({})
    mem = limits.physical_memory()
    assert got.max_tensor_bytes == mem // 4 and got.max_run_bytes == mem // 2
    env = {config.MAX_TENSOR_BYTES_ENV: "3M", config.MAX_RUN_BYTES_ENV: "0"}
    got = config.limits_from_environment(env)
    assert (got.max_tensor_bytes, got.max_run_bytes) == (3 << 20, 0)


def test_environment_variables_apply_to_every_session():
    code = (
        "import numpy as np, onnxjit\n"
        "from onnx import helper, TensorProto as T\n"
        "g = helper.make_graph([helper.make_node('ConstantOfShape', ['s'], ['y'], name='f')],"
        " 'g', [helper.make_tensor_value_info('s', T.INT64, [1])],"
        " [helper.make_tensor_value_info('y', T.FLOAT, ['n'])])\n"
        "m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 18)]); m.ir_version = 9\n"
        "s = onnxjit.InferenceSession(m.SerializeToString())\n"
        "print(s.run(None, {'s': np.array([1000])})[0].shape)\n"
        "try:\n"
        "    s.run(None, {'s': np.array([10000])})\n"
        "except onnxjit.ResourceLimitError as e:\n"
        "    print(e)\n"
    )
    env = dict(os.environ, ONNXJIT_MAX_TENSOR_BYTES="32K")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "(1000,)" in out
    assert "over the per-tensor cap of 32768 bytes (32.0 KiB)" in out
    assert "raise ONNXJIT_MAX_TENSOR_BYTES (or session config entry" in out
