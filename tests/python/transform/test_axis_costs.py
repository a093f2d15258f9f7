"""Time-aware plans: with an alpha-beta cost per mesh axis the planner minimizes estimated time
(``rounds * latency + bytes / bandwidth`` of each step's axis). Traffic goes over the fast axis where
the bytes allow, small tensors take fewer collectives under a high latency, the numbers still equal
one device, specialize re-plans with the same objective, the analysis estimates the same time, and
without costs the plans are the byte-optimal ones."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import distir
from distir import examples
from distir.analysis import CommModel, comm_time, comm_volume
from distir.driver import random_inputs
from distir.errors import DistirError
from distir.ir import DeviceMesh, Placement, Range, sym, verify
from distir.ir.axis_cost import DEFAULT_AXIS_COST, AxisCost, AxisCostError, AxisCosts
from distir.runtime.spmd import SpmdStats, run_spmd
from distir.testing import assert_sharded_equivalent
from distir.transform import PassContext, get_pass
from distir.transform.layout_choice.cost_model import CostModel
from distir.transform.layout_choice.sharding_graph import build_graph
from distir.transform.legalize_redistribute import AXIS_COSTS_KEY
from distir.transform.pipelines import distribute_pipeline
from distir.transform.redistribute_plan import (
    Timing,
    plan_cost,
    plan_redistribute,
    step_cost,
    timing_for,
)
from distir.transform.specialize import specialize
from helpers import redistribute_module
from plan_oracle import MAX_STEPS, least

P = Placement.parse
W = sym.var("num_workers")
MESH = DeviceMesh((2, 4), Range(0, 8))
# a (nodes, gpus) mesh: axis 0 between nodes, 10x slower than axis 1 within a node, in latency and bandwidth
SLOW_FAST = AxisCosts.parse("0=10us:10GB/s,1=1us:100GB/s")
FAST_SLOW = AxisCosts.parse("0=1us:100GB/s,1=10us:10GB/s")
BIG = (1024, 1024)


def _bytes_by_axis(plan, src: Placement, sizes, extents) -> dict[int, Fraction]:
    """Bytes per worker (per byte of the tensor) each mesh axis carries in ``plan``."""
    out: dict[int, Fraction] = {}
    state = src
    for step in plan:
        out[step.mesh_axis] = out.get(step.mesh_axis, Fraction(0)) + step_cost(step, state, sizes, extents)
        state = step.apply(state, sizes)
    return out


def _plan(src: str, dst: str, costs: AxisCosts | None, shape=BIG, mesh: DeviceMesh = MESH):
    return plan_redistribute(mesh, len(shape), P(src), P(dst), shape, timing_for(costs, mesh, shape, 4))


def _timing(costs: AxisCosts, shape=BIG) -> Timing:
    return timing_for(costs, MESH, shape, 4)


# ---------------------------------------------------------------- the model and its text


def test_axis_costs_read_and_print_back_exactly():
    costs = AxisCosts.parse("1=1us:300GB/s, 0=5us:25GB/s")
    assert str(costs) == "0=5us:25GB/s,1=1us:300GB/s"
    assert AxisCosts.parse(str(costs)) == costs
    assert costs.cost(1) == AxisCost(Fraction(1, 10**6), Fraction(300 * 10**9))
    assert costs.cost(7) == DEFAULT_AXIS_COST  # an axis not given
    assert str(AxisCost(2.5e-6, 1.5e9)) == "2.5us:1.5GB/s"  # floats read as the decimals they print as
    assert AxisCost(1, 2).seconds(3, 10) == Fraction(3 + 5)
    assert AxisCosts.of({0: "5us:25GB/s", 1: (1e-6, 3e11)}) == costs
    with pytest.raises(AxisCostError, match="axis cost for mesh axis 1, but the mesh has 1 axes"):
        costs.for_mesh(1)


@pytest.mark.parametrize("text, message", [
    ("0=5:25GB/s", "'0=5:25GB/s': the latency '5' has no unit; use one of s, ms, us, ns"),
    ("0=5us:25GiB/s", "the bandwidth '25GiB/s' has the unit 'GiB/s'"),
    ("0=5us", "'0=5us': expected LATENCY:BANDWIDTH"),
    ("x=5us:1GB/s", "the mesh axis 'x' is not an integer"),
    ("0=5us:0GB/s", "'0=5us:0GB/s': bandwidth must be a positive number"),
    ("0=-5us:1GB/s", "latency must be >= 0"),
    ("0=1us:1GB/s,0=2us:1GB/s", "mesh axis 0 is given twice"),
    ("", "no axis cost given"),
    # out of range: infinite in the solver's floats, or a slipped unit
    ("0=1e400us:1GB/s", "'0=1e400us:1GB/s': the latency '1e400us' is out of range: 0, or from 1e-12 s (1 ps) to 3600 s"),
    ("0=1us:1e-300GB/s", "the bandwidth '1e-300GB/s' is out of range: from 1 B/s to 1e18 B/s"),
    ("0=1e999999999us:1GB/s", "the latency '1e999999999us' is out of range"),  # not expanded: no hang
    ("0=0.0001ns:1GB/s", "is out of range: 0, or from 1e-12 s (1 ps) to 3600 s"),
    ("0=1us:0.5B/s", "bandwidth 0.5 B/s is out of range"),
    ("0=1us:2000000TB/s", "bandwidth 2.00e+18 B/s is out of range"),
])
def test_malformed_axis_costs_say_what_is_wrong(text, message):
    with pytest.raises(AxisCostError, match=None) as info:
        AxisCosts.parse(text)
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("latency, bandwidth, message", [
    (Fraction(10**400), 10**9, "latency 1.00e+400 s is out of range"),
    (1e-6, Fraction(1, 10**300), "bandwidth 1e-300 B/s is out of range"),
    (float("inf"), 10**9, "latency must be a finite number, got inf"),
    ("1e400", 10**9, "latency 1e400 is out of range"),
    (1e-6, float("nan"), "bandwidth must be a finite number, got nan"),
])
def test_axis_costs_out_of_range_are_refused_in_python_too(latency, bandwidth, message):
    with pytest.raises(AxisCostError, match=None) as info:
        AxisCost(latency, bandwidth)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert AxisCost(0, 10**18) and AxisCost(3600, 1) and AxisCost("1e-12", "1e18")  # the ends of the ranges


# ---------------------------------------------------------------- the planner


def test_traffic_goes_over_the_fast_axis_for_the_same_bytes():
    """ "P, P" -> "S[0], S[1]": two reduce-scatters either way, the same bytes. By bytes the slow axis
    0 goes first and carries the whole tensor's partials; by time the fast axis goes first and the
    slow one reduces a quarter. With the costs swapped the plan is mirrored."""
    by_bytes = _plan("P, P", "S[0], S[1]", None)
    by_time = _plan("P, P", "S[0], S[1]", SLOW_FAST)
    src = P("P, P")
    assert plan_cost(by_time, src, (2, 4), BIG) == plan_cost(by_bytes, src, (2, 4), BIG)
    assert [s.mesh_axis for s in by_bytes] == [0, 1] and [s.mesh_axis for s in by_time] == [1, 0]
    slow_bytes, slow_time = (_bytes_by_axis(p, src, (2, 4), BIG)[0] for p in (by_bytes, by_time))
    assert slow_time == slow_bytes / 4
    t = _timing(SLOW_FAST)
    assert plan_cost(by_time, src, (2, 4), BIG, t) < plan_cost(by_bytes, src, (2, 4), BIG, t) / 2
    assert [s.mesh_axis for s in _plan("P, P", "S[0], S[1]", FAST_SLOW)] == [0, 1]


def test_an_all_reduce_on_the_slow_axis_is_cut_by_the_fast_one_first():
    """ "P, R" -> "R, R": by bytes one all-reduce over the slow axis; by time the fast axis cuts the
    tensor in 4 first, the slow axis all-reduces a quarter, and the fast axis gathers it back: the
    same bytes, a third of the time."""
    by_bytes, by_time = _plan("P, R", "R, R", None), _plan("P, R", "R, R", SLOW_FAST)
    assert [s.kind for s in by_bytes] == ["all_reduce"]
    assert [(s.kind, s.mesh_axis) for s in by_time] == [("local_shard", 1), ("all_reduce", 0), ("all_gather", 1)]
    src, t = P("P, R"), _timing(SLOW_FAST)
    assert plan_cost(by_time, src, (2, 4), BIG) == plan_cost(by_bytes, src, (2, 4), BIG)
    assert plan_cost(by_time, src, (2, 4), BIG, t) < plan_cost(by_bytes, src, (2, 4), BIG, t) / 2
    # more bytes on the fast axis beat fewer that cross the slow one: "R, P" -> "R, R" by bytes cuts over
    # the slow axis (local_shard, all_reduce, all_gather); by time one all-reduce on the fast axis
    fast = _plan("R, P", "R, R", SLOW_FAST)
    assert [(s.kind, s.mesh_axis) for s in fast] == [("all_reduce", 1)]
    by_bytes = _plan("R, P", "R, R", None)
    assert plan_cost(fast, P("R, P"), (2, 4), BIG) > plan_cost(by_bytes, P("R, P"), (2, 4), BIG)
    assert _bytes_by_axis(by_bytes, P("R, P"), (2, 4), BIG)[0] > 0


def test_small_tensors_take_fewer_collectives_under_a_high_latency():
    """ "R, P" -> "R, R" by bytes is local_shard, all_reduce, all_gather (half the tensor reduced). With
    50 us per round on both axes an 8x8 tensor takes one all-reduce (more bytes, fewer rounds); a
    1024x1024 one keeps the byte-optimal plan, whose bytes outweigh the extra rounds."""
    slow = AxisCosts.parse("0=50us:10GB/s,1=50us:10GB/s")
    by_bytes = _plan("R, P", "R, R", None, (8, 8))
    assert [s.kind for s in by_bytes] == ["local_shard", "all_reduce", "all_gather"]
    small = _plan("R, P", "R, R", slow, (8, 8))
    assert [s.kind for s in small] == ["all_reduce"]
    assert plan_cost(small, P("R, P"), (2, 4), (8, 8)) > plan_cost(by_bytes, P("R, P"), (2, 4), (8, 8))
    assert _plan("R, P", "R, R", slow) == _plan("R, P", "R, R", None)


def test_without_costs_plans_minimize_bytes():
    for src, dst in (("P, P", "S[0], S[1]"), ("P, R", "R, R"), ("S[0], S[1]", "S[1], S[0]"), ("R, P", "R, S[0]")):
        plan = _plan(src, dst, None)
        assert plan == plan_redistribute(MESH, 2, P(src), P(dst), BIG)
        best = min(plan_cost(_plan(src, dst, c), P(src), (2, 4), BIG) for c in (SLOW_FAST, FAST_SLOW))
        assert plan_cost(plan, P(src), (2, 4), BIG) <= best


def test_an_exchange_is_priced_on_the_slowest_axis_it_crosses():
    """ "S[0], R" -> "R, S[0]" is one exchange that only sends along axis 0 (axis 1 does not cut the
    source), one round per peer; "S[0], S[1]" -> "S[1], S[0]" crosses both axes."""
    t = _timing(SLOW_FAST)
    for src, dst, rounds, link in (("S[0], R", "R, S[0]", 1, SLOW_FAST.cost(0)),
                                   ("S[0], S[1]", "S[1], S[0]", 7, SLOW_FAST.cost(0))):
        (step,) = _plan(src, dst, None)
        assert step.kind == "exchange"
        nbytes = step_cost(step, P(src), (2, 4), BIG) * t.nbytes
        assert plan_cost((step,), P(src), (2, 4), BIG, t) == link.seconds(rounds, nbytes)
    fast_only = AxisCosts.parse("0=1us:100GB/s,1=10us:10GB/s")
    (step,) = _plan("S[0], R", "R, S[0]", None)
    assert plan_cost((step,), P("S[0], R"), (2, 4), BIG, _timing(fast_only)) == fast_only.cost(0).seconds(
        1, step_cost(step, P("S[0], R"), (2, 4), BIG) * t.nbytes)


def test_an_axis_cost_beyond_the_mesh_is_an_error():
    mod = redistribute_module((4,), (8, 8), "S[0]", "R")
    with PassContext(config={AXIS_COSTS_KEY: "1=1us:1GB/s"}), pytest.raises(
            DistirError, match="legalize-redistribute.axis_costs: axis cost for mesh axis 1, but the mesh has 1 axes"):
        get_pass("legalize-redistribute")(mod)
    with PassContext(config={AXIS_COSTS_KEY: "0=1us"}), pytest.raises(
            AxisCostError, match="legalize-redistribute.axis_costs: '0=1us': expected LATENCY:BANDWIDTH"):
        get_pass("legalize-redistribute")(mod)


# ---------------------------------------------------------------- numbers, specialize, analysis

CASES = [
    ((2, 4), BIG, "P, R", "R, R"),
    ((2, 4), (64, 48), "P, P", "S[0], S[1]"),
    ((2, 4), (16, 32), "S[0], S[1]", "S[1], S[0]"),
    ((2, 4), (8, 8), "R, P", "R, R"),
    ((2, W), (30, 20), "S[0], P", "S[1], R"),
    ((2, W), (16, 8), "S[1], S[0]", "S[0], R"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[2]}->{c[3]}")
def test_plans_by_time_give_the_numbers_of_one_device_and_the_planned_time(case):
    mesh_shape, shape, src, dst = case
    mod = redistribute_module(mesh_shape, shape, src, dst)
    with PassContext(config={AXIS_COSTS_KEY: SLOW_FAST}):
        local = distribute_pipeline()(mod)
    text = local.script()
    assert distir.parse(text).script() == text
    x = np.random.default_rng(1).standard_normal(shape).astype("float32")
    model = CommModel(axes=SLOW_FAST)
    for count in (1, 3, 4):
        sizes = tuple(sym.evaluate(d, {"num_workers": count}) for d in mesh_shape)
        spec = specialize(local, {"num_workers": count})
        stats = SpmdStats()
        got = run_spmd(spec, x, stats=stats)
        np.testing.assert_allclose(got, x, rtol=1e-5, atol=1e-5)  # a partial input is summed
        # specialize writes what a mesh of those constant sizes plans by time
        static_mesh = DeviceMesh(sizes, Range(0, int(np.prod(sizes))))
        plan = _plan(src, dst, SLOW_FAST, shape, static_mesh)
        with PassContext(config={AXIS_COSTS_KEY: SLOW_FAST}):
            static = distribute_pipeline()(redistribute_module(sizes, shape, src, dst))
        assert [b.value.op.name for b in spec["main"].bindings()] == [b.value.op.name for b in static["main"].bindings()]
        # the analysis' estimate of the program is the planner's time of the plan
        planned = plan_cost(plan, P(src), sizes, shape, Timing(SLOW_FAST.for_mesh(2), int(np.prod(shape)) * 4))
        assert comm_time(comm_volume(local), model, {"num_workers": count}) == pytest.approx(float(planned), rel=1e-12)
        assert comm_time(comm_volume(spec), model) == pytest.approx(float(planned), rel=1e-12)


def test_a_replan_records_its_costs_and_specialize_plans_by_time():
    """On (2, n) "S[0], S[1]" -> "S[1], R" depends on the count either way; by time with a slow axis 0,
    specialize writes at 2 an all-gather over the fast axis and an all-to-all instead of one exchange
    that crosses the slow axis with more bytes on it."""
    mod = redistribute_module((2, W), (840, 840), "S[0], S[1]", "S[1], R")
    with PassContext(config={AXIS_COSTS_KEY: "0=10us:10GB/s,1=1us:100GB/s"}):
        legal = get_pass("legalize-redistribute")(mod)
        local = distribute_pipeline()(mod)
    assert 'axis_costs="0=10us:10GB/s,1=1us:100GB/s"' in legal.script()
    assert 'R.ccl.replan(x, ' in local.script() and 'axis_costs="0=10us:10GB/s,1=1us:100GB/s"' in local.script()
    again = distir.parse(local.script())
    assert again.script() == local.script()
    by_time = [b.value.op.name for b in specialize(again, {"num_workers": 2})["main"].bindings()]
    by_bytes = [b.value.op.name for b in specialize(distribute_pipeline()(mod), {"num_workers": 2})["main"].bindings()]
    assert by_time == ["ccl.all_gather", "ccl.all_to_all"] and by_bytes == ["ccl.exchange"]
    x = np.random.default_rng(2).standard_normal((840, 840)).astype("float32")
    np.testing.assert_array_equal(run_spmd(specialize(again, {"num_workers": 2}), x), x)
    bad = local.script().replace('axis_costs="0=10us:10GB/s,1=1us:100GB/s"', 'axis_costs="0=10us:10GB/s,2=1us:1GB/s"')
    with pytest.raises(DistirError, match="axis_costs: axis cost for mesh axis 2, but the mesh has 2 axes"):
        verify(distir.parse(bad))


def test_the_analysis_prices_each_collective_on_its_axis():
    """Uniform costs give the old estimate; per-axis costs price the slow axis's all-reduce at its own
    latency and bandwidth."""
    local = distribute_pipeline()(redistribute_module((2, 4), BIG, "P, R", "R, R"))
    volume = comm_volume(local)
    (c,) = volume.collectives
    assert c.kind == "all_reduce" and c.mesh_axis == 0
    nbytes = 2 * (2 - 1) * BIG[0] * BIG[1] * 4 / 2
    assert comm_time(volume, CommModel(latency=1e-5, bandwidth=1e9)) == pytest.approx(2 * 1e-5 + nbytes / 1e9)
    assert comm_time(volume, CommModel(axes=SLOW_FAST)) == pytest.approx(2 * 10e-6 + nbytes / 10e9)
    assert comm_time(volume, CommModel(axes=FAST_SLOW)) == pytest.approx(2 * 1e-6 + nbytes / 100e9)


# ---------------------------------------------------------------- propagation


def test_propagation_prices_a_redistribute_as_the_time_of_the_plan_legalize_makes():
    mod = redistribute_module((2, 4), BIG, "P, R", "R, R")
    graph = build_graph(mod["main"])
    slot = graph.slots[0]
    timed = CostModel(graph, axis_costs=SLOW_FAST)
    plan = _plan("P, R", "R, R", SLOW_FAST)
    seconds = plan_cost(plan, P("P, R"), (2, 4), None, _timing(SLOW_FAST))
    assert timed.redistribute_cost(slot, P("P, R"), P("R, R")) == seconds * SLOW_FAST.cost(1).bandwidth
    by_bytes = CostModel(graph).redistribute_cost(slot, P("P, R"), P("R, R"))
    assert by_bytes == plan_cost(_plan("P, R", "R, R", None), P("P, R"), (2, 4)) * BIG[0] * BIG[1] * 4


def test_propagation_and_legalize_by_time_keep_the_numbers():
    """The MLP of distir.examples on a (2, n) mesh, Megatron on axis 1, which is slow: propagated and
    planned by time, the numbers equal one device, and the result's reduction (re-planned at
    specialization) carries the costs."""
    text = examples.text("mlp").replace('R.device_mesh(("num_workers",), I.Range(0, "num_workers"))',
                                        'R.device_mesh((2, "num_workers"), I.Range(0, "2 * num_workers"))')
    for old, new in (('"R"', '"R, R"'), ('"S[1]"', '"R, S[1]"'), ('"S[0]"', '"R, S[0]"')):
        text = text.replace(f"placement={old}", f"placement={new}")
    mod = distir.parse(text)
    with PassContext(config={AXIS_COSTS_KEY: "0=1us:100GB/s,1=50us:10GB/s"}):
        local = distribute_pipeline()(mod)
        stats = assert_sharded_equivalent(mod, random_inputs(mod), [1, 3, 4])
    assert 'axis_costs="0=1us:100GB/s,1=50us:10GB/s"' in local.script()
    assert stats[4].counts == {"all_reduce": 1, "all_gather": 1}


# ---------------------------------------------------------------- over random layouts

LINKS = [AxisCost(Fraction(0), Fraction(10**9)), AxisCost(Fraction(1, 10**6), Fraction(10**11)),
         AxisCost(Fraction(50, 10**6), Fraction(10**10))]


@st.composite
def timed_cases(draw):
    mesh_shape = draw(st.sampled_from([(2, W), (W, 2), (W, 3), (2, W, 2)]))
    workers = draw(st.integers(1, 4))
    sizes = tuple(sym.evaluate(d, {"num_workers": workers}) for d in mesh_shape)
    ndim = draw(st.integers(1, 2))
    shape = tuple(draw(st.sampled_from([1, 2, 3, 5, 8, 13, 64])) for _ in range(ndim))
    spec = st.one_of(st.just("R"), st.sampled_from([f"S[{d}]" for d in range(ndim)]), st.just("P"))
    src = P(", ".join(draw(spec) for _ in range(len(mesh_shape))))
    dst = P(", ".join(draw(spec) for _ in range(len(mesh_shape))))
    costs = AxisCosts(tuple((a, draw(st.sampled_from(LINKS))) for a in range(len(mesh_shape))))
    return mesh_shape, workers, sizes, shape, src, dst, costs


def _timed(mesh_shape, workers: int, shape, src, dst, costs: AxisCosts):
    """The redistribute legalized by time with the mesh symbolic, lowered, specialized to ``workers``
    and simulated (its numbers must equal the input): (lowered, specialized, simulator stats)."""
    mod = redistribute_module(mesh_shape, shape, src, dst)
    with PassContext(config={AXIS_COSTS_KEY: costs}):  # legalized as written (propagation would reduce a partial result)
        local = get_pass("lower-global-view-to-local-view")(get_pass("legalize-redistribute")(mod))
    spec = specialize(local, {"num_workers": workers})
    x = np.random.default_rng(3).standard_normal(shape).astype("float32")
    stats = SpmdStats()
    np.testing.assert_allclose(run_spmd(spec, x, stats=stats), x, rtol=1e-5, atol=1e-5)
    return local, spec, stats


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timed_cases())
def test_plans_by_time_are_exact_and_the_analysis_times_what_runs(case):
    """Random layouts (partials, uneven sizes) on 2-D and 3-D meshes with random axis costs,
    planned by time with n symbolic, specialized: the numbers equal the input, the analysis counts
    the simulator's bytes, and its time is the same from the symbolic and the specialized module."""
    mesh_shape, workers, sizes, shape, src, dst, costs = case
    local, spec, stats = _timed(mesh_shape, workers, shape, src, dst, costs)
    numbers = comm_volume(local).evaluate({"num_workers": workers})
    assert numbers.total_bytes == stats.total_bytes
    model = CommModel(axes=costs)
    assert comm_time(comm_volume(local), model, {"num_workers": workers}) == pytest.approx(
        comm_time(comm_volume(spec), model), rel=1e-9, abs=1e-15)


