"""The printer: IRModule -> TVMScript-style text that the parser reads back unchanged.

The output follows TVM's printer: symbolic dims are quoted in signatures (``"n"``),
bare inside function bodies (``n``, declared by ``n = T.int64()`` lines), every binding
carries its recorded type, calls print all attributes as keywords. Text is built as a
list of lines joined once; per-print caches keyed by object id keep types and dims from
being formatted twice.
"""

from __future__ import annotations

import keyword
import math
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..collector import collector_paused
from ..errors import DistirError
from ..ir import sym
from ..ir.expr import (
    Block,
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
from ..ir.mesh import DeviceMesh, Range
from ..ir.types import DTensorType, PrimType, ShapeType, TensorType, TupleType, Type
from .literals import MeshTable, attr_text, dim_text, float_text, generic_text, quote, shape_text

__all__ = ["print_function", "print_module", "print_type"]

HEADER = (
    "# from distir.script import ir as I\n"
    "# from distir.script import relax as R\n"
    "# from distir.script import tirx as T\n"
)
_RESERVED = frozenset(keyword.kwlist) | {"R", "I", "T"}
_NOT_IDENT = re.compile(r"\W")
# decorator keywords of @R.function kept as function attributes
DECORATOR_ATTRS = ("private", "pure")


def print_module(mod: IRModule, *, header: bool = True) -> str:
    """The module as text; ``header`` adds the commented import lines."""
    with collector_paused():  # many short-lived strings; the cyclic collector only slows this down
        return _Printer(MeshTable(mod.global_infos)).module(mod, header)


def print_function(func: Function, mod: IRModule | None = None) -> str:
    """One function as ``@R.function def ...``; meshes resolve against ``mod`` (or the function's own)."""
    if mod is not None:
        table = MeshTable(mod.global_infos)
    else:
        table = MeshTable({"mesh": _meshes_of(func)})
    lines: list[str] = []
    _Printer(table).function(func, lines, "")
    return "\n".join(lines) + "\n"


def print_type(t: Type, mod: IRModule | None = None, bare: bool = False) -> str:
    """One type as ``R.Tensor((128, "n"), dtype="float32")``."""
    table = MeshTable(mod.global_infos if mod is not None else {})
    return _Printer(table).type_text(t, bare)


def _meshes_of(func: Function) -> list[DeviceMesh]:
    out: list[DeviceMesh] = []

    def visit(t: Type | None) -> None:
        if isinstance(t, DTensorType) and t.mesh not in out:
            out.append(t.mesh)
        elif isinstance(t, TupleType):
            for f in t.fields:
                visit(f)

    for p in func.params:
        visit(p.var_type)
    for b in func.bindings():
        visit(b.var.var_type)
    visit(func.ret_type)
    return out


class _Printer:
    def __init__(self, meshes: MeshTable) -> None:
        self.meshes = meshes
        self._types: dict[tuple[int, bool], str] = {}
        self._keep: list[Any] = []  # objects whose id is a cache key stay alive while printing

    # ------------------------------------------------------------ module

    def module(self, mod: IRModule, header: bool) -> str:
        lines: list[str] = []
        if header:
            lines.append(HEADER)
        lines.append("@I.ir_module")
        lines.append("class Module:")
        ind = "    "
        if mod.attrs:
            lines.append(f"{ind}I.module_attrs({self.attrs_text(mod.attrs)})")
        if mod.global_infos:
            parts = []
            for key, meshes in mod.global_infos.items():
                parts.append(f"{quote(key)}: [" + ", ".join([self.mesh_text(m) for m in meshes]) + "]")
            lines.append(f"{ind}I.module_global_infos({{{', '.join(parts)}}})")
        for func in mod.functions.values():
            if len(lines) > 2 + header:
                lines.append("")
            self.function(func, lines, ind)
        if len(lines) == 2 + header:
            lines.append(f"{ind}pass")
        return "\n".join(lines) + "\n"

    def mesh_text(self, m: DeviceMesh) -> str:
        ids = m.device_ids
        if isinstance(ids, Range):
            ids_text = f"I.Range({dim_text(ids.start, False)}, {dim_text(ids.stop, False)})"
        else:
            ids_text = "[" + ", ".join(str(i) for i in ids) + "]"
        extra = ""
        if m.axis_names is not None:
            extra = ", axis_names=" + shape_text([quote(a) for a in m.axis_names], True)
        return f"R.device_mesh({shape_text(m.shape, False)}, {ids_text}{extra})"

    def attrs_text(self, attrs) -> str:
        return generic_text(dict(attrs), lambda v: self.type_text(v, False))

    # ------------------------------------------------------------ types

    def type_text(self, t: Any, bare: bool) -> str:
        key = (id(t), bare)
        hit = self._types.get(key)
        if hit is not None:
            return hit
        if isinstance(t, TensorType):
            s = f"R.Tensor({shape_text(t.shape, bare)}, dtype={quote(t.dtype)})"
        elif isinstance(t, DTensorType):
            s = (
                f"R.DTensor({shape_text(t.shape, bare)}, {quote(t.dtype)}, "
                f"{quote(self.meshes.ref(t.mesh))}, {quote(str(t.placement))})"
            )
        elif isinstance(t, TupleType):
            s = "R.Tuple(" + ", ".join([self.type_text(f, bare) for f in t.fields]) + ")"
        elif isinstance(t, ShapeType):
            if t.values is None:
                s = f"R.Shape(ndim={t.ndim})"
            else:
                s = f"R.Shape({shape_text(t.values, bare, '[]')})"
        elif isinstance(t, PrimType):
            s = f"R.Prim({quote(t.dtype)})"
        else:
            raise DistirError(f"cannot print {t!r} as a type or attribute value")
        self._types[key] = s
        self._keep.append(t)
        return s

    # ------------------------------------------------------------ functions

    def function(self, func: Function, lines: list[str], ind: str) -> None:
        if not func.name.isidentifier() or keyword.iskeyword(func.name):
            raise DistirError(f"function name '{func.name}' is not a valid Python identifier, so it cannot be printed")
        symvars = self.function_symvars(func)
        names = _Namer(symvars)
        params = []
        for p in func.params:
            params.append(f"{names.define(p)}: {self.type_text(p.var_type, False)}")
        in_deco = [k for k in DECORATOR_ATTRS if isinstance(func.attrs.get(k), bool)]
        deco = [f"{k}={func.attrs[k]!r}" for k in in_deco]
        lines.append(f"{ind}@R.function" + (f"({', '.join(deco)})" if deco else ""))
        ret = "" if func.ret_type is None else f" -> {self.type_text(func.ret_type, False)}"
        lines.append(f"{ind}def {func.name}({', '.join(params)}){ret}:")
        body = ind + "    "
        for v in sorted(symvars):
            lines.append(f"{body}{v} = T.int64()")
        attrs = {k: v for k, v in func.attrs.items() if k not in in_deco}
        if attrs:
            lines.append(f"{body}R.func_attr({self.attrs_text(attrs)})")
        outputs = _block_outputs(func)
        for block, outs in zip(func.blocks, outputs):
            if block.is_dataflow:
                lines.append(f"{body}with R.dataflow():")
                self.bindings(block, lines, body + "    ", names)
                lines.append(f"{body}    R.output({', '.join([names.use(v) for v in outs])})")
            else:
                self.bindings(block, lines, body, names)
        lines.append(f"{body}return {self.expr(func.result, names)}")

    def bindings(self, block: Block, lines: list[str], ind: str, names: _Namer) -> None:
        type_text = self.type_text
        expr = self.expr
        for b in block.bindings:
            value = expr(b.value, names)
            var = b.var
            lines.append(f"{ind}{names.define(var)}: {type_text(var.var_type, True)} = {value}")

    def expr(self, e: Expr, names: _Namer) -> str:
        if isinstance(e, Var):
            return names.use(e)
        if isinstance(e, Call):
            return self.call(e, names)
        if isinstance(e, Tuple):
            inner = ", ".join([self.expr(f, names) for f in e.fields])
            return "(" + inner + ("," if len(e.fields) == 1 else "") + ")"
        if isinstance(e, TupleGetItem):
            return f"{self.expr(e.tuple_value, names)}[{e.index}]"
        if isinstance(e, Constant):
            return const_text(e.data)
        if isinstance(e, ShapeExpr):
            return f"R.shape({shape_text(e.values, True, '[]')})"
        if isinstance(e, PrimValue):
            if e.dtype == "int64":
                return f"R.prim_value({dim_text(e.value, True)})"
            return f"R.prim_value(T.{e.dtype}({dim_text(e.value, True)}))"
        if isinstance(e, StringImm):
            return f"R.str({quote(e.value)})"
        raise DistirError(f"cannot print expression {e!r}")

    def call(self, c: Call, names: _Namer) -> str:
        op = c.op
        parts = [self.expr(a, names) for a in c.args]
        try:
            attrs = op.full_attrs(c.attrs)
        except DistirError as err:
            raise DistirError(f"cannot print R.{op.name}: {err}") from None
        if attrs:
            meshes = self.meshes
            for p in op.attr_params:
                parts.append(f"{p.name}={attr_text(p, attrs[p.name], meshes)}")
        return f"R.{op.name}({', '.join(parts)})"

    # ------------------------------------------------------------ symbolic variables

    def function_symvars(self, func: Function) -> set[str]:
        """Names of every symbolic variable the function mentions (types, attrs, shapes, meshes)."""
        out: set[str] = set()
        seen: set[int] = set()
        visit = _TypeVars(out, seen)
        for p in func.params:
            visit(p.var_type)
        visit(func.ret_type)
        for b in func.bindings():
            visit(b.var.var_type)
            _expr_vars(b.value, out)
        _expr_vars(func.result, out)
        _attr_vars(func.attrs, visit)
        return out


class _TypeVars:
    """Collects symbolic variable names of types, once per type object."""

    def __init__(self, out: set[str], seen: set[int]) -> None:
        self.out = out
        self.seen = seen
        self.meshes: set[int] = set()

    def __call__(self, t: Type | None) -> None:
        if t is None or id(t) in self.seen:
            return
        self.seen.add(id(t))
        if isinstance(t, (TensorType, DTensorType)):
            for d in t.shape:
                if not isinstance(d, int):
                    self.out |= sym.free_vars(d)
            if isinstance(t, DTensorType) and id(t.mesh) not in self.meshes:
                self.meshes.add(id(t.mesh))
                _mesh_vars(t.mesh, self.out)
        elif isinstance(t, TupleType):
            for f in t.fields:
                self(f)
        elif isinstance(t, ShapeType) and t.values is not None:
            for d in t.values:
                if not isinstance(d, int):
                    self.out |= sym.free_vars(d)


def _mesh_vars(m: DeviceMesh, out: set[str]) -> None:
    dims = list(m.shape)
    if isinstance(m.device_ids, Range):
        dims += [m.device_ids.start, m.device_ids.stop]
    for d in dims:
        if not isinstance(d, int):
            out |= sym.free_vars(d)


def _expr_vars(e: Expr, out: set[str]) -> None:
    if isinstance(e, Call):
        for a in e.args:
            if not isinstance(a, Var):
                _expr_vars(a, out)
        for p in e.op.attr_params:
            if p.kind in ("dims", "dim", "int_or_dims", "mesh") and p.name in e.attrs:
                v = e.attrs[p.name]
                if p.kind == "mesh":
                    if isinstance(v, DeviceMesh):
                        _mesh_vars(v, out)
                    continue
                for d in (v if isinstance(v, (list, tuple)) else (v,)):
                    if d is not None and not isinstance(d, int):
                        out |= sym.free_vars(d)
    elif isinstance(e, ShapeExpr):
        for d in e.values:
            if not isinstance(d, int):
                out |= sym.free_vars(d)
    elif isinstance(e, PrimValue):
        if not isinstance(e.value, int):
            out |= sym.free_vars(e.value)
    elif isinstance(e, Tuple):
        for f in e.fields:
            _expr_vars(f, out)
    elif isinstance(e, TupleGetItem):
        _expr_vars(e.tuple_value, out)


def _attr_vars(value: Any, visit: _TypeVars) -> None:
    if isinstance(value, Type):
        visit(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _attr_vars(v, visit)
    elif hasattr(value, "items") and not isinstance(value, str):
        for v in value.values():
            _attr_vars(v, visit)


def _block_outputs(func: Function) -> list[list[Var]]:
    """For each block, the vars it defines that are used later, or declared as outputs (in binding order)."""
    used: set[int] = {id(v) for v in leaf_vars(func.result)}
    result: list[list[Var]] = []
    for block in reversed(func.blocks):
        if block.is_dataflow:
            declared = {id(v) for v in block.outputs or ()}
            result.append([b.var for b in block.bindings if id(b.var) in used or id(b.var) in declared])
        else:
            result.append([])
        for b in block.bindings:
            for v in leaf_vars(b.value):
                used.add(id(v))
    result.reverse()
    return result


class _Namer:
    """Unique, valid Python names per function, avoiding keywords, R/I/T and symbolic variable names."""

    def __init__(self, reserved: Iterable[str]) -> None:
        self.taken: set[str] = set(_RESERVED) | set(reserved)
        self.names: dict[int, str] = {}
        self.next: dict[str, int] = {}

    def define(self, v: Var) -> str:
        base = v.name
        # ASCII only: Python folds non-ASCII identifiers (NFKC), which would rename on reparse
        if not (base.isascii() and base.isidentifier()):
            base = _NOT_IDENT.sub("_", base.encode("ascii", "replace").decode().replace("?", "_")) or "v"
            if not base.isidentifier():
                base = "v_" + base
        name = base
        if name in self.taken:
            i = self.next.get(base, 1)
            name = f"{base}_{i}"
            while name in self.taken:
                i += 1
                name = f"{base}_{i}"
            self.next[base] = i + 1
        self.taken.add(name)
        self.names[id(v)] = name
        return name

    def use(self, v: Var) -> str:
        name = self.names.get(id(v))
        if name is None:
            raise DistirError(f"variable '{v.name}' is used but not defined in the function being printed")
        return name


# ---------------------------------------------------------------- constants


def const_text(data: np.ndarray) -> str:
    """``R.const(1.0, "float32")`` or ``R.const([[1.0, 2.0]], "float32")``."""
    dtype = str(data.dtype)
    if dtype == "bool":
        item = str
    elif data.dtype.kind in "iu":
        def item(x):
            return str(int(x))
    elif dtype in ("float16", "float32", "float64"):
        ctor = data.dtype.type

        def item(x):
            x = float(x)
            if not math.isfinite(x):
                return float_text(x)
            return str(ctor(x))
    else:
        def item(x):
            return float_text(float(x))
    return f"R.const({_nested(data.tolist(), item)}, {quote(dtype)})"


def _nested(value, item) -> str:
    if isinstance(value, list):
        return "[" + ", ".join([_nested(v, item) for v in value]) + "]"
    return item(value)
