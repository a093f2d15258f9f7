"""The numpy interpreter: MLP and attention against hand-written numpy, symbolic binding, errors."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

import distir
from distir.errors import DistirError
from distir.ir import (
    Binding,
    Block,
    Call,
    Constant,
    DeviceMesh,
    DTensorType,
    Function,
    IRModule,
    OpDef,
    Param,
    Placement,
    PrimValue,
    Range,
    ShapeExpr,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    Var,
    get_op,
    sym,
)
from distir.runtime import RunError, compile_function, run

N = sym.var("n")
S = sym.var("s")
W = sym.var("num_workers")
MESH = DeviceMesh((W,), Range(0, W))
RNG = np.random.default_rng(0)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


class Builder:
    """Bindings appended in order; each var typed by its op's inference."""

    def __init__(self):
        self.bindings: list[Binding] = []

    def __call__(self, name: str, value):
        if isinstance(value, str):
            raise TypeError
        v = Var(name, value.type)
        self.bindings.append(Binding(v, value))
        return v

    def op(self, name: str, op: str, *args, **attrs):
        return self(name, Call(get_op(op), args, attrs))

    def module(self, params, result, fname="main"):
        return IRModule({fname: Function(fname, tuple(params), (Block(tuple(self.bindings)),), result)})


def gelu(x):
    x = x.astype("float64")
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# ---------------------------------------------------------------- models


def mlp(batch, dtensor=False):
    def ty(shape, placement):
        if dtensor:
            return DTensorType(shape, "float32", MESH, Placement.parse(placement))
        return TensorType(shape, "float32")

    x = Var("x", ty((batch, 16), "R"))
    w1 = Var("w1", ty((16, 32), "S[1]"))
    w2 = Var("w2", ty((32, 8), "S[0]"))
    b = Builder()
    h = b.op("h", "matmul", x, w1)
    g = b.op("g", "nn.gelu", h)
    y = b.op("y", "matmul", g, w2)
    if dtensor:
        assert y.type.placement == Placement.parse("P")  # the all-reduce is still to come
        y = b.op("out", "dist.redistribute", y, device_mesh=MESH, placement=Placement.parse("R"))
    return b.module((x, w1, w2), y)


@pytest.mark.parametrize("batch", [5, N])
@pytest.mark.parametrize("dtensor", [False, True])
def test_mlp_matches_numpy(batch, dtensor):
    mod = mlp(batch, dtensor)
    x, w1, w2 = rand(5, 16), rand(16, 32), rand(32, 8)
    out = run(mod, x, w1, w2)
    want = gelu(x.astype("float64") @ w1) @ w2
    assert out.dtype == np.float32 and out.shape == (5, 8)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    if batch is N:  # another batch size, same plan
        out = run(mod, rand(3, 16), w1, w2)
        assert out.shape == (3, 8)


def test_mlp_from_text_with_annotations():
    mod = distir.parse(
        """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((2,), I.Range(0, 2))]})

    @R.function
    def main(x: R.Tensor(("m", 16), "float32"), w1: R.Tensor((16, 32), "float32"), w2: R.Tensor((32, 8), "float32")):
        with R.dataflow():
            h = R.matmul(x, w1)
            g = R.nn.gelu(h)
            ga = R.dist.annotate_sharding(g, "mesh[0]", "S[1]")
            y = R.matmul(ga, w2)
            R.output(y)
        return y
"""
    )
    x, w1, w2 = rand(7, 16), rand(16, 32), rand(32, 8)
    np.testing.assert_allclose(run(mod, x, w1, w2), gelu(x.astype("float64") @ w1) @ w2, rtol=1e-5, atol=1e-5)


