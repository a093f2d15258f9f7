"""The SPMD simulator: W workers in one process, running a specialized local-view module.

The workers are the devices of the module's meshes: a device id in no mesh would only idle,
so it is not simulated (ids may be large or sparse). The session still counts D = 1 + the
largest id, as Disco runs it, and per-worker byte counts divide by D. Inputs are given as
global arrays, checked against the function's recorded global signature (dtypes, ranks,
sizes; symbolic sizes are bound from them, then every sharded size must divide), and cut
into each worker's piece by it (a partial input is split into random parts whose
reduction is exactly the value, spread over the dtype's range and over all workers so that
a wrong reduction shows: :func:`distir.ir.combine.split`; partial outputs are combined by
:func:`distir.ir.combine.combine`, integers wrapping around as on one device).

One evaluator: the function runs as the interpreter's compiled plan
(:func:`distir.runtime.interpreter.compile_function`), binding by binding in lock step
over the workers, each with its own slots and a run context binding ``worker_id`` to its
device id. Every intermediate value is checked against its local type, as the interpreter
does, collectives' outputs included (but for an op whose attributes name ``worker_id``: a
worker outside the mesh of a worker-indexed slice cuts nothing meaningful, and holds no
value for what it meets). A collective (``R.ccl.<kind>`` of a step kind with ``simulate``, see
:mod:`distir.ir.steps`) is a hook of the plan: it gets all workers' inputs at once and
returns the outputs of the workers that take part. A worker whose arguments are the very
same arrays as the previous worker's (replicas, the output of a collective) takes that
worker's result instead of computing it again, unless the op may read the worker id (its
attributes name ``worker_id``, or it is a step kind's local op). Each intermediate is
dropped after its last use.

Which worker computes what (several meshes, e.g. pipeline stages): a worker outside a
tensor's mesh holds **no value** for it (``None`` here). A parameter laid out on a mesh
is given to that mesh's devices only; a plain tensor or scalar parameter to every worker.
An ordinary op runs on a worker when every argument has a value there (so it runs on the
workers of its inputs' mesh; an op without tensor arguments, e.g. a constant, runs on
all). A collective returns the outputs of the devices of its ``device_mesh``, or for
``R.ccl.transfer`` the devices of ``dst_mesh``; every other worker holds no value
afterwards. Every device of the sending mesh (``device_mesh``, or ``src_mesh`` for a
transfer) must hold a value, else SpmdError names the binding. Outputs are reassembled
from the devices of the mesh in the recorded global result type, whichever mesh that is
(partials reduced, replicas checked to agree).

Byte counts: ``stats.total_bytes`` is the sum over workers of bytes sent;
``stats.bytes_per_worker`` divides it by D, the devices of the module's meshes (each counted once;
an id in no mesh is no device). On one mesh of D devices that is what the
per-worker cost model of the step kinds (:mod:`distir.ops.collectives`) predicts; a redistribute between
meshes is planned by total bytes (:func:`distir.transform.cross_mesh_plan.plan_cross_mesh`),
which ``total_bytes`` measures. ``stats.simulated`` is the number of devices simulated.
"""

from __future__ import annotations

import functools
import weakref
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from ..errors import DistirError
from ..ir import sym
from ..ir.combine import combine, split
from ..ir.expr import Call, Function, IRModule, Var
from ..ir.layout import (
    WORKER_ID,
    block_slices,
    concrete_block,
    concrete_mesh_shape,
    concrete_placement,
    cut_block,
    expand_strided,
    is_worker_var,
    local_shape,
    mesh_coords,
    place_chunks,
    worker_values,
)
from ..ir.mesh import DeviceMesh
from ..ir.placement import Placement
from ..ir.types import DTensorType, TupleType, Type
from .interpreter import Plan, RunContext, RunError, _check, bind_params, compile_function

__all__ = [
    "CollectiveRecord",
    "SpmdError",
    "SpmdStats",
    "WorkerContext",
    "assemble_output",
    "bind_global_inputs",
    "run_spmd",
    "shard_input",
    "steps_summary",
]


class SpmdError(DistirError):
    """The module cannot be simulated as given (not specialized, wrong inputs, disagreeing replicas)."""


