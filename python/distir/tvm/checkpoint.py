"""One checkpoint for every count: the global weights, each Disco worker reading only its own bytes.

A *global set* is a model's unsharded weights in TVM's tensor-cache format, as
``tvm.contrib.tvmjs.dump_tensor_cache`` writes them (raw records named by the weights' names;
:func:`save_global_weights` writes one), converted once and run at any count. The layouts come
from the module being run, not from the set: at each count the caller turns every weight's
layout into a read plan of byte ranges (:mod:`distir.tvm.ranges`) and each worker, inside
Disco, reads its own pieces (its blocks, padding as zeros; strided ``S[d/k]``, ``B[...]``, 2-D
meshes, meshes that start past device 0, replicated weights). The pieces are exactly the
simulator's (:func:`distir.ir.layout.cut_block`); nothing the size of the global weights is
held by the caller or by a worker.

A global set is untrusted input like a pre-sharded one: its manifest and files go through the
checks of :mod:`distir.tvm.weights_check` (paths inside the set, regular files of the sizes
recorded, raw records inside their files, MD5 checksums) before anything reads a byte, then
its records are checked against the function: one per weight, by name, of its dtype and
global shape. :func:`open_weights` tells a global set from a pre-sharded one
(``metadata.distir.format``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..ir import sym
from ..ir.expr import IRModule
from ..ir.layout import (
    block_slices,
    concrete_mesh_shape,
    concrete_placement,
    device_chunks,
    chunk_box,
    expand_strided,
    local_shape,
    mesh_coords,
)
from ..ir.types import DTYPES, DTensorType, np_dtype
from ..transform.lower_to_local import GLOBAL_PARAMS
from ..transform.weights import NUM_INPUT, WeightsError, param_names, weight_arguments
from .ranges import Ranged, read_worker
from .weights_check import FORMAT, _q, check_data_file, check_record_bytes, read_json

__all__ = ["GLOBAL_FORMAT", "GlobalSet", "is_global_set", "open_weights", "read_global", "save_global_weights"]

GLOBAL_FORMAT = "distir.global-weights"
GLOBAL_VERSION = 1


@dataclass(frozen=True)
class GlobalRecord:
    """One weight in a global set: its data file (resolved, checked), where its bytes lie, shape, dtype."""

    file: Path
    size: int  # the file's size when checked
    offset: int
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class GlobalSet:
    """A global set read and checked against itself; :meth:`bind` checks it against a function."""

    directory: Path
    records: dict[str, GlobalRecord]
    meta: dict  # metadata.distir, {} for a set written by TVM's dump_tensor_cache alone

    @property
    def where(self) -> str:
        return f"global weights '{self.directory}'"

    def bind(self, local_mod: IRModule, func: str, values: Mapping[str, int] | None = None) -> BoundSet:
        """The set as ``func``'s weights: one record per weight (by name), each of its dtype and global
        shape (at ``values``); a partial weight is refused (it has no blocks to read)."""
        if func not in local_mod.functions:
            raise WeightsError(f"{self.where}: the module has no function '{func}'")
        if self.meta.get("function", func) != func:
            raise WeightsError(f"{self.where} are for @{self.meta['function']}, not @{func}")
        f = local_mod[func]
        types = list(f.attrs.get(GLOBAL_PARAMS, [p.type for p in f.params]))
        names = param_names(f)
        n_in = f.attrs.get(NUM_INPUT, self.meta.get("num_input", len(names) - len(self.records)))
        if not 0 <= n_in <= len(names):
            raise WeightsError(f"{self.where} hold {len(self.records)} weights; @{func} has {len(names)} parameters")
        want = names[n_in:]
        missing = [n for n in want if n not in self.records]
        extra = [n for n in self.records if n not in set(want)]
        if missing or extra:
            what = f"hold {len(extra)} record(s) that are not weights of @{func}: {_q(extra[0])}" if extra else \
                f"lack {len(missing)} of the {len(want)} weights of @{func}: {_q(missing[0])}"
            raise WeightsError(f"{self.where} {what}")
        vals = dict(values or {})
        for name, t in zip(want, types[n_in:]):
            r = self.records[name]
            got = f"{self.where}: weight '{name}'"
            if r.dtype != t.dtype:
                raise WeightsError(f"{got} is {r.dtype}, @{func} takes {t.dtype}")
            try:
                shape = tuple(sym.evaluate(d, vals) for d in t.shape)
            except Exception:  # noqa: BLE001 - a size the values do not bind: compared once they do
                shape = None
            if shape is not None and shape != r.shape:
                raise WeightsError(f"{got} has shape {r.shape}, @{func} takes {shape}")
            if isinstance(t, DTensorType) and t.placement.has_partial:
                raise WeightsError(f"{got}: @{func} takes it {t.placement}, a partial value, which has no blocks to read")
        return BoundSet(self, local_mod, func, n_in, want, types[n_in:])

    def array(self, name: str) -> np.ndarray:
        """Weight ``name`` whole (for the single-device run a result is compared with)."""
        r = self.records[name]
        plan = {"files": [[str(r.file), r.size]], "weights": [_entry(name, r, 0, tuple(r.shape), tuple(r.shape),
                                                                     [[_whole(r.shape)]])]}
        return read_worker(plan, 0)[0].view(np_dtype(r.dtype))


@dataclass(frozen=True)
class BoundSet:
    """A global set checked against one function of a module: what a run loads from it."""

    set: GlobalSet
    local_mod: IRModule
    func: str
    num_input: int
    names: list[str]
    types: list

    @property
    def directory(self) -> Path:
        return self.set.directory

    def arrays(self) -> list[np.ndarray]:
        """Every weight whole, in parameter order (the single-device run's arguments)."""
        return [self.set.array(n) for n in self.names]

    def ranged(self, values: Mapping[str, int], workers: int) -> Ranged:
        """The read plan at ``values`` for a session of ``workers``: every worker's boxes of every weight."""
        files: dict[Path, int] = {}
        weights = []
        for name, t in zip(self.names, self.types):
            r = self.set.records[name]
            shape = tuple(sym.evaluate(d, dict(values)) for d in t.shape)
            if shape != r.shape:
                raise WeightsError(f"{self.set.where}: weight '{name}' has shape {r.shape}, @{self.func} takes {shape}")
            index = files.setdefault(r.file, len(files))
            view, store, pieces = layout_boxes(t, values, workers)
            weights.append(_entry(name, r, index, view, store, pieces, t, values))
        sizes = {r.file: r.size for r in self.set.records.values()}
        plan = {"workers": workers, "files": [[str(p), sizes[p]] for p in files], "weights": weights}
        return Ranged(json.dumps(plan), self.num_input, workers)


def _whole(shape: Sequence[int]) -> list:
    return [[0] * len(shape), list(shape), [0] * len(shape)]


def _entry(name: str, r: GlobalRecord, index: int, view, store, pieces, t=None, values=None) -> dict:
    shape = list(r.shape) if t is None or not isinstance(t, DTensorType) else \
        [sym.evaluate(d, dict(values)) for d in local_shape(t.shape, t.mesh, t.placement)]
    return {"name": name, "dtype": r.dtype, "itemsize": int(np_dtype(r.dtype).itemsize), "file": index,
            "offset": r.offset, "view": list(view), "store": list(store), "shape": shape, "pieces": pieces}


def layout_boxes(t: Any, values: Mapping[str, int], workers: int) -> tuple[tuple, tuple, list]:
    """(the C-order view of the global array the layout cuts, every worker's storage shape in it, and
    per worker the boxes it holds: ``[src_lo, src_hi, dst_lo]``) of a weight of type ``t`` at ``values``.
    The same cut as :func:`distir.ir.layout.cut_block`, as ranges instead of arrays."""
    values = dict(values)
    shape = tuple(sym.evaluate(d, values) for d in t.shape)
    if not isinstance(t, DTensorType):
        return shape, shape, [[_whole(shape)] for _ in range(workers)]
    sizes = concrete_mesh_shape(t.mesh, values)
    placement = concrete_placement(t.placement, values)
    pieces: list[list] = [[] for _ in range(workers)]
    devices = t.mesh.device_list(values)
    if placement.is_block:
        block = tuple(placement.block)
        total = len(devices)
        view = shape
        store = tuple(sym.evaluate(d, values) for d in local_shape(t.shape, t.mesh, t.placement))
        for pos, dev in enumerate(devices):
            for k, j in device_chunks(shape, block, total, pos):
                box = chunk_box(shape, block, j)
                pieces[dev].append([[lo for lo, _ in box], [hi for _, hi in box], [k] + [0] * len(shape)])
        return view, store, pieces
    view, plain = shape, placement
    if placement.is_strided:
        wide, plain = expand_strided(shape, placement)
        view = tuple(int(d) for d in wide)
    store = None
    for pos, dev in enumerate(devices):
        glob, _, ext = block_slices(view, plain, mesh_coords(pos, sizes), sizes)
        store = ext
        pieces[dev].append([[s.start for s in glob], [s.stop for s in glob], [0] * len(view)])
    if store is None:
        store = block_slices(view, plain, (0,) * len(sizes), sizes)[2]
    return view, tuple(store), pieces


# ---------------------------------------------------------------- reading and telling the kinds apart


def read_global(directory: str | os.PathLike, *, verify: bool = True) -> GlobalSet:
    """Read a global set and check it (:mod:`distir.tvm.weights_check`'s checks of files and records,
    with ``verify`` every data file's MD5); anything wrong is one WeightsError line."""
    d = Path(directory)
    where = f"global weights '{d}'"
    data = read_json(d, where)
    meta = _global_meta(data, where)
    files = data.get("records") if isinstance(data, dict) else None
    if not isinstance(files, list):
        raise WeightsError(f"{where}: tensor-cache.json has no list of 'records'")
    root = Path(os.path.realpath(d))
    records: dict[str, GlobalRecord] = {}
    for f in files:
        path, size = check_data_file(root, f, where, verify)
        for r in f["records"]:
            name = r.get("name") if isinstance(r, dict) else None
            rwhere = f"{where}: record {_q(name)} in {_q(f['dataPath'])}"
            if not isinstance(name, str):
                raise WeightsError(f"{rwhere}: has no name")
            if name in records:
                raise WeightsError(f"{rwhere}: listed twice")
            dtype = r.get("dtype")
            if dtype not in DTYPES:
                raise WeightsError(f"{rwhere}: unknown dtype {_q(dtype)} (known: {', '.join(DTYPES)})")
            offset, _ = check_record_bytes(r, rwhere, name, dtype, r.get("shape") if isinstance(r.get("shape"), list)
                                           else (), size)
            records[name] = GlobalRecord(path, size, offset, tuple(r["shape"]), dtype)
    return GlobalSet(d.absolute(), records, meta)


def _global_meta(data: Any, where: str) -> dict:
    if not isinstance(data, dict):
        raise WeightsError(f"{where}: tensor-cache.json is not a tensor cache (not an object)")
    meta = data.get("metadata", {})
    meta = meta.get("distir", {}) if isinstance(meta, dict) else {}
    if not isinstance(meta, dict) or (meta and meta.get("format") != GLOBAL_FORMAT):
        raise WeightsError(f"{where}: metadata.distir is not of a global set ({GLOBAL_FORMAT})")
    if "function" in meta and not isinstance(meta["function"], str):
        raise WeightsError(f"{where}: metadata 'function' is {_q(meta['function'])}, not a name")
    n = meta.get("num_input", 0)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise WeightsError(f"{where}: metadata 'num_input' is {_q(n)}, not a non-negative integer")
    return meta


def is_global_set(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` holds a global set rather than a pre-sharded one (``metadata.distir.format``);
    its manifest is read as :func:`read_global` reads it (a bad one is a WeightsError line)."""
    data = read_json(Path(directory), f"weights '{directory}'")
    meta = data.get("metadata") if isinstance(data, dict) else None
    distir_meta = meta.get("distir") if isinstance(meta, dict) else None
    return not (isinstance(distir_meta, dict) and distir_meta.get("format") == FORMAT)


def open_weights(directory: str | os.PathLike, local_mod: IRModule, func: str, *, verify: bool = True):
    """A weight directory read and checked: a pre-sharded set (:func:`distir.tvm.weights.read_set`, a
    ShardedSet) or a global set bound to ``func`` (a :class:`BoundSet`)."""
    if is_global_set(directory):
        return read_global(directory, verify=verify).bind(local_mod, func)
    from .weights import read_set

    return read_set(directory, verify=verify)


# ---------------------------------------------------------------- writing one


def save_global_weights(mod: IRModule, weights: Sequence[Any] | Mapping[str, Any], out_dir: str | os.PathLike, *,
                        func: str | None = None, num_input: int | None = None) -> Path:
    """Write a model's global weights as a global set (``tvmjs.dump_tensor_cache``, raw); the directory.

    ``weights`` as :func:`distir.tvm.shard_weights` takes them (by name, in order, or ``export_tvm``'s
    ``params``) for the parameters after the first ``num_input`` of ``func``; ``mod`` is the model
    (global or distributed: only names, dtypes and shapes are read). The metadata records the
    function and its number of inputs; any count runs from the one set."""
    from tvm.contrib import tvmjs

    from .weights import _num_input, _weights_function

    f = _weights_function(mod, func)
    n_in = _num_input(f, num_input)
    if num_input is not None and NUM_INPUT not in f.attrs:
        f = f.replace(attrs={**f.attrs, NUM_INPUT: n_in})
    arrays = weight_arguments(f, [np.empty(0)] * n_in, weights)[n_in:]
    named = dict(zip(param_names(f)[n_in:], arrays))
    out = Path(out_dir)
    meta = {"distir": {"format": GLOBAL_FORMAT, "version": GLOBAL_VERSION, "function": f.name, "num_input": n_in}}
    with contextlib.redirect_stdout(io.StringIO()):  # dump_tensor_cache prints its progress
        tvmjs.dump_tensor_cache(named, str(out), encode_format="raw", meta_data=meta, show_progress=False)
    return out
