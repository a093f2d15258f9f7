"""Each op family on sharded and partial inputs, through the distribute pipeline and the SPMD
simulator, against the interpreter: the sharding rules and `localize` hooks are numerically right
at 1, 2, 4 and 8 workers, from one symbolic lowering."""

from __future__ import annotations

import numpy as np
import pytest

from distir.ir import (
    Constant,
    DeviceMesh,
    Placement,
    Range,
    ShapeExpr,
    Tuple,
    TupleGetItem,
    sym,
)
from distir.ir.builder import FunctionBuilder, dtensor, module_of
from distir.testing import assert_sharded_equivalent

W = sym.var("num_workers")
MESH = DeviceMesh((W,), Range(0, W))
REPLICATED = Placement.parse("R")


class Prog:
    """A global-view function over DTensor parameters; the result is redistributed to R."""

    def __init__(self):
        self.b = FunctionBuilder("main", meshes=[MESH], dataflow=True)
        self.inputs: list[np.ndarray] = []
        self.rng = np.random.default_rng(0)

    def param(self, name, shape, placement, dtype="float32", data=None):
        self.inputs.append(data if data is not None else self.rng.standard_normal(shape).astype(dtype))
        return self.b.param(name, dtensor(shape, dtype, MESH, placement))

    def bind(self, name, value):
        return self.b.bind(value, name)

    def op(self, name, op, *args, **attrs):
        return self.b.call(op, *args, name=name, **attrs)

    def check(self, *results, atol=1e-5):
        outs = []
        for i, r in enumerate(results):
            if r.type.placement != REPLICATED:
                r = self.op(f"out{i}", "dist.redistribute", r, device_mesh=MESH, placement=REPLICATED)
            outs.append(r)
        self.b.ret(outs[0] if len(outs) == 1 else outs)
        return assert_sharded_equivalent(module_of(self.b), self.inputs, rtol=1e-5, atol=atol)


def P(text):
    return Placement.parse(text)


def test_layer_norm_and_rms_norm_with_sharded_batch_and_sequence():
    p = Prog()
    x = p.param("x", (16, 8, 32), "S[0]")
    g = p.param("g", (32,), "R")
    b = p.param("b", (32,), "R")
    y = p.op("y", "nn.layer_norm", x, g, b, axes=[-1])
    assert y.type.placement == P("S[0]")
    x2 = p.param("x2", (2, 16, 32), "S[1]")
    z = p.op("z", "nn.rms_norm", x2, g, axes=[-1])
    assert z.type.placement == P("S[1]")
    p.check(y, z)


def test_softmax_tril_and_where_with_sharded_heads():
    p = Prog()
    s = p.param("s", (8, 16, 16), "S[0]")
    m = p.op("m", "tril", s)
    keep = p.op("keep", "not_equal", m, Constant(np.array(0.0, dtype="float32")))
    neg = Constant(np.full((16, 16), -1e9, dtype="float32"))
    masked = p.op("masked", "where", keep, s, neg)
    probs = p.op("probs", "nn.softmax", masked, axis=-1)
    lp = p.op("lp", "nn.log_softmax", s, axis=1)
    assert probs.type.placement == P("S[0]") and lp.type.placement == P("S[0]")
    p.check(probs, lp)


def test_embedding_lookup_with_a_hidden_sharded_table_and_sharded_ids():
    p = Prog()
    table = p.param("table", (50, 32), "S[1]")
    ids = p.param("ids", (2, 8), "R", "int32", data=np.random.default_rng(1).integers(0, 50, (2, 8)).astype("int32"))
    e = p.op("e", "take", table, ids, axis=0)
    assert e.type.placement == P("S[2]")
    table_r = p.param("table_r", (50, 32), "R")
    ids_s = p.param("ids_s", (16, 4), "S[0]", "int32",
                    data=np.random.default_rng(2).integers(0, 50, (16, 4)).astype("int32"))
    e2 = p.op("e2", "take", table_r, ids_s, axis=0)
    assert e2.type.placement == P("S[0]")
    p.check(e, e2)


