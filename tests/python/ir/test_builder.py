"""The IR builder (distir.ir.builder) makes what the text format parses to, types each call as it
is made, and refuses what the text format refuses."""

from __future__ import annotations

import numpy as np
import pytest

import distir
import distir.ops
from distir.errors import TypeInferenceError
from distir.ir import DTensorType, TensorType, TupleType, assert_structural_equal, sym, verify
from distir.ir.builder import BuilderError, FunctionBuilder, dim, dtensor, mesh, module_of, tensor

TEXT = '''
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers")), R.device_mesh((2,), I.Range(4, 6))]})

    @R.function
    def main(x: R.DTensor((8, "s"), "float32", "mesh[0]", "S[0]"), w: R.Tensor(("s", 4), dtype="float32")):
        t = R.reshape(w, R.shape([4, "s"]))
        with R.dataflow():
            y = R.dist.redistribute(x, device_mesh="mesh[0]", placement="R")
            z = R.dist.redistribute(y, device_mesh="mesh[1]", placement="S[1]")
            unused = R.add(y, y)
            R.output(z)
        return (z, t)
'''


def test_a_built_module_equals_the_parsed_text():
    m0, m1 = mesh(("num_workers",)), mesh((2,), devices=4)
    b = FunctionBuilder("main", meshes=[m0, m1])
    x = b.param("x", dtensor((8, "s"), "float32", m0, "S[0]"))
    w = b.param("w", tensor(("s", 4)))
    t = b.call("reshape", w, [4, "s"], name="t")  # outside dataflow(): a plain block
    with b.dataflow():
        y = b.call("dist.redistribute", x, device_mesh="mesh[0]", placement="R", name="y")
        z = b.call("dist.redistribute", y, m1, "S[1]", name="z")  # positionally, a mesh object
        b.call("add", y, y, name="unused")
    b.ret([z, t])
    mod = module_of(b)
    assert_structural_equal(mod, distir.parse(TEXT))
    verify(mod)
    assert [blk.outputs for blk in mod["main"].blocks] == [None, (z,)]  # what is read after the block
    assert isinstance(y.type, DTensorType) and str(y.type.placement) == "R"  # typed as it was made
    assert distir.parse(mod.script()).script() == mod.script()


def test_a_mistake_shows_where_the_call_is_made():
    b = FunctionBuilder("main")
    a = b.param("a", tensor((4, 3)))
    with pytest.raises(TypeInferenceError, match="R.matmul"):
        b.call("matmul", a, a)
    with pytest.raises(BuilderError, match=r"unknown op 'R.matmull'"):
        b.call("matmull", a, a)
    with pytest.raises(BuilderError, match=r"R.add has no parameter 'axis' \(its parameters are x1, x2\)"):
        b.call("add", a, a, axis=0)
    with pytest.raises(BuilderError, match="R.nn.softmax got parameter 'data' twice"):
        b.call("nn.softmax", a, data=a)
    with pytest.raises(BuilderError, match="R.add needs the argument 'x2'"):
        b.call("add", a)
    b.call("exp", a, name="e")
    with pytest.raises(BuilderError, match="'e' is already bound in @main"):
        b.call("exp", a, name="e")
    with pytest.raises(BuilderError, match=r"\"mesh\[i\]\" of the builder's 0 mesh"):
        b.call("dist.redistribute", a, device_mesh="mesh[0]", placement="R")
    with pytest.raises(BuilderError, match="has not returned yet"):
        module_of(b)


def test_tuples_constants_names_and_plain_bindings():
    m = mesh((2,))
    b = FunctionBuilder("f", meshes=[m], plain_bindings=True, dataflow=True)
    x = b.param("x", dtensor((4, 6), "float32", m, "S[1]"))
    parts = b.call("split", x, indices_or_sections=2, axis=1)
    first = b.get_item(parts, 0)
    scaled = b.call("multiply", first, b.const(2.0))
    pair = b.tuple(scaled, first)
    f = b.ret(pair)
    assert [v.name for v in (parts, first, scaled, pair)] == ["v0", "v1", "v2", "v3"]
    assert isinstance(parts.type, TupleType) and scaled.type == TensorType((4, 3), "float32")  # no layout
    assert [blk.is_dataflow for blk in f.blocks] == [True] and f.blocks[0].outputs == (pair,)
    assert b.const(1).data.dtype == np.int64 and b.const([True]).data.dtype == bool
    assert b.const(1.5, "float16").data.dtype == np.float16
    assert sym.equal(dim("2 * n"), sym.mul(2, sym.var("n"))) and dim(3) == 3
    with pytest.raises(BuilderError, match="already returned"):
        b.ret(x)
