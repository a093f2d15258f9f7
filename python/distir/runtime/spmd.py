"""The SPMD simulator: W workers in one process, running a specialized local-view module.

The workers are the devices of the module's meshes: a device id in no mesh would only idle,
so it is not simulated (ids may be large or sparse). The session still counts D = 1 + the
largest id, as Disco runs it, and per-worker byte counts divide by D. Inputs are given as global arrays and cut into each worker's
piece by the function's recorded global signature (a partial input is split into random
parts whose reduction is the value, spread over all workers so that a wrong reduction
shows). Bindings run in lock step.

Which worker computes what (several meshes, e.g. pipeline stages): a worker outside a
tensor's mesh holds **no value** for it (``None`` here). A parameter laid out on a mesh
is given to that mesh's devices only; a plain tensor or scalar parameter to every worker.
An ordinary op runs on a worker when every argument has a value there (so it runs on the
workers of its inputs' mesh; an op without tensor arguments, e.g. a constant, runs on
all). A collective (``R.ccl.<kind>`` of a step kind with ``simulate``, see
:mod:`distir.ir.steps`) gets all workers' inputs at once
and returns the outputs of the workers that take part: the devices of its
``device_mesh``, or for ``R.ccl.transfer`` the devices of ``dst_mesh``; every other
worker holds no value afterwards. Every device of the sending mesh (``device_mesh``, or
``src_mesh`` for a transfer) must hold a value, else SpmdError names the binding.
Outputs are reassembled from the devices of the mesh in the recorded global result type,
whichever mesh that is (partials reduced, replicas checked to agree).

Byte counts: ``stats.total_bytes`` is the sum over workers of bytes sent;
``stats.bytes_per_worker`` divides it by D. On one mesh of D devices that is what the
per-worker cost model of the step kinds (:mod:`distir.ops.collectives`) predicts; a redistribute between
meshes is planned by total bytes (:func:`distir.transform.redistribute_plan.plan_cross_mesh`),
which ``total_bytes`` measures.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from ..errors import DistirError
from ..ir import sym
from ..ir.expr import Call, Constant, Expr, IRModule, PrimValue, ShapeExpr, Tuple, TupleGetItem, Var
from ..ir.layout import WORKER_ID, block_index, concrete_mesh_shape, mesh_coords
from ..ir.types import DTensorType, TensorType, TupleType, Type

__all__ = ["CollectiveRecord", "SpmdError", "SpmdStats", "assemble_output", "bind_dims", "run_spmd", "shard_input"]


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

    num_workers: int = 0  # the session: 1 + the largest device id
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
        kinds = ", ".join(f"{k} x{v}" for k, v in sorted(self.counts.items())) or "no collectives"
        return f"{self.num_workers} workers: {kinds}; {float(self.bytes_per_worker):.0f} bytes sent per worker"


class WorkerContext:
    """What an op's numpy reference may ask: the values of symbolic sizes, for one worker."""

    worker_var = sym.var(WORKER_ID)

    def __init__(self, values: Mapping[str, int]):
        self.values = dict(values)

    def dim(self, d) -> int:
        return sym.evaluate(d, self.values)


def _mesh_sizes(t: DTensorType, values) -> tuple[int, ...]:
    try:
        return concrete_mesh_shape(t.mesh, values)
    except sym.SymbolicError as err:
        raise SpmdError(f"the mesh {t.mesh.shape_str()} is still symbolic ({err}); specialize the module first") from None


def bind_dims(types: Sequence[Type], arrays: Sequence[np.ndarray], values: dict[str, int]) -> None:
    """Bind the symbolic dims of ``types`` from the arrays' shapes into ``values`` (any runner's first step)."""
    for i, (t, a) in enumerate(zip(types, arrays)):
        if not isinstance(t, (TensorType, DTensorType)):
            continue
        if a.ndim != t.ndim:
            raise SpmdError(f"input {i}: expected rank {t.ndim} {t}, got an array of shape {a.shape}")
        for d, (dim, n) in enumerate(zip(t.shape, a.shape)):
            if sym.is_symbolic(dim) and len(sym.free_vars(dim)) == 1 and str(dim) in sym.free_vars(dim):
                name = str(dim)
                if name in values and values[name] != n:
                    raise SpmdError(f"input {i} dim {d}: {name} is {values[name]} elsewhere but {n} here")
                values[name] = int(n)
    for i, (t, a) in enumerate(zip(types, arrays)):
        if isinstance(t, (TensorType, DTensorType)):
            for d, (dim, n) in enumerate(zip(t.shape, a.shape)):
                try:
                    want = sym.evaluate(dim, values)
                except sym.SymbolicError as err:
                    raise SpmdError(f"input {i} dim {d}: cannot tell its size ({err})") from None
                if want != n:
                    raise SpmdError(f"input {i} dim {d}: expected size {want} for {t}, got {n}")


