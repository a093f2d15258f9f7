"""Reductions over axes: sum, mean, max, min (with keepdims)."""

from __future__ import annotations

import numpy as np

from ..ir import sym
from ..ir.op import RelaxForm, ShardingDoc
from ._common import (
    OpDef,
    Param,
    ShardingRule,
    TensorType,
    as_compute,
    dim_value,
    expect_tensor,
    norm_axes,
    register_op,
)
from .docgen import partials_text

# name -> (numpy function, partial kind produced by reducing a sharded dim, partial kinds passed through)
_REDUCE = {
    "sum": (np.sum, "sum", {"sum": "one", "avg": "one"}),
    # a mean over a sharded dim leaves each worker its block's sum over the whole count: P[sum]
    # (blocks of an uneven split hold different counts, so an average of means would be wrong)
    "mean": (np.mean, "sum", {"sum": "one", "avg": "one"}),
    "max": (np.max, "max", {"max": "one"}),
    "min": (np.min, "min", {"min": "one"}),
    "prod": (np.prod, None, {}),
}


def _infer(name):
    def infer(types, attrs):
        x = expect_tensor(types[0], name)
        axes = norm_axes(attrs["axis"], x.ndim, name)
        if attrs["keepdims"]:
            shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        else:
            shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        return TensorType(shape, x.dtype)

    return infer


def _rule(name, produced, passes):
    def rule(types, attrs, outs):
        x = types[0]
        axes = norm_axes(attrs["axis"], x.ndim, name)
        ins = tuple((f"d{i}",) for i in range(x.ndim))
        if attrs["keepdims"]:
            out = tuple(() if i in axes else (f"d{i}",) for i in range(x.ndim))
        else:
            out = tuple((f"d{i}",) for i in range(x.ndim) if i not in axes)
        reductions = {f"d{i}": produced for i in axes} if produced else {}
        blocked = frozenset() if produced else frozenset(f"d{i}" for i in axes)
        return ShardingRule(inputs=(ins,), outputs=(out,), reductions=reductions, partial=passes, blocked=blocked)

    return rule


def _numpy(fn, wide: bool):
    def run(xs, attrs, ctx):
        x = xs[0]
        axes = tuple(norm_axes(attrs["axis"], x.ndim, "reduce"))
        src = as_compute(x) if wide else x  # sums accumulate in float64; max/min are exact anyway
        return np.asarray(fn(src, axis=axes, keepdims=attrs["keepdims"])).astype(x.dtype, copy=False)

    return run


def _gives(produced: str | None) -> str:
    if produced is None:
        return ""
    return f"reduced dim → `P[{produced}]`"


def _mean_localize(call, args, local_out, lower=None):
    """A mean over sharded axes: each worker's sum divided by the whole count (R.partial_mean)."""
    from ..ir.expr import Call
    from ..ir.op import get_op
    from ..ir.types import DTensorType

    x = call.args[0].type
    attrs = call.op.full_attrs(call.attrs)
    axes = norm_axes(attrs["axis"], x.ndim, "mean")
    if not isinstance(x, DTensorType) or not any(x.placement.mesh_axes_of(a) for a in axes):
        return Call(call.op, args, call.attrs, call.span)
    count = 1
    for a in axes:
        count = sym.mul(count, x.shape[a])
    return Call(get_op("partial_mean"), args, {"axis": attrs["axis"], "keepdims": attrs["keepdims"], "count": count},
                call.span)


for _name, (_fn, _produced, _passes) in _REDUCE.items():
    register_op(
        OpDef(
            name=_name,
            params=(Param("x", "tensor"), Param("axis", "axes", None), Param("keepdims", "bool", False)),
            infer=_infer(_name),
            numpy=_numpy(_fn, wide=_name in ("sum", "mean", "prod")),
            sharding=_rule(_name, _produced, _passes),
            localize=_mean_localize if _name == "mean" else None,
            doc=f"Reduce by {_name} over `axis` (all axes when None).",
            relax=RelaxForm.same_name(_name, "axis", "keepdims"),
            category="reduction",
            sharding_doc=ShardingDoc(
                passes="kept dims",
                blocked="" if _produced else "reduced dims",
                gives_partial=_gives(_produced),
                partials=partials_text(_passes),
            ),
        )
    )


def _partial_mean_numpy(xs, attrs, ctx):
    x = xs[0]
    axes = tuple(norm_axes(attrs["axis"], x.ndim, "partial_mean"))
    total = np.sum(as_compute(x), axis=axes, keepdims=attrs["keepdims"])
    return np.asarray(total / dim_value(ctx, attrs["count"])).astype(x.dtype, copy=False)


register_op(
    OpDef(
        name="partial_mean",
        params=(Param("x", "tensor"), Param("axis", "axes", None), Param("keepdims", "bool", False), Param("count", "dim")),
        infer=_infer("partial_mean"),
        numpy=_partial_mean_numpy,
        sharding=_rule("partial_mean", None, {}),
        doc="The sum over `axis` divided by `count`: a worker's share of a mean over a sharded dim "
        "(lowering writes it; the shares add up to the mean).",
        relax=RelaxForm(emit="distir.tvm.ops:emit_partial_mean", doc="sum, then divide by count"),
        category="reduction",
        sharding_doc=ShardingDoc(passes="– (local view only)"),
    )
)
