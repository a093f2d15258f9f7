"""Time `distir verify` (distir.verification.verify) on the bundled Llama layer and on llama_stack.

    PYTHONPATH=python python scripts/bench_verify.py [--max-count 8] [--layers 32] [--s 13]

Prints one line per case: the model, the counts checked, the seconds (distribute once, then per
count specialize, simulate, compare) and the verdict's status. The "every count" cases prove
that the counts past a cutoff C compute what C computes and run counts 1..C (docs/verify.md).
"""

from __future__ import annotations

import argparse
import time

from distir import examples
from distir.verification import verify


def case(name: str, mod, counts, dims) -> None:
    """``counts`` None: every count (the cutoff argument, then counts 1..C)."""
    t0 = time.perf_counter()
    v = verify(mod, counts=counts, dims=dims)
    seconds = time.perf_counter() - t0
    print(f"{name:<26} counts {v.counts[0]}..{v.counts[-1]:<4} {seconds:7.2f} s  {v.status}"
          + ("" if v.ok else f": {v}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-count", type=int, default=8)
    ap.add_argument("--layers", type=int, default=32, help="depth of llama_stack (0 skips it)")
    ap.add_argument("--s", type=int, default=13, help="the sequence length")
    args = ap.parse_args()
    counts = list(range(1, args.max_count + 1))
    dims = {"s": args.s}
    case("llama", examples.load("llama"), counts, dims)
    case("llama (1..32)", examples.load("llama"), list(range(1, 33)), dims)
    case("llama (every count)", examples.load("llama"), None, dims)
    if args.layers:
        t0 = time.perf_counter()
        mod = examples.llama_stack(args.layers)
        print(f"(llama_stack({args.layers}) built in {time.perf_counter() - t0:.2f} s)")
        case(f"llama_stack({args.layers})", mod, counts, dims)
        case(f"llama_stack({args.layers}) (every count)", mod, None, dims)


if __name__ == "__main__":
    main()
