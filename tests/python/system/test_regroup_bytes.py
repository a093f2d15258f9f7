"""A regroup (a dim re-blocked in whole units where the count does not divide it) moves only what
each worker lacks, ``sum_j |T_j \\ S_j|`` elements, in the simulator, in the analysis' formula and on
Disco: checked against sets of indices built here, and against one device numerically."""

from __future__ import annotations

import pytest

from distir import examples
from distir.analysis import comm_volume
from distir.driver import Driver, random_inputs
from distir.ops.collectives import regroup_pieces, regroup_received


def _blocks(extent: int, k: int, unit: int) -> list[set[int]]:
    """Worker j's real elements when ``extent`` is cut ``k`` ways in whole ``unit``s (the last blocks padded)."""
    units = -(-(extent // unit) // k)
    return [set(range(j * units * unit, min((j + 1) * units * unit, extent))) for j in range(k)]


CASES = [(e, k, uf, ut) for e, u in ((128, 16), (24, 4), (30, 6), (7, 7), (12, 3))
         for k in (1, 2, 3, 4, 5, 7, 8, 13, 64) for uf, ut in ((1, u), (u, 1), (u, u))]


@pytest.mark.parametrize("extent,k,uf,ut", CASES)
def test_pieces_are_exactly_what_each_worker_lacks(extent, k, uf, ut):
    src, dst = _blocks(extent, k, uf), _blocks(extent, k, ut)
    got = [set() for _ in range(k)]
    for i, j, lo, hi in regroup_pieces(extent, k, uf, ut):
        run = set(range(lo, hi))
        assert i != j and lo < hi and run <= src[i], (i, j, lo, hi)  # sent by the worker that holds it
        assert not run & got[j], (i, j, lo, hi)  # nothing received twice
        got[j] |= run
    assert got == [dst[j] - src[j] for j in range(k)]
    assert regroup_received(extent, k, uf, ut) == sum(len(dst[j] - src[j]) for j in range(k))


@pytest.fixture(scope="module")
def attention():
    mod = examples.load("attention")
    return Driver(mod), random_inputs(mod, dims={"s": 8}, seed=5)


def test_attention_at_64_workers_moves_the_bound(attention):
    """8 heads of 16 over 64 workers, s = 8: q, k, v are re-blocked from 2 columns to one head (worker 0
    keeps 2 of its 16 columns, workers 1-7 lack all 16: 126 columns of 8 float32 rows) and ctx back (worker 0
    keeps its 2, workers 1-63 lack 2: 126 columns): 4,032 bytes each, 63 per worker, not 32,256."""
    driver, inputs = attention
    r = driver.run(inputs, 64)
    assert r.ok, r.comparison.mismatch
    cv = comm_volume(driver.local).evaluate({"num_workers": 64, "s": 8})
    bound = (14 + 7 * 16) * 8 * 4
    assert bound == (63 * 2) * 8 * 4 == 4032
    assert r.stats.counts == {"regroup": 4, "all_reduce": 1}
    assert r.stats.bytes_by_kind["regroup"] == 4 * bound == cv.bytes_by_kind["regroup"]
    assert r.stats.total_bytes == cv.total_bytes


@pytest.mark.parametrize("workers", (2, 3, 4, 5, 6, 7))
def test_attention_equals_one_device_and_counts_the_same_bytes(attention, workers):
    driver, inputs = attention
    r = driver.run(inputs, workers)
    assert r.ok, r.comparison.mismatch
    cv = comm_volume(driver.local).evaluate({"num_workers": workers, "s": 8})
    assert r.stats.total_bytes == cv.total_bytes
    regroups = r.stats.bytes_by_kind.get("regroup", 0)
    # the oracle: q, k, v from 1-column to 16-column blocks, ctx back; 8 rows of float32
    want = 0 if 8 % workers == 0 else 8 * 4 * (3 * regroup_oracle(workers, 1, 16) + regroup_oracle(workers, 16, 1))
    assert regroups == want


def regroup_oracle(k: int, uf: int, ut: int) -> int:
    src, dst = _blocks(128, k, uf), _blocks(128, k, ut)
    return sum(len(dst[j] - src[j]) for j in range(k))


@pytest.mark.parametrize("workers", (2, 3, 4))
def test_attention_on_disco_moves_the_simulators_bytes(attention, workers):
    """Disco's threads (CPU, llvm), the one build and the build for the count: equal to one device, and
    what Disco's collectives and sends carried is what the simulator counts (point to point at 3)."""
    driver, inputs = attention
    sim = driver.run(inputs, workers).stats
    for specialize in (True, False):
        r = driver.run(inputs, workers, backend="tvm", specialize=specialize)
        assert r.ok, r.comparison.mismatch
        assert r.disco["transport"]["bytes_sent"] == r.disco["bytes_sent"] == sim.total_bytes
        assert ("send" in r.disco["transport"]["calls"]) == (workers == 3)
