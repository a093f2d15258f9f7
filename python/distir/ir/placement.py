"""Placements: how a tensor lies over each axis of a device mesh.

One spec per mesh axis: ``R`` (replicate), ``S[d]`` (shard tensor dim d over this
mesh axis), ``S[d/k]`` (a *strided* shard, DTensor's ``_StridedShard``: dim d viewed as
``(k, n/k)`` and its inner part cut over this mesh axis, so each worker holds its block of
every one of the k parts, concatenated; docs/strided.md), ``P[op]`` (every worker holds a partial value; the true value is the
reduction ``op`` of them; bare ``P`` means ``P[sum]``). Text form is TVM's:
``"S[1], R"`` means mesh axis 0 shards tensor dim 1 and mesh axis 1 replicates.

When several mesh axes shard the same tensor dim, the lower mesh axis is the major
(outer) split, as in PyTorch DTensor.

A **block layout** ``"B[2, 2, 2]"`` (TT-Metal's ND sharding, docs/blocks.md) stands alone and
applies to the whole mesh: the tensor is cut into chunks of the given shard shape (one entry
per tensor dim, positive, possibly symbolic), the chunks are ordered row-major and dealt
round-robin over the mesh's positions in row-major order (chunk ``j`` to position
``j % D``). It has no per-mesh-axis entries: ``specs``, ``mesh_axes_of``, ``len`` and indexing
raise :class:`BlockLayoutError` on it, so no code written for R / S / P can mistake it for
one of them; :mod:`distir.ir.layout` holds its arithmetic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import DistirError, PlacementError
from . import sym, sym_parse

REDUCE_OPS = ("sum", "max", "min", "avg")


class BlockLayoutError(PlacementError):
    """Code written for per-mesh-axis placements (R / S / P) was handed a block layout."""


@dataclass(frozen=True)
class Replicate:
    def __str__(self) -> str:
        return "R"


@dataclass(frozen=True)
class Shard:
    dim: int

    def __str__(self) -> str:
        return f"S[{self.dim}]"


@dataclass(frozen=True)
class Partial:
    op: str = "sum"

    def __str__(self) -> str:
        return "P" if self.op == "sum" else f"P[{self.op}]"


@dataclass(frozen=True)
class StridedShard:
    """Dim ``dim`` viewed as ``(split, n / split)``, the inner part cut over the mesh axis.

    Its own class (not a :class:`Shard`) so code written for plain shards never takes it for
    one; :func:`distir.ir.layout.expand_strided` turns it into a plain shard of the viewed shape."""

    dim: int
    split: int

    def __str__(self) -> str:
        return f"S[{self.dim}/{self.split}]"


def shard_spec(dim: int, split: int = 1) -> Shard | StridedShard:
    """The spec that cuts dim ``dim`` viewed as ``(split, n / split)`` on its inner part (plain S when split is 1)."""
    return Shard(dim) if split == 1 else StridedShard(dim, split)


Spec = Replicate | Shard | StridedShard | Partial
R = Replicate()

_BLOCK_RE = re.compile(r"^\s*B\s*\[(.*)\]\s*$", re.DOTALL)
_SPEC_RE = re.compile(r"^\s*(?:(R)|S\[\s*(-?\d+)\s*(?:/\s*(-?\d+)\s*)?\]|P(?:\[\s*([a-z]+)\s*\])?)\s*$")


_MAX_INTERNED = 1 << 16  # distinct per-axis layouts kept (a few hundred in practice)
_INTERNED: dict[tuple, "Placement"] = {}  # specs -> their Placement (immutable, so one serves every user)


@dataclass(frozen=True, init=False, eq=False)
class Placement:
    """Per-mesh-axis specs (``block`` None), or a block layout (``block`` the shard shape)."""

    _specs: tuple[Spec, ...]
    block: tuple | None
    _strided: tuple  # (mesh axis, spec) of each strided shard, found once
    _key: tuple  # what equality compares (symbolic shard sizes by structure: PrimExprs do not compare)
    _hash: int
    _axes_by_dim: dict  # tensor dim -> the mesh axes with a plain shard of it (the planner asks millions of times)
    _has_partial: bool

    def __new__(cls, specs: tuple[Spec, ...] = (), block: tuple | None = None):
        """The one Placement of these specs (made once: the planner asks for the same few layouts
        millions of times), or a new block layout."""
        if block is None:
            specs = tuple(specs)
            hit = _INTERNED.get(specs)
            if hit is not None:
                return hit
        self = object.__new__(cls)
        self._init(specs, block)
        if block is None and len(_INTERNED) < _MAX_INTERNED:
            _INTERNED[specs] = self
        return self

    def _init(self, specs: tuple[Spec, ...], block: tuple | None) -> None:
        specs = tuple(specs) if block is None else ()
        block = None if block is None else tuple(sym.normalize(d) for d in block)
        object.__setattr__(self, "_specs", specs)
        object.__setattr__(self, "block", block)
        object.__setattr__(self, "_strided", tuple((i, s) for i, s in enumerate(specs) if isinstance(s, StridedShard)))
        key = specs, None if block is None else tuple(sym.key(d) for d in block)
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_hash", hash(key))
        axes_by_dim: dict[int, tuple[int, ...]] = {}
        for i, s in enumerate(specs):
            if isinstance(s, Shard):
                axes_by_dim[s.dim] = axes_by_dim.get(s.dim, ()) + (i,)
        object.__setattr__(self, "_axes_by_dim", axes_by_dim)
        object.__setattr__(self, "_has_partial", block is None and any(isinstance(s, Partial) for s in specs))

    def __eq__(self, other) -> bool:
        return self is other or (isinstance(other, Placement) and self._hash == other._hash and self._key == other._key)

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):  # rebuilt, not copied: another process hashes strings differently
        return Placement, (self._specs, self.block)

    @staticmethod
    def blocked(shard_shape) -> Placement:
        """The block layout with chunks of ``shard_shape`` (docs/blocks.md; at least one dim)."""
        if not len(shard_shape):
            raise PlacementError("a block layout needs one shard size per tensor dim, and a scalar has none")
        return Placement((), tuple(shard_shape))

    @property
    def is_block(self) -> bool:
        return self.block is not None

    def refuse_block(self, what: str) -> None:
        """Raise BlockLayoutError when this is a block layout: ``what`` handles R / S / P only."""
        if self.block is not None:
            raise BlockLayoutError(
                f"{what}: the block layout \"{self}\" is not handled here (R / S[d] / P layouts only); "
                f"redistribute it to one of those first"
            )

    @property
    def specs(self) -> tuple[Spec, ...]:
        self.refuse_block("per-mesh-axis placement entries")
        return self._specs

    @staticmethod
    def parse(text: str) -> Placement:
        if not isinstance(text, str) or not text.strip():
            raise PlacementError(f"placement must be a non-empty string like \"S[0], R\", got {text!r}")
        if _BLOCK_RE.match(text) or text.strip().startswith("B"):
            return Placement._parse_block(text)
        specs: list[Spec] = []
        for i, part in enumerate(text.split(",")):
            m = _SPEC_RE.match(part)
            if m is None:
                if part.strip().startswith("B"):
                    raise PlacementError(
                        f"placement \"{text}\": a block layout B[...] stands alone, it cannot be one entry of several"
                    )
                raise PlacementError(
                    f"placement \"{text}\": entry {i} ('{part.strip()}') is not R, S[dim], S[dim/parts], P or P[sum|max|min|avg] "
                    f"(or, alone, a block layout B[shard sizes])"
                )
            if m.group(1):
                specs.append(R)
            elif m.group(2) is not None:
                dim = int(m.group(2))
                if dim < 0:
                    raise PlacementError(f"placement \"{text}\": entry {i} shards a negative dim {dim}")
                if m.group(3) is None:
                    specs.append(Shard(dim))
                    continue
                split = int(m.group(3))
                if split < 2:
                    raise PlacementError(
                        f"placement \"{text}\": entry {i} views dim {dim} as {split} parts; a strided shard S[dim/parts] "
                        f"needs at least 2 parts (one part is the plain S[{dim}])"
                    )
                specs.append(StridedShard(dim, split))
            else:
                op = m.group(4) or "sum"
                if op not in REDUCE_OPS:
                    raise PlacementError(
                        f"placement \"{text}\": entry {i} has unknown reduction '{op}' (expected one of {', '.join(REDUCE_OPS)})"
                    )
                specs.append(Partial(op))
        return Placement(tuple(specs))

    @staticmethod
    def _parse_block(text: str) -> Placement:
        m = _BLOCK_RE.match(text)
        if m is None:
            raise PlacementError(
                f"placement \"{text}\": a block layout is written B[d0, d1, ...] (one shard size per tensor dim) "
                f"and stands alone"
            )
        body = m.group(1).strip()
        if not body:
            raise PlacementError(f"placement \"{text}\": a block layout needs one shard size per tensor dim")
        entries = []
        for i, part in enumerate(body.split(",")):
            try:
                d = sym_parse.parse(part)
            except sym.SymbolicError as err:
                raise PlacementError(f"placement \"{text}\": shard size {i} ('{part.strip()}'): {err}") from None
            if isinstance(d, int) and d < 1:
                raise PlacementError(f"placement \"{text}\": shard size {i} is {d}; shard sizes are positive")
            entries.append(d)
        return Placement.blocked(entries)

    @staticmethod
    def replicated(ndim: int) -> Placement:
        return Placement((R,) * ndim)

    def __str__(self) -> str:
        if self.block is not None:
            return "B[" + ", ".join(sym.to_str(d) for d in self.block) + "]"
        return ", ".join(str(s) for s in self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def __bool__(self) -> bool:  # a placement is a value, whatever its length (``p or default`` keeps it)
        return True

    def __getitem__(self, i: int) -> Spec:
        return self.specs[i]

    def replace(self, mesh_axis: int, spec: Spec) -> Placement:
        specs = list(self.specs)
        specs[mesh_axis] = spec
        return Placement(tuple(specs))

    def mesh_axes_of(self, dim: int) -> tuple[int, ...]:
        """Mesh axes that shard tensor dim ``dim``, major first (plain shards only: a strided dim
        has no contiguous block, see :attr:`strided`)."""
        if self.block is not None:
            self.refuse_block("per-mesh-axis placement entries")
        return self._axes_by_dim.get(dim, ())

    @property
    def strided(self) -> tuple[tuple[int, StridedShard], ...]:
        """(mesh axis, spec) of every strided shard (none for a block layout)."""
        return self._strided

    @property
    def is_strided(self) -> bool:
        return bool(self.strided)

    def partial_axes(self) -> tuple[int, ...]:
        """Mesh axes holding partial values (none for a block layout: its chunks are whole values)."""
        if self.block is not None:
            return ()
        return tuple(i for i, s in enumerate(self.specs) if isinstance(s, Partial))

    @property
    def is_replicated(self) -> bool:
        return self.block is None and all(isinstance(s, Replicate) for s in self.specs)

    @property
    def has_partial(self) -> bool:
        return self._has_partial

    def validate(self, mesh_ndim: int, tensor_ndim: int | None, what: str = "placement", shape=None) -> None:
        """Raise PlacementError saying which entry is wrong and why (with ``shape``, also where
        a strided shard's part count does not divide its dim)."""
        if self.block is not None:
            if tensor_ndim is not None and len(self.block) != tensor_ndim:
                raise PlacementError(
                    f"{what} \"{self}\" gives {len(self.block)} shard size{'s' if len(self.block) != 1 else ''} "
                    f"but the tensor has rank {tensor_ndim}: give one per tensor dim"
                )
            for i, d in enumerate(self.block):
                if isinstance(d, int) and d < 1:
                    raise PlacementError(f"{what} \"{self}\": shard size {i} is {d}; shard sizes are positive")
            return
        if len(self.specs) != mesh_ndim:
            raise PlacementError(
                f"{what} \"{self}\" has {len(self.specs)} entr{'y' if len(self.specs) == 1 else 'ies'} "
                f"but the mesh has {mesh_ndim} {'axes' if mesh_ndim != 1 else 'axis'}: give one of R, S[d], P per mesh axis"
            )
        if tensor_ndim is None:
            return
        for i, s in enumerate(self.specs):
            if isinstance(s, (Shard, StridedShard)) and s.dim >= tensor_ndim:
                raise PlacementError(
                    f"{what} \"{self}\": mesh axis {i} shards dim {s.dim}, but the tensor has rank {tensor_ndim} "
                    f"(dims 0..{tensor_ndim - 1})"
                )
        for i, s in self.strided:
            others = [j for j, t in enumerate(self.specs) if j != i and isinstance(t, (Shard, StridedShard)) and t.dim == s.dim]
            if others:
                raise PlacementError(
                    f"{what} \"{self}\": mesh axis {i} is a strided shard of dim {s.dim}, which mesh axis {others[0]} "
                    f"cuts too; a strided dim is cut by one mesh axis only"
                )
            if shape is not None and s.dim < len(shape) and not sym.prove_divisible(shape[s.dim], s.split):
                raise PlacementError(
                    f"{what} \"{self}\": mesh axis {i} views dim {s.dim} (size {sym.to_str(shape[s.dim])}) as "
                    f"{s.split} parts, but {s.split} does not divide it"
                    + ("" if isinstance(shape[s.dim], int) else " for every value of the symbolic size")
                )
            if shape is not None and s.dim < len(shape) and sym.equal(shape[s.dim], s.split):
                raise PlacementError(
                    f"{what} \"{self}\": mesh axis {i} views dim {s.dim} (size {sym.to_str(shape[s.dim])}) as "
                    f"{s.split} parts of one element each, which no worker but the first holds; write S[{s.dim}] or R"
                )
        ops = {s.op for s in self.specs if isinstance(s, Partial)}
        if len(ops) > 1:
            raise PlacementError(
                f"{what} \"{self}\" mixes partial reductions {sorted(ops)}: a value can be partial under one reduction only"
            )
