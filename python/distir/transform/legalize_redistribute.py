"""LegalizeRedistribute: every ``R.dist.redistribute`` becomes its cheapest steps.

Each step is a global-view op ``R.dist.<kind>`` (one per kind of :mod:`distir.ir.steps`:
``all_gather``, ``all_reduce``, ``reduce_scatter``, ``all_to_all``, ``local_shard``,
``local_partial`` ...) acting on one mesh axis and typed with DTensors, so the result stays
printable and checkable. The plan comes from
:mod:`distir.transform.redistribute_plan`; a redistribute to the same layout becomes the
value itself. A redistribute onto another mesh (pipeline stages) becomes steps on the
source mesh, one ``R.dist.transfer`` and steps on the target mesh, chosen together by
bytes sent (:func:`~distir.transform.redistribute_plan.plan_cross_mesh`). The pass is an
epilogue: run it again after any pass that adds redistributes; on a legalized module it
changes nothing.
"""

from __future__ import annotations

from typing import ClassVar

from ..errors import DiagnosticError, DistirError
from ..ir.expr import Binding, Call, Function, IRModule, Var
from ..ir.op import get_op
from ..ir.steps import get_step
from ..ir.types import DTensorType
from .pass_infra import FunctionPass, PassContext, register_pass
from .redistribute_plan import Transfer, plan_cross_mesh, plan_redistribute
from .rewrite import Env, map_bindings

__all__ = ["LegalizeRedistribute"]


def _step_call(step, x: Var, target_mesh, span) -> Call:
    if isinstance(step, Transfer):
        op = get_step("transfer").global_op
        return Call(op, (x,), {"device_mesh": target_mesh, "placement": step.placement}, span)
    kind = step.step_kind
    attrs = {"mesh_axis": step.mesh_axis}
    if kind.takes_dim:
        attrs["dim"] = step.dim
    if kind.takes_op:
        attrs["op_type"] = step.op_type
    return Call(kind.global_op, (x,), attrs, span)


@register_pass
class LegalizeRedistribute(FunctionPass):
    """Rewrite each redistribute into per-mesh-axis collectives and local slices."""

    name: ClassVar[str] = "legalize-redistribute"

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        redistribute = get_op("dist.redistribute")

        def rewrite(b: Binding, env: Env):
            value = b.value
            if not (isinstance(value, Call) and value.op is redistribute):
                return None
            x = value.args[0]
            src = x.type
            if not isinstance(src, DTensorType):
                raise DiagnosticError(
                    f"R.dist.redistribute of '{b.var.name}': input must be a DTensor, got {src}", b.span
                )
            mesh, dst = value.attrs["device_mesh"], value.attrs["placement"]
            try:
                if mesh == src.mesh:
                    plan = plan_redistribute(mesh, src.ndim, src.placement, dst)
                else:
                    plan = plan_cross_mesh(src.mesh, src.placement, mesh, dst, src.ndim)
            except DistirError as err:
                raise DiagnosticError(
                    f"R.dist.redistribute of '{b.var.name}' from mesh {src.mesh.shape_str()} \"{src.placement}\" to "
                    f"mesh {mesh.shape_str()} \"{dst}\": {err}",
                    b.span,
                ) from None
            if not plan:
                env[b.var] = x
                return []
            out: list[Binding] = []
            cur = x
            for k, step in enumerate(plan):
                call = _step_call(step, cur, mesh, b.span)
                if k == len(plan) - 1:
                    var = b.var
                else:
                    var = Var(f"{b.var.name}_{k}", call.type, b.span)
                out.append(Binding(var, call, b.span))
                cur = var
            return out

        return map_bindings(func, rewrite)
