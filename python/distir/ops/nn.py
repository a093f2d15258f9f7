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
    is_one,
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

# TVM 0.27 computes layer_norm and group_norm with gamma and beta whatever center and scale say
_AFFINE_DOC = "with scale off, gamma is ones; with center off, beta is zeros (TVM ignores the flags)"


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
        relax=RelaxForm(
            "relax.op.nn.layer_norm",
            ("axes", "epsilon", "center", "scale"),
            emit="distir.tvm.relax.ops:emit_affine_norm",
            doc=_AFFINE_DOC,
        ),
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
            emit="distir.tvm.relax.ops:emit_rms_norm",
            doc="rank 1 through a (1, n) view",
        ),
        category="normalisation",
        sharding_doc=ShardingDoc(passes="other dims (weight replicated)", blocked="`axes` (and weight)"),
    )
)


# ---------------------------------------------------------------- group_norm


def _group_norm_axes(x: TensorType, attrs) -> tuple[int, list[int]]:
    c = norm_axis(attrs["channel_axis"], x.ndim, "nn.group_norm")
    axes = norm_axes(attrs["axes"], x.ndim, "nn.group_norm")
    if c in axes:
        raise TypeInferenceError(f"R.nn.group_norm: the channel axis {c} cannot be one of the normalised axes {axes}")
    return c, axes


def _group_norm_infer(types, attrs):
    x = expect_tensor(types[0], "nn.group_norm", "data")
    if not is_float_dtype(x.dtype):
        raise TypeInferenceError(f"R.nn.group_norm: needs a floating-point tensor, got {x.dtype}")
    c, _ = _group_norm_axes(x, attrs)
    g = attrs["num_groups"]
    channels = x.shape[c]
    if g < 1 or not sym.prove_divisible(channels, g):
        raise TypeInferenceError(
            f"R.nn.group_norm: {g} groups must divide the {sym.to_str(channels)} channels of axis {c}"
        )
    for t, what in zip(types[1:], ("gamma", "beta")):
        _check_param("nn.group_norm", what, expect_tensor(t, "nn.group_norm", what), x, [c])
    return x


def _group_norm_rule(types, attrs, outs):
    x = types[0]
    c, axes = _group_norm_axes(x, attrs)
    dims = dims_factors(x.ndim)
    # a group spans channels and the normalised axes: all of them whole; the other dims are batch dims
    return ShardingRule(inputs=(dims, dims[c : c + 1], dims[c : c + 1]), outputs=(dims,),
                        blocked=frozenset(f"d{a}" for a in [c, *axes]))


