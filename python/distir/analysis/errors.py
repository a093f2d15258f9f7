"""The error the analyses raise."""

from __future__ import annotations

from ..errors import DistirError


class AnalysisError(DistirError):
    """A module cannot be analysed as given (wrong view, unknown collective, unbound size)."""
