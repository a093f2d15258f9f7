"""Every count from one: each count computes what one of finitely many counts run computes.

The argument (docs/verify.md, "Every count"): bind every size but the count ``W``. The mesh has
one axis of ``W`` devices and others of fixed sizes; a worker's *image* at a count ``R`` has its
coordinates, the count's one clamped to ``R - 1``. A count ``R`` *stands for* a larger count
``W`` when every index formula ``e`` of the local-view function (shapes, attributes, the blocks
the inputs and outputs are cut in, those a collective cuts by) has at each worker of ``W`` its
value at the worker's image at ``R``, and every collective keeps that correspondence at ``R``;
then each worker at ``W`` runs, statement by statement, what its image runs at ``R`` on the
same data, and the outputs are the same. The collectives covered, and why:

- along an axis of fixed size: each group's image is a group, member for member;
- ``all_reduce`` by ``max``/``min``: a maximum over a multiset of values is the maximum over
  the set, and the workers past coordinate ``R - 1`` repeat its value;
- ``all_reduce`` by ``sum``: the part at ``R`` of the workers at coordinate ``R - 1`` is zero
  for every input (a forward analysis: a mask of length 0, a product with a zero, ...), so more
  copies add nothing (exactly for integers, in real arithmetic for floats);
- ``all_gather`` and ``regroup`` (an ``extent``): the gathered prefix of ``extent`` elements
  lies in the blocks of coordinates ``< R - 1`` and every block past it is padding (zeros);
- ``exchange`` and ``local_shard``: by the formulas of the layouts and blocks they cut.

``R = W + 1`` stands for ``W`` *from above* under the same formulas (each worker of ``W`` as the
same worker at ``R``) and lemmas, when no all-reduce by max or min runs along the count's axis.

Let ``T`` be the largest integer constant in the formulas and the horizon ``H = T + 1``. Counts
up to ``H`` are sorted into classes by evaluating every formula at every count and worker; every
count past ``H`` is proved with z3 to be stood for by the last count run (or by ``H``, run for it).

Everything else (another collective, a partial or block layout of an input read or an output, a
mesh not of that form, a replan, a formula z3 cannot settle) is refused by name: the caller says
"not proved" and names it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ..errors import DistirError
from ..ir import sym
from ..ir.expr import Call, Constant, Function, PrimValue, ShapeExpr, Tuple, TupleGetItem, Var
from ..ir.layout import (WORKER_ID, block_start_expr, coord_expr, expand_strided, level_extents, local_shape,
                         valid_length_expr)
from ..ir.mesh import DeviceMesh, Range
from ..ir.op import OpDef
from ..ir.types import DTensorType, TensorType, TupleType

__all__ = ["Cutoff", "NotProved", "cutoff"]

_FOLD_NAMES = ("add", "sub", "mul", "floordiv", "floormod", "min", "max")
_MAX_EVALUATIONS = 20_000_000  # formulas x workers of every count up to the horizon (160 MB of int64)
_SOLVER_MS = 5000  # per formula; an answer other than "unsat" in time is a refusal, never a pass
_COLLECTIVES = {"ccl.all_reduce", "ccl.all_gather", "ccl.regroup", "ccl.exchange"}
# ops whose result is zero wherever one input is (real arithmetic: finite values)
_ZERO_IF_ANY = {"matmul", "multiply"}
# ops whose result is zero when every tensor input is
_ZERO_IF_ALL = {"add", "subtract", "concat", "maximum", "minimum"}
# ops that move, select or reduce by a sum the elements of their first input: zero stays zero
_ZERO_IF_FIRST = {"reshape", "permute_dims", "strided_slice", "expand_dims", "squeeze", "broadcast_to",
                  "negative", "sum", "astype", "take", "shard_take", "flatten", "split", "mask_tail", "tril", "triu"}


class NotProved(DistirError):
    """A construct the every-count argument does not cover (its message names it)."""


@dataclass(frozen=True)
class Cutoff:
    """Every count ``W >= 1`` computes, for every input, what one of ``counts`` computes: each count
    up to ``horizon`` what the count run before it (or itself), each count past it what ``tail`` does."""

    counts: tuple[int, ...]  # the counts to run, ascending
    horizon: int  # T + 1: counts up to it shown equal by evaluating every formula at every worker
    tail: int  # the count run that every count past the horizon computes (proved with z3)
    formulas: int  # the distinct index formulas that depend on the count or the worker
    idle_sums: int  # all-reduces by sum whose idle part was shown to be zero
    stood_for: tuple = ()  # (count, the count run that stands for it) of each count up to the horizon not run

    def standing(self, count: int) -> int:
        """The count run whose outputs ``count``'s are (for every input)."""
        if count in self.counts:
            return count
        return dict(self.stood_for).get(count, self.tail)

    @property
    def skipped(self) -> int:
        """How many counts up to the horizon were shown equal to a count run instead of run."""
        return self.horizon - sum(1 for c in self.counts if c <= self.horizon)