def _group_norm(xs, attrs, ctx):
    x, gamma, beta = xs
    c, axes = _group_norm_axes(TensorType(x.shape, str(x.dtype)), attrs)
    g = attrs["num_groups"]
    x64 = np.moveaxis(as_compute(x), c, 0)  # (C, ...)
    rest = [a + 1 if a < c else a for a in axes]  # the normalised axes after moving C to the front
    grouped = x64.reshape((g, x64.shape[0] // g) + x64.shape[1:])
    over = tuple([1] + [a + 1 for a in rest])
    mean = grouped.mean(axis=over, keepdims=True)
    var = np.square(grouped - mean).mean(axis=over, keepdims=True)
    out = ((grouped - mean) / np.sqrt(var + attrs["epsilon"])).reshape(x64.shape)
    view = (-1,) + (1,) * (x.ndim - 1)
    if attrs["scale"]:
        out = out * as_compute(gamma).reshape(view)
    if attrs["center"]:
        out = out + as_compute(beta).reshape(view)
    return np.moveaxis(out, 0, c).astype(x.dtype)


register_op(
    OpDef(
        name="nn.group_norm",
        params=(
            Param("data", "tensor"),
            Param("gamma", "tensor"),
            Param("beta", "tensor"),
            Param("num_groups", "int"),
            Param("channel_axis", "int"),
            Param("axes", "axes"),
            Param("epsilon", "float", 1e-5),
            Param("center", "bool", True),
            Param("scale", "bool", True),
        ),
        infer=_group_norm_infer,
        numpy=_group_norm,
        sharding=_group_norm_rule,
        doc="Group normalisation: the channels in `num_groups` groups, each normalised with `axes`; "
        "scaled by gamma and shifted by beta per channel.",
        relax=RelaxForm(
            "relax.op.nn.group_norm",
            ("num_groups", "channel_axis", "axes", "epsilon", "center", "scale"),
            emit="distir.tvm.relax.ops:emit_affine_norm",
            doc=_AFFINE_DOC,
        ),
        category="normalisation",
        sharding_doc=ShardingDoc(
            passes="other dims (batch)", blocked="the channel axis and `axes` (gamma, beta replicated)"
        ),
    )
)


# ---------------------------------------------------------------- pad

_PAD_MODES = ("constant", "reflect", "replicate", "circular")
_NUMPY_PAD = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _pad_pairs(x: TensorType, attrs) -> list[tuple[int, int]]:
    width = list(attrs["pad_width"])
    if len(width) != 2 * x.ndim:
        raise TypeInferenceError(
            f"R.nn.pad: pad_width needs a (before, after) pair for each of the {x.ndim} dims, "
            f"[before_0, after_0, before_1, ...], got {len(width)} numbers"
        )
    pairs = list(zip(width[::2], width[1::2]))
    if any(b < 0 or a < 0 for b, a in pairs):
        raise TypeInferenceError(f"R.nn.pad: pad widths must be non-negative, got {width}")
    return pairs


def _pad_infer(types, attrs):
    x = expect_tensor(types[0], "nn.pad", "data")
    if attrs["pad_mode"] not in _PAD_MODES:
        raise TypeInferenceError(f"R.nn.pad: pad_mode must be one of {', '.join(_PAD_MODES)}, got '{attrs['pad_mode']}'")
    pairs = _pad_pairs(x, attrs)
    return TensorType(tuple(sym.add(d, b + a) for d, (b, a) in zip(x.shape, pairs)), x.dtype)


def _pad_rule(types, attrs, outs):
    x = types[0]
    dims = dims_factors(x.ndim)
    blocked = frozenset(f"d{i}" for i, (b, a) in enumerate(_pad_pairs(x, attrs)) if b or a)
    # zeros around a partial sum are the partial sums of zeros
    zero = attrs["pad_mode"] == "constant" and attrs["pad_value"] == 0
    return ShardingRule(inputs=(dims,), outputs=(dims,), blocked=blocked,
                        partial={"sum": "one", "avg": "one"} if zero else {})


def _pad(xs, attrs, ctx):
    x = xs[0]
    pairs = _pad_pairs(TensorType(x.shape, str(x.dtype)), attrs)
    mode = attrs["pad_mode"]
    if mode == "constant":
        return np.pad(x, pairs, mode="constant", constant_values=np.asarray(attrs["pad_value"]).astype(x.dtype))
    return np.pad(x, pairs, mode=_NUMPY_PAD[mode])


register_op(
    OpDef(
        name="nn.pad",
        params=(
            Param("data", "tensor"),
            Param("pad_width", "ints"),
            Param("pad_value", "float", 0.0),
            Param("pad_mode", "choice", "constant", choices=_PAD_MODES),
        ),
        infer=_pad_infer,
        numpy=_pad,
        sharding=_pad_rule,
        doc="Pad each dim by (before, after) elements (`pad_width` = [before_0, after_0, before_1, ...]): "
        "`pad_value`, or reflected, replicated or circular copies of the edge.",
        relax=RelaxForm.same_name("nn.pad", "pad_width", "pad_value", "pad_mode"),
        category="shape",
        sharding_doc=ShardingDoc(
            passes="dims padded by nothing", blocked="padded dims", partials="sum, avg: `one` (constant 0 padding)"
        ),
    )
)


# ---------------------------------------------------------------- attention

_CAUSAL = ("TopLeft", "BottomRight")


def _attention_infer(name: str):
    def infer(types, attrs):
        q, k, v = (expect_tensor(t, name, what) for t, what in zip(types[:3], ("query", "key", "value")))
        for t, what in ((q, "query"), (k, "key"), (v, "value")):
            if t.ndim != 4:
                raise TypeInferenceError(
                    f"R.{name}: {what} must be 4-D (batch, sequence, heads, head_dim), got {shape_str(t.shape)}"
                )
            if t.dtype != q.dtype or not is_float_dtype(t.dtype):
                raise TypeInferenceError(f"R.{name}: query, key and value need one floating-point dtype")
        _same(name, "key", k, [(0, q, 0, "batch"), (2, q, 2, "heads"), (3, q, 3, "head_dim")])
        _same(name, "value", v, [(0, q, 0, "batch"), (1, k, 1, "key length"), (2, q, 2, "heads")])
        if attrs["causal_mask"] not in (None, *_CAUSAL):
            raise TypeInferenceError(f"R.{name}: causal_mask must be None, TopLeft or BottomRight, got {attrs['causal_mask']!r}")
        if attrs["window_size"] is not None:
            raise TypeInferenceError(f"R.{name}: sliding-window attention (window_size) is not supported (TVM cannot build it either)")
        if len(types) == 4:
            bias = expect_tensor(types[3], name, "bias")
            want = (q.shape[0], q.shape[2], q.shape[1], k.shape[1])
            if bias.ndim != 4 or bias.dtype != q.dtype or not all(
                is_one(b) or sym.equal(b, w) for b, w in zip(bias.shape, want)
            ):
                raise TypeInferenceError(
                    f"R.{name}: bias must be 4-D {q.dtype}, broadcastable to (batch, heads, seq_len, seq_len_kv) = "
                    f"{shape_str(want)}, got {shape_str(bias.shape)} {bias.dtype}"
                )
        return TensorType((q.shape[0], q.shape[1], q.shape[2], v.shape[3]), q.dtype)

    return infer


def _same(name, what, t, checks) -> None:
    for d, other, od, label in checks:
        if not sym.equal(t.shape[d], other.shape[od]):
            hint = "; repeat the key and value heads (R.repeat) for grouped-query attention" if label == "heads" else ""
            raise TypeInferenceError(
                f"R.{name}: {what} {shape_str(t.shape)} has {label} {sym.to_str(t.shape[d])}, but "
                f"{sym.to_str(other.shape[od])} is expected{hint}"
            )


def _attention_rule(types, attrs, outs):
    # query (b, sq, h, d) · key (b, kv, h, d) -> scores (b, h, sq, kv), softmax over kv, · value (b, kv, h, dv)
    q = (("b",), ("sq",), ("h",), ("d",))
    k = (("b",), ("kv",), ("h",), ("d",))
    v = (("b",), ("kv",), ("h",), ("dv",))
    ins = [q, k, v]
    if len(types) == 4:
        names = ("b", "h", "sq", "kv")
        ins.append(tuple(() if is_one(n) else (f,) for n, f in zip(types[3].shape, names)))
    # the softmax runs over the whole key length and the scores contract the head dim; a causal mask
    # depends on a query's position, so query rows stay whole under one
    blocked = {"kv", "d"} | ({"sq"} if attrs["causal_mask"] is not None else set())
    return ShardingRule(inputs=tuple(ins), outputs=((("b",), ("sq",), ("h",), ("dv",)),), blocked=frozenset(blocked))


def _attention(xs, attrs, ctx):
    q, k, v = (np.moveaxis(as_compute(a), 2, 1) for a in xs[:3])  # (b, h, s, d)
    scores = q @ np.swapaxes(k, -1, -2)
    scale = attrs["scale"]
    scores = scores / np.sqrt(q.shape[-1]) if scale is None else scores * scale
    if len(xs) == 4:
        scores = scores + as_compute(xs[3])
    sq, skv = q.shape[2], k.shape[2]
    if attrs["causal_mask"] is not None:
        offset = 0 if attrs["causal_mask"] == "TopLeft" else abs(sq - skv)  # as TVM: |sq - skv|
        keep = np.tril(np.ones((sq, skv), dtype=bool), offset)
        scores = np.where(keep, scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    e = np.exp(scores)
    out = (e / e.sum(axis=-1, keepdims=True)) @ v
    return np.moveaxis(out, 1, 2).astype(xs[0].dtype)


_ATTENTION_ATTRS = (
    Param("scale", "float", None),
    Param("causal_mask", "choice", None, choices=_CAUSAL),
    Param("window_size", "int", None),
)
_ATTENTION_SHARDING = ShardingDoc(
    passes="batch, heads (query, key, value and bias alike), query rows without a causal mask, value's head_dim",
    blocked="key length, query/key head_dim; query rows under a causal mask",
)

register_op(
    OpDef(
        name="nn.attention",
        params=(Param("query", "tensor"), Param("key", "tensor"), Param("value", "tensor"), *_ATTENTION_ATTRS),
        infer=_attention_infer("nn.attention"),
        numpy=_attention,
        sharding=_attention_rule,
        doc="softmax(q·kᵀ·scale [causal mask]) · v on (batch, seq, heads, head_dim) tensors; scale defaults to "
        "1/sqrt(head_dim); causal TopLeft keeps key j ≤ query i, BottomRight j ≤ i + |seq_len - seq_len_kv|.",
        relax=RelaxForm.same_name("nn.attention", "scale", "causal_mask", "window_size"),
        category="attention",
        sharding_doc=_ATTENTION_SHARDING,
    )
)

register_op(
    OpDef(
        name="nn.attention_bias",
        params=(Param("query", "tensor"), Param("key", "tensor"), Param("value", "tensor"), Param("bias", "tensor"),
                *_ATTENTION_ATTRS),
        infer=_attention_infer("nn.attention_bias"),
        numpy=_attention,
        sharding=_attention_rule,
        doc="R.nn.attention with a bias (batch, heads, seq_len, seq_len_kv), broadcast, added to the scaled "
        "scores (an additive mask: -inf where a query must not look).",
        relax=RelaxForm("relax.op.nn.attention", ("scale", "causal_mask", "window_size")),
        category="attention",
        sharding_doc=_ATTENTION_SHARDING,
    )
)
