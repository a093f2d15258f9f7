#!/usr/bin/env python3
"""Benchmark: plans by bytes against plans by time on a mesh with a slow and a fast axis.

A ``(2, 4)`` mesh whose axis 0 is slow (between nodes) and axis 1 fast (within a node): each
layout change of a small suite, at a small and a large tensor, is distributed twice, once with
the default objective (bytes) and once with the axis costs (``legalize-redistribute.axis_costs``).
Both programs run on the SPMD simulator (bytes per device measured, numbers checked against one
device); their time is the analysis' estimate (``distir.analysis.comm_time`` with the same axis
costs, the model the planner minimizes). The ratio is the byte plan's time over the time plan's.

Run: ``PYTHONPATH=python python scripts/bench_axis_cost.py`` (docs/redistribute.md has its output).
"""

from __future__ import annotations

import argparse

import numpy as np

import distir
from distir.analysis import CommModel, comm_time, comm_volume
from distir.ir.axis_cost import AxisCosts
from distir.runtime.spmd import SpmdStats, run_spmd
from distir.transform import PassContext
from distir.transform.legalize_redistribute import AXIS_COSTS_KEY
from distir.transform.pipelines import distribute_pipeline

REDISTRIBUTE = '''
@I.ir_module
class Module:
    I.module_global_infos({{"mesh": [R.device_mesh((2, 4), I.Range(0, 8))]}})

    @R.function
    def main(x: R.DTensor(({shape}), "float32", "mesh[0]", "{src}")):
        with R.dataflow():
            y = R.dist.redistribute(x, device_mesh="mesh[0]", placement="{dst}")
            R.output(y)
        return y
'''

# slow axis 0 (between nodes), fast axis 1 (within a node): 10x apart in latency and bandwidth
COSTS = AxisCosts.parse("0=10us:10GB/s,1=1us:100GB/s")

SUITE = [
    ("all-reduce over the slow axis", "P, R", "R, R"),
    ("reduce-scatter both axes", "P, P", "S[0], S[1]"),
    ("partial on the slow axis to shard", "P, S[0]", "S[0], S[1]"),
    ("partial to shard, other dim", "P, S[1]", "S[1], S[0]"),
    ("all-reduce over the fast axis", "R, P", "R, R"),
    ("swap mesh axes", "S[0], S[1]", "S[1], S[0]"),
]
SHAPES = [(8, 8), (1024, 1024)]


def _run(mod, costs, x):
    config = {} if costs is None else {AXIS_COSTS_KEY: costs}
    with PassContext(config=config):
        local = distribute_pipeline()(mod)
    stats = SpmdStats()
    got = run_spmd(local, x, stats=stats)
    np.testing.assert_allclose(got, x, rtol=1e-5, atol=1e-5)  # a partial input is summed
    steps = [b.value.op.name.removeprefix("ccl.") for b in local["main"].bindings()]
    return local, stats, steps


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    model = CommModel(axes=COSTS)
    print(f"mesh (2, 4), axis costs {COSTS}; times are the analysis' estimates")
    print(f"{'layout change':36} {'tensor':>11} {'B/dev bytes':>11} {'B/dev time':>11} {'us bytes':>9} "
          f"{'us time':>8} {'ratio':>6}  plan by time")
    ratios = []
    for name, src, dst in SUITE:
        for shape in SHAPES:
            mod = distir.parse(REDISTRIBUTE.format(shape=", ".join(map(str, shape)), src=src, dst=dst))
            x = np.random.default_rng(0).standard_normal(shape).astype("float32")
            by_bytes, bytes_stats, _ = _run(mod, None, x)
            by_time, time_stats, steps = _run(mod, COSTS, x)
            t_bytes = comm_time(comm_volume(by_bytes), model)
            t_time = comm_time(comm_volume(by_time), model)
            ratios.append(t_bytes / t_time)
            print(f"{name:36} {'x'.join(map(str, shape)):>11} {float(bytes_stats.bytes_per_worker):11.0f} "
                  f"{float(time_stats.bytes_per_worker):11.0f} {t_bytes * 1e6:9.2f} {t_time * 1e6:8.2f} "
                  f"{t_bytes / t_time:6.2f}  {', '.join(steps)}")
    print(f"geometric mean of the ratios: {float(np.exp(np.mean(np.log(ratios)))):.2f}")


if __name__ == "__main__":
    main()
