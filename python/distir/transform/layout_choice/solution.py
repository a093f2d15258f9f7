"""Solving the integer program of :mod:`.program` with HiGHS (through ``highspy``), exactly and
lexicographically (the least bytes, then the tie-break), and reading the plan it chose; what another
layout of one value would cost (:func:`alternative`, for the ambiguity warnings and auto-shard's
explanations)."""

from __future__ import annotations

import contextvars
import hashlib
import math
import time
import warnings
from collections import OrderedDict
from collections.abc import Collection, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy.sparse import coo_matrix, csr_matrix, issparse, vstack

from ...ir.placement import Placement
from ...quiet import native_output_silenced
from .highs_model import FAILED, INFEASIBLE, OPTIMAL, STOPPED, HighsModel, HighsSolve
from .plan import LayoutPlan
from .program import Program, result_slots

__all__ = ["Rows", "Solved", "SolverClock", "SolverTimeout", "alternative", "alternative_cost", "forget_solved", "objective_of",
           "objective_per_byte", "highs", "solve_fixed", "solver_time_limit", "start_of", "visible_layouts"]

MEMORY_WEIGHT = Fraction(0)  # bytes held count only as a tie-break (W_MEMORY), not against bytes sent
# HiGHS, exact (no gap). Presolve off: on these programs (a few thousand columns, mostly implied by a
# few hundred strategy choices) it costs more than it saves (measured: frontend Llama 1.4 s -> 0.6 s)
SOLVER_OPTIONS = {"mip_rel_gap": 0.0, "presolve": False}
# More of HiGHS's options (scipy's milp, where it solves, passes them on with a warning). The feasibility-jump
# heuristic looks for a first solution the root LP and its cuts find anyway on these programs:
# without it each program takes half the time (measured on llama_stack(8)'s windows). With the
# relaxation tight the bound is found early and the time goes into finding the optimal layout:
# the shifting heuristic finds it sooner (auto-shard's least-peak programs on llama_stack(8)
# 4.9 -> 3.6 s, the GPT-2 block's --explain programs 23.2 -> 21.3 s, the same optima)
HIGHS_OPTIONS = {"mip_heuristic_run_feasibility_jump": False, "mip_heuristic_run_shifting": True}


#: the seconds HiGHS may take over the programs of one function's layout (propagate-sharding's
#: ``solver_seconds``): most programs take milliseconds and a model's a few seconds (a GQA layer's
#: tie-break 4-7 s on a busy 2-core machine), but a few on 2-D meshes with hundreds of candidate
#: layouts take HiGHS a minute to prove optimal, long after it found the optimum
SOLVER_SECONDS = 20.0
#: each program gets at least this long, even once the function's time is spent
MIN_SOLVE_SECONDS = 1.0
BYTES_SHARE = 2 / 3  # of the time left, the most the bytes program of a lexicographic solve takes


@dataclass
class SolverClock:
    """The solver's time for one function (the seconds spent in HiGHS, not in building programs), and
    what a time limit cut short: the largest gap of a byte optimum not proven (HiGHS's relative gap:
    the layout kept sends at most that share more than the best), whether some tie was broken by the
    first layout found."""

    seconds: float
    used: float = 0.0
    gap: float | None = None
    ties_unsettled: bool = False
    # whether the least bytes are still sought from the linear relaxation first: until one of the
    # function's programs has a relaxation that is not whole (then its others are solved as integers)
    relaxations_whole: bool = True

    def left(self, share: float = 1.0) -> float:
        """The seconds the next program may take: ``share`` of what is left, at least MIN_SOLVE_SECONDS."""
        return max((self.seconds - self.used) * share, MIN_SOLVE_SECONDS)


_CLOCK: contextvars.ContextVar[SolverClock | None] = contextvars.ContextVar("distir_solver_clock", default=None)


@contextmanager
def solver_time_limit(seconds: float):
    """Within it, the programs solved share ``seconds`` (:class:`SolverClock`, yielded). Outside
    (auto-shard, tests), HiGHS runs to the proof."""
    clock = SolverClock(seconds)
    token = _CLOCK.set(clock)
    try:
        yield clock
    finally:
        _CLOCK.reset(token)


class SolverTimeout(Exception):
    """The solver's time ran out before it found any layout of a program."""


TIME_LIMIT_STATUS = 1  # iteration or time limit reached (the codes of scipy.optimize.milp)


OPTIMAL_STATUS = 0  # an optimal solution found (and proven)
INFEASIBLE_STATUS = 2  # no solution meets the rows
FAILED_STATUS = 4  # any other end


@dataclass(frozen=True)
class Rows:
    """Rows ``lb <= A x <= ub`` of a program: ``A`` sparse or dense, the bounds numbers or arrays
    (``scipy.optimize.LinearConstraint``'s fields; that module takes 0.8 s to import, a quarter of a
    ``distir-opt`` run, and the program is solved through ``highspy``)."""

    A: object
    lb: object
    ub: object


@dataclass(frozen=True)
class Solved:
    """What a solve gave: ``status`` (:data:`OPTIMAL_STATUS`, :data:`TIME_LIMIT_STATUS`,
    :data:`INFEASIBLE_STATUS` or :data:`FAILED_STATUS`), ``x`` (None: no solution found), the
    objective ``fun`` at ``x``, and HiGHS's relative gap (None: none known)."""

    status: int
    x: np.ndarray | None
    fun: float | None = None
    mip_gap: float | None = None

