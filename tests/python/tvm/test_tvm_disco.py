"""Run on TVM's Disco: one symbolic export per model, then per device count BindSymbolicVars,
tvm.compile and a run on a ThreadedSession, equal to the single-device interpreter."""

from __future__ import annotations

import numpy as np
import pytest
import tvm

import distir
from distir import examples
from distir.driver import Driver, compare, random_inputs, run_disco
from distir.ir import (
    DeviceMesh,
    Range,
    sym,
)
from distir.runtime import run
from distir.transform import Sequential, get_pass
from distir.transform.pipelines import distribute_pipeline
from distir.tvm import DiscoRunError, specialize_and_build, to_relax
from helpers import redistribute_module

W = sym.var("num_workers")
COUNTS = (1, 2, 4)
MODEL_COUNTS = (1, 2, 3, 4)  # 3: sizes that do not divide (the Llama's heads re-blocked by regroup)


def assert_matches(got, expected, rtol=1e-5, atol=1e-5):
    """Tight: rtol 1e-5 and an absolute 1e-5 of the largest expected magnitude (float32 sums)."""
    c = compare(got, expected, rtol, atol)
    assert c.ok, c.mismatch


@pytest.fixture(scope="module", params=["mlp", "attention", "llama"])
def model(request):
    """(a driver of the model, which exports it once, and its inputs)."""
    mod = examples.load(request.param)
    return Driver(mod), random_inputs(mod, seed=7)


@pytest.mark.parametrize("workers", MODEL_COUNTS)
def test_models_on_disco_equal_the_single_device_run(model, workers):
    driver, inputs = model
    on_disco = driver.run(inputs, workers, backend="tvm", specialize=False)  # the one build for every count
    specialized = driver.run(inputs, workers, backend="tvm")  # the default: built for this count
    on_sim = driver.run(inputs, workers)
    sim = on_sim.stats
    for r in (on_disco, specialized):
        assert r.ok, r.comparison.mismatch
        assert r.disco["num_workers"] == workers == r.workers
        # the steps are named and counted as the simulator names and counts them (the program at this count)
        assert r.disco["calls"] == sim.counts and r.disco["bytes_sent"] == sim.total_bytes
        assert r.summary() == on_sim.summary()  # one line, word for word: names, bytes, per worker
        if workers == 1:  # one device communicates nothing
            assert r.summary().startswith("1 worker: no collectives; 0 bytes")
    assert (on_disco.disco["build"], specialized.disco["build"]) == ("symbolic", "specialized")
    # Disco's own collectives (ring all-reduce, all-gather) move exactly those bytes, in either build: the
    # one build chooses at run time what the count's program runs (a re-blocking that agrees moves nothing)
    assert specialized.disco["transport"]["bytes_sent"] == sim.total_bytes
    assert on_disco.disco["transport"]["bytes_sent"] == sim.total_bytes



@pytest.mark.parametrize("workers", (1, 3))
def test_moe_expert_parallel_summary_is_one_line_on_both_backends(workers):
    # without size hints the layouts are planned for the default counts (1-8): at 3 workers the 4
    # experts stay cut (the 1-4 class's variant) and the one step is the output's all-reduce, as on a
    # static mesh of 3; Disco's steps are those of the module specialized to the count
    from distir.transform import ShardParams
    from distir.tvm import from_nn
    from distir.examples.nn import moe as M

    config = M.MoEConfig()
    model = M.MoE(config)
    weights = M.random_weights(model)
    x = np.random.default_rng(6).standard_normal((6, config.hidden_size)).astype("float32")
    d = Driver(ShardParams(M.EP_PLAN)(from_nn(model, M.spec(config))), func="forward")
    on_sim = d.run([x], workers, weights=weights)
    on_disco = d.run([x], workers, weights=weights, backend="tvm")
    assert on_sim.ok and on_disco.ok
    assert on_disco.summary() == on_sim.summary()
    assert on_disco.disco["calls"] == on_sim.stats.counts and on_disco.disco["bytes_sent"] == on_sim.stats.total_bytes
    if workers == 1:
        assert on_sim.summary() == "1 worker: no collectives; 0 bytes sent per worker (0 in all)"
    else:  # expert parallel: one all-reduce, no expert gathered
        assert on_sim.stats.counts == {"all_reduce": 1}