def cutoff(func: Function, symbol: str, dims: Mapping[str, int], *, max_horizon: int | None = None,
           guarded: Collection[int] = ()) -> Cutoff:
    """The counts that stand for every count, for the local-view ``func`` with every size but
    ``symbol`` bound to ``dims``; raises :class:`NotProved` naming what the argument does not cover
    (and when the horizon ``T + 1`` is past ``max_horizon``). ``guarded``: the counts at which
    another function (a count variant) replaces ``func``: each is run, none stands for another."""
    from ..transform.lower_to_local import GLOBAL_PARAMS, GLOBAL_RESULT

    ctx = _Context(symbol, dict(dims))
    formulas: list = []
    lemmas: list = []  # (what, extent, block): the extent must lie in the blocks of the workers before the last
    sums: list[tuple[str, Var]] = []  # all-reduces by sum along the count's axis
    used = _used_vars(func)
    for p, t in zip(func.params, func.attrs.get(GLOBAL_PARAMS) or ()):
        if p in used:  # an input nothing reads cannot change an output, whatever its layout
            _layout_formulas(t, ctx, "an input", formulas)
    for t in _fields(func.attrs.get(GLOBAL_RESULT)):
        _layout_formulas(t, ctx, "the output", formulas)
    for p in func.params:
        _type_formulas(p.type, formulas)
    for block in func.blocks:
        for b in block.bindings:
            _type_formulas(b.var.type, formulas)
            _value_formulas(b, ctx, formulas, lemmas, sums)
    grid = ctx.grid or _Grid((None,), 0)  # no mesh named: nothing depends on the worker's place

    bound = [sym.substitute(f, dict(dims)) if sym.is_symbolic(f) else f for f in formulas]
    for f in bound:
        extra = sym.free_vars(f) - {symbol, WORKER_ID}
        if extra:
            raise NotProved(f"the formula {sym.to_str(f)} depends on {', '.join(sorted(extra))}, which is not bound")
    horizon = max([1] + [_largest_constant(f) for f in bound] + [n for _, n, _ in lemmas]) + 1
    if max_horizon is not None and horizon > max_horizon:
        raise NotProved(f"the cutoff {horizon} is past {max_horizon} counts")
    varying = _distinct(bound, symbol)
    for f in varying:  # every formula must have an algebraic form (no opaque function) to be evaluated and proved
        try:
            sym.fold(f, lambda _name: 0, int, {k: (lambda a, b: 0) for k in _FOLD_NAMES})
        except sym.SymbolicError:
            raise NotProved(f"the formula {sym.to_str(f)} has no algebraic form") from None
    lemma_memo: dict[int, str] = {}

    def lemma(r: int) -> str:
        """Why count ``r`` cannot stand for larger counts ("" when it can): the collectives' lemmas
        at ``r``, the workers at the last place of the count's axis standing for those past it."""
        if r not in lemma_memo:
            lemma_memo[r] = _lemmas_at(func, dims, symbol, r, grid, lemmas, sums)
        return lemma_memo[r]

    guarded = set(guarded)
    if horizon in guarded:
        raise NotProved(f"count {horizon}, the horizon, runs a count variant of @{func.name}")
    stood_for: dict[int, int] = {}
    runs = _classes(varying, symbol, horizon, grid, lemma, guarded, stood_for, downward=not ctx.maxima)
    tail = runs[-1]
    why = lemma(tail) or _prove_stable(varying, symbol, tail, horizon, grid)
    if why and tail < horizon:  # the last count run does not stand for the counts past the horizon: run it
        runs.append(horizon)
        tail = horizon
        why = lemma(tail) or _prove_stable(varying, symbol, tail, horizon, grid)
    if why:
        raise NotProved(why)
    return Cutoff(tuple(sorted(set(runs) | guarded)), horizon, tail, len(varying), len(sums),
                  tuple(sorted(stood_for.items())))


