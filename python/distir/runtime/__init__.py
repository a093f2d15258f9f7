"""Running distir modules with numpy: ``run`` interprets the global view (the ground truth).

``run_spmd`` (the SPMD simulator, in :mod:`distir.runtime.spmd`) is exported here too
once it exists.
"""

from .. import ops  # noqa: F401  (declares every op and step kind)
from .interpreter import Plan, RunContext, RunError, bind_params, compile_function, run

__all__ = ["Plan", "RunContext", "RunError", "bind_params", "compile_function", "run"]

try:  # the SPMD simulator lives in its own module, written separately
    from .spmd import run_spmd  # noqa: F401

    __all__.append("run_spmd")
except ImportError:  # pragma: no cover - until spmd.py exists
    pass