@st.composite
def small_timed_cases(draw):
    """Small meshes and a few shapes (uneven ones too): the oracle prices every step out of every
    layout once per mesh sizes and shape."""
    mesh_shape, counts = draw(st.sampled_from([((2, W), (1, 2)), ((W, 3), (1, 2)), ((2, W, 2), (1,))]))
    workers = draw(st.sampled_from(counts))
    sizes = tuple(sym.evaluate(d, {"num_workers": workers}) for d in mesh_shape)
    shape = draw(st.sampled_from([(5,), (64,)] + ([(3, 13)] if len(mesh_shape) == 2 else [])))
    spec = st.one_of(st.just("R"), st.sampled_from([f"S[{d}]" for d in range(len(shape))]), st.just("P"))
    src = P(", ".join(draw(spec) for _ in range(len(mesh_shape))))
    dst = P(", ".join(draw(spec) for _ in range(len(mesh_shape))))
    costs = AxisCosts(tuple((a, draw(st.sampled_from(LINKS))) for a in range(len(mesh_shape))))
    return mesh_shape, workers, sizes, shape, src, dst, costs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_timed_cases())
def test_plans_by_time_take_no_longer_than_any_sequence_of_three_steps(case):
    """The program legalized by time (re-planned where the plan made for every count is not the
    fastest at a count) takes, by the analysis' estimate, no longer than the fastest sequence of up to
    three steps (:mod:`plan_oracle`: each step run on the simulator, its bytes timed on its axis), and
    as long where it has at most three steps."""
    mesh_shape, workers, sizes, shape, src, dst, costs = case
    _, spec, _ = _timed(mesh_shape, workers, shape, src, dst, costs)
    took = comm_time(comm_volume(spec), CommModel(axes=costs))
    best = least(sizes, shape, src, dst, costs.for_mesh(len(mesh_shape)), itemsize=4)
    case = (str(src), str(dst), sizes, shape, str(costs))
    if best is not None:
        assert took <= float(best[0]) * (1 + 1e-9) + 1e-15, (case, took, best)
    if sum(b.value.op.name.startswith("ccl.") for b in spec["main"].bindings()) <= MAX_STEPS:
        assert best is not None and took == pytest.approx(float(best[0]), rel=1e-9, abs=1e-15), (case, took, best)
