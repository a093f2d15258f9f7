"""Disco sessions for distir's runs: worker threads, or one worker process each.

- ``threads``: a Disco ``ThreadedSession``, made per run (cheap); its collectives are
  :mod:`distir.tvm.disco.host_ccl`'s, through memory.
- ``processes``: a Disco ``ProcessSession`` whose workers 1..W-1 are processes started here with
  distir's worker entry point (``python -m distir.tvm.disco.worker``, which registers distir's
  collectives before it serves Disco) and worker 0 is a thread of the caller, as in TVM. The
  workers join each other through Unix-domain sockets (:mod:`distir.tvm.disco.transport`). Starting
  W - 1 Python processes that import TVM takes seconds, so a healthy session is kept for the
  next run of the same size (:func:`process_workers`; :func:`close_all` ends them).

A worker that dies, stops or wedges must give a ``DiscoRunError`` naming it, never a hang, and
must not abort the caller:

- **Bounded waits.** Every call that waits for a worker (a sync, a reply, the start) runs TVM's
  blocking call on a helper thread and waits for it with a deadline (:func:`worker_timeout`,
  ``DISTIR_WORKER_TIMEOUT``), watching the worker processes meanwhile: one that ended fails the
  call at once; at the deadline a stopped one (``/proc/<pid>/stat`` state ``T``/``t``) or the
  one that did not answer is named. The collectives inside the workers give up a little before
  the caller does (:func:`collective_timeout`), so a failure there is reported as such. A
  failure kills the pool; the next run starts a new one.
- **No write to a worker can fail.** TVM 0.27 writes to a worker's pipe from C++ destructors:
  every Disco handle the caller drops (``~DRefObj`` -> ``DeallocReg`` broadcasts ``kKillReg``)
  and the session itself (``~ProcessSessionObj`` broadcasts ``kShutDown``). ``support::Pipe::Write``
  checks the result of ``write()``, so a write to a worker that died (``EPIPE``; Python ignores
  SIGPIPE) throws from a destructor and aborts the caller (``terminate called after throwing an
  instance of 'tvm::ffi::Error'``). So the pool keeps the read end of every pipe to a worker
  open in the caller for the session's life: ``write()`` cannot meet a pipe without a reader.
  The pipes are widened (``F_SETPIPE_SZ``) so that the small commands a stopped worker does
  not read fill them only after far more than a run sends before its next bounded wait; when
  the session ends (or fails) the caller's ends are pointed at ``/dev/null`` and what is left in
  the pipes is drained, so TVM's last writes (the destructor's) neither fail nor block. distir
  never calls ``shutdown()`` on the session; the pool's descriptors are closed when TVM
  destroys the session (its last call to the pool).
- **The session is destroyed on distir's terms.** Its destructor joins worker 0's thread, so it
  must never run on that thread (a handle freed there by the garbage collector: an abort) nor
  with the GIL held while worker 0 needs it (a hang); :mod:`distir.tvm.disco.lifetime` holds a
  reference until it is the last, then lets it go on a helper thread without the GIL.

The process pool is distir's (``distir.disco.create_process_pool``, given to ``SessionProcess``
in place of TVM's), which keeps the workers' processes and pipes at hand.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import gc
import importlib
import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import tvm
import tvm_ffi

from ..errors import DiscoRunError, tvm_message
from . import host_ccl, lifetime

__all__ = ["ProcessWorkers", "start_call", "close_all", "collective_timeout", "kept_session", "kept_sessions", "load_disco", "process_workers",
           "take_local_pool", "worker_timeout"]

_DISCO = None


def load_disco():
    """``tvm.runtime.disco``, loaded despite the 0.27 wheel's import order (docs/tvm.md).

    ``import tvm`` imports ``tvm.runtime.disco`` before it loads ``libtvm_runtime_extra``
    (where Disco's C++ functions live), so the import fails and ``tvm.runtime.disco`` is
    None. Filling the FFI table again and importing the package once more fixes it.
    """
    global _DISCO
    if _DISCO is not None:
        return _DISCO
    mod = getattr(tvm.runtime, "disco", None)
    if mod is None or not hasattr(getattr(mod, "_ffi_api", None), "SessionThreaded"):
        if tvm_ffi.get_global_func("runtime.disco.SessionThreaded", allow_missing=True) is None:
            raise DiscoRunError("this TVM build has no Disco runtime (libtvm_runtime_extra is missing)")
        tvm_ffi.init_ffi_api("runtime.disco", "tvm.runtime.disco._ffi_api")
        mod = importlib.import_module("tvm.runtime.disco")
        tvm.runtime.disco = mod
    _DISCO = mod
    return mod


_POOL_FUNC = "distir.disco.create_process_pool"
_ENTRY = "distir.tvm.disco.worker"
_PROBE_TIMEOUT = 10.0  # seconds a live worker has to answer the ping before a run (it answers in milliseconds)
_CONNECT_TIMEOUT = host_ccl.TIMEOUT  # seconds for the workers to start (load TVM) and join each other
TIMEOUT_ENV = "DISTIR_WORKER_TIMEOUT"
#: the default bound on every wait for a worker: the collectives' own limit plus the probe's
DEFAULT_TIMEOUT = host_ccl.TIMEOUT + _PROBE_TIMEOUT
_TICK = 0.05  # seconds between looks at the worker processes while a call waits
_PIPE_SIZE = 1 << 20  # bytes of a pipe to a worker (Linux's default limit for a user, /proc/sys/fs/pipe-max-size)
_pending: dict[int, "_Pool"] = {}  # pools made by SessionProcess, claimed by the ProcessWorkers that asked
_pending_lock = threading.Lock()


def worker_timeout(value: float | str | None = None) -> float:
    """Seconds the caller waits for a worker process at most (a sync, a reply, a liveness probe):
    ``value`` if given, else ``$DISTIR_WORKER_TIMEOUT``, else 130 (the collectives' 120 s limit plus
    the 10 s probe). A run whose kernels take longer than that between two waits needs a larger one."""
    raw = value if value is not None else os.environ.get(TIMEOUT_ENV, "")
    if isinstance(raw, str) and not raw.strip():
        return DEFAULT_TIMEOUT
    try:
        seconds = float(raw)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        where = f"{TIMEOUT_ENV}={raw!r}" if value is None else f"worker timeout {raw!r}"
        raise DiscoRunError(f"{where} is not a positive number of seconds")
    return seconds


def collective_timeout(bound: float) -> float:
    """Seconds a worker waits for another inside a collective: a little less than the caller's
    ``bound`` (10 s less, or a quarter of it when that is smaller), so that the worker that gave up
    has recorded why before the caller stops waiting (120 s under the default bound)."""
    return bound - min(_PROBE_TIMEOUT, bound / 4)


def _python_path() -> str:
    """PYTHONPATH for the workers: this distir first, then the caller's own path."""
    here = str(Path(__file__).resolve().parents[3])
    rest = os.environ.get("PYTHONPATH", "")
    return here + (os.pathsep + rest if rest else "")


def _state(pid: int) -> str | None:
    """A process's state letter from /proc (``R`` running, ``S`` sleeping, ``T`` stopped, ``t``
    stopped by a tracer, ...), or None where there is no /proc or the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = stat[stat.rfind(")") + 1 :].split()  # the command name, in parentheses, may hold spaces
    return rest[0] if rest else None


_STATES = {"R": "running", "S": "sleeping", "D": "in an uninterruptible wait", "T": "stopped",
           "t": "stopped by a tracer", "Z": "a zombie", "X": "dead", "I": "idle"}  # fmt: skip


class _Pool:
    """The worker processes of one ProcessSession: started when TVM asks for worker i's pipes."""

    def __init__(self, num_workers: int, num_groups: int, directory: str):
        self.num_workers, self.num_groups, self.directory = num_workers, num_groups, directory
        self.procs: dict[int, subprocess.Popen] = {}
        self.write_fds: dict[int, int] = {}  # the caller's end of the pipe to each worker (TVM writes to it)
        self.spares: dict[int, int] = {}  # a read end of that pipe, kept here: a write to it never fails
        self.read_fds: dict[int, int] = {}  # the caller's end of the pipe from each worker (TVM reads it)
        self.unplugged = False  # the write ends point at /dev/null
        self.released = False  # TVM destroyed the session (``destroyed`` ran)
        self.start_errors: list[str] = []
        self.lock = threading.Lock()

    def start(self, worker: int) -> tvm_ffi.Shape:
        to_worker_r, to_worker_w = os.pipe()
        from_worker_r, from_worker_w = os.pipe()
        with contextlib.suppress(OSError, AttributeError):  # only Linux has it; the default 64 KiB still works
            fcntl.fcntl(to_worker_w, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
        env = dict(os.environ, PYTHONPATH=_python_path())
        env.setdefault("TVM_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // self.num_workers)))
        log = open(os.path.join(self.directory, f"worker{worker}.log"), "wb")  # noqa: SIM115 - the child owns it
        cmd = [sys.executable, "-m", _ENTRY, str(worker), str(self.num_workers), str(self.num_groups),
               str(to_worker_r), str(from_worker_w)]  # fmt: skip
        try:
            self.procs[worker] = subprocess.Popen(
                cmd, pass_fds=(to_worker_r, from_worker_w), stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env
            )
        except Exception as err:  # noqa: BLE001 - raising here would hang TVM's constructor (below)
            # TVM's ProcessSession constructor asks for every worker's pipes after starting worker 0's
            # thread; if this raised, its unwinding would join that thread, which waits for commands
            # forever. So the pipes are returned without a process, and the caller reports the failure.
            self.start_errors.append(f"worker {worker} could not be started: {type(err).__name__}: {err}")
        finally:
            log.close()
            os.close(from_worker_w)  # the child's end: a read of a dead worker's reply then ends (end of file)
        self.spares[worker] = to_worker_r  # kept open here, not closed: see the module docstring
        self.write_fds[worker] = to_worker_w
        self.read_fds[worker] = from_worker_r
        return tvm_ffi.Shape([from_worker_r, to_worker_w])

    def dead(self) -> dict[int, int]:
        """Worker -> exit status of every worker process that has ended."""
        return {w: p.returncode for w, p in self.procs.items() if p.poll() is not None}

    def states(self) -> dict[int, str]:
        """Worker -> state letter (``_state``) of every worker process still running."""
        out = {}
        for w, p in self.procs.items():
            state = _state(p.pid) if p.poll() is None else None
            if state is not None:
                out[w] = state
        return out

    def last_words(self, worker: int) -> str:
        try:
            lines = Path(self.directory, f"worker{worker}.log").read_text(errors="replace").splitlines()
        except OSError:
            return ""
        lines = [ln.strip() for ln in lines if ln.strip() and not ln.startswith(("[", "Warning"))]
        return lines[-1] if lines else ""

    def unplug(self) -> None:
        """Point the caller's end of every pipe to a worker at /dev/null: TVM's writes from here on
        (its destructors') go nowhere at once, and each worker reads the end of its pipe and exits."""
        with self.lock:
            if self.unplugged or self.released:
                return
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                for fd in self.write_fds.values():
                    os.dup2(null, fd)
            finally:
                os.close(null)
            self.unplugged = True

    def drain(self) -> None:
        """Empty the pipes to the workers through the spare read ends, so that a write already
        waiting for room in a pipe that no worker reads (a stopped or killed one) completes."""
        with self.lock:
            if self.released:
                return
            for fd in self.spares.values():  # select, not O_NONBLOCK: the worker shares this file description
                with contextlib.suppress(OSError, ValueError):
                    while select.select([fd], [], [], 0)[0] and os.read(fd, 1 << 16):
                        pass

    def kill(self) -> None:
        """Kill every worker process that is left (a stopped one too) and reap it."""
        for p in self.procs.values():
            if p.poll() is None:
                with contextlib.suppress(OSError):
                    p.kill()
        self._reap(5.0)

    def stop(self) -> None:
        """End every worker process that is left: ask, then kill what did not exit within 2 s."""
        for p in self.procs.values():
            if p.poll() is None:
                with contextlib.suppress(OSError):
                    p.terminate()
        if self._reap(2.0):
            self.kill()

    def _reap(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for every worker process to end; True if one is left."""
        deadline = time.monotonic() + seconds
        for p in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
        return any(p.poll() is None for p in self.procs.values())

    def destroyed(self) -> None:
        """TVM destroyed the session (its last call to the pool, from a C++ destructor: must not
        raise): end the processes, close every descriptor of the pipes, remove the directory."""
        try:
            self.unplug()
            self.stop()
            with self.lock:
                self.released = True
                for fd in (*self.write_fds.values(), *self.spares.values(), *self.read_fds.values()):
                    with contextlib.suppress(OSError):
                        os.close(fd)
                self.write_fds.clear(), self.spares.clear(), self.read_fds.clear()
            shutil.rmtree(self.directory, ignore_errors=True)
        except BaseException:  # noqa: BLE001, S110 - an exception here would abort the process
            pass


def _create_process_pool(num_workers: int, num_groups: int, entrypoint: str):
    """``distir.disco.create_process_pool``: TVM's ``SessionProcess`` calls it, then the result per worker."""
    directory = tempfile.mkdtemp(prefix="distir-workers-")  # mode 0700: only this user reaches the sockets
    pool = _Pool(int(num_workers), int(num_groups), directory)
    with _pending_lock:
        _pending[threading.get_ident()] = pool

    def per_worker(worker: int):
        if worker == 0:
            pool.destroyed()  # called from ~ProcessSessionObj
            return None
        return pool.start(int(worker))

    return per_worker


_LOCAL_FUNC = "runtime.disco.create_socket_session_local_workers"
_local_pools: dict[int, _Pool] = {}  # thread -> the pool of the node's local session it made (socket sessions)


def _create_local_session(num_workers: int):
    """A node's own workers in a socket session (TVM's ``SocketSession`` and ``RemoteSocketSession`` call
    it): a ProcessSession on distir's pool and entry point, in place of TVM's (whose workers lack
    distir's collectives). The pool is kept for :func:`take_local_pool`."""
    disco = load_disco()
    sess = disco.ProcessSession.__new__(disco.ProcessSession)
    try:
        sess.__init_handle_by_constructor__(importlib.import_module("tvm.runtime.disco._ffi_api").SessionProcess,
                                            int(num_workers), 1, _POOL_FUNC, _ENTRY)
    finally:
        with _pending_lock:
            pool = _pending.pop(threading.get_ident(), None)
        if pool is not None:
            _local_pools[threading.get_ident()] = pool
    return sess


def take_local_pool(thread: int) -> _Pool | None:
    """The pool of the local session that ``thread`` made last (:func:`_create_local_session`), once."""
    return _local_pools.pop(thread, None)


def _register() -> None:
    tvm_ffi.register_global_func(_POOL_FUNC, _create_process_pool, override=True)
    tvm_ffi.register_global_func(_LOCAL_FUNC, _create_local_session, override=True)
    host_ccl.register()


def _status(code: int) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def start_call(action, name: str) -> tuple[threading.Thread, threading.Event, dict]:
    """``action()`` (a call of TVM that may wait for a worker) started on a daemon helper thread:
    (the thread, an event set when it ends, a dict that then holds its ``value`` or ``error``), so that
    the caller waits as long as it chooses and never inside TVM."""
    out: dict = {}
    done = threading.Event()

    def run():
        try:
            out["value"] = action()
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
            out["error"] = err
        finally:
            done.set()

    helper = threading.Thread(target=run, name=name, daemon=True)
    helper.start()
    return helper, done, out


class ProcessWorkers:
    """A Disco ProcessSession of ``num_workers`` workers joined by sockets (the module docstring).
    ``timeout``: the bound on every wait for a worker (:func:`worker_timeout`)."""

    def __init__(self, num_workers: int, num_groups: int = 1, timeout: float | None = None):
        disco = load_disco()
        _register()
        self.num_workers, self.num_groups = num_workers, num_groups
        self.bound = worker_timeout(timeout)
        self.closed = False
        self._inflight: threading.Thread | None = None  # a helper thread still inside a call of TVM
        try:
            self.sess = disco.ProcessSession.__new__(disco.ProcessSession)
            self.sess.__init_handle_by_constructor__(
                importlib.import_module("tvm.runtime.disco._ffi_api").SessionProcess,
                num_workers, num_groups, _POOL_FUNC, _ENTRY,
            )
        except Exception as err:  # noqa: BLE001 - TVM raises several error types
            raise DiscoRunError(f"could not start {num_workers} Disco worker processes: {err}") from None
        finally:
            with _pending_lock:
                pool = _pending.pop(threading.get_ident(), None)
        self.pool = pool or _Pool(num_workers, num_groups, tempfile.mkdtemp(prefix="distir-workers-"))
        self.cancel = host_ccl.cancel_event(self.pool.directory)
        if self.pool.start_errors:
            self.close(failed=True)
            raise DiscoRunError(f"Disco worker processes could not start: {'; '.join(self.pool.start_errors)}")
        wait = collective_timeout(self.bound)
        self.call(lambda: self.sess.get_global_func("distir.session.connect")(
            self.pool.directory, num_workers, num_groups, _CONNECT_TIMEOUT, wait))
        self._await_start()
        self.check(self.report(reset=True))

    def _await_start(self) -> None:
        """Wait until every worker has joined the others (bounded: the workers load TVM, then join
        within ``_CONNECT_TIMEOUT``), failing at once on a worker process that ends first."""
        at = [0]

        def sync():
            for w in range(self.num_workers):
                at[0] = w
                self.sess._sync_worker(w)

        message, _ = self._bounded(sync, max(self.bound, _CONNECT_TIMEOUT + _PROBE_TIMEOUT), at)
        if message is not None:
            self.close(failed=True)
            raise DiscoRunError(f"Disco worker processes could not start: {message}")

    def __del__(self):
        # dropped without close() (on whichever thread frees it): forget worker 0's endpoint, kept by its
        # OS thread's id, which a later thread may reuse, and leave the session to a sweep (lifetime.py)
        try:
            pool = getattr(self, "pool", None)
            if pool is not None:
                host_ccl.forget_session(pool.directory)
            sess = getattr(self, "sess", None)
            if sess is not None:
                lifetime.retire(sess)
        except Exception:  # noqa: BLE001, S110 - at interpreter exit the modules may be gone already
            pass

    # -------------------------------------------------------------- health

    def pids(self) -> dict[int, int]:
        """Worker -> process id (worker 0 is the caller's own thread)."""
        return {0: os.getpid(), **{w: p.pid for w, p in self.pool.procs.items()}}

    def dead_message(self) -> str | None:
        dead = self.pool.dead()
        if not dead:
            return None
        parts = []
        for w, code in sorted(dead.items()):
            words = self.pool.last_words(w)
            parts.append(f"worker {w} (process {self.pool.procs[w].pid}) {_status(code)}" + (f": {words}" if words else ""))
        return "; ".join(parts)

    def _gone(self) -> bool:
        """A worker (or, for a session over nodes, a node) is gone: a call waiting for it fails now."""
        return bool(self.pool.dead())

    def stopped_message(self) -> str | None:
        """The worker processes that are stopped (SIGSTOP, a tracer), or None."""
        stopped = {w: s for w, s in self.pool.states().items() if s in ("T", "t")}
        return self._stopped_text(stopped) if stopped else None

    def _stopped_text(self, stopped: dict[int, str]) -> str:
        return "; ".join(f"worker {w} (process {self.pool.procs[w].pid}) is {_STATES[s]} (state {s})"
                         for w, s in sorted(stopped.items()))  # fmt: skip

    def _unanswered(self, bound: float, waiting: list[int] | None) -> str:
        """Why a call ran past ``bound``: the stopped workers, else the one it waited for and the state
        of every worker process (running: a long kernel or a wedge; sleeping: waiting on something)."""
        why = self.stopped_message()
        if why is None:
            states = self.pool.states()
            procs = "; ".join(f"worker {w} (process {self.pool.procs[w].pid}) is {_STATES.get(s, 'in state ' + s)}"
                              for w, s in sorted(states.items()))  # fmt: skip
            who = waiting[0] if waiting else None
            awaited = ("worker 0 (a thread of this process)" if who == 0 else
                       f"worker {who}" if who is not None else "the workers")  # fmt: skip
            why = f"{awaited} did not answer" + (f" ({procs})" if procs else "")
        seen = host_ccl.worker0_errors(self.pool.directory)
        also = f"; worker 0 saw: {'; '.join(seen)}" if seen else ""
        return f"{why}{also}: no answer within {bound:g} s (the bound {TIMEOUT_ENV} sets)"

    def _bounded(self, action, bound: float, waiting: list[int] | None = None):
        """Run ``action`` (a call of TVM that may wait for a worker) on a helper thread and wait for it
        at most ``bound`` seconds, watching the worker processes: (None, its value), or (why it
        failed, None). A helper left inside TVM is ended by :meth:`close` (it kills the workers)."""
        helper, done, out = start_call(action, "distir-disco-call")
        self._inflight = helper
        deadline = time.monotonic() + bound
        try:
            while not done.wait(_TICK):
                if self._gone():
                    return self._why(None), None
                if time.monotonic() > deadline:
                    return self._unanswered(bound, waiting), None
        except BaseException:  # a KeyboardInterrupt while waiting: the session cannot be trusted any more
            self.close(failed=True)
            raise
        self._inflight = None
        if "error" in out:
            return self._why(out.pop("error")), None
        return None, out.pop("value", None)

    def call(self, action, waiting: list[int] | None = None):
        """Run ``action`` (which talks to the workers), bounded (:meth:`_bounded`); a dead, stopped or
        silent worker is a DiscoRunError naming it, and the session is closed. ``waiting``: the
        worker it waits for (a list the action may update), named if it does not answer."""
        if self.closed:
            raise DiscoRunError("this Disco session was closed; a new run starts a new one")
        message = self.dead_message()
        if message is None:
            message, value = self._bounded(action, self.bound, waiting)
            if message is None:
                return value
        self.close(failed=True)
        raise DiscoRunError(f"a Disco worker process failed: {message}")

    def check_alive(self) -> None:
        """Before a run: a worker that died since the last one, or that stays stopped through the probe,
        is a DiscoRunError now, not a wait for it in the middle of TVM's next call. A worker's reader
        thread answers a ping even while it computes; one stopped for a moment (slowed) answers late
        but within the probe (10 s, or the bound if less), and one silent but running is left to the
        run's bounded waits."""
        message = self.dead_message()
        if message is None:
            silent = host_ccl.probe_workers(self.pool.directory, min(_PROBE_TIMEOUT, self.bound))
            if "gone" in silent.values():
                message = self._why(None)
            else:
                stopped = {w: s for w, s in self.pool.states().items() if w in silent and s in ("T", "t")}
                message = self._stopped_text(stopped) if stopped else None
        if message is None:
            return
        self.close(failed=True)
        raise DiscoRunError(f"a Disco worker process failed: {message}")

    def _why(self, err: BaseException | None) -> str:
        """Why talking to the workers failed: a worker that ended (give a killed one a moment to be
        seen as such), else a stopped one, else what worker 0 saw, else TVM's own message."""
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            message = self.dead_message()
            if message is not None:
                return message
            time.sleep(0.05)
        message = self.stopped_message()
        if message is not None:
            return message
        seen = host_ccl.worker0_errors(self.pool.directory)
        if seen:
            return "; ".join(seen)
        return f"the Disco session failed: {tvm_message(err)}" if err is not None else "a worker cannot be reached"

    def sync(self) -> None:
        """Wait until every worker has done what it was sent (one bound for all of them)."""
        at = [0]

        def sync_all():
            for w in range(self.num_workers):
                at[0] = w
                self.sess._sync_worker(w)

        self.call(sync_all, at)

    def report(self, reset: bool = False) -> list[dict]:
        """Every worker's failures, collective calls and bytes (see ``host_ccl._report``)."""
        ref = self.call(lambda: self.sess.get_global_func("distir.session.report")(int(reset)))
        return [json.loads(str(self.call(lambda w=w: ref.debug_get_from_remote(w), [w]))) for w in range(self.num_workers)]

    def check(self, reports: list[dict]) -> None:
        errors = [e for r in reports for e in r["errors"]]
        if errors:
            self.close(failed=True)
            raise DiscoRunError("a collective failed on Disco: " + "; ".join(dict.fromkeys(errors)))

    # -------------------------------------------------------------- the end

    def close(self, failed: bool = False) -> None:
        """End the session, within seconds whatever state its workers are in: a healthy one is asked to
        disconnect (bounded); then the workers' pipes point at /dev/null (they exit), the processes
        left are ended (killed at once when ``failed``), worker 0's sockets close (its waits end), a
        helper thread still inside TVM is let out, and the session is retired: destroyed now if nothing else
        holds it, else by a later sweep (:mod:`distir.tvm.disco.lifetime`)."""
        if self.closed:
            return
        self.closed = True
        _forget(self)
        self.cancel.set()
        pool = self.pool
        healthy = not failed and self._inflight is None and not pool.dead() and self.stopped_message() is None
        if healthy:
            sess = self.sess
            message = self._bounded(lambda: (sess.get_global_func("distir.session.disconnect")(),  # its handle not kept
                                             sess._sync_worker(0)), min(self.bound, 5.0))[0]  # fmt: skip
            healthy = message is None
            sess = None  # not held past here: the session must go when self.sess does
        if not healthy:
            pool.kill()
        pool.unplug()
        host_ccl.forget_session(pool.directory)
        helper, deadline = self._inflight, time.monotonic() + 10.0
        while helper is not None and helper.is_alive() and time.monotonic() < deadline:
            pool.drain()  # a write waiting for room in a pipe that no worker reads completes
            helper.join(_TICK)
        self._inflight = None
        lifetime.retire(self.sess)  # destroyed by distir on this thread's helper, never by a handle let go elsewhere
        self.sess = None
        if lifetime.sweep() and not pool.released:  # a cycle holds a handle: a full collection (slow on a large heap)
            gc.collect()
            lifetime.sweep()
        pool.stop()
        pool.drain()


_CACHE: dict[tuple, ProcessWorkers] = {}
_cache_lock = threading.Lock()


def _forget(workers: ProcessWorkers) -> None:
    with _cache_lock:
        for key, value in list(_CACHE.items()):
            if value is workers:
                del _CACHE[key]


def kept_session(key, bound: float, make) -> ProcessWorkers:
    """The session kept under ``key`` (made by ``make()`` if there is none): one whose worker died since
    its last run is a DiscoRunError naming it (once: the next call makes a new one); one made under
    another ``bound`` is replaced."""
    with _cache_lock:
        hit = _CACHE.get(key)
    if hit is not None and not hit.closed:
        if hit.bound != bound:
            hit.close()
        else:
            message = hit.dead_message()
            if message is None:
                return hit
            hit.close(failed=True)
            raise DiscoRunError(f"a Disco worker process of the kept session failed since its last run: {message}")
    workers = make()
    with _cache_lock:
        _CACHE[key] = workers
    return workers


def kept_sessions(select) -> list[ProcessWorkers]:
    """The kept sessions whose key ``select`` accepts."""
    with _cache_lock:
        return [w for key, w in _CACHE.items() if select(key)]


def process_workers(num_workers: int, num_groups: int = 1, timeout: float | None = None) -> ProcessWorkers:
    """A ProcessSession of this size: the one kept from an earlier run, or a new one. A kept session
    whose worker died since is a DiscoRunError naming it (once: the next call starts a new one). ``timeout`` (else ``$DISTIR_WORKER_TIMEOUT``, :func:`worker_timeout`) bounds every wait for
    a worker; a kept session made under another bound is replaced (its collectives' limit follows it)."""
    bound = worker_timeout(timeout)
    return kept_session((num_workers, num_groups), bound, lambda: ProcessWorkers(num_workers, num_groups, bound))


def close_all() -> None:
    """End every kept ProcessSession (also done when the interpreter exits)."""
    with _cache_lock:
        kept = list(_CACHE.values())
        _CACHE.clear()
    for w in kept:
        w.close()
    lifetime.sweep()


atexit.register(close_all)
