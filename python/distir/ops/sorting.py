"""Sorting and scans: sort, argsort, topk, cumsum.

Each looks along one axis at every element of it, so that axis stays whole (a worker would
sort, rank or sum only its block): every other dim is a batch dim and passes its sharding.
No partial input passes (sorting is not linear, and a scan of partial sums would be exact only
in the dtype rules of a reduction; reduce first). Ties are ordered as TVM orders them: by
index, ascending, in both directions, so integer results are exact.
"""

from __future__ import annotations

import numpy as np

from ..errors import TypeInferenceError
from ..ir import sym
from ..ir.op import RelaxForm, ShardingDoc
from ..ir.types import TupleType, np_dtype
from ._common import (
    OpDef,
    Param,
    ShardingRule,
    TensorType,
    compute_dtype,
    dims_factors,
    expect_tensor,
    is_int_dtype,
    norm_axis,
    register_op,
)

_INDEX_DTYPES = ("int32", "int64")


def _whole_axis_rule(axis_of):
    def rule(types, attrs, outs):
        x = types[0]
        dims = dims_factors(x.ndim)
        axis = axis_of(x, attrs)
        if axis is None:  # flattened: everything whole
            flat = (("flat",),)
            return ShardingRule(inputs=(dims,), outputs=(flat,) * len(outs),
                                blocked=frozenset({*(f[0] for f in dims), "flat"}))
        return ShardingRule(inputs=(dims,), outputs=(dims,) * len(outs), blocked=frozenset({f"d{axis}"}))

    return rule


def _axis(name: str):
    def axis_of(x: TensorType, attrs):
        if x.ndim == 0:
            raise TypeInferenceError(f"R.{name}: needs a tensor of rank at least 1")
        return norm_axis(attrs["axis"], x.ndim, name)

    return axis_of


def stable_order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Indices that sort ``x`` along ``axis``, ties by index ascending in both directions (as TVM)."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    # sorting the reversed axis ascending puts ties in descending index order; reversing that order
    # gives descending values with ties in ascending index order
    rev = np.flip(x, axis=axis)
    order = (n - 1) - np.argsort(rev, axis=axis, kind="stable")
    return np.flip(order, axis=axis)


# ---------------------------------------------------------------- sort / argsort


def _sort_infer(types, attrs):
    x = expect_tensor(types[0], "sort")
    _axis("sort")(x, attrs)
    return x


def _argsort_infer(types, attrs):
    x = expect_tensor(types[0], "argsort")
    _axis("argsort")(x, attrs)
    if attrs["dtype"] not in _INDEX_DTYPES:
        raise TypeInferenceError(f"R.argsort: the index dtype must be int32 or int64, got {attrs['dtype']}")
    return TensorType(x.shape, attrs["dtype"])


def _sort_numpy(xs, attrs, ctx):
    x = xs[0]
    axis = attrs["axis"] % x.ndim
    return np.take_along_axis(x, stable_order(x, axis, attrs["descending"]), axis=axis)


def _argsort_numpy(xs, attrs, ctx):
    x = xs[0]
    return stable_order(x, attrs["axis"] % x.ndim, attrs["descending"]).astype(np_dtype(attrs["dtype"]))


_WHOLE = ShardingDoc(passes="other dims", blocked="`axis`")

register_op(
    OpDef(
        name="sort",
        params=(Param("x", "tensor"), Param("axis", "int", -1), Param("descending", "bool", False)),
        infer=_sort_infer,
        numpy=_sort_numpy,
        sharding=_whole_axis_rule(_axis("sort")),
        doc="x sorted along `axis` (ascending, or descending).",
        relax=RelaxForm.same_name("sort", "axis", "descending"),
        category="sorting",
        sharding_doc=_WHOLE,
    )
)

register_op(
    OpDef(
        name="argsort",
        params=(Param("data", "tensor"), Param("axis", "int", -1), Param("descending", "bool", False),
                Param("dtype", "dtype", "int32")),
        infer=_argsort_infer,
        numpy=_argsort_numpy,
        sharding=_whole_axis_rule(_axis("argsort")),
        doc="The indices that sort data along `axis`; ties keep index order.",
        relax=RelaxForm.same_name("argsort", "axis", "descending", "dtype"),
        category="sorting",
        sharding_doc=_WHOLE,
    )
)


# ---------------------------------------------------------------- topk

_RET_TYPES = ("both", "values", "indices")


