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

from . import sym
from .layout import block_index, block_of, mesh_coords
from .mesh import DeviceMesh, Range
from .placement import Placement, PlacementError
from .sym import Dim

__all__ = [
    "Route",
    "check_transfer",
    "devices_disjoint",
    "is_aligned",
    "route_bytes",
    "transfer_cost_formula",
    "transfer_routes",
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
