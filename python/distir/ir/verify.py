"""The verifier: is a module well formed? Reports every problem, not just the first.

Checked per function: every var is defined before it is used (parameters, earlier bindings;
vars of a dataflow block with ``R.output(...)`` are visible after the block only when listed);
no var is bound twice; each binding's recorded type equals what its value infers (a call's
op type rule, tuples, tuple items, aliases, constants); DTensor placements fit their mesh
and tensor rank; every mesh a type or attribute uses is one of the module's
``global_infos["mesh"]``; the result matches the declared return type. Each problem names
the function, the binding's var and its source position when known.

Before sharding propagation, a global-view function may read DTensor parameters into
bindings recorded with plain tensor types: such a binding is *unplaced* (propagate-sharding
decides its layout), so only its shape and dtype are checked, by the op's rule on the
arguments' global types with their placements left out.
"""

from __future__ import annotations

from typing import Any

from ..errors import DistirError, Span, VerifyError
from .expr import (
    Binding,
    Call,
    Constant,
    Expr,
    Function,
    IRModule,
    PrimValue,
    ShapeExpr,
    StringImm,
    Tuple,
    TupleGetItem,
    Var,
    leaf_vars,
)
from .mesh import DeviceMesh
from .op import has_dtensor
from .combine import check_partial
from .placement import Placement, PlacementError
from .sharding import infer_unplaced
from .types import DTensorType, ShapeType, TensorType, TupleType, Type

__all__ = ["collect_problems", "verify"]


def verify(mod: IRModule) -> None:
    """Raise :class:`~distir.errors.VerifyError` listing every problem in ``mod``."""
    problems = collect_problems(mod)
    if problems:
        raise VerifyError(problems)


def collect_problems(mod: IRModule) -> list[str]:
    """Every problem found in ``mod``, as messages (empty when the module is well formed)."""
    if not isinstance(mod, IRModule):
        return [f"expected an IRModule, got {type(mod).__name__}"]
    problems: list[str] = []
    meshes = _module_meshes(mod, problems)
    for name, func in mod.functions.items():
        _FunctionVerifier(name, func, meshes, problems).run()
    return problems


def _module_meshes(mod: IRModule, problems: list[str]) -> tuple[DeviceMesh, ...]:
    meshes = tuple(mod.global_infos.get("mesh", ()))
    for i, m in enumerate(meshes):
        if not isinstance(m, DeviceMesh):
            problems.append(f"module global_infos['mesh'][{i}] is {type(m).__name__}, not a device mesh")
    return tuple(m for m in meshes if isinstance(m, DeviceMesh))


def _where(span: Span | None) -> str:
    return f" at {span}" if span is not None else ""


def _types_match(recorded: Type, inferred: Type) -> bool:
    """Equal types; a shape annotated by rank only (``R.Shape(ndim=2)``) accepts known values."""
    if isinstance(recorded, ShapeType) and isinstance(inferred, ShapeType) and recorded.values is None:
        return recorded.ndim == inferred.ndim
    if isinstance(recorded, TupleType) and isinstance(inferred, TupleType):
        return len(recorded.fields) == len(inferred.fields) and all(
            _types_match(a, b) for a, b in zip(recorded.fields, inferred.fields)
        )
    return recorded == inferred


def _result_matches(declared: Type, actual: Type) -> bool:
    """The return value against the declared return type. A plain tensor where a DTensor of the
    same shape and dtype is declared is a layout request: propagation lays the result out so."""
    if isinstance(declared, TupleType) and isinstance(actual, TupleType):
        return len(declared.fields) == len(actual.fields) and all(
            _result_matches(a, b) for a, b in zip(declared.fields, actual.fields)
        )
    if isinstance(declared, DTensorType) and isinstance(actual, TensorType):
        return TensorType(declared.shape, declared.dtype) == actual
    return _types_match(declared, actual)


def _has_tensor_only(t: Type) -> bool:
    """A plain tensor, or a tuple whose tensors are all plain (and at least one)."""
    if isinstance(t, TensorType):
        return True
    return isinstance(t, TupleType) and any(_has_tensor_only(f) for f in t.fields) and not has_dtensor(t)


def _is_unplaced(recorded: Type, value: Expr) -> bool:
    """A plain-typed binding of a compute op reading DTensors: its layout is propagation's to decide."""
    return (
        isinstance(value, Call)
        and not value.op.dist_aware
        and _has_tensor_only(recorded)
        and any(has_dtensor(a.type) for a in value.args)
    )


