"""A CPU collective library for Disco's threaded sessions, written in Python.

Disco's builtins (``runtime.disco.allreduce`` and the rest) forward to
``runtime.disco.<ccl>.<name>``, where ``<ccl>`` is the library the workers were set up
with (``nccl`` after ``session.init_ccl("nccl", ...)``). Workers of a
``ThreadedSession`` that never called ``init_ccl`` have an empty library name, so the
builtins look for ``runtime.disco..allreduce``: the functions registered here. The
exported module calls the same builtins on GPUs with NCCL and on CPUs with this.

The workers are threads of this process; each collective is a rendezvous: every worker
of the group puts its buffer in a shared slot, waits at a barrier, computes its result
from all the slots, and waits again before the slots are reused. A Python exception in a
worker thread would abort the process (Disco's workers do not catch it), so nothing here
raises: a failure is recorded, the barriers are broken so that no worker waits forever,
and :func:`session` raises it in the caller's thread when the run ends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import tvm_ffi

from ..ir.combine import combine
from .errors import DiscoRunError

__all__ = ["CCL_NAMES", "State", "session"]

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
_TIMEOUT = 120.0  # seconds a worker waits for the others before the run is declared failed


@dataclass
class _Rendezvous:
    """One barrier and one slot table for a set of workers that meet for collectives."""

    members: tuple[int, ...]
    barrier: threading.Barrier = field(init=False)
    slots: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.barrier = threading.Barrier(len(self.members), timeout=_TIMEOUT)


@dataclass
class State:
    """The session the collectives serve: worker count, groups, rendezvous points, failures."""

    num_workers: int
    num_groups: int
    errors: list[str] = field(default_factory=list)
    bytes_sent: int = 0
    calls: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    mailboxes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.group_size = self.num_workers // self.num_groups
        everyone = tuple(range(self.num_workers))
        self.world = _Rendezvous(everyone)
        self.groups = [
            _Rendezvous(tuple(range(g * self.group_size, (g + 1) * self.group_size))) for g in range(self.num_groups)
        ]
        self.mail_cv = threading.Condition()

    def rendezvous(self, worker: int, in_group: bool) -> _Rendezvous:
        return self.groups[worker // self.group_size] if in_group else self.world

    def fail(self, msg: str) -> None:
        with self.lock:
            self.errors.append(msg)
        for r in [self.world, *self.groups]:
            r.barrier.abort()
        with self.mail_cv:
            self.mail_cv.notify_all()

    def count(self, name: str, nbytes: int, first: bool) -> None:
        """Add the bytes one worker sent; ``first``: this worker counts the call (once per group)."""
        with self.lock:
            if first:
                self.calls[name] = self.calls.get(name, 0) + 1
            self.bytes_sent += nbytes


_STATE: State | None = None
_SESSION_LOCK = threading.Lock()  # one session at a time uses these global functions
_worker_id_func = None


def _me() -> int:
    global _worker_id_func
    if _worker_id_func is None:
        _worker_id_func = tvm_ffi.get_global_func("runtime.disco.worker_id")
    return int(_worker_id_func()[0])


def _exchange(state: State, r: _Rendezvous, worker: int, value) -> dict:
    """Put ``value`` in the slot of ``worker``; return every member's value once all have."""
    r.slots[worker] = value
    r.barrier.wait()
    seen = dict(r.slots)
    r.barrier.wait()  # nobody overwrites a slot before everyone has read them
    return seen


def _safe(name: str):
    """Wrap a collective so that it records failures instead of raising in a worker thread."""

    def wrap(fn):
        def run(*args):
            state = _STATE
            if state is None:
                return  # not in a distir session; nothing to do, nothing to raise into
            if state.errors:
                return  # an earlier failure broke the run; do not wait on broken barriers
            try:
                fn(state, *args)
            except threading.BrokenBarrierError:
                if not state.errors:
                    state.fail(f"{name}: a worker did not arrive within {_TIMEOUT:.0f} s")
            except Exception as err:  # noqa: BLE001 - must never propagate into a Disco worker
                state.fail(f"{name} on worker {_me()}: {type(err).__name__}: {err}")
            return

        run.__name__ = name
        return run

    return wrap


#: Disco's ReduceKind codes (tvm/runtime/disco/builtin.h) and the partial each combines
_KINDS = {0: "sum", 2: "min", 3: "max", 4: "avg"}


