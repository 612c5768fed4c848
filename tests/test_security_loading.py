"""Hostile model files (issue 6, items 1 and 2): every route to a file outside the model's
folder is refused, malformed files raise a clear onnxjit error, and loading opens nothing
outside the model's folder.

Every test loads through ``InferenceSession`` (or ``load_model`` for the happy paths) while an
audit hook (``sys.addaudithook``, which sees every ``open``/``os.open`` of the process) records
the paths opened; the load runs once unrecorded first, so that modules imported lazily on the
first call do not count. The assertion is strict: every recorded path lies in the model's
folder. onnxruntime is the oracle for the values of the models that load.
"""

from __future__ import annotations

import copy
import hashlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.errors import (
    ExternalDataError,
    ModelCheckError,
    ModelLoadError,
    OnnxJitError,
    ResourceLimitError,
)
from onnxjit.model import MAX_GRAPH_DEPTH, _Loader, load_model

F = TensorProto.FLOAT
W = (np.arange(12, dtype=np.float32).reshape(3, 4) - 5) / 7
X = np.ones((3, 4), np.float32)

# -- recording what is opened -------------------------------------------------------------------

_recording: list[str] | None = None
_recording_thread: int | None = None
_EVENTS = {"open", "os.listdir", "os.scandir", "shutil.copyfile", "os.chdir"}


def _audit(event: str, args: tuple) -> None:
    if _recording is None or event not in _EVENTS:
        return
    if threading.get_ident() != _recording_thread:
        return
    target = args[0] if args else None
    if isinstance(target, (str, bytes, os.PathLike)):
        _recording.append(os.fsdecode(target))


sys.addaudithook(_audit)


@contextmanager
def recording() -> Iterator[list[str]]:
    """Record the paths this thread opens (open, os.open, listdir, scandir) in the block."""
    global _recording, _recording_thread
    opened: list[str] = []
    _recording, _recording_thread = opened, threading.get_ident()
    try:
        yield opened
    finally:
        _recording, _recording_thread = None, None


def assert_inside(opened: list[str], folder: Path) -> None:
    base = folder.resolve()
    for p in opened:
        real = Path(os.path.realpath(os.path.join(base, p)))
        assert real == base or base in real.parents, f"{p!r} opened outside {base}"


def load_recorded(source, folder: Path, expect: type[BaseException], *needles: str, **kw) -> str:
    """Create a session from ``source`` twice (the second time recorded); both must raise
    ``expect`` with every needle in the message; nothing outside ``folder`` may be opened."""
    for attempt in range(2):
        with recording() as opened, pytest.raises(expect) as info:
            onnxjit.InferenceSession(source, **kw)
        if attempt:
            assert_inside(opened, folder)
    msg = str(info.value)
    assert isinstance(info.value, OnnxJitError)
    for needle in needles:
        assert needle in msg, (needle, msg)
    return msg


# -- model builders -------------------------------------------------------------------------------


