"""What a layout costs: the sizes a symbolic dim is taken at (the size hints, and the samples the
solver's objective sums over), the bytes (or, with axis costs, the time) of a redistribute as the
planner (:mod:`~distir.transform.redistribute_plan`) makes it, the bytes each worker holds, and
which cuts leave no worker empty."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from ...errors import DistirError
from ...ir import sym
from ...ir.axis_cost import AxisCostError, AxisCosts
from ...ir.layout import concrete_placement
from ...ir.mesh import DeviceMesh
from ...ir.placement import Placement, Replicate, Shard, StridedShard
from ...ir.types import dtype_bytes
from ..redistribute_plan import Timing, plan_cost, plan_redistribute, strided_share
from .sharding_graph import Graph, Slot

MESH_SIZE_HINT = 4
DIM_SIZE_HINT = 64
# the sizes the objective is summed over (a layout that wins at one guessed size may lose badly at
# another): each symbolic mesh size at 2, 4 and 8, each other symbolic dim at 16, 64 and 512 with
# weight 512 // size, so that bytes proportional to such a dim (activations) weigh alike at every
# size and bytes independent of it (weights) weigh more where they are a larger share (short sequences)
MESH_SAMPLES = (2, 4, 8)
DIM_SAMPLES = ((16, 32), (64, 8), (512, 1))
INF = Fraction(10**30)


class CostModel:
    """Sizes and bytes at the size hints: a symbolic mesh size counts as 4 and any other symbolic
    dim as 64 unless ``size_hints`` says otherwise (:meth:`redistribute_cost`); and the same summed
    over the samples ``MESH_SAMPLES`` x ``DIM_SAMPLES`` of the sizes ``size_hints`` leaves open
    (:meth:`sampled_cost`, the solver's objective).

    With ``axis_costs`` (docs/redistribute.md, time costs) a redistribute costs the estimated time of
    the plan legalize makes by time, counted as the bytes the mesh's fastest axis moves in that time
    (so a byte over the fastest axis still weighs about one, and the tie-breaks stay below it)."""

    def __init__(self, graph: Graph, size_hints: Mapping[str, int] | None = None, dim_size: int = DIM_SIZE_HINT,
                 fit_count: int | None = None, axis_costs: AxisCosts | None = None,
                 mesh_samples: tuple[int, ...] | None = None):
        """``dim_size``: a symbolic dim other than a mesh size, at the size hints. ``fit_count``: the
        count a symbolic mesh size is taken at by :meth:`fits` (None: the hinted mesh size).
        ``mesh_samples``: the device counts a symbolic mesh size is summed over (the declared counts of
        one class, see :mod:`~distir.transform.layout_choice.count_classes`; default ``MESH_SAMPLES``),
        and then taken at their largest at the size hints."""
        self.axis_costs = axis_costs
        self._timed: dict[tuple, Fraction | None] = {}
        self.g = graph
        self.env_sizes = dict(size_hints or {})
        self.dim_size, self.fit_count = dim_size, fit_count
        self.mesh_samples = tuple(mesh_samples) if mesh_samples else MESH_SAMPLES
        self.mesh_hint = max(mesh_samples) if mesh_samples else MESH_SIZE_HINT
        self._sizes: dict[int, tuple[int, ...]] = {}
        self._nbytes: dict[int, int] = {}
        self._nbytes_at: dict[tuple[tuple, int, int], int] = {}
        self._hint_share: dict[tuple, Fraction | None] = {}
        self._share_cache: dict[tuple, tuple[Fraction, ...] | None] = {}
        self._fixed: dict[tuple, tuple[int, ...] | None] = {}  # extents of values whose sizes the hints fix
        self._padded: dict[tuple, Fraction | None] = {}
        self._sampled: dict[tuple[tuple, Placement | None, Placement], Fraction] = {}
        self._likes: dict[int, tuple] = {}
        self._slot_of: dict[tuple, Slot] = {}  # a slot of each like (:func:`makes_same_choices` prices it again)
        self._fits: dict[tuple, bool] = {}
        self._at_hint: dict[tuple, Fraction] = {}  # redistribute_cost by (like, src, dst)
        self._held_share: dict[tuple, Fraction] = {}
        self._held: dict[tuple, Fraction] = {}
        self._placements: dict[Placement, Placement] = {}
        self._meshes = {id(m): m for m in graph.mesh_of.values()}  # alive while their ids key the caches
        # an op's strategies depend on its structure and on which layouts fit (this model's sizes):
        # programs built with this model remember them here (Program.op)
        self.strategies: dict[tuple, list] = {}
        self._replicated_axes: dict[int, frozenset[int]] = {}

    def one(self, p: Placement) -> Placement:
        """The one object of placement ``p`` among the strategies built with this model: the programs'
        tables and the costs' memos, keyed by placements, then find them by identity."""
        return self._placements.setdefault(p, p)

    def mesh(self, s: Slot) -> DeviceMesh:
        return self.g.mesh_of[s.id]

    def mesh_sizes(self, mesh: DeviceMesh) -> tuple[int, ...]:
        key = id(mesh)
        if key not in self._sizes:
            self._sizes[key] = tuple(self._eval(d, self.mesh_hint) for d in mesh.shape)
        return self._sizes[key]

    def _eval(self, d, default: int) -> int:
        if isinstance(d, int):
            return d
        env = {name: self.env_sizes.get(name, default) for name in sym.free_vars(d)}
        try:
            return max(int(sym.evaluate(d, env)), 1)
        except DistirError:
            return default

    def nbytes(self, s: Slot) -> int:
        n = self._nbytes.get(s.id)
        if n is None:
            n = self._nbytes[s.id] = self.nbytes_at(s, self.mesh_hint, self.dim_size)
        return n

    def like(self, s: Slot) -> tuple:
        """What the costs of ``s`` depend on: its type and mesh (alike values of the layers of a stack
        share their costs)."""
        key = self._likes.get(s.id)
        if key is None:
            key = self._likes[s.id] = (s.tensor, id(self.g.mesh_of.get(s.id)))
            self._slot_of.setdefault(key, s)
        return key

    def replicated_axes(self, mesh: DeviceMesh) -> frozenset[int]:
        """The axes of ``mesh`` every op on it runs replicated along: those of one device that no layout
        given to a value of the function (a parameter's type, a hint) cuts. Along such an axis every
        layout holds and sends what R does, so offering the others only multiplied each op's strategies
        (the bundled Llama layer on a ``(num_workers, 1)`` mesh took 100x the 1-D mesh's time); where a
        given layout cuts one, its ops keep every strategy, so that no layout change is forced there."""
        found = self._replicated_axes.get(id(mesh))
        if found is None:
            axes = set(mesh.unit_axes)
            for s in self.g.slots if axes else ():  # most meshes have none: no walk over the values
                if s.fixed is not None and self.g.mesh_of.get(s.id) == mesh:
                    axes -= set(range(mesh.ndim)) if s.fixed.is_block else {
                        a for a in axes if not isinstance(s.fixed[a], Replicate)}
            found = self._replicated_axes[id(mesh)] = frozenset(axes)
        return found

    def nbytes_at(self, s: Slot, mesh_size: int, dim_size: int) -> int:
        """Bytes of ``s`` with symbolic mesh sizes at ``mesh_size`` and other symbolic dims at ``dim_size``
        (``size_hints`` first)."""
        key = (self.like(s), mesh_size, dim_size)
        if key in self._nbytes_at:
            return self._nbytes_at[key]
        mesh_names = set().union(*(sym.free_vars(d) for d in self.mesh(s).shape)) if s.id in self.g.mesh_of else set()
        n = dtype_bytes(s.tensor.dtype)
        for d in s.tensor.shape:
            names = sym.free_vars(d) if not isinstance(d, int) else set()
            n *= self._eval(d, mesh_size if names and names <= mesh_names else dim_size)
        self._nbytes_at[key] = n
        return n

    def sampled_cost(self, s: Slot, src: Placement | None, dst: Placement) -> Fraction:
        """:meth:`redistribute_cost` summed over the sampled sizes (weighted, see ``DIM_SAMPLES``)."""
        if src is None:
            return Fraction(0) if dst.is_replicated else INF
        if src == dst:
            return Fraction(0)
        if _block_and_strided(src, dst):  # through R, as legalize-redistribute writes it
            mid = Placement.replicated(self.mesh(s).ndim)
            return self.sampled_cost(s, src, mid) + self.sampled_cost(s, mid, dst)
        if src.is_block or dst.is_block:
            return self.block_cost(s, src, dst)
        key = (self.like(s), src, dst)
        if key in self._sampled:
            return self._sampled[key]
        if self.axis_costs is not None:
            total = Fraction(0)
            mesh = self.mesh(s)
            for m in self.mesh_samples:
                for v, w in DIM_SAMPLES:
                    c = self.timed_cost(mesh, s.tensor.ndim, src, dst, tuple(self._eval(d, m) for d in mesh.shape),
                                        self.nbytes_at(s, m, v))
                    if c is None:
                        return INF
                    total += w * c
            self._sampled[key] = total
            return total
        fixed = self._fixed_extents(s)
        if fixed is not None and not (src.is_strided or dst.is_strided):
            share = self._padded_share(self.mesh(s), s.tensor.shape, src, dst, fixed)
            shares = None if share is None else (share,) * len(self.mesh_samples)
        else:
            shares = self._shares(self.mesh(s), s.tensor.ndim, src, dst)
        if shares is None:
            return INF
        total = Fraction(0)
        for m, share in zip(self.mesh_samples, shares):
            if share:
                total += share * sum(w * self.nbytes_at(s, m, v) for v, w in DIM_SAMPLES)
        self._sampled[key] = total
        return total

    def _shares(self, mesh: DeviceMesh, ndim: int, src: Placement, dst: Placement) -> tuple[Fraction, ...] | None:
        """The planner's bytes per worker per byte of the tensor at each of ``mesh_samples`` (None: no plan)."""
        key = (id(mesh), ndim, src, dst)
        if key not in self._share_cache and (src.is_strided or dst.is_strided):
            try:
                self._share_cache[key] = tuple(
                    strided_share(mesh, ndim, src, dst, tuple(self._eval(d, m) for d in mesh.shape)) for m in self.mesh_samples)
            except DistirError:
                self._share_cache[key] = None
        if key not in self._share_cache:
            try:
                plan = plan_redistribute(mesh, ndim, src, dst)
            except DistirError:
                self._share_cache[key] = None
            else:
                self._share_cache[key] = tuple(
                    plan_cost(plan, src, tuple(self._eval(d, m) for d in mesh.shape)) for m in self.mesh_samples)
        return self._share_cache[key]

    def _fixed_extents(self, s: Slot) -> tuple[int, ...] | None:
        """The extents of ``s`` when ``size_hints`` fixes every symbol of its shape and of its mesh
        (the user gave the sizes they run at), else None."""
        key = self.like(s)
        if key not in self._fixed:
            dims = (*s.tensor.shape, *self.mesh(s).shape)
            names = set().union(*(sym.free_vars(d) for d in dims if not isinstance(d, int)))
            self._fixed[key] = tuple(self._eval(d, 1) for d in s.tensor.shape) if names <= set(self.env_sizes) else None
        return self._fixed[key]

    def _padded_share(self, mesh: DeviceMesh, shape, src: Placement, dst: Placement,
                      extents: tuple[int, ...]) -> Fraction | None:
        """Bytes per worker per byte of a tensor of ``shape``, at ``extents``, of the plan legalize
        makes from ``src`` to ``dst``, counting the padding of uneven blocks as the collectives
        move it (docs/uneven.md): cutting a batch of 2 over 4 workers is priced as the batch of 4
        it moves. None: no plan."""
        key = (id(mesh), all(isinstance(d, int) for d in shape), src, dst, extents)  # a plan sees the shape only as concrete or not
        if key not in self._padded:
            try:
                plan = plan_redistribute(mesh, len(extents), src, dst, shape)
            except DistirError:
                self._padded[key] = None
            else:
                self._padded[key] = plan_cost(plan, src, self.mesh_sizes(mesh), extents)
        return self._padded[key]

    def timed_cost(self, mesh: DeviceMesh, ndim: int, src: Placement, dst: Placement, sizes: tuple[int, ...],
                   nbytes: int) -> Fraction | None:
        """The time of the plan legalize makes by time for ``nbytes`` from ``src`` to ``dst``, at mesh
        ``sizes``, as bytes of the mesh's fastest axis (class docstring); None: no plan."""
        key = (id(mesh), ndim, src, dst, sizes, nbytes)
        if key not in self._timed:
            costs = self.axis_costs.for_mesh(mesh.ndim, "legalize-redistribute.axis_costs")
            timing = Timing(costs, nbytes)
            try:
                if src.is_strided or dst.is_strided:
                    seconds = strided_share(mesh, ndim, src, dst, sizes, timing)
                else:
                    seconds = plan_cost(plan_redistribute(mesh, ndim, src, dst, None, timing), src, sizes, None, timing)
                self._timed[key] = seconds * max(c.bandwidth for c in costs)
            except AxisCostError:
                raise
            except DistirError:
                self._timed[key] = None
        return self._timed[key]

    def redistribute_cost(self, s: Slot, src: Placement | None, dst: Placement) -> Fraction:
        """Bytes each worker sends to turn ``s`` from ``src`` into ``dst`` (the planner's model; with
        axis costs, the plan's time as bytes, see the class docstring). Remembered by what it depends
        on, the value's type and mesh and the two layouts: alike values are priced once."""
        if src is None:
            return Fraction(0) if dst.is_replicated else INF  # a plain value is the same everywhere
        if src == dst:
            return Fraction(0)
        key = (self.like(s), src, dst)
        found = self._at_hint.get(key)
        if found is None:
            found = self._at_hint[key] = self._redistribute_cost(s, src, dst)
        return found

    def _redistribute_cost(self, s: Slot, src: Placement, dst: Placement) -> Fraction:
        if _block_and_strided(src, dst):  # through R, as legalize-redistribute writes it
            mid = Placement.replicated(self.mesh(s).ndim)
            return self.redistribute_cost(s, src, mid) + self.redistribute_cost(s, mid, dst)
        if src.is_block or dst.is_block:
            return self.block_cost(s, src, dst)
        mesh = self.mesh(s)
        if self.axis_costs is not None:
            c = self.timed_cost(mesh, s.tensor.ndim, src, dst, self.mesh_sizes(mesh), self.nbytes(s))
            return INF if c is None else c
        fixed = self._fixed_extents(s)
        if fixed is not None and not (src.is_strided or dst.is_strided):
            share = self._padded_share(mesh, s.tensor.shape, src, dst, fixed)
            return INF if share is None else share * self.nbytes(s)
        key = (id(mesh), s.tensor.ndim, src, dst)
        if key not in self._hint_share and (src.is_strided or dst.is_strided):
            try:
                self._hint_share[key] = strided_share(mesh, s.tensor.ndim, src, dst, self.mesh_sizes(mesh))
            except DistirError:
                self._hint_share[key] = None
        if key not in self._hint_share:
            try:
                plan = plan_redistribute(mesh, s.tensor.ndim, src, dst)
            except DistirError:
                self._hint_share[key] = None
            else:
                self._hint_share[key] = plan_cost(plan, src, self.mesh_sizes(mesh))
        share = self._hint_share[key]
        return INF if share is None else share * self.nbytes(s)

    def block_cost(self, s: Slot, src: Placement, dst: Placement) -> Fraction:
        """A redistribute to or from a block layout, costed at the tensor's (hinted) sizes: block
        exchanges are counted element by element (docs/blocks.md)."""
        mesh = self.mesh(s)
        env = {n: self.env_sizes.get(n, self.dim_size) for d in (*s.tensor.shape, *(src.block or dst.block))
               for n in sym.free_vars(d)}
        env.update({n: self.env_sizes.get(n, self.mesh_hint) for d in mesh.shape for n in sym.free_vars(d)})
        try:
            extents = tuple(sym.evaluate(d, env) for d in s.tensor.shape)
            timing = None
            if self.axis_costs is not None:
                timing = Timing(self.axis_costs.for_mesh(mesh.ndim, "legalize-redistribute.axis_costs"), self.nbytes(s))
            plan = plan_redistribute(mesh, s.tensor.ndim, src, dst, s.tensor.shape, timing)
            cost, state = Fraction(0), concrete_placement(src, env)
            for step in plan:
                if step.whole_layout:
                    step = type(step)(step.kind, step.mesh_axis, placement=concrete_placement(step.placement, env))
                cost += plan_cost((step,), state, self.mesh_sizes(mesh), extents, timing)
                state = step.apply(state, self.mesh_sizes(mesh))
        except AxisCostError:
            raise
        except DistirError:
            return INF
        if timing is not None:
            return cost * max(c.bandwidth for c in timing.costs)
        return cost * self.nbytes(s)

    def held_share(self, s: Slot, p: Placement) -> Fraction:
        """The share of ``s`` each worker holds in layout ``p``."""
        mesh = self.mesh(s)
        key = (id(mesh), p)
        share = self._held_share.get(key)
        if share is None:
            sizes = self.mesh_sizes(mesh)
            count = 1
            for a, spec in enumerate(p.specs):
                if isinstance(spec, Shard):
                    count *= sizes[a]
            share = self._held_share[key] = Fraction(1, count)
        return share

    def held(self, s: Slot, p: Placement) -> Fraction:
        """Bytes of ``s`` each worker holds in layout ``p`` at the size hints."""
        key = (self.like(s), p)
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = self.held_share(s, p) * self.nbytes(s)
        return held

    def fits(self, s: Slot, p: Placement, mesh: DeviceMesh) -> bool:
        """Whether ``p`` gives every worker some of each static dim of ``s`` at the hinted mesh size.

        Any cut is exact (uneven blocks are padded), but cutting a dim of 2 over 4 workers leaves
        two with nothing; propagation does not introduce such a layout. Dynamic dims are the user's
        to size."""
        key = (self.like(s), p, id(mesh))
        found = self._fits.get(key)
        if found is None:
            self._meshes.setdefault(id(mesh), mesh)  # alive while its id keys the memo
            found = self._fits[key] = self._fits_at(s, p, mesh)
        return found

    def _fits_at(self, s: Slot, p: Placement, mesh: DeviceMesh) -> bool:
        if self.fit_count is None:
            sizes = self.mesh_sizes(mesh)
        else:
            sizes = tuple(d if isinstance(d, int) else self.fit_count for d in mesh.shape)
        for d, size in enumerate(s.tensor.shape):
            axes = p.mesh_axes_of(d)
            if not axes or not isinstance(size, int):
                continue
            count = 1
            for a in axes:
                count *= sizes[a]
            if size < count:
                return False
        return True


    def fitted(self, s: Slot, p: Placement, mesh: DeviceMesh) -> Placement:
        """``p`` with the innermost cuts of each dim that does not :meth:`fits` replaced by R.

        A parameter's preferred layout combines the wishes of several consumers (``S[0], R``
        from one, ``R, S[0]`` from another give ``S[0], S[0]``): cut twice, a dim may no longer
        divide at the hinted device count, so propagation keeps only the cuts it can afford.
        Combined wishes may also be no layout at all where a strided shard is involved (``S[0/2]``
        from two consumers on two axes, docs/strided.md): a strided dim keeps its first cut, and a
        strided shard the tensor's shape does not allow is replaced by R."""
        p = _strided_fitted(p, s.tensor.shape)
        while not self.fits(s, p, mesh):
            for d in range(s.tensor.ndim):
                axes = p.mesh_axes_of(d)
                if axes and not self.fits(s, _only_dim(p, d), mesh):
                    p = p.replace(axes[-1], Replicate())
                    break
            else:
                break
        return p


def makes_same_choices(a: CostModel, b: CostModel, solver: bool = False) -> bool:
    """Whether a layout chosen with ``a`` is the one ``b`` would choose, read off what ``a`` was asked:
    every cut ``a`` was asked about fits in ``b`` alike, and every cost ``a`` priced is the same
    multiple in ``b`` (one multiple for the sums over the samples, the solver's objective, and one for
    the costs at the hint, which the greedy choice adds up), zero where it is zero. ``solver``: ``a``
    chose for the solver, whose plan reads the costs at the hint only to pick, among the copies of a
    value that exist, the one to redistribute from: there they need only order the sources of each
    value and layout alike. Costs whose multiple differs, which is what a count class changes where it
    changes anything (an all-to-all's share falls as 1/n² where an all-gather's does not, an axis'
    latency does not scale, a cut leaves workers empty at one count and not at another), make the
    answer False: the layout is chosen again. Tie-breaks on the bytes held are not compared: a plan
    whose bytes sent are least at ``a`` is least at ``b``, whichever of its ties is kept."""
    if a.g is not b.g:
        return False
    for key, fit in a._fits.items():
        like, p, mesh_id = key
        if b.fits(a._slot_of[like], p, a._meshes[mesh_id]) != fit:
            return False
    if not _one_multiple(a._sampled, b.sampled_cost, a._slot_of):
        return False
    if not solver:
        return _one_multiple(a._at_hint, b.redistribute_cost, a._slot_of)
    by_target: dict[tuple, list[tuple[Fraction, Fraction]]] = {}
    for (like, src, dst), was in a._at_hint.items():
        by_target.setdefault((like, dst), []).append((was, b.redistribute_cost(a._slot_of[like], src, dst)))
    for pairs in by_target.values():
        pairs.sort()
        if any(x[0] == y[0] and x[1] != y[1] or x[1] > y[1] for x, y in zip(pairs, pairs[1:])):
            return False
    return True


def _one_multiple(memo: dict, price, slot_of: dict) -> bool:
    """Whether ``price`` gives each entry of ``memo`` (``(like, src, dst) -> cost``) one multiple of
    it: zero and infinite entries alike, the others all scaled by one factor."""
    ratio = None
    for (like, src, dst), was in memo.items():
        now = price(slot_of[like], src, dst)
        if (was == INF) != (now == INF) or (was == 0) != (now == 0):
            return False
        if was in (0, INF):
            continue
        if ratio is None:
            ratio = now / was
        elif now != ratio * was:
            return False
    return True


def _strided_fitted(p: Placement, shape) -> Placement:
    """``p`` with each strided shard the tensor's ``shape`` does not allow (its part count does not
    divide the dim, or leaves parts of one element) replaced by R, then every cut of a dim that an
    earlier mesh axis cuts, where either cut is strided, replaced by R (a strided dim is cut by one
    mesh axis only)."""
    if not p.is_strided:
        return p
    specs = list(p.specs)
    for a, x in enumerate(specs):
        if isinstance(x, StridedShard):
            alone = Placement(tuple(x if i == a else Replicate() for i in range(len(specs))))
            try:
                alone.validate(len(specs), len(shape), shape=tuple(shape))
            except DistirError:
                specs[a] = Replicate()
    for a, x in enumerate(specs):
        if isinstance(x, (Shard, StridedShard)):
            before = [y for y in specs[:a] if isinstance(y, (Shard, StridedShard)) and y.dim == x.dim]
            if before and (isinstance(x, StridedShard) or any(isinstance(y, StridedShard) for y in before)):
                specs[a] = Replicate()
    return Placement(tuple(specs))


def _only_dim(p: Placement, d: int) -> Placement:
    """``p`` with every cut of a dim other than ``d`` replaced by R."""
    return Placement(tuple(x if isinstance(x, Shard) and x.dim == d else Replicate() for x in p.specs))


def _block_and_strided(src: Placement, dst: Placement) -> bool:
    """A redistribute between a block layout and a strided one: it goes through R."""
    return (src.is_block and dst.is_strided) or (src.is_strided and dst.is_block)