@dataclass
class _Context:
    symbol: str
    dims: dict
    grid: _Grid | None = None
    mesh: DeviceMesh | None = None
    maxima: bool = False  # an all-reduce by max or min along the count's axis (no count stands for a smaller one)

    def check_mesh(self, mesh: DeviceMesh) -> _Grid:
        """The mesh as a grid with one axis of ``symbol`` devices; every mesh named must be the same."""
        if self.mesh is not None and mesh == self.mesh:
            return self.grid
        covered = f"(covered: one mesh, its devices from device 0, one axis of {self.symbol} devices, the others of fixed sizes)"
        ids = mesh.device_ids
        if not (isinstance(ids, Range) and sym.equal(ids.start, 0)):
            raise NotProved(f"the mesh {mesh.shape_str()} on devices {ids} {covered}")
        sizes, axis = [], None
        for i, n in enumerate(mesh.shape):
            if sym.identical(n, sym.var(self.symbol)):
                if axis is not None:
                    raise NotProved(f"the mesh {mesh.shape_str()} {covered}")
                axis = i
                sizes.append(None)
                continue
            v = sym.substitute(n, self.dims) if sym.is_symbolic(n) else n
            if sym.is_symbolic(v):
                raise NotProved(f"the mesh {mesh.shape_str()} {covered}")
            sizes.append(int(v))
        if axis is None:
            raise NotProved(f"the mesh {mesh.shape_str()} {covered}")
        if self.mesh is not None:
            raise NotProved(f"the meshes {self.mesh.shape_str()} and {mesh.shape_str()} {covered}")
        self.mesh, self.grid = mesh, _Grid(tuple(sizes), axis)
        return self.grid


@dataclass(frozen=True)
class _Grid:
    """The mesh's sizes, ``None`` on ``axis``, the count's axis; devices in row-major order."""

    sizes: tuple
    axis: int

    def shape(self, count: int) -> tuple[int, ...]:
        return tuple(count if i == self.axis else n for i, n in enumerate(self.sizes))

    def devices(self, count: int) -> int:
        return math.prod(self.shape(count))

    def image(self, positions, count: int, r: int):
        """The position at count ``r`` of the worker standing for each of ``positions`` at ``count``:
        the same coordinates, the count's axis clamped to ``r - 1``."""
        import numpy as np

        coords = list(np.unravel_index(positions, self.shape(count)))
        coords[self.axis] = np.minimum(coords[self.axis], r - 1)
        return np.ravel_multi_index(tuple(coords), self.shape(r))

    def last(self, r: int) -> list[int]:
        """The positions at count ``r`` whose coordinate on the count's axis is ``r - 1``."""
        import numpy as np

        at = np.arange(self.devices(r))
        return [int(p) for p in at[np.unravel_index(at, self.shape(r))[self.axis] == r - 1]]


def _used_vars(func: Function) -> set:
    """The vars some binding or the result reads (every parameter, when an expression of another
    kind might read one)."""
    out: set = set()

    def visit(e):
        if isinstance(e, Var):
            out.add(e)
        elif isinstance(e, Tuple):
            for f in e.fields:
                visit(f)
        elif isinstance(e, TupleGetItem):
            visit(e.tuple_value)
        elif isinstance(e, Call):
            for a in e.args:
                visit(a)
        elif not isinstance(e, (Constant, ShapeExpr, PrimValue)):
            out.update(func.params)

    for block in func.blocks:
        for b in block.bindings:
            visit(b.value)
    visit(func.result)
    return out


