"""``distir sweep``: memory and communication per device count, from one pipeline run.

Runs the distribute pipeline once with ``num_workers`` symbolic, prints the formulas read
off the local-view module, then specializes to each count and prints a table (or JSON),
optionally a PNG plot and TVM build times. See docs/analysis.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, TextIO

from ..errors import DistirError

if TYPE_CHECKING:
    from fractions import Fraction

HELP = "memory and communication per device count, as formulas in num_workers and a table"
DESCRIPTION = """\
Run the distribute pipeline once on FILE with num_workers symbolic, print the per-worker
memory and communication formulas, then specialize to each device count and print a table:
parameter bytes per worker (its largest block, padding included) and their imbalance (the
most parameter elements any device holds against the mean: 1.00x when every block is full,
more when sizes do not divide the count), peak live activation bytes, bytes each worker sends, the
collectives by kind, an alpha-beta estimate of communication time, and the time each
specialization took."""
EPILOG = """\
examples:
  distir sweep model.py --num-workers 1,2,4,8,16
  distir sweep model.py --num-workers 1-8                  every count from 1 to 8
  distir sweep model.py --num-workers 1-128x2 --bind s=2048 --plot sweep.png
  distir sweep model.py --json > sweep.json
  distir sweep model.py --latency 2e-6 --bandwidth 100e9
  distir sweep plain.py --auto -n 2,3,4,8                   auto-shard per count, name the layouts that change
  distir sweep plain.py --auto --memory-budget 1.1/W --activation-budget none
  distir sweep model.py --axis-cost 0=10us:25GB/s --axis-cost 1=1us:300GB/s   plan and time per mesh axis
  distir sweep model.py -n 1-8 --device-memory 80GB        which counts fit an 80 GB device"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .args import (
        MAX_SWEEP_WORKERS,
        activation_budget,
        axis_cost,
        image_file,
        memory_budget,
        non_negative_float,
        parse_binding,
        positive_float,
        sweep_counts,
    )
    from .models import add_shard_arguments

    parser.add_argument("file", metavar="FILE", help="global-view module to distribute ('-' for stdin)")
    parser.add_argument(
        "-n", "--num-workers", type=sweep_counts, default=[1, 2, 4, 8], metavar="COUNTS",
        help="device counts: comma-separated counts and ranges, 1-8 for every count from 1 to 8, 1-128x2 "
             f"for 1, 2, 4, ..., 128 (default 1,2,4,8; at most {MAX_SWEEP_WORKERS})",
    )
    parser.add_argument(
        "--bind", action="append", default=[], type=parse_binding, metavar="NAME=INT",
        help="fix another symbolic size first, e.g. s=2048 for a sequence length (repeatable)",
    )
    parser.add_argument("--func", metavar="NAME", help="function to analyse (default: main, or the module's only function)")
    add_shard_arguments(parser)
    parser.add_argument("--symbol", default="num_workers", metavar="NAME", help="the swept size (default num_workers)")
    parser.add_argument("--latency", type=non_negative_float, default=5e-6, metavar="SECONDS",
                        help="alpha: seconds per ring step (default 5e-6)")
    parser.add_argument("--bandwidth", type=positive_float, default=25e9, metavar="BYTES_PER_S",
                        help="beta: link bandwidth in bytes per second (default 25e9)")
    parser.add_argument(
        "--axis-cost", action="append", default=[], type=axis_cost, metavar="AXIS=LATENCY:BANDWIDTH",
        help="the time cost of one mesh axis, e.g. 0=10us:25GB/s (repeatable; other axes take --latency and "
        "--bandwidth): the time is estimated per axis and redistributes are planned for the least time",
    )
    parser.add_argument("--json", action="store_true", help="print the formulas and rows as JSON instead of a table")
    parser.add_argument("--plot", metavar="PNG", type=image_file,
                        help="draw memory and communication against the count into this PNG (matplotlib)")
    parser.add_argument("--build", action="store_true",
                        help="also build with TVM (distir.tvm): the module specialized to each count (the default)")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--specialize", action="store_true",
                     help="with --build: compile the module specialized to each count (the default)")
    how.add_argument("--build-once", action="store_true",
                     help="with --build: one build for every count (num_workers symbolic), which the first row pays for")
    parser.add_argument("--target", metavar="TARGET",
                        help="with --build: the TVM target to compile for (default llvm; cuda compiles for a GPU, "
                             "which this machine need not have)")
    parser.add_argument("--auto", action="store_true",
                        help="auto-shard the plain parameters for each count (the auto-shard pass), distribute and "
                             "specialize per count, and name the parameters whose layout changes between counts")
    parser.add_argument("--memory-budget", type=memory_budget, metavar="BUDGET",
                        help="with --auto: bytes of weights per device (2GB, 25%%, 1.1/W, min+10%%; default min+10%%)")
    parser.add_argument("--activation-budget", type=activation_budget, metavar="BUDGET",
                        help="with --auto: bytes of peak live activations per device (the same forms, or none; "
                             "default min+25%%)")
    parser.add_argument("--device-memory", type=device_memory, metavar="SIZE",
                        help="bytes each device holds, e.g. 80GB (10**9 bytes a GB) or 80GiB (2**30): mark which "
                             "counts fit (parameters, KV cache and what TVM plans for activations) and name the "
                             "smallest")
    parser.add_argument("--cache", action="append", default=None, metavar="PARAM",
                        help="a parameter that is a KV cache (repeatable; default: those named like one, "
                             "k_cache, past_key_values, ...)")


