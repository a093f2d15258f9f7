"""Passes over distir IR modules, and the infrastructure that runs them (see docs/passes.md).

Every module in this package (and its subpackages) that declares passes with :func:`register_pass` (or pipelines
with :func:`register_pipeline`) is found automatically: :func:`list_passes` and
:func:`get_pass` import them all. Names a module lists in its ``__all__`` are also
reachable as ``distir.transform.<Name>`` without editing this file.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from typing import Any

from .. import ops  # noqa: F401  (declares every op and step kind)
from .canonicalize import Canonicalize
from .instruments import (
    PassInstrument,
    PassTimingInstrument,
    PassVerifyError,
    PrintIRInstrument,
    VerifyInstrument,
)
from .pass_infra import (
    FunctionPass,
    ModulePass,
    Pass,
    PassContext,
    Sequential,
    add_pass_loader,
    get_pass,
    list_passes,
    list_pipelines,
    pass_doc,
    register_pass,
    register_pipeline,
)
from .rewrite import map_bindings, substitute_expr

__all__ = [
    "Canonicalize",
    "FunctionPass",
    "ModulePass",
    "Pass",
    "PassContext",
    "PassInstrument",
    "PassTimingInstrument",
    "PassVerifyError",
    "PrintIRInstrument",
    "Sequential",
    "VerifyInstrument",
    "get_pass",
    "list_passes",
    "list_pipelines",
    "map_bindings",
    "pass_doc",
    "register_pass",
    "register_pipeline",
    "substitute_expr",
]

_INFRA = {"pass_infra", "instruments", "rewrite", "canonicalize"}
_load_state = "idle"  # "loading" guards against a pass module that lists passes while it is imported


def _submodules(path=None, prefix: str = "") -> list[str]:
    """The modules of this package and of its subpackages (``layout_choice.auto_shard``), private
    ones and the infrastructure left out; found on disk, nothing imported."""
    names = []
    for m in pkgutil.iter_modules(path or __path__):
        if m.name.startswith("_") or (not prefix and m.name in _INFRA):
            continue
        if m.ispkg:
            names += _submodules([os.path.join(m.module_finder.path, m.name)], f"{prefix}{m.name}.")
        else:
            names.append(prefix + m.name)
    return sorted(names)


def _load_builtin_passes() -> None:
    """Import every pass module of this package so that their registrations run (once)."""
    global _load_state
    if _load_state != "idle":
        return
    _load_state = "loading"
    try:
        for name in _submodules():
            importlib.import_module(f"{__name__}.{name}")
    except BaseException:
        _load_state = "idle"  # report the broken module again next time rather than hide it
        raise
    _load_state = "done"


def __getattr__(name: str) -> Any:
    """``distir.transform.X`` for any X in the ``__all__`` of a pass module of this package."""
    if name.startswith("__"):
        raise AttributeError(name)
    for mod_name in _submodules():
        mod = importlib.import_module(f"{__name__}.{mod_name}")
        if name in getattr(mod, "__all__", ()):
            return getattr(mod, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


add_pass_loader(_load_builtin_passes)
