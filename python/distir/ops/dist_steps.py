"""Global-view redistribution steps: what legalize-redistribute writes for a redistribute.

Each step changes the placement on one mesh axis (see distir.ir.transitions for the
table and costs); ``R.dist.transfer`` moves a value to another mesh (see
distir.ir.transfer). Their value in the global view is the input's value: they only move
data between workers, which the local view makes explicit.
"""

from __future__ import annotations

from ..errors import TypeInferenceError
from ..ir.placement import PlacementError
from ..ir.transfer import check_transfer
from ..ir.transitions import apply_step
from ..ir.types import DTensorType
from ._common import OpDef, Param, register_op

_DOCS = {
    "all_gather": "S[d] -> R on one mesh axis (all-gather).",
    "all_reduce": "P -> R on one mesh axis (all-reduce by the partial's reduction).",
    "reduce_scatter": "P -> S[dim] on one mesh axis (reduce-scatter).",
    "all_to_all": "S[d] -> S[dim] on one mesh axis (all-to-all).",
    "local_shard": "R -> S[dim] on one mesh axis: each worker slices its own block, no communication.",
    "local_partial": "R -> P[op] on one mesh axis: no communication (for sum, non-root workers hold zeros).",
}


def _infer(kind):
    def infer(types, attrs):
        x = types[0]
        if not isinstance(x, DTensorType):
            raise TypeInferenceError(f"R.dist.{kind}: input must be a DTensor, got {x}")
        axis = attrs["mesh_axis"]
        if not 0 <= axis < x.mesh.ndim:
            raise TypeInferenceError(f"R.dist.{kind}: mesh_axis {axis} is out of range for a {x.mesh.ndim}-D mesh")
        dim = attrs.get("dim")
        if dim is not None and not 0 <= dim < x.ndim:
            raise TypeInferenceError(f"R.dist.{kind}: dim {dim} is out of range for a tensor of rank {x.ndim}")
        try:
            new = apply_step(kind, x.placement, axis, dim, attrs.get("op_type"), x.mesh.shape)
        except PlacementError as err:
            raise TypeInferenceError(f"R.dist.{kind}: {err}") from None
        return x.with_placement(new)

    return infer


def _params(kind):
    ps = [Param("x", "tensor"), Param("mesh_axis", "int")]
    if kind in ("reduce_scatter", "all_to_all", "local_shard"):
        ps.append(Param("dim", "int"))
    if kind == "local_partial":
        ps.append(Param("op_type", "choice", "sum", choices=("sum", "max", "min", "avg")))
    return tuple(ps)


for _kind, _doc in _DOCS.items():
    register_op(
        OpDef(
            name=f"dist.{_kind}",
            params=_params(_kind),
            infer=_infer(_kind),
            numpy=lambda xs, attrs, ctx: xs[0],
            dist_aware=True,
            doc=_doc,
            tvm_compatible=False,
        )
    )


# ------------------------------------------------------------------ between meshes


def _transfer_infer(types, attrs):
    x = types[0]
    if not isinstance(x, DTensorType):
        raise TypeInferenceError(f"R.dist.transfer: input must be a DTensor, got {x}")
    mesh, placement = attrs["device_mesh"], attrs["placement"]
    try:
        placement.validate(mesh.ndim, x.ndim)
        check_transfer(x.mesh, x.placement, mesh, placement)
    except PlacementError as err:
        raise TypeInferenceError(f"R.dist.transfer: {err}") from None
    return DTensorType(x.shape, x.dtype, mesh, placement)


register_op(
    OpDef(
        name="dist.transfer",
        params=(Param("x", "tensor"), Param("device_mesh", "mesh"), Param("placement", "placement")),
        infer=_transfer_infer,
        numpy=lambda xs, attrs, ctx: xs[0],
        dist_aware=True,
        doc="Move a DTensor to another mesh (pipeline stages), laid out there as `placement`: point-to-point "
        "pieces, each target worker receiving its block once; a partial value only as an aligned copy "
        "between meshes of the same shape.",
        tvm_compatible=False,
    )
)