def device_memory(text: str) -> int:
    """``--device-memory``: a size in bytes (argparse type; a malformed one is one line)."""
    from ..analysis.fit import parse_bytes

    try:
        return parse_bytes(text, "device memory")
    except DistirError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("device memory ")) from None


# ---------------------------------------------------------------- units


def human_bytes(n: float | Fraction | None) -> str:
    """``1536`` -> ``"1.5 KiB"``; binary units, three significant digits."""
    if n is None:
        return "-"
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            if unit == "B":
                return f"{x:.0f} B" if x == int(x) else f"{x:.1f} B"
            return f"{x:.0f} {unit}" if abs(x) >= 100 else f"{x:.3g} {unit}"
        x /= 1024
    return f"{x} B"  # pragma: no cover


def human_rate(bytes_per_second: float) -> str:
    """Bandwidths in decimal units, as network links are quoted: ``25e9`` -> ``"25 GB/s"``."""
    x = float(bytes_per_second)
    for unit in ("B/s", "kB/s", "MB/s", "GB/s"):
        if x < 1000:
            return f"{x:.3g} {unit}"
        x /= 1000
    return f"{x:.3g} TB/s"


def human_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s == 0:
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if s >= scale or unit == "ns":
            v = s / scale
            return f"{v:.3g} {unit}"
    return f"{s} s"  # pragma: no cover


# ---------------------------------------------------------------- output


def _collectives(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())) or "none"


WIDTH = 80  # columns of the formulas and the table when stdout is not a terminal


def print_formulas(result, source: str, out: TextIO, width: int = WIDTH) -> None:
    """The formulas, each wrapped to ``width`` columns under its name; 0/1 factors written as the
    conditions they are (``(a != b) * ...``: 1 where a differs from b, else 0)."""
    from ..ir import sym

    with sym.readable_conditions():
        _print_formulas(result, source, out, width)


