"""Turn a decorated Python class or def into IR by parsing its source text (never running it)."""

from __future__ import annotations

import inspect
import textwrap

from ..errors import ParseError


def _source(obj, what: str) -> tuple[str, str, int, int]:
    """Dedented source, file name, line offset and column offset of a class or function."""
    try:
        lines, start = inspect.getsourcelines(obj)
        filename = inspect.getsourcefile(obj) or inspect.getfile(obj)
    except (OSError, TypeError) as err:
        raise ParseError(
            f"cannot read the source of {what} '{getattr(obj, '__qualname__', obj)}' ({err}); "
            "define it in a file, or pass the text to distir.parse"
        ) from None
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    first = lines[0] if lines else ""
    first_dedented = dedented.splitlines()[0] if dedented else ""
    col = len(first.rstrip("\n")) - len(first_dedented)
    return dedented, filename, max(start - 1, 0), max(col, 0)


def module_from_class(cls):
    """The IRModule an ``@I.ir_module`` class describes."""
    from .parser import parse_source

    text, filename, line, col = _source(cls, "class")
    return parse_source(text, filename, line_offset=line, col_offset=col)


def function_from_def(func):
    """The Function an ``@R.function`` def at the top level describes."""
    from .parser import parse_source

    text, filename, line, col = _source(func, "function")
    mod = parse_source(text, filename, line_offset=line, col_offset=col)
    return mod[func.__name__]


def in_class(func) -> bool:
    """True for a method being defined inside a class body (``Module.main``)."""
    parts = getattr(func, "__qualname__", "").split(".")
    return len(parts) >= 2 and parts[-2] != "<locals>"
