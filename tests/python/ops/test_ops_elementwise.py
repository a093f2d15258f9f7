"""Elementwise ops: broadcasting type inference, errors, sharding rules, numpy references."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distir.errors import TypeInferenceError
from distir.ir import Call, DeviceMesh, DTensorType, Placement, Range, TensorType, Var, get_op, sym

N = sym.var("n")
W = sym.var("num_workers")
MESH = DeviceMesh((W,), Range(0, W))
MESH2 = DeviceMesh((2, 2), Range(0, 4))


def T(*shape, dtype="float32"):
    return Var("t", TensorType(tuple(shape), dtype))


def D(shape, placement, dtype="float32", mesh=MESH):
    return Var("d", DTensorType(tuple(shape), dtype, mesh, Placement.parse(placement)))


def call(name, *args, **attrs):
    return Call(get_op(name), args, attrs)


def ref(name, *xs, **attrs):
    op = get_op(name)
    return op.numpy(list(xs), op.full_attrs(attrs), None)


BINARY = ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum"]
COMPARE = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]
UNARY = ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "sin", "cos", "square", "negative", "abs"]
NN_UNARY = ["nn.gelu", "nn.gelu_tanh", "nn.silu", "nn.relu"]


# ---------------------------------------------------------------- type inference


@pytest.mark.parametrize("name", BINARY)
def test_binary_broadcasts(name):
    assert call(name, T(4, 1, 8), T(3, 1)).type == TensorType((4, 3, 8), "float32")
    assert call(name, T(N, 8), T(8)).type == TensorType((N, 8), "float32")
    assert call(name, T(N, 1), T(1, N)).type == TensorType((N, N), "float32")
    assert call(name, T(), T(2, 3)).type == TensorType((2, 3), "float32")


@pytest.mark.parametrize("name", COMPARE)
def test_comparisons_give_bool(name):
    assert call(name, T(N, 8), T(1, 8)).type == TensorType((N, 8), "bool")


def test_where_broadcasts_three_ways():
    t = call("where", T(N, 1, dtype="bool"), T(1, 8), T(N, 8)).type
    assert t == TensorType((N, 8), "float32")


@pytest.mark.parametrize("name", UNARY + NN_UNARY)
def test_unary_keeps_type(name):
    assert call(name, T(N, 7)).type == TensorType((N, 7), "float32")


@pytest.mark.parametrize("name, why", [
    ("subtract", "numpy refuses it"),
    ("divide", "numpy's division of bools gives floats"),
    ("power", "numpy's power of bools gives int8"),
])
def test_bool_arithmetic_numpy_has_no_bool_result_for_is_refused_at_the_type_check(name, why):
    with pytest.raises(TypeInferenceError, match=rf"R.{name}: does not apply to bool tensors \({why}.*use R.astype first"):
        _ = call(name, T(4, dtype="bool"), T(4, dtype="bool")).type
    with pytest.raises(TypeError, match="boolean|ufunc"):  # the oracle: numpy refuses, or leaves bool
        out = getattr(np, name)(np.array([True, False]), np.array([True, True]))
        if out.dtype != np.bool_:
            raise TypeError(f"ufunc gives {out.dtype}")
    assert call(name, T(4, dtype="uint8"), T(4, dtype="uint8")).type == TensorType((4,), "uint8")


@pytest.mark.parametrize("name", ["add", "multiply", "maximum", "minimum", "equal", "not_equal", "less",
                                  "less_equal", "greater", "greater_equal"])
def test_bool_logic_and_comparisons_type_check_to_bool(name):
    assert call(name, T(4, dtype="bool"), T(1, dtype="bool")).type == TensorType((4,), "bool")


def test_binary_errors_name_the_op_and_the_problem():
    with pytest.raises(TypeInferenceError, match=r"R.add: shapes \(4, 8\), \(4, 7\) do not broadcast"):
        _ = call("add", T(4, 8), T(4, 7)).type
    with pytest.raises(TypeInferenceError, match="R.multiply: dtypes differ"):
        _ = call("multiply", T(4), T(4, dtype="float16")).type
    with pytest.raises(TypeInferenceError, match=r"R.add: shapes .* do not broadcast \(dim 0 is n in one and m"):
        _ = call("add", T(N), T(sym.var("m"))).type
    with pytest.raises(TypeInferenceError, match="R.where: the condition must be bool"):
        _ = call("where", T(4), T(4), T(4)).type
    with pytest.raises(TypeInferenceError, match="R.exp: needs a floating-point tensor, got int32"):
        _ = call("exp", T(4, dtype="int32")).type
    with pytest.raises(TypeInferenceError, match="R.nn.gelu: needs a floating-point"):
        _ = call("nn.gelu", T(4, dtype="int64")).type
    # integer-safe unary ops accept ints
    assert call("negative", T(4, dtype="int32")).type == TensorType((4,), "int32")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=0, max_size=4), st.data())
def test_broadcast_matches_numpy(shape, data):
    """Random broadcast-compatible pairs: the inferred shape is numpy's, and so is the reference."""
    other = [data.draw(st.sampled_from([1, d])) for d in shape[len(shape) - data.draw(st.integers(0, len(shape))) :]]
    a = np.random.default_rng(0).standard_normal(shape).astype("float32")
    b = np.random.default_rng(1).standard_normal(other).astype("float32")
    t = call("add", T(*shape), T(*other)).type
    assert t.shape == np.broadcast_shapes(a.shape, b.shape)
    np.testing.assert_array_equal(ref("add", a, b), a + b)


# ---------------------------------------------------------------- sharding


