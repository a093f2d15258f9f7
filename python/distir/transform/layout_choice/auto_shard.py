"""AutoShard (``auto-shard``): lay out every parameter of a plain module on its mesh, by cost.

The module declares a mesh and its parameters are plain ``R.Tensor``: nothing says how
anything is laid out. The pass chooses a layout for every parameter (replicated, or any dim
cut along any mesh axis; uneven cuts are exact) together with the layouts of every op, as
one integer program (:mod:`~distir.transform.layout_choice.program`): the bytes each worker sends,
summed over sampled sizes, are minimized under a per-device **memory budget** on the
weights and an **activation budget** on the peak live activations per worker. Minimizing
bytes alone would replicate everything (no bytes at all); the budgets are what make the
weights be cut and the work divided (with a long sequence, gathering every weight and running
every op replicated sends the fewest bytes but holds every activation whole). It writes the function as the solver laid it out (what
``propagate-sharding`` writes), and ``distribute`` keeps it: ``-p auto-shard,distribute``.
A module without a mesh gets the 1-D ``("num_workers",)`` mesh ``shard-params`` gives it.

Weights are the parameters after ``num_input`` when the function has that attribute
(:mod:`~distir.transform.weights`), else the parameters whose shapes are static and that no
matmul reads as its left operand; ``inputs`` (or the pass config's ``auto-shard.inputs``) names
the activations instead. Other parameters (inputs: a sequence length, ``x`` of ``x @ W``) are
laid out for communication only; their
memory is not in the budget. The activation budget bounds the solver's linear estimate of the
peak (:class:`~distir.transform.layout_choice.plan.ActivationLimit`); its ``min`` is the least peak
the solver finds. Both budgets (:class:`MemoryBudget`; defaults ``min+10%`` for the weights,
``min+25%`` for the activations) hold
at the device count given (``sizes={"num_workers": 4}``), or else at each sampled count
(``GUARD_MESH_SAMPLES``: 2, 3, 4 and 8), where the bytes are summed too. See docs/auto_shard.md.
"""

from __future__ import annotations

import difflib
import functools
import itertools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from ...errors import DistirError, PassError
from ...ir import sym
from ...ir.builder import mesh as make_mesh
from ...ir.expr import Call, Function, IRModule, Var
from ...ir.layout import local_bytes
from ...ir.mesh import DeviceMesh
from ...ir.placement import Placement, Replicate, Shard, StridedShard
from ...ir.sharding import without_placement
from ...ir.types import DTensorType, TensorType
from ..legalize_redistribute import axis_costs_of, fuse_reshapes
from ..pass_infra import ModulePass, PassContext, register_pass
from ..rewrite import map_bindings
from ..weights import NUM_INPUT, param_names
from .alternatives import Alternatives, redistributed_first
from .cost_model import DIM_SIZE_HINT, MESH_SIZE_HINT, CostModel
from .count_classes import declared_counts
from .measure import GUARD_MESH_SAMPLES, function_bytes, function_peak
from .plan import ActivationLimit, LayoutPlan, ParamChoice
from .propagate_sharding import write_layouts
from .sharding_graph import Graph, Slot, build_graph
from .solution import Rows, highs
from .windows import NoLayoutError, solve_layouts

__all__ = ["AutoShard", "AutoShardError", "AutoShardReport", "MemoryBudget", "parse_activation_budget", "strip_layouts"]

DEFAULT_BUDGET = "min+10%"
DEFAULT_ACTIVATION_BUDGET = "min+25%"  # the peak is an over-estimate (copies over their value's whole read range)
NO_LIMIT = "none"  # an activation budget that bounds nothing: communication and the weights' budget alone
MAX_EXPLAINED = 96  # alternatives --explain computes (each is one solve of the whole function)
WINDOW_OPS = 24  # the solver's windows (smaller than propagation's: the budget makes each program harder)
_RETRIES = 4  # re-solves when the solver's float tolerance lets a budget be exceeded by a hair


class AutoShardError(PassError):
    """A budget that does not parse or cannot be met, or a module auto-shard cannot lay out (one line)."""


# ---------------------------------------------------------------------------------------------
# the memory budget

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"


@dataclass(frozen=True)
class MemoryBudget:
    """Bytes each device may hold (of weights, or of peak live activations), in one of four forms
    (``text`` as given):

    - ``2GB``, ``1.5GiB``, ``300000``: bytes (decimal or binary units);
    - ``25%``: a share of the replicated size (every weight, or every value, whole on every device);
    - ``1.1/W``: that factor times the replicated size over the device count W;
    - ``min``, ``min+10%``: the smallest one layout reaches (weights: each in its layout of the
      fewest bytes summed over the budget's counts, one layout for every count; activations: the
      least peak the solver finds), plus a margin. Always achievable; the defaults, ``min+10%``
      (weights) and ``min+25%`` (activations).
    """

    kind: str  # "bytes", "share", "per_device", "min"
    value: Fraction
    text: str

    @staticmethod
    def parse(text: str | int | MemoryBudget) -> MemoryBudget:
        if isinstance(text, MemoryBudget):
            return text
        if isinstance(text, int) and not isinstance(text, bool):
            text = str(text)
        if not isinstance(text, str):
            raise AutoShardError(f"memory budget {text!r}: give a string like '2GB', '25%', '1.1/W' or 'min+10%'")
        t = text.strip().lower().replace(" ", "")
        if m := re.fullmatch(r"min(?:\+" + _NUMBER + r"%)?", t):
            return MemoryBudget("min", Fraction(1) + Fraction(m.group(1) or "0") / 100, text)
        if m := re.fullmatch(_NUMBER + r"%", t):
            value = Fraction(m.group(1)) / 100
            if value <= 0:
                raise AutoShardError(f"memory budget '{text}': a share must be above 0%")
            return MemoryBudget("share", value, text)
        if m := re.fullmatch(_NUMBER + r"/(?:w|num_workers)", t):
            value = Fraction(m.group(1))
            if value <= 0:
                raise AutoShardError(f"memory budget '{text}': the factor must be above 0")
            return MemoryBudget("per_device", value, text)
        if m := re.fullmatch(_NUMBER + r"([a-z]*)", t):
            unit = m.group(2)
            if unit not in _UNITS:
                raise AutoShardError(f"memory budget '{text}': unknown unit '{unit}' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")
            value = Fraction(m.group(1)) * _UNITS[unit]
            if value < 1:
                raise AutoShardError(f"memory budget '{text}': less than one byte")
            return MemoryBudget("bytes", value, text)
        raise AutoShardError(
            f"memory budget '{text}': not bytes ('2GB', '512MiB', '300000'), a share of the replicated size "
            "('25%'), a factor over the device count ('1.1/W') or the smallest achievable ('min', 'min+10%')"
        )

    def bound(self, replicated: int, smallest: int, devices: int) -> Fraction:
        """The budget in bytes per device, given the weights' replicated size, the smallest one layout
        reaches (the reference of ``min``), and the number of devices of the mesh."""
        if self.kind == "bytes":
            return self.value
        if self.kind == "share":
            return self.value * replicated
        if self.kind == "per_device":
            return self.value * replicated / devices
        return self.value * smallest