def test_disco_reports_the_steps_of_the_plan_it_ran_at_the_count():
    """``R, P`` -> ``R, R`` on a ``(2, num_workers)`` mesh is re-planned per count: the plan made for
    every count (all_gather + all_reduce) is not what runs at 1 (nothing) or 2 (one all_reduce).
    Disco's numbers, in the build specialized to the count and in the one build (which dispatches on the
    count), are those of the count's program, equal to the simulator's and to the bytes Disco's own
    collectives moved."""
    from distir.analysis import comm_volume
    from distir.tvm.relax.export import with_plans

    driver = Driver(redistribute_module((2, W), (12, 12), "R, P", "R, R"))
    x = np.arange(144, dtype="float32").reshape(12, 12)
    general = comm_volume(with_plans(driver.local))
    for workers, steps in ((1, {}), (2, {"all_reduce": 1})):
        on_sim = driver.run([x], workers)
        assert on_sim.ok and on_sim.stats.counts == steps  # the case is what it claims: the general plan differs
        assert dict(general.evaluate({"num_workers": workers}).counts) == {"all_gather": 1, "all_reduce": 1}
        for specialize in (True, False):
            on_disco = driver.run([x], workers, backend="tvm", specialize=specialize)
            assert on_disco.ok and on_disco.disco["calls"] == steps
            assert on_disco.disco["bytes_sent"] == on_sim.stats.total_bytes == on_disco.disco["transport"]["bytes_sent"]
            assert on_disco.summary() == on_sim.summary()
    assert on_disco.disco["transport"]["bytes_sent"] == 2 * 2 * (12 * 12 * 4)  # a ring all_reduce per group of 2


def _one_build_cases():
    """(name, driver, inputs): the bundled Llama (re-blockings that agree where the count divides 8 heads),
    the GPT-2 block, and an uneven S[0] -> R of 13 rows (re-planned: a padded gather or an exchange)."""
    llama = examples.load("llama")
    yield "llama", Driver(llama), random_inputs(llama, dims={"s": 8}, seed=3)
    gpt2 = examples.load("gpt2")
    yield "gpt2", Driver(gpt2, func="forward"), random_inputs(gpt2, "forward", {"b": 2, "s": 8}, seed=3)
    uneven = redistribute_module((W,), (13, 6), "S[0]", "R")
    yield "uneven", Driver(uneven), [np.arange(78, dtype="float32").reshape(13, 6)]


@pytest.mark.parametrize("case", list(_one_build_cases()), ids=lambda c: c[0])
def test_one_build_moves_the_bytes_of_each_count_program(case):
    """ONE symbolic build, run at 1..8 workers: Disco's collectives carry exactly the bytes they carry in the
    build specialized to each count, the steps reported are the simulator's on the program specialized
    to the count (an independent count: numpy on the specialized module), and the result matches one
    device. Where every step is one of Disco's own collectives (no block exchange, which Disco runs as an
    allgather) the bytes carried are the simulator's too."""
    name, driver, inputs = case
    built = driver.build(specialize=False)
    for workers in range(1, 9):
        r = driver.run(inputs, workers, backend="tvm", specialize=False)
        sim = driver.run(inputs, workers).stats
        assert r.ok, (workers, r.comparison.mismatch)
        assert r.disco["build"] == "symbolic" and driver.build(specialize=False) is built
        per_count = driver.run(inputs, workers, backend="tvm", specialize=True)
        assert r.disco["transport"]["bytes_sent"] == per_count.disco["transport"]["bytes_sent"], workers
        if workers > 1:  # at 1 the symbolic program still calls Disco's collectives on one worker (0 bytes)
            assert r.disco["transport"]["calls"] == per_count.disco["transport"]["calls"], workers
        assert (r.disco["calls"], r.disco["bytes_sent"]) == (sim.counts, sim.total_bytes), workers
        if name != "uneven":
            assert r.disco["transport"]["bytes_sent"] == sim.total_bytes, workers
    if name == "uneven":  # the case is what it claims: re-planned per count, an exchange at some
        assert "exchange" in sim.counts or any("exchange" in driver.run(inputs, w).stats.counts for w in range(2, 9))


STATIC_BESIDE_SYMBOLIC = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers")),
                                    R.device_mesh((2,), I.Range(0, 2))]})

    @R.function
    def main(p1: R.DTensor((2, 3), "float32", "mesh[1]", "R"), p2: R.DTensor((2, 3), "float32", "mesh[1]", "P[min]")):
        with R.dataflow():
            v2 = R.concat((p1, p2), axis=1)
            R.output(v2)
        return v2
