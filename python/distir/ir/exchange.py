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

- :func:`received_total` counts the elements all devices receive together (the planner's cost
  and the analysis' bytes) without a loop over devices or pairs of blocks: linear in the blocks
  along each dim (docs/redistribute.md, "How a layout change is priced");
- :func:`gather_plan` gives each device, element by element, where its target block comes
  from (the simulator's and the CPU collective library's data movement).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from . import sym
from .layout import (
    block_of,
    block_starts,
    block_storage_shape,
    chunk_box,
    chunk_homes,
    device_chunks,
    level_coords,
    level_extents,
    mesh_coords,
)
from .placement import Placement, PlacementError, Shard

__all__ = ["check_exchange", "crossed_axes", "gather_plan", "received_total", "reshape_groups"]


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


def _interval(shape: tuple[int, ...], p: Placement, sizes: tuple[int, ...], d: int, coords) -> tuple[int, int]:
    """[start, stop) of the real elements of dim ``d`` in the block held at mesh ``coords``."""
    start, valid, _ = block_of(shape[d], p, d, coords, sizes)
    return start, start + valid


def _devices(sizes) -> int:
    return _product(sizes)


def received_total(
    src_shape: Sequence,
    src: Placement,
    dst_shape: Sequence,
    dst: Placement,
    sizes: Sequence[int],
) -> int:
    """Elements all mesh positions together receive: for each position, its target block's real
    elements minus those it already holds. Raises SymbolicError for symbolic sizes.

    Never a loop over devices or over pairs of blocks: the elements every target block holds are
    a closed form, and those already in place are counted by :func:`_kept_joined` (no block
    layout: per reshape group of dims, linear in the blocks along it) or :func:`_kept_residues` (a
    block layout on a side: per dim, linear in the chunks along it)."""
    a, b = _ints(src_shape, "source"), _ints(dst_shape, "target")
    sizes = tuple(int(s) for s in sizes)
    _check(src, dst, a, b)
    total = _product(a)
    if total == 0:
        return 0
    copies = 1 if dst.is_block else _product(n for n, spec in zip(sizes, dst.specs) if not isinstance(spec, Shard))
    if src.is_block or dst.is_block:
        kept = _kept_residues(a, src, dst, sizes)
    elif a == b and _devices(sizes) <= SMALL_MESH:
        kept = _kept_by_position(a, src, dst, sizes)
    else:
        kept = _kept_joined(a, src, b, dst, sizes)
    return total * copies - kept


def _product(values) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def _sum_by(keys: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``keys`` (sorted) and the sum of ``weights`` of each, exactly (int64 or Python ints)."""
    if len(keys) == 0:
        return keys, weights
    order = np.argsort(keys, kind="stable")
    keys, weights = keys[order], weights[order]
    first = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    return keys[first], np.add.reduceat(weights, first)


def _merged(*sorted_parts: np.ndarray) -> np.ndarray:
    """The distinct values of arrays that are each sorted (a stable sort merges sorted runs in linear time)."""
    out = np.sort(np.concatenate(sorted_parts), kind="stable")
    return out[np.concatenate(([True], out[1:] != out[:-1]))] if len(out) else out


#: up to this many mesh positions and with one shape on both sides, :func:`_kept_by_position` counts
#: with one vector over the positions: a few dozen numpy calls, where the tables of
#: :func:`_kept_joined` take about a millisecond (planning by time prices tens of thousands of
#: exchanges on small meshes)
SMALL_MESH = 4096


def _kept_by_position(shape: tuple[int, ...], src: Placement, dst: Placement, sizes: tuple[int, ...]) -> int:
    """Elements of target blocks already held by the same position, R / S layouts of one shape on a
    small mesh: per position, the product over dims of the overlap of its two blocks."""
    positions = np.indices(sizes, dtype=np.int64).reshape(len(sizes), -1)
    dtype = _counts_dtype(_product(shape) * positions.shape[1])
    kept = np.ones(positions.shape[1], dtype=dtype)
    for d, n in enumerate(shape):
        lo, hi = _block_intervals(n, src.mesh_axes_of(d), sizes, positions)
        lo2, hi2 = _block_intervals(n, dst.mesh_axes_of(d), sizes, positions)
        kept = kept * np.maximum(0, np.minimum(hi, hi2) - np.maximum(lo, lo2)).astype(dtype)
    return int(kept.sum())


def _block_intervals(n: int, axes, sizes: tuple[int, ...], positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[start, stop) of the real elements of a dim of ``n`` cut over ``axes`` (major first) held at
    each of ``positions`` (:func:`~.layout.block_of`, vectorized)."""
    start, valid, block = np.zeros(positions.shape[1], dtype=np.int64), np.full(positions.shape[1], n, dtype=np.int64), n
    for a in axes:
        block = -(-block // sizes[a])
        start = start + positions[a] * block
        valid = np.maximum(0, np.minimum(valid - positions[a] * block, block))
    return start, start + valid


def _counts_dtype(bound: int):
    """int64 while every count stays below ``bound`` < 2^62, else Python ints (exact at any size)."""
    return np.int64 if bound < (1 << 62) else object


# ---------------------------------------------------------------- a block layout on a side


class _Layout:
    """One side of an exchange at concrete sizes: a block layout's shard shape, or the mesh axes
    cutting each dim of an R / S layout (looked up once: the counts below ask for them often)."""

    def __init__(self, shape: tuple[int, ...], p: Placement, sizes: tuple[int, ...]):
        self.shape, self.sizes, self.devices = shape, sizes, _devices(sizes)
        self.block = _ints(p.block, "shard") if p.is_block else None
        self.cuts: list[list[int]] = [[] for _ in shape]
        if self.block is None:
            for a, spec in enumerate(p.specs):
                if isinstance(spec, Shard):
                    self.cuts[spec.dim].append(a)
        self.free = [] if self.block is not None else [a for a, spec in enumerate(p.specs) if not isinstance(spec, Shard)]

    def counts(self, d: int) -> list[int]:
        return [self.sizes[a] for a in self.cuts[d]]

    def starts(self, d: int) -> np.ndarray:
        """Indices along dim ``d`` where the holder may change."""
        if self.block is not None:
            return np.arange(0, self.shape[d], self.block[d], dtype=np.int64)
        return block_starts(self.shape[d], self.counts(d))

    def term(self, d: int, y: np.ndarray) -> np.ndarray:
        """This side's share of the position holding elements at index ``y`` of dim ``d``, modulo the
        device count ``D``: the position is the sum of the shares of all dims, modulo ``D``. A block
        layout deals chunk ``j = sum_d (y_d // b_d) * G_d`` to ``j % D`` (``G_d`` the chunks of a step
        along ``d``); an R / S layout holds an element at the coordinates of its blocks on the axes
        that cut (``sum coord_a * stride_a``), and at every value of the other axes."""
        if self.block is not None:
            step = _product(-(-n // c) for n, c in zip(self.shape[d + 1 :], self.block[d + 1 :])) % self.devices
            return (y // self.block[d]) % self.devices * step % self.devices
        term = np.zeros(len(y), dtype=np.int64)
        for a, c in zip(self.cuts[d], level_coords(y, self.shape[d], self.counts(d))):
            term += c * _product(self.sizes[a + 1 :])
        return term

    def coords(self, dims: tuple[int, ...], flat: np.ndarray) -> dict[int, np.ndarray]:
        """The coordinate on every mesh axis cutting one of ``dims`` of the block holding each of
        ``flat`` (indices in C order over ``dims``; R / S)."""
        out, stride = {}, _product(self.shape[d] for d in dims)
        for d in dims:
            stride //= self.shape[d]
            if self.cuts[d]:
                y = (flat // stride) % self.shape[d]
                out.update(zip(self.cuts[d], level_coords(y, self.shape[d], self.counts(d))))
        return out

    def group_starts(self, dims: tuple[int, ...], span: int) -> np.ndarray:
        """Flat indices (C order over ``dims``) below ``span`` where the holder may change (R / S)."""
        parts, stride = [np.zeros(1, dtype=np.int64)], _product(self.shape[d] for d in dims)
        for d in dims:
            stride //= self.shape[d]
            if self.cuts[d]:
                inner = block_starts(self.shape[d], self.counts(d)) * stride
                outer = np.arange(0, span, stride * self.shape[d], dtype=np.int64)
                parts.append((outer[:, None] + inner[None, :]).reshape(-1))
        return np.concatenate(parts)

    def period(self, dims: tuple[int, ...]) -> int:
        """The holder repeats along the flat indices of ``dims`` with this period (R / S)."""
        cut = [i for i, d in enumerate(dims) if self.cuts[d]]
        return _product(self.shape[d] for d in dims[cut[0] :]) if cut else 1


def _kept_residues(shape: tuple[int, ...], src: Placement, dst: Placement, sizes: tuple[int, ...]) -> int:
    """Elements whose target holder already holds them, with a block layout on a side (same shape).

    Such an element has one target holder (or one source holder), so it counts once or not at all.
    Each side puts an element at a position that is a sum over dims of a share of its index in that
    dim (:meth:`_Layout.term`), modulo ``D``; an R / S side also at that position plus any value
    of the axes that do not cut (a set ``Z`` of offsets). The element is kept when the difference
    of the block side's position and the other side's is in ``Z`` (``{0}`` for two block layouts).
    Per dim, a histogram of the difference of the shares (the dim cut where either side's holder
    changes: linear in the chunks along it); the histograms are convolved modulo ``D`` and read
    on ``Z``."""
    devices = _devices(sizes)
    block, other = (src, dst) if src.is_block else (dst, src)
    block, other = _Layout(shape, block, sizes), _Layout(shape, other, sizes)
    hists = []
    for d, n in enumerate(shape):
        starts = _merged(block.starts(d), other.starts(d))
        residue = (block.term(d, starts) - other.term(d, starts)) % devices
        hists.append(_sum_by(residue, np.diff(starts, append=n)))
    free = other.free
    if len(free) == len(sizes):
        return _product(shape)  # the other side holds everything everywhere
    hists.sort(key=lambda h: len(h[0]))
    acc_keys, acc_w = np.zeros(1, dtype=np.int64), np.ones(1, dtype=np.int64)
    for keys, w in hists[:-1]:
        acc_keys, acc_w = _sum_by(((acc_keys[:, None] + keys[None, :]) % devices).reshape(-1),
                                  (acc_w[:, None] * w[None, :]).reshape(-1))
    last = np.zeros(devices, dtype=np.int64)
    last[hists[-1][0]] = hists[-1][1]
    # reach[r] = elements of the last dim whose residue r2 puts r + r2 in Z: Z's offsets summed in,
    # one free axis at a time (a cyclic window of its size, at its stride)
    reach = last[(-np.arange(devices)) % devices]
    for a in free:
        stride, size = _product(sizes[a + 1 :]), sizes[a]
        rows = reach.reshape(devices // stride, stride)
        wrapped = np.concatenate([rows[len(rows) - (size - 1) :], rows]) if size > 1 else rows
        cum = np.concatenate([np.zeros((1, stride), dtype=np.int64), np.cumsum(wrapped, axis=0)])
        reach = (cum[size:] - cum[:-size]).reshape(-1)
    return int(np.sum(acc_w * reach[acc_keys]))


# ---------------------------------------------------------------- R / S on both sides


class _Table:
    """Counts over the coordinates of some mesh axes: ``coords[i]`` (one column per axis of
    ``axes``) has count ``weights[i]``; absent coordinates count 0."""

    def __init__(self, axes: tuple[int, ...], coords: np.ndarray, weights: np.ndarray):
        self.axes, self.coords, self.weights = axes, coords, weights

    def keys(self, axes: Sequence[int], sizes: tuple[int, ...]) -> np.ndarray:
        key = np.zeros(len(self.weights), dtype=np.int64)
        for a in axes:
            key = key * sizes[a] + self.coords[:, self.axes.index(a)]
        return key

    def summed_to(self, axes: tuple[int, ...], sizes: tuple[int, ...]) -> _Table:
        """Summed over every axis not in ``axes``."""
        keys, weights = _sum_by(self.keys(axes, sizes), self.weights)
        coords = np.zeros((len(keys), len(axes)), dtype=np.int64)
        rest = keys
        for i in reversed(range(len(axes))):
            coords[:, i] = rest % sizes[axes[i]]
            rest = rest // sizes[axes[i]]
        return _Table(axes, coords, weights)

    def join(self, other: _Table, sizes: tuple[int, ...]) -> _Table:
        """The product of two tables on the rows that agree on their common axes."""
        common = [a for a in self.axes if a in other.axes]
        mine, theirs = self.keys(common, sizes), other.keys(common, sizes)
        order = np.argsort(theirs, kind="stable")
        theirs = theirs[order]
        lo, hi = np.searchsorted(theirs, mine, "left"), np.searchsorted(theirs, mine, "right")
        counts = hi - lo
        left = np.repeat(np.arange(len(mine)), counts)
        right = order[np.repeat(lo, counts) + np.arange(len(left)) - np.repeat(np.cumsum(counts) - counts, counts)]
        extra = [a for a in other.axes if a not in self.axes]
        coords = np.concatenate([self.coords[left], other.coords[right][:, [other.axes.index(a) for a in extra]]], axis=1)
        return _Table(self.axes + tuple(extra), coords, self.weights[left] * other.weights[right])


def _group_table(src: _Layout, dst: _Layout, si: tuple[int, ...], ti: tuple[int, ...], dtype) -> _Table:
    """For a reshape group (source dims ``si`` and target dims ``ti`` holding the same elements),
    the elements held in both layouts at each coordinate of the axes that cut them: the group's
    flat indices cut wherever either holder changes, over one common period of the two."""
    span = _product(src.shape[d] for d in si)
    period = math.lcm(src.period(si), dst.period(ti))
    starts = _merged(src.group_starts(si, period), dst.group_starts(ti, period))
    starts = starts[starts < period]
    lengths = np.diff(starts, append=period) * (span // period)
    held, wanted = src.coords(si, starts), dst.coords(ti, starts)
    keep = np.ones(len(starts), dtype=bool)
    for axis in set(held) & set(wanted):  # one device has one coordinate on an axis
        keep &= held[axis] == wanted[axis]
    coords = {**held, **wanted}
    axes = tuple(sorted(coords))
    table = np.stack([coords[x][keep] for x in axes], axis=1) if axes else np.zeros((int(keep.sum()), 0), dtype=np.int64)
    return _Table(axes, table, lengths[keep].astype(dtype))


def _kept_joined(a: tuple[int, ...], src: Placement, b: tuple[int, ...], dst: Placement, sizes: tuple[int, ...]) -> int:
    """Elements of target blocks already held by the same position, R / S layouts on both sides.

    A position holds an element in a layout when its coordinate on every axis cutting the element's
    dims is that of the element's block. So the count factors: over the axes that cut neither
    layout (each multiplies it by its size), and over groups of dims (a reshape group, or one dim)
    linked by the axes cutting them, each a table of counts per coordinate of its axes, joined on
    the axes they share. A group whose axes no other group has, and that no axis cuts on both
    sides, adds all its elements (``n`` elements, each in one source block and one target block)."""
    groups = [(si, ti, _product(a[d] for d in si)) for si, ti in reshape_groups(a, b)]
    ones_a = tuple(d for d, n in enumerate(a) if n == 1)
    ones_b = tuple(d for d, n in enumerate(b) if n == 1)
    groups.append((ones_a, ones_b, 1))  # size-1 dims: held at coordinate 0 of the axes that cut them
    held, wanted = _Layout(a, src, sizes), _Layout(b, dst, sizes)
    cuts = [({x for d in si for x in held.cuts[d]}, {x for d in ti for x in wanted.cuts[d]}) for si, ti, _ in groups]
    free = _product(n for x, n in enumerate(sizes) if x not in set().union(*(s | t for s, t in cuts)))
    # components of groups that share an axis
    component = list(range(len(groups)))

    def root(i: int) -> int:
        while component[i] != i:
            i = component[i]
        return i

    for i in range(len(groups)):
        for j in range(i):
            if (cuts[i][0] | cuts[i][1]) & (cuts[j][0] | cuts[j][1]):
                component[root(i)] = root(j)
    kept = free
    for r in sorted({root(i) for i in range(len(groups))}):
        members = [i for i in range(len(groups)) if root(i) == r]
        if len(members) == 1 and not cuts[r][0] & cuts[r][1]:
            kept *= groups[r][2]
            continue
        dtype = _counts_dtype(_product(a) * held.devices)  # a count never exceeds the elements times the devices
        tables = [_group_table(held, wanted, *groups[i][:2], dtype) for i in members]
        while len(tables) > 1:
            first = tables.pop(0)
            k = next(i for i, t in enumerate(tables) if set(t.axes) & set(first.axes))
            joined = first.join(tables.pop(k), sizes)
            needed = set().union(*(t.axes for t in tables)) if tables else set()
            tables.append(joined.summed_to(tuple(x for x in joined.axes if x in needed), sizes))
        kept *= int(np.sum(tables[0].weights))
    return kept


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
        bounds = [_interval(b, dst, sizes, e, c) for e in range(len(b))]
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
