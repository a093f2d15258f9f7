"""What ``distir verify`` concludes, in data and in words.

Four outcomes, and only these: *checked at every count* (one count of each class run and
matched, every other count proved to compute what one of them computes: :mod:`distir.verification.cutoff`; the
inputs and other sizes are still a sample, said so), every count of the domain *checked* (a
sample of counts, with what kept the every-count argument from applying), a *counterexample*
(a concrete count, output element and the workers holding it, with the command that replays
it), or *not checked* with the construct or count that stopped the check. Nothing is called
"proved" but the reduction of every count to the counts run (docs/verify.md, "Every count").
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CHECKED", "COUNTEREXAMPLE", "EVERY_COUNT", "NOT_CHECKED", "Counterexample", "Verdict"]

CHECKED = "checked"
EVERY_COUNT = "checked at every count"
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
    inputs: str = "random"  # which inputs: "random" (the seeded draw), "extreme" (integers over their range) or "exact"

    def describe(self) -> str:
        sizes = ", ".join(f"{k}={v}" for k, v in sorted(self.values.items()))
        if self.output is None:
            head = f"at {sizes}: {self.message}"
        else:
            head = (f"at {sizes}: output {self.output} element {list(self.index)} is {self.got!r}, "
                    f"the global program gives {self.expected!r}" + (f" ({self.workers})" if self.workers else ""))
        if self.inputs == "extreme":
            head += "; on the integer inputs over their dtype's range (seeded), not the random ones"
        elif self.inputs == "exact":
            head += "; in float64 on small integer inputs, compared exactly (the exact-floats set)"
        return head + (f"\n  replay: {self.replay}" if self.replay else "")


@dataclass(frozen=True)
class Verdict:
    """The outcome of :func:`distir.verification.verify`; ``str()`` gives it in words."""

    status: str  # EVERY_COUNT, CHECKED, COUNTEREXAMPLE or NOT_CHECKED
    counts: tuple[int, ...]  # the counts run without a difference (all of them when CHECKED); (0,): static meshes
    domain: tuple[int, ...]  # the counts asked for
    dims: dict  # the other symbolic sizes, at the values the check used
    seed: int
    counterexample: Counterexample | None = None
    reason: str = ""  # why NOT_CHECKED
    exact: list = field(default_factory=list)  # outputs compared exactly (integers, bools), by index
    tolerant: list = field(default_factory=list)  # float outputs: (index, dtype, rtol, atol)
    seconds: float = 0.0
    cutoff: int | None = None  # EVERY_COUNT: the horizon T + 1 (counts up to it evaluated, past it proved with z3)
    proof: str = ""  # EVERY_COUNT: what the proof of the cutoff rests on, in words
    not_proved: str = ""  # why the every-count argument did not apply (CHECKED from the default domain)
    symbol: str = "num_workers"
    extreme: bool = False  # every count also ran on integer inputs over their dtype's whole range
    extreme_skipped: str = ""  # why that second input set did not run, when there are integer inputs
    exact_floats: str = ""  # floats compared exactly (float64 on small integers): the bound that makes it sound
    tolerance_kept: str = ""  # exact floats asked for but not possible: the ops (or bound) that kept the tolerance
    also_exact: str = ""  # by default, floats also compared exactly on a second input set: the bound that makes it sound

    @property
    def ok(self) -> bool:
        """Every count asked for ran and matched (every count, for EVERY_COUNT; inputs are sampled)."""
        return self.status in (CHECKED, EVERY_COUNT)

    def __str__(self) -> str:
        dims = ", ".join(f"{k}={v}" for k, v in sorted(self.dims.items()))
        at = f" with {dims}" if dims else ""
        if self.status == COUNTEREXAMPLE:
            return "COUNTEREXAMPLE " + self.counterexample.describe()
        if self.status == NOT_CHECKED:
            done = f" (counts {_ranges(self.counts)} matched first)" if self.counts else ""
            return f"NOT CHECKED: {self.reason}{done}"
        inputs = "on random inputs"
        if self.extreme:
            inputs += " and on integer inputs over their dtype's range (ends included)"
        elif self.extreme_skipped:
            inputs += f" (integer inputs over their dtype's range not run: {self.extreme_skipped})"
        how = []
        if self.exact:
            how.append(f"output{'s' if len(self.exact) > 1 else ''} {', '.join(map(str, self.exact))} exactly")
        for i, dtype, rtol, atol in self.tolerant:
            how.append(f"output {i} ({dtype}) within rtol {rtol:g}, atol {atol:g} x its largest value")
        if self.exact_floats:
            how.append(self.exact_floats)
        elif self.tolerance_kept:
            how.append(f"not exactly, kept by {self.tolerance_kept}")
        if self.also_exact:
            how.append(f"and every output exactly on a second input set ({self.also_exact})")
        if self.status == EVERY_COUNT:
            return (f"CHECKED AT EVERY COUNT {self.symbol} >= 1{at} {inputs} (seed {self.seed}): "
                    f"counts {_ranges(self.counts)} run, {'; '.join(how) or 'no outputs'}; every other count "
                    f"computes what one of them computes, for every input (proved: {self.proof}). "
                    "Sampled, not proved: other sizes and inputs were not run.")
        where = "on the module's static meshes" if self.counts == (0,) else f"for counts {_ranges(self.counts)}"
        why = f" (every count not proved: {self.not_proved})" if self.not_proved else ""
        return (f"CHECKED {where}{at} {inputs} (seed {self.seed}): "
                f"{'; '.join(how) or 'no outputs'}. Sampled, not proved: other counts, sizes and inputs "
                f"were not run{why}.")


def _ranges(counts) -> str:
    """``1..8`` for a run of consecutive counts (three or more), the others listed: ``1..5, 7, 9..12``."""
    counts = sorted(counts)
    parts, i = [], 0
    while i < len(counts):
        j = i
        while j + 1 < len(counts) and counts[j + 1] == counts[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{counts[i]}..{counts[j]}")
        else:
            parts.extend(str(c) for c in counts[i:j + 1])
        i = j + 1
    return ", ".join(parts)
