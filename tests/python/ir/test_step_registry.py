"""A kind of redistribution step added through its one declaration (distir.ir.steps) alone:
the planner chooses it, lowering writes its local op, the simulator and Disco run it."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.ir import sym
from distir.ir.expr import Call
from distir.ir.layout import WORKER_ID, coord_expr
from distir.ir.op import Param, get_op
from distir.ir.placement import Partial, Placement, PlacementError, Shard
from distir.ir.steps import StepKind, all_steps, get_step, register_step, unregister_step
from distir.ir.types import TensorType
from distir.runtime.spmd import SpmdStats, run_spmd
from distir.transform import get_pass
from distir.transform.redistribute_plan import plan_redistribute
from distir.transform.specialize import specialize

NAME = "shard_to_partial"


def _apply(p: Placement, axis, dim, op, mesh_shape) -> Placement:
    spec = p[axis]
    if not isinstance(spec, Shard) or len(p.mesh_axes_of(spec.dim)) > 1:
        raise PlacementError(f"{NAME}: needs the only S[d] of its dim on mesh axis {axis}, found \"{p}\"")
    return p.replace(axis, Partial("sum"))


def _infer(types, attrs):
    x = types[0]
    shape = list(x.shape)
    shape[attrs["axis"]] = attrs["extent"]
    return TensorType(tuple(shape), x.dtype)


def _lower(call: Call, x) -> Call:
    src = call.args[0].type
    axis = call.attrs["mesh_axis"]
    dim = src.placement[axis].dim
    attrs = {"num_workers": src.mesh.shape[axis], "axis": dim, "extent": src.shape[dim], "device_mesh": src.mesh,
             "mesh_axis": axis}
    return Call(get_op(f"ccl.{NAME}"), (x,), attrs, call.span)


def _numpy(xs, attrs, ctx):
    """Each worker puts its block in place in a tensor of zeros: their sum is the whole tensor."""
    x, axis, n = xs[0], attrs["axis"], ctx.dim(attrs["num_workers"])
    coord = ctx.dim(coord_expr(attrs["device_mesh"], attrs["mesh_axis"], ctx.worker_var))
    shape = list(x.shape)
    shape[axis] *= n
    out = np.zeros(shape, x.dtype)
    index = [slice(None)] * x.ndim
    index[axis] = slice(coord * x.shape[axis], (coord + 1) * x.shape[axis])
    out[tuple(index)] = x
    return np.take(out, np.arange(ctx.dim(attrs["extent"])), axis=axis)  # the padding of the last blocks dropped


def _tvm(ex, call):
    """(n, *block) = one-hot(coordinate) x block, then the n pieces merged along the axis."""
    from tvm import relax

    attrs = call.op.full_attrs(call.attrs)
    x, xt = ex.value(call.args[0]), call.args[0].type
    n, axis = attrs["num_workers"], attrs["axis"]
    coord = coord_expr(attrs["device_mesh"], attrs["mesh_axis"], sym.var(WORKER_ID))
    which = ex.emit(relax.op.arange(0, ex.dim(n), 1, "int64"))
    onehot = ex.emit(relax.op.astype(relax.op.equal(which, ex.scalar(coord)), xt.dtype))
    onehot = ex.emit(relax.op.reshape(onehot, relax.ShapeExpr([ex.dim(n)] + [1] * xt.ndim)))
    pieces = ex.emit(relax.op.multiply(onehot, relax.op.expand_dims(x, 0)))
    order = list(range(1, axis + 1)) + [0] + list(range(axis + 1, xt.ndim + 1))
    pieces = ex.emit(relax.op.permute_dims(pieces, order))
    whole = list(xt.shape)
    whole[axis] = sym.mul(n, xt.shape[axis])
    pieces = ex.emit(relax.op.reshape(pieces, relax.ShapeExpr(ex.dims(whole))))
    return relax.op.strided_slice(pieces, axes=[axis], begin=[0], end=[ex.dim(attrs["extent"])], assume_inbound=True)


TOY = StepKind(
    name=NAME,
    change="S[d] -> P",
    doc="each worker pads its block with zeros to the whole dim: the sum of the pieces is the value",
    apply=_apply,
    sent=lambda n, before, after, piece: (0, 1),
    lower=_lower,
    local_params=(Param("num_workers", "dim"), Param("axis", "int"), Param("extent", "dim"), Param("device_mesh", "mesh"),
                  Param("mesh_axis", "int")),
    local_infer=_infer,
    local_numpy=_numpy,
    tvm=_tvm,
)

TEXT = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(x: R.DTensor((8, 6), "float32", "mesh[0]", "S[0]")):
        y = R.dist.redistribute(x, device_mesh="mesh[0]", placement="P")
        return y
"""


@pytest.fixture
def toy_step():
    register_step(TOY)
    yield TOY
    unregister_step(NAME)


def test_a_step_kind_declared_once_is_planned_lowered_simulated_and_exported(toy_step):
    assert NAME in all_steps() and get_op(f"dist.{NAME}") is toy_step.global_op
    mesh = distir.parse(TEXT).meshes()[0]
    # without it S[0] -> P all-gathers then makes the value partial; with it, one free step
    assert [s.kind for s in plan_redistribute(mesh, 2, Placement.parse("S[0]"), Placement.parse("P"))] == [NAME]
    mod = distir.parse(TEXT)
    legal = get_pass("legalize-redistribute")(mod)
    assert [b.value.op.name for b in legal["main"].bindings()] == [f"dist.{NAME}"]
    local = get_pass("lower-global-view-to-local-view")(legal)  # the result stays partial, as declared
    assert [b.value.op.name for b in local["main"].bindings()] == [f"ccl.{NAME}"]
    x = np.arange(48, dtype="float32").reshape(8, 6)
    for w in (1, 2, 4):
        stats = SpmdStats()
        np.testing.assert_array_equal(run_spmd(specialize(local, {"num_workers": w}), x, stats=stats), x)
        assert stats.total_bytes == 0

    from distir.driver import run_disco
    from distir.tvm import specialize_and_build, to_relax

    exported = to_relax(local)
    for w in (1, 2, 4):
        got = run_disco(specialize_and_build(exported, {"num_workers": w}), local, x, num_workers=w)
        np.testing.assert_array_equal(got, x)


def test_removing_the_kind_restores_the_plans(toy_step):
    mesh = distir.parse(TEXT).meshes()[0]
    with_toy = plan_redistribute(mesh, 2, Placement.parse("S[0]"), Placement.parse("P"))
    unregister_step(NAME)
    try:
        without = plan_redistribute(mesh, 2, Placement.parse("S[0]"), Placement.parse("P"))
        assert [s.kind for s in with_toy] == [NAME]
        assert [s.kind for s in without] == ["all_gather", "local_partial"]
        assert get_op(f"dist.{NAME}") is None
    finally:
        register_step(TOY)


def test_every_built_in_kind_has_one_spelling():
    for name, kind in all_steps().items():
        assert get_step(name) is kind
        if kind.global_op is not None:
            assert kind.global_op.name == f"dist.{name}" and kind.global_op.step is kind
        if kind.local_op is not None:
            assert kind.local_op.name == f"ccl.{name}" and kind.local_op.step is kind
