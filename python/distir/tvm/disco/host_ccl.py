"""Disco's collectives for workers without NCCL, through host memory: distir's collective library.

Disco's builtins (``runtime.disco.allreduce`` and the rest) forward to
``runtime.disco.<ccl>.<name>``, where ``<ccl>`` is the library the workers were set up with
(``nccl`` after ``session.init_ccl("nccl", ...)``). Workers that never called ``init_ccl``
have an empty library name, so the builtins look for ``runtime.disco..allreduce``: the
functions registered here. The exported module calls the same builtins with NCCL and with
this library; only what stands behind them differs.

Each collective is written once over a worker's :class:`~distir.tvm.disco.transport.Endpoint`
(``post``/``take`` between pairs of workers): the threads of a ``ThreadedSession`` share one
:class:`~distir.tvm.disco.transport.ThreadHub`; each worker of a ``ProcessSession`` has its own
socket endpoint, set up by ``distir.session.connect`` (run on every worker by
:mod:`distir.tvm.disco.workers`). Buffers may live on a device (a CUDA build run by several worker
threads on one GPU): they are copied to the host, combined, and copied back. Sums of floats are
taken in float64.

A Python exception in a Disco worker thread aborts the process, so nothing here raises: a
failure is recorded, every worker's waits end at once, and the runner raises ``DiscoRunError``
in the caller's thread afterwards. The bytes counted are those Disco's collectives move with
NCCL's algorithms (a ring all-reduce sends ``2 (n - 1) / n`` of its buffer per worker).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import tvm_ffi

from ...partials import combine
from ..errors import DiscoRunError
from .transport import Aborted, ChannelError, Endpoint, ThreadHub, connect_sockets, connect_tcp, pack_arrays

__all__ = ["CCL_NAMES", "TIMEOUT", "register", "session"]

#: the collective functions Disco's builtins look up (``runtime.disco.<ccl>.<name>``)
CCL_NAMES = (
    "allreduce",
    "allgather",
    "broadcast_from_worker0",
    "scatter_from_worker0",
    "gather_to_worker0",
    "recv_from_worker0",
    "send_to_next_group",
    "recv_from_prev_group",
    "send_to_worker",
    "recv_from_worker",
    "sync_worker",
)

_PREFIX = "runtime.disco.."  # the empty library name of workers that never ran init_ccl
TIMEOUT = 120.0  # seconds a worker waits for another (a dead one is noticed at once) before the run fails

_HUB: ThreadHub | None = None  # the ThreadedSession being served
_SESSION_LOCK = threading.Lock()  # one ThreadedSession at a time uses the hub
_HUB_OF: dict[int, ThreadHub] = {}  # a ThreadedSession's worker thread -> the hub it serves (see _endpoint)
# a ProcessSession worker's own endpoint, by the OS thread that runs it (its process's main thread, or
# worker 0's thread in the caller): Disco's threads are not Python's, and Python forgets a foreign thread's
# threading.local between two calls into it; an entry is removed when the session ends (see forget_thread)
_BY_THREAD: dict[int, Endpoint] = {}
_CONNECT_ERRORS: dict[int, str] = {}
_THREAD_OF: dict[str, int] = {}  # session directory -> the caller's thread serving its worker 0
_worker_id_func = None


def _me() -> int:
    global _worker_id_func
    if _worker_id_func is None:
        _worker_id_func = tvm_ffi.get_global_func("runtime.disco.worker_id")
    return int(_worker_id_func()[0])


def _endpoint() -> Endpoint | None:
    me = threading.get_ident()
    ep = _BY_THREAD.get(me)
    if ep is not None:
        return ep
    # a ThreadedSession's worker keeps the hub it first served: a worker thread of a session the caller
    # gave up on (distir.tvm.disco.threads) that wakes later must never post into the next session's hub
    hub = _HUB_OF.get(me)
    if hub is None:
        hub = _HUB
        if hub is None:
            return None
        _HUB_OF[me] = hub
    return hub.endpoints[_me()]


def _safe(name: str):
    """Wrap a collective so that it records failures instead of raising in a Disco worker."""

    def wrap(fn):
        def run(*args):
            ep = _endpoint()
            if ep is None or ep.errors:
                return  # not in a distir session, or an earlier failure broke the run: nothing to wait for
            try:
                fn(ep, *args)
            except Aborted:
                pass  # another worker's failure, already recorded
            except ChannelError as err:
                ep.fail(f"{name} on worker {ep.worker}: {err}")
            except Exception as err:  # noqa: BLE001 - must never propagate into a Disco worker
                ep.fail(f"{name} on worker {ep.worker}: {type(err).__name__}: {err}")

        run.__name__ = name
        return run

    return wrap


def _host(t) -> np.ndarray:
    """A worker's buffer on the host (a copy when it lives on a device)."""
    return t.numpy()


