"""Per-worker memory of a local-view function: parameter bytes and the peak of live intermediates.

Parameters are the function's inputs (each worker's piece). Intermediates are the values
the bindings compute, one buffer per tensor (a call with a tuple result makes one per field,
as TVM does). A binding that only renames or regroups values (``y = x``, a tuple, a tuple
item) allocates nothing and keeps what it refers to alive (a tuple item only its field); so
does a view (an output TVM writes in place: a reshape, or a copy of the same type, see
:data:`VIEW_OPS`), and an op that is an
identity at the sizes (``OpDef.identity_at``: the padding mask of an uneven block, or a
re-blocking, once the count divides; specialize drops them). On a symbolic module such an op
is counted as the identity it is at counts that divide, so the peak *formula* holds there;
:meth:`MemoryFootprint.evaluate` specializes and counts again when some count makes it real
work, so the numbers are exact at every count. A ``R.ccl.replan`` (a redistribute planned for
the count, whose steps specialize writes) counts as its output in the formula, and
:meth:`MemoryFootprint.evaluate` specializes and counts its steps. A value is live from
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
from dataclasses import dataclass, field
from fractions import Fraction

from ..ir import sym
from ..ir.expr import Call, Expr, IRModule, Tuple, TupleGetItem, Var
from ..ir.layout import block_of, chunk_elements, concrete_block, concrete_mesh_shape, mesh_coords
from ..ir.steps import get_step
from ..ir.sym import Dim
from ..ir.types import DTensorType, TensorType, TupleType, dtype_bytes
from .common import pick_function, value_bytes
from .formula import Maximum, _eval, prune_dominated, sum_dims

__all__ = ["SAME_TYPE_VIEW_OPS", "VIEW_OPS", "Buffers", "MemoryFootprint", "MemoryNumbers", "ParamBalance", "buffers", "concrete_peak", "memory_footprint", "param_balance"]


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
    # bindings counted as identities that are real work at some counts (then evaluate() recounts)
    conditional: tuple[str, ...] = ()
    source: tuple | None = field(default=None, compare=False, repr=False)  # (module, function name)

    def free_vars(self) -> set[str]:
        return sym.free_vars(self.param_bytes) | self.peak_bytes.free_vars()

    def evaluate(self, values: Mapping[str, int] | None = None) -> MemoryNumbers:
        values = dict(values or {})
        if self.conditional and self.source is not None and self.free_vars() <= set(values):
            from ..transform.specialize import specialize

            mod, func = self.source
            return memory_footprint(specialize(mod, values), func).evaluate()
        i = self.peak_bytes.argmax(values)
        at = self.peak_bytes.labels[i] if i >= 0 else ""
        return MemoryNumbers(_eval(self.param_bytes, values), self.peak_bytes.evaluate(values), at)


def _storages(e: Expr, where: dict[Var, tuple[frozenset[int], ...]]) -> frozenset[int]:
    """The allocations an expression refers to (through vars, tuples and tuple items)."""
    out: frozenset[int] = frozenset()
    for part in _parts(e, where):
        out |= part
    return out


def _parts(e: Expr, where: dict[Var, tuple[frozenset[int], ...]]) -> tuple[frozenset[int], ...]:
    """The allocations of each field of a tuple value (one part for a tensor): a tuple item
    refers to its field's tensors only, so the other fields are freed on their own."""
    if isinstance(e, Var):
        return where.get(e, ())
    if isinstance(e, Tuple):
        return tuple(_storages(f, where) for f in e.fields)
    if isinstance(e, TupleGetItem):
        parts = _parts(e.tuple_value, where)
        if len(parts) > 1 and -len(parts) <= e.index < len(parts):
            return (parts[e.index],)
        return (_storages(e.tuple_value, where),)
    return ()


# ops whose output TVM makes a view of their input (relax.transform.RewriteDataflowReshape turns a
# copy that keeps the elements' order into R.reshape): the output is the input's buffer read with
# another shape, written in place, not a second buffer
VIEW_OPS = frozenset({"reshape", "expand_dims", "squeeze"})
# ops that are such a copy when the output has the input's shape and dtype (a repeat or tile by 1,
# a broadcast to the same shape, a cast to the same dtype)
SAME_TYPE_VIEW_OPS = frozenset({"repeat", "tile", "broadcast_to", "astype"})


