"""The device counts a program is planned for (``propagate-sharding.counts``; when none are declared,
``DEFAULT_COUNTS``, 1 to 8), split into classes that the layout choice may treat alike.

What a count changes in the layout choice, apart from bytes that scale with it, is which cuts of a
static dim leave a worker empty (a count above the dim's size) and which are uneven (a count that
does not divide it: padded blocks, and regroups where a reshape meets them). Two counts that agree on
both, for every static dim of the function's values and every number of pieces the mesh's axes cut a
dim into, form one class: a layout is planned once per class, at the class's counts only
(:func:`~distir.transform.layout_choice.propagate_sharding.lay_out` with ``counts``). There are at
most as many classes as counts declared. Count 1 sends nothing whatever the layout: it joins the
class of the smallest other count.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from ...errors import DistirError
from ...ir import sym
from ..pass_infra import PassContext
from .sharding_graph import Graph

__all__ = ["COUNTS_KEY", "DEFAULT_COUNTS", "count_classes", "count_symbol", "declared_counts"]

COUNTS_KEY = "propagate-sharding.counts"  # the PassContext config key: the device counts a program is for
MAX_COUNTS = 64  # each class is a solve of its own: bounded
# the counts planned for when none are declared: one node's (1 to 8 devices); a count above them
# runs the layout of the class of 8
DEFAULT_COUNTS = tuple(range(1, 9))


def declared_counts(ctx: PassContext) -> tuple[int, ...] | None:
    """``propagate-sharding.counts``, checked: distinct counts of at least 1, sorted (None when unset)."""
    value = ctx.config.get(COUNTS_KEY)
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise DistirError(f"{COUNTS_KEY} must be a non-empty list of device counts, got {value!r}")
    if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in value):
        raise DistirError(f"{COUNTS_KEY}: every count must be an integer of at least 1, got {list(value)!r}")
    counts = tuple(sorted(set(value)))
    if len(counts) > MAX_COUNTS:
        raise DistirError(f"{COUNTS_KEY}: at most {MAX_COUNTS} counts (each class of them is planned apart), "
                          f"got {len(counts)}")
    return counts


def count_symbol(graph: Graph) -> str | None:
    """The one symbol the function's meshes are sized by (None: all static). Two symbols: an error,
    since declared counts could not say which of them they bind."""
    names: set[str] = set()
    for mesh in {id(m): m for m in graph.mesh_of.values()}.values():
        for d in mesh.shape:
            if not isinstance(d, int):
                names |= sym.free_vars(d)
    if len(names) > 1:
        raise DistirError(f"{COUNTS_KEY}: @{graph.func.name}'s meshes are sized by {', '.join(sorted(names))}; "
                          "declared counts bind one symbol (give the others with propagate-sharding.size_hints)")
    return next(iter(names), None)


def _pieces(graph: Graph, symbol: str, count: int) -> tuple[int, ...]:
    """The numbers of pieces a dim may be cut into at ``count``: each product of a subset of a mesh's
    axis sizes."""
    out: set[int] = set()
    for mesh in {id(m): m for m in graph.mesh_of.values()}.values():
        sizes = [d if isinstance(d, int) else int(sym.evaluate(d, {symbol: count})) for d in mesh.shape]
        for k in range(1, len(sizes) + 1):
            for axes in itertools.combinations(sizes, k):
                out.add(math.prod(axes))
    return tuple(sorted(out))


def count_classes(graph: Graph, counts: tuple[int, ...], even: bool = True) -> list[tuple[int, ...]]:
    """``counts`` grouped into classes (in order of their smallest count): counts whose pieces leave
    the same static dims empty-free and (``even``) even (see the module docstring). Not ``even``: the
    classes of the default counts, which differ only where a cut leaves workers empty at some of
    them (the solver prices no padding without size hints; a count that cuts a dim unevenly runs
    the layout of the counts it fits alike). A function whose meshes are static is one class."""
    symbol = count_symbol(graph)
    if symbol is None:
        return [counts]
    dims = sorted({d for s in graph.slots if s.distributable for d in s.tensor.shape if isinstance(d, int) and d > 1})
    groups: dict[tuple, list[int]] = {}
    ones = [c for c in counts if c == 1]
    for c in counts:
        if c == 1:
            continue
        try:
            pieces = _pieces(graph, symbol, c)
        except sym.SymbolicError as err:
            raise DistirError(f"{COUNTS_KEY}: {symbol}={c}: {err}") from None
        key = tuple((k <= d, not even or d % k == 0) for k in pieces if k > 1 for d in dims)
        groups.setdefault(key, []).append(c)
    classes = [tuple(g) for g in groups.values()]
    if not classes:
        return [tuple(ones)]
    if ones:
        classes[0] = (1, *classes[0])
    return classes
