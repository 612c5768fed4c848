"""Loading (onnxjit/model.py): paths, bytes, ModelProtos, external data and malformed files.

External data is only read from inside the model's folder (absolute paths, ``..`` and symlinks
leading out are refused), offsets/lengths are honoured, SHA-1 digests are verified, and large
tensors are memory-mapped instead of copied. onnxruntime loading the same files is the oracle
for the values.
"""

from __future__ import annotations

import copy
import hashlib
import mmap
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.errors import ExternalDataError, ModelLoadError
from onnxjit.model import MMAP_THRESHOLD, load_model

F = TensorProto.FLOAT


def add_model(w: np.ndarray, name: str = "w") -> onnx.ModelProto:
    """y = x + w, with w an initializer."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", name], ["y"])],
        "add",
        [helper.make_tensor_value_info("x", F, list(w.shape))],
        [helper.make_tensor_value_info("y", F, list(w.shape))],
        initializer=[numpy_helper.from_array(w, name)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def ort_run(path_or_bytes, feed):
    sess = ort.InferenceSession(
        str(path_or_bytes) if isinstance(path_or_bytes, Path) else path_or_bytes,
        providers=["CPUExecutionProvider"],
    )
    return sess.run(None, feed)


def owning_mmap(arr: np.ndarray) -> bool:
    """True when ``arr``'s memory belongs to an mmap (following the chain of bases)."""
    base = arr
    while isinstance(base, np.ndarray):
        if base.flags.owndata:
            return False
        base = base.base
    return isinstance(base, mmap.mmap) or (
        isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)
    )


W = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
X = np.ones((3, 4), np.float32)


# -- path, bytes, ModelProto ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["path", "str", "bytes", "proto"])
def test_load_from_each_source(kind, tmp_path):
    model = add_model(W)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    source = {
        "path": path,
        "str": str(path),
        "bytes": model.SerializeToString(),
        "proto": model,
    }[kind]
    loaded = load_model(source)
    np.testing.assert_array_equal(loaded.graph.initializers["w"], W)
    got = onnxjit.InferenceSession(source).run(None, {"x": X})
    np.testing.assert_allclose(got[0], ort_run(path, {"x": X})[0], rtol=1e-6)


def test_load_from_bytearray_and_memoryview():
    data = add_model(W).SerializeToString()
    for source in (bytearray(data), memoryview(data)):
        np.testing.assert_array_equal(load_model(source).graph.initializers["w"], W)


def test_missing_path(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist or is not a file; check the path"):
        onnxjit.InferenceSession(str(tmp_path / "nope.onnx"))


def test_folder_instead_of_file(tmp_path):
    with pytest.raises(ModelLoadError, match="is not a file"):
        load_model(tmp_path)


def test_wrong_source_type():
    with pytest.raises(
        ModelLoadError, match="expected a path, bytes or onnx.ModelProto, found int"
    ):
        load_model(42)


# -- malformed files --------------------------------------------------------------------------


def test_empty_file(tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(ModelLoadError) as info:
        onnxjit.InferenceSession(str(path))
    msg = str(info.value)
    assert "empty.onnx" in msg and "is empty" in msg and "expected a serialized ONNX" in msg


def test_empty_bytes():
    with pytest.raises(ModelLoadError, match="the model bytes is empty"):
        onnxjit.InferenceSession(b"")


def test_truncated_file(tmp_path):
    data = add_model(np.ones((64, 64), np.float32)).SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])  # cuts the initializer's raw_data in half
    with pytest.raises(ModelLoadError) as info:
        onnxjit.InferenceSession(str(path))
    msg = str(info.value)
    assert "cut.onnx" in msg and "could not be decoded as an ONNX ModelProto" in msg
    assert "complete .onnx model" in msg
    with pytest.raises(Exception):  # noqa: B017 - the oracle refuses it too
        ort_run(path, {})


