"""Example modules shipped with distir, as IR text files inside the package.

Each ``<name>.py`` here is distir IR in TVMScript syntax: read by :func:`distir.parse`,
never imported. They are package data so that ``distir demo`` and the docs work from a
plain ``pip install``. :func:`llama_stack` builds Llama-like models of any depth (with the IR builder).
"""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path

from ..errors import DistirError
from ._stack import llama_stack

__all__ = ["llama_stack", "load", "names", "path", "text"]


def _dir():
    return resources.files(__name__)


def names() -> list[str]:
    """Names of the bundled examples (file stems), sorted."""
    return sorted(
        p.name[: -len(".py")]
        for p in _dir().iterdir()
        if p.name.endswith(".py") and not p.name.startswith("_")
    )


def path(name: str) -> Path:
    """Filesystem path of example ``name`` (``"mlp"``); a DistirError names the known ones."""
    known = names()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise DistirError(f"no bundled example '{name}'{hint} (known: {', '.join(known)})")
    return Path(str(_dir().joinpath(f"{name}.py")))


def text(name: str) -> str:
    """Source text of example ``name``."""
    return path(name).read_text()


def load(name: str):
    """Parse example ``name`` into an IRModule."""
    from ..script import parse_file

    return parse_file(path(name))
