"""How Disco workers without NCCL reach each other: one FIFO channel per ordered pair of workers.

distir's host collectives (:mod:`distir.tvm.disco.host_ccl`) are written once over two operations of
an :class:`Endpoint`, one per worker: ``post(dst, array)``, which never blocks, and
``take(src)``, which waits for the next array ``src`` posted to this worker. Every worker runs
the same program, so the arrays two workers exchange pair up in program order.

- :class:`ThreadHub`: the workers of a ``ThreadedSession`` are threads of one process; the
  channels are queues in memory.
- :class:`SocketEndpoint`: the workers of a ``ProcessSession`` are processes (worker 0 a thread
  of the caller); every pair is joined by a Unix-domain stream socket in a directory only the
  user can enter. A thread per peer reads its socket into a queue, so a post never waits for
  the receiver. A peer that dies closes its sockets: the kernel tells every other worker at
  once (end of file), and a worker that fails closes its own, so a failure reaches every
  worker within milliseconds instead of after a timeout.
- :func:`connect_tcp`: the workers of a session over several machines (``SocketSession``) are
  joined the same way over TCP, after meeting at the controller's :class:`Rendezvous` (each
  connection starts with the session's token).

Nothing here raises into Disco: errors are :class:`ChannelError`, which the collectives turn
into a recorded failure (a Python exception in a Disco worker thread aborts the process).
"""

from __future__ import annotations

import json
import os
import queue
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Aborted", "ChannelError", "Endpoint", "Rendezvous", "SocketEndpoint", "ThreadHub", "connect_sockets", "connect_tcp",
           "pack_arrays", "unpack_arrays"]

_POLL = 0.05  # seconds between looks at the failure flag while waiting
_HEADER = struct.Struct("<4sIQ")  # magic, length of the metadata, length of the payload
_MAGIC = b"dsr1"


class ChannelError(Exception):
    """A channel failed: a peer is gone or a wait timed out."""


class Aborted(ChannelError):
    """The run already failed elsewhere; this worker stops waiting (nothing new to report)."""


@dataclass
class Counters:
    """What one worker's collectives did: calls (counted by a group's first member) and bytes it sent."""

    calls: dict[str, int] = field(default_factory=dict)
    bytes_sent: int = 0

    def count(self, name: str, nbytes: int, first: bool) -> None:
        if first:
            self.calls[name] = self.calls.get(name, 0) + 1
        self.bytes_sent += int(nbytes)


