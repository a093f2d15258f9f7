"""Export a local-view distir module as a real TVM Relax IRModule.

Every op becomes the standard Relax op of the same name (``relax.op.*``), collectives
become ``R.call_dps_packed("runtime.disco.<collective>", ...)`` (see
:mod:`distir.tvm.relax.collectives`), and the worker's id comes from
``runtime.disco.worker_id``. Symbolic sizes stay symbolic: each function takes one
``R.Shape([v])`` parameter per size variable ``v`` (named ``size_<v>``, before the tensor
parameters), so ``relax.transform.BindSymbolicVars({"num_workers": 4})`` specializes the
module inside TVM and ``tvm.compile`` builds it.

The module also gets a function ``distir_disco_layout(size_...) -> R.Shape([workers,
groups])``: the Disco session the module needs. A runner calls it in its own thread
first, which also checks that the built module was specialized for the sizes it is given
(an error inside a Disco worker thread would abort the process).

Where Relax infers a shape it cannot prove equal to distir's, a ``R.match_cast`` to
distir's type keeps the shapes exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import relax, te, tirx

from ...ir import sym
from ...ir.expr import (
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
)
from ...ir.layout import (
    WORKER_ID,
    depends_on_worker,
    ids_are_contiguous,
    is_worker_var,
    position_var_name,
    worker_values,
)
from ...ir.mesh import DeviceMesh, Range
from ...ir.sym import Dim
from ...ir.types import DTensorType, PrimType, ShapeType, TensorType, TupleType, Type, np_dtype
from ...transform.count_variants import fold_variants, guard_of
from ..convention import DISCO_LAYOUT_FUNC, SIZE_PREFIX
from ..errors import TvmExportError, tvm_message
from .emitter import Exporter
from .session import SessionPlan

__all__ = ["DEFAULT_SUFFIX", "DISCO_LAYOUT_FUNC", "SIZE_PREFIX", "dispatch_callee", "program_at", "to_relax",
           "with_plans"]

#: a function with count variants keeps its name for the dispatch; its own body (the layout of every count
#: no variant's guard names) is exported as ``<name>__default``
DEFAULT_SUFFIX = "__default"

def to_relax(local_mod: IRModule, *, dispatch: bool = False) -> tvm.IRModule:
    """The TVM Relax form of a local-view module, symbolic or specialized (module docstring).

    Symbolic, by default each re-planned redistribute runs the plan made for every count and each
    re-blocking gathers at every count: no branch but the count variants' chain (below), and any TVM
    pipeline builds it.
    With ``dispatch`` (distir's own one build for every count) they choose at run time by the count
    (``R.If`` on the sizes, outside dataflow), so the one build moves at each count what a build for
    that count moves (:func:`program_at`). TVM 0.27's ``StaticPlanBlockMemory`` must then be off:
    it reuses storage across an ``If``'s branches and the run segfaults (docs/tvm.md);
    :func:`distir.tvm.disco.run.specialize_and_build` and distir's build cache turn it off.

    A function with count variants (``count_guard``, :mod:`distir.transform.count_variants`) is
    exported as each variant under its own name, the function's own body as ``<name>__default``, and
    ``<name>`` itself an ``R.If`` chain on the guarded count that calls the variant whose guard holds,
    ``<name>__default`` otherwise (:func:`dispatch_callee`), with or without ``dispatch``: that chain
    only calls functions, so it allocates nothing that ``StaticPlanBlockMemory`` could share
    between its branches, and TVM's default pipeline builds it (tested at every branch)."""
    from ... import ops  # noqa: F401  (declares every op)
    from .ops import emit_op  # noqa: F401  (the op table, loaded before the first binding)

    check_local_view(local_mod)
    if not dispatch:
        local_mod = with_plans(local_mod)
    groups = _count_dispatches(local_mod)
    plan = SessionPlan.for_module(with_plans(local_mod))  # the meshes the plans' steps run on
    bb = relax.BlockBuilder()
    for func in local_mod.functions.values():
        if func.name not in groups and guard_of(func) is None:
            _FunctionExporter(bb, _split_for_dispatch(func) if dispatch else func, plan, dispatch).run()
    for name, (symbol, arms) in groups.items():
        _export_dispatch(bb, local_mod, name, symbol, arms, plan, dispatch)
    _emit_layout_function(bb, plan)
    out = bb.finalize()
    try:
        relax.analysis.well_formed(out)
    except Exception as err:  # noqa: BLE001 - TVM raises several error types
        raise TvmExportError(f"TVM rejects the exported module: {tvm_message(err)}") from None
    return out


def _count_dispatches(mod: IRModule) -> dict[str, tuple[str, list[tuple[tuple[int, ...], str]]]]:
    """For each function with count variants: (the guarded symbol, [(counts, variant name)]). One line
    where the variants cannot share one dispatch: guards on two symbols or naming one count twice,
    another parameter list, or a function already named ``<name>__default``."""
    groups: dict[str, tuple[str, list]] = {}
    for func in mod.functions.values():
        g = guard_of(func)
        if g is None:
            continue
        of, symbol, counts = g
        if of not in mod.functions or guard_of(mod.functions[of]) is not None:
            raise TvmExportError(f"@{func.name} is a count variant of @{of}, which the module does not have "
                                 "as a function of its own")
        have, arms = groups.setdefault(of, (symbol, []))
        if have != symbol:
            raise TvmExportError(f"@{of}'s count variants are guarded on both '{have}' and '{symbol}'; one "
                                 "dispatch chooses by one count")
        taken = {c for cs, _ in arms for c in cs}
        if taken & set(counts):
            raise TvmExportError(f"@{func.name} and another variant of @{of} both claim {symbol} = "
                                 f"{sorted(taken & set(counts))}")
        arms.append((counts, func.name))
    for of, (_, arms) in groups.items():
        if of + DEFAULT_SUFFIX in mod.functions:
            raise TvmExportError(f"@{of} has count variants and its body would be exported as "
                                 f"@{of}{DEFAULT_SUFFIX}, a name the module already uses; rename it")
        want = mod.functions[of].params
        for _, name in arms:
            params = mod.functions[name].params
            if len(params) != len(want) or any(_rank_dtype(a.type) != _rank_dtype(b.type)
                                               for a, b in zip(params, want)):
                raise TvmExportError(f"@{name} is a count variant of @{of} but takes other parameters "
                                     f"({', '.join(str(p.type) for p in params)})")
        arms.sort(key=lambda arm: arm[0])
    return groups


def _rank_dtype(t: Type):
    """What every variant's parameter must share: a tensor's rank and dtype, any other type itself."""
    return (len(t.shape), t.dtype) if isinstance(t, TensorType) else str(t)


def dispatch_callee(mod: IRModule, func: str, values: dict[str, int]) -> str:
    """The function of ``to_relax(mod, dispatch=True)`` that ``func`` runs at ``values``: the count
    variant whose guard holds, ``<func>__default`` where it has variants and none holds, else
    ``func`` itself (whose signature a run's pieces are checked against)."""
    if not any((guard_of(f) or ("",))[0] == func for f in mod.functions.values()):
        return func
    src = fold_variants(mod, values).get(func, func)
    return func + DEFAULT_SUFFIX if src == func else src


def _export_dispatch(bb: relax.BlockBuilder, mod: IRModule, name: str, symbol: str, arms, plan: SessionPlan,
                     dispatch: bool) -> None:
    """``name``'s body as ``<name>__default``, each variant under its own name (all taking the same
    size parameters), and ``name`` as the choice between them by ``symbol`` at run time; ``dispatch``:
    whether the members choose their plans at run time too (:func:`to_relax`)."""
    members = [(name + DEFAULT_SUFFIX, mod.functions[name])] + [(v, mod.functions[v]) for _, v in arms]
    exporters = [(relax_name, _FunctionExporter(bb, _split_for_dispatch(f) if dispatch else f, plan, dispatch))
                 for relax_name, f in members]
    names = sorted({symbol}.union(*(e.names for _, e in exporters)))
    for relax_name, e in exporters:
        e.use_size_names(names)
        e.run(relax_name)
    head = _FunctionExporter(bb, mod.functions[name], plan, True)
    head.use_size_names(names)
    head.run_dispatch(symbol, arms, [f for _, f in members])


def with_plans(mod: IRModule, values: dict[str, int] | None = None) -> IRModule:
    """Each ``R.ccl.replan`` (a redistribute planned for the bound count) as the steps of the plan made
    for every count. With ``values``, only those the export runs that plan for at ``values`` (its mesh's
    sizes outside :func:`replan_envs`); the others are left for specialize to plan for the count."""
    from ...transform.legalize_redistribute import expand_replans

    def general_at(call: Call) -> bool:
        return values is None or not _dispatched_at(call.attrs["device_mesh"], values)

    funcs = {name: expand_replans(f, exact_only=False, only=general_at) for name, f in mod.functions.items()}
    if all(funcs[n] is f for n, f in mod.functions.items()):
        return mod
    return mod.replace(functions=funcs)


def program_at(mod: IRModule, values: dict[str, int], *, dispatch: bool = True) -> IRModule:
    """The distir program the export of ``mod`` runs at ``values``: ``mod`` specialized to them when
    it is exported specialized. Exported symbolic without ``dispatch`` (:func:`to_relax`'s default),
    the plans made for every count, specialized to ``values`` (where a re-blocking's blockings agree
    at ``values`` this program drops it, while that export still gathers: its bytes are not
    counted). Exported with ``dispatch``, each re-planned redistribute runs the plan made
    for the count where its mesh's sizes are among :func:`replan_envs` (1 to 8 workers) and the plan
    made for every count elsewhere, and each re-blocking moves nothing where its blockings agree at
    the count (the export's run-time dispatch). Its steps and bytes are what Disco's collectives
    carry (docs/tvm.md)."""
    from ...transform.specialize import specialize

    return specialize(with_plans(mod, None if not dispatch else values), values)


def _dispatched_at(mesh: DeviceMesh, values: dict[str, int]) -> bool:
    """Does the export run the plan made for the count at ``values`` on ``mesh``?"""
    from ...transform.redistribute_plan import replan_envs

    names = set().union(*(sym.free_vars(d) for d in mesh.shape))
    if not names:
        return True  # concrete: specialize's plan is the export's
    return {k: values.get(k) for k in names} in replan_envs(mesh.shape)


def _dispatches(b: Binding) -> bool:
    """A binding whose Relax form chooses at run time by the count: a re-planned redistribute on a
    mesh of symbolic sizes, or a re-blocking that may move data (point to point, chosen by the worker
    id and, where its blockings agree at some counts only, by the count)."""
    from ...ir.steps import get_step
    from ...ops.collectives import regroup_blocks

    v = b.value
    if not isinstance(v, Call):
        return False
    if v.op is get_step("replan").local_op:
        return any(sym.is_symbolic(d) for d in v.attrs["device_mesh"].shape)
    if v.op is get_step("regroup").local_op:
        before, after = regroup_blocks(v.op.full_attrs(v.attrs))
        return not sym.equal(before, after)  # its sends and receives are chosen by the worker id
    return False


def _point_to_point(b: Binding) -> bool:
    """A re-blocking that may move data: its Relax form calls Disco's send and receive."""
    from ...ir.steps import get_step

    return isinstance(b.value, Call) and b.value.op is get_step("regroup").local_op and _dispatches(b)


def _split_for_dispatch(func: Function) -> Function:
    """``func`` with each binding that dispatches on the count in a block of its own outside dataflow
    (Relax allows ``R.If`` only there); the dataflow blocks around it are kept."""
    from ...ir.expr import Block

    blocks, changed = [], False
    for block in func.blocks:
        if not block.is_dataflow or not any(_dispatches(b) for b in block.bindings):
            blocks.append(block)
            continue
        changed, run = True, []
        for b in block.bindings:
            if _dispatches(b):
                if run:
                    blocks.append(Block(tuple(run), True))
                    run = []
                blocks.append(Block((b,), False))
            else:
                run.append(b)
        if run:
            blocks.append(Block(tuple(run), True))
    return func.replace(blocks=tuple(blocks)) if changed else func


def size_names(exprs) -> list[str]:
    """Sorted names of the size variables in ``exprs`` (every free variable but ``worker_id``)."""
    names: set[str] = set()
    for e in exprs:
        names |= sym.free_vars(e)
    names = {n for n in names if not is_worker_var(n)}
    return sorted(names)


def _emit_layout_function(bb: relax.BlockBuilder, plan: SessionPlan) -> None:
    total, groups = plan.total, plan.num_groups
    names = size_names([total, groups])
    fresh = {n: tirx.Var(n, "int64") for n in names}
    params = [relax.Var(SIZE_PREFIX + n, relax.ShapeType([fresh[n]])) for n in names]
    with bb.function(DISCO_LAYOUT_FUNC, params):
        bb.emit_func_output(relax.ShapeExpr([_prim(sym.substitute(total, fresh)), _prim(sym.substitute(groups, fresh))]))


_prim = sym.to_prim


# ---------------------------------------------------------------- free variables of a function


def _dims_of_type(t: Type | None):
    if isinstance(t, (TensorType, DTensorType)):
        yield from t.shape
        if isinstance(t, DTensorType):
            yield from t.mesh.shape
    elif isinstance(t, TupleType):
        for f in t.fields:
            yield from _dims_of_type(f)
    elif isinstance(t, ShapeType) and t.values is not None:
        yield from t.values


def _dims_of_value(v: Any):
    if isinstance(v, (int, float, str, bool)) or v is None:
        return
    if isinstance(v, sym.PrimExpr):
        yield v
    elif isinstance(v, DeviceMesh):
        yield from v.shape
        if isinstance(v.device_ids, Range):  # ids may depend on a size that no shape uses
            yield v.device_ids.start
            yield v.device_ids.stop
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _dims_of_value(x)


def _dims_of_expr(e: Expr):
    if isinstance(e, PrimValue):
        yield e.value
    elif isinstance(e, ShapeExpr):
        yield from e.values
    elif isinstance(e, Tuple):
        for f in e.fields:
            yield from _dims_of_expr(f)
    elif isinstance(e, Call):
        for a in e.args:
            yield from _dims_of_expr(a)
        for v in e.attrs.values():
            yield from _dims_of_value(v)


def function_dims(func: Function):
    """Every symbolic size a function mentions: types, shapes, attributes."""
    for p in func.params:
        yield from _dims_of_type(p.type)
    for b in func.bindings():
        yield from _dims_of_type(b.var.type)
        yield from _dims_of_expr(b.value)


# ---------------------------------------------------------------- one function


class _FunctionExporter(Exporter):
    """Emits one distir function into a BlockBuilder; the op table calls back into it."""

    def __init__(self, bb: relax.BlockBuilder, func: Function, plan: SessionPlan, dispatch: bool = False):
        self.bb = bb
        self.func = func
        self.plan = plan
        dims = list(function_dims(func))
        used = set().union(*(sym.free_vars(d) for d in dims)) if dims else set()
        self.uses_worker_id = any(is_worker_var(n) for n in used) or _needs_worker(func, plan) or any(
            isinstance(b.value, Call) and b.value.op.name == "ccl.replan" for b in func.bindings())
        # a worker's position in each mesh listed out of order (collectives may need it too)
        self.position_names = sorted({position_var_name(m) for m in plan.meshes if not ids_are_contiguous(m)})
        # a collective may gather from every worker of the session, whose size may name a mesh size the
        # function's own types do not (a static mesh beside a symbolic one): that size is a parameter too
        self.names = size_names(dims + [plan.total] if _calls_collectives(func) else dims)
        self.vars: dict[str, tirx.Var] = {n: tirx.Var(n, "int64") for n in self.names}
        self.env: dict[Var, relax.Expr] = {}
        self.worker_var: tirx.Var | None = None
        self._worker_tensor: relax.Expr | None = None
        self.position_vars: dict[str, tirx.Var] = {}  # a worker's position in meshes listed out of order
        self._position_tensors: dict[str, relax.Expr] = {}
        self._scalars: dict[Any, relax.Expr] = {}
        self.binding: Binding | None = None
        self.in_dataflow = False
        self.dispatch = dispatch

    def use_size_names(self, names: list[str]) -> None:
        """Take one ``size_<v>`` parameter per name of ``names`` (a superset of the function's own): the
        functions one dispatch calls all take the dispatching function's size parameters."""
        self.names = list(names)
        self.vars = {n: tirx.Var(n, "int64") for n in self.names}

    # -------------------------------------------------------------- helpers for the op table

    def dim(self, d: Dim):
        """A distir dim as a PrimExpr of this function's own TVM variables (ints stay ints)."""
        if isinstance(d, int):
            return d
        values = dict(self.vars)
        values.update(self.position_vars)
        if self.worker_var is not None:
            values[WORKER_ID] = self.worker_var
        elif depends_on_worker(d):
            raise self.error("uses the worker id, which this function does not read")
        return sym.substitute(d, values)

    def dims(self, ds) -> list:
        return [self.dim(d) for d in ds]

    def attr(self, v: Any) -> Any:
        """Attribute values: dims become PrimExprs, lists stay lists."""
        if isinstance(v, bool) or v is None or isinstance(v, (float, str)):
            return v
        if isinstance(v, (int, sym.PrimExpr)):
            return self.dim(v)
        if isinstance(v, (list, tuple)):
            return [self.attr(x) for x in v]
        return v

    def emit(self, expr: relax.Expr, name: str = "") -> relax.Var:
        try:
            return self.bb.emit(expr, name_hint=name)
        except Exception as err:  # noqa: BLE001 - TVM raises several error types
            raise self.error(f"TVM rejects the Relax form of this op: {tvm_message(err)}") from None

    def const(self, value, dtype: str) -> relax.Expr:
        return relax.const(np.array(value, dtype=np_dtype(dtype)), dtype)

    def scalar(self, d: Dim, dtype: str = "int64") -> relax.Expr:
        """A 0-d tensor holding ``d``, which may depend on the worker id.

        Relax TIR kernels taking the worker id as a scalar argument break TVM 0.27's
        FuseTIR, so worker-dependent values are computed with tensor ops from the id tensor
        (see docs/tvm.md); a value of sizes only goes through ``R.arange``.
        """
        value = self._scalar_int64(d)
        if dtype == "int64":
            return value
        key = (sym.key(d), dtype)
        if key not in self._scalars:
            self._scalars[key] = self.emit(relax.op.astype(value, dtype))
        return self._scalars[key]

    def _scalar_int64(self, d: Dim) -> relax.Expr:
        if isinstance(d, int):
            return self.const(d, "int64")
        key = (sym.key(d), "int64")
        if key not in self._scalars:
            self._scalars[key] = self._emit_scalar_int64(d)
        return self._scalars[key]

    def _emit_scalar_int64(self, d: Dim) -> relax.Expr:
        if isinstance(d, tirx.Var) and str(d.name) in self._position_tensors:
            return self._position_tensors[str(d.name)]
        if not any(is_worker_var(n) for n in sym.free_vars(d)):
            e = self.dim(d)
            ar = self.emit(relax.op.arange(e, e + 1, 1, "int64"))
            return self.emit(relax.op.reshape(ar, relax.ShapeExpr([])))
        if isinstance(d, tirx.Var):
            return self.worker_tensor()
        ops = {
            "Add": relax.op.add,
            "Sub": relax.op.subtract,
            "Mul": relax.op.multiply,
            "FloorDiv": relax.op.floor_divide,
            "FloorMod": relax.op.floor_mod,
            "Min": relax.op.minimum,
            "Max": relax.op.maximum,
        }
        kind = type(d).__name__
        if kind not in ops:
            raise self.error(f"cannot compute {sym.to_str(d)} on the worker")
        a, b = self._scalar_int64(sym.normalize(d.a)), self._scalar_int64(sym.normalize(d.b))
        return self.emit(ops[kind](a, b))

    def worker_tensor(self) -> relax.Expr:
        if self._worker_tensor is None:
            raise self.error("uses the worker id, which this function does not read")
        return self._worker_tensor

    def error(self, msg: str) -> TvmExportError:
        b = self.binding
        if b is None:
            return TvmExportError(f"@{self.func.name}: {msg}", self.func.span)
        what = f"R.{b.value.op.name}" if isinstance(b.value, Call) else type(b.value).__name__
        return TvmExportError(f"@{self.func.name}, binding '{b.var.name}' ({what}): {msg}", b.span or b.var.span)

    # -------------------------------------------------------------- types

    def relax_type(self, t: Type) -> relax.Type:
        if isinstance(t, TensorType):
            return relax.TensorType(self.dims(t.shape), t.dtype)
        if isinstance(t, TupleType):
            return relax.TupleType([self.relax_type(f) for f in t.fields])
        if isinstance(t, ShapeType):
            return relax.ShapeType(self.dims(t.values)) if t.values is not None else relax.ShapeType(ndim=t.ndim)
        if isinstance(t, PrimType):
            return tvm.ir.PrimType(t.dtype)
        if isinstance(t, DTensorType):
            raise self.error(f"type {t} is still a distributed tensor; run the distribute pipeline first")
        raise self.error(f"type {t} has no Relax form")

    def _same(self, have: relax.Type, want: Type) -> bool:
        """Is Relax's type ``have`` provably distir's ``want``? Raises if they disagree outright."""
        if isinstance(want, TensorType):
            if not isinstance(have, relax.TensorType):
                raise self.error(f"TVM types the result as {have}, distir as {want}")
            if str(have.dtype) != want.dtype or (have.ndim != -1 and have.ndim != want.ndim):
                raise self.error(f"TVM types the result as {have}, distir as {want}")
            shape = have.shape
            if not isinstance(shape, relax.ShapeExpr):
                return False
            return all(_proves_same(h, w) for h, w in zip(shape.values, want.shape))
        if isinstance(want, TupleType):
            if not isinstance(have, relax.TupleType) or len(have.fields) != len(want.fields):
                raise self.error(f"TVM types the result as {have}, distir as {want}")
            return all(self._same(h, w) for h, w in zip(have.fields, want.fields))
        return True

    # -------------------------------------------------------------- expressions and bindings

    def value(self, e: Expr) -> relax.Expr:
        """A distir leaf value (argument) in Relax."""
        if isinstance(e, Var):
            try:
                return self.env[e]
            except KeyError:
                raise self.error(f"'{e.name}' is used before it is defined") from None
        if isinstance(e, Constant):
            return relax.const(e.data, str(e.data.dtype))
        if isinstance(e, PrimValue):
            return relax.prim_value(tirx.IntImm(e.dtype, e.value) if isinstance(e.value, int) else self.dim(e.value))
        if isinstance(e, StringImm):
            return relax.StringImm(e.value)
        if isinstance(e, ShapeExpr):
            return relax.ShapeExpr([_prim(d) for d in self.dims(e.values)])
        if isinstance(e, Tuple):
            return relax.Tuple([self.value(f) for f in e.fields])
        if isinstance(e, TupleGetItem):
            return relax.TupleGetItem(self.value(e.tuple_value), e.index)
        raise self.error(f"{type(e).__name__} values have no Relax form here")

    def bind(self, b: Binding, is_output: bool) -> None:
        from .ops import emit_op

        self.binding = b
        if isinstance(b.value, Call) and b.value.op.name == "ccl.replan":
            expr = self._replan(b)
            self.binding = b
        elif isinstance(b.value, Call):
            expr = emit_op(self, b.value)
        else:
            expr = self.value(b.value)
        name = b.var.name
        expose = is_output and self.in_dataflow
        try:
            expr = self.bb.normalize(expr)
        except Exception as err:  # noqa: BLE001 - TVM raises several error types
            raise self.error(f"TVM rejects the Relax form of this op: {tvm_message(err)}") from None
        if self._same(expr.ty, b.var.type):
            var = self.bb.emit_output(expr, name_hint=name) if expose else self.emit(expr, name)
        else:
            # Relax cannot prove the shape distir knows: check it at run time and keep distir's type
            var = self.emit(expr, name + "_inferred" if expose else name)
            var = self.bb.match_cast(var, self.relax_type(b.var.type), name_hint=name + "_cast" if expose else name)
            if expose:
                var = self.bb.emit_output(var, name_hint=name)
        self.env[b.var] = var
        self.binding = None

    # -------------------------------------------------------------- dispatch on the count at run time

    def choose(self, arms, otherwise) -> relax.Expr:
        """``R.If`` on each arm's condition (a boolean PrimExpr of the sizes) in turn, else ``otherwise``:
        each a function that emits its branch's bindings and returns its value. Outside dataflow only."""
        if self.in_dataflow:
            raise self.error("a choice on the count inside a dataflow block (the export splits blocks first)")
        (cond, build), rest = arms[0], arms[1:]
        then = self._branch(build)
        other = self._branch((lambda: self.emit(self.choose(rest, otherwise))) if rest else otherwise)
        return relax.If(relax.prim_value(cond), then, other)

    def _branch(self, build) -> relax.SeqExpr:
        saved = dict(self._scalars)  # values made in a branch are not visible after it
        self.bb._begin_binding_block()
        try:
            result = build()
        finally:
            block = self.bb._end_block()
            self._scalars = saved
        return relax.SeqExpr([block], result)

    def _replan(self, b: Binding) -> relax.Expr:
        """A re-planned redistribute: the plan made for each count of :func:`replan_envs` where the count
        is that (what specialize writes there), the plan made for every count elsewhere."""
        from ...transform.legalize_redistribute import replan_bindings
        from ...transform.redistribute_plan import replan_envs

        call, var = b.value, b.var
        mesh = call.attrs["device_mesh"]
        names = iter(range(1 << 30))

        def fresh(hint: str) -> str:
            return f"{hint}_{next(names)}"

        def run(bindings, result: Var, x: Expr) -> relax.Expr:
            for step in bindings:
                self.bind(step, False)
            return self.env[result] if bindings else self.value(x)

        def at(env: dict[str, int]) -> relax.Expr:
            concrete = mesh.substitute(env)
            x = call.args[0]
            xk = Var(fresh(x.name), x.type.substitute(env), x.span)
            self.env[xk] = self.bb.match_cast(self.value(x), self.relax_type(xk.type), name_hint=xk.name)
            vk = Var(fresh(var.name), var.type.substitute(env), var.span)
            attrs = dict(call.attrs)
            attrs["device_mesh"] = concrete
            steps = replan_bindings(Call(call.op, (xk,), attrs, call.span), xk, vk, fresh)
            # the session here is the one of this count: its meshes at these sizes
            saved = self.plan
            self.plan = SessionPlan(sym.normalize(sym.substitute(saved.total, env)),
                                    tuple(m.substitute(env) for m in saved.meshes))
            try:
                return run(steps, vk, xk)
            finally:
                self.plan = saved

        def general() -> relax.Expr:
            return run(replan_bindings(call, call.args[0], var, fresh), var, call.args[0])

        arms = [(_all_equal(self.dims([sym.var(n) for n in sorted(env)]), list(env.values())), lambda env=env: at(env))
                for env in replan_envs(mesh.shape)]
        return self.choose(arms, general) if arms else general()

    def _emit_worker_id(self) -> None:
        shape = self.bb.emit(
            relax.op.call_pure_packed("runtime.disco.worker_id", ty_args=relax.ShapeType(ndim=1)), name_hint="worker"
        )
        self.worker_var = tirx.Var(WORKER_ID, "int64")
        self.bb.match_cast(shape, relax.ShapeType([self.worker_var]), name_hint="worker_shape")
        # the id as a tensor too, written by a kernel of the build's target: a device kernel must not read a
        # host tensor (R.shape_to_tensor makes one), and the kernel is opaque so that FuseOps leaves it alone
        ids = self.bb.emit(
            relax.call_tir(_worker_index_kernel(self.bb), [relax.prim_value(self.worker_var)],
                           relax.TensorType([1], "int64")),
            name_hint="worker_ids",
        )
        self._worker_tensor = self.bb.emit(relax.op.reshape(ids, relax.ShapeExpr([])), name_hint="worker_index")
        for name in self.position_names:
            self._emit_position(name)

    def _emit_position(self, name: str) -> None:
        """This worker's position in a mesh listed out of order: a lookup in a table by worker id,
        as a tensor and as a shape variable (``tensor_to_shape`` + ``match_cast``)."""
        mesh = next(m for m in self.plan.meshes if not ids_are_contiguous(m) and position_var_name(m) == name)
        # up to one past the mesh's largest id, whose entry (0: not a member) the clip gives every later
        # worker: the table does not depend on the session's size, which may be symbolic
        table = [worker_values([mesh], w)[name] for w in range(max(mesh.device_ids) + 2)]
        pos = self.bb.emit(relax.op.take(self.const(table, "int64"), self._worker_tensor, axis=0, mode="clip"), name_hint="position")
        self._position_tensors[name] = pos
        shape = self.bb.emit(relax.op.tensor_to_shape(relax.op.reshape(pos, relax.ShapeExpr([1]))), name_hint="position_shape")
        var = tirx.Var(name, "int64")
        self.bb.match_cast(shape, relax.ShapeType([var]), name_hint="position_value")
        self.position_vars[name] = var

    def run_dispatch(self, symbol: str, arms, members: list[Function]) -> None:
        """This function as a choice at run time by the count ``symbol``: ``if symbol == c ...:`` a call of
        the variant laid out for those counts, else of ``<name>__default``, each given every argument.
        A parameter the variants lay out alike keeps its type; one they lay out differently is typed by
        its rank and dtype only (the called function checks its own shapes)."""
        f = self.func
        size_params = [relax.Var(SIZE_PREFIX + n, relax.ShapeType([self.vars[n]])) for n in self.names]
        params = []
        for i, p in enumerate(f.params):
            types = [m.params[i].type for m in members]
            if all(str(t) == str(p.type) for t in types) or not isinstance(p.type, TensorType):
                params.append(relax.Var(p.name, self.relax_type(p.type)))
            else:
                params.append(relax.Var(p.name, relax.TensorType(dtype=p.type.dtype, ndim=len(p.type.shape))))
        count = self.vars[symbol]
        with self.bb.function(f.name, size_params + params):
            gvs = {gv.name_hint: gv for gv in self.bb.get().get_global_vars()}

            def call(callee: str):
                return lambda: self.emit(relax.Call(gvs[callee], size_params + params), callee + "_result")

            chosen = self.choose([(_any_equal(count, counts), call(v)) for counts, v in arms],
                                 call(f.name + DEFAULT_SUFFIX))
            self.bb.emit_func_output(self.emit(chosen, "result"))

    def run(self, name: str | None = None) -> None:
        """Emit the function (under ``name``, default its own)."""
        f = self.func
        size_params = [relax.Var(SIZE_PREFIX + n, relax.ShapeType([self.vars[n]])) for n in self.names]
        params = []
        for p in f.params:
            rv = relax.Var(p.name, self.relax_type(p.type))
            self.env[p] = rv
            params.append(rv)
        used_later = _used_after_each_block(f)
        # Disco's send / recv (a regroup's point-to-point runs) are impure calls in a function that is
        # pure to its callers: what it sends is what its result needs; force_pure keeps the calls in place
        moves = self.dispatch and any(_point_to_point(b) for b in f.bindings())
        attrs = {"relax.force_pure": True} if moves else None
        with self.bb.function(name or f.name, size_params + params, attrs=attrs):
            if self.uses_worker_id:
                self._emit_worker_id()
            for i, block in enumerate(f.blocks):
                self._scalars.clear()  # values of one dataflow block are not visible in the next
                if block.is_dataflow:
                    self.in_dataflow = True
                    with self.bb.dataflow():
                        for b in block.bindings:
                            self.bind(b, b.var in used_later[i])
                    self.in_dataflow = False
                else:
                    for b in block.bindings:
                        self.bind(b, False)
            result = self.value(f.result)
            self.bb.emit_func_output(result)


WORKER_INDEX_KERNEL = "distir_worker_index"
_OPAQUE = 8  # relax.OpPatternKind.kOpaque: FuseOps never fuses the kernel (see docs/tvm.md, FuseTIR)


def _worker_index_kernel(bb: relax.BlockBuilder):
    """The module's ``distir_worker_index(worker: int64, out: (1,) int64)`` kernel (added once)."""
    mod = bb.get()
    for gv in mod.get_global_vars():
        if gv.name_hint == WORKER_INDEX_KERNEL:
            return gv
    worker = tirx.Var("worker", "int64")
    out = te.compute((1,), lambda _: worker, name="worker_index")
    func = te.create_prim_func([worker, out]).with_attrs({"op_pattern": _OPAQUE, "global_symbol": WORKER_INDEX_KERNEL})
    return bb.add_func(func, WORKER_INDEX_KERNEL)


def _proves_same(have, want: Dim) -> bool:
    """Is a dim of a Relax type (in the function's own TVM variables) provably distir's ``want``?

    The exporter gives each Relax function its own size variables (a Relax module does not
    share a TIR variable between functions), which :mod:`distir.ir.sym`'s analyzer does not
    know. :func:`sym.from_tvm` renames them back to distir's variables, so the comparison is
    made by the one analyzer, which knows sizes and the worker id are non-negative. A Relax
    expression distir does not use is not provably equal (the binding gets a match_cast)."""
    try:
        h = sym.from_tvm(have)
    except sym.SymbolicError:
        return False
    return sym.prove_equal(h, want)



def _all_equal(dims, values) -> Any:
    """The boolean PrimExpr ``dims[0] == values[0] and ...``."""
    cond = None
    for d, v in zip(dims, values):
        eq = tirx.EQ(_prim(d), tirx.IntImm("int64", v))
        cond = eq if cond is None else tirx.And(cond, eq)
    return cond


def _any_equal(count, counts) -> Any:
    """The boolean PrimExpr ``count == counts[0] or ...``."""
    cond = None
    for c in counts:
        eq = tirx.EQ(count, tirx.IntImm("int64", c))
        cond = eq if cond is None else tirx.Or(cond, eq)
    return cond


def _used_after_each_block(f: Function) -> list[set[Var]]:
    """For block i: the vars bound in it that later blocks or the result read."""
    from ...ir.expr import leaf_vars

    out: list[set[Var]] = []
    later: set[Var] = set(leaf_vars(f.result))
    for block in reversed(f.blocks):
        bound = {b.var for b in block.bindings}
        out.append(bound & later)
        for b in block.bindings:
            later |= set(leaf_vars(b.value))
    return list(reversed(out))


def _calls_collectives(func: Function) -> bool:
    from .collectives import collective_ops

    ops = collective_ops()
    return any(isinstance(b.value, Call) and b.value.op.name in ops for b in func.bindings())


def _needs_worker(func: Function, plan: SessionPlan) -> bool:
    """Collectives whose Relax form reads the worker's own coordinate."""
    from .collectives import needs_worker_id

    return any(isinstance(b.value, Call) and b.value.op.name != "ccl.replan" and needs_worker_id(b.value, plan)
               for b in func.bindings())


def check_local_view(mod: IRModule) -> None:
    """Raise when a module still has distributed tensors (export needs the local view)."""
    for f in mod.functions.values():
        for p in f.params:
            if isinstance(p.type, DTensorType):
                raise TvmExportError(
                    f"@{f.name}: parameter '{p.name}' is a distributed tensor; run the distribute pipeline "
                    "(propagate, legalize, lower to the local view) before exporting to TVM",
                    p.span,
                )

