"""The driver (distir.driver): one pipeline run, a specialization and a run per count, one
comparison; and the simulator it runs, which is the interpreter's plan per worker."""

from __future__ import annotations

import numpy as np
import pytest

from distir import examples
from distir.driver import Driver, compare, random_inputs
from distir.errors import DistirError
from distir.ir import get_op
from distir.runtime.spmd import SpmdError, run_spmd
from distir.transform.pipelines import distribute_pipeline
from helpers import redistribute_module


class CountingPipeline:
    def __init__(self):
        self.runs = 0
        self.inner = distribute_pipeline()

    def __call__(self, mod):
        self.runs += 1
        return self.inner(mod)


def test_one_pipeline_run_serves_every_count():
    mod = examples.load("mlp")
    pipeline = CountingPipeline()
    d = Driver(mod, pipeline=pipeline)
    assert pipeline.runs == 0  # nothing runs before it is asked for
    inputs = random_inputs(mod, seed=3)
    results = d.run_counts(inputs, (1, 2, 4))
    assert pipeline.runs == 1 and d.pipeline_seconds > 0
    for w, r in results.items():
        assert r.ok and r.max_diff < 1e-3 and r.comparison.mismatch is None
        assert r.values == {"num_workers": w} and r.workers == w and r.stats.simulated == w
        assert set(r.timings) == {"specialize", "run"}
        np.testing.assert_allclose(r.outputs, d.reference(inputs), rtol=1e-5, atol=1e-4)
    assert d.specialize(2) is d.specialize(2)  # cached
    r3 = d.run(inputs, 3)  # 512 hidden over 3 workers: uneven blocks, the same pipeline run
    assert r3.ok and pipeline.runs == 1
    with pytest.raises(DistirError, match="unknown backend 'gpu'"):
        d.run(inputs, 2, backend="gpu")


def test_a_wrong_result_is_reported_not_raised(monkeypatch):
    mod = examples.load("mlp")
    inputs = random_inputs(mod, seed=1)
    d = Driver(mod)
    d.reference(inputs)  # the single-device run, before the op goes wrong
    gelu = get_op("nn.gelu")
    monkeypatch.setattr(gelu, "numpy", lambda xs, attrs, ctx: xs[0])  # the simulator's plans are new: they see it
    r = d.run(inputs, 2)
    assert not r.ok and r.comparison.mismatch.startswith("output 0 differs from the single-device result")


def test_compare_relative_and_absolute_tolerances():
    e = np.full((3,), 100.0, "float32")
    assert compare(e + 0.05, e, rtol=0, atol=1e-3).ok  # 1e-3 of the largest magnitude, 100
    assert not compare(e + 0.05, e, rtol=0, atol=1e-3, absolute_atol=True).ok
    c = compare((e, e), (e,))
    assert not c.ok and c.mismatch == "2 outputs, expected 1"
    c = compare(e[:2], e)
    assert c.max_diff == float("inf") and c.mismatch == "output 0 has shape (2,), expected (3,)"
    assert compare(np.array([True, False]), np.array([True, True])).max_diff == 1.0


def test_another_mesh_size_is_fixed_by_bind():
    mod = redistribute_module(("dp", "num_workers"), (8, 8), "S[0], S[1]", "R, R")
    x = np.arange(64, dtype="float32").reshape(8, 8)
    d = Driver(mod, bind={"dp": 2})
    r = d.run([x], 2)
    assert r.ok and r.values == {"num_workers": 2} and r.workers == 4
    assert r.stats.counts == {"all_gather": 2}


# ---------------------------------------------------------------- the simulator behind it


def _count_calls(monkeypatch, name: str) -> list:
    op, calls = get_op(name), []
    original = op.numpy

    def counted(xs, attrs, ctx):
        calls.append(ctx.values["worker_id"])
        return original(xs, attrs, ctx)

    monkeypatch.setattr(op, "numpy", counted)
    return calls


@pytest.mark.parametrize("layout, computed_on", [("R", 1), ("S[0]", 4)])
def test_workers_holding_the_same_arrays_compute_once(monkeypatch, layout, computed_on):
    mod = redistribute_module(("num_workers",), (8, 8), layout, layout)  # an identity, then exp below
    text = mod.script().replace(
        "R.output(y)\n        return y", "e = R.exp(y)\n            R.output(e)\n        return e")
    import distir

    mod = distir.parse(text)
    x = np.random.default_rng(0).standard_normal((8, 8)).astype("float32")
    local = Driver(mod).specialize(4)
    calls = _count_calls(monkeypatch, "exp")
    np.testing.assert_allclose(run_spmd(local, x), np.exp(x), rtol=1e-6)
    assert len(calls) == computed_on  # a replica is computed once and shared; shards once per worker


def test_every_intermediate_is_checked_against_its_type(monkeypatch):
    mod = examples.load("mlp")
    local = Driver(mod).specialize(2)
    monkeypatch.setattr(get_op("nn.gelu"), "numpy", lambda xs, attrs, ctx: xs[0][:1])
    with pytest.raises(SpmdError, match=r"binding 'a' = R.nn.gelu: produced an array of shape \(1, 256\).* \(on worker 0\)"):
        run_spmd(local, *random_inputs(mod))
    monkeypatch.setattr(get_op("nn.gelu"), "numpy", lambda xs, attrs, ctx: xs[0] @ xs[0])
    local = Driver(mod).specialize(2)  # a new function: a new plan, which reads the op's numpy again
    with pytest.raises(SpmdError, match=r"binding 'a' = R.nn.gelu\(...\) on worker 0: .*matmul"):
        run_spmd(local, *random_inputs(mod))


def test_inputs_are_checked_against_the_global_signature():
    local = Driver(examples.load("mlp")).specialize(2)
    x, w1, w2 = random_inputs(examples.load("mlp"))
    with pytest.raises(SpmdError, match="parameter 'w1': expected dtype float32, got float64"):
        run_spmd(local, x, w1.astype("float64"), w2)
    with pytest.raises(SpmdError, match="parameter 'x' dim 1: expected size 256, got 128"):
        run_spmd(local, x[:, :128], w1, w2)
    with pytest.raises(SpmdError, match=r"takes 3 argument\(s\) \(x, w1, w2\), got 2"):
        run_spmd(local, x, w1)
