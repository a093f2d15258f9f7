"""A pre-sharded set's manifest checked against itself and the files it names, before anything reads them.

A set is data from outside: its ``tensor-cache.json`` must not name a path out of the set's folder,
a device or a FIFO, nor make anyone allocate what its files do not hold. :func:`load_manifest` checks,
in order, with no read of a data file before its path is known to be a regular file inside the set:

- the JSON (no repeated key in any object: TVM's parser and Python's would disagree on which wins);
- the metadata: its format and version, the count, the size it binds, the session size against the
  meshes' device ids, every weight's dtype, mesh, placement, and global and local shapes against each
  other (evaluated symbolically, nothing allocated);
- the records: exactly one ``param_<i>_shard-<w+1>-of-<n>`` per weight and worker, each of the
  weight's dtype and local shape, ``nbytes`` = elements x item size, format ``raw``;
- the data files: each ``dataPath`` relative, without ``..``, resolving (symlinks followed) to a
  regular file inside the set's resolved folder, its size the one recorded, every record's bytes
  inside it;
- with ``verify`` (the default), each data file's MD5 against the ``md5sum`` that
  ``tvm.contrib.tvmjs.dump_tensor_cache`` wrote: a file swapped for another of the same size is caught.
  ``verify=False`` skips only this, for sets too large to hash before every run.

What passes is re-serialized (:attr:`Manifest.text`): that text, not the file's, is what TVM's
ShardLoader parses. Every failure is one :class:`WeightsError` line naming the set, the record or
file, and the problem.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import DistirError
from ..ir import sym, sym_parse
from ..ir.layout import local_shape
from ..ir.mesh import DeviceMesh, Range
from ..ir.placement import Placement
from ..ir.types import DTYPES, DTensorType, TensorType, np_dtype
from ..transform.weights import WeightsError
from . import ranges

__all__ = [
    "CACHE_JSON", "FORMAT", "VERSION", "Manifest", "Record", "check_data_file", "check_record_bytes", "load_manifest",
    "open_regular", "read_json", "read_manifest", "record_name",
]  # fmt: skip

CACHE_JSON = "tensor-cache.json"
FORMAT = "distir.sharded-weights"
VERSION = 1
MAX_JSON_BYTES = 256 << 20  # a set's manifest: ~150 bytes a record; this is a million records and more
_CHUNK = 1 << 20


def record_name(index: int, worker: int, workers: int) -> str:
    """The name ``ShardLoaderLoadAllPresharded`` reads for weight ``index`` on ``worker`` of ``workers``."""
    return f"param_{index}_shard-{worker + 1}-of-{workers}"


def mesh_json(mesh: DeviceMesh) -> dict:
    ids = mesh.device_ids
    device_ids = {"range": [sym.to_str(ids.start), sym.to_str(ids.stop)]} if isinstance(ids, Range) else {"list": list(ids)}
    return {"shape": [sym.to_str(d) for d in mesh.shape], **device_ids}


def mesh_from_json(data: dict) -> DeviceMesh:
    shape = tuple(sym_parse.parse(d) for d in data["shape"])
    ids = Range(*(sym_parse.parse(d) for d in data["range"])) if "range" in data else tuple(int(i) for i in data["list"])
    return DeviceMesh(shape, ids)


def param_layout(p: Mapping) -> Any:
    """A weight's type in the module's global view, from its metadata (a DTensorType or a TensorType)."""
    shape = tuple(sym_parse.parse(d) for d in p["global_shape_formula"])
    if p["mesh"] is None:
        return TensorType(shape, p["dtype"])
    return DTensorType(shape, p["dtype"], mesh_from_json(p["mesh"]), Placement.parse(p["placement"]))


def _q(value: Any) -> str:
    """A value from the manifest on one line: a string quoted (control characters escaped), else its JSON."""
    if not isinstance(value, str):
        try:
            return json.dumps(value)[:80]
        except (TypeError, ValueError):
            return type(value).__name__
    return f"'{value}'" if value.isprintable() and len(value) <= 200 else repr(value[:200])


@dataclass(frozen=True)
class Record:
    """One piece: the data file (resolved, checked), where its bytes lie, its shape and dtype."""

    data_path: str  # as the manifest says it, relative to the set
    file: Path  # resolved, inside the set
    offset: int
    nbytes: int
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Manifest:
    meta: dict
    records: dict[str, Record]
    text: str  # the checked manifest, re-serialized: what TVM is handed


def open_regular(path: Path, where: str) -> tuple[int, os.stat_result]:
    """A read-only descriptor of ``path`` and its stat, refusing anything but a regular file
    (:func:`distir.tvm.ranges.open_regular`, its failures WeightsError lines)."""
    return ranges.open_regular(path, where, WeightsError)


def _reject_repeats(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"an object repeats the key {_q(next(k for k in keys if keys.count(k) > 1))}")
    return dict(pairs)


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def _int(v: Any, low: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


def _shape(v: Any) -> bool:
    return isinstance(v, list) and all(_int(d) for d in v)


def read_json(directory: Path, where: str) -> Any:
    """The set's ``tensor-cache.json`` parsed: a regular file of at most MAX_JSON_BYTES, no key repeated."""
    return read_manifest(directory / CACHE_JSON, where, MAX_JSON_BYTES, "distir.tvm.shard_weights", WeightsError)


