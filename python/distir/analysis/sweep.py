"""Per-device-count sweeps: one pipeline run, then a cheap specialization per count.

:func:`sweep` runs the distribute pipeline once with ``num_workers`` symbolic, reads the
communication and memory formulas off the local-view module, and then, per count,
specializes the module (which checks that every sharded dim divides), evaluates the
formulas, and optionally builds that count with TVM. A module with count variants (a layout per
class of counts, docs/propagation.md) has its numbers read off each count's specialized program
(the formulas are those of the function's own layout). A count that does not
divide is reported in its row and the others go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

from ..errors import DistirError
from ..ir.expr import IRModule
from ..transform.count_variants import COUNT_GUARD
from .comm import CommVolume, comm_volume
from .common import pick_function
from .errors import AnalysisError
from .fit import parse_bytes, split_params, worker_memory
from .formula import sum_dims, to_str
from .memory import MemoryFootprint, memory_footprint, param_balance
from .timing import CommModel, CommTime, comm_time_formula

__all__ = ["AutoSweepResult", "SweepResult", "SweepRow", "auto_sweep", "parse_counts", "sweep"]


@dataclass
class SweepRow:
    """The numbers at one device count (``error`` set, numbers None, when it did not specialize)."""

    num_workers: int
    param_bytes: int | None = None
    param_imbalance: Fraction | None = None  # largest parameter bytes a device holds / the mean (1 when even)
    peak_bytes: int | None = None
    peak_at: str = ""
    comm_bytes_per_worker: Fraction | None = None
    comm_total_bytes: int | None = None
    collectives: dict[str, int] = field(default_factory=dict)
    comm_bytes_by_kind: dict[str, int] = field(default_factory=dict)
    comm_seconds: float | None = None
    specialize_seconds: float = 0.0
    build_seconds: float | None = None
    error: str | None = None
    cache_bytes: int | None = None  # the KV cache's pieces (parameters a decode function carries)
    activation_bytes: int | None = None  # what TVM's static planner allocates for intermediates and results
    need_bytes: int | None = None  # all a worker needs: parameters (cache included) + activation_bytes
    fits: bool | None = None  # need_bytes <= the device memory given (None when none was)
    layouts: dict[str, str] = field(default_factory=dict)  # auto_sweep: each parameter's layout at this count
    layout_changes: list[str] = field(default_factory=list)  # auto_sweep: parameters laid out otherwise than the row before


@dataclass
class SweepResult:
    symbol: str
    bound: dict[str, int]
    model: CommModel
    volume: CommVolume
    memory: MemoryFootprint
    time: CommTime
    pipeline_seconds: float
    analysis_seconds: float
    rows: list[SweepRow]
    device_memory: int | None = None  # bytes per worker the fit verdict compares with
    cache_params: tuple[str, ...] = ()  # the KV-cache parameters (part of the parameters)
    cache_bytes: Any = 0  # their bytes per worker, a formula

    @property
    def smallest_fit(self) -> int | None:
        """The smallest count whose need fits the device memory (None when none does or none was given)."""
        return _smallest_fit(self.rows)

    def formulas(self) -> dict[str, str]:
        """The formulas, simplified, as text (one entry per quantity and per collective kind)."""
        out = {
            "param_bytes": to_str(self.memory.param_bytes),
            "peak_bytes": to_str(self.memory.peak_bytes),
            **({"cache_bytes": to_str(self.cache_bytes)} if self.cache_params else {}),
            "comm_bytes_per_worker": to_str(self.volume.bytes_per_worker),
            "comm_total_bytes": to_str(self.volume.total_bytes),
        }
        for kind, r in self.volume.per_worker_by_kind().items():
            out[f"{kind}_bytes_per_worker"] = to_str(r)
        out["comm_seconds"] = str(self.time)
        return out

    def to_json(self) -> dict[str, Any]:
        rows = []
        for r in self.rows:
            d = asdict(r)
            if r.comm_bytes_per_worker is not None:
                d["comm_bytes_per_worker"] = float(r.comm_bytes_per_worker)
            if r.param_imbalance is not None:
                d["param_imbalance"] = float(r.param_imbalance)
            rows.append(d)
        return {
            "symbol": self.symbol,
            "bound": dict(self.bound),
            "model": {"latency_seconds": self.model.latency, "bandwidth_bytes_per_second": self.model.bandwidth,
                      "axis_costs": None if self.model.axes is None else str(self.model.axes)},
            "pipeline_seconds": self.pipeline_seconds,
            "analysis_seconds": self.analysis_seconds,
            "formulas": self.formulas(),
            "peak_candidates": [
                {"at": label, "bytes": to_str(o)} for o, label in zip(self.memory.peak_bytes.options, self.memory.peak_bytes.labels)
            ],
            "collectives": self.volume.counts,
            "device_memory_bytes": self.device_memory,
            "smallest_fit": self.smallest_fit,
            "rows": rows,
        }


MAX_COUNTS = 1024  # rows one sweep runs (each specializes, and with --build compiles)


def parse_counts(text: str, maximum: int | None = None) -> list[int]:
    """Device counts -> sorted distinct counts. Comma-separated parts, each a count (``6``),
    every count of a range (``1-8``: 1, 2, ..., 8), or a range growing by a factor (``1-128x2``:
    1, 2, 4, ..., 128; ``3-96x2``: 3, 6, ..., 96).

    With ``maximum``, a count above it is an error; so are more than :data:`MAX_COUNTS` counts."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        shown = part if len(part) <= 40 else part[:37] + "..."
        lo, dash, rest = part.partition("-")
        hi, times, factor = rest.partition("x")
        try:
            if dash:
                a, b, k = int(lo), int(hi), int(factor) if times else 1
                if a < 1 or b < a or (times and k < 2):
                    raise ValueError
                top = b
            else:
                a = top = int(part)
                if a < 1:
                    raise ValueError
        except ValueError:
            raise AnalysisError(
                f"device counts: '{shown}' is not a positive integer, a range like 1-8 (every count) or a "
                "range like 1-128x2 (growing by a factor of 2 or more)"
            ) from None
        if maximum is not None and top > maximum:
            raise AnalysisError(f"device counts: '{shown}' goes above {maximum}, the most this sweep takes")
        if dash and not times:
            if b - a + 1 > MAX_COUNTS:
                raise AnalysisError(f"device counts: '{shown}' is {b - a + 1} counts, more than the {MAX_COUNTS} a "
                                    f"sweep runs; use a range growing by a factor, like {a}-{b}x2")
            out.update(range(a, b + 1))
        elif dash:
            c = a
            while c <= b:
                out.add(c)
                c *= k
        else:
            out.add(a)
        if len(out) > MAX_COUNTS:
            raise AnalysisError(f"device counts: more than the {MAX_COUNTS} counts a sweep runs")
    if not out:
        raise AnalysisError("device counts: give at least one, e.g. 1,2,4,8")
    return sorted(out)


