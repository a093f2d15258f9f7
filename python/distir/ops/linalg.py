"""matmul: batched and broadcasting, as numpy.matmul and R.matmul."""

from __future__ import annotations

import numpy as np

from ..errors import TypeInferenceError
from ..ir import sym
from ..ir.op import RelaxForm, ShardingDoc
from ..ir.types import np_dtype
from ._common import OpDef, Param, ShardingRule, TensorType, broadcast_shapes, expect_tensor, register_op
from .docgen import partials_text

# a partial operand passes when the other is replicated: matmul is linear in each
_PARTIAL = {"sum": "one", "avg": "one"}


def _infer(types, attrs):
    a = expect_tensor(types[0], "matmul", "lhs")
    b = expect_tensor(types[1], "matmul", "rhs")
    if a.ndim < 1 or b.ndim < 1:
        raise TypeInferenceError("R.matmul: inputs must have rank at least 1")
    if a.dtype != b.dtype:
        raise TypeInferenceError(f"R.matmul: dtypes differ ({a.dtype} and {b.dtype}); use R.astype first")
    ka = a.shape[-1]
    kb = b.shape[-2] if b.ndim >= 2 else b.shape[0]
    if not sym.equal(ka, kb):
        raise TypeInferenceError(
            f"R.matmul: contraction dims differ: lhs {sym.to_str(ka)} (last dim) vs rhs {sym.to_str(kb)}"
        )
    batch_a = a.shape[:-2] if a.ndim >= 2 else ()
    batch_b = b.shape[:-2] if b.ndim >= 2 else ()
    batch = broadcast_shapes([batch_a, batch_b], "matmul") if (batch_a or batch_b) else ()
    out = list(batch)
    if a.ndim >= 2:
        out.append(a.shape[-2])
    if b.ndim >= 2:
        out.append(b.shape[-1])
    dtype = attrs.get("out_dtype") or a.dtype
    return TensorType(tuple(out), dtype)


def _rule(types, attrs, outs):
    a, b = types
    out_nd = outs[0].ndim
    batch_nd = out_nd - (a.ndim >= 2) - (b.ndim >= 2)

    def batch_dims(t):
        nb = t.ndim - 2 if t.ndim >= 2 else 0
        off = batch_nd - nb
        return tuple(
            () if isinstance(t.shape[j], int) and t.shape[j] == 1 else (f"b{j + off}",) for j in range(nb)
        )

    a_dims = batch_dims(a) + ((("m",), ("k",)) if a.ndim >= 2 else (("k",),))
    b_dims = batch_dims(b) + ((("k",), ("n",)) if b.ndim >= 2 else (("k",),))
    out = tuple((f"b{i}",) for i in range(batch_nd))
    if a.ndim >= 2:
        out += (("m",),)
    if b.ndim >= 2:
        out += (("n",),)
    return ShardingRule(
        inputs=(a_dims, b_dims),
        outputs=(out,),
        reductions={"k": "sum"},
        partial=_PARTIAL,
    )


def _numpy(xs, attrs, ctx):
    a, b = xs
    if str(a.dtype) in ("float16", "bfloat16"):
        # numpy has no fast or well-accumulated half matmul: compute in float32, round once
        out = np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype)
    else:
        out = np.matmul(a, b)
    dtype = attrs.get("out_dtype")
    return np.asarray(out.astype(np_dtype(dtype)) if dtype else out)


register_op(
    OpDef(
        name="matmul",
        params=(Param("x1", "tensor"), Param("x2", "tensor"), Param("out_dtype", "optional_dtype", None)),
        infer=_infer,
        numpy=_numpy,
        sharding=_rule,
        doc="Matrix product with numpy semantics (batched, broadcasting). A sharded contraction dim gives P[sum].",
        relax=RelaxForm.same_name("matmul", "out_dtype"),
        category="reduction",
        sharding_doc=ShardingDoc(
            passes="batch dims (broadcasting), rows of x1, columns of x2",
            gives_partial="contraction dim → `P[sum]`",
            partials=partials_text(_PARTIAL),
        ),
    )
)
