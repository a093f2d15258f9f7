"""What a step on one mesh axis costs in time: an alpha-beta model per mesh axis.

A collective on mesh axis ``a`` takes ``rounds * latency + bytes / bandwidth`` seconds, with
``latency`` (alpha, seconds per round) and ``bandwidth`` (beta, bytes per second) of that axis
and ``rounds`` and ``bytes`` from the step kind (:mod:`distir.ir.steps`). The axes of a
``(nodes, gpus)`` mesh differ: a slow inter-node axis and a fast intra-node one. This is the one
declaration of the model; the planner (its time objective), propagation and the analysis'
time estimate read it. It lives with the IR because a re-planned redistribute records the costs
it was planned with (an attribute of ``R.dist.replan``, in the text syntax below), so that
specialize plans with the same objective.

Text syntax (``distir-opt --axis-cost``, the ``axis_costs`` attribute, a PassContext config
string): ``AXIS=LATENCY:BANDWIDTH``, entries separated by commas, e.g.
``0=5us:25GB/s,1=1us:300GB/s``. Latency units: ``s``, ``ms``, ``us``, ``ns``; bandwidth units:
``B/s``, ``KB/s``, ``MB/s``, ``GB/s``, ``TB/s`` (powers of 1000). Numbers are decimals. Numbers
are kept as exact fractions, so a cost prints back as it was read and plans are deterministic.
A latency is 0 or from 1 ps to 1 hour, a bandwidth from 1 B/s to 10^18 B/s (``LATENCY_RANGE``,
``BANDWIDTH_RANGE``): a value beyond is a typo or a slipped unit (``1e400us``, ``1e-300GB/s``), and
the times it gives would overflow the floats the layout solver weighs them in.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

from ..errors import DistirError

__all__ = ["BANDWIDTH_RANGE", "DEFAULT_AXIS_COST", "LATENCY_RANGE", "AxisCost", "AxisCostError", "AxisCosts", "slowest"]

LATENCY_UNITS = {"s": Fraction(1), "ms": Fraction(1, 10**3), "us": Fraction(1, 10**6), "ns": Fraction(1, 10**9)}
BANDWIDTH_UNITS = {"B/s": Fraction(1), "KB/s": Fraction(10**3), "MB/s": Fraction(10**6), "GB/s": Fraction(10**9),
                   "TB/s": Fraction(10**12)}  # fmt: skip


#: a link's latency, when not 0, and its bandwidth lie within these (seconds; bytes per second)
LATENCY_RANGE = (Fraction(1, 10**12), Fraction(3600))
BANDWIDTH_RANGE = (Fraction(1), Fraction(10**18))
_MAX_EXPONENT = 40  # a decimal text whose exponent is beyond this is out of range in any unit (not expanded)
_RANGE_TEXT = {"latency": "0, or from 1e-12 s (1 ps) to 3600 s", "bandwidth": "from 1 B/s to 1e18 B/s"}


class AxisCostError(DistirError):
    """A malformed axis cost (the message names the entry and the problem)."""


def _decimal(text: str) -> Fraction:
    """The exact value of a decimal text; ValueError when it is not one or is out of every range (a
    huge exponent is refused before it is expanded: ``1e999999999`` would take minutes)."""
    try:
        d = Decimal(text.strip())
    except InvalidOperation:
        raise ValueError(text) from None
    if not d.is_finite() or (d != 0 and abs(d.adjusted()) > _MAX_EXPONENT):
        raise ValueError(text)
    return Fraction(d)


def _short(q: Fraction) -> str:
    """``q`` in a few significant digits (a value out of range may have hundreds)."""
    return f"{Decimal(q.numerator) / Decimal(q.denominator):.3g}"


def _number(value: Any, what: str) -> Fraction:
    """An exact decimal from an int, float, decimal string or Fraction with a finite decimal expansion."""
    if isinstance(value, bool):
        raise AxisCostError(f"{what} must be a number, got {value!r}")
    try:
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ValueError
            q = Fraction(repr(value))  # the decimal the float prints as (5e-06, not its binary expansion)
        elif isinstance(value, str):
            try:
                q = _decimal(value)
            except ValueError:
                if re.fullmatch(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*", value):
                    raise AxisCostError(f"{what} {value.strip()} is out of range: {_RANGE_TEXT[what]}") from None
                raise
        elif isinstance(value, (int, Fraction)):
            q = Fraction(value)
        else:
            raise TypeError
    except (ValueError, TypeError, ZeroDivisionError):
        raise AxisCostError(f"{what} must be a finite number, got {value!r}") from None
    den = q.denominator
    for p in (2, 5):
        while den % p == 0:
            den //= p
    if den != 1:
        raise AxisCostError(f"{what} must be a decimal number (a finite decimal expansion), got {value!r}")
    return q


def _decimal_text(q: Fraction) -> str:
    """The exact decimal text of ``q`` (its denominator divides a power of ten)."""
    k = 0
    while (q * 10**k).denominator != 1:
        k += 1
    digits = str(abs((q * 10**k).numerator)).rjust(k + 1, "0")
    text = digits if k == 0 else f"{digits[:-k]}.{digits[-k:]}".rstrip("0").rstrip(".")
    return ("-" if q < 0 else "") + text


def _with_unit(q: Fraction, units: Mapping[str, Fraction]) -> str:
    """``q`` in the largest unit it is at least one of (the smallest unit when below all)."""
    ordered = sorted(units.items(), key=lambda kv: kv[1])
    name, unit = ordered[0]
    for n, u in ordered:
        if q >= u:
            name, unit = n, u
    return _decimal_text(q / unit) + name


def _parse_quantity(text: str, units: Mapping[str, Fraction], what: str, entry: str) -> Fraction:
    m = re.fullmatch(r"\s*([-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z/]*)\s*", text)
    if m is None:
        raise AxisCostError(f"'{entry}': the {what} '{text}' is not a number with a unit ({', '.join(units)})")
    number, unit = m.groups()
    if unit not in units:
        shown = f"the unit '{unit}'" if unit else "no unit"
        raise AxisCostError(f"'{entry}': the {what} '{text}' has {shown}; use one of {', '.join(units)}")
    try:
        value = _decimal(number)
    except ValueError:
        raise AxisCostError(f"'{entry}': the {what} '{text}' is out of range: {_RANGE_TEXT[what]}") from None
    return value * units[unit]


@dataclass(frozen=True)
class AxisCost:
    """One mesh axis: ``latency`` (seconds per round of a collective) and ``bandwidth`` (bytes per
    second each worker sends over it). Numbers are exact fractions (floats are read as the
    decimals they print as)."""

    latency: Fraction
    bandwidth: Fraction

    def __post_init__(self) -> None:
        latency = _number(self.latency, "latency")
        bandwidth = _number(self.bandwidth, "bandwidth")
        if latency < 0:
            raise AxisCostError(f"latency must be >= 0 seconds, got {_short(latency)}")
        if bandwidth <= 0:
            raise AxisCostError(f"bandwidth must be a positive number of bytes per second, got {_short(bandwidth)}")
        low, high = LATENCY_RANGE
        if latency and not low <= latency <= high:
            raise AxisCostError(f"latency {_short(latency)} s is out of range: {_RANGE_TEXT['latency']}")
        low, high = BANDWIDTH_RANGE
        if not low <= bandwidth <= high:
            raise AxisCostError(f"bandwidth {_short(bandwidth)} B/s is out of range: {_RANGE_TEXT['bandwidth']}")
        object.__setattr__(self, "latency", latency)
        object.__setattr__(self, "bandwidth", bandwidth)

    def seconds(self, rounds, nbytes) -> Fraction:
        """``rounds * latency + nbytes / bandwidth``: one step's time (exact for exact inputs)."""
        return Fraction(rounds) * self.latency + Fraction(nbytes) / self.bandwidth

    @staticmethod
    def parse(text: str, entry: str | None = None) -> AxisCost:
        """``"5us:25GB/s"`` -> AxisCost."""
        entry = text if entry is None else entry
        latency, colon, bandwidth = text.partition(":")
        if not colon:
            raise AxisCostError(f"'{entry}': expected LATENCY:BANDWIDTH, e.g. 5us:25GB/s")
        lat = _parse_quantity(latency, LATENCY_UNITS, "latency", entry)
        bw = _parse_quantity(bandwidth, BANDWIDTH_UNITS, "bandwidth", entry)
        try:
            return AxisCost(lat, bw)
        except AxisCostError as err:
            raise AxisCostError(f"'{entry}': {err}") from None

    def __str__(self) -> str:
        return f"{_with_unit(self.latency, LATENCY_UNITS)}:{_with_unit(self.bandwidth, BANDWIDTH_UNITS)}"


