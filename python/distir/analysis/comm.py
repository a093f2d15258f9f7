"""Communication volume of a local-view function: what every collective moves, as formulas.

For a collective on mesh axis ``a`` of size ``n`` of a mesh with ``G`` groups along that
axis (the product of the other axes' sizes), where each worker holds ``L`` bytes of input,
the SPMD runtime's ring algorithms move (each worker receives what it sends):

==============  =========================  ===========================  ===========
collective      bytes one member sends     bytes summed over workers    ring steps
==============  =========================  ===========================  ===========
all_gather      (n - 1) * L                G * n * (n - 1) * L          n - 1
all_reduce      2 * (n - 1) * L / n        G * 2 * (n - 1) * L          2 * (n - 1)
reduce_scatter  (n - 1) * L / n            G * (n - 1) * L              n - 1
all_to_all      (n - 1) * L / n            G * (n - 1) * L              n - 1
==============  =========================  ===========================  ===========

A ``transfer`` between two meshes (pipeline stages) is point to point: each worker of the
target mesh receives its block once, so with disjoint meshes the sum over workers is
``|target mesh| * (target local bytes)``, in one step (meshes that share devices move less;
their bytes are computed from the routes, at concrete sizes only).

An ``exchange`` (a block exchange) moves what each worker's target block lacks: a sum over
the devices of block overlaps, reported as ``exchange_bytes_<id>(sizes...)``, a function of the
sizes that evaluates exactly (:func:`distir.ir.sym.opaque`); its rounds, one per peer across the
mesh axes it crosses (:func:`distir.ir.exchange.crossed_axes`, which depends on which axes have
size 1), as ``exchange_rounds_<id>(mesh sizes)``.

A ``replan`` (a redistribute planned when the mesh's sizes are bound) moves what the plan
``specialize`` writes for those sizes moves: ``replan_bytes_<id>(sizes...)`` (and its rounds
``replan_rounds_<id>(sizes...)``), which evaluate by planning at the sizes and adding up the
steps' costs above; at given sizes (:meth:`CommVolume.evaluate`) it counts as those steps.

The sums over workers are exactly what :class:`distir.runtime.spmd.SpmdStats` records for a
run (``total_bytes``, ``bytes_by_kind``); bytes per worker are those sums over the devices
of the module's meshes, each counted once (``bytes_per_worker``). With ``num_workers`` symbolic
these are formulas; on a specialized module, numbers.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache

from ..errors import DistirError
from ..ir import sym
from ..ir.exchange import crossed_axes
from ..ir.expr import Binding, Call, IRModule, Var
from ..ir.layout import local_shape
from ..ir.mesh import DeviceMesh, Range
from ..ir.steps import all_steps, get_step
from ..ir.sym import Dim
from ..ir.types import DTensorType, TensorType, dtype_bytes
from ..transform.count_variants import guard_of
from ..transform.legalize_redistribute import replan_bindings
from .common import device_count, pick_function, value_bytes
from .errors import AnalysisError
from .formula import Rational, _eval, sum_dims

__all__ = ["CollectiveCost", "CommNumbers", "CommVolume", "collective_cost", "comm_volume"]



@dataclass(frozen=True)
class CollectiveCost:
    """One collective call: its group and what it moves (formulas in the mesh sizes)."""

    binding: str
    op: str  # "ccl.all_gather"
    kind: str  # "all_gather", as SpmdStats names it
    mesh_axis: int
    group_size: Dim  # n: workers in each group
    groups: Dim  # G: groups along the axis (product of the other mesh axes)
    input_bytes: Dim  # L: bytes each worker puts in
    total_bytes: Dim  # summed over all workers
    sent_per_member: Rational  # bytes each worker of a group sends (and receives)
    steps: Dim  # latency steps of the ring algorithm
    identity_when_free: bool = False  # it is an identity (dropped by specialize) when it moves nothing
    # the mesh axes it sends along, with their sizes, for the time model (distir.ir.axis_cost): its own axis (one
    # that comes out of size 1 carries nothing); none between meshes; for a block exchange, ``crossed``
    axes: tuple[tuple[int, Dim], ...] = ()
    # a block exchange: values -> the mesh axes it crosses at those sizes (distir.ir.exchange.crossed_axes)
    crossed: Callable[[Mapping[str, int]], tuple[int, ...]] | None = field(default=None, compare=False, repr=False)
    # a step planned at the bound sizes (replan): values -> the costs of the steps specialize writes there
    at: Callable[[Mapping[str, int]], tuple[CollectiveCost, ...]] | None = field(default=None, compare=False, repr=False)


def collective_cost(kind: str, n: Dim, groups: Dim, input_bytes: Dim, *, output_bytes: Dim | None = None,
                    piece_bytes: Dim | None = None, binding: str = "", op: str = "", mesh_axis: int = 0) -> CollectiveCost:
    """The cost of one collective on one mesh axis, from its step kind's cost formula (the
    planner's cost model, see :mod:`distir.ops.collectives`): ``n`` workers per group,
    ``groups`` groups, ``input_bytes`` (and ``output_bytes``) held by each worker, and
    ``piece_bytes`` for one block it exchanges (default: its input)."""
    try:
        step = get_step(kind)
    except DistirError:
        step = None
    if step is None or step.sent is None:
        known = ", ".join(k for k, s in all_steps().items()
                          if s.sent is not None or s.point_to_point is not None or s.group_bytes is not None)
        raise AnalysisError(
            f"binding '{binding}': R.{op} is a collective of kind '{kind}', whose bytes the analysis "
            f"does not know (it knows {known})"
        )
    L = input_bytes
    after = L if output_bytes is None else output_bytes
    num, den = step.sent(n, L, after, L if piece_bytes is None else piece_bytes)
    member = Rational.of(num, den)
    total = Rational.of(sym.mul(sym.mul(groups, n), num), den)
    if not total.is_integral:
        raise AnalysisError(f"binding '{binding}': R.{op} sends a fraction of a byte in all ({total})")
    return CollectiveCost(binding, op, kind, mesh_axis, n, groups, L, total.terms[0][0] if total.terms else 0,
                          member, step.rounds(n), step.local_identity is not None, ((mesh_axis, n),))


@dataclass(frozen=True)
class CommNumbers:
    """A :class:`CommVolume` at given sizes; the fields mirror :class:`~distir.runtime.spmd.SpmdStats`."""

    num_workers: int
    counts: dict[str, int]
    bytes_by_kind: dict[str, int]
    total_bytes: int
    bytes_per_worker: Fraction


@dataclass(frozen=True)
class CommVolume:
    """Every collective of one function, in program order, with totals as formulas."""

    function: str
    collectives: tuple[CollectiveCost, ...]
    devices: Dim  # the devices of the module's meshes (bytes per worker divide by this)
    _cache: dict = field(default_factory=dict, compare=False, repr=False)
    #: the function's count variants, (symbol, counts, their volume): at those counts :meth:`evaluate`
    #: reads the variant, which is what runs there (distir.transform.count_variants); the formulas above
    #: are those of the function's own layout
    variants: tuple[tuple[str, tuple[int, ...], CommVolume], ...] = ()

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(c.kind for c in self.collectives))

    @property
    def bytes_by_kind(self) -> dict[str, Dim]:
        """Bytes summed over workers, per kind of collective."""
        if "by_kind" not in self._cache:
            groups: dict[str, list[Dim]] = {}
            for c in self.collectives:
                groups.setdefault(c.kind, []).append(c.total_bytes)
            self._cache["by_kind"] = {k: sum_dims(v) for k, v in groups.items()}
        return self._cache["by_kind"]

    @property
    def total_bytes(self) -> Dim:
        """Bytes sent, summed over all workers and collectives."""
        if "total" not in self._cache:
            self._cache["total"] = sum_dims(c.total_bytes for c in self.collectives)
        return self._cache["total"]

    @property
    def bytes_per_worker(self) -> Rational:
        """Bytes each worker sends (and receives), averaged over the devices of the module's meshes."""
        return Rational.of(self.total_bytes, self.devices)

    def per_worker_by_kind(self) -> dict[str, Rational]:
        return {k: Rational.of(v, self.devices) for k, v in self.bytes_by_kind.items()}

    def free_vars(self) -> set[str]:
        out = sym.free_vars(self.devices) | sym.free_vars(self.total_bytes)
        for v in self.bytes_by_kind.values():
            out |= sym.free_vars(v)
        return out

    def evaluate(self, values: Mapping[str, int] | None = None) -> CommNumbers:
        """The numbers at ``values`` (e.g. ``{"num_workers": 4}``). A collective that moves nothing
        at these sizes because it is then an identity (a re-blocking at a count that divides, which
        specialize drops) is not counted. At a count one of the function's variants is laid out for,
        the variant's numbers."""
        values = dict(values or {})
        for symbol, counts, variant in self.variants:
            if values.get(symbol) in counts:
                return variant.evaluate(values)
        present = []
        for c in self.collectives:
            for step in c.at(values) if c.at is not None else (c,):  # a replan: the steps written at these sizes
                if not (step.identity_when_free and _eval(step.total_bytes, values) == 0):
                    present.append(step)
        by_kind: dict[str, int] = {}
        for c in present:
            by_kind[c.kind] = by_kind.get(c.kind, 0) + _eval(c.total_bytes, values)
        total = _eval(self.total_bytes, values)
        devices = _eval(self.devices, values)
        return CommNumbers(devices, dict(Counter(c.kind for c in present)), by_kind, total, Fraction(total, devices or 1))