def _is_view(call: Call, out) -> bool:
    """Whether TVM computes ``call`` (whose result has type ``out``) as a view of its first argument
    (see :data:`VIEW_OPS`)."""
    if not call.args or not isinstance(call.args[0], Var):
        return False
    name = call.op.name
    if name in VIEW_OPS:
        return True
    if name not in SAME_TYPE_VIEW_OPS and name != "permute_dims":
        return False
    src = call.args[0].type
    if not isinstance(src, TensorType) or not isinstance(out, TensorType):  # local pieces (the local view)
        return False
    if name == "permute_dims":  # the identity permutation only
        axes = call.attrs.get("axes")
        n = len(src.shape)
        return (list(axes) if axes is not None else list(reversed(range(n)))) == list(range(n))
    return src.dtype == out.dtype and len(src.shape) == len(out.shape) and all(
        a == b if isinstance(a, int) and isinstance(b, int) else sym.prove_equal(a, b)
        for a, b in zip(src.shape, out.shape))


@dataclass(frozen=True)
class Buffers:
    """The allocations of a function's bindings, in program order: what the liveness walk and
    the static-planner model (:mod:`distir.analysis.planning`) both read."""

    size: tuple[Dim, ...]  # bytes per worker
    fields: tuple[tuple[tuple[str, Dim], ...], ...]  # (dtype, bytes) of the tensor (none for a non-tensor)
    born: tuple[int, ...]  # the binding that computes it
    last: tuple[int, ...]  # the last binding that reads it (``end`` for the function's result)
    names: tuple[str, ...]  # the binding
    end: int  # the number of bindings
    conditional: tuple[str, ...]  # bindings counted as identities that are real work at some counts


def buffers(f) -> Buffers:
    """Walk ``f``'s bindings: each call that computes a new value allocates; a rename, tuple,
    tuple item, view (:data:`VIEW_OPS`) or identity at the sizes refers to what it reads."""
    bindings = list(f.bindings())
    replan = get_step("replan").local_op
    conditional: list[str] = []
    where: dict[Var, tuple[frozenset[int], ...]] = {}  # per field of a tuple value
    size: list[Dim] = []
    fields: list[tuple] = []
    born: list[int] = []
    last: list[int] = []
    names: list[str] = []
    for i, b in enumerate(bindings):
        for e in b.value.args if isinstance(b.value, Call) else (b.value,):
            for s in _storages(e, where):
                last[s] = max(last[s], i)
        if isinstance(b.value, Call) and b.value.op.identity_at is not None and b.value.args and (
            b.value.op.identity_at(b.value) or _is_symbolic(b.value)
        ):
            if not b.value.op.identity_at(b.value):
                conditional.append(b.var.name)
            where[b.var] = _parts(b.value.args[0], where)
        elif isinstance(b.value, Call) and _is_view(b.value, b.var.type):
            where[b.var] = _parts(b.value.args[0], where)
        elif isinstance(b.value, Call):
            if b.value.op is replan:  # specialize writes its steps, with their own intermediates
                conditional.append(b.var.name)
            tensors = _tensor_fields(b.var.type) or [("", value_bytes(b.var.type))]
            where[b.var] = tuple(frozenset((len(size) + k,)) for k in range(len(tensors)))
            for k, (dt, n) in enumerate(tensors):  # a tuple result: one allocation per field, as TVM makes
                size.append(n)
                fields.append(((dt, n),) if dt else ())
                born.append(i)
                last.append(i)
                names.append(b.var.name if len(tensors) == 1 else f"{b.var.name}[{k}]")
        else:
            where[b.var] = _parts(b.value, where)
    end = len(bindings)
    for s in _storages(f.result, where):
        last[s] = end
    return Buffers(tuple(size), tuple(fields), tuple(born), tuple(last), tuple(names), end, tuple(conditional))