def _print_formulas(result, source: str, out: TextIO, width: int) -> None:
    import textwrap

    from ..analysis.formula import to_str

    bound = ", ".join(f"{k} = {v}" for k, v in result.bound.items())
    head = f"distir sweep {source}:"
    rest = (f"pipeline {human_seconds(result.pipeline_seconds)}, formulas {human_seconds(result.analysis_seconds)}"
            f"{'; ' + bound if bound else ''}")
    if len(head) + 1 + len(rest) <= width:
        out.write(f"{head} {rest}\n")
    else:  # the file name alone on the first line, the timings under it
        out.write(head + "\n" + textwrap.fill(rest, width, initial_indent="  ", subsequent_indent="  ") + "\n")
    out.write(f"per-worker formulas in {result.symbol}:\n")
    rows = [("parameters", to_str(result.memory.param_bytes))]
    if getattr(result, "cache_params", ()):
        rows.append(("  KV cache", to_str(result.cache_bytes)))
    peak = result.memory.peak_bytes
    if len(peak.options) <= 1:
        rows.append(("peak activations", str(peak)))
    else:
        rows.append(("peak activations", f"the largest of {len(peak.options)}:"))
        for option, label in zip(peak.options, peak.labels):
            rows.append((f"  at '{label}'", to_str(option)))
    rows.append(("bytes sent", to_str(result.volume.bytes_per_worker)))
    counts = result.volume.counts
    for kind, r in result.volume.per_worker_by_kind().items():
        rows.append((f"  {kind} x{counts[kind]}", to_str(r)))
    rows.append(("comm time", str(result.time)))
    name_width = max(len(k) for k, _ in rows)
    indent = " " * (name_width + 4)
    for k, v in rows:
        out.write(textwrap.fill(v, width, initial_indent=f"  {k.ljust(name_width)}  ", subsequent_indent=indent,
                                break_on_hyphens=False) + "\n")
    conditions = "; (a != b) and (x > 0) are 1 where they hold, else 0" if "!= " in "".join(v for _, v in rows) or " > 0)" in "".join(v for _, v in rows) else ""
    out.write(textwrap.fill(
        f"(bytes each worker sends, which it also receives; time by ring algorithms with latency "
        f"{human_seconds(result.model.latency)} per step, bandwidth {human_rate(result.model.bandwidth)}"
        + (f"; mesh axes {result.model.axes}, planned by time" if result.model.axes is not None else "")
        + conditions + ")", width, initial_indent="  ", subsequent_indent="  ") + "\n")


MAX_CHANGES_SHOWN = 4  # parameters named per row in the layout-changes column


def _changes(row) -> str:
    names = [f"{k} {row.layouts[k]}" for k in row.layout_changes]
    more = len(names) - MAX_CHANGES_SHOWN
    return ", ".join(names[:MAX_CHANGES_SHOWN]) + (f" (+{more} more)" if more > 0 else "") if names else "none"


def print_auto_header(result, source: str, out: TextIO, width: int = WIDTH) -> None:
    """What --auto did, and the layouts of the first count that laid out (the table names the changes)."""
    import textwrap

    bound = ", ".join(f"{k} = {v}" for k, v in result.bound.items())
    out.write(textwrap.fill(
        f"distir sweep {source} --auto: auto-shard, distribute and specialize per count "
        f"(memory budget {result.budget}, activation budget {result.activation_budget}) in "
        f"{human_seconds(result.seconds)}{'; ' + bound if bound else ''}", width, subsequent_indent="  ",
        break_on_hyphens=False) + "\n")
    first = next((r for r in result.rows if r.layouts), None)
    if first is not None:
        shown = ", ".join(f"{k} {v}" for k, v in first.layouts.items())
        out.write(textwrap.fill(f"layouts at {result.symbol} = {first.num_workers}: {shown}", width,
                                subsequent_indent="  ") + "\n")


def table(result):
    """The rows as a rich Table (with --auto, a last column naming the layouts that changed)."""
    from rich import box
    from rich.table import Table

    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    build = any(r.build_seconds is not None for r in result.rows)
    fit = getattr(result, "device_memory", None) is not None
    # with --device-memory, need and fits take the place of the specialize time (the table keeps to 80 columns)
    for name in ("W", "params", "imbal.", "peak act.") + (("need", "fits") if fit else ()) + (
            "sent", "comm") + (() if fit else ("spec.",)) + (("build",) if build else ()) + ("collectives",):
        t.add_column(name, justify="left" if name in ("collectives", "layout changes") else "right",
                     no_wrap=name not in ("collectives", "layout changes"),
                     min_width=(13 if fit else 15) if name == "collectives" else None)
    for r in result.rows:
        if r.error is not None:
            cells = [str(r.num_workers), "-", "-", "-"] + (["-", "-"] if fit else []) + ["-", "-"] + (
                [] if fit else [human_seconds(r.specialize_seconds)])
        else:
            cells = [
                str(r.num_workers),
                human_bytes(r.param_bytes),
                f"{float(r.param_imbalance):.2f}x",
                human_bytes(r.peak_bytes),
            ] + ([human_bytes(r.need_bytes), "yes" if r.fits else "no"] if fit else []) + [
                human_bytes(r.comm_bytes_per_worker),
                human_seconds(r.comm_seconds),
            ] + ([] if fit else [human_seconds(r.specialize_seconds)])
        if build:
            cells.append(human_seconds(r.build_seconds))
        cells.append("see error below" if r.error is not None else _collectives(r.collectives))
        t.add_row(*cells)
    return t


