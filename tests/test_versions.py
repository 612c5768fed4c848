"""Every registered operator version is tested at an opset that selects it.

onnx's node conformance cases mostly exercise the newest version of each operator. Here every
registration ``(domain, op_type, since)`` of onnxjit's registry gets its own test:

* derived cases: onnx's node test cases of that operator (``collect_testcases``) are rewritten
  to the smallest opset at which this registration is the one selected (its own
  since-version; a later schema version it serves only when no case is valid there); a case
  is kept when the model is valid there (``onnx.checker.check_model(full_check=True)``:
  attributes, input types, shape inference) and onnxjit is compared with
  ``onnx.reference.ReferenceEvaluator`` on the case's inputs (the reference, not the stored
  outputs: semantics changed across versions). Single-node cases are preferred; multi-node
  ones (function expansions) only serve operators with no valid single-node case. At most
  :data:`MAX_CASES` cases per registration; random operators compare dtype and shape only.
* hand-written tests: :data:`HAND_WRITTEN` names, for registrations no case can be derived
  for (or that the reference evaluator cannot run, :data:`REFERENCE_LACKS`), the test that
  covers them with another oracle (a test of another file, or one at the end of this file).
  Derived cases that are invalid at the old version in ways onnx's checker misses, or that
  the reference gets wrong there, are skipped with a reviewed reason
  (:data:`REFERENCE_SKIPS` by name, :data:`SKIP_RULES` by a predicate on the node).
* :func:`test_every_registration_is_tested` fails naming any registration with neither.
* :func:`test_unregistered_versions_only_change_types` compares the schema of every version
  (opset 7 and up) that has no registration of its own with the registration that serves it:
  a difference in attributes, inputs, outputs or function-body presence must be reviewed in
  :data:`REVIEWED_SCHEMA_CHANGES`.

onnx generates its node cases by running Python code (about 30 s); they are cached in the
system temporary directory, keyed by the onnx version.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import re
import tempfile
import warnings
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.defs
import pytest
from onnx import helper
from oracle import assert_close

import onnxjit
from onnxjit import registry

TESTS = Path(__file__).resolve().parent
MAX_CASES = 3
CASE_CACHE = (
    Path(tempfile.gettempdir()) / f"onnxjit-node-cases-{onnx.__version__}-{os.getuid()}.pkl"
)

# Operators whose outputs are random: only element type and shape are compared.
RANDOM_OPS = {
    ("", "Bernoulli"),
    ("", "Multinomial"),
    ("", "RandomNormal"),
    ("", "RandomNormalLike"),
    ("", "RandomUniform"),
    ("", "RandomUniformLike"),
}

# Registrations the reference evaluator cannot run at all (reviewed): no case is derived for
# them, and HAND_WRITTEN names the test that covers them with another oracle.
REFERENCE_LACKS: dict[tuple[str, str, int], str] = {
    ("", "BatchNormalization", 6): "the reference's BatchNormalization_6 returns a tuple",
    ("", "BatchNormalization", 7): "the reference runs BatchNormalization_6 here (returns a tuple)",
    ("", "BatchNormalization", 9): "the reference's BatchNormalization_9 disagrees with "
    "onnxruntime and with the cases' stored outputs (onnxjit matches both)",
    ("", "DequantizeLinear", 10): "the reference evaluator has no DequantizeLinear-10",
    ("", "DequantizeLinear", 13): "the reference evaluator has no DequantizeLinear-13",
    ("", "Dropout", 6): "the reference evaluator has no Dropout-6",
    ("", "Gemm", 1): "the reference evaluator has no Gemm-1",
    ("", "RNN", 1): "the reference evaluator has no RNN-1",
    ("", "Scatter", 9): "the reference evaluator has no Scatter (deprecated at 11)",
    ("", "Split", 1): "the reference evaluator has no Split-1",
}

_BROADCAST_0 = (
    "the case broadcasts without broadcast=1, which this version forbids (onnxjit refuses the "
    "node; the reference evaluator broadcasts like numpy)"
)
_COERCE_2D = (
    "before opset 13 the op flattens the input to 2-D at axis; the reference evaluator applies "
    "the opset-13 (single-axis) semantics (tests/test_ops_nn.py uses onnxruntime there)"
)


def _attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            value = helper.get_attribute_value(a)
            return value.decode() if isinstance(value, bytes) else value
    return default


def _broadcasts_without_flag(node: onnx.NodeProto, inputs: list[Any]) -> bool:
    # Before opset 7 the binary ops (and Gemm's C) need broadcast=1 for unequal shapes.
    shapes = [np.shape(v) for v in inputs]
    if node.op_type == "Gemm":
        if len(shapes) < 3:
            return False
        a, b = shapes[0], shapes[1]
        rows = a[1] if _attr(node, "transA", 0) else a[0]
        cols = b[0] if _attr(node, "transB", 0) else b[1]
        return shapes[2] != (rows, cols) and not _attr(node, "broadcast", 0)
    return len(set(shapes)) > 1 and not _attr(node, "broadcast", 0)


def _coerces_over_several_axes(node: onnx.NodeProto, inputs: list[Any]) -> bool:
    # Softmax-1/11 flatten to 2-D at axis: that equals the one-axis form only at the last axis.
    ndim = np.ndim(inputs[0])
    axis = _attr(node, "axis", 1)
    return (axis % ndim if ndim else 0) != ndim - 1 and ndim > 1


# Families of derived cases that are invalid at an old version though onnx's checker accepts
# them (reviewed): (domain, op, since) -> (predicate(node, inputs), reason).
SKIP_RULES: dict[tuple[str, str, int], tuple[Any, str]] = {
    **{
        ("", op, 6): (_broadcasts_without_flag, _BROADCAST_0) for op in ("Add", "Sub", "Mul", "Div")
    },
    ("", "Pow", 1): (_broadcasts_without_flag, _BROADCAST_0),
    ("", "Gemm", 6): (_broadcasts_without_flag, _BROADCAST_0),
    **{
        ("", op, v): (_coerces_over_several_axes, _COERCE_2D)
        for op in ("Softmax", "LogSoftmax", "Hardmax")
        for v in (1, 11)
    },
    ("", "AveragePool", 1): (
        lambda node, _inputs: (
            any(_attr(node, "pads", []))
            or _attr(node, "auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER")
        ),
        "AveragePool-1 does not say whether pads count in the divisor; the reference counts "
        "them, onnxjit excludes them (count_include_pad=0, the default once the attribute "
        "exists, and the cases' stored outputs)",
    ),
    ("", "GridSample", 16): (
        lambda node, _inputs: _attr(node, "mode", "bilinear") in ("linear", "cubic"),
        "the case spells mode 'linear'/'cubic' (opset-20 names); GridSample-16 says "
        "'bilinear'/'bicubic' and onnxjit refuses the others",
    ),
}

# Derived cases that are not valid at the old version though onnx's checker accepts them, or
# that the reference evaluator gets wrong there (reviewed): (domain, op, since, case) -> reason.
REFERENCE_SKIPS: dict[tuple[str, str, int, str], str] = {
    ("", "QuantizeLinear", 10, "test_quantizelinear_axis"): "per-axis scales start at opset 13",
    ("", "MaxUnpool", 9, "test_maxunpool_export_with_output_shape"): "deliberate: onnxjit reads "
    "the indices in output_shape as onnxruntime does (onnxjit/ops/misc.py max_unpool); the "
    "reference reads them in the inferred shape",
    ("", "Scan", 8, "test_scan_sum"): "the reference evaluator runs Scan-9 semantics (no batch "
    "axis) for Scan-8 and fails (HAND_WRITTEN names the Scan-8 test)",
}

# Registrations that no conformance case can be derived for (onnx has no case of the op, or
# every case uses inputs or attributes of a later version), and the test that covers them at
# an opset selecting them (reviewed by reading each test).
_ML = "ai.onnx.ml"
_NN, _TENSOR, _REDUCE = (
    "tests/test_ops_nn.py",
    "tests/test_ops_tensor.py",
    "tests/test_ops_reduce.py",
)
_SEQ, _MLT, _MISC = "tests/test_ops_sequence.py", "tests/test_ops_ml.py", "tests/test_ops_misc.py"
HAND_WRITTEN: dict[tuple[str, str, int], str] = {
    ("", "BatchNormalization", 1): "tests/test_ops_legacy.py::"
    "test_batchnorm_old_versions_normalise_with_given_statistics",
    ("", "BatchNormalization", 6): "tests/test_ops_legacy.py::"
    "test_batchnorm_old_versions_normalise_with_given_statistics",
    ("", "BatchNormalization", 7): f"{_NN}::test_batchnorm",
    ("", "BatchNormalization", 9): f"{_NN}::test_batchnorm",
    ("", "DequantizeLinear", 10): "tests/test_ops_quant.py::test_dequantizelinear",
    ("", "DequantizeLinear", 13): "tests/test_ops_quant.py::test_dequantizelinear",
    ("", "Clip", 6): "tests/test_ops_elementwise.py::test_clip_6",
    ("", "Dropout", 6): f"{_TENSOR}::test_dropout_6",
    ("", "Gemm", 1): f"{_NN}::test_gemm_6_broadcast",
    ("", "RNN", 1): "tests/test_ops_rnn.py::test_rnn_version1",
    ("", "Scatter", 9): f"{_TENSOR}::test_scatter_9_uses_onnxruntime",
    ("", "ConcatFromSequence", 11): f"{_SEQ}::test_concat_from_sequence",
    ("", "DepthToSpace", 1): f"{_TENSOR}::test_depth_to_space_1",
    ("", "GlobalLpPool", 1): f"{_NN}::test_lppool_1",
    ("", "GlobalLpPool", 2): f"{_NN}::test_global_pools",
    ("", "GlobalLpPool", 22): f"{_NN}::test_global_pools",
    ("", "GroupNormalization", 18): f"{_NN}::test_group_norm_18",
    ("", "Loop", 1): "tests/test_ops_control.py::test_loop_for",
    ("", "LpPool", 1): f"{_NN}::test_lppool_1",
    ("", "MaxRoiPool", 1): "tests/test_ops_roi_pool.py::test_max_roi_pool_float",
    ("", "MaxRoiPool", 22): "tests/test_ops_roi_pool.py::test_max_roi_pool_float",
    ("", "MeanVarianceNormalization", 13): f"{_NN}::test_mvn",
    ("", "Multinomial", 7): f"{_MISC}::test_multinomial",
    ("", "Optional", 15): f"{_SEQ}::test_optional_holding_a_value",
    ("", "Pad", 1): f"{_TENSOR}::test_pad_1_and_strings",
    ("", "Pad", 2): f"{_TENSOR}::test_pad_2",
    ("", "RandomNormal", 1): f"{_MISC}::test_random_shape_dtype_and_statistics",
    ("", "RandomNormalLike", 1): f"{_MISC}::test_random_like",
    ("", "RandomUniform", 1): f"{_MISC}::test_random_shape_dtype_and_statistics",
    **{
        ("", op, 1): f"{_REDUCE}::test_reduce_axes_attribute"
        for op in (
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSum",
            "ReduceLogSumExp",
            "ReduceSum",
            "ReduceSumSquare",
        )
    },
    ("", "Reshape", 1): f"{_TENSOR}::test_reshape_1_attribute",
    ("", "Resize", 10): "tests/test_ops_resize.py::test_resize10",
    ("", "Resize", 11): "tests/test_ops_resize.py::test_resize11",
    ("", "RoiAlign", 10): "tests/test_ops_vision.py::test_roialign10",
    ("", "SequenceAt", 11): f"{_SEQ}::test_sequence_at",
    ("", "SequenceConstruct", 11): f"{_SEQ}::test_sequence_construct_and_length",
    ("", "SequenceEmpty", 11): f"{_SEQ}::test_sequence_empty_and_length",
    ("", "SequenceErase", 11): f"{_SEQ}::test_sequence_erase",
    ("", "SequenceLength", 11): f"{_SEQ}::test_sequence_construct_and_length",
    ("", "Scan", 8): "tests/test_ops_control.py::test_scan8_batched",
    ("", "Slice", 1): f"{_TENSOR}::test_slice_1",
    ("", "Split", 1): f"{_TENSOR}::test_split_1_and_2",
    ("", "Squeeze", 1): f"{_TENSOR}::test_squeeze",
    ("", "Tile", 1): f"{_TENSOR}::test_tile_1",
    ("", "TopK", 1): f"{_REDUCE}::test_topk_version_1",
    ("", "Unsqueeze", 1): f"{_TENSOR}::test_unsqueeze",
    ("", "Upsample", 7): "tests/test_ops_resize.py::test_upsample7_nearest",
    (_ML, "CastMap", 1): "tests/test_versions.py::test_cast_map_1",
    (_ML, "CategoryMapper", 1): f"{_MLT}::test_category_mapper",
    (_ML, "DictVectorizer", 1): "tests/test_versions.py::test_dict_vectorizer_1",
    (_ML, "FeatureVectorizer", 1): f"{_MLT}::test_feature_vectorizer",
    (_ML, "Imputer", 1): f"{_MLT}::test_imputer",
    (_ML, "LabelEncoder", 1): f"{_MLT}::test_label_encoder_1",
    (_ML, "LinearClassifier", 1): f"{_MLT}::test_linear_classifier",
    (_ML, "LinearRegressor", 1): f"{_MLT}::test_linear_regressor",
    (_ML, "Normalizer", 1): f"{_MLT}::test_normalizer",
    (_ML, "OneHotEncoder", 1): f"{_MLT}::test_one_hot_encoder",
    (_ML, "Scaler", 1): f"{_MLT}::test_scaler",
    (_ML, "SVMClassifier", 1): "tests/test_ops_svm.py::test_svm_classifier_node",
    (_ML, "SVMRegressor", 1): "tests/test_ops_svm.py::test_svm_regressor_node",
    (_ML, "TreeEnsembleClassifier", 1): f"{_MLT}::test_tree_classifier_multiclass",
    (_ML, "TreeEnsembleClassifier", 3): f"{_MLT}::test_tree_classifier_multiclass",
    (_ML, "TreeEnsembleRegressor", 1): f"{_MLT}::test_tree_regressor_modes",
    (_ML, "TreeEnsembleRegressor", 3): f"{_MLT}::test_tree_regressor_modes",
    (_ML, "ZipMap", 1): f"{_MLT}::test_zipmap",
}

# Schema versions without a registration of their own whose schema differs from the
# registration serving them in more than types or documentation (reviewed):
# (domain, op_type, version) -> why the registration below handles it.
_BODY_ONLY = (
    "onnx added a function body; inputs, outputs and attributes are those of the registration "
    "below, which runs a kernel rather than the body"
)
REVIEWED_SCHEMA_CHANGES: dict[tuple[str, str, int], str] = {
    ("", "Clip", 13): _BODY_ONLY,
    ("", "DepthToSpace", 28): _BODY_ONLY,
    ("", "LeakyRelu", 16): _BODY_ONLY,
    ("", "PRelu", 16): _BODY_ONLY,
    ("", "Relu", 14): _BODY_ONLY,
    **{
        ("", "Constant", v): (
            "sparse_value (11) and value_float(s)/value_int(s)/value_string(s) (12) were added "
            "and value became optional; Constant-1's one body accepts every one of them (the "
            "checker refuses them below the version that introduced them)"
        )
        for v in (11, 12, 13, 19, 21, 23, 24, 25)
    },
}


# --------------------------------------------------------------------------------------------
# Cases


def _load_node_cases() -> list[tuple[str, bytes, list, float, float]]:
    """onnx's generated node cases as ``(name, model bytes, data sets, rtol, atol)``."""
    # Only a cache this user wrote is read (pickle runs code; the directory is shared).
    if CASE_CACHE.exists() and CASE_CACHE.stat().st_uid == os.getuid():
        with contextlib.suppress(Exception), CASE_CACHE.open("rb") as f:
            return pickle.load(f)
    from onnx.backend.test.case import node

    with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collected = node.collect_testcases(None)
    cases = [(c.name, c.model.SerializeToString(), c.data_sets, c.rtol, c.atol) for c in collected]
    # Written under a private name then renamed: two pytest workers may race here.
    tmp = CASE_CACHE.with_suffix(f".{os.getpid()}.tmp")
    with tmp.open("wb") as f:
        pickle.dump(cases, f)
    os.replace(tmp, CASE_CACHE)
    return cases


