"""onnxruntime's Python surface that ``import onnxjit as ort`` code calls (issue 46, item 1).

Each call runs on onnxjit and on onnxruntime with the same tiny model and the answers are
compared: results, exception types, run_async callback arguments. ``set_seed`` is checked for
reproducibility on onnxjit alone (the generators differ from onnxruntime's by design).
"""

from __future__ import annotations

import threading
import time
import warnings

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import onnxjit
from onnxjit.errors import InvalidInputError, OnnxJitError

F = TensorProto.FLOAT
ENGINES = pytest.mark.parametrize("rt", [onnxjit, onnxruntime], ids=["onnxjit", "ort"])


def _model(nodes, inputs, outputs, opsets=(("", 18),)) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8
    return model.SerializeToString()


# y = Relu(x), z = -x, seq = [x, x]
TWO = _model(
    [
        helper.make_node("Relu", ["x"], ["y"]),
        helper.make_node("Neg", ["x"], ["z"]),
        helper.make_node("SequenceConstruct", ["x", "x"], ["seq"]),
    ],
    [helper.make_tensor_value_info("x", F, ["N"])],
    [
        helper.make_tensor_value_info("y", F, ["N"]),
        helper.make_tensor_value_info("z", F, ["N"]),
        helper.make_value_info(
            "seq", helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, ["N"]))
        ),
    ],
)
X = np.array([1.0, -2.0, 3.0], np.float32)


def session(rt, model: bytes = TWO, **kwargs):
    if rt is onnxruntime:
        so = onnxruntime.SessionOptions()
        so.log_severity_level = 3
        kwargs.setdefault("sess_options", so)
    return rt.InferenceSession(model, providers=["CPUExecutionProvider"], **kwargs)


def both(fn):
    """``fn(rt)`` on each engine: ``("ok", value)`` or ``("raise", exception)``."""
    out = []
    for rt in (onnxjit, onnxruntime):
        try:
            out.append(("ok", fn(rt)))
        except Exception as e:
            out.append(("raise", e))
    return out


# -- module functions ----------------------------------------------------------------------------


def test_version_and_provider_lists():
    assert onnxjit.get_version_string() == onnxjit.__version__
    assert isinstance(onnxruntime.get_version_string(), str)
    providers = onnxjit.get_all_providers()
    assert providers[-1] == "CPUExecutionProvider" == onnxruntime.get_all_providers()[-1]
    assert set(providers) <= set(onnxruntime.get_all_providers())
    assert set(onnxjit.get_available_providers()) <= set(providers)
    assert "onnxjit" in onnxjit.get_build_info()
    onnxjit.disable_telemetry_events()
    onnxjit.enable_telemetry_events()
    onnxjit.preload_dlls()


@pytest.mark.parametrize("value", [-1, 5])
def test_logger_severity_out_of_range_raises_runtime_error(value):
    (ja, jv), (oa, ov) = both(lambda rt: rt.set_default_logger_severity(value))
    assert ja == oa == "raise"
    assert isinstance(jv, RuntimeError) and isinstance(ov, RuntimeError)


@pytest.mark.parametrize(
    "fn",
    ["set_default_logger_severity", "set_default_logger_verbosity", "set_seed"],
)
@pytest.mark.parametrize("value", ["x", 1.5])
def test_module_setters_refuse_non_integers_with_type_error(fn, value):
    (ja, jv), (oa, ov) = both(lambda rt: getattr(rt, fn)(value))
    assert ja == oa == "raise"
    assert isinstance(jv, TypeError) and isinstance(ov, TypeError)


def test_logger_severity_sets_the_onnxjit_logger():
    import logging

    logger = logging.getLogger("onnxjit")
    before = logger.level
    try:
        for sev, level in [(0, logging.DEBUG), (3, logging.ERROR), (4, logging.CRITICAL)]:
            assert onnxjit.set_default_logger_severity(sev) is None
            assert onnxruntime.set_default_logger_severity(sev) is None
            assert logger.level == level
        for verbosity in (0, 1, -1, 5):  # onnxruntime accepts any integer
            assert onnxjit.set_default_logger_verbosity(verbosity) is None
            assert onnxruntime.set_default_logger_verbosity(verbosity) is None
    finally:
        logger.setLevel(before)
        onnxruntime.set_default_logger_severity(2)
        onnxruntime.set_default_logger_verbosity(0)


