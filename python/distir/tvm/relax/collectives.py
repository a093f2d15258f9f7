"""The ``R.ccl.*`` collectives as calls to Disco's runtime functions.

Disco (TVM 0.27) offers ``runtime.disco.allreduce`` (sum, prod, min, max, avg),
``allgather`` (concatenates the workers' flat buffers), ``broadcast_from_worker0``,
``scatter_from_worker0``, ``gather_to_worker0`` and point-to-point send/recv; each
collective runs over all workers or within the session's groups (see
:mod:`distir.tvm.relax.session`). distir's collectives become:

- allreduce: ``runtime.disco.allreduce``;
- allgather on axis a: ``runtime.disco.allgather`` into an ``(n, *x.shape)`` buffer, then
  a permute and reshape that put the n pieces along axis a (free when a is 0);
- reduce_scatter: an allreduce, then each worker slices its block. Disco has no
  reduce-scatter; this moves 2(n-1)/n of the buffer per worker instead of (n-1)/n and
  holds the whole reduced buffer for a moment;
- all_to_all: an allgather, then each worker slices its block of the split axis from every
  piece and concatenates them. Disco has no all-to-all; this moves (n-1) times the buffer
  per worker instead of (n-1)/n of it, and holds n buffers;
- local_partial (sum): coordinate 0 keeps its value, the others multiply by zero;
- regroup (a dim re-blocked in whole units): point-to-point ``send_to_worker`` /
  ``recv_from_worker`` of exactly the runs each worker lacks (every worker takes its part of the
  transfers in one shared order, so sends that wait for their receiver, NCCL's, cannot wait in a
  cycle; run on GPUs untested here), or nothing where the blockings agree; an allgather and a
  slice where the sizes are unknown at export or the regroup sits in a dataflow block;
- exchange (a block exchange): an allgather of every worker's source storage, then each worker
  takes its target block's elements by index arithmetic (see :func:`emit_exchange`);
- transfer between two meshes (pipeline stages): an allgather over all workers, after
  which each worker rebuilds the tensor from one holder of every source block and slices
  its own target block (a partial value, which moves only between same-shaped meshes,
  takes the piece of the worker at its position on the source mesh). One SPMD program
  cannot pair Disco's point-to-point send/recv between chosen workers, so this moves every
  worker's piece to every worker: total x (source piece) bytes per worker, against the
  target's piece for point-to-point sends.

An axis whose groups Disco cannot express ("gather" in :mod:`distir.tvm.relax.session`) gathers
from all workers and takes its own group's pieces, then reduces or concatenates them. Every
form calls Disco's own collectives only (``runtime.disco.*``), which NCCL runs.
"""

from __future__ import annotations

import importlib

from tvm import relax, tirx

from ...ir import sym
from ...ir.expr import Call
from ...ir.layout import WORKER_ID, coord_expr, ids_are_contiguous, mesh_start, position_expr
from ...ir.steps import all_steps
from ...ir.types import TensorType
from .emitter import Exporter
from .session import AxisGroups, SessionPlan

__all__ = [
    "REDUCE_KIND",
    "collective_ops",
    "emit_all_gather",
    "emit_all_reduce",
    "emit_all_to_all",
    "emit_collective",
    "emit_exchange",
    "emit_local_partial",
    "emit_reduce_scatter",
    "emit_transfer",
    "needs_worker_id",
]


def collective_ops() -> frozenset[str]:
    """Names of the local-view ops of every step kind (``ccl.all_gather`` ...)."""
    return frozenset(k.local_op.name for k in all_steps().values() if k.local_op is not None)

#: Disco's ReduceKind codes (tvm/runtime/disco/builtin.h)
REDUCE_KIND = {"sum": 0, "prod": 1, "min": 2, "max": 3, "avg": 4}

_REDUCE_OP = {"sum": relax.op.sum, "max": relax.op.max, "min": relax.op.min, "avg": relax.op.mean, "prod": relax.op.prod}


def _groups(call: Call, plan: SessionPlan) -> AxisGroups:
    attrs = call.op.full_attrs(call.attrs)
    return plan.axis_groups(attrs["device_mesh"], attrs["mesh_axis"])


