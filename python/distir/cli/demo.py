"""``distir demo``: the README's main job, end to end, on a module shipped inside the package.

It takes the bundled Llama decoder layer (laid out by its parameters only), runs the
distribute pipeline once with ``num_workers`` symbolic, specializes to 4 workers, runs the
SPMD simulator on random inputs, and checks the result against the single-device run,
reporting the collectives and the bytes each worker sent. :func:`demo_job` is the one
place that decides what the demo does.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

HELP = "distribute a bundled model (a Llama layer) for 4 workers, simulate it, check it against one device"
DESCRIPTION = """\
Run the main job on a model shipped with distir: parse it, run the distribute pipeline
(propagate-sharding, legalize-redistribute, canonicalize, lower-global-view-to-local-view)
once with num_workers symbolic, specialize to --num-workers, simulate the workers on random
inputs, and compare with the single-device result. Exit status 0 when they match."""
EPILOG = """\
examples:
  distir demo                                   Llama layer, 4 workers
  distir demo --example attention -n 8          Megatron attention block, 8 workers
  distir demo gpt2                              GPT-2 written with relax.frontend.nn, by its plan
  distir demo --print-ir                        also print the lowered per-worker module
  distir demo --list                            names of the bundled models"""
DEFAULT_EXAMPLE = "llama"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .args import MAX_WORKERS, positive_int, seed, workers

    parser.add_argument("name", nargs="?", metavar="NAME", help="bundled model to use (as --example)")
    parser.add_argument("--example", default=None, metavar="NAME",
                        help=f"bundled model to use (default {DEFAULT_EXAMPLE}; see --list)")
    parser.add_argument("-n", "--num-workers", type=workers, default=4, metavar="N",
                        help=f"device count to specialize to and simulate (default 4, at most {MAX_WORKERS})")
    parser.add_argument("--seq-len", type=positive_int, default=32, metavar="S",
                        help="value of every other symbolic dim, e.g. the sequence length (default 32)")
    parser.add_argument("--seed", type=seed, default=0, help="seed (>= 0) of the random inputs (default 0)")
    parser.add_argument("--print-ir", action="store_true", help="print the lowered per-worker module (symbolic)")
    parser.add_argument("--list", action="store_true", help="list the bundled models and exit")


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def demo_job(example: str, out: TextIO, *, num_workers: int = 4, seq_len: int = 32, seed: int = 0,
             print_ir: bool = False) -> int:
    """Distribute ``example``, specialize, simulate, compare; write a report to ``out``."""
    from .. import examples
    from ..driver import Driver, random_inputs
    from ..errors import DistirError
    from ..ir.verify import verify

    path = examples.path(example)
    mod = examples.load(example)
    verify(mod)
    func = "main" if "main" in mod.functions else next(iter(mod.functions))  # an nn model's first method
    n_bindings = sum(1 for f in mod.functions.values() for _ in f.bindings())
    out.write(f"distir demo: '{example}' ({path}): {n_bindings} bindings, global view, num_workers symbolic\n")

    driver = Driver(mod, func=func, time_passes=True)
    lowered = driver.local
    passes = ", ".join(f"{name} {seconds * 1e3:.0f} ms" for name, seconds in driver.pass_seconds)
    out.write(f"  1. distribute pipeline, once: {passes}\n")
    if print_ir:
        out.write("\n" + lowered.script().rstrip() + "\n\n")

    values = dict.fromkeys(sorted(driver.mesh_symbols), num_workers)
    driver.specialize(values)
    bound = ", ".join(f"{k}={v}" for k, v in values.items()) or "nothing symbolic"
    out.write(f"  2. specialize ({bound}): {driver.specialize_seconds(values) * 1e3:.0f} ms\n")

    try:
        inputs = random_inputs(mod, func, dims={}, seed=seed, default_dim=seq_len)
    except (MemoryError, ValueError) as err:  # numpy: too large to allocate, or beyond its largest array
        raise DistirError(f"cannot make the random inputs with --seq-len {seq_len}: "
                          f"{str(err).splitlines()[0].rstrip('.')}; use a smaller --seq-len") from None
    result = driver.run(inputs, values, seed=seed)
    stats = result.stats
    workers = stats.simulated or num_workers
    out.write(f"  3. simulated {workers} worker{'' if workers == 1 else 's'} on random inputs (other dims = {seq_len}, seed {seed})\n")
    kinds = ", ".join(f"{k} x{v}" for k, v in sorted(stats.counts.items())) or "none"
    out.write(f"     collectives: {kinds}; sent per worker: {_fmt_bytes(float(stats.bytes_per_worker))}\n")
    verdict = "matches" if result.ok else "DOES NOT match"
    out.write(f"     result {verdict} the single-device run (largest difference {result.max_diff:.3g})\n")
    out.write("OK\n" if result.ok else "FAILED\n")
    return 0 if result.ok else 1


def run(args: argparse.Namespace) -> int:
    from .. import examples

    if args.list:
        print("\n".join(examples.names()))
        return 0
    from .args import UsageError

    if args.name is not None and args.example is not None and args.name != args.example:
        raise UsageError(f"two examples given: '{args.name}' and --example {args.example}")
    example = args.name or args.example or DEFAULT_EXAMPLE
    return demo_job(example, sys.stdout, num_workers=args.num_workers, seq_len=args.seq_len, seed=args.seed,
                    print_ir=args.print_ir)
