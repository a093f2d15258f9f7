"""Choosing the cheapest sequence of steps for one redistribute.

A plan is a shortest path over placements: each edge is one step on one mesh axis
(see :mod:`distir.ir.transitions`), weighted by the bytes it sends. Costs scale with the
tensor's size, so a plan depends only on the mesh shape, the tensor's rank and the two
placements, and is cached on those.

With symbolic mesh sizes the costs are formulas; the planner evaluates them at sample
sizes (2, 3, 4, 8 ... per symbol) and takes the plan that is optimal at every sample
(such a plan exists for every transition we know of; if none did, the plan with the
smallest total excess would be taken). Ties go to fewer steps, then to a fixed order.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from ..errors import DistirError
from ..ir import sym
from ..ir.mesh import DeviceMesh
from ..ir.placement import Partial, Placement, PlacementError, Replicate, Shard
from ..ir.sym import Dim
from ..ir.transitions import apply_step, cost_factor, cost_formula

SAMPLE_SIZES = (2, 3, 4, 8)


@dataclass(frozen=True)
class Step:
    kind: str
    mesh_axis: int
    dim: int | None = None
    op_type: str | None = None

    def apply(self, placement: Placement) -> Placement:
        return apply_step(self.kind, placement, self.mesh_axis, self.dim, self.op_type)

    def __str__(self) -> str:
        extra = f", dim={self.dim}" if self.dim is not None else ""
        extra += f", op={self.op_type}" if self.op_type else ""
        return f"{self.kind}(mesh_axis={self.mesh_axis}{extra})"


def _moves(state: Placement, ndim: int, target: Placement):
    for axis, spec in enumerate(state.specs):
        if isinstance(spec, Shard):
            cands = [Step("all_gather", axis)] + [Step("all_to_all", axis, e) for e in range(ndim) if e != spec.dim]
        elif isinstance(spec, Partial):
            cands = [Step("all_reduce", axis)] + [Step("reduce_scatter", axis, d) for d in range(ndim)]
        else:
            cands = [Step("local_shard", axis, d) for d in range(ndim)]
            if isinstance(target[axis], Partial):
                cands.append(Step("local_partial", axis, op_type=target[axis].op))
        for step in cands:
            try:
                yield step, step.apply(state)
            except PlacementError:
                continue


def _local_fraction(state: Placement, sizes: tuple[int, ...]) -> Fraction:
    count = 1
    for axis, spec in enumerate(state.specs):
        if isinstance(spec, Shard):
            count *= sizes[axis]
    return Fraction(1, count)


def step_cost(step: Step, state: Placement, sizes: tuple[int, ...]) -> Fraction:
    """Bytes per worker the step sends, per byte of the whole tensor, at concrete mesh sizes."""
    return _local_fraction(state, sizes) * cost_factor(step.kind, sizes[step.mesh_axis])


def plan_cost(plan: tuple[Step, ...], src: Placement, sizes: tuple[int, ...]) -> Fraction:
    total, state = Fraction(0), src
    for step in plan:
        total += step_cost(step, state, sizes)
        state = step.apply(state)
    return total


def _dijkstra(src: Placement, dst: Placement, ndim: int, sizes: tuple[int, ...]) -> tuple[Step, ...]:
    counter = itertools.count()
    best: dict[Placement, tuple[Fraction, int]] = {src: (Fraction(0), 0)}
    heap = [(Fraction(0), 0, next(counter), src, ())]
    while heap:
        cost, nsteps, _, state, plan = heapq.heappop(heap)
        if state == dst:
            return plan
        if best.get(state, (cost, nsteps)) < (cost, nsteps):
            continue
        for step, nxt in _moves(state, ndim, dst):
            c = cost + step_cost(step, state, sizes)
            key = (c, nsteps + 1)
            if nxt not in best or key < best[nxt]:
                best[nxt] = key
                heapq.heappush(heap, (c, nsteps + 1, next(counter), nxt, plan + (step,)))
    raise DistirError(f"no sequence of steps turns \"{src}\" into \"{dst}\"")


def _sample_points(mesh_shape: tuple[Dim, ...]) -> list[tuple[int, ...]]:
    names = sorted(set().union(*(sym.free_vars(d) for d in mesh_shape)))
    if not names:
        return [tuple(int(d) for d in mesh_shape)]
    points = []
    for values in itertools.product(SAMPLE_SIZES, repeat=len(names)) if len(names) <= 3 else (
        dict.fromkeys(names, v) for v in SAMPLE_SIZES
    ):
        env = dict(zip(names, values)) if not isinstance(values, dict) else values
        try:
            sizes = tuple(sym.evaluate(d, env) for d in mesh_shape)
        except sym.SymbolicError:
            continue
        if all(s >= 1 for s in sizes):
            points.append(sizes)
    return points or [tuple(2 for _ in mesh_shape)]


@lru_cache(maxsize=4096)
def _plan_cached(mesh_shape, ndim: int, src: Placement, dst: Placement) -> tuple[Step, ...]:
    points = _sample_points(mesh_shape)
    candidates: list[tuple[Step, ...]] = []
    for p in points:
        plan = _dijkstra(src, dst, ndim, p)
        if plan not in candidates:
            candidates.append(plan)
    if len(candidates) == 1:
        return candidates[0]
    optimum = {p: plan_cost(_dijkstra(src, dst, ndim, p), src, p) for p in points}

    def excess(plan):
        return sum((plan_cost(plan, src, p) - optimum[p]) for p in points)

    return min(candidates, key=lambda plan: (excess(plan), len(plan), candidates.index(plan)))


def plan_redistribute(mesh: DeviceMesh, ndim: int, src: Placement, dst: Placement) -> tuple[Step, ...]:
    """The cheapest steps from ``src`` to ``dst`` on ``mesh`` for a tensor of rank ``ndim``."""
    if src == dst:
        return ()
    return _plan_cached(_ShapeBox(mesh.shape), ndim, src, dst)


class _ShapeBox(tuple):
    """A mesh shape that hashes by its keys (PrimExprs are not hashable by value)."""

    def __new__(cls, shape):
        return super().__new__(cls, shape)

    def __hash__(self):
        return hash(tuple(sym.key(d) for d in self))

    def __eq__(self, other):
        return isinstance(other, tuple) and len(self) == len(other) and all(sym.equal(a, b) for a, b in zip(self, other))


def is_optimal_everywhere(mesh: DeviceMesh, ndim: int, src: Placement, dst: Placement) -> bool:
    """Whether the chosen plan is optimal at every sampled size of the mesh's symbols.

    For a few transitions on N-D meshes with symbolic sizes no single plan is best at
    every size; the planner then takes the one with the smallest total excess."""
    plan = plan_redistribute(mesh, ndim, src, dst)
    points = _sample_points(tuple(mesh.shape))
    return all(plan_cost(plan, src, p) == plan_cost(_dijkstra(src, dst, ndim, p), src, p) for p in points)


def optimal_cost(mesh_sizes: tuple[int, ...], ndim: int, src: Placement, dst: Placement) -> Fraction:
    """The cost model's optimum at concrete mesh sizes (per worker, per byte of the tensor)."""
    return plan_cost(_dijkstra(src, dst, ndim, mesh_sizes), src, mesh_sizes)


def plan_cost_formula(plan: tuple[Step, ...], src: Placement, mesh: DeviceMesh, nbytes: Dim) -> Dim:
    """Bytes each worker sends for ``plan``, as a formula in the mesh sizes."""
    total: Dim = 0
    state = src
    for step in plan:
        count = sym.product(mesh.shape[a] for a, s in enumerate(state.specs) if isinstance(s, Shard))
        local = sym.floordiv(nbytes, count)
        total = sym.add(total, cost_formula(step.kind, mesh.shape[step.mesh_axis], local))
        state = step.apply(state)
    return total


__all__ = ["Replicate", "Step", "optimal_cost", "plan_cost", "plan_cost_formula", "plan_redistribute", "step_cost"]