class Endpoint:
    """One worker's side of the channels (see the module docstring)."""

    worker: int
    num_workers: int
    num_groups: int
    timeout: float
    counters: Counters

    @property
    def group_size(self) -> int:
        return self.num_workers // self.num_groups

    def members(self, in_group: bool) -> tuple[int, ...]:
        """The workers of this worker's group (``in_group``) or of the session, in order."""
        if not in_group:
            return tuple(range(self.num_workers))
        first = self.worker // self.group_size * self.group_size
        return tuple(range(first, first + self.group_size))

    def post(self, dst: int, array: np.ndarray) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def take(self, src: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def fail(self, message: str) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def errors(self) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _wait(self, q: queue.Queue, src: int, broken: threading.Event):
        deadline = time.monotonic() + self.timeout
        while True:
            if broken.is_set() and q.empty():
                raise Aborted("the run already failed")
            try:
                item = q.get(timeout=_POLL)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise ChannelError(f"worker {self.worker} waited {self.timeout:.0f} s for worker {src}") from None
                continue
            if isinstance(item, ChannelError):
                q.put(item)  # later takes see it too
                raise item
            return item


# ---------------------------------------------------------------- threads of one process


class ThreadHub:
    """The channels of a ThreadedSession's workers: a queue per ordered pair, shared failures."""

    def __init__(self, num_workers: int, num_groups: int, timeout: float):
        self.num_workers, self.num_groups, self.timeout = num_workers, num_groups, timeout
        self.queues = {(s, d): queue.Queue() for s in range(num_workers) for d in range(num_workers) if s != d}
        self.broken = threading.Event()
        self.lock = threading.Lock()
        self.failures: list[str] = []
        self.abandoned = False  # the caller gave up on the session: its worker threads may still run
        self.endpoints = [_ThreadEndpoint(self, w) for w in range(num_workers)]

    def fail(self, message: str) -> None:
        with self.lock:
            self.failures.append(message)
        self.broken.set()


class _ThreadEndpoint(Endpoint):
    def __init__(self, hub: ThreadHub, worker: int):
        self.hub, self.worker = hub, worker
        self.num_workers, self.num_groups, self.timeout = hub.num_workers, hub.num_groups, hub.timeout
        self.counters = Counters()

    def post(self, dst: int, array: np.ndarray) -> None:
        if self.hub.broken.is_set():
            raise Aborted("the run already failed")
        self.hub.queues[(self.worker, dst)].put(array)

    def take(self, src: int) -> np.ndarray:
        return self._wait(self.hub.queues[(src, self.worker)], src, self.hub.broken)

    def fail(self, message: str) -> None:
        self.hub.fail(message)

    @property
    def errors(self) -> list[str]:
        return list(self.hub.failures)


# ---------------------------------------------------------------- processes: Unix-domain sockets


def _send_frame(sock: socket.socket, array: np.ndarray) -> None:
    array = np.asarray(array)
    if not array.flags.c_contiguous:  # not np.ascontiguousarray: it makes a 0-d array 1-d
        array = array.copy(order="C")
    meta = json.dumps([array.dtype.name, list(array.shape)]).encode()
    payload = memoryview(array.reshape(-1).view(np.uint8)) if array.size else memoryview(b"")
    sock.sendall(_HEADER.pack(_MAGIC, len(meta), payload.nbytes) + meta)
    if payload.nbytes:
        sock.sendall(payload)


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError
        got += k
    return buf


def pack_arrays(tree) -> bytes:
    """A nest of arrays (tuples and lists of numpy arrays) as bytes: a JSON header (its length first),
    then every array's bytes. How a worker on another node hands back its outputs: TVM's socket
    session cannot carry a tensor in a reply, but it carries bytes."""
    blobs: list[bytes] = []

    def spec(node):
        if isinstance(node, (tuple, list)):
            return {"t": [spec(n) for n in node]}
        a = np.asarray(node)
        if not a.flags.c_contiguous:
            a = a.copy(order="C")
        blobs.append(a.tobytes())
        return {"a": [a.dtype.name, list(a.shape), len(blobs[-1])]}

    head = json.dumps(spec(tree)).encode()
    return struct.pack("<Q", len(head)) + head + b"".join(blobs)


def unpack_arrays(data: bytes):
    """The nest :func:`pack_arrays` packed (tuples of numpy arrays); a malformed blob is a ValueError."""
    view = memoryview(data)
    if len(view) < 8:
        raise ValueError("a packed value is shorter than its header")
    (n,) = struct.unpack("<Q", view[:8])
    if n > len(view) - 8:
        raise ValueError("a packed value's header runs past its end")
    pos = [8 + n]

    def build(node):
        if "t" in node:
            return tuple(build(c) for c in node["t"])
        dtype, shape, nbytes = node["a"]
        end = pos[0] + int(nbytes)
        if end > len(view):
            raise ValueError("a packed value's arrays run past its end")
        out = np.frombuffer(view[pos[0]:end], dtype=np.dtype(dtype)).reshape(shape).copy()
        pos[0] = end
        return out

    try:
        return build(json.loads(bytes(view[8:8 + n])))
    except (KeyError, TypeError, json.JSONDecodeError) as err:
        raise ValueError(f"a packed value is malformed ({err})") from None


_PING, _PONG = "distir.ping", "distir.pong"  # a liveness probe and its answer, handled by the reader threads


def _send_signal(sock: socket.socket, what: str) -> None:
    meta = json.dumps([what, []]).encode()
    sock.sendall(_HEADER.pack(_MAGIC, len(meta), 0) + meta)


def _recv_frame(sock: socket.socket) -> np.ndarray | str:
    magic, meta_len, nbytes = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if magic != _MAGIC:
        raise ValueError("not a distir message")
    dtype, shape = json.loads(bytes(_recv_exact(sock, meta_len)))
    if dtype in (_PING, _PONG):
        return dtype
    data = _recv_exact(sock, nbytes) if nbytes else bytearray()
    return np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape)


