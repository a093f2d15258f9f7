"""Specialize: bind symbolic sizes (``num_workers=4``) late, after the whole pipeline ran.

Substitutes the values everywhere (types, attributes, shapes, meshes, the recorded
global signature) and simplifies, keeps of a function's count variants the one laid out for the
count bound (:mod:`distir.transform.count_variants`), and writes the steps of each ``R.ccl.replan`` (a redistribute
planned for the count it binds, see :mod:`distir.transform.legalize_redistribute`). Every count is accepted: a sharded dim that does not
divide by its mesh axes is cut in blocks of ``ceil(n / k)``, the last ones padded (see
:mod:`distir.ir.layout`), so the same local view is right at every count.

It runs once per device count on one symbolic module, so it must be cheap. A module
repeats a few distinct shape formulas, meshes and types thousands of times, so the
work that does not depend on the values is done once per module and cached (a
:class:`_Template`: the distinct dims, meshes and types, and a rebuild function per node). Each call then substitutes every distinct formula once,
builds every distinct type once (shared by all the vars that have it), and rebuilds
only the nodes whose types or attributes change; nodes with static types are reused.
"""

from __future__ import annotations

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
from ..ir.placement import Placement
from ..ir.types import DTensorType, PrimType, ShapeType, TensorType, TupleType, Type
from .count_variants import fold_variants, without_guard
from .legalize_redistribute import expand_replans
from ..collector import collector_paused
from .pass_infra import ModulePass, PassContext, register_pass

__all__ = ["Specialize", "drop_identities", "specialize"]

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
        self._dim_ids[id(d)] = (d, i)  # keeps d alive, so its id is not reused
        return i

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
            symbolic_block = isinstance(t, DTensorType) and t.placement.is_block and not self.value(t.placement)[0]
            if all(s for s, _ in dims) and mesh[0] and not symbolic_block:
                return None, None
            getters = [(lambda env, v=v: v) if s else (lambda env, i=v: env.dims[i]) for s, v in dims]
            dkey = tuple(("i", v) if s else ("d", v) for s, v in dims)
            if isinstance(t, TensorType):
                return ("T", t.dtype, dkey), lambda env: TensorType(tuple(g(env) for g in getters), t.dtype)
            mkey = ("static", id(t.mesh)) if mesh[0] else self.mesh_index(t.mesh)
            mget = (lambda env, m=t.mesh: m) if mesh[0] else mesh[1]
            pstatic, pl = self.value(t.placement)  # a block layout's shard sizes may be symbolic
            pget = (lambda env, p=pl: p) if pstatic else pl
            return ("D", t.dtype, dkey, mkey, t.placement), lambda env: DTensorType(
                tuple(g(env) for g in getters), t.dtype, mget(env), pget(env)
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
        if isinstance(v, Placement) and v.is_block and any(sym.is_symbolic(d) for d in v.block):
            sizes = [self.value(d) for d in v.block]
            return False, lambda env: Placement.blocked(tuple(x if s else x(env) for s, x in sizes))
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
    with collector_paused():  # the rebuild allocates many small acyclic nodes; collections would cost more than the work
        return _specialize(mod, values)


def _specialize(mod: IRModule, values: dict[str, int]) -> IRModule:
    tpl = _template(mod)
    env = _Env(values)
    try:  # the meshes first: a mesh size below 1 is the clearest error
        env.meshes = [m.substitute(values) for m in tpl.meshes]
        env.dims = [sym.substitute(d, values) for d in tpl.dims]
    except (MeshError, sym.SymbolicError) as err:
        binding = ", ".join(f"{k}={v}" for k, v in values.items())
        raise SpecializeError(f"specialize {binding}: {err}") from None
    env.types = []
    for _, build in tpl.types:  # a type only refers to types built before it
        env.types.append(build(env))
    infos = {k: [x if s else x(env) for s, x in v] for k, v in tpl.infos.items()}
    funcs = {}
    for name, src in fold_variants(mod, values).items():  # a count variant whose guard holds takes its name
        func = drop_identities(expand_replans(tpl.functions[src](env)))
        funcs[name] = func if src == name else without_guard(func, name)
    attrs = {k: x if s else x(env) for k, (s, x) in tpl.attrs.items()}
    return mod.replace(functions=funcs, global_infos=infos, attrs=attrs)


def drop_identities(func: Function) -> Function:
    """Remove the calls that change nothing at the bound sizes (``OpDef.identity_at``): the masks
    and re-blockings an uneven split needs, at a count that divides."""
    if not any(isinstance(b.value, Call) and b.value.op.identity_at is not None for b in func.bindings()):
        return func
    from .rewrite import map_bindings

    def rewrite(b: Binding, env):
        v = b.value
        if isinstance(v, Call) and v.op.identity_at is not None and v.op.identity_at(v):
            env[b.var] = v.args[0]
            return []
        return None

    return map_bindings(func, rewrite)


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
