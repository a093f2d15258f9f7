"""Which Disco session a local-view module needs, and how each collective maps onto it.

Disco runs one program on ``total`` workers (ids 0 .. total-1). Its collectives act on
all workers (``in_group=False``) or within the session's groups: ``num_groups``
contiguous blocks of ``total / num_groups`` workers (``in_group=True``). A distir
collective acts along one mesh axis; its groups of workers are:

- ``single``: the axis has one device, so the collective is the identity;
- ``global``: the axis spans every worker of the session in order;
- ``group``: contiguous, aligned blocks, which become the session's groups (one group
  size per module: the first such collective fixes it);
- ``gather``: anything else (a strided axis of a 2-D mesh, another group size). It is
  composed from a global all-gather plus a ``take`` of the worker's own group, which
  moves more data (see docs/tvm.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...ir import sym
from ...ir.expr import IRModule
from ...ir.layout import ids_are_contiguous, mesh_start
from ...ir.mesh import DeviceMesh, Range
from ...ir.sym import Dim


@dataclass(frozen=True)
class AxisGroups:
    """How the workers of one mesh axis are grouped in the session (see the module docstring)."""

    kind: str  # "single" | "global" | "group" | "gather"
    size: Dim  # workers per group (the mesh axis size)
    stride: Dim  # distance between consecutive members' positions in the mesh
    start: Dim  # first device id of the mesh


def mesh_stop(mesh: DeviceMesh) -> Dim:
    """One past the largest device id of the mesh."""
    ids = mesh.device_ids
    return ids.stop if isinstance(ids, Range) else max(ids) + 1


@dataclass
class SessionPlan:
    """The session a module needs: ``total`` workers, split into groups of ``group_size``."""

    total: Dim
    meshes: tuple[DeviceMesh, ...]
    group_size: Dim | None = None
    _cache: dict = field(default_factory=dict)

    @staticmethod
    def for_module(mod: IRModule) -> SessionPlan:
        """One worker per device id up to the largest: the mesh whose ids reach furthest, or, when
        which one that is depends on the sizes (a static mesh beside a symbolic one), their
        ``max``, which ``distir_disco_layout`` evaluates at the sizes it is given."""
        meshes = mod.meshes()
        if not meshes:
            return SessionPlan(1, ())
        stops = [mesh_stop(m) for m in meshes]
        sizes = {name for m in meshes for d in m.shape for name in sym.free_vars(d)}
        with sym.assume_positive(sorted(sizes)):  # a mesh axis holds at least one device
            largest = next((c for c in stops if all(sym.prove_ge(c, s) for s in stops)), None)
            if largest is None:
                largest = stops[0]
                for s in stops[1:]:
                    largest = sym.max_(largest, s)
        return SessionPlan(sym.normalize(largest), tuple(meshes))

    @property
    def num_groups(self) -> Dim:
        if self.group_size is None:
            return 1
        return sym.floordiv(self.total, self.group_size)

    def covers_all(self, mesh: DeviceMesh) -> bool:
        """True when the mesh holds every worker of the session."""
        return sym.equal(mesh_start(mesh), 0) and sym.equal(mesh.size, self.total) and ids_are_contiguous(mesh)

    @property
    def every_mesh_covers_all(self) -> bool:
        return all(self.covers_all(m) for m in self.meshes)

    def axis_groups(self, mesh: DeviceMesh, axis: int) -> AxisGroups:
        key = (id(mesh), axis)
        hit = self._cache.get(key)
        if hit is not None and hit[0] is mesh:
            return hit[1]
        out = self._classify(mesh, axis)
        self._cache[key] = (mesh, out)
        return out

    def _classify(self, mesh: DeviceMesh, axis: int) -> AxisGroups:
        n = mesh.shape[axis]
        stride = sym.product(mesh.shape[axis + 1 :])
        start = mesh_start(mesh)
        if sym.equal(n, 1):
            return AxisGroups("single", n, stride, start)
        if sym.equal(stride, 1) and ids_are_contiguous(mesh):
            if sym.equal(start, 0) and sym.equal(n, self.total):
                return AxisGroups("global", n, stride, start)
            aligned = sym.prove_divisible(start, n) and sym.prove_divisible(self.total, n)
            if aligned and (self.group_size is None or sym.equal(self.group_size, n)):
                self.group_size = n
                return AxisGroups("group", n, stride, start)
        return AxisGroups("gather", n, stride, start)