class SocketEndpoint(Endpoint):
    """One worker of a ProcessSession, joined to every other worker by a socket."""

    def __init__(self, worker: int, num_workers: int, num_groups: int, timeout: float, socks: dict[int, socket.socket]):
        self.worker, self.num_workers, self.num_groups, self.timeout = worker, num_workers, num_groups, timeout
        self.socks = socks
        self.inbox = {peer: queue.Queue() for peer in socks}
        self.broken = threading.Event()
        self.failures: list[str] = []
        self.counters = Counters()
        self.send_lock = threading.Lock()
        self.pongs = {peer: queue.Queue() for peer in socks}
        for peer, sock in socks.items():
            threading.Thread(target=self._read, args=(peer, sock), name=f"distir-ccl-{worker}<{peer}", daemon=True).start()

    def _read(self, peer: int, sock: socket.socket) -> None:
        try:
            while True:
                frame = _recv_frame(sock)
                if isinstance(frame, str) and frame == _PING:
                    with self.send_lock:
                        _send_signal(sock, _PONG)
                elif isinstance(frame, str):
                    self.pongs[peer].put(frame)
                else:
                    self.inbox[peer].put(frame)
        except (EOFError, OSError, ValueError) as err:
            why = "closed its connection (it exited or failed)" if isinstance(err, (EOFError, ConnectionError)) else str(err)
            if not self.broken.is_set():
                self.failures.append(f"worker {peer} {why}")
            self.broken.set()
            self.inbox[peer].put(ChannelError(f"worker {peer} {why}"))
            self.pongs[peer].put(ChannelError(f"worker {peer} {why}"))

    def unreachable(self, timeout: float) -> list[int]:
        """The peers that are gone (see :meth:`probe`)."""
        return sorted(peer for peer, what in self.probe(timeout).items() if what == "gone")

    def probe(self, timeout: float) -> dict[int, str]:
        """Peer -> ``"gone"`` or ``"silent"`` for the peers that did not answer, asked before a run: each
        live one answers a ping from its reader thread (even while it computes); one that was killed
        can no longer answer, and its end of file comes instead once the kernel has torn it down. A
        peer silent for ``timeout`` seconds may be slow or stopped (the caller looks at its process)."""
        asked = []
        for peer, sock in self.socks.items():
            try:
                with self.send_lock:
                    _send_signal(sock, _PING)
                asked.append(peer)
            except OSError:
                pass
        out = {peer: "gone" for peer in self.socks if peer not in asked}
        deadline = time.monotonic() + timeout
        for peer in asked:
            try:
                answer = self.pongs[peer].get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                out[peer] = "silent"
                continue
            if isinstance(answer, ChannelError):
                self.pongs[peer].put(answer)  # later probes see it too
                out[peer] = "gone"
        return dict(sorted(out.items()))

    def post(self, dst: int, array: np.ndarray) -> None:
        if self.broken.is_set():
            raise Aborted("the run already failed")
        try:
            with self.send_lock:
                _send_frame(self.socks[dst], array)
        except OSError as err:
            raise ChannelError(f"worker {dst} cannot be reached ({err.strerror or err})") from None

    def take(self, src: int) -> np.ndarray:
        return self._wait(self.inbox[src], src, self.broken)

    def fail(self, message: str) -> None:
        """Record the failure and close every socket, so that every peer learns of it at once."""
        self.failures.append(message)
        self.broken.set()
        self.close()

    def close(self) -> None:
        for sock in self.socks.values():
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    @property
    def errors(self) -> list[str]:
        return list(self.failures)


def socket_path(directory: str, worker: int) -> str:
    return os.path.join(directory, f"w{worker}.sock")


