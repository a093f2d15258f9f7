"""Local-view collectives: what one worker calls to talk to the others on a mesh axis.

Each op works within the groups of workers that differ only in their coordinate on
``mesh_axis`` of ``device_mesh``; ``num_workers`` is that axis's size and may be
symbolic until specialization. ``R.ccl.transfer`` is the exception: point-to-point sends
between two meshes (``src_mesh`` -> ``dst_mesh``), with no mesh axis. Besides type
inference, each op declares ``extra["spmd"]``: the collective itself over all simulated
workers, ``spmd(inputs by device, full attrs, context) -> (outputs by device, bytes sent
summed over workers)``; a device absent from the outputs holds no value afterwards. And
``extra["collective"]`` names its kind for the byte counts.
"""

from __future__ import annotations

import numpy as np

from ..errors import DistirError, TypeInferenceError
from ..ir import sym
from ..ir.layout import concrete_mesh_shape, coord_expr, local_shape, mesh_coords, mesh_groups
from ..ir.placement import PlacementError
from ..ir.transfer import block_bounds, check_transfer, transfer_routes
from ..ir.types import TensorType, shape_str
from ._common import OpDef, Param, expect_tensor, norm_axis, register_op

_REDUCE = {"sum": np.add, "max": np.maximum, "min": np.minimum, "avg": np.add}
_OP_TYPES = ("sum", "max", "min", "avg")


def _reduce(op: str, arrays):
    out = arrays[0].copy()
    for a in arrays[1:]:
        out = _REDUCE[op](out, a)
    if op == "avg":
        out = out / len(arrays)
    return out.astype(arrays[0].dtype, copy=False)


def _group_params(*extra: Param) -> tuple[Param, ...]:
    return (Param("x", "tensor"),) + extra + (Param("device_mesh", "mesh"), Param("mesh_axis", "int"))


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


def _exchange(xs, group, axis):
    """Each worker cuts its value into one block per peer along ``axis``; block j goes to
    worker j. Returns the blocks and the bytes sent (every block but a worker's own)."""
    pieces = {w: np.split(xs[w], len(group), axis=axis) for w in group}
    sent = sum(p.nbytes for w in group for j, p in enumerate(pieces[w]) if group[j] != w)
    return pieces, sent


def _same_type_infer(name: str):
    """Type rule of a collective whose output is shaped like its input."""

    def infer(types, attrs):
        x = expect_tensor(types[0], name)
        _check_axis(attrs, name)
        return x

    return infer


# ------------------------------------------------------------------ allgather


def _allgather_infer(types, attrs):
    x = expect_tensor(types[0], "ccl.allgather")
    _check_axis(attrs, "ccl.allgather")
    ax = norm_axis(attrs["axis"], x.ndim, "ccl.allgather")
    shape = list(x.shape)
    shape[ax] = sym.mul_exact(shape[ax], attrs["num_workers"])
    return TensorType(tuple(shape), x.dtype)


def _allgather_spmd(xs, attrs, env):
    out, sent = {}, 0
    for group in _groups(attrs, env):
        parts = [xs[w] for w in group]
        full = np.concatenate(parts, axis=attrs["axis"])
        for w in group:
            out[w] = full
            sent += (len(group) - 1) * xs[w].nbytes
    return out, sent


register_op(
    OpDef(
        name="ccl.allgather",
        params=_group_params(Param("num_workers", "dim"), Param("axis", "int", 0)),
        infer=_allgather_infer,
        doc="Concatenate the workers' pieces along `axis`, in mesh-coordinate order.",
        tvm_compatible=False,
        extra={"spmd": _allgather_spmd, "collective": "all_gather"},
    )
)


# ------------------------------------------------------------------ allreduce


def _ring_chunks(flat_size: int, n: int) -> list[slice]:
    base, extra = divmod(flat_size, n)
    out, start = [], 0
    for c in range(n):
        size = base + (1 if c < extra else 0)
        out.append(slice(start, start + size))
        start += size
    return out


def _allreduce_spmd(xs, attrs, env):
    """Ring all-reduce: a reduce-scatter of the flattened buffer, then an all-gather."""
    op = attrs["op_type"]
    out, sent = {}, 0
    for group in _groups(attrs, env):
        n = len(group)
        flat = [xs[w].reshape(-1) for w in group]
        chunks = _ring_chunks(flat[0].size, n)
        itemsize = flat[0].itemsize
        reduced = []
        for c, sl in enumerate(chunks):
            # every worker but the chunk's owner sends its piece of chunk c
            reduced.append(_reduce(op, [f[sl] for f in flat]))
            sent += (n - 1) * (sl.stop - sl.start) * itemsize
        # the owner of each reduced chunk sends it to the n - 1 others
        sent += sum((n - 1) * (sl.stop - sl.start) * itemsize for sl in chunks)
        full = np.concatenate(reduced).reshape(xs[group[0]].shape) if reduced else xs[group[0]]
        for w in group:
            out[w] = full
    return out, sent


