#!/usr/bin/env python3
"""Benchmark: the SPMD simulator on a Llama decoder layer at 8 and 64 workers.

Distributes each model once (num_workers symbolic), specializes it to each count and times
``run_spmd`` on random inputs (sequence length ``--seq``), best of ``--repeat`` (many, so
that under ``scripts/bench_compare.py`` the simulator outweighs imports and the pipeline). The
models: the bundled ``examples.load("llama")`` (8 heads, so at most 8 workers) and the
same layer with 64 heads of 2 (``examples.llama_stack(1, heads=64)``), which 64 workers
divide. The simulator's own cost grows with bindings x workers, so 64 is where it shows.
"""

from __future__ import annotations

import argparse
import time

import distir
from distir import examples
from distir.runtime.spmd import SpmdStats, run_spmd
from distir.testing import random_inputs
from distir.transform.pipelines import distribute_pipeline
from distir.transform.specialize import specialize


def _module(made):
    """``llama_stack`` gives a module (IR text on older commits, which bench_compare also runs)."""
    return distir.parse(made) if isinstance(made, str) else made


def bench(name: str, mod, counts, seq: int, repeat: int) -> None:
    local = distribute_pipeline()(mod)
    inputs = random_inputs(mod, dims={"s": seq})
    n_bindings = sum(1 for _ in local["main"].bindings())
    for w in counts:
        spec = specialize(local, {"num_workers": w})
        best = float("inf")
        stats = SpmdStats()
        for _ in range(repeat):
            t0 = time.perf_counter()
            run_spmd(spec, *inputs, stats=stats)
            best = min(best, time.perf_counter() - t0)
        print(f"{name:<18} {w:>7} {best * 1e3:>8.1f} {best / (n_bindings * w) * 1e6:>14.1f}  {stats.summary()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="8,64", help="counts, comma-separated (default 8,64); the bundled "
                    "layer runs at those up to 8")
    ap.add_argument("--seq", type=int, default=64, help="sequence length s (default 64)")
    ap.add_argument("--repeat", type=int, default=30, help="runs per count; the best is kept (default 30)")
    args = ap.parse_args()
    print(f"{'model':<18} {'workers':>7} {'best ms':>8} {'us/binding/wkr':>14}  collectives")
    counts = [int(w) for w in args.workers.split(",")]
    if any(w <= 8 for w in counts):
        bench("llama (8 heads)", examples.load("llama"), [w for w in counts if w <= 8], args.seq, args.repeat)
    bench("llama (64 heads)", _module(examples.llama_stack(1, heads=64)), counts, args.seq, args.repeat)


if __name__ == "__main__":
    main()
