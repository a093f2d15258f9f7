"""``distir verify``: run the lowered module at every count of a domain against the global program.

A sampled check, said so in its verdict: every count checked, or the smallest count that gives a
wrong number (with the ``distir run`` command that shows it), or what stopped the check. Nothing
is claimed for counts that were not run (docs/verify.md).
"""

from __future__ import annotations

import argparse
import sys

HELP = "check the distributed program against the global one at every count 1..N (a counterexample, or checked)"
DESCRIPTION = """\
Distribute a global-view module once (num_workers symbolic), or take the local-view module
given with --against (a lowering written or edited by hand), then for every count of the
domain (default 1..8) specialize it, run it on distir's SPMD simulator and compare the
assembled outputs with the single-device interpreter on the same seeded random inputs:
integer and bool outputs exactly (replicas too), float outputs within their dtype's
tolerance (as distir run). Other symbolic dims take --bind values (default 13, a prime, so
that every count from 2 on cuts them unevenly).

The verdict is one of:
  CHECKED          every count of the domain matched. A sample: counts, sizes and inputs
                   outside it were not run, and nothing is proved for them.
  COUNTEREXAMPLE   the smallest count that differs, the output element that differs most,
                   the workers holding it, and a command that shows the wrong number.
  NOT CHECKED      a count the lowered module refuses, named.
Exit status 0 for CHECKED, 1 otherwise (and on an error)."""
EPILOG = """\
examples:
  distir verify model.py                          counts 1..8
  distir verify model.py --counts 1-32 --bind s=7 counts 1..32, the sequence length 7
  distir verify global.py --against local.py      a hand-written lowering of global.py

What is checked and what is not: docs/verify.md."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .args import parse_binding, positive_float, seed, sweep_counts

    parser.add_argument("file", metavar="FILE", help="the global-view module ('-' for stdin)")
    parser.add_argument("--against", metavar="LOCAL",
                        help="a local-view module to check instead of the distribute pipeline's output")
    parser.add_argument("--counts", type=sweep_counts, metavar="COUNTS",
                        help="the counts to check: 1-16, 1,2,3,5 or 1-64x2 (default 1-8); each at most 4096, "
                        "65536 workers in all")
    parser.add_argument("--seed", type=seed, default=0, help="seed (>= 0) of the random inputs and partial splits")
    parser.add_argument("--bind", action="append", default=[], type=parse_binding, metavar="NAME=INT",
                        help="value of another symbolic dim, e.g. s=7 (default 13), or of a second mesh axis")
    parser.add_argument("--func", metavar="NAME", help="function to check (default: main, or the only one)")
    parser.add_argument("--symbol", default="num_workers", help="the mesh size the counts set (default num_workers)")
    parser.add_argument("--max-seconds", type=positive_float, metavar="S",
                        help="stop before a count once S seconds have gone (NOT CHECKED, naming the count)")
    exact = parser.add_mutually_exclusive_group()
    exact.add_argument("--exact-floats", dest="exact_floats", action="store_true", default=None,
                       help="run both programs in float64 on small integer inputs and compare floats exactly, instead "
                       "of random floats within a tolerance, where the ops allow it (sums, products, moves, maxima); "
                       "else the tolerance, naming why (default: that exact run as well as the random one, where allowed)")
    exact.add_argument("--no-exact-floats", dest="exact_floats", action="store_false",
                       help="random floats within a tolerance only")


def run(args: argparse.Namespace) -> int:
    from . import phase, read_module
    from .models import function_name

    dims: dict[str, int] = {}
    for b in args.bind:
        dims.update(b)
    mod = read_module(args.file)
    func = function_name(mod, args.func)
    from ..ir.verify import verify as verify_ir

    verify_ir(mod)  # a bad placement is named where it is written, before any work
    local = None
    if args.against:
        local = read_module(args.against)
        verify_ir(local)
    from ..verification import verify

    with phase(f"checking {args.file} count by count"):
        verdict = verify(mod, local, counts=args.counts, dims=dims, seed=args.seed, func=func, symbol=args.symbol,
                         source=args.file, against=args.against, max_seconds=args.max_seconds, exact_floats=args.exact_floats)
    sys.stdout.write(f"{verdict}\n")
    sys.stdout.write(f"({verdict.seconds:.2f} s)\n")
    return 0 if verdict.ok else 1