def needs_worker_id(call: Call, plan: SessionPlan) -> bool:
    """Does the Relax form of this collective read the worker's coordinate?"""
    step = call.op.step
    if step is None or call.op is not step.local_op:
        return False
    if step.apply is None:  # point to point between meshes
        return True
    groups = _groups(call, plan)
    if groups.kind == "single":
        return False
    if step.name in ("all_gather", "all_reduce"):
        return groups.kind == "gather"
    if step.name == "local_partial":
        return call.op.full_attrs(call.attrs)["op_type"] == "sum"
    return True  # reduce_scatter, all_to_all, and any other kind: its worker's block depends on the id


def _p(d):
    return sym.to_prim(d)


def _bool(flag: bool) -> relax.Expr:
    return relax.prim_value(tirx.IntImm("bool", int(flag)))


class _Collective:
    """Emits one collective call for an exporter."""

    def __init__(self, ex: Exporter, call: Call):
        self.ex = ex
        self.call = call
        self.attrs = call.op.full_attrs(call.attrs)
        self.mesh = self.attrs["device_mesh"]
        self.axis = self.attrs["mesh_axis"]
        self.groups = ex.plan.axis_groups(self.mesh, self.axis)
        self.x = ex.value(call.args[0])
        self.xt: TensorType = call.args[0].type
        self.out_t: TensorType = call.type

    # ------------------------------------------------------------ building blocks

    def coord(self):
        """This worker's coordinate on the mesh axis, as a symbolic int of ``worker_id``."""
        c = coord_expr(self.mesh, self.axis, sym.var(WORKER_ID))
        if not self.ex.plan.every_mesh_covers_all:
            # workers outside the mesh get an index past it; clamp so their (unused) slices stay in bounds
            c = sym.clamp(c, 0, sym.sub(self.groups.size, 1))
        return c

    def members(self) -> relax.Expr:
        """``(n, *x.shape)``: the pieces of this worker's group, in coordinate order."""
        ex, n = self.ex, self.groups.size
        shape = [_p(d) for d in ex.dims([n, *self.xt.shape])]
        if self.groups.kind in ("global", "group"):
            out = relax.TensorType(shape, self.xt.dtype)
            in_group = self.groups.kind == "group"
            return ex.emit(relax.op.call_dps_packed("runtime.disco.allgather", [self.x, _bool(in_group)], out_ty=out))
        # from every worker, then this group's members
        total = ex.plan.total
        everyone = relax.TensorType([_p(d) for d in ex.dims([total, *self.xt.shape])], self.xt.dtype)
        gathered = ex.emit(relax.op.call_dps_packed("runtime.disco.allgather", [self.x, _bool(False)], out_ty=everyone))
        return ex.emit(relax.op.take(gathered, self.member_ids(), axis=0, mode="clip"))

    def member_ids(self) -> relax.Expr:
        """``(n,)``: the worker ids of this worker's group, in coordinate order (position - c*stride + k*stride)."""
        ex, n, stride = self.ex, self.groups.size, self.groups.stride
        first = sym.sub(position_expr(self.mesh, sym.var(WORKER_ID)), sym.mul(self.coord(), stride))
        steps = ex.emit(relax.op.arange(0, ex.dim(sym.mul(n, stride)), ex.dim(stride), "int64"))
        positions = ex.emit(relax.op.add(steps, ex.scalar(first)))
        return _device_ids_at(ex, self.mesh, positions)

    def merge(self, pieces: relax.Expr, axis: int, out_t: TensorType) -> relax.Expr:
        """Concatenate the leading axis of ``(n, *y)`` into axis ``axis`` of y, then keep ``out_t``'s
        extent along it (the padding of an uneven split's trailing blocks is dropped)."""
        ex = self.ex
        ndim = out_t.ndim
        if axis != 0:
            order = list(range(1, axis + 1)) + [0] + list(range(axis + 1, ndim + 1))
            pieces = ex.emit(relax.op.permute_dims(pieces, order))
        shape = list(out_t.shape)
        merged = sym.mul(self.groups.size, self._piece_extent(axis))
        shape[axis] = merged
        whole = relax.op.reshape(pieces, relax.ShapeExpr([_p(d) for d in ex.dims(shape)]))
        return self.truncate(whole, axis, merged, out_t.shape[axis])

    def _piece_extent(self, axis: int):
        """The extent along ``axis`` of each merged piece: the input's."""
        return self.xt.shape[axis]

    def truncate(self, value: relax.Expr, axis: int, extent, keep) -> relax.Expr:
        """``value`` cut to ``keep`` along ``axis`` (it has ``extent``); unchanged when they are equal."""
        if sym.equal(extent, keep):
            return value
        value = self.ex.emit(value)
        return relax.op.strided_slice(value, axes=[axis], begin=[0], end=[self.ex.dim(keep)], assume_inbound=True)

    def pad(self, value: relax.Expr, axis: int, shape, extent) -> relax.Expr:
        """``value`` (shaped ``shape``) with zeros appended along ``axis`` up to ``extent``."""
        more = sym.sub(extent, shape[axis])
        if sym.equal(more, 0):
            return value
        zshape = list(shape)
        zshape[axis] = more
        zeros = self.ex.emit(relax.op.zeros(relax.ShapeExpr([_p(d) for d in self.ex.dims(zshape)]), self.xt.dtype))
        return self.ex.emit(relax.op.concat([self.ex.emit(value), zeros], axis=axis))

    def reduced(self, op: str) -> relax.Expr:
        ex = self.ex
        if self.groups.kind in ("global", "group"):
            args = [self.x, relax.ShapeExpr([REDUCE_KIND[op]]), _bool(self.groups.kind == "group")]
            return relax.op.call_dps_packed("runtime.disco.allreduce", args, out_ty=ex.relax_type(self.xt))
        members = self.members()
        if self.xt.dtype == "bool":  # any / all through uint8: TVM 0.27 has no max or min of bool
            wide = ex.emit(relax.op.astype(members, "uint8"))
            return relax.op.astype(ex.emit(_REDUCE_OP[op](wide, axis=0)), "bool")
        return _REDUCE_OP[op](members, axis=0)

    def own_block(self, value: relax.Expr, axis: int, piece) -> relax.Expr:
        begin = sym.mul(self.coord(), piece)
        return relax.op.strided_slice(
            value, axes=[axis], begin=[self.ex.dim(begin)], end=[self.ex.dim(sym.add(begin, piece))], assume_inbound=True
        )



