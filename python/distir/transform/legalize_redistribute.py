"""LegalizeRedistribute: every ``R.dist.redistribute`` becomes its cheapest steps.

Each step is a global-view op ``R.dist.<kind>`` (one per kind of :mod:`distir.ir.steps`:
``all_gather``, ``all_reduce``, ``reduce_scatter``, ``all_to_all``, ``local_shard``,
``local_partial`` ...) acting on one mesh axis and typed with DTensors, so the result stays
printable and checkable. The plan comes from
:mod:`distir.transform.redistribute_plan`; a redistribute to the same layout becomes the
value itself. A redistribute onto another mesh (pipeline stages) becomes steps on the
source mesh, one ``R.dist.transfer`` and steps on the target mesh, chosen together by
bytes sent (:func:`~distir.transform.cross_mesh_plan.plan_cross_mesh`). The pass is an
epilogue: run it again after any pass that adds redistributes; on a legalized module it
changes nothing.

**Re-planning at specialization.** On a mesh of symbolic sizes one plan serves every count,
and its cost model takes blocks to divide. Where the tensor's shape is concrete and, at some
count of :data:`~distir.transform.redistribute_plan.REPLAN_SIZES`, the exact optimum (padded collectives counted, block exchanges
included) moves fewer bytes than that plan, the redistribute becomes one
``R.dist.replan(x, placement=...)`` (lowered to ``R.ccl.replan``); ``specialize`` replaces it
by the plan for the count it binds (:func:`expand_replans`). Elsewhere the plan is written out
as before, and it is the exact optimum at every count of :data:`~distir.transform.redistribute_plan.REPLAN_SIZES`.

**Time costs.** With ``PassContext(config={"legalize-redistribute.axis_costs": ...})`` (an
:class:`~distir.ir.axis_cost.AxisCosts`, its text or a mapping from mesh axis to cost) plans
minimize estimated time instead of bytes (:class:`~distir.transform.redistribute_plan.Timing`),
and a replan records the costs in its ``axis_costs`` attribute so that specialize plans by time too.
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction
from typing import ClassVar

from ..errors import DiagnosticError, DistirError
from ..ir import sym
from ..ir.axis_cost import AxisCosts
from ..ir.expr import Binding, Block, Call, Expr, Function, IRModule, ShapeExpr, Var, leaf_vars
from ..ir.layout import expand_placement, expand_strided
from ..ir.op import get_op
from ..ir.placement import Placement, Replicate, Shard
from ..ir.steps import get_step, steps_version
from ..ir.types import DTensorType, dtype_bytes
from ..ops.manipulate import reshape_moves_data
from .pass_infra import FunctionPass, PassContext, register_pass
from .cross_mesh_plan import Transfer, plan_cross_mesh
from .redistribute_plan import (
    Timing,
    exchange_link,
    needs_replan,
    plan_cost,
    plan_redistribute,
    replan_points,
    sample_points,
    timing_for,
    without_strided,
)
from .rewrite import Env, map_bindings, substitute_expr

__all__ = ["AXIS_COSTS_KEY", "LegalizeRedistribute", "axis_costs_of", "expand_replans", "legalize_function",
           "replan_bindings"]

#: the PassContext config key of the mesh axes' time costs (read by propagation too)
AXIS_COSTS_KEY = "legalize-redistribute.axis_costs"


def axis_costs_of(ctx: PassContext) -> AxisCosts | None:
    """The axis costs the context's config gives (None: plans minimize bytes)."""
    return AxisCosts.of(ctx.config.get(AXIS_COSTS_KEY), AXIS_COSTS_KEY)


def _timing(costs: AxisCosts | None, t: DTensorType, where: str) -> Timing | None:
    """The time objective of redistributing ``t`` (None without costs)."""
    return timing_for(costs, t.mesh, t.shape, dtype_bytes(t.dtype), where)


