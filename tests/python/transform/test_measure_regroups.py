"""The layout choice prices the regroups lowering writes for a reshape as they run (point to point:
the runs each worker lacks), so what it counts for a laid-out function is what the simulator
counts running that function lowered, at every count, divided or not."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import distir
from distir import examples
from distir.ir.axis_cost import AxisCosts
from distir.runtime.spmd import SpmdStats, run_spmd
from distir.transform import get_pass
from distir.transform.layout_choice.measure import function_bytes_at
from distir.transform.legalize_redistribute import fuse_reshapes
from distir.transform.specialize import specialize

ONE = examples.text("attention")
# the same attention on a (dp, tp) mesh, the weights cut over both axes: the heads' reshapes regroup
# over dp where dp does not divide the 8 heads
TWO = ONE.replace('R.device_mesh(("num_workers",), I.Range(0, "num_workers"))',
                  'R.device_mesh(("dp", "tp"), I.Range(0, "dp * tp"))').replace(
    '"S[1]")', '"S[1], S[1]")').replace('"S[0]")', '"S[0], S[0]")')


def _laid_out_and_lowered(text: str):
    glob = get_pass("propagate-sharding")(distir.parse(text))
    return glob, get_pass("lower-global-view-to-local-view")(get_pass("legalize-redistribute")(glob))


@pytest.mark.parametrize("text,counts", [
    (ONE, [{"num_workers": n} for n in (2, 3, 5, 7, 8, 12)]),
    (TWO, [{"dp": a, "tp": b} for a, b in ((2, 2), (3, 2), (3, 1), (2, 3), (3, 3))]),
], ids=["1d", "2d"])
def test_priced_bytes_are_the_simulators(text, counts):
    glob, local = _laid_out_and_lowered(text)
    fused = fuse_reshapes(glob["main"])
    rng = np.random.default_rng(0)
    regrouped = 0
    for env in counts:
        for s in (8, 13):
            at = {**env, "s": s}
            ins = [rng.standard_normal([d if isinstance(d, int) else s for d in p.type.shape]).astype("float32")
                   for p in glob["main"].params]
            stats = SpmdStats()
            run_spmd(specialize(local, at), *ins, stats=stats)
            sent, _ = next(function_bytes_at(fused, [at], None, True))
            assert sent == stats.total_bytes, (at, stats.counts)
            regrouped += stats.counts.get("regroup", 0)
    assert regrouped > 0  # some count re-blocks the heads: the regroups are among what is compared


def test_timed_regroups_cost_nothing_where_the_count_divides():
    """Timed (axis costs), a regroup specialize drops (8 heads over 2 or 8 workers) adds neither
    latency nor bytes; one that runs (3, 12) adds its rounds and bytes."""
    costs = AxisCosts.parse("0=5us:25GB/s")
    glob, _ = _laid_out_and_lowered(ONE)
    fused = fuse_reshapes(glob["main"], costs=costs)
    for n, runs in ((2, False), (8, False), (3, True), (12, True)):
        at = {"num_workers": n, "s": 8}
        with_regroups = next(function_bytes_at(fused, [at], costs, True))[0]
        without = next(function_bytes_at(fused, [at], costs, False))[0]
        # 4 regroups of n - 1 rounds of 5 us each at least, where they run
        assert (with_regroups - without >= 4 * (n - 1) * Fraction(5, 10**6)) if runs else with_regroups == without, n
