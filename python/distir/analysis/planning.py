"""What TVM's static memory planner allocates for a specialized local-view function.

The liveness peak (:func:`distir.analysis.memory_footprint`) is what any planner needs at
least. TVM's ``relax.transform.StaticPlanBlockMemory`` allocates more: it hands out storage
*tokens* in program order, reusing a released token of the same dtype and growing it when the
new tensor is larger, and never moves or splits one, so the tokens it ends with sum to more
than the peak. This module replays that algorithm (``TokenAllocator1D`` in TVM's
``src/relax/transform/static_plan_block_memory.cc``) on the buffers the liveness walk finds, so
a count's verdict "fits" uses the bytes TVM will really ask for:

- a tensor asks for a token when its binding runs; the released tokens of its dtype are
  searched for the smallest of at least its size and at most 16 times it (taken as is), else
  the largest below it down to a 16th of it (grown to its size), else a new token is made;
- a tensor's token is released after the last binding that reads it (views share it); one
  that nothing reads keeps a token of its own;
- the function's results are not planned: TVM allocates them when the function runs
  (``R.builtin.alloc_tensor``); they are counted apart, as ``output_bytes``.

TVM plans each binding block on its own (a tensor read in another block than the one that
made it is allocated unplanned, never reused); the replay takes the function as one block,
which is what the exporter writes for a function of one block (the bundled models'); for a
function of several blocks TVM may allocate more than the replay says. The sizes must be concrete (a specialized module); tests compare the total with the
``R.memory.alloc_storage`` sizes of TVM's own planned module (docs/analysis.md).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass

from ..ir.expr import IRModule
from .common import pick_function
from .errors import AnalysisError
from .formula import _eval
from .memory import Buffers, buffers

__all__ = ["MATCH_RANGE", "PlannedMemory", "plan_buffers", "planned_memory"]

MATCH_RANGE = 16  # TVM's TokenAllocator1D::match_range_: a token serves tensors within this factor of its size


@dataclass(frozen=True)
class PlannedMemory:
    """The storage TVM's static planner allocates for one function at concrete sizes."""

    storage_bytes: tuple[int, ...]  # each planned token, in the order it was first made
    output_bytes: int  # the function's results, allocated unplanned when it runs

    @property
    def pool_bytes(self) -> int:
        return sum(self.storage_bytes)

    @property
    def total_bytes(self) -> int:
        """Every byte of intermediates and results one worker allocates."""
        return self.pool_bytes + self.output_bytes


class _Token:
    __slots__ = ("bytes",)

    def __init__(self, n: int) -> None:
        self.bytes = n


def planned_memory(mod: IRModule, func: str | None = None, values: Mapping[str, int] | None = None) -> PlannedMemory:
    """Replay TVM's static planner on ``mod[func]`` (see the module docstring). ``values`` gives
    the symbolic sizes that remain; every size must then be concrete."""
    return plan_buffers(buffers(pick_function(mod, func)), values)


def plan_buffers(bufs: Buffers, values: Mapping[str, int] | None = None) -> PlannedMemory:
    """:func:`planned_memory` of buffers already walked."""
    values = dict(values or {})
    fields = [[(dt, _concrete(n, values, bufs.names[i])) for dt, n in fs] for i, fs in enumerate(bufs.fields)]
    pools: dict[str, list[tuple[int, int, _Token]]] = {}  # dtype -> sorted (bytes, order, token)
    made: list[_Token] = []
    held: list[list[_Token]] = [[] for _ in fields]
    frees: dict[int, list[int]] = {}
    for s, t in enumerate(bufs.last):
        frees.setdefault(t, []).append(s)
    output = 0
    order = 0
    b = 0
    for i in range(bufs.end):
        while b < len(bufs.born) and bufs.born[b] == i:
            if bufs.last[b] == bufs.end:  # a result: allocated when the function runs, not planned
                output += sum(n for _, n in fields[b])
            else:
                for dt, n in fields[b]:
                    read = bufs.last[b] > i  # TVM gives a value nothing reads a token of its own, kept
                    tok = _reuse(pools.setdefault(dt, []), n) if read else None
                    if tok is None:
                        tok = _Token(n)
                        made.append(tok)
                    held[b].append(tok)
            b += 1
        for s in frees.get(i, ()):
            if bufs.last[s] == bufs.born[s]:
                continue
            for (dt, _), tok in zip(fields[s], held[s]):
                order += 1
                bisect.insort(pools[dt], (tok.bytes, order, tok), key=lambda e: (e[0], e[1]))
            held[s] = []
    return PlannedMemory(tuple(t.bytes for t in made), output)


def _reuse(pool: list[tuple[int, int, _Token]], size: int) -> _Token | None:
    """TVM's ``RequestReuse``: the smallest released token in [size, size * 16], taken as is;
    else the largest in [size // 16, size), grown to ``size``; else None."""
    mid = bisect.bisect_left(pool, size, key=lambda e: e[0])
    if mid < len(pool) and pool[mid][0] <= size * MATCH_RANGE:
        return pool.pop(mid)[2]
    low = bisect.bisect_left(pool, size // MATCH_RANGE, key=lambda e: e[0])
    if mid > low:
        tok = pool.pop(mid - 1)[2]
        tok.bytes = size
        return tok
    return None


def _concrete(n, values: Mapping[str, int], where: str) -> int:
    if isinstance(n, int):
        return n
    try:
        return int(_eval(n, values))
    except AnalysisError as err:
        raise AnalysisError(f"planned memory: binding '{where}': {err}") from None