@pytest.mark.parametrize(
    "data",
    [b"\xff\xff\xff\xff\xff", b"not a model at all, just text\n", bytes(range(256))],
    ids=["garbage", "text", "all-bytes"],
)
def test_not_protobuf(data, tmp_path):
    path = tmp_path / "junk.onnx"
    path.write_bytes(data)
    with pytest.raises(ModelLoadError) as info:
        onnxjit.InferenceSession(str(path))
    msg = str(info.value)
    assert "junk.onnx" in msg
    assert "could not be decoded" in msg or "decoded to an empty ModelProto" in msg


def test_other_protobuf_message(tmp_path):
    # A serialized TensorProto either fails to decode as a ModelProto or decodes to one with
    # no graph and no opset_import; both are refused with a message naming the file.
    path = tmp_path / "tensor.pb"
    path.write_bytes(numpy_helper.from_array(W, "w").SerializeToString())
    with pytest.raises(ModelLoadError, match="tensor.pb' (could not be decoded|decoded to an)"):
        onnxjit.InferenceSession(str(path))
    path.write_bytes(helper.make_opsetid("", 17).SerializeToString())
    with pytest.raises(ModelLoadError, match="decoded to an empty ModelProto"):
        onnxjit.InferenceSession(str(path))


# -- external data ----------------------------------------------------------------------------


def save_external(model: onnx.ModelProto, folder: Path, location: str = "weights.bin") -> Path:
    path = folder / "model.onnx"
    onnx.save(
        copy.deepcopy(model),
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=location,
        size_threshold=0,
    )
    return path


def test_external_data_saved_by_onnx(tmp_path):
    w = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    path = save_external(add_model(w), tmp_path)
    assert (tmp_path / "weights.bin").is_file()
    np.testing.assert_array_equal(load_model(path).graph.initializers["w"], w)
    got = onnxjit.InferenceSession(str(path)).run(None, {"x": X})
    np.testing.assert_allclose(got[0], ort_run(path, {"x": X})[0], rtol=1e-6)


def test_external_data_in_a_subfolder(tmp_path):
    (tmp_path / "data").mkdir()
    path = _hand_written(tmp_path, {"location": "data/w.bin"}, b"")
    (tmp_path / "data" / "w.bin").write_bytes(W.tobytes())
    np.testing.assert_array_equal(load_model(path).graph.initializers["w"], W)
    np.testing.assert_allclose(
        onnxjit.InferenceSession(str(path)).run(None, {"x": X})[0], W + 1, rtol=1e-6
    )


def _hand_written(tmp_path: Path, entries: dict[str, str], payload: bytes) -> Path:
    """A model whose initializer 'w' (float32 [3, 4]) points at ``entries`` in data.bin."""
    (tmp_path / "data.bin").write_bytes(payload)
    model = add_model(W)
    t = model.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for key, value in entries.items():
        e = t.external_data.add()
        e.key, e.value = key, value
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    return path


def test_external_offset_and_length_honoured(tmp_path):
    other = np.full(5, 99, np.float32).tobytes()
    raw = W.tobytes()
    payload = other + raw + other
    entries = {"location": "data.bin", "offset": str(len(other)), "length": str(len(raw))}
    path = _hand_written(tmp_path, entries, payload)
    np.testing.assert_array_equal(load_model(path).graph.initializers["w"], W)
    np.testing.assert_allclose(
        onnxjit.InferenceSession(str(path)).run(None, {"x": X})[0],
        ort_run(path, {"x": X})[0],
        rtol=1e-6,
    )


def test_external_offset_without_length(tmp_path):
    raw = W.tobytes()
    path = _hand_written(tmp_path, {"location": "data.bin", "offset": "3"}, b"abc" + raw)
    np.testing.assert_array_equal(load_model(path).graph.initializers["w"], W)


def test_external_length_mismatch(tmp_path):
    raw = W.tobytes()
    path = _hand_written(tmp_path, {"location": "data.bin", "length": "40"}, raw)
    with pytest.raises(ExternalDataError) as info:
        load_model(path)
    msg = str(info.value)
    assert "tensor 'w'" in msg and "length 40 bytes" in msg and "(48 bytes)" in msg


