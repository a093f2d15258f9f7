"""Tensor creation (full, zeros, ones) and triangular masks (tril, triu).

full/zeros/ones read no tensor (full reads a scalar), so their outputs start replicated;
their shape argument is a global shape, which `localize` replaces by the per-worker one
so that a worker makes just its shard when the output is sharded. tril/triu look at
element positions in the last two dims; any dim may be sharded, and `localize` shifts the
diagonal offset k by the worker's row and column block starts.
"""

from __future__ import annotations

import numpy as np

from ..errors import TypeInferenceError
from ..ir import sym
from ..ir.expr import Call, ShapeExpr
from ..ir.layout import block_start_expr
from ..ir.op import RelaxForm, ShardingDoc
from ..ir.types import DTensorType, ShapeType, np_dtype
from ._common import (
    LAYOUT_PARTIALS,
    OpDef,
    Param,
    ShardingRule,
    TensorType,
    dim_value,
    dims_factors,
    expect_tensor,
    register_op,
)
from .docgen import partials_text

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


def _create_localize(call, args, local_out, lower=None):
    return Call(call.op, (ShapeExpr(local_out.shape), *args[1:]), call.attrs, call.span)


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
        relax=RelaxForm(
            "relax.op.full",
            ("dtype",),
            emit="distir.tvm.relax.ops:emit_full",
            doc="a constant fill of inf or nan broadcasts it instead (TVM 0.27 cannot legalize that full)",
        ),
        category="creation",
        sharding_doc=ShardingDoc(
            passes="– (outputs start replicated)", partials="a partial scalar fill gives a partial result"
        ),
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
            relax=RelaxForm.same_name(_name, "dtype"),
            category="creation",
            sharding_doc=ShardingDoc(passes="– (outputs start replicated)", partials=""),
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
    f = dims_factors(types[0].ndim)
    # Every dim passes: a worker holding rows [r0, ...) and columns [c0, ...) keeps its element
    # (i, j) where (j + c0) - (i + r0) is on the right side of k, i.e. it masks its block with
    # k + r0 - c0 (see _tri_localize). Masking zeroes the same positions on every worker, so
    # partials of any reduction pass.
    return ShardingRule(inputs=(f,), outputs=(f,), partial=LAYOUT_PARTIALS)


def _tri_localize(call, args, local_out, lower=None):
    """Shift the diagonal by the worker's block offsets in the last two dims."""
    x = call.args[0].type
    if not isinstance(x, DTensorType):
        return Call(call.op, args, call.attrs, call.span)
    row, col = x.ndim - 2, x.ndim - 1
    r0 = block_start_expr(x.mesh, x.placement, row, x.shape[row])
    c0 = block_start_expr(x.mesh, x.placement, col, x.shape[col])
    if sym.equal(r0, 0) and sym.equal(c0, 0):
        return Call(call.op, args, call.attrs, call.span)
    k = call.op.full_attrs(call.attrs)["k"]
    attrs = dict(call.attrs)
    attrs["k"] = sym.sub(sym.add(k, r0), c0)
    return Call(call.op, args, attrs, call.span)


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
            localize=_tri_localize,
            doc=f"{'Lower' if _name == 'tril' else 'Upper'} triangle of the last two dims (diagonal offset k). "
            "Every dim may be sharded: a worker shifts k by its row and column block offsets.",
            relax=RelaxForm(
                f"relax.op.{_name}",
                ("k",),
                emit="distir.tvm.relax.ops:emit_triangle",
                doc="a `k` that depends on the worker masks with index tensors instead",
            ),
            category="creation",
            sharding_doc=ShardingDoc(
                passes="all dims (batch, head, rows, columns)", partials=partials_text(LAYOUT_PARTIALS)
            ),
        )
    )


# ---------------------------------------------------------------- arange


def _arange_len(attrs, op: str = "arange"):
    start, end, step = attrs["start"], attrs["end"], attrs["step"]
    if not isinstance(step, int) or step == 0:
        raise TypeInferenceError(f"R.{op}: step must be a nonzero integer constant, got {sym.to_str(step)}")
    if isinstance(start, int) and isinstance(end, int):
        return len(range(start, end, step))
    # symbolic bounds are taken to be in order (start <= end for a positive step), as TVM takes them
    return sym.ceildiv(sym.sub(end, start), step) if step > 0 else sym.ceildiv(sym.sub(start, end), -step)


def _arange_infer(types, attrs):
    if attrs["end"] is None:
        raise TypeInferenceError("R.arange: needs an end (write R.arange(0, n) for arange(n))")
    return TensorType((_arange_len(attrs),), attrs["dtype"])


def _arange_numpy(xs, attrs, ctx):
    start, end, step = (dim_value(ctx, attrs[k]) for k in ("start", "end", "step"))
    dtype = np_dtype(attrs["dtype"])
    n = len(range(start, end, step))
    # as TVM computes it: start + i * step in the output type
    return (np.asarray(start, dtype) + np.arange(n).astype(dtype) * np.asarray(step, dtype)).astype(dtype)


register_op(
    OpDef(
        name="arange",
        params=(Param("start", "dim", 0), Param("end", "dim", None), Param("step", "dim", 1), Param("dtype", "dtype")),
        infer=_arange_infer,
        numpy=_arange_numpy,
        sharding=_create_rule,
        doc="The integers start, start + step, ... below end (above it for a negative step), in `dtype`.",
        relax=RelaxForm.same_name("arange", "start", "end", "step", "dtype"),
        category="creation",
        sharding_doc=ShardingDoc(passes="– (the output starts replicated; a worker slices its block)", partials=""),
    )
)
