"""Reading the input of the parser: a file, a stream or bytes, as UTF-8 text of bounded size.

Kept apart from the grammar (:mod:`distir.script.parser`) so that every way in (``parse_file``,
``distir-opt``'s stdin, the fuzzers' bytes) meets the same limit and the same one-line errors.
"""

from __future__ import annotations

import os

from ..errors import ParseError

__all__ = ["MAX_INPUT_BYTES", "decode_source", "read_file", "read_stream"]

# The largest input read or parsed: 64 MiB (bytes of a file or stdin, characters of a str).
# A file is read up to this many bytes plus one, so /dev/zero or a runaway pipe ends in an
# error instead of exhausting memory.
MAX_INPUT_BYTES = 64 * 1024 * 1024
_MAX_INPUT_TEXT = "64 MiB"


def _path_name(path: str | os.PathLike) -> str:
    p = os.fspath(path)
    return os.fsdecode(p) if isinstance(p, bytes) else p


def read_file(path: str | os.PathLike, name: str | None = None) -> str:
    """The UTF-8 text of the file at ``path``; a ParseError if it cannot be read, is larger
    than MAX_INPUT_BYTES or is not UTF-8. Reads at most MAX_INPUT_BYTES + 1 bytes."""
    shown = name or _path_name(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_INPUT_BYTES + 1)
    except FileNotFoundError:
        raise ParseError(f"cannot read '{shown}': no such file") from None
    except IsADirectoryError:
        raise ParseError(f"cannot read '{shown}': it is a directory") from None
    except PermissionError:
        raise ParseError(f"cannot read '{shown}': permission denied") from None
    except (OSError, ValueError) as err:  # ValueError: a path with a null byte
        reason = getattr(err, "strerror", None) or str(err)
        raise ParseError(f"cannot read '{shown}': {reason}") from None
    return decode_source(data, shown)


def read_stream(stream, name: str = "<stdin>") -> str:
    """The UTF-8 text of a binary stream (or of a text stream), reading at most
    MAX_INPUT_BYTES + 1 bytes (characters)."""
    if stream is None:
        raise ParseError(f"{name}: there is no input to read")
    try:
        data = stream.read(MAX_INPUT_BYTES + 1)
    except UnicodeDecodeError as err:  # a text stream that decodes strictly
        raise ParseError(f"{name}: not UTF-8 text ({err.reason})") from None
    except OSError as err:
        raise ParseError(f"cannot read {name}: {err.strerror or err}") from None
    if isinstance(data, (bytes, bytearray)):
        return decode_source(bytes(data), name)
    if len(data) > MAX_INPUT_BYTES:
        raise _too_large(name)
    return data


def decode_source(data: bytes, name: str = "<string>") -> str:
    """``data`` as UTF-8 text (a leading byte-order mark dropped), or a ParseError naming the
    first byte that is not UTF-8 and its offset."""
    if len(data) > MAX_INPUT_BYTES:
        raise _too_large(name)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ParseError(f"{name}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start})") from None


def _too_large(name: str) -> ParseError:
    return ParseError(f"{name}: input is larger than {_MAX_INPUT_TEXT}, the limit for one module")
