"""Pre-sharded weights in TVM's own format, which Disco's ``ShardLoader`` loads inside each worker.

A set is a directory in the format of ``tvm.contrib.tvmjs.dump_tensor_cache`` (MLC-LLM's
weights are stored so): ``tensor-cache.json`` lists records of binary files, and its
``metadata`` holds distir's description of the set. Worker ``w`` of a Disco session of ``n``
workers holds parameter ``i`` (the ``i``-th weight of the function) as the record
``param_<i>_shard-<w+1>-of-<n>``, the names ``runtime.disco.ShardLoaderLoadAllPresharded``
reads, worker by worker. Each worker's records are in their own files (``worker_<w>/``, each
also a cache of its own that ``tvmjs.load_tensor_cache`` reads), so a worker reads only its
pieces. A piece is exactly what the simulator and the Disco runner cut for that worker: the
whole weight when replicated, its block when sharded (the last blocks zero-padded when the
count does not divide), zeros for a worker outside the weight's mesh.

The metadata (``metadata["distir"]``) records the count, the size variable it binds, the
session size, the function and how many inputs precede its weights, every mesh of the module,
and per weight its name, dtype, global and local shapes, mesh, placement and each worker's
padding. :func:`check_set` compares it with the module being run, so a set that does not fit
is one line, never a run on the wrong pieces. :func:`reshard_weights` turns a set for one
count into a set for another, one weight at a time, without the global checkpoint.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DistirError
from ..ir import sym
from ..ir.expr import Function, IRModule
from ..ir.layout import (
    block_slices,
    concrete_mesh_shape,
    concrete_placement,
    cut_block,
    local_shape,
    mesh_coords,
    place_block,
)
from ..ir.mesh import DeviceMesh
from ..ir.placement import PlacementError
from ..ir.types import DTensorType, np_dtype
from ..transform.count_variants import choose_variants
from ..transform.lower_to_local import GLOBAL_PARAMS
from ..transform.weights import NUM_INPUT, WeightsError, param_names, weight_arguments
from .weights_check import (
    CACHE_JSON,
    FORMAT,
    VERSION,
    Record,
    load_manifest,
    mesh_from_json,
    mesh_json,
    open_regular,
    param_layout,
    record_name,
)

__all__ = [
    "CACHE_JSON",
    "ShardedSet",
    "assemble",
    "assemble_weights",
    "check_set",
    "read_set",
    "reshard_weights",
    "session_workers",
    "shard_weights",
]

# ---------------------------------------------------------------- layouts, written and read back


def session_workers(meshes: Sequence[DeviceMesh], values: Mapping[str, int]) -> int:
    """Disco's session size: one past the largest device id of any mesh (1 without meshes)."""
    return max([max(m.device_list(dict(values)), default=-1) + 1 for m in meshes] + [1])


def _pieces(t: Any, a: np.ndarray, values: Mapping[str, int], workers: int) -> list[np.ndarray]:
    """Every worker's piece of the global array ``a`` laid out as ``t`` (zeros outside its mesh)."""
    if not isinstance(t, DTensorType):
        return [a] * workers
    sizes = concrete_mesh_shape(t.mesh, values)
    placement = concrete_placement(t.placement, values)
    local = tuple(sym.evaluate(d, values) for d in local_shape(t.shape, t.mesh, t.placement))
    out = [np.zeros(local, dtype=a.dtype) for _ in range(workers)]
    for pos, dev in enumerate(t.mesh.device_list(dict(values))):
        out[dev] = cut_block(a, placement, mesh_coords(pos, sizes), sizes)
    return out


