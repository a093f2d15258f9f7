"""distir's host collectives behind Disco's builtins, driven through Disco's own session API."""

from __future__ import annotations

import numpy as np
import pytest
import tvm

from distir.tvm import DiscoRunError
from distir.tvm.disco import host_ccl
from distir.tvm.disco.workers import load_disco


def per_worker(sess, arrays):
    """A DRef holding arrays[w] on worker w (scattered from worker 0 through the collectives)."""
    stacked = np.stack(arrays)
    dst = sess.empty(stacked.shape[1:], str(stacked.dtype))
    sess.scatter_from_worker0(sess.copy_to_worker_0(tvm.runtime.tensor(stacked)), dst, in_group=False)
    return dst


def values(sess, ref, workers):
    return [ref.debug_get_from_remote(w).numpy() for w in workers]


@pytest.fixture
def session():
    disco = load_disco()
    opened = []

    def make(workers, groups=1):
        sess = disco.ThreadedSession(workers, groups)
        opened.append(sess)
        return sess

    yield make
    for sess in opened:
        sess.shutdown()


def test_allreduce_and_allgather_in_groups_and_globally(session):
    with host_ccl.session(4, 2) as state:
        sess = session(4, 2)
        xs = [np.full((2, 3), w + 1, "float32") for w in range(4)]
        x = per_worker(sess, xs)
        total = sess.empty((2, 3), "float32")
        sess.allreduce(x, total, op="sum", in_group=False)
        assert all(np.array_equal(v, np.full((2, 3), 10.0)) for v in values(sess, total, range(4)))
        group_max = sess.empty((2, 3), "float32")
        sess.allreduce(x, group_max, op="max", in_group=True)
        assert [float(v[0, 0]) for v in values(sess, group_max, range(4))] == [2.0, 2.0, 4.0, 4.0]
        gathered = sess.empty((2, 2, 3), "float32")
        sess.allgather(x, gathered, in_group=True)
        np.testing.assert_array_equal(values(sess, gathered, [3])[0], np.stack(xs[2:]))
        for w in range(4):  # every worker done (and counted) before the session closes
            sess._sync_worker(w)
    calls, _ = host_ccl.hub_totals(state)
    assert calls["allreduce"] == 1 + 2 and calls["allgather"] == 2


def test_broadcast_and_gather_through_worker_0(session):
    with host_ccl.session(3, 1):
        sess = session(3)
        src = np.arange(6, dtype="int32").reshape(2, 3)
        out = sess.broadcast(src)
        assert all(np.array_equal(v, src) for v in values(sess, out, range(3)))
        x = per_worker(sess, [np.full((2,), w, "int32") for w in range(3)])
        gathered = sess.empty((3, 2), "int32", worker0_only=True)
        sess.gather_to_worker0(x, gathered, in_group=False)
        np.testing.assert_array_equal(values(sess, gathered, [0])[0], [[0, 0], [1, 1], [2, 2]])


def test_a_failing_collective_is_reported_not_fatal(session):
    failure = pytest.raises(DiscoRunError, match="a collective failed on Disco: allgather on worker")
    with failure, host_ccl.session(2, 1):
        sess = session(2)
        src = sess.empty((4,), "float32")
        wrong = sess.empty((3,), "float32")  # too small for 2 x 4 values
        sess.allgather(src, wrong, in_group=False)
        for w in range(2):
            sess._sync_worker(w)


def test_groups_must_divide_the_workers():
    with pytest.raises(DiscoRunError, match="3 workers cannot be split into 2 equal groups"), host_ccl.session(3, 2):
        pass


WORKER_IMPORTS = """
import sys
from distir.tvm.disco import worker
worker._load_runtime()
from distir.tvm.disco.host_ccl import register
register()
print(" ".join(sorted(m for m in sys.modules if m.startswith("distir"))))
"""


def test_a_worker_process_loads_only_the_collectives():
    """What ``python -m distir.tvm.disco.worker`` loads before it serves Disco (its start-up time is
    every session's): the collectives and their channels, no exporter, no runner, no passes."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", WORKER_IMPORTS], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["distir", "distir.errors", "distir.partials", "distir.tvm", "distir.tvm.disco",
                                   "distir.tvm.disco.host_ccl", "distir.tvm.disco.transport",
                                   "distir.tvm.disco.worker", "distir.tvm.errors"]
