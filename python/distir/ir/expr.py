"""IR nodes: immutable expressions, bindings, functions and modules.

The IR is Relax-like and in A-normal form: a function body is a list of blocks
(dataflow or not) of bindings ``var = value``; call arguments are leaves (vars,
constants, prim values, shapes, tuples of those). A Var carries its recorded type;
the verifier checks it against what the op infers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MissingFunctionError, Span
from . import sym
from .mesh import DeviceMesh
from .sym import Dim
from .types import PrimType, ShapeType, TensorType, TupleType, Type

if TYPE_CHECKING:  # pragma: no cover
    from .op import OpDef


class Expr:
    """Base of all expressions. ``type`` is the expression's type."""

    span: Span | None

    @property
    def type(self) -> Type:  # pragma: no cover - overridden
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class Var(Expr):
    """A named value. Identity matters: two Vars with one name are different values."""

    name: str
    var_type: Type
    span: Span | None = field(default=None, compare=False, repr=False)

    @property
    def type(self) -> Type:
        return self.var_type

    def __repr__(self) -> str:
        return f"Var({self.name})"

    def with_type(self, t: Type) -> Var:
        return Var(self.name, t, self.span)


@dataclass(frozen=True, eq=False)
class Constant(Expr):
    data: np.ndarray
    span: Span | None = field(default=None, compare=False, repr=False)

    @property
    def type(self) -> Type:
        return TensorType(tuple(int(d) for d in self.data.shape), str(self.data.dtype))


@dataclass(frozen=True, eq=False)
class PrimValue(Expr):
    value: Dim
    dtype: str = "int64"
    span: Span | None = field(default=None, compare=False, repr=False)

    @property
    def type(self) -> Type:
        return PrimType(self.dtype)


@dataclass(frozen=True, eq=False)
class StringImm(Expr):
    value: str
    span: Span | None = field(default=None, compare=False, repr=False)

    @property
    def type(self) -> Type:
        return PrimType("str")


@dataclass(frozen=True, eq=False)
class ShapeExpr(Expr):
    values: tuple[Dim, ...]
    span: Span | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(sym.normalize(v) for v in self.values))

    @property
    def type(self) -> Type:
        return ShapeType(len(self.values), self.values)


@dataclass(frozen=True, eq=False)
class Tuple(Expr):
    fields: tuple[Expr, ...]
    span: Span | None = field(default=None, compare=False, repr=False)

    @property
    def type(self) -> Type:
        return TupleType(tuple(f.type for f in self.fields))


@dataclass(frozen=True, eq=False)
class TupleGetItem(Expr):
    tuple_value: Expr
    index: int
    span: Span | None = field(default=None, compare=False, repr=False)

    @property
    def type(self) -> Type:
        t = self.tuple_value.type
        if not isinstance(t, TupleType) or not (-len(t.fields) <= self.index < len(t.fields)):
            from ..errors import TypeInferenceError

            raise TypeInferenceError(f"index {self.index} is out of range for a value of type {t}")
        return t.fields[self.index]


@dataclass(frozen=True, eq=False)
class Call(Expr):
    """``op(args, **attrs)``. Attrs are immutable; ``type`` runs the op's type inference."""

    op: OpDef
    args: tuple[Expr, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    span: Span | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        if not isinstance(self.attrs, MappingProxyType):
            object.__setattr__(self, "attrs", MappingProxyType(dict(self.attrs)))

    @property
    def type(self) -> Type:
        t = self.__dict__.get("_type")
        if t is None:  # the IR is immutable: a call's type is inferred once
            t = self.op.infer_type(self.args, self.attrs)
            object.__setattr__(self, "_type", t)
        return t


@dataclass(frozen=True, eq=False)
class Binding:
    var: Var
    value: Expr
    span: Span | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, eq=False)
class Block:
    """A list of bindings. A dataflow block is pure; its vars are local unless output."""

    bindings: tuple[Binding, ...]
    is_dataflow: bool = True
    outputs: tuple[Var, ...] | None = None  # vars of a dataflow block used after it (R.output)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bindings", tuple(self.bindings))
        if self.outputs is not None:
            object.__setattr__(self, "outputs", tuple(self.outputs))


