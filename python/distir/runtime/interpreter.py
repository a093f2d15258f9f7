"""The numpy interpreter: the single-device ground truth.

``run(mod, *arrays)`` evaluates a function of a module with each op's numpy reference.
DTensors are their global tensors (the global view): distribution ops are identities and
a partial placement is simply the true value. Symbolic dims are bound from the input
shapes; attributes holding symbolic values are evaluated under those bindings.

A function is compiled once into a :class:`Plan` (a flat list of steps over numbered
slots, with attributes and expected result types prepared) and cached, so running it
again costs one Python call per binding and no dictionary churn. The SPMD simulator
(:mod:`distir.runtime.spmd`) runs the same plan once per worker: a ``hook`` given to
:func:`compile_function` marks the calls it runs itself (the collectives).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DistirError
from ..ir import sym
from ..ir.expr import (
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
)
from ..ir.op import OpDef
from ..ir.types import DTensorType, PrimType, ShapeType, TensorType, TupleType, Type, np_dtype

__all__ = ["Plan", "RunContext", "RunError", "bind_params", "compile_function", "run"]

# attribute kinds whose values may hold symbolic dims, evaluated before an op runs
_SYMBOLIC_KINDS = ("dim", "dims", "int_or_dims")


class RunError(DistirError):
    """A module could not be run on the given inputs: wrong arguments, or an op failed."""


class RunContext:
    """What a numpy reference may ask of the run: the values of the symbolic variables."""

    __slots__ = ("_shapes", "values")

    def __init__(self, values: Mapping[str, int]):
        self.values = dict(values)
        self._shapes: dict[int, tuple[int, ...]] = {}  # the plan's expected shapes, evaluated once per run

    def dim(self, d) -> int:
        """The integer value of a dim (an int, or a symbolic expression over bound variables)."""
        if isinstance(d, int):
            return d
        try:
            return sym.evaluate(d, self.values)
        except sym.SymbolicError as err:
            raise RunError(f"{err}; pass its value with sym_values={{...}}") from None

    def shape(self, dims: Sequence) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else self.dim(d) for d in dims)


# ---------------------------------------------------------------- binding the parameters


def _describe(t: Type) -> str:
    return str(t)


class _Binder:
    """Matches arrays against parameter types, binding bare symbolic dims and checking the rest."""

    def __init__(self, values: dict[str, int]):
        self.values = values
        self.origin: dict[str, str] = {name: "sym_values" for name in values}
        self.deferred: list[tuple[Any, int, str]] = []

    def match(self, where: str, t: Type, value: Any) -> Any:
        if isinstance(t, (TensorType, DTensorType)):
            return self.tensor(where, t, value)
        if isinstance(t, TupleType):
            if not isinstance(value, (tuple, list)) or len(value) != len(t.fields):
                got = f"a sequence of {len(value)}" if isinstance(value, (tuple, list)) else type(value).__name__
                raise RunError(f"{where}: expected a tuple of {len(t.fields)} values ({t}), got {got}")
            return tuple(self.match(f"{where}[{i}]", f, v) for i, (f, v) in enumerate(zip(t.fields, value)))
        if isinstance(t, ShapeType):
            dims = tuple(int(v) for v in value)
            if len(dims) != t.ndim:
                raise RunError(f"{where}: expected a shape of {t.ndim} dims, got {dims}")
            if t.values is not None:
                for i, (d, v) in enumerate(zip(t.values, dims)):
                    self.dim(f"{where} entry {i}", d, v)
            return dims
        if isinstance(t, PrimType):
            if isinstance(value, np.ndarray) and value.ndim == 0:
                value = value.item()
            if not isinstance(value, (int, float, bool, np.generic)):
                raise RunError(f"{where}: expected a scalar ({t}), got {type(value).__name__}")
            return value
        return value

    def tensor(self, where: str, t: TensorType | DTensorType, value: Any) -> np.ndarray:
        want = np_dtype(t.dtype)
        if not isinstance(value, np.ndarray):
            if isinstance(value, (list, tuple, int, float, bool, np.generic)):
                value = np.asarray(value, dtype=want)
            else:
                raise RunError(f"{where}: expected a numpy array for {_describe(t)}, got {type(value).__name__}")
        if value.ndim != len(t.shape):
            raise RunError(
                f"{where}: expected rank {len(t.shape)} ({_describe(t)}), got an array of shape {value.shape}"
            )
        if value.dtype != want:
            raise RunError(f"{where}: expected dtype {t.dtype}, got {value.dtype}; convert it with .astype")
        for i, (d, n) in enumerate(zip(t.shape, value.shape)):
            self.dim(f"{where} dim {i}", d, int(n))
        return value

    def dim(self, where: str, d, actual: int) -> None:
        if isinstance(d, int):
            if d != actual:
                raise RunError(f"{where}: expected size {d}, got {actual}")
            return
        names = sym.free_vars(d)
        if len(names) == 1 and sym.to_str(d) in names:  # a bare variable
            name = next(iter(names))
            if name in self.values:
                if self.values[name] != actual:
                    raise RunError(
                        f"{where}: '{name}' is {self.values[name]} (from {self.origin[name]}), but this dim is {actual}"
                    )
            else:
                self.values[name] = actual
                self.origin[name] = where
            return
        self.deferred.append((d, actual, where))

    def finish(self) -> None:
        """Check compound dims (``2 * n``), solving those with one unknown variable."""
        pending = self.deferred
        while pending:
            progress = False
            left = []
            for d, actual, where in pending:
                unknown = sorted(sym.free_vars(d) - self.values.keys())
                if not unknown:
                    got = sym.evaluate(d, self.values)
                    if got != actual:
                        raise RunError(
                            f"{where}: expected {sym.to_str(d)} = {got} "
                            f"(with {_bound_str(d, self.values)}), got {actual}"
                        )
                    progress = True
                elif len(unknown) == 1 and (v := self.solve(d, unknown[0], actual, where)) is not None:
                    self.values[unknown[0]] = v
                    self.origin[unknown[0]] = where
                    progress = True
                else:
                    left.append((d, actual, where))
            if not progress:
                d, actual, where = left[0]
                missing = sorted(sym.free_vars(d) - self.values.keys())
                raise RunError(
                    f"{where}: cannot work out {', '.join(repr(m) for m in missing)} from {sym.to_str(d)} = {actual}; "
                    f"pass sym_values={{{', '.join(repr(m) + ': ...' for m in missing)}}}"
                )
            pending = left

    def solve(self, d, name: str, actual: int, where: str) -> int | None:
        try:
            return _solve(d, name, actual, self.values)
        except _NoSolution:
            known = _bound_str(d, self.values)
            raise RunError(
                f"{where}: no value of '{name}' gives {sym.to_str(d)} = {actual}" + (f" (with {known})" if known else "")
            ) from None


def _bound_str(d, values) -> str:
    """``m=3, n=4``: the bound variables of ``d``."""
    return ", ".join(f"{n}={values[n]}" for n in sorted(sym.free_vars(d)) if n in values)


class _NoSolution(Exception):
    pass


def _solve(d, name: str, actual: int, values: Mapping[str, int]) -> int | None:
    """The value of ``name`` making ``d`` equal ``actual`` when ``d`` is affine in it (``m * W``, ``n + 1``).

    None when ``d`` is not affine in it; :class:`_NoSolution` when it is but no
    non-negative integer fits.
    """
    try:
        f1 = sym.evaluate(d, {**values, name: 1})
        f2 = sym.evaluate(d, {**values, name: 2})
        f3 = sym.evaluate(d, {**values, name: 3})
    except sym.SymbolicError:
        return None
    slope = f2 - f1
    if slope == 0 or f3 - f2 != slope:
        return None
    if (actual - f1) % slope:
        raise _NoSolution
    v = 1 + (actual - f1) // slope
    try:
        ok = v >= 0 and sym.evaluate(d, {**values, name: v}) == actual
    except sym.SymbolicError:
        ok = False
    if not ok:
        raise _NoSolution
    return v


def bind_params(
    func: Function,
    inputs: Sequence[Any],
    sym_values: Mapping[str, int] | None = None,
    types: Sequence[Type] | None = None,
) -> tuple[list[Any], dict[str, int]]:
    """Check ``inputs`` against ``func``'s parameters; return them (normalised) and the symbolic values.

    ``types`` replaces the parameters' types: the recorded global signature of a
    local-view function, against which the simulator and Disco check global inputs.
    """
    params = func.params
    if len(inputs) != len(params):
        names = ", ".join(p.name for p in params)
        raise RunError(f"R.{func.name} takes {len(params)} argument(s) ({names}), got {len(inputs)}")
    binder = _Binder({k: int(v) for k, v in (sym_values or {}).items()})
    types = [p.type for p in params] if types is None else types
    out = [binder.match(f"parameter '{p.name}'", t, a) for p, t, a in zip(params, types, inputs)]
    binder.finish()
    return out, binder.values


# ---------------------------------------------------------------- compiling a function into a plan

Getter = Callable[[list, RunContext], Any]


class _Compiler:
    def __init__(self, func: Function):
        self.func = func
        self.slots: dict[int, int] = {}
        self.names: list[str] = []

    def slot(self, var: Var) -> int:
        k = id(var)
        if k not in self.slots:
            self.slots[k] = len(self.names)
            self.names.append(var.name)
        return self.slots[k]

    def index(self, var: Var) -> int:
        """The slot of an already defined var."""
        i = self.slots.get(id(var))
        if i is None:
            raise RunError(f"R.{self.func.name}: '{var.name}' is used before it is defined")
        return i

    def getter(self, e: Expr) -> Getter:
        if isinstance(e, Var):
            i = self.index(e)
            return lambda env, ctx: env[i]
        if isinstance(e, Constant):
            data = e.data
            return lambda env, ctx: data
        if isinstance(e, ShapeExpr):
            vals = e.values
            if all(isinstance(v, int) for v in vals):
                static = tuple(vals)
                return lambda env, ctx: static
            return lambda env, ctx: ctx.shape(vals)
        if isinstance(e, PrimValue):
            v = e.value
            if isinstance(v, (int, float)):
                return lambda env, ctx: v
            return lambda env, ctx: ctx.dim(v)
        if isinstance(e, StringImm):
            s = e.value
            return lambda env, ctx: s
        if isinstance(e, Tuple):
            parts = [self.getter(f) for f in e.fields]
            return lambda env, ctx: tuple(p(env, ctx) for p in parts)
        if isinstance(e, TupleGetItem):
            inner = self.getter(e.tuple_value)
            idx = e.index

            def item(env, ctx):
                t = inner(env, ctx)
                return None if t is None else t[idx]  # None: a simulated worker outside the tuple's mesh

            return item
        raise RunError(f"R.{self.func.name}: the interpreter cannot evaluate {type(e).__name__} expressions")


def _resolve_attrs(op: OpDef, attrs: dict[str, Any]) -> Callable[[RunContext], dict[str, Any]] | None:
    """A function giving ``attrs`` with symbolic dims evaluated, or None when there are none."""
    symbolic = []
    for p in op.attr_params:
        v = attrs.get(p.name)
        if p.kind in _SYMBOLIC_KINDS and _has_symbolic(v):
            symbolic.append(p.name)
    if not symbolic:
        return None

    def resolve(ctx: RunContext) -> dict[str, Any]:
        out = dict(attrs)
        for name in symbolic:
            v = attrs[name]
            out[name] = ctx.dim(v) if not isinstance(v, (list, tuple)) else [ctx.dim(d) for d in v]
        return out

    return resolve


def _has_symbolic(v) -> bool:
    if isinstance(v, (list, tuple)):
        return any(sym.is_symbolic(d) for d in v)
    return sym.is_symbolic(v)


def _expected(t: Type, interned: dict):
    """What to check a result against: (dtype, dims, static) for tensors, a list for tuples, None to skip.

    Equal symbolic shapes share one dims tuple (``interned``), so a run evaluates each once.
    """
    if isinstance(t, (TensorType, DTensorType)):
        dims = tuple(t.shape)
        static = all(isinstance(d, int) for d in dims)
        if not static:
            dims = interned.setdefault(tuple(sym.key(d) for d in dims), dims)
        return (np_dtype(t.dtype), dims, static)
    if isinstance(t, TupleType):
        return [_expected(f, interned) for f in t.fields]
    return None


@dataclass
class _Step:
    slot: int
    name: str  # the bound variable, for messages
    what: str  # "R.op" or the kind of value
    run: Callable[[list, RunContext], Any]
    expect: Any
    value: Expr  # the bound expression
    # for a call, its parts, so that a runner of many workers can share what they agree on:
    args: Callable[[list, RunContext], list] | None = None  # the argument values
    fn: Callable | None = None  # the op's numpy reference, fn(args, attrs, ctx)
    attrs: dict | None = None  # full attributes, symbolic dims unevaluated
    resolve: Callable[[RunContext], dict] | None = None  # attrs with symbolic dims evaluated; None: attrs as is
    hook: Any = None  # what the plan's hook returned for the call (which then does not run as an op)


def _args_getter(compiler: _Compiler, args) -> Callable[[list, RunContext], list]:
    if all(isinstance(a, Var) for a in args):
        idx = [compiler.index(a) for a in args]
        return lambda env, ctx: [env[i] for i in idx]
    getters = [compiler.getter(a) for a in args]
    return lambda env, ctx: [g(env, ctx) for g in getters]


def _call_step(compiler: _Compiler, slot: int, var: Var, call: Call, expect, hook) -> _Step:
    op = call.op
    if not isinstance(op, OpDef):
        raise RunError(f"binding '{var.name}': the interpreter runs op calls only, got a call to {op!r}")
    what = f"R.{op.name}"
    args = _args_getter(compiler, call.args)
    marked = hook(var, call) if hook is not None else None
    if marked is not None:

        def elsewhere(env, ctx):
            raise RunError(f"binding '{var.name}': {what} runs across workers, not in one")

        return _Step(slot, var.name, what, elsewhere, expect, call, args, hook=marked)
    if op.numpy is None:
        raise RunError(
            f"binding '{var.name}': R.{op.name} has no numpy reference, so the interpreter cannot run it"
            + (
                "; local-view modules with collectives run on the SPMD simulator"
                if op.name.startswith("ccl.") and hook is None
                else ""
            )
        )
    try:
        attrs = op.full_attrs(call.attrs)
    except DistirError as err:
        raise RunError(f"binding '{var.name}': {err}") from None
    fn = op.numpy
    resolve = _resolve_attrs(op, attrs)
    if all(isinstance(a, Var) for a in call.args):  # the common case, in one closure
        idx = [compiler.index(a) for a in call.args]
        if resolve is None:
            run = lambda env, ctx: fn([env[i] for i in idx], attrs, ctx)
        else:
            run = lambda env, ctx: fn([env[i] for i in idx], resolve(ctx), ctx)
    elif resolve is None:
        run = lambda env, ctx: fn(args(env, ctx), attrs, ctx)
    else:
        run = lambda env, ctx: fn(args(env, ctx), resolve(ctx), ctx)
    return _Step(slot, var.name, what, run, expect, call, args, fn, attrs, resolve)


#: ``hook(var, call)``: something (not None) for a call the runner carries out itself
Hook = Callable[[Var, Call], Any]


class Plan:
    """A function compiled for the interpreter. ``execute`` runs it on checked inputs.

    With a ``hook``, a call for which ``hook(var, call)`` is not None becomes a step the
    caller runs (its ``hook`` field holds what the hook returned); the plan alone cannot
    execute it.
    """

    def __init__(self, func: Function, hook: Hook | None = None):
        self.name = func.name  # not the function: the cache of plans holds it weakly
        c = _Compiler(func)
        self.param_slots = [c.slot(p) for p in func.params]
        self.steps: list[_Step] = []
        interned: dict = {}
        for binding in func.bindings():
            value = binding.value
            expect = _expected(binding.var.type, interned)
            if isinstance(value, Call):
                # the arguments are read before the bound var gets its slot (a var is never its own argument)
                step = _call_step(c, -1, binding.var, value, expect, hook)
                step.slot = c.slot(binding.var)
            else:
                runner = c.getter(value)
                step = _Step(c.slot(binding.var), binding.var.name, type(value).__name__, runner, expect, value)
            self.steps.append(step)
        self.result = c.getter(func.result)
        self.n_slots = len(c.names)

    def execute(self, inputs: Sequence[Any], values: Mapping[str, int], check: bool = True):
        """Run on inputs already matched to the parameters (see :func:`bind_params`)."""
        env: list[Any] = [None] * self.n_slots
        for i, a in zip(self.param_slots, inputs):
            env[i] = a
        ctx = RunContext(values)
        with np.errstate(all="ignore"):  # inf/nan are values here (masks use -inf), not errors
            self._steps(env, ctx, check)
        return self.result(env, ctx)

    def _steps(self, env: list[Any], ctx: RunContext, check: bool) -> None:
        for step in self.steps:
            try:
                out = step.run(env, ctx)
            except DistirError as err:
                raise RunError(f"binding '{step.name}' = {step.what}(...): {err}") from err
            except (ValueError, IndexError, TypeError, ArithmeticError, KeyError, AttributeError) as err:
                raise RunError(f"binding '{step.name}' = {step.what}(...) failed in numpy: {err}") from err
            if check and step.expect is not None:
                out = _check(step, step.expect, out, ctx, "")
            env[step.slot] = out


def _check(step: _Step, expect, out, ctx: RunContext, path: str):
    if isinstance(expect, list):
        if not isinstance(out, tuple) or len(out) != len(expect):
            raise RunError(
                f"binding '{step.name}'{path} = {step.what}: expected a tuple of {len(expect)}, got {type(out).__name__}"
            )
        return tuple(
            _check(step, e, o, ctx, f"{path}[{i}]") if e is not None else o for i, (e, o) in enumerate(zip(expect, out))
        )
    dtype, dims, static = expect
    if type(out) is not np.ndarray:
        out = np.asarray(out)
    if static:
        shape = dims
    else:  # dims belongs to the plan, so its id is stable for the run
        shape = ctx._shapes.get(id(dims))
        if shape is None:
            shape = ctx._shapes[id(dims)] = ctx.shape(dims)
    if out.shape != shape or out.dtype != dtype:
        raise RunError(
            f"binding '{step.name}'{path} = {step.what}: produced an array of shape {out.shape} and dtype {out.dtype}, "
            f"but its type says {shape} and {dtype}"
            + ("" if static else f" (with {', '.join(f'{k}={v}' for k, v in sorted(ctx.values.items()))})")
        )
    return out


_PLANS: weakref.WeakKeyDictionary[Function, dict] = weakref.WeakKeyDictionary()


def compile_function(func: Function, hook: Hook | None = None) -> Plan:
    """The (cached) plan of ``func``; ``hook`` marks the calls the caller runs (see :class:`Plan`)."""
    plans = _PLANS.get(func)
    if plans is None:
        plans = _PLANS[func] = {}
    plan = plans.get(hook)
    if plan is None:
        plan = plans[hook] = Plan(func, hook)
    return plan


def run(
    mod: IRModule | Function,
    *arrays: Any,
    func: str = "main",
    sym_values: Mapping[str, int] | None = None,
    check: bool = True,
):
    """Interpret ``func`` of ``mod`` on numpy ``arrays``; returns an array or a tuple of them.

    Symbolic dims are bound from the inputs' shapes (``sym_values`` gives any that cannot be
    worked out from them). With ``check`` every intermediate value is checked against its
    type, so a wrong op reference or an out-of-range symbolic slice is reported where it happens.
    """
    if isinstance(mod, Function):
        fn = mod
    else:
        if func not in mod:
            raise RunError(f"the module has no function '{func}' (it has: {', '.join(mod.functions) or 'none'})")
        fn = mod[func]
    plan = compile_function(fn)
    inputs, values = bind_params(fn, arrays, sym_values)
    return plan.execute(inputs, values, check)
