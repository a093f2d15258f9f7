"""Export to TVM Relax: standard Relax ops, Disco collectives, num_workers symbolic until TVM binds it.

The exported module must pass TVM's well-formedness check and build with tvm.compile, both
as exported and after TVM's own single-device passes (LegalizeOps, FuseOps, FuseTIR) ran on
the symbolic module; the build of each device count then runs on Disco and computes what
the single-device interpreter computes.
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, tirx

import distir
from distir.driver import compare, random_inputs, run_disco
from distir.ir import Binding, Block, Call, Function, IRModule, OpDef, Param, TensorType, Var, all_ops
from distir.runtime import run
from distir.transform.pipelines import distribute_pipeline
from distir.tvm import DISCO_LAYOUT_FUNC, TvmExportError, specialize_and_build, to_relax
from distir.tvm.targets import default_target
from distir.tvm.relax.ops import SUPPORTED_OPS

MESH_1D = 'I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})'

MLP = f'''
@I.ir_module
class Module:
    {MESH_1D}

    @R.function
    def main(
        x: R.DTensor((32, 64), "float32", "mesh[0]", "R"),
        w1: R.DTensor((64, 128), "float32", "mesh[0]", "S[1]"),
        w2: R.DTensor((128, 64), "float32", "mesh[0]", "S[0]"),
    ):
        with R.dataflow():
            h = R.matmul(x, w1)
            a = R.nn.gelu(h)
            y = R.matmul(a, w2)
            z = R.dist.redistribute(y, device_mesh="mesh[0]", placement="R")
            R.output(z)
        return z
'''

# Every collective distir has, worker-dependent slices and masks (a sharded tril shifts its
# diagonal by the worker's row block) and a vocab-parallel lookup (shard_take).
KITCHEN_SINK = f'''
@I.ir_module
class Module:
    {MESH_1D}

    @R.function
    def main(
        table: R.DTensor((64, 32), "float32", "mesh[0]", "S[0]"),
        ids: R.DTensor((16,), "int64", "mesh[0]", "R"),
        w: R.DTensor((32, 32), "float32", "mesh[0]", "R"),
        gamma: R.DTensor((32,), "float32", "mesh[0]", "R"),
    ):
        with R.dataflow():
            e: R.DTensor((16, 32), "float32", "mesh[0]", "P") = R.take(table, ids, axis=0)
            h: R.DTensor((16, 32), "float32", "mesh[0]", "S[0]") = R.dist.redistribute(e, device_mesh="mesh[0]", placement="S[0]")
            t: R.DTensor((16, 32), "float32", "mesh[0]", "S[0]") = R.tril(h, k=0)
            u: R.DTensor((16, 32), "float32", "mesh[0]", "S[1]") = R.dist.redistribute(t, device_mesh="mesh[0]", placement="S[1]")
            v: R.DTensor((16, 32), "float32", "mesh[0]", "S[1]") = R.nn.silu(u)
            g: R.DTensor((16, 32), "float32", "mesh[0]", "R") = R.dist.redistribute(v, device_mesh="mesh[0]", placement="R")
            s: R.DTensor((16, 32), "float32", "mesh[0]", "S[0]") = R.dist.redistribute(g, device_mesh="mesh[0]", placement="S[0]")
            m: R.DTensor((16, 32), "float32", "mesh[0]", "S[0]") = R.matmul(s, w)
            n: R.DTensor((16, 32), "float32", "mesh[0]", "S[0]") = R.nn.rms_norm(m, gamma, axes=[-1])
            o: R.DTensor((16, 32), "float32", "mesh[0]", "R") = R.dist.redistribute(n, device_mesh="mesh[0]", placement="R")
            R.output(o)
        return o
'''

TVM_SINGLE_DEVICE_PASSES = [
    relax.transform.LegalizeOps(),
    relax.transform.AnnotateTIROpPattern(),
    relax.transform.FoldConstant(),
    relax.transform.FuseOps(),
    relax.transform.FuseTIR(),
]


def lowered(text: str) -> IRModule:
    return distribute_pipeline()(distir.parse(text))


def bindings(func) -> list:
    return [b for block in func.body.blocks for b in block.bindings]


def callees(func) -> list[str]:
    """Op names and extern function names called by a Relax function, in order."""
    out = []
    for b in bindings(func):
        v = b.value
        if isinstance(v, tvm.ir.expr.Call):
            name = str(v.op.name)
            if name in ("relax.call_dps_packed", "relax.call_pure_packed"):
                name += ":" + str(v.args[0].global_symbol)
            out.append(name)
    return out


def assert_matches(got, expected, rtol=1e-5, atol=1e-5):
    c = compare(got, expected, rtol, atol)  # atol relative to the largest expected magnitude
    assert c.ok, c.mismatch


def test_export_is_standard_relax_with_disco_collectives():
    mod = to_relax(lowered(MLP))
    relax.analysis.well_formed(mod)
    main = mod["main"]
    names = callees(main)
    # the hidden dim (512) is cut over num_workers: at a count that does not divide it the last block is
    # padded, so the contraction over it first fills the padding of both operands with zeros (R.mask_tail)
    assert [n for n in names if n in ("relax.matmul", "relax.nn.gelu", "relax.where")] == [
        "relax.matmul",
        "relax.nn.gelu",
        "relax.where",
        "relax.where",
        "relax.matmul",
    ]
    assert names[0] == "relax.call_pure_packed:runtime.disco.worker_id"
    assert names[-1] == "relax.call_dps_packed:runtime.disco.allreduce"
    # the symbolic size is a shape parameter ahead of the tensors; shapes are formulas in it
    assert [p.name for p in main.params] == ["size_num_workers", "x", "w1", "w2"]
    (n,) = main.params[0].ty.values
    assert isinstance(n, tirx.Var) and n.name == "num_workers"
    split = main.params[2].ty.shape.values[1]
    assert tvm.sym.Analyzer().can_prove_equal(split, tirx.floordiv(127, n) + 1)  # a block: ceil(128 / n)


def test_bind_symbolic_vars_specializes_inside_tvm():
    mod = to_relax(lowered(MLP))
    bound = relax.transform.BindSymbolicVars({"num_workers": 4})(mod)
    relax.analysis.well_formed(bound)
    w1 = bound["main"].params[2].ty
    assert [int(d) for d in w1.shape.values] == [64, 32]
    layout = bound[DISCO_LAYOUT_FUNC]
    assert [int(v) for v in layout.body.body.values] == [4, 1]


def test_worker_id_comes_from_disco_and_collectives_are_composed():
    mod = to_relax(lowered(KITCHEN_SINK))
    relax.analysis.well_formed(mod)
    names = callees(mod["main"])
    assert names[0] == "relax.call_pure_packed:runtime.disco.worker_id"
    # Disco has allreduce and allgather; reduce-scatter and all-to-all are composed from them
    assert names.count("relax.call_dps_packed:runtime.disco.allreduce") == 1
    assert names.count("relax.call_dps_packed:runtime.disco.allgather") == 3
    assert not any("reduce_scatter" in n or "all_to_all" in n for n in names)
    assert all(n.startswith("relax.") for n in names)


@pytest.mark.parametrize("text", [MLP, KITCHEN_SINK], ids=["mlp", "kitchen_sink"])
def test_tvm_single_device_passes_on_the_symbolic_module_then_specialize_build_and_run(text):
    """The seed discussion's flow: TVM's passes once on the symbolic module, then bind and build per count.

    Two builds: the optimized module still symbolic (it builds, and runs at every count with
    num_workers passed at run time), and bound to one count (BindSymbolicVars after the passes)."""
    mod = distir.parse(text)
    local = distribute_pipeline()(mod)
    exported = to_relax(local)
    optimized = tvm.transform.Sequential(TVM_SINGLE_DEVICE_PASSES)(exported)
    relax.analysis.well_formed(optimized)
    fused = [gv.name_hint for gv in optimized.get_global_vars() if gv.name_hint.startswith("fused_")]
    assert fused, "FuseOps should group some of the legalized kernels"
    inputs = random_inputs(mod, seed=1, int_high=64)
    expected = run(mod, *inputs)
    symbolic = tvm.compile(optimized, target=default_target())
    for w in (1, 2, 4):
        assert_matches(run_disco(symbolic, local, *inputs, num_workers=w, seed=w), expected)
    bound = tvm.compile(relax.transform.BindSymbolicVars({"num_workers": 3})(optimized), target=default_target())
    assert_matches(run_disco(bound, local, *inputs, num_workers=3, seed=3), expected)


def test_every_local_view_op_has_a_relax_form():
    local_ops = {name for name in all_ops() if not name.startswith("dist.")}
    assert local_ops <= SUPPORTED_OPS, sorted(local_ops - SUPPORTED_OPS)


def test_unknown_op_is_an_error_naming_it():
    op = OpDef(name="custom.scale", params=(Param("x", "tensor"),), infer=lambda types, attrs: types[0])
    x = Var("x", TensorType((4,), "float32"))
    y = Var("y", TensorType((4,), "float32"))
    mod = IRModule({"main": Function("main", (x,), (Block((Binding(y, Call(op, (x,))),)),), y)})
    with pytest.raises(TvmExportError, match=r"binding 'y' \(R.custom.scale\): R.custom.scale has no TVM Relax form"):
        to_relax(mod)


def test_global_view_module_is_an_error_saying_what_to_run():
    with pytest.raises(TvmExportError, match="parameter 'x' is a distributed tensor; run the distribute pipeline"):
        to_relax(distir.parse(MLP))


def test_take_mode_relax_lacks_is_an_error():
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(t: R.Tensor((8, 4), "float32"), i: R.Tensor((3,), "int64")):
        with R.dataflow():
            y = R.take(t, i, axis=0, mode="nan")
            R.output(y)
        return y
'''
    with pytest.raises(TvmExportError, match='Relax\'s take has no mode "nan"'):
        to_relax(distir.parse(text))


def test_specialized_module_exports_without_size_parameters():
    from distir.transform.specialize import specialize

    local = specialize(lowered(MLP), {"num_workers": 2})
    mod = to_relax(local)
    assert [p.name for p in mod["main"].params] == ["x", "w1", "w2"]
    assert [p.name for p in mod[DISCO_LAYOUT_FUNC].params] == []
    x, w1, w2 = (np.random.default_rng(0).standard_normal(s).astype("float32") for s in ((32, 64), (64, 128), (128, 64)))
    got = run_disco(specialize_and_build(mod, {}), local, x, w1, w2, num_workers=2)
    assert_matches(got, run(distir.parse(MLP), x, w1, w2))