def _step_call(step, x: Var, target_mesh, span) -> Call:
    if isinstance(step, Transfer):
        op = get_step("transfer").global_op
        return Call(op, (x,), {"device_mesh": target_mesh, "placement": step.placement}, span)
    kind = step.step_kind
    if step.whole_layout:
        return Call(kind.global_op, (x,), {"placement": step.placement}, span)
    attrs = {"mesh_axis": step.mesh_axis}
    if kind.takes_dim:
        attrs["dim"] = step.dim
    if kind.takes_op:
        attrs["op_type"] = step.op_type
    return Call(kind.global_op, (x,), attrs, span)


def _chain(attrs, dtype: str) -> Function:
    """The global-view function a replan stands for: ``x`` laid out ``src_placement``
    [redistributed to ``mid_placement``], [reshaped to ``new_shape``, laid out ``reshaped_placement``],
    redistributed to ``dst_placement``."""
    redistribute = get_op("dist.redistribute")
    shape, mesh = tuple(attrs["shape"]), attrs["device_mesh"]
    new_shape, mid, reshaped = attrs.get("new_shape"), attrs.get("mid_placement"), attrs.get("reshaped_placement")
    dst = attrs["dst_placement"]
    x = Var("x", DTensorType(shape, dtype, mesh, attrs["src_placement"]))
    bindings: list[Binding] = []
    cur = x

    def bind(name: str, t: DTensorType, call: Call) -> None:
        nonlocal cur
        cur = Var(name, t)
        bindings.append(Binding(cur, call))

    if new_shape is not None:
        if mid is not None:
            bind("a", DTensorType(shape, dtype, mesh, mid),
                 Call(redistribute, (cur,), {"device_mesh": mesh, "placement": mid}))  # fmt: skip
        new_shape = tuple(new_shape)
        rt = DTensorType(new_shape, dtype, mesh, reshaped)
        bind("r", rt, Call(get_op("reshape"), (cur, ShapeExpr(new_shape)), {}))
        if dst != reshaped:
            bind("y", DTensorType(new_shape, dtype, mesh, dst), Call(redistribute, (cur,), {"device_mesh": mesh, "placement": dst}))
    else:
        bind("y", DTensorType(shape, dtype, mesh, dst), Call(redistribute, (cur,), {"device_mesh": mesh, "placement": dst}))
    return Function("replan", (x,), (Block(tuple(bindings), True, (cur,)),), cur, cur.type)


_EXPANSIONS: dict = {}


_REPLAN_ATTRS = ("shape", "new_shape", "device_mesh", "src_placement", "mid_placement", "reshaped_placement",
                 "dst_placement", "axis_costs")


def _expansion(attrs, dtype: str) -> Function:
    """The local view of :func:`_chain`, legalized without deferring (the plan for the mesh's sizes
    when they and the shapes are concrete, else the plan made for every count); cached."""
    from .lower_to_local import LowerGlobalViewToLocalView

    key = (attrs["device_mesh"], _dims_key(attrs["shape"]), _dims_key(attrs.get("new_shape")), attrs["src_placement"],
           attrs.get("mid_placement"), attrs.get("reshaped_placement"), attrs["dst_placement"], attrs.get("axis_costs"),
           dtype, steps_version())
    hit = _EXPANSIONS.get(key)
    if hit is None:
        costs = AxisCosts.parse(attrs["axis_costs"]) if attrs.get("axis_costs") is not None else None
        legal = legalize_function(_chain(attrs, dtype), replan=False, costs=costs)
        hit = LowerGlobalViewToLocalView().transform_function(legal, IRModule({}), PassContext.current())
        if len(_EXPANSIONS) > 4096:
            _EXPANSIONS.clear()
        _EXPANSIONS[key] = hit
    return hit


def _dims_key(dims):
    return None if dims is None else tuple(sym.key(d) for d in dims)


