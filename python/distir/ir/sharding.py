"""Sharding rules: how an op's dims relate, so placements can flow through it.

Each op describes its dims with *factors* (as in GSPMD/Shardy): a factor is a named
extent shared by the dims that must be split alike. ``matmul`` of ``[m, k] x [k, n]``
is ``inputs=((m, k), (k, n)), outputs=((m, n),)``; ``k`` is a reduction factor: if it is
sharded, every worker holds a partial sum, so the output is ``P[sum]``. A reshape dim
may hold several factors, major first (``[8, 8] -> [64]`` is ``((a,), (b,)) -> ((a, b),)``);
only a dim's leading factor can be sharded, since only that keeps shards contiguous.

Partial inputs pass through an op only where the op is linear for that reduction:
``partial={"sum": "one"}`` (linear in each input: matmul, multiply), ``"all"`` (all
inputs partial alike: add), keyed by reduction op.

A strided shard ``S[d/k]`` (docs/strided.md) shards the factor that starts ``k`` elements into
its dim's factors (or, in a dim of one factor, that factor's inner part after ``k`` outer
parts); where that factor lands it is a plain ``S`` when it leads its dim and a strided one
otherwise. This needs the factors' sizes, which :func:`with_sizes` puts on the rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import TypeInferenceError
from . import sym
from .combine import leaves, partial_refusal
from .mesh import DeviceMesh
from .placement import Partial, Placement, R, Replicate, Shard, StridedShard, shard_spec
from .types import DTensorType, TensorType, TupleType, Type

Factors = tuple[tuple[str, ...], ...]  # per dim, the factors it holds (major first)


@dataclass(frozen=True)
class ShardingRule:
    inputs: tuple[Factors, ...]
    outputs: tuple[Factors, ...]
    reductions: Mapping[str, str] = field(default_factory=dict)
    blocked: frozenset[str] = frozenset()
    partial: Mapping[str, str] = field(default_factory=dict)
    partial_inputs: tuple[int, ...] | None = None  # inputs that may be partial in "one" mode
    # the value the padding of input k must hold when one of its dims is cut unevenly (indices
    # must be valid, divisors nonzero); dims the op reduces over are masked with the reduction's identity
    pad_values: Mapping[int, Any] = field(default_factory=dict)
    # the size of each factor that is a whole dim somewhere (:func:`with_sizes`), for strided shards
    sizes: Mapping[str, Any] = field(default_factory=dict)


def with_sizes(rule: ShardingRule, ins: Sequence[Type], outs: Sequence[Type]) -> ShardingRule:
    """``rule`` with the size of every factor that is alone in a dim of the given tensors (and the
    sizes the rule gives itself)."""
    sizes: dict[str, Any] = dict(rule.sizes)
    for factors, t in [*zip(rule.inputs, ins), *zip(rule.outputs, outs)]:
        shape = getattr(t, "shape", None)
        if shape is None or len(shape) != len(factors):
            continue
        for fs, n in zip(factors, shape):
            if len(fs) == 1:
                sizes.setdefault(fs[0], n)
    return ShardingRule(rule.inputs, rule.outputs, rule.reductions, rule.blocked, rule.partial, rule.partial_inputs,
                        rule.pad_values, sizes)


def op_rule(op, ins: Sequence[Type], attrs, outs: Sequence[Type]) -> ShardingRule:
    """``op``'s sharding rule for these tensor types, kept to what is exact for their dtypes
    (:mod:`distir.ir.combine`): a partial kind passes only where the outputs, and the inputs
    that may be partial, can hold it; a reduced factor leaves the partial the output's dtype
    allows, or is blocked (needed whole) where none is exact (an integer mean)."""
    return exact_rule(op.sharding(ins, attrs, outs), ins, outs)


def exact_rule(rule: ShardingRule, ins: Sequence[Type], outs: Sequence[Type]) -> ShardingRule:
    """``rule`` without the partials the dtypes of ``ins`` and ``outs`` cannot hold exactly (see :func:`op_rule`)."""
    tensor = (TensorType, DTensorType)
    out_dtypes = {t.dtype for t in outs if isinstance(t, tensor)}
    may_be_partial = range(len(ins)) if rule.partial_inputs is None else rule.partial_inputs
    dtypes = out_dtypes | {ins[k].dtype for k in may_be_partial if k < len(ins) and isinstance(ins[k], tensor)}
    partial = {kind: mode for kind, mode in rule.partial.items() if all(partial_refusal(kind, d) is None for d in dtypes)}
    reductions, blocked = {}, set(rule.blocked)
    for f, kind in rule.reductions.items():
        left = {leaves(kind, d) for d in out_dtypes} or {kind}
        if len(left) == 1 and None not in left:
            reductions[f] = left.pop()
        else:
            blocked.add(f)
    if partial == dict(rule.partial) and reductions == dict(rule.reductions):
        return rule
    return replace(rule, partial=partial, reductions=reductions, blocked=frozenset(blocked))


def factor_at(rule: ShardingRule, fs: Sequence[str], split: int) -> tuple[str, int] | None:
    """(factor, inner split) a shard of a dim holding factors ``fs`` viewed as ``split`` parts cuts:
    the factor starting ``split`` elements in, or a factor's inner part. None where the parts do
    not line up with the factors (or a size is unknown)."""
    before: Any = 1
    for f in fs:
        if sym.equal(before, split):
            return f, 1
        size = rule.sizes.get(f)
        if size is None or not isinstance(before, int) or split % before:
            return None
        q = split // before
        if sym.prove_divisible(size, q) and not sym.equal(size, q):
            return f, q
        before = sym.mul(before, size)
        if not isinstance(before, int):
            return None
    return None


def spec_at(rule: ShardingRule, fs: Sequence[str], f: str, q: int) -> Any:
    """The part count of the shard of factor ``f`` (inner split ``q``) in a dim holding ``fs``:
    ``q`` times the sizes of the factors before it (1: a plain shard; None: a size is unknown)."""
    before: Any = 1
    for g in fs:
        if g == f:
            return sym.mul(before, q) if isinstance(before, int) else None
        size = rule.sizes.get(g)
        if size is None:
            return None
        before = sym.mul(before, size)
    return None


def _spec_parts(spec) -> tuple[int, int] | None:
    """(dim, split) of a plain or strided shard."""
    if isinstance(spec, Shard):
        return spec.dim, 1
    if isinstance(spec, StridedShard):
        return spec.dim, spec.split
    return None


def dims_rule(ndim_in: Sequence[int], ndim_out: int, name: str = "d") -> ShardingRule:
    """Every input dim i maps to output dim i (same-rank elementwise)."""
    f = tuple((f"{name}{i}",) for i in range(ndim_out))
    return ShardingRule(inputs=tuple(f[:n] for n in ndim_in), outputs=(f,))


def forward(rule: ShardingRule, placements: Sequence[Placement], mesh_ndim: int, op_name: str = "op") -> list[Placement]:
    """The output placements implied by the input placements, or TypeInferenceError saying why not.

    Each mesh axis is independent: on it the inputs are sharded (a factor flows to the
    outputs, or becomes a partial sum if the op reduces it), partial (passed through where
    the op is linear) or replicated."""
    outs = [[R] * mesh_ndim for _ in rule.outputs]
    for axis in range(mesh_ndim):
        specs = [p.specs[axis] for p in placements]
        shards = [(k, *_spec_parts(s)) for k, s in enumerate(specs) if _spec_parts(s) is not None]
        partials = [(k, s.op) for k, s in enumerate(specs) if isinstance(s, Partial)]
        where = f"R.{op_name} on mesh axis {axis}"
        if shards and partials:
            raise TypeInferenceError(
                f"{where}: input {partials[0][0]} is partial while input {shards[0][0]} is sharded; reduce the partial first"
            )
        if shards:
            for o, spec in enumerate(_forward_shard(rule, specs, shards, where, op_name)):
                outs[o][axis] = spec
        elif partials:
            op = _forward_partial(rule, specs, partials, where, op_name)
            for o in range(len(rule.outputs)):
                outs[o][axis] = Partial(op)
    result = [Placement(tuple(o)) for o in outs]
    for o, p in enumerate(result):
        kinds = sorted({s.op for s in p.specs if isinstance(s, Partial)})
        if len(kinds) > 1:
            raise TypeInferenceError(
                f"R.{op_name}: output {o} would be \"{p}\", partial under different reductions {kinds}; "
                "reduce the partial input first"
            )
        for i, st in p.strided:  # two mesh axes' cuts landing inside one output dim, e.g. a merge of "S[1], S[1]"
            if any(j != i and _spec_parts(t) is not None and _spec_parts(t)[0] == st.dim for j, t in enumerate(p.specs)):
                raise TypeInferenceError(
                    f"R.{op_name}: output {o} would be \"{p}\", a strided dim cut by two mesh axes (a strided dim is "
                    "cut by one mesh axis only); redistribute the input first"
                )
    return result


def _cut_factor(rule: ShardingRule, k: int, d: int, split: int, where: str) -> tuple[str, int]:
    """(factor, inner split) input ``k``'s shard of dim ``d`` viewed as ``split`` parts cuts."""
    dims = rule.inputs[k]
    if d >= len(dims):
        raise TypeInferenceError(f"{where}: input {k} is sharded on dim {d}, beyond its rank {len(dims)}")
    if not dims[d]:
        raise TypeInferenceError(f"{where}: input {k} dim {d} is broadcast (size 1) and cannot be sharded")
    if split == 1:
        return dims[d][0], 1
    found = factor_at(rule, dims[d], split)
    if found is None:
        raise TypeInferenceError(
            f"{where}: input {k} is a strided shard S[{d}/{split}] whose {split} parts do not line up with what the op "
            f"does to dim {d}; redistribute it first"
        )
    return found


