"""Specialize: bind symbolic sizes (``num_workers=4``) late, after the whole pipeline ran.

Substitutes the values everywhere (types, attributes, shapes, meshes, the recorded
global signature) and simplifies. Before that it checks that every sharded dim
divides by the mesh axes it is sharded over, and names the tensor, the dim, the mesh
axis and both sizes when one does not (a silently truncated ``130 // 4`` would compute
garbage).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import SpecializeError
from ..ir import sym
from ..ir.expr import (
    Binding,
    Block,
    Call,
    Expr,
    Function,
    IRModule,
    PrimValue,
    ShapeExpr,
    Tuple,
    TupleGetItem,
    Var,
)
from ..ir.mesh import DeviceMesh, MeshError
from ..ir.types import DTensorType, TensorType, TupleType, Type
from .pass_infra import ModulePass, PassContext, register_pass

__all__ = ["Specialize", "specialize"]


def _sub_value(v: Any, values: Mapping[str, int]) -> Any:
    if isinstance(v, bool) or v is None or isinstance(v, (str, float)):
        return v
    if isinstance(v, int) or sym.is_symbolic(v):
        return sym.substitute(v, values)
    if isinstance(v, DeviceMesh):
        return v.substitute(values)
    if isinstance(v, Type):
        return v.substitute(values)
    if isinstance(v, (list, tuple)):
        return type(v)(_sub_value(x, values) for x in v)
    if isinstance(v, dict):
        return {k: _sub_value(x, values) for k, x in v.items()}
    return v


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, min(n, 128) + 1) if n % d == 0]


class _Checker:
    """Finds shapes that do not divide under the given values."""

    def __init__(self, mod: IRModule, values: Mapping[str, int]):
        self.mod = mod
        self.values = values
        self.binding = ", ".join(f"{k}={v}" for k, v in values.items())

    def _eval(self, d) -> int | None:
        try:
            return sym.evaluate(sym.substitute(d, self.values), {})
        except sym.SymbolicError:
            return None

    def _mesh_name(self, mesh: DeviceMesh) -> str:
        for i, m in enumerate(self.mod.meshes()):
            if m == mesh:
                return f"mesh[{i}]"
        return f"mesh {mesh.shape_str()}"

    def _axis_desc(self, mesh: DeviceMesh, axes) -> str:
        parts = []
        for a in axes:
            size = mesh.shape[a]
            label = f" ({sym.to_str(size)})" if sym.is_symbolic(size) else ""
            parts.append(f"mesh axis {a}{label}")
        return " and ".join(parts) + f" of {self._mesh_name(mesh)}"

    def fail(self, what: str, dim: int, extent: int, count: int, axis_desc: str, axes=()) -> None:
        good = [d for d in _divisors(extent)][-4:]
        pad = -(-extent // count) * count
        repl = ", ".join(f"R on mesh axis {a}" for a in axes) if axes else "R on that mesh axis"
        raise SpecializeError(
            f"specialize {self.binding}: {what} dim {dim} has size {extent}, which does not divide evenly by "
            f"{count}, the size of {axis_desc} that shards it.\n"
            f"  fix: use a device count that divides {extent} (e.g. {', '.join(map(str, good))}), "
            f"pad dim {dim} to a multiple of {count} (e.g. {pad}), or replicate dim {dim} ({repl})"
        )

    def dtensor(self, t: Type, what: str) -> None:
        if isinstance(t, TupleType):
            for i, f in enumerate(t.fields):
                self.dtensor(f, f"{what}[{i}]")
            return
        if not isinstance(t, DTensorType):
            return
        for d, extent in enumerate(t.shape):
            axes = t.placement.mesh_axes_of(d)
            if not axes:
                continue
            e = self._eval(extent)
            count = 1
            for a in axes:
                c = self._eval(t.mesh.shape[a])
                if c is None:
                    count = None
                    break
                count *= c
            if e is None or count is None or count == 0:
                continue
            if e % count:
                self.fail(what, d, e, count, self._axis_desc(t.mesh, axes), axes)

    def local(self, t: Type, what: str) -> None:
        if isinstance(t, TupleType):
            for i, f in enumerate(t.fields):
                self.local(f, f"{what}[{i}]")
            return
        if not isinstance(t, TensorType):
            return
        for d, extent in enumerate(t.shape):
            for a, b in sym.floordivs(extent):
                ea, eb = self._eval(a), self._eval(b)
                if ea is None or eb is None or eb == 0 or ea % eb == 0:
                    continue
                self.fail(what, d, ea, eb, self._describe_divisor(b))

    def _describe_divisor(self, b) -> str:
        for mi, mesh in enumerate(self.mod.meshes()):
            for a, size in enumerate(mesh.shape):
                if sym.equal(size, b):
                    label = f" ({sym.to_str(size)})" if sym.is_symbolic(size) else ""
                    return f"mesh axis {a}{label} of mesh[{mi}]"
        return f"the mesh axes ({sym.to_str(b)})"


class _Substituter:
    def __init__(self, values: Mapping[str, int]):
        self.values = values
        self.vars: dict[Var, Var] = {}

    def var(self, v: Var) -> Var:
        nv = Var(v.name, v.type.substitute(self.values), v.span)
        self.vars[v] = nv
        return nv

    def expr(self, e: Expr) -> Expr:
        if isinstance(e, Var):
            return self.vars.get(e, e)
        if isinstance(e, Call):
            attrs = {k: _sub_value(v, self.values) for k, v in e.attrs.items()}
            return Call(e.op, tuple(self.expr(a) for a in e.args), attrs, e.span)
        if isinstance(e, Tuple):
            return Tuple(tuple(self.expr(f) for f in e.fields), e.span)
        if isinstance(e, TupleGetItem):
            return TupleGetItem(self.expr(e.tuple_value), e.index, e.span)
        if isinstance(e, ShapeExpr):
            return ShapeExpr(tuple(sym.substitute(v, self.values) for v in e.values), e.span)
        if isinstance(e, PrimValue):
            return PrimValue(sym.substitute(e.value, self.values), e.dtype, e.span)
        return e

    def function(self, f: Function) -> Function:
        params = tuple(self.var(p) for p in f.params)
        blocks = []
        for block in f.blocks:
            bindings = []
            for b in block.bindings:
                value = self.expr(b.value)
                bindings.append(Binding(self.var(b.var), value, b.span))
            outputs = None if block.outputs is None else tuple(self.vars.get(o, o) for o in block.outputs)
            blocks.append(Block(tuple(bindings), block.is_dataflow, outputs))
        ret = f.ret_type.substitute(self.values) if f.ret_type is not None else None
        attrs = {k: _sub_value(v, self.values) for k, v in f.attrs.items()}
        return f.replace(params=params, blocks=tuple(blocks), result=self.expr(f.result), ret_type=ret, attrs=attrs)


def specialize(mod: IRModule, values: Mapping[str, int]) -> IRModule:
    """``mod`` with the symbolic variables in ``values`` bound; see the module docstring."""
    values = dict(values)
    for k, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise SpecializeError(f"specialize: {k} must be an integer, got {v!r}")
        if v < 1:
            raise SpecializeError(f"specialize: {k}={v}; sizes must be at least 1")
    check = _Checker(mod, values)
    from .lower_to_local import GLOBAL_PARAMS, GLOBAL_RESULT

    for f in mod.functions.values():
        gparams = f.attrs.get(GLOBAL_PARAMS)
        for i, p in enumerate(f.params):
            what = f"tensor '{p.name}' (parameter {i} of @{f.name})"
            check.dtensor(p.type, what)
            if gparams is not None and i < len(gparams):
                check.dtensor(gparams[i], what)
            check.local(p.type, what)
        for b in f.bindings():
            what = f"tensor '{b.var.name}' (in @{f.name})"
            check.dtensor(b.var.type, what)
            check.local(b.var.type, what)
        if GLOBAL_RESULT in f.attrs:
            check.dtensor(f.attrs[GLOBAL_RESULT], f"the result of @{f.name}")
    try:
        infos = {k: [m.substitute(values) if isinstance(m, DeviceMesh) else m for m in v] for k, v in mod.global_infos.items()}
    except MeshError as err:
        raise SpecializeError(f"specialize {check.binding}: {err}") from None
    funcs = {name: _Substituter(values).function(f) for name, f in mod.functions.items()}
    attrs = {k: _sub_value(v, values) for k, v in mod.attrs.items()}
    return mod.replace(functions=funcs, global_infos=infos, attrs=attrs)


@register_pass
@dataclass(frozen=True)
class Specialize(ModulePass):
    """Bind symbolic sizes to integers: ``Specialize({"num_workers": 4})``."""

    values: Mapping[str, int] = field(default_factory=dict)
    name: ClassVar[str] = "specialize"

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        if not self.values:
            return mod
        return specialize(mod, self.values)
