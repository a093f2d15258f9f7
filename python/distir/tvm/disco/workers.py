"""Disco sessions for distir's runs: worker threads, or one worker process each.

- ``threads``: a Disco ``ThreadedSession``, made per run (cheap); its collectives are
  :mod:`distir.tvm.disco.host_ccl`'s, through memory.
- ``processes``: a Disco ``ProcessSession`` whose workers 1..W-1 are processes started here with
  distir's worker entry point (``python -m distir.tvm.disco.worker``, which registers distir's
  collectives before it serves Disco) and worker 0 is a thread of the caller, as in TVM. The
  workers join each other through Unix-domain sockets (:mod:`distir.tvm.disco.transport`). Starting
  W - 1 Python processes that import TVM takes seconds, so a healthy session is kept for the
  next run of the same size (:func:`process_workers`; :func:`close_all` ends them).

A worker that dies or fails must give a ``DiscoRunError`` in the caller within seconds, never a
hang, and must not abort the caller. TVM 0.27's ``ProcessSession`` writes to every worker's pipe
when it is destroyed and aborts the process when a write fails (a dead worker, or one that a
``shutdown()`` already ended), so: distir never calls ``shutdown()`` on it, and before dropping a
session it points every worker's pipe at a sink that stays open until TVM has destroyed the
session, so that the destructor's writes succeed (the workers see their pipe close and exit; the
ones left are terminated). The process pool is distir's (``distir.disco.create_process_pool``, given to
``SessionProcess`` in place of TVM's), which keeps the workers' processes and pipes at hand.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import os
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
from . import host_ccl

__all__ = ["ProcessWorkers", "close_all", "load_disco", "process_workers"]

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
_CONNECT_TIMEOUT = host_ccl.TIMEOUT  # seconds for the workers to start (load TVM) and join; then a collective's wait
_pending: dict[int, "_Pool"] = {}  # pools made by SessionProcess, claimed by the ProcessWorkers that asked
_pending_lock = threading.Lock()


def _python_path() -> str:
    """PYTHONPATH for the workers: this distir first, then the caller's own path."""
    here = str(Path(__file__).resolve().parents[3])
    rest = os.environ.get("PYTHONPATH", "")
    return here + (os.pathsep + rest if rest else "")


