"""Example modules shipped with distir: IR text files, and models written with ``relax.frontend.nn``.

Each ``<name>.py`` here is distir IR in TVMScript syntax: read by :func:`distir.parse`,
never imported. They are package data so that ``distir demo`` and the docs work from a
plain ``pip install``. :func:`llama_stack` builds Llama-like models of any depth (with the IR builder).
The subpackage ``nn`` holds the ``relax.frontend.nn`` models (GPT-2, a Llama, ...), imported
with TVM only when one is loaded; :func:`names` and :func:`load` know both kinds.
"""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path

from ..errors import DistirError
from ._stack import llama_stack
from .nn import MODELS as _NN_MODELS

__all__ = ["ir_names", "llama_stack", "load", "names", "path", "text"]


def _dir():
    return resources.files(__name__)


def names() -> list[str]:
    """Names of the bundled examples (the IR files' stems and the nn models' names), sorted."""
    return sorted(_text_names() | set(_NN_MODELS))


def ir_names() -> list[str]:
    """Names of the examples written as IR text (whose :func:`text` :func:`distir.parse` reads), sorted."""
    return sorted(_text_names())


def _text_names() -> set[str]:
    return {p.name[: -len(".py")] for p in _dir().iterdir() if p.name.endswith(".py") and not p.name.startswith("_")}


def path(name: str) -> Path:
    """Filesystem path of example ``name`` (``"mlp"``); a DistirError names the known ones."""
    known = names()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise DistirError(f"no bundled example '{name}'{hint} (known: {', '.join(known)})")
    if name in _NN_MODELS:
        from . import nn

        return nn.path(name)
    return Path(str(_dir().joinpath(f"{name}.py")))


def text(name: str) -> str:
    """Source text of example ``name`` (Python for an nn model)."""
    return path(name).read_text()


def load(name: str):
    """Example ``name`` as an IRModule: the IR text parsed, or the nn model imported and laid out by its plan."""
    file = path(name)
    if name in _NN_MODELS:
        from . import nn

        return nn.load(name)
    from ..script import parse_file

    return parse_file(file)
