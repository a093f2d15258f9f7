"""Neural-network ops that need some axes whole: softmax, log_softmax, layer_norm, rms_norm.

Each normalises over its axes, so those axes must not be sharded (a worker would
normalise over its shard only) and no partial input passes (the ops are not linear).
Every other dim is a batch dim and passes its sharding through.
"""

from __future__ import annotations

import numpy as np

from ..errors import TypeInferenceError
from ..ir import sym
from ..ir.op import RelaxForm, ShardingDoc
from ._common import (
    OpDef,
    Param,
    ShardingRule,
    TensorType,
    as_compute,
    dims_factors,
    expect_tensor,
    is_float_dtype,
    norm_axes,
    norm_axis,
    register_op,
    shape_str,
)

# ---------------------------------------------------------------- softmax / log_softmax


def _softmax_infer(name):
    def infer(types, attrs):
        x = expect_tensor(types[0], name)
        if not is_float_dtype(x.dtype):
            raise TypeInferenceError(f"R.{name}: needs a floating-point tensor, got {x.dtype}")
        if x.ndim == 0:
            raise TypeInferenceError(f"R.{name}: needs a tensor of rank at least 1")
        norm_axis(attrs["axis"], x.ndim, name)
        return x

    return infer


def _softmax_rule(name):
    def rule(types, attrs, outs):
        x = types[0]
        ax = norm_axis(attrs["axis"], x.ndim, name)
        dims = dims_factors(x.ndim)
        return ShardingRule(inputs=(dims,), outputs=(dims,), blocked=frozenset({f"d{ax}"}))

    return rule


def _softmax(xs, attrs, ctx):
    x = xs[0]
    x64 = as_compute(x)
    e = np.exp(x64 - np.max(x64, axis=attrs["axis"], keepdims=True))
    return (e / np.sum(e, axis=attrs["axis"], keepdims=True)).astype(x.dtype)


def _log_softmax(xs, attrs, ctx):
    x = xs[0]
    x64 = as_compute(x)
    shifted = x64 - np.max(x64, axis=attrs["axis"], keepdims=True)
    return (shifted - np.log(np.sum(np.exp(shifted), axis=attrs["axis"], keepdims=True))).astype(x.dtype)


register_op(
    OpDef(
        name="nn.softmax",
        params=(Param("data", "tensor"), Param("axis", "int", -1)),
        infer=_softmax_infer("nn.softmax"),
        numpy=_softmax,
        sharding=_softmax_rule("nn.softmax"),
        doc="Softmax over `axis`; that axis must not be sharded.",
        relax=RelaxForm.same_name("nn.softmax", "axis"),
        category="normalisation",
        sharding_doc=ShardingDoc(passes="other dims", blocked="`axis`"),
    )
)

register_op(
    OpDef(
        name="nn.log_softmax",
        params=(Param("data", "tensor"), Param("axis", "int", -1)),
        infer=_softmax_infer("nn.log_softmax"),
        numpy=_log_softmax,
        sharding=_softmax_rule("nn.log_softmax"),
        doc="log(softmax(x)) over `axis`, computed stably; that axis must not be sharded.",
        relax=RelaxForm.same_name("nn.log_softmax", "axis"),
        category="normalisation",
        sharding_doc=ShardingDoc(passes="other dims", blocked="`axis`"),
    )
)


# ---------------------------------------------------------------- layer_norm / rms_norm


def _check_param(name: str, what: str, p: TensorType, x: TensorType, axes: list[int]) -> None:
    want = tuple(x.shape[a] for a in axes)
    if p.dtype != x.dtype:
        raise TypeInferenceError(f"R.{name}: {what} has dtype {p.dtype} but data has {x.dtype}")
    if p.ndim != len(want) or not all(sym.equal(a, b) for a, b in zip(p.shape, want)):
        raise TypeInferenceError(
            f"R.{name}: {what} has shape {shape_str(p.shape)} but must match the normalised dims "
            f"{shape_str(want)} of data {shape_str(x.shape)} (axes {axes})"
        )