def _put(t, value: np.ndarray) -> None:
    """Write ``value`` into a worker's buffer (on its device); a 0-d buffer takes a 0-d array
    (``np.ascontiguousarray`` would make it 1-d)."""
    v = np.asarray(value).reshape(t.shape)
    t.copyfrom(v if v.flags.c_contiguous else v.copy(order="C"))


def _everyone(ep: Endpoint, members, data: np.ndarray) -> list[np.ndarray]:
    """Every member's ``data``, in member order (each sends its own to all the others)."""
    for m in members:
        if m != ep.worker:
            ep.post(m, data)
    return [data if m == ep.worker else ep.take(m) for m in members]


#: Disco's ReduceKind codes (tvm/runtime/disco/builtin.h) and the partial each combines
_KINDS = {0: "sum", 2: "min", 3: "max", 4: "avg"}


@_safe("allreduce")
def _allreduce(ep: Endpoint, send, kind: int, in_group: bool, recv) -> None:
    """The parts combined as distir.ir.combine says for their dtype (floats added in float64,
    integers wrapping around, bools by any / all), as the simulator combines them."""
    members = ep.members(in_group)
    data = _host(send)
    if int(kind) not in _KINDS:
        raise ValueError(f"reduce kind {int(kind)} is not one distir emits ({', '.join(_KINDS.values())})")
    parts = _everyone(ep, members, data)
    _put(recv, np.asarray(combine(_KINDS[int(kind)], parts)))
    n = len(members)
    if ep.worker == members[0]:  # a ring: 2 (n - 1) / n of the buffer from each member, counted for the group
        ep.counters.count("allreduce", 2 * (n - 1) * data.nbytes, True)


@_safe("allgather")
def _allgather(ep: Endpoint, send, in_group: bool, recv) -> None:
    members = ep.members(in_group)
    data = _host(send)
    parts = _everyone(ep, members, data)
    _put(recv, np.concatenate([p.reshape(-1) for p in parts]))
    ep.counters.count("allgather", (len(members) - 1) * data.nbytes, ep.worker == members[0])


@_safe("broadcast_from_worker0")
def _broadcast(ep: Endpoint, send, in_group: bool, recv) -> None:
    members = ep.members(in_group)
    root = members[0]
    if ep.worker == root:
        data = _host(send)
        for m in members[1:]:
            ep.post(m, data)
        ep.counters.count("broadcast", (len(members) - 1) * data.nbytes, True)
    else:
        data = ep.take(root)
    _put(recv, data)


@_safe("scatter_from_worker0")
def _scatter(ep: Endpoint, send, in_group: bool, recv) -> None:
    members = ep.members(in_group)
    root = members[0]
    if ep.worker == root:
        pieces = np.split(_host(send).reshape(-1), len(members))
        for m, piece in zip(members[1:], pieces[1:]):
            ep.post(m, piece)
        ep.counters.count("scatter", sum(p.nbytes for p in pieces[1:]), True)
        mine = pieces[0]
    else:
        mine = ep.take(root)
    _put(recv, mine)


@_safe("gather_to_worker0")
def _gather(ep: Endpoint, send, in_group: bool, recv) -> None:
    members = ep.members(in_group)
    root = members[0]
    data = _host(send)
    if ep.worker == root:
        parts = [data] + [ep.take(m) for m in members[1:]]
        _put(recv, np.concatenate([p.reshape(-1) for p in parts]))
    else:
        ep.post(root, data)
    ep.counters.count("gather", 0 if ep.worker == root else data.nbytes, ep.worker == root)


def _send(ep: Endpoint, dst: int, buffer) -> None:
    data = _host(buffer)
    ep.post(dst, data)
    ep.counters.count("send", data.nbytes, True)


@_safe("send_to_worker")
def _send_to_worker(ep: Endpoint, buffer, receiver: int) -> None:
    _send(ep, int(receiver), buffer)


@_safe("recv_from_worker")
def _recv_from_worker(ep: Endpoint, buffer, sender: int) -> None:
    _put(buffer, ep.take(int(sender)))


@_safe("recv_from_worker0")
def _recv_from_worker0(ep: Endpoint, buffer) -> None:
    _put(buffer, ep.take(0))


@_safe("send_to_next_group")
def _send_to_next_group(ep: Endpoint, buffer) -> None:
    _send(ep, ep.worker + ep.group_size, buffer)


