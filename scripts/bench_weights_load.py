"""Loading a model's weights onto Disco's workers: from a pre-sharded set against from global weights.

A larger frontend Llama (hidden 512, 4 layers, vocabulary 8000: about 75 MB of float32 weights)
is built once per count and run on worker processes twice, both from files on disk:

- global: the global weights are read from one TVM tensor cache in the caller
  (``tvmjs.load_tensor_cache``), cut into every worker's pieces and scattered through Disco;
- pre-sharded: the set written by ``distir.tvm.shard_weights`` for that count, which each
  worker reads with Disco's ``ShardLoader`` (its own files only);
- global set: the one unsharded tensor cache, each worker reading its own byte ranges
  (``distir.tvm.checkpoint``), passed as ``weights=`` like a pre-sharded set.

Then, per worker, the load alone in a fresh process (``--load-only`` of this script): the time to
read that worker's pieces and the peak memory allocated while reading (``tracemalloc``: numpy's
buffers and ``pread``'s bytes), from the global set (its byte ranges, the plan every worker gets) against from the
pre-sharded set (its own records, read as the ShardLoader reads them).

The model's compute is the same in both (a short sequence, so loading dominates). Median of
``--repeat`` runs of each, alternating.

    python scripts/bench_weights_load.py --counts 1-4 --repeat 3
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import numpy as np  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default="1-4", help="worker counts, e.g. 1-4 or 2,4 (default 1-4)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per count and way (default 3)")
    parser.add_argument("--session", choices=("threads", "processes"), default="processes")
    parser.add_argument("--load-only", nargs=4, metavar=("WAY", "DIR", "PLAN", "WORKER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.load_only:
        return load_only(*args.load_only)
    counts = [c for part in args.counts.split(",") for c in
              range(int(part.partition("-")[0]), int(part.partition("-")[2] or part.partition("-")[0]) + 1)]

    import tvm
    from tvm.contrib import tvmjs

    from distir.driver import Driver, run_disco
    from distir.transform import ShardParams
    from distir.tvm import from_nn, shard_weights
    from distir.tvm.checkpoint import read_global, save_global_weights
    from distir.examples.nn import llama as L
    from distir.tvm.disco.workers import close_all, process_workers

    config = L.LlamaConfig(vocab_size=8000, hidden_size=512, num_heads=8, intermediate_size=1024, num_layers=4)
    model = L.Llama(config)
    driver = Driver(ShardParams(L.TP_PLAN)(from_nn(model, L.spec(config))), func="forward")
    weights = L.random_weights(model)
    names = list(weights)
    megabytes = sum(a.nbytes for a in weights.values()) / 2**20
    inputs = [(np.arange(4) * 7 % config.vocab_size).astype("int32"), *L.rope_tables(4, config.head_dim)]
    tmp = Path(tempfile.mkdtemp(prefix="distir-bench-"))
    with contextlib.redirect_stdout(io.StringIO()):
        tvmjs.dump_tensor_cache(weights, str(tmp / "global"), encode_format="raw", show_progress=False)
    print(f"nn_llama hidden {config.hidden_size}, {config.num_layers} layers, vocabulary {config.vocab_size}: "
          f"{megabytes:.0f} MB of weights; {args.session}; median of {args.repeat}")
    save_global_weights(driver.mod, weights, tmp / "one")
    print(f"{'W':>2} {'global s':>9} {'pre-sharded s':>14} {'ratio':>6} {'global set s':>13} {'ratio':>6} "
          f"{'set written s':>14}")
    loads = []
    for w in counts:
        built = driver.build(w)
        if args.session == "processes":
            process_workers(w)
        t0 = time.perf_counter()
        preset = shard_weights(driver.local, weights, w, tmp / f"w{w}")
        written = time.perf_counter() - t0

        def from_global():
            loaded, _ = tvmjs.load_tensor_cache(str(tmp / "global"), tvm.cpu())
            arrays = [loaded[n].numpy() for n in names]
            return run_disco(built, driver.local, *inputs, *arrays, num_workers=w, func="forward", session=args.session)

        def from_set():
            return run_disco(built, driver.local, *inputs, num_workers=w, func="forward", session=args.session,
                             weights=str(preset))

        def from_one():
            return run_disco(built, driver.local, *inputs, num_workers=w, func="forward", session=args.session,
                             weights=str(tmp / "one"))

        times: dict[str, list[float]] = {"global": [], "set": [], "one": []}
        outputs = {}
        for _ in range(args.repeat):
            for way, fn in (("global", from_global), ("set", from_set), ("one", from_one)):
                t0 = time.perf_counter()
                outputs[way] = fn()
                times[way].append(time.perf_counter() - t0)
        np.testing.assert_array_equal(outputs["global"], outputs["set"])
        np.testing.assert_array_equal(outputs["one"], outputs["set"])
        g, s, o = (statistics.median(times[k]) for k in ("global", "set", "one"))
        print(f"{w:>2} {g:>9.3f} {s:>14.3f} {s / g:>6.2f} {o:>13.3f} {o / s:>6.2f} {written:>14.2f}")
        if w in (2, 4):
            plan = tmp / f"plan{w}.json"
            plan.write_text(read_global(tmp / "one").bind(driver.local, "forward").ranged(driver.values(w), w).plan)
            loads.append((w, preset, plan))
    print("\nload alone, per worker, in a fresh process: seconds and peak memory allocated while reading (MB, tracemalloc)")
    print(f"{'W':>2} {'worker':>6} {'global s':>9} {'global MB':>10} {'pre-sharded s':>14} {'pre-sharded MB':>15} "
          f"{'time ratio':>11} {'memory ratio':>13}")
    for w, preset, plan in loads:
        for worker in range(w):
            got = {}
            for way, where in (("global", tmp / "one"), ("set", preset)):
                out = subprocess.run([sys.executable, __file__, "--load-only", way, str(where), str(plan), str(worker)],
                                     capture_output=True, text=True, timeout=600, check=True)
                got[way] = [float(v) for v in out.stdout.split()]
            (gs, gm), (ss, sm) = got["global"], got["set"]
            print(f"{w:>2} {worker:>6} {gs:>9.3f} {gm:>10.1f} {ss:>14.3f} {sm:>15.1f} {gs / ss:>11.2f} "
                  f"{gm / sm if sm else float('nan'):>13.2f}")
    close_all()
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


def load_only(way: str, directory: str, plan: str, worker: str) -> int:
    """One worker's pieces read in this fresh process: prints seconds and the peak MB allocated (tracemalloc)."""
    import json

    from distir.tvm.ranges import read_worker
    from distir.tvm.weights import read_set

    w = int(worker)
    s = None if way == "global" else read_set(directory, verify=False)  # manifests read before the baseline
    p = json.loads(Path(plan).read_text()) if way == "global" else None
    tracemalloc.start()  # numpy's buffers and pread's bytes are traced
    t0 = time.perf_counter()
    if p is not None:
        pieces = read_worker(p, w)
    else:
        pieces = [s.piece(i, w) for i in range(len(s.meta["params"]))]
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    assert pieces
    print(seconds, peak / 2**20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