#: the proven optima of the programs solved last in this process, by :func:`_program_key`: a program
#: met again (the same module distributed again, a sweep, auto-shard's alternatives, a test suite)
#: is not solved again. HiGHS is deterministic, so the answer is the one a new solve would give
SOLVED_CACHE_SIZE = 256
_solved: OrderedDict[bytes, Solved] = OrderedDict()


def forget_solved() -> None:
    """Forget the optima remembered (a benchmark times cold solves; a test wants HiGHS to run)."""
    _solved.clear()


def _program_key(c, integrality, bounds, constraints) -> bytes:
    """A digest of everything HiGHS reads (the options aside, which are always the same but for the time)."""
    h = hashlib.blake2b(digest_size=20)
    for a in (c, integrality, *bounds):
        h.update(np.ascontiguousarray(a, dtype=float).tobytes())
        h.update(b"|")
    for con in constraints:
        A = con.A
        parts = (A.data, A.indices, A.indptr, A.shape) if issparse(A) else (A, np.shape(A))
        for a in (*parts, con.lb, con.ub):
            h.update(np.ascontiguousarray(a, dtype=float).tobytes())
            h.update(b"|")
    return h.digest()


def _milp(c, share: float = 1.0, *, integrality, bounds, constraints, start: np.ndarray | None = None) -> Solved:
    """:func:`highs` with :data:`SOLVER_OPTIONS` and :data:`HIGHS_OPTIONS`, within ``share`` of the time
    left on the :class:`SolverClock` if one runs; a program solved to its proven optimum before in this
    process is answered from :data:`_solved`. ``start``: a feasible solution HiGHS starts from: the
    same optimum, proven sooner when the start is near it."""
    key = _program_key(c, integrality, bounds, constraints)
    found = _solved.get(key)
    if found is not None:
        _solved.move_to_end(key)
        return found
    options = {**SOLVER_OPTIONS, **HIGHS_OPTIONS}
    clock = _CLOCK.get()
    if clock is not None:
        options["time_limit"] = clock.left(share)
    begin = time.monotonic()
    try:
        res = highs(c, integrality=integrality, bounds=bounds, constraints=constraints, options=options, start=start)
    finally:
        if clock is not None:
            clock.used += time.monotonic() - begin
    if res.status == OPTIMAL_STATUS:  # a layout cut short by the time limit is not kept: more time may do better
        res.x.setflags(write=False)
        _solved[key] = res
        if len(_solved) > SOLVED_CACHE_SIZE:
            _solved.popitem(last=False)
    return res


def highs(c, *, integrality, bounds, constraints: list[Rows], options: dict, start: np.ndarray | None = None) -> Solved:
    """The least ``c`` x within ``bounds`` (lower, upper: numbers or arrays) and the ``constraints``,
    columns integer where ``integrality`` is 1, solved once by HiGHS through ``highspy``
    (:class:`~.highs_model.HighsModel`, one thread) from the feasible solution ``start`` if given.
    ``options``: HiGHS's by name (``time_limit`` in seconds). Where ``highspy`` is missing or HiGHS
    ends otherwise than it should, scipy's own HiGHS solves it (imported then only)."""
    A = vstack([con.A if issparse(con.A) else coo_matrix(np.atleast_2d(con.A)) for con in constraints]).tocsr()
    lo = np.concatenate([np.broadcast_to(np.asarray(con.lb, dtype=float), (con.A.shape[0],)) for con in constraints])
    hi = np.concatenate([np.broadcast_to(np.asarray(con.ub, dtype=float), (con.A.shape[0],)) for con in constraints])
    n = len(c)
    try:
        held = HighsModel(A, lo, hi, integrality, {k: v for k, v in options.items() if k != "time_limit"}, np.zeros(n))
    except ImportError:
        held = None
    if held is not None:
        got = held.solve(np.asarray(c, dtype=float), np.broadcast_to(np.asarray(bounds[0], dtype=float), (n,)),
                         np.broadcast_to(np.asarray(bounds[1], dtype=float), (n,)), start=start,
                         seconds=options.get("time_limit"))
        if got.status != FAILED:
            code = {OPTIMAL: OPTIMAL_STATUS, STOPPED: TIME_LIMIT_STATUS, INFEASIBLE: INFEASIBLE_STATUS}[got.status]
            x = got.x
            return Solved(code, x, None if x is None else float(np.dot(c, x)), got.gap)
    from scipy.optimize import LinearConstraint, milp  # noqa: PLC0415  (0.8 s to import: only here)

    with warnings.catch_warnings(), native_output_silenced():  # HiGHS may print to fd 1 from C++, past its display option
        warnings.filterwarnings("ignore", "Unrecognized options detected", RuntimeWarning)
        res = milp(c, options=options, integrality=integrality, bounds=bounds,
                   constraints=[LinearConstraint(con.A, con.lb, con.ub) for con in constraints])
    status = res.status if res.status in (OPTIMAL_STATUS, TIME_LIMIT_STATUS, INFEASIBLE_STATUS) else FAILED_STATUS
    return Solved(status, res.x, None if res.x is None else float(res.fun), getattr(res, "mip_gap", None))


