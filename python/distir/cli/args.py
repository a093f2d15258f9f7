"""Argument types and checks shared by the subcommands.

Everything that can be checked from the arguments alone is checked here, at argument
parsing: argparse then prints the usage and one ``prog: error: argument ...: ...`` line
and exits with status 2. Checks that need the module (is ``--bind s=4`` a size of it?)
raise :class:`~distir.errors.DistirError` (exit status 1), or :class:`UsageError` (exit
status 2) when two arguments contradict each other.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable, Mapping

from ..errors import DistirError

__all__ = [
    "INT64_MAX",
    "MAX_DISCO_WORKERS",
    "MAX_SWEEP_WORKERS",
    "MAX_WORKERS",
    "UsageError",
    "axis_cost",
    "check_axis_costs",
    "check_bind_names",
    "check_mesh_symbol",
    "image_file",
    "merge_axis_costs",
    "mesh_symbols",
    "module_symbols",
    "non_negative_float",
    "non_negative_int",
    "parse_binding",
    "positive_float",
    "positive_int",
    "seed",
    "session_workers",
    "shard_entry",
    "static_workers",
    "sweep_counts",
    "workers",
]

INT64_MAX = 2**63 - 1  # sizes become TVM int64 constants
MAX_WORKERS = 4096  # the most workers `distir run`/`demo` simulate (one thread each on TVM) and `show` draws
MAX_DISCO_WORKERS = 256  # `distir run --backend tvm` starts a thread per worker (1024 took 100 s on the MLP)
MAX_SWEEP_WORKERS = 1 << 20  # `distir sweep` only evaluates formulas: up to a million devices


class UsageError(DistirError):
    """Arguments that contradict each other or the module: exit status 2, like argparse's errors."""


def _shown(text: str) -> str:
    """The argument as quoted in a message: at most 40 characters of it."""
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:  # also Python's limit on the digits of an int
        raise argparse.ArgumentTypeError(f"expected {what}, got {_shown(text)}") from None


def _bounded(value: int, lo: int, hi: int, what: str, why: str = "") -> int:
    if value < lo:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
    if value > hi:
        shown = str(value) if len(str(value)) <= 40 else f"{str(value)[:20]}... ({len(str(value))} digits)"
        raise argparse.ArgumentTypeError(f"{shown} is too large: at most {hi}{why}")
    return value


def positive_int(text: str) -> int:
    """An integer in [1, 2**63 - 1] (argparse type)."""
    return _bounded(_int(text, "a positive integer"), 1, INT64_MAX, "a positive integer", " (int64)")


def non_negative_int(text: str) -> int:
    """An integer in [0, 2**63 - 1] (argparse type)."""
    return _bounded(_int(text, "an integer >= 0"), 0, INT64_MAX, "an integer >= 0", " (int64)")


def seed(text: str) -> int:
    """A random seed: an integer in [0, 2**63 - 1] (numpy takes no negative seeds)."""
    return _bounded(_int(text, "a seed (an integer >= 0)"), 0, INT64_MAX, "a seed (an integer >= 0)", " (int64)")


def workers(text: str) -> int:
    """A number of workers to simulate or draw: an integer in [1, MAX_WORKERS] (argparse type)."""
    if "," in text or ("-" in text.strip()[1:] and text.strip()[:1].isdigit()):
        raise argparse.ArgumentTypeError(
            f"expected one number of workers, got {_shown(text)}; run once per count, or use distir sweep for a "
            "table of several"
        )
    return _bounded(_int(text, "a positive number of workers"), 1, MAX_WORKERS, "a positive number of workers",
                    " workers, the most distir simulates or draws")


def sweep_counts(text: str) -> list[int]:
    """``--num-workers`` of ``distir sweep``: ``1,2,4``, ``1-8`` or ``1-128x2`` (argparse type)."""
    from ..analysis.sweep import parse_counts

    try:
        return parse_counts(text, maximum=MAX_SWEEP_WORKERS)
    except DistirError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _float(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {_shown(text)}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text.strip()}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (argparse type)."""
    value = _float(text, "a finite number >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text.strip()}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (argparse type)."""
    value = _float(text, "a finite number > 0")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text.strip()}")
    return value


IMAGE_SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff", ".webp")