def _axis_collective(emit):
    """An emitter for a collective on one mesh axis: the identity when the axis has one device."""

    def emitter(ex: Exporter, call: Call) -> relax.Expr:
        c = _Collective(ex, call)
        if c.groups.kind == "single":
            return c.x
        return emit(c)

    emitter.__doc__ = emit.__doc__
    return emitter


@_axis_collective
def emit_all_reduce(c: _Collective) -> relax.Expr:
    """Disco's allreduce."""
    return c.reduced(c.attrs["op_type"])


@_axis_collective
def emit_all_gather(c: _Collective) -> relax.Expr:
    """Disco's allgather of the group's pieces, merged along the gathered axis (padding dropped)."""
    return c.merge(c.members(), c.attrs["axis"] % c.xt.ndim, c.out_t)


@_axis_collective
def emit_reduce_scatter(c: _Collective) -> relax.Expr:
    """An allreduce, then each worker slices its block (Disco has no reduce-scatter); an uneven
    split pads the reduced value first, so the last blocks hold zeros past the end."""
    axis = c.attrs["axis"] % c.xt.ndim
    block = c.out_t.shape[axis]
    full = c.ex.emit(c.reduced(c.attrs["op_type"]))
    full = c.pad(full, axis, c.xt.shape, sym.mul(c.groups.size, block))
    return c.own_block(full, axis, block)


@_axis_collective
def emit_all_to_all(c: _Collective) -> relax.Expr:
    """An allgather, then each worker's block of the split axis from every piece (Disco has no all-to-all)."""
    split = c.attrs["split_axis"] % c.xt.ndim
    concat = c.attrs["concat_axis"] % c.xt.ndim
    block = c.out_t.shape[split]
    members = c.members()
    stacked = [c.groups.size, *c.xt.shape]
    members = c.pad(members, split + 1, stacked, sym.mul(c.groups.size, block))
    blocks = c.ex.emit(c.own_block(members, split + 1, block))
    return c.merge(blocks, concat, c.out_t)


@_axis_collective
def emit_local_shard(c: _Collective) -> relax.Expr:
    """Each worker slices its own block; an uneven split pads the value first."""
    axis = c.attrs["axis"] % c.xt.ndim
    block = c.out_t.shape[axis]
    padded = c.pad(c.x, axis, c.xt.shape, sym.mul(c.groups.size, block))
    return c.own_block(padded, axis, block)


@_axis_collective
def emit_local_partial(c: _Collective) -> relax.Expr:
    """Coordinate 0 keeps the value (sum); max, min and avg of identical copies are the value itself."""
    if c.attrs["op_type"] != "sum":
        return c.x
    keep = c.ex.emit(relax.op.equal(c.ex.scalar(c.coord()), c.ex.const(0, "int64")))
    return relax.op.where(keep, c.x, c.ex.const(0, c.xt.dtype))


