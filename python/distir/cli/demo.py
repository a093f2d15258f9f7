"""``distir demo``: the README's main job, on a module shipped inside the package.

Today it parses, verifies and prints the bundled MLP. :func:`demo_job` is the one place
that decides what the demo does, so later work can make it run the whole distribute
pipeline (on a Llama layer) without touching the command plumbing.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

HELP = "run the main job on a bundled example (today: parse, verify and print the MLP)"
DEFAULT_EXAMPLE = "mlp"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--example", default=DEFAULT_EXAMPLE, metavar="NAME", help=f"bundled example to use (default {DEFAULT_EXAMPLE})"
    )
    parser.add_argument("--list", action="store_true", help="list the bundled examples and exit")


def demo_job(example: str, out: TextIO) -> int:
    """Parse, verify and print bundled ``example``; say what was done."""
    from .. import examples
    from ..ir.verify import verify

    path = examples.path(example)
    mod = examples.load(example)
    verify(mod)
    n_bindings = sum(1 for f in mod.functions.values() for _ in f.bindings())
    out.write(mod.script().rstrip() + "\n\n")
    out.write(
        f"distir demo: parsed and verified the bundled example '{example}' ({path}): "
        f"{len(mod.functions)} function(s), {n_bindings} binding(s), {len(mod.meshes())} device mesh(es). OK\n"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    from .. import examples

    if args.list:
        print("\n".join(examples.names()))
        return 0
    return demo_job(args.example, sys.stdout)
