"""The registry stays honest: unique registrations, correct resolution, schema defaults."""

from __future__ import annotations

import functools
import inspect

import numpy as np
import onnx
import onnx.defs
import pytest
from onnx import AttributeProto, helper

import onnxjit
from onnxjit import registry


def test_registering_a_triple_twice_is_an_error():
    @registry.onnx_op("OnnxJitTestOp", since=1, domain="test.registry")
    def first(x):
        return x

    with pytest.raises(ValueError, match=r"test\.registry\.OnnxJitTestOp-1 is registered twice"):

        @registry.onnx_op("OnnxJitTestOp", since=1, domain="test.registry")
        def second(x):
            return x


def test_resolution_takes_the_newest_implementation_at_or_below_the_schema():
    impls = registry.implementations()
    multi = [(k, v) for k, v in impls.items() if len(v) >= 2]
    assert multi, "no operator has two registered versions yet"
    (domain, op), versions = multi[0]
    low, high = versions[0], versions[1]
    assert registry.find_impl(domain, op, high.since) is high
    assert registry.find_impl(domain, op, high.since - 1) is low
    assert registry.find_impl(domain, op, low.since - 1) is None or low.since == 1


def _schema_default(attr: onnx.defs.OpSchema.Attribute):
    proto = attr.default_value
    if proto is None or proto.type == AttributeProto.UNDEFINED:
        return None
    value = helper.get_attribute_value(proto)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [v.decode() if isinstance(v, bytes) else v for v in value]
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    return value


def _all_impls():
    for versions in registry.implementations().values():
        yield from versions


@pytest.mark.parametrize("impl", list(_all_impls()), ids=lambda i: i.label)
def test_signature_matches_the_schema(impl):
    """Every attribute of the schema is accepted, and none repeats the schema's default.

    Defaults come from the schema version a node obeys, so an attribute that every version a
    body serves defaults is a required keyword of its signature. A body shared by several
    versions (stacked decorators) may accept attributes that a given version lacks; the
    checker rejects those before they reach the implementation.
    """
    if impl.domain.startswith("test."):
        pytest.skip("registered by a test above, not a real operator")
    schema = registry.find_schema(impl.op_type, impl.since, impl.domain)
    assert schema is not None, f"{impl.label}: onnx has no schema at this version"
    assert schema.since_version == impl.since, (
        f"{impl.label}: registered at {impl.since} but the schema in force there was introduced "
        f"at {schema.since_version}; register at a version onnx defines"
    )
    missing = sorted(set(schema.attributes) - set(impl.attrs))
    assert not missing, f"{impl.label}: schema attributes {missing} are not accepted"
    params = inspect.signature(impl.fn).parameters
    shared = [i for i in _all_impls() if i.fn is impl.fn]
    for name in impl.attrs:
        if all(_defaulted(i, name) for i in shared):
            assert params[name].default is params[name].empty, (
                f"{impl.label}: the signature repeats the schema's default of {name!r} "
                f"({params[name].default!r}); drop it, the schema supplies it"
            )


@functools.cache
def _history(domain: str, op_type: str) -> tuple[onnx.defs.OpSchema, ...]:
    return tuple(
        s
        for s in onnx.defs.get_all_schemas_with_history()
        if s.name == op_type and registry.normalize_domain(s.domain) == domain
    )


def _defaulted(impl, name: str) -> bool:
    """Whether every schema version that ``impl`` serves gives attribute ``name`` a default."""
    later = [i.since for i in _all_impls() if (i.domain, i.op_type) == (impl.domain, impl.op_type)]
    stop = min((v for v in later if v > impl.since), default=None)
    served = [
        s
        for s in _history(impl.domain, impl.op_type)
        if s.since_version >= impl.since and (stop is None or s.since_version < stop)
    ]
    return bool(served) and all(
        name in s.attributes and _schema_default(s.attributes[name]) is not None for s in served
    )


def test_an_omitted_attribute_takes_the_default_of_the_nodes_version():
    # Softmax's axis defaults to 1 before opset 13 and to -1 from 13: the same omitted
    # attribute, two behaviours (oracle: numpy).
    x = np.arange(-6, 6, dtype=np.float32).reshape(2, 2, 3)
    for opset, axis in ((11, 1), (13, -1)):
        node = helper.make_node("Softmax", ["x"], ["y"])
        graph = helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 2, 3])],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 2, 3])],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        got = onnxjit.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
        if opset < 13:  # the input coerced to 2-D at axis 1
            flat = x.reshape(2, 6)
            want = (np.exp(flat) / np.exp(flat).sum(1, keepdims=True)).reshape(x.shape)
        else:
            want = np.exp(x) / np.exp(x).sum(axis, keepdims=True)
        np.testing.assert_allclose(got, want, rtol=1e-6)
