"""Which partial placements each op lets through is checked by the numbers, on every dtype.

For every op a program can use (elementwise, reductions, creation, indexing, shape and
normalisation ops) and every dtype it takes, and every partial kind its sharding rule lets
through for those dtypes (``op_rule``: the op's table kept to what distir.ir.combine allows):
the op on the value equals the combination of the op on the parts. The parts are the
simulator's (integer sums anywhere in the dtype's range, so a wrap-around shows), and for
max/min one worker also holds the reduction's identity, as a worker with an empty block does.
A rule that lets a partial through wrongly (``min`` passing ``P[max]``, an integer division
passing ``P[sum]``) fails here."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import distir.ops  # noqa: F401  (declares the ops)
from distir.errors import DistirError
from distir.ir import ShapeType, TensorType, TupleType, all_ops, get_op
from distir.ir.combine import combine, identity, split
from distir.ir.sharding import op_rule
from distir.ir.types import np_dtype

FLOATS = ("float16", "bfloat16", "float32", "float64")
DTYPES = ("int8", "int16", "int32", "int64", "uint8", "bool", *FLOATS)
CATEGORIES = ("elementwise", "reduction", "creation", "indexing", "shape", "normalisation", "convolution", "sorting",
              "attention")
LOCAL_ONLY = {"partial_mean", "mask_tail", "shard_take"}  # written by lowering, never partial in a program
X = (3, 4)


def values(dtype: str, shape, rng) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) < 0.5
    t = np_dtype(dtype)
    if dtype in FLOATS:
        return (rng.standard_normal(shape) * 2).astype(t)
    info = np.iinfo(t)
    x = rng.integers(info.min, info.max, shape, endpoint=True, dtype=t)
    x.flat[:3] = np.array([info.min, info.max, 0]).astype(t)
    return x


def recipes(name: str, dtype: str, rng):
    """(argument values, attributes) to run ``name`` on, one or more; a tuple stands for a tuple argument."""
    x = values(dtype, X, rng)
    op = get_op(name)
    tensors = [p for p in op.params if p.kind == "tensor"]
    if name == "where":
        return [((rng.random(X) < 0.5, x, values(dtype, X, rng)), {})]
    if name == "astype":
        return [((x,), {"dtype": d}) for d in DTYPES]
    if name == "matmul":
        return [((x, values(dtype, (4, 2), rng)), {})]
    if op.category == "reduction":
        return [((x,), {"axis": [1]}), ((x,), {"axis": [0], "keepdims": True})]
    if name in ("tril", "triu"):
        return [((x,), {"k": 0})]
    if name == "full":
        return [(((3, 2), values(dtype, (), rng)), {})]
    if name in ("zeros", "ones"):
        return []  # no tensor argument: nothing is partial
    if name == "nn.conv1d":
        return [((values(dtype, (2, 3, 5), rng), values(dtype, (4, 3, 2), rng)), {})]
    if name == "nn.conv2d":
        return [((values(dtype, (1, 2, 4, 4), rng), values(dtype, (3, 2, 2, 2), rng)), {"padding": [1, 0, 0, 1]})]
    if name == "nn.conv3d":
        return [((values(dtype, (1, 2, 3, 3, 3), rng), values(dtype, (2, 2, 2, 2, 2), rng)), {})]
    if name == "image.resize2d":
        return [((values(dtype, (1, 2, 3, 3), rng), (5, 6)), {}), ((values(dtype, (1, 2, 3, 3), rng), (6, 6)),
                                                                    {"method": "nearest_neighbor"})]
    if name in ("nn.attention", "nn.attention_bias"):
        q, k, v = (values(dtype, (1, 3, 2, 4), rng) for _ in range(3))
        bias = (values(dtype, (1, 2, 3, 3), rng),) if name == "nn.attention_bias" else ()
        return [((q, k, v, *bias), {}), ((q, k, v, *bias), {"causal_mask": "TopLeft"})]
    if name in ("sort", "argsort", "cumsum"):
        return [((x,), {"axis": 1}), ((x,), {"axis": 0})]
    if name == "topk":
        return [((x,), {"k": 2, "axis": 1})]
    if name == "arange":
        return []  # no tensor argument: nothing is partial
    if name == "broadcast_to":
        return [((values(dtype, (1, 4), rng), (3, 4)), {})]
    if name == "clip":
        return [((x,), {"min": -3, "max": 5})]
    if name == "nn.prelu":
        return [((x, values(dtype, (4,), rng)), {"axis": 1})]
    if name == "nn.group_norm":
        c = values(dtype, (4,), rng)
        return [((values(dtype, (3, 4, 2), rng), c, c), {"num_groups": 2, "channel_axis": 1, "axes": [2]})]
    if name == "nn.pad":
        return [((x,), {"pad_width": [0, 0, 1, 2]}), ((x,), {"pad_width": [1, 0, 0, 1], "pad_value": 1.0})]
    if name == "repeat":
        return [((x,), {"repeats": 2, "axis": 1}), ((x,), {"repeats": 3})]
    if name == "tile":
        return [((x,), {"repeats": [2, 1]})]
    if name == "strided_slice":
        return [((x,), {"axes": [1], "begin": [1], "end": [4], "strides": [2]})]
    if name == "take":
        return [((x, np.array([2, 0, 2], "int32")), {"axis": 1})]
    if name == "reshape":
        return [((x, (2, 6)), {})]
    if name == "permute_dims":
        return [((x,), {"axes": [1, 0]})]
    if name == "expand_dims":
        return [((x,), {"axis": [1]})]
    if name == "squeeze":
        return [((values(dtype, (3, 1, 4), rng),), {"axis": [1]})]
    if name == "concat":
        return [(((x, values(dtype, X, rng)),), {"axis": 1})]
    if name == "split":
        return [((x,), {"indices_or_sections": 2, "axis": 1})]
    if name in ("nn.layer_norm",):
        return [((x, values(dtype, (4,), rng), values(dtype, (4,), rng)), {"axes": [1]})]
    if name == "nn.rms_norm":
        return [((x, values(dtype, (4,), rng)), {"axes": [1]})]
    if op.category == "normalisation":
        return [((x,), {"axis": 1})]
    if len(tensors) == 2:
        return [((x, values(dtype, X, rng)), {})]
    if len(tensors) == 1:
        return [((x,), {})]
    raise AssertionError(f"no recipe for R.{name}: add one so its partial rule is checked")


def type_of(a):
    if isinstance(a, tuple) and all(isinstance(f, np.ndarray) for f in a):
        return TupleType(tuple(type_of(f) for f in a))
    if isinstance(a, tuple):
        return ShapeType(len(a), a)
    return TensorType(a.shape, str(a.dtype))


def flat(types):
    out = []
    for t in types:
        out.extend(t.fields if isinstance(t, TupleType) else [t])
    return out


def run(op, args, attrs):
    with np.errstate(all="ignore"):
        out = op.numpy(list(args), op.full_attrs(attrs), None)
    return out if isinstance(out, tuple) else (out,)


def is_tuple_arg(a) -> bool:
    return isinstance(a, tuple) and bool(a) and all(isinstance(f, np.ndarray) for f in a)


def flat_values(args) -> list:
    """The arguments as the op's rule sees them: a tuple argument's fields in its place."""
    out = []
    for a in args:
        out.extend(a if is_tuple_arg(a) else [a])
    return out


def partial_args(args, slots, parts_of, i):
    """``args`` with each flat slot in ``slots`` replaced by its i-th part (tuples kept as tuples)."""
    out, k = [], 0
    for a in args:
        fields = list(a) if is_tuple_arg(a) else [a]
        new = []
        for f in fields:
            new.append(parts_of[k][i] if k in slots else f)
            k += 1
        out.append(tuple(new) if is_tuple_arg(a) else new[0])
    return out


def assert_equal(got, want, parts_out, dtype, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, what
    if str(want.dtype) not in FLOATS:
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    # the parts were rounded to the input's dtype, the result to the output's
    eps = max(float(ml_dtypes.finfo(np_dtype(d)).eps) for d in {dtype, str(want.dtype)} if d in FLOATS)
    g, w = got.astype(np.float64), want.astype(np.float64)
    spread = np.sum([np.abs(np.nan_to_num(p.astype(np.float64), posinf=0, neginf=0)) for p in parts_out], axis=0)
    tol = 32 * eps * (spread + np.abs(np.nan_to_num(w, posinf=0, neginf=0)) + 1e-3)
    with np.errstate(invalid="ignore"):  # inf - inf
        same = (np.abs(g - w) <= tol) | (np.isnan(g) & np.isnan(w)) | (g == w)
    assert np.all(same), f"{what}: got {got.ravel()[:6]}, want {want.ravel()[:6]}"


def checked_ops() -> list[str]:
    return sorted(n for n, op in all_ops().items() if op.category in CATEGORIES and n not in LOCAL_ONLY)


@pytest.mark.parametrize("name", checked_ops())
def test_every_partial_an_op_lets_through_is_exact(name):
    op = get_op(name)
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    checked = ran = 0
    for dtype in DTYPES:
        for args, attrs in recipes(name, dtype, rng):
            types = [type_of(a) for a in args]
            full = op.full_attrs(attrs)
            try:
                out = op.infer(types, full)
            except DistirError:
                continue  # the op does not take this dtype
            outs = list(out.fields) if isinstance(out, TupleType) else [out]
            rule = op_rule(op, flat(types), full, outs)
            ran += 1
            try:
                want = run(op, args, attrs)
            except (ValueError, TypeError):
                continue  # numpy refuses it (an integer to a negative power, a bool subtraction)
            flat_in = flat_values(args)
            tensors = [k for k, t in enumerate(flat(types)) if isinstance(t, TensorType)]
            for kind, mode in rule.partial.items():
                if mode == "all":
                    choices = [tuple(tensors)]
                else:
                    allowed = tensors if rule.partial_inputs is None else [k for k in tensors if k in rule.partial_inputs]
                    choices = [(k,) for k in allowed]
                for slots in choices:
                    n = 4
                    parts_of = {k: split(flat_in[k], kind, n, rng) for k in slots}
                    if kind in ("max", "min"):  # a worker with an empty block holds the identity
                        for k in slots:
                            v = flat_in[k]
                            parts_of[k].insert(0, np.full(v.shape, identity(kind, str(v.dtype))).astype(v.dtype))
                        n += 1
                    per_worker = [run(op, partial_args(args, slots, parts_of, i), attrs) for i in range(n)]
                    for j, w in enumerate(want):
                        parts_out = [np.asarray(p[j]) for p in per_worker]
                        what = f"R.{name}({dtype}, {attrs}) with input(s) {slots} P[{kind}], output {j}"
                        assert_equal(combine(kind, parts_out), w, parts_out, dtype, what)
                    checked += 1
    if recipes(name, "float32", rng):
        assert ran, f"R.{name} took none of the dtypes: is its recipe right?"
        if op.sharding(*rule_inputs(name, rng)).partial:
            assert checked, f"R.{name} lets partials through on float32 but none was checked"


def rule_inputs(name, rng):
    op = get_op(name)
    args, attrs = recipes(name, "float32", rng)[0]
    types = [type_of(a) for a in args]
    full = op.full_attrs(attrs)
    out = op.infer(types, full)
    return flat(types), full, list(out.fields) if isinstance(out, TupleType) else [out]


def test_every_op_of_a_program_is_checked():
    names = checked_ops()
    assert {"add", "divide", "maximum", "exp", "astype", "sum", "mean", "max", "min", "matmul", "reshape",
            "take", "concat"} <= set(names)
    rng = np.random.default_rng(0)
    for name in names:
        recipes(name, "float32", rng)  # raises for an op without one