def _human(n: float | Fraction) -> str:
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(x) < 1024 or unit == "GiB":
            return f"{int(n):,} B" if unit == "B" else f"{x:.3g} {unit}"
        x /= 1024
    return f"{x} B"  # pragma: no cover


def _human_range(lo: Fraction, hi: Fraction, sign: bool = False) -> str:
    """``lo..hi`` in the unit :func:`_human` gives the larger in size, ``lo`` rounded down and ``hi`` up
    (to 4 significant digits of the larger: one more than a number alone, so that a narrow range shows
    as one), so that the range printed holds the one proven."""
    top = max(abs(lo), abs(hi))
    scale, unit = Fraction(1), "B"
    for name in ("KiB", "MiB", "GiB"):
        if top < scale * 1024:
            break
        scale, unit = scale * 1024, name
    step = Fraction(1) if unit == "B" else Fraction(10) ** (math.floor(math.log10(float(top / scale))) - 3)
    a, b = math.floor(lo / scale / step) * step, math.ceil(hi / scale / step) * step
    digits = 0 if step >= 1 else -int(round(math.log10(float(step))))

    def fmt(v: Fraction) -> str:
        text = f"{float(v):,.{digits}f}" if unit == "B" else f"{float(v):.{digits}f}"
        return ("+" if sign and v > 0 else "") + text

    return f"{fmt(a)}..{fmt(b)} {unit}"


def _human_up(n: Fraction) -> str:
    """``n`` in the unit :func:`_human` gives it, rounded up (a bound from above stays one)."""
    return _human_range(n, n).split("..")[-1] if n else "0 B"


def _range_diff(lo: Fraction, hi: Fraction) -> str:
    """A range of differences from the chosen layout's bytes (``vs chosen``)."""
    return _human_range(lo, hi, sign=True)


# ---------------------------------------------------------------------------------------------
# stripping layouts (to auto-shard a hand-annotated module)


def strip_layouts(mod: IRModule) -> IRModule:
    """``mod`` with every layout the user wrote taken out: DTensor parameters become plain
    tensors and ``R.dist.annotate_sharding`` hints go (their uses read the annotated value).
    The meshes stay declared. Explicit redistributes are kept: they move values, not hint."""

    def strip(func: Function) -> Function:
        plain = _retyped(func, {i: without_placement(p.type) for i, p in enumerate(func.params)})

        def fn(b, env):
            v = b.value
            if isinstance(v, Call) and v.op.name == "dist.annotate_sharding":
                env[b.var] = v.args[0]
                return []
            plain = without_placement(b.var.type)
            if plain != b.var.type:
                var = Var(b.var.name, plain, b.var.span)
                env[b.var] = var
                return [type(b)(var, v, b.span)]
            return None

        out = map_bindings(plain, fn)
        ret = without_placement(func.ret_type) if func.ret_type is not None else None
        return out.replace(ret_type=ret)

    return mod.replace(functions={name: strip(f) for name, f in mod.functions.items()})


def _retyped(func: Function, types: Mapping[int, Any]) -> Function:
    """``func`` with parameter ``i`` typed ``types[i]`` (its uses read the new parameter)."""
    params = tuple(Var(p.name, types[i], p.span) if i in types and types[i] != p.type else p
                   for i, p in enumerate(func.params))
    env = {old: new for old, new in zip(func.params, params) if old is not new}
    if not env:
        return func
    return map_bindings(func, lambda b, e: None, dict(env)).replace(params=params)


# ---------------------------------------------------------------------------------------------
# the report


@dataclass(frozen=True)
class Alternative:
    """One layout of one parameter and what the whole function costs with it (the others as chosen)."""

    layout: Placement
    sent: Fraction | None  # bytes each worker sends (within the program and gathering results); None: not computed
    weights: int  # bytes of weights each device holds
    within_budget: bool  # the weights' budget, and the activation budget where the layout was laid out
    activations: int | None = None  # peak live activation bytes per worker (measure.function_peak)
    # the least any layout with this parameter's layout sends, where that is below ``sent`` (not proven
    # within the explanation's budget: the bytes are a range); None: ``sent`` is the least
    least: Fraction | None = None
    # ``sent`` is an upper bound, not the least: what the chosen layout sends with this parameter given
    # so and redistributed first (explain="bounds", alternatives.redistributed_first)
    bound: bool = False


@dataclass(frozen=True)
class ParamReport:
    name: str
    shape: str
    weight: bool  # in the memory budget
    chosen: Placement
    held: int  # bytes of this parameter each device holds (its largest block)
    alternatives: tuple[Alternative, ...] = ()  # the chosen layout first, with --explain


