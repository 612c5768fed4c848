"""The registry stays honest: unique registrations, correct resolution, schema defaults."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.defs
import pytest
from onnx import AttributeProto, helper

import onnxjit  # noqa: F401  (registers every op)
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
    """Every attribute of the schema is accepted, with the schema's default.

    A body shared by several versions (stacked decorators) may accept attributes that a given
    version lacks; the checker rejects those before they reach the implementation.
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
    for name, default in impl.attrs.items():
        if name not in schema.attributes:
            continue
        want = _schema_default(schema.attributes[name])
        if isinstance(want, np.ndarray) or isinstance(default, np.ndarray):
            np.testing.assert_array_equal(default, want, err_msg=f"{impl.label}.{name}")
        elif isinstance(want, float):
            assert default is not None and np.isclose(default, want), (
                f"{impl.label}: default of {name!r} is {default!r}, schema says {want!r}"
            )
        else:
            assert default == want, (
                f"{impl.label}: default of {name!r} is {default!r}, schema says {want!r}"
            )
