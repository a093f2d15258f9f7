"""What the solver gives (:class:`LayoutPlan`) and what a search over parameter layouts adds to
its program (:class:`ParamChoice`, :class:`ActivationLimit`: auto-shard's budgets)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from ...ir.placement import Placement
from .sharding_graph import Slot
from .strategies import Strategy

__all__ = ["ActivationLimit", "LayoutPlan", "ParamChoice"]


@dataclass
class LayoutPlan:
    """The solver's answer: a strategy per op, a layout per parameter, how each needed layout is got."""

    strategy: dict[int, Strategy]  # id(site) -> chosen strategy
    primary: dict[int, Placement]  # root slot id -> the layout it is produced in
    recompute: dict[tuple[int, Placement], Strategy]  # (root slot id, layout) -> recompute the producer so
    root: dict[int, int]  # slot id -> the slot whose value it is (a hint's output -> the annotated slot)
    bytes: Fraction  # bytes each worker sends at the size hints (results counted as gathered)
    held: Fraction  # bytes each worker holds, summed over every value and version
    objective: Fraction  # what the solver minimized: bytes sent summed over the sampled sizes
    candidates: dict[int, list[Placement]] = field(default_factory=dict)  # free parameter -> layouts tried
    peak: tuple[Fraction, ...] = ()  # the ActivationLimit's estimate of the peak per sample (the largest window's)
    # per window (one for a function solved whole), the limit on its peak per sample it was solved under
    peak_limits: tuple[tuple[Fraction, ...], ...] = ()
    # ``objective`` is the proven least over every layout of the function's program (solved whole, to the
    # proof): a lower bound on what a narrower choice of layouts sends under the same limits
    optimal: bool = False

    def root_of(self, s: Slot) -> int:
        return self.root.get(s.id, s.id)


@dataclass(frozen=True)
class ActivationLimit:
    """A limit on the peak live activation bytes per worker (auto-shard), at ``samples`` sizes.

    The peak is bounded linearly: at each program point, the bytes of every value live there (from
    its binding through its last reader), each layout it exists in counted over that whole range (a
    redistributed or recomputed copy from the value's first reader on). Parameters' own layouts are
    inputs, not activations; their copies (a gathered weight) are. ``held(slot, layout, k)``: bytes a
    worker holds of a value laid out so at sample ``k`` (``layout`` None: a plain value, whole on
    every worker). ``bound(k, least, replicated)``: the limit at sample ``k``, given the least peak
    of the program (a first program minimizes the peaks, summed over the samples) and the peak with
    every value whole."""

    samples: int
    held: Callable[[Slot, Placement | None, int], int]
    bound: Callable[[int, Fraction, Fraction], Fraction]


@dataclass(frozen=True)
class ParamChoice:
    """How a search over parameter layouts (auto-shard) extends the program: the layouts each
    parameter without a given layout may take, and linear limits on the chosen ones (a memory
    budget). ``candidates(slot)`` lists the layouts; ``limits(decided)``, given the parameters one
    program decides with their candidates, returns rows ``({(slot id, layout): coefficient}, upper
    bound)``: the coefficients of the chosen layouts sum to at most the bound."""

    candidates: Callable[[Slot], list[Placement]]
    limits: Callable[[list[tuple[Slot, list[Placement]]]], list[tuple[dict[tuple[int, Placement], float], float]]]
    activations: ActivationLimit | None = None
