"""Worker processes that fail: stopped (SIGSTOP), killed, between runs and in the middle of one.
Each is a DiscoRunError naming the worker within seconds of the bound on waits for a worker
(DISTIR_WORKER_TIMEOUT, set small here), the session's processes are gone afterwards, and the
next run starts a new session and is right. A dropped Disco handle after a worker died must not
abort the caller (it did: TVM's destructor checked a write into the dead worker's pipe)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from disco_faults import hook_allreduce

from distir import examples
from distir.driver import Driver, random_inputs
from distir.tvm import DiscoRunError
from distir.tvm.disco import workers as disco_workers

BOUND = 6.0  # seconds: the bound the failing runs are given (a healthy run's waits here take milliseconds)
SLACK = 10.0  # seconds past the bound that the error may take (teardown, a loaded machine)
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def llama():
    """(driver of the bundled llama, its arguments)."""
    mod = examples.load("llama")
    return Driver(mod), random_inputs(mod, seed=7, dims={"s": 8})


def _gone(pid: int) -> bool:
    """The process ended and was reaped (its pid no longer names it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return disco_workers._state(pid) in (None, "Z", "X")


@contextlib.contextmanager
def _small_bound(monkeypatch):
    monkeypatch.setenv(disco_workers.TIMEOUT_ENV, str(BOUND))
    try:
        yield
    finally:
        monkeypatch.delenv(disco_workers.TIMEOUT_ENV)


def _fails_naming(driver, args, pattern: str) -> float:
    t0 = time.monotonic()
    with pytest.raises(DiscoRunError, match=pattern):
        driver.run(args, 2, backend="tvm", session="processes")
    return time.monotonic() - t0


@pytest.mark.parametrize("when", ["between runs", "during a run"])
def test_a_stopped_worker_is_named_within_the_bound_and_the_next_run_is_right(llama, monkeypatch, when):
    driver, args = llama
    with _small_bound(monkeypatch):
        assert driver.run(args, 2, backend="tvm", session="processes").ok  # a session under the small bound
        session = disco_workers.process_workers(2)
        assert session.bound == BOUND
        victim = session.pids()[1]
        try:
            pattern = rf"worker 1 \(process {victim}\) is stopped \(state T\)"
            if when == "between runs":
                os.kill(victim, signal.SIGSTOP)
                took = _fails_naming(driver, args, pattern)
            else:
                with hook_allreduce(lambda: os.kill(victim, signal.SIGSTOP)):
                    took = _fails_naming(driver, args, pattern)  # seen stopped before a wait, or at the bound
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGCONT)
    assert took < BOUND + SLACK, took
    # the pool was torn down: every process ended (TVM destroys the session itself once the traceback's
    # Disco handles are dropped; until then its pipes' writes go to /dev/null)
    assert session.closed and _gone(victim) and all(p.poll() is not None for p in session.pool.procs.values())
    nxt = driver.run(args, 2, backend="tvm", session="processes")  # a new session, under the default bound
    assert nxt.ok, nxt.comparison.mismatch  # compared with the simulator
    fresh = disco_workers.process_workers(2)
    assert fresh is not session and fresh.pids()[1] != victim and fresh.bound == disco_workers.DEFAULT_TIMEOUT


def test_a_worker_stopped_for_less_than_the_bound_only_slows_the_run(llama, monkeypatch):
    """Stopped for 2 s in the middle of a run and before the next one (a slow worker, not a failure):
    both runs are right, on the same session."""
    driver, args = llama
    with _small_bound(monkeypatch):
        assert driver.run(args, 2, backend="tvm", session="processes").ok
        session = disco_workers.process_workers(2)
        victim = session.pids()[1]
        timers = []

        def pause():
            os.kill(victim, signal.SIGSTOP)
            timers.append(threading.Timer(2.0, os.kill, (victim, signal.SIGCONT)))
            timers[-1].start()

        try:
            with hook_allreduce(pause):
                got = driver.run(args, 2, backend="tvm", session="processes")
            assert got.ok, got.comparison.mismatch
            pause()
            t0 = time.monotonic()
            again = driver.run(args, 2, backend="tvm", session="processes")
            assert again.ok and time.monotonic() - t0 >= 1.0  # the probe waited for the stopped worker
        finally:
            for t in timers:
                t.join(5)
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGCONT)
        assert disco_workers.process_workers(2) is session and not session.closed


def test_a_worker_killed_during_a_run_under_a_small_bound(llama, monkeypatch):
    driver, args = llama
    with _small_bound(monkeypatch):
        assert driver.run(args, 2, backend="tvm", session="processes").ok
        victim = disco_workers.process_workers(2).pids()[1]
        with hook_allreduce(lambda: os.kill(victim, signal.SIGKILL)):
            took = _fails_naming(driver, args, rf"worker 1 \(process {victim}\) was killed by SIGKILL")
    assert took < SLACK  # a dead worker does not wait for the bound
    assert driver.run(args, 2, backend="tvm", session="processes").ok


def test_a_bad_bound_is_one_line(monkeypatch):
    monkeypatch.setenv(disco_workers.TIMEOUT_ENV, "soon")
    with pytest.raises(DiscoRunError, match=r"^DISTIR_WORKER_TIMEOUT='soon' is not a positive number of seconds$"):
        disco_workers.process_workers(2)
    with pytest.raises(DiscoRunError, match=r"^worker timeout -1 is not a positive number of seconds$"):
        disco_workers.worker_timeout(-1)
    monkeypatch.setenv(disco_workers.TIMEOUT_ENV, "")
    assert disco_workers.worker_timeout() == 130.0
    assert disco_workers.collective_timeout(130.0) == 120.0 and disco_workers.collective_timeout(4.0) == 3.0


