"""``distir build``: distribute a module and build it with TVM once, for every count, into a folder.

The distribute pipeline runs once with ``num_workers`` symbolic; the local-view module is exported
to Relax and compiled for ``--target`` with ``num_workers`` left symbolic, so the one library runs
at any count. The folder (``-o``) gets the library and a manifest (:mod:`distir.tvm.artifact`);
``distir run --artifact DIR -n N`` runs it without compiling again.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from ..errors import DistirError

HELP = "distribute a module and build it with TVM once, into a folder that runs at every count"
DESCRIPTION = """\
Run a global-view module through the distribute pipeline (num_workers symbolic), export it to
TVM Relax and tvm.compile it for --target (default llvm) with num_workers left symbolic, then
write the shared library and a manifest (distir-artifact.json: the modules, the function, the
target, the library's SHA-256) into the folder -o. `distir run --artifact DIR -n N` runs it
at any count without compiling. Loading a shared library runs its code: run only artifacts
from builds you trust."""
EPILOG = """\
examples:
  distir build model.py -o model.art                    build for the CPU
  distir build model.py -o model.art --counts 2,8       laid out per class of 2 and 8, one build for both
  distir run --artifact model.art -n 4                  run it on 4 Disco workers, compare
  distir run --artifact model.art -n 3 --session processes"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .args import parse_binding, sweep_counts
    from .models import add_shard_arguments

    parser.add_argument("file", metavar="FILE", help="global-view module to build ('-' for stdin)")
    parser.add_argument("-o", "--output", metavar="DIR", required=True,
                        help="the artifact's folder (made if missing; its library and manifest are replaced)")
    parser.add_argument("--target", metavar="TARGET", help="the TVM target to build for (default llvm, the CPU)")
    parser.add_argument("--func", metavar="NAME",
                        help="the function runs call by default (default: main, or the module's only function); "
                             "every function is built")
    parser.add_argument("--symbol", default="num_workers", help="the mesh size variable (default num_workers)")
    parser.add_argument("--bind", action="append", default=[], type=parse_binding, metavar="NAME=INT",
                        help="fix another mesh size in the build, e.g. tp=2 for a mesh (dp, tp) built with --symbol dp")
    parser.add_argument("--counts", type=sweep_counts, metavar="COUNTS",
                        help="the device counts the program is for (1,2,4 or 1-8): layouts are planned per class "
                             "of them, and the one build chooses each count's at run time (docs/propagation.md)")
    add_shard_arguments(parser)


def build_job(args: argparse.Namespace, out: TextIO) -> int:
    from ..driver import Driver
    from ..ir.verify import verify
    from ..tvm.targets import parse_target
    from . import phase, read_module
    from .args import UsageError, mesh_symbols
    from .models import apply_shard_plan, function_name
    from .run import _check_global_view

    target = args.target or "llvm"
    parse_target(target)  # an unknown target: one line before any work
    bind: dict[str, int] = {}
    for b in args.bind:
        bind.update(b)
    if args.symbol in bind:
        raise UsageError(f"--bind {args.symbol}={bind[args.symbol]}: {args.symbol} stays symbolic in the build; "
                         "give it at run time (distir run --artifact DIR -n N)")
    mod = read_module(args.file)
    func = function_name(mod, args.func)
    _check_global_view(mod, func, args.file)
    verify(mod)
    mod = apply_shard_plan(mod, args)
    meshes = mesh_symbols(mod)
    other = sorted(set(bind) - meshes)
    if other:
        raise UsageError(f"--bind {other[0]}: not a mesh size of the module (its mesh sizes: "
                         f"{', '.join(sorted(meshes)) or 'none'}); other sizes stay symbolic in the build")
    driver = Driver(mod, func=func, symbol=args.symbol, bind=bind, target=target, counts=args.counts)
    with phase(f"distributing {args.file} ({args.symbol} symbolic)"):
        driver.distribute()
    with phase(f"building with TVM for {target} ({args.symbol} symbolic)"):
        t0 = time.perf_counter()
        driver.build(None, target, specialize=False)
        seconds = time.perf_counter() - t0
        path = driver.write_artifact(args.output, target)
    from ..tvm.artifact import LIBRARY, MANIFEST

    size = (path / LIBRARY).stat().st_size
    out.write(f"distribute pipeline ({args.symbol} symbolic): {driver.pipeline_seconds * 1e3:.0f} ms; "
              f"tvm.compile for {target}: {seconds:.2f} s (one build for every count)\n")
    out.write(f"wrote {path / LIBRARY} ({size} bytes) and {path / MANIFEST}; run it with "
              f"distir run --artifact {path} -n N\n")
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        return build_job(args, sys.stdout)
    except OSError as err:  # the output folder
        raise DistirError(f"cannot write the artifact '{args.output}': {err.strerror or err}") from None
