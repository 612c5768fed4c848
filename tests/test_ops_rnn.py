"""LSTM, GRU and RNN against onnx's ReferenceEvaluator, and onnxruntime where it falls short.

The reference evaluator ignores ``sequence_lens``, ``activations``/``activation_alpha``/
``activation_beta``, ``clip`` and ``input_forget``; those rows use onnxruntime as the oracle.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from oracle import assert_close, make_node_model, ort_outputs, reference_outputs

import onnxjit

N_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def make_inputs(
    op: str,
    seq: int = 4,
    batch: int = 3,
    inp: int = 5,
    hidden: int = 6,
    n_dir: int = 1,
    dtype=np.float32,
    bias: bool = True,
    init: bool = True,
    peep: bool = False,
    layout: int = 0,
    seed: int = 0,
) -> dict[str, np.ndarray | None]:
    rng = np.random.default_rng(seed)
    g = N_GATES[op]

    def r(*shape, scale=0.5):
        return (rng.standard_normal(shape) * scale).astype(dtype)

    xs = (seq, batch, inp) if layout == 0 else (batch, seq, inp)
    hs = (n_dir, batch, hidden) if layout == 0 else (batch, n_dir, hidden)
    feeds: dict[str, np.ndarray | None] = {
        "X": r(*xs, scale=1.0),
        "W": r(n_dir, g * hidden, inp),
        "R": r(n_dir, g * hidden, hidden),
        "B": r(n_dir, 2 * g * hidden) if bias else None,
        "sequence_lens": None,
        "initial_h": r(*hs) if init else None,
    }
    if op == "LSTM":
        feeds["initial_c"] = r(*hs) if init else None
        feeds["P"] = r(n_dir, 3 * hidden) if peep else None
    return feeds


def check_node(
    op, inputs, attrs, opset, n_outputs=1, rtol=1e-5, atol=1e-6, oracle="ref", output_names=None
):
    """oracle.check_node, but outputs that onnx shape inference leaves without a rank (old
    opsets such as GRU-3) are declared with the oracle's rank and X's element type, since the
    session requires typed, ranked graph outputs."""
    model = make_node_model(op, inputs, attrs, opset, "", n_outputs, output_names)
    feeds = {k: v for k, v in inputs.items() if v is not None}
    want = reference_outputs(model, feeds) if oracle == "ref" else ort_outputs(model, feeds)
    for out, w in zip(model.graph.output, want):
        tt = out.type.tensor_type
        if not tt.HasField("shape") or tt.elem_type == 0:
            tt.elem_type = onnx.helper.np_dtype_to_tensor_dtype(inputs["X"].dtype)
            tt.ClearField("shape")
            for i in range(np.asarray(w).ndim):
                tt.shape.dim.add().dim_param = f"d{i}"
    got = onnxjit.InferenceSession(model.SerializeToString()).run(None, feeds)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, rtol, atol, f"{op}-{opset} output {i}")
    return got


def n_out(op: str) -> int:
    return 3 if op == "LSTM" else 2


DIRS = {"forward": 1, "reverse": 1, "bidirectional": 2}


# One row per op x version x direction x dtype; version 22 is the newest schema and resolves
# to our since-14 implementation.
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("opset", [7, 14, 22])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rnn_ref_directions(op, opset, direction, dtype):
    feeds = make_inputs(op, n_dir=DIRS[direction], dtype=dtype, peep=(op == "LSTM"))
    attrs = {"hidden_size": 6, "direction": direction}
    check_node(op, feeds, attrs, opset=opset, n_outputs=n_out(op), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_rnn_ref_layout1(op, direction):
    feeds = make_inputs(op, n_dir=DIRS[direction], layout=1)
    attrs = {"hidden_size": 6, "direction": direction, "layout": 1}
    check_node(op, feeds, attrs, opset=14, n_outputs=n_out(op), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_rnn_ref_defaults_no_bias_no_initial(op):
    feeds = make_inputs(op, bias=False, init=False)
    check_node(op, feeds, {"hidden_size": 6}, opset=14, n_outputs=n_out(op), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("opset", [3, 7, 14])
def test_gru_linear_before_reset(lbr, opset):
    feeds = make_inputs("GRU", n_dir=2)
    attrs = {"hidden_size": 6, "direction": "bidirectional", "linear_before_reset": lbr}
    check_node("GRU", feeds, attrs, opset=opset, n_outputs=2, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_rnn_version1(op):
    # Version 1 of each op (GRU-1 has no linear_before_reset and spells its default direction
    # "foward"; all accept output_sequence). Neither oracle runs version 1 (the reference
    # evaluator rejects output_sequence and has no RNN-1; onnxruntime has no kernel), and the
    # semantics equal version 7's, so the oracle is the reference evaluator on the same node at
    # opset 7.
    feeds = make_inputs(op)
    attrs = {"hidden_size": 6}
    want = reference_outputs(
        make_node_model(op, feeds, attrs, 7, "", n_out(op)),
        {k: v for k, v in feeds.items() if v is not None},
    )
    model = make_node_model(op, feeds, {**attrs, "output_sequence": 1}, 1, "", n_out(op))
    for out, w in zip(model.graph.output, want):
        tt = out.type.tensor_type
        tt.elem_type = onnx.TensorProto.FLOAT
        tt.ClearField("shape")
        for d in w.shape:
            tt.shape.dim.add().dim_value = d
    sess = onnxjit.InferenceSession(model.SerializeToString())
    got = sess.run(None, {k: v for k, v in feeds.items() if v is not None})
    for g, w in zip(got, want):
        assert_close(g, w, 1e-4, 1e-5, f"{op}-1")


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_rnn_only_last_state(op):
    # Y omitted: only Y_h (and Y_c) are produced.
    feeds = make_inputs(op, n_dir=2)
    outs = ["", "yh", "yc"] if op == "LSTM" else ["", "yh"]
    check_node(
        op, feeds, {"hidden_size": 6, "direction": "bidirectional"}, opset=14,
        n_outputs=len(outs), output_names=outs, rtol=1e-4, atol=1e-5,
    )  # fmt: skip


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_rnn_float16(op):
    feeds = make_inputs(op, dtype=np.float16)
    check_node(op, feeds, {"hidden_size": 6}, opset=14, n_outputs=n_out(op), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_rnn_zero_batch(op):
    feeds = make_inputs(op, batch=0)
    check_node(op, feeds, {"hidden_size": 6}, opset=14, n_outputs=n_out(op))


# ---- features the reference evaluator ignores: onnxruntime is the oracle ----------------------


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_rnn_sequence_lens(op, direction):
    feeds = make_inputs(op, seq=5, batch=4, n_dir=DIRS[direction])
    feeds["sequence_lens"] = np.array([5, 2, 0, 3], dtype=np.int32)
    attrs = {"hidden_size": 6, "direction": direction}
    check_node(op, feeds, attrs, opset=14, n_outputs=n_out(op), rtol=1e-4, atol=1e-5, oracle="ort")


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["reverse", "bidirectional"])
def test_rnn_sequence_lens_layout1(op, direction):
    # onnxruntime rejects layout=1, so the oracle is onnxruntime on the layout-0 node with
    # transposed inputs, its outputs transposed back.
    feeds = make_inputs(op, seq=5, batch=4, n_dir=DIRS[direction])
    feeds["sequence_lens"] = np.array([1, 5, 0, 3], dtype=np.int32)
    attrs = {"hidden_size": 6, "direction": direction}
    ref_model = make_node_model(op, feeds, attrs, 14, "", n_out(op))
    want = ort_outputs(ref_model, {k: v for k, v in feeds.items() if v is not None})
    want = [want[0].transpose(2, 0, 1, 3)] + [w.transpose(1, 0, 2) for w in want[1:]]
    f1 = dict(feeds)
    f1["X"] = np.ascontiguousarray(feeds["X"].transpose(1, 0, 2))
    for k in ("initial_h", "initial_c"):
        if f1.get(k) is not None:
            f1[k] = np.ascontiguousarray(f1[k].transpose(1, 0, 2))
    model = make_node_model(op, f1, {**attrs, "layout": 1}, 14, "", n_out(op))
    got = onnxjit.InferenceSession(model.SerializeToString()).run(
        None, {k: v for k, v in f1.items() if v is not None}
    )
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, 1e-4, 1e-5, f"{op} layout 1 output {i}")


ACTS = [
    ("Relu", [], []),
    ("HardSigmoid", [0.3], [0.4]),
    ("Affine", [0.7], [0.1]),
    ("LeakyRelu", [0.2], []),
    ("ThresholdedRelu", [0.1], []),
    ("ScaledTanh", [1.5], [0.5]),
    ("Elu", [0.8], []),
    ("Softsign", [], []),
    ("Softplus", [], []),
    ("Sigmoid", [], []),
    ("HardSigmoid", [], []),  # defaults alpha=0.2, beta=0.5
]


@pytest.mark.parametrize("name,alpha,beta", ACTS)
def test_rnn_activations(name, alpha, beta):
    feeds = make_inputs("RNN")
    attrs = {"hidden_size": 6, "activations": [name]}
    if alpha:
        attrs["activation_alpha"] = alpha
    if beta:
        attrs["activation_beta"] = beta
    check_node("RNN", feeds, attrs, opset=14, n_outputs=2, rtol=1e-4, atol=1e-5, oracle="ort")


def test_lstm_activations_consumed_in_order():
    # alpha/beta are consumed by the activations that take them, in order (f, g, h, then the
    # reverse direction's f, g, h).
    feeds = make_inputs("LSTM", n_dir=2)
    attrs = {
        "hidden_size": 6,
        "direction": "bidirectional",
        "activations": ["HardSigmoid", "Tanh", "ScaledTanh", "Sigmoid", "Softsign", "Affine"],
        "activation_alpha": [0.25, 1.2, 0.9],
        "activation_beta": [0.45, 0.7, 0.05],
    }
    check_node("LSTM", feeds, attrs, opset=14, n_outputs=3, rtol=1e-4, atol=1e-5, oracle="ort")


def test_gru_activations():
    feeds = make_inputs("GRU")
    attrs = {
        "hidden_size": 6,
        "activations": ["HardSigmoid", "LeakyRelu"],
        "activation_alpha": [0.3, 0.05],
        "activation_beta": [0.6],
    }
    check_node("GRU", feeds, attrs, opset=14, n_outputs=2, rtol=1e-4, atol=1e-5, oracle="ort")


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_rnn_clip(op):
    feeds = make_inputs(op, n_dir=2)
    feeds["X"] *= 4
    attrs = {"hidden_size": 6, "direction": "bidirectional", "clip": 0.5}
    check_node(op, feeds, attrs, opset=14, n_outputs=n_out(op), rtol=1e-4, atol=1e-5, oracle="ort")


def test_lstm_input_forget():
    feeds = make_inputs("LSTM", peep=True)
    attrs = {"hidden_size": 6, "input_forget": 1}
    check_node("LSTM", feeds, attrs, opset=14, n_outputs=3, rtol=1e-4, atol=1e-5, oracle="ort")


def test_gru_lbr_sequence_lens_reverse():
    feeds = make_inputs("GRU", seq=6, batch=3)
    feeds["sequence_lens"] = np.array([1, 6, 4], dtype=np.int32)
    attrs = {"hidden_size": 6, "direction": "reverse", "linear_before_reset": 1}
    check_node("GRU", feeds, attrs, opset=14, n_outputs=2, rtol=1e-4, atol=1e-5, oracle="ort")


def test_rnn_bad_weight_shape_names_node():
    feeds = make_inputs("RNN")
    feeds["W"] = feeds["W"][:, :, :3]
    model = make_node_model("RNN", feeds, {"hidden_size": 6}, opset=14, n_outputs=2)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    with pytest.raises(ValueError, match="W must have shape"):
        sess.run(None, {k: v for k, v in feeds.items() if v is not None})
