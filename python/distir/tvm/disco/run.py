"""Build an exported module and run it on TVM's Disco runtime.

:func:`run_pieces` takes what ``tvm.compile`` built from :func:`distir.tvm.to_relax`'s
export and every worker's piece of every input, and runs it on a Disco session of worker
threads or worker processes (:mod:`distir.tvm.disco.workers`), on the CPU or on the build target's
device: scatters the pieces through Disco (or loads pre-sharded weights with Disco's
``ShardLoader`` inside each worker, :mod:`distir.tvm.weights`), calls the function on every
worker and returns each worker's outputs. The collectives are NCCL's where TVM has it and the
workers have a GPU each, else distir's host collectives (:mod:`distir.tvm.disco.host_ccl`). Cutting
global arrays into pieces and reassembling the outputs is the simulator's
(:mod:`distir.runtime.spmd`); :func:`distir.driver.run_disco` joins the two.

An error inside a Disco worker thread aborts the whole process (TVM 0.27 does not catch it
there; worker 0 of a process session is such a thread too), so everything that can be checked
is checked first, in the caller's thread: the sizes the module was specialized for (by calling
the module's ``distir_disco_layout`` function on a local VM), and every worker's piece of every
input against the shape and dtype the built function takes (:mod:`distir.tvm.disco.signature`).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import itertools
import os
import shutil
import tempfile
import traceback
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm import relax

from ...ir.types import DTensorType, TensorType, Type
from . import host_ccl, lifetime
from .signature import check_pieces, param_specs
from .nodes import SocketWorkers, parse_socket, socket_workers
from .transport import unpack_arrays
from .threads import ThreadWorkers
from .workers import collective_timeout, load_disco, process_workers, worker_timeout
from ..errors import DiscoRunError, TargetError, tvm_message
from ..convention import DISCO_LAYOUT_FUNC, SIZE_PREFIX
from ..ranges import READ_FUNC, Ranged
from ..ranges import register as register_ranges
from ..targets import DEFAULT_TARGET, describe, has_nccl, is_host, parse_target, run_device

__all__ = [
    "SESSIONS",
    "Presharded",
    "check_dtypes",
    "library_dir",
    "load_disco",
    "run_pieces",
    "shared_library",
    "specialize_and_build",
    "symbolic_var_names",
]

SESSIONS = ("threads", "processes", "socket")
_COUNTER = itertools.count()

def symbolic_var_names(tvm_mod: tvm.IRModule) -> set[str]:
    """Names of the symbolic shape variables of a Relax module's functions (what BindSymbolicVars can bind)."""
    names: set[str] = set()
    for func in tvm_mod.functions.values():
        if isinstance(func, relax.Function):
            for v in (*relax.analysis.defined_symbolic_vars(func), *relax.analysis.free_symbolic_vars(func)):
                names.add(str(v.name))
    return names


#: TVM 0.27's static memory planning reuses, after an ``R.If``, storage it allocated inside one branch: a
#: run that took the other branch then allocates from storage that was never made (a segfault in
#: ``StorageObj::AllocTensor``). A module with branches (the export's dispatch on the count) is built
#: without it: each tensor is allocated when it is made.
UNSAFE_WITH_BRANCHES = ("StaticPlanBlockMemory",)


def has_branches(tvm_mod: tvm.IRModule) -> bool:
    """Does any Relax function of the module hold an ``R.If``?"""
    found = []

    def visit(e):
        if isinstance(e, relax.If):
            found.append(e)

    for func in tvm_mod.functions.values():
        if isinstance(func, relax.Function) and not found:
            relax.analysis.post_order_visit(func, visit)
    return bool(found)


