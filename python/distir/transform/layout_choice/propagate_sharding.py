"""PropagateSharding: give every tensor a placement, inserting redistributes where needed.

Input: a global-view function with plain tensors, ``R.dist.annotate_sharding`` hints,
DTensor-typed parameters (or vars). Output: every tensor computed from a distributed value
is a DTensor, hints are gone, and ``R.dist.redistribute`` sits wherever a producer and a
consumer disagree, ready for ``legalize-redistribute``.

Three steps:

1. :func:`~distir.transform.layout_choice.sharding_graph.preferred_placements` spreads the seeds through
   the ops' sharding rules (forwards and backwards) to a preferred placement per tensor.
2. :func:`~distir.transform.layout_choice.windows.solve_layouts` chooses the layouts of the whole
   function together: one strategy per op (input layouts its rule accepts), each needed
   layout of a value supplied by a redistribute or a recomputation (a replicated ``[8, 8]``
   reshaped to ``[64]`` that is needed both sharded and replicated is reshaped once,
   replicated, and sliced locally: XLA's reshape reshard cache), minimizing the bytes each
   worker sends summed over sampled sizes, as an integer program (HiGHS; long functions in
   windows between layers). ``propagate-sharding.search = "greedy"`` (or a mesh of more
   than ``MILP_MAX_MESH_AXES`` axes, not counting axes of one device that no given layout
   cuts) uses the greedy choice instead: walking the bindings in
   order, each op takes the input layouts that move the fewest bytes given what exists so far.
3. Materialization writes the function with the chosen layouts. With the default search
   (``"auto"``) both layouts are written and the solver's is kept only where it sends no
   more bytes than the greedy one at every sampled size and device count (:func:`_no_worse`).

A layout may cut a dim unevenly (blocks of ``ceil(n / k)``, see :mod:`distir.ir.layout`),
but propagation does not introduce one that cuts a static dim into more pieces than it has
elements at the hinted device count (a symbolic mesh size counts as 4 for the solver,
``GREEDY_FIT_COUNT`` = 8 for the greedy choice), which would leave workers holding nothing:
a reshape to ``[2, 16]`` leaves the 2 whole.
Byte counts need sizes: the solver sums them over samples (see
:mod:`~distir.transform.layout_choice.cost_model`) and reports them with each symbolic mesh size at 4 and
every other symbolic dim at 64; the greedy choice weighs them at 4 and ``GREEDY_DIM_SIZE`` = 512
(``PassContext(config={"propagate-sharding.size_hints": {"s": 2048}})`` fixes a size everywhere). Results that come out partial are all-reduced (a function returns true values);
sharded results stay sharded (their global type records it). Where propagation met
disagreeing shardings for a tensor no hint fixes, both layouts send the same bytes, and they
differ in memory per worker or in the layout of a parameter or result, a
:class:`ShardingAmbiguityWarning` names it and both costs: one ``annotate_sharding`` on it
settles the choice.
"""

from __future__ import annotations

import itertools
import math
import warnings
from fractions import Fraction
from typing import Any, ClassVar

from ...errors import DiagnosticError, DistirError, TypeInferenceError
from ...ir import sym
from ...ir.expr import Binding, Block, Call, Constant, Expr, Function, IRModule, Tuple, TupleGetItem, Var
from ...ir.mesh import DeviceMesh
from ...ir.op import get_op
from ...ir.placement import Partial, Placement, Replicate, Shard, StridedShard
from ...ir.sharding import forward
from ...ir.structural import structural_equal
from ...ir.types import DTensorType, TensorType, TupleType, Type
from ..legalize_redistribute import axis_costs_of, fuse_reshapes
from ..pass_infra import FunctionPass, PassContext, register_pass
from ..weights import PARAM_NAMES
from ..count_variants import COUNT_GUARD, COUNT_VARIANT_OF, guard_of, variant_name
from .count_classes import DEFAULT_COUNTS, count_classes, count_symbol, declared_counts
from .cost_model import DIM_SIZE_HINT, INF, MESH_SIZE_HINT, CostModel, makes_same_choices
from .measure import function_bytes, function_bytes_at, sample_envs
from .plan import LayoutPlan
from .sharding_graph import (Graph, Preferences, Site, Slot, build_graph, field_slots, plain_placement, preferred_placements,
                             strided_params)
from .solution import SOLVER_SECONDS, SolverClock, SolverTimeout, alternative, solver_time_limit, visible_layouts
from .windows import Solved, solve_layouts

__all__ = ["PropagateSharding", "ShardingAmbiguityWarning", "SolverTimeLimitWarning"]

RECOMPUTE_DEPTH = 3
SOLVER_SECONDS_KEY = "propagate-sharding.solver_seconds"  # the PassContext config key of the solver's time


class ShardingAmbiguityWarning(UserWarning):
    """Propagation met two shardings for one tensor and chose; a hint on that tensor decides."""


class SolverTimeLimitWarning(UserWarning):
    """The layout solver ran out of time (``propagate-sharding.solver_seconds``) before proving its
    layout the best: the layout kept is the best found, or the greedy one."""


def _tag(p: Placement | None) -> str:
    if p is None:
        return "plain"
    if p.is_block:
        return "b"
    out = []
    for s in p.specs:
        out.append("r" if isinstance(s, Replicate) else f"s{s.dim}" if isinstance(s, Shard) else "p")
    return "".join(out)


def _without_partials(p: Placement) -> Placement:
    return Placement(tuple(Replicate() if isinstance(s, Partial) else s for s in p.specs))