def _norm_infer(name: str, param_names: tuple[str, ...]):
    def infer(types, attrs):
        x = expect_tensor(types[0], name, "data")
        if not is_float_dtype(x.dtype):
            raise TypeInferenceError(f"R.{name}: needs a floating-point tensor, got {x.dtype}")
        if x.ndim == 0:
            raise TypeInferenceError(f"R.{name}: needs a tensor of rank at least 1")
        axes = norm_axes(attrs["axes"], x.ndim, name)
        if not axes:
            raise TypeInferenceError(f"R.{name}: axes must name at least one axis")
        for t, what in zip(types[1:], param_names):
            _check_param(name, what, expect_tensor(t, name, what), x, axes)
        return x

    return infer


def _norm_rule(name: str, n_params: int):
    def rule(types, attrs, outs):
        x = types[0]
        axes = norm_axes(attrs["axes"], x.ndim, name)
        dims = dims_factors(x.ndim)
        param_dims = tuple(dims[a] for a in axes)
        return ShardingRule(
            inputs=(dims,) + (param_dims,) * n_params,
            outputs=(dims,),
            blocked=frozenset(f"d{a}" for a in axes),
        )

    return rule


def _param_view(p: np.ndarray, x_ndim: int, axes: list[int]) -> np.ndarray:
    """Reshape a parameter over ``axes`` so it broadcasts against data (axes need not be trailing)."""
    shape = [1] * x_ndim
    for j, a in enumerate(axes):
        shape[a] = p.shape[j]
    return p.reshape(shape)


def _layer_norm(xs, attrs, ctx):
    x, gamma, beta = xs
    axes = norm_axes(attrs["axes"], x.ndim, "nn.layer_norm")
    x64 = as_compute(x)
    mean = np.mean(x64, axis=tuple(axes), keepdims=True)
    var = np.mean(np.square(x64 - mean), axis=tuple(axes), keepdims=True)
    out = (x64 - mean) / np.sqrt(var + attrs["epsilon"])
    if attrs["scale"]:
        out = out * _param_view(as_compute(gamma), x.ndim, axes)
    if attrs["center"]:
        out = out + _param_view(as_compute(beta), x.ndim, axes)
    return out.astype(x.dtype)


def _rms_norm(xs, attrs, ctx):
    x, weight = xs
    axes = norm_axes(attrs["axes"], x.ndim, "nn.rms_norm")
    x64 = as_compute(x)
    ms = np.mean(np.square(x64), axis=tuple(axes), keepdims=True)
    out = x64 / np.sqrt(ms + attrs["epsilon"]) * _param_view(as_compute(weight), x.ndim, axes)
    return out.astype(x.dtype)


register_op(
    OpDef(
        name="nn.layer_norm",
        params=(
            Param("data", "tensor"),
            Param("gamma", "tensor"),
            Param("beta", "tensor"),
            Param("axes", "axes", [-1]),
            Param("epsilon", "float", 1e-5),
            Param("center", "bool", True),
            Param("scale", "bool", True),
        ),
        infer=_norm_infer("nn.layer_norm", ("gamma", "beta")),
        numpy=_layer_norm,
        sharding=_norm_rule("nn.layer_norm", 2),
        doc="Layer normalisation over `axes` (whole), scaled by gamma and shifted by beta; batch dims pass.",
        relax=RelaxForm.same_name("nn.layer_norm", "axes", "epsilon", "center", "scale"),
        category="normalisation",
        sharding_doc=ShardingDoc(
            passes="other dims (gamma, beta replicated)", blocked="`axes` (and gamma/beta, which span them)"
        ),
    )
)

register_op(
    OpDef(
        name="nn.rms_norm",
        params=(
            Param("data", "tensor"),
            Param("weight", "tensor"),
            Param("axes", "axes", [-1]),
            Param("epsilon", "float", 1e-5),
        ),
        infer=_norm_infer("nn.rms_norm", ("weight",)),
        numpy=_rms_norm,
        sharding=_norm_rule("nn.rms_norm", 1),
        doc="Root-mean-square normalisation over `axes` (whole), scaled by weight; batch dims pass.",
        relax=RelaxForm(
            "relax.op.nn.rms_norm",
            ("axes", "epsilon"),
            emit="distir.tvm.ops:emit_rms_norm",
            doc="rank 1 through a (1, n) view",
        ),
        category="normalisation",
        sharding_doc=ShardingDoc(passes="other dims (weight replicated)", blocked="`axes` (and weight)"),
    )
)
