"""A build that runs at every count, written to a folder once and run later without ``tvm.compile``.

:func:`write_artifact` writes the shared library of the symbolic export (``num_workers`` a
parameter of every function, so one library serves every count) and ``distir-artifact.json``,
what a run needs besides it: the local-view module that was exported (its text: global
signatures, how to cut inputs, the steps to count), the global-view module it came from (the
single-device run a result is compared with), the function, the size symbol, the target, the
versions of distir and TVM, the library's SHA-256 and the export's structural hash.

:func:`load_artifact` treats the folder as input from outside and checks, before anything is
loaded, with one :class:`ArtifactError` line naming the folder and the problem otherwise: the
manifest (a regular file of bounded size, JSON without repeated keys, this format and version,
every field of its type, the same distir and TVM versions); the library (a relative path without
``..`` resolving to a regular file inside the folder, its size and SHA-256 the recorded ones,
copied while hashed into the process's private folder, so the bytes checked are the bytes
loaded); the modules (parsed by distir's parser, never executed; the local one exports to the
recorded structural hash, so the text is the program the library was built from). Loading a
shared library runs its code: an artifact must come from a build you trust, as any ``.so``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import tvm
import tvm_ffi

from ..errors import DistirError
from ..ir.expr import IRModule
from .disco.run import library_dir
from .errors import ArtifactError, TargetError
from .weights_check import open_regular, read_manifest
from ..transform.weights import WeightsError

__all__ = ["LIBRARY", "MANIFEST", "Artifact", "load_artifact", "write_artifact"]

MANIFEST = "distir-artifact.json"
LIBRARY = "module.so"
FORMAT = "distir.artifact"
VERSION = 1
MAX_MANIFEST_BYTES = 160 << 20  # two module texts of at most 64 MiB each (the parser's limit) and the rest
MAX_LIBRARY_BYTES = 16 << 30
_CHUNK = 1 << 20
_FIELDS = {"format": str, "version": int, "distir_version": str, "tvm_version": str, "func": str, "symbol": str,
           "bind": dict, "target": dict, "functions": list, "library": dict, "relax_hash": str, "local": str,
           "source": str}


@dataclass(frozen=True)
class Artifact:
    """A checked artifact: its private library copy, the modules, what it was built for."""

    directory: Path
    library: str  # the checked copy every worker loads
    local: IRModule  # the symbolic local-view module the library was built from
    source: IRModule  # the global-view module that was distributed
    local_text: str
    func: str
    symbol: str
    bind: dict[str, int]
    target: tvm.target.Target
    manifest: dict = field(repr=False)


def _distir_version() -> str:
    """The version of the distir package this module belongs to (imported before any of its modules;
    read, not imported, since the package's root imports layers above this one)."""
    return sys.modules[__name__.split(".")[0]].__version__


def _sha256_copy(src_fd: int, size: int, dst: str | None, where: str) -> str:
    """The SHA-256 of ``size`` bytes read from ``src_fd``, written to ``dst`` as they are read."""
    h = hashlib.sha256()
    out = open(dst, "xb") if dst else None  # noqa: SIM115 - closed below
    try:
        with os.fdopen(src_fd, "rb") as f:
            left = size + 1  # one byte more: a file grown since its check shows as a wrong size
            while left > 0:
                chunk = f.read(min(_CHUNK, left))
                if not chunk:
                    break
                h.update(chunk)
                if out:
                    out.write(chunk)
                left -= len(chunk)
    finally:
        if out:
            out.close()
    if left != 1:
        raise ArtifactError(f"{where}: changed size while being read ({size} bytes when checked)")
    return h.hexdigest()


def _relax_hash(local: IRModule) -> str:
    from .relax.export import to_relax

    return format(tvm_ffi.structural_hash(to_relax(local, dispatch=True)), "016x")


def _functions(local: IRModule) -> list[dict]:
    """Each function's global signature as text (what the manifest lists, and a run checks)."""
    from ..transform.lower_to_local import GLOBAL_PARAMS, GLOBAL_RESULT

    out = []
    for name, f in local.functions.items():
        params = f.attrs.get(GLOBAL_PARAMS, [p.type for p in f.params])
        out.append({"name": name, "params": [p.name for p in f.params], "global_params": [str(t) for t in params],
                    "global_result": str(f.attrs.get(GLOBAL_RESULT, f.result.type))})
    return out


def write_artifact(built, directory: str | os.PathLike, *, local: IRModule, source: IRModule, func: str,
                   symbol: str, bind: dict[str, int], target: Any) -> Path:
    """Write ``built`` (the build of ``to_relax(local)`` for ``target``, no size bound) and its manifest
    into ``directory`` (made if missing; the two files replaced whole, nothing else touched)."""
    from .targets import parse_target

    root = Path(directory)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ArtifactError(f"artifact '{root}': cannot make the folder: {err.strerror or err}") from None
    if not root.is_dir():
        raise ArtifactError(f"artifact '{root}': not a folder")
    tmp = tempfile.mkdtemp(prefix=".distir-build-", dir=root)
    try:
        lib = os.path.join(tmp, LIBRARY)
        built.export_library(lib)
        size = os.path.getsize(lib)
        fd, _ = open_regular(Path(lib), lib)
        digest = _sha256_copy(fd, size, None, lib)
        manifest = {
            "format": FORMAT, "version": VERSION, "distir_version": _distir_version(), "tvm_version": tvm.__version__,
            "func": func, "symbol": symbol, "bind": {k: int(v) for k, v in bind.items()},
            "target": _target_json(parse_target(target)), "functions": _functions(local),
            "library": {"path": LIBRARY, "bytes": size, "sha256": digest}, "relax_hash": _relax_hash(local),
            "local": local.script(), "source": source.script(),
        }
        text = json.dumps(manifest, indent=1)
        with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as f:
            f.write(text + "\n")
        os.replace(lib, root / LIBRARY)  # the library first: a manifest never names a library not yet there
        os.replace(os.path.join(tmp, MANIFEST), root / MANIFEST)
    except OSError as err:
        raise ArtifactError(f"artifact '{root}': cannot write: {err.strerror or err}") from None
    finally:
        for name in (LIBRARY, MANIFEST):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(tmp, name))
        with contextlib.suppress(OSError):
            os.rmdir(tmp)
    return root


