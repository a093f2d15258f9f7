"""Which device count fits a device's memory, before launch.

Each worker holds its pieces of the function's parameters, split three ways, and the
intermediates TVM allocates:

- **weights**: the parameters after the first ``num_input`` (TVM's attribute, kept by
  :func:`distir.tvm.from_nn`); without the attribute every parameter that is not a cache;
- **KV cache**: the parameters a decode function carries from call to call (named with
  ``cache``, ``past_key`` or ``past_value``, or named by the caller);
- **inputs**: the other leading parameters (token ids, rotary tables);
- **activations**: what TVM's static planner allocates for the intermediates and the results
  at that count (:func:`distir.analysis.planning.planned_memory`), at least the liveness peak
  (:func:`distir.analysis.memory_footprint`), which is the formula.

:func:`memory_need` gives the formulas in the counts; :func:`worker_memory` the numbers at one
count (specializing the module), and :func:`memory_fit` the verdict per count and the smallest
count that fits. Sizes are parsed by :func:`parse_bytes` (``80GB`` is 80 * 10**9 bytes,
``80GiB`` 80 * 2**30).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..ir import sym
from ..ir.expr import Function, IRModule
from ..ir.sym import Dim
from ..ir.types import free_vars as type_free_vars
from ..transform.weights import NUM_INPUT
from .common import pick_function, value_bytes
from .errors import AnalysisError
from .formula import Maximum, _eval, sum_dims
from .memory import buffers, concrete_peak, memory_footprint
from .planning import PlannedMemory, plan_buffers

__all__ = ["CACHE_PATTERN", "FitResult", "MemoryNeed", "WorkerMemory", "format_bytes", "memory_fit", "memory_need",
           "parse_bytes", "worker_memory"]

CACHE_PATTERN = re.compile(r"cache|past_key|past_value", re.IGNORECASE)  # a parameter carried between decode calls

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str, what: str = "device memory") -> int:
    """``80GB`` -> 80_000_000_000; ``80GiB``, ``512MiB``, ``1.5TB``, ``300000`` (bytes). Decimal
    units are powers of 10, binary ones (KiB, MiB, GiB, TiB) powers of 2. A malformed size is
    one AnalysisError naming ``what``."""
    shown = text if len(text) <= 40 else text[:37] + "..."
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*", text)
    if m is None:
        raise AnalysisError(f"{what} '{shown}': not a size; give bytes with a unit, like 80GB, 80GiB or 512MiB")
    unit = m.group(2).lower()
    if unit not in _UNITS:
        raise AnalysisError(f"{what} '{shown}': unknown unit '{m.group(2)}' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")
    from fractions import Fraction

    n = Fraction(m.group(1)) * _UNITS[unit]
    if n < 1:
        raise AnalysisError(f"{what} '{shown}': less than one byte")
    return int(n)


def format_bytes(n: int) -> str:
    """``80000000000`` -> ``"80 GB (74.5 GiB)"``: the decimal unit users quote and the binary one."""
    dec = next(((n / s, u) for s, u in ((10**12, "TB"), (10**9, "GB"), (10**6, "MB"), (10**3, "kB"))
                if n >= s), (n, "B"))
    binary = next(((n / s, u) for s, u in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))
                   if n >= s), (n, "B"))
    return f"{dec[0]:.3g} {dec[1]} ({binary[0]:.3g} {binary[1]})" if dec[1] != "B" else f"{n} B"


def split_params(f: Function, cache: Sequence[str] | None = None) -> dict[str, list[tuple[str, Dim]]]:
    """The parameters of ``f`` as ``{"weights": ..., "cache": ..., "inputs": ...}``, each a list of
    (name, bytes per worker); see the module docstring."""
    names = [p.name for p in f.params]
    if cache is not None:
        unknown = [c for c in cache if c not in names]
        if unknown:
            shown = ", ".join(names[:6]) + (f", ... ({len(names)} in all)" if len(names) > 6 else "")
            raise AnalysisError(f"@{f.name} has no parameter {', '.join(repr(c) for c in unknown[:3])} to count as "
                                f"a KV cache (it has: {shown})")
        is_cache = set(cache)
    else:
        is_cache = {n for n in names if CACHE_PATTERN.search(n)}
    n_in = f.attrs.get(NUM_INPUT) if f.attrs is not None else None
    if not isinstance(n_in, int) or isinstance(n_in, bool) or not 0 <= n_in <= len(names):
        n_in = 0  # no attribute: every parameter that is not a cache is a weight
    out: dict[str, list[tuple[str, Dim]]] = {"weights": [], "cache": [], "inputs": []}
    for i, p in enumerate(f.params):
        kind = "cache" if p.name in is_cache else ("inputs" if i < n_in else "weights")
        out[kind].append((p.name, value_bytes(p.type)))
    return out


@dataclass(frozen=True)
class WorkerMemory:
    """The bytes one worker needs at one count."""

    weight_bytes: int
    cache_bytes: int
    input_bytes: int
    live_peak_bytes: int  # the liveness peak of intermediates (what any planner needs at least)
    planned: PlannedMemory  # what TVM's static planner allocates for intermediates and results

    @property
    def activation_bytes(self) -> int:
        return self.planned.total_bytes

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.cache_bytes + self.input_bytes + self.activation_bytes


@dataclass(frozen=True)
class MemoryNeed:
    """Per-worker bytes as formulas in the counts (``activations`` is the liveness peak; the
    planned bytes, somewhat more, need a count: :meth:`evaluate`)."""

    function: str
    weights: Dim
    cache: Dim
    inputs: Dim
    activations: Maximum
    cache_params: tuple[str, ...]
    source: tuple  # (module, function name, cache names given)

    @property
    def total(self) -> Maximum:
        """weights + cache + inputs + the liveness peak: one formula per candidate peak."""
        base = sum_dims((self.weights, self.cache, self.inputs))
        return Maximum(tuple(sym.normalize(sym.add(base, o)) for o in self.activations.options) or (base,),
                       self.activations.labels)

    def free_vars(self) -> set[str]:
        return sym.free_vars(self.weights) | sym.free_vars(self.cache) | sym.free_vars(self.inputs) | \
            self.activations.free_vars()

    def evaluate(self, values: Mapping[str, int] | None = None) -> WorkerMemory:
        mod, func, cache = self.source
        return worker_memory(mod, values, func, cache)


def memory_need(mod: IRModule, func: str | None = None, cache: Sequence[str] | None = None) -> MemoryNeed:
    """The formulas of :class:`MemoryNeed` for ``mod[func]`` (a local-view module)."""
    f = pick_function(mod, func)
    parts = split_params(f, cache)
    fp = memory_footprint(mod, f.name)
    return MemoryNeed(f.name, *(sum_dims(b for _, b in parts[k]) for k in ("weights", "cache", "inputs")),
                      fp.peak_bytes, tuple(n for n, _ in parts["cache"]),
                      (mod, f.name, None if cache is None else tuple(cache)))


def worker_memory(mod: IRModule, values: Mapping[str, int] | None = None, func: str | None = None,
                  cache: Sequence[str] | None = None) -> WorkerMemory:
    """The bytes one worker needs for ``mod[func]`` at ``values`` (specialized first when a
    symbolic size remains: padding masks and regroups are then what they are at that count)."""
    values = dict(values or {})
    f = pick_function(mod, func)
    unknown = sorted(set(values) - _symbols(mod, f))
    if unknown:  # a value the module does not take would be ignored: numbers for another count
        raise AnalysisError(f"@{f.name} has no symbolic size {', '.join(repr(n) for n in unknown)} (its meshes and "
                            f"shapes are fixed there), so its memory is the same at every value; leave it out")
    if values:
        from ..transform.specialize import specialize

        mod = specialize(mod, values)
        f = mod[f.name]
    parts = split_params(f, cache)
    sums = {k: _eval(sum_dims(b for _, b in v), {}) for k, v in parts.items()}
    bufs = buffers(f)  # one walk for the peak and the planner
    return WorkerMemory(sums["weights"], sums["cache"], sums["inputs"], concrete_peak(bufs), plan_buffers(bufs))


def _symbols(mod: IRModule, f: Function) -> set[str]:
    """The symbolic sizes ``f`` depends on: its meshes' and its values' types."""
    out: set[str] = set()
    for m in mod.meshes():
        for d in m.shape:
            out |= sym.free_vars(d)
    for v in [*f.params, *(b.var for b in f.bindings())]:
        out |= type_free_vars(v.type)
    return out


@dataclass(frozen=True)
class FitResult:
    """Per count, the bytes a worker needs and whether they fit ``device_bytes``."""

    device_bytes: int
    rows: tuple[tuple[int, WorkerMemory], ...]  # (count, need), in the order given

    def fits(self, count: int) -> bool:
        return dict(self.rows)[count].total_bytes <= self.device_bytes

    @property
    def fitting(self) -> list[int]:
        return [n for n, m in self.rows if m.total_bytes <= self.device_bytes]

    @property
    def smallest(self) -> int | None:
        """The smallest count whose need fits (None when none does)."""
        return min(self.fitting, default=None)

    def summary(self) -> str:
        return fit_summary(self.device_bytes, [(n, m.total_bytes) for n, m in self.rows])


def fit_summary(device_bytes: int, needs: Sequence[tuple[int, int]]) -> str:
    """One line: which counts fit ``device_bytes`` and the smallest, or that none does."""
    fit = sorted(n for n, b in needs if b <= device_bytes)
    head = f"device memory {format_bytes(device_bytes)} per worker: "
    if fit:
        return head + f"fits at {', '.join(map(str, fit))} of the counts given; the smallest that fits is {fit[0]}"
    if not needs:
        return head + "no count to check"
    n, b = min(needs, key=lambda nb: (nb[1], nb[0]))
    return head + f"no count given fits (the least need is {format_bytes(b)}, at {n} workers)"


def memory_fit(mod: IRModule, counts: Sequence[int], device_bytes: int | str, *, symbol: str = "num_workers",
               func: str | None = None, cache: Sequence[str] | None = None) -> FitResult:
    """Which of ``counts`` fit ``device_bytes`` per worker (an int, or a size such as ``"80GB"``),
    for a local-view module whose only remaining symbolic size is ``symbol``."""
    if isinstance(device_bytes, str):
        device_bytes = parse_bytes(device_bytes)
    if not counts:
        raise AnalysisError("memory fit: give at least one device count, e.g. [1, 2, 4, 8]")
    rows = tuple((int(n), worker_memory(mod, {symbol: int(n)}, func, cache)) for n in counts)
    return FitResult(int(device_bytes), rows)