"""


def test_a_collective_on_a_static_mesh_beside_a_symbolic_one_exports_symbolically():
    """The session has max(num_workers, 2) workers; the all-reduce on the static mesh gathers from
    all of them, so the function takes num_workers although none of its types names it (the
    export used to fail: Var num_workers is not defined). One symbolic build, exact at every count."""
    local = distribute_pipeline()(distir.parse(STATIC_BESIDE_SYMBOLIC))
    built = specialize_and_build(to_relax(local), {})
    rng = np.random.default_rng(1)
    p1, p2 = rng.integers(-50, 50, (2, 2, 3)).astype("float32")
    for workers in (1, 2, 3):
        stats: dict = {}
        got = run_disco(built, local, p1, p2, num_workers=workers, seed=workers, stats=stats)
        np.testing.assert_array_equal(got, np.concatenate([p1, p2], axis=1))  # the parts' min is p2
        assert stats["num_workers"] == max(workers, 2) and stats["calls"] == {"all_reduce": 1}


LISTED_BESIDE_SYMBOLIC = """
@I.ir_module
class Module:
    I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers")),
                                    R.device_mesh((2, 2), [3, 2, 1, 4])]})

    @R.function
    def main(p1: R.DTensor((4, 6), "float32", "mesh[1]", "S[0], S[1]")):
        with R.dataflow():
            v1 = R.dist.redistribute(p1, device_mesh="mesh[1]", placement="S[1], R")
            v2 = R.dist.redistribute(v1, device_mesh="mesh[0]", placement="S[0]")
            R.output(v2)
        return v2
"""


def test_a_mesh_listed_out_of_order_beside_a_symbolic_one_exports_symbolically():
    """Each worker's position in a listed mesh is looked up in a table by worker id; the table was
    as long as the session, max(num_workers, 5) here, and the symbolic export crashed on it. One
    symbolic build, exact with fewer workers than the listed mesh's ids and with more."""
    local = distribute_pipeline()(distir.parse(LISTED_BESIDE_SYMBOLIC))
    built = specialize_and_build(to_relax(local), {})
    x = np.arange(24, dtype="float32").reshape(4, 6)
    for workers in (1, 4, 5, 7):
        stats: dict = {}
        np.testing.assert_array_equal(run_disco(built, local, x, num_workers=workers, stats=stats), x)
        assert stats["num_workers"] == max(workers, 5)


LEGALIZE_AND_LOWER = ("legalize-redistribute", "canonicalize", "lower-global-view-to-local-view")

ONE_D = DeviceMesh((W,), Range(0, W))
TWO_BY_W = DeviceMesh((2, W), Range(0, 2 * W))  # axis 1: contiguous groups (Disco's in_group)
W_BY_TWO = DeviceMesh((W, 2), Range(0, 2 * W))  # axis 0: strided groups (gathered, then taken)
STAGE_0 = ONE_D
STAGE_1 = DeviceMesh((W,), Range(W, 2 * W))

TRANSITIONS = [
    (ONE_D, "S[0]", "R", None),  # all-gather
    (ONE_D, "S[1]", "R", None),  # all-gather on axis 1
    (ONE_D, "P", "R", None),  # all-reduce
    (ONE_D, "P[max]", "R", None),
    (ONE_D, "P[avg]", "S[0]", None),  # reduce-scatter
    (ONE_D, "S[0]", "S[1]", None),  # all-to-all
    (ONE_D, "R", "S[1]", None),  # worker-indexed slice
    (ONE_D, "R", "P", None),  # local partial
    (TWO_BY_W, "S[0], R", "R, S[0]", None),
    (TWO_BY_W, "P, P", "R, S[1]", None),
    (W_BY_TWO, "S[1], S[0]", "R, R", None),
    (W_BY_TWO, "P, R", "S[0], P", None),
    (STAGE_0, "S[0]", "S[1]", STAGE_1),  # between pipeline stages
    (STAGE_0, "P", "P", STAGE_1),  # a partial value: an aligned copy
]