def _lemmas_at(func: Function, dims: Mapping[str, int], symbol: str, r: int, grid: _Grid, lemmas: list,
               sums: list) -> str:
    """"" when every collective keeps the correspondence of each worker at a larger count with its
    image at ``r`` (the count's coordinate clamped to ``r - 1``); else the first that does not, in words."""
    last = grid.last(r)
    at_r = {**dims, symbol: r, WORKER_ID: last[0]}
    for what, n, block in lemmas:
        b = sym.evaluate(sym.substitute(block, dict(dims)), at_r) if sym.is_symbolic(block) else block
        if n > (r - 1) * b:
            return f"{what}: its extent {n} reaches past the blocks of the first {r - 1} workers ({b} each)"
    for position in last if sums else ():
        zero = _idle_zeros(func, {**at_r, WORKER_ID: position})
        for where, x in sums:
            if x not in zero:
                return (f"the all-reduce by sum of {where}: the part of a worker holding no element "
                        "is not shown to be zero")
    return ""


def _distinct(formulas: list, symbol: str) -> list:
    """The formulas that depend on the count or the worker, each once."""
    seen: set = set()
    out = []
    for f in formulas:
        if not sym.is_symbolic(f) or not (sym.free_vars(f) & {symbol, WORKER_ID}):
            continue
        k = sym.key(f)
        if k not in seen:
            seen.add(k)
            out.append(f)
    return out


def _classes(formulas: list, symbol: str, horizon: int, grid: _Grid, lemma, guarded: set, stood_for: dict, *,
             downward: bool) -> list[int]:
    """The counts to run among ``1..horizon``: a count ``W`` is skipped when the count ``R`` run last
    stands for it: every formula has at each worker of ``W`` its value at that worker's image at
    ``R`` (all evaluated, exactly, in int64: every count and every worker), no divisor is zero at
    ``W``, and the collectives' lemmas hold at ``R``. Else, with ``downward``, when ``W + 1`` stands
    for it from above: every worker of ``W`` has the formulas of the same worker at ``W + 1``, the
    lemmas hold at ``W + 1`` (the workers at its last coordinate, which ``W`` lacks, add zero to
    every sum and lie past every gathered prefix), and ``W + 1`` is run instead."""
    import numpy as np

    sizes = np.array([grid.devices(c) for c in range(1, horizon + 1)], dtype=np.int64)
    if int(sizes.sum()) * max(1, len(formulas)) > _MAX_EVALUATIONS:
        raise NotProved(f"{len(formulas)} formulas at every worker of counts 1..{horizon} are more than "
                        f"{_MAX_EVALUATIONS} values to evaluate")
    counts = np.repeat(np.arange(1, horizon + 1, dtype=np.int64), sizes)
    offsets = np.concatenate(([0], np.cumsum(sizes)))  # count W's workers start at offsets[W - 1]
    workers = np.arange(len(counts), dtype=np.int64) - offsets[counts - 1]
    bad = np.zeros(len(counts), dtype=bool)
    rows = []
    for f in formulas:
        value, zero = _to_numpy(f, {symbol: counts, WORKER_ID: workers})
        rows.append(np.broadcast_to(value, counts.shape))
        bad |= zero
    table = np.stack(rows) if rows else np.zeros((0, len(counts)), dtype=np.int64)
    def stands(r: int, w_count: int) -> bool:
        row = slice(offsets[w_count - 1], offsets[w_count])
        if bad[row].any() or lemma(r):
            return False
        image = offsets[r - 1] + grid.image(np.arange(sizes[w_count - 1]), w_count, r)
        return not bad[image].any() and np.array_equal(table[:, row], table[:, image])

    runs: list[int] = []
    for w_count in range(1, horizon + 1):
        if w_count in guarded:  # another function runs there: run apart, standing for nothing
            continue
        if runs and runs[-1] == w_count:
            continue
        if runs and stands(runs[-1], w_count):
            stood_for[w_count] = runs[-1]
            continue
        up = w_count + 1
        if downward and up <= horizon and up not in guarded and stands(up, w_count):
            stood_for[w_count] = up
            runs.append(up)
            continue
        runs.append(w_count)
    return runs


