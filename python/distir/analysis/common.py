"""What every analysis needs: its error, which function to look at, how many workers there are,
and how many bytes a value takes on one worker."""

from __future__ import annotations

import hashlib

from ..ir import sym
from ..ir.expr import Function, IRModule
from ..ir.layout import local_bytes
from ..ir.mesh import DeviceMesh, Range
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
    """The devices of the module's meshes, each counted once (what the simulator runs and
    ``SpmdStats.num_workers`` counts; ids in no mesh are not devices). One mesh: its size; meshes
    whose devices are provably nested or apart (pipeline stages, another grid of the same devices):
    the sum over the outermost; else an exact count at concrete sizes (``devices_<hash>(...)``)."""
    meshes = list(dict.fromkeys(mod.meshes()))
    if not meshes:
        return 1
    sets = [_ids(m) for m in meshes]
    if all(isinstance(s, frozenset) for s in sets):
        return len(frozenset().union(*sets))
    outer = [s for i, s in enumerate(sets)
             if not any(_within(s, t) and (not _within(t, s) or j < i) for j, t in enumerate(sets) if j != i)]
    if all(_apart(a, b) for i, a in enumerate(outer) for b in outer[i + 1:]):
        total: Dim = 0
        for s in outer:
            total = sym.add(total, len(s) if isinstance(s, frozenset) else sym.sub(s[1], s[0]))
        return sym.normalize(total)
    args = sorted(set().union(*(sym.free_vars(d) for m in meshes for d in _bounds(m))))
    tag = hashlib.sha1("|".join(str(m) for m in meshes).encode()).hexdigest()[:8]

    def count(*values) -> int:
        env = dict(zip(args, values))
        return len(set().union(*(m.device_list(env) for m in meshes)))

    return sym.opaque("devices_" + tag, count, [sym.var(n) for n in args])


def _bounds(m: DeviceMesh) -> list[Dim]:
    ids = m.device_ids
    return [ids.start, ids.stop] if isinstance(ids, Range) else []


def _ids(m: DeviceMesh) -> frozenset[int] | tuple[Dim, Dim]:
    """A mesh's device ids: a set when concrete, else its range's (start, stop)."""
    ids = m.device_ids
    if isinstance(ids, Range) and not (isinstance(ids.start, int) and isinstance(ids.stop, int)):
        return (ids.start, ids.stop)
    return frozenset(m.device_list())


def _span(s) -> tuple[Dim, Dim]:
    """(first id, one past the last) of a set of ids or a range."""
    return (min(s), max(s) + 1) if isinstance(s, frozenset) else s


def _within(a, b) -> bool:
    """Whether the ids ``a`` are provably among ``b``."""
    if isinstance(a, frozenset) and isinstance(b, frozenset):
        return a <= b
    if isinstance(b, frozenset):
        return False  # a symbolic range within fixed ids: not for every size
    (a0, a1), (b0, b1) = _span(a), b
    return sym.prove_le(b0, a0) and sym.prove_le(a1, b1)


def _apart(a, b) -> bool:
    """Whether the ids ``a`` and ``b`` provably have none in common."""
    if isinstance(a, frozenset) and isinstance(b, frozenset):
        return not a & b
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return sym.prove_le(a1, b0) or sym.prove_le(b1, a0)


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