def _whole_relaxation(c, share: float, *, integrality, bounds, constraints) -> Solved | None:
    """The optimum of the integer program from its linear relaxation, where the relaxation's optimal
    vertex is whole (every integer column 0 or 1): then no integer choice does better, and HiGHS
    need not search. None where it is not (the caller solves the integer program).

    Propagation's programs are built so that their relaxation is tight (:mod:`.program`); the least
    bytes of a stack's windows come out whole, at about half the time of the integer solve. For the
    bytes only the optimum's value matters to what follows (the tie-break program keeps it), not
    which of several optimal layouts the vertex is; for the tie-break the vertex is the layout."""
    lp = _milp(c, share, integrality=np.zeros_like(integrality), bounds=bounds, constraints=constraints)
    if lp.status != OPTIMAL_STATUS or lp.x is None:
        return None
    x = np.round(lp.x)
    if np.any(np.abs(lp.x - x) > WHOLE_TOLERANCE) or np.any(x[integrality == 1] < 0) or np.any(x[integrality == 1] > 1):
        return None
    lo, hi = bounds
    if np.any(x < lo) or np.any(x > hi):
        return None
    for con in constraints:  # the rounded vertex meets every row (whole coefficients: exactly)
        row = con.A @ x
        if np.any(row < np.asarray(con.lb) - WHOLE_TOLERANCE) or np.any(row > np.asarray(con.ub) + WHOLE_TOLERANCE):
            return None
    x.setflags(write=False)
    return Solved(OPTIMAL_STATUS, x, float(c @ x), 0.0)


WHOLE_TOLERANCE = 1e-9  # how far from 0 or 1 a relaxation's column may be and still count as whole


def _timed_out(step) -> bool:
    return step.status == TIME_LIMIT_STATUS


class Infeasible(Exception):
    """No choice of columns meets the rows (the hints contradict each other, or a budget cannot be met)."""


@dataclass(frozen=True)
class ProgramCost:
    """What the chosen columns of a program cost."""

    objective: Fraction  # bytes each worker sends summed over the sampled sizes (results counted as gathered)
    sent: Fraction  # bytes each worker sends at the size hints (results counted as gathered)
    held: Fraction  # bytes each worker holds at the size hints, summed over the values and their versions
    peak: tuple[Fraction, ...] = ()  # peak live activation bytes per worker at each ActivationLimit sample
    optimal: bool = True  # ``objective`` is the proven least of the program (no layout kept for its peak, no time limit)

    @property
    def total(self) -> Fraction:
        return self.objective + MEMORY_WEIGHT * self.held


def solve_program(model: Program, force: tuple[int, Placement] | None = None, *,
                  fixed: Mapping[int, Placement] | None = None, peak_limit: tuple[Fraction, ...] | None = None,
                  start: np.ndarray | None = None, near: Collection[int] | None = None) -> tuple[np.ndarray, ProgramCost]:
    """The optimum of ``model`` (with value ``force[0]`` produced in layout ``force[1]``): the columns
    chosen, and what they cost. Raises :class:`Infeasible` where no choice meets the rows.

    For auto-shard's explanations, one program serves every alternative: ``fixed`` (parameter slot
    id -> layout) fixes free parameters by their columns' bounds; ``peak_limit`` (bytes per sample)
    bounds the peak as given instead of relative to the program's own least peak (no least-peak
    program); ``start``: a feasible solution (:func:`start_of`) HiGHS starts the bytes from, the
    bytes' optimum starting the tie-break (the optima are the same, proven sooner); ``near``: the
    sites (``id(site)``) a change of the start may reach first: each aim is first solved with every
    other site's strategy fixed as in the start (a small program, solved in milliseconds; only for a
    program of ``LOCAL_COLUMNS`` or more), and its optimum is the start of the whole program
    (usually the whole program's optimum: HiGHS then only proves it)."""
    extra = []
    if force is not None:
        rid, p = force
        cols = model.prim.get(rid, {}).get(p, [])
        if cols is None:
            cols = []
        if not cols and p not in model.prim.get(rid, {}):
            raise Infeasible()
        if cols:
            extra.append(([(c, 1.0) for c in cols], 1, 1))
    costs, at_hint, total_cost = _compiled(model)[:3]
    if not costs:  # nothing to choose (every layout given): HiGHS needs a column, the answer is empty
        if any(a > 0 or b < 0 for _, a, b in model.rows + extra):
            raise Infeasible()
        return np.zeros(0), ProgramCost(Fraction(0), Fraction(0), Fraction(0))
    n = len(costs)
    constraints = [_rows(model, force)]
    for terms, a, b in extra:
        row = np.zeros((1, n))
        for c, v in terms:
            row[0, c] += v
        constraints.append(Rows(row, a, b))
    # every column is 0 or 1 (a strategy, a need, a redistribute, a recomputation): a fractional
    # recomputation or redistribute would let a later program cover a need in part
    integrality, lb, ub = np.ones(n, dtype=int), np.array(model.lb), np.array(model.ub)
    integrality[model.peak_cols] = 0
    _fix(model, lb, ub, fixed or {})
    least_x = None
    if model.peak_cols and peak_limit is not None:  # the limit given in bytes: no least-peak program
        model.peak_bound = list(peak_limit)
        _bound_peaks(model, ub)
    elif model.peak_cols:  # the least peak first: the activation limit is relative to it
        aim = np.zeros(n)
        aim[model.peak_cols] = 1.0
        step = _milp(aim, integrality=integrality, bounds=(lb, ub), constraints=constraints)
        if step.x is None:
            raise SolverTimeout() if _timed_out(step) else Infeasible()
        least_x = step.x
        limit = model.choice.activations
        least = model.peaks(least_x)
        model.peak_bound = [max(limit.bound(k, least[k], model.peak_scale[k]), least[k]) for k in range(len(least))]
        _bound_peaks(model, ub, least)
    local = (near, start) if near is not None and start is not None and n >= LOCAL_COLUMNS else None
    if start is not None and not _meets(start, lb, ub, constraints):
        start = None  # not a solution of this program (a start is a hint; the optimum is the same without)
    for _ in range(_PEAK_RETRIES):
        x = _lexicographic(model, costs, total_cost, integrality, (lb, ub), list(constraints), start, force, local)
        if model.peak_cols and any(p > b for p, b in zip(model.peaks(x), model.peak_bound)):
            # the solver's tolerance let a peak over its limit by a hair: a hair lower, and again (never below
            # the least peak found, which is within the limit exactly)
            _lower_peaks(model, ub, least_x)
            start = local = None
            continue
        break
    else:
        if least_x is None:
            raise Infeasible()
    optimal = _CLOCK.get() is None  # a program solved under a time limit may have been cut short
    if least_x is not None and any(p > b for p, b in zip(model.peaks(x), model.peak_bound)):
        x, optimal = least_x, False  # the solver's tolerance let a peak over its limit: the least peak is within it exactly
    return x, ProgramCost(_sum(costs, x), _sum(at_hint, x), _sum(model.mem, x), model.peaks(x), optimal)