def _split_partial(value: np.ndarray, op: str, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    if n == 1:
        return [value]
    is_float = np.issubdtype(value.dtype, np.floating)

    def noise():
        if is_float:
            return rng.standard_normal(value.shape).astype(value.dtype)
        return rng.integers(-3, 4, size=value.shape).astype(value.dtype)

    if op in ("sum", "avg"):
        parts = [noise() for _ in range(n - 1)]
        total = value * (n if op == "avg" else 1)
        parts.append((total - sum(parts)).astype(value.dtype))
        return parts
    sign = -1 if op == "max" else 1
    parts = [(value + sign * np.abs(noise())).astype(value.dtype) for _ in range(n)]
    owner = rng.integers(0, n, size=value.shape)
    for k in range(n):
        parts[k] = np.where(owner == k, value, parts[k])
    return parts


def shard_input(t: DTensorType, value: np.ndarray, values, rng) -> dict[int, np.ndarray]:
    """Each device of ``t``'s mesh and its piece; devices outside the mesh get nothing."""
    sizes = _mesh_sizes(t, values)
    devices = t.mesh.device_list(values)
    paxes = t.placement.partial_axes()
    parts: dict[tuple, np.ndarray] = {(): value}
    for axis in paxes:
        op = t.placement[axis].op
        nxt = {}
        for key, v in parts.items():
            for c, piece in enumerate(_split_partial(v, op, sizes[axis], rng)):
                nxt[key + (c,)] = piece
        parts = nxt
    out: dict[int, np.ndarray] = {}
    for pos, dev in enumerate(devices):
        coords = mesh_coords(pos, sizes)
        full = parts[tuple(coords[a] for a in paxes)]
        index = []
        for d in range(t.ndim):
            b, count = block_index(t.placement, d, coords, sizes)
            extent = full.shape[d]
            step = extent // count
            index.append(slice(b * step, (b + 1) * step))
        out[dev] = np.array(full[tuple(index)], order="C")  # a copy; keeps 0-d arrays 0-d
    return out


_COMBINE = {"sum": np.add, "max": np.maximum, "min": np.minimum, "avg": np.add}


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
    sizes = _mesh_sizes(t, values)
    devices = t.mesh.device_list(values)
    shape = tuple(sym.evaluate(d, values) for d in t.shape)
    paxes = t.placement.partial_axes()
    blocks: dict[tuple, dict[tuple, np.ndarray]] = {}
    for pos, dev in enumerate(devices):
        coords = mesh_coords(pos, sizes)
        if per_worker.get(dev) is None:
            raise SpmdError(f"{what}: device {dev} of its mesh holds no value")
        local = np.asarray(per_worker[dev])
        key = tuple(block_index(t.placement, d, coords, sizes) for d in range(t.ndim))
        pkey = tuple(coords[a] for a in paxes)
        seen = blocks.setdefault(key, {})
        if pkey in seen:
            if not np.allclose(seen[pkey], local, rtol=rtol, atol=atol, equal_nan=True):
                raise SpmdError(f"{what}: replicas disagree (device {dev} holds a different copy)")
        else:
            seen[pkey] = local
    out = None
    for key, parts in blocks.items():
        vals = list(parts.values())
        value = vals[0].astype(np.float64) if paxes else vals[0]
        op = t.placement[paxes[0]].op if paxes else None
        for v in vals[1:]:
            value = _COMBINE[op](value, v.astype(np.float64))
        if op == "avg":
            value = value / len(vals)
        value = value.astype(vals[0].dtype) if paxes else value
        if out is None:
            out = np.zeros(shape, dtype=value.dtype)
        index = tuple(
            slice(b * (shape[d] // count), (b + 1) * (shape[d] // count)) for d, (b, count) in enumerate(key)
        )
        out[index] = value
    return out


def _holds_nothing(value: Any) -> bool:
    """Whether a worker lacks (part of) an argument: it is outside that value's mesh."""
    if value is None:
        return True
    return isinstance(value, tuple) and any(_holds_nothing(v) for v in value)


def run_spmd(
    mod: IRModule,
    *arrays: np.ndarray,
    func: str = "main",
    stats: SpmdStats | None = None,
    seed: int = 0,
    rtol: float = 1e-5,
    atol: float = 1e-6,
):
    """Run a specialized local-view module on simulated workers; see the module docstring.

    Returns the reassembled global output (a tuple for tuple results). Pass ``stats`` (an
    :class:`SpmdStats`) to get per-collective counts and bytes.
    """
    from ..transform.lower_to_local import GLOBAL_PARAMS, GLOBAL_RESULT
    from ..transform.specialize import check_divisible

    if func not in mod.functions:
        raise SpmdError(f"the module has no function '{func}' (it has: {', '.join(mod.functions)})")
    f = mod.functions[func]
    gparams = f.attrs.get(GLOBAL_PARAMS)
    gresult = f.attrs.get(GLOBAL_RESULT)
    if gparams is None:
        raise SpmdError(f"@{func} is not in the local view; run lower-global-view-to-local-view first")
    if len(arrays) != len(f.params):
        raise SpmdError(f"@{func} takes {len(f.params)} inputs, got {len(arrays)}")
    arrays = [np.asarray(a) for a in arrays]
    for i, (t, a) in enumerate(zip(gparams, arrays)):
        if isinstance(t, (TensorType, DTensorType)) and str(a.dtype) != t.dtype:
            raise SpmdError(f"input {i} ('{f.params[i].name}'): expected dtype {t.dtype}, got {a.dtype}")
    values: dict[str, int] = {}
    bind_dims(gparams, arrays, values)
    check_divisible(mod, values, "inputs with")
    meshes = mod.meshes()
    try:
        workers = sorted(set().union(*(m.device_list(values) for m in meshes))) or [0]
    except sym.SymbolicError as err:
        raise SpmdError(f"a device mesh is still symbolic ({err}); specialize the module first") from None
    rng = np.random.default_rng(seed)
    envs: dict[int, dict[Var, Any]] = {w: {} for w in workers}
    for i, (p, t, a) in enumerate(zip(f.params, gparams, arrays)):
        if isinstance(t, DTensorType):
            pieces = shard_input(t, a, values, rng)
            for w in workers:
                envs[w][p] = pieces.get(w)
        else:
            for w in workers:
                envs[w][p] = a
    ctxs = {w: WorkerContext({**values, WORKER_ID: w}) for w in workers}

    def ev(e: Expr, w: int):
        if isinstance(e, Var):
            return envs[w][e]
        if isinstance(e, Constant):
            return e.data
        if isinstance(e, Tuple):
            return tuple(ev(x, w) for x in e.fields)
        if isinstance(e, TupleGetItem):
            t = ev(e.tuple_value, w)
            return None if t is None else t[e.index]
        if isinstance(e, ShapeExpr):
            return tuple(ctxs[w].dim(v) for v in e.values)
        if isinstance(e, PrimValue):
            return ctxs[w].dim(e.value)
        raise SpmdError(f"cannot evaluate {type(e).__name__}")

    if stats is not None:
        stats.num_workers = workers[-1] + 1  # the session, as Disco runs it: ids in no mesh idle
        stats.simulated = len(workers)
        stats.records.clear()
    with np.errstate(all="ignore"):
        for b in f.bindings():
            v = b.value
            if isinstance(v, Call):
                kind = v.op.step
                spmd = kind.simulate if kind is not None and v.op is kind.local_op else None
                if spmd is not None:
                    attrs = v.op.full_attrs(v.attrs)
                    xs = {w: ev(v.args[0], w) for w in workers}
                    sender = attrs.get("src_mesh", attrs.get("device_mesh"))
                    if sender is not None:
                        missing = [d for d in sender.device_list(values) if xs.get(d) is None]
                        if missing:
                            raise SpmdError(
                                f"R.{v.op.name} (binding '{b.var.name}'): devices {missing} of its mesh "
                                "hold no value for the input (is the input on another mesh?)"
                            )
                    outs, sent = spmd(xs, attrs, ctxs[workers[0]])
                    for w in workers:
                        envs[w][b.var] = outs.get(w)
                    if stats is not None:
                        stats.records.append(CollectiveRecord(b.var.name, v.op.name, kind.name, int(sent)))
                    continue
                if v.op.numpy is None:
                    raise SpmdError(f"R.{v.op.name} (binding '{b.var.name}') has no numpy reference to run")
                attrs = v.op.full_attrs(v.attrs)
                for w in workers:
                    args = [ev(a, w) for a in v.args]
                    envs[w][b.var] = None if any(_holds_nothing(a) for a in args) else v.op.numpy(args, attrs, ctxs[w])
            else:
                for w in workers:
                    envs[w][b.var] = ev(v, w)
        results = {w: ev(f.result, w) for w in workers}
    return assemble_output(gresult, results, values, f"the result of @{func}", rtol, atol)
