"""strided_slice, take, full/zeros/ones, tril/triu: types, sharding, localize, references."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distir.errors import DistirError, TypeInferenceError
from distir.ir import (
    Call,
    Constant,
    DeviceMesh,
    DTensorType,
    Placement,
    Range,
    ShapeExpr,
    TensorType,
    Var,
    get_op,
    sym,
)
from distir.runtime import RunContext
from op_terms import MESH, N, W, D, T, call, ref  # noqa: F401



def P(text):
    return Placement.parse(text)


def sl(x, axes, begin, end, strides=None, **kw):
    return call("strided_slice", x, axes=axes, begin=begin, end=end, strides=strides, **kw)


# ---------------------------------------------------------------- strided_slice


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 9),
    st.integers(-12, 12),
    st.integers(-12, 12),
    st.sampled_from([1, 2, 3, -1, -2]),
)
def test_static_slices_match_numpy(dim, b, e, s):
    x = np.arange(dim * 2, dtype="float32").reshape(dim, 2)
    want = x[b:e:s]
    assert sl(T(dim, 2), [0], [b], [e], [s]).type.shape == want.shape
    np.testing.assert_array_equal(ref("strided_slice", x, axes=[0], begin=[b], end=[e], strides=[s]), want)


def test_symbolic_slices():
    x = T(N, 8, 6)
    assert sl(x, [0], [1], [N]).type == TensorType((N - 1, 8, 6), "float32")
    assert sl(x, [0], [0], [N]).type == x.type
    assert sl(x, [0], [0], [2**63 - 1]).type == x.type
    assert sl(x, [0], [-2], [2**31 - 1]).type.shape[0] == 2
    assert sl(x, [0, 2], [0, 0], [N, 6], [1, 2]).type == TensorType((N, 8, 3), "float32")
    assert sym.equal(sl(x, [0], [0], [N], [2]).type.shape[0], sym.floordiv(N + 1, 2))
    m = sym.var("m")
    assert sym.equal(sl(x, [0], [m], [m + 4]).type.shape[0], 4)
    # a worker's block of a symbolic dim, as the lowering writes it
    w = sym.var("worker_id")
    piece = sym.floordiv(N, W)
    assert sym.equal(sl(x, [0], [w * piece], [w * piece + piece]).type.shape[0], piece)


def test_symbolic_strided_lengths_evaluate_like_python():
    # (begin, end, stride, the same slice in Python on range(n)): lengths are exact ceilings
    cases = [
        (1, N, 3, lambda n: range(n)[1:n:3]),
        (0, N, 2, lambda n: range(n)[0:n:2]),
        (N - 1, -(2**31 - 1), -2, lambda n: range(n)[n - 1 :: -2]),
        (-1, 0, -3, lambda n: range(n)[-1:0:-3]),
        (2, N - 1, 5, lambda n: range(n)[2 : n - 1 : 5]),
    ]
    for b, e, s, ref_range in cases:
        length = sl(T(N, 2), [0], [b], [e], [s]).type.shape[0]
        for n in range(3, 23):
            assert sym.evaluate(length, {"n": n}) == len(ref_range(n)), (b, e, s, n)


def test_slice_errors():
    with pytest.raises(TypeInferenceError, match="one entry per sliced axis"):
        _ = sl(T(4, 4), [0, 1], [0], [2]).type
    with pytest.raises(TypeInferenceError, match="R.strided_slice: axis 2 is out of range"):
        _ = sl(T(4, 4), [2], [0], [2]).type
    with pytest.raises(TypeInferenceError, match="stride on axis 0 is 0"):
        _ = sl(T(4, 4), [0], [0], [2], [0]).type
    with pytest.raises(TypeInferenceError, match="axis 1 is sliced twice"):
        _ = sl(T(4, 4), [1, -1], [0, 0], [2, 2]).type


def test_slice_sharding():
    # slicing another axis: the sharding passes
    assert sl(D((N, 64), "S[0]"), [1], [0], [32]).type.placement == P("S[0]")
    # a slice covering the sharded axis is an identity there
    assert sl(D((N, 64), "S[0]"), [0], [0], [N]).type.placement == P("S[0]")
    assert sl(D((N, 64), "S[1]"), [1], [0], [2**63 - 1]).type.placement == P("S[1]")
    # a proper slice of the sharded axis needs it whole
    with pytest.raises(TypeInferenceError, match="needs whole"):
        _ = sl(D((N, 64), "S[1]"), [1], [0], [32]).type
    with pytest.raises(TypeInferenceError, match="needs whole"):
        _ = sl(D((N, 64), "S[1]"), [1], [0], [64], [2]).type
    # partials pass: slicing only picks elements
    assert sl(D((N, 64), "P[max]"), [1], [0], [32]).type.placement == P("P[max]")


def test_slice_localize_rewrites_a_covering_end():
    op = get_op("strided_slice")
    local_x = T(sym.floordiv(N, W), 64)
    attrs = op.full_attrs({"axes": [0, 1], "begin": [0, 0], "end": [N, 32]})
    local_out = TensorType((sym.floordiv(N, W), 32), "float32")
    local = op.localize(Call(op, (D((N, 64), "S[0]"),), attrs), (local_x,), local_out)
    assert sym.equal(local.attrs["end"][0], sym.floordiv(N, W)) and local.attrs["end"][1] == 32
    assert local.op is op and local.type == local_out
    # nothing to do when nothing is sharded
    attrs = op.full_attrs({"axes": [1], "begin": [0], "end": [32]})
    same = op.localize(Call(op, (D((N, 64), "S[1]"),), attrs), (T(N, 64),), TensorType((N, 32), "float32"))
    assert dict(same.attrs) == attrs


def test_slice_reference_with_symbolic_bounds():
    x = np.arange(20).reshape(10, 2)
    ctx = RunContext({"n": 7})
    out = ref("strided_slice", x, axes=[0], begin=[1], end=[N], ctx=ctx)
    np.testing.assert_array_equal(out, x[1:7])


# ---------------------------------------------------------------- take


def test_take_types():
    assert call("take", T(1000, 64), T(2, N, dtype="int32"), axis=0).type == TensorType((2, N, 64), "float32")
    assert call("take", T(4, 1000, 64), T(N, dtype="int64"), axis=1).type == TensorType((4, N, 64), "float32")
    assert call("take", T(1000), T(N, dtype="int32")).type == TensorType((N,), "float32")
    assert get_op("take").param("mode").default == "fast"


def test_take_errors():
    with pytest.raises(TypeInferenceError, match="R.take: indices must be integers, got float32"):
        _ = call("take", T(10, 4), T(3), axis=0).type
    with pytest.raises(TypeInferenceError, match="without an axis the source must be 1-D"):
        _ = call("take", T(10, 4), T(3, dtype="int32")).type
    with pytest.raises(TypeInferenceError, match="R.take: axis 2 is out of range"):
        _ = call("take", T(10, 4), T(3, dtype="int32"), axis=2).type


def test_take_sharding_embedding_lookup():
    ids_r = D((2, N), "R", "int32")
    # hidden-sharded table: each worker looks up its slice of every embedding
    assert call("take", D((1000, 64), "S[1]"), ids_r, axis=0).type.placement == P("S[2]")
    # batch-sharded ids with a replicated table: data parallel
    assert call("take", D((1000, 64), "R"), D((2, N), "S[0]", "int32"), axis=0).type.placement == P("S[0]")
    assert call("take", D((1000, 64), "R"), D((2, N), "S[1]", "int32"), axis=0).type.placement == P("S[1]")
    # a vocab-sharded table: each worker looks up its own rows, zeros elsewhere, so a partial sum
    assert call("take", D((1000, 64), "S[0]"), ids_r, axis=0).type.placement == P("P")
    # other modes need the whole axis (to wrap, clip or flag an index)
    with pytest.raises(TypeInferenceError, match="needs whole"):
        _ = call("take", D((1000, 64), "S[0]"), ids_r, axis=0, mode="clip").type
    # ids sharded on the same mesh axis as the vocabulary do not match up
    with pytest.raises(TypeInferenceError, match="do not correspond"):
        _ = call("take", D((1000, 64), "S[0]"), D((2, N), "S[1]", "int32"), axis=0).type
    # a partial table passes (take is linear in it); partial indices do not
    assert call("take", D((1000, 64), "P"), ids_r, axis=0).type.placement == P("P")
    with pytest.raises(TypeInferenceError, match="input 1 cannot be partial"):
        _ = call("take", D((1000, 64), "R"), D((2, N), "P", "int32"), axis=0).type


def test_take_reference():
    table = np.arange(12, dtype="float32").reshape(6, 2)
    ids = np.array([[0, 5], [2, 2]], dtype="int32")
    np.testing.assert_array_equal(ref("take", table, ids, axis=0), table[ids])
    np.testing.assert_array_equal(ref("take", table, np.array([1, 0]), axis=1), table[:, [1, 0]])
    np.testing.assert_array_equal(ref("take", table, np.array([7]), axis=0, mode="clip"), table[[5]])
    np.testing.assert_array_equal(ref("take", table, np.array([7]), axis=0, mode="wrap"), table[[1]])
    out = ref("take", table, np.array([1, 9]), axis=0, mode="nan")
    np.testing.assert_array_equal(out[0], table[1])
    assert np.isnan(out[1]).all()
    out = ref("take", table, np.array([1, 9]), axis=1, mode="nan")
    assert np.isnan(out[:, 1]).all() and (out[:, 0] == table[:, 1]).all()
    # mode "fast" promises in-range indices (TVM does not check); the reference does
    for bad in (-1, 6):
        with pytest.raises(DistirError, match=rf"R.take: index {bad} is out of range \[0, 6\)"):
            ref("take", table, np.array([0, bad]), axis=0)


def test_take_localize_of_a_vocab_sharded_table_offsets_by_the_worker_rows():
    op = get_op("take")
    ids = D((2, N), "R", "int32")
    glob = Call(op, (D((1000, 64), "S[0]"), ids), {"axis": 0})
    rows = sym.ceildiv(1000, W)  # blocks of ceil(1000 / W) rows (the last may be short)
    local_out = TensorType((2, N, 64), "float32")
    local = op.localize(glob, (T(rows, 64), T(2, N, dtype="int32")), local_out)
    assert local.op is get_op("shard_take") and local.attrs["axis"] == 0
    # the worker's first row, clamped to the 1000 rows (a worker past them holds none)
    assert sym.equal(local.attrs["offset"], sym.min_(sym.mul(sym.var("worker_id"), rows), 1000))
    for count, worker, first in ((3, 2, 668), (300, 3, 12), (300, 249, 996), (300, 250, 1000), (300, 299, 1000)):
        assert sym.evaluate(local.attrs["offset"], {"num_workers": count, "worker_id": worker}) == first
    assert local.type == local_out
    # a hidden-sharded table stays a plain take
    glob = Call(op, (D((1000, 64), "S[1]"), ids), {"axis": 0})
    local = op.localize(glob, (T(1000, sym.floordiv(64, W)), T(2, N, dtype="int32")), local_out)
    assert local.op is op


def test_shard_take_reference_looks_up_its_own_rows_and_zeros_the_rest():
    table = np.arange(24, dtype="float32").reshape(8, 3) + 1
    ids = np.array([[0, 7, 3], [4, 5, 2]], dtype="int32")
    parts = []
    for w in range(4):
        ctx = RunContext({"worker_id": w, "num_workers": 4})
        offset = sym.mul(sym.var("worker_id"), 2)
        part = ref("shard_take", table[2 * w : 2 * w + 2], ids, axis=0, offset=offset, ctx=ctx)
        mine = (ids >= 2 * w) & (ids < 2 * w + 2)
        np.testing.assert_array_equal(part[~mine], 0)
        np.testing.assert_array_equal(part[mine], table[ids[mine]])
        parts.append(part)
    np.testing.assert_array_equal(sum(parts), table[ids])
    # along a middle axis too
    t3 = np.arange(2 * 6 * 2, dtype="float32").reshape(2, 6, 2)
    got = sum(ref("shard_take", t3[:, 3 * w : 3 * w + 3], np.array([5, 0, 3]), axis=1, offset=3 * w) for w in range(2))
    np.testing.assert_array_equal(got, t3[:, [5, 0, 3]])
    assert call("shard_take", T(4, 8), T(N, dtype="int64"), axis=1, offset=8).type == TensorType((4, N), "float32")
    # the window's axis cannot be sharded again; the other dims pass as in take
    ids_r = D((3,), "R", "int32")
    assert call("shard_take", D((8, 64), "S[1]"), ids_r, axis=0).type.placement == P("S[1]")
    with pytest.raises(TypeInferenceError, match="needs whole"):
        _ = call("shard_take", D((8, 64), "S[0]"), ids_r, axis=0).type


# ---------------------------------------------------------------- full / zeros / ones


def test_creation_types():
    one = Constant(np.array(1.5, dtype="float32"))
    assert call("full", ShapeExpr((N, 4)), one).type == TensorType((N, 4), "float32")
    assert call("full", ShapeExpr((N, 4)), one, dtype="float16").type == TensorType((N, 4), "float16")
    assert call("zeros", ShapeExpr((N,)), dtype="int32").type == TensorType((N,), "int32")
    assert call("ones", ShapeExpr((2, 3)), dtype="float32").type == TensorType((2, 3), "float32")
    with pytest.raises(TypeInferenceError, match="R.full: fill_value must be a scalar"):
        _ = call("full", ShapeExpr((2,)), Constant(np.ones(2, dtype="float32"))).type
    with pytest.raises(TypeInferenceError, match="R.zeros: the shape must be a shape value"):
        _ = call("zeros", T(2), dtype="float32").type
    with pytest.raises(TypeInferenceError, match="R.ones needs the attribute 'dtype'"):
        _ = call("ones", ShapeExpr((2,))).type


def test_creation_localize_and_reference():
    local = TensorType((sym.floordiv(N, W), 4), "float32")
    for name, extra in (("zeros", ()), ("ones", ()), ("full", (Constant(np.array(2.0, dtype="float32")),))):
        op = get_op(name)
        glob = Call(op, (ShapeExpr((N, 4)), *extra), {"dtype": "float32"})
        assert op.localize(glob, (ShapeExpr((N, 4)), *extra), local).type == local
    ctx = RunContext({"n": 3})
    out = ref("full", (N, 2), np.array(2.5, dtype="float32"), ctx=ctx)
    np.testing.assert_array_equal(out, np.full((3, 2), 2.5, dtype="float32"))
    assert out.dtype == np.float32
    assert ref("zeros", (2, 3), dtype="int32").dtype == np.int32
    np.testing.assert_array_equal(ref("ones", (2,), dtype="float32"), np.ones(2, dtype="float32"))


def test_full_of_a_dtensor_scalar():
    fill = D((), "R")
    assert call("full", ShapeExpr((N, 4)), fill).type.placement == P("R")
    assert call("full", ShapeExpr((N, 4)), D((), "P")).type.placement == P("P")


# ---------------------------------------------------------------- tril / triu


@pytest.mark.parametrize("name, fn", [("tril", np.tril), ("triu", np.triu)])
def test_tri(name, fn):
    assert call(name, T(2, N, N)).type == TensorType((2, N, N), "float32")
    with pytest.raises(TypeInferenceError, match=f"R.{name}: needs a tensor of rank at least 2"):
        _ = call(name, T(N)).type
    # every dim passes: batch / head dims, and rows or columns (localize shifts k)
    assert call(name, D((4, N, N), "S[0]")).type.placement == P("S[0]")
    assert call(name, D((4, N, N), "P")).type.placement == P("P")
    assert call(name, D((4, N, N), "S[1]")).type.placement == P("S[1]")
    assert call(name, D((4, N, N), "S[2]")).type.placement == P("S[2]")
    x = np.ones((2, 4, 5), dtype="float32")
    for k in (-1, 0, 2):
        np.testing.assert_array_equal(ref(name, x, k=k), fn(x, k))
    np.testing.assert_array_equal(ref(name, x, k=N, ctx=RunContext({"n": 1})), fn(x, 1))


@pytest.mark.parametrize("name", ["tril", "triu"])
def test_tri_localize_shifts_k_by_the_row_and_column_block_starts(name):
    op = get_op(name)
    mesh2 = DeviceMesh((2, W), Range(0, sym.mul(2, W)))
    x = Var("x", DTensorType((4, N, N), "float32", mesh2, P("S[1], S[2]")))
    local_x = T(4, sym.floordiv(N, 2), sym.floordiv(N, W))
    local = op.localize(Call(op, (x,), {"k": 1}), (local_x,), local_x.type)
    wid = sym.var("worker_id")
    r0 = sym.mul(sym.floordiv(wid, W), sym.ceildiv(N, 2))  # block starts: coordinate x ceil(n / count)
    c0 = sym.mul(sym.floormod(wid, W), sym.ceildiv(N, W))
    assert sym.equal(local.attrs["k"], sym.sub(sym.add(1, r0), c0))
    # batch-sharded: nothing to shift
    xb = D((4, N, N), "S[0]")
    assert dict(op.localize(Call(op, (xb,), {"k": 1}), (T(sym.floordiv(4, W), N, N),), None).attrs) == {"k": 1}
