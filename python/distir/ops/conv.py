"""Convolutions (conv1d, conv2d, conv3d) and image resizing (image.resize2d).

A convolution's output channel is a weight row (cut the weight's first dim: column parallel)
and its input channels are contracted (cut both: each worker holds a partial sum, row
parallel); the batch passes. A spatial dim is read through a window that crosses block edges,
so it stays whole (a halo exchange would be needed). Grouped convolutions keep their channels
whole. Resizing reads neighbouring pixels the same way: batch and channels pass, the image
dims stay whole. Only the channels-first layouts (NCW / NCHW / NCDHW, weights OIW / OIHW /
OIDHW) are modelled; transpose other layouts with R.permute_dims.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..errors import TypeInferenceError
from ..ir import sym
from ..ir.op import RelaxForm, ShardingDoc
from ..ir.types import ShapeType, np_dtype
from ._common import (
    OpDef,
    Param,
    ShardingRule,
    TensorType,
    as_compute,
    dim_value,
    expect_tensor,
    is_float_dtype,
    register_op,
    shape_str,
)

_SPATIAL = "WHD"  # the spatial letters, innermost first
_LAYOUTS = {1: ("NCW", "OIW"), 2: ("NCHW", "OIHW"), 3: ("NCDHW", "OIDHW")}


def _conv_spec(name: str, n: int, x: TensorType, w: TensorType, attrs):
    """(strides, (pad_before, pad_after) per spatial dim, dilation), checked."""
    data_layout, kernel_layout = _LAYOUTS[n]
    if attrs["data_layout"] != data_layout or attrs["kernel_layout"] != kernel_layout or \
            (attrs["out_layout"] or data_layout) != data_layout:
        raise TypeInferenceError(
            f"R.{name}: distir models the layouts data {data_layout}, kernel {kernel_layout}, out {data_layout}; got "
            f"{attrs['data_layout']}, {attrs['kernel_layout']}, {attrs['out_layout']} (transpose with R.permute_dims)"
        )
    for t, what in ((x, "data"), (w, "weight")):
        if t.ndim != n + 2:
            raise TypeInferenceError(f"R.{name}: {what} must have rank {n + 2}, got {shape_str(t.shape)}")
    strides, dilation = _per_dim(name, "strides", attrs["strides"], n), _per_dim(name, "dilation", attrs["dilation"], n)
    pad = list(attrs["padding"])
    if len(pad) == 1:
        pad = pad * (2 * n)
    elif len(pad) == n:
        pad = pad + pad
    if len(pad) != 2 * n or any(p < 0 for p in pad):
        raise TypeInferenceError(f"R.{name}: padding needs 1, {n} or {2 * n} non-negative numbers, got {list(attrs['padding'])}")
    if any(s < 1 for s in strides) or any(d < 1 for d in dilation):
        raise TypeInferenceError(f"R.{name}: strides and dilation must be positive, got {strides}, {dilation}")
    return strides, list(zip(pad[:n], pad[n:])), dilation


def _per_dim(name, what, values, n):
    values = list(values)
    if len(values) == 1:
        values = values * n
    if len(values) != n:
        raise TypeInferenceError(f"R.{name}: {what} needs 1 or {n} numbers, got {values}")
    return values


def _conv_infer(name: str, n: int):
    def infer(types, attrs):
        x = expect_tensor(types[0], name, "data")
        w = expect_tensor(types[1], name, "weight")
        strides, pads, dilation = _conv_spec(name, n, x, w, attrs)
        if x.dtype != w.dtype or not is_float_dtype(x.dtype):
            raise TypeInferenceError(f"R.{name}: data and weight need one floating-point dtype, got {x.dtype} and {w.dtype}")
        g = attrs["groups"]
        if g < 1 or not sym.prove_divisible(x.shape[1], g) or not sym.prove_divisible(w.shape[0], g):
            raise TypeInferenceError(f"R.{name}: {g} groups must divide the input and output channels")
        if not sym.equal(sym.mul(w.shape[1], g), x.shape[1]):
            raise TypeInferenceError(
                f"R.{name}: weight {shape_str(w.shape)} takes {sym.to_str(w.shape[1])} channels per group, but data "
                f"{shape_str(x.shape)} has {sym.to_str(x.shape[1])} in {g} group(s)"
            )
        out = [x.shape[0], w.shape[0]]
        for i in range(n):
            k, size = w.shape[2 + i], x.shape[2 + i]
            if not isinstance(k, int):
                raise TypeInferenceError(f"R.{name}: the kernel size must be static, got {shape_str(w.shape)}")
            span = sym.add(size, pads[i][0] + pads[i][1] - dilation[i] * (k - 1) - 1)
            out.append(sym.add(sym.floordiv(span, strides[i]), 1))
        return TensorType(tuple(out), attrs["out_dtype"] or x.dtype)

    return infer


def _conv_rule(n: int):
    def rule(types, attrs, outs):
        spatial = tuple((f"s{i}",) for i in range(n))
        kernel = tuple((f"k{i}",) for i in range(n))
        out_spatial = tuple((f"t{i}",) for i in range(n))
        blocked = {f[0] for f in spatial + kernel + out_spatial}
        if attrs["groups"] == 1:  # input channels are contracted: a cut gives partial sums
            return ShardingRule(
                inputs=((("n",), ("c",), *spatial), (("o",), ("c",), *kernel)),
                outputs=((("n",), ("o",), *out_spatial),),
                reductions={"c": "sum"},
                blocked=frozenset(blocked),
                partial={"sum": "one", "avg": "one"},
            )
        # grouped: channels relate group by group, kept whole
        return ShardingRule(
            inputs=((("n",), ("c",), *spatial), (("o",), ("ci",), *kernel)),
            outputs=((("n",), ("o",), *out_spatial),),
            blocked=frozenset(blocked | {"c", "ci", "o"}),
            partial={"sum": "one", "avg": "one"},
        )

    return rule


def _conv_numpy(n: int):
    def numpy(xs, attrs, ctx):
        x, w = xs
        strides, pads, dilation = _conv_spec(f"nn.conv{n}d", n, TensorType(x.shape, str(x.dtype)),
                                             TensorType(w.shape, str(w.dtype)), attrs)
        g = attrs["groups"]
        xp = np.pad(as_compute(x), [(0, 0), (0, 0), *pads])
        w64 = as_compute(w)
        kernel = w.shape[2:]
        out_sp = [(xp.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(n)]
        cin, cout = x.shape[1] // g, w.shape[0] // g
        out = np.zeros((x.shape[0], w.shape[0], *out_sp))
        for offs in itertools.product(*(range(k) for k in kernel)):
            window = tuple(
                slice(o * d, o * d + (m - 1) * s + 1, s) for o, d, m, s in zip(offs, dilation, out_sp, strides)
            )
            patch = xp[(slice(None), slice(None), *window)]  # (N, C, *out_sp)
            tap = w64[(slice(None), slice(None), *offs)]  # (O, C / g)
            for j in range(g):
                out[:, j * cout:(j + 1) * cout] += np.einsum(
                    "nc...,oc->no...", patch[:, j * cin:(j + 1) * cin], tap[j * cout:(j + 1) * cout]
                )
        return out.astype(np_dtype(attrs["out_dtype"] or str(x.dtype)))

    return numpy


for _n in (1, 2, 3):
    _data_layout, _kernel_layout = _LAYOUTS[_n]
    register_op(
        OpDef(
            name=f"nn.conv{_n}d",
            params=(
                Param("data", "tensor"),
                Param("weight", "tensor"),
                Param("strides", "ints", [1] * _n),
                Param("padding", "ints", [0] * (2 * _n)),
                Param("dilation", "ints", [1] * _n),
                Param("groups", "int", 1),
                Param("data_layout", "str", _data_layout),
                Param("kernel_layout", "str", _kernel_layout),
                Param("out_layout", "str", None),
                Param("out_dtype", "optional_dtype", None),
            ),
            infer=_conv_infer(f"nn.conv{_n}d", _n),
            numpy=_conv_numpy(_n),
            sharding=_conv_rule(_n),
            doc=f"{_n}-D convolution, data {_data_layout}, weight {_kernel_layout}; padding is "
            "[before..., after...] per spatial dim.",
            relax=RelaxForm.same_name(
                f"nn.conv{_n}d", "strides", "padding", "dilation", "groups", "data_layout", "kernel_layout",
                "out_layout", "out_dtype",
            ),
            category="convolution",
            sharding_doc=ShardingDoc(
                passes="batch; output channels (weight rows)",
                blocked="spatial and kernel dims; channels when groups > 1",
                gives_partial="input channels (data and weight alike) → `P[sum]` (groups = 1)",
                partials="sum, avg: `one`",
            ),
        )
    )


# ---------------------------------------------------------------- image.resize2d

_METHODS = ("nearest_neighbor", "linear")
_MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn")
_ROUNDING = ("", "round", "round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_IMAGE_LAYOUTS = {"NCHW": (2, 3), "NHWC": (1, 2)}


def _resize_infer(types, attrs):
    x = expect_tensor(types[0], "image.resize2d", "data")
    size = types[1]
    if attrs["layout"] not in _IMAGE_LAYOUTS:
        raise TypeInferenceError(f"R.image.resize2d: layout must be NCHW or NHWC, got {attrs['layout']}")
    if attrs["method"] not in _METHODS:
        raise TypeInferenceError(
            f"R.image.resize2d: method '{attrs['method']}' is not modelled; use nearest_neighbor or linear"
        )
    if attrs["coordinate_transformation_mode"] not in _MODES:
        raise TypeInferenceError(
            f"R.image.resize2d: coordinate_transformation_mode '{attrs['coordinate_transformation_mode']}' is not "
            f"modelled (known: {', '.join(_MODES)})"
        )
    if attrs["rounding_method"] not in _ROUNDING:
        raise TypeInferenceError(f"R.image.resize2d: unknown rounding_method '{attrs['rounding_method']}'")
    if x.ndim != 4 or not isinstance(size, ShapeType) or size.values is None or len(size.values) != 2:
        raise TypeInferenceError("R.image.resize2d: needs 4-D data and a size of two dims, R.shape([h, w])")
    h, w = _IMAGE_LAYOUTS[attrs["layout"]]
    shape = list(x.shape)
    shape[h], shape[w] = size.values
    return TensorType(tuple(shape), attrs["out_dtype"] or x.dtype)


def _resize_rule(types, attrs, outs):
    h, w = _IMAGE_LAYOUTS[attrs["layout"]]
    dims = tuple((f"d{i}",) for i in range(4))
    out = tuple((f"o{i}",) if i in (h, w) else f for i, f in enumerate(dims))
    return ShardingRule(inputs=(dims,), outputs=(out,), blocked=frozenset({f"d{h}", f"d{w}", f"o{h}", f"o{w}"}))


def _source_coords(size: int, target: int, mode: str) -> np.ndarray:
    """Where output index x reads in the input, in float32 as TVM computes it (topi.image.resize)."""
    f32 = np.float32
    x = np.arange(target, dtype=f32)
    scale = f32(size) / f32(target)
    if mode == "half_pixel":
        return (x + f32(0.5)) * scale - f32(0.5)
    if mode == "align_corners":
        return f32(size - 1) / f32(target - 1) * x if target > 1 else np.zeros_like(x)
    if mode == "asymmetric":
        return scale * x
    if mode == "pytorch_half_pixel":
        return (x + f32(0.5)) * scale - f32(0.5) if target > 1 else np.zeros_like(x)
    return (x + f32(0.5)) * scale  # tf_half_pixel_for_nn


def _nearest(coord: np.ndarray, rounding: str, mode: str, size: int, target: int) -> np.ndarray:
    if rounding == "":
        rounding = "round" if mode == "align_corners" else "floor"
    if mode == "asymmetric" and rounding == "floor" and target % size == 0:
        return np.arange(target) // (target // size)  # TVM divides integers here
    f32 = np.float32
    if rounding == "round":
        idx = np.round(coord)  # TVM's round: half to even (nearbyint)
    elif rounding == "round_prefer_floor":
        idx = np.ceil(coord - f32(0.5))
    elif rounding == "round_prefer_ceil":
        idx = np.floor(coord + f32(0.5))
    elif rounding == "floor":
        idx = np.floor(coord + f32(1e-5))
    else:
        idx = np.ceil(coord - f32(1e-5))
    return np.clip(idx.astype(np.int64), 0, size - 1)


def _resize_numpy(xs, attrs, ctx):
    x = xs[0]
    h, w = _IMAGE_LAYOUTS[attrs["layout"]]
    targets = [dim_value(ctx, d) for d in xs[1]]
    mode, out = attrs["coordinate_transformation_mode"], x.astype(np.float32)
    for axis, target in zip((h, w), targets):
        size = out.shape[axis]
        coord = _source_coords(size, target, mode)
        if attrs["method"] == "nearest_neighbor":
            out = np.take(out, _nearest(coord, attrs["rounding_method"], mode, size, target), axis=axis)
            continue
        lo = np.floor(coord)
        frac = (coord - lo).astype(np.float32)
        lo = lo.astype(np.int64)
        a = np.take(out, np.clip(lo, 0, size - 1), axis=axis)
        b = np.take(out, np.clip(lo + 1, 0, size - 1), axis=axis)
        shape = [1] * out.ndim
        shape[axis] = target
        t = frac.reshape(shape)
        out = a * (np.float32(1) - t) + b * t
    return out.astype(np_dtype(attrs["out_dtype"] or str(x.dtype)))


register_op(
    OpDef(
        name="image.resize2d",
        params=(
            Param("data", "tensor"),
            Param("size", "shape"),
            Param("roi", "floats", [0.0, 0.0, 0.0, 0.0]),
            Param("layout", "str", "NCHW"),
            Param("method", "str", "linear"),
            Param("coordinate_transformation_mode", "str", "half_pixel"),
            Param("rounding_method", "str", "round"),
            Param("cubic_alpha", "float", -0.75),
            Param("cubic_exclude", "int", 0),
            Param("extrapolation_value", "float", 0.0),
            Param("out_dtype", "optional_dtype", None),
        ),
        infer=_resize_infer,
        numpy=_resize_numpy,
        sharding=_resize_rule,
        doc="Resize the image dims to `size` (nearest_neighbor or linear; the coordinate modes and roundings "
        "of TVM's topi.image.resize2d, computed in float32 as TVM computes them).",
        relax=RelaxForm(
            "relax.op.image.resize2d",
            ("roi", "layout", "method", "coordinate_transformation_mode", "rounding_method", "cubic_alpha",
             "cubic_exclude", "extrapolation_value", "out_dtype"),
            emit="distir.tvm.relax.ops:emit_resize2d",
            doc="in the input's dtype, then astype(out_dtype) (TVM ignores out_dtype)",
        ),
        category="convolution",
        sharding_doc=ShardingDoc(passes="batch, channels", blocked="the image dims (height, width)"),
    )
)