class _Materializer:
    """Writes the function with the chosen layouts: the solver's plan (``plan``), or, without one,
    today's greedy choice op by op (``propagate-sharding.search = "greedy"``)."""

    def __init__(self, graph: Graph, prefs: Preferences, cost: CostModel, plan: LayoutPlan | None = None,
                 typed: bool = True):
        """``typed``: infer the type of each binding written; else write each with the type its layout
        gives (a draft: :func:`typed_function` infers them once, for the draft kept)."""
        self.typed = typed
        self.g = graph
        self.prefs = prefs
        self.cost = cost
        self.plan = plan
        self.versions: dict[int, dict[Placement | None, Expr]] = {}
        self.primary: dict[int, Placement | None] = {}
        self.emitted: list[Binding] = []
        self.names = {p.name for p in graph.func.params} | {b.var.name for b in graph.func.bindings()}
        # request costs and recomputations by the neighborhood of the value asked for (they depend
        # on nothing else); neighborhoods are numbered while nothing changes, and again after
        self.request_memo: dict[tuple[int, Placement, int], Fraction] = {}
        self.recompute_memo: dict[tuple[int, Placement, int], tuple] = {}
        self.neighborhoods: dict[tuple[int, int], int] = {}
        self.interned: dict[tuple, int] = {}
        self.numbers: dict[int, int] = {}  # id of a slot or site (the graph holds them) -> number()
        self.plain_versions: dict[tuple[int, int, Placement | None], Var] = {}  # plain slots laid out on a mesh
        self.redistribute = get_op("dist.redistribute")
        self.slot_by_id = {s.id: s for s in graph.slots}
        self.candidate_memo: dict[tuple, list] = {}
        self.choice_memo: dict[tuple, tuple] = {}
        self.dtensors: dict[tuple, DTensorType] = {}

    # -- sizes and costs ------------------------------------------------------------------
    def mesh(self, s: Slot) -> DeviceMesh:
        return self.g.mesh_of[s.id]

    def fits(self, s: Slot, p: Placement, mesh: DeviceMesh) -> bool:
        return self.cost.fits(s, p, mesh)

    def redistribute_cost(self, s: Slot, src: Placement | None, dst: Placement) -> Fraction:
        return self.cost.redistribute_cost(s, src, dst)

    def neighborhood(self, s: Slot, depth: int) -> int:
        """A number for what :meth:`request_cost` and :meth:`recompute_plan` of ``s`` at ``depth``
        depend on: its type and the layouts it exists in, and, up to ``RECOMPUTE_DEPTH``, its
        producer's structure and its inputs' layouts (primary, preferred, existing) and
        neighborhoods. Alike values in alike states (the layers of a stack) get the same number, so
        what is worked out for one serves the others."""
        key = (s.id, depth)
        n = self.neighborhoods.get(key)
        if n is None:
            site, inner = s.producer, None
            if depth < RECOMPUTE_DEPTH and site is not None and _recomputable(site):
                inner = (self.number(site), tuple(
                    (self.primary.get(x.id), self.number(x), self.neighborhood(x, depth + 1)) for x in site.ins))
            whole = (self.number(s), tuple(self.versions[s.id]), inner)
            n = self.neighborhoods[key] = self.interned.setdefault(whole, len(self.interned))
        return n

    def number(self, x: Slot | Site) -> int:
        """A small number for what a neighborhood reads of ``x`` that writing never changes (a slot's
        type, mesh and preferred layout; a site's structure), alike slots and sites alike: the
        neighborhoods are then keyed by ints, not by types and layouts hashed and compared again."""
        n = self.numbers.get(id(x))
        if n is None:
            what = ("slot", self.cost.like(x), self.prefs.placement(x)) if isinstance(x, Slot) else (
                "site", x.structure or id(x))
            n = self.numbers[id(x)] = self.interned.setdefault(what, len(self.interned))
        return n

    def request_cost(self, s: Slot, q: Placement, depth: int = 0) -> Fraction:
        """Bytes to get slot ``s`` in layout ``q`` from what exists (without emitting anything)."""
        vs = self.versions[s.id]
        if q in vs or None in vs:  # a plain value is replicated: any layout is a local slice of it
            return Fraction(0)
        key = (self.neighborhood(s, depth), q, depth)
        cost = self.request_memo.get(key)
        if cost is None:
            cost = min(self.redistribute_cost(s, src, q) for src in vs)
            if cost > 0:
                cost = min(cost, self.recompute_plan(s, q, depth)[0])
            self.request_memo[key] = cost
        return cost

    def recompute_plan(self, s: Slot, q: Placement, depth: int) -> tuple[Fraction, tuple[Placement, ...] | None]:
        """Cheapest input layouts that make ``s``'s producer compute ``s`` in layout ``q`` directly."""
        site = s.producer
        if depth >= RECOMPUTE_DEPTH or site is None or not _recomputable(site):
            return INF, None
        key = (self.neighborhood(s, depth), q, depth)
        found = self.recompute_memo.get(key)
        if found is None:
            found = self.recompute_memo[key] = self._recompute_plan(site, q, depth)
        return found

    def _recompute_plan(self, site: Site, q: Placement, depth: int) -> tuple[Fraction, tuple[Placement, ...] | None]:
        best: tuple[Fraction, tuple[Placement, ...] | None] = (INF, None)
        for placements, outs in self.candidates(site, [q]):
            if outs[0] != q:
                continue
            cost = sum((self.request_cost(x, p, depth + 1) for x, p in zip(site.ins, placements)), Fraction(0))
            if cost < best[0]:
                best = (cost, placements)
        return best

    # -- candidate layouts of one op ----------------------------------------------------------
    def axis_options(self, site: Site, a: int, out_hints) -> list[tuple]:
        n = len(site.ins)
        options: list[tuple] = [(Replicate(),) * n]
        factors: list[str] = []

        def add_factor(f):
            if f is not None and f not in factors and f not in site.rule.blocked:
                factors.append(f)

        for k, s in enumerate(site.ins):
            seen = [self.primary.get(s.id), self.prefs.placement(s)] + [p for p in self.versions.get(s.id, {}) if p]
            for p in seen:
                if p is not None and not p.is_block and isinstance(p.specs[a], Shard) and p.specs[a].dim < len(site.lead_in[k]):
                    add_factor(site.lead_in[k][p.specs[a].dim])
        for o, p in enumerate(out_hints):
            if p is not None and not p.is_block and isinstance(p.specs[a], Shard) and p.specs[a].dim < len(site.lead_out[o]):
                add_factor(site.lead_out[o][p.specs[a].dim])
        for f in factors:
            specs = []
            for k, s in enumerate(site.ins):
                d = site.input_dim(k, f)
                specs.append(Shard(d) if d is not None else Replicate())
            options.append(tuple(specs))
        for f, q in site.strided_cuts:  # a strided shard (docs/strided.md) an input already holds: kept, not made
            opt = tuple(site.input_spec(k, f, q) for k in range(n))
            if f not in site.rule.blocked and any(
                    isinstance(spec, StridedShard) and any(p is not None and not p.is_block and p.specs[a] == spec
                                                           for p in [self.primary.get(s.id), *self.versions.get(s.id, {})])
                    for spec, s in zip(opt, site.ins)):
                options.append(opt)
        partial = []
        for s in site.ins:
            p = self.primary.get(s.id)
            partial.append(p.specs[a] if p is not None and not p.is_block and isinstance(p.specs[a], Partial) else Replicate())
        if any(isinstance(x, Partial) for x in partial):
            options.append(tuple(partial))
        unique = []
        for opt in options:
            if opt not in unique:
                unique.append(opt)
        return unique

    def candidates(self, site: Site, out_hints) -> list:
        """(input placements, output placements) pairs the op's rule accepts, in the order the greedy
        choice breaks ties by. They depend on the site's structure and on the layouts its inputs
        have, are preferred in, and exist in: alike sites in alike states (the layers of a stack)
        share them."""
        structure = site.structure
        if structure is None:
            return list(self._candidates(site, out_hints))
        key = (structure, tuple(out_hints),
               tuple((self.primary.get(s.id), self.prefs.placement(s), tuple(self.versions.get(s.id, ()))) for s in site.ins))
        found = self.candidate_memo.get(key)
        if found is None:
            found = self.candidate_memo[key] = list(self._candidates(site, out_hints))
        return found

    def _candidates(self, site: Site, out_hints):
        ndim = site.mesh.ndim
        per_axis = [self.axis_options(site, a, out_hints) for a in range(ndim)]
        for combo in itertools.product(*per_axis):
            placements = tuple(Placement(tuple(combo[a][k] for a in range(ndim))) for k in range(len(site.ins)))
            try:
                for s, p in zip(site.ins, placements):
                    p.validate(ndim, s.tensor.ndim)
                outs = forward(site.rule, placements, ndim, site.op.name)
            except (TypeInferenceError, DistirError):
                continue
            new_inputs = [(x, p) for x, p in zip(site.ins, placements) if p not in self.versions.get(x.id, {})]
            if not all(self.fits(x, p, site.mesh) for x, p in new_inputs) or not all(
                self.fits(x, p, site.mesh) for x, p in zip(site.outs, outs)
            ):
                continue
            yield placements, outs

    # -- emitting ---------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            name = f"{base}_{k}"
            k += 1
        self.names.add(name)
        return name

    def emit(self, name: str, value: Expr, span, t: Type | None = None) -> Var:
        """Bind ``value`` to a new var in the block being written, typed ``t`` in a draft (the type
        its layout gives), else as inferred."""
        if self.typed or t is None:
            t = _inferred(name, value, span)
        var = Var(name, t, span)
        self.emitted.append(Binding(var, value, span))
        return var

    def laid(self, s: Slot, q: Placement, mesh: DeviceMesh | None = None) -> DTensorType:
        """The type of ``s`` laid out ``q`` (on ``mesh``, by default its own)."""
        return self.dtensor(s.tensor, mesh or self.mesh(s), q)

    def dtensor(self, t: TensorType, mesh: DeviceMesh, q: Placement) -> DTensorType:
        """``t`` laid out ``q`` on ``mesh``: one object per type written (the layers of a stack repeat
        the same few), so that the memos keyed by types (inference, lowering) find it by identity."""
        key = (t, mesh, q)
        found = self.dtensors.get(key)
        if found is None:
            found = self.dtensors[key] = DTensorType(t.shape, t.dtype, mesh, q)
        return found

    def as_var(self, s: Slot, q: Placement | None) -> Expr:
        e = self.versions[s.id][q]
        if isinstance(e, TupleGetItem):
            var = self.emit(self.fresh(s.name), e, s.span, e.type)
            self.versions[s.id][q] = var
            return var
        return e

    def obtain(
        self, s: Slot, q: Placement, depth: int = 0, name: str | None = None, mesh: DeviceMesh | None = None
    ) -> Expr:
        """Slot ``s`` in layout ``q``: an existing version, a recomputation or a redistribute.

        ``name`` names a new binding (a hint's var keeps its name for the value it stood for).
        ``mesh``: where a plain value is wanted (a plain value has no mesh of its own)."""
        vs = self.versions[s.id]
        if q in vs:
            return self.as_var(s, q)
        if None in vs:
            return self.obtain_plain(s, q, mesh, name)
        cost, _, src = min((self.redistribute_cost(s, p, q), i, p) for i, p in enumerate(vs))
        if self.plan is not None:  # the solver says whether to recompute
            root = self.slot_by_id[self.plan.root_of(s)]
            chosen = self.plan.recompute.get((root.id, q))
            rc, placements, site = (Fraction(0), chosen.ins, root.producer) if chosen is not None else (INF, None, None)
        elif cost > 0:
            rc, placements = self.recompute_plan(s, q, depth)
            site = s.producer
        else:
            placements = None
        if placements is not None and (self.plan is not None or rc < cost):
            args = self.rebuild_args(site, placements, depth + 1)
            call = Call(site.op, args, site.binding.value.attrs, site.binding.span)
            var = self.emit(name or self.fresh(f"{s.name}_{_tag(q)}"), call, site.binding.span, self.laid(s, q))
            self.add_version(s, q, var)
            return var
        if cost >= INF or src is None:
            raise DiagnosticError(
                f"propagate-sharding: no way to lay out '{s.name}' as \"{q}\" on mesh {self.mesh(s).shape_str()}", s.span
            )
        x = self.as_var(s, src)
        call = Call(self.redistribute, (x,), {"device_mesh": self.mesh(s), "placement": q}, s.span)
        var = self.emit(name or self.fresh(f"{s.name}_{_tag(q)}"), call, s.span, self.laid(s, q))
        self.add_version(s, q, var)
        return var

    def add_version(self, s: Slot, q: Placement, var: Var) -> None:
        """``s`` now exists in layout ``q`` too. The only change to what a neighborhood reads, so the
        numbering starts again: the outputs and hints written otherwise are new values, downstream
        of every neighborhood numbered so far."""
        self.versions[s.id][q] = var
        self.neighborhoods.clear()

    def obtain_plain(self, s: Slot, q: Placement | None, mesh: DeviceMesh | None, name: str | None) -> Expr:
        """A plain value (the same on every worker) in layout ``q`` on ``mesh``: the value itself when
        replicated, else R.dist.replicate onto the mesh and a local redistribute (no communication)."""
        plain = self.versions[s.id][None]
        if q is None or q.is_replicated or mesh is None:
            return plain
        key = (s.id, id(mesh), q)
        if key not in self.plain_versions:
            rkey = (s.id, id(mesh), None)
            if rkey not in self.plain_versions:
                whole = Placement.replicated(mesh.ndim)
                call = Call(get_op("dist.replicate"), (plain,), {"device_mesh": mesh}, s.span)
                self.plain_versions[rkey] = self.emit(self.fresh(f"{s.name}_{_tag(whole)}"), call, s.span,
                                                      self.laid(s, whole, mesh))
            call = Call(self.redistribute, (self.plain_versions[rkey],), {"device_mesh": mesh, "placement": q}, s.span)
            self.plain_versions[key] = self.emit(name or self.fresh(f"{s.name}_{_tag(q)}"), call, s.span, self.laid(s, q, mesh))
        return self.plain_versions[key]

    def rebuild_args(self, site: Site, placements, depth: int = 0) -> tuple[Expr, ...]:
        """The call's arguments with each input slot obtained in its placement, in order. (Methods, not
        nested closures: a closure that calls itself is a reference cycle, and it held the whole
        materializer alive until the cyclic collector ran.)"""
        it = iter(zip(site.ins, placements))
        return tuple(self._rebuild(a, it, site, depth) for a in site.binding.value.args)

    def _rebuild(self, e: Expr, it, site: Site, depth: int) -> Expr:
        if isinstance(e, Constant):
            next(it)
            return e
        if isinstance(e, Tuple):
            return Tuple(tuple(self._rebuild(f, it, site, depth) for f in e.fields), e.span)
        if isinstance(e, (Var, TupleGetItem)) and isinstance(e.type, (TensorType, DTensorType, TupleType)):
            return _structured(e.type, None, lambda _: self._take(it, site, depth))
        return e

    def _take(self, it, site: Site, depth: int) -> Expr:
        s, p = next(it)
        return self.obtain(s, p, depth, mesh=site.mesh)

    # -- the walk ---------------------------------------------------------------------------
    def initial_placement(self, s: Slot) -> Placement | None:
        if not s.distributable:
            return None
        if s.fixed is not None:
            return s.fixed
        if self.plan is not None:
            return self.plan.primary[s.id]
        p = _without_partials(self.prefs.placement(s))
        return None if p is None else self.cost.fitted(s, p, self.mesh(s))

    def op_site(self, site: Site) -> None:
        b = site.binding
        if not any(s.distributable for s in site.ins) and not any(s.fixed for s in site.outs):
            args = self.rebuild_args(site, [None] * len(site.ins))  # nothing distributed: kept as it is
            var = self.emit(b.var.name, Call(site.op, args, b.value.attrs, b.span), b.span)
            self.set_outputs(site, var, [None] * len(site.outs))
            return
        if self.block_site(site):
            return
        if site.rule is None and (site.op.sharding is not None or not site.outs):
            raise DiagnosticError(f"propagate-sharding: cannot place the inputs of R.{site.op.name}", b.span)
        if self.plan is not None:
            chosen = self.plan.strategy[id(site)]
            choice, outs = chosen.ins, chosen.outs
        elif site.rule is None:
            choice = tuple(Placement.replicated(site.mesh.ndim) for _ in site.ins)
            outs = [Placement.replicated(site.mesh.ndim)] * len(site.outs)
        else:
            choice, outs = self.greedy_choice(site)
            if choice is None:
                raise DiagnosticError(
                    f"propagate-sharding: no layout of the inputs of R.{site.op.name} fits its sharding rule "
                    f"for '{b.var.name}'",
                    b.span,
                )
        args = self.rebuild_args(site, choice)
        laid = iter(outs)
        t = _structured_type(b.var.type, lambda leaf: self.dtensor(leaf, site.mesh, next(laid)))
        var = self.emit(b.var.name, Call(site.op, args, b.value.attrs, b.span), b.span, t)
        self.set_outputs(site, var, list(outs))
        for s in site.outs:
            if s.fixed is not None and self.primary[s.id] != s.fixed:
                self.obtain(s, s.fixed, name=s.hinted_as)  # the hint's var names the value it asked for
                self.primary[s.id] = s.fixed

    def greedy_choice(self, site: Site) -> tuple:
        """(input layouts, output layouts) the greedy choice takes for ``site``: the candidate that
        moves the fewest bytes given what exists, then the fewest outputs unlike the preferences,
        then the fewest inputs moved, then the first. It depends on the site's structure, its
        outputs' hints and its inputs' neighborhoods and layouts: alike sites in alike states (the
        layers of a stack) share it. (None, None): no candidate."""
        hints = [s.fixed or self.prefs.placement(s) for s in site.outs]
        key = None
        if site.structure is not None:
            key = (site.structure, tuple(hints),
                   tuple((self.neighborhood(x, 0), self.primary.get(x.id), self.prefs.placement(x), x.distributable)
                         for x in site.ins),
                   tuple((s.fixed, self.cost.like(s)) for s in site.outs))
            found = self.choice_memo.get(key)
            if found is not None:
                return found
        best, choice, outs = None, None, None
        for index, (placements, out_pls) in enumerate(self.candidates(site, hints)):
            cost = sum((self.request_cost(s, p) for s, p in zip(site.ins, placements)), Fraction(0))
            for s, p in zip(site.outs, out_pls):
                if s.fixed is not None and s.fixed != p:
                    cost += self.redistribute_cost(s, p, s.fixed)
            mismatch = sum(
                (p != h) * len(p) if h.is_block else sum(a != b for a, b in zip(p.specs, h.specs))
                for p, h in zip(out_pls, hints)
            )
            moved = sum(
                p != self.primary.get(s.id) if s.distributable else not p.is_replicated
                for s, p in zip(site.ins, placements)
            )
            rank = (cost, mismatch, moved, index)
            if best is None or rank < best:
                best, choice, outs = rank, placements, out_pls
        if key is not None:
            self.choice_memo[key] = (choice, outs)
        return choice, outs

    def block_site(self, site: Site) -> bool:
        """An op whose inputs are held in one block layout and that keeps it (elementwise, or a
        reduction that stays local, see :func:`distir.ir.sharding.block_form`) runs on them as they
        are; any other op reading a block layout takes its inputs by cost like the rest."""
        held = [self.primary.get(s.id) for s in site.ins]
        if not any(p is not None and p.is_block for p in held):
            return False
        b = site.binding
        call = Call(site.op, self.rebuild_args(site, held), b.value.attrs, b.span)
        try:
            t = call.type
        except DistirError:
            return False  # not kept local: the inputs are redistributed by cost
        var = self.emit(b.var.name, call, b.span)
        self.set_outputs(site, var, [t.placement] if isinstance(t, DTensorType) else [f.placement for f in t.fields])
        for s in site.outs:
            if s.fixed is not None and self.primary[s.id] != s.fixed:
                self.obtain(s, s.fixed, name=s.hinted_as)
                self.primary[s.id] = s.fixed
        return True

    def set_outputs(self, site: Site, var: Var, placements) -> None:
        if isinstance(var.type, TupleType):
            for i, (s, p) in enumerate(zip(site.outs, placements)):
                self.versions[s.id] = {p: TupleGetItem(var, i)}
                self.primary[s.id] = p
        else:
            for s, p in zip(site.outs, placements):
                self.versions[s.id] = {p: var}
                self.primary[s.id] = p

    def hint_site(self, site: Site) -> None:
        b = site.binding
        x, y = site.ins[0], site.outs[0]
        if site.op.name == "dist.replicate":  # written by an earlier run: keep it
            q = Placement.replicated(self.mesh(y).ndim)
            value = self.obtain_plain(x, q, None, None) if not x.distributable else self.as_var(x, self.primary[x.id])
            value = self.emit(b.var.name, Call(site.op, (value,), b.value.attrs, b.span), b.span, self.laid(y, q))
            self.versions[y.id] = {q: value}
            self.primary[y.id] = q
            return
        q = b.value.attrs["placement"]
        if not x.distributable:
            raise DiagnosticError(
                f"propagate-sharding: '{b.var.name}' lays out a value computed from constants only; it is the same on "
                "every worker, so a hint on it has no effect",
                b.span,
            )
        if self.mesh(y) != self.mesh(x):  # a transfer to another mesh (pipeline stages): kept as written
            src = self.as_var(x, self.primary[x.id])
            call = Call(self.redistribute, (src,), {"device_mesh": self.mesh(y), "placement": q}, b.span)
            value = self.emit(b.var.name, call, b.span, self.laid(y, q))
        else:
            value = self.obtain(x, q, name=b.var.name)
            if self.plan is not None and site.op.name == "dist.annotate_sharding":  # the hint's value is the
                # annotated value: its readers share the annotated value's layouts
                self.versions[y.id] = self.versions[x.id]
                self.primary[y.id] = q
                return
        self.versions[y.id] = {q: value}
        self.primary[y.id] = q

    def result(self, e: Expr, ret_type) -> Expr:
        if isinstance(e, Tuple):
            fields = ret_type.fields if isinstance(ret_type, TupleType) else [None] * len(e.fields)
            return Tuple(tuple(self.result(f, r) for f, r in zip(e.fields, fields)), e.span)
        if isinstance(e, (Var, TupleGetItem)) and isinstance(e.type, (TensorType, DTensorType, TupleType)):
            slots = iter(self.slots_of_expr(e))
            return _structured(e.type, ret_type, lambda r: self.result_slot(next(slots), r))
        return e

    def slots_of_expr(self, e: Expr) -> list[Slot]:
        if isinstance(e, TupleGetItem):
            return field_slots(self.slots_of_expr(e.tuple_value), e.tuple_value.type, e.index)
        return self.g.var_slots.get(e, [])

    def result_slot(self, s: Slot, ret_type) -> Expr:
        p = self.primary.get(s.id)
        if p is None:
            return self.versions[s.id][None]
        q = ret_type.placement if isinstance(ret_type, DTensorType) else p if p.is_block else _without_partials(p)
        return self.obtain(s, q)

    def run(self) -> Function:
        f = self.g.func
        params = []
        for p in f.params:
            slots = self.g.var_slots[p]
            if isinstance(p.type, TupleType):
                raise DiagnosticError(f"propagate-sharding: parameter '{p.name}' is a tuple; pass its tensors", p.span)
            if not slots:
                params.append(p)
                continue
            s = slots[0]
            pl = self.initial_placement(s)
            t = self.dtensor(s.tensor, self.mesh(s), pl)
            var = p if p.type == t else Var(p.name, t, p.span)
            self.versions[s.id] = {pl: var}
            self.primary[s.id] = pl
            params.append(var)
        for s in self.g.constants.values():
            self.versions[s.id] = {None: s.constant}
            self.primary[s.id] = None
        sites = {id(site.binding): site for site in self.g.sites}
        blocks = []
        for block in f.blocks:
            self.emitted = []
            for b in block.bindings:
                site = sites.get(id(b))
                if site is None:
                    continue  # aliases, tuples and item reads: their slots are the fields themselves
                if site.is_hint:
                    self.hint_site(site)
                else:
                    self.op_site(site)
            blocks.append((block, self.emitted))
        self.emitted = blocks[-1][1] if blocks else []  # the result's reductions join the last block
        result = self.result(f.result, f.ret_type)
        if not blocks and self.emitted:
            blocks.append((None, self.emitted))
        ret_type = result.type if f.ret_type is not None else None  # a declared return type follows the layout
        return f.replace(params=tuple(params), blocks=_blocks(blocks, result), result=result, ret_type=ret_type)


