"""Import TVM DistIR: TVM scripts (parsed by TVM) become distir modules that run and distribute."""

from __future__ import annotations

import numpy as np
import pytest
import tvm

import distir
from distir.driver import run_disco
from distir.ir import Binding, Block, Call, DTensorType, IRModule, Placement, Range, ShapeExpr, assert_structural_equal
from distir.runtime import run
from distir.runtime.spmd import run_spmd
from distir.transform.pipelines import distribute_pipeline
from distir.transform.specialize import specialize
from distir.tvm import TvmImportError, from_relax, specialize_and_build, to_relax
from test_script_roundtrip import CORPUS
from test_script_tvm import STATIC_2D, TVM_SUBSET

# TVM's own style (tests/python/relax/distributed): plain tensors and one sharding hint
MLP_HINTED = '''
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((2,), I.Range(0, 2))]})

    @R.function
    def main(x: R.Tensor((64, 128), "float32"), w1: R.Tensor((128, 128), "float32"), w2: R.Tensor((128, 128), "float32")) -> R.Tensor((64, 128), "float32"):
        with R.dataflow():
            lv0 = R.matmul(x, w1)
            lv1 = R.nn.gelu(lv0)
            lv2 = R.dist.annotate_sharding(lv1, device_mesh="mesh[0]", placement="S[1]")
            lv3 = R.matmul(lv2, w2)
            R.output(lv3)
        return lv3
'''

# Typed DistIR: the second matmul contracts a sharded dim; TVM types its result "R"
MLP_TYPED = '''
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((4,), I.Range(0, 4))]})

    @R.function
    def main(x: R.DTensor((64, 128), "float32", "mesh[0]", "R"), w1: R.DTensor((128, 256), "float32", "mesh[0]", "S[1]"), w2: R.DTensor((256, 128), "float32", "mesh[0]", "S[0]")) -> R.DTensor((64, 128), "float32", "mesh[0]", "R"):
        with R.dataflow():
            h = R.matmul(x, w1)
            a = R.nn.gelu(h)
            y = R.matmul(a, w2)
            z = R.dist.redistribute_replica_to_shard(y, num_workers=4, axis=0)
            o = R.dist.redistribute(z, device_mesh="mesh[0]", placement="R")
            R.output(o)
        return o
'''

# Pipeline parallel: the first layer on devices 0-1, the second on devices 2-3
MLP_PIPELINE = '''
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((2,), I.Range(0, 2)), R.device_mesh((2,), I.Range(2, 4))]})

    @R.function
    def main(x: R.DTensor((64, 128), "float32", "mesh[0]", "R"), w1: R.DTensor((128, 256), "float32", "mesh[0]", "S[1]"), w2: R.DTensor((256, 128), "float32", "mesh[1]", "S[0]")) -> R.DTensor((64, 128), "float32", "mesh[1]", "R"):
        with R.dataflow():
            h = R.matmul(x, w1)
            a = R.nn.gelu(h)
            a1 = R.dist.redistribute(a, device_mesh="mesh[1]", placement="S[1]")
            y = R.matmul(a1, w2)
            R.output(y)
        return y
'''


def tvm_module(text: str) -> tvm.IRModule:
    return tvm.script.from_source(text)


def numpy_mlp(x, w1, w2):
    from math import erf

    h = x.astype(np.float64) @ w1
    h = 0.5 * h * (1 + np.vectorize(erf)(h / np.sqrt(2)))
    return h @ w2


def mlp_inputs(seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) / np.sqrt(s[0])).astype("float32") for s in ((64, 128), (128, 128), (128, 128))]


def test_hinted_mlp_imports_distributes_and_runs_on_disco():
    mod = from_relax(tvm_module(MLP_HINTED))
    (mesh,) = mod.meshes()
    assert mesh.shape == (2,) and mesh.device_ids == Range(0, 2)
    hint = [b for b in mod["main"].bindings() if b.value.op.name == "dist.annotate_sharding"]
    assert [str(b.value.attrs["placement"]) for b in hint] == ["S[1]"]
    x, w1, w2 = inputs = mlp_inputs()
    expected = run(mod, *inputs)
    np.testing.assert_allclose(expected, numpy_mlp(x, w1, w2), rtol=1e-5, atol=1e-5)
    local = distribute_pipeline()(mod)
    np.testing.assert_allclose(run_spmd(specialize(local, {}), *inputs), expected, rtol=1e-5, atol=1e-5)
    built = specialize_and_build(to_relax(local), {})
    np.testing.assert_allclose(run_disco(built, local, *inputs, num_workers=2), expected, rtol=1e-5, atol=1e-5)


