"""Whole-program layout choice (layout_solver): the issue's patterns need no hint, print no warning and
move the bound's bytes; a program where the greedy choice provably costs more gets the optimum."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from fractions import Fraction
from functools import partial

import numpy as np
import pytest

import distir
from distir.driver import random_inputs
from distir.ir.placement import Placement, Replicate
from distir.testing import assert_sharded_equivalent
from distir.transform import AutoShard, PassContext, get_pass
from distir.transform.layout_choice import program, solution, windows
from distir.transform.layout_choice.auto_shard import strip_layouts
from distir.transform.layout_choice.cost_model import CostModel
from distir.transform.layout_choice.propagate_sharding import ShardingAmbiguityWarning, SolverTimeLimitWarning
from distir.transform.layout_choice.sharding_graph import build_graph, preferred_placements
from distir.transform.layout_choice.strategies import site_strategies
from distir.transform.specialize import specialize
from helpers import assert_no_worse_than_greedy

HEADER = '''
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
'''

HEAD_SPLIT = HEADER + '''    def main(x: R.DTensor((64, 48), "float32", "mesh[0]", "S[1]")):
        with R.dataflow():
            y = R.reshape(x, R.shape([64, 3, 16]))
            y_s = R.dist.annotate_sharding(y, device_mesh="mesh[0]", placement="S[2]")
            R.output(y_s)
        return y_s
'''

SEQUENCE_PARALLEL_MLP = HEADER + '''    def main(x: R.DTensor((256, 128), "float32", "mesh[0]", "S[0]"), w1: R.DTensor((128, 512), "float32", "mesh[0]", "S[1]"), w2: R.DTensor((512, 128), "float32", "mesh[0]", "S[0]")):
        with R.dataflow():
            h = R.matmul(x, w1)
            a = R.nn.gelu(h)
            y = R.matmul(a, w2)
            y_s = R.dist.annotate_sharding(y, device_mesh="mesh[0]", placement="S[0]")
            R.output(y_s)
        return y_s
'''

# the bundled attention block with 4 heads of 16 (hidden 64)
FOUR_HEADS = distir.examples.text("attention").replace("8, 16", "4, 16").replace("(8, s", "(4, s").replace("128", "64")


def _inputs(mod, s: int = 16, seed: int = 0):
    rng = np.random.default_rng(seed)
    shapes = [[d if isinstance(d, int) else s for d in p.type.shape] for p in mod["main"].params]
    return [(rng.standard_normal(sh) / np.sqrt(sh[0])).astype("float32") for sh in shapes]


def _run(src: str, search: str | None = None, workers=(4,), size_hints=None):
    """The simulator's stats at ``workers`` (numbers checked against one device) and the ambiguity
    warnings; ``search`` None: the default."""
    mod = distir.parse(src)
    config = {} if search is None else {"propagate-sharding.search": search}
    if size_hints:
        config["propagate-sharding.size_hints"] = size_hints
    with warnings.catch_warnings(record=True) as caught, PassContext(config=config):
        warnings.simplefilter("always")
        stats = assert_sharded_equivalent(mod, _inputs(mod), num_workers=workers, rtol=1e-4, atol=1e-5)
    return stats, [w for w in caught if issubclass(w.category, ShardingAmbiguityWarning)]


def test_head_split_reshape_moves_the_bound_with_no_hint():
    # (64, 48) S[1] -> (64, 3, 16) wanted S[2]. In the solver's model (one redistribute before the reshape,
    # one after) the cheapest is to re-cut the input by rows, reshape, and re-cut the result: 2 x 3/16 x
    # 12,288 = 4,608 B per worker at 4, checked here by exhausting the reshape's strategies. Legalize then
    # fuses that chain into one block exchange at the bound (tests/python/transform/test_exchange.py:
    # 4 x 2,048 B in all at 4 workers), so the program moves 2,048 B per worker
    stats, caught = _run(HEAD_SPLIT)
    assert not caught
    assert stats[4].counts == {"exchange": 1} and stats[4].bytes_per_worker == 2048
    mod = distir.parse(HEAD_SPLIT)
    graph = build_graph(mod["main"])
    cost = CostModel(graph)
    site = graph.sites[0]
    x, y = site.ins[0], site.outs[0]
    given, wanted = x.fixed, y.fixed
    best = min(
        cost.redistribute_cost(x, given, st.ins[0]) + cost.redistribute_cost(y, st.outs[0], wanted)
        for st in site_strategies(site, cost, [set()])
    )
    assert best == Fraction(4608)


# the seed's reshape, five elementwise ops deep: a replicated parameter, needed both sharded (e4_s)
# and, after one more op on the value (not on the hint, whose readers read it sharded), replicated (a_r)
DEEP_RECOMPUTE = HEADER + '''    def main(p0: R.DTensor((16, 16), "float32", "mesh[0]", "R")):
        with R.dataflow():
            r = R.reshape(p0, R.shape([256]))
            e1 = R.exp(r)
            e2 = R.abs(e1)
            e3 = R.negative(e2)
            e4 = R.sin(e3)
            e4_s = R.dist.annotate_sharding(e4, device_mesh="mesh[0]", placement="S[0]")
            a = R.abs(e4)
            a_r = R.dist.annotate_sharding(a, device_mesh="mesh[0]", placement="R")
            R.output(e4_s, a_r)
        return (e4_s, a_r)
'''


def test_greedy_provably_costs_more_than_the_optimum_the_solver_finds():
    # the greedy choice computes the chain sharded, as the hint prefers, and to give abs's result
    # replicated recomputes at most 3 ops back: it all-gathers (3/4 of 1,024 B per worker at 4). The
    # solver recomputes the whole chain replicated from the replicated parameter and slices e4 locally:
    # 0 bytes, the least any program can send
    for search in ("auto", "milp"):
        stats, caught = _run(DEEP_RECOMPUTE, search, workers=(2, 4))
        assert not caught
        assert all(st.total_bytes == 0 and st.counts == {} for st in stats.values()), search
    greedy, _ = _run(DEEP_RECOMPUTE, "greedy", workers=(2, 4))
    assert greedy[4].counts == {"all_gather": 1} and greedy[4].bytes_per_worker == 768
    assert greedy[2].bytes_per_worker == 512


def test_sequence_parallel_mlp_needs_no_hint_one_all_gather_one_reduce_scatter():
    stats, caught = _run(SEQUENCE_PARALLEL_MLP, workers=(2, 4))
    assert not caught, [str(w.message) for w in caught]
    for w in (2, 4):
        # the bound: gather x (its (w-1)/w) and reduce-scatter y (its (w-1)/w), 131,072 B each whole
        assert stats[w].counts == {"all_gather": 1, "reduce_scatter": 1}
        assert stats[w].bytes_per_worker == 2 * Fraction(w - 1, w) * 131072


def test_four_heads_at_four_workers_are_sharded_by_heads_with_one_all_reduce():
    stats, caught = _run(FOUR_HEADS, workers=(1, 2, 3, 4, 8))
    assert not caught
    for w in (2, 4):
        assert stats[w].counts == {"all_reduce": 1}, stats[w].counts
        assert stats[w].bytes_per_worker == 2 * Fraction(w - 1, w) * 64 * 16 * 4  # the all-reduce of (16, 64) f32
    # the layout planned for 1-4 workers (the default counts' class where 4 heads fit: a variant; the
    # layout weighed over the sampled counts keeps the heads whole, their regroups at 3 and 8 counted)
    after = specialize(get_pass("propagate-sharding")(distir.parse(FOUR_HEADS)), {"num_workers": 4})
    types = {b.var.name: b.var.type for b in after["main"].bindings()}
    assert str(types["q_h"].placement) == "S[1]" and str(types["probs"].placement) == "S[0]"


def test_four_heads_choice_follows_the_device_count_of_the_size_hints():
    # 4 heads over 3 or 8 workers are cut unevenly (8 leaves workers empty), re-blocked by regroups
    # that send only what each worker lacks. Told 4 the heads are sharded, the cheaper layout there.
    # Told 8 the heads stay whole: the solver's fit rule offers no cut that leaves workers empty,
    # though the cut layout, run at 8, sends half as much (8,960 against 17,920 B per worker; a limit
    # of the solver, docs/propagation.md). Both compute the numbers of one device at every count.
    # Told nothing, the counts 1-8 are planned for (docs/propagation.md): each count runs the cheaper
    heads, _ = _run(FOUR_HEADS, workers=(3, 4, 8), size_hints={"num_workers": 4})
    whole, caught = _run(FOUR_HEADS, workers=(3, 4, 8), size_hints={"num_workers": 8})
    assert not caught
    assert whole[8].counts == {"all_gather": 3, "all_reduce": 1}
    assert (whole[8].bytes_per_worker, heads[8].bytes_per_worker) == (17920, 8960)
    assert heads[4].bytes_per_worker < whole[4].bytes_per_worker
    planned, _ = _run(FOUR_HEADS, workers=(3, 4, 8))
    for n in (4, 8):
        assert planned[n].bytes_per_worker == min(heads[n].bytes_per_worker, whole[n].bytes_per_worker), n
    with PassContext(config={"propagate-sharding.size_hints": {"num_workers": 8}}):
        after = get_pass("propagate-sharding")(distir.parse(FOUR_HEADS))
    types = {b.var.name: b.var.type for b in after["main"].bindings()}
    assert str(types["q_h"].placement) == "R"


# the sequence-to-heads change of sequence-parallel attention (DeepSpeed-Ulysses): an S[0] activation
# reshaped and permuted into 8 heads, attention per head, and back to S[0]
SEQUENCE_TO_HEADS = HEADER + '''    def main(x: R.DTensor((64, 128), "float32", "mesh[0]", "S[0]")):
        with R.dataflow():
            h = R.reshape(x, R.shape([64, 8, 16]))
            t = R.permute_dims(h, axes=[1, 0, 2])
            tt = R.permute_dims(t, axes=[0, 2, 1])
            sc = R.matmul(t, tt)
            p = R.nn.softmax(sc, axis=-1)
            o = R.matmul(p, t)
            ob = R.permute_dims(o, axes=[1, 0, 2])
            y = R.reshape(ob, R.shape([64, 128]))
            y_s = R.dist.annotate_sharding(y, device_mesh="mesh[0]", placement="S[0]")
            R.output(y_s)
        return y_s
'''


def test_sequence_to_heads_needs_no_hint_two_all_to_alls():
    # the bound: one all-to-all from sequence to heads and one back, each (w-1)/w^2 of the 32,768 B
    # activation; attention then runs per head with no communication
    stats, caught = _run(SEQUENCE_TO_HEADS, workers=(2, 4))
    assert not caught, [str(w.message) for w in caught]
    for w in (2, 4):
        assert stats[w].counts == {"all_to_all": 2}, stats[w].counts
        assert stats[w].bytes_per_worker == 2 * Fraction(w - 1, w * w) * 32768
    # the greedy choice keeps the sequence cut, warns, and gathers
    greedy, warned = _run(SEQUENCE_TO_HEADS, "greedy", workers=(4,))
    assert warned and greedy[4].bytes_per_worker > stats[4].bytes_per_worker


@pytest.mark.parametrize("search", ["greedy", "bogus"])
def test_search_option(search):
    mod = distir.parse(HEAD_SPLIT)
    with PassContext(config={"propagate-sharding.search": search}):
        if search == "bogus":
            with pytest.raises(distir.errors.DistirError, match="propagate-sharding.search must be one of auto, milp, greedy"):
                get_pass("propagate-sharding")(mod)
        else:
            get_pass("propagate-sharding")(mod)


# --- the guarantee: the default search sends no more than the greedy choice, at every size ------


@pytest.mark.parametrize("name", ["mlp", "attention", "llama", "llama_stack2"])
def test_bundled_models_send_no_more_than_greedy_at_every_size_and_count(name):
    mod = distir.examples.llama_stack(2) if name == "llama_stack2" else distir.examples.load(name)
    assert_no_worse_than_greedy(mod)


def test_a_stack_is_solved_in_windows_alike_layers_once_with_the_whole_function_optimum(monkeypatch):
    # 8 layers (324 ops): cut at the same place of every layer (between its attention and its MLP)
    # into a first window, 7 alike windows solved once, and the tail after the last cut; the layout
    # sends what the integer program of the whole function finds, at every sampled size (ties below
    # one byte may be broken differently: the residual after attention is kept S[1] by the windows
    # and R by the whole program, the same bytes either way)
    mod = distir.examples.llama_stack(8)
    graph = build_graph(mod["main"])
    prefs = preferred_placements(graph)
    cuts = windows.cut_windows(graph)
    assert [sum(not s.is_hint for s in w) for w in cuts] == [37] + [40] * 7 + [7]
    assert sum(len(w) for w in cuts) == len(graph.sites)
    plan, solved = windows.solve_layouts(graph, prefs, CostModel(graph))
    assert len(solved) == 3
    monkeypatch.setattr(windows, "WHOLE_OPS", 10**6)  # one window: the whole function
    whole, solved_whole = windows.solve_layouts(graph, prefs, CostModel(graph))
    assert len(solved_whole) == 1
    assert plan.bytes == whole.bytes == 8 * 98304  # one all-reduce per attention block and per MLP, at s = 64, 4 workers
    assert plan.objective == whole.objective


# u = x + c reads an S[0] and an S[1] input, and each result is returned in a declared layout: u laid
# out S[0] or S[1] sends the same bytes (one all-to-all on each side), holds the same, and the caller
# sees the same parameters and results: a tie that matters to no one
SILENT_TIE = HEADER + '''    def main(x: R.DTensor((64, 64), "float32", "mesh[0]", "S[0]"), c: R.DTensor((64, 64), "float32", "mesh[0]", "S[1]"), a: R.DTensor((64, 64), "float32", "mesh[0]", "S[0]"), b: R.DTensor((64, 64), "float32", "mesh[0]", "S[1]")) -> R.Tuple(R.DTensor((64, 64), "float32", "mesh[0]", "S[0]"), R.DTensor((64, 64), "float32", "mesh[0]", "S[1]")):
        with R.dataflow():
            u = R.add(x, c)
            y = R.add(u, a)
            z = R.add(u, b)
            R.output(y, z)
        return (y, z)
'''


def test_a_tie_that_changes_neither_memory_nor_what_the_caller_sees_is_not_warned():
    mod = distir.parse(SILENT_TIE)
    graph = build_graph(mod["main"])
    plan, solved = windows.solve_layouts(graph, preferred_placements(graph), CostModel(graph))
    u = next(s for s in graph.slots if s.name == "u")
    chosen = plan.primary[u.id]
    other = distir.ir.Placement.parse("S[1]" if str(chosen) == "S[0]" else "S[0]")
    alt_plan, alt_cost = solution.alternative(solved[0].model, u.id, other)
    assert (alt_cost.objective, alt_cost.sent, alt_cost.held) == (solved[0].total.objective, solved[0].total.sent,
                                                                  solved[0].total.held)
    assert solution.visible_layouts(solved[0].model, alt_plan) == solution.visible_layouts(solved[0].model, plan)
    stats, caught = _run(SILENT_TIE, workers=(2, 4))
    assert not caught
    assert stats[4].counts == {"all_to_all": 2} and stats[4].bytes_per_worker == 2 * Fraction(3, 16) * 16384
    # the greedy pass warns about every disagreement, whatever it costs
    _, warned = _run(SILENT_TIE, "greedy")
    assert warned

# --- ties are broken deterministically -----------------------------------------------------------

# a tie: x costs the same laid out S[0] or S[1] (the solver warns and picks by its tie-break)
TIE = HEADER + '''    def main(x: R.Tensor((64, 64), "float32"), a: R.DTensor((64, 64), "float32", "mesh[0]", "S[0]"), b: R.DTensor((64, 64), "float32", "mesh[0]", "S[1]")):
        with R.dataflow():
            y = R.add(x, a)
            z = R.add(x, b)
            R.output(y, z)
        return (y, z)
'''

LAY_OUT_ALL = """
import sys, warnings
import distir
from distir.transform import get_pass
for src in sys.stdin.read().split("\\0"):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        print(get_pass("propagate-sharding")(distir.parse(src)).script())
    print(sorted(str(w.message) for w in caught))
