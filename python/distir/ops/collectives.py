"""The redistribution steps distir knows, each declared once as a :class:`~distir.ir.steps.StepKind`.

A step acts on ONE mesh axis of size ``n``. With ``L`` the bytes a worker holds before
the step, the bytes each worker sends (ring algorithms) are:

=================  ===============  =========================  ======================
step               placement change bytes sent per worker      local view
=================  ===============  =========================  ======================
all_gather         S[d] -> R        (n - 1) * L                R.ccl.all_gather
all_reduce         P[op] -> R       2 * (n - 1) * L / n        R.ccl.all_reduce
reduce_scatter     P[op] -> S[d]    (n - 1) * L / n            R.ccl.reduce_scatter
all_to_all         S[d] -> S[e]     (n - 1) * L / n            R.ccl.all_to_all
local_shard        R -> S[d]        0                          R.strided_slice
local_partial      R -> P[op]       0                          R.ccl.local_partial
=================  ===============  =========================  ======================

``transfer`` moves a value to another mesh (pipeline stages): point-to-point pieces, see
:mod:`distir.ir.transfer` for who sends what.

A tensor dim sharded over several mesh axes is split major-first in mesh-axis order, so a
step may only remove or add the innermost (highest) mesh axis of a dim: anything else would
leave a worker with non-contiguous pieces. Axes of size 1 cut nothing and do not count.

Each local collective works within the groups of workers that differ only in their
coordinate on ``mesh_axis`` of ``device_mesh``; its ``num_workers`` is that axis's size
and may be symbolic until specialization.
"""

from __future__ import annotations

import numpy as np

from ..errors import DistirError, TypeInferenceError
from ..ir import sym
from ..ir.expr import Call
from ..ir.layout import WORKER_ID, concrete_mesh_shape, coord_expr, local_shape, local_type, mesh_coords, mesh_groups
from ..ir.op import get_op
from ..ir.placement import Partial, Placement, PlacementError, Replicate, Shard
from ..ir.steps import StepKind, register_step
from ..ir.transfer import block_bounds, check_transfer, transfer_routes
from ..ir.types import DTensorType, TensorType, shape_str
from ._common import Param, expect_tensor, norm_axis

__all__ = ["innermost"]

_REDUCE = {"sum": np.add, "max": np.maximum, "min": np.minimum, "avg": np.add}
_OP_TYPES = ("sum", "max", "min", "avg")


# ---------------------------------------------------------------- placement changes


def _is_one(size) -> bool:
    return isinstance(size, int) and size == 1


def innermost(placement: Placement, dim: int, axis: int, mesh_shape=None) -> bool:
    """True when no mesh axis after ``axis`` shards ``dim`` (so ``axis`` may add or drop it).

    Axes of size 1 do not count: cutting a dim into one piece changes no block, so a step on
    such an axis, or past one, leaves every worker's block contiguous."""
    if mesh_shape is not None and _is_one(mesh_shape[axis]):
        return True
    axes = [a for a in placement.mesh_axes_of(dim) if a != axis]
    if mesh_shape is not None:
        axes = [a for a in axes if not _is_one(mesh_shape[a])]
    return all(a < axis for a in axes)


def _where(kind: str, placement: Placement, axis: int) -> str:
    return f"{kind} on mesh axis {axis} of \"{placement}\""


def _spec(kind: str, placement: Placement, axis: int, want: type):
    if not 0 <= axis < len(placement):
        raise PlacementError(f"{kind}: mesh axis {axis} is out of range for placement \"{placement}\"")
    spec = placement[axis]
    if not isinstance(spec, want):
        need = {Shard: "S[d]", Partial: "P", Replicate: "R"}[want]
        raise PlacementError(f"{_where(kind, placement, axis)}: needs {need} on that axis, found {spec}")
    return spec


def _gather(p, axis, dim, op, ms):
    spec = _spec("all_gather", p, axis, Shard)
    if not innermost(p, spec.dim, axis, ms):
        raise PlacementError(
            f"{_where('all_gather', p, axis)}: dim {spec.dim} is also sharded on a later mesh axis; gather that one first"
        )
    return p.replace(axis, Replicate())


