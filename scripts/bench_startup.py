#!/usr/bin/env python3
"""Benchmark: how long ``distir --help`` and ``distir-opt --help`` take to start.

Each command runs as a fresh process, ``--runs`` times, interleaved with two references run
the same way in the same loop: ``python -c pass`` (the interpreter alone) and ``python -c
"import numpy"`` (what importing numpy would add). Prints the minimum and the median wall
time of each, its minimum CPU time (user + system: what a loaded machine does not inflate as
much), and each command's minimum over the bare interpreter's. The bar: both ``--help``
commands at most 0.4 s (minimum of 3), which needs the CLI to import numpy, TVM, rich and the
passes only when a command runs (they are imported inside the commands).

Compiled bytecode is used as an installed package has it (pip writes it at install time): the
children write and read it under a temporary ``PYTHONPYCACHEPREFIX``, warmed by one untimed run
of each command, even where ``PYTHONDONTWRITEBYTECODE`` is set.

The commands run as ``python -m distir.cli.main`` and ``python -m distir.cli.opt`` with this
interpreter (the console scripts ``distir`` and ``distir-opt`` call the same ``main``).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

BAR_SECONDS = 0.4


def commands() -> dict[str, list[str]]:
    py = sys.executable
    return {
        "python -c pass": [py, "-c", "pass"],
        'python -c "import numpy"': [py, "-c", "import numpy"],
        "distir --help": [py, "-m", "distir.cli.main", "--help"],
        "distir-opt --help": [py, "-m", "distir.cli.opt", "--help"],
    }


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child: user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"bench_startup: {' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="runs of each command, interleaved (default 5)")
    args = ap.parse_args()
    cmds = commands()
    times: dict[str, list[float]] = {name: [] for name in cmds}
    cpu: dict[str, list[float]] = {name: [] for name in cmds}
    with tempfile.TemporaryDirectory(prefix="distir-bench-pyc-") as pyc:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = pyc
        for argv in cmds.values():  # bytecode written, file cache warm: once each, untimed
            timed(argv, env)
        for _ in range(max(1, args.runs)):
            for name, argv in cmds.items():
                seconds, used = timed(argv, env)
                times[name].append(seconds)
                cpu[name].append(used)
    bare = min(times["python -c pass"])
    print(f"{'command':<26} {'min s':>7} {'median s':>9} {'min CPU s':>10} {'min - bare python s':>20}")
    for name, ts in times.items():
        print(f"{name:<26} {min(ts):>7.3f} {statistics.median(ts):>9.3f} {min(cpu[name]):>10.3f} "
              f"{min(ts) - bare:>20.3f}")
    worst = max(min(times["distir --help"]), min(times["distir-opt --help"]))
    print(f"slower --help: {worst:.3f} s ({'within' if worst <= BAR_SECONDS else 'OVER'} the {BAR_SECONDS} s bar, "
          f"min of {args.runs})")


if __name__ == "__main__":
    main()
