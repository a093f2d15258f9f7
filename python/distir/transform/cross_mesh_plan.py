"""Choosing the cheapest way to move a value between two meshes (``R.dist.transfer``).

The path runs over (mesh, placement): steps on the source mesh (:mod:`.redistribute_plan`'s
kinds and costs), one :class:`Transfer` (see :mod:`distir.ir.transfer`), steps on the target
mesh, weighted by the bytes all workers send together (a step on a mesh of D devices costs D
times its per-worker cost), sampled over the symbols of both meshes.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import ClassVar

from ..errors import DistirError
from ..ir import sym
from ..ir.mesh import DeviceMesh, Range
from ..ir.placement import Placement, Replicate, Shard
from ..ir.steps import steps_version
from ..ir.transfer import kept_shares, transfer_volume
from .redistribute_plan import (
    LARGE_SAMPLE_SIZES,
    SAMPLE_SIZES,
    Step,
    _blocks_along,
    _moves,
    _product,
    _sample_envs,
    _shortest,
    step_cost,
)


@dataclass(frozen=True)
class Transfer:
    """Move the value to the target mesh, laid out there as ``placement`` (``R.dist.transfer``)."""

    placement: Placement
    kind: ClassVar[str] = "transfer"

    def __str__(self) -> str:
        return f"transfer(placement=\"{self.placement}\")"


CrossStep = Step | Transfer


@dataclass(frozen=True)
class MeshPoint:
    """The source and target meshes at concrete sizes: their shapes and device ids (a ``range`` for
    a mesh whose ids are a range, so that a point stays small and quick to hash at any size)."""

    src_sizes: tuple[int, ...]
    src_devices: range | tuple[int, ...]
    dst_sizes: tuple[int, ...]
    dst_devices: range | tuple[int, ...]

    @staticmethod
    def of(src_mesh: DeviceMesh, dst_mesh: DeviceMesh, values: Mapping[str, int] | None = None) -> MeshPoint:
        values = values or {}
        return MeshPoint(
            tuple(sym.evaluate(d, values) for d in src_mesh.shape),
            _device_ids(src_mesh, values),
            tuple(sym.evaluate(d, values) for d in dst_mesh.shape),
            _device_ids(dst_mesh, values),
        )

    @property
    def disjoint(self) -> bool:
        a, b = self.src_devices, self.dst_devices
        if isinstance(a, range) and isinstance(b, range):
            return a.stop <= b.start or b.stop <= a.start
        return not set(a) & set(b)


def _lowest(ids: range | tuple[int, ...]) -> int:
    return ids.start if isinstance(ids, range) else min(ids)


def _device_ids(mesh: DeviceMesh, values: Mapping[str, int]) -> range | tuple[int, ...]:
    ids = mesh.device_ids
    if isinstance(ids, Range):
        return range(sym.evaluate(ids.start, values), sym.evaluate(ids.stop, values))
    return tuple(ids)


def _mesh_symbols(mesh: DeviceMesh) -> set[str]:
    names: set[str] = set().union(*(sym.free_vars(d) for d in mesh.shape))
    if isinstance(mesh.device_ids, Range):
        names |= sym.free_vars(mesh.device_ids.start) | sym.free_vars(mesh.device_ids.stop)
    return names


def _cross_points(src_mesh: DeviceMesh, dst_mesh: DeviceMesh) -> list[MeshPoint]:
    """Concrete meshes at sample sizes of their symbols; larger sizes only when no small one is valid
    (e.g. device ids ``Range(n - 10, 2 * n - 10)``)."""
    names = sorted(_mesh_symbols(src_mesh) | _mesh_symbols(dst_mesh))
    for samples in (SAMPLE_SIZES, LARGE_SAMPLE_SIZES):
        points = []
        for env in _sample_envs(names, samples, all_pairs_up_to=3):
            try:
                point = MeshPoint.of(src_mesh, dst_mesh, env)
            except sym.SymbolicError:
                continue
            sizes_ok = all(s >= 1 for s in point.src_sizes + point.dst_sizes)
            if sizes_ok and min(_lowest(point.src_devices), _lowest(point.dst_devices)) >= 0:
                points.append(point)
        if points:
            return points
    tried = ", ".join(map(str, SAMPLE_SIZES + LARGE_SAMPLE_SIZES))
    raise DistirError(
        f"no size of {', '.join(names) or 'the meshes'} among {tried} gives both meshes positive sizes and "
        "non-negative device ids, so the transfer cannot be planned; check the meshes' I.Range bounds"
    )


def _partial_free(mesh_ndim: int, ndim: int) -> list[Placement]:
    specs = [Replicate()] + [Shard(d) for d in range(ndim)]
    return [Placement(tuple(c)) for c in itertools.product(specs, repeat=mesh_ndim)]




def transfer_cost(src: Placement, dst: Placement, point: MeshPoint, ndim: int) -> Fraction | None:
    """Bytes all workers send for one transfer, per byte of the tensor; None when not expressible.

    Every target worker receives its block (the copies of the tensor the target layout holds),
    less what stays put on devices of both meshes. Transfers between layouts without partials are
    priced from ``src`` to every target at once (:func:`_transfers_from`)."""
    if not (src.has_partial or dst.has_partial):
        return _transfers_from(src, point, ndim)[dst]
    if not (src == dst and point.src_sizes == point.dst_sizes):
        return None
    # an aligned copy of a partial value: extents every block count divides, then per byte
    extents = [_blocks_along(point.dst_sizes, dst, d) for d in range(ndim)]
    sent = transfer_volume(extents, point.src_sizes, point.src_devices, src, point.dst_sizes, point.dst_devices, dst)
    return Fraction(sent, _product(extents))


@lru_cache(maxsize=4096)
def _transfers_from(src: Placement, point: MeshPoint, ndim: int) -> dict[Placement, Fraction]:
    """The cost of a transfer from ``src`` (no partials) to each target layout without partials:
    the copies of the tensor it holds, less the share that stays put
    (:func:`~distir.ir.transfer.kept_shares`; nothing when the meshes share no device)."""
    targets = _partial_free(len(point.dst_sizes), ndim)
    if point.disjoint:
        kept = [0] * len(targets)
    else:
        kept = kept_shares(point.src_sizes, point.src_devices, src, point.dst_sizes, point.dst_devices, targets, ndim)
    devices = len(point.dst_devices)
    return {q: devices // _blocks(point.dst_sizes, q) - k for q, k in zip(targets, kept)}


def _blocks(sizes: tuple[int, ...], placement: Placement) -> int:
    """How many blocks a layout cuts the tensor into (the product of the sizes of the axes that shard)."""
    return _product(sizes[a] for a, s in enumerate(placement.specs) if isinstance(s, Shard))


def _cross_moves(point: MeshPoint, ndim: int, dst: Placement, aligned_ok: bool):
    src_total, dst_total = len(point.src_devices), len(point.dst_devices)
    no_partial_hint = Placement.replicated(len(point.src_sizes))

    def moves(state):
        side, p = state
        if side == 0:
            for step, nxt in _moves(p, ndim, no_partial_hint, point.src_sizes, whole=False):
                yield step, (0, nxt), src_total * step_cost(step, p, point.src_sizes)
            if not p.has_partial:
                for q, c in _transfers_from(p, point, ndim).items():
                    yield Transfer(q), (1, q), c
            elif aligned_ok:
                c = transfer_cost(p, p, point, ndim)
                if c is not None:
                    yield Transfer(p), (1, p), c
        else:
            for step, nxt in _moves(p, ndim, dst, point.dst_sizes, whole=False):
                yield step, (1, nxt), dst_total * step_cost(step, p, point.dst_sizes)

    return moves


def _cross_dijkstra(
    src: Placement, dst: Placement, ndim: int, point: MeshPoint, aligned_ok: bool
):
    plan = _shortest((0, src), (1, dst), _cross_moves(point, ndim, dst, aligned_ok))
    if plan is None:
        raise DistirError(f"no sequence of steps and transfers turns \"{src}\" into \"{dst}\" on the other mesh")
    return plan


def cross_plan_cost(plan: tuple[CrossStep, ...], src: Placement, point: MeshPoint, ndim: int) -> Fraction:
    """Bytes all workers send for a cross-mesh ``plan``, per byte of the tensor, at ``point``."""
    total, state, on_target = Fraction(0), src, False
    for step in plan:
        if isinstance(step, Transfer):
            c = transfer_cost(state, step.placement, point, ndim)
            if c is None:
                raise DistirError(f"{step} from \"{state}\" is not expressible")
            total += c
            state, on_target = step.placement, True
        else:
            sizes = point.dst_sizes if on_target else point.src_sizes
            total += _product(sizes) * step_cost(step, state, sizes)
            state = step.apply(state, sizes)
    return total


def _aligned_ok(src_mesh: DeviceMesh, dst_mesh: DeviceMesh) -> bool:
    return src_mesh.ndim == dst_mesh.ndim and all(sym.equal(a, b) for a, b in zip(src_mesh.shape, dst_mesh.shape))


@lru_cache(maxsize=4096)
def _plan_cross_cached(
    src_mesh: DeviceMesh, dst_mesh: DeviceMesh, ndim: int, src: Placement, dst: Placement, version: int
):
    points = _cross_points(src_mesh, dst_mesh)
    aligned_ok = _aligned_ok(src_mesh, dst_mesh)
    candidates: list[tuple[CrossStep, ...]] = []
    for p in points:
        plan = _cross_dijkstra(src, dst, ndim, p, aligned_ok)
        if plan not in candidates:
            candidates.append(plan)
    if len(candidates) == 1:
        return candidates[0]
    optimum = {
        p: cross_plan_cost(_cross_dijkstra(src, dst, ndim, p, aligned_ok), src, p, ndim) for p in points
    }

    def excess(plan):
        return sum(cross_plan_cost(plan, src, p, ndim) - optimum[p] for p in points)

    return min(candidates, key=lambda plan: (excess(plan), len(plan), candidates.index(plan)))


def plan_cross_mesh(
    src_mesh: DeviceMesh, src: Placement, dst_mesh: DeviceMesh, dst: Placement, ndim: int
) -> tuple[CrossStep, ...]:
    """The cheapest way from ``src`` on ``src_mesh`` to ``dst`` on ``dst_mesh`` (rank ``ndim``).

    Steps on the source mesh, one :class:`Transfer`, steps on the target mesh; cost = bytes
    sent by all workers together (see docs/redistribute.md). Optimal at every sampled size of
    the meshes' symbols when such a plan exists; else the smallest total excess."""
    for p in (src, dst):
        p.refuse_block("a redistribute between two meshes")
    return _plan_cross_cached(src_mesh, dst_mesh, ndim, src, dst, steps_version())


def cross_optimal_cost(
    src_mesh: DeviceMesh, src: Placement, dst_mesh: DeviceMesh, dst: Placement, ndim: int, point: MeshPoint
) -> Fraction:
    """The cost model's optimum for a cross-mesh redistribute at concrete sizes."""
    plan = _cross_dijkstra(src, dst, ndim, point, _aligned_ok(src_mesh, dst_mesh))
    return cross_plan_cost(plan, src, point, ndim)


def is_cross_optimal_everywhere(
    src_mesh: DeviceMesh, src: Placement, dst_mesh: DeviceMesh, dst: Placement, ndim: int
) -> bool:
    plan = plan_cross_mesh(src_mesh, src, dst_mesh, dst, ndim)
    return all(
        cross_plan_cost(plan, src, p, ndim) == cross_optimal_cost(src_mesh, src, dst_mesh, dst, ndim, p)
        for p in _cross_points(src_mesh, dst_mesh)
    )


__all__ = [
    "CrossStep",
    "MeshPoint",
    "Transfer",
    "cross_optimal_cost",
    "cross_plan_cost",
    "is_cross_optimal_everywhere",
    "plan_cross_mesh",
    "transfer_cost",
]