def image_file(text: str) -> str:
    """A file to draw into with matplotlib, whose format its extension names (argparse type).

    Without a known extension matplotlib would fail, or silently write ``NAME.png``."""
    import os

    if text.lower().endswith(IMAGE_SUFFIXES) and os.path.basename(text)[:1] not in ("", "."):
        return text
    raise argparse.ArgumentTypeError(
        f"{_shown(text)} is not an image file name: name one like out.png, with an extension of "
        f"({', '.join(s.lstrip('.') for s in IMAGE_SUFFIXES)})"
    )


def parse_binding(text: str) -> dict[str, int]:
    """``"num_workers=4"`` or ``"num_workers=4,n=128"`` -> ``{"num_workers": 4, ...}`` (argparse type).

    Every value is a size: an integer in [1, 2**63 - 1]."""
    out: dict[str, int] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name.isidentifier():
            raise argparse.ArgumentTypeError(f"expected NAME=INT (like num_workers=4), got {_shown(part)}")
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"value of {name} must be an integer, got {_shown(value)}") from None
        try:
            out[name] = _bounded(number, 1, INT64_MAX, "a size >= 1", " (int64)")
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentTypeError(f"{name}: {err}") from None
    return out


def axis_cost(text: str):
    """``"0=5us:25GB/s"`` (or several, comma-separated) -> AxisCosts (argparse type of ``--axis-cost``;
    the syntax is in :mod:`distir.ir.axis_cost`)."""
    from ..ir.axis_cost import AxisCostError, AxisCosts

    try:
        return AxisCosts.parse(text)
    except AxisCostError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def merge_axis_costs(given: Iterable) -> object:
    """The ``--axis-cost`` values as one AxisCosts (None when none was given); an axis given twice
    is a usage error."""
    from ..ir.axis_cost import AxisCosts

    merged: dict = {}
    for costs in given:
        for axis, cost in costs.by_axis:
            if axis in merged:
                raise UsageError(f"--axis-cost {axis}={cost}: mesh axis {axis} is given twice (also as {merged[axis]})")
            merged[axis] = cost
    return AxisCosts(tuple(merged.items())) if merged else None


def check_axis_costs(costs, mod) -> None:
    """Every ``--axis-cost`` axis must be an axis of every mesh of the module."""
    if costs is None:
        return
    meshes = mod.meshes()
    if not meshes:
        raise UsageError("--axis-cost: the module has no device mesh, so there is no mesh axis to cost")
    for axis, cost in costs.by_axis:
        for i, mesh in enumerate(meshes):
            if axis >= mesh.ndim:
                raise UsageError(f"--axis-cost {axis}={cost}: mesh[{i}] {mesh.shape_str()} has {mesh.ndim} "
                                 f"axes (0 to {mesh.ndim - 1})")


def shard_entry(text: str) -> tuple[str, str]:
    """``"layers.*.mlp.down*=S[1]"`` -> ``("layers.*.mlp.down*", "S[1]")`` (argparse type of ``--shard``).

    Split at the last ``=``; the right side must be a placement or a strategy name."""
    from ..transform.layout_choice.shard_params import ShardPlanError, check_plan_value

    pattern, sep, value = text.rpartition("=")
    pattern, value = pattern.strip(), value.strip()
    if not sep or not pattern or not value:
        raise argparse.ArgumentTypeError(f"expected PATTERN=PLACEMENT (like '*.o_proj.weight=S[1]'), got {_shown(text)}")
    try:
        return pattern, check_plan_value(value)
    except ShardPlanError as err:
        raise argparse.ArgumentTypeError(f"{pattern}: {err}") from None


# ---------------------------------------------------------------- checks against the module


def memory_budget(text: str) -> str:
    """A memory budget for auto-shard: bytes (``2GB``), a share (``25%``), ``1.1/W`` or ``min+10%`` (argparse type)."""
    from ..transform.layout_choice.auto_shard import AutoShardError, MemoryBudget

    try:
        MemoryBudget.parse(text)
    except AutoShardError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("memory budget ")) from None
    return text


def activation_budget(text: str) -> str:
    """An activation budget for auto-shard: a memory budget's forms, or ``none`` (argparse type)."""
    from ..transform.layout_choice.auto_shard import AutoShardError, parse_activation_budget

    try:
        parse_activation_budget(text)
    except AutoShardError as err:  # the message names the budget as a memory budget's does
        raise argparse.ArgumentTypeError(str(err).removeprefix("memory budget ")) from None
    return text