@_axis_collective
def emit_regroup(c: _Collective) -> relax.Expr:
    """Nothing when the two blockings agree. Otherwise, where the group's size, the extent and the
    units are known (concrete, or at each count of :func:`~distir.transform.redistribute_plan.replan_envs`
    for a symbolic count, chosen by an ``R.If`` at run time), each worker sends the runs another lacks
    and receives the runs it lacks with Disco's ``send_to_worker`` / ``recv_from_worker``, exactly
    :func:`~distir.ops.collectives.regroup_pieces` (the bytes the simulator counts). Elsewhere, and
    inside dataflow (a plain export, which has no ``R.If``), Disco's allgather of the group's pieces
    and a slice of the new block, which moves more (``(n - 1)`` pieces per worker)."""
    from ...ops.collectives import regroup_blocks
    from ...transform.redistribute_plan import replan_envs

    attrs = c.attrs
    axis = attrs["axis"] % c.xt.ndim
    before, after = regroup_blocks(attrs)
    if sym.equal(before, after):
        return c.x

    def gather() -> relax.Expr:
        gathered = c.ex.emit(c.merge(c.members(), axis, _with_extent(c.xt, axis, attrs["extent"])))
        shape = list(c.xt.shape)
        shape[axis] = attrs["extent"]
        padded = c.pad(gathered, axis, shape, sym.mul(c.groups.size, after))
        return c.ex.emit(c.own_block(padded, axis, after))

    if c.ex.in_dataflow or not c.ex.dispatch:
        return gather()
    sizes = [attrs[k] for k in ("extent", "num_workers", "unit_from", "unit_to")]
    names = sorted(set().union(*(sym.free_vars(d) for d in [*sizes, *c.mesh.shape])))
    if not names:
        return _regroup_sends(c, axis, {})
    arms = [(tirx.EQ(_p(c.ex.dim(before)), _p(c.ex.dim(after))), lambda: c.x)]
    for env in replan_envs(c.mesh.shape):
        if set(env) == set(names):
            cond = None
            for name in names:
                eq = tirx.EQ(_p(c.ex.dim(sym.var(name))), tirx.IntImm("int64", env[name]))
                cond = eq if cond is None else tirx.And(cond, eq)
            arms.append((cond, lambda env=env: _regroup_sends(c, axis, env)))
    return c.ex.choose(arms, gather)


def _regroup_sends(c: _Collective, axis: int, env: dict) -> relax.Expr:
    """The regroup at the concrete sizes ``env`` as point-to-point sends: one ``R.If`` arm per worker of
    the mesh that sends its runs to the workers lacking them, then receives its own missing runs and
    lays out its new block (its own run and the received ones in order, padded with zeros). Every
    worker sends and receives in the one order of :func:`~distir.ops.collectives.regroup_pieces`, so
    that sends which wait for their receiver (NCCL's) cannot wait in a cycle."""
    from ...ir.layout import mesh_groups
    from ...ops.collectives import regroup_blocks, regroup_pieces

    ex, attrs = c.ex, c.attrs
    values = {k: sym.evaluate(sym.substitute(attrs[k], env), {}) for k in ("extent", "num_workers", "unit_from", "unit_to")}
    n, k = values["extent"], values["num_workers"]
    before, after = regroup_blocks(values)
    if before == after:
        return c.x
    pieces = regroup_pieces(n, k, values["unit_from"], values["unit_to"])
    shape = [sym.substitute(d, env) for d in c.xt.shape]
    out_shape = list(shape)
    out_shape[axis] = after

    def cut(value, lo, hi):
        return ex.emit(relax.op.strided_slice(value, axes=[axis], begin=[lo], end=[hi], assume_inbound=True))

    def zeros(extent):
        dims = list(shape)
        dims[axis] = extent
        return ex.emit(relax.op.zeros(relax.ShapeExpr([_p(d) for d in ex.dims(dims)]), c.xt.dtype))

    def worker(group, j):
        def build():
            runs = []
            own_lo, own_hi = j * after, min((j + 1) * after, (j + 1) * before, n)
            own_lo = max(own_lo, j * before)
            if own_lo < own_hi:
                runs.append((own_lo, cut(c.x, own_lo - j * before, own_hi - j * before)))
            # every worker takes its part of the transfers in one order, the list's: with sends that wait
            # for their receiver (NCCL's), the first transfer not yet done always has both ends at it
            for i, t, lo, hi in pieces:
                if i == j:
                    ex.emit(_disco_call("runtime.disco.send_to_worker", cut(c.x, lo - j * before, hi - j * before), group[t]))
                elif t == j:
                    buf = zeros(hi - lo)
                    ex.emit(_disco_call("runtime.disco.recv_from_worker", buf, group[i]))
                    runs.append((lo, buf))
            runs.sort(key=lambda r: r[0])
            filled = min((j + 1) * after, n) - j * after
            parts = [r for _, r in runs] + ([zeros(after - max(filled, 0))] if filled < after else [])
            return parts[0] if len(parts) == 1 else ex.emit(relax.op.concat(parts, axis=axis))

        return build

    me = _p(ex.dim(sym.var(WORKER_ID)))
    arms = [(tirx.EQ(me, tirx.IntImm("int64", w)), worker(group, j))
            for group in mesh_groups(c.mesh, c.axis, env) for j, w in enumerate(group)]
    return ex.choose(arms, lambda: zeros(after))  # a worker outside the mesh: its value is never read


