"""Where each piece of a DTensor lives: per-worker shapes, mesh coordinates, block offsets.

One place for the arithmetic that the lowering, the SPMD simulator, the cost model and
the analyses share. Mesh positions are row-major over the mesh shape; when several
mesh axes shard one tensor dim, the lower mesh axis is the major split.

Blocks (docs/uneven.md): a dim of size ``n`` cut into ``k`` parts is cut in blocks of
``c = ceil(n / k)``; part ``i`` holds elements ``[i*c, min(n, (i+1)*c))``, so trailing
parts may hold fewer elements, or none. A dim cut over several mesh axes nests the rule:
the outer cut gives blocks of ``c1 = ceil(n / k1)``, each cut again into blocks of
``c2 = ceil(c1 / k2)`` (which is ``ceil(n / (k1 * k2))``), and so on. Every worker stores
its block padded to the full ``c`` (the *local extent*); the elements past its *valid
length* are padding, which collectives drop and reductions mask. When ``k`` divides
``n`` this is exactly the even split: ``c = n / k``, no padding.

Strided shards ``S[d/k]`` (docs/strided.md): dim ``d`` of size ``n`` viewed as ``(k, n / k)``,
the inner part cut by the block rule. A worker's storage of a strided tensor is, element for
element, its storage of the *expanded* tensor (dim ``d`` split in two, the inner part a plain
``S``): :func:`expand_strided` gives that form, and everything here is computed on it.

Block layouts ``B[b0, b1, ...]`` (docs/blocks.md): a tensor of shape ``n`` is cut into a
*chunk grid* of ``g_i = ceil(n_i / b_i)`` chunks per dim, ``C = prod g_i`` chunks, numbered
row-major. Chunk ``j`` lives on mesh position ``j % D`` (``D`` the mesh's device count, its
positions row-major), in *slot* ``j // D`` of that device's storage ``[ceil(C / D), b0, b1,
...]``. Position ``p`` holds ``ceil((C - p) / D)`` chunks (0 when ``p >= C``); chunks at the
high edges are partial and every chunk is padded to the full shard shape; slots past a
device's last chunk are padding too. Padding holds zeros when cut from a value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from . import sym
from .mesh import DeviceMesh, Range
from .placement import Placement, PlacementError, Shard, StridedShard
from .sym import Dim
from .types import DTensorType, TensorType, dtype_bytes

WORKER_ID = "worker_id"  # the symbolic variable a worker's own device id is bound to at run time


# ------------------------------------------------------------------ block layouts (B[...])


def chunk_grid(shape: Sequence[Dim], block: Sequence[Dim]) -> tuple[Dim, ...]:
    """Chunks along each dim: ``ceil(n_i / b_i)``."""
    return tuple(sym.ceildiv(n, b) for n, b in zip(shape, block))


def chunk_count(shape: Sequence[Dim], block: Sequence[Dim]) -> Dim:
    """All chunks of the tensor: ``prod ceil(n_i / b_i)``."""
    return sym.product(chunk_grid(shape, block))


def chunk_slots(shape: Sequence[Dim], block: Sequence[Dim], devices: Dim) -> Dim:
    """Chunks the busiest device holds, which every device stores room for: ``ceil(C / D)``."""
    return sym.ceildiv(chunk_count(shape, block), devices)


def chunks_at(chunks: int, devices: int, position: int) -> int:
    """Chunks mesh position ``position`` holds (concrete): ``ceil((C - p) / D)``, 0 when ``p >= C``."""
    return max(0, -(-(chunks - position) // devices))


def chunk_box(shape: Sequence[int], block: Sequence[int], j: int) -> tuple[tuple[int, int], ...]:
    """[start, stop) per dim of chunk ``j`` (row-major in the chunk grid), clipped to the tensor."""
    grid = [-(-n // b) for n, b in zip(shape, block)]
    idx = np.unravel_index(j, grid) if grid else ()
    return tuple((int(i) * b, min(n, (int(i) + 1) * b)) for i, b, n in zip(idx, block, shape))


def concrete_block(placement: Placement, values: Mapping[str, int] | None = None) -> tuple[int, ...]:
    """The shard shape of a block layout at concrete sizes (each entry must come out positive)."""
    out = []
    for i, d in enumerate(placement.block):
        v = sym.evaluate(d, values or {})
        if v < 1:
            raise PlacementError(f"block layout \"{placement}\": shard size {i} is {v} at these sizes; shard sizes are positive")
        out.append(v)
    return tuple(out)


def concrete_placement(placement: Placement, values: Mapping[str, int] | None = None) -> Placement:
    """``placement`` with a block layout's symbolic shard sizes evaluated (others unchanged)."""
    return Placement.blocked(concrete_block(placement, values)) if placement.is_block else placement


