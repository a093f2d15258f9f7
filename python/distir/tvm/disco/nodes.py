"""A Disco session spread over several nodes (machines): TVM's ``SocketSession``, the controller's side.

``session="socket"`` (or ``"socket:N@HOST:PORT"``): node 0 is this process (its local workers
are distir's worker processes, worker 0 a thread of this process, as in a process session);
every other node is started with ``python -m distir.tvm.disco.node --host HOST --port PORT
--workers-per-node K`` (:mod:`distir.tvm.disco.node`) and connects to ``HOST:PORT``. Workers
are numbered across nodes (node i holds workers i*K .. i*K+K-1). distir's host collectives join
every pair of workers over TCP, after meeting at a rendezvous in this process
(:class:`~distir.tvm.disco.transport.Rendezvous`). TVM's connections to the nodes pass through a
:class:`~distir.tvm.disco.relay.Relay`, so a node that dies is noticed at once and never makes
TVM abort this process, and a node that never connects ends the start within the bound.

Everything else (bounded waits, naming what failed, closing within seconds, keeping the session
for the next run) is :class:`~distir.tvm.disco.workers.ProcessWorkers`'.
"""

from __future__ import annotations

import importlib
import ipaddress
import os
import re
import threading
import time
from dataclasses import dataclass

from ..errors import DiscoRunError, tvm_message
from . import host_ccl
from .relay import Relay
from .transport import Rendezvous
from .workers import (
    _CONNECT_TIMEOUT,
    TIMEOUT_ENV,
    ProcessWorkers,
    _register,
    collective_timeout,
    kept_session,
    kept_sessions,
    load_disco,
    take_local_pool,
    worker_timeout,
)

__all__ = ["SOCKET_ENV", "SocketSpec", "SocketWorkers", "node_command", "parse_socket", "socket_workers"]

SOCKET_ENV = "DISTIR_SOCKET"  # NODES@HOST:PORT for a plain session="socket"
DEFAULT_SPEC = "2@127.0.0.1:29555"
_SPEC = re.compile(r"^(?P<nodes>[0-9]{1,4})@(?P<host>[A-Za-z0-9.\-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]):(?P<port>[0-9]{1,5})$")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9\-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9\-]{0,61}[A-Za-z0-9])?)*$")


@dataclass(frozen=True)
class SocketSpec:
    """Where the controller listens for the other nodes, and how many nodes there are (this one included)."""

    nodes: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"socket:{self.nodes}@{self.host}:{self.port}"


def parse_socket(session: str) -> SocketSpec | None:
    """``"socket"`` (its settings from ``$DISTIR_SOCKET``, else 2 nodes at 127.0.0.1:29555) or
    ``"socket:NODES@HOST:PORT"`` as a :class:`SocketSpec`; None for another session; a bad one is
    one line (DiscoRunError)."""
    if session == "socket":
        text, where = os.environ.get(SOCKET_ENV, "").strip() or DEFAULT_SPEC, f"${SOCKET_ENV}"
    elif session.startswith("socket:"):
        text, where = session[len("socket:"):], f"session '{session}'"
    else:
        return None
    m = _SPEC.match(text)
    if m is None:
        raise DiscoRunError(f"{where}: expected NODES@HOST:PORT (e.g. {DEFAULT_SPEC}), got {text!r}")
    nodes, host, port = int(m["nodes"]), m["host"].strip("[]"), int(m["port"])
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if _HOSTNAME.match(host) is None:
            raise DiscoRunError(f"{where}: {host!r} is neither an IP address nor a host name") from None
    if host in ("0.0.0.0", "::"):  # refused, not bound
        raise DiscoRunError(f"{where}: give the address the other nodes reach this machine at, not {host}")
    if nodes < 2:
        raise DiscoRunError(f"{where}: a socket session needs at least 2 nodes (this one and another), got {nodes}")
    if not 1 <= port <= 65535:
        raise DiscoRunError(f"{where}: port {port} is not between 1 and 65535")
    return SocketSpec(nodes, host, port)


def node_command(spec: SocketSpec, per_node: int) -> str:
    """The command that starts one of the other nodes."""
    return f"python -m distir.tvm.disco.node --host {spec.host} --port {spec.port} --workers-per-node {per_node}"