class _FunctionVerifier:
    def __init__(self, name: str, func: Function, meshes: tuple[DeviceMesh, ...], problems: list[str]) -> None:
        self.name = name
        self.func = func
        self.meshes = meshes
        self.problems = problems
        self.defined: set[Var] = set()
        self.hidden: set[Var] = set()  # dataflow-local vars no longer visible
        self.later: set[Var] = {b.var for b in func.bindings()}  # bound somewhere in the function

    # -- reporting ---------------------------------------------------------------------
    def report(self, what: str, message: str, span: Span | None = None) -> None:
        self.problems.append(f"@{self.name}: {what}{_where(span)}: {message}")

    # -- driver ------------------------------------------------------------------------
    def run(self) -> None:
        func = self.func
        if not isinstance(func, Function):
            self.problems.append(f"@{self.name}: is {type(func).__name__}, not a function")
            return
        if func.name != self.name:
            self.report("function", f"is registered as '{self.name}' but named '{func.name}'", func.span)
        for p in func.params:
            what = f"parameter '{p.name}'"
            if p in self.defined:
                self.report(what, "appears twice in the parameter list", p.span)
            self.defined.add(p)
            self.check_type(p.type, what, p.span)
        for block in func.blocks:
            block_vars: list[Var] = []
            for b in block.bindings:
                self.binding(b)
                block_vars.append(b.var)
            if block.outputs is not None:
                local = set(block_vars)
                for o in block.outputs:
                    if o not in local:
                        self.report(
                            f"block output '{o.name}'", "is listed in R.output but not bound in this block", o.span
                        )
                if block.is_dataflow:
                    self.hidden |= local - set(block.outputs)
        ret = func.result
        self.uses(ret, "return value", func.span)
        if func.ret_type is not None:
            self.check_type(func.ret_type, "return type", func.span)
            actual = self.type_of(ret, "return value", func.span)
            if actual is not None and not _result_matches(func.ret_type, actual):
                self.report("return value", f"has type {actual} but the function declares {func.ret_type}", func.span)

    # -- one binding ---------------------------------------------------------------------
    def binding(self, b: Binding) -> None:
        var = b.var
        span = b.span or var.span
        what = f"binding '{var.name}'"
        self.uses(b.value, what, span)
        if var in self.defined:
            self.report(what, f"binds '{var.name}' a second time (each var is bound once)", span)
        self.check_type(var.type, what, span)
        if isinstance(b.value, Call):
            self.check_call_attrs(b.value, what, span)
        if _is_unplaced(var.type, b.value):
            inferred = self.type_of_unplaced(b.value, what, span)
        else:
            inferred = self.type_of(b.value, what, span)
        if inferred is not None and not _types_match(var.type, inferred):
            self.report(what, f"recorded type {var.type}, but {self.describe(b.value)} {inferred}", span)
        self.defined.add(var)

    def describe(self, value: Expr) -> str:
        if isinstance(value, Call):
            return f"R.{value.op.name} infers"
        if isinstance(value, Var):
            return f"'{value.name}' has type"
        return f"the {type(value).__name__} value has type"

    def uses(self, value: Expr, what: str, span: Span | None) -> None:
        for v in leaf_vars(value):
            if v in self.hidden:
                self.report(
                    what,
                    f"uses '{v.name}', which is local to an earlier dataflow block; list it in that block's R.output",
                    span,
                )
            elif v not in self.defined:
                if v in self.later:
                    self.report(what, f"uses '{v.name}' before it is defined", span)
                else:
                    self.report(what, f"uses '{v.name}', which is not defined in this function", span)

    def type_of(self, value: Expr, what: str, span: Span | None) -> Type | None:
        """The type ``value`` infers to, or None after reporting why it has none."""
        try:
            if isinstance(value, (Var, Constant, PrimValue, StringImm, ShapeExpr, Tuple, TupleGetItem, Call)):
                return value.type
            self.report(what, f"has a value of unexpected kind {type(value).__name__}", span)
        except DistirError as err:
            self.report(what, str(err), span)
        except Exception as err:  # noqa: BLE001 -- a type rule that crashes is a bug there, but still a finding here
            op = f"R.{value.op.name}: " if isinstance(value, Call) else ""
            self.report(what, f"{op}type inference failed ({type(err).__name__}: {err})", span)
        return None

    def type_of_unplaced(self, call: Call, what: str, span: Span | None) -> Type | None:
        """What ``call`` infers to on its arguments' global types, placements left out."""
        try:
            return infer_unplaced(call.op, [a.type for a in call.args], call.attrs)
        except DistirError as err:
            self.report(what, str(err), span)
        except Exception as err:  # noqa: BLE001 -- as in type_of
            self.report(what, f"R.{call.op.name}: type inference failed ({type(err).__name__}: {err})", span)
        return None

    def check_call_attrs(self, call: Call, what: str, span: Span | None) -> None:
        op = call.op
        known = {p.name for p in op.attr_params}
        for key, val in call.attrs.items():
            if key not in known:
                self.report(what, f"R.{op.name} has no attribute '{key}' (it has: {', '.join(sorted(known)) or 'none'})", span)
                continue
            if isinstance(val, DeviceMesh):
                self.check_mesh(val, f"{what}, attribute '{key}'", span)
        n_args = len(op.arg_params)
        if len(call.args) != n_args:
            self.report(what, f"R.{op.name} takes {n_args} argument(s), got {len(call.args)}", span)

    # -- types ---------------------------------------------------------------------------
    def check_type(self, t: Any, what: str, span: Span | None) -> None:
        if isinstance(t, DTensorType):
            self.check_mesh(t.mesh, what, span)
            if not isinstance(t.placement, Placement):
                self.report(what, f"placement {t.placement!r} is not a Placement", span)
            elif isinstance(t.mesh, DeviceMesh):
                try:
                    t.placement.validate(t.mesh.ndim, t.ndim, shape=t.shape)
                    check_partial(t.placement, t.dtype, "its layout")
                except PlacementError as err:
                    self.report(what, str(err), span)
        elif isinstance(t, TupleType):
            for i, f in enumerate(t.fields):
                self.check_type(f, f"{what} (tuple field {i})", span)
        elif not isinstance(t, Type):
            self.report(what, f"has no type (got {t!r})", span)

    def check_mesh(self, mesh: Any, what: str, span: Span | None) -> bool:
        if not isinstance(mesh, DeviceMesh):
            self.report(what, f"expected a device mesh, got {mesh!r}", span)
            return False
        if mesh not in self.meshes:
            known = ", ".join(f"mesh[{i}] {m.shape_str()}" for i, m in enumerate(self.meshes)) or "none"
            self.report(
                what,
                f"uses a device mesh of shape {mesh.shape_str()} that is not in the module's global_infos "
                f"(declared: {known}); add it to I.module_global_infos",
                span,
            )
            return False
        return True
