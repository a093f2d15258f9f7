"""How far two correct runs of a float program may be apart: rounding, as a formula in the sizes.

Two correct runs of one program (one device and W workers, distir's interpreter and TVM's
kernels) add the terms of each reduction in another order, and in half precision round each
partial sum: a reduction of ``L`` terms then differs by about ``u * sqrt(L)`` relative to its
scale (``u`` the dtype's unit roundoff: a random walk of roundings), and the errors of the
program's reductions add up in quadrature. So a comparison allows, relative to each output's
largest value, ``SPREAD * u * sqrt(total)``, where ``total`` is :func:`reduction_length`: the sum over the
program's reductions (every factor a sharding rule reduces: matmul's inner dim, a sum's axes) of
the number of terms each adds. docs/analysis.md says more.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import DistirError
from ..ir import sym
from ..ir.expr import Call, IRModule
from ..ir.sharding import op_rule, with_sizes
from ..ir.sym import Dim
from ..ir.types import DTensorType, TensorType, TupleType, np_dtype

__all__ = ["SPREAD", "reduction_length", "rounding_bound", "unit_roundoff"]

#: how many times the random walk's size a comparison allows: on 2-layer Llama blocks in float16 and
#: bfloat16 (seeds 0-7, 1-8 workers, TVM's kernels against the interpreter) the largest difference
#: was 0.77 of ``u * sqrt(total)``
SPREAD = 1.5


def unit_roundoff(dtype: str) -> float:
    """Half the distance from 1 to the next number of a float dtype (bfloat16: 2^-8, float16: 2^-11,
    float32: 2^-24); 0 for integers and bool, which are exact."""
    dt = np.dtype(np_dtype(dtype))
    if dt.kind != "f" and dtype != "bfloat16":
        return 0.0
    import ml_dtypes

    return float(ml_dtypes.finfo(dt).eps) / 2


def rounding_bound(dtype: str, length: float) -> float:
    """The difference, relative to an output's largest value, that rounding allows between two
    correct runs whose reductions add ``length`` terms in all (module docstring)."""
    return SPREAD * unit_roundoff(dtype) * math.sqrt(max(float(length), 1.0))


def _tensor(t) -> TensorType:
    return TensorType(t.shape, t.dtype) if isinstance(t, DTensorType) else t


def reduction_length(mod: IRModule, func: str = "main") -> Dim:
    """The number of terms ``func``'s reductions add, summed over its calls (a formula in its sizes):
    per call, the product of the sizes of the factors its sharding rule reduces."""
    total: Dim = 0
    for b in mod[func].bindings():
        call = b.value
        if not isinstance(call, Call) or call.op.sharding is None:
            continue
        ins = [_tensor(a.type) for a in call.args if isinstance(a.type, (TensorType, DTensorType))]
        out = b.var.type
        outs = [_tensor(t) for t in (out.fields if isinstance(out, TupleType) else (out,))]
        if not all(isinstance(t, TensorType) for t in outs):
            continue
        try:
            rule = with_sizes(op_rule(call.op, ins, dict(call.op.full_attrs(call.attrs)), outs), ins, outs)
        except (DistirError, IndexError):  # a rule that does not apply here: nothing to count
            continue
        reduced = [f for f in rule.reductions if f in rule.sizes]
        if not reduced:
            continue
        length: Dim = 1
        for f in reduced:
            length = sym.mul(length, rule.sizes[f])
        total = sym.add(total, length)
    return total