def _padding(t: Any, values: Mapping[str, int], workers: int) -> list:
    """Per worker, the padding of its piece per dim (None outside the mesh; a block layout's chunks are
    padded to the shard shape, its storage to the busiest worker's)."""
    if not isinstance(t, DTensorType):
        return [[0] * len(t.shape)] * workers
    out: list = [None] * workers
    sizes = concrete_mesh_shape(t.mesh, values)
    placement = concrete_placement(t.placement, values)
    shape = [sym.evaluate(d, values) for d in t.shape]
    for pos, dev in enumerate(t.mesh.device_list(dict(values))):
        if placement.is_block:
            out[dev] = "chunks"
            continue
        _, loc, ext = block_slices(shape, placement, mesh_coords(pos, sizes), sizes)
        out[dev] = [e - (s.stop - s.start) for s, e in zip(loc, ext)]
    return out


def _place(t: Any, global_shape, pieces: Sequence[np.ndarray], values: Mapping[str, int]) -> np.ndarray:
    """The global array from every worker's piece (the inverse of :func:`_pieces`)."""
    if not isinstance(t, DTensorType):
        return pieces[0]
    out = np.zeros(tuple(global_shape), dtype=pieces[0].dtype)
    sizes = concrete_mesh_shape(t.mesh, values)
    placement = concrete_placement(t.placement, values)
    for pos, dev in enumerate(t.mesh.device_list(dict(values))):
        place_block(out, pieces[dev], placement, mesh_coords(pos, sizes), sizes)
    return out


# ---------------------------------------------------------------- the set


@dataclass(frozen=True)
class ShardedSet:
    """A set read from disk and checked (:mod:`distir.tvm.weights_check`): its directory, the checked
    manifest's text (what TVM's ShardLoader is handed), distir's metadata and every piece's record."""

    directory: Path
    text: str
    meta: dict
    records: dict[str, Record]

    @property
    def json_path(self) -> Path:
        return self.directory / CACHE_JSON

    @property
    def workers(self) -> int:
        return int(self.meta["workers"])

    @property
    def num_input(self) -> int:
        return int(self.meta["num_input"])

    @property
    def names(self) -> list[str]:
        return [p["name"] for p in self.meta["params"]]

    def piece(self, index: int, worker: int) -> np.ndarray:
        """Weight ``index``'s piece on ``worker``, read from its file alone (checked when the set was read)."""
        if not (_index_ok(index, len(self.meta["params"])) and _index_ok(worker, self.workers)):
            raise WeightsError(f"pre-sharded weights '{self.directory}' hold weights 0..{len(self.meta['params']) - 1} "
                               f"on workers 0..{self.workers - 1}, not weight {index!r} on worker {worker!r}")
        name = record_name(int(index), int(worker), self.workers)
        r = self.records[name]
        where = f"pre-sharded weights '{self.directory}': record '{name}' in '{r.data_path}'"
        fd, _ = open_regular(r.file, where)
        try:
            data = os.pread(fd, r.nbytes, r.offset)
        finally:
            os.close(fd)
        if len(data) != r.nbytes:
            raise WeightsError(f"{where}: the file is shorter than when the set was read ({len(data)} of {r.nbytes} bytes)")
        return np.frombuffer(data, dtype=np_dtype(r.dtype)).reshape(r.shape).copy()

    def layout(self, index: int) -> Any:
        """Weight ``index``'s type in the module's global view (a DTensorType, or a TensorType)."""
        return param_layout(self.meta["params"][index])


def _index_ok(i: Any, n: int) -> bool:
    return isinstance(i, (int, np.integer)) and not isinstance(i, bool) and 0 <= i < n


def read_set(directory: str | os.PathLike, *, verify: bool = True) -> ShardedSet:
    """Read a set and check it (:mod:`distir.tvm.weights_check`: paths, sizes, shapes, dtypes, and with
    ``verify`` every data file's checksum); anything wrong is one WeightsError line."""
    d = Path(directory)
    where = f"pre-sharded weights '{d}'"
    m = load_manifest(d, where, verify)
    # absolute: Disco's worker processes may have been started in another working directory
    return ShardedSet(d.absolute(), m.text, m.meta, m.records)