def _registrations() -> list[registry.OpImpl]:
    return [
        impl
        for versions in registry.implementations().values()
        for impl in versions
        if not impl.domain.startswith("test.")
    ]


@cache
def _schema_history() -> dict[tuple[str, str], dict[int, onnx.defs.OpSchema]]:
    """(domain, op_type) -> {since_version: schema} for every schema onnx defines."""
    history: dict[tuple[str, str], dict[int, onnx.defs.OpSchema]] = {}
    for s in onnx.defs.get_all_schemas_with_history():
        history.setdefault((registry.normalize_domain(s.domain), s.name), {})[s.since_version] = s
    return history


def _schema_versions(domain: str, op_type: str) -> list[int]:
    """Every since_version onnx defines for the operator, ascending."""
    return sorted(_schema_history().get((domain, op_type), {}))


def _served_versions(impl: registry.OpImpl) -> list[int]:
    """The schema versions that resolve to this registration, ascending."""
    later = [
        i.since
        for i in registry.implementations()[(impl.domain, impl.op_type)]
        if i.since > impl.since
    ]
    stop = min(later, default=10**9)
    return [v for v in _schema_versions(impl.domain, impl.op_type) if impl.since <= v < stop]


def _retarget(model_bytes: bytes, domain: str, opset: int) -> onnx.ModelProto | None:
    """The case's model importing ``domain`` at ``opset``; None when invalid there.

    Declared output dimensions are forgotten (the rank is kept): an older version may compute
    other sizes, and the checker's shape inference would refuse a stale declaration.
    """
    model = onnx.load_from_string(model_bytes)
    for oi in model.opset_import:
        if registry.normalize_domain(oi.domain) == domain:
            oi.version = opset
            break
    else:
        model.opset_import.append(helper.make_opsetid(domain, opset))
    del model.graph.value_info[:]
    for out in model.graph.output:
        if out.type.HasField("tensor_type") and out.type.tensor_type.HasField("shape"):
            for dim in out.type.tensor_type.shape.dim:
                dim.Clear()
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception:
        return None
    return model


