"""A fault injected in the middle of a Disco run, from worker 0's first all-reduce (shared by the
tests of worker processes that fail)."""

from __future__ import annotations

import contextlib

import tvm_ffi

from distir.tvm.disco import host_ccl


@contextlib.contextmanager
def hook_allreduce(action):
    """Worker 0's first all-reduce (a thread of this process, or every worker thread of a thread
    session) runs ``action`` first. Once only, and never raising there: an exception in a Disco worker
    thread aborts the process. (Run at every all-reduce, ``os.kill`` of a worker that the caller had
    already reaped raised ProcessLookupError inside worker 0: the abort the killed-worker tests met
    on a loaded machine.) An exception of ``action`` is raised here, when the block ends."""
    allreduce = host_ccl._FUNCS["allreduce"]
    ran, failed = [], []

    def hooked(*a):
        if not ran:
            ran.append(True)
            try:
                action()
            except Exception as err:  # noqa: BLE001 - handed to the test's thread below
                failed.append(err)
        return allreduce(*a)

    tvm_ffi.register_global_func("runtime.disco..allreduce", hooked, override=True)
    try:
        yield
    finally:
        tvm_ffi.register_global_func("runtime.disco..allreduce", allreduce, override=True)
    if failed:
        raise failed[0]
