"""Command-line tools: ``distir-opt`` and ``distir`` (with subcommands). See docs/cli.md.

Shared pieces live here: reading a module from a file or stdin, writing output, and
turning every :class:`~distir.errors.DistirError` into a message on stderr and exit
status 1 instead of a traceback.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Callable
from typing import TextIO

from ..errors import DistirError

__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "phase", "read_module", "report_errors", "write_text"]

EXIT_OK = 0
EXIT_ERROR = 1  # the input or a pass failed
EXIT_USAGE = 2  # bad arguments (argparse's status too)


def read_module(file: str):
    """Parse the module in ``file`` (``-`` for stdin). Errors are DistirErrors with positions.

    Input is UTF-8 text of at most 64 MiB (``distir.script.source.MAX_INPUT_BYTES``); at
    most that many bytes plus one are read, from a file or from stdin."""
    from .. import parse_file
    from ..script.parser import parse_source
    from ..script.source import read_stream
    from .models import nn_module_hint

    if file == "-":
        stdin = getattr(sys.stdin, "buffer", sys.stdin)  # bytes: decoded strictly, never by the locale
        return parse_source(read_stream(stdin, "<stdin>"), "<stdin>")
    path, colon, name = file.rpartition(":")
    if colon and name.isidentifier() and path.endswith(".py") and not os.path.exists(file) and os.path.isfile(path):
        raise DistirError(nn_module_hint(path, name) or f"'{path}' defines no nn.Module '{name}'")  # model.py:ClassName
    try:
        return parse_file(file)
    except DistirError as err:
        hint = nn_module_hint(file) if file.endswith(".py") and os.path.isfile(file) else None
        if hint is None:
            raise
        raise DistirError(hint) from err


def write_text(text: str, output: str | None, stream: TextIO | None = None) -> None:
    """Write ``text`` to the file ``output``, or to ``stream`` (stdout) when there is none."""
    if not text.endswith("\n"):
        text += "\n"
    if output and output != "-":
        from pathlib import Path

        try:
            Path(output).write_text(text)
        except OSError as err:
            raise DistirError(f"cannot write '{output}': {err}") from None
    else:
        (stream or sys.stdout).write(text)


@contextlib.contextmanager
def phase(text: str):
    """A spinner with the time elapsed on stderr while a step runs (a TVM build, thousands of
    simulated workers), when stderr is a terminal; gone when the step ends."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(file=sys.stderr)
    with Progress(SpinnerColumn(), TextColumn(text), TimeElapsedColumn(), console=console, transient=True,
                  disable=not console.is_terminal) as progress:
        progress.add_task(text, total=None)
        yield


def _show_warning(prog: str):
    def show(message, category, filename, lineno, file=None, line=None):
        sys.stderr.write(f"{prog}: warning: {message}\n")

    return show


def report_errors(prog: str, body: Callable[[], int]) -> int:
    """Run ``body``; a DistirError becomes its message on stderr and exit status 1.

    A :class:`~distir.cli.args.UsageError` (arguments that contradict each other) exits
    with status 2, like argparse's usage errors. Running out of memory, and any other
    exception (a bug in distir), is one ``prog: ...`` line and exit status 1 too; set
    ``DISTIR_TRACEBACK=1`` to get Python's traceback of the latter instead.

    Warnings (such as propagation naming a tensor that needs a hint) are printed as
    ``prog: warning: ...`` lines, without Python's file and line of the warning call."""
    from .args import UsageError

    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning(prog)
            return body()
    except DistirError as err:
        msg = str(err)
        if not msg.startswith("error"):
            msg = f"error: {msg}"
        sys.stderr.write(f"{prog}: {msg}\n")
        return EXIT_USAGE if isinstance(err, UsageError) else EXIT_ERROR
    except MemoryError as err:
        detail = str(err).splitlines()[0] if str(err) else "no detail"
        sys.stderr.write(f"{prog}: error: out of memory ({detail}); use smaller sizes\n")
        return EXIT_ERROR
    except BrokenPipeError:  # `distir-opt x | head` is fine; silence Python's flush at exit
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return EXIT_OK
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return 130
    except Exception as err:  # a bug: still one line, unless asked for the traceback
        if os.environ.get("DISTIR_TRACEBACK"):
            raise
        detail = str(err).strip().splitlines()
        last = detail[-1] if detail else ""
        sys.stderr.write(
            f"{prog}: internal error: {type(err).__name__}{': ' + last if last else ''} "
            f"(a bug in distir; set DISTIR_TRACEBACK=1 for the traceback)\n"
        )
        return EXIT_ERROR
