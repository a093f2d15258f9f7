"""Time `distir verify` (distir.verification.verify) on the bundled Llama layer and on llama_stack.

    PYTHONPATH=python python scripts/bench_verify.py [--max-count 8] [--layers 32] [--s 13] [--old]

Prints one line per case: the model, the counts run, the seconds (distribute once, then per
count specialize, simulate, compare) and the verdict's status. The "every count" cases prove
that every count computes what one of the counts run computes (docs/verify.md, "Every count"):
one count per class, where the classes come from evaluating every index formula at every
count up to the horizon T + 1 and z3 past it. ``--old`` also times what the argument ran
before the classes, every count 1..T + 1, and prints the ratio.
"""

from __future__ import annotations

import argparse
import time

from distir import examples
from distir.verification import verify


def case(name: str, mod, counts, dims) -> tuple[float, object]:
    """``counts`` None: every count (the classes, then one count of each)."""
    t0 = time.perf_counter()
    v = verify(mod, counts=counts, dims=dims)
    seconds = time.perf_counter() - t0
    shown = f"{len(v.counts)} counts to {v.counts[-1]}"
    print(f"{name:<34} {shown:<20} {seconds:7.2f} s  {v.status}" + ("" if v.ok else f": {v}"), flush=True)
    return seconds, v


def every_count(name: str, mod, dims, old: bool) -> None:
    new, v = case(f"{name} (every count)", mod, None, dims)
    if old and v.cutoff:
        before, _ = case(f"{name} (counts 1..{v.cutoff}, as before)", mod, list(range(1, v.cutoff + 1)), dims)
        print(f"{name}: every count in {new:.2f} s, {before / new:.1f}x faster than running 1..{v.cutoff}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-count", type=int, default=8)
    ap.add_argument("--layers", type=int, default=32, help="depth of llama_stack (0 skips it)")
    ap.add_argument("--s", type=int, default=13, help="the sequence length")
    ap.add_argument("--old", action="store_true", help="also run every count up to the horizon, as before")
    args = ap.parse_args()
    counts = list(range(1, args.max_count + 1))
    dims = {"s": args.s}
    case("llama", examples.load("llama"), counts, dims)
    every_count("llama", examples.load("llama"), dims, args.old)
    if args.layers:
        t0 = time.perf_counter()
        mod = examples.llama_stack(args.layers)
        print(f"(llama_stack({args.layers}) built in {time.perf_counter() - t0:.2f} s)")
        case(f"llama_stack({args.layers})", mod, counts, dims)
        every_count(f"llama_stack({args.layers})", mod, dims, args.old)


if __name__ == "__main__":
    main()