def _all_nodes_resolve(model: onnx.ModelProto) -> bool:
    """Every top-level node has an onnxjit implementation at the model's opsets.

    A multi-node case (a function expansion, a sequence model) retargeted to an old opset may
    use other operators at versions onnxjit does not implement (before opset 7): such a case
    says nothing about the registration under test.
    """
    opsets = {registry.normalize_domain(o.domain): o.version for o in model.opset_import}
    for n in model.graph.node:
        domain = registry.normalize_domain(n.domain)
        schema = registry.find_schema(n.op_type, opsets.get(domain, 0), domain)
        if schema is None or registry.find_impl(domain, n.op_type, schema.since_version) is None:
            return False
    return True


@cache
def _cases_by_op() -> dict[tuple[str, str], list[tuple[str, bytes, list, bool]]]:
    """Node cases indexed by every (domain, op_type) at the top level of their graph.

    Single-node cases come first; multi-node ones (function expansions, sequence models) are
    only used for an operator without a valid single-node case.
    """
    index: dict[tuple[str, str], list[tuple[str, bytes, list, bool]]] = {}
    for name, model_bytes, data_sets, _rtol, _atol in _load_node_cases():
        model = onnx.load_from_string(model_bytes)
        ops = {(registry.normalize_domain(n.domain), n.op_type) for n in model.graph.node}
        for key in ops:
            index.setdefault(key, []).append((name, model_bytes, data_sets, len(ops) == 1))
    for entries in index.values():
        entries.sort(key=lambda e: (not e[3], e[0]))
    return index