@dataclass(frozen=True)
class Held:
    """A program held in HiGHS for auto-shard's explanations (:func:`solve_fixed`): the model, the bytes
    in whole units (and the unit), the columns of each site."""

    highs: HighsModel
    weights: np.ndarray
    unit: Fraction
    site_cols: dict[int, np.ndarray]
    A: object  # the rows, bounds and integrality as passed (scipy's HiGHS solves them where highspy fails)
    row_lo: np.ndarray
    row_hi: np.ndarray
    integrality: np.ndarray


def _held(model: Program) -> Held:
    """``model`` in HiGHS, passed once (auto-shard's explanations solve it once per alternative)."""
    if model.in_highs is None or model.in_highs[0] != len(model.rows):
        costs, _, total_cost, A, lo, hi = _compiled(model)
        weights, unit = _in_units(total_cost)
        integrality = np.ones(len(costs), dtype=int)
        integrality[model.peak_cols] = 0
        highs = HighsModel(A, lo, hi, integrality, {**SOLVER_OPTIONS, **HIGHS_OPTIONS}, weights)
        site_cols = {key: np.array([c for c, _ in cols], dtype=int) for key, cols in model.site_cols.items()}
        model.in_highs = (len(model.rows), Held(highs, weights, unit, site_cols, A, lo, hi, integrality))
    return model.in_highs[1]


#: the share of a whole unit by which HiGHS's bound may pass the true least of an integer objective
#: (its tolerances): a bound is rounded up to a whole unit only from this far below it
BOUND_TOLERANCE = 1e-6


def solve_fixed(model: Program, fixed: Mapping[int, Placement], peak_limit: tuple[Fraction, ...] | None = None, *,
                start: np.ndarray | None = None, near: Collection[int] | None = None, floor: Fraction | None = None,
                checks: int | None = None) -> tuple[np.ndarray, ProgramCost, Fraction]:
    """auto-shard's explanations: the optimum of ``model`` (built with every free parameter offered every
    layout) with the parameters laid out as ``fixed``, the peak bounded by ``peak_limit`` (bytes per
    sample), solved in HiGHS on the program passed once (:func:`_held`): the columns chosen, what they
    cost, and the least objective any layout can have (the cost's own when its optimum is proven).

    ``start``, ``near``: as :func:`solve_program`. ``floor``: an objective no layout of the program
    can beat, known beforehand (the chosen plan's, where the search chose among these layouts under
    the same limits): a start, or the first solve around it, that reaches it is the optimum, proven
    without HiGHS. ``checks``: the work each of the two programs (the bytes, then the tie-break among
    the layouts sending them) may take, in HiGHS's limit checks (:class:`HighsModel`); a bytes program
    stopped by it keeps the best layout found, and its bound is the least (rounded up to a whole unit
    of the bytes, which are whole in it); None: each is solved to its proof."""
    costs, at_hint, total_cost, A, lo, hi = _compiled(model)
    n = len(costs)
    if not n or (model.peak_cols and peak_limit is None):  # nothing to choose, or a limit still to find
        x, cost = solve_program(model, fixed=fixed, peak_limit=peak_limit)
        return x, cost, cost.objective
    held = _held(model)
    lb, ub = np.array(model.lb), np.array(model.ub)
    _fix(model, lb, ub, fixed)
    if model.peak_cols:
        model.peak_bound = list(peak_limit)
        _bound_peaks(model, ub)
    rows = [Rows(A, lo, hi)]
    if start is not None and not _meets(start, lb, ub, rows):
        start = None  # not a solution of this program (a start is a hint; the optimum is the same without)
    local = near if near is not None and start is not None and n >= LOCAL_COLUMNS else None
    for _ in range(_PEAK_RETRIES):
        x, least = _least_bytes(model, held, lb, ub, start, local, floor, checks)
        if not any(p > b for p, b in zip(model.peaks(x), model.peak_bound or ())):
            break
        _lower_peaks(model, ub)  # HiGHS's tolerance let a peak over its limit by a hair: a hair lower, and again
        start, local = None, None
    else:
        raise Infeasible()
    x = _tie_broken(model, held, lb, ub, x, least, local, checks)
    objective = _sum(costs, x)
    return x, ProgramCost(objective, _sum(at_hint, x), _sum(model.mem, x), model.peaks(x), least == objective), least


