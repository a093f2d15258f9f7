"""``distir run``: distribute a global-view module, run it on N workers, check it against one device.

The module goes through the distribute pipeline once with its mesh sizes symbolic, then
runs for ``--num-workers`` on the chosen backend: ``sim`` (distir's SPMD simulator) or
``tvm`` (specialized, exported to Relax, built with ``tvm.compile`` for ``--target`` and run
on Disco: worker threads, or one process per worker with ``--session processes``). Inputs
are random (``--seed``) or read from an ``.npz`` file. The result is compared with the
single-device interpreter; exit status 0 when they match.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, TextIO

from ..errors import DistirError
from .args import MAX_DISCO_WORKERS, MAX_WORKERS
from .inputs import load_inputs

if TYPE_CHECKING:
    import numpy as np

#: the default tolerances, as distir.driver.DEFAULT_TOLERANCES sets them (written out here so that
#: --help imports no numpy; a test keeps the two equal)
TOLERANCE_HELP = "float16 and bfloat16 1e-2 (atol 2e-2), float32 and float64 1e-5, integers and bool exact"

MAX_DISCO_PROCESSES = 64  # --session processes starts a Python process (TVM loaded: ~200 MB) per worker

def session_arg(text: str) -> str:
    """``--session``: threads, processes, socket or socket:NODES@HOST:PORT (the address is checked
    when the session starts, distir.tvm.disco.nodes)."""
    if text in ("threads", "processes", "socket") or text.startswith("socket:"):
        return text
    raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from threads, processes, socket, "
                                     "socket:NODES@HOST:PORT)")


HELP = "distribute a module, run it on N workers (simulator or TVM/Disco), compare with one device"
DESCRIPTION = """\
Run a global-view module through the distribute pipeline (num_workers symbolic), then on
--num-workers workers, on random inputs or the arrays of an .npz file, and compare the
result with the single-device interpreter. --backend sim uses distir's SPMD simulator;
--backend tvm exports the module specialized to the count to TVM Relax, builds it with
tvm.compile for --target (default llvm, the CPU; cuda for a GPU) and runs it on Disco: a
ThreadedSession (--session threads, the default), a ProcessSession of one process per
worker (--session processes) or a SocketSession over several machines (--session socket).
Exit status 0 when the results match, 1 when they do not (or on an error)."""
EPILOG = """\
examples:
  distir run model.py --num-workers 4                    simulate 4 workers
  distir run model.py -n 4 --backend tvm                 build with TVM, run on Disco threads
  distir run model.py -n 4 --backend tvm --session processes   one process per worker
  distir run model.py -n 4 --backend tvm --session socket:2@10.0.0.1:29555   two machines
  distir run model.py -n 4 --backend tvm --target cuda   all workers on the GPU
  distir run model.py -n 2 --inputs inputs.npz           arrays named like the parameters
  distir run model.py -n 8 --bind s=64 --seed 3          value of another symbolic dim

