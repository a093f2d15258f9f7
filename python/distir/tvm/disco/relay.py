"""The controller's side of the connections to the other nodes of a socket session: a relay.

TVM's ``SocketSession`` accepts one TCP connection per remote node and then talks to it from the
caller's thread and from C++ destructors. Two things make talking to a node directly unsafe:
TVM 0.27's socket writes check what ``send()`` returned and throw, so a write to a node that died
(``EPIPE``, ``ECONNRESET``) from a destructor (every dropped Disco handle broadcasts, and so does
the session's end) aborts the caller; and its constructor waits in ``accept()`` without a limit,
so a node that never connects hangs the caller. So TVM listens on a loopback port only this relay
connects to, and the relay accepts the nodes on the address they are told:

- each node accepted (within the startup bound) gets one loopback connection to TVM, and two
  threads copy the bytes between them;
- a node whose connection ends is recorded (which node, from where) at once; its copy towards TVM
  ends with an end of file, so a TVM call waiting for that node's reply fails instead of waiting,
  while what TVM writes to it is still read and dropped: TVM's writes never fail;
- nodes that did not come within the bound are stood in for by connections that only read, so
  TVM's constructor returns and the caller can end the session and report which did not come.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from .transport import tcp_server

__all__ = ["Relay", "free_loopback_port"]

_LOOPBACK = "127.0.0.1"
_CHUNK = 1 << 16


def free_loopback_port() -> int:
    """A loopback TCP port free now (TVM's listener binds it right after; a clash is one failed start)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_LOOPBACK, 0))
        return s.getsockname()[1]


class _Link:
    """One remote node joined to TVM's listener: the node's socket, the loopback one, two copying threads."""

    def __init__(self, relay: Relay, node: int, remote: socket.socket | None, peer: str):
        self.relay, self.node, self.remote, self.peer = relay, node, remote, peer
        self.local = socket.create_connection((_LOOPBACK, relay.tvm_port), timeout=10.0)
        self.local.settimeout(None)
        self.threads = [threading.Thread(target=self._to_remote, name=f"distir-relay-{node}>", daemon=True)]
        if remote is not None:
            self.threads.append(threading.Thread(target=self._to_tvm, name=f"distir-relay-{node}<", daemon=True))
        for t in self.threads:
            t.start()

    def _to_tvm(self) -> None:
        """The node's bytes to TVM; at the node's end (it exited, or the network failed) TVM's reads end too."""
        why = "closed its connection (its process ended or the network failed)"
        try:
            while True:
                data = self.remote.recv(_CHUNK)
                if not data:
                    break
                self.local.sendall(data)
        except OSError as err:
            why = f"closed its connection (its process ended or the network failed: {err.strerror or err})"
        self.relay.lost(self.node, why)
        with contextlib.suppress(OSError):
            self.local.shutdown(socket.SHUT_WR)  # TVM's read sees an end of file; its writes still land

    def _to_remote(self) -> None:
        """TVM's bytes to the node, dropped once the node is gone (TVM's writes never fail); ends when
        TVM closes the connection (the session ended)."""
        live = self.remote is not None
        while True:
            try:
                data = self.local.recv(_CHUNK)
            except OSError:
                data = b""
            if not data:
                break
            if live:
                try:
                    self.remote.sendall(data)
                except OSError as err:
                    live = False
                    self.relay.lost(self.node, "closed its connection (its process ended or the network failed: "
                                               f"{err.strerror or err})")
        self.close()  # TVM closed its end (the session was destroyed): its last words were forwarded

    def close(self) -> None:
        for s in (self.local, self.remote):
            if s is None:
                continue
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


class Relay:
    """Accepts the remote nodes of one socket session on ``host:port`` (see the module docstring)."""

    def __init__(self, host: str, port: int, num_remote: int):
        self.host, self.port, self.num_remote = host, port, num_remote
        self.tvm_port = free_loopback_port()
        self.listener = tcp_server(host, port)  # OSError when the port is taken: the caller reports it
        self.links: dict[int, _Link] = {}  # node (1, 2, ...) -> its link, in the order TVM accepts them
        self.dead: dict[int, str] = {}  # node -> why it is gone
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.error: str | None = None
        self.thread = threading.Thread(target=self._accept, name="distir-relay-accept", daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        self.listener.settimeout(0.1)
        try:
            while len(self.links) < self.num_remote and not self.stop.is_set():
                try:
                    remote, addr = self.listener.accept()
                except TimeoutError:
                    continue
                remote.settimeout(None)
                remote.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                node = len(self.links) + 1
                try:
                    link = self._link(node, remote, f"{addr[0]}:{addr[1]}")
                except OSError as err:
                    remote.close()
                    self.error = f"TVM's listener on {_LOOPBACK}:{self.tvm_port} cannot be reached ({err})"
                    return
                with self.lock:
                    self.links[node] = link
        finally:
            self.listener.close()

    def _link(self, node: int, remote: socket.socket | None, peer: str) -> _Link:
        deadline = time.monotonic() + 10.0  # TVM binds its listener after starting node 0's workers
        while True:
            try:
                return _Link(self, node, remote, peer)
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def connected(self) -> int:
        with self.lock:
            return len(self.links)

    def stand_in(self) -> list[int]:
        """Stop accepting; the nodes that did not come get connections that only read (so TVM's
        constructor returns). Returns those nodes."""
        self.stop.set()
        self.thread.join(5.0)
        missing = []
        with self.lock:
            for node in range(len(self.links) + 1, self.num_remote + 1):
                with contextlib.suppress(OSError):
                    self.links[node] = self._link(node, None, "")
                missing.append(node)
        return missing

    def lost(self, node: int, why: str) -> None:
        with self.lock:
            self.dead.setdefault(node, why)

    def peer(self, node: int) -> str:
        link = self.links.get(node)
        return link.peer if link is not None else ""

    def release(self) -> None:
        """End TVM's reads from every node (a call of TVM left waiting for one returns); its writes
        still land. For a session that failed, before TVM destroys it."""
        with self.lock:
            links = list(self.links.values())
        for link in links:
            with contextlib.suppress(OSError):
                link.local.shutdown(socket.SHUT_WR)

    def close(self, wait: float = 2.0) -> None:
        """Stop accepting, and give the links up to ``wait`` seconds to end. A link ends itself when TVM
        closes its end (the session destroyed, its last words forwarded); one whose session something
        still holds (a Disco handle) stays open, so that TVM's later writes never fail."""
        self.stop.set()
        deadline = time.monotonic() + wait
        with self.lock:
            links = list(self.links.values())
        for link in links:
            link.threads[0].join(max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(OSError):
            self.listener.close()