def _least_bytes(model: Program, held: Held, lb, ub, start, near, floor, checks) -> tuple[np.ndarray, Fraction]:
    """The bytes' program of :func:`solve_fixed`: the layout found, and the least objective proven."""
    total_cost = _compiled(model)[2]
    if start is not None and floor is not None and _sum(total_cost, start) == floor:
        return _snapped(start), floor
    if near is not None:
        start = _around_held(model, held, held.weights, lb, ub, math.inf, near, start, start)
        if floor is not None and _sum(total_cost, start) == floor:
            return start, floor
    got = _solve_held(held, held.weights, lb, ub, math.inf, start, checks)
    if got.x is None and got.status == STOPPED and checks is not None:  # stopped before any layout was found
        got = _solve_held(held, held.weights, lb, ub, math.inf, start, None)
    if got.x is None:
        raise SolverTimeout() if got.status == STOPPED else Infeasible()
    x = got.x
    found = _sum(total_cost, x)
    if got.status == OPTIMAL:
        return x, found
    units = math.ceil(got.bound - BOUND_TOLERANCE * max(1.0, abs(got.bound))) if math.isfinite(got.bound) else 0
    least = max(units * held.unit, floor or Fraction(0), Fraction(0))
    return x, min(least, found)


def _tie_broken(model: Program, held: Held, lb, ub, x: np.ndarray, least: Fraction, near, checks) -> np.ndarray:
    """The tie-break's program of :func:`solve_fixed`: among the layouts sending at most what ``x`` sends,
    the one the tie-break prefers (``x`` itself where none is found that keeps the bytes and the peak)."""
    if not any(model.tb):
        return x
    total_cost = _compiled(model)[2]
    weights = np.array(model.tb)
    sent = _sum(total_cost, x)
    met = float(held.weights @ (x > 0.5)) + 0.5  # a whole number of units: the row is exact up to 1/2
    start = _snapped(x)
    if near is not None:
        start = _around_held(model, held, weights, lb, ub, met, near, start, start)
    got = _solve_held(held, weights, lb, ub, met, start, checks)
    if got.x is None:
        return x
    kept = _sum(total_cost, got.x)
    # kept only if it sends no more exactly (fractions: HiGHS's tolerances are not exact on rows with
    # coefficients in the millions), sends the proven least where that is proven, and keeps the peak
    if kept > sent or (sent == least and kept != least):
        return x
    if any(p > b for p, b in zip(model.peaks(got.x), model.peak_bound or ())):
        return x
    return got.x


def _solve_held(held: Held, weights, lb, ub, spare_hi: float, start, checks) -> HighsSolve:
    """``weights`` x least on the program held in HiGHS; where HiGHS ends otherwise than it should (an
    error: say another user of highspy in the process started its threads otherwise), scipy's HiGHS
    solves it from scratch, to the proof."""
    clock = _CLOCK.get()
    begin = time.monotonic()
    try:
        got = held.highs.solve(weights, lb, ub, spare_hi, start, checks, clock.left() if clock is not None else None)
        if got.status != FAILED:
            return got
        constraints = [Rows(held.A, held.row_lo, held.row_hi)]
        if math.isfinite(spare_hi):
            constraints.append(Rows(held.weights.reshape(1, -1), -np.inf, spare_hi))
        res = _milp(weights, integrality=held.integrality, bounds=(lb, ub), constraints=constraints)
        status = OPTIMAL if res.status == OPTIMAL_STATUS else INFEASIBLE if res.status == INFEASIBLE_STATUS else STOPPED
        return HighsSolve(status, res.x, float(res.fun) if status == OPTIMAL else -math.inf)
    finally:
        if clock is not None:
            clock.used += time.monotonic() - begin


def _around_held(model: Program, held: Held, weights, lb, ub, spare_hi: float, near: Collection[int],
                 basis: np.ndarray, start: np.ndarray | None) -> np.ndarray | None:
    """:func:`_around` on the program held in HiGHS: the optimum of ``weights`` with every site but
    those in ``near`` running the strategy it runs in ``basis`` (else ``start``, unchanged)."""
    lb, ub = lb.copy(), ub.copy()
    for key, cols in held.site_cols.items():
        if key not in near:
            lb[cols] = ub[cols] = (basis[cols] > 0.5).astype(float)
    if start is not None and not _meets(start, lb, ub, []):
        start = None
    got = _solve_held(held, weights, lb, ub, spare_hi, start, None)
    return start if got.x is None else _snapped(got.x)


