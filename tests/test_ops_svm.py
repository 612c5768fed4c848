"""SVMClassifier-1 / SVMRegressor-1 (ai.onnx.ml): scikit-learn models converted by skl2onnx
and hand-built nodes, against onnxruntime.

onnxruntime is the oracle: the spec leaves the score layout of the classifier open
(binary case, one-vs-one decision values, probability coupling) and skl2onnx builds its
models for onnxruntime's layout. Hand-built nodes are also checked against the ONNX
reference evaluator where the two oracles agree (multiclass labels, regressors).
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from oracle import assert_close, ort_outputs, reference_outputs

import onnxjit
from onnxjit.errors import OnnxJitError

ML = "ai.onnx.ml"

warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=DeprecationWarning)


def _run(model: onnx.ModelProto, feeds: dict) -> list:
    return onnxjit.InferenceSession(model.SerializeToString()).run(None, feeds)


def _compare(model, feeds, want, rtol=1e-4, atol=1e-5):
    got = _run(model, feeds)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        if w.dtype.kind in "OUS":
            assert np.asarray(g).dtype == object
            np.testing.assert_array_equal(np.asarray(g, dtype=object), w.astype(object))
        else:
            assert_close(g, w, rtol, atol, f"output {i}")
    return got


# --------------------------------------------------------------------------------------------
# scikit-learn models through skl2onnx
# --------------------------------------------------------------------------------------------


def _skl_model(est, x):
    from skl2onnx import to_onnx

    opts = {id(est): {"zipmap": False}} if hasattr(est, "classes_") else None
    return to_onnx(est, x[:1], target_opset={"": 17, ML: 3}, options=opts)


def _classification(n_cls: int, seed: int = 0):
    from sklearn.datasets import make_classification

    x, y = make_classification(
        80, 5, n_informative=4, n_redundant=0, n_classes=n_cls, random_state=seed
    )
    return x.astype(np.float32), y


@pytest.mark.parametrize("probability", [False, True])
@pytest.mark.parametrize("kernel", ["linear", "poly", "rbf", "sigmoid"])
@pytest.mark.parametrize("n_cls", [2, 3, 4])
def test_svc_sklearn(n_cls, kernel, probability):
    from sklearn.svm import SVC

    x, y = _classification(n_cls)
    est = SVC(kernel=kernel, probability=probability, random_state=0).fit(x, y)
    model = _skl_model(est, x)
    want = ort_outputs(model, {"X": x})
    _compare(model, {"X": x}, want)


@pytest.mark.parametrize("probability", [False, True])
@pytest.mark.parametrize("n_cls", [2, 3])
def test_nusvc_sklearn_string_labels(n_cls, probability):
    from sklearn.svm import NuSVC

    x, y = _classification(n_cls, seed=3)
    labels = np.array(["cat", "dog", "emu"])[y]
    est = NuSVC(nu=0.3, probability=probability, random_state=0).fit(x, labels)
    model = _skl_model(est, x)
    want = ort_outputs(model, {"X": x})
    _compare(model, {"X": x}, want)


@pytest.mark.parametrize(
    "make",
    [
        lambda: __import__("sklearn.svm").svm.SVR(kernel="rbf", C=3.0),
        lambda: __import__("sklearn.svm").svm.SVR(kernel="poly", degree=2),
        lambda: __import__("sklearn.svm").svm.SVR(kernel="linear"),
        lambda: __import__("sklearn.svm").svm.NuSVR(kernel="sigmoid", gamma=0.05),
        lambda: __import__("sklearn.svm").svm.OneClassSVM(kernel="rbf", nu=0.2),
    ],
    ids=["svr_rbf", "svr_poly", "svr_linear", "nusvr_sigmoid", "oneclass_rbf"],
)
def test_svr_sklearn(make):
    from sklearn.datasets import make_regression

    x, y = make_regression(70, 4, noise=0.1, random_state=1)
    x = x.astype(np.float32)
    est = make().fit(x, y) if "OneClass" not in type(make()).__name__ else make().fit(x)
    model = _skl_model(est, x)
    want = ort_outputs(model, {"X": x})
    _compare(model, {"X": x}, want, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------------------------
# hand-built nodes
# --------------------------------------------------------------------------------------------


def _node_model(op, x, attrs, n_out):
    outs = ["Y", "Z"][:n_out]
    node = helper.make_node(op, ["X"], outs, domain=ML, **attrs)
    et = helper.np_dtype_to_tensor_dtype(x.dtype)
    lab = TensorProto.STRING if "classlabels_strings" in attrs else TensorProto.INT64
    if op == "SVMClassifier":
        out_vi = [
            helper.make_tensor_value_info("Y", lab, ["N"]),
            helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["N", "K"]),
        ]
    else:
        out_vi = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 1])]
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", et, ["N", x.shape[1]])], out_vi
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)]
    )
    model.ir_version = 8
    return model


def _ovo_attrs(rng, n_cls, n_feat, kernel, proba):
    """Random libsvm-layout attributes: per-class vector counts, (C-1) x V coefficients."""
    per = [2, 3, 1, 2][:n_cls]
    nv = sum(per)
    n_pairs = n_cls * (n_cls - 1) // 2
    attrs = {
        "vectors_per_class": per,
        "support_vectors": rng.standard_normal(nv * n_feat).astype(np.float32).tolist(),
        "coefficients": rng.standard_normal((n_cls - 1) * nv).astype(np.float32).tolist(),
        "rho": rng.standard_normal(n_pairs).astype(np.float32).tolist(),
        "kernel_type": kernel,
        "kernel_params": [0.3, 0.5, 3.0],
        "classlabels_ints": list(range(10, 10 + n_cls)),
    }
    if proba:
        attrs["prob_a"] = (-rng.uniform(0.5, 2, n_pairs)).astype(np.float32).tolist()
        attrs["prob_b"] = rng.uniform(-0.3, 0.3, n_pairs).astype(np.float32).tolist()
    return attrs


POSTS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"]


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("proba", [False, True])
@pytest.mark.parametrize("n_cls", [2, 3])
@pytest.mark.parametrize("kernel", ["POLY", "SIGMOID", "RBF", "LINEAR"])
def test_svm_classifier_node(kernel, n_cls, proba, post):
    rng = np.random.default_rng(7)
    attrs = _ovo_attrs(rng, n_cls, 3, kernel, proba)
    attrs["post_transform"] = post
    x = rng.standard_normal((9, 3)).astype(np.float32)
    model = _node_model("SVMClassifier", x, attrs, 2)
    want = ort_outputs(model, {"X": x})
    if n_cls == 2 and not proba and post == "PROBIT":
        # onnxruntime leaves the second score column unwritten (uninitialised memory);
        # onnxjit writes 0 there: compare the labels and the first column only
        got = _run(model, {"X": x})
        np.testing.assert_array_equal(got[0], want[0])
        assert_close(got[1][:, 0], want[1][:, 0], 1e-4, 1e-5)
        return
    _compare(model, {"X": x}, want)


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_svm_classifier_input_types(dtype):
    rng = np.random.default_rng(2)
    attrs = _ovo_attrs(rng, 3, 4, "RBF", False)
    attrs["kernel_params"] = [0.05, 0.0, 3.0]
    x = rng.integers(-4, 5, (6, 4)).astype(dtype)
    model = _node_model("SVMClassifier", x, attrs, 2)
    _compare(model, {"X": x}, ort_outputs(model, {"X": x}))


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize(
    "coef_kind",
    ["positive", "mixed"],
)
@pytest.mark.parametrize("n_cls", [1, 2, 3])
def test_svm_classifier_linear_form(n_cls, coef_kind, post):
    # no support vectors: liblinear layout, rho[0] shared by every class
    rng = np.random.default_rng(n_cls)
    w = rng.uniform(0, 0.3, (n_cls, 3)) if coef_kind == "positive" else rng.normal(size=(n_cls, 3))
    attrs = {
        "coefficients": w.astype(np.float32).ravel().tolist(),
        "rho": [0.1],
        "kernel_params": [0.1, 0.0, 1.0],  # onnxruntime requires the attribute
        "classlabels_strings": [f"c{i}" for i in range(n_cls)],
        "post_transform": post,
    }
    x = rng.uniform(-1, 2, (12, 3)).astype(np.float32)
    model = _node_model("SVMClassifier", x, attrs, 2)
    # PROBIT near 0.5 cancels in onnxruntime's float32 2v - 1: absolute error ~1e-5
    atol = 1e-4 if post == "PROBIT" else 1e-5
    _compare(model, {"X": x}, ort_outputs(model, {"X": x}), atol=atol)


def test_svm_classifier_multiclass_matches_reference():
    # the reference evaluator agrees with onnxruntime on multiclass one-vs-one labels/scores
    rng = np.random.default_rng(11)
    attrs = _ovo_attrs(rng, 4, 3, "RBF", False)
    x = rng.standard_normal((7, 3)).astype(np.float32)
    model = _node_model("SVMClassifier", x, attrs, 2)
    _compare(model, {"X": x}, reference_outputs(model, {"X": x}))


def test_svm_classifier_empty_and_1d():
    rng = np.random.default_rng(4)
    attrs = _ovo_attrs(rng, 3, 3, "POLY", True)
    x = np.zeros((0, 3), np.float32)
    model = _node_model("SVMClassifier", x, attrs, 2)
    y, z = _run(model, {"X": x})
    assert y.shape == (0,) and y.dtype == np.int64
    assert z.shape == (0, 3) and z.dtype == np.float32


def test_svm_classifier_1d_input():
    # a 1-D X is one row: Y [1], Z [1, K] (onnxruntime's reading)
    rng = np.random.default_rng(9)
    attrs = _ovo_attrs(rng, 3, 3, "SIGMOID", True)
    x = rng.standard_normal(3).astype(np.float32)
    node = helper.make_node("SVMClassifier", ["X"], ["Y", "Z"], domain=ML, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3])],
        [
            helper.make_tensor_value_info("Y", TensorProto.INT64, [1]),
            helper.make_tensor_value_info("Z", TensorProto.FLOAT, [1, 3]),
        ],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)]
    )
    model.ir_version = 8
    _compare(model, {"X": x}, ort_outputs(model, {"X": x}))


def test_svm_classifier_bad_features():
    rng = np.random.default_rng(4)
    attrs = _ovo_attrs(rng, 3, 3, "RBF", False)
    x = np.zeros((2, 5), np.float32)
    model = _node_model("SVMClassifier", x, attrs, 2)
    with pytest.raises(OnnxJitError, match="features"):
        _run(model, {"X": x})


@pytest.mark.parametrize("one_class", [0, 1])
@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
def test_svm_regressor_node(kernel, one_class):
    rng = np.random.default_rng(5)
    attrs = {
        "n_supports": 4,
        "support_vectors": rng.standard_normal(12).astype(np.float32).tolist(),
        "coefficients": rng.standard_normal(4).astype(np.float32).tolist(),
        "rho": [0.2],
        "kernel_type": kernel,
        "kernel_params": [0.4, 0.1, 2.0],
        "one_class": one_class,
    }
    x = rng.standard_normal((10, 3)).astype(np.float32)
    model = _node_model("SVMRegressor", x, attrs, 1)
    want = ort_outputs(model, {"X": x})
    _compare(model, {"X": x}, want)
    _compare(model, {"X": x}, reference_outputs(model, {"X": x}))


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
def test_svm_regressor_linear_form(post):
    # n_supports = 0: a plain linear model; post_transform is not applied (onnxruntime)
    rng = np.random.default_rng(6)
    attrs = {
        "coefficients": [0.5, -1.0, 2.0],
        "rho": [0.3],
        "post_transform": post,
        "kernel_params": [0.1, 0.0, 1.0],  # onnxruntime requires the attribute
    }
    x = rng.standard_normal((5, 3)).astype(np.float32)
    model = _node_model("SVMRegressor", x, attrs, 1)
    _compare(model, {"X": x}, ort_outputs(model, {"X": x}))


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_svm_regressor_input_types(dtype):
    # onnxruntime implements SVMRegressor for float only: the oracle is its float result on
    # the same (exactly representable) values
    rng = np.random.default_rng(8)
    attrs = {
        "n_supports": 3,
        "support_vectors": rng.standard_normal(6).astype(np.float32).tolist(),
        "coefficients": [1.0, -0.5, 0.25],
        "rho": [0.0],
        "kernel_type": "RBF",
        "kernel_params": [0.1, 0.0, 0.0],
    }
    x = rng.integers(-3, 4, (4, 2)).astype(dtype)
    want = ort_outputs(
        _node_model("SVMRegressor", x.astype(np.float32), attrs, 1),
        {"X": x.astype(np.float32)},
    )
    _compare(_node_model("SVMRegressor", x, attrs, 1), {"X": x}, want)
    x0 = np.zeros((0, 2), dtype)
    (y0,) = _run(_node_model("SVMRegressor", x0, attrs, 1), {"X": x0})
    assert y0.shape == (0, 1) and y0.dtype == np.float32


@pytest.mark.parametrize("op", ["SVMClassifier", "SVMRegressor"])
def test_svm_lowered_runs(op):
    # one session: the first run plans the node's bound call (attributes converted once),
    # later runs with new values reuse it; every run against onnxruntime
    rng = np.random.default_rng(13)
    if op == "SVMClassifier":
        attrs, n_out = _ovo_attrs(rng, 3, 3, "RBF", True), 2
    else:
        attrs = {
            "n_supports": 4,
            "support_vectors": rng.standard_normal(12).astype(np.float32).tolist(),
            "coefficients": rng.standard_normal(4).astype(np.float32).tolist(),
            "rho": [0.2],
            "kernel_type": "POLY",
            "kernel_params": [0.4, 0.1, 2.0],
        }
        n_out = 1
    runs = [rng.standard_normal((6, 3)).astype(np.float32) for _ in range(3)]
    model = _node_model(op, runs[0], attrs, n_out)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    for x in runs:
        want = ort_outputs(model, {"X": x})
        for i, (g, w) in enumerate(zip(sess.run(None, {"X": x}), want)):
            assert_close(g, w, 1e-4, 1e-5, f"output {i}")
    (plan,) = sess.stats()["plans"]
    (step,) = plan["steps"]
    kernel = "svm.classifier" if op == "SVMClassifier" else "svm.regressor"
    assert step["kernel"] == kernel and not step["generic"], step