def test_external_data_beyond_end_of_file(tmp_path):
    path = _hand_written(tmp_path, {"location": "data.bin", "offset": "8"}, W.tobytes())
    with pytest.raises(ExternalDataError) as info:
        load_model(path)
    msg = str(info.value)
    assert "tensor 'w'" in msg and "[8, 56)" in msg and "(48 bytes)" in msg
    assert "truncated or the offset is wrong" in msg


@pytest.mark.parametrize(("bad", "found"), [("-4", "-4 is negative"), ("ten", "'ten' is not")])
def test_external_offset_malformed(bad, found, tmp_path):
    path = _hand_written(tmp_path, {"location": "data.bin", "offset": bad}, W.tobytes())
    with pytest.raises(ExternalDataError) as info:
        load_model(path)
    msg = str(info.value)
    assert f"tensor 'w': external_data offset={found}" in msg and "expected a byte count" in msg


def test_external_without_location(tmp_path):
    path = _hand_written(tmp_path, {"offset": "0"}, W.tobytes())
    with pytest.raises(ExternalDataError, match="tensor 'w' is stored externally but has no"):
        load_model(path)


def test_external_file_missing(tmp_path):
    path = _hand_written(tmp_path, {"location": "elsewhere.bin"}, W.tobytes())
    with pytest.raises(ExternalDataError) as info:
        onnxjit.InferenceSession(str(path))
    msg = str(info.value)
    assert "tensor 'w'" in msg and "'elsewhere.bin' does not exist" in msg


def test_external_data_from_bytes_needs_base_dir(tmp_path):
    path = save_external(add_model(W), tmp_path)
    data = path.read_bytes()
    with pytest.raises(ExternalDataError) as info:
        onnxjit.InferenceSession(data)
    assert "tensor 'w'" in str(info.value) and "pass base_dir=" in str(info.value)
    np.testing.assert_array_equal(load_model(data, base_dir=tmp_path).graph.initializers["w"], W)


def test_external_string_tensor_refused(tmp_path):
    path = _hand_written(tmp_path, {"location": "data.bin"}, b"abc")
    model = onnx.load(str(path), load_external_data=False)
    model.graph.initializer[0].data_type = TensorProto.STRING
    onnx.save(model, str(path))
    with pytest.raises(ExternalDataError, match="tensor 'w': STRING tensors cannot be stored"):
        load_model(path)


def test_sha1_checksum_right(tmp_path):
    raw = W.tobytes()
    digest = hashlib.sha1(raw).hexdigest()
    path = _hand_written(tmp_path, {"location": "data.bin", "checksum": digest}, raw)
    np.testing.assert_array_equal(load_model(path).graph.initializers["w"], W)
    # Upper-case hex is the same digest.
    path = _hand_written(tmp_path, {"location": "data.bin", "checksum": digest.upper()}, raw)
    np.testing.assert_array_equal(load_model(path).graph.initializers["w"], W)


def test_sha1_checksum_wrong(tmp_path):
    raw = W.tobytes()
    wrong = hashlib.sha1(b"something else").hexdigest()
    path = _hand_written(tmp_path, {"location": "data.bin", "checksum": wrong}, raw)
    with pytest.raises(ExternalDataError) as info:
        onnxjit.InferenceSession(str(path))
    msg = str(info.value)
    assert "tensor 'w'" in msg and f"expected {wrong}" in msg
    assert hashlib.sha1(raw).hexdigest() in msg and "changed or is corrupt" in msg


# -- unsafe locations -------------------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> tuple[Path, Path]:
    """(model folder, a folder next to it holding secret.bin)."""
    model_dir = tmp_path / "model"
    other = tmp_path / "other"
    model_dir.mkdir()
    other.mkdir()
    (other / "secret.bin").write_bytes(W.tobytes())
    return model_dir, other


def _expect_refused(path: Path, *needles: str) -> None:
    with pytest.raises(ExternalDataError) as info:
        onnxjit.InferenceSession(str(path))
    msg = str(info.value)
    assert "tensor 'w'" in msg
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_absolute_location_refused(outside):
    model_dir, other = outside
    location = str(other / "secret.bin")
    path = _hand_written(model_dir, {"location": location}, b"")
    _expect_refused(path, repr(location), "is an absolute path", "relative to the model's folder")


