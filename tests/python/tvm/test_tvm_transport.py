"""The channels between Disco workers (distir.tvm.disco.transport), alone: arrays larger than a socket's
buffer, every worker sending to every other at once, through both endpoints (queues of one
process; Unix-domain sockets joined by connect_sockets), the bytes compared exactly with copies
made before sending; and each way a channel fails (a peer gone, a wait past its limit, a run
already failed, a stranger on the socket, a probe of a dead peer), each bounded."""

from __future__ import annotations

import socket
import struct
import threading
import time

import ml_dtypes
import numpy as np
import pytest

from distir.tvm.disco import transport as T

BIG = 6 << 20  # bytes per array: several times a Unix socket's buffer (checked below)


def _arrays(src: int, dst: int) -> list[np.ndarray]:
    """What ``src`` sends ``dst``: a large array of every kind the frames handle, distinct per pair."""
    rng = np.random.default_rng(100 * src + dst)
    raw = rng.integers(0, 256, size=BIG, dtype=np.uint8)
    wide = rng.standard_normal((BIG // 4 // 64, 128)).astype("float32")[:, ::2]  # not contiguous: copied to send
    return [
        raw,
        raw.view("float32").reshape(-1, 1024),
        wide,
        (raw[: BIG // 2] & 1).astype(bool),
        raw[: BIG // 2].view(np.float16).reshape(2, -1),
        raw[: BIG // 2].view(ml_dtypes.bfloat16),
        np.array(src * 10 + dst, dtype="int64"),  # 0-d
        np.zeros((0, 3), dtype="float32"),  # empty: a frame without payload
    ]


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal dtype, shape and bytes (NaNs and -0.0 included)."""
    return (got.dtype == want.dtype and got.shape == want.shape
            and np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes())  # fmt: skip


def _socket_endpoints(directory: str, n: int, timeout: float) -> list[T.SocketEndpoint]:
    out: dict[int, T.SocketEndpoint] = {}
    errors: list[BaseException] = []

    def join(w):
        try:
            out[w] = T.connect_sockets(directory, w, n, 1, timeout)
        except BaseException as err:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(err)

    threads = [threading.Thread(target=join, args=(w,)) for w in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    assert not errors and len(out) == n, errors
    return [out[w] for w in range(n)]


@pytest.fixture
def endpoints(request, tmp_path):
    """Three workers' endpoints of one kind; closed afterwards."""
    if request.param == "threads":
        yield T.ThreadHub(3, 1, timeout=60.0).endpoints
        return
    eps = _socket_endpoints(str(tmp_path), 3, 60.0)
    yield eps
    for ep in eps:
        ep.close()


@pytest.mark.parametrize("endpoints", ["threads", "sockets"], indirect=True)
def test_every_worker_sends_every_other_arrays_larger_than_a_socket_buffer_at_once(endpoints):
    if isinstance(endpoints[0], T.SocketEndpoint):
        sock = endpoints[0].socks[1]
        assert BIG > 2 * max(sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                             sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))  # fmt: skip
    n = len(endpoints)
    sent = {(s, d): [a.copy() for a in _arrays(s, d)] for s in range(n) for d in range(n) if s != d}
    got: dict[tuple[int, int], list[np.ndarray]] = {}
    errors: list[BaseException] = []

    def worker(ep):
        try:
            for d in range(n):  # everyone posts first (a post never waits for the receiver) ...
                if d != ep.worker:
                    for a in _arrays(ep.worker, d):
                        ep.post(d, a)
            for s in range(n):  # ... then takes, in the order each sender posted
                if s != ep.worker:
                    got[(s, ep.worker)] = [ep.take(s) for _ in sent[(s, ep.worker)]]
        except BaseException as err:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(ep,)) for ep in endpoints]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a transfer did not finish within 120 s"
    assert not errors, errors
    for pair, arrays in sent.items():
        assert len(got[pair]) == len(arrays)
        for i, (g, want) in enumerate(zip(got[pair], arrays)):
            assert _same(g, want), f"{pair} array {i}: {g.dtype}{g.shape} differs from {want.dtype}{want.shape}"
    assert all(not ep.errors for ep in endpoints)


def test_a_frame_larger_than_the_socket_buffer_arrives_whole_through_partial_reads():
    """The frame functions alone over a socket pair: the reader gets the payload in many pieces."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    want = _arrays(3, 4)[0].reshape(3, -1)[:, 5:]  # not contiguous, 6 MiB less a few bytes
    out: list = []
    reader = threading.Thread(target=lambda: out.append(T._recv_frame(b)))
    reader.start()
    T._send_frame(a, want)
    reader.join(60)
    a.close(), b.close()
    assert not reader.is_alive() and _same(out[0], want)


def test_a_peer_that_goes_away_is_an_error_at_once_and_a_probe_reports_it(tmp_path):
    eps = _socket_endpoints(str(tmp_path), 3, 60.0)
    try:
        assert eps[0].unreachable(10.0) == []  # both answer the ping from their reader threads
        eps[2].close()  # worker 2 exits
        t0 = time.monotonic()
        with pytest.raises(T.ChannelError, match=r"^worker 2 closed its connection \(it exited or failed\)$"):
            eps[0].take(2)
        assert time.monotonic() - t0 < 5
        assert eps[0].unreachable(10.0) == [2] and eps[1].unreachable(10.0) == [2]
        assert eps[0].errors == ["worker 2 closed its connection (it exited or failed)"]
        with pytest.raises(T.Aborted, match=r"^the run already failed$"):
            eps[0].post(1, np.zeros(3))  # the run failed: nothing more is sent
        with pytest.raises(T.Aborted, match=r"^the run already failed$"):
            eps[0].take(1)  # ... and a wait for another peer ends at once
    finally:
        for ep in eps:
            ep.close()


def test_a_wait_ends_at_its_limit_and_a_failure_reaches_every_thread_worker():
    hub = T.ThreadHub(2, 1, timeout=0.3)
    t0 = time.monotonic()
    with pytest.raises(T.ChannelError, match=r"^worker 0 waited 0 s for worker 1$"):
        hub.endpoints[0].take(1)
    assert 0.3 <= time.monotonic() - t0 < 5
    hub.endpoints[1].post(0, np.arange(3))
    hub.endpoints[1].fail("allreduce on worker 1: boom")
    np.testing.assert_array_equal(hub.endpoints[0].take(1), np.arange(3))  # what was posted is still taken
    with pytest.raises(T.Aborted, match=r"^the run already failed$"):
        hub.endpoints[0].take(1)
    assert hub.endpoints[0].errors == ["allreduce on worker 1: boom"]


def test_a_stranger_on_the_socket_fails_the_channel(tmp_path):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ep = T.SocketEndpoint(0, 2, 1, 10.0, {1: b})
    try:
        a.sendall(struct.pack("<4sIQ", b"HTTP", 2, 0) + b"[]")
        with pytest.raises(T.ChannelError, match=r"^worker 1 not a distir message$"):
            ep.take(1)
    finally:
        ep.close(), a.close()


def test_joining_stops_when_cancelled_or_past_its_limit(tmp_path):
    cancel = threading.Event()
    cancel.set()
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    with pytest.raises(TimeoutError, match=r"^worker 0 did not listen: the session was abandoned$"):
        T.connect_sockets(str(tmp_path / "a"), 1, 2, 1, 60.0, cancel)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"^not every worker connected within 0 s$"):
        T.connect_sockets(str(tmp_path / "b"), 0, 2, 1, 0.3)
    assert time.monotonic() - t0 < 5
