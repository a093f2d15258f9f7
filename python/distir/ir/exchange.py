"""Block exchanges on one mesh: every device receives exactly what its target block lacks.

An exchange turns a tensor of shape ``A`` laid out ``src`` (R, S[d] or a block layout) on a mesh into
the same elements, read in C order as shape ``B`` (``A`` itself, or a reshape of it), laid out
``dst`` on the same mesh. Each device keeps the elements of its target block that it already
holds and receives every other real element of its target block once (padding is never
sent), as MPI's alltoallv, NCCL's grouped send/recv and XLA's collective-permute do. No
layout change can move less: this is the communication bound of the change.

**Who sends.** The element at global position ``g`` of ``A`` lies in one source block; the
devices holding that block differ only on the mesh axes that do not cut ``A``. The receiver
takes it from the holder that agrees with it on every such axis (itself, when it holds the
element). So an exchange whose layout change is confined to one mesh axis only sends within
that axis's groups, and no holder is ever loaded by another group's traffic. In a block
layout (``B[...]``, docs/blocks.md) every element has exactly one holder, the position its
chunk is dealt to; an exchange with a block layout on either side keeps the shape.

Everything here is at concrete sizes. Two entry points share the block arithmetic:

- :func:`received` counts the elements each device receives (the planner's cost and the
  analysis' bytes), with interval arithmetic for dims the reshape leaves alone and the flat
  indices of each reshape group otherwise;
- :func:`gather_plan` gives each device, element by element, where its target block comes
  from (the simulator's and the CPU collective library's data movement).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import sym
from .layout import block_of, block_storage_shape, chunk_box, chunk_homes, device_chunks, level_extents, mesh_coords
from .placement import Placement, PlacementError, Shard

__all__ = ["check_exchange", "crossed_axes", "gather_plan", "received", "reshape_groups"]


def reshape_groups(src: tuple, dst: tuple):
    """Pair up runs of dims with equal products: [(src dims, dst dims), ...]; size-1 dims are left out."""
    s = [i for i, d in enumerate(src) if not (isinstance(d, int) and d == 1)]
    t = [i for i, d in enumerate(dst) if not (isinstance(d, int) and d == 1)]
    groups = []
    i = k = 0
    while i < len(s) and k < len(t):
        found = None
        for total in range(2, len(s) - i + len(t) - k + 1):
            for a in range(1, total):
                b = total - a
                if i + a > len(s) or k + b > len(t):
                    continue
                pa = sym.product(src[j] for j in s[i : i + a])
                pb = sym.product(dst[j] for j in t[k : k + b])
                if sym.equal(pa, pb):
                    found = (a, b)
                    break
            if found:
                break
        if not found:
            groups.append((tuple(s[i:]), tuple(t[k:])))
            return groups
        a, b = found
        groups.append((tuple(s[i : i + a]), tuple(t[k : k + b])))
        i, k = i + a, k + b
    if i < len(s) or k < len(t):
        groups.append((tuple(s[i:]), tuple(t[k:])))
    return groups


def crossed_axes(src: Placement, dst: Placement, sizes: Sequence[int], same_shape: bool = True) -> tuple[int, ...]:
    """The mesh axes (of size > 1) an exchange from ``src`` to ``dst`` may send along, for its time
    cost: an element comes from a holder that agrees with the receiver on every axis that does not
    cut the source, so only axes cutting the source carry traffic; of those, an axis on which both
    layouts cut the same dim below the same outer cuts leaves each receiver's block inside its own
    block along that axis, and carries none. A reshape (``same_shape`` False) or a block layout
    crosses every axis that cuts the source (every axis, for a block layout). A symbolic size counts
    as more than 1."""

    def cuts(n) -> bool:
        return not isinstance(n, int) or n > 1

    if src.is_block or dst.is_block:
        return tuple(a for a, n in enumerate(sizes) if cuts(n))

    def outer(p: Placement, a: int) -> tuple[int, ...]:
        return tuple(b for b in p.mesh_axes_of(p.specs[a].dim) if b < a and cuts(sizes[b]))

    out = []
    for a, spec in enumerate(src.specs):
        if not cuts(sizes[a]) or not isinstance(spec, Shard):
            continue
        if same_shape and dst.specs[a] == spec and outer(src, a) == outer(dst, a):
            continue
        out.append(a)
    return tuple(out)


def check_exchange(src: Placement, dst: Placement, src_shape: Sequence, dst_shape: Sequence) -> None:
    """Raise PlacementError when an exchange cannot carry ``src`` to ``dst`` (partials, or element counts that differ)."""
    for what, p in (("source", src), ("target", dst)):
        if p.is_strided:
            raise PlacementError(
                f"an exchange moves R, S[d] and block layouts; the {what} layout \"{p}\" is strided: exchange its "
                f"expanded form (docs/strided.md)"
            )
        if p.has_partial:
            axis = p.partial_axes()[0]
            raise PlacementError(
                f"an exchange moves whole elements, not partial values: the {what} layout \"{p}\" is {p[axis]} on "
                f"mesh axis {axis}; reduce it first (all_reduce, reduce_scatter)" if what == "source" else
                f"an exchange moves whole elements, not partial values: the {what} layout \"{p}\" is {p[axis]} on "
                f"mesh axis {axis}; exchange to a layout without it and make it partial after (local_partial)"
            )
    if (src.is_block or dst.is_block) and not (
        len(src_shape) == len(dst_shape) and all(sym.equal(x, y) for x, y in zip(src_shape, dst_shape))
    ):
        raise PlacementError(
            f"an exchange from \"{src}\" to \"{dst}\" keeps the shape when a side is a block layout; "
            f"reshape before or after it"
        )
    if not sym.equal(sym.product(src_shape), sym.product(dst_shape)):
        raise PlacementError(
            f"an exchange keeps every element: shape ({', '.join(map(sym.to_str, src_shape))}) and "
            f"({', '.join(map(sym.to_str, dst_shape))}) hold different numbers of elements"
        )


def _ints(shape: Sequence, what: str) -> tuple[int, ...]:
    out = []
    for d in shape:
        if not isinstance(d, int):
            raise sym.SymbolicError(f"the {what} shape is symbolic ({sym.to_str(d)}); an exchange is computed at concrete sizes")
        out.append(d)
    return tuple(out)


_check = check_exchange


class _Side:
    """One side of an exchange (shape, placement) at concrete mesh sizes: each position's block."""

    def __init__(self, shape: tuple[int, ...], placement: Placement, sizes: tuple[int, ...]):
        self.shape, self.placement, self.sizes = shape, placement, sizes

    def interval(self, d: int, coords) -> tuple[int, int]:
        start, valid, _ = block_of(self.shape[d], self.placement, d, coords, self.sizes)
        return start, start + valid

    def group_flat(self, dims: tuple[int, ...], coords) -> np.ndarray:
        """Sorted flat indices (C order over ``dims``) of the block's real elements in those dims."""
        ranges = [np.arange(*self.interval(d, coords), dtype=np.int64) for d in dims]
        if any(r.size == 0 for r in ranges):
            return np.zeros(0, dtype=np.int64)
        flat = np.zeros(1, dtype=np.int64)
        for d, r in zip(dims, ranges):
            flat = (flat[:, None] * self.shape[d] + r[None, :]).reshape(-1)
        return flat

    def unit_dims_hold(self, coords, dims) -> bool:
        """Whether the block holds the one element of each size-1 dim in ``dims``."""
        return all(self.interval(d, coords)[1] > self.interval(d, coords)[0] for d in dims)