def _inferred(name: str, value: Expr, span) -> Type:
    try:
        return value.type
    except DistirError as err:
        raise DiagnosticError(f"propagate-sharding: '{name}' does not type after propagation: {err}", span) from None


def _structured_type(t: Type, leaf) -> Type:
    """``t`` with each tensor type in it replaced by ``leaf(tensor type)``, in order."""
    if isinstance(t, TupleType):
        return TupleType(tuple(_structured_type(f, leaf) for f in t.fields))
    return leaf(t)


class _Mistyped(Exception):
    """A draft's type differs from the one inferred (a draft is then not to be trusted)."""


def typed_function(func: Function) -> Function:
    """A draft written with the types its layouts give (``_Materializer(typed=False)``), each binding's
    type inferred: the function to keep. Raises the one-line error of a binding that does not type,
    and :class:`_Mistyped` where an inferred type differs from the draft's."""
    for b in func.bindings():
        t = _inferred(b.var.name, b.value, b.span)
        if t is not b.var.type and not (hash(t) == hash(b.var.type) and t == b.var.type):
            raise _Mistyped(b.var.name)
    return func


def _recomputable(site: Site) -> bool:
    """Whether the greedy choice may compute ``site``'s one output again in another layout."""
    return site.rule is not None and not site.rule.reductions and len(site.outs) == 1 and bool(site.ins)


