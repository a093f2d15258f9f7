"""Elementwise ops: binary with broadcasting, and unary activations.

Each table below declares its ops whole: adding a row adds the op with its type rule,
numpy reference, sharding rule, docs and Relax form (the Relax op of the same name).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import TypeInferenceError
from ..ir import sym
from ..ir.combine import exact_partials
from ..ir.op import RelaxForm, ShardingDoc
from ._common import (
    OpDef,
    Param,
    ShardingRule,
    TensorType,
    as_compute,
    broadcast_rule,
    broadcast_shapes,
    expect_tensor,
    is_float_dtype,
    register_op,
    shape_str,
)
from .docgen import partials_text

# How a partial input passes through each binary op: add/subtract are linear in all
# inputs jointly; multiply is linear in each; divide only in its numerator; max/min
# commute with a max/min reduction when both sides are partial alike. partial_inputs
# (third entry) limits which input may be the lone partial in "one" mode; the last entry
# says why, for docs/ops.md.
_BINARY = {
    # add/subtract do not pass a P[max]/P[min], although max(p_i + r) = max(p_i) + r: a worker
    # whose block is empty (a size below the count) holds the reduction's identity, -inf or the
    # smallest integer, and -inf + inf is nan while integers wrap around, so that worker's value
    # would no longer lose the reduction. (Reducing first costs the same all-reduce.)
    "add": (np.add, {"sum": "all", "avg": "all"}, None, ""),
    "subtract": (np.subtract, {"sum": "all", "avg": "all"}, None, ""),
    "multiply": (np.multiply, {"sum": "one", "avg": "one"}, None, ""),
    "divide": (np.divide, {"sum": "one", "avg": "one"}, (0,), "the numerator"),
    "maximum": (np.maximum, {"max": "all"}, None, ""),
    "minimum": (np.minimum, {"min": "all"}, None, ""),
    "power": (np.power, {}, None, ""),
}
_COMPARE = {
    "equal": (np.equal, "x1 == x2"),
    "not_equal": (np.not_equal, "x1 != x2"),
    "less": (np.less, "x1 < x2"),
    "less_equal": (np.less_equal, "x1 <= x2"),
    "greater": (np.greater, "x1 > x2"),
    "greater_equal": (np.greater_equal, "x1 >= x2"),
}
_BROADCAST = "all dims, broadcasting"


# Bool arithmetic follows numpy where its result is a bool: add is or, multiply is and, maximum and
# minimum the same, comparisons order False before True. The rest is refused at the type check, as
# numpy refuses a bool subtract and leaves bools for floats (divide) or int8 (power), where distir's
# binary ops keep their input's dtype, and TVM builds none of them on bools.
_NO_BOOL = {
    "subtract": "numpy refuses it; R.not_equal is the exclusive or",
    "divide": "numpy's division of bools gives floats",
    "power": "numpy's power of bools gives int8",
}


def _binary_infer(name, result_dtype=None):
    def infer(types, attrs):
        a = expect_tensor(types[0], name, "lhs")
        b = expect_tensor(types[1], name, "rhs")
        if a.dtype != b.dtype:
            raise TypeInferenceError(f"R.{name}: dtypes differ ({a.dtype} and {b.dtype}); use R.astype first")
        if a.dtype == "bool" and name in _NO_BOOL:
            raise TypeInferenceError(f"R.{name}: does not apply to bool tensors ({_NO_BOOL[name]}); use R.astype first")
        return TensorType(broadcast_shapes([a.shape, b.shape], name), result_dtype or a.dtype)

    return infer


def _binary_rule(partial, partial_inputs, wrapping: bool = True):
    def rule(types, attrs, outs):
        here = exact_partials(partial, types[0].dtype, wrapping=wrapping)
        return broadcast_rule([t.shape for t in types], outs[0].ndim, partial=here, partial_inputs=partial_inputs)

    return rule


def _binary_numpy(fn, keep_dtype: bool):
    def numpy(xs, attrs, ctx):
        out = np.asarray(fn(xs[0], xs[1]))
        return out.astype(xs[0].dtype, copy=False) if keep_dtype else out

    return numpy


_BOOL_LOGIC = {"add": "logical_or", "maximum": "logical_or", "multiply": "logical_and", "minimum": "logical_and"}


def _binary_relax(name: str) -> RelaxForm:
    """Relax's op of the same name; add and maximum of bools are or, multiply and minimum and (TVM
    0.27 builds no arithmetic on bools)."""
    if name not in _BOOL_LOGIC:
        return RelaxForm.same_name(name)
    return RelaxForm(f"relax.op.{name}", emit="distir.tvm.relax.ops:emit_bool_logic", doc=f"of bools: `relax.op.{_BOOL_LOGIC[name]}`")


def _only(partial_inputs) -> str:
    return " and ".join(("x1", "x2")[i] for i in partial_inputs or ())


for _name, (_fn, _partial, _pin, _why) in _BINARY.items():
    register_op(
        OpDef(
            name=_name,
            params=(Param("x1", "tensor"), Param("x2", "tensor")),
            infer=_binary_infer(_name),
            numpy=_binary_numpy(_fn, keep_dtype=True),
            # an integer division rounds: the sum of quotients is not the quotient of the sum
            sharding=_binary_rule(_partial, _pin, wrapping=_name != "divide"),
            doc=f"Elementwise {_name} with numpy-style broadcasting."
            + (f" Not of bools ({_NO_BOOL[_name]})." if _name in _NO_BOOL else ""),
            relax=_binary_relax(_name),
            category="elementwise",
            sharding_doc=ShardingDoc(
                passes=_BROADCAST, blocked="size-1 dims", partials=partials_text(_partial, _only(_pin), _why)
            ),
        )
    )

for _name, (_fn, _what) in _COMPARE.items():
    register_op(
        OpDef(
            name=_name,
            params=(Param("x1", "tensor"), Param("x2", "tensor")),
            infer=_binary_infer(_name, "bool"),
            numpy=_binary_numpy(_fn, keep_dtype=False),
            sharding=_binary_rule({}, None),
            doc=f"Elementwise comparison {_what}, with broadcasting; the result is bool.",
            relax=RelaxForm(f"relax.op.{_name}", emit="distir.tvm.relax.ops:emit_comparison",
                            doc="of bools: compared as uint8 (False before True)"),
            category="elementwise",
            sharding_doc=ShardingDoc(passes=_BROADCAST, blocked="size-1 dims"),
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
        numpy=lambda xs, attrs, ctx: np.asarray(np.where(xs[0], xs[1], xs[2])),
        sharding=lambda types, attrs, outs: broadcast_rule([t.shape for t in types], outs[0].ndim),
        doc="Select from x1 where condition holds, else from x2.",
        relax=RelaxForm.same_name("where"),
        category="elementwise",
        sharding_doc=ShardingDoc(passes=_BROADCAST, blocked="size-1 dims"),
    )
)


_ERF = np.frompyfunc(math.erf, 1, 1)


def _erf64(x64: np.ndarray) -> np.ndarray:
    """erf in float64, exact (math.erf per element; numpy has no erf and scipy is not a dependency)."""
    return np.asarray(_ERF(x64), dtype=np.float64)


def _f64(fn):
    """Compute ``fn`` in float64 for float inputs, then cast back to the input dtype."""

    def run(x: np.ndarray) -> np.ndarray:
        return np.asarray(fn(as_compute(x))).astype(x.dtype, copy=False)

    return run


def _gelu(x):
    return 0.5 * x * (1.0 + _erf64(x / np.sqrt(2.0)))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow in exp for large |x|


_MONOTONE = {"max": "one", "min": "one"}  # increasing f: f(max p_i) = max f(p_i)
# ... and defined at the identities (f(-inf), f(+inf)) that workers with empty blocks hold; log and
# sqrt are not defined at -inf (nan), so only a P[min] (identity +inf) passes them
_MONOTONE_FROM_ZERO = {"min": "one"}

# name -> (numpy function (float64 in, any out), partial reductions it passes through, param
# name, what it computes). nn.* ops name their input "data" and the others "x", as TVM Relax does.
_UNARY = {
    "nn.gelu": (_gelu, {}, "data", "GELU, x·Φ(x) with the exact normal CDF (erf)"),
    "nn.gelu_tanh": (_gelu_tanh, {}, "data", "GELU with the tanh approximation"),
    "nn.relu": (lambda x: np.maximum(x, 0), _MONOTONE, "data", "ReLU max(x, 0)"),
    "nn.silu": (lambda x: x * _sigmoid(x), {}, "data", "SiLU x·sigmoid(x)"),
    "exp": (np.exp, _MONOTONE, "x", "exponential e^x"),
    "log": (np.log, _MONOTONE_FROM_ZERO, "x", "natural logarithm"),
    "sqrt": (np.sqrt, _MONOTONE_FROM_ZERO, "x", "square root"),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), {}, "x", "reciprocal square root 1 / sqrt(x)"),
    "tanh": (np.tanh, _MONOTONE, "x", "hyperbolic tangent"),
    "sigmoid": (_sigmoid, _MONOTONE, "x", "logistic sigmoid 1 / (1 + e^-x)"),
    "erf": (_erf64, _MONOTONE, "x", "error function erf(x)"),
    "sin": (np.sin, {}, "x", "sine"),
    "cos": (np.cos, {}, "x", "cosine"),
    "square": (np.square, {}, "x", "square x·x"),
    "negative": (np.negative, {"sum": "one", "avg": "one"}, "x", "negation -x"),
    "abs": (np.abs, {}, "x", "absolute value"),
    "floor": (np.floor, _MONOTONE, "x", "floor, the largest integer not above x"),
}


# ops defined on any numeric dtype; every other unary op needs floats (as in TVM Relax)
_ANY_DTYPE = {"nn.relu", "negative", "abs", "square"}


def _unary_infer(name):
    needs_float = name not in _ANY_DTYPE

    def infer(types, attrs):
        x = expect_tensor(types[0], name)
        if needs_float and not is_float_dtype(x.dtype):
            raise TypeInferenceError(f"R.{name}: needs a floating-point tensor, got {x.dtype}; use R.astype first")
        if x.dtype == "bool":
            raise TypeInferenceError(f"R.{name}: does not apply to bool tensors")
        return x

    return infer


def _unary_numpy(fn):
    run = _f64(fn)

    def numpy(xs, attrs, ctx):
        return run(xs[0])

    return numpy


def _unary_rule(partial):
    def rule(types, attrs, outs):
        return broadcast_rule([types[0].shape], outs[0].ndim, partial=partial)

    return rule


for _name, (_fn, _partial, _pname, _what) in _UNARY.items():
    register_op(
        OpDef(
            name=_name,
            params=(Param(_pname, "tensor"),),
            infer=_unary_infer(_name),
            numpy=_unary_numpy(_fn),
            sharding=_unary_rule(_partial),
            doc=f"Elementwise {_what}" + ("." if _name in _ANY_DTYPE else "; needs floats."),
            relax=RelaxForm("relax.op.negative", emit="distir.tvm.relax.ops:emit_negative",
                            doc="of unsigned integers: `0 - x`, wrapping around (TVM 0.27 builds no negation of them)")
            if _name == "negative" else RelaxForm.same_name(_name),
            category="elementwise",
            sharding_doc=ShardingDoc(
                passes="all", partials=partials_text(_partial, note="increasing" if _partial is _MONOTONE else "")
            ),
        )
    )


# ---------------------------------------------------------------- ops with attributes or a second operand


def _clip_infer(types, attrs):
    x = expect_tensor(types[0], "clip")
    if x.dtype == "bool":
        raise TypeInferenceError("R.clip: does not apply to bool tensors")
    return x


def _clip_numpy(xs, attrs, ctx):
    x = xs[0]
    return np.clip(as_compute(x), attrs["min"], attrs["max"]).astype(x.dtype)


register_op(
    OpDef(
        name="clip",
        params=(Param("x", "tensor"), Param("min", "scalar"), Param("max", "scalar")),
        infer=_clip_infer,
        numpy=_clip_numpy,
        sharding=_unary_rule(_MONOTONE),
        doc="Elementwise clamp into [min, max] (nn.op.relu6 is clip(x, 0, 6)).",
        relax=RelaxForm.same_name("clip", "min", "max"),
        category="elementwise",
        sharding_doc=ShardingDoc(passes="all", partials=partials_text(_MONOTONE, note="nondecreasing")),
    )
)


def _softplus_numpy(xs, attrs, ctx):
    x = xs[0]
    x64, b = as_compute(x), attrs["beta"]
    with np.errstate(over="ignore"):
        soft = np.log1p(np.exp(b * x64)) / b
    return np.where(b * x64 > attrs["threshold"], x64, soft).astype(x.dtype)


register_op(
    OpDef(
        name="nn.softplus",
        params=(Param("data", "tensor"), Param("beta", "float", 1.0), Param("threshold", "float", 20.0)),
        infer=_unary_infer("nn.softplus"),
        numpy=_softplus_numpy,
        sharding=_unary_rule({}),
        doc="Elementwise softplus log(1 + e^(beta·x)) / beta, x itself where beta·x > threshold; needs floats.",
        relax=RelaxForm.same_name("nn.softplus", "beta", "threshold"),
        category="elementwise",
        sharding_doc=ShardingDoc(passes="all"),
    )
)


def _prelu_infer(types, attrs):
    x = expect_tensor(types[0], "nn.prelu", "data")
    alpha = expect_tensor(types[1], "nn.prelu", "alpha")
    if not is_float_dtype(x.dtype) or alpha.dtype != x.dtype:
        raise TypeInferenceError(f"R.nn.prelu: needs floats of one dtype, got {x.dtype} and {alpha.dtype}")
    axis = attrs["axis"] % x.ndim if x.ndim else 0
    if alpha.ndim != 1 or not (alpha.shape[0] == 1 or sym.equal(alpha.shape[0], x.shape[axis])):
        raise TypeInferenceError(
            f"R.nn.prelu: alpha must be 1-D with one slope per element of axis {axis} (size "
            f"{sym.to_str(x.shape[axis])}), got shape {shape_str(alpha.shape)}"
        )
    return x


def _prelu_rule(types, attrs, outs):
    x, alpha = types
    axis = attrs["axis"] % x.ndim
    f = tuple((f"d{i}",) for i in range(x.ndim))
    a = ((),) if alpha.shape[0] == 1 else (f[axis],)
    return ShardingRule(inputs=(f, a), outputs=(f,))


def _prelu_numpy(xs, attrs, ctx):
    x, alpha = xs
    axis = attrs["axis"] % x.ndim
    shape = [1] * x.ndim
    shape[axis] = alpha.shape[0]
    x64 = as_compute(x)
    return np.where(x64 > 0, x64, x64 * as_compute(alpha).reshape(shape)).astype(x.dtype)


register_op(
    OpDef(
        name="nn.prelu",
        params=(Param("data", "tensor"), Param("alpha", "tensor"), Param("axis", "int", 1)),
        infer=_prelu_infer,
        numpy=_prelu_numpy,
        sharding=_prelu_rule,
        doc="Elementwise parametric ReLU: x where x > 0, else alpha[c]·x with c the index along `axis`.",
        relax=RelaxForm.same_name("nn.prelu", "axis"),
        category="elementwise",
        sharding_doc=ShardingDoc(passes="all (alpha cut like `axis`)"),
    )
)