def _boxes(shape: tuple[int, ...], p: Placement, sizes: tuple[int, ...], pos: int) -> list[tuple[tuple[int, int], ...]]:
    """The boxes ([start, stop) per dim) of real elements mesh position ``pos`` holds: one block,
    or one per chunk of a block layout (empty boxes left out)."""
    if p.is_block:
        block = _ints(p.block, "shard")
        boxes = [chunk_box(shape, block, j) for _, j in device_chunks(shape, block, _devices(sizes), pos)]
    else:
        c = mesh_coords(pos, sizes)
        boxes = [tuple(_Side(shape, p, sizes).interval(d, c) for d in range(len(shape)))]
    return [bx for bx in boxes if all(hi > lo for lo, hi in bx)]


def _devices(sizes) -> int:
    return int(np.prod(sizes, dtype=object))


def _overlap(x, y) -> int:
    out = 1
    for (a0, a1), (b0, b1) in zip(x, y):
        out *= max(0, min(a1, b1) - max(a0, b0))
    return out


def _received_boxes(shape: tuple[int, ...], src: Placement, dst: Placement, sizes: tuple[int, ...]) -> list[int]:
    """Elements each position receives when a side is a block layout (same shape): the real
    elements of its target boxes minus their overlap with its own source boxes (the boxes of
    one side are disjoint, and a device that holds an element takes it from itself)."""
    out = []
    for pos in range(_devices(sizes)):
        want, own = _boxes(shape, dst, sizes, pos), _boxes(shape, src, sizes, pos)
        total = sum(_overlap(bx, bx) for bx in want)
        out.append(total - sum(_overlap(w, h) for w in want for h in own))
    return out