def specialize_and_build(tvm_mod: tvm.IRModule, values: Mapping[str, int], target: Any = DEFAULT_TARGET):
    """``BindSymbolicVars(values)`` then ``tvm.compile`` for ``target``: one device count's build.

    Only the names the module has are bound: a module whose meshes are static has no
    ``num_workers`` (TVM rejects a binding of a variable the module lacks). An unknown target or
    a failed build is one line (TargetError); building for a device the machine lacks is allowed
    (cross-compiling), running it is not (:func:`distir.tvm.targets.run_device`)."""
    tvm_target = parse_target(target)
    present = symbolic_var_names(tvm_mod)
    used = {k: int(v) for k, v in values.items() if k in present}
    bound = relax.transform.BindSymbolicVars(used)(tvm_mod) if used else tvm_mod
    try:
        if not has_branches(bound):
            return tvm.compile(bound, target=tvm_target)
        ctx = tvm.transform.PassContext.current()
        disabled = sorted({*ctx.disabled_pass, *UNSAFE_WITH_BRANCHES})
        with tvm.transform.PassContext(opt_level=ctx.opt_level, config=dict(ctx.config), disabled_pass=disabled,
                                       instruments=list(ctx.instruments)):
            return tvm.compile(bound, target=tvm_target)
    except Exception as err:  # noqa: BLE001 - TVM's lowering and code generators raise many types
        raise TargetError(f"tvm.compile for target '{describe(target)}' failed: {tvm_message(err)}") from None


# ---------------------------------------------------------------- checks in the caller's thread


def _size_params(vm, func: str, n_tensors: int) -> list[str]:
    try:
        arity = vm._get_function_arity(func)
    except Exception:  # noqa: BLE001 - TVM raises several error types
        raise DiscoRunError(f"the built module has no function '{func}'") from None
    names = [vm._get_function_param_name(func, i) for i in range(arity)]
    sizes = arity - n_tensors
    if sizes < 0 or not all(n.startswith(SIZE_PREFIX) for n in names[:sizes]):
        raise DiscoRunError(
            f"the built function '{func}' takes parameters {names}, which do not fit the distir function's "
            f"{n_tensors} parameters; pass the module that was exported"
        )
    return [n[len(SIZE_PREFIX) :] for n in names[:sizes]]


def _size_value(name: str, values: Mapping[str, int]) -> int:
    if name not in values:
        raise DiscoRunError(f"no value for the size '{name}' (known: {', '.join(sorted(values)) or 'none'})")
    return int(values[name])


def _layout(vm, values: Mapping[str, int]) -> tuple[int, int]:
    """(workers, groups) the built module needs; fails here if it was built for other sizes."""
    names = _size_params(vm, DISCO_LAYOUT_FUNC, 0)
    args = [tvm.runtime.ShapeTuple([_size_value(n, values)]) for n in names]
    try:
        out = vm[DISCO_LAYOUT_FUNC](*args)
    except Exception as err:  # noqa: BLE001 - TVM raises several error types
        given = ", ".join(f"{n}={values[n]}" for n in names)
        last = [ln for ln in str(err).splitlines() if ln.strip()][-1:]
        raise DiscoRunError(
            f"the built module was specialized for other sizes than {given} ({last[0] if last else err})"
        ) from None
    return int(out[0]), int(out[1])


def check_dtypes(gparams: Sequence[Type], arrays: Sequence[np.ndarray], names: Sequence[str]) -> None:
    """The number and dtypes of the inputs, as the built function will want them."""
    if len(arrays) != len(gparams):
        raise DiscoRunError(f"the function takes {len(gparams)} inputs ({', '.join(names)}), got {len(arrays)}")
    for name, t, a in zip(names, gparams, arrays):
        if isinstance(t, (TensorType, DTensorType)) and str(a.dtype) != t.dtype:
            raise DiscoRunError(f"input '{name}': expected dtype {t.dtype}, got {a.dtype}")


# ---------------------------------------------------------------- the run


def _to_numpy(value: Any):
    if isinstance(value, tvm.runtime.Tensor):
        return value.numpy()
    if isinstance(value, (list, tuple)) or type(value).__name__ == "Array":
        return tuple(_to_numpy(v) for v in value)
    return value


@dataclass(frozen=True)
class Presharded:
    """Weights every worker loads itself with Disco's ShardLoader: the set's ``tensor-cache.json``
    (path and text) for the function's parameters from ``first`` on (see :mod:`distir.tvm.weights`)."""

    json_path: str
    text: str
    first: int