def _point_to_point_cost(step, binding: str, op: str, attrs, x: TensorType) -> CollectiveCost:
    """A kind that sends pieces point to point (a transfer between meshes): every target worker
    receives its block once."""
    try:
        receivers, received, total = step.point_to_point(attrs, x)
    except sym.SymbolicError:
        raise AnalysisError(
            f"binding '{binding}': R.{op} moves data between meshes that may share devices; its bytes are "
            "known only at concrete sizes: specialize the module first"
        ) from None
    crossed = None
    if step.reaches is not None:  # a block exchange: one round per peer across the axes it crosses (as the planner)
        mesh = attrs["device_mesh"]
        src_p, dst_p, same = attrs["src_placement"], attrs["dst_placement"], attrs.get("new_shape") is None

        def crossed_at(*sizes) -> tuple[int, ...]:
            return crossed_axes(src_p, dst_p, sizes, same)

        def rounds_at(*sizes) -> int:
            return math.prod(sizes[a] for a in crossed_at(*sizes)) - 1

        def crossed(values: Mapping[str, int]) -> tuple[int, ...]:
            return crossed_at(*(sym.evaluate(d, values) for d in mesh.shape))

        tag = hashlib.sha1(f"{mesh.ndim}|{src_p}|{dst_p}|{same}".encode()).hexdigest()[:8]
        rounds = sym.opaque("exchange_rounds_" + tag, rounds_at, list(mesh.shape))
    else:
        rounds = step.rounds(receivers)
    return CollectiveCost(binding, op, step.name, -1, receivers, 1, received, total, Rational.of(total, receivers),
                          rounds, crossed=crossed)


