"""Generated modules round-trip: parse(print(m)) is structurally m, and printing is a fixed point."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    Placement,
    Range,
    ShapeExpr,
    TensorType,
    Tuple,
    TupleGetItem,
    Var,
    assert_structural_equal,
    get_op,
    sym,
)
from distir.ir.placement import Partial, Replicate, Shard
from distir.script import print_module

N, M, W, TP = (sym.var(n) for n in ("n", "m", "num_workers", "tp"))
MESHES = (
    DeviceMesh((2,), Range(0, 2)),
    DeviceMesh((2, 2), (0, 1, 2, 3)),
    DeviceMesh((W,), Range(0, W)),
    DeviceMesh((2, TP), Range(0, sym.mul(2, TP))),
)
DIMS = (1, 2, 4, 8, N, M, sym.mul(2, N), sym.mul(M, W), sym.floordiv(128, W))
NAMES = ("x", "lv", "lv", "y_1", "class", "R", "n", "a.b", "0v", "gv")
UNARY = ("nn.relu", "nn.gelu", "exp", "negative", "nn.silu")
BINARY = ("add", "multiply", "subtract", "maximum")
REDUCE = ("sum", "mean", "max")
FLOATS = st.floats(allow_nan=False, width=32) | st.sampled_from([math.inf, -math.inf, 0.1, -0.0])
ATTR_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | FLOATS | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


def spec_for(draw, rank: int):
    kind = draw(st.sampled_from(("R", "S", "P", "Pmax")))
    if kind == "S" and rank > 0:
        return Shard(draw(st.integers(0, rank - 1)))
    if kind == "P":
        return Partial("sum")
    if kind == "Pmax":
        return Partial("max")
    return Replicate()


def tensor_type(draw):
    rank = draw(st.integers(0, 3))
    shape = tuple(draw(st.sampled_from(DIMS)) for _ in range(rank))
    dtype = draw(st.sampled_from(("float32", "float16", "int32")))
    if draw(st.booleans()):
        mesh = draw(st.sampled_from(MESHES))
        specs = tuple(spec_for(draw, rank) for _ in range(mesh.ndim))
        if len({s.op for s in specs if isinstance(s, Partial)}) > 1:
            specs = tuple(Replicate() if isinstance(s, Partial) else s for s in specs)
        return DTensorType(shape, dtype, mesh, Placement(specs))
    return TensorType(shape, dtype)


def constant(draw) -> Constant:
    shape = draw(st.sampled_from(((), (2,), (2, 3))))
    dtype = draw(st.sampled_from(("float32", "float64", "int32", "bool")))
    size = int(np.prod(shape)) if shape else 1
    if dtype == "bool":
        vals = draw(st.lists(st.booleans(), min_size=size, max_size=size))
    elif dtype == "int32":
        vals = draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=size, max_size=size))
    else:
        vals = draw(st.lists(st.floats(width=32) | st.just(math.nan), min_size=size, max_size=size))
    return Constant(np.array(vals, dtype=dtype).reshape(shape))


def try_call(name: str, args, attrs):
    op = get_op(name)
    call = Call(op, tuple(args), attrs)
    try:
        ty = op.infer_type(call.args, attrs)
        if isinstance(ty, DTensorType):
            # sharding inference can currently produce mixed partials ("P[avg], P") that the
            # placement rules reject; such a type is not valid IR, so it is not generated
            ty.placement.validate(ty.mesh.ndim, ty.ndim)
        return call, ty
    except DistirError:
        return None


@st.composite
def modules(draw) -> IRModule:
    funcs = {}
    for fi in range(draw(st.integers(1, 2))):
        params = [Var(draw(st.sampled_from(NAMES)), tensor_type(draw)) for _ in range(draw(st.integers(1, 3)))]
        tensors = list(params)
        blocks: list[Block] = []
        last_dataflow = True
        for _ in range(draw(st.integers(0, 3))):
            dataflow = draw(st.booleans()) or not last_dataflow
            bindings = []
            for _ in range(draw(st.integers(0 if dataflow else 1, 5))):
                step = draw(st.sampled_from(("unary", "binary", "reduce", "permute", "reshape", "redistribute", "const", "tuple")))
                a = draw(st.sampled_from(tensors))
                made = None
                if step == "unary":
                    made = try_call(draw(st.sampled_from(UNARY)), [a], {})
                elif step == "binary":
                    made = try_call(draw(st.sampled_from(BINARY)), [a, draw(st.sampled_from(tensors))], {})
                elif step == "reduce":
                    axis = draw(st.sampled_from((None, 0, -1, (0,), (0, 1))))
                    made = try_call(draw(st.sampled_from(REDUCE)), [a], {"axis": axis, "keepdims": draw(st.booleans())})
                elif step == "permute":
                    made = try_call("permute_dims", [a], {"axes": draw(st.sampled_from((None, (1, 0), (0, 1))))})
                elif step == "reshape" and isinstance(a.type, TensorType):
                    made = try_call("reshape", [a, ShapeExpr((sym.product(a.type.shape),))], {})
                elif step == "redistribute" and isinstance(a.type, DTensorType):
                    mesh = a.type.mesh
                    specs = tuple(spec_for(draw, a.type.ndim) for _ in range(mesh.ndim))
                    made = try_call("dist.redistribute", [a], {"device_mesh": mesh, "placement": Placement(specs)})
                elif step == "const":
                    c = constant(draw)
                    made = (c, c.type)
                elif step == "tuple":
                    tup = Tuple((a, draw(st.sampled_from(tensors))))
                    var = Var(draw(st.sampled_from(NAMES)), tup.type)
                    bindings.append(Binding(var, tup))
                    made = (TupleGetItem(var, draw(st.sampled_from((0, 1, -1)))), None)
                    made = (made[0], made[0].type)
                if made is None:
                    continue
                value, ty = made
                if draw(st.integers(0, 9)) == 0:
                    ty = tensor_type(draw)  # an annotation that disagrees with inference is kept as written
                var = Var(draw(st.sampled_from(NAMES)), ty)
                bindings.append(Binding(var, value))
                tensors.append(var)
            if not bindings and not dataflow:
                continue
            blocks.append(Block(bindings, is_dataflow=dataflow))
            last_dataflow = dataflow
        defined = [v for v in tensors if v not in params] or params
        if draw(st.booleans()):
            result = defined[-1]
        else:
            result = Tuple((defined[-1], draw(st.sampled_from(tensors))))
        ret = result.type if draw(st.booleans()) else None
        keys = st.text(min_size=1, max_size=5) | st.sampled_from(("private", "pure", "global_symbol"))
        attrs = draw(st.dictionaries(keys, ATTR_VALUES, max_size=3))
        if draw(st.booleans()):
            attrs["distir.global_params"] = [p.type for p in params]
        funcs[f"f{fi}"] = Function(f"f{fi}", tuple(params), tuple(blocks), result, ret, attrs)
    mod_attrs = draw(st.dictionaries(st.text(min_size=1, max_size=5), ATTR_VALUES, max_size=3))
    return IRModule(funcs, {"mesh": MESHES}, mod_attrs)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(modules())
def test_generated_modules_round_trip(mod):
    text = print_module(mod)
    again = distir.parse(text)
    assert_structural_equal(mod, again)
    assert print_module(again) == text
