"""Shared pieces of op declarations: shape rules, axis handling, dtype mapping."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import TypeInferenceError
from ..ir import sym
from ..ir.combine import dtype_class
from ..ir.op import OpDef, Param, register_op
from ..ir.sharding import ShardingRule
from ..ir.sym import Dim
from ..ir.types import TensorType, Type
from ..ir.types import shape_str as _types_shape_str

__all__ = ["Dim", "OpDef", "Param", "ShardingRule", "TensorType", "register_op"]


def expect_tensor(t: Type, op: str, what: str = "input") -> TensorType:
    if not isinstance(t, TensorType):
        raise TypeInferenceError(f"R.{op}: {what} must be a tensor, got {t}")
    return t


def norm_axis(axis: int, ndim: int, op: str) -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise TypeInferenceError(f"R.{op}: axis {axis} is out of range for a tensor of rank {ndim}")
    return axis % ndim if ndim else 0


def norm_axes(axes, ndim: int, op: str) -> list[int]:
    """``None`` means all axes; an int or a list is normalised to sorted non-negative axes."""
    if axes is None:
        return list(range(ndim))
    if isinstance(axes, int):
        axes = [axes]
    out = [norm_axis(a, ndim, op) for a in axes]
    if len(set(out)) != len(out):
        raise TypeInferenceError(f"R.{op}: axis list {list(axes)} repeats an axis")
    return sorted(out)


def broadcast_shapes(shapes: Sequence[tuple[Dim, ...]], op: str) -> tuple[Dim, ...]:
    ndim = max(len(s) for s in shapes)
    out: list[Dim] = []
    for i in range(ndim):
        dim: Dim = 1
        for s in shapes:
            j = i - (ndim - len(s))
            if j < 0:
                continue
            d = s[j]
            if isinstance(d, int) and d == 1:
                continue
            if isinstance(dim, int) and dim == 1:
                dim = d
            elif not sym.equal(dim, d):
                raise TypeInferenceError(
                    f"R.{op}: shapes {', '.join(_shape(s) for s in shapes)} do not broadcast "
                    f"(dim {i} is {sym.to_str(dim)} in one and {sym.to_str(d)} in another)"
                )
        out.append(dim)
    return tuple(out)


def _shape(s) -> str:
    return "(" + ", ".join(sym.to_str(d) for d in s) + ")"


def broadcast_rule(shapes: Sequence[tuple[Dim, ...]], out_ndim: int, partial=None, partial_inputs=None, blocked=()) -> ShardingRule:
    """Sharding rule of a broadcasting elementwise op: aligned dims share a factor; size-1 dims hold none."""
    inputs = []
    for s in shapes:
        off = out_ndim - len(s)
        dims = []
        for j, d in enumerate(s):
            is_one = isinstance(d, int) and d == 1
            dims.append(() if is_one else (f"d{j + off}",))
        inputs.append(tuple(dims))
    out = tuple((f"d{i}",) for i in range(out_ndim))
    return ShardingRule(
        inputs=tuple(inputs),
        outputs=(out,),
        partial=dict(partial or {}),
        partial_inputs=partial_inputs,
        blocked=frozenset(f"d{i}" for i in blocked),
    )


def same_dims_rule(ndim: int, n_inputs: int = 1, partial=None, blocked=()) -> ShardingRule:
    f = tuple((f"d{i}",) for i in range(ndim))
    return ShardingRule(
        inputs=(f,) * n_inputs, outputs=(f,), partial=dict(partial or {}), blocked=frozenset(f"d{i}" for i in blocked)
    )


# ---------------------------------------------------------------- shared partial-passing tables

#: A layout-only op (reshape, permute, slice...) moves elements without combining them, so
#: every reduction of partial values commutes with it.
LAYOUT_PARTIALS = {"sum": "one", "avg": "one", "max": "one", "min": "one"}


def dims_factors(ndim: int, prefix: str = "d") -> tuple[tuple[str, ...], ...]:
    """One factor per dim: ``((d0,), (d1,), ...)``."""
    return tuple((f"{prefix}{i}",) for i in range(ndim))


# ---------------------------------------------------------------- dims


def is_one(d: Dim) -> bool:
    return isinstance(d, int) and d == 1


def dim_value(ctx, d: Dim) -> int:
    """The integer value of a dim: ints as they are, symbolic ones through the run context."""
    if isinstance(d, int):
        return d
    if ctx is None:
        raise TypeInferenceError(f"symbolic value {sym.to_str(d)} needs a run context to evaluate")
    return ctx.dim(d)


def shape_str(shape: Sequence[Dim]) -> str:
    """``(n, 64)``; one-dim shapes as ``(64,)``, as the text format writes them."""
    return _types_shape_str(tuple(shape))


# ---------------------------------------------------------------- numpy helpers

_HALF = ("float16", "bfloat16")


def compute_dtype(dtype) -> np.dtype:
    """The dtype a numpy reference computes in: float64 for floats (accuracy), else as is."""
    if np.issubdtype(np.dtype(dtype), np.floating) or str(dtype) in _HALF:
        return np.dtype(np.float64)
    return np.dtype(dtype)


def as_compute(x: np.ndarray) -> np.ndarray:
    return x.astype(compute_dtype(x.dtype), copy=False)


def is_float_dtype(dtype: str) -> bool:
    return dtype_class(dtype) == "float"


def is_int_dtype(dtype: str) -> bool:
    return dtype_class(dtype) == "int"