@dataclass(frozen=True, eq=False)
class Function(Expr):
    name: str
    params: tuple[Var, ...]
    blocks: tuple[Block, ...]
    result: Expr
    ret_type: Type | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict)
    span: Span | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "blocks", tuple(self.blocks))
        if not isinstance(self.attrs, MappingProxyType):
            object.__setattr__(self, "attrs", MappingProxyType(dict(self.attrs)))

    @property
    def type(self) -> Type:
        return self.result.type

    def bindings(self) -> Iterator[Binding]:
        for block in self.blocks:
            yield from block.bindings

    def script(self, mod: IRModule | None = None) -> str:
        return _printer("function")(self, mod)

    def replace(self, **changes) -> Function:
        values = {
            "name": self.name,
            "params": self.params,
            "blocks": self.blocks,
            "result": self.result,
            "ret_type": self.ret_type,
            "attrs": self.attrs,
            "span": self.span,
        }
        values.update(changes)
        return Function(**values)


@dataclass(frozen=True, eq=False)
class IRModule:
    """Functions by name, global infos (``{"mesh": [DeviceMesh, ...]}``) and module attributes."""

    functions: Mapping[str, Function]
    global_infos: Mapping[str, tuple[DeviceMesh, ...]] = field(default_factory=dict)
    attrs: Mapping[str, Any] = field(default_factory=dict)
    source_name: str | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "functions", MappingProxyType(dict(self.functions)))
        object.__setattr__(
            self, "global_infos", MappingProxyType({k: tuple(v) for k, v in dict(self.global_infos).items()})
        )
        if not isinstance(self.attrs, MappingProxyType):
            object.__setattr__(self, "attrs", MappingProxyType(dict(self.attrs)))

    def __getitem__(self, name: str) -> Function:
        try:
            return self.functions[name]
        except KeyError:
            raise MissingFunctionError(
                f"the module has no function '{name}' (it has: {', '.join(self.functions) or 'none'})"
            ) from None

    def __contains__(self, name: str) -> bool:
        return name in self.functions

    def meshes(self) -> tuple[DeviceMesh, ...]:
        return tuple(self.global_infos.get("mesh", ()))

    def replace(self, **changes) -> IRModule:
        values = {
            "functions": self.functions, "global_infos": self.global_infos, "attrs": self.attrs, "source_name": self.source_name
        }
        values.update(changes)
        return IRModule(**values)

    def with_function(self, func: Function) -> IRModule:
        funcs = dict(self.functions)
        funcs[func.name] = func
        return self.replace(functions=funcs)

    def script(self, **kwargs) -> str:
        return _printer("module")(self, **kwargs)

    def __str__(self) -> str:
        return self.script()


def leaf_vars(expr: Expr) -> list[Var]:
    """Vars an expression reads directly (through tuples, not into calls' ops), in order. (A list
    filled by one walk: every pass asks this of every binding, and nested generators cost more.)"""
    out: list[Var] = []
    _add_leaf_vars(expr, out)
    return out


def _add_leaf_vars(expr: Expr, out: list[Var]) -> None:
    if isinstance(expr, Var):
        out.append(expr)
    elif isinstance(expr, Call):
        for a in expr.args:
            if isinstance(a, Var):
                out.append(a)
            else:
                _add_leaf_vars(a, out)
    elif isinstance(expr, Tuple):
        for f in expr.fields:
            _add_leaf_vars(f, out)
    elif isinstance(expr, TupleGetItem):
        _add_leaf_vars(expr.tuple_value, out)


# The text printer lives in distir.script, a layer above; it registers itself here on import
# (as TVM's printer registers with its IR), so that ``mod.script()`` and ``str(mod)`` work.
_PRINTERS: dict[str, Callable] = {}


def set_printer(kind: str, printer: Callable) -> None:
    """Register the printer of ``kind`` ("module" or "function")."""
    _PRINTERS[kind] = printer


# The package that registers the printers when imported. The IR names it only as text: it is
# loaded on the first print (as a plugin), so the IR layer does not import the layers above it.
PRINTER_PACKAGE = "distir.script"


def _printer(kind: str) -> Callable:
    printer = _PRINTERS.get(kind)
    if printer is None:
        import importlib

        importlib.import_module(PRINTER_PACKAGE)  # registers the printers (set_printer)
        printer = _PRINTERS.get(kind)
    if printer is None:
        from ..errors import DistirError

        raise DistirError(f"printing IR needs the text format, but importing {PRINTER_PACKAGE} registered no printer")
    return printer
