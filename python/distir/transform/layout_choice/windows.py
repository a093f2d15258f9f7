"""The layouts of a whole function (:func:`solve_layouts`): one integer program, or, for a long
function, one per window, cut between the layers of a stack, windows alike solved once."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ...errors import DiagnosticError
from ...ir.placement import Placement
from .cost_model import CostModel
from .plan import LayoutPlan, ParamChoice
from .program import ALIAS_OPS, Program, Window, hinted_values, result_slots
from .sharding_graph import Graph, Preferences, Site, Slot
from .solution import Infeasible, ProgramCost, plan_of, solve_program, start_of
from .strategies import Strategy

__all__ = ["NoLayoutError", "Solved", "cut_windows", "solve_layouts"]

WHOLE_OPS = 96  # a function of at most this many ops is one program; a longer one is solved in windows
WINDOW_OPS = 24  # of at least this many ops (about a layer of a transformer: alike layers are solved once)


@dataclass
class Solved:
    """One integer program solved: its model, its optimum, and the values it laid out."""

    model: Program
    total: ProgramCost
    decided: set[int]


def solve_layouts(graph: Graph, prefs: Preferences | None, cost: CostModel, choice: ParamChoice | None = None,
                  window_ops: int = 0, whole_ops: int = 0, alike: bool = True,
                  prefixes: dict | None = None, peak_limits: tuple[tuple[Fraction, ...], ...] | None = None,
                  start: LayoutPlan | None = None, near: set[int] | None = None) -> tuple[LayoutPlan, list[Solved]]:
    """The cheapest layout of the function (see :mod:`.program`), and the programs solved (to
    ask what another layout of one value would cost, :func:`~.solution.alternative_cost`). ``choice``: the
    layouts free parameters may take and limits on them (:class:`ParamChoice`); ``window_ops`` and
    ``whole_ops``, when given, replace ``WINDOW_OPS`` and ``WHOLE_OPS``; ``alike``: see :func:`_windows`.

    A function of more than ``WHOLE_OPS`` ops is cut into windows where the fewest values computed
    before the cut are read after it (:func:`_windows`), each of at least ``WINDOW_OPS`` ops, and
    solved window by window: a window takes the values of earlier ones as given, in the layouts they
    were made in. Windows alike (the same ops, types and preferences, reading values given in the
    same layouts: the layers of a stack) are solved once. Each window is optimal given the ones
    before it; the whole is not guaranteed to be.

    ``prefixes``: a dict kept by a caller that solves one graph several ways (auto-shard's
    explanations: one parameter offered another layout), the same sizes every time: a window whose
    own and earlier windows' signatures (the free parameters' candidate layouts included) all match
    a call before is not solved again (its program is the same; the windows before the first that
    reads the changed parameter), and is not in the list of programs solved.

    ``peak_limits`` (per window, bytes per sample: a plan's ``peak_limits``) bounds each window's
    peak as given instead of relative to its own least peak; ``start``: a plan whose layouts each
    program starts from where they are a solution of it (auto-shard's explanations: the chosen plan
    with one parameter laid out otherwise), first re-solved around the sites ``near`` (see
    :func:`~.solution.solve_program`)."""
    windows = cut_windows(graph, window_ops or WINDOW_OPS, whole_ops or WHOLE_OPS, alike)
    if len(windows) == 1:
        model = Program(graph, prefs, cost, choice=choice)
        model.build()
        x, total = _solve(model, graph, peak_limits[0] if peak_limits else None, start, near)
        plan = plan_of(model, x, total)
        plan.peak_limits = (_limits(model),) if model.peak_bound else ()
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
    prefix: tuple = ()
    limits: list[tuple[Fraction, ...]] = []
    for k, sites in enumerate(windows):
        w = Window(sites, k == len(windows) - 1, frozen, root, read_as, primary)
        sig, local = _signature(graph, prefs, w, choice)
        if peak_limits:
            sig = (sig, peak_limits[k])
        index = {sid: i for i, sid in enumerate(local)}
        prefix += (sig,)
        if prefixes is not None and prefix in prefixes:
            cache[sig] = prefixes[prefix]  # as solved in a call before, after the same windows
        if sig not in cache:
            model = Program(graph, prefs, cost, w, choice)
            model.build()
            x, total = _solve(model, graph, peak_limits[k] if peak_limits else None, start, near)
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
                _limits(model),
            )
        if prefixes is not None:
            prefixes[prefix] = cache[sig]
        strategies, prims, recs, made, cands, total, window_limit = cache[sig]
        limits.append(window_limit)
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
    plan = LayoutPlan(strategy, primary, recompute, root, sent, held, objective, candidates, peak,
                      tuple(limits) if any(limits) else ())
    return plan, solved


class NoLayoutError(DiagnosticError):
    """No layout of the function meets its constraints (hints, or a caller's limits: auto-shard's budgets)."""


def _limits(model: Program) -> tuple[Fraction, ...]:
    return tuple(model.peak_bound or ())


def _solve(model: Program, graph: Graph, peak_limit: tuple[Fraction, ...] | None = None,
           start: LayoutPlan | None = None, near: set[int] | None = None) -> tuple[np.ndarray, ProgramCost]:
    try:
        return solve_program(model, peak_limit=peak_limit, start=None if start is None else start_of(model, start),
                             near=near)
    except Infeasible:
        raise NoLayoutError("propagate-sharding: no layout of the function satisfies the hints", graph.func.span) from None


def _given(graph: Graph) -> dict[int, Placement]:
    """Slots whose layout is given: DTensor parameters, and the outputs of explicit redistributes."""
    out = {}
    for p in graph.func.params:
        for s in graph.var_slots.get(p, []):
            if s.fixed is not None and s.distributable and s.id in graph.mesh_of:
                out[s.id] = s.fixed
    for site in graph.sites:
        if site.is_hint and site.mesh is not None and alias_of(graph, site) is None:
            y = site.outs[0]
            out[y.id] = site.binding.value.attrs.get("placement") or Placement.replicated(site.mesh.ndim)
    return out


def alias_of(graph: Graph, site: Site) -> tuple[Slot, Slot, Placement] | None:
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
        if site.is_hint and site.mesh is not None and (a := alias_of(graph, site)) is not None:
            x, y, q = a
            root[y.id] = root.get(x.id, x.id)
            read_as[y.id] = q


def cut_windows(graph: Graph, window_ops: int = 0, whole_ops: int = 0, alike: bool = True) -> list[list[Site]]:
    """The sites cut where fewest computed values cross (between the layers of a stack: the residual
    stream, and tables such as the rotary embedding's that every layer reads), in windows of
    ``window_ops`` (``WINDOW_OPS``) ops or more; a function of at most ``whole_ops`` (``WHOLE_OPS``)
    ops is one window. ``alike``: cut only before the op that most often follows such a place (in
    a stack: the same place of every layer), and keep the tail after the last cut a window of its
    own, so that the windows between are alike and solved once; else (auto-shard's windows) cut at
    the first such place after ``window_ops`` ops, and join a short tail to the window before it."""
    sites = graph.sites
    window_ops = window_ops or WINDOW_OPS
    if sum(1 for s in sites if not s.is_hint) <= (whole_ops or WHOLE_OPS):
        return [sites]
    end = len(sites)
    last_read: dict[int, int] = {}
    for i, site in enumerate(sites):
        for s in site.ins:
            last_read[s.id] = i
    for s in result_slots(graph):
        last_read[s.id] = end
    crossing: list[int] = []  # after each site: how many distributed values computed so far are read later
    live: set[int] = set()
    for i, site in enumerate(sites):
        live = {sid for sid in live if last_read[sid] > i}
        live.update(s.id for s in site.outs if last_read.get(s.id, -1) > i and s.id in graph.mesh_of)
        crossing.append(len(live))
    narrowest = min(crossing[window_ops : end - window_ops] or [0])  # the tail narrows as shared values die
    cuts = [i for i in range(end - 1) if crossing[i] <= narrowest]
    # of the narrowest places, those before the op that most often follows one (in a stack: the same
    # place in every layer), so that the windows between them are alike
    count: dict = {}
    for i in cuts:
        what = sites[i + 1].structure or id(sites[i + 1])
        count[what] = count.get(what, 0) + 1
    phase = max(count, key=lambda k: count[k]) if count else None  # the first of the most frequent
    cuts_at = {i for i in cuts if not alike or (sites[i + 1].structure or id(sites[i + 1])) == phase}
    windows: list[list[Site]] = []
    cur: list[Site] = []
    ops = 0
    for i, site in enumerate(sites):
        cur.append(site)
        ops += not site.is_hint
        if ops >= window_ops and i in cuts_at:
            windows.append(cur)
            cur, ops = [], 0
    if cur:
        if not alike and windows and sum(1 for s in cur if not s.is_hint) < window_ops:
            windows[-1].extend(cur)  # a short tail joins the window before it
        else:  # (alike: a window of its own, so that the windows before it stay alike)
            windows.append(cur)
    return windows


def _signature(graph: Graph, prefs: Preferences | None, w: Window,
               choice: ParamChoice | None = None) -> tuple[tuple, list[int]]:
    """What a window's solution depends on, with its slots numbered in order of appearance; and the
    slot ids in that order (to map a solution of one window onto another alike). A free parameter's
    candidate layouts (``choice``) are part of it."""
    free = {s.id for p in graph.func.params for s in graph.var_slots.get(p, []) if s.fixed is None}
    local: dict[int, int] = {}
    root, read_as = dict(w.root), dict(w.read_as)
    items: list = []
    inside = {id(site) for site in w.sites}
    hinted = hinted_values(graph)  # a value a hint lays out (maybe in a later window) frees its producer's reads

    def ref(s: Slot) -> int:
        if s.id not in local:
            local[s.id] = len(local)
            rid = root.get(s.id, s.id)
            outside = s.producer is None or id(s.producer) not in inside
            items.append((
                "slot", local[s.id], s.tensor, s.distributable, s.fixed, graph.mesh_of.get(s.id) is not None,
                frozenset(w.frozen.get(rid, ())) if outside else None,
                read_as.get(s.id), local.get(rid) if rid != s.id else None,
                prefs.placement(s) if prefs is not None and s.id in prefs.specs else None,
                tuple(choice.candidates(s)) if choice is not None and s.id in free and s.distributable else None,
                s.id in hinted,
            ))
        return local[s.id]

    for site in w.sites:
        ins = tuple(ref(s) for s in site.ins)
        if site.is_hint and (a := alias_of(graph, site)) is not None:
            x, y, q = a
            ref(x)
            root[y.id] = root.get(x.id, x.id)
            read_as[y.id] = q
        outs = tuple(ref(s) for s in site.outs)
        what = site.structure  # the op, its attrs and types, its mesh and its strided cuts
        if what is None:
            mesh = site.mesh.shape_str() if site.mesh is not None else None
            what = (site.op.name, repr(sorted(site.binding.value.attrs.items(), key=lambda kv: kv[0])), mesh)
        items.append(("site", what, ins, outs))
    for s in result_slots(graph) if w.last else ():
        items.append(("result", ref(s)))
    return tuple(items), list(local)
