"""A worker's own pieces of the global weights, read byte range by byte range inside the worker.

The worker's half of loading from a global checkpoint (:mod:`distir.tvm.checkpoint` is the
caller's). The caller checks the global set and turns every weight's layout into a *read plan*
of plain numbers: per weight, the file, where its bytes start, the C-order *view* of the global
array the layout cuts (the tensor shape; a strided ``S[d/k]`` dim split in two), the worker's
*storage* (its padded block; for ``B[...]`` the chunk slots), and per worker the boxes it owns:
``[src_lo, src_hi, dst_lo]``, global ``[lo, hi)`` per dim of the view and where that box starts
in the storage (a block layout's slot first). A box's bytes are contiguous runs of the file; the
worker ``pread``s exactly those runs into a CPU tensor it allocated (zeros elsewhere: padding,
and everything for a worker outside the weight's mesh), so it holds only its pieces and never
the global array.

Disco calls :data:`READ_FUNC` on every worker with the plan (the same text for all; each takes
its own part by its worker id). An exception in a Disco worker thread aborts the process (TVM
0.27), so the function never raises: it returns ``[status, *tensors]``, ``status`` ``""`` or one
line saying what went wrong (a file changed since the caller checked it), and the caller reads
every worker's status before the tensors are used.

This module imports only the standard library and numpy (TVM's runtime when called), so a Disco
worker process loads it without the compiler or distir's IR.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from math import prod
from pathlib import Path

import numpy as np

__all__ = ["READ_FUNC", "Ranged", "open_regular", "read_worker", "register", "runs"]

READ_FUNC = "distir.weights.read_ranges"
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@dataclass(frozen=True)
class Ranged:
    """Weights every worker reads itself from a global set: the plan (JSON, see the module docstring)
    for the function's parameters from ``first`` on, for a session of ``workers`` workers."""

    plan: str
    first: int
    workers: int


class ReadError(Exception):
    """A worker could not read its ranges (the caller turns it into a WeightsError line)."""