def read_manifest(path: Path, where: str, max_bytes: int, writer: str, error: type[Exception]) -> Any:
    """A manifest (a set's, an artifact's) parsed as untrusted input: a regular file of at most
    ``max_bytes``, opened without following a symlink, UTF-8 JSON with no key repeated and no NaN or
    Infinity; anything else is one ``error`` line (``writer`` names what writes a good one)."""
    name = path.name
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{where}: no {name} (write one with {writer})") from None
    except OSError as err:
        raise error(f"{where}: cannot read {name}: {err.strerror or err}") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{where}: {name} is not a regular file")
    if st.st_size > max_bytes:
        raise error(f"{where}: {name} is {st.st_size} bytes, more than a manifest ({max_bytes})")
    try:
        fd, st = open_regular(Path(os.path.realpath(path)), f"{where}: {name}")
    except WeightsError as err:
        raise error(str(err)) from None
    with os.fdopen(fd, "rb") as f:
        raw = f.read(min(st.st_size, max_bytes) + 1)  # read(n) allocates n: the size it has, not the cap
    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=_reject_repeats, parse_constant=_no_constant)
    except (ValueError, RecursionError) as err:
        raise error(f"{where}: {name} is not valid JSON: {str(err).splitlines()[0]}") from None


def _check_meta(meta: Any, where: str) -> None:
    """The metadata's own fields, their types and how they agree with each other (nothing allocated)."""
    bad = f"{where}: {CACHE_JSON} is not a distir set of version {VERSION}"
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not _int(meta.get("version")) \
            or meta["version"] != VERSION:
        raise WeightsError(f"{bad} (no metadata.distir)")
    fields = {"function": str, "symbol": str, "num_input": int, "count": int, "workers": int, "sizes": dict,
              "meshes": list, "params": list}
    for key, kind in fields.items():
        if key not in meta:
            raise WeightsError(f"{where}: metadata has no '{key}'")
        v = meta[key]
        if not isinstance(v, kind) or isinstance(v, bool) or (kind is int and v < (0 if key == "num_input" else 1)):
            kind_name = ("a non-negative integer" if key == "num_input" else "a positive integer") if kind is int \
                else f"a {kind.__name__}"
            raise WeightsError(f"{where}: metadata '{key}' is {_q(v)}, not {kind_name}")
    sizes, symbol = meta["sizes"], meta["symbol"]
    if any(not _int(v, 1) for v in sizes.values()):
        raise WeightsError(f"{where}: metadata 'sizes' must bind each name to a positive integer, got {_q(sizes)}")
    if sizes not in ({symbol: meta["count"]}, {}):
        raise WeightsError(f"{where}: metadata 'sizes' {_q(sizes)} do not say {symbol}={meta['count']} "
                           f"(the set's count) or nothing (static meshes)")
    free = set()
    try:
        meshes = [mesh_from_json(m) for m in meta["meshes"]]
    except (DistirError, KeyError, TypeError, ValueError) as err:
        raise WeightsError(f"{where}: metadata 'meshes': {str(err).splitlines()[0] if str(err) else 'not a mesh'}") from None
    for m in meshes:
        free |= {n for d in m.shape for n in sym.free_vars(d)}
    if free - set(sizes):
        raise WeightsError(f"{where}: metadata 'meshes' use {', '.join(sorted(free - set(sizes)))}, which 'sizes' do not bind")
    if sizes and symbol not in free:
        raise WeightsError(f"{where}: metadata 'sizes' bind {symbol}, which no mesh uses")
    top = 0
    for m in meshes:  # one past the largest device id, without listing them (a Range of 10^9 is one number)
        ids = m.device_ids
        try:
            count = math.prod(sym.evaluate(d, sizes) for d in m.shape)
            start, stop = (sym.evaluate(ids.start, sizes), sym.evaluate(ids.stop, sizes)) if isinstance(ids, Range) \
                else (min(ids), max(ids) + 1)
        except DistirError as err:
            raise WeightsError(f"{where}: metadata mesh {_q(mesh_json(m))}: {err}") from None
        if isinstance(ids, Range) and (stop - start != count or start < 0):
            raise WeightsError(f"{where}: metadata mesh {m.shape_str()} has {count} devices at {_q(sizes)}, "
                               f"ids {start}..{stop - 1}")
        top = max(top, stop)
    if max(top, 1) != meta["workers"]:
        raise WeightsError(f"{where}: metadata says {meta['workers']} workers; its meshes at {_q(sizes)} "
                           f"have {max(top, 1)}")
    for i, p in enumerate(meta["params"]):
        _check_param(i, p, meta, where)


