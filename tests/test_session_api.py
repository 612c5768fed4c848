"""The session API (onnxjit/session.py, onnxjit/options.py) against onnxruntime's answers.

Metadata calls (get_inputs/get_outputs/get_overridable_initializers/get_modelmeta) are compared
with onnxruntime on the same model; feed validation has one test per error; every
SessionOptions/RunOptions field or method that onnxjit does not implement must raise
NotImplementedError naming itself instead of being ignored.
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.errors import InvalidInputError, UnsupportedOperatorError
from onnxjit.session import decode_model_version

F = TensorProto.FLOAT


def model_of(
    nodes, inputs, outputs, inits=(), opset: int = 17, ir_version: int = 8, **props
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, props.pop("graph_name", "g"), inputs, outputs, list(inits))
    graph.doc_string = props.pop("graph_doc", "")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **props)
    model.ir_version = ir_version
    return model


def ort_session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def args(nodeargs) -> list[tuple]:
    return [(a.name, a.type, list(a.shape) if a.shape is not None else None) for a in nodeargs]


# Identity on one input per element type; shapes mix fixed dims, dim names and unknown dims.
_TYPED = [
    ("f32", TensorProto.FLOAT, ["N", 3]),
    ("f64", TensorProto.DOUBLE, [2, None]),
    ("f16", TensorProto.FLOAT16, []),
    ("bf16", TensorProto.BFLOAT16, [1]),
    ("i64", TensorProto.INT64, ["batch", "seq"]),
    ("i32", TensorProto.INT32, [4]),
    ("u8", TensorProto.UINT8, [2, 2]),
    ("b", TensorProto.BOOL, ["N"]),
    ("s", TensorProto.STRING, [None]),
]


def typed_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Identity", [n], [n + "_out"]) for n, _, _ in _TYPED]
    ins = [helper.make_tensor_value_info(n, t, s) for n, t, s in _TYPED]
    outs = [helper.make_tensor_value_info(n + "_out", t, s) for n, t, s in _TYPED]
    return model_of(nodes, ins, outs)


def overridable_model() -> onnx.ModelProto:
    """y = x + w; w is an initializer that is also a graph input; k is a plain initializer."""
    w = numpy_helper.from_array(np.full((2, 3), 10, np.float32), "w")
    k = numpy_helper.from_array(np.ones((2, 3), np.float32), "k")
    nodes = [
        helper.make_node("Add", ["x", "w"], ["s"]),
        helper.make_node("Add", ["s", "k"], ["y"]),
        helper.make_node("Identity", ["x"], ["x_copy"]),
    ]
    ins = [
        helper.make_tensor_value_info("x", F, ["N", 3]),
        helper.make_tensor_value_info("w", F, [2, 3]),
    ]
    outs = [
        helper.make_tensor_value_info("y", F, [2, 3]),
        helper.make_tensor_value_info("x_copy", F, ["N", 3]),
    ]
    return model_of(nodes, ins, outs, inits=[w, k])


def two_input_model() -> onnx.ModelProto:
    """Two inputs declared [N, 3]; outputs their identities."""
    nodes = [
        helper.make_node("Identity", ["a"], ["a2"]),
        helper.make_node("Identity", ["b"], ["b2"]),
    ]
    ins = [helper.make_tensor_value_info(n, F, ["N", 3]) for n in ("a", "b")]
    outs = [helper.make_tensor_value_info(n, F, ["N", 3]) for n in ("a2", "b2")]
    return model_of(nodes, ins, outs)


X = np.arange(6, dtype=np.float32).reshape(2, 3)


# -- construction -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["path", "bytes", "proto"])
def test_construct_from_each_source(kind, tmp_path):
    model = overridable_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    source = {"path": str(path), "bytes": model.SerializeToString(), "proto": model}[kind]
    sess = onnxjit.InferenceSession(source, onnxjit.SessionOptions(), ["CPUExecutionProvider"])
    want = ort_session(model).run(None, {"x": X})
    got = sess.run(None, {"x": X})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w)


def no_gpu(monkeypatch) -> None:
    """Make CUDA unusable through onnxjit.providers' seam: whether this machine (or numba-cuda's
    simulator, which tests/test_cuda_api.py turns on for the whole run) has a GPU must not
    decide these tests."""
    import onnxjit.providers

    monkeypatch.setattr(
        onnxjit.providers, "cuda_unavailable_reason", lambda device_id=0: "no GPU in this test"
    )


def test_providers(monkeypatch):
    no_gpu(monkeypatch)
    model = overridable_model()
    assert onnxjit.InferenceSession(model).get_providers() == ["CPUExecutionProvider"]
    assert ort_session(model).get_providers() == ["CPUExecutionProvider"]
    sess = onnxjit.InferenceSession(model, providers=[("CPUExecutionProvider", {})])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    assert onnxjit.get_available_providers() == ["CPUExecutionProvider"]
    assert onnxjit.get_device() == ort.get_device() == "CPU"


def test_unknown_provider():
    with pytest.raises(ValueError, match="unknown execution provider 'TPUProvider'"):
        onnxjit.InferenceSession(overridable_model(), providers=["TPUProvider"])


def test_cuda_provider_falls_back_with_a_warning(monkeypatch):
    no_gpu(monkeypatch)
    with pytest.warns(
        RuntimeWarning,
        match="CUDAExecutionProvider is not available: no GPU in this test; using CPUExecution",
    ):
        sess = onnxjit.InferenceSession(
            overridable_model(), providers=["CUDAExecutionProvider", "CPUExecutionProvider"]
        )
    assert sess.get_providers() == ["CPUExecutionProvider"]


def test_provider_options_not_implemented():
    with pytest.raises(NotImplementedError, match=r"provider options \['arena'\]"):
        onnxjit.InferenceSession(
            overridable_model(), providers=[("CPUExecutionProvider", {"arena": "0"})]
        )
    with pytest.raises(NotImplementedError, match="not implemented"):
        onnxjit.InferenceSession(
            overridable_model(),
            providers=["CPUExecutionProvider"],
            provider_options=[{"arena": "0"}],
        )


def test_onnxruntime_options_object_refused():
    with pytest.raises(TypeError, match="must be an onnxjit.SessionOptions"):
        onnxjit.InferenceSession(overridable_model(), ort.SessionOptions())
    sess = onnxjit.InferenceSession(overridable_model())
    with pytest.raises(TypeError, match="must be an onnxjit.RunOptions"):
        sess.run(None, {"x": X}, ort.RunOptions())


# -- metadata against onnxruntime -------------------------------------------------------------


def test_get_inputs_and_outputs_match_onnxruntime():
    model = typed_model()
    sess, oracle = onnxjit.InferenceSession(model), ort_session(model)
    assert args(sess.get_inputs()) == args(oracle.get_inputs())
    assert args(sess.get_outputs()) == args(oracle.get_outputs())
    # Spot checks so that a shared mistake cannot hide.
    first = sess.get_inputs()[0]
    assert (first.name, first.type, first.shape) == ("f32", "tensor(float)", ["N", 3])
    assert sess.get_inputs()[1].shape == [2, None]
    assert sess.get_inputs()[2].shape == []


def test_get_overridable_initializers_match_onnxruntime():
    model = overridable_model()
    sess, oracle = onnxjit.InferenceSession(model), ort_session(model)
    assert (
        args(sess.get_inputs()) == args(oracle.get_inputs()) == [("x", "tensor(float)", ["N", 3])]
    )
    assert args(sess.get_overridable_initializers()) == args(oracle.get_overridable_initializers())
    assert [a.name for a in sess.get_overridable_initializers()] == ["w"]


def test_overriding_an_initializer():
    model = overridable_model()
    sess, oracle = onnxjit.InferenceSession(model), ort_session(model)
    w = np.full((2, 3), -1, np.float32)
    for feed in ({"x": X}, {"x": X, "w": w}, {"x": X}):
        for g, o in zip(sess.run(None, feed), oracle.run(None, feed)):
            np.testing.assert_allclose(g, o)


@pytest.mark.parametrize("level", [0, 99])
def test_overridable_initializer_is_not_constant_folded(level):
    # y = w + k reads only initializers; w can be fed, so no optimisation level may fold it.
    w = numpy_helper.from_array(np.full((2, 3), 10, np.float32), "w")
    k = numpy_helper.from_array(np.ones((2, 3), np.float32), "k")
    model = model_of(
        [helper.make_node("Add", ["w", "k"], ["y"])],
        [helper.make_tensor_value_info("w", F, [2, 3])],
        [helper.make_tensor_value_info("y", F, [2, 3])],
        inits=[w, k],
    )
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel(level)
    sess, oracle = onnxjit.InferenceSession(model, so), ort_session(model)
    fed = {"w": np.zeros((2, 3), np.float32)}
    for feed in ({}, fed, {}):
        np.testing.assert_array_equal(sess.run(None, feed)[0], oracle.run(None, feed)[0])


def test_plain_initializer_cannot_be_fed():
    sess = onnxjit.InferenceSession(overridable_model())
    with pytest.raises(InvalidInputError, match="input 'k' is not an input of the model"):
        sess.run(None, {"x": X, "k": X})


def _meta_model(version: int) -> onnx.ModelProto:
    model = overridable_model()
    model.producer_name = "tests"
    model.producer_version = "1.0"
    model.domain = "org.example"
    model.doc_string = "a model for metadata"
    model.graph.name = "metadata_graph"
    model.graph.doc_string = "the graph's doc"
    model.model_version = version
    helper.set_model_props(model, {"author": "me", "licence": "MIT"})
    return model


def test_get_modelmeta_matches_onnxruntime():
    model = _meta_model(7)
    meta, want = onnxjit.InferenceSession(model).get_modelmeta(), ort_session(model).get_modelmeta()
    for field in (
        "producer_name",
        "graph_name",
        "domain",
        "description",
        "graph_description",
        "version",
        "custom_metadata_map",
    ):
        assert getattr(meta, field) == getattr(want, field), field
    assert meta.version == 7 and meta.custom_metadata_map == {"author": "me", "licence": "MIT"}


def test_model_version_semver_decoded():
    packed = (1 << 48) | (2 << 32) | 3  # MAJOR=1 (2 bytes), MINOR=2 (2 bytes), PATCH=3 (4 bytes)
    meta = onnxjit.InferenceSession(_meta_model(packed)).get_modelmeta()
    assert meta.version == (1, 2, 3)
    assert (meta.version.major, meta.version.minor, meta.version.patch) == (1, 2, 3)
    assert str(meta.version) == "1.2.3"
    # onnxruntime reports the raw integer; it is the same 64-bit value.
    assert ort_session(_meta_model(packed)).get_modelmeta().version == packed


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (0, 0),
        (12345, 12345),
        ((1 << 32) - 1, (1 << 32) - 1),  # top four bytes zero: a plain integer
        (1 << 32, (0, 1, 0)),
        ((0xFFFF << 48) | (0xFFFF << 32) | 0xFFFFFFFF, (0xFFFF, 0xFFFF, 0xFFFFFFFF)),
        (-1, (0xFFFF, 0xFFFF, 0xFFFFFFFF)),  # int64 -1 has every bit set
    ],
)
def test_decode_model_version(raw, want):
    got = decode_model_version(raw)
    assert got == want
    assert isinstance(got, int) == isinstance(want, int)


def test_demo_model_version_is_semver():
    from onnxjit.demo import DEMO_PATH

    meta = onnx.load(str(DEMO_PATH))
    assert str(decode_model_version(meta.model_version)) == "1.0.0"


# -- run() outputs ----------------------------------------------------------------------------


def test_run_all_outputs_subset_and_order():
    sess = onnxjit.InferenceSession(overridable_model())
    y, x_copy = sess.run(None, {"x": X})
    assert sess.run([], {"x": X})[0].shape == y.shape  # an empty list means all outputs
    (only,) = sess.run(["x_copy"], {"x": X})
    np.testing.assert_array_equal(only, x_copy)
    swapped = sess.run(["x_copy", "y"], {"x": X})
    np.testing.assert_array_equal(swapped[1], y)


def test_run_unknown_output_name():
    sess = onnxjit.InferenceSession(overridable_model())
    with pytest.raises(InvalidInputError) as info:
        sess.run(["z"], {"x": X})
    msg = str(info.value)
    assert "output 'z' is not an output of the model" in msg and "['y', 'x_copy']" in msg


def test_run_options_terminate_and_log_fields():
    sess = onnxjit.InferenceSession(overridable_model())
    ro = onnxjit.RunOptions()
    ro.log_severity_level = 3
    ro.logid = "call-1"
    assert len(sess.run(None, {"x": X}, ro)) == 2
    ro.terminate = True
    with pytest.raises(InvalidInputError, match="RunOptions.terminate = True"):
        sess.run(None, {"x": X}, ro)


# -- feed validation --------------------------------------------------------------------------


def _rejected(sess, feed, *needles):
    with pytest.raises(InvalidInputError) as info:
        sess.run(None, feed)
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, (needle, msg)
    # The session stays usable after a rejected feed.
    good = {"a": X, "b": X + 1}
    np.testing.assert_array_equal(sess.run(None, good)[1], X + 1)
    return msg


@pytest.fixture(scope="module")
def two():
    return onnxjit.InferenceSession(two_input_model())


def test_feed_missing_input(two):
    _rejected(two, {"a": X}, "input 'b' (tensor(float), shape [N, 3]) is missing", "add it")


def test_feed_unknown_input_name(two):
    _rejected(two, {"a": X, "b": X, "c": X}, "input 'c' is not an input", "['a', 'b']")


def test_feed_wrong_dtype(two):
    _rejected(
        two,
        {"a": X, "b": X.astype(np.float64)},
        "input 'b': expected element type tensor(float)",
        "found numpy float64",
        ".astype(np.float32)",
    )


def test_feed_wrong_rank(two):
    _rejected(
        two,
        {"a": X, "b": X.reshape(-1)},
        "input 'b': expected rank 2 (shape [N, 3])",
        "found rank 1 (shape [6])",
    )


def test_feed_wrong_fixed_dimension(two):
    _rejected(
        two,
        {"a": X, "b": np.zeros((2, 4), np.float32)},
        "input 'b': dimension 1 must be 3",
        "found 4",
    )


def test_feed_dimension_variable_disagrees(two):
    msg = _rejected(
        two,
        {"a": X, "b": X[:1]},
        "dimension variable 'N'",
        "input 'a' gives N=2",
        "input 'b' dimension 0 gives N=1",
    )
    assert msg.count("\n  - ") == 1
    # onnxruntime does not check this: it runs the same feed.
    assert len(ort_session(two_input_model()).run(None, {"a": X, "b": X[:1]})) == 2


def test_feed_several_problems_in_one_error(two):
    msg = _rejected(two, {"b": X.astype(np.int64), "zz": X}, "'zz'", "'a'", "'b'")
    assert msg.count("\n  - ") == 3


def test_feed_not_a_dict(two):
    with pytest.raises(InvalidInputError, match="input_feed must be a dict"):
        two.run(None, [X, X])


def test_feed_non_contiguous_is_accepted(two):
    a = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(two.run(["a2"], {"a": a, "b": X})[0], a)


def test_free_dimension_override():
    so = onnxjit.SessionOptions()
    so.add_free_dimension_override_by_name("N", 2)
    sess = onnxjit.InferenceSession(two_input_model(), so)
    assert len(sess.run(None, {"a": X, "b": X})) == 2
    with pytest.raises(InvalidInputError) as info:
        sess.run(None, {"a": X[:1], "b": X[:1]})
    msg = str(info.value)
    assert "a free-dimension override gives N=2" in msg and "input 'a'" in msg


# -- options ----------------------------------------------------------------------------------


def test_implemented_session_options():
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = onnxjit.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    so.log_verbosity_level = 0
    so.logid = "test"
    so.use_deterministic_compute = True
    # Setting an unimplemented field to onnxruntime's default is fine.
    so.enable_cpu_mem_arena = True
    so.enable_mem_pattern = True
    so.enable_mem_reuse = True
    so.optimized_model_filepath = ""
    so.use_per_session_threads = True
    sess = onnxjit.InferenceSession(overridable_model(), so)
    assert sess.get_session_options() is so
    assert len(sess.run(None, {"x": X})) == 2


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("execution_order", 1),
        ("use_per_session_threads", False),
        ("execution_mode", onnxjit.ExecutionMode.ORT_PARALLEL),
    ],
)
def test_session_option_not_implemented(field, value):
    # The same field exists on onnxruntime's SessionOptions.
    assert hasattr(ort.SessionOptions(), field)
    so = onnxjit.SessionOptions()
    with pytest.raises(NotImplementedError) as info:
        setattr(so, field, value)
    assert isinstance(info.value, UnsupportedOperatorError)
    msg = str(info.value)
    assert f"SessionOptions.{field}" in msg and "is not implemented by onnxjit" in msg


@pytest.mark.parametrize(
    ("method", "call_args"),
    [
        ("add_free_dimension_override_by_denotation", ("DATA_BATCH", 1)),
        ("add_initializer", ("w", np.zeros(1))),
        ("register_custom_ops_library", ("libcustom.so",)),
        ("add_external_initializers", (["w"], [np.zeros(1)])),
        ("add_external_initializers_from_files_in_memory", ([], [], [])),
        ("add_provider", ("CPUExecutionProvider", {})),
        ("add_provider_for_devices", ([], {})),
        ("set_provider_selection_policy", (0,)),
        ("set_provider_selection_policy_delegate", (None,)),
        ("set_load_cancellation_flag", (True,)),
        ("set_ep_context_data_read_func", (None,)),
        ("clear_ep_context_data_read_func", ()),
    ],
)
def test_session_option_method_not_implemented(method, call_args):
    assert hasattr(ort.SessionOptions(), method)
    with pytest.raises(NotImplementedError) as info:
        getattr(onnxjit.SessionOptions(), method)(*call_args)
    msg = str(info.value)
    assert f"SessionOptions.{method}" in msg and "not implemented by onnxjit" in msg


def test_every_onnxruntime_session_option_is_known():
    # Each public name of onnxruntime's SessionOptions exists here (implemented or refusing).
    mine = onnxjit.SessionOptions()
    missing = [
        n for n in dir(ort.SessionOptions()) if not n.startswith("_") and not hasattr(mine, n)
    ]
    assert missing == []
    missing = [
        n
        for n in dir(ort.RunOptions())
        if not n.startswith("_") and not hasattr(onnxjit.RunOptions(), n)
    ]
    assert missing == []


def test_run_option_not_implemented():
    ro = onnxjit.RunOptions()
    ro.only_execute_path_to_fetches = False
    with pytest.raises(NotImplementedError, match="RunOptions.only_execute_path_to_fetches"):
        ro.only_execute_path_to_fetches = True
    with pytest.raises(NotImplementedError, match="RunOptions.add_active_adapter"):
        ro.add_active_adapter(object())


def test_unknown_option_name_rejected():
    so = onnxjit.SessionOptions()
    with pytest.raises(AttributeError, match="SessionOptions has no option 'enable_profilng'"):
        so.enable_profilng = True  # typo
    with pytest.raises(AttributeError, match="RunOptions has no option 'terminat'"):
        onnxjit.RunOptions().terminat = True
    with pytest.raises(AttributeError):
        ort.SessionOptions().enable_profilng = True  # onnxruntime refuses it too


def test_config_entries_round_trip_with_a_warning():
    so = onnxjit.SessionOptions()
    with pytest.warns(RuntimeWarning, match="does not act on it"):
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    with pytest.raises(KeyError, match="not set"):
        so.get_session_config_entry("nope")
    ro = onnxjit.RunOptions()
    with pytest.warns(RuntimeWarning):
        ro.add_run_config_entry("k", "v")
    assert ro.get_run_config_entry("k") == "v"


# -- profiling --------------------------------------------------------------------------------


def test_profiling_writes_chrome_trace(tmp_path):
    so = onnxjit.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = onnxjit.InferenceSession(overridable_model(), so)
    for _ in range(2):
        sess.run(None, {"x": X})
    path = sess.end_profiling()
    assert path.startswith(str(tmp_path / "prof")) and path.endswith(".json")
    with open(path) as f:
        events = json.load(f)
    assert isinstance(events, list) and events
    for e in events:
        assert {"name", "cat", "ph", "ts", "dur", "pid", "tid"} <= set(e)
        assert e["ph"] == "X" and e["dur"] >= 0
    names = [e["name"] for e in events]
    assert names.count("model_run") == 2 and names.count("session_initialization") == 1
    nodes = [e for e in events if e["cat"] == "Node"]
    # the first run plans (and compiles); the second's steps are each one event
    assert len(nodes) == len(sess.stats()["plans"][0]["steps"]) > 0
    assert all("-" in e["args"]["op"] for e in nodes)  # e.g. "Add-14"
    # Profiling stops after end_profiling; a second call writes nothing.
    sess.run(None, {"x": X})
    assert sess.end_profiling() == ""
    assert len(os.listdir(tmp_path)) == 1


def test_end_profiling_without_profiling():
    sess = onnxjit.InferenceSession(overridable_model())
    assert sess.end_profiling() == ""


def test_warnings_are_not_printed(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sess = onnxjit.InferenceSession(overridable_model())
        sess.run(None, {"x": X})
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_python_lists_take_the_declared_type_but_arrays_are_never_cast():
    sess = onnxjit.InferenceSession(two_input_model().SerializeToString())
    a2, _ = sess.run(None, {"a": [[1, 2, 3]], "b": [[0.5, 1.5, 2.5]]})
    assert a2.dtype == np.float32 and a2.tolist() == [[1.0, 2.0, 3.0]]
    expected = r"input 'a': expected element type tensor\(float\)"
    with pytest.raises(InvalidInputError, match=expected):
        sess.run(None, {"a": np.ones((1, 3), np.float64), "b": X[:1]})