def _join(worker: int, num_workers: int, listener: socket.socket, dial, hello: bytes, check_hello,
          give_up) -> dict[int, socket.socket]:
    """Join ``worker`` to every other worker: connect to every lower id (``dial(peer)`` retries until
    that worker listens, then sends ``hello`` and this worker's id) and accept every higher one (each
    sends its hello, checked by ``check_hello``: a stranger's connection is dropped). No worker
    waits for a higher one, so all finish; ``give_up(what)`` raises when the caller gives up."""
    socks: dict[int, socket.socket] = {}
    try:
        for peer in range(worker):
            s = dial(peer)
            s.sendall(hello + struct.pack("<I", worker))
            socks[peer] = s
        listener.settimeout(0.1)
        while len(socks) < num_workers - 1:
            try:
                s, _addr = listener.accept()
            except TimeoutError:
                give_up("not every worker connected")
                continue
            s.settimeout(1.0)  # a stranger that sends nothing must not hold the join
            try:
                got = _recv_exact(s, len(hello) + 4)
            except (OSError, EOFError):
                s.close()
                continue
            (peer,) = struct.unpack("<I", got[len(hello):])
            if not check_hello(bytes(got[: len(hello)])) or not worker < peer < num_workers or peer in socks:
                s.close()
                continue
            s.settimeout(None)
            socks[peer] = s
    except BaseException:
        for s in socks.values():
            s.close()
        raise
    finally:
        listener.close()
    return socks


def _deadline(timeout: float, cancel: threading.Event | None):
    deadline = time.monotonic() + timeout

    def give_up(what: str) -> None:
        if cancel is not None and cancel.is_set():
            raise TimeoutError(f"{what}: the session was abandoned")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout:.0f} s")

    return give_up


def connect_sockets(directory: str, worker: int, num_workers: int, num_groups: int, timeout: float,
                    cancel: threading.Event | None = None, wait: float | None = None) -> SocketEndpoint:
    """Join worker ``worker`` to every other worker of the session through ``directory``.

    Each worker listens on its own socket, connects to every lower id (retrying until that
    worker listens) and accepts every higher one; a connection starts with the connecting
    worker's id. ``cancel`` (set by the caller when a worker process ended before joining) or
    ``timeout`` stops the waiting. The endpoint's takes wait ``wait`` seconds at most (default
    ``timeout``)."""
    give_up = _deadline(timeout, cancel)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path(directory, worker))
    listener.listen(max(1, num_workers))

    def dial(peer: int) -> socket.socket:
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(socket_path(directory, peer))
                return s
            except (FileNotFoundError, ConnectionRefusedError):
                s.close()
                give_up(f"worker {peer} did not listen")
                time.sleep(0.01)

    socks = _join(worker, num_workers, listener, dial, b"", lambda _h: True, give_up)
    return SocketEndpoint(worker, num_workers, num_groups, timeout if wait is None else wait, socks)


# ---------------------------------------------------------------- nodes: TCP, addresses met at a rendezvous


_TOKEN_BYTES = 32  # a session's token: 32 hex characters every connection of its workers starts with
_LINE_LIMIT = 1 << 16  # bytes of a rendezvous message at most


def _tcp(host: str, port: int, give_up) -> socket.socket:
    """A TCP connection to ``host:port``, retried (it may not listen yet) until ``give_up`` raises."""
    while True:
        try:
            s = socket.create_connection((host, port), timeout=2.0)
        except OSError:
            give_up(f"{host}:{port} did not answer")
            time.sleep(0.05)
            continue
        s.settimeout(None)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s


def tcp_server(host: str, port: int, backlog: int = 16) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: one the system chooses), IPv4 or IPv6 as
    ``host`` is."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    return socket.create_server((host, port), family=family, backlog=backlog)


def _send_line(sock: socket.socket, obj) -> None:
    sock.sendall(json.dumps(obj).encode() + b"\n")


def _recv_line(sock: socket.socket, give_up) -> object:
    """One JSON line (bounded in length), waiting in short steps so that ``give_up`` is honored."""
    buf = bytearray()
    sock.settimeout(0.1)
    try:
        while not buf.endswith(b"\n"):
            try:
                chunk = sock.recv(4096)
            except TimeoutError:
                give_up("the rendezvous did not answer")
                continue
            if not chunk:
                raise EOFError("the rendezvous closed the connection")
            buf += chunk
            if len(buf) > _LINE_LIMIT:
                raise ValueError("a rendezvous message is too long")
    finally:
        sock.settimeout(None)
    return json.loads(bytes(buf))


