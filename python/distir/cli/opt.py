"""``distir-opt`` (also ``distir opt``): parse a module, verify it, run passes, print it.

The pass list names registered passes and named pipelines by their kebab-case names;
``--bind`` then runs the ``specialize`` pass with the given values. Every DistirError
becomes a message on stderr and exit status 1 (argparse exits 2 on usage errors).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import PassError

HELP = "parse, verify and transform a distir module (same as distir-opt)"

DESCRIPTION = """\
Parse a distir module (TVMScript-style text), verify it, run passes on it and print
the result. With no -p, the module is only parsed, verified and printed back."""

EPILOG = """\
examples:
  distir-opt model.py                          parse, verify, print
  distir-opt model.py -p canonicalize          run one pass
  distir-opt model.py -p distribute --bind num_workers=4 -o out.py
                                               run a named pipeline, then specialize
  cat model.py | distir-opt - -p canonicalize --print-ir-after-change --time-passes
  distir passes                                list the pass and pipeline names
  distir-opt model.py -p distribute --emit relax
                                               the per-worker module as TVM Relax (num_workers symbolic)
  distir-opt model.py -p shard-params,distribute --shard '*.q_proj.weight=colwise' --shard '*.o_proj*=S[1]'
                                               lay out parameters by name, then distribute
  distir-opt model.py -p auto-shard,distribute --memory-budget 1.1/W --explain
                                               lay out plain parameters by cost under a memory budget,
                                               print why (stderr), then distribute
  distir-opt model.py -p distribute --axis-cost 0=10us:25GB/s --axis-cost 1=1us:300GB/s
                                               plan for the least time: a slow axis 0, a fast axis 1

