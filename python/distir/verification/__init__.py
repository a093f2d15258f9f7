"""``distir verify``: does the lowered module compute the global program at every count checked?

:func:`verify` runs the lowered module (the distribute pipeline's, or one written by hand) on
the simulator at each count of a domain and compares it with the single-device run: a
:class:`Verdict` that is a check at every count (one count per class run, every other count
proved to compute what one of them computes), a sampled check, a counterexample, or a refusal naming what stopped it.
The statement and its limits: docs/verify.md.
"""

from .check import DEFAULT_DIM, DEFAULT_MAX_COUNT, verify
from .verdict import CHECKED, COUNTEREXAMPLE, EVERY_COUNT, NOT_CHECKED, Counterexample, Verdict

__all__ = ["CHECKED", "COUNTEREXAMPLE", "DEFAULT_DIM", "EVERY_COUNT", "DEFAULT_MAX_COUNT", "NOT_CHECKED", "Counterexample",
           "Verdict", "verify"]
