"""Structural equality of IR, with variables matched by position rather than by name."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import DistirError
from . import sym
from .expr import (
    Binding,
    Block,
    Call,
    Constant,
    Function,
    IRModule,
    PrimValue,
    ShapeExpr,
    StringImm,
    Tuple,
    TupleGetItem,
    Var,
)


class _Mismatch(Exception):
    def __init__(self, path: str, lhs: Any, rhs: Any):
        super().__init__(path)
        self.path, self.lhs, self.rhs = path, lhs, rhs


class _Comparer:
    def __init__(self) -> None:
        self.var_map: dict[int, Var] = {}

    def fail(self, path, a, b):
        raise _Mismatch(path, a, b)

    def module(self, a: IRModule, b: IRModule) -> None:
        if list(a.functions) != list(b.functions) and sorted(a.functions) != sorted(b.functions):
            self.fail("functions", sorted(a.functions), sorted(b.functions))
        if dict(a.global_infos) != dict(b.global_infos):
            self.fail("global_infos", dict(a.global_infos), dict(b.global_infos))
        if _attrs_norm(a.attrs) != _attrs_norm(b.attrs):
            self.fail("attrs", dict(a.attrs), dict(b.attrs))
        for name in a.functions:
            self.function(a.functions[name], b.functions[name], f"@{name}")

    def function(self, a: Function, b: Function, path: str) -> None:
        if len(a.params) != len(b.params):
            self.fail(f"{path}.params", len(a.params), len(b.params))
        for i, (pa, pb) in enumerate(zip(a.params, b.params)):
            self.define(pa, pb, f"{path}.params[{i}]")
        if (a.ret_type is None) != (b.ret_type is None) or (a.ret_type is not None and a.ret_type != b.ret_type):
            self.fail(f"{path}.ret_type", a.ret_type, b.ret_type)
        if _attrs_norm(a.attrs) != _attrs_norm(b.attrs):
            self.fail(f"{path}.attrs", dict(a.attrs), dict(b.attrs))
        if len(a.blocks) != len(b.blocks):
            self.fail(f"{path}.blocks", len(a.blocks), len(b.blocks))
        for i, (ba, bb) in enumerate(zip(a.blocks, b.blocks)):
            self.block(ba, bb, f"{path}.blocks[{i}]")
        self.expr(a.result, b.result, f"{path}.result")

    def block(self, a: Block, b: Block, path: str) -> None:
        if a.is_dataflow != b.is_dataflow:
            self.fail(f"{path}.is_dataflow", a.is_dataflow, b.is_dataflow)
        if len(a.bindings) != len(b.bindings):
            self.fail(f"{path}: number of bindings", len(a.bindings), len(b.bindings))
        for ba, bb in zip(a.bindings, b.bindings):
            self.binding(ba, bb, f"{path}.{ba.var.name}")

    def binding(self, a: Binding, b: Binding, path: str) -> None:
        self.expr(a.value, b.value, f"{path}.value")
        self.define(a.var, b.var, path)

    def define(self, a: Var, b: Var, path: str) -> None:
        if a.type != b.type:
            self.fail(f"{path} (type of {a.name})", a.type, b.type)
        self.var_map[id(a)] = b

    def expr(self, a, b, path: str) -> None:
        if type(a) is not type(b):
            self.fail(path, a, b)
        if isinstance(a, Var):
            mapped = self.var_map.get(id(a))
            if mapped is None:
                if a is not b:
                    self.fail(f"{path} (free variable)", a, b)
            elif mapped is not b:
                self.fail(path, a.name, b.name)
        elif isinstance(a, Constant):
            if a.data.dtype != b.data.dtype or a.data.shape != b.data.shape or not np.array_equal(a.data, b.data, equal_nan=a.data.dtype.kind in "fc"):
                self.fail(path, a.data, b.data)
        elif isinstance(a, PrimValue):
            if a.dtype != b.dtype or not sym.equal(a.value, b.value):
                self.fail(path, a.value, b.value)
        elif isinstance(a, StringImm):
            if a.value != b.value:
                self.fail(path, a.value, b.value)
        elif isinstance(a, ShapeExpr):
            if len(a.values) != len(b.values) or not all(sym.equal(x, y) for x, y in zip(a.values, b.values)):
                self.fail(path, a.values, b.values)
        elif isinstance(a, Tuple):
            if len(a.fields) != len(b.fields):
                self.fail(path, len(a.fields), len(b.fields))
            for i, (x, y) in enumerate(zip(a.fields, b.fields)):
                self.expr(x, y, f"{path}[{i}]")
        elif isinstance(a, TupleGetItem):
            if a.index != b.index:
                self.fail(f"{path}.index", a.index, b.index)
            self.expr(a.tuple_value, b.tuple_value, path)
        elif isinstance(a, Call):
            if a.op is not b.op:
                self.fail(f"{path}.op", a.op, b.op)
            if len(a.args) != len(b.args):
                self.fail(f"{path}.args", len(a.args), len(b.args))
            for i, (x, y) in enumerate(zip(a.args, b.args)):
                self.expr(x, y, f"{path}.args[{i}]")
            fa, fb = a.op.full_attrs(a.attrs), b.op.full_attrs(b.attrs)
            for k in fa:
                if not attr_equal(fa[k], fb[k]):
                    self.fail(f"{path}.attrs.{k}", fa[k], fb[k])
        else:
            raise DistirError(f"structural equality does not know {type(a).__name__}")


def attr_equal(a, b) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(attr_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return False
    if sym.is_symbolic(a) or sym.is_symbolic(b):
        return sym.equal(a, b)
    return type(a) is type(b) and a == b or (isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool) and a == b)


def _attrs_norm(attrs) -> dict:
    return {k: (tuple(v) if isinstance(v, list) else v) for k, v in dict(attrs).items()}


def _compare(a, b) -> None:
    c = _Comparer()
    if isinstance(a, IRModule) and isinstance(b, IRModule):
        c.module(a, b)
    elif isinstance(a, Function) and isinstance(b, Function):
        c.function(a, b, f"@{a.name}")
    else:
        c.expr(a, b, "expr")


def structural_equal(a, b) -> bool:
    """True when a and b are the same IR up to variable names."""
    try:
        _compare(a, b)
    except _Mismatch:
        return False
    return True


def first_difference(a, b) -> str | None:
    try:
        _compare(a, b)
    except _Mismatch as m:
        return f"at {m.path}: {m.lhs!r} != {m.rhs!r}"
    return None


def assert_structural_equal(a, b) -> None:
    """Raise AssertionError showing both sides and the first difference."""
    diff = first_difference(a, b)
    if diff is None:
        return
    def show(x):
        return x.script() if hasattr(x, "script") else repr(x)
    raise AssertionError(
        "IR is not structurally equal\nfirst difference " + diff + "\n--- lhs ---\n" + show(a) + "\n--- rhs ---\n" + show(b)
    )