def _piece_bytes(x: TensorType, out, n: Dim) -> Dim:
    """Bytes of one block a collective exchanges: per dim the cut side of its input and output
    extents (the one that is a block, ``ceil(other / n)``, of the other)."""
    if not isinstance(out, TensorType) or out.ndim != x.ndim:
        return value_bytes(x)
    dims = []
    for a, b in zip(x.shape, out.shape):
        if sym.equal(a, b) or sym.equal(a, sym.ceildiv(b, n)):
            dims.append(a)
        elif sym.equal(b, sym.ceildiv(a, n)):
            dims.append(b)
        else:
            dims.append(a if sym.prove_ge(b, a) else b)
    return sym.mul(sym.product(dims), dtype_bytes(x.dtype))


_REPLAN_PLACEMENTS = ("src_placement", "mid_placement", "reshaped_placement", "dst_placement")


def _replan_spec(attrs, x: TensorType) -> str:
    mesh, shape, new = attrs["device_mesh"], attrs["shape"], attrs.get("new_shape")
    placements = "|".join(str(attrs.get(k)) for k in _REPLAN_PLACEMENTS)
    return f"{mesh.ndim}|{len(shape)}|{-1 if new is None else len(new)}|{placements}|{x.dtype}|{attrs.get('axis_costs')}"


@lru_cache(maxsize=4096)
def _replan_costs_at(spec: str, sizes: tuple[int, ...], shapes: tuple[int, ...], binding: str) -> tuple[CollectiveCost, ...]:
    """The costs of the steps specialize writes for a replan (``spec``: its ranks, placements and
    dtype) at concrete mesh ``sizes`` and tensor ``shapes`` (the shape, then the new shape if any)."""
    from ..ir.placement import Placement

    _, rank, new_rank, *placements, dtype, costs = spec.split("|")
    mesh = DeviceMesh(sizes, Range(0, sym.product(sizes)))
    shape = list(shapes[: int(rank)])
    attrs = {"shape": shape, "device_mesh": mesh}
    if int(new_rank) >= 0:
        attrs["new_shape"] = list(shapes[int(rank):])
    for k, p in zip(_REPLAN_PLACEMENTS, placements):
        if p != "None":
            attrs[k] = Placement.parse(p)
    if costs != "None":
        attrs["axis_costs"] = costs
    x = Var("x", TensorType(local_shape(shape, mesh, attrs["src_placement"]), dtype))
    call = Call(get_step("replan").local_op, (x,), attrs)
    out = Var(binding, call.type)
    steps = replan_bindings(call, x, out, lambda hint: hint)
    return tuple(c for s in steps for c in _call_costs(s))