def _skip_reason(
    key: tuple[str, str, int], name: str, model: onnx.ModelProto, data_sets: list
) -> str | None:
    """Why a derived case is skipped (REFERENCE_SKIPS or a SKIP_RULES match), else None."""
    if (*key, name) in REFERENCE_SKIPS:
        return REFERENCE_SKIPS[(*key, name)]
    rule = SKIP_RULES.get(key)
    if rule is not None and len(model.graph.node) == 1:
        predicate, reason = rule
        if predicate(model.graph.node[0], list(data_sets[0][0])):
            return reason
    return None


_Case = tuple[str, int, bytes, list, "str | None"]


@cache
def _derived() -> dict[tuple[str, str, int], list[_Case]]:
    """Up to MAX_CASES ``(case name, opset, model, data sets)`` per registration.

    A case runs at the smallest served opset where it is valid; cases valid at the
    registration's own since-version come first.
    """
    out: dict[tuple[str, str, int], list[_Case]] = {}
    index = _cases_by_op()
    for impl in _registrations():
        key = (impl.domain, impl.op_type, impl.since)
        chosen: list[_Case] = []
        out[key] = chosen
        if key in REFERENCE_LACKS:
            continue
        for single in (True, False):
            for opset in _served_versions(impl):
                for name, model_bytes, data_sets, one in index.get(key[:2], ()):
                    # Skipped cases are kept (the skip shows) but do not use up the budget.
                    if sum(c[4] is None for c in chosen) >= MAX_CASES:
                        break
                    if one != single or not data_sets or any(c[0] == name for c in chosen):
                        continue
                    model = _retarget(model_bytes, impl.domain, opset)
                    if model is not None and (single or _all_nodes_resolve(model)):
                        reason = _skip_reason(key, name, model, data_sets)
                        chosen.append((name, opset, model.SerializeToString(), data_sets, reason))
                if chosen:
                    break
            if chosen:
                break
    return out