IR printed by --print-ir-after-* and the --time-passes table go to stderr; the final
module goes to stdout (or -o). Errors go to stderr with exit status 1."""


def parse_binding(text: str) -> dict[str, int]:
    """``"num_workers=4"`` or ``"num_workers=4,n=128"`` -> ``{"num_workers": 4, ...}`` (argparse type).

    Values are sizes: integers in [1, 2**63 - 1] (see :func:`distir.cli.args.parse_binding`)."""
    from .args import parse_binding as parse

    return parse(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of distir-opt, shared by ``distir opt``."""
    from .args import activation_budget, axis_cost, memory_budget, non_negative_int, positive_float, positive_int
    from .models import add_shard_arguments

    parser.add_argument("file", metavar="FILE", help="module to read ('-' for stdin)")
    parser.add_argument(
        "-p", "--passes", action="append", default=[], metavar="PASSES",
        help="comma-separated pass or pipeline names, run in order (repeatable)",
    )
    parser.add_argument(
        "--bind", action="append", default=[], type=parse_binding, metavar="NAME=INT",
        help="specialize a symbolic size at the end, e.g. num_workers=4 (repeatable; runs the 'specialize' pass)",
    )
    add_shard_arguments(parser, prefix="for -p shard-params: ")
    parser.add_argument(
        "--memory-budget", type=memory_budget, metavar="BUDGET",
        help="for -p auto-shard: bytes of weights each device may hold: bytes (2GB, 512MiB, 300000), a share of "
        "the replicated size (25%%), a factor over the device count (1.1/W), or the smallest achievable plus a "
        "margin (min, min+10%%; the default)",
    )
    parser.add_argument(
        "--activation-budget", type=activation_budget, metavar="BUDGET",
        help="for -p auto-shard: bytes of peak live activations each device may hold, in the forms of "
        "--memory-budget (default min+25%%: within 25%% of the least peak the solver finds), or none",
    )
    parser.add_argument(
        "--explain", nargs="?", const="bounds", choices=("bounds", "exact"), metavar="exact",
        help="for -p auto-shard: print (stderr) each parameter's layout and what every alternative would cost: "
        "by default an upper bound per alternative, no solve (the chosen layout with that parameter redistributed "
        "first); --explain=exact: one propagation per alternative, each proven the least",
    )
    parser.add_argument(
        "--explain-checks", type=positive_int, metavar="N",
        help="for -p auto-shard: --explain=exact within a budget of work, the same on every machine: each "
        "alternative's programs stop after N of the solver's limit checks (a round of cuts, a node); one not "
        "proven by then is shown as a range a..b (no layout sends less than a, the best found sends b)",
    )
    parser.add_argument(
        "--solver-seconds", type=positive_float, metavar="S",
        help="for propagate-sharding (in -p distribute): the seconds its layout solver may take per function "
        "(default 20); a solve stopped keeps the best layout found and says so",
    )
    parser.add_argument(
        "--axis-cost", action="append", default=[], type=axis_cost, metavar="AXIS=LATENCY:BANDWIDTH",
        help="the time cost of a mesh axis, e.g. 0=10us:25GB/s (units s, ms, us, ns; B/s, KB/s, MB/s, GB/s, "
        "TB/s); with it, redistributes are planned for the least estimated time instead of the fewest bytes "
        "(repeatable; an axis not given costs 5us:25GB/s)",
    )
    parser.add_argument(
        "--verify-distribute", choices=("off", "sampled", "every-count"), metavar="MODE",
        help="after the distribute pipeline lowers, check its output against its input (the config key "
        "distribute.verify): sampled (counts 1..8), every-count, or off (default); a counterexample is an error, "
        "the verdict goes to stderr and the module's attrs; other sizes at --bind's values (default 13)",
    )
    parser.add_argument(
        "--verify-incomplete", choices=("error", "warn"), metavar="WHAT",
        help="when that check does less than asked (NOT CHECKED, or sampled where every-count was asked): "
        "error (default) or warn (distribute.verify_incomplete)",
    )
    parser.add_argument("-o", "--output", metavar="OUT", help="write the result here instead of stdout")
    parser.add_argument(
        "--emit", choices=("distir", "relax"), default="distir",
        help="print distir text (default) or, for a local-view module, the TVM Relax export (distir.tvm.to_relax)",
    )
    parser.add_argument("--print-ir-after-all", action="store_true", help="print the module after every pass (stderr)")
    parser.add_argument(
        "--print-ir-after-change", action="store_true", help="print the module after each pass that changed it (stderr)"
    )
    parser.add_argument("--time-passes", action="store_true", help="print a table of pass times (stderr)")
    parser.add_argument("--verify-each", action="store_true", help="verify after every pass; name the pass that broke it")
    parser.add_argument("--opt-level", type=non_negative_int, default=2, metavar="N",
                        help="skip passes above this level (default 2)")
    parser.add_argument(
        "--disable-pass", action="append", default=[], metavar="NAME", help="never run this pass (repeatable)"
    )