def _sharded_factor(rule: ShardingRule, shards, where: str, op_name: str) -> tuple[str, int]:
    """The one (factor, inner split) the sharded input dims on a mesh axis agree on (for a plain
    shard: the leading factor of its dim, split 1)."""
    leading = set()
    for k, d, split in shards:
        leading.add(_cut_factor(rule, k, d, split, where))
    if len(leading) > 1:
        raise TypeInferenceError(
            f"{where}: inputs are sharded on dims that do not correspond ("
            + ", ".join(f"input {k} dim {d}" + (f"/{split}" if split > 1 else "") for k, d, split in shards)
            + "); redistribute one of them"
        )
    f, q = leading.pop()
    if f in rule.blocked:
        k, d, _ = shards[0]
        raise TypeInferenceError(
            f"{where}: input {k} is sharded on dim {d}, which R.{op_name} needs whole; replicate that dim first"
        )
    if q > 1 and f in rule.reductions:
        k, d, split = shards[0]
        raise TypeInferenceError(
            f"{where}: input {k} is a strided shard S[{d}/{split}] of a dim R.{op_name} reduces over; only a plain "
            f"shard of a reduced dim leaves partial values (redistribute it first)"
        )
    return f, q


def _forward_shard(rule: ShardingRule, specs, shards, where: str, op_name: str) -> list:
    """Each output's spec on a mesh axis where inputs are sharded: S[d] where the factor lands, P if reduced."""
    f, q = _sharded_factor(rule, shards, where, op_name)
    k0, d0, _ = shards[0]
    for k, dims in enumerate(rule.inputs):
        holds = any(f in fs for fs in dims)
        parts = _spec_parts(specs[k])
        if holds and parts is None:
            raise TypeInferenceError(
                f"{where}: input {k0} is sharded on dim {d0} but input {k} is {specs[k]} on the matching dim; "
                "shard both alike"
            )
        if holds and _cut_factor(rule, k, *parts, where) != (f, q):
            raise TypeInferenceError(f"{where}: input {k} is sharded on a dim that does not match input {k0}")
        if holds and isinstance(specs[k], StridedShard) and k in rule.pad_values:
            raise TypeInferenceError(
                f"{where}: input {k} is a strided shard {specs[k]}, but R.{op_name} needs the padding of its blocks "
                "filled; redistribute it first"
            )
        if not holds and not isinstance(specs[k], Replicate):
            raise TypeInferenceError(f"{where}: input {k} must be replicated (it has no dim matching the sharded one)")
    out = []
    for o, dims in enumerate(rule.outputs):
        found = [d for d, fs in enumerate(dims) if f in fs]
        if found:
            split = spec_at(rule, dims[found[0]], f, q)
            if not isinstance(split, int):
                raise TypeInferenceError(
                    f"{where}: the sharded dim becomes a minor part of output dim {found[0]} after parts of unknown "
                    "size, so no layout says where its shards lie; reshard before this op"
                )
            out.append(shard_spec(found[0], split))
        elif f in rule.reductions:
            out.append(Partial(rule.reductions[f]))
        else:
            raise TypeInferenceError(f"{where}: the sharded dim does not survive in output {o}; replicate it first")
    return out