def replan_bindings(call: Call, x: Expr, var: Var, fresh, memo: dict | None = None) -> list[Binding]:
    """The local-view bindings ``var = R.ccl.replan(x, ...)`` stands for: the plan for the mesh's
    sizes when they and the shapes are concrete (exact bytes, block exchanges included; a reshape
    as a block exchange where that moves less, as on a mesh of constant sizes), else the plan made
    for every count. The last binds ``var``; ``fresh(hint)`` names the others. ``memo``: expansions
    by the identity of the call's attribute values, for one module whose calls share them."""
    attrs = call.attrs
    dtype = x.type.dtype
    quick = None
    if memo is not None and _concrete(attrs["shape"]) and _concrete(attrs.get("new_shape") or ()):
        quick = (dtype, id(attrs["device_mesh"]), tuple(attrs["shape"]), tuple(attrs.get("new_shape") or ()),
                 *(attrs.get(k) for k in _REPLAN_ATTRS[3:]))  # fmt: skip
    f = memo.get(quick) if quick is not None else None
    if f is None:
        f = _expansion(call.op.full_attrs(attrs), dtype)
        if quick is not None:
            memo[quick] = (f, attrs["device_mesh"])  # the mesh kept alive, so its id is not reused
    else:
        f = f[0]
    if f.result.type != var.type:
        raise DistirError(f"re-planning '{var.name}': the plan's per-worker type {f.result.type} differs from {var.type}")
    env: dict = {f.params[0]: x}
    out: list[Binding] = []
    bindings = list(f.bindings())
    for k, b in enumerate(bindings):
        value = substitute_expr(b.value, env)
        v = var if k == len(bindings) - 1 and f.result is b.var else Var(fresh(f"{var.name}_{b.var.name}"), b.var.type, var.span)
        env[b.var] = v
        out.append(Binding(v, value, call.span))
    if not out or out[-1].var is not var:  # the result is the input itself, or an earlier binding
        result = substitute_expr(f.result, env)
        if result is x:
            return []
        out.append(Binding(var, result, call.span))
    return out


def expand_replans(func: Function, exact_only: bool = True, only=None) -> Function:
    """``func`` with each ``R.ccl.replan`` replaced by its steps (:func:`replan_bindings`). With
    ``exact_only`` (specialize), only those whose mesh sizes and shape are all concrete; with ``only``
    (a predicate on the call), only those it holds for."""
    op = get_step("replan").local_op
    if not any(isinstance(b.value, Call) and b.value.op is op for b in func.bindings()):
        return func
    names = {p.name for p in func.params} | {b.var.name for b in func.bindings()}
    memo: dict = {}

    def fresh(hint: str) -> str:
        name, j = hint, 0
        while name in names:
            j += 1
            name = f"{hint}_{j}"
        names.add(name)
        return name

    def rewrite(b: Binding, env: Env):
        v = b.value
        if not (isinstance(v, Call) and v.op is op):
            return None
        attrs = v.attrs
        shapes = (*attrs["shape"], *(attrs.get("new_shape") or ()))
        if exact_only and not (_concrete(shapes) and _concrete(attrs["device_mesh"].shape)):
            return None
        if only is not None and not only(v):
            return None
        out = replan_bindings(v, v.args[0], b.var, fresh, memo)
        if not out:
            env[b.var] = v.args[0]
            return []
        return out

    return map_bindings(func, rewrite)


def _uses(func: Function, reads: list[list[Var]]) -> Counter:
    """How often each var (by id) is read: by bindings (``reads``: the vars each reads, in order),
    dataflow block outputs and the result."""
    read = [id(v) for vs in reads for v in vs]
    read += [id(v) for block in func.blocks for v in block.outputs or ()]
    read += [id(v) for v in leaf_vars(func.result)]
    return Counter(read)


def _is(value, op) -> bool:
    return isinstance(value, Call) and value.op is op