_DROP_AFTER_DEATH = textwrap.dedent(
    """
    import os, signal
    from distir.tvm import DiscoRunError
    from distir.tvm.disco import lifetime, workers as W
    w = W.ProcessWorkers(2, timeout=30)
    handle = w.sess.get_global_func("runtime.disco.worker_id")  # a Disco handle the caller holds
    victim = w.pool.procs[1]
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(30)
    del handle  # TVM's ~DRefObj writes into every worker's pipe, the dead one's too
    print("dropped", flush=True)
    try:
        w.sync()
    except DiscoRunError as err:
        print(err, flush=True)
    print("released", w.pool.released, flush=True)
    """
)


def test_dropping_a_disco_handle_after_a_worker_died_does_not_abort_the_caller():
    """In a child process (an abort would take the test runner with it): before the fix, TVM's
    destructor threw on the failed write (EPIPE) and the process ended with SIGABRT."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "python"), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", _DROP_AFTER_DEATH], capture_output=True, text=True, timeout=120, env=env,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "dropped" and lines[-1] == "released True", done.stdout
    assert lines[1].startswith("a Disco worker process failed: worker 1 (process ") and "was killed by SIGKILL" in lines[1]


def test_a_worker_that_cannot_be_started_is_one_line_not_a_hang(monkeypatch):
    """The second worker process fails to start (as fork does when the machine is out of processes):
    TVM's session constructor would have hung unwinding (it joins worker 0's thread) had the pool raised."""
    real, started = subprocess.Popen, []

    def popen(cmd, *a, **kw):
        if disco_workers._ENTRY in cmd and started:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        started.append(cmd)
        return real(cmd, *a, **kw)

    monkeypatch.setattr(disco_workers.subprocess, "Popen", popen)
    t0 = time.monotonic()
    with pytest.raises(DiscoRunError, match=r"^Disco worker processes could not start: worker 2 could not be started: "
                                            r"BlockingIOError: \[Errno 11\] Resource temporarily unavailable$"):
        disco_workers.ProcessWorkers(3)
    assert time.monotonic() - t0 < 30 and len(started) == 1


_HANDLES_FREED_ON_WORKER_0 = textwrap.dedent(
    """
    import gc, os, signal, sys, time
    import tvm_ffi
    from distir.tvm.disco import lifetime, workers as W

    gc.disable()  # the collections below run where the script says, as the collector's would anywhere
    def collect():  # a Python call on worker 0 (a thread of this process) that frees a cycle of handles
        time.sleep(0.5)
        gc.collect()
    tvm_ffi.register_global_func("test.collect", collect, override=True)

    def handles_in_a_cycle(w):
        f = w.sess.get_global_func("test.collect")
        box = [f, f()]  # f() starts worker 0 on collect(); the result's handle holds the session too
        box.append(box)

    # 1. dropped without close(): worker 0 frees the last handles; before, TVM's destructor joined worker
    #    0's own thread there (std::system_error from a destructor: SIGABRT)
    w = W.ProcessWorkers(2, timeout=30)
    handles_in_a_cycle(w)
    del w
    time.sleep(2.0)
    print("dropped", lifetime.retired(), flush=True)
    print("swept", lifetime.sweep(), flush=True)

    # 2. closed while worker 0 runs Python and a cycle holds handles: the collection in close() frees them;
    #    before, the destructor ran there with the GIL held and waited for worker 0, which waited for the GIL
    w = W.ProcessWorkers(2, timeout=30)
    handles_in_a_cycle(w)
    os.kill(w.pool.procs[1].pid, signal.SIGKILL)
    w.close(failed=True)
    print("closed", lifetime.retired(), w.pool.released, flush=True)

    # 3. a thread session shut down while a cycle holds handles that its worker threads then free
    from distir.tvm.disco.threads import ThreadWorkers
    t = ThreadWorkers(W.load_disco(), 2, 1, 30.0)
    handles_in_a_cycle(t)
    t.close()
    time.sleep(2.0)
    print("threads", lifetime.sweep(), flush=True)
    """
)


def test_a_session_is_never_destroyed_on_its_own_worker_thread_nor_with_the_gil_held():
    """In a child process (an abort or a deadlock would take the test runner with it): the last Disco
    handles of a session freed by the garbage collector on worker 0's thread, a session closed while
    worker 0 still runs Python, and a thread session whose handles its own worker threads free; each
    ends with the session destroyed (lifetime.py), within seconds."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "python"), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", _HANDLES_FREED_ON_WORKER_0], capture_output=True, text=True, timeout=120,
                          env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["dropped 1", "swept 0", "closed 0 True", "threads 0"], done.stdout


def test_retiring_a_session_tvm_never_made_is_a_no_op():
    """A ProcessWorkers whose TVM constructor failed holds an empty wrapper (handle 0); dropping it
    retires that wrapper (``__del__``), which must not hand TVM a null handle."""
    from distir.tvm.disco import lifetime

    empty = disco_workers.load_disco().ProcessSession.__new__(disco_workers.load_disco().ProcessSession)
    before = lifetime.retired()
    lifetime.retire(empty)
    assert empty.__chandle__() == 0 and lifetime.retired() == before