def sweep(
    mod: IRModule,
    counts: Sequence[int],
    *,
    symbol: str = "num_workers",
    bind: Mapping[str, int] | None = None,
    model: CommModel | None = None,
    func: str | None = None,
    build: Callable[[IRModule, Mapping[str, int]], Any] | None = None,
    pipeline=None,
    on_row: Callable[[SweepRow], None] | None = None,
    device_memory: int | str | None = None,
    cache: Sequence[str] | None = None,
) -> SweepResult:
    """Distribute ``mod`` once, then specialize to each count; see the module docstring.

    ``bind`` fixes other symbolic sizes first (a sequence length). ``build``, when given,
    is called as ``build(local, {symbol: count})`` on the symbolic local-view module once
    the count specialized, and timed (:func:`distir.driver.tvm_builder` builds with TVM).
    ``on_row`` is called after each count (for a progress bar). When ``model`` gives per-axis costs
    (``model.axes``), the pipeline plans redistributes by time with them (docs/redistribute.md).
    Each row counts what a worker needs (:mod:`distir.analysis.fit`; ``cache`` names the KV-cache
    parameters, by default those named like one); with ``device_memory`` (bytes, or a size such
    as ``"80GB"``) it says whether that fits, and :attr:`SweepResult.smallest_fit` names the
    smallest count that does.
    """
    from ..transform.pipelines import distribute_pipeline
    from ..transform.specialize import specialize

    model = model or CommModel()
    if not counts:
        raise AnalysisError("sweep: give at least one device count, e.g. [1, 2, 4, 8]")
    bound = dict(bind or {})
    if symbol in bound:
        raise AnalysisError(f"'{symbol}' is the swept size; do not also bind it")
    device = parse_bytes(device_memory) if isinstance(device_memory, str) else device_memory
    t0 = time.perf_counter()
    if model.axes is not None:
        from ..transform.legalize_redistribute import AXIS_COSTS_KEY
        from ..transform.pass_infra import PassContext

        outer = PassContext.current()
        with PassContext(outer.opt_level, outer.required_passes, outer.disabled_passes, (),
                         {**outer.config, AXIS_COSTS_KEY: model.axes}):
            local = (pipeline or distribute_pipeline())(mod)
    else:
        local = (pipeline or distribute_pipeline())(mod)
    if bound:
        local = specialize(local, bound)
    t1 = time.perf_counter()
    volume, memory = comm_volume(local, func), memory_footprint(local, func)
    ctime = comm_time_formula(volume)
    _require_bound(volume, memory, symbol)
    caches = split_params(pick_function(local, func), cache)["cache"]  # an unknown name fails before any count
    t2 = time.perf_counter()
    rows = []
    for n in counts:
        rows.append(_row(local, n, symbol, volume, memory, ctime, model, build, device, cache))
        if on_row is not None:
            on_row(rows[-1])
    return SweepResult(symbol, bound, model, volume, memory, ctime, t1 - t0, t2 - t1, rows, device,
                       tuple(n for n, _ in caches), sum_dims(b for _, b in caches))