@dataclass(frozen=True)
class CollectiveRecord:
    binding: str
    op: str
    kind: str
    bytes: int  # summed over all workers


@dataclass
class SpmdStats:
    """What the collectives of one run moved. Pass an instance as ``run_spmd(..., stats=s)``."""

    num_workers: int = 0  # the devices of the module's meshes (ids in no mesh are not counted)
    records: list[CollectiveRecord] = field(default_factory=list)
    simulated: int = 0  # the devices of the module's meshes, which the simulator ran

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(r.kind for r in self.records))

    @property
    def bytes_by_kind(self) -> dict[str, int]:
        out: Counter = Counter()
        for r in self.records:
            out[r.kind] += r.bytes
        return dict(out)

    @property
    def total_bytes(self) -> int:
        return sum(r.bytes for r in self.records)

    @property
    def bytes_per_worker(self) -> Fraction:
        return Fraction(self.total_bytes, self.num_workers or 1)

    def summary(self) -> str:
        return steps_summary(self.num_workers, self.counts, self.total_bytes)


def steps_summary(devices: int, counts: Mapping[str, int], total_bytes: int) -> str:
    """The one line of what a run's steps moved, the same for the simulator and Disco (which counts
    its steps as the simulator does): ``4 workers: all_reduce x2; 61440 bytes sent per worker (...)``.
    ``devices``: those of the module's meshes, each counted once (ids in no mesh are not counted).
    On one device no step communicates (an all-reduce of one part is its input), so none is listed."""
    kinds = ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())) if devices > 1 else ""
    kinds = kinds or "no collectives"
    per_worker = Fraction(total_bytes, devices or 1)
    return (f"{devices} worker{'' if devices == 1 else 's'}: {kinds}; {float(per_worker):.0f} bytes sent per worker "
            f"({total_bytes} in all)")


class WorkerContext(RunContext):
    """The run context of one worker: the sizes, ``worker_id`` bound to its device id, and its
    position in each mesh whose devices are listed out of order (see ``layout.worker_values``)."""

    __slots__ = ("worker",)
    worker_var = sym.var(WORKER_ID)

    def __init__(self, values: Mapping[str, int], worker: int, shapes: dict | None = None, meshes=()):
        super().__init__({**values, **worker_values(meshes, worker)})
        self.worker = worker
        if shapes is not None:  # local types do not name worker_id, so workers share evaluated shapes
            self._shapes = shapes


# ---------------------------------------------------------------- global inputs and outputs


def _mesh_sizes(mesh: DeviceMesh, values) -> tuple[int, ...]:
    try:
        return concrete_mesh_shape(mesh, values)
    except sym.SymbolicError as err:
        raise SpmdError(f"the mesh {mesh.shape_str()} is still symbolic ({err}); specialize the module first") from None


@functools.lru_cache(maxsize=256)
def _layout(placement: Placement, ndim: int, sizes: tuple[int, ...], devices: tuple[int, ...]) -> tuple:
    """Where the pieces of a tensor laid out ``placement`` lie: per device (in mesh order) its
    id, the block of each tensor dim it holds ((index, count) per dim), its coordinates on the
    partial axes, and all its mesh coordinates. In a block layout every device holds its own
    chunks: its key is its position."""
    if placement.is_block:
        return tuple((dev, (("B", pos),), (), mesh_coords(pos, sizes)) for pos, dev in enumerate(devices))
    paxes = placement.partial_axes()
    # a strided dim's mesh axis cuts it too (each worker its block of every part)
    axes_of = [placement.mesh_axes_of(d) + tuple(a for a, s in placement.strided if s.dim == d) for d in range(ndim)]
    out = []
    for pos, dev in enumerate(devices):
        coords = mesh_coords(pos, sizes)
        blocks = []
        for axes in axes_of:
            index, count = 0, 1
            for axis in axes:
                index = index * sizes[axis] + coords[axis]
                count *= sizes[axis]
            blocks.append((index, count))
        out.append((dev, tuple(blocks), tuple(coords[a] for a in paxes), coords))
    return tuple(out)