def _derived_params() -> list[Any]:
    params = []
    for key, cases in _derived().items():
        for name, opset, model_bytes, data_sets, reason in cases:
            domain, op, since = key
            label = f"{domain + '.' if domain else ''}{op}-{since}@{opset}:{name[5:]}"
            marks = ()
            if reason:
                marks = (pytest.mark.skip(reason=reason),)
            params.append(pytest.param(key, name, model_bytes, data_sets, id=label, marks=marks))
    return params


def _compare(got: Any, want: Any, random: bool, what: str) -> None:
    if want is None:
        assert got is None, f"{what}: expected no value (empty optional), got {type(got)}"
        return
    if random:
        g, w = np.asarray(got), np.asarray(want)
        assert g.dtype == w.dtype and g.shape == w.shape, (
            f"{what}: {g.dtype}{g.shape} != expected {w.dtype}{w.shape}"
        )
        return
    if isinstance(want, np.ndarray) and want.dtype.kind == "U":
        # The reference evaluator returns numpy unicode arrays for strings; ONNX string
        # tensors are object arrays of str (onnxruntime's and onnxjit's form).
        want = want.astype(object)
    assert_close(got, want, rtol=1e-3, atol=1e-5, what=what)


@pytest.mark.parametrize(("key", "case", "model_bytes", "data_sets"), _derived_params())
def test_registration_matches_reference(key, case, model_bytes, data_sets):
    """onnxjit agrees with onnx's reference evaluator at an opset selecting the registration."""
    from onnx.reference import ReferenceEvaluator

    model = onnx.load_from_string(model_bytes)
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    sess = onnxjit.InferenceSession(model_bytes)
    ref = ReferenceEvaluator(model)
    for inputs, _stored in data_sets:
        # Cases store inputs of types numpy lacks as TensorProto; both runtimes take arrays.
        inputs = [
            onnx.numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v for v in inputs
        ]
        feeds = dict(zip(names, inputs, strict=True))
        want = ref.run(None, feeds)
        got = sess.run(None, feeds)
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _compare(g, w, key[:2] in RANDOM_OPS, f"{case} output {i}")


