"""Indexing: strided_slice and take (gather, e.g. an embedding lookup).

A sliced axis stays whole (a worker's shard of a slice is not the slice of its shard)
unless the slice covers the axis, in which case the op is an identity there and a
sharding passes; `localize` then rewrites the slice's end to the per-worker size. In
take, the table's other dims and every dim of the indices pass; a table sharded on the
gathered axis (a vocab-parallel embedding) gives a partial sum, and each worker runs
R.shard_take: a lookup in its own rows, with zeros for indices outside them.
"""

from __future__ import annotations

import numpy as np

from ..errors import DistirError, TypeInferenceError
from ..ir import sym
from ..ir.expr import Call
from ..ir.layout import block_start_expr
from ..ir.op import RelaxForm, ShardingDoc, get_op
from ..ir.types import DTensorType
from ._common import (
    LAYOUT_PARTIALS,
    Dim,
    OpDef,
    Param,
    ShardingRule,
    TensorType,
    dim_value,
    dims_factors,
    expect_tensor,
    is_int_dtype,
    norm_axis,
    register_op,
    shape_str,
)
from .docgen import partials_text

# ---------------------------------------------------------------- strided_slice

# An int bound at least this large means "to the end" (as in ONNX/TVM imports that write INT_MAX).
_BIG = 2**31 - 1


def _slice_spec(x: TensorType, attrs) -> list[tuple[int, Dim, Dim, int]]:
    """(axis, begin, end, stride) per sliced axis, checked."""
    axes = list(attrs["axes"])
    begin = list(attrs["begin"])
    end = list(attrs["end"])
    strides = list(attrs["strides"]) if attrs.get("strides") is not None else [1] * len(axes)
    if not (len(begin) == len(end) == len(strides) == len(axes)):
        raise TypeInferenceError(
            f"R.strided_slice: axes, begin, end and strides must have one entry per sliced axis; got "
            f"{len(axes)} axes, {len(begin)} begin, {len(end)} end, {len(strides)} strides"
        )
    out = []
    seen = set()
    for a, b, e, s in zip(axes, begin, end, strides):
        ax = norm_axis(a, x.ndim, "strided_slice")
        if ax in seen:
            raise TypeInferenceError(f"R.strided_slice: axis {ax} is sliced twice")
        seen.add(ax)
        if not isinstance(s, int):
            raise TypeInferenceError(f"R.strided_slice: stride {sym.to_str(s)} on axis {ax} must be an integer constant")
        if s == 0:
            raise TypeInferenceError(f"R.strided_slice: stride on axis {ax} is 0")
        out.append((ax, b, e, s))
    return out


def _slice_len(dim: Dim, b: Dim, e: Dim, s: int) -> Dim:
    """Length of ``range(dim)[b:e:s]``: exact (clamped as numpy does) when everything is an int.

    With symbolic values, negative int indices count from the end, an int end of at least
    2**31 - 1 means "to the end", a bound provably past the end is clamped, and otherwise the
    bounds are taken to be in range (the interpreter checks that at run time). This keeps
    ``x[1:n]`` at length ``n - 1`` and a worker's block ``[w * p, w * p + p)`` at ``p``,
    instead of TVM's ``T.max(T.min(...), 0)`` forms.
    """
    if isinstance(dim, int) and isinstance(b, int) and isinstance(e, int):
        return len(range(dim)[b:e:s])
    if isinstance(b, int) and b < 0:
        b = sym.add(dim, b)
    if isinstance(e, int):
        if s > 0 and e >= _BIG:
            e = dim
        elif s < 0 and e <= -_BIG:
            e = -1
        elif e < 0:
            e = sym.add(dim, e)
    if s > 0:
        if sym.prove_ge(e, dim):
            e = dim
        if sym.prove_ge(b, dim):
            b = dim
        return sym.ceildiv(sym.sub(e, b), s)
    last = sym.sub(dim, 1)
    if sym.prove_ge(b, last):
        b = last
    return sym.ceildiv(sym.sub(b, e), -s)


def _covers(dim: Dim, b: Dim, e: Dim, s: int) -> bool:
    """True when the slice provably keeps the whole axis in order (an identity on it)."""
    if s != 1 or not sym.equal(b, 0):
        return False
    if isinstance(e, int) and e >= _BIG:
        return True
    if isinstance(e, int) and isinstance(dim, int):
        return e >= dim
    return sym.equal(e, dim) or sym.prove_ge(e, dim)