def module_symbols(mod) -> set[str]:
    """Names of the symbolic sizes of a module: its meshes' and its tensors' (params, bindings, results)."""
    from ..ir import sym
    from ..ir.mesh import Range
    from ..ir.types import free_vars
    from ..transform.lower_to_local import GLOBAL_PARAMS, GLOBAL_RESULT

    out: set[str] = set()
    for mesh in mod.meshes():
        for d in mesh.shape:
            out |= sym.free_vars(d)
        if isinstance(mesh.device_ids, Range):
            out |= sym.free_vars(mesh.device_ids.start) | sym.free_vars(mesh.device_ids.stop)
    for f in mod.functions.values():
        for p in f.params:
            out |= free_vars(p.type)
        for b in f.bindings():
            out |= free_vars(b.var.type)
        for t in f.attrs.get(GLOBAL_PARAMS, ()):
            out |= free_vars(t)
        if GLOBAL_RESULT in f.attrs:
            out |= free_vars(f.attrs[GLOBAL_RESULT])
        out |= free_vars(f.result.type) if getattr(f.result, "type", None) is not None else set()
    return out


def mesh_symbols(mod) -> set[str]:
    """Names of the symbolic sizes of the module's device meshes."""
    from ..ir import sym

    return set().union(*(sym.free_vars(d) for m in mod.meshes() for d in m.shape))


def _listing(names: Iterable[str]) -> str:
    names = sorted(names)
    return ", ".join(names) if names else "none: every size is a number"


def check_bind_names(bind: Mapping[str, int], symbols: set[str], mesh_symbol: str | None = None) -> None:
    """Every name bound must be a symbolic size of the module (a typo is an error, not ignored).

    ``mesh_symbol`` (set by ``-n``, not ``--bind``) is left out of the names offered."""
    import difflib

    allowed = symbols - {mesh_symbol} if mesh_symbol else set(symbols)
    for name, value in bind.items():
        if name not in allowed:
            same_case = [s for s in sorted(allowed) if s.lower() == name.lower()]
            close = same_case or difflib.get_close_matches(name, sorted(allowed), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            if mesh_symbol in symbols:
                known = f"its symbolic sizes besides {mesh_symbol}: {', '.join(sorted(allowed)) or 'none'}"
            else:
                known = f"its symbolic sizes: {_listing(allowed)}"
            raise DistirError(f"--bind {name}={value}: the module has no symbolic size '{name}'{hint} ({known})")


def _device_ids(mod, values: Mapping[str, int] | None) -> list[list[int]] | None:
    from ..ir import sym

    try:
        return [m.device_list(dict(values or {})) for m in mod.meshes()]
    except sym.SymbolicError:
        return None


def static_workers(mod, values: Mapping[str, int] | None = None) -> int | None:
    """The number of devices the module's meshes use, at sizes ``values`` (what the simulator runs).

    None when a mesh is still symbolic, or when there is no mesh."""
    ids = _device_ids(mod, values)
    if not ids:
        return None
    return len(set().union(*ids))


def session_workers(mod, values: Mapping[str, int] | None = None) -> int | None:
    """The Disco session a module needs: one past its largest device id (idle ids included)."""
    ids = _device_ids(mod, values)
    if not ids:
        return None
    return max(max(i) for i in ids if i) + 1


def check_mesh_symbol(mod, symbol: str, num_workers: int | None, *, option: str = "-n/--num-workers") -> bool:
    """Whether ``symbol`` is a mesh size of ``mod``; when it is not, ``num_workers`` must fit the module.

    A module whose meshes are all static runs on its own number of devices: ``-n`` must
    equal it (then there is nothing to bind; ``None``: no ``-n`` was given). A module
    whose meshes use another symbol needs ``--symbol``; one without meshes is an error.
    """
    names = mesh_symbols(mod)
    if symbol in names:
        return True
    if not mod.meshes():
        raise DistirError(
            "the module has no device mesh, so there is nothing to distribute; lay out its parameters by name with "
            "--shard PATTERN=PLACEMENT or --shard-plan FILE (a 1-D mesh of num_workers is made), or declare one with "
            'I.module_global_infos({"mesh": [R.device_mesh(("num_workers",), I.Range(0, "num_workers"))]})'
        )
    if names:
        raise DistirError(
            f"--symbol {symbol}: the module's device meshes have no size '{symbol}'; their sizes are "
            f"{_listing(names)}: pass --symbol {min(names)}"
        )
    total = static_workers(mod)
    if total is not None and num_workers is not None and total != num_workers:
        raise DistirError(
            f"{option} {num_workers}: the module's device meshes are static and use {total} device"
            f"{'s' if total != 1 else ''} (no '{symbol}' to set); pass -n {total} or make the mesh size symbolic"
        )
    return False
