"""``distir example``: write a bundled model to a file, so that the README's commands run as printed.

``distir example`` lists the names; ``distir example attention -o model.py`` writes the bundled IR
text; ``--plain`` takes its layouts out (a module for auto-shard); the models written with
``relax.frontend.nn`` (:mod:`distir.examples.nn`: ``nn_llama``, ``gpt2``, ``gqa``, ``decode``, ``moe``) are
imported with ``from_nn`` (needs TVM) and written without layouts, and ``--plan FILE`` writes the
model's shard plan as JSON.
"""

from __future__ import annotations

import argparse
import functools

from ..errors import DistirError

HELP = "write a bundled model (IR text) to a file or stdout; with no name, list them"
EPILOG = """\
examples:
  distir example                              list the bundled models
  distir example attention -o model.py        an attention block with its layouts
  distir example mlp --plain -o plain.py      an MLP with no layouts (for -p auto-shard)
  distir example mesh2d -o mesh2d.py          three layouts on a 2-D mesh
  distir example nn_llama -o llama_nn.py --plan tp.json
                                              a relax.frontend.nn Llama (imported) and its plan"""

#: the plan written for an nn model where it is not the one distir.examples.nn lays it out by: the Llama's
#: by strategy names (colwise, rowwise), which the README's --shard lines refine
PLAN_OVERRIDES = {"nn_llama": "TP_PLAN_STRATEGIES"}


def _nn_names() -> list[str]:
    from ..examples import nn

    return sorted(nn.MODELS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", metavar="NAME", help="the model (none: list the names)")
    parser.add_argument("-o", "--output", metavar="FILE", help="write it to FILE (default: stdout)")
    parser.add_argument("--plain", action="store_true",
                        help="take every layout out (DTensor parameters become plain, hints go)")
    parser.add_argument("--plan", metavar="FILE", help="with a relax.frontend.nn model (nn_llama, gpt2, ...): write "
                        "its shard plan (JSON)")


def names() -> list[str]:
    from .. import examples

    return sorted(set(examples.names()))


def model_text(name: str, plain: bool = False) -> str:
    """The IR text of bundled model ``name`` (layouts taken out with ``plain``)."""
    from .. import examples

    nn = name in _nn_names()
    if not nn and not plain:
        return examples.text(name)  # as shipped, with its comments; an unknown name is one line
    mod = _nn_model(name)[0] if nn else examples.load(name)
    if plain:
        from ..transform.layout_choice.auto_shard import strip_layouts

        mod = strip_layouts(mod)
    return mod.script()


@functools.cache
def _nn_model(name: str):
    """(the imported module, its shard plan) of an nn model (imported once: the model and its plan)."""
    import importlib

    try:
        from ..examples import nn
        from ..tvm import from_nn

        model, spec, plan = nn.model(name)
    except ModuleNotFoundError as err:
        raise DistirError(f"'{name}' is a relax.frontend.nn model: it needs TVM ({err.name} cannot be imported)") from None
    if name in PLAN_OVERRIDES:
        plan = getattr(importlib.import_module(f"{nn.__name__}.{nn.MODELS[name][0]}"), PLAN_OVERRIDES[name])
    return from_nn(model, spec), dict(plan)


#: the files the README's commands name, as its ``distir example`` lines write them: file -> (model, plain)
MAIN_FILES = {"model.py": ("attention", False), "plain.py": ("mlp", True), "mesh2d.py": ("mesh2d", False),
              "llama_nn.py": ("nn_llama", False)}


def main_files() -> dict[str, str]:
    """The text of each file the README's commands name (and ``tp.json``, llama_nn's plan)."""
    import json

    files = {name: model_text(model, plain) for name, (model, plain) in MAIN_FILES.items()}
    files["tp.json"] = json.dumps(_nn_model("nn_llama")[1], indent=2)
    return files


def run(args: argparse.Namespace) -> int:
    import json

    from . import write_text

    if args.name is None:
        if args.output or args.plain or args.plan:
            raise DistirError("name the model to write (distir example lists them)")
        print("\n".join(names()))
        return 0
    if args.name not in names():
        import difflib

        close = difflib.get_close_matches(args.name, names(), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise DistirError(f"no bundled model '{args.name}'{hint} (known: {', '.join(names())})")
    if args.plan is not None and args.name not in _nn_names():
        raise DistirError(f"--plan: '{args.name}' has its layouts in its text; the relax.frontend.nn models "
                          f"({', '.join(_nn_names())}) have a plan")
    write_text(model_text(args.name, args.plain), args.output)
    if args.plan is not None:
        write_text(json.dumps(_nn_model(args.name)[1], indent=2), args.plan)
    return 0
