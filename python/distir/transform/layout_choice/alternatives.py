"""auto-shard's explanations (``--explain``): the function laid out again with one parameter in
another layout and the others as chosen, for every such alternative (docs/auto_shard.md).

Every alternative is solved on the search's own graph and cost model (its free parameters offered
the layouts the alternative gives them) under the limit on the peak of live activations the chosen
plan was solved under, in bytes per sample and window ("under the same budget this alternative
sends X"): no least-peak program per alternative. A function solved whole is one program built
once, each alternative fixing the parameters' columns; a function solved in windows re-solves the
windows from the first that reads the changed parameter (``solve_layouts``'s ``prefixes``). Each
program starts from the chosen plan with that parameter redistributed where it is read, where that
is a solution (the optimum is the same, and HiGHS proves it sooner from a start near it), first
re-solved with only the ops near the parameter's readers free, the rest as chosen, for a start
nearer still.

Without a solve (:func:`redistributed_first`, the default of ``distir-opt --explain``): the chosen
function with one parameter arriving in another layout and redistributed, first thing, to the
layout it was chosen in. It is a layout of that alternative, so what it sends bounds the least the
alternative sends from above.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction

from ...ir.expr import Binding, Block, Call, Function, Var
from ...ir.op import get_op
from ...ir.placement import Placement
from ...ir.types import DTensorType
from .cost_model import CostModel
from .plan import ActivationLimit, LayoutPlan, ParamChoice
from .program import Program
from .propagate_sharding import write_layouts
from .sharding_graph import Graph, Slot
from .solution import Infeasible, objective_of, objective_per_byte, plan_of, solve_fixed, start_of
from ..rewrite import map_bindings
from .windows import NoLayoutError, cut_windows, solve_layouts

__all__ = ["Alternatives", "Explained", "redistributed_first"]

def redistributed_first(func: Function, index: int, layout: Placement) -> Function | None:
    """``func`` (laid out) with parameter ``index`` given in ``layout`` and redistributed, in a block of
    its own before the others, to the layout ``func`` gives it; every use reads the redistributed
    value. None where that parameter is not laid out (a plain value)."""
    p = func.params[index]
    t = p.type
    if not isinstance(t, DTensorType):
        return None
    given = Var(p.name, DTensorType(t.shape, t.dtype, t.mesh, layout), p.span)
    names = {q.name for q in func.params} | {b.var.name for b in func.bindings()}
    name, k = f"{p.name}_chosen", 0
    while name in names:
        k += 1
        name = f"{p.name}_chosen{k}"
    moved = Var(name, t, p.span)
    call = Call(get_op("dist.redistribute"), (given,), {"device_mesh": t.mesh, "placement": t.placement}, p.span)
    body = map_bindings(func, lambda b, env: None, {p: moved})
    params = tuple(given if i == index else q for i, q in enumerate(func.params))
    return body.replace(params=params, blocks=(Block((Binding(moved, call, p.span),), False), *body.blocks))


#: how far from the changed parameter's readers a program's first, small solve may change the
#: chosen plan (its optimum starts the whole program): on the GPT-2 block it found every
#: alternative's optimum, which HiGHS then only proves (--explain 15.0 -> 12.6 CPU seconds)
NEAR = 2


@dataclass(frozen=True)
class Explained:
    """One alternative: the function laid out with it, the bytes each worker sends with that layout at
    the sizes planned for (as the program counts them), and the least any layout with those parameters'
    layouts sends (the same, where it is proven)."""

    function: Function
    sent: Fraction
    least: Fraction


class Alternatives:
    """The layouts of one function with its free parameters laid out as asked, on the search's graph.

    ``index``: each free parameter's slot id -> the parameter's index; ``chosen``: the plan the search
    chose (its ``peak_limits`` are every alternative's); ``candidates``: every layout a parameter's
    slot may take; ``window_ops``, ``whole_ops``: the search's windows."""

    def __init__(self, graph: Graph, cost: CostModel, index: Mapping[int, int], chosen: LayoutPlan,
                 candidates: Callable[[Slot], list[Placement]], activations: ActivationLimit | None,
                 window_ops: int, whole_ops: int, searched: Callable[[Mapping[int, Placement]], bool] | None = None):
        self.graph, self.cost, self.index, self.chosen = graph, cost, dict(index), chosen
        self.candidates, self.activations = candidates, activations
        self.window_ops, self.whole_ops = window_ops, whole_ops
        self.searched = searched
        self.whole = len(cut_windows(graph, window_ops, whole_ops, alike=False)) == 1
        self._program: Program | None = None  # a function solved whole: one program for every alternative
        self._prefixes: dict = {}  # in windows: the windows solved, by the windows up to them
        self._floor: Fraction | None = None  # what no layout the search chose among sends (the chosen plan's)
        self._ratio: tuple | None = None  # (ranged(), or False), once known

    def written(self, layouts: Mapping[int, Placement]) -> Function | None:
        """The function laid out with parameter ``i`` in ``layouts[i]`` (every free parameter given),
        its bytes proven the least. None: no layout of the values meets the chosen plan's limit on the peak."""
        got = self.explained(layouts)
        return None if got is None else got.function

    def explained(self, layouts: Mapping[int, Placement], checks: int | None = None) -> Explained | None:
        """:meth:`written`, and what it sends; with ``checks``, each of a function's programs stops after
        that work (:func:`~.solution.solve_fixed`) where a range of its bytes can be told (:meth:`ranged`):
        then what the layout found sends, and the least any layout sends, may differ."""
        fixed = {sid: layouts[i] for sid, i in self.index.items()}
        start = replace(self.chosen, primary={**self.chosen.primary, **fixed})
        limits = self.chosen.peak_limits or None
        near = self.near([sid for sid, p in fixed.items() if self.chosen.primary.get(sid) != p])
        try:
            if self.whole:
                model = self.program()
                floor = self._floor if self.searched is not None and self.searched(layouts) else None
                ratio = self.ranged() if checks is not None else None
                x, total, least = solve_fixed(model, fixed, limits[0] if limits else None, start=start_of(model, start),
                                              near=near, floor=floor, checks=checks if ratio is not None else None)
                plan = plan_of(model, x, total)
                least = total.sent if ratio is None else least / ratio
            else:
                choice = ParamChoice(lambda s: [fixed[s.id]], lambda decided: [], self.activations)
                plan, _ = solve_layouts(self.graph, None, self.cost, choice, self.window_ops, self.whole_ops,
                                        alike=False, prefixes=self._prefixes, peak_limits=limits, start=start,
                                        near=near)
                least = plan.bytes
        except (Infeasible, NoLayoutError):
            return None
        for sid, p in fixed.items():
            plan.primary.setdefault(sid, p)
        return Explained(write_layouts(self.graph, plan, self.cost), plan.bytes, least)

    def ranged(self) -> Fraction | None:
        """Where a budgeted solve's bound is a bound on the bytes sent at the sizes planned for: the
        program's objective over those bytes, the same for every column (every size given: the objective
        weighs one point); else None (sizes sampled, or a time objective: each alternative is proven)."""
        if self._ratio is None:
            self._ratio = (None if self.cost.axis_costs is not None else objective_per_byte(self.program()),)
        return self._ratio[0]

    def near(self, slots: list[int]) -> set[int]:
        """The sites (``id(site)``) within ``NEAR`` steps of the readers of ``slots`` (a step: to the
        producer or the other readers of a value a site reads, or the readers of what it makes)."""
        graph = self.graph

        def readers(sid: int) -> list:
            return [site for site, _ in graph.readers.get(sid, [])]

        front = [site for sid in slots for site in readers(sid)]
        seen = {id(site) for site in front}
        for _ in range(NEAR):
            step = []
            for site in front:
                for s in site.ins:
                    step.extend(([s.producer] if s.producer is not None else []) + readers(s.id))
                for s in site.outs:
                    step.extend(readers(s.id))
            front = [site for site in step if id(site) not in seen]
            seen.update(id(site) for site in front)
        return seen

    def program(self) -> Program:
        """The function's one program, every free parameter offered every layout and no limit on the
        weights (an alternative may pass the budget: the report says so); built once."""
        if self._program is None:
            self._program = Program(self.graph, None, self.cost,
                                    choice=ParamChoice(self.candidates, lambda decided: [], self.activations))
            self._program.build()
            # the chosen plan is the proven least among the layouts the search offered, with the weights
            # within the budget: an alternative among them sends at least as much (the same objective
            # counted on this program, checked)
            chosen = start_of(self._program, self.chosen)
            if self.chosen.optimal and chosen is not None and objective_of(self._program, chosen) == self.chosen.objective:
                self._floor = self.chosen.objective
        return self._program