@pytest.mark.parametrize("case", TRANSITIONS, ids=lambda c: f"{c[0].shape_str()}:{c[1]}->{c[2]}" + ("@1" if c[3] else ""))
def test_every_kind_of_redistribution_runs_on_disco(case):
    mesh, src, dst, dst_mesh = case
    local = Sequential([get_pass(n) for n in LEGALIZE_AND_LOWER])(redistribute_module(mesh, (8, 8), src, dst, dst_mesh=dst_mesh))
    exported = to_relax(local)
    x = np.random.default_rng(3).standard_normal((8, 8)).astype("float32")
    for workers in (1, 2) if mesh.ndim == 2 or dst_mesh is not None else COUNTS:
        got = run_disco(specialize_and_build(exported, {"num_workers": workers}), local, x, num_workers=workers, seed=5)
        np.testing.assert_allclose(got, x, rtol=1e-6, atol=1e-6)


def test_session_groups_follow_the_mesh():
    local = Sequential([get_pass(n) for n in LEGALIZE_AND_LOWER])(redistribute_module(TWO_BY_W, (8, 8), "R, S[0]", "R, R"))
    stats: dict = {}
    x = np.arange(64, dtype="float32").reshape(8, 8)
    got = run_disco(specialize_and_build(to_relax(local), {"num_workers": 4}), local, x, num_workers=4, stats=stats)
    np.testing.assert_array_equal(got, x)
    assert (stats["num_workers"], stats["num_groups"]) == (8, 2)
    assert stats["calls"] == {"all_gather": 1}  # distir's step, as the simulator names it
    assert stats["transport"]["calls"] == {"allgather": 2}  # Disco's: one per group of 4


@pytest.fixture(scope="module")
def mlp():
    mod = examples.load("mlp")
    local = distribute_pipeline()(mod)
    return mod, local, to_relax(local), random_inputs(mod, seed=0)


def test_one_symbolic_build_runs_at_every_count(mlp, monkeypatch):
    """Not binding at all: num_workers is passed at run time (a size parameter of the build); its
    shared library is written once for all the runs."""
    mod, local, exported, inputs = mlp
    built = tvm.compile(exported, target="llvm")  # LLVM's default optimization here, as users build
    written = []
    export = built.export_library
    monkeypatch.setattr(built, "export_library", lambda path, **kw: (written.append(path), export(path, **kw)))
    expected = run(mod, *inputs)
    for workers in COUNTS:
        assert_matches(run_disco(built, local, *inputs, num_workers=workers), expected)
    assert len(written) == 1


def test_a_build_for_other_sizes_is_refused_before_running(mlp):
    _, local, exported, inputs = mlp
    built = specialize_and_build(exported, {"num_workers": 2})
    with pytest.raises(DiscoRunError, match="specialized for other sizes than num_workers=4"):
        run_disco(built, local, *inputs, num_workers=4)


def test_wrong_inputs_are_refused_before_running(mlp):
    _, local, exported, inputs = mlp
    built = specialize_and_build(exported, {"num_workers": 2})
    with pytest.raises(DiscoRunError, match="input 'w1': expected dtype float32, got float64"):
        run_disco(built, local, inputs[0], inputs[1].astype("float64"), inputs[2], num_workers=2)
    with pytest.raises(DiscoRunError, match="expected size 256"):
        run_disco(built, local, inputs[0][:, :128], inputs[1], inputs[2], num_workers=2)
    with pytest.raises(DiscoRunError, match="takes 3 inputs"):
        run_disco(built, local, *inputs[:2], num_workers=2)


def test_a_module_built_from_another_export_is_refused(mlp):
    _, local, _, inputs = mlp
    other = distribute_pipeline()(distir.parse(examples.text("attention")))
    built = specialize_and_build(to_relax(other), {"num_workers": 2})
    with pytest.raises(DiscoRunError, match="do not fit the distir function"):
        run_disco(built, local, *inputs, num_workers=2)


def test_the_build_target_follows_distir_llvm_opt_level(monkeypatch):
    from distir.tvm.errors import TargetError
    from distir.tvm.targets import OPT_LEVEL_ENV, default_target, parse_target

    monkeypatch.delenv(OPT_LEVEL_ENV, raising=False)
    assert str(default_target().kind.name) == "llvm" and "opt-level" not in default_target().attrs
    monkeypatch.setenv(OPT_LEVEL_ENV, "2")
    assert int(default_target().attrs["opt-level"]) == 2
    assert int(parse_target("llvm").attrs["opt-level"]) == 2  # "llvm", the default target, is it
    monkeypatch.setenv(OPT_LEVEL_ENV, "fast")
    with pytest.raises(TargetError, match=r"DISTIR_LLVM_OPT_LEVEL='fast': expected an LLVM optimization level, 0 to 3"):
        default_target()