def _to_numpy(f, env: Mapping):
    """``f`` evaluated over int64 arrays (floor division as :func:`distir.ir.sym.evaluate`), and
    where its value is not to be trusted: a divisor is zero, or an operand is past 2^31 (so no
    product or sum could wrap around)."""
    import numpy as np

    shape = np.shape(env[WORKER_ID])
    bad = [np.zeros(shape, dtype=bool)]
    big = 1 << 31

    def guard(a, b):
        bad[0] = bad[0] | (np.abs(a) >= big) | (np.abs(b) >= big)

    def divide(how):
        def op(a, b):
            guard(a, b)
            b = np.asarray(b)
            bad[0] = bad[0] | (b == 0)
            return how(a, np.where(b == 0, 1, b))
        return op

    def checked(how):
        def op(a, b):
            guard(a, b)
            return how(a, b)
        return op

    ops = {"add": checked(np.add), "sub": checked(np.subtract), "mul": checked(np.multiply),
           "floordiv": divide(np.floor_divide), "floormod": divide(np.mod), "min": np.minimum, "max": np.maximum}
    value = sym.fold(f, lambda name: env[name], np.int64, ops)
    return value, bad[0]


def _fields(t) -> list:
    if t is None:
        return []
    if isinstance(t, TupleType):
        return [x for f in t.fields for x in _fields(f)]
    return [t]


def _layout_formulas(t, ctx: _Context, what: str, out: list, shape=None, placement=None) -> None:
    """Where each worker's block of a global tensor starts, how much of it is real, its shape (every
    level of a nested cut): the formulas the simulator cuts and assembles by (distir.ir.layout). A
    strided layout is a plain one of its expanded view (``expand_strided``), as the simulator cuts it."""
    mesh = t.mesh if isinstance(t, DTensorType) else t
    if isinstance(t, DTensorType):
        shape, placement = t.shape, t.placement
    elif not isinstance(mesh, DeviceMesh):
        return
    ctx.check_mesh(mesh)
    if placement.is_block or placement.has_partial:
        raise NotProved(f"{what} laid out \"{placement}\" (covered: R, S[d] and S[d/k])")
    out.extend(shape)
    out.extend(local_shape(shape, mesh, placement))
    wide, plain = expand_strided(shape, placement)
    out.extend(wide)
    for d, extent in enumerate(wide):
        axes = plain.mesh_axes_of(d)
        if axes:
            out.extend(level_extents(extent, [mesh.shape[a] for a in axes]))
            # an empty block starts anywhere: its piece is the same, so the start is read clamped
            out.append(sym.min_(block_start_expr(mesh, plain, d, extent), extent))
            out.append(valid_length_expr(mesh, plain, d, extent))


def _type_formulas(t, out: list) -> None:
    if isinstance(t, TupleType):
        for f in t.fields:
            _type_formulas(f, out)
    elif isinstance(t, TensorType) and t.shape is not None:
        out.extend(t.shape)


def _attr_formulas(v, out: list) -> None:
    if isinstance(v, bool) or v is None or isinstance(v, (str, float)):
        return
    if isinstance(v, int) or sym.is_symbolic(v):
        out.append(v)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _attr_formulas(x, out)


