"""Per-worker cost of a distributed program as formulas in the mesh sizes.

- :func:`comm_volume`: bytes every collective moves (per kind, in total, per worker);
- :func:`memory_footprint`: per-worker parameter bytes and the peak of live intermediates;
- :func:`memory_need` / :func:`memory_fit`: weights, KV cache and what TVM's planner allocates,
  and which device counts fit a device's memory (:func:`planned_memory` replays the planner);
- :class:`CommModel` / :func:`comm_time`: an alpha-beta time estimate of the collectives.

All read local-view modules (the output of ``distribute_pipeline()``), symbolic or
specialized: with ``num_workers`` symbolic the results are formulas, evaluated at any
count with ``.evaluate({"num_workers": 8})``; on a specialized module they are numbers.
See docs/analysis.md.
"""

from .. import ops  # noqa: F401  (declares every op and step kind)
from .comm import CollectiveCost, CommNumbers, CommVolume, collective_cost, comm_volume
from .errors import AnalysisError
from .fit import FitResult, MemoryNeed, WorkerMemory, memory_fit, memory_need, parse_bytes, worker_memory
from .formula import Maximum, Rational, evaluate, to_str
from .memory import MemoryFootprint, MemoryNumbers, memory_footprint
from .planning import PlannedMemory, planned_memory
from .timing import CommModel, CommTime, comm_time, comm_time_formula

__all__ = [
    "AnalysisError",
    "CollectiveCost",
    "CommModel",
    "CommNumbers",
    "CommTime",
    "CommVolume",
    "FitResult",
    "Maximum",
    "MemoryFootprint",
    "MemoryNeed",
    "MemoryNumbers",
    "PlannedMemory",
    "Rational",
    "WorkerMemory",
    "collective_cost",
    "comm_time",
    "comm_time_formula",
    "comm_volume",
    "evaluate",
    "memory_fit",
    "memory_footprint",
    "memory_need",
    "parse_bytes",
    "planned_memory",
    "to_str",
    "worker_memory",
]
