"""Count variants: one function laid out per class of device counts, in one module.

Where the best layout of a function differs between the device counts it is declared for
(``propagate-sharding.counts``, docs/propagation.md), propagation writes one function per class of
counts: the function keeps its name and the layout of the class holding the largest declared count
(it also serves any count not declared), and each other class is a function named
``<name>__w<counts>`` (``main__w2``, ``main__w3_4``) carrying two attributes, printed in the IR
text::

    R.func_attr({"count_guard": {"num_workers": [2]}, "count_variant_of": "main"})

Every pass treats a variant as the function it is (they are laid out, legalized and lowered alike).
Specialization (:func:`fold_variants`) binds the count and keeps, under the function's name, the
variant whose guard holds, dropping the others: the specialized module is the one a plan made for
that count alone would give. distir's one build for every count (``to_relax(local, dispatch=True)``)
keeps them all and calls, by the count at run time, the one :func:`choose_variants` names.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import DistirError
from ..ir.expr import Function, IRModule

__all__ = ["COUNT_GUARD", "COUNT_VARIANT_OF", "choose_variants", "fold_variants", "guard_of", "variant_name"]

COUNT_GUARD = "count_guard"  # {symbol: [counts]}: the counts a variant is laid out for
COUNT_VARIANT_OF = "count_variant_of"  # the name of the function the variant stands for at those counts


def variant_name(name: str, counts) -> str:
    """``main`` at counts (3, 4) -> ``main__w3_4``."""
    return f"{name}__w{'_'.join(str(c) for c in counts)}"


def guard_of(func: Function) -> tuple[str, str, tuple[int, ...]] | None:
    """(the function it stands for, the symbol, the counts) of a variant, else None. A malformed guard
    is one line naming the function (a module may come from text)."""
    guard, of = func.attrs.get(COUNT_GUARD), func.attrs.get(COUNT_VARIANT_OF)
    if guard is None and of is None:
        return None
    ok = isinstance(of, str) and isinstance(guard, Mapping) and len(guard) == 1
    if ok:
        (symbol, counts), = guard.items()
        ok = isinstance(symbol, str) and isinstance(counts, (list, tuple)) and bool(counts) and all(
            isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in counts)
    if not ok:
        raise DistirError(
            f"@{func.name}: a count variant needs both {COUNT_GUARD} = {{symbol: [counts]}} and "
            f"{COUNT_VARIANT_OF} = 'function name', got {dict(func.attrs)!r}")
    return of, symbol, tuple(counts)


def fold_variants(mod: IRModule, values: Mapping[str, int]) -> dict[str, str]:
    """Which function each name of the specialized module is built from at ``values``: a name whose
    variant's guard holds is built from that variant; variants are dropped. Variants whose symbol
    ``values`` does not bind are kept as they are (``{name: name}``)."""
    out: dict[str, str] = {}
    chosen: dict[str, str] = {}
    for name, func in mod.functions.items():
        g = guard_of(func)
        if g is None:
            out.setdefault(name, name)
            continue
        of, symbol, counts = g
        if of not in mod.functions:
            raise DistirError(f"@{name} is a count variant of @{of}, which the module does not have")
        if symbol not in values:
            out[name] = name
        elif values[symbol] in counts:
            if of in chosen:
                raise DistirError(f"@{chosen[of]} and @{name} are both variants of @{of} at {symbol}={values[symbol]}")
            chosen[of] = name
    for of, name in chosen.items():
        out[of] = name
    return out


def without_guard(func: Function, name: str) -> Function:
    """``func`` under ``name`` with its guard dropped (the variant kept at its count)."""
    attrs = {k: v for k, v in func.attrs.items() if k not in (COUNT_GUARD, COUNT_VARIANT_OF)}
    return func.replace(name=name, attrs=attrs)


def choose_variants(mod: IRModule, values: Mapping[str, int]) -> IRModule:
    """``mod`` with each function that has a variant whose guard holds at ``values`` replaced by that
    variant under its name, and every variant dropped; nothing bound (a symbolic module stays
    symbolic). What a build that dispatches on the count runs at ``values``: its inputs are cut and
    its outputs assembled by this module's signatures. A variant guarded on a symbol ``values`` does
    not bind is one line (the choice cannot be made)."""
    for func in mod.functions.values():
        g = guard_of(func)
        if g is not None and g[1] not in values:
            raise DistirError(f"@{func.name} is a count variant guarded on '{g[1]}', which {dict(values)} does not bind")
    picks = fold_variants(mod, values)
    if all(src == name for name, src in picks.items()) and len(picks) == len(mod.functions):
        return mod
    return mod.replace(functions={name: mod.functions[src] if src == name else without_guard(mod.functions[src], name)
                                  for name, src in picks.items()})
