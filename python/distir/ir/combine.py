"""The IR side of the partial rule of :mod:`distir.partials`: which placements a dtype may be
laid out in, what a reduction over a cut dim leaves, and which partials an op lets through.

It needs nothing of the IR but placements; the numbers (what parts are, how they combine) live
in :mod:`distir.partials`, which needs no TVM (a Disco worker process combines with it).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..partials import PARTIAL_KINDS, combine, dtype_class, identity, partial_refusal, split
from .placement import Placement, PlacementError

__all__ = [
    "PARTIAL_KINDS",
    "check_partial",
    "combine",
    "dtype_class",
    "exact_partials",
    "identity",
    "leaves",
    "partial_refusal",
    "split",
]

# the partial a reduction op over a cut dim leaves (before the dtype is considered); None: none
_REDUCTION_LEAVES = {"sum": "sum", "mean": "sum", "max": "max", "min": "min", "prod": None}


def check_partial(placement: Placement, dtype, what: str) -> None:
    """Raise PlacementError, one line naming ``what``, when ``placement`` holds ``dtype`` in a partial it cannot be."""
    if not placement.has_partial:
        return
    for axis in placement.partial_axes():
        why = partial_refusal(placement[axis].op, dtype)
        if why is not None:
            raise PlacementError(f"{what} is \"{placement}\": {why}")


def leaves(reduction: str, dtype) -> str | None:
    """The partial a reduction (an op name, or a sharding rule's reduction kind) over a cut dim
    leaves on each worker for a result of ``dtype``; None when the reduced dim must be whole."""
    kind = _REDUCTION_LEAVES.get(reduction, reduction)
    if kind is None:
        return None
    cls = dtype_class(dtype)
    if reduction == "mean" and cls == "int":
        return None  # rounds once, after the whole sum
    if kind in ("sum", "avg") and cls == "bool":
        return "max"  # a sum of bools, cast to bool, is any
    return kind


def exact_partials(table: Mapping[str, str], dtype, *, wrapping: bool = True) -> dict[str, str]:
    """An op's partial table (kind -> mode) for values of ``dtype``: the kinds ``dtype`` cannot
    hold dropped; ``wrapping=False`` for an op linear over the reals but not over integers that
    wrap around (a division, a cast that widens), which drops an integer ``P[sum]`` too."""
    cls = dtype_class(dtype)
    out = {}
    for kind, mode in table.items():
        if partial_refusal(kind, dtype) is not None:
            continue
        if not wrapping and cls == "int" and kind == "sum":
            continue
        out[kind] = mode
    return out


