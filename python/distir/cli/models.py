"""What ``run``, ``show`` and ``sweep`` share for a module imported from ``relax.frontend.nn``
(or any module whose parameters are laid out by name): the shard plan of ``--shard`` /
``--shard-plan`` (read as ``distir-opt`` reads it), the function to work on (the only one
without ``--func``), and parameters named by their state-dict names (``wte.weight``) as well
as by the text's (``wte_weight``). See docs/cli.md.
"""

from __future__ import annotations

import argparse

from ..errors import DistirError

__all__ = ["add_shard_arguments", "apply_shard_plan", "function_name", "nn_module_hint", "parameter_aliases",
           "read_shard_plan"]

SHARD_HELP = ("lay out the parameters whose names (state-dict names like wte.weight, or the text's) match the glob "
              "PATTERN as PLACEMENT (S[0], R, ...) or a strategy (colwise, rowwise, vocab, replicate); repeatable")
SHARD_PLAN_HELP = "the shard plan as a .json object or .toml table of PATTERN: PLACEMENT (--shard entries are added)"


def add_shard_arguments(parser: argparse.ArgumentParser, *, prefix: str = "") -> None:
    """``--shard PATTERN=PLACEMENT`` (repeatable) and ``--shard-plan FILE``."""
    from .args import shard_entry

    parser.add_argument("--shard", action="append", default=[], type=shard_entry, metavar="PATTERN=PLACEMENT",
                        help=prefix + SHARD_HELP)
    parser.add_argument("--shard-plan", metavar="FILE", help=prefix + SHARD_PLAN_HELP)


def read_shard_plan(args: argparse.Namespace) -> dict[str, str] | None:
    """The plan of ``--shard-plan`` and ``--shard`` (its entries added to the file's), or None without them."""
    from .args import UsageError

    entries = list(getattr(args, "shard", []) or [])
    path = getattr(args, "shard_plan", None)
    if not entries and path is None:
        return None
    plan: dict[str, str] = {}
    if path is not None:
        from ..transform.layout_choice.shard_params import load_shard_plan

        plan.update(load_shard_plan(path))
    for pattern, value in entries:
        if pattern in plan:
            raise UsageError(f"--shard {pattern}={value}: pattern '{pattern}' is given twice (as {plan[pattern]})")
        plan[pattern] = value
    return plan


def apply_shard_plan(mod, args: argparse.Namespace):
    """``mod`` with its parameters laid out by the ``--shard`` plan (the shard-params pass), or as it is."""
    plan = read_shard_plan(args)
    if plan is None:
        return mod
    from ..ir.verify import verify
    from ..transform import get_pass

    verify(mod)  # a bad module is named where it is written, before the plan is matched against it
    return get_pass("shard-params", plan=plan)(mod)


def function_name(mod, func: str | None) -> str:
    """``func``, or with none ``main`` or the module's only function (a ``relax.frontend.nn`` import
    has one, ``forward``)."""
    from ..analysis.common import pick_function

    return pick_function(mod, func).name


def parameter_aliases(func) -> dict[str, str]:
    """Each parameter's recorded state-dict name (``wte.weight``) -> its name in the text
    (``wte_weight``), for the modules ``distir.tvm.from_nn`` imports; empty for others."""
    from ..transform.weights import PARAM_NAMES, param_names

    if PARAM_NAMES not in func.attrs:
        return {}
    try:
        names = param_names(func)
    except DistirError:
        return {}
    return {given: p.name for given, p in zip(names, func.params) if given != p.name}


def nn_module_hint(path: str, class_name: str | None = None) -> str | None:
    """One line for a Python file that defines a ``relax.frontend.nn`` model rather than IR text
    (``class X(nn.Module)``; with ``class_name``, the ``model.py:X`` form), saying how to write its IR
    with ``distir.tvm.from_nn``; None for any other file. The file is read with ``ast``, never run:
    distir takes IR text only, since running a model's Python is running its author's code."""
    import ast
    import os
    import shlex

    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(1 << 24))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    models = [n.name for n in tree.body if isinstance(n, ast.ClassDef)
              and any((ast.unparse(b).rsplit(".", 1)[-1] == "Module") for b in n.bases)]
    if class_name is not None and class_name not in models:
        known = f" (it defines: {', '.join(models)})" if models else " (it defines no nn.Module class)"
        return f"'{path}' has no nn.Module class '{class_name}'{known}; distir reads IR text, see docs/frontend.md"
    if not models:
        return None
    name = class_name or models[0]
    specs = [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
             if isinstance(t, ast.Name) and "spec" in t.id.lower()]
    funcs = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and "spec" in n.name.lower()]
    stem = os.path.splitext(os.path.basename(path))[0]
    spec = f"m.{specs[0]}" if specs else f"m.{funcs[0]}()" if funcs else "SPEC"
    code = (f"import {stem} as m; from distir.tvm import from_nn; "
            f"print(from_nn(m.{name}(), {spec}).script())")
    folder = os.path.dirname(path)
    where = f"PYTHONPATH={shlex.quote(folder)} " if folder else ""
    spec_note = "" if specs or funcs else " (SPEC: the method -> {input: nn.spec.Tensor} dict of export_tvm)"
    return (f"'{path}' is Python defining the nn.Module '{name}', not IR text; distir never runs a Python file: "
            f"write its IR once with {where}python -c {shlex.quote(code)} > {stem}_ir.py{spec_note}, "
            f"then give {stem}_ir.py (docs/frontend.md)")
