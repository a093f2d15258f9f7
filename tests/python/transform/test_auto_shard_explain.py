"""auto-shard --explain: every alternative's bytes are its optimum, checked against an independent
computation (every strategy of every op tried, each plan written and its bytes counted), and the
alternatives solved on the search's one program, from the chosen plan, equal fresh solves of the
function typed with those layouts under the chosen plan's limit on the peak."""

from __future__ import annotations

import itertools

import pytest

import distir
from distir.transform import AutoShard, PassContext
from distir.transform.layout_choice import auto_shard as A
from distir.transform.layout_choice.cost_model import CostModel
from distir.transform.layout_choice.measure import function_peak
from distir.transform.layout_choice.plan import LayoutPlan, ParamChoice
from distir.transform.layout_choice.propagate_sharding import write_layouts
from distir.transform.layout_choice.sharding_graph import build_graph
from distir.transform.layout_choice.solution import forget_solved
from distir.transform.layout_choice.windows import NoLayoutError, solve_layouts

MLP = '''
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})
    @R.function
    def main(x: R.Tensor((6, 10), "float32"), w1: R.Tensor((10, 12), "float32"),
             w2: R.Tensor((12, 10), "float32")) -> R.Tensor((6, 10), "float32"):
        with R.dataflow():
            h = R.matmul(x, w1)
            r = R.nn.relu(h)
            y = R.matmul(r, w2)
            R.output(y)
        return y
'''


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
