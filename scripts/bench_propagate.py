#!/usr/bin/env python3
"""Benchmark: propagate-sharding's whole-program solver (MILP, HiGHS) against the greedy choice.

On ``distir.examples.llama_stack(n)`` (default n = 2, 8 and 80 layers) times
``propagate-sharding`` with ``propagate-sharding.search`` set to ``milp`` and to ``greedy``,
prints both, their ratio, how many integer programs the solver solved (a stack is solved in
windows between layers, windows alike once), the bytes per worker its layout sends at the size
hints, and times the whole distribute pipeline with the default (``auto``: the solver's layout,
kept where it sends no more than the greedy one at every sampled size). The bar: the pipeline
on 80 layers under 10 s. ``--no-milp-above N`` skips the solver for stacks of more than N layers.
"""

from __future__ import annotations

import argparse
import time

from distir.examples import llama_stack
from distir.transform import PassContext, get_pass
from distir.transform.layout_solver import CostModel, solve_layouts
from distir.transform.pipelines import distribute_pipeline
from distir.transform.sharding_graph import build_graph, preferred_placements


def timed(mod, search: str) -> float:
    t0 = time.perf_counter()
    with PassContext(config={"propagate-sharding.search": search}):
        get_pass("propagate-sharding")(mod)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default="2,8,80", help="comma-separated layer counts (default 2,8,80)")
    ap.add_argument("--no-milp-above", type=int, default=1000, help="skip the solver above this many layers")
    args = ap.parse_args()
    timed(llama_stack(1), "milp")  # warm up
    print(f"{'layers':>6} {'greedy s':>9} {'milp s':>9} {'milp/greedy':>11} {'programs':>8} {'milp B/worker':>14} "
          f"{'pipeline s':>10}")
    for n in (int(s) for s in args.layers.split(",")):
        mod = llama_stack(n)
        greedy = timed(mod, "greedy")
        if n <= args.no_milp_above:
            milp = timed(mod, "milp")
            graph = build_graph(mod["main"])
            plan, solved = solve_layouts(graph, preferred_placements(graph), CostModel(graph))
            milp_s, ratio, sent = f"{milp:9.2f}", f"{milp / greedy:11.1f}", f"{int(plan.bytes):14,}"
            programs = f"{len(solved):>8}"
        else:
            milp_s, ratio, sent, programs = f"{'-':>9}", f"{'-':>11}", f"{'-':>14}", f"{'-':>8}"
        t0 = time.perf_counter()
        distribute_pipeline()(mod)
        pipe = time.perf_counter() - t0
        print(f"{n:>6} {greedy:9.2f} {milp_s} {ratio} {programs} {sent} {pipe:10.2f}")
    print(f"pipeline on {n} layers: {pipe:.2f} s ({'under' if pipe < 10 else 'OVER'} the 10 s bar)")


if __name__ == "__main__":
    main()