def _pieces(t: DTensorType, values) -> tuple:
    sizes = _mesh_sizes(t.mesh, values)
    return [(dev, key, pkey, coords, sizes) for dev, key, pkey, coords in
            _layout(t.placement, t.ndim, sizes, tuple(t.mesh.device_list(values)))]


def bind_global_inputs(
    func: Function, arrays: Sequence[Any], sym_values: Mapping[str, int] | None = None
) -> tuple[list[np.ndarray], dict[str, int]]:
    """Check global ``arrays`` against a local-view function's recorded global signature.

    Returns the arrays and the symbolic sizes bound from them (and ``sym_values``), as the
    interpreter binds its parameters; raises SpmdError on a wrong count, dtype, rank or size.
    """
    from ..transform.lower_to_local import GLOBAL_PARAMS

    types = func.attrs.get(GLOBAL_PARAMS)
    if types is None:
        raise SpmdError(f"@{func.name} is not in the local view; run lower-global-view-to-local-view first")
    try:
        return bind_params(func, arrays, sym_values, types=types)
    except RunError as err:
        raise SpmdError(str(err)) from None


def shard_input(t: DTensorType, value: np.ndarray, values, rng) -> dict[int, np.ndarray]:
    """Each device of ``t``'s mesh and its piece; devices outside the mesh get nothing.

    Devices holding the same block of the same part share one array (so the simulator
    computes on replicas once).
    """
    sizes = _mesh_sizes(t.mesh, values)
    placement = concrete_placement(t.placement, values)
    paxes = placement.partial_axes()
    parts: dict[tuple, np.ndarray] = {(): value}
    for axis in paxes:
        op = t.placement[axis].op
        nxt = {}
        for key, v in parts.items():
            for c, piece in enumerate(split(v, op, sizes[axis], rng)):
                nxt[key + (c,)] = piece
        parts = nxt
    pieces: dict[tuple, np.ndarray] = {}
    out: dict[int, np.ndarray] = {}
    for dev, blocks, pkey, coords, sizes in _pieces(t, values):
        piece = pieces.get((blocks, pkey))
        if piece is None:
            piece = pieces[(blocks, pkey)] = cut_block(parts[pkey], placement, coords, sizes)
        out[dev] = piece
    return out


def assemble_output(t: Type, per_worker: dict[int, Any], values, what: str, rtol: float, atol: float):
    """The global value of type ``t`` from each worker's piece (replicas must agree; partials are reduced)."""
    if isinstance(t, TupleType):
        return tuple(
            assemble_output(f, {w: None if v is None else v[i] for w, v in per_worker.items()}, values, f"{what}[{i}]", rtol, atol)
            for i, f in enumerate(t.fields)
        )
    if not isinstance(t, DTensorType):
        held = [v for v in per_worker.values() if v is not None]
        if not held:
            raise SpmdError(f"{what}: no worker holds a value")
        return held[0]
    shape = tuple(sym.evaluate(d, values) for d in t.shape)
    if t.placement.is_block:
        return _assemble_chunks(t, shape, per_worker, values, what)
    if t.placement.is_strided:  # assembled in the expanded form, whose storage it is element for element
        wide_shape, wide = expand_strided(shape, t.placement)
        wt = DTensorType(wide_shape, t.dtype, t.mesh, wide)
        wide_local = tuple(sym.evaluate(d, values) for d in local_shape(wide_shape, t.mesh, wide))
        pieces = {w: None if v is None else np.asarray(v).reshape(wide_local) for w, v in per_worker.items()}
        return assemble_output(wt, pieces, values, what, rtol, atol).reshape(shape)
    paxes = t.placement.partial_axes()
    blocks: dict[tuple, dict[tuple, np.ndarray]] = {}
    where: dict[tuple, tuple] = {}
    first: dict[tuple, Any] = {}  # (block, part) -> the array of the first device holding it
    for dev, key, pkey, coords, sizes in _pieces(t, values):
        raw = per_worker.get(dev)
        if raw is None:
            raise SpmdError(f"{what}: device {dev} of its mesh holds no value")
        if first.get((key, pkey)) is raw:
            continue  # the very same array as a replica before it (workers share results)
        _, loc, _ = where.setdefault(key, block_slices(shape, t.placement, coords, sizes))
        local = np.asarray(raw)[loc]  # the real elements; padding is dropped
        seen = blocks.setdefault(key, {})
        held = seen.get(pkey)
        if held is None:
            seen[pkey] = local
            first[(key, pkey)] = raw
        elif not np.allclose(held, local, rtol=rtol, atol=atol, equal_nan=True):
            raise SpmdError(f"{what}: replicas disagree (device {dev} holds a different copy)")
    out = None
    op = t.placement[paxes[0]].op if paxes else None
    for key, parts in blocks.items():
        vals = list(parts.values())
        value = combine(op, vals) if paxes else vals[0]
        if out is None:
            out = np.zeros(shape, dtype=value.dtype)
        out[where[key][0]] = value
    return out


