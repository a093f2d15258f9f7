"""How partial values combine, per dtype: the one rule of what is exact.

A value laid out ``P[op]`` on a mesh axis is held as one part per worker of that axis, and
the value is the reduction ``op`` of the parts. Whether the parts of a dtype can stand for
every value of it, and how they combine, is declared here once; the sharding rules (which
partial a reduction over a cut dim leaves, which partials an op lets through), propagation,
legalize, the verifier (through :mod:`distir.ir.combine`), the simulator (splitting partial inputs, all-reducing, reassembling)
and the TVM export (Disco's collectives) all read it.

============================  =====================  ==========  ==========  ==========
dtype                         ``P[sum]``             ``P[avg]``  ``P[max]``  ``P[min]``
============================  =====================  ==========  ==========  ==========
float16 bfloat16 float32/64   sum (rounded)          sum / n     max         min
int8 int16 int32 int64 uint8  sum, wrapping around   refused     max         min
bool                          refused                refused     any         all
============================  =====================  ==========  ==========  ==========

- An integer sum wraps around as one device's sum does (modulo 2^bits): the parts of a
  ``P[sum]`` may be anywhere in the dtype's range, and an op lets an integer ``P[sum]``
  through only where it commutes with that wrapping (add, multiply, matmul, negation,
  moves of elements, casts that narrow); not a division, nor a cast that widens or
  turns integers into floats.
- ``P[avg]`` on integers is refused: its parts would have to add up to the count times the
  value, which overflows, and an average of integer parts need not be an integer.
- A bool partial is ``P[max]`` (any) or ``P[min]`` (all); bools do not add up. A reduction
  that sums bools (sum, mean, a matmul, a vocab-parallel lookup: any nonzero term gives
  True) leaves ``P[max]``.
- A mean over a cut dim leaves each worker its block's sum divided by the whole count, added
  up as ``P[sum]``: exact up to rounding for floats (any for bools). An integer mean rounds
  once, after the whole sum (toward zero): shares rounded per worker would not add up to it,
  so it needs its reduced dims whole (they are gathered first). A product over a cut dim
  likewise needs them whole.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .errors import PlacementError

__all__ = ["PARTIAL_KINDS", "combine", "dtype_class", "identity", "partial_refusal", "split"]

PARTIAL_KINDS = ("sum", "max", "min", "avg")

_FLOATS = ("float16", "bfloat16", "float32", "float64")
_INTS = ("int8", "int16", "int32", "int64", "uint8")


def dtype_class(dtype) -> str:
    """"float", "int" (signed or unsigned) or "bool" for a distir dtype name or a numpy dtype."""
    name = str(dtype)
    if name in _FLOATS:
        return "float"
    if name in _INTS or name in ("uint16", "uint32", "uint64"):
        return "int"
    if name == "bool":
        return "bool"
    raise PlacementError(f"no partial rule for dtype '{name}'")


def partial_refusal(kind: str, dtype) -> str | None:
    """Why a value of ``dtype`` cannot be held ``P[kind]`` (one clause), or None when it can."""
    cls = dtype_class(dtype)
    if cls == "bool" and kind in ("sum", "avg"):
        return f"bool values cannot be P[{kind}] (bools do not add up; a bool partial is P[max], any, or P[min], all)"
    if cls == "int" and kind == "avg":
        return (f"{dtype} values cannot be P[avg] (the parts would add up to the count times the value, which "
                "overflows, and an average of integers need not be an integer); use P[sum]")
    return None


def identity(reduction: str, dtype) -> int | float | bool:
    """The value a reduction ignores: what padding and empty blocks hold before it is reduced over."""
    if reduction in ("sum", "avg", "mean"):
        return False if dtype_class(dtype) == "bool" else 0
    if reduction == "prod":
        return 1
    cls = dtype_class(dtype)
    if cls == "bool":
        return reduction == "min"
    if cls == "int":
        info = np.iinfo(np.dtype(str(dtype)))
        return int(info.min if reduction == "max" else info.max)
    return float("-inf") if reduction == "max" else float("inf")


def combine(kind: str, parts: Sequence[np.ndarray] | np.ndarray) -> np.ndarray:
    """The value of partial ``parts`` (a sequence, or stacked on axis 0) under ``P[kind]``, in their dtype.

    Integers add with wrap-around in their dtype; floats add in float64 and round once (as
    distir's host collectives and the simulator's all-reduces do, and as the parts of a partial
    input are made to combine to it exactly)."""
    stacked = parts if isinstance(parts, np.ndarray) else np.stack([np.asarray(p) for p in parts])
    dtype = stacked.dtype
    why = partial_refusal(kind, dtype)
    if why is not None:
        raise PlacementError(why)
    with np.errstate(over="ignore", invalid="ignore"):  # inf and nan are values, as on one device
        if kind == "max":
            return np.asarray(np.maximum.reduce(stacked, axis=0))
        if kind == "min":
            return np.asarray(np.minimum.reduce(stacked, axis=0))
        if dtype_class(dtype) == "int":
            return np.asarray(np.add.reduce(stacked, axis=0, dtype=dtype))  # wraps around, as one device does
        total = np.add.reduce(stacked.astype(np.float64), axis=0)
        if kind == "avg":
            total = total / len(stacked)
        return np.asarray(total).astype(dtype, copy=False)


def _float_parts(value: np.ndarray, kind: str, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Float parts of a ``P[sum]`` or ``P[avg]`` value that combine back to it exactly (noise added
    and cast to a half float would not: the mean of the parts of 0 came back 2^-9 in bfloat16).
    Doubling, halving and negating are exact in every float dtype, so the parts are the value
    times powers of two: for a sum, the value (or two halves of it) and pairs ``+a, -a`` with
    ``a`` the value times 2^k, k in -2..2; for a mean, pairs ``2v, 0`` and ``v`` for an odd
    count (no part holds n times the value). Added in float64 they give the value exactly; where
    the dtype's range does not allow it (overflow, subnormals), a sum is the value on one worker
    and zeros, a mean the value on every worker."""
    dtype = value.dtype
    wide = value.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # the range's end falls back below
        if kind == "avg":
            parts = [2 * wide, np.zeros_like(wide)] * (n // 2) + ([wide] if n % 2 else [])
        else:
            parts = [wide] if n % 2 else [wide / 2, wide / 2]
            for _ in range((n - len(parts)) // 2):
                a = wide * np.exp2(rng.integers(-2, 3, size=value.shape))
                parts += [a, -a]
        cast = rng.permuted(np.stack(parts), axis=0).astype(dtype)
        back = combine(kind, cast)
    exact = (back == value) | (np.isnan(back.astype(np.float64)) & np.isnan(wide))
    if kind == "avg":
        fallback = [value] * n
    else:
        owner = rng.integers(0, n, size=value.shape)
        fallback = [np.where(owner == k, value, np.zeros_like(value)) for k in range(n)]
    return [np.where(exact, p, f).astype(dtype, copy=False) for p, f in zip(cast, fallback)]


def split(value: np.ndarray, kind: str, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``n`` parts whose ``P[kind]`` value is exactly ``value``, spread over the dtype's range
    (integer parts of a sum anywhere in it, parts of a max anywhere below the value), so
    that a wrong combination, or one that wraps where it should not, shows."""
    value = np.asarray(value)
    dtype = value.dtype
    why = partial_refusal(kind, dtype)
    if why is not None:
        raise PlacementError(why)
    if n == 1:
        return [value]
    cls = dtype_class(dtype)
    if kind in ("sum", "avg"):
        if cls == "int":
            info = np.iinfo(dtype)
            parts = [rng.integers(info.min, info.max, size=value.shape, dtype=dtype, endpoint=True) for _ in range(n - 1)]
            rest = np.add.reduce(np.stack(parts), axis=0, dtype=dtype) if parts else np.zeros_like(value)
            return [*parts, np.asarray(np.subtract(value, rest, dtype=dtype))]
        return _float_parts(value, kind, n, rng)
    below = kind == "max"  # the parts of a max lie at or below the value, those of a min at or above it
    if cls == "bool":
        coin = [rng.random(value.shape) < 0.5 for _ in range(n)]
        parts = [value & c if below else value | c for c in coin]
    elif cls == "int":
        info = np.iinfo(dtype)
        wide = value.astype(np.int64) if dtype != np.uint64 else value
        lo, hi = (np.full(value.shape, info.min), wide) if below else (wide, np.full(value.shape, info.max))
        parts = [rng.integers(lo, hi, size=value.shape, endpoint=True).astype(dtype) for _ in range(n)]
    else:
        step = np.abs(rng.standard_normal((n, *value.shape)))
        wide = value.astype(np.float64)
        parts = [np.asarray(wide - s if below else wide + s).astype(dtype) for s in step]
    owner = rng.integers(0, n, size=value.shape)
    return [np.where(owner == k, value, p).astype(dtype, copy=False) for k, p in enumerate(parts)]