class _Pool:
    """The worker processes of one ProcessSession: started when TVM asks for worker i's pipes."""

    def __init__(self, num_workers: int, num_groups: int, directory: str):
        self.num_workers, self.num_groups, self.directory = num_workers, num_groups, directory
        self.procs: dict[int, subprocess.Popen] = {}
        self.write_fds: dict[int, int] = {}  # the caller's end of the pipe to each worker
        self.sinks: list[int] = []
        self.plugged: set[int] = set()
        self.released = False  # TVM destroyed the session (``destroyed`` ran)

    def start(self, worker: int) -> tvm_ffi.Shape:
        to_worker_r, to_worker_w = os.pipe()
        from_worker_r, from_worker_w = os.pipe()
        env = dict(os.environ, PYTHONPATH=_python_path())
        env.setdefault("TVM_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // self.num_workers)))
        log = open(os.path.join(self.directory, f"worker{worker}.log"), "wb")  # noqa: SIM115 - the child owns it
        cmd = [sys.executable, "-m", _ENTRY, str(worker), str(self.num_workers), str(self.num_groups),
               str(to_worker_r), str(from_worker_w)]  # fmt: skip
        try:
            self.procs[worker] = subprocess.Popen(
                cmd, pass_fds=(to_worker_r, from_worker_w), stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env
            )
        finally:
            log.close()
            os.close(to_worker_r)  # the child's ends: a write to a dead worker then fails instead of filling a pipe
            os.close(from_worker_w)
        self.write_fds[worker] = to_worker_w
        return tvm_ffi.Shape([from_worker_r, to_worker_w])

    def dead(self) -> dict[int, int]:
        """Worker -> exit status of every worker process that has ended."""
        return {w: p.returncode for w, p in self.procs.items() if p.poll() is not None}

    def last_words(self, worker: int) -> str:
        try:
            lines = Path(self.directory, f"worker{worker}.log").read_text(errors="replace").splitlines()
        except OSError:
            return ""
        lines = [ln.strip() for ln in lines if ln.strip() and not ln.startswith(("[", "Warning"))]
        return lines[-1] if lines else ""

    def plug(self) -> None:
        """Point every worker's pipe at a sink that stays open until TVM has destroyed the session, so
        that the destructor's farewells cannot fail (a failed write there aborts the process)."""
        for w, fd in self.write_fds.items():
            if w in self.plugged:
                continue
            r, wfd = os.pipe()
            os.dup2(wfd, fd)
            os.close(wfd)
            self.sinks.append(r)
            self.plugged.add(w)

    def stop(self) -> None:
        """End every worker process that is left."""
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def destroyed(self) -> None:
        """TVM destroyed the session (its last call to the pool): release everything."""
        self.released = True
        self.stop()
        for fd in self.sinks:
            os.close(fd)
        self.sinks.clear()
        shutil.rmtree(self.directory, ignore_errors=True)


def _create_process_pool(num_workers: int, num_groups: int, entrypoint: str):
    """``distir.disco.create_process_pool``: TVM's ``SessionProcess`` calls it, then the result per worker."""
    directory = tempfile.mkdtemp(prefix="distir-workers-")  # mode 0700: only this user reaches the sockets
    pool = _Pool(int(num_workers), int(num_groups), directory)
    with _pending_lock:
        _pending[threading.get_ident()] = pool

    def per_worker(worker: int):
        if worker == 0:
            pool.destroyed()
            return None
        return pool.start(int(worker))

    return per_worker


def _register() -> None:
    tvm_ffi.register_global_func(_POOL_FUNC, _create_process_pool, override=True)
    host_ccl.register()


def _status(code: int) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


class ProcessWorkers:
    """A Disco ProcessSession of ``num_workers`` workers joined by sockets (the module docstring)."""

    def __init__(self, num_workers: int, num_groups: int = 1):
        disco = load_disco()
        _register()
        self.num_workers, self.num_groups = num_workers, num_groups
        self.closed = False
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
        connect = self.sess.get_global_func("distir.session.connect")
        self.call(lambda: connect(self.pool.directory, num_workers, num_groups, _CONNECT_TIMEOUT))
        self._await_start()
        self.check(self.report(reset=True))

    def _await_start(self) -> None:
        """Wait until every worker has joined the others, watching for a worker process that ends
        first (worker 0, the caller's thread, would otherwise wait for it until the timeout)."""
        done, failure = threading.Event(), []

        def sync():
            try:
                for w in range(self.num_workers):
                    self.sess._sync_worker(w)
            except Exception as err:  # noqa: BLE001 - reported below
                failure.append(err)
            done.set()

        threading.Thread(target=sync, name="distir-workers-start", daemon=True).start()
        while not done.wait(0.1):
            if self.pool.dead():
                self.cancel.set()  # worker 0 stops waiting for the dead one
                done.wait(_CONNECT_TIMEOUT)
                break
        message = self.dead_message()
        if message is not None or failure:
            self.close()
            raise DiscoRunError(f"Disco worker processes could not start: {message or failure[0]}")

    def __del__(self):
        # dropped without close(): at least forget worker 0's endpoint, kept by its OS thread's id,
        # which a later thread may reuse (a dictionary entry only; TVM's destructor does the rest)
        pool = getattr(self, "pool", None)
        if pool is not None:
            host_ccl.forget_session(pool.directory)

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

    def call(self, action):
        """Run ``action`` (which talks to the workers); a dead worker is a DiscoRunError naming it."""
        message = self.dead_message()
        if message is None:
            try:
                return action()
            except Exception as err:  # noqa: BLE001 - a broken pipe to a dead worker, or another TVM error
                message = self._why(err)
        self.close()
        raise DiscoRunError(f"a Disco worker process failed: {message}")

    def check_alive(self) -> None:
        """Before a run: a worker that died since the last one (killed between runs) is a DiscoRunError
        now, not a write into its closed pipe in the middle of TVM's next call (which aborts the caller)."""
        gone = host_ccl.unreachable_workers(self.pool.directory, _PROBE_TIMEOUT)
        if not gone:
            return
        message = self._why(None)
        self.close()
        raise DiscoRunError(f"a Disco worker process failed: {message}")

    def _why(self, err: Exception | None) -> str:
        """Why talking to the workers failed: a worker that ended (give a killed one a moment to be
        seen as such), else what worker 0 saw, else TVM's own message."""
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            message = self.dead_message()
            if message is not None:
                return message
            time.sleep(0.05)
        seen = host_ccl.worker0_errors(self.pool.directory)
        if seen:
            return "; ".join(seen)
        return f"the Disco session failed: {tvm_message(err)}" if err is not None else "a worker cannot be reached"

    def sync(self) -> None:
        for w in range(self.num_workers):
            self.call(lambda w=w: self.sess._sync_worker(w))

    def report(self, reset: bool = False) -> list[dict]:
        """Every worker's failures, collective calls and bytes (see ``host_ccl._report``)."""
        ref = self.call(lambda: self.sess.get_global_func("distir.session.report")(int(reset)))
        return [json.loads(str(self.call(lambda w=w: ref.debug_get_from_remote(w)))) for w in range(self.num_workers)]

    def check(self, reports: list[dict]) -> None:
        errors = [e for r in reports for e in r["errors"]]
        if errors:
            self.close()
            raise DiscoRunError("a collective failed on Disco: " + "; ".join(dict.fromkeys(errors)))

    # -------------------------------------------------------------- the end

    def close(self) -> None:
        """End the session: its worker processes exit (or are killed), its sockets close."""
        if self.closed:
            return
        self.closed = True
        _forget(self)
        self.cancel.set()
        try:
            if not self.pool.dead():
                self.sess.get_global_func("distir.session.disconnect")()
                self.sess._sync_worker(0)
        except Exception:  # noqa: BLE001 - a worker died meanwhile; what follows copes
            pass
        self.pool.plug()
        self.sess = None  # TVM destroys the session once nothing refers to it; the pool's sinks stay open until then
        if not self.pool.released:  # a reference cycle still holds it: a full collection (slow on a large heap) frees it
            gc.collect()
        self.pool.stop()
        host_ccl.forget_session(self.pool.directory)


_CACHE: dict[tuple[int, int], ProcessWorkers] = {}
_cache_lock = threading.Lock()


def _forget(workers: ProcessWorkers) -> None:
    with _cache_lock:
        for key, value in list(_CACHE.items()):
            if value is workers:
                del _CACHE[key]


def process_workers(num_workers: int, num_groups: int = 1) -> ProcessWorkers:
    """A ProcessSession of this size: the one kept from an earlier run, or a new one. A kept session
    whose worker died since is a DiscoRunError naming it (once: the next call starts a new one)."""
    with _cache_lock:
        hit = _CACHE.get((num_workers, num_groups))
    if hit is not None and not hit.closed:
        message = hit.dead_message()
        if message is None:
            return hit
        hit.close()
        raise DiscoRunError(f"a Disco worker process of the kept session failed since its last run: {message}")
    workers = ProcessWorkers(num_workers, num_groups)
    with _cache_lock:
        _CACHE[(num_workers, num_groups)] = workers
    return workers


def close_all() -> None:
    """End every kept ProcessSession (also done when the interpreter exits)."""
    with _cache_lock:
        kept = list(_CACHE.values())
        _CACHE.clear()
    for w in kept:
        w.close()


atexit.register(close_all)
