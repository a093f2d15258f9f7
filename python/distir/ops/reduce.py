"""Reductions over axes: sum, mean, max, min (with keepdims)."""

from __future__ import annotations

import numpy as np

from ..ir import sym
from ..ir.combine import dtype_class, exact_partials, leaves
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

def _mean(x: np.ndarray, axis, keepdims: bool) -> np.ndarray:
    """The mean; of integers exactly, rounded toward zero once (as numpy's cast of the float mean
    rounds), without the float64 sum that loses the last digits of large int64 values."""
    if dtype_class(x.dtype) != "int":
        return np.mean(x, axis=axis, keepdims=keepdims)
    wide = x.astype(np.int64)
    count = max(int(np.prod([x.shape[a] for a in axis])) if x.ndim else 1, 1)  # the mean of nothing is 0
    q, r = np.divmod(wide, count)  # x = q * count + r with 0 <= r < count: no sum below overflows for good
    quotients = np.sum(q, axis=axis, keepdims=keepdims, dtype=np.int64)  # wraps, then lands in range again
    remainders = np.sum(r, axis=axis, keepdims=keepdims, dtype=np.int64)
    with np.errstate(over="ignore"):
        floor = quotients + remainders // count
    return floor + ((floor < 0) & (remainders % count != 0))


# name -> (numpy function, partial kinds passed through); the partial a cut reduced dim leaves, per
# dtype, is distir.ir.combine's (a mean over a cut dim leaves each worker its block's sum over the
# whole count, P[sum]: blocks of an uneven split hold different counts, so an average of means would be wrong)
_REDUCE = {
    "sum": (np.sum, {"sum": "one", "avg": "one"}),
    "mean": (_mean, {"sum": "one", "avg": "one"}),
    "max": (np.max, {"max": "one"}),
    "min": (np.min, {"min": "one"}),
    "prod": (np.prod, {}),
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


def _rule(name, passes):
    def rule(types, attrs, outs):
        x = types[0]
        # an integer mean truncates: the sum of rounded shares is not the rounded mean
        passes_here = exact_partials(passes, x.dtype, wrapping=name != "mean")
        produced = leaves(name, x.dtype) if name != "partial_mean" else None
        axes = norm_axes(attrs["axis"], x.ndim, name)
        ins = tuple((f"d{i}",) for i in range(x.ndim))
        if attrs["keepdims"]:
            out = tuple(() if i in axes else (f"d{i}",) for i in range(x.ndim))
        else:
            out = tuple((f"d{i}",) for i in range(x.ndim) if i not in axes)
        reductions = {f"d{i}": produced for i in axes} if produced else {}
        blocked = frozenset() if produced else frozenset(f"d{i}" for i in axes)
        return ShardingRule(inputs=(ins,), outputs=(out,), reductions=reductions, partial=passes_here, blocked=blocked)

    return rule


def _numpy(fn, wide: bool):
    def run(xs, attrs, ctx):
        x = xs[0]
        axes = tuple(norm_axes(attrs["axis"], x.ndim, "reduce"))
        src = as_compute(x) if wide else x  # sums accumulate in float64; max/min are exact anyway
        return np.asarray(fn(src, axis=axes, keepdims=attrs["keepdims"])).astype(x.dtype, copy=False)

    return run


def _gives(name: str) -> str:
    kinds = {}
    for dtype in ("float32", "int32", "bool"):
        kinds.setdefault(leaves(name, dtype), []).append(_DTYPE_WORDS[dtype])
    words = [f"`P[{k}]` ({', '.join(d)})" for k, d in kinds.items() if k is not None]
    if not words:
        return ""
    whole = [', '.join(d) for k, d in kinds.items() if k is None]
    return "reduced dim → " + "; ".join(words) + (f"; {whole[0]}: whole" if whole else "")


_DTYPE_WORDS = {"float32": "floats", "int32": "integers", "bool": "bools"}


_EXACT_FORM = {
    "max": "bools through uint8",
    "min": "bools through uint8",
    "mean": "of bools: any; of integers: from int64 quotients and remainders by the count, rounded once toward zero",
}


def _relax_form(name: str) -> RelaxForm:
    """Relax's reduction of the same name; where it is not exact on some dtype (its mean adds in
    the input's dtype, it has no max of bools), an emitter that is."""
    if name not in _EXACT_FORM:
        return RelaxForm.same_name(name, "axis", "keepdims")
    return RelaxForm(f"relax.op.{name}", ("axis", "keepdims"), emit="distir.tvm.relax.ops:emit_reduction",
                     doc=_EXACT_FORM[name])


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


for _name, (_fn, _passes) in _REDUCE.items():
    register_op(
        OpDef(
            name=_name,
            params=(Param("x", "tensor"), Param("axis", "axes", None), Param("keepdims", "bool", False)),
            infer=_infer(_name),
            numpy=_numpy(_fn, wide=_name in ("sum", "mean", "prod")),
            sharding=_rule(_name, _passes),
            localize=_mean_localize if _name == "mean" else None,
            doc=f"Reduce by {_name} over `axis` (all axes when None).",
            relax=_relax_form(_name),
            category="reduction",
            sharding_doc=ShardingDoc(
                passes="kept dims",
                blocked="reduced dims" if leaves(_name, "float32") is None else "",
                gives_partial=_gives(_name),
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
        sharding=_rule("partial_mean", {}),
        doc="The sum over `axis` divided by `count`: a worker's share of a mean over a sharded dim "
        "(lowering writes it; the shares add up to the mean).",
        relax=RelaxForm(emit="distir.tvm.relax.ops:emit_partial_mean", doc="sum, then divide by count (of bools: any)"),
        category="reduction",
        sharding_doc=ShardingDoc(passes="– (local view only)"),
    )
)
