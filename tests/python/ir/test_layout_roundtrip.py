"""cut_block and its inverse place_block: every layout's pieces put back give the array again.

Plain shards, strided shards ``S[d/k]``, block layouts ``B[...]``, replication, 1-D and 2-D meshes,
sizes that do not divide the count, size 1 and sizes below the count. Besides the round trip, each
piece is checked against a cut written here from the layouts' definitions (docs/uneven.md,
docs/strided.md, docs/blocks.md), not from the code under test.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from distir.ir import DeviceMesh, Range
from distir.ir.layout import cut_block, local_shape, mesh_coords, place_block
from distir.ir.placement import Placement, PlacementError

MESHES = [(1,), (2,), (3,), (4,), (5,), (6,), (7,), (2, 2), (2, 3), (3, 2), (1, 3), (2, 1), (3, 3)]
SIZES = [0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 12]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def expected_piece(x: np.ndarray, placement: Placement, coords, mesh) -> np.ndarray:
    """The piece at ``coords``, from the definitions: a dim of ``n`` cut in ``k`` is cut in blocks of
    ``ceil(n/k)`` (nested per mesh axis, lower axis major), a strided dim ``S[d/k]`` is ``k`` parts each
    cut so, a block layout deals its row-major chunks round-robin over the mesh's positions."""
    if placement.is_block:
        block = [int(b) for b in placement.block]
        devices = math.prod(mesh)
        position = 0
        for c, s in zip(coords, mesh):
            position = position * s + c
        grid = [_ceil(n, b) for n, b in zip(x.shape, block)]
        chunks = list(itertools.product(*(range(g) for g in grid)))
        mine = chunks[position::devices]
        out = np.zeros((_ceil(len(chunks), devices), *block), dtype=x.dtype)
        for slot, idx in enumerate(mine):
            src = tuple(slice(i * b, min(n, (i + 1) * b)) for i, b, n in zip(idx, block, x.shape))
            part = x[src]
            out[(slot, *(slice(0, e) for e in part.shape))] = part
        return out
    axes_of: dict[int, list[int]] = {}
    parts_of: dict[int, int] = {}
    for axis, spec in enumerate(placement.specs):
        if hasattr(spec, "dim"):
            axes_of.setdefault(spec.dim, []).append(axis)
            if hasattr(spec, "split"):
                parts_of[spec.dim] = int(spec.split)
    out = x
    for d in range(x.ndim):
        axes = axes_of.get(d, [])
        k = parts_of.get(d, 1)
        n = x.shape[d] // k if k > 1 else x.shape[d]
        start, valid, block = 0, n, n
        for a in axes:
            block = _ceil(block, mesh[a])
            start += coords[a] * block
            valid = max(0, min(valid - coords[a] * block, block))
        segments = []
        for part in range(k):
            take = np.take(out, range(part * n + start, part * n + start + valid), axis=d)
            pad_shape = list(take.shape)
            pad_shape[d] = block - valid
            segments += [take, np.zeros(pad_shape, dtype=x.dtype)]
        out = np.concatenate(segments, axis=d)
    return out


@st.composite
def layouts(draw):
    mesh = draw(st.sampled_from(MESHES))
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.sampled_from(SIZES)) for _ in range(ndim))
    if draw(st.integers(0, 3)) == 0:
        block = tuple(draw(st.integers(1, max(1, n) + 1)) for n in shape)
        return mesh, shape, Placement.blocked(block)
    splits = {d: draw(st.sampled_from([k for k in range(2, 5) if n % k == 0] or [None])) for d, n in enumerate(shape)}
    specs = ["R", *(f"S[{d}]" for d in range(ndim)), *(f"S[{d}/{k}]" for d, k in splits.items() if k)]
    placement = Placement.parse(", ".join(draw(st.sampled_from(specs)) for _ in mesh))
    try:
        placement.validate(len(mesh), ndim, shape=shape)
    except PlacementError:
        assume(False)
    return mesh, shape, placement


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts())
def test_pieces_put_back_give_the_array(case):
    mesh, shape, placement = case
    x = np.arange(1, math.prod(shape) + 1, dtype=np.int64).reshape(shape)  # 0 only in padding
    m = DeviceMesh(mesh, Range(0, math.prod(mesh)))
    local = tuple(int(d) for d in local_shape(shape, m, placement))
    out = np.zeros(shape, dtype=x.dtype)
    seen = np.zeros(shape, dtype=np.int64)
    for pos in range(math.prod(mesh)):
        coords = mesh_coords(pos, mesh)
        piece = cut_block(x, placement, coords, mesh)
        assert piece.shape == local, (pos, piece.shape, local)
        np.testing.assert_array_equal(piece, expected_piece(x, placement, coords, mesh))
        alone = np.zeros(shape, dtype=x.dtype)
        place_block(alone, piece, placement, coords, mesh)
        seen += alone != 0
        place_block(out, piece, placement, coords, mesh)
        # every real element of the piece lands where it came from
        assert np.count_nonzero(alone) == np.count_nonzero(piece)
        np.testing.assert_array_equal(alone[alone != 0], x[alone != 0])
    np.testing.assert_array_equal(out, x)
    # each element is held as many times as the layout replicates it (once per position when all axes are R)
    copies = 1 if placement.is_block else math.prod(s for s, spec in zip(mesh, placement.specs) if not hasattr(spec, "dim"))
    assert (seen == copies).all()


@pytest.mark.parametrize("text, shape, mesh", [
    ("S[1/3]", (2, 30), (4,)),  # strided: parts of 10 in blocks of 3, the last padded per part
    ("S[0/3]", (6, 5), (7,)),  # more workers than rows in a part: most hold padding only
    ("S[0/2], S[1]", (4, 5), (2, 3)),
    ("S[1], S[0/3]", (9, 4), (2, 2)),
    ("B[2, 3]", (5, 7), (3,)),
    ("B[1, 1]", (1, 1), (2, 3)),
    ("S[0], S[0]", (5, 2), (2, 3)),  # nested: 5 in 2 blocks of 3, each cut in 3 blocks of 1
])
def test_named_layouts_round_trip(text, shape, mesh):
    placement = Placement.parse(text)
    x = np.arange(1, math.prod(shape) + 1, dtype=np.float32).reshape(shape)
    out = np.zeros(shape, dtype=x.dtype)
    for pos in range(math.prod(mesh)):
        coords = mesh_coords(pos, mesh)
        piece = cut_block(x, placement, coords, mesh)
        np.testing.assert_array_equal(piece, expected_piece(x, placement, coords, mesh))
        place_block(out, piece, placement, coords, mesh)
    np.testing.assert_array_equal(out, x)


def test_a_strided_piece_is_refused_for_an_array_it_cannot_write_through():
    x = np.arange(12.0).reshape(2, 6)
    piece = cut_block(x, Placement.parse("S[1/2]"), (0,), (2,))
    with pytest.raises(ValueError, match="C-contiguous array only"):
        place_block(np.zeros((6, 2)).T, piece, Placement.parse("S[1/2]"), (0,), (2,))