# -- set_seed ------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _unseeded():
    """set_seed is process-wide: later tests get entropy-seeded generators again."""
    yield
    from onnxjit.ops import misc

    misc._RNGS.set_seed(None)


def _random_model(seeded: bool = False) -> bytes:
    seed = {"seed": 5.0} if seeded else {}
    nodes = [
        helper.make_node("RandomNormal", [], ["n"], shape=[64], name="normal", **seed),
        helper.make_node("RandomNormal", [], ["n2"], shape=[64], name="normal2"),
        helper.make_node("RandomUniformLike", ["x"], ["u"], name="uniform"),
        helper.make_node("Bernoulli", ["p"], ["b"], name="bern"),
        helper.make_node("Multinomial", ["logits"], ["m"], sample_size=16, name="multi"),
    ]
    return _model(
        nodes,
        [
            helper.make_tensor_value_info("x", F, [32]),
            helper.make_tensor_value_info("p", F, [32]),
            helper.make_tensor_value_info("logits", F, [2, 5]),
        ],
        [
            helper.make_tensor_value_info("n", F, [64]),
            helper.make_tensor_value_info("n2", F, [64]),
            helper.make_tensor_value_info("u", F, [32]),
            helper.make_tensor_value_info("b", F, [32]),
            helper.make_tensor_value_info("m", TensorProto.INT32, [2, 16]),
        ],
    )


_RFEED = {
    "x": np.zeros(32, np.float32),
    "p": np.full(32, 0.5, np.float32),
    "logits": np.zeros((2, 5), np.float32),
}


def _draws(model: bytes, runs: int = 2) -> list[list[np.ndarray]]:
    sess = onnxjit.InferenceSession(model)
    return [sess.run(None, _RFEED) for _ in range(runs)]


