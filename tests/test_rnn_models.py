"""Recurrent models and nodes whose weights are initializers (the planned, whole-sequence path).

Two groups:

* torch ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` modules (seeded random weights) exported by the
  TorchScript exporter with dynamic batch and sequence axes, run at two shapes and compared
  with onnxruntime and with torch itself: a bidirectional 2-layer batch-first LSTM taking its
  initial states, a 2-layer GRU (``linear_before_reset=1``, as torch exports it) with an
  initial state, a ReLU ``nn.RNN`` (``activations=["Relu"]``) and an Embedding + LSTM + Linear
  language model returning its states.
* single LSTM / GRU / RNN nodes with W, R, B (and P) as initializers, so that the plan binds
  the sequence kernel: ``sequence_lens`` shorter than the sequence, peepholes, clip,
  ``input_forget``, ``layout=1``, non-default activations (different per direction), GRU with
  ``linear_before_reset`` 0 and 1, float64, and batches that the sequence kernel splits over
  two threads. The oracle is onnxruntime (for ``layout=1``, which onnxruntime rejects:
  onnxruntime on the layout-0 node with transposed inputs, its outputs transposed back).

The node tests in ``test_ops_rnn.py`` feed the weights as graph inputs, which runs the
operators' implementations; these go through their lowerings.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
from oracle import (
    assert_close,
    declare_outputs_like,
    make_node_model,
    ort_outputs,
    reference_outputs,
)

import onnxjit

torch = pytest.importorskip("torch", reason="torch builds and exports the models")
pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle")

RTOL, ATOL = 1e-4, 1e-5


def _session(model_bytes: bytes, threads: int = 2) -> onnxjit.InferenceSession:
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = threads
    return onnxjit.InferenceSession(model_bytes, so)


# ---------------------------------------------------------------------------------------------
# exported torch models


class _BiLSTM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.LSTM(12, 24, 2, batch_first=True, bidirectional=True)
        self.head = torch.nn.Linear(48, 5)

    def forward(self, x, h0, c0):  # noqa: ANN001, ANN201
        y, (h, c) = self.rnn(x, (h0, c0))
        return self.head(y), h, c


class _GRU(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.GRU(12, 20, 2)
        self.head = torch.nn.Linear(20, 5)

    def forward(self, x, h0):  # noqa: ANN001, ANN201
        y, h = self.rnn(x, h0)
        return self.head(y), h


class _ReluRNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.RNN(12, 16, 1, nonlinearity="relu", batch_first=True)

    def forward(self, x):  # noqa: ANN001, ANN201
        y, h = self.rnn(x)
        return y, h


class _LanguageModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 16)
        self.rnn = torch.nn.LSTM(16, 32, 2, batch_first=True)
        self.head = torch.nn.Linear(32, 50)

    def forward(self, ids, h0, c0):  # noqa: ANN001, ANN201
        y, (h, c) = self.rnn(self.embed(ids), (h0, c0))
        return self.head(y), h, c


def _feeds(kind: str, batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def r(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    if kind == "bilstm":
        return {"x": r(batch, seq, 12), "h0": r(4, batch, 24, scale=0.5),
                "c0": r(4, batch, 24, scale=0.5)}  # fmt: skip
    if kind == "gru":
        return {"x": r(seq, batch, 12), "h0": r(2, batch, 20, scale=0.5)}
    if kind == "relu_rnn":
        return {"x": r(batch, seq, 12)}
    ids = rng.integers(0, 50, size=(batch, seq), dtype=np.int64)
    return {"ids": ids, "h0": r(2, batch, 32, scale=0.3), "c0": r(2, batch, 32, scale=0.3)}


_MODELS = {
    "bilstm": (_BiLSTM, ["y", "hn", "cn"], {"x": {0: "b", 1: "s"}, "h0": {1: "b"},
                                              "c0": {1: "b"}}),
    "gru": (_GRU, ["y", "hn"], {"x": {0: "s", 1: "b"}, "h0": {1: "b"}}),
    "relu_rnn": (_ReluRNN, ["y", "hn"], {"x": {0: "b", 1: "s"}}),
    "lm": (_LanguageModel, ["y", "hn", "cn"], {"ids": {0: "b", 1: "s"}, "h0": {1: "b"},
                                               "c0": {1: "b"}}),
}  # fmt: skip

_EXPORTED: dict[str, tuple[bytes, torch.nn.Module]] = {}


def _exported(kind: str) -> tuple[bytes, torch.nn.Module]:
    """The module of ``kind`` (seed 0) and its TorchScript export (opset 17, dynamic axes)."""
    if kind not in _EXPORTED:
        cls, outs, dyn = _MODELS[kind]
        torch.manual_seed(0)
        module = cls().eval()
        f = _feeds(kind, 2, 7, 0)
        buf = io.BytesIO()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module, tuple(torch.from_numpy(v) for v in f.values()), buf, dynamo=False,
                opset_version=17, input_names=list(f), output_names=outs, dynamic_axes=dyn,
            )  # fmt: skip
        _EXPORTED[kind] = (buf.getvalue(), module)
    return _EXPORTED[kind]


def test_exports_write_recurrent_nodes():
    """The exports hold the ONNX recurrent operators this file means to test (not a Loop or
    unrolled cells), with the attributes torch writes."""
    import onnx

    seen = {}
    for kind in _MODELS:
        model = onnx.load_from_string(_exported(kind)[0])
        for node in model.graph.node:
            if node.op_type in ("LSTM", "GRU", "RNN"):
                attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
                seen.setdefault(kind, []).append((node.op_type, attrs))
    assert [op for op, _ in seen["bilstm"]] == ["LSTM", "LSTM"]
    assert all(a.get("direction") == b"bidirectional" for _, a in seen["bilstm"])
    assert [(op, a.get("linear_before_reset")) for op, a in seen["gru"]] == [("GRU", 1)] * 2
    assert seen["relu_rnn"] == [("RNN", {"activations": [b"Relu"], "hidden_size": 16})]
    assert [op for op, _ in seen["lm"]] == ["LSTM", "LSTM"]


@pytest.mark.parametrize("kind", list(_MODELS))
@pytest.mark.parametrize("batch,seq,seed", [(2, 7, 1), (5, 13, 2), (1, 1, 3)])
def test_torch_model_against_ort_and_torch(kind, batch, seq, seed):
    model_bytes, module = _exported(kind)
    f = _feeds(kind, batch, seq, seed)
    got = _session(model_bytes).run(None, f)
    want = ort_outputs_bytes(model_bytes, f)
    with torch.no_grad():
        ref = module(*(torch.from_numpy(v) for v in f.values()))
    ref = [ref] if isinstance(ref, torch.Tensor) else list(ref)
    assert len(got) == len(want) == len(ref)
    for i, (g, w, t) in enumerate(zip(got, want, ref)):
        assert_close(g, w, RTOL, ATOL, f"{kind} output {i} against onnxruntime")
        assert_close(g, t.numpy(), RTOL, ATOL, f"{kind} output {i} against torch")


def ort_outputs_bytes(model_bytes: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


# ---------------------------------------------------------------------------------------------
# single nodes with initializer weights

N_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
N_DIR = {"forward": 1, "reverse": 1, "bidirectional": 2}


def _node_inputs(op, seq, batch, inp, hidden, n_dir, *, peep=False, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    g = N_GATES[op]

    def r(*shape, scale=0.5):
        return (rng.standard_normal(shape) * scale).astype(dtype)

    feeds = {
        "X": r(seq, batch, inp, scale=1.0),
        "W": r(n_dir, g * hidden, inp),
        "R": r(n_dir, g * hidden, hidden),
        "B": r(n_dir, 2 * g * hidden),
        "sequence_lens": None,
        "initial_h": r(n_dir, batch, hidden),
    }
    if op == "LSTM":
        feeds["initial_c"] = r(n_dir, batch, hidden)
        feeds["P"] = r(n_dir, 3 * hidden) if peep else None
    return feeds


def _check(op, feeds, attrs, layout=0, threads=2, rtol=RTOL, atol=ATOL):
    """onnxjit (weights as initializers, ``layout``) against onnxruntime (layout 0)."""
    n_out = 3 if op == "LSTM" else 2
    const = ("W", "R", "B", "P")
    model = make_node_model(op, feeds, attrs, 14, "", n_out, const_inputs=const)
    graph_feeds = {k: v for k, v in feeds.items() if v is not None and k not in const}
    want = ort_outputs(model, graph_feeds)
    if layout == 1:
        f1 = dict(feeds)
        f1["X"] = np.ascontiguousarray(feeds["X"].transpose(1, 0, 2))
        for k in ("initial_h", "initial_c"):
            if f1.get(k) is not None:
                f1[k] = np.ascontiguousarray(f1[k].transpose(1, 0, 2))
        model = make_node_model(op, f1, {**attrs, "layout": 1}, 14, "", n_out, const_inputs=const)
        graph_feeds = {k: v for k, v in f1.items() if v is not None and k not in const}
        want = [want[0].transpose(2, 0, 1, 3)] + [w.transpose(1, 0, 2) for w in want[1:]]
    sess = _session(model.SerializeToString(), threads)
    got = sess.run(None, graph_feeds)
    plan_steps = str(sess.stats()["plans"])
    assert "rnn.sequence" in plan_steps, "the node did not go through its lowering"
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype
        assert_close(g, w, rtol, atol, f"{op} output {i}")
    return got


@pytest.mark.parametrize("op,lbr", [("LSTM", 0), ("GRU", 0), ("GRU", 1), ("RNN", 0)])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_node_sequence_lens(op, lbr, direction, layout):
    """Rows shorter than the sequence (one of length 0, one full), with initial states."""
    feeds = _node_inputs(op, 9, 5, 7, 16, N_DIR[direction])
    feeds["sequence_lens"] = np.array([9, 3, 0, 6, 1], np.int32)
    attrs = {"hidden_size": 16, "direction": direction}
    if op == "GRU":
        attrs["linear_before_reset"] = lbr
    _check(op, feeds, attrs, layout)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_lstm_peepholes_and_clip(direction, layout):
    feeds = _node_inputs("LSTM", 8, 3, 5, 12, N_DIR[direction], peep=True, seed=1)
    feeds["X"] *= 4  # drive the gate inputs past the clip
    feeds["sequence_lens"] = np.array([8, 5, 2], np.int32)
    attrs = {"hidden_size": 12, "direction": direction, "clip": 0.7}
    _check("LSTM", feeds, attrs, layout)


def test_lstm_input_forget_peepholes():
    feeds = _node_inputs("LSTM", 6, 2, 4, 10, 1, peep=True, seed=2)
    _check("LSTM", feeds, {"hidden_size": 10, "input_forget": 1})


@pytest.mark.parametrize("op,lbr", [("GRU", 0), ("GRU", 1), ("RNN", 0)])
def test_node_clip(op, lbr):
    feeds = _node_inputs(op, 7, 3, 5, 12, 2, seed=3)
    feeds["X"] *= 4
    attrs = {"hidden_size": 12, "direction": "bidirectional", "clip": 0.5}
    if op == "GRU":
        attrs["linear_before_reset"] = lbr
    _check(op, feeds, attrs)


ACTIVATIONS = {
    # forward direction, reverse direction (alpha/beta consumed in order)
    "LSTM": (["HardSigmoid", "Softsign", "Relu", "Sigmoid", "Tanh", "ScaledTanh"],
             [0.3, 1.2], [0.4, 0.8]),
    "GRU": (["HardSigmoid", "LeakyRelu", "Sigmoid", "Elu"], [0.25, 0.1, 0.9], [0.45]),
    "RNN": (["Softplus", "Affine"], [0.7], [0.1]),
}  # fmt: skip


@pytest.mark.parametrize("op,lbr", [("LSTM", 0), ("GRU", 0), ("GRU", 1), ("RNN", 0)])
@pytest.mark.parametrize("layout", [0, 1])
def test_node_activations_per_direction(op, lbr, layout):
    names, alphas, betas = ACTIVATIONS[op]
    feeds = _node_inputs(op, 6, 4, 5, 10, 2, peep=True, seed=4)
    feeds["sequence_lens"] = np.array([6, 4, 1, 5], np.int32)
    attrs = {"hidden_size": 10, "direction": "bidirectional", "activations": names,
             "activation_alpha": alphas, "activation_beta": betas}  # fmt: skip
    if op == "GRU":
        attrs["linear_before_reset"] = lbr
    _check(op, feeds, attrs, layout)


@pytest.mark.parametrize("op,lbr", [("LSTM", 0), ("GRU", 0), ("GRU", 1), ("RNN", 0)])
@pytest.mark.parametrize("threads", [1, 2])
def test_node_batch_split_over_threads(op, lbr, threads):
    """A batch large enough that, on two threads, the rows are split between them (and a
    hidden size that is no multiple of the GEMM's panel width)."""
    feeds = _node_inputs(op, 20, 9, 24, 45, 1, seed=5)
    feeds["sequence_lens"] = np.array([20, 19, 3, 20, 0, 11, 20, 7, 14], np.int32)
    attrs = {"hidden_size": 45}
    if op == "GRU":
        attrs["linear_before_reset"] = lbr
    _check(op, feeds, attrs, threads=threads, rtol=1e-4, atol=3e-5)


def _wide_inputs(op, seq, batch, n_dir, seed, **kw):
    """A hidden size whose recurrent weights are large enough that, with more threads than
    rows, each step's hidden units are shared between threads. The recurrent weights are
    scaled to a gain of about one: at the default scale these widths make the recurrence
    chaotic, and the last bits of any two summation orders (onnxjit's on one thread among
    them) drift apart past the tolerance within ten steps."""
    hidden = 384 if op == "RNN" else 128
    feeds = _node_inputs(op, seq, batch, 24, hidden, n_dir, seed=seed, **kw)
    feeds["R"] *= 2 / np.sqrt(hidden)
    return feeds, hidden


@pytest.mark.parametrize("op,lbr", [("LSTM", 0), ("GRU", 0), ("GRU", 1), ("RNN", 0)])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("length", [11, 7])
def test_node_hidden_units_split_over_threads(op, lbr, direction, layout, length):
    """One sequence on two threads: the threads share every step's hidden units (a sequence
    shorter than the input leaves its last steps to pass the state through)."""
    feeds, hidden = _wide_inputs(op, 11, 1, 1, seed=8)
    feeds["sequence_lens"] = np.array([length], np.int32)
    attrs = {"hidden_size": hidden, "direction": direction}
    if op == "GRU":
        attrs["linear_before_reset"] = lbr
    _check(op, feeds, attrs, layout, threads=2, rtol=1e-4, atol=3e-5)


@pytest.mark.parametrize("op,lbr", [("LSTM", 0), ("GRU", 0), ("GRU", 1), ("RNN", 0)])
def test_node_hidden_units_split_with_activations_and_clip(op, lbr):
    """The split steps with non-default activations, clipping (and LSTM's peepholes)."""
    names, alphas, betas = ACTIVATIONS[op]
    feeds, hidden = _wide_inputs(op, 9, 1, 1, seed=9, peep=True)
    feeds["X"] *= 3
    attrs = {"hidden_size": hidden, "activations": names[: len(names) // 2], "clip": 0.8}
    attrs["activation_alpha"], attrs["activation_beta"] = alphas[:1], betas[:1]
    if op == "GRU":
        attrs["linear_before_reset"] = lbr
    _check(op, feeds, attrs, threads=2, rtol=1e-4, atol=3e-5)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_node_float64(op):
    """float64 (which onnxruntime's LSTM does not run): onnx's ReferenceEvaluator is the
    oracle, so full-length rows (it ignores ``sequence_lens``) and default activations."""
    feeds = _node_inputs(op, 6, 3, 5, 8, 2, dtype=np.float64, seed=6)
    const = ("W", "R", "B")
    n_out = 3 if op == "LSTM" else 2
    attrs = {"hidden_size": 8, "direction": "bidirectional"}
    model = make_node_model(op, feeds, attrs, 14, "", n_out, const_inputs=const)
    graph_feeds = {k: v for k, v in feeds.items() if v is not None and k not in const}
    want = reference_outputs(model, graph_feeds)
    declare_outputs_like(model, want)
    sess = _session(model.SerializeToString())
    got = sess.run(None, graph_feeds)
    assert "rnn.sequence" in str(sess.stats()["plans"])
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == np.float64
        assert_close(g, w, 1e-10, 1e-12, f"{op} float64 output {i}")


def test_node_only_y_h_without_states():
    """Y omitted (not written), no initial states, no bias."""
    feeds = _node_inputs("LSTM", 5, 2, 4, 6, 1, seed=7)
    feeds["B"] = None
    feeds["initial_h"] = feeds["initial_c"] = None
    model = make_node_model("LSTM", feeds, {"hidden_size": 6}, 14, "", 2,
                            output_names=["", "y_h"], const_inputs=("W", "R"))  # fmt: skip
    x = {"X": feeds["X"]}
    want = ort_outputs(model, x)
    sess = _session(model.SerializeToString())
    got = sess.run(None, x)
    assert "rnn.sequence" in str(sess.stats()["plans"])
    assert_close(got[0], want[0], RTOL, ATOL, "Y_h")


def test_node_sequence_lens_out_of_range_is_an_error():
    feeds = _node_inputs("GRU", 4, 2, 3, 5, 1)
    feeds["sequence_lens"] = np.array([4, 5], np.int32)
    model = make_node_model("GRU", feeds, {"hidden_size": 5}, 14, "", 2,
                            const_inputs=("W", "R", "B"))  # fmt: skip
    sess = _session(model.SerializeToString())
    run_feeds = {k: feeds[k] for k in ("X", "sequence_lens", "initial_h")}
    with pytest.raises(Exception, match="sequence_lens must hold 2 values in"):
        sess.run(None, run_feeds)