def _forward_partial(rule: ShardingRule, specs, partials, where: str, op_name: str) -> str:
    """The reduction a partial input passes to the outputs on a mesh axis, if the op is linear for it."""
    ops = {op for _, op in partials}
    if len(ops) > 1:
        raise TypeInferenceError(f"{where}: inputs are partial under different reductions {sorted(ops)}")
    op = ops.pop()
    mode = rule.partial.get(op)
    if mode is None:
        raise TypeInferenceError(f"{where}: R.{op_name} cannot take a partial (P[{op}]) input; all-reduce it first")
    n_in = len(rule.inputs)
    if mode == "all":
        if len(partials) != n_in:
            bad = next(k for k in range(n_in) if not isinstance(specs[k], Partial))
            raise TypeInferenceError(
                f"{where}: input {partials[0][0]} is P[{op}] but input {bad} is {specs[bad]}; "
                "all inputs must be partial alike"
            )
    else:
        if len(partials) > 1:
            raise TypeInferenceError(f"{where}: only one input may be partial, got {len(partials)}")
        k = partials[0][0]
        if rule.partial_inputs is not None and k not in rule.partial_inputs:
            raise TypeInferenceError(f"{where}: input {k} cannot be partial (P[{op}]); all-reduce it first")
    return op


def without_placement(t: Type) -> Type:
    """``t`` with every DTensor replaced by its plain tensor (global shape and dtype)."""
    if isinstance(t, DTensorType):
        return t.tensor
    if isinstance(t, TupleType):
        return TupleType(tuple(without_placement(f) for f in t.fields))
    return t