def _reduce_all(p, axis, dim, op, ms):
    _spec("all_reduce", p, axis, Partial)
    return p.replace(axis, Replicate())


def _reduce_scatter(p, axis, dim, op, ms):
    _spec("reduce_scatter", p, axis, Partial)
    if dim is None or not innermost(p, dim, axis, ms):
        raise PlacementError(f"{_where('reduce_scatter', p, axis)}: dim {dim} is already sharded on a later mesh axis")
    return p.replace(axis, Shard(dim))


def _all_to_all(p, axis, dim, op, ms):
    spec = _spec("all_to_all", p, axis, Shard)
    if dim is None or dim == spec.dim:
        raise PlacementError(f"{_where('all_to_all', p, axis)}: needs a different target dim, got {dim}")
    if not innermost(p, spec.dim, axis, ms) or not innermost(p, dim, axis, ms):
        raise PlacementError(
            f"{_where('all_to_all', p, axis)}: the mesh axis is not the innermost for dim {spec.dim} or dim {dim}"
        )
    return p.replace(axis, Shard(dim))


def _local_shard(p, axis, dim, op, ms):
    _spec("local_shard", p, axis, Replicate)
    if dim is None or not innermost(p, dim, axis, ms):
        raise PlacementError(f"{_where('local_shard', p, axis)}: dim {dim} is already sharded on a later mesh axis")
    return p.replace(axis, Shard(dim))


def _local_partial(p, axis, dim, op, ms):
    _spec("local_partial", p, axis, Replicate)
    return p.replace(axis, Partial(op or "sum"))


# ---------------------------------------------------------------- costs: (numerator, denominator) of bytes sent


def _times(a, b):
    return sym.mul(a, b) if sym.is_symbolic(a) or sym.is_symbolic(b) else a * b


def _less_one(n):
    return sym.sub(n, 1) if sym.is_symbolic(n) else n - 1


def _ring_all(n, before, after):
    return _times(_less_one(n), before), 1


def _ring_part(n, before, after):
    return _times(_less_one(n), before), n


def _ring_reduce(n, before, after):
    return _times(_times(2, _less_one(n)), before), n


def _free(n, before, after):
    return 0, 1


# ---------------------------------------------------------------- local views and the simulator


def _group_params(*extra: Param) -> tuple[Param, ...]:
    return extra + (Param("device_mesh", "mesh"), Param("mesh_axis", "int"))


def _check_axis(attrs, op):
    mesh = attrs["device_mesh"]
    if not 0 <= attrs["mesh_axis"] < mesh.ndim:
        raise TypeInferenceError(f"R.{op}: mesh_axis {attrs['mesh_axis']} is out of range for a {mesh.ndim}-D mesh")
    if "num_workers" in attrs and not sym.equal(attrs["num_workers"], mesh.shape[attrs["mesh_axis"]]):
        raise TypeInferenceError(
            f"R.{op}: num_workers={sym.to_str(attrs['num_workers'])} differs from the size "
            f"{sym.to_str(mesh.shape[attrs['mesh_axis']])} of mesh axis {attrs['mesh_axis']}"
        )


def _groups(attrs, env):
    return mesh_groups(attrs["device_mesh"], attrs["mesh_axis"], env.values)


def _reduce_stack(op: str, stacked: np.ndarray) -> np.ndarray:
    """The reduction of the arrays stacked on axis 0, added in worker order, in the arrays' dtype."""
    out = np.asarray(_REDUCE[op].reduce(stacked, axis=0))  # an array, also for 0-d values
    if op == "avg":
        out = out / len(stacked)
    return out.astype(stacked.dtype, copy=False)


def _exchange(xs, group, axis):
    """Each worker cuts its value into one block per peer along ``axis``; block j goes to
    worker j. Returns the blocks and the bytes sent (every block but a worker's own)."""
    pieces = {w: np.split(xs[w], len(group), axis=axis) for w in group}
    sent = sum(p.nbytes for w in group for j, p in enumerate(pieces[w]) if group[j] != w)
    return pieces, sent


def _same_type_infer(name: str):
    def infer(types, attrs):
        x = expect_tensor(types[0], name)
        _check_axis(attrs, name)
        return x

    return infer