def test_sharded_dims_pass_and_broadcast_dims_need_replication():
    assert call("add", D((N, 8), "S[0]"), D((8,), "R")).type.placement == Placement.parse("S[0]")
    assert call("add", D((N, 8), "S[1]"), D((8,), "S[0]")).type.placement == Placement.parse("S[1]")
    with pytest.raises(TypeInferenceError, match="broadcast .size 1. and cannot be sharded"):
        _ = call("add", D((N, 8), "R"), D((1, 8), "S[0]")).type
    with pytest.raises(TypeInferenceError, match="shard both alike"):
        _ = call("add", D((N, 8), "S[1]"), D((N, 8), "R")).type
    with pytest.raises(TypeInferenceError, match="do not correspond"):
        _ = call("multiply", D((8, 8), "S[0]"), D((8, 8), "S[1]")).type


def test_two_dim_mesh_sharding_passes_per_axis():
    t = call("nn.gelu", D((8, 8), "S[0], S[1]", mesh=MESH2)).type
    assert t.placement == Placement.parse("S[0], S[1]")


@pytest.mark.parametrize(
    "name, a, b, out",
    [
        ("add", "P", "P", "P"),
        ("add", "P[avg]", "P[avg]", "P[avg]"),
        ("subtract", "P", "P", "P"),
        ("multiply", "P", "R", "P"),
        ("multiply", "R", "P", "P"),
        ("divide", "P", "R", "P"),
        ("maximum", "P[max]", "P[max]", "P[max]"),
        ("minimum", "P[min]", "P[min]", "P[min]"),
    ],
)
def test_partials_that_pass(name, a, b, out):
    assert call(name, D((4,), a), D((4,), b)).type.placement == Placement.parse(out)


@pytest.mark.parametrize(
    "name, a, b",
    [
        ("add", "P", "R"),  # sum_i (p_i + r) = sum p + W r
        ("subtract", "R", "P[max]"),  # r - max p is a min
        ("multiply", "P", "P"),
        ("divide", "R", "P"),
        ("power", "P", "R"),
        ("maximum", "P", "P"),
        ("less", "P", "R"),
        ("add", "P", "P[max]"),
        # an empty block's identity (-inf, the smallest int) must stay the identity: -inf + inf
        # is nan and integers wrap around, so max/min partials are reduced before an add
        ("add", "P[max]", "R"),
        ("add", "R", "P[min]"),
        ("subtract", "P[max]", "R"),
    ],
)
def test_partials_that_do_not_pass(name, a, b):
    with pytest.raises(TypeInferenceError, match="partial|all-reduce"):
        _ = call(name, D((4,), a), D((4,), b)).type


@pytest.mark.parametrize(
    "name, partial, ok",
    [
        ("exp", "P[max]", True),
        ("exp", "P", False),
        ("nn.relu", "P[max]", True),
        ("nn.relu", "P", False),
        ("negative", "P", True),
        ("negative", "P[max]", False),
        ("nn.gelu", "P[max]", False),
        ("nn.silu", "P", False),
        ("rsqrt", "P[min]", False),
        ("sqrt", "P[min]", True),
    ],
)
def test_unary_partials(name, partial, ok):
    x = D((4,), partial)
    if ok:
        assert call(name, x).type.placement == Placement.parse(partial)
    else:
        with pytest.raises(TypeInferenceError, match="cannot take a partial"):
            _ = call(name, x).type


# ---------------------------------------------------------------- numpy references


def test_activation_references():
    x = np.linspace(-6, 6, 101).astype("float32")
    x64 = x.astype("float64")
    erf = np.array([math.erf(v) for v in x64])
    np.testing.assert_allclose(ref("nn.gelu", x), 0.5 * x64 * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x64])),
                               rtol=1e-6, atol=1e-7)
    tanh_form = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64**3)))
    np.testing.assert_allclose(ref("nn.gelu_tanh", x), tanh_form, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ref("nn.silu", x), x64 / (1 + np.exp(-x64)), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ref("sigmoid", x), 1 / (1 + np.exp(-x64)), rtol=1e-6)
    np.testing.assert_allclose(ref("erf", x), erf, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(ref("nn.relu", x), np.maximum(x, 0))
    pos = np.abs(x) + 0.5
    np.testing.assert_allclose(ref("rsqrt", pos), 1 / np.sqrt(pos.astype("float64")), rtol=1e-6)
    with np.errstate(all="ignore"):  # log/sqrt of negatives are nan, as in numpy
        for name in UNARY + NN_UNARY:
            assert ref(name, x).dtype == np.float32, name


def test_half_precision_is_computed_wide_and_cast_back():
    x = np.linspace(-3, 3, 17).astype("float16")
    out = ref("nn.gelu", x)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype("float64"), ref("nn.gelu", x.astype("float64")), rtol=1e-3, atol=1e-3)


def test_binary_references_keep_dtype_and_broadcast():
    a = np.arange(6, dtype="float32").reshape(2, 3) + 1
    b = np.array([2.0], dtype="float32")
    np.testing.assert_array_equal(ref("power", a, b), a**2)
    np.testing.assert_array_equal(ref("divide", a, b), a / 2)
    np.testing.assert_array_equal(ref("maximum", a, b), np.maximum(a, 2))
    assert ref("divide", a, b).dtype == np.float32
    assert ref("less", a, b).dtype == np.bool_
    out = ref("add", np.array(1.0, dtype="float32"), np.array(2.0, dtype="float32"))
    assert isinstance(out, np.ndarray) and out.shape == ()
    np.testing.assert_array_equal(ref("where", a > 3, a, -a), np.where(a > 3, a, -a))
