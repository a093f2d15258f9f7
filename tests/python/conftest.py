"""Test-wide settings.

Hypothesis runs derandomized by default, so a test run is repeatable (CI gives the same
verdict for the same commit). To explore new random cases, run with
``HYPOTHESIS_PROFILE=explore`` (random seeds, more examples per test via each test's own
knobs, e.g. ``PROP_EXAMPLES`` for the propagation property test).

What a test module leaves on the heap (imports, caches, session fixtures) is collected once when
the module ends and then frozen (``gc.freeze``): Python's full collections walk only what later
modules make. Without it a worker spends about 17 s in the collector over a run (its heap grows to
1.8 million objects), and pytest's final collections keep it alive for 10 s after its last test.
The youngest generation is collected every 50,000 allocations instead of 700: most of what a test
allocates is gone by then (the property modules' collector time 4.0 -> 2.4 s).

TVM builds run at LLVM optimization level 0 (``DISTIR_LLVM_OPT_LEVEL``, about 4x faster than the
default; set it to 3 to test fully optimized builds): what distir hands TVM is the same, only the
machine code is optimized less.
"""

from __future__ import annotations

import gc
import os

import pytest
from hypothesis import settings

os.environ.setdefault("DISTIR_LLVM_OPT_LEVEL", "0")  # inherited by the processes tests start
gc.set_threshold(50_000, 20, 20)

settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


# The folders whose test modules take longest first: the workers (pytest-xdist, a module each at a
# time) then end together instead of one running a long module alone at the end.
LONGEST_FIRST = ("tvm", "transform", "cli", "system", "analysis", "script")


def pytest_collection_modifyitems(items):
    def folder_rank(item) -> int:
        folder = item.path.parent.name
        return LONGEST_FIRST.index(folder) if folder in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=folder_rank)  # stable: the order within a folder and a module stays


def pytest_collection_finish(session):
    gc.collect()
    gc.freeze()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After a module's last test and its fixtures' teardown: collect what it left, freeze the rest."""
    result = yield
    if nextitem is None or nextitem.path != item.path:
        gc.collect()
        gc.freeze()
    return result
