"""The entry point of a Disco worker process started by distir: ``python -m distir.tvm.disco.worker``.

TVM's own entry point (``tvm.exec.disco_worker``) serves Disco with the functions TVM
registers; a worker of a distir session also needs distir's collectives (Disco's builtins look
up ``runtime.disco..allreduce`` and the rest in the worker's own process) and distir's session
functions (``distir.session.connect``, ``report``, ``disconnect``). This registers them, then
serves Disco until the session ends. Arguments (as TVM's pool passes them): worker id,
number of workers, number of groups, the file descriptors to read commands from and to write
replies to. A failure is one line on stderr (the caller reports it) and exit status 1.
"""

from __future__ import annotations

import sys


def _load_runtime() -> None:
    """TVM's runtime alone (a worker runs built modules; it compiles nothing): ``import tvm`` without
    the compiler library (TVM_USE_RUNTIME_LIB=1, half the start-up time), then the runtime libraries
    that ``import tvm`` loads for their registrations: Disco's (``libtvm_runtime_extra``) and, where
    it loads (a CUDA driver), ``libtvm_runtime_cuda``."""
    import os
    from pathlib import Path

    os.environ.setdefault("TVM_USE_RUNTIME_LIB", "1")
    import tvm  # noqa: F401
    from tvm.base import _LOADED_LIBS
    from tvm_ffi.libinfo import load_lib_ctypes

    here = Path(_LOADED_LIBS["tvm_runtime"]._name).resolve().parent
    for name in ("tvm_runtime_extra", "tvm_runtime_cuda"):
        if name not in _LOADED_LIBS:
            try:
                _LOADED_LIBS[name] = load_lib_ctypes(package="tvm", target_name=name, extra_lib_paths=[here],
                                                     mode="RTLD_LOCAL")
            except (OSError, FileNotFoundError, RuntimeError):
                pass  # no CUDA driver: a CPU worker


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print("usage: python -m distir.tvm.disco.worker WORKER NUM_WORKERS NUM_GROUPS READ_FD WRITE_FD", file=sys.stderr)
        return 2
    worker, num_workers, num_groups, read_fd, write_fd = (int(a) for a in argv)
    _load_runtime()
    import tvm_ffi

    from ..ranges import register as register_ranges
    from .host_ccl import register

    register()
    register_ranges()  # a global set's byte ranges, read by each worker (distir.tvm.ranges)
    serve = tvm_ffi.get_global_func("runtime.disco.WorkerProcess")
    try:
        serve(worker, num_workers, num_groups, read_fd, write_fd)
    except (OSError, KeyboardInterrupt):
        return 0  # the caller went away
    except Exception as err:  # noqa: BLE001 - reported as one line, read by the caller
        lines = [ln for ln in str(err).splitlines() if ln.strip()]
        print(f"distir worker {worker}: {type(err).__name__}: {lines[-1] if lines else err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