def run_pieces(
    built,
    func: str,
    n_params: int,
    values: Mapping[str, int],
    pieces_for: Callable[[int], Sequence[Mapping[int, np.ndarray] | None]],
    stats: dict | None = None,
    *,
    session: str = "threads",
    target: Any = DEFAULT_TARGET,
    presharded: Presharded | None = None,
    check_workers: Callable[[int], None] | None = None,
    signature: str | None = None,
) -> dict[int, Any]:
    """Run ``built``'s ``func`` on a Disco session; each worker's outputs.

    ``values`` gives the sizes the build takes as parameters; ``pieces_for(total)`` gives, per
    parameter, every worker's array of a session of ``total`` workers (known once the build
    says its layout), or None for the parameters ``presharded`` loads. ``session`` is
    ``"threads"`` (a ThreadedSession), ``"processes"`` (a ProcessSession, kept for the next
    run of its size) or ``"socket"`` / ``"socket:NODES@HOST:PORT"`` (a SocketSession over nodes,
    :mod:`distir.tvm.disco.nodes`, kept too); ``target`` the build's target, whose device every worker runs on.
    ``check_workers(total)`` may refuse the session size before anything starts. Every piece is
    checked against the shape and dtype ``func`` takes before any worker runs (a DiscoRunError
    otherwise: a wrong piece inside a worker thread would abort the caller). Pass a dict as
    ``stats`` to get the session, the collective library and what Disco's collectives moved.
    ``signature``: the built function whose parameters the pieces are checked against, where ``func``
    calls it with the same arguments and types them less exactly (a dispatch on the count whose
    variants lay a parameter out differently); default ``func``.
    """
    spec = parse_socket(session) if isinstance(session, str) else None
    if session not in SESSIONS and spec is None:
        raise DiscoRunError(f"unknown session '{session}' (known: {', '.join(SESSIONS)}, socket:NODES@HOST:PORT)")
    device = run_device(target)
    disco = load_disco()
    path = shared_library(built)
    # the local VM reads the shared library (no second code generation)
    lib = tvm.runtime.load_module(path)
    vm = relax.VirtualMachine(lib, device)
    size_names = _size_params(vm, func, n_params)
    total, groups = _layout(vm, values)
    if check_workers is not None:
        check_workers(total)
    if groups < 1 or total % groups:
        raise DiscoRunError(f"{total} workers cannot be split into {groups} equal groups")
    pieces = list(pieces_for(total))
    if len(pieces) != n_params:
        raise DiscoRunError(f"the built function '{func}' takes {n_params} tensors; got pieces for {len(pieces)}")
    check = func if signature is None else signature
    check_pieces(param_specs(lib, check), len(size_names), pieces, values, total, check)
    call = _Call(path, func, size_names, values, pieces, total, device, presharded, ship=spec is not None)
    # a socket session runs distir's host collectives over TCP (NCCL across nodes is not wired: docs/tvm.md)
    nccl = spec is None and not is_host(device) and has_nccl() and total <= _device_count(device)
    info = {"num_workers": total, "num_groups": groups, "session": session,
            "ccl": "nccl" if nccl else "host", "device": str(device)}  # fmt: skip
    if not is_host(device) and not nccl:
        info["fallback"] = _fallback_line(device, total)
        warnings.warn(info["fallback"], stacklevel=2)
    with _handles_let_go(call):
        if session == "threads":
            outputs, calls, sent = _run_threads(disco, call, total, groups, nccl)
        elif spec is not None:
            info["session"], info["nodes"] = "socket", spec.nodes
            outputs, calls, sent = _run_processes(call, total, groups, nccl, socket_workers(spec, total, groups))
        else:
            outputs, calls, sent = _run_processes(call, total, groups, nccl, process_workers(total, groups))
    if stats is not None:
        stats.update(info, transport={"calls": calls, "bytes_sent": sent})
    return outputs


_LIBRARIES: OrderedDict[int, tuple[Any, str]] = OrderedDict()  # id(built) -> (built, its shared library)
_LIBRARY_DIR: str | None = None
_KEEP_LIBRARIES = 16