def _target_json(t: tvm.target.Target) -> dict:
    def plain(v):
        if isinstance(v, (str, int, float, bool)) or v is None:
            return v
        if isinstance(v, (list, tuple)) or type(v).__name__ == "Array":
            return [plain(x) for x in v]
        if hasattr(v, "items"):
            return {str(k): plain(x) for k, x in v.items()}
        return str(v)

    return plain(t.export())


def _q(value: Any) -> str:
    """A value from the manifest on one line."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return repr(text[:120]) if not text.isprintable() or len(text) > 120 else f"'{text}'"


def _read_manifest(root: Path, where: str) -> dict:
    data = read_manifest(root / MANIFEST, where, MAX_MANIFEST_BYTES, "distir build FILE -o DIR", ArtifactError)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ArtifactError(f"{where}: {MANIFEST} is not a distir artifact (format {_q(FORMAT)})")
    for key, kind in _FIELDS.items():
        if key not in data:
            raise ArtifactError(f"{where}: {MANIFEST} has no '{key}'")
        if not isinstance(data[key], kind) or isinstance(data[key], bool):
            raise ArtifactError(f"{where}: {MANIFEST} '{key}' is {_q(data[key])}, not a {kind.__name__}")
    if data["version"] != VERSION:
        raise ArtifactError(f"{where}: artifact version {data['version']}, this distir reads version {VERSION}")
    for key, have in (("distir_version", _distir_version()), ("tvm_version", tvm.__version__)):
        if data[key] != have:
            raise ArtifactError(f"{where}: built with {key.split('_')[0]} {_q(data[key])}, this is {have}: "
                                "build it again with this one")
    if any(not isinstance(k, str) or not isinstance(v, int) or isinstance(v, bool) or v < 1
           for k, v in data["bind"].items()):
        raise ArtifactError(f"{where}: {MANIFEST} 'bind' must bind names to positive integers, got {_q(data['bind'])}")
    return data


def _library(root: Path, entry: dict, where: str) -> str:
    """The library checked (inside the folder, a regular file, its size and SHA-256) and copied privately."""
    rel, size, digest = entry.get("path"), entry.get("bytes"), entry.get("sha256")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_LIBRARY_BYTES \
            or not isinstance(digest, str):
        raise ArtifactError(f"{where}: {MANIFEST} 'library' needs 'bytes' (1 to {MAX_LIBRARY_BYTES}) and 'sha256'")
    if not isinstance(rel, str) or not rel or "\0" in rel or "\\" in rel or PurePosixPath(rel).is_absolute() \
            or os.path.isabs(rel) or ".." in PurePosixPath(rel).parts:
        raise ArtifactError(f"{where}: library path {_q(rel)} is not a relative path inside the artifact")
    resolved = Path(os.path.realpath(root / rel))
    if not resolved.is_relative_to(Path(os.path.realpath(root))):
        raise ArtifactError(f"{where}: library path {_q(rel)} resolves outside the artifact (a symbolic link out)")
    lwhere = f"{where}: library {_q(rel)}"
    if not resolved.exists():
        raise ArtifactError(f"{lwhere}: no such file (the artifact is incomplete)")
    try:
        fd, st = open_regular(resolved, lwhere)
    except WeightsError as err:
        raise ArtifactError(str(err)) from None
    if st.st_size != size:
        os.close(fd)
        raise ArtifactError(f"{lwhere}: is {st.st_size} bytes, the manifest says {size} (truncated or replaced)")
    copy = os.path.join(tempfile.mkdtemp(prefix="artifact-", dir=library_dir()), LIBRARY)
    got = _sha256_copy(fd, size, copy, lwhere)
    if got != digest.lower():
        os.remove(copy)
        raise ArtifactError(f"{lwhere}: checksum mismatch (SHA-256 {got}, the manifest says {_q(digest)}): "
                            "the file is damaged or not this artifact's")
    return copy


def load_artifact(directory: str | os.PathLike) -> Artifact:
    """The artifact in ``directory``, checked (see the module docstring); one ArtifactError line otherwise."""
    from ..script.parser import parse_source

    root = Path(directory)
    where = f"artifact '{root}'"
    if not root.is_dir():
        raise ArtifactError(f"{where}: no such folder" if not root.exists() else f"{where}: not a folder")
    data = _read_manifest(root, where)
    try:
        local = parse_source(data["local"], f"{MANIFEST}:local")
        source = parse_source(data["source"], f"{MANIFEST}:source")
    except DistirError as err:
        raise ArtifactError(f"{where}: a module in {MANIFEST} does not parse: {str(err).splitlines()[0]}") from None
    if data["func"] not in local.functions or data["func"] not in source.functions:
        raise ArtifactError(f"{where}: {MANIFEST} names the function {_q(data['func'])}, which its modules lack")
    if data["functions"] != _functions(local):
        raise ArtifactError(f"{where}: {MANIFEST} 'functions' do not match its local module's signatures")
    try:
        from .targets import parse_target

        target = parse_target(data["target"])
    except TargetError as err:
        raise ArtifactError(f"{where}: {err}") from None
    try:
        exported = _relax_hash(local)
    except DistirError as err:
        raise ArtifactError(f"{where}: its local module does not export to TVM: {str(err).splitlines()[0]}") from None
    if exported != data["relax_hash"]:
        raise ArtifactError(f"{where}: its local module exports to structural hash {exported}, the manifest says "
                            f"{_q(data['relax_hash'])}: the module text is not what the library was built from")
    library = _library(root, data["library"], where)
    return Artifact(root, library, local, source, data["local"], data["func"], data["symbol"], dict(data["bind"]),
                    target, data)
