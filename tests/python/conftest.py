"""Test-wide settings.

Hypothesis runs derandomized by default, so a test run is repeatable (CI gives the same
verdict for the same commit). To explore new random cases, run with
``HYPOTHESIS_PROFILE=explore`` (random seeds, more examples per test via each test's own
knobs, e.g. ``PROP_EXAMPLES`` for the propagation property test).

TVM builds run at LLVM optimization level 0 (``DISTIR_LLVM_OPT_LEVEL``, about 4x faster than the
default; set it to 3 to test fully optimized builds): what distir hands TVM is the same, only the
machine code is optimized less.
"""

from __future__ import annotations

import os

from hypothesis import settings

os.environ.setdefault("DISTIR_LLVM_OPT_LEVEL", "0")  # inherited by the processes tests start

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

