#!/usr/bin/env python3
"""Benchmark: a per-device-count sweep against one run of the distribute pipeline.

On an N-layer Llama-like model (``distir.examples.llama_stack``), compares
  A) one distribute-pipeline run (num_workers symbolic), with
  B) the whole sweep over eight counts 1, 2, 4, ..., 128: that same pipeline run, the
     formulas, and one specialization per count (``distir.analysis.sweep``).
Prints both times and the ratio B / A; the sweep should cost less than two pipeline runs.
"""

from __future__ import annotations

import argparse
import time

import distir
from distir import examples
from distir.analysis.sweep import sweep
from distir.transform.pipelines import distribute_pipeline

COUNTS = [1, 2, 4, 8, 16, 32, 64, 128]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=80, help="decoder layers (default 80)")
    ap.add_argument("--seq", type=int, default=2048, help="sequence length bound before the sweep (default 2048)")
    ap.add_argument("--repeat", type=int, default=1, help="take the best of this many runs of each (default 1)")
    args = ap.parse_args()
    # 128 heads of 2 and an FFN of 512 divide by every count up to 128
    made = examples.llama_stack(args.layers, hidden=256, heads=128, ffn=512)
    mod = distir.parse(made) if isinstance(made, str) else made  # IR text on older commits (bench_compare)
    n_bindings = sum(1 for _ in mod["main"].bindings())

    single, whole = float("inf"), float("inf")
    result = None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        distribute_pipeline()(mod)
        single = min(single, time.perf_counter() - t0)
        t0 = time.perf_counter()
        result = sweep(mod, COUNTS, bind={"s": args.seq})
        whole = min(whole, time.perf_counter() - t0)
    assert result is not None
    failed = [r.num_workers for r in result.rows if r.error]
    spec = sum(r.specialize_seconds for r in result.rows)
    print(f"{args.layers}-layer model, {n_bindings} bindings")
    print(f"A) one distribute-pipeline run: {single:.2f}s")
    print(
        f"B) sweep over {len(COUNTS)} counts: {whole:.2f}s (pipeline {result.pipeline_seconds:.2f}s, "
        f"formulas {result.analysis_seconds:.2f}s, specialize x{len(COUNTS)} {spec:.2f}s)"
        + (f"; counts that did not specialize: {failed}" if failed else "")
    )
    print(f"ratio B / A = {whole / single:.2f}")


if __name__ == "__main__":
    main()