@_safe("allreduce")
def _allreduce(state: State, send, kind: int, in_group: bool, recv) -> None:
    """The parts combined as distir.ir.combine says for their dtype (floats added in float64,
    integers wrapping around, bools by any / all), as the simulator combines them."""
    w = _me()
    r = state.rendezvous(w, in_group)
    data = send.numpy()
    seen = _exchange(state, r, w, data)
    if int(kind) not in _KINDS:
        raise ValueError(f"reduce kind {int(kind)} is not one distir emits ({', '.join(_KINDS.values())})")
    out = combine(_KINDS[int(kind)], [seen[m] for m in r.members])
    recv.copyfrom(np.array(out, order="C"))  # 0-d stays 0-d
    state.count("allreduce", 2 * (len(r.members) - 1) * data.nbytes // len(r.members), w == r.members[0])  # a ring


@_safe("allgather")
def _allgather(state: State, send, in_group: bool, recv) -> None:
    w = _me()
    r = state.rendezvous(w, in_group)
    data = send.numpy()
    seen = _exchange(state, r, w, data)
    flat = np.concatenate([seen[m].reshape(-1) for m in r.members])
    recv.copyfrom(flat.reshape(recv.shape))
    state.count("allgather", (len(r.members) - 1) * data.nbytes, w == r.members[0])


def _root(state: State, w: int, in_group: bool) -> bool:
    return (w % state.group_size == 0) if in_group else w == 0


@_safe("broadcast_from_worker0")
def _broadcast(state: State, send, in_group: bool, recv) -> None:
    w = _me()
    r = state.rendezvous(w, in_group)
    seen = _exchange(state, r, w, send.numpy() if _root(state, w, in_group) else None)
    recv.copyfrom(seen[r.members[0]].reshape(recv.shape))
    if _root(state, w, in_group):
        state.count("broadcast", (len(r.members) - 1) * recv.numpy().nbytes, True)


@_safe("scatter_from_worker0")
def _scatter(state: State, send, in_group: bool, recv) -> None:
    w = _me()
    r = state.rendezvous(w, in_group)
    seen = _exchange(state, r, w, send.numpy() if _root(state, w, in_group) else None)
    pieces = np.split(seen[r.members[0]].reshape(-1), len(r.members))
    recv.copyfrom(pieces[r.members.index(w)].reshape(recv.shape))
    if _root(state, w, in_group):
        state.count("scatter", sum(p.nbytes for p in pieces[1:]), True)


@_safe("gather_to_worker0")
def _gather(state: State, send, in_group: bool, recv) -> None:
    w = _me()
    r = state.rendezvous(w, in_group)
    data = send.numpy()
    seen = _exchange(state, r, w, data)
    if _root(state, w, in_group):
        flat = np.concatenate([seen[m].reshape(-1) for m in r.members])
        recv.copyfrom(flat.reshape(recv.shape))
    state.count("gather", 0 if _root(state, w, in_group) else data.nbytes, _root(state, w, in_group))


def _post(state: State, src: int, dst: int, data: np.ndarray) -> None:
    with state.mail_cv:
        state.mailboxes.setdefault((src, dst), []).append(data)
        state.mail_cv.notify_all()
    state.count("send", data.nbytes, True)


def _take(state: State, src: int, dst: int, recv) -> None:
    with state.mail_cv:
        ok = state.mail_cv.wait_for(lambda: state.mailboxes.get((src, dst)) or state.errors, timeout=_TIMEOUT)
        if state.errors:
            return
        if not ok:
            raise TimeoutError(f"worker {dst} waited {_TIMEOUT:.0f} s for a message from worker {src}")
        data = state.mailboxes[(src, dst)].pop(0)
    recv.copyfrom(data.reshape(recv.shape))


@_safe("send_to_worker")
def _send_to_worker(state: State, buffer, receiver: int) -> None:
    _post(state, _me(), int(receiver), buffer.numpy())


@_safe("recv_from_worker")
def _recv_from_worker(state: State, buffer, sender: int) -> None:
    _take(state, int(sender), _me(), buffer)


@_safe("recv_from_worker0")
def _recv_from_worker0(state: State, buffer) -> None:
    _take(state, 0, _me(), buffer)


@_safe("send_to_next_group")
def _send_to_next_group(state: State, buffer) -> None:
    w = _me()
    _post(state, w, w + state.group_size, buffer.numpy())


@_safe("recv_from_prev_group")
def _recv_from_prev_group(state: State, buffer) -> None:
    w = _me()
    _take(state, w - state.group_size, w, buffer)


@_safe("regroup")
def _regroup(state: State, send, params, member_ids, recv) -> None:
    """distir's R.ccl.regroup: a dim re-blocked in units of ``unit_to`` elements instead of
    ``unit_from`` (see distir.ops.collectives); nothing moves when the two blockings agree."""
    w = _me()
    axis, extent, unit_from, unit_to = (int(v) for v in params)
    members = [int(m) for m in member_ids.numpy()]
    data = send.numpy()
    seen = _exchange(state, state.world, w, data)
    n = len(members)
    before = -(-(extent // unit_from) // n) * unit_from
    after = -(-(extent // unit_to) // n) * unit_to
    if before == after:
        recv.copyfrom(data)
        return
    full = np.concatenate([seen[m] for m in members], axis=axis)
    full = np.take(full, np.arange(min(extent, full.shape[axis])), axis=axis)
    if full.shape[axis] < n * after:
        widths = [(0, 0)] * full.ndim
        widths[axis] = (0, n * after - full.shape[axis])
        full = np.pad(full, widths)
    j = members.index(w)
    recv.copyfrom(np.ascontiguousarray(np.take(full, np.arange(j * after, (j + 1) * after), axis=axis)))
    state.count("regroup", (n - 1) * data.nbytes, w == members[0])


@_safe("exchange")
def _block_exchange(state: State, send, params, member_ids, recv) -> None:
    """distir's R.ccl.exchange: this worker's target block, its own elements kept and every other
    real element taken from its holder (see distir.ir.exchange); counts the bytes it receives."""
    from ..ir.exchange import gather_plan

    w = _me()
    members = [int(m) for m in member_ids.numpy()]
    data = send.numpy()
    seen = _exchange(state, state.world, w, data)
    if w not in members:
        recv.copyfrom(np.zeros(recv.shape, dtype=data.dtype))  # a worker outside the mesh holds no value
        return
    src_shape, src, dst_shape, dst, sizes = decode_exchange([int(v) for v in params])
    pos = members.index(w)
    dst_index, source, index, _ = gather_plan(src_shape, src, dst_shape, dst, sizes, pos)
    values = np.empty(source.shape, dtype=data.dtype)
    received = 0
    for s in np.unique(source):
        take = source == s
        values[take] = seen[members[int(s)]].reshape(-1)[index[take]]
        if int(s) != pos:
            received += int(take.sum()) * data.dtype.itemsize
    out = np.zeros(recv.shape, dtype=data.dtype)
    out.reshape(-1)[dst_index] = values
    recv.copyfrom(out)
    state.count("exchange", received, pos == 0)


def decode_exchange(values: list[int]):
    """The sizes and layouts ``emit_exchange`` passes: (source shape, its placement, target shape,
    its placement, mesh sizes)."""
    from ..ir.placement import Placement, Replicate, Shard

    k = values[0]
    sizes = values[1 : 1 + k]
    i = 1 + k
    src_shape = values[i + 1 : i + 1 + values[i]]
    i += 1 + values[i]
    dst_shape = values[i + 1 : i + 1 + values[i]]
    i += 1 + values[i]

    def placement(at: int, rank: int):
        """(the placement coded at ``at``, where the next code starts): see ``exchange_codes``."""
        if values[at] == 1:
            return Placement.blocked(values[at + 1 : at + 1 + rank]), at + 1 + rank
        codes = values[at + 1 : at + 1 + k]
        return Placement(tuple(Replicate() if c < 0 else Shard(c) for c in codes)), at + 1 + k

    src, i = placement(i, len(src_shape))
    dst, _ = placement(i, len(dst_shape))
    return src_shape, src, dst_shape, dst, sizes


@_safe("sync_worker")
def _sync_worker(state: State) -> None:
    return None  # CPU work is synchronous


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

_registered = False


def register() -> None:
    """Register the collective functions (Disco's names and distir's own); a VM that calls them needs them
    registered before it loads."""
    global _registered
    if _registered:
        return
    for name in CCL_NAMES:
        tvm_ffi.register_global_func(_PREFIX + name, _FUNCS[name], override=True)
    tvm_ffi.register_global_func("distir.ccl.regroup", _regroup, override=True)  # distir's own, not Disco's
    tvm_ffi.register_global_func("distir.ccl.exchange", _block_exchange, override=True)
    _registered = True


@contextmanager
def session(num_workers: int, num_groups: int) -> Iterator[State]:
    """Serve the collectives of one run; raise its first failure when the run ends."""
    global _STATE
    if num_groups < 1 or num_workers % num_groups:
        raise DiscoRunError(f"{num_workers} workers cannot be split into {num_groups} equal groups")
    register()
    with _SESSION_LOCK:
        state = State(num_workers, num_groups)
        _STATE = state
        try:
            yield state
        finally:
            _STATE = None
        if state.errors:
            raise DiscoRunError("a collective failed on Disco: " + "; ".join(dict.fromkeys(state.errors)))
