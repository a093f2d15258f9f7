#!/usr/bin/env python3
"""Benchmark: auto-shard on Llama-like stacks against greedy propagation of the annotated stack.

On ``distir.examples.llama_stack(n)`` (default n = 8 and 80 layers) times
``propagate-sharding`` with ``propagate-sharding.search = "greedy"`` on the stack as built
(Megatron layouts on its weights), and ``auto-shard`` (default budget) on the same stack with
every layout stripped (:func:`distir.transform.layout_choice.auto_shard.strip_layouts`); prints both and
their ratio, the bytes per worker and peak live activations per worker of both layouts after
``distribute`` (at 4 workers and s = 64), and the time of ``auto-shard`` followed by the whole
distribute pipeline.

``--explain``: instead, times a plain ``auto-shard`` run against one with ``explain=True`` (every
other layout of each parameter solved and counted, each proven the least; issue 23's target: at
most 2x) and one with ``explain_checks=--checks`` (each alternative's programs stopped after that many
of HiGHS's limit checks; how many alternatives are left a range, and the widest range's share of
its upper end) and one with ``explain="bounds"`` (each alternative bounded from above without a
solve: ``distir-opt --explain``'s default), min of ``--repeat`` interleaved runs, on the GPT-2 block
(``distir.examples.nn.gpt2.block_module``, at b = 2, s = 10, 4 workers; one block, one window, and two
blocks, two windows) and on the stripped attention block of tests/python/cli (memory budget 100%);
prints the times and their ratios to the plain run, in wall-clock seconds and in this process's CPU
seconds (steadier on a shared machine: other processes' load inflates the first, not the second).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from distir.analysis import comm_volume, memory_footprint
from distir.examples import llama_stack
from distir.transform import AutoShard, PassContext, get_pass
from distir.transform.layout_choice.auto_shard import strip_layouts
from distir.transform.pipelines import distribute_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pipeline import cold  # noqa: E402  (each timed run solves its own programs)

AT = {"num_workers": 4, "s": 64}


def sent(local) -> float:
    return float(comm_volume(local).evaluate(AT).bytes_per_worker)


def peak(local) -> int:
    return memory_footprint(local).evaluate(AT).peak_bytes


def explain_comparison(repeat: int, checks: int) -> None:
    from distir.examples import load
    from distir.examples.nn.gpt2 import GPT2Config, block_module

    at = {"sizes": {"b": 2, "s": 10, "num_workers": 4}}
    cases = [
        ("gpt2 block b=2 s=10 W=4", block_module("split"), at),
        ("gpt2 blocks x2 (2 windows)", block_module("split", GPT2Config(n_layer=2)), at),
        ("attention (cli test) 100%", strip_layouts(load("attention")), {"memory_budget": "100%"}),
    ]
    ways = {"plain": {}, "explain": {"explain": True}, "checks": {"explain_checks": checks},
            "bounds": {"explain": "bounds"}}
    print(f"{'module':<27} {'plain s':>8} {'explain s':>9} {'ratio':>6} {'cpu ratio':>9} "
          f"{f'checks={checks} s':>11} {'ratio':>6} {'cpu ratio':>9} {'ranges':>7} {'widest':>7} "
          f"{'bounds s':>8} {'ratio':>6} {'cpu ratio':>9}")
    for name, mod, kw in cases:
        wall, cpu = {w: float("inf") for w in ways}, {w: float("inf") for w in ways}
        ranges = ""
        for _ in range(repeat):
            for way, options in ways.items():
                cold()  # each run solves its own programs (none remembered from the run before)
                t0, c0 = time.perf_counter(), time.process_time()
                p = AutoShard(**options, **kw)
                p(mod)
                wall[way] = min(wall[way], time.perf_counter() - t0)
                cpu[way] = min(cpu[way], time.process_time() - c0)
                if way == "checks":
                    alts = [a for r in p.report.params for a in r.alternatives[1:] if a.sent is not None]
                    widths = [(a.sent - a.least) / a.sent for a in alts if a.least is not None]
                    ranges = (f"{len(widths)}/{len(alts)}", f"{float(max(widths, default=0)):.1%}")
        print(f"{name:<27} {wall['plain']:8.2f} {wall['explain']:9.2f} {wall['explain'] / wall['plain']:6.1f} "
              f"{cpu['explain'] / cpu['plain']:9.1f} {wall['checks']:11.2f} {wall['checks'] / wall['plain']:6.1f} "
              f"{cpu['checks'] / cpu['plain']:9.1f} {ranges[0]:>7} {ranges[1]:>7} "
              f"{wall['bounds']:8.2f} {wall['bounds'] / wall['plain']:6.1f} {cpu['bounds'] / cpu['plain']:9.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default="8,80", help="comma-separated layer counts (default 8,80)")
    ap.add_argument("--explain", action="store_true", help="plain auto-shard against --explain (time and ratio)")
    ap.add_argument("--repeat", type=int, default=1, help="with --explain: interleaved runs, the min reported")
    ap.add_argument("--checks", type=int, default=3, help="with --explain: the budgeted run's explain_checks (default 3)")
    args = ap.parse_args()
    if args.explain:
        explain_comparison(args.repeat, args.checks)
        return
    AutoShard()(strip_layouts(llama_stack(1)))  # warm up
    print(f"{'layers':>6} {'greedy s':>9} {'auto-shard s':>12} {'auto/greedy':>11} {'megatron B/worker':>17} "
          f"{'auto B/worker':>13} {'megatron peak':>13} {'auto peak':>9} {'auto+distribute s':>17}")
    for n in (int(s) for s in args.layers.split(",")):
        annotated = llama_stack(n)
        plain = strip_layouts(annotated)
        cold()  # the programs solved cold (auto-shard's then distribute's, in one process as distir-opt runs them)
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
