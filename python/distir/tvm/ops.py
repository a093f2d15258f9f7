"""The op table of the export: each distir op of the local view as standard Relax ops.

Most ops are Relax ops of the same name whose attributes have the same names and
meaning, so one generic rule serves them. The rest are written out: ops whose attribute
may depend on the worker id (``tril``/``triu`` after the lowering shifted ``k``),
``shard_take`` (a vocab-parallel lookup, composed from take and masks), and the
``R.ccl.*`` collectives (in :mod:`distir.tvm.collectives`). Anything else is an error
naming the op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tvm import relax

from ..ir import sym
from ..ir.expr import Call
from ..ir.layout import WORKER_ID
from ..ir.types import TensorType
from .collectives import COLLECTIVES, emit_collective

if TYPE_CHECKING:  # pragma: no cover
    from .export import _FunctionExporter

__all__ = ["SUPPORTED_OPS", "emit_op"]

Rule = Callable[["_FunctionExporter", Call], relax.Expr]

_UNARY = ("abs", "cos", "erf", "exp", "log", "negative", "rsqrt", "sigmoid", "sin", "sqrt", "square", "tanh")
_BINARY = (
    "add", "subtract", "multiply", "divide", "power", "maximum", "minimum",
    "equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
)  # fmt: skip
# distir op -> (Relax op function, attribute names passed by keyword)
_SAME_NAME: dict[str, tuple[Callable, tuple[str, ...]]] = {
    **{n: (getattr(relax.op, n), ()) for n in _UNARY + _BINARY},
    "where": (relax.op.where, ()),
    "astype": (relax.op.astype, ("dtype",)),
    "matmul": (relax.op.matmul, ("out_dtype",)),
    **{n: (getattr(relax.op, n), ("axis", "keepdims")) for n in ("sum", "mean", "max", "min", "prod")},
    "nn.relu": (relax.op.nn.relu, ()),
    "nn.gelu": (relax.op.nn.gelu, ()),
    "nn.gelu_tanh": (relax.op.nn.gelu_tanh, ()),
    "nn.silu": (relax.op.nn.silu, ()),
    "nn.softmax": (relax.op.nn.softmax, ("axis",)),
    "nn.log_softmax": (relax.op.nn.log_softmax, ("axis",)),
    "nn.layer_norm": (relax.op.nn.layer_norm, ("axes", "epsilon", "center", "scale")),
    "nn.rms_norm": (relax.op.nn.rms_norm, ("axes", "epsilon")),
    "reshape": (relax.op.reshape, ()),
    "permute_dims": (relax.op.permute_dims, ("axes",)),
    "expand_dims": (relax.op.expand_dims, ("axis",)),
    "squeeze": (relax.op.squeeze, ("axis",)),
    "concat": (relax.op.concat, ("axis",)),
    "split": (relax.op.split, ("indices_or_sections", "axis")),
    "take": (relax.op.take, ("axis", "mode")),
    "full": (relax.op.full, ("dtype",)),
    "zeros": (relax.op.zeros, ("dtype",)),
    "ones": (relax.op.ones, ("dtype",)),
}

_TAKE_MODES = ("fast", "wrap", "clip")  # what Relax's take knows


def _same_name_rule(fn: Callable, attr_names: tuple[str, ...]) -> Rule:
    def rule(ex: _FunctionExporter, call: Call) -> relax.Expr:
        attrs = call.op.full_attrs(call.attrs)
        args = [ex.value(a) for a in call.args]
        return fn(*args, **{name: ex.attr(attrs[name]) for name in attr_names})

    return rule


def _take(ex: _FunctionExporter, call: Call) -> relax.Expr:
    mode = call.op.full_attrs(call.attrs)["mode"]
    if mode not in _TAKE_MODES:
        raise ex.error(f"Relax's take has no mode \"{mode}\" (it has {', '.join(_TAKE_MODES)})")
    return _same_name_rule(*_SAME_NAME["take"])(ex, call)


def _strided_slice(ex: _FunctionExporter, call: Call) -> relax.Expr:
    attrs = call.op.full_attrs(call.attrs)
    x = call.args[0].type
    begin, end = list(attrs["begin"]), list(attrs["end"])
    strides = attrs["strides"]
    if not ex.plan.every_mesh_covers_all and isinstance(x, TensorType):
        # A worker outside a mesh computes a block index past the tensor; keep its (unused)
        # slice in bounds so that the kernel never reads outside the buffer.
        for i, axis in enumerate(attrs["axes"]):
            b, e = begin[i], end[i]
            if WORKER_ID in sym.free_vars(b) and (strides is None or strides[i] == 1):
                extent = sym.sub(e, b)
                dim = x.shape[axis % x.ndim]
                clamped = _clamp(b, sym.sub(dim, extent))
                begin[i], end[i] = clamped, sym.add(clamped, extent)
    return relax.op.strided_slice(
        ex.value(call.args[0]),
        axes=list(attrs["axes"]),
        begin=ex.dims(begin),
        end=ex.dims(end),
        strides=None if strides is None else ex.dims(strides),
        assume_inbound=attrs["assume_inbound"],
    )


def _clamp(value, high):
    """``min(max(value, 0), high)`` as a symbolic int."""
    return sym.clamp(value, 0, high)


def _triangle(name: str) -> Rule:
    def rule(ex: _FunctionExporter, call: Call) -> relax.Expr:
        k = call.op.full_attrs(call.attrs)["k"]
        x = ex.value(call.args[0])
        if WORKER_ID not in sym.free_vars(k):
            return getattr(relax.op, name)(x, ex.dim(k))
        # k depends on the worker (a sharded row or column block): build the mask from index
        # tensors, since a kernel taking the worker id as a scalar breaks TVM 0.27's FuseTIR
        t: TensorType = call.args[0].type
        rows, cols = t.shape[-2], t.shape[-1]
        i = ex.emit(relax.op.arange(0, ex.dim(rows), 1, "int64"))
        i = ex.emit(relax.op.reshape(i, relax.ShapeExpr([_p(ex.dim(rows)), _p(1)])))
        j = ex.emit(relax.op.arange(0, ex.dim(cols), 1, "int64"))
        diag = ex.emit(relax.op.subtract(j, i))  # (rows, cols): column minus row
        keep = relax.op.less_equal if name == "tril" else relax.op.greater_equal
        mask = ex.emit(keep(diag, ex.scalar(k)))
        return relax.op.where(mask, x, ex.const(0, t.dtype))

    return rule


def _p(d):
    return sym.to_prim(d)


def _shard_take(ex: _FunctionExporter, call: Call) -> relax.Expr:
    """Look up the indices that fall in this worker's rows [offset, offset + rows); zeros elsewhere."""
    attrs = call.op.full_attrs(call.attrs)
    xt: TensorType = call.args[0].type
    it: TensorType = call.args[1].type
    axis = attrs["axis"] % xt.ndim
    rows = xt.shape[axis]
    x, idx = ex.value(call.args[0]), ex.value(call.args[1])
    local = ex.emit(relax.op.subtract(idx, ex.scalar(attrs["offset"], it.dtype)))
    low = ex.emit(relax.op.greater_equal(local, ex.const(0, it.dtype)))
    high = ex.emit(relax.op.less(local, ex.scalar(rows, it.dtype)))
    mine = ex.emit(relax.op.logical_and(low, high))
    safe = ex.emit(relax.op.where(mine, local, ex.const(0, it.dtype)))
    got = ex.emit(relax.op.take(x, safe, axis=axis))
    mask_shape = [1] * axis + list(it.shape) + [1] * (xt.ndim - axis - 1)
    mask = ex.emit(relax.op.reshape(mine, relax.ShapeExpr([_p(d) for d in ex.dims(mask_shape)])))
    return relax.op.where(mask, got, ex.const(0, xt.dtype))


_RULES: dict[str, Rule] = {name: _same_name_rule(fn, attrs) for name, (fn, attrs) in _SAME_NAME.items()}
_RULES.update(
    {
        "take": _take,
        "strided_slice": _strided_slice,
        "tril": _triangle("tril"),
        "triu": _triangle("triu"),
        "shard_take": _shard_take,
        **{name: emit_collective for name in COLLECTIVES},
    }
)

SUPPORTED_OPS: frozenset[str] = frozenset(_RULES)


def emit_op(ex: _FunctionExporter, call: Call) -> relax.Expr:
    """The Relax expression for one distir call (intermediate steps are emitted on the way)."""
    rule = _RULES.get(call.op.name)
    if rule is None:
        hint = (
            "; it belongs to the global view: run the distribute pipeline first"
            if call.op.name.startswith("dist.")
            else ""
        )
        raise ex.error(f"R.{call.op.name} has no TVM Relax form in distir.tvm{hint}")
    return rule(ex, call)