def _fix(model: Program, lb: np.ndarray, ub: np.ndarray, fixed: Mapping[int, Placement]) -> None:
    """Free parameters laid out as ``fixed`` (slot id -> layout) by their columns' bounds."""
    for sid, p in fixed.items():
        if sid not in model.param_cols:
            continue  # not a column of this program (not on the mesh, or not read in this window)
        cols = {q: c for c, q in model.param_cols[sid]}
        if p not in cols:
            raise Infeasible()
        for q, c in cols.items():
            lb[c] = ub[c] = float(q == p)


_PEAK_RETRIES = 4  # re-solves with the peak's bound a hair lower when HiGHS's tolerance passed it
#: a first solve around the start only for programs of at least this many columns: a smaller one is
#: solved whole in tens of milliseconds, as fast as around the start (auto-shard --explain's CPU time:
#: the attention block, 530 columns, 0.82 s without, 1.26 s with; the GPT-2 block, 957, 15.0 s
#: without, 12.6 s with)
LOCAL_COLUMNS = 800


def _compiled(model: Program):
    """The program's costs and rows as HiGHS reads them, made once per program (auto-shard's
    explanations solve one program per alternative layout)."""
    if model.compiled is not None and model.compiled[0] == len(model.rows):
        return model.compiled[1]
    costs, at_hint = list(model.c), list(model.c_hint)
    for sid, p, c, h in model.result_costs:
        for col in model.prim[sid][p] or []:
            costs[col] += c
            at_hint[col] += h
    total_cost = [c + MEMORY_WEIGHT * m for c, m in zip(costs, model.mem)] if MEMORY_WEIGHT else costs
    data, ci, starts, lo, hi = [], [], [0], [], []
    for terms, a, b in model.rows:  # row by row: the matrix in compressed rows directly (half the time of COO's)
        for c, v in terms:
            ci.append(c)
            data.append(v)
        starts.append(len(ci))
        lo.append(a)
        hi.append(b)
    A = csr_matrix((np.array(data, dtype=float), np.array(ci, dtype=np.int64), np.array(starts, dtype=np.int64)),
                   shape=(len(model.rows), len(costs)))
    A.sum_duplicates()  # a column twice in a row is one coefficient, as COO's conversion made it
    model.compiled = (len(model.rows), (costs, at_hint, total_cost, A, np.array(lo, dtype=float), np.array(hi, dtype=float)))
    return model.compiled[1]


def _rows(model: Program, force: tuple[int, Placement] | None = None) -> Rows:
    """The program's rows, those of :meth:`Program.used_primary_rows` for the value ``force`` lays out
    lifted (the layout forced may be one nobody reads)."""
    A, lo, hi = _compiled(model)[3:]
    if force is not None and force[0] in model.used_rows:
        hi = hi.copy()
        hi[model.used_rows[force[0]]] = np.inf
    return Rows(A, lo, hi)


def _lower_peaks(model: Program, ub: np.ndarray, least_x: np.ndarray | None = None) -> None:
    """The peaks' bounds a hair lower (HiGHS's tolerance let a peak over its limit), never below the least peak."""
    floor = model.peaks(least_x) if least_x is not None else None
    for k, col in enumerate(model.peak_cols):
        ub[col] = max(ub[col] - 1e-6, float(floor[k] / model.peak_scale[k])) if floor is not None else ub[col] - 1e-6


def _bound_peaks(model: Program, ub: np.ndarray, least: tuple[Fraction, ...] | None = None) -> None:
    """The peaks bounded at their limits exactly (never below the least peak found): a layout at the limit is
    within it for HiGHS of every version (a hair below, one version takes it at its tolerance and another
    not); one HiGHS lets over it by its tolerance is solved again a hair lower (:func:`_lower_peaks`)."""
    for k, col in enumerate(model.peak_cols):
        ub[col] = float(model.peak_bound[k] / model.peak_scale[k])
        if least is not None:
            ub[col] = max(ub[col], float(least[k] / model.peak_scale[k]))


def _meets(x: np.ndarray, lb: np.ndarray, ub: np.ndarray, constraints) -> bool:
    """Whether ``x`` is within the bounds and rows (HiGHS's feasibility tolerance)."""
    tol = 1e-7
    if len(x) != len(lb) or np.any(x < lb - tol) or np.any(x > ub + tol):
        return False
    return all(np.all(con.A @ x >= np.asarray(con.lb) - tol) and np.all(con.A @ x <= np.asarray(con.ub) + tol)
               for con in constraints)


