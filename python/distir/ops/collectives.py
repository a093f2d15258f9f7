"""The redistribution steps distir knows, each declared once as a :class:`~distir.ir.steps.StepKind`.

A step acts on ONE mesh axis of size ``n``. With ``L`` the bytes a worker holds before
the step and ``B`` the bytes of one block it exchanges (the smaller of its pieces before
and after; blocks are padded, see distir.ir.layout), the bytes each worker sends (ring
algorithms) are:

=================  ===============  =========================  ======================
step               placement change bytes sent per worker      local view
=================  ===============  =========================  ======================
all_gather         S[d] -> R        (n - 1) * B   (B = L)      R.ccl.all_gather
all_reduce         P[op] -> R       2 * (n - 1) * L / n        R.ccl.all_reduce
reduce_scatter     P[op] -> S[d]    (n - 1) * B   (B ~ L / n)  R.ccl.reduce_scatter
all_to_all         S[d] -> S[e]     (n - 1) * B   (B ~ L / n)  R.ccl.all_to_all
local_shard        R -> S[d]        0                          R.ccl.local_shard
local_partial      R -> P[op]       0                          R.ccl.local_partial
=================  ===============  =========================  ======================

``transfer`` moves a value to another mesh (pipeline stages): point-to-point pieces, see
:mod:`distir.ir.transfer` for who sends what. ``exchange`` changes a whole layout (without
partials) at once, optionally reading the elements as another shape: each worker receives
exactly the real elements of its target block it does not hold (the bound), see
:mod:`distir.ir.exchange`. ``replan`` stands for a redistribute whose cheapest steps depend on
the device count: ``specialize`` replaces it by the plan for the count it binds (see
:mod:`distir.transform.legalize_redistribute`).

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
from ..ir.combine import combine
from ..ir.exchange import check_exchange
from ..ir.exchange import gather_plan as exchange_gather_plan
from ..ir.exchange import received_total as exchange_received_total
from ..ir.expr import Call
from ..ir.mesh import DeviceMesh, Range
from ..ir.layout import (
    concrete_mesh_shape,
    concrete_placement,
    coord_expr,
    local_shape,
    local_type,
    mesh_coords,
    mesh_groups,
)
from ..ir.op import get_op
from ..ir.placement import Partial, Placement, PlacementError, Replicate, Shard
from ..ir.steps import StepKind, register_step
from ..ir.sym import Dim
from ..ir.transfer import block_bounds, check_transfer, transfer_routes
from ..ir.types import DTensorType, TensorType, shape_str
from ._common import Param, expect_tensor, norm_axis

__all__ = ["innermost", "regroup_blocks", "regroup_pieces", "regroup_received"]

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
    op = op or "sum"
    other = sorted({s.op for s in p.specs if isinstance(s, Partial)} - {op})
    if other:  # its parts would be combined in an order nothing fixes (and assembled as one reduction)
        raise PlacementError(f"{_where('local_partial', p, axis)}: the value is partial under {other[0]}; "
                             f"a value can be partial under one reduction only, not {op} too")
    return p.replace(axis, Partial(op))


# ---------------------------------------------------------------- costs: (numerator, denominator) of bytes sent


def _times(a, b):
    return sym.mul(a, b) if sym.is_symbolic(a) or sym.is_symbolic(b) else a * b


def _less_one(n):
    return sym.sub(n, 1) if sym.is_symbolic(n) else n - 1


def _ring_pieces(n, before, after, piece):
    """Every worker sends its piece to the n - 1 others (all-gather), or one piece to each (reduce-scatter, all-to-all)."""
    return _times(_less_one(n), piece), 1


def _ring_reduce(n, before, after, piece):
    return _times(_times(2, _less_one(n)), before), n


def _free(n, before, after, piece):
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


def _pad_to(x: np.ndarray, axis: int, extent: int) -> np.ndarray:
    """``x`` with zeros appended along ``axis`` up to ``extent`` (blocks of an uneven split)."""
    if x.shape[axis] >= extent:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extent - x.shape[axis])
    return np.pad(x, widths)


def _truncate(x: np.ndarray, axis: int, extent: int) -> np.ndarray:
    if x.shape[axis] == extent:
        return x
    return np.ascontiguousarray(np.take(x, np.arange(extent), axis=axis))


def _gathered_extent(attrs, piece: Dim) -> Dim:
    """The extent a gather restores: ``extent`` (the outer block), or all pieces for an even split."""
    extent = attrs.get("extent")
    return sym.mul_exact(piece, attrs["num_workers"]) if extent is None else extent


def _check_piece(op: str, piece: Dim, extent: Dim, n: Dim, what: str) -> None:
    if not sym.equal(piece, sym.ceildiv(extent, n)):
        raise TypeInferenceError(
            f"R.{op}: {what} has extent {sym.to_str(piece)}, not the block ceil({sym.to_str(extent)} / "
            f"{sym.to_str(n)}) of the extent {sym.to_str(extent)}"
        )


# all_gather: each worker gets every block, in coordinate order, padding dropped


def _all_gather_infer(types, attrs):
    x = expect_tensor(types[0], "ccl.all_gather")
    _check_axis(attrs, "ccl.all_gather")
    ax = norm_axis(attrs["axis"], x.ndim, "ccl.all_gather")
    shape = list(x.shape)
    shape[ax] = _gathered_extent(attrs, shape[ax])
    if attrs.get("extent") is not None:
        _check_piece("ccl.all_gather", x.shape[ax], shape[ax], attrs["num_workers"], f"the input's axis {ax}")
    return TensorType(tuple(shape), x.dtype)


def _all_gather_simulate(xs, attrs, env):
    out, sent = {}, 0
    axis = attrs["axis"]
    for group in _groups(attrs, env):
        full = np.concatenate([xs[w] for w in group], axis=axis)
        extent = env.dim(attrs["extent"]) if attrs.get("extent") is not None else full.shape[axis]
        full = _truncate(full, axis, extent)  # the padding of the trailing blocks
        for w in group:
            out[w] = full
            sent += (len(group) - 1) * xs[w].nbytes
    return out, sent


def _all_gather_lower(call: Call, x) -> Call:
    dim = _source_spec(call).dim
    attrs = {"num_workers": _axis_size(call), "axis": dim, "extent": local_type(call.type).shape[dim]}
    return Call(get_op("ccl.all_gather"), (x,), {**attrs, **_common_attrs(call)}, call.span)


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
        full = combine(op, np.stack([xs[w] for w in group])) if n > 1 else first
        for w in group:
            out[w] = full
    return out, sent


def _all_reduce_lower(call: Call, x) -> Call:
    return Call(get_op("ccl.all_reduce"), (x,), {"op_type": _source_spec(call).op, **_common_attrs(call)}, call.span)


# reduce_scatter: the reduced value, each worker keeping its block (the last ones padded)


def _reduce_scatter_infer(types, attrs):
    x = expect_tensor(types[0], "ccl.reduce_scatter")
    _check_axis(attrs, "ccl.reduce_scatter")
    ax = norm_axis(attrs["axis"], x.ndim, "ccl.reduce_scatter")
    shape = list(x.shape)
    shape[ax] = sym.ceildiv(shape[ax], attrs["num_workers"])
    return TensorType(tuple(shape), x.dtype)


def _reduce_scatter_simulate(xs, attrs, env):
    op, axis = attrs["op_type"], attrs["axis"]
    out, sent = {}, 0
    for group in _groups(attrs, env):
        n = len(group)
        block = -(-xs[group[0]].shape[axis] // n)
        reduced = _pad_to(combine(op, np.stack([xs[w] for w in group])), axis, n * block)
        for w, piece in zip(group, np.split(reduced, n, axis=axis)):
            out[w] = piece
            sent += (n - 1) * piece.nbytes  # each worker sends every block but its own
    return out, sent


def _reduce_scatter_lower(call: Call, x) -> Call:
    attrs = {"op_type": _source_spec(call).op, "num_workers": _axis_size(call), "axis": call.attrs["dim"]}
    return Call(get_op("ccl.reduce_scatter"), (x,), {**attrs, **_common_attrs(call)}, call.span)


# all_to_all: blocks of one dim traded for blocks of another


def _all_to_all_infer(types, attrs):
    x = expect_tensor(types[0], "ccl.all_to_all")
    _check_axis(attrs, "ccl.all_to_all")
    s = norm_axis(attrs["split_axis"], x.ndim, "ccl.all_to_all")
    c = norm_axis(attrs["concat_axis"], x.ndim, "ccl.all_to_all")
    shape = list(x.shape)
    shape[s] = sym.ceildiv(shape[s], attrs["num_workers"])
    shape[c] = _gathered_extent(attrs, shape[c])
    if attrs.get("extent") is not None:
        _check_piece("ccl.all_to_all", x.shape[c], shape[c], attrs["num_workers"], f"the input's concat_axis {c}")
    return TensorType(tuple(shape), x.dtype)


def _all_to_all_simulate(xs, attrs, env):
    s, c = attrs["split_axis"], attrs["concat_axis"]
    out, sent = {}, 0
    for group in _groups(attrs, env):
        n = len(group)
        block = -(-xs[group[0]].shape[s] // n)
        pieces = {w: np.split(_pad_to(xs[w], s, n * block), n, axis=s) for w in group}
        for j, w in enumerate(group):
            full = np.concatenate([pieces[v][j] for v in group], axis=c)
            extent = env.dim(attrs["extent"]) if attrs.get("extent") is not None else full.shape[c]
            out[w] = _truncate(full, c, extent)
        sent += sum(p.nbytes for w in group for j, p in enumerate(pieces[w]) if group[j] != w)
    return out, sent


def _all_to_all_lower(call: Call, x) -> Call:
    concat = _source_spec(call).dim
    attrs = {"num_workers": _axis_size(call), "split_axis": call.attrs["dim"], "concat_axis": concat,
             "extent": local_type(call.type).shape[concat]}
    return Call(get_op("ccl.all_to_all"), (x,), {**attrs, **_common_attrs(call)}, call.span)


# local_shard: each worker cuts its own block (the last ones padded), no communication


def _local_shard_infer(types, attrs):
    x = expect_tensor(types[0], "ccl.local_shard")
    _check_axis(attrs, "ccl.local_shard")
    ax = norm_axis(attrs["axis"], x.ndim, "ccl.local_shard")
    shape = list(x.shape)
    shape[ax] = sym.ceildiv(shape[ax], attrs["num_workers"])
    return TensorType(tuple(shape), x.dtype)


def _local_shard_numpy(xs, attrs, ctx):
    x, axis = xs[0], attrs["axis"]
    n = ctx.dim(attrs["num_workers"])
    # a worker outside the mesh (cutting a plain value everyone holds) gets some block: it is never read
    coord = min(max(ctx.dim(coord_expr(attrs["device_mesh"], attrs["mesh_axis"], ctx.worker_var)), 0), n - 1)
    block = -(-x.shape[axis] // n)
    index = [slice(None)] * x.ndim
    index[axis] = slice(coord * block, (coord + 1) * block)
    return np.ascontiguousarray(_pad_to(x, axis, n * block)[tuple(index)])


def _local_shard_lower(call: Call, x) -> Call:
    attrs = {"num_workers": _axis_size(call), "axis": call.attrs["dim"], **_common_attrs(call)}
    return Call(get_op("ccl.local_shard"), (x,), attrs, call.span)


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
            raise DistirError(f"R.ccl.transfer: {what} does not fall on whole elements (the tensor's sizes must be concrete)")
        out.append(int(b))
    return out


def _dtype_of(xs) -> np.dtype:
    return next(np.asarray(v).dtype for v in xs.values() if v is not None)


def _transfer_simulate(xs, attrs, env):
    values = env.values
    shape = [sym.evaluate(d, values) for d in attrs["shape"]]
    src_mesh, src_p = attrs["src_mesh"], attrs["src_placement"]
    dst_mesh, dst_p = attrs["dst_mesh"], attrs["dst_placement"]
    src_sizes, dst_sizes = concrete_mesh_shape(src_mesh, values), concrete_mesh_shape(dst_mesh, values)
    src_devices, dst_devices = src_mesh.device_list(values), dst_mesh.device_list(values)
    routes = transfer_routes(shape, src_sizes, src_devices, src_p, dst_sizes, dst_devices, dst_p)
    out_shape = tuple(sym.evaluate(d, values) for d in local_shape(tuple(shape), dst_mesh, dst_p))
    # every target worker gets its block, padded; a block with no real element stays all padding
    out = {d: np.zeros(out_shape, dtype=_dtype_of(xs)) for d in dst_devices}
    sent = 0
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
        out[r.dst_device][tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, d_off))] = piece
        if not r.is_local:
            sent += piece.nbytes
    return out, sent


def _transfer_bytes(attrs, x: TensorType):
    """(target workers, bytes each receives, bytes sent in all): with disjoint meshes a formula;
    meshes that share devices keep pieces in place, known only at concrete sizes."""
    from ..ir.transfer import transfer_cost_formula, transfer_volume
    from ..ir.types import dtype_bytes

    shape, size = tuple(attrs["shape"]), dtype_bytes(x.dtype)
    src, src_p, dst, dst_p = attrs["src_mesh"], attrs["src_placement"], attrs["dst_mesh"], attrs["dst_placement"]
    received = sym.mul(sym.product(local_shape(shape, dst, dst_p)), size)
    try:
        total = transfer_cost_formula(shape, size, src, src_p, dst, dst_p)
    except ValueError:
        ints = [sym.evaluate(d, {}) for d in shape]  # SymbolicError while sizes are symbolic
        total = size * transfer_volume(ints, [sym.evaluate(d, {}) for d in src.shape], _ids(src), src_p,
                                       [sym.evaluate(d, {}) for d in dst.shape], _ids(dst), dst_p)
    return dst.size, received, total


def _ids(mesh: DeviceMesh):
    """A static mesh's device ids: a ``range`` when they are one (no list of every device)."""
    ids = mesh.device_ids
    return range(sym.evaluate(ids.start, {}), sym.evaluate(ids.stop, {})) if isinstance(ids, Range) else ids


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