def _same(a: list[list[np.ndarray]], b: list[list[np.ndarray]]) -> bool:
    return all(np.array_equal(x, y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


def test_set_seed_makes_unseeded_random_ops_reproducible():
    model = _random_model()
    onnxjit.set_seed(1234)
    first = _draws(model)
    onnxjit.set_seed(1234)
    second = _draws(model)
    assert _same(first, second)  # every op, run after run
    assert not np.array_equal(first[0][0], first[1][0])  # runs still advance the generator
    assert not np.array_equal(first[0][0], first[0][1])  # two unseeded nodes differ
    onnxjit.set_seed(4321)
    assert not _same(_draws(model), first)


def test_set_seed_applies_to_a_session_created_before_it():
    model = _random_model()
    sess = onnxjit.InferenceSession(model)
    onnxjit.set_seed(7)
    a = sess.run(["n"], _RFEED)[0]
    onnxjit.set_seed(7)  # restarts the sequence, in existing sessions too
    assert np.array_equal(sess.run(["n"], _RFEED)[0], a)
    onnxjit.set_seed(7)
    assert np.array_equal(onnxjit.InferenceSession(model).run(["n"], _RFEED)[0], a)


def test_set_seed_leaves_seed_attributes_alone():
    model = _random_model(seeded=True)
    onnxjit.set_seed(1)
    a = _draws(model)
    onnxjit.set_seed(2)
    b = _draws(model)
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(a, b))  # "normal" has seed=5
    assert not np.array_equal(a[0][1], b[0][1])  # "normal2" follows set_seed
    onnxruntime.set_seed(1)  # onnxruntime has the function too


def test_set_seed_accepts_onnxruntime_integers():
    for seed in (-1, 0, 2**40, np.int64(3), True):
        onnxjit.set_seed(seed)
        onnxruntime.set_seed(seed)


# -- SessionOptions / RunOptions config entries ----------------------------------------------------


@pytest.mark.parametrize("which", ["session", "run"])
def test_missing_config_entry_raises_runtime_error(which):
    def get(rt):
        if which == "session":
            return rt.SessionOptions().get_session_config_entry("nope")
        return rt.RunOptions().get_run_config_entry("nope")

    (ja, jv), (oa, ov) = both(get)
    assert ja == oa == "raise"
    assert type(ov) is RuntimeError and isinstance(jv, RuntimeError)
    assert isinstance(jv, KeyError) and isinstance(jv, OnnxJitError)  # as before
    assert "does not have configuration with key: nope" in str(jv)
    assert str(jv).startswith("SessionOptions" if which == "session" else "RunOptions")


# -- run_async -----------------------------------------------------------------------------------


class _Catch:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.args = None
        self.thread = ""

    def __call__(self, outputs, user_data, err) -> None:
        self.args = (outputs, user_data, err)
        self.thread = threading.current_thread().name
        self.done.set()

    def wait(self):
        assert self.done.wait(30), "run_async never called back"
        return self.args


@ENGINES
@pytest.mark.parametrize("names", [None, ["z"], ["z", "y"]])
def test_run_async_callback_gets_run_results(rt, names):
    sess = session(rt)
    catch = _Catch()
    user = {"tag": 1}
    assert sess.run_async(names, {"x": X}, catch, user) is None
    outputs, user_data, err = catch.wait()
    assert user_data is user
    assert err == ""
    want = sess.run(names, {"x": X})
    assert type(outputs) is list and len(outputs) == len(want)
    for got, exp in zip(outputs, want):
        if isinstance(exp, list):
            assert all(np.array_equal(a, b) for a, b in zip(got, exp))
        else:
            assert isinstance(got, np.ndarray)
            np.testing.assert_array_equal(got, exp)
    assert catch.thread != threading.current_thread().name


def test_run_async_runs_on_onnxjit_threads():
    catch = _Catch()
    session(onnxjit).run_async(None, {"x": X}, catch, None)
    catch.wait()
    assert catch.thread.startswith("onnxjit-run_async")


@ENGINES
@pytest.mark.parametrize(
    "case",
    ["wrong dtype", "unknown output", "unknown input", "terminate"],
)
def test_run_async_delivers_errors_to_the_callback(rt, case):
    sess = session(rt)
    feed = {"x": X}
    names = ["z"]
    run_options = None
    if case == "wrong dtype":
        feed = {"x": X.astype(np.float64)}
    elif case == "unknown output":
        names = ["nope"]
    elif case == "unknown input":
        feed = {"x": X, "q": X}
    else:
        run_options = rt.RunOptions()
        run_options.terminate = True
    catch = _Catch()
    sess.run_async(names, feed, catch, "ud", run_options)
    outputs, user_data, err = catch.wait()
    assert outputs == [] and user_data == "ud"
    assert isinstance(err, str) and err
    assert sess.run(["y"], {"x": X})[0].tolist() == [1, 0, 3]  # the session is still usable


@ENGINES
def test_run_async_missing_input_raises_at_once(rt):
    catch = _Catch()
    with pytest.raises(ValueError, match="missing"):
        session(rt).run_async(None, {}, catch, None)
    assert not catch.done.wait(0.2)


def test_run_async_callback_exception_is_printed_and_dropped(capfd):
    def bad(outputs, user_data, err):
        raise ZeroDivisionError("boom in callback")

    sess = session(onnxjit)
    sess.run_async(None, {"x": X}, bad, None)
    catch = _Catch()
    sess.run_async(["y"], {"x": X}, catch, None)  # the pool survives
    assert catch.wait()[2] == ""
    deadline = time.monotonic() + 10
    err = ""
    # the other thread prints the header, then the traceback: read until both are in
    while not ("boom in callback" in err and "run_async callback" in err) and (
        time.monotonic() < deadline
    ):
        err += capfd.readouterr().err
        time.sleep(0.05)
    assert "boom in callback" in err and "run_async callback" in err


def test_run_async_concurrent_runs():
    sess = session(onnxjit)
    catches = [_Catch() for _ in range(8)]
    for i, c in enumerate(catches):
        sess.run_async(["z"], {"x": X * i}, c, i)
    for c in catches:
        outputs, i, err = c.wait()
        assert err == ""
        np.testing.assert_array_equal(outputs[0], -X * i)


# -- set_providers, profiling start, fallback switches ---------------------------------------------


@ENGINES
def test_set_providers_rebuilds_and_keeps_running(rt):
    sess = session(rt)
    before = sess.run(None, {"x": X})
    assert sess.set_providers(["CPUExecutionProvider"]) is None
    assert sess.get_providers() == ["CPUExecutionProvider"]
    assert sess.get_provider_options() == {"CPUExecutionProvider": {}}
    after = sess.run(None, {"x": X})
    np.testing.assert_array_equal(after[0], before[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CUDA unavailable, or nodes left on the CPU
        sess.set_providers(["CUDAExecutionProvider", "CPUExecutionProvider"])
        assert sess.get_providers()[-1] == "CPUExecutionProvider"
        np.testing.assert_array_equal(sess.run(["y"], {"x": X})[0], before[0])
    sess.set_providers(["CPUExecutionProvider"])  # and back
    assert sess.get_providers() == ["CPUExecutionProvider"]
    np.testing.assert_array_equal(sess.run(["z"], {"x": X})[0], -X)


def test_set_providers_error_leaves_the_session_usable():
    sess = session(onnxjit)
    with pytest.raises(ValueError):
        sess.set_providers(["NoSuchExecutionProvider"])
    with pytest.raises(ValueError):
        sess.set_providers(["CPUExecutionProvider"], [{}, {}])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    np.testing.assert_array_equal(sess.run(["y"], {"x": X})[0], [1, 0, 3])


def test_set_providers_keeps_options_and_model_from_a_path(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(TWO)
    so = onnxjit.SessionOptions()
    so.add_session_config_entry("onnxjit.progress", "off")
    sess = onnxjit.InferenceSession(str(path), so)
    sess.set_providers(["CPUExecutionProvider"])
    assert sess.get_session_options() is so
    assert [o.name for o in sess.get_outputs()] == ["y", "z", "seq"]
    assert sess.run(["z"], {"x": X})[0].tolist() == [-1, 2, -3]


@ENGINES
def test_profiling_start_time(rt, tmp_path):
    assert session(rt).get_profiling_start_time_ns() == 0
    so = rt.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    t0 = time.time_ns()
    sess = rt.InferenceSession(TWO, so, providers=["CPUExecutionProvider"])
    start = sess.get_profiling_start_time_ns()
    assert t0 - 10**9 <= start <= time.time_ns()
    sess.end_profiling()


@ENGINES
def test_fallback_switches(rt):
    sess = session(rt)
    assert sess.disable_fallback() is None
    assert sess.enable_fallback() is None


# -- OrtValue ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method",
    [
        "numpy",
        "shape",
        "data_type",
        "element_type",
        "device_name",
        "is_tensor",
        "has_value",
        "is_tensor_sequence",
        "is_sparse_tensor",
        "tensor_size_in_bytes",
    ],
)
@pytest.mark.parametrize(
    "array",
    [X, np.arange(6, dtype=np.int64).reshape(2, 3), np.array([True]), np.ones(2, np.float16)],
    ids=["f32", "i64", "bool", "f16"],
)
def test_ortvalue_tensor_methods_match(method, array):
    (ja, jv), (oa, ov) = both(lambda rt: getattr(rt.OrtValue.ortvalue_from_numpy(array), method)())
    assert ja == oa == "ok"
    if isinstance(ov, np.ndarray):
        np.testing.assert_array_equal(jv, ov)
        assert jv.dtype == ov.dtype
    else:
        assert jv == ov


def test_ortvalue_from_shape_and_type_matches():
    for element_type in (np.float32, np.int64, TensorProto.DOUBLE):
        (_, jv), (_, ov) = both(
            lambda rt, t=element_type: rt.OrtValue.ortvalue_from_shape_and_type([2, 3], t)
        )
        assert (jv.shape(), jv.data_type()) == (ov.shape(), ov.data_type())


def test_ortvalue_from_numpy_with_onnx_type():
    bits = np.array([0x3F80, 0x4000], np.uint16)  # bfloat16 1.0, 2.0
    v = onnxjit.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    assert v.data_type() == "tensor(bfloat16)"
    assert v.numpy().astype(np.float32).tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="2-byte"):
        onnxjit.OrtValue.ortvalue_from_numpy_with_onnx_type(np.ones(2, np.int8), 16)


def test_ortvalue_update_inplace_matches():
    for rt in (onnxjit, onnxruntime):
        buf = X.copy()
        v = rt.OrtValue.ortvalue_from_numpy(buf)
        v.update_inplace(np.ones(3, np.float32))
        assert v.numpy().tolist() == [1, 1, 1]


def _seq_outputs(rt):
    sess = session(rt)
    return sess.run_with_ort_values(["seq", "y"], {"x": rt.OrtValue.ortvalue_from_numpy(X)})


@pytest.mark.parametrize(
    "method",
    ["is_tensor", "is_tensor_sequence", "has_value", "data_type", "element_type", "numpy", "shape"],
)
def test_sequence_ortvalue_matches(method):
    (ja, jv), (oa, ov) = both(lambda rt: getattr(_seq_outputs(rt)[0], method)())
    assert ja == oa, (jv, ov)
    if ja == "ok":
        assert jv == ov
    else:
        assert isinstance(jv, RuntimeError) and isinstance(ov, RuntimeError)


def test_run_with_ort_values_tensor_output_matches():
    (_, jv), (_, ov) = both(lambda rt: _seq_outputs(rt)[1].numpy())
    np.testing.assert_array_equal(jv, ov)


ZIPMAP = _model(
    [
        helper.make_node("ZipMap", ["p"], ["zm"], domain="ai.onnx.ml", classlabels_int64s=[0, 1]),
        helper.make_node("Identity", ["p"], ["q"]),
    ],
    [helper.make_tensor_value_info("p", F, [1, 2])],
    [
        helper.make_value_info(
            "zm",
            helper.make_sequence_type_proto(
                helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(F, []))
            ),
        ),
        helper.make_tensor_value_info("q", F, [1, 2]),
    ],
    opsets=(("", 18), ("ai.onnx.ml", 3)),
)
P = np.array([[0.25, 0.75]], np.float32)


def test_sequence_of_maps_ortvalue_matches():
    def describe(rt):
        sess = session(rt, ZIPMAP)
        v = sess.run_with_ort_values(["zm"], {"p": rt.OrtValue.ortvalue_from_numpy(P)})[0]
        io = sess.io_binding()
        io.bind_cpu_input("p", P)
        io.bind_output("zm")
        sess.run_with_iobinding(io)
        return (
            v.is_tensor(),
            v.is_tensor_sequence(),
            v.has_value(),
            v.data_type(),
            io.copy_outputs_to_cpu(),
            io.get_outputs()[0].data_type(),
        )

    (ja, jv), (oa, ov) = both(describe)
    assert ja == oa == "ok"
    assert jv == ov


def test_optional_output_without_value():
    # onnxruntime crashes on has_value() of such an output (1.32), so onnxjit alone
    x_t = helper.make_tensor_type_proto(F, None)
    model = _model(
        [helper.make_node("Optional", [], ["o"], type=x_t)],
        [],
        [helper.make_value_info("o", helper.make_optional_type_proto(x_t))],
    )
    sess = onnxjit.InferenceSession(model)
    (v,) = sess.run_with_ort_values(None, {})
    assert not v.has_value() and not v.is_tensor()
    assert v.data_type() == "optional(tensor(float))"
    with pytest.raises(RuntimeError):
        v.numpy()


def test_sequence_ortvalue_feeds_back():
    seq = _seq_outputs(onnxjit)[0]
    model = _model(
        [helper.make_node("SequenceAt", ["s", "i"], ["t"])],
        [
            helper.make_value_info(
                "s", helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, ["N"]))
            ),
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("t", F, ["N"])],
    )
    sess = onnxjit.InferenceSession(model)
    i = onnxjit.OrtValue.ortvalue_from_numpy(np.array(1, np.int64))
    (t,) = sess.run_with_ort_values(None, {"s": seq, "i": i})
    np.testing.assert_array_equal(t.numpy(), X)