def verdict(result, width: int = WIDTH) -> str:
    """With --device-memory: which counts fit and the smallest, wrapped to ``width``."""
    import textwrap

    from ..analysis.fit import fit_summary

    needs = [(r.num_workers, r.need_bytes) for r in result.rows if r.need_bytes is not None]
    return textwrap.fill(fit_summary(result.device_memory, needs), width, subsequent_indent="  ") + "\n"


def print_layout_changes(result, out: TextIO, width: int = WIDTH) -> None:
    """With --auto: per count, the parameters whose layout changed since the count before
    (below the table, so that the table keeps to ``width`` columns)."""
    import textwrap

    laid_out = [r for r in result.rows if r.layouts]
    if not laid_out:
        return
    out.write("layout changes (since the count before; the first count's layouts are above):\n")
    for r in laid_out[1:]:
        out.write(textwrap.fill(_changes(r), width, initial_indent=f"  {result.symbol} = {r.num_workers}: ",
                                subsequent_indent="    ") + "\n")


LEGEND = (
    "W: workers; params: parameter bytes per worker (its largest block); imbal.: the most parameter "
    "elements a device holds against the mean; peak act.: peak live activations per worker; sent: bytes "
    "each worker sends; comm: estimated communication time; spec.: time to specialize"
)


FIT_LEGEND = (
    "; need: all a worker needs (parameters, KV cache included, and the intermediates and results TVM's "
    "static planner allocates at that count); fits: need <= the device memory"
)


def legend(build: bool, width: int = WIDTH, fit: bool = False) -> str:
    import textwrap

    text = (LEGEND.replace("; spec.: time to specialize", "") + FIT_LEGEND if fit else LEGEND) + (
        "; build: TVM build time" if build else "")
    return textwrap.fill(text, width, initial_indent="  ", subsequent_indent="  ") + "\n"


