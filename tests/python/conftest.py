"""Test-wide settings.

Hypothesis runs derandomized by default, so a test run is repeatable (CI gives the same
verdict for the same commit). To explore new random cases, run with
``HYPOTHESIS_PROFILE=explore`` (random seeds, more examples per test via each test's own
knobs, e.g. ``PROP_EXAMPLES`` for the propagation property test).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))