def _disco_call(name: str, buffer: relax.Expr, peer: int) -> relax.Expr:
    """A call of one of Disco's point-to-point builtins (``buffer``, ``peer``'s worker id): it returns nothing."""
    return relax.Call(relax.ExternFunc(name), [buffer, relax.prim_value(tirx.IntImm("int64", peer))],
                      ty_args=[relax.ObjectType()])


def exchange_codes(placement) -> list:
    """A placement without partials as ints: 0 then one per mesh axis (-1 for R, d for S[d]); or,
    for a block layout, 1 then its shard sizes (which may be symbolic: passed at run time)."""
    from ...ir.placement import Shard

    if placement.is_block:
        return [1, *placement.block]
    return [0, *(spec.dim if isinstance(spec, Shard) else -1 for spec in placement.specs)]


class _Index:
    """Elementwise int64 arithmetic on index tensors of one exporter (sizes may be symbolic)."""

    def __init__(self, ex: Exporter):
        self.ex = ex

    def tensor(self, d):
        """A tensor as is; a size (an int or a symbolic dim, which may name the worker id) as a 0-d tensor."""
        return d if isinstance(getattr(d, "ty", None), relax.TensorType) else self.ex.scalar(d)

    _s = tensor

    def add(self, a, b):
        return self.ex.emit(relax.op.add(self._s(a), self._s(b)))

    def mul(self, a, b):
        if isinstance(b, int) and b == 1:
            return a
        return self.ex.emit(relax.op.multiply(self._s(a), self._s(b)))

    def div(self, a, b):
        if isinstance(b, int) and b == 1:
            return a
        return self.ex.emit(relax.op.floor_divide(self._s(a), self._s(b)))

    def mod(self, a, b):
        return self.ex.emit(relax.op.floor_mod(self._s(a), self._s(b)))

    def less(self, a, b):
        return self.ex.emit(relax.op.less(self._s(a), self._s(b)))

    def both(self, a, b):
        return b if a is None else self.ex.emit(relax.op.logical_and(a, b))

    def unravel(self, flat, shape) -> list:
        """The C-order coordinates of ``flat`` in ``shape``."""
        out = []
        for e in range(len(shape)):
            q = self.div(flat, sym.product(shape[e + 1 :]))
            out.append(q if e == 0 else self.mod(q, shape[e]))
        return out

    def ravel(self, coords, shape):
        """The C-order flat index of ``coords`` in ``shape`` (``coords`` may be 0-d or 1-d tensors)."""
        flat = None
        for coord, n in zip(coords, shape):
            flat = coord if flat is None else self.add(self.mul(flat, n), coord)
        return flat if flat is not None else self.ex.scalar(0)


