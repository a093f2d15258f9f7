"""``distir passes``: list the passes and named pipelines that ``-p`` accepts."""

from __future__ import annotations

import argparse

HELP = "list registered passes and pipelines"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--names", action="store_true", help="print only the names, one per line")


def run(args: argparse.Namespace) -> int:
    from ..transform import list_passes, list_pipelines, pass_doc

    passes, pipelines = list_passes(), list_pipelines()
    if args.names:
        print("\n".join([*passes, *pipelines]))
        return 0
    width = max((len(n) for n in [*passes, *pipelines]), default=0)
    print("passes:")
    for name, cls in passes.items():
        print(f"  {name.ljust(width)}  {pass_doc(cls)}  [{cls.__name__}, opt level {cls.opt_level}]")
    print("pipelines:")
    if not pipelines:
        print("  (none registered)")
    for name, factory in pipelines.items():
        print(f"  {name.ljust(width)}  {pass_doc(factory)}")
    return 0
