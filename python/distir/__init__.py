"""distir: distribute tensor programs over device meshes with a symbolic number of workers."""

import importlib as _importlib

from .errors import DiagnosticError, DistirError, ParseError

__version__ = "0.1.0"

__all__ = ["DiagnosticError", "DistirError", "ParseError", "__version__", "parse", "parse_file", "verify"]


def parse(text: str, source_name: str | None = None):
    """Parse distir IR text into an IRModule. Nothing in it is executed, and a str is only
    ever text: it is never opened as a file (use :func:`parse_file` for that)."""
    from .script.parser import parse as _parse

    return _parse(text, source_name=source_name)


def parse_file(path, source_name: str | None = None):
    """Read the file at ``path`` (UTF-8, at most 64 MiB) and parse it into an IRModule."""
    from .script.parser import parse_file as _parse_file

    return _parse_file(path, source_name=source_name)


def verify(global_mod, local_mod=None, **kwargs):
    """Check the lowered ``global_mod`` (or the hand-written ``local_mod``) against the global program
    at every count 1..8 (``counts=``, ``dims=``, ``seed=``); a sampled check, never a proof for
    other counts: :func:`distir.verification.verify`, docs/verify.md."""
    from .verification import verify as _verify

    return _verify(global_mod, local_mod, **kwargs)


_SUBMODULES = frozenset(
    {"analysis", "cli", "driver", "errors", "examples", "ir", "ops", "runtime", "script", "testing", "transform", "tvm",
     "verification"}
)


def __getattr__(name: str):
    """Import a subpackage on first use (``distir.transform``), as ``tvm.relax`` works after
    ``import tvm``, without paying for TVM or numpy at ``import distir``."""
    if name in _SUBMODULES:
        return _importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'distir' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _SUBMODULES)