def library_dir() -> str:
    """The process's private folder of the libraries workers load (made on first use, removed at exit)."""
    global _LIBRARY_DIR
    if _LIBRARY_DIR is None:
        _LIBRARY_DIR = tempfile.mkdtemp(prefix="distir-disco-")
        atexit.register(shutil.rmtree, _LIBRARY_DIR, True)
    return _LIBRARY_DIR


def shared_library(built) -> str:
    """``built`` exported as a shared library that every worker loads (written once per build). A
    path is a library written already (an artifact's checked copy, :mod:`distir.tvm.artifact`)."""
    if isinstance(built, (str, os.PathLike)):
        return os.fspath(built)
    hit = _LIBRARIES.get(id(built))
    if hit is not None and hit[0] is built:
        _LIBRARIES.move_to_end(id(built))
        return hit[1]
    path = os.path.join(library_dir(), f"module{next(_COUNTER)}.so")
    built.export_library(path)
    _LIBRARIES[id(built)] = (built, path)
    while len(_LIBRARIES) > _KEEP_LIBRARIES:
        _, (_, old) = _LIBRARIES.popitem(last=False)
        with contextlib.suppress(OSError):
            os.remove(old)
    return path


def _device_count(device) -> int:
    n = 0
    while tvm.runtime.Device(int(device.dlpack_device_type()), n).exist:
        n += 1
    return n


def _fallback_line(device, total: int) -> str:
    if not has_nccl():
        return ("this TVM build has no NCCL (no runtime.disco.nccl.init_ccl): Disco's collectives run on distir's "
                "host collectives, staging device buffers through host memory")
    return (f"{total} workers and {_device_count(device)} {device.device_name if hasattr(device, 'device_name') else 'GPU'}"
            " device(s): NCCL takes one device per worker, so Disco's collectives run on distir's host collectives, "
            "staging device buffers through host memory")


@dataclass
class _Call:
    """One function call on a session: the module, the arguments, the device."""

    path: str
    func: str
    size_names: Sequence[str]
    values: Mapping[str, int]
    pieces: Sequence[Mapping[int, np.ndarray] | None]
    total: int
    device: Any
    presharded: Presharded | Ranged | None
    ship: bool = False  # send the library as bytes (a socket session: workers on other machines)
    dmod: Any = None  # the loaded module's handle on the session, while the run lasts

    def run(self, sess, *, default_device: bool) -> Any:
        """Load, place the arguments, call; the result's DRef. ``default_device``: the workers' own
        device is the build's (after NCCL's init), so nothing names it."""
        dev = None if default_device else self.device
        if self.ship:  # workers on other machines cannot read this path: the library goes to them as bytes
            data = Path(self.path).read_bytes()
            load = sess.get_global_func("distir.session.load_library")
            dmod = load_disco().DModule(load(data, hashlib.sha256(data).hexdigest(), dev), sess)
        else:
            dmod = sess.load_vm_module(self.path, dev)
        make_shape = sess.get_global_func("ffi.Shape")
        args = [make_shape(_size_value(n, self.values)) for n in self.size_names]
        for per in self.pieces:
            if per is None:
                continue
            first = per[0]
            stacked = np.ascontiguousarray(np.stack([per[w] for w in range(self.total)]))
            dst = sess.empty(first.shape, str(first.dtype), dev)
            src = sess.copy_to_worker_0(tvm.runtime.tensor(stacked))
            sess.scatter_from_worker0(src, dst, in_group=False)
            args.append(dst)
        if self.presharded is not None:
            args.extend(self._load_presharded(sess, default_device))
        self.dmod = dmod
        return args

    def _load_presharded(self, sess, default_device: bool) -> list:
        p = self.presharded
        item = sess.get_global_func("ffi.ArrayGetItem")
        skip = 0
        if isinstance(p, Ranged):  # each worker reads its byte ranges of a global set (distir.tvm.ranges)
            register_ranges()  # worker threads (and worker 0 of a process session) run in this process
            params = sess.get_global_func(READ_FUNC)(p.plan)
            status = item(params, 0)
            for w in range(self.total):
                line = status.debug_get_from_remote(w)
                if line:
                    raise DiscoRunError(str(line))
            skip = 1
        else:
            loader = sess.get_global_func("runtime.disco.ShardLoader")(p.json_path, p.text, "{}", None)
            params = sess.get_global_func("runtime.disco.ShardLoaderLoadAllPresharded")(loader)
        to_device = sess.get_global_func("vm.builtin.to_device")
        out = []
        for i in range(len(self.pieces) - p.first):
            ref = item(params, i + skip)
            if not default_device and not is_host(self.device):  # the loader reads into the worker's own device
                ref = to_device(ref, int(self.device.dlpack_device_type()), int(self.device.index))
            out.append(ref)
        return out