def _check_param(i: int, p: Any, meta: dict, where: str) -> None:
    """One weight's metadata: dtype, mesh among the set's, placement valid for it, shapes that agree."""
    what = f"{where}: weight {i}"
    keys = ("index", "name", "dtype", "global_shape", "global_shape_formula", "local_shape", "mesh", "placement")
    if not isinstance(p, dict) or any(k not in p for k in keys):
        raise WeightsError(f"{what}: its metadata lacks one of {', '.join(keys)}")
    what = f"{what} {_q(p['name'])}"
    if p["index"] != i or not isinstance(p["name"], str):
        raise WeightsError(f"{what}: metadata index {_q(p['index'])} is not its position {i}")
    if p["dtype"] not in DTYPES:
        raise WeightsError(f"{what}: unknown dtype {_q(p['dtype'])} (known: {', '.join(DTYPES)})")
    if not _shape(p["global_shape"]) or not _shape(p["local_shape"]):
        raise WeightsError(f"{what}: global and local shapes must be lists of non-negative integers")
    if (p["mesh"] is None) != (p["placement"] is None) or (p["mesh"] is not None and p["mesh"] not in meta["meshes"]):
        raise WeightsError(f"{what}: its mesh is not one of the set's meshes")
    sizes = meta["sizes"]
    try:
        t = param_layout(p)
        if isinstance(t, DTensorType):
            t.placement.validate(t.mesh.ndim, len(t.shape), what="placement", shape=t.shape)
            local = local_shape(t.shape, t.mesh, t.placement)
        else:
            local = t.shape
        glob = [sym.evaluate(d, sizes) for d in t.shape]
        local = [sym.evaluate(d, sizes) for d in local]
    except (DistirError, KeyError, TypeError, ValueError, IndexError) as err:
        raise WeightsError(f"{what}: {str(err).splitlines()[0] if str(err) else type(err).__name__}") from None
    if glob != p["global_shape"]:
        raise WeightsError(f"{what}: global shape {tuple(p['global_shape'])} is not its formula "
                           f"{tuple(p['global_shape_formula'])} at {_q(sizes)} ({tuple(glob)})")
    if local != p["local_shape"]:
        raise WeightsError(f"{what}: local shape {tuple(p['local_shape'])} is not the piece of {tuple(glob)} "
                           f"laid out {p['placement']} ({tuple(local)})")


