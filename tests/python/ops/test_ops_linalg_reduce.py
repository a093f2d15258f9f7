"""matmul and the reductions: shapes (batched, broadcasting, symbolic), errors, partial results."""

from __future__ import annotations

import numpy as np
import pytest

from distir.errors import TypeInferenceError
from distir.ir import Call, DeviceMesh, DTensorType, Placement, Range, TensorType, Var, get_op, sym

N = sym.var("n")
K = sym.var("k")
W = sym.var("num_workers")
MESH = DeviceMesh((W,), Range(0, W))
MESH2 = DeviceMesh((2, W), Range(0, 2 * W))


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


# ---------------------------------------------------------------- matmul


@pytest.mark.parametrize(
    "a, b, out",
    [
        ((N, K), (K, 16), (N, 16)),
        ((2, 1, N, K), (3, K, 5), (2, 3, N, 5)),
        ((K,), (K, 5), (5,)),
        ((N, K), (K,), (N,)),
        ((K,), (K,), ()),
    ],
)
def test_matmul_shapes(a, b, out):
    assert call("matmul", T(*a), T(*b)).type == TensorType(out, "float32")


def test_matmul_errors():
    with pytest.raises(TypeInferenceError, match=r"R.matmul: contraction dims differ: lhs k .* rhs 8"):
        _ = call("matmul", T(N, K), T(8, 4)).type
    with pytest.raises(TypeInferenceError, match="R.matmul: dtypes differ"):
        _ = call("matmul", T(4, 4), T(4, 4, dtype="float16")).type
    with pytest.raises(TypeInferenceError, match="R.matmul: shapes .* do not broadcast"):
        _ = call("matmul", T(2, 4, 4), T(3, 4, 4)).type


def test_matmul_sharding():
    # Megatron: column-parallel then row-parallel
    assert call("matmul", D((N, 64), "R"), D((64, 256), "S[1]")).type.placement == P("S[1]")
    assert call("matmul", D((N, 256), "S[1]"), D((256, 64), "S[0]")).type.placement == P("P")
    # batch / rows pass
    assert call("matmul", D((N, 64), "S[0]"), D((64, 8), "R")).type.placement == P("S[0]")
    assert call("matmul", D((4, N, 64), "S[0]"), D((4, 64, 8), "S[0]")).type.placement == P("S[0]")
    # a broadcast batch dim passes too
    assert call("matmul", D((4, N, 64), "S[0]"), D((64, 8), "R")).type.placement == P("S[0]")
    # 2-D mesh: data parallel x tensor parallel
    t = call("matmul", D((N, 64), "S[0], R", mesh=MESH2), D((64, 256), "R, S[1]", mesh=MESH2)).type
    assert t.placement == P("S[0], S[1]")
    t = call("matmul", D((N, 256), "S[0], S[1]", mesh=MESH2), D((256, 64), "R, S[0]", mesh=MESH2)).type
    assert t.placement == P("S[0], P")
    # a partial lhs with a replicated rhs stays partial (linear)
    assert call("matmul", D((N, 64), "P"), D((64, 8), "R")).type.placement == P("P")
    with pytest.raises(TypeInferenceError, match="only one input may be partial"):
        _ = call("matmul", D((N, 64), "P"), D((64, 8), "P")).type
    with pytest.raises(TypeInferenceError, match="shard both alike"):
        _ = call("matmul", D((N, 64), "S[1]"), D((64, 8), "R")).type


def test_matmul_reference():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 1, 3, 4)).astype("float32")
    b = rng.standard_normal((5, 4, 6)).astype("float32")
    out = ref("matmul", a, b)
    assert out.shape == (2, 5, 3, 6) and out.dtype == np.float32
    for i in range(2):
        for j in range(5):
            np.testing.assert_allclose(out[i, j], a[i, 0] @ b[j], rtol=1e-5, atol=1e-5)
    assert ref("matmul", a, b, out_dtype="float64").dtype == np.float64


# ---------------------------------------------------------------- reductions


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod"])
def test_reduce_shapes(name):
    x = T(N, 8, 6)
    assert call(name, x, axis=[1]).type == TensorType((N, 6), "float32")
    assert call(name, x, axis=[-1, 0], keepdims=True).type == TensorType((1, 8, 1), "float32")
    assert call(name, x).type == TensorType((), "float32")
    assert call(name, x, axis=1).type == TensorType((N, 6), "float32")


def test_reduce_errors():
    with pytest.raises(TypeInferenceError, match="R.sum: axis 3 is out of range for a tensor of rank 3"):
        _ = call("sum", T(N, 8, 6), axis=[3]).type
    with pytest.raises(TypeInferenceError, match="R.mean: axis list .* repeats an axis"):
        _ = call("mean", T(N, 8, 6), axis=[1, -2]).type


@pytest.mark.parametrize("name, kind", [("sum", "P"), ("mean", "P"), ("max", "P[max]"), ("min", "P[min]")])
def test_reducing_a_sharded_dim_gives_a_partial(name, kind):
    assert call(name, D((N, 8), "S[1]"), axis=[1]).type.placement == P(kind)
    assert call(name, D((N, 8), "S[1]"), axis=[1], keepdims=True).type.placement == P(kind)
    # reducing another dim keeps the sharding (renumbered)
    assert call(name, D((4, N, 8), "S[2]"), axis=[1]).type.placement == P("S[1]")


def test_prod_over_a_sharded_dim_is_blocked():
    with pytest.raises(TypeInferenceError, match="needs whole"):
        _ = call("prod", D((N, 8), "S[1]"), axis=[1]).type


@pytest.mark.parametrize(
    "name, partial, ok",
    [("sum", "P", True), ("sum", "P[avg]", True), ("sum", "P[max]", False), ("mean", "P", True),
     ("max", "P[max]", True), ("max", "P", False), ("min", "P[min]", True), ("prod", "P", False)],
)
def test_reductions_of_partials(name, partial, ok):
    x = D((N, 8), partial)
    if ok:
        assert call(name, x, axis=[1]).type.placement == P(partial)
    else:
        with pytest.raises(TypeInferenceError, match="partial"):
            _ = call(name, x, axis=[1]).type


def test_mean_of_a_sharded_dim_is_the_sum_of_the_workers_shares():
    """A mean over a sharded dim is P[sum] of each block's sum over the whole count: right for
    uneven blocks too (8 over 3: 3, 3, 2), where averaging the blocks' means would not be."""
    x = np.random.default_rng(0).standard_normal((3, 8))
    shares = [ref("partial_mean", s, axis=[1], count=8) for s in np.array_split(x, 3, axis=1)]
    np.testing.assert_allclose(np.sum(shares, axis=0), ref("mean", x, axis=[1]))
    assert not np.allclose(np.mean([ref("mean", s, axis=[1]) for s in np.array_split(x, 3, axis=1)], axis=0),
                           ref("mean", x, axis=[1]))


def test_reduce_references():
    x = np.random.default_rng(0).standard_normal((3, 4, 5)).astype("float32")
    np.testing.assert_allclose(ref("sum", x, axis=[0, 2]), x.sum(axis=(0, 2)), rtol=1e-5)
    np.testing.assert_allclose(ref("mean", x, axis=[-1], keepdims=True), x.mean(-1, keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(ref("max", x, axis=1), x.max(1))
    np.testing.assert_array_equal(ref("min", x), np.asarray(x.min()))
    assert ref("sum", x).dtype == np.float32 and ref("sum", x).shape == ()