def _concrete(shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def _chain_bytes(mesh, t: DTensorType, src: Placement, dst: Placement, sizes, costs: AxisCosts | None = None) -> Fraction:
    """Bytes all workers send to redistribute ``t`` (concrete shape) from ``src`` to ``dst`` with the
    plan legalize writes, at concrete mesh ``sizes`` (padded blocks counted); with ``costs``, the
    plan's seconds."""
    if src == dst:
        return Fraction(0)
    timing = _timing(costs, t, "")
    plan = plan_redistribute(mesh, t.ndim, src, dst, t.shape, timing)
    if timing is not None:
        return plan_cost(plan, src, sizes, tuple(t.shape), timing)
    volume = math.prod(t.shape) * dtype_bytes(t.dtype)
    return plan_cost(plan, src, sizes, tuple(t.shape)) * volume * math.prod(sizes)


def _exchange_cost(x: DTensorType, y: DTensorType, dst: Placement, sizes, costs: AxisCosts | None) -> Fraction:
    """Bytes all workers receive in one block exchange from ``x`` to ``y``'s shape laid out ``dst``;
    with ``costs``, its seconds (the slowest axis it crosses, a round per peer)."""
    received = get_step("exchange").volume(x.shape, x.placement, y.shape, dst, sizes) * dtype_bytes(x.dtype)
    if costs is None:
        return Fraction(received)
    link, rounds = exchange_link(x.placement, dst, sizes, costs.for_mesh(len(sizes)), same_shape=False)
    return link.seconds(rounds, Fraction(received, math.prod(sizes)))


def _exchange_pays_at(mesh, x: DTensorType, mid: Placement | None, y: DTensorType, dst: Placement, sizes,
                      concrete: bool, costs: AxisCosts | None = None) -> bool:
    """Whether at mesh ``sizes`` one block exchange moves less than the chain (with ``costs``: takes
    less time; see :func:`_exchange_pays`)."""
    exchange = _exchange_cost(x, y, dst, sizes, costs)
    a_placement = mid if mid is not None else x.placement
    chain = _chain_bytes(mesh, x, x.placement, a_placement, sizes, costs)
    chain += _chain_bytes(mesh, y, y.placement, dst, sizes, costs)
    return exchange < chain or (concrete and reshape_moves_data(x.shape, a_placement, y.shape, sizes))


def _exchange_pays(mesh, x: DTensorType, mid: Placement | None, y: DTensorType, dst: Placement,
                   costs: AxisCosts | None = None) -> bool:
    """Whether one block exchange from ``x`` to ``y``'s shape laid out ``dst`` moves less than the
    redistribute to ``mid`` (if any), the reshape, and the redistribute to ``dst``. On a concrete
    mesh: less at its size (a reshape that re-blocks there counts as moving more). With symbolic
    mesh sizes: less at every sampled size, so a symbolic program gets an exchange only where it
    is a gain at every count."""
    concrete = all(isinstance(d, int) for d in mesh.shape)
    return all(_exchange_pays_at(mesh, x, mid, y, dst, sizes, concrete, costs)
               for sizes in sample_points(tuple(mesh.shape)))


def _exchange_pays_somewhere(mesh, x: DTensorType, mid: Placement | None, y: DTensorType, dst: Placement,
                             costs: AxisCosts | None = None) -> bool:
    """Whether at some count of ``REPLAN_SIZES`` the exchange is what a mesh of those constant sizes
    would write (then specialize plans the chain for its count)."""
    return any(_exchange_pays_at(mesh, x, mid, y, dst, sizes, True, costs) for sizes in replan_points(tuple(mesh.shape)))


def fuse_reshapes(func: Function, replan: bool = True, costs: AxisCosts | None = None) -> Function:
    """``[a = redistribute(x)]; b = reshape(a); [c = redistribute(b)]`` on one mesh, the
    intermediates used nowhere else, becomes ``R.dist.exchange(x, placement=..., shape=...)``
    where that moves less (:func:`_exchange_pays`): a reshape of sharded dims planned as one
    block exchange instead of a gather, a reshape and a slice. With ``replan``, on a mesh of
    symbolic sizes where the exchange pays at some counts only, the chain becomes one
    ``R.dist.replan`` and specialize decides for its count."""
    reshape, redistribute = get_op("reshape"), get_op("dist.redistribute")
    kind = get_step("exchange")
    bindings = list(func.bindings())
    reads = [leaf_vars(b.value) for b in bindings]
    uses = _uses(func, reads)
    producer = {id(b.var): b for b in bindings}
    user = {id(v): b for b, vs in zip(bindings, reads) for v in vs}
    drop: set[int] = set()
    replace: dict[int, Binding] = {}
    for b in bindings:
        if not _is(b.value, reshape) or id(b) in drop:
            continue
        a, y = b.value.args[0], b.var.type
        if not isinstance(a.type, DTensorType) or not isinstance(y, DTensorType) or a.type.mesh != y.mesh:
            continue
        mesh = y.mesh
        pre = producer.get(id(a))
        x, mid = a, None
        if pre is not None and _is(pre.value, redistribute) and uses[id(a)] == 1:
            src = pre.value.args[0]
            if isinstance(src.type, DTensorType) and src.type.mesh == mesh:
                x, mid = src, a.type.placement
            else:
                pre = None
        else:
            pre = None
        post = user.get(id(b.var))
        if post is not None and not (uses[id(b.var)] == 1 and _is(post.value, redistribute)
                                     and post.value.attrs["device_mesh"] == mesh):  # fmt: skip
            post = None
        if any(id(z) in drop or id(z) in replace for z in (pre, b, post) if z is not None):
            continue  # part of a chain already fused
        dst = post.value.attrs["placement"] if post is not None else y.placement
        xt = x.type
        if xt.placement.has_partial or dst.has_partial or not _concrete(xt.shape) or not _concrete(y.shape):
            continue
        if xt.placement.is_block or dst.is_block or (mid is not None and mid.is_block):  # an exchange with B keeps the shape
            continue
        if any(p.is_strided for p in (xt.placement, dst, y.placement, *([mid] if mid is not None else []))):
            continue  # strided layouts move through their expanded form (split_strided)
        symbolic = not all(isinstance(d, int) for d in mesh.shape)
        out = post if post is not None else b
        if costs is not None:
            _timing(costs, xt, f"R.reshape of '{b.var.name}'")  # an axis cost beyond the mesh: one clear error
        if (pre is not None or post is not None or not symbolic) and _exchange_pays(mesh, xt, mid, y, dst, costs):
            call = Call(kind.global_op, (x,), {"placement": dst, "shape": list(y.shape)}, b.span)
        elif replan and symbolic and _exchange_pays_somewhere(mesh, xt, mid, y, dst, costs):
            attrs = {"placement": dst, "shape": list(y.shape), "mid": mid, "reshaped": y.placement}
            if costs is not None:
                attrs["axis_costs"] = str(costs)
            call = Call(get_step("replan").global_op, (x,), attrs, b.span)
        else:
            continue  # (a lone reshape on a symbolic mesh keeps its blocks at every count, docs/uneven.md)
        replace[id(out)] = Binding(out.var, call, out.span)
        drop.update(id(v) for v in (pre, b if post is not None else None) if v is not None)
    if not replace:
        return func
    return _rebuild(func, drop, replace)


def _rebuild(func: Function, drop: set[int], replace: dict[int, Binding]) -> Function:
    blocks = []
    for block in func.blocks:
        kept = []
        for b in block.bindings:
            if id(b) in drop:
                continue
            kept.append(replace.get(id(b), b))
        if kept:
            names = {id(b.var) for b in kept}
            outputs = None if block.outputs is None else tuple(v for v in block.outputs if id(v) in names)
            blocks.append(Block(tuple(kept), block.is_dataflow, outputs))
    return func.replace(blocks=tuple(blocks))


@register_pass
class LegalizeRedistribute(FunctionPass):
    """Rewrite each redistribute into per-mesh-axis collectives and local slices."""

    name: ClassVar[str] = "legalize-redistribute"

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return legalize_function(func, costs=axis_costs_of(ctx))


def split_strided(func: Function) -> Function:
    """Each redistribute from or to a strided layout (docs/strided.md) becomes reshapes into and
    out of its expanded form around redistributes between plain layouts: from ``S[d/k]``, the
    value is viewed as the expanded tensor (no data moves), redistributed there to the target
    with its strided shards replicated, and viewed back; to ``S[d/k]``, the same the other way.
    A plain layout reaches the expanded form by a reshape that splits dim ``d`` (its shard, if
    any, cuts the outer part). Between meshes a strided layout is refused."""
    redistribute, reshape = get_op("dist.redistribute"), get_op("reshape")
    names = {p.name for p in func.params} | {b.var.name for b in func.bindings()}

    def fresh(hint: str) -> str:
        name, k = hint, 1
        while name in names:
            name, k = f"{hint}_{k}", k + 1
        names.add(name)
        return name

    def rewrite(b: Binding, env: Env):
        value = b.value
        if not (isinstance(value, Call) and value.op is redistribute and isinstance(value.args[0].type, DTensorType)):
            return None
        src, dst, mesh = value.args[0].type, value.attrs["placement"], value.attrs["device_mesh"]
        if not (src.placement.is_strided or dst.is_strided):
            return None
        if src.placement == dst and mesh == src.mesh:
            env[b.var] = value.args[0]
            return []
        if mesh != src.mesh:
            raise DiagnosticError(
                f"R.dist.redistribute of '{b.var.name}': a strided layout (\"{src.placement}\" to \"{dst}\") moves "
                f"between meshes only after it is redistributed to a plain one on its own mesh", b.span)
        out: list[Binding] = []
        cur = value.args[0]

        def bind(call: Call, name: str | None = None) -> Var:
            try:
                t = call.type
            except DistirError as err:
                raise DiagnosticError(f"R.dist.redistribute of '{b.var.name}' from \"{src.placement}\" to \"{dst}\": {err}",
                                      b.span) from None
            var = b.var if name is None else Var(fresh(name), t, b.span)
            out.append(Binding(var, call, b.span))
            return var

        def via(x: Var, by: Placement, target: Placement, last: bool) -> Var:
            wide_shape, _ = expand_strided(src.shape, by)
            x = bind(Call(reshape, (x, ShapeExpr(tuple(wide_shape))), {}, b.span), f"{b.var.name}_parts")
            goal = expand_placement(target, by, src.ndim)
            if x.type.placement != goal:
                x = bind(Call(redistribute, (x,), {"device_mesh": mesh, "placement": goal}, b.span), f"{b.var.name}_moved")
            return bind(Call(reshape, (x, ShapeExpr(tuple(src.shape))), {}, b.span), None if last else f"{b.var.name}_plain")

        # a reshape carries no shard of a dim of size 1: such shards are replicated around it
        ones = {d for d, n in enumerate(src.shape) if isinstance(n, int) and n == 1}

        def whole(p: Placement) -> Placement:
            return Placement(tuple(Replicate() if isinstance(s, Shard) and s.dim in ones else s for s in p.specs))

        def move(x: Var, target: Placement, last: bool) -> Var:
            """Shards of size-1 dims replicated or restored: a plain redistribute, or, next to strided
            shards that stay, the plain plan's steps, none of which touches a strided axis or dim."""
            have = x.type.placement
            if have == target:
                return x
            name = None if last else f"{b.var.name}_whole"
            if not have.is_strided:
                return bind(Call(redistribute, (x,), {"device_mesh": mesh, "placement": target}, b.span), name)
            axes = {a for a, _ in have.strided}
            dims = {sp.dim for _, sp in have.strided}
            try:
                plan = plan_redistribute(mesh, src.ndim, without_strided(have), without_strided(target))
            except DistirError as err:
                raise DiagnosticError(f"R.dist.redistribute of '{b.var.name}' from \"{src.placement}\" to \"{dst}\": {err}",
                                      b.span) from None
            if any(step.mesh_axis in axes or step.mesh_axis < 0 or step.dim in dims for step in plan):
                raise DiagnosticError(
                    f"R.dist.redistribute of '{b.var.name}' from \"{have}\" to \"{target}\": the steps would touch a "
                    f"strided shard; redistribute through a plain layout", b.span)
            for k, step in enumerate(plan):
                x = bind(_step_call(step, x, mesh, b.span), name if k == len(plan) - 1 else f"{b.var.name}_whole")
            return x

        if src.placement.is_block:  # a block layout reaches a strided one through R (docs/strided.md)
            cur = bind(Call(redistribute, (cur,), {"device_mesh": mesh, "placement": Placement.replicated(mesh.ndim)},
                            b.span), f"{b.var.name}_whole")
            src = cur.type
        if whole(src.placement) != src.placement:
            cur = move(cur, whole(src.placement), False)
        if src.placement.is_strided:
            # to a block layout through R (its blocks are then sliced out where they lie)
            plain = Placement.replicated(mesh.ndim) if dst.is_block else without_strided(dst)
            cur = via(cur, cur.type.placement, whole(plain), not dst.is_strided and not dst.is_block and whole(plain) == plain)
            if not dst.is_strided:
                cur = move(cur, dst if dst.is_block else plain, True)
        if dst.is_strided:
            cur = via(cur, dst, whole(dst), whole(dst) == dst)
            cur = move(cur, dst, True)
        if cur.type != b.var.type:
            raise DiagnosticError(
                f"R.dist.redistribute of '{b.var.name}' from \"{src.placement}\" to \"{dst}\": the route through the "
                f"expanded form ends at \"{cur.type.placement}\"", b.span)
        if cur is not b.var:
            env[b.var] = cur
        return out

    return map_bindings(func, rewrite)


def legalize_function(func: Function, replan: bool = True, costs: AxisCosts | None = None) -> Function:
    """Legalize each redistribute of ``func``; with ``replan``, those whose plan depends on the count
    (module docstring) become ``R.dist.replan``; with ``costs``, plans minimize time."""
    redistribute = get_op("dist.redistribute")
    func = fuse_reshapes(split_strided(func), replan, costs)

    def rewrite(b: Binding, env: Env):
        value = b.value
        if not (isinstance(value, Call) and value.op is redistribute):
            return None
        x = value.args[0]
        src = x.type
        if not isinstance(src, DTensorType):
            raise DiagnosticError(
                f"R.dist.redistribute of '{b.var.name}': input must be a DTensor, got {src}", b.span
            )
        mesh, dst = value.attrs["device_mesh"], value.attrs["placement"]
        try:
            blocks = src.placement.is_block or dst.is_block  # exchanged element by element at every count already
            timing = _timing(costs, src, AXIS_COSTS_KEY) if mesh == src.mesh else None  # between meshes: bytes (docs)
            if replan and mesh == src.mesh and not blocks and needs_replan(mesh, src.ndim, src.placement, dst, src.shape,
                                                                           timing):
                attrs = {"placement": dst} if costs is None else {"placement": dst, "axis_costs": str(costs)}
                call = Call(get_step("replan").global_op, (x,), attrs, b.span)
                return [Binding(b.var, call, b.span)]
            if mesh == src.mesh:
                plan = plan_redistribute(mesh, src.ndim, src.placement, dst, src.shape, timing)
            else:
                plan = plan_cross_mesh(src.mesh, src.placement, mesh, dst, src.ndim)
        except DistirError as err:
            raise DiagnosticError(
                f"R.dist.redistribute of '{b.var.name}' from mesh {src.mesh.shape_str()} \"{src.placement}\" to "
                f"mesh {mesh.shape_str()} \"{dst}\": {err}",
                b.span,
            ) from None
        if not plan:
            env[b.var] = x
            return []
        out: list[Binding] = []
        cur = x
        for k, step in enumerate(plan):
            call = _step_call(step, cur, mesh, b.span)
            if k == len(plan) - 1:
                var = b.var
            else:
                var = Var(f"{b.var.name}_{k}", call.type, b.span)
            out.append(Binding(var, call, b.span))
            cur = var
        return out

    return map_bindings(func, rewrite)
