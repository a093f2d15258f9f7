"""Specialize: bind symbolic sizes (``num_workers=4``) late, after the whole pipeline ran.

Substitutes the values everywhere (types, attributes, shapes, meshes, the recorded
global signature) and simplifies. Before that it checks that every sharded dim
divides by the mesh axes it is sharded over, and names the tensor, the dim, the mesh
axis and both sizes when one does not (a silently truncated ``130 // 4`` would compute
garbage).

It runs once per device count on one symbolic module, so it must be cheap. A module
repeats a few distinct shape formulas, meshes and types thousands of times, so the
work that does not depend on the values is done once per module and cached (a
:class:`_Template`: the distinct dims, meshes and types, the checks to make, and a
rebuild function per node). Each call then substitutes every distinct formula once,
builds every distinct type once (shared by all the vars that have it), and rebuilds
only the nodes whose types or attributes change; nodes with static types are reused.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Mapping
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
from ..ir.types import DTensorType, PrimType, ShapeType, TensorType, TupleType, Type
from .pass_infra import ModulePass, PassContext, register_pass

__all__ = ["Specialize", "check_divisible", "specialize"]

_PLAIN = (bool, str, float, type(None), int)


class _Env:
    """The values of one specialization: substituted dims, meshes and types by index, new vars."""

    __slots__ = ("dims", "meshes", "types", "values", "vars")

    def __init__(self, values: Mapping[str, int]):
        self.values = values
        self.dims: list[Any] = []
        self.meshes: list[DeviceMesh] = []
        self.types: list[Type] = []
        self.vars: dict[Var, Var] = {}


# A compiled node: (True, value) when the values cannot change it, else (False, build(env)).
Compiled = tuple[bool, Any]


class _Template:
    """Everything about specializing ``mod`` that does not depend on the values."""

    def __init__(self, mod: IRModule):
        self.mesh_list = mod.meshes()  # for error messages
        self.dims: list[Any] = []  # distinct symbolic dims
        self._dim_ids: dict[int, tuple[Any, int]] = {}
        self._dim_hash: dict[int, list[int]] = {}
        self.meshes: list[DeviceMesh] = []  # distinct symbolic meshes
        self._mesh_ids: dict[int, tuple[DeviceMesh, int]] = {}
        self.types: list[tuple[Type, Callable[[_Env], Type]]] = []  # distinct symbolic types, in build order
        self._type_ids: dict[int, tuple[Type, int | None]] = {}
        self._type_keys: dict[Any, int] = {}
        self.floordivs: dict[int, list[tuple[int | Any, int | Any, Any]]] = {}  # dim index -> (a, b, b expr)
        self.checks: list[tuple[str, Type, str]] = []  # (kind, type, what), first of each (kind, type) in order
        self._checked: set = set()
        self._collect_checks(mod)
        self.functions = {name: self._function(f) for name, f in mod.functions.items()}
        self.infos = {k: [self.value(m) for m in v] for k, v in mod.global_infos.items()}
        self.attrs = {k: self.value(v) for k, v in mod.attrs.items()}

    # ---------------------------------------------------------------- distinct leaves

    def dim(self, d) -> Compiled:
        if isinstance(d, int):
            return True, d
        return False, self.dim_index(d)

    def dim_index(self, d) -> int:
        hit = self._dim_ids.get(id(d))
        if hit is not None:
            return hit[1]
        h = sym.structural_hash(d)
        same = self._dim_hash.setdefault(h, [])
        for i in same:
            if sym.identical(self.dims[i], d):
                break
        else:
            i = len(self.dims)
            self.dims.append(d)
            same.append(i)
            self.floordivs[i] = [(self._operand(a), self._operand(b), b) for a, b in sym.floordivs(d)]
        self._dim_ids[id(d)] = (d, i)  # keeps d alive, so its id is not reused
        return i

    def _operand(self, x):
        """A floordiv operand: an int, or ("dim", index) of a symbolic one."""
        x = sym.normalize(x)
        return x if isinstance(x, int) else ("dim", self.dim_index(x))

    def mesh_index(self, m: DeviceMesh) -> int:
        hit = self._mesh_ids.get(id(m))
        if hit is not None:
            return hit[1]
        for i, known in enumerate(self.meshes):
            if known == m:
                break
        else:
            i = len(self.meshes)
            self.meshes.append(m)
        self._mesh_ids[id(m)] = (m, i)
        return i

    def mesh(self, m: DeviceMesh) -> Compiled:
        if _mesh_is_static(m):
            return True, m
        i = self.mesh_index(m)
        return False, lambda env: env.meshes[i]

    def type(self, t: Type) -> Compiled:
        """A type: static, or built once per call (and shared by every node that has it)."""
        i = self.type_index(t)
        if i is None:
            return True, t
        return False, lambda env: env.types[i]

    def type_index(self, t: Type) -> int | None:
        """Index of ``t`` among the distinct non-static types (None when the values cannot change it)."""
        hit = self._type_ids.get(id(t))
        if hit is not None:
            return hit[1]
        key, build = self._type_parts(t)
        i = None
        if build is not None:
            i = self._type_keys.get(key) if key is not None else None
            if i is None:
                i = len(self.types)
                self.types.append((t, build))
                if key is not None:
                    self._type_keys[key] = i
        self._type_ids[id(t)] = (t, i)
        return i

    def _type_parts(self, t: Type) -> tuple[Any, Callable[[_Env], Type] | None]:
        """(structural key or None, build function or None when the type is static)."""
        if isinstance(t, (TensorType, DTensorType)):
            dims = [self.dim(d) for d in t.shape]
            mesh = self.mesh(t.mesh) if isinstance(t, DTensorType) else (True, None)
            if all(s for s, _ in dims) and mesh[0]:
                return None, None
            getters = [(lambda env, v=v: v) if s else (lambda env, i=v: env.dims[i]) for s, v in dims]
            dkey = tuple(("i", v) if s else ("d", v) for s, v in dims)
            if isinstance(t, TensorType):
                return ("T", t.dtype, dkey), lambda env: TensorType(tuple(g(env) for g in getters), t.dtype)
            mkey = ("static", id(t.mesh)) if mesh[0] else self.mesh_index(t.mesh)
            mget = (lambda env, m=t.mesh: m) if mesh[0] else mesh[1]
            return ("D", t.dtype, dkey, mkey, t.placement), lambda env: DTensorType(
                tuple(g(env) for g in getters), t.dtype, mget(env), t.placement
            )
        if isinstance(t, TupleType):
            fields = [self.type(f) for f in t.fields]
            if all(s for s, _ in fields):
                return None, None
            return None, lambda env: TupleType(tuple(v if s else v(env) for s, v in fields))
        if isinstance(t, ShapeType) and t.values is not None:
            dims = [self.dim(d) for d in t.values]
            if all(s for s, _ in dims):
                return None, None
            return None, lambda env: ShapeType(t.ndim, tuple(v if s else env.dims[v] for s, v in dims))
        if isinstance(t, (TensorType, DTensorType, TupleType, ShapeType, PrimType)) or not _has_vars(t):
            return None, None
        return None, lambda env: t.substitute(env.values)

    # ---------------------------------------------------------------- attribute values and expressions

    def value(self, v: Any) -> Compiled:
        if type(v) in _PLAIN:
            return True, v
        if sym.is_symbolic(v):
            _, i = self.dim(v)
            return False, lambda env: env.dims[i]
        if isinstance(v, DeviceMesh):
            return self.mesh(v)
        if isinstance(v, Type):
            return self.type(v)
        if isinstance(v, (list, tuple)):
            parts = [self.value(x) for x in v]
            if all(s for s, _ in parts):
                return True, v
            kind = type(v)
            return False, lambda env: kind(x if s else x(env) for s, x in parts)
        if isinstance(v, dict):
            parts = {k: self.value(x) for k, x in v.items()}
            if all(s for s, _ in parts.values()):
                return True, v
            return False, lambda env: {k: (x if s else x(env)) for k, (s, x) in parts.items()}
        if isinstance(v, int):
            return True, sym.normalize(v)
        return True, v

    def var(self, v: Var) -> Compiled:
        static, t = self.type(v.type)
        if static:
            return True, v
        name, span = v.name, v.span

        def build(env: _Env) -> Var:
            nv = Var(name, t(env), span)
            env.vars[v] = nv
            return nv

        return False, build

    def expr(self, e: Expr, changed: set) -> Compiled:
        """``changed``: the old vars that get a new Var (their uses are rebuilt)."""
        if isinstance(e, Var):
            if e in changed:
                return False, lambda env: env.vars[e]
            return True, e
        if isinstance(e, Call):
            args = [self.expr(a, changed) for a in e.args]
            attrs = {k: self.value(x) for k, x in e.attrs.items()}
            if all(s for s, _ in args) and all(s for s, _ in attrs.values()):
                return True, e
            static_attrs = {k: x for k, (s, x) in attrs.items() if s}
            dyn_attrs = [(k, x) for k, (s, x) in attrs.items() if not s]
            op, span = e.op, e.span

            def call(env: _Env) -> Call:
                a = dict(static_attrs)
                for k, x in dyn_attrs:
                    a[k] = x(env)
                return Call(op, tuple(x if s else x(env) for s, x in args), a, span)

            return False, call
        if isinstance(e, Tuple):
            fields = [self.expr(f, changed) for f in e.fields]
            if all(s for s, _ in fields):
                return True, e
            return False, lambda env: Tuple(tuple(x if s else x(env) for s, x in fields), e.span)
        if isinstance(e, TupleGetItem):
            s, x = self.expr(e.tuple_value, changed)
            if s:
                return True, e
            return False, lambda env: TupleGetItem(x(env), e.index, e.span)
        if isinstance(e, ShapeExpr):
            dims = [self.dim(d) for d in e.values]
            if all(s for s, _ in dims):
                return True, e
            return False, lambda env: ShapeExpr(tuple(v if s else env.dims[v] for s, v in dims), e.span)
        if isinstance(e, PrimValue):
            s, v = self.dim(e.value)
            if s:
                return True, e
            return False, lambda env: PrimValue(env.dims[v], e.dtype, e.span)
        return True, e

    def _function(self, f: Function) -> Callable[[_Env], Function]:
        changed: set = set()
        params = []
        for p in f.params:
            s, x = self.var(p)
            if not s:
                changed.add(p)
            params.append((s, x))
        blocks = []
        for block in f.blocks:
            bindings = []
            for b in block.bindings:
                value = self.expr(b.value, changed)
                var = self.var(b.var)
                if not var[0]:
                    changed.add(b.var)
                bindings.append((b, value, var))
            outputs = None if block.outputs is None else [self.expr(o, changed) for o in block.outputs]
            blocks.append((block, bindings, outputs))
        result = self.expr(f.result, changed)
        ret = self.type(f.ret_type) if f.ret_type is not None else (True, None)
        attrs = {k: self.value(v) for k, v in f.attrs.items()}

        def get(c: Compiled, env: _Env):
            return c[1] if c[0] else c[1](env)

        def build(env: _Env) -> Function:
            new_params = tuple(get(p, env) for p in params)
            new_blocks = []
            for block, bindings, outputs in blocks:
                out = []
                for b, value, var in bindings:
                    if value[0] and var[0]:
                        out.append(b)
                    else:
                        v = get(value, env)
                        out.append(Binding(get(var, env), v, b.span))
                outs = None if outputs is None else tuple(get(o, env) for o in outputs)
                new_blocks.append(Block(tuple(out), block.is_dataflow, outs))
            return f.replace(
                params=new_params,
                blocks=tuple(new_blocks),
                result=get(result, env),
                ret_type=get(ret, env),
                attrs={k: get(v, env) for k, v in attrs.items()},
            )

        return build

    # ---------------------------------------------------------------- divisibility checks

    def _check(self, kind: str, t: Type, what: str) -> None:
        if isinstance(t, TupleType):
            for i, f in enumerate(t.fields):
                self._check(kind, f, f"{what}[{i}]")
            return
        if not isinstance(t, DTensorType if kind == "dtensor" else TensorType):
            return
        i = self.type_index(t)
        if i is None and kind == "local":
            return  # an all-int local shape has no division left to check
        for d in t.shape:
            self.dim(d)
        if isinstance(t, DTensorType):
            for d in t.mesh.shape:
                self.dim(d)
        key = (kind, i if i is not None else ("static", t))
        if key in self._checked:
            return
        self._checked.add(key)
        self.checks.append((kind, t, what))

    def _collect_checks(self, mod: IRModule) -> None:
        from .lower_to_local import GLOBAL_PARAMS, GLOBAL_RESULT

        for f in mod.functions.values():
            gparams = f.attrs.get(GLOBAL_PARAMS)
            for i, p in enumerate(f.params):
                what = f"tensor '{p.name}' (parameter {i} of @{f.name})"
                self._check("dtensor", p.type, what)
                if gparams is not None and i < len(gparams):
                    self._check("dtensor", gparams[i], what)
                self._check("local", p.type, what)
            for b in f.bindings():
                what = f"tensor '{b.var.name}' (in @{f.name})"
                self._check("dtensor", b.var.type, what)
                self._check("local", b.var.type, what)
            if GLOBAL_RESULT in f.attrs:
                self._check("dtensor", f.attrs[GLOBAL_RESULT], f"the result of @{f.name}")


def _mesh_is_static(m: DeviceMesh) -> bool:
    ids = m.device_ids
    bounds = (ids.start, ids.stop) if hasattr(ids, "stop") else ()
    return m.is_static and not any(sym.is_symbolic(b) for b in bounds)


def _has_vars(t: Type) -> bool:
    try:
        from ..ir.types import free_vars

        return bool(free_vars(t))
    except sym.SymbolicError:
        return True


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, min(n, 128) + 1) if n % d == 0]


class _Checker:
    """Finds shapes that do not divide under the given values."""

    def __init__(self, tpl: _Template, env: _Env, context: str = "specialize"):
        self.tpl = tpl
        self.env = env
        self.binding = context + " " + ", ".join(f"{k}={v}" for k, v in env.values.items())

    def _concrete(self, d) -> int | None:
        if isinstance(d, int):
            return d
        i = d[1] if isinstance(d, tuple) else self.tpl.dim_index(sym.normalize(d))
        while len(self.env.dims) <= i:  # a dim first seen now (only on the error path)
            self.env.dims.append(sym.substitute(self.tpl.dims[len(self.env.dims)], self.env.values))
        v = self.env.dims[i]
        return v if isinstance(v, int) else None

    def _mesh_name(self, mesh: DeviceMesh) -> str:
        for i, m in enumerate(self.tpl.mesh_list):
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
            f"{self.binding}: {what} dim {dim} has size {extent}, which does not divide evenly by "
            f"{count}, the size of {axis_desc} that shards it.\n"
            f"  fix: use a device count that divides {extent} (e.g. {', '.join(map(str, good))}), "
            f"pad dim {dim} to a multiple of {count} (e.g. {pad}), or replicate dim {dim} ({repl})"
        )

    def run(self) -> None:
        for kind, t, what in self.tpl.checks:
            if kind == "dtensor":
                self.dtensor(t, what)
            else:
                self.local(t, what)

    def dtensor(self, t: DTensorType, what: str) -> None:
        for d, extent in enumerate(t.shape):
            axes = t.placement.mesh_axes_of(d)
            if not axes:
                continue
            e = self._concrete(extent)
            count = 1
            for a in axes:
                c = self._concrete(t.mesh.shape[a])
                if c is None:
                    count = None
                    break
                count *= c
            if e is None or count is None or count == 0:
                continue
            if e % count:
                self.fail(what, d, e, count, self._axis_desc(t.mesh, axes), axes)

    def local(self, t: TensorType, what: str) -> None:
        for d, extent in enumerate(t.shape):
            if isinstance(extent, int):
                continue
            for a, b, b_expr in self.tpl.floordivs[self.tpl.dim_index(extent)]:
                ea, eb = self._concrete(a), self._concrete(b)
                if ea is None or eb is None or eb == 0 or ea % eb == 0:
                    continue
                self.fail(what, d, ea, eb, self._describe_divisor(b_expr))

    def _describe_divisor(self, b) -> str:
        for mi, mesh in enumerate(self.tpl.mesh_list):
            for a, size in enumerate(mesh.shape):
                if sym.equal(size, b):
                    label = f" ({sym.to_str(size)})" if sym.is_symbolic(size) else ""
                    return f"mesh axis {a}{label} of mesh[{mi}]"
        return f"the mesh axes ({sym.to_str(b)})"


_TEMPLATES: weakref.WeakKeyDictionary[IRModule, _Template] = weakref.WeakKeyDictionary()


def _template(mod: IRModule) -> _Template:
    tpl = _TEMPLATES.get(mod)
    if tpl is None:
        tpl = _TEMPLATES[mod] = _Template(mod)
    return tpl


def specialize(mod: IRModule, values: Mapping[str, int]) -> IRModule:
    """``mod`` with the symbolic variables in ``values`` bound; see the module docstring."""
    values = dict(values)
    for k, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise SpecializeError(f"specialize: {k} must be an integer, got {v!r}")
        if v < 1:
            raise SpecializeError(f"specialize: {k}={v}; sizes must be at least 1")
    gc_was_on = gc.isenabled()
    gc.disable()  # the rebuild allocates many small acyclic nodes; collections would cost more than the work
    try:
        return _specialize(mod, values)
    finally:
        if gc_was_on:
            gc.enable()


def _specialize(mod: IRModule, values: dict[str, int]) -> IRModule:
    tpl = _template(mod)
    env = _Env(values)
    env.dims = [sym.substitute(d, values) for d in tpl.dims]
    check = _Checker(tpl, env)
    check.run()
    try:
        env.meshes = [m.substitute(values) for m in tpl.meshes]
    except MeshError as err:
        raise SpecializeError(f"{check.binding}: {err}") from None
    env.types = []
    for _, build in tpl.types:  # a type only refers to types built before it
        env.types.append(build(env))
    infos = {k: [x if s else x(env) for s, x in v] for k, v in tpl.infos.items()}
    funcs = {name: build(env) for name, build in tpl.functions.items()}
    attrs = {k: x if s else x(env) for k, (s, x) in tpl.attrs.items()}
    return mod.replace(functions=funcs, global_infos=infos, attrs=attrs)


def check_divisible(mod: IRModule, values: Mapping[str, int], context: str = "run time") -> None:
    """Raise SpecializeError when a sharded size or a shape's ``a // b`` does not divide at ``values``.

    Runners call it once the sizes known only at run time (a sequence length) are bound
    from the inputs: a local shape ``s // num_workers`` with ``s = 7`` on 2 workers would
    otherwise drop a row without a word.
    """
    tpl = _template(mod)
    env = _Env(dict(values))
    env.dims = [sym.substitute(d, values) for d in tpl.dims]
    _Checker(tpl, env, context).run()


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