def test_slices_split_and_concat_around_a_sharded_dim():
    p = Prog()
    x = p.param("x", (16, 32), "S[0]")
    # covering the sharded axis: localize must end the slice at the per-worker size
    a = p.op("a", "strided_slice", x, axes=[0, 1], begin=[0, 0], end=[16, 8])
    c = p.op("c", "strided_slice", x, axes=[1], begin=[30], end=[2], strides=[-2])
    parts = p.op("parts", "split", x, indices_or_sections=[8, 20], axis=1)
    first = p.bind("first", TupleGetItem(parts, 0))
    last = p.bind("last", TupleGetItem(parts, 2))
    neg = p.op("neg", "negative", last)
    cat = p.op("cat", "concat", Tuple((neg, first, a)), axis=1)
    assert cat.type.placement == P("S[0]") and c.type.placement == P("S[0]")
    p.check(cat, c)


def test_expand_dims_squeeze_reshape_and_permute():
    p = Prog()
    x = p.param("x", (16, 8, 4), "S[1]")
    e = p.op("e", "expand_dims", x, axis=[0, 3])
    assert e.type.placement == P("S[2]")
    s = p.op("s", "squeeze", e)
    r = p.op("r", "reshape", s, ShapeExpr((16, 32)))
    t = p.op("t", "permute_dims", r, axes=[1, 0])
    assert t.type.placement == P("S[0]")
    p.check(t)


@pytest.mark.parametrize("op, kind", [("sum", "P"), ("mean", "P"), ("max", "P[max]"), ("min", "P[min]")])
def test_reductions_over_a_sharded_dim_give_partials_that_reduce_right(op, kind):
    p = Prog()
    x = p.param("x", (4, 16), "S[1]")
    r = p.op("r", op, x, axis=[1], keepdims=True)
    assert r.type.placement == P(kind)
    # partials that pass linearly stay partial until the end
    if kind in ("P", "P[avg]"):
        r = p.op("r2", "multiply", r, Constant(np.array(3.0, dtype="float32")))
        r = p.op("r3", "permute_dims", r)
    else:  # monotone ops defined at the empty blocks' identity (+-inf); an add would reduce first
        r = p.op("r2", "exp", r)
        r = p.op("r3", "tanh", r)
    assert r.type.placement == P(kind)
    p.check(r, atol=1e-4)


def test_megatron_mlp_and_partial_sums_added():
    p = Prog()
    x = p.param("x", (8, 16), "R")
    w1 = p.param("w1", (16, 32), "S[1]")
    w2 = p.param("w2", (32, 16), "S[0]")
    h = p.op("h", "nn.gelu_tanh", p.op("h0", "matmul", x, w1))
    y = p.op("y", "matmul", h, w2)
    y2 = p.op("y2", "matmul", p.op("hs", "nn.silu", p.op("h1", "matmul", x, w1)), w2)
    both = p.op("both", "add", y, y2)
    cast = p.op("cast", "astype", both, dtype="float64")
    assert cast.type.placement == P("P")
    p.check(cast, atol=1e-4)


def test_layout_ops_carry_partial_sums():
    p = Prog()
    x = p.param("x", (8, 16), "S[1]")
    w = p.param("w", (16, 8), "S[0]")
    y = p.op("y", "matmul", x, w)  # P[sum]
    y2 = p.op("y2", "matmul", x, w)
    cat = p.op("cat", "concat", Tuple((y, y2)), axis=1)
    parts = p.op("parts", "split", cat, indices_or_sections=2, axis=0)
    top = p.bind("top", TupleGetItem(parts, 0))
    tri = p.op("tri", "tril", top, k=1)
    sl = p.op("sl", "strided_slice", tri, axes=[1], begin=[1], end=[16], strides=[3])
    ex = p.op("ex", "expand_dims", sl, axis=0)
    table = p.op("table", "reshape", ex, ShapeExpr((4, 5)))
    ids = Constant(np.array([3, 0, 3], dtype="int32"))
    got = p.op("got", "take", table, ids, axis=0)
    assert got.type.placement == P("P")
    p.check(got, atol=1e-4)
