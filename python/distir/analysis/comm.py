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

The sums over workers are exactly what :class:`distir.runtime.spmd.SpmdStats` records for a
run (``total_bytes``, ``bytes_by_kind``); bytes per worker are those sums over every
worker the runtime starts (``bytes_per_worker``). With ``num_workers`` symbolic these are
formulas; on a specialized module, numbers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from ..ir import sym
from ..ir.expr import Call, IRModule
from ..ir.sym import Dim
from ..ir.types import DTensorType, TensorType
from .common import AnalysisError, device_count, pick_function, value_bytes
from .formula import Rational, _eval, sum_dims

__all__ = ["KINDS", "CollectiveCost", "CommNumbers", "CommVolume", "collective_cost", "comm_volume"]

KINDS = ("all_gather", "all_reduce", "reduce_scatter", "all_to_all", "transfer")


@dataclass(frozen=True)
class CollectiveCost:
    """One collective call: its group and what it moves (formulas in the mesh sizes)."""

    binding: str
    op: str  # "ccl.allgather"
    kind: str  # "all_gather", as SpmdStats names it
    mesh_axis: int
    group_size: Dim  # n: workers in each group
    groups: Dim  # G: groups along the axis (product of the other mesh axes)
    input_bytes: Dim  # L: bytes each worker puts in
    total_bytes: Dim  # summed over all workers
    sent_per_member: Rational  # bytes each worker of a group sends (and receives)
    steps: Dim  # latency steps of the ring algorithm


def collective_cost(kind: str, n: Dim, groups: Dim, input_bytes: Dim, *, binding: str = "", op: str = "",
                    mesh_axis: int = 0) -> CollectiveCost:
    """The cost of one ring collective; see the module docstring's table."""
    L = input_bytes
    n1 = sym.sub(n, 1)
    if kind == "all_gather":
        total = sym.mul(sym.mul(groups, sym.mul(n, n1)), L)
        member = Rational.of(sym.mul(n1, L))
        steps = n1
    elif kind == "all_reduce":
        total = sym.mul(sym.mul(groups, sym.mul(2, n1)), L)
        member = Rational.of(sym.mul(sym.mul(2, n1), L), n)
        steps = sym.mul(2, n1)
    elif kind in ("reduce_scatter", "all_to_all"):
        total = sym.mul(sym.mul(groups, n1), L)
        member = Rational.of(sym.mul(n1, L), n)
        steps = n1
    else:
        raise AnalysisError(
            f"binding '{binding}': R.{op} is a collective of kind '{kind}', whose bytes the analysis "
            f"does not know (it knows {', '.join(KINDS)})"
        )
    return CollectiveCost(binding, op, kind, mesh_axis, n, groups, L, total, member, steps)


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
    devices: Dim  # workers the runtime starts (bytes per worker divide by this)
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

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
        """Bytes each worker sends (and receives), averaged over every worker the runtime starts."""
        return Rational.of(self.total_bytes, self.devices)

    def per_worker_by_kind(self) -> dict[str, Rational]:
        return {k: Rational.of(v, self.devices) for k, v in self.bytes_by_kind.items()}

    def free_vars(self) -> set[str]:
        out = sym.free_vars(self.devices) | sym.free_vars(self.total_bytes)
        for v in self.bytes_by_kind.values():
            out |= sym.free_vars(v)
        return out

    def evaluate(self, values: Mapping[str, int] | None = None) -> CommNumbers:
        """The numbers at ``values`` (e.g. ``{"num_workers": 4}``)."""
        values = dict(values or {})
        by_kind = {k: _eval(v, values) for k, v in self.bytes_by_kind.items()}
        total = _eval(self.total_bytes, values)
        devices = _eval(self.devices, values)
        return CommNumbers(devices, self.counts, by_kind, total, Fraction(total, devices or 1))


def _transfer_cost(binding: str, op: str, attrs, x: TensorType) -> CollectiveCost:
    """A point-to-point transfer between meshes: every target worker receives its block once."""
    from ..ir.layout import local_shape
    from ..ir.transfer import route_bytes, transfer_cost_formula, transfer_routes
    from ..ir.types import dtype_bytes

    shape, size = tuple(attrs["shape"]), dtype_bytes(x.dtype)
    src, src_p, dst, dst_p = attrs["src_mesh"], attrs["src_placement"], attrs["dst_mesh"], attrs["dst_placement"]
    received = sym.mul(sym.product(local_shape(shape, dst, dst_p)), size)  # by each target worker
    try:
        total = transfer_cost_formula(shape, size, src, src_p, dst, dst_p)
    except ValueError:  # the meshes may share devices: what stays put is free, known only at concrete sizes
        try:
            ints = [sym.evaluate(d, {}) for d in shape]
            routes = transfer_routes(ints, [sym.evaluate(d, {}) for d in src.shape], src.device_list(), src_p,
                                     [sym.evaluate(d, {}) for d in dst.shape], dst.device_list(), dst_p)
        except sym.SymbolicError:
            raise AnalysisError(
                f"binding '{binding}': R.{op} moves data between meshes that may share devices; its bytes are "
                "known only at concrete sizes: specialize the module first"
            ) from None
        total = int(route_bytes(routes)) * size
    n_dst = dst.size
    member = Rational.of(total, n_dst)
    return CollectiveCost(binding, op, "transfer", -1, n_dst, 1, received, total, member, 1)


def comm_volume(mod: IRModule, func: str | None = None) -> CommVolume:
    """The collectives of ``mod[func]`` (a local-view function, symbolic or specialized)."""
    f = pick_function(mod, func)
    out = []
    for b in f.bindings():
        v = b.value
        if not isinstance(v, Call):
            continue
        kind = v.op.extra.get("collective")
        if kind is None:
            if v.op.name.startswith("dist.") and any(isinstance(a.type, DTensorType) for a in v.args):
                raise AnalysisError(
                    f"binding '{b.var.name}' is R.{v.op.name} on a DTensor: the analysis reads local-view "
                    "modules; run the distribute pipeline (distribute_pipeline(), or -p distribute) first"
                )
            continue
        x = v.args[0].type
        if not isinstance(x, TensorType):
            raise AnalysisError(f"binding '{b.var.name}': R.{v.op.name} takes {x}, not a local tensor")
        attrs = v.op.full_attrs(v.attrs)
        if kind == "transfer":
            out.append(_transfer_cost(b.var.name, v.op.name, attrs, x))
            continue
        mesh, axis = attrs["device_mesh"], attrs["mesh_axis"]
        others = sym.product(s for i, s in enumerate(mesh.shape) if i != axis)
        out.append(
            collective_cost(kind, mesh.shape[axis], others, value_bytes(x), binding=b.var.name, op=v.op.name,
                            mesh_axis=axis)
        )
    return CommVolume(f.name, tuple(out), device_count(mod))
