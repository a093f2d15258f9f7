"""auto-shard on the Llama written with relax.frontend.nn: weights are the parameters after num_input,
the module gets shard-params' mesh, and the layout sends no more than the shipped tensor-parallel plan."""

from __future__ import annotations

import numpy as np
import pytest

from distir.analysis import comm_volume, memory_footprint
from distir.driver import Driver
from distir.transform import AutoShard
from distir.transform.specialize import specialize
from distir.examples.nn import llama as L


@pytest.fixture(scope="module")
def llama(frontend_llama):
    """(config, model, module, the auto-shard report, drivers of the auto-shard and tensor-parallel layouts:
    each distributed once, for every count)."""
    config, model, mod, _, _, _, tp = frontend_llama
    p = AutoShard()
    auto = p(mod)
    return config, model, mod, p.report, Driver(auto, func="forward"), tp


def sent(driver: Driver, w: int):
    return comm_volume(driver.local, "forward").evaluate({"num_workers": w, "s": 64}).bytes_per_worker


def test_weights_are_the_parameters_after_num_input(llama):
    _, _, _, report, _, _ = llama
    inputs = [p.name for p in report.params if not p.weight]
    assert inputs == ["ids", "cos", "sin"]
    assert report.weights_bytes * report.devices <= 1.1 * report.replicated_bytes


def peak(driver: Driver, w: int) -> int:
    local = specialize(driver.local, {"num_workers": w, "s": 64})
    return memory_footprint(local, "forward").evaluate({}).peak_bytes


@pytest.mark.parametrize("workers", [2, 4])
def test_no_more_bytes_than_the_tensor_parallel_plan(llama, workers):
    *_, auto, tp = llama
    assert str(tp.mod["forward"].params[3].type.placement) == "S[0]"  # the shipped plan, laid out
    assert sent(auto, workers) <= sent(tp, workers)
    assert peak(auto, workers) <= peak(tp, workers)  # and no more live activations at the peak


def test_numbers_equal_one_device(llama):
    config, model, _, _, driver, _ = llama
    ids = (np.arange(10) * 7 % config.vocab_size).astype("int32")
    cos, sin = L.rope_tables(10, config.head_dim)
    for w in (2, 3):
        r = driver.run([ids, cos, sin], w, weights=L.random_weights(model))
        assert r.ok, r.comparison.mismatch