def add_model(w: np.ndarray = W) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "add",
        [helper.make_tensor_value_info("x", F, list(w.shape))],
        [helper.make_tensor_value_info("y", F, list(w.shape))],
        initializer=[numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def external(folder: Path, entries: list[tuple[str, str]], payload: bytes | None = None) -> Path:
    """model.onnx in ``folder`` whose initializer 'w' (float32 [3, 4]) has the external_data
    ``entries`` (in order, repeats allowed); ``payload`` goes to folder/data.bin."""
    if payload is not None:
        (folder / "data.bin").write_bytes(payload)
    model = add_model()
    t = model.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for key, value in entries:
        e = t.external_data.add()
        e.key, e.value = key, value
    path = folder / "model.onnx"
    onnx.save(model, str(path))
    return path


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """(model folder, a sibling folder holding secret.bin: W's bytes, which a successful
    attack would read)."""
    model_dir, other = tmp_path / "model", tmp_path / "other"
    model_dir.mkdir()
    other.mkdir()
    (other / "secret.bin").write_bytes(W.tobytes())
    return model_dir, other


def ort_values(path: Path) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": X})[0]


# -- item 1: external data ------------------------------------------------------------------------


def test_good_external_data_opens_only_files_in_the_folder(dirs):
    model_dir, _ = dirs
    path = external(model_dir, [("location", "data.bin")], W.tobytes())
    load_model(path)
    with recording() as opened:
        model = load_model(path)
    assert_inside(opened, model_dir)
    assert {Path(p).name for p in opened} == {"model.onnx", "data.bin"}
    np.testing.assert_array_equal(model.graph.initializers["w"], W)
    got = onnxjit.InferenceSession(str(path)).run(None, {"x": X})[0]
    np.testing.assert_allclose(got, ort_values(path), rtol=1e-6)


ROUTES: dict[str, tuple[Callable[[Path, Path], list[tuple[str, str]]], tuple[str, ...]]] = {
    "parent": (
        lambda m, o: [("location", "../other/secret.bin")],
        ("tensor 'w'", "'../other/secret.bin'", "climbs out", "'..'"),
    ),
    "nested-parent": (
        lambda m, o: (m / "a").mkdir() or [("location", "a/../../other/secret.bin")],
        ("tensor 'w'", "'a/../../other/secret.bin'", "climbs out"),
    ),
    "backslash-parent": (
        lambda m, o: [("location", "..\\other\\secret.bin")],
        ("tensor 'w'", "climbs out"),
    ),
    "absolute": (
        lambda m, o: [("location", str(o / "secret.bin"))],
        ("tensor 'w'", "is an absolute path", "relative to the model's folder"),
    ),
    "windows-drive": (
        lambda m, o: [("location", "C:\\other\\secret.bin")],
        ("tensor 'w'", "is an absolute path"),
    ),
    "nul-byte": (
        lambda m, o: [("location", "data.bin\x00../../other/secret.bin")],
        ("tensor 'w'", "contains a NUL byte", "refusing it"),
    ),
    "symlinked-file": (
        lambda m, o: os.symlink(o / "secret.bin", m / "link.bin") or [("location", "link.bin")],
        ("tensor 'w'", "'link.bin'", "outside the model's folder", "symlink"),
    ),
    "symlinked-folder": (
        lambda m, o: os.symlink(o, m / "linkdir") or [("location", "linkdir/secret.bin")],
        ("tensor 'w'", "'linkdir/secret.bin'", "outside the model's folder"),
    ),
    "hard-link": (
        lambda m, o: os.link(o / "secret.bin", m / "hard.bin") or [("location", "hard.bin")],
        ("tensor 'w'", "'hard.bin'", "2 hard links", "replace the link with a copy"),
    ),
    "duplicate-location": (
        lambda m, o: [("location", "data.bin"), ("location", "../other/secret.bin")],
        ("tensor 'w'", "key 'location' appears twice", "each key may appear once"),
    ),
    "injected-key": (
        lambda m, o: [("location", "data.bin"), ("basepath", str(o))],
        ("tensor 'w'", "key 'basepath' is not one of", "'location', 'offset'", "remove"),
    ),
    "injected-dunder-key": (
        lambda m, o: [("location", "data.bin"), ("__class__", "x")],
        ("tensor 'w'", "key '__class__' is not one of"),
    ),
    "huge-length": (
        lambda m, o: [("location", "data.bin"), ("length", "9" * 30)],
        ("tensor 'w'", f"length {'9' * 30} bytes does not match", "(48 bytes)"),
    ),
    "huge-offset": (
        lambda m, o: [("location", "data.bin"), ("offset", str(1 << 62))],
        ("tensor 'w'", "lies beyond the end of 'data.bin' (48 bytes)"),
    ),
    "offset-past-end": (
        lambda m, o: [("location", "data.bin"), ("offset", "8")],
        ("tensor 'w'", "[8, 56)", "truncated or the offset is wrong"),
    ),
    "negative-offset": (
        lambda m, o: [("location", "data.bin"), ("offset", "-4")],
        ("tensor 'w'", "offset=-4 is negative", "expected a byte count"),
    ),
    "length-not-matching-shape": (
        lambda m, o: [("location", "data.bin"), ("length", "44")],
        ("tensor 'w'", "length 44 bytes does not match its dims (3, 4)", "float (48 bytes)"),
    ),
    "sha1-mismatch": (
        lambda m, o: [("location", "data.bin"), ("checksum", hashlib.sha1(b"x").hexdigest())],
        ("tensor 'w'", f"expected {hashlib.sha1(b'x').hexdigest()}", "changed or is corrupt"),
    ),
    "directory": (
        lambda m, o: (m / "sub").mkdir() or [("location", "sub")],
        ("tensor 'w'", "'sub' is not a regular file"),
    ),
    "fifo": (
        lambda m, o: os.mkfifo(m / "pipe") or [("location", "pipe")],
        ("tensor 'w'", "'pipe' is not a regular file"),
    ),
    "missing-file": (
        lambda m, o: [("location", "nope.bin")],
        ("tensor 'w'", "'nope.bin' does not exist"),
    ),
    "no-location": (
        lambda m, o: [("offset", "0")],
        ("tensor 'w' is stored externally but has no 'location' key",),
    ),
}


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_external_data_route_refused(route, dirs):
    model_dir, other = dirs
    make, needles = ROUTES[route]
    if route in ("fifo",) and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    entries = make(model_dir, other)
    path = external(model_dir, entries, W.tobytes())
    load_recorded(str(path), model_dir, ExternalDataError, *needles)
    # the secret was never read: its bytes are not what a refused load could have produced
    assert (other / "secret.bin").read_bytes() == W.tobytes()


def test_sha1_digest_checked_when_present_and_right(dirs):
    model_dir, _ = dirs
    digest = hashlib.sha1(W.tobytes()).hexdigest()
    path = external(model_dir, [("location", "data.bin"), ("checksum", digest)], W.tobytes())
    with recording() as opened:
        loaded = load_model(path)
    assert_inside(opened, model_dir)
    np.testing.assert_array_equal(loaded.graph.initializers["w"], W)


def test_file_swapped_after_the_path_check_is_caught(dirs):
    # The path check resolved a file inside; what is opened resolves outside (a symlink race):
    # the real path of the open descriptor is checked again.
    model_dir, other = dirs
    loader = _Loader(model_dir)
    with pytest.raises(ExternalDataError) as info:
        loader._open_checked("w", "data.bin", other / "secret.bin")
    msg = str(info.value)
    assert "tensor 'w'" in msg and "changed while it was opened" in msg
    assert "resolves outside the model's folder" in msg


def test_final_symlink_is_not_followed_when_opening(dirs):
    model_dir, other = dirs
    os.symlink(other / "secret.bin", model_dir / "late.bin")
    loader = _Loader(model_dir)
    with pytest.raises(ExternalDataError) as info:
        loader._open_checked("w", "late.bin", model_dir / "late.bin")
    assert "'late.bin' could not be opened" in str(info.value)


def test_bytes_with_external_data_need_a_base_folder(dirs):
    model_dir, _ = dirs
    path = external(model_dir, [("location", "data.bin")], W.tobytes())
    data = path.read_bytes()
    load_recorded(
        data, model_dir, ExternalDataError, "tensor 'w'", "not loaded from a file", "base_dir="
    )
    want = ort_values(path)
    got = onnxjit.InferenceSession(data, base_dir=model_dir).run(None, {"x": X})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    so = onnxjit.SessionOptions()
    so.add_session_config_entry(
        "session.model_external_initializers_file_folder_path", str(model_dir)
    )
    got = onnxjit.InferenceSession(data, so).run(None, {"x": X})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_base_folder_of_bytes_is_a_jail_too(dirs):
    model_dir, other = dirs
    path = external(model_dir, [("location", "../other/secret.bin")])
    load_recorded(path.read_bytes(), model_dir, ExternalDataError, "climbs out", base_dir=model_dir)


# -- item 2: malformed files ----------------------------------------------------------------------


def _tensor_model(t: TensorProto) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["y"])],
        "g",
        [],
        [helper.make_tensor_value_info("y", F, None)],
        initializer=[t],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _sparse_model(dims: list[int], indices: np.ndarray) -> onnx.ModelProto:
    values = numpy_helper.from_array(np.ones(len(indices), np.float32), "w")
    st = helper.make_sparse_tensor(values, numpy_helper.from_array(indices, "i"), dims)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["y"])],
        "g",
        [],
        [helper.make_tensor_value_info("y", F, dims)],
        sparse_initializer=[st],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def nested_ifs(depth: int) -> onnx.ModelProto:
    """A main graph whose If's then-branch holds an If, ``depth`` Ifs in all (built in place:
    protobuf's Python API cannot copy messages nested past its parse limit)."""

    def fill(g: onnx.GraphProto, name: str) -> None:
        g.name = name
        g.output.add().CopyFrom(helper.make_tensor_value_info("o", F, [1]))

    model = onnx.ModelProto(ir_version=8)
    model.opset_import.add().CopyFrom(helper.make_opsetid("", 17))
    g = model.graph
    fill(g, "main")
    g.input.add().CopyFrom(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    g.initializer.add().CopyFrom(numpy_helper.from_array(np.ones(1, np.float32), "c"))
    for i in range(depth):
        node = g.node.add()
        node.op_type, node.name = "If", f"if{i}"
        node.input.append("cond")
        node.output.append("o")
        other = node.attribute.add()
        other.name, other.type = "else_branch", onnx.AttributeProto.GRAPH
        fill(other.g, f"else{i}")
        other.g.node.add().CopyFrom(helper.make_node("Identity", ["c"], ["o"]))
        then = node.attribute.add()
        then.name, then.type = "then_branch", onnx.AttributeProto.GRAPH
        g = then.g
        fill(g, f"then{i}")
    g.node.add().CopyFrom(helper.make_node("Identity", ["c"], ["o"]))
    return model


def _recursive_function_model() -> onnx.ModelProto:
    fn = helper.make_function(
        "com.example",
        "Forever",
        ["a"],
        ["b"],
        [helper.make_node("Forever", ["a"], ["b"], domain="com.example")],
        [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
    )
    graph = helper.make_graph(
        [helper.make_node("Forever", ["x"], ["y"], domain="com.example", name="f")],
        "g",
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
        functions=[fn],
    )
    model.ir_version = 8
    return model


def _truncated() -> bytes:
    data = add_model(np.ones((64, 64), np.float32)).SerializeToString()
    return data[: len(data) // 2]


def _raw(dims: list[int], raw: bytes, data_type: int = F) -> bytes:
    t = TensorProto(name="w", data_type=data_type, dims=dims, raw_data=raw)
    return _tensor_model(t).SerializeToString()


MALFORMED: dict[str, tuple[Callable[[], bytes], type[BaseException], tuple[str, ...]]] = {
    "empty": (lambda: b"", ModelLoadError, ("is empty", "expected a serialized ONNX")),
    "truncated": (_truncated, ModelLoadError, ("could not be decoded", "complete .onnx model")),
    "garbage": (
        lambda: b"\xff\xff\xff\xff\xff",
        ModelLoadError,
        ("could not be decoded as an ONNX ModelProto",),
    ),
    "text": (
        lambda: b"not a model at all\n",
        ModelLoadError,
        ("could not be decoded as an ONNX ModelProto",),
    ),
    "other-message": (
        lambda: helper.make_opsetid("", 17).SerializeToString(),
        ModelLoadError,
        ("decoded to an empty ModelProto", "not another protobuf message"),
    ),
    "raw-data-too-short": (
        lambda: _raw([3, 4], b"\0" * 20),
        ModelLoadError,
        ("tensor 'w': raw_data holds 20 bytes but dims [3, 4] of float need 48",),
    ),
    "raw-data-too-long": (
        lambda: _raw([2], b"\0" * 9),
        ModelLoadError,
        ("raw_data holds 9 bytes but dims [2] of float need 8",),
    ),
    "negative-dims": (
        lambda: _raw([-3, -4], b"\0" * 48),
        ModelLoadError,
        ("tensor 'w' has negative dims [-3, -4]", "dimensions must be >= 0"),
    ),
    "overflowing-dims": (
        lambda: _raw([1 << 32, 1 << 32], b""),
        ModelLoadError,
        ("tensor 'w'", "18446744073709551616 elements", "overflows a 64-bit integer"),
    ),
    "huge-dims-no-data": (
        lambda: _raw([1 << 40], b"\0" * 8),
        ModelLoadError,
        ("raw_data holds 8 bytes but dims [1099511627776] of float need 4398046511104",),
    ),
    "float-data-count-mismatch": (
        lambda: _tensor_model(
            TensorProto(name="w", data_type=F, dims=[3], float_data=[1.0, 2.0])
        ).SerializeToString(),
        ModelLoadError,
        ("tensor 'w' could not be decoded", "matches its dims and data_type"),
    ),
    "unknown-data-type": (
        lambda: _raw([2], b"\0" * 8, data_type=999),
        ModelLoadError,
        ("tensor 'w' has data_type 999, which is not an ONNX element type",),
    ),
    "sparse-huge-dims": (
        lambda: _sparse_model([1 << 20, 1 << 20], np.array([0], np.int64)).SerializeToString(),
        ResourceLimitError,
        ("sparse tensor 'w'", "dense form of shape [1048576, 1048576]", "over the per-tensor cap"),
    ),
    "sparse-index-outside": (
        lambda: _sparse_model([4], np.array([7], np.int64)).SerializeToString(),
        ModelLoadError,
        ("sparse tensor 'w': an index is outside dims (4,)", "[0, 3]"),
    ),
    "sparse-negative-dims": (
        lambda: _sparse_model([-5, 3], np.array([0], np.int64)).SerializeToString(),
        ModelLoadError,
        ("sparse tensor 'w' has negative dims [-5, 3]",),
    ),
    "nested-past-protobuf-limit": (
        lambda: nested_ifs(40).SerializeToString(),
        ModelLoadError,
        ("nests messages more deeply than protobuf's limit of 100", "flatten"),
    ),
    "recursive-function": (
        lambda: _recursive_function_model().SerializeToString(),
        ModelCheckError,
        ("node 'f'", "com.example:Forever", "recursive"),
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_file_refused(case, tmp_path):
    make, expect, needles = MALFORMED[case]
    path = tmp_path / "bad.onnx"
    path.write_bytes(make())
    msg = load_recorded(str(path), tmp_path, expect, *needles)
    if case not in ("sparse-huge-dims", "recursive-function", "unknown-data-type"):
        assert "bad.onnx" in msg or "tensor" in msg
    # onnxruntime refuses these files too (the raw_data/data-count cases at load or run)
    if case in ("empty", "truncated", "garbage", "text", "negative-dims", "overflowing-dims"):
        with pytest.raises(Exception):  # noqa: B017 - any onnxruntime error
            ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_deep_nesting_built_in_memory_is_refused_not_a_recursion_error():
    with pytest.raises(ModelLoadError) as info:
        onnxjit.InferenceSession(nested_ifs(10_000))
    msg = str(info.value)
    assert f"nested more than {MAX_GRAPH_DEPTH - 1} levels below the main graph" in msg
    assert "flatten" in msg


def test_nesting_at_the_limit_runs():
    sess = onnxjit.InferenceSession(nested_ifs(MAX_GRAPH_DEPTH - 1))
    for cond in (True, False):
        out = sess.run(None, {"cond": np.array(cond)})[0]
        np.testing.assert_array_equal(out, np.ones(1, np.float32))


def test_protobuf_of_a_model_given_as_a_proto_is_checked_like_bytes():
    # A ModelProto built in memory skips protobuf's parser: the same checks apply.
    t = TensorProto(name="w", data_type=F, dims=[3, 4], raw_data=b"\0" * 20)
    with pytest.raises(ModelLoadError, match="raw_data holds 20 bytes but dims"):
        onnxjit.InferenceSession(_tensor_model(t))
    model = add_model()
    model.graph.initializer[0].dims[0] = -3
    with pytest.raises(ModelLoadError, match=r"negative dims \[-3, 4\]"):
        onnxjit.InferenceSession(model)


def test_load_errors_are_standard_exceptions():
    with pytest.raises(ValueError):
        onnxjit.InferenceSession(b"\xff\xff")
    with pytest.raises(MemoryError):
        onnxjit.InferenceSession(
            _sparse_model([1 << 20, 1 << 20], np.array([0], np.int64)).SerializeToString()
        )


def test_copy_of_a_good_model_still_loads_after_refusals(dirs):
    # Refusals leave no state behind: a good model in the same folder loads afterwards.
    model_dir, _ = dirs
    bad = external(model_dir, [("location", "../other/secret.bin")])
    with pytest.raises(ExternalDataError):
        onnxjit.InferenceSession(str(bad))
    good = external(model_dir, [("location", "data.bin")], W.tobytes())
    model = copy.deepcopy(onnx.load(str(good), load_external_data=False))
    assert model.graph.initializer[0].data_location == TensorProto.EXTERNAL
    got = onnxjit.InferenceSession(str(good)).run(None, {"x": X})[0]
    np.testing.assert_allclose(got, ort_values(good), rtol=1e-6)