def _value_formulas(b, ctx: _Context, out: list, lemmas: list, sums: list) -> None:
    v = b.value
    if isinstance(v, (Var, Constant, TupleGetItem)):
        return
    if isinstance(v, Tuple):
        return
    if isinstance(v, (ShapeExpr, PrimValue)):
        _attr_formulas(getattr(v, "values", None) or getattr(v, "value", None), out)
        return
    if not isinstance(v, Call) or not isinstance(v.op, OpDef):
        raise NotProved(f"`{b.var.name}`: a call the argument does not model")
    name = v.op.name
    attrs = v.op.full_attrs(v.attrs)
    for a in v.args:
        if isinstance(a, ShapeExpr):
            _attr_formulas(a.values, out)
        elif isinstance(a, PrimValue):
            _attr_formulas(a.value, out)
    if name == "ccl.local_shard":  # no communication: the worker cuts its own block of what it holds
        _local_shard_formulas(v, attrs, ctx, out)
        return
    if name.startswith("dist.") or (name.startswith("ccl.") and name not in _COLLECTIVES):
        raise NotProved(f"R.{name} at `{b.var.name}` (covered collectives: all_reduce by sum, max or min; "
                        "all_gather and regroup with an extent; exchange between R, S[d] and S[d/k] layouts; local_shard)")
    if name not in _COLLECTIVES:
        for key, value in attrs.items():
            if isinstance(value, DeviceMesh):
                raise NotProved(f"R.{name} at `{b.var.name}` names a mesh")
            _attr_formulas(value, out)
        return
    grid = ctx.check_mesh(attrs["device_mesh"])
    where = f"R.{name} at `{b.var.name}`"
    x = v.args[0]
    if name == "ccl.exchange":
        # each worker's target block, cut from the tensor its source blocks assemble: by the formulas
        # of both layouts (a source element's holder is fixed by its block, so by the formulas too)
        src_shape = tuple(attrs["shape"])
        dst_shape = src_shape if attrs.get("new_shape") is None else tuple(attrs["new_shape"])
        _layout_formulas(attrs["device_mesh"], ctx, f"the source of {where}", out, src_shape, attrs["src_placement"])
        _layout_formulas(attrs["device_mesh"], ctx, f"the target of {where}", out, dst_shape, attrs["dst_placement"])
        return
    on_count = attrs.get("mesh_axis", 0) == grid.axis  # else its groups are of a fixed size, each one's image a group
    if name == "ccl.all_reduce":
        op = attrs["op_type"]
        if op not in ("sum", "max", "min"):
            raise NotProved(f"R.ccl.all_reduce by {op} at `{b.var.name}` (covered: sum, max, min)")
        if op == "sum" and on_count:
            sums.append((f"`{x.name}` (at `{b.var.name}`)", x))
        elif on_count:
            ctx.maxima = True
        return
    extent = attrs.get("extent")
    if extent is not None:
        out.append(extent)
    if not on_count:
        if not sym.equal(attrs["num_workers"], grid.sizes[attrs.get("mesh_axis", 0)]):
            raise NotProved(f"{where} over {sym.to_str(attrs['num_workers'])} workers, not its mesh axis's")
        return
    if not sym.identical(attrs["num_workers"], sym.var(ctx.symbol)):
        raise NotProved(f"{where} over {sym.to_str(attrs['num_workers'])} workers, not {ctx.symbol}")
    if extent is None:
        raise NotProved(f"{where} without an extent (its result grows with the count)")
    axis = attrs["axis"] % len(x.type.shape)
    n = _constant(extent, ctx.symbol, b.var.name)
    lemmas.append((where, n, x.type.shape[axis]))
    if name == "ccl.regroup":
        lemmas.append((where, n, b.var.type.shape[axis]))


def _local_shard_formulas(call: Call, attrs, ctx: _Context, out: list) -> None:
    """Where the worker's block starts (clamped to the extent: a block past it is all padding,
    wherever it starts) and how much of it is real, as ``ccl.local_shard`` cuts it."""
    ctx.check_mesh(attrs["device_mesh"])
    x = call.args[0].type
    n = attrs["num_workers"]
    extent = x.shape[attrs["axis"] % len(x.shape)]
    block = sym.ceildiv(extent, n)
    coord = sym.clamp(coord_expr(attrs["device_mesh"], attrs["mesh_axis"], sym.var(WORKER_ID)), 0, sym.sub(n, 1))
    start = sym.mul(coord, block)
    out.extend([extent, block, sym.min_(start, extent), sym.clamp(sym.sub(extent, start), 0, block)])


def _constant(extent, symbol: str, where: str) -> int:
    if isinstance(extent, int):
        return extent
    raise NotProved(f"`{where}`: the extent {sym.to_str(extent)} is not a constant once the sizes are bound")


def _largest_constant(f) -> int:
    """The largest absolute integer constant in ``f`` (the blocks of every dim of at most it are one
    element wide past it)."""
    if isinstance(f, int):
        return abs(f)
    return sym.fold(f, lambda _name: 0, abs, {k: max for k in
                                             ("add", "sub", "mul", "floordiv", "floormod", "min", "max")})


