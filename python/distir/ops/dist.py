"""Global-view distribution ops: sharding hints and redistribute."""

from __future__ import annotations

from ..errors import TypeInferenceError
from ..ir.combine import check_partial
from ..ir.placement import Placement, PlacementError
from ..ir.types import DTensorType, TensorType
from ._common import OpDef, Param, register_op


def _check_placement(placement: Placement, mesh, ndim: int, op: str, shape=None, dtype=None) -> None:
    try:
        placement.validate(mesh.ndim, ndim, shape=shape)
        if dtype is not None:
            check_partial(placement, dtype, "the target layout")
    except PlacementError as err:
        raise TypeInferenceError(f"R.{op}: {err}") from None


def _annotate_infer(types, attrs):
    x = types[0]
    if not isinstance(x, (TensorType, DTensorType)):
        raise TypeInferenceError(f"R.dist.annotate_sharding: input must be a tensor, got {x}")
    _check_placement(attrs["placement"], attrs["device_mesh"], x.ndim, "dist.annotate_sharding", x.shape, x.dtype)
    return x


register_op(
    OpDef(
        name="dist.annotate_sharding",
        params=(Param("x", "tensor"), Param("device_mesh", "mesh"), Param("placement", "placement")),
        infer=_annotate_infer,
        numpy=lambda xs, attrs, ctx: xs[0],
        dist_aware=True,
        doc="A hint for sharding propagation: lay `x` out on the mesh like this. Its value is `x`.",
    )
)


def _redistribute_infer(types, attrs):
    x = types[0]
    if not isinstance(x, DTensorType):
        raise TypeInferenceError(
            f"R.dist.redistribute: input must be a DTensor (a tensor laid out on a mesh), got {x}; "
            "use R.dist.annotate_sharding on plain tensors"
        )
    _check_placement(attrs["placement"], attrs["device_mesh"], x.ndim, "dist.redistribute", x.shape, x.dtype)
    return DTensorType(x.shape, x.dtype, attrs["device_mesh"], attrs["placement"])


register_op(
    OpDef(
        name="dist.redistribute",
        params=(Param("x", "tensor"), Param("device_mesh", "mesh"), Param("placement", "placement")),
        infer=_redistribute_infer,
        numpy=lambda xs, attrs, ctx: xs[0],
        dist_aware=True,
        doc="Change how a DTensor is laid out; legalize-redistribute turns it into collectives.",
    )
)


def _replicate_infer(types, attrs):
    x = types[0]
    if not isinstance(x, TensorType):
        raise TypeInferenceError(
            f"R.dist.replicate: input must be a plain tensor (the same on every worker), got {x}; "
            "use R.dist.redistribute to change a DTensor's layout"
        )
    mesh = attrs["device_mesh"]
    return DTensorType(x.shape, x.dtype, mesh, Placement.replicated(mesh.ndim))


register_op(
    OpDef(
        name="dist.replicate",
        params=(Param("x", "tensor"), Param("device_mesh", "mesh")),
        infer=_replicate_infer,
        numpy=lambda xs, attrs, ctx: xs[0],
        dist_aware=True,
        doc="A plain tensor (computed from constants: the same on every worker) as a replicated DTensor on the "
        "mesh, so it can be redistributed like any DTensor. No communication; the local view drops it.",
    )
)
