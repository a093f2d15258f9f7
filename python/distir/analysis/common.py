"""What every analysis needs: its error, which function to look at, how many workers there are,
and how many bytes a value takes on one worker."""

from __future__ import annotations

from ..ir import sym
from ..ir.expr import Function, IRModule
from ..ir.layout import local_bytes
from ..ir.mesh import Range
from ..ir.sym import Dim
from ..ir.types import DTensorType, TensorType, TupleType, Type, nbytes
from .errors import AnalysisError

__all__ = ["AnalysisError", "device_count", "pick_function", "value_bytes"]


def pick_function(mod: IRModule, func: str | None) -> Function:
    """``mod[func]``; with no name, ``main`` or the module's only function."""
    names = list(mod.functions)
    if func is None:
        if "main" in mod.functions:
            return mod["main"]
        if len(names) == 1:
            return mod[names[0]]
        raise AnalysisError(f"the module has no @main; name the function to analyse (it has: {', '.join(names)})")
    if func not in mod.functions:
        raise AnalysisError(f"the module has no function '{func}' (it has: {', '.join(names) or 'none'})")
    return mod[func]


def device_count(mod: IRModule) -> Dim:
    """Workers the SPMD runtime starts for ``mod``: one past the highest device id of any mesh."""
    ends: list[Dim] = []
    for m in mod.meshes():
        ids = m.device_ids
        ends.append(ids.stop if isinstance(ids, Range) else max(ids) + 1)
    if not ends:
        return 1
    from .formula import prune_dominated

    ends = [sym.normalize(e) for e in ends]
    ends = [ends[i] for i in prune_dominated(ends)]  # (n, 3 * n) -> 3 * n: sizes are at least 1
    out = ends[0]
    for e in ends[1:]:
        out = sym.max_(out, e)
    return out


def value_bytes(t: Type) -> Dim:
    """Bytes one worker holds for a value of type ``t`` (a DTensor counts its local piece)."""
    if isinstance(t, TensorType):
        return nbytes(t)
    if isinstance(t, DTensorType):
        return local_bytes(t)
    if isinstance(t, TupleType):
        total: Dim = 0
        for f in t.fields:
            total = sym.add(total, value_bytes(f))
        return total
    return 0