def _prove_stable(formulas: list, symbol: str, r: int, horizon: int, grid: _Grid) -> str:
    """"" when every formula ``e`` has at each worker of every count ``W > horizon`` its value at that
    worker's image at ``r`` (the count's coordinate clamped to ``r - 1``), and no divisor is zero,
    proved with z3; else why not, in words."""
    import z3

    w_count = z3.Int(symbol)
    coords = [z3.Int(f"{WORKER_ID}_{i}") for i in range(len(grid.sizes))]

    def position(sizes, cs):
        pos, stride = z3.IntVal(0), z3.IntVal(1)
        for n, c in reversed(list(zip(sizes, cs))):
            pos, stride = pos + c * stride, stride * n
        return pos

    sizes_w = [w_count if i == grid.axis else z3.IntVal(n) for i, n in enumerate(grid.sizes)]
    sizes_r = [z3.IntVal(r if i == grid.axis else n) for i, n in enumerate(grid.sizes)]
    image = [z3.If(c < r - 1, c, r - 1) if i == grid.axis else c for i, c in enumerate(coords)]
    w_id, w_image = position(sizes_w, coords), position(sizes_r, image)
    bounds = [z3.And(c >= 0, c < n) for c, n in zip(coords, sizes_w)]
    for f in formulas:
        divisors: list = []
        at_w = _to_z3(f, {symbol: w_count, WORKER_ID: w_id}, divisors)
        at_r = _to_z3(f, {symbol: z3.IntVal(r), WORKER_ID: w_image}, divisors)
        solver = z3.Solver()
        solver.set("timeout", _SOLVER_MS)
        solver.add(w_count >= horizon + 1, *bounds)
        solver.add(z3.Or(at_w != at_r, *[d == 0 for d in divisors]))
        answer = solver.check()
        if answer == z3.sat:
            m = solver.model()
            return (f"the formula {sym.to_str(f)} still changes past count {horizon} "
                    f"({symbol}={m[w_count]}, {WORKER_ID}={m.eval(w_id)})")
        if answer != z3.unsat:
            return f"z3 did not settle whether {sym.to_str(f)} stops changing past count {horizon}"
    return ""


def _to_z3(f, env: Mapping, divisors: list):
    import z3

    def floordiv(a, b):
        divisors.append(b)
        return z3.If(b > 0, a / b, (-a) / (-b))  # z3's division is Euclidean: floor for a positive divisor

    def floormod(a, b):
        return a - b * floordiv(a, b)

    ops = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "floordiv": floordiv, "floormod": floormod,
           "min": lambda a, b: z3.If(a <= b, a, b), "max": lambda a, b: z3.If(a >= b, a, b)}
    return sym.fold(f, lambda name: env[name], z3.IntVal, ops)


def _idle_zeros(func: Function, values: Mapping[str, int]) -> set:
    """The vars that hold only zeros on worker ``T`` at count ``C`` (``values``), for every input:
    a forward analysis over a few ops (a mask of length 0 with value 0, a tensor of no elements,
    a product with a zero, a sum or move of zeros). Anything else is not known to be zero."""
    zero: set = set()
    for block in func.blocks:
        for b in block.bindings:
            v, t = b.value, b.var.type
            if isinstance(t, TensorType) and t.shape is not None:
                size = 1
                for d in t.shape:
                    size *= sym.evaluate(d, values) if sym.is_symbolic(d) else d
                if size == 0:
                    zero.add(b.var)
                    continue
            if isinstance(v, Var):
                if v in zero:
                    zero.add(b.var)
                continue
            if not isinstance(v, Call) or not isinstance(v.op, OpDef):
                continue
            name = v.op.name
            tensors = [a for a in v.args if isinstance(a, Var)]
            held = [a in zero for a in tensors]
            if name == "mask_tail":
                attrs = v.op.full_attrs(v.attrs)
                length = attrs["length"]
                length = sym.evaluate(length, values) if sym.is_symbolic(length) else length
                value = attrs["value"]
                if value == 0 and (length == 0 or (held and held[0])):
                    zero.add(b.var)
            elif name in _ZERO_IF_ANY and any(held):
                zero.add(b.var)
            elif name in _ZERO_IF_ALL and held and all(held) and len(tensors) == len(v.args):
                zero.add(b.var)
            elif name in _ZERO_IF_FIRST and held and held[0] and v.args[0] is tensors[0]:
                zero.add(b.var)
    return zero