register_op(
    OpDef(
        name="ccl.allreduce",
        params=_group_params(Param("op_type", "choice", "sum", choices=_OP_TYPES)),
        infer=_same_type_infer("ccl.allreduce"),
        doc="Reduce the workers' values (sum, max, min or avg); every worker gets the result.",
        tvm_compatible=False,
        extra={"spmd": _allreduce_spmd, "collective": "all_reduce"},
    )
)


# ------------------------------------------------------------------ reduce_scatter


def _reduce_scatter_infer(types, attrs):
    x = expect_tensor(types[0], "ccl.reduce_scatter")
    _check_axis(attrs, "ccl.reduce_scatter")
    ax = norm_axis(attrs["axis"], x.ndim, "ccl.reduce_scatter")
    shape = list(x.shape)
    shape[ax] = sym.floordiv(shape[ax], attrs["num_workers"])
    return TensorType(tuple(shape), x.dtype)


def _reduce_scatter_spmd(xs, attrs, env):
    op, axis = attrs["op_type"], attrs["axis"]
    out, sent = {}, 0
    for group in _groups(attrs, env):
        pieces, group_sent = _exchange(xs, group, axis)
        for j, w in enumerate(group):
            out[w] = _reduce(op, [pieces[v][j] for v in group])
        sent += group_sent
    return out, sent


register_op(
    OpDef(
        name="ccl.reduce_scatter",
        params=_group_params(
            Param("op_type", "choice", "sum", choices=_OP_TYPES), Param("num_workers", "dim"), Param("axis", "int", 0)
        ),
        infer=_reduce_scatter_infer,
        doc="Reduce the workers' values and leave worker j with block j of `axis`.",
        tvm_compatible=False,
        extra={"spmd": _reduce_scatter_spmd, "collective": "reduce_scatter"},
    )
)


# ------------------------------------------------------------------ all_to_all


def _all_to_all_infer(types, attrs):
    x = expect_tensor(types[0], "ccl.all_to_all")
    _check_axis(attrs, "ccl.all_to_all")
    s = norm_axis(attrs["split_axis"], x.ndim, "ccl.all_to_all")
    c = norm_axis(attrs["concat_axis"], x.ndim, "ccl.all_to_all")
    shape = list(x.shape)
    shape[s] = sym.floordiv(shape[s], attrs["num_workers"])
    shape[c] = sym.mul_exact(shape[c], attrs["num_workers"])
    return TensorType(tuple(shape), x.dtype)


def _all_to_all_spmd(xs, attrs, env):
    s, c = attrs["split_axis"], attrs["concat_axis"]
    out, sent = {}, 0
    for group in _groups(attrs, env):
        pieces, group_sent = _exchange(xs, group, s)
        for j, w in enumerate(group):
            out[w] = np.concatenate([pieces[v][j] for v in group], axis=c)
        sent += group_sent
    return out, sent


register_op(
    OpDef(
        name="ccl.all_to_all",
        params=_group_params(Param("num_workers", "dim"), Param("split_axis", "int"), Param("concat_axis", "int")),
        infer=_all_to_all_infer,
        doc="Worker j sends block k of `split_axis` to worker k; received blocks are concatenated on `concat_axis`.",
        tvm_compatible=False,
        extra={"spmd": _all_to_all_spmd, "collective": "all_to_all"},
    )
)


# ------------------------------------------------------------------ local partial (no communication)


def _local_partial_numpy(xs, attrs, ctx):
    x = xs[0]
    if attrs["op_type"] != "sum":
        return x
    coord = ctx.dim(coord_expr(attrs["device_mesh"], attrs["mesh_axis"], ctx.worker_var))
    return x if coord == 0 else np.zeros_like(x)


register_op(
    OpDef(
        name="ccl.local_partial",
        params=_group_params(Param("op_type", "choice", "sum", choices=_OP_TYPES)),
        infer=_same_type_infer("ccl.local_partial"),
        numpy=_local_partial_numpy,
        doc="Turn a replicated value into a partial one without communication: for sum, only coordinate 0 keeps it.",
        tvm_compatible=False,
    )
)


# ------------------------------------------------------------------ transfer between meshes


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


def _transfer_spmd(xs, attrs, env):
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


register_op(
    OpDef(
        name="ccl.transfer",
        params=(
            Param("x", "tensor"),
            Param("shape", "dims"),
            Param("src_mesh", "mesh"),
            Param("src_placement", "placement"),
            Param("dst_mesh", "mesh"),
            Param("dst_placement", "placement"),
        ),
        infer=_transfer_infer,
        doc="Point-to-point sends from the workers of `src_mesh` to those of `dst_mesh`: each target worker "
        "receives its block of the `shape` tensor laid out `dst_placement`, cut from the `src_placement` pieces "
        "(see distir.ir.transfer for who sends what). Workers of `src_mesh` only send; only workers of "
        "`dst_mesh` hold the result.",
        tvm_compatible=False,
        extra={"spmd": _transfer_spmd, "collective": "transfer"},
    )
)
