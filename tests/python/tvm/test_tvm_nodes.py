"""Disco over two nodes on one machine (loopback only): the controller here (node 0, two workers),
the other node a subprocess (``python -m distir.tvm.disco.node``, two workers). Every bundled IR
example at 4 workers against the single-device interpreter; a node killed in the middle of a run is
a DiscoRunError naming it within seconds, and the next run (a new node) is right; a node that never
connects ends the start within the bound."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from distir import examples
from distir.driver import Driver, random_inputs
from distir.tvm import DiscoRunError
from distir.tvm.disco import nodes, transport
from distir.tvm.disco import workers as disco_workers

HOST = "127.0.0.1"  # loopback only
REPO = Path(__file__).resolve().parents[3]
BOUND = 8.0  # seconds: the bound the failing runs are given
SLACK = 10.0  # seconds past it that the error may take (teardown, a loaded machine)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _start_node(port: int, tmp: Path, per_node: int = 2) -> subprocess.Popen:
    node_tmp = tmp / "node-tmp"  # the node's own temporary folder, as on another machine
    node_tmp.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO / "python") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TMPDIR=str(node_tmp))
    log = open(tmp / f"node-{port}-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115 - the child owns it
    try:
        return subprocess.Popen([sys.executable, "-m", "distir.tvm.disco.node", "--host", HOST, "--port", str(port),
                                 "--workers-per-node", str(per_node), "--timeout", "120"],
                                stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env)  # fmt: skip
    finally:
        log.close()


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """The session option of a two-node session whose other node runs (restarted by a test that kills it)."""
    port = _free_port()
    tmp = tmp_path_factory.mktemp("nodes")
    state = {"session": f"socket:2@{HOST}:{port}", "port": port, "tmp": tmp, "node": _start_node(port, tmp)}
    yield state
    disco_workers.close_all()
    _end(state["node"])


@pytest.mark.parametrize("name", ["mlp", "attention", "llama", "blocks"])
def test_every_bundled_example_is_right_on_two_nodes_of_two_workers(two_nodes, name):
    """At 4 workers; blocks is laid out on a static 2 x 3 mesh, so its session has 6 workers: 3 per node
    (a node of 3 workers started for it; the session of 4 is ended first, which lets the node go)."""
    mod = examples.load(name)
    args = random_inputs(mod, seed=3, dims={"s": 8})
    driver = Driver(mod)
    session, workers, extra = two_nodes["session"], 4, None
    if name == "blocks":
        port = _free_port()
        session, workers, extra = f"socket:2@{HOST}:{port}", 6, _start_node(port, two_nodes["tmp"], per_node=3)
    try:
        r = driver.run(args, 4, backend="tvm", session=session)
    finally:
        if extra is not None:
            disco_workers.close_all()
            _end(extra)
    assert r.ok, r.summary()  # against the single-device interpreter
    assert r.disco["session"] == "socket" and r.disco["nodes"] == 2 and r.disco["num_workers"] == workers
    # bit for bit what the same build gives on four worker threads of one process (the same kernels, the
    # same sums): workers numbered across nodes, pieces and outputs in their places
    t = driver.run(args, 4, backend="tvm", session="threads")
    outs, touts = (r.outputs, t.outputs) if isinstance(r.outputs, tuple) else ((r.outputs,), (t.outputs,))
    assert len(outs) == len(touts)
    for a, b in zip(outs, touts):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    assert r.disco["transport"] == t.disco["transport"]  # the collectives moved the same bytes


def test_the_other_node_loads_the_library_it_was_sent_not_the_controllers_path(two_nodes):
    import hashlib

    mod = examples.load("mlp")
    assert Driver(mod).run(random_inputs(mod, seed=9), 4, backend="tvm", session=two_nodes["session"]).ok
    sent = sorted((two_nodes["tmp"] / "node-tmp").glob("distir-node-lib-*/*.so"))
    assert sent, "the node's workers wrote no library into their own folder"
    for lib in sent:  # each named by the SHA-256 of its bytes (checked by the worker before loading)
        assert hashlib.sha256(lib.read_bytes()).hexdigest() == lib.stem


def test_each_worker_of_both_nodes_reads_its_pieces_of_one_global_checkpoint(two_nodes, tmp_path):
    from distir.tvm.checkpoint import save_global_weights

    mod = examples.load("mlp")
    driver = Driver(mod)
    x, *weights = random_inputs(mod, seed=11)
    path = save_global_weights(driver.local, weights, tmp_path / "g", num_input=1)
    r = driver.run([x], 4, weights=str(path), backend="tvm", session=two_nodes["session"])
    assert r.ok, r.summary()
    t = driver.run([x], 4, weights=str(path), backend="tvm", session="threads")
    assert r.outputs.tobytes() == t.outputs.tobytes()
    scattered = driver.run([x, *weights], 4, backend="tvm", session="threads")  # the caller cuts the weights
    assert r.outputs.tobytes() == scattered.outputs.tobytes()


def test_distir_run_takes_the_socket_session(two_nodes, capsys):
    from distir.cli import main as distir_main

    code = distir_main.main(["run", str(examples.path("mlp")), "-n", "4", "--backend", "tvm",
                             "--session", two_nodes["session"]])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "tvm result on 4 workers matches the single-device result" in out
    assert "Disco SocketSession over 2 nodes of 4 workers (1 group(s), distir's host collectives)" in out


def test_an_artifact_runs_on_two_nodes(two_nodes, tmp_path, capsys):
    from distir.cli import main as distir_main

    assert distir_main.main(["build", str(examples.path("llama")), "-o", str(tmp_path / "llama.art")]) == 0
    capsys.readouterr()
    code = distir_main.main(["run", "--artifact", str(tmp_path / "llama.art"), "-n", "4", "--bind", "s=8",
                             "--session", two_nodes["session"]])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "tvm result on 4 workers matches the single-device result" in out
    assert "the artifact's build for llvm (no tvm.compile)" in out and "SocketSession over 2 nodes" in out


def test_distir_run_refuses_an_unknown_session_in_one_line(capsys):
    from distir.cli import main as distir_main

    with pytest.raises(SystemExit, match=r"^2$"):  # argparse's usage error
        distir_main.main(["run", str(examples.path("mlp")), "-n", "4", "--backend", "tvm", "--session", "mpi"])
    err = capsys.readouterr().err
    assert "invalid choice: 'mpi' (choose from threads, processes, socket, socket:NODES@HOST:PORT)" in err
    assert "Traceback" not in err


def test_a_node_killed_in_the_middle_of_a_run_is_named_within_seconds_and_the_next_run_is_right(two_nodes, monkeypatch):
    monkeypatch.setenv(disco_workers.TIMEOUT_ENV, str(BOUND))
    mod = examples.load("llama")
    driver, args = Driver(mod), random_inputs(mod, seed=5, dims={"s": 8})
    assert driver.run(args, 4, backend="tvm", session=two_nodes["session"]).ok  # a session under this bound
    node = two_nodes["node"]
    os.kill(node.pid, signal.SIGSTOP)  # the node takes no command: the run waits for its workers
    box: dict = {}

    def run():
        try:
            box["result"] = driver.run(args, 4, backend="tvm", session=two_nodes["session"])
        except DiscoRunError as err:
            box["error"] = err

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(1.5)
    assert t.is_alive(), "the run ended while the node was stopped"
    killed = time.monotonic()
    os.kill(node.pid, signal.SIGKILL)
    t.join(BOUND + SLACK)
    assert not t.is_alive(), "no answer after the node was killed"
    took = time.monotonic() - killed
    assert "error" in box, box
    assert took < 5.0, took  # noticed from the node's closed connection, not at the bound
    assert "node 1 (from 127.0.0.1:" in str(box["error"]) and "workers 2-3) closed its connection" in str(box["error"])
    node.wait(10)
    two_nodes["node"] = _start_node(two_nodes["port"], two_nodes["tmp"])
    r = driver.run(args, 4, backend="tvm", session=two_nodes["session"])
    assert r.ok, r.summary()


def _children(pid: int) -> list[int]:
    kids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with open(task / "children") as f:
            kids += [int(k) for k in f.read().split()]
    return kids


def test_a_worker_of_the_other_node_killed_between_runs_is_named_and_the_next_run_is_right(two_nodes):
    mod = examples.load("mlp")
    driver, args = Driver(mod), random_inputs(mod, seed=4)
    assert driver.run(args, 4, backend="tvm", session=two_nodes["session"]).ok
    node = two_nodes["node"]
    workers = _children(node.pid)
    assert len(workers) == 1, workers  # the node's worker 1 (global 3); its worker 0 is a thread of the node
    os.kill(workers[0], signal.SIGKILL)
    assert node.wait(10) == 1  # the node exits when one of its workers does
    t0 = time.monotonic()
    with pytest.raises(DiscoRunError, match=r"node 1 \(from 127\.0\.0\.1:\d+, workers 2-3\) closed its connection"):
        driver.run(args, 4, backend="tvm", session=two_nodes["session"])
    assert time.monotonic() - t0 < 5.0
    two_nodes["node"] = _start_node(two_nodes["port"], two_nodes["tmp"])
    assert driver.run(args, 4, backend="tvm", session=two_nodes["session"]).ok


def test_a_node_that_never_connects_ends_the_start_within_the_bound(monkeypatch):
    monkeypatch.setenv(disco_workers.TIMEOUT_ENV, "3")
    mod = examples.load("mlp")
    port = _free_port()
    t0 = time.monotonic()
    with pytest.raises(DiscoRunError, match=rf"^node 1 of 2 did not connect to 127\.0\.0\.1:{port} within 3 s .*"
                                            rf"python -m distir\.tvm\.disco\.node --host 127\.0\.0\.1 --port {port} "
                                            r"--workers-per-node 2$"):  # fmt: skip
        Driver(mod).run(random_inputs(mod), 4, backend="tvm", session=f"socket:2@{HOST}:{port}")
    assert time.monotonic() - t0 < 3 + SLACK + 20  # the build, the start's bound, the teardown
    with socket.socket() as s:  # the port was let go
        s.bind((HOST, port))


def test_a_node_started_with_too_few_workers_is_one_line_naming_the_command(tmp_path):
    port = _free_port()
    node = _start_node(port, tmp_path, per_node=1)
    try:
        mod = examples.load("mlp")
        with pytest.raises(DiscoRunError, match=r"node 1 \(from 127\.0\.0\.1:\d+, workers 2-3\) closed its connection.*"
                                                r"each other node must run: python -m distir\.tvm\.disco\.node "
                                                rf"--host 127\.0\.0\.1 --port {port} --workers-per-node 2$"):  # fmt: skip
            Driver(mod).run(random_inputs(mod), 4, backend="tvm", session=f"socket:2@{HOST}:{port}")
        assert node.wait(10) == 1
    finally:
        _end(node)


def test_a_count_that_does_not_spread_over_the_nodes_is_one_line():
    mod = examples.load("mlp")
    with pytest.raises(DiscoRunError, match=r"^3 workers cannot be spread evenly over 2 nodes .*run a multiple of 2$"):
        Driver(mod).run(random_inputs(mod), 3, backend="tvm", session=f"socket:2@{HOST}:{_free_port()}")


@pytest.mark.parametrize(("text", "pattern"), [
    ("socket:2@127.0.0.1", r"expected NODES@HOST:PORT"),
    ("socket:1@127.0.0.1:9000", r"at least 2 nodes"),
    ("socket:2@0.0.0.0:9000", r"the address the other nodes reach this machine at, not 0\.0\.0\.0"),
    ("socket:2@127.0.0.1:70000", r"port 70000 is not between 1 and 65535"),
    ("socket:2@bad_host!:9000", r"expected NODES@HOST:PORT"),
    ("socket:2@-x.:9000", r"neither an IP address nor a host name"),
])  # fmt: skip
def test_a_bad_socket_session_is_one_line(text, pattern):
    with pytest.raises(DiscoRunError, match=pattern):
        nodes.parse_socket(text)


def test_plain_socket_takes_its_settings_from_the_environment(monkeypatch):
    monkeypatch.delenv(nodes.SOCKET_ENV, raising=False)
    assert nodes.parse_socket("socket") == nodes.SocketSpec(2, "127.0.0.1", 29555)
    monkeypatch.setenv(nodes.SOCKET_ENV, "3@127.0.0.1:9100")
    assert nodes.parse_socket("socket") == nodes.SocketSpec(3, "127.0.0.1", 9100)
    assert nodes.parse_socket("processes") is None


def test_packed_outputs_come_back_exactly_and_a_damaged_blob_is_refused():
    import ml_dtypes

    tree = (np.arange(6, dtype=np.float32).reshape(2, 3), (np.array(7, dtype=np.int8), np.zeros((0, 4), np.float64)),
            np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16))  # fmt: skip
    back = transport.unpack_arrays(transport.pack_arrays(tree))
    flat_in = [tree[0], tree[1][0], tree[1][1], tree[2]]
    flat_out = [back[0], back[1][0], back[1][1], back[2]]
    for a, b in zip(flat_in, flat_out):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    blob = transport.pack_arrays(tree)
    with pytest.raises(ValueError, match=r"arrays run past its end"):
        transport.unpack_arrays(blob[:-1])
    with pytest.raises(ValueError, match=r"header runs past its end"):
        transport.unpack_arrays(blob[:20])


def test_workers_meet_at_the_rendezvous_over_tcp_and_a_stranger_is_turned_away():
    rv = transport.Rendezvous(HOST, 3, 20.0)
    stranger = socket.create_connection((HOST, rv.port))
    stranger.sendall(b'{"token": "not-it", "worker": 0, "host": "127.0.0.1", "port": 1}\n')
    eps: dict[int, transport.SocketEndpoint] = {}
    errors: list[BaseException] = []

    def join(w):
        try:
            eps[w] = transport.connect_tcp(HOST, rv.port, rv.token, w, 3, 1, 20.0)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=join, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    try:
        assert not errors and sorted(eps) == [0, 1, 2]
        assert stranger.recv(1) == b""  # dropped, not registered
        for w, ep in eps.items():
            for peer in eps:
                if peer != w:
                    ep.post(peer, np.array([w * 10 + peer], dtype=np.int64))
        for w, ep in eps.items():
            got = {peer: int(ep.take(peer)[0]) for peer in eps if peer != w}
            assert got == {peer: peer * 10 + w for peer in eps if peer != w}
    finally:
        stranger.close()
        for ep in eps.values():
            ep.close()
        rv.close()


def test_a_rendezvous_nobody_reaches_gives_up_at_its_limit():
    rv = transport.Rendezvous(HOST, 2, 20.0)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"^not every worker connected within 1 s$|did not answer within 1 s$"):
        transport.connect_tcp(HOST, rv.port, rv.token, 0, 2, 1, 1.0)
    assert time.monotonic() - t0 < 5
    rv.close()