@dataclass
class OptOptions:
    """What ``run_opt`` needs; built from argparse's namespace or directly by other commands."""

    passes: list[str] = field(default_factory=list)
    bind: dict[str, int] = field(default_factory=dict)
    print_ir_after_all: bool = False
    print_ir_after_change: bool = False
    time_passes: bool = False
    verify_each: bool = False
    opt_level: int = 2
    disabled: list[str] = field(default_factory=list)
    shard_plan: dict[str, str] | None = None  # the plan of the shard-params pass
    memory_budget: str | None = None  # the auto-shard pass's
    activation_budget: str | None = None  # the auto-shard pass's
    explain: bool | str = False  # print the auto-shard pass's report: "bounds", "exact" (or True: exact)
    explain_checks: int | None = None  # its alternatives within that budget of the solver's work (None: proven)
    axis_costs: object = None  # AxisCosts of --axis-cost (plans minimize time), or None (bytes)
    solver_seconds: float | None = None  # propagate-sharding's solver time per function (None: its default)
    verify_distribute: str | None = None  # distribute.verify: "off", "sampled", "every-count" (None: off)
    verify_incomplete: str | None = None  # distribute.verify_incomplete: "error" or "warn" (None: error)

    @staticmethod
    def from_args(args: argparse.Namespace) -> OptOptions:
        from .args import merge_axis_costs

        names = [n.strip() for group in args.passes for n in group.split(",") if n.strip()]
        bind: dict[str, int] = {}
        for b in args.bind:
            bind.update(b)
        for flag, given in (("--memory-budget", getattr(args, "memory_budget", None) is not None),
                            ("--activation-budget", getattr(args, "activation_budget", None) is not None),
                            ("--explain", bool(getattr(args, "explain", None))),
                            ("--explain-checks", getattr(args, "explain_checks", None) is not None)):
            if given and "auto-shard" not in names:
                from .args import UsageError

                raise UsageError(f"{flag} is for the auto-shard pass; add it, e.g. -p auto-shard,distribute")
        for flag, value in (("--verify-distribute", getattr(args, "verify_distribute", None)),
                            ("--verify-incomplete", getattr(args, "verify_incomplete", None))):
            if value is not None and "distribute" not in names:
                from .args import UsageError

                raise UsageError(f"{flag} checks what the distribute pipeline produced; add it, e.g. -p distribute")
        return OptOptions(
            memory_budget=getattr(args, "memory_budget", None),
            activation_budget=getattr(args, "activation_budget", None),
            explain=("exact" if getattr(args, "explain_checks", None) is not None
                     else getattr(args, "explain", None) or False),
            explain_checks=getattr(args, "explain_checks", None),
            solver_seconds=getattr(args, "solver_seconds", None),
            verify_distribute=getattr(args, "verify_distribute", None),
            verify_incomplete=getattr(args, "verify_incomplete", None),
            shard_plan=_shard_plan(args, names),
            passes=names,
            bind=bind,
            print_ir_after_all=args.print_ir_after_all,
            print_ir_after_change=args.print_ir_after_change,
            time_passes=args.time_passes,
            verify_each=args.verify_each,
            opt_level=args.opt_level,
            disabled=list(args.disable_pass),
            axis_costs=merge_axis_costs(getattr(args, "axis_cost", []) or []),
        )


def _shard_plan(args: argparse.Namespace, passes: Sequence[str]) -> dict[str, str] | None:
    """The plan of ``--shard-plan`` and ``--shard`` (its entries added to the file's), or None without them."""
    from .args import UsageError
    from .models import read_shard_plan

    given = "--shard-plan" if getattr(args, "shard_plan", None) is not None else "--shard" if getattr(args, "shard", None) else None
    if given is None:
        if "shard-params" in passes:
            raise UsageError("-p shard-params needs a plan: --shard PATTERN=PLACEMENT (repeatable) or --shard-plan FILE")
        return None
    if "shard-params" not in passes:
        raise UsageError(f"{given} lays out parameters for the shard-params pass; add it, e.g. -p shard-params,distribute")
    return read_shard_plan(args)


def specialize_pass(values: dict[str, int]):
    """The registered ``specialize`` pass built for ``values`` (a clear error when it is missing)."""
    from ..transform import list_passes

    cls = list_passes().get("specialize")
    if cls is None:
        raise PassError(
            "--bind needs the 'specialize' pass, which this version of distir does not register yet"
        )
    return cls(dict(values))


def _check_disabled(names: Sequence[str]) -> None:
    """Every ``--disable-pass`` name must be a pass or pipeline (a typo would disable nothing)."""
    import difflib

    from ..transform import list_passes, list_pipelines

    known = [*list_passes(), *list_pipelines()]
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise PassError(f"--disable-pass {name}: no pass or pipeline has that name{hint} (see distir passes)")


