"""What ``distir verify`` concludes, in data and in words.

Three outcomes, and only these: every count of the domain *checked* (a sample of counts, said
so: this version proves nothing beyond the counts it ran), a *counterexample* (a concrete count,
output element and the workers holding it, with the command that replays it), or *not checked*
with the construct or count that stopped the check. There is no "proved": no argument that
extends the check past the counts run is implemented (docs/verify.md says what one would need).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CHECKED", "COUNTEREXAMPLE", "NOT_CHECKED", "Counterexample", "Verdict"]

CHECKED = "checked"
COUNTEREXAMPLE = "counterexample"
NOT_CHECKED = "not checked"


@dataclass(frozen=True)
class Counterexample:
    """One count at which the lowered module's assembled output is not the global program's."""

    count: int  # the value of the mesh symbol (the number of workers on a 1-D mesh)
    values: dict  # every size the run bound (the mesh symbol, other mesh sizes, other dims)
    output: int | None  # which output (flattened tuple order); None when the run itself failed
    index: tuple | None  # the element of that output (global indices), the one that differs most
    got: object = None
    expected: object = None
    workers: str = ""  # who holds that element at this count, in words
    message: str = ""  # the failure in one line
    replay: str = ""  # a command that shows the wrong number

    def describe(self) -> str:
        sizes = ", ".join(f"{k}={v}" for k, v in sorted(self.values.items()))
        if self.output is None:
            head = f"at {sizes}: {self.message}"
        else:
            head = (f"at {sizes}: output {self.output} element {list(self.index)} is {self.got!r}, "
                    f"the global program gives {self.expected!r}" + (f" ({self.workers})" if self.workers else ""))
        return head + (f"\n  replay: {self.replay}" if self.replay else "")


@dataclass(frozen=True)
class Verdict:
    """The outcome of :func:`distir.verification.verify`; ``str()`` gives it in words."""

    status: str  # CHECKED, COUNTEREXAMPLE or NOT_CHECKED
    counts: tuple[int, ...]  # the counts run without a difference (all of them when CHECKED); (0,): static meshes
    domain: tuple[int, ...]  # the counts asked for
    dims: dict  # the other symbolic sizes, at the values the check used
    seed: int
    counterexample: Counterexample | None = None
    reason: str = ""  # why NOT_CHECKED
    exact: list = field(default_factory=list)  # outputs compared exactly (integers, bools), by index
    tolerant: list = field(default_factory=list)  # float outputs: (index, dtype, rtol, atol)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Every count of the domain ran and matched (a sample: not a proof for other counts)."""
        return self.status == CHECKED

    def __str__(self) -> str:
        dims = ", ".join(f"{k}={v}" for k, v in sorted(self.dims.items()))
        at = f" with {dims}" if dims else ""
        if self.status == COUNTEREXAMPLE:
            return "COUNTEREXAMPLE " + self.counterexample.describe()
        if self.status == NOT_CHECKED:
            done = f" (counts {_ranges(self.counts)} matched first)" if self.counts else ""
            return f"NOT CHECKED: {self.reason}{done}"
        how = []
        if self.exact:
            how.append(f"output{'s' if len(self.exact) > 1 else ''} {', '.join(map(str, self.exact))} exactly")
        for i, dtype, rtol, atol in self.tolerant:
            how.append(f"output {i} ({dtype}) within rtol {rtol:g}, atol {atol:g} x its largest value")
        where = "on the module's static meshes" if self.counts == (0,) else f"for counts {_ranges(self.counts)}"
        return (f"CHECKED {where}{at} on random inputs (seed {self.seed}): "
                f"{'; '.join(how) or 'no outputs'}. Sampled, not proved: other counts, sizes and inputs "
                "were not run.")


def _ranges(counts) -> str:
    """``1..8`` for a run of consecutive counts, else the list."""
    counts = list(counts)
    if len(counts) > 2 and counts == list(range(counts[0], counts[-1] + 1)):
        return f"{counts[0]}..{counts[-1]}"
    return ", ".join(map(str, counts))