class SocketWorkers(ProcessWorkers):
    """A Disco SocketSession of ``num_workers`` workers over ``spec.nodes`` nodes (the module docstring)."""

    def __init__(self, spec: SocketSpec, num_workers: int, num_groups: int = 1, timeout: float | None = None):
        disco = load_disco()
        _register()
        self.spec, self.num_workers, self.num_groups = spec, num_workers, num_groups
        self.bound = worker_timeout(timeout)
        self.closed = False
        self._inflight = None
        if num_workers % spec.nodes:
            raise DiscoRunError(f"{num_workers} workers cannot be spread evenly over {spec.nodes} nodes "
                                f"({spec}): run a multiple of {spec.nodes}")  # fmt: skip
        self.per_node = num_workers // spec.nodes
        try:
            self.relay = Relay(spec.host, spec.port, spec.nodes - 1)
        except OSError as err:
            raise DiscoRunError(f"cannot listen for the other nodes on {spec.host}:{spec.port}: "
                                f"{err.strerror or err}") from None  # fmt: skip
        self.sess, self.pool = None, None
        missing = self._construct(disco)
        if self.pool is None:
            self.relay.close(0.0)
            raise DiscoRunError("Disco's socket session did not make node 0's workers")
        self.cancel = host_ccl.cancel_event(self.pool.directory)
        if missing:
            self.close(failed=True)
            which = ", ".join(str(n) for n in missing)
            raise DiscoRunError(
                f"node{'s' if len(missing) > 1 else ''} {which} of {spec.nodes} did not connect to {spec.host}:{spec.port} "
                f"within {self.bound:g} s (the bound {TIMEOUT_ENV} sets); start each with: "
                f"{node_command(spec, self.per_node)}"
            )
        if self.pool.start_errors:
            self.close(failed=True)
            raise DiscoRunError(f"Disco worker processes could not start: {'; '.join(self.pool.start_errors)}")
        wait = collective_timeout(self.bound)
        rendezvous = Rendezvous(spec.host, num_workers, _CONNECT_TIMEOUT)
        try:
            key = self.pool.directory
            self.call(lambda: self.sess.get_global_func("distir.session.connect_tcp")(
                key, spec.host, rendezvous.port, rendezvous.token, num_workers, num_groups, _CONNECT_TIMEOUT, wait))
            self._await_start()
        except DiscoRunError as err:
            if not self.relay.dead:
                raise
            # a node that left during the start (one started with fewer workers fails TVM's check and exits)
            raise DiscoRunError(f"{err}; each other node must run: {node_command(spec, self.per_node)}") from None
        finally:
            rendezvous.close()
        self.check(self.report(reset=True))

    def _construct(self, disco) -> list[int]:
        """TVM's SocketSession made on a helper thread (its constructor waits for every node without a
        limit): the nodes that did not connect within the bound are stood in for (so it returns) and
        returned. Sets ``sess`` and ``pool`` (node 0's local workers)."""
        box: dict = {}
        api = importlib.import_module("tvm.runtime.disco._ffi_api")
        spec, relay = self.spec, self.relay

        def construct():
            try:
                # called as a function, not through __init_handle_by_constructor__, which holds the GIL
                # while TVM waits in accept(): the relay's threads must run meanwhile
                box["sess"] = api.SocketSession(spec.nodes, self.per_node, self.num_groups, "127.0.0.1", relay.tvm_port)
            except Exception as err:  # noqa: BLE001 - TVM raises several error types
                box["error"] = err
            finally:
                box["pool"] = take_local_pool(threading.get_ident())

        helper = threading.Thread(target=construct, name="distir-socket-session", daemon=True)
        helper.start()
        deadline, missing = time.monotonic() + self.bound, []
        while helper.is_alive() and time.monotonic() < deadline and relay.error is None:
            helper.join(0.05)
        if helper.is_alive():
            missing = relay.stand_in()
            helper.join(10.0)
        self.sess, self.pool = box.get("sess"), box.get("pool")
        if helper.is_alive() or "error" in box or relay.error is not None:
            why = relay.error or (tvm_message(box["error"]) if "error" in box else "TVM's constructor did not return")
            if self.pool is not None:
                self.pool.kill()
            self.relay.release()
            self.relay.close(0.0)
            raise DiscoRunError(f"could not start a socket session ({spec}): {why}")
        return missing

    # -------------------------------------------------------------- health: the other nodes too

    def _gone(self) -> bool:
        return bool(self.relay.dead) or super()._gone()

    def dead_message(self) -> str | None:
        parts = [self._node_text(n, why) for n, why in sorted(self.relay.dead.items())]
        local = super().dead_message()
        return "; ".join(parts + ([local] if local else [])) or None

    def _node_text(self, node: int, why: str) -> str:
        first = node * self.per_node
        peer = self.relay.peer(node)
        return (f"node {node} ({'from ' + peer + ', ' if peer else ''}workers {first}-{first + self.per_node - 1}) "
                f"{why}")  # fmt: skip

    def close(self, failed: bool = False) -> None:
        """As :meth:`ProcessWorkers.close`; a call of TVM waiting for a node is let out first, and the
        relay closes after TVM has destroyed the session (its last words forwarded to the live nodes)."""
        if self.closed:
            return
        if failed or self.relay.dead:
            self.relay.release()
        super().close(failed)
        self.relay.close()


def socket_workers(spec: SocketSpec, num_workers: int, num_groups: int = 1,
                   timeout: float | None = None) -> SocketWorkers:
    """The socket session for ``spec`` and this size: kept from an earlier run, or a new one (whose
    start waits, within the bound, for the other nodes to connect; a kept session of another size on
    the same address is ended first, so its nodes come to this one)."""
    bound = worker_timeout(timeout)
    for other in kept_sessions(lambda key: key[0] == str(spec) and key[1:] != (num_workers, num_groups)):
        other.close()  # the nodes serve one session at a time: a kept one of another size lets them go
    return kept_session((str(spec), num_workers, num_groups), bound,
                        lambda: SocketWorkers(spec, num_workers, num_groups, bound))