def attention(seq):
    """Multi-head self-attention with a causal mask: (1, s, 64) -> (1, s, 64), 4 heads of 16."""
    x = Var("x", TensorType((1, seq, 64), "float32"))
    wqkv = Var("wqkv", TensorType((64, 192), "float32"))
    wo = Var("wo", TensorType((64, 64), "float32"))
    b = Builder()
    qkv = b.op("qkv", "matmul", x, wqkv)
    parts = b.op("parts", "split", qkv, indices_or_sections=3, axis=2)
    heads = []
    for i, name in enumerate("qkv"):
        t = b(name, TupleGetItem(parts, i))
        t = b.op(name + "4", "reshape", t, ShapeExpr((1, seq, 4, 16)))
        heads.append(b.op(name + "h", "permute_dims", t, axes=[0, 2, 1, 3]))
    q, k, v = heads
    kt = b.op("kt", "permute_dims", k, axes=[0, 1, 3, 2])
    scores = b.op("scores", "matmul", q, kt)
    scale = b("scale", Constant(np.array(0.25, dtype="float32")))
    scores = b.op("scaled", "multiply", scores, scale)
    ones = b.op("ones", "ones", ShapeExpr((seq, seq)), dtype="float32")
    mask = b.op("mask", "tril", ones)
    keep = b.op("keep", "greater", mask, Constant(np.array(0.5, dtype="float32")))
    neg = b.op("neg", "full", ShapeExpr((seq, seq)), Constant(np.array(-1e9, dtype="float32")))
    masked = b.op("masked", "where", keep, scores, neg)
    probs = b.op("probs", "nn.softmax", masked, axis=-1)
    ctx = b.op("ctx", "matmul", probs, v)
    ctx = b.op("ctx_t", "permute_dims", ctx, axes=[0, 2, 1, 3])
    ctx = b.op("ctx_m", "reshape", ctx, ShapeExpr((1, seq, 64)))
    out = b.op("out", "matmul", ctx, wo)
    return b.module((x, wqkv, wo), out)


def attention_numpy(x, wqkv, wo):
    s = x.shape[1]
    x, wqkv, wo = (a.astype("float64") for a in (x, wqkv, wo))
    q, k, v = np.split(x @ wqkv, 3, axis=2)
    q, k, v = (t.reshape(1, s, 4, 16).transpose(0, 2, 1, 3) for t in (q, k, v))
    scores = q @ k.transpose(0, 1, 3, 2) * 0.25
    scores = np.where(np.tril(np.ones((s, s))) > 0.5, scores, -1e9)
    ctx = softmax(scores) @ v
    return ctx.transpose(0, 2, 1, 3).reshape(1, s, 64) @ wo


@pytest.mark.parametrize("seq", [6, S])
def test_attention_matches_numpy(seq):
    mod = attention(seq)
    x, wqkv, wo = rand(1, 6, 64), rand(64, 192) * 0.2, rand(64, 64)
    np.testing.assert_allclose(run(mod, x, wqkv, wo), attention_numpy(x, wqkv, wo), rtol=1e-4, atol=1e-4)
    if seq is S:
        x = rand(1, 9, 64)
        np.testing.assert_allclose(run(mod, x, wqkv, wo), attention_numpy(x, wqkv, wo), rtol=1e-4, atol=1e-4)


