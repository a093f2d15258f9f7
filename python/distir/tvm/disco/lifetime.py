"""Where a Disco session is destroyed: on a thread of distir's, never a worker's, without the GIL.

TVM destroys a session when its last reference goes, and its destructor shuts the workers down and
joins their threads (worker 0's thread of a ProcessSession, every worker's of a ThreadedSession).
Python lets references go wherever it runs: every Disco handle (a ``DRef``, a ``DModule``, a
function) holds its session, and a handle in a reference cycle (a traceback's frames, a cached
method) is freed by the garbage collector on whichever thread allocates at that moment, a Disco
worker thread running one of distir's collectives included. Two failures follow, both seen:

- the destructor runs on one of the session's own worker threads and joins it: C++ throws
  ``std::system_error`` (resource deadlock) from a destructor and the process aborts;
- the destructor runs with the GIL held while a worker thread waits for the GIL to finish a Python
  collective: the join never returns.

So a session distir ends is *retired* (:func:`retire`): distir takes one reference of its own
through TVM's C API. Any handle dropped anywhere after that only decrements a count. The session is
let go by :func:`sweep`, called on the caller's threads, once distir's reference is the only one
left: the last decrement runs on a helper thread through ctypes (which releases the GIL, so the
workers can finish what they were doing), waited for within a bound. A session still referenced
elsewhere (a handle the user keeps) waits for a later sweep; one whose destructor does not return
(a wedged worker) is left to its helper thread rather than hang the caller.
"""

from __future__ import annotations

import ctypes
import threading

import tvm_ffi
import tvm_ffi.libinfo

__all__ = ["retire", "retired", "strong_references", "sweep"]

_LIB = ctypes.CDLL(tvm_ffi.libinfo.find_libtvm_ffi())
_LIB.TVMFFIObjectIncRef.argtypes = [ctypes.c_void_p]
_LIB.TVMFFIObjectDecRef.argtypes = [ctypes.c_void_p]
_LIB.TVMFFIObjectIncRef.restype = _LIB.TVMFFIObjectDecRef.restype = ctypes.c_int

_RETIRED: list[int] = []  # handles of the sessions distir holds one reference to, until sweep lets them go
_LOCK = threading.Lock()
_STUCK: list[threading.Thread] = []  # helpers whose destructor did not return within the bound


def strong_references(handle: int) -> int:
    """The strong reference count of the TVM object at ``handle`` (the low 32 bits of the header's
    first word, ``TVMFFIObject.combined_ref_count`` in tvm_ffi's C API)."""
    return ctypes.c_uint64.from_address(handle).value & 0xFFFFFFFF


def retire(sess) -> None:
    """Take distir's own reference to ``sess`` (a Disco session) and empty its method cache (whose
    handles refer back to it); the caller then drops ``sess`` and the session is destroyed by a later
    :func:`sweep`, never by a handle let go on another thread. Safe on any thread (it only counts)."""
    cache = getattr(sess, "_cache", None)
    if isinstance(cache, dict):
        cache.clear()
    handle = sess.__chandle__()
    if not handle or _LIB.TVMFFIObjectIncRef(handle) != 0:  # a wrapper TVM never filled (its constructor failed)
        return
    with _LOCK:
        _RETIRED.append(handle)


def retired() -> int:
    """How many retired sessions are still held (referenced elsewhere, or not yet swept)."""
    with _LOCK:
        return len(_RETIRED)


def sweep(wait: float = 10.0) -> int:
    """Destroy every retired session that nothing but distir references any more, each on a helper
    thread without the GIL, waiting ``wait`` seconds at most in all; the number still held. Call it on
    a caller's thread (never from a Disco worker: a session's destructor joins its worker threads)."""
    with _LOCK:
        ready = [h for h in _RETIRED if strong_references(h) == 1]
        for h in ready:
            _RETIRED.remove(h)
        left = len(_RETIRED)
    if not ready:
        return left
    helper = threading.Thread(target=_destroy, args=(ready,), name="distir-disco-destroy", daemon=True)
    helper.start()
    helper.join(wait)
    if helper.is_alive():  # a worker that does not end: its destructor waits for it, the caller does not
        _STUCK.append(helper)
    return left


def _destroy(handles: list[int]) -> None:
    for h in handles:
        _LIB.TVMFFIObjectDecRef(h)  # ctypes.CDLL releases the GIL around the call: the destructor runs here