def block_storage_shape(shape: Sequence[Dim], block: Sequence[Dim], devices: Dim) -> tuple[Dim, ...]:
    """Every device's storage of a block layout: ``[ceil(C / D), *block]``."""
    return (chunk_slots(shape, block, devices), *block)


def chunk_homes(shape: Sequence[int], block: Sequence[int], devices: int, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mesh position, flat index in that device's storage) of each element at global C-order
    index ``flat`` (concrete sizes)."""
    shape, block = tuple(shape), tuple(block)
    grid = tuple(-(-n // b) for n, b in zip(shape, block))
    if not shape:
        return np.zeros(flat.shape, dtype=np.int64), np.zeros(flat.shape, dtype=np.int64)
    coords = np.unravel_index(flat, shape)
    chunk = np.ravel_multi_index(tuple(np.asarray(c) // b for c, b in zip(coords, block)), grid)
    slots = -(-int(np.prod(grid, dtype=object)) // devices)
    local = np.ravel_multi_index((chunk // devices, *(np.asarray(c) % b for c, b in zip(coords, block))), (slots, *block))
    return np.asarray(chunk % devices, dtype=np.int64), np.asarray(local, dtype=np.int64)


def device_chunks(shape: Sequence[int], block: Sequence[int], devices: int, position: int) -> list[tuple[int, int]]:
    """(slot, chunk index) of every chunk mesh position ``position`` holds."""
    total = int(np.prod([-(-n // b) for n, b in zip(shape, block)], dtype=object))
    return [(k, j) for k, j in enumerate(range(position, total, devices))]


def chunk_elements(shape: Sequence[int], block: Sequence[int], devices: int, position: int) -> int:
    """Real (not padding) elements mesh position ``position`` holds."""
    total = 0
    for _, j in device_chunks(shape, block, devices, position):
        total += int(np.prod([hi - lo for lo, hi in chunk_box(shape, block, j)], dtype=object))
    return total


def cut_chunks(full: np.ndarray, block: Sequence[int], devices: int, position: int) -> np.ndarray:
    """The storage of mesh position ``position`` in a block layout: its chunks, padded with zeros."""
    shape = full.shape
    out = np.zeros(block_storage_shape(shape, block, devices), dtype=full.dtype)
    for k, j in device_chunks(shape, block, devices, position):
        box = chunk_box(shape, block, j)
        out[(k, *(slice(0, hi - lo) for lo, hi in box))] = full[tuple(slice(lo, hi) for lo, hi in box)]
    return out


def place_chunks(out: np.ndarray, storage: np.ndarray, block: Sequence[int], devices: int, position: int) -> None:
    """Write the real elements of position ``position``'s storage into the global array ``out``."""
    for k, j in device_chunks(out.shape, block, devices, position):
        box = chunk_box(out.shape, block, j)
        out[tuple(slice(lo, hi) for lo, hi in box)] = storage[(k, *(slice(0, hi - lo) for lo, hi in box))]


# ------------------------------------------------------------------ strided shards (S[d/k])


def expand_strided(shape: Sequence[Dim], placement: Placement) -> tuple[tuple[Dim, ...], Placement]:
    """The shape and plain placement a strided layout is a view of: every strided dim ``d``
    (``S[d/k]``) split into ``(k, n / k)``, its mesh axis a plain shard of the inner part.
    Layouts without strided shards come back unchanged."""
    if not placement.is_strided:
        return tuple(shape), placement
    split = {s.dim: s.split for _, s in placement.strided}
    new_shape: list[Dim] = []
    for d, n in enumerate(shape):
        new_shape.extend((split[d], sym.floordiv(n, split[d])) if d in split else (n,))
    return tuple(new_shape), expand_placement(placement, placement, len(shape))


def expand_placement(placement: Placement, by: Placement, ndim: int) -> Placement:
    """``placement`` written for the expanded form of ``by``'s strided dims (:func:`expand_strided`):
    its strided shards of those dims cut their inner part, its plain shards of them the outer part."""
    split = {s.dim for _, s in by.strided}
    outer, e = {}, 0
    for d in range(ndim):
        outer[d] = e
        e += 2 if d in split else 1
    specs = []
    for s in placement.specs:
        if isinstance(s, StridedShard):
            if s.dim not in split:
                raise PlacementError(f"\"{placement}\": {s} is not one of the strided dims of \"{by}\"")
            specs.append(Shard(outer[s.dim] + 1))
        elif isinstance(s, Shard):
            specs.append(Shard(outer[s.dim]))
        else:
            specs.append(s)
    return Placement(tuple(specs))


def merge_strided(wide: Sequence[Dim], placement: Placement) -> tuple[Dim, ...]:
    """A shape of the expanded form (:func:`expand_strided`) with each strided dim's two parts
    merged back: the per-worker storage of the strided layout."""
    out = list(wide)
    dims = sorted(s.dim for _, s in placement.strided)
    for j in reversed(range(len(dims))):
        e = dims[j] + j  # its outer part in the expanded shape (each strided dim below adds one)
        out[e : e + 2] = [sym.mul(out[e], out[e + 1])]
    return tuple(out)


def shard_count(mesh: DeviceMesh, placement: Placement, dim: int) -> Dim:
    """How many pieces tensor dim ``dim`` is cut into."""
    return sym.product(mesh.shape[i] for i in placement.mesh_axes_of(dim))


def local_shape(shape: Sequence[Dim], mesh: DeviceMesh, placement: Placement) -> tuple[Dim, ...]:
    """Per-worker shape: each sharded dim's block (padded; see the module docstring); for a
    block layout the storage ``[ceil(C / D), *block]``; for a strided dim ``k`` blocks, one per part."""
    if placement.is_block:
        return block_storage_shape(shape, placement.block, mesh.size)
    if placement.is_strided:
        wide, plain = expand_strided(shape, placement)
        return merge_strided(local_shape(wide, mesh, plain), placement)
    out = []
    for i, d in enumerate(shape):
        axes = placement.mesh_axes_of(i)
        out.append(level_extents(d, [mesh.shape[a] for a in axes])[-1] if axes else d)
    return tuple(out)


def level_extents(extent: Dim, counts: Sequence[Dim]) -> list[Dim]:
    """The block size after each nested cut: ``ceil(n / k1)``, ``ceil(ceil(n / k1) / k2)``, ...

    (The nested form, which equals ``ceil(n / (k1 k2))``, is the one every collective writes:
    a gather along the inner axis gives back ``ceil(n / k1)`` from blocks of that form.)"""
    out, block = [], extent
    for k in counts:
        block = sym.ceildiv(block, k)
        out.append(block)
    return out


def block_of(extent: int, placement: Placement, dim: int, coords: Sequence[int], sizes: Sequence[int]) -> tuple[int, int, int]:
    """(start, valid length, local extent) of the block of dim ``dim`` held at mesh ``coords`` (concrete)."""
    axes = placement.mesh_axes_of(dim)
    start, valid, block = 0, extent, extent
    for a in axes:
        block = -(-block // sizes[a])
        start += coords[a] * block
        valid = max(0, min(valid - coords[a] * block, block))
    return start, valid, block


def level_coords(index: np.ndarray, extent: int, counts: Sequence[int]) -> list[np.ndarray]:
    """The coordinate on each nested cut (``counts``, major first) of the block holding each
    ``index`` of a dim of ``extent`` elements (concrete, vectorized :func:`block_of`)."""
    out, rest = [], np.asarray(index, dtype=np.int64)
    for block in level_extents(extent, counts):
        c = rest // block
        out.append(c)
        rest = rest - c * block
    return out


def block_starts(extent: int, counts: Sequence[int]) -> np.ndarray:
    """Sorted starts of the non-empty blocks of a dim of ``extent`` elements cut over ``counts``
    (major first): where a holder's coordinate changes along the dim. At most min(extent, prod counts)."""
    starts, parent = np.zeros(1 if extent > 0 else 0, dtype=np.int64), extent
    for block in level_extents(extent, counts):
        starts = (starts[:, None] + np.arange(0, parent, block, dtype=np.int64)[None, :]).reshape(-1)
        starts = starts[starts < extent]
        parent = block
    return starts


def block_intervals(extent: int, placement: Placement, dim: int, coords: np.ndarray,
                    sizes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """[start, stop) of the real elements of dim ``dim`` in the blocks held at each row of ``coords``
    (an array of mesh coordinates, one row per position): :func:`block_of` for many positions at once."""
    start = np.zeros(len(coords), dtype=np.int64)
    valid = np.full(len(coords), extent, dtype=np.int64)
    block = extent
    for a in placement.mesh_axes_of(dim):
        block = -(-block // sizes[a])
        start = start + coords[:, a] * block
        valid = np.clip(valid - coords[:, a] * block, 0, block)
    return start, start + valid


def block_slices(
    shape: Sequence[int], placement: Placement, coords: Sequence[int], sizes: Sequence[int]
) -> tuple[tuple[slice, ...], tuple[slice, ...], tuple[int, ...]]:
    """(global slices of the block's real elements, the same slices in the local block, local extent)."""
    glob, loc, ext = [], [], []
    for d, n in enumerate(shape):
        start, valid, block = block_of(n, placement, d, coords, sizes)
        glob.append(slice(start, start + valid))
        loc.append(slice(0, valid))
        ext.append(block)
    return tuple(glob), tuple(loc), tuple(ext)


def cut_block(full: np.ndarray, placement: Placement, coords: Sequence[int], sizes: Sequence[int]) -> np.ndarray:
    """The block of ``full`` held at mesh ``coords``, padded with zeros to the local extent (for
    a block layout: that position's chunk storage)."""
    if placement.is_block:
        position = int(np.ravel_multi_index(tuple(coords), tuple(sizes))) if sizes else 0
        return cut_chunks(full, placement.block, int(np.prod(sizes, dtype=object)), position)
    if placement.is_strided:
        wide, plain = expand_strided(full.shape, placement)
        piece = cut_block(full.reshape(tuple(int(d) for d in wide)), plain, coords, sizes)
        return piece.reshape(merge_strided(piece.shape, placement))
    glob, loc, ext = block_slices(full.shape, placement, coords, sizes)
    if tuple(full[glob].shape) == ext:
        return np.array(full[glob], order="C")  # a copy; keeps 0-d arrays 0-d
    out = np.zeros(ext, dtype=full.dtype)
    out[loc] = full[glob]
    return out


def place_block(out: np.ndarray, piece: np.ndarray, placement: Placement, coords: Sequence[int],
                sizes: Sequence[int]) -> None:
    """Write the real elements of the piece held at mesh ``coords`` into the global array ``out``:
    the inverse of :func:`cut_block` (padding is dropped; a strided piece lands in its ``k`` parts,
    a block layout's chunks where they lie)."""
    if placement.is_block:
        position = int(np.ravel_multi_index(tuple(coords), tuple(sizes))) if sizes else 0
        place_chunks(out, piece, placement.block, int(np.prod(sizes, dtype=object)), position)
        return
    if placement.is_strided:
        if not out.flags.c_contiguous:  # reshape would copy, and the writes below would be lost
            raise ValueError("place_block writes a strided piece into a C-contiguous array only")
        wide, plain = expand_strided(out.shape, placement)
        view = out.reshape(tuple(int(d) for d in wide))  # a view: writing it writes ``out``
        place_block(view, piece.reshape(block_slices(view.shape, plain, coords, sizes)[2]), plain, coords, sizes)
        return
    glob, loc, _ = block_slices(out.shape, placement, coords, sizes)
    out[glob] = piece[loc]


_LOCAL_TYPES: dict[DTensorType, TensorType] = {}


def local_type(t: DTensorType) -> TensorType:
    """The per-worker type of ``t``; remembered by the type (the layers of a model ask alike)."""
    found = _LOCAL_TYPES.get(t)
    if found is None:
        if len(_LOCAL_TYPES) >= 4096:
            _LOCAL_TYPES.clear()
        found = _LOCAL_TYPES[t] = TensorType(local_shape(t.shape, t.mesh, t.placement), t.dtype)
    return found


def local_bytes(t: DTensorType) -> Dim:
    return sym.mul(sym.product(local_shape(t.shape, t.mesh, t.placement)), dtype_bytes(t.dtype))


def mesh_coords(position: int, mesh_shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major coordinates of the ``position``-th device of a mesh (concrete sizes)."""
    coords = []
    for size in reversed(mesh_shape):
        coords.append(position % size)
        position //= size
    return tuple(reversed(coords))


def mesh_coords_array(positions: np.ndarray, mesh_shape: Sequence[int]) -> np.ndarray:
    """Row-major coordinates of many mesh positions: one row per position (:func:`mesh_coords`)."""
    positions = np.asarray(positions, dtype=np.int64)
    out = np.zeros((len(positions), len(mesh_shape)), dtype=np.int64)
    for a in reversed(range(len(mesh_shape))):
        out[:, a] = positions % mesh_shape[a]
        positions = positions // mesh_shape[a]
    return out


def ids_are_contiguous(mesh: DeviceMesh) -> bool:
    """True when the mesh's devices are ``start, start+1, ...`` in mesh order (a Range, or a list like one)."""
    ids = mesh.device_ids
    return isinstance(ids, Range) or list(ids) == list(range(ids[0], ids[0] + len(ids)))


def mesh_start(mesh: DeviceMesh) -> Dim:
    """The device id at mesh position 0."""
    ids = mesh.device_ids
    return ids.start if isinstance(ids, Range) else ids[0]


POSITION_PREFIX = "position_of_"


def position_var_name(mesh: DeviceMesh) -> str:
    """The run-time variable holding a worker's position in a mesh whose ids are not a run:
    ``position_of_0_1_3_2`` for ``[0, 1, 3, 2]`` (the name says which list it indexes)."""
    return POSITION_PREFIX + "_".join(str(i) for i in mesh.device_ids)


def is_worker_var(name: str) -> bool:
    """Whether a symbolic variable is bound per worker at run time (not a size)."""
    return name == WORKER_ID or name.startswith(POSITION_PREFIX)


def depends_on_worker(d: Dim) -> bool:
    """Whether a symbolic value differs from worker to worker (it names ``worker_id`` or a position)."""
    return sym.is_symbolic(d) and any(is_worker_var(n) for n in sym.free_vars(d))


def worker_values(meshes, worker: int) -> dict[str, int]:
    """The per-worker variables of ``worker``: its id, and its position in every mesh listed out of
    order (0 where it is not a member; it holds no value of that mesh's tensors)."""
    out = {WORKER_ID: worker}
    for m in meshes:
        if not ids_are_contiguous(m):
            ids = list(m.device_ids)
            out[position_var_name(m)] = ids.index(worker) if worker in ids else 0
    return out


def position_expr(mesh: DeviceMesh, worker: Dim) -> Dim:
    """Symbolic position in the mesh (row-major) of the device whose global id is ``worker``.

    The ``k``-th listed device holds position ``k``: for a range or an ascending run of ids
    that is ``worker - start``; for an explicit list in any other order (``[0, 1, 3, 2]``,
    ``[0, 2]``) it is the run-time variable :func:`position_var_name`, which the runners bind
    per worker (:func:`worker_values`; the TVM export looks it up in the list). Meaningless
    for a worker outside the mesh (such a worker holds no value of the mesh's tensors).
    """
    if ids_are_contiguous(mesh):
        return sym.sub(worker, mesh_start(mesh))
    return sym.var(position_var_name(mesh))


def coord_expr(mesh: DeviceMesh, mesh_axis: int, worker: Dim) -> Dim:
    """Symbolic coordinate along ``mesh_axis`` of the device whose global id is ``worker``
    (0 on an axis of size 1)."""
    if isinstance(mesh.shape[mesh_axis], int) and mesh.shape[mesh_axis] == 1:
        return 0
    pos = position_expr(mesh, worker)
    if mesh.ndim == 1:
        return pos
    stride = sym.product(mesh.shape[mesh_axis + 1 :])
    c = sym.floordiv(pos, stride) if not (isinstance(stride, int) and stride == 1) else pos
    if mesh_axis == 0:
        return c
    return sym.floormod(c, mesh.shape[mesh_axis])


def block_start_expr(mesh: DeviceMesh, placement: Placement, dim: int, extent: Dim, worker: Dim | None = None) -> Dim:
    """Symbolic global index where the running worker's block of tensor dim ``dim`` starts.

    ``extent`` is the dim's global size; ``worker`` defaults to the ``worker_id`` variable (the
    running worker). 0 when the dim is not sharded. The symbolic twin of :func:`block_of`.
    """
    axes = placement.mesh_axes_of(dim)
    who = sym.var(WORKER_ID) if worker is None else worker
    start: Dim = 0
    for axis, block in zip(axes, level_extents(extent, [mesh.shape[a] for a in axes])):
        start = sym.add(start, sym.mul(coord_expr(mesh, axis, who), block))
    return start


def valid_length_expr(mesh: DeviceMesh, placement: Placement, dim: int, extent: Dim, worker: Dim | None = None) -> Dim:
    """Symbolic number of real (not padding) elements in the running worker's block of dim ``dim``.

    Each coordinate is clamped into its axis, which changes nothing for the mesh's own workers
    and lets the simplifier see that an even split has no padding."""
    axes = placement.mesh_axes_of(dim)
    who = sym.var(WORKER_ID) if worker is None else worker
    valid: Dim = extent
    for axis, block in zip(axes, level_extents(extent, [mesh.shape[a] for a in axes])):
        coord = sym.clamp(coord_expr(mesh, axis, who), 0, sym.sub(mesh.shape[axis], 1))
        valid = sym.clamp(sym.sub(valid, sym.mul(coord, block)), 0, block)
    return valid


def block_index(placement: Placement, dim: int, coords: Sequence[int], mesh_shape: Sequence[int]) -> tuple[int, int]:
    """(index, count) of the block of tensor dim ``dim`` held at mesh ``coords``."""
    index, count = 0, 1
    for axis in placement.mesh_axes_of(dim):
        index = index * mesh_shape[axis] + coords[axis]
        count *= mesh_shape[axis]
    return index, count


def concrete_mesh_shape(mesh: DeviceMesh, values: Mapping[str, int] | None = None) -> tuple[int, ...]:
    return tuple(sym.evaluate(s, values or {}) for s in mesh.shape)


def is_shard(spec) -> bool:
    return isinstance(spec, Shard)


def mesh_groups(mesh: DeviceMesh, mesh_axis: int, values: Mapping[str, int] | None = None) -> list[list[int]]:
    """Device ids of each group of a collective along ``mesh_axis``, each in coordinate order."""
    shape = concrete_mesh_shape(mesh, values)
    devices = mesh.device_list(values)
    groups: dict[tuple, list[int]] = {}
    for pos, dev in enumerate(devices):
        coords = mesh_coords(pos, shape)
        key = coords[:mesh_axis] + coords[mesh_axis + 1 :]
        groups.setdefault(key, []).append(dev)
    return list(groups.values())
