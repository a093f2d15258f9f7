"""Elementwise ops: binary with broadcasting, and unary activations."""

from __future__ import annotations

import numpy as np

from ..errors import TypeInferenceError
from ._common import OpDef, Param, TensorType, broadcast_rule, broadcast_shapes, expect_tensor, register_op

# How a partial input passes through each binary op: add/subtract are linear in all
# inputs jointly; multiply is linear in each; divide only in its numerator; max/min
# commute with a max/min reduction when both sides are partial alike.
_BINARY = {
    "add": (np.add, {"sum": "all", "avg": "all"}, None),
    "subtract": (np.subtract, {"sum": "all", "avg": "all"}, None),
    "multiply": (np.multiply, {"sum": "one", "avg": "one"}, None),
    "divide": (np.divide, {"sum": "one", "avg": "one"}, (0,)),
    "maximum": (np.maximum, {"max": "all"}, None),
    "minimum": (np.minimum, {"min": "all"}, None),
    "power": (np.power, {}, None),
}
_COMPARE = {
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
}


def _binary_infer(name, result_dtype=None):
    def infer(types, attrs):
        a = expect_tensor(types[0], name, "lhs")
        b = expect_tensor(types[1], name, "rhs")
        if a.dtype != b.dtype:
            raise TypeInferenceError(f"R.{name}: dtypes differ ({a.dtype} and {b.dtype}); use R.astype first")
        return TensorType(broadcast_shapes([a.shape, b.shape], name), result_dtype or a.dtype)

    return infer


def _binary_rule(partial, partial_inputs):
    def rule(types, attrs, outs):
        return broadcast_rule([t.shape for t in types], outs[0].ndim, partial=partial, partial_inputs=partial_inputs)

    return rule


for _name, (_fn, _partial, _pin) in _BINARY.items():
    register_op(
        OpDef(
            name=_name,
            params=(Param("x1", "tensor"), Param("x2", "tensor")),
            infer=_binary_infer(_name),
            numpy=(lambda fn: lambda xs, attrs, ctx: fn(xs[0], xs[1]).astype(xs[0].dtype, copy=False))(_fn),
            sharding=_binary_rule(_partial, _pin),
            doc=f"Elementwise {_name} with numpy-style broadcasting.",
        )
    )

for _name, _fn in _COMPARE.items():
    register_op(
        OpDef(
            name=_name,
            params=(Param("x1", "tensor"), Param("x2", "tensor")),
            infer=_binary_infer(_name, "bool"),
            numpy=(lambda fn: lambda xs, attrs, ctx: fn(xs[0], xs[1]))(_fn),
            sharding=_binary_rule({}, None),
            doc=f"Elementwise comparison ({_name}); the result is bool.",
        )
    )


def _where_infer(types, attrs):
    c, a, b = (expect_tensor(t, "where") for t in types)
    if c.dtype != "bool":
        raise TypeInferenceError(f"R.where: the condition must be bool, got {c.dtype}")
    if a.dtype != b.dtype:
        raise TypeInferenceError(f"R.where: branch dtypes differ ({a.dtype} and {b.dtype})")
    return TensorType(broadcast_shapes([c.shape, a.shape, b.shape], "where"), a.dtype)


register_op(
    OpDef(
        name="where",
        params=(Param("condition", "tensor"), Param("x1", "tensor"), Param("x2", "tensor")),
        infer=_where_infer,
        numpy=lambda xs, attrs, ctx: np.where(xs[0], xs[1], xs[2]),
        sharding=lambda types, attrs, outs: broadcast_rule([t.shape for t in types], outs[0].ndim),
        doc="Select from x1 where condition holds, else from x2.",
    )
)


def _erf(x):
    import math

    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _gelu(x):
    x64 = x.astype(np.float64)
    return (0.5 * x64 * (1.0 + _erf(x64 / np.sqrt(2.0)))).astype(x.dtype)


def _gelu_tanh(x):
    x64 = x.astype(np.float64)
    return (0.5 * x64 * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x64 + 0.044715 * x64**3)))).astype(x.dtype)


def _silu(x):
    x64 = x.astype(np.float64)
    return (x64 / (1.0 + np.exp(-x64))).astype(x.dtype)


def _rsqrt(x):
    return (1.0 / np.sqrt(x.astype(np.float64))).astype(x.dtype)


# name -> (numpy function, partial reductions it passes through)
_UNARY = {
    "nn.gelu": (_gelu, {}),
    "nn.gelu_tanh": (_gelu_tanh, {}),
    "nn.relu": (lambda x: np.maximum(x, 0).astype(x.dtype), {"max": "one", "min": "one"}),
    "nn.silu": (_silu, {}),
    "exp": (np.exp, {"max": "one", "min": "one"}),
    "log": (np.log, {"max": "one", "min": "one"}),
    "sqrt": (np.sqrt, {"max": "one", "min": "one"}),
    "rsqrt": (_rsqrt, {}),
    "tanh": (np.tanh, {"max": "one", "min": "one"}),
    "sigmoid": (lambda x: (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(x.dtype), {"max": "one", "min": "one"}),
    "negative": (np.negative, {"sum": "one", "avg": "one"}),
    "abs": (np.abs, {}),
}


def _unary_infer(name):
    def infer(types, attrs):
        return expect_tensor(types[0], name)

    return infer


for _name, (_fn, _partial) in _UNARY.items():
    register_op(
        OpDef(
            name=_name,
            params=(Param("x", "tensor"),),
            infer=_unary_infer(_name),
            numpy=(lambda fn: lambda xs, attrs, ctx: np.asarray(fn(xs[0])).astype(xs[0].dtype, copy=False))(_fn),
            sharding=(lambda p: lambda types, attrs, outs: broadcast_rule([types[0].shape], outs[0].ndim, partial=p))(
                _partial
            ),
            doc=f"Elementwise {_name}.",
        )
    )