def _exchange_target(ix: _Index, mesh, placement, shape, store, position):
    """(global C-order flat index in ``shape`` of each element of this worker's target storage
    ``store``, whether it is a real element)."""
    ex = ix.ex
    t = ex.emit(relax.op.arange(0, ex.dim(sym.product(store)), 1, "int64"))
    local = ix.unravel(t, store)
    valid = None
    if placement.is_block:
        from ...ir.layout import chunk_count, chunk_grid

        block, grid = list(placement.block), list(chunk_grid(shape, placement.block))
        chunk = ix.add(ix.mul(local[0], mesh.size), position)  # slot k holds chunk k * D + position
        valid = ix.less(chunk, chunk_count(shape, block))
        coords = []
        for e, (q, r) in enumerate(zip(ix.unravel(chunk, grid), local[1:])):
            g = ix.add(ix.mul(q, block[e]), r)
            valid = ix.both(valid, ix.less(g, shape[e]))
            coords.append(g)
        return ix.ravel(coords, shape), valid
    from ...ir.layout import block_start_expr, valid_length_expr

    coords = []
    for e, n in enumerate(shape):
        coords.append(ix.add(local[e], block_start_expr(mesh, placement, e, n)) if placement.mesh_axes_of(e) else local[e])
        if placement.mesh_axes_of(e):
            valid = ix.both(valid, ix.less(local[e], valid_length_expr(mesh, placement, e, n)))
    return ix.ravel(coords, shape), valid


def _exchange_source(ix: _Index, mesh, placement, shape, store, flat, receiver_coords):
    """(mesh position holding each element, its flat index in that position's storage ``store``):
    in a block layout its chunk's home; else, along the mesh axes cutting ``shape``, the block it
    lies in, and on the other axes the receiver's own coordinate (as distir.ir.exchange.gather_plan)."""
    coords = ix.unravel(flat, shape)
    if placement.is_block:
        from ...ir.layout import chunk_grid

        block, grid = list(placement.block), list(chunk_grid(shape, placement.block))
        chunk = ix.ravel([ix.div(h, b) for h, b in zip(coords, block)], grid)
        position = ix.mod(chunk, mesh.size)
        inner = [ix.div(chunk, mesh.size), *(ix.mod(h, b) for h, b in zip(coords, block))]
        return position, ix.ravel(inner, store)
    from ...ir.layout import level_extents

    holder = list(receiver_coords)
    offsets = []
    for d, n in enumerate(shape):
        axes = placement.mesh_axes_of(d)
        rest = coords[d]
        for ax, block in zip(axes, level_extents(n, [mesh.shape[a] for a in axes])):
            holder[ax] = ix.div(rest, block)
            rest = ix.mod(rest, block)
        offsets.append(rest)
    return ix.ravel(holder, mesh.shape), ix.ravel(offsets, store)


def emit_exchange(ex: Exporter, call: Call) -> relax.Expr:
    """A block exchange from Disco's allgather: every worker's source storage gathered from all
    workers, then each worker takes, element by element, the real elements of its target storage
    from the holder distir's simulator takes them from (:func:`distir.ir.exchange.gather_plan`),
    with index arithmetic on tensors, so sizes may stay symbolic; padding is zero. Disco's
    library has no all-to-all of worker-dependent pieces (NCCL's grouped send/recv would move
    exactly what each worker lacks), so this moves (W - 1) source pieces to every worker."""
    attrs = call.op.full_attrs(call.attrs)
    mesh = attrs["device_mesh"]
    src_shape = list(attrs["shape"])
    dst_shape = src_shape if attrs.get("new_shape") is None else list(attrs["new_shape"])
    x, xt, out_t = ex.value(call.args[0]), call.args[0].type, call.type
    ix = _Index(ex)
    worker = sym.var(WORKER_ID)
    position = _clamped(ex, position_expr(mesh, worker), sym.sub(mesh.size, 1))
    receiver = [_clamped(ex, coord_expr(mesh, a, worker), sym.sub(mesh.shape[a], 1)) for a in range(mesh.ndim)]
    flat, valid = _exchange_target(ix, mesh, attrs["dst_placement"], dst_shape, list(out_t.shape), position)
    holder, local = _exchange_source(ix, mesh, attrs["src_placement"], src_shape, list(xt.shape), flat, receiver)
    piece = sym.product(xt.shape)
    everyone = _gather_all(ex, x, xt)
    pool = ex.emit(relax.op.reshape(everyone, relax.ShapeExpr([_p(ex.dim(sym.mul(ex.plan.total, piece)))])))
    # from R (or axes that do not cut the source) the holder is the receiver itself: a size, not yet a tensor
    index = ix.add(ix.mul(_device_ids_at(ex, mesh, ix.tensor(holder)), piece), local)
    if valid is not None:
        index = ex.emit(relax.op.where(valid, index, ex.const(0, "int64")))
    values = ex.emit(relax.op.take(pool, index, axis=0, mode="clip"))
    if valid is not None:
        values = ex.emit(relax.op.where(valid, values, ex.const(0, xt.dtype)))
    return relax.op.reshape(values, relax.ShapeExpr([_p(d) for d in ex.dims(out_t.shape)]))


