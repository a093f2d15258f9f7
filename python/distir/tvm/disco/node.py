"""One of the other nodes of a socket session: ``python -m distir.tvm.disco.node --host H --port P --workers-per-node K``.

It connects to the controller at ``H:P`` (retrying until the controller listens, within
``--timeout`` seconds), starts its K workers as distir's worker processes (which register
distir's collectives and weight readers) and serves TVM's remote socket session until the
controller ends it or its connection closes; then it waits (within ``--timeout`` again) for the
controller's next session (a session has one size: a run of another size starts a new one),
unless ``--once``. TVM's own entry point
(``tvm.exec.disco_remote_socket_session``) cannot serve distir: its workers lack distir's
collectives, and in the 0.27 wheel it crashes (segmentation fault) on its first command, as
``tvm.runtime.disco`` fails to import after ``import tvm`` (docs/tvm.md, the quirks). When one of
its workers dies the node exits at once (status 1, one line naming the worker), so the
controller learns of it from the node's closed connection. Exit status 0 when the controller
ended the session (``--once``), 1 on a failure or when no controller came within ``--timeout``,
2 on bad arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

_TICK = 0.2  # seconds between looks at the node's worker processes


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m distir.tvm.disco.node",
                                description="Serve one node of a distir socket session (docs/tvm.md).")  # fmt: skip
    p.add_argument("--host", required=True, help="the controller's address (as given to its session)")
    p.add_argument("--port", required=True, type=int, help="the controller's port")
    p.add_argument("--workers-per-node", required=True, type=int, help="workers on this node (the controller's count / nodes)")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds to keep trying to reach the controller, at the start and between sessions "
                        "(default: $DISTIR_WORKER_TIMEOUT, else 130)")
    p.add_argument("--once", action="store_true", help="serve one session, then exit (default: one after another)")
    return p


def _watch(pool_of, stop: threading.Event) -> None:
    """Exit the node as soon as one of its worker processes ends (the controller then sees the node's
    connection close): TVM's node would otherwise wait for that worker's reply without a limit."""
    while not stop.wait(_TICK):
        pool = pool_of()
        if pool is None or pool.unplugged or pool.released:
            continue  # the session is ending: its workers are being told to end, or ended
        dead = {w: code for w, code in pool.dead().items() if code != 0}  # 0: it was told to end
        if dead:
            worker, code = min(dead.items())
            words = pool.last_words(worker)
            print(f"distir node: its worker (local {worker}) exited with status {code}" + (f": {words}" if words else ""),
                  file=sys.stderr, flush=True)  # fmt: skip
            os._exit(1)


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as stop:
        return int(stop.code or 0)
    if not 1 <= args.port <= 65535 or args.workers_per_node < 1:
        print("distir node: --port must be 1-65535 and --workers-per-node at least 1", file=sys.stderr)
        return 2
    from .worker import _load_runtime

    _load_runtime()
    import tvm_ffi

    from ...errors import DistirError
    from ..ranges import register as register_ranges
    from .workers import _register, load_disco, take_local_pool, worker_timeout

    try:
        bound = worker_timeout(args.timeout)
    except DistirError as err:
        print(f"distir node: {err}", file=sys.stderr)
        return 2
    load_disco()
    _register()  # distir's pool and local workers, the collectives (also in this process: its worker 0)
    register_ranges()
    serve = tvm_ffi.get_global_func("runtime.disco.RemoteSocketSession")
    main_thread = threading.get_ident()
    stop = threading.Event()
    pools: list = [None]

    def pool_of():  # the local workers of the session served now (a new pool per session)
        pool = take_local_pool(main_thread)
        if pool is not None:
            pools[0] = pool
        return pools[0]

    threading.Thread(target=_watch, args=(pool_of, stop), name="distir-node-watch", daemon=True).start()
    deadline = time.monotonic() + bound
    try:
        while True:
            try:
                serve(args.host, args.port, args.workers_per_node)
                if args.once:
                    return 0
                deadline = time.monotonic() + bound  # the controller ended the session: wait for its next one
                continue
            except KeyboardInterrupt:
                return 1
            except Exception as err:  # noqa: BLE001 - TVM raises several error types
                lines = [ln for ln in str(err).splitlines() if ln.strip()]
                text = lines[-1] if lines else str(err)
                if "Failed to connect" not in text:
                    print(f"distir node: {type(err).__name__}: {text}", file=sys.stderr)
                    return 1
                if time.monotonic() > deadline:
                    print(f"distir node: no controller at {args.host}:{args.port} within {bound:g} s", file=sys.stderr)
                    return 1
                time.sleep(0.5)  # the controller does not listen yet
    finally:
        stop.set()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
