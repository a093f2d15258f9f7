"""``distir show``: draw how tensors lie over the device mesh, block by block.

Reads a global-view module (laying out unplaced bindings with propagate-sharding first) or
a local-view one (whose parameters and result keep their global layouts), picks tensors by
name, specializes the mesh to ``--num-workers`` and draws each tensor's blocks labelled
with the devices that hold them: in colour on a terminal, in plain text otherwise (or with
``--plain``), and as a PNG with ``--png``. See docs/analysis.md.
"""

from __future__ import annotations

import argparse
import sys

HELP = "draw a tensor's layout over the device mesh (blocks labelled with the devices holding them)"
DESCRIPTION = """\
Draw how tensors are laid out over the device mesh, like JAX's visualize_array_sharding:
a grid of the tensor's blocks, each labelled with the devices that hold it (0-3: replicas;
sum(0-1): partial values to be summed). Default: the parameters and the result of @main."""
EPILOG = """\
examples:
  distir show model.py                          every parameter and the result, 4 workers
  distir show model.py --tensor w1 --num-workers 8
  distir show model.py --tensor h --tensor y --png layout.png"""


DEFAULT_WORKERS = 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .args import MAX_WORKERS, image_file, parse_binding, workers
    from .models import add_shard_arguments

    parser.add_argument("file", metavar="FILE", help="module to read ('-' for stdin)")
    parser.add_argument("--tensor", action="append", default=[], metavar="NAME",
                        help="a parameter (its state-dict name, like wte.weight, works too) or binding to draw "
                             "(repeatable; default: the parameters and the result)")
    parser.add_argument("-n", "--num-workers", type=workers, default=None, metavar="N",
                        help=f"mesh size to draw at (default {DEFAULT_WORKERS}, at most {MAX_WORKERS})")
    parser.add_argument("--symbol", default="num_workers", metavar="NAME", help="the mesh size variable (default num_workers)")
    parser.add_argument("--bind", action="append", default=[], type=parse_binding, metavar="NAME=INT",
                        help="values of other symbolic sizes, for the block shapes (repeatable)")
    parser.add_argument("--func", metavar="NAME", help="function to read (default: main, or the module's only function)")
    parser.add_argument("--png", metavar="PNG", type=image_file,
                        help="also draw the grids into this PNG file (matplotlib; .svg, .pdf ... work too)")
    parser.add_argument("--plain", action="store_true", help="plain ASCII even on a terminal")
    add_shard_arguments(parser)


def layouts(mod, func: str | None = None) -> tuple[list[tuple[str, object]], str | None]:
    """(name, global type) of every tensor that has a layout, parameters first, and the result's name."""
    from ..analysis.common import pick_function
    from ..ir.expr import Var
    from ..ir.types import DTensorType
    from ..transform import list_passes
    from ..transform.lower_to_local import GLOBAL_PARAMS, GLOBAL_RESULT

    f = pick_function(mod, func)
    result = f.result.name if isinstance(f.result, Var) else None
    if GLOBAL_PARAMS in f.attrs:  # local view: only the recorded global signature has layouts
        out = [(p.name, t) for p, t in zip(f.params, f.attrs[GLOBAL_PARAMS])]
        if result is not None and GLOBAL_RESULT in f.attrs:
            out.append((result, f.attrs[GLOBAL_RESULT]))
        return out, result
    placed = all(isinstance(b.var.type, DTensorType) for b in f.bindings())
    if not placed and "propagate-sharding" in list_passes():
        from ..transform import get_pass

        f = get_pass("propagate-sharding")(mod)[f.name]
    out = [(p.name, p.type) for p in f.params] + [(b.var.name, b.var.type) for b in f.bindings()]
    return out, f.result.name if isinstance(f.result, Var) else None


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ..analysis.common import AnalysisError, pick_function
    from ..analysis.layout_view import layout_grid, write_png
    from ..ir.verify import verify
    from . import read_module
    from .args import UsageError, check_bind_names, check_mesh_symbol, module_symbols
    from .models import apply_shard_plan, parameter_aliases

    values: dict[str, int] = {}
    for b in args.bind:
        values.update(b)
    if args.symbol in values:
        raise UsageError(f"--bind {args.symbol}={values[args.symbol]}: {args.symbol} is the mesh size; set it with "
                         f"-n/--num-workers")
    mod = read_module(args.file)
    verify(mod)
    mod = apply_shard_plan(mod, args)
    check_bind_names(values, module_symbols(mod), args.symbol)
    # a static mesh is drawn as it is (a -n given for it must agree with it)
    if mod.meshes() and check_mesh_symbol(mod, args.symbol, args.num_workers):
        values[args.symbol] = DEFAULT_WORKERS if args.num_workers is None else args.num_workers
    f = pick_function(mod, args.func)
    tensors, result = layouts(mod, args.func)
    by_name = dict(tensors)
    aliases = parameter_aliases(f)
    given_name = {ir: given for given, ir in aliases.items()}  # a model's weights by their state-dict names
    if args.tensor:
        names = []
        for n in args.tensor:
            n = aliases.get(n, n) if n not in by_name else n
            if n not in by_name:
                import difflib

                known = [given_name.get(k, k) for k in by_name]
                close = difflib.get_close_matches(n, known, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise AnalysisError(
                    f"@{f.name} has no tensor '{n}' with a layout{hint} (it has: {', '.join(known[:12])}"
                    f"{', ...' if len(known) > 12 else ''})"
                )
            names.append(n)
    else:
        names = [p.name for p in f.params] + ([result] if result is not None and result not in (p.name for p in f.params) else [])
    meshes = mod.meshes()
    default_mesh = meshes[0] if meshes else None

    def mesh_name(t) -> str:
        mesh = getattr(t, "mesh", default_mesh)
        for i, m in enumerate(meshes):
            if m == mesh:
                return f"mesh[{i}]"
        return ""

    grids, skipped, first_error = [], [], None
    for n in names:
        shown = given_name.get(n, n)
        try:
            grids.append(layout_grid(shown, by_name[n], values, mesh_name=mesh_name(by_name[n]), default_mesh=default_mesh))
        except AnalysisError as err:
            if args.tensor:
                raise  # a tensor asked for by name: the error is the answer
            first_error = first_error or err
            skipped.append(f"{shown}: not drawn: {err}")
    if not grids:
        raise first_error
    console = Console(file=sys.stdout, highlight=False)
    plain = args.plain or not console.is_terminal
    for i, g in enumerate(grids):
        if i:
            sys.stdout.write("\n")
        if plain:
            sys.stdout.write(g.text() + "\n")
        else:
            console.print(g.rich(console.color_system))
    for note in skipped:  # drawing every tensor: the ones a picture cannot show are named, not fatal
        sys.stdout.write(f"\n{note}\n")
    if args.png:
        write_png(grids, args.png)
        sys.stdout.write(f"wrote {args.png}\n")
    return 0
