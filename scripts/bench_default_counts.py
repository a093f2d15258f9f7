#!/usr/bin/env python3
"""The distribute pipeline's time on ``llama_stack(n)`` (default 80 layers) under two source trees,
in one run: this tree's ``distir`` (planning for the default counts, 1 to 8) against another's
(``--base``, a ``python/`` folder: main's, where nothing declared meant the sampled counts only).

    PYTHONPATH=python python scripts/bench_default_counts.py --base /path/to/main/python [--layers 80] [--repeat 5]

Each side runs in its own process (its own imports), alternately, ``--repeat`` times; each process
times the pipeline alone (the module built first, solved cold), best of 2. Printed: the best of
each side and their ratio (this tree / base; the bound issue 39 sets is 1.10). With
``--declare 1,2,3,4,6,8`` this tree's side is declared those counts.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ONE = """
import sys, time, warnings
from distir.examples import llama_stack
from distir.transform import PassContext
from distir.transform.pipelines import distribute_pipeline
import distir
n, counts = int(sys.argv[1]), sys.argv[2]
made = llama_stack(n)
mod = distir.parse(made) if isinstance(made, str) else made
config = {"propagate-sharding.counts": [int(c) for c in counts.split(",")]} if counts else {}
best = float("inf")
for _ in range(2):
    try:
        from distir.transform.layout_choice.solution import forget_solved
        forget_solved()
    except ImportError:
        pass
    t = time.perf_counter()
    with warnings.catch_warnings(), PassContext(config=config):
        warnings.simplefilter("ignore")
        distribute_pipeline()(mod)
    best = min(best, time.perf_counter() - t)
print(best)
"""


def _time(python_path: Path, layers: int, counts: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(python_path))
    done = subprocess.run([sys.executable, "-c", ONE, str(layers), counts], env=env, capture_output=True,
                          text=True, timeout=900, check=False)
    if done.returncode != 0:
        sys.exit(f"bench_default_counts: error under {python_path}: {(done.stderr or done.stdout).strip()[-400:]}")
    return float(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, type=Path, help="the python/ folder of the tree to compare with")
    ap.add_argument("--layers", type=int, default=80)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--declare", default="", help="counts declared to this tree's side, comma-separated")
    args = ap.parse_args(argv)
    if not (args.base / "distir").is_dir():
        ap.error(f"--base: {args.base} holds no distir package")
    best = {"base": float("inf"), "work": float("inf")}
    for i in range(args.repeat):
        best["base"] = min(best["base"], _time(args.base, args.layers, ""))
        best["work"] = min(best["work"], _time(ROOT / "python", args.layers, args.declare))
        print(f"round {i + 1}/{args.repeat}: base {best['base']:.3f} s, this tree {best['work']:.3f} s", file=sys.stderr)
    what = f"declared {args.declare}" if args.declare else "default counts"
    print(f"llama_stack({args.layers}) distribute pipeline: base {best['base']:.3f} s, this tree ({what}) "
          f"{best['work']:.3f} s, ratio {best['work'] / best['base']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
