"""Whole-program layout choice: the layouts of all values chosen together, as an integer program.

The problem (Alpa's formulation, as XLA's auto-sharding uses it), over the graph of
:mod:`~distir.transform.sharding_graph`:

- each op (a :class:`~distir.transform.sharding_graph.Site`) runs in one *strategy*: input
  placements its sharding rule accepts and the output placements they give
  (:func:`site_strategies`); a binary variable per strategy, exactly one chosen;
- each value (a slot; a hint's value is the value it annotates) is produced in one layout,
  its *primary*: the producer's chosen output, or for a parameter its given layout or, when
  free, a binary choice among the layouts its consumers read;
- a consumer that reads a value in layout ``q`` *needs* it in ``q``; an op reading a hint
  reads it in the hinted layout (a recomputation may read the annotated value in any); each needed layout is
  supplied once (later readers reuse it) from the primary by a redistribute, costed by the
  planner (:func:`~distir.transform.redistribute_plan.plan_redistribute`, bytes per worker),
  or by recomputing the producer from inputs in matching layouts (reshape, permute,
  elementwise: ops without reductions), which needs those inputs in turn;
- a result is wanted whole: the cost of gathering it counts (a partial is reduced in the
  program; a sharded result stays sharded and the runner reassembles it, but that gather is
  counted, so that no layout wins by leaving its gather outside the program). A declared
  DTensor return type, or a result bound with a sharded DTensor type, is needed as it says;
- hints fix a value's layout as a need (and a parameter's primary);
- a search over parameter layouts (auto-shard) gives each free parameter its own candidate layouts
  and adds linear limits on the chosen ones, a memory budget (:class:`ParamChoice`), and may bound
  the peak live activation bytes per worker (:class:`ActivationLimit`, rows per program point).

The objective is the bytes every worker sends, summed over sampled sizes (``MESH_SAMPLES`` x
``DIM_SAMPLES``, see :meth:`CostModel.sampled_cost`), so that no layout wins at one guessed
size only. Long functions are solved in windows (:func:`solve_layouts`). Ties are broken by a
second program over the layouts that send the least bytes, in this order of weight: output
layouts that differ from the preferences of
:func:`~distir.transform.sharding_graph.preferred_placements` (so that where costs tie the answer
is the one a reader of the hints expects), fewer redistributes and recomputations, less memory per
worker, and cuts of outer dims before inner ones. ``scipy.optimize.milp`` (HiGHS) solves both; the
model is built in the order of the bindings and the solver is deterministic, so the same module
gives the same layout.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
from scipy.optimize import LinearConstraint, milp
from scipy.sparse import coo_matrix

from ..errors import DiagnosticError, DistirError, TypeInferenceError
from ..ir import sym
from ..ir.axis_cost import AxisCostError, AxisCosts
from ..ir.expr import Call, Tuple, TupleGetItem, Var
from ..ir.layout import concrete_placement, local_bytes
from ..ir.mesh import DeviceMesh
from ..ir.placement import Partial, Placement, Replicate, Shard, StridedShard
from ..ir.sharding import forward
from ..ir.steps import get_step
from ..ir.types import DTensorType, TupleType, dtype_bytes
from ..quiet import native_output_silenced
from .redistribute_plan import Timing, exchange_link, plan_cost, plan_redistribute, strided_share, timing_for
from .sharding_graph import Graph, Preferences, Site, Slot, field_slots

__all__ = ["ActivationLimit", "CostModel", "LayoutPlan", "ParamChoice", "Solved", "Strategy", "alternative",
           "function_peak", "site_strategies",
           "solve_layouts", "visible_layouts"]

MESH_SIZE_HINT = 4
DIM_SIZE_HINT = 64
# the sizes the objective is summed over (a layout that wins at one guessed size may lose badly at
# another): each symbolic mesh size at 2, 4 and 8, each other symbolic dim at 16, 64 and 512 with
# weight 512 // size, so that bytes proportional to such a dim (activations) weigh alike at every
# size and bytes independent of it (weights) weigh more where they are a larger share (short sequences)
MESH_SAMPLES = (2, 4, 8)
DIM_SAMPLES = ((16, 32), (64, 8), (512, 1))
INF = Fraction(10**30)
ALIAS_OPS = ("dist.annotate_sharding",)  # on one mesh: the value itself, laid out so

# tie-break weights (the second program's objective, among the layouts sending the least bytes)
W_PREFERENCE = 4  # per mesh axis where an output differs from the preferred layout
W_MOVE = 2  # per redistribute emitted
W_RECOMPUTE = 8  # per recomputation emitted (more than a preference: no op is computed twice for a tie)
W_MEMORY = 1  # per value, times the share of it each worker holds
# per value, times the dims its layout cuts (summed): of two layouts alike in all else, the one
# cutting outer dims, so that exact ties do not fall to the solver's internals (and the windows of
# a stack, each ending in such a tie, stay alike); far below a difference in memory
W_OUTER_DIMS = 1 / 256
MEMORY_WEIGHT = Fraction(0)  # bytes held count only as a tie-break (W_MEMORY), not against bytes sent
# HiGHS, exact (no gap). Presolve off: on these programs (a few thousand columns, mostly implied by a
# few hundred strategy choices) it costs more than it saves (measured: frontend Llama 1.4 s -> 0.6 s)
SOLVER_OPTIONS = {"mip_rel_gap": 0.0, "presolve": False}


class CostModel:
    """Sizes and bytes at the size hints: a symbolic mesh size counts as 4 and any other symbolic
    dim as 64 unless ``size_hints`` says otherwise (:meth:`redistribute_cost`); and the same summed
    over the samples ``MESH_SAMPLES`` x ``DIM_SAMPLES`` of the sizes ``size_hints`` leaves open
    (:meth:`sampled_cost`, the solver's objective).

    With ``axis_costs`` (docs/redistribute.md, time costs) a redistribute costs the estimated time of
    the plan legalize makes by time, counted as the bytes the mesh's fastest axis moves in that time
    (so a byte over the fastest axis still weighs about one, and the tie-breaks stay below it)."""

    def __init__(self, graph: Graph, size_hints: Mapping[str, int] | None = None, dim_size: int = DIM_SIZE_HINT,
                 fit_count: int | None = None, axis_costs: AxisCosts | None = None):
        """``dim_size``: a symbolic dim other than a mesh size, at the size hints. ``fit_count``: the
        count a symbolic mesh size is taken at by :meth:`fits` (None: the hinted mesh size)."""
        self.axis_costs = axis_costs
        self._timed: dict[tuple, Fraction | None] = {}
        self.g = graph
        self.env_sizes = dict(size_hints or {})
        self.dim_size, self.fit_count = dim_size, fit_count
        self._sizes: dict[int, tuple[int, ...]] = {}
        self._nbytes: dict[int, int] = {}
        self._nbytes_at: dict[tuple[int, int, int], int] = {}
        self._hint_share: dict[tuple, Fraction | None] = {}
        self._share_cache: dict[tuple, tuple[Fraction, ...] | None] = {}
        self._sampled: dict[tuple[int, Placement | None, Placement], Fraction] = {}

    def mesh(self, s: Slot) -> DeviceMesh:
        return self.g.mesh_of[s.id]

    def mesh_sizes(self, mesh: DeviceMesh) -> tuple[int, ...]:
        key = id(mesh)
        if key not in self._sizes:
            self._sizes[key] = tuple(self._eval(d, MESH_SIZE_HINT) for d in mesh.shape)
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
            n = self._nbytes[s.id] = self.nbytes_at(s, MESH_SIZE_HINT, self.dim_size)
        return n

    def nbytes_at(self, s: Slot, mesh_size: int, dim_size: int) -> int:
        """Bytes of ``s`` with symbolic mesh sizes at ``mesh_size`` and other symbolic dims at ``dim_size``
        (``size_hints`` first)."""
        key = (s.id, mesh_size, dim_size)
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
        if src.is_block or dst.is_block:
            return self.block_cost(s, src, dst)
        key = (s.id, src, dst)
        if key in self._sampled:
            return self._sampled[key]
        if self.axis_costs is not None:
            total = Fraction(0)
            mesh = self.mesh(s)
            for m in MESH_SAMPLES:
                for v, w in DIM_SAMPLES:
                    c = self.timed_cost(mesh, s.tensor.ndim, src, dst, tuple(self._eval(d, m) for d in mesh.shape),
                                        self.nbytes_at(s, m, v))
                    if c is None:
                        return INF
                    total += w * c
            self._sampled[key] = total
            return total
        shares = self._shares(self.mesh(s), s.tensor.ndim, src, dst)
        if shares is None:
            return INF
        total = Fraction(0)
        for m, share in zip(MESH_SAMPLES, shares):
            if share:
                total += share * sum(w * self.nbytes_at(s, m, v) for v, w in DIM_SAMPLES)
        self._sampled[key] = total
        return total

    def _shares(self, mesh: DeviceMesh, ndim: int, src: Placement, dst: Placement) -> tuple[Fraction, ...] | None:
        """The planner's bytes per worker per byte of the tensor at each of ``MESH_SAMPLES`` (None: no plan)."""
        key = (id(mesh), ndim, src, dst)
        if key not in self._share_cache and (src.is_strided or dst.is_strided):
            try:
                self._share_cache[key] = tuple(
                    strided_share(mesh, ndim, src, dst, tuple(self._eval(d, m) for d in mesh.shape)) for m in MESH_SAMPLES)
            except DistirError:
                self._share_cache[key] = None
        if key not in self._share_cache:
            try:
                plan = plan_redistribute(mesh, ndim, src, dst)
            except DistirError:
                self._share_cache[key] = None
            else:
                self._share_cache[key] = tuple(
                    plan_cost(plan, src, tuple(self._eval(d, m) for d in mesh.shape)) for m in MESH_SAMPLES)
        return self._share_cache[key]

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
        axis costs, the plan's time as bytes, see the class docstring)."""
        if src is None:
            return Fraction(0) if dst.is_replicated else INF  # a plain value is the same everywhere
        if src == dst:
            return Fraction(0)
        if src.is_block or dst.is_block:
            return self.block_cost(s, src, dst)
        mesh = self.mesh(s)
        if self.axis_costs is not None:
            c = self.timed_cost(mesh, s.tensor.ndim, src, dst, self.mesh_sizes(mesh), self.nbytes(s))
            return INF if c is None else c
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
        env.update({n: self.env_sizes.get(n, MESH_SIZE_HINT) for d in mesh.shape for n in sym.free_vars(d)})
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
        sizes = self.mesh_sizes(self.mesh(s))
        count = 1
        for a, spec in enumerate(p.specs):
            if isinstance(spec, Shard):
                count *= sizes[a]
        return Fraction(1, count)

    def fits(self, s: Slot, p: Placement, mesh: DeviceMesh) -> bool:
        """Whether ``p`` gives every worker some of each static dim of ``s`` at the hinted mesh size.

        Any cut is exact (uneven blocks are padded), but cutting a dim of 2 over 4 workers leaves
        two with nothing; propagation does not introduce such a layout. Dynamic dims are the user's
        to size."""
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


def _units(values: list[Fraction]) -> np.ndarray:
    """``values`` in units of their greatest common divisor: whole numbers, as floats."""
    unit = Fraction(0)
    for x in values:
        if x:
            unit = Fraction(math.gcd(unit.numerator * x.denominator, x.numerator * unit.denominator),
                            unit.denominator * x.denominator) if unit else x
    unit = unit or Fraction(1)
    return np.array([float(x / unit) for x in values])


def _cut_dims(p: Placement) -> int:
    """The dims ``p`` cuts, summed (a tie-break: outer dims first)."""
    return sum(x.dim for x in p.specs if isinstance(x, Shard))


def _only_dim(p: Placement, d: int) -> Placement:
    """``p`` with every cut of a dim other than ``d`` replaced by R."""
    return Placement(tuple(x if isinstance(x, Shard) and x.dim == d else Replicate() for x in p.specs))


@dataclass(frozen=True)
class Strategy:
    """One way to run an op: its inputs' placements and the outputs' placements they give."""

    ins: tuple[Placement, ...]
    outs: tuple[Placement, ...]


def site_strategies(site: Site, cost: CostModel, partial_ops: list[set[str]], keep=None) -> list[Strategy]:
    """Every strategy of ``site`` its rule accepts, per mesh axis: all replicated; each factor of
    an input dim sharded in every input holding it; partial inputs passed through where the op is
    linear (only for inputs that may come partial: ``partial_ops[k]``). ``keep(slot, placement)``
    says a layout that does not :meth:`CostModel.fits` is allowed anyway (a given layout)."""
    rule = site.rule
    n, ndim = len(site.ins), site.mesh.ndim
    replicated = Replicate()
    options: list[tuple] = [(replicated,) * n]
    for f, q in site.cuts():
        if f in rule.blocked:
            continue
        opt = tuple(site.input_spec(k, f, q) for k in range(n))
        if opt not in options:
            options.append(opt)
    for op, mode in rule.partial.items():
        can = [k for k in range(n) if op in partial_ops[k]]
        if mode == "all":
            if n and len(can) == n:
                options.append((Partial(op),) * n)
        else:
            for k in can:
                if rule.partial_inputs is None or k in rule.partial_inputs:
                    options.append(tuple(Partial(op) if i == k else replicated for i in range(n)))
    out: list[Strategy] = []
    seen = set()
    for combo in itertools.product(options, repeat=ndim):
        placements = tuple(Placement(tuple(combo[a][k] for a in range(ndim))) for k in range(n))
        try:
            for s, p in zip(site.ins, placements):
                p.validate(ndim, s.tensor.ndim)
            outs = tuple(forward(rule, placements, ndim, site.op.name))
        except (TypeInferenceError, DistirError):
            continue
        if not all(cost.fits(s, p, site.mesh) or (keep is not None and keep(s, p)) for s, p in zip(site.ins, placements)):
            continue
        if not all(cost.fits(s, p, site.mesh) or (keep is not None and keep(s, p)) for s, p in zip(site.outs, outs)):
            continue
        key = (placements, outs)
        if key not in seen:
            seen.add(key)
            out.append(Strategy(placements, outs))
    return out


@dataclass
class LayoutPlan:
    """The solver's answer: a strategy per op, a layout per parameter, how each needed layout is got."""

    strategy: dict[int, Strategy]  # id(site) -> chosen strategy
    primary: dict[int, Placement]  # root slot id -> the layout it is produced in
    recompute: dict[tuple[int, Placement], Strategy]  # (root slot id, layout) -> recompute the producer so
    root: dict[int, int]  # slot id -> the slot whose value it is (a hint's output -> the annotated slot)
    bytes: Fraction  # bytes each worker sends at the size hints (results counted as gathered)
    held: Fraction  # bytes each worker holds, summed over every value and version
    objective: Fraction  # what the solver minimized: bytes sent summed over the sampled sizes
    candidates: dict[int, list[Placement]] = field(default_factory=dict)  # free parameter -> layouts tried
    peak: tuple[Fraction, ...] = ()  # the ActivationLimit's estimate of the peak per sample (the largest window's)

    def root_of(self, s: Slot) -> int:
        return self.root.get(s.id, s.id)


@dataclass(frozen=True)
class ActivationLimit:
    """A limit on the peak live activation bytes per worker (auto-shard), at ``samples`` sizes.

    The peak is bounded linearly: at each program point, the bytes of every value live there (from
    its binding through its last reader), each layout it exists in counted over that whole range (a
    redistributed or recomputed copy from the value's first reader on). Parameters' own layouts are
    inputs, not activations; their copies (a gathered weight) are. ``held(slot, layout, k)``: bytes a
    worker holds of a value laid out so at sample ``k`` (``layout`` None: a plain value, whole on
    every worker). ``bound(k, least, replicated)``: the limit at sample ``k``, given the least peak
    of the program (a first program minimizes the peaks, summed over the samples) and the peak with
    every value whole."""

    samples: int
    held: Callable[[Slot, Placement | None, int], int]
    bound: Callable[[int, Fraction, Fraction], Fraction]


@dataclass(frozen=True)
class ParamChoice:
    """How a search over parameter layouts (auto-shard) extends the program: the layouts each
    parameter without a given layout may take, and linear limits on the chosen ones (a memory
    budget). ``candidates(slot)`` lists the layouts; ``limits(decided)``, given the parameters one
    program decides with their candidates, returns rows ``({(slot id, layout): coefficient}, upper
    bound)``: the coefficients of the chosen layouts sum to at most the bound."""

    candidates: Callable[[Slot], list[Placement]]
    limits: Callable[[list[tuple[Slot, list[Placement]]]], list[tuple[dict[tuple[int, Placement], float], float]]]
    activations: ActivationLimit | None = None


class _Model:
    """Columns and rows of the integer program, built from the graph."""

    def __init__(self, graph: Graph, prefs: Preferences | None, cost: CostModel, window: _Window | None = None,
                 choice: ParamChoice | None = None):
        self.g, self.prefs, self.cost = graph, prefs, cost
        self.choice = choice  # None: free parameters take the layouts the preferences offer
        self.window = window  # None: the whole function
        self.c: list[Fraction] = []  # bytes sent per column, summed over the sampled sizes (the objective)
        self.c_hint: list[Fraction] = []  # bytes sent per column at the size hints (reported)
        self.mem: list[Fraction] = []  # bytes held per worker per column
        self.tb: list[float] = []  # tie-break per column
        self.lb: list[float] = []
        self.ub: list[float] = []
        # the peak live activations per worker, one continuous column per sample of the ActivationLimit,
        # in units of the peak with every value whole (scale), at least each of its rows
        # (sample, {column: bytes}, bytes of values whose layout is given)
        self.peak_cols: list[int] = []
        self.peak_rows: list[tuple[int, dict[int, Fraction], Fraction]] = []
        self.peak_scale: list[Fraction] = []  # per sample: the peak with every value whole (no copies)
        self.peak_bound: list[Fraction] | None = None  # the limit per sample, once the least peak is known
        self.rows: list[tuple[list[tuple[int, float]], float, float]] = []
        self.root: dict[int, int] = dict(window.root) if window else {}
        self.slot_by_id = {s.id: s for s in graph.slots}
        # per root slot id: placement -> list of (column, coefficient) (or None: fixed, always 1)
        self.prim: dict[int, dict[Placement, list[int] | None]] = {}
        self.need: dict[int, dict[Placement, int]] = {}
        self.site_cols: dict[int, list[tuple[int, Strategy]]] = {}
        self.strategies: dict[int, list[Strategy]] = {}
        self.z_cols: list[tuple[int, int, Placement, Placement]] = []  # (col, root, src, dst)
        self.r_cols: list[tuple[int, int, Placement, Strategy]] = []
        self.param_cols: dict[int, list[tuple[int, Placement]]] = {}
        self.forced: list[tuple[int, Placement]] = []
        self.result_costs: list[tuple[int, Placement, Fraction, Fraction]] = []  # (value, layout, sampled, at hints)
        self.pending: set[int] | None = None  # while supplying: values with needs not yet supplied
        self.heap: list[int] = []  # their ids, negated (the latest first)
        # a hint's output slot id -> the layout its readers read it in
        self.read_as: dict[int, Placement] = dict(window.read_as) if window else {}

    # -- columns and rows --------------------------------------------------------------------
    def col(self, cost: Fraction = Fraction(0), tb: float = 0.0, lb: float = 0.0,
            mem: Fraction = Fraction(0), at_hint: Fraction = Fraction(0), ub: float = 1.0) -> int:
        self.c.append(cost)
        self.c_hint.append(at_hint)
        self.mem.append(mem)
        self.tb.append(tb)
        self.lb.append(lb)
        self.ub.append(ub)
        return len(self.c) - 1

    def row(self, terms, lo: float, hi: float) -> None:
        self.rows.append((terms, lo, hi))

    def distributed(self, s: Slot) -> bool:
        return s.distributable and s.id in self.g.mesh_of

    def rid(self, s: Slot) -> int:
        return self.root.get(s.id, s.id)

    def need_col(self, rid: int, q: Placement) -> int:
        by = self.need.setdefault(rid, {})
        if q not in by:
            by[q] = self.col()
            if self.pending is not None and rid not in self.pending:
                self.pending.add(rid)
                heapq.heappush(self.heap, -rid)
        return by[q]

    def pref_mismatch(self, s: Slot, p: Placement) -> int:
        if self.prefs is None or s.id not in self.prefs.specs:
            return 0
        want = self.prefs.placement(s)
        return sum(a != b for a, b in zip(p.specs, want.specs))

    def held(self, s: Slot, p: Placement) -> Fraction:
        return self.cost.held_share(s, p) * self.cost.nbytes(s)

    def partial_ops(self, s: Slot) -> set[str]:
        if not self.distributed(s):
            return set()
        prim = self.prim.get(self.rid(s), {})
        return {spec.op for p in prim for spec in p.specs if isinstance(spec, Partial)}

    def keep(self, s: Slot, p: Placement) -> bool:
        root = self.slot_by_id[self.rid(s)]
        return root.fixed is not None and root.fixed == p

    # -- building --------------------------------------------------------------------------
    def build(self) -> None:
        g = self.g
        for p in g.func.params:
            for s in g.var_slots.get(p, []):
                if self.distributed(s) and s.fixed is not None:
                    self.prim[s.id] = {s.fixed: None}
        w = self.window
        if w is not None:  # values of earlier windows: given, in each layout they were made in
            for rid, versions in w.frozen.items():
                self.prim[rid] = dict.fromkeys(sorted(versions, key=str))
        for site in (w.sites if w is not None else g.sites):
            if site.mesh is None:
                continue
            if site.is_hint:
                self.hint(site)
            else:
                self.op(site)
        if w is None or w.last:
            self.results()
        self.params()
        self.supplies()
        if self.choice is not None and self.choice.activations is not None:
            self.activation_rows(self.choice.activations)

    def hint(self, site: Site) -> None:
        x, y = site.ins[0] if site.ins else None, site.outs[0]
        q = site.binding.value.attrs.get("placement") or Placement.replicated(site.mesh.ndim)
        if (
            site.op.name in ALIAS_OPS
            and x is not None
            and self.distributed(x)
            and self.g.mesh_of.get(x.id) == self.g.mesh_of.get(y.id)
        ):
            self.root[y.id] = self.rid(x)
            self.read_as[y.id] = q
            self.forced.append((self.rid(x), q))
        else:  # an explicit redistribute (kept as written), a transfer to another mesh, or R.dist.replicate
            self.prim[y.id] = {q: None}
            if (site.op.name == "dist.redistribute" and x is not None and self.distributed(x)
                    and self.g.mesh_of.get(x.id) == self.g.mesh_of.get(y.id)):
                self.forced.append((self.rid(x), q))

    def op(self, site: Site) -> None:
        if not any(self.distributed(s) for s in site.ins) and not any(s.fixed for s in site.outs):
            return  # computed from plain values only: kept plain
        ndim = site.mesh.ndim
        if site.rule is None:
            strategies = [Strategy(tuple(Placement.replicated(ndim) for _ in site.ins),
                                   tuple(Placement.replicated(ndim) for _ in site.outs))]
        else:
            strategies = site_strategies(site, self.cost, [self.partial_ops(s) for s in site.ins], self.keep)
        self.strategies[id(site)] = strategies  # a recomputation may read a hint's value in any layout
        # the op itself reads a hint's value in the hinted layout (TVM's meaning, and the greedy pass's)
        # (where its rule accepts that layout; else, as the greedy pass does, in one it accepts)
        strategies = [st for st in strategies
                      if all(self.read_as.get(s.id, p) == p for s, p in zip(site.ins, st.ins))] or strategies
        if not strategies:
            raise DiagnosticError(
                f"propagate-sharding: no layout of the inputs of R.{site.op.name} fits its sharding rule "
                f"for '{site.name}'",
                site.binding.span,
            )
        cols = []
        for st in strategies:
            tb = W_PREFERENCE * sum(self.pref_mismatch(s, p) for s, p in zip(site.outs, st.outs))
            mem = sum((self.held(s, p) for s, p in zip(site.outs, st.outs)), Fraction(0))
            tb += W_MEMORY * sum(float(self.cost.held_share(s, p)) for s, p in zip(site.outs, st.outs))
            tb += W_OUTER_DIMS * sum(_cut_dims(p) for p in st.outs)
            cols.append((self.col(tb=tb, mem=mem), st))
        self.site_cols[id(site)] = cols
        self.row([(c, 1.0) for c, _ in cols], 1, 1)
        for o, s in enumerate(site.outs):
            by = self.prim.setdefault(s.id, {})
            for c, st in cols:
                by.setdefault(st.outs[o], []).append(c)
        self.demand(site.ins, cols)

    def demand(self, ins: list[Slot], cols: list[tuple[int, Strategy]], scale_col: int | None = None) -> None:
        """Rows: each distributed input is needed in the layout the chosen strategy reads it in."""
        wanted: dict[tuple[int, Placement], list[int]] = {}
        for c, st in cols:
            for s, p in zip(ins, st.ins):
                if self.distributed(s):
                    lst = wanted.setdefault((self.rid(s), p), [])
                    if c not in lst:
                        lst.append(c)
        for (rid, p), cs in wanted.items():
            n = self.need_col(rid, p)
            self.row([(n, 1.0)] + [(c, -1.0) for c in cs], 0, np.inf)

    def results(self) -> None:
        """A result holds true values and the caller gets it whole: the cost of gathering it counts
        (a partial is reduced in the program, a sharded result is reassembled by the runner). A
        declared DTensor return type, or a result bound with a sharded DTensor type (written so,
        inferred from DTensor inputs, or chosen by an earlier run), is returned in that layout."""
        f = self.g.func

        def leaves(t):
            if isinstance(t, TupleType):
                return [x for fld in t.fields for x in leaves(fld)]
            return [t]

        def pairs(e):
            if isinstance(e, Tuple):
                return [x for fld in e.fields for x in pairs(fld)]
            if isinstance(e, TupleGetItem):
                slots = field_slots(self.g.var_slots.get(e.tuple_value, []), e.tuple_value.type, e.index) if isinstance(
                    e.tuple_value, Var) else []
            elif isinstance(e, Var):
                slots = self.g.var_slots.get(e, [])
            else:
                return []
            types = leaves(e.type)
            return list(zip(slots, types)) if len(types) == len(slots) else [(s, None) for s in slots]

        found = pairs(f.result)
        declared = leaves(f.ret_type) if f.ret_type is not None else []
        for i, (s, bound) in enumerate(found):
            if not self.distributed(s):
                continue
            t = declared[i] if len(declared) == len(found) else None
            if isinstance(t, DTensorType):
                self.forced.append((self.rid(s), t.placement))
                continue
            if self.rid(s) != s.id:
                continue  # a hint's value: returned as the hint lays it out
            if isinstance(bound, DTensorType) and not bound.placement.has_partial and any(
                isinstance(x, Shard) for x in bound.placement.specs
            ) and self.g.mesh_of.get(s.id) == bound.mesh:
                self.forced.append((s.id, bound.placement))
                continue
            whole = Placement.replicated(self.g.mesh_of[s.id].ndim)
            for p in self.prim.get(s.id, {}):
                c = self.cost.sampled_cost(s, p, whole)
                if c:
                    self.result_costs.append((s.id, p, c, self.cost.redistribute_cost(s, p, whole)))

    def params(self) -> None:
        """Parameters without a given layout: the layout the hints spread to them (the greedy
        preference), or, where two paths disagreed, a choice among the layouts they offered."""
        offered: dict[int, list[Placement]] = {}
        if self.prefs is not None:
            for c in self.prefs.conflicts:
                for spec in (c.kept, c.offered):
                    offered.setdefault(c.slot.id, []).append(self.prefs.placement(c.slot).replace(c.mesh_axis, spec))
        reads = None
        if self.window is not None and not self.window.last:  # a window decides the parameters it reads
            reads = {self.rid(s) for site in self.window.sites for s in site.ins}
        for p in self.g.func.params:
            for s in self.g.var_slots.get(p, []):
                if not self.distributed(s) or s.id in self.prim or (reads is not None and s.id not in reads):
                    continue
                mesh = self.g.mesh_of[s.id]
                cands: list[Placement] = []
                pref = self.prefs.placement(s) if self.prefs is not None else Placement.replicated(mesh.ndim)
                wanted = [pref] + offered.get(s.id, [])
                for q in wanted if self.choice is None else []:
                    if q.has_partial:
                        q = Placement(tuple(Replicate() if isinstance(x, Partial) else x for x in q.specs))
                    q = self.cost.fitted(s, q, mesh)
                    if q not in cands:
                        cands.append(q)
                if self.choice is not None:
                    cands = list(self.choice.candidates(s))
                cols = []
                for q in cands:
                    tb = W_PREFERENCE * self.pref_mismatch(s, q) + W_MEMORY * float(self.cost.held_share(s, q))
                    tb += W_OUTER_DIMS * _cut_dims(q)
                    cols.append((self.col(tb=tb, mem=self.held(s, q)), q))
                self.row([(c, 1.0) for c, _ in cols], 1, 1)
                self.param_cols[s.id] = cols
                self.prim[s.id] = {q: [c] for c, q in cols}
        if self.choice is not None and self.param_cols:
            decided = [(self.slot_by_id[sid], [q for _, q in cols]) for sid, cols in self.param_cols.items()]
            col_of = {(sid, q): c for sid, cols in self.param_cols.items() for c, q in cols}
            for coefs, bound in self.choice.limits(decided):
                self.row([(col_of[key], v) for key, v in coefs.items() if key in col_of], -np.inf, bound)

    def supplies(self) -> None:
        """Each needed layout comes from the primary, by a redistribute or a recomputation."""
        for rid, q in self.forced:
            n = self.need_col(rid, q)
            self.lb[n] = 1.0
        producer_of = {}
        for site in self.g.sites:
            if id(site) in self.site_cols:
                for s in site.outs:
                    producer_of[s.id] = site
        # later values first: a recomputation needs layouts of earlier values (smaller slot ids)
        done: set[tuple[int, Placement]] = set()
        self.pending = set(self.need)
        self.heap = [-rid for rid in self.pending]
        heapq.heapify(self.heap)
        while self.heap:
            rid = -heapq.heappop(self.heap)
            self.pending.discard(rid)
            s = self.slot_by_id[rid]
            for q, n in list(self.need[rid].items()):
                if (rid, q) in done:
                    continue
                done.add((rid, q))
                if rid not in self.prim:
                    continue  # a plain value (computed from constants): any layout is a local slice
                terms = [(n, 1.0)]
                prim = self.prim.get(rid, {})
                if q in prim:
                    if prim[q] is None:
                        continue  # given in that layout
                    terms += [(c, -1.0) for c in prim[q]]
                for p, cols in prim.items():
                    if p == q:
                        continue
                    cost = self.cost.sampled_cost(s, p, q)
                    if cost >= INF:
                        continue
                    z = self.col(cost=cost, tb=W_MOVE, mem=self.held(s, q), at_hint=self.cost.redistribute_cost(s, p, q))
                    self.z_cols.append((z, rid, p, q))
                    terms.append((z, -1.0))
                    if cols is not None:
                        self.row([(z, 1.0)] + [(c, -1.0) for c in cols], -np.inf, 0)
                site = producer_of.get(rid)
                if site is not None and self.recomputable(site):
                    for st in self.strategies[id(site)]:
                        if st.outs[0] != q:
                            continue
                        r = self.col(tb=W_RECOMPUTE, mem=self.held(s, q))
                        self.r_cols.append((r, rid, q, st))
                        terms.append((r, -1.0))
                        self.demand(site.ins, [(r, st)])
                self.row(terms, -np.inf, 0)
        self.pending = None

    def activation_rows(self, limit: ActivationLimit) -> None:
        """Rows: at each program point of the model, the bytes of the values live there are at most
        the peak column of each sample (:class:`ActivationLimit` says what is counted)."""
        g, w = self.g, self.window
        end = len(g.sites)
        born: dict[int, int] = {}
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for i, site in enumerate(g.sites):
            for s in site.ins:
                r = self.rid(s)
                first.setdefault(r, i)
                last[r] = i
            for s in site.outs:
                born.setdefault(self.rid(s), i)
        for s in _result_slots(g):
            last[self.rid(s)] = end
        params = {s.id for p in g.func.params for s in g.var_slots.get(p, [])}
        where = {id(site): i for i, site in enumerate(g.sites)}
        points = sorted({where[id(site)] for site in (w.sites if w is not None else g.sites)})
        if not points:
            return  # nothing computed: no activations
        lo, hi = points[0], points[-1]
        given_primary = w.primary if w is not None else {}
        # (first point, last point, column or None for a given layout, slot, layout)
        spans: list[tuple[int, int, int | None, Slot, Placement | None]] = []
        for rid in sorted(set(born) | params):
            s = self.slot_by_id[rid]
            if s.constant is not None:
                continue
            a = born.get(rid, -1)
            b = max(last.get(rid, a), a)
            if b < lo or a > hi:
                continue
            if rid not in params and not self.distributed(s):
                spans.append((a, b, None, s, None))  # computed from constants: whole everywhere
                continue
            since = first.get(rid, a) if rid in params else a  # a parameter's copies: from its first reader
            for p, cols in self.prim.get(rid, {}).items():
                if rid in params and (cols is not None or given_primary.get(rid, s.fixed) == p):
                    continue  # a parameter's own layout is an input, not an activation
                for c in cols or [None]:
                    spans.append((since, b, c, s, p))
        for z, rid, _src, q in self.z_cols:
            s = self.slot_by_id[rid]
            spans.append((first.get(rid, born.get(rid, -1)), last.get(rid, end), z, s, q))
        for r, rid, q, _st in self.r_cols:
            s = self.slot_by_id[rid]
            spans.append((first.get(rid, born.get(rid, -1)), last.get(rid, end), r, s, q))
        held: dict[tuple[int, int, Placement | None], int] = {}

        def nbytes(s: Slot, p: Placement | None, k: int) -> int:
            key = (k, s.id, p)
            if key not in held:
                held[key] = limit.held(s, p, k)
            return held[key]

        for k in range(limit.samples):
            whole = Fraction(0)
            rows: dict[tuple, tuple[dict[int, Fraction], Fraction]] = {}
            for t in points:
                terms: dict[int, Fraction] = {}
                const = Fraction(0)
                values: set[int] = set()  # the values live at t (for the peak with every value whole)
                for a, b, c, s, p in spans:
                    if not a <= t <= b:
                        continue
                    if c is None:
                        const += nbytes(s, p, k)
                    else:
                        terms[c] = terms.get(c, Fraction(0)) + nbytes(s, p, k)
                    if s.id not in params:
                        values.add(s.id)
                whole = max(whole, sum((Fraction(nbytes(self.slot_by_id[i], None, k)) for i in values), Fraction(0)))
                key = (tuple(sorted(terms.items())), const)
                rows.setdefault(key, (terms, const))
            scale = whole or Fraction(1)
            m = self.col(ub=np.inf)
            self.peak_cols.append(m)
            self.peak_scale.append(scale)
            for terms, const in rows.values():
                self.peak_rows.append((k, terms, const))
                self.row([(c, float(v / scale)) for c, v in terms.items()] + [(m, -1.0)], -np.inf, float(-const / scale))

    @staticmethod
    def recomputable(site: Site) -> bool:
        return site.rule is not None and not site.rule.reductions and len(site.outs) == 1 and bool(site.ins)

    # -- solving ---------------------------------------------------------------------------
    def solve(self, force: tuple[int, Placement] | None = None) -> tuple[np.ndarray, Fraction]:
        extra = []
        if force is not None:
            rid, p = force
            cols = self.prim.get(rid, {}).get(p, [])
            if cols is None:
                cols = []
            if not cols and p not in self.prim.get(rid, {}):
                raise _Infeasible()
            if cols:
                extra.append(([(c, 1.0) for c in cols], 1, 1))
        costs, at_hint = list(self.c), list(self.c_hint)
        for sid, p, c, h in self.result_costs:
            for col in self.prim[sid][p] or []:
                costs[col] += c
                at_hint[col] += h
        total_cost = [c + MEMORY_WEIGHT * m for c, m in zip(costs, self.mem)]
        rows = self.rows + extra
        if not costs:  # nothing to choose (every layout given): HiGHS needs a column, the answer is empty
            if any(a > 0 or b < 0 for _, a, b in rows):
                raise _Infeasible()
            return np.zeros(0), _Cost(Fraction(0), Fraction(0), Fraction(0))
        data, ri, ci, lo, hi = [], [], [], [], []
        for i, (terms, a, b) in enumerate(rows):
            for c, v in terms:
                ri.append(i)
                ci.append(c)
                data.append(v)
            lo.append(a)
            hi.append(b)
        n = len(costs)
        A = coo_matrix((data, (ri, ci)), shape=(len(rows), n)).tocsr()
        constraints = [LinearConstraint(A, np.array(lo), np.array(hi))]
        # every column is 0 or 1 (a strategy, a need, a redistribute, a recomputation): a fractional
        # recomputation or redistribute would let a later program cover a need in part
        integrality, ub = np.ones(n, dtype=int), np.array(self.ub)
        integrality[self.peak_cols] = 0
        least_x = None
        if self.peak_cols:  # the least peak first: the activation limit is relative to it
            aim = np.zeros(n)
            aim[self.peak_cols] = 1.0
            with native_output_silenced():  # HiGHS may print to fd 1 from C++, past its display option
                step = milp(aim, integrality=integrality, bounds=(np.array(self.lb), ub), constraints=constraints,
                            options=SOLVER_OPTIONS)
            if step.x is None:
                raise _Infeasible()
            least_x = step.x
            limit = self.choice.activations
            least = self.peaks(least_x)
            self.peak_bound = [max(limit.bound(k, least[k], self.peak_scale[k]), least[k]) for k in range(len(least))]
            for k, col in enumerate(self.peak_cols):
                # a hair below the limit (HiGHS's tolerance), never below the least peak found
                ub[col] = max(float(self.peak_bound[k] / self.peak_scale[k]) - 1e-7, float(least[k] / self.peak_scale[k]))
        bounds = (np.array(self.lb), ub)
        # lexicographic, one program per aim, each keeping the optimum of the one before: the least
        # bytes (results counted as gathered), then the tie-break. One objective with the tie-break
        # scaled below a byte would ask HiGHS to tell apart values below its tolerance once the bytes
        # run into millions (ties then broken arbitrarily), and is slower to prove optimal than the
        # two programs together
        res = None
        kept: list[tuple[list[Fraction], Fraction]] = []  # the byte aims met so far, and their optima
        for k, aim in enumerate((total_cost, self.tb)):
            if k and not any(aim):
                continue
            tie_break = aim is self.tb
            weights = np.array(aim) if tie_break else _units(aim)
            with native_output_silenced():
                step = milp(weights, integrality=integrality, bounds=bounds, constraints=constraints,
                            options=SOLVER_OPTIONS)
            if res is None and step.x is None:
                raise _Infeasible()
            # a later program's answer is kept only if it meets the optima before exactly (checked in
            # fractions: the rows hold coefficients in the millions, where HiGHS's tolerances are not exact)
            if step.x is None or any(self._sum(values, step.x) != least for values, least in kept):
                break
            res = step
            if not tie_break:
                kept.append((aim, self._sum(aim, res.x)))
                met = float(weights @ (res.x > 0.5))  # a whole number of units: the row is exact up to 1/2
                constraints.append(LinearConstraint(weights.reshape(1, -1), -np.inf, met + 0.5))
        x = res.x
        if least_x is not None and any(p > b for p, b in zip(self.peaks(x), self.peak_bound)):
            x = least_x  # the solver's tolerance let a peak over its limit: the least peak is within it exactly
        return x, _Cost(self._sum(costs, x), self._sum(at_hint, x), self._sum(self.mem, x), self.peaks(x))

    def peaks(self, x: np.ndarray) -> tuple[Fraction, ...]:
        """The peak live activation bytes per worker at each sample, exactly, for the columns ``x`` chooses."""
        out = [Fraction(0)] * len(self.peak_cols)
        for k, terms, const in self.peak_rows:
            out[k] = max(out[k], const + sum((v for c, v in terms.items() if x[c] > 0.5), Fraction(0)))
        return tuple(out)

    @staticmethod
    def _sum(values: list[Fraction], x: np.ndarray) -> Fraction:
        """The exact sum of ``values`` over the columns ``x`` chooses."""
        return sum((v for v, xi in zip(values, x) if xi > 0.5), Fraction(0))


class _Infeasible(Exception):
    pass


@dataclass(frozen=True)
class _Cost:
    objective: Fraction  # bytes each worker sends summed over the sampled sizes (results counted as gathered)
    sent: Fraction  # bytes each worker sends at the size hints (results counted as gathered)
    held: Fraction  # bytes each worker holds at the size hints, summed over the values and their versions
    peak: tuple[Fraction, ...] = ()  # peak live activation bytes per worker at each ActivationLimit sample

    @property
    def total(self) -> Fraction:
        return self.objective + MEMORY_WEIGHT * self.held


WINDOW_OPS = 48  # a function of more ops is solved in windows of at least this many (see solve_layouts)


@dataclass
class _Window:
    """A run of consecutive sites solved on its own, after the windows before it."""

    sites: list[Site]
    last: bool
    frozen: dict[int, set[Placement]]  # value (root slot id) of an earlier window -> the layouts it exists in
    root: dict[int, int]  # a hint's output -> the value it annotates, from earlier windows
    read_as: dict[int, Placement]
    primary: dict[int, Placement] = field(default_factory=dict)  # the layouts earlier windows chose


@dataclass
class Solved:
    """One integer program solved: its model, its optimum, and the values it laid out."""

    model: _Model
    total: _Cost
    decided: set[int]


def solve_layouts(graph: Graph, prefs: Preferences | None, cost: CostModel,
                  choice: ParamChoice | None = None, window_ops: int = 0) -> tuple[LayoutPlan, list[Solved]]:
    """The cheapest layout of the function (see the module docstring), and the programs solved (to
    ask what another layout of one value would cost, :func:`alternative_cost`). ``choice``: the
    layouts free parameters may take and limits on them (:class:`ParamChoice`); ``window_ops``, when
    given, replaces ``WINDOW_OPS`` (smaller windows: a faster, less global search).

    A function of more than ``2 * WINDOW_OPS`` ops is cut into windows where the fewest values
    computed before the cut are read after it (:func:`_windows`), each of at least ``WINDOW_OPS`` ops, and solved window by window: a window takes the values of
    earlier ones as given, in the layouts they were made in. Windows alike (the same ops, types and
    preferences, reading values given in the same layouts: the layers of a stack) are solved once.
    Each window is optimal given the ones before it; the whole is not guaranteed to be."""
    windows = _windows(graph, window_ops or WINDOW_OPS)
    if len(windows) == 1:
        model = _Model(graph, prefs, cost, choice=choice)
        model.build()
        x, total = _solve(model, graph)
        plan = plan_of(model, x, total)
        return plan, [Solved(model, total, set(plan.primary))]
    strategy: dict[int, Strategy] = {}
    primary: dict[int, Placement] = {}
    recompute: dict[tuple[int, Placement], Strategy] = {}
    candidates: dict[int, list[Placement]] = {}
    root: dict[int, int] = {}
    read_as: dict[int, Placement] = {}
    frozen: dict[int, set[Placement]] = {}
    sent = held = objective = Fraction(0)
    peak: tuple[Fraction, ...] = ()
    solved: list[Solved] = []
    cache: dict[tuple, tuple] = {}
    for k, sites in enumerate(windows):
        w = _Window(sites, k == len(windows) - 1, frozen, root, read_as, primary)
        sig, local = _signature(graph, prefs, w)
        index = {sid: i for i, sid in enumerate(local)}
        if sig not in cache:
            model = _Model(graph, prefs, cost, w, choice)
            model.build()
            x, total = _solve(model, graph)
            part = plan_of(model, x, total)
            versions: dict[int, set[Placement]] = {}
            for rid, by in model.need.items():
                versions[rid] = {q for q, col in by.items() if x[col] > 0.5}
            decided = {sid for sid in part.primary if sid not in frozen}
            solved.append(Solved(model, total, decided))
            cache[sig] = (
                [part.strategy.get(id(site)) for site in sites],
                {index[sid]: p for sid, p in part.primary.items() if sid in decided and sid in index},
                {(index[rid], q): st for (rid, q), st in part.recompute.items() if rid in index},
                {index[rid]: qs for rid, qs in versions.items() if rid in index},
                {index[sid]: c for sid, c in part.candidates.items() if sid in index},
                total,
            )
        strategies, prims, recs, made, cands, total = cache[sig]
        for site, st in zip(sites, strategies):
            if st is not None:
                strategy[id(site)] = st
        for i, p in prims.items():
            primary.setdefault(local[i], p)
        for (i, q), st in recs.items():
            recompute[(local[i], q)] = st
        for i, c in cands.items():
            candidates[local[i]] = c
        _carry_aliases(graph, sites, root, read_as)
        for sid in local:
            rid = root.get(sid, sid)
            if rid in primary:
                frozen.setdefault(rid, set()).add(primary[rid])
        for i, qs in made.items():
            frozen.setdefault(root.get(local[i], local[i]), set()).update(qs)
        sent, held, objective = sent + total.sent, held + total.held, objective + total.objective
        peak = tuple(max(a, b) for a, b in zip(peak, total.peak)) if peak else total.peak
    for sid, p in _given(graph).items():
        primary.setdefault(sid, p)
    plan = LayoutPlan(strategy, primary, recompute, root, sent, held, objective, candidates, peak)
    return plan, solved


def _solve(model: _Model, graph: Graph) -> tuple[np.ndarray, _Cost]:
    try:
        return model.solve()
    except _Infeasible:
        raise DiagnosticError("propagate-sharding: no layout of the function satisfies the hints", graph.func.span) from None


def _given(graph: Graph) -> dict[int, Placement]:
    """Slots whose layout is given: DTensor parameters, and the outputs of explicit redistributes."""
    out = {}
    for p in graph.func.params:
        for s in graph.var_slots.get(p, []):
            if s.fixed is not None and s.distributable and s.id in graph.mesh_of:
                out[s.id] = s.fixed
    for site in graph.sites:
        if site.is_hint and site.mesh is not None and _alias(graph, site) is None:
            y = site.outs[0]
            out[y.id] = site.binding.value.attrs.get("placement") or Placement.replicated(site.mesh.ndim)
    return out


def _alias(graph: Graph, site: Site) -> tuple[Slot, Slot, Placement] | None:
    """(annotated value, the hint's value, its layout) for an annotate_sharding on one mesh, else None."""
    x, y = site.ins[0] if site.ins else None, site.outs[0]
    if (
        site.op.name in ALIAS_OPS
        and x is not None
        and x.distributable
        and x.id in graph.mesh_of
        and graph.mesh_of.get(x.id) == graph.mesh_of.get(y.id)
    ):
        return x, y, site.binding.value.attrs.get("placement") or Placement.replicated(site.mesh.ndim)
    return None


def _carry_aliases(graph: Graph, sites: list[Site], root: dict[int, int], read_as: dict[int, Placement]) -> None:
    for site in sites:
        if site.is_hint and site.mesh is not None and (a := _alias(graph, site)) is not None:
            x, y, q = a
            root[y.id] = root.get(x.id, x.id)
            read_as[y.id] = q


def _windows(graph: Graph, window_ops: int = 0) -> list[list[Site]]:
    """The sites cut where fewest computed values cross (between the layers of a stack: the residual
    stream, and tables such as the rotary embedding's that every layer reads), in windows of
    ``WINDOW_OPS`` ops or more."""
    sites = graph.sites
    window_ops = window_ops or WINDOW_OPS
    if sum(1 for s in sites if not s.is_hint) <= 2 * window_ops:
        return [sites]
    end = len(sites)
    last_read: dict[int, int] = {}
    for i, site in enumerate(sites):
        for s in site.ins:
            last_read[s.id] = i
    for s in _result_slots(graph):
        last_read[s.id] = end
    crossing: list[int] = []  # after each site: how many distributed values computed so far are read later
    live: set[int] = set()
    for i, site in enumerate(sites):
        live = {sid for sid in live if last_read[sid] > i}
        live.update(s.id for s in site.outs if last_read.get(s.id, -1) > i and s.id in graph.mesh_of)
        crossing.append(len(live))
    narrowest = min(crossing[window_ops : end - window_ops] or [0])  # the tail narrows as shared values die
    windows: list[list[Site]] = []
    cur: list[Site] = []
    ops = 0
    for i, site in enumerate(sites):
        cur.append(site)
        ops += not site.is_hint
        if ops >= window_ops and crossing[i] <= narrowest and i < end - 1:
            windows.append(cur)
            cur, ops = [], 0
    if cur:
        if windows and sum(1 for s in cur if not s.is_hint) < window_ops:
            windows[-1].extend(cur)  # a short tail joins the window before it
        else:
            windows.append(cur)
    return windows


def _result_slots(graph: Graph) -> list[Slot]:
    def slots(e):
        if isinstance(e, Tuple):
            return [x for f in e.fields for x in slots(f)]
        if isinstance(e, TupleGetItem):
            inner = slots(e.tuple_value)
            return field_slots(inner, e.tuple_value.type, e.index) if isinstance(e.tuple_value.type, TupleType) else []
        if isinstance(e, Var):
            return graph.var_slots.get(e, [])
        return []

    return slots(graph.func.result)


def _signature(graph: Graph, prefs: Preferences | None, w: _Window) -> tuple[tuple, list[int]]:
    """What a window's solution depends on, with its slots numbered in order of appearance; and the
    slot ids in that order (to map a solution of one window onto another alike)."""
    local: dict[int, int] = {}
    root, read_as = dict(w.root), dict(w.read_as)
    items: list = []

    def ref(s: Slot) -> int:
        if s.id not in local:
            local[s.id] = len(local)
            rid = root.get(s.id, s.id)
            outside = s.producer is None or s.producer not in w.sites
            items.append((
                "slot", local[s.id], str(s.tensor), s.distributable, str(s.fixed), graph.mesh_of.get(s.id) is not None,
                tuple(sorted(map(str, w.frozen.get(rid, ())))) if outside else None,
                str(read_as.get(s.id)), local.get(rid) if rid != s.id else None,
                str(prefs.placement(s)) if prefs is not None and s.id in prefs.specs else None,
            ))
        return local[s.id]

    for site in w.sites:
        ins = tuple(ref(s) for s in site.ins)
        if site.is_hint and (a := _alias(graph, site)) is not None:
            x, y, q = a
            ref(x)
            root[y.id] = root.get(x.id, x.id)
            read_as[y.id] = q
        outs = tuple(ref(s) for s in site.outs)
        mesh = site.mesh.shape_str() if site.mesh is not None else None
        items.append(("site", site.op.name, repr(sorted(site.binding.value.attrs.items(), key=lambda kv: kv[0])), mesh,
                      ins, outs))
    for s in _result_slots(graph) if w.last else ():
        items.append(("result", ref(s)))
    return tuple(items), list(local)


def plan_of(model: _Model, x: np.ndarray, total: Fraction) -> LayoutPlan:
    strategy, primary, recompute = {}, {}, {}
    for site in model.g.sites:
        cols = model.site_cols.get(id(site))
        if cols is None:
            continue
        st = max(cols, key=lambda cs: x[cs[0]])[1]
        strategy[id(site)] = st
        for s, p in zip(site.outs, st.outs):
            primary[s.id] = p
    for sid, cols in model.param_cols.items():
        primary[sid] = max(cols, key=lambda cq: x[cq[0]])[1]
    for sid, by in model.prim.items():
        for p, cols in by.items():
            if cols is None:
                primary.setdefault(sid, p)
    for r, rid, q, st in model.r_cols:
        if x[r] > 0.5:
            recompute[(rid, q)] = st
    candidates = {sid: [q for _, q in cols] for sid, cols in model.param_cols.items()}
    return LayoutPlan(strategy, primary, recompute, dict(model.root), total.sent, total.held, total.objective,
                      candidates, total.peak)


def alternative_cost(model: _Model, rid: int, p: Placement) -> _Cost | None:
    """The optimum with value ``rid`` produced in layout ``p`` (None: no such layout is possible)."""
    found = alternative(model, rid, p)
    return None if found is None else found[1]


def alternative(model: _Model, rid: int, p: Placement) -> tuple[LayoutPlan, _Cost] | None:
    """The optimal plan with value ``rid`` produced in layout ``p``, and its cost (None: impossible)."""
    try:
        x, total = model.solve(force=(rid, p))
    except _Infeasible:
        return None
    return plan_of(model, x, total), total


def visible_layouts(model: _Model, plan: LayoutPlan) -> dict[int, Placement]:
    """The layouts a caller sees in ``plan``: of the parameters the model chose, and of the results."""
    seen = {sid: plan.primary[sid] for sid in model.param_cols if sid in plan.primary}
    for s in _result_slots(model.g) if model.window is None or model.window.last else ():
        rid = plan.root_of(s)
        if rid in plan.primary:
            seen[rid] = plan.primary[rid]
    return seen


# ---------------------------------------------------------------------------------------------
# the bytes a propagated function sends, at concrete sizes (to compare two layouts of it)

GUARD_MESH_SAMPLES = (2, 3, 4, 8)  # the device counts the planner weighs plans at (redistribute_plan)
GUARD_DIM_SAMPLES = (1, 3, 10, 64, 512, 4096)


def sample_envs(func, mesh_names: set[str], size_hints: Mapping[str, int] | None = None) -> list[dict[str, int]]:
    """Values of the symbols of ``func`` to weigh a layout at: every symbolic mesh size at each of
    ``GUARD_MESH_SAMPLES``, every other symbol at each of ``GUARD_DIM_SAMPLES`` (a ``size_hints``
    entry fixes its symbol)."""
    names: set[str] = set()
    for p in func.params:
        names |= _type_vars(p.type)
    for b in func.bindings():
        names |= _type_vars(b.var.type)
    hints = dict(size_hints or {})
    envs, seen = [], set()
    for m in GUARD_MESH_SAMPLES:
        for v in GUARD_DIM_SAMPLES:
            env = {n: hints.get(n, m if n in mesh_names else v) for n in sorted(names | mesh_names)}
            key = tuple(env.items())
            if key not in seen:
                seen.add(key)
                envs.append(env)
    return envs


def _type_vars(t) -> set[str]:
    if isinstance(t, TupleType):
        return set().union(set(), *(_type_vars(f) for f in t.fields))
    shape = getattr(t, "shape", None) or ()
    out = set().union(set(), *(sym.free_vars(d) for d in shape if not isinstance(d, int)))
    if isinstance(t, DTensorType):
        out |= set().union(set(), *(sym.free_vars(d) for d in t.mesh.shape if not isinstance(d, int)))
    return out


def function_bytes(func, env: Mapping[str, int], axis_costs: AxisCosts | None = None) -> tuple[Fraction, Fraction] | None:
    """Bytes all workers send running ``func`` (a propagated global-view function, whose reshape
    chains legalize may fuse first, see
    :func:`~distir.transform.legalize_redistribute.fuse_reshapes`) at the sizes ``env``: the
    redistributes as legalize plans them (padded blocks counted), and apart the gathers of its
    sharded results (the runner's). None where ``env`` does not evaluate a size. With
    ``axis_costs``, the estimated seconds of those steps instead (plans made by time)."""
    redistribute, exchange = "dist.redistribute", get_step("exchange")

    def ev(d) -> int:
        return d if isinstance(d, int) else int(sym.evaluate(d, env))

    def cost(t: DTensorType, src: Placement, dst: Placement, sizes) -> Fraction:
        if src == dst:
            return Fraction(0)
        shape = tuple(ev(d) for d in t.shape)
        if axis_costs is not None:  # the plan legalize makes by time, timed at these sizes
            plan = plan_redistribute(t.mesh, t.ndim, src, dst, t.shape,
                                     timing_for(axis_costs, t.mesh, t.shape, dtype_bytes(t.dtype)))
            timing = Timing(axis_costs.for_mesh(t.mesh.ndim), math.prod(shape) * dtype_bytes(t.dtype))
            return plan_cost(plan, src, sizes, shape, timing)
        plan = plan_redistribute(t.mesh, t.ndim, src, dst, t.shape)
        return plan_cost(plan, src, sizes, shape) * math.prod(shape) * dtype_bytes(t.dtype) * math.prod(sizes)

    sent = gathers = Fraction(0)
    try:
        for b in func.bindings():
            v = b.value
            name = getattr(getattr(v, "op", None), "name", None)
            if name == redistribute:
                x = v.args[0].type
                if isinstance(x, DTensorType) and x.mesh == v.attrs["device_mesh"]:
                    sent += cost(x, x.placement, v.attrs["placement"], tuple(ev(d) for d in x.mesh.shape))
            elif name == exchange.global_op.name:
                x, y = v.args[0].type, b.var.type
                sizes = tuple(ev(d) for d in x.mesh.shape)
                volume = exchange.volume(tuple(ev(d) for d in x.shape), x.placement, tuple(ev(d) for d in y.shape),
                                         y.placement, sizes)
                received = sum(volume) * dtype_bytes(x.dtype)
                if axis_costs is None:
                    sent += received
                else:  # the slowest axis it crosses, a round per peer (as the planner)
                    same = len(x.shape) == len(y.shape) and all(sym.equal(a, b) for a, b in zip(x.shape, y.shape))
                    link, rounds = exchange_link(x.placement, y.placement, sizes, axis_costs.for_mesh(len(sizes)), same)
                    sent += link.seconds(rounds, Fraction(received, math.prod(sizes)))

        def results(t):
            if isinstance(t, TupleType):
                return [r for f in t.fields for r in results(f)]
            return [t] if isinstance(t, DTensorType) else []

        for t in results(func.result.type):
            whole = Placement.replicated(t.mesh.ndim)
            gathers += cost(t, Placement(tuple(Replicate() if isinstance(x, Partial) else x for x in t.placement.specs)),
                            whole, tuple(ev(d) for d in t.mesh.shape))
    except AxisCostError:
        raise
    except (DistirError, sym.SymbolicError, ZeroDivisionError):
        return None
    return sent, gathers


def function_peak(func, env: Mapping[str, int]) -> int | None:
    """The peak live bytes per worker of the values ``func`` (a laid-out global-view function)
    computes, at the sizes ``env``: each call's value (its block, or whole if plain) live from its
    binding through its last reader, the result to the end; parameters and constants are not counted,
    nor the buffers inside a redistribute's steps. The estimate an alternative layout is compared by
    (auto-shard's report), at the granularity the solver's activation rows bound. None where ``env``
    does not evaluate a size."""
    bindings = list(func.bindings())
    size: dict[Var, int] = {}
    last: dict[Var, int] = {}
    alias: dict[Var, list[Var]] = {}

    def refs(e) -> list[Var]:
        if isinstance(e, Var):
            return alias.get(e, [e])
        if isinstance(e, Tuple):
            return [v for f in e.fields for v in refs(f)]
        if isinstance(e, TupleGetItem):
            return refs(e.tuple_value)
        if isinstance(e, Call):
            return [v for a in e.args for v in refs(a)]
        return []

    def held(t) -> int:
        if isinstance(t, TupleType):
            return sum(held(f) for f in t.fields)
        if isinstance(t, DTensorType):
            return int(sym.evaluate(local_bytes(t), env))
        if hasattr(t, "shape") and hasattr(t, "dtype"):
            return math.prod(int(sym.evaluate(d, env)) for d in t.shape) * dtype_bytes(t.dtype)
        return 0

    try:
        for i, b in enumerate(bindings):
            for v in refs(b.value):
                if v in size:
                    last[v] = i
            if isinstance(b.value, Call):
                size[b.var] = held(b.var.type)
                last[b.var] = i
            else:
                alias[b.var] = refs(b.value)
        for v in refs(func.result):
            if v in size:
                last[v] = len(bindings)
    except (DistirError, sym.SymbolicError, ZeroDivisionError):
        return None
    peak = live = 0
    dies: dict[int, list[Var]] = {}
    for v, i in last.items():
        dies.setdefault(i, []).append(v)
    for i, b in enumerate(bindings):
        live += size.get(b.var, 0)
        peak = max(peak, live)
        live -= sum(size[v] for v in dies.get(i, ()))
    return peak