def _slice_infer(types, attrs):
    x = expect_tensor(types[0], "strided_slice")
    shape = list(x.shape)
    for ax, b, e, s in _slice_spec(x, attrs):
        shape[ax] = _slice_len(x.shape[ax], b, e, s)
    return TensorType(tuple(shape), x.dtype)


def _slice_rule(types, attrs, outs):
    x = types[0]
    f = dims_factors(x.ndim)
    blocked = frozenset(f"d{ax}" for ax, b, e, s in _slice_spec(x, attrs) if not _covers(x.shape[ax], b, e, s))
    return ShardingRule(inputs=(f,), outputs=(f,), blocked=blocked, partial=LAYOUT_PARTIALS)


def _slice_localize(call, args, local_out, lower=None):
    """A covering slice of a sharded axis ends at the per-worker size of that axis.

    The call's own attrs (defaults not filled in) are kept, with only ``end`` changed.
    """
    attrs = call.attrs
    x = args[0].type
    end = list(attrs["end"])
    changed = False
    for i, (ax, b, e, s) in enumerate(_slice_spec(x, attrs)):
        local = x.shape[ax]
        if s == 1 and sym.equal(b, 0) and sym.equal(local_out.shape[ax], local) and not sym.equal(e, local):
            end[i] = local
            changed = True
    if not changed:
        return Call(call.op, args, attrs, call.span)
    new = dict(attrs)
    new["end"] = type(attrs["end"])(end) if isinstance(attrs["end"], (list, tuple)) else end
    return Call(call.op, args, new, call.span)


def _slice_numpy(xs, attrs, ctx):
    x = xs[0]
    index = [slice(None)] * x.ndim
    strides = attrs["strides"] if attrs.get("strides") is not None else [1] * len(attrs["axes"])
    for a, b, e, s in zip(attrs["axes"], attrs["begin"], attrs["end"], strides):
        index[a % x.ndim] = slice(dim_value(ctx, b), dim_value(ctx, e), dim_value(ctx, s))
    return x[tuple(index)]


register_op(
    OpDef(
        name="strided_slice",
        params=(
            Param("x", "tensor"),
            Param("axes", "ints"),
            Param("begin", "dims"),
            Param("end", "dims"),
            Param("strides", "dims", None),
            Param("assume_inbound", "bool", False),
        ),
        infer=_slice_infer,
        numpy=_slice_numpy,
        sharding=_slice_rule,
        localize=_slice_localize,
        doc="x[begin:end:stride] on each of `axes`. A sliced axis must be whole unless the slice covers it.",
        relax=RelaxForm(
            "relax.op.strided_slice",
            ("axes", "begin", "end", "strides", "assume_inbound"),
            emit="distir.tvm.relax.ops:emit_strided_slice",
            doc="a worker outside a mesh clamps its (unused) worker-dependent bounds into the tensor",
        ),
        category="indexing",
        sharding_doc=ShardingDoc(
            passes="unsliced dims; a sliced dim whose slice covers it (begin 0, stride 1, end ≥ dim)",
            blocked="every other sliced dim",
            partials=partials_text(LAYOUT_PARTIALS),
        ),
    )
)


# ---------------------------------------------------------------- take

_TAKE_MODES = ("fast", "nan", "wrap", "clip")


def _take_axis(x: TensorType, attrs) -> int:
    axis = attrs["axis"]
    if axis is None:
        if x.ndim != 1:
            raise TypeInferenceError(
                f"R.take: without an axis the source must be 1-D, got shape {shape_str(x.shape)}; pass axis=0 "
                "for an embedding lookup"
            )
        return 0
    if not isinstance(axis, int):
        raise TypeInferenceError(f"R.take: axis must be one integer or None, got {axis}")
    return norm_axis(axis, x.ndim, "take")


def _take_infer(types, attrs):
    x = expect_tensor(types[0], "take", "source")
    idx = expect_tensor(types[1], "take", "indices")
    if x.ndim == 0:
        raise TypeInferenceError("R.take: the source must have rank at least 1")
    if not is_int_dtype(idx.dtype):
        raise TypeInferenceError(f"R.take: indices must be integers, got {idx.dtype}")
    if attrs["mode"] not in _TAKE_MODES:
        raise TypeInferenceError(f"R.take: mode must be one of {', '.join(_TAKE_MODES)}, got '{attrs['mode']}'")
    axis = _take_axis(x, attrs)
    return TensorType(x.shape[:axis] + idx.shape + x.shape[axis + 1 :], x.dtype)


