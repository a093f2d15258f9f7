"""Named pipelines: ``distribute_pipeline()`` and ``-p distribute`` on the command line."""

from __future__ import annotations

from .pass_infra import Pass, Sequential, get_pass, list_passes, register_pipeline

__all__ = ["distribute_pipeline"]

_DISTRIBUTE = (
    "propagate-sharding",
    "legalize-redistribute",
    "canonicalize",
    "lower-global-view-to-local-view",
)


def distribute_pipeline() -> Pass:
    """Global view in, local view out, with ``num_workers`` still symbolic.

    Propagate shardings (when that pass is available), legalize every redistribute,
    clean up, and lower to what each worker runs. Specialize afterwards, once per
    device count.
    """
    known = list_passes()
    return Sequential([get_pass(n) for n in _DISTRIBUTE if n in known], name="distribute")


register_pipeline("distribute", distribute_pipeline)
