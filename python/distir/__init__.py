"""distir: distribute tensor programs over device meshes with a symbolic number of workers."""

from .errors import DiagnosticError, DistirError, ParseError

__version__ = "0.1.0"

__all__ = ["DiagnosticError", "DistirError", "ParseError", "__version__", "parse"]


def parse(text_or_path, source_name: str | None = None):
    """Parse distir IR text (or a path to a file of it) into an IRModule. Nothing in it is executed."""
    from .script.parser import parse as _parse

    return _parse(text_or_path, source_name=source_name)
