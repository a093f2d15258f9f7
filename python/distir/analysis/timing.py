"""An alpha-beta estimate of the time collectives take (ring algorithms, run one after another).

A ring collective over ``n`` workers takes ``steps`` rounds, each costing a latency
``alpha``, and each worker pushes ``bytes`` through its link of bandwidth ``beta``::

    time = steps * alpha + bytes / beta

with ``steps`` and ``bytes`` from :mod:`distir.analysis.comm` (all-gather: ``n - 1`` steps,
``(n - 1) * L`` bytes; all-reduce: ``2 * (n - 1)`` steps, ``2 * (n - 1) * L / n`` bytes;
reduce-scatter and all-to-all: ``n - 1`` steps, ``(n - 1) * L / n`` bytes). The model
ignores overlap with compute and contention; it is for comparing layouts and counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..ir.sym import Dim
from .comm import CollectiveCost, CommVolume
from .errors import AnalysisError
from .formula import Rational, _eval, sum_dims

__all__ = ["CommModel", "CommTime", "comm_time", "comm_time_formula"]


@dataclass(frozen=True)
class CommModel:
    """The model's constants: ``latency`` (alpha, seconds per step), ``bandwidth`` (beta, bytes/s)."""

    latency: float = 5e-6
    bandwidth: float = 25e9

    def __post_init__(self) -> None:
        if not self.latency >= 0:
            raise AnalysisError(f"latency must be a number of seconds >= 0, got {self.latency!r}")
        if not self.bandwidth > 0:
            raise AnalysisError(f"bandwidth must be a positive number of bytes per second, got {self.bandwidth!r}")

    def seconds(self, steps: int, nbytes: float) -> float:
        return steps * self.latency + float(nbytes) / self.bandwidth

    def collective(self, c: CollectiveCost, values: Mapping[str, int] | None = None) -> float:
        """Estimated seconds of one collective at ``values``."""
        values = dict(values or {})
        return self.seconds(_eval(c.steps, values), c.sent_per_member.evaluate(values))


@dataclass(frozen=True)
class CommTime:
    """``steps * latency + bytes / bandwidth`` summed over collectives, as formulas."""

    steps: Dim
    bytes: Rational
    # (steps, total bytes) of the collectives that are identities when they move nothing (a
    # re-blocking at a count that divides, dropped by specialize): their steps do not count then
    when_moving: tuple[tuple[Dim, Dim], ...] = ()

    def seconds(self, model: CommModel, values: Mapping[str, int] | None = None) -> float:
        values = dict(values or {})
        steps = _eval(self.steps, values)
        steps -= sum(_eval(s, values) for s, total in self.when_moving if _eval(total, values) == 0)
        return model.seconds(steps, self.bytes.evaluate(values))

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
        tuple((c.steps, c.total_bytes) for c in volume.collectives if c.identity_when_free),
    )


def comm_time(volume: CommVolume, model: CommModel | None = None, values: Mapping[str, int] | None = None) -> float:
    """Estimated seconds the collectives of ``volume`` take at ``values``."""
    return comm_time_formula(volume).seconds(model or CommModel(), values)
