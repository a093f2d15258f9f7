#!/usr/bin/env python3
"""Worker faults on Disco worker processes: random programs of scripts/fuzz.py run with
``session="processes"`` while a worker process is killed, stopped or slowed.

Each case is a program of ``fuzz.generate_case`` (seed, index), distributed once, exported to
Relax and built once; at its first device count whose Disco session has a worker process:

1. a clean run, which must equal the single-device run;
2. a faulted run: a random worker process is hit at a random moment (0 to 1.5 times the
   clean run's time, so before, during or after the run) by
   - ``kill``: SIGKILL;
   - ``stop``: SIGSTOP, for good;
   - ``slow``: SIGSTOP for a third of the bound, then SIGCONT;
   and the run must equal the single-device run or raise ``DiscoRunError`` naming that worker,
   within the bound (``DISTIR_WORKER_TIMEOUT``, --bound) plus --slack seconds; a slowed worker
   must not fail it;
3. for kill and stop, a run after the fault has surely landed: a ``DiscoRunError`` naming the
   worker within the bound plus slack (or a right answer on a new session, when the faulted run
   already failed);
4. a recovery run: right, on a session whose processes are new for kill and stop.

Every case runs in a child process (an abort of the caller is then a CRASH, not the end of
the fuzzer) with a time limit; classes, the worst first:

  HANG          a run took longer than the bound plus slack, or the case outlived its limit
  CRASH         the child died (an abort), or an exception that is not a DiscoRunError, or a
                DiscoRunError that does not name the faulted worker or where none may be
  WRONG-NUMBER  a run returned numbers that differ from the single-device run
  OK            every run as above
  SKIP          the program does not run cleanly on Disco (a refusal, one device only)

The exit status is 1 when a HANG, CRASH or WRONG-NUMBER case was found, else 0.

examples:
  PYTHONPATH=python python scripts/fuzz_faults.py --cases 6 --seed 1
  PYTHONPATH=python python scripts/fuzz_faults.py --minutes 5 --faults stop,slow --bound 4
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fuzz  # the generator of random programs (imported after the path is set)

FAULTS = ("kill", "stop", "slow")
FATAL = ("HANG", "CRASH", "WRONG-NUMBER")


def _build(case):
    """(lowered, built, inputs, expected) of a case, or a reason to skip it."""
    import tvm

    import distir
    from distir.runtime import run
    from distir.transform.pipelines import distribute_pipeline
    from distir.tvm import to_relax

    from distir.driver import random_inputs

    mod = distir.parse(case.text)
    inputs = random_inputs(mod, "main", case.program.dim_values, seed=case.seed)  # the default generator's inputs
    expected = run(mod, *inputs)
    lowered = distribute_pipeline()(mod)
    return lowered, tvm.compile(to_relax(lowered), target="llvm"), inputs, expected


class _Fault:
    """A fault that hits one worker process after ``delay`` seconds (on a timer thread)."""

    def __init__(self, kind: str, pid: int, delay: float, bound: float):
        self.kind, self.pid, self.landed = kind, pid, threading.Event()
        self.timer = threading.Timer(delay, self._hit, (bound,))
        self.timer.daemon = True

    def _hit(self, bound: float) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL if self.kind == "kill" else signal.SIGSTOP)
            if self.kind == "slow":
                time.sleep(bound / 3)
                os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass  # the session was already torn down
        self.landed.set()

    def undo(self) -> None:
        """Let a stopped process go (it is killed with its session, or was)."""
        self.timer.cancel()
        try:
            os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def _case(seed: int, index: int, fault: str, bound: float, slack: float) -> tuple[str, str]:
    """Run one case (in the child process): (class, what happened)."""
    os.environ["DISTIR_WORKER_TIMEOUT"] = str(bound)
    from distir.driver import run_disco
    from distir.errors import DistirError
    from distir.tvm import DiscoRunError
    from distir.tvm.disco import workers as disco_workers

    case = fuzz.generate_case(seed, index)
    try:
        lowered, built, inputs, expected = _build(case)
    except DistirError as err:
        return "SKIP", f"not built: {err}"
    rng = random.Random(f"distir-fuzz-faults:{seed}:{index}")
    opts = fuzz.Options()

    def run(w: int, what: str, pid: int | None, may_fail: bool):
        """One run: ('ok' | 'failed', seconds), or raise _Verdict."""
        t0 = time.monotonic()
        try:
            got = run_disco(built, lowered, *inputs, num_workers=w, seed=case.seed, session="processes")
        except DiscoRunError as err:
            took = time.monotonic() - t0
            if took > bound + slack:
                raise _Verdict("HANG", f"{what}: DiscoRunError after {took:.1f} s (bound {bound:g} s): {err}") from None
            if not may_fail or pid is None or f"(process {pid}" not in str(err):
                raise _Verdict("CRASH", f"{what}: unexpected DiscoRunError: {err}") from None
            return "failed", took
        took = time.monotonic() - t0
        if took > bound + slack:
            raise _Verdict("HANG", f"{what}: took {took:.1f} s (bound {bound:g} s)")
        ok, worst = fuzz.compare_case(case.program, got, expected, inputs, opts.rtol, opts.atol)
        if not ok:
            raise _Verdict("WRONG-NUMBER", f"{what}: differs from one device by {worst:.3g}")
        return "ok", took

    for w in case.workers:
        disco_workers.close_all()
        try:
            t0 = time.monotonic()
            run_disco(built, lowered, *inputs, num_workers=w, seed=case.seed, session="processes")
            start = time.monotonic() - t0  # the session's start included
        except DistirError:
            continue
        kept = list(disco_workers._CACHE.values())
        procs = {k: p.pid for s in kept for k, p in s.pool.procs.items()}
        if not procs:
            continue  # one worker: nothing to hit
        try:
            _, clean = run(w, "clean run", None, False)
            victim = rng.choice(sorted(procs))
            pid = procs[victim]
            hit = _Fault(fault, pid, rng.uniform(0, 1.5 * clean), bound)
            hit.timer.start()
            try:
                first, _ = run(w, f"{fault} worker {victim} at random", pid, fault != "slow")
                hit.landed.wait(1.5 * clean + bound)
                if fault != "slow":
                    after, _ = run(w, f"run after {fault}", pid, True)
                    if first == "ok" and after != "failed":
                        raise _Verdict("CRASH", f"the run after {fault} of worker {victim} did not fail")
            finally:
                hit.undo()
            run(w, "recovery run", None, False)
            fresh = {p.pid for s in disco_workers._CACHE.values() for p in s.pool.procs.values()}
            if fault != "slow" and pid in fresh:
                raise _Verdict("CRASH", f"the {fault} worker's process {pid} still serves the next session")
        except _Verdict as v:
            return v.cls, f"num_workers={w}: {v.message}"
        return "OK", f"num_workers={w}: {fault} of worker {victim} (start {start:.1f} s, run {clean:.2f} s)"
    return "SKIP", "no device count runs on Disco with a worker process"


class _Verdict(Exception):
    def __init__(self, cls: str, message: str):
        super().__init__(message)
        self.cls, self.message = cls, message


def _child(conn, args):
    import warnings

    warnings.simplefilter("ignore")  # the pipeline's hints about ambiguous layouts
    try:
        conn.send(_case(*args))
    except BaseException as err:  # noqa: BLE001 - reported as a CRASH
        conn.send(("CRASH", f"{type(err).__name__}: {str(err).splitlines()[-1] if str(err) else ''}"))


def run_in_child(args, limit: float) -> tuple[str, str]:
    """:func:`_case` in a fresh process: an abort is a CRASH, a case past ``limit`` a HANG."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(child, args), daemon=True)
    proc.start()
    child.close()
    try:
        if not parent.poll(limit):
            return "HANG", f"the case outlived its limit of {limit:g} s"
        try:
            return parent.recv()
        except (EOFError, ConnectionError):
            proc.join(5)
            return "CRASH", f"the case's process died (exit status {proc.exitcode})"
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=6, help="number of cases (default 6)")
    ap.add_argument("--minutes", type=float, default=10.0, help="stop starting cases after this long (default 10)")
    ap.add_argument("--seed", type=int, default=1, help="the fuzzer's seed (programs as scripts/fuzz.py --seed)")
    ap.add_argument("--first", type=int, default=0, help="index of the first case (default 0)")
    ap.add_argument("--faults", default=",".join(FAULTS), help="faults to draw from, of kill,stop,slow (default all)")
    ap.add_argument("--bound", type=float, default=5.0, help="DISTIR_WORKER_TIMEOUT for the runs, seconds (default 5)")
    ap.add_argument("--slack", type=float, default=15.0, help="seconds past the bound a failure may take (default 15)")
    ap.add_argument("--case-limit", type=float, help="seconds a case may take in all, its build included (default "
                    "300 + 6 x (bound + slack)); past it the case is a HANG")
    args = ap.parse_args(argv)
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    if not faults or any(f not in FAULTS for f in faults):
        ap.error(f"--faults: expected some of {','.join(FAULTS)}, got '{args.faults}'")
    if args.bound <= 0 or args.slack < 0 or args.cases < 1:
        ap.error("--bound must be positive, --slack not negative, --cases at least 1")
    limit = args.case_limit or 300.0 + 6 * (args.bound + args.slack)  # the build, then six bounded runs
    end = time.monotonic() + 60 * args.minutes
    counts: Counter = Counter()
    for i in range(args.first, args.first + args.cases):
        if time.monotonic() > end:
            break
        fault = faults[(i - args.first) % len(faults)]
        t0 = time.monotonic()
        cls, message = run_in_child((args.seed, i, fault, args.bound, args.slack), limit)
        counts[cls] += 1
        print(f"case {i} [{fault}] {cls} ({time.monotonic() - t0:.0f} s): {message}", flush=True)
    print("summary: " + ", ".join(f"{c} {n}" for c, n in sorted(counts.items())))
    return 1 if any(counts[c] for c in FATAL) else 0


if __name__ == "__main__":
    sys.exit(main())
