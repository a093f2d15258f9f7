"""The cached, memoized Specialize gives exactly what a plain substitute-everything walk gives, for
every count in turn on one module, and keeps its divisibility errors after the cache is built."""

from __future__ import annotations

import pytest

import distir
from distir import examples
from distir.errors import SpecializeError
from distir.ir import assert_structural_equal, sym
from distir.ir.expr import Binding, Block, Call, PrimValue, ShapeExpr, Tuple, TupleGetItem, Var
from distir.ir.mesh import DeviceMesh
from distir.ir.types import Type
from distir.transform import get_pass
from distir.transform.legalize_redistribute import expand_replans
from distir.transform.pipelines import distribute_pipeline
from distir.transform.specialize import drop_identities, specialize


def reference_specialize(mod, values):
    """Substitute every type, attribute, shape and mesh node by node (no caching, no sharing)."""

    def value(v):
        if isinstance(v, bool) or v is None or isinstance(v, (str, float)):
            return v
        if isinstance(v, int) or sym.is_symbolic(v):
            return sym.substitute(v, values)
        if isinstance(v, (DeviceMesh, Type)):
            return v.substitute(values)
        if isinstance(v, (list, tuple)):
            return type(v)(value(x) for x in v)
        if isinstance(v, dict):
            return {k: value(x) for k, x in v.items()}
        return v

    def function(f):
        env = {}

        def var(v):
            env[v] = Var(v.name, v.type.substitute(values), v.span)
            return env[v]

        def expr(e):
            if isinstance(e, Var):
                return env.get(e, e)
            if isinstance(e, Call):
                return Call(e.op, tuple(expr(a) for a in e.args), {k: value(v) for k, v in e.attrs.items()}, e.span)
            if isinstance(e, Tuple):
                return Tuple(tuple(expr(x) for x in e.fields), e.span)
            if isinstance(e, TupleGetItem):
                return TupleGetItem(expr(e.tuple_value), e.index, e.span)
            if isinstance(e, ShapeExpr):
                return ShapeExpr(tuple(sym.substitute(v, values) for v in e.values), e.span)
            if isinstance(e, PrimValue):
                return PrimValue(sym.substitute(e.value, values), e.dtype, e.span)
            return e

        params = tuple(var(p) for p in f.params)
        blocks = []
        for block in f.blocks:
            bindings = []
            for b in block.bindings:
                v = expr(b.value)
                bindings.append(Binding(var(b.var), v, b.span))
            outs = None if block.outputs is None else tuple(env.get(o, o) for o in block.outputs)
            blocks.append(Block(tuple(bindings), block.is_dataflow, outs))
        ret = f.ret_type.substitute(values) if f.ret_type is not None else None
        return f.replace(params=params, blocks=tuple(blocks), result=expr(f.result), ret_type=ret,
                         attrs={k: value(v) for k, v in f.attrs.items()})

    infos = {k: [value(m) for m in v] for k, v in mod.global_infos.items()}
    # then, like specialize, write the plan of each redistribute planned for the count, and drop what
    # changes nothing at these sizes (masks of an even split)
    return mod.replace(functions={n: drop_identities(expand_replans(function(f))) for n, f in mod.functions.items()},
                       global_infos=infos,
                       attrs={k: value(v) for k, v in mod.attrs.items()})


def lowered(name: str):
    return distribute_pipeline()(examples.load(name))


TWO_D = '''\
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((2, "num_workers"), I.Range(0, "2 * num_workers"))]})

    @R.function
    def main(x: R.DTensor((16, 32), "float32", "mesh[0]", "S[0], S[1]")):
        with R.dataflow():
            y: R.DTensor((16, 32), "float32", "mesh[0]", "R, S[0]") = R.dist.redistribute(x, device_mesh="mesh[0]", \
placement="R, S[0]")
            z: R.DTensor((16, 32), "float32", "mesh[0]", "P, R") = R.dist.redistribute(y, device_mesh="mesh[0]", \
placement="P, R")
            R.output(z)
        return z
'''


@pytest.mark.parametrize("source", ["mlp", "llama", "two_d", "stack"])
def test_equals_the_reference_at_every_count_from_one_module(source):
    if source == "two_d":
        mod = get_pass("lower-global-view-to-local-view")(get_pass("legalize-redistribute")(distir.parse(TWO_D)))
    elif source == "stack":
        mod = distribute_pipeline()(examples.llama_stack(2))
    else:
        mod = lowered(source)
    for w in (1, 2, 4, 8, 2):  # again at 2: the cached template must not keep the previous values
        fast, slow = specialize(mod, {"num_workers": w}), reference_specialize(mod, {"num_workers": w})
        assert_structural_equal(fast, slow)
        assert fast.script() == slow.script()


def test_binding_one_size_then_another():
    mod = lowered("llama")
    half = specialize(mod, {"s": 16})
    assert_structural_equal(half, reference_specialize(mod, {"s": 16}))
    assert "num_workers" in half.script() and " s = T.int64()" not in half.script()
    assert_structural_equal(specialize(half, {"num_workers": 4}), reference_specialize(mod, {"s": 16, "num_workers": 4}))


def test_every_count_and_the_errors_stay_right_after_the_cache_is_built():
    mod = lowered("mlp")
    even = specialize(mod, {"num_workers": 4})
    uneven = specialize(mod, {"num_workers": 3})  # 512 over 3: blocks of 171, the last one padded
    assert uneven["main"].params[1].type.shape == (256, 171)
    ops = [b.value.op.name for b in uneven["main"].bindings()]
    assert ops.count("mask_tail") == 2  # the padding is filled before the contraction over it
    assert "mask_tail" not in [b.value.op.name for b in even["main"].bindings()]
    assert specialize(mod, {"num_workers": 8})["main"].params[1].type.shape == (256, 64)
    with pytest.raises(SpecializeError, match="must be an integer"):
        specialize(mod, {"num_workers": "4"})
    with pytest.raises(SpecializeError, match="sizes must be at least 1"):
        specialize(mod, {"num_workers": 0})


def test_equal_types_are_shared_and_static_nodes_reused():
    mod = lowered("llama")
    out = specialize(mod, {"num_workers": 2, "s": 8})
    f = out["main"]
    types = [b.var.type for b in f.bindings()]
    assert len({id(t) for t in types}) < len(types) // 2  # one object per distinct type
    static = specialize(out, {"num_workers": 2})  # nothing symbolic left: the same bindings come back
    assert all(a is b for a, b in zip(static["main"].bindings(), f.bindings()))
