"""distir and Apache TVM: export to Relax, build, run on Disco, import TVM's DistIR.

- :func:`to_relax`: a local-view module as a real ``tvm.IRModule`` of standard Relax ops,
  collectives as calls to Disco's runtime functions (``runtime.disco.*``), ``num_workers``
  symbolic until ``relax.transform.BindSymbolicVars`` specializes it;
- :func:`specialize_and_build`: bind sizes and ``tvm.compile`` for a target (``llvm``, ``cuda``);
- :func:`run_pieces` (in :mod:`distir.tvm.disco.run`): run a build on Disco, worker threads or
  worker processes, on every worker's piece of the inputs (:func:`distir.driver.run_disco`
  runs it from and to global arrays);
- :func:`load_artifact` / :func:`write_artifact` (in :mod:`distir.tvm.artifact`): one build for
  every count, written to a folder (the library and a manifest) and run later without
  ``tvm.compile``; :mod:`distir.tvm.build_cache` builds each export once per process;
- :func:`from_relax`: a TVM Relax module using ``R.dist`` as a distir module;
- :func:`from_nn`: a ``tvm.relax.frontend.nn`` model as a distir module, weights named;
- :func:`shard_weights` / :func:`reshard_weights`: each worker's blocks of a model's weights in
  TVM's tensor-cache format, which Disco's ``ShardLoader`` loads inside each worker.

Submodules load on first use, so that a Disco worker process (:mod:`distir.tvm.disco.worker`) imports
only the collectives. See docs/tvm.md.
"""

from __future__ import annotations

import importlib

from .errors import ArtifactError, DiscoRunError, TvmExportError, TvmImportError

__all__ = [
    "DISCO_LAYOUT_FUNC",
    "ArtifactError",
    "DiscoRunError",
    "TvmExportError",
    "TvmImportError",
    "from_nn",
    "from_relax",
    "load_artifact",
    "reshard_weights",
    "shard_weights",
    "specialize_and_build",
    "to_relax",
    "write_artifact",
]

_LAZY = {
    "DISCO_LAYOUT_FUNC": "convention",
    "to_relax": "relax.export",
    "specialize_and_build": "disco.run",
    "from_relax": "frontend.importer",
    "from_nn": "frontend.nn",
    "shard_weights": "weights",
    "reshard_weights": "weights",
    "load_artifact": "artifact",
    "write_artifact": "artifact",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    try:
        return importlib.import_module(f".{name}", __name__)  # a submodule: distir.tvm.weights
    except ModuleNotFoundError:
        raise AttributeError(f"module 'distir.tvm' has no attribute '{name}'") from None