def _common_attrs(call: Call) -> dict:
    src: DTensorType = call.args[0].type
    return {"device_mesh": src.mesh, "mesh_axis": call.attrs["mesh_axis"]}


def _axis_size(call: Call):
    return call.args[0].type.mesh.shape[call.attrs["mesh_axis"]]


def _source_spec(call: Call):
    return call.args[0].type.placement[call.attrs["mesh_axis"]]


# all_gather


def _all_gather_infer(types, attrs):
    x = expect_tensor(types[0], "ccl.all_gather")
    _check_axis(attrs, "ccl.all_gather")
    ax = norm_axis(attrs["axis"], x.ndim, "ccl.all_gather")
    shape = list(x.shape)
    shape[ax] = sym.mul_exact(shape[ax], attrs["num_workers"])
    return TensorType(tuple(shape), x.dtype)


def _all_gather_simulate(xs, attrs, env):
    out, sent = {}, 0
    for group in _groups(attrs, env):
        full = np.concatenate([xs[w] for w in group], axis=attrs["axis"])
        for w in group:
            out[w] = full
            sent += (len(group) - 1) * xs[w].nbytes
    return out, sent


def _all_gather_lower(call: Call, x) -> Call:
    attrs = {"num_workers": _axis_size(call), "axis": _source_spec(call).dim, **_common_attrs(call)}
    return Call(get_op("ccl.all_gather"), (x,), attrs, call.span)


# all_reduce


def _all_reduce_simulate(xs, attrs, env):
    """Ring all-reduce: a reduce-scatter of the flattened buffer, then an all-gather."""
    op = attrs["op_type"]
    out, sent = {}, 0
    for group in _groups(attrs, env):
        n, first = len(group), xs[group[0]]
        # each chunk of the ring: every worker but its owner sends its piece, then the owner
        # sends the reduced chunk to the n - 1 others; the chunks cover the buffer once
        sent += 2 * (n - 1) * first.nbytes
        # reducing the whole stack adds in worker order, as the chunks of the ring do
        full = _reduce_stack(op, np.stack([xs[w] for w in group])) if n > 1 else first
        for w in group:
            out[w] = full
    return out, sent


def _all_reduce_lower(call: Call, x) -> Call:
    return Call(get_op("ccl.all_reduce"), (x,), {"op_type": _source_spec(call).op, **_common_attrs(call)}, call.span)


# reduce_scatter


def _reduce_scatter_infer(types, attrs):
    x = expect_tensor(types[0], "ccl.reduce_scatter")
    _check_axis(attrs, "ccl.reduce_scatter")
    ax = norm_axis(attrs["axis"], x.ndim, "ccl.reduce_scatter")
    shape = list(x.shape)
    shape[ax] = sym.floordiv(shape[ax], attrs["num_workers"])
    return TensorType(tuple(shape), x.dtype)


def _reduce_scatter_simulate(xs, attrs, env):
    op, axis = attrs["op_type"], attrs["axis"]
    out, sent = {}, 0
    for group in _groups(attrs, env):
        n = len(group)
        blocks = np.split(_reduce_stack(op, np.stack([xs[w] for w in group])), n, axis=axis)
        for w, block in zip(group, blocks):
            out[w] = block
        sent += (n - 1) * xs[group[0]].nbytes  # each worker sends all blocks but its own
    return out, sent


def _reduce_scatter_lower(call: Call, x) -> Call:
    attrs = {"op_type": _source_spec(call).op, "num_workers": _axis_size(call), "axis": call.attrs["dim"]}
    return Call(get_op("ccl.reduce_scatter"), (x,), {**attrs, **_common_attrs(call)}, call.span)


# all_to_all


def _all_to_all_infer(types, attrs):
    x = expect_tensor(types[0], "ccl.all_to_all")
    _check_axis(attrs, "ccl.all_to_all")
    s = norm_axis(attrs["split_axis"], x.ndim, "ccl.all_to_all")
    c = norm_axis(attrs["concat_axis"], x.ndim, "ccl.all_to_all")
    shape = list(x.shape)
    shape[s] = sym.floordiv(shape[s], attrs["num_workers"])
    shape[c] = sym.mul_exact(shape[c], attrs["num_workers"])
    return TensorType(tuple(shape), x.dtype)


