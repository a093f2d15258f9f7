"""One ``tvm.compile`` per exported module and target in a process.

``num_workers`` stays symbolic in :func:`distir.tvm.to_relax`'s export, so one build runs at
every count; what is left to avoid is building the same export twice (a driver per test, a
``prefill`` and a ``decode`` driver, a sweep and a run of the same file). :func:`build` keys
its cache by the exported module's structural hash, the sizes bound and the target, and on a
hit also checks structural equality: two modules that share a hash but differ are two builds,
never one served for the other. The cache keeps the last :data:`KEEP` builds.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import tvm
import tvm_ffi

from .disco.run import specialize_and_build
from .targets import DEFAULT_TARGET, parse_target

__all__ = ["KEEP", "build", "cache_info", "clear"]

KEEP = 32  # builds kept; a build of a bundled model is a few MB of machine code
_CACHE: OrderedDict[tuple, tuple[tvm.IRModule, Any, float]] = OrderedDict()
_LOCK = threading.Lock()
_COUNTS = {"hits": 0, "builds": 0}


def build(tvm_mod: tvm.IRModule, target: Any = DEFAULT_TARGET, values: Mapping[str, int] | None = None):
    """``(built, seconds, cached)``: :func:`specialize_and_build` of ``tvm_mod`` at ``values`` (none:
    the symbolic build every count runs) for ``target``, built once per process. ``seconds`` is
    the build's own time, ``cached`` whether this call found it built."""
    tvm_target = parse_target(target)
    bound = tuple(sorted((k, int(v)) for k, v in (values or {}).items()))
    key = (tvm_ffi.structural_hash(tvm_mod), str(tvm_target), bound)
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None and tvm_ffi.structural_equal(hit[0], tvm_mod):
            _CACHE.move_to_end(key)
            _COUNTS["hits"] += 1
            return hit[1], hit[2], True
        t0 = time.perf_counter()
        built = specialize_and_build(tvm_mod, dict(bound), tvm_target)
        seconds = time.perf_counter() - t0
        _CACHE[key] = (tvm_mod, built, seconds)  # a hash collision replaces the other: rebuilt when asked again
        _COUNTS["builds"] += 1
        while len(_CACHE) > KEEP:
            _CACHE.popitem(last=False)
    return built, seconds, False


def cache_info() -> dict[str, int]:
    """Builds made and served from the cache in this process, and how many are kept."""
    with _LOCK:
        return {**_COUNTS, "kept": len(_CACHE)}


def clear() -> None:
    """Forget every build (the next :func:`build` of each compiles again)."""
    with _LOCK:
        _CACHE.clear()
