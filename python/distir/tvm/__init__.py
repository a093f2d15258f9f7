"""distir and Apache TVM: export to Relax, build, run on Disco, import TVM's DistIR.

- :func:`to_relax`: a local-view module as a real ``tvm.IRModule`` of standard Relax ops,
  collectives as calls to Disco's runtime functions, ``num_workers`` symbolic until
  ``relax.transform.BindSymbolicVars`` specializes it;
- :func:`run_pieces` (in :mod:`distir.tvm.disco`): run what ``tvm.compile`` built on a
  Disco ``ThreadedSession`` with the project's CPU collectives, on every worker's piece of
  the inputs (:func:`distir.driver.run_disco` runs it from and to global arrays);
- :func:`from_relax`: a TVM Relax module using ``R.dist`` as a distir module;
- :func:`from_nn`: a ``tvm.relax.frontend.nn`` model as a distir module, weights named;
  :func:`shard_weights`: each worker's blocks of a model's weights, one ``.npz`` per worker.

See docs/tvm.md.
"""

from __future__ import annotations

from .. import (
    ops,  # noqa: F401  (declares every op and step kind)
    script,  # noqa: F401  (the text format, so that imported modules print)
)
from .errors import DiscoRunError, TvmExportError, TvmImportError
from .export import DISCO_LAYOUT_FUNC, to_relax

__all__ = [
    "DISCO_LAYOUT_FUNC",
    "DiscoRunError",
    "TvmExportError",
    "TvmImportError",
    "from_nn",
    "from_relax",
    "shard_weights",
    "specialize_and_build",
    "to_relax",
]


def __getattr__(name: str):
    if name == "specialize_and_build":
        from . import disco

        return getattr(disco, name)
    if name == "from_relax":
        from .importer import from_relax

        return from_relax
    if name in ("from_nn", "shard_weights"):
        from . import frontend

        return getattr(frontend, name)
    raise AttributeError(f"module 'distir.tvm' has no attribute '{name}'")