def infer_unplaced(op, arg_types: list[Type], attrs) -> Type:
    """The plain type ``op`` gives its arguments with placements left out.

    Before propagate-sharding, a value computed from DTensors whose layouts do not fit the
    op's sharding rule (a plain activation meeting a partial, say) has no layout yet; its
    type is this, and propagation decides the layout.
    """
    return op.infer_from_types([without_placement(t) for t in arg_types], attrs)



def _flatten(t: Type, out: list) -> None:
    if isinstance(t, (TensorType, DTensorType)):
        out.append(t)
    elif isinstance(t, TupleType):
        for f in t.fields:
            _flatten(f, out)


def infer_dtensor_output(op, arg_types: list[Type], attrs) -> Type:
    """Type a compute op on DTensors: global shapes by the op's own rule, placement by its sharding rule."""
    flat: list[Type] = []
    for t in arg_types:
        _flatten(t, flat)
    dts = [t for t in flat if isinstance(t, DTensorType)]
    mesh: DeviceMesh = dts[0].mesh
    for t in dts[1:]:
        if t.mesh != mesh:
            raise TypeInferenceError(
                f"R.{op.name}: inputs are on different device meshes {mesh.shape_str()} and {t.mesh.shape_str()}; "
                "redistribute them onto one mesh first"
            )
    plain_out = op.infer([without_placement(t) for t in arg_types], attrs)
    outs = [plain_out] if isinstance(plain_out, TensorType) else list(plain_out.fields) if isinstance(plain_out, TupleType) else None
    if outs is None or not all(isinstance(o, TensorType) for o in outs):
        raise TypeInferenceError(f"R.{op.name} does not produce tensors, so it cannot take DTensor inputs")
    strided = next((t.placement for t in dts if t.placement.is_strided), None)
    if strided is not None and op.localize is not None and not op.localize_strided:
        raise TypeInferenceError(
            f"R.{op.name} takes an input laid out \"{strided}\", a strided shard, but its per-worker form needs "
            f"where each worker's block starts, which a strided dim does not have; redistribute it first"
        )
    if any(t.placement.is_block for t in dts):
        new = block_forward(op, flat, outs, attrs, mesh)
        dout = [DTensorType(o.shape, o.dtype, mesh, p) for o, p in zip(outs, new)]
        return dout[0] if isinstance(plain_out, TensorType) else TupleType(tuple(dout))
    placements = [
        t.placement if isinstance(t, DTensorType) else Placement.replicated(mesh.ndim) for t in flat
    ]
    if op.sharding is None:
        if all(p.is_replicated for p in placements):
            new = [Placement.replicated(mesh.ndim)] * len(outs)
        else:
            raise TypeInferenceError(f"R.{op.name} has no sharding rule, so its inputs must be replicated")
    else:
        plain = [without_placement(t) for t in flat]
        rule = op_rule(op, plain, attrs, outs)
        if strided is not None or any(len(fs) > 1 for dims in (*rule.inputs, *rule.outputs) for fs in dims):
            rule = with_sizes(rule, plain, outs)  # sizes matter only where a shard is strided or may become one
        new = forward(rule, placements, mesh.ndim, op.name)
    dout = [DTensorType(o.shape, o.dtype, mesh, p) for o, p in zip(outs, new)]
    if isinstance(plain_out, TensorType):
        return dout[0]
    return TupleType(tuple(dout))


# ---------------------------------------------------------------- block layouts (B[...], docs/blocks.md)