def _assemble_chunks(t: DTensorType, shape: tuple[int, ...], per_worker: dict[int, Any], values, what: str):
    """The global value of a block layout: each device's chunks, written where they lie."""
    block = concrete_block(t.placement, values)
    devices = t.mesh.device_list(values)
    out = None
    for pos, dev in enumerate(devices):
        local = per_worker.get(dev)
        if local is None:
            raise SpmdError(f"{what}: device {dev} of its mesh holds no value")
        local = np.asarray(local)
        if out is None:
            out = np.zeros(shape, dtype=local.dtype)
        place_chunks(out, local, block, len(devices), pos)
    return out


# ---------------------------------------------------------------- the plan, with collectives as hooks


@dataclass(frozen=True)
class _Collective:
    """A binding the simulator runs across workers: a step kind's collective."""

    kind: Any  # the StepKind
    attrs: dict
    sender: DeviceMesh | None  # every device of it must hold the input


def _collective_hook(var: Var, call: Call) -> _Collective | None:
    kind = getattr(call.op, "step", None)
    if kind is None or call.op is not kind.local_op or kind.simulate is None:
        return None
    attrs = call.op.full_attrs(call.attrs)
    return _Collective(kind, attrs, attrs.get("src_mesh", attrs.get("device_mesh")))


def _names_worker(v) -> bool:
    if isinstance(v, (list, tuple)):
        return any(_names_worker(x) for x in v)
    return sym.is_symbolic(v) and any(is_worker_var(n) for n in sym.free_vars(v))


@dataclass
class _Program:
    """A function's plan and, per step, how the workers run it."""

    plan: Plan
    # per step: "collective", "call" (with whether workers may share a result and whether its
    # attributes differ per worker), or "value"
    modes: list[tuple[str, bool, bool]]
    dead: list[list[int]]  # per step: the slots read for the last time there (freed after it)


_PROGRAMS: weakref.WeakKeyDictionary[Function, _Program] = weakref.WeakKeyDictionary()


def _program(func: Function) -> _Program:
    prog = _PROGRAMS.get(func)
    if prog is None:
        try:
            plan = compile_function(func, _collective_hook)
        except RunError as err:
            raise SpmdError(str(err)) from None
        modes = []
        for step in plan.steps:
            if step.hook is not None:
                modes.append(("collective", False, False))
            elif step.fn is not None:
                per_worker_attrs = _names_worker(list(step.attrs.values()))
                reads_worker = per_worker_attrs or step.value.op.step is not None
                modes.append(("call", not reads_worker, per_worker_attrs))
            else:
                modes.append(("value", False, False))
        prog = _PROGRAMS[func] = _Program(plan, modes, _last_uses(func, plan))
    return prog


def _last_uses(func: Function, plan: Plan) -> list[list[int]]:
    """Per step, the slots no later step (nor the result) reads: W workers' copies of every
    intermediate need not live to the end."""
    from ..ir.expr import leaf_vars

    slot_of = {id(p): i for p, i in zip(func.params, plan.param_slots)}
    bindings = list(func.bindings())
    last: dict[int, int] = {}
    for i, (b, step) in enumerate(zip(bindings, plan.steps)):
        for v in leaf_vars(b.value):
            if id(v) in slot_of:
                last[slot_of[id(v)]] = i
        slot_of[id(b.var)] = step.slot
    for v in leaf_vars(func.result):
        last.pop(slot_of.get(id(v)), None)
    dead: list[list[int]] = [[] for _ in plan.steps]
    for slot, i in last.items():
        dead[i].append(slot)
    return dead