def _all_to_all_simulate(xs, attrs, env):
    s, c = attrs["split_axis"], attrs["concat_axis"]
    out, sent = {}, 0
    for group in _groups(attrs, env):
        pieces, group_sent = _exchange(xs, group, s)
        for j, w in enumerate(group):
            out[w] = np.concatenate([pieces[v][j] for v in group], axis=c)
        sent += group_sent
    return out, sent


def _all_to_all_lower(call: Call, x) -> Call:
    attrs = {"num_workers": _axis_size(call), "split_axis": call.attrs["dim"], "concat_axis": _source_spec(call).dim}
    return Call(get_op("ccl.all_to_all"), (x,), {**attrs, **_common_attrs(call)}, call.span)


# local_shard: each worker slices its own block, no communication


def _local_shard_lower(call: Call, x) -> Call:
    mesh, axis, dim = call.args[0].type.mesh, call.attrs["mesh_axis"], call.attrs["dim"]
    piece = local_type(call.type).shape[dim]
    begin = sym.mul(coord_expr(mesh, axis, sym.var(WORKER_ID)), piece)
    attrs = {"axes": (dim,), "begin": (begin,), "end": (sym.add(begin, piece),), "assume_inbound": True}
    return Call(get_op("strided_slice"), (x,), attrs, call.span)


# local_partial: coordinate 0 keeps the value (sum), the others hold zeros


def _local_partial_numpy(xs, attrs, ctx):
    x = xs[0]
    if attrs["op_type"] != "sum":
        return x
    coord = ctx.dim(coord_expr(attrs["device_mesh"], attrs["mesh_axis"], ctx.worker_var))
    return x if coord == 0 else np.zeros_like(x)


def _local_partial_lower(call: Call, x) -> Call:
    return Call(get_op("ccl.local_partial"), (x,), {"op_type": call.attrs["op_type"], **_common_attrs(call)}, call.span)


# transfer between meshes


def _transfer_global_infer(types, attrs):
    x = types[0]
    if not isinstance(x, DTensorType):
        raise TypeInferenceError(f"R.dist.transfer: input must be a DTensor, got {x}")
    mesh, placement = attrs["device_mesh"], attrs["placement"]
    try:
        placement.validate(mesh.ndim, x.ndim)
        check_transfer(x.mesh, x.placement, mesh, placement)
    except PlacementError as err:
        raise TypeInferenceError(f"R.dist.transfer: {err}") from None
    return DTensorType(x.shape, x.dtype, mesh, placement)


def _transfer_infer(types, attrs):
    x = expect_tensor(types[0], "ccl.transfer")
    shape = tuple(attrs["shape"])
    src_mesh, src_p = attrs["src_mesh"], attrs["src_placement"]
    dst_mesh, dst_p = attrs["dst_mesh"], attrs["dst_placement"]
    try:
        src_p.validate(src_mesh.ndim, len(shape), "src_placement")
        dst_p.validate(dst_mesh.ndim, len(shape), "dst_placement")
        check_transfer(src_mesh, src_p, dst_mesh, dst_p)
    except PlacementError as err:
        raise TypeInferenceError(f"R.ccl.transfer: {err}") from None
    want = local_shape(shape, src_mesh, src_p)
    if x.ndim != len(want) or not all(sym.equal(a, b) for a, b in zip(x.shape, want)):
        raise TypeInferenceError(
            f"R.ccl.transfer: the input's per-worker shape {shape_str(x.shape)} is not the piece "
            f"{shape_str(want)} of a {shape_str(shape)} tensor laid out \"{src_p}\" on mesh {src_mesh.shape_str()}"
        )
    return TensorType(local_shape(shape, dst_mesh, dst_p), x.dtype)


def _integral(bounds, what: str) -> list[int]:
    out = []
    for b in bounds:
        if b.denominator != 1:
            raise DistirError(f"R.ccl.transfer: {what} does not fall on whole elements; the mesh sizes must divide the dims")
        out.append(int(b))
    return out