def _weights_function(mod: IRModule, func: str | None) -> Function:
    if func is not None:
        if func not in mod.functions:
            raise WeightsError(f"the module has no function '{func}' (it has: {', '.join(mod.functions)})")
        return mod[func]
    with_weights = [f for f in mod.functions.values() if NUM_INPUT in f.attrs]
    if len(with_weights) == 1:
        return with_weights[0]
    if len(mod.functions) == 1:
        return next(iter(mod.functions.values()))
    raise WeightsError(f"the module has {len(mod.functions)} functions; name the one the weights are for with func=")


def _num_input(f: Function, num_input: int | None) -> int:
    n = f.attrs.get(NUM_INPUT) if num_input is None else num_input
    if n is None:
        raise WeightsError(
            f"@{f.name} has no '{NUM_INPUT}' attribute; say how many leading parameters are inputs with num_input="
        )
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= int(n) <= len(f.params):
        raise WeightsError(f"num_input must count @{f.name}'s leading inputs (0 to {len(f.params)}), got {n!r}")
    return int(n)


def _check_count(num_workers: Any) -> int:
    if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 1:
        raise WeightsError(f"num_workers must be a positive integer, got {num_workers!r}")
    return int(num_workers)


def _write(out_dir: Path, meta: dict, per_worker: list[dict[str, np.ndarray]]) -> Path:
    """Each worker's pieces with ``tvmjs.dump_tensor_cache`` (raw: bytes kept exactly) in ``worker_<w>/``,
    then the set's ``tensor-cache.json`` listing them all, worker by worker."""
    from tvm.contrib import tvmjs

    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for w, pieces in enumerate(per_worker):
        sub = out_dir / f"worker_{w}"
        if sub.exists():
            shutil.rmtree(sub)
        with contextlib.redirect_stdout(io.StringIO()):  # dump_tensor_cache prints its progress
            tvmjs.dump_tensor_cache(pieces, str(sub), encode_format="raw", meta_data={"distir": {"worker": w}},
                                    show_progress=False)
        for f in json.loads((sub / CACHE_JSON).read_text())["records"]:
            files.append({**f, "dataPath": f"worker_{w}/{f['dataPath']}"})
    (out_dir / CACHE_JSON).write_text(json.dumps({"metadata": {"distir": meta}, "records": files}, indent=1))
    return out_dir


def _param_meta(index: int, name: str, t: Any, values: Mapping[str, int], workers: int) -> dict:
    return {
        "index": index,
        "name": name,
        "dtype": t.dtype,
        "global_shape": [sym.evaluate(d, values) for d in t.shape],
        "global_shape_formula": [sym.to_str(d) for d in t.shape],
        "local_shape": [sym.evaluate(d, values) for d in (local_shape(t.shape, t.mesh, t.placement)
                                                          if isinstance(t, DTensorType) else t.shape)],
        "mesh": mesh_json(t.mesh) if isinstance(t, DTensorType) else None,
        "placement": str(t.placement) if isinstance(t, DTensorType) else None,
        "padding": _padding(t, values, workers),
    }


