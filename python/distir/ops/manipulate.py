"""Shape manipulation: reshape, permute_dims, astype, expand_dims, squeeze, concat, split."""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..errors import DiagnosticError, DistirError, TypeInferenceError
from ..ir import sym
from ..ir.exchange import reshape_groups
from ..ir.expr import Call, ShapeExpr, Var
from ..ir.layout import expand_strided, level_extents, local_type
from ..ir.op import RelaxForm, ShardingDoc, get_op
from ..ir.types import DTensorType, ShapeType, TupleType, np_dtype
from ._common import (
    LAYOUT_PARTIALS,
    OpDef,
    Param,
    ShardingRule,
    TensorType,
    dim_value,
    dims_factors,
    expect_tensor,
    is_float_dtype,
    is_int_dtype,
    is_one,
    norm_axes,
    norm_axis,
    register_op,
    shape_str,
)
from .docgen import partials_text

_LAYOUT = partials_text(LAYOUT_PARTIALS)


def _target_shape(x: TensorType, shape_t) -> tuple:
    if not isinstance(shape_t, ShapeType) or shape_t.values is None:
        raise TypeInferenceError("R.reshape: the new shape must be a shape value such as R.shape([4, 32])")
    vals = list(shape_t.values)
    total = sym.product(x.shape)
    holes = [i for i, v in enumerate(vals) if isinstance(v, int) and v == -1]
    if len(holes) > 1:
        raise TypeInferenceError("R.reshape: at most one dim of the new shape may be -1")
    if holes:
        rest = sym.product(v for i, v in enumerate(vals) if i not in holes)
        if not sym.prove_divisible(total, rest):
            raise TypeInferenceError(
                f"R.reshape: cannot infer the -1 dim: {sym.to_str(total)} elements do not divide by {sym.to_str(rest)}"
            )
        vals[holes[0]] = sym.floordiv(total, rest)
    if not sym.equal(sym.product(vals), total):
        raise TypeInferenceError(
            f"R.reshape: cannot reshape {_s(x.shape)} "
            f"({sym.to_str(total)} elements) to {_s(vals)} ({sym.to_str(sym.product(vals))} elements)"
        )
    return tuple(vals)


def _s(shape) -> str:
    return "(" + ", ".join(sym.to_str(d) for d in shape) + ")"


def _reshape_infer(types, attrs):
    x = expect_tensor(types[0], "reshape")
    return TensorType(_target_shape(x, types[1]), x.dtype)


def _reshape_rule(types, attrs, outs):
    src = types[0].shape
    dst = outs[0].shape
    ins: list[tuple] = [()] * len(src)
    out: list[tuple] = [()] * len(dst)
    blocked = set()
    for g, (si, ti) in enumerate(reshape_groups(src, dst)):
        if len(si) == 1:
            names = tuple(f"g{g}_{j}" for j in range(len(ti)))
            ins[si[0]] = names
            for j, d in enumerate(ti):
                out[d] = (names[j],)
        elif len(ti) == 1:
            names = tuple(f"g{g}_{j}" for j in range(len(si)))
            out[ti[0]] = names
            for j, d in enumerate(si):
                ins[d] = (names[j],)
        else:
            for j, d in enumerate(si):
                ins[d] = (f"g{g}_in{j}",)
                blocked.add(f"g{g}_in{j}")
            for j, d in enumerate(ti):
                out[d] = (f"g{g}_out{j}",)
                blocked.add(f"g{g}_out{j}")
    return ShardingRule(
        inputs=(tuple(ins), ()), outputs=(tuple(out),), blocked=frozenset(blocked), partial=LAYOUT_PARTIALS
    )


def _sharded_groups(x_shape, placement, y_shape):
    """The reshape groups whose leading input dim is sharded and which split or merge it:
    (input dims, output dims, leading dim, its mesh axes, the part that stays sharded, its unit)."""
    for si, ti in reshape_groups(x_shape, y_shape):
        lead = si[0]
        axes = placement.mesh_axes_of(lead)
        if not axes or (len(si) == 1 and len(ti) == 1):
            continue
        if len(si) == 1:  # a split: the leading output dim stays sharded, in units of the rest
            part, unit = y_shape[ti[0]], sym.product(y_shape[t] for t in ti[1:])
        else:  # a merge: the leading input dim is the sharded part of the output dim
            part, unit = x_shape[lead], sym.product(x_shape[d] for d in si[1:])
        yield si, ti, lead, axes, part, unit


