"""Types of values: tensors (local or global view), distributed tensors, tuples, shapes, scalars.

Shapes hold ``int`` or symbolic PrimExprs (see :mod:`distir.ir.sym`); equality and
hashing go through ``sym`` so two types are equal when their dims provably are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import DistirError
from . import sym
from .mesh import DeviceMesh
from .placement import Placement
from .sym import Dim

DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")


def check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise DistirError(f"unknown dtype '{dtype}' (known: {', '.join(DTYPES)})")
    return dtype


def np_dtype(dtype: str):
    """The numpy dtype of a distir dtype name (bfloat16 through ml_dtypes)."""
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(dtype)


def dtype_bytes(dtype: str) -> int:
    if dtype == "bfloat16":
        return 2
    if dtype == "bool":
        return 1
    return int(np.dtype(dtype).itemsize)


def _shape_eq(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> bool:
    if a is b:
        return True
    return len(a) == len(b) and all(x is y or sym.equal(x, y) for x, y in zip(a, b))


def _shape_key(s: tuple[Dim, ...]):
    return tuple(sym.key(d) for d in s)


def shape_str(shape: Sequence[Dim]) -> str:
    return "(" + ", ".join(sym.to_str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


class Type:
    """Base of all types."""

    def substitute(self, values) -> Type:
        return self


@dataclass(frozen=True, eq=False)
class TensorType(Type):
    shape: tuple[Dim, ...]
    dtype: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(sym.normalize(d) for d in self.shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not TensorType:
            return False
        if self._key == other._key:
            return True  # structurally the same (the common case, and a cheap one: keys are kept)
        return self.dtype == other.dtype and _shape_eq(self.shape, other.shape)

    @property
    def _key(self) -> tuple:
        k = self.__dict__.get("_structure")
        if k is None:  # immutable: keyed once (types key the inference and cost memos)
            k = ("T", _shape_key(self.shape), self.dtype)
            object.__setattr__(self, "_structure", k)
        return k

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(self._key)
            object.__setattr__(self, "_hash", h)
        return h

    def __str__(self) -> str:
        return f"Tensor({shape_str(self.shape)}, \"{self.dtype}\")"

    def __reduce__(self):  # the cached hash is not carried (another process hashes strings differently)
        return TensorType, (self.shape, self.dtype)

    def substitute(self, values) -> TensorType:
        return TensorType(tuple(sym.substitute(d, values) for d in self.shape), self.dtype)


@dataclass(frozen=True, eq=False)
class DTensorType(Type):
    """A distributed tensor in the global view: global shape, laid out on ``mesh`` by ``placement``."""

    shape: tuple[Dim, ...]
    dtype: str
    mesh: DeviceMesh
    placement: Placement

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(sym.normalize(d) for d in self.shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def tensor(self) -> TensorType:
        return TensorType(self.shape, self.dtype)

    def with_placement(self, placement: Placement) -> DTensorType:
        return DTensorType(self.shape, self.dtype, self.mesh, placement)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not DTensorType:
            return False
        if self._key == other._key:
            return True  # structurally the same (the common case, and a cheap one: keys are kept)
        if self.dtype != other.dtype or self.placement != other.placement:
            return False
        return _shape_eq(self.shape, other.shape) and self.mesh == other.mesh

    @property
    def _key(self) -> tuple:
        k = self.__dict__.get("_structure")
        if k is None:
            k = ("D", _shape_key(self.shape), self.dtype, self.mesh.key, self.placement)
            object.__setattr__(self, "_structure", k)
        return k

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(self._key)
            object.__setattr__(self, "_hash", h)
        return h

    def __str__(self) -> str:
        return f"DTensor({shape_str(self.shape)}, \"{self.dtype}\", {self.mesh.shape_str()}, \"{self.placement}\")"

    def __reduce__(self):
        return DTensorType, (self.shape, self.dtype, self.mesh, self.placement)

    def substitute(self, values) -> DTensorType:
        return DTensorType(
            tuple(sym.substitute(d, values) for d in self.shape), self.dtype, self.mesh.substitute(values), self.placement
        )


@dataclass(frozen=True, eq=False)
class TupleType(Type):
    fields: tuple[Type, ...]

    def __eq__(self, other: object) -> bool:
        return type(other) is TupleType and self.fields == other.fields

    def __hash__(self) -> int:
        return hash(("Tuple", self.fields))

    def __str__(self) -> str:
        return "Tuple(" + ", ".join(str(f) for f in self.fields) + ")"

    def substitute(self, values) -> TupleType:
        return TupleType(tuple(f.substitute(values) for f in self.fields))


@dataclass(frozen=True, eq=False)
class ShapeType(Type):
    """A shape value; ``values`` when known (``R.shape([4, n])``), else only ``ndim``."""

    ndim: int
    values: tuple[Dim, ...] | None = None

    def __eq__(self, other: object) -> bool:
        if type(other) is not ShapeType or self.ndim != other.ndim:
            return False
        if self.values is None or other.values is None:
            return self.values is None and other.values is None
        return _shape_eq(self.values, other.values)

    def __hash__(self) -> int:
        return hash(("Shape", self.ndim, None if self.values is None else _shape_key(self.values)))

    def __str__(self) -> str:
        return f"Shape({shape_str(self.values) if self.values is not None else self.ndim})"

    def substitute(self, values) -> ShapeType:
        if self.values is None:
            return self
        return ShapeType(self.ndim, tuple(sym.substitute(d, values) for d in self.values))


@dataclass(frozen=True)
class PrimType(Type):
    """A scalar (``R.Prim("int64")``)."""

    dtype: str

    def __str__(self) -> str:
        return f"Prim(\"{self.dtype}\")"


def is_tensor_like(t: Type) -> bool:
    return isinstance(t, (TensorType, DTensorType))


def nbytes(t: TensorType | DTensorType) -> Dim:
    """Size in bytes (symbolic when the shape is)."""
    return sym.mul(sym.product(t.shape), dtype_bytes(t.dtype))


def free_vars(t: Type) -> set[str]:
    """Names of symbolic variables in a type (shapes and mesh sizes)."""
    out: set[str] = set()
    if isinstance(t, (TensorType, DTensorType)):
        for d in t.shape:
            out |= sym.free_vars(d)
        if isinstance(t, DTensorType):
            for d in t.mesh.shape:
                out |= sym.free_vars(d)
    elif isinstance(t, TupleType):
        for f in t.fields:
            out |= free_vars(f)
    elif isinstance(t, ShapeType) and t.values is not None:
        for d in t.values:
            out |= sym.free_vars(d)
    return out