def _structured(t, ret_type, leaf):
    """A value shaped like type ``t`` whose tensors are ``leaf(declared type)``, in slot order."""
    if isinstance(t, TupleType):
        fields = ret_type.fields if isinstance(ret_type, TupleType) else [None] * len(t.fields)
        return Tuple(tuple(_structured(f, r, leaf) for f, r in zip(t.fields, fields)))
    if not isinstance(t, (TensorType, DTensorType)):
        raise DiagnosticError(f"propagate-sharding: a tuple holding a {t} is not supported; keep tuples to tensors")
    return leaf(ret_type)


def _blocks(parts, result: Expr) -> tuple[Block, ...]:
    """Blocks in the original order, with dataflow outputs recomputed from the uses outside each block."""
    from ...ir.expr import leaf_vars

    used_after: list[set[Var]] = []
    later: set[Var] = set(leaf_vars(result))
    for _, bindings in reversed(parts):
        used_after.append(set(later))
        for b in bindings:
            later.update(leaf_vars(b.value))
    used_after.reverse()
    out = []
    for (block, bindings), after in zip(parts, used_after):
        if not bindings:
            continue
        dataflow = block.is_dataflow if block is not None else False
        outputs = None
        if dataflow:
            defined = [b.var for b in bindings]
            outputs = tuple(v for v in defined if v in after)
        out.append(Block(tuple(bindings), dataflow, outputs))
    return tuple(out)