# -- IOBinding -----------------------------------------------------------------------------------


def _bind(rt, how: str):
    sess = session(rt)
    io = sess.io_binding()
    keep = {}
    if how == "pointer":
        xx = X.copy()
        keep["x"] = xx
        io.bind_input("x", "cpu", 0, np.float32, [3], xx.ctypes.data)
        out = np.zeros(3, np.float32)
        keep["out"] = out
        io.bind_output("y", "cpu", 0, np.float32, [3], out.ctypes.data)
    elif how == "ortvalue":
        io.bind_ortvalue_input("x", rt.OrtValue.ortvalue_from_numpy(X))
        out = rt.OrtValue.ortvalue_from_shape_and_type([3], np.float32)
        keep["out"] = out
        io.bind_ortvalue_output("y", out)
    else:
        io.bind_cpu_input("x", X)
        io.bind_output("y")
    io.bind_output("z")
    sess.run_with_iobinding(io)
    io.synchronize_inputs()
    io.synchronize_outputs()
    got = {
        "copy": io.copy_outputs_to_cpu(),
        "outputs": [o.numpy() for o in io.get_outputs()],
        "devices": [o.device_name() for o in io.get_outputs()],
    }
    if "out" in keep:
        out = keep["out"]
        got["buffer"] = out if isinstance(out, np.ndarray) else out.numpy()
    io.clear_binding_outputs()
    got["cleared"] = io.get_outputs()
    io.clear_binding_inputs()
    return got


