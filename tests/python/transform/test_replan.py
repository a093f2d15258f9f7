"""Re-planning at specialization: a redistribute (or a reshape chain) whose cheapest steps depend on
the device count is written ``R.dist.replan`` on a mesh of symbolic sizes, and specialize writes the
plan for the count it binds: the same bytes as a mesh of constant sizes plans, numbers equal to one
device, and analysis formulas exact at every count."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.analysis import comm_volume, memory_footprint
from distir.errors import DistirError
from distir.ir import Placement, assert_structural_equal, sym
from distir.ir.types import dtype_bytes
from distir.runtime import run
from distir.runtime.spmd import SpmdStats, run_spmd
from distir.transform import get_pass
from distir.transform.legalize_redistribute import expand_replans
from distir.transform.pipelines import distribute_pipeline
from distir.transform.redistribute_plan import (
    is_optimal_everywhere,
    optimal_cost,
    plan_cost,
    plan_redistribute,
)
from distir.transform.specialize import specialize
from helpers import redistribute_module

W = sym.var("num_workers")
P = Placement.parse


def _uniform(local):
    """The local view with every replan written as the plan made for every count (as before re-planning)."""
    return local.replace(functions={k: expand_replans(f, exact_only=False) for k, f in local.functions.items()})


def _static(mesh_shape, sizes):
    return tuple(s if isinstance(s, int) else sizes[i] for i, s in enumerate(mesh_shape))


def _simulate(local, x, count):
    stats = SpmdStats()
    got = run_spmd(specialize(local, {"num_workers": count}), x, stats=stats)
    return got, stats


# ---------------------------------------------------------------- N-D transitions with no plan best at every count


# (mesh, shape, source, target): transitions whose plan made for every count is not the cheapest at
# some count (blocks that do not divide, or a symbolic axis of size 1, which cuts nothing)
ND = [
    ((2, W), (16, 32), "R, S[0]", "S[1], S[1]"),
    ((2, W, 2), (16, 8), "R, R, P", "R, S[0], S[0]"),
    ((2, W), (840, 840), "R, P", "R, R"),
]


@pytest.mark.parametrize("case", ND, ids=lambda c: f"{c[2]}->{c[3]}")
def test_nd_transitions_move_the_optimum_at_every_count(case):
    mesh_shape, shape, src, dst = case
    mod = redistribute_module(mesh_shape, shape, src, dst)
    local = distribute_pipeline()(mod)
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    nbytes = int(np.prod(shape)) * 4
    volume = comm_volume(local)
    beaten = 0
    for count in range(1, 9):
        sizes = tuple(sym.evaluate(d, {"num_workers": count}) for d in mesh_shape)
        got, stats = _simulate(local, x, count)
        np.testing.assert_allclose(got, x, rtol=1e-5, atol=1e-6)  # a partial input is summed
        best = optimal_cost(sizes, len(shape), P(src), P(dst), shape)
        assert stats.bytes_per_worker == best * nbytes, (count, stats.summary())
        # the same bytes as the program planned on a mesh of constant sizes
        static = SpmdStats()
        run_spmd(distribute_pipeline()(redistribute_module(sizes, shape, src, dst)), x, stats=static)
        assert static.total_bytes == stats.total_bytes
        # the symbolic module's analysis gives the specialized module's numbers
        numbers = volume.evaluate({"num_workers": count})
        assert (numbers.total_bytes, numbers.counts) == (stats.total_bytes, dict(stats.counts))
        _, uniform = _simulate(_uniform(local), x, count)
        assert stats.total_bytes <= uniform.total_bytes
        beaten += stats.total_bytes < uniform.total_bytes
    assert beaten, "the plan made for every count was the cheapest at every count: not a case for re-planning"


def test_a_symbolic_axis_specialized_to_one_gets_its_own_plan():
    """On (2, n), "R, P" -> "R, R" is planned for every count as local_shard, all_reduce, all_gather
    (half the tensor reduced per row of the mesh); at n = 1 the partial axis holds one value, and the
    plan for that count moves nothing. Where the plan made for every count is the optimum at every count
    up to 8, it is written out as before."""
    from distir.ir import DeviceMesh, Range

    mesh = DeviceMesh((2, W), Range(0, 2 * W))
    assert is_optimal_everywhere(mesh, 2, P("R, P"), P("R, R"))  # among counts >= 2
    mod = redistribute_module((2, W), (840, 840), "R, P", "R, R")
    assert 'R.dist.replan(x, placement="R, R",' in get_pass("legalize-redistribute")(mod).script()
    assert [b.value.op.name for b in specialize(distribute_pipeline()(mod), {"num_workers": 1})["main"].bindings()] == []
    text = get_pass("legalize-redistribute")(redistribute_module((2, W), (48, 840), "S[0], S[1]", "S[0], R")).script()
    assert "R.dist.all_gather(x, mesh_axis=1)" in text and "replan" not in text


# ---------------------------------------------------------------- analysis, memory, text


def test_analysis_is_exact_past_the_counts_legalize_compared():
    """The formula is a function of the sizes that plans there: exact at 9 .. 13 too (legalize compares
    plans at counts up to 8 only, but the bytes of what specialize writes are counted at any count)."""
    local = distribute_pipeline()(redistribute_module((W,), (10, 6), "S[0]", "S[1]"))
    volume = comm_volume(local)
    assert "replan_bytes_" in sym.to_str(volume.total_bytes)
    assert volume.counts == {"replan": 1}
    x = np.arange(60, dtype="float32").reshape(10, 6)
    for count in (1, 2, 3, 4, 7, 9, 10, 13):
        got, stats = _simulate(local, x, count)
        np.testing.assert_array_equal(got, x)
        numbers = volume.evaluate({"num_workers": count})
        assert numbers.total_bytes == stats.total_bytes and numbers.counts == dict(stats.counts)
        assert numbers.bytes_by_kind == dict(stats.bytes_by_kind)
        spec = specialize(local, {"num_workers": count})
        mem = memory_footprint(local).evaluate({"num_workers": count})
        direct = memory_footprint(spec).evaluate()
        assert (mem.param_bytes, mem.peak_bytes) == (direct.param_bytes, direct.peak_bytes)


def test_time_formula_counts_the_rounds_of_the_steps_written():
    from distir.analysis import CommModel, comm_time

    local = distribute_pipeline()(redistribute_module((W,), (10, 16), "S[0]", "R"))
    model = CommModel(latency=1e-3, bandwidth=1e6)
    for count in (3, 4):
        spec = specialize(local, {"num_workers": count})
        assert comm_time(comm_volume(local), model, {"num_workers": count}) == pytest.approx(
            comm_time(comm_volume(spec), model, {})
        )


MERGE = '''
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})

    @R.function
    def main(x: R.DTensor((8, 6, 16), "float32", "mesh[0]", "S[1]")):
        with R.dataflow():
            r = R.reshape(x, R.shape([8, 96]))
            y = R.dist.annotate_sharding(r, device_mesh="mesh[0]", placement="S[1]")
            R.output(y)
        return y
'''


def test_a_reshape_that_re_blocks_at_some_counts_is_planned_at_specialization():
    """Merging 6 heads cut over 4 re-blocks them (blocks of 2 heads are not blocks of 24 columns): a
    mesh of 4 writes a block exchange. Symbolically the reshape becomes one replan; specialize writes
    the exchange at 4 and 5 (where it re-blocks) and the reshape alone where the count divides."""
    mod = distir.parse(MERGE)
    legalized = get_pass("legalize-redistribute")(get_pass("propagate-sharding")(mod))
    assert 'R.dist.replan(x, placement="S[1]", shape=[8, 96], mid=None, reshaped="S[1]", axis_costs=None)' in legalized.script()
    local = distribute_pipeline()(mod)
    x = np.random.default_rng(3).standard_normal((8, 6, 16)).astype("float32")
    expected = run(mod, x)
    for count in range(1, 9):
        got, stats = _simulate(local, x, count)
        np.testing.assert_allclose(got, expected, rtol=1e-6)
        fixed = MERGE.replace('("num_workers",), I.Range(0, "num_workers")', f"({count},), I.Range(0, {count})")
        static = SpmdStats()
        run_spmd(distribute_pipeline()(distir.parse(fixed)), x, stats=static)
        assert (stats.total_bytes, dict(stats.counts)) == (static.total_bytes, dict(static.counts)), count
        assert set(stats.counts) <= {"exchange"}
        assert comm_volume(local).evaluate({"num_workers": count}).total_bytes == stats.total_bytes
    assert _simulate(local, x, 4)[1].counts == {"exchange": 1}
    assert _simulate(local, x, 3)[1].counts == {}
    # the plan made for every count re-blocks at 4: 8x the bound
    assert _simulate(_uniform(local), x, 4)[1].counts == {"regroup": 1}


def test_replan_prints_and_parses_back():
    mod = distir.parse(MERGE)
    for stage in (get_pass("legalize-redistribute")(get_pass("propagate-sharding")(mod)), distribute_pipeline()(mod)):
        text = stage.script()
        assert "replan(" in text
        again = distir.parse(text)
        assert_structural_equal(again, stage)
        assert again.script() == text


def test_an_unspecialized_replan_is_refused_by_the_simulator():
    local = distribute_pipeline()(redistribute_module((W,), (10, 16), "S[0]", "R"))
    # the mesh bound by hand, the replan left in place: the simulator says to specialize
    text = local.script().replace('("num_workers",), I.Range(0, "num_workers")', "(4,), I.Range(0, 4)")
    text = text.replace('"T.ceildiv(10, num_workers)"', "3").replace("        num_workers = T.int64()\n", "")
    assert "R.ccl.replan" in text
    with pytest.raises(DistirError, match="run specialize"):
        run_spmd(distir.parse(text), np.zeros((10, 16), "float32"))
    # specialize writes its steps even when it has nothing left to bind
    assert [b.value.op.name for b in specialize(distir.parse(text), {})["main"].bindings()] == ["ccl.exchange"]


def test_specialize_writes_the_plan_planned_for_the_count():
    local = distribute_pipeline()(redistribute_module((W,), (10, 16), "S[0]", "R"))
    for count, kinds in ((1, []), (2, ["ccl.all_gather"]), (4, ["ccl.exchange"]), (5, ["ccl.all_gather"])):
        assert [b.value.op.name for b in specialize(local, {"num_workers": count})["main"].bindings()] == kinds
    mesh = redistribute_module((W,), (10, 16), "S[0]", "R").meshes()[0]
    plan = plan_redistribute(mesh, 2, P("S[0]"), P("R"))
    assert [s.kind for s in plan] == ["all_gather"]
    # at 4 the padded all-gather of the plan made for every count sends 576 B per worker, the exchange 480
    assert plan_cost(plan, P("S[0]"), (4,), (10, 16)) * 160 * dtype_bytes("float32") == 576
    assert optimal_cost((4,), 2, P("S[0]"), P("R"), (10, 16)) * 160 * dtype_bytes("float32") == 480


# ---------------------------------------------------------------- TVM


@pytest.mark.parametrize("count", [3, 4])
def test_disco_runs_the_plan_for_the_count_and_the_symbolic_export_the_plan_for_every_count(count):
    from distir.driver import run_disco
    from distir.tvm import specialize_and_build, to_relax

    local = distribute_pipeline()(redistribute_module((W,), (10, 16), "S[0]", "R"))
    x = np.random.default_rng(4).standard_normal((10, 16)).astype("float32")
    # exported after specialize: the re-planned exchange, the simulator's bytes
    spec = specialize(local, {"num_workers": count})
    stats: dict = {}
    got = run_disco(specialize_and_build(to_relax(spec), {}), spec, x, num_workers=count, stats=stats)
    np.testing.assert_array_equal(got, x)
    sim = SpmdStats()
    run_spmd(spec, x, stats=sim)
    assert stats["calls"] == dict(sim.counts) and stats["bytes_sent"] == sim.total_bytes
    # a symbolic export binds the count in TVM: it runs the plan made for every count (a padded all-gather)
    stats = {}
    got = run_disco(specialize_and_build(to_relax(local), {"num_workers": count}), local, x, num_workers=count,
                    stats=stats)
    np.testing.assert_array_equal(got, x)
    assert stats["calls"] == {"all_gather": 1} and stats["transport"]["calls"] == {"allgather": 1}
