"""An alpha-beta estimate of the time collectives take (ring algorithms, run one after another).

A ring collective over ``n`` workers of mesh axis ``a`` takes ``steps`` rounds, each costing the
axis's latency (alpha), and each worker pushes ``bytes`` through the axis's link (bandwidth,
beta)::

    time = steps * latency(a) + bytes / bandwidth(a)

with ``steps`` and ``bytes`` from :mod:`distir.analysis.comm` (all-gather: ``n - 1`` steps,
``(n - 1) * L`` bytes; all-reduce: ``2 * (n - 1)`` steps, ``2 * (n - 1) * L / n`` bytes;
reduce-scatter and all-to-all: ``n - 1`` steps, ``(n - 1) * L / n`` bytes; a block exchange: one
step per peer across the axes it crosses, priced on the slowest of them). The per-axis costs are
:class:`~distir.ir.axis_cost.AxisCost`, the model the planner minimizes when given them, so the
estimate of a plan is the planner's. The model ignores overlap with compute and contention; it is
for comparing layouts and counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from ..ir.axis_cost import DEFAULT_AXIS_COST, AxisCost, AxisCostError, AxisCosts, slowest
from ..ir.sym import Dim
from .comm import CollectiveCost, CommVolume
from .errors import AnalysisError
from .formula import Rational, _eval, sum_dims

__all__ = ["CommModel", "CommTime", "comm_time", "comm_time_formula"]


@dataclass(frozen=True)
class CommModel:
    """The model's constants: ``latency`` (alpha, seconds per step) and ``bandwidth`` (beta, bytes/s)
    of every mesh axis, except those ``axes`` gives their own :class:`~distir.ir.axis_cost.AxisCost`."""

    latency: float = float(DEFAULT_AXIS_COST.latency)
    bandwidth: float = float(DEFAULT_AXIS_COST.bandwidth)
    axes: AxisCosts | None = None

    def __post_init__(self) -> None:
        try:
            AxisCost(self.latency, self.bandwidth)
        except AxisCostError as err:
            raise AnalysisError(str(err)) from None

    @property
    def default(self) -> AxisCost:
        """The cost of an axis ``axes`` does not list (and of a transfer between meshes)."""
        return AxisCost(self.latency, self.bandwidth)

    def link(self, axes) -> AxisCost:
        """The cost of a collective along ``axes`` (mesh axis indices): the slowest of them."""
        given = dict(self.axes.by_axis) if self.axes is not None else {}
        return slowest(given.get(a, self.default) for a in axes) if axes else self.default

    def seconds(self, steps: int, nbytes: float) -> float:
        """Seconds of ``steps`` rounds and ``nbytes`` on an axis of the default cost."""
        return float(self.default.seconds(steps, Fraction(nbytes)))

    def collective(self, c: CollectiveCost, values: Mapping[str, int] | None = None) -> float:
        """Estimated seconds of one collective at ``values``."""
        return float(_collective_seconds(self, c, dict(values or {})))


def _collective_seconds(model: CommModel, c: CollectiveCost, values: dict) -> Fraction:
    """Seconds of ``c`` at ``values``: a replan as the steps written there, an identity that moves
    nothing (dropped by specialize) as nothing, an axis that comes out of size 1 as no link."""
    if c.at is not None:
        return sum((_collective_seconds(model, step, values) for step in c.at(values)), Fraction(0))
    if c.identity_when_free and _eval(c.total_bytes, values) == 0:
        return Fraction(0)
    if c.crossed is not None:
        axes = list(c.crossed(values))
    else:
        axes = [a for a, n in c.axes if _eval(n, values) > 1] or [a for a, _ in c.axes[:1]]
    return model.link(axes).seconds(_eval(c.steps, values), Fraction(c.sent_per_member.evaluate(values)))


@dataclass(frozen=True)
class CommTime:
    """Every collective's ``steps * latency + bytes / bandwidth`` on its axes, one after another;
    ``steps`` and ``bytes`` are the totals as formulas (what the text shows)."""

    steps: Dim
    bytes: Rational
    collectives: tuple[CollectiveCost, ...] = ()

    def seconds(self, model: CommModel, values: Mapping[str, int] | None = None) -> float:
        values = dict(values or {})
        return float(sum((_collective_seconds(model, c, values) for c in self.collectives), Fraction(0)))

    def __str__(self) -> str:
        from ..ir import sym

        steps, nbytes = sym.to_str(self.steps), str(self.bytes)
        parts = []
        if steps != "0":
            parts.append("latency" if steps == "1" else f"latency * ({steps})")
        if nbytes != "0":
            parts.append(f"({nbytes}) / bandwidth")
        return " + ".join(parts) or "0"


def comm_time_formula(volume: CommVolume) -> CommTime:
    """The total steps and bytes of every collective, one after another."""
    return CommTime(
        sum_dims(c.steps for c in volume.collectives), Rational.sum(c.sent_per_member for c in volume.collectives),
        volume.collectives,
    )


def comm_time(volume: CommVolume, model: CommModel | None = None, values: Mapping[str, int] | None = None) -> float:
    """Estimated seconds the collectives of ``volume`` take at ``values``."""
    return comm_time_formula(volume).seconds(model or CommModel(), values)