@dataclass
class AutoShardReport:
    """What auto-shard chose for one function, at ``env`` (the count given, else 4 workers, and
    each other symbolic dim at its size hint, 64 by default)."""

    func: str
    mesh: str
    env: dict[str, int]
    budget: MemoryBudget
    budget_bytes: Fraction  # at env
    weights_bytes: int  # the chosen layout's weights per device, at env
    replicated_bytes: int  # every weight whole
    devices: int
    sent: Fraction | None  # bytes each worker sends with the chosen layout, at env
    params: list[ParamReport] = field(default_factory=list)
    note: str = ""
    activation_budget: MemoryBudget | None = None  # None: activations not bounded
    activations: int | None = None  # the chosen layout's peak live activation bytes per worker, at env

    def layouts(self) -> dict[str, Placement]:
        return {p.name: p.chosen for p in self.params}

    def render(self) -> str:
        """A table: per parameter its layout, what it holds per device, and (explained) each
        alternative's bytes sent and weights held."""
        at = ", ".join(f"{k} = {v}" for k, v in self.env.items())
        lines = [
            f"auto-shard @{self.func} on {self.mesh}, at {at}",
            f"  weights per device: {_human(self.weights_bytes)} of {_human(self.replicated_bytes)} replicated "
            f"({float(self.weights_bytes * self.devices / self.replicated_bytes):.3f} x total/W)"
            if self.replicated_bytes else "  no weights",
            f"  budget {self.budget.text}: {_human(self.budget_bytes)} per device",
        ]
        if self.activations is not None:
            limit = f"budget {self.activation_budget.text}" if self.activation_budget is not None else "not bounded"
            lines.append(f"  peak activations per device: {_human(self.activations)} ({limit})")
        if self.sent is not None:
            lines.append(f"  bytes sent per worker: {_human(self.sent)}")
        explained = any(p.alternatives for p in self.params)
        head = ("parameter", "shape", "layout", "held/device") + (
            ("sent/worker", "vs chosen", "weights/device", "activations/device") if explained else ()) + ("note",)
        rows = []
        for p in self.params:
            if not explained:
                rows.append((p.name, p.shape, str(p.chosen), _human(p.held), "" if p.weight else "input"))
                continue
            base = p.alternatives[0].sent
            for i, a in enumerate(p.alternatives):
                diff = "" if i == 0 or a.sent is None or base is None else (
                    _range_diff(a.least - base, a.sent - base) if a.least is not None else
                    "same" if a.sent == base else f"{'+' if a.sent > base else '-'}{_human(abs(a.sent - base))}")
                sent = ("-" if a.sent is None else _human_range(a.least, a.sent) if a.least is not None
                        else _human(a.sent))
                if a.bound and a.sent is not None:  # rounded up: a bound from above stays one
                    sent = f"<= {_human_up(a.sent)}"
                    diff = diff and ("<= same" if a.sent == base else
                                     "<= " + _human_range(a.sent - base, a.sent - base, sign=True).split("..")[-1])
                # over the weights' budget, or (weights within it) no layout of the values within the chosen
                # plan's limit on the peak of activations
                mark = ("chosen" if i == 0 else "over budget" if a.weights > self.budget_bytes
                        else "over budget (activations)" if not a.within_budget else "")
                if a.bound and a.activations is not None and self.activations is not None \
                        and a.activations > self.activations:
                    mark = ", ".join(x for x in (mark, "peak above chosen") if x)
                if not p.weight:
                    mark = (mark + ", input").strip(", ")
                rows.append((p.name if i == 0 else "", p.shape if i == 0 else "", str(a.layout),
                             _human(p.held) if i == 0 else "", sent, diff,
                             _human(a.weights), "-" if a.activations is None else _human(a.activations), mark))
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        right = {3, 4, 5, 6, 7} if explained else {3}

        def line(r) -> str:
            return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

        lines.append(line(head))
        lines.append("  ".join("-" * w for w in widths))
        lines.extend(line(r) for r in rows)
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# the pass


@register_pass
@dataclass
class AutoShard(ModulePass):
    """Lay out every parameter by cost: least communication under per-device budgets on weights and activations."""

    name: ClassVar[str] = "auto-shard"
    opt_level: ClassVar[int] = 0

    memory_budget: str | int | MemoryBudget = DEFAULT_BUDGET
    # peak live activations per device ("none": not bounded, the weights' budget alone)
    activation_budget: str | int | MemoryBudget | None = DEFAULT_ACTIVATION_BUDGET
    sizes: Mapping[str, int] | None = None  # symbols fixed: a device count ({"num_workers": 8}), a sequence length
    # the parameters that are activations, by name (every other plain parameter is a weight); None: the
    # pass config's "auto-shard.inputs", else inferred (weight_indices)
    inputs: tuple[str, ...] | None = None
    func: str | None = None
    mesh: DeviceMesh | None = None
    # each parameter's alternatives in the report: True or "exact", each solved (proven); "bounds", each
    # bounded from above without a solve (the chosen layout with the parameter redistributed first)
    explain: bool | str = False
    # explain within a budget of work: each alternative's programs stop after this many of HiGHS's limit
    # checks (a round of cuts at the root, a node after it), counted, not timed, so the report is the same
    # on every machine; an alternative not proven by then is a range. None: each proven (docs/auto_shard.md)
    explain_checks: int | None = None
    report: AutoShardReport | None = field(default=None, init=False, compare=False, repr=False)

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        budget = MemoryBudget.parse(self.memory_budget)
        activations = parse_activation_budget(self.activation_budget)
        checks = self.explain_checks
        if self.explain not in (False, True, "bounds", "exact"):
            raise AutoShardError(f"auto-shard: explain must be True, False, 'bounds' or 'exact', got {self.explain!r}")
        if checks is not None and (not isinstance(checks, int) or isinstance(checks, bool) or checks < 1):
            raise AutoShardError(f"auto-shard: explain_checks must be a positive integer or None, got {checks!r}")
        sizes = dict(self.sizes or {})
        for k, v in sizes.items():
            if not isinstance(k, str) or not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise AutoShardError(f"auto-shard: sizes must map symbol names to positive integers, got {k!r}: {v!r}")
        fname = self._function(mod)
        func = mod.functions[fname]
        mesh = self._mesh(mod)
        _check_sizes(sizes, func, mesh)
        names = _mesh_names_of(mod)
        names.setdefault(mesh, f"mesh[{len(names)}]")
        inputs = self.inputs if self.inputs is not None else ctx.config.get("auto-shard.inputs")
        if inputs is not None:
            if isinstance(inputs, str) or not all(isinstance(n, str) for n in inputs):
                raise AutoShardError(f"auto-shard: inputs must be a sequence of parameter names, got {inputs!r}")
            inputs = tuple(inputs)
        search = _Search(func, mesh, budget, sizes, ctx, names, activations, inputs)
        laid, written = search.run()
        out = mod
        if written is not None:
            meshes = list(mod.meshes())
            infos = dict(mod.global_infos)
            infos["mesh"] = tuple(meshes if mesh in meshes else [*meshes, mesh])
            out = mod.replace(functions={**mod.functions, fname: written}, global_infos=infos)
        self.report = _report(search, fname, laid, written, bool(self.explain) or self.explain_checks is not None,
                              _mesh_label(mod, mesh), self.explain_checks,
                              bounds=self.explain == "bounds" and self.explain_checks is None)
        return out

    def _function(self, mod: IRModule) -> str:
        if self.func is not None:
            if self.func not in mod.functions:
                raise AutoShardError(f"auto-shard: no function @{self.func} (functions: "
                                     f"{', '.join('@' + f for f in mod.functions)})")
            return self.func
        plain = [n for n, f in mod.functions.items() if any(isinstance(p.type, TensorType) for p in f.params)]
        if "main" in plain or len(plain) == 1:
            return "main" if "main" in plain else plain[0]
        if not plain:
            raise AutoShardError("auto-shard: no function has a plain R.Tensor parameter to lay out")
        raise AutoShardError(f"auto-shard: several functions have plain parameters ({', '.join('@' + f for f in plain)}); "
                             "say which with AutoShard(func=...)")

    def _mesh(self, mod: IRModule) -> DeviceMesh:
        meshes = list(mod.meshes())
        if self.mesh is not None:
            if not isinstance(self.mesh, DeviceMesh):
                raise AutoShardError(f"auto-shard: mesh must be a DeviceMesh, got {type(self.mesh).__name__}")
            return self.mesh
        if not meshes:  # as shard-params does: a 1-D mesh of num_workers devices
            return make_mesh(("num_workers",))
        if len(meshes) > 1:
            raise AutoShardError(f"auto-shard: the module declares {len(meshes)} device meshes; say which with "
                                 "AutoShard(mesh=...)")
        return meshes[0]