@_safe("recv_from_prev_group")
def _recv_from_prev_group(ep: Endpoint, buffer) -> None:
    _put(buffer, ep.take(ep.worker - ep.group_size))


@_safe("sync_worker")
def _sync_worker(ep: Endpoint) -> None:
    return None  # copies to and from the host are synchronous


_FUNCS = {
    "allreduce": _allreduce,
    "allgather": _allgather,
    "broadcast_from_worker0": _broadcast,
    "scatter_from_worker0": _scatter,
    "gather_to_worker0": _gather,
    "recv_from_worker0": _recv_from_worker0,
    "send_to_next_group": _send_to_next_group,
    "recv_from_prev_group": _recv_from_prev_group,
    "send_to_worker": _send_to_worker,
    "recv_from_worker": _recv_from_worker,
    "sync_worker": _sync_worker,
}


# ---------------------------------------------------------------- a ProcessSession's workers


_CANCEL: dict[str, threading.Event] = {}  # per session directory: the caller gives up on starting it


def cancel_event(directory: str) -> threading.Event:
    """The event that makes worker 0 (a thread of the caller) stop waiting for the others to join."""
    return _CANCEL.setdefault(directory, threading.Event())


def _connect(directory: str, num_workers: int, num_groups: int, timeout: float, wait: float = TIMEOUT) -> None:
    """``distir.session.connect``, run on every worker of a ProcessSession: join the others' sockets
    within ``timeout`` seconds; a collective then waits ``wait`` seconds at most for another worker.
    A failure is kept for :func:`_report` (raising would kill worker 0's thread, the caller)."""
    _join_session(directory, lambda cancel: connect_sockets(
        directory, _me(), int(num_workers), int(num_groups), float(timeout), cancel, float(wait)))


def _connect_tcp(key: str, host: str, port: int, token: str, num_workers: int, num_groups: int, timeout: float,
                 wait: float = TIMEOUT) -> None:
    """``distir.session.connect_tcp``, run on every worker of a session spread over nodes: meet the
    others at the controller's rendezvous ``host:port`` and join them over TCP (see
    :func:`~distir.tvm.disco.transport.connect_tcp`); ``key`` names the session in the controller
    (worker 0's cancel flag). Failures as :func:`_connect`."""
    _join_session(key, lambda cancel: connect_tcp(
        str(host), int(port), str(token), _me(), int(num_workers), int(num_groups), float(timeout), cancel, float(wait)))


def _join_session(key: str, join) -> None:
    me = threading.get_ident()
    _disconnect()
    _CONNECT_ERRORS.pop(me, None)
    _THREAD_OF[key] = me
    try:
        _BY_THREAD[me] = join(_CANCEL.get(key))
    except Exception as err:  # noqa: BLE001 - reported to the caller by _report
        _CONNECT_ERRORS[me] = f"worker {_me()} could not join the others: {type(err).__name__}: {err}"


def _report(reset: int) -> str:
    """``distir.session.report``: this worker's failures, collective calls and bytes as JSON (and reset the counts)."""
    me = threading.get_ident()
    ep = _BY_THREAD.get(me)
    errors = [_CONNECT_ERRORS[me]] if me in _CONNECT_ERRORS else []
    out = {"errors": errors, "calls": {}, "bytes_sent": 0}
    if ep is not None:
        out.update(errors=errors + ep.errors, calls=dict(ep.counters.calls), bytes_sent=ep.counters.bytes_sent)
        if int(reset):
            ep.counters.calls.clear()
            ep.counters.bytes_sent = 0
    return json.dumps(out)


def _pack(value) -> bytes:
    """``distir.session.pack``: a worker's output (a tensor, or a tuple of them) as bytes, which TVM's
    socket session can hand back from another node (it cannot carry a tensor in a reply)."""

    def host(v):
        if isinstance(v, tvm_ffi.Tensor) or hasattr(v, "numpy"):
            return v.numpy()
        if isinstance(v, (list, tuple)) or type(v).__name__ == "Array":
            return tuple(host(x) for x in v)
        return np.asarray(v)

    return pack_arrays(host(value))


_LIBRARY_DIR: list[str] = []  # this process's private folder of the libraries it was sent


