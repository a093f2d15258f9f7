"""Per-worker cost of a distributed program as formulas in the mesh sizes.

- :func:`comm_volume`: bytes every collective moves (per kind, in total, per worker);
- :func:`memory_footprint`: per-worker parameter bytes and the peak of live intermediates;
- :class:`CommModel` / :func:`comm_time`: an alpha-beta time estimate of the collectives.

All read local-view modules (the output of ``distribute_pipeline()``), symbolic or
specialized: with ``num_workers`` symbolic the results are formulas, evaluated at any
count with ``.evaluate({"num_workers": 8})``; on a specialized module they are numbers.
See docs/analysis.md.
"""

from .. import ops  # noqa: F401  (declares every op and step kind)
from .comm import CollectiveCost, CommNumbers, CommVolume, collective_cost, comm_volume
from .errors import AnalysisError
from .formula import Maximum, Rational, evaluate, to_str
from .memory import MemoryFootprint, MemoryNumbers, memory_footprint
from .timing import CommModel, CommTime, comm_time, comm_time_formula

__all__ = [
    "AnalysisError",
    "CollectiveCost",
    "CommModel",
    "CommNumbers",
    "CommTime",
    "CommVolume",
    "Maximum",
    "MemoryFootprint",
    "MemoryNumbers",
    "Rational",
    "collective_cost",
    "comm_time",
    "comm_time_formula",
    "comm_volume",
    "evaluate",
    "memory_footprint",
    "to_str",
]
