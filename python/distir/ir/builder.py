"""Build functions and modules in Python, without writing IR text.

Tests and generators (``distir.examples.llama_stack``) make IR programmatically; this is
the one way to do it, so none of them assembles ``Var``/``Call``/``Block`` by hand or
formats text to parse::

    from distir.ir.builder import FunctionBuilder, dtensor, mesh, module_of

    m = mesh(("num_workers",))                       # devices 0 .. num_workers - 1
    b = FunctionBuilder("main", meshes=[m])
    x = b.param("x", dtensor((8, "s"), "float32", m, "S[0]"))
    with b.dataflow():                               # R.output(...) is worked out at ret()
        y = b.call("dist.redistribute", x, device_mesh=m, placement="R", name="y")
    b.ret(y)
    mod = module_of(b)                               # the meshes the builders were given

- ``b.call(op, *args, name=None, **attrs)`` binds a call and returns its Var. Arguments
  and attributes follow the op's declaration as in the text format (positionally in
  declared order, or by name; unset attributes take their defaults); the type comes
  from the op registry at once, so a mistake shows where it is made. Attributes take
  Python values: placements as ``"S[0], R"`` or :class:`Placement`, meshes as
  :class:`DeviceMesh` or ``"mesh[0]"`` (one of the builder's ``meshes``), dims as ints,
  symbolic expressions or text (``"s"``, ``"128 // num_workers"``). A shape argument
  takes a list of dims, a tuple argument a list of values, a tensor argument a numpy
  array (a constant); ``b.const(value, dtype)`` makes a constant explicitly.
- ``b.bind(expr)``, ``b.tuple(*values)``, ``b.get_item(t, i)`` bind other values.
- Bindings outside ``with b.dataflow()`` form plain blocks, or dataflow blocks with
  ``FunctionBuilder(..., dataflow=True)``.
- ``FunctionBuilder(..., plain_bindings=True)`` gives bindings their layout-free types
  (as text annotating them ``R.Tensor`` does): only the parameters (and ``R.dist.*``
  calls) carry layouts, and propagate-sharding lays out the rest.
- Var names: ``name=``, else ``v0, v1, ...``; a name is bound once per function.
- Ops come from the registry, which importing :mod:`distir.ops` fills (as every layer
  above the IR does; the IR does not import it).
- :func:`tensor`, :func:`dtensor`, :func:`mesh` make types and meshes from the same
  shorthand.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..errors import DistirError, TypeInferenceError
from . import sym, sym_parse
from .expr import (
    Binding,
    Block,
    Call,
    Constant,
    Expr,
    Function,
    IRModule,
    PrimValue,
    ShapeExpr,
    Tuple,
    TupleGetItem,
    Var,
)
from .mesh import DeviceMesh, Range
from .op import OpDef, Param, all_ops, get_op, has_dtensor
from .combine import check_partial
from .placement import Placement
from .sym import Dim
from .types import DTensorType, TensorType, Type

__all__ = ["BuilderError", "FunctionBuilder", "dim", "dtensor", "mesh", "module_of", "tensor"]


class BuilderError(DistirError):
    """A function cannot be built as asked (unknown op, wrong argument, name bound twice)."""


# ---------------------------------------------------------------- shorthand for dims, types, meshes


def dim(d: int | str | Dim) -> Dim:
    """A dim from an int, a symbolic expression, or text such as ``"s"`` or ``"128 // num_workers"``."""
    if isinstance(d, str):
        return sym_parse.parse(d)
    if isinstance(d, (bool, float)):
        raise BuilderError(f"expected a dim (an int, a symbolic expression or its text), got {d!r}")
    return sym.normalize(d)


def _dims(ds: Sequence) -> tuple[Dim, ...]:
    return tuple(dim(d) for d in ds)


def tensor(shape: Sequence, dtype: str = "float32") -> TensorType:
    return TensorType(_dims(shape), dtype)


def _placement(p: str | Placement) -> Placement:
    return Placement.parse(p) if isinstance(p, str) else p


def dtensor(shape: Sequence, dtype: str, on: DeviceMesh, placement: str | Placement) -> DTensorType:
    """A DTensor type: global ``shape`` laid out on mesh ``on`` by ``placement`` (``"S[0], R"``)."""
    p = _placement(placement)
    p.validate(on.ndim, len(shape))
    check_partial(p, dtype, "a DTensor")
    return DTensorType(_dims(shape), dtype, on, p)


def mesh(shape: Sequence, devices: int | str | Range | Sequence[int] = 0, axis_names=None) -> DeviceMesh:
    """A device mesh of ``shape``; ``devices`` is the first device id (the ids run on from
    it, as ``I.Range``), a Range, or an explicit list of ids."""
    dims = _dims(shape)
    if isinstance(devices, (int, str)) or sym.is_symbolic(devices):
        start = dim(devices)
        devices = Range(start, sym.add(start, sym.product(dims)))
    return DeviceMesh(dims, devices if isinstance(devices, Range) else tuple(devices), axis_names)


# ---------------------------------------------------------------- arguments and attributes


_MESH_REF = re.compile(r"^\s*mesh\[\s*(\d+)\s*\]\s*$")


def _attr(op: OpDef, p: Param, value: Any, meshes: Sequence[DeviceMesh]) -> Any:
    """The attribute value the text format would give ``value`` (see ATTR_KINDS in ir/op.py)."""
    kind = p.kind
    if value is None:
        return None
    if kind == "mesh":
        if isinstance(value, DeviceMesh):
            return value
        m = _MESH_REF.match(value) if isinstance(value, str) else None
        if m is None or int(m.group(1)) >= len(meshes):
            raise BuilderError(
                f"R.{op.name}: '{p.name}' must be a DeviceMesh or \"mesh[i]\" of the builder's {len(meshes)} "
                f"mesh(es), got {value!r}"
            )
        return meshes[int(m.group(1))]
    if kind == "placement":
        return _placement(value)
    if kind in ("axes", "ints"):
        return tuple(int(v) for v in value) if isinstance(value, (list, tuple)) else int(value)
    if kind == "floats":
        return tuple(float(v) for v in value)
    if kind == "dims":
        return _dims(value)
    if kind == "dim":
        return dim(value)
    if kind == "int_or_dims":
        return _dims(value) if isinstance(value, (list, tuple)) else int(value)
    if kind == "choice" and p.choices and value not in p.choices:
        raise BuilderError(f"R.{op.name}: '{p.name}' must be one of {', '.join(p.choices)}, got {value!r}")
    return value


def _arg(op: OpDef, p: Param, value: Any) -> Expr:
    if isinstance(value, Expr):
        return value
    if p.kind == "shape" and isinstance(value, (list, tuple)):
        return ShapeExpr(_dims(value))
    if p.kind == "prim" and (isinstance(value, (int, str)) or sym.is_symbolic(value)):
        return PrimValue(dim(value))
    if p.kind == "tuple" and isinstance(value, (list, tuple)):
        return Tuple(tuple(_arg(op, Param(p.name, "tensor"), v) for v in value))
    if isinstance(value, np.ndarray):
        return Constant(value)
    raise BuilderError(f"R.{op.name}: argument '{p.name}' ({p.kind}) cannot be {type(value).__name__} {value!r}")


def _call(op_name: str | OpDef, args: Sequence, kwargs: dict, meshes: Sequence[DeviceMesh]) -> Call:
    """The call the text ``R.<op>(*args, **kwargs)`` would parse to."""
    op = op_name if isinstance(op_name, OpDef) else get_op(op_name)
    if op is None:
        import difflib

        close = difflib.get_close_matches(str(op_name), list(all_ops()), n=1)  # get_op declared the built-in ops
        raise BuilderError(f"unknown op 'R.{op_name}'" + (f"; did you mean 'R.{close[0]}'?" if close else ""))
    params = op.params
    if len(args) > len(params):
        raise BuilderError(f"R.{op.name} takes {len(params)} arguments ({', '.join(p.name for p in params)}), got {len(args)}")
    given = dict(zip((p.name for p in params), args))
    for k, v in kwargs.items():
        if op.param(k) is None:
            raise BuilderError(f"R.{op.name} has no parameter '{k}' (its parameters are {', '.join(p.name for p in params)})")
        if k in given:
            raise BuilderError(f"R.{op.name} got parameter '{k}' twice")
        given[k] = v
    call_args: list[Expr] = []
    attrs: dict[str, Any] = {}
    missing: Param | None = None  # an optional argument left out: no later one may be given
    for p in params:
        if p.name not in given:
            if p.required:
                raise BuilderError(f"R.{op.name} needs the {'argument' if p.is_arg else 'attribute'} '{p.name}'")
            if p.is_arg:
                missing = p
            else:
                attrs[p.name] = p.default
            continue
        if p.is_arg:
            if missing is not None:
                raise BuilderError(f"R.{op.name}: '{p.name}' is given but the earlier argument '{missing.name}' is not")
            call_args.append(_arg(op, p, given[p.name]))
        else:
            attrs[p.name] = _attr(op, p, given[p.name], meshes)
    return Call(op, tuple(call_args), attrs)


def _type_of(expr: Expr) -> Type:
    """The inferred type; a compute op on DTensors whose layouts do not fit its rule gets its
    layout-free type, as the parser gives it (propagate-sharding decides the layout)."""
    from .sharding import infer_unplaced

    try:
        return expr.type
    except TypeInferenceError:
        if not (isinstance(expr, Call) and not expr.op.dist_aware and any(has_dtensor(a.type) for a in expr.args)):
            raise
        return infer_unplaced(expr.op, [a.type for a in expr.args], expr.attrs)


def _plain_type(expr: Expr) -> Type:
    """The type with layouts left out, but for what a distribution op (``R.dist.*``) makes."""
    from .sharding import infer_unplaced, without_placement

    if isinstance(expr, Call) and not expr.op.dist_aware:
        return infer_unplaced(expr.op, [a.type for a in expr.args], expr.attrs)
    return _type_of(expr) if isinstance(expr, Call) else without_placement(_type_of(expr))


# ---------------------------------------------------------------- functions and modules


class FunctionBuilder:
    """Builds one function binding by binding; see the module docstring."""

    def __init__(self, name: str, meshes: Sequence[DeviceMesh] = (), attrs: dict | None = None, *,
                 plain_bindings: bool = False, dataflow: bool = False):
        self.name = name
        self.meshes = tuple(meshes)
        self.plain_bindings = plain_bindings
        self.default_dataflow = dataflow  # what a binding outside ``with b.dataflow()`` joins
        self.attrs = dict(attrs or {})
        self.params: list[Var] = []
        self._blocks: list[tuple[bool, list[Binding]]] = []  # (is_dataflow, bindings)
        self._open: list[Binding] | None = None  # the block bindings go to now
        self._in_dataflow = False
        self._names: set[str] = set()
        self._count = 0
        self._function: Function | None = None

    def _name(self, name: str | None) -> str:
        if name is None:
            while f"v{self._count}" in self._names:
                self._count += 1
            name = f"v{self._count}"
        if name in self._names:
            raise BuilderError(f"'{name}' is already bound in @{self.name}")
        self._names.add(name)
        return name

    def param(self, name: str, t: Type) -> Var:
        """A parameter of type ``t`` (see :func:`tensor`, :func:`dtensor`)."""
        v = Var(self._name(name), t)
        self.params.append(v)
        return v

    @contextlib.contextmanager
    def dataflow(self) -> Iterator[None]:
        """Bindings made inside go to one dataflow block; its outputs are the vars used after it."""
        if self._in_dataflow:
            raise BuilderError("dataflow blocks cannot be nested")
        self._in_dataflow = True
        self._blocks.append((True, []))
        self._open = self._blocks[-1][1]
        try:
            yield
        finally:
            self._in_dataflow = False
            self._open = None

    def bind(self, value: Expr, name: str | None = None, annotation: Type | None = None) -> Var:
        """Bind ``value`` to a new Var (its type inferred unless given)."""
        if self._function is not None:
            raise BuilderError(f"@{self.name} is already finished")
        if annotation is None:
            annotation = _plain_type(value) if self.plain_bindings else _type_of(value)
        var = Var(self._name(name), annotation)
        if self._open is None:
            self._blocks.append((self.default_dataflow, []))
            self._open = self._blocks[-1][1]
        self._open.append(Binding(var, value))
        return var

    def call(self, op: str | OpDef, *args, name: str | None = None, **attrs) -> Var:
        """Bind ``R.<op>(*args, **attrs)``; returns its Var."""
        return self.bind(_call(op, args, attrs, self.meshes), name)

    def tuple(self, *values: Expr, name: str | None = None) -> Var:
        return self.bind(Tuple(tuple(values)), name)

    def get_item(self, value: Expr, index: int, name: str | None = None) -> Var:
        return self.bind(TupleGetItem(value, index), name)

    @staticmethod
    def const(value, dtype: str | None = None) -> Constant:
        """A constant (``R.const``): ``dtype`` defaults to float32, int64 or bool after the value."""
        if dtype is None:
            first = value
            while isinstance(first, (list, tuple)) and first:
                first = first[0]
            dtype = "bool" if isinstance(first, bool) else "int64" if isinstance(first, int) else "float32"
        if dtype == "bfloat16":  # not a numpy dtype: ml_dtypes has it (as distir.ops reads it)
            import ml_dtypes

            return Constant(np.array(value, dtype=ml_dtypes.bfloat16))
        return Constant(np.array(value, dtype=np.dtype(dtype)))

    def ret(self, value: Expr | Sequence[Expr], ret_type: Type | None = None) -> Function:
        """End the function returning ``value`` (a list: a tuple of them); returns the Function."""
        if self._function is not None:
            raise BuilderError(f"@{self.name} already returned")
        if isinstance(value, (list, tuple)):
            value = Tuple(tuple(value))
        self._function = Function(self.name, tuple(self.params), self._finish_blocks(value), value, ret_type, self.attrs)
        return self._function

    def _finish_blocks(self, result: Expr) -> tuple[Block, ...]:
        """The blocks, each dataflow block's outputs being its vars read later (or returned)."""
        from .expr import leaf_vars

        later: set[int] = {id(v) for v in leaf_vars(result)}
        blocks = []
        for is_dataflow, bindings in reversed(self._blocks):
            if not bindings:
                continue
            outputs = tuple(b.var for b in bindings if id(b.var) in later) if is_dataflow else None
            for b in bindings:
                later.update(id(v) for v in leaf_vars(b.value))
            blocks.append(Block(tuple(bindings), is_dataflow, outputs))
        return tuple(reversed(blocks))

    @property
    def function(self) -> Function:
        if self._function is None:
            raise BuilderError(f"@{self.name} has not returned yet: call ret(value)")
        return self._function


def module_of(*functions: FunctionBuilder | Function, meshes: Sequence[DeviceMesh] | None = None, attrs=None) -> IRModule:
    """A module of these functions; its meshes are ``meshes``, else those the builders were given."""
    funcs = [f.function if isinstance(f, FunctionBuilder) else f for f in functions]
    if meshes is None:
        seen: list[DeviceMesh] = []
        for f in functions:
            for m in f.meshes if isinstance(f, FunctionBuilder) else ():
                if not any(m is s for s in seen):
                    seen.append(m)
        meshes = seen
    return IRModule({f.name: f for f in funcs}, {"mesh": tuple(meshes)} if meshes else {}, attrs or {})