def _require_bound(volume: CommVolume, memory: MemoryFootprint, symbol: str) -> None:
    """The formulas may depend on ``symbol`` only: other sizes must be bound first."""
    unbound = (volume.free_vars() | memory.free_vars()) - {symbol}
    if unbound:
        names = ", ".join(sorted(unbound))
        example = min(unbound)
        raise AnalysisError(
            f"the formulas also depend on {names}; give {'its value' if len(unbound) == 1 else 'their values'} "
            f"with --bind (e.g. --bind {example}=128)"
        )


@dataclass
class AutoSweepResult:
    """:func:`auto_sweep`'s rows: each count auto-sharded, distributed and specialized on its own."""

    symbol: str
    bound: dict[str, int]
    model: CommModel
    budget: str
    seconds: float
    rows: list[SweepRow]
    activation_budget: str
    device_memory: int | None = None  # bytes per worker the fit verdict compares with

    @property
    def smallest_fit(self) -> int | None:
        """The smallest count whose need fits the device memory (None when none does or none was given)."""
        return _smallest_fit(self.rows)

    def to_json(self) -> dict[str, Any]:
        rows = []
        for r in self.rows:
            d = asdict(r)
            for k in ("comm_bytes_per_worker", "param_imbalance"):
                if d[k] is not None:
                    d[k] = float(d[k])
            rows.append(d)
        return {"symbol": self.symbol, "bound": dict(self.bound), "auto_shard": {"memory_budget": self.budget,
                                                                  "activation_budget": self.activation_budget},
                "model": {"latency_seconds": self.model.latency, "bandwidth_bytes_per_second": self.model.bandwidth},
                "seconds": self.seconds, "device_memory_bytes": self.device_memory, "smallest_fit": self.smallest_fit,
                "rows": rows}


