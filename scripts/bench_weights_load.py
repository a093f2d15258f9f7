"""Loading a model's weights onto Disco's workers: from a pre-sharded set against from global weights.

A larger frontend Llama (hidden 512, 4 layers, vocabulary 8000: about 75 MB of float32 weights)
is built once per count and run on worker processes twice, both from files on disk:

- global: the global weights are read from one TVM tensor cache in the caller
  (``tvmjs.load_tensor_cache``), cut into every worker's pieces and scattered through Disco;
- pre-sharded: the set written by ``distir.tvm.shard_weights`` for that count, which each
  worker reads with Disco's ``ShardLoader`` (its own files only).

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
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import numpy as np  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default="1-4", help="worker counts, e.g. 1-4 or 2,4 (default 1-4)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per count and way (default 3)")
    parser.add_argument("--session", choices=("threads", "processes"), default="processes")
    args = parser.parse_args(argv)
    counts = [c for part in args.counts.split(",") for c in
              range(int(part.partition("-")[0]), int(part.partition("-")[2] or part.partition("-")[0]) + 1)]

    import tvm
    from tvm.contrib import tvmjs

    from distir.driver import Driver, run_disco
    from distir.transform import ShardParams
    from distir.tvm import from_nn, shard_weights
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
    print(f"{'W':>2} {'global s':>9} {'pre-sharded s':>14} {'ratio':>6} {'set written s':>14}")
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

        times: dict[str, list[float]] = {"global": [], "set": []}
        outputs = {}
        for _ in range(args.repeat):
            for way, fn in (("global", from_global), ("set", from_set)):
                t0 = time.perf_counter()
                outputs[way] = fn()
                times[way].append(time.perf_counter() - t0)
        np.testing.assert_array_equal(outputs["global"], outputs["set"])
        g, s = statistics.median(times["global"]), statistics.median(times["set"])
        print(f"{w:>2} {g:>9.3f} {s:>14.3f} {s / g:>6.2f} {written:>14.2f}")
    close_all()
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