def received(
    src_shape: Sequence,
    src: Placement,
    dst_shape: Sequence,
    dst: Placement,
    sizes: Sequence[int],
) -> list[int]:
    """Elements each mesh position receives (row-major positions): its target block's real
    elements minus those it already holds. Raises SymbolicError for symbolic sizes."""
    a, b = _ints(src_shape, "source"), _ints(dst_shape, "target")
    sizes = tuple(int(s) for s in sizes)
    _check(src, dst, a, b)
    if src.is_block or dst.is_block:
        return _received_boxes(a, src, dst, sizes)
    S, T = _Side(a, src, sizes), _Side(b, dst, sizes)
    groups = reshape_groups(a, b)
    ones_a = [d for d, n in enumerate(a) if n == 1]
    ones_b = [d for d, n in enumerate(b) if n == 1]
    out = []
    for pos in range(int(np.prod(sizes, dtype=object))):
        c = mesh_coords(pos, sizes)
        if not T.unit_dims_hold(c, ones_b):
            out.append(0)
            continue
        want, own = 1, int(S.unit_dims_hold(c, ones_a))
        for si, ti in groups:
            if len(si) == 1 and len(ti) == 1:
                wlo, whi = T.interval(ti[0], c)
                hlo, hhi = S.interval(si[0], c)
                want *= whi - wlo
                own *= max(0, min(whi, hhi) - max(wlo, hlo))
            else:
                w = T.group_flat(ti, c)
                want *= w.size
                if own:
                    own *= int(np.intersect1d(w, S.group_flat(si, c), assume_unique=True).size)
        out.append(want - own)
    return out


def gather_plan(
    src_shape: Sequence[int],
    src: Placement,
    dst_shape: Sequence[int],
    dst: Placement,
    sizes: Sequence[int],
    pos: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, ...]]:
    """Where the target storage of mesh position ``pos`` comes from, element by element.

    Returns (the flat index in ``pos``'s padded target storage of each of its real elements,
    the source position of each, each element's flat index in that source's padded storage,
    the padded storage shape of a source). An element whose source is ``pos`` itself is kept,
    not received. Block layouts must be concrete (see :func:`distir.ir.layout.concrete_placement`)."""
    a, b = tuple(src_shape), tuple(dst_shape)
    sizes = tuple(sizes)
    _check(src, dst, a, b)
    devices = _devices(sizes)
    c = mesh_coords(pos, sizes)
    # global flat indices (C order, the same in A and B) of the target's real elements, and their local index
    if dst.is_block:
        block = _ints(dst.block, "shard")
        store = block_storage_shape(b, block, devices)
        flats, locs = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
        for k, j in device_chunks(b, block, devices, pos):
            box = chunk_box(b, block, j)
            g, l_ = np.zeros(1, dtype=np.int64), np.full(1, k, dtype=np.int64)
            for e, (lo, hi) in enumerate(box):
                r = np.arange(lo, hi, dtype=np.int64)
                g = (g[:, None] * b[e] + r[None, :]).reshape(-1)
                l_ = (l_[:, None] * store[e + 1] + (r - lo)[None, :]).reshape(-1)
            flats.append(g)
            locs.append(l_)
        flat, dst_index = np.concatenate(flats), np.concatenate(locs)
    else:
        T = _Side(b, dst, sizes)
        bounds = [T.interval(e, c) for e in range(len(b))]
        store = tuple(block_of(b[e], dst, e, c, sizes)[2] for e in range(len(b)))
        flat, dst_index = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        for e, (lo, hi) in enumerate(bounds):
            r = np.arange(lo, hi, dtype=np.int64)
            flat = (flat[:, None] * b[e] + r[None, :]).reshape(-1)
            dst_index = (dst_index[:, None] * store[e] + (r - lo)[None, :]).reshape(-1)
    if src.is_block:
        block = _ints(src.block, "shard")
        source, index = chunk_homes(a, block, devices, flat)
        return dst_index, source, index, tuple(block_storage_shape(a, block, devices))
    coords_a = np.unravel_index(flat, a) if a else ()
    # per source dim: the block coordinate on each mesh axis cutting it, and the offset in the block
    holder = [np.full(flat.shape, c[ax], dtype=np.int64) for ax in range(len(sizes))]
    local_shape, offsets = [], []
    for d, n in enumerate(a):
        axes = src.mesh_axes_of(d)
        rest = np.asarray(coords_a[d], dtype=np.int64)
        blocks = level_extents(n, [sizes[ax] for ax in axes])
        for ax, block in zip(axes, blocks):
            holder[ax] = rest // block
            rest = rest - holder[ax] * block
        offsets.append(rest)
        local_shape.append(blocks[-1] if axes else n)
    source = np.zeros(flat.shape, dtype=np.int64)
    for ax, size in enumerate(sizes):
        source = source * size + holder[ax]
    index = np.ravel_multi_index(tuple(offsets), tuple(local_shape)) if a else np.zeros(flat.shape, dtype=np.int64)
    return dst_index, source, np.asarray(index, dtype=np.int64), tuple(local_shape)