# ---------------------------------------------------------------- a run


def _holds_nothing(value: Any) -> bool:
    """Whether a worker lacks (part of) an argument: it is outside that value's mesh."""
    if value is None:
        return True
    return type(value) is tuple and any(_holds_nothing(v) for v in value)


def _same(a):
    """What equal arguments have in common: shapes and integers by value, anything else by identity."""
    t = type(a)
    if t is tuple:
        return tuple(map(_same, a))
    return a if t is int or t is str else id(a)


def _identical(argv: list, before: list) -> bool:
    """Whether two workers' arguments are the same arrays (and equal shapes and integers)."""
    for a, b in zip(argv, before):
        if a is not b and not (type(a) is tuple and type(b) is tuple and _same(a) == _same(b)):
            return False
    return True


def _lacks(argv: list) -> bool:
    for a in argv:
        if a is None or (type(a) is tuple and _holds_nothing(a)):
            return True
    return False


class _Workers:
    """The simulated workers of one run: their device ids, slots and run contexts."""

    def __init__(self, prog: _Program, devices: list[int], values: dict[str, int], meshes=()):
        shapes: dict = {}
        self.prog = prog
        self.devices = devices
        self.envs = [[None] * prog.plan.n_slots for _ in devices]
        self.ctxs = [WorkerContext(values, w, shapes, meshes) for w in devices]
        self.lanes = list(zip(devices, self.envs, self.ctxs))
        self.sparse = False  # some worker holds no value for some variable (it is outside a mesh)

    def scatter(self, types: Sequence[Type], arrays: Sequence[np.ndarray], values, rng) -> None:
        """Each worker's piece of each input (nothing outside the input's mesh)."""
        for slot, t, a in zip(self.prog.plan.param_slots, types, arrays):
            pieces = shard_input(t, a, values, rng) if isinstance(t, DTensorType) else None
            for w, env, _ in self.lanes:
                env[slot] = a if pieces is None else pieces.get(w)
            self.sparse |= pieces is not None and len(pieces) < len(self.lanes)

    def collective(self, step, hook: _Collective, stats: SpmdStats | None, check: bool) -> None:
        arg = step.args
        xs = {w: arg(env, ctx)[0] for w, env, ctx in self.lanes}
        if hook.sender is not None:
            missing = [d for d in hook.sender.device_list(self.ctxs[0].values) if xs.get(d) is None]
            if missing:
                raise SpmdError(
                    f"{step.what} (binding '{step.name}'): devices {missing} of its mesh "
                    "hold no value for the input (is the input on another mesh?)"
                )
        outs, sent = hook.kind.simulate(xs, hook.attrs, self.ctxs[0])
        slot, checked = step.slot, set()
        for w, env, ctx in self.lanes:
            out = outs.get(w)
            if check and step.expect is not None and out is not None and id(out) not in checked:  # shared: once
                checked.add(id(out))
                try:
                    out = _check(step, step.expect, out, ctx, "")
                except RunError as err:
                    raise SpmdError(f"{err} (on worker {w})") from None
            env[slot] = out
        self.sparse |= len(outs) < len(self.lanes)
        # A step that is an identity when it moves nothing (a re-blocking at sizes that divide) is
        # not counted then, as distir.analysis does not count it: specialize drops it where it can.
        free_identity = hook.kind.local_identity is not None and sent == 0
        if stats is not None and not free_identity:
            stats.records.append(CollectiveRecord(step.name, step.what[2:], hook.kind.name, int(sent)))

    def call(self, step, shared: bool, per_worker_attrs: bool, check: bool) -> None:
        """An op on every worker holding its arguments; a worker whose arguments are those of the
        worker before it (replicas; the devices of a group are neighbours) takes its result."""
        # a slice at the worker's own offset is not checked: a worker outside that mesh (but in
        # another) cuts nothing meaningful, and holds no value for the tensor it is used with
        args, fn, slot = step.args, step.fn, step.slot
        expect = step.expect if check and not per_worker_attrs else None
        attrs = step.attrs
        if step.resolve is not None and not per_worker_attrs:
            attrs = step.resolve(self.ctxs[0])  # the same for every worker: evaluated once
        resolve = step.resolve if per_worker_attrs else None
        sparse = self.sparse
        before: list | None = None  # the arguments of the last result computed (kept alive with it)
        out = None
        for w, env, ctx in self.lanes:
            argv = args(env, ctx)
            if sparse and _lacks(argv):
                env[slot] = None
                continue
            if before is not None and _identical(argv, before):
                env[slot] = out
                continue
            try:
                out = fn(argv, attrs if resolve is None else resolve(ctx), ctx)
            except (DistirError, ValueError, IndexError, TypeError, ArithmeticError, KeyError, AttributeError) as err:
                raise SpmdError(f"binding '{step.name}' = {step.what}(...) on worker {w}: {err}") from err
            if expect is not None:
                try:
                    out = _check(step, expect, out, ctx, "")
                except RunError as err:
                    raise SpmdError(f"{err} (on worker {w})") from None
            if shared:
                before = argv
            env[slot] = out

    def value(self, step, check: bool) -> None:
        run, slot, expect = step.run, step.slot, step.expect if check else None
        for w, env, ctx in self.lanes:
            out = run(env, ctx)
            if expect is not None and not _holds_nothing(out):
                try:
                    out = _check(step, expect, out, ctx, "")
                except RunError as err:
                    raise SpmdError(f"{err} (on worker {w})") from None
            env[slot] = out

    def run(self, stats: SpmdStats | None, check: bool) -> dict[int, Any]:
        """Every binding in lock step; each worker's result."""
        plan = self.prog.plan
        with np.errstate(all="ignore"):  # inf/nan are values here (masks use -inf), as in the interpreter
            for step, (mode, shared, per_worker_attrs), dead in zip(plan.steps, self.prog.modes, self.prog.dead):
                if mode == "call":
                    self.call(step, shared, per_worker_attrs, check)
                elif mode == "collective":
                    self.collective(step, step.hook, stats, check)
                else:
                    self.value(step, check)
                for slot in dead:
                    for env in self.envs:
                        env[slot] = None
            return {w: plan.result(env, ctx) for w, env, ctx in self.lanes}