def _transfer_simulate(xs, attrs, env):
    values = env.values
    shape = [sym.evaluate(d, values) for d in attrs["shape"]]
    src_mesh, src_p = attrs["src_mesh"], attrs["src_placement"]
    dst_mesh, dst_p = attrs["dst_mesh"], attrs["dst_placement"]
    src_sizes, dst_sizes = concrete_mesh_shape(src_mesh, values), concrete_mesh_shape(dst_mesh, values)
    src_devices, dst_devices = src_mesh.device_list(values), dst_mesh.device_list(values)
    routes = transfer_routes(shape, src_sizes, src_devices, src_p, dst_sizes, dst_devices, dst_p)
    out_shape = tuple(sym.evaluate(d, values) for d in local_shape(tuple(shape), dst_mesh, dst_p))
    out, sent = {}, 0
    for r in routes:
        x = xs.get(r.src_device)
        if x is None:
            raise DistirError(f"R.ccl.transfer: source device {r.src_device} holds no value to send")
        s_lo = [lo for lo, _ in block_bounds(shape, src_p, mesh_coords(r.src, src_sizes), src_sizes)]
        d_lo = [lo for lo, _ in block_bounds(shape, dst_p, mesh_coords(r.dst, dst_sizes), dst_sizes)]
        lo = _integral([b for b, _ in r.bounds], "a piece")
        hi = _integral([b for _, b in r.bounds], "a piece")
        s_off, d_off = _integral(s_lo, "a source block"), _integral(d_lo, "a target block")
        piece = x[tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, s_off))]
        buf = out.get(r.dst_device)
        if buf is None:
            buf = out[r.dst_device] = np.empty(out_shape, dtype=x.dtype)
        buf[tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, d_off))] = piece
        if not r.is_local:
            sent += piece.nbytes
    return out, sent


def _transfer_bytes(attrs, x: TensorType):
    """(target workers, bytes each receives, bytes sent in all): with disjoint meshes a formula;
    meshes that share devices keep pieces in place, known only at concrete sizes."""
    from ..ir.transfer import route_bytes, transfer_cost_formula
    from ..ir.types import dtype_bytes

    shape, size = tuple(attrs["shape"]), dtype_bytes(x.dtype)
    src, src_p, dst, dst_p = attrs["src_mesh"], attrs["src_placement"], attrs["dst_mesh"], attrs["dst_placement"]
    received = sym.mul(sym.product(local_shape(shape, dst, dst_p)), size)
    try:
        total = transfer_cost_formula(shape, size, src, src_p, dst, dst_p)
    except ValueError:
        ints = [sym.evaluate(d, {}) for d in shape]  # SymbolicError while sizes are symbolic
        routes = transfer_routes(ints, [sym.evaluate(d, {}) for d in src.shape], src.device_list(), src_p,
                                 [sym.evaluate(d, {}) for d in dst.shape], dst.device_list(), dst_p)
        total = int(route_bytes(routes)) * size
    return dst.size, received, total


def _transfer_lower(call: Call, x) -> Call:
    src: DTensorType = call.args[0].type
    attrs = {
        "shape": src.shape,
        "src_mesh": src.mesh,
        "src_placement": src.placement,
        "dst_mesh": call.attrs["device_mesh"],
        "dst_placement": call.attrs["placement"],
    }
    return Call(get_op("ccl.transfer"), (x,), attrs, call.span)


# ---------------------------------------------------------------- the declarations

_EMIT = "distir.tvm.collectives:"