def auto_sweep(
    mod: IRModule,
    counts: Sequence[int],
    *,
    symbol: str = "num_workers",
    bind: Mapping[str, int] | None = None,
    model: CommModel | None = None,
    func: str | None = None,
    memory_budget: str | None = None,
    activation_budget: str | None = None,
    build: Callable[[IRModule, Mapping[str, int]], Any] | None = None,
    on_row: Callable[[SweepRow], None] | None = None,
    device_memory: int | str | None = None,
    cache: Sequence[str] | None = None,
) -> AutoSweepResult:
    """Per count: auto-shard ``mod`` for that count (:class:`~distir.transform.layout_choice.auto_shard.AutoShard`,
    ``memory_budget`` and ``activation_budget`` or their defaults), distribute, specialize and read the numbers, as :func:`sweep`
    does for one layout (``device_memory`` and ``cache`` as there). Each row records the layouts chosen and which changed since the row before.
    A count whose budget cannot be met gets the error in its row; the others go on."""
    from ..transform.layout_choice.auto_shard import DEFAULT_ACTIVATION_BUDGET, DEFAULT_BUDGET, AutoShard, AutoShardError
    from ..transform.pipelines import distribute_pipeline
    from ..transform.specialize import specialize

    model = model or CommModel()
    if not counts:
        raise AnalysisError("sweep: give at least one device count, e.g. [1, 2, 4, 8]")
    bound = dict(bind or {})
    if symbol in bound:
        raise AnalysisError(f"'{symbol}' is the swept size; do not also bind it")
    budget = memory_budget or DEFAULT_BUDGET
    act_budget = activation_budget or DEFAULT_ACTIVATION_BUDGET
    device = parse_bytes(device_memory) if isinstance(device_memory, str) else device_memory
    t0 = time.perf_counter()
    rows: list[SweepRow] = []
    before: dict[str, str] | None = None
    for n in counts:
        p = AutoShard(memory_budget=budget, activation_budget=act_budget, sizes={**bound, symbol: n}, func=func)
        try:
            laid = p(mod)
        except AutoShardError as err:  # the budget cannot be met at this count
            row = SweepRow(n, error=str(err))
        else:
            local = distribute_pipeline()(laid)
            if bound:
                local = specialize(local, bound)
            volume, memory = comm_volume(local, func), memory_footprint(local, func)
            _require_bound(volume, memory, symbol)
            row = _row(local, n, symbol, volume, memory, comm_time_formula(volume), model, build, device, cache)
        if p.report is not None:
            row.layouts = {k: str(v) for k, v in p.report.layouts().items()}
            if before is not None:
                row.layout_changes = [k for k, v in row.layouts.items() if before.get(k) != v]
            before = row.layouts
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return AutoSweepResult(symbol, bound, model, budget, time.perf_counter() - t0, rows, act_budget, device)


def _smallest_fit(rows: Sequence[SweepRow]) -> int | None:
    return min((r.num_workers for r in rows if r.fits), default=None)


def _row(local: IRModule, n: int, symbol: str, volume: CommVolume, memory: MemoryFootprint, ctime: CommTime,
         model: CommModel, build, device: int | None = None, cache: Sequence[str] | None = None) -> SweepRow:
    """Specialize to ``n`` (timed), then read the numbers off the formulas."""
    from ..transform.specialize import specialize

    values = {symbol: n}
    row = SweepRow(n)
    s0 = time.perf_counter()
    try:
        spec = specialize(local, values)
    except DistirError as err:
        row.error = str(err)
    row.specialize_seconds = time.perf_counter() - s0
    if row.error is not None:
        return row
    balanced = local
    if any(COUNT_GUARD in f.attrs for f in local.functions.values()):
        # count variants (docs/propagation.md): the formulas are the function's own layout, and another
        # layout may run at this count; the count's program is read instead
        volume, memory = comm_volume(spec, volume.function), memory_footprint(spec, memory.function)
        ctime, balanced = comm_time_formula(volume), spec
    need = worker_memory(spec, None, memory.function, cache)
    row.cache_bytes, row.activation_bytes, row.need_bytes = need.cache_bytes, need.activation_bytes, need.total_bytes
    row.fits = None if device is None else need.total_bytes <= device
    comm, mem = volume.evaluate(values), memory.evaluate(values)
    row.param_bytes, row.peak_bytes, row.peak_at = mem.param_bytes, mem.peak_bytes, mem.peak_at
    row.param_imbalance = param_balance(balanced, values, memory.function).imbalance
    row.comm_bytes_per_worker, row.comm_total_bytes = comm.bytes_per_worker, comm.total_bytes
    row.collectives, row.comm_bytes_by_kind = comm.counts, comm.bytes_by_kind
    row.comm_seconds = ctime.seconds(model, values)
    if build is not None:
        b0 = time.perf_counter()
        build(local, values)
        row.build_seconds = time.perf_counter() - b0
    return row
