"""reshape, permute_dims, astype, expand_dims, squeeze, concat, split."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distir.errors import TypeInferenceError
from distir.ir import (
    Call,
    DeviceMesh,
    DTensorType,
    Placement,
    Range,
    ShapeExpr,
    TensorType,
    Tuple,
    TupleType,
    Var,
    get_op,
    sym,
)
from distir.ir.exchange import reshape_groups

N = sym.var("n")
W = sym.var("num_workers")
MESH = DeviceMesh((W,), Range(0, W))
MESH4 = DeviceMesh((4,), Range(0, 4))


def T(*shape, dtype="float32"):
    return Var("t", TensorType(tuple(shape), dtype))


def D(shape, placement, dtype="float32", mesh=MESH):
    return Var("d", DTensorType(tuple(shape), dtype, mesh, Placement.parse(placement)))


def call(name, *args, **attrs):
    return Call(get_op(name), args, attrs)


def ref(name, *xs, **attrs):
    op = get_op(name)
    return op.numpy(list(xs), op.full_attrs(attrs), None)


def P(text):
    return Placement.parse(text)


def reshape(x, *shape):
    return call("reshape", x, ShapeExpr(tuple(shape)))


# ---------------------------------------------------------------- reshape


def test_reshape_types():
    assert reshape(T(N, 4, 8), N, 32).type == TensorType((N, 32), "float32")
    assert reshape(T(N, 32), -1, 4, 8).type == TensorType((N, 4, 8), "float32")
    assert reshape(T(2 * N, 6), N, 12).type == TensorType((N, 12), "float32")
    with pytest.raises(TypeInferenceError, match=r"R.reshape: cannot reshape \(n, 32\) .* to \(n, 30\)"):
        _ = reshape(T(N, 32), N, 30).type
    with pytest.raises(TypeInferenceError, match="at most one dim of the new shape may be -1"):
        _ = reshape(T(N, 32), -1, -1).type


def test_reshape_sharding_seed_example():
    """bf16[8,8] -> bf16[64]: a shard of the major dim stays a (contiguous) shard."""
    assert reshape(D((8, 8), "S[0]", "bfloat16", MESH4), 64).type.placement == P("S[0]")
    assert reshape(D((64,), "S[0]", "bfloat16", MESH4), 8, 8).type.placement == P("S[0]")
    assert reshape(D((8, 8), "R", "bfloat16", MESH4), 64).type.placement == P("R")
    # a shard of the minor dim lands in every one of the 8 rows: a strided shard (docs/strided.md)
    assert reshape(D((8, 8), "S[1]", "bfloat16", MESH4), 64).type.placement == P("S[0/8]")
    assert reshape(D((64,), "S[0/8]", "bfloat16", MESH4), 8, 8).type.placement == P("S[1]")


def test_reshape_sharding_heads():
    # (b, s, h*d) sharded on the hidden dim -> (b, s, h, d) sharded on heads (Megatron attention)
    x = D((2, N, 512), "S[2]")
    assert reshape(x, 2, N, 8, 64).type.placement == P("S[2]")
    assert reshape(D((2, N, 8, 64), "S[2]"), 2, N, 512).type.placement == P("S[2]")
    assert reshape(D((2, N, 512), "S[1]"), 2, N, 8, 64).type.placement == P("S[1]")
    assert reshape(D((2, N, 512), "P"), 2, N, 8, 64).type.placement == P("P")


def test_reshape_many_to_many_is_blocked():
    with pytest.raises(TypeInferenceError, match="needs whole"):
        _ = reshape(D((6, 4), "S[0]"), 4, 6).type


@st.composite
def factored(draw):
    """A list of groups of small factors; each group is one dim on one side and several on the other."""
    groups = draw(st.lists(st.lists(st.integers(2, 4), min_size=1, max_size=3), min_size=1, max_size=4))
    return groups


@settings(max_examples=80, deadline=None)
@given(factored(), st.booleans())
def test_reshape_groups_split_and_merge(groups, merge):
    src = tuple(math.prod(g) for g in groups)
    dst = tuple(f for g in groups for f in g)
    if merge:
        src, dst = dst, src
    for a, b in reshape_groups(src, dst):
        assert math.prod(src[i] for i in a) == math.prod(dst[i] for i in b)
    out = reshape(T(*src), *dst).type
    assert out.shape == dst
    # sharding the first dim always survives as the first output dim (it is the major factor)
    assert reshape(D(src, "S[0]"), *dst).type.placement == P("S[0]")
    x = np.arange(math.prod(src), dtype="float32").reshape(src)
    np.testing.assert_array_equal(ref("reshape", x, dst), x.reshape(dst))


# ---------------------------------------------------------------- permute_dims / astype


def test_permute_dims():
    assert call("permute_dims", T(N, 4, 8), axes=[2, 0, 1]).type == TensorType((8, N, 4), "float32")
    assert call("permute_dims", T(N, 4)).type == TensorType((4, N), "float32")
    assert call("permute_dims", D((N, 4, 8), "S[0]"), axes=[2, 0, 1]).type.placement == P("S[1]")
    assert call("permute_dims", D((N, 4, 8), "P[max]"), axes=[2, 0, 1]).type.placement == P("P[max]")
    with pytest.raises(TypeInferenceError, match="not a permutation"):
        _ = call("permute_dims", T(N, 4), axes=[0, 0]).type
    x = np.arange(24).reshape(2, 3, 4)
    np.testing.assert_array_equal(ref("permute_dims", x, axes=[2, 0, 1]), x.transpose(2, 0, 1))
    np.testing.assert_array_equal(ref("permute_dims", x), x.T)


@pytest.mark.parametrize(
    "src, dst, partial, ok",
    [
        ("float32", "float16", "P", True),
        ("int32", "int64", "P", False),  # an int32 sum wraps around at 32 bits, one in int64 does not
        ("int64", "int8", "P", True),  # a narrowing cast keeps sums modulo 2^8
        ("int32", "float32", "P", False),  # nor does a float sum wrap
        ("float32", "int32", "P", False),  # truncation is not linear
        ("float32", "int32", "P[max]", False),  # monotone, but -inf (an empty block's max) has no int
        ("int32", "int64", "P[max]", True),  # a widening cast keeps the identity the smallest
        ("int64", "int32", "P[min]", False),  # a narrowing one wraps it around
        ("int32", "float32", "P[min]", True),
        ("float32", "bool", "P[max]", False),
    ],
)
def test_astype_partials(src, dst, partial, ok):
    x = D((4,), partial, dtype=src)
    if ok:
        t = call("astype", x, dtype=dst).type
        assert t.placement == P(partial) and t.dtype == dst
    else:
        with pytest.raises(TypeInferenceError, match="partial"):
            _ = call("astype", x, dtype=dst).type


# ---------------------------------------------------------------- expand_dims / squeeze


def test_expand_dims():
    assert call("expand_dims", T(N, 4), axis=0).type == TensorType((1, N, 4), "float32")
    assert call("expand_dims", T(N, 4), axis=[1, -1]).type == TensorType((N, 1, 4, 1), "float32")
    assert call("expand_dims", D((N, 4), "S[1]"), axis=[0, 2]).type.placement == P("S[3]")
    with pytest.raises(TypeInferenceError, match="R.expand_dims: axis 3 is out of range for a tensor of rank 3"):
        _ = call("expand_dims", T(N, 4), axis=3).type
    x = np.zeros((2, 3))
    assert ref("expand_dims", x, axis=[1, -1]).shape == (2, 1, 3, 1)


def test_squeeze():
    assert call("squeeze", T(1, 3, 1, 4)).type == TensorType((3, 4), "float32")
    assert call("squeeze", T(1, N, 1, 4), axis=[0]).type == TensorType((N, 1, 4), "float32")
    assert call("squeeze", D((1, 8, 1, 4), "S[3]")).type.placement == P("S[1]")
    with pytest.raises(TypeInferenceError, match=r"R.squeeze: the shape \(1, n\) has symbolic dims"):
        _ = call("squeeze", T(1, N)).type
    assert call("squeeze", D((1, N, 4), "P"), axis=0).type.placement == P("P")
    with pytest.raises(TypeInferenceError, match=r"R.squeeze: axis 1 has size n, not 1"):
        _ = call("squeeze", T(1, N), axis=[1]).type
    x = np.zeros((1, 3, 1, 2))
    assert ref("squeeze", x).shape == (3, 2)
    assert ref("squeeze", x, axis=[2]).shape == (1, 3, 2)


# ---------------------------------------------------------------- concat


def test_concat_types():
    t = call("concat", Tuple((T(N, 4), T(3, 4), T(N, 4))), axis=0).type
    assert t == TensorType((2 * N + 3, 4), "float32")
    assert call("concat", Tuple((T(N, 4), T(N, 5))), axis=-1).type == TensorType((N, 9), "float32")


def test_concat_errors():
    with pytest.raises(TypeInferenceError, match=r"R.concat: tensor 1 has shape \(n, 5\) and tensor 0 \(n, 4\)"):
        _ = call("concat", Tuple((T(N, 4), T(N, 5))), axis=0).type
    with pytest.raises(TypeInferenceError, match="R.concat: tensor 1 has rank 1"):
        _ = call("concat", Tuple((T(N, 4), T(4))), axis=0).type
    with pytest.raises(TypeInferenceError, match="R.concat: tensor 1 has dtype float16"):
        _ = call("concat", Tuple((T(N, 4), T(N, 4, dtype="float16"))), axis=0).type
    with pytest.raises(TypeInferenceError, match="first argument must be a tuple"):
        _ = call("concat", T(N, 4), axis=0).type


def test_concat_sharding():
    parts = Tuple((D((N, 4), "S[0]"), D((N, 6), "S[0]")))
    assert call("concat", parts, axis=1).type.placement == P("S[0]")
    with pytest.raises(TypeInferenceError, match="needs whole"):
        _ = call("concat", Tuple((D((N, 4), "S[1]"), D((N, 6), "S[1]"))), axis=1).type
    with pytest.raises(TypeInferenceError, match="shard both alike"):
        _ = call("concat", Tuple((D((N, 4), "S[0]"), D((N, 6), "R"))), axis=1).type
    assert call("concat", Tuple((D((N, 4), "P"), D((N, 6), "P"))), axis=1).type.placement == P("P")
    with pytest.raises(TypeInferenceError, match="all inputs must be partial alike"):
        _ = call("concat", Tuple((D((N, 4), "P"), D((N, 6), "R"))), axis=1).type


def test_concat_reference():
    a, b = np.ones((2, 3)), np.zeros((2, 1))
    np.testing.assert_array_equal(ref("concat", (a, b), axis=1), np.concatenate([a, b], axis=1))


# ---------------------------------------------------------------- split


def test_split_types():
    t = call("split", T(N, 12), indices_or_sections=3, axis=1).type
    assert t == TupleType((TensorType((N, 4), "float32"),) * 3)
    # TVM's rule for uneven sections: ceil(dim / n) each, the last smaller
    t = call("split", T(7, N), indices_or_sections=3).type
    assert [f.shape[0] for f in t.fields] == [3, 3, 1]
    t = call("split", T(3 * N), indices_or_sections=3).type
    assert all(sym.equal(f.shape[0], N) for f in t.fields)
    t = call("split", T(8, 2), indices_or_sections=[2, 5]).type
    assert [f.shape[0] for f in t.fields] == [2, 3, 3]
    m = sym.var("m")
    t = call("split", T(N, 2), indices_or_sections=[m]).type
    assert sym.equal(t.fields[0].shape[0], m) and sym.equal(t.fields[1].shape[0], N - m)


def test_split_errors_and_sharding():
    with pytest.raises(TypeInferenceError, match="number of sections must be at least 1"):
        _ = call("split", T(8), indices_or_sections=0).type
    with pytest.raises(TypeInferenceError, match="R.split: axis 2 is out of range"):
        _ = call("split", T(8, 4), indices_or_sections=2, axis=2).type
    t = call("split", D((N, 3 * 64), "S[0]"), indices_or_sections=3, axis=1).type
    assert [f.placement for f in t.fields] == [P("S[0]")] * 3
    t = call("split", D((N, 12), "P"), indices_or_sections=2, axis=1).type
    assert [f.placement for f in t.fields] == [P("P")] * 2
    with pytest.raises(TypeInferenceError, match="needs whole"):
        _ = call("split", D((N, 12), "S[1]"), indices_or_sections=2, axis=1).type


def test_split_reference():
    x = np.arange(14).reshape(7, 2)
    parts = ref("split", x, indices_or_sections=3)
    assert [p.shape[0] for p in parts] == [3, 3, 1]
    np.testing.assert_array_equal(np.concatenate(parts), x)
    parts = ref("split", x, indices_or_sections=[2, 5])
    assert [p.shape[0] for p in parts] == [2, 3, 2]


def test_every_compute_op_is_documented_with_a_numpy_reference():
    import pathlib
    import re

    from distir.ir import all_ops

    doc = (pathlib.Path(__file__).parents[3] / "docs" / "ops.md").read_text()
    named = set(re.findall(r"`([a-z0-9_.]+)`", doc))
    for name, op in all_ops().items():
        if name.startswith(("dist.", "ccl.")):
            continue
        assert name in named, f"R.{name} is missing from docs/ops.md"
        assert op.numpy is not None, f"R.{name} has no numpy reference"
        assert op.sharding is not None, f"R.{name} has no sharding rule"