def _take_rule(types, attrs, outs):
    x, idx = types
    return _gather_rule(x, idx, _take_axis(x, attrs), vocab_parallel=attrs["mode"] == "fast")


def _gather_rule(x: TensorType, idx: TensorType, axis: int, vocab_parallel: bool) -> ShardingRule:
    x_dims = tuple(("gathered",) if i == axis else (f"d{i}",) for i in range(x.ndim))
    i_dims = dims_factors(idx.ndim, "i")
    out = x_dims[:axis] + i_dims + x_dims[axis + 1 :]
    # A table sharded on the gathered axis (vocab-parallel embedding): each worker looks up
    # the indices in its own rows and gives zeros for the rest, so the output is P[sum].
    # Only for mode "fast" (indices in range); the other modes need the whole axis to wrap,
    # clip or flag an index. take is linear in the table (it only picks elements), so a
    # partial table passes; partial indices mean nothing.
    return ShardingRule(
        inputs=(x_dims, i_dims),
        outputs=(out,),
        reductions={"gathered": "sum"} if vocab_parallel else {},
        blocked=frozenset() if vocab_parallel else frozenset({"gathered"}),
        partial=LAYOUT_PARTIALS,
        partial_inputs=(0,),
    )


def _take_localize(call, args, local_out, lower=None):
    """A table sharded on the gathered axis becomes R.shard_take from the worker's own rows."""
    x = call.args[0].type
    attrs = call.op.full_attrs(call.attrs)
    if not isinstance(x, DTensorType) or not x.placement.mesh_axes_of(axis := _take_axis(x.tensor, attrs)):
        return Call(call.op, args, call.attrs, call.span)
    # clamped to the extent: a worker holding no row looks up nothing wherever it starts, and its
    # offset is then the same at every count (distir verify's every-count argument reads it)
    offset = sym.min_(block_start_expr(x.mesh, x.placement, axis, x.shape[axis]), x.shape[axis])
    return Call(get_op("shard_take"), args, {"axis": axis, "offset": offset}, call.span)


def _check_fast_indices(idx: np.ndarray, n: int, op: str) -> None:
    """Mode "fast" means in-range indices (TVM does not check them); the reference does."""
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = int(idx.min()) if idx.min() < 0 else int(idx.max())
        raise DistirError(
            f"R.{op}: index {bad} is out of range [0, {n}) (mode \"fast\" needs in-range indices; "
            "use mode=\"wrap\" or \"clip\" to map others)"
        )


def _take_numpy(xs, attrs, ctx):
    x, idx = xs
    axis = 0 if attrs["axis"] is None else attrs["axis"]
    mode = attrs["mode"]
    if mode in ("wrap", "clip"):
        return np.take(x, idx, axis=axis, mode=mode)
    if mode == "nan":
        n = x.shape[axis]
        bad = (idx < -n) | (idx >= n)
        out = np.take(x, np.where(bad, 0, idx), axis=axis)
        if bad.any():
            out = out.astype(np.result_type(out.dtype, np.float32), copy=True)
            mask = bad.reshape((1,) * axis + bad.shape + (1,) * (x.ndim - axis - 1))
            out = np.where(mask, np.nan, out).astype(x.dtype)
        return out
    _check_fast_indices(idx, x.shape[axis], "take")
    return np.take(x, idx, axis=axis)


register_op(
    OpDef(
        name="take",
        params=(
            Param("x", "tensor"),
            Param("indices", "tensor"),
            Param("axis", "axes", None),
            Param("mode", "choice", "fast", choices=_TAKE_MODES),
        ),
        infer=_take_infer,
        numpy=_take_numpy,
        sharding=_take_rule,
        localize=_take_localize,
        doc="Gather slices of x along `axis` at `indices` (an embedding lookup with axis=0). "
        "With x sharded on `axis` (mode \"fast\"), the output is P[sum].",
        relax=RelaxForm(
            "relax.op.take",
            ("axis", "mode"),
            emit="distir.tvm.relax.ops:emit_take",
            doc="modes fast (written as clip: the same rows, no TVM warning), wrap and clip (Relax has no nan)",
        ),
        category="indexing",
        sharding_doc=ShardingDoc(
            passes="every table dim (mode `fast`; see below); every dim of indices",
            blocked="the table's `axis` for modes other than `fast`",
            gives_partial="the table's `axis` (mode `fast`) → `P[sum]`",
            partials=partials_text(LAYOUT_PARTIALS, only="x"),
        ),
    )
)


# ---------------------------------------------------------------- shard_take (local view)


