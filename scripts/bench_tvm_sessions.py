"""Disco worker threads against worker processes: the time of one run per count, and the ratio.

The frontend Llama (``distir.examples.nn.llama``, default sizes) is built once per count and run on a
ThreadedSession and on a ProcessSession (distir keeps the process session of each size, so the
runs after the first reuse it; its start-up is reported on its own). Each run is timed
``--repeat`` times, alternating threads and processes, and the median is reported.

    python scripts/bench_tvm_sessions.py --counts 1-4 --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import numpy as np  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default="1-4", help="worker counts, e.g. 1-4 or 1,2,4 (default 1-4)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per count and session (default 5)")
    parser.add_argument("--seq", type=int, default=32, help="sequence length (default 32)")
    args = parser.parse_args(argv)
    counts = [c for part in args.counts.split(",") for c in
              range(int(part.partition("-")[0]), int(part.partition("-")[2] or part.partition("-")[0]) + 1)]

    from distir.driver import Driver
    from distir.transform import ShardParams
    from distir.tvm import from_nn
    from distir.examples.nn import llama as L
    from distir.tvm.disco.workers import close_all, process_workers

    config = L.LlamaConfig()
    model = L.Llama(config)
    driver = Driver(ShardParams(L.TP_PLAN)(from_nn(model, L.spec(config))), func="forward")
    weights = L.random_weights(model)
    inputs = [(np.arange(args.seq) * 7 % config.vocab_size).astype("int32"), *L.rope_tables(args.seq, config.head_dim)]
    print(f"nn_llama {config}, seq {args.seq}; median of {args.repeat} runs (weights cut and scattered in each)")
    print(f"{'W':>2} {'threads ms':>11} {'processes ms':>13} {'ratio':>6} {'process start s':>16}")
    for w in counts:
        driver.build(w)
        t0 = time.perf_counter()
        process_workers(w)
        start = time.perf_counter() - t0
        times: dict[str, list[float]] = {"threads": [], "processes": []}
        for _ in range(args.repeat):
            for session in times:
                r = driver.run(inputs, w, weights=weights, backend="tvm", session=session)
                assert r.ok, r.comparison.mismatch
                times[session].append(r.timings["run"])
        t, p = (statistics.median(times[k]) * 1e3 for k in ("threads", "processes"))
        print(f"{w:>2} {t:>11.1f} {p:>13.1f} {p / t:>6.2f} {start:>16.2f}")
    close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