@register_pass
class PropagateSharding(FunctionPass):
    """Lay out every tensor from a few hints, choosing by communication cost; insert redistributes."""

    name: ClassVar[str] = "propagate-sharding"

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        declared = declared_counts(ctx)
        counts = DEFAULT_COUNTS if declared is None else declared
        funcs: dict[str, Function] = {}
        changed = False
        # a function the module already has variants of (written by hand, or an earlier propagation's)
        # serves the counts they leave: without declared counts it is laid out once, not split again
        has_variants = {guard_of(f)[0] for f in mod.functions.values() if guard_of(f) is not None}
        for fname, func in mod.functions.items():
            if guard_of(func) is not None:  # a variant already: laid out for its own counts
                funcs[fname] = self.transform_function(func, mod, ctx, guard_of(func)[2])
                changed |= funcs[fname] is not func
                continue
            if declared is None and fname in has_variants:
                funcs[fname] = self.transform_function(func, mod, ctx, None)
                changed |= funcs[fname] is not func
                continue
            for name, new in self.variants(func, mod, ctx, counts, declared is not None):
                if name in mod.functions and name != fname:
                    raise DistirError(f"propagate-sharding: @{fname}'s count variant @{name} would replace the "
                                      f"module's function of that name; rename it")
                funcs[name] = new
                changed |= name != fname or new is not func
        return mod.replace(functions=funcs) if changed else mod

    def variants(self, func: Function, mod: IRModule, ctx: PassContext, counts: tuple[int, ...],
                 declared: bool = True):
        """(name, function) of ``func`` laid out per class of ``counts``: one where the classes' layouts
        agree, else the class of the largest count under ``func``'s name and each other class a
        guarded variant (:mod:`distir.transform.count_variants`). Not ``declared`` (the default
        counts): a function whose meshes are sized by more than one symbol, or whose mesh size the
        size hints fix, is laid out once, as the user's sizes say.

        A class is laid out again only where its counts could change the choice: where the costs the
        first layout priced are the same multiple at the class's counts and every cut fits alike
        (:func:`~.cost_model.makes_same_choices`), and that layout did not hang on the guard's
        comparison at sampled counts, the class gets that layout without a solve of its own (a stack
        of alike layers, evenly cut at every count, is laid out once)."""
        names = {m: f"mesh[{i}]" for i, m in enumerate(mod.meshes())}
        graph = build_graph(func, names)
        if not graph.is_distributed:
            return [(func.name, func)]
        hints = dict(ctx.config.get("propagate-sharding.size_hints", {}) or {})
        try:
            symbol = count_symbol(graph)
        except DistirError:
            if declared:
                raise
            symbol = None
        if symbol is None or (not declared and symbol in hints):
            return [(func.name, self.transform_function(func, mod, ctx, None, graph))]
        classes = count_classes(graph, counts, even=declared)
        if len(classes) == 1 and not declared:  # the default counts, alike in every cut: laid out as ever
            return [(func.name, self.transform_function(func, mod, ctx, None, graph))]
        # the layout weighed over the sampled counts (as without declared counts) competes in each class,
        # kept where it sends no more at any of the class's sampled sizes: the solver prices no regroup,
        # so a layout planned at a count alone may send more there
        trace: dict[str, Any] = {}
        sampled = self.transform_function(func, mod, ctx, None, graph, trace)
        axis_costs = axis_costs_of(ctx)
        laid: list[tuple[list[int], Function]] = []
        for cls in classes:
            if _same_choices_at(trace, graph, hints, axis_costs, cls):
                new = sampled
            else:
                new = self.transform_function(func, mod, ctx, cls)
                if new is not sampled and (structural_equal(new, sampled) or _no_worse(
                        sampled, new, graph, hints, axis_costs, cls)):
                    new = sampled  # the same, or no more bytes at any of the class's sampled sizes: kept as without counts
            same = next((entry for entry in laid if entry[1] is new or structural_equal(entry[1], new)), None)
            if same is None:
                laid.append((list(cls), new))
            else:
                same[0].extend(cls)
        if len(laid) == 1:
            return [(func.name, laid[0][1])]
        top = max(counts)
        # declared: the class of the largest count keeps the name (it serves the counts not declared);
        # the default counts: the layout weighed over the sampled counts, where a class has it, keeps it
        # (a count above 8 runs what it ran before), else the class of 8
        main = next((cls for cls, new in laid if new is sampled), None) if not declared else None
        out = []
        for cls, new in laid:
            if cls is main or (main is None and top in cls):
                out.append((func.name, new))
            else:
                cls = sorted(cls)
                name = variant_name(func.name, cls)
                attrs = {**new.attrs, COUNT_GUARD: {symbol: cls}, COUNT_VARIANT_OF: func.name}
                out.append((name, new.replace(name=name, attrs=attrs)))
        return out

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext,
                           counts: tuple[int, ...] | None = None, graph: Graph | None = None,
                           trace: dict | None = None) -> Function:
        names = {m: f"mesh[{i}]" for i, m in enumerate(mod.meshes())}
        graph = graph or build_graph(func, names)
        if not graph.is_distributed:
            return func  # nothing is distributed
        new = lay_out(graph, ctx, counts, trace)
        declared = strided_params(func)
        if declared and ctx.config.get("propagate-sharding.search", "auto") != "greedy":
            _compare_with_plain(func, new, declared, names, ctx)
        return new


