"""auto-shard --explain: every alternative's bytes are its optimum, checked against an independent
computation (every strategy of every op tried, each plan written and its bytes counted), and the
alternatives solved on the search's one program, from the chosen plan, equal fresh solves of the
function typed with those layouts under the chosen plan's limit on the peak. Within a budget of the
solver's work (``explain_checks``), an alternative not proven is a range that holds its exact bytes,
and the report is the same on every run."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies

import distir
from distir.transform import AutoShard, PassContext
from distir.transform.layout_choice import auto_shard as A
from distir.transform.layout_choice.cost_model import CostModel
from distir.transform.layout_choice.measure import function_peak
from distir.transform.layout_choice.plan import LayoutPlan, ParamChoice
from distir.transform.layout_choice.propagate_sharding import write_layouts
from distir.transform.layout_choice.sharding_graph import build_graph
from distir.transform.layout_choice import solution
from distir.transform.layout_choice.solution import forget_solved, objective_of, solve_fixed, solve_program, start_of
from distir.transform.layout_choice.windows import NoLayoutError, solve_layouts
from helpers import PLAIN_MLP

MLP = PLAIN_MLP


def _search(mod, sizes, activations="min+25%", budget="min+10%"):
    func = mod["main"]
    mesh = mod.meshes()[0]
    search = A._Search(func, mesh, A.MemoryBudget.parse(budget), dict(sizes), PassContext(), {mesh: "mesh[0]"},
                       A.parse_activation_budget(activations))
    laid, _ = search.run()
    return search, laid, A._report_env(func, mesh, search.sizes)


def _alternatives(search, laid):
    func = search.func
    for i in sorted(laid):
        for q in A.candidate_layouts(func.params[i].type.ndim, search.mesh):
            if q != laid[i]:
                yield i, q, {**laid, i: q}


def _least_bytes_by_trying_every_strategy(search, layouts, env):
    """The fewest bytes any plan sends with the parameters laid out ``layouts``: every combination
    of the ops' strategies written (each input redistributed from its producer's layout where the
    strategy reads it otherwise) and counted by ``measure`` on the written function."""
    alts = search.alternatives()
    model = alts.program()
    graph = search.graph
    sites = [site for site in graph.sites if id(site) in model.strategies]
    params = {s.id: layouts[i] for s, i in search.slots}
    best = None
    for combo in itertools.product(*(model.strategies[id(site)] for site in sites)):
        primary = dict(params)
        for site, st in zip(sites, combo):
            primary.update({s.id: p for s, p in zip(site.outs, st.outs)})
        plan = LayoutPlan({id(site): st for site, st in zip(sites, combo)}, primary, {}, {}, 0, 0, 0)
        sent = A._sent(write_layouts(graph, plan, search.cost), search.mesh, env)
        best = sent if best is None else min(best, sent)
    return best


def test_alternatives_send_the_least_any_plan_sends():
    # no activation limit: the bytes alone, so that every combination of strategies is a plan
    # at 3 workers: 10 rows or columns of w1 and w2 cut unevenly, in padded blocks
    search, laid, env = _search(distir.parse(MLP), {"num_workers": 3}, activations="none", budget="100%")
    compared = 0
    for _i, _q, layouts in _alternatives(search, laid):
        written = search.alternatives().written(layouts)
        assert A._sent(written, search.mesh, env) == _least_bytes_by_trying_every_strategy(search, layouts, env)
        compared += 1
    assert compared == 6  # x, w1 and w2: two other layouts each


def test_alternatives_equal_fresh_solves_under_the_chosen_limit():
    # one program for every alternative, parameters fixed by bounds, HiGHS started from the chosen plan:
    # the same bytes and the same written plan's peak as the function typed with the layouts and solved
    # cold (its own graph, cost model and programs) under the peak limit the chosen plan was solved under
    search, laid, env = _search(distir.parse(MLP), {"num_workers": 4})
    assert search.plan.peak_limits  # the activation budget's limit, in bytes per sample
    over = 0
    for _i, _q, layouts in _alternatives(search, laid):
        shared = search.alternatives().written(layouts)
        forget_solved()
        graph = build_graph(search.typed(layouts), search.mesh_names)
        cost = CostModel(graph, search.hints)
        choice = ParamChoice(lambda s: [], lambda decided: [], search.activation_limit())
        try:
            plan, _ = solve_layouts(graph, None, cost, choice, A.WINDOW_OPS, 2 * A.WINDOW_OPS, alike=False,
                                    peak_limits=search.plan.peak_limits)
            fresh = write_layouts(graph, plan, cost)
        except NoLayoutError:
            fresh = None
        assert (shared is None) == (fresh is None)
        if fresh is None:
            over += 1
            continue
        assert A._sent(shared, search.mesh, env) == A._sent(fresh, search.mesh, env)
        assert function_peak(shared, env) == function_peak(fresh, env)
    assert over < sum(1 for _ in _alternatives(search, laid))


def test_an_alternative_no_layout_fits_is_marked_over_budget(capfd):
    # the chosen plan's limit on the peak is every alternative's: one whose every layout holds more
    # is over budget, its bytes not computed
    p = AutoShard(explain=True, sizes={"num_workers": 4}, memory_budget="100%", activation_budget="min")
    p(distir.parse(MLP))
    assert capfd.readouterr() == ("", "")  # HiGHS (highspy's banner included) prints nothing
    alternatives = [a for r in p.report.params for a in r.alternatives[1:]]
    assert any(a.sent is None and a.activations is None and not a.within_budget for a in alternatives)
    assert "over budget (activations)" in p.report.render()


def test_a_start_sending_the_chosen_plans_bytes_is_proven_without_a_solve(monkeypatch):
    # the chosen plan is the least among the layouts the search offered under the same limit on the peak:
    # an alternative among them whose start (the chosen plan, the parameter redistributed where it is
    # read) sends as much is optimal; no bytes program is solved, and the numbers are a cold solve's
    search, laid, env = _search(distir.parse(MLP), {"num_workers": 7}, budget="100%")
    model = search.alternatives().program()
    limit = search.plan.peak_limits[0]
    solved = []
    original = solution._solve_held
    monkeypatch.setattr(solution, "_solve_held", lambda held, w, *a: solved.append(w is held.weights) or original(held, w, *a))
    shortcuts = 0
    for _i, _q, layouts in _alternatives(search, laid):
        fixed = {s.id: layouts[i] for s, i in search.slots}
        start = start_of(model, replace(search.plan, primary={**search.plan.primary, **fixed}))
        if (not search.searched(layouts) or start is None or objective_of(model, start) != search.plan.objective
                or any(p > b for p, b in zip(model.peaks(start), limit))):
            continue  # not among the search's layouts, not as cheap, or over the limit on the peak
        solved.clear()
        x, cost, least = solve_fixed(model, fixed, limit, start=start, floor=search.plan.objective)
        assert not any(solved) and least == cost.objective == search.plan.objective  # bytes: no solve
        forget_solved()
        _, cold = solve_program(model, fixed=fixed, peak_limit=limit)  # no start: HiGHS from scratch
        assert (cost.objective, cost.sent) == (cold.objective, cold.sent)
        shortcuts += 1
    assert shortcuts == 1


@settings(max_examples=6, deadline=None)
@given(workers=strategies.sampled_from([1, 2, 3, 5, 6, 7, 8]), checks=strategies.integers(1, 2),
       activations=strategies.sampled_from(["none", "min+25%"]))
def test_a_budgeted_explanation_holds_the_exact_bytes(workers, checks, activations):
    # within a budget of the solver's work, an alternative not proven is a range: the least any layout
    # sends (HiGHS's bound, rounded down to whole bytes) .. what the best layout found sends; the exact
    # bytes lie in it, and every alternative proven is exact. 10 rows and columns cut unevenly at 3, 6, 7
    mod = distir.parse(MLP)
    kw = {"sizes": {"num_workers": workers}, "activation_budget": activations, "memory_budget": "100%"}
    forget_solved()
    exact = AutoShard(explain=True, **kw)
    exact(mod)
    forget_solved()
    budgeted = AutoShard(explain_checks=checks, **kw)
    budgeted(mod)
    pairs = [(a, e) for r, s in zip(budgeted.report.params, exact.report.params)
             for a, e in zip(r.alternatives, s.alternatives)]
    for a, e in pairs:
        assert a.layout == e.layout
        if a.least is None:
            assert a.sent == e.sent
        else:
            assert a.least <= e.sent <= a.sent and a.least == int(a.least)
    if any(a.least is not None for a, _ in pairs):
        assert "a..b is a range" in budgeted.report.render()


def test_a_budgeted_explanation_ranges_bound_the_exact_bytes_tightly():
    # with two checks, HiGHS's bound (not only the chosen plan's bytes or zero) is a range's lower end:
    # x cut by columns sends at least 168 B (the chosen layout sends 120 B), and 180 B exactly
    forget_solved()
    kw = {"sizes": {"num_workers": 2}, "activation_budget": "min+25%", "memory_budget": "100%"}
    exact, budgeted = AutoShard(explain=True, **kw), AutoShard(explain_checks=2, **kw)
    exact(distir.parse(MLP))
    forget_solved()
    budgeted(distir.parse(MLP))
    ranges = [(a.least, e.sent, a.sent) for r, s in zip(budgeted.report.params, exact.report.params)
              for a, e in zip(r.alternatives, s.alternatives) if a.least is not None]
    assert budgeted.report.sent == 120
    assert ranges == [(168, 180, 180)]
    assert "168..180 B" in budgeted.report.render()


def test_a_budgeted_explanation_is_the_same_on_every_run():
    # the budget is counted in the solver's limit checks, not timed: the same ranges every time
    kw = {"sizes": {"num_workers": 7}, "activation_budget": "min+25%", "memory_budget": "100%"}
    reports = []
    for _ in range(2):
        forget_solved()
        p = AutoShard(explain_checks=1, **kw)
        p(distir.parse(MLP))
        reports.append(p.report.render())
    assert reports[0] == reports[1] and ".." in reports[0]


def test_explain_checks_must_be_a_positive_integer():
    with pytest.raises(A.AutoShardError, match="explain_checks must be a positive integer or None, got 0"):
        AutoShard(explain_checks=0)(distir.parse(MLP))


@pytest.mark.parametrize("workers", [1, 2, 3, 4])
def test_bounds_without_a_solve_hold_the_exact_bytes(workers):
    # explain="bounds" (distir-opt --explain's default): each alternative is the chosen layout with the
    # parameter given in that layout and redistributed first, no solve. Its bytes bound the least any
    # layout with that parameter's layout sends (the proven explanation, no activation limit, is at most
    # it), and that function runs: on the simulator it matches one device and sends at most the bound
    from distir.driver import Driver, random_inputs
    from distir.transform.layout_choice.alternatives import redistributed_first

    mod = distir.parse(MLP)
    kw = {"sizes": {"num_workers": workers}, "activation_budget": "none", "memory_budget": "100%"}
    forget_solved()
    exact = AutoShard(explain="exact", **kw)
    exact(mod)
    bounds = AutoShard(explain="bounds", **kw)
    out = bounds(mod)
    written = out["main"]
    names = [p.name for p in written.params]
    inputs = random_inputs(out, "main", {})
    checked = 0
    for r, s in zip(bounds.report.params, exact.report.params):
        assert r.alternatives[0] == s.alternatives[0] and not r.alternatives[0].bound
        for a, e in zip(r.alternatives[1:], s.alternatives[1:]):
            assert a.layout == e.layout and a.bound and not e.bound
            assert e.sent <= a.sent, (r.name, a.layout)
            first = redistributed_first(written, names.index(r.name), a.layout)
            ran = Driver(out.replace(functions={"main": first})).run(inputs, workers)
            assert ran.ok and ran.stats.bytes_per_worker <= a.sent, (r.name, a.layout)
            checked += 1
    assert checked == 6
    if workers == 2:  # even cuts: the bound is what the program sends
        assert all(a.sent == 240 or r.name == "x" and a.sent == 120 for r in bounds.report.params
                   for a in r.alternatives[1:])
    assert "bounded without a solve" in bounds.report.render()


def test_explain_must_be_a_known_mode():
    with pytest.raises(A.AutoShardError, match="explain must be True, False, 'bounds' or 'exact'"):
        AutoShard(explain="fast")(distir.parse(MLP))