# --------------------------------------------------------------------------------------------
# Audits


def test_every_registration_is_tested():
    """Each registration has a derived case here or a hand-written test that exists."""
    derived = _derived()
    missing, broken = [], []
    for impl in _registrations():
        key = (impl.domain, impl.op_type, impl.since)
        if any(case[4] is None for case in derived.get(key, ())):
            continue
        where = HAND_WRITTEN.get(key)
        if where is None:
            missing.append(impl.label)
            continue
        path, _, test = where.partition("::")
        source = (TESTS.parent / path).read_text() if (TESTS.parent / path).exists() else ""
        if not re.search(rf"^\s*def {re.escape(test)}\(", source, re.M):
            broken.append(f"{impl.label} -> {where}")
    assert not broken, f"HAND_WRITTEN names tests that do not exist: {broken}"
    assert not missing, (
        f"{len(missing)} registrations have no test at an opset selecting them (no onnx case is "
        f"valid there and HAND_WRITTEN names none): {missing}; write one and list it"
    )


def test_hand_written_table_has_no_stale_rows():
    """HAND_WRITTEN only names registrations that exist and that no derived case covers."""
    derived = _derived()
    stale = sorted(k for k in HAND_WRITTEN if k not in derived)
    assert not stale, f"HAND_WRITTEN rows for registrations that do not exist: {stale}"
    covered = sorted(k for k in HAND_WRITTEN if any(c[4] is None for c in derived[k]))
    assert not covered, f"HAND_WRITTEN rows now covered by derived cases (remove them): {covered}"


