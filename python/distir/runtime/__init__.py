"""Running distir modules with numpy: ``run`` interprets the global view (the ground truth),
``run_spmd`` simulates the workers of a specialized local-view module with the same
compiled plan (:mod:`distir.runtime.spmd`)."""

from .. import ops  # noqa: F401  (declares every op and step kind)
from .interpreter import Plan, RunContext, RunError, bind_params, compile_function, run
from .spmd import SpmdError, SpmdStats, run_spmd

__all__ = ["Plan", "RunContext", "RunError", "SpmdError", "SpmdStats", "bind_params", "compile_function", "run", "run_spmd"]
