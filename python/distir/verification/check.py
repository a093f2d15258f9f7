"""The check behind ``distir verify``: the lowered module against the global one, count by count.

For each count of the domain, the local-view module is specialized to it and run on the SPMD
simulator (:mod:`distir.runtime.spmd`) on the same seeded random global inputs as the
single-device interpreter; the assembled outputs are compared: integers and bools exactly
(replicas too), floats within their dtype's tolerance. The first count that differs is a
counterexample: the output element that differs most, the workers that hold it at that count,
and the ``distir run`` command that shows the same wrong number. It runs through
:class:`distir.driver.Driver`, as ``distir run`` does, so the replay computes exactly what the
check computed. What this does and does not establish: docs/verify.md.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping, Sequence

import numpy as np

from ..driver import Driver, default_tolerance, extreme_inputs, flat_outputs, random_inputs
from ..errors import DistirError
from ..ir import sym
from ..ir.expr import IRModule
from ..ir.layout import block_slices, concrete_mesh_shape, concrete_placement, mesh_coords
from ..ir.types import DTensorType, TupleType
from ..runtime.spmd import run_spmd
from .cutoff import NotProved, cutoff
from .exact import exact_plan, float64_module, small_integer_inputs
from .verdict import CHECKED, COUNTEREXAMPLE, EVERY_COUNT, NOT_CHECKED, Counterexample, Verdict

__all__ = ["DEFAULT_DIM", "DEFAULT_MAX_COUNT", "verify"]

DEFAULT_MAX_COUNT = 8
#: the every-count argument runs counts 1..C; past this C it is not attempted (the run would take too long)
MAX_CUTOFF = 1024
#: the largest count a check simulates (as ``distir run``: each worker is simulated in turn)
MAX_COUNT = 4096
#: the most workers a check given its counts simulates in all (the sum of the counts): 1..256 is 32896
MAX_SIMULATED = 1 << 16
#: symbolic dims other than the mesh sizes default to a prime, so that every count from 2 on cuts them unevenly
DEFAULT_DIM = 13
_REPLICA_TOLERANCE = (1e-5, 1e-6)  # run_spmd's default, what `distir run` uses for float replicas


def verify(
    global_mod: IRModule,
    local_mod: IRModule | None = None,
    *,
    counts: Sequence[int] | None = None,
    max_count: int | None = None,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
    func: str = "main",
    symbol: str = "num_workers",
    source: str | None = None,
    against: str | None = None,
    every_count: bool | None = None,
    max_seconds: float | None = None,
    exact_floats: bool | None = None,
) -> Verdict:
    """Check that the lowered ``global_mod`` (or the hand-written ``local_mod``) computes the global
    program at every count in ``counts`` (default ``1..max_count``); a :class:`Verdict`.

    ``every_count`` (default: when neither ``counts`` nor ``max_count`` is given): first try the
    cutoff argument (:mod:`distir.verification.cutoff`); where it applies the check runs counts
    ``1..C`` (and the domain) and the verdict covers every count, else the domain is run and the
    verdict says why not.

    ``dims``: values of the other symbolic sizes (a second mesh axis must be given; a tensor dim
    defaults to :data:`DEFAULT_DIM`). ``source``/``against``: the files the modules came from, for
    the replay command of a counterexample. ``max_seconds``: stop before a count once this much
    time has gone, NOT_CHECKED naming the count. ``exact_floats``: where the program's float ops
    allow it (:mod:`distir.verification.exact`), run both modules in float64 on small integer
    inputs and compare every output exactly. ``None`` (default): as well as the random float
    inputs (within the tolerance), where allowed, silently skipped where not; ``True``: instead of
    them, the verdict naming the ops that keep the tolerance where not allowed; ``False``: never. Domains past :data:`MAX_COUNT` or
    :data:`MAX_SIMULATED` are refused (DistirError), before any work.
    """
    from ..transform.lower_to_local import GLOBAL_PARAMS

    t0 = time.perf_counter()
    if func not in global_mod.functions:
        raise DistirError(f"the module has no function '{func}' (it has: {', '.join(global_mod.functions)})")
    if GLOBAL_PARAMS in global_mod[func].attrs:
        raise DistirError(f"@{func} of the global module is already in the local view; give the global-view "
                          "program it came from (and the lowered one as the second module)")
    if local_mod is not None:
        if func not in local_mod.functions:
            raise DistirError(f"the local module has no function '{func}' (it has: {', '.join(local_mod.functions)})")
        if GLOBAL_PARAMS not in local_mod[func].attrs:
            raise DistirError(f"@{func} of the local module is not in the local view (it has no {GLOBAL_PARAMS}); "
                              "give a module the distribute pipeline produced, or one written like it")
    if every_count is None:
        every_count = counts is None and max_count is None
    domain = _domain(counts, DEFAULT_MAX_COUNT if max_count is None else max_count)
    if max_seconds is not None and not (isinstance(max_seconds, (int, float)) and max_seconds > 0):
        raise DistirError(f"max_seconds must be a positive number of seconds, not {max_seconds!r}")
    dims = {k: int(v) for k, v in (dims or {}).items()}
    if symbol in dims:
        raise DistirError(f"{symbol} is the number of workers: give its values as counts, not as a dim")
    mesh_syms = _mesh_symbols(global_mod) | (_mesh_symbols(local_mod) if local_mod is not None else set())
    mesh_sizes = {k: v for k, v in dims.items() if k in mesh_syms}
    missing = sorted(mesh_syms - mesh_sizes.keys() - {symbol})
    if missing:
        raise DistirError(f"the mesh size{'s' if len(missing) > 1 else ''} {', '.join(missing)} need"
                          f"{'' if len(missing) > 1 else 's'} a value (e.g. dims={{'{missing[0]}': 2}}); "
                          f"only {symbol} is swept")
    param_syms = _param_symbols(global_mod, func)
    unknown = sorted(dims.keys() - mesh_syms - param_syms)
    if unknown:
        known = sorted((mesh_syms | param_syms) - {symbol})
        raise DistirError(f"no symbolic size {', '.join(unknown)} in @{func} (its sizes: {', '.join(known) or 'none'})")
    tensor_dims = {name: dims.get(name, DEFAULT_DIM) for name in param_syms - mesh_syms}
    symbolic = symbol in mesh_syms
    if not symbolic:
        domain = (0,)  # static meshes: the one count they have
    inputs = random_inputs(global_mod, func, {**tensor_dims, **mesh_sizes}, seed=seed)
    pipeline = None if local_mod is None else (lambda _mod: local_mod)
    driver = Driver(global_mod, func=func, symbol=symbol, bind=mesh_sizes, pipeline=pipeline)
    expected = flat_outputs(driver.reference(inputs))
    input_sets = [("random", driver, inputs, expected)]
    extreme, extreme_skipped = _extreme_set(driver, inputs, seed)
    exact = [i for i, e in enumerate(expected) if not _is_float(e)]
    tolerant = [(i, str(e.dtype), *default_tolerance(e.dtype)) for i, e in enumerate(expected) if _is_float(e)]
    shown_dims = {**tensor_dims, **mesh_sizes}
    exactly, tolerance_kept = "", ""

    def verdict(status, done, **kw):
        return Verdict(status, tuple(done), domain, shown_dims, seed, exact=exact, tolerant=tolerant,
                       seconds=time.perf_counter() - t0, symbol=symbol, extreme=extreme is not None,
                       extreme_skipped=extreme_skipped, exact_floats=exactly, tolerance_kept=tolerance_kept,
                       also_exact=also_exact, **kw)

    driver.distribute()
    also_exact = ""  # the default: an exact set beside the random one, where the program allows it
    if exact_floats is not False and tolerant:
        plan = exact_plan(global_mod[func], shown_dims, max(max(domain), MAX_CUTOFF if every_count else 1))
        if isinstance(plan, str):
            tolerance_kept = plan if exact_floats else ""
        else:
            local64 = float64_module(driver.local)
            driver64 = Driver(float64_module(global_mod), func=func, symbol=symbol, bind=mesh_sizes,
                              pipeline=lambda _mod: local64)
            inputs64 = small_integer_inputs(inputs, seed)
            exact_set = ("exact", driver64, inputs64, flat_outputs(driver64.reference(inputs64)))
            if exact_floats:  # the float set becomes the float64 one, on small integers, compared exactly
                driver, inputs, input_sets = driver64, inputs64, [exact_set]
                if extreme is not None:
                    extreme, extreme_skipped = _extreme_set(driver, inputs, seed)
                exact, tolerant, exactly = list(range(len(expected))), [], plan.describe()
            else:
                input_sets.append(exact_set)
                also_exact = plan.describe()
    if extreme is not None:
        input_sets.append(extreme)
    replica = _REPLICA_TOLERANCE if tolerant else (0.0, 0.0)
    cut, not_proved = None, ""
    if every_count and symbolic:
        try:
            cut = cutoff(driver.local[func], symbol, {**tensor_dims, **mesh_sizes}, max_horizon=MAX_CUTOFF,
                         guarded=_guarded_counts(driver.local, func, symbol))
        except NotProved as err:
            not_proved = str(err)
        if cut is not None:
            domain = tuple(sorted(set(domain) | set(cut.counts)))
    done: list[int] = []
    for count in domain:
        if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
            return verdict(NOT_CHECKED, done, reason=f"count {count}: the time limit of {max_seconds:g} s ran out "
                                                     "before it (a larger --max-seconds, or fewer counts)")
        values = driver.values(count) if symbolic else {}
        try:
            local = driver.specialize(count if symbolic else {})
        except DistirError as err:
            return verdict(NOT_CHECKED, done, reason=f"count {count}: the lowered module does not specialize: {err}")
        replay = _replay(source, against, func, symbol, count if symbolic else None, seed, shown_dims,
                         hand_written=local_mod is not None, rerun=bool(exactly), exact_floats=bool(exactly))
        sizes = {**values, **tensor_dims}
        for kind, run_driver, xs, want in input_sets:
            local = run_driver.specialize(count if symbolic else {})
            if kind != "random":  # `distir run` draws the random inputs only: the check itself replays these
                replay = _replay(source, against, func, symbol, count if symbolic else None, seed, shown_dims,
                                 hand_written=local_mod is not None, rerun=True,
                                 exact_floats=bool(exactly) or kind == "exact")
            rtol, atol = (0.0, 0.0) if kind == "exact" else replica
            try:
                with np.errstate(all="ignore"):
                    got = flat_outputs(run_spmd(local, *xs, func=func, seed=seed, rtol=rtol, atol=atol))
            except DistirError as err:
                cx = Counterexample(count, sizes, None, None, message=f"the lowered module fails: {err}",
                                    replay=replay, inputs=kind)
                return verdict(COUNTEREXAMPLE, done, counterexample=cx)
            diff = _first_difference(got, want, exact_floats=kind == "exact")
            if diff is not None:
                out, index, message = diff
                held = "" if index is None else _holders(local[func], out, index, {**values, **tensor_dims})
                g = None if index is None else got[out][index].item()
                e = None if index is None else want[out][index].item()
                cx = Counterexample(count, sizes, out if index is not None else None, index, g, e, held, message,
                                    replay, inputs=kind)
                return verdict(COUNTEREXAMPLE, done, counterexample=cx)
        done.append(count)
    if cut is not None:
        skipped = (f"each of the other {cut.skipped} counts up to {cut.horizon} has every index formula, at every "
                   "worker, equal to a count run's (evaluated), and " if cut.skipped else "")
        proof = (f"{skipped}every count past {cut.horizon} has them equal to count {cut.tail}'s (z3; "
                 f"{cut.formulas} formula{'s' if cut.formulas != 1 else ''}), a count's last workers on its axis "
                 f"standing for the ones past them; {cut.idle_sums} all-reduce{'s' if cut.idle_sums != 1 else ''} by sum "
                 "get zero from those workers")
        return verdict(EVERY_COUNT, done, cutoff=cut.horizon, proof=proof)
    return verdict(CHECKED, done, not_proved=not_proved)


def _guarded_counts(mod: IRModule, func: str, symbol: str) -> set[int]:
    """The counts at which a count variant replaces ``func`` (distir.transform.count_variants); past
    :data:`MAX_COUNT` they are not run, so the every-count argument is refused."""
    from ..transform.count_variants import guard_of

    out: set[int] = set()
    for f in mod.functions.values():
        g = guard_of(f)
        if g is not None and g[0] == func:
            if g[1] != symbol:
                raise NotProved(f"@{f.name} is a count variant of @{func} guarded by {g[1]}, not {symbol}")
            out |= set(g[2])
    if out and max(out) > MAX_COUNT:
        raise NotProved(f"a count variant of @{func} runs at count {max(out)}, past {MAX_COUNT}")
    return out


def _domain(counts: Sequence[int] | None, max_count: int) -> tuple[int, ...]:
    if counts is None:
        if not isinstance(max_count, int) or max_count < 1:
            raise DistirError(f"max_count must be a positive integer, not {max_count!r}")
        if max_count > MAX_COUNT:
            raise DistirError(f"max_count {max_count} is past {MAX_COUNT}, the most workers a check simulates")
        out = list(range(1, max_count + 1))
    else:
        out = sorted({int(c) for c in counts})
        if not out or out[0] < 1:
            raise DistirError(f"counts must be positive integers, not {list(counts)!r}")
    if out[-1] > MAX_COUNT:
        raise DistirError(f"count {out[-1]} is past {MAX_COUNT}, the most workers a check simulates")
    total = sum(out)
    if total > MAX_SIMULATED:
        raise DistirError(f"the counts {_shown(out)} simulate {total} workers in all, past the {MAX_SIMULATED} a check "
                          "runs: give fewer or smaller counts")
    return tuple(out)


def _shown(counts: list[int]) -> str:
    if len(counts) > 2 and counts == list(range(counts[0], counts[-1] + 1)):
        return f"{counts[0]}..{counts[-1]}"
    return ",".join(map(str, counts[:4])) + (",..." if len(counts) > 4 else "")


def _mesh_symbols(mod: IRModule) -> set[str]:
    return set().union(*(sym.free_vars(d) for m in mod.meshes() for d in m.shape))


def _param_symbols(mod: IRModule, func: str) -> set[str]:
    out: set[str] = set()
    for p in mod[func].params:
        for d in getattr(p.type, "shape", None) or ():
            out |= sym.free_vars(d)
    return out


def _is_float(a: np.ndarray) -> bool:
    return np.issubdtype(a.dtype, np.floating) or a.dtype.kind == "V" or "float" in str(a.dtype)


def _first_difference(got: tuple, expected: tuple, *, exact_floats: bool = False) -> tuple[int, tuple | None, str] | None:
    """(output, element, words) of the first output that differs, None when all match.

    Integers and bools must be equal bit for bit (compared as integers, never through floats);
    floats as :func:`distir.driver.compare` does (NaNs equal, atol scaled by the largest value),
    and the element reported is the one that differs most."""
    if len(got) != len(expected):
        return 0, None, f"{len(got)} outputs, the global program has {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        g, e = np.asarray(g), np.asarray(e)
        if g.shape != e.shape or g.dtype != e.dtype:
            return i, None, f"output {i} is {g.dtype}{list(g.shape)}, the global program's is {e.dtype}{list(e.shape)}"
        if not _is_float(e) or exact_floats:
            bad = (g != e) & ~(np.isnan(e) & np.isnan(g)) if _is_float(e) else g != e
            if bad.any():
                return i, tuple(int(k) for k in np.argwhere(bad)[0]), f"output {i} differs"
            continue
        rtol, atol = default_tolerance(e.dtype)
        g64, e64 = g.astype(np.float64), e.astype(np.float64)
        scale = float(np.nanmax(np.abs(e64), initial=0.0, where=np.isfinite(e64))) if e64.size else 0.0
        close = np.isclose(g64, e64, rtol=rtol, atol=atol * max(scale, 1e-30), equal_nan=True)
        if not close.all():
            gap = np.where(close, -1.0, np.nan_to_num(np.abs(g64 - e64), nan=np.inf))
            return i, tuple(int(k) for k in np.unravel_index(int(np.argmax(gap)), gap.shape)), f"output {i} differs"
    return None


def _result_types(t) -> list:
    if isinstance(t, TupleType):
        return [x for f in t.fields for x in _result_types(f)]
    return [t]


def _holders(f, out: int, index: tuple, values: Mapping[str, int]) -> str:
    """Who holds element ``index`` of output ``out`` at these sizes, in words."""
    from ..transform.lower_to_local import GLOBAL_RESULT

    types = _result_types(f.attrs.get(GLOBAL_RESULT))
    t = types[out] if out < len(types) else None
    if not isinstance(t, DTensorType):
        return "held by every worker"
    if t.placement.is_block or t.placement.is_strided:
        return f"laid out \"{t.placement}\" on mesh {t.mesh.shape_str()}"
    sizes = concrete_mesh_shape(t.mesh, values)
    placement = concrete_placement(t.placement, values)
    shape = tuple(sym.evaluate(d, values) for d in t.shape)
    devices = t.mesh.device_list(values)
    holders = []
    for pos, dev in enumerate(devices):
        glob, _, _ = block_slices(shape, placement, mesh_coords(pos, sizes), sizes)
        if all(s.start <= k < s.stop for s, k in zip(glob, index)):
            holders.append(dev)
    what = "the reduction of the parts on" if placement.has_partial else "held by"
    if len(holders) == len(devices) and not placement.has_partial:
        return f"held by every worker: laid out \"{t.placement}\""
    listed = ", ".join(map(str, holders))
    return f"{what} worker{'s' if len(holders) > 1 else ''} {listed}: laid out \"{t.placement}\""


def _extreme_set(driver: Driver, inputs: list, seed: int) -> tuple[tuple | None, str]:
    """The second input set, integers over their dtype's whole range (:func:`distir.driver.extreme_inputs`),
    with the global program's outputs on it; (None, why) when there is none or the global program
    cannot run on it (integers used as indices, say)."""
    xs = extreme_inputs(inputs, seed=seed)
    if xs is None:
        return None, ""
    try:
        with np.errstate(all="ignore"):  # wrapping around is the integers' meaning, as on one device
            want = flat_outputs(driver.reference(xs))
    except (DistirError, IndexError, ValueError, OverflowError, FloatingPointError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        return None, f"the global program does not run on them ({first})"
    return ("extreme", driver, xs, want), ""


def _replay(source, against, func, symbol, count, seed, dims, *, hand_written: bool, rerun: bool = False,
            exact_floats: bool = False) -> str:
    """The command that shows the same wrong number: ``distir run`` for a module the pipeline lowered
    (it distributes as the check did), ``distir verify --against`` for a hand-written lowering (or the
    call, when the modules came from no file: ``distir run`` would check the pipeline's lowering)."""
    if (hand_written or rerun) and not against and not (rerun and source and not hand_written):
        mods = "global_mod, local_mod" if hand_written else "global_mod"
        keys = "".join(f", {k}={v!r}" for k, v in (("seed", seed), ("func", func), ("symbol", symbol))
                       if v != {"seed": 0, "func": "main", "symbol": "num_workers"}[k])
        at = f"counts=[{count}]" if count is not None else "counts=None"
        keys += ", exact_floats=True" if exact_floats else ""
        return f"distir.verify({mods}, {at}, dims={dict(sorted(dims.items()))!r}{keys})"
    check = bool(against) or rerun  # `distir verify --counts W` reruns the check itself
    args = ["distir", "verify" if check else "run", source or "GLOBAL.py"]
    if against:
        args += ["--against", against]
    if count is not None:
        args += ["--counts", str(count)] if check else ["-n", str(count)]
    if seed:
        args += ["--seed", str(seed)]
    for k, v in sorted(dims.items()):
        args += ["--bind", f"{k}={v}"]
    if func != "main":
        args += ["--func", func]
    if symbol != "num_workers":
        args += ["--symbol", symbol]
    if exact_floats:
        args += ["--exact-floats"]
    return shlex.join(args)
