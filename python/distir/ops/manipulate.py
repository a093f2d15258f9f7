"""Shape manipulation: reshape, permute_dims, astype."""

from __future__ import annotations

import numpy as np

from ..errors import TypeInferenceError
from ..ir import sym
from ..ir.expr import ShapeExpr
from ..ir.types import ShapeType
from ._common import OpDef, Param, ShardingRule, TensorType, expect_tensor, np_dtype, register_op


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


def reshape_groups(src: tuple, dst: tuple):
    """Pair up runs of dims with equal products: [(src dims, dst dims), ...]; size-1 dims are left out."""
    s = [i for i, d in enumerate(src) if not (isinstance(d, int) and d == 1)]
    t = [i for i, d in enumerate(dst) if not (isinstance(d, int) and d == 1)]
    groups = []
    i = k = 0
    while i < len(s) and k < len(t):
        found = None
        for total in range(2, len(s) - i + len(t) - k + 1):
            for a in range(1, total):
                b = total - a
                if i + a > len(s) or k + b > len(t):
                    continue
                pa = sym.product(src[j] for j in s[i : i + a])
                pb = sym.product(dst[j] for j in t[k : k + b])
                if sym.equal(pa, pb):
                    found = (a, b)
                    break
            if found:
                break
        if not found:
            groups.append((tuple(s[i:]), tuple(t[k:])))
            return groups
        a, b = found
        groups.append((tuple(s[i : i + a]), tuple(t[k : k + b])))
        i, k = i + a, k + b
    if i < len(s) or k < len(t):
        groups.append((tuple(s[i:]), tuple(t[k:])))
    return groups


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
        inputs=(tuple(ins), ()), outputs=(tuple(out),), blocked=frozenset(blocked), partial={"sum": "one", "avg": "one", "max": "one", "min": "one"}
    )


def _reshape_localize(args, attrs, local_out):
    return (args[0], ShapeExpr(local_out.shape)), attrs


register_op(
    OpDef(
        name="reshape",
        params=(Param("x", "tensor"), Param("shape", "shape")),
        infer=_reshape_infer,
        numpy=lambda xs, attrs, ctx: np.reshape(xs[0], tuple(xs[1])),
        sharding=lambda types, attrs, outs: _with_shape_input(_reshape_rule(types[:1], attrs, outs)),
        localize=_reshape_localize,
        doc="Reshape in C order. A sharded dim passes through when it stays the leading part of its output dim.",
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
    return ShardingRule(inputs=(ins,), outputs=(out,), partial={"sum": "one", "avg": "one", "max": "one", "min": "one"})


register_op(
    OpDef(
        name="permute_dims",
        params=(Param("x", "tensor"), Param("axes", "ints", None)),
        infer=_permute_infer,
        numpy=lambda xs, attrs, ctx: np.transpose(xs[0], _permute_axes(attrs, xs[0].ndim)),
        sharding=_permute_rule,
        doc="Permute dims (reverse them when axes is None).",
    )
)


def _astype_infer(types, attrs):
    x = expect_tensor(types[0], "astype")
    return TensorType(x.shape, attrs["dtype"])


register_op(
    OpDef(
        name="astype",
        params=(Param("x", "tensor"), Param("dtype", "dtype")),
        infer=_astype_infer,
        numpy=lambda xs, attrs, ctx: xs[0].astype(np_dtype(attrs["dtype"])),
        sharding=lambda types, attrs, outs: ShardingRule(
            inputs=(tuple((f"d{i}",) for i in range(types[0].ndim)),),
            outputs=(tuple((f"d{i}",) for i in range(types[0].ndim)),),
            partial={"sum": "one", "avg": "one", "max": "one", "min": "one"},
        ),
        doc="Convert the element type.",
    )
)