"""


def test_the_same_module_gets_the_same_layout_whatever_the_hash_seed():
    # twice in this process, and in a process whose str hashes (so set and dict-of-set orders) differ
    # from this one's: a hash seed other than this process's
    programs = [TIE, SEQUENCE_TO_HEADS, FOUR_HEADS, DEEP_RECOMPUTE, distir.examples.text("llama")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ShardingAmbiguityWarning)
        once = [get_pass("propagate-sharding")(distir.parse(src)).script() for src in programs]
        again = [get_pass("propagate-sharding")(distir.parse(src)).script() for src in programs]
    assert once == again
    seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
    env = {**os.environ, "PYTHONHASHSEED": seed}
    child = subprocess.run([sys.executable, "-c", LAY_OUT_ALL], input="\0".join(programs), env=env,
                           capture_output=True, text=True, timeout=300, check=True).stdout
    for text in once:
        assert text in child
    with pytest.warns(ShardingAmbiguityWarning, match=r"'x' .*costs the same laid out S\[0\] \(.* B sent.*or S\[1\] \(.* B sent"):
        get_pass("propagate-sharding")(distir.parse(TIE))


# a replicated input and a hint on an intermediate: the hinted value is made S[0] and its readers read it
# there (before, the solver computed every reader again from a replicated copy: all replicated)
HINT_ON_INTERMEDIATE = HEADER + '''    def main(x: R.DTensor((64, 32), "float32", "mesh[0]", "R")):
        with R.dataflow():
            a = R.exp(x)
            a_s = R.dist.annotate_sharding(a, device_mesh="mesh[0]", placement="S[0]")
            b = R.exp(a_s)
            c = R.sum(b, axis=[1])
            R.output(c)
        return c
'''

HINT_IN_MLP = HEADER + '''    def main(x: R.DTensor((64, 32), "float32", "mesh[0]", "R"), w1: R.Tensor((32, 48), "float32"), w2: R.Tensor((48, 32), "float32")):
        with R.dataflow():
            h = R.matmul(x, w1)
            h_s = R.dist.annotate_sharding(h, device_mesh="mesh[0]", placement="S[1]")
            a = R.nn.gelu(h_s)
            y = R.matmul(a, w2)
            R.output(y)
        return y
'''


@pytest.mark.parametrize("src, reader, hinted", [(HINT_ON_INTERMEDIATE, "b", "S[0]"), (HINT_IN_MLP, "a", "S[1]")],
                         ids=["replicated-input", "mlp"])
@pytest.mark.parametrize("search", ["auto", "milp"])
def test_a_hint_on_an_intermediate_is_kept(src, reader, hinted, search):
    with PassContext(config={"propagate-sharding.search": search}):
        after = get_pass("propagate-sharding")(distir.parse(src))
    bindings = {b.var.name: b for b in after["main"].bindings()}
    read = bindings[reader]
    # the reader reads the hinted value in the hinted layout, and it is the only such op (no replicated copy)
    assert [str(a.type.placement) for a in read.value.args] == [hinted]
    assert str(read.var.type.placement) == hinted
    assert not [n for n in bindings if n.startswith(reader + "_")], after.script()
    _run(src, search, workers=(2, 3))  # the numbers equal one device's


# a fused projection cut into q, k and v by R.split, each wanted S[1]: the split reads its input
# S[1/3] (each worker's block of every third), so the one exchange is the head-split reshape's
# (HEAD_SPLIT), at the bound; before, the split axis had to be whole (4,608 B at 4, 2.25x)
QKV_SPLIT = HEADER + '''    def main(x: R.DTensor((64, 48), "float32", "mesh[0]", "S[1]")):
        with R.dataflow():
            parts = R.split(x, indices_or_sections=3, axis=1)
            q = parts[0]
            k = parts[1]
            v = parts[2]
            q_s = R.dist.annotate_sharding(q, device_mesh="mesh[0]", placement="S[1]")
            k_s = R.dist.annotate_sharding(k, device_mesh="mesh[0]", placement="S[1]")
            v_s = R.dist.annotate_sharding(v, device_mesh="mesh[0]", placement="S[1]")
            R.output(q_s, k_s, v_s)
        return (q_s, k_s, v_s)
'''


def test_split_of_a_fused_projection_moves_what_the_reshape_moves():
    split, _ = _run(QKV_SPLIT, workers=(2, 4, 8))
    reshape, _ = _run(HEAD_SPLIT, workers=(2, 4, 8))
    for n, bound in ((2, 2048), (4, 2048), (8, 1280)):
        assert split[n].bytes_per_worker == reshape[n].bytes_per_worker == bound, n
        assert split[n].counts == {"exchange": 1}, (n, split[n].counts)
    _run(QKV_SPLIT, workers=(3, 5, 6, 7))  # thirds of 16 cut unevenly: the numbers equal one device's


# --- the solver's time limit ---------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1.0, float("inf"), float("nan"), "10", True])
def test_solver_seconds_option_is_checked(value):
    with PassContext(config={"propagate-sharding.solver_seconds": value}):
        with pytest.raises(distir.errors.DistirError, match="solver_seconds must be a positive number of seconds"):
            get_pass("propagate-sharding")(distir.parse(HEAD_SPLIT))


def test_a_solver_out_of_time_keeps_the_greedy_layout_and_says_so(monkeypatch):
    """With no time at all, HiGHS stops before any layout: the function is laid out greedily (the
    layout the greedy search gives), with a warning naming the option, and computes the same numbers."""
    monkeypatch.setattr(solution, "MIN_SOLVE_SECONDS", 1e-9)
    solution.forget_solved()  # no optimum solved before in this process
    with PassContext(config={"propagate-sharding.search": "greedy"}), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        greedy = get_pass("propagate-sharding")(distir.parse(SEQUENCE_TO_HEADS))
    with PassContext(config={"propagate-sharding.solver_seconds": 1e-9}):
        with pytest.warns(SolverTimeLimitWarning, match=r"@main: the layout solver found no layout in time: the greedy "
                          r"layout is kept \(propagate-sharding.solver_seconds = 1e-09, distir-opt --solver-seconds\)"):
            timed_out = get_pass("propagate-sharding")(distir.parse(SEQUENCE_TO_HEADS))
    assert distir.script.print_module(timed_out) == distir.script.print_module(greedy)
    with PassContext(config={"propagate-sharding.solver_seconds": 60}), warnings.catch_warnings():
        warnings.simplefilter("error", SolverTimeLimitWarning)  # in time: no warning, the solver's layout
        solved = get_pass("propagate-sharding")(distir.parse(SEQUENCE_TO_HEADS))
    assert distir.script.print_module(solved) != distir.script.print_module(greedy)


def test_a_program_solved_before_is_answered_without_the_solver(monkeypatch):
    """A proven optimum is remembered (the same module laid out twice: HiGHS runs only the first
    time, the layouts are the same); a layout the time limit cut short is not (more time may do better)."""
    solution.forget_solved()
    runs = []

    highs = solution.highs

    def counted(*args, **kw):
        res = highs(*args, **kw)
        runs.append(res.status)
        return res

    monkeypatch.setattr(solution, "highs", counted)
    first = distir.script.print_module(get_pass("propagate-sharding")(distir.parse(SEQUENCE_TO_HEADS)))
    solved = len(runs)
    assert solved and set(runs) == {0} and len(solution._solved) == solved
    again = distir.script.print_module(get_pass("propagate-sharding")(distir.parse(SEQUENCE_TO_HEADS)))
    assert again == first and len(runs) == solved
    solution.forget_solved()
    monkeypatch.setattr(solution, "MIN_SOLVE_SECONDS", 1e-9)
    with PassContext(config={"propagate-sharding.solver_seconds": 1e-9}), warnings.catch_warnings():
        warnings.simplefilter("ignore", SolverTimeLimitWarning)
        get_pass("propagate-sharding")(distir.parse(SEQUENCE_TO_HEADS))
    assert len(runs) > solved and 0 not in runs[solved:] and not solution._solved


def test_the_solver_clock_counts_only_the_solver_and_gives_each_program_its_minimum():
    with solution.solver_time_limit(5.0) as clock:
        assert clock.left() == 5.0 and clock.left(0.5) == 2.5
        clock.used = 4.0
        assert clock.left() == solution.MIN_SOLVE_SECONDS  # 1 s left, at least the least a program gets
        clock.used = 7.0
        assert clock.left() == solution.MIN_SOLVE_SECONDS
    assert solution._CLOCK.get() is None  # the limit ends with its block


def _solved_programs(monkeypatch, run, tight: bool) -> list[tuple[float, float]]:
    """Each program HiGHS solves while ``run()`` lays a module out, cold, with or without the rows
    that tighten the relaxation: (its optimum, the optimum of its linear relaxation)."""
    solution.forget_solved()
    found = []

    highs = solution.highs

    def spied(c, **kw):
        res = highs(c, **kw)
        relaxed = highs(c, **{**kw, "integrality": np.zeros(len(c)), "start": None})
        found.append((res.fun, relaxed.fun))
        return res

    with monkeypatch.context() as m:
        m.setattr(solution, "highs", spied)
        m.setattr(solution, "_whole_relaxation", lambda *a, **kw: None)  # every program solved as integers
        m.setattr(windows, "Program", partial(program.Program, tight=tight))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run()
    solution.forget_solved()
    return found


def _gpt2_block(colwise: bool = False):
    """One GPT-2 block written with relax.frontend.nn, without a layout or with the Megatron plan."""
    from distir.transform import ShardParams
    from distir.examples.nn import gpt2 as G

    block = G.block_module("split")
    return ShardParams(G.BLOCK_COLWISE_PLAN)(block) if colwise else block


LAID_OUT = {
    "llama": lambda: get_pass("propagate-sharding")(distir.examples.load("llama")),
    "sequence-to-heads": lambda: get_pass("propagate-sharding")(distir.parse(SEQUENCE_TO_HEADS)),
    "gpt2-colwise": lambda: get_pass("propagate-sharding")(_gpt2_block(colwise=True)),
    "auto-shard-attention": lambda: AutoShard(activation_budget="min+25%")(strip_layouts(distir.examples.load("attention"))),
    "auto-shard-gpt2": lambda: AutoShard(sizes={"b": 2, "s": 10, "num_workers": 2})(_gpt2_block()),
}


@pytest.mark.parametrize("name", LAID_OUT)
def test_the_rows_that_tighten_the_relaxation_keep_every_optimum(monkeypatch, name):
    # Program.recomputations and Program.consumption_rows: every program (least peak, bytes,
    # tie-break) has the same optimum with them as without, and a relaxation no looser
    tight = _solved_programs(monkeypatch, LAID_OUT[name], True)
    loose = _solved_programs(monkeypatch, LAID_OUT[name], False)
    assert len(tight) == len(loose) > 0
    for (opt, lp), (opt_loose, lp_loose) in zip(tight, loose):
        assert opt == pytest.approx(opt_loose, rel=1e-9, abs=1e-9)
        assert lp >= lp_loose - 1e-6 * max(1.0, abs(lp_loose))


def test_the_used_primary_rows_make_a_relaxation_exact(monkeypatch):
    # Program.used_primary_rows: every program of sequence-to-heads (the tie warnings' re-solves with a
    # value's layout forced among them) keeps its optimum, no relaxation is looser, and one whose
    # relaxation was half its optimum without them is exact with them
    run = LAID_OUT["sequence-to-heads"]
    tight = _solved_programs(monkeypatch, run, True)
    monkeypatch.setattr(program.Program, "used_primary_rows", lambda self: None)
    without = _solved_programs(monkeypatch, run, True)
    assert len(tight) == len(without) > 0
    for (opt, lp), (opt_without, lp_without) in zip(tight, without):
        assert opt == pytest.approx(opt_without, rel=1e-9, abs=1e-9)
        assert lp >= lp_without - 1e-6 * max(1.0, abs(lp_without))
    tightened = [(opt, lp, lp0) for (opt, lp), (_, lp0) in zip(tight, without) if lp > lp0 + 1e-6]
    assert tightened and all(lp == pytest.approx(opt) and lp0 <= opt / 2 + 1e-6 for opt, lp, lp0 in tightened)


def test_a_whole_relaxation_gives_the_layout_the_integer_program_gives(monkeypatch):
    # the least bytes of a stack's windows come from their linear relaxation, whose optimal vertex is
    # whole: the layout is the one solving every program as integers gives
    used = []
    relaxed = solution._whole_relaxation

    def spied(*args, **kw):
        found = relaxed(*args, **kw)
        used.append(found is not None)
        return found

    mod = distir.examples.llama_stack(8)
    solution.forget_solved()
    with monkeypatch.context() as m:
        m.setattr(solution, "_whole_relaxation", spied)
        fast = distir.script.print_module(get_pass("propagate-sharding")(mod))
    solution.forget_solved()
    with monkeypatch.context() as m:
        m.setattr(solution, "_whole_relaxation", lambda *a, **kw: None)
        integer = distir.script.print_module(get_pass("propagate-sharding")(mod))
    solution.forget_solved()
    assert fast == integer and used and all(used)


def test_a_relaxation_that_is_not_whole_is_left_to_the_integer_solver():
    # two columns, at most one and a half of them: the relaxation takes 1.5, the integers only 1
    c, whole = np.array([-1.0, -1.0]), np.ones(2, dtype=int)
    bounds, rows = (np.zeros(2), np.ones(2)), [solution.Rows(np.array([[1.0, 1.0]]), -np.inf, 1.5)]
    solution.forget_solved()
    assert solution._whole_relaxation(c, 1.0, integrality=whole, bounds=bounds, constraints=rows) is None
    rows = [solution.Rows(np.array([[1.0, 1.0]]), -np.inf, 1.0)]
    found = solution._whole_relaxation(c, 1.0, integrality=whole, bounds=bounds, constraints=rows)
    assert found is not None and found.fun == -1.0 and sorted(found.x) == [0.0, 1.0]
    solution.forget_solved()


def test_the_relaxation_of_a_stack_s_windows_is_its_optimum(monkeypatch):
    # with the rows, the relaxation of llama_stack(8)'s windows is their optimum (the bytes exactly,
    # the tie-breaks within 0.01%: the proof costs next to nothing); without them it bounded the
    # bytes at 60% of it
    def run():
        get_pass("propagate-sharding")(distir.examples.llama_stack(8))

    tight, loose = _solved_programs(monkeypatch, run, True), _solved_programs(monkeypatch, run, False)
    assert all(lp == pytest.approx(opt, rel=1e-12) for opt, lp in tight[0::2])  # each window's bytes, then its tie-break
    assert all(lp >= opt * (1 - 1e-4) for opt, lp in tight)
    assert min(lp / opt for opt, lp in loose if opt) < 0.7


def test_only_a_budgeted_solve_runs_python_inside_highs(monkeypatch):
    # Python runs its signal handlers (Ctrl-C, a timer) in HiGHS's callbacks, and HiGHS ends a solve whose
    # callback raised with an error, the exception lost (a fuzz timer's, and the program solved again
    # without it): a solve without a budget subscribes none, so such an exception is raised when it returns
    from scipy.sparse import csr_matrix

    from distir.transform.layout_choice import highs_model

    calls = []
    counted = highs_model._check
    monkeypatch.setattr(highs_model, "_check", lambda left, event: (calls.append(1), counted(left, event)))
    # x0 + x1 <= 1.5 over whole columns, both wanted: the relaxation takes 1.5, a branch or a cut the answer 1
    held = highs_model.HighsModel(csr_matrix([[1.0, 1.0]]), np.array([-np.inf]), np.array([1.5]), np.ones(2, dtype=int),
                                  {"mip_rel_gap": 0.0, "presolve": False}, np.zeros(2))
    solve = partial(held.solve, np.array([-1.0, -1.0]), np.zeros(2), np.ones(2))
    assert solve().status == highs_model.OPTIMAL and sum(solve().x) == 1 and not calls
    assert solve(checks=10).status == highs_model.OPTIMAL and calls  # the budget is counted in the callback
    before = len(calls)
    assert solve().status == highs_model.OPTIMAL and len(calls) == before


def test_without_highspy_scipy_solves_the_same_program(monkeypatch):
    # highspy missing (the GPU machine's install had none): scipy's HiGHS, imported then only, gives the same answer
    c, whole = np.array([-1.0, -2.0, -1.0]), np.ones(3, dtype=int)
    rows = [solution.Rows(np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]), -np.inf, 1.0)]
    kw = {"integrality": whole, "bounds": (0, 1), "constraints": rows, "options": dict(solution.SOLVER_OPTIONS)}
    found = solution.highs(c, **kw)

    def missing(*args, **kw):
        raise ImportError("No module named 'highspy'")

    monkeypatch.setattr(solution, "HighsModel", missing)
    fallback = solution.highs(c, **kw)
    assert found.status == fallback.status == solution.OPTIMAL_STATUS
    assert found.fun == fallback.fun == -2.0 and list(found.x) == list(fallback.x) == [0.0, 1.0, 0.0]


# a random program on a mesh with an axis of one device (scripts/fuzz_auto_shard.py --seed 8 --only 19,
# whose auto-shard took a minute: every strategy multiplied by the four layouts along that axis)
UNIT_AXIS = '''
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh((MESH), I.Range(0, "2 * num_workers"))]})

    @R.function
    def main(p0: R.Tensor((4, 6), "float64"), p1: R.Tensor((8, 3), "float64"), p2: R.Tensor((6, 6), "float64"), p3: R.Tensor((6, 12), "float64")):
        with R.dataflow():
            v1 = R.matmul(p0, p2, out_dtype=None)
            t2 = R.split(v1, indices_or_sections=2, axis=0)
            v3 = t2[1]
            v5 = R.matmul(v1, p3, out_dtype=None)
            v6 = R.permute_dims(v1, axes=[1, 0])
            R.output(v3, v5, v6)
        return (v3, v5, v6)
'''


def _with_unit_axis(p: Placement) -> Placement:
    return Placement((*p.specs, Replicate()))


def test_an_axis_of_one_device_adds_no_strategy_and_no_bytes():
    unit = distir.parse(UNIT_AXIS.replace("MESH", '"num_workers", 2, 1'))
    plain = distir.parse(UNIT_AXIS.replace("MESH", '"num_workers", 2'))
    # every op runs replicated along the axis of one device: the strategies of the mesh without it, R added
    # (the parameters given replicated, so that each op has a mesh)
    unit_graph, plain_graph = (build_graph(distir.parse(re.sub(r'R.Tensor\((\(.*?\)), "float64"\)',
                                                               rf'R.DTensor(\1, "float64", "mesh[0]", "{r}")',
                                                               UNIT_AXIS.replace("MESH", mesh)))["main"])
                               for mesh, r in (('"num_workers", 2, 1', "R, R, R"), ('"num_workers", 2', "R, R")))
    for u, p in zip(unit_graph.sites, plain_graph.sites, strict=True):
        partial = [{"sum"}] * len(p.ins)
        expected = {(tuple(map(_with_unit_axis, st.ins)), tuple(map(_with_unit_axis, st.outs)))
                    for st in site_strategies(p, CostModel(plain_graph), partial)}
        assert {(st.ins, st.outs) for st in site_strategies(u, CostModel(unit_graph), partial)} == expected
    # so auto-shard chooses the same layouts with R along that axis, and sends the same bytes
    unit_pass, plain_pass = AutoShard(), AutoShard()
    laid = unit_pass(unit)
    plain_pass(plain)
    assert unit_pass.report.sent == plain_pass.report.sent
    assert unit_pass.report.layouts() == {k: _with_unit_axis(v) for k, v in plain_pass.report.layouts().items()}
    assert_sharded_equivalent(laid, random_inputs(laid), num_workers=(1, 3), rtol=1e-9, atol=1e-12)


def test_a_layout_given_along_an_axis_of_one_device_is_kept():
    # x is given cut along the axis of one device, and so is the hint on y: every op keeps every
    # strategy along that axis (no layout change is forced there), and exp reads the hint in its layout
    # (issue 23: readers read a hinted value where it is cut)
    mod = distir.parse(HEADER.replace('("num_workers",)', '("num_workers", 1)') + '''    def main(x: R.DTensor((8, 6), "float32", "mesh[0]", "S[0], S[1]"), w: R.Tensor((6, 4), "float32")):
        with R.dataflow():
            y = R.matmul(x, w)
            y_h = R.dist.annotate_sharding(y, device_mesh="mesh[0]", placement="S[0], S[0]")
            z = R.exp(y_h)
            u = R.tanh(z)
            R.output(u)
        return u
''')
    graph = build_graph(mod["main"])
    cost = CostModel(graph)
    assert cost.replicated_axes(graph.mesh_of[graph.slots[0].id]) == frozenset()
    cut_there = lambda st: any(not isinstance(q[1], Replicate) for q in (*st.ins, *st.outs))  # noqa: E731
    for site in graph.sites:
        if not site.is_hint:
            assert any(map(cut_there, site_strategies(site, cost, [set()] * len(site.ins)))), site.name
    laid = get_pass("propagate-sharding")(mod)["main"]
    assert {b.var.name: str(b.var.type.placement) for b in laid.bindings()}["z"] == "S[0], S[0]"
    stats = assert_sharded_equivalent(mod, _inputs(mod), num_workers=(1, 2, 3), rtol=1e-5, atol=1e-6)
    assert all(s.bytes_per_worker == 0 for s in stats.values())  # rows cut throughout: the changes are local


@pytest.mark.parametrize("mesh, devices, solved", [('2, "num_workers", 1', 2, True), ('2, "num_workers", 2', 4, False)])
def test_an_axis_of_one_device_does_not_count_toward_the_solvers_mesh_axes(monkeypatch, mesh, devices, solved):
    # three axes are laid out greedily (strategies multiply per axis), but an axis of one device that no
    # given layout cuts adds no strategy: (2, num_workers, 1) is solved as the 2-D mesh it is
    from distir.transform.layout_choice import propagate_sharding

    calls = []
    real = propagate_sharding.solve_layouts
    monkeypatch.setattr(propagate_sharding, "solve_layouts", lambda *a, **k: calls.append(1) or real(*a, **k))
    mod = distir.parse(f'''
@I.ir_module
class Module:
    I.module_global_infos({{"mesh": [R.device_mesh(({mesh}), I.Range(0, "{devices} * num_workers"))]}})

    @R.function
    def main(x: R.DTensor((16, 8), "float32", "mesh[0]", "S[0], S[1], R"), w: R.DTensor((8, 16), "float32", "mesh[0]", "R, S[1], R")):
        with R.dataflow():
            y = R.matmul(x, w)
            z = R.nn.gelu(y)
            R.output(z)
        return z
''')
    assert_sharded_equivalent(mod, _inputs(mod), num_workers=(1, 2, 3), rtol=1e-4, atol=1e-5)
    assert bool(calls) == solved


@pytest.mark.parametrize("hidden, heads, ffn, workers", [(128, 8, 256, 16), (256, 16, 512, 32)])
def test_the_guard_counts_regroups_more_workers_than_heads(hidden, heads, ffn, workers):
    """A Llama layer with more workers than heads, the sizes given: the greedy layout cuts the heads'
    columns and re-blocks them into whole heads (regroups), which the guard used to leave uncounted
    and so kept (issue 39: the Llama-70B-like layer at 256 workers, 735 MB per worker against milp's
    402 MB). Counted as they run (each worker receives only what it lacks), the default search sends
    no more than `search="milp"` (here less: the milp model prices no regroup); the oracle is the
    simulator's bytes of both layouts, each run compared with one device."""
    from distir.driver import Driver, random_inputs
    from distir.examples import llama_stack

    mod = llama_stack(1, hidden=hidden, heads=heads, ffn=ffn)
    inputs = random_inputs(mod, "main", {"s": 8})
    got = {}
    for search in ("auto", "milp"):
        config = {"propagate-sharding.size_hints": {"num_workers": workers, "s": 8}, "propagate-sharding.search": search}
        with warnings.catch_warnings(), PassContext(config=config):
            warnings.simplefilter("ignore")
            r = Driver(mod).run(inputs, workers, rtol=1e-4, atol=1e-4)
        assert r.ok, (search, r.comparison.mismatch)
        got[search] = r.stats
    assert got["auto"].bytes_per_worker <= got["milp"].bytes_per_worker
