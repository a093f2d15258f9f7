"""LowerGlobalViewToLocalView: from DTensors to what each worker runs.

Every DTensor becomes a per-worker tensor whose shape is a formula in the mesh sizes
(``(T.ceildiv(128, num_workers), 64)``: a block, padded when the split is uneven; see
:mod:`distir.ir.layout`); compute ops keep their name and run on the local pieces (a
sharded contraction leaves each worker a partial sum, exactly what the placement says);
each redistribution step becomes its kind's local form (see :mod:`distir.ir.steps`): an
``R.ccl.*`` collective over one mesh axis, or a worker's own block (``worker_id`` is the
symbolic id of the running worker, bound by the runtime); a transfer between meshes
becomes ``R.ccl.transfer``.

Padding is harmless where an op treats elements one by one, and is masked
(``R.mask_tail``) where it is not: before an op reduces over a sharded dim (with the
reduction's identity) and where the op's sharding rule names a value its padding must hold
(indices, divisors). Every worker of the device set runs the function; a worker outside a
tensor's mesh holds no value for it (see distir.runtime.spmd). Each function remembers its
global signature in the ``distir.global_params`` / ``distir.global_result`` attributes, so
inputs can be sharded and outputs reassembled by any runner.
"""

from __future__ import annotations

from typing import ClassVar

from ..errors import DiagnosticError, DistirError
from ..ir import sym
from ..ir.expr import Binding, Block, Call, Expr, Function, IRModule, Tuple, TupleGetItem, Var
from ..ir.combine import identity
from ..ir.layout import local_type, valid_length_expr
from ..ir.op import call_key, get_op
from ..ir.types import DTensorType, TensorType, TupleType, Type
from .pass_infra import FunctionPass, PassContext, register_pass

__all__ = ["GLOBAL_PARAMS", "GLOBAL_RESULT", "LowerGlobalViewToLocalView", "to_local_type"]

GLOBAL_PARAMS = "distir.global_params"
GLOBAL_RESULT = "distir.global_result"


def to_local_type(t: Type) -> Type:
    if isinstance(t, DTensorType):
        return local_type(t)
    if isinstance(t, TupleType):
        return TupleType(tuple(to_local_type(f) for f in t.fields))
    return t


def _splits_evenly(t: DTensorType, dim: int) -> bool:
    """Whether every block of ``dim`` is whole (static sizes that divide): no padding to fill."""
    n = t.shape[dim]
    count = 1
    for a in t.placement.mesh_axes_of(dim):
        count = sym.mul(count, t.mesh.shape[a])
    return isinstance(n, int) and isinstance(count, int) and n % count == 0


def _touches_block(call: Call, out: Type) -> bool:
    """Whether an op reads or writes (its result typed ``out``) a block layout (B[...])."""
    types = [a.type for a in call.args] + [out]
    flat = []
    for t in types:
        flat.extend(t.fields if isinstance(t, TupleType) else [t])
    return any(isinstance(t, DTensorType) and t.placement.is_block for t in flat)


_MASKS: dict[tuple, tuple] = {}  # call_key of a call -> the masks its inputs need


def _masks(op, types: list[Type], attrs) -> tuple[tuple[int, int, object, object], ...]:
    """(input, dim, value, valid length) of each input dim whose padding ``op`` reads: cut unevenly
    (or with sizes not known to divide), reduced over (filled with the reduction's identity) or
    named by the rule's pad values. Remembered by the call's key: the layers of a model ask alike."""
    key = call_key(op, types, attrs)
    found = _MASKS.get(key) if key is not None else None
    if found is None:
        found = tuple(_find_masks(op, types, attrs))
        if key is not None:
            if len(_MASKS) >= 4096:
                _MASKS.clear()
            _MASKS[key] = found
    return found


def _find_masks(op, types: list[Type], attrs):
    from ..ir.sharding import op_rule, without_placement

    plain = [without_placement(t) for t in types]
    full = op.full_attrs(attrs)
    out = op.infer(plain, full)
    rule = op_rule(op, plain, full, list(out.fields) if isinstance(out, TupleType) else [out])
    for k, t in enumerate(types):
        if not isinstance(t, DTensorType):
            continue
        for d in range(t.ndim):
            if not t.placement.mesh_axes_of(d) or not rule.inputs[k][d] or _splits_evenly(t, d):
                continue
            factor = rule.inputs[k][d][0]
            if factor in rule.reductions:
                value = identity(rule.reductions[factor], t.dtype)
            elif k in rule.pad_values:
                value = rule.pad_values[k]
            else:
                continue
            yield k, d, value, valid_length_expr(t.mesh, t.placement, d, t.shape[d])


