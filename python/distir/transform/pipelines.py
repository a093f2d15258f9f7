"""Named pipelines: ``distribute_pipeline()`` and ``-p distribute`` on the command line."""

from __future__ import annotations

from .pass_infra import Pass, Sequential, get_pass, register_pipeline

__all__ = ["distribute_pipeline"]

_DISTRIBUTE = (
    "propagate-sharding",
    "legalize-redistribute",
    "canonicalize",
    "lower-global-view-to-local-view",
)


def distribute_pipeline() -> Pass:
    """Global view in, local view out, with ``num_workers`` still symbolic.

    Propagate shardings from hints and parameter layouts, legalize every redistribute,
    clean up, and lower to what each worker runs. Specialize afterwards, once per
    device count.
    """
    return Sequential([get_pass(n) for n in _DISTRIBUTE], name="distribute")


register_pipeline("distribute", distribute_pipeline)
