"""Per-worker memory of a local-view function: parameter bytes and the peak of live intermediates.

Parameters are the function's inputs (each worker's piece). Intermediates are the values
the bindings compute. A binding that only renames or regroups values (``y = x``, a tuple,
a tuple item) allocates nothing and keeps what it refers to alive. A value is live from
the binding that computes it through the last binding that reads it (the function's
result stays live to the end); while binding ``i`` runs, its inputs and its output are
all live. The peak is the largest total over the bindings.

With symbolic sizes each binding's live total is a sum of formulas; equal sums are kept
once, sums dominated term by term or provably (sizes at least 1) are dropped, and the
peak is the :class:`~distir.analysis.formula.Maximum` of the rest, labelled with the
binding where each first occurs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..ir import sym
from ..ir.expr import Call, Expr, IRModule, Tuple, TupleGetItem, Var, leaf_vars
from ..ir.sym import Dim
from .common import pick_function, value_bytes
from .formula import Maximum, _eval, prune_dominated, sum_dims

__all__ = ["MemoryFootprint", "MemoryNumbers", "memory_footprint"]


@dataclass(frozen=True)
class MemoryNumbers:
    """A :class:`MemoryFootprint` at given sizes."""

    param_bytes: int
    peak_bytes: int
    peak_at: str  # the binding at which the peak is first reached ("" when nothing is computed)


@dataclass(frozen=True)
class MemoryFootprint:
    function: str
    params: tuple[tuple[str, Dim], ...]  # (name, bytes per worker)
    param_bytes: Dim
    peak_bytes: Maximum  # of live intermediates; labels name the bindings

    def free_vars(self) -> set[str]:
        return sym.free_vars(self.param_bytes) | self.peak_bytes.free_vars()

    def evaluate(self, values: Mapping[str, int] | None = None) -> MemoryNumbers:
        values = dict(values or {})
        i = self.peak_bytes.argmax(values)
        at = self.peak_bytes.labels[i] if i >= 0 else ""
        return MemoryNumbers(_eval(self.param_bytes, values), self.peak_bytes.evaluate(values), at)


def _storages(e: Expr, where: dict[Var, frozenset[int]]) -> frozenset[int]:
    """The allocations an expression refers to (through vars, tuples and tuple items)."""
    if isinstance(e, Var):
        return where.get(e, frozenset())
    if isinstance(e, Tuple):
        out: frozenset[int] = frozenset()
        for f in e.fields:
            out |= _storages(f, where)
        return out
    if isinstance(e, TupleGetItem):
        return _storages(e.tuple_value, where)
    return frozenset()


def memory_footprint(mod: IRModule, func: str | None = None) -> MemoryFootprint:
    """Per-worker parameter bytes and peak live intermediate bytes of ``mod[func]``."""
    f = pick_function(mod, func)
    params = tuple((p.name, value_bytes(p.type)) for p in f.params)
    param_bytes = sum_dims(b for _, b in params)

    bindings = list(f.bindings())
    where: dict[Var, frozenset[int]] = {}
    size: list[Dim] = []  # per allocation
    born: list[int] = []
    last: list[int] = []
    for i, b in enumerate(bindings):
        for v in leaf_vars(b.value):
            for s in where.get(v, ()):
                last[s] = max(last[s], i)
        if isinstance(b.value, Call):
            s = len(size)
            size.append(value_bytes(b.var.type))
            born.append(i)
            last.append(i)
            where[b.var] = frozenset((s,))
        else:
            where[b.var] = _storages(b.value, where)
    end = len(bindings)
    for s in _storages(f.result, where):
        last[s] = end

    # sweep: live totals as counts of distinct size terms
    keys = [sym.key(z) for z in size]
    rep: dict = {}
    for k, z in zip(keys, size):
        rep.setdefault(k, z)
    frees: dict[int, list[int]] = {}
    for s, t in enumerate(last):
        frees.setdefault(t, []).append(s)
    live: dict = {}
    seen: dict = {}  # frozen live counts -> first binding name
    order: list = []
    s = 0
    for i, b in enumerate(bindings):
        while s < len(born) and born[s] == i:
            live[keys[s]] = live.get(keys[s], 0) + 1
            s += 1
        snap = frozenset(live.items())
        if snap not in seen:
            seen[snap] = b.var.name
            order.append(snap)
        for dead in frees.get(i, ()):
            k = keys[dead]
            live[k] -= 1
            if not live[k]:
                del live[k]
    options, labels = _peak_options(order, seen, rep)
    return MemoryFootprint(f.name, params, param_bytes, Maximum(tuple(options), tuple(labels)))


def _peak_options(order: list, seen: dict, rep: dict) -> tuple[list[Dim], list[str]]:
    """The live totals that may be the largest, with where each first occurs."""
    # drop totals that another total contains term by term (every size is >= 0)
    counts = [dict(s) for s in order]
    weight = [sum(c.values()) for c in counts]
    keep: list[int] = []
    # a total that contains another has more terms, so it comes first; compare with the kept ones only
    for i in sorted(range(len(counts)), key=lambda j: (-weight[j], j)):
        c = counts[i]
        if not any(all(counts[j].get(k, 0) >= n for k, n in c.items()) for j in keep):
            keep.append(i)
    keep.sort()
    options, labels, by_key = [], [], {}
    for i in keep:
        total = sum_dims(rep[k] for k, n in counts[i].items() for _ in range(n))
        k = sym.key(total)
        if k in by_key:
            continue
        by_key[k] = len(options)
        options.append(total)
        labels.append(seen[order[i]])
    if all(isinstance(o, int) for o in options):
        if not options:
            return [], []
        best = max(range(len(options)), key=lambda j: (options[j], -j))
        return [options[best]], [labels[best]]
    survivors = prune_dominated(options)
    return [options[j] for j in survivors], [labels[j] for j in survivors]
