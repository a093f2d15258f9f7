"""Block exchanges on one mesh: every device receives exactly what its target block lacks.

An exchange turns a tensor of shape ``A`` laid out ``src`` (R and S[d] only) on a mesh into
the same elements, read in C order as shape ``B`` (``A`` itself, or a reshape of it), laid out
``dst`` on the same mesh. Each device keeps the elements of its target block that it already
holds and receives every other real element of its target block once (padding is never
sent), as MPI's alltoallv, NCCL's grouped send/recv and XLA's collective-permute do. No
layout change can move less: this is the communication bound of the change.

**Who sends.** The element at global position ``g`` of ``A`` lies in one source block; the
devices holding that block differ only on the mesh axes that do not cut ``A``. The receiver
takes it from the holder that agrees with it on every such axis (itself, when it holds the
element). So an exchange whose layout change is confined to one mesh axis only sends within
that axis's groups, and no holder is ever loaded by another group's traffic.

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
from .layout import block_of, level_extents, mesh_coords
from .placement import Placement, PlacementError

__all__ = ["check_exchange", "gather_plan", "received", "reshape_groups"]


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


def check_exchange(src: Placement, dst: Placement, src_shape: Sequence, dst_shape: Sequence) -> None:
    """Raise PlacementError when an exchange cannot carry ``src`` to ``dst`` (partials, or element counts that differ)."""
    for what, p in (("source", src), ("target", dst)):
        if p.has_partial:
            axis = p.partial_axes()[0]
            raise PlacementError(
                f"an exchange moves whole elements, not partial values: the {what} layout \"{p}\" is {p[axis]} on "
                f"mesh axis {axis}; reduce it first (all_reduce, reduce_scatter)" if what == "source" else
                f"an exchange moves whole elements, not partial values: the {what} layout \"{p}\" is {p[axis]} on "
                f"mesh axis {axis}; exchange to a layout without it and make it partial after (local_partial)"
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
) -> tuple[tuple[slice, ...], tuple[int, ...], np.ndarray, np.ndarray, tuple[int, ...]]:
    """Where the target block of mesh position ``pos`` comes from, element by element.

    Returns (the real part of its local block as slices, that part's shape, the source
    position of each of its elements in C order, each element's flat index in that source's
    padded local block, the padded local shape of a source block). An element whose source
    is ``pos`` itself is kept, not received."""
    a, b = tuple(src_shape), tuple(dst_shape)
    sizes = tuple(sizes)
    _check(src, dst, a, b)
    c = mesh_coords(pos, sizes)
    T = _Side(b, dst, sizes)
    bounds = [T.interval(e, c) for e in range(len(b))]
    real = tuple(hi - lo for lo, hi in bounds)
    local_real = tuple(slice(0, n) for n in real)
    # global flat indices (C order, the same in A and B) of the target block's real elements
    flat = np.zeros(1, dtype=np.int64)
    for e, (lo, hi) in enumerate(bounds):
        flat = (flat[:, None] * b[e] + np.arange(lo, hi, dtype=np.int64)[None, :]).reshape(-1)
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
    return local_real, real, source, np.asarray(index, dtype=np.int64), tuple(local_shape)