def run_opt(mod, opts: OptOptions, log=None):
    """Verify ``mod``, run the named passes (then specialize for ``opts.bind``), verify the result."""
    from ..ir.verify import verify
    from ..transform import (
        PassContext,
        PassTimingInstrument,
        PrintIRInstrument,
        Sequential,
        VerifyInstrument,
    )

    log = log if log is not None else sys.stderr
    verify(mod)
    passes = [_named_pass(name, opts) for name in opts.passes]
    _check_disabled(opts.disabled)
    config = {}
    if opts.solver_seconds is not None:
        from ..transform.layout_choice.propagate_sharding import SOLVER_SECONDS_KEY

        config[SOLVER_SECONDS_KEY] = opts.solver_seconds
    if opts.axis_costs is not None:
        from ..transform.legalize_redistribute import AXIS_COSTS_KEY
        from .args import check_axis_costs

        check_axis_costs(opts.axis_costs, mod)
        config[AXIS_COSTS_KEY] = opts.axis_costs
    if opts.verify_distribute is not None or opts.verify_incomplete is not None:
        from ..transform.pipelines import VERIFY_DIMS_KEY, VERIFY_INCOMPLETE_KEY, VERIFY_KEY

        if opts.verify_distribute is not None:
            config[VERIFY_KEY] = opts.verify_distribute
        if opts.verify_incomplete is not None:
            config[VERIFY_INCOMPLETE_KEY] = opts.verify_incomplete
        # the sizes --bind gives, but the count's, are the ones the check runs at
        config[VERIFY_DIMS_KEY] = {k: v for k, v in opts.bind.items() if k != "num_workers"}
    if opts.bind:
        from .args import check_bind_names, module_symbols

        symbols = module_symbols(mod)
        if ("shard-params" in opts.passes or "auto-shard" in opts.passes) and not mod.meshes():
            symbols |= {"num_workers"}  # the size of the mesh shard-params and auto-shard declare
        check_bind_names(opts.bind, symbols)
        passes.append(specialize_pass(opts.bind))
    if not passes:
        return mod
    instruments: list = []
    timing = PassTimingInstrument() if opts.time_passes else None
    if timing is not None:
        instruments.append(timing)
    if opts.verify_each:
        instruments.append(VerifyInstrument())
    if opts.print_ir_after_all or opts.print_ir_after_change:
        instruments.append(
            PrintIRInstrument(after_all=opts.print_ir_after_all, after_change=opts.print_ir_after_change, stream=log)
        )
    ctx = PassContext(opt_level=opts.opt_level, disabled_passes=opts.disabled, instruments=instruments, config=config)
    from . import phase

    searching = "auto-shard" in opts.passes
    try:
        with ctx, (phase("auto-shard: choosing layouts" + (" and costing alternatives" if opts.explain else ""))
                   if searching else contextlib.nullcontext()):
            mod = Sequential(passes, name="distir-opt")(mod)
    finally:
        if timing is not None:
            log.write(timing.render() + "\n")
    if opts.verify_distribute not in (None, "off"):
        _log_verdicts(mod, log)
    if opts.explain:
        for p in passes:
            if getattr(p, "report", None) is not None:
                log.write(p.report.render() + "\n")
    verify(mod)
    return mod


def _log_verdicts(mod, log) -> None:
    """The verdicts of ``--verify-distribute``, one line each (stderr): what was checked, said where it is seen."""
    from ..transform.pipelines import VERDICTS_ATTR

    for func, verdict in dict(mod.attrs.get(VERDICTS_ATTR, {}) or {}).items():
        log.write(f"distribute.verify: @{func}: {verdict}\n")


def _named_pass(name: str, opts: OptOptions):
    """The pass ``name`` with the options the command line gives it (shard-params' plan, auto-shard's
    budget, the sizes of ``--bind`` as auto-shard's sizes and whether to explain)."""
    from ..transform import get_pass

    if name == "shard-params":
        return get_pass(name, plan=opts.shard_plan)
    if name == "auto-shard":
        options = {"sizes": dict(opts.bind), "explain": opts.explain, "explain_checks": opts.explain_checks}
        if opts.memory_budget is not None:
            options["memory_budget"] = opts.memory_budget
        if opts.activation_budget is not None:
            options["activation_budget"] = opts.activation_budget
        return get_pass(name, **options)
    return get_pass(name)


def run(args: argparse.Namespace) -> int:
    """Body of ``distir-opt`` / ``distir opt`` after argument parsing."""
    from . import read_module, write_text

    mod = read_module(args.file)
    mod = run_opt(mod, OptOptions.from_args(args))
    if getattr(args, "emit", "distir") == "relax":
        from ..tvm import to_relax

        write_text(to_relax(mod).script(), args.output)
    else:
        write_text(mod.script(), args.output)
    return 0


def build_parser(prog: str = "distir-opt") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``distir-opt`` console script."""
    from . import report_errors

    args = build_parser().parse_args(argv)
    return report_errors("distir-opt", lambda: run(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
