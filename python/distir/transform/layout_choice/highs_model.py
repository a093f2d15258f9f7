"""One integer program held in HiGHS (``highspy``) and solved many times: auto-shard's explanations
solve one program per alternative layout, each with other columns fixed. The model is passed to HiGHS
once; between solves only the costs, the columns' bounds and the bounds of one spare row (the
tie-break's limit on the bytes) change, so nothing is rebuilt per solve.

A solve may start from a feasible solution, and may be given a budget of work: a number of HiGHS's
limit checks (one per round of cuts at the root, one per node after it). It is counted, not timed,
so a budgeted solve stops at the same point on every machine and run, and says what it proved: the
best solution found and HiGHS's bound, below which no solution's objective lies."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix

from ...quiet import native_output_silenced

__all__ = ["HIGHS_THREADS", "HighsModel", "HighsSolve"]

OPTIMAL, STOPPED, INFEASIBLE, FAILED = "optimal", "stopped", "infeasible", "failed"
#: the threads of every highspy solve in distir: one (the same work on every machine, and on a busy one less
#: time lost waiting). HiGHS starts its threads once per process, for the count its first solve asks, and
#: refuses a solve that asks another: a solve refused so is :data:`FAILED` (its caller solves it otherwise)
HIGHS_THREADS = 1


@dataclass(frozen=True)
class HighsSolve:
    """What one solve gave: ``status`` (:data:`OPTIMAL`; :data:`STOPPED` by the budget or a time
    limit, ``x`` the best solution found if any; :data:`INFEASIBLE`; :data:`FAILED`: any other end),
    ``x`` and ``bound``: no solution's objective is below it (up to HiGHS's tolerance; -inf when
    nothing is known)."""

    status: str
    x: np.ndarray | None
    bound: float
    gap: float | None = None  # HiGHS's relative gap between ``x`` and ``bound`` (None: no solution found)


def _check(left: list[int | None], event) -> None:
    """HiGHS's limit check: one fewer left; past the budget, stop. Said at every check either way (HiGHS
    keeps the last answer from one solve to the next)."""
    if left[0] is not None:
        left[0] -= 1
    event.interrupt(left[0] is not None and left[0] < 0)


class HighsModel:
    """The program ``A`` x within [``row_lo``, ``row_hi``], columns integer where ``integrality`` is 1,
    and one spare row ``spare`` x <= the bound :meth:`solve` gives it (none: no limit). ``options``:
    HiGHS's options by name (``presolve`` as a bool, as scipy takes it)."""

    def __init__(self, A: csr_matrix, row_lo: np.ndarray, row_hi: np.ndarray, integrality: np.ndarray,
                 options: dict, spare: np.ndarray):
        import highspy  # on the first solve: 0.06 s to import, not paid by a run that solves nothing

        self._highspy = highspy
        n = A.shape[1]
        self.n, self.rows = n, A.shape[0]
        spare = np.asarray(spare, dtype=float)
        nz = np.flatnonzero(spare)
        start = np.concatenate([A.indptr, [A.indptr[-1] + len(nz)]]).astype(np.int32)
        index = np.concatenate([A.indices, nz]).astype(np.int32)
        value = np.concatenate([A.data, spare[nz]]).astype(float)
        with native_output_silenced():  # highspy prints its banner when a solver is made
            h = self._h = highspy.Highs()
            h.setOptionValue("output_flag", False)
            for name, v in {**options, "threads": HIGHS_THREADS}.items():
                h.setOptionValue(name, ("on" if v else "off") if name == "presolve" else v)
            h.passModel(n, self.rows + 1, len(value), int(highspy.MatrixFormat.kRowwise), int(highspy.ObjSense.kMinimize),
                        0.0, np.zeros(n), np.zeros(n), np.ones(n),
                        np.concatenate([row_lo, [-np.inf]]).astype(float), np.concatenate([row_hi, [np.inf]]).astype(float),
                        start, index, value, np.asarray(integrality, dtype=np.int32))
        self._cols = np.arange(n, dtype=np.int32)
        self._spare = np.array([self.rows], dtype=np.int32)
        # limit checks left to the solve running (None: no budget); the callback holds this list, not the
        # model (no reference cycle through HiGHS's callbacks: the model is freed when dropped)
        self._left: list[int | None] = [None]
        # subscribed only while solves are budgeted: Python runs its signal handlers (Ctrl-C, a timer) in a
        # callback, and HiGHS ends a solve whose callback raised with an error, the exception lost; without
        # one, the exception is raised when the solve returns
        self._check = functools.partial(_check, self._left)
        self._subscribed = False

    def solve(self, cost: np.ndarray, lb: np.ndarray, ub: np.ndarray, spare_hi: float = math.inf,
              start: np.ndarray | None = None, checks: int | None = None, seconds: float | None = None,
              presolve: bool | None = None) -> HighsSolve:
        """The least ``cost`` x within the bounds (and the spare row at most ``spare_hi``), from the
        feasible solution ``start`` if given, stopped after ``checks`` limit checks if given (or
        ``seconds``). Each solve starts afresh: nothing of the solve before is kept."""
        highspy, h = self._highspy, self._h
        h.clearSolver()
        h.changeColsCost(self.n, self._cols, np.asarray(cost, dtype=float))
        h.changeColsBounds(self.n, self._cols, np.asarray(lb, dtype=float), np.asarray(ub, dtype=float))
        h.changeRowsBounds(1, self._spare, np.array([-np.inf]), np.array([spare_hi], dtype=float))
        h.setOptionValue("time_limit", float(seconds) if seconds is not None else math.inf)
        if presolve is not None:
            h.setOptionValue("presolve", "on" if presolve else "off")
        if start is not None:
            h.setSolution(self.n, self._cols, np.asarray(start, dtype=float))
        if (checks is not None) != self._subscribed:
            (h.cbMipInterrupt.subscribe if checks is not None else h.cbMipInterrupt.unsubscribe)(self._check)
            self._subscribed = checks is not None
        self._left[0] = checks
        try:
            with native_output_silenced():  # HiGHS may print to fd 1 from C++, past its output flag
                h.run()
        finally:
            self._left[0] = None
        model_status = h.getModelStatus()
        info = h.getInfo()
        found = info.primal_solution_status == highspy.SolutionStatus.kSolutionStatusFeasible
        x = np.array(h.getSolution().col_value) if found else None
        statuses = highspy.HighsModelStatus
        gap = info.mip_gap if x is not None else None
        if model_status == statuses.kOptimal:
            return HighsSolve(OPTIMAL, x, info.mip_dual_bound, gap)
        if model_status == statuses.kInfeasible:
            return HighsSolve(INFEASIBLE, None, math.inf)
        if model_status in (statuses.kInterrupt, statuses.kHighsInterrupt, statuses.kTimeLimit, statuses.kIterationLimit,
                            statuses.kSolutionLimit):
            bound = info.mip_dual_bound
            return HighsSolve(STOPPED, x, bound if math.isfinite(bound) else -math.inf, gap)
        return HighsSolve(FAILED, x, -math.inf)
