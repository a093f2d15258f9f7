"""An oracle for the redistribution planner that shares nothing with its search or its pricing.

Every sequence of up to ``MAX_STEPS`` steps the step registry declares (each kind with an
``apply`` on each mesh axis, with each target dim and each reduction; each whole-layout kind
to every layout; between meshes, one ``transfer`` to every layout of the target mesh) is
considered; each step is run alone on the SPMD simulator at concrete sizes, on a tensor of the
given shape laid out as the sequence has it there, and priced by the bytes the simulator saw
move (the step must also return its input unchanged: a step that does not is a failure, not a
dearer plan). The time of a step, for the time objective, is its rounds times its link's latency
plus its bytes per device over its link's bandwidth; rounds and link are the step kind's
declaration (``StepKind.rounds`` on its axis; a block exchange: the slowest axis it crosses,
one round per peer), the bytes the simulator's. The cheapest sequence is found by a search of
its own over (layout, steps taken), pricing an edge only when its layout is expanded, and every
price is remembered per mesh sizes, shape, layout and step.

The planner must never cost more than this (it may cost less with a plan of more steps), and
must cost as much wherever its plan has at most ``MAX_STEPS`` steps.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache

import numpy as np

import distir.ops  # noqa: F401  (declares the step kinds)
from distir.errors import DistirError
from distir.ir import DeviceMesh, Placement, Range
from distir.ir.axis_cost import AxisCost, slowest
from distir.ir.builder import FunctionBuilder, dtensor, module_of
from distir.ir.exchange import crossed_axes
from distir.ir.placement import Partial, PlacementError, Replicate, Shard
from distir.ir.steps import all_steps, get_step
from distir.runtime.spmd import SpmdStats, run_spmd
from distir.transform import get_pass

MAX_STEPS = 3
OPS = ("sum", "max", "min", "avg")
_lower = get_pass("lower-global-view-to-local-view")

# a step: (kind name, mesh axis, dim, reduction, target layout); whole-layout kinds and transfers
# have axis -1 and a target layout, the others no target layout
Step = tuple


@lru_cache(maxsize=None)
def layouts(mesh_ndim: int, ndim: int, partial: bool = True) -> tuple[Placement, ...]:
    """Every layout of a rank-``ndim`` tensor on a ``mesh_ndim``-D mesh (R, S[d], P[op] per axis)."""
    specs = [Replicate()] + [Shard(d) for d in range(ndim)] + ([Partial(op) for op in OPS] if partial else [])
    out = []
    for combo in itertools.product(specs, repeat=mesh_ndim):
        p = Placement(tuple(combo))
        try:
            p.validate(mesh_ndim, ndim)
        except DistirError:
            continue
        out.append(p)
    return tuple(out)


@lru_cache(maxsize=None)
def _moves(state: Placement, sizes: tuple[int, ...], ndim: int) -> tuple[tuple[Step, Placement], ...]:
    """Every single step out of ``state`` the registry declares, with the layout it leads to."""
    out = []
    for kind in all_steps().values():
        if kind.apply is not None:
            for axis in range(len(sizes)):
                for dim in range(ndim) if kind.takes_dim else (None,):
                    for op in OPS if kind.takes_op else (None,):
                        try:
                            nxt = kind.apply(state, axis, dim, op, sizes)
                        except PlacementError:
                            continue
                        if nxt != state:
                            out.append(((kind.name, axis, dim, op, None), nxt))
        elif kind.reaches is not None:  # a whole-layout step: to every layout (the simulator refuses what it cannot)
            out += [((kind.name, -1, None, None, q), q) for q in layouts(len(sizes), ndim) if q != state]
    return tuple(out)


def _mesh(sizes: tuple[int, ...], start: int = 0) -> DeviceMesh:
    return DeviceMesh(tuple(sizes), Range(start, start + math.prod(sizes)))


def _call(b: FunctionBuilder, x, step: Step, name: str, dst_mesh: DeviceMesh | None = None):
    kind, axis, dim, op, target = step
    if kind == "transfer":
        return b.call("dist.transfer", x, device_mesh=dst_mesh, placement=target, name=name)
    if target is not None:
        return b.call(f"dist.{kind}", x, placement=target, name=name)
    attrs = {"mesh_axis": axis}
    if dim is not None:
        attrs["dim"] = dim
    if op is not None:
        attrs["op_type"] = op
    return b.call(f"dist.{kind}", x, **attrs, name=name)


def _run(mesh: DeviceMesh, shape, state: Placement, steps: Sequence[Step],
         dst_mesh: DeviceMesh | None = None) -> dict[Step, int | None]:
    """Total bytes the simulator moves for each of ``steps`` run from ``state`` (None: the step does
    not apply there: its op, lowering or the simulator refuses it). One program runs them all, side by
    side on the same input (the simulator counts bytes per binding); each must return its input."""
    meshes = [mesh] if dst_mesh is None else [mesh, dst_mesh]
    b = FunctionBuilder("main", meshes=meshes)
    x = b.param("x", dtensor(tuple(shape), "float64", mesh, state))
    names: dict[str, Step] = {}
    with b.dataflow():
        outs = []
        for k, step in enumerate(steps):
            try:
                outs.append(_call(b, x, step, f"y{k}", dst_mesh))
            except DistirError:
                continue
            names[f"y{k}"] = step
    out: dict[Step, int | None] = dict.fromkeys(steps)
    if not outs:
        return out
    b.ret(outs)
    data = np.random.default_rng(0).standard_normal(tuple(shape))
    stats = SpmdStats()
    try:
        got = run_spmd(_lower(module_of(b)), data, stats=stats)
    except DistirError:
        if len(names) == 1:
            return out
        for step in names.values():  # one of them is refused: each alone
            out.update(_run(mesh, shape, state, [step], dst_mesh))
        return out
    got = got if isinstance(got, tuple) else (got,)
    for (name, step), y in zip(names.items(), got):
        np.testing.assert_allclose(y, data, rtol=1e-9, atol=1e-9, err_msg=f"{step} from \"{state}\"")
        out[step] = sum(r.bytes for r in stats.records if r.binding == name)
    return out


@lru_cache(maxsize=None)
def _prices(sizes: tuple[int, ...], shape: tuple[int, ...], state: Placement) -> dict[Step, int | None]:
    """Bytes of every step out of ``state`` (one simulated program per mesh sizes, shape and layout)."""
    return _run(_mesh(sizes), shape, state, [step for step, _ in _moves(state, sizes, len(shape))])


def _seconds(step: Step, state: Placement, sizes, total: int, costs: Sequence[AxisCost]) -> Fraction:
    kind, axis, _, _, target = step
    per_device = Fraction(total, math.prod(sizes))
    if axis < 0:
        crossed = crossed_axes(state, target, sizes)
        link, rounds = slowest(costs[a] for a in crossed), math.prod(sizes[a] for a in crossed) - 1
    else:
        link, rounds = costs[axis], int(get_step(kind).rounds(sizes[axis]))
    return link.seconds(rounds, per_device)


def _search(src, dst, out_edges) -> tuple[Fraction, tuple] | None:
    """The cheapest path of at most MAX_STEPS counted edges from ``src`` to ``dst``; ``out_edges(state)``
    yields (step, next, cost or None when the step does not apply, whether it counts). Costs are not
    negative."""
    tick = itertools.count()
    heap = [(Fraction(0), 0, next(tick), src, ())]
    seen: set = set()
    while heap:
        cost, n, _, state, path = heapq.heappop(heap)
        if state == dst:
            return cost, path
        if (state, n) in seen:
            continue
        seen.add((state, n))
        for step, nxt, c, counted in out_edges(state):
            if c is not None and n + counted <= MAX_STEPS:
                heapq.heappush(heap, (cost + c, n + counted, next(tick), nxt, path + (step,)))
    return None


def _counted(step: Step, sizes) -> bool:
    """A step on a mesh axis of one device changes nothing (specialize drops it): it is not counted."""
    return step[1] < 0 or sizes[step[1]] > 1


def least(sizes: Sequence[int], shape: Sequence[int], src: Placement, dst: Placement,
          costs: Sequence[AxisCost] | None = None, itemsize: int = 8) -> tuple[Fraction, tuple] | None:
    """The cheapest sequence of at most MAX_STEPS steps from ``src`` to ``dst`` on a mesh of ``sizes``
    for a tensor of ``shape`` and ``itemsize`` bytes an element: (bytes all devices send, summed; or
    with ``costs``, one per mesh axis, seconds), and the steps; None when no such sequence exists.
    Steps on a mesh axis of size 1 are free and not counted."""
    sizes, shape = tuple(sizes), tuple(shape)
    scale = Fraction(itemsize, 8)  # the simulator runs float64

    def out_edges(state):
        prices = _prices(sizes, shape, state)
        for step, nxt in _moves(state, sizes, len(shape)):
            total = None if prices[step] is None else prices[step] * scale
            yield step, nxt, None if total is None else (
                total if costs is None else _seconds(step, state, sizes, total, costs)), _counted(step, sizes)

    return _search(src, dst, out_edges)


# ---------------------------------------------------------------- between two meshes


@lru_cache(maxsize=None)
def _cross_prices(src_mesh: DeviceMesh, dst_mesh: DeviceMesh, shape, side: int, state: Placement,
                  partial_transfers: bool) -> dict[Step, int | None]:
    """Bytes of every step out of ``state``: on the source mesh and every transfer (side 0), or on the
    target mesh (side 1)."""
    if side == 1:
        return _run(dst_mesh, shape, state, [step for step, _ in _moves(state, tuple(dst_mesh.shape), len(shape))])
    steps = [step for step, _ in _moves(state, tuple(src_mesh.shape), len(shape))]
    steps += [step for step, _ in _transfers(state, dst_mesh.ndim, len(shape), partial_transfers)]
    return _run(src_mesh, shape, state, steps, dst_mesh)


def _transfers(state: Placement, mesh_ndim: int, ndim: int, partial: bool):
    return [(("transfer", -1, None, None, q), q) for q in layouts(mesh_ndim, ndim)
            if partial or not (state.has_partial or q.has_partial)]


def least_cross(src_mesh: DeviceMesh, dst_mesh: DeviceMesh, shape: Sequence[int], src: Placement,
                dst: Placement, partial_transfers: bool = True) -> tuple[Fraction, tuple] | None:
    """The cheapest sequence of at most MAX_STEPS steps, one of them a ``transfer``, from ``src`` on
    ``src_mesh`` to ``dst`` on ``dst_mesh`` (concrete meshes): (bytes all devices send, the steps).
    ``partial_transfers`` False: no transfer of a partial value (an aligned copy between meshes of the
    same shape, which meshes of symbolic sizes have at some counts only)."""
    shape = tuple(shape)
    ndim = len(shape)
    src_sizes, dst_sizes = tuple(src_mesh.shape), tuple(dst_mesh.shape)

    def out_edges(node):
        side, state = node
        sizes = src_sizes if side == 0 else dst_sizes
        steps = list(_moves(state, sizes, ndim))
        if side == 0:
            steps += _transfers(state, dst_mesh.ndim, ndim, partial_transfers)
        prices = _cross_prices(src_mesh, dst_mesh, shape, side, state, partial_transfers)
        for step, nxt in steps:
            after = 1 if side == 1 or step[0] == "transfer" else 0
            total = prices[step]
            yield step, (after, nxt), None if total is None else Fraction(total), _counted(step, sizes)

    return _search((0, src), (1, dst), out_edges)
