"""Choosing the cheapest sequence of steps for one redistribute.

A plan is a shortest path over placements: each edge is one step on one mesh axis
(a kind of :mod:`distir.ir.steps`; the built-in kinds are in :mod:`distir.ops.collectives`),
weighted by the bytes it sends. Costs scale with the
tensor's size, so a plan depends only on the mesh shape, the tensor's rank and the two
placements, and is cached on those.

With symbolic mesh sizes the costs are formulas; the planner evaluates them at sample
sizes (2, 3, 4, 8 ... per symbol) and takes the plan that is optimal at every sample
(such a plan exists for every transition we know of; if none did, the plan with the
smallest total excess would be taken). Ties go to fewer steps, then to a fixed order.

Between two meshes, :mod:`.cross_mesh_plan` plans on the same steps and costs.

**Time objective.** Given the cost of each mesh axis (:class:`~distir.ir.axis_cost.AxisCost`:
latency per round, bandwidth) and the tensor's bytes, a :class:`Timing`, plans on one mesh
minimize the estimated time instead: the sum over steps of ``rounds * latency + bytes /
bandwidth`` of the step's axis (a block exchange: the slowest axis it crosses, with one round per
peer). Without it, bytes per worker (the default).
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from ..errors import DistirError
from ..ir import sym
from ..ir.axis_cost import AxisCost, AxisCosts, slowest
from ..ir.exchange import crossed_axes
from ..ir.layout import expand_placement, level_extents
from ..ir.mesh import DeviceMesh
from ..ir.placement import Partial, Placement, PlacementError, Replicate, Shard, StridedShard
from ..ir.steps import StepKind, all_steps, get_step, steps_version
from ..ir.sym import Dim

SAMPLE_SIZES = (2, 3, 4, 8)
#: the counts of each symbol of a mesh at which a plan made for every count is compared with the
#: exact optimum there (:func:`needs_replan`)
REPLAN_SIZES = (1, 2, 3, 4, 5, 6, 7, 8)
LARGE_SAMPLE_SIZES = (16, 32, 64, 128)
#: for the time objective, a symbolic dim of the tensor counts as this (a mesh size as ``MESH_TIME_HINT``)
DIM_TIME_HINT = 512
MESH_TIME_HINT = 4


@dataclass(frozen=True)
class Timing:
    """The time objective of a plan (module docstring): the cost of each mesh axis and the bytes of
    the whole tensor. Plan costs are then seconds instead of bytes per worker per byte."""

    costs: tuple[AxisCost, ...]
    nbytes: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.costs, self.nbytes)))

    def __hash__(self) -> int:  # kept: plans by time are remembered by their Timing, hashed thousands of times
        return self._hash

    def __reduce__(self):  # rebuilt, not copied: another process hashes strings differently
        return Timing, (self.costs, self.nbytes)


def timing_for(costs: AxisCosts | None, mesh: DeviceMesh, shape, itemsize: int, where: str = "") -> Timing | None:
    """The :class:`Timing` of a tensor of ``shape`` (``itemsize`` bytes per element) on ``mesh``, or
    None without ``costs``. A symbolic dim counts as :data:`DIM_TIME_HINT`, a mesh size as
    :data:`MESH_TIME_HINT`; an axis cost beyond the mesh's axes is an error."""
    if costs is None:
        return None
    per_axis = costs.for_mesh(mesh.ndim, where)
    mesh_names = set().union(*(sym.free_vars(d) for d in mesh.shape))
    nbytes = itemsize
    for d in shape:
        if isinstance(d, int):
            nbytes *= d
            continue
        env = {n: MESH_TIME_HINT if n in mesh_names else DIM_TIME_HINT for n in sym.free_vars(d)}
        nbytes *= max(int(sym.evaluate(d, env)), 0)
    return Timing(per_axis, nbytes)


@dataclass(frozen=True)
class Step:
    """One step of a plan: a step kind (by its name) on one mesh axis, with its dim or reduction."""

    kind: str
    mesh_axis: int  # -1 for a step on the whole layout (``placement``)
    dim: int | None = None
    op_type: str | None = None
    placement: Placement | None = None  # the layout a whole-layout step (a block exchange) goes to

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.kind, self.mesh_axis, self.dim, self.op_type, self.placement)))

    def __hash__(self) -> int:  # kept: steps key the planner's remembered costs, hashed millions of times
        return self._hash

    def __reduce__(self):  # rebuilt, not copied: another process hashes strings differently
        return Step, (self.kind, self.mesh_axis, self.dim, self.op_type, self.placement)

    @property
    def step_kind(self) -> StepKind:
        return get_step(self.kind)

    @property
    def whole_layout(self) -> bool:
        return self.placement is not None

    def apply(self, placement: Placement, mesh_shape=None) -> Placement:
        if self.placement is not None:
            return self.placement
        return self.step_kind.apply(placement, self.mesh_axis, self.dim, self.op_type, mesh_shape)

    def __str__(self) -> str:
        if self.placement is not None:
            return f"{self.kind}(placement=\"{self.placement}\")"
        extra = f", dim={self.dim}" if self.dim is not None else ""
        extra += f", op={self.op_type}" if self.op_type else ""
        return f"{self.kind}(mesh_axis={self.mesh_axis}{extra})"