def _load_library(data: bytes, sha256: str, device):
    """``distir.session.load_library``: the module's shared library, sent as bytes (a worker on another
    machine cannot read the controller's copy), written once into this process's private folder
    under its SHA-256 (checked), then loaded as Disco's ``load_vm_module`` loads a path."""
    import atexit
    import hashlib
    import os
    import shutil
    import tempfile

    if not _LIBRARY_DIR:
        _LIBRARY_DIR.append(tempfile.mkdtemp(prefix="distir-node-lib-"))
        atexit.register(shutil.rmtree, _LIBRARY_DIR[0], True)
    data = bytes(data)
    if hashlib.sha256(data).hexdigest() != str(sha256):
        raise ValueError("the library sent does not have the SHA-256 the controller computed")
    path = os.path.join(_LIBRARY_DIR[0], f"{sha256}.so")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=_LIBRARY_DIR[0], suffix=".so")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    return tvm_ffi.get_global_func("runtime.disco.load_vm_module")(path, device)


def _disconnect() -> None:
    """``distir.session.disconnect``: close this worker's sockets (worker 0's, when the caller ends a session)."""
    ep = _BY_THREAD.pop(threading.get_ident(), None)
    if ep is not None:
        ep.close()


def worker0_errors(directory: str) -> list[str]:
    """The failures worker 0 of the session served from ``directory`` (a thread of this process) saw."""
    me = _THREAD_OF.get(directory)
    ep = _BY_THREAD.get(me) if me is not None else None
    return ep.errors if ep is not None else []


def unreachable_workers(directory: str, timeout: float) -> list[int]:
    """The workers of the session served from ``directory`` that worker 0 (a thread of this process)
    can no longer reach (see :meth:`SocketEndpoint.unreachable`)."""
    return sorted(w for w, what in probe_workers(directory, timeout).items() if what == "gone")


def probe_workers(directory: str, timeout: float) -> dict[int, str]:
    """Worker -> ``"gone"`` or ``"silent"``: the workers of the session served from ``directory`` that
    did not answer worker 0's ping within ``timeout`` seconds (see :meth:`SocketEndpoint.probe`)."""
    me = _THREAD_OF.get(directory)
    ep = _BY_THREAD.get(me) if me is not None else None
    return ep.probe(timeout) if ep is not None and hasattr(ep, "probe") else {}


def forget_session(directory: str) -> None:
    """The caller ended the session served from ``directory``: drop its worker 0's endpoint and cancel flag
    (a later thread may reuse the OS thread's id)."""
    _CANCEL.pop(directory, None)
    me = _THREAD_OF.pop(directory, None)
    if me is not None:
        ep = _BY_THREAD.pop(me, None)
        if ep is not None:
            ep.close()
        _CONNECT_ERRORS.pop(me, None)


_registered = False


def register() -> None:
    """Register the collectives under Disco's names and distir's session functions (``distir.session.*``);
    a worker needs them before it runs a collective."""
    global _registered
    if _registered:
        return
    for name in CCL_NAMES:
        tvm_ffi.register_global_func(_PREFIX + name, _FUNCS[name], override=True)
    tvm_ffi.register_global_func("distir.session.connect", _connect, override=True)
    tvm_ffi.register_global_func("distir.session.connect_tcp", _connect_tcp, override=True)
    tvm_ffi.register_global_func("distir.session.report", _report, override=True)
    tvm_ffi.register_global_func("distir.session.disconnect", _disconnect, override=True)
    tvm_ffi.register_global_func("distir.session.pack", _pack, override=True)
    tvm_ffi.register_global_func("distir.session.load_library", _load_library, override=True)
    _registered = True


# ---------------------------------------------------------------- a ThreadedSession


@contextmanager
def session(num_workers: int, num_groups: int, timeout: float = TIMEOUT) -> Iterator[ThreadHub]:
    """Serve the collectives of one ThreadedSession run; raise its first failure when the run ends."""
    global _HUB
    if num_groups < 1 or num_workers % num_groups:
        raise DiscoRunError(f"{num_workers} workers cannot be split into {num_groups} equal groups")
    register()
    with _SESSION_LOCK:
        hub = ThreadHub(num_workers, num_groups, timeout)
        _HUB = hub
        try:
            yield hub
        finally:
            _HUB = None
            if not hub.abandoned:  # its threads have ended: their ids may be reused by the next session's
                for me in [t for t, h in _HUB_OF.items() if h is hub]:
                    del _HUB_OF[me]
        if hub.failures:
            raise DiscoRunError("a collective failed on Disco: " + "; ".join(dict.fromkeys(hub.failures)))


def hub_totals(hub: ThreadHub) -> tuple[dict[str, int], int]:
    """(calls, bytes sent) of a ThreadedSession's workers."""
    calls: dict[str, int] = {}
    for ep in hub.endpoints:
        for k, v in ep.counters.calls.items():
            calls[k] = calls.get(k, 0) + v
    return calls, sum(ep.counters.bytes_sent for ep in hub.endpoints)
