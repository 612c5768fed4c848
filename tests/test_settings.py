"""Every knob read and validated in onnxjit/config.py (issue 41).

Environment variables are parsed by ``config.read_settings`` (once, at import), session config
entries by ``config.session_settings``; a value onnxjit cannot use is a ConfigurationError
naming the variable or entry, the value, what was expected and a fix. No other module reads
the environment, onnxjit.limits does not import onnxjit.config, and the README's table lists
exactly the knobs of ``config.KNOBS``.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from onnxjit import config, limits, options
from onnxjit.errors import ConfigurationError, InvalidArgumentError

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_when_nothing_is_set(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 7)
    got = config.read_settings({"XDG_CACHE_HOME": "/somewhere"})
    assert got.cache_dir == Path("/somewhere/onnxjit")
    assert (got.num_threads, got.parallel_threshold) == (7, 1 << 15)
    assert (got.vector_width, got.progress) == ("auto", None)
    mem = limits.physical_memory()
    assert (got.limits.max_tensor_bytes, got.limits.max_run_bytes) == (mem // 4, mem // 2)
    assert "ONNXJIT_MAX_TENSOR_BYTES" in got.limits.tensor_setting


def test_every_variable_is_read():
    env = {
        "ONNXJIT_CACHE_DIR": "~/kernels",
        "ONNXJIT_NUM_THREADS": " 3 ",
        "ONNXJIT_PARALLEL_THRESHOLD": "0",
        "ONNXJIT_VECTOR_WIDTH": "Native",
        "ONNXJIT_PROGRESS": "off",
        "ONNXJIT_MAX_TENSOR_BYTES": "3M",
        "ONNXJIT_MAX_RUN_BYTES": "0",
    }
    got = config.read_settings(env)
    assert got.cache_dir == Path("~/kernels").expanduser()
    assert (got.num_threads, got.parallel_threshold, got.vector_width) == (3, 0, "native")
    assert got.progress is False
    assert (got.limits.max_tensor_bytes, got.limits.max_run_bytes) == (3 << 20, 0)
    # an empty variable is an unset one
    assert config.read_settings({k: "" for k in env}) == config.read_settings({})


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [
        ("ONNXJIT_NUM_THREADS", "many", "a whole number of 1 or more"),
        ("ONNXJIT_NUM_THREADS", "0", "a whole number of 1 or more"),
        ("ONNXJIT_NUM_THREADS", "2.5", "a whole number of 1 or more"),
        ("ONNXJIT_PARALLEL_THRESHOLD", "-1", "a whole number of 0 or more"),
        ("ONNXJIT_PARALLEL_THRESHOLD", "lots", "a whole number of 0 or more"),
        ("ONNXJIT_VECTOR_WIDTH", "wide", "one of auto, native"),
        ("ONNXJIT_PROGRESS", "sometimes", "a progress bar mode"),
        ("ONNXJIT_MAX_TENSOR_BYTES", "lots", "a byte count"),
        ("ONNXJIT_MAX_RUN_BYTES", "-5", "a byte count"),
    ],
)
def test_garbage_in_a_variable_names_it(name, raw, expected):
    with pytest.raises(ConfigurationError) as info:
        config.read_settings({name: raw})
    msg = str(info.value)
    assert msg.startswith(f"{name}={raw!r} is not {expected}; "), msg
    assert len(msg.split("; ", 1)[1]) > 10  # and a fix
    assert isinstance(info.value, ValueError)


def test_garbage_in_a_variable_stops_the_import():
    env = dict(os.environ, ONNXJIT_NUM_THREADS="all")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", "import onnxjit"], env=env, capture_output=True, text=True
    )
    assert out.returncode != 0
    assert "onnxjit.errors.ConfigurationError: ONNXJIT_NUM_THREADS='all' is not" in out.stderr


def _base(**env: str) -> config.Settings:
    return config.read_settings(env)


def test_session_defaults_come_from_the_environment():
    base = _base(ONNXJIT_PROGRESS="on", ONNXJIT_MAX_TENSOR_BYTES="1M")
    got = config.session_settings({}, base=base)
    assert got.limits == base.limits
    assert got.progress is True
    assert got.conv_winograd is True
    assert got.disabled_optimizers == frozenset()
    assert got.external_data_folder is None
    assert config.session_settings({}).limits == limits.default_limits()


def test_session_entries_win_over_the_environment():
    entries = {
        "onnxjit.progress": "0",
        "onnxjit.max_tensor_bytes": "2K",
        "onnxjit.max_run_bytes": "4K",
        "onnxjit.conv_winograd": "0",
        "onnxjit.disabled_optimizers": " elementwise_fusion, ,constant_folding ",
        "session.model_external_initializers_file_folder_path": "/data",
        "session.intra_op.allow_spinning": "0",  # onnxruntime's: not onnxjit's to read
    }
    got = config.session_settings(entries, base=_base(ONNXJIT_PROGRESS="on"))
    assert got.progress is False
    assert (got.limits.max_tensor_bytes, got.limits.max_run_bytes) == (2 << 10, 4 << 10)
    assert got.limits.tensor_setting == "session config entry 'onnxjit.max_tensor_bytes'"
    assert got.conv_winograd is False
    assert got.disabled_optimizers == {"elementwise_fusion", "constant_folding"}
    assert got.external_data_folder == "/data"


@pytest.mark.parametrize(
    ("key", "raw", "expected", "also"),
    [
        ("onnxjit.progress", "sometimes", "a progress bar mode", InvalidArgumentError),
        ("onnxjit.conv_winograd", "yes", "'1' or '0'", InvalidArgumentError),
        ("onnxjit.max_tensor_bytes", "plenty", "a byte count", ConfigurationError),
        ("onnxjit.max_run_bytes", "12Q", "a byte count", ConfigurationError),
        ("onnxjit.disabled_optimizers", "nope", "a comma-separated list", ConfigurationError),
    ],
)
def test_garbage_in_an_entry_names_it(key, raw, expected, also):
    with pytest.raises(ConfigurationError) as info:
        config.session_settings({key: raw}, known_passes={"elementwise_fusion"})
    assert str(info.value).startswith(f"session config entry {key!r}={raw!r} is not {expected}")
    # the two entries that raised InvalidArgumentError before still do
    assert isinstance(info.value, also)


def test_pass_names_are_only_checked_against_the_known_ones():
    entry = {"onnxjit.disabled_optimizers": "elementwise_fusion,nope"}
    assert config.session_settings(entry).disabled_optimizers == {"elementwise_fusion", "nope"}
    with pytest.raises(ConfigurationError, match=r"\['nope'\] are not passes"):
        config.session_settings(entry, known_passes={"elementwise_fusion"})


def test_session_options_know_the_same_keys():
    assert set(options.ONNXJIT_CONFIG_KEYS) == config.SESSION_KEYS


def _sources() -> list[Path]:
    return sorted((ROOT / "onnxjit").rglob("*.py")) + sorted((ROOT / "kernels").rglob("*.py"))


def test_only_config_reads_the_environment():
    readers = [
        str(p.relative_to(ROOT))
        for p in _sources()
        if re.search(r"\bos\.environ\b|\bgetenv\(|\benviron\.get\(", p.read_text())
    ]
    assert readers == ["onnxjit/config.py"]


def test_limits_does_not_import_config():
    tree = ast.parse((ROOT / "onnxjit" / "limits.py").read_text())
    imported = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            imported.add(node.module)
            imported.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
    assert "onnxjit.config" not in imported


def _readme_table() -> list[tuple[str, str]]:
    text = (ROOT / "README.md").read_text()
    start = text.index("| variable | session config entry |")
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append((cells[0].strip("`"), cells[1].strip("`")))
    return rows


def test_readme_lists_every_knob():
    want = [(k.env or "", k.key or "") for k in config.KNOBS]
    got = [(env if env != "-" else "", key if key != "-" else "") for env, key in _readme_table()]
    assert got == want