def _axis_steps() -> list[StepKind]:
    return [k for k in all_steps().values() if k.apply is not None]


def _layout_steps() -> list[StepKind]:
    return [k for k in all_steps().values() if k.reaches is not None]


def _moves(state: Placement, ndim: int, target: Placement, mesh_shape, whole: bool = True, by_time: bool = False):
    """Single steps out of ``state``: every kind of step, on every mesh axis, with every target
    dim (or the target's reduction); and (``whole``) every whole-layout step (a block exchange)
    to the layouts it reaches (``by_time``: also those it reaches when planning by time). Every
    layout is valid at every size (uneven cuts are padded)."""
    if whole:
        for kind in _layout_steps():
            more = kind.reaches_by_time(state, target) if by_time and kind.reaches_by_time is not None else ()
            for nxt in dict.fromkeys((*kind.reaches(state, target), *more)):
                if nxt != state:
                    yield Step(kind.name, -1, placement=nxt), nxt
    kinds = _axis_steps()
    for axis, spec in enumerate(state.specs):
        for kind in kinds:
            if kind.acts_on is not None and not isinstance(spec, kind.acts_on):
                continue
            if kind.takes_op:
                if not isinstance(target[axis], Partial):
                    continue
                options = [(None, target[axis].op)]
            elif kind.takes_dim:
                options = [(d, None) for d in range(ndim)]
            else:
                options = [(None, None)]
            for dim, op in options:
                step = Step(kind.name, axis, dim, op)
                try:
                    nxt = kind.apply(state, axis, dim, op, mesh_shape)
                except PlacementError:
                    continue
                yield step, nxt


def _local_fraction(state: Placement, sizes: tuple[int, ...]) -> Fraction:
    count = 1
    for axis, spec in enumerate(state.specs):
        if isinstance(spec, Shard):
            count *= sizes[axis]
    return Fraction(1, count)


def _held(state: Placement, sizes) -> Fraction:
    """The share of the tensor each worker holds in ``state`` (at concrete mesh sizes)."""
    return _local_fraction(state, sizes)


def _exchanged(state: Placement, nxt: Placement, axis: int) -> bool:
    """Whether the axis cuts a dim after the step that it did not cut before (the pieces are then finer)."""
    return isinstance(nxt[axis], Shard) and state[axis] != nxt[axis]


