"""The verifier reports every problem with the function, the binding's name and its position."""

from __future__ import annotations

import pytest

from distir.errors import Span, VerifyError
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
    TupleGetItem,
    TupleType,
    Var,
    get_op,
    sym,
    verify,
)
from distir.ir.verify import collect_problems

N = sym.var("num_workers")
MESH = DeviceMesh((N,), Range(0, N))
MESH2 = DeviceMesh((2, N), Range(0, 2 * N))


def T(*shape, dtype: str = "float32") -> TensorType:
    return TensorType(shape, dtype)


def D(shape, placement: str, mesh: DeviceMesh = MESH) -> DTensorType:
    return DTensorType(shape, "float32", mesh, Placement.parse(placement))


def call(name: str, *args, **attrs) -> Call:
    return Call(get_op(name), args, attrs)


def module(func: Function, meshes=(MESH,)) -> IRModule:
    return IRModule({func.name: func}, {"mesh": list(meshes)})


def mlp() -> tuple[IRModule, dict[str, Var]]:
    x, w1, w2 = Var("x", T(8, 16)), Var("w1", T(16, 32)), Var("w2", T(32, 16))
    h = Var("h", T(8, 32))
    a = Var("a", T(8, 32))
    y = Var("y", T(8, 16))
    block = Block(
        (
            Binding(h, call("matmul", x, w1)),
            Binding(a, call("nn.gelu", h)),
            Binding(y, call("matmul", a, w2)),
        ),
        True,
        (y,),
    )
    f = Function("main", (x, w1, w2), (block,), y, T(8, 16))
    return module(f), {"x": x, "w1": w1, "w2": w2, "h": h, "a": a, "y": y}


def test_well_formed_module_verifies():
    mod, _ = mlp()
    verify(mod)
    assert collect_problems(mod) == []


def test_wrong_recorded_type_is_caught_with_its_name_and_position():
    x, w = Var("x", T(8, 16)), Var("w", T(16, 32))
    span = Span("model.py", 7, 13)
    y = Var("y", T(8, 16))  # matmul gives (8, 32)
    f = Function("main", (x, w), (Block((Binding(y, call("matmul", x, w), span),)),), y)
    with pytest.raises(VerifyError) as info:
        verify(module(f))
    (problem,) = info.value.problems
    assert "@main" in problem and "'y'" in problem and "model.py:7:13" in problem
    assert "recorded type" in problem and "R.matmul" in problem and "(8, 32)" in problem


def test_several_problems_are_reported_at_once():
    x, w = Var("x", T(8, 16)), Var("w", T(16, 32))
    ghost = Var("ghost", T(8, 32))
    y = Var("y", T(8, 16))  # wrong
    z = Var("z", T(8, 32))
    bad = Var("bad", D((8, 16), "S[3]"))  # placement does not fit the rank
    f = Function(
        "main",
        (x, w, bad),
        (Block((Binding(y, call("matmul", x, w)), Binding(z, call("add", ghost, ghost)))),),
        z,
        T(1, 1),  # wrong return type
    )
    problems = collect_problems(module(f))
    text = "\n".join(problems)
    assert len(problems) >= 4, text
    assert "'y'" in text and "'ghost'" in text and "parameter 'bad'" in text and "return value" in text
    with pytest.raises(VerifyError) as info:
        verify(module(f))
    assert info.value.problems == problems
    assert str(len(problems)) in str(info.value)


def test_undefined_var_and_use_before_definition():
    x = Var("x", T(4))
    later = Var("later", T(4))
    y = Var("y", T(4))
    undefined = Var("nowhere", T(4))
    f = Function(
        "main",
        (x,),
        (Block((Binding(y, call("add", x, later)), Binding(later, call("add", x, undefined)))),),
        y,
    )
    text = "\n".join(collect_problems(module(f)))
    assert "binding 'y'" in text and "uses 'later' before it is defined" in text
    assert "binding 'later'" in text and "'nowhere', which is not defined" in text


def test_bad_placement_in_a_parameter():
    p = Var("p", D((8, 16), "S[0], R"), span=Span("f.py", 2, 9))  # two specs, 1-D mesh
    f = Function("main", (p,), (), p)
    (problem,) = collect_problems(module(f))
    assert "parameter 'p'" in problem and "f.py:2:9" in problem
    assert "2 entries" in problem and "1 axis" in problem


def test_bad_placement_in_return_type_and_binding():
    p = Var("p", D((8, 16), "S[0]"))
    q = Var("q", D((8, 16), "S[2]"))
    f = Function("main", (p,), (Block((Binding(q, p),)),), p, D((8, 16), "S[5]"))
    text = "\n".join(collect_problems(module(f)))
    assert "binding 'q'" in text and "shards dim 2" in text
    assert "return type" in text and "shards dim 5" in text


