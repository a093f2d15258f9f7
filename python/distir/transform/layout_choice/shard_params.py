"""ShardParams (``shard-params``): lay out parameters by name, from a plan of glob patterns.

``ShardParams(plan, mesh=None)``: ``plan`` maps parameter-name patterns (``fnmatch`` globs,
case-sensitive: ``"*q_proj*"``, ``"layers.*.mlp.down_proj.weight"``) to a placement
(``"S[0]"``, ``"R"``, ``"S[1], R"`` on a 2-D mesh, or a :class:`Placement`) or to a named
strategy (``"colwise"``, ``"rowwise"``, ``"vocab"``, ``"replicate"``, resolved for how the
function uses the parameter; see :data:`STRATEGIES` and docs/frontend.md). Names are those
of :func:`distir.transform.weights.param_names` (a model's dotted weight names when the
module came from ``distir.tvm.from_nn``).

Each plain tensor parameter matched by a pattern becomes a DTensor on the mesh: ``mesh``
when given, else the module's only mesh, else a new 1-D ``("num_workers",)`` mesh over
devices ``0 .. num_workers - 1``. Unmatched parameters stay plain; propagate-sharding lays
them out. When several patterns match one parameter, the most specific wins
(:func:`specificity`); two equally specific ones are an error. Errors, each one line naming
the pattern and the parameter: a pattern that matches no tensor parameter of any function
(unless its value ends with ``?``, :data:`OPTIONAL`: ``"lm_head.weight": "vocab?"`` lays out the
head where a model variant has one and is no error where it is tied to the embedding), a placement that does not fit the mesh or the parameter's rank, a strategy that has no
meaning for how the parameter is used, a parameter already laid out.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from ...errors import PassError
from ...ir.builder import mesh as make_mesh
from ...ir.combine import check_partial
from ...ir.expr import Call, Function, IRModule, Tuple, TupleGetItem, Var
from ...ir.mesh import DeviceMesh
from ...ir.placement import Placement, PlacementError
from ...ir.types import DTensorType, TensorType
from ..lower_to_local import GLOBAL_PARAMS
from ..pass_infra import ModulePass, PassContext, register_pass
from ..rewrite import map_bindings
from ..weights import param_names

__all__ = ["OPTIONAL", "STRATEGIES", "ShardParams", "ShardPlanError", "check_plan_value", "load_shard_plan", "specificity"]

# strategy -> what it shards, by the parameter's role (docs/frontend.md has the table)
STRATEGIES: dict[str, str] = {
    "colwise": "the output-feature axis: S[0] of an nn.Linear weight (out, in), S[1] of a (in, out) matmul "
    "operand, S[0] of a bias; the embedding axis of an embedding table",
    "rowwise": "the contracted (input-feature) axis: S[1] of an nn.Linear weight, S[0] of a (in, out) operand; "
    "a bias is replicated; the rows of an embedding table",
    "vocab": "the vocabulary: the rows of an embedding table (R.take), the output axis of an LM head",
    "replicate": "nothing: R on every mesh axis, for any parameter",
}


#: a plan value ending with this marks its pattern optional: it may match no parameter
OPTIONAL = "?"

#: how alike a name must be to an unmatched pattern to be suggested (difflib's ratio): a typo
#: (``mlp.up.weigt``: 0.96) is, another weight sharing the ``.weight`` suffix (``ln_f.weight`` for
#: ``lm_head.weight``: 0.72) is not
CLOSE_NAME = 0.85


def split_optional(value: str) -> tuple[str, bool]:
    """(the placement or strategy of a plan value, whether it is marked optional with :data:`OPTIONAL`)."""
    text = value.strip()
    return (text[: -len(OPTIONAL)].strip(), True) if text.endswith(OPTIONAL) else (value, False)


class ShardPlanError(PassError):
    """A shard plan that does not fit the module (one line, naming the pattern and the parameter)."""


def specificity(pattern: str) -> tuple[int, int, int]:
    """How specific a glob is; the larger tuple wins when several patterns match one name.

    (1 for an exact name without wildcards, else 0; characters matched literally;
    single-character wildcards ``?`` and ``[...]``). ``*`` counts for nothing, so
    ``"layers.0.mlp.*"`` beats ``"layers.*.mlp.*"``, which beats ``"*mlp*"``.
    """
    literal = single = 0
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            i += 1
        elif c == "?":
            single += 1
            i += 1
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            close = pattern.find("]", j)
            if close < 0:  # fnmatch reads an unclosed '[' as itself
                literal += 1
                i += 1
            else:
                single += 1
                i = close + 1
        else:
            literal += 1
            i += 1
    exact = int(single == 0 and "*" not in pattern and "[" not in pattern)
    return exact, literal, single


@dataclass(frozen=True)
class _Entry:
    pattern: str
    placement: Placement | None  # None for a strategy
    strategy: str | None
    optional: bool = False  # may match no parameter (its value ended with OPTIONAL)

    def text(self) -> str:
        return self.strategy if self.strategy is not None else str(self.placement)


def check_plan_value(value: str) -> str:
    """``value`` if it is a strategy name or a placement's text, either maybe marked optional (a final
    ``?``); else ShardPlanError saying what is wrong."""
    base, optional = split_optional(value)
    if base.strip() in STRATEGIES:
        return base.strip() + (OPTIONAL if optional else "")
    try:
        Placement.parse(base)
    except PlacementError as err:
        raise ShardPlanError(f"{err}; or name a strategy ({', '.join(STRATEGIES)})") from None
    return value


def load_shard_plan(path: str | os.PathLike) -> dict[str, str]:
    """A plan from a ``.json`` file (an object) or a ``.toml`` file (a table), pattern -> placement or strategy.

    In TOML, quote the patterns (``"layers.*.mlp.down_proj.weight" = "rowwise"``): a bare
    dotted key would be a nested table. Errors name the file and the entry.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".json", ".toml"):
        raise ShardPlanError(f"shard plan '{p}': expected a .json or .toml file")
    try:
        data = p.read_bytes()
    except OSError as err:
        raise ShardPlanError(f"shard plan '{p}': cannot read it ({err.strerror or err})") from None
    if len(data) > 1 << 20:
        raise ShardPlanError(f"shard plan '{p}': larger than 1 MiB; a plan is a few patterns")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ShardPlanError(f"shard plan '{p}': not UTF-8 text (byte at offset {err.start})") from None
    if suffix == ".json":
        try:
            plan = json.loads(text)
        except json.JSONDecodeError as err:
            raise ShardPlanError(f"shard plan '{p}': not JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None
        except RecursionError:
            raise ShardPlanError(f"shard plan '{p}': nested too deeply; a plan is one flat object of "
                                 "pattern: placement") from None
        except ValueError as err:  # an integer of thousands of digits
            raise ShardPlanError(f"shard plan '{p}': not a plan ({str(err).split(':')[0]})") from None
        if not isinstance(plan, dict):
            raise ShardPlanError(f"shard plan '{p}': expected a JSON object of pattern: placement, got a {type(plan).__name__}")
    else:
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            raise ShardPlanError(f"shard plan '{p}': reading TOML needs Python 3.11 (tomllib); write the plan as JSON") from None
        try:
            plan = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise ShardPlanError(f"shard plan '{p}': not TOML ({err})") from None
        except RecursionError:
            raise ShardPlanError(f"shard plan '{p}': nested too deeply; a plan is one flat table of "
                                 "\"pattern\" = \"placement\"") from None
        except ValueError as err:  # an integer of thousands of digits
            raise ShardPlanError(f"shard plan '{p}': not a plan ({str(err).split(':')[0]})") from None
    for key, value in plan.items():
        if isinstance(value, dict):
            raise ShardPlanError(
                f"shard plan '{p}': '{key}' is a table, not a placement; quote dotted patterns in TOML "
                f"(\"{key}.*\" = \"S[0]\")"
            )
        if not isinstance(value, str):
            shown = f"a {type(value).__name__}" if isinstance(value, (list, tuple)) else repr(value)[:40]
            raise ShardPlanError(f"shard plan '{p}': pattern '{key}' maps to {shown}, not a placement or strategy name")
        try:
            check_plan_value(value)
        except ShardPlanError as err:
            raise ShardPlanError(f"shard plan '{p}': pattern '{key}': {err}") from None
    if not plan:
        raise ShardPlanError(f"shard plan '{p}' is empty")
    return plan


def _entries(plan: Any) -> list[_Entry]:
    if not isinstance(plan, Mapping) or not plan:
        raise ShardPlanError(
            "shard-params needs a plan: a non-empty mapping from parameter-name patterns to placements "
            "(\"S[0]\", \"R\") or strategies (" + ", ".join(STRATEGIES) + ")"
        )
    out = []
    for pattern, value in plan.items():
        if not isinstance(pattern, str) or not pattern.strip():
            raise ShardPlanError(f"shard plan: pattern {pattern!r} is not a non-empty string")
        if isinstance(value, Placement):
            out.append(_Entry(pattern, value, None))
            continue
        if not isinstance(value, str):
            raise ShardPlanError(
                f"shard plan: pattern '{pattern}' maps to {value!r}; give a placement like \"S[0]\" or a strategy "
                f"({', '.join(STRATEGIES)})"
            )
        try:
            value, optional = split_optional(check_plan_value(value))
        except ShardPlanError as err:
            raise ShardPlanError(f"shard plan: pattern '{pattern}': {err}") from None
        if value in STRATEGIES:
            out.append(_Entry(pattern, None, value, optional))
        else:
            out.append(_Entry(pattern, Placement.parse(value), None, optional))
    return out


# ---------------------------------------------------------------- how a parameter is used


@dataclass(frozen=True)
class _Use:
    """One use of a parameter (through layout-only ops): ``axes[i]`` is the parameter axis at
    position ``i`` of the operand the op reads."""

    binding: str
    op: str
    arg: int
    axes: tuple[int, ...]
    call: Call
    func: str = ""  # set when the uses of several functions are compared

    def where(self) -> str:
        return f"R.{self.op} in '{self.binding}'" + (f" of @{self.func}" if self.func else "")


def _uses(func: Function, param: Var) -> list[_Use]:
    rank = len(param.type.shape)
    derived: dict[Var, tuple[int, ...]] = {param: tuple(range(rank))}
    uses: list[_Use] = []
    for b in func.bindings():
        v = b.value
        if isinstance(v, Var):
            if v in derived:
                derived[b.var] = derived[v]
            continue
        if isinstance(v, Tuple):
            uses.extend(_Use(b.var.name, "tuple", i, derived[f], None) for i, f in enumerate(v.fields) if f in derived)
            continue
        if isinstance(v, TupleGetItem) or not isinstance(v, Call):
            continue
        for i, a in enumerate(v.args):
            if isinstance(a, Tuple):
                uses.extend(_Use(b.var.name, v.op.name, i, derived[f], v) for f in a.fields if isinstance(f, Var) and f in derived)
            if not isinstance(a, Var) or a not in derived:
                continue
            axes = derived[a]
            if v.op.name == "permute_dims":
                order = v.attrs.get("axes")
                k = len(axes)
                derived[b.var] = (
                    tuple(reversed(axes)) if order is None else tuple(axes[int(j) % k] for j in order)
                )
            elif v.op.name == "astype":
                derived[b.var] = axes
            else:
                uses.append(_Use(b.var.name, v.op.name, i, axes, v))
    return uses


def _resolve_use(strategy: str, use: _Use) -> int | None | str:
    """The parameter axis ``strategy`` shards for this use, ``None`` for replicated, or a reason it has no meaning."""
    axes = use.axes
    if use.op == "matmul" and len(axes) >= 2:
        out_axis, in_axis = (axes[-1], axes[-2]) if use.arg == 1 else (axes[-2], axes[-1])
        return {"colwise": out_axis, "vocab": out_axis, "rowwise": in_axis}[strategy]
    if use.op == "take" and use.arg == 0:
        axis = use.call.attrs.get("axis")
        if axis is None:
            return "it is a flattened table (axis=None)"
        rows = axes[int(axis) % len(axes)]
        if strategy in ("vocab", "rowwise"):
            return rows
        if len(axes) != 2:
            return f"'colwise' shards the embedding axis of a 2-D table; this table has rank {len(axes)}"
        return axes[1 - int(axis) % 2]
    if use.op in ("add", "subtract") and len(axes) == 1:  # a bias
        return None if strategy == "rowwise" else axes[0]
    return f"its use by {use.where()} is not a matmul operand, a take table or a bias"


def _strategy_placement(
    strategy: str, holders: list[tuple[Function, Var]], mesh: DeviceMesh, name: str, pattern: str
) -> Placement:
    """The placement ``strategy`` gives parameter ``name``, read from its uses in every function holding it
    (a weight used by one method of a model and not by another is laid out the same in both)."""
    if strategy == "replicate":
        return Placement.replicated(mesh.ndim)
    funcs = ", ".join(f"@{f.name}" for f, _ in holders)
    what = f"shard plan: pattern '{pattern}' ({strategy}), parameter '{name}' of {funcs}"
    if mesh.ndim != 1:
        raise ShardPlanError(f"{what}: strategies lay out on a 1-D mesh; this mesh has {mesh.ndim} axes, give a placement")
    several = len(holders) > 1
    uses = [replace(u, func=f.name) if several else u for f, p in holders for u in _uses(f, p)]
    if not uses:
        raise ShardPlanError(f"{what}: the parameter is not used, so '{strategy}' means nothing; give a placement")
    chosen: tuple[int | None, _Use] | None = None
    for use in uses:
        axis = _resolve_use(strategy, use)
        if isinstance(axis, str):
            raise ShardPlanError(f"{what}: {axis}; use 'replicate' or a placement")
        if chosen is not None and chosen[0] != axis:
            a, b = ("R" if x is None else f"S[{x}]" for x in (chosen[0], axis))
            raise ShardPlanError(
                f"{what}: {chosen[1].where()} wants {a} but {use.where()} wants {b}; give a placement"
            )
        chosen = (axis, use)
    assert chosen is not None
    return Placement.parse("R" if chosen[0] is None else f"S[{chosen[0]}]")


# ---------------------------------------------------------------- the pass


@register_pass
@dataclass(frozen=True)
class ShardParams(ModulePass):
    """Lay out parameters by name: glob patterns to placements or named strategies (see docs/frontend.md)."""

    name: ClassVar[str] = "shard-params"
    opt_level: ClassVar[int] = 0

    plan: Mapping[str, Any]
    mesh: DeviceMesh | None = None

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        entries = _entries(self.plan)
        meshes = list(mod.meshes())
        mesh = self._mesh(meshes)
        matched: set[str] = set()
        holders: dict[str, list[tuple[Function, Var]]] = {}  # every function's plain tensor parameter of each name
        for func in mod.functions.values():
            for name, p in zip(param_names(func), func.params):
                if isinstance(p.type, TensorType):
                    holders.setdefault(name, []).append((func, p))
        funcs: dict[str, Function] = {}
        for fname, func in mod.functions.items():
            funcs[fname] = self._function(func, entries, mesh, matched, holders)
        unmatched = [e.pattern for e in entries if e.pattern not in matched and not e.optional]
        if unmatched:
            known = sorted({n for f in mod.functions.values() for n, p in zip(param_names(f), f.params)
                            if isinstance(p.type, TensorType)})
            shown = ", ".join(known[:6]) + (f" and {len(known) - 6} more" if len(known) > 6 else "")
            close = difflib.get_close_matches(unmatched[0], known, n=1, cutoff=CLOSE_NAME)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ShardPlanError(
                f"shard plan: pattern '{unmatched[0]}' matches no plain tensor parameter "
                f"(parameters: {shown or 'none'}){hint}; end its value with '{OPTIONAL}' if it may match none"
            )
        if mesh not in meshes:
            meshes.append(mesh)
        infos = dict(mod.global_infos)
        infos["mesh"] = tuple(meshes)
        return mod.replace(functions=funcs, global_infos=infos)

    def _mesh(self, meshes: list[DeviceMesh]) -> DeviceMesh:
        if self.mesh is not None:
            if not isinstance(self.mesh, DeviceMesh):
                raise ShardPlanError(f"shard-params: mesh must be a DeviceMesh, got {type(self.mesh).__name__}")
            return self.mesh
        if not meshes:
            return make_mesh(("num_workers",))
        if len(meshes) > 1:
            raise ShardPlanError(
                f"shard-params: the module has {len(meshes)} device meshes; say which one with ShardParams(plan, mesh=...)"
            )
        return meshes[0]

    def _function(
        self,
        func: Function,
        entries: list[_Entry],
        mesh: DeviceMesh,
        matched: set[str],
        holders: dict[str, list[tuple[Function, Var]]],
    ) -> Function:
        names = param_names(func)
        env: dict[Var, Var] = {}
        params = []
        for name, p in zip(names, func.params):
            hits = [e for e in entries if fnmatch.fnmatchcase(name, e.pattern)]
            if not hits or not isinstance(p.type, (TensorType, DTensorType)):
                params.append(p)
                continue
            matched.update(e.pattern for e in hits)
            best = max(hits, key=lambda e: specificity(e.pattern))
            ties = [e for e in hits if e is not best and specificity(e.pattern) == specificity(best.pattern)]
            if ties:
                raise ShardPlanError(
                    f"shard plan: patterns '{best.pattern}' and '{ties[0].pattern}' match parameter '{name}' "
                    f"equally specifically; make one more specific"
                )
            if isinstance(p.type, DTensorType):
                raise ShardPlanError(
                    f"shard plan: pattern '{best.pattern}' matches parameter '{name}' of @{func.name}, which is "
                    f"already laid out ({p.type.placement}); shard-params lays out plain parameters"
                )
            if GLOBAL_PARAMS in func.attrs:
                raise ShardPlanError(
                    f"shard-params: @{func.name} is in the local view; lay out parameters before distributing"
                )
            t = p.type
            if best.strategy is not None:
                placement = _strategy_placement(best.strategy, holders[name], mesh, name, best.pattern)
            else:
                placement = best.placement
                try:
                    placement.validate(mesh.ndim, len(t.shape), shape=t.shape)  # a strided part count must divide
                    check_partial(placement, t.dtype, "the layout")
                except PlacementError as err:
                    raise ShardPlanError(
                        f"shard plan: pattern '{best.pattern}' lays out parameter '{name}' ({t}): {err}"
                    ) from None
            new = Var(p.name, DTensorType(t.shape, t.dtype, mesh, placement), p.span)
            env[p] = new
            params.append(new)
        if not env:
            return func
        rewritten = map_bindings(func, lambda b, e: None, dict(env))
        return rewritten.replace(params=tuple(params))

