"""``distir``: the umbrella command. Each subcommand lives in its own module.

To add a subcommand, add one line to :data:`COMMANDS` mapping its name to a module that
defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int`` (and
optionally ``DESCRIPTION`` and ``EPILOG``). Errors are handled here for all of them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMANDS: dict[str, str] = {
    "build": "distir.cli.build",
    "demo": "distir.cli.demo",
    "example": "distir.cli.example",
    "opt": "distir.cli.opt",
    "passes": "distir.cli.passes",
    "run": "distir.cli.run",
    "sweep": "distir.cli.sweep",
    "show": "distir.cli.show",
    "verify": "distir.cli.verify",
}

EPILOG = """\
examples:
  distir demo                                   a bundled Llama layer, end to end on 4 simulated workers
  distir example attention -o model.py          write a bundled model (distir example lists them)
  distir opt model.py -p distribute --bind num_workers=4
                                                distribute, then specialize (same as distir-opt)
  distir run model.py -n 4 --backend tvm        distribute, build with TVM, run on Disco, compare
  distir build model.py -o model.art            build with TVM once, for every count
  distir run --artifact model.art -n 4          run that build on 4 Disco workers, compare
  distir sweep model.py --num-workers 1,2,4,8 --bind s=2048
                                                memory and communication per device count
  distir show model.py --tensor w1 -n 4         how a tensor lies over the mesh
  distir passes                                 pass and pipeline names for -p
  distir <command> --help                       options of one command"""


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="distir",
        description="distir: distribute tensor programs over device meshes with a symbolic number of workers.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"distir {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(
            name,
            help=module.HELP,
            description=getattr(module, "DESCRIPTION", module.HELP),
            epilog=getattr(module, "EPILOG", None),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``distir`` console script."""
    from . import report_errors

    args = build_parser().parse_args(argv)
    return report_errors(f"distir {args.command}", lambda: args._run(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