An .npz file holds one array per parameter, named like the parameter (or arr_0, arr_1,
... in parameter order, as numpy.savez writes unnamed arrays)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .args import non_negative_float, parse_binding, seed, sweep_counts, workers
    from .models import add_shard_arguments

    parser.add_argument("file", metavar="FILE", nargs="?", help="global-view module to run ('-' for stdin); none "
                        "with --artifact")
    parser.add_argument("-n", "--num-workers", type=workers, metavar="N",
                        help=f"value of num_workers (the symbolic mesh size), at most {MAX_WORKERS} "
                             f"({MAX_DISCO_WORKERS} with --backend tvm); not needed when every mesh is static")
    parser.add_argument("--counts", type=sweep_counts, metavar="COUNTS",
                        help="the device counts the program is for (1,2,4 or 1-8): layouts are planned per "
                             "class of them (propagate-sharding.counts, docs/propagation.md; default 1-8)")
    parser.add_argument("--backend", choices=("sim", "tvm"),
                        help="sim: distir's SPMD simulator (default); tvm: TVM build run on Disco")
    parser.add_argument("--target", metavar="TARGET",
                        help="with --backend tvm: the TVM target to build for (default llvm, the CPU; cuda for a GPU)")
    build = parser.add_mutually_exclusive_group()
    build.add_argument("--specialize", action="store_true",
                       help="with --backend tvm: build the module specialized to N (static shapes; the default)")
    build.add_argument("--build-once", action="store_true",
                       help="with --backend tvm: build the module once for every count (num_workers symbolic, the "
                            "plan for the count chosen at run time) instead of specialized to N")
    parser.add_argument("--artifact", metavar="DIR",
                        help="run the build `distir build` wrote into DIR (on Disco, no tvm.compile) instead of FILE; "
                             "run only artifacts from builds you trust (loading a library runs its code)")
    parser.add_argument("--session", type=session_arg, metavar="{threads,processes,socket[:NODES@HOST:PORT]}",
                        help="with --backend tvm: Disco worker threads (default), one process per worker "
                             f"(at most {MAX_DISCO_PROCESSES}), or workers spread over NODES machines (socket; "
                             "default 2@127.0.0.1:29555 or $DISTIR_SOCKET; the other nodes run "
                             "`python -m distir.tvm.disco.node`, docs/tvm.md)")
    parser.add_argument("--seed", type=seed, default=0,
                        help="seed (>= 0) of the random inputs and partial splits (default 0)")
    parser.add_argument("--inputs", metavar="NPZ", help="read the inputs from this .npz file instead")
    parser.add_argument("--bind", action="append", default=[], type=parse_binding, metavar="NAME=INT",
                        help="value of another symbolic dim for random inputs, e.g. s=64 (default 16)")
    parser.add_argument("--func", metavar="NAME", help="function to run (default: main, or the module's only function)")
    parser.add_argument("--symbol", default="num_workers", help="the mesh size variable (default num_workers)")
    parser.add_argument("--rtol", type=non_negative_float, default=None,
                        help=f"relative tolerance (default by the output's dtype: {TOLERANCE_HELP})")
    parser.add_argument("--atol", type=non_negative_float, default=None,
                        help="absolute tolerance, relative to the largest expected magnitude (default by the output's "
                             "dtype, as --rtol, and at least what rounding allows the program's reductions)")
    add_shard_arguments(parser)


def _random_inputs(mod, func: str, dims: dict[str, int], seed: int, symbols: set[str]) -> list[np.ndarray]:
    """Random inputs; numpy's refusal (too large to allocate, beyond its largest array) as one line.

    ``symbols``: the module's symbolic sizes that ``--bind`` could make smaller."""
    from ..driver import random_inputs

    try:
        return random_inputs(mod, func, dims, seed=seed)
    except (MemoryError, ValueError) as err:
        why = str(err).splitlines()[0].rstrip(".")
        if not symbols:
            raise DistirError(f"cannot make random inputs for @{func}: {why}") from None
        sizes = ", ".join(f"{k}={v}" for k, v in dims.items())
        unbound = sorted(symbols - dims.keys())
        if unbound:
            sizes += f"{', ' if sizes else ''}{', '.join(unbound)} 16 (the default)"
        raise DistirError(f"cannot make random inputs for @{func} with {sizes}: {why}; use smaller sizes with --bind") from None


def _check_global_view(mod, func: str, file: str) -> None:
    """``run`` distributes a global-view program and compares it with its single-device run; a
    module the pipeline already lowered has no single-device program to compare with."""
    from ..transform.lower_to_local import GLOBAL_PARAMS

    if GLOBAL_PARAMS in mod[func].attrs:
        raise DistirError(
            f"'{file}' is already in the local view (the distribute pipeline's output: @{func} has "
            f"{GLOBAL_PARAMS}); distir run takes the global-view program it came from, which it distributes "
            "and checks against one device"
        )


def _artifact_flags(args: argparse.Namespace) -> None:
    """What ``--artifact`` fixes (the module, its layout, the target) cannot be given again."""
    from .args import UsageError

    if args.file is not None:
        raise UsageError("give FILE or --artifact, not both (the artifact records the module it was built from)")
    for flag, given in (("--backend sim", args.backend == "sim"), ("--target", args.target is not None),
                        ("--specialize", args.specialize), ("--build-once", args.build_once),
                        ("--shard", bool(args.shard)), ("--counts", args.counts is not None),
                        ("--shard-plan", args.shard_plan is not None), ("--symbol", args.symbol != "num_workers")):
        if given:
            raise UsageError(f"{flag} does not go with --artifact: the artifact is a TVM build, laid out and "
                             "built already")


def _specialize_flag(args: argparse.Namespace) -> bool | None:
    """``--specialize`` True, ``--build-once`` False, neither None (the driver's default)."""
    return True if args.specialize else False if args.build_once else None