def _with_extent(t: TensorType, axis: int, extent) -> TensorType:
    shape = list(t.shape)
    shape[axis] = extent
    return TensorType(tuple(shape), t.dtype)


def emit_collective(ex: Exporter, call: Call) -> relax.Expr:
    """The Relax form of a step kind's local op, as its declaration names it (see distir.ir.steps)."""
    step = call.op.step
    emit = _resolve(step.tvm) if step is not None and step.tvm is not None else None
    if emit is None:
        raise ex.error(f"R.{call.op.name} has no Disco form")
    return emit(ex, call)


def _resolve(ref):
    """A callable, or ``"module:function"`` imported on first use."""
    if callable(ref):
        return ref
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def _gather_all(ex: Exporter, x: relax.Expr, xt: TensorType) -> relax.Expr:
    """``(total, *x.shape)``: every worker's value, by worker id."""
    shape = [_p(d) for d in ex.dims([ex.plan.total, *xt.shape])]
    out = relax.TensorType(shape, xt.dtype)
    return ex.emit(relax.op.call_dps_packed("runtime.disco.allgather", [x, _bool(False)], out_ty=out))


def _clamped(ex: Exporter, value, high):
    return value if ex.plan.every_mesh_covers_all else sym.clamp(value, 0, high)


def _device_ids_at(ex: Exporter, mesh, positions: relax.Expr) -> relax.Expr:
    """The device ids at the given mesh positions (an int64 tensor of any rank): the k-th listed device is at position k."""
    if ids_are_contiguous(mesh):
        return ex.emit(relax.op.add(positions, ex.scalar(mesh_start(mesh))))
    table = ex.const(list(mesh.device_ids), "int64")
    return ex.emit(relax.op.take(table, positions, axis=0, mode="clip"))


def _holders(ex: Exporter, mesh, placement, counts) -> relax.Expr:
    """Worker ids holding each block of a ``placement`` layout, as a ``(prod(counts),)`` tensor.

    Block ``(b_0, ..., b_r-1)`` lies at the mesh coordinates that shard each dim (the lower
    mesh axis the major split) and coordinate 0 on every other axis.
    """
    grid = None
    ndim = len(counts)
    for d, count in enumerate(counts):
        blocks = ex.emit(relax.op.arange(0, ex.dim(count), 1, "int64"))
        contrib = None
        inner = 1
        for axis in reversed(placement.mesh_axes_of(d)):
            size = mesh.shape[axis]
            coord = ex.emit(relax.op.floor_mod(ex.emit(relax.op.floor_divide(blocks, ex.scalar(inner))), ex.scalar(size)))
            term = ex.emit(relax.op.multiply(coord, ex.scalar(sym.product(mesh.shape[axis + 1 :]))))
            contrib = term if contrib is None else ex.emit(relax.op.add(contrib, term))
            inner = sym.mul(inner, size)
        if contrib is None:
            continue
        shape = [_p(1)] * ndim
        shape[d] = _p(ex.dim(count))
        contrib = ex.emit(relax.op.reshape(contrib, relax.ShapeExpr(shape)))
        grid = contrib if grid is None else ex.emit(relax.op.add(grid, contrib))
    if grid is None:
        grid = ex.const([0], "int64")
    positions = ex.emit(relax.op.reshape(grid, relax.ShapeExpr([_p(ex.dim(sym.product(counts)))])))
    return _device_ids_at(ex, mesh, positions)