def parse_activation_budget(text: str | int | MemoryBudget | None) -> MemoryBudget | None:
    """The activation budget (a :class:`MemoryBudget`), or None for ``none``: not bounded."""
    if text is None or (isinstance(text, str) and text.strip().lower() == NO_LIMIT):
        return None
    return MemoryBudget.parse(text)


def _symbols(func: Function, mesh: DeviceMesh) -> set[str]:
    """The symbolic sizes of the function and the mesh."""
    known = set(_mesh_names(mesh))
    for t in [p.type for p in func.params] + [b.var.type for b in func.bindings()]:
        for d in getattr(without_placement(t), "shape", None) or ():
            if not isinstance(d, int):
                known |= sym.free_vars(d)
    return known


def _check_sizes(sizes: Mapping[str, int], func: Function, mesh: DeviceMesh) -> None:
    """Every name in ``sizes`` must be a symbolic size of the function or the mesh (a typo is not ignored)."""
    known = _symbols(func, mesh)
    unknown = sorted(set(sizes) - known)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise AutoShardError(f"auto-shard: sizes name '{unknown[0]}', which is not a symbolic size of @{func.name} or "
                             f"its mesh (its symbolic sizes: {', '.join(sorted(known)) or 'none'}){hint}")


@functools.lru_cache(maxsize=256)
def candidate_layouts(ndim: int, mesh: DeviceMesh) -> tuple[Placement, ...]:
    """Replicated, and every way of cutting dims along mesh axes (each axis: R or S[d]; an axis of one
    device only R: a cut there holds what R holds); remembered (asked per weight and per budget size)."""
    options = [Replicate()] + [Shard(d) for d in range(ndim)]
    out = []
    for combo in itertools.product(*([Replicate()] if a in mesh.unit_axes else options for a in range(mesh.ndim))):
        p = Placement(tuple(combo))
        try:
            p.validate(mesh.ndim, ndim)
        except DistirError:
            continue
        if p not in out:
            out.append(p)
    return tuple(out)


def split_parts(func: Function) -> tuple[int, ...]:
    """The numbers of equal sections the function's ``R.split``s cut a value into (a fused projection's
    q, k, v: 3), each at least 2."""
    parts = set()
    for b in func.bindings():
        v = b.value
        if isinstance(v, Call) and v.op.name == "split":
            k = v.attrs.get("indices_or_sections")
            if isinstance(k, int) and not isinstance(k, bool) and k >= 2:
                parts.add(k)
    return tuple(sorted(parts))