def test_typed_mlp_makes_tvm_implicit_allreduce_explicit():
    mod = from_relax(tvm_module(MLP_TYPED))
    bindings = {b.var.name: b for b in mod["main"].bindings()}
    # TVM types the contraction "R"; distir infers a partial sum and adds the redistribute TVM implies
    assert str(bindings["y_local"].var.type.placement) == "P"
    assert bindings["y"].value.op.name == "dist.redistribute"
    assert str(bindings["y"].var.type.placement) == "R"
    # redistribute_replica_to_shard is a redistribute to S[axis]
    assert bindings["z"].value.op.name == "dist.redistribute"
    assert bindings["z"].var.type.placement == Placement.parse("S[0]")
    rng = np.random.default_rng(1)
    x, w1, w2 = (rng.standard_normal(s).astype("float32") for s in ((64, 128), (128, 256), (256, 128)))
    expected = numpy_mlp(x, w1, w2)
    np.testing.assert_allclose(run(mod, x, w1, w2), expected, rtol=1e-5, atol=1e-3)
    local = distribute_pipeline()(mod)
    np.testing.assert_allclose(run_spmd(specialize(local, {}), x, w1, w2), expected, rtol=1e-5, atol=1e-3)


def test_pipeline_parallel_mlp_imports_with_both_meshes():
    mod = from_relax(tvm_module(MLP_PIPELINE))
    assert [m.device_ids for m in mod.meshes()] == [Range(0, 2), Range(2, 4)]
    main = mod["main"]
    a1 = next(b for b in main.bindings() if b.var.name == "a1")
    assert a1.value.op.name == "dist.redistribute"
    assert a1.var.type.mesh == mod.meshes()[1] and main.params[0].type.mesh == mod.meshes()[0]
    assert isinstance(main.result.type, DTensorType) and str(main.result.type.placement) == "R"
    rng = np.random.default_rng(2)
    x, w1, w2 = (rng.standard_normal(s).astype("float32") for s in ((64, 128), (128, 256), (256, 128)))
    np.testing.assert_allclose(run(mod, x, w1, w2), numpy_mlp(x, w1, w2), rtol=1e-5, atol=1e-3)
    # the transfer between the stages legalizes, lowers and runs
    local = distribute_pipeline()(mod)
    expected = run(mod, x, w1, w2)
    np.testing.assert_allclose(run_spmd(local, x, w1, w2), expected, rtol=1e-5, atol=1e-3)
    built = specialize_and_build(to_relax(local), {})
    np.testing.assert_allclose(run_disco(built, local, x, w1, w2, num_workers=4), expected, rtol=1e-5, atol=1e-3)


def test_unknown_op_is_an_error_naming_it():
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((1, 3, 8, 8), "float32"), w: R.Tensor((3, 4, 3, 3), "float32")) -> R.Tensor((1, 4, 10, 10), "float32"):
        with R.dataflow():
            y = R.nn.conv2d_transpose(x, w)
            R.output(y)
        return y
'''
    with pytest.raises(TvmImportError, match=r"@main, binding 'y': TVM op relax.nn.conv2d_transpose \(from nn.Conv2DTranspose\) "
                       r"has no distir counterpart: a transposed convolution is not modelled; upsample with "
                       r"nn.op.interpolate and use nn.op.conv2d$"):
        from_relax(tvm_module(text))


def test_tir_functions_are_refused():
    text = '''
