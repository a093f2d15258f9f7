"""Device meshes: an N-D grid of devices whose sizes may be symbolic (``num_workers``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import DistirError
from . import sym
from .sym import Dim


class MeshError(DistirError):
    """A device mesh is malformed."""


#: the most devices a mesh of concrete sizes may have (2^20, past the largest machines built): a
#: mesh is checked when it is built (parsed, by the builder, or by specialize binding its sizes), so
#: nothing downstream ever lists or prices more devices than this
MAX_DEVICES = 1 << 20


@dataclass(frozen=True, eq=False)
class Range:
    """Device ids ``start, start+1, ..., stop-1`` (``I.Range(0, "num_workers")``)."""

    start: Dim
    stop: Dim

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Range) and sym.equal(self.start, other.start) and sym.equal(self.stop, other.stop)

    def __hash__(self) -> int:
        return hash((sym.key(self.start), sym.key(self.stop)))

    @property
    def size(self) -> Dim:
        return sym.sub(self.stop, self.start)


@dataclass(frozen=True, eq=False)
class DeviceMesh:
    """``shape``: devices per mesh axis; ``device_ids``: a Range or an explicit tuple of ints."""

    shape: tuple[Dim, ...]
    device_ids: Range | tuple[int, ...]
    axis_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(sym.normalize(s) for s in self.shape))
        if not self.shape:
            raise MeshError("a device mesh needs at least one axis")
        for i, s in enumerate(self.shape):
            if isinstance(s, int) and s < 1:
                raise MeshError(f"mesh axis {i} has size {s}; sizes must be at least 1")
        if self.axis_names is not None and len(self.axis_names) != len(self.shape):
            raise MeshError(f"mesh has {len(self.shape)} axes but {len(self.axis_names)} axis names")
        total = self.size
        if isinstance(total, int) and total > MAX_DEVICES:
            raise MeshError(
                f"mesh of shape {self.shape_str()} has {total} devices; distir handles meshes of at most "
                f"{MAX_DEVICES} (2^20) devices"
            )
        if isinstance(self.device_ids, Range):
            start = self.device_ids.start
            if isinstance(start, int) and start < 0:
                raise MeshError(f"mesh device ids start at {start}; device ids must be non-negative")
            if not sym.equal(self.device_ids.size, total):
                raise MeshError(
                    f"mesh of shape {self.shape_str()} has {sym.to_str(total)} devices but its device range "
                    f"holds {sym.to_str(self.device_ids.size)}"
                )
        else:
            ids = tuple(self.device_ids)
            object.__setattr__(self, "device_ids", ids)
            if not isinstance(total, int):
                raise MeshError("a mesh with symbolic size needs its device ids as a range, e.g. I.Range(0, \"num_workers\")")
            if len(ids) != total:
                raise MeshError(f"mesh of shape {self.shape_str()} has {total} devices but {len(ids)} device ids are listed")
            if any(i < 0 for i in ids):
                raise MeshError(f"mesh device ids {list(ids)} include a negative id; device ids must be non-negative")
            if len(set(ids)) != len(ids):
                raise MeshError(f"mesh device ids {list(ids)} repeat a device")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> Dim:
        return sym.product(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(s, int) for s in self.shape)

    @property
    def unit_axes(self) -> tuple[int, ...]:
        """The axes of one device (static size 1): every layout along one holds what R holds."""
        return tuple(a for a, d in enumerate(self.shape) if isinstance(d, int) and d == 1)

    def shape_str(self) -> str:
        return "(" + ", ".join(sym.to_str(s) for s in self.shape) + ("," if len(self.shape) == 1 else "") + ")"

    def device_list(self, values: dict[str, int] | None = None) -> list[int]:
        """Concrete device ids, in mesh (row-major) order."""
        if isinstance(self.device_ids, Range):
            start = sym.evaluate(self.device_ids.start, values or {})
            stop = sym.evaluate(self.device_ids.stop, values or {})
            return list(range(start, stop))
        return list(self.device_ids)

    @property
    def key(self) -> tuple:
        """Structural: meshes of equal keys are equal (and hash alike)."""
        k = self.__dict__.get("_key")
        if k is None:  # immutable: keyed once
            r = self.device_ids
            ids = ("range", sym.key(r.start), sym.key(r.stop)) if isinstance(r, Range) else tuple(r)
            k = (tuple(sym.key(s) for s in self.shape), ids, self.axis_names)
            object.__setattr__(self, "_key", k)
        return k

    def __eq__(self, other: object) -> bool:
        if self is other or (isinstance(other, DeviceMesh) and self.key == other.key):
            return True
        return (
            isinstance(other, DeviceMesh)
            and len(self.shape) == len(other.shape)
            and all(sym.equal(a, b) for a, b in zip(self.shape, other.shape))
            and self.device_ids == other.device_ids
            and self.axis_names == other.axis_names
        )

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:  # immutable: hashed once
            h = hash(self.key)
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self):  # the cached hash and key are not carried (another process hashes strings differently)
        return {k: v for k, v in self.__dict__.items() if k not in ("_hash", "_key")}

    def substitute(self, values) -> DeviceMesh:
        ids = self.device_ids
        if isinstance(ids, Range):
            ids = Range(sym.substitute(ids.start, values), sym.substitute(ids.stop, values))
        return DeviceMesh(tuple(sym.substitute(s, values) for s in self.shape), ids, self.axis_names)


def make_mesh(shape: Sequence[Dim], device_ids, axis_names=None) -> DeviceMesh:
    return DeviceMesh(tuple(shape), device_ids, tuple(axis_names) if axis_names else None)