def _replan_cost(b: Binding, attrs, x: TensorType) -> list[CollectiveCost]:
    """A redistribute planned at the bound sizes: at concrete sizes its steps, else one entry whose
    bytes and rounds are functions of the sizes that plan there (module docstring)."""
    mesh, shape = attrs["device_mesh"], (*attrs["shape"], *(attrs.get("new_shape") or ()))
    spec = _replan_spec(attrs, x)
    k = mesh.ndim
    args = [*mesh.shape, *shape]
    if all(isinstance(a, int) for a in args):
        return list(_replan_costs_at(spec, tuple(mesh.shape), shape, b.var.name))

    def costs(*values):
        return _replan_costs_at(spec, tuple(values[:k]), tuple(values[k:]), b.var.name)

    def count_bytes(*values):
        return sum(int(c.total_bytes) for c in costs(*values))

    def count_rounds(*values):
        return sum(int(c.steps) for c in costs(*values))

    def at(values: Mapping[str, int]) -> tuple[CollectiveCost, ...]:
        return costs(*(sym.evaluate(a, values) for a in args))

    tag = hashlib.sha1(spec.encode()).hexdigest()[:8]
    total = sym.opaque("replan_bytes_" + tag, count_bytes, args)
    rounds = sym.opaque("replan_rounds_" + tag, count_rounds, args)
    return [CollectiveCost(b.var.name, b.value.op.name, "replan", -1, mesh.size, 1, value_bytes(x), total,
                           Rational.of(total, mesh.size), rounds, at=at)]


def _call_costs(b: Binding) -> list[CollectiveCost]:
    """What the call of binding ``b`` moves: nothing, one collective, or (a replan) its steps."""
    v = b.value
    if not isinstance(v, Call):
        return []
    step = v.op.step
    communicates = step is not None and v.op is step.local_op and step.simulate is not None
    kind = step.name if communicates else None
    if kind is None:
        if v.op.name.startswith("dist.") and any(isinstance(a.type, DTensorType) for a in v.args):
            raise AnalysisError(
                f"binding '{b.var.name}' is R.{v.op.name} on a DTensor: the analysis reads local-view "
                "modules; run the distribute pipeline (distribute_pipeline(), or -p distribute) first"
            )
        return []
    x = v.args[0].type
    if not isinstance(x, TensorType):
        raise AnalysisError(f"binding '{b.var.name}': R.{v.op.name} takes {x}, not a local tensor")
    attrs = v.op.full_attrs(v.attrs)
    if step is get_step("replan"):
        return _replan_cost(b, attrs, x)
    if step.point_to_point is not None:  # not a collective on one mesh axis (a transfer between meshes)
        return [_point_to_point_cost(step, b.var.name, v.op.name, attrs, x)]
    mesh, axis = attrs["device_mesh"], attrs["mesh_axis"]
    others = sym.product(s for i, s in enumerate(mesh.shape) if i != axis)
    if step.group_bytes is not None:  # bytes the kind counts itself (a regroup: the runs each worker lacks)
        return [_group_cost(step, b, attrs, x, mesh.shape[axis], others)]
    return [
        collective_cost(kind, mesh.shape[axis], others, value_bytes(x), output_bytes=value_bytes(v.type),
                        piece_bytes=_piece_bytes(x, v.type, mesh.shape[axis]), binding=b.var.name, op=v.op.name, mesh_axis=axis)
    ]


def _group_cost(step, b: Binding, attrs, x: TensorType, n: Dim, groups: Dim) -> CollectiveCost:
    """A collective on one mesh axis whose kind counts the bytes of one group itself (``group_bytes``)."""
    group, axis = step.group_bytes(attrs, x), attrs["mesh_axis"]
    return CollectiveCost(b.var.name, b.value.op.name, step.name, axis, n, groups, value_bytes(x), sym.mul(groups, group),
                          Rational.of(group, n), step.rounds(n), step.local_identity is not None, ((axis, n),))


def comm_volume(mod: IRModule, func: str | None = None) -> CommVolume:
    """The collectives of ``mod[func]`` (a local-view function, symbolic or specialized)."""
    f = pick_function(mod, func)
    out = [c for b in f.bindings() for c in _call_costs(b)]
    variants = []
    for g in mod.functions.values():
        guard = guard_of(g)
        if guard is not None and guard[0] == f.name:
            variants.append((guard[1], guard[2], comm_volume(mod, g.name)))
    return CommVolume(f.name, tuple(out), device_count(mod), variants=tuple(variants))
