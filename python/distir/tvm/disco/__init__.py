"""Running an exported module on TVM's Disco runtime.

- ``run``: build an export (:func:`specialize_and_build`) and run it on every worker's pieces
  (:func:`run_pieces`), on a session of worker threads or worker processes;
- ``workers``: Disco sessions, worker processes started by distir's pool and kept per size;
- ``nodes``: a session over several machines (TVM's SocketSession, the controller's side), over
- ``relay``: TVM's connections to the other nodes, made safe against a node that dies;
- ``worker``: the worker processes' entry point (``python -m distir.tvm.disco.worker``);
- ``node``: the other nodes' entry point (``python -m distir.tvm.disco.node``);
- ``host_ccl``: Disco's collectives without NCCL, through host memory, over
- ``transport``: channels between workers (queues for threads, Unix sockets for processes, TCP
  between nodes).

``run``'s names are attributes of this package, loaded on first use: a worker process imports
this package on its way to ``worker``, and must load only the collectives (not the compiler).
"""

from __future__ import annotations

import importlib

__all__ = ["Presharded", "check_dtypes", "library_dir", "run_pieces", "shared_library", "specialize_and_build", "symbolic_var_names"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module(".run", __name__), name)
    raise AttributeError(f"module 'distir.tvm.disco' has no attribute '{name}'")
