"""The bytes a laid-out global-view function sends, and its peak live bytes per worker, at
concrete sizes: the measure two layouts of one function are compared by (propagation's guard,
auto-shard's budgets and report)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from fractions import Fraction

from ...errors import DistirError
from ...ir import sym
from ...ir.axis_cost import AxisCostError, AxisCosts
from ...ir.expr import Call, Tuple, TupleGetItem, Var
from ...ir.layout import local_bytes, local_type
from ...ir.placement import Partial, Placement, Replicate
from ...ir.steps import get_step
from ...ir.types import DTensorType, TupleType, dtype_bytes
from ..redistribute_plan import Timing, exchange_link, plan_cost, plan_redistribute, strided_share, timing_for

__all__ = ["function_bytes", "function_bytes_at", "function_peak", "sample_envs"]

GUARD_MESH_SAMPLES = (2, 3, 4, 8)  # the device counts the planner weighs plans at (redistribute_plan)
GUARD_DIM_SAMPLES = (1, 3, 10, 64, 512, 4096)


def sample_envs(func, mesh_names: set[str], size_hints: Mapping[str, int] | None = None,
                mesh_samples: tuple[int, ...] | None = None) -> list[dict[str, int]]:
    """Values of the symbols of ``func`` to weigh a layout at: every symbolic mesh size at each of
    ``mesh_samples`` (default ``GUARD_MESH_SAMPLES``; the declared counts of one class where the
    program is planned per class), every other symbol at each of ``GUARD_DIM_SAMPLES`` (a
    ``size_hints`` entry fixes its symbol)."""
    names: set[str] = set()
    for t in {p.type for p in func.params} | {b.var.type for b in func.bindings()}:  # each type once
        names |= _type_vars(t)
    hints = dict(size_hints or {})
    envs, seen = [], set()
    for m in mesh_samples or GUARD_MESH_SAMPLES:
        for v in GUARD_DIM_SAMPLES:
            env = {n: hints.get(n, m if n in mesh_names else v) for n in sorted(names | mesh_names)}
            key = tuple(env.items())
            if key not in seen:
                seen.add(key)
                envs.append(env)
    return envs


def _type_vars(t) -> set[str]:
    if isinstance(t, TupleType):
        return set().union(set(), *(_type_vars(f) for f in t.fields))
    shape = getattr(t, "shape", None) or ()
    out = set().union(set(), *(sym.free_vars(d) for d in shape if not isinstance(d, int)))
    if isinstance(t, DTensorType):
        out |= set().union(set(), *(sym.free_vars(d) for d in t.mesh.shape if not isinstance(d, int)))
    return out


def function_bytes(func, env: Mapping[str, int], axis_costs: AxisCosts | None = None) -> tuple[Fraction, Fraction] | None:
    """Bytes all workers send running ``func`` (a propagated global-view function, whose reshape
    chains legalize may fuse first, see
    :func:`~distir.transform.legalize_redistribute.fuse_reshapes`) at the sizes ``env``: the
    redistributes as legalize plans them (padded blocks counted), and apart the gathers of its
    sharded results (the runner's). None where ``env`` does not evaluate a size. With
    ``axis_costs``, the estimated seconds of those steps instead (plans made by time)."""
    return next(function_bytes_at(func, [env], axis_costs))


def function_bytes_at(func, envs: list[Mapping[str, int]], axis_costs: AxisCosts | None = None,
                      regroups: bool = False) -> Iterator[tuple[Fraction, Fraction] | None]:
    """:func:`function_bytes` at each of ``envs``, one after the other (a caller may stop early): the
    function is read once, its moves counted by their types and layouts (the layers of a stack repeat
    the same few), and each priced per env. ``regroups``: also the regroups lowering writes where a
    reshape splits or merges a sharded dim its count does not divide (``R.ccl.regroup``, and the
    all-gathers of the minor mesh axes of a dim cut over several), priced as they run
    (:func:`_reshape_collectives`), which the plan of one class of counts must see."""
    redistribute, exchange = "dist.redistribute", get_step("exchange")
    moves: dict[tuple[DTensorType, Placement], int] = {}
    exchanges: dict[tuple[DTensorType, DTensorType], int] = {}
    reshapes: dict[tuple[Call, ...] | None, int] = {}  # the collectives of a reshape's local form -> how many
    collectives: dict[tuple[DTensorType, DTensorType], tuple[Call, ...] | None] = {}
    for b in func.bindings():
        v = b.value
        name = getattr(getattr(v, "op", None), "name", None)
        if regroups and name == "reshape" and isinstance(b.var.type, DTensorType):
            x = v.args[0].type
            if isinstance(x, DTensorType) and not (x.placement.is_strided or x.placement.is_block
                                                   or b.var.type.placement.is_strided):
                key = (x, b.var.type)
                if key not in collectives:
                    collectives[key] = _reshape_collectives(v, x, b.var.type)
                if collectives[key] is None or collectives[key]:
                    reshapes[collectives[key]] = reshapes.get(collectives[key], 0) + 1
        if name == redistribute:
            x = v.args[0].type
            if isinstance(x, DTensorType) and x.mesh == v.attrs["device_mesh"]:
                key = (x, v.attrs["placement"])
                moves[key] = moves.get(key, 0) + 1
        elif name == exchange.global_op.name:
            key = (v.args[0].type, b.var.type)
            exchanges[key] = exchanges.get(key, 0) + 1
    results = _dtensor_leaves(func.result.type)
    for env in envs:
        yield _priced(moves, exchanges, results, env, axis_costs, reshapes)


def _priced(moves, exchanges, results, env: Mapping[str, int],
            axis_costs: AxisCosts | None, reshapes=None) -> tuple[Fraction, Fraction] | None:
    """(bytes sent within the program, bytes of the results' gathers) at ``env`` (see :func:`function_bytes`)."""
    exchange = get_step("exchange")

    def ev(d) -> int:
        return d if isinstance(d, int) else int(sym.evaluate(d, env))

    def cost(t: DTensorType, src: Placement, dst: Placement, sizes) -> Fraction:
        if (src.is_block and dst.is_strided) or (src.is_strided and dst.is_block):  # through R (legalize)
            mid = Placement.replicated(t.mesh.ndim)
            return leg(t, src, mid, sizes) + leg(t, mid, dst, sizes)
        return leg(t, src, dst, sizes)

    def leg(t: DTensorType, src: Placement, dst: Placement, sizes) -> Fraction:
        if src == dst:
            return Fraction(0)
        shape = tuple(ev(d) for d in t.shape)
        if axis_costs is not None:  # the plan legalize makes by time, timed at these sizes
            plan = plan_redistribute(t.mesh, t.ndim, src, dst, t.shape,
                                     timing_for(axis_costs, t.mesh, t.shape, dtype_bytes(t.dtype)))
            timing = Timing(axis_costs.for_mesh(t.mesh.ndim), math.prod(shape) * dtype_bytes(t.dtype))
            return plan_cost(plan, src, sizes, shape, timing)
        if src.is_strided or dst.is_strided:  # the plans between expanded forms legalize writes (docs/strided.md)
            share = strided_share(t.mesh, t.ndim, src, dst, sizes)
        else:
            share = plan_cost(plan_redistribute(t.mesh, t.ndim, src, dst, t.shape), src, sizes, shape)
        return share * math.prod(shape) * dtype_bytes(t.dtype) * math.prod(sizes)

    sent = gathers = Fraction(0)
    try:
        for (x, q), count in moves.items():
            sent += count * cost(x, x.placement, q, tuple(ev(d) for d in x.mesh.shape))
        for (x, y), count in exchanges.items():
            sizes = tuple(ev(d) for d in x.mesh.shape)
            volume = exchange.volume(tuple(ev(d) for d in x.shape), x.placement, tuple(ev(d) for d in y.shape),
                                     y.placement, sizes)
            received = volume * dtype_bytes(x.dtype)
            if axis_costs is None:
                sent += count * received
            else:  # the slowest axis it crosses, a round per peer (as the planner)
                same = len(x.shape) == len(y.shape) and all(sym.equal(a, b) for a, b in zip(x.shape, y.shape))
                link, rounds = exchange_link(x.placement, y.placement, sizes, axis_costs.for_mesh(len(sizes)), same)
                sent += count * link.seconds(rounds, Fraction(received, math.prod(sizes)))
        for calls, count in (reshapes or {}).items():
            if calls is None:
                return None
            for c in calls:
                sent += count * _collective_price(c, env, axis_costs)
        for t in results:
            whole = Placement.replicated(t.mesh.ndim)
            gathers += cost(t, Placement(tuple(Replicate() if isinstance(x, Partial) else x for x in t.placement.specs)),
                            whole, tuple(ev(d) for d in t.mesh.shape))
    except AxisCostError:
        raise
    except (DistirError, sym.SymbolicError, ZeroDivisionError):
        return None
    return sent, gathers


class _Recorder:
    """The ``lower`` a localize rule binds its helper calls with (see
    :meth:`~distir.transform.lower_to_local._Lowerer.bind`), keeping them to be priced."""

    def __init__(self) -> None:
        self.calls: list[Call] = []

    def bind(self, hint: str, call: Call) -> Var:
        self.calls.append(call)
        return Var(hint, call.type, call.span)


def _reshape_collectives(call: Call, x: DTensorType, y: DTensorType) -> tuple[Call, ...] | None:
    """The collectives lowering writes for the reshape ``call`` of ``x`` to ``y``: the reshape's own
    localize rule run on a stand-in for the worker's block, so that the regroups (their extent,
    units and group) and the gathers of minor mesh axes priced are the ones that run."""
    rec = _Recorder()
    try:
        out = call.op.localize(call, (Var("x", local_type(x), call.span),), local_type(y), rec)
    except DistirError:
        return None  # no local form: the function's bytes are not known (as where a size does not evaluate)
    return tuple(c for c in (*rec.calls, out) if isinstance(c, Call) and _sends(c))


def _sends(c: Call) -> bool:
    step = c.op.step
    return step is not None and c.op is step.local_op and step.simulate is not None


def _collective_price(c: Call, env: Mapping[str, int], axis_costs: AxisCosts | None) -> Fraction:
    """Bytes all workers receive in the local collective ``c`` at ``env``, as the simulator counts
    them: the kind's own count of one group (``group_bytes``, a regroup) or its ring formula
    (``sent``), times the groups along the other mesh axes. With ``axis_costs``, its seconds:
    the kind's rounds on its mesh axis, each worker's share of the bytes."""
    step, attrs, x = c.op.step, c.op.full_attrs(c.attrs), c.args[0].type
    if step.local_identity is not None:  # specialize drops it where it moves nothing: no bytes, no rounds
        bound = {k: sym.evaluate(v, env) if sym.is_symbolic(v) else v for k, v in c.attrs.items()}
        if step.local_identity(Call(c.op, c.args, bound, c.span)):
            return Fraction(0)
    sizes = tuple(int(sym.evaluate(d, env)) for d in attrs["device_mesh"].shape)
    axis = attrs["mesh_axis"]
    n, groups = sizes[axis], math.prod(sizes) // sizes[axis]
    if step.group_bytes is not None:
        total = Fraction(sym.evaluate(step.group_bytes(attrs, x), env)) * groups
    else:
        held = sym.evaluate(sym.mul(sym.product(x.shape), dtype_bytes(x.dtype)), env)
        out = c.type
        after = sym.evaluate(sym.mul(sym.product(out.shape), dtype_bytes(out.dtype)), env)
        num, den = step.sent(n, held, after, held)
        total = Fraction(sym.evaluate(num, env), sym.evaluate(den, env)) * n * groups
    if axis_costs is None:
        return total
    link = axis_costs.for_mesh(len(sizes))[axis]
    return link.seconds(int(sym.evaluate(step.rounds(n), env)), total / math.prod(sizes))


def _dtensor_leaves(t) -> list[DTensorType]:
    """The DTensor types in ``t``, tuples flattened in order."""
    if isinstance(t, TupleType):
        return [r for f in t.fields for r in _dtensor_leaves(f)]
    return [t] if isinstance(t, DTensorType) else []


def function_peak(func, env: Mapping[str, int]) -> int | None:
    """The peak live bytes per worker of the values ``func`` (a laid-out global-view function)
    computes, at the sizes ``env``: each call's value (its block, or whole if plain) live from its
    binding through its last reader, the result to the end; parameters and constants are not counted,
    nor the buffers inside a redistribute's steps. The estimate an alternative layout is compared by
    (auto-shard's report), at the granularity the solver's activation rows bound. None where ``env``
    does not evaluate a size."""
    bindings = list(func.bindings())
    size: dict[Var, int] = {}
    last: dict[Var, int] = {}
    alias: dict[Var, list[Var]] = {}

    def refs(e) -> list[Var]:
        if isinstance(e, Var):
            return alias.get(e, [e])
        if isinstance(e, Tuple):
            return [v for f in e.fields for v in refs(f)]
        if isinstance(e, TupleGetItem):
            return refs(e.tuple_value)
        if isinstance(e, Call):
            return [v for a in e.args for v in refs(a)]
        return []

    def held(t) -> int:
        if isinstance(t, TupleType):
            return sum(held(f) for f in t.fields)
        if isinstance(t, DTensorType):
            return int(sym.evaluate(local_bytes(t), env))
        if hasattr(t, "shape") and hasattr(t, "dtype"):
            return math.prod(int(sym.evaluate(d, env)) for d in t.shape) * dtype_bytes(t.dtype)
        return 0

    try:
        for i, b in enumerate(bindings):
            for v in refs(b.value):
                if v in size:
                    last[v] = i
            if isinstance(b.value, Call):
                size[b.var] = held(b.var.type)
                last[b.var] = i
            else:
                alias[b.var] = refs(b.value)
        for v in refs(func.result):
            if v in size:
                last[v] = len(bindings)
    except (DistirError, sym.SymbolicError, ZeroDivisionError):
        return None
    peak = live = 0
    dies: dict[int, list[Var]] = {}
    for v, i in last.items():
        dies.setdefault(i, []).append(v)
    for i, b in enumerate(bindings):
        live += size.get(b.var, 0)
        peak = max(peak, live)
        live -= sum(size[v] for v in dies.get(i, ()))
    return peak
