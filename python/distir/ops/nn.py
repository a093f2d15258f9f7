"""Neural-network ops whose axis must stay whole: softmax (and the norms, in their own module)."""

from __future__ import annotations

import numpy as np

from ._common import OpDef, Param, ShardingRule, expect_tensor, norm_axis, register_op


def _softmax(x, axis):
    x64 = x.astype(np.float64)
    e = np.exp(x64 - np.max(x64, axis=axis, keepdims=True))
    return (e / np.sum(e, axis=axis, keepdims=True)).astype(x.dtype)


def _softmax_rule(types, attrs, outs):
    x = types[0]
    ax = norm_axis(attrs["axis"], x.ndim, "nn.softmax")
    dims = tuple((f"d{i}",) for i in range(x.ndim))
    return ShardingRule(inputs=(dims,), outputs=(dims,), blocked=frozenset({f"d{ax}"}))


register_op(
    OpDef(
        name="nn.softmax",
        params=(Param("x", "tensor"), Param("axis", "int", -1)),
        infer=lambda types, attrs: (norm_axis(attrs["axis"], expect_tensor(types[0], "nn.softmax").ndim, "nn.softmax"), types[0])[1],
        numpy=lambda xs, attrs, ctx: _softmax(xs[0], attrs["axis"]),
        sharding=_softmax_rule,
        doc="Softmax over `axis`; that axis must not be sharded.",
    )
)
