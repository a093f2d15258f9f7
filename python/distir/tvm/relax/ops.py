"""The export of ops: each distir op of the local view as standard Relax ops.

Every op declares its Relax form (:class:`distir.ir.op.RelaxForm`): a Relax op by its
dotted name and the attributes it passes, which :func:`emit_relax_form` resolves and
calls, or an emitter of this package for a form composed of several Relax ops. The
emitters for such ops live here: ``take`` (modes Relax lacks are an error),
``strided_slice`` (bounds clamped on workers outside a mesh), ``tril``/``triu`` (a
diagonal that depends on the worker), ``shard_take`` (a vocab-parallel lookup) and
``layer_norm``/``group_norm`` (the ``center``/``scale`` flags TVM's legalization ignores)
and ``image.resize2d`` (its ``out_dtype``, which TVM's legalization ignores too). The
``R.ccl.*`` collectives are emitted as their step kind says (:mod:`distir.tvm.relax.collectives`).
An op with neither is an error naming it.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable

import numpy as np
import tvm
from tvm import relax

from ...errors import DistirError
from ...ir import sym
from ...ir.combine import dtype_class
from ...ir.expr import Call, Constant
from ...ir.layout import depends_on_worker
from ...ir.op import OpDef, RelaxForm, all_ops
from ...ir.types import TensorType
from ..errors import tvm_message
from .collectives import collective_ops, emit_collective
from .emitter import Emitter, Exporter

__all__ = [
    "emit_op",
    "emit_affine_norm",
    "emit_bool_logic",
    "emit_comparison",
    "emit_full",
    "emit_negative",
    "emit_reduction",
    "emit_relax_form",
    "emit_resize2d",
    "emit_shard_take",
    "emit_strided_slice",
    "emit_take",
    "emit_triangle",
    "relax_function",
    "supported_ops",
]



def supported_ops() -> frozenset[str]:
    """Names of the ops with a TVM form: a declared Relax form, or a collective with a Disco form."""
    declared = {name for name, op in all_ops().items() if op.relax is not None}
    return frozenset(declared) | collective_ops()


def __getattr__(name: str):
    if name == "SUPPORTED_OPS":  # derived from the declarations when asked for
        return supported_ops()
    raise AttributeError(f"module 'distir.tvm.relax.ops' has no attribute '{name}'")


@functools.cache
def relax_function(path: str) -> Callable:
    """The Relax op function at dotted ``path`` under ``tvm`` (``"relax.op.nn.softmax"``)."""
    obj = tvm
    for part in path.removeprefix("tvm.").split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise DistirError(f"TVM {tvm.__version__} has no Relax op '{path}'") from None
    if not callable(obj):
        raise DistirError(f"'{path}' is not a Relax op function")
    return obj


@functools.cache
def _emitter(ref: str) -> Emitter:
    module, _, name = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        raise DistirError(f"the Relax emitter '{ref}' does not exist") from None


def emit_op(ex: Exporter, call: Call) -> relax.Expr:
    """The Relax expression for one distir call (intermediate steps are emitted on the way)."""
    op: OpDef = call.op
    if op.step is not None and op is op.step.local_op:  # a step kind's collective, as its record says
        return emit_collective(ex, call)
    form = op.relax
    if form is not None:
        try:
            emit = _emitter(form.emit) if form.emit is not None else emit_relax_form
        except DistirError as err:
            raise ex.error(f"{err} (declared by R.{op.name})") from None
        return emit(ex, call)
    hint = "; it belongs to the global view: run the distribute pipeline first" if op.name.startswith("dist.") else ""
    raise ex.error(f"R.{op.name} has no TVM Relax form (declare OpDef.relax){hint}")


def emit_relax_form(ex: Exporter, call: Call, form: RelaxForm | None = None,
                    args: list[relax.Expr] | None = None) -> relax.Expr:
    """The declared Relax op (``form``, by default the op's own) on the call's arguments (or
    ``args``, already Relax) and attributes."""
    form = form or call.op.relax
    if form.op is None:
        raise ex.error(f"R.{call.op.name}'s Relax form names no Relax op, only the emitter {form.emit}")
    try:
        fn = relax_function(form.op)
    except DistirError as err:
        raise ex.error(f"{err} (declared by R.{call.op.name})") from None
    attrs = call.op.full_attrs(call.attrs)
    args = [ex.value(a) for a in call.args] if args is None else args
    kwargs = {}
    for a in form.attrs:
        value = attrs[a.name]
        kwargs[a.keyword] = ex.attr(a.convert(value) if a.convert is not None else value)
    try:
        return fn(*args, **kwargs)
    except Exception as err:  # noqa: BLE001 - TVM raises several error types
        raise ex.error(f"TVM rejects {form.op} with attributes {sorted(kwargs)}: {tvm_message(err)}") from None


# ---------------------------------------------------------------- emitters of composed forms

_TAKE_MODES = ("fast", "wrap", "clip")  # what Relax's take knows


def emit_take(ex: Exporter, call: Call) -> relax.Expr:
    """``relax.op.take``, for the modes it has. Mode "fast" is emitted as "clip": the same rows for the
    in-range indices "fast" requires (the interpreter refuses others before any run), no read past the
    table for others, and no TVM warning on every build ("Fast mode segfaults when there are
    out-of-bounds indices", logged by topi's take once per legalized lookup)."""
    attrs = call.op.full_attrs(call.attrs)
    mode = attrs["mode"]
    if mode not in _TAKE_MODES:
        raise ex.error(f"Relax's take has no mode \"{mode}\" (it has {', '.join(_TAKE_MODES)})")
    if mode == "fast":
        return emit_relax_form(ex, Call(call.op, call.args, {**attrs, "mode": "clip"}, call.span))
    return emit_relax_form(ex, call)


def emit_strided_slice(ex: Exporter, call: Call) -> relax.Expr:
    """``relax.op.strided_slice``, with worker-dependent bounds kept inside the tensor."""
    attrs = call.op.full_attrs(call.attrs)
    x = call.args[0].type
    begin, end = list(attrs["begin"]), list(attrs["end"])
    strides = attrs["strides"]
    if not ex.plan.every_mesh_covers_all and isinstance(x, TensorType):
        # A worker outside a mesh computes a block index past the tensor; keep its (unused)
        # slice in bounds so that the kernel never reads outside the buffer.
        for i, axis in enumerate(attrs["axes"]):
            b, e = begin[i], end[i]
            if depends_on_worker(b) and (strides is None or strides[i] == 1):
                extent = sym.sub(e, b)
                dim = x.shape[axis % x.ndim]
                clamped = sym.clamp(b, 0, sym.sub(dim, extent))
                begin[i], end[i] = clamped, sym.add(clamped, extent)
    return emit_relax_form(ex, Call(call.op, call.args, {**attrs, "begin": begin, "end": end}, call.span))


def emit_partial_mean(ex: Exporter, call: Call) -> relax.Expr:
    """``sum(x, axis) / count`` (count may be a size known at run time); of bools, any (a mean of
    bools cast to bool is whether one is true)."""
    attrs = call.op.full_attrs(call.attrs)
    t: TensorType = call.type
    x = ex.value(call.args[0])
    if t.dtype == "bool":
        return _bool_reduction(ex, relax.op.max, x, attrs)
    total = ex.emit(relax.op.sum(x, axis=attrs["axis"], keepdims=attrs["keepdims"]))
    return relax.op.divide(total, ex.scalar(attrs["count"], t.dtype))


def emit_negative(ex: Exporter, call: Call) -> relax.Expr:
    """``relax.op.negative``; of unsigned integers ``0 - x``, which wraps around as numpy's negation does."""
    dtype = call.args[0].type.dtype
    if not dtype.startswith("uint"):
        return emit_relax_form(ex, call)
    return relax.op.subtract(ex.const(0, dtype), ex.value(call.args[0]))


def emit_bool_logic(ex: Exporter, call: Call) -> relax.Expr:
    """The Relax op of the same name; of bools (TVM builds no arithmetic on them), add and maximum
    are ``logical_or``, multiply and minimum ``logical_and``, as numpy computes them."""
    if call.args[0].type.dtype != "bool":
        return emit_relax_form(ex, call)
    fn = relax.op.logical_or if call.op.name in ("add", "maximum") else relax.op.logical_and
    return fn(ex.value(call.args[0]), ex.value(call.args[1]))


def emit_comparison(ex: Exporter, call: Call) -> relax.Expr:
    """The Relax comparison of the same name; of bools through uint8 (TVM's LLVM code compares i1
    values as floats and fails), where False < True as in numpy."""
    fn = getattr(relax.op, call.op.name)
    a, b = ex.value(call.args[0]), ex.value(call.args[1])
    if call.args[0].type.dtype == "bool":
        a, b = ex.emit(relax.op.astype(a, "uint8")), ex.emit(relax.op.astype(b, "uint8"))
    return fn(a, b)


def _bool_reduction(ex: Exporter, fn, x: relax.Expr, attrs) -> relax.Expr:
    """A max (any) or min (all) of bools, through uint8 (TVM 0.27 has no max or min of bool)."""
    wide = ex.emit(relax.op.astype(x, "uint8"))
    return relax.op.astype(ex.emit(fn(wide, axis=attrs["axis"], keepdims=attrs["keepdims"])), "bool")


def emit_reduction(ex: Exporter, call: Call) -> relax.Expr:
    """The Relax reduction of the same name, exact on every dtype as the numpy reference is: a max
    or min (and a mean) of bools through uint8, and a mean of integers rounded once toward zero,
    from int64 quotients and remainders by the count (Relax's mean adds in the input's dtype,
    which wraps around, and divides after)."""
    name, dtype = call.op.name, call.args[0].type.dtype
    attrs = call.op.full_attrs(call.attrs)
    x = ex.value(call.args[0])
    if dtype == "bool" and name in ("max", "min", "mean"):
        return _bool_reduction(ex, relax.op.min if name == "min" else relax.op.max, x, attrs)
    if name != "mean" or dtype_class(dtype) != "int":
        return emit_relax_form(ex, call)
    xt: TensorType = call.args[0].type
    axes = list(range(xt.ndim)) if attrs["axis"] is None else [a % xt.ndim for a in
                                                                ([attrs["axis"]] if isinstance(attrs["axis"], int) else attrs["axis"])]
    count = ex.scalar(sym.max_(sym.product([xt.shape[a] for a in axes]), 1))  # the mean of nothing is 0
    keep = {"axis": axes, "keepdims": attrs["keepdims"]}
    wide = ex.emit(relax.op.astype(x, "int64"))
    quotients = ex.emit(relax.op.sum(ex.emit(relax.op.floor_divide(wide, count)), **keep))  # wraps, lands in range
    remainders = ex.emit(relax.op.sum(ex.emit(relax.op.floor_mod(wide, count)), **keep))
    floor = ex.emit(relax.op.add(quotients, ex.emit(relax.op.floor_divide(remainders, count))))
    zero = ex.const(0, "int64")
    up = ex.emit(relax.op.logical_and(ex.emit(relax.op.less(floor, zero)),
                                      ex.emit(relax.op.not_equal(ex.emit(relax.op.floor_mod(remainders, count)), zero))))
    return relax.op.astype(ex.emit(relax.op.add(floor, ex.emit(relax.op.astype(up, "int64")))), dtype)


def emit_mask_tail(ex: Exporter, call: Call) -> relax.Expr:
    """``where(arange(extent) < length, x, value)`` along ``axis``; the length may depend on the worker."""
    attrs = call.op.full_attrs(call.attrs)
    t: TensorType = call.args[0].type
    axis = attrs["axis"] % t.ndim
    extent = t.shape[axis]
    index = ex.emit(relax.op.arange(0, ex.dim(extent), 1, "int64"))
    shape = [1] * t.ndim
    shape[axis] = extent
    index = ex.emit(relax.op.reshape(index, relax.ShapeExpr([_p(d) for d in ex.dims(shape)])))
    keep = ex.emit(relax.op.less(index, ex.scalar(attrs["length"])))
    return relax.op.where(keep, ex.value(call.args[0]), ex.const(attrs["value"], t.dtype))


def emit_rms_norm(ex: Exporter, call: Call) -> relax.Expr:
    """``relax.op.nn.rms_norm``; a rank-1 tensor goes through a ``(1, n)`` view, which TVM 0.27's
    legalization needs (it fails to build rank 1)."""
    x: TensorType = call.args[0].type
    if x.ndim != 1:
        return emit_relax_form(ex, call)
    attrs = call.op.full_attrs(call.attrs)
    row = relax.ShapeExpr([1, _p(ex.dim(x.shape[0]))])
    data = ex.emit(relax.op.reshape(ex.value(call.args[0]), row))
    out = ex.emit(relax.op.nn.rms_norm(data, ex.value(call.args[1]), axes=[-1], epsilon=attrs["epsilon"]))
    return relax.op.reshape(out, relax.ShapeExpr([_p(ex.dim(x.shape[0]))]))


def emit_affine_norm(ex: Exporter, call: Call) -> relax.Expr:
    """``relax.op.nn.layer_norm``/``group_norm``; with ``scale`` off, gamma is ones, with ``center``
    off, beta is zeros (TVM 0.27's legalization ignores both flags and applies gamma and beta)."""
    attrs = call.op.full_attrs(call.attrs)
    if attrs["center"] and attrs["scale"]:
        return emit_relax_form(ex, call)
    data, gamma, beta = (ex.value(a) for a in call.args)
    if not attrs["scale"]:
        gamma = ex.emit(relax.op.ones_like(gamma))
    if not attrs["center"]:
        beta = ex.emit(relax.op.zeros_like(beta))
    return emit_relax_form(ex, call, args=[data, gamma, beta])


def emit_resize2d(ex: Exporter, call: Call) -> relax.Expr:
    """``relax.op.image.resize2d`` in the input's dtype, then ``astype(out_dtype)`` (TVM 0.27's
    legalization ignores out_dtype: the kernel returns the input's dtype under a type that says
    out_dtype)."""
    attrs = call.op.full_attrs(call.attrs)
    out_dtype = attrs["out_dtype"]
    resized = emit_relax_form(ex, Call(call.op, call.args, {**attrs, "out_dtype": None}, call.span))
    if out_dtype is None or out_dtype == call.args[0].type.dtype:
        return resized
    return relax.op.astype(ex.emit(resized), out_dtype)


def emit_full(ex: Exporter, call: Call) -> relax.Expr:
    """``relax.op.full``; a constant fill of inf or nan (a float16 ``-1e9`` mask) is broadcast instead,
    since TVM 0.27's legalization of ``full`` fails on a non-finite fill (``topi.full`` reads the dtype
    as a string)."""
    fill = call.args[1]
    if not isinstance(fill, Constant) or np.all(np.isfinite(np.asarray(fill.data, dtype=np.float64))):
        return emit_relax_form(ex, call)
    dtype = call.op.full_attrs(call.attrs)["dtype"] or str(fill.data.dtype)
    value = ex.value(fill)
    if str(fill.data.dtype) != dtype:
        value = ex.emit(relax.op.astype(value, dtype))
    return relax.op.broadcast_to(value, ex.value(call.args[0]))


def emit_triangle(ex: Exporter, call: Call) -> relax.Expr:
    """``relax.op.tril``/``triu``; with a diagonal offset that depends on the worker, a mask from index tensors."""
    k = call.op.full_attrs(call.attrs)["k"]
    if not depends_on_worker(k):
        return emit_relax_form(ex, call)
    x = ex.value(call.args[0])
    lower = call.op.name == "tril"
    # k depends on the worker (a sharded row or column block): build the mask from index
    # tensors, since a kernel taking the worker id as a scalar breaks TVM 0.27's FuseTIR
    t: TensorType = call.args[0].type
    rows, cols = t.shape[-2], t.shape[-1]
    i = ex.emit(relax.op.arange(0, ex.dim(rows), 1, "int64"))
    i = ex.emit(relax.op.reshape(i, relax.ShapeExpr([_p(ex.dim(rows)), _p(1)])))
    j = ex.emit(relax.op.arange(0, ex.dim(cols), 1, "int64"))
    diag = ex.emit(relax.op.subtract(j, i))  # (rows, cols): column minus row
    keep = relax.op.less_equal if lower else relax.op.greater_equal
    mask = ex.emit(keep(diag, ex.scalar(k)))
    return relax.op.where(mask, x, ex.const(0, t.dtype))


def _p(d):
    return sym.to_prim(d)


def emit_shard_take(ex: Exporter, call: Call) -> relax.Expr:
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
    got = ex.emit(relax.op.take(x, safe, axis=axis, mode="clip"))  # indices made safe: in range
    mask_shape = [1] * axis + list(it.shape) + [1] * (xt.ndim - axis - 1)
    mask = ex.emit(relax.op.reshape(mine, relax.ShapeExpr([_p(d) for d in ex.dims(mask_shape)])))
    return relax.op.where(mask, got, ex.const(0, xt.dtype))

