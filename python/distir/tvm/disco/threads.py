"""A Disco ``ThreadedSession`` whose every wait is bounded, as a process session's are.

The caller's calls into a ThreadedSession (placing the inputs, a sync, reading an output back,
the shutdown) wait for the worker threads, and a worker thread can wait forever: a kernel that
never returns, NCCL waiting for a peer that failed. So each call runs TVM's blocking call on a
helper thread and the caller waits at most the bound (``DISTIR_WORKER_TIMEOUT``,
:func:`distir.tvm.disco.workers.worker_timeout`); distir's host collectives give up a little
before that (:func:`~distir.tvm.disco.workers.collective_timeout`), so a worker that waited for
another says so. A thread cannot be killed: a session the caller gave up on is failed (its
collectives return at once), kept alive for the process's life (its destructor would join a
thread that may never return) and never used again; its worker threads keep the hub they
served (:mod:`distir.tvm.disco.host_ccl`), so one that wakes later cannot touch the next run. A
session shut down is retired (:mod:`distir.tvm.disco.lifetime`): destroyed on a helper thread of the
caller's once nothing else holds it, never on one of its own worker threads.
"""

from __future__ import annotations

import contextlib
import ctypes

from ..errors import DiscoRunError
from . import lifetime
from .transport import ThreadHub
from .workers import TIMEOUT_ENV, start_call

__all__ = ["ThreadWorkers"]

_ABANDONED: list = []  # sessions given up on: never destroyed (see the module docstring)


class ThreadWorkers:
    """``disco.ThreadedSession(total, groups)``, its calls bounded by ``bound`` seconds; ``hub``: the
    host collectives it runs on (None with NCCL)."""

    def __init__(self, disco, total: int, groups: int, bound: float, hub: ThreadHub | None = None):
        self.sess = disco.ThreadedSession(total, groups)
        self.bound, self.hub = bound, hub

    def call(self, action, what: str):
        """``action()`` (which waits for the worker threads), bounded; a DiscoRunError naming ``what``
        and what the collectives recorded if it does not finish within the bound."""
        if self.sess is None:
            raise DiscoRunError("this Disco thread session was given up on; a new run starts a new one")
        _, done, out = start_call(action, "distir-disco-thread-call")
        if not done.wait(self.bound):
            seen = list(dict.fromkeys(self.hub.failures)) if self.hub is not None else []
            self.abandon()
            also = f"; the collectives saw: {'; '.join(seen)}" if seen else ""
            raise DiscoRunError(f"a Disco worker thread did not answer: {what} did not finish within {self.bound:g} s "
                                f"(the bound {TIMEOUT_ENV} sets){also}")
        if "error" in out:
            raise out.pop("error")
        return out.pop("value", None)

    def abandon(self) -> None:
        """Give the session up: fail its collectives, keep it (and its threads) alive, never use it again."""
        if self.hub is not None:
            self.hub.abandoned = True
            self.hub.fail(f"the caller stopped waiting after {self.bound:g} s")
        if self.sess is not None:
            _ABANDONED.append(self.sess)
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(self.sess))  # not freed at interpreter exit either
            self.sess = None

    def __enter__(self) -> ThreadWorkers:
        return self

    def __exit__(self, kind, err, tb) -> None:
        if kind is None:
            self.close()
        else:  # the run's own error is the one to report
            with contextlib.suppress(DiscoRunError):
                self.close()

    def close(self) -> None:
        """Shut the session down (bounded: a worker thread still busy makes it a given-up session)."""
        if self.sess is None:
            return
        sess = self.sess
        try:
            self.call(sess.shutdown, "the session's shutdown")
        finally:
            self.sess = None
            lifetime.retire(sess)  # destroyed on a helper of this thread, never on a worker thread
            del sess
            lifetime.sweep()