def _data_file(root: Path, data_path: Any, where: str) -> tuple[Path, os.stat_result]:
    """The resolved data file of a ``dataPath``: a regular file inside the set's resolved folder."""
    if not isinstance(data_path, str) or not data_path or "\0" in data_path or "\\" in data_path:
        raise WeightsError(f"{where}: dataPath must be a relative path inside the set")
    pure = PurePosixPath(data_path)
    if pure.is_absolute() or os.path.isabs(data_path):
        raise WeightsError(f"{where}: dataPath is absolute; a set names its files relative to its folder")
    if ".." in pure.parts:
        raise WeightsError(f"{where}: dataPath goes up ('..'); a set names only files inside its folder")
    path = Path(os.path.realpath(root / pure))
    if not path.is_relative_to(root):
        raise WeightsError(f"{where}: dataPath resolves to a file outside the set (a symbolic link out)")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise WeightsError(f"{where}: no such file") from None
    except OSError as err:
        raise WeightsError(f"{where}: cannot stat: {err.strerror or err}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else \
            "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file"
        raise WeightsError(f"{where}: names {kind}, not a data file")
    return path, st


def _md5(path: Path, size: int, where: str) -> str:
    fd, _ = open_regular(path, where)
    h = hashlib.md5()
    with os.fdopen(fd, "rb") as f:
        left = size + 1  # one byte more: a file grown since its check shows as a wrong size
        while left > 0:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
    if left != 1:
        raise WeightsError(f"{where}: changed size while being read ({size} bytes when checked)")
    return h.hexdigest()


def load_manifest(directory: Path, where: str, verify: bool = True) -> Manifest:
    """The set's manifest, checked (see the module docstring); one WeightsError line otherwise."""
    data = read_json(directory, where)
    if not isinstance(data, dict) or not isinstance(data.get("metadata"), dict) or "distir" not in data["metadata"]:
        raise WeightsError(f"{where}: {CACHE_JSON} is not a distir set of version {VERSION} (no metadata.distir)")
    meta = data["metadata"]["distir"]
    _check_meta(meta, where)
    files = data.get("records")
    if not isinstance(files, list):
        raise WeightsError(f"{where}: {CACHE_JSON} has no list of 'records'")
    workers, params = meta["workers"], meta["params"]
    count = sum(len(f["records"]) if isinstance(f, dict) and isinstance(f.get("records"), list) else 0 for f in files)
    if count != len(params) * workers:  # before the names are listed: a count of 10^9 workers lists nothing
        raise WeightsError(f"{where}: {CACHE_JSON} lists {count} records, not {len(params) * workers} "
                           f"({len(params)} weights x {workers} workers): the set is incomplete")
    want = {record_name(i, w, workers): (i, w) for i in range(len(params)) for w in range(workers)}
    root = Path(os.path.realpath(directory))
    records: dict[str, Record] = {}
    for f in files:
        path, size = check_data_file(root, f, where, verify)
        for r in f["records"]:
            records_add(records, r, f["dataPath"], path, size, want, params, where)
    return Manifest(meta, records, json.dumps(data))


def check_data_file(root: Path, f: Any, where: str, verify: bool) -> tuple[Path, int]:
    """One entry of a manifest's ``records``: a ``raw-shard`` file inside the set's resolved folder
    ``root``, of the size recorded, and with ``verify`` of the MD5 recorded; (its path, its size)."""
    if not isinstance(f, dict) or not isinstance(f.get("records"), list) or f.get("format") != "raw-shard":
        raise WeightsError(f"{where}: a data file entry is not a 'raw-shard' with a list of records")
    first = f["records"][0].get("name") if f["records"] and isinstance(f["records"][0], dict) else None
    fwhere = f"{where}: data file {_q(f.get('dataPath'))} (record {_q(first)})"
    path, st = _data_file(root, f.get("dataPath"), fwhere)
    if f.get("nbytes") != st.st_size:
        raise WeightsError(f"{fwhere}: is {st.st_size} bytes, the manifest says {_q(f.get('nbytes'))} (truncated or replaced)")
    if verify:
        digest = f.get("md5sum")
        if not isinstance(digest, str):
            raise WeightsError(f"{fwhere}: no md5sum to verify (pass verify=False to load it unverified)")
        got = _md5(path, st.st_size, fwhere)
        if got != digest.lower():
            raise WeightsError(f"{fwhere}: checksum mismatch (MD5 {got}, the manifest says {_q(digest)}): "
                               f"the file is damaged or not this set's")
    return path, st.st_size


def check_record_bytes(r: dict, rwhere: str, name: str, dtype: str, shape: Any, size: int) -> tuple[int, int]:
    """A record of weight ``name`` (``dtype``, ``shape``): raw, of that dtype and shape, its bytes inside
    a file of ``size`` bytes; (its offset, its byte count)."""
    if r.get("format") != "raw":
        raise WeightsError(f"{rwhere}: format {_q(r.get('format'))}, not 'raw' (distir reads bytes as they are)")
    if r.get("dtype") != dtype:
        raise WeightsError(f"{rwhere}: dtype {_q(r.get('dtype'))}, weight {_q(name)} is {dtype}")
    if not _shape(r.get("shape")) or r["shape"] != list(shape):
        raise WeightsError(f"{rwhere}: shape {_q(r.get('shape'))}, weight {_q(name)} has pieces of shape {tuple(shape)}")
    nbytes, offset = r.get("nbytes"), r.get("byteOffset")
    want_bytes = math.prod(r["shape"]) * np_dtype(dtype).itemsize
    if not _int(nbytes) or nbytes != want_bytes:
        raise WeightsError(f"{rwhere}: nbytes {_q(nbytes)}, a piece of shape {tuple(r['shape'])} {dtype} is {want_bytes}")
    if not _int(offset):
        raise WeightsError(f"{rwhere}: byteOffset {_q(offset)} is not a non-negative integer")
    if offset + nbytes > size:
        raise WeightsError(f"{rwhere}: bytes {offset}..{offset + nbytes} lie past the end of the file ({size} bytes)")
    return offset, nbytes


def records_add(records: dict, r: Any, data_path: str, path: Path, size: int, want: dict, params: list, where: str) -> None:
    """Check one record of a data file against its weight and the file's size; add it."""
    name = r.get("name") if isinstance(r, dict) else None
    rwhere = f"{where}: record {_q(name)} in {_q(data_path)}"
    if not isinstance(name, str) or name not in want:
        raise WeightsError(f"{rwhere}: not a piece of this set (names are param_<i>_shard-<w+1>-of-<workers>)")
    if name in records:
        raise WeightsError(f"{rwhere}: listed twice")
    p = params[want[name][0]]
    offset, nbytes = check_record_bytes(r, rwhere, p["name"], p["dtype"], p["local_shape"], size)
    records[name] = Record(data_path, path, offset, nbytes, tuple(r["shape"]), r["dtype"])
