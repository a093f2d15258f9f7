"""One symbolic TVM build for every count against a build per count (CPU, the bundled Llama layer).

For each way: the build time (tvm.compile, summed over counts for the per-count way), the first
run at each count (the session, the libraries loaded) and the median of the following runs, and
the total of build + first runs; then the ratio per-count / build-once of that total. Every run is
checked against the single-device interpreter, and the bytes each count's run carried on Disco are
the same both ways. Each way starts from an empty build cache.

``--declare`` lays the module out per class of those counts (``Driver(counts=...)``): where the
classes' layouts differ the module carries count variants, and the one build dispatches to each
count's at run time (``--model gqa --declare 1,2,3,4``: a variant for 1-2, the KV heads cut).

    PYTHONPATH=python python scripts/bench_build_once.py [--counts 1,2,3,4] [--runs 5] [--model llama]
        [--declare 1,2,3,4]
"""

from __future__ import annotations

import argparse
import statistics
import time

from distir import examples
from distir.analysis.common import pick_function
from distir.driver import Driver, random_inputs
from distir.tvm import build_cache


def measure(mod, func, inputs, counts, runs: int, specialize: bool, declare) -> dict:
    build_cache.clear()
    d = Driver(mod, func=func, specialize=specialize, counts=declare)
    d.distribute()
    build = first = 0.0
    per_run: list[float] = []
    carried = {}
    for w in counts:
        t0 = time.perf_counter()
        r = d.run(inputs, w, backend="tvm")
        total = time.perf_counter() - t0
        assert r.ok, (w, specialize, r.comparison.mismatch)
        build += r.timings["build"]
        first += total - r.timings["build"]
        carried[w] = r.disco["transport"]["bytes_sent"]
        for _ in range(runs):
            r = d.run(inputs, w, backend="tvm")
            assert r.ok
            per_run.append(r.timings["run"])
    return {"build": build, "first": first, "run": statistics.median(per_run), "total": build + first,
            "carried": carried, "functions": sorted(d.local.functions)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="1,2,3,4")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--model", default="llama")
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--declare", help="the counts the module is laid out for (Driver(counts=...)), e.g. 1,2,3,4")
    args = ap.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    declare = None if args.declare is None else [int(c) for c in args.declare.split(",")]
    mod = examples.load(args.model)
    func = pick_function(mod, None).name
    inputs = random_inputs(mod, func, dims={"s": args.seq})
    once = measure(mod, func, inputs, counts, args.runs, False, declare)
    per = measure(mod, func, inputs, counts, args.runs, True, declare)
    assert once["carried"] == per["carried"], (once["carried"], per["carried"])
    print(f"{args.model}, counts {counts}, CPU (llvm), median of {args.runs} runs per count after the first")
    if declare is not None:
        print(f"declared for {declare}: functions {', '.join(once['functions'])}")
    print("bytes carried on Disco per count (both ways): "
          + ", ".join(f"{w}: {b:,}" for w, b in once["carried"].items()))
    print(f"{'':16} {'build s':>8} {'first runs s':>13} {'per run ms':>11} {'build+first s':>14}")
    for name, m in (("build once", once), ("build per count", per)):
        print(f"{name:16} {m['build']:8.3f} {m['first']:13.3f} {m['run'] * 1e3:11.2f} {m['total']:14.3f}")
    print(f"ratio per-count / once: build {per['build'] / once['build']:.2f}, build+first runs "
          f"{per['total'] / once['total']:.2f}")


if __name__ == "__main__":
    main()