def _devices(mod: IRModule, values: Mapping[str, int]) -> list[int]:
    """The simulated workers: every device of the module's meshes (one when it has none)."""
    try:
        return sorted(set().union(*(m.device_list(values) for m in mod.meshes()))) or [0]
    except sym.SymbolicError as err:
        raise SpmdError(f"a device mesh is still symbolic ({err}); specialize the module first") from None


def run_spmd(
    mod: IRModule,
    *arrays: np.ndarray,
    func: str = "main",
    stats: SpmdStats | None = None,
    seed: int = 0,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    check: bool = True,
):
    """Run a specialized local-view module on simulated workers; see the module docstring.

    Returns the reassembled global output (a tuple for tuple results). Pass ``stats`` (an
    :class:`SpmdStats`) to get per-collective counts and bytes. ``check=False`` skips the
    check of every intermediate value against its type.
    """
    from ..transform.lower_to_local import GLOBAL_PARAMS, GLOBAL_RESULT

    if func not in mod.functions:
        raise SpmdError(f"the module has no function '{func}' (it has: {', '.join(mod.functions)})")
    f = mod.functions[func]
    inputs, values = bind_global_inputs(f, arrays)
    devices = _devices(mod, values)
    workers = _Workers(_program(f), devices, values, mod.meshes())
    workers.scatter(f.attrs[GLOBAL_PARAMS], inputs, values, np.random.default_rng(seed))
    if stats is not None:
        stats.num_workers = stats.simulated = len(devices)
        stats.records.clear()
    results = workers.run(stats, check)
    return assemble_output(f.attrs.get(GLOBAL_RESULT), results, values, f"the result of @{func}", rtol, atol)