def concrete_peak(bufs: Buffers, values: Mapping[str, int] | None = None) -> int:
    """The liveness peak of ``bufs`` at concrete sizes (what :func:`memory_footprint` evaluates to,
    without building its formulas): the most bytes live while any binding runs."""
    values = dict(values or {})
    delta = [0] * (bufs.end + 2)
    for z, a, b in zip(bufs.size, bufs.born, bufs.last):
        n = z if isinstance(z, int) else _eval(z, values)
        delta[a] += n
        delta[b + 1] -= n
    live = peak = 0
    for d in delta:
        live += d
        peak = max(peak, live)
    return peak


def _tensor_fields(t) -> list[tuple[str, Dim]]:
    """(dtype, bytes per worker) of each tensor in a value of type ``t`` (tuples flattened)."""
    if isinstance(t, (TensorType, DTensorType)):
        return [(t.dtype, value_bytes(t))]
    if isinstance(t, TupleType):
        return [x for ft in t.fields for x in _tensor_fields(ft)]
    return []


def memory_footprint(mod: IRModule, func: str | None = None) -> MemoryFootprint:
    """Per-worker parameter bytes and peak live intermediate bytes of ``mod[func]``."""
    f = pick_function(mod, func)
    params = tuple((p.name, value_bytes(p.type)) for p in f.params)
    param_bytes = sum_dims(b for _, b in params)

    bufs = buffers(f)
    bindings = list(f.bindings())
    size, born, last, conditional = list(bufs.size), bufs.born, bufs.last, list(bufs.conditional)

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
    return MemoryFootprint(f.name, params, param_bytes, Maximum(tuple(options), tuple(labels)), tuple(conditional),
                           (mod, f.name) if conditional else None)


def _is_symbolic(call: Call) -> bool:
    """The call's sizes still hold symbolic variables (its input or output type)."""
    types = [call.args[0].type, call.type] if call.type is not None else [call.args[0].type]
    for t in types:
        for d in getattr(t, "shape", ()):
            if sym.is_symbolic(d):
                return True
    return False


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


@dataclass(frozen=True)
class ParamBalance:
    """How evenly the parameters' elements fall on the devices at one count (padding not counted)."""

    largest: int  # bytes of elements on the device that holds the most
    mean: Fraction  # bytes of elements per device, on average

    @property
    def imbalance(self) -> Fraction:
        """``largest / mean``: 1 when every device holds as much, above 1 with uneven blocks."""
        return Fraction(self.largest) / self.mean if self.mean else Fraction(1)


def param_balance(mod: IRModule, values: Mapping[str, int], func: str | None = None) -> ParamBalance:
    """The parameter bytes each device really holds at ``values`` (a local-view module from the
    distribute pipeline): a block of an uneven split counts its elements, not its padding, so
    the largest against the mean says how uneven the layout is (``distir sweep``'s column)."""
    from ..transform.lower_to_local import GLOBAL_PARAMS

    f = pick_function(mod, func)
    types = f.attrs.get(GLOBAL_PARAMS, [p.type for p in f.params])
    values = dict(values)
    held: dict[int, int] = {}
    for m in mod.meshes():
        for dev in m.device_list(values):
            held.setdefault(dev, 0)
    for t in types:
        if isinstance(t, DTensorType):
            sizes = concrete_mesh_shape(t.mesh, values)
            shape = [_eval(d, values) for d in t.shape]
            devices = t.mesh.device_list(values)
            for pos, dev in enumerate(devices):
                if t.placement.is_block:  # its chunks' real elements
                    block = concrete_block(t.placement, values)
                    n = dtype_bytes(t.dtype) * chunk_elements(shape, block, len(devices), pos)
                    held[dev] = held.get(dev, 0) + n
                    continue
                coords = mesh_coords(pos, sizes)
                n = dtype_bytes(t.dtype)
                for d, extent in enumerate(shape):
                    n *= block_of(extent, t.placement, d, coords, sizes)[1]
                held[dev] = held.get(dev, 0) + n
        elif isinstance(t, TensorType):  # a plain parameter: every device holds all of it
            n = _eval(value_bytes(t), values)
            for dev in held or {0: 0}:
                held[dev] = held.get(dev, 0) + n
    if not held:
        return ParamBalance(0, Fraction(0))
    return ParamBalance(max(held.values()), Fraction(sum(held.values()), len(held)))
