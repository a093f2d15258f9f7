"""Reductions over axes: sum, mean, max, min (with keepdims)."""

from __future__ import annotations

import numpy as np

from ..ir.op import RelaxForm, ShardingDoc
from ._common import OpDef, Param, ShardingRule, TensorType, as_compute, expect_tensor, norm_axes, register_op
from .docgen import partials_text

# name -> (numpy function, partial kind produced by reducing a sharded dim, partial kinds passed through)
_REDUCE = {
    "sum": (np.sum, "sum", {"sum": "one", "avg": "one"}),
    "mean": (np.mean, "avg", {"sum": "one", "avg": "one"}),
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
    return f"reduced dim → `P[{produced}]`" + (" (equal shards)" if produced == "avg" else "")


for _name, (_fn, _produced, _passes) in _REDUCE.items():
    register_op(
        OpDef(
            name=_name,
            params=(Param("x", "tensor"), Param("axis", "axes", None), Param("keepdims", "bool", False)),
            infer=_infer(_name),
            numpy=_numpy(_fn, wide=_name in ("sum", "mean", "prod")),
            sharding=_rule(_name, _produced, _passes),
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