@I.ir_module
class Module:
    @T.prim_func
    def add_one(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
        for i in range(4):
            b[i] = a[i] + T.float32(1)
'''
    with pytest.raises(TvmImportError, match="@add_one is a PrimFunc; distir imports Relax functions only"):
        from_relax(tvm_module(text))


def tvm_normal_form(mod: IRModule) -> IRModule:
    """What TVM keeps of a module: every function's return type (TVM always records one), no
    global_symbol attribute spelling out the function's own name (TVM's default), no empty
    blocks, adjacent blocks of one kind merged, axis attributes as lists (take's axis is one
    int in TVM), and reshape targets with -1 resolved."""
    funcs = {}
    for name, f in mod.functions.items():
        attrs = {k: v for k, v in f.attrs.items() if not (k == "global_symbol" and v == name)}
        blocks: list[Block] = []
        for block in f.blocks:
            block = Block(tuple(_axes_as_lists(b) for b in block.bindings), block.is_dataflow, block.outputs)
            if not block.bindings:
                continue
            if blocks and blocks[-1].is_dataflow == block.is_dataflow:
                prev = blocks.pop()
                outputs = None if prev.outputs is None else (*prev.outputs, *(block.outputs or ()))
                block = Block(prev.bindings + block.bindings, block.is_dataflow, outputs)
            blocks.append(block)
        funcs[name] = f.replace(ret_type=f.ret_type or f.result.type, attrs=attrs, blocks=tuple(blocks))
    return mod.replace(functions=funcs)


def _axes_as_lists(b: Binding) -> Binding:
    v = b.value
    if not isinstance(v, Call):
        return b
    attrs = dict(v.attrs)
    for p in v.op.attr_params:
        if p.kind == "axes" and isinstance(attrs.get(p.name), int) and v.op.name != "take":
            attrs[p.name] = [attrs[p.name]]
    args = v.args
    if v.op.name == "reshape":
        args = (args[0], ShapeExpr(b.var.type.shape))
    return Binding(b.var, Call(v.op, args, attrs, v.span), b.span)


@pytest.mark.parametrize("name", [*TVM_SUBSET, "static_2d"])
def test_static_modules_round_trip_through_tvm(name):
    mod = distir.parse(STATIC_2D if name == "static_2d" else CORPUS[name])
    back = from_relax(tvm_module(mod.script()))
    assert_structural_equal(back, tvm_normal_form(mod))



NORM_FLAGS = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4, 8), "float32"), g: R.Tensor((8,), "float32"), b: R.Tensor((8,), "float32")) -> R.Tensor((4, 8), "float32"):
        with R.dataflow():
            y = R.nn.layer_norm(x, g, b, axes=[-1], epsilon=1e-5, center=CENTER, scale=SCALE)
            R.output(y)
        return y
'''


@pytest.mark.parametrize("center, scale, flags", [(False, True, "center=False"), (True, False, "scale=False"),
                                                  (False, False, "center=False and scale=False")])
def test_norm_flags_tvm_ignores_are_refused(center, scale, flags):
    """TVM 0.27 applies gamma and beta whatever center/scale say (checked here against numpy, so the
    refusal has its reason); distir honours the flags, so importing would change the number."""
    from tvm_build import one_device_vm

    text = NORM_FLAGS.replace("CENTER", str(center)).replace("SCALE", str(scale))
    tvm_mod = tvm.script.from_source(text)
    rng = np.random.default_rng(0)
    x, g, b = (rng.standard_normal(s).astype("float32") for s in ((4, 8), (8,), (8,)))
    got = one_device_vm(tvm_mod)["main"](*(tvm.runtime.tensor(a) for a in (x, g, b))).numpy()
    norm = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(got, norm * g + b, rtol=1e-4, atol=1e-4)  # TVM: both applied
    with pytest.raises(TvmImportError, match=rf"@main, binding 'y': relax.nn.layer_norm has {flags}, which TVM 0.27 ignores"):
        from_relax(tvm_mod)


def test_group_norm_scale_off_is_refused_and_flags_on_import():
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((2, 4, 6), "float32"), g: R.Tensor((4,), "float32"), b: R.Tensor((4,), "float32")) -> R.Tensor((2, 4, 6), "float32"):
        with R.dataflow():
            y = R.nn.group_norm(x, g, b, num_groups=2, channel_axis=1, axes=[2], scale=SCALE)
            R.output(y)
        return y
'''
    with pytest.raises(TvmImportError, match=r"binding 'y': relax.nn.group_norm has scale=False"):
        from_relax(tvm.script.from_source(text.replace("SCALE", "False")))
    mod = from_relax(tvm.script.from_source(text.replace("SCALE", "True")))
    assert "group_norm" in mod.script()
