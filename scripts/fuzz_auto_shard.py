#!/usr/bin/env python3
"""Random plain modules on symbolic meshes, laid out by ``auto-shard`` with its default budgets.

A plain module says nothing about layouts: one device mesh with a symbolic axis (``num_workers``,
alone or beside static axes, as ``scripts/fuzz.py`` draws them), plain ``R.Tensor`` parameters,
and the ops of ``fuzz.py``'s generator without hints or redistributes. With the default budgets
(``min+10%`` weights, ``min+25%`` activations) auto-shard must always find a layout: the ``min``
budgets are met by construction (docs/auto_shard.md). Each case is auto-sharded, distributed,
and (``--run``) simulated at a few counts and compared with one device.

Every case gets one class: ``laid out`` (and, with ``--run``, ``equal`` or ``WRONG``),
``refused`` (a one-line DistirError: listed with its message), ``SLOW`` (more than ``--time-limit``
seconds of CPU time) or ``CRASH`` (anything else). The exit status is 1 when a case was refused,
wrong, slow or crashed.

examples:
  python scripts/fuzz_auto_shard.py --cases 212 --seed 0       the issue-22 sample size
  python scripts/fuzz_auto_shard.py --cases 50 --run           also simulate and compare
  python scripts/fuzz_auto_shard.py --seed 0 --only 7 --print  print case 7

Run from the repository root with the package importable (PYTHONPATH=python).
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fuzz  # noqa: E402  (the generator this one narrows)


class PlainGenerator(fuzz.Generator):
    """``fuzz.Generator`` narrowed to plain modules: one mesh with a symbolic axis (of ``mesh_shapes``,
    by default ``fuzz.SYM_MESHES``), plain parameters, no hints, no redistributes."""

    OPS = {k: v for k, v in fuzz.Generator.OPS.items() if k not in ("redistribute", "cross", "hint")}

    def __init__(self, rng: random.Random, cfg: fuzz.GenConfig | None = None, mesh_shapes=None):
        super().__init__(rng, cfg)
        self.mesh_shapes = list(mesh_shapes or fuzz.SYM_MESHES)

    def meshes(self) -> tuple:
        return (fuzz.Mesh(self.rng.choice(self.mesh_shapes), fuzz.Lin(self.rng.choice([0, 0, 0, 1, 2]))),)

    def new_param(self, shape, dtype, mesh, plain_ok=True, placement=None):
        name = f"p{len(self.params)}"
        self.params.append(fuzz.Param(name, tuple(shape), dtype))
        v = fuzz.Val(name, tuple(shape), dtype, mesh)
        self.vals.append(v)
        return v


def plain_program(seed: int, index: int, max_ops: int = fuzz.GenConfig.max_ops, mesh_shapes=None) -> fuzz.Program:
    """Case ``index`` of run ``seed``: the same plain program on every machine."""
    cfg = fuzz.GenConfig(max_ops=max_ops)
    return PlainGenerator(random.Random(f"distir-plain:{seed}:{index}"), cfg, mesh_shapes).program()


def auto_shard(text: str, sizes=None):
    """The parsed module and auto-shard's output with the default budgets (and the pass, for its report)."""
    import distir
    from distir.transform.layout_choice.auto_shard import AutoShard

    mod = distir.parse(text)
    p = AutoShard(sizes=sizes)
    return mod, p(mod), p


class _Slow(BaseException):
    pass


def _on_timer(signum, frame):
    raise _Slow()


def run_case(prog: fuzz.Program, counts: tuple[int, ...] = (), limit: float = 0) -> tuple[str, str]:
    """(class, detail) of one program: auto-shard, then with ``counts`` distribute, simulate and compare;
    ``limit``: seconds of CPU time (timed by the process's CPU clock: a loaded machine does not count)."""
    from distir.driver import Driver, random_inputs
    from distir.errors import DistirError

    if limit:
        signal.signal(signal.SIGPROF, _on_timer)
        signal.setitimer(signal.ITIMER_PROF, limit)
    try:
        mod, laid, p = auto_shard(prog.render())
        if not counts:
            return "laid out", ", ".join(f"{k} {v}" for k, v in p.report.layouts().items())
        d = Driver(laid, bind=prog.dim_values)
        inputs = random_inputs(mod, dims=prog.dim_values, seed=0)
        for w in counts:
            r = d.run(inputs, w)
            if not r.ok:
                return "WRONG", f"num_workers={w}: largest difference {r.max_diff}"
        return "equal", ""
    except _Slow:
        return "SLOW", f"more than {limit:g} s of CPU time"
    except DistirError as err:
        return "refused", str(err).splitlines()[0]
    except Exception as err:  # noqa: BLE001  (a crash is what this script looks for)
        return "CRASH", f"{type(err).__name__}: {err}"
    finally:
        if limit:
            signal.setitimer(signal.ITIMER_PROF, 0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("examples:")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--only", type=int, help="run one case, verbosely")
    ap.add_argument("--print", action="store_true", help="with --only: print the program and stop")
    ap.add_argument("--time-limit", type=float, default=30.0, help="seconds of CPU time per case (0: none)")
    ap.add_argument("-v", "--verbose", action="store_true", help="a line per case on stderr")
    ap.add_argument("--run", action="store_true", help="also simulate at 1, 3 and 5 workers and compare with one device")
    args = ap.parse_args(argv)
    counts = (1, 3, 5) if args.run else ()
    indices = [args.only] if args.only is not None else range(args.cases)
    classes: Counter = Counter()
    messages: Counter = Counter()
    t0 = time.perf_counter()
    for i in indices:
        prog = plain_program(args.seed, i)
        if args.print:
            print(prog.render())
            return 0
        t = time.perf_counter()
        cls, detail = run_case(prog, counts, args.time_limit)
        classes[cls] += 1
        if cls not in ("laid out", "equal"):
            messages[f"{cls}: {detail}"[:160]] += 1
        if args.verbose or args.only is not None or cls not in ("laid out", "equal"):
            print(f"case {i}: {cls} ({time.perf_counter() - t:.1f} s): {detail}", file=sys.stderr, flush=True)
    print(f"{sum(classes.values())} plain modules (seed {args.seed}) in {time.perf_counter() - t0:.1f} s: "
          + ", ".join(f"{c} {n}" for c, n in classes.most_common()))
    for m, n in messages.most_common(10):
        print(f"  {n:4d} x {m}")
    return 1 if any(c in classes for c in ("refused", "WRONG", "SLOW", "CRASH")) else 0


if __name__ == "__main__":
    sys.exit(main())
