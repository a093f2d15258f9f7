"""LowerGlobalViewToLocalView: from DTensors to what each worker runs.

Every DTensor becomes a per-worker tensor whose shape is a formula in the mesh sizes
(``(128 // num_workers, 64)``); compute ops keep their name and run on the local
pieces (a sharded contraction leaves each worker a partial sum, exactly what the
placement says); each redistribution step becomes its kind's local form (see
:mod:`distir.ir.steps`): an ``R.ccl.*`` collective over one mesh axis, or an
``R.strided_slice`` at ``worker_id``'s block (``worker_id`` is the symbolic id of the
running worker, bound by the runtime); a transfer between meshes becomes ``R.ccl.transfer``. Every worker of the device set runs the function; a worker
outside a tensor's mesh holds no value for it (see distir.runtime.spmd). Each function remembers
its global signature in the ``distir.global_params`` / ``distir.global_result``
attributes, so inputs can be sharded and outputs reassembled by any runner.
"""

from __future__ import annotations

from typing import ClassVar

from ..errors import DiagnosticError, DistirError
from ..ir import sym
from ..ir.expr import Binding, Block, Call, Expr, Function, IRModule, Tuple, TupleGetItem, Var
from ..ir.layout import describe_indivisible, indivisible_dims, local_type
from ..ir.types import DTensorType, TupleType, Type
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

    def check_divisible(self, t: Type, name: str, span) -> None:
        """Refuse a layout whose static sizes do not divide (each worker would lose the remainder)."""
        if isinstance(t, TupleType):
            for f in t.fields:
                self.check_divisible(f, name, span)
        elif isinstance(t, DTensorType):
            for dim, size, count in indivisible_dims(t):
                raise DiagnosticError(f"lowering '{name}': {describe_indivisible(t, dim, size, count)}", span)

    def binding(self, b: Binding) -> Binding | None:
        value = b.value
        gtype = b.var.type
        self.check_divisible(gtype, b.var.name, b.span or b.var.span)
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
            else:
                if value.op.localize is not None and _has_dtensor(gtype):
                    new = value.op.localize(value, args, ltype)
                else:
                    new = Call(value.op, tuple(args), dict(value.attrs), value.span)
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
            self.check_divisible(p.type, p.name, p.span)
            v = Var(p.name, to_local_type(p.type), p.span)
            self.env[p] = v
            params.append(v)
        blocks = []
        for block in f.blocks:
            bindings = [nb for b in block.bindings if (nb := self.binding(b)) is not None]
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