def test_parent_location_refused(outside):
    model_dir, _ = outside
    path = _hand_written(model_dir, {"location": "../other/secret.bin"}, b"")
    _expect_refused(path, "'../other/secret.bin'", "climbs out", "'..'")


def test_nested_parent_location_refused(outside):
    model_dir, _ = outside
    (model_dir / "a").mkdir()
    path = _hand_written(model_dir, {"location": "a/../../other/secret.bin"}, b"")
    _expect_refused(path, "'a/../../other/secret.bin'", "climbs out")


def test_backslash_parent_location_refused(outside):
    model_dir, _ = outside
    path = _hand_written(model_dir, {"location": "..\\other\\secret.bin"}, b"")
    _expect_refused(path, "climbs out")


def test_symlinked_file_outside_refused(outside):
    model_dir, other = outside
    os.symlink(other / "secret.bin", model_dir / "link.bin")
    path = _hand_written(model_dir, {"location": "link.bin"}, b"")
    _expect_refused(path, "'link.bin'", "outside the model's folder", "symlink")


def test_symlinked_folder_outside_refused(outside):
    model_dir, other = outside
    os.symlink(other, model_dir / "linkdir")
    path = _hand_written(model_dir, {"location": "linkdir/secret.bin"}, b"")
    _expect_refused(path, "'linkdir/secret.bin'", "outside the model's folder")


def test_symlink_inside_the_folder_allowed(tmp_path):
    (tmp_path / "real").mkdir()
    path = _hand_written(tmp_path, {"location": "alias/data.bin"}, W.tobytes())
    (tmp_path / "data.bin").rename(tmp_path / "real" / "data.bin")
    os.symlink(tmp_path / "real", tmp_path / "alias")
    np.testing.assert_array_equal(load_model(path).graph.initializers["w"], W)


# -- memory mapping ---------------------------------------------------------------------------


def test_large_external_initializer_is_memory_mapped(tmp_path):
    big = np.random.default_rng(1).standard_normal((512, 1024)).astype(np.float32)  # 2 MiB
    assert big.nbytes >= MMAP_THRESHOLD
    path = save_external(add_model(big), tmp_path)
    arr = load_model(path).graph.initializers["w"]
    assert not arr.flags.owndata
    assert owning_mmap(arr), "a large external initializer was copied instead of mapped"
    assert not arr.flags.writeable
    np.testing.assert_array_equal(arr, big)
    sess = onnxjit.InferenceSession(str(path))
    x = np.ones_like(big)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], big + 1, rtol=1e-6)


def test_large_hand_written_unaligned_offset_still_loads(tmp_path):
    # An offset that is not a multiple of the item size cannot be viewed; it is copied.
    big = np.arange(MMAP_THRESHOLD // 4 + 16, dtype=np.float32)
    model = add_model(big)
    t = model.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in {"location": "data.bin", "offset": "1"}.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    (tmp_path / "data.bin").write_bytes(b"\0" + big.tobytes())
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    np.testing.assert_array_equal(load_model(path).graph.initializers["w"], big)


def test_small_external_initializer_is_copied(tmp_path):
    path = save_external(add_model(W), tmp_path)
    arr = load_model(path).graph.initializers["w"]
    assert not owning_mmap(arr)


def test_initializers_keep_their_rank_and_are_owned_arrays():
    # Regression: taking an owned copy of a 0-d initializer once turned it into shape [1].
    scalar = numpy_helper.from_array(np.float32(2.5), "s")
    vector = numpy_helper.from_array(np.arange(3, dtype=np.int64), "v")
    model = load_model(
        helper.make_model(
            helper.make_graph(
                [],
                "g",
                [],
                [helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
                initializer=[scalar, vector],
            ),
            opset_imports=[helper.make_opsetid("", 17)],
        )
    )
    s, v = model.graph.initializers["s"], model.graph.initializers["v"]
    assert s.shape == () and s == np.float32(2.5)
    np.testing.assert_array_equal(v, np.arange(3))
    assert s.flags.writeable and v.flags.writeable and v.flags.c_contiguous