def _shape_expr(shape):
    from ..ir.expr import ShapeExpr

    return ShapeExpr(tuple(shape))


def _has_dtensor(t: Type | None) -> bool:
    if isinstance(t, DTensorType):
        return True
    if isinstance(t, TupleType):
        return any(_has_dtensor(f) for f in t.fields)
    return False


class _Lowerer:
    def __init__(self, func: Function):
        self.func = func
        self.env: dict[Var, Expr] = {}
        self.pending: list[Binding] = []  # bindings written before the one being lowered
        self.names = {p.name for p in func.params} | {b.var.name for b in func.bindings()}

    # -------------------------------------------------------------- helper bindings

    def bind(self, hint: str, call: Call) -> Var:
        """A new binding of ``call`` before the one being lowered (a fresh name from ``hint``)."""
        name, k = hint, 1
        while name in self.names:
            name = f"{hint}_{k}"
            k += 1
        self.names.add(name)
        var = Var(name, call.type, call.span)
        self.pending.append(Binding(var, call, call.span))
        return var

    def masked(self, call: Call, args: tuple, hint: str) -> tuple:
        """``args`` with the padding of unevenly cut dims filled where the op reads it (module docstring)."""
        op = call.op
        if op.sharding is None or op.dist_aware or not any(isinstance(a.type, DTensorType) for a in call.args):
            return args
        if not all(isinstance(a.type, (DTensorType, TensorType)) for a in call.args):
            return args  # tuple inputs (concat) reduce over nothing
        new = list(args)
        for k, d, value, length in _masks(op, [a.type for a in call.args], call.attrs):
            mask = Call(get_op("mask_tail"), (new[k],), {"axis": d, "length": length, "value": value}, call.span)
            new[k] = self.bind(f"{hint}_masked", mask)
        return tuple(new)

    def block_op(self, b: Binding, call: Call, args: tuple) -> Expr:
        """An op on block layouts (docs/blocks.md), in the forms :func:`distir.ir.sharding.block_form`
        allows: on the chunk storage as it is (an axis shifted past the slot axis), or, for a
        reduction over the dim the chunks cut, the storage laid out as one run of that dim per
        device, its padding masked with the reduction's identity, and reduced (a partial)."""
        from ..ir.layout import WORKER_ID, chunk_grid, position_expr
        from ..ir.sharding import block_form, without_placement
        from ..ir.types import TupleType as _Tuple

        op = call.op
        flat = [a.type for a in call.args]
        gout = b.var.type
        if isinstance(gout, _Tuple) or not all(isinstance(t, (DTensorType, TensorType)) for t in flat):
            self.fail(b, f"R.{op.name} on a block layout: only single-result ops on tensors are lowered")
        attrs = op.full_attrs(call.attrs)
        mesh = next(t.mesh for t in flat if isinstance(t, DTensorType))
        form = block_form(op, flat, [without_placement(gout)], attrs, mesh)
        if form is None:
            self.fail(b, f"R.{op.name} does not keep the block layout of its inputs; redistribute them first")
        shift = dict(call.attrs)
        if form.axes:
            shift["axis"] = [a + 1 for a in form.axes]  # past the slot axis of the storage
        if form.kind == "same":
            return Call(op, args, shift, call.span)
        x, t = args[0], flat[0]
        block, d, ndim = t.placement.block, form.dim, t.ndim
        others = [e for e in range(ndim) if e != d]
        if d != 0:
            x = self.bind(f"{b.var.name}_runs", Call(get_op("permute_dims"), (x,), {"axes": [0, d + 1, *(e + 1 for e in others)]},
                                                     call.span))
        slots = local_type(t).shape[0]
        flat_shape = (sym.mul(slots, block[d]), *(block[e] for e in others))
        x = self.bind(f"{b.var.name}_run", Call(get_op("reshape"), (x, _shape_expr(flat_shape)), {}, call.span))
        # this device's run of dim d: chunk j = k*D + p of its slot k starts at element j*b, so its real
        # elements are a prefix: q*b, less what the tensor's last chunk lacks when this device holds it
        D, n, bd = mesh.size, t.shape[d], block[d]
        g = chunk_grid(t.shape, block)[d]
        pos = position_expr(mesh, sym.var(WORKER_ID))
        held = sym.max_(0, sym.ceildiv(sym.sub(g, pos), D))
        owner = sym.floormod(sym.sub(g, 1), D)
        holds_last = sym.sub(1, sym.min_(1, sym.max_(sym.sub(owner, pos), sym.sub(pos, owner))))
        length = sym.sub(sym.mul(held, bd), sym.mul(holds_last, sym.sub(sym.mul(g, bd), n)))
        value = identity(form.reduction, t.dtype)
        x = self.bind(f"{b.var.name}_masked", Call(get_op("mask_tail"), (x,), {"axis": 0, "length": length, "value": value},
                                                   call.span))
        axes = [0] + [1 + others.index(a) for a in form.axes if a != d]
        out = Call(op, (x,), {"axis": axes, "keepdims": False}, call.span)
        if attrs.get("keepdims"):
            out = Call(get_op("reshape"), (self.bind(f"{b.var.name}_reduced", out), _shape_expr(local_type(gout).shape)), {},
                       call.span)
        return out

    def expr(self, e: Expr) -> Expr:
        if isinstance(e, Var):
            return self.env.get(e, e)
        if isinstance(e, Tuple):
            return Tuple(tuple(self.expr(f) for f in e.fields), e.span)
        if isinstance(e, TupleGetItem):
            return TupleGetItem(self.expr(e.tuple_value), e.index, e.span)
        return e

    def fail(self, b: Binding, msg: str):
        raise DiagnosticError(f"lowering '{b.var.name}': {msg}", b.span or b.var.span)

    def binding(self, b: Binding) -> list[Binding]:
        self.pending = []
        out = self._binding(b)
        return [*self.pending, *([] if out is None else [out])]

    def _binding(self, b: Binding) -> Binding | None:
        value = b.value
        gtype = b.var.type
        ltype = to_local_type(gtype)
        if isinstance(value, Call):
            name = value.op.name
            args = tuple(self.expr(a) for a in value.args)
            if name == "dist.redistribute":
                self.fail(b, "R.dist.redistribute is still here; run legalize-redistribute first")
            if name in ("dist.annotate_sharding", "dist.replicate"):  # the same value on every worker
                self.env[b.var] = args[0]
                return None
            kind = value.op.step
            if kind is not None and value.op is kind.global_op:
                axis = value.attrs.get("mesh_axis")
                if axis is not None and sym.equal(value.args[0].type.mesh.shape[axis], 1):
                    self.env[b.var] = args[0]  # one device on the axis: every block stays where it is
                    return None
                new = kind.lower(value, args[0])
            elif _touches_block(value, gtype):
                new = self.block_op(b, value, args)
            else:
                args = self.masked(value, args, b.var.name)
                if value.op.localize is not None and _has_dtensor(gtype):
                    new = value.op.localize(value, args, ltype, self)
                else:
                    new = Call(value.op, tuple(args), value.attrs, value.span)  # attrs are immutable: shared
        else:
            new = self.expr(value)
        try:
            inferred = new.type
        except DistirError as err:
            self.fail(b, f"the per-worker form of this op does not type: {err}")
        if inferred != ltype:
            self.fail(b, f"per-worker type {inferred} differs from the expected {ltype}")
        var = Var(b.var.name, ltype, b.var.span)
        self.env[b.var] = var
        return Binding(var, new, b.span)

    def run(self) -> Function:
        f = self.func
        params = []
        for p in f.params:
            v = Var(p.name, to_local_type(p.type), p.span)
            self.env[p] = v
            params.append(v)
        blocks = []
        for block in f.blocks:
            bindings = [nb for b in block.bindings for nb in self.binding(b)]
            outputs = None
            if block.outputs is not None:
                outputs = tuple(o for o in (self.expr(v) for v in block.outputs) if isinstance(o, Var) and any(o is nb.var for nb in bindings))
            if bindings:
                blocks.append(Block(tuple(bindings), block.is_dataflow, outputs))
        result = self.expr(f.result)
        attrs = dict(f.attrs)
        attrs[GLOBAL_PARAMS] = [p.type for p in f.params]
        attrs[GLOBAL_RESULT] = f.result.type
        ret = to_local_type(f.ret_type) if f.ret_type is not None else None
        return f.replace(params=tuple(params), blocks=tuple(blocks), result=result, ret_type=ret, attrs=attrs)


@register_pass
class LowerGlobalViewToLocalView(FunctionPass):
    """DTensors to per-worker tensors; redistribution steps to collectives and worker-indexed slices."""

    name: ClassVar[str] = "lower-global-view-to-local-view"

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        if GLOBAL_PARAMS in func.attrs:
            return func  # already lowered
        uses_dtensor = any(_has_dtensor(p.type) for p in func.params) or any(
            _has_dtensor(b.var.type) for b in func.bindings()
        )
        if not uses_dtensor:
            return func
        return _Lowerer(func).run()