def shard_weights(
    local_mod: IRModule,
    weights: Sequence[Any] | Mapping[str, Any],
    num_workers: int,
    out_dir: str | os.PathLike,
    *,
    func: str | None = None,
    symbol: str = "num_workers",
    num_input: int | None = None,
) -> Path:
    """Write every worker's piece of every weight to ``out_dir`` as a TVM tensor cache; the directory.

    ``local_mod`` is the distributed module (after the distribute pipeline, ``symbol`` symbolic
    so that the set can be re-sharded to other counts); ``weights`` the model's global weights
    (a list in parameter order, a name -> array mapping, or ``export_tvm``'s ``params``), for the
    parameters after the first ``num_input`` (TVM's ``num_input`` attribute unless given). A
    partial weight has no blocks and is refused.
    """
    count = _check_count(num_workers)
    if symbol in set().union(*(sym.free_vars(d) for m in local_mod.meshes() for d in m.shape)):
        # count variants: the pieces of the layout the count runs (what one build calls at it)
        try:
            local_mod = choose_variants(local_mod, {symbol: count})
        except DistirError as err:
            raise WeightsError(str(err)) from None
    f = _weights_function(local_mod, func)
    if GLOBAL_PARAMS not in f.attrs:
        raise WeightsError(f"@{f.name} is not distributed yet; run the distribute pipeline first")
    n_in = _num_input(f, num_input)
    types = list(f.attrs[GLOBAL_PARAMS])
    names = param_names(f)
    if num_input is not None and NUM_INPUT not in f.attrs:
        f = f.replace(attrs={**f.attrs, NUM_INPUT: n_in})
    arrays = weight_arguments(f, [np.empty(0)] * n_in, weights)[n_in:]
    mesh_sizes = set().union(*(sym.free_vars(d) for m in local_mod.meshes() for d in m.shape))
    values = {symbol: count} if symbol in mesh_sizes else {}
    workers = session_workers(local_mod.meshes(), values)
    per_worker: list[dict[str, np.ndarray]] = [{} for _ in range(workers)]
    params = []
    for i, (name, t, a) in enumerate(zip(names[n_in:], types[n_in:], arrays)):
        if isinstance(t, DTensorType) and t.placement.has_partial:
            raise WeightsError(f"weight '{name}' is laid out {t.placement}, a partial value: it has no blocks to write")
        for w, piece in enumerate(_pieces(t, a, values, workers)):
            per_worker[w][record_name(i, w, workers)] = piece
        params.append(_param_meta(i, name, t, values, workers))
    meta = {
        "format": FORMAT, "version": VERSION, "function": f.name, "num_input": n_in, "symbol": symbol, "count": count,
        "sizes": values, "workers": workers, "meshes": [mesh_json(m) for m in local_mod.meshes()], "params": params,
    }  # fmt: skip
    return _write(Path(out_dir), meta, per_worker)


def assemble_weights(directory: str | os.PathLike, *, verify: bool = True) -> dict[str, np.ndarray]:
    """The global weights of a set, by name (read piece by piece; for checks against one device)."""
    return assemble(read_set(directory, verify=verify))


def assemble(s: ShardedSet) -> dict[str, np.ndarray]:
    """The global weights of a set already read, by name."""
    values = dict(s.meta["sizes"])
    out = {}
    for i, p in enumerate(s.meta["params"]):
        pieces = [s.piece(i, w) for w in range(s.workers)]
        out[p["name"]] = _place(s.layout(i), p["global_shape"], pieces, values)
    return out


def reshard_weights(src_dir: str | os.PathLike, num_workers: int, out_dir: str | os.PathLike, *,
                    verify: bool = True) -> Path:
    """The set in ``src_dir`` (saved for one count) re-cut for ``num_workers``, written to ``out_dir``.

    Weight by weight: its pieces are read, placed in one global array, and cut for the new count
    by the same layout (the mesh and placement the set records, evaluated at the new count). A
    set saved from a module whose meshes are static has one count only. ``verify``: as :func:`read_set`."""
    s = read_set(src_dir, verify=verify)
    count = _check_count(num_workers)
    meta = dict(s.meta)
    symbol = meta["symbol"]
    meshes = [mesh_from_json(m) for m in meta["meshes"]]
    if count != meta["count"] and symbol not in set().union(*(sym.free_vars(d) for m in meshes for d in m.shape)):
        raise WeightsError(
            f"pre-sharded weights '{s.directory}' were saved for a module whose meshes are static ({meta['workers']} "
            f"workers); they cannot be re-sharded to {count}"
        )
    if Path(out_dir).resolve() == s.directory.resolve():
        raise WeightsError(f"reshard_weights writes a new set: out_dir must differ from '{s.directory}'")
    old = dict(meta["sizes"])
    new = {symbol: count} if symbol in old else {}
    workers = session_workers(meshes, new)
    per_worker: list[dict[str, np.ndarray]] = [{} for _ in range(workers)]
    params = []
    for i, p in enumerate(meta["params"]):
        t = s.layout(i)
        try:
            whole = _place(t, p["global_shape"], [s.piece(i, w) for w in range(s.workers)], old)
        except (ValueError, PlacementError) as err:
            raise WeightsError(f"pre-sharded weights '{s.directory}': weight '{p['name']}': {err}") from None
        for w, piece in enumerate(_pieces(t, whole, new, workers)):
            per_worker[w][record_name(i, w, workers)] = piece
        params.append(_param_meta(i, p["name"], t, new, workers))
    meta.update(count=count, sizes=new, workers=workers, params=params)
    return _write(Path(out_dir), meta, per_worker)


