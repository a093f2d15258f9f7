#!/usr/bin/env python3
"""Compare a benchmark on two commits in one run: the working tree against a base commit.

Checks the base commit out into a temporary git worktree, then runs the benchmark command
alternately against the base's sources and the working tree's (PYTHONPATH chooses which
``distir`` is imported), ``--repeat`` times each, and reports the best wall time of each
and their ratio (working tree / base; below 1 means faster). Alternating the runs spreads
the machine's noise over both sides.

    python scripts/bench_compare.py --base HEAD~1 -- scripts/bench_pipeline.py --layers 8,32
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(cmd: list[str], python_path: Path, cwd: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(python_path))
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, *cmd], check=False, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        sys.exit(f"bench_compare: error: {' '.join(cmd)} failed under {python_path}:\n  " + "\n  ".join(tail))
    return elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="HEAD", help="the commit to compare against (default HEAD)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each side; the best is kept (default 3)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the benchmark script and its arguments, after --")
    args = ap.parse_args(argv)
    cmd = [c for c in args.command if c != "--"] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("give the benchmark command after --, e.g. -- scripts/bench_pipeline.py")
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    with tempfile.TemporaryDirectory(prefix="distir-bench-") as tmp:
        base_tree = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(base_tree), args.base], cwd=ROOT, check=True)
        try:
            best = {"base": float("inf"), "work": float("inf")}
            for i in range(args.repeat):
                for side, tree in (("base", base_tree), ("work", ROOT)):
                    # the script is the working tree's, so both sides run the same measurement
                    best[side] = min(best[side], _run(cmd, tree / "python", ROOT))
                print(f"round {i + 1}/{args.repeat}: base {best['base']:.2f} s, working tree {best['work']:.2f} s",
                      file=sys.stderr)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=ROOT, check=False)
    ratio = best["work"] / best["base"]
    print(f"{' '.join(cmd)}: base ({args.base}) {best['base']:.2f} s, working tree {best['work']:.2f} s, "
          f"ratio {ratio:.2f} ({'faster' if ratio < 1 else 'slower'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
