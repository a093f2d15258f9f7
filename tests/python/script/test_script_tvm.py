"""TVM's own parser accepts what distir prints for modules that use only TVM features.

Those are: static meshes, S/R placements, TVM's op names and attributes. Symbolic
tensor shapes are TVM features too (declared by ``n = T.int64()`` as TVM prints them).
"""

from __future__ import annotations

import pytest
import tvm  # a pinned dependency: its absence is a failure, not a skip

import distir
from test_script_roundtrip import CORPUS, STATIC_1D

TVM_SUBSET = [
    "static_1d",
    "tuples_constants",
    "several_functions",
    "transformer_ops",
    "decorator_attrs",
    "top_level_function",
    "empty_dataflow",
]

STATIC_2D = '''
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((2, 2), I.Range(0, 4)), R.device_mesh((4,), [4, 5, 6, 7])]})

    @R.function
    def main(x: R.DTensor((128, "n"), "float32", "mesh[0]", "S[0], R"), w: R.DTensor(("n", 64), "float32", "mesh[0]", "R, S[1]")) -> R.DTensor((128, 64), "float32", "mesh[0]", "R, R"):
        n = T.int64()
        with R.dataflow():
            h = R.matmul(x, w)
            g = R.nn.gelu(h)
            y = R.dist.redistribute(g, device_mesh="mesh[0]", placement="R, R")
            z = R.dist.annotate_sharding(y, device_mesh="mesh[0]", placement="S[1], R")
            R.output(z)
        return z
'''


def tvm_parse(text: str):
    # TVM rejects import statements: the header lines must stay comments
    assert not [ln for ln in text.splitlines() if ln.startswith(("import", "from"))]
    return tvm.script.from_source(text)


@pytest.mark.parametrize("name", TVM_SUBSET)
def test_tvm_parses_printed_static_modules(name):
    mod = distir.parse(CORPUS[name])
    tmod = tvm_parse(mod.script())
    assert sorted(gv.name_hint for gv in tmod.get_global_vars()) == sorted(mod.functions)


def test_tvm_parses_a_two_d_static_mesh_module():
    mod = distir.parse(STATIC_2D)
    text = mod.script()
    assert "h: R.DTensor((128, 64), \"float32\", \"mesh[0]\", \"S[0], S[1]\")" in text
    tmod = tvm_parse(text)
    main = tmod["main"]
    assert len(main.params) == 2
    # TVM reads the same meshes
    meshes = tmod.global_infos["mesh"]
    assert [list(m.shape) for m in meshes] == [[2, 2], [4]]


def test_tvm_reads_the_same_types_for_parameters_and_bindings():
    mod = distir.parse(STATIC_1D)
    tmod = tvm_parse(mod.script())
    main = tmod["main"]
    x = main.params[0].ty
    assert [int(d) for d in x.tensor_ty.shape] == [128, 64]
    assert str(x.placement).strip("\"") == "S[0]"
    bindings = [b for blk in main.body.blocks for b in blk.bindings]
    assert [str(b.var.name) for b in bindings] == [b.var.name for b in mod["main"].bindings()]
    h = bindings[0].var.ty
    assert [int(d) for d in h.tensor_ty.shape] == [128, 32] and str(h.placement).strip("\"") == "S[0]"
