"""Whole-program layout choice: the layouts of all values chosen together, as an integer program:
its columns and rows, built from the graph (solved by :mod:`.solution`, in windows by :mod:`.windows`).

The problem (Alpa's formulation, as XLA's auto-sharding uses it), over the graph of
:mod:`~distir.transform.layout_choice.sharding_graph`:

- each op (a :class:`~distir.transform.layout_choice.sharding_graph.Site`) runs in one *strategy*: input
  placements its sharding rule accepts and the output placements they give
  (:func:`site_strategies`); a binary variable per strategy, exactly one chosen;
- each value (a slot; a hint's value is the value it annotates) is produced in one layout,
  its *primary*: the producer's chosen output, or for a parameter its given layout or, when
  free, a binary choice among the layouts its consumers read;
- a consumer that reads a value in layout ``q`` *needs* it in ``q``; an op reading a hint
  reads it in the hinted layout (a recomputation of that op too), unless a hint lays out the op's
  own value (then it reads it in any layout, as XLA's instruction with a user sharding, whose
  operands come from the reshard cache where a copy exists); each needed layout is
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
:func:`~distir.transform.layout_choice.sharding_graph.preferred_placements` (so that where costs tie the answer
is the one a reader of the hints expects), fewer redistributes and recomputations, less memory per
worker, and cuts of outer dims before inner ones. HiGHS (``highspy``, :func:`.solution.highs`) solves both; the
model is built in the order of the bindings and the solver is deterministic, so the same module
gives the same layout.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from ...errors import DiagnosticError
from ...ir.expr import Tuple, TupleGetItem, Var
from ...ir.placement import Partial, Placement, Replicate, Shard
from ...ir.types import DTensorType, TupleType
from .cost_model import INF, CostModel
from .plan import ActivationLimit, ParamChoice
from .sharding_graph import Graph, Preferences, Site, Slot, field_slots
from .strategies import Strategy, site_strategies

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


def hinted_values(graph: Graph) -> frozenset[int]:
    """The values (root slot ids) an annotate_sharding on their own mesh lays out, hints of hints
    followed back to the value; memoized on the graph."""
    got = graph.__dict__.get("_hinted")
    if got is None:
        root: dict[int, int] = {}
        for site in graph.sites:
            x, y = site.ins[0] if site.ins else None, site.outs[0] if site.outs else None
            if (site.is_hint and site.mesh is not None and site.op.name in ALIAS_OPS and x is not None
                    and x.distributable and x.id in graph.mesh_of
                    and graph.mesh_of.get(x.id) == graph.mesh_of.get(y.id)):
                root[y.id] = root.get(x.id, x.id)
        got = graph.__dict__["_hinted"] = frozenset(root.values())
    return got


def _cut_dims(p: Placement) -> int:
    """The dims ``p`` cuts, summed (a tie-break: outer dims first)."""
    return sum(x.dim for x in p.specs if isinstance(x, Shard))


@dataclass
class Window:
    """A run of consecutive sites solved on its own, after the windows before it."""

    sites: list[Site]
    last: bool
    frozen: dict[int, set[Placement]]  # value (root slot id) of an earlier window -> the layouts it exists in
    root: dict[int, int]  # a hint's output -> the value it annotates, from earlier windows
    read_as: dict[int, Placement]
    primary: dict[int, Placement] = field(default_factory=dict)  # the layouts earlier windows chose


class Program:
    """Columns and rows of the integer program, built from the graph."""

    def __init__(self, graph: Graph, prefs: Preferences | None, cost: CostModel, window: Window | None = None,
                 choice: ParamChoice | None = None, tight: bool = True):
        self.g, self.prefs, self.cost = graph, prefs, cost
        # with the rows that tighten the relaxation (the same optima, found faster); without: the
        # loosest valid program (a test compares both)
        self.tight = tight
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
        self.peak_rows: list[tuple[int, dict[int, int], int]] = []
        self.peak_scale: list[Fraction] = []  # per sample: the peak with every value whole (no copies)
        self.peak_bound: list[Fraction] | None = None  # the limit per sample, once the least peak is known
        self.compiled: tuple | None = None  # the rows as HiGHS reads them, made by the solver once (solution.py)
        self.in_highs: tuple | None = None  # the program passed to HiGHS once, for many solves (solution.py)
        self.rows: list[tuple[list[tuple[int, float]], float, float]] = []
        # value (root slot id) -> its rows of used_primary_rows (a solve that forces the value's layout lifts them)
        self.used_rows: dict[int, list[int]] = {}
        self.used_rows_added = False
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
        self.hinted = hinted_values(graph)  # values a hint lays out (their producers read inputs freely)

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
        return self.cost.held(s, p)

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
        if self.tight:
            self.consumption_rows()
            if self.choice is not None:  # auto-shard's; propagation's where a relaxation is not whole (solution.py)
                self.add_used_primary_rows()
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
            partial = [self.partial_ops(s) for s in site.ins]
            key = None if site.structure is None else (
                site.structure, tuple(frozenset(x) for x in partial),
                tuple(self.slot_by_id[self.rid(s)].fixed for s in (*site.ins, *site.outs)))
            strategies = self.cost.strategies.get(key) if key is not None else None
            if strategies is None:  # alike sites (the layers of a stack) share them: the cost model is one
                strategies = site_strategies(site, self.cost, partial, self.keep)
                if key is not None:
                    self.cost.strategies[key] = strategies
        # the op reads a hint's value in the hinted layout (TVM's meaning, XLA's sharding propagation and
        # the greedy pass's), and so does every recomputation of it (where its rule accepts that layout;
        # else, as the greedy pass does, in one it accepts). Not an op whose own value a hint lays out
        # (XLA's instruction with a user sharding): it runs as that hint says and reads its inputs in any
        # layout, the cheapest supply of which may be a copy made anyway (XLA's reshard cache)
        outs = [s for s in site.outs if self.distributed(s)]
        if not outs or not all(s.id in self.hinted for s in outs):
            strategies = [st for st in strategies
                          if all(self.read_as.get(s.id, p) == p for s, p in zip(site.ins, st.ins))] or strategies
        self.strategies[id(site)] = strategies
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
        found = self._result_pairs(f.result)
        declared = _type_leaves(f.ret_type) if f.ret_type is not None else []
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

    def _result_pairs(self, e) -> list[tuple[Slot, object]]:
        """(slot, the type it is bound with, or None) of each tensor of result expression ``e``."""
        if isinstance(e, Tuple):
            return [x for fld in e.fields for x in self._result_pairs(fld)]
        if isinstance(e, TupleGetItem):
            slots = field_slots(self.g.var_slots.get(e.tuple_value, []), e.tuple_value.type, e.index) if isinstance(
                e.tuple_value, Var) else []
        elif isinstance(e, Var):
            slots = self.g.var_slots.get(e, [])
        else:
            return []
        types = _type_leaves(e.type)
        return list(zip(slots, types)) if len(types) == len(slots) else [(s, None) for s in slots]

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
                    recomputed = self.recomputations(site, rid, q, s)
                    terms += [(r, -1.0) for r in recomputed]
                    if recomputed and self.tight:  # q is made once: by the primary, a redistribute or a recomputation
                        self.row([(c, 1.0) for c, _ in terms[1:]], -np.inf, 1)
                self.row(terms, -np.inf, 0)
        self.pending = None

    def consumption_rows(self) -> None:
        """Rows that make the relaxation tight: a value made in layout ``p`` reaches each of its
        readers, which reads it in ``p`` or in a layout made from ``p`` (a redistribute from ``p``,
        or a recomputation). Implied for whole choices by the supply rows, but not for fractions:
        without them the relaxation makes a value half in a layout nobody reads (a partial sum, say),
        and supplies its readers from the other half, redistributing only half."""
        moved: dict[tuple[int, Placement], list[tuple[Placement, int]]] = {}
        for z, rid, p, q in self.z_cols:
            moved.setdefault((rid, q), []).append((p, z))
        remade: dict[tuple[int, Placement], list[int]] = {}
        for r, rid, q, _ in self.r_cols:
            remade.setdefault((rid, q), []).append(r)
        for site in self.g.sites:
            cols = self.site_cols.get(id(site))
            if cols is None:
                continue
            for i, s in enumerate(site.ins):
                if not self.distributed(s):
                    continue
                rid = self.rid(s)
                prim = self.prim.get(rid)
                if not prim or len(prim) < 2 or any(v is None for v in prim.values()):
                    continue  # one layout, or given (earlier windows' versions): nothing to choose
                reads: dict[Placement, list[int]] = {}
                for c, st in cols:
                    reads.setdefault(st.ins[i], []).append(c)
                for p, made in prim.items():
                    terms = [(c, 1.0) for c in made] + [(c, -1.0) for c in reads.get(p, [])]
                    for q in reads:
                        if q != p:
                            terms += [(z, -1.0) for src, z in moved.get((rid, q), []) if src == p]
                            terms += [(r, -1.0) for r in remade.get((rid, q), [])]
                    self.row(terms, -np.inf, 0)

    def add_used_primary_rows(self) -> bool:
        """:meth:`used_primary_rows`, once (only to a tight program); whether it added any."""
        if not self.tight or self.used_rows_added:
            return False
        self.used_rows_added = True
        before = len(self.rows)
        self.used_primary_rows()
        return len(self.rows) > before

    def used_primary_rows(self) -> None:
        """Rows that make the relaxation tighter where a value may be recomputed: the layout ``p`` a
        value is made in is read in ``p`` by some op, or redistributed from.

        The reader rows above let any recomputation stand in for the primary, whatever the primary
        is, and the relaxation uses that: it makes a value partly in a layout nobody reads. A choice
        whose primary nobody reads (every reader reads a recomputation) is never needed, though: the
        producer can run the strategy of one of those recomputations instead and drop it, which sends
        no more bytes. The row is added where that swap costs nothing in the other objectives and
        limits, for every recomputation of the value: its strategy's tie-break exceeds the least of
        those making ``p`` by at most a recomputation's, and it holds no more than ``p`` at each sample
        of an activation limit (whose rows count a primary from its binding on, a recomputation from
        its first reader). Where some recomputation may not be swapped, the row would have to let it
        stand in for ``p``; measured, such rows only slowed HiGHS. Results, values needed in a given
        layout and values read by a hint or outside the program's sites (a later window) get none.
        A value whose layout a solve forces (``solve_program(force=...)``) is not swapped: its rows are
        lifted there."""
        recomputed: dict[int, list[tuple[Placement, Strategy]]] = {}
        remade_by: dict[int, list[tuple[int, Strategy]]] = {}  # id(site) -> its recomputations' columns
        for r, rid, q, st in self.r_cols:
            recomputed.setdefault(rid, []).append((q, st))
            remade_by.setdefault(id(self.slot_by_id[rid].producer), []).append((r, st))
        if not recomputed:
            return
        g = self.g
        sites = self.window.sites if self.window is not None else g.sites
        end = g.position[id(sites[-1])] if sites else -1  # a value read after it is read by a later window
        moved: dict[tuple[int, Placement], list[int]] = {}
        for z, rid, p, _ in self.z_cols:
            moved.setdefault((rid, p), []).append(z)
        kept = {rid for rid, _ in self.forced} | {rid for rid, *_ in self.result_costs}
        kept |= {self.rid(s) for s in result_slots(g)}
        limit = self.choice.activations if self.choice is not None else None
        for rid, remade in recomputed.items():
            prim = self.prim.get(rid)
            readers = g.readers.get(rid, [])
            if (rid in kept or rid in self.param_cols or not prim or len(prim) < 2 or not readers
                    or any(v is None for v in prim.values())
                    or g.position[id(readers[-1][0])] > end
                    or any(site.is_hint or id(site) not in self.site_cols for site, _ in readers)):
                continue
            s = self.slot_by_id[rid]
            by_strategy = {st: c for c, st in self.site_cols[id(s.producer)]}
            for p, made in prim.items():
                others = [(q, st) for q, st in remade if q != p]  # none: the reader rows say as much
                least_tb = min(self.tb[c] for c in made)
                if not others or any(self.tb[by_strategy[st]] - least_tb > W_RECOMPUTE
                                     or (limit is not None and any(limit.held(s, q, k) > limit.held(s, p, k)
                                                                   for k in range(limit.samples)))
                                     for q, st in others):
                    continue
                terms = [(c, 1.0) for c in made] + [(z, -1.0) for z in moved.get((rid, p), [])]
                for site, i in readers:  # its strategies and recomputations reading the value in p
                    terms += [(c, -1.0) for c, st in (*self.site_cols[id(site)], *remade_by.get(id(site), ()))
                              if st.ins[i] == p]
                self.used_rows.setdefault(rid, []).append(len(self.rows))
                self.row(terms, -np.inf, 0)

    def recomputations(self, site: Site, rid: int, q: Placement, s: Slot) -> list[int]:
        """Columns: value ``rid`` recomputed in layout ``q`` by ``site``, one per strategy making ``q``.

        The inputs of a layout of the value are needed at least as often as the ways of making
        it that read them (its primary in ``q`` or one recomputation, of which at most one is
        chosen at some optimum of each objective: a layout is never made twice, and a
        recomputation costs a tie-break). Read per way, as the primary's own rows read them, the
        relaxation makes a layout half as primary and half recomputed from the same half-chosen
        inputs at no cost, and HiGHS spends its time closing that gap."""
        made = [(c, st) for c, st in self.site_cols[id(site)] if st.outs[0] == q]
        recomputed = []
        for st in self.strategies[id(site)]:
            if st.outs[0] == q:
                r = self.col(tb=W_RECOMPUTE, mem=self.held(s, q))
                self.r_cols.append((r, rid, q, st))
                recomputed.append((r, st))
        if self.tight and recomputed:
            self.demand(site.ins, made + recomputed)
        else:
            for r, st in recomputed:
                self.demand(site.ins, [(r, st)])
        return [r for r, _ in recomputed]

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
        for s in result_slots(g):
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

        # the spans live at each point, swept in order of the points (each point's terms in the
        # order of the spans, as they were found); bytes are whole numbers, added as ints
        by_start = sorted(range(len(spans)), key=lambda j: spans[j][0])
        live_at: list[list[int]] = []
        live: list[tuple[int, int]] = []  # (last point, span) heap
        nxt = 0
        for t in points:
            while nxt < len(by_start) and spans[by_start[nxt]][0] <= t:
                j = by_start[nxt]
                heapq.heappush(live, (spans[j][1], j))
                nxt += 1
            while live and live[0][0] < t:
                heapq.heappop(live)
            live_at.append(sorted(j for _, j in live))
        for k in range(limit.samples):
            sized = [nbytes(s, p, k) for _, _, _, s, p in spans]
            whole_of = [nbytes(s, None, k) if s.id not in params else 0 for _, _, _, s, _ in spans]
            whole = 0
            rows: dict[tuple, tuple[dict[int, int], int]] = {}
            for js in live_at:
                terms: dict[int, int] = {}
                const = 0
                values: dict[int, int] = {}  # the values live at t (for the peak with every value whole)
                for j in js:
                    c, s = spans[j][2], spans[j][3]
                    if c is None:
                        const += sized[j]
                    else:
                        terms[c] = terms.get(c, 0) + sized[j]
                    if s.id not in params:
                        values[s.id] = whole_of[j]
                whole = max(whole, sum(values.values()))
                key = (tuple(sorted(terms.items())), const)
                rows.setdefault(key, (terms, const))
            scale = whole or 1
            m = self.col(ub=np.inf)
            self.peak_cols.append(m)
            self.peak_scale.append(Fraction(scale))
            for terms, const in rows.values():
                self.peak_rows.append((k, terms, const))
                self.row([(c, v / scale) for c, v in terms.items()] + [(m, -1.0)], -np.inf, -const / scale)

    @staticmethod
    def recomputable(site: Site) -> bool:
        return site.rule is not None and not site.rule.reductions and len(site.outs) == 1 and bool(site.ins)

    def peaks(self, x: np.ndarray) -> tuple[Fraction, ...]:
        """The peak live activation bytes per worker at each sample, exactly, for the columns ``x`` chooses."""
        out = [0] * len(self.peak_cols)
        chosen = set(np.flatnonzero(np.asarray(x) > 0.5).tolist())
        for k, terms, const in self.peak_rows:  # whole bytes: summed as integers
            out[k] = max(out[k], const + sum(v for c, v in terms.items() if c in chosen))
        return tuple(Fraction(v) for v in out)


def result_slots(graph: Graph) -> list[Slot]:
    """The slots of the function's result, in order."""
    return _expr_slots(graph, graph.func.result)


def _expr_slots(graph: Graph, e) -> list[Slot]:
    # (a function of the module, not a closure calling itself: such a closure is a reference cycle
    # that keeps what it captures, here the whole graph, until the cyclic collector runs)
    if isinstance(e, Tuple):
        return [x for f in e.fields for x in _expr_slots(graph, f)]
    if isinstance(e, TupleGetItem):
        inner = _expr_slots(graph, e.tuple_value)
        return field_slots(inner, e.tuple_value.type, e.index) if isinstance(e.tuple_value.type, TupleType) else []
    if isinstance(e, Var):
        return graph.var_slots.get(e, [])
    return []


def _type_leaves(t) -> list:
    """The leaves of type ``t``, tuples flattened in order."""
    if isinstance(t, TupleType):
        return [x for fld in t.fields for x in _type_leaves(fld)]
    return [t]