def test_reviewed_tables_name_real_cases():
    """REFERENCE_SKIPS rows name derived cases; the other tables name registrations."""
    derived = _derived()
    names = {(*key, case[0]) for key, cases in derived.items() for case in cases}
    stale = sorted(k for k in REFERENCE_SKIPS if k not in names)
    assert not stale, f"REFERENCE_SKIPS rows for cases no longer derived: {stale}"
    stale = sorted(k for k in (*REFERENCE_LACKS, *SKIP_RULES) if k not in derived)
    assert not stale, f"REFERENCE_LACKS/SKIP_RULES rows for unknown registrations: {stale}"


def _attribute_signature(attr: onnx.defs.OpSchema.Attribute) -> tuple:
    default = attr.default_value
    text = default.SerializeToString() if default is not None and default.type else b""
    return (attr.type, attr.required, text)


def _formal_signature(params: list) -> list[tuple]:
    # Names and descriptions are documentation; arity and optionality are semantics.
    return [(p.option, p.is_homogeneous) for p in params]


def schema_differences(old: onnx.defs.OpSchema, new: onnx.defs.OpSchema) -> list[str]:
    """What changed from ``old`` to ``new`` beyond types and documentation."""
    diffs = []
    a_old = {n: _attribute_signature(a) for n, a in old.attributes.items()}
    a_new = {n: _attribute_signature(a) for n, a in new.attributes.items()}
    if added := sorted(set(a_new) - set(a_old)):
        diffs.append(f"attributes added {added}")
    if removed := sorted(set(a_old) - set(a_new)):
        diffs.append(f"attributes removed {removed}")
    if changed := sorted(n for n in set(a_old) & set(a_new) if a_old[n] != a_new[n]):
        diffs.append(f"attributes changed (type, required or default) {changed}")
    if _formal_signature(old.inputs) != _formal_signature(new.inputs):
        diffs.append(f"inputs {[i.name for i in old.inputs]} -> {[i.name for i in new.inputs]}")
    if _formal_signature(old.outputs) != _formal_signature(new.outputs):
        diffs.append(f"outputs {[o.name for o in old.outputs]} -> {[o.name for o in new.outputs]}")
    # A plain body replacing a context-dependent one (or back) is still a body.
    had = old.has_function or old.has_context_dependent_function
    has = new.has_function or new.has_context_dependent_function
    if had != has:
        diffs.append("function body " + ("added" if has else "removed"))
    return diffs


def _unregistered_version_problems() -> dict[tuple[str, str, int], str]:
    """(domain, op, version) -> difference, for unregistered versions >= 7 of our ops."""
    problems = {}
    for (domain, op), impls in registry.implementations().items():
        if domain.startswith("test."):
            continue
        history = _schema_history().get((domain, op), {})
        floor = 7 if domain == "" else 1
        registered = {i.since for i in impls}
        for version in sorted(history):
            if version < floor or version in registered:
                continue
            below = [i.since for i in impls if i.since < version]
            if not below:
                problems[(domain, op, version)] = "no registration at or below this version"
                continue
            diffs = schema_differences(history[max(below)], history[version])
            if diffs:
                problems[(domain, op, version)] = f"vs {op}-{max(below)}: " + "; ".join(diffs)
    return problems


