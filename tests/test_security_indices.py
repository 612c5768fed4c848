"""Index safety (issue 6, item 4): every index-taking operator validates its indices before a
kernel runs (Numba does no bounds checking), with an error naming the node, the index and the
valid range.

Each row feeds out-of-range indices (or positions, lengths, coordinates) and asserts the
InvalidArgumentError and its message; onnxruntime refuses the same feed (the oracle that the
feed is invalid). The boundary rows feed the extreme valid indices (-n and n - 1) and compare
the values with onnxruntime; after a refusal the session still gives the same good result.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxjit
from onnxjit.errors import InvalidArgumentError

F, I64, I32, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL
ML = helper.make_opsetid("ai.onnx.ml", 3)
X = np.arange(12, dtype=np.float32).reshape(3, 4)


def vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def out(name: str, elem: int, rank: int) -> onnx.ValueInfoProto:
    return vi(name, elem, [f"{name}{i}" for i in range(rank)])


def make(node, inputs, outputs, opset=18, extra=()) -> onnx.ModelProto:
    graph = helper.make_graph([node], "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra])
    model.ir_version = 10
    return model


def ort_refuses(model: onnx.ModelProto, feed: dict) -> bool:
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        sess.run(None, feed)
    except Exception:  # noqa: BLE001 - any onnxruntime error counts as a refusal
        return True
    return False


Row = tuple[Callable[[], onnx.ModelProto], dict, dict, tuple[str, ...]]

# name -> (model, good feed, bad feed, needles of the error message)
ROWS: dict[str, Row] = {
    "Gather": (
        lambda: make(
            helper.make_node("Gather", ["x", "i"], ["y"], name="n", axis=0),
            [vi("x", F, [3, 4]), vi("i", I64, [2])],
            [out("y", F, 2)],
        ),
        {"x": X, "i": np.array([-3, 2])},
        {"x": X, "i": np.array([0, 7])},
        ("node 'n' (Gather-13)", "indices[1] = 7", "axis 0 of size 3", "[-3, 2]"),
    ),
    "Gather-int32-negative": (
        lambda: make(
            helper.make_node("Gather", ["x", "i"], ["y"], name="n", axis=1),
            [vi("x", F, [3, 4]), vi("i", I32, [2])],
            [out("y", F, 2)],
        ),
        {"x": X, "i": np.array([-4, 3], np.int32)},
        {"x": X, "i": np.array([0, -5], np.int32)},
        ("node 'n' (Gather-13)", "indices[1] = -5", "axis 1 of size 4", "[-4, 3]"),
    ),
    "GatherElements": (
        lambda: make(
            helper.make_node("GatherElements", ["x", "i"], ["y"], name="n", axis=1),
            [vi("x", F, [3, 4]), vi("i", I64, [3, 2])],
            [out("y", F, 2)],
        ),
        {"x": X, "i": np.array([[0, -4], [3, 1], [2, 2]])},
        {"x": X, "i": np.array([[0, 1], [2, 4], [0, 0]])},
        ("node 'n' (GatherElements-13)", "indices[1, 1] = 4", "size 4", "[-4, 3]"),
    ),
    "GatherND": (
        lambda: make(
            helper.make_node("GatherND", ["x", "i"], ["y"], name="n"),
            [vi("x", F, [3, 4]), vi("i", I64, [2, 2])],
            [out("y", F, 1)],
        ),
        {"x": X, "i": np.array([[0, -1], [2, 3]])},
        {"x": X, "i": np.array([[0, 1], [3, 0]])},
        ("node 'n' (GatherND-13)", "indices[1, 0] = 3", "size 3", "[-3, 2]"),
    ),
    "GatherND-batch_dims": (
        lambda: make(
            helper.make_node("GatherND", ["x", "i"], ["y"], name="n", batch_dims=1),
            [vi("x", F, [3, 4]), vi("i", I64, [3, 1])],
            [out("y", F, 1)],
        ),
        {"x": X, "i": np.array([[0], [3], [-4]])},
        {"x": X, "i": np.array([[0], [9], [1]])},
        ("node 'n' (GatherND-13)", "indices[1, 0] = 9", "size 4", "[-4, 3]"),
    ),
    "ScatterElements": (
        lambda: make(
            helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], name="n", axis=0),
            [vi("x", F, [3, 4]), vi("i", I64, [1, 2]), vi("u", F, [1, 2])],
            [out("y", F, 2)],
        ),
        {"x": X, "i": np.array([[-3, 2]]), "u": np.ones((1, 2), np.float32)},
        {"x": X, "i": np.array([[0, 3]]), "u": np.ones((1, 2), np.float32)},
        ("node 'n' (ScatterElements-18)", "indices[0, 1] = 3", "axis 0 of size 3", "[-3, 2]"),
    ),
    "Scatter-9": (
        lambda: make(
            helper.make_node("Scatter", ["x", "i", "u"], ["y"], name="n", axis=1),
            [vi("x", F, [3, 4]), vi("i", I64, [1, 2]), vi("u", F, [1, 2])],
            [out("y", F, 2)],
            opset=9,
        ),
        {"x": X, "i": np.array([[3, 0]]), "u": np.ones((1, 2), np.float32)},
        {"x": X, "i": np.array([[1, 4]]), "u": np.ones((1, 2), np.float32)},
        ("node 'n' (Scatter-9)", "indices[0, 1] = 4", "axis 1 of size 4", "[-4, 3]"),
    ),
    "ScatterND": (
        lambda: make(
            helper.make_node("ScatterND", ["x", "i", "u"], ["y"], name="n"),
            [vi("x", F, [3, 4]), vi("i", I64, [1, 2]), vi("u", F, [1])],
            [out("y", F, 2)],
        ),
        {"x": X, "i": np.array([[2, -4]]), "u": np.ones((1,), np.float32)},
        {"x": X, "i": np.array([[1, -5]]), "u": np.ones((1,), np.float32)},
        ("node 'n' (ScatterND-18)", "indices[0, 1] = -5", "size 4", "[-4, 3]"),
    ),
    "ScatterND-add": (
        lambda: make(
            helper.make_node("ScatterND", ["x", "i", "u"], ["y"], name="n", reduction="add"),
            [vi("x", F, [3, 4]), vi("i", I64, [1, 1]), vi("u", F, [1, 4])],
            [out("y", F, 2)],
        ),
        {"x": X, "i": np.array([[2]]), "u": np.ones((1, 4), np.float32)},
        {"x": X, "i": np.array([[3]]), "u": np.ones((1, 4), np.float32)},
        ("node 'n' (ScatterND-18)", "indices[0, 0] = 3", "size 3", "[-3, 2]"),
    ),
    "Slice-axis": (
        lambda: make(
            helper.make_node("Slice", ["x", "s", "e", "a"], ["y"], name="n"),
            [vi("x", F, [3, 4]), vi("s", I64, [1]), vi("e", I64, [1]), vi("a", I64, [1])],
            [out("y", F, 2)],
        ),
        {"x": X, "s": np.array([-(2**63)]), "e": np.array([2**63 - 1]), "a": np.array([-1])},
        {"x": X, "s": np.array([0]), "e": np.array([2]), "a": np.array([5])},
        ("node 'n' (Slice-13)", "axis 5 is out of range for rank 2", "[-2, 1]"),
    ),
    "Slice-step-0": (
        lambda: make(
            helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"], name="n"),
            [vi("x", F, [3, 4])] + [vi(k, I64, [1]) for k in "seat"],
            [out("y", F, 2)],
        ),
        {"x": X, "s": np.array([2**62]), "e": np.array([-(2**62)]), "a": [0], "t": [-(2**62)]},
        {"x": X, "s": np.array([0]), "e": np.array([2]), "a": np.array([0]), "t": [0]},
        ("node 'n' (Slice-13)", "step for axis 0 is 0", "non-zero"),
    ),
    "TopK-k-too-large": (
        lambda: make(
            helper.make_node("TopK", ["x", "k"], ["v", "i"], name="n"),
            [vi("x", F, [3, 4]), vi("k", I64, [1])],
            [out("v", F, 2), out("i", I64, 2)],
        ),
        {"x": X, "k": np.array([4])},
        {"x": X, "k": np.array([9])},
        ("node 'n' (TopK-11)", "k = 9 is outside [0, 4]", "lower k"),
    ),
    "TopK-k-negative": (
        lambda: make(
            helper.make_node("TopK", ["x", "k"], ["v", "i"], name="n"),
            [vi("x", F, [3, 4]), vi("k", I64, [1])],
            [out("v", F, 2), out("i", I64, 2)],
        ),
        {"x": X, "k": np.array([0])},
        {"x": X, "k": np.array([-1])},
        (
            "node 'n' (TopK-11)",
            "k = -1 is outside [0, 4]",
        ),
    ),
    "ReverseSequence": (
        lambda: make(
            helper.make_node(
                "ReverseSequence", ["x", "l"], ["y"], name="n", batch_axis=0, time_axis=1
            ),
            [vi("x", F, [3, 4]), vi("l", I64, [3])],
            [out("y", F, 2)],
        ),
        {"x": X, "l": np.array([4, 0, 2])},
        {"x": X, "l": np.array([4, 9, 2])},
        ("node 'n' (ReverseSequence-10)", "[0, 4]", "found [4, 9, 2]"),
    ),
    "NonMaxSuppression-shapes": (
        lambda: make(
            helper.make_node("NonMaxSuppression", ["b", "s", "m"], ["y"], name="n"),
            [vi("b", F, [1, 2, 4]), vi("s", F, [1, 1, "k"]), vi("m", I64, [1])],
            [out("y", I64, 2)],
        ),
        {
            "b": np.array([[[0, 0, 1, 1], [0, 0.5, 1, 1.5]]], np.float32),
            "s": np.array([[[0.9, 0.8]]], np.float32),
            "m": np.array([2**62]),
        },
        {
            "b": np.array([[[0, 0, 1, 1], [0, 0.5, 1, 1.5]]], np.float32),
            "s": np.array([[[0.9, 0.8, 0.7]]], np.float32),
            "m": np.array([10]),
        },
        ("node 'n' (NonMaxSuppression-11)", "to match boxes (1, 2, 4)", "found (1, 1, 3)"),
    ),
    "TensorScatter-linear": (
        lambda: make(
            helper.make_node("TensorScatter", ["c", "u", "w"], ["y"], name="n"),
            [vi("c", F, [2, 5, 3]), vi("u", F, [2, 2, 3]), vi("w", I64, [2])],
            [out("y", F, 3)],
            opset=24,
        ),
        {"c": np.zeros((2, 5, 3), np.float32), "u": np.ones((2, 2, 3), np.float32), "w": [3, 0]},
        {"c": np.zeros((2, 5, 3), np.float32), "u": np.ones((2, 2, 3), np.float32), "w": [4, 0]},
        ("node 'n' (TensorScatter-24)", "write_indices [4, 0] + 2", "cache length 5"),
    ),
    "RoiAlign-batch": (
        lambda: make(
            helper.make_node(
                "RoiAlign", ["x", "r", "b"], ["y"], name="n", output_height=2, output_width=2
            ),
            [vi("x", F, [2, 1, 4, 4]), vi("r", F, [1, 4]), vi("b", I64, [1])],
            [out("y", F, 4)],
        ),
        {
            "x": np.arange(32, dtype=np.float32).reshape(2, 1, 4, 4),
            "r": np.array([[0, 0, 2, 2]], np.float32),
            "b": np.array([1]),
        },
        {
            "x": np.arange(32, dtype=np.float32).reshape(2, 1, 4, 4),
            "r": np.array([[0, 0, 2, 2]], np.float32),
            "b": np.array([5]),
        },
        ("node 'n' (RoiAlign-16)", "batch_indices must lie in [0, 1]", "found [5]"),
    ),
    "RoiAlign-non-finite": (
        lambda: make(
            helper.make_node(
                "RoiAlign", ["x", "r", "b"], ["y"], name="n", output_height=2, output_width=2
            ),
            [vi("x", F, [1, 1, 4, 4]), vi("r", F, [2, 4]), vi("b", I64, [2])],
            [out("y", F, 4)],
        ),
        {
            "x": np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4),
            "r": np.array([[0, 0, 2, 2], [1, 1, 3.5, 3]], np.float32),
            "b": np.array([0, 0]),
        },
        {
            "x": np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4),
            "r": np.array([[0, 0, 2, 2], [np.nan, 0, np.inf, 2]], np.float32),
            "b": np.array([0, 0]),
        },
        ("node 'n' (RoiAlign-16)", "rois[1] = [nan, 0.0, inf, 2.0] is not finite"),
    ),
    "MaxRoiPool-batch": (
        lambda: make(
            helper.make_node("MaxRoiPool", ["x", "r"], ["y"], name="n", pooled_shape=[2, 2]),
            [vi("x", F, [1, 1, 4, 4]), vi("r", F, [1, 5])],
            [out("y", F, 4)],
        ),
        {
            "x": np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4),
            "r": np.array([[0, -1e9, -1e9, 1e9, 1e9]], np.float32),
        },
        {
            "x": np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4),
            "r": np.array([[3, 0, 0, 2, 2]], np.float32),
        },
        ("node 'n' (MaxRoiPool-1)", "batch indices must lie in [0, 1)", "found [3]"),
    ),
    "SequenceAt": (
        lambda: helper.make_model(
            helper.make_graph(
                [
                    helper.make_node("SplitToSequence", ["x"], ["s"], axis=0),
                    helper.make_node("SequenceAt", ["s", "p"], ["y"], name="n"),
                ],
                "g",
                [vi("x", F, [3, 4]), vi("p", I64, [])],
                [out("y", F, 2)],
            ),
            opset_imports=[helper.make_opsetid("", 18)],
            ir_version=10,
        ),
        {"x": X, "p": np.array(-3)},
        {"x": X, "p": np.array(7)},
        ("node 'n' (SequenceAt-11)", "'position' 7 is out of range [-3, 2]"),
    ),
    "RotaryEmbedding-position": (
        lambda: make(
            helper.make_node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], name="n"),
            [
                vi("x", F, [1, 2, 2, 4]),
                vi("c", F, [3, 2]),
                vi("s", F, [3, 2]),
                vi("p", I64, [1, 2]),
            ],
            [out("y", F, 4)],
            opset=23,
        ),
        {
            "x": np.ones((1, 2, 2, 4), np.float32),
            "c": np.full((3, 2), 0.5, np.float32),
            "s": np.full((3, 2), 0.25, np.float32),
            "p": np.array([[0, 2]]),
        },
        {
            "x": np.ones((1, 2, 2, 4), np.float32),
            "c": np.ones((3, 2), np.float32),
            "s": np.ones((3, 2), np.float32),
            "p": np.array([[0, 99]]),
        },
        ("node 'n' (RotaryEmbedding-23)", "position_ids must lie in [0, 3)", "[0, 99]"),
    ),
    "MaxUnpool": (
        lambda: make(
            helper.make_node(
                "MaxUnpool", ["x", "i"], ["y"], name="n", kernel_shape=[2, 2], strides=[2, 2]
            ),
            [vi("x", F, [1, 1, 2, 2]), vi("i", I64, [1, 1, 2, 2])],
            [out("y", F, 4)],
        ),
        {"x": np.ones((1, 1, 2, 2), np.float32), "i": np.array([[[[0, 3], [9, 15]]]])},
        {"x": np.ones((1, 1, 2, 2), np.float32), "i": np.array([[[[0, 1], [99, -1]]]])},
        ("node 'n' (MaxUnpool-11)", "indices outside [0, 16)", "[1, 1, 4, 4]"),
    ),
    "ArrayFeatureExtractor": (
        lambda: make(
            helper.make_node(
                "ArrayFeatureExtractor", ["x", "i"], ["y"], name="n", domain="ai.onnx.ml"
            ),
            [vi("x", F, [3, 4]), vi("i", I64, [2])],
            [out("y", F, 2)],
            extra=[ML],
        ),
        {"x": X, "i": np.array([0, 3])},
        {"x": X, "i": np.array([1, 4])},
        ("node 'n' (ai.onnx.ml.ArrayFeatureExtractor-1)", "must be in [0, 4)", "found 1..4"),
    ),
    "CumSum-axis": (
        lambda: make(
            helper.make_node("CumSum", ["x", "a"], ["y"], name="n"),
            [vi("x", F, [3, 4]), vi("a", I64, [])],
            [out("y", F, 2)],
        ),
        {"x": X, "a": np.array(-2)},
        {"x": X, "a": np.array(5)},
        ("node 'n' (CumSum-14)", "axis 5 is out of range", "[-2, 1]"),
    ),
    "Split-sizes": (
        lambda: make(
            helper.make_node("Split", ["x", "s"], ["a", "b"], name="n", axis=1),
            [vi("x", F, [3, 4]), vi("s", I64, [2])],
            [out("a", F, 2), out("b", F, 2)],
        ),
        {"x": X, "s": np.array([0, 4])},
        {"x": X, "s": np.array([-2, 6])},
        ("node 'n' (Split-18)", "split [-2, 6]", "non-negative entries summing to 4"),
    ),
}


def _run_checked(sess, feed: dict) -> list[np.ndarray]:
    return [np.asarray(v) for v in sess.run(None, feed)]


def _feed(feed: dict) -> dict:
    return {k: v if isinstance(v, np.ndarray) else np.array(v, np.int64) for k, v in feed.items()}


@pytest.mark.parametrize("row", sorted(ROWS))
def test_out_of_range_indices_refused_before_the_kernel(row):
    build, good, bad, needles = ROWS[row]
    model = build()
    good, bad = _feed(good), _feed(bad)
    assert ort_refuses(model, bad), "the oracle accepts this feed: not a hostile row"
    sess = onnxjit.InferenceSession(model.SerializeToString())
    first = _run_checked(sess, good)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, want in zip(first, ref.run(None, good)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(InvalidArgumentError) as info:
        sess.run(None, bad)
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, (needle, msg)
    again = _run_checked(sess, good)
    for a, b in zip(first, again):
        assert a.tobytes() == b.tobytes()


def test_one_hot_out_of_range_gives_off_values_like_onnxruntime():
    # The spec defines out-of-range indices for OneHot (an all-off row), nothing to refuse.
    model = make(
        helper.make_node("OneHot", ["i", "d", "v"], ["y"], name="n"),
        [vi("i", I64, [4]), vi("d", I64, []), vi("v", F, [2])],
        [out("y", F, 2)],
    )
    feed = {
        "i": np.array([0, 9, -9, -1]),
        "d": np.array(4),
        "v": np.array([-1, 5], np.float32),
    }
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, feed)[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feed
    )[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_grid_sample_far_outside_coordinates_match_onnxruntime(mode, padding):
    model = make(
        helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding),
        [vi("x", F, [1, 1, 4, 4]), vi("g", F, [1, 2, 3, 2])],
        [out("y", F, 4)],
        opset=20,
    )
    grid = np.array(
        [[[[1e3, -1e3], [-3.5, 7.25], [0.3, -0.2]], [[-37.3, 51.9], [2.5, -2.5], [1.0, 1.0]]]],
        np.float32,
    )
    feed = {"x": np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4), "g": grid}
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, feed)[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feed
    )[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_resize_roi_must_be_finite():
    model = make(
        helper.make_node(
            "Resize",
            ["x", "roi", "", "sz"],
            ["y"],
            name="n",
            mode="nearest",
            coordinate_transformation_mode="tf_crop_and_resize",
        ),
        [vi("x", F, [1, 1, 4, 4]), vi("roi", F, [8]), vi("sz", I64, [4])],
        [out("y", F, 4)],
    )
    sess = onnxjit.InferenceSession(model.SerializeToString())
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    good = {"x": x, "roi": np.array([0, 0, -5, -7, 1, 1, 9, 11], np.float32), "sz": [1, 1, 3, 3]}
    good = _feed(good)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(None, good)[0], want.run(None, good)[0])
    bad = dict(good, roi=np.array([0, 0, np.nan, 0, 1, 1, np.inf, 1], np.float32))
    with pytest.raises(InvalidArgumentError) as info:
        sess.run(None, bad)
    msg = str(info.value)
    assert "node 'n' (Resize-18)" in msg and "holds a non-finite value" in msg and "nan" in msg


@pytest.mark.parametrize(
    ("attrs", "needles"),
    [
        (
            {"nodes_truenodeids": [7, 0, 0]},
            ("nodes_truenodeids refers to node 7 of tree 0", "does not exist"),
        ),
        (
            {"nodes_truenodeids": [1, 0, 0], "nodes_falsenodeids": [0, 0, 0]},
            ("tree walk did not reach a leaf", "cycle"),
        ),
        ({"target_ids": [0, 55]}, ("a leaf writes target/class 55 but there are only 1",)),
    ],
    ids=["node-id", "cycle", "target-id"],
)
def test_tree_ensemble_attribute_indices_validated(attrs, needles):
    base = dict(
        n_targets=1,
        nodes_treeids=[0, 0, 0],
        nodes_nodeids=[0, 1, 2],
        nodes_featureids=[0, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
        nodes_values=[0.5, 0.0, 0.0],
        nodes_truenodeids=[1, 0, 0],
        nodes_falsenodeids=[2, 0, 0],
        target_treeids=[0, 0],
        target_nodeids=[1, 2],
        target_ids=[0, 0],
        target_weights=[1.0, 2.0],
    )
    if "nodes_falsenodeids" in attrs:
        base["nodes_modes"] = ["BRANCH_LEQ", "BRANCH_LEQ", "LEAF"]
        base["target_nodeids"] = [2, 2]
    base.update(attrs)
    model = make(
        helper.make_node(
            "TreeEnsembleRegressor", ["x"], ["y"], name="n", domain="ai.onnx.ml", **base
        ),
        [vi("x", F, [2, 3])],
        [out("y", F, 2)],
        extra=[ML],
    )
    x = {"x": np.zeros((2, 3), np.float32)}
    assert ort_refuses(model, x)
    with pytest.raises(InvalidArgumentError) as info:
        onnxjit.InferenceSession(model.SerializeToString()).run(None, x)
    msg = str(info.value)
    assert "TreeEnsembleRegressor-3" in msg
    for needle in needles:
        assert needle in msg, (needle, msg)