class Rendezvous:
    """Where the workers of a session spread over nodes learn each other's addresses (in the controller).

    Each worker connects (to ``host``, the address the nodes reach the controller at; the port is
    chosen by the system and handed to the workers through Disco), sends the session's token, its
    id and the address it listens on; once every worker has, each is sent the table of all. A
    connection without the token or with a bad message is dropped. Nothing waits past
    ``timeout`` seconds or past :meth:`close`."""

    def __init__(self, host: str, num_workers: int, timeout: float):
        import secrets

        self.token = secrets.token_hex(_TOKEN_BYTES // 2)
        self.num_workers, self.timeout = num_workers, timeout
        self.listener = tcp_server(host, 0, max(16, num_workers))
        self.host, self.port = host, self.listener.getsockname()[1]
        self.closed = threading.Event()
        self.error: str | None = None
        self.thread = threading.Thread(target=self._serve, name="distir-rendezvous", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        give_up = _deadline(self.timeout, self.closed)
        table: dict[int, tuple[str, int]] = {}
        conns: list[socket.socket] = []
        self.listener.settimeout(0.1)
        try:
            while len(table) < self.num_workers:
                try:
                    s, _addr = self.listener.accept()
                except TimeoutError:
                    give_up(f"{self.num_workers - len(table)} of {self.num_workers} workers did not reach the rendezvous")
                    continue
                try:
                    msg = _recv_line(s, _deadline(2.0, self.closed))
                    w, host, port = int(msg["worker"]), str(msg["host"]), int(msg["port"])
                    ok = msg["token"] == self.token and 0 <= w < self.num_workers and w not in table
                except (OSError, EOFError, TimeoutError, ValueError, KeyError, TypeError):
                    ok = False
                if not ok:
                    s.close()
                    continue
                table[w] = (host, port)
                conns.append(s)
            for s in conns:
                _send_line(s, {str(w): list(a) for w, a in sorted(table.items())})
        except (OSError, TimeoutError) as err:
            self.error = str(err)
        finally:
            for s in conns:
                s.close()
            self.listener.close()

    def close(self) -> None:
        self.closed.set()
        self.thread.join(5.0)


def connect_tcp(host: str, port: int, token: str, worker: int, num_workers: int, num_groups: int, timeout: float,
                cancel: threading.Event | None = None, wait: float | None = None) -> SocketEndpoint:
    """Join worker ``worker`` to every other worker of a session spread over nodes, over TCP.

    The worker meets the others at the controller's :class:`Rendezvous` (``host:port``, ``token``):
    it listens on the address its node reaches the controller from (so the others can reach it
    too; on one machine, the loopback address), on a port the system chooses, and registers it;
    then it joins the others as :func:`connect_sockets` does, each connection starting with the
    token. ``timeout`` bounds all of it (``cancel`` ends it sooner); the endpoint's takes wait
    ``wait`` seconds at most (default ``timeout``)."""
    give_up = _deadline(timeout, cancel)
    rv = _tcp(host, port, give_up)
    try:
        mine = rv.getsockname()[0]  # the local address on the route to the controller
        listener = tcp_server(mine, 0, max(1, num_workers))
        _send_line(rv, {"token": token, "worker": worker, "host": mine, "port": listener.getsockname()[1]})
        table = _recv_line(rv, give_up)
    finally:
        rv.close()
    addresses = {int(w): (str(a[0]), int(a[1])) for w, a in table.items()}
    hello = token.encode()

    def dial(peer: int) -> socket.socket:
        return _tcp(*addresses[peer], give_up)

    socks = _join(worker, num_workers, listener, dial, hello, lambda h: h == hello, give_up)
    for s in socks.values():
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return SocketEndpoint(worker, num_workers, num_groups, timeout if wait is None else wait, socks)