def _topk_k(x: TensorType, attrs):
    axis = _axis("topk")(x, attrs)
    k = attrs["k"]
    n = x.shape[axis]
    if k < 1:  # TVM: every element
        return axis, n
    if isinstance(n, int) and k > n:
        raise TypeInferenceError(f"R.topk: k={k} is more than the {n} elements of axis {axis}")
    return axis, k


def _topk_infer(types, attrs):
    x = expect_tensor(types[0], "topk")
    axis, k = _topk_k(x, attrs)
    if attrs["dtype"] not in _INDEX_DTYPES:
        raise TypeInferenceError(f"R.topk: the index dtype must be int32 or int64, got {attrs['dtype']}")
    shape = tuple(k if i == axis else d for i, d in enumerate(x.shape))
    values, indices = TensorType(shape, x.dtype), TensorType(shape, attrs["dtype"])
    return {"both": TupleType((values, indices)), "values": values, "indices": indices}[attrs["ret_type"]]


def _topk_numpy(xs, attrs, ctx):
    x = xs[0]
    axis = attrs["axis"] % x.ndim
    k = attrs["k"] if attrs["k"] >= 1 else x.shape[axis]
    order = np.take(stable_order(x, axis, attrs["largest"]), np.arange(k), axis=axis)
    values, indices = np.take_along_axis(x, order, axis=axis), order.astype(np_dtype(attrs["dtype"]))
    return {"both": (values, indices), "values": values, "indices": indices}[attrs["ret_type"]]


register_op(
    OpDef(
        name="topk",
        params=(
            Param("data", "tensor"),
            Param("k", "int", 1),
            Param("axis", "int", -1),
            Param("ret_type", "choice", "both", choices=_RET_TYPES),
            Param("largest", "bool", True),
            Param("dtype", "dtype", "int32"),
        ),
        infer=_topk_infer,
        numpy=_topk_numpy,
        sharding=_whole_axis_rule(_axis("topk")),
        doc="The k largest (or smallest) elements along `axis` and their indices, in order; ties by index "
        "(k < 1: all).",
        relax=RelaxForm.same_name("topk", "k", "axis", "ret_type", "largest", "dtype"),
        category="sorting",
        sharding_doc=ShardingDoc(passes="other dims, into both outputs", blocked="`axis`"),
    )
)


# ---------------------------------------------------------------- cumsum


def _cumsum_axis(x: TensorType, attrs):
    return None if attrs["axis"] is None else _axis("cumsum")(x, attrs)


def _cumsum_infer(types, attrs):
    x = expect_tensor(types[0], "cumsum", "data")
    dtype = attrs["dtype"] or x.dtype
    if x.dtype == "bool" and attrs["dtype"] is None:
        raise TypeInferenceError("R.cumsum: a bool tensor needs dtype= (the type to count in)")
    if _cumsum_axis(x, attrs) is None:
        return TensorType((sym.product(x.shape),), dtype)
    return TensorType(x.shape, dtype)


def _cumsum_numpy(xs, attrs, ctx):
    x = xs[0]
    out_dtype = np_dtype(attrs["dtype"] or str(x.dtype))
    axis = attrs["axis"]
    data = x.reshape(-1) if axis is None else x
    axis = 0 if axis is None else axis % x.ndim
    # integers add in their own type (wrapping as TVM's do); floats in float64, rounded once
    acc = data.astype(compute_dtype(out_dtype) if not is_int_dtype(str(np.dtype(out_dtype))) else out_dtype)
    total = np.cumsum(acc, axis=axis, dtype=acc.dtype)
    if attrs["exclusive"]:
        total = total - acc
    return total.astype(out_dtype)


register_op(
    OpDef(
        name="cumsum",
        params=(
            Param("data", "tensor"),
            Param("axis", "int", None),
            Param("dtype", "optional_dtype", None),
            Param("exclusive", "bool", None),
        ),
        infer=_cumsum_infer,
        numpy=_cumsum_numpy,
        sharding=_whole_axis_rule(_cumsum_axis),
        doc="Running sums along `axis` (of the flattened tensor when None), in `dtype`; exclusive: each "
        "without its own element.",
        relax=RelaxForm.same_name("cumsum", "axis", "dtype", "exclusive"),
        category="sorting",
        sharding_doc=ShardingDoc(passes="other dims", blocked="`axis` (every dim when None)"),
    )
)
