"""``distir example``: write a bundled model to a file, so that the README's commands run as printed.

``distir example`` lists the names; ``distir example attention -o model.py`` writes the bundled IR
text; ``--plain`` takes its layouts out (a module for auto-shard); ``llama_nn`` is the Llama written
with ``relax.frontend.nn`` (``distir.tvm.nn_llama``; ``gpt2`` likewise), imported with ``from_nn`` (needs TVM), and
``--plan FILE`` writes its tensor-parallel shard plan as JSON.
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
  distir example llama_nn -o llama_nn.py --plan tp.json
                                              a relax.frontend.nn Llama (imported) and its plan"""

#: models written with relax.frontend.nn: name -> (module, class, its shard plan), imported with from_nn
NN_MODELS = {"llama_nn": ("distir.tvm.nn_llama", "Llama", "TP_PLAN_STRATEGIES"),
             "gpt2": ("distir.tvm.nn_gpt2", "GPT2", "TP_PLAN")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", metavar="NAME", help="the model (none: list the names)")
    parser.add_argument("-o", "--output", metavar="FILE", help="write it to FILE (default: stdout)")
    parser.add_argument("--plain", action="store_true",
                        help="take every layout out (DTensor parameters become plain, hints go)")
    parser.add_argument("--plan", metavar="FILE", help=f"with {', '.join(NN_MODELS)}: write its shard plan (JSON)")


def names() -> list[str]:
    from .. import examples

    return sorted([*examples.names(), *NN_MODELS])


def model_text(name: str, plain: bool = False) -> str:
    """The IR text of bundled model ``name`` (layouts taken out with ``plain``)."""
    from .. import examples

    if name not in NN_MODELS and not plain:
        return examples.text(name)  # as shipped, with its comments; an unknown name is one line
    mod = _nn_model(name)[0] if name in NN_MODELS else examples.load(name)
    if plain:
        from ..transform.layout_choice.auto_shard import strip_layouts

        mod = strip_layouts(mod)
    return mod.script()


@functools.cache
def _nn_model(name: str):
    """(the imported module, its shard plan) of an nn model (imported once: the model and its plan)."""
    import importlib

    module, cls, plan = NN_MODELS[name]
    try:
        m = importlib.import_module(module)
        from ..tvm import from_nn
    except ModuleNotFoundError as err:
        raise DistirError(f"'{name}' is a relax.frontend.nn model: it needs TVM ({err.name} cannot be imported)") from None
    return from_nn(getattr(m, cls)(), m.spec()), dict(getattr(m, plan))


#: the files the README's commands name, as its ``distir example`` lines write them: file -> (model, plain)
MAIN_FILES = {"model.py": ("attention", False), "plain.py": ("mlp", True), "mesh2d.py": ("mesh2d", False),
              "llama_nn.py": ("llama_nn", False)}


def main_files() -> dict[str, str]:
    """The text of each file the README's commands name (and ``tp.json``, llama_nn's plan)."""
    import json

    files = {name: model_text(model, plain) for name, (model, plain) in MAIN_FILES.items()}
    files["tp.json"] = json.dumps(_nn_model("llama_nn")[1], indent=2)
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
    if args.plan is not None and args.name not in NN_MODELS:
        raise DistirError(f"--plan: '{args.name}' has its layouts in its text; {' and '.join(NN_MODELS)} have a plan")
    write_text(model_text(args.name, args.plain), args.output)
    if args.plan is not None:
        write_text(json.dumps(_nn_model(args.name)[1], indent=2), args.plan)
    return 0