def emit_transfer(ex: Exporter, call: Call) -> relax.Expr:
    """An allgather over all workers, then each worker rebuilds the tensor and slices its target block."""
    from ...ir.layout import block_start_expr, shard_count

    attrs = call.op.full_attrs(call.attrs)
    shape = list(attrs["shape"])
    src_mesh, src_p = attrs["src_mesh"], attrs["src_placement"]
    dst_mesh, dst_p = attrs["dst_mesh"], attrs["dst_placement"]
    x, xt, out_t = ex.value(call.args[0]), call.args[0].type, call.type
    everyone = _gather_all(ex, x, xt)
    worker = sym.var(WORKER_ID)
    if src_p.has_partial:
        # an aligned copy: the piece of the worker at this worker's position on the source mesh
        position = _clamped(ex, position_expr(dst_mesh, worker), sym.sub(dst_mesh.size, 1))
        source = _device_ids_at(ex, src_mesh, ex.scalar(position))
        return relax.op.take(everyone, source, axis=0, mode="clip")
    counts = [shard_count(src_mesh, src_p, d) for d in range(len(shape))]
    pieces = ex.emit(relax.op.take(everyone, _holders(ex, src_mesh, src_p, counts), axis=0, mode="clip"))
    grid = ex.emit(relax.op.reshape(pieces, relax.ShapeExpr([_p(d) for d in ex.dims([*counts, *xt.shape])])))
    ndim = len(shape)
    order = [i for d in range(ndim) for i in (d, ndim + d)]
    whole = ex.emit(relax.op.permute_dims(grid, order))
    # the blocks side by side: counts[d] * (padded block) along each dim
    padded = [sym.mul(c, e) for c, e in zip(counts, xt.shape)]
    whole = ex.emit(relax.op.reshape(whole, relax.ShapeExpr([_p(d) for d in ex.dims(padded)])))
    for d in range(ndim):  # the tensor itself: element g of each dim, wherever its block put it
        whole = _real_elements(ex, whole, d, shape[d], src_mesh, src_p, padded)
    # this worker's target block, the tensor padded so that the last blocks' slices stay inside it
    axes, begin, end, extent = [], [], [], list(shape)
    for d in range(ndim):
        if not dst_p.mesh_axes_of(d):
            continue
        piece = out_t.shape[d]
        reach = _block_reach(dst_mesh, dst_p, d, shape[d])
        whole = _pad_dim(ex, whole, d, extent, reach, xt.dtype)
        extent[d] = reach
        start = _clamped(ex, block_start_expr(dst_mesh, dst_p, d, shape[d]), sym.sub(reach, piece))
        axes.append(d)
        begin.append(ex.dim(start))
        end.append(ex.dim(sym.add(start, piece)))
    if not axes:
        return whole
    return relax.op.strided_slice(whole, axes=axes, begin=begin, end=end, assume_inbound=True)


def _real_elements(ex, whole, d: int, n, mesh, placement, padded) -> relax.Expr:
    """Along dim ``d``, the ``n`` real elements of blocks laid side by side (each padded): for one
    cut that is the first ``n``; nested cuts interleave padding, so element g is taken from
    ``(i1 * k2 + i2) * c2 + r`` where ``g = i1 * c1 + i2 * c2 + r`` (two axes; more nest alike)."""
    from ...ir.layout import level_extents

    axes = placement.mesh_axes_of(d)
    sizes = [mesh.shape[a] for a in axes]
    blocks = level_extents(n, sizes)
    if len(axes) <= 1 or all(sym.equal(sym.mul(k, c), prev) for k, c, prev in zip(sizes, blocks, [n, *blocks])):
        if sym.equal(padded[d], n):
            return whole
        return ex.emit(relax.op.strided_slice(whole, axes=[d], begin=[0], end=[ex.dim(n)], assume_inbound=True))
    g = ex.emit(relax.op.arange(0, ex.dim(n), 1, "int64"))
    flat, rest = None, g
    for k, c in zip(sizes, blocks):
        i = ex.emit(relax.op.floor_divide(rest, ex.scalar(c)))
        rest = ex.emit(relax.op.floor_mod(rest, ex.scalar(c)))
        flat = i if flat is None else ex.emit(relax.op.add(ex.emit(relax.op.multiply(flat, ex.scalar(k))), i))
    index = ex.emit(relax.op.add(ex.emit(relax.op.multiply(flat, ex.scalar(blocks[-1]))), rest))
    return ex.emit(relax.op.take(whole, index, axis=d, mode="clip"))


def _block_reach(mesh, placement, d: int, n):
    """How far the blocks of dim ``d`` reach, padding included: the last block's start plus its extent."""
    from ...ir.layout import level_extents

    axes = placement.mesh_axes_of(d)
    blocks = level_extents(n, [mesh.shape[a] for a in axes])
    reach = blocks[-1]
    for a, c in zip(axes, blocks):
        reach = sym.add(reach, sym.mul(sym.sub(mesh.shape[a], 1), c))
    return reach


def _pad_dim(ex, value, d: int, shape, extent, dtype) -> relax.Expr:
    more = sym.sub(extent, shape[d])
    if sym.prove_ge(0, more):
        return value
    zshape = list(shape)
    zshape[d] = more
    zeros = ex.emit(relax.op.zeros(relax.ShapeExpr([_p(x) for x in ex.dims(zshape)]), dtype))
    return ex.emit(relax.op.concat([value, zeros], axis=d))