def reshape_moves_data(x_shape, placement, y_shape, mesh_sizes) -> bool:
    """Whether the local form of a reshape of a tensor laid out ``placement`` moves data at these
    concrete sizes: a split or merge of a sharded dim whose count does not divide the part that
    stays sharded is gathered over its minor mesh axes and re-blocked over the major one, which
    moves data unless the two blockings agree (see :func:`_reshape_localize`)."""
    for _, _, _, axes, part, unit in _sharded_groups(x_shape, placement, y_shape):
        counts = [mesh_sizes[a] for a in axes]
        if part % math.prod(counts) == 0:
            continue
        if any(c > 1 for c in counts[1:]):
            return True
        k = counts[0]
        if -(-part // k) * unit != -(-(part * unit) // k):
            return True
    return False


def _reshape_localize(call, args, local_out, lower=None):
    """Reshape each worker's block. A sharded dim that is split (or the leading dim of a merge)
    keeps its blocks only when its count divides the part that stays sharded; otherwise it is
    re-blocked in whole units first (split) or after (merge) with ``R.ccl.regroup``, which
    moves nothing at counts that divide. A dim cut over several mesh axes is gathered over the
    minor ones first, re-blocked over the major one, and cut again over the minor ones after."""
    x, y = call.args[0].type, call.type
    if not isinstance(x, DTensorType) or not isinstance(y, DTensorType):
        return Call(call.op, (args[0], ShapeExpr(local_out.shape)), call.attrs, call.span)
    if x.placement.is_strided or y.placement.is_strided:
        return _strided_reshape_localize(call, args, local_out, lower)
    data = args[0]
    shape = list(local_out.shape)
    after = []  # (output dim, attrs of its regroup or None, minor mesh axes to cut again)
    for si, ti, lead, axes, part, unit in _sharded_groups(x.shape, x.placement, y.shape):
        counts = [x.mesh.shape[a] for a in axes]
        if sym.prove_divisible(part, sym.product(counts)):
            continue
        levels = level_extents(x.shape[lead], counts)
        for level in range(len(axes) - 1, 0, -1):  # gather the minor axes, innermost first
            attrs = {"num_workers": counts[level], "axis": lead, "extent": levels[level - 1],
                     "device_mesh": x.mesh, "mesh_axis": axes[level]}  # fmt: skip
            data = lower.bind(f"{_hint(data)}_gathered", Call(get_op("ccl.all_gather"), (data,), attrs, call.span))
        group = {"num_workers": counts[0], "device_mesh": x.mesh, "mesh_axis": axes[0]}
        if len(si) == 1:
            attrs = {"axis": lead, "extent": x.shape[lead], "unit_from": 1, "unit_to": unit, **group}
            data = lower.bind(f"{_hint(data)}_blocks", Call(get_op("ccl.regroup"), (data,), attrs, call.span))
            shape[ti[0]] = sym.ceildiv(part, counts[0])
            regroup = None
        else:
            shape[ti[0]] = sym.mul(sym.ceildiv(part, counts[0]), unit)
            regroup = {"axis": ti[0], "extent": y.shape[ti[0]], "unit_from": unit, "unit_to": 1, **group}
        if regroup is not None or len(axes) > 1:
            after.append((ti[0], regroup, list(zip(axes[1:], counts[1:]))))
    out = Call(call.op, (data, ShapeExpr(tuple(shape))), call.attrs, call.span)
    steps = []
    for dim, regroup, minor in after:
        if regroup is not None:
            steps.append((get_op("ccl.regroup"), regroup))
        for axis, count in minor:
            steps.append((get_op("ccl.local_shard"), {"num_workers": count, "axis": dim, "device_mesh": x.mesh,
                                                       "mesh_axis": axis}))  # fmt: skip
    for op, attrs in steps:
        out = Call(op, (lower.bind(f"{_hint(data)}_reshaped", out),), attrs, call.span)
    return out


def _strided_reshape_localize(call, args, local_out, lower):
    """A reshape from or to a strided layout is the reshape between the expanded forms
    (:func:`distir.ir.layout.expand_strided`), whose storage is the strided one element for
    element: the local storage is viewed in the expanded form, reshaped as a plain layout is,
    and viewed back."""
    x, y = call.args[0].type, call.type
    xw_shape, xw = expand_strided(x.shape, x.placement)
    yw_shape, yw = expand_strided(y.shape, y.placement)
    wide_in = DTensorType(xw_shape, x.dtype, x.mesh, xw)
    wide_out = DTensorType(yw_shape, y.dtype, y.mesh, yw)
    data = args[0]
    if x.placement.is_strided:
        view = Call(call.op, (data, ShapeExpr(local_type(wide_in).shape)), {}, call.span)
        data = lower.bind(f"{_hint(data)}_parts", view)
    inner = Call(call.op, (Var(_hint(args[0]), wide_in, call.span), ShapeExpr(yw_shape)), call.attrs, call.span)
    try:
        typed = inner.type
    except DistirError as err:
        typed = err
    if typed != wide_out:
        raise DiagnosticError(
            f"R.reshape from \"{x.placement}\" to \"{y.placement}\": the expanded forms ({_s(xw_shape)} \"{xw}\" to "
            f"{_s(yw_shape)} \"{yw}\") do not reshape into each other; redistribute first", call.span
        )
    out = _reshape_localize(inner, (data,), local_type(wide_out), lower)
    if y.placement.is_strided:
        out = Call(call.op, (lower.bind(f"{_hint(data)}_reshaped", out), ShapeExpr(local_out.shape)), {}, call.span)
    return out


def _hint(e) -> str:
    return getattr(e, "name", "x")


register_op(
    OpDef(
        name="reshape",
        params=(Param("x", "tensor"), Param("shape", "shape")),
        infer=_reshape_infer,
        numpy=lambda xs, attrs, ctx: np.reshape(xs[0], tuple(xs[1])),
        sharding=lambda types, attrs, outs: _with_shape_input(_reshape_rule(types[:1], attrs, outs)),
        localize=_reshape_localize,
        localize_strided=True,
        doc="Reshape in C order. A sharded dim passes through; where it becomes a minor part of an output dim it "
        "is a strided shard S[d/k] there (and back).",
        relax=RelaxForm.same_name("reshape"),
        category="shape",
        sharding_doc=ShardingDoc(
            passes="a dim that stays the leading (major) part of an output dim, through splits and merges; a dim "
            "that becomes a minor part, as a strided shard S[d/k] (docs/strided.md), and a strided dim whose parts "
            "line up with the split",
            blocked="dims in many-to-many groups; a minor part after parts of unknown size",
            partials=_LAYOUT,
        ),
    )
)


def _with_shape_input(rule: ShardingRule) -> ShardingRule:
    # the shape argument is not a tensor, so the rule has one tensor input
    return ShardingRule(
        inputs=rule.inputs[:1],
        outputs=rule.outputs,
        reductions=rule.reductions,
        blocked=rule.blocked,
        partial=rule.partial,
        partial_inputs=rule.partial_inputs,
    )


def _permute_axes(attrs, ndim):
    axes = attrs["axes"]
    if axes is None:
        return list(reversed(range(ndim)))
    axes = [a % ndim if -ndim <= a < ndim else a for a in axes]
    if sorted(axes) != list(range(ndim)):
        raise TypeInferenceError(f"R.permute_dims: axes {list(attrs['axes'])} are not a permutation of 0..{ndim - 1}")
    return axes


def _permute_infer(types, attrs):
    x = expect_tensor(types[0], "permute_dims")
    axes = _permute_axes(attrs, x.ndim)
    return TensorType(tuple(x.shape[a] for a in axes), x.dtype)


def _permute_rule(types, attrs, outs):
    x = types[0]
    axes = _permute_axes(attrs, x.ndim)
    ins = tuple((f"d{i}",) for i in range(x.ndim))
    out = tuple((f"d{a}",) for a in axes)
    return ShardingRule(inputs=(ins,), outputs=(out,), partial=LAYOUT_PARTIALS)


register_op(
    OpDef(
        name="permute_dims",
        params=(Param("x", "tensor"), Param("axes", "ints", None)),
        infer=_permute_infer,
        numpy=lambda xs, attrs, ctx: np.transpose(xs[0], _permute_axes(attrs, xs[0].ndim)),
        sharding=_permute_rule,
        doc="Permute dims (reverse them when axes is None).",
        relax=RelaxForm.same_name("permute_dims", "axes"),
        category="shape",
        sharding_doc=ShardingDoc(passes="all (renumbered)", partials=_LAYOUT),
    )
)


def _astype_infer(types, attrs):
    x = expect_tensor(types[0], "astype")
    return TensorType(x.shape, attrs["dtype"])


def _int_widens(src: str, dst: str) -> bool:
    """Every value of integer type ``src`` is a value of integer type ``dst``."""
    if not (is_int_dtype(src) and is_int_dtype(dst)):
        return False
    a, b = np.iinfo(src), np.iinfo(dst)
    return b.min <= a.min and a.max <= b.max


def _int_wraps_into(src: str, dst: str) -> bool:
    """A cast of integers that commutes with their wrapping sum: into as many bits or fewer
    (sums modulo 2^a, read modulo 2^b with b <= a, are the sums modulo 2^b)."""
    return is_int_dtype(src) and is_int_dtype(dst) and np.dtype(dst).itemsize <= np.dtype(src).itemsize


def _astype_rule(types, attrs, outs):
    # sum(cast(p_i)) = cast(sum(p_i)) only for casts that neither round nor see the wrap-around of
    # an integer sum (distir.ir.combine): float to float, or integers into as many bits or fewer;
    # max/min commute with a monotone cast that keeps the identities a worker with an empty block
    # holds in their place: into a float, or into an integer type that holds every value of the
    # source (-inf has no integer, and a narrowing or signed-to-unsigned cast wraps around)
    src, dst = types[0].dtype, attrs["dtype"]
    partial = {}
    if (is_float_dtype(src) and is_float_dtype(dst)) or _int_wraps_into(src, dst):
        partial.update({"sum": "one", "avg": "one"})
    if dst != "bool" and src != "bool" and (is_float_dtype(dst) or _int_widens(src, dst)):
        partial.update({"max": "one", "min": "one"})
    f = dims_factors(types[0].ndim)
    return ShardingRule(inputs=(f,), outputs=(f,), partial=partial)


register_op(
    OpDef(
        name="astype",
        params=(Param("x", "tensor"), Param("dtype", "dtype")),
        infer=_astype_infer,
        numpy=lambda xs, attrs, ctx: xs[0].astype(np_dtype(attrs["dtype"])),
        sharding=_astype_rule,
        doc="Convert the element type.",
        relax=RelaxForm.same_name("astype", "dtype"),
        category="elementwise",
        sharding_doc=ShardingDoc(
            passes="all",
            partials="sum, avg: `one` when the cast neither rounds nor sees an integer sum wrap around (float to "
            "float, integers into as many bits or fewer); max, min: `one` into a float or a wider integer type "
            "(not with bool)",
        ),
    )
)


# ---------------------------------------------------------------- expand_dims / squeeze


def _expand_axes(attrs, ndim: int) -> tuple[list[int], int]:
    axis = attrs["axis"]
    axes = [axis] if isinstance(axis, int) else list(axis or [])
    out_nd = ndim + len(axes)
    return norm_axes(axes, out_nd, "expand_dims"), out_nd


def _expand_infer(types, attrs):
    x = expect_tensor(types[0], "expand_dims")
    axes, out_nd = _expand_axes(attrs, x.ndim)
    src = iter(x.shape)
    return TensorType(tuple(1 if i in axes else next(src) for i in range(out_nd)), x.dtype)


def _expand_rule(types, attrs, outs):
    x = types[0]
    axes, out_nd = _expand_axes(attrs, x.ndim)
    ins = dims_factors(x.ndim)
    src = iter(ins)
    out = tuple(() if i in axes else next(src) for i in range(out_nd))
    return ShardingRule(inputs=(ins,), outputs=(out,), partial=LAYOUT_PARTIALS)


def _expand_numpy(xs, attrs, ctx):
    axes, _ = _expand_axes(attrs, xs[0].ndim)
    return np.expand_dims(xs[0], tuple(axes))


register_op(
    OpDef(
        name="expand_dims",
        params=(Param("x", "tensor"), Param("axis", "axes")),
        infer=_expand_infer,
        numpy=_expand_numpy,
        sharding=_expand_rule,
        doc="Insert size-1 dims at `axis` (positions in the output). Every dim of x passes its sharding.",
        relax=RelaxForm.same_name("expand_dims", "axis"),
        category="shape",
        sharding_doc=ShardingDoc(passes="all (renumbered)", partials=_LAYOUT),
    )
)


def _squeeze_axes(x: TensorType, attrs) -> list[int]:
    if attrs["axis"] is None:
        if any(sym.is_symbolic(d) for d in x.shape):
            # a symbolic dim might be 1 at run time; TVM gives up on the rank here, we ask
            raise TypeInferenceError(
                f"R.squeeze: the shape {shape_str(x.shape)} has symbolic dims, so say which axes to remove (axis=[...])"
            )
        return [i for i, d in enumerate(x.shape) if is_one(d)]
    axes = norm_axes(attrs["axis"], x.ndim, "squeeze")
    for a in axes:
        if not is_one(x.shape[a]):
            raise TypeInferenceError(
                f"R.squeeze: axis {a} has size {sym.to_str(x.shape[a])}, not 1, in a tensor of shape {shape_str(x.shape)}"
            )
    return axes


def _squeeze_infer(types, attrs):
    x = expect_tensor(types[0], "squeeze")
    axes = _squeeze_axes(x, attrs)
    return TensorType(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)


def _squeeze_rule(types, attrs, outs):
    x = types[0]
    axes = _squeeze_axes(x, attrs)
    ins = tuple(() if i in axes else (f"d{i}",) for i in range(x.ndim))
    out = tuple((f"d{i}",) for i in range(x.ndim) if i not in axes)
    return ShardingRule(inputs=(ins,), outputs=(out,), partial=LAYOUT_PARTIALS)


def _squeeze_numpy(xs, attrs, ctx):
    x = xs[0]
    if attrs["axis"] is None:
        return np.squeeze(x)
    return np.squeeze(x, axis=tuple(norm_axes(attrs["axis"], x.ndim, "squeeze")))


def _squeeze_localize(call, args, local_out, lower=None):
    """``axis=None`` becomes the explicit axes: per-worker shapes are symbolic, which None refuses."""
    attrs = call.attrs
    if attrs.get("axis") is not None:
        return Call(call.op, args, attrs, call.span)
    x = args[0].type
    ones = [i for i, d in enumerate(x.shape) if is_one(d)]
    if len(ones) != x.ndim - local_out.ndim:
        raise TypeInferenceError(
            f"R.squeeze: cannot tell which size-1 dims of the per-worker shape {shape_str(x.shape)} to remove; "
            "give axis=[...] explicitly"
        )
    new = dict(attrs)
    new["axis"] = ones
    return Call(call.op, args, new, call.span)


register_op(
    OpDef(
        name="squeeze",
        params=(Param("x", "tensor"), Param("axis", "axes", None)),
        infer=_squeeze_infer,
        numpy=_squeeze_numpy,
        sharding=_squeeze_rule,
        localize=_squeeze_localize,
        doc="Remove size-1 dims (all statically size-1 dims when axis is None). Other dims pass their sharding.",
        relax=RelaxForm.same_name("squeeze", "axis"),
        category="shape",
        sharding_doc=ShardingDoc(passes="all kept dims", partials=_LAYOUT),
    )
)


# ---------------------------------------------------------------- concat


def _concat_fields(types) -> list[TensorType]:
    t = types[0]
    if not isinstance(t, TupleType):
        raise TypeInferenceError(f"R.concat: the first argument must be a tuple of tensors, got {t}")
    if not t.fields:
        raise TypeInferenceError("R.concat: needs at least one tensor")
    return [expect_tensor(f, "concat", f"tensor {i}") for i, f in enumerate(t.fields)]


def _concat_infer(types, attrs):
    fields = _concat_fields(types)
    first = fields[0]
    if first.ndim == 0:
        raise TypeInferenceError("R.concat: cannot concatenate rank-0 tensors")
    axis = norm_axis(attrs["axis"], first.ndim, "concat")
    total = first.shape[axis]
    for i, f in enumerate(fields[1:], start=1):
        if f.ndim != first.ndim:
            raise TypeInferenceError(f"R.concat: tensor {i} has rank {f.ndim} but tensor 0 has rank {first.ndim}")
        if f.dtype != first.dtype:
            raise TypeInferenceError(f"R.concat: tensor {i} has dtype {f.dtype} but tensor 0 has {first.dtype}")
        for d in range(first.ndim):
            if d != axis and not sym.equal(f.shape[d], first.shape[d]):
                raise TypeInferenceError(
                    f"R.concat: tensor {i} has shape {shape_str(f.shape)} and tensor 0 {shape_str(first.shape)}; "
                    f"they must agree on every dim but the concat axis {axis} (dim {d} differs)"
                )
        total = sym.add(total, f.shape[axis])
    return TensorType(tuple(total if d == axis else s for d, s in enumerate(first.shape)), first.dtype)


# a partial value concatenated with partials of the same reduction stays partial: the
# reduction is elementwise and concat only places elements
_CONCAT_PARTIALS = {"sum": "all", "avg": "all", "max": "all", "min": "all"}


def _concat_rule(types, attrs, outs):
    # types: the flattened tensors of the tuple
    ndim = types[0].ndim
    axis = norm_axis(attrs["axis"], ndim, "concat")
    f = dims_factors(ndim)
    return ShardingRule(inputs=(f,) * len(types), outputs=(f,), blocked=frozenset({f"d{axis}"}), partial=_CONCAT_PARTIALS)


register_op(
    OpDef(
        name="concat",
        params=(Param("tensors", "tuple"), Param("axis", "int", 0)),
        infer=_concat_infer,
        numpy=lambda xs, attrs, ctx: np.concatenate(list(xs[0]), axis=attrs["axis"]),
        sharding=_concat_rule,
        doc="Concatenate a tuple of tensors along `axis`; that axis must be whole, the others pass.",
        relax=RelaxForm.same_name("concat", "axis"),
        category="shape",
        sharding_doc=ShardingDoc(
            passes="other dims, sharded alike in every input", blocked="`axis`", partials=partials_text(_CONCAT_PARTIALS)
        ),
    )
)


# ---------------------------------------------------------------- split


def _split_sizes(x: TensorType, attrs) -> tuple[int, list]:
    """The split axis and the length of each piece (TVM's rule: n sections of ceil(dim / n), the last smaller)."""
    axis = norm_axis(attrs["axis"], x.ndim, "split")
    dim = x.shape[axis]
    ios = attrs["indices_or_sections"]
    if isinstance(ios, int):
        if ios < 1:
            raise TypeInferenceError(f"R.split: indices_or_sections={ios}: the number of sections must be at least 1")
        each = sym.floordiv(sym.add(dim, ios - 1), ios)
        if isinstance(dim, int) and ios > 1 and each * (ios - 1) > dim:
            raise TypeInferenceError(f"R.split: cannot split a dim of size {dim} into {ios} sections")
        return axis, [each] * (ios - 1) + [sym.sub(dim, sym.mul(each, ios - 1))]
    points = list(ios)
    if isinstance(dim, int) and all(isinstance(p, int) for p in points):
        bounds = [0] + points + [dim]
        return axis, [len(range(dim)[a:b]) for a, b in itertools.pairwise(bounds)]
    for a, b in itertools.pairwise(points):
        if isinstance(a, int) and isinstance(b, int) and b < a:
            raise TypeInferenceError(f"R.split: indices {[sym.to_str(p) for p in points]} must be increasing")
    # symbolic: indices are taken to be in range and increasing
    bounds = [0] + points + [dim]
    return axis, [sym.sub(b, a) for a, b in itertools.pairwise(bounds)]


def _split_infer(types, attrs):
    x = expect_tensor(types[0], "split")
    if x.ndim == 0:
        raise TypeInferenceError("R.split: cannot split a rank-0 tensor")
    axis, sizes = _split_sizes(x, attrs)
    return TupleType(
        tuple(TensorType(tuple(n if d == axis else s for d, s in enumerate(x.shape)), x.dtype) for n in sizes)
    )


def _split_rule(types, attrs, outs):
    """The split axis is whole, except that a split into ``n`` equal sections views it as ``(n, size / n)``
    (as a reshape would): the sections factor stays whole and the inner one may be cut, so an input
    laid out ``S[axis/n]`` (each worker holding its block of every section, docs/strided.md) gives
    every output ``S[axis]`` with no communication: a fused QKV projection split into q, k and v."""
    x = types[0]
    axis = norm_axis(attrs["axis"], x.ndim, "split")
    f = dims_factors(x.ndim)
    n = attrs["indices_or_sections"]
    if isinstance(n, int) and n > 1 and sym.prove_divisible(x.shape[axis], n):
        part, inner = f"p{axis}", f"d{axis}"
        ins = tuple((part, inner) if d == axis else fs for d, fs in enumerate(f))
        return ShardingRule(inputs=(ins,), outputs=(f,) * len(outs), blocked=frozenset({part}), partial=LAYOUT_PARTIALS,
                            sizes={part: n})
    return ShardingRule(inputs=(f,), outputs=(f,) * len(outs), blocked=frozenset({f"d{axis}"}), partial=LAYOUT_PARTIALS)


def _split_numpy(xs, attrs, ctx):
    x = xs[0]
    axis = norm_axis(attrs["axis"], x.ndim, "split")
    ios = attrs["indices_or_sections"]
    if isinstance(ios, int):
        each = -(-x.shape[axis] // ios)
        points = [each * i for i in range(1, ios)]
    else:
        points = [dim_value(ctx, p) for p in ios]
    return tuple(np.split(x, points, axis=axis))


register_op(
    OpDef(
        name="split",
        params=(Param("x", "tensor"), Param("indices_or_sections", "int_or_dims"), Param("axis", "int", 0)),
        infer=_split_infer,
        numpy=_split_numpy,
        sharding=_split_rule,
        doc="Split along `axis` into n sections or at the given indices; a tuple of tensors. The axis must be whole.",
        relax=RelaxForm.same_name("split", "indices_or_sections", "axis"),
        category="shape",
        sharding_doc=ShardingDoc(passes="other dims, into every output; into n equal sections, `S[axis/n]` (a worker's block "
                                 "of every section) gives every output `S[axis]`",
                                 blocked="`axis`, except into n equal sections from `S[axis/n]`", partials=_LAYOUT),
    )
)


# ---------------------------------------------------------------- broadcast_to


def _broadcast_to_infer(types, attrs):
    x = expect_tensor(types[0], "broadcast_to")
    shape_t = types[1]
    if not isinstance(shape_t, ShapeType) or shape_t.values is None:
        raise TypeInferenceError("R.broadcast_to: the target shape must be a shape value such as R.shape([4, n])")
    target = tuple(shape_t.values)
    off = len(target) - x.ndim
    if off < 0:
        raise TypeInferenceError(
            f"R.broadcast_to: cannot broadcast {shape_str(x.shape)} to the lower rank {shape_str(target)}"
        )
    for i, d in enumerate(x.shape):
        if not is_one(d) and not sym.equal(d, target[i + off]):
            raise TypeInferenceError(
                f"R.broadcast_to: dim {i} of {shape_str(x.shape)} is {sym.to_str(d)}, which broadcasts only to "
                f"itself, not to {sym.to_str(target[i + off])} of {shape_str(target)}"
            )
    return TensorType(target, x.dtype)


def _broadcast_to_rule(types, attrs, outs):
    x, out = types[0], outs[0]
    off = out.ndim - x.ndim
    ins = tuple(() if is_one(d) else (f"d{i + off}",) for i, d in enumerate(x.shape))
    # copies of elements: every partial passes (the sum of copies is the copy of the sum)
    return ShardingRule(inputs=(ins,), outputs=(dims_factors(out.ndim),), partial=LAYOUT_PARTIALS)


def _shape_arg_localize(call, args, local_out, lower=None):
    """The target shape argument becomes the per-worker shape."""
    return Call(call.op, (args[0], ShapeExpr(local_out.shape)), call.attrs, call.span)


register_op(
    OpDef(
        name="broadcast_to",
        params=(Param("x", "tensor"), Param("shape", "shape")),
        infer=_broadcast_to_infer,
        numpy=lambda xs, attrs, ctx: np.broadcast_to(xs[0], tuple(xs[1])).copy(),
        sharding=lambda types, attrs, outs: _with_shape_input(_broadcast_to_rule(types[:1], attrs, outs)),
        localize=_shape_arg_localize,
        doc="Broadcast x to `shape` (numpy rules: new leading dims, size-1 dims stretched).",
        relax=RelaxForm.same_name("broadcast_to"),
        category="shape",
        sharding_doc=ShardingDoc(
            passes="every dim of x that is not 1 (renumbered)",
            blocked="– (new and stretched dims come out replicated)",
            partials=_LAYOUT,
        ),
    )
)


# ---------------------------------------------------------------- repeat / tile


def _repeat_infer(types, attrs):
    x = expect_tensor(types[0], "repeat")
    r = attrs["repeats"]
    if r < 1:
        raise TypeInferenceError(f"R.repeat: repeats must be at least 1, got {r}")
    if attrs["axis"] is None:
        return TensorType((sym.mul(sym.product(x.shape), r),), x.dtype)
    axis = norm_axis(attrs["axis"], x.ndim, "repeat")
    return TensorType(tuple(sym.mul(d, r) if i == axis else d for i, d in enumerate(x.shape)), x.dtype)


def _repeat_rule(types, attrs, outs):
    x = types[0]
    ins = dims_factors(x.ndim)
    if attrs["axis"] is None:  # flattened: every dim whole
        flat = (("flat",),)
        return ShardingRule(inputs=(ins,), outputs=(flat,), blocked=frozenset({*(f[0] for f in ins), "flat"}),
                            partial=LAYOUT_PARTIALS)
    axis = norm_axis(attrs["axis"], x.ndim, "repeat")
    # element i of the repeated dim becomes r elements: the output dim is (d_axis, copies), d_axis major,
    # so a block of whole elements of x is a block of the output (re-blocked where the count does not divide)
    out = tuple((f"d{i}", "copies") if i == axis else f for i, f in enumerate(ins))
    return ShardingRule(inputs=(ins,), outputs=(out,), partial=LAYOUT_PARTIALS)


def _repeat_localize(call, args, local_out, lower):
    """Repeat each worker's block; where the count may not divide the repeated dim, the blocks of
    whole repeated elements (ceil(n / W) * r) are re-blocked to the output's blocks (ceil(n * r / W))
    with R.ccl.regroup, which specialize drops at counts that divide."""
    x = call.args[0].type
    attrs = call.op.full_attrs(call.attrs)
    if not isinstance(x, DTensorType) or attrs["axis"] is None:
        return Call(call.op, args, call.attrs, call.span)
    axis = norm_axis(attrs["axis"], x.ndim, "repeat")
    axes = x.placement.mesh_axes_of(axis)
    if not axes or sym.prove_divisible(x.shape[axis], sym.product(x.mesh.shape[a] for a in axes)):
        return Call(call.op, args, call.attrs, call.span)
    if len(axes) > 1:
        raise DiagnosticError(
            f"R.repeat: the repeated dim {axis} is cut over {len(axes)} mesh axes, which may not divide it; "
            "redistribute it onto one mesh axis first", call.span
        )
    r = attrs["repeats"]
    local = lower.bind(f"{_hint(args[0])}_repeated", Call(call.op, args, call.attrs, call.span))
    regroup = {"num_workers": x.mesh.shape[axes[0]], "axis": axis, "extent": sym.mul(x.shape[axis], r),
               "unit_from": r, "unit_to": 1, "device_mesh": x.mesh, "mesh_axis": axes[0]}  # fmt: skip
    return Call(get_op("ccl.regroup"), (local,), regroup, call.span)


register_op(
    OpDef(
        name="repeat",
        params=(Param("x", "tensor"), Param("repeats", "int"), Param("axis", "int", None)),
        infer=_repeat_infer,
        numpy=lambda xs, attrs, ctx: np.repeat(xs[0], attrs["repeats"], axis=attrs["axis"]),
        sharding=_repeat_rule,
        localize=_repeat_localize,
        doc="Repeat each element `repeats` times along `axis` (the flattened tensor when None), as numpy.repeat.",
        relax=RelaxForm.same_name("repeat", "repeats", "axis"),
        category="shape",
        sharding_doc=ShardingDoc(
            passes="every dim, the repeated one in blocks of whole repeated elements (re-blocked with "
            "`R.ccl.regroup` at counts that do not divide it)",
            blocked="all dims when axis is None",
            partials=_LAYOUT,
        ),
    )
)


def _tile_reps(x: TensorType, attrs) -> list[int]:
    reps = list(attrs["repeats"])
    if any(r < 1 for r in reps):
        raise TypeInferenceError(f"R.tile: repeats must be at least 1, got {reps}")
    return [1] * (x.ndim - len(reps)) + reps


def _tile_infer(types, attrs):
    x = expect_tensor(types[0], "tile")
    reps = _tile_reps(x, attrs)
    shape = (1,) * (len(reps) - x.ndim) + tuple(x.shape)
    return TensorType(tuple(sym.mul(d, r) for d, r in zip(shape, reps)), x.dtype)


def _tile_rule(types, attrs, outs):
    x = types[0]
    reps = _tile_reps(x, attrs)
    off = len(reps) - x.ndim
    ins = tuple((f"d{i + off}",) for i in range(x.ndim))
    # a tiled dim holds the whole of x's dim again and again, so a block of it is not a block of the output
    blocked = frozenset(f"d{i}" for i, r in enumerate(reps) if r > 1)
    return ShardingRule(inputs=(ins,), outputs=(dims_factors(len(reps)),), blocked=blocked, partial=LAYOUT_PARTIALS)


register_op(
    OpDef(
        name="tile",
        params=(Param("x", "tensor"), Param("repeats", "ints")),
        infer=_tile_infer,
        numpy=lambda xs, attrs, ctx: np.tile(xs[0], tuple(attrs["repeats"])),
        sharding=_tile_rule,
        doc="Repeat the whole tensor `repeats[i]` times along dim i, as numpy.tile.",
        relax=RelaxForm.same_name("tile", "repeats"),
        category="shape",
        sharding_doc=ShardingDoc(passes="dims tiled once", blocked="dims tiled more than once", partials=_LAYOUT),
    )
)
