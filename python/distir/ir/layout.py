"""Where each piece of a DTensor lives: per-worker shapes, mesh coordinates, block offsets.

One place for the arithmetic that the lowering, the SPMD simulator, the cost model and
the analyses share. Mesh positions are row-major over the mesh shape; when several
mesh axes shard one tensor dim, the lower mesh axis is the major split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from . import sym
from .mesh import DeviceMesh
from .placement import Placement, Shard
from .sym import Dim
from .types import DTensorType, TensorType, dtype_bytes

WORKER_ID = "worker_id"  # the symbolic variable a worker's own device id is bound to at run time


def shard_count(mesh: DeviceMesh, placement: Placement, dim: int) -> Dim:
    """How many pieces tensor dim ``dim`` is cut into."""
    return sym.product(mesh.shape[i] for i in placement.mesh_axes_of(dim))


def local_shape(shape: Sequence[Dim], mesh: DeviceMesh, placement: Placement) -> tuple[Dim, ...]:
    """Per-worker shape: each sharded dim divided by the sizes of the mesh axes sharding it."""
    return tuple(sym.floordiv(d, shard_count(mesh, placement, i)) if placement.mesh_axes_of(i) else d for i, d in enumerate(shape))


def local_type(t: DTensorType) -> TensorType:
    return TensorType(local_shape(t.shape, t.mesh, t.placement), t.dtype)


def local_bytes(t: DTensorType) -> Dim:
    return sym.mul(sym.product(local_shape(t.shape, t.mesh, t.placement)), dtype_bytes(t.dtype))


def mesh_coords(position: int, mesh_shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major coordinates of the ``position``-th device of a mesh (concrete sizes)."""
    coords = []
    for size in reversed(mesh_shape):
        coords.append(position % size)
        position //= size
    return tuple(reversed(coords))


def coord_expr(mesh: DeviceMesh, mesh_axis: int, worker: Dim) -> Dim:
    """Symbolic coordinate along ``mesh_axis`` of the device whose global id is ``worker``."""
    ids = mesh.device_ids
    start: Dim = ids.start if hasattr(ids, "start") else (ids[0] if ids else 0)
    pos = sym.sub(worker, start)
    if mesh.ndim == 1:
        return pos
    stride = sym.product(mesh.shape[mesh_axis + 1 :])
    c = sym.floordiv(pos, stride) if not (isinstance(stride, int) and stride == 1) else pos
    if mesh_axis == 0:
        return c
    return sym.floormod(c, mesh.shape[mesh_axis])


def block_start_expr(mesh: DeviceMesh, placement: Placement, dim: int, local_extent: Dim, worker: Dim | None = None) -> Dim:
    """Symbolic global index where the running worker's block of tensor dim ``dim`` starts.

    ``local_extent`` is the per-worker size of that dim; ``worker`` defaults to the
    ``worker_id`` variable. 0 when the dim is not sharded. The symbolic twin of :func:`block_index`.
    """
    axes = placement.mesh_axes_of(dim)
    if not axes:
        return 0
    who = sym.var(WORKER_ID) if worker is None else worker
    index: Dim = 0
    for axis in axes:
        index = sym.add(sym.mul(index, mesh.shape[axis]), coord_expr(mesh, axis, who))
    return sym.mul(index, local_extent)


def block_index(placement: Placement, dim: int, coords: Sequence[int], mesh_shape: Sequence[int]) -> tuple[int, int]:
    """(index, count) of the block of tensor dim ``dim`` held at mesh ``coords``."""
    index, count = 0, 1
    for axis in placement.mesh_axes_of(dim):
        index = index * mesh_shape[axis] + coords[axis]
        count *= mesh_shape[axis]
    return index, count


def concrete_mesh_shape(mesh: DeviceMesh, values: Mapping[str, int] | None = None) -> tuple[int, ...]:
    return tuple(sym.evaluate(s, values or {}) for s in mesh.shape)


def is_shard(spec) -> bool:
    return isinstance(spec, Shard)


def mesh_groups(mesh: DeviceMesh, mesh_axis: int, values: Mapping[str, int] | None = None) -> list[list[int]]:
    """Device ids of each group of a collective along ``mesh_axis``, each in coordinate order."""
    shape = concrete_mesh_shape(mesh, values)
    devices = mesh.device_list(values)
    groups: dict[tuple, list[int]] = {}
    for pos, dev in enumerate(devices):
        coords = mesh_coords(pos, shape)
        key = coords[:mesh_axis] + coords[mesh_axis + 1 :]
        groups.setdefault(key, []).append(dev)
    return list(groups.values())