def _lexicographic(model: Program, costs, total_cost, integrality, bounds, constraints, start,
                   force: tuple[int, Placement] | None, local: tuple[Collection[int], np.ndarray] | None = None
                   ) -> np.ndarray:
    """The least bytes, then the tie-break among them (see :func:`solve_program`); without ``force``, a
    time limit's gap is told to the :class:`SolverClock`; ``local``: (``near``, the start given,
    perhaps not a solution) for a first solve of each aim around the start.

    Propagation's programs get the rows of :meth:`Program.used_primary_rows` only where their
    relaxation is not whole without them: the rows made a GPT-2 block's first window whole, but cost
    a stack's windows, whole already, a fifth more of HiGHS's time for their tie-break."""
    tell_clock = force is None
    # lexicographic, one program per aim, each keeping the optimum of the one before: the least
    # bytes (results counted as gathered), then the tie-break. One objective with the tie-break
    # scaled below a byte would ask HiGHS to tell apart values below its tolerance once the bytes
    # run into millions (ties then broken arbitrarily), and is slower to prove optimal than the
    # two programs together
    res, clock = None, _CLOCK.get()
    kept: list[tuple[list[Fraction], Fraction]] = []  # the byte aims met so far, and their optima
    exact_bytes = None  # the bytes' row at their optimum, without the half unit of HiGHS's tolerance
    for k, aim in enumerate((total_cost, model.tb)):
        if k and not any(aim):
            continue
        tie_break = aim is model.tb
        weights = np.array(aim) if tie_break else _units(aim)
        # the bytes may take 2/3 of the time left, so that a layout found late still has its ties broken
        share = 1.0 if tie_break or not any(model.tb) else BYTES_SHARE
        if local is not None:
            basis = start if start is not None else local[1]
            start = _around(model, weights, integrality, bounds, constraints, local[0], basis, start)
        step = None
        if not tie_break and model.choice is None:  # propagation's programs: a tight relaxation
            relax = clock is None or clock.relaxations_whole
            if relax:
                step = _whole_relaxation(weights, share, integrality=integrality, bounds=bounds, constraints=constraints)
            if step is None and model.add_used_primary_rows():
                constraints[0] = _rows(model, force)
                if relax:
                    step = _whole_relaxation(weights, share, integrality=integrality, bounds=bounds,
                                             constraints=constraints)
            if step is None and clock is not None:
                clock.relaxations_whole = False
        elif tie_break and model.choice is None and exact_bytes is not None and (clock is None or clock.relaxations_whole):
            # the tie-break's relaxation with the bytes at their optimum exactly: where its vertex is whole,
            # it is the tie-break's optimum (the integer program's bytes row, up to half a unit, admits the
            # same whole choices); with the half unit, the relaxation trades it for a fractional tie-break
            step = _whole_relaxation(weights, share, integrality=integrality, bounds=bounds,
                                     constraints=[*constraints[:-1], exact_bytes])
        if step is None:
            step = _milp(weights, share, integrality=integrality, bounds=bounds, constraints=constraints, start=start)
        if res is None and step.x is None:
            raise SolverTimeout() if _timed_out(step) else Infeasible()
        if _timed_out(step) and tell_clock:  # the best found is kept; the caller is told how far off it may be
            if tie_break:
                clock.ties_unsettled = True
            else:
                clock.gap = max(clock.gap or 0.0, float(step.mip_gap or 0.0))
        # a later program's answer is kept only if it meets the optima before exactly (checked in
        # fractions: the rows hold coefficients in the millions, where HiGHS's tolerances are not exact)
        if step.x is None or any(_sum(values, step.x) != least for values, least in kept):
            break
        res = step
        if not tie_break:
            kept.append((aim, _sum(aim, res.x)))
            met = float(weights @ (res.x > 0.5))  # a whole number of units: the row is exact up to 1/2
            constraints.append(Rows(weights.reshape(1, -1), -np.inf, met + 0.5))
            exact_bytes = Rows(weights.reshape(1, -1), -np.inf, met)
            if start is not None:
                start = _snapped(res.x)  # the bytes' optimum: a solution of the tie-break's program
    return res.x


def _around(model: Program, weights, integrality, bounds, constraints, near: Collection[int], basis: np.ndarray,
            start: np.ndarray | None) -> np.ndarray | None:
    """The optimum of ``weights`` with every site but those in ``near`` running the strategy it runs
    in ``basis``, as a start for the whole program (else ``start``, unchanged)."""
    lb, ub = bounds[0].copy(), bounds[1].copy()
    for site in model.g.sites:
        if id(site) not in near:
            for c, _ in model.site_cols.get(id(site), []):
                lb[c] = ub[c] = float(basis[c] > 0.5)
    step = _milp(weights, integrality=integrality, bounds=(lb, ub), constraints=constraints,
                 start=start if start is not None and _meets(start, lb, ub, []) else None)
    return start if step.x is None else _snapped(step.x)


def _snapped(x: np.ndarray) -> np.ndarray:
    """``x`` with its 0/1 columns exactly 0 or 1 (a start given to HiGHS)."""
    y = np.array(x, dtype=float)
    near = np.abs(y - np.round(y)) < 1e-6
    y[near] = np.round(y[near])
    return y


def _sum(values: list[Fraction], x: np.ndarray) -> Fraction:
    """The exact sum of ``values`` over the columns ``x`` chooses."""
    return sum((values[i] for i in np.flatnonzero(x > 0.5)), Fraction(0))


def _units(values: list[Fraction]) -> np.ndarray:
    """``values`` in units of their greatest common divisor (the gcd of the numerators over the lcm of
    the denominators): whole numbers, as floats."""
    return _in_units(values)[0]