def run_job(args: argparse.Namespace, out: TextIO) -> int:
    from ..driver import Driver
    from . import phase, read_module
    from .models import apply_shard_plan, function_name, parameter_aliases
    from .args import (
        UsageError,
        check_bind_names,
        check_mesh_symbol,
        mesh_symbols,
        module_symbols,
        session_workers,
        static_workers,
    )

    artifact = None
    if args.artifact is not None:
        _artifact_flags(args)
        args.backend = "tvm"
        from ..tvm import load_artifact

        artifact = load_artifact(args.artifact)
        args.symbol = artifact.symbol
    elif args.file is None:
        raise UsageError("give the module to run (FILE), or --artifact DIR")
    args.backend = args.backend or "sim"
    for flag, given in (("--specialize", args.specialize), ("--build-once", args.build_once)):
        if given and args.backend != "tvm":
            raise UsageError(f"{flag} is for --backend tvm")
    dims: dict[str, int] = {}
    for b in args.bind:
        dims.update(b)
    if args.backend == "tvm" and args.num_workers is not None and args.num_workers > MAX_DISCO_WORKERS:
        raise UsageError(
            f"-n/--num-workers {args.num_workers} with --backend tvm: at most {MAX_DISCO_WORKERS} workers (Disco runs "
            f"a thread per worker); use --backend sim for up to {MAX_WORKERS}"
        )
    for flag, given in (("--target", args.target), ("--session", args.session)):
        if given is not None and args.backend != "tvm":
            raise UsageError(f"{flag} is for --backend tvm")
    if args.session not in (None, "threads") and args.num_workers is not None and args.num_workers > MAX_DISCO_PROCESSES:
        raise UsageError(f"-n/--num-workers {args.num_workers} with --session {args.session}: at most {MAX_DISCO_PROCESSES} "
                         "workers (a process each); use --session threads")
    if args.symbol in dims:
        raise UsageError(
            f"--bind {args.symbol}={dims[args.symbol]}: {args.symbol} is the number of workers; set it with "
            "-n/--num-workers" + (f" (now {args.num_workers})" if args.num_workers is not None else "")
        )
    if artifact is not None:
        mod, name = artifact.source, f"artifact {args.artifact}"
        func = function_name(mod, args.func or artifact.func)
    else:
        mod, name = read_module(args.file), args.file
        func = function_name(mod, args.func)
        _check_global_view(mod, func, args.file)
        from ..ir.verify import verify

        verify(mod)  # as distir-opt, show and sweep do: a bad placement is named where it is written
        mod = apply_shard_plan(mod, args)
    n = args.num_workers
    symbolic = check_mesh_symbol(mod, args.symbol, n)
    if n is None:  # static meshes run on their own devices; a symbolic one needs its value
        if symbolic:
            raise UsageError(f"-n/--num-workers is required: the module's mesh size '{args.symbol}' is symbolic "
                             "(e.g. -n 4)")
        n = static_workers(mod)
    symbols = module_symbols(mod) - {args.symbol}
    check_bind_names(dims, symbols | {args.symbol}, args.symbol)
    # other mesh sizes (a mesh ("dp", "tp") run with --symbol dp) come from --bind
    mesh_sizes = {k: v for k, v in dims.items() if k in mesh_symbols(mod)}
    if artifact is not None:
        if any(artifact.bind.get(k) != v for k, v in mesh_sizes.items()):
            raise UsageError(f"--bind {', '.join(f'{k}={v}' for k, v in mesh_sizes.items())}: the artifact was built "
                             f"with {', '.join(f'{k}={v}' for k, v in artifact.bind.items()) or 'no mesh size fixed'}")
        mesh_sizes = dict(artifact.bind)
        dims.update(mesh_sizes)
    values = {args.symbol: n, **mesh_sizes} if symbolic else {}
    missing = sorted(mesh_symbols(mod) - values.keys())
    if missing:
        raise DistirError(
            f"the mesh size{'s' if len(missing) > 1 else ''} {', '.join(missing)} need{'' if len(missing) > 1 else 's'} "
            f"a value: -n sets only {args.symbol}; give the others with --bind, e.g. --bind {missing[0]}=2"
        )
    total = session_workers(mod, values) if args.backend == "tvm" else static_workers(mod, values)
    limit = MAX_DISCO_WORKERS if args.backend == "tvm" else MAX_WORKERS
    if args.session not in (None, "threads"):  # a process per worker (per node's worker, over nodes)
        limit = MAX_DISCO_PROCESSES
    if total is not None and total > limit:
        raise DistirError(
            f"the module's device meshes need {total} workers"
            f"{' at ' + ', '.join(f'{k}={v}' for k, v in values.items()) if values else ''}; "
            f"--backend {args.backend} runs at most {limit}"
        )
    params = [p.name for p in mod[func].params]
    if artifact is not None and args.inputs and args.inputs == args.artifact:
        raise UsageError("--inputs names the artifact's folder; give an .npz file")
    if args.inputs:
        inputs = load_inputs(args.inputs, params, parameter_aliases(mod[func]), mod[func], {**dims, **values})
        source = f"inputs from {args.inputs}"
    else:
        inputs = _random_inputs(mod, func, dims, args.seed, symbols)
        source = f"random inputs (seed {args.seed})"
    target, session = args.target or "llvm", args.session or "threads"
    if artifact is not None:
        target = artifact.target
    if args.backend == "tvm":
        from ..tvm.targets import run_device

        run_device(target)  # an unknown target, or a device this machine lacks: one line before any work
    # the other mesh sizes are fixed right after the pipeline: the backends take one symbolic size
    if artifact is not None:
        driver = Driver.from_artifact(artifact, session=session)
        driver = driver if func == driver.func else driver.for_function(func)
        target = artifact.target.kind.name
    else:
        driver = Driver(mod, func=func, symbol=args.symbol, bind=mesh_sizes, target=target, session=session,
                        specialize=_specialize_flag(args), counts=args.counts)
    driver.reference(inputs)  # wrong inputs are reported by the single-device run, before any work
    with phase(f"distributing {name} ({args.symbol} symbolic)"):
        driver.distribute()
    if artifact is not None:
        out.write(f"the artifact's local-view module ({args.symbol} symbolic), distributed when built\n")
    else:
        out.write(f"distribute pipeline ({args.symbol} symbolic): {driver.pipeline_seconds * 1e3:.0f} ms\n"
                  if symbolic else f"distribute pipeline (static meshes): {driver.pipeline_seconds * 1e3:.0f} ms\n")
    how = "building with TVM and running on Disco" if args.backend == "tvm" else "simulating"
    if artifact is not None:
        how = "running the artifact on Disco"
    with phase(f"specializing to {args.symbol}={n}, {how}"):
        result = driver.run(inputs, n, backend=args.backend, seed=args.seed, rtol=args.rtol, atol=args.atol)
    t = result.timings
    if args.backend == "sim":
        stats = result.stats
        out.write(f"simulated {stats.simulated} worker{'' if stats.simulated == 1 else 's'} in {(t['specialize'] + t['run']) * 1e3:.0f} ms: "
                  f"{stats.summary()}\n")
    else:
        info = result.disco
        moved = info["transport"]
        disco_calls = ", ".join(f"{k} x{v}" for k, v in sorted(moved["calls"].items())) or "none"
        kind = {"threads": "ThreadedSession", "processes": "ProcessSession"}.get(info["session"]) or \
            f"SocketSession over {info.get('nodes')} nodes"
        ccl = "NCCL" if info["ccl"] == "nccl" else "distir's host collectives"
        # the steps and bytes as the simulator counts them (docs/analysis.md); then how Disco carried them
        built = {"symbolic": f"exported {t['export'] * 1e3:.0f} ms, tvm.compile for {target} {t['build'] * 1e3:.0f} ms "
                             "(one build for every count)",
                 "specialized": f"exported {t['export'] * 1e3:.0f} ms, tvm.compile for {target} "
                                f"{t['build'] * 1e3:.0f} ms (specialized to this count)",
                 "artifact": f"the artifact's build for {target} (no tvm.compile)"}[info["build"]]
        out.write(
            f"TVM: {built}; "
            f"Disco {kind} of {info['num_workers']} workers ({info['num_groups']} group(s), {ccl}) "
            f"ran in {t['run'] * 1e3:.0f} ms: {result.summary()}; carried by Disco's collectives {disco_calls}, "
            f"{moved['bytes_sent']} bytes on the wire\n"
        )
    verdict = "matches" if result.ok else "DOES NOT match"
    workers = total if total is not None else n
    out.write(f"{args.backend} result on {workers} workers {verdict} the single-device result ({source}); "
              f"{result.comparison.differences()}\n")
    if not result.ok and result.comparison.mismatch:
        out.write(f"  {result.comparison.mismatch}\n")
    return 0 if result.ok else 1


def run(args: argparse.Namespace) -> int:
    return run_job(args, sys.stdout)