@dataclass(frozen=True)
class BlockForm:
    """How an op keeps a block layout. ``kind`` "same": the op runs on each device's chunk
    storage as it is (elementwise ops on one layout; reductions over dims whole in every chunk,
    ``axes`` the reduced tensor dims); "partial": a reduction over the one dim the chunks cut
    (every other dim whole in each chunk) leaves each device the reduction of its own chunks,
    ``P[op]`` over the whole mesh, ``dim`` the cut dim."""

    kind: str
    placement: Placement
    axes: tuple[int, ...] = ()
    dim: int | None = None
    reduction: str | None = None


def block_form(op, flat: Sequence[Type], outs: Sequence[TensorType], attrs, mesh: DeviceMesh) -> BlockForm | None:
    """The way ``op`` keeps the block layout of its inputs, or None when it does not (a redistribute
    is needed). Raises TypeInferenceError when the inputs mix a block layout with anything else."""
    blocks = [t for t in flat if isinstance(t, DTensorType) and t.placement.is_block]
    if not blocks:
        return None
    p, shape = blocks[0].placement, blocks[0].shape
    # a scalar the same on every device (a constant, or replicated) broadcasts onto the chunk storage
    scalars = {k for k, t in enumerate(flat) if t.ndim == 0 and (not isinstance(t, DTensorType) or t.placement.is_replicated)}
    for k, t in enumerate(flat):
        if k in scalars:
            continue
        if not isinstance(t, DTensorType) or t.placement != p or len(t.shape) != len(shape) or not all(
            sym.equal(a, b) for a, b in zip(t.shape, shape)
        ):
            raise TypeInferenceError(
                f"R.{op.name}: input {k} is not laid out \"{p}\" with shape {_shape(shape)} like input "
                f"{flat.index(blocks[0])}; an op on a block layout takes inputs of one shape and layout (redistribute first)"
            )
    if len(outs) != 1:
        return None
    out = outs[0]
    if op.category == "elementwise":  # one element at a time; equal shapes: nothing broadcasts
        if all(k in scalars or len(t.shape) == len(shape) for k, t in enumerate(flat)) and len(out.shape) == len(shape) \
                and all(sym.equal(a, b) for a, b in zip(out.shape, shape)):
            return BlockForm("same", p)
        return None
    if op.category != "reduction" or op.name not in _BLOCK_REDUCTIONS or len(flat) != 1:
        return None
    axes = _reduced_axes(attrs.get("axis"), len(shape))
    keep = bool(attrs.get("keepdims"))
    whole = [sym.equal(b, n) for b, n in zip(p.block, shape)]
    if all(whole[d] for d in axes) and (keep or len(axes) < len(shape)):  # (a block layout has at least one dim)
        kept = tuple(1 if d in axes else b for d, b in enumerate(p.block)) if keep else \
            tuple(b for d, b in enumerate(p.block) if d not in axes)
        return BlockForm("same", Placement.blocked(kept), axes)
    cut = [d for d in range(len(shape)) if not whole[d]] or [axes[0]]  # none cut: one chunk, a scalar out
    kind = leaves(op.name, out.dtype) if op.name in ("sum", "max", "min") else None
    if len(cut) == 1 and cut[0] in axes and kind is not None:
        return BlockForm("partial", Placement((Partial(kind),) * mesh.ndim), axes, cut[0], kind)
    return None


_BLOCK_REDUCTIONS = ("sum", "mean", "max", "min", "prod")  # reductions with attributes axis and keepdims


def _reduced_axes(axis, ndim: int) -> tuple[int, ...]:
    """The dims a reduction's ``axis`` attribute names (all when None), sorted and non-negative."""
    if axis is None:
        return tuple(range(ndim))
    items = [axis] if isinstance(axis, int) else list(axis)
    return tuple(sorted({a + ndim if a < 0 else a for a in items}))


def block_forward(op, flat, outs, attrs, mesh: DeviceMesh) -> list[Placement]:
    """Output placements of an op on block-layout inputs (see :func:`block_form`)."""
    form = block_form(op, flat, outs, attrs, mesh)
    if form is None:
        p = next(t.placement for t in flat if isinstance(t, DTensorType) and t.placement.is_block)
        raise TypeInferenceError(
            f"R.{op.name} does not keep the block layout \"{p}\" (elementwise ops and reductions over dims whole in "
            f"each chunk, or over the one dim the chunks cut, do); redistribute its inputs first"
        )
    return [form.placement]


def _shape(shape) -> str:
    return "(" + ", ".join(sym.to_str(d) for d in shape) + ")"