def test_mesh_missing_from_global_infos():
    p = Var("p", D((8, 16), "S[0], R", mesh=MESH2))
    f = Function("main", (p,), (), p)
    (problem,) = collect_problems(module(f, meshes=(MESH,)))
    assert "parameter 'p'" in problem and "not in the module's global_infos" in problem
    assert collect_problems(module(f, meshes=(MESH, MESH2))) == []


def test_mesh_attribute_missing_from_global_infos():
    x = Var("x", T(8, 16))
    y = Var("y", T(8, 16))
    c = call("dist.annotate_sharding", x, device_mesh=MESH2, placement=Placement.parse("R, S[0]"))
    f = Function("main", (x,), (Block((Binding(y, c),)),), y)
    (problem,) = collect_problems(module(f))
    assert "binding 'y'" in problem and "attribute 'device_mesh'" in problem


def test_type_inference_error_is_a_problem():
    x, w = Var("x", T(8, 16)), Var("w", T(8, 16))
    y = Var("y", T(8, 16))
    f = Function("main", (x, w), (Block((Binding(y, call("matmul", x, w)),)),), y)
    (problem,) = collect_problems(module(f))
    assert "binding 'y'" in problem and "contraction" in problem


def test_var_bound_twice():
    x = Var("x", T(4))
    y = Var("y", T(4))
    f = Function("main", (x,), (Block((Binding(y, call("add", x, x)), Binding(y, call("add", y, x)))),), y)
    text = "\n".join(collect_problems(module(f)))
    assert "second time" in text and "'y'" in text


def test_dataflow_local_var_used_after_its_block():
    x = Var("x", T(4))
    a, b, c = Var("a", T(4)), Var("b", T(4)), Var("c", T(4))
    b1 = Block((Binding(a, call("add", x, x)), Binding(b, call("add", a, x))), True, (b,))
    b2 = Block((Binding(c, call("add", a, b)),), False)
    problems = collect_problems(module(Function("main", (x,), (b1, b2), c)))
    assert len(problems) == 1 and "'a'" in problems[0] and "R.output" in problems[0]
    # With outputs=None every var stays visible.
    b1 = Block(b1.bindings, True, None)
    assert collect_problems(module(Function("main", (x,), (b1, b2), c))) == []


def test_tuple_and_tuple_get_item_types():
    x = Var("x", T(4))
    t = Var("t", TupleType((T(4), T(4))))
    good = Var("good", T(4))
    wrong = Var("wrong", T(5))
    out_of_range = Var("oor", T(4))
    f = Function(
        "main",
        (x,),
        (
            Block(
                (
                    Binding(t, Tuple((x, x))),
                    Binding(good, TupleGetItem(t, 1)),
                    Binding(wrong, TupleGetItem(t, 0)),
                    Binding(out_of_range, TupleGetItem(t, 2)),
                )
            ),
        ),
        good,
    )
    text = "\n".join(collect_problems(module(f)))
    assert "'good'" not in text
    assert "binding 'wrong'" in text and "binding 'oor'" in text and "out of range" in text
    t_bad = Var("t", TupleType((T(4),)))
    f2 = Function("main", (x,), (Block((Binding(t_bad, Tuple((x, x))),)),), t_bad)
    assert "binding 't'" in "\n".join(collect_problems(module(f2)))


def test_unknown_attribute_and_wrong_arity():
    x = Var("x", T(4))
    y, z = Var("y", T(4)), Var("z", T(4))
    f = Function(
        "main",
        (x,),
        (Block((Binding(y, call("nn.relu", x, bogus=1)), Binding(z, Call(get_op("nn.relu"), (x, x), {})))),),
        z,
    )
    text = "\n".join(collect_problems(module(f)))
    assert "no attribute 'bogus'" in text
    assert "takes 1 argument(s), got 2" in text


def test_verify_is_reachable_from_distir_ir():
    from distir import ir

    mod, _ = mlp()
    assert ir.verify(mod) is None


def test_problems_in_parsed_text_carry_file_line_and_column():
    import distir

    text = """\
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(x: R.DTensor((8, 16), "float32", "mesh[0]", "S[0]"), w: R.Tensor((16, 4), "float32")):
        with R.dataflow():
            h: R.Tensor((8, 16), dtype="float32") = R.matmul(x, w)
            s: R.DTensor((8, 16), "float32", "mesh[0]", "R") = R.dist.redistribute(x, device_mesh="mesh[0]", placement="S[1]")
            R.output(h, s)
        return s
"""
    mod = distir.parse(text, source_name="bad_types.py")
    problems = collect_problems(mod)
    assert len(problems) == 2, problems
    h, s = problems
    assert "binding 'h'" in h and "bad_types.py:8:" in h
    assert "binding 's'" in s and "bad_types.py:9:" in s and "S[1]" in s