def strided_layouts(shape: tuple, mesh: DeviceMesh, parts: tuple[int, ...]) -> tuple[Placement, ...]:
    """On a 1-D mesh, ``S[d/k]`` for each static dim ``d`` that ``k`` of ``parts`` divides: the dim
    viewed as k parts, each cut over the workers (a fused QKV weight in blocks of q, k and v, which a
    split then reads without a gather: the layout Megatron gives it, TP_PLAN's ``S[0/3]``)."""
    if mesh.ndim != 1 or 0 in mesh.unit_axes:
        return ()
    return tuple(Placement((StridedShard(d, k),)) for d, n in enumerate(shape) for k in parts
                 if isinstance(n, int) and n % k == 0 and n // k > 1)


def weight_indices(func: Function, inputs: tuple[str, ...] | None = None) -> set[int]:
    """The parameters the memory budget covers. ``inputs`` (the user's say) names the parameters
    that are activations, every other plain one is a weight; else the parameters after ``num_input``;
    else those of static shape that no matmul reads as its left operand (``x @ W``: the data, not the
    weight), so a static activation is laid out for communication, not cut to meet the budget."""
    if inputs is not None:
        names = param_names(func)
        unknown = [n for n in inputs if n not in names]
        if unknown:
            raise AutoShardError(f"auto-shard: inputs names {', '.join(map(repr, unknown))}, not a parameter of "
                                 f"@{func.name} (it has: {', '.join(names)})")
        return {i for i, n in enumerate(names) if n not in inputs
                and isinstance(func.params[i].type, (TensorType, DTensorType))}
    n = func.attrs.get(NUM_INPUT)
    if isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= len(func.params):
        return set(range(n, len(func.params)))
    data = {b.value.args[0] for b in func.bindings()
            if isinstance(b.value, Call) and b.value.op.name == "matmul" and b.value.args}
    return {i for i, p in enumerate(func.params)
            if isinstance(p.type, (TensorType, DTensorType)) and not any(sym.is_symbolic(d) for d in p.type.shape)
            and p not in data}


def _mesh_names(mesh: DeviceMesh) -> list[str]:
    return sorted(set().union(set(), *(sym.free_vars(d) for d in mesh.shape if not isinstance(d, int))))


def _budget_envs(func: Function, mesh: DeviceMesh, sizes: Mapping[str, int],
                 counts: tuple[int, ...] | None = None) -> list[dict[str, int]]:
    """The sizes the budget must hold at: the mesh's symbols at the given values or at each of
    ``counts`` (the declared ones, else ``GUARD_MESH_SAMPLES``); other symbols at their size hints
    (``DIM_SIZE_HINT`` by default)."""
    names = _mesh_names(mesh)
    others: set[str] = set()
    for p in func.params:
        if isinstance(p.type, (TensorType, DTensorType)):
            others |= set().union(set(), *(sym.free_vars(d) for d in p.type.shape if not isinstance(d, int)))
    base = {n: sizes.get(n, DIM_SIZE_HINT) for n in sorted(others - set(names))}
    free = [n for n in names if n not in sizes]
    envs = []
    for m in ((counts or GUARD_MESH_SAMPLES) if free else (None,)):
        env = dict(base)
        env.update({n: sizes.get(n, m) for n in names})
        envs.append(env)
    return envs


def _planned_counts(ctx: PassContext, mesh: DeviceMesh, sizes: Mapping[str, int]) -> tuple[int, ...] | None:
    """The device counts the bytes are summed over and the budgets hold at, where the mesh's size is
    left symbolic: the declared ones (``propagate-sharding.counts``, ``Driver(counts=...)``), count 1
    left out beside others (it sends nothing and holds everything whole, whatever the layout); None:
    the sampled counts."""
    counts = declared_counts(ctx)
    if counts is None or len(_mesh_names(mesh)) != 1 or _mesh_names(mesh)[0] in sizes:
        return None
    return tuple(c for c in counts if c > 1) or None


def _report_env(func: Function, mesh: DeviceMesh, sizes: Mapping[str, int],
                counts: tuple[int, ...] | None = None) -> dict[str, int]:
    env = _budget_envs(func, mesh, sizes)[0]
    env.update({n: sizes.get(n, max(counts) if counts else MESH_SIZE_HINT) for n in _mesh_names(mesh)})
    return env


def _bytes_at(t: TensorType, mesh: DeviceMesh, p: Placement, env: Mapping[str, int]) -> int:
    """Bytes a device holds of a tensor laid out ``p`` (its largest block, padding included);
    remembered (the weights of the layers of a stack share their types)."""
    key = (t, mesh, p, tuple(env.items()))
    n = _HELD.get(key)
    if n is None:
        if len(_HELD) >= 1 << 14:
            _HELD.clear()
        n = _HELD[key] = int(sym.evaluate(local_bytes(DTensorType(t.shape, t.dtype, mesh, p)), env))
    return n


_HELD: dict[tuple, int] = {}


def _devices(mesh: DeviceMesh, env: Mapping[str, int]) -> int:
    return math.prod(d if isinstance(d, int) else int(sym.evaluate(d, env)) for d in mesh.shape)


@dataclass(frozen=True)
class _Limit:
    """The weights' budget at one budget env: bytes per device (``bound``), those of weights whose
    layout is given (``fixed``), and per free weight its smallest and its reference layout's bytes."""

    bound: Fraction
    fixed: int
    smallest: dict[int, int]
    reference: dict[int, int]

    @property
    def free(self) -> Fraction:
        """The bytes the free weights may hold."""
        return self.bound - self.fixed


def _shape_text(t) -> str:
    return "(" + ", ".join(sym.to_str(d) if not isinstance(d, int) else str(d) for d in t.shape) + ")"


def _least_weights(weights: list[int], cands: Mapping[int, list[Placement]], held, bounds: list[Fraction],
                   k: int) -> dict[int, Placement] | None:
    """One layout per weight (from ``cands``) holding at most ``bounds[j]`` bytes at budget env ``j`` (by
    ``held(i, q, j)``), and of the fewest bytes at env ``k``; None when none exists. A small integer
    program; its answer is checked in integers, and the rows tightened where the solver's tolerance let
    a bound be passed by a hair."""
    cols = [(i, q) for i in weights for q in cands[i]]
    if not weights:
        return {}
    if not cols or any(not cands[i] for i in weights):
        return None
    one = np.zeros((len(weights), len(cols)))
    for c, (i, _) in enumerate(cols):
        one[weights.index(i), c] = 1
    aim = np.array([float(held(i, q, k)) for i, q in cols])
    scale = [Fraction(1)] * len(bounds)
    for _ in range(_RETRIES):
        rows = [Rows(one, 1, 1)]
        for j, b in enumerate(bounds):
            if b <= 0:
                return None
            rows.append(Rows(np.array([[float(held(i, q, j) / (b * scale[j])) for i, q in cols]]), -np.inf, 1))
        res = highs(aim / max(aim.max(), 1.0), integrality=np.ones(len(cols)), bounds=(0, 1), constraints=rows,
                    options={"mip_rel_gap": 0.0})
        if res.x is None:
            return None
        got = {i: q for (i, q), x in zip(cols, res.x) if x > 0.5}
        over = False
        for j, b in enumerate(bounds):
            used = sum(held(i, q, j) for i, q in got.items())
            if used > b:
                scale[j] *= Fraction(b, used) * Fraction(999_999, 1_000_000)
                over = True
        if not over:
            return got
    return None


class _Search:
    """One function's parameter layouts: the integer program with the budget's rows."""

    def __init__(self, func: Function, mesh: DeviceMesh, budget: MemoryBudget, sizes: dict[str, int], ctx: PassContext,
                 mesh_names: dict[DeviceMesh, str], activations: MemoryBudget | None = None,
                 inputs: tuple[str, ...] | None = None):
        self.func, self.mesh, self.budget, self.sizes, self.mesh_names = func, mesh, budget, sizes, mesh_names
        self.activations = activations
        self._held: dict[tuple, int] = {}  # bytes a device holds, per (parameter or type, layout, sizes)
        self._reference: dict[int, Placement] = {}
        self._alternatives: Alternatives | None = None  # --explain's layouts, on the graph the search chose on
        # what run() chose on, kept for --explain: the graph, its cost model, each free parameter's
        # slots (with the parameter's index) and the plan chosen
        self.graph: Graph | None = None
        self.cost: CostModel | None = None
        self.slots: list[tuple[Slot, int]] = []
        self.plan: LayoutPlan | None = None
        # the layouts the chosen plan was chosen among: each parameter's offered layouts, and the budget's rows
        self.offered: dict[int, list[Placement]] = {}
        self.budget_rows: Callable | None = None
        # the sizes planned for: the given ones (--bind) over propagation's size hints; only the rest is sampled
        self.hints = dict(ctx.config.get("propagate-sharding.size_hints", {}) or {})
        self.hints.update(sizes)
        self.sizes = {k: v for k, v in self.hints.items() if k in sizes or k in _symbols(func, mesh)}
        self.axis_costs = axis_costs_of(ctx)  # with axis costs, the least time instead of the fewest bytes
        self.weights = weight_indices(func, inputs)
        self.parts = split_parts(func)
        self.free = [i for i, p in enumerate(func.params) if isinstance(p.type, TensorType)]
        self.counts = _planned_counts(ctx, mesh, self.sizes)
        self.envs = _budget_envs(func, mesh, self.sizes, self.counts)
        self.scale = [Fraction(1)] * len(self.envs)  # tightened when the solver's tolerance overshoots

    def layouts(self, i: int) -> tuple[Placement, ...]:
        """The layouts parameter ``i`` may take: :func:`candidate_layouts`, and the strided cuts its
        dims allow for the function's splits (:func:`strided_layouts`)."""
        t = self.func.params[i].type
        return candidate_layouts(t.ndim, self.mesh) + strided_layouts(tuple(t.shape), self.mesh, self.parts)

    def held(self, i: int, p: Placement, env) -> int:
        key = (i, p, tuple(env.items()))
        if key not in self._held:
            self._held[key] = _bytes_at(without_placement(self.func.params[i].type), self.mesh, p, env)
        return self._held[key]

    def alternatives(self) -> Alternatives:
        """The function laid out with one parameter otherwise (``--explain``), on the search's graph and
        cost model, under the chosen plan's limit on the peak (:mod:`.alternatives`)."""
        if self._alternatives is None:
            param = {s.id: i for s, i in self.slots}
            self._alternatives = Alternatives(
                self.graph, self.cost, dict(param), self.plan,
                lambda s: list(self.layouts(param[s.id])), self.activation_limit(),
                WINDOW_OPS, 2 * WINDOW_OPS, self.searched)
        return self._alternatives

    def searched(self, layouts: Mapping[int, Placement]) -> bool:
        """Whether the chosen plan was chosen among layouts that include parameter ``i`` laid out
        ``layouts[i]`` (every free parameter given): each offered, the weights within the budget's rows
        as the search's program has them. Then the chosen plan sends no more than the best plan with
        these layouts under the same limit on the peak (where the search solved its program whole)."""
        if self.budget_rows is None or any(layouts[i] not in self.offered.get(i, ()) for i in self.free):
            return False
        chosen = {(s.id, layouts[i]) for s, i in self.slots}
        return all(sum(v for key, v in coefs.items() if key in chosen) <= bound
                   for coefs, bound in self.budget_rows([(s, [layouts[i]]) for s, i in self.slots]))

    def fits(self, i: int, q: Placement, limits: list[_Limit]) -> bool:
        """Whether parameter ``i`` laid out ``q`` leaves room for every other weight at its smallest, at
        each budget env (a layout that cannot fit is not offered: fewer choices, a faster search)."""
        if i not in self.weights:
            return True
        for k, limit in enumerate(limits):
            if self.held(i, q, self.envs[k]) - limit.smallest[i] > limit.free - sum(limit.smallest.values()):
                return False
        return True

    def reference(self, i: int) -> Placement:
        """Weight ``i``'s layout of the fewest bytes summed over the budget's sizes (ties: by name). One
        layout at every count: the ``min`` budget is these layouts' bytes at each count, so it is met
        by construction (the smallest at each count alone may take a layout per count: ``S[0]`` at 8
        workers, ``S[1]`` at 3)."""
        if i not in self._reference:
            layouts = self.layouts(i)
            self._reference[i] = min(layouts, key=lambda q: (sum(self.held(i, q, env) for env in self.envs), str(q)))
        return self._reference[i]

    def limits_at(self, k: int) -> _Limit:
        """At budget env ``k``: the bytes the free weights may hold, each free weight's smallest, and
        its bytes in its reference layout."""
        env = self.envs[k]
        fixed = sum(self.held(i, self.func.params[i].type.placement, env)
                    for i in self.weights if isinstance(self.func.params[i].type, DTensorType))
        smallest = {i: min(self.held(i, p, env) for p in self.layouts(i))
                    for i in self.weights if i in self.free}
        reference = {i: self.held(i, self.reference(i), env) for i in smallest}
        replicated = sum(_bytes_at(without_placement(self.func.params[i].type), self.mesh,
                                   Placement.replicated(self.mesh.ndim), env) for i in self.weights)
        least = fixed + sum(smallest.values())
        bound = self.budget.bound(replicated, fixed + sum(reference.values()), _devices(self.mesh, env))
        if bound < least:
            raise AutoShardError(
                f"auto-shard: memory budget '{self.budget.text}' ({_human(bound)} of weights per device) is below the "
                f"smallest any layout reaches at {self.count_text(env)}: {_human(least)} (every weight cut as finely "
                "as its dims allow); raise the budget"
            )
        return _Limit(bound, fixed, smallest, reference)

    def count_text(self, env: Mapping[str, int]) -> str:
        return ", ".join(f"{n}={v}" for n, v in env.items() if n in _mesh_names(self.mesh)) or "its static size"

    def joint_weights(self, limits: list[_Limit]) -> dict[int, Placement]:
        """One layout per free weight within the budget at every budget env, found by a small integer
        program over the weights alone (exact: checked in integers). When none exists, the error names
        the budget, the first count no layout meeting it at the counts before can meet, and the weight
        that holds the most there (at the first count alone the budget is met: ``limits_at``)."""
        weights = [i for i in self.free if i in self.weights]
        cands = {i: self.layouts(i) for i in weights}
        for k in range(len(self.envs)):
            got = _least_weights(weights, cands, lambda i, q, j: self.held(i, q, self.envs[j]),
                                 [limit.free for limit in limits[:k + 1]], k)
            if got is None:
                least = _least_weights(weights, cands, lambda i, q, j: self.held(i, q, self.envs[j]),
                                       [limit.free for limit in limits[:k]], k)
                env = self.envs[k]
                used = {i: self.held(i, q, env) for i, q in least.items()}
                top = max(used, key=lambda i: (used[i], -i))
                p = self.func.params[top]
                names = _mesh_names(self.mesh)
                before = (f"{names[0]}=" + ", ".join(str(e[names[0]]) for e in self.envs[:k]) if len(names) == 1
                          else "; ".join(self.count_text(e) for e in self.envs[:k]))
                raise AutoShardError(
                    f"auto-shard: memory budget '{self.budget.text}' ({_human(limits[k].bound)} of weights per device "
                    f"at {self.count_text(env)}) cannot be met there by weights laid out to meet it at {before}: "
                    f"the least such hold {_human(limits[k].fixed + sum(used.values()))} at {self.count_text(env)}, "
                    f"'{p.name}' {_shape_text(p.type)} the most ({_human(used[top])} laid out \"{least[top]}\"); "
                    "raise the budget or give the device count"
                )
        return got

    def activation_limit(self) -> ActivationLimit | None:
        """The activation budget as the solver's limit on the peak, at each budget env."""
        if self.activations is None:
            return None
        whole = Placement.replicated(self.mesh.ndim)

        def held(s: Slot, p: Placement | None, k: int) -> int:
            key = (s.tensor, p or whole, k)
            if key not in self._held:  # the layers of a stack share their types
                env = dict(self.envs[k])
                for d in s.tensor.shape:
                    for n in sym.free_vars(d) if not isinstance(d, int) else ():
                        env.setdefault(n, self.sizes.get(n, DIM_SIZE_HINT))
                self._held[key] = _bytes_at(s.tensor, self.mesh, p or whole, env)
            return self._held[key]

        def bound(k: int, least: Fraction, replicated: Fraction) -> Fraction:
            env = self.envs[k]
            b = self.activations.bound(replicated, least, _devices(self.mesh, env))
            if b < least:
                at = ", ".join(f"{n}={v}" for n, v in env.items()) or "its static sizes"
                raise AutoShardError(
                    f"auto-shard: activation budget '{self.activations.text}' ({_human(b)} per device) is below the "
                    f"least peak of live activations the solver finds at {at}: {_human(least)}; raise the budget"
                )
            return b

        return ActivationLimit(len(self.envs), held, bound)

    def typed(self, layouts: Mapping[int, Placement]) -> Function:
        """The function with parameter ``i`` a DTensor laid out ``layouts[i]``."""
        return _retyped(self.func, {i: DTensorType(self.func.params[i].type.shape, self.func.params[i].type.dtype,
                                                   self.mesh, p) for i, p in layouts.items()})

    def run(self) -> tuple[dict[int, Placement], Function | None]:
        """The chosen layout of each free parameter, and the function written with the solver's plan
        (every value laid out as the solver chose: ``distribute`` keeps it)."""
        if not self.free:
            return {}, None
        typed = self.typed(dict.fromkeys(self.free, Placement.replicated(self.mesh.ndim)))
        graph = build_graph(typed, self.mesh_names, free_params=tuple(typed.params[i] for i in self.free))
        index = {}
        self.slots = []
        for i in self.free:
            for s in graph.var_slots[typed.params[i]]:
                s.fixed = None  # on the mesh, layout to be chosen
                index[s.id] = i
                self.slots.append((s, i))
        # no preferences: with no seeds they would all say "replicated", and as a tie-break favour
        # gathering over keeping a partial sum (two all-gathers tie in bytes with one all-reduce)
        prefs = None
        cost = CostModel(graph, self.hints, axis_costs=self.axis_costs, mesh_samples=self.counts)
        self.graph, self.cost = graph, cost
        limits = [self.limits_at(k) for k in range(len(self.envs))]
        cands = {i: [q for q in self.layouts(i) if self.fits(i, q, limits)]
                 for i in self.free}
        # the weights' budget split between the solver's windows in proportion to the reference layouts'
        # bytes: the reference layouts (within the budget whenever they are at every count: the `min`
        # budgets) then fit every window's share
        ref_total = [sum(limit.reference.values()) for limit in limits]

        def rows(decided: list[tuple[Slot, list[Placement]]]):
            out = []
            for k, env in enumerate(self.envs):
                limit = limits[k]
                mine = [(s, qs) for s, qs in decided if index.get(s.id) in limit.reference]
                if not mine:
                    continue
                share = (Fraction(sum(limit.reference[index[s.id]] for s, _ in mine), ref_total[k]) if ref_total[k]
                         else Fraction(1))
                bound = limit.free * share * self.scale[k]
                if bound <= 0:
                    bound = Fraction(1)
                coefs = {(s.id, q): float(Fraction(self.held(index[s.id], q, env)) / bound) for s, qs in mine for q in qs}
                out.append((coefs, 1.0))
            return out

        def solve(offered: dict[int, list[Placement]], budget_rows) -> tuple[dict[int, Placement], Function] | None:
            """The weights within the budget at every env exactly, or None (no layout, or the solver's
            tolerance kept passing the budget by a hair)."""
            choice = ParamChoice(lambda s: offered[index[s.id]], budget_rows, self.activation_limit())
            for _ in range(_RETRIES):
                try:
                    plan, _solved = solve_layouts(graph, prefs, cost, choice, WINDOW_OPS, 2 * WINDOW_OPS, alike=False)
                except NoLayoutError:
                    return None
                laid = {}
                for sid, i in index.items():
                    p = plan.primary.get(sid)
                    if p is None:  # unused: its reference layout if offered, else the least memory
                        p = self.reference(i) if self.reference(i) in offered[i] else min(
                            offered[i], key=lambda q: (self.held(i, q, self.envs[0]), str(q)))
                    laid[i] = p
                over = False
                for k, env in enumerate(self.envs):
                    used = sum(self.held(i, laid[i], env) for i in self.weights if i in laid)
                    if used > limits[k].free:  # the solver's float tolerance let it through: tighten and solve again
                        self.scale[k] *= Fraction(limits[k].free, used) * Fraction(999_999, 1_000_000)
                        over = True
                if not over:
                    for sid, i in index.items():
                        plan.primary.setdefault(sid, laid[i])
                    self.plan, self.offered, self.budget_rows = plan, offered, budget_rows
                    return laid, write_layouts(graph, plan, cost)
            return None

        got = solve(cands, rows)
        if got is None:
            # the windows' shares (or the solver's tolerance) ruled out what the budget allows: lay the
            # weights out by the weights' own program (it names the count and the weight when nothing
            # fits), then the values around them, the weights given
            joint = self.joint_weights(limits)
            fixed = {i: [joint[i]] if i in joint else cands[i] for i in self.free}
            got = solve(fixed, lambda decided: [])
        if got is None:
            raise AutoShardError("auto-shard: no layout of the values meets the activation budget "
                                 f"'{self.activations.text if self.activations else NO_LIMIT}' with the weights "
                                 "within the memory budget; raise the activation budget")
        return got


def _report(search: _Search, fname: str, laid: dict[int, Placement], written: Function | None, explain: bool,
            mesh_label: str, checks: int | None = None, bounds: bool = False) -> AutoShardReport:
    """The report; ``explain``: each alternative's bytes, proven (within ``checks`` of the solver's work,
    else exactly) or, ``bounds``, bounded from above without a solve."""
    func, mesh = search.func, search.mesh
    env = _report_env(func, mesh, search.sizes, search.counts)
    weights, names = search.weights, param_names(func)
    layout = {i: (laid[i] if i in laid else p.type.placement if isinstance(p.type, DTensorType)
                  else Placement.replicated(mesh.ndim))
              for i, p in enumerate(func.params) if isinstance(p.type, (TensorType, DTensorType))}

    def held(i, p) -> int:
        return _bytes_at(without_placement(func.params[i].type), mesh, p, env)

    def weights_bytes(lay) -> int:
        return sum(held(i, lay[i]) for i in weights if i in lay)

    replicated = sum(held(i, Placement.replicated(mesh.ndim)) for i in weights if i in layout)
    devices = _devices(mesh, env)
    least = sum(held(i, search.reference(i) if i in search.free else layout[i]) for i in weights if i in layout)
    bound = search.budget.bound(replicated, least, devices)
    sent = _sent(written, mesh, env) if written is not None else None
    peak = function_peak(written, env) if written is not None else None
    explained = ranges = bounded = 0
    note = ""
    params = []
    for i in sorted(laid):
        p = func.params[i]
        alts: list[Alternative] = []
        if explain:
            alts.append(Alternative(laid[i], sent, weights_bytes(layout), weights_bytes(layout) <= bound, peak))
            for q in search.layouts(i):
                if q == laid[i]:
                    continue
                lay = {**layout, i: q}
                cost = held_peak = least = None
                fits = True
                first = redistributed_first(written, i, q) if bounds and written is not None else None
                if first is not None:  # no solve: the chosen layout with the parameter redistributed first
                    alts.append(Alternative(q, _sent(first, mesh, env), weights_bytes(lay), weights_bytes(lay) <= bound,
                                            function_peak(first, env), bound=True))
                    bounded += 1
                    continue
                if explained < MAX_EXPLAINED:
                    other, explained = search.alternatives().explained(lay, checks), explained + 1
                    fits = other is not None
                    if other is not None:
                        cost = _sent(other.function, mesh, env)
                        if other.least < other.sent and cost != other.sent:
                            # the bound is on the bytes the program counts, and this layout's measure differs
                            # from its count: proven instead
                            other = search.alternatives().explained(lay)
                            cost = _sent(other.function, mesh, env)
                        held_peak = function_peak(other.function, env)
                        if other.least < other.sent:
                            least = _floor_bytes(other.least)
                            ranges += 1
                else:
                    note = (f"(bytes of alternatives after the first {MAX_EXPLAINED} not computed: each is one "
                            "solve of the whole function)")
                alts.append(Alternative(q, cost, weights_bytes(lay), fits and weights_bytes(lay) <= bound, held_peak,
                                        least))
        shape = "(" + ", ".join(sym.to_str(d) if not isinstance(d, int) else str(d) for d in p.type.shape) + ")"
        params.append(ParamReport(names[i], shape, i in weights, laid[i], held(i, laid[i]), tuple(alts)))
    if ranges:
        note = "\n".join(x for x in (
            f"({ranges} alternative{'s' if ranges > 1 else ''} not proven within {checks} checks of the solver's "
            "work each: a..b is a range, no layout sends less than a, the best found sends b; without "
            "--explain-checks each is proven)",
            note) if x)
    if bounded:
        note = "\n".join(x for x in (
            f"(<= b: {bounded} alternative{'s' if bounded > 1 else ''} bounded without a solve: the chosen layout with "
            "that parameter given so and redistributed to its chosen layout first sends b, its peak of activations "
            "shown; so some layout with that parameter's layout sends at most b. Where that peak is above the chosen "
            "layout's (peak above chosen), under the activation budget the chosen layout met the least may be more; "
            "--explain=exact solves each under it)", note) if x)
    return AutoShardReport(fname, f"{mesh_label} {mesh.shape_str()}", env, search.budget, bound, weights_bytes(layout),
                           replicated, devices, sent, params, note, search.activations, peak)


def _floor_bytes(n: Fraction) -> Fraction:
    """``n`` rounded down to whole bytes (a lower bound stays one)."""
    return Fraction(math.floor(n))


def _mesh_label(mod: IRModule, mesh: DeviceMesh) -> str:
    for i, m in enumerate(mod.meshes()):
        if m == mesh:
            return f"mesh[{i}]"
    return "mesh"


def _mesh_names_of(mod: IRModule) -> dict[DeviceMesh, str]:
    return {m: f"mesh[{i}]" for i, m in enumerate(mod.meshes())}


def _sent(func: Function, mesh: DeviceMesh, env: Mapping[str, int]) -> Fraction | None:
    """Bytes each worker sends running the laid-out ``func`` at ``env`` (reshape chains fused as
    legalize fuses them), counting the gathers of sharded results."""
    got = function_bytes(fuse_reshapes(func), env)
    if got is None:
        return None
    return (got[0] + got[1]) / _devices(mesh, env)