def _in_units(values: list[Fraction]) -> tuple[np.ndarray, Fraction]:
    """``values`` in whole units (:func:`_units`), and the unit."""
    exact = [v if isinstance(v, (int, Fraction)) else Fraction(v) for v in values]
    nums = [v.numerator for v in exact]
    dens = [v.denominator for v in exact]
    top = math.gcd(*nums) or 1
    bottom = math.lcm(*set(dens)) if dens else 1
    scale = {d: bottom // d for d in set(dens)}  # few denominators: each column one multiplication
    return np.array([float(n * scale[d] // top) for n, d in zip(nums, dens)]), Fraction(top, bottom)


def plan_of(model: Program, x: np.ndarray, total: Fraction) -> LayoutPlan:
    strategy, primary, recompute = {}, {}, {}
    for site in model.g.sites:
        cols = model.site_cols.get(id(site))
        if cols is None:
            continue
        st = max(cols, key=lambda cs: x[cs[0]])[1]
        strategy[id(site)] = st
        for s, p in zip(site.outs, st.outs):
            primary[s.id] = p
    for sid, cols in model.param_cols.items():
        primary[sid] = max(cols, key=lambda cq: x[cq[0]])[1]
    for sid, by in model.prim.items():
        for p, cols in by.items():
            if cols is None:
                primary.setdefault(sid, p)
    for r, rid, q, st in model.r_cols:
        if x[r] > 0.5:
            recompute[(rid, q)] = st
    candidates = {sid: [q for _, q in cols] for sid, cols in model.param_cols.items()}
    return LayoutPlan(strategy, primary, recompute, dict(model.root), total.sent, total.held, total.objective,
                      candidates, total.peak, optimal=total.optimal)


def objective_of(model: Program, x: np.ndarray) -> Fraction:
    """What the columns ``x`` chooses cost in ``model``'s objective (bytes summed over the samples)."""
    return _sum(_compiled(model)[2], x)


def objective_per_byte(model: Program) -> Fraction | None:
    """The objective of every column over the bytes it sends at the size hints, where that is one
    number (every size given: the samples weigh one point; and bytes, not time); else None."""
    costs, at_hint = _compiled(model)[:2]
    ratios = {c / h for c, h in zip(costs, at_hint) if h}
    if len(ratios) != 1 or any(bool(c) != bool(h) for c, h in zip(costs, at_hint)):
        return None
    return next(iter(ratios))


def start_of(model: Program, plan: LayoutPlan) -> np.ndarray | None:
    """``plan`` as columns of ``model`` (the inverse of :func:`plan_of`): its strategies, parameter
    layouts and recomputations; each layout an op reads made by them or redistributed from the
    value's primary; the peak columns at the peak it holds. None where ``model`` has no column for
    something the plan does (another program's plan). Not checked against the rows: a start HiGHS
    is given is checked (:func:`solve_program`)."""
    x = np.zeros(len(model.c))
    read: set[tuple[int, Placement]] = set()

    def reads(ins, st) -> None:
        for s, q in zip(ins, st.ins):
            if model.distributed(s):
                read.add((model.rid(s), q))

    for site in model.g.sites:
        cols = model.site_cols.get(id(site))
        if cols is None:
            continue
        st = plan.strategy.get(id(site))
        col = next((c for c, t in cols if t == st), None)
        if col is None:
            return None
        x[col] = 1.0
        reads(site.ins, st)
    for sid, cols in model.param_cols.items():
        col = next((c for c, q in cols if q == plan.primary.get(sid)), None)
        if col is None:
            return None
        x[col] = 1.0
    made: set[tuple[int, Placement]] = set()
    for r, rid, q, st in model.r_cols:
        if plan.recompute.get((rid, q)) == st:
            x[r] = 1.0
            made.add((rid, q))
            reads(next(site for site in model.g.sites if any(o.id == rid for o in site.outs)).ins, st)
    read.update(model.forced)
    moves: dict[tuple[int, Placement], list[tuple[Placement, int]]] = {}
    for z, rid, p, q in model.z_cols:
        moves.setdefault((rid, q), []).append((p, z))
    for rid, q in read:
        by = model.need.get(rid, {})
        if q not in by:
            return None
        x[by[q]] = 1.0
        prim = model.prim.get(rid)
        if prim is None or (rid, q) in made or (q in prim and (prim[q] is None or any(x[c] > 0.5 for c in prim[q]))):
            continue  # a plain value (any layout a local slice), recomputed, or made (or given) in that layout
        # from the layout it is made in, or the cheapest of those it is given in
        sources = [(model.c[z], z) for p, z in moves.get((rid, q), [])
                   if prim[p] is None or any(x[c] > 0.5 for c in prim[p])]
        if not sources:
            return None
        x[min(sources)[1]] = 1.0
    peaks = model.peaks(x)
    for k, col in enumerate(model.peak_cols):
        x[col] = float(peaks[k] / model.peak_scale[k])
    return x


def alternative_cost(model: Program, rid: int, p: Placement) -> ProgramCost | None:
    """The optimum with value ``rid`` produced in layout ``p`` (None: no such layout is possible)."""
    found = alternative(model, rid, p)
    return None if found is None else found[1]


def alternative(model: Program, rid: int, p: Placement) -> tuple[LayoutPlan, ProgramCost] | None:
    """The optimal plan with value ``rid`` produced in layout ``p``, and its cost (None: impossible)."""
    try:
        x, total = solve_program(model, force=(rid, p))
    except Infeasible:
        return None
    return plan_of(model, x, total), total


def visible_layouts(model: Program, plan: LayoutPlan) -> dict[int, Placement]:
    """The layouts a caller sees in ``plan``: of the parameters the model chose, and of the results."""
    seen = {sid: plan.primary[sid] for sid in model.param_cols if sid in plan.primary}
    for s in result_slots(model.g) if model.window is None or model.window.last else ():
        rid = plan.root_of(s)
        if rid in plan.primary:
            seen[rid] = plan.primary[rid]
    return seen
