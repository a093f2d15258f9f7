#!/usr/bin/env python3
"""Benchmark: auto-shard on Llama-like stacks against greedy propagation of the annotated stack.

On ``distir.examples.llama_stack(n)`` (default n = 8 and 80 layers) times
``propagate-sharding`` with ``propagate-sharding.search = "greedy"`` on the stack as built
(Megatron layouts on its weights), and ``auto-shard`` (default budget) on the same stack with
every layout stripped (:func:`distir.transform.layout_choice.auto_shard.strip_layouts`); prints both and
their ratio, the bytes per worker and peak live activations per worker of both layouts after
``distribute`` (at 4 workers and s = 64), and the time of ``auto-shard`` followed by the whole
distribute pipeline.
"""

from __future__ import annotations

import argparse
import time

from distir.analysis import comm_volume, memory_footprint
from distir.examples import llama_stack
from distir.transform import AutoShard, PassContext, get_pass
from distir.transform.layout_choice.auto_shard import strip_layouts
from distir.transform.pipelines import distribute_pipeline

AT = {"num_workers": 4, "s": 64}


def sent(local) -> float:
    return float(comm_volume(local).evaluate(AT).bytes_per_worker)


def peak(local) -> int:
    return memory_footprint(local).evaluate(AT).peak_bytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default="8,80", help="comma-separated layer counts (default 8,80)")
    args = ap.parse_args()
    AutoShard()(strip_layouts(llama_stack(1)))  # warm up
    print(f"{'layers':>6} {'greedy s':>9} {'auto-shard s':>12} {'auto/greedy':>11} {'megatron B/worker':>17} "
          f"{'auto B/worker':>13} {'megatron peak':>13} {'auto peak':>9} {'auto+distribute s':>17}")
    for n in (int(s) for s in args.layers.split(",")):
        annotated = llama_stack(n)
        plain = strip_layouts(annotated)
        t0 = time.perf_counter()
        with PassContext(config={"propagate-sharding.search": "greedy"}):
            get_pass("propagate-sharding")(annotated)
        greedy = time.perf_counter() - t0
        t0 = time.perf_counter()
        laid = AutoShard()(plain)
        auto = time.perf_counter() - t0
        local = distribute_pipeline()(laid)
        total = time.perf_counter() - t0
        megatron = distribute_pipeline()(annotated)
        print(f"{n:>6} {greedy:9.2f} {auto:12.2f} {auto / greedy:11.1f} {sent(megatron):17,.0f} {sent(local):13,.0f} "
              f"{peak(megatron):13,} {peak(local):9,} {total:17.2f}")


if __name__ == "__main__":
    main()