class StridedLayoutWarning(UserWarning):
    """A parameter declared with a strided shard makes the function send more than the plain shard."""


def _compare_with_plain(func: Function, new: Function, declared, names, ctx: PassContext) -> None:
    """Lay ``func`` out again (greedily) with its strided parameters declared plain (``S[d/k]`` as ``S[d]``) and
    warn, naming them, where that plain twin sends fewer bytes per worker at the size hints (each
    symbolic mesh size 4, other symbolic dims 64, or ``size_hints``): the declared layout is the
    caller's and is kept. A strided layout the solver chooses needs no such check: the plain one is
    among the columns it compares."""
    with warnings.catch_warnings(), PassContext(config={**ctx.config, "propagate-sharding.search": "greedy"}) as plain:
        warnings.simplefilter("ignore")  # the twin laid out by the greedy choice: fast, and never better than the solver's
        twin = lay_out(build_graph(func, names, plain_params=True), plain)
    hints = dict(ctx.config.get("propagate-sharding.size_hints", {}) or {})
    mesh_names, symbols = set(), set()
    for v in [*new.params, *(b.var for b in new.bindings())]:
        for t in (v.type.fields if isinstance(v.type, TupleType) else (v.type,)):
            if isinstance(t, DTensorType):
                mesh_names |= set().union(set(), *(sym.free_vars(d) for d in t.mesh.shape if not isinstance(d, int)))
            symbols |= set().union(set(), *(sym.free_vars(d) for d in getattr(t, "shape", ()) if not isinstance(d, int)))
    env = {n: hints.get(n, MESH_SIZE_HINT if n in mesh_names else DIM_SIZE_HINT) for n in sorted(symbols | mesh_names)}
    axis_costs = axis_costs_of(ctx)
    a = function_bytes(fuse_reshapes(new, costs=axis_costs), env, axis_costs)
    b = function_bytes(fuse_reshapes(twin, costs=axis_costs), env, axis_costs)
    if a is None or b is None or sum(a) <= sum(b):
        return
    mesh = next(t.mesh for t in (p.type for p in func.params) if isinstance(t, DTensorType))
    workers = math.prod(d if isinstance(d, int) else int(sym.evaluate(d, env)) for d in mesh.shape)
    at = (" at " + ", ".join(f"{k}={v}" for k, v in sorted(env.items()))) if env else ""
    which = ", ".join(f"'{n}' {p}" for n, p in declared)
    plain = ", ".join(f"'{n}' {plain_placement(p)}" for n, p in declared)
    warnings.warn(
        f"propagate-sharding: {which} makes @{func.name} send "
        f"{_bytes(sum(a) / workers)} per worker against {_bytes(sum(b) / workers)} with {plain}{at}; "
        f"declare the plain layout, or give the sizes you run at (size_hints)",
        StridedLayoutWarning, stacklevel=2)


SEARCHES = ("auto", "milp", "greedy")
GREEDY_DIM_SIZE = 512
GREEDY_FIT_COUNT = 8
# "auto": functions on meshes of more axes (not counting CostModel.replicated_axes) are laid out greedily
# (strategies multiply per axis)
MILP_MAX_MESH_AXES = 2


