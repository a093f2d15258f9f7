"""Tensor creation (full, zeros, ones) and triangular masks (tril, triu).

full/zeros/ones read no tensor (full reads a scalar), so their outputs start replicated;
their shape argument is a global shape, which `localize` replaces by the per-worker one
so that a worker makes just its shard when the output is sharded. tril/triu look at
element positions in the last two dims, so those stay whole; leading (batch) dims pass.
"""

from __future__ import annotations

import numpy as np

from ..errors import TypeInferenceError
from ..ir.expr import ShapeExpr
from ..ir.types import ShapeType
from ._common import (
    LAYOUT_PARTIALS,
    OpDef,
    Param,
    ShardingRule,
    TensorType,
    dim_value,
    dims_factors,
    expect_tensor,
    np_dtype,
    register_op,
)

# ---------------------------------------------------------------- full / zeros / ones


def _shape_of(t, op: str) -> tuple:
    if not isinstance(t, ShapeType) or t.values is None:
        raise TypeInferenceError(f"R.{op}: the shape must be a shape value such as R.shape([4, n]), got {t}")
    for d in t.values:
        if isinstance(d, int) and d < 0:
            raise TypeInferenceError(f"R.{op}: shape dims must be non-negative, got {d}")
    return tuple(t.values)


def _full_infer(types, attrs):
    shape = _shape_of(types[0], "full")
    fill = expect_tensor(types[1], "full", "fill_value")
    if fill.ndim != 0:
        raise TypeInferenceError(f"R.full: fill_value must be a scalar (rank-0) tensor, got rank {fill.ndim}")
    return TensorType(shape, attrs["dtype"] or fill.dtype)


def _const_infer(op: str):
    def infer(types, attrs):
        return TensorType(_shape_of(types[0], op), attrs["dtype"])

    return infer


def _create_rule(types, attrs, outs):
    # types: the tensor inputs (full's scalar fill_value, or none); every output dim is new.
    # full(shape, p) broadcasts p, so a partial fill value gives a partial result.
    return ShardingRule(inputs=((),) * len(types), outputs=(dims_factors(outs[0].ndim),), partial=LAYOUT_PARTIALS)


def _create_localize(args, attrs, local_out):
    return (ShapeExpr(local_out.shape), *args[1:]), attrs


def _shape_value(ctx, shape) -> tuple[int, ...]:
    return tuple(dim_value(ctx, d) for d in shape)


def _full_numpy(xs, attrs, ctx):
    fill = np.asarray(xs[1])
    dtype = np_dtype(attrs["dtype"]) if attrs["dtype"] else fill.dtype
    return np.full(_shape_value(ctx, xs[0]), fill, dtype=dtype)


register_op(
    OpDef(
        name="full",
        params=(Param("shape", "shape"), Param("fill_value", "tensor"), Param("dtype", "optional_dtype", None)),
        infer=_full_infer,
        numpy=_full_numpy,
        sharding=_create_rule,
        localize=_create_localize,
        doc="A tensor of `shape` filled with the scalar fill_value (dtype defaults to fill_value's).",
    )
)

def _const_numpy(value: int):
    def numpy(xs, attrs, ctx):
        return np.full(_shape_value(ctx, xs[0]), value, dtype=np_dtype(attrs["dtype"]))

    return numpy


for _name, _value in (("zeros", 0), ("ones", 1)):
    register_op(
        OpDef(
            name=_name,
            params=(Param("shape", "shape"), Param("dtype", "dtype")),
            infer=_const_infer(_name),
            numpy=_const_numpy(_value),
            sharding=_create_rule,
            localize=_create_localize,
            doc=f"A tensor of `shape` filled with {_value}.",
        )
    )


# ---------------------------------------------------------------- tril / triu


def _tri_infer(op: str):
    def infer(types, attrs):
        x = expect_tensor(types[0], op)
        if x.ndim < 2:
            raise TypeInferenceError(
                f"R.{op}: needs a tensor of rank at least 2 (a matrix or a batch of them), got rank {x.ndim}"
            )
        return x

    return infer


def _tri_rule(types, attrs, outs):
    x = types[0]
    f = dims_factors(x.ndim)
    # masking zeroes the same positions on every worker, so partials of any reduction pass
    return ShardingRule(
        inputs=(f,), outputs=(f,), blocked=frozenset({f"d{x.ndim - 2}", f"d{x.ndim - 1}"}), partial=LAYOUT_PARTIALS
    )


def _tri_numpy(fn):
    def numpy(xs, attrs, ctx):
        return fn(xs[0], dim_value(ctx, attrs["k"]))

    return numpy


for _name, _fn in (("tril", np.tril), ("triu", np.triu)):
    register_op(
        OpDef(
            name=_name,
            params=(Param("x", "tensor"), Param("k", "dim", 0)),
            infer=_tri_infer(_name),
            numpy=_tri_numpy(_fn),
            sharding=_tri_rule,
            doc=f"{'Lower' if _name == 'tril' else 'Upper'} triangle of the last two dims (diagonal offset k); "
            "those two dims must be whole, batch dims pass.",
        )
    )
