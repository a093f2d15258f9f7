"""Canonicalize, TVM style: Before -> pass -> structurally equal to Expected. Also map_bindings."""

from __future__ import annotations

from distir import examples
from distir.ir import (
    Binding,
    Block,
    Call,
    DeviceMesh,
    DTensorType,
    Function,
    IRModule,
    Placement,
    Range,
    TensorType,
    Tuple,
    Var,
    assert_structural_equal,
    get_op,
    sym,
    verify,
)
from distir.script import ir as I
from distir.script import relax as R
from distir.script import tirx as T
from distir.transform import Canonicalize, get_pass, map_bindings

N = sym.var("num_workers")
MESH = DeviceMesh((N,), Range(0, N))


def D(shape, placement: str) -> DTensorType:
    return DTensorType(shape, "float32", MESH, Placement.parse(placement))


def call(name: str, *args, **attrs) -> Call:
    return Call(get_op(name), args, attrs)


def redistribute(x: Var, placement: str) -> Call:
    return call("dist.redistribute", x, device_mesh=MESH, placement=Placement.parse(placement))


def let(name: str, value) -> Binding:
    return Binding(Var(name, value.type), value)


def module(func: Function) -> IRModule:
    return IRModule({func.name: func}, {"mesh": [MESH]})


def run(mod: IRModule) -> IRModule:
    verify(mod)
    out = Canonicalize()(mod)
    verify(out)
    return out


def test_trivial_redistribute_is_removed():
    @I.ir_module
    class Before:
        I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

        @R.function
        def main(
            x: R.DTensor((128, 64), "float32", "mesh[0]", "S[0]"),
        ) -> R.DTensor((128, 64), "float32", "mesh[0]", "R"):
            with R.dataflow():
                a = R.dist.redistribute(x, device_mesh="mesh[0]", placement="S[0]")  # already S[0]
                b = R.nn.relu(a)
                c = R.dist.redistribute(b, device_mesh="mesh[0]", placement="R")  # a real change stays
                R.output(c)
            return c

    @I.ir_module
    class Expected:
        I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

        @R.function
        def main(
            x: R.DTensor((128, 64), "float32", "mesh[0]", "S[0]"),
        ) -> R.DTensor((128, 64), "float32", "mesh[0]", "R"):
            with R.dataflow():
                b = R.nn.relu(x)
                c = R.dist.redistribute(b, device_mesh="mesh[0]", placement="R")
                R.output(c)
            return c

    assert_structural_equal(run(Before), Expected)


def test_chain_of_trivial_redistributes_collapses_to_the_parameter():
    @I.ir_module
    class Before:
        I.module_global_infos({"mesh": [R.device_mesh((2, "num_workers"), I.Range(0, "2 * num_workers"))]})

        @R.function
        def main(x: R.DTensor((8, 8), "float32", "mesh[0]", "S[1], P")):
            with R.dataflow():
                a = R.dist.redistribute(x, device_mesh="mesh[0]", placement="S[1], P")
                b = R.dist.redistribute(a, device_mesh="mesh[0]", placement="S[1], P[sum]")
                R.output(b)
            return b

    @I.ir_module
    class Expected:
        I.module_global_infos({"mesh": [R.device_mesh((2, "num_workers"), I.Range(0, "2 * num_workers"))]})

        @R.function
        def main(x: R.DTensor((8, 8), "float32", "mesh[0]", "S[1], P")):
            return x

    assert_structural_equal(run(Before), Expected)


def test_dead_code_is_removed_transitively():
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((4, 4), "float32")):
            with R.dataflow():
                y = R.nn.relu(x)
                d1 = R.add(x, x)
                d2 = R.multiply(d1, y)  # uses y, but is itself dead
                z = R.exp(y)
                R.output(z, d2)
            return z

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((4, 4), "float32")):
            with R.dataflow():
                y = R.nn.relu(x)
                z = R.exp(y)
                R.output(z)
            return z

    assert_structural_equal(run(Before), Expected)


def test_dead_code_across_blocks_and_symbolic_shapes():
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor(("n", 4), "float32")):
            n = T.int64()
            with R.dataflow():
                a = R.exp(x)
                unused = R.negative(a)
                R.output(a, unused)
            b = R.add(a, x)
            dead = R.sum(b, axis=[0], keepdims=False)
            return b

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor(("n", 4), "float32")):
            n = T.int64()
            with R.dataflow():
                a = R.exp(x)
                R.output(a)
            b = R.add(a, x)
            return b

    assert_structural_equal(run(Before), Expected)


def test_canonicalize_on_the_bundled_mlp_keeps_everything():
    mod = examples.load("mlp")
    assert run(mod) is mod


def test_uses_through_tuples_keep_bindings_alive():
    x = Var("x", TensorType((4,), "float32"))
    a = let("a", call("exp", x))
    b = let("b", call("negative", x))
    t = let("t", Tuple((a.var, b.var)))
    mod = module(Function("main", (x,), (Block((a, b, t)),), t.var))
    assert run(mod) is mod  # nothing to do: the very same module comes back


def test_canonicalize_is_idempotent_and_options_switch_parts_off():
    x = Var("x", D((8, 8), "S[1]"))
    a = let("a", redistribute(x, "S[1]"))
    dead = let("dead", call("nn.relu", x))
    mod = module(Function("main", (x,), (Block((a, dead), True, (a.var,)),), a.var))
    once = run(mod)
    assert Canonicalize()(once) is once
    only_dce = get_pass("canonicalize", remove_trivial_redistribute=False)(mod)
    assert [b.var.name for b in only_dce["main"].bindings()] == ["a"]
    only_redist = get_pass("canonicalize", remove_dead_code=False)(mod)
    assert [b.var.name for b in only_redist["main"].bindings()] == ["dead"]


def test_map_bindings_substitutes_later_uses_outputs_and_result():
    x = Var("x", TensorType((4,), "float32"))
    a = let("a", call("exp", x))
    b = let("b", call("nn.relu", a.var))
    c = let("c", call("add", b.var, a.var))
    func = Function("main", (x,), (Block((a, b), True, (a.var, b.var)), Block((c,), False)), c.var)

    def drop_relu(binding, env):
        if binding.value.op.name == "nn.relu":
            env[binding.var] = binding.value.args[0]
            return []
        return None

    out = map_bindings(func, drop_relu)
    (blk1, blk2) = out.blocks
    assert [bb.var.name for bb in blk1.bindings] == ["a"] and blk1.outputs == (a.var,)
    (cb,) = blk2.bindings
    assert cb.value.args == (a.var, a.var)
    assert map_bindings(func, lambda binding, env: None) is func


def test_map_bindings_can_insert_bindings():
    x = Var("x", TensorType((4,), "float32"))
    a = let("a", call("exp", x))
    func = Function("main", (x,), (Block((a,)),), a.var)

    def expand(binding, env):
        pre = let("pre", call("negative", x))
        new = Binding(binding.var, call("exp", pre.var))
        return [pre, new]

    out = map_bindings(func, expand)
    assert [bb.var.name for bb in out.bindings()] == ["pre", "a"]
    verify(module(out))