register_step(StepKind(
    name="all_gather", acts_on=Shard, change="S[d] -> R", doc="all-gather: every worker gets the whole dim",
    apply=_gather, sent=_ring_all, rounds=_less_one,
    lower=_all_gather_lower,
    local_params=_group_params(Param("num_workers", "dim"), Param("axis", "int", 0)),
    local_infer=_all_gather_infer, simulate=_all_gather_simulate, tvm=_EMIT + "emit_all_gather",
    local_doc="Concatenate the workers' pieces along `axis`, in mesh-coordinate order.",
))  # fmt: skip
register_step(StepKind(
    name="all_reduce", acts_on=Partial, change="P[op] -> R", doc="all-reduce by the partial's reduction",
    apply=_reduce_all, sent=_ring_reduce, rounds=lambda n: _times(2, _less_one(n)),
    lower=_all_reduce_lower,
    local_params=_group_params(Param("op_type", "choice", "sum", choices=_OP_TYPES)),
    local_infer=_same_type_infer("ccl.all_reduce"), simulate=_all_reduce_simulate, tvm=_EMIT + "emit_all_reduce",
    local_doc="Reduce the workers' values (sum, max, min or avg); every worker gets the result.",
))  # fmt: skip
register_step(StepKind(
    name="reduce_scatter", acts_on=Partial, change="P[op] -> S[dim]", doc="reduce-scatter: each worker keeps its reduced block",
    apply=_reduce_scatter, sent=_ring_part, rounds=_less_one, takes_dim=True,
    lower=_reduce_scatter_lower,
    local_params=_group_params(
        Param("op_type", "choice", "sum", choices=_OP_TYPES), Param("num_workers", "dim"), Param("axis", "int", 0)
    ),
    local_infer=_reduce_scatter_infer, simulate=_reduce_scatter_simulate, tvm=_EMIT + "emit_reduce_scatter",
    local_doc="Reduce the workers' values and leave worker j with block j of `axis`.",
))  # fmt: skip
register_step(StepKind(
    name="all_to_all", acts_on=Shard, change="S[d] -> S[dim]", doc="all-to-all: trade blocks of one dim for blocks of another",
    apply=_all_to_all, sent=_ring_part, rounds=_less_one, takes_dim=True,
    lower=_all_to_all_lower,
    local_params=_group_params(Param("num_workers", "dim"), Param("split_axis", "int"), Param("concat_axis", "int")),
    local_infer=_all_to_all_infer, simulate=_all_to_all_simulate, tvm=_EMIT + "emit_all_to_all",
    local_doc="Worker j sends block k of `split_axis` to worker k; received blocks are concatenated on `concat_axis`.",
))  # fmt: skip
register_step(StepKind(
    name="local_shard", acts_on=Replicate, change="R -> S[dim]", doc="each worker slices its own block, no communication",
    apply=_local_shard, sent=_free, takes_dim=True, lower=_local_shard_lower,
))  # fmt: skip
register_step(StepKind(
    name="local_partial", acts_on=Replicate, change="R -> P[op]",
    doc="no communication (for sum, workers off coordinate 0 hold zeros)",
    apply=_local_partial, sent=_free, takes_op=True, lower=_local_partial_lower,
    local_params=_group_params(Param("op_type", "choice", "sum", choices=_OP_TYPES)),
    local_infer=_same_type_infer("ccl.local_partial"), local_numpy=_local_partial_numpy,
    tvm=_EMIT + "emit_local_partial",
    local_doc="Turn a replicated value into a partial one without communication: for sum, only coordinate 0 keeps it.",
))  # fmt: skip
register_step(StepKind(
    name="transfer", change="mesh A -> mesh B",
    doc="move a DTensor to another mesh (pipeline stages), laid out there as `placement`: point-to-point "
    "pieces, each target worker receiving its block once; a partial value only as an aligned copy "
    "between meshes of the same shape",
    apply=None, sent=None, rounds=lambda n: 1, lower=_transfer_lower, point_to_point=_transfer_bytes,
    global_params=(Param("x", "tensor"), Param("device_mesh", "mesh"), Param("placement", "placement")),
    global_infer=_transfer_global_infer,
    local_params=(
        Param("shape", "dims"),
        Param("src_mesh", "mesh"),
        Param("src_placement", "placement"),
        Param("dst_mesh", "mesh"),
        Param("dst_placement", "placement"),
    ),
    local_infer=_transfer_infer, simulate=_transfer_simulate, tvm=_EMIT + "emit_transfer",
    local_doc="Point-to-point sends from the workers of `src_mesh` to those of `dst_mesh`: each target worker "
    "receives its block of the `shape` tensor laid out `dst_placement`, cut from the `src_placement` pieces "
    "(see distir.ir.transfer for who sends what). Workers of `src_mesh` only send; only workers of "
    "`dst_mesh` hold the result.",
))  # fmt: skip