def _shard_take_infer(types, attrs):
    x = expect_tensor(types[0], "shard_take", "source")
    idx = expect_tensor(types[1], "shard_take", "indices")
    if not is_int_dtype(idx.dtype):
        raise TypeInferenceError(f"R.shard_take: indices must be integers, got {idx.dtype}")
    if not isinstance(attrs["axis"], int):
        raise TypeInferenceError(f"R.shard_take: axis must be one integer, got {attrs['axis']}")
    axis = norm_axis(attrs["axis"], x.ndim, "shard_take")
    return TensorType(x.shape[:axis] + idx.shape + x.shape[axis + 1 :], x.dtype)


def _shard_take_numpy(xs, attrs, ctx):
    x, idx = xs
    axis = attrs["axis"] % x.ndim
    rows = x.shape[axis]
    local = idx.astype(np.int64) - dim_value(ctx, attrs["offset"])
    mine = (local >= 0) & (local < rows)
    out = np.take(x, np.where(mine, local, 0), axis=axis)
    mask = mine.reshape((1,) * axis + mine.shape + (1,) * (x.ndim - axis - 1))
    return np.where(mask, out, np.zeros((), dtype=x.dtype)).astype(x.dtype, copy=False)


register_op(
    OpDef(
        name="shard_take",
        params=(Param("x", "tensor"), Param("indices", "tensor"), Param("axis", "int", 0), Param("offset", "dim", 0)),
        infer=_shard_take_infer,
        numpy=_shard_take_numpy,
        # its rows are a window at a fixed offset, so the gathered axis cannot be sharded again
        sharding=lambda types, attrs, outs: _gather_rule(
            types[0], types[1], norm_axis(attrs["axis"], types[0].ndim, "shard_take"), vocab_parallel=False
        ),
        doc="Per-worker form of R.take from a table sharded on `axis`: x holds the table's rows "
        "[offset, offset + x.shape[axis]); indices in that range are looked up, the others give zeros. "
        "Summing over the workers gives the take. Local view only (not a Relax op).",
        relax=RelaxForm(
            emit="distir.tvm.relax.ops:emit_shard_take",
            doc="take of the indices that fall in the worker's rows (`relax.op.take`), zeros for the others (`where`)",
        ),
        category="indexing",
        sharding_doc=ShardingDoc(
            passes="local view op; as `take`, but the window's `axis` stays whole",
            blocked="`axis`",
            partials=partials_text(LAYOUT_PARTIALS, only="x"),
        ),
    )
)


# ---------------------------------------------------------------- mask_tail (the padding of uneven blocks)


def _mask_infer(types, attrs):
    x = expect_tensor(types[0], "mask_tail")
    norm_axis(attrs["axis"], x.ndim, "mask_tail")
    return x


def _mask_numpy(xs, attrs, ctx):
    x = xs[0]
    axis = attrs["axis"] % x.ndim
    length = dim_value(ctx, attrs["length"])
    if length >= x.shape[axis]:
        return x
    out = x.copy()
    index = [slice(None)] * x.ndim
    index[axis] = slice(max(length, 0), None)
    out[tuple(index)] = attrs["value"]
    return out


def _mask_is_identity(call) -> bool:
    """No padding left to fill: the length reaches the extent (an even split once specialized)."""
    t = call.args[0].type
    attrs = call.op.full_attrs(call.attrs)
    return sym.prove_ge(attrs["length"], t.shape[attrs["axis"] % t.ndim])


def _mask_rule(types, attrs, outs):
    x = types[0]
    f = dims_factors(x.ndim)
    return ShardingRule(inputs=(f,), outputs=(f,), blocked=frozenset({f"d{attrs['axis'] % x.ndim}"}))


register_op(
    OpDef(
        name="mask_tail",
        params=(Param("x", "tensor"), Param("axis", "int"), Param("length", "dim"), Param("value", "scalar", 0)),
        infer=_mask_infer,
        numpy=_mask_numpy,
        sharding=_mask_rule,
        identity_at=_mask_is_identity,
        doc="x with every element at index `length` or beyond along `axis` set to `value`: lowering writes it "
        "to fill the padding of an uneven block before a reduction, a contraction or an index lookup reads it.",
        relax=RelaxForm(emit="distir.tvm.relax.ops:emit_mask_tail", doc="where(arange(extent) < length, x, value)"),
        category="indexing",
        sharding_doc=ShardingDoc(passes="every dim but `axis`", blocked="`axis`"),
    )
)
