"""Transfers between two device meshes (pipeline stages): who sends which piece to whom.

A transfer moves a DTensor laid out as ``src_placement`` on one mesh to ``dst_placement``
on another mesh (any shapes, any device ids). Two kinds:

- **aligned copy** (the meshes have the same shape and the placements are equal, partials
  allowed): the worker at mesh position ``k`` of the source sends its whole local value to
  position ``k`` of the target.
- **block transfer** (no partial on either side): every target worker receives its block
  exactly once, cut into the pieces the source layout holds. A piece that the target
  device itself holds on the source mesh (meshes sharing devices) costs nothing; otherwise
  the piece comes from the least-loaded holder among the source replicas (ties: lowest
  position), so a replicated source spreads the sending over its workers.

Routes are computed at concrete mesh sizes with exact arithmetic, so the same function gives
the simulator its slices (the tensor's extents) and the planner its costs (extents that
the block counts divide, then divided by the tensor's volume). With
disjoint device sets every legal transfer sends exactly ``|target mesh| x (target local
bytes)`` in total: each target worker receives its own block once.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from . import sym
from .layout import block_index, block_intervals, block_of, mesh_coords, mesh_coords_array
from .mesh import DeviceMesh, Range
from .placement import Placement, PlacementError, Shard
from .sym import Dim

__all__ = [
    "Route",
    "check_transfer",
    "devices_disjoint",
    "is_aligned",
    "kept_shares",
    "route_bytes",
    "transfer_cost_formula",
    "transfer_routes",
    "transfer_volume",
]

Bounds = tuple[tuple[Fraction, Fraction], ...]


def is_aligned(src_mesh: DeviceMesh, src: Placement, dst_mesh: DeviceMesh, dst: Placement) -> bool:
    """Whether a transfer is an aligned copy (same mesh shape, same placement)."""
    return (
        src == dst
        and src_mesh.ndim == dst_mesh.ndim
        and all(sym.equal(a, b) for a, b in zip(src_mesh.shape, dst_mesh.shape))
    )


def check_transfer(src_mesh: DeviceMesh, src: Placement, dst_mesh: DeviceMesh, dst: Placement) -> None:
    """Raise PlacementError when a single transfer cannot carry ``src`` to ``dst``."""
    for p in (src, dst):
        p.refuse_block("a transfer between meshes")
    if is_aligned(src_mesh, src, dst_mesh, dst):
        return
    for what, mesh, p in (("source", src_mesh, src), ("target", dst_mesh, dst)):
        if p.has_partial:
            axis = p.partial_axes()[0]
            fix = "reduce it on the source mesh first" if what == "source" else "make it partial on the target mesh after"
            raise PlacementError(
                f"a transfer from mesh {src_mesh.shape_str()} \"{src}\" to mesh {dst_mesh.shape_str()} \"{dst}\" "
                f"cannot carry a partial value ({p[axis]} on mesh axis {axis} of the {what}): partial values move "
                f"only as an aligned copy between meshes of the same shape with the same placement; {fix}"
            )


@dataclass(frozen=True)
class Route:
    """One piece: global ``bounds`` ([lo, hi) per tensor dim) from a source to a target position."""

    src: int
    dst: int
    src_device: int
    dst_device: int
    bounds: Bounds

    @property
    def volume(self) -> int | Fraction:
        v = 1
        for lo, hi in self.bounds:
            v *= hi - lo
        return v

    @property
    def is_local(self) -> bool:
        return self.src_device == self.dst_device


def _bound(extent, b: int, count: int):
    """``extent * b / count``: an int when it divides (the usual case, and fast), else a Fraction."""
    q, r = divmod(extent * b, count)
    return q if r == 0 else Fraction(extent * b, count)


def block_bounds(extents: Sequence, placement: Placement, coords: Sequence[int], sizes: Sequence[int]) -> Bounds:
    """Global [lo, hi) of the real elements of the block held at mesh ``coords``, per tensor dim.

    Integer extents follow the block rule of :mod:`distir.ir.layout` (trailing blocks may be
    short or empty); the planner's per-byte costs use extents every count divides, and a
    fractional extent is cut exactly."""
    out = []
    for d, extent in enumerate(extents):
        if isinstance(extent, int):
            start, valid, _ = block_of(extent, placement, d, coords, sizes)
            out.append((start, start + valid))
            continue
        b, count = block_index(placement, d, coords, sizes)
        out.append((_bound(extent, b, count), _bound(extent, b + 1, count)))
    return tuple(out)


def _source_bounds(extent, placement: Placement, dim: int, index: int, count: int, sizes: Sequence[int]):
    """[lo, hi) of the real elements of block ``index`` (of ``count``) of ``dim``."""
    if not isinstance(extent, int):
        return _bound(extent, index, count), _bound(extent, index + 1, count)
    coords = [0] * len(sizes)
    for axis in reversed(placement.mesh_axes_of(dim)):  # the flat block index, minor axis last
        coords[axis] = index % sizes[axis]
        index //= sizes[axis]
    start, valid, _ = block_of(extent, placement, dim, coords, sizes)
    return start, start + valid


def _product(values) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def _intersect(a: Bounds, b: Bounds) -> Bounds | None:
    out = []
    for (alo, ahi), (blo, bhi) in zip(a, b):
        lo, hi = max(alo, blo), min(ahi, bhi)
        if lo >= hi:
            return None
        out.append((lo, hi))
    return tuple(out)


def transfer_routes(
    extents: Sequence,
    src_sizes: Sequence[int],
    src_devices: Sequence[int],
    src: Placement,
    dst_sizes: Sequence[int],
    dst_devices: Sequence[int],
    dst: Placement,
) -> list[Route]:
    """The pieces of one transfer at concrete sizes; see the module docstring for the rules.

    ``extents`` are the tensor's global dims (or, for costs per byte of the tensor, any
    extents the block counts divide); bounds scale with them, so both give the same routes.
    """
    if src.has_partial or dst.has_partial:
        if tuple(src_sizes) != tuple(dst_sizes) or src != dst:
            raise PlacementError(f"a partial value moves between meshes only as an aligned copy (\"{src}\" -> \"{dst}\")")
        routes = []
        for k, dev in enumerate(dst_devices):
            coords = mesh_coords(k, dst_sizes)
            routes.append(Route(k, k, src_devices[k], dev, block_bounds(extents, dst, coords, dst_sizes)))
        return routes
    # source blocks by their index along each dim; a target block overlaps a box of them
    counts = [block_index(src, d, (0,) * len(src_sizes), src_sizes)[1] for d in range(len(extents))]
    holders: dict[tuple[int, ...], list[int]] = {}
    for pos in range(len(src_devices)):
        coords = mesh_coords(pos, src_sizes)
        holders.setdefault(tuple(block_index(src, d, coords, src_sizes)[0] for d in range(len(extents))), []).append(pos)
    position_of = {dev: pos for pos, dev in enumerate(src_devices)}
    loads = [Fraction(0)] * len(src_devices)
    routes = []
    for t, dev in enumerate(dst_devices):
        want = block_bounds(extents, dst, mesh_coords(t, dst_sizes), dst_sizes)
        own = position_of.get(dev)
        if all(isinstance(e, int) for e in extents):  # real sizes: blocks by the (possibly uneven) block rule
            keys = itertools.product(*(range(c) for c in counts))
        else:  # per byte of the tensor: extents every count divides, so a target block overlaps a box
            keys = itertools.product(*(range(math.floor(lo * c / e), math.ceil(hi * c / e))
                                       for (lo, hi), e, c in zip(want, extents, counts)))
        for key in keys:
            have = tuple(_source_bounds(e, src, d, b, c, src_sizes) for d, (e, b, c) in enumerate(zip(extents, key, counts)))
            piece = _intersect(want, have)
            if piece is None:
                continue
            group = holders[key]
            if own is not None and own in group:
                routes.append(Route(own, t, dev, dev, piece))
                continue
            s = min(group, key=lambda h: (loads[h], h))
            route = Route(s, t, src_devices[s], dev, piece)
            loads[s] += route.volume
            routes.append(route)
    return routes


def _device_array(devices: Sequence[int]) -> np.ndarray:
    return np.arange(devices.start, devices.stop, dtype=np.int64) if isinstance(devices, range) else np.asarray(devices, dtype=np.int64)


def _innermost_stride(sizes: Sequence[int], p: Placement) -> int:
    """Positions in a run of this many, aligned, hold the same block (the stride of the innermost axis that cuts)."""
    cut = [a for a, spec in enumerate(p.specs) if isinstance(spec, Shard)]
    return _product(sizes[cut[-1] + 1 :]) if cut else _product(sizes)


def _shared_runs(src_devices: Sequence[int], src_stride: int, dst_devices: Sequence[int], dst_stride: int):
    """(source position, target position, count) of runs of devices in both meshes over which the
    source block and the target block stay the same: for two ranges of ids, cut where either
    mesh's run of ``stride`` positions starts (linear in the distinct blocks the shared devices
    hold); for listed ids, device by device."""
    if isinstance(src_devices, range) and isinstance(dst_devices, range):
        lo, hi = max(src_devices.start, dst_devices.start), min(src_devices.stop, dst_devices.stop)
        if lo >= hi:
            return (np.zeros(0, dtype=np.int64),) * 3
        cuts = []
        for first, stride in ((src_devices.start, src_stride), (dst_devices.start, dst_stride)):
            k = -(-(lo - first) // stride)
            cuts.append(np.arange(first + k * stride, hi, stride, dtype=np.int64))
        starts = np.unique(np.concatenate([np.array([lo], dtype=np.int64), *cuts]))
        counts = np.diff(starts, append=hi)
        return starts - src_devices.start, starts - dst_devices.start, counts
    _, src_pos, dst_pos = np.intersect1d(_device_array(src_devices), _device_array(dst_devices), return_indices=True)
    return src_pos.astype(np.int64), dst_pos.astype(np.int64), np.ones(len(src_pos), dtype=np.int64)


def transfer_volume(
    extents: Sequence[int],
    src_sizes: Sequence[int],
    src_devices: Sequence[int],
    src: Placement,
    dst_sizes: Sequence[int],
    dst_devices: Sequence[int],
    dst: Placement,
) -> int:
    """Elements one transfer sends between different devices: ``route_bytes(transfer_routes(...))``
    without listing the routes. Every target position receives its block once (the elements of
    the tensor times the copies the target layout holds); a piece stays put when the target device
    holds it on the source mesh too, which only a device of both meshes can: the pieces kept are
    summed over runs of shared devices that hold the same blocks (an aligned copy: over the
    positions whose device is the same in both). ``extents`` are concrete; ``*_devices`` a
    ``range`` or a list of ids, in mesh order."""
    extents = tuple(int(e) for e in extents)
    src_sizes, dst_sizes = tuple(src_sizes), tuple(dst_sizes)
    copies = _product(n for n, spec in zip(dst_sizes, dst.specs) if not isinstance(spec, Shard))
    total = _product(extents) * copies
    if total == 0:
        return 0
    dtype = np.int64 if total * max(len(src_devices), len(dst_devices)) < (1 << 62) else object
    if src.has_partial or dst.has_partial:  # an aligned copy: position k of the source to position k of the target
        if src_sizes != dst_sizes or src != dst:
            raise PlacementError(f"a partial value moves between meshes only as an aligned copy (\"{src}\" -> \"{dst}\")")
        same = np.flatnonzero(_device_array(src_devices) == _device_array(dst_devices))
        src_pos, dst_pos, counts = same, same, np.ones(len(same), dtype=np.int64)
    else:
        src_pos, dst_pos, counts = _shared_runs(src_devices, _innermost_stride(src_sizes, src),
                                                dst_devices, _innermost_stride(dst_sizes, dst))
    if len(counts) == 0:
        return total
    src_coords, dst_coords = mesh_coords_array(src_pos, src_sizes), mesh_coords_array(dst_pos, dst_sizes)
    kept = counts.astype(dtype)
    for d, n in enumerate(extents):
        lo, hi = block_intervals(n, dst, d, dst_coords, dst_sizes)
        if not (src.has_partial or dst.has_partial):
            s_lo, s_hi = block_intervals(n, src, d, src_coords, src_sizes)
            lo, hi = np.maximum(lo, s_lo), np.minimum(hi, s_hi)
        kept = kept * np.maximum(hi - lo, 0).astype(dtype)
    return total - int(np.sum(kept))


@lru_cache(maxsize=1024)
def _cut_weights(sizes: tuple[int, ...], layouts: tuple[Placement, ...], d: int) -> tuple[np.ndarray, np.ndarray]:
    """For each layout (a row), the weight of each mesh axis's coordinate in the index of the block
    of dim ``d`` it holds (0 for an axis that does not cut ``d``; the lower axis is the major
    split), and the number of blocks of ``d``."""
    cut = np.array([[isinstance(s, Shard) and s.dim == d for s in p.specs] for p in layouts], dtype=bool).reshape(len(layouts), len(sizes))
    factors = np.where(cut, np.asarray(sizes, dtype=np.int64), 1)
    after = np.concatenate([np.cumprod(factors[:, ::-1], axis=1)[:, ::-1][:, 1:], np.ones((len(layouts), 1), dtype=np.int64)], axis=1)
    return np.where(cut, after, 0), np.prod(factors, axis=1)


def kept_shares(
    src_sizes: Sequence[int],
    src_devices: Sequence[int],
    src: Placement,
    dst_sizes: Sequence[int],
    dst_devices: Sequence[int],
    dsts: Sequence[Placement],
    ndim: int,
) -> list[Fraction]:
    """For each target layout of ``dsts`` (no partials, rank ``ndim``), the share of the tensor that
    stays put in a transfer from ``src`` (no partials): summed over the devices of both meshes,
    the part of the target block that the same device holds on the source mesh, with blocks taken
    to divide evenly (the planner's cost per byte of the tensor; :func:`transfer_volume` at extents
    every block count divides, divided by the tensor's elements). All targets at once, as arrays
    (a row per target, a column per run of shared devices): the planner prices a transfer from a
    layout to each of them."""
    src_sizes, dst_sizes = tuple(src_sizes), tuple(dst_sizes)
    finest = min(_innermost_stride(dst_sizes, q) for q in dsts)
    src_pos, dst_pos, counts = _shared_runs(src_devices, _innermost_stride(src_sizes, src), dst_devices, finest)
    if len(counts) == 0:
        return [Fraction(0)] * len(dsts)
    src_coords, dst_coords = mesh_coords_array(src_pos, src_sizes), mesh_coords_array(dst_pos, dst_sizes)
    # per dim, a length every block count divides: block j of k is [j * L / k, (j + 1) * L / k)
    dims = []
    for d in range(ndim):
        src_weights, (src_count,) = _cut_weights(src_sizes, (src,), d)
        dst_weights, dst_counts = _cut_weights(dst_sizes, tuple(dsts), d)
        span = math.lcm(int(src_count), *(int(c) for c in dst_counts))
        dims.append((src_coords @ src_weights[0], span // src_count, dst_weights @ dst_coords.T, span // dst_counts, span))
    scale = _product(span for *_, span in dims)
    dtype = np.int64 if scale * int(counts.sum()) < (1 << 62) else object
    kept = np.broadcast_to(counts.astype(dtype), (len(dsts), len(counts)))
    for src_index, src_len, dst_index, dst_len, _ in dims:
        lo = np.maximum(src_index * src_len, dst_index * dst_len[:, None])
        hi = np.minimum((src_index + 1) * src_len, (dst_index + 1) * dst_len[:, None])
        kept = kept * np.maximum(hi - lo, 0).astype(dtype)
    return [Fraction(k, scale) for k in kept.sum(axis=1).tolist()]


def route_bytes(routes: Sequence[Route]) -> int | Fraction:
    """Volume sent between different devices (summed over all workers)."""
    return sum(r.volume for r in routes if not r.is_local)


def _provably_less(a: Dim, b: Dim, strict: bool) -> bool:
    return sym.prove_lt(a, b) if strict else sym.prove_le(a, b)


def devices_disjoint(a: DeviceMesh, b: DeviceMesh) -> bool | None:
    """True/False when provable from the device ids (symbolic ranges included), else None."""
    ia, ib = a.device_ids, b.device_ids
    if isinstance(ia, Range) and isinstance(ib, Range):
        if _provably_less(ia.stop, ib.start, False) or _provably_less(ib.stop, ia.start, False):
            return True
        if _provably_less(ia.start, ib.stop, True) and _provably_less(ib.start, ia.stop, True):
            return False
        return None
    try:
        return not (set(a.device_list()) & set(b.device_list()))
    except sym.SymbolicError:
        return None


def transfer_cost_formula(
    shape: Sequence[Dim], dtype_size: int, src_mesh: DeviceMesh, src: Placement, dst_mesh: DeviceMesh, dst: Placement
) -> Dim:
    """Bytes sent by all workers together, as a formula in the mesh sizes.

    Exact when the two meshes share no device: every target worker receives the real elements
    of its own block once (padding is not sent), so each element goes to every worker that
    holds a copy of it: the tensor's bytes times the target mesh's size over the number of
    blocks. With shared devices the cost depends on which pieces stay put; use
    :func:`transfer_routes` at concrete sizes (this raises ValueError then).
    """
    if devices_disjoint(src_mesh, dst_mesh) is not True:
        raise ValueError("the meshes may share devices; compute the cost at concrete sizes with transfer_routes")
    from .layout import shard_count

    blocks = sym.product(shard_count(dst_mesh, dst, d) for d in range(len(shape)))
    copies = sym.floordiv(dst_mesh.size, blocks)  # the axes that do not cut the tensor hold copies
    return sym.mul(sym.mul(sym.product(shape), dtype_size), copies)