def lay_out(graph: Graph, ctx: PassContext, counts: tuple[int, ...] | None = None,
            trace: dict | None = None) -> Function:
    """Choose the layouts of ``graph``'s function and write it with them (warnings included).
    ``counts``: the device counts of one class (:mod:`.count_classes`): a symbolic mesh size is weighed
    at those counts only (the solver's objective and the guard's samples), and a cut fits where it
    leaves no worker empty at the largest of them; None: the sampled counts, as without declared counts.
    ``trace``: a dict given the cost models the choice read (``"cost"``, ``"greedy_cost"``) and whether
    it hung on more than their costs (``"weighed"``: the guard compared two different layouts at
    sampled sizes, or the solver ran out of time), for :func:`_same_choices_at`."""
    trace = {} if trace is None else trace
    prefs = preferred_placements(graph)
    hints: dict[str, Any] = dict(ctx.config.get("propagate-sharding.size_hints", {}) or {})
    search = ctx.config.get("propagate-sharding.search", "auto")
    if search not in SEARCHES:
        raise DistirError(
            f"propagate-sharding.search must be one of {', '.join(SEARCHES)}, got {search!r}"
        )
    guard = search == "auto"
    axis_costs = axis_costs_of(ctx)  # plans by time: propagation prices redistributes as legalize will plan them
    cost, greedy_cost = _cost_models(graph, hints, axis_costs, counts)
    trace.update(cost=cost, greedy_cost=greedy_cost, weighed=False)
    if search == "auto":  # the axes ops run replicated along (of one device, cut by no given layout) add no strategy
        search = "milp" if all(m.ndim - len(cost.replicated_axes(m)) <= MILP_MAX_MESH_AXES
                               for m in graph.mesh_of.values()) else "greedy"
    if search == "milp" and _has_block_layouts(graph):
        search = "greedy"  # the solver does not cost block layouts (docs/blocks.md); greedy does
    if search == "greedy":
        new = _Materializer(graph, prefs, greedy_cost).run()
        _warn_ambiguities(graph, prefs)
        return new
    with solver_time_limit(solver_seconds(ctx)) as clock:
        try:
            plan, solved = solve_layouts(graph, prefs, cost)
        except SolverTimeout:
            trace["weighed"] = True
            _warn_time_limit(graph, clock, found_none=True)
            new = _Materializer(graph, prefs, greedy_cost).run()
            _warn_ambiguities(graph, prefs)
            return new
        guard_cost = greedy_cost if guard else None
        try:  # drafts, typed as their layouts say: only the function kept is typed binding by binding
            new, kept_greedy = _choose(graph, prefs, plan, cost, guard_cost, hints, axis_costs, draft=True,
                                       counts=counts, trace=trace)
        except _Mistyped:  # a draft's types were not the inferred ones: compare typed functions
            new, kept_greedy = _choose(graph, prefs, plan, cost, guard_cost, hints, axis_costs, draft=False,
                                       counts=counts, trace=trace)
        if kept_greedy:
            _warn_ambiguities(graph, prefs)
        else:
            _warn_ties(graph, prefs, plan, solved, clock)
        _warn_time_limit(graph, clock, kept_greedy)
        trace["weighed"] |= clock.gap is not None or clock.ties_unsettled
    return new


def _cost_models(graph: Graph, hints, axis_costs, counts: tuple[int, ...] | None) -> tuple[CostModel, CostModel]:
    """(the solver's cost model, the greedy choice's) at ``counts`` (None: the sampled counts). The
    greedy choice as it always was: bytes with other symbolic dims at 512, and a symbolic mesh size
    taken as 8 (the class's largest count) when deciding whether a cut would leave workers empty."""
    cost = CostModel(graph, hints, axis_costs=axis_costs, mesh_samples=counts)
    greedy_cost = CostModel(graph, hints, dim_size=GREEDY_DIM_SIZE, fit_count=max(counts) if counts else GREEDY_FIT_COUNT,
                            axis_costs=axis_costs, mesh_samples=counts)
    return cost, greedy_cost


def _same_choices_at(trace: dict, graph: Graph, hints, axis_costs, counts: tuple[int, ...]) -> bool:
    """Whether laying ``graph``'s function out for the class ``counts`` would choose what the layout
    ``trace`` records chose: it hung on its cost models alone, and the class's models price and fit
    everything they were asked alike (:func:`~.cost_model.makes_same_choices`). Block layouts are
    priced outside the models' memos: never the same."""
    if not trace or trace.get("weighed", True) or _has_block_layouts(graph):
        return False
    cost, greedy_cost = _cost_models(graph, hints, axis_costs, counts)
    return makes_same_choices(trace["cost"], cost, solver=True) and makes_same_choices(trace["greedy_cost"], greedy_cost)


def solver_seconds(ctx: PassContext) -> float:
    """``propagate-sharding.solver_seconds``: the seconds the solver may take per function (checked)."""
    value = ctx.config.get(SOLVER_SECONDS_KEY, SOLVER_SECONDS)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise DistirError(f"{SOLVER_SECONDS_KEY} must be a positive number of seconds, got {value!r}")
    return float(value)


def _warn_time_limit(graph: Graph, clock: SolverClock, kept_greedy: bool = False, found_none: bool = False) -> None:
    """Say what the solver's time limit cut short (nothing when it cut nothing): ``found_none``, no
    layout at all (the greedy one is written); ``kept_greedy``, the guard kept the greedy layout."""
    if found_none:
        what = "found no layout in time: the greedy layout is kept"
    elif clock.gap is None and not clock.ties_unsettled:
        return
    elif kept_greedy:
        what = ("stopped before proving its layout the best, and the greedy layout sends less at some sampled "
                "size: the greedy layout is kept")
    elif clock.gap is not None and math.isfinite(clock.gap):
        what = (f"stopped before proving its layout the best: the layout kept sends at most "
                f"{clock.gap:.1%} more than the best (summed over the sampled sizes)")
    elif clock.gap is not None:  # no bound on the best yet
        what = "stopped before proving its layout the best (how much more it sends than the best is not known)"
    else:
        what = "stopped while breaking ties between layouts that send the same bytes: the first found is kept"
    warnings.warn(
        f"propagate-sharding: @{graph.func.name}: the layout solver {what} "
        f"({SOLVER_SECONDS_KEY} = {clock.seconds:g}, distir-opt --solver-seconds); raise it for the "
        f"best layout, or give the sizes you run at (size_hints) to make the choice smaller",
        SolverTimeLimitWarning, stacklevel=3)


def _choose(graph: Graph, prefs: Preferences, plan: LayoutPlan, cost: CostModel, greedy_cost: CostModel | None,
            hints, axis_costs, draft: bool, counts: tuple[int, ...] | None = None,
            trace: dict | None = None) -> tuple[Function, bool]:
    """(the function to keep, whether it is the greedy layout): the one ``plan`` lays out, unless the
    greedy choice (given ``greedy_cost``: the guard) sends fewer bytes at some sampled size. Both are
    written as drafts (``draft``) and compared; the one kept is typed."""
    new = _Materializer(graph, prefs, cost, plan, typed=not draft).run()
    if greedy_cost is not None:
        try:
            greedy = _Materializer(graph, prefs, greedy_cost, typed=not draft).run()
        except DiagnosticError:
            greedy = None  # the greedy choice cannot lay it out; the solver could
        differ = greedy is not None and not structural_equal(new, greedy)
        if trace is not None:
            trace["weighed"] = differ  # which is kept hangs on the bytes at the sampled counts
        if differ and not _no_worse(new, greedy, graph, hints, axis_costs, counts):
            try:
                return typed_function(greedy), True
            except DiagnosticError:
                pass  # the greedy layout does not type: the solver's is kept
    return typed_function(new), False


