"""The redistribution steps: what each one does to a placement, and what it costs.

A step acts on ONE mesh axis. With ``L`` the bytes a worker holds before the step and
``n`` the size of the mesh axis, the bytes each worker sends (ring algorithms) are:

=================  ===============  =========================
step               placement change bytes sent per worker
=================  ===============  =========================
all_gather         S[d] -> R        (n - 1) * L
all_reduce         P[op] -> R       2 * (n - 1) * L / n
reduce_scatter     P[op] -> S[d]    (n - 1) * L / n
all_to_all         S[d] -> S[e]     (n - 1) * L / n
local_shard        R -> S[d]        0   (worker-indexed slice)
local_partial      R -> P[op]       0   (sum: non-root workers hold zeros)
=================  ===============  =========================

A tensor dim sharded over several mesh axes is split major-first in mesh-axis order,
so a step may only remove or add the innermost (highest) mesh axis of a dim: anything
else would leave a worker with non-contiguous pieces.
"""

from __future__ import annotations

from fractions import Fraction

from . import sym
from .placement import Partial, Placement, PlacementError, Replicate, Shard
from .sym import Dim

STEPS = ("all_gather", "all_reduce", "reduce_scatter", "all_to_all", "local_shard", "local_partial")
COLLECTIVES = ("all_gather", "all_reduce", "reduce_scatter", "all_to_all")


def _is_one(size) -> bool:
    return isinstance(size, int) and size == 1


def _innermost(placement: Placement, dim: int, axis: int, mesh_shape=None) -> bool:
    """True when no mesh axis after ``axis`` shards ``dim`` (so ``axis`` may add or drop it).

    Axes of size 1 do not count: cutting a dim into one piece changes no block, so a step on
    such an axis, or past one, leaves every worker's block contiguous."""
    if mesh_shape is not None and _is_one(mesh_shape[axis]):
        return True
    axes = [a for a in placement.mesh_axes_of(dim) if a != axis]
    if mesh_shape is not None:
        axes = [a for a in axes if not _is_one(mesh_shape[a])]
    return all(a < axis for a in axes)


def apply_step(
    kind: str, placement: Placement, axis: int, dim: int | None = None, op: str | None = None, mesh_shape=None
) -> Placement:
    """The placement after ``kind`` on mesh ``axis``; PlacementError if the step does not apply.

    ``mesh_shape`` (the mesh's sizes, when known) lets steps on or past axes of size 1 ignore
    the nesting order (see :func:`_innermost`)."""
    if not 0 <= axis < len(placement):
        raise PlacementError(f"{kind}: mesh axis {axis} is out of range for placement \"{placement}\"")
    spec = placement[axis]
    ms = mesh_shape
    where = f"{kind} on mesh axis {axis} of \"{placement}\""
    if kind == "all_gather":
        if not isinstance(spec, Shard):
            raise PlacementError(f"{where}: needs S[d] on that axis, found {spec}")
        if not _innermost(placement, spec.dim, axis, ms):
            raise PlacementError(f"{where}: dim {spec.dim} is also sharded on a later mesh axis; gather that one first")
        return placement.replace(axis, Replicate())
    if kind == "all_reduce":
        if not isinstance(spec, Partial):
            raise PlacementError(f"{where}: needs P on that axis, found {spec}")
        return placement.replace(axis, Replicate())
    if kind == "reduce_scatter":
        if not isinstance(spec, Partial):
            raise PlacementError(f"{where}: needs P on that axis, found {spec}")
        if dim is None or not _innermost(placement, dim, axis, ms):
            raise PlacementError(f"{where}: dim {dim} is already sharded on a later mesh axis")
        return placement.replace(axis, Shard(dim))
    if kind == "all_to_all":
        if not isinstance(spec, Shard):
            raise PlacementError(f"{where}: needs S[d] on that axis, found {spec}")
        if dim is None or dim == spec.dim:
            raise PlacementError(f"{where}: needs a different target dim, got {dim}")
        if not _innermost(placement, spec.dim, axis, ms) or not _innermost(placement, dim, axis, ms):
            raise PlacementError(f"{where}: the mesh axis is not the innermost for dim {spec.dim} or dim {dim}")
        return placement.replace(axis, Shard(dim))
    if kind == "local_shard":
        if not isinstance(spec, Replicate):
            raise PlacementError(f"{where}: needs R on that axis, found {spec}")
        if dim is None or not _innermost(placement, dim, axis, ms):
            raise PlacementError(f"{where}: dim {dim} is already sharded on a later mesh axis")
        return placement.replace(axis, Shard(dim))
    if kind == "local_partial":
        if not isinstance(spec, Replicate):
            raise PlacementError(f"{where}: needs R on that axis, found {spec}")
        return placement.replace(axis, Partial(op or "sum"))
    raise PlacementError(f"unknown redistribution step '{kind}'")


def cost_factor(kind: str, n: int) -> Fraction:
    """Bytes sent per worker by ``kind`` on an axis of size ``n``, per byte held before the step."""
    if kind == "all_gather":
        return Fraction(n - 1)
    if kind == "all_reduce":
        return Fraction(2 * (n - 1), n)
    if kind in ("reduce_scatter", "all_to_all"):
        return Fraction(n - 1, n)
    return Fraction(0)


def cost_formula(kind: str, n: Dim, local_bytes: Dim) -> Dim:
    """The same cost as a symbolic formula (exact when ``n`` divides the bytes held)."""
    if kind == "all_gather":
        return sym.mul(sym.sub(n, 1), local_bytes)
    if kind == "all_reduce":
        return sym.floordiv(sym.mul(sym.mul(2, sym.sub(n, 1)), local_bytes), n)
    if kind in ("reduce_scatter", "all_to_all"):
        return sym.floordiv(sym.mul(sym.sub(n, 1), local_bytes), n)
    return 0
