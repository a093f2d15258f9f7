"""Errors that carry a source position and print like a compiler diagnostic."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """A place in a source text: file name, 1-based line and column, and the extent."""

    source_name: str
    line: int
    column: int
    end_line: int | None = None
    end_column: int | None = None
    source_line: str | None = None

    def __str__(self) -> str:
        return f"{self.source_name}:{self.line}:{self.column}"


class DistirError(Exception):
    """Base class of every error distir reports to users."""


class PlacementError(DistirError):
    """A placement is malformed or does not fit its mesh or tensor (or its dtype)."""


class DiagnosticError(DistirError):
    """An error at a known place; ``str()`` shows the line with a caret under the place."""

    def __init__(self, message: str, span: Span | None = None, notes: list[str] | None = None):
        self.message = message
        self.span = span
        self.notes = list(notes or [])
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"error: {self.message}"]
        span = self.span
        if span is not None:
            lines.append(f" --> {span}")
            if span.source_line is not None:
                num = str(span.line)
                pad = " " * len(num)
                text = span.source_line.rstrip("\n").expandtabs(1)
                start = max(span.column - 1, 0)
                if span.end_line == span.line and span.end_column and span.end_column > span.column:
                    width = span.end_column - span.column
                else:
                    width = 1
                width = max(1, min(width, max(len(text) - start, 1)))
                lines.append(f"{pad} |")
                lines.append(f"{num} | {text}")
                lines.append(f"{pad} | {' ' * start}{'^' * width}")
        for note in self.notes:
            lines.append(f"note: {note}")
        return "\n".join(lines)


class ParseError(DiagnosticError):
    """The text is not distir IR."""


class TypeInferenceError(DistirError):
    """An op was given arguments its type rule rejects. Callers add the position."""


class VerifyError(DistirError):
    """A module is not well formed; ``problems`` lists every finding."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        head = f"{len(self.problems)} problem(s) found by the verifier:"
        super().__init__("\n".join([head] + [f"  - {p}" for p in self.problems]))


class SpecializeError(DistirError):
    """A size is bound to something that is not a positive integer, or to a name the module lacks."""


class MissingFunctionError(DistirError, KeyError):
    """``mod[name]`` for a function the module does not have (a KeyError too, as for a dict)."""

    def __str__(self) -> str:  # KeyError's own str() would quote the message
        return str(self.args[0]) if self.args else ""


class PassError(DistirError):
    """A pass was misused: unknown name, bad option, missing required pass."""