def test_unregistered_versions_only_change_types():
    """A schema version without its own registration differs only in types or documentation.

    Differences found here were reviewed one by one in REVIEWED_SCHEMA_CHANGES (the
    registration below handles them); a new one needs either a registration or a review.
    """
    problems = _unregistered_version_problems()
    unreviewed = {k: v for k, v in problems.items() if k not in REVIEWED_SCHEMA_CHANGES}
    lines = [f"{d + '.' if d else ''}{op}-{v}: {why}" for (d, op, v), why in unreviewed.items()]
    assert not unreviewed, (
        f"{len(lines)} unregistered schema versions change more than types:\n" + "\n".join(lines)
    )
    stale = sorted(k for k in REVIEWED_SCHEMA_CHANGES if k not in problems)
    assert not stale, f"REVIEWED_SCHEMA_CHANGES rows that no longer apply: {stale}"


# --------------------------------------------------------------------------------------------
# Hand-written tests for registrations no onnx case covers


def _map_model(op: str, key: int, out_elem: int, attrs: dict[str, Any]) -> bytes:
    value = helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, None)
    node = helper.make_node(op, ["x"], ["y"], domain=_ML, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_value_info("x", helper.make_map_type_proto(key, value))],
        [helper.make_tensor_value_info("y", out_elem, ["n", "k"])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(_ML, 1)]
    )
    model.ir_version = 8
    return model.SerializeToString()


def _ort_run(model: bytes, feeds: dict[str, Any]) -> list[Any]:
    import onnxruntime as ort

    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.parametrize(
    ("attrs", "elem"),
    [
        ({"cast_to": "TO_FLOAT"}, onnx.TensorProto.FLOAT),
        ({"cast_to": "TO_INT64"}, onnx.TensorProto.INT64),
        ({"cast_to": "TO_FLOAT", "map_form": "SPARSE", "max_map": 6}, onnx.TensorProto.FLOAT),
        ({"cast_to": "TO_INT64", "map_form": "SPARSE", "max_map": 4}, onnx.TensorProto.INT64),
    ],
)
def test_cast_map_1(attrs, elem):
    # The reference evaluator has no CastMap: onnxruntime is the oracle. TO_STRING is left out:
    # the spec does not say how floats are written (onnxruntime prints "%f", "0.500000").
    # Empty maps are left out: onnxruntime refuses them, so there is no oracle.
    x = {1: 0.5, 3: 2.0, 0: -1.5}
    model = _map_model("CastMap", onnx.TensorProto.INT64, elem, attrs)
    want = _ort_run(model, {"x": x})
    got = onnxjit.InferenceSession(model).run(None, {"x": x})
    assert_close(got[0], want[0], what="CastMap-1")


@pytest.mark.parametrize(
    ("key", "vocab", "x"),
    [
        (
            onnx.TensorProto.STRING,
            {"string_vocabulary": ["a", "b", "c", "d"]},
            {"b": 1.5, "d": -2.0},
        ),
        (onnx.TensorProto.INT64, {"int64_vocabulary": [7, 3, 5]}, {5: 4.0, 7: 1.0, 9: 3.0}),
    ],
    ids=["string-keys", "int-keys-unknown-key"],
)
def test_dict_vectorizer_1(key, vocab, x):
    # The reference evaluator's DictVectorizer returns a 1-D float64 array for one map (the
    # spec's output is [1, len(vocabulary)] with the map's value type): onnxruntime is the
    # oracle. Empty maps are left out: onnxruntime refuses them.
    model = _map_model("DictVectorizer", key, onnx.TensorProto.FLOAT, vocab)
    want = _ort_run(model, {"x": x})
    got = onnxjit.InferenceSession(model).run(None, {"x": x})
    assert_close(got[0], want[0], what="DictVectorizer-1")