def _volume_extents(src: Placement, dst: Placement, sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Extents that every block count of both layouts divides: per byte of the tensor, the
    bytes of an exchange at any such extents (the layouts' blocks nest evenly). Dims neither
    layout shards count once."""
    dims = [sp.dim for sp in src.specs + dst.specs if isinstance(sp, Shard)]
    return tuple(math.lcm(_blocks_along(sizes, src, d), _blocks_along(sizes, dst, d)) for d in range(max(dims, default=0) + 1))


def _local_extents(extents: tuple[int, ...], p: Placement, sizes: tuple[int, ...]) -> list[int]:
    """Per dim, the padded block a worker stores (docs/uneven.md), at concrete sizes."""
    out = []
    for d, n in enumerate(extents):
        axes = p.mesh_axes_of(d)
        out.append(level_extents(n, [sizes[a] for a in axes])[-1] if axes else n)
    return out


def step_cost(step: Step, state: Placement, sizes: tuple[int, ...], extents: tuple[int, ...] | None = None) -> Fraction:
    """Bytes per worker the step sends, per byte of the whole tensor, at concrete mesh sizes.

    Without ``extents``, blocks are taken to divide evenly (the cost is then the same for every
    tensor size). With the tensor's concrete ``extents``, collectives move padded blocks, as
    they do at run time (docs/uneven.md), and a block exchange moves only real elements.
    Remembered for plain integer sizes: the planner's searches price the same edges many times."""
    if all(type(v) is int for v in sizes) and (extents is None or all(type(v) is int for v in extents)):
        return _remembered_step_cost(step, state, sizes, extents)
    return _step_cost(step, state, sizes, extents)


def _step_cost(step: Step, state: Placement, sizes: tuple[int, ...], extents: tuple[int, ...] | None) -> Fraction:
    kind = step.step_kind
    after = step.apply(state, sizes)
    if step.whole_layout:
        volume_at = extents if extents is not None else _volume_extents(state, after, sizes)
        total = kind.volume(volume_at, state, volume_at, after, sizes)
        return Fraction(total, _product(sizes) * _product(volume_at))
    n = sizes[step.mesh_axis]
    if extents is not None:
        before_b, after_b = _local_extents(extents, state, sizes), _local_extents(extents, after, sizes)
        piece = _product(min(a, b) for a, b in zip(before_b, after_b))
        num, den = kind.sent(n, _product(before_b), _product(after_b), piece)
        return Fraction(num) / den / _product(extents)
    before = _held(state, sizes)
    piece = before / n if _exchanged(state, after, step.mesh_axis) else before
    num, den = kind.sent(n, before, _held(after, sizes), piece)
    return Fraction(num) / den


_remembered_step_cost = lru_cache(maxsize=1 << 17)(_step_cost)


def exchange_link(src: Placement, dst: Placement, sizes: tuple[int, ...], costs: tuple[AxisCost, ...],
                  same_shape: bool = True) -> tuple[AxisCost, int]:
    """The link a block exchange from ``src`` to ``dst`` pays and its rounds: the slowest of the axes
    it crosses (:func:`~distir.ir.exchange.crossed_axes`), one round per other device of a group
    across them."""
    axes = crossed_axes(src, dst, sizes, same_shape)
    return slowest(costs[a] for a in axes), _product(sizes[a] for a in axes) - 1


def step_link(step: Step, state: Placement, sizes: tuple[int, ...], costs: tuple[AxisCost, ...]) -> tuple[AxisCost, int]:
    """The axis cost a step pays and its rounds: its mesh axis and the kind's rounds there; for a
    block exchange, :func:`exchange_link`."""
    if step.whole_layout:
        return exchange_link(state, step.apply(state, sizes), sizes, costs)
    return costs[step.mesh_axis], int(step.step_kind.rounds(sizes[step.mesh_axis]))


def step_time(step: Step, state: Placement, sizes: tuple[int, ...], timing: Timing,
              extents: tuple[int, ...] | None = None) -> Fraction:
    """Seconds the step takes: ``rounds * latency + bytes / bandwidth`` of its axis (:func:`step_link`).
    Remembered for plain integer sizes, as :func:`step_cost` is."""
    if all(type(v) is int for v in sizes) and (extents is None or all(type(v) is int for v in extents)):
        return _remembered_step_time(step, state, sizes, timing, extents)
    return _step_time(step, state, sizes, timing, extents)


def _step_time(step: Step, state: Placement, sizes: tuple[int, ...], timing: Timing,
               extents: tuple[int, ...] | None) -> Fraction:
    link, rounds = step_link(step, state, sizes, timing.costs)
    return link.seconds(rounds, step_cost(step, state, sizes, extents) * timing.nbytes)


_remembered_step_time = lru_cache(maxsize=1 << 17)(_step_time)


def _edge(step: Step, state: Placement, sizes, extents, timing: Timing | None) -> Fraction:
    return step_cost(step, state, sizes, extents) if timing is None else step_time(step, state, sizes, timing, extents)


def plan_cost(
    plan: tuple[Step, ...], src: Placement, sizes: tuple[int, ...], extents: tuple[int, ...] | None = None,
    timing: Timing | None = None,
) -> Fraction:
    """Bytes per worker of ``plan``, per byte of the tensor (see :func:`step_cost` for ``extents``);
    with ``timing``, its seconds instead."""
    total, state = Fraction(0), src
    for step in plan:
        total += _edge(step, state, sizes, extents, timing)
        state = step.apply(state, sizes)
    return total


def _penalty(step) -> int:
    """Ties in bytes go to the collectives: a block exchange is point to point, with more messages."""
    return 1 if isinstance(step, Step) and step.whole_layout else 0


def _shortest(src, dst, moves):
    """Dijkstra over layouts: ``moves(state)`` yields (step, next state, cost); ties go to plans
    without block exchanges, then to fewer steps."""
    counter = itertools.count()
    zero = (Fraction(0), 0, 0)
    best: dict = {src: zero}
    heap = [(*zero, next(counter), src, ())]
    while heap:
        cost, penalty, nsteps, _, state, plan = heapq.heappop(heap)
        if state == dst:
            return plan
        if best.get(state, (cost, penalty, nsteps)) < (cost, penalty, nsteps):
            continue
        for step, nxt, step_c in moves(state):
            key = (cost + step_c, penalty + _penalty(step), nsteps + 1)
            if nxt not in best or key < best[nxt]:
                best[nxt] = key
                heapq.heappush(heap, (*key, next(counter), nxt, plan + (step,)))
    return None


def _like(ops: tuple, cut: tuple | None) -> Placement:
    """A layout standing for every target with partial axes and reductions ``ops`` (per mesh axis,
    the reduction or None) and, when planning by time, the dims ``cut`` it cuts: the moves out of a
    layout toward any of them are those toward this one (:func:`_moves`, apart from the exchange
    straight to the target)."""
    free = iter(cut or ())
    return Placement(tuple(Partial(op) if op is not None else Shard(d) if (d := next(free, None)) is not None
                           else Replicate() for op in ops))


_INTERNED: dict = {}  # one object per layout the shared searches reach: dict lookups then hit by identity
_INTERNED_MAX = 1 << 16


@lru_cache(maxsize=1 << 14)
def _unpriced_moves(state: Placement, ndim: int, sizes: tuple[int, ...], ops: tuple, cut: tuple | None,
                    by_time: bool, version: int) -> tuple:
    """The (step, next layout) pairs of :func:`_shared_moves`, which do not depend on the tensor's
    bytes: planning by time prices them again for each tensor."""
    like = _like(ops, cut)
    out = []
    if by_time:
        for kind in _layout_steps():
            if kind.reaches_by_time is not None:
                out.extend((Step(kind.name, -1, placement=nxt), nxt)
                           for nxt in dict.fromkeys(kind.reaches_by_time(state, like)) if nxt != state)
    out.extend(_moves(state, ndim, like, sizes, whole=False))
    if len(_INTERNED) > _INTERNED_MAX:
        _INTERNED.clear()
    return tuple((step, _INTERNED.setdefault(nxt, nxt), _penalty(step)) for step, nxt in out)


@lru_cache(maxsize=1 << 16)
def _shared_moves(state: Placement, ndim: int, sizes: tuple[int, ...], extents, ops: tuple, cut: tuple | None,
                  timing: Timing | None, version: int) -> tuple[tuple, int]:
    """The moves out of ``state`` toward every target :func:`_like` stands for, remembered: steps on
    single mesh axes and, by time, the block exchanges to layouts one axis away (:func:`_moves`,
    without the exchange straight to the target). Each move is (step, next layout, cost
    (:func:`_edge`), cost times ``unit``, :func:`_penalty`), ``unit`` the least common denominator of
    the costs: the search adds and compares whole numbers, exactly, where Fractions cost most of its
    time."""
    priced = [(step, nxt, Fraction(_edge(step, state, sizes, extents, timing)), pen)
              for step, nxt, pen in _unpriced_moves(state, ndim, sizes, ops, cut, timing is not None, version)]
    unit = math.lcm(1, *(c.denominator for _, _, c, _ in priced))
    return tuple((step, nxt, c, c.numerator * (unit // c.denominator), pen) for step, nxt, c, pen in priced), unit


class _SharedSearch:
    """Dijkstra from one layout over the moves every target of one kind shares (:func:`_shared_moves`),
    settled only as far as some target needs and kept: the plans from one layout, at one size, to
    every target with the same partial axes (and, by time, the same cut dims) share it. A
    propagation asks for thousands of plans between a few dozen candidate layouts; searching each
    from scratch took minutes on rank-6 values (fuzz findings slow/).

    A target ``t`` adds to that graph only block exchanges from layouts without partials straight
    to ``t`` with its partial axes replicated (``t'``, :func:`_moves`). A path uses such an exchange
    at most once, so the best plan is the least, by (cost, block exchanges, steps), of: the shared
    path to ``t``; and each settled layout's path, an exchange to ``t'``, then the shared path from
    ``t'`` to ``t``. Ties go to the push order :func:`_shortest` would give when ``t`` has no
    partials, so the plan is the one :func:`_shortest` returns on the full graph; with partials, one
    of the same cost, exchanges and steps (property-tested against it)."""

    def __init__(self, src: Placement, ndim: int, sizes: tuple[int, ...], extents, ops: tuple, cut: tuple | None,
                 timing: Timing | None, version: int):
        self.kind = (ndim, sizes, extents, ops, cut, timing, version)
        self._counter = itertools.count()
        #: costs on the heap and in ``_best`` are whole numbers of 1/``_unit`` (``_shared_moves``); the
        #: unit grows, and the numbers with it, when a layout's moves need a finer one
        self._unit = 1
        self._best: dict = {src: (0, 0, 0)}
        self._heap: list = [(0, 0, 0, next(self._counter), src, (), -1)]
        #: settled layouts in the order popped: (layout, cost, exchanges, steps, plan, index of the
        #: layout whose expansion pushed the entry)
        self.settled: list[tuple] = []
        self._settled_at: dict = {}
        #: per settled layout, whether an exchange straight to a target from it can be the best: it
        #: has no partials and, by bytes, the layout before it on its path has (or it is the source).
        #: By bytes an exchange moves the least any layout change can
        #: (:func:`distir.ops.collectives._exchange_reaches`), so from a layout after one without
        #: partials it never beats the exchange from that one (as many bytes or more, in more steps).
        #: By time an exchange pays a round per peer, and every layout without partials is tried.
        self._exchange_from: list[bool] = []

    def _top(self):
        while self._heap and self._heap[0][4] in self._settled_at:
            heapq.heappop(self._heap)  # stale: a cheaper entry settled that layout
        return self._heap[0] if self._heap else None

    def _settle_next(self) -> None:
        cost, pen, nsteps, _, state, plan, pusher = heapq.heappop(self._heap)
        here = len(self.settled)
        self._settled_at[state] = here
        self.settled.append((state, Fraction(cost, self._unit), pen, nsteps, plan, pusher))
        by_time = self.kind[5] is not None
        self._exchange_from.append(not state.has_partial and (
            by_time or pusher < 0 or self.settled[pusher][0].has_partial))
        moves, unit = _shared_moves(state, *self.kind)
        if self._unit % unit:
            cost *= self._refine(math.lcm(self._unit, unit))
        scale = self._unit // unit
        best, heap, counter = self._best, self._heap, self._counter
        for step, nxt, _, step_c, step_pen in moves:
            key = (cost + step_c * scale, pen + step_pen, nsteps + 1)
            old = best.get(nxt)
            if old is None or key < old:
                best[nxt] = key
                heapq.heappush(heap, (*key, next(counter), nxt, plan + (step,), here))

    def _refine(self, unit: int) -> int:
        """Count costs in 1/``unit`` (a multiple of the unit so far): every number times the ratio
        (returned), which keeps their order (and so the heap's)."""
        f = unit // self._unit
        self._unit = unit
        self._best = {k: (v[0] * f, *v[1:]) for k, v in self._best.items()}
        self._heap[:] = [(e[0] * f, *e[1:]) for e in self._heap]
        return f

    def plan_to(self, dst: Placement, exchanges: bool = True) -> tuple[Step, ...] | None:
        """The plan to ``dst`` (not a block layout, of this search's kind), or None when none reaches
        it; without ``exchanges``, over the shared moves alone."""
        best = None  # (cost, block exchanges, steps, push order, plan)
        kinds = list(enumerate(_layout_steps())) if exchanges else []
        i = 0
        while True:
            while i < len(self.settled):
                state, cost, pen, nsteps, plan, pusher = self.settled[i]
                if best is not None and cost > best[0]:
                    return best[-1]  # later layouts cost at least as much
                if state == dst:
                    entry = (cost, pen, nsteps, (pusher, 1), plan)
                    best = entry if best is None or entry[:4] < best[:4] else best
                elif self._exchange_from[i]:
                    for j, kind in kinds:
                        for entry in self._through_exchange(i, j, kind, dst):
                            best = entry if best is None or entry[:4] < best[:4] else best
                i += 1
            top = self._top()
            if top is None or (best is not None and (Fraction(top[0], self._unit), *top[1:3]) > best[:3]):
                return None if best is None else best[-1]
            self._settle_next()

    def _through_exchange(self, i: int, j: int, kind: StepKind, dst: Placement):
        """Entries of plans to ``dst`` by the settled layout ``i``, a ``kind`` step straight to what
        it reaches, then the shared moves."""
        state, cost, pen, nsteps, plan, _ = self.settled[i]
        ndim, sizes, extents, ops, cut, timing, version = self.kind
        for nxt in kind.reaches(state, dst):
            if nxt == state:
                continue
            step = Step(kind.name, -1, placement=nxt)
            tail = () if nxt == dst else _shared_search(nxt, *self.kind).plan_to(dst, exchanges=False)
            if tail is None:
                continue
            total = cost + _edge(step, state, sizes, extents, timing)
            total += plan_cost(tail, nxt, sizes, extents, timing) if tail else 0
            yield total, pen + 1 + sum(map(_penalty, tail)), nsteps + 1 + len(tail), (i, 0, j), plan + (step,) + tail


@lru_cache(maxsize=2048)
def _shared_search(src: Placement, ndim: int, sizes: tuple[int, ...], extents, ops: tuple, cut: tuple | None,
                   timing: Timing | None, version: int) -> _SharedSearch:
    return _SharedSearch(src, ndim, sizes, extents, ops, cut, timing, version)


def _dijkstra(
    src: Placement, dst: Placement, ndim: int, sizes: tuple[int, ...], extents: tuple[int, ...] | None = None,
    timing: Timing | None = None,
) -> tuple[Step, ...]:
    if src.is_block or dst.is_block:
        plan = _full_dijkstra(src, dst, ndim, sizes, extents, timing)
    else:
        ops = tuple(s.op if isinstance(s, Partial) else None for s in dst.specs)
        cut = None if timing is None else tuple(sorted({s.dim for s in dst.specs if isinstance(s, Shard)}))
        plan = _shared_search(src, ndim, sizes, extents, ops, cut, timing, steps_version()).plan_to(dst)
    if plan is None:
        raise DistirError(f"no sequence of steps turns \"{src}\" into \"{dst}\"")
    return plan


def _full_dijkstra(
    src: Placement, dst: Placement, ndim: int, sizes: tuple[int, ...], extents: tuple[int, ...] | None = None,
    timing: Timing | None = None,
) -> tuple[Step, ...] | None:
    """:func:`_shortest` over every move toward ``dst`` (block exchanges and partial targets included)."""
    version = steps_version()
    return _shortest(src, dst, lambda state: _priced_moves(state, ndim, dst, sizes, extents, timing, version))


@lru_cache(maxsize=1 << 16)
def _priced_moves(state: Placement, ndim: int, dst: Placement, sizes: tuple[int, ...], extents, timing: Timing | None,
                  version: int) -> tuple:
    """:func:`_moves` toward ``dst`` with each step's cost (:func:`_edge`), remembered: the searches
    toward the targets of one propagation walk the same layouts again and again. ``version``: of
    the step registry (new step kinds, new moves)."""
    return tuple((step, nxt, _edge(step, state, sizes, extents, timing))
                 for step, nxt in _moves(state, ndim, dst, sizes, by_time=timing is not None))


def _sample_points(mesh_shape: tuple[Dim, ...]) -> list[tuple[int, ...]]:
    names = sorted(set().union(*(sym.free_vars(d) for d in mesh_shape)))
    if not names:
        return [tuple(int(d) for d in mesh_shape)]
    return _mesh_points(mesh_shape, names, SAMPLE_SIZES, all_pairs_up_to=3) or [tuple(2 for _ in mesh_shape)]


def sample_points(mesh_shape: tuple[Dim, ...]) -> list[tuple[int, ...]]:
    """The concrete mesh sizes a plan is weighed at: the mesh's own when it is concrete, else
    samples 2, 3, 4, 8 of each symbol."""
    return _sample_points(mesh_shape)


@lru_cache(maxsize=4096)
def _plan_cached(
    mesh_shape, ndim: int, src: Placement, dst: Placement, version: int, extents: tuple[int, ...] | None = None,
    timing: Timing | None = None,
) -> tuple[Step, ...]:
    """``version``: of the step registry (a plan names step kinds, so new kinds mean new plans)."""
    points = _sample_points(mesh_shape)
    candidates: list[tuple[Step, ...]] = []
    best_at: dict[tuple[int, ...], tuple[Step, ...]] = {}  # each sample's own optimum (searched once)
    for p in points:
        plan = best_at[p] = _dijkstra(src, dst, ndim, p, extents, timing)
        if plan not in candidates:
            candidates.append(plan)
    if len(candidates) == 1:
        return candidates[0]
    optimum = {p: plan_cost(best_at[p], src, p, extents, timing) for p in points}

    def excess(plan):
        return sum((plan_cost(plan, src, p, extents, timing) - optimum[p]) for p in points)

    return min(
        candidates,
        key=lambda plan: (excess(plan), sum(map(_penalty, plan)), len(plan), candidates.index(plan)),
    )


def exact_extents(mesh: DeviceMesh, shape) -> tuple[int, ...] | None:
    """The tensor's extents when they and the mesh's sizes are all concrete (plans then count
    the padding of uneven blocks and pick block exchanges where those move less), else None."""
    if shape is None or not all(isinstance(d, int) for d in (*mesh.shape, *shape)):
        return None
    return tuple(shape)


def without_strided(p: Placement) -> Placement:
    """``p`` with its strided shards replicated."""
    return Placement(tuple(Replicate() if isinstance(s, StridedShard) else s for s in p.specs))


def strided_share(mesh: DeviceMesh, ndim: int, src: Placement, dst: Placement, sizes: tuple[int, ...],
                  timing: Timing | None = None) -> Fraction:
    """Bytes per worker, per byte of the tensor, of a redistribute from or to a strided layout:
    the plans between expanded forms that legalize-redistribute writes (``split_strided``); with
    ``timing``, the seconds of those plans made by time, as legalize plans them then."""
    total = Fraction(0)
    if src.is_strided:
        plain = without_strided(dst)
        wide, goal = expand_placement(src, src, ndim), expand_placement(plain, src, ndim)
        plan = plan_redistribute(mesh, ndim + len(src.strided), wide, goal, None, timing)
        total += plan_cost(plan, wide, sizes, None, timing)
        src = plain
    if dst.is_strided:
        wide, goal = expand_placement(src, dst, ndim), expand_placement(dst, dst, ndim)
        plan = plan_redistribute(mesh, ndim + len(dst.strided), wide, goal, None, timing)
        total += plan_cost(plan, wide, sizes, None, timing)
    return total


def plan_redistribute(
    mesh: DeviceMesh, ndim: int, src: Placement, dst: Placement, shape=None, timing: Timing | None = None
) -> tuple[Step, ...]:
    """The cheapest steps from ``src`` to ``dst`` on ``mesh`` for a tensor of rank ``ndim``.

    Any layout on the way is valid at every size (a cut that does not divide is padded). With
    symbolic sizes (or no ``shape``), costs take blocks to divide evenly, so the plan depends on
    the placements and the mesh, not on the tensor's sizes. When the mesh and the tensor's
    ``shape`` are concrete, costs are the exact bytes at those sizes: collectives move padded
    blocks, a block exchange only real elements. With ``timing``, the plan of least estimated
    time (module docstring)."""
    src.validate(mesh.ndim, ndim, "source placement")  # e.g. "P[max], P" mixes reductions: no plan is right
    dst.validate(mesh.ndim, ndim, "target placement")
    if src == dst:
        return ()
    for p in (src, dst):
        if p.is_strided:
            raise PlacementError(
                f"\"{p}\" is a strided layout: it is redistributed through its expanded form (legalize-redistribute, "
                f"docs/strided.md), not by steps on its own shape"
            )
    if src.is_block or dst.is_block:
        return _plan_block(mesh, ndim, src, dst, shape, timing)
    return _plan_cached(_ShapeBox(mesh.shape), ndim, src, dst, steps_version(), exact_extents(mesh, shape), timing)


def _plan_block(mesh: DeviceMesh, ndim: int, src: Placement, dst: Placement, shape,
                timing: Timing | None = None) -> tuple[Step, ...]:
    """Plans to or from a block layout (docs/blocks.md). Only a block exchange reaches or leaves
    one, and an exchange moves exactly what each device lacks, so from a layout without partials
    it is one exchange. A partial source is reduced first: over every way of dropping its partial
    axes (all_reduce to R, or reduce_scatter to S[d]) the cheapest reduction plus exchange, at
    the tensor's sizes, or summed over sample sizes when some are symbolic. A partial target is
    reached from its partial axes replicated, then local_partial."""
    exchange = get_step("exchange").name
    if not dst.is_block:
        mid = Placement(tuple(Replicate() if isinstance(s, Partial) else s for s in dst.specs))
        return (Step(exchange, -1, placement=mid),) + plan_redistribute(mesh, ndim, mid, dst, shape, timing)
    if not src.has_partial:
        return (Step(exchange, -1, placement=dst),)
    if shape is None:
        raise DistirError(f"a plan from \"{src}\" to the block layout \"{dst}\" needs the tensor's shape")
    paxes = src.partial_axes()
    options = [Replicate()] + [Shard(d) for d in range(ndim)]
    candidates = []
    for combo in itertools.product(options, repeat=len(paxes)):
        specs = list(src.specs)
        for axis, spec in zip(paxes, combo):
            specs[axis] = spec
        mid = Placement(tuple(specs))
        candidates.append(plan_redistribute(mesh, ndim, src, mid, shape, timing) + (Step(exchange, -1, placement=dst),))
    points = _block_points(mesh, shape, dst)

    def total(plan):
        cost = Fraction(0)
        for sizes, extents, target in points:
            concrete = plan[:-1] + (Step(exchange, -1, placement=target),)
            cost += plan_cost(concrete, src, sizes, extents, timing)
        return cost

    return min(candidates, key=lambda plan: (total(plan), len(plan), candidates.index(plan)))


def _block_points(mesh: DeviceMesh, shape, dst: Placement):
    """(mesh sizes, tensor extents, concrete block layout) to weigh plans to a block layout at:
    the sizes themselves when concrete; else each mesh symbol at 2, 3, 4, 8 and every other
    symbol (tensor and shard sizes) at 16 times that."""
    from ..ir.layout import concrete_placement

    dims = (*mesh.shape, *shape, *dst.block)
    names = sorted(set().union(*(sym.free_vars(d) for d in dims)))
    mesh_names = set().union(*(sym.free_vars(d) for d in mesh.shape))
    envs = [{}] if not names else [{n: v if n in mesh_names else 16 * v for n in names} for v in SAMPLE_SIZES]
    out = []
    for env in envs:
        try:
            sizes = tuple(sym.evaluate(d, env) for d in mesh.shape)
            extents = tuple(sym.evaluate(d, env) for d in shape)
            target = concrete_placement(dst, env)
        except (sym.SymbolicError, PlacementError):
            continue
        if all(s >= 1 for s in sizes) and all(e >= 0 for e in extents):
            out.append((sizes, extents, target))
    if not out:
        raise DistirError(f"no sample sizes give a valid mesh and tensor to weigh plans to \"{dst}\" at")
    return out


class _ShapeBox(tuple):
    """A mesh shape that hashes by its keys (PrimExprs are not hashable by value)."""

    def __new__(cls, shape):
        return super().__new__(cls, shape)

    def __hash__(self):
        return hash(tuple(sym.key(d) for d in self))

    def __eq__(self, other):
        return isinstance(other, tuple) and len(self) == len(other) and all(sym.equal(a, b) for a, b in zip(self, other))


def _sample_envs(names: list[str], samples, all_pairs_up_to: int) -> list[dict[str, int]]:
    """Values of ``names`` to sample sizes at: every combination of ``samples`` for up to
    ``all_pairs_up_to`` names (one empty env for none), else the same sample for all of them."""
    if len(names) <= all_pairs_up_to:
        return [dict(zip(names, vs)) for vs in itertools.product(samples, repeat=len(names))]
    return [dict.fromkeys(names, v) for v in samples]


def replan_envs(mesh_shape: tuple[Dim, ...]) -> list[dict[str, int]]:
    """The values of the mesh's symbols at which legalize compares a redistribute's plans
    (:data:`REPLAN_SIZES` of each symbol: all pairs for up to two symbols, else the same count for
    all), those where every size of the mesh is at least 1: the TVM export of a symbolic module runs
    the plan made for the count at these, the plan made for every count elsewhere."""
    names = sorted(set().union(*(sym.free_vars(d) for d in mesh_shape)))
    out = []
    for env in _sample_envs(names, REPLAN_SIZES, all_pairs_up_to=2):
        try:
            if all(sym.evaluate(d, env) >= 1 for d in mesh_shape):
                out.append(env)
        except sym.SymbolicError:
            continue
    return out


def replan_points(mesh_shape: tuple[Dim, ...]) -> list[tuple[int, ...]]:
    """Concrete mesh sizes at counts :data:`REPLAN_SIZES` of each symbol (all pairs for up to two
    symbols, else the same count for all)."""
    names = sorted(set().union(*(sym.free_vars(d) for d in mesh_shape)))
    return _mesh_points(mesh_shape, names, REPLAN_SIZES, all_pairs_up_to=2)


def _mesh_points(mesh_shape: tuple[Dim, ...], names: list[str], samples, all_pairs_up_to: int) -> list[tuple[int, ...]]:
    """The mesh's sizes at each of :func:`_sample_envs`, those that are valid (every size at least 1)."""
    points = []
    for env in _sample_envs(names, samples, all_pairs_up_to):
        try:
            sizes = tuple(sym.evaluate(d, env) for d in mesh_shape)
        except sym.SymbolicError:
            continue
        if all(s >= 1 for s in sizes):
            points.append(sizes)
    return points


@lru_cache(maxsize=4096)
def _needs_replan(mesh_shape, ndim: int, src: Placement, dst: Placement, shape: tuple[int, ...], version: int,
                  timing: Timing | None = None) -> bool:
    plan = _plan_cached(mesh_shape, ndim, src, dst, version, None, timing)
    return any(
        optimal_cost(sizes, ndim, src, dst, shape, timing) < plan_cost(plan, src, sizes, shape, timing)
        for sizes in replan_points(tuple(mesh_shape))
    )


def needs_replan(mesh: DeviceMesh, ndim: int, src: Placement, dst: Placement, shape, timing: Timing | None = None) -> bool:
    """Whether a redistribute on ``mesh`` (symbolic sizes) of a tensor of concrete ``shape`` has a
    count of :data:`REPLAN_SIZES` (per symbol) at which the exact optimum moves fewer bytes than the
    plan made for every count (with ``timing``: takes less time); legalize then leaves it to
    specialize to plan (``R.dist.replan``)."""
    if src == dst or all(isinstance(d, int) for d in mesh.shape):
        return False
    if shape is None or not all(isinstance(d, int) for d in shape):
        return False
    src.validate(mesh.ndim, ndim, "source placement")
    dst.validate(mesh.ndim, ndim, "target placement")
    return _needs_replan(_ShapeBox(mesh.shape), ndim, src, dst, tuple(shape), steps_version(), timing)


def is_optimal_everywhere(mesh: DeviceMesh, ndim: int, src: Placement, dst: Placement) -> bool:
    """Whether the chosen plan is optimal at every sampled size of the mesh's symbols.

    For a few transitions on N-D meshes with symbolic sizes no single plan is best at
    every size; the planner then takes the one with the smallest total excess."""
    plan = plan_redistribute(mesh, ndim, src, dst)
    points = _sample_points(tuple(mesh.shape))
    return all(plan_cost(plan, src, p) == plan_cost(_dijkstra(src, dst, ndim, p), src, p) for p in points)


def optimal_cost(
    mesh_sizes: tuple[int, ...], ndim: int, src: Placement, dst: Placement, extents: tuple[int, ...] | None = None,
    timing: Timing | None = None,
) -> Fraction:
    """The cost model's optimum at concrete mesh sizes (per worker, per byte of the tensor; with
    ``timing``, seconds)."""
    return plan_cost(_dijkstra(src, dst, ndim, mesh_sizes, extents, timing), src, mesh_sizes, extents, timing)


def plan_cost_formula(plan: tuple[Step, ...], src: Placement, mesh: DeviceMesh, nbytes: Dim) -> Dim:
    """Bytes each worker sends for ``plan``, as a formula in the mesh sizes."""
    total: Dim = 0
    state = src

    def held(p: Placement) -> Dim:
        return sym.floordiv(nbytes, sym.product(mesh.shape[a] for a, s in enumerate(p.specs) if isinstance(s, Shard)))

    for step in plan:
        if step.whole_layout:
            raise DistirError(
                f"{step}: the bytes of a block exchange are a sum over the devices, known at concrete sizes only"
            )
        nxt = step.apply(state, mesh.shape)
        n = mesh.shape[step.mesh_axis]
        piece = sym.floordiv(held(state), n) if _exchanged(state, nxt, step.mesh_axis) else held(state)
        num, den = step.step_kind.sent(n, held(state), held(nxt), piece)
        total = sym.add(total, sym.floordiv(num, den))
        state = nxt
    return total


def _blocks_along(sizes: tuple[int, ...], placement: Placement, dim: int) -> int:
    return _product(sizes[a] for a in placement.mesh_axes_of(dim))


def _product(sizes) -> int:
    out = 1
    for s in sizes:
        out *= s
    return out


__all__ = [
    "REPLAN_SIZES",
    "replan_envs",
    "Replicate",
    "Step",
    "Timing",
    "exact_extents",
    "exchange_link",
    "needs_replan",
    "optimal_cost",
    "plan_cost",
    "plan_cost_formula",
    "plan_redistribute",
    "replan_points",
    "sample_points",
    "step_cost",
    "step_link",
    "step_time",
    "timing_for",
]
