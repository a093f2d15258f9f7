"""Pass instruments: code called around every pass a PassContext runs (as in TVM).

``PassTimingInstrument`` times passes, ``PrintIRInstrument`` prints the module after
passes (all, or only those that changed it), ``VerifyInstrument`` runs the verifier
after each pass and names the pass that broke the module.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from ..errors import VerifyError
from ..ir.expr import IRModule

if TYPE_CHECKING:  # pragma: no cover
    from .pass_infra import Pass

__all__ = [
    "PassInstrument",
    "PassTimingInstrument",
    "PassVerifyError",
    "PrintIRInstrument",
    "VerifyInstrument",
    "render_module",
]


def _pass_name(p: Pass) -> str:
    return p.name or type(p).__name__


def render_module(mod: IRModule) -> str:
    """The module's text (``mod.script()``)."""
    return mod.script()


class PassInstrument:
    """Base class: override the hooks you need. All hooks default to doing nothing."""

    def enter_pass_ctx(self) -> None:
        """Called when the PassContext holding this instrument is entered."""

    def exit_pass_ctx(self) -> None:
        """Called when that PassContext is exited."""

    def should_run(self, mod: IRModule, p: Pass) -> bool:
        """Return False to skip ``p``."""
        return True

    def run_before_pass(self, mod: IRModule, p: Pass) -> None:
        """Called just before ``p`` transforms ``mod``."""

    def run_after_pass(self, mod: IRModule, p: Pass, changed: bool) -> None:
        """Called with ``p``'s result; ``changed`` is False when it equals the input structurally."""


@dataclass
class PassTiming:
    name: str
    seconds: float
    changed: bool


class PassTimingInstrument(PassInstrument):
    """Records each pass's wall time; :meth:`render` formats them as a table."""

    def __init__(self) -> None:
        self.timings: list[PassTiming] = []
        self._starts: list[float] = []

    def enter_pass_ctx(self) -> None:
        self.timings.clear()
        self._starts.clear()

    def run_before_pass(self, mod: IRModule, p: Pass) -> None:
        self._starts.append(time.perf_counter())

    def run_after_pass(self, mod: IRModule, p: Pass, changed: bool) -> None:
        start = self._starts.pop() if self._starts else time.perf_counter()
        self.timings.append(PassTiming(_pass_name(p), time.perf_counter() - start, changed))

    @property
    def total(self) -> float:
        return sum(t.seconds for t in self.timings)

    def render(self) -> str:
        """A plain-text table: pass, time, share of the total, whether it changed the module."""
        total = self.total
        rows = [(t.name, f"{t.seconds * 1e3:.3f} ms", f"{(t.seconds / total * 100) if total else 0:.1f}%",
                 "yes" if t.changed else "no") for t in self.timings]
        rows.append(("total", f"{total * 1e3:.3f} ms", "100.0%" if rows else "", ""))
        head = ("pass", "time", "share", "changed")
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]

        def line(r: tuple[str, ...]) -> str:
            return "  ".join(c.ljust(w) if i in (0, 3) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

        sep = "  ".join("-" * w for w in widths)
        body = [line(r) for r in rows[:-1]]
        return "\n".join(["Pass timing:", line(head), sep, *body, sep, line(rows[-1])])


class PrintIRInstrument(PassInstrument):
    """Prints the module after each pass (``after_all``) or after each pass that changed it."""

    def __init__(self, after_all: bool = False, after_change: bool = True, stream: IO[str] | None = None) -> None:
        self.after_all = after_all
        self.after_change = after_change
        self.stream = stream

    def run_after_pass(self, mod: IRModule, p: Pass, changed: bool) -> None:
        if not (self.after_all or (self.after_change and changed)):
            return
        stream = self.stream if self.stream is not None else sys.stderr
        note = "" if changed else " (unchanged)"
        stream.write(f"# IR after pass '{_pass_name(p)}'{note}\n{render_module(mod).rstrip()}\n\n")
        stream.flush()


class PassVerifyError(VerifyError):
    """The module stopped verifying after a pass; ``pass_name`` says which."""

    def __init__(self, pass_name: str, problems: list[str]):
        super().__init__(problems)
        self.pass_name = pass_name
        msg = f"the module does not verify after pass '{pass_name}':\n" + "\n".join(f"  - {q}" for q in self.problems)
        self.args = (msg,)


class VerifyInstrument(PassInstrument):
    """Runs the verifier after every pass; raises :class:`PassVerifyError` naming the culprit."""

    def run_after_pass(self, mod: IRModule, p: Pass, changed: bool) -> None:
        if not changed:
            return  # an unchanged module verifies as well as it did before
        from ..ir.verify import collect_problems

        problems = collect_problems(mod)
        if problems:
            raise PassVerifyError(_pass_name(p), problems)