@contextlib.contextmanager
def _handles_let_go(call: _Call):
    """When a run ends, its Disco handles go on this thread, a failed run's too (the frames of its
    traceback would keep them for the garbage collector to free on any thread, a worker's
    included), and the sessions closed meanwhile are destroyed (:mod:`distir.tvm.disco.lifetime`)."""
    try:
        yield
    except BaseException as err:
        traceback.clear_frames(err.__traceback__)
        raise
    finally:
        call.dmod = None
        lifetime.sweep()


def _run_threads(disco, call: _Call, total: int, groups: int, nccl: bool):
    """Run on a ThreadedSession; every wait for its worker threads bounded (:mod:`distir.tvm.disco.threads`)."""
    bound = worker_timeout()

    def run(tw: ThreadWorkers, default_device: bool):
        args = tw.call(lambda: call.run(tw.sess, default_device=default_device), "placing the inputs")
        for w in range(total):
            tw.call(lambda w=w: tw.sess._sync_worker(w), f"worker {w}'s sync after placing the inputs")
        if tw.hub is not None:  # inputs in place: count only the function's own collectives from here
            for ep in tw.hub.endpoints:
                ep.counters.calls.clear()
                ep.counters.bytes_sent = 0
        result = tw.call(lambda: call.dmod[call.func](*args), f"the call of '{call.func}'")
        return {w: tw.call(lambda w=w: _to_numpy(result.debug_get_from_remote(w)), f"reading worker {w}'s output")
                for w in range(total)}

    if nccl:
        with ThreadWorkers(disco, total, groups, bound) as tw:
            tw.call(lambda: tw.sess.init_ccl("nccl", *range(total)), "NCCL's set-up")
            return run(tw, True), {}, 0
    with host_ccl.session(total, groups, collective_timeout(bound)) as hub:
        with ThreadWorkers(disco, total, groups, bound, hub) as tw:
            outputs = run(tw, False)
    calls, sent = host_ccl.hub_totals(hub)
    return outputs, calls, sent


def _fetch(result, worker: int):
    """Worker ``worker``'s output: a tensor (or tuple) read back, or the bytes ``distir.session.pack`` made."""
    value = result.debug_get_from_remote(worker)
    if isinstance(value, (bytes, bytearray)):
        try:
            return unpack_arrays(value)
        except ValueError as err:
            raise DiscoRunError(f"worker {worker}'s output could not be read back: {err}") from None
    return _to_numpy(value)


def _run_processes(call: _Call, total: int, groups: int, nccl: bool, workers):
    workers.check_alive()
    if nccl and not getattr(workers, "nccl", False):
        workers.call(lambda: workers.sess.init_ccl("nccl", *range(total)))
        workers.nccl = True
    args = workers.call(lambda: call.run(workers.sess, default_device=nccl))
    workers.sync()
    workers.check(workers.report(reset=True))  # inputs in place: count only the function's own collectives
    result = workers.call(lambda: call.dmod[call.func](*args))
    if isinstance(workers, SocketWorkers):  # TVM's socket session hands back bytes from another node, not tensors
        result = workers.call(lambda: workers.sess.get_global_func("distir.session.pack")(result))
    first = workers.call(lambda: _fetch(result, 0), [0])
    reports = workers.report(reset=True)
    workers.check(reports)
    outputs = {0: first}
    for w in range(1, total):
        outputs[w] = workers.call(lambda w=w: _fetch(result, w), [w])
    del result, args
    calls: dict[str, int] = {}
    for r in reports:
        for k, v in r["calls"].items():
            calls[k] = calls.get(k, 0) + v
    return outputs, calls, sum(r["bytes_sent"] for r in reports)
