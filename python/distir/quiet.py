"""Silence what native code prints: file descriptors 1 and 2 sent to ``/dev/null`` for a while.

HiGHS sometimes writes a line such as
``HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();`` straight to the
process's stdout from C++, which its display option does not silence; in ``distir-opt x.py >
out.py`` that line lands in the output module. Python's ``sys.stdout`` cannot catch it (the
write does not go through Python), so :func:`native_output_silenced` redirects the file
descriptors themselves around the call.

Threads: the descriptors belong to the whole process, so the redirect is counted. The first
thread to enter saves the real descriptors and redirects; the last to leave flushes C's stdio
buffers (a line HiGHS buffered must not leak out later) and restores them. Meanwhile anything
any thread writes to fd 1 or 2 is dropped too; a solve is short. Python's own streams are
flushed before the redirect, so text printed before a solve still arrives, in order.

pytest's ``capfd`` (and its default fd capture) works the same way, by pointing fd 1 and 2 at
temporary files; the redirect saves and restores whatever the descriptors are, so it nests in
either order. A process whose fd 1 or 2 is closed runs the call without a redirect.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Iterator

__all__ = ["native_output_silenced"]

_FDS = (1, 2)
_lock = threading.Lock()
_depth = 0
_saved: list[tuple[int, int]] = []  # (the descriptor, a duplicate of what it was before the redirect)
_libc = None


def _flush_python() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing to keep in order
            pass


def _flush_c() -> None:
    """``fflush(NULL)``: C's stdio buffers (printf, and std::cout synced with it) written out now,
    while the descriptors still point at /dev/null."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None)
        _libc.fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library to load that way: nothing buffered by it either
        pass


def _redirect() -> None:
    _flush_python()
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in _FDS:
            try:
                saved = os.dup(fd)
            except OSError:  # closed: nothing to protect there
                continue
            _saved.append((fd, saved))
            os.dup2(devnull, fd)
    except BaseException:
        _restore()
        raise
    finally:
        os.close(devnull)


def _restore() -> None:
    _flush_c()
    while _saved:
        fd, saved = _saved.pop()
        os.dup2(saved, fd)
        os.close(saved)


@contextlib.contextmanager
def native_output_silenced() -> Iterator[None]:
    """Run the body with fd 1 and fd 2 on ``/dev/null`` (see the module docstring)."""
    global _depth
    with _lock:
        if _depth == 0:
            _redirect()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _restore()
