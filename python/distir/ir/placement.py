"""Placements: how a tensor lies over each axis of a device mesh.

One spec per mesh axis: ``R`` (replicate), ``S[d]`` (shard tensor dim d over this
mesh axis), ``P[op]`` (every worker holds a partial value; the true value is the
reduction ``op`` of them; bare ``P`` means ``P[sum]``). Text form is TVM's:
``"S[1], R"`` means mesh axis 0 shards tensor dim 1 and mesh axis 1 replicates.

When several mesh axes shard the same tensor dim, the lower mesh axis is the major
(outer) split, as in PyTorch DTensor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import DistirError

REDUCE_OPS = ("sum", "max", "min", "avg")


class PlacementError(DistirError):
    """A placement is malformed or does not fit its mesh or tensor."""


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


Spec = Replicate | Shard | Partial
R = Replicate()

_SPEC_RE = re.compile(r"^\s*(?:(R)|S\[\s*(-?\d+)\s*\]|P(?:\[\s*([a-z]+)\s*\])?)\s*$")


@dataclass(frozen=True)
class Placement:
    specs: tuple[Spec, ...]

    @staticmethod
    def parse(text: str) -> Placement:
        if not isinstance(text, str) or not text.strip():
            raise PlacementError(f"placement must be a non-empty string like \"S[0], R\", got {text!r}")
        specs: list[Spec] = []
        for i, part in enumerate(text.split(",")):
            m = _SPEC_RE.match(part)
            if m is None:
                raise PlacementError(
                    f"placement \"{text}\": entry {i} ('{part.strip()}') is not R, S[dim], P or P[sum|max|min|avg]"
                )
            if m.group(1):
                specs.append(R)
            elif m.group(2) is not None:
                dim = int(m.group(2))
                if dim < 0:
                    raise PlacementError(f"placement \"{text}\": entry {i} shards a negative dim {dim}")
                specs.append(Shard(dim))
            else:
                op = m.group(3) or "sum"
                if op not in REDUCE_OPS:
                    raise PlacementError(
                        f"placement \"{text}\": entry {i} has unknown reduction '{op}' (expected one of {', '.join(REDUCE_OPS)})"
                    )
                specs.append(Partial(op))
        return Placement(tuple(specs))

    @staticmethod
    def replicated(ndim: int) -> Placement:
        return Placement((R,) * ndim)

    def __str__(self) -> str:
        return ", ".join(str(s) for s in self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def __getitem__(self, i: int) -> Spec:
        return self.specs[i]

    def replace(self, mesh_axis: int, spec: Spec) -> Placement:
        specs = list(self.specs)
        specs[mesh_axis] = spec
        return Placement(tuple(specs))

    def mesh_axes_of(self, dim: int) -> tuple[int, ...]:
        """Mesh axes that shard tensor dim ``dim``, major first."""
        return tuple(i for i, s in enumerate(self.specs) if isinstance(s, Shard) and s.dim == dim)

    def partial_axes(self) -> tuple[int, ...]:
        return tuple(i for i, s in enumerate(self.specs) if isinstance(s, Partial))

    @property
    def is_replicated(self) -> bool:
        return all(isinstance(s, Replicate) for s in self.specs)

    @property
    def has_partial(self) -> bool:
        return any(isinstance(s, Partial) for s in self.specs)

    def validate(self, mesh_ndim: int, tensor_ndim: int | None, what: str = "placement") -> None:
        """Raise PlacementError saying which entry is wrong and why."""
        if len(self.specs) != mesh_ndim:
            raise PlacementError(
                f"{what} \"{self}\" has {len(self.specs)} entr{'y' if len(self.specs) == 1 else 'ies'} "
                f"but the mesh has {mesh_ndim} {'axes' if mesh_ndim != 1 else 'axis'}: give one of R, S[d], P per mesh axis"
            )
        if tensor_ndim is None:
            return
        for i, s in enumerate(self.specs):
            if isinstance(s, Shard) and s.dim >= tensor_ndim:
                raise PlacementError(
                    f"{what} \"{self}\": mesh axis {i} shards dim {s.dim}, but the tensor has rank {tensor_ndim} "
                    f"(dims 0..{tensor_ndim - 1})"
                )
        ops = {s.op for s in self.specs if isinstance(s, Partial)}
        if len(ops) > 1:
            raise PlacementError(
                f"{what} \"{self}\" mixes partial reductions {sorted(ops)}: a value can be partial under one reduction only"
            )