def _concrete_layout(t: Any, values: dict) -> tuple:
    """What decides the pieces of a weight at given sizes: mesh shape, devices and placement."""
    if not isinstance(t, DTensorType):
        return ("plain",)
    placement = str(concrete_placement(t.placement, values))
    return concrete_mesh_shape(t.mesh, values), tuple(t.mesh.device_list(values)), placement


def check_set(s: ShardedSet, local_mod: IRModule, func: str, values: Mapping[str, int] | None = None,
              workers: int | None = None) -> None:
    """Raise a one-line WeightsError unless the set holds the weights of ``func`` of ``local_mod``, laid
    out as it takes them, and (given ``values`` and ``workers``) exactly the pieces it takes at those
    sizes on a session of ``workers`` workers."""
    where = f"pre-sharded weights '{s.directory}'"
    meta = s.meta
    f = local_mod[func]
    if meta["function"] != func:
        raise WeightsError(f"{where} are for @{meta['function']}, not @{func}")
    values = dict(meta["sizes"]) if values is None else values
    if workers is not None and s.workers != workers:
        raise WeightsError(
            f"{where} were saved for {meta['symbol']}={meta['count']} ({s.workers} Disco workers); this run has "
            f"{workers}: re-shard them "
            f"with distir.tvm.reshard_weights('{s.directory}', {values.get(meta['symbol'], workers)}, OUT_DIR)"
        )
    types = list(f.attrs.get(GLOBAL_PARAMS, [p.type for p in f.params]))
    names = param_names(f)
    n_in = s.num_input
    if n_in + len(meta["params"]) != len(types):
        raise WeightsError(
            f"{where} hold {len(meta['params'])} weights after {n_in} inputs; @{func} has {len(types)} parameters"
        )
    for i, p in enumerate(meta["params"]):
        t, name = types[n_in + i], names[n_in + i]
        got = f"weight {i} '{p['name']}'"
        if p["name"] != name:
            raise WeightsError(f"{where}: {got} is parameter '{name}' of @{func}")
        if p["dtype"] != t.dtype:
            raise WeightsError(f"{where}: {got} is {p['dtype']}, @{func} takes {t.dtype}")
        if _concrete_layout(t, dict(values)) != _concrete_layout(s.layout(i), dict(meta["sizes"])):
            have = f"{p['placement']} on mesh {mesh_from_json(p['mesh']).shape_str()}" if p["mesh"] else "plain"
            take = f"{t.placement} on mesh {t.mesh.shape_str()}" if isinstance(t, DTensorType) else "plain"
            raise WeightsError(f"{where}: {got} is laid out {have}, @{func} takes it {take}")
        want = [sym.evaluate(d, dict(values)) for d in (local_shape(t.shape, t.mesh, t.placement)
                                                        if isinstance(t, DTensorType) else t.shape)]
        if list(p["local_shape"]) != want:
            raise WeightsError(f"{where}: {got} has pieces of shape {tuple(p['local_shape'])}, @{func} takes {tuple(want)}")