def test_llama_style_ops_with_symbolic_attrs():
    """rms_norm, take, a rotary-style rotate-half, and slices whose bounds are symbolic."""
    ids = Var("ids", TensorType((1, S), "int32"))
    emb = Var("emb", TensorType((50, 8), "float32"))
    wn = Var("wn", TensorType((8,), "float32"))
    b = Builder()
    e = b.op("e", "take", emb, ids, axis=0)
    h = b.op("h", "nn.rms_norm", e, wn, axes=[-1], epsilon=1e-6)
    lo = b.op("lo", "strided_slice", h, axes=[2], begin=[0], end=[4])
    hi = b.op("hi", "strided_slice", h, axes=[2], begin=[4], end=[8])
    nhi = b.op("nhi", "negative", hi)
    rot = b.op("rot", "concat", Tuple((nhi, lo)), axis=-1)
    tail = b.op("tail", "strided_slice", rot, axes=[1], begin=[1], end=[S])
    mask = b.op("mask", "triu", b.op("o", "ones", ShapeExpr((S, S)), dtype="float32"), k=S - 2)
    mod = b.module((ids, emb, wn), Tuple((tail, mask)))

    idv = np.array([[3, 1, 4, 1, 5]], dtype="int32")
    embv, wnv = rand(50, 8), rand(8)
    tail_v, mask_v = run(mod, idv, embv, wnv)
    hv = embv[idv].astype("float64")
    hv = hv / np.sqrt((hv**2).mean(-1, keepdims=True) + 1e-6) * wnv
    rotv = np.concatenate([-hv[..., 4:], hv[..., :4]], axis=-1)
    np.testing.assert_allclose(tail_v, rotv[:, 1:], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(mask_v, np.triu(np.ones((5, 5)), 3))


# ---------------------------------------------------------------- values that are not calls


def test_constants_tuples_prim_values_and_shapes():
    x = Var("x", TensorType((2, 3), "float32"))
    b = Builder()
    c = b("c", Constant(np.full((2, 3), 2.0, dtype="float32")))
    y = b.op("y", "multiply", x, c)
    t = b("t", Tuple((x, y)))
    y2 = b("y2", TupleGetItem(t, 1))
    shp = b("shp", ShapeExpr((3, 2)))
    r = b.op("r", "reshape", y2, shp)
    pv = b("pv", PrimValue(7))
    mod = b.module((x,), Tuple((r, t, pv)))
    xv = rand(2, 3)
    r_v, (x_v, y_v), pv_v = run(mod, xv)
    np.testing.assert_array_equal(r_v, (xv * 2).reshape(3, 2))
    np.testing.assert_array_equal(x_v, xv)
    np.testing.assert_array_equal(y_v, xv * 2)
    assert pv_v == 7


def test_tuple_parameters():
    pair = Var("pair", TupleType((TensorType((N,), "float32"), TensorType((N,), "float32"))))
    b = Builder()
    a0 = b("a0", TupleGetItem(pair, 0))
    a1 = b("a1", TupleGetItem(pair, 1))
    s = b.op("s", "add", a0, a1)
    mod = b.module((pair,), s)
    u, v = rand(4), rand(4)
    np.testing.assert_array_equal(run(mod, (u, v)), u + v)
    with pytest.raises(RunError, match=r"parameter 'pair'\[1\] dim 0: 'n' is 4 \(from parameter 'pair'\[0\] dim 0\)"):
        run(mod, (u, rand(5)))


# ---------------------------------------------------------------- binding symbolic dims


def two_inputs(shape_a, shape_b):
    a = Var("a", TensorType(shape_a, "float32"))
    bb = Var("b", TensorType(shape_b, "float32"))
    b = Builder()
    r = b.op("r", "sum", a)
    r2 = b.op("r2", "sum", bb)
    s = b.op("s", "add", r, r2)
    return b.module((a, bb), s)


def test_conflicting_symbolic_dims_name_both_places():
    mod = two_inputs((N, 4), (N,))
    with pytest.raises(RunError, match=r"parameter 'b' dim 0: 'n' is 3 \(from parameter 'a' dim 0\), but this dim is 5"):
        run(mod, rand(3, 4), rand(5))


def test_compound_dims_are_checked_and_solved():
    mod = two_inputs((N, 4), (2 * N,))
    run(mod, rand(3, 4), rand(6))
    with pytest.raises(RunError, match=r"parameter 'b' dim 0: expected n \* 2 = 6 \(with n=3\), got 7"):
        run(mod, rand(3, 4), rand(7))
    # m * num_workers with m known: num_workers is worked out; alone, it is solved too
    m = sym.var("m")
    mod = two_inputs((m, 4), (m * W,))
    run(mod, rand(3, 4), rand(12))
    with pytest.raises(RunError, match=r"parameter 'b' dim 0: no value of 'num_workers' gives m \* num_workers = 13 \(with m=3\)"):
        run(mod, rand(3, 4), rand(13))
    # two unknowns in one dim, nothing else to go on: say which and how to give them
    mod = two_inputs((m * W, 4), (3,))
    with pytest.raises(RunError, match=r"cannot work out 'm', 'num_workers' .* pass sym_values"):
        run(mod, rand(8, 4), rand(3))
    run(mod, rand(8, 4), rand(3), sym_values={"num_workers": 4})


def test_sym_values_are_checked_against_inputs():
    mod = two_inputs((N, 4), (N,))
    with pytest.raises(RunError, match=r"'n' is 2 \(from sym_values\), but this dim is 3"):
        run(mod, rand(3, 4), rand(3), sym_values={"n": 2})


# ---------------------------------------------------------------- argument errors


def test_argument_errors_name_the_parameter():
    mod = mlp(N)
    x, w1, w2 = rand(5, 16), rand(16, 32), rand(32, 8)
    with pytest.raises(RunError, match=r"R.main takes 3 argument\(s\) \(x, w1, w2\), got 2"):
        run(mod, x, w1)
    with pytest.raises(RunError, match=r"parameter 'x': expected rank 2 .*got an array of shape \(5,\)"):
        run(mod, rand(5), w1, w2)
    with pytest.raises(RunError, match="parameter 'w1': expected dtype float32, got float64"):
        run(mod, x, w1.astype("float64"), w2)
    with pytest.raises(RunError, match="parameter 'w2' dim 1: expected size 8, got 9"):
        run(mod, x, w1, rand(32, 9))
    with pytest.raises(RunError, match="has no function 'forward'"):
        run(mod, x, w1, w2, func="forward")
    assert issubclass(RunError, DistirError)


def test_failures_inside_ops_name_the_binding():
    table = Var("table", TensorType((4, 2), "float32"))
    ids = Var("ids", TensorType((3,), "int32"))
    b = Builder()
    out = b.op("looked_up", "take", table, ids, axis=0)
    mod = b.module((table, ids), out)
    with pytest.raises(RunError, match=r"binding 'looked_up' = R.take\(...\): R.take: index 9 is out of range"):
        run(mod, rand(4, 2), np.array([0, 1, 9], dtype="int32"))


def test_ops_without_numpy_and_wrong_references():
    x = Var("x", TensorType((4,), "float32"))
    nonum = OpDef(name="test.opaque", params=(Param("x", "tensor"),), infer=lambda ts, attrs: ts[0])
    mod = IRModule({"main": Function("main", (x,), (Block((Binding(Var("y", x.type), Call(nonum, (x,), {})),)),),
                                     x)})
    with pytest.raises(RunError, match="R.test.opaque has no numpy reference"):
        run(mod, rand(4))
    # a reference that disagrees with its op's type is caught at the binding
    bad = OpDef(
        name="test.bad",
        params=(Param("x", "tensor"),),
        infer=lambda ts, attrs: ts[0],
        numpy=lambda xs, attrs, ctx: xs[0][:2],
    )
    y = Var("y", x.type)
    mod = IRModule({"main": Function("main", (x,), (Block((Binding(y, Call(bad, (x,), {})),)),), y)})
    with pytest.raises(RunError, match=r"binding 'y' = R.test.bad: produced an array of shape \(2,\) .* says \(4,\)"):
        run(mod, rand(4))
    assert run(mod, rand(4), check=False).shape == (2,)


def test_symbolic_slice_out_of_range_is_reported():
    x = Var("x", TensorType((8,), "float32"))
    b = Builder()
    y = b.op("y", "strided_slice", x, axes=[0], begin=[0], end=[N])  # taken to be in range
    k = Var("k", TensorType((N,), "float32"))
    mod = b.module((x, k), y)
    np.testing.assert_array_equal(run(mod, np.arange(8, dtype="float32"), rand(3)), np.arange(3))
    with pytest.raises(RunError, match=r"binding 'y' = R.strided_slice: produced .*\(8,\).* says \(10,\) .*n=10"):
        run(mod, np.arange(8, dtype="float32"), rand(10))


def test_local_view_collectives_point_to_the_simulator():
    x = Var("x", TensorType((4,), "float32"))
    y = Var("y", x.type)
    call = Call(get_op("ccl.all_reduce"), (x,), {"op_type": "sum", "device_mesh": DeviceMesh((2,), Range(0, 2)),
                                                "mesh_axis": 0})
    mod = IRModule({"main": Function("main", (x,), (Block((Binding(y, call),)),), y)})
    with pytest.raises(RunError, match="no numpy reference.*SPMD simulator"):
        run(mod, rand(4))


# ---------------------------------------------------------------- speed


def test_plans_are_cached_and_long_chains_run_fast():
    x = Var("x", TensorType((N, 8), "float32"))
    b = Builder()
    v = x
    for i in range(3000):
        v = b.op(f"v{i}", "add" if i % 2 else "multiply", v, x)
    mod = b.module((x,), v)
    f = mod["main"]
    plan = compile_function(f)
    assert compile_function(f) is plan
    xv = np.full((2, 8), 1.0, dtype="float32")
    run(mod, xv)
    start = time.perf_counter()
    for _ in range(3):
        run(mod, xv)
    per_run = (time.perf_counter() - start) / 3
    assert per_run < 0.5, f"{per_run:.3f}s for 3000 bindings"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_models_run(dtype):
    from distir.ir.types import np_dtype

    x = Var("x", TensorType((4, 16), dtype))
    w = Var("w", TensorType((16, 8), dtype))
    b = Builder()
    h = b.op("h", "matmul", x, w)
    s = b.op("s", "nn.softmax", b.op("g", "nn.silu", h))
    m = b.op("m", "mean", s, axis=[1])
    mod = b.module((x, w), m)
    xv, wv = rand(4, 16).astype(np_dtype(dtype)), rand(16, 8).astype(np_dtype(dtype))
    out = run(mod, xv, wv)
    assert out.dtype == np_dtype(dtype) and out.shape == (4,)
    np.testing.assert_allclose(out.astype("float64"), np.full(4, 1 / 8), rtol=1e-2)
