#!/usr/bin/env python3
"""Benchmark: the distribute pipeline on Llama-like models of growing depth.

Builds ``distir.examples.llama_stack(n)`` for n = 8, 32, 80 layers (80 layers is several
thousand bindings), and times each pass of ``distribute_pipeline()``
(propagate-sharding, legalize-redistribute, canonicalize, lower-global-view-to-local-view)
with num_workers symbolic. Prints a table with the time per binding, so linear growth
shows as a flat column, and the ratio of the largest model's time per binding to the
smallest's (1.0 = perfectly linear). The bar: 80 layers under 10 seconds.
"""

from __future__ import annotations

import argparse
import time

import distir
from distir.examples import llama_stack
from distir.transform import PassContext
from distir.transform.instruments import PassTimingInstrument
from distir.transform.pipelines import distribute_pipeline


def run(n_layers: int) -> tuple[int, float, float, dict[str, float]]:
    t0 = time.perf_counter()
    made = llama_stack(n_layers)
    mod = distir.parse(made) if isinstance(made, str) else made  # IR text on older commits (bench_compare)
    t1 = time.perf_counter()
    timing = PassTimingInstrument()
    with PassContext(instruments=[timing]):
        distribute_pipeline()(mod)
    t2 = time.perf_counter()
    bindings = sum(1 for f in mod.functions.values() for _ in f.bindings())
    return bindings, t1 - t0, t2 - t1, {t.name: t.seconds for t in timing.timings}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default="8,32,80", help="comma-separated layer counts (default 8,32,80)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.layers.split(",")]
    run(2)  # warm up: first-use costs (op registry, TVM's analyzer) are not per binding
    rows = []
    print(f"{'layers':>6} {'bindings':>8} {'build s':>8} {'pipeline s':>10} {'us/binding':>10}  per pass (s)")
    for n in sizes:
        bindings, build_s, pipe_s, passes = run(n)
        per = pipe_s / bindings * 1e6
        rows.append((n, bindings, pipe_s, per))
        detail = ", ".join(f"{k} {v:.2f}" for k, v in passes.items() if k != "distribute")
        print(f"{n:>6} {bindings:>8} {build_s:>8.2f} {pipe_s:>10.2f} {per:>10.1f}  {detail}")
    first, last = rows[0], rows[-1]
    print(
        f"time per binding, {last[0]} layers / {first[0]} layers: {last[3] / first[3]:.2f} "
        f"(1.00 = linear); {last[0]} layers: {last[2]:.2f} s ({'under' if last[2] < 10 else 'OVER'} the 10 s bar)"
    )


if __name__ == "__main__":
    main()