@pytest.mark.parametrize("how", ["cpu", "pointer", "ortvalue"])
def test_iobinding_matches(how):
    (ja, jv), (oa, ov) = both(lambda rt: _bind(rt, how))
    assert ja == oa == "ok", (jv, ov)
    assert jv.keys() == ov.keys()
    for key in jv:
        if key in ("devices", "cleared"):
            assert jv[key] == ov[key]
        elif key == "buffer":
            np.testing.assert_array_equal(jv[key], ov[key])
        else:
            assert len(jv[key]) == len(ov[key])
            for a, b in zip(jv[key], ov[key]):
                np.testing.assert_array_equal(a, b)


def test_iobinding_sequence_output_matches():
    def run(rt):
        sess = session(rt)
        io = sess.io_binding()
        io.bind_cpu_input("x", X)
        io.bind_output("seq")
        sess.run_with_iobinding(io)
        return io.copy_outputs_to_cpu(), io.get_outputs()[0].is_tensor_sequence()

    (ja, (jcopy, jseq)), (oa, (ocopy, oseq)) = both(run)
    assert jseq is oseq is True
    assert len(jcopy) == len(ocopy) == 1
    assert all(np.array_equal(a, b) for a, b in zip(jcopy[0], ocopy[0]))


def test_iobinding_sequence_output_cannot_take_a_buffer():
    sess = session(onnxjit)
    io = sess.io_binding()
    io.bind_cpu_input("x", X)
    out = np.zeros(3, np.float32)
    io.bind_output("seq", "cpu", 0, np.float32, [3], out.ctypes.data)
    with pytest.raises(InvalidInputError, match="seq\\(tensor\\(float\\)\\)"):
        sess.run_with_iobinding(io)


def test_no_output_bound_raises_on_both():
    def run(rt):
        sess = session(rt)
        io = sess.io_binding()
        io.bind_cpu_input("x", X)
        sess.run_with_iobinding(io)

    (ja, _), (oa, _) = both(run)
    assert ja == oa == "raise"


def test_api_names_onnxruntime_code_uses_exist():
    for name in [
        "set_default_logger_severity",
        "set_default_logger_verbosity",
        "get_all_providers",
        "get_available_providers",
        "get_version_string",
        "set_seed",
        "get_device",
    ]:
        assert callable(getattr(onnxjit, name)), name
    for name in [
        "run_async",
        "set_providers",
        "get_profiling_start_time_ns",
        "run_with_ort_values",
        "run_with_iobinding",
        "io_binding",
        "get_provider_options",
    ]:
        assert callable(getattr(onnxjit.InferenceSession, name)), name