#: an axis whose cost is not given (and the analysis' default model): 5 us per round, 25 GB/s
DEFAULT_AXIS_COST = AxisCost(Fraction(5, 10**6), Fraction(25 * 10**9))


def slowest(costs: Iterable[AxisCost]) -> AxisCost:
    """A link as slow as the slowest of ``costs``: the largest latency, the smallest bandwidth (the
    cost of a step that crosses several axes, a block exchange)."""
    costs = list(costs)
    if not costs:
        return DEFAULT_AXIS_COST
    return AxisCost(max(c.latency for c in costs), min(c.bandwidth for c in costs))


@dataclass(frozen=True)
class AxisCosts:
    """The costs of the mesh axes, by axis index; an axis not listed costs :data:`DEFAULT_AXIS_COST`."""

    by_axis: tuple[tuple[int, AxisCost], ...]

    def __post_init__(self) -> None:
        seen = set()
        for axis, cost in self.by_axis:
            if isinstance(axis, bool) or not isinstance(axis, int) or axis < 0:
                raise AxisCostError(f"a mesh axis is an integer >= 0, got {axis!r}")
            if axis in seen:
                raise AxisCostError(f"mesh axis {axis} is given twice")
            if not isinstance(cost, AxisCost):
                raise AxisCostError(f"mesh axis {axis}: expected an AxisCost, got {cost!r}")
            seen.add(axis)
        object.__setattr__(self, "by_axis", tuple(sorted(self.by_axis)))

    def cost(self, axis: int) -> AxisCost:
        return dict(self.by_axis).get(axis, DEFAULT_AXIS_COST)

    def for_mesh(self, ndim: int, where: str = "") -> tuple[AxisCost, ...]:
        """The cost of each axis of a ``ndim``-D mesh; an axis given beyond the mesh is an error."""
        for axis, _ in self.by_axis:
            if axis >= ndim:
                at = f"{where}: " if where else ""
                raise AxisCostError(f"{at}axis cost for mesh axis {axis}, but the mesh has {ndim} axes (0 to {ndim - 1})")
        return tuple(self.cost(a) for a in range(ndim))

    @staticmethod
    def parse(text: str) -> AxisCosts:
        """``"0=5us:25GB/s,1=1us:300GB/s"`` -> AxisCosts (the module docstring gives the syntax)."""
        entries = [e.strip() for e in text.split(",")]
        if not any(entries):
            raise AxisCostError("no axis cost given; expected AXIS=LATENCY:BANDWIDTH, e.g. 0=5us:25GB/s")
        out: list[tuple[int, AxisCost]] = []
        for entry in entries:
            axis, eq, cost = entry.partition("=")
            if not eq:
                raise AxisCostError(f"'{entry}': expected AXIS=LATENCY:BANDWIDTH, e.g. 0=5us:25GB/s")
            try:
                index = int(axis.strip())
            except ValueError:
                raise AxisCostError(f"'{entry}': the mesh axis '{axis.strip()}' is not an integer") from None
            if index < 0:
                raise AxisCostError(f"'{entry}': the mesh axis must be >= 0")
            if any(index == a for a, _ in out):
                raise AxisCostError(f"'{entry}': mesh axis {index} is given twice")
            out.append((index, AxisCost.parse(cost.strip(), entry)))
        return AxisCosts(tuple(out))

    @staticmethod
    def of(value: Any, where: str = "axis costs") -> AxisCosts | None:
        """From what a user gives (a PassContext config value): None, an AxisCosts, its text, or a
        mapping from mesh axis to an AxisCost, its text or a ``(latency, bandwidth)`` pair."""
        try:
            if value is None or isinstance(value, AxisCosts):
                return value
            if isinstance(value, str):
                return AxisCosts.parse(value)
            if isinstance(value, Mapping):
                out = []
                for axis, cost in value.items():
                    if isinstance(cost, str):
                        cost = AxisCost.parse(cost, f"{axis}={cost}")
                    elif isinstance(cost, (tuple, list)) and len(cost) == 2:
                        cost = AxisCost(*cost)
                    elif not isinstance(cost, AxisCost):
                        raise AxisCostError(f"mesh axis {axis!r}: expected an AxisCost, 'LATENCY:BANDWIDTH' or a "
                                            f"(latency, bandwidth) pair, got {cost!r}")
                    out.append((axis, cost))
                return AxisCosts(tuple(out))
        except AxisCostError as err:
            raise AxisCostError(f"{where}: {err}") from None
        raise AxisCostError(f"{where}: expected 'AXIS=LATENCY:BANDWIDTH,...' or a mapping from mesh axis to "
                            f"AxisCost, got {type(value).__name__}")

    def __str__(self) -> str:
        return ",".join(f"{axis}={cost}" for axis, cost in self.by_axis)