def open_regular(path: Path | str, where: str, error: type[Exception] = ReadError) -> tuple[int, os.stat_result]:
    """A read-only descriptor of ``path`` and its stat, refusing anything but a regular file (opened
    without blocking and without following a final link, so a FIFO or link put there since the
    check cannot hang or redirect the reader)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise error(f"{where}: cannot open: {err.strerror or err}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise error(f"{where}: not a regular file")
    return fd, st


def runs(view: Sequence[int], lo: Sequence[int], hi: Sequence[int]) -> Iterator[tuple[int, int]]:
    """(element offset in the C-order ``view``, elements) of each contiguous run of the box
    ``[lo, hi)``, in the box's own C order: the trailing dims the box covers whole merge into one
    run with the first dim before them."""
    n = len(view)
    if n == 0:  # a 0-d weight: one element
        yield 0, 1
        return
    ext = [h - l for l, h in zip(lo, hi)]
    if any(e <= 0 for e in ext):
        return
    k = n - 1  # the runs span dims k.. ; every dim after k is whole
    while k > 0 and lo[k] == 0 and hi[k] == view[k]:
        k -= 1
    inner = prod(view[k + 1:])
    length = ext[k] * inner
    strides = [prod(view[d + 1:]) for d in range(n)]
    base = sum(lo[d] * strides[d] for d in range(n))
    for idx in np.ndindex(*ext[:k]):
        yield base + sum(i * strides[d] for d, i in enumerate(idx)), length


def _read_into(fd: int, buf: memoryview, offset: int, where: str) -> None:
    got = os.preadv(fd, [buf], offset)
    while got < len(buf):  # a short read: only at the end of a file cut since the check
        more = os.preadv(fd, [buf[got:]], offset + got)
        if more <= 0:
            raise ReadError(f"{where}: the file ended at byte {offset + got}, shorter than when it was checked")
        got += more


def read_box(fd: int, base: int, itemsize: int, view, store: np.ndarray, box, where: str) -> None:
    """Read one box of the global view (``base``: the weight's first byte in the file) into ``store``
    (a uint array of the worker's storage shape) at its place."""
    lo, hi, dst = box
    lead = len(store.shape) - len(view)  # a block layout's slot index comes first
    ext = [h - l for l, h in zip(lo, hi)]
    target = store[(*dst[:lead], *(slice(d, d + e) for d, e in zip(dst[lead:], ext)), Ellipsis)]  # a view, 0-d too
    direct = target.flags.c_contiguous  # the box fills whole rows of the storage: read into it
    tmp = target if direct else np.empty(ext, dtype=store.dtype)
    flat = memoryview(tmp.reshape(-1)).cast("B")
    at = 0
    for start, n in runs(view, lo, hi):
        nbytes = n * itemsize
        _read_into(fd, flat[at:at + nbytes], base + start * itemsize, where)
        at += nbytes
    if not direct:
        target[...] = tmp


def read_worker(plan: dict, worker: int, make=None) -> list:
    """Worker ``worker``'s piece of every weight of ``plan``, each read from its own byte ranges.

    ``make(shape, store, dtype, itemsize)`` gives ``(result of the local shape, uint array of the
    storage shape over its memory)``; by default a numpy array of unsigned ints of the item size
    (a caller views it as the dtype)."""
    if make is None:
        def make(shape, store, dtype, itemsize):
            a = np.zeros(store, dtype=_UINT[itemsize])
            return a.reshape(shape), a
    files = plan["files"]
    fds: dict[int, int] = {}
    out = []
    try:
        for w in plan["weights"]:
            result, store = make(tuple(w["shape"]), tuple(w["store"]), w["dtype"], w["itemsize"])
            store[...] = 0  # padding, and everything a worker outside the mesh holds
            boxes = w["pieces"][worker]
            if boxes:
                path, size = files[w["file"]]
                where = f"global weights: '{path}' (weight '{w['name']}')"
                if w["file"] not in fds:
                    fd, st = open_regular(path, where)
                    fds[w["file"]] = fd
                    if st.st_size != size:
                        raise ReadError(f"{where}: is {st.st_size} bytes, {size} when it was checked")
                for box in boxes:
                    read_box(fds[w["file"]], w["offset"], w["itemsize"], w["view"], store, box, where)
            out.append(result)
    finally:
        for fd in fds.values():
            os.close(fd)
    return out


def _read_ranges(plan_text: str) -> list:
    """Disco's entry: this worker's tensors (CPU, then on the worker's device), after a status line."""
    import tvm
    import tvm_ffi

    try:
        worker = int(tvm_ffi.get_global_func("runtime.disco.worker_rank")())
        plan = json.loads(plan_text)
        if not 0 <= worker < plan["workers"]:
            return [f"global weights: worker {worker} is not one of the plan's {plan['workers']}"]
        cpu = tvm.runtime.cpu()

        def make(shape, store, dtype, itemsize):
            t = tvm.runtime.empty(shape, dtype, cpu)
            return t, np.from_dlpack(t._create_view(store, f"uint{8 * itemsize}"))  # the same bytes

        tensors = read_worker(plan, worker, make)
        device = tvm_ffi.get_global_func("runtime.disco.device")()
        if device.dlpack_device_type() != cpu.dlpack_device_type():
            tensors = [t.copyto(device) for t in tensors]
        return ["", *tensors]
    except ReadError as err:
        return [str(err)]
    except Exception as err:  # noqa: BLE001 - raising would abort the worker's process
        lines = [ln for ln in str(err).splitlines() if ln.strip()]
        return [f"global weights: worker failed to read its pieces: {type(err).__name__}: {lines[-1] if lines else ''}"]


_registered = False


def register() -> None:
    """Register :data:`READ_FUNC` in this process (a worker process, or the caller's for worker threads)."""
    global _registered
    if not _registered:
        import tvm_ffi

        tvm_ffi.register_global_func(READ_FUNC, _read_ranges, override=True)
        _registered = True