def write_plot(result, path: str) -> None:
    """Memory (left) and communication (right) per worker against the device count, as a PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise DistirError("--plot needs matplotlib (pip install matplotlib)") from None
    rows = [r for r in result.rows if r.error is None]
    if not rows:
        raise DistirError("--plot: no device count specialized, nothing to draw")
    xs = [r.num_workers for r in rows]
    mib = 1024 * 1024
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot(xs, [r.param_bytes / mib for r in rows], "o-", label="parameters")
    left.plot(xs, [r.peak_bytes / mib for r in rows], "s-", label="peak activations")
    left.plot(xs, [(r.param_bytes + r.peak_bytes) / mib for r in rows], "^--", label="sum")
    if getattr(result, "device_memory", None) is not None:
        left.plot(xs, [r.need_bytes / mib for r in rows], "v-", label="need (planned)")
        left.axhline(result.device_memory / mib, color="tab:gray", linestyle=":", label="device memory")
    left.set_title("memory per worker")
    left.set_ylabel("MiB")
    right.plot(xs, [float(r.comm_bytes_per_worker) / mib for r in rows], "o-", color="tab:red", label="bytes sent")
    right.set_title("communication per worker")
    right.set_ylabel("MiB sent", color="tab:red")
    twin = right.twinx()
    twin.plot(xs, [r.comm_seconds * 1e3 for r in rows], "s--", color="tab:purple", label="est. time")
    twin.set_ylabel("estimated ms", color="tab:purple")
    for ax in (left, right):
        ax.set_xlabel(f"{result.symbol}")
        if len(xs) > 1 and xs[-1] / xs[0] >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([str(x) for x in xs])
        ax.grid(True, alpha=0.3)
    left.legend()
    lines = right.get_lines() + twin.get_lines()
    right.legend(lines, [ln.get_label() for ln in lines])
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except (OSError, ValueError) as err:  # ValueError: a format matplotlib cannot write
        raise DistirError(f"cannot write '{path}': {err}") from None
    finally:
        plt.close(fig)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..analysis import CommModel
    from ..analysis.sweep import auto_sweep, sweep
    from ..driver import tvm_builder
    from ..ir.verify import verify
    from . import EXIT_ERROR, EXIT_OK, read_module
    from .models import apply_shard_plan
    from .args import UsageError, check_axis_costs, check_bind_names, merge_axis_costs, mesh_symbols, module_symbols

    counts = args.num_workers
    bind: dict[str, int] = {}
    for b in args.bind:
        bind.update(b)
    if args.symbol in bind:
        raise UsageError(f"--bind {args.symbol}={bind[args.symbol]}: {args.symbol} is the swept size; give its "
                         f"values with -n/--num-workers")
    model = CommModel(latency=args.latency, bandwidth=args.bandwidth, axes=merge_axis_costs(args.axis_cost))
    for flag, given in (("--target", args.target is not None), ("--specialize", args.specialize),
                        ("--build-once", args.build_once)):
        if given and not args.build:
            raise UsageError(f"{flag} is for --build")
    from ..driver import SPECIALIZE_DEFAULT

    specialize = True if args.specialize else False if args.build_once else SPECIALIZE_DEFAULT
    build = tvm_builder(args.target or "llvm", specialize=specialize) if args.build else None
    mod = read_module(args.file)
    verify(mod)
    mod = apply_shard_plan(mod, args)
    check_axis_costs(model.axes, mod)
    symbols = module_symbols(mod)
    if args.symbol not in symbols:
        static = "" if mesh_symbols(mod) or not mod.meshes() else (
            "; its device meshes are static, so every count would give the same numbers")
        raise DistirError(f"the module has no symbolic size '{args.symbol}' to sweep (its symbolic sizes: "
                          f"{', '.join(sorted(symbols)) or 'none'}){static}")
    check_bind_names(bind, symbols, args.symbol)
    for flag, given in (("--memory-budget", args.memory_budget), ("--activation-budget", args.activation_budget)):
        if given is not None and not args.auto:
            raise UsageError(f"{flag} is for --auto (auto-shard per count); add --auto")

    err_console = Console(file=sys.stderr)
    progress = Progress(
        TextColumn("{task.fields[doing]} {task.fields[count]}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err_console, transient=True, disable=not err_console.is_terminal,
    )
    with progress:
        # what runs before the first row is the layout solver: the pipeline once, or auto-shard per count
        solving = f"auto-shard: solving layouts per count, at {args.symbol}=" if args.auto else \
            f"distributing: solving layouts ({args.symbol} symbolic)"
        task = progress.add_task("sweep", total=len(counts), doing=solving,
                                 count=str(counts[0]) if args.auto else "")

        def on_row(row) -> None:
            i = counts.index(row.num_workers) + 1 if row.num_workers in counts else len(counts)
            upcoming = str(counts[i]) if i < len(counts) else ""
            if args.auto:
                progress.update(task, advance=1, count=upcoming)
            else:
                progress.update(task, advance=1, doing="specializing to",
                                count=f"{args.symbol}={upcoming}" if upcoming else "")

        fit = {"device_memory": args.device_memory, "cache": args.cache}
        if args.auto:
            result = auto_sweep(mod, counts, symbol=args.symbol, bind=bind, model=model, func=args.func,
                                memory_budget=args.memory_budget, activation_budget=args.activation_budget,
                                build=build, on_row=on_row, **fit)
        else:
            result = sweep(mod, counts, symbol=args.symbol, bind=bind, model=model, func=args.func, build=build,
                           on_row=on_row, **fit)
    if args.json:
        import json

        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
    else:
        console = Console(file=sys.stdout, highlight=False, width=None if sys.stdout.isatty() else WIDTH)
        if args.auto:
            print_auto_header(result, args.file, sys.stdout, console.width)
        else:
            print_formulas(result, args.file, sys.stdout, console.width)
        console.print(table(result))
        print_layout_changes(result, sys.stdout, console.width)
        sys.stdout.write(legend(any(r.build_seconds is not None for r in result.rows), console.width,
                                result.device_memory is not None))
        if result.device_memory is not None:
            sys.stdout.write(verdict(result, console.width))
    if args.plot:
        write_plot(result, args.plot)
        if not args.json:
            sys.stdout.write(f"wrote {args.plot}\n")
    failed = [r for r in result.rows if r.error is not None]
    for r in failed:
        prefix = f"specialize {args.symbol}={r.num_workers}: "  # the specializer names the count itself
        why = r.error.removeprefix(prefix)
        sys.stderr.write(f"distir sweep: error: {args.symbol}={r.num_workers}: {why}\n")
    return EXIT_ERROR if failed else EXIT_OK