def write_layouts(graph: Graph, plan: LayoutPlan, cost: CostModel) -> Function:
    """``graph``'s function written with the solver's ``plan`` as it is, with no comparison with the
    greedy choice: for a pass that chose the plan itself (auto-shard, which also chose the layouts of
    the parameters: ``plan.primary`` has each)."""
    return _Materializer(graph, preferred_placements(graph), cost, plan).run()


def _has_block_layouts(graph: Graph) -> bool:
    """Whether any value of the function is given or hinted a block layout."""
    return any(s.fixed is not None and s.fixed.is_block for s in graph.slots) or any(
        isinstance(site.binding.value.attrs.get("placement"), Placement)
        and site.binding.value.attrs["placement"].is_block
        for site in graph.sites if isinstance(site.binding.value, Call))


def _no_worse(new: Function, old: Function, graph: Graph, hints, axis_costs=None,
              counts: tuple[int, ...] | None = None) -> bool:
    """Whether ``new`` sends no more bytes (with ``axis_costs``: takes no more time) than ``old`` at
    every sampled size and device count (``counts``: those of one class) (:func:`~distir.transform.layout_choice.measure.sample_envs`), both
    within the program and counting the gathers of sharded results, with the reshape chains legalize
    fuses fused and the regroups lowering writes priced (the greedy layout of a Llama-70B-like layer at
    256 workers re-blocks its heads 4 times: 735 MB per worker counted, where the solver's sends 402)."""
    mesh_names = set()
    for m in graph.mesh_of.values():
        for d in m.shape:
            if not isinstance(d, int):
                mesh_names |= sym.free_vars(d)
    new, old = fuse_reshapes(new, costs=axis_costs), fuse_reshapes(old, costs=axis_costs)
    envs = sample_envs(graph.func, mesh_names, hints, counts)
    # the regroups lowering writes, priced as they run at each sampled count: a layout whose reshapes
    # re-block cut heads at counts that do not divide them is not kept for bytes it does not count
    for a, b in zip(function_bytes_at(new, envs, axis_costs, True), function_bytes_at(old, envs, axis_costs, True)):
        if a is None or b is None:
            continue
        if a[0] > b[0] or a[0] + a[1] > b[0] + b[1]:
            return False
    return True


def _bytes(x: Fraction) -> str:
    return f"{int(x):,} B" if x.denominator == 1 else f"{float(x):,.1f} B"


def _remedy(graph: Graph, name: str) -> str:
    """What the user can do to choose: in IR they write, a hint on the value; in a model imported from
    ``relax.frontend.nn`` (its weights' names recorded) the bindings are TVM's, out of reach, so a
    shard-plan entry on a weight instead (the parameter's own, or those of the weights it is made of)."""
    hint = f"add R.dist.annotate_sharding on '{name}' to choose"
    recorded = graph.func.attrs.get(PARAM_NAMES)
    if recorded is None or len(recorded) != len(graph.func.params):
        return hint
    by_param = {p.name: str(n) for p, n in zip(graph.func.params, recorded)}
    if name in by_param:
        return (f"to choose, give the weight '{by_param[name]}' a layout in the shard plan "
                f"(ShardParams({{'{by_param[name]}': ...}}) or --shard '{by_param[name]}=...')")
    return ("to choose, lay out the weights it is computed from in the shard plan (ShardParams, --shard "
            "PATTERN=PLACEMENT), or give the sizes it is weighed at (propagate-sharding.size_hints)")


def _warn_ties(graph: Graph, prefs: Preferences, plan: LayoutPlan, solved: list[Solved],
               clock: SolverClock | None = None) -> None:
    """Warn where propagation met two layouts for a tensor that really cost the same: the same
    bytes sent (the solver's objective, summed over the sampled sizes), and a difference the user
    may care about, in the bytes each worker holds or in what the caller sees (the layout of a
    parameter or a result). A tie that changes neither is settled silently by the tie-break. Each
    check solves the program again: none once half the solver's time (``clock``) is spent."""
    reported = set()
    slot_by_id = {s.id: s for s in graph.slots}
    for c in prefs.conflicts:
        rid = plan.root_of(c.slot)
        root = slot_by_id[rid]
        if rid in reported or root.fixed is not None or rid not in plan.primary:
            continue
        reported.add(rid)
        p = plan.primary[rid]
        a = c.mesh_axis
        spec = c.offered if p.specs[a] != c.offered else c.kept
        alt = p.replace(a, spec)
        if alt == p:
            continue
        where_solved = next((x for x in solved if rid in x.decided), None)
        if where_solved is None:
            continue  # laid out by a window alike to one solved before: warned about there
        if clock is not None and clock.used >= clock.seconds / 2:
            return  # advisory re-solves, each as costly as the solve: not past half the solver's time
        try:
            found = alternative(where_solved.model, rid, alt)
        except SolverTimeout:
            return
        chosen = where_solved.total
        if found is None or found[1].objective != chosen.objective:
            continue
        alt_plan, alt_cost = found
        model = where_solved.model
        if alt_cost.held == chosen.held and visible_layouts(model, alt_plan) == visible_layouts(model, plan):
            continue
        where = f" ({root.span})" if root.span else ""
        warnings.warn(
            f"propagate-sharding: '{root.name}'{where} costs the same laid out {p} ({_bytes(chosen.sent)} sent, "
            f"{_bytes(chosen.held)} held per worker) or {alt} ({_bytes(alt_cost.sent)} sent, {_bytes(alt_cost.held)} "
            f"held), at the size hints; it was laid out {p}: {_remedy(graph, root.name)}",
            ShardingAmbiguityWarning,
            stacklevel=3,
        )


def _warn_ambiguities(graph: Graph, prefs: Preferences) -> None:
    reported = set()
    for c in prefs.conflicts:
        if c.slot.id in reported:
            continue
        reported.add(c.slot.id)
        where = f" ({c.slot.span})" if c.slot.span else ""
        if c.other is c.slot or (c.other is None and c.kept == c.offered):
            why = f"'{c.site.name}' reads it twice, needing its dims sharded differently"
        elif c.other is not None and c.factors is not None:
            op = f"R.{c.site.op.name}"
            why = (f"'{c.site.name}' reads it together with '{c.other.name}', which is {c.offered} on that axis: "
                   f"'{c.slot.name}' cuts {op}'s dim {c.factors[0]} and '{c.other.name}' its dim {c.factors[1]}, "
                   "and a mesh axis can cut only one of them")
        elif c.other is not None:
            why = f"'{c.site.name}' reads it together with '{c.other.name}', which is {c.offered}"
        else:
            why = f"'{c.site.name}' would make it {c.offered}"
        warnings.warn(
            f"propagate-sharding: '{c.slot.name}'{where} was laid out {c.kept} on mesh axis {c.mesh_axis}, but {why}; "
            f"{_remedy(graph, c.slot.name)}",
            ShardingAmbiguityWarning,
            stacklevel=2,
        )
