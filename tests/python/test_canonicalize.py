"""Canonicalize, TVM style: Before -> pass -> structurally equal to Expected. Also map_bindings."""

from __future__ import annotations

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
    def before():
        x = Var("x", D((128, 64), "S[0]"))
        a = let("a", redistribute(x, "S[0]"))  # already S[0]: a no-op
        b = let("b", call("nn.relu", a.var))
        c = let("c", redistribute(b.var, "R"))  # a real layout change stays
        return module(Function("main", (x,), (Block((a, b, c), True, (c.var,)),), c.var, c.var.type))

    def expected():
        x = Var("x", D((128, 64), "S[0]"))
        b = let("b", call("nn.relu", x))
        c = let("c", redistribute(b.var, "R"))
        return module(Function("main", (x,), (Block((b, c), True, (c.var,)),), c.var, c.var.type))

    assert_structural_equal(run(before()), expected())


def test_chain_of_trivial_redistributes_collapses_to_the_parameter():
    def before():
        x = Var("x", D((8, 8), "R"))
        a = let("a", redistribute(x, "R"))
        b = let("b", redistribute(a.var, "R"))
        return module(Function("main", (x,), (Block((a, b), True, (b.var,)),), b.var))

    def expected():
        x = Var("x", D((8, 8), "R"))
        return module(Function("main", (x,), (), x))

    assert_structural_equal(run(before()), expected())


def test_dead_code_is_removed_transitively():
    def before():
        x = Var("x", TensorType((4, 4), "float32"))
        y = let("y", call("nn.relu", x))
        d1 = let("d1", call("add", x, x))
        d2 = let("d2", call("multiply", d1.var, y.var))  # uses y, but is itself dead
        z = let("z", call("exp", y.var))
        return module(Function("main", (x,), (Block((y, d1, d2, z), True, (z.var, d2.var)),), z.var))

    def expected():
        x = Var("x", TensorType((4, 4), "float32"))
        y = let("y", call("nn.relu", x))
        z = let("z", call("exp", y.var))
        return module(Function("main", (x,), (Block((y, z), True, (z.var,)),), z.var))

    assert_structural_equal(run(before()), expected())


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
