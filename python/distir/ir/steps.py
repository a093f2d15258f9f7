"""Redistribution steps: one record per kind of step, read by every stage that meets one.

A redistribute becomes a sequence of steps (``legalize-redistribute``). A :class:`StepKind`
says everything distir knows about one kind of step, so that adding a kind touches this
registry and nothing else:

- what it does to a placement (``apply``), for the planner and for typing ``R.dist.<name>``;
  or, for a step that changes the whole layout at once (a block exchange), which layouts it
  reaches (``reaches``) and the elements each device receives (``volume``);
- what it costs: bytes each worker sends (``sent``) and its latency rounds (``rounds``),
  for the planner, propagation and the analyses (the one cost model);
- its global-view op ``R.dist.<name>`` (made from the record) and its local-view form
  (``lower``: usually the collective ``R.ccl.<name>``, declared from ``local_params`` and
  ``local_infer``);
- how the SPMD simulator runs the collective (``simulate``), and its TVM Relax form
  (``tvm``: a ``"module:function"`` resolved lazily by :mod:`distir.tvm`, or a callable).

The kind's ``name`` is its one spelling: ``R.dist.all_gather``, ``R.ccl.all_gather``, and
``"all_gather"`` in byte counts. The built-in kinds are declared in
:mod:`distir.ops.collectives`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import DistirError
from .combine import check_partial
from .placement import Placement
from .sym import Dim

__all__ = ["StepKind", "all_steps", "get_step", "register_step", "steps_version", "unregister_step"]

#: ``apply(placement, mesh_axis, dim, op_type, mesh_shape) -> Placement``; raises PlacementError
#: when the step does not apply there. ``mesh_shape`` may be None (sizes unknown).
Apply = Callable[[Placement, int, "int | None", "str | None", Any], Placement]
#: ``sent(n, before, after, piece) -> (numerator, denominator)`` of the bytes each worker sends
#: on an axis of ``n`` devices, where it holds ``before`` bytes before the step, ``after`` after
#: it, and ``piece`` is one block it exchanges (the smaller of its pieces before and after).
#: Ints (or Fractions) give exact quotients, symbolic sizes formulas.
Sent = Callable[[Dim, Any, Any, Any], Any]


@dataclass(eq=False)
class StepKind:
    """One kind of redistribution step on one mesh axis (see the module docstring)."""

    name: str
    doc: str
    change: str  # the placement change on the axis, for docs: "S[d] -> R"
    apply: Apply | None  # None: not a step on one mesh axis (a transfer between meshes)
    sent: Sent | None
    rounds: Callable[[Dim], Dim] = lambda n: 0  # latency steps of the algorithm (ring: n - 1)
    acts_on: type | None = None  # the spec it changes on its axis (Shard, Partial, Replicate), for a quick filter
    takes_dim: bool = False  # the step names a target tensor dim (``dim=``)
    takes_op: bool = False  # the step names a reduction (``op_type=``)
    # the local view: (lowering context, the global call, its local input) -> the call one worker runs
    lower: Callable | None = None
    local_params: tuple = ()  # attributes of R.ccl.<name> after its tensor input (Params)
    local_infer: Callable | None = None  # (input types, attrs) -> type, for R.ccl.<name>
    local_doc: str = ""
    local_numpy: Callable | None = None  # a local op without communication runs per worker: numpy reference
    local_identity: Callable | None = None  # (local call) -> True when it moves nothing at its sizes
    # SPMD simulator: (values by device, full attrs, context) -> (outputs by device, bytes sent in all)
    simulate: Callable | None = None
    tvm: str | Callable | None = None  # Relax form: "module:function" or (exporter, call) -> relax.Expr
    # a kind that is not a step on one mesh axis declares its ops' parameters and types itself
    global_params: tuple | None = None
    global_infer: Callable | None = None
    # its bytes when they are not sent(n, before, after) on one axis (point-to-point pieces):
    # (local attrs, local input type) -> (receiving workers, bytes each receives, bytes sent in all);
    # raises SymbolicError when they are known only at concrete sizes
    point_to_point: Callable | None = None
    # a step on one mesh axis whose bytes ``sent`` cannot give (they depend on more than the bytes held:
    # a regroup moves the runs each worker lacks): (local attrs, local input type) -> bytes all workers
    # of one group receive (a formula; ``sent`` is then None)
    group_bytes: Callable | None = None
    # a step that changes the whole layout at once (a block exchange), not one mesh axis:
    # ``reaches(state, target) -> placements`` it may go to from ``state`` when planning toward ``target``,
    # and ``volume(src_shape, src, dst_shape, dst, mesh_sizes) -> elements all mesh positions receive``
    # (concrete sizes; raises SymbolicError otherwise; never a loop over devices: the planner prices
    # it on every edge). The planner weighs it by those elements.
    reaches: Callable | None = None
    # ``reaches_by_time(state, target) -> placements``: more layouts to try when planning by time (a
    # layout on the way, reached over a cheaper link), where by bytes going straight is the least
    reaches_by_time: Callable | None = None
    volume: Callable | None = None
    global_op: Any = field(default=None, repr=False)  # R.dist.<name>, set by register_step
    local_op: Any = field(default=None, repr=False)  # R.ccl.<name>, set by register_step

    def __repr__(self) -> str:
        return f"StepKind({self.name})"


_STEPS: dict[str, StepKind] = {}
_VERSION = [0]  # bumped when a kind comes or goes, so caches of plans (which name kinds) start over


def steps_version() -> int:
    return _VERSION[0]


def register_step(kind: StepKind) -> StepKind:
    """Add a step kind and declare its ops ``R.dist.<name>`` and (if it has one) ``R.ccl.<name>``."""
    from .op import OpDef, Param, register_op

    if kind.name in _STEPS:
        raise DistirError(f"redistribution step '{kind.name}' is declared twice")
    if kind.apply is not None or kind.global_infer is not None:  # a kind only lowering writes has no global op
        kind.global_op = register_op(
            OpDef(
                name=f"dist.{kind.name}",
                params=kind.global_params or _global_params(kind, Param),
                infer=kind.global_infer or _global_infer(kind),
                numpy=lambda xs, attrs, ctx: xs[0],  # in the global view a step moves data, not values
                dist_aware=True,
                doc=f"{kind.change} on one mesh axis ({kind.doc})" if kind.apply else kind.doc,
                step=kind,
            )
        )
    if kind.local_infer is not None:
        kind.local_op = register_op(
            OpDef(
                name=f"ccl.{kind.name}",
                params=(Param("x", "tensor"), *kind.local_params),
                infer=kind.local_infer,
                numpy=kind.local_numpy,
                identity_at=kind.local_identity,
                doc=kind.local_doc or kind.doc,
                step=kind,
            )
        )
    _STEPS[kind.name] = kind
    _VERSION[0] += 1
    return kind


def unregister_step(name: str) -> None:
    """Remove a step kind and its ops (for tests that declare a kind of their own)."""
    from .op import unregister_op

    kind = _STEPS.pop(name)
    _VERSION[0] += 1
    if kind.global_op is not None:
        unregister_op(kind.global_op.name)
    if kind.local_op is not None:
        unregister_op(kind.local_op.name)


def get_step(name: str) -> StepKind:
    kind = _STEPS.get(name)
    if kind is not None:  # the planner looks up a step kind per step it prices: no import on that path
        return kind
    from .op import ensure_declared

    ensure_declared()
    kind = _STEPS.get(name)
    if kind is None:
        raise DistirError(f"unknown redistribution step '{name}' (known: {', '.join(_STEPS)})")
    return kind


def all_steps() -> Mapping[str, StepKind]:
    """Every step kind, in declaration order (the planner's order of preference on ties);
    importing :mod:`distir.ops` declares the built-in ones (on the first look-up)."""
    from .op import ensure_declared

    ensure_declared()
    return dict(_STEPS)


def _global_params(kind: StepKind, Param) -> tuple:
    ps = [Param("x", "tensor"), Param("mesh_axis", "int")]
    if kind.takes_dim:
        ps.append(Param("dim", "int"))
    if kind.takes_op:
        ps.append(Param("op_type", "choice", "sum", choices=("sum", "max", "min", "avg")))
    return tuple(ps)


def _global_infer(kind: StepKind):
    from ..errors import TypeInferenceError
    from .placement import PlacementError
    from .types import DTensorType

    def infer(types, attrs):
        x = types[0]
        if not isinstance(x, DTensorType):
            raise TypeInferenceError(f"R.dist.{kind.name}: input must be a DTensor, got {x}")
        axis = attrs["mesh_axis"]
        if not 0 <= axis < x.mesh.ndim:
            raise TypeInferenceError(f"R.dist.{kind.name}: mesh_axis {axis} is out of range for a {x.mesh.ndim}-D mesh")
        dim = attrs.get("dim")
        if dim is not None and not 0 <= dim < x.ndim:
            raise TypeInferenceError(f"R.dist.{kind.name}: dim {dim} is out of range for a tensor of rank {x.ndim}")
        try:
            new = kind.apply(x.placement, axis, dim, attrs.get("op_type"), x.mesh.shape)
            if x.placement.is_strided:  # e.g. a shard of a strided dim on a second mesh axis
                new.validate(x.mesh.ndim, x.ndim, shape=x.shape)
            check_partial(new, x.dtype, "the result")
        except PlacementError as err:
            raise TypeInferenceError(f"R.dist.{kind.name}: {err}") from None
        return x.with_placement(new)

    return infer
