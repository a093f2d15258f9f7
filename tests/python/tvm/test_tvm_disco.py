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
    on_disco = driver.run(inputs, workers, backend="tvm")
    assert on_disco.ok, on_disco.comparison.mismatch
    assert on_disco.disco["num_workers"] == workers == on_disco.workers
    # the steps are named and counted as the simulator names and counts them, and Disco's own
    # collectives (ring all-reduce, all-gather) move exactly those bytes
    on_sim = driver.run(inputs, workers)
    sim = on_sim.stats
    assert on_disco.disco["calls"] == sim.counts
    assert on_disco.disco["bytes_sent"] == on_disco.disco["transport"]["bytes_sent"] == sim.total_bytes
    assert on_disco.summary() == on_sim.summary()  # one line, word for word: names, bytes, per worker
    if workers == 1:  # one device communicates nothing
        assert on_disco.summary().startswith("1 worker: no collectives; 0 bytes")


@pytest.mark.parametrize("workers", (1, 3))
def test_moe_expert_parallel_summary_is_one_line_on_both_backends(workers):
    # without size hints the experts' layouts are re-planned per count: Disco's steps are those of the
    # module specialized to the count (an exchange at 3), not of the symbolic module (an all-gather)
    from distir.transform import ShardParams
    from distir.tvm import from_nn
    from distir.tvm import nn_moe as M

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
    else:  # what the simulator ran: the exchange its step kind prices
        assert "exchange" in on_sim.stats.counts


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