# regroup: the same dim re-blocked (unit-aligned blocks for a reshape that splits or merges it)


def regroup_blocks(attrs, env=None):
    """(block before, block after) of the dim: ``ceil(n / u / k) * u`` for each unit ``u``."""
    def get(v):
        return v if env is None else env.dim(v)

    n, k = get(attrs["extent"]), get(attrs["num_workers"])
    blocks = []
    for u in (get(attrs["unit_from"]), get(attrs["unit_to"])):
        if env is None:
            blocks.append(sym.mul(sym.ceildiv(sym.floordiv(n, u), k), u))
        else:
            blocks.append(-(-(n // u) // k) * u)
    return blocks


def _regroup_infer(types, attrs):
    x = expect_tensor(types[0], "ccl.regroup")
    _check_axis(attrs, "ccl.regroup")
    ax = norm_axis(attrs["axis"], x.ndim, "ccl.regroup")
    before, after = regroup_blocks(attrs)
    if not sym.equal(x.shape[ax], before):
        raise TypeInferenceError(
            f"R.ccl.regroup: the input's axis {ax} has extent {sym.to_str(x.shape[ax])}, not the block "
            f"{sym.to_str(before)} of the extent {sym.to_str(attrs['extent'])} in units of {sym.to_str(attrs['unit_from'])}"
        )
    shape = list(x.shape)
    shape[ax] = after
    return TensorType(tuple(shape), x.dtype)


def regroup_pieces(extent: int, k: int, unit_from: int, unit_to: int) -> list[tuple[int, int, int, int]]:
    """``(source, target, start, stop)``: the runs ``[start, stop)`` of the dim (global indices) that
    coordinate ``target`` receives from ``source`` in a regroup at concrete sizes. Target ``j`` needs
    the real elements of its new block ``T_j`` that its old block ``S_j`` does not hold, each from
    the one worker whose old block holds it: nothing else moves (no padding, no copy twice)."""
    before, after = regroup_blocks({"extent": extent, "num_workers": k, "unit_from": unit_from, "unit_to": unit_to})
    out = []
    for j in range(k):
        lo, hi = j * after, min((j + 1) * after, extent)
        for i in range(lo // before, (hi - 1) // before + 1) if lo < hi else ():
            if i != j:
                out.append((i, j, max(lo, i * before), min(hi, (i + 1) * before)))
    return out


def regroup_received(extent: int, k: int, unit_from: int, unit_to: int) -> int:
    """Elements of the dim all ``k`` workers of a group receive: ``sum_j |T_j \\ S_j|`` (see
    :func:`regroup_pieces`), in O(k): each real element of ``T_j`` outside ``S_j``'s overlap."""
    before, after = regroup_blocks({"extent": extent, "num_workers": k, "unit_from": unit_from, "unit_to": unit_to})
    total = 0
    for j in range(k):
        lo, hi = j * after, min((j + 1) * after, extent)
        if lo < hi:
            total += (hi - lo) - max(0, min(hi, (j + 1) * before) - max(lo, j * before))
    return total


def _regroup_simulate(xs, attrs, env):
    """Each worker keeps what its old block holds of its new one and receives the rest, run by run,
    from the worker that holds it (:func:`regroup_pieces`); padding stays zero."""
    axis = attrs["axis"]
    n = env.dim(attrs["extent"])
    before, after = regroup_blocks(attrs, env)
    out, sent = {}, 0
    for group in _groups(attrs, env):
        if before == after:
            out.update({w: xs[w] for w in group})
            continue
        k = len(group)
        moves = regroup_pieces(n, k, env.dim(attrs["unit_from"]), env.dim(attrs["unit_to"]))
        kept = [(j, j, j * after, min((j + 1) * after, (j + 1) * before, n)) for j in range(k)]
        x0 = np.asarray(xs[group[0]])
        shape = list(x0.shape)
        shape[axis] = after
        ys = [np.zeros(shape, dtype=x0.dtype) for _ in group]
        for i, j, lo, hi in kept + moves:
            lo = max(lo, j * before) if i == j else lo
            if lo >= hi:
                continue
            src, dst = [slice(None)] * x0.ndim, [slice(None)] * x0.ndim
            src[axis], dst[axis] = slice(lo - i * before, hi - i * before), slice(lo - j * after, hi - j * after)
            piece = np.asarray(xs[group[i]])[tuple(src)]
            ys[j][tuple(dst)] = piece
            if i != j:
                sent += piece.nbytes
        out.update({w: y for w, y in zip(group, ys)})
    return out, sent


def _regroup_is_identity(call) -> bool:
    before, after = regroup_blocks(call.op.full_attrs(call.attrs))
    return sym.equal(before, after)


def _regroup_bytes(attrs, x: TensorType):
    """Bytes all workers of one group receive: the real elements each lacks (``regroup_received``)
    times the elements of a row across the other dims; ``regroup_received(...)`` while sizes are
    symbolic (a sum over the workers: no closed formula), exact wherever it is evaluated."""
    from ..ir.types import dtype_bytes

    axis = attrs["axis"] % x.ndim
    row = sym.product(d for i, d in enumerate(x.shape) if i != axis)
    args = [attrs["extent"], attrs["num_workers"], attrs["unit_from"], attrs["unit_to"]]
    return sym.mul(sym.mul(sym.opaque("regroup_received", regroup_received, args), row), dtype_bytes(x.dtype))


# exchange: every worker receives exactly the pieces of its target block it lacks (see distir.ir.exchange)


def _exchange_reaches(state: Placement, target: Placement) -> tuple[Placement, ...]:
    """From a layout without partials, straight to the target (its partial axes replicated: a
    local_partial follows). A block layout (B[...]) is reached as it is. By bytes nothing more is
    needed: the straight exchange moves the least any layout change can."""
    if state.has_partial:
        return ()
    if target.is_block:
        return (target,)
    return (Placement(tuple(Replicate() if isinstance(s, Partial) else s for s in target.specs)),)


def _exchange_reaches_by_time(state: Placement, target: Placement) -> tuple[Placement, ...]:
    """By time, also a layout with one mesh axis changed (to R, or to a cut of a dim either layout
    cuts): an exchange confined to that axis's groups pays that axis's link alone, and with uneven
    blocks moves no padding where a collective on the axis would (("S[0], S[0]" -> "R, R" of 5
    elements on a (2, 2) mesh whose axis 0 is the slow one: an exchange on axis 1, then one on axis
    0, beats an all-gather on axis 1 and then the exchange)."""
    if state.has_partial or state.is_block or state.is_strided or target.is_block:
        return ()
    dims = sorted({s.dim for s in state.specs + target.specs if isinstance(s, Shard)})
    out = []
    for axis in range(len(state.specs)):
        for spec in [Replicate()] + [Shard(d) for d in dims]:
            if spec != state.specs[axis] and (one := state.replace(axis, spec)) not in out:
                out.append(one)
    return tuple(out)


def _exchange_shapes(attrs) -> tuple[tuple, tuple]:
    src = tuple(attrs["shape"])
    dst = src if attrs.get("new_shape") is None else tuple(attrs["new_shape"])
    return src, dst


def _exchange_global_infer(types, attrs):
    x = types[0]
    if not isinstance(x, DTensorType):
        raise TypeInferenceError(f"R.dist.exchange: input must be a DTensor, got {x}")
    placement = attrs["placement"]
    shape = x.shape if attrs.get("shape") is None else tuple(attrs["shape"])
    try:
        placement.validate(x.mesh.ndim, len(shape))
        check_exchange(x.placement, placement, x.shape, shape)
    except PlacementError as err:
        raise TypeInferenceError(f"R.dist.exchange: {err}") from None
    return DTensorType(shape, x.dtype, x.mesh, placement)


def _exchange_infer(types, attrs):
    x = expect_tensor(types[0], "ccl.exchange")
    src_shape, dst_shape = _exchange_shapes(attrs)
    mesh, src_p, dst_p = attrs["device_mesh"], attrs["src_placement"], attrs["dst_placement"]
    try:
        src_p.validate(mesh.ndim, len(src_shape), "src_placement")
        dst_p.validate(mesh.ndim, len(dst_shape), "dst_placement")
        check_exchange(src_p, dst_p, src_shape, dst_shape)
    except PlacementError as err:
        raise TypeInferenceError(f"R.ccl.exchange: {err}") from None
    want = local_shape(src_shape, mesh, src_p)
    if x.ndim != len(want) or not all(sym.equal(a, b) for a, b in zip(x.shape, want)):
        raise TypeInferenceError(
            f"R.ccl.exchange: the input's per-worker shape {shape_str(x.shape)} is not the block "
            f"{shape_str(want)} of a {shape_str(src_shape)} tensor laid out \"{src_p}\" on mesh {mesh.shape_str()}"
        )
    return TensorType(local_shape(dst_shape, mesh, dst_p), x.dtype)


def _exchange_concrete(attrs, values):
    src_shape, dst_shape = _exchange_shapes(attrs)
    mesh = attrs["device_mesh"]
    return ([sym.evaluate(d, values) for d in src_shape], [sym.evaluate(d, values) for d in dst_shape],
            concrete_mesh_shape(mesh, values), mesh.device_list(values))


def _exchange_simulate(xs, attrs, env):
    """Each worker keeps what it holds of its target block and takes every other element from the
    holder that agrees with it on the axes that do not cut the source (distir.ir.exchange)."""
    src_shape, dst_shape, sizes, devices = _exchange_concrete(attrs, env.values)
    src_p, dst_p = (concrete_placement(attrs[k], env.values) for k in ("src_placement", "dst_placement"))
    out_shape = tuple(local_shape(tuple(dst_shape), attrs["device_mesh"], dst_p))
    out_shape = tuple(sym.evaluate(d, env.values) for d in out_shape)
    dtype = _dtype_of(xs)
    out, sent = {}, 0
    for pos, dev in enumerate(devices):
        dst_index, source, index, block = exchange_gather_plan(src_shape, src_p, dst_shape, dst_p, sizes, pos)
        values = np.empty(source.shape, dtype=dtype)
        for s in np.unique(source):
            x = np.asarray(xs[devices[int(s)]])
            if x.shape != block:
                raise DistirError(f"R.ccl.exchange: device {devices[int(s)]} holds a block of shape {x.shape}, not {block}")
            take = source == s
            values[take] = x.reshape(-1)[index[take]]
            if int(s) != pos:
                sent += int(take.sum()) * dtype.itemsize
        y = np.zeros(out_shape, dtype=dtype)  # a block's padding holds zeros
        y.reshape(-1)[dst_index] = values
        out[dev] = y
    return out, sent


def _exchange_volume(src_shape, src, dst_shape, dst, sizes) -> int:
    return exchange_received_total(src_shape, src, dst_shape, dst, sizes)


def _exchange_bytes(attrs, x: TensorType):
    """(workers, bytes each holds before, bytes received in all). The count is a sum over the
    devices of block overlaps, piecewise in the sizes, so no closed formula gives it at every
    size: with symbolic sizes it is ``exchange_<id>(sizes...)``, a function of the mesh's and
    the tensor's sizes (:func:`distir.ir.sym.opaque`) that evaluates exactly at any sizes."""
    import hashlib

    from ..ir.types import dtype_bytes

    src_shape, dst_shape = _exchange_shapes(attrs)
    mesh, src_p, dst_p = attrs["device_mesh"], attrs["src_placement"], attrs["dst_placement"]
    size = dtype_bytes(x.dtype)
    k, a, b = mesh.ndim, len(src_shape), len(dst_shape)
    src_block = tuple(src_p.block or ())
    dst_block = tuple(dst_p.block or ())

    def count(*values):
        sizes, src, dst = values[:k], values[k : k + a], values[k + a : k + a + b]
        blocks = values[k + a + b :]
        sp = Placement.blocked(blocks[: len(src_block)]) if src_p.is_block else src_p
        dp = Placement.blocked(blocks[len(src_block) :]) if dst_p.is_block else dst_p
        return exchange_received_total(src, sp, dst, dp, sizes) * size

    # a block layout's shard sizes are arguments (they may be symbolic), so the name keeps only its kind
    def kind(p):
        return f"B{len(p.block)}" if p.is_block else str(p)

    spec = f"{k}|{a}|{b}|{kind(src_p)}|{kind(dst_p)}|{size}"
    name = "exchange_bytes_" + hashlib.sha1(spec.encode()).hexdigest()[:8]
    total = sym.opaque(name, count, [*mesh.shape, *src_shape, *dst_shape, *src_block, *dst_block])
    return mesh.size, sym.mul(sym.product(x.shape), size), total


def _exchange_lower(call: Call, x) -> Call:
    src: DTensorType = call.args[0].type
    attrs = {"shape": src.shape, "device_mesh": src.mesh, "src_placement": src.placement,
             "dst_placement": call.attrs["placement"]}  # fmt: skip
    if not _same_shape(src.shape, call.type.shape):
        attrs["new_shape"] = call.type.shape
    return Call(get_op("ccl.exchange"), (x,), attrs, call.span)


def _same_shape(a, b) -> bool:
    return len(a) == len(b) and all(sym.equal(p, q) for p, q in zip(a, b))


# replan: a redistribute planned when the mesh's sizes are bound (specialize writes its steps)


def _check_axis_costs(attrs, mesh_ndim: int, op: str) -> None:
    """The ``axis_costs`` a replan was planned with (docs/redistribute.md) must read back and fit the mesh."""
    from ..ir.axis_cost import AxisCostError, AxisCosts

    text = attrs.get("axis_costs")
    if text is None:
        return
    try:
        AxisCosts.parse(text).for_mesh(mesh_ndim)
    except AxisCostError as err:
        raise TypeInferenceError(f"R.{op}: axis_costs: {err}") from None


def _replan_global_infer(types, attrs):
    x = types[0]
    if not isinstance(x, DTensorType):
        raise TypeInferenceError(f"R.dist.replan: input must be a DTensor, got {x}")
    placement = attrs["placement"]
    shape = x.shape if attrs.get("shape") is None else tuple(attrs["shape"])
    try:
        placement.validate(x.mesh.ndim, len(shape))
        if attrs.get("mid") is not None:
            attrs["mid"].validate(x.mesh.ndim, x.ndim, "mid")
        if attrs.get("reshaped") is not None:
            attrs["reshaped"].validate(x.mesh.ndim, len(shape), "reshaped")
    except PlacementError as err:
        raise TypeInferenceError(f"R.dist.replan: {err}") from None
    if (attrs.get("shape") is None) != (attrs.get("reshaped") is None) or (attrs.get("mid") is not None and attrs.get("shape") is None):
        raise TypeInferenceError("R.dist.replan: a reshape names both `shape` and `reshaped` (and `mid` only with them)")
    if not sym.equal(sym.product(shape), sym.product(x.shape)):
        raise TypeInferenceError(f"R.dist.replan: cannot read {shape_str(x.shape)} as {shape_str(shape)}")
    _check_axis_costs(attrs, x.mesh.ndim, "dist.replan")
    return DTensorType(shape, x.dtype, x.mesh, placement)


def _replan_infer(types, attrs):
    x = expect_tensor(types[0], "ccl.replan")
    shape, mesh = tuple(attrs["shape"]), attrs["device_mesh"]
    new_shape = shape if attrs.get("new_shape") is None else tuple(attrs["new_shape"])
    src_p, dst_p = attrs["src_placement"], attrs["dst_placement"]
    try:
        src_p.validate(mesh.ndim, len(shape), "src_placement")
        dst_p.validate(mesh.ndim, len(new_shape), "dst_placement")
        if attrs.get("mid_placement") is not None:
            attrs["mid_placement"].validate(mesh.ndim, len(shape), "mid_placement")
        if attrs.get("reshaped_placement") is not None:
            attrs["reshaped_placement"].validate(mesh.ndim, len(new_shape), "reshaped_placement")
    except PlacementError as err:
        raise TypeInferenceError(f"R.ccl.replan: {err}") from None
    if (attrs.get("new_shape") is None) != (attrs.get("reshaped_placement") is None) or (
        attrs.get("mid_placement") is not None and attrs.get("new_shape") is None
    ):
        raise TypeInferenceError(
            "R.ccl.replan: a reshape names both `new_shape` and `reshaped_placement` (and `mid_placement` only with them)"
        )
    if not sym.equal(sym.product(shape), sym.product(new_shape)):
        raise TypeInferenceError(f"R.ccl.replan: cannot read {shape_str(shape)} as {shape_str(new_shape)}")
    _check_axis_costs(attrs, mesh.ndim, "ccl.replan")
    want = local_shape(shape, mesh, src_p)
    if x.ndim != len(want) or not all(sym.equal(a, b) for a, b in zip(x.shape, want)):
        raise TypeInferenceError(
            f"R.ccl.replan: the input's per-worker shape {shape_str(x.shape)} is not the block "
            f"{shape_str(want)} of a {shape_str(shape)} tensor laid out \"{src_p}\" on mesh {mesh.shape_str()}"
        )
    return TensorType(local_shape(new_shape, mesh, dst_p), x.dtype)


def _replan_simulate(xs, attrs, env):
    raise DistirError(
        "R.ccl.replan is planned when the mesh's sizes are bound: run specialize (it writes the plan's steps) "
        "before running the module"
    )


def _replan_lower(call: Call, x) -> Call:
    src: DTensorType = call.args[0].type
    attrs = {"shape": src.shape, "device_mesh": src.mesh, "src_placement": src.placement,
             "dst_placement": call.attrs["placement"]}  # fmt: skip
    if call.attrs.get("shape") is not None:
        attrs["new_shape"] = call.type.shape
        attrs["mid_placement"] = call.attrs.get("mid")
        attrs["reshaped_placement"] = call.attrs["reshaped"]
    if call.attrs.get("axis_costs") is not None:
        attrs["axis_costs"] = call.attrs["axis_costs"]
    return Call(get_op("ccl.replan"), (x,), attrs, call.span)


# ---------------------------------------------------------------- the declarations

_EMIT = "distir.tvm.relax.collectives:"

register_step(StepKind(
    name="all_gather", acts_on=Shard, change="S[d] -> R", doc="all-gather: every worker gets the whole dim",
    apply=_gather, sent=_ring_pieces, rounds=_less_one,
    lower=_all_gather_lower,
    local_params=_group_params(Param("num_workers", "dim"), Param("axis", "int", 0), Param("extent", "dim", None)),
    local_infer=_all_gather_infer, simulate=_all_gather_simulate, tvm=_EMIT + "emit_all_gather",
    local_doc="Concatenate the workers' pieces along `axis`, in mesh-coordinate order, and keep the first "
    "`extent` (dropping the padding of an uneven split).",
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
    apply=_reduce_scatter, sent=_ring_pieces, rounds=_less_one, takes_dim=True,
    lower=_reduce_scatter_lower,
    local_params=_group_params(
        Param("op_type", "choice", "sum", choices=_OP_TYPES), Param("num_workers", "dim"), Param("axis", "int", 0)
    ),
    local_infer=_reduce_scatter_infer, simulate=_reduce_scatter_simulate, tvm=_EMIT + "emit_reduce_scatter",
    local_doc="Reduce the workers' values and leave worker j with block j of `axis`.",
))  # fmt: skip
register_step(StepKind(
    name="all_to_all", acts_on=Shard, change="S[d] -> S[dim]", doc="all-to-all: trade blocks of one dim for blocks of another",
    apply=_all_to_all, sent=_ring_pieces, rounds=_less_one, takes_dim=True,
    lower=_all_to_all_lower,
    local_params=_group_params(
        Param("num_workers", "dim"), Param("split_axis", "int"), Param("concat_axis", "int"), Param("extent", "dim", None)
    ),
    local_infer=_all_to_all_infer, simulate=_all_to_all_simulate, tvm=_EMIT + "emit_all_to_all",
    local_doc="Worker j sends block k of `split_axis` to worker k; received blocks are concatenated on `concat_axis` "
    "and cut to `extent`.",
))  # fmt: skip
register_step(StepKind(
    name="local_shard", acts_on=Replicate, change="R -> S[dim]", doc="each worker slices its own block, no communication",
    apply=_local_shard, sent=_free, takes_dim=True, lower=_local_shard_lower,
    local_params=_group_params(Param("num_workers", "dim"), Param("axis", "int", 0)),
    local_infer=_local_shard_infer, local_numpy=_local_shard_numpy, tvm=_EMIT + "emit_local_shard",
    local_doc="Each worker keeps its block of `axis` (ceil(extent / num_workers) wide, the last ones padded).",
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
register_step(StepKind(
    name="regroup", change="S[d] -> S[d]",
    doc="the same layout in blocks of another unit: what a reshape that splits or merges a sharded dim needs "
    "when the count does not divide the part it keeps sharded; lowering writes it, and it moves nothing when "
    "the count divides",
    apply=None, sent=None, rounds=_less_one, group_bytes=_regroup_bytes,
    local_params=_group_params(
        Param("num_workers", "dim"), Param("axis", "int"), Param("extent", "dim"), Param("unit_from", "dim", 1),
        Param("unit_to", "dim", 1),
    ),
    local_infer=_regroup_infer, simulate=_regroup_simulate, tvm=_EMIT + "emit_regroup",
    local_identity=_regroup_is_identity,
    local_doc="Re-block `axis` (global size `extent`, cut num_workers ways) from blocks of whole units of "
    "`unit_from` elements to blocks of whole units of `unit_to`: ceil(extent / unit / num_workers) units each.",
))  # fmt: skip
register_step(StepKind(
    name="exchange", change="any layout -> any layout",
    doc="block exchange: each worker receives exactly the elements of its target block it does not hold "
    "(alltoallv / collective-permute), over the whole mesh; with `shape`, the elements are read in C order as "
    "that shape (a reshape of sharded dims). Layouts without partials",
    apply=None, sent=None, rounds=_less_one, lower=_exchange_lower, point_to_point=_exchange_bytes,
    reaches=_exchange_reaches, reaches_by_time=_exchange_reaches_by_time, volume=_exchange_volume,
    global_params=(Param("x", "tensor"), Param("placement", "placement"), Param("shape", "dims", None)),
    global_infer=_exchange_global_infer,
    local_params=(
        Param("shape", "dims"),
        Param("new_shape", "dims", None),
        Param("device_mesh", "mesh"),
        Param("src_placement", "placement"),
        Param("dst_placement", "placement"),
    ),
    local_infer=_exchange_infer, simulate=_exchange_simulate, tvm=_EMIT + "emit_exchange",
    local_doc="Each worker of `device_mesh` holds its block of a `shape` tensor laid out `src_placement`, and gets "
    "its block of the same elements read as `new_shape` (default `shape`) laid out `dst_placement`: it keeps "
    "what it holds and receives every other real element once, from the holder that agrees with it on the "
    "mesh axes that do not cut the source (see distir.ir.exchange).",
))  # fmt: skip
register_step(StepKind(
    name="replan", change="any layout -> any layout",
    doc="a redistribute whose cheapest steps depend on the device count (uneven blocks, or N-D transitions "
    "where no plan is cheapest at every count): legalize writes it on a mesh of symbolic sizes, and specialize "
    "replaces it by the plan for the count it binds (exact bytes at the concrete sizes, block exchanges included). "
    "With `shape`, it stands for the chain [redistribute to `mid`], reshape to `shape` laid out `reshaped`, "
    "redistribute to `placement`, which specialize writes as such or as one block exchange. `axis_costs` (text "
    "`AXIS=LATENCY:BANDWIDTH,...`): the mesh axes' costs it was planned with, so specialize minimizes time too",
    apply=None, sent=None, lower=_replan_lower, simulate=_replan_simulate,
    global_params=(
        Param("x", "tensor"),
        Param("placement", "placement"),
        Param("shape", "dims", None),
        Param("mid", "placement", None),
        Param("reshaped", "placement", None),
        Param("axis_costs", "str", None),
    ),
    global_infer=_replan_global_infer,
    local_params=(
        Param("shape", "dims"),
        Param("new_shape", "dims", None),
        Param("device_mesh", "mesh"),
        Param("src_placement", "placement"),
        Param("mid_placement", "placement", None),
        Param("reshaped_placement", "placement", None),
        Param("dst_placement", "placement"),
        Param("axis_costs", "str", None),
    ),
    local_infer=_replan_infer,
    local_doc="Each worker of `device_mesh` holds its block of a `shape` tensor laid out `src_placement` and gets its "
    "block laid out `dst_placement` (of the same elements read as `new_shape`, when given: the chain [redistribute to "
    "`mid_placement`], reshape laid out `reshaped_placement`, redistribute), by the steps the planner finds cheapest "
    "when the mesh's sizes are bound (by time with `axis_costs`): specialize writes them; with symbolic sizes the analysis reports its bytes as "
    "`replan_bytes_<id>(sizes...)`, exact at every size, and a symbolic TVM export runs the plan made for every count.",
))  # fmt: skip
