"""``--inputs FILE.npz``: a program's arrays read from an archive that is data, never trusted.

Every member's name, dtype and shape come from its ``.npy`` header (``numpy.lib.format``),
read through ``zipfile`` without inflating the data, and are checked against the program's
parameters (names, ranks, dtypes, sizes, symbolic sizes bound alike) and against the bytes
the archive says the member holds, before any array is read: a small archive whose header
claims a huge shape is one line, not an allocation. Only then is each array read, at the
size its checked header gives.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import DistirError

if TYPE_CHECKING:
    import numpy as np

    from ..ir.expr import Function

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip with members, an empty zip
_SUFFIX = ".npy"


@dataclass(frozen=True)
class _Member:
    """One array of the archive, as its header describes it."""

    name: str  # the zip member's name (``x.npy``)
    shape: tuple[int, ...]
    dtype: Any  # a numpy dtype
    nbytes: int


def load_inputs(
    path: str,
    names: Sequence[str],
    aliases: Mapping[str, str] | None = None,
    func: Function | None = None,
    sizes: Mapping[str, int] | None = None,
) -> list[np.ndarray]:
    """Arrays for the parameters ``names`` from an .npz file (by name, else arr_0, arr_1, ...).

    ``aliases`` maps other names of a parameter to its name (a model's state-dict names,
    ``wte.weight`` for ``wte_weight``): an array may be stored under either. With ``func``
    (whose parameters are ``names``), each array's header is checked against its parameter's
    type, ``sizes`` giving the values of symbolic sizes already known, before any data is read."""
    _check_kind(path, names)
    members = _headers(path)
    chosen = _choose(path, names, members, aliases or {})
    if func is not None:
        _check_against(path, func, [members[k] for k in chosen], sizes or {})
    _check_memory(path, [members[k] for k in chosen])
    return _read(path, [members[k] for k in chosen])


def _check_kind(path: str, names: Sequence[str]) -> None:
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except FileNotFoundError:
        raise DistirError(f"cannot read '{path}': no such file") from None
    except IsADirectoryError:
        raise DistirError(f"cannot read '{path}': it is a directory") from None
    except OSError as err:
        raise DistirError(f"cannot read '{path}': {err.strerror or err}") from None
    if head.startswith(_NPY_MAGIC):
        raise DistirError(
            f"--inputs '{path}' is a single .npy array; give an .npz archive with one array per parameter "
            f"({', '.join(names)}), e.g. numpy.savez('inputs.npz', {names[0] if names else 'x'}=...)"
        )
    if not head.startswith(_ZIP_MAGIC):
        raise DistirError(f"--inputs '{path}' is not an .npz archive (numpy.savez writes one)")


def _bad(path: str, why: str) -> DistirError:
    return DistirError(f"cannot read '{path}' as an .npz archive: {why}")


def _headers(path: str) -> dict[str, _Member]:
    """Each member's header, by its key (the name without ``.npy``), nothing inflated past it."""
    from numpy.lib import format as npy

    out: dict[str, _Member] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.is_dir():
                    continue
                if not info.filename.endswith(_SUFFIX):
                    raise _bad(path, f"member '{info.filename}' is not a .npy array")
                key = info.filename[: -len(_SUFFIX)]
                if key in out:
                    raise _bad(path, f"it holds two members named '{info.filename}'")
                with archive.open(info) as fh:
                    try:
                        version = npy.read_magic(fh)
                        if version == (1, 0):
                            shape, _fortran, dtype = npy.read_array_header_1_0(fh)
                        elif version == (2, 0):
                            shape, _fortran, dtype = npy.read_array_header_2_0(fh)
                        else:
                            raise ValueError(f".npy format version {version[0]}.{version[1]} is not read (1.0 and 2.0 are)")
                    except ValueError as err:
                        raise _bad(path, f"member '{info.filename}': {_first_line(err)}") from None
                    offset = fh.tell()
                if dtype.hasobject:
                    raise _bad(path, f"member '{info.filename}' holds Python objects (pickled arrays), which are not read")
                nbytes = dtype.itemsize
                for n in shape:
                    nbytes *= n  # Python ints: a claimed shape cannot overflow
                if info.file_size != offset + nbytes:
                    raise _bad(path, f"member '{info.filename}' says it holds {info.file_size} bytes, but its header "
                                     f"(shape {tuple(shape)}, {dtype}) needs {offset + nbytes}")
                out[key] = _Member(info.filename, tuple(int(n) for n in shape), dtype, nbytes)
    except DistirError:
        raise
    except Exception as err:  # noqa: BLE001 - zipfile, zlib and numpy raise many kinds for a damaged archive
        raise _bad(path, _first_line(err)) from None
    return out


def _first_line(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text.rstrip(".")


def _choose(path: str, names: Sequence[str], members: Mapping[str, _Member], aliases: Mapping[str, str]) -> list[str]:
    """The member key of each parameter; every member read by one."""
    other: dict[str, list[str]] = {}
    for alias, name in aliases.items():
        other.setdefault(name, []).append(alias)
    out, used = [], set()
    for i, name in enumerate(names):
        keys = [name, *other.get(name, ())]
        given = [k for k in keys if k in members]
        if len(given) > 1:
            raise DistirError(f"'{path}' has two arrays for parameter '{name}': {' and '.join(map(repr, given))}")
        for key in (*keys, f"arr_{i}"):
            if key in members:
                out.append(key)
                used.add(key)
                break
        else:
            also = f" or '{other[name][0]}'" if name in other else ""
            raise DistirError(f"'{path}' has no array for parameter '{name}'{also} (it has: {', '.join(members) or 'none'})")
    extra = [k for k in members if k not in used]
    if extra:  # a misspelt name would otherwise be ignored
        raise DistirError(
            f"'{path}' has {'an array' if len(extra) == 1 else 'arrays'} {', '.join(repr(k) for k in extra)} that "
            f"no parameter reads (the parameters: {', '.join(names) or 'none'})"
        )
    return out


def _check_against(path: str, func: Function, members: Sequence[_Member], sizes: Mapping[str, int]) -> None:
    """The parameters' checks (rank, dtype, sizes, symbolic sizes bound alike) on stand-ins of the
    headers' shapes and dtypes: zero-stride views of one element, so nothing is allocated."""
    import numpy as np

    from ..runtime.interpreter import bind_params

    stand_ins = []
    for m in members:
        try:
            stand_ins.append(np.broadcast_to(np.zeros((), m.dtype), m.shape))
        except ValueError as err:  # a shape numpy cannot index
            raise _bad(path, f"member '{m.name}': shape {m.shape}: {_first_line(err)}") from None
    try:
        bind_params(func, stand_ins, sizes)
    except DistirError as err:
        raise DistirError(f"'{path}': {_first_line(err)}") from None


def _check_memory(path: str, members: Sequence[_Member]) -> None:
    """The arrays must fit in this machine's memory before they are inflated."""
    total = sum(m.nbytes for m in members)
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not known on this system
        return
    if total > physical:
        raise DistirError(f"'{path}' holds arrays of {total} bytes in all, more than this machine's memory ({physical} bytes)")


def _read(path: str, members: Sequence[_Member]) -> list[np.ndarray]:
    """Each checked member read at the size its header gives."""
    from numpy.lib import format as npy

    out = []
    try:
        with zipfile.ZipFile(path) as archive:
            for m in members:
                with archive.open(m.name) as fh:
                    out.append(npy.read_array(fh, allow_pickle=False))
    except Exception as err:  # noqa: BLE001 - a damaged deflate stream, a short member, ...
        raise _bad(path, _first_line(err)) from None
    return out
